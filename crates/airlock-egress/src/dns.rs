//! The sandbox's DNS, answered by airlock: a query for a name the profile allows gets a synthetic
//! address that maps back to the name (the gate resolves the real one on the host, once, when a
//! connection to it comes); any other name gets NXDOMAIN. Nothing is forwarded, so nothing can
//! leave through DNS (no tunnelling through subdomains of a denied name).
//!
//! Only what a stub resolver sends is understood: one question, no compression in it.

use std::collections::HashMap;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

pub const TYPE_A: u16 = 1;
pub const TYPE_AAAA: u16 = 28;
const CLASS_IN: u16 = 1;

/// One query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Query {
    pub id: u16,
    /// Lowercase, without the final dot.
    pub name: String,
    pub qtype: u16,
    /// The question as received (name, type, class), echoed in the answer.
    question: Vec<u8>,
    recursion_desired: bool,
}

/// Parse a query; None for anything else (a response, several questions, a malformed packet).
pub fn parse_query(packet: &[u8]) -> Option<Query> {
    if packet.len() < 12 {
        return None;
    }
    let id = u16::from_be_bytes([packet[0], packet[1]]);
    let flags = u16::from_be_bytes([packet[2], packet[3]]);
    let is_query = flags & 0x8000 == 0 && (flags >> 11) & 0xf == 0;
    let questions = u16::from_be_bytes([packet[4], packet[5]]);
    if !is_query || questions != 1 {
        return None;
    }
    let mut at = 12;
    let mut labels = Vec::new();
    loop {
        let len = usize::from(*packet.get(at)?);
        at += 1;
        if len == 0 {
            break;
        }
        if len > 63 {
            return None; // a compression pointer, or garbage
        }
        let label = packet.get(at..at + len)?;
        // A dot inside a label would make two labels of one in the name we match rules with.
        if !label.iter().all(|&b| b.is_ascii_graphic() && b != b'.') {
            return None;
        }
        labels.push(String::from_utf8_lossy(label).to_ascii_lowercase());
        at += len;
    }
    let qtype = u16::from_be_bytes([*packet.get(at)?, *packet.get(at + 1)?]);
    let qclass = u16::from_be_bytes([*packet.get(at + 2)?, *packet.get(at + 3)?]);
    if qclass != CLASS_IN {
        return None;
    }
    let name = labels.join(".");
    if name.len() > 253 {
        return None;
    }
    Some(Query {
        id,
        name,
        qtype,
        question: packet[12..at + 4].to_vec(),
        recursion_desired: flags & 0x0100 != 0,
    })
}

fn header(query: &Query, rcode: u16, answers: u16) -> Vec<u8> {
    // QR, AA (we are the authority for the sandbox), RD copied, RA.
    let mut flags = 0x8000 | 0x0400 | 0x0080 | rcode;
    if query.recursion_desired {
        flags |= 0x0100;
    }
    let mut out = Vec::with_capacity(64);
    out.extend_from_slice(&query.id.to_be_bytes());
    out.extend_from_slice(&flags.to_be_bytes());
    out.extend_from_slice(&1u16.to_be_bytes());
    out.extend_from_slice(&answers.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&0u16.to_be_bytes());
    out.extend_from_slice(&query.question);
    out
}

/// The name of a query type, as the audit log writes it ("A", "AAAA", "HTTPS"…; "other" for
/// a type a stub resolver does not ask).
pub fn type_name(qtype: u16) -> &'static str {
    match qtype {
        TYPE_A => "A",
        TYPE_AAAA => "AAAA",
        2 => "NS",
        5 => "CNAME",
        6 => "SOA",
        12 => "PTR",
        15 => "MX",
        16 => "TXT",
        33 => "SRV",
        64 => "SVCB",
        65 => "HTTPS",
        255 => "ANY",
        _ => "other",
    }
}

/// NXDOMAIN: no such name (for the sandbox).
pub fn nxdomain(query: &Query) -> Vec<u8> {
    header(query, 3, 0)
}

/// An answer with `addrs` (those of the query's type; none: an empty answer, "no such record").
pub fn answer(query: &Query, addrs: &[IpAddr], ttl: u32) -> Vec<u8> {
    let wanted: Vec<&IpAddr> = addrs
        .iter()
        .filter(|a| match query.qtype {
            TYPE_A => a.is_ipv4(),
            TYPE_AAAA => a.is_ipv6(),
            _ => false,
        })
        .collect();
    let mut out = header(query, 0, wanted.len() as u16);
    for addr in wanted {
        out.extend_from_slice(&[0xc0, 0x0c]); // the name: a pointer to the question's
        let (kind, data) = match addr {
            IpAddr::V4(v4) => (TYPE_A, v4.octets().to_vec()),
            IpAddr::V6(v6) => (TYPE_AAAA, v6.octets().to_vec()),
        };
        out.extend_from_slice(&kind.to_be_bytes());
        out.extend_from_slice(&CLASS_IN.to_be_bytes());
        out.extend_from_slice(&ttl.to_be_bytes());
        out.extend_from_slice(&(data.len() as u16).to_be_bytes());
        out.extend_from_slice(&data);
    }
    out
}

/// Synthetic addresses handed to the sandbox, one per name, and the name each stands for.
/// IPv4 from 198.18.0.0/15 (reserved for benchmarking: never a real destination), IPv6 from
/// `fd00:a1:a1::/96` (unique local).
#[derive(Debug, Default)]
pub struct Synthetic {
    by_name: HashMap<String, u32>,
    names: Vec<String>,
}

const V4_BASE: u32 = u32::from_be_bytes([198, 18, 0, 0]);
const V4_SIZE: u32 = 1 << 17;
const V6_BASE: u128 = 0xfd00_00a1_00a1_0000_0000_0000_0000_0000;

impl Synthetic {
    /// The addresses that stand for `name` (the same ones every time).
    pub fn addresses(&mut self, name: &str) -> Option<[IpAddr; 2]> {
        let index = match self.by_name.get(name) {
            Some(index) => *index,
            None => {
                let index = u32::try_from(self.names.len())
                    .ok()
                    // The last two addresses are airlock's own (the proxy: 198.19.255.254).
                    .filter(|i| *i + 3 < V4_SIZE)?;
                self.names.push(name.to_string());
                self.by_name.insert(name.to_string(), index);
                index
            }
        };
        // Offset by one: 198.18.0.0 itself is never handed out.
        let v4 = Ipv4Addr::from(V4_BASE + index + 1);
        let v6 = Ipv6Addr::from(V6_BASE + u128::from(index) + 1);
        Some([IpAddr::V4(v4), IpAddr::V6(v6)])
    }

    /// The name a synthetic address stands for; None for any other address.
    pub fn name_of(&self, addr: IpAddr) -> Option<&str> {
        let index = match crate::ip::canonical(addr) {
            IpAddr::V4(v4) => u32::from(v4)
                .checked_sub(V4_BASE + 1)
                .filter(|i| *i < V4_SIZE)?,
            IpAddr::V6(v6) => u32::try_from(u128::from(v6).checked_sub(V6_BASE + 1)?).ok()?,
        };
        self.names.get(index as usize).map(String::as_str)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A query as a stub resolver sends it.
    fn query(name: &str, qtype: u16) -> Vec<u8> {
        let mut packet = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for label in name.split('.') {
            packet.push(label.len() as u8);
            packet.extend_from_slice(label.as_bytes());
        }
        packet.push(0);
        packet.extend_from_slice(&qtype.to_be_bytes());
        packet.extend_from_slice(&1u16.to_be_bytes());
        packet
    }

    #[test]
    fn queries_parse() {
        let q = parse_query(&query("Allowed.TEST", TYPE_A)).unwrap();
        assert_eq!(q.id, 0x1234);
        assert_eq!(q.name, "allowed.test");
        assert_eq!(q.qtype, TYPE_A);
        let mut response = query("a.test", TYPE_A);
        response[2] |= 0x80;
        assert_eq!(parse_query(&response), None);
        let mut pointer = query("a.test", TYPE_A);
        pointer[12] = 0xc0;
        assert_eq!(parse_query(&pointer), None);
        assert_eq!(parse_query(&[0; 5]), None);
    }

    #[test]
    fn a_dot_inside_a_label_is_refused() {
        // Found by fuzz/fuzz_targets/dns_query.rs: one label `tes.` was read as the name
        // `tes.`, which a DNS server reads as one label, not as `tes` and a root.
        let packet =
            b"\x12\x34\x01\x00\x00\x01\x00\x00\x00\x00\x00\x01\x04tes.\x00\x00\x07\x00\x01";
        assert_eq!(parse_query(packet), None);
        let mut one_label = query("allowedxtest", TYPE_A);
        one_label[12 + 1 + 7] = b'.';
        assert_eq!(parse_query(&one_label), None, "allowed.test as one label");
        assert!(parse_query(&query("allowed.test", TYPE_A)).is_some());
    }

    #[test]
    fn answers_carry_the_address_of_the_asked_type() {
        let q = parse_query(&query("allowed.test", TYPE_A)).unwrap();
        let addrs: [IpAddr; 2] = [
            "198.18.0.1".parse().unwrap(),
            "fd00:a1:a1::1".parse().unwrap(),
        ];
        let packet = answer(&q, &addrs, 5);
        assert_eq!(&packet[0..2], &[0x12, 0x34]);
        assert_eq!(u16::from_be_bytes([packet[2], packet[3]]) & 0x800f, 0x8000);
        assert_eq!(u16::from_be_bytes([packet[6], packet[7]]), 1, "one answer");
        assert_eq!(&packet[packet.len() - 4..], &[198, 18, 0, 1]);
        let nx = nxdomain(&q);
        assert_eq!(nx[3] & 0x0f, 3);
        assert_eq!(u16::from_be_bytes([nx[6], nx[7]]), 0);
    }

    #[test]
    fn synthetic_addresses_map_back_to_their_names() {
        let mut pool = Synthetic::default();
        let a = pool.addresses("allowed.test").unwrap();
        let b = pool.addresses("other.test").unwrap();
        assert_ne!(a, b);
        assert_eq!(pool.addresses("allowed.test").unwrap(), a);
        assert_eq!(pool.name_of(a[0]), Some("allowed.test"));
        assert_eq!(pool.name_of(a[1]), Some("allowed.test"));
        assert_eq!(pool.name_of(b[0]), Some("other.test"));
        assert_eq!(pool.name_of("198.18.0.0".parse().unwrap()), None);
        assert_eq!(pool.name_of("8.8.8.8".parse().unwrap()), None);
    }
}
