//! Warm sandboxes against the real kernel: prepared before their request, they run the
//! request's command with its intent written only then; a profile changed, a workspace other
//! than the one prepared for or a profile disabled meanwhile never gets the prepared sandbox.
//!
//! No test harness (`harness = false`): the jail clones its setup process only while the process
//! is single-threaded, so the cases run one after another in `main`. As root, `main` then runs
//! every case again as an unprivileged uid (a copy of this binary under setpriv).
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::ffi::OsString;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;

use airlock_core::{Caller, Error, ProfileChoice, Role, RunRequest};

const UNPRIVILEGED_UID: u32 = 4242;
const AS_USER_VAR: &str = "AIRLOCK_WARM_TEST_AS_USER";

struct World {
    _dir: tempfile::TempDir,
    state: PathBuf,
    workspace: PathBuf,
    profiles: PathBuf,
    caller: Caller,
}

impl World {
    fn new() -> World {
        let dir = tempfile::Builder::new()
            .prefix("airlock-warm-test-")
            .tempdir()
            .unwrap();
        // The sandbox's uid (as root, a dedicated one) must reach the workspace.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755)).unwrap();
        let base = dir.path().canonicalize().unwrap();
        let (state, workspace, config) = (
            base.join("state"),
            base.join("workspace"),
            base.join("config"),
        );
        let profiles = config.join("airlock/profiles");
        for dir in [&state, &workspace, &profiles] {
            std::fs::create_dir_all(dir).unwrap();
        }
        std::fs::set_permissions(&workspace, std::fs::Permissions::from_mode(0o755)).unwrap();
        let mut caller = Caller::bare(state.clone(), Role::Operator);
        caller.env = vec![
            ("HOME".into(), base.clone().into()),
            ("XDG_CONFIG_HOME".into(), config.into()),
            ("PATH".into(), "/usr/bin:/bin".into()),
        ];
        World {
            _dir: dir,
            state,
            workspace,
            profiles,
            caller,
        }
    }

    fn write_profile(&self, text: &str) {
        std::fs::write(self.profiles.join("warm.toml"), text).unwrap();
    }

    /// A throwaway run of `script` under the profile `warm`.
    fn request(&self, script: &str) -> RunRequest {
        RunRequest {
            argv: ["/bin/sh", "-c", script].map(OsString::from).to_vec(),
            workspace: Some(self.workspace.clone()),
            profile: ProfileChoice {
                name: Some("warm".into()),
                ..ProfileChoice::default()
            },
            ..RunRequest::default()
        }
    }

    /// The records of the audit log, in order.
    fn records(&self) -> Vec<serde_json::Value> {
        std::fs::read_to_string(self.state.join("audit.log"))
            .unwrap_or_default()
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
    }

    fn actions(&self) -> Vec<String> {
        self.records()
            .iter()
            .map(|r| r["action"].as_str().unwrap().to_string())
            .collect()
    }

    fn last_intent(&self) -> serde_json::Value {
        let records = self.records();
        let intent = records.iter().rev().find(|r| r["action"] == "run.intent");
        intent.expect("no run.intent").clone()
    }
}

fn a_warm_sandbox_runs_the_requests_command_and_its_intent_is_written_only_then() {
    let world = World::new();
    world.write_profile("");
    let prepared = airlock_core::prepare_run(&world.caller, world.request("")).unwrap();
    assert!(prepared.sandbox().is_alive());
    assert!(
        !world.actions().iter().any(|a| a.starts_with("run.")),
        "a record before the request: {:?}",
        world.actions()
    );
    std::thread::sleep(std::time::Duration::from_millis(50));
    let script = "test \"$(id -u)\" = 1000 && test \"$PWD\" = \"$WS\" && exit 7";
    let mut request = world.request(&script.replace("$WS", &world.workspace.to_string_lossy()));
    request.env = Some(Vec::new());
    // The caller is told the report once, when the result is already recorded.
    let mut answered = Vec::new();
    let report = airlock_core::run_prepared(&world.caller, prepared, request, &mut |told| {
        answered.push((told.exit_status(), world.actions()));
    })
    .unwrap();
    assert_eq!(
        report.exit_status(),
        7,
        "the request's command did not run whole"
    );
    assert_eq!(world.actions(), ["run.intent", "run.result"]);
    assert_eq!(
        answered,
        [(7, world.actions())],
        "told before its result was recorded"
    );
    let intent = world.last_intent();
    assert!(
        intent["argv"][2].as_str().unwrap().contains("exit 7"),
        "{intent}"
    );
    let waited = intent["prepared_ms_before"].as_u64();
    assert!(
        waited.is_some_and(|ms| ms >= 50),
        "the intent does not say the sandbox was warm: {intent}"
    );
}

/// The processes limit shows inside (/proc/self/limits): the prepared sandbox has the profile's
/// limit of its preparation, a cold one the profile's of now.
fn a_profile_changed_after_preparation_gets_a_sandbox_of_the_new_profile() {
    let world = World::new();
    world.write_profile("[limits]\nprocesses = 300\n");
    let check = "grep -q '^Max processes  *77 ' /proc/self/limits";
    let prepared = airlock_core::prepare_run(&world.caller, world.request("")).unwrap();
    let old_sandbox = prepared.sandbox();
    world.write_profile("[limits]\nprocesses = 77\n");
    let report =
        airlock_core::run_prepared(&world.caller, prepared, world.request(check), &mut |_| {})
            .unwrap();
    assert_eq!(
        report.exit_status(),
        0,
        "the run had the old profile's limit"
    );
    assert!(world.last_intent()["prepared_ms_before"].is_null());
    assert!(
        !old_sandbox.is_alive(),
        "the stale sandbox outlived the run"
    );
    // Unchanged, the prepared one is used.
    let prepared = airlock_core::prepare_run(&world.caller, world.request("")).unwrap();
    let report =
        airlock_core::run_prepared(&world.caller, prepared, world.request(check), &mut |_| {})
            .unwrap();
    assert_eq!(report.exit_status(), 0);
    assert!(world.last_intent()["prepared_ms_before"].is_u64());
}

fn a_request_for_another_workspace_gets_a_sandbox_of_its_own() {
    let world = World::new();
    world.write_profile("");
    let other = world.workspace.with_file_name("other");
    std::fs::create_dir(&other).unwrap();
    std::fs::set_permissions(&other, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::write(other.join("only-here"), "").unwrap();
    let prepared = airlock_core::prepare_run(&world.caller, world.request("")).unwrap();
    let mut request = world.request(&format!("test -e {}/only-here", other.display()));
    request.workspace = Some(other);
    let report = airlock_core::run_prepared(&world.caller, prepared, request, &mut |_| {}).unwrap();
    assert_eq!(report.exit_status(), 0, "ran in the prepared workspace");
    assert!(world.last_intent()["prepared_ms_before"].is_null());
}

fn a_profile_disabled_after_preparation_refuses_the_run_and_its_sandbox_dies() {
    let world = World::new();
    world.write_profile("");
    let prepared = airlock_core::prepare_run(&world.caller, world.request("")).unwrap();
    let sandbox = prepared.sandbox();
    airlock_core::kill_switch::disable(&world.caller, Some("warm"), "test: drained").unwrap();
    let refused = airlock_core::run_prepared(
        &world.caller,
        prepared,
        world.request("exit 0"),
        &mut |_| {},
    )
    .unwrap_err();
    assert_eq!(refused.code().0, "disabled", "{refused}");
    assert!(
        !sandbox.is_alive(),
        "the prepared sandbox outlived the refusal"
    );
    assert!(!world.actions().contains(&"run.intent".to_string()));
    assert!(world.actions().contains(&"run.refused".to_string()));
    // Nor is one prepared while the profile is disabled.
    assert!(matches!(
        airlock_core::prepare_run(&world.caller, world.request("")),
        Err(Error::Control(_))
    ));
}

/// A hidden path that was not there when the sandbox was made had nothing to mask then: a file
/// created there since would be seen through a prepared sandbox. The run gets a new one.
fn a_file_created_under_a_hide_since_the_preparation_stays_hidden() {
    let world = World::new();
    let secret = world.workspace.join(".env");
    world.write_profile(&format!("[filesystem]\nhide = [{:?}]\n", secret));
    let prepared = airlock_core::prepare_run(&world.caller, world.request("")).unwrap();
    std::fs::write(&secret, "TOKEN=s3cret\n").unwrap();
    let check = format!("! grep -q s3cret {}", secret.display());
    let report =
        airlock_core::run_prepared(&world.caller, prepared, world.request(&check), &mut |_| {});
    assert_eq!(report.unwrap().exit_status(), 0, "the file was seen");
    assert!(world.last_intent()["prepared_ms_before"].is_null());
    // One replaced since (renamed over the masked one) is not masked either.
    let prepared = airlock_core::prepare_run(&world.caller, world.request("")).unwrap();
    let replacement = world.workspace.join(".env.new");
    std::fs::write(&replacement, "TOKEN=s3cret\n").unwrap();
    std::fs::rename(&replacement, &secret).unwrap();
    let report =
        airlock_core::run_prepared(&world.caller, prepared, world.request(&check), &mut |_| {});
    assert_eq!(
        report.unwrap().exit_status(),
        0,
        "the replaced file was seen"
    );
    assert!(world.last_intent()["prepared_ms_before"].is_null());
}

/// A process holds one sandbox at a time: a second would share the first's cgroup.
fn a_second_sandbox_is_not_prepared_while_one_is_held() {
    let world = World::new();
    world.write_profile("");
    let held = airlock_core::prepare_run(&world.caller, world.request("")).unwrap();
    match airlock_core::prepare_run(&world.caller, world.request("")) {
        Err(refused) => assert!(refused.to_string().contains("already holds"), "{refused}"),
        Ok(_) => panic!("a second sandbox was prepared while one was held"),
    }
    assert!(airlock_core::run(&world.caller, world.request("exit 0")).is_err());
    drop(held);
    let report = airlock_core::run(&world.caller, world.request("exit 0")).unwrap();
    assert_eq!(report.exit_status(), 0);
}

fn only_a_throwaway_run_in_memory_is_prepared() {
    let world = World::new();
    world.write_profile("");
    let mut keep = world.request("");
    keep.keep = true;
    match airlock_core::prepare_run(&world.caller, keep) {
        Err(refused) => assert!(refused.to_string().contains("throwaway"), "{refused}"),
        Ok(_) => panic!("a kept run was prepared"),
    }
}

/// As root: this binary again, copied where the unprivileged uid can run it, under setpriv.
fn again_as_an_unprivileged_user() {
    let copy = std::env::temp_dir().join(format!("airlock-warm-test-{}", std::process::id()));
    std::fs::copy(std::env::current_exe().unwrap(), &copy).unwrap();
    std::fs::set_permissions(&copy, std::fs::Permissions::from_mode(0o755)).unwrap();
    let id = UNPRIVILEGED_UID.to_string();
    let status = std::process::Command::new("setpriv")
        .args(["--reuid", &id, "--regid", &id, "--clear-groups", "--"])
        .arg(&copy)
        .env(AS_USER_VAR, "1")
        .env("TMPDIR", "/tmp")
        .status()
        .unwrap();
    std::fs::remove_file(&copy).unwrap();
    assert!(status.success(), "the cases failed as uid {id}");
}

fn main() {
    let way = airlock_core::Way::of_this_process();
    if !way.is_rootful() && !airlock_jail::memory_layer_supported(way) {
        eprintln!("skipped: unprivileged, this kernel has no memory layer for a sandbox");
        return;
    }
    let cases: [(&str, fn()); 7] = [
        (
            "a_warm_sandbox_runs_the_requests_command_and_its_intent_is_written_only_then",
            a_warm_sandbox_runs_the_requests_command_and_its_intent_is_written_only_then,
        ),
        (
            "a_profile_changed_after_preparation_gets_a_sandbox_of_the_new_profile",
            a_profile_changed_after_preparation_gets_a_sandbox_of_the_new_profile,
        ),
        (
            "a_request_for_another_workspace_gets_a_sandbox_of_its_own",
            a_request_for_another_workspace_gets_a_sandbox_of_its_own,
        ),
        (
            "a_profile_disabled_after_preparation_refuses_the_run_and_its_sandbox_dies",
            a_profile_disabled_after_preparation_refuses_the_run_and_its_sandbox_dies,
        ),
        (
            "a_file_created_under_a_hide_since_the_preparation_stays_hidden",
            a_file_created_under_a_hide_since_the_preparation_stays_hidden,
        ),
        (
            "a_second_sandbox_is_not_prepared_while_one_is_held",
            a_second_sandbox_is_not_prepared_while_one_is_held,
        ),
        (
            "only_a_throwaway_run_in_memory_is_prepared",
            only_a_throwaway_run_in_memory_is_prepared,
        ),
    ];
    let who = if std::env::var_os(AS_USER_VAR).is_some() {
        "as an unprivileged user"
    } else {
        "as this user"
    };
    for (name, case) in cases {
        case();
        println!("test {name} ({who}) ... ok");
    }
    if std::env::var_os(AS_USER_VAR).is_none() && nix::unistd::geteuid().is_root() {
        again_as_an_unprivileged_user();
    }
    println!("test result: ok. {} passed", cases.len());
}
