//! Attacks on `airlock serve` by a client that holds a token (an agent's, as an LLM-driven
//! automation would) or none: each shows the hole it was, by what the server must answer.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{Read, Write};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use support::api::{agent_token, Addr, Server};
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

fn agent(w: &World) -> String {
    agent_token(w).token
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
        "POST /v1/runs HTTP/1.1\r\nHost: airlock\r\nAuthorization: Bearer {token}\r\nContent-Length: 100\r\n\r\n{{"
    );
    slow.write_all(head.as_bytes()).unwrap();
    let answer = closed_within(&mut slow, Duration::from_secs(45))
        .expect("a body that never came held the connection");
    let (status, body) = parse_answer(&answer);
    assert_eq!(status, 408, "{body}");
    assert!(body.contains("body_timeout"), "{body}");
});
