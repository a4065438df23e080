//! Hazards a review would miss (issue 14's rest): a profile's own tool configuration, content
//! `git status` does not show, and names that are a host name to a case-insensitive or
//! normalising reader. Each is shown doing harm on a host without airlock, then refused by
//! `airlock apply` unless named. Every test runs as root and as an unprivileged user.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::Output;

use support::sessions::{demo_dir, diff_entries, diff_json, host_sh, new_session, run_in};
use support::{ran, stderr, stdout, Mode, World};

fn airlock(w: &World, args: &[&str]) -> Output {
    w.airlock().args(args).output().unwrap()
}

/// The project's build script reads `.buildrc` when there is one: a convention of this project
/// that no built-in table can know.
const BUILD_SH: &str = "#!/bin/sh\n[ -f .buildrc ] && . ./.buildrc\necho built\n";

both_modes!(
    a_profile_entry_makes_its_tool_configuration_a_hazard,
    |w: &World| {
        let plant = |mark: &Path| format!("printf 'touch {}\\n' > .buildrc", mark.display());
        // Without airlock: the project's build runs what a planted .buildrc says.
        let demo = demo_dir(w, "demo");
        w.write(&demo.join("build.sh"), BUILD_SH);
        let ran_on_host = w.outside.join("PWNED-buildrc-host");
        let out = host_sh(w, &demo, &format!("{}; sh build.sh", plant(&ran_on_host)));
        assert!(ran_on_host.exists(), "{}", stderr(&out));

        w.write(&w.workspace.join("build.sh"), BUILD_SH);
        let profile = w.outside.join("builder.toml");
        w.write(
            &profile,
            "[apply]\ntool_config = [\n  { path = \".buildrc\", reason = \"build.sh: sourced by every build\" },\n]\n",
        );
        // The built-in tables do not know the file: with the default profile it is a dot-file no
        // table explains, configuration until named all the same.
        let plain = new_session(w, &[]);
        let mark = w.outside.join("PWNED-buildrc-applied");
        ran(&run_in(w, &plain, &plant(&mark)));
        assert_eq!(
            diff_entries(w, &plain)(".buildrc")["hazards"],
            serde_json::json!(["unexplained_dot_path"])
        );
        ran(&airlock(w, &["discard", &plain]));

        // The profile's entry makes it one: shown with its reason, and left out by apply.
        let id = new_session(w, &["--profile-file", profile.to_str().unwrap()]);
        ran(&run_in(w, &id, &plant(&mark)));
        let entry = diff_entries(w, &id)(".buildrc");
        assert_eq!(entry["hazards"], serde_json::json!(["tool_config"]));
        assert_eq!(
            entry["reasons"],
            serde_json::json!([".buildrc: build.sh: sourced by every build"])
        );
        let applied = airlock(w, &["apply", &id]);
        assert_eq!(applied.status.code(), Some(1), "{}", stderr(&applied));
        assert!(
            stdout(&applied).contains("build.sh: sourced by every build"),
            "{}",
            stdout(&applied)
        );
        assert!(!w.workspace.join(".buildrc").exists());
        ran(&host_sh(w, &w.workspace, "sh build.sh"));
        assert!(!mark.exists(), "the build ran the planted .buildrc");
        // Named, it is written.
        let named = airlock(w, &["apply", &id, "--allow-hazard", ".buildrc"]);
        assert_eq!(named.status.code(), Some(0), "{}", stderr(&named));
        assert!(w.workspace.join(".buildrc").exists());
    }
);

/// A package whose `npm test` runs `jest`, which npm looks for in `node_modules/.bin` first.
const PACKAGE_JSON: &str =
    r#"{ "name": "app", "version": "1.0.0", "scripts": { "test": "jest" } }"#;

fn plant_jest(mark: &Path) -> String {
    format!(
        "set -e; mkdir -p node_modules/.bin; printf '#!/bin/sh\\ntouch {}\\n' > node_modules/.bin/jest; chmod +x node_modules/.bin/jest",
        mark.display()
    )
}

/// Run the package's test script as `npm run` does: with `node_modules/.bin` first on PATH.
fn npm_test(w: &World, dir: &Path) -> Output {
    match Path::new("/usr/bin/npm").exists() {
        true => w
            .command("/usr/bin/npm")
            .current_dir(dir)
            .args(["run", "-s", "test"])
            .env("npm_config_cache", w.outside.join("npm-cache"))
            .env("npm_config_update_notifier", "false")
            .output()
            .unwrap(),
        false => host_sh(w, dir, "PATH=\"$PWD/node_modules/.bin:$PATH\" jest"),
    }
}

fn git_repository(w: &World, dir: &Path) {
    w.write(&dir.join(".gitignore"), "node_modules/\ndist/\n");
    w.write(&dir.join("package.json"), PACKAGE_JSON);
    ran(&host_sh(
        w,
        dir,
        "git init -q . && git add -A && git -c user.name=t -c user.email=t@t commit -qm init",
    ));
}

both_modes!(
    ignored_content_that_runs_is_listed_apart_and_not_applied,
    |w: &World| {
        // Without airlock: git status shows nothing of a planted node_modules/.bin/jest, and
        // `npm test` runs it.
        let demo = demo_dir(w, "demo");
        git_repository(w, &demo);
        let ran_on_host = w.outside.join("PWNED-jest-host");
        ran(&host_sh(w, &demo, &plant_jest(&ran_on_host)));
        let status = host_sh(w, &demo, "git status --porcelain --untracked-files=all");
        assert_eq!(stdout(&status), "", "{}", stderr(&status));
        let out = npm_test(w, &demo);
        assert!(
            ran_on_host.exists(),
            "npm did not run the planted jest: {}",
            stderr(&out)
        );

        // In a session: the same, with plain ignored build output and an ordinary file.
        git_repository(w, &w.workspace);
        let id = new_session(w, &[]);
        let mark = w.outside.join("PWNED-jest-applied");
        let script = format!(
            "{}; mkdir -p dist src; echo bundle > dist/app.js; echo code > src/app.js",
            plant_jest(&mark)
        );
        ran(&run_in(w, &id, &script));
        // node_modules/ and dist/ are trees git ignores: one row each, the hazard in its row.
        let diff = diff_json(w, &id);
        let tree = |root: &str| {
            diff["trees"]
                .as_array()
                .unwrap()
                .iter()
                .find(|t| t["root"] == root)
                .unwrap_or_else(|| panic!("no {root} tree in {diff:#}"))
                .clone()
        };
        let modules = tree("node_modules");
        assert_eq!(
            modules["hazard_paths"],
            serde_json::json!([{ "path": "node_modules/.bin/jest", "hazards": ["hidden_from_git"] }])
        );
        assert_eq!(modules["executables"], 1);
        assert_eq!(tree("dist")["hazards"], 0);
        let entry = diff_entries(w, &id);
        assert_eq!(entry("src/app.js")["ignored"], false);
        // The text diff lists them apart, on stderr, so that the patch still applies.
        let text = airlock(w, &["diff", &id, "--name-status"]);
        let listed = stderr(&text);
        assert!(
            listed.contains(
                "node_modules/  1 file, 2 dirs, 1 executable, 1 hazard (hidden_from_git 1)"
            ),
            "{listed}"
        );
        assert!(
            listed.contains("dist/  1 file, 1 dir, 0 executables, 0 hazards"),
            "{listed}"
        );
        assert!(!listed.contains("src/app.js"), "{listed}");
        // Named, a tree's changes are shown one by one.
        let opened = airlock(w, &["diff", &id, "--name-status", "node_modules"]);
        assert!(
            stdout(&opened).contains("node_modules/.bin/jest"),
            "{}",
            stdout(&opened)
        );

        // Trees are written only when named: neither is, so neither is written.
        let applied = airlock(w, &["apply", &id]);
        assert_eq!(applied.status.code(), Some(1), "{}", stderr(&applied));
        assert!(!w.workspace.join("node_modules/.bin/jest").exists());
        assert!(!w.workspace.join("dist/app.js").exists());
        assert!(w.workspace.join("src/app.js").exists());
        let dist = airlock(w, &["apply", &id, "dist"]);
        assert_eq!(dist.status.code(), Some(0), "{}", stderr(&dist));
        assert!(w.workspace.join("dist/app.js").exists());
        assert!(!w.workspace.join("node_modules/.bin/jest").exists());
        let _ = npm_test(w, &w.workspace);
        assert!(!mark.exists(), "npm test ran the planted jest after apply");
    }
);

both_modes!(plain_ignored_output_is_left_out_when_asked, |w: &World| {
    git_repository(w, &w.workspace);
    // The invoking user's global excludes count, as git counts them.
    let git_config = w.home.join(".config/git");
    std::fs::create_dir_all(&git_config).unwrap();
    w.write(&git_config.join("ignore"), "*.swp\n");
    let id = new_session(w, &[]);
    // The session's own .gitignore hides its file too: the rules are the applied tree's.
    let script = "set -e; mkdir -p dist; echo bundle > dist/app.js; echo secret.txt >> .gitignore; echo x > secret.txt; echo code > app.js; echo s > app.js.swp";
    ran(&run_in(w, &id, script));
    let entry = diff_entries(w, &id);
    assert_eq!(entry("app.js.swp")["ignored"], true);
    assert_eq!(entry("secret.txt")["ignored"], true);
    assert_eq!(entry(".gitignore")["ignored"], false);
    let out = airlock(w, &["apply", &id, "--no-ignored", "--json"]);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let result = |path: &str| {
        report["items"]
            .as_array()
            .unwrap()
            .iter()
            .find(|i| i["path"] == path)
            .unwrap_or_else(|| panic!("{path} not in {report:#}"))["result"]
            .clone()
    };
    assert_eq!(result("dist/app.js"), "ignored");
    assert_eq!(result("secret.txt"), "ignored");
    assert_eq!(result("app.js"), "applied");
    assert!(!w.workspace.join("dist/app.js").exists());
    assert!(!w.workspace.join("secret.txt").exists());
    assert!(w.workspace.join("app.js").exists());
});

const HOST_MAKEFILE: &str = "all:\n\t@echo host build\n";

fn plant_makefile(mark: &Path) -> String {
    format!("printf 'all:\\n\\t@touch {}\\n' > makefile", mark.display())
}

both_modes!(
    a_name_that_folds_to_a_host_name_is_not_applied,
    |w: &World| {
        // Without airlock: beside the project's Makefile, GNU make reads a planted makefile.
        let demo = demo_dir(w, "demo");
        w.write(&demo.join("Makefile"), HOST_MAKEFILE);
        let ran_on_host = w.outside.join("PWNED-make-host");
        let out = host_sh(
            w,
            &demo,
            &format!("{}; make -s", plant_makefile(&ran_on_host)),
        );
        assert!(
            ran_on_host.exists(),
            "make did not read makefile: {}",
            stderr(&out)
        );

        w.write(&w.workspace.join("Makefile"), HOST_MAKEFILE);
        w.write(&w.workspace.join("caf\u{e9}.txt"), "composed\n");
        let id = new_session(w, &[]);
        let mark = w.outside.join("PWNED-make-applied");
        let script = format!(
            "{}; echo decomposed > 'cafe\u{301}.txt'; echo ok > notes.txt",
            plant_makefile(&mark)
        );
        ran(&run_in(w, &id, &script));
        let entry = diff_entries(w, &id);
        let collision = serde_json::json!(["name_collision"]);
        assert_eq!(entry("makefile")["hazards"], collision);
        assert_eq!(entry("cafe\u{301}.txt")["hazards"], collision);
        assert_eq!(entry("notes.txt")["hazards"], serde_json::json!([]));
        let applied = airlock(w, &["apply", &id]);
        assert_eq!(applied.status.code(), Some(1), "{}", stderr(&applied));
        assert!(!w.workspace.join("makefile").exists());
        assert!(!w.workspace.join("cafe\u{301}.txt").exists());
        assert!(w.workspace.join("notes.txt").exists());
        let out = host_sh(w, &w.workspace, "make -s");
        assert_eq!(stdout(&out), "host build\n", "{}", stderr(&out));
        assert!(!mark.exists());
        // Named, it is written (and make then reads it, as it would have).
        let named = airlock(w, &["apply", &id, "--allow-hazard", "makefile"]);
        assert_eq!(named.status.code(), Some(1), "{}", stderr(&named));
        assert!(w.workspace.join("makefile").exists());
        assert!(!w.workspace.join("cafe\u{301}.txt").exists());
    }
);

/// Writes a `.pth` file into the virtualenv's site-packages that touches `mark`: Python runs
/// each `import` line of one at every start.
fn plant_pth(mark: &Path) -> String {
    format!(
        "set -e; for d in .venv/lib/python3*/site-packages; do printf 'import os; open(\"{}\", \"w\")\\n' > \"$d/zz-evil.pth\"; done",
        mark.display()
    )
}

both_modes!(
    an_ignored_pth_file_in_a_virtualenv_is_not_applied,
    |w: &World| {
        let python = Path::new("/usr/bin/python3");
        if !python.exists() {
            assert!(
                std::env::var_os("AIRLOCK_TEST_REQUIRE_ROOT").is_none(),
                "/usr/bin/python3 is missing (scripts/test.sh installs it)"
            );
            return;
        }
        let venv = |dir: &Path| {
            ran(&host_sh(
                w,
                dir,
                "printf '.venv/\\n' > .gitignore && /usr/bin/python3 -m venv --without-pip .venv && git init -q . && git add -A && git -c user.name=t -c user.email=t@t commit -qm init",
            ))
        };
        // Without airlock: git status shows nothing of the .pth, and the next python runs it.
        let demo = demo_dir(w, "demo");
        venv(&demo);
        let ran_on_host = w.outside.join("PWNED-pth-host");
        ran(&host_sh(w, &demo, &plant_pth(&ran_on_host)));
        let status = host_sh(w, &demo, "git status --porcelain --untracked-files=all");
        assert_eq!(stdout(&status), "", "{}", stderr(&status));
        ran(&host_sh(w, &demo, ".venv/bin/python -c pass"));
        assert!(ran_on_host.exists(), "python did not run the planted .pth");

        // In a session: diff says so, and apply leaves it out.
        venv(&w.workspace);
        let id = new_session(w, &[]);
        let mark = w.outside.join("PWNED-pth-applied");
        ran(&run_in(w, &id, &plant_pth(&mark)));
        let out = airlock(w, &["diff", &id, "--json"]);
        let diff: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        // The virtualenv git ignores is one tree, its hazards named in its row.
        let venv = diff["trees"]
            .as_array()
            .unwrap()
            .iter()
            .find(|t| t["root"] == ".venv")
            .unwrap_or_else(|| panic!("no .venv tree in {diff:#}"));
        let pth = venv["hazard_paths"]
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"].as_str().unwrap().ends_with("zz-evil.pth"))
            .unwrap_or_else(|| panic!("no .pth in {venv:#}"));
        assert_eq!(pth["hazards"], serde_json::json!(["hidden_from_git"]));
        let applied = airlock(w, &["apply", &id]);
        assert_eq!(applied.status.code(), Some(1), "{}", stderr(&applied));
        ran(&host_sh(w, &w.workspace, ".venv/bin/python -c pass"));
        assert!(!mark.exists(), "python ran the planted .pth after apply");
    }
);

both_modes!(
    an_apply_onto_a_full_disk_leaves_no_temporary_file,
    |w: &World| {
        // The workspace on a filesystem of 256 KiB (a tmpfs the test mounts, root's to make, the
        // world's user's to own), and a session with a file of 1 MiB: the apply cannot write it.
        use std::os::unix::fs::MetadataExt as _;
        let owner = std::fs::metadata(&w.workspace).unwrap();
        let options = format!(
            "size=256k,mode=0755,uid={},gid={}",
            owner.uid(),
            owner.gid()
        );
        let mounted = std::process::Command::new("mount")
            .args(["-t", "tmpfs", "-o", &options, "tmpfs"])
            .arg(&w.workspace)
            .status()
            .unwrap();
        assert!(mounted.success(), "mount a tmpfs on the workspace");
        struct Unmount<'a>(&'a Path);
        impl Drop for Unmount<'_> {
            fn drop(&mut self) {
                let _ = std::process::Command::new("umount").arg(self.0).status();
            }
        }
        let _unmount = Unmount(&w.workspace);
        let id = new_session(w, &[]);
        ran(&run_in(
            w,
            &id,
            "head -c 1048576 /dev/zero > big.bin && echo small > small.txt",
        ));
        let applied = w.airlock().args(["apply", &id]).output().unwrap();
        let said = format!("{}{}", stdout(&applied), stderr(&applied));
        assert_eq!(applied.status.code(), Some(1), "{said}");
        assert!(said.contains("filesystem is full"), "{said}");
        let left: Vec<String> = std::fs::read_dir(&w.workspace)
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with(".airlock-"))
            .collect();
        assert!(
            left.is_empty(),
            "temporary files left in the workspace: {left:?}"
        );
    }
);
