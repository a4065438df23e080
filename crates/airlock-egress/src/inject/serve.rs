//! Serving one intercepted connection, on the relay's thread: the sandbox's TLS terminated,
//! the upstream one verified, then request by request (HTTP/1.1 or HTTP/2, as each side chose)
//! checked for its host, given its secrets and passed on, bodies streamed both ways.

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::combinators::BoxBody;
use http_body_util::{BodyExt, Full};
use hyper::body::{Body as _, Incoming};
use hyper::client::conn::{http1, http2};
use hyper::ext::ReasonPhrase;
use hyper::header::{
    HeaderMap, HeaderValue, CONNECTION, CONTENT_LENGTH, CONTENT_TYPE, HOST, TRANSFER_ENCODING,
};
use hyper::http::request::Parts;
use hyper::{Request, Response, StatusCode, Version};
use hyper_util::rt::{TokioExecutor, TokioIo};
use tokio::net::TcpStream;
use tokio::sync::mpsc::{unbounded_channel, UnboundedReceiver, UnboundedSender};
use tokio::sync::Notify;

use airlock_rules::http::{shown, takes_a_body};
use airlock_rules::HttpRules;

use super::request::{self, Put, Refused};
use super::secret::Secret;
use super::tls::{self, Client, Counts, H2, HTTP11};
use super::Injector;
use crate::gate::{json_string, NetEvent, NetEventKind};
use crate::rules::Decision;

/// How much went each way on the sandbox's side of a served connection (TLS bytes).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Served {
    pub bytes_out: u64,
    pub bytes_in: u64,
}

/// What a response's body is: the upstream's, streamed, or the gate's own words.
type Reply = BoxBody<Bytes, hyper::Error>;

/// Where a connection goes, for its events.
#[derive(Clone)]
struct Scene {
    host: String,
    port: u16,
    ip: Option<IpAddr>,
}

impl Scene {
    fn event(&self, kind: NetEventKind, allowed: bool, rule: String) -> NetEvent {
        NetEvent::new(kind, &Decision { allowed, rule }).about(
            Some(self.host.clone()),
            self.ip,
            Some(self.port),
        )
    }
}

/// The upstream end, as requests are sent on it.
enum Upstream {
    H1(tokio::sync::Mutex<http1::SendRequest<Incoming>>),
    H2(http2::SendRequest<Incoming>),
    /// Its certificate did not verify, or TLS failed otherwise (why): every request is
    /// answered 502, nothing sent.
    Unverified(String),
    /// TLS verified, then HTTP could not be set up on it (why).
    Failed(String),
}

/// One served connection's state, shared by its requests.
struct Connection {
    scene: Scene,
    secrets: Arc<[Secret]>,
    /// The host's `[[network.http]]` rules: every request is recorded, and let through only
    /// if they allow it.
    rules: Option<HttpRules>,
    upstream: Upstream,
    /// Events for the connection's own loop to log: requests may be served on other tasks.
    notes: UnboundedSender<NetEvent>,
    /// (kind, secret) already logged: once per connection each.
    logged: Mutex<HashSet<(NetEventKind, String)>>,
    /// Told when the connection must end (a request refused, the upstream gone).
    close: Arc<Notify>,
    /// A request named another host: the connection is ending, and requests that crossed
    /// its end (HTTP/2's GOAWAY takes a round trip) are refused too.
    misdirected: AtomicBool,
    /// A request was refused by `rules`: the connection is ending, and the requests that
    /// crossed its end are refused too.
    forbidden: AtomicBool,
}

impl Injector {
    /// Serve a connection the relay intercepted: `client` the sandbox's socket, of which
    /// `first` (its ClientHello) was read already; `upstream` connected to the destination;
    /// `host`:`port` what the sandbox connected to. Every event goes to `events`. Blocks
    /// until the connection ends (on a runtime of its own: not to be called from within a
    /// tokio runtime). The bytes counted are the TLS bytes on the sandbox's side.
    pub fn serve(
        &self,
        client: std::net::TcpStream,
        upstream: std::net::TcpStream,
        first: Vec<u8>,
        host: &str,
        port: u16,
        events: &dyn Fn(&NetEvent),
    ) -> Served {
        let scene = Scene {
            host: host.to_ascii_lowercase(),
            port,
            ip: upstream.peer_addr().ok().map(|a| a.ip()),
        };
        let counts = Arc::new(Counts::default());
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build();
        let Ok(runtime) = runtime else {
            events(&scene.event(
                NetEventKind::Tls,
                false,
                "cannot start serving the connection".into(),
            ));
            return Served::default();
        };
        runtime.block_on(async {
            let sockets = (
                into_tokio(client).map(|c| Client::new(first, c, counts.clone())),
                into_tokio(upstream),
            );
            if let (Ok(client), Ok(upstream)) = sockets {
                self.intercept(client, upstream, scene, events).await;
            }
        });
        Served {
            bytes_out: counts.from_client.load(Ordering::Relaxed),
            bytes_in: counts.to_client.load(Ordering::Relaxed),
        }
    }

    async fn intercept(
        &self,
        client: Client,
        upstream: TcpStream,
        scene: Scene,
        events: &dyn Fn(&NetEvent),
    ) {
        let acceptor = tokio_rustls::LazyConfigAcceptor::new(Default::default(), client);
        let Ok(start) = acceptor.await else {
            return; // not TLS after all, or gone
        };
        let hello = start.client_hello();
        let asked = hello.server_name().map(str::to_string);
        if !asked
            .as_deref()
            .is_some_and(|n| n.eq_ignore_ascii_case(&scene.host))
        {
            return events(&misnamed(&scene, asked));
        }
        let offered: Vec<Vec<u8>> = hello
            .alpn()
            .map(|protocols| protocols.map(<[u8]>::to_vec).collect())
            .unwrap_or_default();
        let upstream = self.reach(upstream, &scene.host, &offered).await;
        let chosen = match &upstream {
            Ok(upstream) => upstream.get_ref().1.alpn_protocol(),
            Err(why) => {
                events(&scene.event(NetEventKind::Tls, false, why.clone()));
                None
            }
        };
        let alpn = answerable(&offered, chosen);
        let config = self
            .ca
            .leaf(&scene.host)
            .and_then(|leaf| tls::terminating(leaf, alpn));
        let config = match config {
            Ok(config) => config,
            Err(why) => return events(&scene.event(NetEventKind::Tls, false, why)),
        };
        let Ok(client) = start.into_stream(config).await else {
            return; // the sandbox's client did not take the session CA's certificate
        };
        let close = Arc::new(Notify::new());
        let upstream = match upstream {
            Ok(upstream) => upstream_http(upstream, close.clone()).await,
            Err(why) => Upstream::Unverified(why),
        };
        let (notes, noted) = unbounded_channel();
        let connection = Connection {
            rules: self.http_rules(&scene.host).cloned(),
            scene,
            secrets: self.secrets.clone(),
            upstream,
            notes,
            logged: Mutex::new(HashSet::new()),
            close,
            misdirected: AtomicBool::new(false),
            forbidden: AtomicBool::new(false),
        };
        serve_requests(client, Arc::new(connection), noted, events).await;
    }
}

impl Injector {
    /// TLS to the destination, verified; offered what the client offered (of what the gate
    /// reads), so that both sides speak one protocol where they can. A client of HTTP/2 only
    /// may still reach a server of HTTP/1.1 only: hyper translates.
    async fn reach(
        &self,
        upstream: TcpStream,
        host: &str,
        offered: &[Vec<u8>],
    ) -> Result<tokio_rustls::client::TlsStream<TcpStream>, String> {
        let mut wanted: Vec<Vec<u8>> = [H2, HTTP11]
            .into_iter()
            .filter(|p| offered.iter().any(|o| o == p))
            .map(<[u8]>::to_vec)
            .collect();
        if wanted == [H2] {
            wanted.push(HTTP11.to_vec());
        }
        tls::connect_upstream(upstream, host, self.roots.clone(), wanted).await
    }
}

/// The event of a hello that did not name the connection's host.
fn misnamed(scene: &Scene, asked: Option<String>) -> NetEvent {
    let rule = format!(
        "connected to {} but asked for {}: refused (domain fronting)",
        scene.host,
        asked.as_deref().unwrap_or("no name")
    );
    let mut e = scene.event(NetEventKind::Fronting, false, rule);
    e.sni = asked;
    e
}

fn into_tokio(stream: std::net::TcpStream) -> std::io::Result<TcpStream> {
    stream.set_nonblocking(true)?;
    TcpStream::from_std(stream)
}

/// What the client's offer is answered with, once upstream chose `chosen`: the same where the
/// client offered it, so that both sides speak one protocol; else the client's best of HTTP/2
/// and HTTP/1.1 (hyper translates); none when it offered neither.
fn answerable(offered: &[Vec<u8>], chosen: Option<&[u8]>) -> Vec<Vec<u8>> {
    let offers = |p: &[u8]| offered.iter().any(|o| o == p);
    match chosen {
        Some(p) if offers(p) => vec![p.to_vec()],
        _ => [H2, HTTP11]
            .into_iter()
            .find(|p| offers(p))
            .map(|p| vec![p.to_vec()])
            .unwrap_or_default(),
    }
}

/// HTTP on the verified upstream connection, as its ALPN says; its driver closes the client's
/// connection too when it ends (the server closed it).
async fn upstream_http(
    upstream: tokio_rustls::client::TlsStream<TcpStream>,
    close: Arc<Notify>,
) -> Upstream {
    let h2 = upstream.get_ref().1.alpn_protocol() == Some(H2);
    let io = TokioIo::new(upstream);
    let failed =
        |e: hyper::Error| Upstream::Failed(format!("HTTP to the upstream server failed: {e}"));
    if h2 {
        match http2::handshake(TokioExecutor::new(), io).await {
            Ok((sender, driver)) => {
                tokio::spawn(async move {
                    let _ = driver.await;
                    close.notify_one();
                });
                Upstream::H2(sender)
            }
            Err(e) => failed(e),
        }
    } else {
        match http1::handshake(io).await {
            Ok((sender, driver)) => {
                tokio::spawn(async move {
                    let _ = driver.await;
                    close.notify_one();
                });
                Upstream::H1(tokio::sync::Mutex::new(sender))
            }
            Err(e) => failed(e),
        }
    }
}

/// Serve the client's requests until its connection ends (or is ended), logging the events
/// they note as they come.
async fn serve_requests(
    client: tokio_rustls::server::TlsStream<Client>,
    connection: Arc<Connection>,
    mut noted: UnboundedReceiver<NetEvent>,
    events: &dyn Fn(&NetEvent),
) {
    let builder = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
    let shared = connection.clone();
    let service = hyper::service::service_fn(move |request| handle(shared.clone(), request));
    let serving = builder.serve_connection(TokioIo::new(client), service);
    tokio::pin!(serving);
    let mut closing = false;
    loop {
        tokio::select! {
            _ = serving.as_mut() => break,
            () = connection.close.notified(), if !closing => {
                closing = true;
                serving.as_mut().graceful_shutdown();
            }
            Some(event) = noted.recv() => events(&event),
        }
    }
    while let Ok(event) = noted.try_recv() {
        events(&event);
    }
}

/// One request: checked, given its secrets, passed on; the answer streamed back.
async fn handle(
    connection: Arc<Connection>,
    request: Request<Incoming>,
) -> Result<Response<Reply>, Infallible> {
    let host = connection.scene.host.clone();
    let (mut parts, mut body) = request.into_parts();
    let unanswerable = match &connection.upstream {
        Upstream::Unverified(why) => Some(format!("{why}; nothing was sent to {host}")),
        Upstream::Failed(why) => Some(why.clone()),
        Upstream::H1(_) | Upstream::H2(_) => None,
    };
    if let Some(why) = unanswerable {
        connection.close.notify_one();
        return Ok(answer(StatusCode::BAD_GATEWAY, &why));
    }
    if connection.misdirected.load(Ordering::SeqCst) {
        let why = "an earlier request on this connection named another host; it is closed";
        return Ok(answer(StatusCode::MISDIRECTED_REQUEST, why));
    }
    if let Err(refused) = request::check(&parts, &host, connection.scene.port) {
        return Ok(connection.refuse(refused));
    }
    if let Some(forbidden) = connection.judge(&parts, &mut body).await {
        return Ok(forbidden);
    }
    let put = match request::inject(&mut parts, &connection.secrets, &host) {
        Ok(put) => put,
        Err(why) => return Ok(answer(StatusCode::BAD_GATEWAY, &why)),
    };
    connection.note(&put);
    match connection.send(parts, body).await {
        Ok(response) => Ok(connection.scrubbed(response)),
        Err(why) => Ok(answer(StatusCode::BAD_GATEWAY, &why)),
    }
}

impl Connection {
    fn log(&self, event: NetEvent) {
        let _ = self.notes.send(event);
    }

    /// A refused request's answer (and its event; a request for another host ends the
    /// connection).
    fn refuse(&self, refused: Refused) -> Response<Reply> {
        match refused {
            Refused::OtherHost { rule, asked } => {
                let mut e = self
                    .scene
                    .event(NetEventKind::Fronting, false, rule.clone());
                e.sni = asked;
                self.log(e);
                self.misdirected.store(true, Ordering::SeqCst);
                self.close.notify_one();
                answer(StatusCode::MISDIRECTED_REQUEST, &rule)
            }
            Refused::Tunnel(rule) => {
                // A refusal like any other: in the audit log with its reason.
                self.log(self.scene.event(NetEventKind::Tunnel, false, rule.clone()));
                answer(StatusCode::NOT_IMPLEMENTED, &rule)
            }
            Refused::Reflects(rule) => {
                self.log(self.scene.event(NetEventKind::Tunnel, false, rule.clone()));
                answer(StatusCode::METHOD_NOT_ALLOWED, &rule)
            }
        }
    }

    /// A request to a host with `[[network.http]]` rules: recorded (its method and path, never
    /// its query), and, unless they allow it, answered 403 and the connection closed (its body
    /// is not read: nothing after it on the connection is taken for a request). Where rules
    /// apply, the body of a method that takes none may be read to its end to see that it is
    /// empty ([`carries_body`]).
    async fn judge(&self, parts: &Parts, body: &mut Incoming) -> Option<Response<Reply>> {
        let rules = self.rules.as_ref()?;
        let method = parts.method.as_str();
        let path = parts.uri.path();
        let decision = if self.forbidden.load(Ordering::SeqCst) {
            Decision {
                allowed: false,
                rule: format!(
                    "{method} {}: refused, the connection is closing after an earlier refusal",
                    shown(path)
                ),
            }
        } else {
            let target = parts.uri.path_and_query().map_or(path, |p| p.as_str());
            let body =
                rules.allow.is_some() && !takes_a_body(method) && carries_body(parts, body).await;
            let headers = parts.headers.keys().map(|k| k.as_str());
            rules.decide_head(method, target, headers, body)
        };
        let mut e = self.scene.event(
            NetEventKind::Request,
            decision.allowed,
            decision.rule.clone(),
        );
        (e.method, e.path) = (Some(method.to_string()), Some(shown(path)));
        self.log(e);
        if decision.allowed {
            return None;
        }
        self.forbidden.store(true, Ordering::SeqCst);
        if parts.version == Version::HTTP_2 {
            drain(body).await;
        }
        self.close.notify_one();
        let head = parts.method == hyper::Method::HEAD;
        Some(forbidden(&rules.host, &decision.rule, head))
    }

    /// Log what putting the secrets in did, once per connection and secret.
    fn note(&self, put: &Put) {
        let host = &self.scene.host;
        let notes = put
            .injected
            .iter()
            .map(|name| {
                (
                    NetEventKind::Secret,
                    *name,
                    true,
                    format!("secret {name} injected for host {host}"),
                )
            })
            .chain(put.unreplaced.iter().map(|name| {
                let rule =
                    format!("placeholder of secret {name} sent to host {host}: not replaced");
                (NetEventKind::Placeholder, *name, false, rule)
            }));
        for (kind, name, allowed, rule) in notes {
            let first = self
                .logged
                .lock()
                .is_ok_and(|mut logged| logged.insert((kind, name.to_string())));
            if first {
                let mut e = self.scene.event(kind, allowed, rule);
                e.secret = Some(name.to_string());
                self.log(e);
            }
        }
    }

    /// The upstream's answer with every secret value for this host taken out of its headers
    /// and trailers (see [`request::scrub`]); what was found is logged.
    fn scrubbed(self: &Arc<Self>, response: Response<Incoming>) -> Response<Reply> {
        let (mut head, body) = response.into_parts();
        let found = request::scrub(&mut head.headers, &self.secrets, &self.scene.host);
        self.note_scrubbed(&found);
        // HTTP/1.1's reason phrase is passed on as the server wrote it (hyper keeps one that is
        // not the usual words): a server may put anything there, the request's values too.
        if let Some(reason) = head.extensions.remove::<ReasonPhrase>() {
            let mut carried = HeaderMap::new();
            if let Ok(value) = HeaderValue::from_bytes(reason.as_bytes()) {
                carried.insert(CONTENT_TYPE, value);
            }
            let found = request::scrub(&mut carried, &self.secrets, &self.scene.host);
            self.note_scrubbed(&found);
            // One that is no header value either is dropped: the status's usual words go.
            if let Some(reason) = carried
                .get(CONTENT_TYPE)
                .and_then(|v| ReasonPhrase::try_from(v.as_bytes()).ok())
            {
                head.extensions.insert(reason);
            }
        }
        let connection = self.clone();
        let body = body.map_frame(move |frame| match frame.into_trailers() {
            Ok(mut trailers) => {
                let found =
                    request::scrub(&mut trailers, &connection.secrets, &connection.scene.host);
                connection.note_scrubbed(&found);
                hyper::body::Frame::trailers(trailers)
            }
            Err(frame) => frame,
        });
        Response::from_parts(head, body.boxed())
    }

    /// Log that an answer carried a secret's value back, once per connection and secret.
    fn note_scrubbed(&self, found: &[&str]) {
        let host = &self.scene.host;
        for name in found {
            let first = self.logged.lock().is_ok_and(|mut logged| {
                logged.insert((NetEventKind::Placeholder, format!("scrubbed {name}")))
            });
            if first {
                let rule = format!("an answer of host {host} carried the value of secret {name} in a header: replaced by its placeholder");
                let mut e = self.scene.event(NetEventKind::Placeholder, false, rule);
                e.secret = Some(name.to_string());
                self.log(e);
            }
        }
    }

    /// Send the request upstream, in the form its protocol wants; its response (head).
    async fn send(&self, mut parts: Parts, body: Incoming) -> Result<Response<Incoming>, String> {
        let h2 = matches!(self.upstream, Upstream::H2(_));
        to_upstream_form(&mut parts, h2, &self.scene.host)?;
        let request = Request::from_parts(parts, body);
        let gone = |e: hyper::Error| format!("the upstream server did not answer: {e}");
        match &self.upstream {
            Upstream::H1(sender) => {
                let mut sender = sender.lock().await;
                sender.ready().await.map_err(gone)?;
                let response = sender.send_request(request);
                // The next request waits for this one's answer, not for its body.
                drop(sender);
                response.await.map_err(gone)
            }
            Upstream::H2(sender) => {
                let mut sender = sender.clone();
                sender.ready().await.map_err(gone)?;
                sender.send_request(request).await.map_err(gone)
            }
            Upstream::Unverified(why) | Upstream::Failed(why) => Err(why.clone()),
        }
    }
}

/// Does the request carry a body? A `Content-Length` other than 0 or any `Transfer-Encoding`
/// says so; else, where its stream has not ended with its head (HTTP/2 without END_STREAM),
/// its frames are read until one holds something (trailers too) or the stream ends: then the
/// body is an empty one, and goes on as none.
async fn carries_body(parts: &Parts, body: &mut Incoming) -> bool {
    let lengths = parts.headers.get_all(CONTENT_LENGTH).iter();
    if lengths.into_iter().any(|v| v.as_bytes() != b"0")
        || parts.headers.contains_key(TRANSFER_ENCODING)
    {
        return true;
    }
    while !body.is_end_stream() {
        match body.frame().await {
            None => break,
            Some(Ok(frame)) if frame.data_ref().is_some_and(Bytes::is_empty) => {}
            Some(_) => return true,
        }
    }
    false
}

/// Most of a refused HTTP/2 request's body a gate reads before it answers.
const DRAINED: usize = 1 << 20;

/// Read (and drop) what is left of a refused HTTP/2 request's body, within [`DRAINED`] bytes
/// and 2 s: HTTP/2 frames its bodies, so nothing in it is taken for a request, and the
/// connection that ends after the answer has no DATA frames unread at its close (the kernel
/// would answer them with a reset that can take the 403 with it). HTTP/1.1 bodies are never
/// read after a refusal: there, what follows a request's head may be read as another.
async fn drain(body: &mut Incoming) {
    let read = async {
        let mut seen = 0;
        while let Some(Ok(frame)) = body.frame().await {
            seen += frame.data_ref().map_or(0, Bytes::len);
            if seen > DRAINED {
                break;
            }
        }
    };
    let _ = tokio::time::timeout(std::time::Duration::from_secs(2), read).await;
}

/// HTTP/2 upstream: an absolute target (scheme and `:authority`), no Host header; HTTP/1.1:
/// origin form, with a Host header. Whichever the client spoke.
fn to_upstream_form(parts: &mut Parts, h2: bool, host: &str) -> Result<(), String> {
    let authority = parts
        .uri
        .authority()
        .map(|a| a.to_string())
        .or_else(|| {
            parts
                .headers
                .get(HOST)
                .and_then(|v| v.to_str().ok())
                .map(str::to_string)
        })
        .unwrap_or_else(|| host.to_string());
    let target = parts
        .uri
        .path_and_query()
        .map_or("/", |p| p.as_str())
        .to_string();
    let bad = |_| format!("the request's target {target} cannot be passed on");
    if h2 {
        parts.uri = format!("https://{authority}{target}")
            .parse()
            .map_err(bad)?;
        parts.headers.remove(HOST);
        parts.version = Version::HTTP_2;
    } else {
        parts.uri = target.parse().map_err(bad)?;
        if !parts.headers.contains_key(HOST) {
            let value = HeaderValue::from_str(&authority)
                .map_err(|_| format!("{authority} is no Host header"))?;
            parts.headers.insert(HOST, value);
        }
        parts.version = Version::HTTP_11;
    }
    Ok(())
}

/// A request `[[network.http]]` refused: 403, and why as JSON (the rule set, the rule; no
/// body for a HEAD, which HTTP/2 would otherwise send). The connection is not kept.
fn forbidden(host: &str, rule: &str, head: bool) -> Response<Reply> {
    let body = if head {
        String::new()
    } else {
        format!(
            "{{\"error\":\"refused by airlock\",\"rules\":{},\"rule\":{}}}\n",
            json_string(&format!("[[network.http]] for {host}")),
            json_string(rule)
        )
    };
    let mut response = Response::new(
        Full::new(Bytes::from(body))
            .map_err(|never| match never {})
            .boxed(),
    );
    *response.status_mut() = StatusCode::FORBIDDEN;
    let headers = response.headers_mut();
    headers.insert(CONTENT_TYPE, HeaderValue::from_static("application/json"));
    headers.insert(CONNECTION, HeaderValue::from_static("close"));
    response
}

/// The gate's own answer: `status`, and `why` as its text body. The connection is not kept.
fn answer(status: StatusCode, why: &str) -> Response<Reply> {
    let body = Full::new(Bytes::from(format!("airlock: {why}\n")))
        .map_err(|never| match never {})
        .boxed();
    let mut response = Response::new(body);
    *response.status_mut() = status;
    let headers = response.headers_mut();
    headers.insert(
        CONTENT_TYPE,
        HeaderValue::from_static("text/plain; charset=utf-8"),
    );
    // A refused tunnel or TRACE leaves nothing unread on the connection: it can be kept.
    if status != StatusCode::NOT_IMPLEMENTED && status != StatusCode::METHOD_NOT_ALLOWED {
        headers.insert(CONNECTION, HeaderValue::from_static("close"));
    }
    response
}
