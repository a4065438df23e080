//! Addresses the host must be protected from: a sandbox reaching them would be SSRF into the host,
//! its LAN or its cloud's metadata service.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// An IPv4-mapped IPv6 address (`::ffff:10.0.0.1`) is the IPv4 address it carries.
pub fn canonical(addr: IpAddr) -> IpAddr {
    match addr {
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => addr,
        },
        v4 => v4,
    }
}

/// `addr` with every bit after `prefix` cleared.
pub fn network_of(addr: IpAddr, prefix: u8) -> IpAddr {
    match addr {
        IpAddr::V4(v4) => {
            let bits = u32::from(v4);
            let mask = if prefix == 0 {
                0
            } else {
                u32::MAX << (32 - u32::from(prefix.min(32)))
            };
            IpAddr::V4(Ipv4Addr::from(bits & mask))
        }
        IpAddr::V6(v6) => {
            let bits = u128::from(v6);
            let mask = if prefix == 0 {
                0
            } else {
                u128::MAX << (128 - u32::from(prefix.min(128)))
            };
            IpAddr::V6(Ipv6Addr::from(bits & mask))
        }
    }
}

fn in_net(addr: IpAddr, net: &str) -> bool {
    let (base, prefix) = net.split_once('/').unwrap_or((net, ""));
    let Ok(base) = base.parse::<IpAddr>() else {
        return false;
    };
    let full = if base.is_ipv4() { 32 } else { 128 };
    let prefix = prefix.parse().unwrap_or(full);
    base.is_ipv4() == addr.is_ipv4() && network_of(addr, prefix) == base
}

/// Cloud metadata services, by address.
const METADATA: &[&str] = &[
    "169.254.169.254", // AWS, GCP, Azure, OpenStack, DigitalOcean…
    "169.254.170.2",   // AWS ECS task metadata
    "100.100.100.200", // Alibaba Cloud
    "192.0.0.192",     // Oracle Cloud (classic)
    "fd00:ec2::254",   // AWS over IPv6
];

/// The kinds of address a sandbox may reach only when an allow entry names them.
const SPECIAL: &[(&str, &str)] = &[
    ("0.0.0.0/8", "unspecified"),
    ("127.0.0.0/8", "loopback"),
    ("10.0.0.0/8", "private"),
    ("172.16.0.0/12", "private"),
    ("192.168.0.0/16", "private"),
    ("100.64.0.0/10", "CGNAT"),
    ("169.254.0.0/16", "link-local"),
    ("192.0.0.0/24", "IETF protocol assignment"),
    ("198.18.0.0/15", "benchmarking"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved"),
    ("255.255.255.255/32", "broadcast"),
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("fc00::/7", "private (unique local)"),
    ("fe80::/10", "link-local"),
    ("ff00::/8", "multicast"),
    ("::/96", "IPv4-compatible"),
    ("::ffff:0:0:0/96", "IPv4-translated"),
    ("64:ff9b::/96", "NAT64"),
    ("64:ff9b:1::/48", "NAT64 (local)"),
    ("2002::/16", "6to4"),
    ("2001::/32", "Teredo"),
];

/// Why `addr` is one the host must be protected from; None for an ordinary public address.
pub fn special(addr: IpAddr) -> Option<&'static str> {
    let addr = canonical(addr);
    if METADATA.iter().any(|m| in_net(addr, m)) {
        return Some("cloud metadata");
    }
    SPECIAL
        .iter()
        .find(|(net, _)| in_net(addr, net))
        .map(|(_, kind)| *kind)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(text: &str) -> Option<&'static str> {
        special(text.parse().unwrap())
    }

    #[test]
    fn the_hosts_own_addresses_are_special() {
        assert_eq!(kind("127.0.0.1"), Some("loopback"));
        assert_eq!(kind("::1"), Some("loopback"));
        assert_eq!(kind("::ffff:127.0.0.1"), Some("loopback"));
        assert_eq!(kind("10.1.2.3"), Some("private"));
        assert_eq!(kind("172.31.255.255"), Some("private"));
        assert_eq!(kind("192.168.0.1"), Some("private"));
        assert_eq!(kind("100.64.0.1"), Some("CGNAT"));
        assert_eq!(kind("169.254.1.1"), Some("link-local"));
        assert_eq!(kind("169.254.169.254"), Some("cloud metadata"));
        assert_eq!(kind("fd00:ec2::254"), Some("cloud metadata"));
        assert_eq!(kind("100.100.100.200"), Some("cloud metadata"));
        assert_eq!(kind("fd12:3456::1"), Some("private (unique local)"));
        assert_eq!(kind("fe80::1"), Some("link-local"));
        assert_eq!(kind("224.0.0.1"), Some("multicast"));
        assert_eq!(kind("0.0.0.0"), Some("unspecified"));
        assert_eq!(kind("64:ff9b::a00:1"), Some("NAT64"));
        // Found by review: IPv4-compatible and -translated forms of any address.
        assert_eq!(kind("::127.0.0.1"), Some("IPv4-compatible"));
        assert_eq!(kind("::ffff:0:7f00:1"), Some("IPv4-translated"));
        assert_eq!(kind("64:ff9b:1::a00:1"), Some("NAT64 (local)"));
    }

    #[test]
    fn public_addresses_are_not() {
        for addr in [
            "140.82.112.3",
            "8.8.8.8",
            "172.32.0.1",
            "2606:4700::1111",
            "100.128.0.1",
        ] {
            assert_eq!(kind(addr), None, "{addr}");
        }
    }

    #[test]
    fn networks_clear_host_bits() {
        assert_eq!(
            network_of("10.1.2.3".parse().unwrap(), 8),
            "10.0.0.0".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            network_of("10.1.2.3".parse().unwrap(), 0),
            "0.0.0.0".parse::<IpAddr>().unwrap()
        );
        assert_eq!(
            network_of("2001:db8::1".parse().unwrap(), 32),
            "2001:db8::".parse::<IpAddr>().unwrap()
        );
    }
}
