//! The gate's follower of every request on a plain-HTTP connection (`http1::Requests`): fed the
//! same stream in pieces of any size it decides the same, passes on only what the client sent,
//! in order, and passes a request head only when httparse reads it for the connected host.
#![no_main]

use std::sync::Arc;

use airlock_egress::http1::{FirstAnswer, Requests};
use airlock_fuzz::http_reference;
use libfuzzer_sys::fuzz_target;

const HOST: &str = "allowed.test";

fn run(stream: &[u8], piece: usize, answer: &[u8]) -> (Vec<u8>, bool) {
    let first = Arc::new(FirstAnswer::default());
    let mut requests = Requests::new(HOST, first.clone());
    let mut out = Vec::new();
    for (i, part) in stream.chunks(piece.max(1)).enumerate() {
        if i == 1 && !answer.is_empty() {
            first.saw(answer);
        }
        if requests.feed(part, &mut out).is_err() {
            return (out, false);
        }
        if requests.settle(&mut out).is_err() {
            return (out, false);
        }
    }
    (out, true)
}

fuzz_target!(|data: &[u8]| {
    let Some((&control, stream)) = data.split_first() else {
        return;
    };
    // The first byte picks the server's answer to an upgrade (none, switched, declined).
    let answer: &[u8] = match control % 3 {
        0 => b"",
        1 => b"HTTP/1.1 101 Switching Protocols\r\n",
        _ => b"HTTP/1.1 200 OK\r\n",
    };
    let (whole, whole_ok) = run(stream, stream.len(), b"");
    assert!(
        stream.starts_with(&whole),
        "passed on bytes the client did not send"
    );
    for piece in [1, 2, 3, 7, usize::from(control >> 2) + 1] {
        let (out, ok) = run(stream, piece, b"");
        assert_eq!(ok, whole_ok, "pieces of {piece} decided otherwise");
        if ok {
            assert_eq!(out, whole, "pieces of {piece} passed on other bytes");
        }
    }
    if !answer.is_empty() {
        let (out, _) = run(stream, usize::from(control >> 2) + 1, answer);
        assert!(
            stream.starts_with(&out),
            "passed on bytes the client did not send"
        );
    }
    // Every complete head passed on before a body or upgrade: httparse reads our host there.
    if whole_ok {
        let skip = whole
            .iter()
            .position(|&b| b != b'\r' && b != b'\n')
            .unwrap_or(whole.len());
        let first = &whole[skip..];
        if let Some(end) = first.windows(4).position(|w| w == b"\r\n\r\n") {
            if let Some(reference) = http_reference(&first[..end + 4]) {
                for host in &reference.hosts {
                    assert_eq!(
                        host, HOST,
                        "passed a request httparse reads for another host"
                    );
                }
            }
        }
    }
});
