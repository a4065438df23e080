//! Steps 1 to 11 of [`crate::protocol`], the supervisor's side: from the checks to the
//! setup process's cgroup, where [`prepare`] hands the caller a [`Launching`].

use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::MetadataExt;
use std::time::Instant;

use nix::fcntl::OFlag;
use nix::sys::signalfd::{SfdFlags, SignalFd};
use nix::sys::socket::{socketpair, AddressFamily, SockFlag, SockType};
use nix::unistd::{pipe2, Pid};

use super::{start_network, Launching, PendingNetwork, Sandbox};
use crate::apparmor;
use crate::cgroup::{self, Join, RunCgroup};
use crate::error::{JailError, PathContext, Result, SyscallContext, UNEXPECTED};
use crate::idmap::{self, HelperNamespace};
use crate::init::forwarded_set;
use crate::inside::{self, SetupChannel, SetupMode};
use crate::output::{OutputRelay, SandboxEnds};
use crate::probe;
use crate::protocol::{self, Message, UserNamespaces};
use crate::spec::SandboxSpec;
use crate::sys::{self, clone_fork, Forked};

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
    if spec.argv.is_empty() {
        return Err(JailError::NoCommand);
    }
    prepare_sandbox(spec, staging, cache, network, false)
}

/// [`prepare`] a sandbox whose command is not known yet (a warm sandbox, prepared ahead of the
/// request that will use it): `spec`'s argv, env and cwd are not used; the command comes with
/// [`Launching::start_command`].
pub fn prepare_without_command(
    spec: &SandboxSpec,
    staging: &std::path::Path,
    cache: &std::path::Path,
    network: Option<PendingNetwork>,
) -> Result<Launching> {
    prepare_sandbox(spec, staging, cache, network, true)
}

fn prepare_sandbox(
    spec: &SandboxSpec,
    staging: &std::path::Path,
    cache: &std::path::Path,
    network: Option<PendingNetwork>,
    command_due: bool,
) -> Result<Launching> {
    let one = super::OneSandbox::take()?;
    let Checked { rootful, support } = check(spec)?;
    let signals = block_forwarded_signals()?;
    let ready = prepare_clone(spec, cache, network, rootful)?;
    let Cloned {
        mut sandbox,
        control,
        report,
        network,
    } = clone_setup_process(spec, staging, rootful, &support, signals, ready, one)?;
    let network = map_helper_namespaces(&mut sandbox, network);
    let mut report = std::fs::File::from(report);
    let driven = network.and_then(|network| {
        drive_setup(spec, &mut sandbox, network, &support, &control).map_err(|err| {
            // Kill it first: a setup process still waiting for us would never report. If a
            // step failed because the setup process died, its own report says why; that is the
            // error returned.
            sandbox.kill();
            match protocol::read_launch_report(&mut report) {
                Err(reported @ JailError::SetupReported(_)) => reported,
                _ => err,
            }
        })
    });
    // On an error the sandbox's drop kills it, reaps it and removes its cgroup.
    driven.map(|()| Launching {
        sandbox,
        control,
        report,
        gated: spec.network_gate.gated(),
        command_due,
    })
}

/// What step 1 found out.
struct Checked {
    rootful: bool,
    support: cgroup::CgroupSupport,
}

/// Step 1: refuse what cannot run, and learn which cgroup hierarchy applies.
fn check(spec: &SandboxSpec) -> Result<Checked> {
    // Step 1 (checks); the command's, by the caller.
    if !spec.degraded.landlock && probe::landlock_abi() == 0 {
        return Err(JailError::LayerMissing {
            layer: "Landlock",
            why: "the kernel has no Landlock or it is disabled at boot",
            flag: "landlock",
        });
    }
    let restriction = apparmor::detect_here();
    if restriction.blocks() {
        return Err(JailError::UserNamespacesRestricted(restriction));
    }
    let rootful = spec.way.is_rootful();
    sys::default_sigchld();
    check_sandbox_user(spec, rootful)?;
    let support = cgroup::detect();
    if spec.limits.cpus.explicit && !spec.degraded.cpus && !support.has_cpu() {
        return Err(JailError::LayerMissing {
            layer: "the cpus limit",
            why: "no cgroup with the cpu controller is writable by this user or made for it \
                  by systemd here (the kernel bounds CPU bandwidth only by cgroups); without it \
                  the sandbox would run at nice 19, which yields to other work but takes every \
                  idle CPU",
            flag: "cpus",
        });
    }
    Ok(Checked { rootful, support })
}

/// The sandbox's host ids. The rootful way gives the sandbox a dedicated unprivileged uid: root
/// there is a mistake. The user-namespace way maps the caller itself, which for a root without
/// CAP_SYS_ADMIN (a container's) is uid 0 with no capability: then Landlock may not be given up,
/// as it keeps the sandbox from files that uid 0 may write by their owner's permissions alone
/// (the files of /proc/sys are such, for the initial namespace's root).
fn check_sandbox_user(spec: &SandboxSpec, rootful: bool) -> Result<()> {
    let root_ids = spec.ids.host_uid == 0 || spec.ids.host_gid == 0;
    if root_ids && rootful {
        return Err(JailError::SandboxUserIsRoot);
    }
    // SECURITY: the host's root without CAP_SYS_ADMIN (a rootful container's root, without a
    // user namespace of its own) would run the sandbox as the host's uid 0: the owner of the
    // host's files and device nodes, able to make what it writes through a writable bind
    // setuid-root (an owner needs no capability for that, and nosuid holds only inside), and one
    // the kernel never holds to RLIMIT_NPROC. Refused; the root of a user namespace is another
    // host uid.
    if root_ids && crate::privilege::is_hosts_root() {
        return Err(JailError::HostsRootWithoutPrivilege);
    }
    if root_ids && spec.degraded.landlock {
        return Err(JailError::LandlockRequiredForRoot);
    }
    Ok(())
}

/// Does a quota of `millicpus` leave the host a CPU it cannot take? On a host of one CPU no
/// quota does; there the sandbox runs at nice 19 as well.
fn leaves_a_cpu(millicpus: u64) -> bool {
    let online = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    millicpus <= online.saturating_sub(1) * 1000
}

/// Step 2: the signals the supervisor forwards, blocked and to be read from the returned fd.
fn block_forwarded_signals() -> Result<SignalFd> {
    // Step 2 (signals): collected here and forwarded. SECURITY: blocked before the clone so the
    // setup process (later pid 1) starts with them blocked too, and none is lost.
    let forwarded = forwarded_set();
    forwarded
        .thread_block()
        .during("block signals", UNEXPECTED)?;
    SignalFd::with_flags(&forwarded, SfdFlags::SFD_CLOEXEC).during("create a signalfd", UNEXPECTED)
}

/// What step 3 made for the clone. Of each channel, the supervisor's end first, then the setup
/// process's.
struct BeforeClone {
    control: (OwnedFd, OwnedFd),
    report: (OwnedFd, OwnedFd),
    /// The namespaces the clone makes.
    flags: libc::c_int,
    /// As root: the network helper, at work.
    network: Option<PendingNetwork>,
    etc: crate::etc::PreparedEtc,
    output: Option<OutputRelay>,
    output_ends: Option<SandboxEnds>,
    helper_namespaces: Vec<HelperNamespace>,
}

/// Step 3: everything the setup process is given at its clone.
fn prepare_clone(
    spec: &SandboxSpec,
    cache: &std::path::Path,
    network: Option<PendingNetwork>,
    rootful: bool,
) -> Result<BeforeClone> {
    // Step 3 (preparation).
    let control = socketpair(
        AddressFamily::Unix,
        SockType::SeqPacket,
        None,
        SockFlag::SOCK_CLOEXEC,
    )
    .during("create a socket pair", "too many open files?")?;
    let report = pipe2(OFlag::O_CLOEXEC).during("create a pipe", "too many open files?")?;

    // PERF: the network namespace is made by a helper (see `start_network`): as root, ahead of
    // this; unprivileged, in the setup process's user namespace once the clone has made it.
    let mut flags =
        libc::CLONE_NEWNS | libc::CLONE_NEWPID | libc::CLONE_NEWIPC | libc::CLONE_NEWUTS;
    let network = match network {
        Some(network) if rootful => Some(network),
        _ if rootful => start_network(spec.way)?,
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
    Ok(BeforeClone {
        control,
        report,
        flags,
        network,
        etc,
        output,
        output_ends,
        helper_namespaces,
    })
}

/// What the supervisor holds of the setup process once step 4 has made it.
struct Cloned {
    sandbox: Sandbox,
    control: OwnedFd,
    report: OwnedFd,
    /// As root: the network helper, still at work.
    network: Option<PendingNetwork>,
}

/// Step 4: the setup process, which goes on in [`inside::run`] and never returns here.
fn clone_setup_process(
    spec: &SandboxSpec,
    staging: &std::path::Path,
    rootful: bool,
    support: &cgroup::CgroupSupport,
    signals: SignalFd,
    ready: BeforeClone,
    one: super::OneSandbox,
) -> Result<Cloned> {
    let BeforeClone {
        control: (control_parent, control_child),
        report: (report_read, report_write),
        flags,
        network,
        etc,
        output,
        output_ends,
        helper_namespaces,
    } = ready;
    let mode = SetupMode {
        staging,
        etc: &etc.dir,
        rootful,
        output: output_ends.as_ref(),
        has_cgroup: !matches!(support, cgroup::CgroupSupport::Unavailable { .. }),
        cpu_by_nice: !support.has_cpu() || !leaves_a_cpu(spec.limits.cpus.millicpus),
        file_size_limit: spec
            .limits
            .disk_guard
            .as_ref()
            .map(super::disk::file_size_limit)
            .transpose()?,
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
    let sandbox = Sandbox {
        pid,
        pidfd,
        report: None,
        network: None,
        reaped: false,
        command_reported: false,
        signals,
        cgroup: None,
        helper_namespaces,
        output,
        _etc: etc,
        gate_sockets: None,
        deadline: spec.limits.timeout.map(|t| Instant::now() + t),
        disk_watch: spec
            .limits
            .disk_guard
            .as_ref()
            .map(super::disk::DiskWatch::start)
            .transpose()?,
        _one: one,
    };
    Ok(Cloned {
        sandbox,
        control: control_parent,
        report: report_read,
        network,
    })
}

/// Step 6, what comes before GO: as root the helper namespaces' maps, unprivileged the setup
/// process's user namespace, for its network helper. Says where the network namespace comes
/// from.
fn map_helper_namespaces(
    sandbox: &mut Sandbox,
    network: Option<PendingNetwork>,
) -> Result<NetworkPlan> {
    // Step 6 (maps). PERF: as root, the helper user namespaces get their maps now, while the
    // setup process mounts.
    sandbox
        .helper_namespaces
        .iter_mut()
        .try_for_each(HelperNamespace::apply_maps)?;
    // Unprivileged: the network namespace's helper needs the user namespace, opened now, before
    // the setup process is told to go on (GO). SECURITY: while it is dumpable and so ours to
    // open; it makes itself undumpable at step 14.
    match network {
        Some(network) => Ok(NetworkPlan::Started(network)),
        None => {
            let path = format!("/proc/{}/ns/user", sandbox.pid);
            std::fs::File::open(&path)
                .map(|user_namespace| NetworkPlan::InUserNamespace(user_namespace.into()))
                .on_path("open the sandbox's user namespace", path, UNEXPECTED)
        }
    }
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
    sandbox.cgroup = RunCgroup::create(support, &spec.limits, sandbox.pid)?;
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
            Join::BySupervisor | Join::Joined => {
                if matches!(group.join(), Join::BySupervisor) {
                    group.add(sandbox.pid)?;
                }
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
