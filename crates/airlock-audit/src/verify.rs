//! Walking the chain: `airlock log verify` and what it can find.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::Path;

use nix::fcntl::{Flock, FlockArg};
use serde::Serialize;
use serde_json::{Map, Value};

use crate::{record_hash, AuditError, AuditLog, GENESIS};

impl AuditLog {
    /// Walk the chain; the first problem found, if any.
    pub fn verify(&self) -> Result<Verdict, AuditError> {
        let read_err = |source| AuditError::Read {
            path: self.path(),
            source,
        };
        let file = match File::open(self.path()) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => {
                return Ok(match self.read_head() {
                    Some(head) if head.seq > 0 => {
                        Verdict::broken(0, Problem::Removed { head: head.seq })
                    }
                    _ => Verdict {
                        records: 0,
                        problem: None,
                        head: None,
                    },
                })
            }
            Err(e) => return Err(read_err(e)),
        };
        // A writer mid-append would look like a torn line: wait for it.
        let file = Flock::lock(file, FlockArg::LockShared).map_err(|(_, e)| read_err(e.into()))?;
        let mut reader = BufReader::new(&*file);
        let mut expected_seq = 1u64;
        let mut prev = GENESIS.to_string();
        let mut line = Vec::new();
        let mut count = 0u64;
        let mut line_no = 0u64;
        loop {
            line.clear();
            let n = reader.read_until(b'\n', &mut line).map_err(read_err)?;
            if n == 0 {
                break;
            }
            line_no += 1;
            if !line.ends_with(b"\n") {
                return Ok(Verdict::broken(
                    count,
                    Problem::TornLastLine { line: line_no },
                ));
            }
            let record: Map<String, Value> = match serde_json::from_slice(&line) {
                Ok(Value::Object(map)) => map,
                _ => {
                    return Ok(Verdict::broken(
                        count,
                        Problem::Unreadable { line: line_no },
                    ))
                }
            };
            let seq = record.get("seq").and_then(Value::as_u64).unwrap_or(0);
            let hash = record.get("hash").and_then(Value::as_str).unwrap_or("");
            if record_hash(&record) != hash {
                return Ok(Verdict::broken(
                    count,
                    Problem::Altered { line: line_no, seq },
                ));
            }
            if seq != expected_seq {
                let problem = if seq > expected_seq {
                    Problem::Missing {
                        line: line_no,
                        expected: expected_seq,
                        found: seq,
                    }
                } else {
                    Problem::Reordered {
                        line: line_no,
                        expected: expected_seq,
                        found: seq,
                    }
                };
                return Ok(Verdict::broken(count, problem));
            }
            if record.get("prev").and_then(Value::as_str) != Some(prev.as_str()) {
                return Ok(Verdict::broken(
                    count,
                    Problem::ChainBroken { line: line_no, seq },
                ));
            }
            prev = hash.to_string();
            expected_seq += 1;
            count += 1;
        }
        if let Some(head) = &self.read_head() {
            if head.seq > count {
                return Ok(Verdict::broken(
                    count,
                    Problem::Truncated {
                        last: count,
                        head: head.seq,
                    },
                ));
            }
        }
        Ok(Verdict {
            records: count,
            problem: None,
            head: Some(prev),
        })
    }
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
    // Records sent again from further back than `recent` reaches (a whole log resent): taken as
    // copies only once their own chain, from record 1, joins a record `recent` holds, which the
    // chain then proves identical all the way back.
    let mut replay: Option<Replay> = None;
    let mut lines_read = 0;
    for (index, line) in input.split(b'\n').enumerate() {
        let line = line.map_err(|source| AuditError::Read {
            path: name.to_path_buf(),
            source,
        })?;
        let line_no = index as u64 + 1;
        lines_read = line_no;
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
            let seen = recent
                .front()
                .and_then(|(front, _)| seq.checked_sub(*front))
                .and_then(|back| recent.get(back as usize));
            let outcome = match (seen, replay.take()) {
                (Some((_, earlier)), pending) => {
                    let joins = pending.as_ref().is_none_or(|r| r.continued_by(seq, &prev));
                    if *earlier == hash && joins {
                        verdict.duplicates += 1 + pending.map_or(0, |r| r.records);
                        Ok(())
                    } else {
                        Err(Problem::Conflicting { line: line_no, seq })
                    }
                }
                (None, Some(pending)) if pending.continued_by(seq, &prev) => {
                    replay = Some(pending.then(seq, hash));
                    Ok(())
                }
                (None, None) if seq == 1 && prev == GENESIS => {
                    replay = Some(Replay::starting(hash));
                    Ok(())
                }
                (None, _) => Err(Problem::Reordered {
                    line: line_no,
                    expected,
                    found: seq,
                }),
            };
            if let Err(problem) = outcome {
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
        // The stream ends inside a resend that never came back to what was seen before.
        verdict.problem = Some(Problem::Reordered {
            line: lines_read,
            expected: verdict
                .last
                .as_ref()
                .map_or(1, |(last, _)| last.saturating_add(1)),
            found: pending.next_seq.saturating_sub(1),
        });
    }
    Ok(verdict)
}

/// Records resent from the log's start, not yet joined to those seen before.
struct Replay {
    next_seq: u64,
    last_hash: String,
    records: u64,
}

impl Replay {
    fn starting(hash: String) -> Replay {
        Replay {
            next_seq: 2,
            last_hash: hash,
            records: 1,
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
    /// The last record's hash, when the log is intact: note it elsewhere to anchor the chain.
    pub head: Option<String>,
}

impl Verdict {
    fn broken(records: u64, problem: Problem) -> Verdict {
        Verdict {
            records,
            problem: Some(problem),
            head: None,
        }
    }
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
    /// The last line was cut short (a crash while appending; the next append recovers it).
    TornLastLine { line: u64 },
    /// Records after `last` were removed: the head file saw `head`.
    Truncated { last: u64, head: u64 },
    /// The log file is gone, though `head` records were written to it.
    Removed { head: u64 },
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
                "the log file is missing but {head} records were written to it: it was removed (to rotate the log, move audit.head with it)"
            ),
        }
    }
}
