//! The `otlp` destination: OTLP/HTTP, a `POST` of the protobuf `ExportLogsServiceRequest`
//! (`Content-Type: application/x-protobuf`) to the collector's endpoint, over one kept-alive
//! HTTP/1.1 connection, with TLS (rustls) for https:// — the system's CAs, or `ca_file`'s.
//!
//! The answer decides, as the OTLP specification says: 2xx is an acknowledgement (a partial
//! success is said on stderr; what the collector rejected it will not take on a resend either);
//! 429, 502, 503 and 504 and any failure to connect or to answer in time are retried with a
//! growing backoff, or after Retry-After; 413 (too large) has the batch sent again in halves,
//! down to one record a request; any other status is a refusal, not resent at once (see
//! [`crate::pump::Delivery::Refused`]).

use std::sync::Arc;
use std::time::Duration;

use airlock_audit::Tailed;
use airlock_core::config::{Endpoint, OtlpConfig};
use bytes::Bytes;
use http_body_util::{BodyExt as _, Full, Limited};
use hyper::client::conn::http1::SendRequest;
use hyper::{Request, StatusCode};
use hyper_util::rt::TokioIo;
use prost::Message as _;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::rustls;

use crate::otlp::proto::collector::logs::v1::ExportLogsServiceResponse;
use crate::otlp::proto::resource::v1::Resource;
use crate::pump::{Delivery, Sink};
use crate::ExportError;

/// How long one request may take, connecting included.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);

/// The most of an answer's body read (a collector's answer is a few bytes).
const MAX_ANSWER: usize = 64 * 1024;

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

pub struct OtlpSink {
    client: Client,
    resource: Resource,
    /// This destination's own runtime, on its own thread: nothing here waits on the server's.
    runtime: tokio::runtime::Runtime,
}

/// The collector's address, and the connection to it.
struct Client {
    endpoint: Endpoint,
    headers: Vec<(String, String)>,
    tls: Option<tokio_rustls::TlsConnector>,
    connection: Option<SendRequest<Full<Bytes>>>,
}

impl OtlpSink {
    /// Everything checked now, at start: the CAs read, the runtime made.
    pub fn new(config: &OtlpConfig, resource: Resource) -> Result<OtlpSink, ExportError> {
        let tls = match config.endpoint.tls {
            true => Some(tls_connector(config)?),
            false => None,
        };
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| ExportError::Start(format!("cannot start the OTLP client: {e}")))?;
        Ok(OtlpSink {
            client: Client {
                endpoint: config.endpoint.clone(),
                headers: config
                    .headers
                    .iter()
                    .map(|(name, value)| (name.clone(), value.0.clone()))
                    .collect(),
                tls,
                connection: None,
            },
            resource,
            runtime,
        })
    }
}

impl Client {
    async fn connect(&self) -> Result<SendRequest<Full<Bytes>>, String> {
        let Endpoint { host, port, .. } = &self.endpoint;
        let tcp = tokio::net::TcpStream::connect((host.as_str(), *port))
            .await
            .map_err(|e| format!("cannot connect to {}: {e}", self.endpoint))?;
        let io: Box<dyn Io> = match &self.tls {
            None => Box::new(tcp),
            Some(tls) => {
                let name = rustls::pki_types::ServerName::try_from(host.clone())
                    .map_err(|e| format!("{host:?} is not a TLS server name: {e}"))?;
                Box::new(
                    tls.connect(name, tcp)
                        .await
                        .map_err(|e| format!("TLS with {} failed: {e}", self.endpoint))?,
                )
            }
        };
        let (sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .map_err(|e| format!("cannot speak HTTP with {}: {e}", self.endpoint))?;
        tokio::spawn(connection);
        Ok(sender)
    }

    fn request(&self, body: Bytes) -> Result<Request<Full<Bytes>>, String> {
        let mut request = Request::post(self.endpoint.path.as_str())
            .header("host", self.endpoint.authority())
            .header("content-type", "application/x-protobuf")
            .header("user-agent", concat!("airlock/", env!("CARGO_PKG_VERSION")));
        for (name, value) in &self.headers {
            request = request.header(name.as_str(), value.as_str());
        }
        request
            .body(Full::new(body))
            .map_err(|e| format!("cannot make the request: {e}"))
    }

    /// One POST: on the kept connection, or a new one; a kept one the collector closed meanwhile
    /// is replaced once, at once.
    async fn post(&mut self, body: Bytes) -> Result<(StatusCode, hyper::HeaderMap, Bytes), String> {
        for fresh in [false, true] {
            let mut sender = match self.connection.take() {
                Some(sender) if !fresh && !sender.is_closed() => sender,
                _ => self.connect().await?,
            };
            let reused = !fresh;
            let request = self.request(body.clone())?;
            let sent = match sender.ready().await {
                Ok(()) => sender.send_request(request).await,
                Err(e) => Err(e),
            };
            let response = match sent {
                Ok(response) => response,
                Err(e)
                    if reused
                        && (e.is_closed() || e.is_canceled() || e.is_incomplete_message()) =>
                {
                    continue;
                }
                Err(e) => return Err(format!("{} did not answer: {e}", self.endpoint)),
            };
            let (head, body) = response.into_parts();
            let answer = Limited::new(body, MAX_ANSWER)
                .collect()
                .await
                .map_err(|e| format!("the answer from {} broke off: {e}", self.endpoint))?
                .to_bytes();
            self.connection = Some(sender);
            return Ok((head.status, head.headers, answer));
        }
        Err(format!("{} closed every connection", self.endpoint))
    }
}

impl Sink for OtlpSink {
    fn deliver(&mut self, batch: &[Tailed]) -> Delivery {
        let body = Bytes::from(crate::otlp::request(&self.resource, batch).encode_to_vec());
        let client = &mut self.client;
        let endpoint = client.endpoint.to_string();
        let posted = self.runtime.block_on(async {
            tokio::time::timeout(REQUEST_TIMEOUT, client.post(body))
                .await
                .unwrap_or_else(|_| {
                    Err(format!(
                        "{endpoint} did not answer within {} s",
                        REQUEST_TIMEOUT.as_secs()
                    ))
                })
        });
        match posted {
            Ok((status, headers, answer)) => judge(status, &headers, &answer, batch.len()),
            Err(why) => {
                self.client.connection = None;
                Delivery::Retry { after: None, why }
            }
        }
    }
}

/// What an answer means for the batch.
pub fn judge(
    status: StatusCode,
    headers: &hyper::HeaderMap,
    answer: &[u8],
    records: usize,
) -> Delivery {
    if status.is_success() {
        let rejected = ExportLogsServiceResponse::decode(answer)
            .ok()
            .and_then(|r| r.partial_success)
            .filter(|p| p.rejected_log_records > 0);
        return Delivery::Delivered {
            note: rejected.map(|p| {
                format!(
                    "the collector took the request but rejected {} of its {records} records ({}); they are not sent again",
                    p.rejected_log_records,
                    if p.error_message.is_empty() { "no reason given" } else { &p.error_message }
                )
            }),
        };
    }
    let why = format!("the collector answered {status}{}", said(answer));
    match status.as_u16() {
        429 | 502 | 503 | 504 => Delivery::Retry {
            after: retry_after(headers),
            why,
        },
        // Resent as it is, a batch too large is refused again forever: the pump halves it.
        413 => Delivery::TooLarge { why },
        _ => Delivery::Refused {
            why: format!("{why}; it is asked again in a minute: fix the collector or [audit.otlp]"),
        },
    }
}

/// Retry-After in seconds (the form collectors send; an HTTP date is left to the backoff).
fn retry_after(headers: &hyper::HeaderMap) -> Option<Duration> {
    headers
        .get("retry-after")?
        .to_str()
        .ok()?
        .trim()
        .parse::<u64>()
        .ok()
        .map(Duration::from_secs)
}

/// A short text the collector gave with a refusal, if it gave one that reads.
fn said(answer: &[u8]) -> String {
    match std::str::from_utf8(answer) {
        Ok(text)
            if !text.trim().is_empty() && text.chars().all(|c| !c.is_control() || c == '\n') =>
        {
            let text: String = text.split_whitespace().collect::<Vec<_>>().join(" ");
            let cut: String = text.chars().take(200).collect();
            format!(": {cut}")
        }
        _ => String::new(),
    }
}

fn tls_connector(config: &OtlpConfig) -> Result<tokio_rustls::TlsConnector, ExportError> {
    let mut roots = rustls::RootCertStore::empty();
    match &config.ca_file {
        Some(file) => {
            let unreadable = |why: String| {
                ExportError::Start(format!(
                "cannot read ca_file {}: {why} — give the PEM file of the CAs that sign the collector's certificate",
                file.display()
            ))
            };
            let pem = std::fs::File::open(file).map_err(|e| unreadable(e.to_string()))?;
            for cert in rustls_pemfile::certs(&mut std::io::BufReader::new(pem)) {
                let cert = cert.map_err(|e| unreadable(e.to_string()))?;
                roots.add(cert).map_err(|e| unreadable(e.to_string()))?;
            }
            if roots.is_empty() {
                return Err(unreadable("it holds no certificate".into()));
            }
        }
        None => {
            let found = rustls_native_certs::load_native_certs();
            for cert in found.certs {
                let _ = roots.add(cert);
            }
            if roots.is_empty() {
                return Err(ExportError::Start(format!(
                    "no CA certificates found on this system to check {} by: install ca-certificates, or set ca_file in [audit.otlp]",
                    config.endpoint
                )));
            }
        }
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut tls = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| ExportError::Start(format!("cannot set up TLS: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    tls.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(tokio_rustls::TlsConnector::from(Arc::new(tls)))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::otlp::proto::collector::logs::v1::ExportLogsPartialSuccess;

    fn headers(pairs: &[(&'static str, &'static str)]) -> hyper::HeaderMap {
        let mut map = hyper::HeaderMap::new();
        for (k, v) in pairs {
            map.insert(*k, v.parse().unwrap());
        }
        map
    }

    #[test]
    fn answers_are_judged_as_otlp_says() {
        let none = headers(&[]);
        assert_eq!(
            judge(StatusCode::OK, &none, b"", 3),
            Delivery::Delivered { note: None }
        );
        for status in [429, 502, 503, 504] {
            let status = StatusCode::from_u16(status).unwrap();
            assert!(matches!(
                judge(status, &none, b"", 3),
                Delivery::Retry { after: None, .. }
            ));
        }
        assert_eq!(
            judge(
                StatusCode::SERVICE_UNAVAILABLE,
                &headers(&[("retry-after", "7")]),
                b"",
                3
            ),
            Delivery::Retry {
                after: Some(Duration::from_secs(7)),
                why: "the collector answered 503 Service Unavailable".into()
            }
        );
        // Found by review: a 413 was a refusal, and the same batch asked again forever.
        assert!(matches!(
            judge(StatusCode::PAYLOAD_TOO_LARGE, &none, b"", 3),
            Delivery::TooLarge { ref why } if why.contains("413")
        ));
        for status in [400, 401, 403, 404, 500] {
            let status = StatusCode::from_u16(status).unwrap();
            assert!(
                matches!(judge(status, &none, b"bad\nthing", 3), Delivery::Refused { ref why } if why.contains(": bad thing")),
                "{status}"
            );
        }
    }

    #[test]
    fn a_partial_success_is_delivered_and_said() {
        let answer = ExportLogsServiceResponse {
            partial_success: Some(ExportLogsPartialSuccess {
                rejected_log_records: 2,
                error_message: "too old".into(),
            }),
        }
        .encode_to_vec();
        let Delivery::Delivered { note: Some(note) } =
            judge(StatusCode::OK, &headers(&[]), &answer, 5)
        else {
            panic!("not delivered with a note");
        };
        assert!(
            note.contains("rejected 2 of its 5 records (too old)"),
            "{note}"
        );
    }

    /// A collector on a loopback port that answers each request with the next status of its
    /// script (200 once the script is out), closing the connection after each when `close`;
    /// what it was sent comes back decoded.
    fn collector(
        script: Vec<u16>,
        close: bool,
    ) -> (u16, std::sync::mpsc::Receiver<(String, Vec<u64>)>) {
        use crate::otlp::proto::collector::logs::v1::ExportLogsServiceRequest;
        use crate::otlp::proto::common::v1::any_value;
        use std::io::{BufRead, BufReader, Read, Write};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let mut script = script.into_iter();
            for stream in listener.incoming() {
                let stream = stream.unwrap();
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut writer = stream;
                loop {
                    let mut head = String::new();
                    let mut length = 0usize;
                    loop {
                        let mut line = String::new();
                        if reader.read_line(&mut line).unwrap_or(0) == 0 {
                            break;
                        }
                        if line == "\r\n" {
                            break;
                        }
                        if let Some(v) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                            length = v.trim().parse().unwrap();
                        }
                        head.push_str(&line);
                    }
                    if head.is_empty() {
                        break;
                    }
                    let mut body = vec![0u8; length];
                    reader.read_exact(&mut body).unwrap();
                    let request = ExportLogsServiceRequest::decode(body.as_slice()).unwrap();
                    let seqs = request.resource_logs[0].scope_logs[0]
                        .log_records
                        .iter()
                        .map(|r| {
                            let seq = r
                                .attributes
                                .iter()
                                .find(|kv| kv.key == "airlock.seq")
                                .unwrap();
                            match seq.value.as_ref().unwrap().value {
                                Some(any_value::Value::IntValue(n)) => n as u64,
                                _ => panic!("seq not an int"),
                            }
                        })
                        .collect();
                    let status = script.next().unwrap_or(200);
                    tx.send((head, seqs)).unwrap();
                    let connection = if close { "close" } else { "keep-alive" };
                    write!(
                        writer,
                        "HTTP/1.1 {status} X\r\ncontent-length: 0\r\nretry-after: 0\r\nconnection: {connection}\r\n\r\n"
                    )
                    .unwrap();
                    if close {
                        break;
                    }
                }
            }
        });
        (port, rx)
    }

    fn batch_of(n: u64) -> (tempfile::TempDir, Vec<Tailed>) {
        let dir = tempfile::tempdir().unwrap();
        let log = airlock_audit::AuditLog::new(dir.path(), airlock_audit::Sync::Never);
        for i in 0..n {
            log.append("run.intent", serde_json::json!({ "i": i }))
                .unwrap();
        }
        let mut tail = airlock_audit::Tail::after(&log.path(), None);
        let batch = std::iter::from_fn(|| tail.next_record().unwrap()).collect();
        (dir, batch)
    }

    fn sink_for(port: u16, headers: Vec<(String, String)>) -> OtlpSink {
        let config = OtlpConfig {
            endpoint: airlock_core::config::parse_endpoint(&format!("http://127.0.0.1:{port}"))
                .unwrap(),
            headers: headers
                .into_iter()
                .map(|(k, v)| (k, airlock_core::config::HeaderValue(v)))
                .collect(),
            ca_file: None,
        };
        OtlpSink::new(&config, Resource::default()).unwrap()
    }

    #[test]
    fn batches_are_posted_as_protobuf_on_a_kept_connection_and_a_503_is_a_retry() {
        let (port, received) = collector(vec![503], false);
        let (_dir, batch) = batch_of(3);
        let mut sink = sink_for(port, vec![("authorization".into(), "Bearer t".into())]);
        assert!(matches!(
            sink.deliver(&batch),
            Delivery::Retry { after: Some(d), .. } if d.is_zero()
        ));
        assert_eq!(sink.deliver(&batch), Delivery::Delivered { note: None });
        assert_eq!(
            sink.deliver(&batch[2..]),
            Delivery::Delivered { note: None }
        );
        let (head, seqs) = received.recv().unwrap();
        assert!(head.starts_with("POST /v1/logs HTTP/1.1\r\n"), "{head}");
        let head = head.to_ascii_lowercase();
        assert!(
            head.contains("content-type: application/x-protobuf"),
            "{head}"
        );
        assert!(head.contains("authorization: bearer t"), "{head}");
        assert!(head.contains(&format!("host: 127.0.0.1:{port}")), "{head}");
        assert_eq!(seqs, [1, 2, 3]);
        assert_eq!(received.recv().unwrap().1, [1, 2, 3]);
        assert_eq!(received.recv().unwrap().1, [3]);
    }

    #[test]
    fn a_413_from_the_collector_is_too_large_not_a_refusal() {
        let (port, received) = collector(vec![413], false);
        let (_dir, batch) = batch_of(3);
        let mut sink = sink_for(port, vec![]);
        assert!(matches!(
            sink.deliver(&batch),
            Delivery::TooLarge { ref why } if why.contains("413")
        ));
        assert_eq!(received.recv().unwrap().1, [1, 2, 3]);
    }

    #[test]
    fn a_collector_that_closes_each_connection_or_is_not_there_is_handled() {
        let (port, received) = collector(vec![], true);
        let (_dir, batch) = batch_of(2);
        let mut sink = sink_for(port, vec![]);
        for _ in 0..3 {
            assert_eq!(sink.deliver(&batch), Delivery::Delivered { note: None });
            assert_eq!(received.recv().unwrap().1, [1, 2]);
        }
        // Nobody listens on a port just given up.
        let free = std::net::TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        let Delivery::Retry { after: None, why } = sink_for(free, vec![]).deliver(&batch) else {
            panic!("not a retry");
        };
        assert!(
            why.starts_with("cannot connect to http://127.0.0.1:"),
            "{why}"
        );
    }
}
