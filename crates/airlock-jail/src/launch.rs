//! The supervisor's side: start the setup process in fresh namespaces, give it its id maps and
//! cgroup, wait for it to report, then watch the run until it ends: steps 1 to 4, its half of 6
//! to 11 and 16, and 18 of [`crate::protocol`].

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::time::Instant;

use nix::fcntl::OFlag;
use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::sys::wait::{waitpid, WaitStatus};
use nix::unistd::{pipe2, Pid};

use crate::cgroup::{self, Join, RunCgroup};
use crate::error::{JailError, PathContext, Result, SyscallContext, UNEXPECTED};
use crate::idmap::{self, HelperNamespace};
use crate::init::forwarded_set;
use crate::inside::{self, SetupChannel, SetupMode};
use crate::output::{OutputRelay, Wait};
use crate::probe;
use crate::protocol::{self, ExitReport, Message, Peer, UserNamespaces};
use crate::spec::SandboxSpec;
use crate::sys::{self, clone_fork, Forked};

/// How a run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// The command exited with this code (128+N when it was killed by signal N).
    Exited(i32),
    /// The wall-clock limit passed; every process of the sandbox was killed.
    TimedOut,
    /// The sandbox's processes together passed the CPU time limit; pid 1 killed every one.
    CpuLimitReached,
}

/// Can a throwaway run keep its layer in memory? Unprivileged overlayfs needs user xattrs on the
/// upper layer, which tmpfs has since Linux 6.6; root uses trusted xattrs, which it always had.
pub fn memory_layer_supported() -> bool {
    if nix::unistd::geteuid().is_root() {
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
    /// A gated sandbox's listener and DNS socket, until the caller takes them.
    gate: Option<Gate>,
    deadline: Option<Instant>,
}

/// The next sandbox's network namespace, being made ahead of [`prepare`] (see [`start_network`]).
pub struct PendingNetwork(sys::NewNetwork);

/// As root, start making the next sandbox's network namespace now, on the other CPU, while the
/// caller prepares the run: it is the costliest step of a sandbox's setup (~0.65 ms here). None
/// when unprivileged: the namespace must then belong to the sandbox's own user namespace, and
/// [`prepare`] starts making it as soon as that exists.
pub fn start_network() -> Result<Option<PendingNetwork>> {
    if !nix::unistd::geteuid().is_root() {
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
    /// A gated sandbox hands over its gate before START (see [`Launching::start`]).
    gated: bool,
}

impl Launching {
    /// How the kill switch finds it (the same value [`Sandbox::id`] gives).
    pub fn id(&self) -> crate::control::SandboxId {
        self.sandbox.id()
    }

    /// Give the go-ahead: the command may start. Waits for the setup process's report (READY, or
    /// the error it hit, which is returned) and, in a gated sandbox, takes its gate.
    pub fn start(self) -> Result<Sandbox> {
        let Launching {
            mut sandbox,
            control,
            mut report,
            gated,
        } = self;
        // Step 16 (go-ahead). PERF: START is sent now, before the setup process says it is
        // ready: it takes it as soon as it is, rather than waiting for us to hear of it and
        // answer (a round trip between the two CPUs, ~0.1 ms here). SECURITY: a gated sandbox
        // first hands over its gate (GATE), whose listener must be ours before its command runs.
        // On any error, the sandbox's drop kills it.
        if !gated {
            protocol::send(control.as_fd(), &Message::Start)?;
        }
        protocol::read_launch_report(&mut report)?;
        if gated {
            match protocol::receive(control.as_fd(), Peer::SetupProcess)? {
                Message::Gate {
                    dns,
                    listener,
                    relay,
                } => {
                    sandbox.gate = Some(Gate {
                        notifier: crate::gate::Notifier::new(listener),
                        dns,
                        relay,
                    })
                }
                other => return Err(other.unexpected("GATE")),
            }
            protocol::send(control.as_fd(), &Message::Start)?;
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
            Err(reported @ JailError::Reported(_)) => reported,
            _ => JailError::Refused(refusal),
        }
    }
}

/// Steps 1 to 11 of [`crate::protocol`], the supervisor's side: start `spec`'s sandbox up to the
/// go-ahead. `staging` is an empty directory that the sandbox root is mounted on, and `cache` a
/// directory where the jail keeps what it can prepare once for many runs; no sandbox may reach
/// either. The sandbox's setup overlaps with whatever the caller did before, and with what it
/// does until [`Launching::start`].
///
/// Must be called while the process is single-threaded (see [`sys::clone_fork`]).
///
/// `network`, from [`start_network`], is used as root (and started here when not given).
pub fn prepare(
    spec: &SandboxSpec,
    staging: &std::path::Path,
    cache: &std::path::Path,
    network: Option<PendingNetwork>,
) -> Result<Launching> {
    // Step 1 (checks).
    if spec.argv.is_empty() {
        return Err(JailError::Invalid("no command given".into()));
    }
    if !spec.degraded.landlock && probe::landlock_abi() == 0 {
        return Err(JailError::LayerMissing {
            layer: "Landlock",
            why: "the kernel has no Landlock or it is disabled at boot".into(),
            flag: "landlock",
        });
    }
    let rootful = nix::unistd::geteuid().is_root();
    sys::default_sigchld();
    if spec.ids.host_uid == 0 || spec.ids.host_gid == 0 {
        return Err(JailError::Invalid(
            "the sandbox user must not be root on the host".into(),
        ));
    }
    let support = cgroup::detect();

    // Step 2 (signals): collected here and forwarded. SECURITY: blocked before the clone so the
    // setup process (later pid 1) starts with them blocked too, and none is lost.
    let forwarded = forwarded_set();
    forwarded
        .thread_block()
        .during("block signals", UNEXPECTED)?;
    let signals = SignalFd::with_flags(&forwarded, SfdFlags::SFD_CLOEXEC)
        .during("create a signalfd", UNEXPECTED)?;

    // Step 3 (preparation).
    let (control_parent, control_child) = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .during("create a socket pair", "too many open files?")?;
    let (report_read, report_write) =
        pipe2(OFlag::O_CLOEXEC).during("create a pipe", "too many open files?")?;

    // PERF: the network namespace is made by a helper (see `start_network`): as root, ahead of
    // this; unprivileged, in the setup process's user namespace once the clone has made it.
    let mut flags =
        libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
    let network = match network {
        Some(network) if rootful => Some(network),
        _ if rootful => start_network()?,
        _ => {
            flags |= libc::CLONE_NEWUSER;
            None
        }
    };
    let etc = crate::etc::prepare(cache, spec)?;
    let (output, output_ends) = match spec.limits.output_bytes {
        Some(limit) => {
            let (relay, ends) =
                OutputRelay::new(limit).during("create output pipes", "too many open files?")?;
            (Some(relay), Some(ends))
        }
        None => (None, None),
    };
    // PERF: as root, the user namespaces the setup process will use, made now while the second
    // CPU is otherwise idle, rather than while the setup process mounts and competes for it;
    // their maps are written after the clone (step 6).
    let helper_namespaces = if rootful {
        let owner = std::fs::metadata(&spec.workspace.lower).on_path(
            "inspect the workspace",
            &spec.workspace.lower,
            "does the workspace still exist?",
        )?;
        let host = (spec.ids.host_uid, spec.ids.host_gid);
        vec![
            HelperNamespace::idmapped_workspace((owner.uid(), owner.gid()), host)?,
            HelperNamespace::sandbox(&spec.ids)?,
        ]
    } else {
        Vec::new()
    };
    let mode = SetupMode {
        staging,
        etc: &etc.dir,
        rootful,
        output: output_ends.as_ref(),
        has_cgroup: !matches!(support, cgroup::CgroupSupport::Unavailable { .. }),
        cpus: nix::sched::sched_getaffinity(Pid::from_raw(0)).ok(),
    };
    // Step 4 (clone).
    let pid = match clone_fork(flags).during(
        "create the sandbox namespaces",
        "are user namespaces enabled (sysctl user.max_user_namespaces)? run 'airlock check'",
    )? {
        Forked::Child => {
            drop((control_parent, report_read));
            inside::run(
                spec,
                SetupChannel {
                    control: control_child,
                    report: report_write,
                },
                &mode,
            )
        }
        Forked::Parent(pid) => pid,
    };
    // PERF: the setup process is the launch's critical path, while ours is bookkeeping.
    sys::steer_away(pid);
    drop((control_child, report_write));
    // Only the sandbox may hold the write ends, or the relay would never see end of file.
    drop(output_ends);
    let pidfd = sys::pidfd_open(pid).during("watch the sandbox", "kernel >= 5.3 is required")?;
    let mut sandbox = Sandbox {
        pid,
        pidfd,
        report: None,
        network: None,
        reaped: false,
        signals,
        cgroup: None,
        helper_namespaces,
        output,
        _etc: etc,
        gate: None,
        deadline: spec.limits.timeout.map(|t| Instant::now() + t),
    };
    // Step 6 (maps). PERF: as root, the helper user namespaces get their maps now, while the
    // setup process mounts.
    let mapped: Result<()> = sandbox
        .helper_namespaces
        .iter_mut()
        .try_for_each(HelperNamespace::apply_maps);
    // Unprivileged: the network namespace's helper needs the user namespace, opened now, before
    // the setup process is told to go on (GO). SECURITY: while it is dumpable and so ours to
    // open; it makes itself undumpable at step 14.
    let network = mapped.and_then(|()| match network {
        Some(network) => Ok(NetworkPlan::Started(network)),
        None => std::fs::File::open(format!("/proc/{pid}/ns/user"))
            .map(|user_namespace| NetworkPlan::InUserNamespace(user_namespace.into()))
            .map_err(|e| {
                JailError::Inside(format!("cannot open the sandbox's user namespace: {e}"))
            }),
    });
    let mut report = std::fs::File::from(report_read);
    let driven = network.and_then(|network| {
        drive_setup(spec, &mut sandbox, network, &support, &control_parent).map_err(|err| {
            // Kill it first: a setup process still waiting for us would never report. If a
            // step failed because the setup process died, its own report says why; that is the
            // error returned.
            sandbox.kill();
            match protocol::read_launch_report(&mut report) {
                Err(reported @ JailError::Reported(_)) => reported,
                _ => err,
            }
        })
    });
    // On an error the sandbox's drop kills it, reaps it and removes its cgroup.
    driven.map(|()| Launching {
        sandbox,
        control: control_parent,
        report,
        gated: spec.network_gate,
    })
}

/// A gated sandbox's seccomp listener and DNS socket (see [`crate::gate`]).
pub struct Gate {
    pub notifier: crate::gate::Notifier,
    /// UDP, bound to 127.0.0.53:53 in the sandbox's network namespace.
    pub dns: OwnedFd,
    /// A TCP listener on 0.0.0.0:PORT in the sandbox's network namespace: allowed connections
    /// are made to it (see `airlock_egress::gate`).
    pub relay: OwnedFd,
}

/// Where the sandbox's network namespace comes from.
enum NetworkPlan {
    /// As root: a helper started ahead (see [`start_network`]).
    Started(PendingNetwork),
    /// Unprivileged: a helper to start in this user namespace (the sandbox's) once the setup
    /// process is on its way.
    InUserNamespace(OwnedFd),
}

/// Send the setup process what it needs while it mounts (steps 6 to 11).
fn drive_setup(
    spec: &SandboxSpec,
    sandbox: &mut Sandbox,
    network: NetworkPlan,
    support: &cgroup::CgroupSupport,
    control: &OwnedFd,
) -> Result<()> {
    // As root, and only then, the network helper was started ahead (see `prepare`).
    let rootful = matches!(network, NetworkPlan::Started(_));
    // Step 6 (maps), unprivileged: 1000 → the caller's own ids, setgroups denied.
    if !rootful {
        let (uid_map, gid_map) = idmap::sandbox_maps(&spec.ids);
        idmap::write_maps(
            sandbox.pid,
            &uid_map,
            &gid_map,
            true,
            "are unprivileged user namespaces allowed here? run 'airlock check'",
        )?;
        protocol::send(control.as_fd(), &Message::Go)?;
    }
    // Step 7 (base tree), while the setup process mounts: unprivileged, the network helper
    // starts in its user namespace, which then owns the network namespace.
    let network = match network {
        NetworkPlan::Started(network) => network.0,
        NetworkPlan::InUserNamespace(user_namespace) => {
            sys::start_new_network(Some(user_namespace)).during(
                "start creating the sandbox's network namespace",
                "too many processes?",
            )?
        }
    };
    // Step 8 (network). PERF: the setup process was steered to the other CPUs, where (as root)
    // the helper started ahead is still at work: the two would take turns there while this CPU,
    // left idle as we wait for the helper, is given to it.
    if !network.is_done() {
        sys::keep_here(network.pid());
    }
    let network = network.finish().during(
        "create the sandbox's network namespace with its loopback up",
        "are network namespaces available? run 'airlock check'",
    )?;
    let users = match sandbox.helper_namespaces.as_slice() {
        [idmap, sandbox] => Some(UserNamespaces {
            idmap: idmap.fd.as_fd(),
            sandbox: sandbox.fd.as_fd(),
        }),
        _ => None,
    };
    protocol::send(
        control.as_fd(),
        &Message::Namespaces {
            users,
            network: network.as_fd(),
        },
    )?;
    sandbox.network = Some(network);
    // Step 11 (cgroup). PERF: made now, while the setup process mounts (steps 9 and 10), rather
    // than before the clone, where it would delay everything. SECURITY: the setup process joins
    // it before anything that counts against its limits runs. Removed by its Drop if the launch
    // fails from here on.
    sandbox.cgroup = RunCgroup::create(support, &spec.limits)?;
    if let Some(group) = &mut sandbox.cgroup {
        match group.join() {
            Join::ItselfThrough { join, leave } => {
                let cgroup = Message::Cgroup {
                    join: join.iter().map(AsFd::as_fd).collect(),
                    leave: leave.iter().map(AsFd::as_fd).collect(),
                };
                protocol::send(control.as_fd(), &cgroup)?;
                group.close_tasks_files();
            }
            Join::BySupervisor => {
                group.add(sandbox.pid)?;
                let cgroup = Message::Cgroup {
                    join: Vec::new(),
                    leave: Vec::new(),
                };
                protocol::send(control.as_fd(), &cgroup)?;
            }
        }
        // For pid 1's CPU time limit: the kernel's count, which sees every process that ran.
        let usage = Message::CpuUsage(group.cpu_usage().map(AsFd::as_fd));
        protocol::send(control.as_fd(), &usage)?;
    }
    // Step 12 (intent) is the caller's, from here to `Launching::start`. PERF: while the setup
    // process confines itself (steps 13 to 15), the caller's last check (an fsync, say) costs
    // nothing; the go-ahead goes out as soon as it is done.
    Ok(())
}

impl Sandbox {
    /// A gated sandbox's listener and DNS socket, for the caller's gate (once).
    pub fn take_gate(&mut self) -> Option<Gate> {
        self.gate.take()
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

    /// Step 18 (watch): forward signals and enforce the wall-clock limit until the command has
    /// ended: until pid 1 reports it (EXITED), just before it exits, or until pid 1 is gone.
    /// The sandbox may still be exiting when this returns (the kernel tears its namespaces down
    /// as pid 1 exits); its drop waits for that.
    pub fn wait(&mut self) -> Result<Finished> {
        // Their namespaces are in use by now; the helper processes are not needed any more.
        for namespace in &mut self.helper_namespaces {
            namespace.reap();
        }
        let mut timed_out = false;
        let mut report: Option<ExitReport> = None;
        // Interrupts (INT, TERM, HUP) are the command's to handle, once: the second one kills
        // the sandbox, as a command that ignores them (or a paused one) would never end.
        let mut interrupts = 0;
        loop {
            let timeout = match self.deadline {
                Some(deadline) => {
                    let left = deadline.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        timed_out = true;
                        self.kill();
                        break;
                    }
                    PollTimeout::try_from(left.as_millis().min(i32::MAX as u128) as i32 + 1)
                        .unwrap_or(PollTimeout::MAX)
                }
                None => PollTimeout::NONE,
            };
            let (exited, signalled, reported, ready) = {
                let waits = self
                    .output
                    .as_ref()
                    .map(|relay| relay.waits())
                    .unwrap_or_default();
                let mut fds = vec![
                    PollFd::new(self.pidfd.as_fd(), PollFlags::POLLIN),
                    PollFd::new(self.signals.as_fd(), PollFlags::POLLIN),
                ];
                // Without a report pipe, a stand-in that is never ready keeps the indices fixed.
                fds.push(match &self.report {
                    Some(pipe) => PollFd::new(pipe.as_fd(), PollFlags::POLLIN),
                    None => PollFd::new(self.pidfd.as_fd(), PollFlags::empty()),
                });
                fds.extend(waits.iter().map(|(_, fd, flags)| PollFd::new(*fd, *flags)));
                match poll(&mut fds, timeout) {
                    Err(nix::errno::Errno::EINTR) => continue,
                    Err(e) => {
                        return Err(JailError::Syscall {
                            action: "wait for the sandbox",
                            errno: e,
                            hint: UNEXPECTED,
                        })
                    }
                    Ok(_) => {}
                }
                let has = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
                let ready: Vec<Wait> = waits
                    .iter()
                    .zip(&fds[3..])
                    .filter(|(_, fd)| has(fd))
                    .map(|((wait, _, _), _)| *wait)
                    .collect();
                (
                    has(&fds[0]),
                    has(&fds[1]),
                    self.report.is_some() && has(&fds[2]),
                    ready,
                )
            };
            if let Some(relay) = &mut self.output {
                for wait in ready {
                    relay.on_ready(wait);
                }
            }
            if reported {
                report = self.read_exit_report();
                if report.is_some() {
                    break;
                }
            }
            if signalled {
                if let Ok(Some(info)) = self.signals.read_signal() {
                    if let Ok(sig) = Signal::try_from(info.ssi_signo as i32) {
                        let interrupt =
                            matches!(sig, Signal::SIGINT | Signal::SIGTERM | Signal::SIGHUP);
                        if interrupt && interrupts > 0 {
                            note!("airlock: {sig} again: killing the sandbox");
                            self.kill();
                        } else {
                            let _ = kill(self.pid, sig);
                        }
                        interrupts += usize::from(interrupt);
                    }
                }
            }
            if exited {
                break;
            }
        }
        // Without a report (pid 1 was killed, or the time ran out), its exit status says.
        let code = match &report {
            Some(report) => Ok(report.code),
            None => self
                .reap_pid1()
                .during("reap the sandbox", UNEXPECTED)
                .and_then(|status| match status {
                    WaitStatus::Exited(_, code) => Ok(code),
                    WaitStatus::Signaled(_, sig, _) => Ok(128 + sig as i32),
                    other => Err(JailError::Inside(format!(
                        "unexpected wait status {other:?}"
                    ))),
                }),
        };
        let memory = self.cgroup.as_ref().map(|group| group.memory_stats());
        if report.is_some() {
            if let Some(group) = &mut self.cgroup {
                group.remove_empty();
            }
        }
        // The pipes end when every process of the sandbox has closed them, which each does as it
        // exits: before the kernel's teardown of the namespaces, so this does not wait for it.
        let (output_dropped, output_failures) =
            self.output.as_mut().map_or((0, Vec::new()), |relay| {
                relay.drain();
                (relay.dropped(), relay.failures())
            });
        let outcome = if timed_out {
            Outcome::TimedOut
        } else if report.is_some_and(|report| report.cpu_limit_reached) {
            Outcome::CpuLimitReached
        } else {
            Outcome::Exited(code?)
        };
        Ok(Finished {
            outcome,
            output_dropped,
            output_failures,
            memory,
            usage: report.map(|report| report.usage),
        })
    }

    /// Pid 1's report of the command's end, if that is what the pipe holds. End of file (pid 1
    /// died without one) or anything else closes the pipe: its exit status will say.
    fn read_exit_report(&mut self) -> Option<ExitReport> {
        let report = protocol::read_exit_report(self.report.as_mut()?);
        if report.is_none() {
            self.report = None;
        }
        report
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
