//! The paths agent-sandbox's client names (`airlock_core::pod_runtime::PodPath`, from a URL or a
//! multipart file name) and the modes it asks for: any text is taken or refused without a panic;
//! one taken never climbs out of the workspace (no `..`, no leading `/`, no empty part) and is
//! given to the scripts as `./…` or `.`, so that no program reads it as an option.
#![no_main]

use airlock_core::pod_runtime::{FileMode, PodPath};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let _ = FileMode::parse(&text);
    let Ok(path) = PodPath::parse(&text) else {
        return;
    };
    let tidy = path.as_str();
    assert!(!tidy.is_empty());
    if tidy != "." {
        assert!(!tidy.starts_with('/'), "{tidy:?}");
        for part in tidy.split('/') {
            assert!(!part.is_empty() && part != "." && part != "..", "{tidy:?}");
        }
    }
    assert!(!tidy.contains('\0'));
    // Tidy is a fixed point: parsed again, the same path.
    assert_eq!(
        PodPath::parse(tidy)
            .map(|p| p.as_str().to_string())
            .ok()
            .as_deref(),
        Some(tidy)
    );
});
