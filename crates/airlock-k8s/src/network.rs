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
/// egress as the profile's network allows, by address and port.
pub fn policy_spec(
    pod_labels: &Value,
    egress: &Egress,
    router: &RouterPods,
    client_namespaces: &[String],
) -> Value {
    json!({
        "podSelector": {"matchLabels": pod_labels},
        "policyTypes": ["Ingress", "Egress"],
        "ingress": ingress(router, client_namespaces),
        "egress": egress_rules(egress),
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

fn egress_rules(egress: &Egress) -> Vec<Value> {
    let (allow, deny, open) = match egress {
        // Not even DNS: airlock resolves names only for a sandbox that may reach one.
        Egress::None => return Vec::new(),
        Egress::Allow { allow, deny } => (allow, deny, false),
        Egress::Open { allow, deny } => (allow, deny, true),
    };
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
        let mut rule = json!({"to": public_blocks(deny)});
        if !any_port {
            rule["ports"] = name_ports.into_iter().map(tcp).collect();
        }
        rules.push(rule);
    }
    // Addresses the profile names (a private database, say): as named, with their ports.
    for destination in allow {
        if let Destination::Net { addr, prefix, port } = destination {
            let mut rule = json!({"to": [{"ipBlock": {"cidr": cidr(*addr, *prefix)}}]});
            if let Some(port) = port {
                rule["ports"] = json!([tcp(*port)]);
            }
            rules.push(rule);
        }
    }
    rules
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

/// Every address but those airlock protects (loopback, private, link-local, metadata, …) and
/// those the profile denies, in both families.
fn public_blocks(deny: &[Destination]) -> Vec<Value> {
    let denied = deny.iter().filter_map(|d| match d {
        Destination::Net { addr, prefix, .. } => Some((*addr, *prefix)),
        Destination::Name { .. } => None,
    });
    let excluded: Vec<(IpAddr, u8)> = airlock_rules::ip::protected_networks()
        .chain(denied)
        .collect();
    let block = |everything: &str, v4: bool| {
        let except: BTreeSet<String> = excluded
            .iter()
            .filter(|(addr, prefix)| addr.is_ipv4() == v4 && *prefix > 0)
            .map(|(addr, prefix)| cidr(*addr, *prefix))
            .collect();
        json!({"ipBlock": {"cidr": everything, "except": except}})
    };
    vec![block("0.0.0.0/0", true), block("::/0", false)]
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

    #[test]
    fn no_network_is_no_egress_at_all() {
        assert!(egress_rules(&Egress::None).is_empty());
    }

    #[test]
    fn names_give_public_addresses_on_their_ports() {
        let egress = Egress::Allow {
            allow: vec![
                destination("github.com:443"),
                destination("*.pypi.org:443"),
                destination("registry.npmjs.org:80"),
            ],
            deny: vec![destination("203.0.113.0/24")],
        };
        let rules = egress_rules(&egress);
        assert_eq!(rules.len(), 2, "{rules:#?}");
        assert_eq!(rules[0]["ports"][0]["port"], 53);
        assert_eq!(rules[1]["ports"], json!([tcp(80), tcp(443)]));
        let v4 = &rules[1]["to"][0]["ipBlock"];
        assert_eq!(v4["cidr"], "0.0.0.0/0");
        let except: Vec<&str> = v4["except"]
            .as_array()
            .unwrap()
            .iter()
            .map(|v| v.as_str().unwrap())
            .collect();
        for private in [
            "10.0.0.0/8",
            "127.0.0.0/8",
            "169.254.0.0/16",
            "192.168.0.0/16",
            "203.0.113.0/24",
        ] {
            assert!(except.contains(&private), "{private} not in {except:?}");
        }
        assert!(rules[1]["to"][1]["ipBlock"]["except"]
            .as_array()
            .unwrap()
            .contains(&json!("fc00::/7")));
    }

    #[test]
    fn a_name_on_any_port_and_an_open_network_open_every_port() {
        let any = Egress::Allow {
            allow: vec![destination("example.com")],
            deny: vec![],
        };
        assert!(egress_rules(&any)[1].get("ports").is_none());
        let open = Egress::Open {
            allow: vec![],
            deny: vec![],
        };
        assert!(egress_rules(&open)[1].get("ports").is_none());
    }

    #[test]
    fn named_addresses_as_named() {
        let egress = Egress::Allow {
            allow: vec![destination("10.1.2.3:5432")],
            deny: vec![],
        };
        let rules = egress_rules(&egress);
        assert_eq!(
            rules.len(),
            2,
            "DNS and the address, no public rule: {rules:#?}"
        );
        assert_eq!(
            rules[1],
            json!({"to": [{"ipBlock": {"cidr": "10.1.2.3/32"}}], "ports": [tcp(5432)]})
        );
    }
}
