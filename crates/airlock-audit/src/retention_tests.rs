//! Retention's tests of its own (the rest are in segment_tests.rs, over rolled logs).

use std::fs::File;
use std::time::{Duration, SystemTime};

use serde_json::{json, Map};

use crate::{sealed_segments, AuditLog, Layout, Retention, Sync};

const DAY: Duration = Duration::from_secs(86_400);

fn in_a_year() -> SystemTime {
    SystemTime::now() + 400 * DAY
}

fn weeks_ago() -> SystemTime {
    SystemTime::now() - 20 * DAY
}

/// A sealed segment of `n` records written at `clock`'s time, its file last written at `mtime`.
fn sealed_at(dir: &std::path::Path, clock: fn() -> SystemTime, n: u64, mtime: SystemTime) {
    let log = AuditLog::new(dir, Sync::Never)
        .with_layout(Layout {
            segment_size: 1 << 30,
            daily: false,
        })
        .with_clock(clock);
    for i in 0..n {
        log.append("test.event", json!({ "i": i })).unwrap();
    }
    let index = log.seal().unwrap().unwrap();
    let path = dir
        .join(crate::SEGMENT_DIR)
        .join(crate::segment_file_name(index.first_seq));
    File::open(path).unwrap().set_modified(mtime).unwrap();
}

#[test]
fn a_record_from_the_future_does_not_keep_its_segment_past_keep_days() {
    // Found by review: a segment's age was its newest record's time; one record dated in the
    // future (a clock set back later, or a forged time) kept it, and every segment after it,
    // from keep_days for ever.
    let dir = tempfile::tempdir().unwrap();
    sealed_at(dir.path(), in_a_year, 3, SystemTime::now() - 30 * DAY);
    sealed_at(dir.path(), weeks_ago, 3, weeks_ago());
    // Just sealed, dated in the future too: not old, whatever its records say.
    sealed_at(dir.path(), in_a_year, 2, SystemTime::now());
    let log = AuditLog::new(dir.path(), Sync::Never);
    log.append("test.event", json!({})).unwrap();
    let ten_days = Retention {
        keep_days: Some(10),
        keep_bytes: None,
    };
    let report = log.apply_retention(&ten_days, None, Map::new()).unwrap();
    let removed: Vec<(u64, u64)> = report.removed.iter().map(|r| (r.first, r.last)).collect();
    assert_eq!(removed, [(1, 3), (4, 6)], "{report:?}");
    let left: Vec<u64> = sealed_segments(dir.path())
        .unwrap()
        .iter()
        .map(|s| s.first_seq)
        .collect();
    assert_eq!(left, [7]);
    assert_eq!(log.verify().unwrap().problem, None);
}
