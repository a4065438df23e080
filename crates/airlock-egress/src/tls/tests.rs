//! The two directions of a TLS handshake followed over crafted bytes.

use super::*;
use crate::sni::client_hello;

fn record(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut r = vec![kind, 3, 3];
    r.extend_from_slice(&(body.len() as u16).to_be_bytes());
    r.extend_from_slice(body);
    r
}

fn handshake_message(kind: u8, body: &[u8]) -> Vec<u8> {
    let mut m = vec![kind, 0, (body.len() >> 8) as u8, body.len() as u8];
    m.extend_from_slice(body);
    m
}

/// A ServerHello record: a retry request, or one choosing `version` (None: no
/// supported_versions, as TLS 1.2).
fn server_hello_record(retry: bool, version: Option<u16>) -> Vec<u8> {
    let mut body = vec![3, 3];
    body.extend_from_slice(if retry {
        &HELLO_RETRY_REQUEST
    } else {
        &[9u8; 32]
    });
    body.push(0); // session id
    body.extend_from_slice(&[0x13, 0x01, 0]); // cipher suite, compression
    if let Some(version) = version {
        body.extend_from_slice(&6u16.to_be_bytes());
        body.extend_from_slice(&[0x00, 0x2b, 0x00, 0x02]);
        body.extend_from_slice(&version.to_be_bytes());
    }
    record(HANDSHAKE, &handshake_message(2, &body))
}

const CCS: [u8; 6] = [CHANGE_CIPHER_SPEC, 3, 3, 0, 1, 1];

fn pair() -> (ClientHellos, ServerHello, Arc<Handshake>) {
    let handshake = Arc::new(Handshake::default());
    (
        ClientHellos::new("a.test", handshake.clone()),
        ServerHello::new(handshake.clone()),
        handshake,
    )
}

fn fed(side: &mut ClientHellos, bytes: &[u8]) -> Result<Vec<u8>, Refusal> {
    let mut out = Vec::new();
    side.feed(bytes, &mut out).map(|()| out)
}

fn served(side: &mut ServerHello, bytes: &[u8]) -> Result<Vec<u8>, Refusal> {
    let mut out = Vec::new();
    side.feed(bytes, &mut out).map(|()| out)
}

#[test]
fn a_retried_handshake_with_the_same_name_passes_and_ends_at_the_server_hello() {
    let (mut client, mut server, handshake) = pair();
    let first = client_hello(Some("a.test"));
    assert_eq!(fed(&mut client, &first).unwrap(), first);
    let hrr = [server_hello_record(true, Some(0x0304)), CCS.to_vec()].concat();
    assert_eq!(served(&mut server, &hrr).unwrap(), hrr);
    assert_eq!(
        handshake.phase(),
        Phase::Hello,
        "a retry request is no ServerHello"
    );
    // The dummy ChangeCipherSpec of middlebox compatibility, then the second hello.
    let second = [CCS.to_vec(), client_hello(Some("A.test"))].concat();
    assert_eq!(fed(&mut client, &second).unwrap(), second);
    assert!(!client.done());
    let hello = server_hello_record(false, Some(0x0304));
    let encrypted = record(APPLICATION_DATA, &[0xee; 40]);
    let flight = [hello, encrypted.clone()].concat();
    assert_eq!(served(&mut server, &flight).unwrap(), flight);
    assert!(server.done());
    assert_eq!(handshake.phase(), Phase::Tls13);
    // Encrypted from here on: anything passes, and is not looked at.
    let garbage = [encrypted, vec![0xff; 10]].concat();
    assert_eq!(fed(&mut client, &garbage).unwrap(), garbage);
    assert!(client.done());
}

#[test]
fn a_second_hello_for_another_host_or_none_is_fronting() {
    for (name, asked) in [(Some("b.test"), "b.test"), (None, "no name")] {
        let (mut client, mut server, _) = pair();
        fed(&mut client, &client_hello(Some("a.test"))).unwrap();
        served(&mut server, &server_hello_record(true, Some(0x0304))).unwrap();
        let second = [CCS.to_vec(), client_hello(name)].concat();
        let refusal = fed(&mut client, &second).unwrap_err();
        assert!(matches!(refusal, Refusal::OtherHost(_)), "{refusal:?}");
        let rule = refusal.to_string();
        assert!(
            rule.contains(&format!("a later ClientHello asked for {asked}")),
            "{rule}"
        );
        assert!(rule.contains("domain fronting"), "{rule}");
    }
}

#[test]
fn a_second_hello_sent_ahead_of_the_servers_answer_is_checked_too() {
    let (mut client, _, _) = pair();
    let both = [client_hello(Some("a.test")), client_hello(Some("b.test"))].concat();
    assert!(fed(&mut client, &both).is_err());
    // Behind early data, as well.
    let (mut client, _, _) = pair();
    let early = record(APPLICATION_DATA, &[1; 30]);
    let bytes = [
        client_hello(Some("a.test")),
        early,
        client_hello(Some("b.test")),
    ]
    .concat();
    assert!(fed(&mut client, &bytes).is_err());
}

#[test]
fn a_hello_split_over_records_is_held_until_judged() {
    let (mut client, _, _) = pair();
    fed(&mut client, &client_hello(Some("a.test"))).unwrap();
    let second = client_hello(Some("b.test"));
    let message = &second[5..];
    let (a, b) = message.split_at(30);
    let first_part = record(HANDSHAKE, a);
    // Whole, but part of a message not yet judged: not passed on.
    assert_eq!(fed(&mut client, &first_part[..7]).unwrap(), b"");
    assert_eq!(fed(&mut client, &first_part[7..]).unwrap(), b"");
    assert!(fed(&mut client, &record(HANDSHAKE, b)).is_err());
    // The same with the right name passes on both records at once.
    let (mut client, _, _) = pair();
    let second = client_hello(Some("a.test"));
    let (a, b) = second[5..].split_at(30);
    let (a, b) = (record(HANDSHAKE, a), record(HANDSHAKE, b));
    assert_eq!(fed(&mut client, &a).unwrap(), b"");
    assert_eq!(fed(&mut client, &b).unwrap(), [a, b].concat());
}

#[test]
fn tls12_is_followed_until_the_clients_change_cipher_spec() {
    let (mut client, mut server, handshake) = pair();
    fed(&mut client, &client_hello(Some("a.test"))).unwrap();
    // A ServerHello without supported_versions: TLS 1.2.
    let hello = server_hello_record(false, None);
    served(&mut server, &hello).unwrap();
    assert_eq!(handshake.phase(), Phase::Tls12);
    let key_exchange = record(HANDSHAKE, &handshake_message(16, &[0; 33]));
    assert_eq!(fed(&mut client, &key_exchange).unwrap(), key_exchange);
    assert!(!client.done());
    // A ClientHello now is refused.
    let (mut late, _, _) = pair();
    late.handshake.set(Phase::Tls12);
    assert!(fed(&mut late, &client_hello(Some("a.test"))).is_err());
    // The cipher change, then the encrypted Finished (a handshake record of garbage).
    let rest = [
        CCS.to_vec(),
        record(HANDSHAKE, &[0x01, 0xff, 0xff, 0xff, 7]),
    ]
    .concat();
    assert_eq!(fed(&mut client, &rest).unwrap(), rest);
    assert!(client.done());
}

#[test]
fn what_the_gate_cannot_read_closes_the_connection() {
    // The client: an unknown record type, an odd version, a non-hello first, a long record.
    for bytes in [
        record(0x18, &[1, 2]),
        [vec![HANDSHAKE, 9, 9, 0, 1], vec![0]].concat(),
        record(HANDSHAKE, &handshake_message(16, &[0; 4])),
        vec![APPLICATION_DATA, 3, 3, 0xff, 0xff],
        record(CHANGE_CIPHER_SPEC, &[2]),
    ] {
        let (mut client, _, _) = pair();
        assert!(fed(&mut client, &bytes).is_err(), "{bytes:?}");
    }
    // The server: not a ServerHello first, application data first, two retry requests.
    for bytes in [
        record(HANDSHAKE, &handshake_message(11, &[0; 4])),
        record(APPLICATION_DATA, &[0; 4]),
        [
            server_hello_record(true, Some(0x0304)),
            server_hello_record(true, Some(0x0304)),
        ]
        .concat(),
        server_hello_record(false, Some(0x7f1c)),
    ] {
        let (mut client, mut server, handshake) = pair();
        assert!(served(&mut server, &bytes).is_err(), "{bytes:?}");
        assert_eq!(handshake.phase(), Phase::Broken);
        // …and the client's side is closed with it.
        assert!(fed(&mut client, &client_hello(Some("a.test"))).is_err());
    }
}

fn after_ssl_request() -> (ClientHellos, ServerHello, Arc<Handshake>) {
    let handshake = Arc::new(Handshake::default());
    (
        ClientHellos::after("a.test", handshake.clone(), POSTGRES_SSL_REQUEST.len()),
        ServerHello::after_ssl_request(handshake.clone()),
        handshake,
    )
}

#[test]
fn a_postgres_handshake_has_its_hellos_checked_after_the_ssl_request() {
    let (mut client, mut server, handshake) = after_ssl_request();
    // The request may come in pieces; it passes unread.
    assert_eq!(
        fed(&mut client, &POSTGRES_SSL_REQUEST[..3]).unwrap(),
        &POSTGRES_SSL_REQUEST[..3]
    );
    assert_eq!(
        fed(&mut client, &POSTGRES_SSL_REQUEST[3..]).unwrap(),
        &POSTGRES_SSL_REQUEST[3..]
    );
    assert_eq!(served(&mut server, b"S").unwrap(), b"S");
    assert_eq!(handshake.phase(), Phase::Hello);
    let refusal = fed(&mut client, &client_hello(Some("b.test"))).unwrap_err();
    assert!(matches!(refusal, Refusal::OtherHost(_)), "{refusal}");
    let (mut client, _, _) = after_ssl_request();
    let refusal = fed(
        &mut client,
        &[&POSTGRES_SSL_REQUEST[..], &client_hello(None)].concat(),
    );
    assert!(refusal.unwrap_err().to_string().contains("no name"));
    // The host's own name passes, and the server's hello after its 'S' ends the watch.
    let (mut client, mut server, handshake) = after_ssl_request();
    let hello = [&POSTGRES_SSL_REQUEST[..], &client_hello(Some("a.test"))].concat();
    assert_eq!(fed(&mut client, &hello).unwrap(), hello);
    let answer = [&b"S"[..], &server_hello_record(false, Some(0x0304))].concat();
    assert_eq!(served(&mut server, &answer).unwrap(), answer);
    assert_eq!(handshake.phase(), Phase::Tls13);
}

#[test]
fn a_postgres_server_declining_tls_ends_the_watch_and_an_odd_answer_closes() {
    let (mut client, mut server, handshake) = after_ssl_request();
    assert_eq!(
        fed(&mut client, &POSTGRES_SSL_REQUEST).unwrap(),
        POSTGRES_SSL_REQUEST
    );
    assert_eq!(served(&mut server, b"N").unwrap(), b"N");
    assert!(server.done());
    assert_eq!(handshake.phase(), Phase::Plain);
    // The plain startup message that follows is not TLS, and not looked at.
    let startup = b"\x00\x00\x00\x09\x00\x03\x00\x00\x00";
    assert_eq!(fed(&mut client, startup).unwrap(), startup);
    assert!(client.done());
    let (_, mut server, handshake) = after_ssl_request();
    assert!(served(&mut server, b"E").is_err());
    assert_eq!(handshake.phase(), Phase::Broken);
}

// Review: the ways of cutting a second hello up that a server still reassembles.
#[test]
fn a_second_hello_in_tiny_records_behind_alerts_or_coalesced_is_still_judged() {
    let alert = record(ALERT, &[1, 0]);
    let evil = client_hello(Some("b.test"));
    // One byte of the message a record, an alert and a dummy cipher change between them:
    // nothing of it passes before the refusal.
    let (mut client, _, _) = pair();
    fed(&mut client, &client_hello(Some("a.test"))).unwrap();
    let bytes: Vec<u8> = evil[5..]
        .iter()
        .flat_map(|b| [record(HANDSHAKE, &[*b]), alert.clone(), CCS.to_vec()].concat())
        .collect();
    let mut passed = Vec::new();
    let mut refused = false;
    for chunk in bytes.chunks(3) {
        match fed(&mut client, chunk) {
            Ok(out) => passed.extend(out),
            Err(_) => {
                refused = true;
                break;
            }
        }
    }
    assert!(refused);
    assert!(passed.is_empty(), "{passed:?}");
    // Both hellos as two messages of one record.
    let (mut client, _, _) = pair();
    let coalesced = [&client_hello(Some("a.test"))[5..], &evil[5..]].concat();
    assert!(fed(&mut client, &record(HANDSHAKE, &coalesced)).is_err());
}
