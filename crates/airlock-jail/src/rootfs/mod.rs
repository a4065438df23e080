//! The sandbox's view of the filesystem, built on a fresh tmpfs and entered with pivot_root:
//! steps 7 (base tree), 9 (workspace) and 10 (pivot) of `protocol`.
//!
//! [`plan()`] turns the spec into a list of [`MountStep`]s without a system call (what it needs
//! to know of the host comes through [`HostFacts`]), `execute` carries them out, and the plan's
//! tests check its invariants without root.
//!
//! SECURITY: the order is the argument. Nothing of the host is visible unless a step binds it,
//! every bind of system content is read-only, nosuid and nodev, the workspace is an overlay whose
//! writes land in its layer (a tmpfs for a throwaway run, the session's upper dir otherwise), the
//! profile's paths and the workspace are mounted on mount points found beneath the new root
//! (openat2 `RESOLVE_IN_ROOT`) and attached by fd, hides come over everything, and the root
//! itself is made read-only at the end.

mod execute;
mod plan;

use std::path::{Path, PathBuf};

use crate::error::JailError;
use crate::sys::MountAttrs;

pub(crate) use execute::{execute, Host};
pub(crate) use plan::plan;

/// Host directories a shell and common tools need, bound read-only (or re-created as the same
/// symlink on merged-/usr systems).
pub const SYSTEM_DIRS: &[&str] = &[
    "/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32",
];

/// Device nodes bound from the host's /dev: harmless character devices only.
const DEVICES: &[&str] = &["null", "zero", "full", "random", "urandom", "tty"];

const SYSTEM_BIND: MountAttrs = MountAttrs {
    read_only: true,
    no_suid: true,
    no_dev: true,
    no_exec: false,
};

/// Owner of the private tmpfs mounts, as the mounting process names it: inside ids when the mount
/// happens in the sandbox's user namespace, host ids when root mounts before entering one.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct MounterIds {
    pub uid: u32,
    pub gid: u32,
}

/// Where the tree is built, on the host: what `execute` needs beyond the steps.
pub(crate) struct Places<'a> {
    /// Empty directory on the host: a small tmpfs on it holds `staging` and `scratch`.
    pub host_dir: &'a Path,
    /// The new root's mount point (see [`staging_points`]).
    pub staging: &'a Path,
    /// Where the workspace's layers are attached while the overlay is made: outside the new
    /// root, so they leave with the host's root in the one detach of the pivot. PERF: every
    /// unmount waits for an RCU grace period, up to ~0.8 ms here; three were one per run.
    pub scratch: &'a Path,
    /// Owner of the memory layer.
    pub owner: MounterIds,
    /// The prepared /etc directory.
    pub etc: &'a Path,
}

/// The new root's mount point and the scratch directory, in the tmpfs the first steps mount on
/// `host_dir`.
pub(crate) fn staging_points(host_dir: &Path) -> (PathBuf, PathBuf) {
    (host_dir.join("root"), host_dir.join("scratch"))
}

pub(crate) fn io_error(action: &'static str, path: &Path, e: std::io::Error) -> JailError {
    JailError::Path {
        action,
        path: path.to_path_buf(),
        errno: nix::errno::Errno::from_raw(e.raw_os_error().unwrap_or(libc::EIO)),
        hint: "check that the path exists and that airlock may use it",
    }
}
