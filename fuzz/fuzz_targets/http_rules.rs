//! `[[network.http]]`'s path reader (`airlock_rules::http::read_path`, which the injector's
//! decisions and the profile's rules both go through) and its rule parser: neither panics; a
//! path it accepts holds nothing a server could read as another path (after decoding its
//! escapes once, as a reference decoder does: no `\`, no empty segment before the last, no
//! `.` or `..` segment, also before a `;`, no segment ending in `.` or a space, no `%` left for
//! a second decoding); and a rule written as a path it accepts allows that very path, and only
//! with its method.
#![no_main]

use airlock_rules::http::read_path;
use airlock_rules::{HttpRules, RequestRule};
use libfuzzer_sys::fuzz_target;

/// Every `%XX` decoded once; None where an escape is malformed.
fn decoded_once(path: &str) -> Option<Vec<u8>> {
    let bytes = path.as_bytes();
    let mut out = Vec::new();
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
            out.push(u8::from_str_radix(hex, 16).ok()?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    Some(out)
}

fuzz_target!(|data: &[u8]| {
    let Ok(path) = std::str::from_utf8(data) else {
        return;
    };
    let _ = RequestRule::parse(path);
    let Ok(segments) = read_path(path) else {
        return;
    };
    let decoded = decoded_once(path).expect("an accepted path with a malformed escape");
    assert_eq!(decoded.first(), Some(&b'/'), "{path:?}");
    assert!(
        !decoded.contains(&b'\\') && !decoded.contains(&b'%'),
        "{path:?}"
    );
    let parts: Vec<&[u8]> = decoded[1..].split(|&b| b == b'/').collect();
    assert_eq!(
        parts.len(),
        segments.len(),
        "{path:?}: an escaped separator"
    );
    for (i, part) in parts.iter().enumerate() {
        assert_eq!(*part, &segments[i][..], "{path:?}");
        assert!(!part.is_empty() || i == parts.len() - 1, "{path:?}: //");
        let name = part.split(|&b| b == b';').next().unwrap_or_default();
        assert!(name != b"." && name != b"..", "{path:?}: a dot segment");
        for end in [name, *part] {
            let trailing = end.ends_with(b".") || end.ends_with(b" ");
            assert!(!trailing, "{path:?}: a trailing dot or space");
        }
        assert!(part.iter().all(|&b| b >= 0x20 && b != 0x7f), "{path:?}");
    }
    if path.contains('*') {
        return;
    }
    let Ok(rule) = RequestRule::parse(&format!("PUT {path}")) else {
        panic!("{path:?} is read as a request's path but refused as a rule's");
    };
    let rules = HttpRules {
        host: "fuzz.test".into(),
        allow: Some(vec![rule]),
    };
    assert!(rules.decide("PUT", path).allowed, "{path:?}");
    assert!(!rules.decide("GET", path).allowed, "{path:?}");
});
