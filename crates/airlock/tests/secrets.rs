//! `[[secret]]`: inside, the variable holds a placeholder of the value's shape, random per
//! session and the same for a session's runs; the value is nowhere the sandbox or the state
//! directory can show it (its environment, /proc/self/environ, the session's files, the audit
//! log). A source that fails refuses the run or the session, leaving nothing behind. Root and
//! unprivileged user both (as the user, the supervisor is non-dumpable once it holds values).
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::Output;

use support::sessions::run_in;
use support::{ran, stderr, stdout, Mode, World};

const VALUE: &str = "ghp_R8xKq2mZ7vTnW4pYs9LbC3dF6hJ1kA0eGuQi";
const SOURCE_VAR: &str = "AIRLOCK_TEST_CI_TOKEN";

/// A profile whose GITHUB_TOKEN comes from `SOURCE_VAR` in airlock's own environment.
fn secret_profile(w: &World) -> String {
    w.profile(&format!(
        r#"network = {{ allow = ["api.github.com"] }}

[[secret]]
name = "GITHUB_TOKEN"
from = {{ env = "{SOURCE_VAR}" }}
hosts = ["api.github.com"]
inject = {{ header = "Authorization", format = "Bearer {{}}" }}
"#
    ))
}

/// `airlock ARGS…` with the secret's source set in airlock's own environment.
fn airlock_with_value(w: &World, args: &[&str]) -> Output {
    w.airlock()
        .env(SOURCE_VAR, VALUE)
        .args(args)
        .output()
        .unwrap()
}

/// What the sandbox shows of GITHUB_TOKEN: `env`, then /proc/self/environ, one per line.
const SHOW_TOKEN: &str =
    "env | grep '^GITHUB_TOKEN='; cat /proc/self/environ | tr '\\0' '\\n' | grep '^GITHUB_TOKEN='";

/// The placeholder both views show, checked to be of the value's shape and not the value.
fn placeholder_shown(out: &Output) -> String {
    let shown = ran(out);
    assert!(
        !shown.contains(VALUE),
        "the value reached the sandbox: {shown}"
    );
    let lines: Vec<&str> = shown.lines().collect();
    assert_eq!(lines.len(), 2, "env and environ: {shown}\n{}", stderr(out));
    assert_eq!(lines[0], lines[1], "{shown}");
    let placeholder = lines[0].strip_prefix("GITHUB_TOKEN=").unwrap().to_string();
    assert!(placeholder.starts_with("ghp_"), "{placeholder}");
    assert_eq!(placeholder.len(), VALUE.len(), "{placeholder}");
    let spelled: String = placeholder[4..]
        .chars()
        .filter(char::is_ascii_alphabetic)
        .take(7)
        .collect();
    assert_eq!(spelled.to_ascii_lowercase(), "airlock", "{placeholder}");
    placeholder
}

/// No file under `dir` holds the value (read as root or as the identity that wrote them).
fn assert_nowhere_under(dir: &Path) {
    for entry in walk(dir) {
        let Ok(bytes) = std::fs::read(&entry) else {
            continue;
        };
        let found = bytes.windows(VALUE.len()).any(|w| w == VALUE.as_bytes());
        assert!(!found, "{} holds the value", entry.display());
    }
}

fn walk(dir: &Path) -> Vec<std::path::PathBuf> {
    let mut files = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return files;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        match entry.file_type() {
            Ok(kind) if kind.is_dir() => files.extend(walk(&path)),
            Ok(kind) if kind.is_file() => files.push(path),
            _ => {}
        }
    }
    files
}

both_modes!(a_run_sees_the_placeholder_never_the_value);
fn a_run_sees_the_placeholder_never_the_value(w: &World) {
    let profile = secret_profile(w);
    let ws = w.workspace.to_str().unwrap();
    let run = |extra: &[&str]| {
        let mut args = vec!["run", "--workspace", ws, "--profile-file", &profile];
        args.extend_from_slice(extra);
        args.extend_from_slice(&["--", "sh", "-c", SHOW_TOKEN]);
        airlock_with_value(w, &args)
    };
    let first = placeholder_shown(&run(&[]));
    // A run without a session gets a fresh one each time.
    assert_ne!(placeholder_shown(&run(&[])), first);
    // What the caller passes under the secret's name does not reach the sandbox either.
    let out = w
        .airlock()
        .env(SOURCE_VAR, VALUE)
        .env("GITHUB_TOKEN", VALUE)
        .args(["run", "--workspace", ws, "--profile-file", &profile])
        .args(["--", "sh", "-c", SHOW_TOKEN])
        .output()
        .unwrap();
    placeholder_shown(&out);
    // Nothing the sandbox could write holds it: the workspace and a kept session's layer.
    let out = w
        .airlock()
        .env(SOURCE_VAR, VALUE)
        .args([
            "run",
            "--keep",
            "--workspace",
            ws,
            "--profile-file",
            &profile,
        ])
        .args(["--", "sh", "-c", "echo \"$GITHUB_TOKEN\" > token.txt"])
        .output()
        .unwrap();
    ran(&out);
    assert_nowhere_under(&w.state);
    assert_nowhere_under(&w.workspace);
    assert!(w.state.join("audit.log").exists());
}

both_modes!(a_sessions_runs_share_a_placeholder_another_session_has_its_own);
fn a_sessions_runs_share_a_placeholder_another_session_has_its_own(w: &World) {
    let profile = secret_profile(w);
    let session = |w: &World| {
        // Resolving needs the source: session new is run with it set.
        let out = w
            .airlock()
            .env(SOURCE_VAR, VALUE)
            .args(["session", "new", "--workspace"])
            .arg(&w.workspace)
            .args(["--profile-file", &profile])
            .output()
            .unwrap();
        assert!(out.status.success(), "session new: {}", stderr(&out));
        stdout(&out).trim().to_string()
    };
    let in_session =
        |id: &str| airlock_with_value(w, &["run", "--session", id, "--", "sh", "-c", SHOW_TOKEN]);
    let a = session(w);
    let first = placeholder_shown(&in_session(&a));
    assert_eq!(placeholder_shown(&in_session(&a)), first);
    let b = session(w);
    let other = placeholder_shown(&in_session(&b));
    assert_ne!(other, first);
    let kept = std::fs::read_to_string(w.state.join("sessions").join(&a).join("placeholders.json"))
        .unwrap();
    assert!(kept.contains(&first), "{kept}");
    assert_nowhere_under(&w.state);
}

both_modes!(a_missing_source_refuses_the_session_and_the_run);
fn a_missing_source_refuses_the_session_and_the_run(w: &World) {
    let profile = secret_profile(w);
    let out = w
        .airlock()
        .args(["session", "new", "--workspace"])
        .arg(&w.workspace)
        .args(["--profile-file", &profile])
        .output()
        .unwrap();
    assert!(!out.status.success());
    let said = stderr(&out);
    assert!(
        said.contains(&format!("secret GITHUB_TOKEN (from env {SOURCE_VAR})"))
            && said.contains("not set in airlock's environment"),
        "{said}"
    );
    let left: Vec<_> = std::fs::read_dir(w.state.join("sessions"))
        .map(|dir| dir.flatten().map(|e| e.path()).collect())
        .unwrap_or_default();
    assert!(left.is_empty(), "a session was left behind: {left:?}");
    // A run with the source missing never starts its command.
    let out = w
        .airlock()
        .args(["run", "--workspace"])
        .arg(&w.workspace)
        .args(["--profile-file", &profile, "--", "sh", "-c", "echo STARTED"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(!stdout(&out).contains("STARTED"));
    assert!(
        stderr(&out).contains("secret GITHUB_TOKEN"),
        "{}",
        stderr(&out)
    );
    // A session whose source goes missing later: its run is refused the same way.
    let id = {
        let out = airlock_with_value(
            w,
            &[
                "session",
                "new",
                "--workspace",
                w.workspace.to_str().unwrap(),
                "--profile-file",
                &profile,
            ],
        );
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).trim().to_string()
    };
    let out = run_in(w, &id, "echo STARTED");
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(!stdout(&out).contains("STARTED"));
}

/// As the unprivileged user the supervisor's /proc files are root's once it holds values: no
/// process of its user can read its memory or environment.
#[test]
fn the_supervisor_is_not_dumpable_while_it_holds_values() {
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    if !support::is_root() {
        // Only root can see that the files are root's and not the user's.
        eprintln!("skipped: needs root to tell the owner of another uid's /proc files");
        return;
    }
    let profile = secret_profile(&w);
    let mut child = w
        .airlock()
        .env(SOURCE_VAR, VALUE)
        .args(["run", "--workspace"])
        .arg(&w.workspace)
        .args([
            "--profile-file",
            &profile,
            "--",
            "sh",
            "-c",
            "echo up; sleep 3",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    // Once the command printed, the values are held (they are read before its go-ahead).
    let mut line = String::new();
    std::io::BufRead::read_line(
        &mut std::io::BufReader::new(child.stdout.take().unwrap()),
        &mut line,
    )
    .unwrap();
    assert_eq!(line.trim(), "up");
    // setpriv execs airlock: the child's pid is the supervisor's.
    let owner = std::os::unix::fs::MetadataExt::uid(
        &std::fs::metadata(format!("/proc/{}/mem", child.id())).unwrap(),
    );
    assert!(child.wait().unwrap().success());
    assert_eq!(
        owner, 0,
        "the supervisor's /proc/PID/mem belongs to uid {owner}"
    );
}

/// `policy show` prints a secret's source and hosts, never its value, even with the source set.
#[test]
fn policy_show_names_the_source_never_the_value() {
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    let profile = secret_profile(&w);
    let out = airlock_with_value(&w, &["policy", "show", &profile]);
    assert!(out.status.success(), "{}", stderr(&out));
    let shown = stdout(&out);
    assert!(
        !shown.contains(VALUE) && !stderr(&out).contains(VALUE),
        "{shown}"
    );
    for said in [
        "# profile profile, from ",
        &format!("env = \"{SOURCE_VAR}\""),
        "hosts = [\"api.github.com\"]",
        "name = \"GITHUB_TOKEN\"",
        // As a profile writes it, not in bytes.
        "memory = \"2GiB\"",
    ] {
        assert!(shown.contains(said), "{said:?} not in {shown}");
    }
    // What it prints is the same profile, read back.
    let again = w.base.join("shown.toml");
    w.write(&again, &shown);
    let out = w
        .airlock()
        .args(["policy", "check"])
        .arg(&again)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    let out = airlock_with_value(&w, &["policy", "show", &profile, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout(&out).contains(VALUE));
    let json: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(json["profile"], "profile");
    assert_eq!(json["policy"]["secret"][0]["from"]["env"], SOURCE_VAR);
    assert_eq!(json["policy"]["secret"][0]["hosts"][0], "api.github.com");
    // Without a name: the built-in default (no profiles where this user's are looked for).
    let out = w.airlock().args(["policy", "show"]).output().unwrap();
    assert!(
        stdout(&out).contains("network = \"none\""),
        "{}",
        stdout(&out)
    );
}

#[test]
fn policy_check_says_valid_or_where_it_is_not() {
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    let good = secret_profile(&w);
    let check = |file: &str, json: bool| {
        let mut cmd = w.airlock();
        cmd.args(["policy", "check", file]);
        if json {
            cmd.arg("--json");
        }
        cmd.output().unwrap()
    };
    let out = check(&good, false);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    assert_eq!(
        stdout(&out).trim(),
        format!("{good}: valid (profile profile, 1 secret)")
    );
    // What the injector cannot keep from the sandbox is said: a body that echoes the value.
    assert!(
        stderr(&out).contains("warning") && stderr(&out).contains("echoes the request"),
        "{}",
        stderr(&out)
    );
    let said: serde_json::Value = serde_json::from_slice(&check(&good, true).stdout).unwrap();
    assert_eq!(said["valid"], true);
    assert_eq!(said["secrets"], 1);
    // A secret whose host [network] does not allow: line 6 names it.
    let bad = w.base.join("bad.toml");
    let text = std::fs::read_to_string(&good)
        .unwrap()
        .replace("hosts = [\"api.github.com\"]", "hosts = [\"evil.test\"]");
    w.write(&bad, &text);
    let bad = bad.to_str().unwrap();
    let out = check(bad, false);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stdout(&out).is_empty());
    assert!(
        stderr(&out).contains(&format!("{bad}:6:")) && stderr(&out).contains("evil.test"),
        "{}",
        stderr(&out)
    );
    let out = check(bad, true);
    assert_eq!(out.status.code(), Some(2));
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["valid"], false);
    assert_eq!(said["code"], "profile_invalid");
    // A file that is not there is not a valid profile either.
    let missing = w.base.join("missing.toml");
    assert_eq!(
        check(missing.to_str().unwrap(), false).status.code(),
        Some(2)
    );
}

both_modes!(a_file_source_with_another_name_the_sandbox_sees_is_refused);
fn a_file_source_with_another_name_the_sandbox_sees_is_refused(w: &World) {
    use std::os::unix::fs::PermissionsExt as _;
    let source = w.outside.join("gh-token");
    w.write(&source, &format!("{VALUE}\n"));
    std::fs::set_permissions(&source, std::fs::Permissions::from_mode(0o600)).unwrap();
    // The same file under a second name, inside the workspace.
    std::fs::hard_link(&source, w.workspace.join("notes.txt")).unwrap();
    let run = |profile: &str| {
        w.airlock()
            .args(["run", "--workspace"])
            .arg(&w.workspace)
            .args(["--profile-file", profile, "--", "sh", "-c"])
            .arg("echo STARTED; cat notes.txt; echo GITHUB_TOKEN=$GITHUB_TOKEN")
            .output()
            .unwrap()
    };
    // The harm: the sandbox reads the value through the other name.
    let plain = w.profile("network = \"none\"\n");
    let out = run(&plain);
    assert!(ran(&out).contains(VALUE), "{}", stderr(&out));
    let profile = w.profile(&format!(
        r#"network = {{ allow = ["api.github.com"] }}

[[secret]]
name = "GITHUB_TOKEN"
from = {{ file = "{}" }}
hosts = ["api.github.com"]
inject = {{ header = "Authorization", format = "Bearer {{}}" }}
"#,
        source.display()
    ));
    let out = run(&profile);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(!stdout(&out).contains("STARTED"), "the command never ran");
    let said = stderr(&out);
    assert!(
        said.contains("secret GITHUB_TOKEN") && said.contains("more than one name (hard links)"),
        "{said}"
    );
    assert!(!said.contains(VALUE), "{said}");
    // One name again: the run goes on, with the placeholder.
    std::fs::remove_file(w.workspace.join("notes.txt")).unwrap();
    let out = run(&profile);
    let shown = ran(&out);
    assert!(
        shown.contains("STARTED") && !shown.contains(VALUE),
        "{shown}\n{}",
        stderr(&out)
    );
    assert!(shown.contains("GITHUB_TOKEN=ghp_"), "{shown}");
}
