//! The change set: an overlay upper layer read against the host workspace as it is now.
//!
//! Only the upper layer is walked, and on the host only the paths it names (plus the subtrees it
//! deletes), so the cost grows with the number of changed files, never with the workspace.
//!
//! What overlayfs leaves in the upper layer:
//! - a file, symlink or directory the session created or changed (a changed file is copied up
//!   whole; a directory is copied up empty when something inside it changes);
//! - a whiteout, a 0/0 character device (or, from tools that build layers, a zero-size file with
//!   an `overlay.whiteout` xattr), where the session deleted something of the host's;
//! - an opaque directory (`overlay.opaque` = `y`), where the session deleted a directory and made
//!   a new one of the same name: nothing of the host's directory shows through it.
//!
//! The xattrs are `trusted.overlay.*` when the overlay was mounted by root, `user.overlay.*` when it
//! was mounted in a user namespace (`userxattr`). SECURITY: only the namespace of the mount is
//! read: as root, a `user.overlay.*` xattr is the sandbox's own writing (any file owner may set
//! one), content rather than structure, and honouring it would show (and apply) deletions the
//! sandbox never made. The caller, which recorded how the layer was mounted, says which
//! ([`OverlayXattrs`]).

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::node::{same_content, Kind, Node};

/// The xattr namespace an overlay keeps its whiteouts and opaque marks in: `trusted.overlay.*`
/// when mounted in the initial user namespace (root's rootful way), `user.overlay.*` when mounted
/// with `userxattr` in a user namespace. Only that one is read; the other is the sandbox's own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OverlayXattrs {
    Trusted,
    User,
}

impl OverlayXattrs {
    fn prefix(self) -> &'static str {
        match self {
            OverlayXattrs::Trusted => "trusted.overlay.",
            OverlayXattrs::User => "user.overlay.",
        }
    }
}

/// What happened to one path, in git's terms.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Status {
    Added,
    Deleted,
    Modified,
    /// The same path holds another kind of entry (a file became a symlink, a directory a file).
    TypeChanged,
}

impl Status {
    /// The letter `git diff --name-status` uses.
    pub fn letter(self) -> char {
        match self {
            Status::Added => 'A',
            Status::Deleted => 'D',
            Status::Modified => 'M',
            Status::TypeChanged => 'T',
        }
    }
}

/// One changed path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Change {
    /// Relative to the workspace root.
    pub path: PathBuf,
    pub status: Status,
    /// The host's entry now (None when the session added the path).
    pub old: Option<Node>,
    /// The session's entry (None when the session deleted the path).
    pub new: Option<Node>,
}

impl Change {
    /// Only the permission bits changed.
    pub fn mode_only(&self) -> bool {
        self.status == Status::Modified
            && matches!((&self.old, &self.new), (Some(o), Some(n)) if o.mode != n.mode)
    }
}

/// Every change of a session, sorted by path bytes (git's order).
#[derive(Debug, Clone, Default)]
pub struct ChangeSet {
    pub changes: Vec<Change>,
}

#[derive(Debug, thiserror::Error)]
pub enum ScanError {
    #[error("cannot read {path}: {source}")]
    Io { path: PathBuf, source: io::Error },
}

fn io_at(path: &Path) -> impl FnOnce(io::Error) -> ScanError + '_ {
    move |source| ScanError::Io {
        path: path.to_path_buf(),
        source,
    }
}

fn overlay_xattr(path: &Path, xattrs: OverlayXattrs, name: &str) -> Option<Vec<u8>> {
    xattr::get(path, format!("{}{name}", xattrs.prefix()))
        .ok()
        .flatten()
}

/// Is `node`, found in an upper layer at `path`, a whiteout (a deletion)?
pub fn is_whiteout(path: &Path, node: &Node, xattrs: OverlayXattrs) -> bool {
    match node.kind {
        Kind::CharDevice => node.rdev == 0,
        Kind::File if node.size == 0 => overlay_xattr(path, xattrs, "whiteout").is_some(),
        _ => false,
    }
}

pub fn is_opaque(path: &Path, xattrs: OverlayXattrs) -> bool {
    overlay_xattr(path, xattrs, "opaque").as_deref() == Some(b"y")
}

/// Names in a directory, sorted.
fn names(dir: &Path) -> Result<Vec<OsString>, ScanError> {
    let mut names = fs::read_dir(dir)
        .map_err(io_at(dir))?
        .map(|entry| entry.map(|e| e.file_name()))
        .collect::<Result<Vec<_>, _>>()
        .map_err(io_at(dir))?;
    names.sort();
    Ok(names)
}

struct Scan<'a> {
    upper: &'a Path,
    lower: &'a Path,
    xattrs: OverlayXattrs,
    changes: Vec<Change>,
}

impl Scan<'_> {
    fn push(&mut self, path: PathBuf, status: Status, old: Option<Node>, new: Option<Node>) {
        self.changes.push(Change {
            path,
            status,
            old,
            new,
        });
    }

    /// The host's `rel` and everything under it is gone in the session.
    fn deleted_subtree(&mut self, rel: &Path, node: Node) -> Result<(), ScanError> {
        if node.kind == Kind::Dir {
            self.deleted_children(rel, &BTreeSet::new())?;
        }
        self.push(rel.to_path_buf(), Status::Deleted, Some(node), None);
        Ok(())
    }

    /// Every entry of the host directory `rel` but those named in `kept` is gone in the session.
    fn deleted_children(&mut self, rel: &Path, kept: &BTreeSet<OsString>) -> Result<(), ScanError> {
        let dir = self.lower.join(rel);
        for name in names(&dir)? {
            if kept.contains(&name) {
                continue;
            }
            let child = rel.join(&name);
            if let Some(node) = Node::read(&self.lower.join(&child)).map_err(io_at(&dir))? {
                self.deleted_subtree(&child, node)?;
            }
        }
        Ok(())
    }

    /// Everything under the session's new directory `rel` is new.
    fn added_subtree(&mut self, rel: &Path, node: Node) -> Result<(), ScanError> {
        let is_dir = node.kind == Kind::Dir;
        self.push(rel.to_path_buf(), Status::Added, None, Some(node));
        if is_dir {
            self.walk(rel, false)?;
        }
        Ok(())
    }

    /// Walk the upper directory `rel`; `host_visible` is false where the host's side is hidden
    /// (an opaque or new directory), so that every entry found is new.
    fn walk(&mut self, rel: &Path, host_visible: bool) -> Result<(), ScanError> {
        let dir = self.upper.join(rel);
        for name in names(&dir)? {
            let child = rel.join(&name);
            let upper_path = self.upper.join(&child);
            let Some(up) = Node::read(&upper_path).map_err(io_at(&upper_path))? else {
                continue;
            };
            let host_path = self.lower.join(&child);
            let host = if host_visible {
                Node::read(&host_path).map_err(io_at(&host_path))?
            } else {
                None
            };
            if is_whiteout(&upper_path, &up, self.xattrs) {
                if let Some(host) = host {
                    self.deleted_subtree(&child, host)?;
                }
                continue;
            }
            self.compare(&child, up, host)?;
        }
        Ok(())
    }

    fn compare(&mut self, rel: &Path, up: Node, host: Option<Node>) -> Result<(), ScanError> {
        let upper_path = self.upper.join(rel);
        let Some(host) = host else {
            return self.added_subtree(rel, up);
        };
        match (up.kind, host.kind) {
            (Kind::Dir, Kind::Dir) => {
                let opaque = is_opaque(&upper_path, self.xattrs);
                if up.mode != host.mode {
                    self.push(
                        rel.to_path_buf(),
                        Status::Modified,
                        Some(host.clone()),
                        Some(up),
                    );
                }
                self.walk(rel, true)?;
                if opaque {
                    // The session sees only its own entries here: the host's others are deleted.
                    let ours: BTreeSet<OsString> = names(&upper_path)?.into_iter().collect();
                    self.deleted_children(rel, &ours)?;
                }
                Ok(())
            }
            (up_kind, host_kind) if up_kind == host_kind => {
                let host_path = self.lower.join(rel);
                let same = match up_kind {
                    Kind::File => {
                        up.size == host.size
                            && same_content(&upper_path, &host_path).map_err(io_at(&upper_path))?
                    }
                    Kind::Symlink => up.target == host.target,
                    Kind::CharDevice | Kind::BlockDevice => up.rdev == host.rdev,
                    _ => true,
                };
                if !same || up.mode != host.mode {
                    self.push(rel.to_path_buf(), Status::Modified, Some(host), Some(up));
                }
                Ok(())
            }
            (Kind::Dir, _) => {
                // A host file became a directory: the file is gone, the tree under it is new.
                self.push(
                    rel.to_path_buf(),
                    Status::TypeChanged,
                    Some(host),
                    Some(up.clone()),
                );
                self.walk(rel, false)
            }
            (_, Kind::Dir) => {
                // A host directory became a file: everything in it is gone.
                self.deleted_children(rel, &BTreeSet::new())?;
                self.push(rel.to_path_buf(), Status::TypeChanged, Some(host), Some(up));
                Ok(())
            }
            _ => {
                self.push(rel.to_path_buf(), Status::TypeChanged, Some(host), Some(up));
                Ok(())
            }
        }
    }
}

/// Read the change set of an overlay whose upper layer is `upper` over the host directory `lower`,
/// mounted with its marks in `xattrs`.
pub fn scan(upper: &Path, lower: &Path, xattrs: OverlayXattrs) -> Result<ChangeSet, ScanError> {
    let mut scan = Scan {
        upper,
        lower,
        xattrs,
        changes: Vec::new(),
    };
    let root = Node::read(upper).map_err(io_at(upper))?;
    if root.is_some() {
        scan.walk(Path::new(""), true)?;
    }
    let mut changes = scan.changes;
    changes.sort_by(|a, b| {
        a.path
            .as_os_str()
            .as_encoded_bytes()
            .cmp(b.path.as_os_str().as_encoded_bytes())
    });
    Ok(ChangeSet { changes })
}

impl ChangeSet {
    /// Keep only the changes at or under `paths` (relative to the workspace).
    pub fn filter(&mut self, paths: &[PathBuf]) {
        if paths.is_empty() {
            return;
        }
        self.changes.retain(|change| {
            paths
                .iter()
                .any(|p| p.as_os_str().is_empty() || change.path.starts_with(p))
        });
    }

    pub fn is_empty(&self) -> bool {
        self.changes.is_empty()
    }

    /// Changes a person would count: files, symlinks and special files (not directories).
    pub fn file_count(&self) -> usize {
        self.changes
            .iter()
            .filter(|c| {
                let kind = c.new.as_ref().or(c.old.as_ref()).map(|n| n.kind);
                kind != Some(Kind::Dir)
            })
            .count()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A host directory with two files, and a layer over it where `dir` was deleted and made
    /// anew holding one new file: opaque, if the layer's overlay says so.
    fn replaced_directory() -> (tempfile::TempDir, PathBuf, PathBuf) {
        let root = tempfile::tempdir().unwrap();
        let (host, layer) = (root.path().join("host"), root.path().join("layer"));
        fs::create_dir_all(host.join("dir")).unwrap();
        fs::write(host.join("dir/a"), "a").unwrap();
        fs::write(host.join("dir/b"), "b").unwrap();
        fs::create_dir_all(layer.join("dir")).unwrap();
        fs::write(layer.join("dir/new"), "new").unwrap();
        (root, host, layer)
    }

    fn paths(set: &ChangeSet) -> Vec<(String, Status)> {
        set.changes
            .iter()
            .map(|c| (c.path.to_string_lossy().into_owned(), c.status))
            .collect()
    }

    #[test]
    fn an_opaque_mark_is_read_only_in_the_namespace_the_overlay_used() {
        let (_root, host, layer) = replaced_directory();
        if xattr::set(layer.join("dir"), "user.overlay.opaque", b"y").is_err() {
            eprintln!("skipped: this filesystem takes no user xattrs");
            return;
        }
        // Mounted in a user namespace, the mark is the overlay's: the host's files are gone.
        let user = scan(&layer, &host, OverlayXattrs::User).unwrap();
        assert_eq!(
            paths(&user),
            [
                ("dir/a".to_string(), Status::Deleted),
                ("dir/b".to_string(), Status::Deleted),
                ("dir/new".to_string(), Status::Added),
            ]
        );
        // Mounted the rootful way, a user.overlay.* xattr is what the sandbox wrote on its own
        // directory: content, not structure. Nothing of the host's is deleted.
        let rootful = scan(&layer, &host, OverlayXattrs::Trusted).unwrap();
        assert_eq!(paths(&rootful), [("dir/new".to_string(), Status::Added)]);
    }

    #[test]
    fn a_whiteout_file_is_read_only_in_the_namespace_the_overlay_used() {
        let (_root, host, layer) = replaced_directory();
        fs::remove_file(layer.join("dir/new")).unwrap();
        let mark = layer.join("dir/a");
        fs::write(&mark, "").unwrap();
        if xattr::set(&mark, "user.overlay.whiteout", b"").is_err() {
            eprintln!("skipped: this filesystem takes no user xattrs");
            return;
        }
        let node = Node::read(&mark).unwrap().unwrap();
        assert!(is_whiteout(&mark, &node, OverlayXattrs::User));
        assert!(!is_whiteout(&mark, &node, OverlayXattrs::Trusted));
        let user = scan(&layer, &host, OverlayXattrs::User).unwrap();
        assert_eq!(paths(&user), [("dir/a".to_string(), Status::Deleted)]);
        let rootful = scan(&layer, &host, OverlayXattrs::Trusted).unwrap();
        assert_eq!(paths(&rootful), [("dir/a".to_string(), Status::Modified)]);
    }
}
