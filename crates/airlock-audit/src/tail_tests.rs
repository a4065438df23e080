//! The tail's tests (in a file of their own: tail.rs stays readable).

use super::*;
use crate::{AuditLog, Sync};
use serde_json::{json, Map, Value};
use std::io::Write;

fn drain(tail: &mut Tail) -> Vec<u64> {
    let mut seqs = Vec::new();
    while let Some(record) = tail.next_record().unwrap() {
        seqs.push(record.seq);
    }
    seqs
}

/// Records of another log: never the same as `append`'s, even written in the same millisecond.
fn append_other(log: &AuditLog, n: u64) {
    for i in 0..n {
        log.append("other.event", json!({ "i": i })).unwrap();
    }
}

fn append(log: &AuditLog, n: u64) {
    for i in 0..n {
        log.append("test.event", json!({ "i": i })).unwrap();
    }
}

#[test]
fn records_come_once_each_in_order_as_they_are_written() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    let mut tail = Tail::after(&log.path(), None);
    assert_eq!(drain(&mut tail), Vec::<u64>::new(), "no log yet");
    append(&log, 3);
    assert_eq!(drain(&mut tail), [1, 2, 3]);
    assert_eq!(drain(&mut tail), Vec::<u64>::new());
    append(&log, 2);
    assert_eq!(drain(&mut tail), [4, 5]);
    assert!(tail.take_notes().is_empty());
}

#[test]
fn the_exact_stored_line_and_its_offset_are_kept() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    append(&log, 2);
    let text = std::fs::read(log.path()).unwrap();
    let mut tail = Tail::after(&log.path(), None);
    let first = tail.next_record().unwrap().unwrap();
    let second = tail.next_record().unwrap().unwrap();
    let first_end = text.iter().position(|&b| b == b'\n').unwrap();
    assert_eq!(first.line, &text[..first_end]);
    assert_eq!(second.offset, first_end as u64 + 1);
    assert_eq!(second.line, &text[first_end + 1..text.len() - 1]);
    assert_eq!(second.prev, first.hash);
}

#[test]
fn a_position_resumes_right_after_its_record_without_reading_the_log_again() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    append(&log, 5);
    let mut tail = Tail::after(&log.path(), None);
    tail.next_record().unwrap();
    let third = {
        tail.next_record().unwrap();
        tail.next_record().unwrap().unwrap()
    };
    // Spoil the first record: a resume that read the log again from its start would say
    // so; one that starts at the offset never sees it.
    let text = std::fs::read(log.path()).unwrap();
    let first_end = text.iter().position(|&b| b == b'\n').unwrap();
    let mut spoilt = vec![b'x'; first_end];
    spoilt.extend_from_slice(&text[first_end..]);
    std::fs::write(log.path(), spoilt).unwrap();
    let mut resumed = Tail::after(&log.path(), Some(third.position()));
    assert_eq!(drain(&mut resumed), [4, 5]);
    assert!(resumed.take_notes().is_empty());
    assert_eq!(resumed.offset, std::fs::metadata(log.path()).unwrap().len());
}

#[test]
fn a_stale_offset_falls_back_to_skipping_by_seq() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    append(&log, 4);
    let mut tail = Tail::after(&log.path(), None);
    tail.next_record().unwrap();
    let mut position = tail.next_record().unwrap().unwrap().position();
    position.offset += 7;
    assert_eq!(drain(&mut Tail::after(&log.path(), Some(position))), [3, 4]);
}

#[test]
fn a_line_being_written_waits_for_its_newline() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    append(&log, 1);
    let mut tail = Tail::after(&log.path(), None);
    assert_eq!(drain(&mut tail), [1]);
    // Half a record, as a crash (or a write in progress) leaves it.
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(log.path())
        .unwrap();
    file.write_all(b"{\"seq\":2,\"time\":\"half").unwrap();
    assert_eq!(drain(&mut tail), Vec::<u64>::new());
    // The next append cuts it off and says so; both records come, the torn line never.
    append(&log, 1);
    let records: Vec<String> = std::iter::from_fn(|| tail.next_record().unwrap())
        .map(|r| r.record["action"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(records, ["log.recovered", "test.event"]);
    assert!(tail.take_notes().is_empty());
}

#[test]
fn a_log_moved_away_is_read_to_its_end_then_the_new_one_followed() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    append(&log, 2);
    let mut tail = Tail::after(&log.path(), None);
    assert_eq!(drain(&mut tail), [1, 2]);
    append(&log, 1);
    // Rotated by hand: the log and its head moved away; the new log continues the chain.
    std::fs::rename(log.path(), dir.path().join("audit.log.1")).unwrap();
    append(&log, 2);
    assert_eq!(drain(&mut tail), [3, 4, 5]);
    assert!(tail.take_notes().is_empty());
}

#[test]
fn records_missing_or_replaced_are_noted_not_hidden() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    append(&log, 3);
    let mut tail = Tail::after(&log.path(), None);
    let exported: Vec<Tailed> = std::iter::from_fn(|| tail.next_record().unwrap()).collect();
    // Another log entirely at the same place: its record 3 is not the one exported, so
    // nothing of it was: all of it is exported, and that is said.
    let other = tempfile::tempdir().unwrap();
    let replacement = AuditLog::new(other.path(), Sync::Never);
    append_other(&replacement, 5);
    std::fs::copy(replacement.path(), log.path()).unwrap();
    let mut resumed = Tail::after(&log.path(), Some(exported[2].position()));
    assert_eq!(drain(&mut resumed), [1, 2, 3, 4, 5]);
    let notes = resumed.take_notes();
    assert!(
        notes[0].contains("does not hold record 3, the last exported"),
        "{notes:?}"
    );

    // Records removed from the middle before they were exported: the gap is said.
    let mut lines: Vec<String> = std::fs::read_to_string(log.path())
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect();
    lines.remove(1);
    std::fs::write(log.path(), lines.join("\n") + "\nnot a record\n").unwrap();
    let mut tail = Tail::after(&log.path(), None);
    assert_eq!(drain(&mut tail), [1, 3, 4, 5]);
    let notes = tail.take_notes();
    assert!(
        notes[0].contains("records 2 to 2 are not in the log"),
        "{notes:?}"
    );
    assert!(notes[1].contains("is not an audit record"), "{notes:?}");
}

#[test]
fn a_record_altered_in_the_log_is_exported_as_it_is_for_verify_to_find() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    append(&log, 3);
    let text = std::fs::read_to_string(log.path()).unwrap();
    std::fs::write(log.path(), text.replacen("\"i\":1", "\"i\":7", 1)).unwrap();
    let mut tail = Tail::after(&log.path(), None);
    let records: Vec<Tailed> = std::iter::from_fn(|| tail.next_record().unwrap()).collect();
    assert_eq!(records.len(), 3);
    assert!(String::from_utf8_lossy(&records[1].line).contains("\"i\":7"));
}

#[test]
fn a_log_cut_shorter_is_read_again_and_only_new_records_come() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    append(&log, 3);
    let mut tail = Tail::after(&log.path(), None);
    assert_eq!(drain(&mut tail), [1, 2, 3]);
    std::fs::write(log.path(), b"").unwrap();
    append(&log, 1);
    // The chain goes on from audit.head (record 4); nothing before it is yielded again.
    assert_eq!(drain(&mut tail), [4]);
    assert!(tail.take_notes()[0].contains("was cut shorter"));
}

/// Found by review: a cursor ahead of the log (the log replaced by hand with a new, shorter
/// chain, or restored from a backup) had the records 1 to the cursor's seq of the new log skipped
/// silently, those there and those written after.
#[test]
fn a_cursor_ahead_of_a_replaced_log_exports_all_of_it_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    append(&log, 6);
    let mut tail = Tail::after(&log.path(), None);
    let exported: Vec<Tailed> = std::iter::from_fn(|| tail.next_record().unwrap()).collect();
    let cursor = exported[5].position();
    let other = tempfile::tempdir().unwrap();
    let replacement = AuditLog::new(other.path(), Sync::Never);
    append_other(&replacement, 3);
    std::fs::copy(replacement.path(), log.path()).unwrap();
    let mut resumed = Tail::after(&log.path(), Some(cursor));
    assert_eq!(drain(&mut resumed), [1, 2, 3]);
    let notes = resumed.take_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("does not hold record 6, the last exported")
            && notes[0].contains("from its first record (record 1)"),
        "{notes:?}"
    );
    // What the replaced log gets next comes too, each once.
    append(&log, 2);
    assert_eq!(drain(&mut resumed), [4, 5]);
    assert!(resumed.take_notes().is_empty());
}

/// Found by review: a log copy-truncated (a log rotator's copytruncate) and written again past
/// the offset the tail had reached was read from that stale offset: from the middle of a line,
/// records skipped as a "gap" that was at the start of the file.
#[test]
fn a_log_copy_truncated_and_regrown_past_the_offset_is_followed_by_seq() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    append(&log, 5);
    let mut tail = Tail::after(&log.path(), None);
    let exported: Vec<Tailed> = std::iter::from_fn(|| tail.next_record().unwrap()).collect();
    assert_eq!(exported.len(), 5);
    std::fs::copy(log.path(), dir.path().join("audit.log.1")).unwrap();
    std::fs::OpenOptions::new()
        .write(true)
        .open(log.path())
        .unwrap()
        .set_len(0)
        .unwrap();
    // The chain goes on from audit.head: record 6's prev is record 5's hash.
    append(&log, 8);
    assert!(std::fs::metadata(log.path()).unwrap().len() > tail.offset + 100);
    assert_eq!(drain(&mut tail), (6..=13).collect::<Vec<_>>());
    assert_eq!(tail.take_notes(), Vec::<String>::new());
    // A new start from the cursor finds it the same way: its offset holds another record now.
    let mut resumed = Tail::after(&log.path(), Some(exported[4].position()));
    assert_eq!(drain(&mut resumed), (6..=13).collect::<Vec<_>>());
    assert_eq!(resumed.take_notes(), Vec::<String>::new());
}

/// A record that does not join the one before, where the log really holds them so (not a
/// stale place): said, and exported as it is, once; the tail does not go looking again.
#[test]
fn a_broken_link_in_the_log_itself_is_said_and_exported_as_it_is() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    append(&log, 2);
    let other = tempfile::tempdir().unwrap();
    let stranger = AuditLog::new(other.path(), Sync::Never);
    append_other(&stranger, 3);
    // Record 3 of another chain appended: seq follows, prev does not.
    let theirs = std::fs::read_to_string(stranger.path()).unwrap();
    let third = theirs.lines().nth(2).unwrap();
    let mut file = std::fs::OpenOptions::new()
        .append(true)
        .open(log.path())
        .unwrap();
    writeln!(file, "{third}").unwrap();
    let mut tail = Tail::after(&log.path(), None);
    assert_eq!(drain(&mut tail), [1, 2, 3]);
    let notes = tail.take_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(
        notes[0].contains("record 3 does not follow record 2"),
        "{notes:?}"
    );
}

/// A log emptied by a copy-truncate, seen before anything is written to it again: waited for,
/// not taken for a replaced log; the record that joins comes next.
#[test]
fn a_log_emptied_is_waited_for_and_the_record_that_joins_comes_next() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    append(&log, 3);
    let mut tail = Tail::after(&log.path(), None);
    assert_eq!(drain(&mut tail), [1, 2, 3]);
    std::fs::OpenOptions::new()
        .write(true)
        .open(log.path())
        .unwrap()
        .set_len(0)
        .unwrap();
    assert_eq!(drain(&mut tail), Vec::<u64>::new());
    assert_eq!(drain(&mut tail), Vec::<u64>::new());
    append(&log, 2);
    assert_eq!(drain(&mut tail), [4, 5]);
    let notes = tail.take_notes();
    assert_eq!(notes.len(), 1, "{notes:?}");
    assert!(notes[0].contains("was cut shorter"), "{notes:?}");
}

fn lines_of(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// `line` as a record with `seq`, its own hash right: what someone who can write the log forges.
fn forged(line: &str, seq: u64) -> String {
    let mut record: Map<String, Value> = serde_json::from_str(line).unwrap();
    record.insert("seq".into(), seq.into());
    record.insert("action".into(), "forged".into());
    record.remove("hash");
    let hash = record_hash(&record);
    record.insert("hash".into(), hash.into());
    serde_json::to_string(&record).unwrap()
}

/// Found by review (High): one record with a high seq written into the log ahead of the tail had
/// every genuine record after it skipped as "out of order", for ever. Each is exported now.
#[test]
fn a_record_with_a_false_high_seq_never_hides_the_records_after_it() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    append(&log, 3);
    let mut tail = Tail::after(&log.path(), None);
    assert_eq!(drain(&mut tail), [1, 2, 3]);
    append(&log, 3);
    let mut lines = lines_of(&log.path());
    lines.insert(3, forged(&lines[2], 1_000_000));
    std::fs::write(log.path(), lines.join("\n") + "\n").unwrap();
    append(&log, 3);
    assert_eq!(drain(&mut tail), [1_000_000, 4, 5, 6, 7, 8, 9]);
    let notes = tail.take_notes().join("\n");
    assert!(
        notes.contains("record 4 comes after record 1000000"),
        "{notes}"
    );
    assert!(notes.contains("exported as it is"), "{notes}");
    assert_eq!(tail.scans, 0, "the log was never looked through");

    // A cursor left at the forged record (the exporter stopped there) resumes after it.
    let forged_at = {
        let mut again = Tail::after(&log.path(), None);
        std::iter::from_fn(|| again.next_record().unwrap())
            .find(|r| r.seq == 1_000_000)
            .unwrap()
            .position()
    };
    let mut resumed = Tail::after(&log.path(), Some(forged_at));
    assert_eq!(drain(&mut resumed), [4, 5, 6, 7, 8, 9]);
}

/// Lines copied in twice (1..5, then 2..5 again) are exported as the log holds them, once each
/// pass, and the tail goes on: no look from the file's start that finds the first copy and
/// comes back to the second for ever.
#[test]
fn duplicated_lines_are_exported_as_they_are_without_looping() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    append(&log, 5);
    let lines = lines_of(&log.path());
    let mut all = lines.clone();
    all.extend(lines.iter().cloned());
    std::fs::write(log.path(), all.join("\n") + "\n").unwrap();
    append(&log, 1);
    let mut tail = Tail::after(&log.path(), None);
    let got: Vec<u64> = std::iter::from_fn(|| tail.next_record().unwrap())
        .take(100)
        .map(|r| r.seq)
        .collect();
    assert_eq!(got, [1, 2, 3, 4, 5, 1, 2, 3, 4, 5, 6]);
}

/// Found by review: every link broken had each record look for the last one from the file's
/// start (4,000 records: 32 s). Each is judged by one read of the line before it now.
#[test]
fn a_log_of_broken_links_is_read_once_not_once_per_record() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    append(&log, 200);
    let mut broken: Vec<String> = Vec::new();
    for (i, line) in lines_of(&log.path()).iter().enumerate() {
        let mut record: Map<String, Value> = serde_json::from_str(line).unwrap();
        record.insert("prev".into(), "0".repeat(64).into());
        broken.push(serde_json::to_string(&record).unwrap());
        if i % 2 == 0 {
            broken.push("not a record".into());
        }
    }
    std::fs::write(log.path(), broken.join("\n") + "\n").unwrap();
    let mut tail = Tail::after(&log.path(), None);
    assert_eq!(drain(&mut tail), (1..=200).collect::<Vec<u64>>());
    assert_eq!(tail.scans, 0);
}

/// Found by review: a copy-truncate seen before the next append, while sealed segments exist,
/// had the whole log exported again from record 1. It is waited for, and nothing comes twice.
#[test]
fn a_copy_truncate_with_sealed_segments_sends_nothing_twice() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never).with_layout(crate::Layout {
        segment_size: 1024,
        ..crate::Layout::default()
    });
    append(&log, 30);
    assert!(!crate::sealed_segments(dir.path()).unwrap().is_empty());
    let mut tail = Tail::after(&log.path(), None);
    assert_eq!(drain(&mut tail), (1..=30).collect::<Vec<u64>>());
    std::fs::OpenOptions::new()
        .write(true)
        .open(log.path())
        .unwrap()
        .set_len(0)
        .unwrap();
    assert_eq!(drain(&mut tail), Vec::<u64>::new());
    let scans = tail.scans;
    assert_eq!(drain(&mut tail), Vec::<u64>::new());
    assert_eq!(
        tail.scans, scans,
        "a log that did not change is not looked through again"
    );
    append(&log, 2);
    assert_eq!(drain(&mut tail), [31, 32]);
}

/// Found by review: a cursor the log does not hold, and a log whose first line is not a record
/// (a file restored with a header): the export stopped without a word, and a follower read the
/// whole segment every poll. It is exported from its start, said so, and the line reported.
#[test]
fn a_replaced_log_starting_with_a_stray_line_is_exported_and_said() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    append(&log, 5);
    let mut tail = Tail::after(&log.path(), None);
    assert_eq!(drain(&mut tail), [1, 2, 3, 4, 5]);
    let other = tempfile::tempdir().unwrap();
    let stranger = AuditLog::new(other.path(), Sync::Never);
    append_other(&stranger, 8);
    let text = format!(
        "# restored from backup\n{}",
        std::fs::read_to_string(stranger.path()).unwrap()
    );
    let new = dir.path().join("new");
    std::fs::write(&new, &text).unwrap();
    std::fs::rename(&new, log.path()).unwrap();
    assert_eq!(drain(&mut tail), (1..=8).collect::<Vec<u64>>());
    let notes = tail.take_notes().join("\n");
    assert!(notes.contains("its first line is not a record"), "{notes}");
    assert!(
        notes.contains("the line at byte 0 is not an audit record"),
        "{notes}"
    );

    let held_nowhere = Position {
        seq: 5,
        hash: "x".into(),
        offset: 0,
    };
    let mut resumed = Tail::after(&log.path(), Some(held_nowhere));
    assert_eq!(drain(&mut resumed), (1..=8).collect::<Vec<u64>>());
}

/// Found by review: a cursor's offset edited by hand near 2^63 had every read fail ("Invalid
/// argument", naming the wrong file). An offset past the end holds nothing: looked for by seq.
#[test]
fn an_offset_past_the_end_is_looked_for_by_seq() {
    let dir = tempfile::tempdir().unwrap();
    let log = AuditLog::new(dir.path(), Sync::Never);
    append(&log, 3);
    let mut first = Tail::after(&log.path(), None);
    let mut position = first.next_record().unwrap().unwrap().position();
    position.offset = u64::MAX - 5;
    assert_eq!(drain(&mut Tail::after(&log.path(), Some(position))), [2, 3]);
}
