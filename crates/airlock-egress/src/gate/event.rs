//! What the gate tells its caller of each attempt: a [`NetEvent`], of one [`NetEventKind`].

use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

use crate::rules::Decision;

/// What an attempt was. Its name ([`NetEventKind::as_str`], and the same word in JSON) is
/// the audit log's action `net.<name>` and the `kind` of a record: users' tooling and the
/// hash-chained log read these words, so they never change.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum NetEventKind {
    /// A DNS query of the sandbox, answered or refused.
    Dns,
    /// A connection (a `connect`, or a request to airlock's proxy), let through or refused.
    Connect,
    /// A connection closed for naming another host in its first bytes than it connected to.
    Fronting,
    /// A relayed connection ended, with its bytes and duration.
    Closed,
    /// An allowed connection that could not reach its destination.
    Failed,
    /// The network was cut (`airlock kill --network`).
    Cut,
    /// An intercepted connection (see [`crate::inject`]) whose TLS could not be served.
    Tls,
    /// A secret put on the wire by the injector (its name, never its value).
    Secret,
    /// A secret's placeholder sent to a host that does not get the secret (or where it is not
    /// replaced): not replaced. Or a secret's value found in an answer's header: replaced by
    /// its placeholder.
    Placeholder,
    /// A CONNECT, an upgrade or a method that reflects the request (TRACE) inside an
    /// intercepted connection, refused.
    Tunnel,
    /// A request to a host with `[[network.http]]` rules: let through or refused (with its
    /// method and path, never its query); or a connection to such a host that is not TLS, so
    /// that its requests could not be read, refused.
    Request,
}

impl NetEventKind {
    /// Every kind, for the tests that hold the words fixed.
    #[cfg(test)]
    pub(crate) const ALL: [NetEventKind; 11] = [
        NetEventKind::Dns,
        NetEventKind::Connect,
        NetEventKind::Fronting,
        NetEventKind::Closed,
        NetEventKind::Failed,
        NetEventKind::Cut,
        NetEventKind::Tls,
        NetEventKind::Secret,
        NetEventKind::Placeholder,
        NetEventKind::Tunnel,
        NetEventKind::Request,
    ];

    /// The kind's word, as the audit log writes it.
    pub const fn as_str(self) -> &'static str {
        match self {
            NetEventKind::Dns => "dns",
            NetEventKind::Connect => "connect",
            NetEventKind::Fronting => "fronting",
            NetEventKind::Closed => "closed",
            NetEventKind::Failed => "failed",
            NetEventKind::Cut => "cut",
            NetEventKind::Tls => "tls",
            NetEventKind::Secret => "secret",
            NetEventKind::Placeholder => "placeholder",
            NetEventKind::Tunnel => "tunnel",
            NetEventKind::Request => "request",
        }
    }
}

impl fmt::Display for NetEventKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// One attempt of the sandbox on the network, as the caller logs it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct NetEvent {
    pub kind: NetEventKind,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ip: Option<IpAddr>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    pub protocol: &'static str,
    /// A DNS query's type ("A", "AAAA"…; see [`crate::dns::type_name`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub qtype: Option<&'static str>,
    pub allowed: bool,
    pub rule: String,
    /// What the first bytes named (TLS SNI or HTTP Host).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sni: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_out: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub bytes_in: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub duration_ms: Option<u64>,
    /// The program that connected (its `comm`, as the kernel names the process), when the gate
    /// saw the connect: a person's clue to which tool needs the host, not proof (a process
    /// names itself).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub program: Option<String>,
    /// The secret an injecting connection put on the wire, or whose placeholder it saw
    /// (kinds `secret` and `placeholder`): its name, never its value.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub secret: Option<String>,
    /// A request's method and path (kind `request`): the path without its query, which may
    /// carry a credential, and cut at 256 bytes.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub method: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
}

impl NetEvent {
    /// The destination as the sandbox named it: the name it asked for, or the address it
    /// connected to by address; None when the gate could not read it.
    pub fn host(&self) -> Option<String> {
        match (&self.name, self.ip) {
            (Some(name), _) => Some(name.clone()),
            (None, Some(ip)) => Some(ip.to_string()),
            (None, None) => None,
        }
    }

    /// A TCP event of `kind` for `decision`, about no destination yet.
    pub(crate) fn new(kind: NetEventKind, decision: &Decision) -> NetEvent {
        NetEvent {
            kind,
            name: None,
            ip: None,
            port: None,
            protocol: "tcp",
            qtype: None,
            allowed: decision.allowed,
            rule: decision.rule.clone(),
            sni: None,
            bytes_out: None,
            bytes_in: None,
            duration_ms: None,
            program: None,
            secret: None,
            method: None,
            path: None,
        }
    }

    /// The same event, about the destination `name` / `ip` / `port`.
    pub(crate) fn about(
        mut self,
        name: Option<String>,
        ip: Option<IpAddr>,
        port: Option<u16>,
    ) -> NetEvent {
        (self.name, self.ip, self.port) = (name, ip, port);
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The words were these string literals before the kind was typed; the audit log holds
    /// them, so a renamed variant must not change them.
    #[test]
    fn each_kind_is_written_as_the_word_the_audit_log_has() {
        let words: Vec<&str> = NetEventKind::ALL.iter().map(|k| k.as_str()).collect();
        assert_eq!(
            words,
            [
                "dns",
                "connect",
                "fronting",
                "closed",
                "failed",
                "cut",
                "tls",
                "secret",
                "placeholder",
                "tunnel",
                "request"
            ]
        );
        for kind in NetEventKind::ALL {
            assert_eq!(serde_json::to_value(kind).unwrap(), kind.as_str());
            assert_eq!(kind.to_string(), kind.as_str());
        }
    }

    #[test]
    fn an_event_serializes_as_it_did_with_a_string_kind() {
        let decision = Decision {
            allowed: false,
            rule: "no allow entry names it".into(),
        };
        let mut event = NetEvent::new(NetEventKind::Fronting, &decision).about(
            Some("a.test".into()),
            Some(IpAddr::from([93, 184, 216, 34])),
            Some(443),
        );
        event.sni = Some("b.test".into());
        assert_eq!(
            serde_json::to_string(&event).unwrap(),
            r#"{"kind":"fronting","name":"a.test","ip":"93.184.216.34","port":443,"protocol":"tcp","allowed":false,"rule":"no allow entry names it","sni":"b.test"}"#
        );
    }
}
