use std::os::unix::fs::PermissionsExt as _;

use airlock_policy::SecretSource;

use super::*;
use crate::session::{NewSession, ProfileRef};

const VALUE: &str = "ghp_R8xKq2mZ7vTnW4pYs9LbC3dF6hJ1kA0eGuQi";

fn spec(name: &str, source: SecretSource) -> SecretSpec {
    SecretSpec {
        name: name.into(),
        source,
        hosts: vec!["api.github.com".into()],
        inject: Injection::Header {
            name: "Authorization".into(),
            format: "Bearer {}".into(),
        },
    }
}

fn profile_with(specs: Vec<SecretSpec>) -> Profile {
    let mut profile = Profile::builtin_default();
    profile.secrets = specs;
    profile
}

/// A run's secrets, as a run gets them: placeholders first, then the values.
fn resolve(profile: &Profile) -> Result<Vec<airlock_egress::inject::Secret>, Error> {
    for_run(profile, &placeholders_for_run(profile, None)?)
}

/// The error's message, checked to be the stable code and never to hold `VALUE`.
fn failure(source: SecretSource) -> String {
    let err = resolve(&profile_with(vec![spec("TOKEN", source)])).unwrap_err();
    assert_eq!(err.code().0, "secret_unavailable");
    let message = err.to_string();
    assert!(message.starts_with("secret TOKEN (from "), "{message}");
    assert!(!message.contains(VALUE), "{message}");
    message
}

fn secret_file(dir: &Path, text: &str, mode: u32) -> PathBuf {
    let path = dir.join("secret");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(mode)).unwrap();
    path
}

#[test]
fn an_env_source_is_read_from_airlocks_own_environment() {
    std::env::set_var("AIRLOCK_TEST_SECRET_ENV_OK", VALUE);
    let secrets = resolve(&profile_with(vec![spec(
        "GITHUB_TOKEN",
        SecretSource::Env("AIRLOCK_TEST_SECRET_ENV_OK".into()),
    )]))
    .unwrap();
    assert_eq!(secrets.len(), 1);
    assert_eq!(secrets[0].value.as_str(), VALUE);
    assert_eq!(secrets[0].name, "GITHUB_TOKEN");
    assert_eq!(secrets[0].hosts, ["api.github.com"]);
    let placeholder = &secrets[0].placeholder;
    let spelled: String = placeholder[4..]
        .chars()
        .filter(char::is_ascii_alphabetic)
        .take(7)
        .collect();
    assert!(
        placeholder.starts_with("ghp_") && spelled == "AiRloCk",
        "{placeholder}"
    );
    let debug = format!("{secrets:?}");
    assert!(!debug.contains(VALUE), "{debug}");
    assert!(debug.contains("<redacted>"), "{debug}");
}

#[test]
fn a_missing_or_empty_env_source_is_refused() {
    let message = failure(SecretSource::Env("AIRLOCK_TEST_SECRET_UNSET".into()));
    assert!(
        message.contains("env AIRLOCK_TEST_SECRET_UNSET"),
        "{message}"
    );
    assert!(
        message.contains("not set in airlock's environment"),
        "{message}"
    );
    std::env::set_var("AIRLOCK_TEST_SECRET_EMPTY", "\n");
    let message = failure(SecretSource::Env("AIRLOCK_TEST_SECRET_EMPTY".into()));
    assert!(message.contains("it is empty"), "{message}");
}

#[test]
fn a_value_of_two_lines_is_refused() {
    std::env::set_var(
        "AIRLOCK_TEST_SECRET_TWO_LINES",
        format!("{VALUE}\r\nHost: evil"),
    );
    let message = failure(SecretSource::Env("AIRLOCK_TEST_SECRET_TWO_LINES".into()));
    assert!(message.contains("control character"), "{message}");
}

#[test]
fn a_file_source_drops_one_trailing_newline() {
    let dir = tempfile::tempdir().unwrap();
    let path = secret_file(dir.path(), &format!("{VALUE}\n"), 0o600);
    let secrets = resolve(&profile_with(vec![spec(
        "T",
        SecretSource::File(path.clone()),
    )]))
    .unwrap();
    assert_eq!(secrets[0].value.as_str(), VALUE);
    std::fs::write(&path, format!("{VALUE}\r\n")).unwrap();
    let secrets = resolve(&profile_with(vec![spec("T", SecretSource::File(path))])).unwrap();
    assert_eq!(secrets[0].value.as_str(), VALUE);
}

#[test]
fn a_file_others_could_write_or_not_there_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = secret_file(dir.path(), VALUE, 0o620);
    let message = failure(SecretSource::File(path.clone()));
    assert!(
        message.contains("writable by its group or by others"),
        "{message}"
    );
    assert!(
        message.contains(&format!("file {}", path.display())),
        "{message}"
    );
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o606)).unwrap();
    failure(SecretSource::File(path.clone()));
    let message = failure(SecretSource::File(dir.path().join("absent")));
    assert!(message.contains("cannot read it"), "{message}");
    let message = failure(SecretSource::File(dir.path().to_path_buf()));
    assert!(message.contains("not a regular file"), "{message}");
    let empty = secret_file(dir.path(), "", 0o600);
    assert!(failure(SecretSource::File(empty)).contains("it is empty"));
}

#[test]
fn a_file_too_large_or_not_text_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let path = secret_file(dir.path(), &"x".repeat(source::MAX_VALUE_BYTES + 1), 0o600);
    assert!(failure(SecretSource::File(path.clone())).contains("more than 65536 bytes"));
    std::fs::write(&path, [0xff, 0xfe, b'a']).unwrap();
    assert!(failure(SecretSource::File(path)).contains("not UTF-8"));
}

fn command(script: &str) -> SecretSource {
    SecretSource::Command(vec!["/bin/sh".into(), "-c".into(), script.into()])
}

#[test]
fn a_command_source_is_its_output() {
    let secrets = resolve(&profile_with(vec![spec(
        "T",
        command(&format!("echo {VALUE}")),
    )]))
    .unwrap();
    assert_eq!(secrets[0].value.as_str(), VALUE);
}

#[test]
fn a_command_that_fails_prints_nothing_or_cannot_start_is_refused() {
    // The value quoted in two halves: the command line itself does not hold it.
    let message = failure(command(&format!(
        "echo {}''{}; exit 3",
        &VALUE[..8],
        &VALUE[8..]
    )));
    assert!(message.contains("it failed (exit status: 3)"), "{message}");
    assert!(failure(command("true")).contains("it is empty"));
    let message = failure(SecretSource::Command(vec![
        "/nonexistent/airlock-pass".into()
    ]));
    assert!(
        message.contains("cannot start /nonexistent/airlock-pass"),
        "{message}"
    );
    // Its stdin is closed: a command that reads it does not wait for a person.
    assert!(failure(command("read line || exit 1; echo \"$line\"")).contains("failed"));
}

#[test]
fn a_command_that_prints_too_much_is_refused() {
    let message = failure(command("head -c 70000 /dev/zero | tr '\\0' x"));
    assert!(message.contains("more than 65536 bytes"), "{message}");
}

#[test]
fn a_command_that_does_not_finish_is_stopped() {
    let started = std::time::Instant::now();
    // It holds its stdout open without printing: the timeout ends it, not its end.
    let message = failure(command("exec sleep 30"));
    assert!(message.contains("did not finish within 10 s"), "{message}");
    assert!(started.elapsed() < std::time::Duration::from_secs(15));
}

#[test]
fn a_value_of_no_letters_or_digits_is_refused() {
    std::env::set_var("AIRLOCK_TEST_SECRET_NO_LETTERS", "ghp_----");
    let message = failure(SecretSource::Env("AIRLOCK_TEST_SECRET_NO_LETTERS".into()));
    assert!(message.contains("no letter or digit"), "{message}");
}

fn new_session(state: &Path, workspace: &Path) -> Session {
    Session::create(
        state,
        NewSession {
            workspace,
            name: None,
            profile: ProfileRef {
                name: "default".into(),
                file: None,
            },
            image: None,
            token: None,
            way: airlock_jail::Way::of_this_process(),
        },
    )
    .unwrap()
}

#[test]
fn a_session_keeps_its_placeholders_and_another_gets_others() {
    let state = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    std::env::set_var("AIRLOCK_TEST_SECRET_SESSION", VALUE);
    let profile = profile_with(vec![spec(
        "T",
        SecretSource::Env("AIRLOCK_TEST_SECRET_SESSION".into()),
    )]);
    let first = new_session(state.path(), workspace.path());
    let made = for_new_session(&profile).unwrap();
    keep_for_session(&first, &made).unwrap();
    let file = first.dir.join(PLACEHOLDERS_FILE);
    let mode = std::fs::metadata(&file).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read_to_string(&file).unwrap();
    assert!(
        text.contains(&made[0].placeholder) && !text.contains(VALUE),
        "{text}"
    );
    let again = placeholders_for_run(&profile, Some(&first)).unwrap();
    assert_eq!(again, made);
    let secrets = for_run(&profile, &again).unwrap();
    assert_eq!(secrets[0].placeholder, made[0].placeholder);
    assert_eq!(secrets[0].value.as_str(), VALUE);

    let second = new_session(state.path(), workspace.path());
    let theirs = placeholders_for_run(&profile, Some(&second)).unwrap();
    assert_ne!(theirs, made);
    // Made for the first run of a session that had none, and kept for the next.
    assert_eq!(
        placeholders_for_run(&profile, Some(&second)).unwrap(),
        theirs
    );
    assert_ne!(placeholders_for_run(&profile, None).unwrap(), made);
}

#[test]
fn a_kept_placeholder_needs_no_read_before_the_sandbox_but_the_values_do() {
    let state = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    std::env::set_var("AIRLOCK_TEST_SECRET_ROTATED", VALUE);
    let profile = profile_with(vec![spec(
        "T",
        SecretSource::Env("AIRLOCK_TEST_SECRET_ROTATED".into()),
    )]);
    let session = new_session(state.path(), workspace.path());
    keep_for_session(&session, &for_new_session(&profile).unwrap()).unwrap();
    std::env::remove_var("AIRLOCK_TEST_SECRET_ROTATED");
    let placeholders = placeholders_for_run(&profile, Some(&session)).unwrap();
    let err = for_run(&profile, &placeholders).unwrap_err();
    assert_eq!(err.code().0, "secret_unavailable");
}

#[test]
fn a_placeholder_that_is_the_value_is_refused() {
    std::env::set_var("AIRLOCK_TEST_SECRET_SAME", VALUE);
    let profile = profile_with(vec![spec(
        "T",
        SecretSource::Env("AIRLOCK_TEST_SECRET_SAME".into()),
    )]);
    let same = [Placeholder {
        name: "T".into(),
        placeholder: VALUE.into(),
    }];
    let message = for_run(&profile, &same).unwrap_err().to_string();
    assert!(message.contains("is the value itself"), "{message}");
    assert!(!message.contains(VALUE), "{message}");
}

#[test]
fn a_profile_without_secrets_reads_nothing() {
    assert!(resolve(&Profile::builtin_default()).unwrap().is_empty());
}
