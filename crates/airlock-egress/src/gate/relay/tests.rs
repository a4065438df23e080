//! The relay hands an intercepted connection to the injector (directly, and through the
//! proxy's CONNECT), and relays every other as it is. Over loopback, against an echo server.

use std::io::{Read as _, Write as _};
use std::sync::Mutex;

use super::*;
use crate::inject::testing::{Client, Echo, TestCa, H2, HTTP11};
use crate::inject::{Inject, Injector, Secret};
use crate::rules::{Destination, Egress};

const PLACEHOLDER: &str = "ghp_airlockGATEplaceholder";
const VALUE: &str = "ghp_realGATEvalue";

/// A gate whose injector holds a placeholder secret for api.test, trusting `ca`; and its
/// events.
fn gate(ca: &TestCa) -> (Arc<State>, Arc<Injector>, Arc<Mutex<Vec<NetEvent>>>) {
    gate_with(ca, Vec::new())
}

/// [`gate`], with `[[network.http]]` rules.
fn gate_with(
    ca: &TestCa,
    http: Vec<airlock_rules::HttpRules>,
) -> (Arc<State>, Arc<Injector>, Arc<Mutex<Vec<NetEvent>>>) {
    let secret = Secret {
        name: "GH".into(),
        hosts: vec!["api.test".into()],
        placeholder: PLACEHOLDER.into(),
        value: zeroize::Zeroizing::new(VALUE.into()),
        inject: Inject::Placeholder {
            headers: vec!["x-token".into()],
        },
    };
    let injector = Injector::with_roots(vec![secret], ca.roots()).unwrap();
    let injector = Arc::new(injector.with_http(http).unwrap());
    let events = Arc::new(Mutex::new(Vec::new()));
    let logged = events.clone();
    let d = |text: &str| Destination::parse(text).unwrap();
    let config = super::super::Config {
        egress: Egress::Allow {
            allow: vec![d("api.test"), d("plain.test")],
            deny: Vec::new(),
        },
        resolve: vec![("api.test".into(), "127.0.0.1".parse().unwrap())],
        on_event: Box::new(move |e: &NetEvent| logged.lock().unwrap().push(e.clone())),
        cut_when: None,
        inject: Some(injector.clone()),
        approvals: None,
    };
    let state = Arc::new(State::new(config, Vec::new(), 64));
    (state, injector, events)
}

/// The sandbox's end of one connection the relay takes to `target`, and the relay's thread.
fn relayed(state: &Arc<State>, target: Target) -> (TcpStream, std::thread::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let sandbox = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
    let (client, _) = listener.accept().unwrap();
    let state = state.clone();
    let relay = std::thread::spawn(move || super::relay(client, target, None, &state));
    (sandbox, relay)
}

fn by_name(name: &str, addr: SocketAddr) -> Target {
    Target {
        name: Some(name.into()),
        addr,
        proxy: false,
        forwarded: false,
        program: None,
    }
}

fn kinds(events: &Mutex<Vec<NetEvent>>) -> Vec<NetEventKind> {
    events.lock().unwrap().iter().map(|e| e.kind).collect()
}

#[test]
fn a_connection_to_a_host_with_a_secret_is_served_by_the_injector() {
    let ca = TestCa::new("upstream");
    let echo = Echo::start(ca.server("api.test", &[H2, HTTP11]));
    let (state, injector, events) = gate(&ca);
    for alpn in [HTTP11, H2] {
        let (sandbox, relay) = relayed(&state, by_name("api.test", echo.addr));
        let mut client =
            Client::over(sandbox, injector.ca_pem(), Some("api.test"), &[alpn]).unwrap();
        let (status, body) = client
            .get("api.test", "/", &[("x-token", PLACEHOLDER)])
            .unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(body.contains(&format!("x-token: {VALUE}\n")), "{body}");
        drop(client);
        relay.join().unwrap();
    }
    assert_eq!(
        kinds(&events),
        [
            NetEventKind::Secret,
            NetEventKind::Closed,
            NetEventKind::Secret,
            NetEventKind::Closed
        ]
    );
    let closed = &events.lock().unwrap()[1];
    assert_eq!(closed.sni.as_deref(), Some("api.test"));
    assert!(closed.bytes_out.unwrap() > 0 && closed.bytes_in.unwrap() > 0);
    assert!(state.open.lock().unwrap().is_empty(), "no longer listed");
}

#[test]
fn a_host_without_a_secret_is_relayed_as_it_is() {
    let ca = TestCa::new("upstream");
    let echo = Echo::start(ca.server("plain.test", &[HTTP11]));
    let (state, injector, events) = gate(&ca);
    // The session CA's certificate is not what it gets: the server's own is.
    let (sandbox, relay) = relayed(&state, by_name("plain.test", echo.addr));
    assert!(Client::over(sandbox, injector.ca_pem(), Some("plain.test"), &[HTTP11]).is_err());
    relay.join().unwrap();
    let (sandbox, relay) = relayed(&state, by_name("plain.test", echo.addr));
    let mut client = Client::over(sandbox, &ca.pem, Some("plain.test"), &[HTTP11]).unwrap();
    let (status, body) = client
        .get("plain.test", "/", &[("x-token", PLACEHOLDER)])
        .unwrap();
    assert_eq!(status, 200);
    assert!(body.contains(PLACEHOLDER), "{body}");
    drop(client);
    relay.join().unwrap();
    assert_eq!(kinds(&events), [NetEventKind::Closed, NetEventKind::Closed]);
}

#[test]
fn a_proxy_tunnel_to_a_host_with_a_secret_is_served_by_the_injector() {
    let ca = TestCa::new("upstream");
    let echo = Echo::start(ca.server("api.test", &[HTTP11]));
    let (state, injector, events) = gate(&ca);
    let proxy = Target {
        name: None,
        addr: super::super::PROXY,
        proxy: true,
        forwarded: false,
        program: None,
    };
    let (mut sandbox, relay) = relayed(&state, proxy);
    let port = echo.addr.port();
    let connect = format!("CONNECT api.test:{port} HTTP/1.1\r\nHost: api.test:{port}\r\n\r\n");
    sandbox.write_all(connect.as_bytes()).unwrap();
    let mut answer = [0u8; 39];
    sandbox.read_exact(&mut answer).unwrap();
    assert_eq!(&answer[..], b"HTTP/1.1 200 Connection established\r\n\r\n");
    let mut client = Client::over(sandbox, injector.ca_pem(), Some("api.test"), &[HTTP11]).unwrap();
    let (status, body) = client
        .get(
            &format!("api.test:{port}"),
            "/",
            &[("x-token", PLACEHOLDER)],
        )
        .unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(body.contains(&format!("x-token: {VALUE}\n")), "{body}");
    drop(client);
    relay.join().unwrap();
    assert_eq!(
        kinds(&events),
        [
            NetEventKind::Connect,
            NetEventKind::Secret,
            NetEventKind::Closed
        ]
    );
}

#[test]
fn a_host_with_http_rules_is_reached_by_tls_only_and_its_requests_judged() {
    let ca = TestCa::new("upstream");
    let echo = Echo::start(ca.server("api.test", &[HTTP11]));
    let rules = airlock_rules::HttpRules {
        host: "api.test".into(),
        allow: Some(vec![airlock_rules::RequestRule::parse("GET /ok").unwrap()]),
    };
    let (state, injector, events) = gate_with(&ca, vec![rules]);
    let (sandbox, relay) = relayed(&state, by_name("api.test", echo.addr));
    let mut client = Client::over(sandbox, injector.ca_pem(), Some("api.test"), &[HTTP11]).unwrap();
    assert_eq!(client.get("api.test", "/ok", &[]).unwrap().0, 200);
    assert_eq!(client.get("api.test", "/other", &[]).unwrap().0, 403);
    drop(client);
    relay.join().unwrap();
    // Plain HTTP to it (here, to a server that counts what it is sent): refused before a byte
    // goes on, with a 403 that says why.
    let plain = TcpListener::bind("127.0.0.1:0").unwrap();
    let plain_addr = plain.local_addr().unwrap();
    let counted = std::thread::spawn(move || {
        let (mut upstream, _) = plain.accept().unwrap();
        let mut got = Vec::new();
        let _ = upstream.read_to_end(&mut got);
        got.len()
    });
    let (mut sandbox, relay) = relayed(&state, by_name("api.test", plain_addr));
    sandbox
        .write_all(b"GET /ok HTTP/1.1\r\nHost: api.test\r\n\r\n")
        .unwrap();
    let mut answer = String::new();
    sandbox.read_to_string(&mut answer).unwrap();
    relay.join().unwrap();
    assert!(answer.starts_with("HTTP/1.1 403 Forbidden\r\n"), "{answer}");
    assert!(answer.contains("not TLS"), "{answer}");
    assert_eq!(counted.join().unwrap(), 0, "nothing reached the server");
    let events = events.lock().unwrap();
    let judged: Vec<(bool, Option<&str>)> = events
        .iter()
        .filter(|e| e.kind == NetEventKind::Request)
        .map(|e| (e.allowed, e.method.as_deref()))
        .collect();
    assert_eq!(
        judged,
        [
            (true, Some("GET")),
            (false, Some("GET")),
            (false, Some("GET"))
        ],
        "{events:?}"
    );
}

#[test]
fn cutting_the_network_ends_an_intercepted_connection() {
    let ca = TestCa::new("upstream");
    let echo = Echo::start(ca.server("api.test", &[HTTP11]));
    let (state, injector, _events) = gate(&ca);
    let (sandbox, relay) = relayed(&state, by_name("api.test", echo.addr));
    let mut client = Client::over(sandbox, injector.ca_pem(), Some("api.test"), &[HTTP11]).unwrap();
    assert_eq!(client.get("api.test", "/", &[]).unwrap().0, 200);
    state.close_all();
    relay.join().unwrap();
    assert!(client.get("api.test", "/", &[]).is_err());
}

/// Mean time of `n` small GETs on one kept-alive HTTP/1.1 connection of `client`.
fn mean_get(client: &mut Client, host: &str, n: u32) -> std::time::Duration {
    client.get(host, "/", &[]).unwrap();
    let started = Instant::now();
    for _ in 0..n {
        let (status, _) = client.get(host, "/", &[("x-token", PLACEHOLDER)]).unwrap();
        assert_eq!(status, 200);
    }
    started.elapsed() / n
}

/// Not a check: what a request costs injected, relayed plainly and direct (run with
/// `--release --ignored --nocapture`).
#[test]
#[ignore]
fn measure_an_injected_request_against_the_plain_relay() {
    const N: u32 = 2000;
    let ca = TestCa::new("upstream");
    let api = Echo::start(ca.server("api.test", &[HTTP11]));
    let plain = Echo::start(ca.server("plain.test", &[HTTP11]));
    let (state, injector, _events) = gate(&ca);
    let mut direct = Client::connect(plain.addr, &ca.pem, Some("plain.test"), &[HTTP11]).unwrap();
    let direct = mean_get(&mut direct, "plain.test", N);
    let (sandbox, _relay) = relayed(&state, by_name("plain.test", plain.addr));
    let mut relayed_plain = Client::over(sandbox, &ca.pem, Some("plain.test"), &[HTTP11]).unwrap();
    let relayed_plain = mean_get(&mut relayed_plain, "plain.test", N);
    let (sandbox, _relay) = relayed(&state, by_name("api.test", api.addr));
    let mut injected =
        Client::over(sandbox, injector.ca_pem(), Some("api.test"), &[HTTP11]).unwrap();
    let injected = mean_get(&mut injected, "api.test", N);
    println!("per request, kept alive, HTTP/1.1: direct {direct:?}, plain relay {relayed_plain:?}, injected {injected:?}");
    // And a new connection each time (TLS both sides when injected; the leaf cached).
    let per_connection = |name: &str, echo: SocketAddr, ca_pem: &str| {
        let started = Instant::now();
        for _ in 0..200 {
            let (sandbox, relay) = relayed(&state, by_name(name, echo));
            let mut client = Client::over(sandbox, ca_pem, Some(name), &[HTTP11]).unwrap();
            client.get(name, "/", &[]).unwrap();
            drop(client);
            relay.join().unwrap();
        }
        started.elapsed() / 200
    };
    let plain_each = per_connection("plain.test", plain.addr, &ca.pem);
    let injected_each = per_connection("api.test", api.addr, injector.ca_pem());
    println!(
        "a new connection per request: plain relay {plain_each:?}, injected {injected_each:?}"
    );
}
