//! airlock's HTTP proxy (HTTP_PROXY and friends point at it): a CONNECT host:port, or an
//! absolute-form http:// request, is decided as the gate decides a connection, then goes on as
//! a connection to that host. Reading the request ([`read_request`]) and deciding it
//! ([`decide_request`]) are pure.

use std::io::{self, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};

use super::relay::{first_bytes, relay_with, FirstBytes, Listed, Target};
use super::upstream::{self, Early};
use super::{deny, lookup, NetEvent, NetEventKind, Rules, State};
use crate::rules::Decision;
use crate::sni::{self, Peek};

/// What a client of the proxy asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Asked {
    /// As the request named it: a name or an address.
    pub(super) host: String,
    pub(super) port: u16,
    /// CONNECT: a tunnel; otherwise a plain-HTTP request the proxy forwards.
    pub(super) tunnel: bool,
}

/// Read a proxy request from the first bytes of its connection. Err: why it is not one the
/// proxy serves (answered 400).
pub(super) fn read_request(head: &[u8]) -> Result<Asked, String> {
    let (method, host, port) = match sni::peek(head) {
        Peek::Http {
            method,
            host: Some(host),
            port,
        } => (method, host, port),
        Peek::Malformed { why } => return Err(format!("a request the gate cannot check: {why}")),
        _ => return Err("not a proxy request".into()),
    };
    let tunnel = method == "CONNECT";
    // The target's own scheme (` https://` in a header after it is no port of the request's),
    // after the empty lines `peek` skips; `peek` took it as METHOD SP TARGET SP VERSION.
    let start = head.iter().position(|&b| b != b'\r' && b != b'\n');
    let https = start
        .and_then(|start| head[start..].split(|&b| b == b' ').nth(1))
        .is_some_and(|target| target.len() >= 8 && target[..8].eq_ignore_ascii_case(b"https://"));
    let port = port.unwrap_or(if tunnel || https { 443 } else { 80 });
    Ok(Asked { host, port, tunnel })
}

/// Decide a proxy request as the gate decides a connection: a name the profile may not resolve
/// is refused before the host is asked for it; an address is decided as a bare address; a name
/// is resolved (by `resolve`: the host's address, and whether it is the user's `--resolve`)
/// and decided with its address. The decision, and the address when there is one.
pub(super) fn decide_request(
    asked: &Asked,
    rules: Rules<'_>,
    resolve: impl FnOnce(&str, u16) -> io::Result<(SocketAddr, bool)>,
) -> (Decision, Option<SocketAddr>) {
    let Asked { host, port, .. } = asked;
    // Refused for want of an allow entry and named by `ask`: `ask ENTRY`, for a person.
    let or_ask =
        |decision: Decision, name: Option<&str>, addr: SocketAddr, trusted: bool| match rules
            .asks(name, addr, trusted)
            .filter(|_| !decision.allowed)
        {
            Some(entry) => deny(format!("ask {entry}")),
            None => decision,
        };
    if let Ok(ip) = host.parse::<IpAddr>() {
        let addr = SocketAddr::new(ip, *port);
        return (
            or_ask(rules.decide(None, addr, false), None, addr, false),
            Some(addr),
        );
    }
    // A name only `ask` covers is put to a person before the host looks it up (the caller asks,
    // then calls `Rules::after_approval`).
    if let Some(entry) = rules.asks_before_lookup(host) {
        return (deny(format!("ask {entry}")), None);
    }
    let may = rules.may_resolve(host);
    if !may.allowed {
        return (may, None);
    }
    match resolve(host, *port) {
        Ok((addr, trusted)) => (
            or_ask(
                rules.decide(Some(host), addr, trusted),
                Some(host),
                addr,
                trusted,
            ),
            Some(addr),
        ),
        Err(e) => (
            deny(format!("cannot resolve {host} on the host: {e}")),
            None,
        ),
    }
}

/// Serve one connection to the proxy.
/// `program`: the program that connected to the proxy, if the gate saw it.
pub(super) fn serve(
    mut client: TcpStream,
    state: &State,
    listed: &Listed,
    program: Option<String>,
) {
    let FirstBytes {
        bytes: head,
        closed,
    } = first_bytes(&mut client);
    if head.is_empty() && closed {
        return; // connected and closed without a word: nothing was asked
    }
    let asked = match read_request(&head) {
        Ok(asked) => asked,
        Err(rule) => return refuse(&mut client, "400 Bad Request", &deny(rule)),
    };
    let (mut decision, mut addr) = decide_request(&asked, state.rules(), |name, port| {
        lookup::resolve(state, name, port)
    });
    // Held while a person decides, as a connect is; a name asked before its lookup is looked
    // up once they said yes.
    if let (false, Some(entry)) = (decision.allowed, decision.rule.strip_prefix("ask ")) {
        decision = state.approve(&super::Question {
            host: asked.host.clone(),
            port: asked.port,
            program: program.clone(),
            entry: entry.to_string(),
        });
        if decision.allowed && addr.is_none() {
            (decision, addr) =
                state
                    .rules()
                    .after_approval(&asked.host, asked.port, decision, |name, port| {
                        lookup::resolve(state, name, port)
                    });
        }
    }
    let mut e = NetEvent::new(NetEventKind::Connect, &decision).about(
        Some(asked.host.clone()),
        addr.map(|a| a.ip()),
        Some(asked.port),
    );
    e.protocol = "http-proxy";
    e.program = program.clone();
    state.log(&e);
    let Some(addr) = addr.filter(|_| decision.allowed) else {
        return refuse(&mut client, "403 Forbidden", &decision);
    };
    let name = asked.host.parse::<IpAddr>().is_err().then_some(asked.host);
    // The destination first: a client told "established" (or sent an empty reply) when the
    // server is not there would take a closed port for an open one.
    let Ok(upstream) = upstream::connect(state, name.as_deref(), addr) else {
        // The addresses tried are in the audit log, not told to the sandbox (they are the
        // host's answers, which its synthetic addresses stand for).
        let decision = deny("the destination did not take the connection");
        return refuse(&mut client, "502 Bad Gateway", &decision);
    };
    let first = if asked.tunnel {
        if client
            .write_all(b"HTTP/1.1 200 Connection established\r\n\r\n")
            .is_err()
        {
            return;
        }
        // What the client sent after the CONNECT head without waiting for the answer (its TLS
        // hello, say) is the tunnel's first bytes.
        after_head(&head)
    } else {
        // The request goes on in origin form (`GET /path`), as servers expect; its Host header
        // is then checked against the target like any connection's.
        origin_form(&head)
    };
    let target = Target {
        name,
        addr,
        proxy: false,
        forwarded: !asked.tunnel,
        program,
    };
    relay_with(
        client,
        target,
        state,
        first,
        Some(Early::Ready(upstream)),
        listed,
    );
}

/// Answer the client with an error `status`, naming the rule that refused it.
pub(super) fn refuse(client: &mut TcpStream, status: &str, decision: &Decision) {
    let body = format!(
        "{{\"error\":\"refused by airlock\",\"rule\":{}}}\n",
        json_string(&decision.rule)
    );
    let _ = client.write_all(
        format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
            body.len()
        )
        .as_bytes(),
    );
}

/// The bytes after a request's head.
fn after_head(head: &[u8]) -> Vec<u8> {
    head.windows(4)
        .position(|w| w == b"\r\n\r\n")
        .map_or(Vec::new(), |end| head[end + 4..].to_vec())
}

/// `GET http://host:port/path HTTP/1.1` becomes `GET /path HTTP/1.1`; the rest is kept.
fn origin_form(head: &[u8]) -> Vec<u8> {
    let Some(line_end) = head.windows(2).position(|w| w == b"\r\n") else {
        return head.to_vec();
    };
    let line = String::from_utf8_lossy(&head[..line_end]);
    let mut parts = line.splitn(3, ' ');
    let (Some(method), Some(target), Some(version)) = (parts.next(), parts.next(), parts.next())
    else {
        return head.to_vec();
    };
    let rest = target
        .strip_prefix("http://")
        .or_else(|| target.strip_prefix("https://"))
        .unwrap_or(target);
    let path = match rest.find('/') {
        Some(slash) if rest != target => &rest[slash..],
        None if rest != target => "/",
        _ => target,
    };
    let mut out = format!("{method} {path} {version}").into_bytes();
    let Some(head_end) = head.windows(4).position(|w| w == b"\r\n\r\n") else {
        out.extend_from_slice(&head[line_end..]);
        return out;
    };
    // One request per proxy connection: the client reuses a kept-alive proxy connection for
    // its next request, to this host or another, and the gate relays to one destination and
    // checks requests as a server would read them (origin form). "Connection: close" makes
    // client and server open a new one instead. An upgrade keeps its Connection header: that
    // connection is the upgraded protocol's alone anyway.
    let headers = &head[line_end + 2..head_end + 2];
    let name_is = |line: &[u8], name: &[u8]| {
        line.len() > name.len()
            && line[..name.len()].eq_ignore_ascii_case(name)
            && line[name.len()] == b':'
    };
    let upgrade = headers.split(|b| *b == b'\n').any(|line| {
        name_is(line, b"connection")
            && String::from_utf8_lossy(line)
                .to_ascii_lowercase()
                .contains("upgrade")
    });
    out.extend_from_slice(b"\r\n");
    for line in headers.split_inclusive(|b| *b == b'\n') {
        let hop_by_hop = ["connection", "proxy-connection", "keep-alive"]
            .iter()
            .any(|name| name_is(line, name.as_bytes()));
        if !hop_by_hop || upgrade {
            out.extend_from_slice(line);
        }
    }
    if !upgrade {
        out.extend_from_slice(b"Connection: close\r\n");
    }
    out.extend_from_slice(b"\r\n");
    out.extend_from_slice(&head[head_end + 4..]);
    out
}

/// `text` as a JSON string, quotes and all.
pub(crate) fn json_string(text: &str) -> String {
    let mut out = String::from("\"");
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            c if (c as u32) < 0x20 => out.push_str(&format!("\\u{:04x}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    use crate::rules::{Destination, Egress};

    fn asked(host: &str, port: u16, tunnel: bool) -> Asked {
        Asked {
            host: host.into(),
            port,
            tunnel,
        }
    }

    #[test]
    fn connect_lines_and_absolute_requests_are_read() {
        for (head, expected) in [
            (
                &b"CONNECT a.test:8443 HTTP/1.1\r\nHost: a.test:8443\r\n\r\n"[..],
                asked("a.test", 8443, true),
            ),
            (
                b"CONNECT 10.0.0.5:5432 HTTP/1.1\r\n\r\n",
                asked("10.0.0.5", 5432, true),
            ),
            (
                b"GET http://a.test/x HTTP/1.1\r\nHost: a.test\r\n\r\n",
                asked("a.test", 80, false),
            ),
            (
                b"GET http://a.test:8080/ HTTP/1.1\r\nHost: a.test:8080\r\n\r\n",
                asked("a.test", 8080, false),
            ),
            // An https:// target without a port is for 443.
            (
                b"GET https://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n",
                asked("a.test", 443, false),
            ),
            // An origin-form request names its host in Host, and is served for it.
            (
                b"GET / HTTP/1.1\r\nHost: a.test\r\n\r\n",
                asked("a.test", 80, false),
            ),
        ] {
            assert_eq!(
                read_request(head),
                Ok(expected),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
    }

    #[test]
    fn what_is_not_a_proxy_request_says_so() {
        for head in [
            &b"hello\r\n\r\n"[..],
            b"\x16\x03\x01\x00",
            b"CONNECT a.te",
            b"",
        ] {
            assert_eq!(
                read_request(head),
                Err("not a proxy request".into()),
                "{}",
                String::from_utf8_lossy(head)
            );
        }
        for head in [
            &b"GET http://a.test/ HTTP/1.1\r\nHost: a.test\r\nHost: b.test\r\n\r\n"[..],
            b"GET / HTTP/1.1\r\n\r\n",
        ] {
            let why = read_request(head).unwrap_err();
            assert!(
                why.starts_with("a request the gate cannot check: "),
                "{why}"
            );
        }
    }

    fn egress() -> Egress {
        let d = |text: &str| Destination::parse(text).unwrap();
        Egress::Allow {
            allow: vec![d("github.com"), d("10.0.0.5:5432"), d("local.test")],
            deny: vec![],
        }
    }

    fn at(text: &str) -> SocketAddr {
        text.parse().unwrap()
    }

    fn no_lookup(name: &str, _: u16) -> io::Result<(SocketAddr, bool)> {
        panic!("{name} was looked up")
    }

    #[test]
    fn requests_are_decided_as_connections() {
        let egress = egress();
        let rules = Rules {
            egress: &egress,
            host_addresses: &[],
            ask: None,
        };
        let public = |_: &str, port| {
            Ok((
                SocketAddr::new("140.82.112.3".parse().unwrap(), port),
                false,
            ))
        };
        let (decision, addr) = decide_request(&asked("github.com", 443, true), rules, public);
        assert!(decision.allowed, "{}", decision.rule);
        assert_eq!(addr, Some(at("140.82.112.3:443")));
        // A name the profile may not resolve is not looked up.
        let (decision, addr) = decide_request(&asked("example.com", 443, true), rules, no_lookup);
        assert_eq!(decision.rule, "no allow entry names it");
        assert_eq!(addr, None);
        // An allowed name whose host address is private is refused (no SSRF through DNS)...
        let private =
            |_: &str, port| Ok((SocketAddr::new("192.168.1.1".parse().unwrap(), port), false));
        let (decision, _) = decide_request(&asked("github.com", 443, true), rules, private);
        assert!(!decision.allowed);
        assert!(decision.rule.contains("private"), "{}", decision.rule);
        // ...unless the user mapped it there themselves.
        let trusted =
            |_: &str, port| Ok((SocketAddr::new("127.0.0.1".parse().unwrap(), port), true));
        let (decision, addr) = decide_request(&asked("local.test", 80, false), rules, trusted);
        assert!(decision.allowed, "{}", decision.rule);
        assert_eq!(addr, Some(at("127.0.0.1:80")));
        let failing = |_: &str, _| Err(io::Error::other("no address"));
        let (decision, addr) = decide_request(&asked("github.com", 443, true), rules, failing);
        assert_eq!(
            decision.rule,
            "cannot resolve github.com on the host: no address"
        );
        assert_eq!(addr, None);
    }

    #[test]
    fn addresses_are_decided_as_bare_addresses() {
        let egress = egress();
        let host = ["45.45.45.45".parse().unwrap()];
        let rules = Rules {
            egress: &egress,
            host_addresses: &host,
            ask: None,
        };
        let (decision, addr) = decide_request(&asked("10.0.0.5", 5432, true), rules, no_lookup);
        assert!(decision.allowed, "{}", decision.rule);
        assert_eq!(addr, Some(at("10.0.0.5:5432")));
        let (decision, _) = decide_request(&asked("10.0.0.5", 22, true), rules, no_lookup);
        assert!(!decision.allowed);
        let (decision, _) = decide_request(&asked("140.82.112.3", 443, true), rules, no_lookup);
        assert!(
            decision.rule.contains("a bare address"),
            "{}",
            decision.rule
        );
        let (decision, _) = decide_request(&asked("45.45.45.45", 80, false), rules, no_lookup);
        assert!(
            decision.rule.contains("this host's own"),
            "{}",
            decision.rule
        );
    }

    #[test]
    fn proxy_requests_go_on_in_origin_form() {
        assert_eq!(
            origin_form(b"GET http://a.test:8080/x/y?z HTTP/1.1\r\nHost: a.test\r\n\r\n"),
            b"GET /x/y?z HTTP/1.1\r\nHost: a.test\r\nConnection: close\r\n\r\n".to_vec()
        );
        assert_eq!(
            origin_form(b"GET http://a.test HTTP/1.1\r\n\r\n"),
            b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n".to_vec()
        );
        assert_eq!(
            origin_form(b"GET /already HTTP/1.1\r\n\r\n"),
            b"GET /already HTTP/1.1\r\nConnection: close\r\n\r\n".to_vec()
        );
        // Kept-alive and proxy hop-by-hop headers go; a body after the head is kept as it is.
        assert_eq!(
            origin_form(
                b"POST http://a.test/p HTTP/1.1\r\nHost: a.test\r\nProxy-Connection: Keep-Alive\r\nconnection: keep-alive\r\nKeep-Alive: 5\r\nContent-Length: 2\r\n\r\nhi"
            ),
            b"POST /p HTTP/1.1\r\nHost: a.test\r\nContent-Length: 2\r\nConnection: close\r\n\r\nhi".to_vec()
        );
        // An upgrade keeps its Connection header.
        assert_eq!(
            origin_form(b"GET http://a.test/ws HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n"),
            b"GET /ws HTTP/1.1\r\nHost: a.test\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n".to_vec()
        );
    }

    #[test]
    fn json_strings_are_escaped() {
        assert_eq!(json_string("a \"b\" \\ c"), "\"a \\\"b\\\" \\\\ c\"");
    }
}
