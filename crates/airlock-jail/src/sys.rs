//! The raw system calls that neither nix nor landlock wrap. Every `unsafe` block of airlock lives
//! in this crate, and most of them in this file.

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::unistd::Pid;

/// What `clone` returned in the calling process.
pub(crate) enum Forked {
    Parent(Pid),
    Child,
}

/// `clone(2)` with fork semantics (no shared memory, child continues on a copy of the stack), plus
/// namespace `flags`. nix's `clone` insists on a separate stack, which we do not need.
///
/// The caller must be single-threaded: the child gets a copy of only the calling thread, so a lock
/// held by another thread (the allocator's, say) would stay locked forever in the child.
pub(crate) fn clone_fork(flags: libc::c_int) -> nix::Result<Forked> {
    // SAFETY: with a null stack, clone behaves like fork(2): the child runs on a copy-on-write copy of
    // this thread's stack and memory. No pointer arguments are passed. The single-thread requirement
    // is documented above and upheld by `prepare`'s callers (the CLI launches before starting threads).
    let ret = unsafe {
        libc::syscall(
            libc::SYS_clone,
            (flags | libc::SIGCHLD) as libc::c_ulong,
            std::ptr::null_mut::<libc::c_void>(),
            std::ptr::null_mut::<libc::c_int>(),
            std::ptr::null_mut::<libc::c_int>(),
            0 as libc::c_ulong,
        )
    };
    match Errno::result(ret)? {
        0 => Ok(Forked::Child),
        pid => Ok(Forked::Parent(Pid::from_raw(pid as libc::pid_t))),
    }
}

/// A child made with `CLONE_VM`, so that nothing of this process is copied for it (a fork of the
/// supervisor costs a tenth of a millisecond), running a function on a stack of its own. Dropped,
/// it is killed and reaped, and only then is its stack freed.
pub(crate) struct VmChild {
    pub pid: Pid,
    _stack: Box<[u8]>,
}

impl VmChild {
    /// Start `func(arg)` in a child with `flags` (`CLONE_VM` and `SIGCHLD` are added).
    ///
    /// # Safety
    /// `func` may touch no memory it shares with us but what `arg` points to, which must outlive
    /// the child: no allocation, no locks, no thread-local data (glibc's errno included).
    // SAFETY: an unsafe fn only for that promise of its callers; each call site says why it holds.
    unsafe fn start(
        func: extern "C" fn(*mut libc::c_void) -> libc::c_int,
        arg: *mut libc::c_void,
        flags: libc::c_int,
        stack_bytes: usize,
    ) -> nix::Result<VmChild> {
        let mut stack = vec![0u8; stack_bytes].into_boxed_slice();
        let top = stack.as_mut_ptr().wrapping_add(stack.len());
        // SAFETY: the child runs on `stack`, which it alone uses and which lives until the child
        // is reaped (Drop); what `func` touches is the caller's promise.
        let ret = unsafe {
            libc::clone(
                func,
                top.cast(),
                flags | libc::CLONE_VM | libc::SIGCHLD,
                arg,
            )
        };
        Ok(VmChild {
            pid: Pid::from_raw(Errno::result(ret)?),
            _stack: stack,
        })
    }

    /// Wait for the child to end; from then on its pid is not ours to signal.
    fn wait(&mut self) -> nix::Result<nix::sys::wait::WaitStatus> {
        let status = loop {
            match nix::sys::wait::waitpid(self.pid, None) {
                Err(Errno::EINTR) => continue,
                other => break other,
            }
        };
        self.pid = Pid::from_raw(0);
        status
    }

    /// Kill the child (unless waited for already) and wait for it.
    fn end(&mut self) {
        if self.pid.as_raw() > 0 {
            let _ = nix::sys::signal::kill(self.pid, nix::sys::signal::Signal::SIGKILL);
            let _ = self.wait();
        }
    }
}

impl Drop for VmChild {
    fn drop(&mut self) {
        self.end();
    }
}

/// A process that does nothing but wait to be killed: it only holds a namespace that `flags`
/// created until the caller has opened it.
pub(crate) fn clone_idle(flags: libc::c_int) -> nix::Result<VmChild> {
    extern "C" fn wait_to_be_killed(_: *mut libc::c_void) -> libc::c_int {
        loop {
            // SAFETY: pause(2) takes no arguments and touches no memory; the raw syscall does
            // not write errno unless a signal handler ran, and the signals this process handles
            // (faults) cannot happen in this loop.
            unsafe { libc::syscall(libc::SYS_pause) };
        }
    }
    // SAFETY: `wait_to_be_killed` touches no memory at all.
    unsafe { VmChild::start(wait_to_be_killed, std::ptr::null_mut(), flags, 16 * 1024) }
}

/// A network namespace being made by a helper process while its parent goes on (see
/// [`start_new_network`]); [`NewNetwork::finish`] waits for it.
pub(crate) struct NewNetwork {
    /// Declared first: dropped (killed and reaped) before what it uses.
    helper: VmChild,
    /// Shared with the helper: where it leaves the namespace's fd (it shares our fd table).
    slots: Box<HelperSlots>,
    /// The user namespace the helper enters, kept open until it is reaped.
    _user_namespace: Option<OwnedFd>,
}

/// What the network helper and its parent share.
struct HelperSlots {
    /// In: a user namespace to enter first, or -1.
    user_namespace: RawFd,
    /// Out: the network namespace's fd, or -1 until the helper has it.
    network: std::sync::atomic::AtomicI32,
}

/// Start making a new network namespace, with its loopback up, in a helper that shares this
/// process's memory and fd table (`CLONE_VM | CLONE_FILES`): creating a network namespace is the
/// single most expensive step of a sandbox's setup (~0.65 ms here), and this way it overlaps with
/// other work. With `user_namespace`, the helper enters it first, so that the network namespace
/// belongs to it (the sandbox's own, when unprivileged: its owner may enter it). The helper makes
/// its system calls through rustix, which does not write `errno`: it has no thread-local storage
/// of its own, and would write ours. It takes no lock, so the caller may fork ([`clone_fork`])
/// while it runs.
pub(crate) fn start_new_network(user_namespace: Option<OwnedFd>) -> nix::Result<NewNetwork> {
    use std::sync::atomic::{AtomicI32, Ordering};
    extern "C" fn make(slots: *mut libc::c_void) -> libc::c_int {
        // SAFETY: `slots` is the HelperSlots that NewNetwork keeps alive until the helper is
        // reaped; the helper only reads `user_namespace` and writes the atomic.
        let slots = unsafe { &*(slots as *const HelperSlots) };
        match make_network(slots.user_namespace) {
            Ok(fd) => {
                slots.network.store(fd, Ordering::Release);
                0
            }
            Err(errno) => errno.raw_os_error(),
        }
    }
    let slots = Box::new(HelperSlots {
        user_namespace: user_namespace.as_ref().map_or(-1, |fd| fd.as_raw_fd()),
        network: AtomicI32::new(-1),
    });
    let arg = (&*slots as *const HelperSlots).cast_mut().cast();
    // SAFETY: `make` touches only `slots` (and the fd it names), which NewNetwork keeps until
    // its helper is reaped; its system calls go through rustix (no errno).
    let helper = unsafe { VmChild::start(make, arg, libc::CLONE_FILES, 64 * 1024) }?;
    Ok(NewNetwork {
        helper,
        slots,
        _user_namespace: user_namespace,
    })
}

/// Let `helper` run on any allowed CPU but the one we are on. A small machine's scheduler may
/// queue a new process behind its parent and leave the other CPU idle (it does not move a task
/// that ran a moment ago), and the helper exists to use that other CPU. Best effort.
pub(crate) fn steer_away(helper: Pid) {
    use nix::sched::{sched_getaffinity, sched_getcpu, sched_setaffinity};
    let (Ok(mut others), Ok(here)) = (sched_getaffinity(Pid::from_raw(0)), sched_getcpu()) else {
        return;
    };
    if others.unset(here).is_err() {
        return;
    }
    let any = (0..nix::sched::CpuSet::count()).any(|cpu| others.is_set(cpu).unwrap_or(false));
    if any {
        let _ = sched_setaffinity(helper, &others);
    }
}

/// Keep `helper` on the CPU we are on: the one [`steer_away`] kept another process off, which
/// we are about to leave idle (waiting on the disk and then on the helper). Best effort.
pub(crate) fn keep_here(helper: Pid) {
    use nix::sched::{sched_getcpu, sched_setaffinity, CpuSet};
    let Ok(here) = sched_getcpu() else {
        return;
    };
    let mut only = CpuSet::new();
    if only.set(here).is_ok() {
        let _ = sched_setaffinity(helper, &only);
    }
}

/// The helper's work: a new network namespace, its loopback up, and an fd that holds it.
fn make_network(user_namespace: RawFd) -> rustix::io::Result<RawFd> {
    use rustix::fs::{open, Mode, OFlags};
    use std::os::fd::IntoRawFd;
    if user_namespace >= 0 {
        // SAFETY: NewNetwork keeps this fd open until the helper has been reaped.
        let user_namespace = unsafe { BorrowedFd::borrow_raw(user_namespace) };
        rustix::thread::move_into_link_name_space(
            user_namespace,
            Some(rustix::thread::LinkNameSpaceType::User),
        )?;
    }
    // SAFETY: CLONE_NEWNET unshares no file descriptors, only the network namespace.
    unsafe { rustix::thread::unshare_unsafe(rustix::thread::UnshareFlags::NEWNET) }?;
    loopback_up()?;
    let namespace = open(
        c"/proc/thread-self/ns/net",
        OFlags::RDONLY | OFlags::CLOEXEC,
        Mode::empty(),
    )?;
    Ok(namespace.into_raw_fd())
}

/// Bring the loopback interface of the current network namespace up. Through rustix, so that a
/// helper without thread-local storage of its own can call it (see [`start_new_network`]); its
/// socket is closed through rustix too, not by a drop (glibc's close would write errno).
fn loopback_up() -> rustix::io::Result<()> {
    use std::os::fd::IntoRawFd;
    let socket = rustix::net::socket_with(
        rustix::net::AddressFamily::INET,
        rustix::net::SocketType::DGRAM,
        rustix::net::SocketFlags::CLOEXEC,
        None,
    )?;
    // SAFETY: ifreq is plain old data; all-zero is a valid value.
    let mut request: libc::ifreq = unsafe { std::mem::zeroed() };
    for (dst, src) in request.ifr_name.iter_mut().zip(b"lo\0") {
        *dst = *src as libc::c_char;
    }
    request.ifr_ifru.ifru_flags = (libc::IFF_UP | libc::IFF_RUNNING) as libc::c_short;
    // SAFETY: SIOCSIFFLAGS reads a `struct ifreq`, which the setter passes a pointer to.
    let done = unsafe {
        rustix::ioctl::ioctl(
            &socket,
            rustix::ioctl::Setter::<{ libc::SIOCSIFFLAGS as rustix::ioctl::Opcode }, _>::new(
                request,
            ),
        )
    };
    // SAFETY: the socket is ours alone; into_raw_fd gave up the OwnedFd that would close it.
    unsafe { rustix::io::close(socket.into_raw_fd()) };
    done
}

impl NewNetwork {
    pub(crate) fn pid(&self) -> Pid {
        self.helper.pid
    }

    /// The helper has made the namespace (it may not have exited yet).
    pub(crate) fn is_done(&self) -> bool {
        self.slots
            .network
            .load(std::sync::atomic::Ordering::Acquire)
            >= 0
    }

    /// Wait for the helper; the namespace it made, or why it could not.
    pub(crate) fn finish(mut self) -> nix::Result<OwnedFd> {
        match self.helper.wait()? {
            nix::sys::wait::WaitStatus::Exited(_, 0) => {
                let raw = self
                    .slots
                    .network
                    .swap(-1, std::sync::atomic::Ordering::AcqRel);
                if raw < 0 {
                    return Err(Errno::EBADF);
                }
                // SAFETY: the helper opened `raw` in our shared fd table and gave it up; nothing
                // else owns it (the slot no longer names it, so Drop will not close it).
                Ok(unsafe { OwnedFd::from_raw_fd(raw) })
            }
            nix::sys::wait::WaitStatus::Exited(_, errno) => Err(Errno::from_raw(errno)),
            _ => Err(Errno::ECHILD),
        }
    }
}

impl Drop for NewNetwork {
    /// A helper that was not waited for (its parent failed first) is killed and reaped first; a
    /// namespace it made but nobody took is closed.
    fn drop(&mut self) {
        self.helper.end();
        let raw = self
            .slots
            .network
            .swap(-1, std::sync::atomic::Ordering::AcqRel);
        if raw >= 0 {
            // SAFETY: the helper, reaped, left `raw` in our fd table and nothing took it: this is
            // its only owner.
            drop(unsafe { OwnedFd::from_raw_fd(raw) });
        }
    }
}

/// Give SIGCHLD its default action again. Ignored (as a caller may pass it on), children are
/// reaped by the kernel the moment they exit: the supervisor could not wait for its helpers, and
/// the sandbox's pid 1, which inherits it, would never learn that the command ended.
pub(crate) fn default_sigchld() {
    use nix::sys::signal::{sigaction, SaFlags, SigAction, SigHandler, SigSet, Signal};
    let default = SigAction::new(SigHandler::SigDfl, SaFlags::empty(), SigSet::empty());
    // SAFETY: installing the default disposition runs no handler code, so nothing here can be
    // unsound in a signal handler's context.
    let _ = unsafe { sigaction(Signal::SIGCHLD, &default) };
}

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

/// A copy of fd `target` of the process `pidfd` refers to.
pub(crate) fn pidfd_getfd(pidfd: BorrowedFd, target: i32) -> nix::Result<OwnedFd> {
    // SAFETY: pidfd_getfd takes integers only.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_getfd, pidfd.as_raw_fd(), target, 0u32) };
    let fd = Errno::result(ret)? as libc::c_int;
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}

/// A pidfd for `pid`, so the supervisor can poll for its exit next to other events.
pub(crate) fn pidfd_open(pid: Pid) -> nix::Result<OwnedFd> {
    // SAFETY: pidfd_open takes integers only.
    let ret = unsafe { libc::syscall(libc::SYS_pidfd_open, pid.as_raw(), 0u32) };
    let fd = Errno::result(ret)? as libc::c_int;
    // SAFETY: the kernel returned a new fd that nothing else owns.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
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

/// Start `path` with `argv` and `envp` (NULL-terminated arrays of pointers into live CStrings)
/// through posix_spawn: in a new session, with no blocked signals and every disposition back to
/// its default (the supervisor ignores SIGPIPE, and an ignored signal would stay ignored across
/// exec). glibc runs the child on its own stack with CLONE_VM|CLONE_VFORK, so no copy of this
/// process's memory is made. Returns the exec's errno if the program could not be started.
pub(crate) fn spawn_in_new_session(
    path: &CString,
    argv: &[*const libc::c_char],
    envp: &[*const libc::c_char],
) -> nix::Result<Pid> {
    if argv.last() != Some(&std::ptr::null()) || envp.last() != Some(&std::ptr::null()) {
        return Err(Errno::EINVAL);
    }
    // SAFETY: every pointer below (attributes, signal sets, path, argv, envp) is live for the calls;
    // argv and envp are NULL-terminated (checked above); the attributes are initialised by
    // posix_spawnattr_init before use and destroyed before returning.
    unsafe {
        let mut attr: libc::posix_spawnattr_t = std::mem::zeroed();
        Errno::result(libc::posix_spawnattr_init(&mut attr)).map_err(|_| Errno::ENOMEM)?;
        let mut empty: libc::sigset_t = std::mem::zeroed();
        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut empty);
        libc::sigfillset(&mut all);
        let flags = libc::POSIX_SPAWN_SETSID as libc::c_short
            | libc::POSIX_SPAWN_SETSIGMASK as libc::c_short
            | libc::POSIX_SPAWN_SETSIGDEF as libc::c_short;
        let mut ret = libc::posix_spawnattr_setflags(&mut attr, flags);
        if ret == 0 {
            ret = libc::posix_spawnattr_setsigmask(&mut attr, &empty);
        }
        if ret == 0 {
            ret = libc::posix_spawnattr_setsigdefault(&mut attr, &all);
        }
        let mut pid: libc::pid_t = 0;
        if ret == 0 {
            ret = libc::posix_spawn(
                &mut pid,
                path.as_ptr(),
                std::ptr::null(),
                &attr,
                argv.as_ptr() as *const *mut libc::c_char,
                envp.as_ptr() as *const *mut libc::c_char,
            );
        }
        libc::posix_spawnattr_destroy(&mut attr);
        if ret == 0 {
            Ok(Pid::from_raw(pid))
        } else {
            Err(Errno::from_raw(ret))
        }
    }
}

/// Wait until one of `set`'s signals (blocked by the caller) is pending, and take it; give up
/// after `timeout` when one is given. None when the time passed or a signal outside `set`
/// interrupted the wait.
pub(crate) fn wait_for_signal(
    set: &nix::sys::signal::SigSet,
    timeout: Option<std::time::Duration>,
) -> Option<nix::sys::signal::Signal> {
    let Some(timeout) = timeout else {
        return set.wait().ok();
    };
    let timeout = libc::timespec {
        tv_sec: libc::time_t::try_from(timeout.as_secs()).unwrap_or(libc::time_t::MAX),
        tv_nsec: libc::c_long::from(timeout.subsec_nanos() as i32),
    };
    // SAFETY: `set` is a valid sigset_t for the call, the siginfo pointer may be null, and
    // `timeout` is a valid timespec that outlives the call.
    let signal = unsafe { libc::sigtimedwait(set.as_ref(), std::ptr::null_mut(), &timeout) };
    nix::sys::signal::Signal::try_from(signal).ok()
}
