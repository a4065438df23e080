//! The domain-fronting verdict: do a relayed connection's first bytes ask for the host the
//! sandbox connected by? A TLS ClientHello must name it (SNI), an HTTP/1 request must name it
//! (Host, or an absolute or CONNECT target); what the gate cannot read as every server would is
//! refused on a connection by name. Pure: bytes and names in, verdict out.

use crate::sni::{self, Peek};

/// How long a connection by name may stay silent on both sides before the gate gives up on
/// learning what it is for (a connection opened ahead, a server slow to greet).
pub(super) const FIRST_WORD: std::time::Duration = std::time::Duration::from_secs(60);

/// What a connection's first bytes said, and whether they refuse it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Verdict {
    /// What the readers made of the bytes.
    pub(super) peeked: Peek,
    /// The host the bytes named (TLS SNI, HTTP Host), for the log.
    pub(super) asked: Option<String>,
    /// Why the connection must be closed; None: it may go on.
    pub(super) refusal: Option<String>,
}

/// Judge the first bytes `first` of a connection to `name` (None: to a bare address, which
/// names no host to check against). `client_closed`: the client closed its side after them;
/// `server_first`: the server spoke before the client did (SSH, SMTP…: protocols that name no
/// host), so there is nothing to check.
pub(super) fn verdict(
    name: Option<&str>,
    first: &[u8],
    client_closed: bool,
    server_first: bool,
) -> Verdict {
    let mut peeked = sni::peek(first);
    if peeked == Peek::NeedMore && client_closed {
        // The client said all it will: judged as a server reads it at the end of its input,
        // as if its last line were ended (Python's http.server serves a request line cut short
        // so, and Werkzeug takes the host from an absolute target).
        peeked = sni::peek(&[first, b"\n\n"].concat());
    }
    let said = match &peeked {
        Peek::Tls { server_name } => Some(server_name.clone()),
        Peek::Http { host, .. } => Some(host.clone()),
        _ => None,
    };
    let refusal = if server_first {
        None
    } else {
        refusal(name, first, &peeked, said.as_ref())
    };
    Verdict {
        peeked,
        asked: said.flatten(),
        refusal,
    }
}

/// Why a client that spoke first is refused, if it is. `said`: Some when the bytes are TLS or
/// HTTP, holding the name they asked for (None: a hello or request without one).
fn refusal(
    name: Option<&str>,
    first: &[u8],
    peeked: &Peek,
    said: Option<&Option<String>>,
) -> Option<String> {
    if first.is_empty() && name.is_some() {
        // Neither side spoke within the waits: what the client would ask for later is unknown.
        return Some(format!(
            "neither side said anything in the {} s the gate waited",
            FIRST_WORD.as_secs()
        ));
    }
    if matches!(peeked, Peek::NeedMore | Peek::TooLong) && !first.is_empty() {
        // A TLS hello or an HTTP head that never completed: what it would ask for is unknown.
        return Some(
            "the first bytes never said what they are for (an unfinished TLS hello or HTTP head)"
                .to_string(),
        );
    }
    let name = name?;
    if first.starts_with(b"PRI * HTTP/2.0") {
        // Plain-text HTTP/2 names its host in a compressed frame the gate does not read: it could
        // ask an allowed server for any other host. (HTTP/2 over TLS is checked by its SNI.)
        return Some("plain-text HTTP/2 (h2c) cannot be checked for the host it asks for".into());
    }
    if let Peek::Malformed { why } = peeked {
        return Some(format!(
            "first bytes the gate cannot check as servers would read them: {why}"
        ));
    }
    match said {
        Some(said) if said.as_deref() != Some(name) => Some(format!(
            "connected to {name} but asked for {}: refused (domain fronting)",
            said.as_deref().unwrap_or("no name")
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::sni::client_hello;

    fn refused(name: Option<&str>, first: &[u8], closed: bool) -> Option<String> {
        verdict(name, first, closed, false).refusal
    }

    #[test]
    fn a_hello_naming_the_host_passes() {
        let v = verdict(Some("a.test"), &client_hello(Some("a.test")), false, false);
        assert_eq!(v.refusal, None);
        assert_eq!(v.asked.as_deref(), Some("a.test"));
        // SNI is read case-blind, as DNS names are.
        assert_eq!(
            refused(Some("a.test"), &client_hello(Some("A.Test")), false),
            None
        );
    }

    #[test]
    fn a_hello_naming_another_host_is_fronting() {
        let v = verdict(Some("a.test"), &client_hello(Some("b.test")), false, false);
        let rule = v.refusal.unwrap();
        assert!(
            rule.contains("connected to a.test but asked for b.test"),
            "{rule}"
        );
        assert!(rule.contains("domain fronting"), "{rule}");
        assert_eq!(v.asked.as_deref(), Some("b.test"));
    }

    #[test]
    fn a_hello_without_a_name_is_refused_by_name_and_passes_by_address() {
        let hello = client_hello(None);
        let rule = refused(Some("a.test"), &hello, false).unwrap();
        assert!(rule.contains("asked for no name"), "{rule}");
        assert_eq!(refused(None, &hello, false), None);
        // By address nothing is checked: any name may be asked for.
        assert_eq!(refused(None, &client_hello(Some("b.test")), false), None);
    }

    #[test]
    fn a_truncated_hello_is_refused() {
        let hello = client_hello(Some("a.test"));
        for cut in [1, 5, 20, hello.len() - 1] {
            let rule = refused(Some("a.test"), &hello[..cut], false).unwrap();
            assert!(
                rule.contains("never said what they are for"),
                "{cut}: {rule}"
            );
        }
        // By address too: it never said it was anything else.
        assert!(refused(None, &hello[..20], false).is_some());
    }

    #[test]
    fn http_requests_must_name_the_host() {
        let get = |host: &str| format!("GET / HTTP/1.1\r\nHost: {host}\r\n\r\n").into_bytes();
        assert_eq!(refused(Some("a.test"), &get("a.test"), false), None);
        assert_eq!(refused(Some("a.test"), &get("a.test:8080"), false), None);
        let rule = refused(Some("a.test"), &get("b.test"), false).unwrap();
        assert!(rule.contains("asked for b.test"), "{rule}");
        let v = verdict(Some("a.test"), &get("b.test"), false, false);
        assert_eq!(v.asked.as_deref(), Some("b.test"));
        assert!(matches!(v.peeked, Peek::Http { .. }));
        // An absolute target names the host too.
        let absolute = b"GET http://b.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n";
        assert!(refused(Some("a.test"), absolute, false).is_some());
    }

    #[test]
    fn connect_lines_are_checked_like_any_request() {
        let tunnel = b"CONNECT b.test:443 HTTP/1.1\r\nHost: b.test:443\r\n\r\n";
        let rule = refused(Some("a.test"), tunnel, false).unwrap();
        assert!(rule.contains("asked for b.test"), "{rule}");
        let own = b"CONNECT a.test:443 HTTP/1.1\r\nHost: a.test:443\r\n\r\n";
        assert_eq!(refused(Some("a.test"), own, false), None);
    }

    #[test]
    fn requests_servers_could_read_otherwise_are_refused_by_name() {
        let twice = b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n";
        let rule = refused(Some("a.test"), twice, false).unwrap();
        assert!(rule.contains("cannot check"), "{rule}");
        let h2c = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n";
        let rule = refused(Some("a.test"), h2c, false).unwrap();
        assert!(rule.contains("h2c"), "{rule}");
        // By address there is no host to front.
        assert_eq!(refused(None, h2c, false), None);
    }

    #[test]
    fn an_unfinished_head_is_refused_open_or_closed() {
        // Still open: more may come, and what it asks for is unknown.
        let cut = b"GET http://b.test/ HTTP/1.1";
        let rule = refused(Some("a.test"), cut, false).unwrap();
        assert!(rule.contains("never said"), "{rule}");
        // Closed: read as a server reads it at the end of its input, as if its last line were
        // ended; a request line ended so is not one every server reads alike.
        let rule = refused(Some("a.test"), cut, true).unwrap();
        assert!(rule.contains("not ended by CRLF"), "{rule}");
        let rule = refused(Some("a.test"), b"GET / HTTP/1.1\r\nHost: a.test", true).unwrap();
        assert!(rule.contains("never said"), "{rule}");
    }

    #[test]
    fn an_sslv2_hello_names_no_host_and_is_refused_by_name() {
        // OpenSSL serves this form (it read it as a hello in review); it has no server name.
        let mut hello = vec![0x80, 0x2e, 1, 3, 3, 0, 3, 0, 0, 0, 32, 0, 0, 0x2f];
        hello.extend_from_slice(&[0x11; 32]);
        let rule = refused(Some("a.test"), &hello, false).unwrap();
        assert!(rule.contains("SSLv2-format ClientHello"), "{rule}");
        assert_eq!(refused(None, &hello, false), None);
    }

    #[test]
    fn a_postgres_ssl_request_passes_to_be_followed_and_gssenc_is_refused_by_name() {
        let ssl = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
        let v = verdict(Some("a.test"), &ssl, false, false);
        assert_eq!((v.peeked, v.refusal), (Peek::PostgresTls, None));
        let gss = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30];
        let rule = refused(Some("a.test"), &gss, false).unwrap();
        assert!(rule.contains("GSSENCRequest"), "{rule}");
        assert_eq!(refused(None, &gss, false), None);
    }

    #[test]
    fn garbage_names_no_host_and_passes() {
        for bytes in [
            &b"\x00\x01\x02garbage"[..],
            b"SSH-2.0-OpenSSH_9.6\r\n",
            b"hello\n",
        ] {
            let v = verdict(Some("a.test"), bytes, false, false);
            assert_eq!(v.refusal, None, "{bytes:?}");
            assert_eq!(v.asked, None);
        }
    }

    #[test]
    fn silence_is_refused_by_name_and_a_server_speaking_first_is_not_checked() {
        let rule = refused(Some("a.test"), b"", false).unwrap();
        assert!(rule.contains("neither side said anything"), "{rule}");
        assert_eq!(refused(None, b"", false), None);
        assert_eq!(verdict(Some("a.test"), b"", false, true).refusal, None);
    }
}
