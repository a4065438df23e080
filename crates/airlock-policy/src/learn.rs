//! A profile proposed from what a learning run used (`airlock learn`): the base profile with its
//! network narrowed to the hosts and ports the command reached, each with a comment (how many
//! connections, which programs), and its limits set from what the command took, with headroom.
//! The proposal is text for a person to read and keep: it parses back as a profile
//! ([`crate::parse_profile`]) and says what it was learned from.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Write as _;

use airlock_rules::{Destination, Egress};

use std::net::IpAddr;

use airlock_rules::is_host_name;

use crate::profile::{HttpRules, Limits, Profile, RequestRule};
use crate::render;
use crate::units::format_size;

/// What a learning run used.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Observed {
    /// Connections let through, by `(host, port)`: the name the command asked for, or the
    /// address it connected to by address.
    pub destinations: BTreeMap<(String, u16), Used>,
    /// CPU time of all its processes together.
    pub cpu_ms: Option<u64>,
    /// The most memory the sandbox held at once, as its memory cgroup counts it: the measure
    /// of the limit that cgroup enforces. (Without one the limit is an address-space rlimit,
    /// which a process's resident peak does not size: none is learned then.)
    pub peak_memory_bytes: Option<u64>,
    /// What its layer held at the end (the files it wrote).
    pub layer_bytes: Option<u64>,
    /// The requests the gate read on hosts the base profile inspects (`[[network.http]]`), by
    /// host: each `METHOD /path` with its variable segments (numbers, ids) as `*`.
    pub requests: BTreeMap<String, BTreeSet<String>>,
    /// Connections to destinations past the [`MAX_DESTINATIONS`] learned: not in the proposal.
    pub unlearned: u64,
}

/// One destination a learning run reached.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Used {
    pub connections: u64,
    /// The programs that connected (their `comm`, as the gate saw it).
    pub programs: BTreeSet<String>,
}

impl Observed {
    /// Count one connection to `host:port` by `program`. What is neither a host name nor an
    /// address (the sandbox chose the name it asked for) is not a destination: passed over.
    pub fn connected(&mut self, host: &str, port: u16, program: Option<&str>) {
        if !is_host_name(host) && host.parse::<IpAddr>().is_err() {
            return;
        }
        let key = (host.to_ascii_lowercase(), port);
        if self.destinations.len() >= MAX_DESTINATIONS && !self.destinations.contains_key(&key) {
            self.unlearned += 1;
            return;
        }
        let used = self.destinations.entry(key).or_default();
        used.connections += 1;
        if let Some(program) = program {
            if used.programs.len() < MAX_PROGRAMS {
                used.programs.insert(program.to_string());
            }
        }
    }

    /// Take back a connection to `host:port` that never reached its destination.
    pub fn failed(&mut self, host: &str, port: u16) {
        let key = (host.to_ascii_lowercase(), port);
        if let Some(used) = self.destinations.get_mut(&key) {
            used.connections = used.connections.saturating_sub(1);
            if used.connections == 0 {
                self.destinations.remove(&key);
            }
        }
    }

    /// Count one request to an inspected `host`: `method` and `path` (without its query), as
    /// the rule that allows it, which never allows more than that method on that path's shape:
    /// a method is upper-case letters (`*`, any method, is never learned), a `*` in the path is
    /// written `%2A` (a literal star, not a wildcard), and a path cut short for the log is
    /// passed over.
    pub fn requested(&mut self, host: &str, method: &str, path: &str) {
        let method_ok = !method.is_empty() && method.bytes().all(|b| b.is_ascii_uppercase());
        if !method_ok || !path.starts_with('/') || path.ends_with('…') {
            return;
        }
        let rule = format!("{method} {}", pattern(&path.replace('*', "%2A")));
        if RequestRule::parse(&rule).is_err() {
            return;
        }
        let seen = self.requests.entry(host.to_ascii_lowercase()).or_default();
        if seen.len() < MAX_REQUEST_RULES {
            seen.insert(rule);
        }
    }
}

/// `path` with each segment that looks like an id (all digits, or a long run of hex digits and
/// dashes: a hash, a UUID) as `*`: `/repos/acme/app/issues/12` → `/repos/acme/app/issues/*`.
fn pattern(path: &str) -> String {
    let segments: Vec<&str> = path
        .split('/')
        .map(|segment| {
            let digits = !segment.is_empty() && segment.bytes().all(|b| b.is_ascii_digit());
            let id =
                segment.len() >= 16 && segment.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
            if digits || id {
                "*"
            } else {
                segment
            }
        })
        .collect();
    segments.join("/")
}

/// The most request rules learned for one host.
const MAX_REQUEST_RULES: usize = 64;

/// The most destinations one proposal allows: a command that reaches more is no command to
/// learn a profile from (its profile would be a list no person reads).
pub const MAX_DESTINATIONS: usize = 256;

/// The most programs named in one destination's comment.
const MAX_PROGRAMS: usize = 4;

const MIB: u64 = 1 << 20;
/// The least memory and disk a proposal gives.
const FLOOR_BYTES: u64 = 512 * MIB;
/// The least CPU time a proposal gives.
const FLOOR_CPU_SECONDS: u64 = 60;

/// Where a learning run started and what it ran, for the proposal's header.
pub struct Origin<'a> {
    /// The profile the run had (all of it but its network).
    pub base: &'a Profile,
    /// The command, as the person wrote it.
    pub command: &'a str,
    /// When (UTC, RFC 3339).
    pub when: &'a str,
}

/// The proposed profile: `origin.base` (or `extend`, a profile learned before, to which this
/// run's hosts and needs are added) with the network `observed` used and limits with headroom.
pub fn propose(origin: &Origin, observed: &Observed, extend: Option<&Profile>) -> String {
    let start = extend.unwrap_or(origin.base);
    let mut profile = start.clone();
    profile.limits = limits(&start.limits, observed, extend.is_some());
    let mut text = String::new();
    let _ = writeln!(
        text,
        "# Learned by 'airlock learn' on {} from: {}",
        origin.when,
        shortened(&one_line(origin.command))
    );
    let _ = writeln!(
        text,
        "# Base profile: {}{}. Every host below was reached by the command: read them before you use this.",
        origin.base.name,
        if extend.is_some() { " (extending a profile learned before)" } else { "" },
    );
    if observed.unlearned > 0 {
        let _ = writeln!(
            text,
            "# The command also made {} connection{} to destinations past the {MAX_DESTINATIONS} learned: not allowed here.",
            observed.unlearned,
            if observed.unlearned == 1 { "" } else { "s" }
        );
    }
    text.push_str(&network_section(start, observed));
    profile.http = http_rules(start, observed);
    // allow and deny are written above, with their comments; the rest of [network] as it renders.
    profile.network = Egress::Allow {
        allow: Vec::new(),
        deny: Vec::new(),
    };
    let mut rest = render::to_toml(&profile);
    let http = rest
        .remove("network")
        .and_then(|network| network.as_table().and_then(|t| t.get("http")).cloned());
    if let Some(http) = http {
        let mut network = toml::Table::new();
        network.insert("http".into(), http);
        let mut wrapped = toml::Table::new();
        wrapped.insert("network".into(), network.into());
        text.push('\n');
        text.push_str(&toml::to_string(&wrapped).unwrap_or_default());
    }
    text.push('\n');
    text.push_str(&toml::to_string(&rest).unwrap_or_default());
    text
}

/// `[network]`: what the start profile allowed and named as secret hosts, and each destination
/// the run reached, with its comment; the start profile's `deny` kept.
fn network_section(start: &Profile, observed: &Observed) -> String {
    let (kept_allow, deny): (Vec<&Destination>, Vec<&Destination>) = match &start.network {
        Egress::None => (Vec::new(), Vec::new()),
        Egress::Allow { allow, deny } | Egress::Open { allow, deny } => {
            (allow.iter().collect(), deny.iter().collect())
        }
    };
    let mut entries: BTreeMap<String, String> = BTreeMap::new();
    for entry in &kept_allow {
        entries.insert(entry.to_string(), "kept from the profile".into());
    }
    for secret in &start.secrets {
        for host in &secret.hosts {
            entries
                .entry(host.clone())
                .or_insert_with(|| format!("secret {}'s host", secret.name));
        }
    }
    for ((host, port), used) in &observed.destinations {
        let entry = destination(host, *port);
        let Ok(reached) = Destination::parse(&entry) else {
            continue; // not a destination a profile can name: left out
        };
        let covered = kept_allow.iter().any(|d| {
            d.port_matches(*port)
                && match host.parse::<std::net::IpAddr>() {
                    Ok(addr) => d.matches_addr(addr),
                    Err(_) => d.matches_name(host),
                }
        }) || start.secrets.iter().any(|s| s.hosts.contains(host));
        if covered || entries.contains_key(&reached.to_string()) {
            continue;
        }
        let programs: Vec<&str> = used.programs.iter().map(String::as_str).collect();
        let by = if programs.is_empty() {
            String::new()
        } else {
            format!(" by {}", programs.join(", "))
        };
        let plural = if used.connections == 1 { "" } else { "s" };
        entries.insert(
            entry,
            format!("{} connection{plural}{by}", used.connections),
        );
    }
    let mut text = String::from("\n[network]\n");
    if entries.is_empty() {
        text = String::from("\n# The command reached no host.\nnetwork = \"none\"\n");
        return text;
    }
    text.push_str("allow = [\n");
    for (entry, comment) in &entries {
        let _ = writeln!(text, "    {}, # {}", quoted(entry), one_line(comment));
    }
    text.push_str("]\n");
    let deny: Vec<String> = deny.iter().map(|d| quoted(&d.to_string())).collect();
    let _ = writeln!(text, "deny = [{}]", deny.join(", "));
    text
}

/// The start profile's `[[network.http]]`, each inspected host's rules those of the requests
/// the run made there (added to the rules it had, when extending a learned profile).
fn http_rules(start: &Profile, observed: &Observed) -> Vec<HttpRules> {
    start
        .http
        .iter()
        .map(|rules| {
            let Some(seen) = observed.requests.get(&rules.host) else {
                return rules.clone();
            };
            let mut allow: Vec<RequestRule> = rules.allow.clone().unwrap_or_default();
            for text in seen {
                if let Ok(rule) = RequestRule::parse(text) {
                    if !allow.iter().any(|had| had.to_string() == rule.to_string()) {
                        allow.push(rule);
                    }
                }
            }
            HttpRules {
                host: rules.host.clone(),
                allow: Some(allow),
            }
        })
        .collect()
}

/// The start profile's limits, raised or set to what the run took with headroom: twice its
/// memory, three times its CPU time, never below a floor. Extending a learned profile
/// keeps the larger of the two.
fn limits(start: &Limits, observed: &Observed, extending: bool) -> Limits {
    let mut limits = start.clone();
    let pick = |old: u64, new: u64| if extending { old.max(new) } else { new };
    if let Some(peak) = observed.peak_memory_bytes {
        limits.memory_bytes = pick(
            limits.memory_bytes,
            round_up(peak * 2, 64 * MIB).max(FLOOR_BYTES),
        );
    }
    if let Some(cpu_ms) = observed.cpu_ms {
        let seconds = (cpu_ms * 3).div_ceil(1000).max(FLOOR_CPU_SECONDS);
        limits.cpu_seconds = pick(limits.cpu_seconds, seconds);
    }
    // The files it wrote are told, not made a disk limit: an unprivileged session cannot
    // enforce one, and would refuse the profile.
    limits
}

fn round_up(n: u64, unit: u64) -> u64 {
    n.div_ceil(unit).saturating_mul(unit)
}

/// A TOML basic string.
fn quoted(text: &str) -> String {
    toml::Value::String(text.to_string()).to_string()
}

/// `host:port` as an allow entry writes it: an IPv6 address in brackets (`[2606:4700::1]:8080`;
/// without them its port would read as more of the address).
pub fn destination(host: &str, port: u16) -> String {
    match host.parse::<IpAddr>() {
        Ok(IpAddr::V6(v6)) => format!("[{v6}]:{port}"),
        _ => format!("{host}:{port}"),
    }
}

/// At most [`MAX_SAID`] characters of `text`, and an ellipsis when there was more.
fn shortened(text: &str) -> String {
    match text.char_indices().nth(MAX_SAID) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// The most of a command a proposal's header says.
const MAX_SAID: usize = 160;

/// Text for a comment: one line, printable.
fn one_line(text: &str) -> String {
    text.chars()
        .map(|c| if c.is_control() { ' ' } else { c })
        .collect()
}

/// What a proposal's limits say, for the person: `memory 512 MiB (peak 201 MiB)`…
pub fn describe_limits(observed: &Observed, limits: &Limits) -> Vec<String> {
    let mut lines = Vec::new();
    if observed.peak_memory_bytes.is_none() {
        lines.push(
            "memory left as the profile had it (no memory cgroup measured the run's peak)".into(),
        );
    }
    if let Some(peak) = observed.peak_memory_bytes {
        lines.push(format!(
            "memory {} (peak {})",
            format_size(limits.memory_bytes),
            format_size(peak)
        ));
    }
    if let Some(cpu_ms) = observed.cpu_ms {
        lines.push(format!(
            "cpu {}s (used {:.1}s)",
            limits.cpu_seconds,
            cpu_ms as f64 / 1000.0
        ));
    }
    if let Some(bytes) = observed.layer_bytes {
        lines.push(format!(
            "wrote {} into its session (disk is left as the profile had it)",
            if bytes < 1024 {
                crate::units::counted_bytes(bytes)
            } else {
                format_size(bytes)
            }
        ));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::parse_profile;

    fn observed() -> Observed {
        let mut o = Observed {
            cpu_ms: Some(1_500),
            peak_memory_bytes: Some(100 * MIB),
            layer_bytes: Some(10 * MIB),
            ..Observed::default()
        };
        o.connected("pypi.org", 443, Some("pip"));
        o.connected("pypi.org", 443, Some("pip"));
        o.connected("Files.PythonHosted.org", 443, Some("pip"));
        o
    }

    fn base(toml: &str) -> Profile {
        parse(toml, "base")
    }

    fn parse(toml: &str, name: &str) -> Profile {
        parse_profile(toml, name, std::path::Path::new("learned.toml")).unwrap()
    }

    #[test]
    fn a_proposal_allows_what_was_reached_with_comments_and_parses_back() {
        let base = base("[network]\nallow = [\"10.0.0.5:5432\"]\ndeny = [\"evil.test\"]\n");
        let origin = Origin {
            base: &base,
            command: "pip download six",
            when: "2026-12-05T02:00:00Z",
        };
        let text = propose(&origin, &observed(), None);
        assert!(
            text.contains("\"pypi.org:443\", # 2 connections by pip"),
            "{text}"
        );
        assert!(
            text.contains("\"files.pythonhosted.org:443\", # 1 connection by pip"),
            "{text}"
        );
        assert!(
            text.contains("\"10.0.0.5:5432\", # kept from the profile"),
            "{text}"
        );
        let learned = parse(&text, "learned");
        let Egress::Allow { allow, deny } = &learned.network else {
            panic!("{:?}", learned.network)
        };
        assert_eq!(allow.len(), 3, "{text}");
        assert_eq!(deny.len(), 1, "{text}");
        assert_eq!(learned.limits.memory_bytes, 512 * MIB); // 200 MiB, to the floor
        assert_eq!(learned.limits.cpu_seconds, 60);
        assert_eq!(learned.limits.disk_bytes, None);
        assert_eq!(learned.filesystem, base.filesystem);
    }

    #[test]
    fn extending_adds_hosts_and_keeps_the_larger_limits() {
        let before = base(
            "[network]\nallow = [\"crates.io:443\"]\n[limits]\nmemory = \"4GiB\"\ncpu = \"10m\"\n",
        );
        let origin = Origin {
            base: &before,
            command: "pip download six",
            when: "2026-12-05T02:00:00Z",
        };
        let text = propose(&origin, &observed(), Some(&before));
        let learned = parse(&text, "learned");
        let Egress::Allow { allow, .. } = &learned.network else {
            panic!()
        };
        let names: Vec<String> = allow.iter().map(ToString::to_string).collect();
        assert_eq!(
            names,
            [
                "crates.io:443",
                "files.pythonhosted.org:443",
                "pypi.org:443"
            ]
        );
        assert_eq!(learned.limits.memory_bytes, 4 << 30);
        assert_eq!(learned.limits.cpu_seconds, 600);
    }

    #[test]
    fn an_inspected_hosts_requests_become_its_rules_with_ids_as_stars() {
        let base = base(
            "[network]\nallow = [\"api.github.com\"]\n[[network.http]]\nhost = \"api.github.com\"\ninspect = true\n",
        );
        let mut o = Observed::default();
        o.connected("api.github.com", 443, Some("gh"));
        o.requested("api.github.com", "GET", "/repos/acme/app/issues/12");
        o.requested("api.github.com", "GET", "/repos/acme/app/issues/13");
        o.requested("api.github.com", "POST", "/repos/acme/app/issues");
        let origin = Origin {
            base: &base,
            command: "gh issue list",
            when: "now",
        };
        let text = propose(&origin, &o, None);
        let learned = parse(&text, "learned");
        let rules: Vec<String> = learned.http[0]
            .allow
            .iter()
            .flatten()
            .map(ToString::to_string)
            .collect();
        assert_eq!(
            rules,
            [
                "GET /repos/acme/app/issues/*",
                "POST /repos/acme/app/issues"
            ],
            "{text}"
        );
    }

    #[test]
    fn an_entry_reads_back_as_the_address_and_port_reached() {
        let base = Profile::builtin_default();
        let origin = Origin {
            base: &base,
            command: "x",
            when: "now",
        };
        let mut o = Observed::default();
        o.connected("2606:4700::1111", 8080, None);
        o.connected("203.0.113.7", 443, None);
        o.connected("0.0.0.0/0", 443, None); // asked by name: no host
        o.connected("*.wild.test", 443, None);
        let text = propose(&origin, &o, None);
        let learned = parse(&text, "l");
        let Egress::Allow { allow, .. } = &learned.network else {
            panic!("{text}")
        };
        assert_eq!(allow.len(), 2, "{text}");
        for (entry, addr) in allow
            .iter()
            .zip(["203.0.113.7:443", "[2606:4700::1111]:8080"])
        {
            let addr: std::net::SocketAddr = addr.parse().unwrap();
            assert!(
                entry.matches_addr(addr.ip()) && entry.port_matches(addr.port()),
                "{entry}"
            );
            assert!(!entry.port_matches(22), "{entry}");
        }
    }

    #[test]
    fn a_request_is_learned_as_exactly_itself() {
        let mut o = Observed::default();
        o.requested("api.test", "*", "/**");
        o.requested("api.test", "GET", "/repos/*/x");
        o.requested("api.test", "DELETE", "/repos/acme/..");
        o.requested("api.test", "GET", "/long/cut…");
        let seen: Vec<&String> = o.requests["api.test"].iter().collect();
        assert_eq!(seen, ["GET /repos/%2A/x"]);
        let rule = RequestRule::parse(seen[0]).unwrap();
        assert!(!rule.to_string().contains("/*/"), "{rule}");
    }

    #[test]
    fn past_the_most_destinations_connections_are_counted_and_said() {
        let mut o = Observed::default();
        for port in 0..(MAX_DESTINATIONS as u16 + 3) {
            o.connected("many.test", port, None);
        }
        o.connected("many.test", 0, None); // one learned already: counted there
        assert_eq!(o.destinations.len(), MAX_DESTINATIONS);
        assert_eq!(o.unlearned, 3);
        let base = Profile::builtin_default();
        let origin = Origin {
            base: &base,
            command: "x",
            when: "now",
        };
        let text = propose(&origin, &o, None);
        assert!(
            text.contains("3 connections to destinations past the 256"),
            "{text}"
        );
        parse(&text, "l");
    }

    #[test]
    fn nothing_reached_is_no_network_and_a_hostile_comment_stays_a_comment() {
        let base = Profile::builtin_default();
        let origin = Origin {
            base: &base,
            command: "true\n[network]\nallow = [\"evil.test\"]",
            when: "now",
        };
        let mut o = Observed::default();
        let text = propose(&origin, &o, None);
        assert_eq!(parse(&text, "l").network, Egress::None, "{text}");
        o.connected("a.test", 443, Some("x\"], \n[network"));
        let text = propose(&origin, &o, None);
        let learned = parse(&text, "l");
        let Egress::Allow { allow, .. } = &learned.network else {
            panic!("{text}")
        };
        assert_eq!(allow.len(), 1, "{text}");
    }
}
