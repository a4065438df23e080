//! Attacks on `/mcp` of `airlock serve` by a client holding an agent token, driven with raw
//! JSON-RPC over HTTP (the 2025-11-25 revision: an initialize handshake, then requests, each
//! standing alone: the server keeps no MCP session): each shows the hole it was, by what the
//! server must answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use serde_json::{json, Value};

use support::api::{agent_token, assert_ok, assert_refused, make_token, Client, Reply, Server};
use support::*;

const REVISION: &str = "2025-11-25";

/// One client of one token.
struct Mcp {
    client: Client,
    next_id: u64,
}

impl Mcp {
    /// Initialize with `token` (the server keeps nothing of it).
    fn open(server: &Server, token: &str) -> Mcp {
        let client = server.client(token);
        let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
            "protocolVersion": REVISION, "capabilities": {},
            "clientInfo": {"name": "mcp_attacks", "version": "0"}}});
        let reply = post(&client, &init);
        assert_eq!(reply.status, 200, "initialize: {}", reply.text());
        let mcp = Mcp { client, next_id: 1 };
        let initialized = json!({"jsonrpc": "2.0", "method": "notifications/initialized"});
        let reply = mcp.send(&initialized);
        assert!(reply.status < 300, "initialized: {}", reply.text());
        mcp
    }

    fn send(&self, message: &Value) -> Reply {
        post(&self.client, message)
    }

    /// Call `tool`; the JSON-RPC response (its `result` or `error`).
    #[track_caller]
    fn call(&mut self, tool: &str, arguments: Value) -> Value {
        let response = self.try_call(tool, arguments);
        assert!(
            !response["code"].is_string(),
            "tools/call {tool}: {response}"
        );
        response
    }

    /// Call `tool`; the JSON-RPC response, or the HTTP layer's refusal (`code`, `message`).
    fn try_call(&mut self, tool: &str, arguments: Value) -> Value {
        self.next_id += 1;
        let id = self.next_id;
        let call = json!({"jsonrpc": "2.0", "id": id, "method": "tools/call",
            "params": {"name": tool, "arguments": arguments}});
        let reply = self.send(&call);
        if reply.status != 200 {
            return reply.json();
        }
        response_of(&reply, id).unwrap_or_else(|| panic!("no response to {id}: {}", reply.text()))
    }
}

fn post(client: &Client, message: &Value) -> Reply {
    let headers = [
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", REVISION),
    ];
    client.send("POST", "/mcp", &headers, message.to_string().as_bytes())
}

/// The JSON-RPC response with `id` in an answer (JSON, or an SSE stream of messages).
fn response_of(reply: &Reply, id: u64) -> Option<Value> {
    let text = reply.text();
    let messages: Vec<Value> = if text.trim_start().starts_with('{') {
        vec![serde_json::from_str(&text).ok()?]
    } else {
        text.lines()
            .filter_map(|line| line.strip_prefix("data:"))
            .filter_map(|data| serde_json::from_str(data.trim()).ok())
            .collect()
    };
    messages.into_iter().find(|m| m["id"] == id)
}

/// A tool's structured answer, the test failing if the tool refused.
#[track_caller]
fn ok(response: &Value) -> &Value {
    let result = &response["result"];
    assert_ne!(result["isError"], true, "the tool refused: {response}");
    &result["structuredContent"]
}

/// The text of a tool's refusal, the test failing if it did not refuse.
#[track_caller]
fn refusal(response: &Value) -> String {
    let result = &response["result"];
    assert_eq!(
        result["isError"], true,
        "the tool did not refuse: {response}"
    );
    result["content"][0]["text"].as_str().unwrap().to_string()
}

/// Poll `run` until it has ended.
fn poll_to_end(mcp: &mut Mcp, run: &str) -> Value {
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let answer = ok(&mcp.call("poll", json!({"run": run, "wait": 5}))).clone();
        if answer["running"] == false {
            return answer;
        }
        assert!(Instant::now() < deadline, "the run did not end: {answer}");
    }
}

// A started run's output waits in the server's memory until it is polled. The client's places
// for runs were given back when the run ended, polled or not: started runs that are never
// polled each kept up to --max-output of each stream, without end (start, let it end, start
// again: 16 MiB a run at the defaults, as many runs as the token's rate allows).
both_modes!(
    started_runs_never_polled_are_not_kept_without_end,
    |w: &World| {
        let token = agent_token(w).token;
        let server = Server::start(w, &[]);
        let mut mcp = Mcp::open(&server, &token);
        let mut started = Vec::new();
        for _ in 0..8 {
            let answer = mcp.call("start", json!({"command": "echo kept"}));
            started.push(ok(&answer)["run"].as_str().unwrap().to_string());
        }
        // Let every one of them end, unpolled.
        std::thread::sleep(Duration::from_secs(3));
        let ninth = mcp.call("start", json!({"command": "echo one more"}));
        let said = refusal(&ninth);
        assert!(said.contains("too_many_runs"), "{said}");
        // Polling one to its end gives its place back.
        let first = poll_to_end(&mut mcp, &started[0]);
        assert_eq!(first["stdout"], "kept\n", "{first}");
        let again = mcp.call("start", json!({"command": "true"}));
        ok(&again);
    }
);

// Another token's client cancelling a call by its request id (what a shared MCP session would
// have let through): every request stands alone, so the cancellation reaches nothing of the
// other's, and no initialize leaves a session behind for a token to multiply.
both_modes!(another_tokens_cancel_reaches_nothing, |w: &World| {
    let owner = agent_token(w).token;
    let other = agent_token(w).token;
    let server = Server::start(w, &[]);
    let mut mcp = Mcp::open(&server, &owner);
    let init = json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": REVISION, "capabilities": {},
        "clientInfo": {"name": "mcp_attacks", "version": "0"}}});
    let reply = post(&server.client(&owner), &init);
    assert!(
        reply.header("mcp-session-id").is_none(),
        "an MCP session was made"
    );
    let mcp_client = Mcp {
        client: server.client(&owner),
        next_id: 100,
    };
    let running = std::thread::spawn(move || {
        let mut mcp = mcp_client;
        mcp.call("run", json!({"command": "sleep 3; echo done"}))
    });
    std::thread::sleep(Duration::from_secs(1));
    let cancel = json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
        "params": {"requestId": 101, "reason": "another token's"}});
    let reply = post(&server.client(&other), &cancel);
    assert!(reply.status < 500, "{}", reply.text());
    let ran = running.join().unwrap();
    assert_eq!(ok(&ran)["stdout"], "done\n", "{ran}");
    ok(&mcp.call("log", json!({})));
});

// A tool's work on core's threads held none of the token's places for requests in progress:
// the HTTP layer gave its place back once the answer's head (an event stream) was out. A token
// whose run holds its session could send `changes` after `changes`, each taking one of the
// threads every token shares until the run ended (512 of them: the server stops answering).
both_modes!(
    tool_calls_waiting_on_core_count_as_requests_in_progress,
    |w: &World| {
        let token = agent_token(w).token;
        let server = Server::start(w, &[]);
        let mut mcp = Mcp::open(&server, &token);
        // The run holds its session once its command runs (looked for, not guessed at: the
        // answer to `start` comes before).
        let sleep = format!("sleep 8.{}", w.mode as u8 + 1);
        let started = mcp.call("start", json!({ "command": sleep }));
        ok(&started);
        wait_for("the started run's command", Duration::from_secs(30), || {
            process_running(&format!("^{}$", sleep.replace('.', "\\.")))
        });
        let callers: Vec<_> = (0..24)
            .map(|i| {
                let mut mcp = Mcp {
                    client: server.client(&token),
                    next_id: 1000 * (i + 1),
                };
                std::thread::spawn(move || mcp.try_call("changes", json!({})))
            })
            .collect();
        let answers: Vec<Value> = callers.into_iter().map(|c| c.join().unwrap()).collect();
        // Refused by the HTTP layer (429) or by the tool: too many requests in progress.
        let refused = answers
            .iter()
            .filter(|a| a["result"]["isError"] == true || a["code"].is_string())
            .inspect(|a| assert!(a.to_string().contains("too_many_requests"), "{a}"))
            .count();
        assert!(refused >= 24 - 16, "{refused} refused of 24: {answers:?}");
    }
);

// A page number near the top of its type overflowed the page's range (a panic in a debug
// build; in a release build a range that ends before it starts: a panic all the same, on
// core's thread, answered as an internal error).
both_modes!(a_page_past_the_end_is_an_empty_page, |w: &World| {
    let token = agent_token(w).token;
    let server = Server::start(w, &[]);
    let mut mcp = Mcp::open(&server, &token);
    ok(&mcp.call("run", json!({"command": "echo a > a.txt"})));
    for page in [2u64, u64::MAX / 50 + 1, u64::MAX] {
        let answer = mcp.call("changes", json!({"page": page}));
        let changes = ok(&answer);
        assert_eq!(changes["files"], json!([]), "page {page}: {changes}");
        assert_eq!(changes["pages"], 1, "page {page}: {changes}");
    }
});

// A token revoked during a started run: the run ends (as the API's runs end), it does not go
// on to its end under a token that no longer opens the door.
both_modes!(a_revoked_tokens_started_run_ends, |w: &World| {
    let token = agent_token(w);
    let server = Server::start(w, &[]);
    let mut mcp = Mcp::open(&server, &token.token);
    let sleep = if w.mode == Mode::Root {
        "sleep 60"
    } else {
        "sleep 61"
    };
    let started = mcp.call("start", json!({"command": sleep}));
    ok(&started);
    std::thread::sleep(Duration::from_millis(500));
    let out = w
        .airlock()
        .args(["token", "revoke", &token.id])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let deadline = Instant::now() + Duration::from_secs(20);
    while process_running(sleep) {
        assert!(
            Instant::now() < deadline,
            "the run goes on under a revoked token"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    let reply = post(
        &mcp.client,
        &json!({"jsonrpc": "2.0", "id": 5,
        "method": "tools/call", "params": {"name": "log", "arguments": {}}}),
    );
    assert_eq!(reply.status, 401, "{}", reply.text());
});

// A client that hangs up during a `run` (a timeout, a crash): the request stood alone, so its
// call is cancelled and its run interrupted, not left to go on for no one.
both_modes!(a_run_ends_with_its_connection, |w: &World| {
    let token = agent_token(w).token;
    let server = Server::start(w, &[]);
    let mcp = Mcp::open(&server, &token);
    // Each mode's own command, to be told apart from the other's running at the same time.
    let sleep = if w.mode == Mode::Root {
        "sleep 47"
    } else {
        "sleep 48"
    };
    let call = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "run", "arguments": {"command": sleep}}});
    let headers = [
        ("Accept", "application/json, text/event-stream"),
        ("MCP-Protocol-Version", REVISION),
    ];
    let open = mcp
        .client
        .open("POST", "/mcp", &headers, call.to_string().as_bytes())
        .unwrap();
    assert_eq!(open.status, 200);
    let deadline = Instant::now() + Duration::from_secs(20);
    while !process_running(sleep) {
        assert!(Instant::now() < deadline, "the run did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    open.hang_up();
    let deadline = Instant::now() + Duration::from_secs(20);
    while process_running(sleep) {
        assert!(
            Instant::now() < deadline,
            "the run outlives its client's connection"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
});

// One model (issue 27): the same run asked through the CLI, the API and MCP ends the same way
// and is told in the same words, and the same refusal comes back for the same reason.
both_modes!(
    the_cli_the_api_and_mcp_answer_a_run_and_a_refusal_alike,
    |w: &World| {
        // 3 s: time enough for the lookup on a loaded machine before the limit.
        w.named_profile("timed", "[limits]\ntimeout = \"3s\"\n");
        let workspace = w.workspace.to_str().unwrap();
        let token = make_token(
            w,
            "agent",
            &["--profile", "timed", "--workspace", workspace],
        );
        let server = Server::start(w, &[]);
        let api = server.client(&token.token);
        let mut mcp = Mcp::open(&server, &token.token);

        // The time limit ends it: exit status 124, limit `timeout`, the same notes; and the
        // name it looked up, which the profile's network (none) refused, listed alike.
        let command = "getent hosts npm.example.test; sleep 30";
        let cli = w
            .airlock()
            .args(["run", "-p", "timed", "--", "sh", "-c", command])
            .output()
            .unwrap();
        let over_api = assert_ok(&api.post("/v1/runs", &json!({ "command": command })));
        let over_mcp = ok(&mcp.call("run", json!({ "command": command }))).clone();
        assert_eq!(
            over_api["refused"][0]["host"], "npm.example.test",
            "{over_api}"
        );
        assert_eq!(over_api["refused"], over_mcp["refused"], "{over_mcp}");
        assert_eq!(cli.status.code(), Some(124), "{}", stderr(&cli));
        assert_eq!(over_api["exit_code"], 124, "{over_api}");
        assert_eq!(over_mcp["exit_code"], 124, "{over_mcp}");
        assert_eq!(over_api["limit"], "timeout", "{over_api}");
        assert_eq!(over_mcp["limit"], "timeout", "{over_mcp}");
        let cli_notes: Vec<String> = stderr(&cli)
            .lines()
            .filter_map(|l| l.strip_prefix("airlock: "))
            .map(str::to_string)
            .collect();
        assert!(!cli_notes.is_empty(), "{}", stderr(&cli));
        assert_eq!(over_mcp["notes"], json!(cli_notes), "{over_mcp}");

        // The profile disabled: each door refuses with core's code and core's words.
        let disabled = w
            .airlock()
            .args([
                "disable",
                "--profile",
                "timed",
                "--reason",
                "maintenance window",
            ])
            .output()
            .unwrap();
        assert!(disabled.status.success(), "{}", stderr(&disabled));
        let cli = w
            .airlock()
            .args(["run", "-p", "timed", "--", "true"])
            .output()
            .unwrap();
        let over_api = assert_refused(
            &api.post("/v1/runs", &json!({"command": "true"})),
            403,
            "disabled",
        );
        let over_mcp = refusal(&mcp.call("run", json!({"command": "true"})));
        let message = over_api["message"].as_str().unwrap();
        assert!(message.contains("maintenance window"), "{message}");
        assert_ne!(cli.status.code(), Some(0));
        assert!(stderr(&cli).contains(message), "{}", stderr(&cli));
        assert_eq!(over_mcp, format!("airlock refused: {message} (disabled)"));
    }
);
