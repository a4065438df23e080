//! The D-Bus reply reader that asks systemd for a run's scope (`airlock_jail::dbus`): any bytes
//! are read or refused without a panic or a read past the message, and every call the writer
//! makes (names and values from the input) is a message the reader reads back whole.
#![no_main]

use airlock_jail::dbus::{
    encode, message_length, parse_reply, Arg, MethodCall, Value, FIXED_HEADER,
};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let _ = parse_reply(data);
    if let Some(fixed) = data
        .get(..FIXED_HEADER)
        .and_then(|f| <&[u8; FIXED_HEADER]>::try_from(f).ok())
    {
        if let Ok(length) = message_length(fixed) {
            if let Some(message) = data.get(..length) {
                let _ = parse_reply(message);
            }
        }
    }
    // The writer's side: strings cut from the input (no NUL, as D-Bus strings never hold one).
    let text = String::from_utf8_lossy(data).replace('\0', "");
    let (left, right) = text.split_at(
        text.char_indices()
            .nth(text.chars().count() / 2)
            .map_or(0, |(i, _)| i),
    );
    let call = MethodCall {
        destination: "org.freedesktop.systemd1",
        path: "/org/freedesktop/systemd1",
        interface: "org.freedesktop.systemd1.Manager",
        member: "StartTransientUnit",
        args: vec![
            Arg::Str(left.to_string()),
            Arg::Str("fail".into()),
            Arg::Properties(vec![
                (right.to_string(), Value::Str(left.to_string())),
                (
                    "PIDs".into(),
                    Value::U32Array(data.iter().map(|b| u32::from(*b)).collect()),
                ),
                ("Delegate".into(), Value::Bool(data.len() % 2 == 0)),
                ("MemoryMax".into(), Value::U64(data.len() as u64)),
            ]),
            Arg::NoAuxiliaryUnits,
        ],
    };
    let bytes = encode(&call, 1);
    let fixed: &[u8; FIXED_HEADER] = bytes[..FIXED_HEADER].try_into().expect("a whole header");
    if message_length(fixed).is_ok() {
        parse_reply(&bytes).expect("the reader refused a call the writer made");
    }
});
