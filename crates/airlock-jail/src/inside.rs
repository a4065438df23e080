//! The setup process: the first process of the sandbox (pid 1 of its pid namespace). It builds the
//! filesystem, takes on the sandbox identity, confines itself, and then becomes the init that
//! starts the command. The order of the steps in [`run`] is the security argument.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::sched::{setns, unshare, CloneFlags};
use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::sys::socket::{recvmsg, ControlMessageOwned, MsgFlags};
use nix::unistd::{sethostname, setsid};

use crate::confine;
use crate::error::{JailError, Result, SyscallContext, UNEXPECTED};
use crate::init;
use crate::rootfs::{self, MounterIds, RootfsPlan};
use crate::spec::SandboxSpec;
use crate::sys;

/// Messages from the setup process to the supervisor, one byte each (an error carries text).
pub(crate) const MSG_READY: u8 = b'R';
pub(crate) const MSG_ERROR: u8 = b'E';

/// Messages from the supervisor, in the order they are sent.
/// Go (unprivileged only): our id maps are written; start setting up. As root the setup process
/// needs nothing from the supervisor before it mounts.
pub(crate) const MSG_GO: u8 = b'g';
/// The sandbox's network namespace, last; as root, first two user namespace fds, for the
/// idmapped workspace and for the sandbox itself.
pub(crate) const MSG_NAMESPACES: u8 = b'n';
/// When the run has a cgroup: made while we mounted. On v1 it carries the `tasks` files the setup
/// process writes itself into, then as many that pid 1 writes itself out through once the
/// command has started (see `cgroup::Join`); on v2 the supervisor has moved the setup process
/// already.
pub(crate) const MSG_CGROUP: u8 = b'c';
/// Right after MSG_CGROUP: the file of the run's cgroup that counts its CPU time (v1's
/// `cpuacct.usage`, v2's `cpu.stat`), or none when the hierarchy has no such count.
pub(crate) const MSG_CPU_USAGE: u8 = b'u';
/// The caller's last check passed; start the command once ready. Sent as soon as the check has
/// passed, which is often before READY (after READY and the gate's fds, in a gated sandbox).
pub(crate) const MSG_START: u8 = b's';
/// From the setup process over the control socket, before READY, in a gated sandbox: the DNS
/// socket and the seccomp listener.
pub(crate) const MSG_GATE: u8 = b'G';

/// From pid 1 on the report pipe, once the command has ended and just before pid 1 exits: an
/// [`ExitReport`]. The supervisor then does its own bookkeeping while the kernel tears down the
/// sandbox's namespaces, instead of after.
pub(crate) const MSG_EXITED: u8 = b'X';

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

    pub(crate) fn encode(&self) -> [u8; Self::LEN] {
        let mut bytes = [0u8; Self::LEN];
        bytes[0] = MSG_EXITED;
        bytes[1..5].copy_from_slice(&self.code.to_le_bytes());
        let cpu = u64::try_from(self.usage.cpu.as_micros()).unwrap_or(u64::MAX);
        bytes[5..13].copy_from_slice(&cpu.to_le_bytes());
        bytes[13..21].copy_from_slice(&self.usage.max_rss_bytes.to_le_bytes());
        bytes[21] = u8::from(self.cpu_limit_reached);
        bytes
    }

    pub(crate) fn decode(bytes: &[u8]) -> Option<ExitReport> {
        if bytes.len() != Self::LEN || bytes[0] != MSG_EXITED {
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

/// How the setup process talks to the supervisor.
pub(crate) struct SetupChannel {
    /// From the supervisor: a SOCK_SEQPACKET socket, one message per token, fds attached.
    /// End of file means the supervisor died.
    pub control: OwnedFd,
    pub report: OwnedFd,
}

impl SetupChannel {
    /// The next message from the supervisor, which must be `expected`, with its fds.
    fn receive(&mut self, expected: u8) -> Result<Vec<OwnedFd>> {
        let mut byte = [0u8; 1];
        let mut iov = [std::io::IoSliceMut::new(&mut byte)];
        // The most any message carries: MSG_CGROUP's two sets of four.
        let mut space = nix::cmsg_space!([std::os::fd::RawFd; 8]);
        let message = recvmsg::<()>(
            self.control.as_raw_fd(),
            &mut iov,
            Some(&mut space),
            MsgFlags::MSG_CMSG_CLOEXEC,
        )
        .map_err(|e| JailError::Inside(format!("reading from the supervisor: {}", e.desc())))?;
        let mut fds = Vec::new();
        for cmsg in message
            .cmsgs()
            .map_err(|e| JailError::Inside(e.to_string()))?
        {
            if let ControlMessageOwned::ScmRights(raw) = cmsg {
                fds.extend(raw.into_iter().map(owned_fd));
            }
        }
        if message.bytes != 1 {
            return Err(JailError::Inside(
                "the supervisor went away during setup".into(),
            ));
        }
        if byte[0] != expected {
            return Err(JailError::Inside(format!(
                "unexpected message {:#x} from the supervisor (wanted {expected:#x})",
                byte[0]
            )));
        }
        Ok(fds)
    }

    /// Send fds to the supervisor over the control socket.
    fn send_fds(&mut self, message: u8, fds: &[RawFd]) -> Result<()> {
        let iov = [std::io::IoSlice::new(std::slice::from_ref(&message))];
        let rights = [nix::sys::socket::ControlMessage::ScmRights(fds)];
        nix::sys::socket::sendmsg::<()>(
            self.control.as_raw_fd(),
            &iov,
            &rights,
            MsgFlags::empty(),
            None,
        )
        .map(drop)
        .map_err(|e| JailError::Inside(format!("sending to the supervisor: {}", e.desc())))
    }

    fn send(&mut self, bytes: &[u8]) -> Result<()> {
        let mut rest = bytes;
        while !rest.is_empty() {
            match nix::unistd::write(&self.report, rest) {
                Ok(n) => rest = &rest[n..],
                Err(nix::errno::Errno::EINTR) => continue,
                Err(e) => {
                    return Err(JailError::Inside(format!(
                        "reporting to the supervisor: {}",
                        e.desc()
                    )))
                }
            }
        }
        Ok(())
    }
}

/// Decisions the supervisor made before starting the setup process.
pub(crate) struct SetupMode<'a> {
    /// Empty host directory that becomes the sandbox root's mount point.
    pub staging: &'a Path,
    /// The prepared /etc.
    pub etc: &'a Path,
    /// When output is limited: the pipes that become the command's stdout and stderr.
    pub output: Option<&'a crate::output::SandboxEnds>,
    /// airlock runs as root: mount first, then enter a user namespace.
    pub rootful: bool,
    /// The CPUs airlock may use: the supervisor steers the setup process away from its own CPU
    /// (see `sys::steer_away`), and the command gets them all back.
    pub cpus: Option<nix::sched::CpuSet>,
    /// The run has a cgroup, which the supervisor makes while we mount (see [`MSG_CGROUP`]).
    /// Without one, the address space is limited with RLIMIT_AS instead of memory.
    pub has_cgroup: bool,
}

/// What the setup process hands on to pid 1 (itself, once the command runs).
pub(crate) struct ForInit {
    /// The parents' `tasks` files, to leave the run's cgroups through (v1; see `cgroup::Join`).
    pub leave_cgroup: Vec<OwnedFd>,
    /// The run's cgroup's count of CPU time (see [`MSG_CPU_USAGE`]).
    pub cpu_usage: Option<OwnedFd>,
}

/// Entry point of the setup process; never returns.
pub(crate) fn run(spec: &SandboxSpec, mut channel: SetupChannel, mode: &SetupMode) -> ! {
    let result = setup(spec, &mut channel, mode);
    match result {
        Ok(for_init) => {
            let SetupChannel { control, report } = channel;
            // Already closed, with every other inherited descriptor, at the end of setup.
            std::mem::forget(control);
            init::run_command(spec, report, for_init)
        }
        Err(err) => {
            let mut message = vec![MSG_ERROR];
            message.extend_from_slice(err.to_string().as_bytes());
            let _ = channel.send(&message);
            std::process::exit(125)
        }
    }
}

fn setup(spec: &SandboxSpec, channel: &mut SetupChannel, mode: &SetupMode) -> Result<ForInit> {
    let rootful = mode.rootful;
    // If the supervisor dies, so does the sandbox, at every step from here on.
    prctl::set_pdeathsig(Signal::SIGKILL).during("set the parent-death signal", UNEXPECTED)?;
    // Leave the caller's session and process group: the terminal's signals go to the supervisor,
    // which forwards them once, and this process has no controlling terminal to hand down.
    setsid().during("start a new session", UNEXPECTED)?;
    // Unprivileged, the supervisor writes our id maps first.
    if !mode.rootful {
        channel.receive(MSG_GO)?;
    }
    sethostname(&spec.hostname).during("set the hostname", UNEXPECTED)?;

    // Root mounts with its real credentials, before it enters any user namespace, so the overlay
    // can copy up files of every owner. Unprivileged, we are already in our user namespace.
    let owner = if rootful {
        MounterIds {
            uid: spec.ids.host_uid,
            gid: spec.ids.host_gid,
        }
    } else {
        MounterIds {
            uid: spec.ids.inside_uid,
            gid: spec.ids.inside_gid,
        }
    };
    let (root, scratch) = rootfs::staging_points(mode.staging);
    let plan = RootfsPlan {
        spec,
        host_dir: mode.staging,
        staging: &root,
        scratch: &scratch,
        in_user_namespace: !rootful,
        owner,
        etc: mode.etc,
    };
    rootfs::build_base(&plan)?;
    // The supervisor's helper made our network namespace, loopback up, while we mounted (see
    // `sys::start_new_network`); as root it made our user namespaces too.
    let mut fds = channel.receive(MSG_NAMESPACES)?;
    let network = fds
        .pop()
        .ok_or_else(|| JailError::Inside("the supervisor sent no network namespace".into()))?;
    setns(&network, CloneFlags::CLONE_NEWNET).during(
        "enter the sandbox's network namespace",
        "run 'airlock check'",
    )?;
    drop(network);
    let namespaces = if rootful {
        let mut fds = fds.into_iter();
        match (fds.next(), fds.next()) {
            (Some(idmap), Some(sandbox)) => Some((idmap, sandbox)),
            _ => {
                return Err(JailError::Inside(
                    "the supervisor sent no user namespaces".into(),
                ))
            }
        }
    } else {
        None
    };
    // The sandbox's DNS server address, bound while this process may still bind port 53; the
    // supervisor answers on it.
    // And the gate's relay: a listener in this namespace that allowed connections are sent to,
    // so that no socket of the host's namespace is ever handed into the sandbox.
    let (dns_socket, relay) = if spec.network_gate {
        let relay = std::net::TcpListener::bind("0.0.0.0:0")
            .map_err(|e| JailError::Inside(format!("cannot open the network gate's relay: {e}")))?;
        (Some(dns_socket()?), Some(relay))
    } else {
        (None, None)
    };
    let relay_port = match &relay {
        Some(listener) => Some(
            listener
                .local_addr()
                .map_err(|e| JailError::Inside(e.to_string()))?
                .port(),
        ),
        None => None,
    };
    rootfs::finish_and_enter(&plan, namespaces.as_ref().map(|(idmap, _)| idmap))?;

    // Into the run's cgroup, which the supervisor made while we mounted, before anything that
    // counts against its limits runs. On v1 we move ourselves by writing 0 to each `tasks` file
    // it opened (see `cgroup::Join`); on v2 it has moved us already.
    let mut for_init = ForInit {
        leave_cgroup: Vec::new(),
        cpu_usage: None,
    };
    if mode.has_cgroup {
        let mut join = channel.receive(MSG_CGROUP)?;
        if join.len() % 2 != 0 {
            return Err(JailError::Inside(
                "the supervisor sent an odd number of cgroup files (a bug: please report it)"
                    .into(),
            ));
        }
        for_init.leave_cgroup = join.split_off(join.len() / 2);
        for tasks_file in join {
            nix::unistd::write(&tasks_file, b"0")
                .during("join the run's cgroup", "run 'airlock check'")?;
        }
        for_init.cpu_usage = channel.receive(MSG_CPU_USAGE)?.pop();
    }
    // A cgroup namespace rooted at the run's cgroup: the sandbox sees no other cgroup.
    unshare(CloneFlags::CLONE_NEWCGROUP)
        .during("create a cgroup namespace", "run 'airlock check'")?;

    if let Some((_, sandbox_userns)) = &namespaces {
        // A user namespace owned by root whose only ids are the sandbox user's: the sandbox has no
        // privilege over the mount namespace it lives in, and uid 1000 inside is an unprivileged
        // host uid outside.
        setns(sandbox_userns, CloneFlags::CLONE_NEWUSER)
            .during("enter the sandbox's user namespace", "run 'airlock check'")?;
    }
    // Closed here, before the blanket close of inherited fds below, which must find nothing
    // that Rust still owns.
    drop(namespaces);
    confine::become_sandbox_user(spec, rootful)?;
    // Changing credentials cleared the parent-death signal; set it again.
    prctl::set_pdeathsig(Signal::SIGKILL).during("set the parent-death signal", UNEXPECTED)?;
    // This process is a copy of the supervisor: its memory holds the caller's whole environment
    // and airlock's state. Not dumpable, its /proc files (environ, mem, fd…) belong to root, out
    // of the command's reach, although the command runs as the same uid.
    prctl::set_dumpable(false).during("make the sandbox's init undumpable", UNEXPECTED)?;
    confine::set_no_new_privs()?;
    confine::apply_landlock(spec, relay_port)?;
    confine::apply_rlimits(spec, !mode.has_cgroup)?;
    confine::drop_capabilities()?;
    if spec.network_gate {
        let listener = confine::apply_seccomp_gated()?;
        let dns = dns_socket.ok_or_else(|| JailError::Inside("no DNS socket".into()))?;
        let relay = relay.ok_or_else(|| JailError::Inside("no relay".into()))?;
        channel.send_fds(
            MSG_GATE,
            &[dns.as_raw_fd(), listener.as_raw_fd(), relay.as_raw_fd()],
        )?;
    } else {
        confine::apply_seccomp()?;
    }
    // Tell the supervisor we are ready, then drop every descriptor but stdio: the pipes, and
    // anything the caller leaked to us.
    if let Some(ends) = mode.output {
        nix::unistd::dup2_stdout(&ends.stdout).during("redirect stdout", UNEXPECTED)?;
        nix::unistd::dup2_stderr(&ends.stderr).during("redirect stderr", UNEXPECTED)?;
    }
    if let Some(cpus) = &mode.cpus {
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), cpus)
            .during("give the sandbox every CPU airlock has", UNEXPECTED)?;
    }
    channel.send(&[MSG_READY])?;
    // The supervisor may still refuse (its audit record is not on disk yet, say): nothing of the
    // command runs before it says so.
    channel.receive(MSG_START)?;
    // Except the report pipe, which pid 1 keeps to report the command's end, the files it
    // leaves the run's cgroups through once the command has started, and the one it reads the
    // run's CPU time from (all close-on-exec, so the command never holds them; pid 1 is not
    // dumpable, so its /proc/1/fd is out of reach).
    let kept: Vec<RawFd> = std::iter::once(channel.report.as_raw_fd())
        .chain(for_init.leave_cgroup.iter().map(AsRawFd::as_raw_fd))
        .chain(for_init.cpu_usage.iter().map(AsRawFd::as_raw_fd))
        .collect();
    sys::close_fds_from_except(3, &kept).during("close inherited file descriptors", UNEXPECTED)?;
    Ok(for_init)
}

/// A UDP socket on 127.0.0.53:53 in the sandbox's network namespace.
fn dns_socket() -> Result<OwnedFd> {
    std::net::UdpSocket::bind("127.0.0.53:53")
        .map(OwnedFd::from)
        .map_err(|e| {
            JailError::Inside(format!(
                "cannot bind the sandbox's DNS socket to 127.0.0.53:53: {e}"
            ))
        })
}

/// Take ownership of an fd the kernel just passed us with SCM_RIGHTS.
fn owned_fd(raw: RawFd) -> OwnedFd {
    // SAFETY: `raw` was installed in this process by recvmsg a moment ago and is referenced by
    // nothing else, so this is its only owner.
    unsafe { OwnedFd::from_raw_fd(raw) }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        assert_eq!(ExitReport::decode(&[MSG_READY; ExitReport::LEN]), None);
        assert_eq!(ExitReport::decode(&[]), None);
    }
}
