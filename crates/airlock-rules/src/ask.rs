//! `[network] ask`: destinations a person decides while the connection waits. What is asked is
//! only what the profile would otherwise refuse for want of an allow entry: a deny entry still
//! refuses, and an address the host must be protected from (loopback, private, metadata, the
//! host's own) is never put to a person — an allow entry naming it is the only way in.

use std::net::IpAddr;

use serde::Serialize;

use crate::ip;
use crate::rules::{Decision, Destination, Egress};

/// The entries of `ask`, and `"*"` (any public host the profile does not allow).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Ask {
    pub entries: Vec<Destination>,
    /// `ask = ["*"]`.
    pub any: bool,
}

impl Ask {
    /// Asks nothing.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty() && !self.any
    }

    /// The entry that puts `name` (any port) to a person, as it is written.
    fn names(&self, name: &str) -> Option<String> {
        if self.any {
            return Some("*".into());
        }
        self.entries
            .iter()
            .find(|d| d.matches_name(name))
            .map(ToString::to_string)
    }

    /// May the sandbox resolve `name` because a person may let a connection to it through? The
    /// answer for a name `egress` refuses for want of an allow entry; None: `egress` decides.
    /// The rule of an answer starts with `ask ` (see [`Ask::rule_asks`]).
    pub fn may_resolve(&self, egress: &Egress, name: &str) -> Option<Decision> {
        let Egress::Allow { deny, .. } = egress else {
            return None;
        };
        if deny.iter().any(|d| d.matches_name(name)) {
            return None;
        }
        self.names(name)
            .map(|entry| Decision::allow(format!("ask {entry}")))
    }

    /// Does a rule say a name was let through only so that a person may be asked?
    pub fn rule_asks(rule: &str) -> bool {
        rule.starts_with("ask ")
    }

    /// Is a connection to `addr:port`, reached by `name` (None: by bare address), one to put to
    /// a person, given that `egress` refused it? The `ask` entry that says so, as written.
    /// `trusted`: the user mapped the name to the address themselves (`--resolve`), whose word
    /// opens even a protected address; `host`: the host's own addresses.
    pub fn asks(
        &self,
        egress: &Egress,
        name: Option<&str>,
        addr: IpAddr,
        port: u16,
        trusted: bool,
        host: &[IpAddr],
    ) -> Option<String> {
        // `network = "none"` asks nothing; `network = "open"` allows what would be asked.
        let Egress::Allow { deny, .. } = egress else {
            return None;
        };
        if self.is_empty() {
            return None;
        }
        let by_name = |d: &Destination| name.is_some_and(|n| d.matches_name(n));
        if deny
            .iter()
            .any(|d| (by_name(d) || d.matches_addr(addr)) && d.port_matches(port))
        {
            return None;
        }
        let protected = ip::special(addr).is_some() || host.contains(&ip::canonical(addr));
        if protected && !trusted {
            return None;
        }
        match name {
            Some(name) => self.names(name).filter(|_| {
                self.any
                    || self
                        .entries
                        .iter()
                        .any(|d| d.matches_name(name) && d.port_matches(port))
            }),
            None if self.any => Some("*".into()),
            None => self
                .entries
                .iter()
                .find(|d| d.matches_addr(addr) && d.port_matches(port))
                .map(ToString::to_string),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(text: &str) -> Destination {
        Destination::parse(text).unwrap()
    }

    fn egress(allow: &[&str], deny: &[&str]) -> Egress {
        Egress::Allow {
            allow: allow.iter().map(|t| d(t)).collect(),
            deny: deny.iter().map(|t| d(t)).collect(),
        }
    }

    fn ask(entries: &[&str]) -> Ask {
        Ask {
            entries: entries.iter().map(|t| d(t)).collect(),
            any: false,
        }
    }

    const PUBLIC: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(140, 82, 121, 4));

    #[test]
    fn a_named_host_is_asked_on_its_ports_only() {
        let ask = ask(&["*.github.com:443"]);
        let e = egress(&[], &[]);
        let asks = |name, port| ask.asks(&e, Some(name), PUBLIC, port, false, &[]);
        assert_eq!(
            asks("api.github.com", 443).as_deref(),
            Some("*.github.com:443")
        );
        assert_eq!(asks("api.github.com", 80), None);
        assert_eq!(asks("github.com", 443), None);
        assert_eq!(asks("evil.test", 443), None);
    }

    #[test]
    fn deny_wins_and_protected_addresses_are_never_asked() {
        let any = Ask {
            entries: Vec::new(),
            any: true,
        };
        let e = egress(&[], &["*.evil.test"]);
        assert_eq!(
            any.asks(&e, Some("x.evil.test"), PUBLIC, 443, false, &[]),
            None
        );
        assert_eq!(any.may_resolve(&e, "x.evil.test"), None);
        for protected in ["127.0.0.1", "10.1.2.3", "169.254.169.254", "192.168.1.1"] {
            let addr: IpAddr = protected.parse().unwrap();
            assert_eq!(any.asks(&e, Some("a.test"), addr, 443, false, &[]), None);
            assert_eq!(any.asks(&e, None, addr, 443, false, &[]), None);
        }
        // The host's own public address is the host.
        assert_eq!(
            any.asks(&e, Some("a.test"), PUBLIC, 443, false, &[PUBLIC]),
            None
        );
        // The user's own --resolve opens the address to the question, as to an allow entry.
        let loopback: IpAddr = "127.0.0.1".parse().unwrap();
        assert_eq!(
            any.asks(&e, Some("a.test"), loopback, 443, true, &[])
                .as_deref(),
            Some("*")
        );
        assert_eq!(
            any.asks(&e, Some("a.test"), PUBLIC, 443, false, &[])
                .as_deref(),
            Some("*")
        );
        assert_eq!(
            any.asks(&e, None, PUBLIC, 443, false, &[]).as_deref(),
            Some("*")
        );
    }

    #[test]
    fn only_a_list_of_allowed_hosts_asks() {
        let any = Ask {
            entries: Vec::new(),
            any: true,
        };
        assert_eq!(
            any.asks(&Egress::None, Some("a.test"), PUBLIC, 443, false, &[]),
            None
        );
        assert_eq!(any.may_resolve(&Egress::None, "a.test"), None);
        let open = Egress::Open {
            allow: Vec::new(),
            deny: Vec::new(),
        };
        assert_eq!(
            any.asks(&open, Some("a.test"), PUBLIC, 443, false, &[]),
            None
        );
        let nothing = Ask::default();
        assert_eq!(
            nothing.asks(&egress(&[], &[]), Some("a.test"), PUBLIC, 443, false, &[]),
            None
        );
    }

    #[test]
    fn an_asked_name_resolves_with_a_rule_that_says_so() {
        let ask = ask(&["*.github.com"]);
        let decision = ask
            .may_resolve(&egress(&[], &[]), "api.github.com")
            .unwrap();
        assert!(decision.allowed);
        assert!(Ask::rule_asks(&decision.rule), "{}", decision.rule);
        assert_eq!(ask.may_resolve(&egress(&[], &[]), "pypi.org"), None);
    }
}
