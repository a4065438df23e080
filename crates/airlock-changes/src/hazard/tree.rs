//! The tree a session leads to, for the hazards a change has there rather than in its name.

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::path::{Component, Path, PathBuf};

use super::is_one_of;
use crate::node::Kind;
use crate::scan::Change;

/// The tree a session leads to (its layer over the host workspace), for the hazards a change has
/// there rather than in its name: it lies in a directory laid out as a git directory (`HEAD` and
/// `config` files and an `objects` directory, which git takes for a repository, a bare one or
/// the one a `.git` file names, whatever its name: it reads its config and runs its hooks), or
/// its text drives a terminal. Answers about directories are kept: a change set asks about the
/// same ones many times.
pub struct Tree<'a> {
    layer: &'a Path,
    host: &'a Path,
    /// Directories that are git directories themselves.
    git_dirs: RefCell<HashMap<PathBuf, bool>>,
    /// Directories that are, or lie in, a git directory.
    within: RefCell<HashMap<PathBuf, bool>>,
    /// Directories of the layer reached without a symlink on the way.
    plain: RefCell<HashMap<PathBuf, bool>>,
    /// Directories a `commondir` file of the change set names: git reads their config too.
    common_dirs: HashSet<PathBuf>,
}

/// The most of a `commondir` file read: a path.
const COMMONDIR_BYTES: u64 = 4096;

impl<'a> Tree<'a> {
    /// The tree `changes` (of `layer` over `host`) lead to.
    pub fn new(layer: &'a Path, host: &'a Path, changes: &[Change]) -> Tree<'a> {
        let mut tree = Tree {
            layer,
            host,
            git_dirs: RefCell::default(),
            within: RefCell::default(),
            plain: RefCell::default(),
            common_dirs: HashSet::new(),
        };
        tree.common_dirs = changes
            .iter()
            .filter(|c| {
                c.path
                    .file_name()
                    .is_some_and(|n| is_one_of(n, &["commondir"]))
            })
            .filter_map(|c| tree.named_by_commondir(&c.path))
            .collect();
        tree
    }

    /// The workspace directory a `commondir` file at `path` names, when it names one by a
    /// relative path that stays in the workspace.
    fn named_by_commondir(&self, path: &Path) -> Option<PathBuf> {
        let dir = path.parent()?;
        if !self.is_plain(dir) {
            return None;
        }
        let file = crate::node::open_regular(&self.layer.join(path)).ok()?;
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::Read::take(file, COMMONDIR_BYTES), &mut text)
            .ok()?;
        let named = Path::new(text.trim_end_matches(['\n', '\r']));
        if named.is_absolute() {
            return None;
        }
        let mut target = PathBuf::new();
        for component in dir.join(named).components() {
            match component {
                Component::Normal(name) => target.push(name),
                Component::ParentDir if !target.pop() => return None,
                _ => {}
            }
        }
        Some(target)
    }

    /// Is the file the session made at `path` text that drives a terminal? Binary files (a NUL in
    /// the first 8000 bytes, as git decides) are shown by a patch as binary, not raw.
    pub fn drives_a_terminal(&self, path: &Path) -> bool {
        let Ok(mut file) = crate::node::open_regular(&self.layer.join(path)) else {
            return false;
        };
        let mut data = Vec::new();
        if std::io::Read::read_to_end(&mut file, &mut data).is_err() {
            return false;
        }
        let head = &data[..data.len().min(8000)];
        !head.contains(&0) && has_terminal_controls(&data)
    }

    /// Does `path` (relative to the workspace) lie in, or is it, a git directory? The workspace
    /// itself counts too: made into one, git would take it for a bare repository. Each
    /// directory is judged once, however deep the tree.
    pub fn contains(&self, path: &Path) -> bool {
        // The nearest ancestor already judged, then those below it, top down.
        let mut unjudged = Vec::new();
        let mut answer = false;
        for dir in path.ancestors() {
            if let Some(known) = self.within.borrow().get(dir) {
                answer = *known;
                break;
            }
            unjudged.push(dir);
        }
        for dir in unjudged.into_iter().rev() {
            answer = answer || self.is_git_dir(dir);
            self.within.borrow_mut().insert(dir.to_path_buf(), answer);
        }
        answer
    }

    /// git's own test (`is_git_directory`), taken broadly: a `HEAD` of any kind (a symlink to a
    /// ref is one) with an `objects` of any kind (a symlink, even to `.`), or any directory with
    /// a `commondir` or `gitdir` file (a linked worktree's, whose objects and config live where
    /// it points); and every directory a `commondir` of the change set names. A `config` is not
    /// needed: git reads one where there is one.
    fn is_git_dir(&self, dir: &Path) -> bool {
        if let Some(known) = self.git_dirs.borrow().get(dir) {
            return *known;
        }
        let has = |name: &str| self.kind_of(&dir.join(name)).is_some();
        let linked = has("commondir") || has("gitdir");
        let answer = self.common_dirs.contains(dir) || linked || has("HEAD") && has("objects");
        self.git_dirs.borrow_mut().insert(dir.to_path_buf(), answer);
        answer
    }

    /// Is the layer's `dir` reached from the layer's root without a symlink? SECURITY: the layer
    /// is the sandbox's writing: no symlink of it is followed. Each directory is looked at once.
    fn is_plain(&self, dir: &Path) -> bool {
        let mut unjudged = Vec::new();
        let mut answer = true;
        for ancestor in dir.ancestors() {
            if ancestor.as_os_str().is_empty() {
                break;
            }
            if let Some(known) = self.plain.borrow().get(ancestor) {
                answer = *known;
                break;
            }
            unjudged.push(ancestor);
        }
        for ancestor in unjudged.into_iter().rev() {
            answer = answer
                && !std::fs::symlink_metadata(self.layer.join(ancestor))
                    .is_ok_and(|meta| meta.file_type().is_symlink());
            self.plain
                .borrow_mut()
                .insert(ancestor.to_path_buf(), answer);
        }
        answer
    }

    /// What is at `path` in the tree the session leads to: the layer's entry (a whiteout is
    /// nothing), else the host's. An opaque directory of the layer is not looked through: at
    /// worst a host entry it hides counts, which only ever adds a hazard.
    fn kind_of(&self, path: &Path) -> Option<Kind> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let kind = |meta: std::fs::Metadata| {
            let kind = meta.file_type();
            if kind.is_dir() {
                Kind::Dir
            } else if kind.is_file() {
                Kind::File
            } else {
                Kind::Symlink
            }
        };
        if !self.is_plain(path.parent().unwrap_or(Path::new(""))) {
            return None;
        }
        match std::fs::symlink_metadata(self.layer.join(path)) {
            Ok(meta) if meta.file_type().is_char_device() && meta.rdev() == 0 => None,
            Ok(meta) => Some(kind(meta)),
            Err(_) => std::fs::symlink_metadata(self.host.join(path))
                .ok()
                .map(kind),
        }
    }
}

/// Control characters in text that a terminal acts on: ESC and the other C0 controls but tab,
/// newline and form feed; a carriage return not followed by a newline (it rewrites its line);
/// DEL; the C1 controls (CSI is U+009B), as UTF-8 and, in text that is not UTF-8, as the single
/// bytes a terminal in 8-bit mode takes them for.
pub fn has_terminal_controls(data: &[u8]) -> bool {
    let c0 = data.iter().enumerate().any(|(i, &b)| match b {
        b'\t' | b'\n' | 0x0c => false,
        b'\r' => data.get(i + 1) != Some(&b'\n'),
        0x00..=0x1f | 0x7f => true,
        _ => false,
    });
    let c1 = match std::str::from_utf8(data) {
        Ok(text) => text.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c)),
        Err(_) => data.iter().any(|b| (0x80..=0x9f).contains(b)),
    };
    c0 || c1
}
