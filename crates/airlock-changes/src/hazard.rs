//! Changes that can run code or open a hole the next time a person or a tool touches the
//! workspace, so `apply` writes them only when they are named (and some never).

use std::ffi::OsStr;
use std::path::{Component, Path};

use serde::Serialize;

use crate::node::{Kind, Node};
use crate::scan::Change;

/// Why a change needs a person's explicit yes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Hazard {
    /// `.git/hooks/*`: runs on the next commit, checkout, push.
    GitHook,
    /// `.git/config`, `.gitmodules`, `.gitattributes`: can name programs git runs (core.fsmonitor,
    /// core.sshCommand, filter drivers, submodule URLs).
    GitConfig,
    /// `.envrc`, shell rc and profile files: run by the next shell or direnv.
    ShellStartup,
    /// Editor and agent configuration that runs commands or instructs the next agent
    /// (`.vscode/tasks.json`, `.claude/`, `.codex/`, `AGENTS.md`, …).
    EditorOrAgentConfig,
    /// CI pipelines: run with the repository's secrets on the next push.
    CiWorkflow,
    /// airlock's own configuration.
    AirlockConfig,
    /// setuid or setgid bits: never written.
    SetId,
    /// A device node: never written.
    Device,
    /// A fifo or a socket.
    Special,
    /// A symlink whose target leaves the workspace (absolute, or climbing out with `..`).
    SymlinkOutside,
    /// Larger than the size limit.
    Large,
}

impl Hazard {
    /// Hazards `apply` refuses even when named.
    pub fn never_written(self) -> bool {
        matches!(self, Hazard::SetId | Hazard::Device)
    }

    pub fn describe(self) -> &'static str {
        match self {
            Hazard::GitHook => "git hook: runs on the next git command",
            Hazard::GitConfig => "git configuration: can make git run programs",
            Hazard::ShellStartup => "shell startup file: runs in the next shell",
            Hazard::EditorOrAgentConfig => {
                "editor or agent configuration: can run commands or instruct the next agent"
            }
            Hazard::CiWorkflow => "CI pipeline: runs with the repository's secrets",
            Hazard::AirlockConfig => "airlock configuration",
            Hazard::SetId => "setuid/setgid bit: never applied",
            Hazard::Device => "device node: never applied",
            Hazard::Special => "fifo or socket",
            Hazard::SymlinkOutside => "symlink pointing outside the workspace",
            Hazard::Large => "larger than the size limit",
        }
    }
}

/// Shell and tool startup files, wherever they are in the tree.
const SHELL_STARTUP: &[&str] = &[
    ".envrc",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".kshrc",
    ".cshrc",
    ".tcshrc",
    ".inputrc",
    "config.fish",
];

/// Agent instruction and configuration files, wherever they are.
const AGENT_FILES: &[&str] = &[
    "AGENTS.md",
    "CLAUDE.md",
    "GEMINI.md",
    ".cursorrules",
    ".windsurfrules",
    ".mcp.json",
    "copilot-instructions.md",
];

/// Directories whose whole content configures an editor or agent.
const AGENT_DIRS: &[&str] = &[
    ".vscode",
    ".idea",
    ".claude",
    ".codex",
    ".cursor",
    ".windsurf",
    ".gemini",
    ".continue",
    ".devcontainer",
];

/// CI configuration: directories, then single files.
const CI_DIRS: &[&str] = &[".circleci", ".buildkite", ".gitea", ".forgejo"];
const CI_FILES: &[&str] = &[
    ".gitlab-ci.yml",
    ".travis.yml",
    "Jenkinsfile",
    "azure-pipelines.yml",
    ".drone.yml",
    "bitbucket-pipelines.yml",
    ".woodpecker.yml",
];

fn names(path: &Path) -> Vec<&OsStr> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect()
}

/// Hazards of a path, from its name alone.
pub fn path_hazards(path: &Path) -> Vec<Hazard> {
    let parts = names(path);
    let mut found = Vec::new();
    let Some(last) = parts.last().copied() else {
        return found;
    };
    let has_pair = |a: &str, b: &str| parts.windows(2).any(|w| w[0] == a && w[1] == b);
    let in_dir = |dirs: &[&str]| {
        parts[..parts.len() - 1]
            .iter()
            .any(|p| dirs.iter().any(|d| p == d))
    };
    if has_pair(".git", "hooks") {
        found.push(Hazard::GitHook);
    }
    if has_pair(".git", "config")
        || last == ".gitmodules"
        || last == ".gitattributes"
        || has_pair(".git", "info") && last == "attributes"
    {
        found.push(Hazard::GitConfig);
    }
    if SHELL_STARTUP.iter().any(|n| last == *n) {
        found.push(Hazard::ShellStartup);
    }
    if AGENT_FILES.iter().any(|n| last == *n)
        || in_dir(AGENT_DIRS)
        || AGENT_DIRS.iter().any(|d| last == *d)
    {
        found.push(Hazard::EditorOrAgentConfig);
    }
    if has_pair(".github", "workflows")
        || in_dir(CI_DIRS)
        || CI_DIRS.iter().any(|d| last == *d)
        || CI_FILES.iter().any(|n| last == *n)
    {
        found.push(Hazard::CiWorkflow);
    }
    if parts.contains(&OsStr::new(".airlock")) || has_pair("airlock", "profiles") {
        found.push(Hazard::AirlockConfig);
    }
    found
}

/// Does a symlink at `path` (relative to the workspace) with `target` point outside it?
pub fn symlink_leaves(path: &Path, target: &OsStr) -> bool {
    let target = Path::new(target);
    if target.is_absolute() {
        return true;
    }
    // Depth of the link's directory below the workspace root, then walk the target.
    let mut depth = names(path).len() as i64 - 1;
    for component in target.components() {
        match component {
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            Component::Normal(_) => depth += 1,
            _ => {}
        }
    }
    false
}

/// Every hazard of one change, judged on the session's side (what would be written).
pub fn hazards(change: &Change, size_limit: u64) -> Vec<Hazard> {
    let mut found = path_hazards(&change.path);
    if let Some(new) = &change.new {
        found.extend(node_hazards(&change.path, new, size_limit));
    }
    found.sort();
    found.dedup();
    found
}

fn node_hazards(path: &Path, node: &Node, size_limit: u64) -> Vec<Hazard> {
    let mut found = Vec::new();
    if node.mode & 0o6000 != 0 {
        found.push(Hazard::SetId);
    }
    match node.kind {
        Kind::CharDevice | Kind::BlockDevice => found.push(Hazard::Device),
        Kind::Fifo | Kind::Socket => found.push(Hazard::Special),
        Kind::Symlink
            if node
                .target
                .as_deref()
                .is_some_and(|target| symlink_leaves(path, target)) =>
        {
            found.push(Hazard::SymlinkOutside)
        }
        Kind::File if node.size > size_limit => found.push(Hazard::Large),
        _ => {}
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

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
    fn ordinary_names_are_not_hazards() {
        for path in [
            "src/main.rs",
            ".gitignore",
            "docs/git/hooks.md",
            "hooks/pre-commit",
            ".github/CODEOWNERS",
            "config",
            "my.bashrc.bak",
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
}
