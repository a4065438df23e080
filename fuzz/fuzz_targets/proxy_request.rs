//! airlock's HTTP proxy request reader (CONNECT host:port, absolute-form http:// URLs) against
//! httparse and the `http` crate: the host and port it decides on are the ones they read.
#![no_main]

use airlock_egress::fuzzing::proxy_request;
use airlock_fuzz::http_reference;
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok((host, port, tunnel)) = proxy_request(data) else {
        return;
    };
    let start = data
        .iter()
        .position(|&b| b != b'\r' && b != b'\n')
        .unwrap_or(data.len());
    let rest = &data[start..];
    let end = rest
        .windows(4)
        .position(|w| w == b"\r\n\r\n")
        .expect("the proxy read a head without its end");
    let head = &rest[..end + 4];
    let reference = http_reference(head).unwrap_or_else(|| {
        panic!(
            "the proxy read a request httparse refuses: {:?}",
            String::from_utf8_lossy(head)
        )
    });
    assert_eq!(tunnel, reference.method == "CONNECT", "tunnel");
    assert!(
        !reference.hosts.is_empty() || reference.target_unreadable,
        "the proxy read {host:?}, httparse no host"
    );
    for other in &reference.hosts {
        assert_eq!(other, &host, "httparse reads another host");
    }
    if reference.target_unreadable {
        return; // no port of the `http` crate's to compare with (`:00?…>` says 0 to the proxy)
    }
    let default = if tunnel || reference.https { 443 } else { 80 };
    assert_eq!(
        port,
        reference.port.unwrap_or(default),
        "the proxy decided another port"
    );
});
