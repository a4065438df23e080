//! `airlock serve` started by systemd's socket activation: the real `systemd-socket-activate`
//! binds the socket and execs the server with LISTEN_FDS/LISTEN_PID, as a `.socket` unit does.
//! The server serves on that socket, refuses one it must not serve on (beyond loopback without
//! TLS, several, another address than --listen), ignores variables meant for another process,
//! and drains on SIGTERM as it does on its own socket.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::time::{Duration, Instant};

use nix::sys::signal::Signal;
use serde_json::json;

use support::api::{
    agent_token, assert_ok, assert_refused, free_port, skip_without_socket_activate,
    spawn_activated, Addr, Server,
};
use support::{process_running, wait_for, Mode, World};

/// A string no other test's processes carry on their command line.
fn marker(w: &World, tag: &str) -> String {
    let base = w.base.file_name().unwrap().to_string_lossy();
    format!("{base}-{tag}")
}

both_modes!(a_unix_socket_from_systemd_is_served_and_drained);
/// A unix socket systemd bound: requests with a token are answered over it, one without is
/// refused; the server makes no socket of its own. On SIGTERM a run going on finishes and is
/// answered, the server exits 0, and systemd's socket file is left to systemd.
fn a_unix_socket_from_systemd_is_served_and_drained(w: &World) {
    if skip_without_socket_activate() {
        return;
    }
    let agent = agent_token(w);
    let socket = w.base.join("activated.sock");
    let mut server = Server::start_activated(
        w,
        socket.to_str().unwrap(),
        &["--grace", "10s"],
        Addr::Unix(socket.clone()),
    );
    assert!(
        server.stderr().contains(&format!(
            "serving on unix:{} (a socket from systemd)",
            socket.display()
        )),
        "{}",
        server.stderr()
    );
    assert!(!w.state.join("airlock.sock").exists());
    let api = server.client(&agent.token);
    let ran = assert_ok(&api.post("/v1/runs", &json!({ "argv": ["echo", "activated"] })));
    assert_eq!(ran["stdout"], "activated\n", "{ran}");
    assert_refused(
        &server.anonymous().get("/v1/sessions"),
        401,
        "token_missing",
    );

    let mark = marker(w, "activated-drain");
    let runner = {
        let api = api.clone();
        let body = json!({ "argv": ["sh", "-c", "sleep 3; echo finished", mark] });
        std::thread::spawn(move || api.post("/v1/runs", &body))
    };
    wait_for("the run started", Duration::from_secs(10), || {
        process_running(&mark)
    });
    no_worker_holds_the_listener(&server);
    server.signal(Signal::SIGTERM);
    let ran = assert_ok(&runner.join().unwrap());
    assert_eq!(
        (ran["exit_code"].as_i64(), ran["stdout"].as_str()),
        (Some(0), Some("finished\n")),
        "{ran}"
    );
    assert!(
        server.wait(Duration::from_secs(10)).success(),
        "{}",
        server.stderr()
    );
    assert!(server.stderr().contains("airlock: stopped"));
    assert!(socket.exists(), "systemd's socket file was removed");
}

/// systemd passes the socket as descriptor 3 and not close-on-exec: the server must mark it so,
/// or every worker (and what it starts) would hold the server's listening socket.
fn no_worker_holds_the_listener(server: &Server) {
    let server = server.pid().as_raw();
    let listener = std::fs::read_link(format!("/proc/{server}/fd/3")).unwrap();
    assert!(
        listener.to_string_lossy().starts_with("socket:"),
        "{listener:?}"
    );
    let workers = children_of(server);
    assert!(!workers.is_empty(), "no worker found");
    for worker in workers {
        for fd in std::fs::read_dir(format!("/proc/{worker}/fd"))
            .unwrap()
            .flatten()
        {
            let target = std::fs::read_link(fd.path()).unwrap_or_default();
            assert_ne!(target, listener, "worker {worker} holds the listener");
        }
    }
}

both_modes!(a_loopback_tcp_socket_from_systemd_is_served);
/// 127.0.0.1:PORT bound by systemd: served without TLS (loopback), with or without a --listen
/// that names the same address (a unit that also works without its .socket unit).
fn a_loopback_tcp_socket_from_systemd_is_served(w: &World) {
    if skip_without_socket_activate() {
        return;
    }
    let agent = agent_token(w);
    for listen in [false, true] {
        let addr: std::net::SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let text = addr.to_string();
        let extra: Vec<&str> = if listen {
            vec!["--listen", &text]
        } else {
            vec![]
        };
        let mut server = Server::start_activated(w, &text, &extra, Addr::Tcp(addr));
        let api = server.client(&agent.token);
        let ran = assert_ok(&api.post("/v1/runs", &json!({ "argv": ["echo", "over tcp"] })));
        assert_eq!(ran["stdout"], "over tcp\n", "{ran}");
        server.signal(Signal::SIGTERM);
        assert!(
            server.wait(Duration::from_secs(10)).success(),
            "{}",
            server.stderr()
        );
    }
}

/// A server started on `sockets` by systemd-socket-activate, woken by a connection to
/// `connect_to`: it must refuse to serve (125), and say `expected`.
#[track_caller]
fn refused_socket(
    w: &World,
    sockets: &[&str],
    extra: &[&str],
    connect_to: &str,
    expected: &[&str],
) {
    let addr: std::net::SocketAddr = connect_to.parse().unwrap();
    let mut server = spawn_activated(w, sockets, extra, Addr::Tcp(addr));
    // The first connection makes systemd-socket-activate start the server.
    let deadline = Instant::now() + Duration::from_secs(10);
    let _connection = loop {
        match std::net::TcpStream::connect(addr) {
            Ok(connection) => break connection,
            Err(_) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(20)),
            Err(err) => panic!("cannot connect to {addr}: {err}"),
        }
    };
    let status = server.wait(Duration::from_secs(20));
    let said = server.stderr();
    assert_eq!(status.code(), Some(125), "{said}");
    for words in expected {
        assert!(said.contains(words), "{words:?} not in: {said}");
    }
}

/// Sockets the server must not serve on: a TCP socket beyond loopback without TLS (named, and
/// what to do said), two sockets, one at another address than --listen.
#[test]
fn sockets_from_systemd_it_must_not_serve_on_are_refused() {
    if skip_without_socket_activate() {
        return;
    }
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    let port = free_port();
    refused_socket(
        &w,
        &[&format!("0.0.0.0:{port}")],
        &[],
        &format!("127.0.0.1:{port}"),
        &[
            &format!("listens on 0.0.0.0:{port}"),
            "no TLS",
            "--tls-cert and --tls-key",
        ],
    );
    let (first, second) = (free_port(), free_port());
    refused_socket(
        &w,
        &[
            &format!("127.0.0.1:{first}"),
            &format!("127.0.0.1:{second}"),
        ],
        &[],
        &format!("127.0.0.1:{first}"),
        &["systemd passed 2 sockets", "exactly one"],
    );
    let (passed, named) = (free_port(), free_port());
    refused_socket(
        &w,
        &[&format!("127.0.0.1:{passed}")],
        &["--listen", &format!("127.0.0.1:{named}")],
        &format!("127.0.0.1:{passed}"),
        &[&format!("--listen says 127.0.0.1:{named}"), "drop --listen"],
    );
}

/// The environment of `pid`, as it was when it started.
fn environment_of(pid: i32) -> Vec<String> {
    let raw = std::fs::read(format!("/proc/{pid}/environ")).unwrap();
    raw.split(|b| *b == 0)
        .map(|v| String::from_utf8_lossy(v).into_owned())
        .collect()
}

/// The processes whose parent is `parent`.
fn children_of(parent: i32) -> Vec<i32> {
    let mut children = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<i32>() else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
            continue;
        };
        // pid (comm) state ppid …: comm may hold spaces, so from its closing parenthesis.
        let after = &stat[stat.rfind(')').unwrap() + 2..];
        if after.split(' ').nth(1) == Some(&parent.to_string()) {
            children.push(pid);
        }
    }
    children
}

both_modes!(variables_meant_for_another_process_are_ignored_and_not_inherited);
/// LISTEN_FDS/LISTEN_PID naming another pid (a parent that did not unset them): the server binds
/// its own socket, as sd_listen_fds would have it, and its workers do not inherit the variables.
fn variables_meant_for_another_process_are_ignored_and_not_inherited(w: &World) {
    let agent = agent_token(w);
    let mut serve = w.airlock();
    serve
        .arg("serve")
        .env("LISTEN_FDS", "1")
        .env("LISTEN_PID", "1")
        .env("LISTEN_FDNAMES", "other");
    let server = Server::start_command(w, serve, Addr::Unix(w.state.join("airlock.sock")));
    assert!(
        environment_of(server.pid().as_raw()).contains(&"LISTEN_PID=1".to_string()),
        "the server was not started with the variables"
    );
    let api = server.client(&agent.token);
    let mark = marker(w, "inherited");
    let mut run = api.stream(
        "/v1/runs/stream",
        &json!({ "argv": ["sh", "-c", "echo up; while :; do sleep 0.05; done", mark] }),
    );
    assert_eq!(run.next_line().unwrap()["data"], "up\n");
    let workers = children_of(server.pid().as_raw());
    assert!(!workers.is_empty(), "no worker found");
    for worker in workers {
        let inherited: Vec<String> = environment_of(worker)
            .into_iter()
            .filter(|v| v.starts_with("LISTEN_"))
            .collect();
        assert!(
            inherited.is_empty(),
            "worker {worker} inherited {inherited:?}"
        );
    }
}
