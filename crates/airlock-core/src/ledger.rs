//! What the host had at each path a session touched, so that `apply` can tell a change the host
//! made meanwhile from one the session made.
//!
//! After each run, every path newly found in the session's layer gets one line in
//! `STATE/sessions/ID/baseline.jsonl`: the host entry's identity at that moment (kind, size,
//! times, inode) and when the run started. At apply time a path conflicts when the host entry
//! differs from that record, or when the record itself was taken from an entry the host changed
//! after the run started (the run may have read the older version). A path under a recorded
//! directory the run replaced or created (opaque or new, so not walked) conflicts when the host
//! changed it after that run started; a path with no record at all, when the host changed it
//! after the session was created. A file's ctime cannot be set back by its owner, which makes it
//! a fair witness.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use airlock_changes::{Kind, Node};
use serde::{Deserialize, Serialize};

use crate::session::{Session, SessionError};

/// A host entry's identity.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    pub kind: Kind,
    pub size: u64,
    pub mtime_ns: i128,
    pub ctime_ns: i128,
    pub inode: u64,
    pub device: u64,
}

impl Stamp {
    pub fn of(node: &Node) -> Stamp {
        Stamp {
            kind: node.kind,
            size: node.size,
            mtime_ns: node.mtime_ns,
            ctime_ns: node.ctime_ns,
            inode: node.inode,
            device: node.device,
        }
    }
}

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Record {
    pub path: OsString,
    /// Nanoseconds since the Unix epoch.
    pub run_started_ns: i128,
    pub host: Option<Stamp>,
}

pub struct Ledger {
    records: HashMap<OsString, Record>,
}

fn ledger_path(session: &Session) -> PathBuf {
    session.dir.join("baseline.jsonl")
}

fn io<'a>(
    action: &'static str,
    path: &'a Path,
) -> impl FnOnce(std::io::Error) -> SessionError + 'a {
    move |source| SessionError::Io {
        action,
        path: path.to_path_buf(),
        source,
    }
}

pub fn now_ns() -> i128 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as i128)
}

impl Ledger {
    /// The records so far (a later line for a path replaces an earlier one: `revert` records the
    /// entries it puts back); a torn last line (a crash while appending) is ignored.
    pub fn load(session: &Session) -> Result<Ledger, SessionError> {
        let path = ledger_path(session);
        let mut records = HashMap::new();
        let file = match fs::File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Ledger { records }),
            Err(e) => return Err(io("read", &path)(e)),
        };
        for line in std::io::BufReader::new(file).lines() {
            let line = line.map_err(io("read", &path))?;
            if let Ok(record) = serde_json::from_str::<Record>(&line) {
                records.insert(record.path.clone(), record);
            }
        }
        Ok(Ledger { records })
    }

    /// The record for `path`, or for its nearest recorded ancestor; `true` when it is its own.
    pub fn nearest(&self, path: &Path) -> Option<(&Record, bool)> {
        if let Some(record) = self.records.get(path.as_os_str()) {
            return Some((record, true));
        }
        path.ancestors()
            .skip(1)
            .filter(|a| !a.as_os_str().is_empty())
            .find_map(|a| self.records.get(a.as_os_str()))
            .map(|record| (record, false))
    }

    /// Why the host's entry `now` at `path` must not be overwritten, if it must not.
    pub fn conflict(
        &self,
        path: &Path,
        now: Option<&Node>,
        session_created_ns: i128,
    ) -> Option<String> {
        match self.nearest(path) {
            Some((record, true)) => {
                let expected = record.host;
                let now = now.map(Stamp::of);
                if expected != now {
                    Some("changed on the host since the session first touched it".into())
                } else if expected.is_some_and(|s| s.ctime_ns >= record.run_started_ns) {
                    Some("changed on the host while a run of the session was using it".into())
                } else {
                    None
                }
            }
            Some((record, false)) => now
                .filter(|n| n.ctime_ns >= record.run_started_ns)
                .map(|_| "changed on the host after the session replaced its directory".into()),
            None => now
                .filter(|n| n.ctime_ns >= session_created_ns)
                .map(|_| "changed on the host after the session started".into()),
        }
    }
}

/// After a run: record the host's entry at every path newly in the layer.
pub fn record_after_run(session: &Session, run_started_ns: i128) -> Result<(), SessionError> {
    let ledger = Ledger::load(session)?;
    let workspace = session.workspace().to_path_buf();
    let upper = session.upper();
    let mut lines = Vec::new();
    walk(
        &ledger,
        session.overlay_xattrs(),
        &upper,
        &workspace,
        Path::new(""),
        run_started_ns,
        &mut lines,
    )?;
    append(session, &lines)
}

/// After a revert: the host entries it put back are the session's starting point again.
pub fn record_restored(session: &Session, paths: &[PathBuf]) -> Result<(), SessionError> {
    let workspace = session.workspace().to_path_buf();
    let at = now_ns();
    let mut lines = Vec::new();
    for path in paths {
        let host =
            Node::read(&workspace.join(path)).map_err(io("inspect", &workspace.join(path)))?;
        let record = Record {
            path: path.clone().into_os_string(),
            run_started_ns: at,
            host: host.as_ref().map(Stamp::of),
        };
        if let Ok(line) = serde_json::to_vec(&record) {
            lines.extend_from_slice(&line);
            lines.push(b'\n');
        }
    }
    append(session, &lines)
}

fn append(session: &Session, lines: &[u8]) -> Result<(), SessionError> {
    if lines.is_empty() {
        return Ok(());
    }
    let path = ledger_path(session);
    let mut file = fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&path)
        .map_err(io("open", &path))?;
    file.write_all(lines)
        .and_then(|()| file.sync_data())
        .map_err(io("append to", &path))
}

fn walk(
    ledger: &Ledger,
    xattrs: airlock_changes::OverlayXattrs,
    upper: &Path,
    workspace: &Path,
    rel: &Path,
    run_started_ns: i128,
    lines: &mut Vec<u8>,
) -> Result<(), SessionError> {
    let dir = upper.join(rel);
    let entries = fs::read_dir(&dir).map_err(io("read", &dir))?;
    for entry in entries {
        let entry = entry.map_err(io("read", &dir))?;
        let child = rel.join(entry.file_name());
        let host =
            Node::read(&workspace.join(&child)).map_err(io("inspect", &workspace.join(&child)))?;
        if !ledger.records.contains_key(child.as_os_str()) {
            let record = Record {
                path: child.clone().into_os_string(),
                run_started_ns,
                host: host.as_ref().map(Stamp::of),
            };
            if let Ok(line) = serde_json::to_vec(&record) {
                lines.extend_from_slice(&line);
                lines.push(b'\n');
            }
        }
        // Below a directory the host also has as a directory, entries show through: walk on.
        // Below a new or opaque one, nothing of the host's does; its record covers them.
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        let host_dir = host.is_some_and(|h| h.kind == Kind::Dir);
        if is_dir && host_dir && !airlock_changes::scan::is_opaque(&upper.join(&child), xattrs) {
            walk(
                ledger,
                xattrs,
                upper,
                workspace,
                &child,
                run_started_ns,
                lines,
            )?;
        }
    }
    Ok(())
}
