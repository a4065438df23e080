//! What the setup process gives up in raw calls: its inherited descriptors and every
//! capability; and the Landlock ABI the kernel offers.

use std::os::fd::RawFd;

use nix::errno::Errno;

/// close_range(2) of `first..=last`.
fn close_range(first: u32, last: u32) -> nix::Result<()> {
    // SAFETY: close_range takes only integers. Closing is the point: each caller uses none of
    // these fds afterwards (Rust objects that owned them are not used again in this process).
    let ret = unsafe { libc::syscall(libc::SYS_close_range, first, last, 0u32) };
    Errno::result(ret).map(drop)
}

/// Close stdin, stdout and stderr now, rather than at exit, where the kernel releases open files
/// only after it has torn down the process's namespaces (a reader of a pipe would wait for that).
pub(crate) fn close_stdio() -> nix::Result<()> {
    close_range(0, 2)
}

/// Close every fd from `first` up except those in `keep`, so nothing the caller leaked reaches
/// the sandbox.
pub(crate) fn close_fds_from_except(first: u32, keep: &[RawFd]) -> nix::Result<()> {
    let mut kept: Vec<u32> = keep
        .iter()
        .map(|fd| u32::try_from(*fd).map_err(|_| Errno::EBADF))
        .collect::<nix::Result<_>>()?;
    kept.retain(|fd| *fd >= first);
    kept.sort_unstable();
    let mut from = first;
    for fd in kept {
        if fd > from {
            close_range(from, fd - 1)?;
        }
        from = fd + 1;
    }
    close_range(from, u32::MAX)
}

const SECBIT_NOROOT: libc::c_ulong = 1 << 0;
const SECBIT_NOROOT_LOCKED: libc::c_ulong = 1 << 1;
const SECBIT_NO_SETUID_FIXUP: libc::c_ulong = 1 << 2;
const SECBIT_NO_SETUID_FIXUP_LOCKED: libc::c_ulong = 1 << 3;
const SECBIT_KEEP_CAPS_LOCKED: libc::c_ulong = 1 << 5;
const SECBIT_NO_CAP_AMBIENT_RAISE: libc::c_ulong = 1 << 6;
const SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED: libc::c_ulong = 1 << 7;

fn prctl(option: libc::c_int, arg2: libc::c_ulong) -> nix::Result<()> {
    // SAFETY: the prctl options used here (CAPBSET_DROP, CAP_AMBIENT, SET_SECUREBITS) take only
    // integer arguments; unused arguments are zero as the man page asks.
    let ret = unsafe {
        libc::prctl(
            option,
            arg2,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
            0 as libc::c_ulong,
        )
    };
    Errno::result(ret).map(drop)
}

/// Empty every capability set (bounding, ambient, inheritable, permitted, effective) and lock the
/// securebits so that no later execve, setuid binary or uid 0 can bring any back.
pub(crate) fn drop_all_capabilities() -> nix::Result<()> {
    prctl(
        libc::PR_CAP_AMBIENT,
        libc::PR_CAP_AMBIENT_CLEAR_ALL as libc::c_ulong,
    )?;
    let mut cap: libc::c_ulong = 0;
    loop {
        match prctl(libc::PR_CAPBSET_DROP, cap) {
            Ok(()) => cap += 1,
            // EINVAL: past the last capability this kernel knows.
            Err(Errno::EINVAL) if cap > 0 => break,
            Err(e) => return Err(e),
        }
    }
    prctl(
        libc::PR_SET_SECUREBITS,
        SECBIT_NOROOT
            | SECBIT_NOROOT_LOCKED
            | SECBIT_NO_SETUID_FIXUP
            | SECBIT_NO_SETUID_FIXUP_LOCKED
            | SECBIT_KEEP_CAPS_LOCKED
            | SECBIT_NO_CAP_AMBIENT_RAISE
            | SECBIT_NO_CAP_AMBIENT_RAISE_LOCKED,
    )?;
    #[repr(C)]
    struct CapHeader {
        version: u32,
        pid: libc::c_int,
    }
    #[repr(C)]
    #[derive(Clone, Copy)]
    struct CapData {
        effective: u32,
        permitted: u32,
        inheritable: u32,
    }
    const LINUX_CAPABILITY_VERSION_3: u32 = 0x2008_0522;
    let header = CapHeader {
        version: LINUX_CAPABILITY_VERSION_3,
        pid: 0,
    };
    let data = [CapData {
        effective: 0,
        permitted: 0,
        inheritable: 0,
    }; 2];
    let (header_ptr, data_ptr) = (&header as *const CapHeader, data.as_ptr());
    // SAFETY: capset(2) with a version-3 header reads two `__user_cap_data_struct`s: `data`.
    let ret = unsafe { libc::syscall(libc::SYS_capset, header_ptr, data_ptr) };
    Errno::result(ret).map(drop)
}

/// The Landlock ABI version the running kernel offers; 0 when Landlock is absent or disabled.
pub(crate) fn landlock_abi_version() -> i32 {
    const LANDLOCK_CREATE_RULESET_VERSION: u32 = 1;
    // SAFETY: with a null attribute pointer, size 0 and the VERSION flag, the kernel reads no
    // memory and only returns the ABI version (or an error).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_landlock_create_ruleset,
            std::ptr::null::<libc::c_void>(),
            0usize,
            LANDLOCK_CREATE_RULESET_VERSION,
        )
    };
    if ret < 0 {
        0
    } else {
        ret as i32
    }
}

// Who the calling thread is, set by the system calls themselves. glibc's `setgroups`,
// `setresgid` and `setresuid` set every thread of the process (the "setxid" broadcast) and first
// wait for each thread glibc knows of to be started: in a child of `clone_fork`, a thread the
// parent was creating at that moment is one glibc still waits for, and never will be (the setup
// process of a warm sandbox hung so in a test with threads). The child has one thread, which
// these calls set.

/// No supplementary groups.
pub(crate) fn drop_groups() -> nix::Result<()> {
    // SAFETY: setgroups with a size of 0 reads no list; the null pointer is not followed.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_setgroups,
            0 as libc::size_t,
            std::ptr::null::<libc::gid_t>(),
        )
    };
    Errno::result(ret).map(drop)
}

/// Real, effective and saved gid `gid`.
pub(crate) fn set_gids(gid: libc::gid_t) -> nix::Result<()> {
    // SAFETY: setresgid takes only integers.
    let ret = unsafe { libc::syscall(libc::SYS_setresgid, gid, gid, gid) };
    Errno::result(ret).map(drop)
}

/// Real, effective and saved uid `uid`.
pub(crate) fn set_uids(uid: libc::uid_t) -> nix::Result<()> {
    // SAFETY: setresuid takes only integers.
    let ret = unsafe { libc::syscall(libc::SYS_setresuid, uid, uid, uid) };
    Errno::result(ret).map(drop)
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;
    use crate::sys::{clone_fork, Forked};

    /// A child forked while this process was starting a thread sets its ids and goes on: glibc's
    /// wrappers waited in it for that thread, which it does not have, for ever.
    #[test]
    fn ids_are_set_in_a_child_forked_while_a_thread_starts() {
        let (uid, gid) = (nix::unistd::getuid(), nix::unistd::getgid());
        for round in 0..300 {
            let thread = std::thread::spawn(|| ());
            match clone_fork(0).unwrap() {
                Forked::Child => {
                    let ok = set_gids(gid.as_raw()).is_ok() && set_uids(uid.as_raw()).is_ok();
                    // SAFETY: _exit ends the child at once, running nothing of the parent's.
                    unsafe { libc::_exit(if ok { 0 } else { 1 }) }
                }
                Forked::Parent(pid) => {
                    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
                    let status = loop {
                        let flags = Some(nix::sys::wait::WaitPidFlag::WNOHANG);
                        match nix::sys::wait::waitpid(pid, flags).unwrap() {
                            nix::sys::wait::WaitStatus::StillAlive => {}
                            status => break status,
                        }
                        if std::time::Instant::now() > deadline {
                            let _ = nix::sys::signal::kill(pid, nix::sys::signal::SIGKILL);
                            let _ = nix::sys::wait::waitpid(pid, None);
                            panic!("round {round}: the child hung setting its ids");
                        }
                        std::thread::sleep(std::time::Duration::from_millis(1));
                    };
                    assert_eq!(status, nix::sys::wait::WaitStatus::Exited(pid, 0));
                }
            }
            thread.join().unwrap();
        }
    }
}
