//! Ways around a profile's `[[network.http]]` rules that the profile itself opens: the rules
//! hold only on connections to their hosts by name, which the gate reads. `policy check` says
//! them as warnings; the profile is valid all the same.

use airlock_rules::Destination;

use crate::profile::{NetworkMode, Profile};

impl Profile {
    /// What the injector cannot keep from the sandbox, a sentence per secret: the body of an
    /// answer from the secret's hosts reaches the sandbox as it is (headers, trailers, a
    /// redirect's `Location` are scrubbed of the value; a body is not), so a host that echoes
    /// what it received hands the value back.
    pub fn secret_notes(&self) -> Vec<String> {
        self.secrets
            .iter()
            .map(|secret| {
                format!(
                    "secret {}: the body of an answer from {} reaches the sandbox as it is: an endpoint there that echoes the request (a /headers or debug page, an error that quotes it) would hand the value back; name only hosts whose API echoes nothing (docs/secrets.md)",
                    secret.name,
                    secret.hosts.join(", ")
                )
            })
            .collect()
    }

    /// Warnings for `ask` entries that ask nothing: a host an allow entry names is allowed
    /// without asking (allow wins over ask), and one a deny entry names is refused (deny wins).
    pub fn ask_notes(&self) -> Vec<String> {
        let NetworkMode::Allow { allow, deny } = &self.network else {
            return Vec::new();
        };
        let covers = |by: &Destination, entry: &Destination| match (by, entry) {
            (
                Destination::Name { .. },
                Destination::Name {
                    name,
                    wildcard: false,
                    port,
                },
            ) => by.matches_name(name) && port.is_none_or(|p| by.port_matches(p)),
            (by, entry) => by == entry,
        };
        let mut notes = Vec::new();
        for entry in &self.ask.hosts.entries {
            if let Some(by) = allow.iter().find(|by| covers(by, entry)) {
                notes.push(format!(
                    "ask entry {entry}: allow entry {by} allows it already, without asking (allow wins over ask)"
                ));
            } else if let Some(by) = deny.iter().find(|by| covers(by, entry)) {
                notes.push(format!(
                    "ask entry {entry}: deny entry {by} refuses it, without asking (deny wins over ask)"
                ));
            }
        }
        notes
    }

    /// Warnings, one sentence each, for a profile with rules (`allow`, not only `inspect`)
    /// that also has `open = true` (anything reaches the hosts' addresses), address entries
    /// (a connection by address is relayed unread), or names that are neither a host with
    /// rules nor a secret's host (relayed unread: if one is served by the same server, a
    /// request inside its TLS can name a host with rules). Empty otherwise.
    pub fn http_rule_gaps(&self) -> Vec<String> {
        let ruled: Vec<&str> = self
            .http
            .iter()
            .filter(|rules| rules.allow.is_some())
            .map(|rules| rules.host.as_str())
            .collect();
        if ruled.is_empty() {
            return Vec::new();
        }
        let hosts = ruled.join(", ");
        let (allow, open) = match &self.network {
            NetworkMode::None => return Vec::new(),
            NetworkMode::Allow { allow, .. } => (allow, false),
            NetworkMode::Open { allow, .. } => (allow, true),
        };
        let mut gaps = Vec::new();
        if open {
            gaps.push(format!(
                "network is open: a program can connect to the addresses of {hosts} directly, and such a connection is relayed without its requests read, so [[network.http]] guards against mistakes only"
            ));
        }
        let read = |name: &str| {
            ruled.contains(&name)
                || self.http.iter().any(|rules| rules.host == name)
                || self
                    .secrets
                    .iter()
                    .any(|secret| secret.hosts.iter().any(|h| h == name))
        };
        let mut addresses = Vec::new();
        let mut names = Vec::new();
        for destination in allow {
            match destination {
                Destination::Net { .. } => addresses.push(destination.to_string()),
                Destination::Name { name, wildcard, .. } if *wildcard || !read(name) => {
                    names.push(destination.to_string());
                }
                Destination::Name { .. } => {}
            }
        }
        if !addresses.is_empty() {
            gaps.push(format!(
                "[network] allows addresses ({}): a connection by address is relayed without its requests read; if one is a server of {hosts}, [[network.http]] does not hold there",
                addresses.join(", ")
            ));
        }
        if !names.is_empty() {
            gaps.push(format!(
                "[network] allows other names ({}), relayed without their requests read: if one reaches the same server as {hosts} (another name of it, a CDN in front of it), a request through it may name {hosts} in its Host header, and [[network.http]] does not hold there",
                names.join(", ")
            ));
        }
        gaps
    }
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use crate::parse_profile;

    fn gaps(network: &str, http: &str) -> Vec<String> {
        let text = format!("{network}\n{http}");
        parse_profile(&text, "t", Path::new("t.toml"))
            .unwrap()
            .http_rule_gaps()
    }

    const RULED: &str = "[[network.http]]\nhost = \"api.test\"\nallow = [\"GET /x\"]\n";

    #[test]
    fn rules_beside_open_network_addresses_or_other_names_are_warned_of() {
        let only = gaps("[network]\nallow = [\"api.test\"]", RULED);
        assert!(only.is_empty(), "{only:?}");
        let open = gaps("[network]\nopen = true\nallow = [\"api.test\"]", RULED);
        assert_eq!(open.len(), 1, "{open:?}");
        assert!(open[0].starts_with("network is open"), "{open:?}");
        let wide = gaps(
            "[network]\nallow = [\"api.test\", \"10.0.0.5\", \"cdn.test\", \"*.api.test\"]",
            RULED,
        );
        assert_eq!(wide.len(), 2, "{wide:?}");
        assert!(wide[0].contains("(10.0.0.5)"), "{wide:?}");
        assert!(wide[1].contains("(cdn.test, *.api.test)"), "{wide:?}");
        // Inspected only: nothing is ruled, nothing to go around.
        let inspected = "[[network.http]]\nhost = \"api.test\"\ninspect = true\n";
        assert!(gaps("[network]\nopen = true\nallow = [\"api.test\"]", inspected).is_empty());
    }
}
