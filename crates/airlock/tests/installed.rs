//! What an installed airlock tells about itself: `--version` says how it was built, truthfully,
//! and `completions` writes scripts each shell accepts and that complete airlock's commands.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::Command;

use support::*;

fn airlock(args: &[&str]) -> String {
    let out = Command::new(airlock_bin()).args(args).output().unwrap();
    assert!(out.status.success(), "airlock {args:?}: {}", stderr(&out));
    String::from_utf8(out.stdout).unwrap()
}

/// Whether the ELF file asks for a program interpreter (the dynamic loader): a static PIE, as
/// scripts/build.sh links airlock, has none. Read from its program headers (ELF64, little endian).
fn has_interpreter(binary: &Path) -> bool {
    const PT_INTERP: u32 = 3;
    let elf = std::fs::read(binary).unwrap();
    assert_eq!(
        &elf[..5],
        b"\x7fELF\x02",
        "not an ELF64 file: {}",
        binary.display()
    );
    let word = |at: usize, len: usize| {
        elf[at..at + len]
            .iter()
            .rev()
            .fold(0usize, |n, b| n << 8 | usize::from(*b))
    };
    let (table, entry_size, entries) = (word(0x20, 8), word(0x36, 2), word(0x38, 2));
    (0..entries).any(|i| word(table + i * entry_size, 4) == PT_INTERP as usize)
}

#[test]
fn version_says_how_it_was_built() {
    let version = airlock(&["--version"]);
    assert!(
        version.starts_with(&format!("airlock {} (commit ", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    let linking = if has_interpreter(airlock_bin()) {
        "; dynamically linked; "
    } else {
        "; statically linked; "
    };
    assert!(version.contains(linking), "expected {linking:?}: {version}");
    assert!(version.contains("-linux-"), "no target: {version}");
    // The commit it was built from, when built in a git checkout (cargo rebuilds on a new HEAD).
    let head = Command::new("git")
        .args(["rev-parse", "--short=12", "HEAD"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output();
    match head {
        Ok(out) if out.status.success() && std::env::var_os("AIRLOCK_GIT_COMMIT").is_none() => {
            let head = String::from_utf8(out.stdout).unwrap();
            assert!(
                version.contains(&format!("(commit {};", head.trim())),
                "{version}"
            );
        }
        _ => eprintln!("no git here: the commit is not compared ({version})"),
    }
}

/// What each shell must offer after "airlock ": every command, a few of them named here.
const COMMANDS: [&str; 6] = ["run", "check", "diff", "apply", "serve", "completions"];

fn shell(name: &str) -> Option<Command> {
    let found = std::env::var_os("PATH")
        .map(|path| std::env::split_paths(&path).any(|dir| dir.join(name).is_file()))
        .unwrap_or(false);
    if !found {
        eprintln!("skipped for {name}: not installed here");
    }
    found.then(|| Command::new(name))
}

fn completed(shell: &mut Command) -> Vec<String> {
    let out = shell.output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|line| line.split('\t').next().unwrap_or_default().to_owned())
        .collect()
}

fn assert_offers_commands(shell: &str, words: &[String]) {
    for command in COMMANDS {
        assert!(
            words.iter().any(|w| w == command),
            "{shell} does not complete {command}: {words:?}"
        );
    }
}

#[test]
fn bash_completion_parses_and_completes_commands() {
    let script = airlock(&["completions", "bash"]);
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("airlock");
    std::fs::write(&file, &script).unwrap();
    let Some(mut syntax) = shell("bash") else {
        return;
    };
    let out = syntax.arg("-n").arg(&file).output().unwrap();
    assert!(out.status.success(), "bash -n: {}", stderr(&out));
    // As bash-completion calls it for "airlock <TAB>" and "airlock completions <TAB>".
    let ask = |words: &str, cword: usize, previous: &str| {
        completed(Command::new("bash").arg("-c").arg(format!(
            "source {}; COMP_WORDS=({words} ''); COMP_CWORD={cword}; _airlock airlock '' {previous}; \
             printf '%s\\n' \"${{COMPREPLY[@]}}\"",
            file.display()
        )))
    };
    assert_offers_commands("bash", &ask("airlock", 1, "airlock"));
    let shells = ask("airlock completions", 2, "completions");
    for name in ["bash", "zsh", "fish"] {
        assert!(shells.iter().any(|w| w == name), "{shells:?}");
    }
}

#[test]
fn zsh_completion_parses_and_registers() {
    let script = airlock(&["completions", "zsh"]);
    assert!(script.starts_with("#compdef airlock"), "{script}");
    let Some(mut zsh) = shell("zsh") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("_airlock");
    std::fs::write(&file, &script).unwrap();
    let out = Command::new("zsh").arg("-n").arg(&file).output().unwrap();
    assert!(out.status.success(), "zsh -n: {}", stderr(&out));
    // Loaded as compinit loads it from fpath: the function is then airlock's completer.
    let registered = completed(zsh.env("HOME", dir.path()).arg("-fc").arg(format!(
        "autoload -Uz compinit && compinit -u -D && source {} && print -r -- ${{_comps[airlock]}}",
        file.display()
    )));
    assert_eq!(registered, ["_airlock"]);
    for command in COMMANDS {
        assert!(
            script.contains(&format!("'{command}:")),
            "no {command}: {script}"
        );
    }
}

#[test]
fn fish_completion_parses_and_completes_commands() {
    let script = airlock(&["completions", "fish"]);
    let Some(mut fish) = shell("fish") else {
        return;
    };
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("airlock.fish");
    std::fs::write(&file, &script).unwrap();
    let out = Command::new("fish")
        .arg("--no-execute")
        .arg(&file)
        .output()
        .unwrap();
    assert!(out.status.success(), "fish --no-execute: {}", stderr(&out));
    let words = completed(
        fish.env("HOME", dir.path())
            .arg("-c")
            .arg(format!("source {}; complete -C 'airlock '", file.display())),
    );
    assert_offers_commands("fish", &words);
}

/// A state directory with a session named `tab-me`, and a config home with a profile `ci-tab`.
struct Names {
    _root: tempfile::TempDir,
    state: std::path::PathBuf,
    config: std::path::PathBuf,
}

fn names() -> Names {
    let root = tempfile::tempdir().unwrap();
    let (state, workspace) = (root.path().join("state"), root.path().join("ws"));
    let config = root.path().join("config");
    std::fs::create_dir_all(config.join("airlock/profiles")).unwrap();
    std::fs::write(config.join("airlock/profiles/ci-tab.toml"), "").unwrap();
    std::fs::create_dir_all(&workspace).unwrap();
    let made = Command::new(airlock_bin())
        .arg("--state-dir")
        .arg(&state)
        .args(["session", "new", "--name", "tab-me", "-w"])
        .arg(&workspace)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", stderr(&made));
    Names {
        _root: root,
        state,
        config,
    }
}

// The scripts complete the user's own names too, asked of `airlock __complete` (core lists them).
#[test]
fn bash_and_fish_complete_session_and_profile_names() {
    let n = names();
    let listed = |what: &str| {
        let out = Command::new(airlock_bin())
            .env("AIRLOCK_STATE_DIR", &n.state)
            .env("XDG_CONFIG_HOME", &n.config)
            .args(["__complete", what])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    assert!(listed("sessions").lines().any(|l| l == "tab-me"));
    assert!(listed("profiles").lines().any(|l| l == "ci-tab"));
    assert!(listed("profiles").lines().any(|l| l == "default"));
    let bin = airlock_bin().display().to_string();
    if let Some(mut bash) = shell("bash") {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("airlock");
        std::fs::write(&file, airlock(&["completions", "bash"])).unwrap();
        let ask = |bash: &mut Command, words: &str, cword: usize| {
            completed(
                bash.env("AIRLOCK_STATE_DIR", &n.state)
                    .env("XDG_CONFIG_HOME", &n.config)
                    .arg("-c")
                    .arg(format!(
                        "source {}; COMP_WORDS=({bin} {words}); COMP_CWORD={cword}; \
                         _airlock_names; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
                        file.display()
                    )),
            )
        };
        assert_eq!(ask(&mut bash, "diff ta", 2), ["tab-me"]);
        let mut bash = Command::new("bash");
        assert_eq!(ask(&mut bash, "run -p ci", 3), ["ci-tab"]);
        let mut bash = Command::new("bash");
        assert_eq!(ask(&mut bash, "run --session t", 3), ["tab-me"]);
    }
    if let Some(mut fish) = shell("fish") {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("airlock.fish");
        std::fs::write(&file, airlock(&["completions", "fish"])).unwrap();
        // The script asks `airlock` on PATH, as an installed one is.
        std::os::unix::fs::symlink(airlock_bin(), dir.path().join("airlock")).unwrap();
        let words = completed(
            fish.env("HOME", dir.path())
                .env("AIRLOCK_STATE_DIR", &n.state)
                .env("XDG_CONFIG_HOME", &n.config)
                .env("PATH", format!("{}:/usr/bin:/bin", dir.path().display()))
                .arg("-c")
                .arg(format!(
                    "source {}; complete -C 'airlock diff '",
                    file.display()
                )),
        );
        assert!(words.iter().any(|w| w == "tab-me"), "{words:?}");
    }
}

// zsh: the session's and profile's values are completed by functions that ask airlock.
#[test]
fn zsh_completes_session_and_profile_names() {
    let script = airlock(&["completions", "zsh"]);
    assert!(
        script.contains("]:ID:_airlock_session_names'"),
        "--session not completed by name"
    );
    assert!(
        script.contains(":_airlock_profile_names'"),
        "-p not completed"
    );
    assert!(
        script.contains("':session -- Session id or name:_airlock_session_names'"),
        "diff's session not completed by name"
    );
    let Some(mut zsh) = shell("zsh") else {
        return;
    };
    let n = names();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("_airlock");
    std::fs::write(&file, &script).unwrap();
    std::os::unix::fs::symlink(airlock_bin(), dir.path().join("airlock")).unwrap();
    // compadd only works inside completion: a stand-in prints what it is given.
    let offered = completed(
        zsh.env("HOME", dir.path())
            .env("AIRLOCK_STATE_DIR", &n.state)
            .env("XDG_CONFIG_HOME", &n.config)
            .env("PATH", format!("{}:/usr/bin:/bin", dir.path().display()))
            .arg("-fc")
            .arg(format!(
                "compdef() {{ :; }}; compadd() {{ print -l -- ${{(P)2}}; }}; source {}; \
                 _airlock_session_names; _airlock_profile_names",
                file.display()
            )),
    );
    assert!(offered.iter().any(|w| w == "tab-me"), "{offered:?}");
    assert!(offered.iter().any(|w| w == "ci-tab"), "{offered:?}");
}
