//! New names that are an existing host name to a case-insensitive or normalising reader: on
//! macOS, Windows or a case-folding ext4 directory the two are one file, and tools that look
//! for several spellings pick one (GNU make reads `makefile` before `Makefile`).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::path::{Path, PathBuf};

use caseless::Caseless;
use unicode_normalization::UnicodeNormalization;

/// The host workspace's names, as a case-insensitive and normalising filesystem compares them.
pub struct Collisions<'a> {
    host: &'a Path,
    /// The folded names of each host directory asked about.
    folded: RefCell<HashMap<PathBuf, HashSet<String>>>,
    /// Directories the host does not have, judged: each once, however deep the tree.
    new_dirs: RefCell<HashMap<PathBuf, bool>>,
    /// The new names asked about so far, by directory and folded name: two new spellings of one
    /// name collide with each other as much as with the host's.
    new_names: RefCell<HashMap<PathBuf, HashMap<String, PathBuf>>>,
    /// The confusable skeletons of each host directory's names asked about, each with the
    /// folded names that have it.
    skeletons: RefCell<HashMap<PathBuf, Skeletons>>,
    /// New paths judged by [`Collisions::looks_like_a_host_name`].
    lookalikes: RefCell<HashMap<PathBuf, bool>>,
}

type Skeletons = HashMap<String, HashSet<String>>;

impl<'a> Collisions<'a> {
    pub fn new(host: &'a Path) -> Collisions<'a> {
        Collisions {
            host,
            folded: RefCell::default(),
            new_dirs: RefCell::default(),
            new_names: RefCell::default(),
            skeletons: RefCell::default(),
            lookalikes: RefCell::default(),
        }
    }

    /// Does `path`, or a directory on its way that the host does not have, take a name that is
    /// not ASCII and looks like another name of the host's directory (`maіn.rs` with a Cyrillic
    /// `і` beside `main.rs`): the same confusable skeleton, another name once folded?
    pub fn looks_like_a_host_name(&self, path: &Path) -> bool {
        path.ancestors()
            .filter(|p| !p.as_os_str().is_empty())
            .any(|p| self.name_looks_like_a_sibling(p))
    }

    fn name_looks_like_a_sibling(&self, path: &Path) -> bool {
        if let Some(known) = self.lookalikes.borrow().get(path) {
            return *known;
        }
        let dir = path.parent().unwrap_or(Path::new(""));
        let name = path
            .file_name()
            .filter(|name| name.to_str().is_some_and(|n| !n.is_ascii()));
        let folded = name
            .and_then(fold)
            .zip(name.and_then(super::confusable::keys_of));
        let answer = match folded {
            Some((folded, keys)) if !self.host_has(path) => {
                let mut skeletons = self.skeletons.borrow_mut();
                let names = skeletons
                    .entry(dir.to_path_buf())
                    .or_insert_with(|| self.skeletons_of(dir));
                keys.iter().any(|key| {
                    names
                        .get(key)
                        .is_some_and(|same| same.iter().any(|other| *other != folded))
                })
            }
            _ => false,
        };
        self.lookalikes
            .borrow_mut()
            .insert(path.to_path_buf(), answer);
        answer
    }

    /// The skeletons of the names of the host's `dir` (none when it has no such directory).
    fn skeletons_of(&self, dir: &Path) -> Skeletons {
        let mut skeletons = Skeletons::new();
        let names = std::fs::read_dir(self.host.join(dir))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name();
                fold(&name).zip(super::confusable::keys_of(&name))
            });
        for (name, keys) in names {
            for key in keys {
                skeletons.entry(key).or_default().insert(name.clone());
            }
        }
        skeletons
    }

    /// Does `path` (relative to the workspace), or the first directory on its way that the host
    /// does not have, take a name that folds to one the host's directory already has, or to
    /// another new name asked about before? (Of two new spellings the second is the hazard:
    /// refused, it leaves the first alone on the host.)
    pub fn collides(&self, path: &Path) -> bool {
        let (Some(dir), Some(name)) = (path.parent(), path.file_name()) else {
            return false;
        };
        if self.host_has(path) {
            return false;
        }
        if self.folds_to_another_new_name(dir, name, path) {
            return true;
        }
        if dir.as_os_str().is_empty() || self.host_has(dir) {
            return self.folds_to_a_host_name(dir, name);
        }
        // A directory new to the host: its own name decides, once.
        if let Some(known) = self.new_dirs.borrow().get(dir) {
            return *known;
        }
        let answer = self.collides(dir);
        self.new_dirs.borrow_mut().insert(dir.to_path_buf(), answer);
        answer
    }

    fn folds_to_another_new_name(&self, dir: &Path, name: &OsStr, path: &Path) -> bool {
        let Some(key) = fold(name) else {
            return false;
        };
        let mut new_names = self.new_names.borrow_mut();
        let first = new_names
            .entry(dir.to_path_buf())
            .or_default()
            .entry(key)
            .or_insert_with(|| path.to_path_buf());
        first.as_path() != path
    }

    fn host_has(&self, path: &Path) -> bool {
        std::fs::symlink_metadata(self.host.join(path)).is_ok()
    }

    fn folds_to_a_host_name(&self, dir: &Path, name: &OsStr) -> bool {
        let Some(key) = fold(name) else {
            return false;
        };
        if let Some(names) = self.folded.borrow().get(dir) {
            return names.contains(&key);
        }
        let names: HashSet<String> = std::fs::read_dir(self.host.join(dir))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| fold(&entry.file_name()))
            .collect();
        let answer = names.contains(&key);
        self.folded.borrow_mut().insert(dir.to_path_buf(), names);
        answer
    }
}

/// A name in Unicode's canonical caseless form (NFD, full case folding, NFD again: `café` in
/// NFC and NFD, `Makefile` and `makefile`, `STRASSE` and `straße` are one), the code points HFS+
/// ignores left out. Not UTF-8: compared as it is, so it collides with nothing but itself.
fn fold(name: &OsStr) -> Option<String> {
    let text = name.to_str()?;
    Some(
        text.chars()
            .filter(|c| !super::is_hfs_ignorable(*c))
            .nfd()
            .default_case_fold()
            .nfd()
            .collect(),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_that_fold_together() {
        let key = |s: &str| fold(OsStr::new(s)).unwrap();
        assert_eq!(key("Makefile"), key("makefile"));
        assert_eq!(key("caf\u{e9}"), key("cafe\u{301}"));
        assert_eq!(key("STRASSE"), key("stra\u{df}e"));
        assert_eq!(key("CAF\u{c9}"), key("cafe\u{301}"));
        assert_ne!(key("Makefile"), key("Makefile.am"));
    }

    #[test]
    fn a_new_name_beside_its_other_spelling_collides() {
        let host = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("Makefile"), "").unwrap();
        std::fs::create_dir(host.path().join("src")).unwrap();
        std::fs::write(host.path().join("src/caf\u{e9}.txt"), "").unwrap();
        let names = Collisions::new(host.path());
        assert!(names.collides(Path::new("makefile")));
        assert!(names.collides(Path::new("src/cafe\u{301}.txt")));
        assert!(names.collides(Path::new("SRC/new.c")));
        // The host's own names, and new ones that fold to nothing there.
        assert!(!names.collides(Path::new("Makefile")));
        assert!(!names.collides(Path::new("src/caf\u{e9}.txt")));
        assert!(!names.collides(Path::new("src/other.c")));
        assert!(!names.collides(Path::new("new/Makefile")));
    }

    #[test]
    fn a_new_name_that_looks_like_a_host_name_beside_it() {
        let host = tempfile::tempdir().unwrap();
        std::fs::create_dir(host.path().join("src")).unwrap();
        std::fs::write(host.path().join("src/main.rs"), "").unwrap();
        let names = Collisions::new(host.path());
        // A Cyrillic i, in the name and in a new directory on the way.
        assert!(names.looks_like_a_host_name(Path::new("src/ma\u{456}n.rs")));
        assert!(names.looks_like_a_host_name(Path::new("sr\u{441}/x.rs")));
        // Capitals whose small letters look like nothing Latin.
        assert!(names.looks_like_a_host_name(Path::new("src/\u{41c}\u{430}in.rs")));
        assert!(names.looks_like_a_host_name(Path::new("src/\u{41c}AIN.rs")));
        // The host's own name, a plain new name, one that only folds to it (another hazard).
        assert!(!names.looks_like_a_host_name(Path::new("src/main.rs")));
        assert!(!names.looks_like_a_host_name(Path::new("src/lib.rs")));
        assert!(!names.looks_like_a_host_name(Path::new("src/MAIN.rs")));
        assert!(!names.looks_like_a_host_name(Path::new("src/caf\u{e9}.rs")));
        assert!(!names.looks_like_a_host_name(Path::new("new/ma\u{456}n.rs")));
    }

    #[test]
    fn two_new_spellings_of_one_name_collide_with_each_other() {
        let host = tempfile::tempdir().unwrap();
        let names = Collisions::new(host.path());
        assert!(!names.collides(Path::new("sub/Makefile")));
        // Asked again (a directory's children, a second look): still the first spelling.
        assert!(!names.collides(Path::new("sub/Makefile")));
        assert!(names.collides(Path::new("sub/makefile")));
        assert!(names.collides(Path::new("SUB/other")));
        assert!(!names.collides(Path::new("sub/other")));
        assert!(!names.collides(Path::new("elsewhere/makefile")));
    }
}
