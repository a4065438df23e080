//! The NetworkPolicy of airlock's pods: what the kernel of the node holds them to, below airlock's
//! own gate. A NetworkPolicy knows addresses and ports, never names: it lets the pod reach public
//! addresses (what airlock's rules call public) on the ports the profile's allow entries name, and
//! the addresses they name; which domains may be reached stays the gate's decision.

use std::collections::BTreeSet;
use std::net::IpAddr;

use airlock_rules::{Destination, Egress};
use serde_json::{json, Value};

/// Where agent-sandbox's router runs: the pods allowed to reach airlock's ports.
#[derive(Debug, Clone)]
pub struct RouterPods {
    pub namespace: String,
    pub labels: Vec<(String, String)>,
}

/// The ports airlock serves in the pod: the legacy runtime and the API, sandboxd's REST and gRPC.
pub const SERVED_PORTS: [(&str, u16); 3] = [
    ("runtime", 8888),
    ("sandboxd-rest", 8080),
    ("sandboxd-grpc", 9090),
];

/// The policy's `spec`: ingress from the router (and the namespaces named) on airlock's ports;
/// egress as the profile's network allows, by address and port, never to `excluded` (the
/// cluster's own networks, where they are not private addresses) but where the profile names
/// an address there.
pub fn policy_spec(
    pod_labels: &Value,
    egress: &Egress,
    router: &RouterPods,
    client_namespaces: &[String],
    excluded: &[(IpAddr, u8)],
) -> Value {
    json!({
        "podSelector": {"matchLabels": pod_labels},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": ingress(router, client_namespaces),
        "egress": egress_rules(egress, excluded),
    })
}

fn ingress(router: &RouterPods, client_namespaces: &[String]) -> Vec<Value> {
    let ports: Vec<Value> = SERVED_PORTS.iter().map(|(_, port)| tcp(*port)).collect();
    let labels: serde_json::Map<String, Value> = router
        .labels
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect();
    let mut from = vec![json!({
        "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": router.namespace}},
        "podSelector": {"matchLabels": labels},
    })];
    from.extend(client_namespaces.iter().map(|namespace| {
        json!({"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": namespace}}})
    }));
    vec![json!({"from": from, "ports": ports})]
}

fn egress_rules(egress: &Egress, excluded: &[(IpAddr, u8)]) -> Vec<Value> {
    let (allow, deny, open) = match egress {
        // Not even DNS: airlock resolves names only for a sandbox that may reach one.
        Egress::None => return Vec::new(),
        Egress::Allow { allow, deny } => (allow, deny, false),
        Egress::Open { allow, deny } => (allow, deny, true),
    };
    // Denied networks, on every port: what the policy can take out. A denial of one port stays
    // the gate's (taking the whole network out here would refuse what the profile allows).
    let denied: Vec<(IpAddr, u8)> = deny
        .iter()
        .filter_map(|d| match d {
            Destination::Net {
                addr,
                prefix,
                port: None,
            } => Some(canonical_net(*addr, *prefix)),
            _ => None,
        })
        .collect();
    let mut rules = vec![dns()];
    let names: Vec<&Destination> = allow
        .iter()
        .filter(|d| matches!(d, Destination::Name { .. }))
        .collect();
    // Public addresses: every port for an open network or a name allowed on any port; else the
    // ports the names are allowed on.
    let any_port = open || names.iter().any(|d| port_of(d).is_none());
    let name_ports: BTreeSet<u16> = names.iter().filter_map(|d| port_of(d)).collect();
    if any_port || !name_ports.is_empty() {
        let taken_out: Vec<(IpAddr, u8)> = airlock_rules::ip::protected_networks()
            .chain(excluded.iter().copied())
            .chain(denied.iter().copied())
            .collect();
        let to = public_blocks(&taken_out);
        if !to.is_empty() {
            rules.push(json!({"to": to, "ports": ports(any_port, name_ports)}));
        }
    }
    // Addresses the profile names (a private database, say): as named, with their ports, less
    // what it denies within them.
    for destination in allow {
        let Destination::Net { addr, prefix, port } = destination else {
            continue;
        };
        let net = canonical_net(*addr, *prefix);
        if denied.iter().any(|d| holds(*d, net)) {
            continue;
        }
        let except: BTreeSet<String> = denied
            .iter()
            .filter(|d| d.1 > net.1 && holds(net, **d))
            .map(|(a, p)| cidr(*a, *p))
            .collect();
        let mut block = json!({"cidr": cidr(net.0, net.1)});
        if !except.is_empty() {
            block["except"] = json!(except);
        }
        let ports = ports(port.is_none(), port.iter().copied().collect());
        rules.push(json!({"to": [{"ipBlock": block}], "ports": ports}));
    }
    rules
}

/// TCP only (airlock's gate carries nothing else out of a sandbox, and the server itself
/// speaks nothing else): every port, or these.
fn ports(any_port: bool, ports: BTreeSet<u16>) -> Vec<Value> {
    if any_port {
        vec![json!({"protocol": "TCP"})]
    } else {
        ports.into_iter().map(tcp).collect()
    }
}

/// An address and prefix as the gate compares them: an IPv4-mapped IPv6 network is the IPv4
/// network it maps.
pub(crate) fn canonical_net(addr: IpAddr, prefix: u8) -> (IpAddr, u8) {
    match addr {
        IpAddr::V6(v6) if prefix >= 96 && v6.to_ipv4_mapped().is_some() => {
            (airlock_rules::ip::canonical(addr), prefix - 96)
        }
        _ => (addr, prefix),
    }
}

/// Whether the network `outer` holds all of `inner`.
fn holds(outer: (IpAddr, u8), inner: (IpAddr, u8)) -> bool {
    outer.0.is_ipv4() == inner.0.is_ipv4()
        && outer.1 <= inner.1
        && airlock_rules::ip::network_of(inner.0, outer.1) == outer.0
}

fn port_of(destination: &Destination) -> Option<u16> {
    match destination {
        Destination::Name { port, .. } | Destination::Net { port, .. } => *port,
    }
}

/// The cluster's DNS, which airlock's gate asks for the names the sandbox may reach.
fn dns() -> Value {
    json!({
        "to": [{
            "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "kube-system"}},
            "podSelector": {"matchLabels": {"k8s-app": "kube-dns"}},
        }],
        "ports": [{"protocol": "UDP", "port": 53}, tcp(53)],
    })
}

/// Every address but those taken out (airlock's protected networks, the cluster's own that the
/// operator named, the profile's denied ones), in both families; a family taken out whole has
/// no block.
fn public_blocks(taken_out: &[(IpAddr, u8)]) -> Vec<Value> {
    let block = |everything: &str, v4: bool| {
        let of_family: Vec<&(IpAddr, u8)> = taken_out
            .iter()
            .filter(|(a, _)| a.is_ipv4() == v4)
            .collect();
        if of_family.iter().any(|(_, prefix)| *prefix == 0) {
            return None;
        }
        let except: BTreeSet<String> = of_family.iter().map(|(a, p)| cidr(*a, *p)).collect();
        Some(json!({"ipBlock": {"cidr": everything, "except": except}}))
    };
    [block("0.0.0.0/0", true), block("::/0", false)]
        .into_iter()
        .flatten()
        .collect()
}

fn cidr(addr: IpAddr, prefix: u8) -> String {
    format!("{addr}/{prefix}")
}

fn tcp(port: u16) -> Value {
    json!({"protocol": "TCP", "port": port})
}

#[cfg(test)]
mod tests {
    use super::*;

    fn destination(text: &str) -> Destination {
        Destination::parse(text).unwrap()
    }

    fn rules(allow: &[&str], deny: &[&str], open: bool) -> Vec<Value> {
        let allow = allow.iter().map(|d| destination(d)).collect();
        let deny = deny.iter().map(|d| destination(d)).collect();
        let egress = if open {
            Egress::Open { allow, deny }
        } else {
            Egress::Allow { allow, deny }
        };
        egress_rules(&egress, &[])
    }

    fn except_of(block: &Value) -> Vec<String> {
        block["ipBlock"]["except"]
            .as_array()
            .map(|a| a.iter().map(|v| v.as_str().unwrap().to_string()).collect())
            .unwrap_or_default()
    }

    #[test]
    fn no_network_is_no_egress_at_all() {
        assert!(egress_rules(&Egress::None, &[]).is_empty());
    }

    #[test]
    fn names_give_public_addresses_on_their_ports() {
        let rules = rules(
            &["github.com:443", "*.pypi.org:443", "registry.npmjs.org:80"],
            &["203.0.113.0/24", "198.51.100.7:22"],
            false,
        );
        assert_eq!(rules.len(), 2, "{rules:#?}");
        assert_eq!(rules[0]["ports"][0]["port"], 53);
        assert_eq!(rules[1]["ports"], json!([tcp(80), tcp(443)]));
        let v4 = &rules[1]["to"][0];
        assert_eq!(v4["ipBlock"]["cidr"], "0.0.0.0/0");
        let except = except_of(v4);
        for taken_out in [
            "10.0.0.0/8",
            "127.0.0.0/8",
            "169.254.0.0/16",
            "192.168.0.0/16",
            "203.0.113.0/24",
        ] {
            assert!(
                except.contains(&taken_out.to_string()),
                "{taken_out} not in {except:?}"
            );
        }
        // A denial of one port is the gate's: the policy would refuse the network's other ports.
        assert!(
            !except.contains(&"198.51.100.7/32".to_string()),
            "{except:?}"
        );
        assert!(except_of(&rules[1]["to"][1]).contains(&"fc00::/7".to_string()));
    }

    #[test]
    fn every_port_is_every_tcp_port() {
        for rules in [rules(&["example.com"], &[], false), rules(&[], &[], true)] {
            assert_eq!(
                rules[1]["ports"],
                json!([{"protocol": "TCP"}]),
                "{rules:#?}"
            );
        }
    }

    #[test]
    fn named_addresses_as_named_less_what_is_denied_in_them() {
        let rules = rules(&["10.1.2.3:5432"], &[], false);
        assert_eq!(
            rules.len(),
            2,
            "DNS and the address, no public rule: {rules:#?}"
        );
        assert_eq!(
            rules[1],
            json!({"to": [{"ipBlock": {"cidr": "10.1.2.3/32"}}], "ports": [tcp(5432)]})
        );
        let rules = super::tests::rules(&["10.0.0.0/8"], &["10.1.2.0/24", "10.9.9.9:22"], false);
        assert_eq!(except_of(&rules[1]["to"][0]), ["10.1.2.0/24"], "{rules:#?}");
        let rules = super::tests::rules(&["10.1.2.0/24"], &["10.0.0.0/8"], false);
        assert_eq!(
            rules.len(),
            1,
            "an allowed network inside a denied one is not opened: {rules:#?}"
        );
    }

    #[test]
    fn denials_as_the_gate_reads_them() {
        // A whole family denied: no block for it at all (an except of /0 is not one).
        let rules = rules(&[], &["0.0.0.0/0"], true);
        let cidrs: Vec<&Value> = rules[1]["to"]
            .as_array()
            .unwrap()
            .iter()
            .map(|b| &b["ipBlock"]["cidr"])
            .collect();
        assert_eq!(cidrs, [&json!("::/0")], "{rules:#?}");
        // An IPv4-mapped IPv6 denial is the IPv4 network it maps.
        let rules = super::tests::rules(&[], &["::ffff:203.0.113.5"], true);
        assert!(
            except_of(&rules[1]["to"][0]).contains(&"203.0.113.5/32".to_string()),
            "{rules:#?}"
        );
    }

    #[test]
    fn the_clusters_own_networks_are_taken_out() {
        let egress = Egress::Open {
            allow: vec![],
            deny: vec![],
        };
        let rules = egress_rules(
            &egress,
            &[
                ("198.18.0.0".parse().unwrap(), 15),
                ("34.118.224.0".parse().unwrap(), 20),
            ],
        );
        assert!(except_of(&rules[1]["to"][0]).contains(&"34.118.224.0/20".to_string()));
    }
}
