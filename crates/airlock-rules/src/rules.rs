//! What a profile allows: destinations by name (exact or `*.` wildcard) or address (IP or CIDR),
//! each with an optional port; and the decision for one attempt.
//!
//! Order of the decision, for a connection to `ip:port` that the sandbox reached by `name` (or by
//! address, with no name):
//! 1. a `deny` entry that matches the name or the address refuses;
//! 2. an address the host must be protected from (loopback, private, link-local, CGNAT,
//!    multicast, metadata… see [`crate::ip::special`]) is refused unless an `allow` entry names
//!    that address or a network holding it — a name never opens one (no SSRF through DNS);
//! 3. `network = "open"` allows the rest;
//! 4. otherwise an `allow` entry must match: a name entry matches the name, an address entry the
//!    address. A connection by bare address matches only address entries.

use std::fmt;
use std::net::IpAddr;

use serde::Serialize;

use crate::ip;

/// One `allow` or `deny` entry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// `github.com` (that name only) or `*.pypi.org` (names under it, not the bare name).
    Name {
        name: String,
        wildcard: bool,
        port: Option<u16>,
    },
    /// `10.0.0.5`, `10.0.0.0/8`, `[2001:db8::1]:443`, `2001:db8::/32`.
    Net {
        addr: IpAddr,
        prefix: u8,
        port: Option<u16>,
    },
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{0}")]
pub struct RuleError(pub String);

fn bad(text: &str, why: &str) -> RuleError {
    RuleError(format!("{text:?}: {why}"))
}

/// A DNS name as written in a rule: labels of letters, digits and '-', dots between.
fn valid_name(name: &str) -> bool {
    !name.is_empty()
        && name.len() <= 253
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && !label.starts_with('-')
                && !label.ends_with('-')
                && label
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || c == '-' || c == '_')
        })
}

fn parse_port(text: &str, port: &str) -> Result<u16, RuleError> {
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err(bad(text, "the port must be a number from 1 to 65535")),
        Ok(port) => Ok(port),
    }
}

impl Destination {
    /// Parse one entry; the error says what is wrong with it.
    pub fn parse(text: &str) -> Result<Destination, RuleError> {
        let trimmed = text.trim();
        if trimmed.is_empty() {
            return Err(bad(text, "empty"));
        }
        if trimmed.contains("://") {
            return Err(bad(
                text,
                "write a host, not a URL: github.com or github.com:443",
            ));
        }
        // [v6]:port
        if let Some(rest) = trimmed.strip_prefix('[') {
            let (addr, port) = rest
                .split_once(']')
                .ok_or_else(|| bad(text, "an IPv6 address in brackets needs its closing ']'"))?;
            let addr: IpAddr = addr.parse().map_err(|_| bad(text, "not an IPv6 address"))?;
            let port = match port.strip_prefix(':') {
                Some(port) => Some(parse_port(text, port)?),
                None if port.is_empty() => None,
                None => return Err(bad(text, "after ']' only ':PORT' may follow")),
            };
            return Ok(Destination::Net {
                addr,
                prefix: if addr.is_ipv4() { 32 } else { 128 },
                port,
            });
        }
        // A bare IP (v4 or v6) or a CIDR.
        if let Some((addr, prefix)) = trimmed.split_once('/') {
            let addr: IpAddr = addr.parse().map_err(|_| {
                bad(
                    text,
                    "a network is an address and a prefix length: 10.0.0.0/8",
                )
            })?;
            let max = if addr.is_ipv4() { 32 } else { 128 };
            let prefix: u8 = prefix
                .parse()
                .ok()
                .filter(|p| *p <= max)
                .ok_or_else(|| bad(text, &format!("the prefix length must be 0 to {max}")))?;
            if ip::network_of(addr, prefix) != addr {
                return Err(bad(text, "host bits are set: write the network address"));
            }
            return Ok(Destination::Net {
                addr,
                prefix,
                port: None,
            });
        }
        if let Ok(addr) = trimmed.parse::<IpAddr>() {
            return Ok(Destination::Net {
                addr,
                prefix: if addr.is_ipv4() { 32 } else { 128 },
                port: None,
            });
        }
        let (host, port) = match trimmed.rsplit_once(':') {
            Some((host, port)) => (host, Some(parse_port(text, port)?)),
            None => (trimmed, None),
        };
        if let Ok(addr) = host.parse::<std::net::Ipv4Addr>() {
            return Ok(Destination::Net {
                addr: IpAddr::V4(addr),
                prefix: 32,
                port,
            });
        }
        let (name, wildcard) = match host.strip_prefix("*.") {
            Some(rest) => (rest, true),
            None => (host, false),
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if name.contains('*') {
            return Err(bad(text, "a wildcard may only start a name: *.example.com"));
        }
        if !valid_name(&name) {
            return Err(bad(text, "not a host name, an IP address or a network"));
        }
        if wildcard && !name.contains('.') {
            return Err(bad(
                text,
                "a wildcard needs a domain under a top-level one: *.example.com, not *.com",
            ));
        }
        Ok(Destination::Name {
            name,
            wildcard,
            port,
        })
    }

    /// Does this entry take `port` (an entry without a port takes every one)?
    pub fn port_matches(&self, port: u16) -> bool {
        match self {
            Destination::Name { port: p, .. } | Destination::Net { port: p, .. } => {
                p.is_none_or(|p| p == port)
            }
        }
    }

    /// Does this entry name `name` (any port)?
    pub fn matches_name(&self, name: &str) -> bool {
        let Destination::Name {
            name: rule,
            wildcard,
            ..
        } = self
        else {
            return false;
        };
        let name = name.trim_end_matches('.').to_ascii_lowercase();
        if *wildcard {
            name.len() > rule.len()
                && name.ends_with(rule.as_str())
                && name.as_bytes()[name.len() - rule.len() - 1] == b'.'
        } else {
            name == *rule
        }
    }

    /// Does this entry name the address `addr` (any port)?
    pub fn matches_addr(&self, addr: IpAddr) -> bool {
        let Destination::Net {
            addr: net, prefix, ..
        } = self
        else {
            return false;
        };
        let addr = ip::canonical(addr);
        net.is_ipv4() == addr.is_ipv4() && ip::network_of(addr, *prefix) == *net
    }
}

impl fmt::Display for Destination {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let port = |f: &mut fmt::Formatter<'_>, port: &Option<u16>| match port {
            Some(port) => write!(f, ":{port}"),
            None => Ok(()),
        };
        match self {
            Destination::Name {
                name,
                wildcard,
                port: p,
            } => {
                write!(f, "{}{name}", if *wildcard { "*." } else { "" })?;
                port(f, p)
            }
            Destination::Net {
                addr,
                prefix,
                port: p,
            } => {
                let full = if addr.is_ipv4() { 32 } else { 128 };
                match (addr, *prefix == full, p) {
                    (IpAddr::V6(a), true, Some(_)) => write!(f, "[{a}]")?,
                    (a, true, _) => write!(f, "{a}")?,
                    (a, false, _) => write!(f, "{a}/{prefix}")?,
                }
                port(f, p)
            }
        }
    }
}

impl Serialize for Destination {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.to_string())
    }
}

/// Is `name` a plain DNS host name: labels of letters, digits, `-` and `_` (1 to 63 bytes each,
/// 253 in all), with an optional final dot, and not an address? What a sandbox asks for that is
/// not (`*.example.com`, `0.0.0.0/0`, `a b`) names no host: it is never looked up, learned or
/// advised as an allow entry, where it would read as a wildcard, a network or worse.
pub fn is_host_name(name: &str) -> bool {
    let name = name.strip_suffix('.').unwrap_or(name);
    !name.is_empty()
        && name.len() <= 253
        && name.parse::<IpAddr>().is_err()
        && name.split('.').all(|label| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'_')
        })
}

/// A profile's network: nothing, a list, or everything but a list.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
#[serde(tag = "mode", rename_all = "lowercase")]
pub enum Egress {
    /// Only a loopback of its own.
    #[default]
    None,
    /// Only the destinations `allow` names, never those `deny` names.
    Allow {
        allow: Vec<Destination>,
        deny: Vec<Destination>,
    },
    /// Everything except what `deny` names (and the host's own addresses, unless allowed).
    Open {
        allow: Vec<Destination>,
        deny: Vec<Destination>,
    },
}

/// A decision and why.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Decision {
    pub allowed: bool,
    /// The rule that decided (`allow github.com:443`, `deny *.evil.test`), or the reason none did.
    pub rule: String,
}

impl Decision {
    pub(crate) fn allow(rule: impl Into<String>) -> Decision {
        Decision {
            allowed: true,
            rule: rule.into(),
        }
    }
    pub(crate) fn deny(rule: impl Into<String>) -> Decision {
        Decision {
            allowed: false,
            rule: rule.into(),
        }
    }
}

impl Egress {
    fn lists(&self) -> (&[Destination], &[Destination]) {
        match self {
            Egress::None => (&[], &[]),
            Egress::Allow { allow, deny } | Egress::Open { allow, deny } => (allow, deny),
        }
    }

    /// The `allow` entries, in the profile's order.
    pub fn allow_entries(&self) -> &[Destination] {
        self.lists().0
    }

    /// The `allow` entry that made `decision` (one of this egress's own), if an entry did: a
    /// decision by `network = "open"`, or a refusal, has none. For `airlock policy replay`,
    /// which says which entries no attempt of the runs needed.
    pub fn allowed_by(&self, decision: &Decision) -> Option<&Destination> {
        if !decision.allowed {
            return None;
        }
        // The decisions below name their entry as `allow {entry}`, and only so.
        let entry = decision.rule.strip_prefix("allow ")?;
        self.allow_entries().iter().find(|d| d.to_string() == entry)
    }

    /// May the sandbox resolve `name`? (DNS answers only names a connection could use.)
    pub fn may_resolve(&self, name: &str) -> Decision {
        let (allow, deny) = self.lists();
        if matches!(self, Egress::None) {
            return Decision::deny("network = \"none\"");
        }
        if let Some(rule) = deny.iter().find(|d| d.matches_name(name)) {
            return Decision::deny(format!("deny {rule}"));
        }
        if let Egress::Open { .. } = self {
            return Decision::allow("network = \"open\"");
        }
        match allow.iter().find(|d| d.matches_name(name)) {
            Some(rule) => Decision::allow(format!("allow {rule}")),
            None => Decision::deny("no allow entry names it"),
        }
    }

    /// Like [`Egress::decide`] for a name the user mapped to `addr` themselves (`--resolve`):
    /// their word opens the address, even a loopback or private one; deny entries still apply.
    pub fn decide_trusted(&self, name: &str, addr: IpAddr, port: u16) -> Decision {
        if ip::special(addr).is_none() {
            return self.decide(Some(name), addr, port);
        }
        // Decide as if it were a public address, then keep only what a name entry allowed.
        let public = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1)); // TEST-NET-1
        let mut decision = self.decide(Some(name), public, port);
        let (_, deny) = self.lists();
        if let Some(rule) = deny
            .iter()
            .find(|d| d.matches_addr(addr) && d.port_matches(port))
        {
            decision = Decision::deny(format!("deny {rule}"));
        }
        decision
    }

    /// May the sandbox connect to `addr:port`, reached by `name` (None: by bare address)?
    pub fn decide(&self, name: Option<&str>, addr: IpAddr, port: u16) -> Decision {
        self.decide_on_host(name, addr, port, &[])
    }

    /// [`Egress::decide`] on a host whose own interfaces have the addresses `host`: they are
    /// refused like its loopback (a service listening on 0.0.0.0 answers on each of them, so a
    /// public address of the host is as much the host as 127.0.0.1), unless an allow entry
    /// names them.
    pub fn decide_on_host(
        &self,
        name: Option<&str>,
        addr: IpAddr,
        port: u16,
        host: &[IpAddr],
    ) -> Decision {
        let (allow, deny) = self.lists();
        if matches!(self, Egress::None) {
            return Decision::deny("network = \"none\"");
        }
        let by_name = |d: &Destination| name.is_some_and(|n| d.matches_name(n));
        if let Some(rule) = deny
            .iter()
            .find(|d| (by_name(d) || d.matches_addr(addr)) && d.port_matches(port))
        {
            return Decision::deny(format!("deny {rule}"));
        }
        let explicit = allow
            .iter()
            .find(|d| d.matches_addr(addr) && d.port_matches(port));
        let own = host.contains(&ip::canonical(addr));
        if let Some(kind) = ip::special(addr).or(own.then_some("this host's own")) {
            return match explicit {
                Some(rule) => Decision::allow(format!("allow {rule}")),
                None => Decision::deny(format!(
                    "{kind} address {addr}: allowed only when an allow entry names it"
                )),
            };
        }
        if let Some(rule) = explicit {
            return Decision::allow(format!("allow {rule}"));
        }
        if let Egress::Open { .. } = self {
            return Decision::allow("network = \"open\"");
        }
        match allow.iter().find(|d| by_name(d) && d.port_matches(port)) {
            Some(rule) => Decision::allow(format!("allow {rule}")),
            None if name.is_none() => {
                Decision::deny("a bare address: only an allow entry naming the address opens it")
            }
            None if allow.iter().any(by_name) => {
                Decision::deny(format!("port {port} is not allowed"))
            }
            None => Decision::deny("no allow entry names it"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn d(text: &str) -> Destination {
        Destination::parse(text).unwrap()
    }

    fn allow(list: &[&str], deny: &[&str]) -> Egress {
        Egress::Allow {
            allow: list.iter().map(|t| d(t)).collect(),
            deny: deny.iter().map(|t| d(t)).collect(),
        }
    }

    fn ip(text: &str) -> IpAddr {
        text.parse().unwrap()
    }

    #[test]
    fn a_host_name_is_labels_and_nothing_else() {
        for good in [
            "pypi.org",
            "files.pythonhosted.org.",
            "_dmarc.example.com",
            "localhost",
        ] {
            assert!(is_host_name(good), "{good}");
        }
        for bad in [
            "*.wild.test",
            "0.0.0.0/0",
            "10.0.0.1",
            "::1",
            "a b.test",
            "a..b",
            "",
            ".",
            "x:443",
        ] {
            assert!(!is_host_name(bad), "{bad}");
        }
    }

    #[test]
    fn the_entry_that_allowed_is_named_and_a_refusal_has_none() {
        let egress = allow(&["github.com:443", "*.pypi.org", "10.0.0.0/8"], &[]);
        let entry = |decision: &Decision| egress.allowed_by(decision).map(|d| d.to_string());
        let public = ip("140.82.121.4");
        assert_eq!(
            entry(&egress.decide(Some("github.com"), public, 443)).as_deref(),
            Some("github.com:443")
        );
        assert_eq!(
            entry(&egress.may_resolve("files.pypi.org")).as_deref(),
            Some("*.pypi.org")
        );
        assert_eq!(
            entry(&egress.decide(None, ip("10.1.2.3"), 5432)).as_deref(),
            Some("10.0.0.0/8")
        );
        assert_eq!(entry(&egress.decide(Some("github.com"), public, 80)), None);
        let open = Egress::Open {
            allow: vec![],
            deny: vec![],
        };
        assert_eq!(
            open.allowed_by(&open.decide(Some("x.test"), public, 80)),
            None
        );
    }

    #[test]
    fn the_hosts_own_addresses_need_an_entry_naming_them() {
        let host = [ip("45.45.45.45"), ip("2a01:4f8::7")];
        let open = Egress::Open {
            allow: vec![],
            deny: vec![],
        };
        for addr in ["45.45.45.45", "::ffff:45.45.45.45", "2a01:4f8::7"] {
            let decision = open.decide_on_host(None, ip(addr), 80, &host);
            assert!(!decision.allowed, "{addr}");
            assert!(
                decision.rule.contains("this host's own"),
                "{}",
                decision.rule
            );
        }
        assert!(
            open.decide_on_host(None, ip("45.45.45.46"), 80, &host)
                .allowed
        );
        let named = allow(&["site.test", "45.45.45.45:8080"], &[]);
        assert!(
            !named
                .decide_on_host(Some("site.test"), ip("45.45.45.45"), 80, &host)
                .allowed
        );
        assert!(
            named
                .decide_on_host(None, ip("45.45.45.45"), 8080, &host)
                .allowed
        );
    }

    #[test]
    fn entries_parse_and_print_back() {
        for text in [
            "github.com",
            "*.pypi.org",
            "api.openai.com:443",
            "10.0.0.5",
            "10.0.0.5:5432",
            "10.0.0.0/8",
            "2001:db8::1",
            "[2001:db8::1]:443",
            "2001:db8::/32",
        ] {
            assert_eq!(d(text).to_string(), text);
        }
        assert_eq!(d("GitHub.COM.").to_string(), "github.com");
    }

    #[test]
    fn bad_entries_say_why() {
        for (text, why) in [
            ("https://github.com", "not a URL"),
            ("github.com:0", "port"),
            ("github.com:99999", "port"),
            ("*.com", "wildcard"),
            ("git*hub.com", "wildcard"),
            ("10.0.0.1/8", "host bits"),
            ("10.0.0.0/33", "prefix"),
            ("[2001:db8::1", "closing"),
            ("exa mple.com", "not a host name"),
            ("", "empty"),
        ] {
            let err = Destination::parse(text).unwrap_err().to_string();
            assert!(err.contains(why), "{text}: {err}");
        }
    }

    #[test]
    fn names_and_wildcards_match_as_written() {
        assert!(d("github.com").matches_name("GITHUB.com."));
        assert!(!d("github.com").matches_name("api.github.com"));
        assert!(!d("github.com").matches_name("evilgithub.com"));
        assert!(d("*.pypi.org").matches_name("files.pypi.org"));
        assert!(d("*.pypi.org").matches_name("a.b.pypi.org"));
        assert!(!d("*.pypi.org").matches_name("pypi.org"));
        assert!(!d("*.pypi.org").matches_name("evilpypi.org"));
        assert!(d("10.0.0.0/8").matches_addr(ip("10.1.2.3")));
        assert!(d("10.0.0.0/8").matches_addr(ip("::ffff:10.1.2.3")));
        assert!(!d("10.0.0.0/8").matches_addr(ip("11.0.0.1")));
    }

    #[test]
    fn decisions_follow_the_rules() {
        let egress = allow(
            &[
                "github.com",
                "*.pypi.org",
                "api.openai.com:443",
                "10.0.0.5:5432",
                "127.0.0.1:8080",
            ],
            &["evil.pypi.org"],
        );
        let public = ip("140.82.112.3");
        assert!(egress.decide(Some("github.com"), public, 443).allowed);
        assert!(
            egress.decide(Some("github.com"), public, 22).allowed,
            "no port: any port"
        );
        assert!(egress.decide(Some("api.openai.com"), public, 443).allowed);
        let wrong_port = egress.decide(Some("api.openai.com"), public, 80);
        assert!(!wrong_port.allowed);
        assert!(wrong_port.rule.contains("port 80"), "{}", wrong_port.rule);
        assert!(egress.decide(Some("files.pypi.org"), public, 443).allowed);
        let denied = egress.decide(Some("evil.pypi.org"), public, 443);
        assert_eq!(denied, Decision::deny("deny evil.pypi.org"));
        assert!(!egress.decide(Some("example.com"), public, 443).allowed);
        // A bare address is not a name.
        assert!(!egress.decide(None, public, 443).allowed);
        // Private and loopback addresses: only when named by address.
        assert!(egress.decide(None, ip("10.0.0.5"), 5432).allowed);
        assert!(!egress.decide(None, ip("10.0.0.5"), 22).allowed);
        assert!(egress.decide(None, ip("127.0.0.1"), 8080).allowed);
        // An allowed name that resolves to a private address does not open it.
        let ssrf = egress.decide(Some("github.com"), ip("192.168.1.1"), 443);
        assert!(!ssrf.allowed);
        assert!(ssrf.rule.contains("private"), "{}", ssrf.rule);
        assert!(
            !egress
                .decide(Some("github.com"), ip("169.254.169.254"), 80)
                .allowed
        );
        assert!(!egress.decide(Some("github.com"), ip("::1"), 443).allowed);
        assert!(egress.may_resolve("files.pypi.org").allowed);
        assert!(!egress.may_resolve("evil.pypi.org").allowed);
        assert!(!egress.may_resolve("example.com").allowed);
    }

    #[test]
    fn open_allows_all_but_denials_and_the_hosts_own_addresses() {
        let egress = Egress::Open {
            allow: vec![],
            deny: vec![d("*.evil.test")],
        };
        assert!(
            egress
                .decide(Some("example.com"), ip("93.184.216.34"), 443)
                .allowed
        );
        assert!(egress.decide(None, ip("93.184.216.34"), 443).allowed);
        assert!(
            !egress
                .decide(Some("x.evil.test"), ip("93.184.216.34"), 443)
                .allowed
        );
        assert!(!egress.decide(None, ip("127.0.0.1"), 80).allowed);
        assert!(!egress.decide(None, ip("100.64.0.1"), 80).allowed);
        assert!(egress.may_resolve("anything.example").allowed);
        assert!(
            !Egress::None
                .decide(Some("github.com"), ip("140.82.112.3"), 443)
                .allowed
        );
    }
}
