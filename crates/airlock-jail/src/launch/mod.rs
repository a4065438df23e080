//! The supervisor's side: start the setup process in fresh namespaces, give it its id maps and
//! cgroup, wait for it to report, then watch the run until it ends: steps 1 to 4, its half of 6
//! to 11 and 16, and 18 of [`crate::protocol`]. `prepare.rs` takes the launch up to the
//! go-ahead (steps 1 to 11), `watch.rs` the run (step 18); here are what they make and what the
//! caller holds: [`Launching`], then [`Sandbox`].

mod disk;
mod prepare;
mod watch;

use std::os::fd::{AsFd, BorrowedFd, OwnedFd};
use std::time::Instant;

use nix::sys::signal::{kill, Signal};
use nix::sys::signalfd::SignalFd;
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::Pid;

use crate::cgroup::RunCgroup;
use crate::command::Command;
use crate::error::{JailError, Result, SyscallContext};
use crate::idmap::HelperNamespace;
use crate::output::OutputRelay;
use crate::privilege::Way;
use crate::protocol::{self, Message, Peer};
use crate::sys;

pub use prepare::{prepare, prepare_without_command};

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The command exited with this code (128+N when it was killed by signal N).
    Exited(i32),
    /// The wall-clock limit passed; every process of the sandbox was killed.
    TimedOut,
    /// The sandbox's processes together passed the CPU time limit; pid 1 killed every one.
    CpuLimitReached,
    /// The session's layer took what its filesystem's free margin (or its `disk` budget, where
    /// only the watch enforces it) allows; the supervisor killed every process.
    DiskLimitReached,
}

/// Can a throwaway run keep its layer in memory? Unprivileged overlayfs needs user xattrs on the
/// upper layer, which tmpfs has since Linux 6.6; the rootful way uses trusted xattrs, which it
/// always had.
pub fn memory_layer_supported(way: Way) -> bool {
    if way.is_rootful() {
        return true;
    }
    let Ok(uts) = nix::sys::utsname::uname() else {
        return false;
    };
    let release = uts.release().to_string_lossy().into_owned();
    let mut parts = release
        .split(|c: char| !c.is_ascii_digit())
        .filter_map(|p| p.parse::<u32>().ok());
    let (major, minor) = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
    (major, minor) >= (6, 6)
}

/// What the command's processes used, as pid 1 saw when the command ended: its own and those of
/// the processes pid 1 had reaped by then.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Usage {
    /// User and system CPU time together.
    pub cpu: std::time::Duration,
    /// The largest single process (its peak resident set).
    pub max_rss_bytes: u64,
}

impl Usage {
    /// What the calling process's children that it has waited for used (getrusage
    /// RUSAGE_CHILDREN): for pid 1, the command's processes; for the supervisor, once pid 1 is
    /// reaped, everything pid 1 had counted.
    pub fn of_children() -> Option<Usage> {
        let usage =
            nix::sys::resource::getrusage(nix::sys::resource::UsageWho::RUSAGE_CHILDREN).ok()?;
        let time = |t: nix::sys::time::TimeVal| {
            std::time::Duration::from_micros((t.tv_sec() * 1_000_000 + t.tv_usec()).max(0) as u64)
        };
        Some(Usage {
            cpu: time(usage.user_time()) + time(usage.system_time()),
            // ru_maxrss is in KiB.
            max_rss_bytes: usage.max_rss().max(0) as u64 * 1024,
        })
    }
}

/// How a run ended, and what was held back.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Finished {
    pub outcome: Outcome,
    /// Bytes of output dropped past the output limit.
    pub output_dropped: u64,
    /// Streams whose destination failed ("stdout"/"stderr", and the error), each closed then.
    pub output_failures: Vec<crate::output::OutputFailure>,
    /// The end of each output stream, when airlock relayed them (not when the command wrote to
    /// a terminal itself).
    pub output_tails: Option<crate::output::OutputTails>,
    /// From the run's memory cgroup, when it had one: the most memory it held at once, and how
    /// many processes the kernel killed for reaching its limit.
    pub memory: Option<crate::cgroup::MemoryStats>,
    /// From pid 1's report. None when pid 1 ended without one (killed, timed out): the caller's
    /// own count of its children's usage has it once the sandbox is reaped.
    pub usage: Option<Usage>,
}

/// A started sandbox. [`Sandbox::wait`] learns how its command ended; dropping it (or
/// [`Sandbox::reap`]) kills whatever is left, waits until nothing of it remains, and removes its
/// cgroup.
pub struct Sandbox {
    pid: Pid,
    pidfd: OwnedFd,
    /// After the launch: where pid 1 reports the command's end (EXITED, see [`protocol::Report`]).
    report: Option<std::fs::File>,
    /// Pid 1 has been waited for: its pid is no longer ours to signal.
    reaped: bool,
    /// Pid 1 reported the command's end: it is exiting by itself, and the cgroups it left are
    /// empty unless the command left a daemon behind.
    command_reported: bool,
    /// The sandbox's network namespace, held until pid 1 is reaped. PERF: the kernel frees a
    /// network namespace on a worker thread, and this way it starts after pid 1's exit rather
    /// than during it, where its RCU grace period would delay the teardown of the mounts by one.
    network: Option<OwnedFd>,
    signals: SignalFd,
    cgroup: Option<RunCgroup>,
    /// Root only: their helper processes are reaped after the run, off the launch's path.
    helper_namespaces: Vec<HelperNamespace>,
    output: Option<OutputRelay>,
    /// Held until the run ends, so no cleanup removes the /etc it uses.
    _etc: crate::etc::PreparedEtc,
    /// A gated sandbox's sockets for the network gate, until the caller takes them.
    gate_sockets: Option<GateSockets>,
    deadline: Option<Instant>,
    /// The watch on the free space under a session's layer, when it has one (see `disk`).
    disk_watch: Option<disk::DiskWatch>,
    /// Released last, once everything above is gone (see [`OneSandbox`]).
    _one: OneSandbox,
}

/// Whether a sandbox of this process is alive (from its preparation until it is reaped).
static SANDBOX_HELD: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// SECURITY: a process holds one sandbox at a time. Its run's cgroup is named after the
/// process (`run-PID`, and so found again by the cleanup of a killed supervisor's), so a
/// second sandbox would join the first's cgroup and set its limits for both; a warm sandbox
/// held while the same process prepared another would do exactly that.
struct OneSandbox(());

impl OneSandbox {
    fn take() -> Result<OneSandbox> {
        use std::sync::atomic::Ordering;
        SANDBOX_HELD
            .compare_exchange(false, true, Ordering::SeqCst, Ordering::SeqCst)
            .map(|_| OneSandbox(()))
            .map_err(|_| {
                JailError::Caller(
                    "this process already holds a sandbox: one at a time (drop or reap it first)"
                        .into(),
                )
            })
    }
}

impl Drop for OneSandbox {
    fn drop(&mut self) {
        SANDBOX_HELD.store(false, std::sync::atomic::Ordering::SeqCst);
    }
}

/// The next sandbox's network namespace, being made ahead of [`prepare`] (see [`start_network`]).
pub struct PendingNetwork(sys::NewNetwork);

/// As root, start making the next sandbox's network namespace now, on the other CPU, while the
/// caller prepares the run: it is the costliest step of a sandbox's setup (~0.65 ms here). None
/// when unprivileged: the namespace must then belong to the sandbox's own user namespace, and
/// [`prepare`] starts making it as soon as that exists.
pub fn start_network(way: Way) -> Result<Option<PendingNetwork>> {
    if !way.is_rootful() {
        return Ok(None);
    }
    sys::default_sigchld();
    sys::start_new_network(None)
        .map(|network| {
            // While the supervisor goes on preparing, on its own CPU.
            sys::steer_away(network.pid());
            Some(PendingNetwork(network))
        })
        .during("start creating a network namespace", "too many processes?")
}

/// A sandbox whose setup process is confining itself (steps 13 to 15 of [`crate::protocol`]) and
/// will start its command only once [`Launching::start`] says so: between the two, the caller
/// writes what must be on disk before any of the command runs (step 12, its intent).
///
/// Dropping it kills the setup process, waits until nothing of it is left and removes its cgroup
/// (what dropping the [`Sandbox`] it holds does); none of the command has run then.
pub struct Launching {
    sandbox: Sandbox,
    control: OwnedFd,
    report: std::fs::File,
    /// A gated sandbox hands over its gate sockets before START (see [`Launching::start`]).
    gated: bool,
    /// Prepared without its command ([`prepare_without_command`]): it goes with START.
    command_due: bool,
}

impl Launching {
    /// How the kill switch finds it (the same value [`Sandbox::id`] gives).
    pub fn id(&self) -> crate::control::SandboxId {
        self.sandbox.id()
    }

    /// Give the go-ahead: the command may start. Waits for the setup process's report (READY, or
    /// the error it hit, which is returned) and, in a gated sandbox, takes its gate sockets.
    pub fn start(self) -> Result<Sandbox> {
        if self.command_due {
            return Err(self.refuse("the sandbox was prepared without its command".into()));
        }
        self.go_ahead(None)
    }

    /// [`Launching::start`] for a sandbox prepared without its command: `command` runs with
    /// `stdin` as its stdin (what the sandbox inherited at its preparation is not the
    /// request's), and the wall-clock limit (`timeout`, which replaces the spec's) counts from
    /// now, not from when the sandbox was prepared. Forwarded signals that came meanwhile (an
    /// interrupt of the run before its start) reach the command as they would a cold run's.
    pub fn start_command(
        mut self,
        command: &Command,
        stdin: BorrowedFd<'_>,
        timeout: Option<std::time::Duration>,
    ) -> Result<Sandbox> {
        if !self.command_due {
            return Err(self.refuse("the sandbox was prepared with a command of its own".into()));
        }
        if command.argv.is_empty() {
            return Err(self.refuse(JailError::NoCommand.to_string()));
        }
        let memfd = match command.to_memfd() {
            Ok(memfd) => memfd,
            Err(err) => {
                drop(self.refuse(err.to_string()));
                return Err(err);
            }
        };
        self.sandbox.deadline = timeout.map(|t| Instant::now() + t);
        let given = protocol::Given {
            command: memfd.as_fd(),
            stdin,
        };
        self.go_ahead(Some(given))
    }

    fn go_ahead(self, given: Option<protocol::Given<BorrowedFd<'_>>>) -> Result<Sandbox> {
        let Launching {
            mut sandbox,
            control,
            mut report,
            gated,
            command_due: _,
        } = self;
        let start = Message::Start(given);
        // Step 16 (go-ahead). PERF: START is sent now, before the setup process says it is
        // ready: it takes it as soon as it is, rather than waiting for us to hear of it and
        // answer (a round trip between the two CPUs, ~0.1 ms here). SECURITY: a gated sandbox
        // first hands over its gate sockets (GATE), whose seccomp listener must be ours before its command runs.
        // On any error, the sandbox's drop kills it.
        let handed_over = (|| {
            if !gated {
                protocol::send(control.as_fd(), &start)?;
            }
            protocol::read_launch_report(&mut report)?;
            if gated {
                match protocol::receive(control.as_fd(), Peer::SetupProcess)? {
                    Message::Gate {
                        dns,
                        dns_tcp,
                        listener,
                        relay,
                    } => {
                        sandbox.gate_sockets = Some(GateSockets {
                            notifier: crate::gate::Notifier::new(listener),
                            dns,
                            dns_tcp,
                            relay,
                        })
                    }
                    other => return Err(other.unexpected("GATE")),
                }
                protocol::send(control.as_fd(), &start)?;
            }
            Ok(())
        })();
        if let Err(err) = handed_over {
            // A setup process that died on its way says why on the report pipe: that, rather
            // than the broken socket we found.
            sandbox.kill();
            return Err(match protocol::read_launch_report(&mut report) {
                Err(reported @ JailError::SetupReported(_)) => reported,
                _ => err,
            });
        }
        sandbox.report = Some(report);
        Ok(sandbox)
    }

    /// Stop the launch for the caller's `refusal`. SECURITY: nothing of the command may run: it
    /// is killed before it could start, and its own report of a failure, if it sent one, says
    /// more than the refusal.
    pub fn refuse(mut self, refusal: String) -> JailError {
        self.sandbox.kill();
        match protocol::read_launch_report(&mut self.report) {
            Err(reported @ JailError::SetupReported(_)) => reported,
            _ => JailError::Refused(refusal),
        }
    }
}

/// What a gated sandbox hands the network gate (`airlock_egress::gate`), which decides and
/// relays for it: the seccomp listener its every `connect` stops at (see [`crate::gate`]), and
/// the two sockets the setup process opened in its network namespace. Not the gate: the caller
/// starts that with these.
pub struct GateSockets {
    pub notifier: crate::gate::Notifier,
    /// UDP, bound to 127.0.0.53:53 in the sandbox's network namespace.
    pub dns: OwnedFd,
    /// TCP, listening on 127.0.0.53:53 there (resolvers ask over TCP when told to, or when an
    /// answer was too long for UDP).
    pub dns_tcp: OwnedFd,
    /// A relaying gate's TCP listener on 0.0.0.0:PORT in the sandbox's network namespace:
    /// allowed connections are made to it (see `airlock_egress::gate`). None: the gate refuses
    /// everything.
    pub relay: Option<OwnedFd>,
}

impl Sandbox {
    /// A gated sandbox's sockets, for the caller's network gate (once).
    pub fn take_gate_sockets(&mut self) -> Option<GateSockets> {
        self.gate_sockets.take()
    }

    /// How another process can find this sandbox again (to kill or pause it).
    pub fn id(&self) -> crate::control::SandboxId {
        crate::control::SandboxId {
            pid: self.pid.as_raw(),
            start_time: crate::control::start_time(self.pid.as_raw()).unwrap_or(0),
            freezer: self
                .cgroup
                .as_ref()
                .and_then(|group| group.freezer().cloned()),
        }
    }

    /// Kill every process of the sandbox: SIGKILL to its pid 1 takes the whole pid namespace.
    pub fn kill(&self) {
        let _ = kill(self.pid, Signal::SIGKILL);
        // A process in a frozen v1 cgroup dies only once thawed (a paused run that times out).
        if let Some(crate::control::Freezer::V1(dir)) =
            self.cgroup.as_ref().and_then(|group| group.freezer())
        {
            let _ = std::fs::write(dir.join("freezer.state"), "THAWED");
        }
    }

    /// Wait for pid 1 to be gone: every process of the sandbox is dead then (the kernel kills
    /// the rest of a pid namespace with its pid 1) and its namespaces are torn down.
    fn reap_pid1(&mut self) -> nix::Result<WaitStatus> {
        let status = loop {
            match waitpid(self.pid, None) {
                Err(nix::errno::Errno::EINTR) => continue,
                other => break other,
            }
        };
        self.reaped = true;
        status
    }

    /// Wait until nothing of the sandbox remains and remove its cgroup (what dropping it does;
    /// this names the moment).
    pub fn reap(self) {}
}

impl Drop for Sandbox {
    fn drop(&mut self) {
        // PERF: removed while the kernel tears pid 1's namespaces down (v1, where pid 1 left
        // them), not after; what a daemon still holds is removed once pid 1 is reaped, below.
        if let (Some(group), true) = (&mut self.cgroup, self.command_reported) {
            group.remove_empty();
        }
        if !self.reaped {
            // SECURITY: nothing of it may outlive the run. After its report, pid 1 is exiting by
            // itself, and SIGKILL changes nothing for it; but a process that `airlock pause`
            // froze meanwhile (v1) dies only once thawed, which kill() does, and pid 1 waits
            // for it.
            self.kill();
            let _ = self.reap_pid1();
        }
        if let Some(group) = self.cgroup.take() {
            group.remove();
        }
        for namespace in &mut self.helper_namespaces {
            namespace.reap();
        }
    }
}
