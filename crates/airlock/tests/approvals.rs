//! Approvals that wait for a person: a sandboxed command connects to a host its profile's
//! `[network] ask` names; the gate holds the connect while another process answers (`airlock
//! approve`, `airlock deny`, the API with an operator token), or nobody does and it is refused.
//! A real server on the host's loopback, reached as `api.asked.test` through `--resolve`, as
//! the egress tests do; the same connection without airlock reaches it. Root and unprivileged
//! user both.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use support::api::{agent_token, assert_ok, assert_refused, audit_log, operator_token, Server};
use support::servers::python_server;
use support::sessions::new_session;
use support::{stderr, stdout, Mode, World};

const HOST: &str = "api.asked.test";

/// An HTTP server on the host's loopback that answers every request with `hello from host`.
fn server() -> support::servers::Server {
    python_server(
        r#"
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello from host"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#,
        &[],
    )
}

/// A program in the workspace that connects to `HOST:port` (a plain connect, not through the
/// proxy), asks for `/` and prints `REACHED …` or `blocked …`.
fn probe(w: &World, port: u16) {
    let script = format!(
        r#"
import socket
try:
    s = socket.create_connection(("{HOST}", {port}), timeout=120)
    s.sendall(b"GET / HTTP/1.1\r\nHost: {HOST}\r\nConnection: close\r\n\r\n")
    got = b""
    while True:
        data = s.recv(4096)
        if not data: break
        got += data
    print("REACHED", got.split(b"\r\n\r\n")[-1].decode())
except Exception as e:
    print("blocked", type(e).__name__, e)
"#
    );
    w.write(&w.workspace.join("probe.py"), &script);
}

/// The default profile (what tokens are bound to), asking about `*.asked.test`.
fn asking_profile(w: &World, timeout: &str) {
    w.named_profile(
        "default",
        &format!("[network]\nask = [\"*.asked.test\"]\nask_timeout = \"{timeout}\"\n"),
    );
}

/// `airlock run [extra] -- python3 probe.py`, started: it waits for an answer.
fn start_probe(w: &World, extra: &[&str]) -> Child {
    w.airlock()
        .args(["run", "--resolve", &format!("{HOST}=127.0.0.1")])
        .args(extra)
        .args(["--", "/usr/bin/python3", "probe.py"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap()
}

/// `airlock approvals --json`: the approvals waiting.
fn waiting(w: &World) -> Vec<Value> {
    let out = w.airlock().args(["approvals", "--json"]).output().unwrap();
    assert!(out.status.success(), "approvals: {}", stderr(&out));
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    listed["approvals"].as_array().unwrap().clone()
}

/// The one approval that waits, once it does.
#[track_caller]
fn the_waiting_one(w: &World) -> Value {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let listed = waiting(w);
        if let Some(first) = listed.first() {
            assert_eq!(listed.len(), 1, "{listed:?}");
            return first.clone();
        }
        assert!(Instant::now() < deadline, "no approval was asked for");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The audit log's actions of approvals and connections, in order.
fn approval_actions(w: &World) -> Vec<String> {
    audit_log(w)
        .iter()
        .filter_map(|r| r["action"].as_str())
        .filter(|a| a.starts_with("approval.") || *a == "net.connect")
        .map(str::to_string)
        .collect()
}

fn finished(child: Child) -> Output {
    let out = child.wait_with_output().unwrap();
    assert_ne!(
        out.status.code(),
        Some(125),
        "airlock failed: {}",
        stderr(&out)
    );
    out
}

/// `uid N` of the identity under test, as an answer names it.
fn me(w: &World) -> String {
    match (w.mode, support::is_root()) {
        (Mode::User, true) => format!("uid {}", support::TEST_UID),
        _ => format!("uid {}", nix::unistd::getuid()),
    }
}

both_modes!(an_approval_from_another_process_lets_the_held_connection_through);
fn an_approval_from_another_process_lets_the_held_connection_through(w: &World) {
    let http = server();
    probe(w, http.port);
    let outside = w.outside("/usr/bin/python3 probe.py 2>&1 || true");
    assert!(
        stdout(&outside).contains("blocked"),
        "without --resolve the name means nothing outside: {}",
        stdout(&outside)
    );
    asking_profile(w, "60s");
    let run = start_probe(w, &[]);
    let approval = the_waiting_one(w);
    assert_eq!(approval["host"], HOST);
    assert_eq!(approval["port"], http.port);
    assert_eq!(approval["status"], "pending");
    assert_eq!(approval["entry"], "*.asked.test");
    assert_eq!(approval["program"], "python3");
    assert_eq!(
        approval["profile_line"],
        format!("allow = [\"{HOST}:{}\"]", http.port)
    );
    assert!(approval["seconds_left"].as_u64().unwrap() <= 60);
    // Asked, in the log, before anyone answered; nothing connected yet.
    assert_eq!(approval_actions(w), ["approval.asked"]);
    let id = approval["id"].as_str().unwrap();
    let answered = w
        .airlock()
        .args(["approve", id, "--reason", "the test says so"])
        .output()
        .unwrap();
    assert!(answered.status.success(), "{}", stderr(&answered));
    assert!(
        stderr(&answered).contains(&format!("allow = [\"{HOST}:{}\"]", http.port)),
        "the profile line is offered: {}",
        stderr(&answered)
    );
    let out = finished(run);
    assert!(
        stdout(&out).contains("REACHED hello from host"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    assert_eq!(
        approval_actions(w),
        ["approval.asked", "approval.decided", "net.connect"]
    );
    let decided = audit_log(w)
        .into_iter()
        .find(|r| r["action"] == "approval.decided")
        .unwrap();
    assert_eq!(decided["decided_by"], me(w).as_str(), "{decided}");
    assert_eq!(decided["decision"], "allow_once");
    assert_eq!(decided["reason"], "the test says so");
    // Answered: it can be answered no more (exit 2), and nothing waits.
    let again = w.airlock().args(["deny", id]).output().unwrap();
    assert_eq!(again.status.code(), Some(2), "{}", stderr(&again));
    assert!(waiting(w).is_empty());
}

both_modes!(nobody_answering_in_time_refuses_and_the_run_says_why);
fn nobody_answering_in_time_refuses_and_the_run_says_why(w: &World) {
    let http = server();
    probe(w, http.port);
    asking_profile(w, "2s");
    // The runs are not watched for their question: on a loaded machine it can expire before a
    // look lists it. The audit log has its id.
    let out = finished(start_probe(w, &["--json"]));
    assert!(stdout(&out).contains("blocked"), "{}", stdout(&out));
    let asked = audit_log(w)
        .into_iter()
        .find(|r| r["action"] == "approval.asked")
        .expect("the question is in the audit log");
    let why = "nobody answered within 2 s (ask_timeout)";
    let answer: Value = serde_json::from_str(stdout(&out).lines().last().unwrap()).unwrap();
    // Both of the name's addresses were tried (IPv4, then IPv6): one question, two refusals.
    let refused = &answer["refused"][0];
    assert_eq!(answer["refused"].as_array().unwrap().len(), 1, "{answer}");
    assert_eq!(refused["host"], HOST, "{answer}");
    assert_eq!(refused["port"], http.port);
    assert_eq!(refused["why"], why, "{answer}");
    let out = finished(start_probe(w, &[]));
    assert!(
        stderr(&out).contains(why),
        "the run's last lines: {}",
        stderr(&out)
    );
    assert_eq!(
        &approval_actions(w)[..3],
        ["approval.asked", "approval.expired", "net.connect"]
    );
    let late = w
        .airlock()
        .args(["approve", asked["id"].as_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(late.status.code(), Some(2), "{}", stderr(&late));
    assert!(stderr(&late).contains("expired"), "{}", stderr(&late));
}

both_modes!(a_denial_is_refused_naming_who_and_why);
fn a_denial_is_refused_naming_who_and_why(w: &World) {
    let http = server();
    probe(w, http.port);
    asking_profile(w, "60s");
    let run = start_probe(w, &[]);
    let approval = the_waiting_one(w);
    let id = approval["id"].as_str().unwrap();
    let denied = w
        .airlock()
        .args(["deny", id, "--reason", "not during the freeze", "--json"])
        .output()
        .unwrap();
    assert!(denied.status.success(), "{}", stderr(&denied));
    let answered: Value = serde_json::from_slice(&denied.stdout).unwrap();
    assert_eq!(answered["status"], "denied");
    assert_eq!(answered["answer"]["by"], me(w).as_str());
    let out = finished(run);
    assert!(stdout(&out).contains("blocked"), "{}", stdout(&out));
    let said = format!("denied by {}: not during the freeze", me(w));
    assert!(stderr(&out).contains(&said), "{}", stderr(&out));
}

both_modes!(allowed_for_the_session_its_next_run_connects_without_asking);
fn allowed_for_the_session_its_next_run_connects_without_asking(w: &World) {
    let http = server();
    probe(w, http.port);
    asking_profile(w, "60s");
    let session = new_session(w, &[]);
    let run = start_probe(w, &["--session", &session]);
    let approval = the_waiting_one(w);
    assert_eq!(approval["session"], session.as_str());
    let id = approval["id"].as_str().unwrap();
    let answered = w
        .airlock()
        .args(["approve", id, "--session"])
        .output()
        .unwrap();
    assert!(answered.status.success(), "{}", stderr(&answered));
    assert!(stdout(&finished(run)).contains("REACHED"));
    // The next run of the session: no question, connected.
    let next = finished(start_probe(w, &["--session", &session]));
    assert!(stdout(&next).contains("REACHED"), "{}", stderr(&next));
    let asked = approval_actions(w)
        .iter()
        .filter(|a| *a == "approval.asked")
        .count();
    assert_eq!(asked, 1, "asked once: {:?}", approval_actions(w));
    // The run's intent records what the session allows since.
    let intents: Vec<Value> = audit_log(w)
        .into_iter()
        .filter(|r| r["action"] == "run.intent")
        .collect();
    let allowed = format!("{HOST}:{}", http.port);
    assert_eq!(intents[0]["network"]["allow"], json!([]), "{}", intents[0]);
    assert_eq!(
        intents[0]["ask"],
        json!({ "entries": ["*.asked.test"], "timeout_seconds": 60, "webhook": false })
    );
    assert_eq!(
        intents[1]["network"]["allow"],
        json!([allowed]),
        "{}",
        intents[1]
    );
    // A run outside the session is asked again.
    let outside = start_probe(w, &[]);
    let other = the_waiting_one(w);
    assert_ne!(other["id"], approval["id"]);
    w.airlock()
        .args(["deny", other["id"].as_str().unwrap()])
        .output()
        .unwrap();
    assert!(stdout(&finished(outside)).contains("blocked"));
}

both_modes!(only_an_operator_token_lists_and_answers_through_the_api);
fn only_an_operator_token_lists_and_answers_through_the_api(w: &World) {
    let http = server();
    probe(w, http.port);
    asking_profile(w, "60s");
    let agent = agent_token(w);
    let operator = operator_token(w);
    let server = Server::start(w, &[]);
    let (api, op) = (server.client(&agent.token), server.client(&operator.token));
    let run = start_probe(w, &[]);
    let approval = the_waiting_one(w);
    let path = format!("/v1/approvals/{}", approval["id"].as_str().unwrap());
    let decide = json!({ "decision": "allow_once", "reason": "the agent wants to" });
    assert_refused(&api.get("/v1/approvals"), 403, "role_forbidden");
    assert_refused(&api.get(&path), 403, "role_forbidden");
    assert_refused(&api.post(&path, &decide), 403, "role_forbidden");
    // Nothing decided; the agent's attempt on record, with its token.
    assert_eq!(
        approval_actions(w),
        ["approval.asked", "approval.refused"],
        "nothing decided"
    );
    let attempt = audit_log(w)
        .into_iter()
        .find(|r| r["action"] == "approval.refused")
        .unwrap();
    assert_eq!(attempt["by"]["token"], agent.id.as_str(), "{attempt}");
    assert_eq!(attempt["denied"], true, "{attempt}");
    // The CLI through the server says the same, by the same codes.
    let url = match &server.addr {
        support::api::Addr::Unix(path) => format!("unix:{}", path.display()),
        support::api::Addr::Tcp(addr) => format!("http://{addr}"),
    };
    let cli = |token: &str, args: &[&str]| {
        w.command(support::airlock_bin())
            .env("AIRLOCK_URL", &url)
            .env("AIRLOCK_TOKEN", token)
            .args(args)
            .output()
            .unwrap()
    };
    let refused = cli(&agent.token, &["approvals"]);
    assert_eq!(refused.status.code(), Some(125));
    assert!(
        stderr(&refused).contains("role_forbidden"),
        "{}",
        stderr(&refused)
    );
    let listed = cli(&operator.token, &["approvals", "--json"]);
    assert!(listed.status.success(), "{}", stderr(&listed));
    assert!(stdout(&listed).contains(approval["id"].as_str().unwrap()));
    let listed = assert_ok(&op.get("/v1/approvals"));
    assert_eq!(listed["approvals"][0]["id"], approval["id"], "{listed}");
    assert_refused(
        &op.post(&path, &json!({ "decision": "maybe" })),
        400,
        "bad_request_body",
    );
    assert_refused(
        &op.get("/v1/approvals/ap_0000000000000000"),
        404,
        "approval_not_found",
    );
    let denied = assert_ok(&op.post(
        &path,
        &json!({ "decision": "deny", "reason": "asked by the test" }),
    ));
    assert_eq!(denied["status"], "denied");
    let by = format!("token {}", operator.id);
    assert_eq!(denied["answer"]["by"], by.as_str(), "{denied}");
    assert_refused(&op.post(&path, &decide), 409, "approval_closed");
    let late = cli(
        &operator.token,
        &["approve", approval["id"].as_str().unwrap()],
    );
    assert_eq!(late.status.code(), Some(2), "{}", stderr(&late));
    let out = finished(run);
    assert!(stdout(&out).contains("blocked"), "{}", stdout(&out));
    assert!(
        stderr(&out).contains(&format!("denied by {by}: asked by the test")),
        "{}",
        stderr(&out)
    );
    let decided = audit_log(w)
        .into_iter()
        .find(|r| r["action"] == "approval.decided")
        .unwrap();
    assert_eq!(decided["by"]["token"], operator.id.as_str(), "{decided}");
}

both_modes!(the_webhook_is_offered_the_question_and_an_operator_answers_it);
/// The profile names a webhook (here a server of the test's on loopback, where n8n or a chat
/// bridge would be): it gets the approval as JSON, with how to answer; the answer that counts
/// is an operator's, here `airlock approve` with the id the webhook got.
fn the_webhook_is_offered_the_question_and_an_operator_answers_it(w: &World) {
    let http = server();
    probe(w, http.port);
    let got = w.base.join("webhook.json");
    let hook = python_server(
        r#"
import http.server, sys
class H(http.server.BaseHTTPRequestHandler):
    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"]))
        open(sys.argv[1] + ".tmp", "wb").write(body)
        import os; os.rename(sys.argv[1] + ".tmp", sys.argv[1])
        self.send_response(204); self.end_headers()
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#,
        &[got.as_os_str()],
    );
    w.named_profile(
        "default",
        &format!(
            "[network]\nask = [\"*.asked.test\"]\nask_webhook = \"http://127.0.0.1:{}/webhook/airlock\"\n",
            hook.port
        ),
    );
    let run = start_probe(w, &[]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !got.exists() {
        assert!(Instant::now() < deadline, "the webhook got nothing");
        std::thread::sleep(Duration::from_millis(50));
    }
    let offer: Value = serde_json::from_slice(&std::fs::read(&got).unwrap()).unwrap();
    assert_eq!(offer["kind"], "airlock.approval");
    assert_eq!(offer["host"], HOST);
    assert_eq!(offer["port"], http.port);
    let id = offer["id"].as_str().unwrap();
    assert_eq!(offer["answer"]["path"], format!("/v1/approvals/{id}"));
    let answered = w.airlock().args(["approve", id]).output().unwrap();
    assert!(answered.status.success(), "{}", stderr(&answered));
    assert!(stdout(&finished(run)).contains("REACHED"));
    let offered = audit_log(w)
        .into_iter()
        .find(|r| r["action"] == "approval.webhook")
        .expect("the offer is audited");
    assert_eq!(offered["status"], 204, "{offered}");
}

both_modes!(a_request_through_airlocks_proxy_is_asked_about_as_a_connection_is);
/// Programs that honour HTTP_PROXY (set in every sandbox) ask airlock's proxy, not connect:
/// the proxy holds the request for a person the same way.
fn a_request_through_airlocks_proxy_is_asked_about_as_a_connection_is(w: &World) {
    let http = server();
    let script = format!(
        "import urllib.request\nprint(\"REACHED\", urllib.request.urlopen(\"http://{HOST}:{}/\", timeout=120).read().decode())\n",
        http.port
    );
    w.write(&w.workspace.join("probe.py"), &script);
    asking_profile(w, "60s");
    let run = start_probe(w, &[]);
    let approval = the_waiting_one(w);
    assert_eq!(
        (approval["host"].as_str(), approval["port"].as_u64()),
        (Some(HOST), Some(u64::from(http.port)))
    );
    let id = approval["id"].as_str().unwrap();
    let answered = w.airlock().args(["approve", id]).output().unwrap();
    assert!(answered.status.success(), "{}", stderr(&answered));
    let out = finished(run);
    assert!(
        stdout(&out).contains("REACHED hello from host"),
        "{}{}",
        stdout(&out),
        stderr(&out)
    );
    let connect = audit_log(w)
        .into_iter()
        .find(|r| r["action"] == "net.connect")
        .unwrap();
    assert_eq!(connect["protocol"], "http-proxy", "{connect}");
    assert_eq!(connect["allowed"], true, "{connect}");
}

both_modes!(the_kill_switch_ends_what_waits_refused);
/// A run killed while its connection waits: the approval ends, refused and recorded, and can
/// be answered no more.
fn the_kill_switch_ends_what_waits_refused(w: &World) {
    let http = server();
    probe(w, http.port);
    asking_profile(w, "60s");
    let run = start_probe(w, &[]);
    let approval = the_waiting_one(w);
    let killed = w
        .airlock()
        .args(["kill", "--all", "--reason", "stop it"])
        .output()
        .unwrap();
    assert!(killed.status.success(), "{}", stderr(&killed));
    let _ = run.wait_with_output().unwrap();
    assert!(waiting(w).is_empty());
    let late = w
        .airlock()
        .args(["approve", approval["id"].as_str().unwrap()])
        .output()
        .unwrap();
    assert_eq!(late.status.code(), Some(2), "{}", stderr(&late));
    let actions = approval_actions(w);
    assert_eq!(actions[0], "approval.asked");
    assert!(actions.iter().any(|a| a == "approval.ended"), "{actions:?}");
}

both_modes!(a_run_of_the_api_asks_and_an_operator_token_answers);
/// Under `airlock serve` a run is supervised by a worker process of the server's: it asks the
/// same way, and an operator token's denial comes back in the run's answer. (A bare public
/// address, never reached: denied before anything leaves.)
fn a_run_of_the_api_asks_and_an_operator_token_answers(w: &World) {
    w.named_profile(
        "default",
        "[network]\nask = [\"1.1.1.1:443\"]\nask_timeout = \"60s\"\n",
    );
    let agent = agent_token(w);
    let operator = operator_token(w);
    let server = Server::start(w, &[]);
    let (api, op) = (server.client(&agent.token), server.client(&operator.token));
    let script = "import socket\ntry:\n    socket.create_connection((\"1.1.1.1\", 443), timeout=120)\n    print(\"REACHED\")\nexcept Exception as e:\n    print(\"blocked\", e)\n";
    let mut run = api.stream(
        "/v1/runs/stream",
        &json!({ "argv": ["/usr/bin/python3", "-c", script] }),
    );
    let deadline = Instant::now() + Duration::from_secs(30);
    let approval = loop {
        let listed = assert_ok(&op.get("/v1/approvals"));
        if let Some(first) = listed["approvals"].as_array().unwrap().first() {
            break first.clone();
        }
        assert!(Instant::now() < deadline, "no approval was asked for");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(approval["host"], "1.1.1.1");
    assert_eq!(approval["entry"], "1.1.1.1:443");
    let path = format!("/v1/approvals/{}", approval["id"].as_str().unwrap());
    assert_refused(
        &api.post(&path, &json!({ "decision": "allow_once" })),
        403,
        "role_forbidden",
    );
    assert_ok(&op.post(&path, &json!({ "decision": "deny", "reason": "no" })));
    let first = run.next_line().unwrap();
    assert_eq!(first["type"], "stdout", "{first}");
    assert!(
        first["data"].as_str().unwrap().starts_with("blocked"),
        "{first}"
    );
    let result = run.rest().pop().unwrap();
    assert_eq!(result["type"], "result", "{result}");
    let why = result["refused"][0]["why"].as_str().unwrap();
    let by = format!("denied by token {}: no", operator.id);
    assert!(why.starts_with(&by), "{result}");
}

both_modes!(a_paused_run_stops_waiting_and_is_refused_when_resumed);
fn a_paused_run_stops_waiting_and_is_refused_when_resumed(w: &World) {
    let http = server();
    probe(w, http.port);
    asking_profile(w, "60s");
    let run = start_probe(w, &[]);
    let approval = the_waiting_one(w);
    let paused = w.airlock().args(["pause", "--all"]).output().unwrap();
    assert!(paused.status.success(), "{}", stderr(&paused));
    // A yes for a paused run is not taken (it may not connect now), whether the run closed the
    // question already or not.
    let id = approval["id"].as_str().unwrap();
    let yes = w.airlock().args(["approve", id]).output().unwrap();
    assert!(
        !yes.status.success(),
        "a paused run's approval was answered yes"
    );
    let deadline = Instant::now() + Duration::from_secs(10);
    while !waiting(w).is_empty() {
        assert!(Instant::now() < deadline, "still waiting while paused");
        std::thread::sleep(Duration::from_millis(50));
    }
    let resumed = w.airlock().args(["resume", "--all"]).output().unwrap();
    assert!(resumed.status.success(), "{}", stderr(&resumed));
    let out = finished(run);
    assert!(stdout(&out).contains("blocked"), "{}", stdout(&out));
    assert!(
        stderr(&out).contains("the run was paused"),
        "{}",
        stderr(&out)
    );
}
