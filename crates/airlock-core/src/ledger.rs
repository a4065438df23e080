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
//!
//! A file or symlink's record also holds what it held (its mode and the hash of its bytes, or its
//! target): a host entry whose times or inode moved but whose content did not (`touch`, an apply
//! taken back by `revert`, a checkout that rewrote the same bytes) is the same entry, not a
//! conflict. The metadata is compared first; the host file is read only when it differs.

use std::collections::HashMap;
use std::ffi::OsString;
use std::fs;
use std::io::{BufRead, Write};
use std::path::{Path, PathBuf};

use airlock_changes::apply::{Entry, Workspace};
use airlock_changes::{Kind, Node};
use serde::{Deserialize, Serialize};

use crate::changes::MAX_FILE_BYTES;
use crate::io_failure::io;
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
    /// What the host's file or symlink held (absent for other kinds, files larger than
    /// [`MAX_FILE_BYTES`], and records written before airlock kept it: those compare by metadata
    /// alone).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub content: Option<Entry>,
}

impl Record {
    fn of(
        path: &Path,
        run_started_ns: i128,
        host: Option<&Node>,
        ws: Option<&Workspace>,
    ) -> Record {
        Record {
            path: path.as_os_str().to_os_string(),
            run_started_ns,
            host: host.map(Stamp::of),
            content: host.zip(ws).and_then(|(node, ws)| content(ws, path, node)),
        }
    }

    /// Whether the host holds what was recorded: the same metadata, or else the same kind,
    /// size, mode and bytes (a file) or target (a symlink). `entry_now` reads the host's entry;
    /// it is called only when the metadata differs.
    fn still_holds(&self, now: Option<&Node>, entry_now: &dyn Fn() -> Option<Entry>) -> bool {
        let stamp = now.map(Stamp::of);
        if self.host == stamp {
            return true;
        }
        let (Some(recorded), Some(content), Some(stamp)) = (self.host, &self.content, stamp) else {
            return false;
        };
        recorded.kind == stamp.kind
            && recorded.size == stamp.size
            && entry_now().as_ref() == Some(content)
    }
}

/// What a file or symlink holds, as an apply compares it; None for what it does not compare by
/// content. A file past [`MAX_FILE_BYTES`] is not read after every run (a run that deletes a huge
/// file would pay for reading it): it is compared by its metadata alone.
fn content(ws: &Workspace, path: &Path, node: &Node) -> Option<Entry> {
    match node.kind {
        Kind::File if node.size <= MAX_FILE_BYTES => ws.entry(path).ok(),
        Kind::Symlink => ws.entry(path).ok(),
        _ => None,
    }
}

pub struct Ledger {
    records: HashMap<OsString, Record>,
}

fn ledger_path(session: &Session) -> PathBuf {
    session.dir.join("baseline.jsonl")
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
            Err(e) => return Err(io("read", &path)(e).into()),
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
    /// `entry_now` reads what the host holds there, when the metadata alone cannot tell.
    pub fn conflict(
        &self,
        path: &Path,
        now: Option<&Node>,
        session_created_ns: i128,
        entry_now: &dyn Fn() -> Option<Entry>,
    ) -> Option<String> {
        match self.nearest(path) {
            Some((record, true)) => {
                let expected = record.host;
                if !record.still_holds(now, entry_now) {
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
    // Contents are read beneath the workspace, as an apply reads them; without it (gone,
    // unreadable) the records compare by metadata alone.
    let ws = Workspace::open(&workspace).ok();
    let upper = session.upper();
    let mut lines = Vec::new();
    let at = Walk {
        ledger: &ledger,
        xattrs: session.overlay_xattrs(),
        upper: &upper,
        workspace: &workspace,
        ws: ws.as_ref(),
        run_started_ns,
    };
    at.walk(Path::new(""), &mut lines)?;
    append(session, &lines)
}

/// After a revert: the host entries it put back are the session's starting point again.
pub fn record_restored(session: &Session, paths: &[PathBuf]) -> Result<(), SessionError> {
    let workspace = session.workspace().to_path_buf();
    let ws = Workspace::open(&workspace).ok();
    let at = now_ns();
    let mut lines = Vec::new();
    for path in paths {
        let host =
            Node::read(&workspace.join(path)).map_err(io("inspect", &workspace.join(path)))?;
        let record = Record::of(path, at, host.as_ref(), ws.as_ref());
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
        .map_err(io("append to", &path))?;
    Ok(())
}

/// One walk of a session's layer after a run, recording the host's entries.
struct Walk<'a> {
    ledger: &'a Ledger,
    /// Where the layer's overlay keeps its opaque marks.
    xattrs: airlock_changes::OverlayXattrs,
    upper: &'a Path,
    workspace: &'a Path,
    ws: Option<&'a Workspace>,
    run_started_ns: i128,
}

impl Walk<'_> {
    fn walk(&self, rel: &Path, lines: &mut Vec<u8>) -> Result<(), SessionError> {
        let dir = self.upper.join(rel);
        let entries = fs::read_dir(&dir).map_err(io("read", &dir))?;
        for entry in entries {
            let entry = entry.map_err(io("read", &dir))?;
            let child = rel.join(entry.file_name());
            let host_path = self.workspace.join(&child);
            let host = Node::read(&host_path).map_err(io("inspect", &host_path))?;
            if !self.ledger.records.contains_key(child.as_os_str()) {
                let mut record = Record::of(&child, self.run_started_ns, host.as_ref(), self.ws);
                // The bytes were read after the stamp, in an open of their own: a host edit in
                // between would be taken for the starting point, and a later apply would write
                // over it unseen. Kept only if the stamp still holds; else metadata alone.
                if record.content.is_some() {
                    let again = Node::read(&host_path).ok().flatten();
                    if again.as_ref().map(Stamp::of) != record.host {
                        record.content = None;
                    }
                }
                if let Ok(line) = serde_json::to_vec(&record) {
                    lines.extend_from_slice(&line);
                    lines.push(b'\n');
                }
            }
            // Below a directory the host also has as a directory, entries show through: walk
            // on. Below a new or opaque one, nothing of the host's does; its record covers them.
            let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
            let host_dir = host.is_some_and(|h| h.kind == Kind::Dir);
            if is_dir
                && host_dir
                && !airlock_changes::scan::is_opaque(&self.upper.join(&child), self.xattrs)
            {
                self.walk(&child, lines)?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// `f` in a fresh workspace, recorded as a run would record it.
    fn recorded(bytes: &[u8]) -> (tempfile::TempDir, Workspace, Record) {
        let dir = tempfile::tempdir().unwrap();
        fs::write(dir.path().join("f"), bytes).unwrap();
        let ws = Workspace::open(dir.path()).unwrap();
        let node = Node::read(&dir.path().join("f")).unwrap();
        let record = Record::of(Path::new("f"), now_ns(), node.as_ref(), Some(&ws));
        (dir, ws, record)
    }

    fn holds(dir: &tempfile::TempDir, ws: &Workspace, record: &Record) -> bool {
        let now = Node::read(&dir.path().join("f")).unwrap();
        record.still_holds(now.as_ref(), &|| ws.entry(Path::new("f")).ok())
    }

    /// The same bytes written anew: another inode, other times.
    fn rewrite(dir: &tempfile::TempDir, bytes: &[u8]) {
        fs::write(dir.path().join("f.new"), bytes).unwrap();
        fs::rename(dir.path().join("f.new"), dir.path().join("f")).unwrap();
    }

    #[test]
    fn the_same_bytes_under_a_new_inode_are_the_same_entry() {
        let (dir, ws, record) = recorded(b"one\n");
        assert!(holds(&dir, &ws, &record));
        rewrite(&dir, b"one\n");
        assert_ne!(
            record.host.map(|s| s.inode),
            Node::read(&dir.path().join("f")).unwrap().map(|n| n.inode)
        );
        assert!(holds(&dir, &ws, &record));
    }

    #[test]
    fn other_bytes_a_mode_or_a_kind_is_a_change() {
        let (dir, ws, record) = recorded(b"one\n");
        rewrite(&dir, b"two\n");
        assert!(!holds(&dir, &ws, &record), "other bytes of the same size");
        rewrite(&dir, b"one\n");
        let f = dir.path().join("f");
        fs::set_permissions(&f, fs::Permissions::from_mode(0o755)).unwrap();
        assert!(!holds(&dir, &ws, &record), "another mode");
        fs::remove_file(&f).unwrap();
        std::os::unix::fs::symlink("one\n", &f).unwrap();
        assert!(!holds(&dir, &ws, &record), "a symlink now");
        fs::remove_file(&f).unwrap();
        assert!(!holds(&dir, &ws, &record), "gone");
    }

    #[test]
    fn a_record_without_content_compares_by_metadata() {
        let (dir, ws, mut record) = recorded(b"one\n");
        record.content = None;
        rewrite(&dir, b"one\n");
        assert!(!holds(&dir, &ws, &record));
    }

    #[test]
    fn metadata_that_did_not_move_reads_no_content() {
        let (dir, _ws, record) = recorded(b"one\n");
        let now = Node::read(&dir.path().join("f")).unwrap();
        assert!(record.still_holds(now.as_ref(), &|| panic!("read the file")));
    }
}
