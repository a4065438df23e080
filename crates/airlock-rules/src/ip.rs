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

/// A network: the address it starts at and how many leading bits of it count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Net {
    base: IpAddr,
    prefix: u8,
}

const fn v4(a: u8, b: u8, c: u8, d: u8, prefix: u8) -> Net {
    Net {
        base: IpAddr::V4(Ipv4Addr::new(a, b, c, d)),
        prefix,
    }
}

const fn v6(segments: [u16; 8], prefix: u8) -> Net {
    let [a, b, c, d, e, f, g, h] = segments;
    Net {
        base: IpAddr::V6(Ipv6Addr::new(a, b, c, d, e, f, g, h)),
        prefix,
    }
}

impl Net {
    fn holds(&self, addr: IpAddr) -> bool {
        self.base.is_ipv4() == addr.is_ipv4() && network_of(addr, self.prefix) == self.base
    }

    /// A prefix the family has, and no bit set after it: a row that is not is a typo, and a
    /// typo here would let the sandbox reach what the row was written to keep it from.
    const fn is_valid(&self) -> bool {
        match self.base {
            IpAddr::V4(v4) => {
                self.prefix <= 32
                    && (self.prefix == 32 || v4.to_bits() & (u32::MAX >> self.prefix) == 0)
            }
            IpAddr::V6(v6) => {
                self.prefix <= 128
                    && (self.prefix == 128 || v6.to_bits() & (u128::MAX >> self.prefix) == 0)
            }
        }
    }
}

/// Cloud metadata services, by address.
const METADATA: &[Net] = &[
    v4(169, 254, 169, 254, 32), // AWS, GCP, Azure, OpenStack, DigitalOcean…
    v4(169, 254, 170, 2, 32),   // AWS ECS task metadata
    v4(100, 100, 100, 200, 32), // Alibaba Cloud
    v4(192, 0, 0, 192, 32),     // Oracle Cloud (classic)
    v4(168, 63, 129, 16, 32),   // Azure's WireServer (agent configuration, a VM's certificates)
    v6([0xfd00, 0xec2, 0, 0, 0, 0, 0, 0x254], 128), // AWS over IPv6
];

/// The kinds of address a sandbox may reach only when an allow entry names them. The first row
/// that holds an address names its kind.
const SPECIAL: &[(Net, &str)] = &[
    (v4(0, 0, 0, 0, 8), "unspecified"),
    (v4(127, 0, 0, 0, 8), "loopback"),
    (v4(10, 0, 0, 0, 8), "private"),
    (v4(172, 16, 0, 0, 12), "private"),
    (v4(192, 168, 0, 0, 16), "private"),
    (v4(100, 64, 0, 0, 10), "CGNAT"),
    (v4(169, 254, 0, 0, 16), "link-local"),
    (v4(192, 0, 0, 0, 24), "IETF protocol assignment"),
    (v4(198, 18, 0, 0, 15), "benchmarking"),
    (v4(224, 0, 0, 0, 4), "multicast"),
    (v4(240, 0, 0, 0, 4), "reserved"),
    (v4(255, 255, 255, 255, 32), "broadcast"),
    (v6([0, 0, 0, 0, 0, 0, 0, 0], 128), "unspecified"),
    (v6([0, 0, 0, 0, 0, 0, 0, 1], 128), "loopback"),
    (
        v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 7),
        "private (unique local)",
    ),
    (v6([0xfe80, 0, 0, 0, 0, 0, 0, 0], 10), "link-local"),
    (v6([0xff00, 0, 0, 0, 0, 0, 0, 0], 8), "multicast"),
    (v6([0, 0, 0, 0, 0, 0, 0, 0], 96), "IPv4-compatible"),
    (v6([0, 0, 0, 0, 0xffff, 0, 0, 0], 96), "IPv4-translated"),
    (v6([0x64, 0xff9b, 0, 0, 0, 0, 0, 0], 96), "NAT64"),
    (v6([0x64, 0xff9b, 1, 0, 0, 0, 0, 0], 48), "NAT64 (local)"),
    (v6([0x2002, 0, 0, 0, 0, 0, 0, 0], 16), "6to4"),
    (v6([0x2001, 0, 0, 0, 0, 0, 0, 0], 32), "Teredo"),
];

/// Every row of both tables is checked when this crate is built: a malformed one does not
/// compile, rather than silently never matching.
const _: () = {
    let mut i = 0;
    while i < METADATA.len() {
        assert!(METADATA[i].is_valid(), "a malformed METADATA row");
        i += 1;
    }
    let mut i = 0;
    while i < SPECIAL.len() {
        assert!(SPECIAL[i].0.is_valid(), "a malformed SPECIAL row");
        i += 1;
    }
};

/// Why `addr` is one the host must be protected from; None for an ordinary public address.
pub fn special(addr: IpAddr) -> Option<&'static str> {
    let addr = canonical(addr);
    if METADATA.iter().any(|net| net.holds(addr)) {
        return Some("cloud metadata");
    }
    SPECIAL
        .iter()
        .find(|(net, _)| net.holds(addr))
        .map(|(_, kind)| *kind)
}

/// Every network [`special`] names (and the metadata addresses), as address and prefix: what
/// a rule kept outside the host (a Kubernetes NetworkPolicy's `except`) must leave out for the
/// sandbox's "public addresses" to mean the same there as here.
pub fn protected_networks() -> impl Iterator<Item = (IpAddr, u8)> {
    METADATA
        .iter()
        .chain(SPECIAL.iter().map(|(net, _)| net))
        .map(|net| (net.base, net.prefix))
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
        // Found by review: a public address, but Azure's host endpoint on every VM.
        assert_eq!(kind("168.63.129.16"), Some("cloud metadata"));
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

    /// The tables as they were first written, as CIDR text: each row must be that network.
    const WRITTEN: &[&str] = &[
        "0.0.0.0/8",
        "127.0.0.0/8",
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "100.64.0.0/10",
        "169.254.0.0/16",
        "192.0.0.0/24",
        "198.18.0.0/15",
        "224.0.0.0/4",
        "240.0.0.0/4",
        "255.255.255.255/32",
        "::/128",
        "::1/128",
        "fc00::/7",
        "fe80::/10",
        "ff00::/8",
        "::/96",
        "::ffff:0:0:0/96",
        "64:ff9b::/96",
        "64:ff9b:1::/48",
        "2002::/16",
        "2001::/32",
    ];

    fn net(text: &str) -> Net {
        let (base, prefix) = text.split_once('/').unwrap();
        Net {
            base: base.parse().unwrap(),
            prefix: prefix.parse().unwrap(),
        }
    }

    #[test]
    fn every_row_is_a_valid_network_as_written() {
        assert_eq!(SPECIAL.len(), WRITTEN.len());
        for ((row, kind), text) in SPECIAL.iter().zip(WRITTEN) {
            assert!(row.is_valid(), "{text} ({kind})");
            assert_eq!(*row, net(text), "{kind}");
        }
        let metadata = [
            "169.254.169.254/32",
            "169.254.170.2/32",
            "100.100.100.200/32",
            "192.0.0.192/32",
            "168.63.129.16/32",
            "fd00:ec2::254/128",
        ];
        assert_eq!(METADATA.len(), metadata.len());
        for (row, text) in METADATA.iter().zip(metadata) {
            assert!(row.is_valid(), "{text}");
            assert_eq!(*row, net(text));
        }
    }

    #[test]
    fn malformed_rows_are_not_valid() {
        assert!(!v4(10, 0, 0, 1, 8).is_valid(), "host bits");
        assert!(!v4(10, 0, 0, 0, 33).is_valid(), "prefix too long");
        assert!(
            !v6([0xfc00, 0, 0, 0, 0, 0, 0, 1], 7).is_valid(),
            "host bits"
        );
        assert!(!v6([0xfc00, 0, 0, 0, 0, 0, 0, 0], 129).is_valid());
        assert!(v4(0, 0, 0, 0, 0).is_valid());
        assert!(v6([0, 0, 0, 0, 0, 0, 0, 1], 128).is_valid());
    }

    #[test]
    fn every_class_is_found_at_both_ends_of_its_rows() {
        for (row, kind) in SPECIAL {
            let last = match row.base {
                IpAddr::V4(v4) => IpAddr::V4(Ipv4Addr::from_bits(
                    v4.to_bits() | u32::MAX.checked_shr(u32::from(row.prefix)).unwrap_or(0),
                )),
                IpAddr::V6(v6) => IpAddr::V6(Ipv6Addr::from_bits(
                    v6.to_bits() | u128::MAX.checked_shr(u32::from(row.prefix)).unwrap_or(0),
                )),
            };
            for addr in [row.base, last] {
                // An earlier row (or the metadata list) may claim an end first; none is public.
                assert!(special(addr).is_some(), "{addr} ({kind})");
            }
        }
        for row in METADATA {
            assert_eq!(special(row.base), Some("cloud metadata"), "{}", row.base);
        }
    }

    #[test]
    fn each_class_by_example() {
        for (addr, expected) in [
            ("127.255.255.255", "loopback"),
            ("0.1.2.3", "unspecified"),
            ("::", "unspecified"),
            ("10.255.255.255", "private"),
            ("172.16.0.0", "private"),
            ("192.168.255.255", "private"),
            ("100.127.255.255", "CGNAT"),
            ("169.254.0.1", "link-local"),
            ("169.254.169.254", "cloud metadata"),
            ("169.254.170.2", "cloud metadata"),
            ("192.0.0.192", "cloud metadata"),
            ("192.0.0.8", "IETF protocol assignment"),
            ("198.19.0.1", "benchmarking"),
            ("239.255.255.255", "multicast"),
            ("240.0.0.1", "reserved"),
            // 240.0.0.0/4 comes first and holds the broadcast address too.
            ("255.255.255.255", "reserved"),
            ("fc00::1", "private (unique local)"),
            ("fdff:ffff::1", "private (unique local)"),
            ("febf::1", "link-local"),
            ("ff02::1", "multicast"),
            ("2002:c000:201::1", "6to4"),
            ("2001:0:4136:e378::1", "Teredo"),
            // IPv4-mapped IPv6 is the IPv4 address it carries.
            ("::ffff:10.0.0.1", "private"),
            ("::ffff:169.254.169.254", "cloud metadata"),
            ("::ffff:100.64.0.1", "CGNAT"),
            ("::ffff:8.8.8.8", ""),
        ] {
            assert_eq!(kind(addr).unwrap_or(""), expected, "{addr}");
        }
    }

    #[test]
    fn the_addresses_next_to_a_class_are_public() {
        for addr in [
            "1.0.0.0",
            "9.255.255.255",
            "11.0.0.0",
            "126.255.255.255",
            "128.0.0.0",
            "172.15.255.255",
            "192.167.255.255",
            "192.169.0.0",
            "100.63.255.255",
            "169.253.255.255",
            "169.255.0.0",
            "192.0.1.0",
            "198.17.255.255",
            "198.20.0.0",
            "223.255.255.255",
            "fbff:ffff:ffff:ffff:ffff:ffff:ffff:ffff",
            "fe00::1",
            "fec0::1",
            "2001:1::1",
            "2003::1",
            "64:ff9b:2::1",
            "::1:0:0:1",
        ] {
            assert_eq!(kind(addr), None, "{addr}");
        }
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
