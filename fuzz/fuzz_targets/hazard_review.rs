//! The hazard review (`airlock_changes::hazard::Review`) of a change set a session could make: a
//! CI workflow of any bytes, beside a script, a new name of any bytes and a symlink of any
//! target. Reading the workflow's words (`hazard/pointed.rs`), resolving links
//! (`hazard/aliases.rs`) and comparing names (`hazard/confusable.rs`) never panic; a workflow
//! that names the script as a plain word of its own always holds the script back; a confusable
//! name is never plain ASCII.
#![no_main]

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use airlock_changes::hazard::{Review, Setup};
use airlock_changes::{scan, Hazard, OverlayXattrs};
use libfuzzer_sys::fuzz_target;

fuzz_target!(|data: &[u8]| {
    // workflow text | a new name | a symlink's target, split at the first two 0xff bytes.
    let mut parts = data.splitn(3, |b| *b == 0xff);
    let (workflow, name, target) = (
        parts.next().unwrap_or(&[]),
        parts.next().unwrap_or(&[]),
        parts.next().unwrap_or(&[]),
    );
    let host = tempfile::tempdir().unwrap();
    let layer = tempfile::tempdir().unwrap();
    let (h, l) = (host.path(), layer.path());
    std::fs::write(h.join("Makefile"), "all:\n").unwrap();
    std::fs::create_dir_all(l.join(".github/workflows")).unwrap();
    std::fs::create_dir_all(l.join("scripts")).unwrap();
    std::fs::write(l.join(".github/workflows/ci.yml"), workflow).unwrap();
    std::fs::write(l.join("scripts/deploy.sh"), "#!/bin/sh\n").unwrap();
    let name = OsStr::from_bytes(name);
    let plain_name = !name.is_empty()
        && !name.as_bytes().contains(&b'/')
        && name != "."
        && name != ".."
        && std::fs::write(l.join(name), "x").is_ok();
    if !target.is_empty() && !target.contains(&0) {
        let _ = std::os::unix::fs::symlink(OsStr::from_bytes(target), l.join(".claude"));
    }
    let Ok(set) = scan(l, h, OverlayXattrs::User) else {
        return;
    };
    let setup = Setup {
        size_limit: 1 << 20,
        ..Setup::default()
    };
    let review = Review::new(l, h, &set.changes, setup).unwrap();
    for change in &set.changes {
        let verdict = review.judge(change);
        if change.path == Path::new("scripts/deploy.sh") && names_the_script(workflow) {
            assert!(
                verdict.hazards.contains(&Hazard::RunByFlaggedConfig),
                "{verdict:?}"
            );
        }
        if plain_name && change.path == Path::new(name) && name.to_str().is_some_and(str::is_ascii)
        {
            assert!(
                !verdict.hazards.contains(&Hazard::ConfusableName),
                "{verdict:?}"
            );
        }
    }
});

/// Does the workflow hold `scripts/deploy.sh` as a word between blanks (lines that a runner
/// would run as they are)?
fn names_the_script(workflow: &[u8]) -> bool {
    workflow
        .split(|b| b.is_ascii_whitespace())
        .any(|word| word == b"scripts/deploy.sh" || word == b"./scripts/deploy.sh")
}
