//! `airlock serve`, the HTTP API, from the outside: the real server binary, started as root and
//! as an unprivileged user, talked to over its unix socket (or a loopback port) with a raw
//! HTTP/1.1 client. Each test shows the allowed path working and the violation refused.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::{json, Value};

use support::api::{
    agent_token, assert_ok, assert_refused, audit_log, audit_of, free_port, make_token,
    operator_token, Client, Server,
};
use support::{is_root, process_running, stderr, stdout, wait_for, Mode, World, TEST_UID};

/// A string no other test's processes carry on their command line.
fn marker(w: &World, tag: &str) -> String {
    let base = w.base.file_name().unwrap().to_string_lossy();
    format!("{base}-{tag}")
}

/// A command that says `up`, then runs until it is stopped; `marker` is its `$0`, so that
/// `pgrep -f marker` finds its shell.
fn running_until_stopped(marker: &str) -> Value {
    json!({ "argv": ["sh", "-c", "echo up; while :; do sleep 0.05; done", marker] })
}

/// The workspace as the server names it (canonical).
fn workspace(w: &World) -> String {
    w.workspace
        .canonicalize()
        .unwrap()
        .to_string_lossy()
        .into_owned()
}

/// A new session of `api`'s token; its id.
#[track_caller]
fn new_session(api: &Client) -> String {
    let created = api.post("/v1/sessions", &json!({}));
    assert_eq!(created.status, 201, "{}", created.text());
    created.json()["id"].as_str().unwrap().to_string()
}

/// A run in session `id`, answered once it ended (200).
#[track_caller]
fn run_in(api: &Client, id: &str, body: Value) -> Value {
    assert_ok(&api.post(&format!("/v1/sessions/{id}/runs"), &body))
}

/// The stdout and stderr lines of a streamed answer, joined, and its last line.
fn split_stream(lines: &[Value]) -> (String, String, Value) {
    let text = |kind: &str| -> String {
        lines
            .iter()
            .filter(|l| l["type"] == kind)
            .map(|l| l["data"].as_str().unwrap())
            .collect()
    };
    (
        text("stdout"),
        text("stderr"),
        lines.last().unwrap().clone(),
    )
}

/// The mounts of the host's namespace at or under the state directory (a session whose profile
/// limits its disk keeps its image mounted there for its life; the default one, none).
fn state_mounts(w: &World) -> Vec<String> {
    let state = w.state.canonicalize().unwrap();
    let state = state.to_str().unwrap();
    std::fs::read_to_string("/proc/self/mountinfo")
        .unwrap()
        .lines()
        .filter_map(|line| line.split(' ').nth(4))
        .filter(|point| point.starts_with(state))
        .map(str::to_string)
        .collect()
}

/// A second profile, `other`, where named profiles are looked up ($HOME/.config/airlock/profiles).
fn other_profile(w: &World) {
    let mut dir = w.home.clone();
    for part in [".config", "airlock", "profiles"] {
        dir.push(part);
        std::fs::create_dir_all(&dir).unwrap();
        w.give(&dir);
    }
    w.write(&dir.join("other.toml"), "[limits]\ntimeout = \"10m\"\n");
}

both_modes!(sessions_runs_and_their_diff);
/// An agent's session: created, listed, read; runs in it answered whole (command, argv, stdin,
/// exit status) and streamed; its diff as a git patch and as JSON. The host's workspace is never
/// written.
fn sessions_runs_and_their_diff(w: &World) {
    let agent = agent_token(w);
    let server = Server::start(w, &[]);
    let api = server.client(&agent.token);

    let created = api.post("/v1/sessions", &json!({ "name": "work" }));
    assert_eq!(created.status, 201, "{}", created.text());
    let session = created.json();
    let id = session["id"].as_str().unwrap().to_string();
    assert_eq!(session["token"], agent.id.as_str());
    assert_eq!(session["profile"]["name"], "default");
    assert_eq!(session["workspace"], workspace(w).as_str());
    let listed = assert_ok(&api.get("/v1/sessions"));
    let ids: Vec<&Value> = listed["sessions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| &s["id"])
        .collect();
    assert_eq!(ids, [&Value::from(id.as_str())]);
    let got = assert_ok(&api.get(&format!("/v1/sessions/{id}")));
    assert_eq!(
        (got["id"].as_str(), got["name"].as_str()),
        (Some(&*id), Some("work"))
    );

    let ran = run_in(
        &api,
        &id,
        json!({ "command": "echo hi > made.txt; echo out; echo err >&2" }),
    );
    assert_eq!(ran["exit_code"], 0, "{ran}");
    assert_eq!(
        (ran["stdout"].as_str(), ran["stderr"].as_str()),
        (Some("out\n"), Some("err\n"))
    );
    assert_eq!(ran["session"], id.as_str());
    assert!(
        !w.workspace.join("made.txt").exists(),
        "a run in a session wrote to the host's workspace"
    );

    // argv as it is, stdin, and the command's exit status.
    let ran = run_in(
        &api,
        &id,
        json!({ "argv": ["sh", "-c", "cat; cat made.txt; exit 3"], "stdin": "fed\n" }),
    );
    assert_eq!(
        (ran["exit_code"].as_i64(), ran["stdout"].as_str()),
        (Some(3), Some("fed\nhi\n"))
    );

    let lines = api
        .stream(
            &format!("/v1/sessions/{id}/runs/stream"),
            &json!({ "argv": ["sh", "-c", "cat made.txt; echo e >&2"] }),
        )
        .rest();
    let (out, err, result) = split_stream(&lines);
    assert_eq!((out.as_str(), err.as_str()), ("hi\n", "e\n"));
    assert_eq!(result["type"], "result", "{lines:?}");
    assert_eq!(result["exit_code"], 0);
    assert!(
        result.get("stdout").is_none(),
        "the output came as lines: {result}"
    );

    let patch = api.send(
        "GET",
        &format!("/v1/sessions/{id}/diff"),
        &[("Accept", "text/x-diff")],
        b"",
    );
    assert_eq!(patch.status, 200);
    assert!(patch
        .header("content-type")
        .unwrap()
        .starts_with("text/x-diff"));
    let text = patch.text();
    assert!(
        text.contains("b/made.txt") && text.contains("+hi"),
        "{text}"
    );
    let diff = assert_ok(&api.get(&format!("/v1/sessions/{id}/diff")));
    assert_eq!(diff["session"], id.as_str());
    let paths: Vec<&Value> = diff["changes"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| &c["path"])
        .collect();
    assert_eq!(paths, [&Value::from("made.txt")], "{diff}");
    let got = assert_ok(&api.get(&format!("/v1/sessions/{id}")));
    assert_eq!(got["changed_files"], 1, "{got}");
    assert!(!w.workspace.join("made.txt").exists());
}

both_modes!(throwaway_runs);
/// Throwaway runs, whole and streamed: nothing reaches the host, a variable the profile does not
/// allow is dropped; one in a directory under the token's workspace, kept as a session.
fn throwaway_runs(w: &World) {
    let agent = agent_token(w);
    let server = Server::start(w, &[]);
    let api = server.client(&agent.token);

    let ran = assert_ok(&api.post(
        "/v1/runs",
        &json!({
            "command": "echo t > t.txt; cat t.txt; echo ${NOT_ALLOWED-filtered}",
            "env": { "NOT_ALLOWED": "x" },
        }),
    ));
    assert_eq!(
        (ran["exit_code"].as_i64(), ran["stdout"].as_str()),
        (Some(0), Some("t\nfiltered\n"))
    );
    assert_eq!(
        (ran["session"].clone(), ran["kept"].clone()),
        (Value::Null, json!(false))
    );
    assert!(
        !w.workspace.join("t.txt").exists(),
        "a throwaway run wrote to the host"
    );

    let lines = api
        .stream("/v1/runs/stream", &json!({ "argv": ["echo", "streamed"] }))
        .rest();
    let (out, _, result) = split_stream(&lines);
    assert_eq!(out, "streamed\n");
    assert_eq!(
        (result["type"].as_str(), result["exit_code"].as_i64()),
        (Some("result"), Some(0))
    );

    // The request's time limit.
    let slow = json!({ "argv": ["sleep", "5"], "timeout": 0.3 });
    let ran = assert_ok(&api.post("/v1/runs", &slow));
    assert_eq!(
        (ran["exit_code"].as_i64(), ran["limit"].as_str()),
        (Some(124), Some("timeout")),
        "{ran}"
    );

    // A directory under the token's workspace may be named; the layer kept, as a session.
    std::fs::create_dir(w.workspace.join("sub")).unwrap();
    w.give(&w.workspace.join("sub"));
    let ran = assert_ok(&api.post(
        "/v1/runs",
        &json!({ "command": "pwd; echo k > k.txt", "workspace": "sub", "keep": true }),
    ));
    assert!(
        ran["stdout"].as_str().unwrap().trim_end().ends_with("/sub"),
        "{ran}"
    );
    assert_eq!(ran["kept"], true);
    let kept = ran["session"].as_str().unwrap();
    let diff = assert_ok(&api.get(&format!("/v1/sessions/{kept}/diff")));
    assert_eq!(diff["changes"][0]["path"], "k.txt", "{diff}");
    assert!(!w.workspace.join("sub/k.txt").exists());
}

both_modes!(an_operator_applies_reverts_and_discards);
/// The operator's side of a session: a dry run writes nothing, apply writes the file, revert
/// takes it out, discard ends the session (a run in it is then refused).
fn an_operator_applies_reverts_and_discards(w: &World) {
    let agent = agent_token(w);
    let operator = operator_token(w);
    let server = Server::start(w, &[]);
    let api = server.client(&agent.token);
    let op = server.client(&operator.token);
    let id = new_session(&api);
    run_in(&api, &id, json!({ "command": "echo hi > made.txt" }));
    let made = w.workspace.join("made.txt");

    let dry = assert_ok(&op.post(
        &format!("/v1/sessions/{id}/apply"),
        &json!({ "dry_run": true }),
    ));
    assert!(!made.exists(), "a dry run wrote: {dry}");
    let applied = op.post(&format!("/v1/sessions/{id}/apply"), &json!({}));
    assert_eq!(applied.status, 200, "{}", applied.text());
    assert_eq!(std::fs::read_to_string(&made).unwrap(), "hi\n");

    assert_ok(&op.post(&format!("/v1/sessions/{id}/revert"), &json!({})));
    assert!(!made.exists(), "revert left the file");

    // Applied in part (the session stays active), then discarded: neither its revert nor an
    // apply is taken any more, and what was applied stays.
    run_in(&api, &id, json!({ "command": "echo other > other.txt" }));
    let part = op.post(
        &format!("/v1/sessions/{id}/apply"),
        &json!({ "paths": ["made.txt"] }),
    );
    assert_eq!(part.status, 200, "{}", part.text());
    assert!(made.exists() && !w.workspace.join("other.txt").exists());

    let discarded = assert_ok(&op.post(&format!("/v1/sessions/{id}/discard"), &json!({})));
    assert_eq!(discarded["lifecycle"], "discarded", "{discarded}");
    let got = assert_ok(&api.get(&format!("/v1/sessions/{id}")));
    assert_eq!(got["lifecycle"], "discarded");
    let again = api.post(
        &format!("/v1/sessions/{id}/runs"),
        &json!({ "argv": ["true"] }),
    );
    assert_refused(&again, 409, "session_discarded");
    for action in ["revert", "apply"] {
        let refused = op.post(&format!("/v1/sessions/{id}/{action}"), &json!({}));
        let body = assert_refused(&refused, 409, "session_discarded");
        assert!(
            body["message"].as_str().unwrap().contains("reverted"),
            "{body}"
        );
    }
    assert_eq!(std::fs::read_to_string(&made).unwrap(), "hi\n");
    assert!(!w.workspace.join("other.txt").exists());
}

both_modes!(an_apply_writes_the_change_set_reviewed_or_nothing);
/// The diff's digest (in the JSON, and the patch's `Airlock-Digest`) named as `reviewed`: a run
/// that wrote after the diff was read makes the apply a 409 `review_stale` that writes nothing;
/// the digest of the diff read again applies.
fn an_apply_writes_the_change_set_reviewed_or_nothing(w: &World) {
    let agent = agent_token(w);
    let operator = operator_token(w);
    let server = Server::start(w, &[]);
    let api = server.client(&agent.token);
    let op = server.client(&operator.token);
    let id = new_session(&api);
    run_in(&api, &id, json!({ "command": "echo seen > seen.txt" }));
    let diff_path = format!("/v1/sessions/{id}/diff");
    let reviewed = assert_ok(&api.get(&diff_path))["digest"]
        .as_str()
        .unwrap()
        .to_string();
    assert!(reviewed.starts_with("sha256:"), "{reviewed}");
    let patch = api.send("GET", &diff_path, &[("Accept", "text/x-diff")], b"");
    assert_eq!(patch.status, 200, "{}", patch.text());
    assert_eq!(patch.header("airlock-digest"), Some(reviewed.as_str()));

    run_in(&api, &id, json!({ "command": "echo late > late.txt" }));
    let apply_path = format!("/v1/sessions/{id}/apply");
    let stale = op.post(&apply_path, &json!({ "reviewed": reviewed }));
    let body = assert_refused(&stale, 409, "review_stale");
    assert!(
        body["message"].as_str().unwrap().contains(&reviewed),
        "the message names the digest reviewed: {body}"
    );
    let (seen, late) = (w.workspace.join("seen.txt"), w.workspace.join("late.txt"));
    assert!(!seen.exists() && !late.exists(), "a stale apply wrote");

    let again = assert_ok(&api.get(&diff_path))["digest"]
        .as_str()
        .unwrap()
        .to_string();
    assert_ne!(again, reviewed);
    let applied = assert_ok(&op.post(&apply_path, &json!({ "reviewed": again })));
    assert_eq!(applied["digest"], again.as_str(), "{applied}");
    assert!(seen.exists() && late.exists());
}

both_modes!(an_operator_pauses_resumes_and_kills_a_run);
/// The kill switch on a running sandbox: paused (the session says so), resumed, killed (the
/// streamed run ends with its result, its processes gone).
fn an_operator_pauses_resumes_and_kills_a_run(w: &World) {
    let agent = agent_token(w);
    let operator = operator_token(w);
    let server = Server::start(w, &[]);
    let api = server.client(&agent.token);
    let op = server.client(&operator.token);
    let id = new_session(&api);
    let mark = marker(w, "killed");
    let mut run = api.stream(
        &format!("/v1/sessions/{id}/runs/stream"),
        &running_until_stopped(&mark),
    );
    assert_eq!(run.next_line().unwrap()["data"], "up\n");

    let paused = assert_ok(&op.post(
        &format!("/v1/sessions/{id}/pause"),
        &json!({ "reason": "look" }),
    ));
    assert_eq!(paused["sandboxes"].as_array().unwrap().len(), 1, "{paused}");
    let got = assert_ok(&api.get(&format!("/v1/sessions/{id}")));
    assert_eq!(got["status"], "paused", "{got}");
    assert_ok(&op.post(&format!("/v1/sessions/{id}/resume"), &json!({})));
    let got = assert_ok(&api.get(&format!("/v1/sessions/{id}")));
    assert_eq!(got["status"], "running", "{got}");

    let killed = assert_ok(&op.post(
        &format!("/v1/sessions/{id}/kill"),
        &json!({ "reason": "stop" }),
    ));
    assert_eq!(killed["sandboxes"].as_array().unwrap().len(), 1, "{killed}");
    let result = run.rest().pop().unwrap();
    assert_eq!(result["type"], "result", "{result}");
    assert_ne!(result["exit_code"], 0, "{result}");
    wait_for(
        "the killed run's processes gone",
        Duration::from_secs(5),
        || !process_running(&mark),
    );
}

both_modes!(an_operator_disables_and_enables_the_profile);
/// Disable needs a reason; then every run and new session of the profile is refused with it,
/// streamed runs with a 403 too; status shows the switch; enable lifts it.
fn an_operator_disables_and_enables_the_profile(w: &World) {
    let agent = agent_token(w);
    let operator = operator_token(w);
    let server = Server::start(w, &[]);
    let api = server.client(&agent.token);
    let op = server.client(&operator.token);
    let echo = json!({ "argv": ["echo", "ok"] });
    assert_ok(&api.post("/v1/runs", &echo));

    assert_refused(&op.post("/v1/disable", &json!({})), 400, "bad_argument");
    assert_ok(&op.post("/v1/disable", &json!({ "reason": "incident 7" })));
    let refused = assert_refused(&api.post("/v1/runs", &echo), 403, "disabled");
    assert!(
        refused["message"].as_str().unwrap().contains("incident 7"),
        "{refused}"
    );
    assert_refused(&api.post("/v1/sessions", &json!({})), 403, "disabled");
    assert_refused(&api.post("/v1/runs/stream", &echo), 403, "disabled");
    let status = assert_ok(&api.get("/v1/status"));
    assert!(
        status["switches"]["profiles"].get("default").is_some(),
        "{status}"
    );

    let enabled = assert_ok(&op.post("/v1/enable", &json!({})));
    assert_eq!(enabled["was_on"], true, "{enabled}");
    let ran = assert_ok(&api.post("/v1/runs", &echo));
    assert_eq!(ran["stdout"], "ok\n");
}

both_modes!(the_audit_log_and_following_it);
/// The audit log through the API: filtered by session and action; an agent reads its own token's
/// records only, the operator everyone's; followed, a new record arrives as a line, and another
/// token's does not.
fn the_audit_log_and_following_it(w: &World) {
    let agent = agent_token(w);
    let operator = operator_token(w);
    let server = Server::start(w, &[]);
    let api = server.client(&agent.token);
    let op = server.client(&operator.token);
    let id = new_session(&api);
    run_in(&api, &id, json!({ "argv": ["true"] }));
    let mine = op.post("/v1/sessions", &json!({ "workspace": workspace(w) }));
    assert_eq!(mine.status, 201, "{}", mine.text());
    let mine = mine.json()["id"].as_str().unwrap().to_string();

    let records = assert_ok(&api.get(&format!("/v1/audit?session={id}&action=run")));
    let records = records["records"].as_array().unwrap();
    assert!(
        records.iter().any(|r| r["action"] == "run.result"),
        "{records:?}"
    );
    assert!(
        records.iter().all(|r| r["session"] == id.as_str()),
        "{records:?}"
    );
    // An agent reads only its own token's records; the operator reads the operator's too.
    let theirs = assert_ok(&api.get("/v1/audit"));
    let theirs = theirs["records"].as_array().unwrap();
    assert!(!theirs.is_empty());
    assert!(
        theirs.iter().all(|r| r["by"]["token"] == agent.id.as_str()),
        "{theirs:?}"
    );
    let all = assert_ok(&op.get("/v1/audit?action=session.created"));
    assert_eq!(all["records"].as_array().unwrap().len(), 2, "{all}");
    assert!(all.to_string().contains(&mine));
    assert_refused(&api.get("/v1/audit?since=yesterday"), 400, "bad_since");

    let mut follow = api
        .open("GET", "/v1/audit?follow=true&action=run.result", &[], b"")
        .unwrap();
    assert_eq!(follow.status, 200);
    assert_eq!(follow.next_line().unwrap()["session"], id.as_str());
    // The operator's run is not the agent's to read, followed or not.
    let ws = workspace(w);
    assert_ok(&op.post("/v1/runs", &json!({ "argv": ["true"], "workspace": ws })));
    let ran = assert_ok(&api.post("/v1/runs", &json!({ "argv": ["true"] })));
    assert_eq!(ran["exit_code"], 0);
    let next = follow.next_line().unwrap();
    assert_eq!(
        (next["action"].as_str(), next["session"].clone()),
        (Some("run.result"), Value::Null),
        "{next}"
    );
    assert_eq!(next["by"]["token"], agent.id.as_str(), "{next}");
    follow.hang_up();
}

both_modes!(openapi_and_health_need_no_token);
/// /openapi.json and /v1/health answer without a token; nothing else does.
fn openapi_and_health_need_no_token(w: &World) {
    let server = Server::start(w, &[]);
    let anonymous = server.anonymous();
    let health = assert_ok(&anonymous.get("/v1/health"));
    assert_eq!(health["status"], "ok");
    assert!(health["version"].is_string());
    let openapi = anonymous.get("/openapi.json");
    assert_eq!(openapi.status, 200);
    assert_eq!(openapi.header("content-type"), Some("application/json"));
    assert!(openapi.json().is_object());
    // Everything else needs one.
    let refused = assert_refused(&anonymous.get("/v1/sessions"), 401, "token_missing");
    assert!(refused.is_object());
}

both_modes!(an_agent_is_refused_what_only_an_operator_does);
/// An agent token trying what only an operator does: 403 role_forbidden for each, nothing done
/// (no file applied, the run still going, the profile not disabled), and each refusal on record
/// as ACTION.refused, denied, with the agent's token id and the request.
fn an_agent_is_refused_what_only_an_operator_does(w: &World) {
    let agent = agent_token(w);
    let operator = operator_token(w);
    let server = Server::start(w, &[]);
    let api = server.client(&agent.token);
    let op = server.client(&operator.token);
    let id = new_session(&api);
    run_in(&api, &id, json!({ "command": "echo hi > made.txt" }));
    let mark = marker(w, "agent-kill");
    let mut run = api.stream(
        &format!("/v1/sessions/{id}/runs/stream"),
        &running_until_stopped(&mark),
    );
    assert_eq!(run.next_line().unwrap()["data"], "up\n");

    let attempts = [
        ("apply", format!("/v1/sessions/{id}/apply")),
        ("revert", format!("/v1/sessions/{id}/revert")),
        ("discard", format!("/v1/sessions/{id}/discard")),
        ("kill", format!("/v1/sessions/{id}/kill")),
        ("pause", format!("/v1/sessions/{id}/pause")),
        ("disable", "/v1/disable".to_string()),
        ("enable", "/v1/enable".to_string()),
    ];
    for (action, path) in &attempts {
        let body = match *action {
            "kill" | "pause" | "disable" => json!({ "reason": "the agent wants to" }),
            _ => json!({}),
        };
        assert_refused(&api.post(path, &body), 403, "role_forbidden");
    }
    assert!(
        !w.workspace.join("made.txt").exists(),
        "an agent's apply wrote"
    );
    assert!(
        process_running(&mark),
        "an agent's kill or disable stopped the run"
    );
    let status = assert_ok(&op.get("/v1/status"));
    assert!(
        status["switches"]["profiles"].get("default").is_none(),
        "{status}"
    );
    let got = assert_ok(&api.get(&format!("/v1/sessions/{id}")));
    assert_eq!(
        (got["lifecycle"].as_str(), got["status"].as_str()),
        (Some("active"), Some("running"))
    );

    // Each refusal is on record: a record of its own, or (past five a second of one token) in
    // the summary the server writes within a second, naming it.
    let on_record = |action: &str, path: &str| {
        audit_log(w).into_iter().find(|r| {
            let own = r["action"] == format!("{action}.refused");
            let summed = r["action"] == "refusals.suppressed"
                && r["refused"].as_array().unwrap().iter().any(|k| {
                    k["action"] == format!("{action}.refused")
                        && k["asked"].as_str().unwrap().contains(path)
                });
            own || summed
        })
    };
    for (action, path) in &attempts {
        let mut record = None;
        wait_for("the refusal on record", Duration::from_secs(5), || {
            record = on_record(action, path);
            record.is_some()
        });
        let record = record.unwrap();
        assert_eq!(record["by"]["token"], agent.id.as_str(), "{record}");
        assert!(
            record.to_string().contains(path.as_str()),
            "names the request: {record}"
        );
    }
    // The operator does what the agent could not.
    assert_ok(&op.post(&format!("/v1/sessions/{id}/kill"), &json!({})));
    assert_eq!(run.rest().pop().unwrap()["type"], "result");
    wait_for("the run killed", Duration::from_secs(5), || {
        !process_running(&mark)
    });
}

both_modes!(a_token_reaches_only_its_sessions_profile_and_workspace);
/// A token's binding: another agent token of the same profile, and the tokens of another
/// profile (an operator's too), are refused the session (403 outside_token_binding) and do not
/// list it; a workspace beyond the token's is refused; no request can name a profile.
fn a_token_reaches_only_its_sessions_profile_and_workspace(w: &World) {
    other_profile(w);
    let ws = w.workspace.to_str().unwrap();
    let alice = agent_token(w);
    let bob = agent_token(w);
    let elsewhere = make_token(w, "agent", &["--workspace", ws, "--profile", "other"]);
    let other_operator = make_token(w, "operator", &["--profile", "other"]);
    let server = Server::start(w, &[]);
    let (alice_api, bob_api) = (server.client(&alice.token), server.client(&bob.token));
    let other_api = server.client(&elsewhere.token);
    let other_op = server.client(&other_operator.token);
    let id = new_session(&alice_api);
    run_in(
        &alice_api,
        &id,
        json!({ "command": "echo secret > made.txt" }),
    );

    // Another token of the same profile: not its session.
    let paths = [
        ("GET", format!("/v1/sessions/{id}")),
        ("GET", format!("/v1/sessions/{id}/diff")),
        ("POST", format!("/v1/sessions/{id}/runs")),
        ("POST", format!("/v1/sessions/{id}/runs/stream")),
    ];
    let run_body = json!({ "argv": ["cat", "made.txt"] }).to_string();
    for (method, path) in &paths {
        let reply = bob_api.send(method, path, &[], run_body.as_bytes());
        assert_refused(&reply, 403, "outside_token_binding");
    }
    let listed = assert_ok(&bob_api.get("/v1/sessions"));
    assert_eq!(listed["sessions"], json!([]), "bob sees alice's session");

    // Another profile's tokens, even an operator's: not its session.
    let other_id = new_session(&other_api);
    let got = assert_ok(&other_api.get(&format!("/v1/sessions/{other_id}")));
    assert_eq!(got["profile"]["name"], "other");
    for path in [
        format!("/v1/sessions/{id}"),
        format!("/v1/sessions/{id}/diff"),
    ] {
        assert_refused(&other_op.get(&path), 403, "outside_token_binding");
        assert_refused(&other_api.get(&path), 403, "outside_token_binding");
    }
    for action in ["apply", "revert", "kill", "discard", "runs", "runs/stream"] {
        let body = match action {
            "runs" | "runs/stream" => json!({ "argv": ["cat", "made.txt"] }),
            _ => json!({}),
        };
        let reply = other_op.post(&format!("/v1/sessions/{id}/{action}"), &body);
        assert_refused(&reply, 403, "outside_token_binding");
    }
    assert_refused(
        &alice_api.get(&format!("/v1/sessions/{other_id}")),
        403,
        "outside_token_binding",
    );
    let listed = assert_ok(&other_op.get("/v1/sessions"));
    assert_eq!(listed["sessions"].as_array().unwrap().len(), 1, "{listed}");
    assert!(!w.workspace.join("made.txt").exists());

    // A workspace beyond the token's.
    let outside = w.outside.to_str().unwrap();
    for (path, body) in [
        ("/v1/sessions", json!({ "workspace": outside })),
        ("/v1/sessions", json!({ "workspace": "../outside" })),
        (
            "/v1/runs",
            json!({ "argv": ["true"], "workspace": outside }),
        ),
        (
            "/v1/runs/stream",
            json!({ "argv": ["true"], "workspace": outside }),
        ),
    ] {
        assert_refused(&alice_api.post(path, &body), 403, "outside_token_binding");
    }
    // No request names a profile: there is no field for it.
    assert_refused(
        &alice_api.post("/v1/sessions", &json!({ "profile": "other" })),
        400,
        "bad_request_body",
    );
    assert_refused(
        &alice_api.post("/v1/runs", &json!({ "argv": ["true"], "profile": "other" })),
        400,
        "bad_request_body",
    );
}

both_modes!(token_list_has_a_header_over_its_columns, |w: &World| {
    let list = || stdout(&w.airlock().args(["token", "list"]).output().unwrap());
    assert_eq!(list(), "", "no token: nothing on stdout");
    let agent = agent_token(w);
    let listed = list();
    let lines: Vec<&str> = listed.lines().collect();
    assert_eq!(lines.len(), 2, "{listed}");
    let (header, row) = (lines[0], lines[1]);
    assert!(header.starts_with("ID "), "{listed}");
    assert!(row.starts_with(&agent.id), "{listed}");
    // Each value starts under its column's name.
    for (column, value) in [
        ("ROLE", "agent"),
        ("PROFILE", "default"),
        ("STATE", "valid"),
    ] {
        assert_eq!(header.find(column), row.find(value), "{column}: {listed}");
    }
    assert!(row.ends_with(w.workspace.to_str().unwrap()), "{listed}");
});

both_modes!(tokens_missing_wrong_revoked_or_expired_open_nothing);
/// 401 with its code for a missing token (with WWW-Authenticate), a wrong one, a revoked one
/// (from the next request on, the server still running), and an expired one.
fn tokens_missing_wrong_revoked_or_expired_open_nothing(w: &World) {
    let agent = agent_token(w);
    let short = make_token(
        w,
        "agent",
        &[
            "--workspace",
            w.workspace.to_str().unwrap(),
            "--expires",
            "1s",
        ],
    );
    let server = Server::start(w, &[]);
    let api = server.client(&agent.token);
    assert_ok(&api.get("/v1/sessions"));

    let missing = server.anonymous().get("/v1/sessions");
    assert_refused(&missing, 401, "token_missing");
    assert_eq!(missing.header("www-authenticate"), Some("Bearer"));
    let (head, secret) = agent.token.rsplit_once('_').unwrap();
    let flipped = format!("{head}_{}", secret.replace(|c: char| c != '0', "0"));
    for wrong in [
        flipped.as_str(),
        "airlock_0011223344556677_00",
        "not-a-token",
    ] {
        assert_refused(
            &server.client(wrong).get("/v1/sessions"),
            401,
            "token_unknown",
        );
    }
    let basic = server.anonymous().send(
        "GET",
        "/v1/sessions",
        &[("Authorization", "Basic YTpi")],
        b"",
    );
    assert_refused(&basic, 401, "token_missing");
    // The token in airlock's own header (for a router that drops Authorization) opens the same
    // door, and only with the token itself; Authorization decides when both come.
    let own_header = |token: &str, extra: &[(&str, &str)]| {
        let mut headers = vec![("X-Airlock-Token", token)];
        headers.extend_from_slice(extra);
        server
            .anonymous()
            .send("GET", "/v1/sessions", &headers, b"")
    };
    assert_ok(&own_header(&agent.token, &[]));
    assert_refused(&own_header(&flipped, &[]), 401, "token_unknown");
    let bearer_wrong = format!("Bearer {flipped}");
    assert_refused(
        &own_header(&agent.token, &[("Authorization", &bearer_wrong)]),
        401,
        "token_unknown",
    );

    let out = w
        .airlock()
        .args(["token", "revoke", &agent.id])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_refused(&api.get("/v1/sessions"), 401, "token_revoked");
    assert_refused(
        &api.post("/v1/runs", &json!({ "argv": ["true"] })),
        401,
        "token_revoked",
    );

    let expiring = server.client(&short.token);
    wait_for("the token to expire", Duration::from_secs(4), || {
        let reply = expiring.get("/v1/sessions");
        if reply.status == 200 {
            return false;
        }
        assert_refused(&reply, 401, "token_expired");
        true
    });
}

/// Requests that are wrong: malformed JSON, wrong types, unknown fields, no command, a body over
/// --max-body (one just under it runs), an unknown session or endpoint, a wrong method; each a
/// 4xx with its code and a message. Output beyond --max-output is cut, and the answer says so.
#[test]
fn bodies_paths_and_methods_that_are_wrong() {
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    let agent = agent_token(&w);
    let server = Server::start(&w, &["--max-body", "1000", "--max-output", "1000"]);
    let api = server.client(&agent.token);
    let id = new_session(&api);
    let send = |method: &str, path: &str, body: &str| api.send(method, path, &[], body.as_bytes());

    let bad = assert_refused(
        &send("POST", "/v1/runs", r#"{"argv": ["true""#),
        400,
        "bad_json",
    );
    assert_eq!(
        bad.as_object().unwrap().len(),
        2,
        "only code and message: {bad}"
    );
    for (path, body, code) in [
        ("/v1/runs", "not json", "bad_json"),
        ("/v1/sessions", "[", "bad_json"),
        (&format!("/v1/sessions/{id}/revert"), "not json", "bad_json"),
        (
            &format!("/v1/sessions/{id}/discard"),
            r#"{"now": true}"#,
            "bad_request_body",
        ),
        ("/v1/runs", r#"{"argv": 5}"#, "bad_request_body"),
        (
            "/v1/runs",
            r#"{"argv": ["true"], "timeout": "1"}"#,
            "bad_request_body",
        ),
        (
            "/v1/runs",
            r#"{"argv": ["true"], "stdin": 7}"#,
            "bad_request_body",
        ),
        ("/v1/sessions", r#"{"name": 1}"#, "bad_request_body"),
        ("/v1/runs", "{}", "no_command"),
        ("/v1/runs", r#"{"argv": []}"#, "bad_argv"),
        (
            "/v1/runs",
            r#"{"argv": ["true"], "command": "true"}"#,
            "command_and_argv",
        ),
        (
            "/v1/runs",
            r#"{"argv": ["true"], "timeout": -1}"#,
            "bad_timeout",
        ),
    ] {
        assert_refused(&send("POST", path, body), 400, code);
    }
    let unknown = r#"{"argv": ["true"], "sudo": true}"#;
    let unknown = assert_refused(&send("POST", "/v1/runs", unknown), 400, "bad_request_body");
    assert!(
        unknown["message"].as_str().unwrap().contains("sudo"),
        "{unknown}"
    );

    let fits = json!({ "argv": ["echo", "x".repeat(900)] }).to_string();
    assert!(fits.len() < 1000);
    let ran = assert_ok(&send("POST", "/v1/runs", &fits));
    assert_eq!(ran["stdout"].as_str().unwrap().len(), 901);
    let too_big = json!({ "argv": ["echo", "x".repeat(1000)] }).to_string();
    assert_refused(&send("POST", "/v1/runs", &too_big), 413, "body_too_large");
    let loud = json!({ "command": "head -c 5000 /dev/zero | tr '\\0' a" }).to_string();
    let ran = assert_ok(&send("POST", "/v1/runs", &loud));
    assert_eq!(
        (
            ran["stdout"].as_str().map(str::len),
            &ran["stdout_truncated"]
        ),
        (Some(1000), &json!(true))
    );

    for (method, path) in [
        ("GET", "/v1/sessions/0123456789ab"),
        ("GET", "/v1/sessions/nope/diff"),
        ("POST", "/v1/sessions/nope/runs"),
        ("POST", "/v1/sessions/nope/runs/stream"),
    ] {
        let reply = send(method, path, r#"{"argv": ["true"]}"#);
        assert_refused(&reply, 404, "session_not_found");
    }
    assert_refused(&send("GET", "/v1/nothing", ""), 404, "no_such_endpoint");
    assert_refused(&send("GET", "/v2/sessions", ""), 404, "no_such_endpoint");
    assert_refused(&send("GET", "/v1/runs", ""), 405, "method_not_allowed");
    assert_refused(
        &send("DELETE", "/v1/sessions", ""),
        405,
        "method_not_allowed",
    );
    assert_refused(&send("POST", "/v1/status", "{}"), 405, "method_not_allowed");
}

both_modes!(a_client_that_stops_reading_blocks_no_one_else);
/// A client that stops reading a streamed flood of output holds up only its own run: another
/// run is answered at once. Once it hangs up, the flood is killed.
fn a_client_that_stops_reading_blocks_no_one_else(w: &World) {
    let agent = agent_token(w);
    let server = Server::start(w, &[]);
    let api = server.client(&agent.token);
    let mark = marker(w, "flood");
    let mut flood = api.stream(
        "/v1/runs/stream",
        &json!({ "argv": ["sh", "-c", "yes | head -c 50000000", mark] }),
    );
    assert_eq!(flood.next_line().unwrap()["type"], "stdout");
    // The flood's client reads no more; another run goes through all the same.
    let started = Instant::now();
    let ran = assert_ok(&api.post("/v1/runs", &json!({ "argv": ["echo", "other"] })));
    assert_eq!(ran["stdout"], "other\n");
    // Not held until the flood ends (it never would: nobody reads it); 20 s for a loaded machine.
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "took {:?}",
        started.elapsed()
    );
    assert!(
        process_running(&mark),
        "the flood ended on its own: the test shows nothing"
    );
    flood.hang_up();
    wait_for(
        "the flood killed once its client hung up",
        Duration::from_secs(10),
        || !process_running(&mark),
    );
}

both_modes!(a_run_whose_client_goes_away_is_killed_and_recorded);
/// A client that hangs up mid-run, streamed or waiting for the whole answer: the run's sandbox is
/// killed, `run.abandoned` recorded with its token; the session is usable after.
fn a_run_whose_client_goes_away_is_killed_and_recorded(w: &World) {
    let agent = agent_token(w);
    let server = Server::start(w, &[]);
    let api = server.client(&agent.token);
    let id = new_session(&api);

    // Streamed, the command printing nothing more after its first line.
    let mark = marker(w, "streamed");
    let mut run = api.stream(
        &format!("/v1/sessions/{id}/runs/stream"),
        &running_until_stopped(&mark),
    );
    assert_eq!(run.next_line().unwrap()["data"], "up\n");
    assert!(process_running(&mark));
    run.hang_up();
    wait_for("the streamed run killed", Duration::from_secs(10), || {
        !process_running(&mark)
    });

    // Answered once it ends: the client gives up waiting.
    let mark = marker(w, "waited");
    let conn = api.post_unread("/v1/runs", &running_until_stopped(&mark));
    wait_for("the run started", Duration::from_secs(10), || {
        process_running(&mark)
    });
    conn.hang_up();
    drop(conn);
    wait_for("the waited-for run killed", Duration::from_secs(10), || {
        !process_running(&mark)
    });

    wait_for("two run.abandoned records", Duration::from_secs(5), || {
        audit_of(w, "run.abandoned").len() == 2
    });
    let abandoned = audit_of(w, "run.abandoned");
    let of = |asked: &str| {
        abandoned
            .iter()
            .find(|r| r["argv"][0] == asked)
            .unwrap_or_else(|| panic!("no run.abandoned for {asked}: {abandoned:?}"))
    };
    let streamed = of(&format!("POST /v1/sessions/{id}/runs/stream"));
    assert_eq!(streamed["session"], id.as_str(), "{streamed}");
    assert_eq!(of("POST /v1/runs")["session"], Value::Null);
    assert!(abandoned
        .iter()
        .all(|r| r["by"]["token"] == agent.id.as_str()));
    // The session is still usable.
    let ran = run_in(&api, &id, json!({ "argv": ["echo", "again"] }));
    assert_eq!(ran["stdout"], "again\n");
}

both_modes!(fifty_runs_in_fifty_sessions_at_once);
/// Fifty runs at once, in fifty sessions of five tokens: each answered with its own output, each
/// session holding its own file.
fn fifty_runs_in_fifty_sessions_at_once(w: &World) {
    let tokens: Vec<_> = (0..5).map(|_| agent_token(w)).collect();
    let server = Server::start(w, &["--runs-per-token", "10"]);
    let clients: Vec<Client> = tokens.iter().map(|t| server.client(&t.token)).collect();
    let sessions: Vec<(usize, String)> =
        (0..50).map(|i| (i, new_session(&clients[i % 5]))).collect();
    let started = Instant::now();
    let answers: Vec<(usize, String, Value)> = std::thread::scope(|scope| {
        let handles: Vec<_> = sessions
            .iter()
            .map(|(i, id)| {
                let api = clients[i % 5].clone();
                scope.spawn(move || {
                    let body = json!({ "command": format!("echo {i} > mine; cat mine") });
                    (*i, id.clone(), run_in(&api, id, body))
                })
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    eprintln!("50 runs at once: {:?}", started.elapsed());
    for (i, id, ran) in answers {
        assert_eq!(ran["exit_code"], 0, "{ran}");
        assert_eq!(ran["stdout"], format!("{i}\n").as_str());
        assert_eq!(ran["session"], id.as_str());
    }
    // Each session holds its own file.
    let (i, id) = &sessions[17];
    let ran = run_in(&clients[i % 5], id, json!({ "argv": ["cat", "mine"] }));
    assert_eq!(ran["stdout"], "17\n");
}

both_modes!(runs_in_one_session_take_turns);
/// Runs sent at once to one session take turns: each sees the files of those before it, none
/// fails.
fn runs_in_one_session_take_turns(w: &World) {
    let agent = agent_token(w);
    let server = Server::start(w, &[]);
    let api = server.client(&agent.token);
    let id = new_session(&api);
    // Each run counts the files the runs before it left, then leaves one: if two ran at once,
    // two would count the same.
    let script = "n=$(ls | grep -c '^f'); sleep 0.1; touch f$n-$$; echo $n";
    let seen: Vec<Value> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..6)
            .map(|_| {
                let api = api.clone();
                let id = id.clone();
                scope.spawn(move || run_in(&api, &id, json!({ "command": script })))
            })
            .collect();
        handles.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let mut counts: Vec<i64> = seen
        .iter()
        .map(|ran| {
            assert_eq!(ran["exit_code"], 0, "{ran}");
            ran["stdout"].as_str().unwrap().trim().parse().unwrap()
        })
        .collect();
    counts.sort();
    assert_eq!(counts, [0, 1, 2, 3, 4, 5], "{seen:?}");
}

/// --runs-per-token 1: a second run at once is 429 too_many_runs (another token's is not), and
/// goes through once the first ended. --requests-per-second 1: the third request of a burst is
/// 429 rate_limited (another token's is not), and a second later one is taken again.
#[test]
fn runs_per_token_and_requests_per_second() {
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    let (agent, other) = (agent_token(&w), agent_token(&w));
    let server = Server::start(&w, &["--runs-per-token", "1"]);
    let api = server.client(&agent.token);
    let mark = marker(&w, "slot");
    let mut first = api.stream("/v1/runs/stream", &running_until_stopped(&mark));
    assert_eq!(first.next_line().unwrap()["data"], "up\n");
    let second = api.post("/v1/runs", &json!({ "argv": ["true"] }));
    assert_refused(&second, 429, "too_many_runs");
    assert_eq!(second.header("retry-after"), Some("1"));
    assert_ok(
        &server
            .client(&other.token)
            .post("/v1/runs", &json!({ "argv": ["true"] })),
    );
    first.hang_up();
    wait_for("the slot freed", Duration::from_secs(10), || {
        api.post("/v1/runs", &json!({ "argv": ["true"] })).status == 200
    });
    drop(server);

    let server = Server::start(&w, &["--requests-per-second", "1"]);
    let api = server.client(&other.token);
    // A burst of two, then one a second.
    assert_ok(&api.get("/v1/sessions"));
    assert_ok(&api.get("/v1/sessions"));
    let limited = api.get("/v1/sessions");
    assert_refused(&limited, 429, "rate_limited");
    assert_eq!(limited.header("retry-after"), Some("1"));
    assert_ok(&server.client(&agent.token).get("/v1/sessions"));
    std::thread::sleep(Duration::from_millis(1100));
    assert_ok(&api.get("/v1/sessions"));
}

both_modes!(clients_as_many_as_places_are_never_refused);
/// As many clients as the token has places, each asking again as soon as it has its answer: no
/// run is refused. (Before, a place was let go only after the client had read the answer that
/// held it, and one request in five was a 429 too_many_runs.)
fn clients_as_many_as_places_are_never_refused(w: &World) {
    let agent = agent_token(w);
    const PLACES: usize = 4;
    let server = Server::start(w, &["--runs-per-token", &PLACES.to_string()]);
    let refused: Vec<String> = std::thread::scope(|scope| {
        let clients: Vec<_> = (0..PLACES)
            .map(|_| {
                scope.spawn(|| {
                    let api = server.client(&agent.token);
                    (0..15)
                        .map(|_| api.post("/v1/runs", &json!({ "argv": ["true"] })))
                        .filter(|reply| reply.status != 200)
                        .map(|reply| format!("{} {}", reply.status, reply.text()))
                        .collect::<Vec<_>>()
                })
            })
            .collect();
        clients
            .into_iter()
            .flat_map(|client| client.join().unwrap())
            .collect()
    });
    assert!(refused.is_empty(), "{} refused: {refused:?}", refused.len());
}

both_modes!(sigterm_lets_a_run_finish_and_takes_no_new_connection);
/// SIGTERM: new connections are refused at once (TCP listener closed); a run going on finishes
/// and its client gets the result; the server exits 0.
fn sigterm_lets_a_run_finish_and_takes_no_new_connection(w: &World) {
    let agent = agent_token(w);
    let mut server = Server::start_tcp(w, &[]);
    let api = server.client(&agent.token);
    let mark = marker(w, "drain");
    let runner = {
        let api = api.clone();
        let body = json!({ "argv": ["sh", "-c", "sleep 8; echo finished", mark] });
        std::thread::spawn(move || api.post("/v1/runs", &body))
    };
    wait_for("the run started", Duration::from_secs(10), || {
        process_running(&mark)
    });
    server.signal(Signal::SIGTERM);
    let support::api::Addr::Tcp(addr) = server.addr.clone() else {
        unreachable!()
    };
    // While the run goes on (8 s; 5 s is time enough for a loaded machine to close the door).
    wait_for("new connections refused", Duration::from_secs(5), || {
        std::net::TcpStream::connect(addr).is_err()
    });
    assert!(
        !runner.is_finished(),
        "the run ended before the door closed"
    );
    let reply = runner.join().unwrap();
    let ran = assert_ok(&reply);
    assert_eq!(
        (ran["exit_code"].as_i64(), ran["stdout"].as_str()),
        (Some(0), Some("finished\n"))
    );
    assert!(
        server.wait(Duration::from_secs(5)).success(),
        "{}",
        server.stderr()
    );
}

both_modes!(sigterm_interrupts_runs_past_the_grace_period);
/// SIGTERM with --grace 1s and a run of 30 s: the run is interrupted, its client answered, the
/// run recorded as abandoned (the grace period named); the server exits 0 within seconds.
fn sigterm_interrupts_runs_past_the_grace_period(w: &World) {
    let agent = agent_token(w);
    let mut server = Server::start(w, &["--grace", "1s"]);
    let api = server.client(&agent.token);
    let id = new_session(&api);
    let mark = marker(w, "grace");
    let runner = {
        let api = api.clone();
        let body = json!({ "argv": ["sh", "-c", "sleep 30", mark] });
        std::thread::spawn(move || api.post(&format!("/v1/sessions/{id}/runs"), &body))
    };
    wait_for("the run started", Duration::from_secs(10), || {
        process_running(&mark)
    });
    let signalled = Instant::now();
    server.signal(Signal::SIGTERM);
    let reply = runner.join().unwrap();
    let answered = signalled.elapsed();
    let ran = assert_ok(&reply);
    assert_ne!(ran["exit_code"], 0, "{ran}");
    assert!(
        server.wait(Duration::from_secs(20)).success(),
        "{}",
        server.stderr()
    );
    // Well before the run's 30 s would have ended it (bounds a loaded machine keeps).
    let stopped = signalled.elapsed();
    assert!(
        answered < Duration::from_secs(15) && stopped < Duration::from_secs(20),
        "answered after {answered:?}, stopped after {stopped:?}"
    );
    assert!(!process_running(&mark), "the run outlived the server");
    let abandoned = audit_of(w, "run.abandoned");
    assert_eq!(abandoned.len(), 1, "{abandoned:?}");
    assert!(
        abandoned[0]["why"].as_str().unwrap().contains("grace"),
        "{abandoned:?}"
    );
}

both_modes!(sigkill_of_the_server_leaves_no_sandbox_and_a_usable_session);
/// SIGKILL of the server mid-run: the sandbox dies with it, no mount of the state directory is
/// left; a restarted server runs in the same session, whose files (those of the killed run too)
/// are there.
fn sigkill_of_the_server_leaves_no_sandbox_and_a_usable_session(w: &World) {
    let agent = agent_token(w);
    let server = Server::start(w, &[]);
    let api = server.client(&agent.token);
    let id = new_session(&api);
    run_in(&api, &id, json!({ "command": "echo before > a.txt" }));
    let before = state_mounts(w);
    let mark = marker(w, "sigkill");
    let mut run = api.stream(
        &format!("/v1/sessions/{id}/runs/stream"),
        &json!({ "argv": ["sh", "-c", "echo during > b.txt; echo up; while :; do sleep 0.05; done", mark] }),
    );
    assert_eq!(run.next_line().unwrap()["data"], "up\n");
    server.signal(Signal::SIGKILL);
    wait_for(
        "the sandbox gone with the server",
        Duration::from_secs(5),
        || !process_running(&mark),
    );
    wait_for(
        "no mount of the state directory left",
        Duration::from_secs(5),
        || state_mounts(w) == before,
    );
    drop(run);
    drop(server);

    // Before the restart, the killed run's intent has no record that closes it.
    let intents = audit_of(w, "run.intent");
    let killed_run = intents.last().unwrap()["run_id"].clone();
    assert!(audit_of(w, "run.abandoned").is_empty());

    let server = Server::start(w, &[]);
    let api = server.client(&agent.token);
    // The restarted server closed it: a record naming the run, the session counting it.
    let abandoned = audit_of(w, "run.abandoned");
    assert_eq!(abandoned.len(), 1, "{abandoned:?}");
    assert_eq!(abandoned[0]["run_id"], killed_run, "{abandoned:?}");
    assert_eq!(abandoned[0]["session"], json!(id));
    let got = assert_ok(&api.get(&format!("/v1/sessions/{id}")));
    assert_eq!(got["status"], "idle", "{got}");
    assert_eq!(got["interrupted_runs"], 1, "{got}");
    let operator = operator_token(w);
    let runs = assert_ok(
        &server
            .client(&operator.token)
            .get(&format!("/v1/sessions/{id}/runs")),
    );
    let last = runs["runs"].as_array().unwrap().last().unwrap().clone();
    assert_eq!(last["ended"], true, "{runs}");
    assert!(
        last["interrupted"]
            .as_str()
            .unwrap()
            .contains("supervisor ended"),
        "{runs}"
    );
    let ran = run_in(&api, &id, json!({ "command": "cat a.txt b.txt" }));
    assert_eq!(ran["stdout"], "before\nduring\n", "{ran}");
    // Closed once: the next run finds nothing left to close.
    assert_eq!(audit_of(w, "run.abandoned").len(), 1);
}

both_modes!(the_default_listener_is_a_private_unix_socket);
/// No --listen: STATE/airlock.sock, a socket of mode 0600 owned by the server's user; requests
/// work over it; a second server is refused while this one answers; SIGTERM removes it.
fn the_default_listener_is_a_private_unix_socket(w: &World) {
    let agent = agent_token(w);
    let mut server = Server::start(w, &[]);
    let socket = w.state.join("airlock.sock");
    let meta = std::fs::symlink_metadata(&socket).unwrap();
    assert!(meta.file_type().is_socket());
    assert_eq!(meta.permissions().mode() & 0o777, 0o600);
    let owner = if w.mode == Mode::User && is_root() {
        TEST_UID
    } else {
        nix::unistd::geteuid().as_raw()
    };
    assert_eq!(meta.uid(), owner);
    let api = server.client(&agent.token);
    let ran = assert_ok(&api.post("/v1/runs", &json!({ "argv": ["echo", "over the socket"] })));
    assert_eq!(ran["stdout"], "over the socket\n");
    // A second server is refused while this one answers there.
    let second = w.airlock().arg("serve").output().unwrap();
    assert_eq!(second.status.code(), Some(125));
    assert!(
        stderr(&second).contains("another server"),
        "{}",
        stderr(&second)
    );
    server.signal(Signal::SIGTERM);
    assert!(server.wait(Duration::from_secs(5)).success());
    assert!(!socket.exists(), "the socket outlived the server");
}

/// A non-loopback address without TLS is refused (125, naming TLS); with a certificate, a run
/// over https (curl) works, and the same port answers nothing in clear text.
#[test]
fn clear_text_beyond_loopback_is_refused_and_tls_works() {
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    let agent = agent_token(&w);
    let port = free_port().to_string();
    let out = w
        .airlock()
        .args(["serve", "--listen", &format!("0.0.0.0:{port}")])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(stderr(&out).contains("TLS"), "{}", stderr(&out));

    let (cert, key) = (w.base.join("cert.pem"), w.base.join("key.pem"));
    let made = std::process::Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "1", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1", "-keyout"])
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", stderr(&made));
    w.give(&key);
    let server = Server::start_tcp(
        &w,
        &[
            "--tls-cert",
            cert.to_str().unwrap(),
            "--tls-key",
            key.to_str().unwrap(),
        ],
    );
    let support::api::Addr::Tcp(addr) = server.addr.clone() else {
        unreachable!()
    };
    let curl = |scheme: &str| {
        std::process::Command::new("curl")
            .args(["-sS", "--max-time", "10", "--cacert"])
            .arg(&cert)
            .args(["-H", &format!("Authorization: Bearer {}", agent.token)])
            .args([
                "-H",
                "Content-Type: application/json",
                "-d",
                "{\"argv\": [\"echo\", \"tls\"]}",
            ])
            .arg(format!("{scheme}://{addr}/v1/runs"))
            .output()
            .unwrap()
    };
    let over_tls = curl("https");
    assert!(over_tls.status.success(), "{}", stderr(&over_tls));
    let ran: Value = serde_json::from_slice(&over_tls.stdout).unwrap();
    assert_eq!(ran["stdout"], "tls\n", "{ran}");
    // In clear text, the same server gives nothing.
    let clear = server
        .client(&agent.token)
        .try_send("GET", "/v1/health", &[], b"");
    assert!(clear.is_err(), "answered in clear text: {clear:?}");
}

/// A pod's server (`airlock k8s render`'s arguments): beyond loopback in clear text only when
/// the operator accepts it, which it says at start; its tokens from a file mounted in (a
/// Secret), not from the state directory: a token of the state directory opens nothing there.
#[test]
fn clear_text_when_accepted_and_tokens_from_a_mounted_file() {
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    let of_the_state_dir = agent_token(&w);
    let secret = w.base.join("secret-state");
    std::fs::create_dir(&secret).unwrap();
    w.give(&secret);
    let secret_arg = secret.to_str().unwrap();
    let operator = make_token(&w, "operator", &["--state-dir", secret_arg]);
    let tokens_file = secret.join("tokens.json");
    let port = free_port();
    let mut serve = w.airlock();
    serve
        .args([
            "serve",
            "--listen",
            &format!("0.0.0.0:{port}"),
            "--allow-clear-text",
        ])
        .arg("--tokens-file")
        .arg(&tokens_file);
    let addr = format!("127.0.0.1:{port}").parse().unwrap();
    let server = Server::start_command(&w, serve, support::api::Addr::Tcp(addr));
    assert_ok(&server.client(&operator.token).get("/v1/sessions"));
    assert_refused(
        &server.client(&of_the_state_dir.token).get("/v1/sessions"),
        401,
        "token_unknown",
    );
    assert!(
        server
            .stderr()
            .contains("no TLS beyond loopback (--allow-clear-text)"),
        "{}",
        server.stderr()
    );
    // The file is read again when it changes: a token revoked where it was made, and the
    // file copied over (as a Secret is updated), opens nothing from then on.
    let out = w
        .airlock()
        .args(["token", "revoke", &operator.id, "--state-dir", secret_arg])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    assert_refused(
        &server.client(&operator.token).get("/v1/sessions"),
        401,
        "token_revoked",
    );
}

both_modes!(a_sessions_runs_are_listed_with_the_end_of_their_output);
/// GET /v1/sessions/{id}/runs: each run with how it ended and the end of its output (the last
/// 16 KiB of each stream, and how much came before), the refused one too; another agent's token
/// reaches none of it.
fn a_sessions_runs_are_listed_with_the_end_of_their_output(w: &World) {
    let agent = agent_token(w);
    let server = Server::start(w, &[]);
    let api = server.client(&agent.token);
    let id = new_session(&api);
    run_in(
        &api,
        &id,
        json!({ "command": "echo to-stdout; echo to-stderr >&2; exit 3" }),
    );
    run_in(
        &api,
        &id,
        json!({ "command": "head -c 40000 /dev/zero | tr '\\0' a; echo; echo the-end" }),
    );
    let runs = assert_ok(&api.get(&format!("/v1/sessions/{id}/runs")))["runs"].clone();
    let runs = runs.as_array().unwrap();
    assert_eq!(runs.len(), 2, "{runs:?}");
    assert_eq!(
        runs[0]["argv"][2],
        "echo to-stdout; echo to-stderr >&2; exit 3"
    );
    assert_eq!(
        (runs[0]["ended"].as_bool(), runs[0]["exit_code"].as_i64()),
        (Some(true), Some(3))
    );
    assert_eq!(runs[0]["output"]["stdout"], "to-stdout\n");
    assert_eq!(runs[0]["output"]["stderr"], "to-stderr\n");
    assert_eq!(runs[0]["output"]["stdout_cut"], 0);
    let long = &runs[1]["output"];
    let kept = long["stdout"].as_str().unwrap();
    assert!(
        kept.ends_with("\nthe-end\n"),
        "{}",
        &kept[kept.len() - 20..]
    );
    assert_eq!(kept.len(), 16 * 1024);
    assert_eq!(
        long["stdout_cut"].as_u64().unwrap() + kept.len() as u64,
        40_000 + 9
    );
    // Another agent's token: not its session.
    let other =
        support::api::make_token(w, "agent", &["--workspace", w.workspace.to_str().unwrap()]);
    let reply = server
        .client(&other.token)
        .get(&format!("/v1/sessions/{id}/runs"));
    assert!(
        reply.status == 403 || reply.status == 404,
        "{} {}",
        reply.status,
        reply.text()
    );
}
