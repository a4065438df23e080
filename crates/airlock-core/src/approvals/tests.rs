//! Asking, answering and silence, with short timeouts and a state directory of a test's own.

use std::sync::Arc;
use std::time::Duration;

use airlock_egress::gate::{Approver, Question};

use super::asker::RunApprover;
use super::*;
use crate::caller::Role;

struct World {
    _dir: tempfile::TempDir,
    state: PathBuf,
}

fn world() -> World {
    let dir = tempfile::tempdir().unwrap();
    let state = dir.path().join("state");
    fs::create_dir_all(state.join("sessions/s1")).unwrap();
    World { _dir: dir, state }
}

fn approver(world: &World, timeout: Duration) -> Arc<RunApprover> {
    Arc::new(RunApprover::new(
        world.state.clone(),
        crate::audit::log(&world.state),
        Some("s1".into()),
        "ci".into(),
        timeout,
        None,
    ))
}

fn question(host: &str) -> Question {
    Question {
        host: host.into(),
        port: 443,
        program: Some("curl".into()),
        entry: "*.github.com".into(),
    }
}

fn operator(world: &World) -> Caller {
    Caller::bare(world.state.clone(), Role::Operator)
}

/// Ask on a thread of its own (as the gate does), and wait until the question is listed.
fn ask(
    world: &World,
    approver: &Arc<RunApprover>,
    host: &str,
) -> (std::thread::JoinHandle<airlock_rules::Decision>, Approval) {
    let (asker, q) = (approver.clone(), question(host));
    let waiting = std::thread::spawn(move || asker.decide(&q));
    // Well within the 30 s these questions wait: the audit append and the question's file are
    // three fsyncs, slow on a loaded machine.
    let deadline = std::time::Instant::now() + Duration::from_secs(25);
    while std::time::Instant::now() < deadline {
        let listed = list_approvals(&operator(world)).unwrap();
        if let Some(approval) = listed.into_iter().find(|a| a.host == host) {
            return (waiting, approval);
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    panic!("{host} was never listed");
}

/// The one approval written in the world's state, whatever its status.
fn the_only_approval(world: &World) -> Approval {
    let files: Vec<_> = fs::read_dir(dir(&world.state))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|name| name.strip_suffix(".json").map(str::to_string))
        .filter(|id| !id.contains('.'))
        .collect();
    assert_eq!(files.len(), 1, "{files:?}");
    get_approval(&operator(world), &files[0]).unwrap()
}

/// The audit log's actions, in order.
fn actions(world: &World) -> Vec<String> {
    let text = fs::read_to_string(crate::audit::log(&world.state).path()).unwrap_or_default();
    text.lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .map(|record| record["action"].as_str().unwrap().to_string())
        .collect()
}

fn decide(
    world: &World,
    id: &str,
    decision: Decision,
    reason: Option<&str>,
) -> Result<Approval, Error> {
    let request = DecideRequest {
        decision,
        reason: reason.map(str::to_string),
    };
    decide_approval(&operator(world), id, &request)
}

#[test]
fn allowed_once_the_waiting_connection_goes_on_and_says_who() {
    let world = world();
    let approver = approver(&world, Duration::from_secs(30));
    let (waiting, approval) = ask(&world, &approver, "api.github.com");
    assert_eq!(approval.status, ApprovalStatus::Pending);
    assert_eq!(approval.profile_line, "allow = [\"api.github.com:443\"]");
    assert_eq!(approval.program.as_deref(), Some("curl"));
    assert!(approval.seconds_left > 0 && approval.seconds_left <= 30);
    let answered = decide(
        &world,
        &approval.id,
        Decision::AllowOnce,
        Some("needed for the release"),
    )
    .unwrap();
    assert_eq!(answered.status, ApprovalStatus::AllowedOnce);
    let decision = waiting.join().unwrap();
    assert!(decision.allowed, "{}", decision.rule);
    let me = format!("uid {}", nix::unistd::getuid());
    assert!(decision.rule.contains(&me), "{}", decision.rule);
    assert_eq!(actions(&world), ["approval.asked", "approval.decided"]);
    // Answered once; the same host and port in this run is not asked again.
    let again = decide(&world, &approval.id, Decision::Deny, None).unwrap_err();
    assert_eq!(again.code().0, "approval_closed");
    assert!(approver.decide(&question("api.github.com")).allowed);
    let asked = actions(&world)
        .iter()
        .filter(|a| *a == "approval.asked")
        .count();
    assert_eq!(asked, 1, "not asked twice");
    assert_eq!(actions(&world)[2], "approval.refused", "the late answer");
    assert!(list_approvals(&operator(&world)).unwrap().is_empty());
}

#[test]
fn nobody_answering_in_time_is_a_refusal_that_says_so() {
    let world = world();
    let approver = approver(&world, Duration::from_secs(1));
    // Not `ask`: on a loaded machine the question can expire before a look lists it.
    let decision = approver.decide(&question("api.github.com"));
    let approval = the_only_approval(&world);
    assert!(!decision.allowed);
    assert_eq!(decision.rule, "nobody answered within 1 s (ask_timeout)");
    assert_eq!(actions(&world), ["approval.asked", "approval.expired"]);
    let late = decide(&world, &approval.id, Decision::AllowOnce, None).unwrap_err();
    assert_eq!(late.code().0, "approval_closed");
    assert!(late.to_string().contains("expired"), "{late}");
    assert_eq!(
        get_approval(&operator(&world), &approval.id)
            .unwrap()
            .status,
        ApprovalStatus::Expired
    );
}

#[test]
fn a_denial_names_who_and_why() {
    let world = world();
    let approver = approver(&world, Duration::from_secs(30));
    let (waiting, approval) = ask(&world, &approver, "api.github.com");
    decide(&world, &approval.id, Decision::Deny, Some("not this one")).unwrap();
    let decision = waiting.join().unwrap();
    assert!(!decision.allowed);
    let me = format!("denied by uid {}: not this one", nix::unistd::getuid());
    assert!(decision.rule.starts_with(&me), "{}", decision.rule);
}

#[test]
fn allowed_for_the_session_is_kept_for_its_later_runs() {
    let world = world();
    let approver = approver(&world, Duration::from_secs(30));
    let (waiting, approval) = ask(&world, &approver, "api.github.com");
    decide(&world, &approval.id, Decision::AllowSession, None).unwrap();
    assert!(waiting.join().unwrap().allowed);
    let allowed: Vec<String> = session_allowed(&world.state, "s1")
        .iter()
        .map(ToString::to_string)
        .collect();
    assert_eq!(allowed, ["api.github.com:443"]);
    assert!(session_allowed(&world.state, "s2").is_empty());
}

#[test]
fn an_agent_can_neither_list_nor_answer() {
    let world = world();
    let approver = approver(&world, Duration::from_secs(30));
    let (waiting, approval) = ask(&world, &approver, "api.github.com");
    let agent = Caller::bare(world.state.clone(), Role::Agent);
    assert_eq!(
        list_approvals(&agent).unwrap_err().code().0,
        "role_forbidden"
    );
    assert_eq!(
        get_approval(&agent, &approval.id).unwrap_err().code().0,
        "role_forbidden"
    );
    let request = DecideRequest {
        decision: Decision::AllowOnce,
        reason: None,
    };
    let refused = decide_approval(&agent, &approval.id, &request).unwrap_err();
    assert_eq!(refused.code().0, "role_forbidden");
    assert_eq!(
        actions(&world),
        ["approval.asked", "approval.refused"],
        "nothing decided, the attempt recorded"
    );
    approver.end(Duration::from_secs(2));
    let decision = waiting.join().unwrap();
    assert!(!decision.allowed);
    assert!(decision.rule.contains("the run ended"), "{}", decision.rule);
    assert_eq!(
        actions(&world),
        ["approval.asked", "approval.refused", "approval.ended"]
    );
}

#[test]
fn connects_to_one_destination_wait_for_one_approval() {
    let world = world();
    let approver = approver(&world, Duration::from_secs(30));
    let (first, approval) = ask(&world, &approver, "api.github.com");
    let (asker, q) = (approver.clone(), question("api.github.com"));
    let second = std::thread::spawn(move || asker.decide(&q));
    std::thread::sleep(Duration::from_millis(100));
    assert_eq!(list_approvals(&operator(&world)).unwrap().len(), 1);
    decide(&world, &approval.id, Decision::Deny, None).unwrap();
    assert!(!first.join().unwrap().allowed);
    assert!(!second.join().unwrap().allowed);
    assert_eq!(actions(&world), ["approval.asked", "approval.decided"]);
}

#[test]
fn what_is_not_an_approval_is_said_so() {
    let world = world();
    let op = operator(&world);
    assert_eq!(
        get_approval(&op, "../tokens").unwrap_err().code().0,
        "bad_argument"
    );
    assert_eq!(
        get_approval(&op, "ap_0123456789abcdef")
            .unwrap_err()
            .code()
            .0,
        "approval_not_found"
    );
    let long = "x".repeat(MAX_REASON + 1);
    for reason in [long.as_str(), "two\nlines"] {
        let err = decide(&world, "ap_0123456789abcdef", Decision::Deny, Some(reason)).unwrap_err();
        assert_eq!(err.code().0, "bad_argument", "{reason:?}");
    }
}

#[test]
fn a_flood_of_questions_is_bounded() {
    let world = world();
    let approver = approver(&world, Duration::from_secs(30));
    let waiting: Vec<_> = (0..asker::MAX_WAITING)
        .map(|n| ask(&world, &approver, &format!("h{n}.github.com")).0)
        .collect();
    let refused = approver.decide(&question("one-more.github.com"));
    assert!(!refused.allowed);
    assert!(refused.rule.contains("wait already"), "{}", refused.rule);
    approver.end(Duration::from_secs(2));
    for waiting in waiting {
        assert!(!waiting.join().unwrap().allowed);
    }
}

#[test]
fn approvals_are_kept_a_day_then_pruned() {
    let world = world();
    let approver = approver(&world, Duration::from_secs(30));
    let (waiting, old) = ask(&world, &approver, "old.github.com");
    decide(&world, &old.id, Decision::Deny, None).unwrap();
    waiting.join().unwrap();
    let (waiting, recent) = ask(&world, &approver, "recent.github.com");
    decide(&world, &recent.id, Decision::Deny, None).unwrap();
    waiting.join().unwrap();
    let two_days_ago = std::time::SystemTime::now() - Duration::from_secs(2 * 24 * 3600);
    fs::File::options()
        .write(true)
        .open(question_path(&world.state, &old.id))
        .unwrap()
        .set_modified(two_days_ago)
        .unwrap();
    prune(&world.state);
    let op = operator(&world);
    assert_eq!(
        get_approval(&op, &old.id).unwrap_err().code().0,
        "approval_not_found"
    );
    assert_eq!(
        get_approval(&op, &recent.id).unwrap().status,
        ApprovalStatus::Denied
    );
}

#[test]
fn an_operator_token_answers_its_profiles_approvals_only() {
    let world = world();
    let approver = approver(&world, Duration::from_secs(30));
    let (waiting, approval) = ask(&world, &approver, "api.github.com");
    let token = |profile: &str| {
        let mut caller = operator(&world);
        caller.grant = Some(crate::Grant {
            token: format!("tok-{profile}"),
            profile: profile.into(),
            workspace: None,
        });
        caller
    };
    let other = token("other");
    assert!(list_approvals(&other).unwrap().is_empty());
    let request = DecideRequest {
        decision: Decision::AllowOnce,
        reason: None,
    };
    let refused = decide_approval(&other, &approval.id, &request).unwrap_err();
    assert_eq!(refused.code().0, "outside_token_binding");
    let ours = token("ci");
    assert_eq!(list_approvals(&ours).unwrap().len(), 1);
    let answered = decide_approval(&ours, &approval.id, &request).unwrap();
    assert_eq!(answered.answer.unwrap().by, "token tok-ci");
    let decision = waiting.join().unwrap();
    assert!(
        decision.rule.contains("by token tok-ci"),
        "{}",
        decision.rule
    );
}
