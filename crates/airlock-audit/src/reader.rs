//! Reading the log: records in order, filtered, optionally following new ones as they come.

use std::fs::File;
use std::io::{self, BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Map, Value};

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
            let hit = self.actions.iter().any(|a| {
                action == a
                    || (action.starts_with(a.as_str()) && action[a.len()..].starts_with('.'))
            });
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

/// Records of the log in order. A torn last line (a crash) is skipped.
pub struct Records {
    path: PathBuf,
    reader: Option<BufReader<File>>,
    line: Vec<u8>,
    /// The number of the line read last.
    number: u64,
    /// A file someone handed over ([`Records::exported`]): every line must be a record.
    strict: bool,
}

impl Records {
    pub(crate) fn open(path: &Path) -> Result<Records, AuditError> {
        let reader = match File::open(path) {
            Ok(file) => Some(BufReader::with_capacity(1 << 20, file)),
            Err(e) if e.kind() == io::ErrorKind::NotFound => None,
            Err(source) => {
                return Err(AuditError::Read {
                    path: path.to_path_buf(),
                    source,
                })
            }
        };
        Ok(Records {
            path: path.to_path_buf(),
            reader,
            line: Vec::new(),
            number: 0,
            strict: false,
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
            path: path.to_path_buf(),
            reader: Some(BufReader::with_capacity(1 << 20, file)),
            line: Vec::new(),
            number: 0,
            strict: true,
        })
    }

    fn malformed(&self, why: &str) -> AuditError {
        AuditError::Malformed {
            path: self.path.clone(),
            line: self.number,
            why: why.to_string(),
        }
    }

    /// The next record that passes `filter`; None at the end of the log.
    pub fn next_matching(
        &mut self,
        filter: &Filter,
    ) -> Result<Option<Map<String, Value>>, AuditError> {
        let Some(reader) = &mut self.reader else {
            return Ok(None);
        };
        loop {
            self.line.clear();
            let n =
                reader
                    .read_until(b'\n', &mut self.line)
                    .map_err(|source| AuditError::Read {
                        path: self.path.clone(),
                        source,
                    })?;
            if n == 0 {
                return Ok(None);
            }
            self.number += 1;
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
                let _ = io::Seek::seek_relative(reader, -back);
                self.number -= 1;
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

    /// Wait for more records (polling; for `--follow`). Opens the log if it did not exist yet.
    pub fn wait(&mut self) {
        std::thread::sleep(Duration::from_millis(200));
        if self.reader.is_none() {
            if let Ok(file) = File::open(&self.path) {
                self.reader = Some(BufReader::with_capacity(1 << 20, file));
            }
        }
    }
}
