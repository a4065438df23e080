//! What the network gate refused during a run, gathered for the person who ran it: one entry per
//! destination with how often and why, said at the end of the run by every front end (the CLI's
//! last lines, `--json`, the API's answer, MCP's result) and written in the run's result record.
//! The gate's events themselves go to the audit log one by one (see `gate_log`).

use std::collections::BTreeMap;

use airlock_egress::gate::{NetEvent, NetEventKind};
use serde::{Deserialize, Serialize};

/// A destination the gate refused in a run. (MCP's run result carries it too, hence its schema.)
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize, schemars::JsonSchema)]
pub struct RefusedDestination {
    /// The name the command asked for, or the address it connected to by address.
    pub host: String,
    /// The port of a refused connection; none for a refused lookup (the command never got as
    /// far as a port).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub port: Option<u16>,
    /// How often: lookups (an address lookup asks for IPv4 and IPv6 at once: counted once) or
    /// connections.
    pub attempts: u64,
    /// The rule that refused it, as the audit log's `net.*` records write it.
    pub rule: String,
    /// Why, in words, naming the profile.
    pub why: String,
}

impl RefusedDestination {
    /// `registry.npmjs.org:443 (3×) — profile 'default' allows no network`.
    pub fn line(&self) -> String {
        let destination = match self.port {
            Some(port) => airlock_policy::learn::destination(&self.host, port),
            None => self.host.clone(),
        };
        format!("refused {destination} ({}×) — {}", self.attempts, self.why)
    }
}

/// The most destinations a run's answer lists; attempts at others are counted only.
pub const MAX_LISTED: usize = 32;

/// A run's refusals as they come, by destination.
#[derive(Debug, Default)]
pub(super) struct RefusalTally {
    by_destination: BTreeMap<(String, Option<u16>), Entry>,
    /// Attempts at destinations past [`MAX_LISTED`].
    untold: u64,
}

#[derive(Debug)]
struct Entry {
    attempts: u64,
    rule: String,
    /// Which came first, to list them in that order.
    order: usize,
}

impl RefusalTally {
    /// Count `event` if it is a refusal of a destination.
    pub(super) fn add(&mut self, event: &NetEvent) {
        // A refused lookup, connection, or first bytes naming another host; an intercepted
        // connection's refused tunnel or request (a [[network.http]] rule). (Not what failed
        // on its way, nor a cut network.)
        let refusal = matches!(
            event.kind,
            NetEventKind::Dns
                | NetEventKind::Connect
                | NetEventKind::Fronting
                | NetEventKind::Tunnel
                | NetEventKind::Request
        );
        if event.allowed || !refusal {
            return;
        }
        // A connect whose address the gate could not read: its rule says so.
        let host = event
            .host()
            .unwrap_or_else(|| "(destination not read)".to_string());
        // A resolver asks for A and AAAA (and lately HTTPS) records of a name at once: one
        // lookup, counted by its A query (a name asked for IPv6 alone still gets its entry).
        let counts = event.kind != NetEventKind::Dns || matches!(event.qtype, Some("A") | None);
        let key = (host, event.port);
        let order = self.by_destination.len();
        if let Some(entry) = self.by_destination.get_mut(&key) {
            entry.attempts += u64::from(counts);
        } else if order < MAX_LISTED {
            self.by_destination.insert(
                key,
                Entry {
                    attempts: u64::from(counts),
                    rule: event.rule.clone(),
                    order,
                },
            );
        } else {
            self.untold += u64::from(counts);
        }
    }

    /// The destinations in the order they were first refused, each said for `profile`; and the
    /// attempts at those past the list.
    pub(super) fn finish(&self, profile: &str) -> (Vec<RefusedDestination>, u64) {
        let mut listed: Vec<(&(String, Option<u16>), &Entry)> =
            self.by_destination.iter().collect();
        listed.sort_by_key(|(_, entry)| entry.order);
        let destinations = listed
            .into_iter()
            .map(|((host, port), entry)| RefusedDestination {
                host: host.clone(),
                port: *port,
                attempts: entry.attempts.max(1),
                rule: entry.rule.clone(),
                why: why(&entry.rule, profile),
            })
            .collect();
        (destinations, self.untold)
    }
}

/// The gate's rule for a refusal, in the words of a person who did not write the profile.
fn why(rule: &str, profile: &str) -> String {
    if rule == "network = \"none\"" {
        format!("profile '{profile}' allows no network")
    } else if rule == "no allow entry names it" {
        format!("profile '{profile}' has no [network] allow entry for it")
    } else if let Some(entry) = rule.strip_prefix("deny ") {
        format!("profile '{profile}' denies it ({entry})")
    } else if rule.starts_with("port ") && rule.ends_with(" is not allowed") {
        format!("profile '{profile}' allows this host on other ports only")
    } else {
        rule.to_string()
    }
}

/// The line after the list: what to do about it, when an allow entry naming a host would have
/// let one in. Never for an address (a private or metadata one above all), nor for what is not
/// a host name: the sandbox chose these words, and a person may paste them into a profile.
pub(super) fn advice(refused: &[RefusedDestination]) -> Option<String> {
    let first = refused.iter().find(|r| {
        let by_the_profile = r.rule == "network = \"none\""
            || r.rule == "no allow entry names it"
            || (r.rule.starts_with("port ") && r.rule.ends_with(" is not allowed"));
        by_the_profile && airlock_egress::rules::is_host_name(&r.host)
    })?;
    let host = &first.host;
    Some(format!(
        "to let a command reach a host, name it in its profile's [network] allow = [\"{host}\"]; 'airlock learn -- COMMAND' finds every host a command needs (docs/network.md)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_egress::gate::NetEventKind;

    fn refused(
        kind: NetEventKind,
        name: Option<&str>,
        port: Option<u16>,
        qtype: Option<&'static str>,
    ) -> NetEvent {
        NetEvent {
            kind,
            name: name.map(str::to_string),
            ip: name.is_none().then(|| "203.0.113.7".parse().unwrap()),
            port,
            protocol: if kind == NetEventKind::Dns {
                "dns"
            } else {
                "tcp"
            },
            qtype,
            allowed: false,
            rule: "network = \"none\"".into(),
            sni: None,
            bytes_out: None,
            bytes_in: None,
            duration_ms: None,
            program: None,
            method: None,
            path: None,
            secret: None,
        }
    }

    #[test]
    fn a_lookup_counts_once_for_its_a_and_aaaa_queries_and_each_destination_gets_a_line() {
        let mut tally = RefusalTally::default();
        for _ in 0..3 {
            tally.add(&refused(
                NetEventKind::Dns,
                Some("registry.npmjs.org"),
                None,
                Some("A"),
            ));
            tally.add(&refused(
                NetEventKind::Dns,
                Some("registry.npmjs.org"),
                None,
                Some("AAAA"),
            ));
        }
        tally.add(&refused(
            NetEventKind::Dns,
            Some("v6.example"),
            None,
            Some("AAAA"),
        ));
        tally.add(&refused(NetEventKind::Connect, None, Some(443), None));
        let (list, untold) = tally.finish("default");
        assert_eq!(untold, 0);
        let lines: Vec<String> = list.iter().map(RefusedDestination::line).collect();
        assert_eq!(
            lines,
            [
                "refused registry.npmjs.org (3×) — profile 'default' allows no network",
                "refused v6.example (1×) — profile 'default' allows no network",
                "refused 203.0.113.7:443 (1×) — profile 'default' allows no network",
            ]
        );
    }

    #[test]
    fn what_was_allowed_or_is_not_a_destination_is_not_a_refusal() {
        let mut tally = RefusalTally::default();
        let mut allowed = refused(NetEventKind::Connect, Some("pypi.org"), Some(443), None);
        allowed.allowed = true;
        tally.add(&allowed);
        tally.add(&refused(
            NetEventKind::Closed,
            Some("pypi.org"),
            Some(443),
            None,
        ));
        assert!(tally.finish("p").0.is_empty());
    }

    #[test]
    fn past_the_list_attempts_are_counted_not_listed() {
        let mut tally = RefusalTally::default();
        for port in 0..(MAX_LISTED as u16 + 5) {
            tally.add(&refused(NetEventKind::Connect, None, Some(port), None));
        }
        let (list, untold) = tally.finish("p");
        assert_eq!((list.len(), untold), (MAX_LISTED, 5));
    }

    #[test]
    fn advice_names_only_a_host_name_the_profile_could_allow() {
        let one = |host: &str, rule: &str| RefusedDestination {
            host: host.into(),
            port: Some(80),
            attempts: 1,
            rule: rule.into(),
            why: String::new(),
        };
        let none = "network = \"none\"";
        for host in ["169.254.169.254", "0.0.0.0/0", "*.wild.test", "::1"] {
            assert_eq!(advice(&[one(host, none)]), None, "{host}");
        }
        let special =
            "cloud metadata address 169.254.169.254: allowed only when an allow entry names it";
        assert_eq!(advice(&[one("metadata.test", special)]), None);
        let said = advice(&[one("0.0.0.0/0", none), one("pypi.org", none)]).unwrap();
        assert!(said.contains("allow = [\"pypi.org\"]"), "{said}");
    }

    #[test]
    fn each_rule_is_said_in_words_naming_the_profile() {
        assert_eq!(
            why("deny *.evil.test", "ci"),
            "profile 'ci' denies it (*.evil.test)"
        );
        assert_eq!(
            why("no allow entry names it", "ci"),
            "profile 'ci' has no [network] allow entry for it"
        );
        assert_eq!(
            why("port 22 is not allowed", "ci"),
            "profile 'ci' allows this host on other ports only"
        );
        let special = "private address 10.0.0.5: allowed only when an allow entry names it";
        assert_eq!(why(special, "ci"), special);
    }
}
