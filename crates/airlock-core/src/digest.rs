//! A change set judged once for review and apply alike: each change's verdict, the ignored tree
//! it lies in, and its fingerprint; the digest of the whole set, which a person's review names
//! and an apply compares (it writes the set reviewed, or nothing); and the ignored trees as the
//! one row each a person reads.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};

use airlock_changes::hazard::{Review, Verdict};
use airlock_changes::{Change, Hazard, Kind, Node};
use serde::Serialize;
use sha2::{Digest, Sha256};

/// Paths listed by name in a tree's summary; the counts say how many there are in all.
pub const TREE_LIST_MAX: usize = 20;

/// One change as judged for review and apply.
#[derive(Debug, Clone)]
pub struct Judged {
    pub verdict: Verdict,
    /// The ignored tree whose row it is ([`Review::tree_root`], when [`foldable`]).
    pub tree: Option<PathBuf>,
    /// The ignored tree it lies in although it is a row of its own (a hook, an agent's file…):
    /// naming that tree does not name it.
    pub kept_out_of: Option<PathBuf>,
    /// sha256 of what an apply would make of it (see [`fingerprint`]).
    pub fingerprint: [u8; 32],
}

/// Judge every change of `changes` (a whole set, of `layer`) with `review`.
pub fn judge_all(layer: &Path, changes: &[Change], review: &Review) -> io::Result<Vec<Judged>> {
    changes
        .iter()
        .map(|change| {
            let verdict = review.judge(change);
            let lies_in = review.tree_root(change);
            let (tree, kept_out_of) = match lies_in {
                Some(root) if foldable(&root, &verdict) => (Some(root), None),
                other => (None, other),
            };
            let fingerprint = fingerprint(layer, change, &verdict, tree.as_deref())?;
            Ok(Judged {
                verdict,
                tree,
                kept_out_of,
                fingerprint,
            })
        })
        .collect()
}

/// Whether a change may be one of its tree's row rather than a row of its own: never under a
/// `.git` directory (its hooks and config run on the next git command, whatever the ignore
/// rules say), and only with hazards a build or a virtualenv brings by the thousand (content git
/// does not show that runs, a symlink out to the system's python, a large file) or that are
/// never written (setuid bits, a device, a confusable name: they hold the whole tree back). A
/// hook, a configuration that runs code, an agent's instructions: each stays its own row,
/// applied only when named itself — naming the tree does not name it.
fn foldable(root: &Path, verdict: &Verdict) -> bool {
    let under_git = root
        .components()
        .any(|part| part.as_os_str().eq_ignore_ascii_case(".git"));
    !under_git
        && verdict.hazards.iter().all(|hazard| {
            matches!(
                hazard,
                Hazard::HiddenFromGit
                    | Hazard::SymlinkOutside
                    | Hazard::Large
                    | Hazard::SetId
                    | Hazard::Device
                    | Hazard::ConfusableName
            )
        })
}

/// sha256 of one change as an apply would write it and a person was told about it: its path,
/// what happened to it, the session's side (kind, mode, and the content: a file's bytes, a
/// symlink's target, a device's number), whether git ignores it and the tree it lies in, and its
/// hazards. Fields end in NUL, which no path or target holds. The host's side is left out: a
/// host that changed meanwhile is apply's conflict to find, path by path.
pub fn fingerprint(
    layer: &Path,
    change: &Change,
    verdict: &Verdict,
    tree: Option<&Path>,
) -> io::Result<[u8; 32]> {
    let mut hash = Sha256::new();
    let mut field = |bytes: &[u8]| {
        hash.update(bytes);
        hash.update([0]);
    };
    field(change.path.as_os_str().as_encoded_bytes());
    field(&[change.status.letter() as u8]);
    match &change.new {
        None => field(b"absent"),
        Some(node) => {
            field(serde_name(node.kind).as_bytes());
            field(format!("{:04o}", node.mode).as_bytes());
            field(&content(layer, &change.path, node)?);
        }
    }
    field(if verdict.ignored {
        b"ignored"
    } else {
        b"shown"
    });
    field(tree.map_or(&b""[..], |t| t.as_os_str().as_encoded_bytes()));
    let hazards: Vec<String> = verdict.hazards.iter().map(|h| hazard_name(*h)).collect();
    field(hazards.join(",").as_bytes());
    Ok(hash.finalize().into())
}

/// What a node holds besides its kind and mode.
fn content(layer: &Path, path: &Path, node: &Node) -> io::Result<Vec<u8>> {
    Ok(match node.kind {
        Kind::File => {
            let mut file = airlock_changes::node::open_regular(&layer.join(path))?;
            let mut hasher = Sha256::new();
            io::copy(&mut file, &mut hasher)?;
            hex::encode(hasher.finalize()).into_bytes()
        }
        Kind::Symlink => node
            .target
            .as_ref()
            .map(|t| t.as_encoded_bytes().to_vec())
            .unwrap_or_default(),
        Kind::CharDevice | Kind::BlockDevice => node.rdev.to_string().into_bytes(),
        Kind::Dir | Kind::Fifo | Kind::Socket => Vec::new(),
    })
}

/// The name serde gives a unit variant (`char_device`, `hidden_from_git`): the one JSON says.
fn serde_name(value: impl Serialize) -> String {
    match serde_json::to_value(value) {
        Ok(serde_json::Value::String(name)) => name,
        _ => String::new(),
    }
}

/// A hazard's name as the JSON says it (`hidden_from_git`).
pub fn hazard_name(hazard: Hazard) -> String {
    serde_name(hazard)
}

/// The digest of a change set: `sha256:` and the hex of sha256 over a version line and the
/// fingerprints of its changes in path order. With `no_ignored`, of the set without what git
/// ignores, as `diff --no-ignored` shows it and `apply --no-ignored` writes it. Paths named to
/// show or apply part of it do not narrow it: a review covers the whole set.
pub fn set_digest(judged: &[Judged], no_ignored: bool) -> String {
    let mut hash = Sha256::new();
    hash.update(b"airlock change set v1\n");
    for change in judged {
        if no_ignored && change.verdict.ignored {
            continue;
        }
        hash.update(change.fingerprint);
    }
    format!("sha256:{}", hex::encode(hash.finalize()))
}

/// A tree git ignores (`node_modules/`, `.venv/`, `target/`), as the one row a person reviews.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TreeSummary {
    /// Its top directory, relative to the workspace (no trailing slash).
    pub root: String,
    /// Changed entries that are not directories (files, symlinks, special files).
    pub files: usize,
    pub dirs: usize,
    /// Of all its changes, those that delete a host entry.
    pub deleted: usize,
    /// Bytes of the regular files the session's side holds.
    pub bytes: u64,
    /// Regular files with an execute bit.
    pub executables: usize,
    /// The first of them, in path order (at most [`TREE_LIST_MAX`]).
    pub executable_paths: Vec<String>,
    /// Changes with at least one hazard.
    pub hazards: usize,
    /// How many changes have each hazard.
    pub hazard_counts: BTreeMap<String, usize>,
    /// The first hazardous changes, in path order (at most [`TREE_LIST_MAX`]).
    pub hazard_paths: Vec<TreeHazard>,
    /// sha256 of its changes' fingerprints: what a shown diff remembers of the tree.
    pub digest: String,
}

#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct TreeHazard {
    pub path: String,
    pub hazards: Vec<Hazard>,
}

/// The ignored trees of a judged set (`judged[i]` of `changes[i]`), in path order of their roots.
pub fn trees(changes: &[Change], judged: &[Judged]) -> Vec<TreeSummary> {
    let mut grouped: BTreeMap<&Path, Vec<usize>> = BTreeMap::new();
    for (i, j) in judged.iter().enumerate() {
        if let Some(root) = &j.tree {
            grouped.entry(root.as_path()).or_default().push(i);
        }
    }
    grouped
        .into_iter()
        .map(|(root, members)| summarize(root, &members, changes, judged))
        .collect()
}

fn summarize(root: &Path, members: &[usize], changes: &[Change], judged: &[Judged]) -> TreeSummary {
    let mut tree = TreeSummary {
        root: root.to_string_lossy().into_owned(),
        files: 0,
        dirs: 0,
        deleted: 0,
        bytes: 0,
        executables: 0,
        executable_paths: Vec::new(),
        hazards: 0,
        hazard_counts: BTreeMap::new(),
        hazard_paths: Vec::new(),
        digest: String::new(),
    };
    let mut hash = Sha256::new();
    for &i in members {
        let (change, judged) = (&changes[i], &judged[i]);
        hash.update(judged.fingerprint);
        let path = change.path.to_string_lossy().into_owned();
        let kind = change.new.as_ref().or(change.old.as_ref()).map(|n| n.kind);
        match kind {
            Some(Kind::Dir) => tree.dirs += 1,
            _ => tree.files += 1,
        }
        if change.new.is_none() {
            tree.deleted += 1;
        }
        if let Some(new) = change.new.as_ref().filter(|n| n.kind == Kind::File) {
            tree.bytes = tree.bytes.saturating_add(new.size);
            if new.mode & 0o111 != 0 {
                tree.executables += 1;
                if tree.executable_paths.len() < TREE_LIST_MAX {
                    tree.executable_paths.push(path.clone());
                }
            }
        }
        let hazards = &judged.verdict.hazards;
        if !hazards.is_empty() {
            tree.hazards += 1;
            for hazard in hazards {
                *tree.hazard_counts.entry(hazard_name(*hazard)).or_default() += 1;
            }
            if tree.hazard_paths.len() < TREE_LIST_MAX {
                tree.hazard_paths.push(TreeHazard {
                    path,
                    hazards: hazards.clone(),
                });
            }
        }
    }
    tree.digest = format!("sha256:{}", hex::encode(hash.finalize()));
    tree
}

#[cfg(test)]
mod tests {
    use super::*;
    use airlock_changes::hazard::Setup;
    use std::os::unix::fs::PermissionsExt;

    /// The digest of `layer` over `host`, judged as diff and apply judge it.
    fn digest_of(layer: &Path, host: &Path) -> String {
        let set = airlock_changes::scan(layer, host, airlock_changes::OverlayXattrs::User).unwrap();
        let setup = Setup {
            size_limit: u64::MAX,
            ..Setup::default()
        };
        let review = Review::new(layer, host, &set.changes, setup).unwrap();
        set_digest(&judge_all(layer, &set.changes, &review).unwrap(), false)
    }

    fn sides() -> (tempfile::TempDir, tempfile::TempDir) {
        let host = tempfile::tempdir().unwrap();
        let layer = tempfile::tempdir().unwrap();
        std::fs::write(host.path().join("a.txt"), "old\n").unwrap();
        std::fs::write(layer.path().join("a.txt"), "new\n").unwrap();
        std::fs::write(layer.path().join("b.sh"), "echo b\n").unwrap();
        (host, layer)
    }

    #[test]
    fn the_digest_is_stable_and_names_its_hash() {
        let (host, layer) = sides();
        let first = digest_of(layer.path(), host.path());
        assert!(
            first.starts_with("sha256:") && first.len() == 7 + 64,
            "{first}"
        );
        assert_eq!(digest_of(layer.path(), host.path()), first);
        // Another layer with the same changes has the same digest.
        let again = tempfile::tempdir().unwrap();
        std::fs::write(again.path().join("a.txt"), "new\n").unwrap();
        std::fs::write(again.path().join("b.sh"), "echo b\n").unwrap();
        assert_eq!(digest_of(again.path(), host.path()), first);
    }

    #[test]
    fn the_digest_changes_with_content_mode_and_new_paths() {
        let (host, layer) = sides();
        let (h, l) = (host.path(), layer.path());
        let mut seen = vec![digest_of(l, h)];
        let differs = |what: &str, seen: &mut Vec<String>| {
            let now = digest_of(l, h);
            assert!(!seen.contains(&now), "{what}: the digest did not change");
            seen.push(now);
        };
        std::fs::write(l.join("a.txt"), "newer\n").unwrap();
        differs("content", &mut seen);
        std::fs::set_permissions(l.join("b.sh"), std::fs::Permissions::from_mode(0o755)).unwrap();
        differs("mode", &mut seen);
        std::fs::write(l.join("c.txt"), "").unwrap();
        differs("a new file", &mut seen);
        std::os::unix::fs::symlink("a.txt", l.join("link")).unwrap();
        differs("a symlink", &mut seen);
        std::fs::remove_file(l.join("link")).unwrap();
        std::os::unix::fs::symlink("b.sh", l.join("link")).unwrap();
        differs("a symlink's target", &mut seen);
    }

    #[test]
    fn a_tree_is_summarized_with_bounded_lists() {
        let host = tempfile::tempdir().unwrap();
        let layer = tempfile::tempdir().unwrap();
        let (h, l) = (host.path(), layer.path());
        std::fs::create_dir(h.join(".git")).unwrap();
        std::fs::write(h.join(".gitignore"), ".venv/\n").unwrap();
        std::fs::create_dir_all(l.join(".venv/bin")).unwrap();
        for i in 0..(TREE_LIST_MAX + 5) {
            let tool = l.join(format!(".venv/bin/tool{i:02}"));
            std::fs::write(&tool, "#!/bin/sh\n").unwrap();
            std::fs::set_permissions(&tool, std::fs::Permissions::from_mode(0o755)).unwrap();
        }
        std::fs::write(l.join(".venv/pyvenv.cfg"), "home = /usr\n").unwrap();
        std::fs::write(l.join("main.py"), "print()\n").unwrap();
        let set = airlock_changes::scan(l, h, airlock_changes::OverlayXattrs::User).unwrap();
        let review = Review::new(l, h, &set.changes, Setup::default()).unwrap();
        let judged = judge_all(l, &set.changes, &review).unwrap();
        let trees = trees(&set.changes, &judged);
        assert_eq!(trees.len(), 1, "{trees:#?}");
        let venv = &trees[0];
        assert_eq!(venv.root, ".venv");
        assert_eq!((venv.files, venv.dirs), (TREE_LIST_MAX + 6, 2));
        assert_eq!(venv.executables, TREE_LIST_MAX + 5);
        assert_eq!(venv.executable_paths.len(), TREE_LIST_MAX);
        // Every file in a virtualenv is where Python runs code from: pyvenv.cfg too.
        assert_eq!(venv.hazard_counts["hidden_from_git"], TREE_LIST_MAX + 6);
        assert_eq!(venv.hazard_paths.len(), TREE_LIST_MAX);
        let main = set
            .changes
            .iter()
            .position(|c| c.path == Path::new("main.py"));
        assert_eq!(judged[main.unwrap()].tree, None);
    }
}
