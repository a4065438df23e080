//! Warm sandboxes of `airlock serve`: throwaway runs take a sandbox prepared before they came
//! (their intent says `prepared_ms_before`), each used once; a profile changed meanwhile gets a
//! sandbox of its own; disabling the profile ends its warm sandboxes at once; a stopping server
//! leaves none. The real server, as root and as an unprivileged user.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::Duration;

use nix::sys::signal::Signal;
use serde_json::{json, Value};

use support::api::{assert_ok, assert_refused, audit_of, make_token, Addr, Server};
use support::{wait_for, Mode, World};

/// The live processes of this world's server's workers, warm or not, and of the sandboxes they
/// forked (which carry the worker's environment): each has `AIRLOCK_SERVE_JOB` under the
/// world's state directory. The test runs as root and reads every process's environment.
fn workers(w: &World) -> Vec<i32> {
    let mark = format!("AIRLOCK_SERVE_JOB={}", w.state.display());
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(environ) = std::fs::read(entry.path().join("environ")) else {
            continue;
        };
        let zombie = std::fs::read_to_string(entry.path().join("stat"))
            .ok()
            .and_then(|stat| {
                stat.rsplit_once(") ")
                    .map(|(_, rest)| rest.starts_with('Z'))
            })
            .unwrap_or(true);
        let ours = environ
            .split(|b| *b == 0)
            .any(|var| var.starts_with(mark.as_bytes()));
        if ours && !zombie {
            found.push(pid);
        }
    }
    found
}

/// The warm workers waiting (each with its sandbox's setup process): none has a job yet. A
/// worker that has given its answer and is reaping its sandbox is not one of them: it has
/// pointed its stdout at /dev/null (see airlock-runner's `worker::Answer`).
fn warm_processes(w: &World) -> usize {
    workers(w)
        .into_iter()
        .filter(|pid| {
            std::fs::read_link(format!("/proc/{pid}/fd/1"))
                .is_ok_and(|out| out != std::path::Path::new("/dev/null"))
        })
        .count()
}

/// The last `run.intent` record.
fn last_intent(w: &World) -> Value {
    audit_of(w, "run.intent").pop().expect("no run.intent")
}

/// An agent token of the profile `warm` over the world's workspace.
fn warm_token(w: &World, toml: &str) -> support::api::Token {
    w.named_profile("warm", toml);
    let workspace = w.workspace.canonicalize().unwrap();
    make_token(
        w,
        "agent",
        &[
            "--profile",
            "warm",
            "--workspace",
            workspace.to_str().unwrap(),
        ],
    )
}

both_modes!(runs_take_sandboxes_prepared_before_them);
fn runs_take_sandboxes_prepared_before_them(w: &World) {
    let agent = warm_token(w, "");
    let server = Server::start(w, &["--warm", "2"]);
    let api = server.client(&agent.token);
    // The first run of its kind finds nothing prepared; once it ends, two are.
    let ran = assert_ok(&api.post("/v1/runs", &json!({ "argv": ["echo", "cold"] })));
    assert_eq!(ran["stdout"], "cold\n");
    assert!(last_intent(w)["prepared_ms_before"].is_null());
    wait_for("two warm sandboxes", Duration::from_secs(20), || {
        warm_processes(w) >= 4
    });
    std::thread::sleep(Duration::from_millis(200));
    let ran = assert_ok(&api.post(
        "/v1/runs",
        &json!({ "command": "id -u; pwd; cat; echo $GREETING", "stdin": "from stdin\n",
                 "env": { "GREETING": "filtered?" } }),
    ));
    let workspace = w.workspace.canonicalize().unwrap();
    assert_eq!(
        ran["stdout"].as_str().unwrap(),
        format!("1000\n{}\nfrom stdin\n\n", workspace.display()),
        "{ran}"
    );
    let intent = last_intent(w);
    assert!(intent["prepared_ms_before"].is_u64(), "not warm: {intent}");
    // Given no input, its stdin is /dev/null, as a cold run's (a tool such as rg reads a pipe
    // instead of the workspace).
    std::thread::sleep(Duration::from_millis(200));
    let ran = assert_ok(&api.post(
        "/v1/runs",
        &json!({ "command": "test -c /proc/self/fd/0 && echo null" }),
    ));
    assert_eq!(ran["stdout"], "null\n", "{ran}");
    assert!(last_intent(w)["prepared_ms_before"].is_u64());
    // Its result follows its intent; nothing of it was written before the request.
    let results = audit_of(w, "run.result");
    assert!(results.last().unwrap()["seq"].as_u64() > intent["seq"].as_u64());
    // A time limit of the request counts from its start, not from the preparation: a sandbox
    // prepared 2.5 s or more before a run with 2.5 s to go is not out of time. (Long enough
    // apart that a loaded machine still tells the two.)
    wait_for("two warm sandboxes again", Duration::from_secs(20), || {
        warm_processes(w) >= 4
    });
    std::thread::sleep(Duration::from_secs(3));
    let ran = assert_ok(&api.post(
        "/v1/runs",
        &json!({ "argv": ["sleep", "0.2"], "timeout": 2.5 }),
    ));
    assert_eq!(ran["exit_code"], 0, "{ran}");
    let prepared_before = last_intent(w)["prepared_ms_before"].as_u64();
    assert!(prepared_before >= Some(2500), "{prepared_before:?}");
    let ran = assert_ok(&api.post(
        "/v1/runs",
        &json!({ "argv": ["sleep", "5"], "timeout": 0.3 }),
    ));
    assert_eq!(ran["limit"], "timeout", "{ran}");
}

both_modes!(refused_requests_prepare_nothing_and_kinds_share_the_bound);
/// A request core refuses (a workspace beyond the token's) makes no kind warm; the pool holds
/// no more than `--warm-max`, and a kind asked for a moment ago keeps its sandbox when another
/// kind comes (two kinds in turn must not end each other's at every run).
fn refused_requests_prepare_nothing_and_kinds_share_the_bound(w: &World) {
    let agent = warm_token(w, "");
    let server = Server::start(w, &["--warm", "1", "--warm-max", "1"]);
    let api = server.client(&agent.token);
    for outside in ["/etc", "/nonexistent/a"] {
        let asked = json!({ "argv": ["true"], "workspace": outside });
        let refused = api.post("/v1/runs", &asked);
        assert!(refused.status >= 400, "{}", refused.text());
    }
    std::thread::sleep(Duration::from_millis(1500));
    assert_eq!(warm_processes(w), 0, "a refused request made a kind warm");
    for dir in ["a", "b"] {
        std::fs::create_dir(w.workspace.join(dir)).unwrap();
        w.give(&w.workspace.join(dir));
    }
    let in_dir = |dir: &str| json!({ "argv": ["true"], "workspace": dir });
    assert_ok(&api.post("/v1/runs", &in_dir("a")));
    wait_for("a's warm sandbox", Duration::from_secs(20), || {
        warm_processes(w) >= 2
    });
    let one = warm_processes(w);
    assert_ok(&api.post("/v1/runs", &in_dir("b")));
    std::thread::sleep(Duration::from_millis(1000));
    assert!(
        warm_processes(w) <= one,
        "past --warm-max: {}",
        warm_processes(w)
    );
    // However a request spells the place.
    assert_ok(&api.post("/v1/runs", &in_dir("./a/")));
    assert!(
        last_intent(w)["prepared_ms_before"].is_u64(),
        "a's sandbox was not kept"
    );
}

both_modes!(a_profile_changed_since_gets_a_sandbox_of_its_own);
fn a_profile_changed_since_gets_a_sandbox_of_its_own(w: &World) {
    let agent = warm_token(w, "[limits]\nprocesses = 300\n");
    let server = Server::start(w, &["--warm", "1"]);
    let api = server.client(&agent.token);
    let limit_is_77 = json!({ "command": "grep -q '^Max processes  *77 ' /proc/self/limits" });
    assert_ok(&api.post("/v1/runs", &json!({ "argv": ["true"] })));
    wait_for("a warm sandbox", Duration::from_secs(20), || {
        warm_processes(w) >= 2
    });
    w.named_profile("warm", "[limits]\nprocesses = 77\n");
    let ran = assert_ok(&api.post("/v1/runs", &limit_is_77));
    assert_eq!(
        ran["exit_code"], 0,
        "the run had the old profile's limit: {ran}"
    );
    assert!(last_intent(w)["prepared_ms_before"].is_null());
}

both_modes!(disabling_the_profile_ends_its_warm_sandboxes_at_once);
fn disabling_the_profile_ends_its_warm_sandboxes_at_once(w: &World) {
    let agent = warm_token(w, "");
    // An operator's switch is its token's profile's.
    let operator = make_token(w, "operator", &["--profile", "warm"]);
    let server = Server::start(w, &["--warm", "2"]);
    let api = server.client(&agent.token);
    let op = server.client(&operator.token);
    assert_ok(&api.post("/v1/runs", &json!({ "argv": ["true"] })));
    wait_for("two warm sandboxes", Duration::from_secs(20), || {
        warm_processes(w) >= 4
    });
    let disable = json!({ "reason": "incident 9" });
    assert_ok(&op.post("/v1/disable", &disable));
    // At once: the workers watch the switch, the server reaps them within its sweep (about a
    // second; 10 s here for a loaded machine, far below the 120 s an unused one is kept).
    wait_for("no warm sandbox", Duration::from_secs(10), || {
        warm_processes(w) == 0
    });
    let refused = assert_refused(
        &api.post("/v1/runs", &json!({ "argv": ["true"] })),
        403,
        "disabled",
    );
    assert!(refused["message"].as_str().unwrap().contains("incident 9"));
    assert_ok(&op.post("/v1/enable", &json!({})));
    let ran = assert_ok(&api.post("/v1/runs", &json!({ "argv": ["echo", "back"] })));
    assert_eq!(ran["stdout"], "back\n");
}

both_modes!(a_stopping_server_leaves_no_warm_sandbox);
fn a_stopping_server_leaves_no_warm_sandbox(w: &World) {
    let agent = warm_token(w, "");
    let mut server = Server::start(w, &["--warm", "2"]);
    let api = server.client(&agent.token);
    assert_ok(&api.post("/v1/runs", &json!({ "argv": ["true"] })));
    wait_for("two warm sandboxes", Duration::from_secs(20), || {
        warm_processes(w) >= 4
    });
    server.signal(Signal::SIGTERM);
    assert!(server.wait(Duration::from_secs(20)).success());
    wait_for("no worker or sandbox", Duration::from_secs(5), || {
        workers(w).is_empty()
    });
    // And with --warm 0, none is ever made.
    let server = Server::start(w, &["--warm", "0"]);
    let api = server.client(&agent.token);
    assert_ok(&api.post("/v1/runs", &json!({ "argv": ["true"] })));
    std::thread::sleep(Duration::from_millis(500));
    assert_eq!(warm_processes(w), 0);
    assert!(last_intent(w)["prepared_ms_before"].is_null());
    drop(server);
}

/// The worker processes of this world's server stopped (state T) by a test pause.
fn stopped_workers(w: &World) -> Vec<i32> {
    workers(w)
        .into_iter()
        .filter(|pid| {
            std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .ok()
                .and_then(|stat| {
                    stat.rsplit_once(") ")
                        .map(|(_, rest)| rest.starts_with('T'))
                })
                .unwrap_or(false)
        })
        .collect()
}

both_modes!(the_answer_does_not_wait_for_what_is_left_of_the_sandbox);
/// A run's answer is given once its result is recorded, with all its output; reaping what is
/// left of its sandbox (pid 1's exit, its cgroups) and the worker's own exit come after. The
/// worker stops itself right after giving its answer (the test build's pause): the client has
/// the whole answer meanwhile, and once the worker goes on nothing of the run is left.
fn the_answer_does_not_wait_for_what_is_left_of_the_sandbox(w: &World) {
    let agent = warm_token(w, "");
    let mut serve = w.airlock_with_test_hooks();
    serve
        .args(["serve", "--warm", "1"])
        .env("AIRLOCK_TEST_PAUSE", "answered");
    let server = Server::start_command(w, serve, Addr::Unix(w.state.join("airlock.sock")));
    let api = server.client(&agent.token);
    let script = "printf 'out%.0s' $(seq 20000); echo; echo err >&2; exit 3";
    for way in ["cold", "warm"] {
        let ran = api.post("/v1/runs", &json!({ "command": script }));
        assert_eq!(ran.status, 200, "{way}: {}", ran.text());
        let ran = ran.json();
        assert_eq!(ran["exit_code"], 3, "{way}: {ran}");
        assert_eq!(
            ran["stdout"].as_str().unwrap().len(),
            3 * 20000 + 1,
            "{way}"
        );
        assert_eq!(ran["stderr"], "err\n", "{way}: {ran}");
        assert_eq!(
            last_intent(w)["prepared_ms_before"].is_u64(),
            way == "warm",
            "{way}"
        );
        // The worker stops itself right after its answer: looked for until it has.
        let mut stopped = Vec::new();
        wait_for(
            "the worker stopped after its answer",
            Duration::from_secs(20),
            || {
                stopped = stopped_workers(w);
                !stopped.is_empty()
            },
        );
        assert_eq!(stopped.len(), 1, "{way}: {stopped:?}");
        let worker = stopped[0];
        // Its cgroups are still there (as root, v1, where they are the run's own): removed once
        // the worker goes on.
        let memory = format!("/sys/fs/cgroup/memory/airlock/run-{worker}");
        let own_cgroups = matches!(w.mode, Mode::Root) && std::path::Path::new(&memory).exists();
        nix::sys::signal::kill(nix::unistd::Pid::from_raw(worker), Signal::SIGCONT).unwrap();
        wait_for("the worker's exit", Duration::from_secs(20), || {
            !workers(w).contains(&worker)
        });
        if own_cgroups {
            for hierarchy in ["memory", "pids", "freezer"] {
                let dir = format!("/sys/fs/cgroup/{hierarchy}/airlock/run-{worker}");
                assert!(!std::path::Path::new(&dir).exists(), "{dir} is left");
            }
        }
        if way == "cold" {
            wait_for("a warm sandbox", Duration::from_secs(20), || {
                warm_processes(w) >= 2
            });
        }
    }
}
