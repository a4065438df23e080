//! Writing a change set into the host workspace, and taking it back out.
//!
//! An apply is a list of [`Op`]s, each one path going from an `old` [`Entry`] (what the host had
//! when the apply was planned) to a `new` one (what the session has). It is recorded in a
//! [`Journal`] before the first change, and every old file's content is kept first in the apply's
//! backup directory. Then each op is made with one atomic step: a new file or symlink is written
//! under a temporary name in its directory, fsync'd, and renamed over its path; a directory
//! swapped for a file (or the reverse) is exchanged atomically (`RENAME_EXCHANGE`); a deletion is
//! one unlink or rmdir. So at any moment each path is either old or new.
//!
//! Whether an op has happened is read from the workspace itself (is the path `new`, `old`, or
//! something else?), never from a record written after the fact. That makes every phase safe to
//! repeat: an apply killed half way is finished by running it again ([`commit`]) or undone
//! ([`undo`]), and `revert` is [`undo`] of a finished apply. A path that is neither old nor new
//! was changed by someone else: it is left alone and reported.
//!
//! All workspace access is relative to a directory fd opened with `RESOLVE_BENEATH` and
//! `RESOLVE_NO_SYMLINKS`: a symlink swapped into the workspace meanwhile cannot lead an apply run
//! by root outside it.

use std::ffi::{OsStr, OsString};
use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use nix::errno::Errno;
use nix::fcntl::{
    openat, openat2, readlinkat, renameat, renameat2, OFlag, OpenHow, RenameFlags, ResolveFlag,
};
use nix::sys::stat::{fchmod, fstatat, mkdirat, Mode, SFlag};
use nix::unistd::{fchown, fchownat, mkfifoat, symlinkat, unlinkat, Gid, Uid, UnlinkatFlags};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::node::{Kind, Node};

/// What one path holds, as far as an apply cares.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Entry {
    Absent,
    File {
        size: u64,
        sha256: String,
        mode: u32,
    },
    Symlink {
        target: OsString,
    },
    Dir {
        mode: u32,
    },
    Fifo {
        mode: u32,
    },
}

impl Entry {
    fn is_dir(&self) -> bool {
        matches!(self, Entry::Dir { .. })
    }
}

/// A uid and gid to give what an op creates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct Owner {
    pub uid: u32,
    pub gid: u32,
}

/// One path's step from `old` to `new`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Op {
    /// Relative to the workspace.
    pub path: OsString,
    pub old: Entry,
    pub new: Entry,
    /// Owner of what the op creates; None: leave it to the creating process.
    pub owner: Option<Owner>,
    /// Owner of the old entry, given back by [`undo`].
    pub old_owner: Option<Owner>,
}

impl Op {
    pub fn path(&self) -> &Path {
        Path::new(&self.path)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum JournalState {
    /// Backups are kept; ops may have been made in part.
    Prepared,
    /// Every op was made (or reported as a conflict).
    Committed,
    /// An interrupted apply was undone.
    RolledBack,
    /// A committed apply was undone by `revert`.
    Reverted,
}

/// The record of one apply, in `DIR/journal.json`; old file contents in `DIR/backup/INDEX`.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Journal {
    pub number: u32,
    pub state: JournalState,
    /// Seconds since the Unix epoch.
    pub created: u64,
    pub ops: Vec<Op>,
}

/// Which of an apply's ops were carried out, and which were left alone and why.
#[derive(Debug, Clone, Default)]
pub struct OpsDone {
    /// Indexes of ops that are now in the state asked for.
    pub done: Vec<usize>,
    /// Ops left alone: index and reason.
    pub conflicts: Vec<(usize, String)>,
}

/// Crash-test hook, honoured in debug builds only: `AIRLOCK_TEST_FAULT=commit:N` (or `undo:N`)
/// kills the process with SIGKILL at the N-th point of that phase where a crash could leave
/// something behind: after each op, and inside an op between its steps.
struct Fault {
    left: Option<usize>,
}

impl Fault {
    fn for_phase(phase: &str) -> Fault {
        let left = if cfg!(debug_assertions) {
            std::env::var("AIRLOCK_TEST_FAULT")
                .ok()
                .and_then(|v| v.strip_prefix(&format!("{phase}:")).map(str::to_string))
                .and_then(|n| n.parse().ok())
        } else {
            None
        };
        Fault { left }
    }

    fn tick(&mut self) {
        if let Some(left) = &mut self.left {
            if *left == 0 {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::this(),
                    nix::sys::signal::Signal::SIGKILL,
                );
            }
            *left -= 1;
        }
    }
}

/// The host workspace, reached only through its directory fd.
pub struct Workspace {
    root: OwnedFd,
    path: PathBuf,
}

fn errno_io(errno: Errno) -> io::Error {
    io::Error::from_raw_os_error(errno as i32)
}

fn beneath() -> OpenHow {
    OpenHow::new().resolve(
        ResolveFlag::RESOLVE_BENEATH
            | ResolveFlag::RESOLVE_NO_SYMLINKS
            | ResolveFlag::RESOLVE_NO_MAGICLINKS,
    )
}

impl Workspace {
    pub fn open(path: &Path) -> io::Result<Workspace> {
        let root = fs::File::open(path)?;
        if !root.metadata()?.is_dir() {
            return Err(io::Error::other(format!(
                "{} is not a directory",
                path.display()
            )));
        }
        Ok(Workspace {
            root: root.into(),
            path: path.to_path_buf(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The longest name the workspace's filesystem takes, and the kernel's longest path.
    pub fn name_limits(&self) -> io::Result<crate::limits::NameLimits> {
        let stat = nix::sys::statvfs::fstatvfs(&self.root).map_err(errno_io)?;
        Ok(crate::limits::NameLimits {
            name_max: usize::try_from(stat.name_max()).unwrap_or(usize::MAX),
            path_max: libc::PATH_MAX as usize,
        })
    }

    /// The directory holding `rel` (opened beneath the root, through no symlink) and its name.
    fn parent(&self, rel: &Path) -> io::Result<(OwnedFd, OsString)> {
        let name = rel
            .file_name()
            .ok_or_else(|| {
                io::Error::other(format!("{}: not a path in the workspace", rel.display()))
            })?
            .to_os_string();
        let parent = rel.parent().unwrap_or(Path::new(""));
        let parent = if parent.as_os_str().is_empty() {
            Path::new(".")
        } else {
            parent
        };
        let how = beneath().flags(OFlag::O_RDONLY | OFlag::O_DIRECTORY | OFlag::O_CLOEXEC);
        let dir = openat2(self.root.as_fd(), parent, how).map_err(errno_io)?;
        Ok((dir, name))
    }

    /// What `rel` holds now.
    pub fn entry(&self, rel: &Path) -> io::Result<Entry> {
        let (dir, name) = match self.parent(rel) {
            Ok(found) => found,
            // A parent that is gone, or no longer a directory: nothing is at `rel`.
            Err(e) if matches!(e.raw_os_error(), Some(libc::ENOENT | libc::ENOTDIR)) => {
                return Ok(Entry::Absent)
            }
            Err(e) => return Err(e),
        };
        entry_at(&dir, &name)
    }

    /// Owner of the workspace directory itself.
    pub fn root_owner(&self) -> io::Result<Owner> {
        let st = nix::sys::stat::fstat(&self.root).map_err(errno_io)?;
        Ok(Owner {
            uid: st.st_uid,
            gid: st.st_gid,
        })
    }

    /// Owner of `rel` now, if it exists.
    pub fn owner(&self, rel: &Path) -> io::Result<Option<Owner>> {
        let (dir, name) = self.parent(rel)?;
        match fstatat(
            &dir,
            name.as_os_str(),
            nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
        ) {
            Ok(st) => Ok(Some(Owner {
                uid: st.st_uid,
                gid: st.st_gid,
            })),
            Err(Errno::ENOENT) => Ok(None),
            Err(e) => Err(errno_io(e)),
        }
    }
}

fn mode_of(st_mode: u32) -> u32 {
    st_mode & 0o7777
}

/// What `name` in `dir` holds now, read without following a symlink.
fn entry_at(dir: &OwnedFd, name: &OsStr) -> io::Result<Entry> {
    let st = match fstatat(dir, name, nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW) {
        Ok(st) => st,
        Err(Errno::ENOENT) => return Ok(Entry::Absent),
        Err(e) => return Err(errno_io(e)),
    };
    let kind = SFlag::from_bits_truncate(st.st_mode & SFlag::S_IFMT.bits());
    Ok(match kind {
        SFlag::S_IFDIR => Entry::Dir {
            mode: mode_of(st.st_mode),
        },
        SFlag::S_IFLNK => Entry::Symlink {
            target: readlinkat(dir, name).map_err(errno_io)?,
        },
        SFlag::S_IFIFO => Entry::Fifo {
            mode: mode_of(st.st_mode),
        },
        SFlag::S_IFREG => {
            let fd = openat(
                dir,
                name,
                OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
                Mode::empty(),
            )
            .map_err(errno_io)?;
            let mut file = fs::File::from(fd);
            let (size, sha256) = hash_reader(&mut file)?;
            Entry::File {
                size,
                sha256,
                mode: mode_of(file.metadata()?.mode()),
            }
        }
        _ => {
            return Err(io::Error::other(
                "a socket or device node: airlock does not apply those",
            ))
        }
    })
}

fn hash_reader(reader: &mut impl Read) -> io::Result<(u64, String)> {
    let mut hasher = Sha256::new();
    let size = io::copy(reader, &mut hasher)?;
    Ok((size, hex::encode(hasher.finalize())))
}

/// What the session's layer holds at `path` (a path in the state dir, which no sandbox writes
/// while an apply holds the session). A whiteout holds nothing: the session deleted the path.
pub fn layer_entry(path: &Path, xattrs: crate::scan::OverlayXattrs) -> io::Result<Entry> {
    let Some(node) = Node::read(path)? else {
        return Ok(Entry::Absent);
    };
    if crate::scan::is_whiteout(path, &node, xattrs) {
        return Ok(Entry::Absent);
    }
    Ok(match node.kind {
        Kind::Dir => Entry::Dir { mode: node.mode },
        Kind::Symlink => Entry::Symlink {
            target: node.target.unwrap_or_default(),
        },
        Kind::Fifo => Entry::Fifo { mode: node.mode },
        Kind::File => {
            let mut file = crate::node::open_regular(path)?;
            let (size, sha256) = hash_reader(&mut file)?;
            Entry::File {
                size,
                sha256,
                mode: node.mode,
            }
        }
        Kind::Socket | Kind::CharDevice | Kind::BlockDevice => {
            return Err(io::Error::other(
                "a socket or device node: airlock does not apply those",
            ))
        }
    })
}

/// An apply's directory in the state dir: `journal.json` and `backup/`.
pub struct ApplyDir {
    pub dir: PathBuf,
}

impl ApplyDir {
    pub fn journal_path(&self) -> PathBuf {
        self.dir.join("journal.json")
    }

    fn backup(&self, index: usize) -> PathBuf {
        self.dir.join("backup").join(index.to_string())
    }

    pub fn read(&self) -> io::Result<Journal> {
        let text = fs::read(self.journal_path())?;
        serde_json::from_slice(&text)
            .map_err(|e| io::Error::other(format!("{}: {e}", self.journal_path().display())))
    }

    /// Write the journal so that a reader sees the old or the new one, and it survives a crash.
    pub fn write(&self, journal: &Journal) -> io::Result<()> {
        let path = self.journal_path();
        let temp = self.dir.join("journal.json.tmp");
        let mut text = serde_json::to_vec_pretty(journal).map_err(io::Error::other)?;
        text.push(b'\n');
        let mut file = fs::File::create(&temp)?;
        file.write_all(&text)?;
        file.sync_all()?;
        fs::rename(&temp, &path)?;
        fs::File::open(&self.dir)?.sync_all()
    }
}

/// Keep each old file's content (hard link when the workspace and the state dir share a
/// filesystem, else a copy), fsync'd. An op whose old file no longer matches is dropped and
/// reported: the host changed it since the plan.
pub fn keep_backups(
    ws: &Workspace,
    apply: &ApplyDir,
    ops: &[Op],
) -> io::Result<Vec<(usize, String)>> {
    let backups = apply.dir.join("backup");
    fs::create_dir_all(&backups)?;
    let mut conflicts = Vec::new();
    for (index, op) in ops.iter().enumerate() {
        let Entry::File { sha256, .. } = &op.old else {
            continue;
        };
        let (dir, name) = ws.parent(op.path())?;
        let target = apply.backup(index);
        let _ = fs::remove_file(&target);
        let source = openat(
            &dir,
            name.as_os_str(),
            OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
            Mode::empty(),
        )
        .map_err(errno_io)?;
        let mut source = fs::File::from(source);
        let mut copy = fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&target)?;
        let mut hasher = HashingWriter {
            inner: &mut copy,
            hasher: Sha256::new(),
        };
        io::copy(&mut source, &mut hasher)?;
        let got = hex::encode(hasher.hasher.finalize());
        copy.sync_all()?;
        if &got != sha256 {
            conflicts.push((
                index,
                "changed on the host while the apply was planned".into(),
            ));
        }
    }
    fs::File::open(&backups)?.sync_all()?;
    Ok(conflicts)
}

struct HashingWriter<'a, W: Write> {
    inner: &'a mut W,
    hasher: Sha256,
}

impl<W: Write> Write for HashingWriter<'_, W> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.inner.write(buf)?;
        self.hasher.update(&buf[..n]);
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

/// The temporary name an op's new entry is made under, in its target's directory.
fn temp_name(number: u32, index: usize, undo: bool) -> OsString {
    OsString::from(format!(
        ".airlock-{}-{number}-{index}.tmp",
        if undo { "undo" } else { "apply" }
    ))
}

/// Where the bytes of a file to write come from.
enum Source<'a> {
    /// The session's layer, at this path.
    Layer(&'a Path),
    /// An apply's backup of the old content.
    Backup(PathBuf),
}

/// Make `want` under `temp` in `dir`: a file (content from `source`, checked against its hash),
/// symlink, directory or fifo, with its mode and `owner`.
fn make_temp(
    dir: &OwnedFd,
    temp: &OsStr,
    want: &Entry,
    source: &Source,
    owner: Option<Owner>,
) -> io::Result<()> {
    let chown_ids = owner.map(|o| (Some(Uid::from_raw(o.uid)), Some(Gid::from_raw(o.gid))));
    match want {
        Entry::File { sha256, mode, .. } => {
            let from = match source {
                Source::Layer(path) => crate::node::open_regular(path)?,
                Source::Backup(path) => fs::File::open(path)?,
            };
            let fd = openat(
                dir,
                temp,
                OFlag::O_WRONLY
                    | OFlag::O_CREAT
                    | OFlag::O_EXCL
                    | OFlag::O_NOFOLLOW
                    | OFlag::O_CLOEXEC,
                Mode::from_bits_truncate(0o600),
            )
            .map_err(errno_io)?;
            let mut file = fs::File::from(fd);
            let mut writer = HashingWriter {
                inner: &mut file,
                hasher: Sha256::new(),
            };
            io::copy(&mut { from }, &mut writer)?;
            let got = hex::encode(writer.hasher.finalize());
            if &got != sha256 {
                return Err(io::Error::other(
                    "its source changed since the apply was planned",
                ));
            }
            if let Some((uid, gid)) = chown_ids {
                fchown(&file, uid, gid).map_err(errno_io)?;
            }
            // After chown, which clears setuid/setgid (never written anyway).
            fchmod(&file, Mode::from_bits_truncate(*mode)).map_err(errno_io)?;
            file.sync_all()?;
        }
        Entry::Symlink { target } => {
            symlinkat(target.as_os_str(), dir, temp).map_err(errno_io)?;
            if let Some((uid, gid)) = chown_ids {
                fchownat(
                    dir,
                    temp,
                    uid,
                    gid,
                    nix::fcntl::AtFlags::AT_SYMLINK_NOFOLLOW,
                )
                .map_err(errno_io)?;
            }
        }
        Entry::Dir { mode } => {
            mkdirat(dir, temp, Mode::from_bits_truncate(0o700)).map_err(errno_io)?;
            set_mode_and_owner(dir, temp, *mode, owner)?;
        }
        Entry::Fifo { mode } => {
            mkfifoat(dir, temp, Mode::from_bits_truncate(0o600)).map_err(errno_io)?;
            set_mode_and_owner(dir, temp, *mode, owner)?;
        }
        Entry::Absent => {}
    }
    Ok(())
}

/// chmod (and chown) a directory or file `name` in `dir` through an fd that refuses symlinks.
fn set_mode_and_owner(
    dir: &OwnedFd,
    name: &OsStr,
    mode: u32,
    owner: Option<Owner>,
) -> io::Result<()> {
    let fd = openat(
        dir,
        name,
        OFlag::O_RDONLY | OFlag::O_NOFOLLOW | OFlag::O_NONBLOCK | OFlag::O_CLOEXEC,
        Mode::empty(),
    )
    .map_err(errno_io)?;
    if let Some(owner) = owner {
        fchown(
            &fd,
            Some(Uid::from_raw(owner.uid)),
            Some(Gid::from_raw(owner.gid)),
        )
        .map_err(errno_io)?;
    }
    fchmod(&fd, Mode::from_bits_truncate(mode)).map_err(errno_io)
}

/// Remove `name` in `dir`, a directory (which must be empty) or anything else.
fn remove(dir: &OwnedFd, name: &OsStr, is_dir: bool) -> io::Result<()> {
    let flag = if is_dir {
        UnlinkatFlags::RemoveDir
    } else {
        UnlinkatFlags::NoRemoveDir
    };
    unlinkat(dir, name, flag).map_err(errno_io)
}

/// Take `name` in `dir` from `from` to `to` in one atomic step (see the module doc).
#[allow(clippy::too_many_arguments)]
fn step(
    dir: &OwnedFd,
    name: &OsStr,
    from: &Entry,
    to: &Entry,
    source: &Source,
    owner: Option<Owner>,
    temp: &OsStr,
    fault: &mut Fault,
) -> io::Result<()> {
    match (from, to) {
        (from, Entry::Absent) => remove(dir, name, from.is_dir()),
        // Same kind, only the mode differs: chmod in place.
        (Entry::Dir { .. }, Entry::Dir { mode }) => set_mode_and_owner(dir, name, *mode, None),
        (
            Entry::File { sha256: a, .. },
            Entry::File {
                sha256: b, mode, ..
            },
        ) if a == b => set_mode_and_owner(dir, name, *mode, None),
        (Entry::Fifo { .. }, Entry::Fifo { mode }) => set_mode_and_owner(dir, name, *mode, None),
        (from, to) => {
            if let Err(e) = make_temp(dir, temp, to, source, owner) {
                // Half made (a full disk, a source changed): nothing is left under its name.
                let _ = remove(dir, temp, to.is_dir());
                return Err(e);
            }
            fault.tick();
            let swapped = if matches!(from, Entry::Absent) {
                renameat2(dir, temp, dir, name, RenameFlags::RENAME_NOREPLACE)
            } else if from.is_dir() || to.is_dir() {
                renameat2(dir, temp, dir, name, RenameFlags::RENAME_EXCHANGE)
            } else {
                renameat(dir, temp, dir, name)
            };
            if let Err(errno) = swapped {
                let _ = remove(dir, temp, to.is_dir());
                return Err(errno_io(errno));
            }
            if from.is_dir() || (to.is_dir() && !matches!(from, Entry::Absent)) {
                fault.tick();
                // The temporary name now holds the old entry.
                if let Err(e) = remove(dir, temp, from.is_dir()) {
                    // The old directory is not empty (someone added to it): put it back.
                    let _ = renameat2(dir, temp, dir, name, RenameFlags::RENAME_EXCHANGE);
                    let _ = remove(dir, temp, to.is_dir());
                    return Err(e);
                }
            }
            Ok(())
        }
    }
}

fn describe(e: &io::Error) -> String {
    match e.raw_os_error() {
        Some(libc::ENOTEMPTY) => {
            "the host directory holds entries the session did not delete".into()
        }
        Some(libc::EEXIST) => "the host created this path meanwhile".into(),
        Some(libc::ELOOP) | Some(libc::EXDEV) => "a symlink on the host stands in its path".into(),
        Some(libc::ENOSPC) | Some(libc::EDQUOT) => {
            "the workspace's filesystem is full (or its quota): free space, then apply again (nothing half-written is left)".into()
        }
        _ => e.to_string(),
    }
}

/// Remove what a killed attempt left under the temporary names: a half-written new entry, or an
/// old (empty) directory that was exchanged out but not yet removed.
fn clear_temps(ws: &Workspace, journal: &Journal) {
    for (index, op) in journal.ops.iter().enumerate() {
        let Ok((dir, _)) = ws.parent(op.path()) else {
            continue;
        };
        for undo in [false, true] {
            let temp = temp_name(journal.number, index, undo);
            if unlinkat(&dir, temp.as_os_str(), UnlinkatFlags::NoRemoveDir).is_err() {
                let _ = unlinkat(&dir, temp.as_os_str(), UnlinkatFlags::RemoveDir);
            }
        }
    }
}

/// Make every op of `journal` that is not made yet; an op whose path is neither old nor new is a
/// conflict. Safe to run again after a crash.
pub fn commit(
    ws: &Workspace,
    layer: &Path,
    journal: &Journal,
    skip: &[usize],
) -> io::Result<OpsDone> {
    clear_temps(ws, journal);
    let mut fault = Fault::for_phase("commit");
    let mut outcome = OpsDone::default();
    let mut touched = Vec::new();
    for (index, op) in journal.ops.iter().enumerate() {
        if skip.contains(&index) {
            continue;
        }
        let now = ws.entry(op.path())?;
        if now == op.new {
            outcome.done.push(index);
            continue;
        }
        if now != op.old {
            outcome.conflicts.push((
                index,
                "changed on the host since the apply was planned".into(),
            ));
            continue;
        }
        let (dir, name) = match ws.parent(op.path()) {
            Ok(found) => found,
            Err(e) => {
                outcome.conflicts.push((index, describe(&e)));
                continue;
            }
        };
        let from_layer = layer.join(op.path());
        let source = Source::Layer(&from_layer);
        let temp = temp_name(journal.number, index, false);
        match step(
            &dir, &name, &op.old, &op.new, &source, op.owner, &temp, &mut fault,
        ) {
            Ok(()) => {
                outcome.done.push(index);
                touched.push(dir);
                fault.tick();
            }
            Err(e) => outcome.conflicts.push((index, describe(&e))),
        }
    }
    // Renames and unlinks are durable once their directories are.
    for dir in touched {
        let _ = nix::unistd::fsync(&dir);
    }
    Ok(outcome)
}

/// Take every op of `journal` back, last first: each path that is `new` becomes `old` again
/// (old files from the backups). A path that is neither was changed since: a conflict.
pub fn undo(ws: &Workspace, apply: &ApplyDir, journal: &Journal) -> io::Result<OpsDone> {
    clear_temps(ws, journal);
    let mut fault = Fault::for_phase("undo");
    let mut outcome = OpsDone::default();
    let mut touched = Vec::new();
    for (index, op) in journal.ops.iter().enumerate().rev() {
        let now = ws.entry(op.path())?;
        if now == op.old {
            outcome.done.push(index);
            continue;
        }
        if now != op.new {
            outcome
                .conflicts
                .push((index, "changed on the host since the apply".into()));
            continue;
        }
        let (dir, name) = match ws.parent(op.path()) {
            Ok(found) => found,
            Err(e) => {
                outcome.conflicts.push((index, describe(&e)));
                continue;
            }
        };
        let source = Source::Backup(apply.backup(index));
        let temp = temp_name(journal.number, index, true);
        match step(
            &dir,
            &name,
            &op.new,
            &op.old,
            &source,
            op.old_owner,
            &temp,
            &mut fault,
        ) {
            Ok(()) => {
                outcome.done.push(index);
                touched.push(dir);
                fault.tick();
            }
            Err(e) => outcome.conflicts.push((index, describe(&e))),
        }
    }
    for dir in touched {
        let _ = nix::unistd::fsync(&dir);
    }
    Ok(outcome)
}

/// Paths as bytes, for messages and JSON.
pub fn display_path(path: &OsStr) -> String {
    String::from_utf8_lossy(path.as_bytes()).into_owned()
}
