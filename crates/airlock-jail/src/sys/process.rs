//! Processes: the clone of the setup process and of probes, children that share our memory
//! (the helpers), where they run, pidfds, the spawn of the command and the signals pid 1 waits
//! for.

use std::ffi::CString;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd};

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
    pub(super) unsafe fn start(
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
    pub(super) fn wait(&mut self) -> nix::Result<nix::sys::wait::WaitStatus> {
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
    pub(super) fn end(&mut self) {
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
/// created until the caller has opened it. It dies with the caller: a helper that outlived a
/// supervisor killed outright would hold its namespace (with every capability in it) for good.
pub(crate) fn clone_idle(flags: libc::c_int) -> nix::Result<VmChild> {
    /// `parent` is the caller's pid, carried as the pointer's address: never dereferenced.
    extern "C" fn wait_to_be_killed(parent: *mut libc::c_void) -> libc::c_int {
        // SAFETY: raw prctl(2), getppid(2) and exit(2) take integers and touch no memory; none of
        // them writes errno unless it fails, which these cannot do here.
        unsafe {
            libc::syscall(
                libc::SYS_prctl,
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
            );
            // The caller died before the signal was set: this process has another parent now.
            if libc::syscall(libc::SYS_getppid) as usize != parent.addr() {
                libc::syscall(libc::SYS_exit, 0);
            }
        }
        // Not pause(2) alone: should the parent-death signal ever not come (it is sent when
        // the parent *thread* ends), this process would wait forever, holding its namespace.
        // It looks at its parent once a second and leaves when it has another.
        let second = libc::timespec {
            tv_sec: 1,
            tv_nsec: 0,
        };
        loop {
            // SAFETY: nanosleep(2) reads `second`, which lives on this child's own stack, and
            // writes nothing (no remainder asked for); getppid(2) and exit(2) touch no memory.
            // The raw syscalls write no errno.
            unsafe {
                libc::syscall(
                    libc::SYS_nanosleep,
                    &second as *const libc::timespec,
                    std::ptr::null_mut::<libc::timespec>(),
                );
                if libc::syscall(libc::SYS_getppid) as usize != parent.addr() {
                    libc::syscall(libc::SYS_exit, 0);
                }
            }
        }
    }
    let parent = std::ptr::without_provenance_mut(std::process::id() as usize);
    // SAFETY: `wait_to_be_killed` touches no memory at all (its argument is a number).
    unsafe { VmChild::start(wait_to_be_killed, parent, flags, 16 * 1024) }
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

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]
    use super::*;

    const PLAY_SUPERVISOR: &str = "AIRLOCK_TEST_IDLE_HELPER_PARENT";

    /// Whether `pid` is gone, or a zombie waiting for init to reap it: dead either way.
    fn dead(pid: i32) -> bool {
        std::fs::read_to_string(format!("/proc/{pid}/stat"))
            .map(|stat| {
                stat.rsplit(')')
                    .next()
                    .unwrap_or("")
                    .trim_start()
                    .starts_with('Z')
            })
            .unwrap_or(true)
    }

    // A supervisor killed outright (SIGKILL: no Drop, no reaping) must not leave its idle helper
    // behind. This test runs itself again as that supervisor, which starts a helper, says its
    // pid, and waits to be killed.
    #[test]
    fn an_idle_helper_dies_with_its_supervisor() {
        if std::env::var_os(PLAY_SUPERVISOR).is_some() {
            let helper = clone_idle(0).unwrap();
            println!("helper {}", helper.pid.as_raw());
            std::mem::forget(helper);
            std::thread::sleep(std::time::Duration::from_secs(60));
            return;
        }
        let mut supervisor = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "sys::process::tests::an_idle_helper_dies_with_its_supervisor",
            ])
            .args(["--nocapture", "--test-threads=1"])
            .env(PLAY_SUPERVISOR, "1")
            .stdout(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let mut out = std::io::BufReader::new(supervisor.stdout.take().unwrap());
        let helper = loop {
            let mut line = String::new();
            let read = std::io::BufRead::read_line(&mut out, &mut line).unwrap();
            assert!(read > 0, "the supervisor named no helper");
            // After libtest's "test NAME ... " on the same line.
            if let Some((_, pid)) = line.trim().rsplit_once("helper ") {
                break pid.parse::<i32>().unwrap();
            }
        };
        assert!(!dead(helper), "the helper did not start");
        supervisor.kill().unwrap();
        supervisor.wait().unwrap();
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while !dead(helper) {
            assert!(
                std::time::Instant::now() < deadline,
                "helper {helper} outlived its supervisor"
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
