//! The setup protocol between the supervisor (`launch`) and the setup process (`inside.rs`,
//! which becomes pid 1 in `init.rs`): the order of the steps, the messages that mark them, and
//! the one place where file descriptors pass between the two.
//!
//! # The steps
//!
//! The order is the security argument; `docs/security.md` walks through the same list, and the
//! code says `step N` where it carries one out. Messages are named as in [`Message`] and
//! [`Report`]. Steps of the two sides with no message between them run at the same time, on
//! the two CPUs.
//!
//! 1. **Checks** (supervisor): a command to run, Landlock present (or accepted as missing), a
//!    sandbox user that is not root on the host; which cgroup hierarchy applies.
//! 2. **Signals** (supervisor): the signals it forwards blocked and read from a signalfd; before
//!    the clone, so the setup process starts with them blocked.
//! 3. **Preparation** (supervisor): the control socket and the report pipe, the cached `/etc`,
//!    the output pipes. As root: the network helper (started ahead by
//!    [`crate::launch::start_network`], or now) and the two helper user namespaces, their maps
//!    not written yet.
//! 4. **Clone** (supervisor): the setup process in new mount, pid, ipc and uts namespaces, and a
//!    user namespace when unprivileged; not a network namespace (step 8). Steered to another
//!    CPU, watched through a pidfd.
//! 5. **Session** (setup process): the parent-death signal, a new session.
//! 6. **Maps** (both): as root, the supervisor writes the helper namespaces' maps while the setup
//!    process goes on. Unprivileged, it opens the setup process's user namespace, writes its
//!    maps and sends GO, which the setup process waits for. Then the hostname.
//! 7. **Base tree** (setup process): every mount private, the new root a fresh tmpfs, the system
//!    directories, `/etc`, `/dev`, `/proc`, private `/tmp` and `$HOME` (see `rootfs`).
//!    Meanwhile, unprivileged, the supervisor starts the network helper in that user namespace.
//! 8. **Network** (both): the supervisor waits for the helper and sends NAMESPACES (the network
//!    namespace, loopback up; as root also the two user namespaces); the setup process enters
//!    the network namespace, and in a gated sandbox binds the DNS socket and the gate's relay
//!    listener in it.
//! 9. **Workspace** (setup process): the profile binds outside the workspace, the workspace
//!    overlay (idmapped as root), the profile binds inside it, then the hides; every mount
//!    point found with openat2 `RESOLVE_IN_ROOT` (see `beneath`).
//! 10. **Pivot** (setup process): `pivot_root` into the tree, the host's root detached, `/` made
//!     read-only.
//! 11. **Cgroup** (both): the supervisor creates the run's cgroups once NAMESPACES is sent, while
//!     the setup process mounts; on v2 it moves the setup process in by pid; it sends CGROUP
//!     (on v1 the `tasks` files to join and to leave through) and CPU_USAGE. After its pivot
//!     the setup process takes them, joins (v1: writes `0` to each `tasks` file) and unshares a
//!     cgroup namespace.
//! 12. **Intent** (the caller): [`crate::launch::prepare`] returns once CGROUP and CPU_USAGE are
//!     sent; the caller writes the run's intent (an fsync) while the setup process goes through
//!     steps 13 to 15, and then calls [`crate::launch::Launching::start`].
//! 13. **User namespace** (setup process, root only): `setns` into the sandbox's user namespace.
//! 14. **Identity** (setup process): uid/gid 1000, the parent-death signal again, not dumpable.
//! 15. **Confinement** (setup process): no_new_privs, Landlock, rlimits, no capabilities, the
//!     seccomp filter; in a gated sandbox the filter's listener, the DNS socket and the relay go
//!     to the supervisor in GATE (sent now, read at step 16).
//! 16. **Go-ahead** (both): the setup process moves stdout/stderr onto the output pipes, takes
//!     every CPU back, reports READY and waits for START. The supervisor sends START as soon as
//!     `start` is called, before READY (in a gated sandbox: after READY and GATE), then reads
//!     the report: ERROR and its text, or READY. A sandbox prepared without its command
//!     ([`crate::prepare_without_command`]) gets it with START, in a memfd read and closed here.
//!     The setup process then closes every descriptor but the report pipe and the cgroup files
//!     pid 1 keeps.
//! 17. **Command** (pid 1): posix_spawn of the command; on v1 pid 1 leaves the run's cgroups;
//!     it reaps, forwards signals, holds the CPU limit, and at the command's end reports EXITED
//!     and exits.
//! 18. **Watch** (supervisor): forwards signals, holds the wall-clock limit, relays limited
//!     output, reads EXITED, reaps pid 1 and removes the run's cgroups.
//!
//! # The channels
//!
//! The control socket is a SOCK_SEQPACKET pair: one [`Message`] a packet, a tag byte with its
//! fds attached (SCM_RIGHTS); end of file means the other side died. The report pipe goes one
//! way, from the setup process (then pid 1) to the supervisor: [`Report`]s.

use std::io::{IoSlice, IoSliceMut, Read};
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, OwnedFd, RawFd};

use nix::errno::Errno;
use nix::sys::socket::{recvmsg, sendmsg, ControlMessage, ControlMessageOwned, MsgFlags};

use crate::error::{HasErrno as _, JailError, Result};

/// One message on the control socket. `Fd` is what the sender lends ([`BorrowedFd`]: it keeps
/// its own copy) or what the receiver owns ([`OwnedFd`]).
pub(crate) enum Message<Fd> {
    /// Step 6, supervisor → setup process, unprivileged only: its id maps are written. As root
    /// the setup process needs nothing from the supervisor before it mounts.
    Go,
    /// Step 8, supervisor → setup process: the sandbox's network namespace and, as root, the
    /// user namespaces made at step 3.
    Namespaces {
        users: Option<UserNamespaces<Fd>>,
        network: Fd,
    },
    /// Step 11, supervisor → setup process, when the run has a cgroup. On v1 the `tasks` files
    /// the setup process writes itself into, and as many that pid 1 writes itself out through
    /// once the command has started (see `cgroup::Join`); on v2 none: the supervisor has moved
    /// the setup process already.
    Cgroup { join: Vec<Fd>, leave: Vec<Fd> },
    /// Step 11, right after CGROUP: the file of the run's cgroup that counts its CPU time (v1's
    /// `cpuacct.usage`, v2's `cpu.stat`), or none when the hierarchy has no such count.
    CpuUsage(Option<Fd>),
    /// Step 15, setup process → supervisor, in a gated sandbox: its seccomp listener, whose
    /// every `connect` the supervisor answers, the resolver's UDP socket and TCP listener, and
    /// a relaying gate's relay listener.
    Gate {
        dns: Fd,
        dns_tcp: Fd,
        listener: Fd,
        relay: Option<Fd>,
    },
    /// Step 16, supervisor → setup process: the caller's intent is written; start the command
    /// once ready. With the command (a memfd, see [`crate::command`]) and its stdin when the
    /// sandbox was prepared without them; else the spec's command and the stdin it inherited.
    Start(Option<Given<Fd>>),
}

/// What a sandbox prepared without its command is given at START.
pub(crate) struct Given<Fd> {
    /// A memfd holding the command (see [`crate::command`]).
    pub command: Fd,
    /// What the command reads on its stdin.
    pub stdin: Fd,
}

/// As root: the user namespaces the supervisor made at step 3.
pub(crate) struct UserNamespaces<Fd> {
    /// Maps the workspace owner's files to the sandbox user (for the idmapped lower layer).
    pub idmap: Fd,
    /// Owned by root, its only ids the sandbox user's: entered at step 13.
    pub sandbox: Fd,
}

/// The most fds a message carries: CGROUP's two sets of five (memory, pids, freezer, cpuacct,
/// cpu).
const MAX_FDS: usize = 10;

/// A side of the setup channel, named in its errors ([`JailError::UnexpectedMessage`] and the
/// others).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Peer {
    Supervisor,
    SetupProcess,
}

impl std::fmt::Display for Peer {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Peer::Supervisor => "the supervisor",
            Peer::SetupProcess => "the setup process",
        })
    }
}

impl<Fd> Message<Fd> {
    fn tag(&self) -> u8 {
        match self {
            Message::Go => b'g',
            Message::Namespaces { .. } => b'n',
            Message::Cgroup { .. } => b'c',
            Message::CpuUsage(_) => b'u',
            Message::Gate { .. } => b'G',
            Message::Start(_) => b's',
        }
    }

    /// Its name in the step list.
    pub(crate) fn name(&self) -> &'static str {
        match self {
            Message::Go => "GO",
            Message::Namespaces { .. } => "NAMESPACES",
            Message::Cgroup { .. } => "CGROUP",
            Message::CpuUsage(_) => "CPU_USAGE",
            Message::Gate { .. } => "GATE",
            Message::Start(_) => "START",
        }
    }

    fn sender(&self) -> Peer {
        match self {
            Message::Gate { .. } => Peer::SetupProcess,
            _ => Peer::Supervisor,
        }
    }

    /// The error for a message that came where `wanted` was due: the peers disagree on the
    /// step, a bug.
    pub(crate) fn unexpected(&self, expected: &'static str) -> JailError {
        JailError::UnexpectedMessage {
            expected,
            received: self.name(),
            from: self.sender(),
        }
    }
}

impl<Fd: AsRawFd> Message<Fd> {
    /// The fds in the order they travel (see [`decode`]).
    fn raw_fds(&self) -> Vec<RawFd> {
        match self {
            Message::Go => Vec::new(),
            Message::Start(given) => given
                .iter()
                .flat_map(|given| [given.command.as_raw_fd(), given.stdin.as_raw_fd()])
                .collect(),
            Message::Namespaces { users, network } => users
                .iter()
                .flat_map(|users| [users.idmap.as_raw_fd(), users.sandbox.as_raw_fd()])
                .chain([network.as_raw_fd()])
                .collect(),
            Message::Cgroup { join, leave } => {
                join.iter().chain(leave).map(AsRawFd::as_raw_fd).collect()
            }
            Message::CpuUsage(usage) => usage.iter().map(AsRawFd::as_raw_fd).collect(),
            Message::Gate {
                dns,
                dns_tcp,
                listener,
                relay,
            } => [dns, dns_tcp, listener]
                .into_iter()
                .chain(relay)
                .map(AsRawFd::as_raw_fd)
                .collect(),
        }
    }
}

/// Send one message with its fds; the sender keeps its copies.
pub(crate) fn send(socket: BorrowedFd, message: &Message<BorrowedFd>) -> Result<()> {
    let tag = message.tag();
    let fds = message.raw_fds();
    let iov = [IoSlice::new(std::slice::from_ref(&tag))];
    let rights = [ControlMessage::ScmRights(&fds)];
    let cmsgs: &[ControlMessage] = if fds.is_empty() { &[] } else { &rights };
    let sent = sendmsg::<()>(socket.as_raw_fd(), &iov, cmsgs, MsgFlags::empty(), None);
    match (sent, message.sender()) {
        (Ok(_), _) => Ok(()),
        // The setup process died; its report, read next, says why.
        (Err(errno), Peer::Supervisor) => Err(JailError::Syscall {
            action: "signal the sandbox",
            errno,
            hint: "the setup process died; see above",
        }),
        (Err(errno), Peer::SetupProcess) => Err(JailError::SendFailed {
            to: Peer::Supervisor,
            errno,
        }),
    }
}

/// The next message from `from`, with the fds it carries, now ours (close-on-exec).
pub(crate) fn receive(socket: BorrowedFd, from: Peer) -> Result<Message<OwnedFd>> {
    let mut tag = [0u8; 1];
    let mut iov = [IoSliceMut::new(&mut tag)];
    let mut space = nix::cmsg_space!([RawFd; MAX_FDS]);
    let received = recvmsg::<()>(
        socket.as_raw_fd(),
        &mut iov,
        Some(&mut space),
        MsgFlags::MSG_CMSG_CLOEXEC,
    )
    .map_err(|errno| JailError::ReceiveFailed { from, errno })?;
    // Owned before anything else is looked at, so that every error below closes them.
    let mut fds = Vec::new();
    for cmsg in received
        .cmsgs()
        .map_err(|errno| JailError::ReceiveFailed { from, errno })?
    {
        if let ControlMessageOwned::ScmRights(raw) = cmsg {
            fds.extend(raw.into_iter().map(owned_fd));
        }
    }
    if received.bytes != 1 {
        return Err(JailError::PeerGone { peer: from });
    }
    if received.flags.contains(MsgFlags::MSG_CTRUNC) {
        return Err(JailError::TooManyDescriptors { from });
    }
    decode(tag[0], fds, from)
}

/// A message from its tag and fds; what does not fit its step is refused.
fn decode(tag: u8, mut fds: Vec<OwnedFd>, from: Peer) -> Result<Message<OwnedFd>> {
    let count = fds.len();
    let malformed = |message: &'static str| JailError::MalformedMessage {
        message,
        fds: count,
        from,
    };
    let message = match tag {
        b'g' if count == 0 => Message::Go,
        b's' if count == 0 => Message::Start(None),
        b's' if count == 2 => {
            let mut fds = fds.into_iter();
            match (fds.next(), fds.next()) {
                (Some(command), Some(stdin)) => Message::Start(Some(Given { command, stdin })),
                _ => return Err(malformed("START")),
            }
        }
        b'n' if count == 1 || count == 3 => {
            let network = fds.pop().ok_or_else(|| malformed("NAMESPACES"))?;
            let mut users = fds.into_iter();
            Message::Namespaces {
                users: users
                    .next()
                    .zip(users.next())
                    .map(|(idmap, sandbox)| UserNamespaces { idmap, sandbox }),
                network,
            }
        }
        b'n' => return Err(malformed("NAMESPACES")),
        b'c' if count.is_multiple_of(2) => {
            let leave = fds.split_off(count / 2);
            Message::Cgroup { join: fds, leave }
        }
        b'c' => return Err(malformed("CGROUP")),
        b'u' if count <= 1 => Message::CpuUsage(fds.pop()),
        b'u' => return Err(malformed("CPU_USAGE")),
        b'G' => {
            let mut fds = fds.into_iter();
            match (fds.next(), fds.next(), fds.next(), fds.next(), fds.next()) {
                (Some(dns), Some(dns_tcp), Some(listener), relay, None) => Message::Gate {
                    dns,
                    dns_tcp,
                    listener,
                    relay,
                },
                _ => return Err(malformed("GATE")),
            }
        }
        b'g' => return Err(malformed("GO")),
        b's' => return Err(malformed("START")),
        tag => return Err(JailError::UnknownMessage { tag, from }),
    };
    Ok(message)
}

/// Take ownership of an fd the kernel just passed us with SCM_RIGHTS.
fn owned_fd(raw: RawFd) -> OwnedFd {
    // SAFETY: `raw` was installed in this process by recvmsg a moment ago and is referenced by
    // nothing else, so this is its only owner.
    unsafe { OwnedFd::from_raw_fd(raw) }
}

/// On the report pipe, from the setup process (steps 5 to 16) and then pid 1 (step 17).
pub(crate) enum Report {
    /// Step 16: confined, waiting for START.
    Ready,
    /// Setup failed at some step, with the error's text; the setup process exits next.
    Failed(String),
    /// Step 17: how the command ended, just before pid 1 exits. The supervisor then does its
    /// bookkeeping while the kernel tears down the sandbox's namespaces, instead of after.
    Exited(ExitReport),
}

const READY: u8 = b'R';
const FAILED: u8 = b'E';
const EXITED: u8 = b'X';

/// What pid 1 reports when the command has ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct ExitReport {
    /// The command's exit code, or 128+N when signal N killed it.
    pub code: i32,
    pub usage: crate::launch::Usage,
    /// The sandbox's processes together passed the CPU time limit, and pid 1 killed them all.
    pub cpu_limit_reached: bool,
}

impl ExitReport {
    /// One pipe write, well below PIPE_BUF, so it arrives whole or not at all.
    pub(crate) const LEN: usize = 1 + 4 + 8 + 8 + 1;

    fn encode(&self) -> [u8; Self::LEN] {
        let mut bytes = [0u8; Self::LEN];
        bytes[0] = EXITED;
        bytes[1..5].copy_from_slice(&self.code.to_le_bytes());
        let cpu = u64::try_from(self.usage.cpu.as_micros()).unwrap_or(u64::MAX);
        bytes[5..13].copy_from_slice(&cpu.to_le_bytes());
        bytes[13..21].copy_from_slice(&self.usage.max_rss_bytes.to_le_bytes());
        bytes[21] = u8::from(self.cpu_limit_reached);
        bytes
    }

    fn decode(bytes: &[u8]) -> Option<ExitReport> {
        if bytes.len() != Self::LEN || bytes[0] != EXITED {
            return None;
        }
        let word = |range: std::ops::Range<usize>| -> Option<u64> {
            Some(u64::from_le_bytes(bytes.get(range)?.try_into().ok()?))
        };
        Some(ExitReport {
            code: i32::from_le_bytes(bytes[1..5].try_into().ok()?),
            usage: crate::launch::Usage {
                cpu: std::time::Duration::from_micros(word(5..13)?),
                max_rss_bytes: word(13..21)?,
            },
            cpu_limit_reached: match bytes[21] {
                0 => false,
                1 => true,
                _ => return None,
            },
        })
    }
}

/// Write one report, whole.
pub(crate) fn report(pipe: BorrowedFd, report: &Report) -> Result<()> {
    let exited;
    let failed;
    let bytes: &[u8] = match report {
        Report::Ready => &[READY],
        Report::Failed(text) => {
            failed = [&[FAILED], text.as_bytes()].concat();
            &failed
        }
        Report::Exited(exit) => {
            exited = exit.encode();
            &exited
        }
    };
    let mut rest = bytes;
    while !rest.is_empty() {
        match nix::unistd::write(pipe, rest) {
            Ok(n) => rest = &rest[n..],
            Err(Errno::EINTR) => continue,
            Err(errno) => {
                return Err(JailError::SendFailed {
                    to: Peer::Supervisor,
                    errno,
                })
            }
        }
    }
    Ok(())
}

/// Step 16, the supervisor's side: READY, or the error the setup process reported.
pub(crate) fn read_launch_report(pipe: &mut std::fs::File) -> Result<()> {
    let mut byte = [0u8; 1];
    let n = pipe.read(&mut byte).map_err(|e| JailError::ReceiveFailed {
        from: Peer::SetupProcess,
        errno: e.errno(),
    })?;
    match (n, byte[0]) {
        (0, _) => Err(JailError::PeerGone {
            peer: Peer::SetupProcess,
        }),
        (_, READY) => Ok(()),
        (_, FAILED) => {
            let mut text = String::new();
            let _ = pipe.read_to_string(&mut text);
            Err(JailError::SetupReported(text))
        }
        (_, tag) => Err(JailError::UnknownMessage {
            tag,
            from: Peer::SetupProcess,
        }),
    }
}

/// Step 18: pid 1's EXITED, if that is what the pipe holds; None for end of file (pid 1 died
/// without one) or anything else. PERF: one read, as EXITED is one write.
pub(crate) fn read_exit_report(pipe: &mut std::fs::File) -> Option<ExitReport> {
    let mut bytes = [0u8; ExitReport::LEN + 1];
    let n = loop {
        match pipe.read(&mut bytes) {
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
            other => break other.unwrap_or(0),
        }
    };
    ExitReport::decode(&bytes[..n])
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::fd::AsFd;

    #[test]
    fn an_exit_report_survives_the_pipe_and_nothing_else_passes_for_one() {
        let report = ExitReport {
            code: 137,
            usage: crate::launch::Usage {
                cpu: std::time::Duration::from_micros(1_234_567),
                max_rss_bytes: 96 << 20,
            },
            cpu_limit_reached: true,
        };
        let bytes = report.encode();
        assert_eq!(ExitReport::decode(&bytes), Some(report));
        assert_eq!(ExitReport::decode(&bytes[..ExitReport::LEN - 1]), None);
        assert_eq!(ExitReport::decode(&[READY; ExitReport::LEN]), None);
        assert_eq!(ExitReport::decode(&[]), None);
    }

    fn pair() -> (OwnedFd, OwnedFd) {
        nix::sys::socket::socketpair(
            nix::sys::socket::AddressFamily::Unix,
            nix::sys::socket::SockType::SeqPacket,
            None,
            nix::sys::socket::SockFlag::SOCK_CLOEXEC,
        )
        .unwrap()
    }

    /// A message as a peer that does not follow the protocol could send it: `tag` with `fds`.
    fn send_raw(socket: &OwnedFd, tag: u8, fds: &[RawFd]) {
        let iov = [IoSlice::new(std::slice::from_ref(&tag))];
        let rights = [ControlMessage::ScmRights(fds)];
        sendmsg::<()>(socket.as_raw_fd(), &iov, &rights, MsgFlags::empty(), None).unwrap();
    }

    #[test]
    fn messages_arrive_with_their_fds_in_place() {
        let (supervisor, setup) = pair();
        let files: Vec<std::fs::File> = (0..3).map(|_| tempfile::tempfile().unwrap()).collect();
        let [idmap, sandbox, network] = [0, 1, 2].map(|i| files[i].as_fd());
        let namespaces = Message::Namespaces {
            users: Some(UserNamespaces { idmap, sandbox }),
            network,
        };
        send(supervisor.as_fd(), &namespaces).unwrap();
        let inode = |fd: &OwnedFd| nix::sys::stat::fstat(fd).unwrap().st_ino;
        let inode_of = |i: usize| nix::sys::stat::fstat(&files[i]).unwrap().st_ino;
        match receive(setup.as_fd(), Peer::Supervisor).unwrap() {
            Message::Namespaces {
                users: Some(users),
                network,
            } => {
                assert_eq!(inode(&users.idmap), inode_of(0));
                assert_eq!(inode(&users.sandbox), inode_of(1));
                assert_eq!(inode(&network), inode_of(2));
            }
            other => panic!("got {}", other.name()),
        }
        let cgroup = Message::Cgroup {
            join: vec![files[0].as_fd(), files[1].as_fd()],
            leave: vec![files[2].as_fd(), files[0].as_fd()],
        };
        send(supervisor.as_fd(), &cgroup).unwrap();
        match receive(setup.as_fd(), Peer::Supervisor).unwrap() {
            Message::Cgroup { join, leave } => {
                let join: Vec<_> = join.iter().map(inode).collect();
                let leave: Vec<_> = leave.iter().map(inode).collect();
                assert_eq!(join, [inode_of(0), inode_of(1)]);
                assert_eq!(leave, [inode_of(2), inode_of(0)]);
            }
            other => panic!("got {}", other.name()),
        }
        send(supervisor.as_fd(), &Message::CpuUsage(None)).unwrap();
        assert!(matches!(
            receive(setup.as_fd(), Peer::Supervisor).unwrap(),
            Message::CpuUsage(None)
        ));
        send(supervisor.as_fd(), &Message::Start(None)).unwrap();
        assert!(matches!(
            receive(setup.as_fd(), Peer::Supervisor).unwrap(),
            Message::Start(None)
        ));
        let given = Given {
            command: files[1].as_fd(),
            stdin: files[2].as_fd(),
        };
        send(supervisor.as_fd(), &Message::Start(Some(given))).unwrap();
        match receive(setup.as_fd(), Peer::Supervisor).unwrap() {
            Message::Start(Some(given)) => {
                assert_eq!(inode(&given.command), inode_of(1));
                assert_eq!(inode(&given.stdin), inode_of(2));
            }
            other => panic!("got {}", other.name()),
        }
    }

    #[test]
    fn a_start_with_other_than_a_command_and_its_stdin_is_refused() {
        let (supervisor, setup) = pair();
        let file = tempfile::tempfile().unwrap();
        for count in [1, 3] {
            send_raw(&supervisor, b's', &vec![file.as_raw_fd(); count]);
            match receive(setup.as_fd(), Peer::Supervisor) {
                Err(JailError::MalformedMessage {
                    message: "START",
                    fds,
                    from: Peer::Supervisor,
                }) => assert_eq!(fds, count),
                other => panic!("{count} fds: {:?}", other.err()),
            }
        }
    }

    #[test]
    fn a_message_with_the_wrong_fds_for_its_step_is_refused() {
        let (supervisor, setup) = pair();
        let file = tempfile::tempfile().unwrap();
        // One fd is wrong for each: GO carries none, GATE three or four, CGROUP an even
        // number (START none or two: see the test above).
        let gate = Message::Gate {
            dns: file.as_fd(),
            dns_tcp: file.as_fd(),
            listener: file.as_fd(),
            relay: Some(file.as_fd()),
        };
        let wrong = [
            (b'g', Some("GO")),
            (b'G', Some("GATE")),
            (b'c', Some("CGROUP")),
            (b'?', None),
        ];
        for (tag, name) in wrong {
            send_raw(&supervisor, tag, &[file.as_raw_fd()]);
            match (receive(setup.as_fd(), Peer::Supervisor), name) {
                (
                    Err(JailError::MalformedMessage {
                        message,
                        fds: 1,
                        from: Peer::Supervisor,
                    }),
                    Some(name),
                ) => assert_eq!(message, name),
                (
                    Err(JailError::UnknownMessage {
                        tag: unknown,
                        from: Peer::Supervisor,
                    }),
                    None,
                ) => assert_eq!(unknown, tag),
                (other, _) => panic!("{tag}: {:?}", other.err()),
            }
        }
        send(supervisor.as_fd(), &gate).unwrap();
        assert!(matches!(
            receive(setup.as_fd(), Peer::SetupProcess).unwrap(),
            Message::Gate { .. }
        ));
        drop(supervisor);
        assert!(matches!(
            receive(setup.as_fd(), Peer::Supervisor),
            Err(JailError::PeerGone {
                peer: Peer::Supervisor
            })
        ));
    }

    #[test]
    fn a_message_out_of_step_names_both_messages_and_its_sender() {
        let err = Message::<BorrowedFd>::Start(None).unexpected("GATE");
        assert!(matches!(
            err,
            JailError::UnexpectedMessage {
                expected: "GATE",
                received: "START",
                from: Peer::Supervisor,
            }
        ));
        assert_eq!(
            err.to_string(),
            "sandbox setup failed: unexpected message START from the supervisor (wanted GATE)"
        );
    }

    #[test]
    fn reports_read_back_as_written() {
        let (read, write) = nix::unistd::pipe().unwrap();
        let mut read = std::fs::File::from(read);
        report(write.as_fd(), &Report::Ready).unwrap();
        read_launch_report(&mut read).unwrap();
        report(write.as_fd(), &Report::Failed("cannot mount".into())).unwrap();
        drop(write);
        match read_launch_report(&mut read) {
            Err(JailError::SetupReported(text)) => assert_eq!(text, "cannot mount"),
            other => panic!("{other:?}"),
        }
    }
}
