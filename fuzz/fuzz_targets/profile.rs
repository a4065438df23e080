//! The profile parser (`airlock_policy::parse_profile`): it never panics, and every error it
//! gives names a line and column inside the text, as `file:line:column: ...`.
#![no_main]

use std::path::Path;

use airlock_policy::{parse_profile, PolicyError};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else {
        return;
    };
    let origin = Path::new("/etc/airlock/profiles/fuzz.toml");
    let Err(error) = parse_profile(text, "fuzz", origin) else {
        return;
    };
    let PolicyError::Invalid { line, column, .. } = &error else {
        panic!("parse_profile gave an error that names no line: {error}");
    };
    let lines = text.split('\n').count();
    assert!(
        (1..=lines).contains(line),
        "line {line} of {lines}: {error}"
    );
    let width = text
        .split('\n')
        .nth(line - 1)
        .map_or(0, |l| l.chars().count());
    assert!(
        (1..=width + 1).contains(column),
        "column {column} of {width}: {error}"
    );
    let shown = error.to_string();
    let prefix = format!("{}:{line}:{column}: ", origin.display());
    assert!(shown.starts_with(&prefix), "{shown}");
});
