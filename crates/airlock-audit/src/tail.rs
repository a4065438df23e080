//! Following the log from a position: what an exporter reads. The log is the source of truth and
//! the exporter only a reader of it, so a run never waits for an export, and an exporter that
//! stopped (a dead collector, a restart) takes up again exactly where its cursor says.
//!
//! A [`Tail`] yields each complete record after the position it was given, once, in the log's
//! order, with the exact bytes stored (so a copy can be verified byte for byte) and where the
//! record starts in the file (so the next start need not read the log from its beginning). It
//! never yields a line without its newline (one being written, or torn by a crash: the next
//! append cuts it off and writes `log.recovered` in its place), and never a record whose `seq`
//! is not past the last one yielded. The sealed segments come first, oldest first, then the open
//! segment; an open segment sealed while it is read (or moved away by hand) is read to its end,
//! then the segments sealed after it, then the new open segment: a roll loses no record and
//! sends none twice. A position resumes in the segment that holds its record (the offset is in
//! that file). A log cut shorter is read again from its start, its records up to the position
//! skipped.

use std::fs::File;
use std::io;
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::segments::{first_seq_of, read_line_at, sealed_segments};
use crate::{record_hash, AuditError};

/// How much of the file one read takes.
const CHUNK: usize = 64 * 1024;

/// A record taken from the log: which it is and where it starts. What an exporter's cursor holds.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Position {
    pub seq: u64,
    pub hash: String,
    /// The byte offset where the record's line starts, in the segment that holds it.
    pub offset: u64,
}

/// One record as the log stores it.
#[derive(Debug, Clone)]
pub struct Tailed {
    pub seq: u64,
    pub hash: String,
    pub prev: String,
    /// The line exactly as stored, without its newline.
    pub line: Vec<u8>,
    pub record: Map<String, Value>,
    pub offset: u64,
}

impl Tailed {
    pub fn position(&self) -> Position {
        Position {
            seq: self.seq,
            hash: self.hash.clone(),
            offset: self.offset,
        }
    }

    /// A complete line as a record, if it is one (an object with `seq`, `hash` and `prev`).
    fn parse(line: &[u8], offset: u64) -> Option<Tailed> {
        let record: Map<String, Value> = serde_json::from_slice(line).ok()?;
        let seq = record.get("seq")?.as_u64()?;
        let hash = record.get("hash")?.as_str()?.to_string();
        let prev = record.get("prev")?.as_str()?.to_string();
        Some(Tailed {
            seq,
            hash,
            prev,
            line: line.to_vec(),
            record,
            offset,
        })
    }
}

/// The records of a log after a position, as they are written. See the module's documentation.
pub struct Tail {
    /// The open segment.
    path: PathBuf,
    /// The state directory, whose `audit/` holds the sealed segments.
    state_dir: PathBuf,
    file: Option<File>,
    /// The file being read is the sealed segment starting at this seq; None: the open segment.
    sealed: Option<u64>,
    /// The first seq of the last segment read: the segments sealed after it come next.
    passed: u64,
    /// The open file's device and inode: another at the path means the log was moved away.
    identity: (u64, u64),
    /// Where `buffer` starts in the file: the start of the next line not yet taken.
    offset: u64,
    buffer: Vec<u8>,
    /// The last record taken (or the position given): nothing at or before it is yielded again.
    last: Option<(u64, String)>,
    /// The position given, still to be found in the file once it is open.
    resume: Option<Position>,
    /// What the exporter should tell a person: the log was replaced, records are missing.
    notes: Vec<String>,
    /// The offset of a line read a second time because it did not match its hash.
    rechecked: Option<u64>,
}

impl Tail {
    /// Follow the log at `path` after `position` (from its first record when None). Nothing is
    /// read until [`Tail::next_record`]; a log that does not exist yet is waited for.
    pub fn after(path: &Path, position: Option<Position>) -> Tail {
        Tail {
            path: path.to_path_buf(),
            state_dir: path.parent().map(Path::to_path_buf).unwrap_or_default(),
            file: None,
            sealed: None,
            passed: 0,
            identity: (0, 0),
            offset: 0,
            buffer: Vec::new(),
            last: position.as_ref().map(|p| (p.seq, p.hash.clone())),
            resume: position,
            notes: Vec::new(),
            rechecked: None,
        }
    }

    /// Things a person should hear about, said once each.
    pub fn take_notes(&mut self) -> Vec<String> {
        std::mem::take(&mut self.notes)
    }

    fn read_error(&self, source: io::Error) -> AuditError {
        AuditError::Read {
            path: self.path.clone(),
            source,
        }
    }

    /// The next complete record after the last one taken; None when there is none yet.
    pub fn next_record(&mut self) -> Result<Option<Tailed>, AuditError> {
        loop {
            if self.file.is_none() && !self.open()? {
                return Ok(None);
            }
            if let Some(end) = self.buffer.iter().position(|&b| b == b'\n') {
                let at = self.offset;
                let parsed = Tailed::parse(&self.buffer[..end], at);
                if parsed
                    .as_ref()
                    .is_some_and(|r| record_hash(&r.record) != r.hash)
                    && self.rechecked != Some(at)
                {
                    // Pieces of two writes? (A torn line cut off and written over between two
                    // reads.) Read the line again, whole; a record still not matching its hash
                    // was altered in the log, and is exported as it is for verify to find.
                    self.rechecked = Some(at);
                    self.buffer.clear();
                    continue;
                }
                let blank = self.buffer[..end].trim_ascii().is_empty();
                self.buffer.drain(..=end);
                self.offset += end as u64 + 1;
                if let Some(record) = self.take(parsed, at, blank) {
                    return Ok(Some(record));
                }
                continue;
            }
            if self.read_more()? {
                continue;
            }
            // At the end: a line without its newline is read again next time, from its start,
            // never joined to what is written after (the appender may cut it off first).
            let incomplete = self.buffer.len() as u64;
            self.buffer.clear();
            if let Some(first) = self.sealed {
                // A sealed segment read to its end: the next one.
                self.passed = first;
                self.file = None;
                continue;
            }
            if !self.follow_replacement(incomplete)? {
                return Ok(None);
            }
        }
    }

    /// Open the next segment to read, and find the position given in it. False: there is no
    /// log yet.
    fn open(&mut self) -> Result<bool, AuditError> {
        let resume = self.resume.take();
        let chosen = match &resume {
            Some(position) => self.segment_holding(position.seq)?,
            None => self.segment_after(self.passed)?,
        };
        let Some((file, sealed)) = chosen else {
            self.resume = resume;
            return Ok(false);
        };
        let meta = file.metadata().map_err(|e| self.read_error(e))?;
        self.identity = (meta.dev(), meta.ino());
        self.sealed = sealed;
        self.offset = 0;
        self.buffer.clear();
        if let Some(position) = resume {
            // The record the position names, where it says: then go on right after it. Else
            // (the log was moved, cut, or replaced) read from the start, skipping by seq.
            if let Some(line) =
                read_line_at(&file, position.offset).map_err(|e| self.read_error(e))?
            {
                let found = Tailed::parse(&line, position.offset);
                if found.is_some_and(|r| r.seq == position.seq && r.hash == position.hash) {
                    self.offset = position.offset + line.len() as u64 + 1;
                }
            }
        }
        self.file = Some(file);
        Ok(true)
    }

    /// The segment that holds record `seq` (with the first seq of a sealed one): the open
    /// segment if it starts at or before it, else the last sealed one that does; the oldest
    /// segment when the log starts after it (the records were removed: the gap is noted).
    fn segment_holding(&mut self, seq: u64) -> Result<Option<(File, Option<u64>)>, AuditError> {
        let open = match File::open(&self.path) {
            Ok(file) => Some(file),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(self.read_error(e)),
        };
        let open_first = match &open {
            Some(file) => first_seq_of(file).map_err(|e| self.read_error(e))?,
            None => None,
        };
        if let (Some(file), Some(first)) = (open, open_first) {
            if first <= seq {
                self.passed = first.saturating_sub(1);
                return Ok(Some((file, None)));
            }
        }
        let sealed = sealed_segments(&self.state_dir)?;
        if let Some(holding) = sealed.iter().rev().find(|s| s.first_seq <= seq) {
            match File::open(&holding.path) {
                Ok(file) => return Ok(Some((file, Some(holding.first_seq)))),
                Err(e) if e.kind() == io::ErrorKind::NotFound => {}
                Err(source) => {
                    return Err(AuditError::Read {
                        path: holding.path.clone(),
                        source,
                    })
                }
            }
        }
        self.segment_after(0)
    }

    /// The first segment after the sealed one starting at `passed`: the next sealed segment, else
    /// the open one (after any segment sealed while it was being opened).
    fn segment_after(&self, mut passed: u64) -> Result<Option<(File, Option<u64>)>, AuditError> {
        loop {
            let sealed = sealed_segments(&self.state_dir)?;
            if let Some(next) = sealed.iter().find(|s| s.first_seq > passed) {
                match File::open(&next.path) {
                    Ok(file) => return Ok(Some((file, Some(next.first_seq)))),
                    // Removed by retention since it was listed.
                    Err(e) if e.kind() == io::ErrorKind::NotFound => {
                        passed = next.first_seq;
                        continue;
                    }
                    Err(source) => {
                        return Err(AuditError::Read {
                            path: next.path.clone(),
                            source,
                        })
                    }
                }
            }
            let open = match File::open(&self.path) {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(self.read_error(e)),
            };
            let first = first_seq_of(&open)
                .map_err(|e| self.read_error(e))?
                .unwrap_or(u64::MAX);
            let sealed_meanwhile = sealed_segments(&self.state_dir)?
                .iter()
                .any(|s| s.first_seq > passed && s.first_seq < first);
            if !sealed_meanwhile {
                return Ok(Some((open, None)));
            }
        }
    }

    /// Read the next chunk into the buffer. False at the end of the file.
    fn read_more(&mut self) -> Result<bool, AuditError> {
        let Some(file) = &self.file else {
            return Ok(false);
        };
        let start = self.buffer.len();
        self.buffer.resize(start + CHUNK, 0);
        let read = file.read_at(&mut self.buffer[start..], self.offset + start as u64);
        let n = match read {
            Ok(n) => n,
            Err(e) => {
                self.buffer.truncate(start);
                return Err(self.read_error(e));
            }
        };
        self.buffer.truncate(start + n);
        Ok(n > 0)
    }

    /// At the end of the file: has the log been moved away, or cut shorter? Then start over on
    /// what is at the path now (true); else wait (false).
    fn follow_replacement(&mut self, incomplete: u64) -> Result<bool, AuditError> {
        let now = match std::fs::metadata(&self.path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(self.read_error(e)),
        };
        let moved = (now.dev(), now.ino()) != self.identity;
        let cut = !moved && now.len() < self.offset;
        if !moved && !cut {
            return Ok(false);
        }
        if cut {
            self.notes.push(format!(
                "{} was cut shorter (to {} bytes) while it was being exported: reading it again from its start",
                self.path.display(),
                now.len()
            ));
        }
        if incomplete > 0 && moved {
            // A line without its newline at the end of a log moved away is one a crash tore.
            self.notes.push(format!(
                "the log moved away from {} ended in an incomplete line ({incomplete} bytes): not exported",
                self.path.display(),
            ));
        }
        if moved {
            // Sealed (or moved away by hand): the segments sealed after it come next.
            if let Some(file) = &self.file {
                if let Some(first) = first_seq_of(file).map_err(|e| self.read_error(e))? {
                    self.passed = first;
                }
            }
        }
        self.file = None;
        Ok(true)
    }

    /// The record parsed from the line at `offset`, if it is one to yield.
    fn take(&mut self, parsed: Option<Tailed>, offset: u64, blank: bool) -> Option<Tailed> {
        let Some(record) = parsed else {
            if !blank {
                self.notes.push(format!(
                    "{}: the line at byte {offset} is not an audit record: not exported ('airlock log verify' says more)",
                    self.path.display()
                ));
            }
            return None;
        };
        if let Some((last_seq, last_hash)) = &self.last {
            if record.seq <= *last_seq {
                if record.seq == *last_seq && record.hash != *last_hash {
                    self.notes.push(format!(
                        "{}: record {} is not the record {} exported before (the log was replaced or restored): exporting what follows it",
                        self.path.display(),
                        record.seq,
                        record.seq
                    ));
                }
                return None;
            }
            if record.seq > last_seq.saturating_add(1) {
                self.notes.push(format!(
                    "{}: records {} to {} are not in the log (removed or moved away before they were exported)",
                    self.path.display(),
                    last_seq.saturating_add(1),
                    record.seq - 1
                ));
            }
        }
        self.last = Some((record.seq, record.hash.clone()));
        Some(record)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{AuditLog, Sync};
    use serde_json::json;
    use std::io::Write;

    fn drain(tail: &mut Tail) -> Vec<u64> {
        let mut seqs = Vec::new();
        while let Some(record) = tail.next_record().unwrap() {
            seqs.push(record.seq);
        }
        seqs
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
        // Another log entirely at the same place: its record 3 is not the one exported.
        let other = tempfile::tempdir().unwrap();
        let replacement = AuditLog::new(other.path(), Sync::Never);
        append(&replacement, 5);
        std::fs::copy(replacement.path(), log.path()).unwrap();
        let mut resumed = Tail::after(&log.path(), Some(exported[2].position()));
        assert_eq!(drain(&mut resumed), [4, 5]);
        let notes = resumed.take_notes();
        assert!(
            notes[0].contains("record 3 is not the record 3 exported before"),
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
}
