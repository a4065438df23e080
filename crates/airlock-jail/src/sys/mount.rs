//! The new mount API (mount_setattr, open_tree, move_mount), which nix does not wrap.

use std::ffi::CString;
use std::os::fd::{FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;

const MOUNT_ATTR_RDONLY: u64 = 0x0000_0001;
const MOUNT_ATTR_NOSUID: u64 = 0x0000_0002;
const MOUNT_ATTR_NODEV: u64 = 0x0000_0004;
const MOUNT_ATTR_NOEXEC: u64 = 0x0000_0008;
const AT_RECURSIVE: libc::c_uint = 0x8000;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

/// Mount flags to add to a mount (and, when `recursive`, every mount below it).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct MountAttrs {
    pub read_only: bool,
    pub no_suid: bool,
    pub no_dev: bool,
    pub no_exec: bool,
}

impl MountAttrs {
    fn bits(self) -> u64 {
        let mut set = 0;
        for (on, bit) in [
            (self.read_only, MOUNT_ATTR_RDONLY),
            (self.no_suid, MOUNT_ATTR_NOSUID),
            (self.no_dev, MOUNT_ATTR_NODEV),
            (self.no_exec, MOUNT_ATTR_NOEXEC),
        ] {
            if on {
                set |= bit;
            }
        }
        set
    }
}

/// `mount_setattr(2)`: unlike a `MS_REMOUNT|MS_BIND`, it can reach every submount and never needs
/// to repeat the flags the kernel locked on a mount that came from a more privileged namespace.
pub(crate) fn mount_setattr(path: &Path, attrs: MountAttrs, recursive: bool) -> nix::Result<()> {
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
    let attr = MountAttr {
        attr_set: attrs.bits(),
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    let flags = if recursive { AT_RECURSIVE } else { 0 };
    // SAFETY: `c_path` is a valid NUL-terminated string and `attr` a properly sized, initialised
    // `struct mount_attr` that outlive the call; the kernel only reads them.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            libc::AT_FDCWD,
            c_path.as_ptr(),
            flags,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    Errno::result(ret).map(drop)
}

const OPEN_TREE_CLONE: libc::c_uint = 1;
const MOUNT_ATTR_IDMAP: u64 = 0x0010_0000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 0x0000_0004;
const MOVE_MOUNT_T_EMPTY_PATH: libc::c_uint = 0x0000_0040;

/// A detached copy of the mount at `path` (`open_tree(OPEN_TREE_CLONE)`), with every mount below
/// it when `recursive`, to be changed before anyone can see it and then attached with
/// [`move_mount_to`] or [`move_mount_onto`].
pub(crate) fn open_tree_clone(path: &Path, recursive: bool) -> nix::Result<OwnedFd> {
    let c_path = CString::new(path.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
    let mut flags = OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint;
    if recursive {
        flags |= AT_RECURSIVE;
    }
    // SAFETY: `c_path` is a valid NUL-terminated string for the duration of the call.
    let ret = unsafe { libc::syscall(libc::SYS_open_tree, libc::AT_FDCWD, c_path.as_ptr(), flags) };
    let fd = Errno::result(ret)? as libc::c_int;
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Add flags to the detached mount `tree` (and every mount in it), before it is attached.
pub(crate) fn restrict_tree(tree: &OwnedFd, attrs: MountAttrs) -> nix::Result<()> {
    use std::os::fd::AsRawFd;
    let attr = MountAttr {
        attr_set: attrs.bits(),
        attr_clr: 0,
        propagation: 0,
        userns_fd: 0,
    };
    // SAFETY: an empty NUL-terminated path with AT_EMPTY_PATH on a live fd, and an initialised
    // `struct mount_attr` of the size passed; both outlive the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint | AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    Errno::result(ret).map(drop)
}

/// Attach the detached mount `tree` on the object `target` refers to.
pub(crate) fn move_mount_onto(tree: &OwnedFd, target: &OwnedFd) -> nix::Result<()> {
    use std::os::fd::AsRawFd;
    // SAFETY: both paths are empty NUL-terminated strings used with the EMPTY_PATH flags on two
    // live fds.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            target.as_raw_fd(),
            c"".as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH | MOVE_MOUNT_T_EMPTY_PATH,
        )
    };
    Errno::result(ret).map(drop)
}

/// Make the detached mount `tree` show file owners through the id mapping of `userns`.
pub(crate) fn idmap_mount(tree: &OwnedFd, userns: &OwnedFd) -> nix::Result<()> {
    use std::os::fd::AsRawFd;
    let attr = MountAttr {
        attr_set: MOUNT_ATTR_IDMAP,
        attr_clr: 0,
        propagation: 0,
        userns_fd: userns.as_raw_fd() as u64,
    };
    // SAFETY: the path is an empty NUL-terminated string used with AT_EMPTY_PATH on a valid fd, and
    // `attr` is an initialised `struct mount_attr` of the size passed; both outlive the call.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_EMPTY_PATH as libc::c_uint,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        )
    };
    Errno::result(ret).map(drop)
}

/// Attach the detached mount `tree` at `target`.
pub(crate) fn move_mount_to(tree: &OwnedFd, target: &Path) -> nix::Result<()> {
    use std::os::fd::AsRawFd;
    let c_target = CString::new(target.as_os_str().as_bytes()).map_err(|_| Errno::EINVAL)?;
    // SAFETY: both strings are valid and NUL-terminated for the call; `tree` is a live fd.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            c"".as_ptr(),
            libc::AT_FDCWD,
            c_target.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        )
    };
    Errno::result(ret).map(drop)
}
