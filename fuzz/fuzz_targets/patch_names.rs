//! The patch writer (`airlock_changes::patch::write_patch`) with names of any bytes and every
//! mode git records: the patch it writes for a session's layer over a host directory, applied
//! there by `git apply`, makes the host what the session made it (the same names, contents,
//! symlinks and executable bits), or git refuses it for a path git itself never writes.
#![no_main]

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fs;
use std::io::Write;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use airlock_changes::patch::{write_patch, Roots};
use libfuzzer_sys::fuzz_target;

/// What one side holds at a path.
#[derive(Debug, Clone, PartialEq, Eq)]
enum Entry {
    File {
        exec: bool,
        data: Vec<u8>,
    },
    Symlink(Vec<u8>),
    /// The session deleted it (only in the layer).
    Whiteout,
}

/// A tiny reader of the fuzzer's bytes.
struct Bytes<'a>(&'a [u8]);

impl Bytes<'_> {
    fn byte(&mut self) -> Option<u8> {
        let (&b, rest) = self.0.split_first()?;
        self.0 = rest;
        Some(b)
    }
    fn take(&mut self, max: u8) -> Vec<u8> {
        let n = usize::from(self.byte().unwrap_or(0) % max).min(self.0.len());
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        taken.to_vec()
    }
}

/// A relative path of plain components (no empty, `.` or `..` one, no NUL), or None.
fn relative(name: &[u8]) -> Option<PathBuf> {
    let parts: Vec<&[u8]> = name.split(|&b| b == b'/').collect();
    let plain = |p: &&[u8]| !p.is_empty() && *p != b"." && *p != b".." && !p.contains(&0);
    (!parts.is_empty() && parts.iter().all(plain)).then(|| PathBuf::from(OsStr::from_bytes(name)))
}

/// A symlink target that stays in its directory (the harness must not write through it).
fn target(data: &[u8]) -> Vec<u8> {
    let t: Vec<u8> = data
        .iter()
        .copied()
        .filter(|&b| b != 0 && b != b'/')
        .collect();
    if t.is_empty() || t == b"." || t == b".." {
        b"t".to_vec()
    } else {
        t
    }
}

/// Make the parent directories of `rel` under `root`: None if one exists as a non-directory
/// (the harness never goes through a symlink) or `rel` itself exists.
fn parents(root: &Path, rel: &Path) -> Option<()> {
    let mut at = root.to_path_buf();
    let components: Vec<_> = rel.components().collect();
    for part in &components[..components.len() - 1] {
        at.push(part);
        match fs::symlink_metadata(&at) {
            Ok(meta) if meta.is_dir() => {}
            Ok(_) => return None,
            Err(_) => fs::create_dir(&at).ok()?,
        }
    }
    fs::symlink_metadata(root.join(rel)).is_err().then_some(())
}

fn plant(root: &Path, rel: &Path, entry: &Entry) -> Option<()> {
    parents(root, rel)?;
    let path = root.join(rel);
    match entry {
        Entry::File { exec, data } => {
            fs::File::create_new(&path).ok()?.write_all(data).ok()?;
            let mode = if *exec { 0o755 } else { 0o644 };
            fs::set_permissions(&path, fs::Permissions::from_mode(mode)).ok()?;
        }
        Entry::Symlink(to) => std::os::unix::fs::symlink(OsStr::from_bytes(to), &path).ok()?,
        Entry::Whiteout => nix::sys::stat::mknod(
            &path,
            nix::sys::stat::SFlag::S_IFCHR,
            nix::sys::stat::Mode::empty(),
            0,
        )
        .ok()?,
    }
    Some(())
}

/// Every file and symlink under `root`, by path.
fn tree(root: &Path, rel: &Path, out: &mut BTreeMap<PathBuf, Entry>) {
    let Ok(dir) = fs::read_dir(root.join(rel)) else {
        return;
    };
    for item in dir.flatten() {
        let child = rel.join(item.file_name());
        let path = root.join(&child);
        let Ok(meta) = fs::symlink_metadata(&path) else {
            continue;
        };
        if meta.is_dir() {
            tree(root, &child, out);
        } else if meta.file_type().is_symlink() {
            let to = fs::read_link(&path).unwrap_or_default();
            out.insert(child, Entry::Symlink(to.as_os_str().as_bytes().to_vec()));
        } else if meta.is_file() {
            let data = fs::read(&path).unwrap_or_default();
            let exec = meta.permissions().mode() & 0o100 != 0;
            out.insert(child, Entry::File { exec, data });
        }
    }
}

fn entry(kind: u8, data: Vec<u8>) -> Entry {
    match kind & 3 {
        0 => Entry::Whiteout,
        1 => Entry::File { exec: false, data },
        2 => Entry::File { exec: true, data },
        _ => Entry::Symlink(target(&data)),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Bytes(data);
    let mut host: Vec<(PathBuf, Entry)> = Vec::new();
    let mut layer: Vec<(PathBuf, Entry)> = Vec::new();
    for _ in 0..4 {
        let Some(flags) = input.byte() else { break };
        let Some(rel) = relative(&input.take(24)) else {
            continue;
        };
        let content = input.take(40);
        if flags & 4 != 0 {
            let old = entry(flags | 1, content.clone()); // never a whiteout on the host
            host.push((rel.clone(), old));
        }
        let new_content = if flags & 32 != 0 {
            content
        } else {
            input.take(40)
        };
        layer.push((rel, entry(flags >> 3, new_content)));
    }
    let base = if Path::new("/dev/shm").is_dir() {
        "/dev/shm"
    } else {
        "/tmp"
    };
    let dir = tempfile::Builder::new()
        .prefix("airlock-fuzz-")
        .tempdir_in(base)
        .unwrap();
    let (host_root, layer_root) = (dir.path().join("host"), dir.path().join("layer"));
    fs::create_dir(&host_root).unwrap();
    fs::create_dir(&layer_root).unwrap();
    host.retain(|(rel, e)| plant(&host_root, rel, e).is_some());
    // A layer entry under what the host has as a non-directory would need an opaque
    // directory: not what this target is about.
    layer.retain(|(rel, e)| {
        let under_host_file = rel.ancestors().skip(1).any(|a| {
            !a.as_os_str().is_empty()
                && fs::symlink_metadata(host_root.join(a)).is_ok_and(|m| !m.is_dir())
        });
        !under_host_file && plant(&layer_root, rel, e).is_some()
    });
    let mut before = BTreeMap::new();
    tree(&host_root, Path::new(""), &mut before);
    let mut expected = before.clone();
    for (rel, e) in &layer {
        expected.retain(|path, _| !path.starts_with(rel));
        if *e != Entry::Whiteout {
            expected.insert(rel.clone(), e.clone());
        }
    }
    // Whiteouts here are 0/0 character devices, which either xattr namespace reads alike.
    let changes = airlock_changes::scan(
        &layer_root,
        &host_root,
        airlock_changes::OverlayXattrs::Trusted,
    )
    .unwrap()
    .changes;
    let roots = Roots {
        host: &host_root,
        layer: &layer_root,
    };
    let mut patch = Vec::new();
    write_patch(&mut patch, roots, &changes).unwrap();
    if patch.is_empty() {
        assert_eq!(expected, before, "no patch for a change");
        return;
    }
    let mut git = Command::new("git")
        .args(["apply", "--whitespace=nowarn", "-"])
        .current_dir(&host_root)
        .env("GIT_CEILING_DIRECTORIES", dir.path())
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    git.stdin.take().unwrap().write_all(&patch).unwrap();
    let result = git.wait_with_output().unwrap();
    let shown = String::from_utf8_lossy(&patch);
    if !result.status.success() {
        let why = String::from_utf8_lossy(&result.stderr);
        if let Ok(keep) = std::env::var("AIRLOCK_FUZZ_KEEP_PATCH") {
            fs::write(keep, &patch).unwrap();
        }
        // git's own rule for names it never writes (.git, and their NTFS and HFS+ aliases).
        assert!(
            why.contains("invalid path"),
            "git apply refused: {why}\n{shown}"
        );
        return;
    }
    let mut after = BTreeMap::new();
    tree(&host_root, Path::new(""), &mut after);
    assert_eq!(
        after, expected,
        "the patch applied made another tree:\n{shown}"
    );
});
