//! The D-Bus subset against the specification, and against peers that refuse, stall or lie.

use super::*;

fn start_transient_unit() -> MethodCall<'static> {
    MethodCall {
        destination: "org.freedesktop.systemd1",
        path: "/org/freedesktop/systemd1",
        interface: "org.freedesktop.systemd1.Manager",
        member: "StartTransientUnit",
        args: vec![
            Arg::Str("airlock-run-1.scope".into()),
            Arg::Str("fail".into()),
            Arg::Properties(vec![
                ("PIDs".into(), Value::U32Array(vec![4242])),
                ("Delegate".into(), Value::Bool(true)),
                ("MemoryMax".into(), Value::U64(64 << 20)),
            ]),
            Arg::NoAuxiliaryUnits,
        ],
    }
}

/// The call, decoded by hand against the specification: every length and every padding.
#[test]
fn a_call_is_laid_out_as_the_specification_says() {
    let bytes = encode(&start_transient_unit(), 7);
    assert_eq!(&bytes[..4], &[b'l', 1, 0, 1]);
    let body_length = u32::from_le_bytes(bytes[4..8].try_into().unwrap()) as usize;
    assert_eq!(u32::from_le_bytes(bytes[8..12].try_into().unwrap()), 7);
    let fields_length = u32::from_le_bytes(bytes[12..16].try_into().unwrap()) as usize;
    let body_start = (16 + fields_length).div_ceil(8) * 8;
    assert_eq!(bytes.len(), body_start + body_length);
    // The signature field is there and says the body's types.
    let header = &bytes[16..16 + fields_length];
    let signature = b"\x08\x01g\x00\x10ssa(sv)a(sa(sv))\x00";
    assert!(header.windows(signature.len()).any(|w| w == signature));
    let body = &bytes[body_start..];
    // "airlock-run-1.scope": length 19, bytes, NUL; then "fail" at offset 24.
    assert_eq!(&body[..4], &19u32.to_le_bytes());
    assert_eq!(&body[4..23], b"airlock-run-1.scope");
    assert_eq!(&body[24..28], &4u32.to_le_bytes());
    assert_eq!(&body[28..33], b"fail\0");
    // The properties' array: its length at 36 (after padding to 4), its first struct at 40.
    let properties_length = u32::from_le_bytes(body[36..40].try_into().unwrap()) as usize;
    assert_eq!(&body[40..44], &4u32.to_le_bytes());
    assert_eq!(&body[44..49], b"PIDs\0");
    // variant "au": signature, then the array's length and its one element.
    assert_eq!(&body[49..53], b"\x02au\0");
    assert_eq!(&body[56..60], &4u32.to_le_bytes());
    assert_eq!(&body[60..64], &4242u32.to_le_bytes());
    // The auxiliary units: an empty array, padded to 8 after its length, and the body's end.
    let aux_at = (40 + properties_length).div_ceil(4) * 4;
    assert_eq!(&body[aux_at..aux_at + 4], &0u32.to_le_bytes());
    assert_eq!(body.len(), (aux_at + 4).div_ceil(8) * 8);
}

/// A message as systemd would send it, built with the writer above.
fn reply(kind: u8, reply_serial: u32, error: Option<&str>, body: Option<&str>) -> Vec<u8> {
    let mut body_bytes = Writer::default();
    if let Some(text) = body {
        body_bytes.string(text);
    }
    let mut message = Writer::default();
    message.bytes.extend_from_slice(&[b'l', kind, 1, 1]);
    message.u32(body_bytes.bytes.len() as u32);
    message.u32(99);
    message.array(8, |w| {
        w.pad_to(8);
        w.byte(FIELD_REPLY_SERIAL);
        w.signature("u");
        w.u32(reply_serial);
        if let Some(name) = error {
            w.pad_to(8);
            w.byte(FIELD_ERROR_NAME);
            w.signature("s");
            w.string(name);
        }
        w.pad_to(8);
        w.byte(7);
        w.signature("s");
        w.string(":1.1");
        if body.is_some() {
            w.pad_to(8);
            w.byte(FIELD_SIGNATURE);
            w.signature("g");
            w.signature(if error.is_some() { "s" } else { "o" });
        }
    });
    message.pad_to(8);
    message.bytes.extend_from_slice(&body_bytes.bytes);
    message.bytes
}

#[test]
fn a_return_and_an_error_are_read() {
    let job = reply(
        METHOD_RETURN,
        1,
        None,
        Some("/org/freedesktop/systemd1/job/42"),
    );
    assert_eq!(
        parse_reply(&job).unwrap(),
        Reply {
            reply_serial: Some(1),
            outcome: Outcome::Returned(Some("/org/freedesktop/systemd1/job/42".into())),
        }
    );
    let refused = reply(
        ERROR,
        1,
        Some("org.freedesktop.systemd1.UnitExists"),
        Some("Unit airlock-run-1.scope already exists."),
    );
    assert_eq!(
        parse_reply(&refused).unwrap().outcome,
        Outcome::Failed {
            name: "org.freedesktop.systemd1.UnitExists".into(),
            message: "Unit airlock-run-1.scope already exists.".into(),
        }
    );
}

/// A peer on a socket of the test's own, answering as `serve` says, on its own thread.
fn peer(
    serve: impl FnOnce(UnixStream) + Send + 'static,
) -> (tempfile::TempDir, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("private");
    let listener = std::os::unix::net::UnixListener::bind(&path).unwrap();
    std::thread::spawn(move || {
        if let Ok((stream, _)) = listener.accept() {
            serve(stream);
        }
    });
    (dir, path)
}

/// The deadline of a call that should time out; one that should not has 10 s, enough for a
/// loaded machine's peer thread.
const SHORT: Duration = Duration::from_millis(300);
const LONG: Duration = Duration::from_secs(10);

fn call_within(path: &Path, deadline: Duration) -> Result<Option<String>, CallError> {
    let mut connection = Connection::open_within(path, 1000, deadline)?;
    connection.call(&start_transient_unit())
}

#[test]
fn a_refused_login_and_a_refused_call_are_errors() {
    let (_dir, path) = peer(|mut stream| {
        let _ = stream.write_all(b"REJECTED EXTERNAL\r\n");
    });
    assert!(matches!(
        call_within(&path, LONG),
        Err(CallError::Auth { .. })
    ));
    let (_dir, path) = peer(|mut stream| {
        let mut login = [0u8; 64];
        let _ = stream.read(&mut login);
        let _ = stream.write_all(b"OK 0123456789abcdef\r\n");
        // A signal first (reply serial 0), then the answer to call 1.
        let _ = stream.write_all(&reply(4, 0, None, None));
        let _ = stream.write_all(&reply(
            ERROR,
            1,
            Some("org.freedesktop.DBus.Error.AccessDenied"),
            Some("no"),
        ));
        std::thread::sleep(Duration::from_secs(1));
    });
    match call_within(&path, LONG) {
        Err(CallError::Refused { name, message }) => {
            assert_eq!(name, "org.freedesktop.DBus.Error.AccessDenied");
            assert_eq!(message, "no");
        }
        other => panic!("{other:?}"),
    }
}

fn times_out_at_the_deadline(path: &Path) {
    let began = Instant::now();
    assert!(matches!(
        call_within(path, SHORT),
        Err(CallError::TimedOut { .. })
    ));
    // Far past the deadline on a loaded machine, far short of the peers' 30 s or more.
    assert!(
        began.elapsed() < Duration::from_secs(8),
        "{:?}",
        began.elapsed()
    );
}

/// A peer that says nothing, or trickles its answer a byte at a time, fails the call at the
/// deadline, not later.
#[test]
fn a_silent_or_trickling_peer_times_out_at_the_deadline() {
    let (_dir, path) = peer(|stream| {
        std::thread::sleep(Duration::from_secs(30));
        drop(stream);
    });
    times_out_at_the_deadline(&path);
    let (_dir, path) = peer(|mut stream| {
        for byte in b"OK 0123456789abcdef\r\n".iter().cycle().take(2000) {
            if stream.write_all(&[*byte]).is_err() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
    });
    times_out_at_the_deadline(&path);
}

#[test]
fn a_long_error_message_is_cut() {
    let long = "é".repeat(1000);
    let refused = reply(ERROR, 1, Some("a.b"), Some(&long));
    let Outcome::Failed { message, .. } = parse_reply(&refused).unwrap().outcome else {
        panic!("not an error");
    };
    assert!(
        message.len() <= MAX_ERROR_TEXT + " [cut]".len(),
        "{}",
        message.len()
    );
    assert!(message.ends_with(" [cut]"));
}

#[test]
fn every_cut_or_inflated_message_is_refused_not_read_past() {
    let whole = reply(ERROR, 1, Some("a.b"), Some("why"));
    for cut in 0..whole.len() {
        assert!(parse_reply(&whole[..cut]).is_err(), "cut at {cut}");
    }
    // Lengths that claim more than there is, or more than any reply here.
    let mut inflated = whole.clone();
    inflated[12..16].copy_from_slice(&(MAX_FIELDS as u32 + 8).to_le_bytes());
    assert!(parse_reply(&inflated).is_err());
    let mut string_too_long = whole.clone();
    let at = whole.windows(4).position(|w| w == b"why\0").unwrap() - 4;
    string_too_long[at..at + 4].copy_from_slice(&1000u32.to_le_bytes());
    assert!(parse_reply(&string_too_long).is_err());
}
