//! The audit log: append-only JSON lines in sealed segments and one open one, written before
//! every action, hash-chained across all of them, verifiable.
//!
//! ```text
//! STATE/audit.log            the open segment, one record per line:
//!                            {"seq":N,"time":…,"prev":HASH,…fields…,"hash":HASH}
//! STATE/audit/<seq>.log      sealed segments, oldest first, each with its <seq>.index
//! STATE/audit.head           the last record's seq and hash (detects records cut off the end)
//! ```
//!
//! - **Append** takes an exclusive `flock` on the open segment (checking that the file it locked
//!   is still the one at the path: another writer may have sealed it meanwhile), reads its last
//!   record (seq and hash), rolls the segment if it is full or of an earlier day (see
//!   `segments`), writes the new line with one `write`, and fsyncs before returning: a caller
//!   that got `Ok` knows the record is on disk; one that got `Err` must not act.
//! - **Chain**: `hash` is the SHA-256 of the line with `"hash"` left out; `prev` is the previous
//!   record's `hash`, across segments; `seq` counts from 1. Editing a field breaks that record's
//!   hash (and, if the hash is recomputed, the next record's `prev`); a removed or reordered line
//!   or segment breaks `seq`; cutting records off the end leaves `audit.head` ahead of the log.
//! - **Torn line**: a crash in the middle of a write leaves a last line without its newline. The
//!   next append (holding the lock) cuts it off and records that it did, with the bytes' hash;
//!   `verify` reports one it finds. No complete record is ever touched, and a segment is never
//!   sealed with a torn line.
//! - **Retention** (`retention`) removes the oldest sealed segments past a number of days or
//!   bytes, recording the removal in the chain first, so that `verify` can tell it from tampering.
//!
//! What this cannot do alone: someone who can write the state directory can rewrite the whole
//! chain consistently. A copy of each record elsewhere is the anchor: forwarded to syslog as it is
//! written, or exported (airlock-export, which reads the log with [`Tail`]).

use std::fs::{self, File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::time::SystemTime;

use nix::fcntl::{Flock, FlockArg};
use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};
use sha2::{Digest, Sha256};

mod index;
mod reader;
mod retention;
#[cfg(test)]
mod segment_more_tests;
#[cfg(test)]
mod segment_tests;
mod segments;
mod tail;
mod verify;

pub use index::{SegmentIndex, INDEX_VERSION, MAX_LISTED};
pub use reader::{Filter, Records};
pub use retention::{Removed, Retention, RetentionReport};
pub use segments::{
    sealed_segments, segment_file_name, BadSegmentSize, Layout, Sealed, DEFAULT_SEGMENT_SIZE,
    MIN_SEGMENT_SIZE, SEGMENT_DIR,
};
pub use tail::{Position, Tail, Tailed};
pub use verify::{verify_exported, Problem, StreamVerdict, Verdict};

pub const LOG_FILE: &str = "audit.log";
pub const HEAD_FILE: &str = "audit.head";

#[derive(Debug, thiserror::Error)]
pub enum AuditError {
    #[error("cannot write the audit log {path}: {source} — nothing was done; free space or fix the permissions of the state directory, then retry")]
    Append { path: PathBuf, source: io::Error },
    #[error("cannot read the audit log {path}: {source}")]
    Read { path: PathBuf, source: io::Error },
    #[error("AIRLOCK_AUDIT_SEGMENT_SIZE={value:?} is {why} — nothing was done; set it to a size of at least 1K (bytes, or a number with K, M or G: 64M), or unset it for the default (64M)")]
    SegmentSize { value: String, why: &'static str },
    #[error("{path}:{line}: not an audit record ({why}) — give a file of JSON lines as 'airlock log --json' prints them")]
    Malformed {
        path: PathBuf,
        line: u64,
        why: String,
    },
}

/// How appends reach the disk.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Sync {
    /// fsync every record before the action it announces (the default).
    Always,
    /// Leave it to the kernel: faster, and a crash may lose the last records. For benchmarks and
    /// throwaway machines (`AIRLOCK_AUDIT_FSYNC=0`).
    Never,
}

impl Sync {
    /// `AIRLOCK_AUDIT_FSYNC=0` turns fsync off; anything else keeps it.
    pub fn from_env() -> Sync {
        match std::env::var("AIRLOCK_AUDIT_FSYNC").as_deref() {
            Ok("0") | Ok("false") | Ok("off") => Sync::Never,
            _ => Sync::Always,
        }
    }
}

/// The audit log of one state directory.
#[derive(Debug, Clone)]
pub struct AuditLog {
    dir: PathBuf,
    sync: Sync,
    forward: Option<PathBuf>,
    /// How the open segment rolls; an error when `AIRLOCK_AUDIT_SEGMENT_SIZE` does not read,
    /// said by every append (see [`Layout::from_env`]).
    layout: Result<Layout, BadSegmentSize>,
    /// The time records are written at (a fake one in tests of rolling by day).
    clock: fn() -> SystemTime,
}

/// Where `AIRLOCK_AUDIT_SYSLOG` sends a copy of each record: `1` (or `on`) for the system
/// logger's socket `/dev/log` (syslog, journald), an absolute path for another datagram socket.
fn forward_from_env() -> Option<PathBuf> {
    match std::env::var("AIRLOCK_AUDIT_SYSLOG").ok()?.as_str() {
        "" | "0" | "off" | "false" => None,
        "1" | "on" | "true" => Some(PathBuf::from("/dev/log")),
        path if path.starts_with('/') => Some(PathBuf::from(path)),
        _ => None,
    }
}

/// Send one record to a syslog socket: facility auth (4), severity info (6). Best effort: the
/// record is already in the log; a logger that is down must not stop airlock.
fn forward(socket: &Path, line: &[u8]) {
    let Ok(sender) = std::os::unix::net::UnixDatagram::unbound() else {
        return;
    };
    let mut message = format!("<38>airlock[{}]: ", std::process::id()).into_bytes();
    message.extend_from_slice(line.strip_suffix(b"\n").unwrap_or(line));
    let _ = sender.send_to(&message, socket);
}

/// Where an appended record landed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Appended {
    pub seq: u64,
    pub hash: String,
    /// Its `time`.
    pub time: String,
}

/// What `audit.head` holds.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub(crate) struct Head {
    pub(crate) seq: u64,
    pub(crate) hash: String,
}

/// The chain's first `prev`.
pub const GENESIS: &str = "0000000000000000000000000000000000000000000000000000000000000000";

/// The hash a record carries: SHA-256 of its JSON without the `hash` field, keys in the order
/// written.
pub fn record_hash(record: &Map<String, Value>) -> String {
    let mut without = record.clone();
    without.remove("hash");
    let text = serde_json::to_string(&Value::Object(without)).unwrap_or_default();
    hex::encode(Sha256::digest(text.as_bytes()))
}

/// RFC 3339 with milliseconds, UTC.
pub fn timestamp_now() -> String {
    format_time(SystemTime::now())
}

/// `at` as records carry times: RFC 3339 with milliseconds, UTC.
pub fn format_time(at: SystemTime) -> String {
    humantime::format_rfc3339_millis(at).to_string()
}

/// How often an append tries again when the open segment it locked was moved away by something
/// other than a roll (a roll by another writer is waited through however often), or rolls it.
const ATTEMPTS: usize = 64;

/// Where the chain stands: the last record's seq, hash and time.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Tip {
    seq: u64,
    hash: String,
    /// None when the last record is not in the open segment.
    time: Option<String>,
}

impl AuditLog {
    /// The log of `state_dir`, rolled as `AIRLOCK_AUDIT_SEGMENT_SIZE` and
    /// `AIRLOCK_AUDIT_SEGMENT_DAILY` say (else 64 MiB or a UTC day; a size that does not read, or
    /// below 1 KiB, makes every append an error that says so); a copy of each record also goes
    /// to syslog when `AIRLOCK_AUDIT_SYSLOG` asks for it.
    pub fn new(state_dir: &Path, sync: Sync) -> AuditLog {
        AuditLog {
            dir: state_dir.to_path_buf(),
            sync,
            forward: forward_from_env(),
            layout: Layout::from_env(),
            clock: SystemTime::now,
        }
    }

    /// The same log, rolled by `layout`.
    pub fn with_layout(mut self, layout: Layout) -> AuditLog {
        self.layout = Ok(layout);
        self
    }

    /// The same log, its records' times (and the day it rolls by) read from `clock`.
    pub fn with_clock(mut self, clock: fn() -> SystemTime) -> AuditLog {
        self.clock = clock;
        self
    }

    /// The open segment, where records are appended.
    pub fn path(&self) -> PathBuf {
        self.dir.join(LOG_FILE)
    }

    /// The state directory the log is in.
    pub fn state_dir(&self) -> &Path {
        &self.dir
    }

    fn head_path(&self) -> PathBuf {
        self.dir.join(HEAD_FILE)
    }

    fn append_error(&self, source: io::Error) -> AuditError {
        AuditError::Append {
            path: self.path(),
            source,
        }
    }

    /// Append one record: `action` and `fields` (an object), with seq, time, prev and hash added.
    /// Returns once the record is on disk (with [`Sync::Always`]).
    pub fn append(&self, action: &str, fields: Value) -> Result<Appended, AuditError> {
        self.append_as(action, fields, self.sync)
    }

    /// Append one record without waiting for the disk; [`AuditLog::sync`] (or any later
    /// synced append) makes it durable. For an intent whose action can wait for `sync` while
    /// other work goes on.
    pub fn append_deferred(&self, action: &str, fields: Value) -> Result<Appended, AuditError> {
        self.append_as(action, fields, Sync::Never)
    }

    /// Make every record appended so far durable (with [`Sync::Always`]). A segment sealed since
    /// was synced as it was sealed.
    pub fn sync(&self) -> Result<(), AuditError> {
        if self.sync == Sync::Never {
            return Ok(());
        }
        File::open(self.path())
            .and_then(|file| file.sync_data())
            .map_err(|e| self.append_error(e))
    }

    fn append_as(&self, action: &str, fields: Value, sync: Sync) -> Result<Appended, AuditError> {
        let layout = self.layout.clone().map_err(|bad| AuditError::SegmentSize {
            value: bad.value,
            why: bad.why,
        })?;
        let mut file = self.lock_open_segment()?;
        for _ in 0..ATTEMPTS {
            let size = file.metadata().map_err(|e| self.append_error(e))?.len();
            let tip = self.recovered_tip(&mut file, sync)?;
            if !layout.rolls(size, tip.time.as_deref(), (self.clock)()) {
                // PERF: the tip just read is the one to chain to (the file is locked): the
                // last record is not read twice.
                return self.append_after(&mut file, &tip, action, fields, sync);
            }
            segments::seal(
                &self.dir,
                &self.path(),
                &mut file,
                self.sync == Sync::Always,
            )?;
            drop(file);
            file = self.lock_open_segment()?;
        }
        self.append_locked(&mut file, action, fields, sync)
    }

    /// Seal the open segment now, whatever its size and day (nothing when it holds no record):
    /// what a roll does, for a tool that builds a log (the benchmark) or a person who wants the
    /// records so far in a read-only file. Returns the sealed segment's index.
    pub fn seal(&self) -> Result<Option<SegmentIndex>, AuditError> {
        let mut file = self.lock_open_segment()?;
        self.recovered_tip(&mut file, self.sync)?;
        if file.metadata().map_err(|e| self.append_error(e))?.len() == 0 {
            return Ok(None);
        }
        segments::seal(
            &self.dir,
            &self.path(),
            &mut file,
            self.sync == Sync::Always,
        )
        .map(Some)
    }

    /// The open segment, opened (created if need be) and locked exclusively; the file locked is
    /// the one at the path (not one sealed while this process waited for its lock).
    ///
    /// A file sealed meanwhile by another writer's roll is waited through however often it
    /// happens: flock is not fair, and a busy writer takes the lock back (and rolls the segment a
    /// waiter waits for) before the woken waiter runs, for dozens of segments under load. Each
    /// roll is the log going on, not something wrong; counting them failed appends with "moved
    /// away each time" (the flake of `verify_while_others_roll_the_log_never_cries_tampering`).
    /// Only a file moved elsewhere than a roll puts it, by something else, is given up on.
    fn lock_open_segment(&self) -> Result<Flock<File>, AuditError> {
        fs::create_dir_all(&self.dir).map_err(|e| self.append_error(e))?;
        let mut moved_elsewhere = 0;
        while moved_elsewhere < ATTEMPTS {
            let file = OpenOptions::new()
                .read(true)
                .append(true)
                .create(true)
                .mode(0o600)
                .open(self.path())
                .map_err(|e| self.append_error(e))?;
            let file = Flock::lock(file, FlockArg::LockExclusive)
                .map_err(|(_, errno)| self.append_error(errno.into()))?;
            if segments::is_at(&file, &self.path()).map_err(|e| self.append_error(e))? {
                return Ok(file);
            }
            if !segments::was_sealed(&self.dir, &file).map_err(|e| self.append_error(e))? {
                moved_elsewhere += 1;
            }
        }
        Err(self.append_error(io::Error::other(format!(
            "it was moved away each time this process locked it, and not into {} as a roll \
             seals it: is something else renaming it?",
            self.dir.join(SEGMENT_DIR).display()
        ))))
    }

    /// Append to the open segment this process holds locked.
    fn append_locked(
        &self,
        file: &mut File,
        action: &str,
        fields: Value,
        sync: Sync,
    ) -> Result<Appended, AuditError> {
        let tip = self.recovered_tip(file, sync)?;
        self.append_after(file, &tip, action, fields, sync)
    }

    /// Append to the open segment this process holds locked, whose last record is `tip`.
    fn append_after(
        &self,
        file: &mut File,
        tip: &Tip,
        action: &str,
        fields: Value,
        sync: Sync,
    ) -> Result<Appended, AuditError> {
        let appended = self.write_record(file, tip.seq + 1, &tip.hash, action, fields, sync)?;
        self.write_head(&appended);
        Ok(appended)
    }

    /// Where the chain stands, a torn last line (a crash) cut off first and said in the chain.
    fn recovered_tip(&self, file: &mut File, sync: Sync) -> Result<Tip, AuditError> {
        let (last, torn) = last_record(file).map_err(|e| self.append_error(e))?;
        let tip = match last {
            Some(tip) => tip,
            None => self.tip_before_open_segment()?,
        };
        let Some(torn) = torn else {
            return Ok(tip);
        };
        file.set_len(torn.offset)
            .map_err(|e| self.append_error(e))?;
        let fields = serde_json::json!({
            "torn_bytes": torn.bytes.len(),
            "torn_sha256": hex::encode(Sha256::digest(&torn.bytes)),
            "summary": "a record cut short by a crash was removed",
        });
        let appended =
            self.write_record(file, tip.seq + 1, &tip.hash, "log.recovered", fields, sync)?;
        self.write_head(&appended);
        Ok(Tip {
            seq: appended.seq,
            hash: appended.hash,
            time: Some(appended.time),
        })
    }

    /// Where the chain stands when the open segment holds no record: at the last sealed one's
    /// last record. An open segment emptied or removed after records were written to it (the
    /// head is ahead of the sealed ones) leaves the chain going on from the head, so the gap
    /// stays in it for `verify` to report, rather than a new chain that would verify as whole.
    fn tip_before_open_segment(&self) -> Result<Tip, AuditError> {
        let mut tip = Tip {
            seq: 0,
            hash: GENESIS.to_string(),
            time: None,
        };
        if let Some(newest) = sealed_segments(&self.dir)?.pop() {
            let mut file = File::open(&newest.path).map_err(|source| AuditError::Read {
                path: newest.path.clone(),
                source,
            })?;
            if let (Some(last), _) = last_record(&mut file).map_err(|source| AuditError::Read {
                path: newest.path.clone(),
                source,
            })? {
                tip = Tip { time: None, ..last };
            }
        }
        if let Some(head) = self.read_head() {
            if head.seq > tip.seq {
                tip = Tip {
                    seq: head.seq,
                    hash: head.hash,
                    time: None,
                };
            }
        }
        Ok(tip)
    }

    /// Note the last record written. Not fsync'd: a head that lags after a crash is no alarm,
    /// only one ahead of the log is.
    fn write_head(&self, appended: &Appended) {
        let head = serde_json::to_vec(&Head {
            seq: appended.seq,
            hash: appended.hash.clone(),
        })
        .unwrap_or_default();
        let mut padded = head;
        padded.resize(128, b' ');
        padded.push(b'\n');
        if let Ok(head_file) = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(self.head_path())
        {
            let _ = head_file.write_all_at(&padded, 0);
        }
    }

    fn write_record(
        &self,
        file: &mut File,
        seq: u64,
        prev: &str,
        action: &str,
        fields: Value,
        sync: Sync,
    ) -> Result<Appended, AuditError> {
        let time = format_time((self.clock)());
        let mut record = Map::new();
        record.insert("seq".into(), seq.into());
        record.insert("time".into(), time.clone().into());
        record.insert("prev".into(), prev.into());
        record.insert("action".into(), action.into());
        if let Value::Object(fields) = fields {
            for (key, value) in fields {
                if !matches!(key.as_str(), "seq" | "time" | "prev" | "action" | "hash") {
                    record.insert(key, value);
                }
            }
        }
        let hash = record_hash(&record);
        record.insert("hash".into(), hash.clone().into());
        let mut line = serde_json::to_vec(&Value::Object(record))
            .map_err(|e| self.append_error(io::Error::other(e)))?;
        line.push(b'\n');
        crash_test_hook(file, &line, action);
        // One write of the whole line: with O_APPEND and the lock, lines never interleave. A
        // write that fails part way (a full disk) is cut back off: a torn line is what a crash
        // leaves, and `verify` would blame one on a crash.
        let before = file.metadata().map_err(|e| self.append_error(e))?.len();
        if let Err(e) = file.write_all(&line) {
            let _ = file.set_len(before);
            return Err(self.append_error(e));
        }
        if sync == Sync::Always {
            file.sync_data().map_err(|e| self.append_error(e))?;
        }
        if let Some(socket) = &self.forward {
            forward(socket, &line);
        }
        Ok(Appended { seq, hash, time })
    }

    /// Read records in order, the sealed segments' then the open one's (see [`Records`]).
    pub fn records(&self) -> Result<Records, AuditError> {
        Records::of_log(&self.dir)
    }

    /// What audit.head says was written last, if it says anything.
    pub(crate) fn read_head(&self) -> Option<Head> {
        let bytes = fs::read(self.head_path()).ok()?;
        serde_json::from_slice::<Head>(bytes.trim_ascii_end()).ok()
    }
}

/// Crash-test hook, honoured in debug builds only: with `AIRLOCK_TEST_FAULT=audit:ACTION`, an
/// append of that action writes half its line, syncs it, and the process kills itself.
fn crash_test_hook(file: &mut File, line: &[u8], action: &str) {
    if !cfg!(debug_assertions) {
        return;
    }
    let Ok(fault) = std::env::var("AIRLOCK_TEST_FAULT") else {
        return;
    };
    if fault.strip_prefix("audit:") == Some(action) {
        let _ = file.write_all(&line[..line.len() / 2]);
        let _ = file.sync_data();
        let _ = nix::sys::signal::kill(nix::unistd::Pid::this(), nix::sys::signal::Signal::SIGKILL);
    }
}

/// A last line without its newline: where it starts, and its bytes.
struct Torn {
    offset: u64,
    bytes: Vec<u8>,
}

/// The last complete record's seq, hash and time, and a torn line after it, if any. Reads only
/// the file's tail.
fn last_record(file: &mut File) -> io::Result<(Option<Tip>, Option<Torn>)> {
    let len = file.seek(SeekFrom::End(0))?;
    if len == 0 {
        return Ok((None, None));
    }
    let mut window = 4096u64;
    loop {
        let start = len.saturating_sub(window);
        let mut tail = vec![0u8; (len - start) as usize];
        file.seek(SeekFrom::Start(start))?;
        file.read_exact(&mut tail)?;
        let torn = if tail.ends_with(b"\n") {
            None
        } else {
            let cut = tail.iter().rposition(|&b| b == b'\n').map(|i| i + 1);
            match cut {
                Some(cut) => Some(Torn {
                    offset: start + cut as u64,
                    bytes: tail[cut..].to_vec(),
                }),
                None if start == 0 => Some(Torn {
                    offset: 0,
                    bytes: tail.clone(),
                }),
                None => {
                    window *= 4;
                    continue;
                }
            }
        };
        let complete_end = torn
            .as_ref()
            .map_or(tail.len(), |t| (t.offset - start) as usize);
        let complete = &tail[..complete_end];
        let body = complete.strip_suffix(b"\n").unwrap_or(complete);
        let line_start = body.iter().rposition(|&b| b == b'\n').map(|i| i + 1);
        let line = match line_start {
            Some(i) => &body[i..],
            None if start == 0 => body,
            None => {
                window *= 4;
                continue;
            }
        };
        if line.is_empty() {
            return Ok((None, torn));
        }
        let record: Map<String, Value> = match serde_json::from_slice(line) {
            Ok(Value::Object(map)) => map,
            _ => {
                return Err(io::Error::other(
                    "its last record is not JSON; run 'airlock log verify'",
                ))
            }
        };
        let seq = record.get("seq").and_then(Value::as_u64).unwrap_or(0);
        let text = |key: &str| record.get(key).and_then(Value::as_str).map(str::to_string);
        let tip = Tip {
            seq,
            hash: text("hash").unwrap_or_else(|| GENESIS.to_string()),
            time: text("time"),
        };
        return Ok((Some(tip), torn));
    }
}

#[cfg(test)]
mod tests;
