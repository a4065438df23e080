//! Entry points for the fuzz targets in `fuzz/` that are not part of the crate's API, and the
//! regression tests of what those targets found there.

/// What airlock's HTTP proxy reads from a request's first bytes: the host and port asked for,
/// and whether it is a CONNECT tunnel; Err: why it is refused.
pub fn proxy_request(head: &[u8]) -> Result<(String, u16, bool), String> {
    crate::gate::read_proxy_request(head)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_proxy_takes_the_default_port_from_the_targets_scheme_alone() {
        // Found by fuzz/fuzz_targets/proxy_request.rs: ` https://` in a header within the first
        // 40 bytes made a plain http:// request go to port 443, a port the URL did not name
        // (and a profile may allow a host on 443 only).
        let plain = b"GET http://a.test/ HTTP/1.1\r\nX: https://x\r\n\r\n";
        assert_eq!(proxy_request(plain), Ok(("a.test".into(), 80, false)));
        let leading = b"\r\nGET HTTPS://a.test/ HTTP/1.1\r\nHost: a.test\r\n\r\n";
        assert_eq!(proxy_request(leading), Ok(("a.test".into(), 443, false)));
        // Found by the same target once that was fixed: the empty lines servers skip.
        let skipped = b"\r\r\n\n\r\rGET https://ae.ts8443? HTTP/1.1\r\n\r\n";
        assert_eq!(proxy_request(skipped), Ok(("ae.ts8443".into(), 443, false)));
        let connect = b"CONNECT a.test:8443 HTTP/1.1\r\n\r\n";
        assert_eq!(proxy_request(connect), Ok(("a.test".into(), 8443, true)));
        let tunnel = b"CONNECT a.test HTTP/1.1\r\nX: http://y\r\n\r\n";
        assert_eq!(proxy_request(tunnel), Ok(("a.test".into(), 443, true)));
    }

    #[test]
    fn a_proxy_connect_whose_host_names_another_is_refused() {
        // Found by fuzz/fuzz_targets/proxy_request.rs.
        let head =
            b"CONNECT allowed.test:443 HTTP/1.1\r\nHost: alloallowed.testwed.test:443\r\n\r\n";
        assert!(proxy_request(head).is_err());
    }
}
