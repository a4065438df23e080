//! Tests of the log over segments, continued (segment_tests.rs): an appender waiting through
//! other writers' rolls, a seal that cannot take its name, indexes that list too many names.

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::time::Duration;

use serde_json::json;

use crate::segment_tests::{all_records, append_sessions, sealed, small_log};
use crate::*;

/// Whether a process waits for a `flock` on the file with inode `ino` (a `->` line of
/// /proc/locks): how the test below knows the appender is blocked, without sleeping on a guess.
fn flock_waiter_on(ino: u64) -> bool {
    let locks = fs::read_to_string("/proc/locks").unwrap();
    let needle = format!(":{ino} ");
    locks
        .lines()
        .any(|line| line.contains("->") && line.contains("FLOCK") && line.contains(&needle))
}

/// Wait until `waiter` waits for the lock of `file`; false when it finished instead.
fn waits_for_lock<T>(waiter: &std::thread::JoinHandle<T>, file: &fs::File) -> bool {
    use std::os::unix::fs::MetadataExt;
    let ino = file.metadata().unwrap().ino();
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !flock_waiter_on(ino) {
        if waiter.is_finished() {
            return false;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the appender never waited for the lock of inode {ino}"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
    true
}

#[test]
fn an_append_outwaits_any_number_of_rolls_by_other_writers() {
    // The flake of verify_while_others_roll_the_log_never_cries_tampering: under load, an append
    // failed with "it was moved away each time this process locked it". flock is not fair: a
    // busy writer takes the lock back before a woken waiter runs, and rolls the segment the
    // waiter waited for; after 64 such rolls the waiter gave up. Here another writer (this
    // thread, holding the lock) does that 100 times, each time only once the appender waits.
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    log.append("test.event", json!({"i": 0})).unwrap();
    let mut held = log.lock_open_segment().unwrap();
    let waiter = {
        let log = log.clone();
        std::thread::spawn(move || log.append("test.waiter", json!({})))
    };
    const ROLLS: usize = 100;
    for i in 1..=ROLLS {
        if !waits_for_lock(&waiter, &held) {
            break;
        }
        log.append_locked(&mut held, "test.event", json!({ "i": i }), Sync::Never)
            .unwrap();
        segments::seal(dir.path(), &log.path(), &mut held, false).unwrap();
        // The next open segment is this writer's before the waiter wakes to find its file gone.
        let next = log.lock_open_segment().unwrap();
        drop(std::mem::replace(&mut held, next));
    }
    drop(held);
    let appended = waiter.join().unwrap().unwrap();
    assert_eq!(appended.seq, ROLLS as u64 + 2);
    assert_eq!(sealed(dir.path()).len(), ROLLS);
    let verdict = log.verify().unwrap();
    assert_eq!(verdict.problem, None, "{verdict:?}");
}

#[test]
fn a_seal_that_cannot_take_its_name_changes_nothing_and_the_log_stays_writable() {
    let dir = tempfile::tempdir().unwrap();
    let log = small_log(dir.path());
    append_sessions(&log, &["a"; 12]);
    let first = sealed(dir.path());
    assert!(!first.is_empty());
    let index_before = fs::read(first[0].index_path()).unwrap();
    // An old copy of the log put back as the open segment: its first segment's name is taken.
    let old = fs::read(&first[0].path).unwrap();
    fs::remove_file(log.path()).unwrap();
    fs::write(log.path(), &old).unwrap();
    fs::set_permissions(log.path(), fs::Permissions::from_mode(0o600)).unwrap();
    let mut refused = false;
    for i in 0..20 {
        if log.append("run.intent", json!({"i": i})).is_err() {
            refused = true;
            break;
        }
    }
    assert!(
        refused,
        "a seal over an existing segment name must be refused"
    );
    // Found by review: the existing segment's index was replaced before the rename refused.
    assert_eq!(fs::read(first[0].index_path()).unwrap(), index_before);
    // The open segment is still this user's to write (it was made read-only before the rename).
    let mode = fs::metadata(log.path()).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode & 0o200, 0o200, "mode {mode:o}");
}

#[test]
fn a_segment_with_more_sessions_than_its_index_lists_is_still_read_for_each() {
    // Found by review: an index listed every session, profile, token and action named in its
    // segment, without bound: caller strings could bloat it. Capped now, and marked: a lookup
    // for a session past the cap must still open the segment, and retention still hold it.
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    let count = MAX_LISTED + 76;
    let name = |i: usize| format!("s{i:05}");
    for i in 0..count {
        log.append("run.intent", json!({ "session": name(i) }))
            .unwrap();
    }
    let index = log.seal().unwrap().unwrap();
    assert_eq!(index.sessions.len(), MAX_LISTED);
    assert_eq!(index.overflowed, ["sessions"]);
    assert_eq!(index.actions, ["run.intent"]);
    let past_the_cap = name(count - 1);
    assert!(!index.sessions.contains(&past_the_cap));
    let wanted = Filter {
        session: Some(past_the_cap.clone()),
        ..Filter::default()
    };
    assert!(index.may_hold(&wanted));
    assert_eq!(all_records(&log, &wanted).len(), 1);
    assert_eq!(log.verify().unwrap().problem, None);
    log.append("test.event", json!({})).unwrap();
    let everything = Retention {
        keep_days: None,
        keep_bytes: Some(0),
    };
    let under_review: std::collections::BTreeSet<String> = [past_the_cap.clone()].into();
    let report = log
        .apply_retention_holding(&everything, None, &under_review, Map::new())
        .unwrap();
    assert_eq!(report.held_for_sessions, [past_the_cap], "{report:?}");
    assert!(report.removed.is_empty(), "{report:?}");

    // An index sealed before the cap (every session listed, no mark) still verifies.
    let sealed = &sealed_segments(dir.path()).unwrap()[0];
    let mut old: Value = serde_json::from_slice(&fs::read(sealed.index_path()).unwrap()).unwrap();
    old["sessions"] = (0..count).map(name).collect::<Vec<_>>().into();
    old.as_object_mut().unwrap().remove("overflowed");
    fs::set_permissions(sealed.index_path(), fs::Permissions::from_mode(0o600)).unwrap();
    fs::write(sealed.index_path(), serde_json::to_vec(&old).unwrap()).unwrap();
    assert_eq!(log.verify().unwrap().problem, None);
    // A list cut without the mark hides sessions: verify says so.
    old["sessions"] = (0..MAX_LISTED).map(name).collect::<Vec<_>>().into();
    fs::write(sealed.index_path(), serde_json::to_vec(&old).unwrap()).unwrap();
    assert!(matches!(
        log.verify().unwrap().problem,
        Some(Problem::IndexMismatch { .. })
    ));
}
