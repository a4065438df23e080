//! Attacks on `airlock serve` by a client that holds a token (an agent's, as an LLM-driven
//! automation would) or none: each shows the hole it was, by what the server must answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::api::{agent_token, operator_token, Addr, Server};
use support::servers::KilledOnDrop;
use support::*;

/// A server on a unix socket: the support module's, or one of a binary of the test's choosing.
struct Served {
    /// Held for its drop, which ends the server.
    _support: Option<Server>,
    _own: Option<KilledOnDrop>,
    socket: PathBuf,
}

fn serve(w: &World, args: &[&str]) -> Served {
    let server = Server::start(w, args);
    let Addr::Unix(socket) = server.addr.clone() else {
        unreachable!("Server::start listens on the unix socket")
    };
    Served {
        _support: Some(server),
        _own: None,
        socket,
    }
}

/// `airlock serve` started with `airlock` (a build of the test's choosing).
fn serve_with(w: &World, mut airlock: Command) -> Served {
    let socket = w.state.join("airlock.sock");
    let server = airlock.arg("serve").stderr(Stdio::null()).spawn().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while UnixStream::connect(&socket).is_err() {
        assert!(Instant::now() < deadline, "the server did not listen");
        std::thread::sleep(Duration::from_millis(20));
    }
    Served {
        _support: None,
        _own: Some(KilledOnDrop(server)),
        socket,
    }
}

fn agent(w: &World) -> String {
    agent_token(w).token
}

fn revoke(w: &World, token: &str) {
    let id = token.split('_').nth(1).unwrap();
    let out = w.airlock().args(["token", "revoke", id]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

/// The head of a request, with `Connection: close`, and its body.
fn request_text(method: &str, path: &str, token: &str, body: &str) -> String {
    format!(
        "{method} {path} HTTP/1.1\r\nHost: airlock\r\nAuthorization: Bearer {token}\r\nConnection: close\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        body.len()
    )
}

/// Send a request on a connection of its own; its status and body.
fn ask(served: &Served, method: &str, path: &str, token: &str, body: &str) -> (u16, String) {
    let mut stream = UnixStream::connect(&served.socket).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(60)))
        .unwrap();
    stream
        .write_all(request_text(method, path, token, body).as_bytes())
        .unwrap();
    let mut answer = Vec::new();
    stream
        .read_to_end(&mut answer)
        .expect("the server did not answer in time");
    parse_answer(&answer)
}

/// Status and body (de-chunked) of a whole HTTP/1.1 answer.
fn parse_answer(answer: &[u8]) -> (u16, String) {
    let text = String::from_utf8_lossy(answer).into_owned();
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    let chunked = head
        .to_ascii_lowercase()
        .contains("transfer-encoding: chunked");
    (status, if chunked { dechunk(body) } else { body.into() })
}

fn dechunk(mut rest: &str) -> String {
    let mut body = String::new();
    while let Some((size, after)) = rest.split_once("\r\n") {
        let size = usize::from_str_radix(size.trim(), 16).unwrap_or(0);
        if size == 0 || after.len() < size {
            break;
        }
        body.push_str(&after[..size]);
        rest = after[size..].trim_start_matches("\r\n");
    }
    body
}

/// Read `stream` until what came holds `needle` (the test fails after 20 s without it).
fn read_until(stream: &mut UnixStream, needle: &str) {
    stream
        .set_read_timeout(Some(Duration::from_secs(20)))
        .unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    while !String::from_utf8_lossy(&seen).contains(needle) {
        let n = stream
            .read(&mut buf)
            .expect("the answer did not come in time");
        assert!(
            n > 0,
            "the answer ended without {needle:?}: {}",
            String::from_utf8_lossy(&seen)
        );
        seen.extend_from_slice(&buf[..n]);
    }
}

/// Wait (up to `limit`) for the server to close `stream`; what it sent meanwhile, or None if it
/// kept the connection open.
fn closed_within(stream: &mut UnixStream, limit: Duration) -> Option<Vec<u8>> {
    stream.set_read_timeout(Some(limit)).unwrap();
    let mut seen = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        match stream.read(&mut buf) {
            Ok(0) => return Some(seen),
            Ok(n) => seen.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => return Some(seen),
            Err(_) => return None,
        }
    }
}

both_modes!(a_connection_that_sends_nothing_is_closed, |w: &World| {
    // Before: hyper's choice between HTTP/1 and 2 waited for the first bytes for ever, and
    // 1024 such connections (no token needed) left the server serving no one.
    let served = serve(w, &[]);
    let mut idle = UnixStream::connect(&served.socket).unwrap();
    let started = Instant::now();
    let closed = closed_within(&mut idle, Duration::from_secs(45));
    assert!(
        closed.is_some(),
        "a connection that sent nothing was still open after {:?}",
        started.elapsed()
    );
});

both_modes!(a_body_that_never_comes_is_answered_408, |w: &World| {
    // Before: the body was awaited for ever, holding the connection.
    let served = serve(w, &[]);
    let token = agent(w);
    let mut slow = UnixStream::connect(&served.socket).unwrap();
    let head = format!(
        "POST /v1/runs HTTP/1.1\r\nHost: airlock\r\nAuthorization: Bearer {token}\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{{"
    );
    slow.write_all(head.as_bytes()).unwrap();
    let answer = closed_within(&mut slow, Duration::from_secs(45))
        .expect("a body that never came held the connection");
    let (status, body) = parse_answer(&answer);
    assert_eq!(status, 408, "{body}");
    assert!(body.contains("body_timeout"), "{body}");
});

both_modes!(
    a_token_waiting_on_its_own_busy_session_leaves_threads_for_the_others,
    |w: &World| {
        // Before: every diff of a session a run holds waited on a thread of the server's blocking
        // pool (512), and went on waiting after its client left: one agent took them all, and
        // every other token's requests hung until its run ended.
        let served = serve(w, &["--requests-per-second", "100000"]);
        let attacker = agent(w);
        let other = agent(w);
        let (status, made) = ask(&served, "POST", "/v1/sessions", &attacker, "{}");
        assert_eq!(status, 201, "{made}");
        let id = made.split("\"id\":\"").nth(1).unwrap()[..12].to_string();
        let mut running = UnixStream::connect(&served.socket).unwrap();
        let run = request_text(
            "POST",
            &format!("/v1/sessions/{id}/runs/stream"),
            &attacker,
            r#"{"command": "echo started; sleep 30"}"#,
        );
        running.write_all(run.as_bytes()).unwrap();
        read_until(&mut running, "started");
        std::thread::sleep(Duration::from_millis(500));
        let diff = request_text("GET", &format!("/v1/sessions/{id}/diff"), &attacker, "");
        let waiting: Vec<UnixStream> = (0..530)
            .map(|_| {
                let mut c = UnixStream::connect(&served.socket).unwrap();
                c.write_all(diff.as_bytes()).unwrap();
                c
            })
            .collect();
        std::thread::sleep(Duration::from_secs(1));
        let started = Instant::now();
        let mut listing = UnixStream::connect(&served.socket).unwrap();
        let list = request_text("GET", "/v1/sessions", &other, "");
        listing.write_all(list.as_bytes()).unwrap();
        let answer = closed_within(&mut listing, Duration::from_secs(10))
            .expect("another token's request hung while one token's diffs waited");
        assert_eq!(
            parse_answer(&answer).0,
            200,
            "after {:?}",
            started.elapsed()
        );
        let mut refused = 0;
        for mut c in waiting.into_iter().take(50) {
            c.set_read_timeout(Some(Duration::from_millis(200)))
                .unwrap();
            let mut buf = [0u8; 512];
            if let Ok(n) = c.read(&mut buf) {
                refused += usize::from(String::from_utf8_lossy(&buf[..n]).contains(" 429 "));
            }
        }
        assert!(refused > 0, "no request of the busy token was refused 429");
    }
);

both_modes!(status_shows_an_agent_only_its_own_runs, |w: &World| {
    // Before: /v1/status listed every run of the profile: another token's command lines (what
    // they hold) and sessions.
    let served = serve(w, &[]);
    let reader = agent(w);
    let other = agent(w);
    let mut running = UnixStream::connect(&served.socket).unwrap();
    let run = request_text(
        "POST",
        "/v1/runs/stream",
        &other,
        r#"{"command": "echo started; sleep 5 # marker-of-the-other-token"}"#,
    );
    running.write_all(run.as_bytes()).unwrap();
    read_until(&mut running, "started");
    std::thread::sleep(Duration::from_millis(500));
    let (status, theirs) = ask(&served, "GET", "/v1/status", &other, "");
    assert_eq!(status, 200, "{theirs}");
    assert!(theirs.contains("marker-of-the-other-token"), "{theirs}");
    let (status, mine) = ask(&served, "GET", "/v1/status", &reader, "");
    assert_eq!(status, 200, "{mine}");
    assert!(
        !mine.contains("marker-of-the-other-token"),
        "an agent saw another token's run: {mine}"
    );
});

both_modes!(
    a_name_finds_only_a_session_of_the_tokens_own,
    |w: &World| {
        // Before: a name was looked up among every session, and the refusal named the other
        // token's session by its id, in the answer and in the asker's own audit records.
        let served = serve(w, &[]);
        let asker = agent(w);
        let owner = agent(w);
        let (status, made) = ask(
            &served,
            "POST",
            "/v1/sessions",
            &owner,
            r#"{"name": "theirs"}"#,
        );
        assert_eq!(status, 201, "{made}");
        let id = made.split("\"id\":\"").nth(1).unwrap()[..12].to_string();
        for (method, path, body) in [
            ("GET", "/v1/sessions/theirs", ""),
            ("GET", "/v1/sessions/theirs/diff", ""),
            ("POST", "/v1/sessions/theirs/runs", r#"{"command": "true"}"#),
        ] {
            let (status, answer) = ask(&served, method, path, &asker, body);
            assert_eq!(status, 404, "{method} {path}: {answer}");
            assert!(
                !answer.contains(&id),
                "{method} {path} told the id: {answer}"
            );
        }
        let (_, records) = ask(&served, "GET", "/v1/audit", &asker, "");
        assert!(
            !records.contains(&id),
            "the asker's audit records name the other token's session: {records}"
        );
        let (status, answer) = ask(&served, "GET", "/v1/sessions/theirs", &owner, "");
        assert_eq!(status, 200, "{answer}");
    }
);

both_modes!(
    a_workspace_beyond_the_binding_tells_nothing_of_the_host,
    |w: &World| {
        // Before: a path beyond the token's workspace was looked up first: 403 with its
        // canonical path if it existed (symlinks resolved), 400 if not — a probe of the host.
        let served = serve(w, &[]);
        let token = agent(w);
        std::os::unix::fs::symlink(&w.outside, w.base.join("link-outside")).unwrap();
        let answers: Vec<(u16, String)> = [
            w.outside.clone(),
            w.base.join("no-such-dir"),
            w.base.join("link-outside"),
        ]
        .iter()
        .map(|dir| {
            let body = format!(r#"{{"command": "true", "workspace": "{}"}}"#, dir.display());
            ask(&served, "POST", "/v1/runs", &token, &body)
        })
        .collect();
        for (status, answer) in &answers {
            assert_eq!(*status, 403, "{answer}");
            assert!(answer.contains("outside_token_binding"), "{answer}");
        }
        let (_, through_link) = &answers[2];
        let outside = w.outside.to_str().unwrap();
        assert!(
            !through_link.contains(&format!("workspace {outside}")),
            "the answer told where the symlink leads: {through_link}"
        );
    }
);

both_modes!(a_revoked_tokens_audit_follow_ends, |w: &World| {
    // Before: a follower started before the revocation went on streaming every new record
    // (an operator token's: every token's) for as long as it kept the connection.
    let served = serve(w, &[]);
    let follower = operator_token(w).token;
    let agent = agent(w);
    let mut follow = UnixStream::connect(&served.socket).unwrap();
    let since = "1970-01-01T00:00:00Z";
    let asked = request_text(
        "GET",
        &format!("/v1/audit?follow=true&since={since}"),
        &follower,
        "",
    );
    follow.write_all(asked.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_secs(1));
    revoke(w, &follower);
    std::thread::sleep(Duration::from_secs(1));
    let body = r#"{"command": "echo after-the-revocation"}"#;
    let (status, answer) = ask(&served, "POST", "/v1/runs", &agent, body);
    assert_eq!(status, 200, "{answer}");
    let seen = closed_within(&mut follow, Duration::from_secs(5))
        .expect("the revoked token's follower was still open");
    let seen = String::from_utf8_lossy(&seen);
    assert!(
        !seen.contains("after-the-revocation"),
        "a revoked token read a record written after its revocation"
    );
});

both_modes!(a_revoked_tokens_run_is_interrupted, |w: &World| {
    // Before: a run went on to its end (the default profile has no time limit) after its token
    // was revoked.
    let served = serve(w, &[]);
    let agent = agent(w);
    let mut running = UnixStream::connect(&served.socket).unwrap();
    let run = request_text(
        "POST",
        "/v1/runs/stream",
        &agent,
        r#"{"command": "echo started; sleep 60; echo finished"}"#,
    );
    running.write_all(run.as_bytes()).unwrap();
    read_until(&mut running, "started");
    let revoked = Instant::now();
    revoke(w, &agent);
    let rest = closed_within(&mut running, Duration::from_secs(20))
        .expect("the revoked token's run was still going after 20 s");
    let rest = String::from_utf8_lossy(&rest);
    assert!(rest.contains("token_ended"), "{rest}");
    assert!(!rest.contains("finished"), "{rest}");
    assert!(revoked.elapsed() < Duration::from_secs(20));
});

both_modes!(an_unread_answer_holds_its_run_place, |w: &World| {
    // Before: a run's place was given back once it ended, while its answer (up to twice
    // --max-output, six times that once NUL bytes are escaped in JSON) waited in the server for
    // a client that did not read it: run after run, the server's memory grew without bound.
    let served = serve(w, &["--runs-per-token", "1"]);
    let agent = agent(w);
    let unread = UnixStream::connect(&served.socket).unwrap();
    let big = request_text(
        "POST",
        "/v1/runs",
        &agent,
        r#"{"command": "head -c 4000000 /dev/zero"}"#,
    );
    (&unread).write_all(big.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_secs(3));
    let (status, answer) = ask(
        &served,
        "POST",
        "/v1/runs",
        &agent,
        r#"{"command": "true"}"#,
    );
    assert_eq!(
        status, 429,
        "a second run started while an answer waited: {answer}"
    );
    assert!(answer.contains("too_many_runs"), "{answer}");
    drop(unread);
    // The place comes back once the server sees the hang-up: asked again until it has (10 s).
    let deadline = Instant::now() + Duration::from_secs(10);
    let (status, answer) = loop {
        let (status, answer) = ask(
            &served,
            "POST",
            "/v1/runs",
            &agent,
            r#"{"command": "true"}"#,
        );
        if status != 429 || Instant::now() > deadline {
            break (status, answer);
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(status, 200, "{answer}");
});

both_modes!(a_timeout_of_a_month_runs, |w: &World| {
    // Before: a time limit past 24.8 days overflowed the poll timeout: the debug build's worker
    // panicked (500).
    let served = serve_with(w, w.airlock_with_test_hooks());
    let agent = agent(w);
    let body = r#"{"command": "echo ran", "timeout": 2600000}"#;
    let (status, answer) = ask(&served, "POST", "/v1/runs", &agent, body);
    assert_eq!(status, 200, "{answer}");
    assert!(answer.contains("ran"), "{answer}");
});

both_modes!(
    a_patch_larger_than_the_server_makes_is_refused,
    |w: &World| {
        // Before: the patch was made in memory from both sides of every file, whole: a sandbox's
        // 300 MB file took the server to 720 MB for one request (16 at once per token).
        let served = serve(w, &["--max-output", "1000000"]);
        let agent = agent(w);
        let (status, made) = ask(&served, "POST", "/v1/sessions", &agent, "{}");
        assert_eq!(status, 201, "{made}");
        let id = made.split("\"id\":\"").nth(1).unwrap()[..12].to_string();
        let body = r#"{"command": "head -c 3000000 /dev/zero | tr '\\0' 'a' > big.txt"}"#;
        let (status, ran) = ask(
            &served,
            "POST",
            &format!("/v1/sessions/{id}/runs"),
            &agent,
            body,
        );
        assert_eq!(status, 200, "{ran}");
        let mut patch = UnixStream::connect(&served.socket).unwrap();
        let asked = request_text("GET", &format!("/v1/sessions/{id}/diff"), &agent, "").replace(
            "Connection: close\r\n",
            "Connection: close\r\nAccept: text/x-diff\r\n",
        );
        patch.write_all(asked.as_bytes()).unwrap();
        let answer = closed_within(&mut patch, Duration::from_secs(60)).unwrap();
        let (status, answer) = parse_answer(&answer);
        assert_eq!(status, 413, "{}", &answer[..answer.len().min(300)]);
        assert!(answer.contains("diff_too_large"), "{answer}");
        let (status, list) = ask(
            &served,
            "GET",
            &format!("/v1/sessions/{id}/diff"),
            &agent,
            "",
        );
        assert_eq!(status, 200, "{list}");
        assert!(list.contains("big.txt"), "{list}");
    }
);

/// `airlock ARGS…`: it must fail (125) and its message say each of `expected`.
#[track_caller]
fn refused_with(w: &World, args: &[&str], expected: &[&str]) {
    let out = w.airlock().args(args).output().unwrap();
    let said = stderr(&out);
    assert_eq!(out.status.code(), Some(125), "{args:?}: {said}");
    for words in expected {
        assert!(said.contains(words), "{args:?}: {words:?} not in: {said}");
    }
}

fn set_mode(path: &std::path::Path, mode: u32) {
    use std::os::unix::fs::PermissionsExt;
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
}

both_modes!(
    a_token_store_someone_else_could_write_is_refused,
    |w: &World| {
        // Before: tokens.json was read whatever its mode and owner: a group that could write it
        // (a state directory shared by mistake, a restored backup) could add an operator token.
        let agent = agent(w);
        let store = w.state.join("tokens.json");
        let shown = store.display().to_string();
        let served = serve(w, &[]);
        for (mode, what) in [(0o620, "group-writable"), (0o602, "world-writable")] {
            set_mode(&store, mode);
            let named = format!("mode {mode:04o}");
            let expected = [shown.as_str(), what, named.as_str(), "chmod 600"];
            refused_with(w, &["token", "list"], &expected);
            refused_with(w, &["token", "create", "--role", "operator"], &expected);
            // A server going on opens nothing with it; one starting says why and does not start.
            let (status, answer) = ask(&served, "GET", "/v1/sessions", &agent, "");
            assert_eq!(status, 401, "{answer}");
            let second = w.base.join("second.sock");
            let listen = format!("unix:{}", second.display());
            refused_with(w, &["serve", "--listen", &listen], &expected);
        }
        set_mode(&store, 0o600);
        let (status, answer) = ask(&served, "GET", "/v1/sessions", &agent, "");
        assert_eq!(status, 200, "{answer}");
        if !is_root() {
            return;
        }
        // Owned by another user (root's for the unprivileged user, the test user's for root).
        let (me, other) = if w.mode == Mode::User {
            (TEST_UID, 0)
        } else {
            (0, TEST_UID)
        };
        std::os::unix::fs::chown(&store, Some(other), None).unwrap();
        // Readable, so that the owner is what is refused.
        set_mode(&store, 0o644);
        let owner = format!("owned by uid {other}");
        let chown = format!("chown {me} {shown}");
        refused_with(w, &["token", "list"], &[&owner, &chown]);
        let (status, answer) = ask(&served, "GET", "/v1/sessions", &agent, "");
        assert_eq!(status, 401, "{answer}");
        std::os::unix::fs::chown(&store, Some(me), None).unwrap();
        set_mode(&store, 0o600);
        // The store's lock, too.
        let lock = w.state.join("tokens.lock");
        set_mode(&lock, 0o666);
        let lock_shown = lock.display().to_string();
        refused_with(
            w,
            &["token", "create", "--role", "operator"],
            &[&lock_shown, "world-writable", "chmod 600"],
        );
        set_mode(&lock, 0o600);
        let out = w.airlock().args(["token", "list"]).output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
    }
);

both_modes!(
    a_token_refused_again_and_again_does_not_fill_the_log,
    |w: &World| {
        // Each request refused, each naming a 100 KB path: before, every one was a record (and each
        // record held the whole name), so any agent's token could fill the state disk through the
        // log. Now a record keeps a field's first KiB, and past five a second a token's refusals
        // are counted into one record.
        use nix::sys::signal::Signal;
        const REQUESTS: u64 = 60;
        let agent = agent_token(w);
        let mut server = Server::start(w, &[]);
        let api = server.client(&agent.token);
        let elsewhere = format!("/etc/{}", "n".repeat(100_000));
        let started = Instant::now();
        for _ in 0..REQUESTS {
            let refused = api.post(
                "/v1/sessions",
                &serde_json::json!({ "name": "flood", "workspace": elsewhere }),
            );
            assert!(refused.status >= 400, "{}", refused.text());
        }
        let seconds = started.elapsed().as_secs() + 1;
        server.signal(Signal::SIGTERM);
        assert!(server.wait(Duration::from_secs(10)).success());
        let written = support::api::audit_of(w, "session.refused");
        let counted: u64 = support::api::audit_of(w, "refusals.suppressed")
            .iter()
            .inspect(|record| {
                assert_eq!(record["by"]["token"], agent.id, "{record}");
                // What was refused is named, cut short, with its count.
                let kind = &record["refused"][0];
                assert_eq!(kind["action"], "session.refused", "{record}");
                assert!(kind["error"].as_str().unwrap().len() <= 400, "{record}");
                assert_eq!(kind["count"], record["count"], "{record}");
            })
            .map(|record| record["count"].as_u64().unwrap())
            .sum();
        assert_eq!(
            written.len() as u64 + counted,
            REQUESTS,
            "every refusal is on record"
        );
        assert!(
            written.len() as u64 <= 5 * (seconds + 1),
            "{} records in {seconds} s",
            written.len()
        );
        let log = std::fs::metadata(w.state.join("audit.log")).unwrap().len();
        assert!(log < 100_000, "the log grew to {log} bytes");
    }
);
