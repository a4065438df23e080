//! What one path is, on either side of a change: the host workspace or the session's layer.

use std::ffi::OsString;
use std::fs;
use std::io::{self, Read};
use std::os::unix::fs::{FileTypeExt, MetadataExt, OpenOptionsExt};
use std::path::Path;

use serde::{Deserialize, Serialize};

/// The type of a filesystem entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    File,
    Dir,
    Symlink,
    Fifo,
    Socket,
    CharDevice,
    BlockDevice,
}

impl Kind {
    fn of(file_type: fs::FileType) -> Kind {
        if file_type.is_symlink() {
            Kind::Symlink
        } else if file_type.is_dir() {
            Kind::Dir
        } else if file_type.is_fifo() {
            Kind::Fifo
        } else if file_type.is_socket() {
            Kind::Socket
        } else if file_type.is_char_device() {
            Kind::CharDevice
        } else if file_type.is_block_device() {
            Kind::BlockDevice
        } else {
            Kind::File
        }
    }
}

/// One entry, as `lstat` sees it (symlinks are never followed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    pub kind: Kind,
    /// Permission bits, with setuid, setgid and sticky (`st_mode & 0o7777`).
    pub mode: u32,
    pub size: u64,
    /// A symlink's target, as stored.
    pub target: Option<OsString>,
    pub uid: u32,
    pub gid: u32,
    /// Device number of a device node; 0/0 in an overlay's upper layer marks a whiteout.
    pub rdev: u64,
    /// Change time in nanoseconds; a host file's ctime cannot be set back by its owner.
    pub ctime_ns: i128,
    pub mtime_ns: i128,
    pub inode: u64,
    pub device: u64,
}

impl Node {
    /// The entry at `path`, or None if there is none.
    pub fn read(path: &Path) -> io::Result<Option<Node>> {
        let meta = match fs::symlink_metadata(path) {
            Ok(meta) => meta,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            // A path through a non-directory does not exist on that side either.
            Err(e) if e.raw_os_error() == Some(libc::ENOTDIR) => return Ok(None),
            Err(e) => return Err(e),
        };
        let kind = Kind::of(meta.file_type());
        let target = if kind == Kind::Symlink {
            Some(fs::read_link(path)?.into_os_string())
        } else {
            None
        };
        Ok(Some(Node {
            kind,
            mode: meta.mode() & 0o7777,
            size: meta.size(),
            target,
            uid: meta.uid(),
            gid: meta.gid(),
            rdev: meta.rdev(),
            ctime_ns: i128::from(meta.ctime()) * 1_000_000_000 + i128::from(meta.ctime_nsec()),
            mtime_ns: i128::from(meta.mtime()) * 1_000_000_000 + i128::from(meta.mtime_nsec()),
            inode: meta.ino(),
            device: meta.dev(),
        }))
    }

    /// The mode git records: 100644, 100755 or 120000; None for what git does not track.
    pub fn git_mode(&self) -> Option<u32> {
        match self.kind {
            Kind::File if self.mode & 0o100 != 0 => Some(0o100_755),
            Kind::File => Some(0o100_644),
            Kind::Symlink => Some(0o120_000),
            _ => None,
        }
    }

    /// Files and symlinks: what a patch can carry.
    pub fn has_content(&self) -> bool {
        matches!(self.kind, Kind::File | Kind::Symlink)
    }
}

/// Open a regular file for reading without following a symlink in its last component and without
/// blocking on a fifo that replaced it.
pub fn open_regular(path: &Path) -> io::Result<fs::File> {
    let file = fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)?;
    if !file.metadata()?.is_file() {
        return Err(io::Error::other(format!(
            "{} is no longer a regular file",
            path.display()
        )));
    }
    Ok(file)
}

/// The bytes a patch carries for a file or symlink: its content, or its target.
pub fn content(path: &Path, node: &Node) -> io::Result<Vec<u8>> {
    match node.kind {
        Kind::Symlink => Ok(node.target.clone().unwrap_or_default().into_encoded_bytes()),
        Kind::File => {
            let mut data = Vec::with_capacity(node.size as usize);
            open_regular(path)?.read_to_end(&mut data)?;
            Ok(data)
        }
        _ => Ok(Vec::new()),
    }
}

/// Do two regular files hold the same bytes? Sizes first, then the data, a chunk at a time.
pub fn same_content(a: &Path, b: &Path) -> io::Result<bool> {
    let (mut fa, mut fb) = (open_regular(a)?, open_regular(b)?);
    if fa.metadata()?.len() != fb.metadata()?.len() {
        return Ok(false);
    }
    let mut ba = vec![0u8; 64 * 1024];
    let mut bb = vec![0u8; 64 * 1024];
    loop {
        let n = read_full(&mut fa, &mut ba)?;
        let m = read_full(&mut fb, &mut bb)?;
        if n != m || ba[..n] != bb[..m] {
            return Ok(false);
        }
        if n == 0 {
            return Ok(true);
        }
    }
}

fn read_full(file: &mut fs::File, buf: &mut [u8]) -> io::Result<usize> {
    let mut filled = 0;
    while filled < buf.len() {
        match file.read(&mut buf[filled..]) {
            Ok(0) => break,
            Ok(n) => filled += n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(filled)
}
