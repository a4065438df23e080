//! The gate's DNS query reader (`dns::parse_query`) against simple-dns: the name it reads is the
//! one simple-dns reads, label for label, and the answers it builds are well-formed replies to
//! that question.
#![no_main]

use std::net::IpAddr;

use airlock_egress::dns::{answer, nxdomain, parse_query};
use libfuzzer_sys::fuzz_target;
use simple_dns::{Packet, PacketFlag};

fn labels(name: &simple_dns::Name) -> Vec<Vec<u8>> {
    name.as_bytes()
        .map(|label| label.to_ascii_lowercase())
        .collect()
}

fuzz_target!(|data: &[u8]| {
    let Some(query) = parse_query(data) else {
        return;
    };
    let ours: Vec<Vec<u8>> = if query.name.is_empty() {
        Vec::new()
    } else {
        query
            .name
            .split('.')
            .map(|l| l.as_bytes().to_vec())
            .collect()
    };
    let Ok(packet) = Packet::parse(data) else {
        return; // simple-dns reads no name (it refuses, say, query type 0): nothing to compare
    };
    let question = packet.questions.first().expect("one question");
    assert_eq!(
        labels(&question.qname),
        ours,
        "simple-dns reads another name"
    );
    assert_eq!(u16::from(question.qtype), query.qtype, "type");
    assert_eq!(packet.id(), query.id);
    let addrs: [IpAddr; 2] = [
        "198.18.0.1".parse().unwrap(),
        "fd00:a1:a1::1".parse().unwrap(),
    ];
    for reply in [nxdomain(&query), answer(&query, &addrs, 5)] {
        let packet = Packet::parse(&reply).expect("our reply parses");
        assert!(packet.has_flags(PacketFlag::RESPONSE));
        assert_eq!(packet.id(), query.id);
        let question = packet.questions.first().expect("the question echoed");
        assert_eq!(
            labels(&question.qname),
            ours,
            "the reply names another name"
        );
    }
});
