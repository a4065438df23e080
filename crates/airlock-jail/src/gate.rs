//! The jail's half of the network gate: in a gated sandbox every `connect` stops at a seccomp
//! listener that the supervisor holds, and the supervisor answers for the kernel. The sandbox's
//! network namespace has nothing but loopback: an allowed connection is pointed at the gate's
//! relay listener, which lives in that same namespace, and only the supervisor, outside, talks
//! to the destination. No socket of the host's namespace is ever handed into the sandbox.
//!
//! This module gives that listener a safe face ([`Notifier`]); the caller receives it with the
//! DNS socket and the relay listener as [`crate::GateSockets`]. Deciding and relaying, the
//! gate itself, is `airlock_egress::gate`'s job.

use std::io;
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::{FileExt, MetadataExt as _};

use crate::sys;

/// Can this kernel gate a sandbox's connects (seccomp user notifications)? See `airlock check`
/// for which kernels can relay through the gate as well.
pub fn supported() -> bool {
    sys::seccomp_notify_supported()
}

/// The supervisor's end of a gated sandbox's seccomp listener.
pub struct Notifier {
    listener: OwnedFd,
}

/// A syscall of the sandbox waiting for the supervisor's answer.
#[derive(Debug, Clone, Copy)]
pub struct Notification {
    pub id: u64,
    /// In the host's pid namespace.
    pub pid: u32,
    pub nr: i32,
    pub args: [u64; 6],
}

fn io(errno: nix::errno::Errno) -> io::Error {
    io::Error::from_raw_os_error(errno as i32)
}

impl Notifier {
    pub(crate) fn new(listener: OwnedFd) -> Notifier {
        Notifier { listener }
    }

    /// The next waiting syscall; an error once no process of the sandbox is left.
    pub fn recv(&self) -> io::Result<Notification> {
        loop {
            match sys::notif_recv(self.listener.as_fd()) {
                Ok(n) => {
                    return Ok(Notification {
                        id: n.id,
                        pid: n.pid,
                        nr: n.nr,
                        args: n.args,
                    })
                }
                Err(nix::errno::Errno::EINTR) => continue,
                // The waiting thread went away (killed, or signalled out of the syscall): go on,
                // unless no process is left to use the filter at all.
                Err(nix::errno::Errno::ENOENT) if !self.hung_up() => continue,
                Err(e) => return Err(io(e)),
            }
        }
    }

    /// Let the kernel run the syscall as asked. Only for what needs no protection: what the
    /// sandbox could do anyway (the arguments may change between the check and the run).
    pub fn pass(&self, id: u64) -> io::Result<()> {
        sys::notif_send(self.listener.as_fd(), id, 0, 0, true).map_err(io)
    }

    /// The syscall fails with `errno`.
    pub fn fail(&self, id: u64, errno: i32) -> io::Result<()> {
        sys::notif_send(self.listener.as_fd(), id, 0, -errno, false).map_err(io)
    }

    /// The syscall returns `val` without running.
    pub fn succeed(&self, id: u64, val: i64) -> io::Result<()> {
        sys::notif_send(self.listener.as_fd(), id, val, 0, false).map_err(io)
    }

    /// Is notification `id` still waiting? Checked after opening the process's memory, so that
    /// a pid reused by another process meanwhile is never read or written.
    pub fn still_waiting(&self, id: u64) -> bool {
        sys::notif_id_valid(self.listener.as_fd(), id)
    }

    /// Has every process using the filter gone?
    fn hung_up(&self) -> bool {
        let mut fds = [nix::poll::PollFd::new(
            self.listener.as_fd(),
            nix::poll::PollFlags::POLLIN,
        )];
        match nix::poll::poll(&mut fds, nix::poll::PollTimeout::ZERO) {
            Ok(_) => fds[0]
                .revents()
                .is_some_and(|r| r.contains(nix::poll::PollFlags::POLLHUP)),
            Err(_) => true,
        }
    }
}

/// The thread-group (process) id of thread `tid`.
fn tgid(tid: u32) -> io::Result<i32> {
    std::fs::read_to_string(format!("/proc/{tid}/status"))?
        .lines()
        .find_map(|l| l.strip_prefix("Tgid:"))
        .and_then(|v| v.trim().parse().ok())
        .ok_or_else(|| io::Error::other("no Tgid"))
}

/// The memory of the thread that sent notification `n`, opened and then checked to still be
/// that thread's (see [`Notifier::still_waiting`]).
pub struct Memory {
    file: std::fs::File,
}

impl Memory {
    pub fn open(notifier: &Notifier, n: &Notification) -> io::Result<Memory> {
        let file = std::fs::File::open(format!("/proc/{}/mem", n.pid))?;
        if !notifier.still_waiting(n.id) {
            return Err(io::Error::other("the thread is gone"));
        }
        Ok(Memory { file })
    }

    /// `len` bytes at `addr` (a syscall argument it pointed to). Trust them only for what the
    /// caller itself does: the process may change them afterwards.
    pub fn read(&self, addr: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.file.read_exact_at(&mut buf, addr)?;
        Ok(buf)
    }
}

/// The longest the gate's own connect of a blocking socket waits (see [`SocketInfo::connect`]).
pub const CONNECT_WAIT: std::time::Duration = std::time::Duration::from_millis(100);

/// What the gate needs to know of a socket a process is connecting, read from a copy of it.
pub struct SocketInfo {
    /// The copy (see [`SocketInfo::allow_ipv4_mapped`]).
    copy: OwnedFd,
    /// `libc::SOCK_STREAM`, `SOCK_DGRAM`…
    pub kind: i32,
    /// Its connect returns at once (an event loop's socket).
    pub nonblocking: bool,
    /// An IPv6 socket that may not reach IPv4-mapped addresses (IPV6_V6ONLY).
    pub v6_only: bool,
    /// Where a stream socket's connection stands (a datagram socket's is always `None`).
    pub connection: Connection,
}

/// Where a stream socket's connection stands, as its next connect will find it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Connection {
    /// Neither connected nor connecting: a connect would start one.
    None,
    /// A connect is under way: the kernel answers another with EALREADY.
    Connecting,
    /// Connected (or listening): the kernel answers a connect with EISCONN.
    Connected,
}

/// The type and mode of socket fd `fd` of process `pid`, read from a copy of it.
pub fn socket_info(pid: u32, fd: u64) -> io::Result<SocketInfo> {
    // A notification names the thread; a pidfd is for its process.
    let pidfd = sys::pidfd_open(nix::unistd::Pid::from_raw(tgid(pid)?)).map_err(io)?;
    let copy = sys::pidfd_getfd(pidfd.as_fd(), fd as i32).map_err(io)?;
    // A pidfd reads the thread group leader's file table; a thread cloned without CLONE_FILES
    // has one of its own, whose fd of that number is another socket. Its own, by /proc/TID/fd.
    let ours = nix::sys::stat::fstat(&copy).map_err(io)?;
    let its = std::fs::metadata(format!("/proc/{pid}/fd/{fd}"))?;
    if (ours.st_dev, ours.st_ino) != (its.dev(), its.ino()) {
        return Err(io::Error::other(
            "the socket is not the connecting thread's own (a thread with a file table of its own)",
        ));
    }
    let kind =
        nix::sys::socket::getsockopt(&copy, nix::sys::socket::sockopt::SockType).map_err(io)?;
    let flags = nix::fcntl::fcntl(&copy, nix::fcntl::FcntlArg::F_GETFL).map_err(io)?;
    // Not an IPv6 socket: the option does not exist, and does not matter.
    let v6_only =
        nix::sys::socket::getsockopt(&copy, nix::sys::socket::sockopt::Ipv6V6Only).unwrap_or(false);
    let connection = if kind == nix::sys::socket::SockType::Stream {
        connection(&copy)
    } else {
        Connection::None
    };
    Ok(SocketInfo {
        copy,
        connection,
        kind: kind as i32,
        nonblocking: nix::fcntl::OFlag::from_bits_truncate(flags)
            .contains(nix::fcntl::OFlag::O_NONBLOCK),
        v6_only,
    })
}

/// A stream socket's connection, without unsafe code: a peer means connected; listening is
/// SO_ACCEPTCONN; and TCP reports POLLHUP on a socket in TCP_CLOSE, so a socket with neither a
/// peer nor a hang-up is connecting. A connected socket whose connection has since ended in
/// both directions reads as `None` (no peer, hung up) although the kernel still answers EISCONN:
/// the gate's bound on connections covers that case.
fn connection(socket: &OwnedFd) -> Connection {
    use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
    use nix::sys::socket::{getpeername, getsockopt, sockopt::AcceptConn, SockaddrStorage};
    use std::os::fd::AsRawFd;
    if getpeername::<SockaddrStorage>(socket.as_raw_fd()).is_ok()
        || getsockopt(socket, AcceptConn).unwrap_or(false)
    {
        return Connection::Connected;
    }
    let mut fds = [PollFd::new(socket.as_fd(), PollFlags::POLLOUT)];
    match poll(&mut fds, PollTimeout::ZERO) {
        Ok(_)
            if fds[0]
                .revents()
                .is_some_and(|r| !r.contains(PollFlags::POLLHUP)) =>
        {
            Connection::Connecting
        }
        _ => Connection::None,
    }
}

impl SocketInfo {
    /// Let this IPv6 socket reach IPv4-mapped addresses (clear IPV6_V6ONLY): the gate's relay,
    /// which an allowed connect is sent to, is one. The socket is not bound yet (it is in its
    /// connect), so the kernel allows the change; the connect then goes only where the gate
    /// sends it, as every other.
    pub fn allow_ipv4_mapped(&self) -> io::Result<()> {
        nix::sys::socket::setsockopt(&self.copy, nix::sys::socket::sockopt::Ipv6V6Only, &false)
            .map_err(io)
    }

    /// Connect the socket to `to` (in its own network namespace, whoever calls this), as its
    /// own connect would: EINPROGRESS for a non-blocking one still connecting. For the gate,
    /// which connects an allowed connect's socket to its relay itself and answers the connect
    /// with the result, so that nothing is written into the process's memory (a program that
    /// keeps the address it passed, as apt does, would find the relay's there).
    ///
    /// A blocking socket's connect is given at most [`CONNECT_WAIT`] (its send timeout, set
    /// for the call and put back after): EINPROGRESS then, the socket still connecting. A
    /// program can make its handshake hang (a TCP-MD5 key the relay does not have), and the
    /// gate's thread must not hang with it; the caller lets the program's own connect wait.
    pub fn connect(&self, to: std::net::SocketAddr) -> io::Result<()> {
        use nix::sys::socket::sockopt::SendTimeout;
        let timeout = match self.nonblocking {
            true => None,
            false => {
                let was = nix::sys::socket::getsockopt(&self.copy, SendTimeout).map_err(io)?;
                let wait = nix::sys::time::TimeVal::new(0, CONNECT_WAIT.as_micros() as _);
                nix::sys::socket::setsockopt(&self.copy, SendTimeout, &wait).map_err(io)?;
                Some(was)
            }
        };
        let result = self.connect_now(to);
        if let Some(was) = timeout {
            nix::sys::socket::setsockopt(&self.copy, SendTimeout, &was).map_err(io)?;
        }
        result
    }

    fn connect_now(&self, to: std::net::SocketAddr) -> io::Result<()> {
        use std::os::fd::AsRawFd;
        let result = match to {
            std::net::SocketAddr::V4(v4) => nix::sys::socket::connect(
                self.copy.as_raw_fd(),
                &nix::sys::socket::SockaddrIn::from(v4),
            ),
            std::net::SocketAddr::V6(v6) => nix::sys::socket::connect(
                self.copy.as_raw_fd(),
                &nix::sys::socket::SockaddrIn6::from(v6),
            ),
        };
        result.map_err(io)
    }
}
