//! Seccomp: installing the filter, and the listener of a gated sandbox's notifications.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

use nix::errno::Errno;

/// Install a seccomp BPF program on the calling thread (its children inherit it).
/// `no_new_privs` must already be set.
pub(crate) fn install_seccomp(program: &[libc::sock_filter]) -> nix::Result<()> {
    let len = u16::try_from(program.len()).map_err(|_| Errno::E2BIG)?;
    let prog = libc::sock_fprog {
        len,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: `prog` points at `program`, a live slice of `len` instructions; the kernel copies the
    // program during the call and never writes through the pointer.
    let ret = unsafe {
        libc::prctl(
            libc::PR_SET_SECCOMP,
            libc::SECCOMP_MODE_FILTER as libc::c_ulong,
            &prog as *const libc::sock_fprog,
        )
    };
    Errno::result(ret).map(drop)
}

/// Install a seccomp BPF program whose `SECCOMP_RET_USER_NOTIF` decisions go to the returned
/// listener fd. `no_new_privs` must already be set.
pub(crate) fn install_seccomp_listener(program: &[libc::sock_filter]) -> nix::Result<OwnedFd> {
    let len = u16::try_from(program.len()).map_err(|_| Errno::E2BIG)?;
    let prog = libc::sock_fprog {
        len,
        filter: program.as_ptr() as *mut libc::sock_filter,
    };
    // SAFETY: as in `install_seccomp`: `prog` points at a live program the kernel only copies.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_SET_MODE_FILTER,
            libc::SECCOMP_FILTER_FLAG_NEW_LISTENER,
            &prog as *const libc::sock_fprog,
        )
    };
    let fd = Errno::result(ret)? as libc::c_int;
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// Is notification `id` still waiting (its thread alive and in the syscall)?
pub(crate) fn notif_id_valid(listener: BorrowedFd, id: u64) -> bool {
    // SAFETY: `id` is a live u64, the type this ioctl reads.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_ID_VALID,
            &id as *const u64,
        )
    };
    ret == 0
}

/// Does the kernel have seccomp user notifications (asks their structure sizes)?
pub(crate) fn seccomp_notify_supported() -> bool {
    let mut sizes = libc::seccomp_notif_sizes {
        seccomp_notif: 0,
        seccomp_notif_resp: 0,
        seccomp_data: 0,
    };
    // SAFETY: `sizes` is a live, writable seccomp_notif_sizes, the type this operation fills.
    let ret = unsafe {
        libc::syscall(
            libc::SYS_seccomp,
            libc::SECCOMP_GET_NOTIF_SIZES,
            0,
            &mut sizes as *mut libc::seccomp_notif_sizes,
        )
    };
    ret == 0
}

/// One seccomp notification's fields that the gate uses.
pub(crate) struct RawNotification {
    pub id: u64,
    pub pid: u32,
    pub nr: i32,
    pub args: [u64; 6],
}

/// Wait for the next notification on a seccomp listener.
pub(crate) fn notif_recv(listener: BorrowedFd) -> nix::Result<RawNotification> {
    // SAFETY: an all-zero seccomp_notif is valid (plain integers), and the kernel requires it zeroed.
    let mut notif: libc::seccomp_notif = unsafe { std::mem::zeroed() };
    // SAFETY: `notif` is a live, writable seccomp_notif, the type this ioctl fills.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_RECV,
            &mut notif as *mut libc::seccomp_notif,
        )
    };
    Errno::result(ret)?;
    Ok(RawNotification {
        id: notif.id,
        pid: notif.pid,
        nr: notif.data.nr,
        args: notif.data.args,
    })
}

/// Answer a notification: the syscall returns `val` (or fails with `error`), or, with
/// `continue_`, the kernel runs it as the process asked.
pub(crate) fn notif_send(
    listener: BorrowedFd,
    id: u64,
    val: i64,
    error: i32,
    continue_: bool,
) -> nix::Result<()> {
    let resp = libc::seccomp_notif_resp {
        id,
        val,
        error,
        flags: if continue_ {
            libc::SECCOMP_USER_NOTIF_FLAG_CONTINUE as u32
        } else {
            0
        },
    };
    // SAFETY: `resp` is a live seccomp_notif_resp, the type this ioctl reads.
    let ret = unsafe {
        libc::ioctl(
            listener.as_raw_fd(),
            libc::SECCOMP_IOCTL_NOTIF_SEND,
            &resp as *const libc::seccomp_notif_resp,
        )
    };
    Errno::result(ret).map(drop)
}
