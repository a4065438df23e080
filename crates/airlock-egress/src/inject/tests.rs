//! The injector: its CA and secrets, and serving intercepted connections over loopback.

use super::*;

fn secret(hosts: &[&str], inject: Inject) -> Secret {
    Secret {
        name: "GITHUB_TOKEN".into(),
        hosts: hosts.iter().map(|h| h.to_string()).collect(),
        placeholder: "ghp_airlockPLACEHOLDER".into(),
        value: zeroize::Zeroizing::new("ghp_realVALUEthatmustnotshow".into()),
        inject,
    }
}

#[test]
fn a_secrets_value_is_not_in_its_debug_output() {
    let s = secret(&["api.github.com"], in_named());
    let shown = format!("{s:?}");
    assert!(!shown.contains("realVALUE"), "{shown}");
    assert!(shown.contains("redacted"), "{shown}");
}

#[test]
fn the_ca_is_fresh_and_leaves_are_made_once_per_host() {
    let secrets = vec![secret(&["api.github.com"], in_named())];
    let a = Injector::with_roots(secrets, RootCertStore::empty()).unwrap();
    let b = Injector::with_roots(Vec::new(), RootCertStore::empty()).unwrap();
    assert!(a.ca_pem().starts_with("-----BEGIN CERTIFICATE-----"));
    assert_ne!(a.ca_pem(), b.ca_pem());
    assert!(a.intercepts("API.github.com"));
    assert!(!a.intercepts("github.com"));
    let first = a.ca.leaf("api.github.com").unwrap();
    let again = a.ca.leaf("Api.GitHub.com").unwrap();
    assert_eq!(first.0, again.0, "cached");
    assert_eq!(first.0.len(), 2, "leaf then CA");
}

#[test]
fn a_ca_made_beforehand_must_cover_every_host_of_the_secrets() {
    let ca = SessionCa::new(&["api.github.com".to_string()]).unwrap();
    let pem = ca.pem().to_string();
    let injector = Injector::with_ca_and_roots(
        ca,
        vec![secret(&["API.github.com"], in_named())],
        RootCertStore::empty(),
    )
    .unwrap();
    assert_eq!(injector.ca_pem(), pem, "the CA the sandbox was given");
    let narrow = SessionCa::new(&["api.github.com".to_string()]).unwrap();
    let refused = Injector::with_ca_and_roots(
        narrow,
        vec![secret(&["api.github.com", "github.com"], in_named())],
        RootCertStore::empty(),
    )
    .err()
    .unwrap();
    assert!(refused.contains("without github.com"), "{refused}");
}

// Serving intercepted connections, over loopback: client ↔ serve ↔ an HTTPS echo server.

use std::io::Read as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::Mutex;

use super::testing::{hash, pattern, raw_exchange, Client, Echo, TestCa, H2, HASH_START, HTTP11};
use crate::gate::{NetEvent, NetEventKind};

const PLACEHOLDER: &str = "ghp_airlockPLACEHOLDER";
const VALUE: &str = "ghp_realVALUEthatmustnotshow";
const HOST: &str = "api.test";

fn secret_for(name: &str, host: &str, placeholder: &str, value: &str, inject: Inject) -> Secret {
    Secret {
        name: name.into(),
        hosts: vec![host.into()],
        placeholder: placeholder.into(),
        value: zeroize::Zeroizing::new(value.into()),
        inject,
    }
}

/// One intercepted connection's relay, as the gate's would be: the hello read, then served.
struct Through {
    addr: SocketAddr,
    done: std::thread::JoinHandle<Served>,
    events: Arc<Mutex<Vec<NetEvent>>>,
}

impl Through {
    fn start(injector: Arc<Injector>, upstream: SocketAddr, host: &str) -> Through {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let events = Arc::new(Mutex::new(Vec::new()));
        let logged = events.clone();
        let host = host.to_string();
        let done = std::thread::spawn(move || {
            let (mut client, _) = listener.accept().unwrap();
            let mut first = Vec::new();
            let mut chunk = [0u8; 4096];
            while crate::sni::peek(&first) == crate::sni::Peek::NeedMore {
                let n = client.read(&mut chunk).unwrap();
                assert!(n > 0, "closed before its hello");
                first.extend_from_slice(&chunk[..n]);
            }
            let port = upstream.port();
            let upstream = TcpStream::connect(upstream).unwrap();
            let log = |e: &NetEvent| logged.lock().unwrap().push(e.clone());
            injector.serve(client, upstream, first, &host, port, &log)
        });
        Through { addr, done, events }
    }

    /// The connection's events, once it has ended.
    fn finish(self) -> (Served, Vec<NetEvent>) {
        let served = self.done.join().unwrap();
        (served, self.events.lock().unwrap().clone())
    }
}

/// An echo server for `HOST` by its own CA, offering `alpn`, and an injector of `secrets`
/// trusting that CA.
fn setup(secrets: Vec<Secret>, alpn: &[&[u8]]) -> (Echo, Arc<Injector>) {
    let (echo, injector, _) = setup_trusting(secrets, alpn);
    (echo, injector)
}

/// [`setup`], and the upstream CA's certificate: for a client that reaches the echo server
/// without the gate, as a naive setup would.
fn setup_trusting(secrets: Vec<Secret>, alpn: &[&[u8]]) -> (Echo, Arc<Injector>, String) {
    let ca = TestCa::new("upstream test CA");
    let echo = Echo::start(ca.server(HOST, alpn));
    let injector = Injector::with_roots(secrets, ca.roots()).unwrap();
    (echo, Arc::new(injector), ca.pem.clone())
}

fn json(events: &[NetEvent]) -> String {
    events
        .iter()
        .map(|e| serde_json::to_string(e).unwrap())
        .collect::<Vec<_>>()
        .join("\n")
}

fn of_kind(events: &[NetEvent], kind: NetEventKind) -> Vec<&NetEvent> {
    events.iter().filter(|e| e.kind == kind).collect()
}

const BOTH: [&[u8]; 2] = [HTTP11, H2];

#[test]
fn a_header_secret_is_set_on_every_request_and_logged_once() {
    for alpn in BOTH {
        let inject = Inject::Header {
            name: "Authorization".into(),
            format: "Bearer {}".into(),
        };
        let (echo, injector) = setup(
            vec![secret_for("GH", HOST, PLACEHOLDER, VALUE, inject)],
            &[H2, HTTP11],
        );
        let through = Through::start(injector.clone(), echo.addr, HOST);
        let mut client =
            Client::connect(through.addr, injector.ca_pem(), Some(HOST), &[alpn]).unwrap();
        assert_eq!(
            client.alpn.as_deref(),
            Some(alpn),
            "the client's choice, both sides"
        );
        let authority = format!("{HOST}:{}", echo.addr.port());
        let bearer = format!("Bearer {PLACEHOLDER}");
        for headers in [&[("authorization", bearer.as_str())][..], &[]] {
            let (status, body) = client.get(&authority, "/user", headers).unwrap();
            assert_eq!(status, 200, "{body}");
            assert!(
                body.contains(&format!("authorization: Bearer {VALUE}\n")),
                "{body}"
            );
            assert!(!body.contains(PLACEHOLDER), "{body}");
            let version = if alpn == H2 { "HTTP/2.0" } else { "HTTP/1.1" };
            assert!(body.starts_with("GET ") && body.contains(version), "{body}");
        }
        drop(client);
        let (served, events) = through.finish();
        assert!(served.bytes_out > 0 && served.bytes_in > 0);
        let injected = of_kind(&events, NetEventKind::Secret);
        assert_eq!(injected.len(), 1, "once per connection: {events:?}");
        assert_eq!(injected[0].rule, "secret GH injected for host api.test");
        assert_eq!(injected[0].secret.as_deref(), Some("GH"));
        assert!(injected[0].allowed);
        assert!(
            of_kind(&events, NetEventKind::Placeholder).is_empty(),
            "{events:?}"
        );
        assert!(!json(&events).contains("realVALUE"), "{}", json(&events));
    }
}

#[test]
fn basic_and_query_secrets_are_put_in_their_place() {
    for alpn in BOTH {
        let secrets = vec![
            secret_for(
                "USER",
                HOST,
                "placeholderA1",
                "s3cret:with colon",
                Inject::Basic {
                    username: "x-access-token".into(),
                },
            ),
            secret_for(
                "Q",
                HOST,
                "placeholderQ1",
                "q/value&more",
                Inject::Query {
                    param: "access_token".into(),
                },
            ),
        ];
        let (echo, injector) = setup(secrets, &[H2, HTTP11]);
        let through = Through::start(injector.clone(), echo.addr, HOST);
        let mut client =
            Client::connect(through.addr, injector.ca_pem(), Some(HOST), &[alpn]).unwrap();
        let authority = format!("{HOST}:{}", echo.addr.port());
        let (status, body) = client
            .get(
                &authority,
                "/repos?access_token=placeholderQ1&page=2",
                &[("authorization", "Basic Zm9vOmJhcg==")],
            )
            .unwrap();
        assert_eq!(status, 200, "{body}");
        use base64::Engine as _;
        let basic =
            base64::engine::general_purpose::STANDARD.encode("x-access-token:s3cret:with colon");
        assert!(
            body.contains(&format!("authorization: Basic {basic}\n")),
            "{body}"
        );
        assert!(
            body.contains("/repos?page=2&access_token=q%2Fvalue%26more "),
            "{body}"
        );
        drop(client);
        let (_, events) = through.finish();
        assert_eq!(
            of_kind(&events, NetEventKind::Secret).len(),
            2,
            "{events:?}"
        );
        let json = json(&events);
        assert!(
            !json.contains("s3cret") && !json.contains("q/value"),
            "{json}"
        );
    }
}

#[test]
fn placeholders_are_replaced_in_headers_and_basic_and_others_left_and_logged() {
    for alpn in BOTH {
        let secrets = vec![
            secret_for("GH", HOST, PLACEHOLDER, VALUE, in_named()),
            secret_for(
                "OTHER",
                "other.test",
                "xoxb-airlockOTHER",
                "xoxb-otherREALvalue",
                in_named(),
            ),
        ];
        let (echo, injector) = setup(secrets, &[H2, HTTP11]);
        let through = Through::start(injector.clone(), echo.addr, HOST);
        let mut client =
            Client::connect(through.addr, injector.ca_pem(), Some(HOST), &[alpn]).unwrap();
        use base64::Engine as _;
        let b64 = base64::engine::general_purpose::STANDARD;
        let basic = format!("Basic {}", b64.encode(format!("me:{PLACEHOLDER}")));
        let headers = [
            ("authorization", basic.as_str()),
            ("x-token", "t=ghp_airlockPLACEHOLDER;"),
            ("x-other", "xoxb-airlockOTHER"),
        ];
        let authority = format!("{HOST}:{}", echo.addr.port());
        let (status, body) = client.get(&authority, "/", &headers).unwrap();
        assert_eq!(status, 200, "{body}");
        let want = format!(
            "authorization: Basic {}\n",
            b64.encode(format!("me:{VALUE}"))
        );
        assert!(body.contains(&want), "{body}");
        assert!(body.contains(&format!("x-token: t={VALUE};\n")), "{body}");
        assert!(
            body.contains("x-other: xoxb-airlockOTHER\n"),
            "not for this host: {body}"
        );
        assert!(!body.contains("otherREAL"), "{body}");
        // Not put where there is no placeholder.
        let (_, body) = client.get(&authority, "/", &[]).unwrap();
        assert!(!body.contains(VALUE), "{body}");
        drop(client);
        let (_, events) = through.finish();
        let unreplaced = of_kind(&events, NetEventKind::Placeholder);
        assert_eq!(unreplaced.len(), 1, "{events:?}");
        assert_eq!(
            unreplaced[0].rule,
            "placeholder of secret OTHER sent to host api.test: not replaced"
        );
        assert_eq!(unreplaced[0].secret.as_deref(), Some("OTHER"));
        assert_eq!(of_kind(&events, NetEventKind::Secret).len(), 1);
        assert!(!json(&events).contains("REAL"), "{}", json(&events));
    }
}

#[test]
fn another_host_on_a_kept_alive_connection_is_misdirected_and_closes_it() {
    for alpn in BOTH {
        let (echo, injector) = setup(
            vec![secret_for("GH", HOST, PLACEHOLDER, VALUE, in_named())],
            &[H2, HTTP11],
        );
        let through = Through::start(injector.clone(), echo.addr, HOST);
        let mut client =
            Client::connect(through.addr, injector.ca_pem(), Some(HOST), &[alpn]).unwrap();
        let port = echo.addr.port();
        assert_eq!(
            client.get(&format!("{HOST}:{port}"), "/", &[]).unwrap().0,
            200
        );
        // Case-blind, and without a port.
        assert_eq!(client.get("API.test", "/", &[]).unwrap().0, 200);
        let (status, body) = client
            .get(&format!("other.test:{port}"), "/", &[("x", PLACEHOLDER)])
            .unwrap();
        assert_eq!(status, 421, "{body}");
        assert!(body.contains("domain fronting"), "{body}");
        // Closed (HTTP/2: a request that crossed the server's GOAWAY is misdirected too).
        let after = client.get(&format!("{HOST}:{port}"), "/", &[]);
        let closed = after.as_ref().map_or(true, |(status, _)| *status == 421);
        assert!(closed, "{after:?}");
        drop(client);
        let (_, events) = through.finish();
        let fronting = of_kind(&events, NetEventKind::Fronting);
        assert_eq!(fronting.len(), 1, "{events:?}");
        assert!(!fronting[0].allowed);
        assert!(
            fronting[0].rule.contains("asked for other.test"),
            "{}",
            fronting[0].rule
        );
        assert_eq!(
            echo.received.lock().unwrap().len(),
            2,
            "the misdirected one not passed on"
        );
    }
}

#[test]
fn a_port_other_than_the_connections_is_misdirected() {
    let (echo, injector) = setup(
        vec![secret_for("GH", HOST, PLACEHOLDER, VALUE, in_named())],
        &[HTTP11],
    );
    let through = Through::start(injector.clone(), echo.addr, HOST);
    let mut client =
        Client::connect(through.addr, injector.ca_pem(), Some(HOST), &[HTTP11]).unwrap();
    assert_eq!(client.get(&format!("{HOST}:1"), "/", &[]).unwrap().0, 421);
    drop(client);
    through.finish();
}

#[test]
fn an_upstream_that_does_not_verify_gets_nothing_and_the_client_a_502() {
    // A certificate by another CA; one for another name by the trusted CA.
    let trusted = TestCa::new("trusted");
    let stranger = TestCa::new("stranger");
    for (server, why) in [
        (stranger.server(HOST, &[H2, HTTP11]), "UnknownIssuer"),
        (
            trusted.server("else.test", &[H2, HTTP11]),
            "not valid for name",
        ),
    ] {
        let echo = Echo::start(server);
        let secrets = vec![secret_for(
            "GH",
            HOST,
            PLACEHOLDER,
            VALUE,
            Inject::Header {
                name: "authorization".into(),
                format: "token {}".into(),
            },
        )];
        let injector = Arc::new(Injector::with_roots(secrets, trusted.roots()).unwrap());
        for alpn in BOTH {
            let through = Through::start(injector.clone(), echo.addr, HOST);
            let mut client =
                Client::connect(through.addr, injector.ca_pem(), Some(HOST), &[alpn]).unwrap();
            let (status, body) = client.get(HOST, "/", &[]).unwrap();
            assert_eq!(status, 502, "{body}");
            assert!(
                body.contains("upstream certificate of api.test did not verify"),
                "{body}"
            );
            drop(client);
            let (_, events) = through.finish();
            let tls = of_kind(&events, NetEventKind::Tls);
            assert_eq!(tls.len(), 1, "{events:?}");
            assert!(!tls[0].allowed);
            assert!(tls[0].rule.contains(why), "{}", tls[0].rule);
            assert!(of_kind(&events, NetEventKind::Secret).is_empty());
        }
        assert!(
            echo.received.lock().unwrap().is_empty(),
            "nothing sent upstream"
        );
    }
}

#[test]
fn a_hello_without_the_hosts_name_is_refused() {
    let (echo, injector) = setup(
        vec![secret_for("GH", HOST, PLACEHOLDER, VALUE, in_named())],
        &[HTTP11],
    );
    for sni in [None, Some("other.test")] {
        let through = Through::start(injector.clone(), echo.addr, HOST);
        assert!(Client::connect(through.addr, injector.ca_pem(), sni, &[HTTP11]).is_err());
        let (_, events) = through.finish();
        let fronting = of_kind(&events, NetEventKind::Fronting);
        assert_eq!(fronting.len(), 1, "{events:?}");
        assert_eq!(fronting[0].sni.as_deref(), sni);
    }
    assert!(echo.received.lock().unwrap().is_empty());
}

#[test]
fn another_sessions_placeholder_is_not_replaced() {
    let a = secret_for(
        "GH",
        HOST,
        "ghp_airlockSESSIONa",
        "ghp_realVALUEofA",
        in_named(),
    );
    let b = secret_for(
        "GH",
        HOST,
        "ghp_airlockSESSIONb",
        "ghp_realVALUEofB",
        in_named(),
    );
    let ca = TestCa::new("upstream");
    let echo = Echo::start(ca.server(HOST, &[HTTP11]));
    let _session_a = Injector::with_roots(vec![a], ca.roots()).unwrap();
    let session_b = Arc::new(Injector::with_roots(vec![b], ca.roots()).unwrap());
    let through = Through::start(session_b.clone(), echo.addr, HOST);
    let mut client =
        Client::connect(through.addr, session_b.ca_pem(), Some(HOST), &[HTTP11]).unwrap();
    let (_, body) = client
        .get(HOST, "/", &[("authorization", "token ghp_airlockSESSIONa")])
        .unwrap();
    assert!(
        body.contains("authorization: token ghp_airlockSESSIONa\n"),
        "{body}"
    );
    assert!(!body.contains("realVALUE"), "{body}");
}

#[test]
fn connect_and_upgrades_inside_are_not_implemented() {
    let (echo, injector) = setup(
        vec![secret_for("GH", HOST, PLACEHOLDER, VALUE, in_named())],
        &[HTTP11],
    );
    let through = Through::start(injector.clone(), echo.addr, HOST);
    let mut client =
        Client::connect(through.addr, injector.ca_pem(), Some(HOST), &[HTTP11]).unwrap();
    let upgrade = [("upgrade", "websocket"), ("connection", "upgrade")];
    let (status, body) = client.get(HOST, "/socket", &upgrade).unwrap();
    assert_eq!(status, 501, "{body}");
    assert!(body.contains("upgrade to websocket"), "{body}");
    let (status, _, body) = client
        .send("CONNECT", HOST, "api.test:443", &[], Vec::new())
        .unwrap();
    assert_eq!(status, 501, "{body:?}");
    assert!(echo.received.lock().unwrap().is_empty());
    drop(client);
    let (_, events) = through.finish();
    let tunnels: Vec<&NetEvent> = events
        .iter()
        .filter(|e| e.kind == NetEventKind::Tunnel)
        .collect();
    assert_eq!(tunnels.len(), 2, "{events:?}");
    assert!(tunnels.iter().all(|e| !e.allowed), "{tunnels:?}");
}

#[test]
fn large_bodies_pass_intact_both_ways() {
    const SIZE: usize = 8 << 20;
    for alpn in BOTH {
        let (echo, injector) = setup(
            vec![secret_for("GH", HOST, PLACEHOLDER, VALUE, in_named())],
            &[H2, HTTP11],
        );
        let through = Through::start(injector.clone(), echo.addr, HOST);
        let mut client =
            Client::connect(through.addr, injector.ca_pem(), Some(HOST), &[alpn]).unwrap();
        let upload = pattern(SIZE);
        let want = format!("body: {SIZE} {:x}\n", hash(&upload, HASH_START));
        let (status, _, body) = client
            .send("POST", HOST, "/upload", &[("x", PLACEHOLDER)], upload)
            .unwrap();
        assert_eq!(status, 200);
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains(&want), "{body}");
        assert!(body.contains(VALUE), "{body}");
        let (status, _, body) = client
            .send("GET", HOST, &format!("/download/{SIZE}"), &[], Vec::new())
            .unwrap();
        assert_eq!(status, 200);
        assert_eq!(body.len(), SIZE);
        assert!(body[..] == pattern(SIZE)[..], "intact");
        drop(client);
        let (served, _) = through.finish();
        assert!(
            served.bytes_out > SIZE as u64 && served.bytes_in > SIZE as u64,
            "{served:?}"
        );
    }
}

#[test]
fn a_client_of_http2_only_reaches_a_server_of_http11_only() {
    let secrets = vec![secret_for("GH", HOST, PLACEHOLDER, VALUE, in_named())];
    let (echo, injector) = setup(secrets, &[HTTP11]);
    let through = Through::start(injector.clone(), echo.addr, HOST);
    let mut client = Client::connect(through.addr, injector.ca_pem(), Some(HOST), &[H2]).unwrap();
    assert_eq!(client.alpn.as_deref(), Some(H2));
    let authority = format!("{HOST}:{}", echo.addr.port());
    for _ in 0..3 {
        let (status, body) = client
            .get(&authority, "/x?y", &[("x-token", PLACEHOLDER)])
            .unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(body.starts_with("GET /x?y HTTP/1.1\n"), "{body}");
        assert!(body.contains(&format!("host: {authority}\n")), "{body}");
        assert!(body.contains(&format!("x-token: {VALUE}\n")), "{body}");
    }
}

#[test]
fn an_answer_is_passed_on_as_it_comes() {
    for alpn in BOTH {
        let secrets = vec![secret_for("GH", HOST, PLACEHOLDER, VALUE, in_named())];
        let (echo, injector) = setup(secrets, &[H2, HTTP11]);
        let through = Through::start(injector.clone(), echo.addr, HOST);
        let mut client =
            Client::connect(through.addr, injector.ca_pem(), Some(HOST), &[alpn]).unwrap();
        let (status, mut body) = client.stream(HOST, "/stream").unwrap();
        assert_eq!(status, 200);
        let wait = std::time::Duration::from_secs(5);
        // Its first part arrives while the server still holds the rest.
        assert_eq!(
            client.chunk(&mut body, wait).as_deref(),
            Some(&b"first\n"[..])
        );
        echo.release.notify_one();
        assert_eq!(
            client.chunk(&mut body, wait).as_deref(),
            Some(&b"second\n"[..])
        );
    }
}

#[test]
fn a_host_header_in_http2_must_name_the_host_too() {
    let secrets = vec![secret_for("GH", HOST, PLACEHOLDER, VALUE, in_named())];
    let (echo, injector) = setup(secrets, &[H2]);
    let through = Through::start(injector.clone(), echo.addr, HOST);
    let mut client = Client::connect(through.addr, injector.ca_pem(), Some(HOST), &[H2]).unwrap();
    let (status, body) = client.get(HOST, "/", &[("host", HOST)]).unwrap();
    assert_eq!(status, 200, "{body}");
    let (status, body) = client.get(HOST, "/", &[("host", "other.test")]).unwrap();
    assert_eq!(status, 421, "{body}");
    drop(client);
    let (_, events) = through.finish();
    assert_eq!(
        of_kind(&events, NetEventKind::Fronting).len(),
        1,
        "{events:?}"
    );
    assert_eq!(echo.received.lock().unwrap().len(), 1);
}

#[test]
fn a_target_that_cannot_be_passed_on_is_refused_without_the_value_in_the_answer() {
    // `OPTIONS *`: a query secret put in makes `*?access_token=VALUE`, which no request line
    // can carry; the gate's 502 must not say what it would have sent.
    let inject = Inject::Query {
        param: "access_token".into(),
    };
    let (echo, injector) = setup(
        vec![secret_for("Q", HOST, PLACEHOLDER, VALUE, inject)],
        &[HTTP11],
    );
    let through = Through::start(injector.clone(), echo.addr, HOST);
    let mut client =
        Client::connect(through.addr, injector.ca_pem(), Some(HOST), &[HTTP11]).unwrap();
    let authority = format!("{HOST}:{}", echo.addr.port());
    let (status, _, body) = client
        .send("OPTIONS", &authority, "*", &[], Vec::new())
        .unwrap();
    let body = String::from_utf8_lossy(&body);
    assert!(!body.contains("realVALUE"), "{status} {body}");
    drop(client);
    let (_, events) = through.finish();
    assert!(!json(&events).contains("realVALUE"), "{}", json(&events));
}

#[test]
fn raw_http11_tricks_reach_no_other_host() {
    let inject = Inject::Header {
        name: "Authorization".into(),
        format: "Bearer {}".into(),
    };
    // (sent, what the upstream may have received: request lines and Host headers)
    let cases: &[(&str, &[&str])] = &[
        // Both lengths: hyper reads it chunked and drops Content-Length, so no server reads the
        // smuggled request as its own.
        (
            "POST /a HTTP/1.1\r\nHost: api.test\r\nContent-Length: 48\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nGET /smuggled HTTP/1.1\r\nHost: evil.test\r\n\r\n",
            &["POST /a HTTP/1.1\nhost: api.test\ntransfer-encoding: chunked\n"],
        ),
        // Pipelined: the second is checked as any.
        (
            "GET /a HTTP/1.1\r\nHost: api.test\r\n\r\nGET /b HTTP/1.1\r\nHost: evil.test\r\n\r\n",
            &["GET /a HTTP/1.1\nhost: api.test\n"],
        ),
        ("GET /a HTTP/1.1\r\nHost: api.test.\r\n\r\n", &[]),
        ("GET /a HTTP/1.1\r\nHost: api.test\r\nHost: evil.test\r\n\r\n", &[]),
        ("GET http://evil.test/a HTTP/1.1\r\nHost: api.test\r\n\r\n", &[]),
        ("GET /a HTTP/1.0\r\n\r\n", &[]),
        (
            "GET /a HTTP/1.1\r\nHost: api.test\r\nTransfer-Encoding: chunked\r\nTransfer-Encoding: identity\r\n\r\n0\r\n\r\n",
            &[],
        ),
    ];
    for (sent, expected) in cases {
        let (echo, injector) = setup(
            vec![secret_for("GH", HOST, PLACEHOLDER, VALUE, inject.clone())],
            &[HTTP11],
        );
        let through = Through::start(injector.clone(), echo.addr, HOST);
        let answer = raw_exchange(through.addr, injector.ca_pem(), sent.as_bytes());
        let (_, events) = through.finish();
        let received = echo.received.lock().unwrap().clone();
        assert_eq!(received.len(), expected.len(), "{sent:?}: {received:?}");
        for (got, head) in received.iter().zip(expected.iter()) {
            let without_value = got.replace(&format!("authorization: Bearer {VALUE}\n"), "");
            assert_eq!(&without_value, head, "{sent:?}");
        }
        assert!(!answer.contains("evil.test/") && !json(&events).contains("realVALUE"));
    }
}

/// Placeholder mode, also in the headers these tests put the placeholder in.
fn in_named() -> Inject {
    Inject::Placeholder {
        headers: vec!["x".into(), "x-token".into()],
    }
}

mod reflect;
