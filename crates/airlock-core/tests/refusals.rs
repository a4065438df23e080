//! Core refuses what the CLI refuses, whoever calls it: a front end that builds a request by hand
//! gets the same answer, and the refusal is in the audit log. None of these gets as far as
//! building a sandbox.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use airlock_core::control::Action;
use airlock_core::kill_switch::{self, ControlRequest, TargetChoice};
use airlock_core::{ApplyRequest, Caller, Error, ProfileChoice, Role, RunRequest, SessionRequest};

struct Setup {
    _dirs: Vec<tempfile::TempDir>,
    state: PathBuf,
    workspace: PathBuf,
    caller: Caller,
}

fn setup() -> Setup {
    let state = tempfile::tempdir().unwrap();
    let workspace = tempfile::tempdir().unwrap();
    let home = tempfile::tempdir().unwrap();
    let mut caller = Caller::bare(state.path().to_path_buf(), Role::Operator);
    // Profiles are looked for in the caller's config dir: none there, so `default` is built in.
    caller.env = vec![
        ("HOME".into(), home.path().into()),
        ("XDG_CONFIG_HOME".into(), home.path().join("config").into()),
    ];
    caller.asked = vec!["a-front-end".into(), "asked".into()];
    Setup {
        state: state.path().to_path_buf(),
        workspace: workspace.path().canonicalize().unwrap(),
        caller,
        _dirs: vec![state, workspace, home],
    }
}

/// A session over the setup's workspace, made by its operator.
fn new_session(s: &Setup, name: Option<&str>) -> airlock_core::SessionSummary {
    let request = SessionRequest {
        workspace: Some(s.workspace.clone()),
        name: name.map(str::to_string),
        ..SessionRequest::default()
    };
    airlock_core::create_session(&s.caller, request).unwrap()
}

/// A profile `ci` in a config directory inside the workspace, which the sandbox could write;
/// returns that directory.
fn plant_ci_profile(workspace: &Path) -> PathBuf {
    let config = workspace.join("config");
    std::fs::create_dir_all(config.join("airlock/profiles")).unwrap();
    std::fs::write(config.join("airlock/profiles/ci.toml"), "").unwrap();
    config
}

/// How a run of the named profile `ci` is refused.
fn run_ci(s: &Setup) -> Error {
    let mut request = run_request(&s.workspace);
    request.profile.name = Some("ci".into());
    airlock_core::run(&s.caller, request).unwrap_err()
}

fn run_request(workspace: &Path) -> RunRequest {
    RunRequest {
        argv: vec![OsString::from("true")],
        workspace: Some(workspace.to_path_buf()),
        ..RunRequest::default()
    }
}

/// The audit log's actions, in order.
fn actions(state: &Path) -> Vec<String> {
    std::fs::read_to_string(state.join("audit.log"))
        .unwrap_or_default()
        .lines()
        .map(|line| {
            let record: serde_json::Value = serde_json::from_str(line).unwrap();
            record["action"].as_str().unwrap().to_string()
        })
        .collect()
}

fn last_record(state: &Path) -> serde_json::Value {
    let text = std::fs::read_to_string(state.join("audit.log")).unwrap();
    serde_json::from_str(text.lines().last().unwrap()).unwrap()
}

#[test]
fn a_profile_inside_the_workspace_is_never_policy() {
    let s = setup();
    let inside = s.workspace.join("loose.toml");
    std::fs::write(&inside, "[network]\nmode = \"open\"\n").unwrap();
    let by_file = ProfileChoice {
        file: Some(inside),
        ..ProfileChoice::default()
    };
    let mut request = run_request(&s.workspace);
    request.profile = by_file.clone();
    let refused = airlock_core::run(&s.caller, request).unwrap_err();
    assert!(
        matches!(
            refused,
            Error::Policy(airlock_policy::PolicyError::InsideWorkspace { .. })
        ),
        "{refused}"
    );
    assert_eq!(actions(&s.state), ["run.refused"]);
    let record = last_record(&s.state);
    assert_eq!(record["argv"], serde_json::json!(["a-front-end", "asked"]));
    assert_eq!(record["denied"], true);

    let session = SessionRequest {
        profile: by_file,
        workspace: Some(s.workspace.clone()),
        name: None,
    };
    let refused = airlock_core::create_session(&s.caller, session).unwrap_err();
    assert!(matches!(refused, Error::Policy(_)), "{refused}");
    assert_eq!(actions(&s.state), ["run.refused", "session.refused"]);
}

#[test]
fn a_named_profile_found_in_the_workspace_is_refused() {
    let mut s = setup();
    // The caller's config directory lies in the workspace: its profiles are the agent's to write.
    let config = plant_ci_profile(&s.workspace);
    s.caller.env.retain(|(key, _)| key != "XDG_CONFIG_HOME");
    s.caller.env.push(("XDG_CONFIG_HOME".into(), config.into()));
    let refused = run_ci(&s);
    assert!(
        matches!(
            refused,
            Error::Policy(airlock_policy::PolicyError::InsideWorkspace { .. })
        ),
        "{refused}"
    );
}

#[test]
fn only_landlock_may_be_given_up() {
    let s = setup();
    let mut request = run_request(&s.workspace);
    request.allow_degraded = vec!["seccomp".into()];
    let refused = airlock_core::run(&s.caller, request).unwrap_err();
    assert!(
        refused.to_string().contains("--allow-degraded"),
        "{refused}"
    );
    assert_eq!(actions(&s.state), ["run.refused"]);
}

#[test]
fn the_sandbox_user_is_never_root_nor_chosen_by_an_unprivileged_caller() {
    let s = setup();
    let mut request = run_request(&s.workspace);
    request.sandbox_uid = Some(0);
    let refused = airlock_core::run(&s.caller, request).unwrap_err();
    assert!(refused.to_string().contains("--sandbox-uid"), "{refused}");
}

#[test]
fn a_workspace_holding_a_home_directory_gets_no_session() {
    let s = setup();
    let home = s.caller.home().unwrap();
    let session = SessionRequest {
        workspace: Some(home.parent().unwrap().to_path_buf()),
        ..SessionRequest::default()
    };
    let refused = airlock_core::create_session(&s.caller, session).unwrap_err();
    assert!(matches!(refused, Error::Workspace { .. }), "{refused}");
    let root = SessionRequest {
        workspace: Some("/".into()),
        ..SessionRequest::default()
    };
    let refused = airlock_core::create_session(&s.caller, root).unwrap_err();
    assert!(matches!(refused, Error::Workspace { .. }), "{refused}");
    assert_eq!(actions(&s.state), ["session.refused", "session.refused"]);
}

#[test]
fn a_session_keeps_its_profile_and_workspace() {
    let s = setup();
    let session = new_session(&s, Some("mine"));
    let other_profile = RunRequest {
        session: Some("mine".into()),
        profile: ProfileChoice {
            name: Some("other".into()),
            file: None,
        },
        ..run_request(&s.workspace)
    };
    let refused = airlock_core::run(&s.caller, other_profile).unwrap_err();
    assert!(
        matches!(refused, Error::ProfileOfSession { .. }),
        "{refused}"
    );
    let elsewhere = tempfile::tempdir().unwrap();
    let other_workspace = RunRequest {
        session: Some("mine".into()),
        ..run_request(elsewhere.path())
    };
    let refused = airlock_core::run(&s.caller, other_workspace).unwrap_err();
    assert!(matches!(refused, Error::Session(_)), "{refused}");
    // Refusals name the session by its id.
    assert_eq!(last_record(&s.state)["session"], session.meta.id.as_str());
}

#[test]
fn an_apply_of_paths_that_match_nothing_is_refused() {
    let s = setup();
    new_session(&s, Some("empty"));
    let request = ApplyRequest {
        session: "empty".into(),
        options: airlock_core::ApplyOptions {
            paths: vec!["no-such-file".into()],
            ..airlock_core::ApplyOptions::default()
        },
    };
    let refused = airlock_core::apply(&s.caller, &request).unwrap_err();
    assert!(matches!(refused, Error::NothingAtPaths { .. }), "{refused}");
    assert_eq!(actions(&s.state).last().unwrap(), "apply.refused");
    let outside = ApplyRequest {
        session: "empty".into(),
        options: airlock_core::ApplyOptions {
            paths: vec!["/etc/passwd".into()],
            ..airlock_core::ApplyOptions::default()
        },
    };
    assert!(airlock_core::apply(&s.caller, &outside).is_err());
}

#[test]
fn the_kill_switch_needs_a_reason_and_network_goes_with_kill_only() {
    let s = setup();
    let refused = kill_switch::disable(&s.caller, None, "  ").unwrap_err();
    assert!(refused.to_string().contains("--reason"), "{refused}");
    // A reason is printed on other people's terminals: no escape sequence gets there.
    let escape = "\u{1b}]0;PWNED\u{7}\u{1b}[2K\rinjected";
    let refused = kill_switch::disable(&s.caller, None, escape).unwrap_err();
    assert!(
        refused.to_string().contains("control character"),
        "{refused}"
    );
    let kill_with_escape = ControlRequest {
        action: Action::Kill,
        target: TargetChoice {
            all: true,
            ..TargetChoice::default()
        },
        network_only: false,
        reason: Some(escape.into()),
    };
    let refused = kill_switch::act(&s.caller, &kill_with_escape).unwrap_err();
    assert!(
        refused.to_string().contains("control character"),
        "{refused}"
    );
    let pause_network = ControlRequest {
        action: Action::Pause,
        target: TargetChoice {
            all: true,
            ..TargetChoice::default()
        },
        network_only: true,
        reason: None,
    };
    assert!(kill_switch::act(&s.caller, &pause_network).is_err());
    // Nothing was switched off by the refused call.
    assert!(kill_switch::status(&s.caller)
        .unwrap()
        .switches
        .is_some_and(|sw| sw.all.is_none()));
}

#[test]
fn a_relative_path_needs_the_callers_own_working_directory() {
    // A service has no working directory of its clients: a relative path is refused, never
    // taken from the service's own directory.
    let s = setup();
    assert!(s.caller.cwd.is_none());
    let request = RunRequest {
        workspace: Some("project".into()),
        ..run_request(&s.workspace)
    };
    let refused = airlock_core::run(&s.caller, request).unwrap_err();
    assert!(
        refused.to_string().contains("no working directory"),
        "{refused}"
    );
    let mut caller = s.caller.clone();
    caller.cwd = Some(s.workspace.parent().unwrap().to_path_buf());
    let named = s.workspace.file_name().unwrap();
    let session = SessionRequest {
        workspace: Some(named.into()),
        ..SessionRequest::default()
    };
    let made = airlock_core::create_session(&caller, session).unwrap();
    assert_eq!(made.meta.workspace, s.workspace);
}

#[test]
fn a_variable_given_twice_is_read_as_getenv_reads_it() {
    // The first copy counts, as for getenv(3): a second one cannot pick another profile
    // directory than the one a wrapper set.
    let mut s = setup();
    let loose = plant_ci_profile(&s.workspace);
    s.caller.env.push(("XDG_CONFIG_HOME".into(), loose.into()));
    let refused = run_ci(&s);
    // Looked for in the first XDG_CONFIG_HOME (which has no ci.toml), not in the workspace.
    assert!(
        matches!(
            refused,
            Error::Policy(airlock_policy::PolicyError::NotFound { .. })
        ),
        "{refused}"
    );
}

#[test]
fn a_profile_named_twice_is_ambiguous() {
    let s = setup();
    let file = s.caller.home().unwrap().join("loose.toml");
    std::fs::write(&file, "").unwrap();
    let session = SessionRequest {
        profile: ProfileChoice {
            name: Some("strict".into()),
            file: Some(file),
        },
        workspace: Some(s.workspace.clone()),
        name: None,
    };
    let refused = airlock_core::create_session(&s.caller, session).unwrap_err();
    assert!(
        refused.to_string().contains("name one profile"),
        "{refused}"
    );
}

#[test]
fn a_session_whose_workspace_became_a_symlink_is_refused() {
    let s = setup();
    let made = new_session(&s, None);
    std::fs::remove_dir(&s.workspace).unwrap();
    std::os::unix::fs::symlink("/", &s.workspace).unwrap();
    let run = RunRequest {
        session: Some(made.meta.id.clone()),
        ..run_request(&s.workspace)
    };
    let refused = airlock_core::run(&s.caller, run).unwrap_err();
    assert!(refused.to_string().contains("now leads to /"), "{refused}");
    let diff = airlock_core::DiffRequest {
        session: made.meta.id.clone(),
        ..airlock_core::DiffRequest::default()
    };
    assert!(airlock_core::diff(&s.caller, &diff).is_err());
    let apply = ApplyRequest {
        session: made.meta.id.clone(),
        ..ApplyRequest::default()
    };
    assert!(airlock_core::apply(&s.caller, &apply).is_err());
    std::fs::remove_file(&s.workspace).unwrap();
}

#[test]
fn an_agent_cannot_approve_its_own_changes_nor_widen_its_run() {
    let s = setup();
    let made = new_session(&s, None);
    let mut agent = s.caller.clone();
    agent.role = Role::Agent;
    let id = made.meta.id.clone();
    let not_permitted = |result: Result<(), Error>| {
        let err = result.unwrap_err();
        assert!(matches!(err, Error::NotPermitted { .. }), "{err}");
    };
    let apply = ApplyRequest {
        session: id.clone(),
        ..ApplyRequest::default()
    };
    not_permitted(airlock_core::apply(&agent, &apply).map(drop));
    not_permitted(airlock_core::revert(&agent, &id).map(drop));
    not_permitted(airlock_core::discard_session(&agent, &id).map(drop));
    not_permitted(airlock_core::gc(&agent, airlock_core::GcRequest::default()).map(drop));
    not_permitted(kill_switch::disable(&agent, None, "stop").map(drop));
    not_permitted(kill_switch::enable(&agent, None).map(drop));
    let kill = ControlRequest {
        action: Action::Kill,
        target: TargetChoice {
            all: true,
            ..TargetChoice::default()
        },
        network_only: false,
        reason: None,
    };
    not_permitted(kill_switch::act(&agent, &kill).map(drop));
    for widen in [
        RunRequest {
            resolve: vec!["api.test=127.0.0.1".into()],
            ..run_request(&s.workspace)
        },
        RunRequest {
            sandbox_uid: Some(54321),
            ..run_request(&s.workspace)
        },
        RunRequest {
            allow_degraded: vec!["landlock".into()],
            ..run_request(&s.workspace)
        },
        // A learning run opens the network: an agent must never turn its own on.
        RunRequest {
            learn: true,
            ..run_request(&s.workspace)
        },
    ] {
        not_permitted(airlock_core::run(&agent, widen).map(drop));
    }
    // The refusals are on record, and the session is untouched.
    let actions = actions(&s.state);
    assert!(
        actions.contains(&"apply.refused".to_string()),
        "{actions:?}"
    );
    assert!(actions.contains(&"run.refused".to_string()), "{actions:?}");
    for refusal in ["disable.refused", "enable.refused", "kill.refused"] {
        assert!(
            actions.contains(&refusal.to_string()),
            "{refusal}: {actions:?}"
        );
    }
    let listed = airlock_core::list_sessions(&agent).unwrap();
    assert_eq!(listed[0].status, airlock_core::SessionStatus::Idle);
}

#[test]
fn a_profile_bind_through_a_symlink_is_refused() {
    // The rules compare a bind's path; the jail binds what it leads to. A symlink to the state
    // directory would show it, writable, to the sandbox.
    let s = setup();
    let home = s.caller.home().unwrap();
    let elsewhere = tempfile::tempdir().unwrap();
    let link = elsewhere.path().join("innocent");
    std::fs::create_dir_all(&s.state).unwrap();
    std::os::unix::fs::symlink(&s.state, &link).unwrap();
    let profile = home.join("p.toml");
    std::fs::write(
        &profile,
        format!("[filesystem]\nread_write = [\"{}\"]\n", link.display()),
    )
    .unwrap();
    let request = RunRequest {
        profile: ProfileChoice {
            file: Some(profile),
            name: None,
        },
        ..run_request(&s.workspace)
    };
    let refused = airlock_core::run(&s.caller, request).unwrap_err();
    assert!(
        matches!(refused, Error::ProfilePath { .. }) && refused.to_string().contains("symlink"),
        "{refused}"
    );
}

#[test]
fn a_disabled_profile_leaves_no_session_behind() {
    let s = setup();
    kill_switch::disable(&s.caller, None, "incident").unwrap();
    let keep = RunRequest {
        keep: true,
        ..run_request(&s.workspace)
    };
    let refused = airlock_core::run(&s.caller, keep).unwrap_err();
    assert!(matches!(refused, Error::Control(_)), "{refused}");
    assert!(airlock_core::list_sessions(&s.caller).unwrap().is_empty());
}

#[test]
fn a_state_dir_reached_through_a_symlink_into_the_workspace_is_refused() {
    let s = setup();
    let link = s.caller.home().unwrap().join("to-workspace");
    std::os::unix::fs::symlink(&s.workspace, &link).unwrap();
    let mut caller = s.caller.clone();
    caller.state_dir = Some(link.join("state"));
    let session = SessionRequest {
        workspace: Some(s.workspace.clone()),
        ..SessionRequest::default()
    };
    let refused = airlock_core::create_session(&caller, session).unwrap_err();
    assert!(matches!(refused, Error::Workspace { .. }), "{refused}");
}
