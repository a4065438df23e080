//! One network attempt as the gate recorded it, and the draft's decision on it.

use std::net::{IpAddr, Ipv4Addr};

use airlock_policy::NetworkMode;
use airlock_rules::{Decision, Destination};
use serde_json::{Map, Value};

/// Where an attempt stopped to be decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) enum Stage {
    /// A DNS query of the sandbox: a name, no port.
    Dns,
    /// A TCP connection (or a request to airlock's proxy).
    Connect,
}

/// What the gate decided an attempt on, and what it decided then.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct Attempt {
    pub stage: Stage,
    pub name: Option<String>,
    /// The address the name resolved to on the host then (None: not resolved, or a DNS query).
    pub ip: Option<IpAddr>,
    pub port: Option<u16>,
    pub allowed: bool,
    pub rule: String,
}

/// An address that stands for "some public address" when a record has none: the draft then
/// decides by the name and port alone (TEST-NET-1, as the rules' own trusted decision does).
const ANY_PUBLIC: IpAddr = IpAddr::V4(Ipv4Addr::new(192, 0, 2, 1));

impl Attempt {
    /// The attempt a record (or a `net.suppressed` record's sample) holds: None for what no
    /// profile decides (a closed connection, a UDP datagram, a cut network…).
    pub(super) fn of(kind: &str, record: &Map<String, Value>) -> Option<Attempt> {
        let stage = match kind {
            "dns" => Stage::Dns,
            // Only TCP: UDP leaves the sandbox as DNS to its own resolver, whatever the profile.
            "connect" if record.get("protocol").and_then(Value::as_str) != Some("udp") => {
                Stage::Connect
            }
            _ => return None,
        };
        let text = |key: &str| record.get(key).and_then(Value::as_str).map(str::to_string);
        let attempt = Attempt {
            stage,
            name: text("name"),
            ip: text("ip").and_then(|ip| ip.parse().ok()),
            port: record
                .get("port")
                .and_then(Value::as_u64)
                .and_then(|port| u16::try_from(port).ok()),
            allowed: record.get("allowed")?.as_bool()?,
            rule: text("rule").unwrap_or_default(),
        };
        match stage {
            Stage::Dns => attempt.name.is_some().then_some(attempt),
            Stage::Connect => (attempt.port.is_some()
                && (attempt.name.is_some() || attempt.ip.is_some()))
            .then_some(attempt),
        }
    }

    /// The destination as a person names it: the name, else the address.
    pub(super) fn host(&self) -> String {
        match (&self.name, self.ip) {
            (Some(name), _) => name.clone(),
            (None, Some(ip)) => ip.to_string(),
            (None, None) => String::new(),
        }
    }

    /// Was the address the user's own word (`--resolve NAME=IP`) when the gate allowed it? A
    /// name entry never opens a loopback, private or metadata address, so one allowed by a name
    /// entry was the user's mapping, which the gate trusts.
    fn was_trusted(&self) -> bool {
        let (Some(ip), true) = (self.ip, self.allowed) else {
            return false;
        };
        let by_name_entry = self
            .rule
            .strip_prefix("allow ")
            .and_then(|entry| Destination::parse(entry).ok())
            .is_some_and(|entry| matches!(entry, Destination::Name { .. }));
        airlock_rules::ip::special(ip).is_some() && by_name_entry
    }

    /// The draft's decision on this attempt, by the gate's own rules.
    pub(super) fn decide(&self, draft: &NetworkMode) -> Decision {
        match (self.stage, &self.name, self.port) {
            (Stage::Dns, Some(name), _) => draft.may_resolve(name),
            (Stage::Connect, Some(name), Some(port)) => {
                let resolved = draft.may_resolve(name);
                if !resolved.allowed {
                    // The sandbox's resolver gets no answer: it never gets to connect.
                    return resolved;
                }
                match self.ip {
                    Some(ip) if self.was_trusted() => draft.decide_trusted(name, ip, port),
                    Some(ip) => draft.decide(Some(name), ip, port),
                    None => draft.decide(Some(name), ANY_PUBLIC, port),
                }
            }
            (Stage::Connect, None, Some(port)) => match self.ip {
                Some(ip) => draft.decide(None, ip, port),
                None => refused("no destination recorded"),
            },
            _ => refused("no destination recorded"),
        }
    }
}

fn refused(why: &str) -> Decision {
    Decision {
        allowed: false,
        rule: why.into(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn draft(allow: &[&str], deny: &[&str]) -> NetworkMode {
        let parse = |list: &[&str]| {
            list.iter()
                .map(|t| Destination::parse(t).unwrap())
                .collect()
        };
        NetworkMode::Allow {
            allow: parse(allow),
            deny: parse(deny),
        }
    }

    fn attempt(record: Value) -> Attempt {
        let record = record.as_object().unwrap().clone();
        let kind = record["action"]
            .as_str()
            .unwrap()
            .trim_start_matches("net.");
        Attempt::of(kind, &record).unwrap()
    }

    #[test]
    fn what_no_profile_decides_is_not_an_attempt() {
        let closed =
            json!({"name": "a.test", "port": 443, "allowed": true, "rule": "allow a.test"});
        assert_eq!(Attempt::of("closed", closed.as_object().unwrap()), None);
        let udp = json!({"ip": "8.8.8.8", "port": 53, "protocol": "udp", "allowed": false, "rule": "UDP…"});
        assert_eq!(Attempt::of("connect", udp.as_object().unwrap()), None);
    }

    #[test]
    fn a_connection_by_name_is_decided_by_its_name_and_port() {
        let connect = attempt(json!({"action": "net.connect", "name": "github.com",
            "ip": "140.82.121.4", "port": 443, "allowed": true, "rule": "allow github.com"}));
        assert!(connect.decide(&draft(&["github.com:443"], &[])).allowed);
        let narrowed = connect.decide(&draft(&["github.com:22"], &[]));
        assert!(!narrowed.allowed);
        assert_eq!(narrowed.rule, "port 443 is not allowed");
        let denied = connect.decide(&draft(&["*.github.com", "github.com"], &["github.com"]));
        assert_eq!(denied.rule, "deny github.com");
        let elsewhere = connect.decide(&draft(&["pypi.org"], &[]));
        assert_eq!(elsewhere.rule, "no allow entry names it");
    }

    #[test]
    fn a_bare_address_is_decided_by_the_address() {
        let connect = attempt(
            json!({"action": "net.connect", "ip": "10.0.0.5", "port": 5432,
            "allowed": true, "rule": "allow 10.0.0.0/8"}),
        );
        assert!(connect.decide(&draft(&["10.0.0.5:5432"], &[])).allowed);
        assert!(!connect.decide(&draft(&["db.internal"], &[])).allowed);
    }

    #[test]
    fn a_users_own_mapping_stays_trusted_and_a_name_never_opens_loopback_otherwise() {
        // Allowed then by a name entry although it went to loopback: --resolve's address.
        let mapped = attempt(json!({"action": "net.connect", "name": "allowed.test",
            "ip": "127.0.0.1", "port": 8080, "allowed": true, "rule": "allow allowed.test:8080"}));
        assert!(mapped.decide(&draft(&["allowed.test"], &[])).allowed);
        assert!(!mapped.decide(&draft(&["other.test"], &[])).allowed);
        // Refused then (the host's resolver said loopback): refused by any name entry now.
        let rebinding = attempt(json!({"action": "net.connect", "name": "evil.test",
            "ip": "127.0.0.1", "port": 80, "allowed": false,
            "rule": "loopback address 127.0.0.1: allowed only when an allow entry names it"}));
        assert!(!rebinding.decide(&draft(&["evil.test"], &[])).allowed);
    }

    #[test]
    fn dns_is_decided_as_the_gates_resolver_decides() {
        let query = attempt(
            json!({"action": "net.dns", "name": "files.pythonhosted.org",
            "allowed": false, "rule": "no allow entry names it"}),
        );
        assert!(
            query
                .decide(&draft(&["files.pythonhosted.org:443"], &[]))
                .allowed
        );
        assert!(!query.decide(&draft(&["pypi.org"], &[])).allowed);
        // A connection to a name the draft will not resolve never happens.
        let connect = attempt(
            json!({"action": "net.connect", "name": "x.test", "port": 443,
            "allowed": false, "rule": "cannot resolve x.test on the host: no address"}),
        );
        assert_eq!(
            connect.decide(&draft(&["y.test"], &[])).rule,
            "no allow entry names it"
        );
        assert!(connect.decide(&draft(&["x.test"], &[])).allowed);
    }
}
