//! The network helper: a child sharing our memory and fd table that makes the sandbox's network
//! namespace, its loopback up, while the supervisor goes on.

use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::unistd::Pid;

use super::process::VmChild;

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
/// of its own, and would write ours. It takes no lock, so the caller may fork
/// ([`super::clone_fork`]) while it runs.
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
