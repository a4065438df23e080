//! Offering an approval to the profile's `ask_webhook`: a JSON POST an n8n Webhook node or a
//! chat bridge takes, saying what waits and how an operator answers it. Sent from a thread of
//! its own with short timeouts: it never holds the run up, and its failure is audited, not the
//! run's. What the webhook answers is not read: only an operator's call of the API (with an
//! operator token) decides.

use std::io::Write as _;
use std::net::{TcpStream, ToSocketAddrs as _};
use std::sync::Arc;
use std::time::Duration;

use serde::Serialize;

use super::Approval;

/// How long the webhook has, to connect and then to each read and write.
const TIMEOUT: Duration = Duration::from_secs(5);

/// What the webhook receives.
#[derive(Debug, Serialize)]
pub(crate) struct Offer<'a> {
    /// `airlock.approval`: what this is, for a bridge that takes several kinds.
    pub kind: &'static str,
    pub id: &'a str,
    pub session: Option<&'a str>,
    pub profile: &'a str,
    pub host: &'a str,
    pub port: u16,
    pub program: Option<&'a str>,
    pub asked_at: u64,
    pub expires_at: u64,
    pub profile_line: &'a str,
    /// One line for a chat message.
    pub text: String,
    pub answer: HowToAnswer,
}

/// How the approval is answered: on the operator API, with an operator token.
#[derive(Debug, Serialize)]
pub(crate) struct HowToAnswer {
    pub method: &'static str,
    /// `/v1/approvals/ID`, on the `airlock serve` the operator reaches.
    pub path: String,
    /// `Bearer <an operator token>`: the webhook's own answer does not count.
    pub authorization: &'static str,
    /// The body's `decision`: one of these.
    pub decisions: [&'static str; 3],
    /// A body to send, with its `reason`.
    pub example: serde_json::Value,
}

pub(crate) fn offer_of(approval: &Approval) -> Offer<'_> {
    let who = approval.program.as_deref().unwrap_or("a program");
    let session = match &approval.session {
        Some(session) => format!(" in session {session}"),
        None => String::new(),
    };
    Offer {
        kind: "airlock.approval",
        id: &approval.id,
        session: approval.session.as_deref(),
        profile: &approval.profile,
        host: &approval.host,
        port: approval.port,
        program: approval.program.as_deref(),
        asked_at: approval.asked_at,
        expires_at: approval.expires_at,
        profile_line: &approval.profile_line,
        text: format!(
            "airlock: {who}{session} (profile {}) wants to connect to {}; refused unless an operator answers within {} s: airlock approve {} (or deny)",
            approval.profile,
            approval.destination(),
            approval.timeout_seconds,
            approval.id
        ),
        answer: HowToAnswer {
            method: "POST",
            path: format!("/v1/approvals/{}", approval.id),
            authorization: "Bearer <an operator token>",
            decisions: ["allow_once", "allow_session", "deny"],
            example: serde_json::json!({ "decision": "allow_once", "reason": "why" }),
        },
    }
}

/// `approval.webhook`: whether the offer reached the webhook (its host only: a webhook's path
/// is often its secret).
#[derive(Serialize)]
struct Offered<'a> {
    id: &'a str,
    webhook_host: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    status: Option<u16>,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
}

/// Offer `approval` to `url` in the background; never blocks or fails the run.
pub(crate) fn offer(url: String, approval: Approval, audit: crate::audit::Log) {
    std::thread::spawn(move || {
        let target = Url::parse(&url);
        let host = target.as_ref().map_or("?", |t| t.host.as_str()).to_string();
        let sent = target.and_then(|target| {
            let body = serde_json::to_vec(&offer_of(&approval)).map_err(|e| e.to_string())?;
            post(&target, &body)
        });
        let (status, error) = match sent {
            Ok(status) if (200..300).contains(&status) => (Some(status), None),
            Ok(status) => (Some(status), Some(format!("the webhook answered {status}"))),
            Err(e) => (None, Some(e)),
        };
        let record = Offered {
            id: &approval.id,
            webhook_host: &host,
            status,
            error,
        };
        if let Ok(fields) = serde_json::to_value(record) {
            let _ = crate::audit::append_deferred(&audit, "approval.webhook", fields);
        }
    });
}

/// An `ask_webhook` URL, as the policy checked it.
struct Url {
    tls: bool,
    host: String,
    port: u16,
    /// The path and query, `/` at least.
    path: String,
}

impl Url {
    fn parse(url: &str) -> Result<Url, String> {
        let (tls, rest) = match (url.strip_prefix("https://"), url.strip_prefix("http://")) {
            (Some(rest), _) => (true, rest),
            (None, Some(rest)) => (false, rest),
            _ => return Err("not an http:// or https:// URL".into()),
        };
        let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
        let (authority, path) = rest.split_at(end);
        let path = path.split('#').next().unwrap_or_default();
        let path = if path.starts_with('/') {
            path.to_string()
        } else {
            format!("/{path}")
        };
        let default = if tls { 443 } else { 80 };
        let (host, port) = match authority.strip_prefix('[') {
            Some(v6) => {
                let (host, after) = v6.split_once(']').ok_or("an IPv6 host without its ']'")?;
                let port = after.strip_prefix(':').map(str::parse).transpose();
                (host, port.map_err(|_| "not a port")?.unwrap_or(default))
            }
            None => match authority.rsplit_once(':') {
                Some((host, port)) => (host, port.parse().map_err(|_| "not a port")?),
                None => (authority, default),
            },
        };
        if host.is_empty() {
            return Err("no host".into());
        }
        Ok(Url {
            tls,
            host: host.to_string(),
            port,
            path,
        })
    }
}

/// POST `body` to `url`; the status it answered.
fn post(url: &Url, body: &[u8]) -> Result<u16, String> {
    let addr = (url.host.as_str(), url.port)
        .to_socket_addrs()
        .map_err(|e| format!("cannot resolve {}: {e}", url.host))?
        .next()
        .ok_or_else(|| format!("{} has no address", url.host))?;
    let tcp = TcpStream::connect_timeout(&addr, TIMEOUT).map_err(|e| e.to_string())?;
    tcp.set_read_timeout(Some(TIMEOUT))
        .map_err(|e| e.to_string())?;
    tcp.set_write_timeout(Some(TIMEOUT))
        .map_err(|e| e.to_string())?;
    let host = if url.host.contains(':') {
        format!("[{}]", url.host)
    } else {
        url.host.clone()
    };
    let mut request = format!(
        "POST {} HTTP/1.1\r\nHost: {host}\r\nUser-Agent: airlock/{}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n",
        url.path,
        env!("CARGO_PKG_VERSION"),
        body.len()
    )
    .into_bytes();
    request.extend_from_slice(body);
    let mut head = Vec::new();
    if url.tls {
        let roots = airlock_egress::inject::system_roots()?;
        let config = rustls::ClientConfig::builder_with_provider(Arc::new(
            rustls::crypto::ring::default_provider(),
        ))
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_root_certificates(roots)
        .with_no_client_auth();
        let name = rustls::pki_types::ServerName::try_from(url.host.clone())
            .map_err(|e| format!("{} is not a name TLS can verify: {e}", url.host))?;
        let connection =
            rustls::ClientConnection::new(Arc::new(config), name).map_err(|e| e.to_string())?;
        let mut stream = rustls::StreamOwned::new(connection, tcp);
        stream.write_all(&request).map_err(|e| e.to_string())?;
        read_head(&mut stream, &mut head)?;
    } else {
        let mut stream = tcp;
        stream.write_all(&request).map_err(|e| e.to_string())?;
        read_head(&mut stream, &mut head)?;
    }
    status_of(&head)
}

/// Read until the status line is in (at most a few KiB).
fn read_head(stream: &mut impl std::io::Read, head: &mut Vec<u8>) -> Result<(), String> {
    let mut buf = [0u8; 1024];
    while !head.contains(&b'\n') && head.len() < 4096 {
        match stream.read(&mut buf) {
            Ok(0) => break,
            Ok(n) => head.extend_from_slice(&buf[..n]),
            Err(e) => return Err(e.to_string()),
        }
    }
    Ok(())
}

/// The status of `HTTP/1.x NNN …`.
fn status_of(head: &[u8]) -> Result<u16, String> {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let text = String::from_utf8_lossy(line);
    let mut words = text.split_whitespace();
    match (words.next(), words.next().map(str::parse::<u16>)) {
        (Some(version), Some(Ok(status))) if version.starts_with("HTTP/1.") => Ok(status),
        _ => Err("the webhook's answer is not HTTP".into()),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Read as _;

    use super::*;

    fn approval() -> Approval {
        Approval {
            id: "ap_0123456789abcdef".into(),
            status: super::super::ApprovalStatus::Pending,
            session: Some("s1".into()),
            profile: "ci".into(),
            run: 1,
            host: "api.github.com".into(),
            port: 443,
            program: Some("curl".into()),
            entry: "*.github.com".into(),
            asked_at: 10,
            expires_at: 70,
            timeout_seconds: 60,
            seconds_left: 0,
            profile_line: "allow = [\"api.github.com:443\"]".into(),
            answer: None,
        }
    }

    /// The audit log's text once `action` is in it (the offering thread writes it).
    fn logged(audit: &crate::audit::Log, action: &str) -> String {
        // Up to 20 s: the offering thread's append is an fsync, slow on a loaded machine.
        for _ in 0..1000 {
            match std::fs::read_to_string(audit.path()) {
                Ok(text) if text.contains(action) => return text,
                _ => std::thread::sleep(Duration::from_millis(20)),
            }
        }
        panic!("no {action} in the audit log");
    }

    #[test]
    fn urls_are_read_as_the_policy_wrote_them() {
        let url = Url::parse("https://n8n.example.com/webhook/airlock?x=1#frag").unwrap();
        assert!(url.tls);
        assert_eq!((url.host.as_str(), url.port), ("n8n.example.com", 443));
        assert_eq!(url.path, "/webhook/airlock?x=1");
        let url = Url::parse("http://127.0.0.1:5678").unwrap();
        assert_eq!(
            (url.host.as_str(), url.port, url.path.as_str()),
            ("127.0.0.1", 5678, "/")
        );
        let url = Url::parse("http://[::1]:8080/hook").unwrap();
        assert_eq!((url.host.as_str(), url.port), ("::1", 8080));
        assert!(Url::parse("ftp://x").is_err());
        assert!(Url::parse("http://:80/").is_err());
        assert_eq!(status_of(b"HTTP/1.1 204 No Content\r\n"), Ok(204));
        assert!(status_of(b"SSH-2.0-OpenSSH\r\n").is_err());
    }

    /// A webhook on this host's loopback gets the offer as JSON, and the log says so.
    #[test]
    fn the_offer_reaches_a_webhook_and_is_audited() {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = listener.local_addr().unwrap().port();
        let got = std::thread::spawn(move || {
            let (mut conn, _) = listener.accept().unwrap();
            conn.set_read_timeout(Some(Duration::from_secs(5))).unwrap();
            let mut seen = Vec::new();
            let mut buf = [0u8; 4096];
            loop {
                let n = conn.read(&mut buf).unwrap();
                seen.extend_from_slice(&buf[..n]);
                let text = String::from_utf8_lossy(&seen).to_string();
                if let Some((head, body)) = text.split_once("\r\n\r\n") {
                    let length: usize = head
                        .lines()
                        .find_map(|l| l.strip_prefix("Content-Length: "))
                        .unwrap()
                        .parse()
                        .unwrap();
                    if body.len() >= length {
                        conn.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n")
                            .unwrap();
                        return (head.to_string(), body.to_string());
                    }
                }
                assert!(n > 0, "closed early");
            }
        });
        let dir = tempfile::tempdir().unwrap();
        let audit = crate::audit::log(dir.path());
        let approval = approval();
        offer(
            format!("http://127.0.0.1:{port}/webhook/airlock"),
            approval,
            audit.clone(),
        );
        let (head, body) = got.join().unwrap();
        assert!(head.starts_with("POST /webhook/airlock HTTP/1.1"), "{head}");
        assert!(head.contains("Content-Type: application/json"), "{head}");
        let offer: serde_json::Value = serde_json::from_str(&body).unwrap();
        assert_eq!(offer["id"], "ap_0123456789abcdef");
        assert_eq!(offer["host"], "api.github.com");
        assert_eq!(offer["expires_at"], 70);
        assert_eq!(offer["profile_line"], "allow = [\"api.github.com:443\"]");
        assert_eq!(offer["answer"]["path"], "/v1/approvals/ap_0123456789abcdef");
        assert!(offer["text"].as_str().unwrap().contains("airlock approve"));
        let text = logged(&audit, "approval.webhook");
        assert!(text.contains("\"status\":200"), "{text}");
        assert!(
            !text.contains("/webhook/airlock"),
            "the path is not logged: {text}"
        );
    }

    #[test]
    fn a_webhook_that_is_not_there_is_audited_and_nothing_else() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let dir = tempfile::tempdir().unwrap();
        let audit = crate::audit::log(dir.path());
        offer(
            format!("http://127.0.0.1:{port}/"),
            approval(),
            audit.clone(),
        );
        let text = logged(&audit, "approval.webhook");
        assert!(text.contains("\"error\""), "{text}");
        assert!(!text.contains("\"status\""), "{text}");
    }
}
