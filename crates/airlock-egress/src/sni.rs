//! What the first bytes of a connection say it is for: the server name of a TLS ClientHello, or
//! the Host of an HTTP/1 request. The gate checks it against the name the sandbox connected by,
//! so that a connection to an allowed name cannot carry a request for another (domain fronting).

/// The most the gate reads before it decides.
pub const MAX_PEEK: usize = 16 * 1024;

/// What the bytes so far show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Peek {
    /// Not enough yet: read more (up to [`MAX_PEEK`]).
    NeedMore,
    /// A TLS ClientHello, with its server name if it sent one.
    Tls { server_name: Option<String> },
    /// An HTTP/1 request: method, and the host it names (Host header, or the target of an
    /// absolute-form or CONNECT request), without port.
    Http {
        method: String,
        host: Option<String>,
        /// The port the target names (CONNECT, absolute form), else the Host header's.
        port: Option<u16>,
    },
    /// An HTTP/1 request (its first line says so) that servers could read in different ways,
    /// or that names its host in a way the gate does not follow: refused on a named connection.
    Malformed { why: String },
    /// Started like TLS or HTTP but did not finish within [`MAX_PEEK`] bytes.
    TooLong,
    /// PostgreSQL's request for TLS (SSLRequest): a TLS handshake follows once the server
    /// agrees, and its hellos are checked as any.
    PostgresTls,
    /// Neither (or malformed).
    Other,
}

pub(crate) fn u16_at(b: &[u8], at: usize) -> Option<usize> {
    Some(usize::from(u16::from_be_bytes([
        *b.get(at)?,
        *b.get(at + 1)?,
    ])))
}

/// Look at the first bytes a client sent.
pub fn peek(bytes: &[u8]) -> Peek {
    // Servers skip empty lines before a request (RFC 9112 2.2); so must the check.
    let start = bytes
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(bytes.len());
    let bytes = &bytes[start..];
    if bytes.starts_with(&crate::tls::POSTGRES_SSL_REQUEST) {
        return Peek::PostgresTls;
    }
    if bytes.starts_with(&POSTGRES_GSSENC_REQUEST) {
        // Answered 'G', GSSAPI encryption follows (which the gate cannot read); answered 'N', the
        // client may ask for TLS next. Neither is followed: refused on a connection by name.
        return Peek::Malformed {
            why: "a PostgreSQL GSSENCRequest, after which the gate cannot follow the connection (use gssencmode=disable)".into(),
        };
    }
    if sslv2_client_hello(bytes) {
        // OpenSSL still serves this old form of hello: TLS 1.2 or older, without extensions, so
        // without a server name, as a v3 hello naming none.
        return tls_malformed("an SSLv2-format ClientHello, which names no host");
    }
    match bytes.first() {
        None => Peek::NeedMore,
        // A TLS record (change_cipher_spec, alert, handshake, application data, heartbeat).
        Some(0x14..=0x18) => tls(bytes),
        // git's own protocol (git://): a pkt-line, four hex digits of length first, and no
        // newline: not HTTP, and nothing more to wait for.
        Some(_) if git_pkt_line(bytes) => Peek::Other,
        Some(_) => http(bytes),
    }
}

/// `0032git-upload-pack /repo.git\0host=…\0`: the first packet of a git:// request, whole and
/// nothing else: its length is the bytes received, it names a git service, its fields end in
/// NUL, and it has no line end or `HTTP/` that an HTTP server could read a request line from
/// (`0032git-x / HTTP/1.1` is a valid HTTP method and request to some servers).
fn git_pkt_line(bytes: &[u8]) -> bool {
    let Some(length) = bytes
        .get(..4)
        .and_then(|hex| std::str::from_utf8(hex).ok())
        .and_then(|hex| usize::from_str_radix(hex, 16).ok())
    else {
        return false;
    };
    let packet = &bytes[4..];
    let service = [
        &b"git-upload-pack "[..],
        b"git-receive-pack ",
        b"git-upload-archive ",
    ]
    .iter()
    .any(|service| packet.starts_with(service));
    let mentions_http = packet.windows(5).any(|w| w.eq_ignore_ascii_case(b"HTTP/"));
    length == bytes.len()
        && service
        && packet.ends_with(b"\0")
        && !packet.iter().any(|b| matches!(b, b'\r' | b'\n'))
        && !mentions_http
}

/// PostgreSQL's GSSENCRequest: length 8, then the code 80877104.
const POSTGRES_GSSENC_REQUEST: [u8; 8] = [0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x30];

/// An SSLv2-format ClientHello (RFC 6101 E.2, RFC 5246 E.2): a two-byte length with its high bit
/// set, message type 1, and a version of SSL 2.0 or 3.x.
fn sslv2_client_hello(bytes: &[u8]) -> bool {
    matches!(bytes, [first, _, 1, 0, 2, ..] | [first, _, 1, 3, 0..=4, ..] if first & 0x80 != 0)
}

fn tls_malformed(why: &str) -> Peek {
    Peek::Malformed {
        why: format!("a TLS start the gate cannot read the server name of: {why}"),
    }
}

/// Bytes some server takes for space between a request line's words, or skips before it:
/// Python's `str.split()` takes all of these.
pub(crate) fn split_space(b: u8) -> bool {
    matches!(
        b,
        b'\t' | b'\n' | 0x0b | 0x0c | b'\r' | 0x1c..=0x1f | b' ' | 0x85 | 0xa0
    )
}

/// Reassemble the handshake bytes of the TLS records received so far.
fn tls(bytes: &[u8]) -> Peek {
    let mut handshake = Vec::new();
    let mut at = 0;
    loop {
        if bytes.len() < at + 5 {
            return if bytes.len() >= MAX_PEEK {
                Peek::TooLong
            } else {
                Peek::NeedMore
            };
        }
        // Servers accept records other than the hello before it (a warning alert, say) and odd
        // record versions: whatever the gate cannot read as a plain hello is refused.
        if bytes[at] != 0x16 {
            return tls_malformed("a record other than the ClientHello first");
        }
        if bytes[at + 1] != 3 || bytes[at + 2] > 4 {
            return tls_malformed("an unknown record version");
        }
        let Some(len) = u16_at(bytes, at + 3) else {
            return Peek::NeedMore;
        };
        if bytes.len() < at + 5 + len {
            return if bytes.len() >= MAX_PEEK {
                Peek::TooLong
            } else {
                Peek::NeedMore
            };
        }
        handshake.extend_from_slice(&bytes[at + 5..at + 5 + len]);
        at += 5 + len;
        // Handshake header: type (1), length (3).
        if handshake.len() >= 4 {
            if handshake[0] != 1 {
                return tls_malformed("a handshake message other than ClientHello first");
            }
            let body = (usize::from(handshake[1]) << 16)
                | (usize::from(handshake[2]) << 8)
                | usize::from(handshake[3]);
            if body > MAX_PEEK {
                return Peek::TooLong;
            }
            if handshake.len() >= 4 + body {
                return match client_hello_server_name(&handshake[4..4 + body]) {
                    Ok(name) => Peek::Tls { server_name: name },
                    Err(why) => tls_malformed(why),
                };
            }
        }
    }
}

/// The server name of a ClientHello body (None: it names none), or why it cannot be read.
pub(crate) fn client_hello_server_name(hello: &[u8]) -> Result<Option<String>, &'static str> {
    const SHORT: &str = "a ClientHello cut short";
    // version (2), random (32)
    let mut at = 34;
    let session = usize::from(*hello.get(at).ok_or(SHORT)?);
    at += 1 + session;
    let suites = u16_at(hello, at).ok_or(SHORT)?;
    at += 2 + suites;
    let compression = usize::from(*hello.get(at).ok_or(SHORT)?);
    at += 1 + compression;
    if at == hello.len() {
        return Ok(None);
    }
    let extensions = u16_at(hello, at).ok_or(SHORT)?;
    at += 2;
    let end = at + extensions;
    if end != hello.len() {
        return Err("extensions that do not fill the ClientHello");
    }
    let mut server_name = None;
    let mut seen_server_name = false;
    while at < end {
        let kind = u16_at(hello, at).ok_or(SHORT)?;
        let len = u16_at(hello, at + 2).ok_or(SHORT)?;
        let data = hello.get(at + 4..at + 4 + len).ok_or(SHORT)?;
        at += 4 + len;
        match kind {
            // encrypted_client_hello: the name the server acts on is inside, encrypted.
            0xfe0d => return Err("an Encrypted Client Hello"),
            0 if seen_server_name => return Err("two server_name extensions"),
            0 => {
                seen_server_name = true;
                server_name = Some(sni_name(data)?);
            }
            _ => {}
        }
    }
    Ok(server_name)
}

/// The one host name of a server_name extension: length (2), then one entry of type 0 (1),
/// length (2), name; a name of letters, digits, '-', '_' and dots.
fn sni_name(data: &[u8]) -> Result<String, &'static str> {
    let bad = "a server_name extension the gate cannot read";
    let list = u16_at(data, 0).ok_or(bad)?;
    if list + 2 != data.len() || data.get(2) != Some(&0) {
        return Err(bad);
    }
    let name_len = u16_at(data, 3).ok_or(bad)?;
    if 5 + name_len != data.len() || name_len == 0 {
        return Err(bad);
    }
    let name = &data[5..];
    if !name
        .iter()
        .all(|&b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_' || b == b'.')
    {
        return Err("a server name that is not a host name");
    }
    Ok(String::from_utf8_lossy(name)
        .trim_end_matches('.')
        .to_ascii_lowercase())
}

/// An HTTP/1 request is anything a server could take for one: a method (a token, after what some
/// server skips), then a line that mentions `HTTP/`. Such bytes are read as strictly as the
/// strictest server would, and refused where servers differ; before the line is complete, the
/// gate waits for it (never calls it "not HTTP" early).
fn http(bytes: &[u8]) -> Peek {
    let need_more = || {
        if bytes.len() >= MAX_PEEK {
            Peek::TooLong
        } else {
            Peek::NeedMore
        }
    };
    let Some(method_start) = bytes.iter().position(|&b| !split_space(b)) else {
        return need_more();
    };
    let method = &bytes[method_start..];
    let method_len = method
        .iter()
        .position(|&b| split_space(b))
        .unwrap_or(method.len());
    if !method[..method_len].iter().all(|&b| crate::http1::tchar(b)) {
        // No server has such a method: not HTTP (a binary protocol, say).
        return Peek::Other;
    }
    let Some(line_end) = method[method_len..]
        .iter()
        .position(|&b| b == b'\n')
        .map(|at| method_start + method_len + at)
    else {
        return need_more();
    };
    let first_line = &bytes[..line_end];
    // Node's parser also serves RTSP/1.x and ICE/1.0 request lines as HTTP.
    let mentions = |word: &[u8]| {
        first_line
            .windows(word.len())
            .any(|w| w.eq_ignore_ascii_case(word))
    };
    if !mentions(b"HTTP/") && !mentions(b"RTSP/") && !mentions(b"ICE/") {
        return http09(bytes, first_line, line_end).unwrap_or_else(need_more);
    }
    if !first_line.ends_with(b"\r") {
        return Peek::Malformed {
            why: "a request line not ended by CRLF".into(),
        };
    }
    let Some(head_end) = bytes.windows(4).position(|w| w == b"\r\n\r\n") else {
        return need_more();
    };
    match crate::http1::parse_head(&bytes[..head_end + 4]) {
        Ok(head) => Peek::Http {
            method: head.method,
            host: head.host,
            port: head.port,
        },
        Err(why) => Peek::Malformed { why },
    }
}

/// A first line without a version: some other text protocol, or HTTP/0.9 (`GET /`), which names
/// no host itself; but servers that still read headers after it (Python's http.server) or take
/// the host from an absolute target (Werkzeug) would serve another host's page. So two words
/// with an absolute http(s) target are refused, and otherwise the next line decides: a header
/// is refused, anything else is not HTTP. None: the next line has not come yet.
fn http09(bytes: &[u8], first_line: &[u8], line_end: usize) -> Option<Peek> {
    let words: Vec<&[u8]> = first_line
        .split(|&b| split_space(b))
        .filter(|word| !word.is_empty())
        .collect();
    let [_, target] = words.as_slice() else {
        return Some(Peek::Other);
    };
    let absolute = [&b"http://"[..], b"https://"].iter().any(|scheme| {
        target.len() >= scheme.len() && target[..scheme.len()].eq_ignore_ascii_case(scheme)
    });
    if absolute {
        return Some(Peek::Malformed {
            why: "a request line without a version for an absolute URL (some servers serve it for that URL's host)".into(),
        });
    }
    let rest = &bytes[line_end + 1..];
    let next_end = rest.iter().position(|&b| b == b'\n')?;
    if rest[..next_end].contains(&b':') {
        return Some(Peek::Malformed {
            why: "a request line without a version followed by headers (some servers read a Host from them)".into(),
        });
    }
    Some(Peek::Other)
}

/// A ClientHello as a TLS client sends it, with `server_name` as its SNI (or none); for the
/// tests of this module and of the gate.
#[cfg(test)]
pub(crate) fn client_hello(server_name: Option<&str>) -> Vec<u8> {
    let mut extensions = Vec::new();
    if let Some(name) = server_name {
        let mut list = vec![0u8];
        list.extend_from_slice(&(name.len() as u16).to_be_bytes());
        list.extend_from_slice(name.as_bytes());
        let mut data = (list.len() as u16).to_be_bytes().to_vec();
        data.extend_from_slice(&list);
        extensions.extend_from_slice(&0u16.to_be_bytes());
        extensions.extend_from_slice(&(data.len() as u16).to_be_bytes());
        extensions.extend_from_slice(&data);
    }
    // A supported_versions extension too, so SNI is not alone.
    extensions.extend_from_slice(&[0x00, 0x2b, 0x00, 0x03, 0x02, 0x03, 0x04]);
    let mut hello = vec![3, 3];
    hello.extend_from_slice(&[7u8; 32]);
    hello.push(0); // session id
    hello.extend_from_slice(&[0, 2, 0x13, 0x01]); // one cipher suite
    hello.extend_from_slice(&[1, 0]); // null compression
    hello.extend_from_slice(&(extensions.len() as u16).to_be_bytes());
    hello.extend_from_slice(&extensions);
    let mut handshake = vec![1, 0, (hello.len() >> 8) as u8, hello.len() as u8];
    handshake.extend_from_slice(&hello);
    let mut record = vec![0x16, 3, 1];
    record.extend_from_slice(&(handshake.len() as u16).to_be_bytes());
    record.extend_from_slice(&handshake);
    record
}

#[cfg(test)]
mod tests {
    #[test]
    fn a_git_protocol_request_is_not_http() {
        let packet = b"002fgit-upload-pack /repo.git\0host=a.test:9418\0";
        assert_eq!(packet.len(), 0x2f);
        assert_eq!(peek(packet), Peek::Other);
        assert_eq!(peek(b"0032"), Peek::NeedMore);
        // An HTTP request whose method merely starts like one is HTTP, and checked as such.
        assert!(matches!(
            peek(b"0032git-x / HTTP/1.1\r\nHost: secret.test\r\n\r\n"),
            Peek::Http { host: Some(h), .. } if h == "secret.test"
        ));
        // A packet followed by more, or naming HTTP/, or without its NUL: not taken for git.
        let mut more = packet.to_vec();
        more.extend_from_slice(b"GET / HTTP/1.1\r\n");
        assert_ne!(peek(&more), Peek::Other);
        assert_ne!(peek(b"001bgit-upload-pack / HTTP/1\0"), Peek::Other);
    }

    #[test]
    fn http09_lines_that_could_carry_a_host_are_refused() {
        assert!(matches!(
            peek(b"GET http://secret.test/\r\n\r\n"),
            Peek::Malformed { .. }
        ));
        assert!(matches!(
            peek(b"GET /\r\nHost: secret.test\r\n\r\n"),
            Peek::Malformed { .. }
        ));
        assert_eq!(peek(b"GET /\r\n"), Peek::NeedMore);
        assert_eq!(peek(b"GET /\r\n\r\n"), Peek::Other);
        assert_eq!(peek(b"hello\r\n"), Peek::Other);
        assert_eq!(peek(b"QUIT\r\n"), Peek::Other);
    }

    use super::*;

    #[test]
    fn tls_server_names_are_read() {
        assert_eq!(
            peek(&client_hello(Some("Allowed.TEST"))),
            Peek::Tls {
                server_name: Some("allowed.test".into())
            }
        );
        assert_eq!(peek(&client_hello(None)), Peek::Tls { server_name: None });
    }

    #[test]
    fn a_partial_hello_asks_for_more_and_a_broken_one_is_other() {
        let hello = client_hello(Some("allowed.test"));
        for cut in [1, 4, 10, hello.len() - 1] {
            assert_eq!(peek(&hello[..cut]), Peek::NeedMore, "{cut}");
        }
        let mut broken = hello.clone();
        let len = broken.len();
        broken[len - 10] = 0xff; // an extension length past the end
        assert_ne!(
            peek(&broken),
            Peek::Tls {
                server_name: Some("allowed.test".into())
            }
        );
        assert!(matches!(
            peek(b"\x16\x03\x01\x00\x04\x02\x00\x00\x00"),
            Peek::Malformed { .. }
        ));
    }

    /// Found by the third review: TLS starts a server accepts but the gate could not read
    /// passed as "not TLS" with no check.
    #[test]
    fn tls_the_gate_cannot_read_is_refused() {
        let hello = client_hello(Some("evil.test"));
        let alert = [0x15, 3, 1, 0, 2, 1, 0x5a];
        let mut after_alert = alert.to_vec();
        after_alert.extend_from_slice(&hello);
        let mut odd_version = hello.clone();
        odd_version[1] = 0;
        let mut unprintable = client_hello(Some("xevil.test"));
        let at = unprintable
            .windows(10)
            .position(|w| w == b"xevil.test")
            .unwrap();
        unprintable[at] = 0xff;
        for bytes in [&after_alert, &odd_version, &unprintable] {
            assert!(matches!(peek(bytes), Peek::Malformed { .. }), "{bytes:?}");
        }
        // Encrypted Client Hello: the outer name is not the one served.
        let mut ech = client_hello(Some("allowed.test"));
        let ext = [0xfe, 0x0d, 0x00, 0x01, 0x00];
        ech.extend_from_slice(&ext);
        // Grow the record, handshake and extensions lengths by the extension's size.
        let grow = |bytes: &mut Vec<u8>, at: usize, width: usize| {
            let mut value = 0usize;
            for i in 0..width {
                value = value << 8 | usize::from(bytes[at + i]);
            }
            value += ext.len();
            for i in 0..width {
                bytes[at + width - 1 - i] = (value >> (8 * i)) as u8;
            }
        };
        grow(&mut ech, 3, 2);
        grow(&mut ech, 6, 3);
        // record (5), handshake header (4), version, random, session id, suites, compression
        grow(&mut ech, 5 + 4 + 2 + 32 + 1 + 4 + 2, 2);
        assert!(
            matches!(peek(&ech), Peek::Malformed { why } if why.contains("Encrypted Client Hello")),
            "{:?}",
            peek(&ech)
        );
    }

    #[test]
    fn a_hello_split_over_two_records_is_reassembled() {
        let one = client_hello(Some("allowed.test"));
        let handshake = &one[5..];
        let (a, b) = handshake.split_at(20);
        let mut two = Vec::new();
        for part in [a, b] {
            two.extend_from_slice(&[0x16, 3, 1]);
            two.extend_from_slice(&(part.len() as u16).to_be_bytes());
            two.extend_from_slice(part);
        }
        assert_eq!(
            peek(&two),
            Peek::Tls {
                server_name: Some("allowed.test".into())
            }
        );
    }

    #[test]
    fn http_hosts_are_read() {
        assert_eq!(
            peek(b"GET /x HTTP/1.1\r\nHost: Allowed.test:8080\r\nAccept: */*\r\n\r\n"),
            Peek::Http {
                method: "GET".into(),
                host: Some("allowed.test".into()),
                port: Some(8080)
            }
        );
        assert_eq!(
            peek(b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: allowed.test:443\r\n\r\n"),
            Peek::Http {
                method: "CONNECT".into(),
                host: Some("allowed.test".into()),
                port: Some(443)
            }
        );
        assert_eq!(
            peek(b"GET http://allowed.test/a HTTP/1.1\r\nHost: allowed.test\r\n\r\n"),
            Peek::Http {
                method: "GET".into(),
                host: Some("allowed.test".into()),
                port: None
            }
        );
        // A target and a Host that name different hosts: servers differ on which wins.
        assert!(matches!(
            peek(b"GET http://allowed.test/a HTTP/1.1\r\nHost: other.test\r\n\r\n"),
            Peek::Malformed { .. }
        ));
        assert_eq!(peek(b"GET / HTTP/1.1\r\nHost: a\r\n"), Peek::NeedMore);
        assert!(matches!(
            peek(b"GET / HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n"),
            Peek::Malformed { .. }
        ));
        // Empty lines before the request are skipped, as servers skip them.
        assert_eq!(
            peek(b"\r\n\r\nGET / HTTP/1.1\r\nHost: b.test\r\n\r\n"),
            Peek::Http {
                method: "GET".into(),
                host: Some("b.test".into()),
                port: None
            }
        );
        let mut long = b"GET / HTTP/1.1\r\nX: ".to_vec();
        long.extend(std::iter::repeat_n(b'a', MAX_PEEK));
        assert_eq!(peek(&long), Peek::TooLong);
        assert_eq!(peek(b"\x00\x01binary"), Peek::Other);
        // First requests a checker must not take for "not HTTP" (found by review).
        for request in [
            &b"GET / HTTP/1.1\r\nHost: denied.test\r\nX: \xff\r\n\r\n"[..],
            b"GET  / HTTP/1.1\r\nHost: denied.test\r\n\r\n",
        ] {
            assert!(
                matches!(peek(request), Peek::Malformed { .. } | Peek::Http { .. }),
                "{request:?}"
            );
        }
        assert_eq!(
            peek(b"get / HTTP/1.1\r\nHost: denied.test\r\n\r\n"),
            Peek::Http {
                method: "get".into(),
                host: Some("denied.test".into()),
                port: None
            }
        );
        // Found by the second review: bytes that made the gate say "not HTTP" too early.
        assert_eq!(peek(b"GET / HTTP/1.1\r"), Peek::NeedMore);
        assert_eq!(peek(b"GET /\x80"), Peek::NeedMore);
        for request in [
            &b"_X / HTTP/1.1\r\nHost: allowed.test\r\n\r\n"[..],
            b"1X / HTTP/1.1\r\nHost: allowed.test\r\n\r\n",
            b"\x0bGET / HTTP/1.1\r\nHost: denied.test\r\n\r\n",
            b"GET\x0b/ HTTP/1.1\r\nHost: denied.test\r\n\r\n",
            b"GET / HTTP/1.1\nHost: denied.test\n\n",
        ] {
            assert!(
                !matches!(peek(request), Peek::Other | Peek::NeedMore),
                "{request:?}"
            );
        }
        // Binary protocols are not held up: PostgreSQL's request for TLS (followed, as TLS, by
        // the gate) and its startup packet, a length first.
        assert_eq!(peek(b"\x00\x00\x00\x08\x04\xd2\x16\x2f"), Peek::PostgresTls);
        assert_eq!(peek(b"\x00\x00\x00\x09\x00\x03\x00\x00\x00"), Peek::Other);
        assert_eq!(peek(b"A\x00\x00\x00\xdd\x07"), Peek::Other);
        // RTSP and ICE request lines, which Node serves as HTTP.
        for request in [
            &b"GET / RTSP/1.0\r\nHost: evil.test\r\n\r\n"[..],
            b"SOURCE / ICE/1.0\r\nHost: evil.test\r\n\r\n",
        ] {
            assert!(
                matches!(peek(request), Peek::Malformed { .. }),
                "{request:?}"
            );
        }
        // A text protocol that is not HTTP, once its first line is there (two words: once the
        // next line shows no header).
        assert_eq!(peek(b"SEND\n"), Peek::Other);
        assert_eq!(peek(b"GET 1000\n"), Peek::NeedMore);
        assert_eq!(peek(b"GET 1000\nmore\n"), Peek::Other);
        assert_eq!(peek(b"GET /"), Peek::NeedMore);
    }
}
