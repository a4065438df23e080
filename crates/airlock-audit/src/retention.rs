//! Retention: the oldest sealed segments go once they are past a number of days or the log past
//! a size, and the chain says so.
//!
//! The removal is a record of the chain (`log.retention`), appended and synced *before* any file
//! goes, holding the log's lock so that no segment rolls meanwhile: each segment removed with its
//! seq range, times, size and last hash, and `through` / `through_hash`, the last record removed.
//! `verify` then finds a log that starts at `through + 1` whose first `prev` is `through_hash`,
//! and says "records 1 to N removed by retention at TIME" instead of calling it tampering; a
//! segment removed by hand has no such record, and stays a gap. A crash after the record and
//! before the files are gone leaves the segments in place: they still verify, and the next
//! retention removes them (with a record of its own).
//!
//! Only whole sealed segments are removed, oldest first: never the open segment, never one in
//! the middle, and never one holding a record an export destination has not sent yet (the caller
//! says which: `keep_from`): retention holds back then, and says so, rather than lose records
//! export promised to deliver.

use std::collections::BTreeSet;
use std::fs;
use std::io;
use std::time::{Duration, SystemTime};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::index::{index_of, SegmentIndex};
use crate::segments::{first_seq_of, read_line_at, sealed_segments, Sealed, SEGMENT_DIR};
use crate::{format_time, AuditError, AuditLog, Position};

/// The action of the record a removal writes.
pub const RETENTION_ACTION: &str = "log.retention";

/// How long the log keeps sealed segments. None: no limit of that kind.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Retention {
    /// Remove a sealed segment once its latest record is older than this many days (a record
    /// dated later than its segment was written counts as written then: see `age_time`).
    pub keep_days: Option<u64>,
    /// Remove the oldest sealed segments while the log (all segments) is larger than this.
    pub keep_bytes: Option<u64>,
}

impl Retention {
    pub fn is_unlimited(&self) -> bool {
        self.keep_days.is_none() && self.keep_bytes.is_none()
    }
}

/// A sealed segment removed, as the retention record lists it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Removed {
    /// Its file name in `STATE/audit/`.
    pub segment: String,
    pub first: u64,
    pub last: u64,
    pub first_time: String,
    pub last_time: String,
    pub last_hash: String,
    pub bytes: u64,
}

/// What a retention pass did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RetentionReport {
    /// The segments removed, oldest first.
    pub removed: Vec<Removed>,
    /// The seq of the `log.retention` record that says so.
    pub record: Option<u64>,
    /// Segments past the limits but kept: they hold records from `keep_from` on, which an export
    /// destination has not sent yet, or records of a session still waiting for review.
    pub held: Vec<Removed>,
    /// The sessions under review whose records held segments back.
    pub held_for_sessions: Vec<String>,
    /// The log's size after the pass (all segments, bytes).
    pub bytes_after: u64,
}

fn removed_of(sealed: &Sealed, index: &SegmentIndex) -> Removed {
    Removed {
        segment: sealed
            .path
            .file_name()
            .map(|n| n.to_string_lossy().into_owned())
            .unwrap_or_default(),
        first: index.first_seq,
        last: index.last_seq,
        first_time: index.first_time.clone(),
        last_time: index.last_time.clone(),
        last_hash: index.last_hash.clone(),
        bytes: index.bytes,
    }
}

impl AuditLog {
    /// Remove the sealed segments past `retention`, oldest first, recording the removal first
    /// (with `fields`, e.g. who asked, in the record). None of a segment named from `keep_from`
    /// on, or holding a record at or after it, is removed: an export destination still has to
    /// send records from there ([`Position::keep_from`] says where, by a cursor).
    pub fn apply_retention(
        &self,
        retention: &Retention,
        keep_from: Option<u64>,
        fields: Map<String, Value>,
    ) -> Result<RetentionReport, AuditError> {
        self.apply_retention_holding(retention, keep_from, &BTreeSet::new(), fields)
    }

    /// [`AuditLog::apply_retention`], also keeping every segment that holds a record of one of
    /// `under_review` (sessions not yet applied or discarded): a busy or hostile run cannot push
    /// the history of changes still waiting for a person out of the log.
    pub fn apply_retention_holding(
        &self,
        retention: &Retention,
        keep_from: Option<u64>,
        under_review: &BTreeSet<String>,
        fields: Map<String, Value>,
    ) -> Result<RetentionReport, AuditError> {
        let mut report = RetentionReport::default();
        // Held for the whole pass: no segment rolls, and no other pass runs, meanwhile.
        let mut open = self.lock_open_segment()?;
        let open_bytes = open.metadata().map_err(|e| self.append_error(e))?.len();
        let sealed = sealed_segments(self.state_dir())?;
        let mut segments = Vec::with_capacity(sealed.len());
        let mut total = open_bytes;
        for segment in sealed {
            let index = match segment.index() {
                Some(index) => index,
                // No index (a crash, or removed): the segment itself says what it holds.
                None => match read_index(&segment)? {
                    Some(index) => index,
                    None => continue,
                },
            };
            total += index.bytes;
            segments.push((segment, index));
        }
        let now = (self.clock)();
        let cutoff = retention
            .keep_days
            .map(|days| now.checked_sub(Duration::from_secs(days.saturating_mul(86_400))))
            .map(|at| format_time(at.unwrap_or(SystemTime::UNIX_EPOCH)));
        let mut chosen = Vec::new();
        for (segment, index) in &segments {
            let too_old = cutoff
                .as_deref()
                .is_some_and(|c| age_time(segment, index).as_str() < c);
            let too_big = retention.keep_bytes.is_some_and(|keep| total > keep);
            if !too_old && !too_big {
                break;
            }
            // Kept by the name of the segment too: its records' seqs are what they claim, and
            // one with a false seq must not let a segment of unsent records go.
            if keep_from.is_some_and(|keep| segment.first_seq >= keep || index.last_seq >= keep) {
                report.held.push(removed_of(segment, index));
                continue;
            }
            let reviewed = sessions_under_review(segment, index, under_review)?;
            if !reviewed.is_empty() {
                report.held.push(removed_of(segment, index));
                for session in reviewed {
                    if !report.held_for_sessions.contains(&session) {
                        report.held_for_sessions.push(session);
                    }
                }
                continue;
            }
            if !report.held.is_empty() {
                // Oldest first: nothing after a segment held back goes.
                continue;
            }
            chosen.push((segment.clone(), removed_of(segment, index)));
            total -= index.bytes;
        }
        report.bytes_after = total;
        let Some((_, last)) = chosen.last() else {
            return Ok(report);
        };
        let mut record = fields;
        record.insert(
            "segments".into(),
            serde_json::to_value(chosen.iter().map(|(_, r)| r).collect::<Vec<_>>())
                .unwrap_or_default(),
        );
        record.insert("through".into(), last.last.into());
        record.insert("through_hash".into(), last.last_hash.clone().into());
        record.insert("keep_days".into(), retention.keep_days.into());
        record.insert("keep_bytes".into(), retention.keep_bytes.into());
        record.insert(
            "summary".into(),
            format!(
                "records {} to {} removed by retention ({} sealed segment{})",
                chosen[0].1.first,
                last.last,
                chosen.len(),
                if chosen.len() == 1 { "" } else { "s" }
            )
            .into(),
        );
        let appended = self.append_locked(
            &mut open,
            RETENTION_ACTION,
            Value::Object(record),
            self.sync,
        )?;
        report.record = Some(appended.seq);
        for (segment, removed) in chosen {
            remove_if_there(&segment.path)?;
            remove_if_there(&segment.index_path())?;
            report.removed.push(removed);
        }
        self.remove_orphan_indexes()?;
        Ok(report)
    }

    /// Indexes whose segment is gone (a crash between the two removals).
    fn remove_orphan_indexes(&self) -> Result<(), AuditError> {
        let dir = self.state_dir().join(SEGMENT_DIR);
        let Ok(entries) = fs::read_dir(&dir) else {
            return Ok(());
        };
        for entry in entries.flatten() {
            let path = entry.path();
            if path.extension().is_some_and(|e| e == "index")
                && !path.with_extension("log").exists()
            {
                remove_if_there(&path)?;
            }
        }
        Ok(())
    }
}

impl Position {
    /// What retention must keep for an export whose cursor is this position: the first seq of
    /// the segment that holds this record *where the cursor says* (at its offset, with its seq
    /// and hash; the oldest such), for `keep_from`. None when no segment holds it there (the
    /// log was replaced, restored, or the cursor edited): nothing of this log was sent, so
    /// everything is kept.
    ///
    /// By position, never by the cursor's seq alone (found by review: a record with a false
    /// high seq exported, then the cursor on it, let retention remove the genuine records after
    /// it, never sent). The tail reads the sealed segments in order, then the open one: every
    /// segment before the one holding the cursor's record was read whole.
    pub fn keep_from(
        &self,
        state_dir: &std::path::Path,
        open_path: &std::path::Path,
    ) -> Result<Option<u64>, AuditError> {
        let sealed = sealed_segments(state_dir)?;
        let segments = sealed
            .iter()
            .map(|s| (s.path.as_path(), Some(s.first_seq)))
            .chain([(open_path, None)]);
        for (path, first) in segments {
            let read_error = |source| AuditError::Read {
                path: path.to_path_buf(),
                source,
            };
            let file = match fs::File::open(path) {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::NotFound => continue,
                Err(e) => return Err(read_error(e)),
            };
            let len = file.metadata().map_err(read_error)?.len();
            if self.offset >= len {
                continue;
            }
            let Some(line) = read_line_at(&file, self.offset).map_err(read_error)? else {
                continue;
            };
            let held = serde_json::from_slice::<Map<String, Value>>(&line)
                .ok()
                .is_some_and(|record| {
                    record.get("seq").and_then(Value::as_u64) == Some(self.seq)
                        && record.get("hash").and_then(Value::as_str) == Some(self.hash.as_str())
                });
            if !held {
                continue;
            }
            return Ok(Some(match first {
                Some(first) => first,
                // The open segment: sealed later under its first record's seq. A first line
                // that is not a record gives nothing to name it by: keep everything.
                None => first_seq_of(&file).map_err(read_error)?.unwrap_or(1),
            }));
        }
        Ok(None)
    }
}

/// The time `segment` is judged old by: its latest record's, unless that is later than the file
/// was last written (a record claiming the future: a clock set back after it was written, or a
/// time forged), then when it was last written. Judged by its records alone, one record from the
/// future kept its segment past keep_days forever, and every segment after it (oldest first).
/// A file copied since (a backup restored) has a later time: that only keeps it longer.
fn age_time(segment: &Sealed, index: &SegmentIndex) -> String {
    let written = fs::metadata(&segment.path)
        .and_then(|meta| meta.modified())
        .ok()
        .map(format_time);
    match written {
        Some(written) if written < index.max_time => written,
        _ => index.max_time.clone(),
    }
}

/// The sessions of `under_review` that `segment` holds records of: as its index lists them, or,
/// when that list was cut (more sessions than an index lists), as its records say.
fn sessions_under_review(
    segment: &Sealed,
    index: &SegmentIndex,
    under_review: &BTreeSet<String>,
) -> Result<Vec<String>, AuditError> {
    if under_review.is_empty() {
        return Ok(Vec::new());
    }
    if !index.overflowed("sessions") {
        return Ok(index
            .sessions
            .iter()
            .filter(|session| under_review.contains(*session))
            .cloned()
            .collect());
    }
    let read_error = |source| AuditError::Read {
        path: segment.path.clone(),
        source,
    };
    let file = match fs::File::open(&segment.path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(read_error(e)),
    };
    let mut found = BTreeSet::new();
    for line in io::BufRead::split(io::BufReader::new(file), b'\n') {
        let line = line.map_err(read_error)?;
        if let Ok(Value::Object(record)) = serde_json::from_slice::<Value>(&line) {
            if let Some(session) = record.get("session").and_then(Value::as_str) {
                if under_review.contains(session) {
                    found.insert(session.to_string());
                }
            }
        }
    }
    Ok(found.into_iter().collect())
}

fn read_index(segment: &Sealed) -> Result<Option<SegmentIndex>, AuditError> {
    let read_error = |source| AuditError::Read {
        path: segment.path.clone(),
        source,
    };
    let file = match fs::File::open(&segment.path) {
        Ok(file) => file,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(read_error(e)),
    };
    index_of(io::BufReader::new(file)).map_err(read_error)
}

fn remove_if_there(path: &std::path::Path) -> Result<(), AuditError> {
    match fs::remove_file(path) {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == io::ErrorKind::NotFound => Ok(()),
        Err(source) => Err(AuditError::Append {
            path: path.to_path_buf(),
            source,
        }),
    }
}

#[cfg(test)]
#[path = "retention_tests.rs"]
mod tests;
