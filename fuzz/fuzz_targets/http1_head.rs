//! The gate's HTTP/1 head reader (`http1::parse_head`, and `sni::peek` on a connection's first
//! bytes) against httparse and the `http` crate: any host they read from the head is the one
//! the gate read, or the gate refused the request.
#![no_main]

use airlock_egress::http1::parse_head;
use airlock_egress::sni::{peek, Peek};
use airlock_fuzz::assert_http_agrees;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = &data[..end + 4];
        if let Ok(parsed) = parse_head(head) {
            assert_http_agrees(head, &parsed.method, parsed.host.as_deref(), parsed.port);
        }
    }
    if let Peek::Http { method, host, port } = peek(data) {
        // peek skips the empty lines servers skip, then reads the head up to its blank line.
        let start = data
            .iter()
            .position(|&b| b != b'\r' && b != b'\n')
            .unwrap_or(data.len());
        let rest = &data[start..];
        let end = rest
            .windows(4)
            .position(|w| w == b"\r\n\r\n")
            .expect("peek read a head without its end");
        assert_http_agrees(&rest[..end + 4], &method, host.as_deref(), port);
    }
});
