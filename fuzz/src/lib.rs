//! What the well-kept crates read from the same bytes as airlock's strict readers: the fuzz
//! targets compare the two, and wherever the reference reads a host airlock's reader did not,
//! airlock's reader must have refused.

/// A host name as the gate compares them: lower case, without a trailing dot or IPv6 brackets.
pub fn normal_host(host: &str) -> String {
    let host = host
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(host);
    host.trim_end_matches('.').to_ascii_lowercase()
}

/// An HTTP/1 request head as httparse and the `http` crate read it.
#[derive(Debug)]
pub struct HttpReference {
    pub method: String,
    pub target: String,
    pub version: u8,
    /// Every host some server could take the request to be for: the target's authority
    /// (CONNECT, absolute form) and each Host header's, where the `http` crate can read it.
    pub hosts: Vec<String>,
    /// The port the target names, else the Host header's (when there is one of them).
    pub port: Option<u16>,
    /// The `http` crate cannot read the target (CONNECT or absolute form) as a URL.
    pub target_unreadable: bool,
    /// The target is an `https://` URL.
    pub https: bool,
}

/// Read a complete head with httparse; None when httparse refuses it or wants more.
pub fn http_reference(head: &[u8]) -> Option<HttpReference> {
    // As many headers as the head could hold (airlock has no limit of its own but its size).
    let mut headers = vec![httparse::EMPTY_HEADER; head.len() / 3 + 1];
    let mut request = httparse::Request::new(&mut headers);
    match request.parse(head) {
        Ok(httparse::Status::Complete(_)) => {}
        _ => return None,
    }
    let method = request.method?.to_string();
    let target = request.path?.to_string();
    let version = request.version?;
    let mut hosts = Vec::new();
    let mut target_port = None;
    let mut https = false;
    let mut target_unreadable = false;
    if method == "CONNECT" {
        match target.parse::<http::uri::Authority>() {
            Ok(authority) => {
                hosts.push(normal_host(authority.host()));
                target_port = authority.port_u16();
            }
            Err(_) => target_unreadable = true,
        }
    } else if !target.starts_with('/') && target != "*" {
        match target.parse::<http::Uri>() {
            Ok(uri) => {
                if let Some(host) = uri.host() {
                    hosts.push(normal_host(host));
                }
                target_port = uri.port_u16();
                https = uri
                    .scheme_str()
                    .is_some_and(|s| s.eq_ignore_ascii_case("https"));
            }
            Err(_) => target_unreadable = true,
        }
        https |= target
            .get(..8)
            .is_some_and(|s| s.eq_ignore_ascii_case("https://"));
    }
    let mut host_ports = Vec::new();
    for header in request.headers.iter() {
        if !header.name.eq_ignore_ascii_case("host") {
            continue;
        }
        let value = String::from_utf8_lossy(header.value);
        if let Ok(authority) = value.trim().parse::<http::uri::Authority>() {
            hosts.push(normal_host(authority.host()));
            host_ports.push(authority.port_u16());
        }
    }
    let port = match (target_port, host_ports.as_slice()) {
        (Some(port), _) => Some(port),
        (None, [port]) if hosts.len() == 1 => *port,
        _ => None,
    };
    Some(HttpReference {
        method,
        target,
        version,
        hosts,
        port,
        https,
        target_unreadable,
    })
}

/// Check that airlock's reading of a head (`method`, `host`, `port`) agrees with httparse's:
/// a panic names the difference.
pub fn assert_http_agrees(head: &[u8], method: &str, host: Option<&str>, port: Option<u16>) {
    let Some(reference) = http_reference(head) else {
        // httparse refuses what airlock accepted: no host to disagree on, but every server
        // built on httparse would answer 400, so it is worth knowing.
        panic!(
            "airlock read a request httparse refuses: {:?}",
            String::from_utf8_lossy(head)
        );
    };
    assert_eq!(reference.method, method, "method");
    for other in &reference.hosts {
        assert_eq!(
            Some(other.as_str()),
            host,
            "httparse reads a host airlock did not: {:?}",
            String::from_utf8_lossy(head)
        );
    }
    // A target the `http` crate cannot read (a `<` in its query, say) names no host to it.
    if host.is_some() && reference.hosts.is_empty() && !reference.target_unreadable {
        panic!(
            "airlock read host {host:?} where httparse/http read none: {:?}",
            String::from_utf8_lossy(head)
        );
    }
    if reference.port.is_some() {
        assert_eq!(reference.port, port, "port");
    }
}

/// The handshake bytes of the TLS handshake records at the start of `bytes`, reassembled.
pub fn tls_handshake(bytes: &[u8]) -> Vec<u8> {
    let mut handshake = Vec::new();
    let mut at = 0;
    while let Some(header) = bytes.get(at..at + 5) {
        if header[0] != 0x16 {
            break;
        }
        let len = usize::from(u16::from_be_bytes([header[3], header[4]]));
        let Some(fragment) = bytes.get(at + 5..at + 5 + len) else {
            break;
        };
        handshake.extend_from_slice(fragment);
        at += 5 + len;
    }
    handshake
}

/// The server names tls-parser reads from a reassembled handshake: None when it cannot read a
/// ClientHello there; else every host name of every server_name extension.
pub fn tls_reference(handshake: &[u8]) -> Option<Vec<String>> {
    use tls_parser::{SNIType, TlsExtension, TlsMessageHandshake};
    let (_, message) = tls_parser::parse_tls_message_handshake(handshake).ok()?;
    let tls_parser::TlsMessage::Handshake(TlsMessageHandshake::ClientHello(hello)) = message else {
        return None;
    };
    let Some(ext) = hello.ext else {
        return Some(Vec::new());
    };
    let extensions = match tls_parser::parse_tls_client_hello_extensions(ext) {
        Ok((rest, extensions)) if rest.is_empty() => extensions,
        // tls-parser reads every extension's content and stops at the first it finds malformed
        // (signature algorithms, say), leaving the rest unread; a server reads the server_name
        // regardless: take each extension's bounds from the list, and the server_name ones
        // from tls-parser.
        _ => sni_extensions(ext)?,
    };
    let mut names = Vec::new();
    for extension in extensions {
        if let TlsExtension::SNI(list) = extension {
            for (kind, name) in list {
                if kind == SNIType::HostName {
                    names.push(normal_host(&String::from_utf8_lossy(name)));
                }
            }
        }
    }
    Some(names)
}

/// The server_name extensions of an extension list, each read by tls-parser; None when the list
/// itself does not add up or a server_name extension is malformed.
fn sni_extensions(mut ext: &[u8]) -> Option<Vec<tls_parser::TlsExtension<'_>>> {
    let mut found = Vec::new();
    while !ext.is_empty() {
        let header = ext.get(..4)?;
        let len = usize::from(u16::from_be_bytes([header[2], header[3]]));
        let block = ext.get(..4 + len)?;
        if header[..2] == [0, 0] {
            let (rest, extension) = tls_parser::parse_tls_extension(block).ok()?;
            if !rest.is_empty() {
                return None;
            }
            found.push(extension);
        }
        ext = &ext[4 + len..];
    }
    Some(found)
}
