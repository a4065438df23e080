//! Walking the chain: `airlock log verify` and what it can find.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::index::{IndexBuilder, SegmentIndex};
use crate::retention::{Removed, RETENTION_ACTION};
use crate::segments::{first_seq_of, is_at, sealed_segments, Sealed};
use crate::{record_hash, AuditError, AuditLog, GENESIS};

impl AuditLog {
    /// Walk the chain over every segment, oldest first; the first problem found, if any. Sealed
    /// segments are read without the lock (nothing writes them); the open segment under a
    /// shared one (a writer mid-append would look like a torn line), taken only once the sealed
    /// ones are walked, so that appends wait for one segment's walk at most.
    ///
    /// A walk races the log's own changes: a roll sealing the open segment, retention removing
    /// the oldest. A problem found while the segments changed beneath the walk is walked again
    /// (a few times); only one found in a log that held still, or again and again, is reported.
    pub fn verify(&self) -> Result<Verdict, AuditError> {
        const WALKS: usize = 5;
        let mut verdict = self.verify_once()?;
        for _ in 1..WALKS {
            if verdict.problem.is_none() {
                break;
            }
            let before = self.shape()?;
            verdict = self.verify_once()?;
            if verdict.problem.is_none() || self.shape()? == before {
                break;
            }
        }
        Ok(verdict)
    }

    /// What a roll or retention changes: the sealed segments there, and which file is open.
    fn shape(&self) -> Result<(Vec<u64>, Option<u64>), AuditError> {
        use std::os::unix::fs::MetadataExt;
        let sealed = sealed_segments(self.state_dir())?
            .iter()
            .map(|segment| segment.first_seq)
            .collect();
        let open = std::fs::metadata(self.path()).ok().map(|meta| meta.ino());
        Ok((sealed, open))
    }

    fn verify_once(&self) -> Result<Verdict, AuditError> {
        let mut walk = Walk::default();
        let mut passed = 0;
        for segment in sealed_segments(self.state_dir())? {
            passed = segment.first_seq;
            if !walk.sealed(&segment)? {
                return Ok(walk.verdict());
            }
        }
        let Some(open) = self.lock_open_segment_shared()? else {
            // No open segment: sealed a moment ago, or never written (or removed: the head says).
            return Ok(walk.finish(self.read_head(), false));
        };
        // Segments sealed after the list was made, before the open segment locked.
        let first_open = first_seq_of(&open)
            .map_err(|source| self.read_error(source))?
            .unwrap_or(u64::MAX);
        for segment in sealed_segments(self.state_dir())? {
            if segment.first_seq > passed
                && segment.first_seq < first_open
                && !walk.sealed(&segment)?
            {
                return Ok(walk.verdict());
            }
        }
        if !walk.file(&self.path(), &open, None)? {
            return Ok(walk.verdict());
        }
        // The head as it was when the open segment was walked: read while appends still wait.
        let head = self.read_head();
        drop(open);
        Ok(walk.finish(head, true))
    }

    fn read_error(&self, source: io::Error) -> AuditError {
        AuditError::Read {
            path: self.path(),
            source,
        }
    }

    /// The open segment, locked shared (the file at the path, not one sealed meanwhile); None
    /// when there is none.
    fn lock_open_segment_shared(&self) -> Result<Option<Flock<File>>, AuditError> {
        // A roll renames the open segment away and its appender makes the next one at once:
        // a missing file is looked for again for a moment before it is taken as none.
        let mut absent_for = 0;
        loop {
            let file = match File::open(self.path()) {
                Ok(file) => file,
                Err(e) if e.kind() == io::ErrorKind::NotFound && absent_for < 100 => {
                    absent_for += 1;
                    std::thread::sleep(std::time::Duration::from_millis(1));
                    continue;
                }
                Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
                Err(e) => return Err(self.read_error(e)),
            };
            let file = Flock::lock(file, FlockArg::LockShared)
                .map_err(|(_, e)| self.read_error(e.into()))?;
            if is_at(&file, &self.path()).map_err(|e| self.read_error(e))? {
                return Ok(Some(file));
            }
        }
    }
}

/// The chain walked so far, across files.
#[derive(Default)]
struct Walk {
    /// The last intact record's seq and hash.
    last: Option<(u64, String)>,
    records: u64,
    segments: u64,
    first: Option<u64>,
    /// The log starts after record 1: its first seq and `prev`, until a retention record says
    /// those records were removed.
    unexplained_start: Option<(PathBuf, u64, String)>,
    retention: Option<RetentionNote>,
    problem: Option<(PathBuf, Problem)>,
}

impl Walk {
    /// Walk a sealed segment: its records, its name, its index. False at a problem.
    fn sealed(&mut self, segment: &Sealed) -> Result<bool, AuditError> {
        let file = match File::open(&segment.path) {
            Ok(file) => file,
            // Removed by retention since it was listed: its record says so, further on.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(true),
            Err(source) => {
                return Err(AuditError::Read {
                    path: segment.path.clone(),
                    source,
                })
            }
        };
        let mut index = IndexBuilder::default();
        if !self.file(&segment.path, &file, Some(&mut index))? {
            return Ok(false);
        }
        self.segments += 1;
        let full = index.finish_uncapped();
        let built = full.clone().map(SegmentIndex::capped);
        let problem = match (&built, segment.index()) {
            (None, _) => Some(Problem::EmptySegment),
            (Some(built), _) if built.first_seq != segment.first_seq => Some(Problem::Misnamed {
                named: segment.first_seq,
                found: built.first_seq,
            }),
            (Some(_), None) => Some(Problem::IndexMissing),
            // An index sealed before lists were capped lists every name: as good.
            (Some(_), Some(stored)) if full.as_ref() == Some(&stored) => None,
            (Some(built), Some(stored)) => {
                first_difference(built, &stored).map(|field| Problem::IndexMismatch { field })
            }
        };
        match problem {
            Some(problem) => {
                self.problem = Some((segment.path.clone(), problem));
                Ok(false)
            }
            None => Ok(true),
        }
    }

    /// Walk the records of one file. False at a problem. `index` (a sealed segment's) is built
    /// from its records as they are checked.
    fn file(
        &mut self,
        path: &Path,
        file: &File,
        mut index: Option<&mut IndexBuilder>,
    ) -> Result<bool, AuditError> {
        let sealed = index.is_some();
        let mut reader = BufReader::with_capacity(1 << 20, file);
        let mut line = Vec::new();
        let mut line_no = 0u64;
        loop {
            line.clear();
            let n = reader
                .read_until(b'\n', &mut line)
                .map_err(|source| AuditError::Read {
                    path: path.to_path_buf(),
                    source,
                })?;
            if n == 0 {
                return Ok(true);
            }
            line_no += 1;
            let problem = if !line.ends_with(b"\n") && !sealed {
                Err(Problem::TornLastLine { line: line_no })
            } else {
                self.record(&line, line_no)
            };
            match problem {
                Ok(record) => {
                    if let Some((at, _, _)) = &mut self.unexplained_start {
                        if at.as_os_str().is_empty() {
                            *at = path.to_path_buf();
                        }
                    }
                    if let Some(index) = index.as_deref_mut() {
                        index.add(line.len(), Some(&record));
                    }
                }
                Err(problem) => {
                    self.problem = Some((path.to_path_buf(), problem));
                    return Ok(false);
                }
            }
        }
    }

    /// Check one line as the next record of the chain.
    fn record(&mut self, line: &[u8], line_no: u64) -> Result<Map<String, Value>, Problem> {
        let record: Map<String, Value> = match serde_json::from_slice(line) {
            Ok(Value::Object(map)) if line.ends_with(b"\n") => map,
            _ => return Err(Problem::Unreadable { line: line_no }),
        };
        let seq = record.get("seq").and_then(Value::as_u64).unwrap_or(0);
        let hash = record.get("hash").and_then(Value::as_str).unwrap_or("");
        let prev = record.get("prev").and_then(Value::as_str).unwrap_or("");
        if record_hash(&record) != hash {
            return Err(Problem::Altered { line: line_no, seq });
        }
        match &self.last {
            Some((last, last_hash)) => {
                let expected = last + 1;
                if seq > expected {
                    return Err(Problem::Missing {
                        line: line_no,
                        expected,
                        found: seq,
                    });
                }
                if seq < expected {
                    return Err(Problem::Reordered {
                        line: line_no,
                        expected,
                        found: seq,
                    });
                }
                if prev != last_hash {
                    return Err(Problem::ChainBroken { line: line_no, seq });
                }
            }
            None if seq == 1 => {
                if prev != GENESIS {
                    return Err(Problem::ChainBroken { line: line_no, seq });
                }
            }
            // The log starts later: retention (a record further on says so), or not.
            None => self.unexplained_start = Some((PathBuf::new(), seq, prev.to_string())),
        }
        if self.last.is_none() {
            self.first = Some(seq);
        }
        if record.get("action").and_then(Value::as_str) == Some(RETENTION_ACTION) {
            self.note_retention(&record, seq);
        }
        self.last = Some((seq, hash.to_string()));
        self.records += 1;
        Ok(record)
    }

    /// A retention record: does it account for where the log starts?
    fn note_retention(&mut self, record: &Map<String, Value>, seq: u64) {
        let Some((_, first, prev)) = &self.unexplained_start else {
            return;
        };
        let removed: Vec<Removed> = record
            .get("segments")
            .and_then(|s| serde_json::from_value(s.clone()).ok())
            .unwrap_or_default();
        let through = record.get("through").and_then(Value::as_u64);
        let through_hash = record.get("through_hash").and_then(Value::as_str);
        let before = first - 1;
        let accounts = removed
            .iter()
            .any(|r| r.last == before && r.last_hash == *prev)
            || (through == Some(before) && through_hash == Some(prev.as_str()));
        if accounts {
            self.retention = Some(RetentionNote {
                through: before,
                time: record
                    .get("time")
                    .and_then(Value::as_str)
                    .unwrap_or_default()
                    .to_string(),
                record: seq,
            });
            self.unexplained_start = None;
        }
    }

    /// The walk is over: a start no retention record accounts for, records cut off the end.
    /// `open_segment`: whether there is an open segment (a log removed whole is said so).
    fn finish(mut self, head: Option<crate::Head>, open_segment: bool) -> Verdict {
        if self.problem.is_some() {
            return self.verdict();
        }
        if let Some((path, first, _)) = self.unexplained_start.take() {
            self.problem = Some((path, Problem::StartRemoved { first }));
            return self.verdict();
        }
        let last = self.last.as_ref().map_or(0, |(seq, _)| *seq);
        if let Some(head) = head {
            if head.seq > last {
                let problem = if self.last.is_none() && !open_segment {
                    Problem::Removed { head: head.seq }
                } else {
                    Problem::Truncated {
                        last,
                        head: head.seq,
                    }
                };
                self.problem = Some((PathBuf::new(), problem));
            }
        }
        self.verdict()
    }

    fn verdict(self) -> Verdict {
        let intact = self.problem.is_none();
        let (at, problem) = match self.problem {
            Some((at, problem)) => (
                Some(at).filter(|p| !p.as_os_str().is_empty()),
                Some(problem),
            ),
            None => (None, None),
        };
        Verdict {
            records: self.records,
            head: self.last.map(|(_, hash)| hash).filter(|_| intact),
            problem,
            at,
            first: self.first,
            segments: self.segments,
            retention: self.retention,
        }
    }
}

/// The first field in which an index rebuilt from its segment differs from the one stored.
fn first_difference(built: &SegmentIndex, stored: &SegmentIndex) -> Option<String> {
    let as_map = |index: &SegmentIndex| match serde_json::to_value(index) {
        Ok(Value::Object(map)) => map,
        _ => Map::new(),
    };
    let (built, stored) = (as_map(built), as_map(stored));
    built
        .iter()
        .find(|(key, value)| stored.get(*key) != Some(value))
        .map(|(key, _)| key.clone())
}

/// How many records back a repeated one is still recognised as a copy of the one sent before
/// (an exporter resends at most one batch, far fewer).
const DUPLICATE_WINDOW: usize = 65_536;

/// What [`verify_exported`] found in a stream of exported records.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamVerdict {
    /// Distinct records checked and found intact (before the problem, if any).
    pub records: u64,
    /// The first record's seq: a stream may start after the log's start (its `prev` is then
    /// taken on trust: nothing before it is there to check it against).
    pub first: Option<u64>,
    /// The last intact record's seq and hash.
    pub last: Option<(u64, String)>,
    /// Records that came again, identical (an at-least-once export resends after a failure).
    pub duplicates: u64,
    /// Lines that are not audit records (other output interleaved, blank lines).
    pub skipped: u64,
    pub problem: Option<Problem>,
}

/// Walk the chain of an exported stream of records (`airlock log verify --from FILE`): JSON
/// lines as airlock's export wrote them (stdout, or a collector's copy of the stored lines),
/// possibly interleaved with other lines, which are counted and skipped: a record removed, or
/// altered so that it no longer reads as one, still breaks the chain of `seq` and `prev`. Records
/// sent again identical are counted as duplicates; a different record under a seq already seen
/// is a problem.
pub fn verify_exported(input: impl BufRead, name: &Path) -> Result<StreamVerdict, AuditError> {
    verify_stream(input, name, DUPLICATE_WINDOW)
}

/// [`verify_exported`] remembering the hashes of the last `window` records.
pub(crate) fn verify_stream(
    input: impl BufRead,
    name: &Path,
    window: usize,
) -> Result<StreamVerdict, AuditError> {
    let mut verdict = StreamVerdict {
        records: 0,
        first: None,
        last: None,
        duplicates: 0,
        skipped: 0,
        problem: None,
    };
    // The hashes of the last records, by seq (contiguous: only the next record is pushed).
    let mut recent: VecDeque<(u64, String)> = VecDeque::new();
    // Records sent again from further back than `recent` reaches (a whole log resent, from
    // record 1 or, after retention, from the log's first record): taken as copies only once
    // their own chain joins a record `recent` holds, which the chain then proves identical all
    // the way back.
    let mut replay: Option<Replay> = None;
    for (index, line) in input.split(b'\n').enumerate() {
        let line = line.map_err(|source| AuditError::Read {
            path: name.to_path_buf(),
            source,
        })?;
        let line_no = index as u64 + 1;
        let Some((seq, hash, prev, record)) = exported_record(&line) else {
            verdict.skipped += u64::from(!line.trim_ascii().is_empty());
            continue;
        };
        // The stored form is one: compact, keys sorted, each once. A line that reads as the
        // same record but is not that form (a second `action` key a reader might take first)
        // was not written by airlock.
        let stored_form = serde_json::to_vec(&Value::Object(record.clone())).ok();
        if record_hash(&record) != hash || stored_form.as_deref() != Some(line.as_slice()) {
            verdict.problem = Some(Problem::Altered { line: line_no, seq });
            return Ok(verdict);
        }
        let expected = match &verdict.last {
            Some((last, _)) => last.saturating_add(1),
            None => seq,
        };
        if seq < expected {
            let resent = Resent {
                seq,
                hash,
                prev: &prev,
                line: line_no,
                expected,
            };
            if let Err(problem) = resent.take(&recent, &mut replay, &mut verdict.duplicates) {
                verdict.problem = Some(problem);
                return Ok(verdict);
            }
            continue;
        }
        if let Some(pending) = replay.take() {
            // A resend that never came back to records already seen: nothing proves it a copy.
            verdict.problem = Some(Problem::Reordered {
                line: line_no,
                expected: pending.next_seq,
                found: seq,
            });
            return Ok(verdict);
        }
        if seq > expected {
            verdict.problem = Some(Problem::Missing {
                line: line_no,
                expected,
                found: seq,
            });
            return Ok(verdict);
        }
        let follows = match &verdict.last {
            Some((_, last_hash)) => prev == *last_hash,
            None => seq > 1 || prev == GENESIS,
        };
        if !follows {
            verdict.problem = Some(Problem::ChainBroken { line: line_no, seq });
            return Ok(verdict);
        }
        verdict.first.get_or_insert(seq);
        verdict.records += 1;
        if recent.len() == window.max(1) {
            recent.pop_front();
        }
        recent.push_back((seq, hash.clone()));
        verdict.last = Some((seq, hash));
    }
    if let Some(pending) = replay {
        // The stream ends inside a resend that never came back to what was seen before:
        // nothing proves it a copy; from record 1, it is another chain (a log replaced).
        verdict.problem = Some(pending.unjoined(verdict.last.as_ref().map_or(0, |(l, _)| *l)));
    }
    Ok(verdict)
}

/// A record from before the last one taken: a copy of one seen, or a step of a resend.
struct Resent<'a> {
    seq: u64,
    hash: String,
    prev: &'a str,
    line: u64,
    expected: u64,
}

impl Resent<'_> {
    /// A copy of a record still in `recent` (counted in `duplicates`, with the resend it ends),
    /// a step of a resend from record 1 (kept in `replay` until its chain joins one seen), or a
    /// problem: another record under a seq seen, or one from further back than a resend.
    fn take(
        self,
        recent: &VecDeque<(u64, String)>,
        replay: &mut Option<Replay>,
        duplicates: &mut u64,
    ) -> Result<(), Problem> {
        let Resent {
            seq,
            hash,
            prev,
            line,
            expected,
        } = self;
        let seen = recent
            .front()
            .and_then(|(front, _)| seq.checked_sub(*front))
            .and_then(|back| recent.get(back as usize));
        let after = expected.saturating_sub(1);
        match (seen, replay.take()) {
            (Some((_, earlier)), pending) => {
                let joins = pending.as_ref().is_none_or(|r| r.continued_by(seq, prev));
                if *earlier == hash && joins {
                    *duplicates += 1 + pending.map_or(0, |r| r.records);
                    return Ok(());
                }
                // A chain from record 1 that is not the one seen: the log was replaced (an
                // exporter then sends the new one from its start), not a copy altered.
                match pending {
                    Some(pending) => Err(pending.unjoined(after)),
                    None if seq == 1 && prev == GENESIS => Err(Problem::NewChain { line, after }),
                    None => Err(Problem::Conflicting { line, seq }),
                }
            }
            (None, Some(pending)) if pending.continued_by(seq, prev) => {
                *replay = Some(pending.then(seq, hash));
                Ok(())
            }
            // Further back than `recent` reaches: the start of a resend, from record 1 or, after
            // retention, from the log's first record, whatever its seq (found by review: such
            // a resend from more than 65,536 records back was called reordered). Taken as
            // copies only once its chain joins a record seen; a record that does not go on
            // to do so is still reordered.
            (None, None) => {
                *replay = Some(Replay::starting(seq, hash, line, expected));
                Ok(())
            }
            (None, Some(_)) => Err(Problem::Reordered {
                line,
                expected,
                found: seq,
            }),
        }
    }
}

/// Records resent from further back than those remembered, not yet joined to those seen.
struct Replay {
    /// Its first record's seq (1 for a resend of the whole chain).
    first: u64,
    /// The seq the stream expected where it started.
    expected: u64,
    next_seq: u64,
    last_hash: String,
    records: u64,
    /// The line of its first record.
    line: u64,
}

impl Replay {
    fn starting(seq: u64, hash: String, line: u64, expected: u64) -> Replay {
        Replay {
            first: seq,
            expected,
            next_seq: seq.saturating_add(1),
            last_hash: hash,
            records: 1,
            line,
        }
    }

    /// What a resend that does not join the records seen (`after` the last) is: from record 1,
    /// another chain (a log replaced); from another record, records out of order.
    fn unjoined(&self, after: u64) -> Problem {
        if self.first == 1 {
            Problem::NewChain {
                line: self.line,
                after,
            }
        } else {
            Problem::Reordered {
                line: self.line,
                expected: self.expected,
                found: self.first,
            }
        }
    }

    fn continued_by(&self, seq: u64, prev: &str) -> bool {
        seq == self.next_seq && prev == self.last_hash
    }

    fn then(self, seq: u64, hash: String) -> Replay {
        Replay {
            next_seq: seq.saturating_add(1),
            last_hash: hash,
            records: self.records + 1,
            ..self
        }
    }
}

/// A line as an exported record: a JSON object with `seq`, `hash` and `prev`.
fn exported_record(line: &[u8]) -> Option<(u64, String, String, Map<String, Value>)> {
    let record: Map<String, Value> = serde_json::from_slice(line).ok()?;
    let seq = record.get("seq")?.as_u64()?;
    let hash = record.get("hash")?.as_str()?.to_string();
    let prev = record.get("prev")?.as_str()?.to_string();
    Some((seq, hash, prev, record))
}

/// What `verify` found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verdict {
    /// Records checked and found intact (before the problem, if any).
    pub records: u64,
    pub problem: Option<Problem>,
    /// The file the problem is in (a segment's `line` counts in it); None for a problem of the
    /// whole log (records cut off its end).
    pub at: Option<PathBuf>,
    /// The last record's hash, when the log is intact: note it elsewhere to anchor the chain.
    pub head: Option<String>,
    /// The first record's seq: 1, or later after retention.
    pub first: Option<u64>,
    /// Sealed segments walked.
    pub segments: u64,
    /// The retention record that accounts for a log starting after record 1.
    pub retention: Option<RetentionNote>,
}

/// Records removed by retention, as the chain says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct RetentionNote {
    /// Records 1 to `through` were removed…
    pub through: u64,
    /// …at this time…
    pub time: String,
    /// …as record `record` says.
    pub record: u64,
}

/// What `log verify` found first. As JSON (`log verify --json`): `{"kind": "altered", "line": …,
/// "seq": …}` and the like, the fields of the variant in snake case.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Problem {
    /// The record's content does not match its hash.
    Altered { line: u64, seq: u64 },
    /// The record's `prev` is not the previous record's hash.
    ChainBroken { line: u64, seq: u64 },
    /// Records are missing before this line.
    Missing {
        line: u64,
        expected: u64,
        found: u64,
    },
    /// A record is out of order.
    Reordered {
        line: u64,
        expected: u64,
        found: u64,
    },
    /// The line is not a JSON object.
    Unreadable { line: u64 },
    /// A record under a seq already seen, but not the same record (an exported stream: two
    /// logs mixed, or a copy altered).
    Conflicting { line: u64, seq: u64 },
    /// An exported stream: a chain starts again from record 1 at `line`, after record `after`,
    /// and does not join the records before it (its record 1 is not the one seen, or it never
    /// reaches one seen): the log was replaced, and its exporter sent the new one from its
    /// start. Each part verifies on its own.
    NewChain { line: u64, after: u64 },
    /// The last line was cut short (a crash while appending; the next append recovers it).
    TornLastLine { line: u64 },
    /// Records after `last` were removed: the head file saw `head`.
    Truncated { last: u64, head: u64 },
    /// The log file is gone, though `head` records were written to it.
    Removed { head: u64 },
    /// The log starts at record `first`, and no retention record says the ones before it were
    /// removed.
    StartRemoved { first: u64 },
    /// A sealed segment's name says it starts at `named`, its first record is `found`.
    Misnamed { named: u64, found: u64 },
    /// A sealed segment has no index (or one that does not read).
    IndexMissing,
    /// A sealed segment's index does not say what the segment holds: `field` differs.
    IndexMismatch { field: String },
    /// A sealed segment holds no record.
    EmptySegment,
}

impl std::fmt::Display for Problem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Problem::Altered { line, seq } => {
                write!(f, "line {line} (record {seq}) was altered: its content does not match its hash")
            }
            Problem::ChainBroken { line, seq } => write!(
                f,
                "line {line} (record {seq}) does not follow the record before it: that one was altered or replaced"
            ),
            Problem::Missing { line, expected, found } => write!(
                f,
                "line {line}: record {found} where record {expected} belongs: records were removed or reordered"
            ),
            Problem::Reordered { line, expected, found } => write!(
                f,
                "line {line}: record {found} where record {expected} belongs: records were reordered"
            ),
            Problem::Unreadable { line } => write!(f, "line {line} is not a JSON record"),
            Problem::Conflicting { line, seq } => write!(
                f,
                "line {line} holds a record {seq} that is not the record {seq} before it: two logs were mixed, or one copy was altered"
            ),
            Problem::NewChain { line, after } => write!(
                f,
                "line {line} starts a chain from record 1 again, after record {after}, that does not join the records before it: the log was replaced (or restored, or started again) and its exporter sent it from its start, as it says on its stderr; the lines before verify as one chain; verify the lines from {line} on as another ('tail -n +{line} FILE | airlock log verify --from -')"
            ),
            Problem::TornLastLine { line } => write!(
                f,
                "line {line}, the last, was cut short (a crash while appending); the next record written removes it and says so"
            ),
            Problem::Truncated { last, head } => write!(
                f,
                "the log ends at record {last} but record {head} was written: records were cut off the end"
            ),
            Problem::Removed { head } => write!(
                f,
                "the log file is missing but {head} records were written to it: it was removed"
            ),
            Problem::StartRemoved { first } => write!(
                f,
                "the log starts at record {first}, and no retention record says records 1 to {} were removed: sealed segments were removed by hand",
                first - 1
            ),
            Problem::Misnamed { named, found } => write!(
                f,
                "the segment is named for record {named} but starts at record {found}: segments were renamed or their content swapped"
            ),
            Problem::IndexMissing => write!(
                f,
                "the segment's index is missing or does not read: it was removed or altered"
            ),
            Problem::IndexMismatch { field } => write!(
                f,
                "the segment's index does not match its records ({field} differs): the index was altered"
            ),
            Problem::EmptySegment => write!(f, "the sealed segment holds no record"),
        }
    }
}
