//! `[[network.http]]` rules on intercepted connections, over loopback: what they allow reaches
//! the server, anything else is answered 403 and recorded; the same requests without rules
//! reach it (so that none of these passes for want of an attack).

use std::io::Read as _;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use airlock_rules::{HttpRules, RequestRule};
use rustls::RootCertStore;

use super::testing::{raw_exchange, Client, Echo, TestCa, H2, HTTP11};
use super::{Inject, Injector, Secret, SessionCa};
use crate::gate::{NetEvent, NetEventKind};

const HOST: &str = "api.test";
const PLACEHOLDER: &str = "ghp_airlockPLACEHOLDER";
const VALUE: &str = "ghp_realVALUEthatmustnotshow";
const ALLOW: [&str; 2] = ["GET /repos/acme/*", "POST /repos/acme/*/issues"];

fn rules(allow: &[&str]) -> HttpRules {
    HttpRules {
        host: HOST.into(),
        allow: Some(
            allow
                .iter()
                .map(|r| RequestRule::parse(r).unwrap())
                .collect(),
        ),
    }
}

fn secret() -> Secret {
    Secret {
        name: "GH".into(),
        hosts: vec![HOST.into()],
        placeholder: PLACEHOLDER.into(),
        value: zeroize::Zeroizing::new(VALUE.into()),
        inject: Inject::Header {
            name: "Authorization".into(),
            format: "Bearer {}".into(),
        },
    }
}

/// An echo server for `HOST`, and an injector with `secrets` and `http`, trusting its CA.
fn setup(secrets: Vec<Secret>, http: Vec<HttpRules>) -> (Echo, Arc<Injector>) {
    let upstream = TestCa::new("upstream test CA");
    let echo = Echo::start(upstream.server(HOST, &[H2, HTTP11]));
    let ca = SessionCa::new(&[HOST.to_string()]).unwrap();
    let injector = Injector::with_ca_and_roots(ca, secrets, upstream.roots())
        .unwrap()
        .with_http(http)
        .unwrap();
    (echo, Arc::new(injector))
}

/// One intercepted connection served as the relay would, its events gathered.
fn through(injector: &Arc<Injector>, upstream: SocketAddr) -> (SocketAddr, Finish) {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    let events = Arc::new(Mutex::new(Vec::new()));
    let logged = events.clone();
    let injector = injector.clone();
    let done = std::thread::spawn(move || {
        let (mut client, _) = listener.accept().unwrap();
        let mut first = Vec::new();
        let mut chunk = [0u8; 4096];
        while crate::sni::peek(&first) == crate::sni::Peek::NeedMore {
            let n = client.read(&mut chunk).unwrap();
            assert!(n > 0, "closed before its hello");
            first.extend_from_slice(&chunk[..n]);
        }
        let upstream_socket = TcpStream::connect(upstream).unwrap();
        let log = |e: &NetEvent| logged.lock().unwrap().push(e.clone());
        injector.serve(client, upstream_socket, first, HOST, upstream.port(), &log);
    });
    (addr, Finish { done, events })
}

struct Finish {
    done: std::thread::JoinHandle<()>,
    events: Arc<Mutex<Vec<NetEvent>>>,
}

impl Finish {
    fn events(self) -> Vec<NetEvent> {
        self.done.join().unwrap();
        self.events.lock().unwrap().clone()
    }
}

fn requests(events: &[NetEvent]) -> Vec<&NetEvent> {
    events
        .iter()
        .filter(|e| e.kind == NetEventKind::Request)
        .collect()
}

fn request_lines(echo: &Echo) -> Vec<String> {
    echo.received
        .lock()
        .unwrap()
        .iter()
        .map(|head| head.lines().next().unwrap_or_default().to_string())
        .collect()
}

/// Requests the rules refuse: another method, another path, and paths that a server could
/// read as one under `/repos/acme/` or out of it (Jetty reads `/repos/acme/;` as
/// `/repos/acme/`, Tomcat and Spring `/repos/acme/;x/issues` as `/repos/acme/issues`; IIS
/// drops a segment's trailing space, servers that normalize Unicode read `．．` as `..`).
const REFUSED: [(&str, &str); 12] = [
    ("DELETE", "/repos/acme/widgets"),
    ("GET", "/repos/other/widgets"),
    ("GET", "/repos/acme/widgets/../../other/x"),
    ("GET", "/repos/acme/%2e%2e/other"),
    ("GET", "/repos/acme/..;/other"),
    ("GET", "/repos/acme/a%2f..%2f..%2fother"),
    ("GET", "/repos/acme//widgets"),
    ("POST", "/repos/acme/widgets/issues/../../../other/issues"),
    ("GET", "/repos/acme/;"),
    ("POST", "/repos/acme/;jsessionid=1/issues"),
    ("POST", "/repos/acme/..%20/issues"),
    ("POST", "/repos/acme/%EF%BC%8E%EF%BC%8E/issues"),
];

#[test]
fn rules_let_through_only_what_they_allow_and_the_rest_gets_403() {
    for alpn in [HTTP11, H2] {
        let (echo, injector) = setup(vec![secret()], vec![rules(&ALLOW)]);
        let (addr, finish) = through(&injector, echo.addr);
        let mut client = Client::connect(addr, injector.ca_pem(), Some(HOST), &[alpn]).unwrap();
        let (status, body) = client
            .get(HOST, "/repos/acme/widgets?access=x", &[])
            .unwrap();
        assert_eq!(status, 200, "{body}");
        assert!(
            body.contains(&format!("authorization: Bearer {VALUE}")),
            "{body}"
        );
        let (status, _, _) = client
            .send(
                "POST",
                HOST,
                "/repos/acme/widgets/issues",
                &[],
                b"{}".to_vec(),
            )
            .unwrap();
        assert_eq!(status, 200);
        // A second request on the kept-alive connection that breaks them: 403, and closed.
        let (status, headers, body) = client
            .send("DELETE", HOST, "/repos/acme/widgets", &[], Vec::new())
            .unwrap();
        assert_eq!(status, 403);
        assert_eq!(headers["content-type"], "application/json");
        let body = String::from_utf8_lossy(&body);
        assert_eq!(
            body,
            "{\"error\":\"refused by airlock\",\"rules\":\"[[network.http]] for api.test\",\"rule\":\"DELETE /repos/acme/widgets: no rule of [[network.http]] for api.test allows it\"}\n"
        );
        // Closed (HTTP/2: a request that crossed the server's GOAWAY is refused too).
        let after = client.get(HOST, "/repos/acme/widgets", &[]);
        assert!(after.as_ref().map_or(true, |(s, _)| *s == 403), "{after:?}");
        drop(client);
        let events = finish.events();
        let seen: Vec<(bool, Option<&str>, Option<&str>)> = requests(&events)[..3]
            .iter()
            .map(|e| (e.allowed, e.method.as_deref(), e.path.as_deref()))
            .collect();
        assert_eq!(
            seen,
            [
                (true, Some("GET"), Some("/repos/acme/widgets")),
                (true, Some("POST"), Some("/repos/acme/widgets/issues")),
                (false, Some("DELETE"), Some("/repos/acme/widgets")),
            ],
            "{events:?}"
        );
        let json: String = events
            .iter()
            .map(|e| serde_json::to_string(e).unwrap())
            .collect();
        assert!(
            !json.contains("realVALUE") && !json.contains("access=x"),
            "{json}"
        );
        assert_eq!(request_lines(&echo).len(), 2, "{:?}", request_lines(&echo));

        // Each refused request, on a connection of its own.
        for (method, path) in REFUSED {
            let (addr, finish) = through(&injector, echo.addr);
            let mut client = Client::connect(addr, injector.ca_pem(), Some(HOST), &[alpn]).unwrap();
            let (status, _, body) = client
                .send(method, HOST, path, &[], Vec::new())
                .unwrap_or_else(|e| panic!("{alpn:?} {method} {path}: {e}"));
            assert_eq!(status, 403, "{method} {path}: {body:?}");
            drop(client);
            let events = finish.events();
            let refused = requests(&events);
            assert_eq!(refused.len(), 1, "{events:?}");
            assert!(!refused[0].allowed);
            assert_eq!(refused[0].method.as_deref(), Some(method));
            assert_eq!(refused[0].path.as_deref(), Some(path));
        }
        assert_eq!(request_lines(&echo).len(), 2, "{:?}", request_lines(&echo));
    }
}

#[test]
fn without_rules_the_same_requests_reach_the_server() {
    for alpn in [HTTP11, H2] {
        let (echo, injector) = setup(vec![secret()], Vec::new());
        for (method, path) in REFUSED {
            let (addr, finish) = through(&injector, echo.addr);
            let mut client = Client::connect(addr, injector.ca_pem(), Some(HOST), &[alpn]).unwrap();
            let (status, _, _) = client
                .send(method, HOST, path, &[], Vec::new())
                .unwrap_or_else(|e| panic!("{alpn:?} {method} {path}: {e}"));
            assert_eq!(status, 200, "{method} {path}");
            drop(client);
            assert!(requests(&finish.events()).is_empty());
        }
        let lines = request_lines(&echo);
        assert_eq!(lines.len(), REFUSED.len(), "{lines:?}");
        for (line, (method, path)) in lines.iter().zip(REFUSED) {
            // HTTP/2 upstream: the target in absolute form.
            let target = line.split(' ').nth(1).unwrap_or_default();
            assert!(line.starts_with(&format!("{method} ")), "{line}");
            assert!(
                [path.to_string(), format!("https://{HOST}{path}")].contains(&target.to_string()),
                "{line}"
            );
        }
    }
}

#[test]
fn a_host_inspected_without_rules_has_every_request_recorded() {
    let inspected = HttpRules {
        host: HOST.into(),
        allow: None,
    };
    let (echo, injector) = setup(Vec::new(), vec![inspected]);
    assert!(injector.intercepts(HOST) && !injector.intercepts("other.test"));
    let (addr, finish) = through(&injector, echo.addr);
    let mut client = Client::connect(addr, injector.ca_pem(), Some(HOST), &[HTTP11]).unwrap();
    for path in ["/a?secret=1", "/b/../c"] {
        assert_eq!(client.get(HOST, path, &[]).unwrap().0, 200);
    }
    drop(client);
    let events = finish.events();
    let recorded = requests(&events);
    assert_eq!(recorded.len(), 2, "{events:?}");
    assert!(recorded.iter().all(|e| e.allowed));
    assert_eq!(
        recorded[0].rule,
        "GET /a: inspected (api.test has no rules)"
    );
    assert_eq!(request_lines(&echo).len(), 2);
}

#[test]
fn http2_unannounced_by_alpn_is_held_to_the_rules_too() {
    let (echo, injector) = setup(Vec::new(), vec![rules(&ALLOW)]);
    let (addr, finish) = through(&injector, echo.addr);
    let mut client = Client::connect_h2_unannounced(addr, injector.ca_pem(), Some(HOST)).unwrap();
    assert_eq!(client.alpn, None);
    let (status, body) = client.get(HOST, "/repos/acme/widgets", &[]).unwrap();
    assert_eq!(status, 200, "{body}");
    assert!(
        body.starts_with("GET /repos/acme/widgets HTTP/1.1"),
        "{body}"
    );
    let (status, _) = client.get(HOST, "/repos/acme/%2E%2E/x", &[]).unwrap();
    assert_eq!(status, 403);
    drop(client);
    assert_eq!(requests(&finish.events()).len(), 2);
    assert_eq!(request_lines(&echo).len(), 1);
}

#[test]
fn raw_http11_tricks_get_nothing_past_the_rules() {
    // (sent, the request lines the server may have received); every other request is refused
    // with a 403, but for the smuggled one, which hyper never reads as a request.
    let cases: &[(&str, &[&str])] = &[
        // Pipelined: the second is judged as any.
        (
            "GET /repos/acme/x HTTP/1.1\r\nHost: api.test\r\n\r\nDELETE /repos/acme/x HTTP/1.1\r\nHost: api.test\r\n\r\n",
            &["GET /repos/acme/x HTTP/1.1"],
        ),
        // Smuggled in a body both lengths frame: hyper reads it chunked and closes the
        // connection after its answer, so what follows is never read.
        (
            "POST /repos/acme/x/issues HTTP/1.1\r\nHost: api.test\r\nContent-Length: 54\r\nTransfer-Encoding: chunked\r\n\r\n0\r\n\r\nDELETE /repos/acme/x HTTP/1.1\r\nHost: api.test\r\n\r\n",
            &["POST /repos/acme/x/issues HTTP/1.1"],
        ),
        // A refused request with a body, then one that would be allowed: the body is not read
        // as a request, and the connection ends with the 403.
        (
            "POST /repos/other/x HTTP/1.1\r\nHost: api.test\r\nContent-Length: 46\r\n\r\nGET /repos/acme/y HTTP/1.1\r\nHost: api.test\r\n\r\n",
            &[],
        ),
        ("GET https://api.test/repos/other/x HTTP/1.1\r\nHost: api.test\r\n\r\n", &[]),
        ("GET https://api.test/repos/acme/%2e%2e/x HTTP/1.1\r\nHost: api.test\r\n\r\n", &[]),
        ("GET /repos/acme/x\\..\\..\\other HTTP/1.1\r\nHost: api.test\r\n\r\n", &[]),
        ("GET /repos/acme/..%2Fother HTTP/1.1\r\nHost: api.test\r\n\r\n", &[]),
        ("GET /repos/acme/.%2E/other HTTP/1.1\r\nHost: api.test\r\n\r\n", &[]),
        ("get /repos/acme/x HTTP/1.1\r\nHost: api.test\r\n\r\n", &[]),
        ("HEAD /repos/acme/x HTTP/1.1\r\nHost: api.test\r\n\r\n", &[]),
        ("OPTIONS * HTTP/1.1\r\nHost: api.test\r\n\r\n", &[]),
        ("GET //repos/acme/x HTTP/1.1\r\nHost: api.test\r\n\r\n", &[]),
    ];
    for (sent, expected) in cases {
        let (echo, injector) = setup(Vec::new(), vec![rules(&ALLOW)]);
        let (addr, finish) = through(&injector, echo.addr);
        let answer = raw_exchange(addr, injector.ca_pem(), sent.as_bytes());
        let events = finish.events();
        assert_eq!(
            &request_lines(&echo),
            expected,
            "{sent:?}: {answer} {events:?}"
        );
        let smuggled = sent.contains("Transfer-Encoding");
        let refused = requests(&events).into_iter().filter(|e| !e.allowed).count();
        assert_eq!(refused, usize::from(!smuggled), "{sent:?}: {events:?}");
        assert_eq!(
            answer.contains("HTTP/1.1 403 Forbidden"),
            !smuggled,
            "{sent:?}: {answer}"
        );
    }
}

#[test]
fn a_method_named_by_a_header_or_the_query_is_refused_where_rules_apply() {
    let override_header = [("x-http-method-override", "DELETE")];
    let underscores = [("x_http_method_override", "DELETE")];
    let original_url = [("x-original-url", "/admin/everything")];
    let rewrite_url = [("X-Rewrite-URL", "/admin/everything")];
    let cases = [
        ("/repos/acme/x/issues", &override_header[..]),
        ("/repos/acme/x/issues", &underscores[..]),
        ("/repos/acme/x/issues", &original_url[..]),
        ("/repos/acme/x/issues", &rewrite_url[..]),
        ("/repos/acme/x/issues?_method=DELETE", &[][..]),
        ("/repos/acme/x/issues?.method=DELETE", &[][..]),
        ("/repos/acme/x/issues?+_method=DELETE", &[][..]),
        ("/repos/acme/x/issues?%20_method=DELETE", &[][..]),
        ("/repos/acme/x/issues?a=1;_method=DELETE", &[][..]),
        ("/repos/acme/x/issues?_HttpMethod=DELETE", &[][..]),
    ];
    for (http, reached) in [(vec![rules(&ALLOW)], false), (Vec::new(), true)] {
        let (echo, injector) = setup(Vec::new(), http);
        for (target, headers) in cases {
            let (addr, finish) = through(&injector, echo.addr);
            let mut client =
                Client::connect(addr, injector.ca_pem(), Some(HOST), &[HTTP11]).unwrap();
            let (status, _, _) = client
                .send("POST", HOST, target, headers, b"{}".to_vec())
                .unwrap();
            assert_eq!(status, if reached { 200 } else { 403 }, "{target}");
            drop(client);
            finish.events();
        }
        let reaching = if reached { cases.len() } else { 0 };
        assert_eq!(request_lines(&echo).len(), reaching);
    }
}

/// An HTTPS server of HTTP/1.1 that reads a body only with the methods it expects one with,
/// as Python's BaseHTTPRequestHandler does: what follows a GET's head on the connection is the
/// next request to it. The request lines it read; it answers each 200.
struct Lax {
    addr: SocketAddr,
    received: Arc<Mutex<Vec<String>>>,
}

impl Lax {
    fn start() -> (Lax, RootCertStore) {
        use std::io::{BufRead as _, BufReader, Write as _};
        let ca = TestCa::new("lax test CA");
        let config = ca.server(HOST, &[HTTP11]);
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = received.clone();
        std::thread::spawn(move || {
            for tcp in listener.incoming() {
                let Ok(tcp) = tcp else { return };
                let (config, log) = (config.clone(), log.clone());
                std::thread::spawn(move || {
                    let tls = rustls::ServerConnection::new(config).unwrap();
                    let mut stream = BufReader::new(rustls::StreamOwned::new(tls, tcp));
                    loop {
                        let mut line = String::new();
                        if stream.read_line(&mut line).unwrap_or(0) == 0 {
                            return;
                        }
                        let request = line.trim_end().to_string();
                        let mut length = 0;
                        loop {
                            let mut header = String::new();
                            if stream.read_line(&mut header).unwrap_or(0) == 0 {
                                return;
                            }
                            if header.trim_end().is_empty() {
                                break;
                            }
                            if let Some((name, value)) = header.split_once(':') {
                                if name.eq_ignore_ascii_case("content-length") {
                                    length = value.trim().parse().unwrap_or(0);
                                }
                            }
                        }
                        if ["POST ", "PUT ", "PATCH "]
                            .iter()
                            .any(|m| request.starts_with(m))
                        {
                            let mut body = vec![0; length];
                            if stream.read_exact(&mut body).is_err() {
                                return;
                            }
                        }
                        log.lock().unwrap().push(request);
                        let answer = b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nok\n";
                        if stream.get_mut().write_all(answer).is_err() {
                            return;
                        }
                        let _ = stream.get_mut().flush();
                    }
                });
            }
        });
        (Lax { addr, received }, ca.roots())
    }

    /// The request lines read, once `count` of them were or 3 s passed.
    fn received(&self, count: usize) -> Vec<String> {
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(3);
        while self.received.lock().unwrap().len() < count && std::time::Instant::now() < deadline {
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
        self.received.lock().unwrap().clone()
    }
}

/// A second request in the body of a GET, for a server that leaves a GET's body unread.
const SMUGGLED: &str =
    "DELETE /admin/everything HTTP/1.1\r\nHost: api.test\r\nContent-Length: 0\r\n\r\n";

#[test]
fn a_body_on_a_method_without_one_is_refused_where_rules_apply() {
    let smuggling = format!(
        "GET /repos/acme/x HTTP/1.1\r\nHost: api.test\r\nContent-Length: {}\r\n\r\n{SMUGGLED}",
        SMUGGLED.len()
    );
    for (http, reached) in [(vec![rules(&ALLOW)], false), (Vec::new(), true)] {
        // HTTP/1.1, then HTTP/2 (a DATA frame, with a content-length and without one), each on
        // a connection of its own, to an HTTP/1.1 server.
        for case in 0..3 {
            let (lax, roots) = Lax::start();
            let ca = SessionCa::new(&[HOST.to_string()]).unwrap();
            let injector = Injector::with_ca_and_roots(ca, vec![secret()], roots)
                .unwrap()
                .with_http(http.clone())
                .unwrap();
            let injector = Arc::new(injector);
            let (addr, finish) = through(&injector, lax.addr);
            let status = if case == 0 {
                let answer = raw_exchange(addr, injector.ca_pem(), smuggling.as_bytes());
                answer.split(' ').nth(1).unwrap_or_default().to_string()
            } else {
                let mut client =
                    Client::connect(addr, injector.ca_pem(), Some(HOST), &[H2]).unwrap();
                let body = SMUGGLED.as_bytes().to_vec();
                let answer = if case == 1 {
                    client.send("GET", HOST, "/repos/acme/x", &[], body)
                } else {
                    client.send_unsized("GET", HOST, "/repos/acme/x", body)
                };
                answer.map_or_else(|e| e, |(status, _, _)| status.as_str().to_string())
            };
            let events = finish.events();
            if reached {
                assert_eq!(status, "200", "case {case}");
                // Without a length, the body goes on chunked: no request the server reads.
                if case != 2 {
                    let received = lax.received(2);
                    assert_eq!(
                        received,
                        [
                            "GET /repos/acme/x HTTP/1.1",
                            "DELETE /admin/everything HTTP/1.1"
                        ],
                        "case {case}"
                    );
                }
            } else {
                assert_eq!(status, "403", "case {case}: {events:?}");
                assert!(lax.received(1).is_empty(), "case {case}");
                let refused = requests(&events);
                assert_eq!(refused.len(), 1, "{events:?}");
                assert!(!refused[0].allowed && refused[0].rule.contains("a body on a GET"));
            }
        }
    }
}

#[test]
fn an_empty_body_on_a_method_without_one_goes_on() {
    let (echo, injector) = setup(Vec::new(), vec![rules(&["GET /repos/acme/*"])]);
    let (addr, finish) = through(&injector, echo.addr);
    let mut client = Client::connect(addr, injector.ca_pem(), Some(HOST), &[H2]).unwrap();
    // HEADERS without END_STREAM, then an empty DATA frame that ends the stream.
    let (status, _, _) = client
        .send_unsized("GET", HOST, "/repos/acme/x", Vec::new())
        .unwrap();
    assert_eq!(status, 200);
    let (status, _, _) = client
        .send(
            "GET",
            HOST,
            "/repos/acme/y",
            &[("content-length", "0")],
            Vec::new(),
        )
        .unwrap();
    assert_eq!(status, 200);
    drop(client);
    finish.events();
    assert_eq!(request_lines(&echo).len(), 2);
    let raw = "GET /repos/acme/z HTTP/1.1\r\nHost: api.test\r\nContent-Length: 0\r\n\r\n";
    let (addr, finish) = through(&injector, echo.addr);
    let answer = raw_exchange(addr, injector.ca_pem(), raw.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    finish.events();
}

#[test]
fn a_double_star_never_reaches_the_path_it_is_under() {
    // On GitHub, DELETE /repos/acme/widget deletes the repository.
    let under = rules(&["DELETE /repos/acme/widget/**"]);
    for (http, reached) in [(vec![under], false), (Vec::new(), true)] {
        let (echo, injector) = setup(vec![secret()], http);
        for path in ["/repos/acme/widget", "/repos/acme/widget/"] {
            let (addr, finish) = through(&injector, echo.addr);
            let mut client = Client::connect(addr, injector.ca_pem(), Some(HOST), &[H2]).unwrap();
            let (status, _, _) = client.send("DELETE", HOST, path, &[], Vec::new()).unwrap();
            assert_eq!(status, if reached { 200 } else { 403 }, "{path}");
            drop(client);
            finish.events();
        }
        assert_eq!(request_lines(&echo).len(), if reached { 2 } else { 0 });
    }
}

#[test]
fn a_fragment_is_cut_from_the_target_before_the_rules_see_it() {
    // What docs/network.md says: the request line is cut at `#` when it is read, so what is
    // matched is what goes on.
    let (echo, injector) = setup(Vec::new(), vec![rules(&ALLOW)]);
    let (addr, finish) = through(&injector, echo.addr);
    let sent =
        "GET /repos/acme/x#/../../other HTTP/1.1\r\nHost: api.test\r\nConnection: close\r\n\r\n";
    let answer = raw_exchange(addr, injector.ca_pem(), sent.as_bytes());
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    let events = finish.events();
    assert_eq!(
        request_lines(&echo),
        ["GET /repos/acme/x HTTP/1.1"],
        "{events:?}"
    );
    assert_eq!(requests(&events)[0].path.as_deref(), Some("/repos/acme/x"));
}
