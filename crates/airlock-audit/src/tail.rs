//! Following the log from a position: what an exporter reads. The log is the source of truth and
//! the exporter only a reader of it, so a run never waits for an export, and an exporter that
//! stopped (a dead collector, a restart) takes up again exactly where its cursor says.
//!
//! A [`Tail`] yields each complete record after the position it was given, once, in the log's
//! order, with the exact bytes stored (so a copy can be verified byte for byte) and where the
//! record starts in the file (so the next start need not read the log from its beginning). It
//! never yields a line without its newline (one being written, or torn by a crash: the next
//! append cuts it off and writes `log.recovered` in its place). The sealed segments come first,
//! oldest first, then the open segment; an open segment sealed while it is read (or moved away
//! by hand) is read to its end, then the segments sealed after it, then the new open segment: a
//! roll loses no record and sends none twice.
//!
//! **Where it reads is checked, never guessed.** Each record yielded must join the one yielded
//! before it: its `seq` one more, its `prev` that record's `hash` (the fields the chain links
//! by). A position resumes only where its offset really holds its record (seq and hash). A
//! record that does not join is first judged by reading the last record yielded again at its
//! offset, in the same open file: still there, the file was not rewritten under the tail, and
//! the record is the log's own. Not there (a log cut and written again past the offset,
//! copy-truncated by a log rotator, replaced, restored from a copy), the tail looks for the
//! last record it yielded in the segments, by seq, and goes on right after it (or at the
//! record that follows it, when that one starts the file now). What it reads then is the
//! log's own too. **A record is never skipped**: a gap, a broken link, a seq lower than the
//! last (or a false one far ahead) is said in a note and the record exported as it is, for
//! `verify` to judge; a line that is not a record is said and left out.
//!
//! **A log that does not hold that record** (replaced by another chain, a cursor ahead of the
//! log, restored from an older copy) is said in a note, and exported again from its first
//! record: records the destination has may come a second time, and the exported stream shows a
//! second chain starting, but no record of the log that is there is skipped. A duplicate is
//! better than a gap: an exporter that skipped what it cannot place would lose records silently.
//! An open segment with no complete line (just copy-truncated) is waited for, whatever sealed
//! segments there are: the next record written there says whether the log goes on.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::os::unix::fs::{FileExt, MetadataExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

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

/// Where the next file to read is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    /// The segment after the last one read (a roll, or the first segment).
    Next,
    /// Where the last record yielded (or the position given) is in the log, looked for by seq;
    /// first at `hint`, the offset a position gave.
    Find { hint: Option<u64> },
}

/// What to do with a line read.
enum Step {
    Yield(Tailed),
    Skip,
    /// The line does not join what was yielded before: find where the log holds that.
    Relocate,
}

/// The records of a log after a position, as they are written. See the module's documentation.
pub struct Tail {
    /// The open segment.
    path: PathBuf,
    /// The state directory, whose `audit/` holds the sealed segments.
    state_dir: PathBuf,
    file: Option<Arc<File>>,
    /// The file being read is the sealed segment starting at this seq; None: the open segment.
    sealed: Option<u64>,
    /// The first seq of the last segment read: the segments sealed after it come next.
    passed: u64,
    /// The open file's device and inode: another at the path means the log was moved away.
    identity: (u64, u64),
    /// Where `buffer` starts in the file: the start of the next line not yet taken.
    offset: u64,
    buffer: Vec<u8>,
    /// The last record taken (or the position given): what the next record must join.
    last: Option<(u64, String)>,
    /// Where `last` was read (the file, and the offset of its line): a line that does not join
    /// it is judged by reading it there again, not by looking for it from the file's start.
    last_at: Option<(Arc<File>, u64)>,
    /// How the next file is opened.
    start: Start,
    /// `last` was looked for in the log since it was taken: what follows it where it was found
    /// is the log's own, said and exported as it is rather than looked for again.
    placed: bool,
    /// What the exporter should tell a person: the log was replaced, records are missing.
    notes: Vec<String>,
    /// The offset of a line read a second time because it did not match its hash.
    rechecked: Option<u64>,
    /// The log as it was when `last` was looked for and the look could only wait (no record
    /// written yet where it would be): not looked for again until the log changes.
    waiting_on: Option<Shape>,
    /// How many times a file was read from its start to look for a record: once per change
    /// of the log under the tail at most, never once per record (what the tests count).
    scans: u64,
}

/// What a look for a record depends on: the open segment (device, inode, size) and the sealed
/// segments there are (first seqs, sizes).
#[derive(Debug, Clone, PartialEq, Eq)]
struct Shape {
    open: Option<(u64, u64, u64)>,
    sealed: Vec<(u64, u64)>,
}

/// Where a look for the last record found the log takes up.
struct Located {
    file: File,
    sealed: Option<u64>,
    /// Where to read next.
    offset: u64,
    /// Where the last record itself is in `file`, when it is there.
    last_at: Option<u64>,
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
            start: match &position {
                Some(p) => Start::Find {
                    hint: Some(p.offset),
                },
                None => Start::Next,
            },
            last: position.map(|p| (p.seq, p.hash)),
            last_at: None,
            placed: false,
            notes: Vec::new(),
            rechecked: None,
            waiting_on: None,
            scans: 0,
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

    /// An error reading the sealed segment starting at `sealed` (None: the open segment), naming
    /// that file.
    fn error_in(&self, sealed: Option<u64>, source: io::Error) -> AuditError {
        let path = match sealed {
            Some(first) => self
                .state_dir
                .join(crate::SEGMENT_DIR)
                .join(crate::segment_file_name(first)),
            None => self.path.clone(),
        };
        AuditError::Read { path, source }
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
                match self.take(parsed, at, blank) {
                    Step::Relocate => {
                        self.start = Start::Find { hint: None };
                        self.file = None;
                    }
                    step => {
                        self.buffer.drain(..=end);
                        self.offset += end as u64 + 1;
                        if let Step::Yield(record) = step {
                            return Ok(Some(record));
                        }
                    }
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

    /// Open the next segment to read, at the place to read it from. False: there is no log yet.
    fn open(&mut self) -> Result<bool, AuditError> {
        let opened = match (self.start, self.last.clone()) {
            (Start::Find { hint }, Some(last)) => self.locate(&last, hint)?,
            _ => self
                .segment_after(self.passed)?
                .map(|(file, sealed)| Located {
                    file,
                    sealed,
                    offset: 0,
                    last_at: None,
                }),
        };
        let Some(located) = opened else {
            return Ok(false);
        };
        let meta = located
            .file
            .metadata()
            .map_err(|e| self.error_in(located.sealed, e))?;
        let file = Arc::new(located.file);
        if let Some(at) = located.last_at {
            self.last_at = Some((Arc::clone(&file), at));
        }
        self.identity = (meta.dev(), meta.ino());
        self.sealed = located.sealed;
        self.offset = located.offset;
        self.buffer.clear();
        self.file = Some(file);
        self.start = Start::Next;
        Ok(true)
    }

    /// Where the log holds `last` (seq and hash): the file, and the offset right after the
    /// record (or of the record that joins it, when `last` is no longer there but what follows
    /// it is: a log copy-truncated). Looked for first at `hint`, then by seq in the segment
    /// that holds it (and the one after). A log that holds neither is read again from its
    /// first record, and said so. None: there is nothing to decide by yet (no log, or an open
    /// segment with no complete line: a copy-truncate's, until the next record is written).
    fn locate(
        &mut self,
        last: &(u64, String),
        hint: Option<u64>,
    ) -> Result<Option<Located>, AuditError> {
        let (seq, hash) = last;
        let shape = self.shape()?;
        if self.waiting_on.as_ref() == Some(&shape) {
            // Looked for in this very log already, and waiting was all there was to do: a
            // scan of every poll would cost a segment's read each time (found by review).
            return Ok(None);
        }
        let Some((file, sealed)) = self.segment_holding(*seq)? else {
            return Ok(None);
        };
        self.placed = true;
        if let Some(offset) = hint {
            if let Some(end) = holds_at(&file, offset, *seq, hash) {
                return Ok(Some(Located {
                    file,
                    sealed,
                    offset: end,
                    last_at: Some(offset),
                }));
            }
        }
        self.scans += 1;
        if let Some((offset, last_at)) = self.find_in(&file, sealed, *seq, hash)? {
            return Ok(Some(Located {
                file,
                sealed,
                offset,
                last_at,
            }));
        }
        // The record after it may start the next segment (`seq` ended the one before).
        if let Some((next, next_sealed)) = self.segment_holding(seq.saturating_add(1))? {
            if next_sealed != sealed || !same_file(&next, &file) {
                self.scans += 1;
                if let Some((offset, last_at)) = self.find_in(&next, next_sealed, *seq, hash)? {
                    return Ok(Some(Located {
                        file: next,
                        sealed: next_sealed,
                        offset,
                        last_at,
                    }));
                }
            }
        }
        // An open segment with no complete line (just emptied by a copy-truncate, or not
        // written again yet) says nothing: the record that joins `last` may be the next one
        // written there. Whatever sealed segments there are, wait for it (found by review:
        // the whole log was exported again from its first record).
        if !self.open_has_a_line()? {
            self.waiting_on = Some(shape);
            return Ok(None);
        }
        // Not in the log, nor a record following it: the log is another one now. Everything
        // it holds is exported, from its start; what that means is said.
        self.passed = 0;
        let Some((first_file, first_sealed)) = self.segment_after(0)? else {
            return Ok(None);
        };
        let first = first_seq_of(&first_file).map_err(|e| self.error_in(first_sealed, e))?;
        if first.is_none()
            && read_line_at(&first_file, 0)
                .map_err(|e| self.error_in(first_sealed, e))?
                .is_none()
        {
            self.waiting_on = Some(shape);
            return Ok(None);
        }
        // A first line that is not a record (a restored file with a header) does not stop the
        // export: it is read from there, and the line said not to be a record.
        self.notes.push(self.not_held(*seq, first));
        self.last = None;
        self.last_at = None;
        Ok(Some(Located {
            file: first_file,
            sealed: first_sealed,
            offset: 0,
            last_at: None,
        }))
    }

    /// The open segment and the sealed ones, as a look for a record sees them.
    fn shape(&self) -> Result<Shape, AuditError> {
        let open = match std::fs::metadata(&self.path) {
            Ok(meta) => Some((meta.dev(), meta.ino(), meta.len())),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(e) => return Err(self.read_error(e)),
        };
        let sealed = sealed_segments(&self.state_dir)?
            .into_iter()
            .map(|s| {
                let len = std::fs::metadata(&s.path).map_or(0, |m| m.len());
                (s.first_seq, len)
            })
            .collect();
        Ok(Shape { open, sealed })
    }

    /// Whether the open segment holds a complete line (none when it is missing).
    fn open_has_a_line(&self) -> Result<bool, AuditError> {
        let file = match File::open(&self.path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(false),
            Err(e) => return Err(self.read_error(e)),
        };
        Ok(read_line_at(&file, 0)
            .map_err(|e| self.read_error(e))?
            .is_some())
    }

    /// What a person is told when the log does not hold record `seq`, the last exported, and
    /// starts at `first` now (None: its first line is not a record).
    fn not_held(&self, seq: u64, first: Option<u64>) -> String {
        let path = self.path.display();
        match first {
            Some(first) if first > seq.saturating_add(1) => format!(
                "{path}: records {} to {} are not in the log (removed or moved away before they were exported): exporting from record {first}",
                seq.saturating_add(1),
                first - 1
            ),
            Some(first) => format!(
                "{path}: the log does not hold record {seq}, the last exported, nor the record after it: it was replaced, restored from a copy, or cut; exporting it again from its first record (record {first}): records sent before may come again, and the exported copy shows a new chain starting there ('airlock log verify --from' stops at it and says so)"
            ),
            None => format!(
                "{path}: the log does not hold record {seq}, the last exported, nor the record after it, and its first line is not a record: it was replaced or restored from a copy; exporting it again from its start: records sent before may come again ('airlock log verify' says what the log holds)"
            ),
        }
    }

    /// In `file`, where to go on after record `seq` with `hash`: right after its line (and
    /// where that line is), or at the record `seq + 1` whose `prev` is `hash`; None when it holds
    /// neither. The whole file is read: a record with a false seq before it ends nothing.
    fn find_in(
        &self,
        file: &File,
        sealed: Option<u64>,
        seq: u64,
        hash: &str,
    ) -> Result<Option<(u64, Option<u64>)>, AuditError> {
        #[derive(Deserialize)]
        struct Link {
            seq: u64,
            hash: String,
            prev: String,
        }
        let mut reader = BufReader::with_capacity(1 << 20, file);
        let mut line = Vec::new();
        let mut offset = 0u64;
        loop {
            line.clear();
            let n = reader
                .read_until(b'\n', &mut line)
                .map_err(|e| self.error_in(sealed, e))?;
            if n == 0 || !line.ends_with(b"\n") {
                return Ok(None);
            }
            if let Ok(link) = serde_json::from_slice::<Link>(&line) {
                if link.seq == seq && link.hash == hash {
                    return Ok(Some((offset + n as u64, Some(offset))));
                }
                if link.seq == seq.saturating_add(1) && link.prev == hash {
                    return Ok(Some((offset, None)));
                }
            }
            offset += n as u64;
        }
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
                return Err(self.error_in(self.sealed, e));
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
                "{} was cut shorter (to {} bytes) while it was being exported: looking for the last record exported in it again",
                self.path.display(),
                now.len()
            ));
            // Not where it was: found again by seq (a copy-truncated log starts after it).
            self.start = Start::Find { hint: None };
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
                if let Some(first) =
                    first_seq_of(file).map_err(|e| self.error_in(self.sealed, e))?
                {
                    self.passed = first;
                }
            }
        }
        self.file = None;
        Ok(true)
    }

    /// What to do with the line at `offset`: yield the record parsed from it when it joins the
    /// last one yielded. When it does not, the last one is read again where it was: still
    /// there, the line is the log's own, and the record is yielded as it is (a gap or a false
    /// link said in a note, for verify to judge); not there (the file was cut and written again
    /// under the tail), the log is looked for it, once. A record is never skipped: one with a
    /// false seq ahead of the others (found by review: written into the log, it had every later
    /// record skipped as "out of order") is exported, and so is each record after it.
    fn take(&mut self, parsed: Option<Tailed>, offset: u64, blank: bool) -> Step {
        let path = self.path.display();
        let Some(record) = parsed else {
            if blank {
                return Step::Skip;
            }
            if self.last.is_some() && !self.placed && !self.last_still_there() {
                // Not a record where one was expected: the file may have been cut and
                // written again past this offset (a copy-truncate).
                return Step::Relocate;
            }
            self.notes.push(format!(
                "{path}: the line at byte {offset} is not an audit record: not exported ('airlock log verify' says more)"
            ));
            return Step::Skip;
        };
        let Some((last_seq, last_hash)) = &self.last else {
            return self.yielded(record);
        };
        if record.seq == last_seq.saturating_add(1) && record.prev == *last_hash {
            return self.yielded(record);
        }
        if !self.placed && !self.last_still_there() {
            return Step::Relocate;
        }
        let (last_seq, seq) = (*last_seq, record.seq);
        self.notes.push(if seq <= last_seq {
            format!(
                "{path}: record {seq} comes after record {last_seq} in the log (the log was altered, or a record with a false seq was written into it: 'airlock log verify' says more): exported as it is"
            )
        } else if seq > last_seq.saturating_add(1) {
            format!(
                "{path}: records {} to {} are not in the log before record {seq} (removed or moved away before they were exported, or record {seq} has a false seq: 'airlock log verify' says more): exported as it is",
                last_seq.saturating_add(1),
                seq - 1
            )
        } else {
            format!(
                "{path}: record {seq} does not follow record {last_seq} (its prev is not that record's hash: the log was altered or replaced): exported as it is, for verify to find"
            )
        });
        self.yielded(record)
    }

    /// Whether the last record yielded is still where it was read, in the file being read: then
    /// what follows it there is the log's own. One read of one line, never a scan of the file
    /// (found by review: a look from the file's start for every record that did not join made a
    /// hostile log cost time quadratic in its size).
    fn last_still_there(&self) -> bool {
        let (Some((at_file, at)), Some(file), Some((seq, hash))) =
            (&self.last_at, &self.file, &self.last)
        else {
            return false;
        };
        Arc::ptr_eq(at_file, file) && holds_at(file, *at, *seq, hash).is_some()
    }

    fn yielded(&mut self, record: Tailed) -> Step {
        self.last = Some((record.seq, record.hash.clone()));
        self.last_at = self
            .file
            .as_ref()
            .map(|file| (Arc::clone(file), record.offset));
        self.placed = false;
        self.waiting_on = None;
        Step::Yield(record)
    }
}

/// Whether `file` holds record `seq` with `hash` in the line at `offset`; where the line after it
/// starts when it does. An offset past the file's end (a cursor edited by hand), or one that
/// cannot be read, holds nothing.
fn holds_at(file: &File, offset: u64, seq: u64, hash: &str) -> Option<u64> {
    let len = file.metadata().ok()?.len();
    if offset >= len {
        return None;
    }
    let line = read_line_at(file, offset).ok()??;
    let found = Tailed::parse(&line, offset)?;
    (found.seq == seq && found.hash == hash).then(|| offset + line.len() as u64 + 1)
}

/// Whether two open files are one.
fn same_file(a: &File, b: &File) -> bool {
    match (a.metadata(), b.metadata()) {
        (Ok(a), Ok(b)) => (a.dev(), a.ino()) == (b.dev(), b.ino()),
        _ => false,
    }
}

#[cfg(test)]
#[path = "tail_tests.rs"]
mod tests;
