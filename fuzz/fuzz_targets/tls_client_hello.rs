//! The gate's TLS ClientHello reader (`sni::peek`) against tls-parser: whatever server name
//! tls-parser reads from the same records, the gate read the same, or refused the connection.
#![no_main]

use airlock_egress::sni::{peek, Peek};
use airlock_fuzz::{tls_handshake, tls_reference};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // The TLS path only (an HTTP start is http1_head's): records start at the first byte.
    if data.first() != Some(&0x16) {
        return;
    }
    let Peek::Tls { server_name } = peek(data) else {
        return; // refused, or waiting for more: nothing reached a server
    };
    let Some(names) = tls_reference(&tls_handshake(data)) else {
        // tls-parser reads no ClientHello at all (it is stricter about, say, the cipher suite
        // list): it reads no host either, so there is none to disagree on.
        return;
    };
    match &server_name {
        Some(name) => {
            assert!(
                !names.is_empty(),
                "the gate read {name:?}, tls-parser no name"
            );
            for other in &names {
                assert_eq!(other, name, "tls-parser reads another server name");
            }
        }
        None => assert!(
            names.is_empty(),
            "the gate read no name, tls-parser {names:?}"
        ),
    }
});
