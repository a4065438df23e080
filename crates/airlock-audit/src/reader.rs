//! Reading the log: records in order, filtered, optionally following new ones as they come.

use std::collections::VecDeque;
use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

use crate::segments::{first_seq_of, is_at, sealed_segments, Sealed};
use crate::AuditError;

/// Which records to keep. Empty fields keep everything.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub session: Option<String>,
    pub profile: Option<String>,
    /// RFC 3339 UTC timestamp (as records carry): only records at or after it.
    pub since: Option<String>,
    /// Action names or prefixes (`run` keeps `run.intent` and `run.result`).
    pub actions: Vec<String>,
    /// Only refusals and denials.
    pub denied: bool,
    /// Only records of requests made with this API token (its id: `by.token`).
    pub token: Option<String>,
}

impl Filter {
    /// A cheap test on the raw line before it is parsed: most lines of a big log are skipped here.
    fn may_match(&self, line: &[u8]) -> bool {
        let contains = |needle: &str| {
            line.windows(needle.len().max(1))
                .any(|w| w == needle.as_bytes())
        };
        self.session.as_deref().is_none_or(contains)
            && self.profile.as_deref().is_none_or(contains)
            && (!self.denied || contains("\"denied\":true"))
            && self.token.as_deref().is_none_or(contains)
    }

    pub fn matches(&self, record: &Map<String, Value>) -> bool {
        let text = |key: &str| record.get(key).and_then(Value::as_str);
        if let Some(session) = &self.session {
            if text("session") != Some(session.as_str()) {
                return false;
            }
        }
        if let Some(profile) = &self.profile {
            if text("profile") != Some(profile.as_str()) {
                return false;
            }
        }
        if let Some(since) = &self.since {
            if text("time").is_none_or(|t| t < since.as_str()) {
                return false;
            }
        }
        if !self.actions.is_empty() {
            let action = text("action").unwrap_or("");
            let hit = self.actions.iter().any(|a| action_matches(action, a));
            if !hit {
                return false;
            }
        }
        if self.denied && record.get("denied") != Some(&Value::Bool(true)) {
            return false;
        }
        if let Some(token) = &self.token {
            let by = record.get("by").and_then(|by| by.get("token"));
            if by.and_then(Value::as_str) != Some(token.as_str()) {
                return false;
            }
        }
        true
    }
}

/// Whether `action` is `wanted` or one of its family (`run` holds `run.intent`).
pub(crate) fn action_matches(action: &str, wanted: &str) -> bool {
    action == wanted || (action.starts_with(wanted) && action[wanted.len()..].starts_with('.'))
}

/// Records of the log in order: the sealed segments', oldest first, then the open segment's. A
/// sealed segment whose index says it holds nothing the filter keeps is not opened. A torn last
/// line (a crash, or a record being written) is not a record.
pub struct Records {
    /// The state directory whose log this is; None for a file someone handed over.
    state_dir: Option<PathBuf>,
    /// Sealed segments not read yet.
    queue: VecDeque<Sealed>,
    /// The first seq of the last sealed segment passed (read, or left unopened by its index).
    passed: u64,
    /// The open segment, opened, waiting for segments sealed before it to be read.
    open_waiting: Option<Reading>,
    /// The file being read.
    current: Option<Reading>,
    line: Vec<u8>,
    /// A file someone handed over ([`Records::exported`]): every line must be a record.
    strict: bool,
    /// Files opened so far (a test counts them).
    opened: u64,
}

/// One file being read.
struct Reading {
    path: PathBuf,
    reader: BufReader<File>,
    /// The number of the line read last.
    number: u64,
    /// The open segment, which may be written to, and sealed.
    open_segment: bool,
    /// The open segment was found sealed (or moved away): read to its end, then go on.
    sealed_since: bool,
}

impl Reading {
    fn open(path: &Path, open_segment: bool) -> Result<Option<Reading>, AuditError> {
        let file = match File::open(path) {
            Ok(file) => file,
            // Removed by retention after it was listed, or no record written yet.
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => {
                return Err(AuditError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        Ok(Some(Reading {
            path: path.to_path_buf(),
            reader: BufReader::with_capacity(1 << 20, file),
            number: 0,
            open_segment,
            sealed_since: false,
        }))
    }

    fn read_error(&self, source: io::Error) -> AuditError {
        AuditError::Read {
            path: self.path.clone(),
            source,
        }
    }
}

/// What the end of a file means.
enum AtEnd {
    /// No more records for now.
    Wait,
    /// Go on with the next file.
    Next,
    /// The open segment was sealed meanwhile: read what reached it before, then go on.
    Drain,
}

impl Records {
    /// The records of the log of `state_dir`.
    pub(crate) fn of_log(state_dir: &Path) -> Result<Records, AuditError> {
        Ok(Records {
            state_dir: Some(state_dir.to_path_buf()),
            queue: sealed_segments(state_dir)?.into(),
            passed: 0,
            open_waiting: None,
            current: None,
            line: Vec::new(),
            strict: false,
            opened: 0,
        })
    }

    /// The records of a copy of a log (what `airlock log --json` printed, or an `audit.log`
    /// itself), read as strictly as a person's input is: a line that is not a record, or a
    /// last line without its newline, is an error naming the file and the line, not skipped.
    pub fn exported(path: &Path) -> Result<Records, AuditError> {
        let file = File::open(path).map_err(|source| AuditError::Read {
            path: path.to_path_buf(),
            source,
        })?;
        Ok(Records {
            state_dir: None,
            queue: VecDeque::new(),
            passed: 0,
            open_waiting: None,
            current: Some(Reading {
                path: path.to_path_buf(),
                reader: BufReader::with_capacity(1 << 20, file),
                number: 0,
                open_segment: false,
                sealed_since: false,
            }),
            line: Vec::new(),
            strict: true,
            opened: 1,
        })
    }

    /// How many files were opened so far.
    pub fn files_opened(&self) -> u64 {
        self.opened
    }

    fn malformed(&self, why: &str) -> AuditError {
        let (path, line) = self
            .current
            .as_ref()
            .map_or((PathBuf::new(), 0), |r| (r.path.clone(), r.number));
        AuditError::Malformed {
            path,
            line,
            why: why.to_string(),
        }
    }

    /// Open the next file that may hold a record `filter` keeps: a sealed segment whose index
    /// does not rule it out, else the open segment. False: nothing to read (yet).
    fn open_next(&mut self, filter: &Filter) -> Result<bool, AuditError> {
        let Some(state_dir) = self.state_dir.clone() else {
            return Ok(false);
        };
        loop {
            if let Some(sealed) = self.queue.pop_front() {
                self.passed = sealed.first_seq;
                if sealed.index().is_some_and(|index| !index.may_hold(filter)) {
                    continue;
                }
                if let Some(reading) = Reading::open(&sealed.path, false)? {
                    self.opened += 1;
                    self.current = Some(reading);
                    return Ok(true);
                }
                continue;
            }
            if let Some(open) = self.open_waiting.take() {
                self.current = Some(open);
                return Ok(true);
            }
            let Some(open) = Reading::open(&state_dir.join(crate::LOG_FILE), true)? else {
                return Ok(false);
            };
            self.opened += 1;
            // Segments sealed since the list was made come before the open segment (not the
            // one just opened, if it was sealed too: it is read through the file opened).
            let first = first_seq_of(open.reader.get_ref())
                .map_err(|e| open.read_error(e))?
                .unwrap_or(u64::MAX);
            let passed = self.passed;
            self.queue = sealed_segments(&state_dir)?
                .into_iter()
                .filter(|s| s.first_seq > passed && s.first_seq < first)
                .collect();
            if self.queue.is_empty() {
                self.current = Some(open);
                return Ok(true);
            }
            self.open_waiting = Some(open);
        }
    }

    /// At the end of the file being read: what next.
    fn at_end(&mut self) -> Result<AtEnd, AuditError> {
        let (Some(state_dir), Some(reading)) = (&self.state_dir, &mut self.current) else {
            return Ok(AtEnd::Wait);
        };
        if !reading.open_segment {
            return Ok(AtEnd::Next);
        }
        if reading.sealed_since {
            // Read to its end since it was sealed: the segments sealed after it, then the new
            // open segment.
            let first =
                first_seq_of(reading.reader.get_ref()).map_err(|e| reading.read_error(e))?;
            let after = first.unwrap_or(self.passed);
            self.passed = after;
            self.queue = sealed_segments(state_dir)?
                .into_iter()
                .filter(|s| s.first_seq > after)
                .collect();
            return Ok(AtEnd::Next);
        }
        let open_path = state_dir.join(crate::LOG_FILE);
        if is_at(reading.reader.get_ref(), &open_path).map_err(|e| reading.read_error(e))? {
            return Ok(AtEnd::Wait);
        }
        reading.sealed_since = true;
        Ok(AtEnd::Drain)
    }

    /// The next record that passes `filter`; None at the end of the log (for now: a follower
    /// waits and asks again).
    pub fn next_matching(
        &mut self,
        filter: &Filter,
    ) -> Result<Option<Map<String, Value>>, AuditError> {
        loop {
            if self.current.is_none() && !self.open_next(filter)? {
                return Ok(None);
            }
            let Some(reading) = &mut self.current else {
                return Ok(None);
            };
            self.line.clear();
            let n = reading
                .reader
                .read_until(b'\n', &mut self.line)
                .map_err(|e| reading.read_error(e))?;
            if n == 0 {
                match self.at_end()? {
                    AtEnd::Wait => return Ok(None),
                    AtEnd::Drain => continue,
                    AtEnd::Next => {
                        self.current = None;
                        if self.state_dir.is_none() {
                            return Ok(None);
                        }
                        continue;
                    }
                }
            }
            reading.number += 1;
            if self.strict {
                if !self.line.ends_with(b"\n") {
                    return Err(
                        self.malformed("the last line has no newline: the file was cut off")
                    );
                }
                match serde_json::from_slice::<Value>(&self.line) {
                    Ok(Value::Object(record)) if filter.matches(&record) => {
                        return Ok(Some(record))
                    }
                    Ok(Value::Object(_)) => continue,
                    _ if self.line.trim_ascii().is_empty() => continue,
                    Ok(_) => return Err(self.malformed("not a JSON object")),
                    Err(e) => return Err(self.malformed(&e.to_string())),
                }
            }
            if !self.line.ends_with(b"\n") {
                // Being written, or torn: not a record (yet). Let a follower read it again.
                let back = self.line.len() as i64;
                let _ = io::Seek::seek_relative(&mut reading.reader, -back);
                reading.number -= 1;
                return Ok(None);
            }
            if !filter.may_match(&self.line) {
                continue;
            }
            if let Ok(Value::Object(record)) = serde_json::from_slice(&self.line) {
                if filter.matches(&record) {
                    return Ok(Some(record));
                }
            }
        }
    }

    /// Wait for more records (polling; for `--follow`).
    pub fn wait(&mut self) {
        std::thread::sleep(Duration::from_millis(200));
    }
}
