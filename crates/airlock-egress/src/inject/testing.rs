//! Test helpers for intercepted connections, over loopback: a test CA, an HTTPS echo server
//! with a certificate of it (it answers with what it received), and a client (rustls and
//! hyper, HTTP/1.1 or HTTP/2) trusting a given CA.

use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::body::Incoming;
use hyper::client::conn::{http1, http2};
use hyper::{HeaderMap, Request, Response, StatusCode};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rcgen::{BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer, ServerName};
use rustls::{ClientConfig, RootCertStore, ServerConfig};

pub(crate) const H2: &[u8] = b"h2";
pub(crate) const HTTP11: &[u8] = b"http/1.1";

fn provider() -> Arc<rustls::crypto::CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// A CA of a test's own, as a real upstream's would be.
pub(crate) struct TestCa {
    issuer: Issuer<'static, KeyPair>,
    der: CertificateDer<'static>,
    pub(crate) pem: String,
}

impl TestCa {
    pub(crate) fn new(name: &str) -> TestCa {
        let key = KeyPair::generate().unwrap();
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, name);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let cert = params.self_signed(&key).unwrap();
        TestCa {
            der: cert.der().clone(),
            pem: cert.pem(),
            issuer: Issuer::new(params, key),
        }
    }

    pub(crate) fn roots(&self) -> RootCertStore {
        let mut roots = RootCertStore::empty();
        roots.add(self.der.clone()).unwrap();
        roots
    }

    /// TLS settings of a server that is `name`, by this CA, offering `alpn`.
    pub(crate) fn server(&self, name: &str, alpn: &[&[u8]]) -> Arc<ServerConfig> {
        let key = KeyPair::generate().unwrap();
        let params = CertificateParams::new(vec![name.to_string()]).unwrap();
        let cert = params.signed_by(&key, &self.issuer).unwrap();
        let private = PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der()));
        let mut config = ServerConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(vec![cert.der().clone()], private)
            .unwrap();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        Arc::new(config)
    }
}

/// An HTTPS server answering every request with what it received: the request line, the
/// headers, and the body's length and hash. Under `/reflect`, each request header `NAME` comes
/// back as the response header `echo-NAME` too, and `/reflect/redirect…` is a 301 to `/dir…/`
/// keeping the query.
/// `GET /download/N` answers N bytes instead.
pub(crate) struct Echo {
    pub(crate) addr: SocketAddr,
    /// Each request's head as it arrived.
    pub(crate) received: Arc<Mutex<Vec<String>>>,
    /// `GET /stream` answers a first chunk, and its second only once this is told.
    pub(crate) release: Arc<tokio::sync::Notify>,
}

impl Echo {
    pub(crate) fn start(config: Arc<ServerConfig>) -> Echo {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        listener.set_nonblocking(true).unwrap();
        let received = Arc::new(Mutex::new(Vec::new()));
        let log = received.clone();
        let release = Arc::new(tokio::sync::Notify::new());
        let released = release.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            runtime.block_on(async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let acceptor = tokio_rustls::TlsAcceptor::from(config);
                while let Ok((tcp, _)) = listener.accept().await {
                    let (acceptor, log) = (acceptor.clone(), log.clone());
                    let released = released.clone();
                    tokio::spawn(async move {
                        let Ok(tls) = acceptor.accept(tcp).await else {
                            return;
                        };
                        let service = hyper::service::service_fn(move |request| {
                            echo(request, log.clone(), released.clone())
                        });
                        let builder =
                            hyper_util::server::conn::auto::Builder::new(TokioExecutor::new());
                        let _ = builder.serve_connection(TokioIo::new(tls), service).await;
                    });
                }
            });
        });
        Echo {
            addr,
            received,
            release,
        }
    }
}

/// FNV-1a, to compare large bodies without keeping them.
pub(crate) fn hash(bytes: &[u8], mut state: u64) -> u64 {
    for &b in bytes {
        state = (state ^ u64::from(b)).wrapping_mul(0x100_0000_01b3);
    }
    state
}
pub(crate) const HASH_START: u64 = 0xcbf2_9ce4_8422_2325;

/// A body whose chunks come from a channel, as they are sent.
struct Chunks(tokio::sync::mpsc::Receiver<Bytes>);

impl hyper::body::Body for Chunks {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|b| Ok(hyper::body::Frame::data(b))))
    }
}

/// A body of given frames: data, then trailers.
struct Frames(std::collections::VecDeque<hyper::body::Frame<Bytes>>);

impl hyper::body::Body for Frames {
    type Data = Bytes;
    type Error = Infallible;
    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<hyper::body::Frame<Bytes>, Infallible>>> {
        std::task::Poll::Ready(self.0.pop_front().map(Ok))
    }
}

type EchoBody = http_body_util::combinators::BoxBody<Bytes, Infallible>;

fn full(bytes: impl Into<Bytes>) -> Response<EchoBody> {
    Response::new(Full::new(bytes.into()).boxed())
}

/// "first\n" at once, "second\n" once `release` is told.
fn streamed(release: Arc<tokio::sync::Notify>) -> Response<EchoBody> {
    let (send, receive) = tokio::sync::mpsc::channel(2);
    tokio::spawn(async move {
        let _ = send.send(Bytes::from_static(b"first\n")).await;
        release.notified().await;
        let _ = send.send(Bytes::from_static(b"second\n")).await;
    });
    Response::new(Chunks(receive).boxed())
}

async fn echo(
    request: Request<Incoming>,
    log: Arc<Mutex<Vec<String>>>,
    release: Arc<tokio::sync::Notify>,
) -> Result<Response<EchoBody>, Infallible> {
    let (parts, mut body) = request.into_parts();
    let mut head = format!("{} {} {:?}\n", parts.method, parts.uri, parts.version);
    for (name, value) in &parts.headers {
        head.push_str(&format!(
            "{name}: {}\n",
            String::from_utf8_lossy(value.as_bytes())
        ));
    }
    log.lock().unwrap().push(head.clone());
    if let Some(n) = parts.uri.path().strip_prefix("/download/") {
        let n: usize = n.parse().unwrap();
        return Ok(full(pattern(n)));
    }
    if parts.uri.path() == "/stream" {
        return Ok(streamed(release));
    }
    let (mut length, mut state) = (0usize, HASH_START);
    while let Some(frame) = body.frame().await {
        if let Ok(data) = frame.unwrap().into_data() {
            length += data.len();
            state = hash(&data, state);
        }
    }
    head.push_str(&format!("body: {length} {state:x}\n"));
    if parts.uri.path() == "/reflect/trailers" {
        // The request's headers come back as trailers (HTTP/2, or HTTP/1.1 chunked).
        let mut trailers = HeaderMap::new();
        for (name, value) in &parts.headers {
            if let Ok(echoed) = format!("echo-{name}").parse::<hyper::header::HeaderName>() {
                trailers.append(echoed, value.clone());
            }
        }
        let frames = [
            hyper::body::Frame::data(Bytes::from(head)),
            hyper::body::Frame::trailers(trailers),
        ];
        return Ok(Response::new(Frames(frames.into_iter().collect()).boxed()));
    }
    let mut response = full(head);
    // As servers do that echo a request id or an origin, or keep the query in a redirect.
    let reflect = parts.uri.path().starts_with("/reflect");
    for (name, value) in parts.headers.iter().filter(|_| reflect) {
        if let Ok(echoed) = hyper::header::HeaderName::from_bytes(format!("echo-{name}").as_bytes())
        {
            response.headers_mut().append(echoed, value.clone());
        }
    }
    if parts.uri.path() == "/reflect/reason" {
        // The request's x-api-key as the status line's reason phrase (HTTP/1.1).
        if let Some(key) = parts.headers.get("x-api-key") {
            let reason = hyper::ext::ReasonPhrase::try_from(key.as_bytes().to_vec()).unwrap();
            response.extensions_mut().insert(reason);
        }
    }
    if let Some(rest) = parts.uri.path().strip_prefix("/reflect/redirect") {
        let location = format!("/dir{rest}/?{}", parts.uri.query().unwrap_or(""));
        *response.status_mut() = StatusCode::MOVED_PERMANENTLY;
        response
            .headers_mut()
            .insert("location", location.parse().unwrap());
    }
    Ok(response)
}

/// `n` bytes that are not all alike.
pub(crate) fn pattern(n: usize) -> Vec<u8> {
    (0..n).map(|i| (i % 251) as u8).collect()
}

/// An HTTPS client over one connection, trusting one CA.
pub(crate) struct Client {
    runtime: tokio::runtime::Runtime,
    sender: Sender,
    /// The protocol the server chose.
    pub(crate) alpn: Option<Vec<u8>>,
}

enum Sender {
    H1(http1::SendRequest<EchoBody>),
    H2(http2::SendRequest<EchoBody>),
}

/// An answer: status, headers (and trailers), body.
pub(crate) type Answer = (StatusCode, HeaderMap, Bytes);

impl Client {
    /// Connect to `addr` by TLS, naming `sni` (None: no SNI), trusting `ca_pem` only,
    /// offering `alpn`; HTTP/2 if the server chose it.
    pub(crate) fn connect(
        addr: SocketAddr,
        ca_pem: &str,
        sni: Option<&str>,
        alpn: &[&[u8]],
    ) -> Result<Client, String> {
        let tcp = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
        Client::over(tcp, ca_pem, sni, alpn)
    }

    /// [`Client::connect`] over a connection made already (a proxy's tunnel, say).
    pub(crate) fn over(
        tcp: std::net::TcpStream,
        ca_pem: &str,
        sni: Option<&str>,
        alpn: &[&[u8]],
    ) -> Result<Client, String> {
        Client::speaking(tcp, ca_pem, sni, alpn, false)
    }

    /// [`Client::connect`] offering no ALPN and speaking HTTP/2 all the same (prior knowledge).
    pub(crate) fn connect_h2_unannounced(
        addr: SocketAddr,
        ca_pem: &str,
        sni: Option<&str>,
    ) -> Result<Client, String> {
        let tcp = std::net::TcpStream::connect(addr).map_err(|e| e.to_string())?;
        Client::speaking(tcp, ca_pem, sni, &[], true)
    }

    fn speaking(
        tcp: std::net::TcpStream,
        ca_pem: &str,
        sni: Option<&str>,
        alpn: &[&[u8]],
        h2_regardless: bool,
    ) -> Result<Client, String> {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let mut roots = RootCertStore::empty();
        roots
            .add(CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
            .unwrap();
        let mut config = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .unwrap()
            .with_root_certificates(roots)
            .with_no_client_auth();
        config.alpn_protocols = alpn.iter().map(|p| p.to_vec()).collect();
        // No SNI: rustls sends none for an address.
        config.enable_sni = sni.is_some();
        let name = ServerName::try_from(sni.unwrap_or("api.test").to_string()).unwrap();
        let (sender, alpn) = runtime.block_on(async move {
            tcp.set_nonblocking(true).map_err(|e| e.to_string())?;
            let tcp = tokio::net::TcpStream::from_std(tcp).map_err(|e| e.to_string())?;
            let tls = tokio_rustls::TlsConnector::from(Arc::new(config))
                .connect(name, tcp)
                .await
                .map_err(|e| e.to_string())?;
            let alpn = tls.get_ref().1.alpn_protocol().map(<[u8]>::to_vec);
            let io = TokioIo::new(tls);
            let sender = if h2_regardless || alpn.as_deref() == Some(H2) {
                let (sender, driver) = http2::handshake(TokioExecutor::new(), io)
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::spawn(driver);
                Sender::H2(sender)
            } else {
                let (sender, driver) = http1::handshake(io).await.map_err(|e| e.to_string())?;
                tokio::spawn(driver);
                Sender::H1(sender)
            };
            Ok::<_, String>((sender, alpn))
        })?;
        Ok(Client {
            runtime,
            sender,
            alpn,
        })
    }

    /// `method target` naming `authority` (Host in HTTP/1.1, `:authority` in HTTP/2), with
    /// `headers` and `body`; the whole answer.
    pub(crate) fn send(
        &mut self,
        method: &str,
        authority: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: Vec<u8>,
    ) -> Result<Answer, String> {
        let body = Full::new(Bytes::from(body)).boxed();
        self.send_body(method, authority, target, headers, body)
    }

    /// [`Client::send`] with a body of no length known beforehand (HTTP/2: no
    /// content-length, HEADERS without END_STREAM then DATA; HTTP/1.1: chunked).
    pub(crate) fn send_unsized(
        &mut self,
        method: &str,
        authority: &str,
        target: &str,
        body: Vec<u8>,
    ) -> Result<Answer, String> {
        let (sent, chunks) = tokio::sync::mpsc::channel(1);
        sent.try_send(Bytes::from(body)).unwrap();
        drop(sent);
        self.send_body(method, authority, target, &[], Chunks(chunks).boxed())
    }

    fn send_body(
        &mut self,
        method: &str,
        authority: &str,
        target: &str,
        headers: &[(&str, &str)],
        body: EchoBody,
    ) -> Result<Answer, String> {
        let mut builder = Request::builder().method(method);
        builder = match self.sender {
            Sender::H1(_) => builder.uri(target).header("host", authority),
            Sender::H2(_) => builder.uri(format!("https://{authority}{target}")),
        };
        for (name, value) in headers {
            builder = builder.header(*name, *value);
        }
        let request = builder.body(body).unwrap();
        let sender = &mut self.sender;
        self.runtime.block_on(async move {
            let response = match sender {
                Sender::H1(s) => {
                    s.ready().await.map_err(|e| e.to_string())?;
                    s.send_request(request).await
                }
                Sender::H2(s) => {
                    s.ready().await.map_err(|e| e.to_string())?;
                    s.send_request(request).await
                }
            }
            .map_err(|e| e.to_string())?;
            let (mut parts, body) = response.into_parts();
            let collected = body.collect().await.map_err(|e| e.to_string())?;
            // Trailers, if any came, are answered among the headers.
            if let Some(trailers) = collected.trailers() {
                parts.headers.extend(trailers.clone());
            }
            Ok((parts.status, parts.headers, collected.to_bytes()))
        })
    }

    /// `GET target` of `authority`: its status and its body, to be read as it comes
    /// ([`Client::chunk`]).
    pub(crate) fn stream(
        &mut self,
        authority: &str,
        target: &str,
    ) -> Result<(StatusCode, Incoming), String> {
        let mut builder = Request::builder().method("GET");
        builder = match self.sender {
            Sender::H1(_) => builder.uri(target).header("host", authority),
            Sender::H2(_) => builder.uri(format!("https://{authority}{target}")),
        };
        let request = builder.body(Full::new(Bytes::new()).boxed()).unwrap();
        let sender = &mut self.sender;
        self.runtime.block_on(async move {
            let response = match sender {
                Sender::H1(s) => s.send_request(request).await,
                Sender::H2(s) => s.send_request(request).await,
            }
            .map_err(|e| e.to_string())?;
            let (parts, body) = response.into_parts();
            Ok((parts.status, body))
        })
    }

    /// The next chunk of `body`, if one comes within `within`.
    pub(crate) fn chunk(
        &mut self,
        body: &mut Incoming,
        within: std::time::Duration,
    ) -> Option<Bytes> {
        self.runtime.block_on(async {
            let frame = tokio::time::timeout(within, body.frame()).await.ok()??;
            frame.ok()?.into_data().ok()
        })
    }

    /// `GET target` of `authority`, with `headers`: status and body as text.
    pub(crate) fn get(
        &mut self,
        authority: &str,
        target: &str,
        headers: &[(&str, &str)],
    ) -> Result<(StatusCode, String), String> {
        let (status, _, body) = self.send("GET", authority, target, headers, Vec::new())?;
        Ok((status, String::from_utf8_lossy(&body).into_owned()))
    }
}

/// Raw bytes over TLS to the gate for `api.test` (as a hand-made client would send them); all
/// it answers until the connection ends (or stays quiet for 2 s).
pub(crate) fn raw_exchange(addr: SocketAddr, ca_pem: &str, sent: &[u8]) -> String {
    use std::io::{Read as _, Write as _};
    let mut roots = RootCertStore::empty();
    roots
        .add(rustls::pki_types::CertificateDer::from_pem_slice(ca_pem.as_bytes()).unwrap())
        .unwrap();
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_root_certificates(roots)
    .with_no_client_auth();
    let name = rustls::pki_types::ServerName::try_from("api.test".to_string()).unwrap();
    let connection = rustls::ClientConnection::new(Arc::new(config), name).unwrap();
    let tcp = std::net::TcpStream::connect(addr).unwrap();
    tcp.set_read_timeout(Some(std::time::Duration::from_secs(2)))
        .unwrap();
    let mut tls = rustls::StreamOwned::new(connection, tcp);
    tls.write_all(sent).unwrap();
    tls.flush().unwrap();
    let mut got = Vec::new();
    let _ = tls.read_to_end(&mut got);
    String::from_utf8_lossy(&got).into_owned()
}
