//! The setup process: the first process of the sandbox (pid 1 of its pid namespace). It builds the
//! filesystem, takes on the sandbox identity, confines itself, and then becomes the init that
//! starts the command. [`setup`] carries out its side of steps 5 to 16 of [`crate::protocol`],
//! in that order: the order is the security argument.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::path::Path;

use nix::sched::{setns, unshare, CloneFlags};
use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::unistd::{sethostname, setsid};

use crate::command::Command;
use crate::confine;
use crate::error::{JailError, Result, SyscallContext, UNEXPECTED};
use crate::init;
use crate::protocol::{self, Message, Peer, Report, UserNamespaces};
use crate::rootfs::{self, MounterIds, Places};
use crate::spec::{NetworkGate, SandboxSpec};
use crate::sys;

/// How the setup process talks to the supervisor (see [`crate::protocol`]).
pub(crate) struct SetupChannel {
    /// The control socket: messages from the supervisor, GATE to it.
    pub control: OwnedFd,
    /// The report pipe: READY or the error, then pid 1's EXITED.
    pub report: OwnedFd,
}

impl SetupChannel {
    fn receive(&self) -> Result<Message<OwnedFd>> {
        protocol::receive(self.control.as_fd(), Peer::Supervisor)
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
    /// The run has a cgroup, which the supervisor makes while we mount (step 11).
    /// Without one, the address space is limited with RLIMIT_AS instead of memory.
    pub has_cgroup: bool,
    /// No cgroup bounds the run's CPU bandwidth (or its quota cannot leave the host a CPU):
    /// the sandbox runs at nice 19, so that the host's own work goes first.
    pub cpu_by_nice: bool,
    /// RLIMIT_FSIZE: what the disk guard leaves a single file (see `launch::disk`).
    pub file_size_limit: Option<u64>,
}

/// What the setup process hands on to pid 1 (itself, once the command runs).
pub(crate) struct ForInit {
    /// The parents' `tasks` files, to leave the run's cgroups through (v1; see `cgroup::Join`).
    pub leave_cgroup: Vec<OwnedFd>,
    /// The run's cgroup's count of CPU time (CPU_USAGE, step 11).
    pub cpu_usage: Option<OwnedFd>,
}

/// Entry point of the setup process; never returns.
pub(crate) fn run(spec: &SandboxSpec, channel: SetupChannel, mode: &SetupMode) -> ! {
    let result = setup(spec, &channel, mode);
    match result {
        Ok((for_init, given)) => {
            let SetupChannel { control, report } = channel;
            // Already closed, with every other inherited descriptor, at the end of setup.
            std::mem::forget(control);
            let command = given.unwrap_or_else(|| Command::of(spec));
            init::run_command(spec, &command, report, for_init)
        }
        Err(err) => {
            let _ = protocol::report(channel.report.as_fd(), &Report::Failed(err.to_string()));
            std::process::exit(125)
        }
    }
}

/// Steps 5 to 16 of [`crate::protocol`], the setup process's side, in that order: each step
/// below is one function, and none of them may move. Returns what pid 1 keeps, and the command
/// when START brought one.
fn setup(
    spec: &SandboxSpec,
    channel: &SetupChannel,
    mode: &SetupMode,
) -> Result<(ForInit, Option<Command>)> {
    let rootful = mode.rootful;
    start_own_session()?;
    wait_for_id_maps(channel, rootful)?;
    set_hostname(spec)?;

    // Step 7 (base tree).
    let owner = mounter_ids(spec, rootful);
    let (root, scratch) = rootfs::staging_points(mode.staging);
    let places = Places {
        host_dir: mode.staging,
        staging: &root,
        scratch: &scratch,
        owner,
        etc: mode.etc,
    };
    let mounts = rootfs::plan(spec, owner, !rootful, &rootfs::Host)?;
    rootfs::execute(&mounts.base, &places, None)?;
    let users = enter_network_namespace(channel, rootful)?;
    let gate_ends = GateEnds::open(spec)?;
    // Steps 9 (workspace) and 10 (pivot): SECURITY: on return `/` is the new root, read-only.
    rootfs::execute(
        &mounts.workspace,
        &places,
        users.as_ref().map(|users| &users.idmap),
    )?;

    let for_init = enter_cgroup(channel, mode)?;
    enter_sandbox_user_namespace(users)?;
    become_sandbox_user(spec, rootful)?;
    confine_self(spec, channel, mode, gate_ends)?;
    let command = go_ahead(channel, mode)?;
    close_inherited_fds(channel, &for_init)?;
    Ok((for_init, command))
}

/// Step 6, after the maps: the sandbox's own hostname. A refusal in a UTS namespace that is ours
/// can only come from a filter around airlock (a container's seccomp profile refuses sethostname
/// without CAP_SYS_ADMIN): the namespace still keeps the sandbox from changing the host's
/// hostname, and the sandbox sees the container's name instead of its own, as `airlock check`
/// says.
fn set_hostname(spec: &SandboxSpec) -> Result<()> {
    match sethostname(&spec.hostname) {
        Err(nix::errno::Errno::EPERM) => Ok(()),
        set => set.during("set the hostname", UNEXPECTED),
    }
}

/// Step 5 (session).
fn start_own_session() -> Result<()> {
    // SECURITY: if the supervisor dies, so does the sandbox, at every step from here on.
    prctl::set_pdeathsig(Signal::SIGKILL).during("set the parent-death signal", UNEXPECTED)?;
    // SECURITY: out of the caller's session and process group: the terminal's signals go to
    // the supervisor, which forwards them once, and this process has no controlling terminal to
    // hand down.
    setsid().during("start a new session", UNEXPECTED)?;
    Ok(())
}

/// Step 6 (maps). Unprivileged, the supervisor writes our id maps first; as root there are none
/// to wait for.
fn wait_for_id_maps(channel: &SetupChannel, rootful: bool) -> Result<()> {
    if !rootful {
        match channel.receive()? {
            Message::Go => {}
            other => return Err(other.unexpected("GO")),
        }
    }
    Ok(())
}

/// Step 7 (base tree): whose ids the mounts are made with. SECURITY: root mounts with its real
/// credentials, before it enters any user namespace, so the overlay can copy up files of every
/// owner. Unprivileged, we are already in our user namespace.
fn mounter_ids(spec: &SandboxSpec, rootful: bool) -> MounterIds {
    if rootful {
        MounterIds {
            uid: spec.ids.host_uid,
            gid: spec.ids.host_gid,
        }
    } else {
        MounterIds {
            uid: spec.ids.inside_uid,
            gid: spec.ids.inside_gid,
        }
    }
}

/// Step 8 (network): enter the network namespace NAMESPACES brings, and keep the user
/// namespaces it brings as root. PERF: the supervisor's helper made our network namespace,
/// loopback up, while we mounted (see `sys::start_new_network`); as root it made our user
/// namespaces too.
fn enter_network_namespace(
    channel: &SetupChannel,
    rootful: bool,
) -> Result<Option<UserNamespaces<OwnedFd>>> {
    let (users, network) = match channel.receive()? {
        Message::Namespaces { users, network } => (users, network),
        other => return Err(other.unexpected("NAMESPACES")),
    };
    setns(&network, CloneFlags::CLONE_NEWNET).during(
        "enter the sandbox's network namespace",
        "run 'airlock check'",
    )?;
    drop(network);
    match (rootful, users) {
        (true, Some(users)) => Ok(Some(users)),
        (true, None) => Err(JailError::NoUserNamespaces {
            from: Peer::Supervisor,
        }),
        (false, _) => Ok(None),
    }
}

/// What the network gate needs of the sandbox's network namespace, opened in it at step 8.
/// SECURITY: the sandbox's resolver address (UDP and TCP), bound while this process may still
/// bind port 53; the supervisor answers on it. And a relaying gate's relay: a listener in this
/// namespace that allowed connections are sent to, so that no socket of the host's namespace is
/// ever handed into the sandbox. Sent to the supervisor at step 15 with the seccomp listener;
/// the caller takes them as [`crate::GateSockets`].
struct GateEnds {
    dns: OwnedFd,
    dns_tcp: OwnedFd,
    relay: Option<OwnedFd>,
}

impl GateEnds {
    /// None without a gate.
    fn open(spec: &SandboxSpec) -> Result<Option<GateEnds>> {
        let relay = match spec.network_gate {
            NetworkGate::Absent => return Ok(None),
            NetworkGate::Refusing => None,
            NetworkGate::Relaying => Some(
                std::net::TcpListener::bind("0.0.0.0:0")
                    .map(OwnedFd::from)
                    .during("open the network gate's relay", UNEXPECTED)?,
            ),
        };
        Ok(Some(GateEnds {
            dns: std::net::UdpSocket::bind(RESOLVER)
                .map(OwnedFd::from)
                .during("bind the sandbox's DNS socket to 127.0.0.53:53", UNEXPECTED)?,
            dns_tcp: std::net::TcpListener::bind(RESOLVER)
                .map(OwnedFd::from)
                .during("listen for DNS over TCP on 127.0.0.53:53", UNEXPECTED)?,
            relay,
        }))
    }
}

/// The sandbox's resolver, in its own network namespace (its /etc/resolv.conf names it).
const RESOLVER: std::net::SocketAddr = std::net::SocketAddr::new(
    std::net::IpAddr::V4(std::net::Ipv4Addr::new(127, 0, 0, 53)),
    crate::confine::DNS_PORT,
);

/// Step 11 (cgroup), and the cgroup namespace after it; returns what pid 1 keeps of the run's
/// cgroup. SECURITY: into the run's cgroup, which the supervisor made while we mounted, before
/// anything that counts against its limits runs. PERF: on v1 we move ourselves by writing 0 to
/// each `tasks` file it opened (see `cgroup::Join`); on v2 it has moved us already.
fn enter_cgroup(channel: &SetupChannel, mode: &SetupMode) -> Result<ForInit> {
    let mut for_init = ForInit {
        leave_cgroup: Vec::new(),
        cpu_usage: None,
    };
    if mode.has_cgroup {
        let (join, leave) = match channel.receive()? {
            Message::Cgroup { join, leave } => (join, leave),
            other => return Err(other.unexpected("CGROUP")),
        };
        for_init.leave_cgroup = leave;
        for tasks_file in join {
            nix::unistd::write(&tasks_file, b"0")
                .during("join the run's cgroup", "run 'airlock check'")?;
        }
        for_init.cpu_usage = match channel.receive()? {
            Message::CpuUsage(usage) => usage,
            other => return Err(other.unexpected("CPU_USAGE")),
        };
    }
    // SECURITY: a cgroup namespace rooted at the run's cgroup: the sandbox sees no other cgroup.
    unshare(CloneFlags::CLONE_NEWCGROUP)
        .during("create a cgroup namespace", "run 'airlock check'")?;
    Ok(for_init)
}

/// Step 13 (user namespace), as root. Step 12 (intent) is the caller's, in the supervisor,
/// meanwhile. Takes the namespaces so that they are closed here, before the blanket close of
/// inherited fds at the end of setup, which must find nothing that Rust still owns.
fn enter_sandbox_user_namespace(users: Option<UserNamespaces<OwnedFd>>) -> Result<()> {
    if let Some(UserNamespaces { sandbox, .. }) = &users {
        // SECURITY: a user namespace owned by root whose only ids are the sandbox user's: the
        // sandbox has no privilege over the mount namespace it lives in, and uid 1000 inside is
        // an unprivileged host uid outside.
        setns(sandbox, CloneFlags::CLONE_NEWUSER)
            .during("enter the sandbox's user namespace", "run 'airlock check'")?;
    }
    drop(users);
    Ok(())
}

/// Step 14 (identity).
fn become_sandbox_user(spec: &SandboxSpec, rootful: bool) -> Result<()> {
    confine::become_sandbox_user(spec, rootful)?;
    // SECURITY: changing credentials cleared the parent-death signal; set it again.
    prctl::set_pdeathsig(Signal::SIGKILL).during("set the parent-death signal", UNEXPECTED)?;
    // SECURITY: this process is a copy of the supervisor: its memory holds the caller's whole
    // environment and airlock's state. Not dumpable, its /proc files (environ, mem, fd…) belong
    // to root, out of the command's reach, although the command runs as the same uid.
    prctl::set_dumpable(false).during("make the sandbox's init undumpable", UNEXPECTED)?;
    Ok(())
}

/// Step 15 (confinement); with a network gate, its sockets and the seccomp listener go to the
/// supervisor (GATE), which closes ours as they are sent.
fn confine_self(
    spec: &SandboxSpec,
    channel: &SetupChannel,
    mode: &SetupMode,
    gate_ends: Option<GateEnds>,
) -> Result<()> {
    confine::set_no_new_privs()?;
    confine::apply_landlock(spec)?;
    confine::apply_rlimits(
        spec,
        confine::Fallbacks {
            memory_by_rlimit: !mode.has_cgroup,
            cpu_by_nice: mode.cpu_by_nice,
            file_size_limit: mode.file_size_limit,
        },
    )?;
    confine::drop_capabilities()?;
    match gate_ends {
        Some(ends) => {
            let listener = confine::apply_seccomp_gated()?;
            protocol::send(
                channel.control.as_fd(),
                &Message::Gate {
                    dns: ends.dns.as_fd(),
                    dns_tcp: ends.dns_tcp.as_fd(),
                    listener: listener.as_fd(),
                    relay: ends.relay.as_ref().map(AsFd::as_fd),
                },
            )?;
        }
        None => confine::apply_seccomp()?,
    }
    Ok(())
}

/// Step 16 (go-ahead): the command's stdio and CPUs, READY, then START, and the command START
/// carries, if any, with its stdin (a sandbox prepared before its command was known).
fn go_ahead(channel: &SetupChannel, mode: &SetupMode) -> Result<Option<Command>> {
    if let Some(ends) = mode.output {
        nix::unistd::dup2_stdout(&ends.stdout).during("redirect stdout", UNEXPECTED)?;
        nix::unistd::dup2_stderr(&ends.stderr).during("redirect stderr", UNEXPECTED)?;
    }
    if let Some(cpus) = &mode.cpus {
        nix::sched::sched_setaffinity(nix::unistd::Pid::from_raw(0), cpus)
            .during("give the sandbox every CPU airlock has", UNEXPECTED)?;
    }
    protocol::report(channel.report.as_fd(), &Report::Ready)?;
    // SECURITY: nothing of the command runs before the supervisor says so: its intent record is
    // on disk then. PERF: START usually came while we confined ourselves (see `launch`).
    match channel.receive()? {
        Message::Start(None) => Ok(None),
        Message::Start(Some(given)) => {
            nix::unistd::dup2_stdin(&given.stdin)
                .during("give the command its stdin", UNEXPECTED)?;
            Command::from_memfd(given.command).map(Some)
        }
        other => Err(other.unexpected("START")),
    }
}

/// SECURITY: every descriptor closed but stdio: the pipes, and anything the caller leaked to
/// us. Except the report pipe, which pid 1 keeps to report the command's end, the files it
/// leaves the run's cgroups through once the command has started, and the one it reads the
/// run's CPU time from (all close-on-exec, so the command never holds them; pid 1 is not
/// dumpable, so its /proc/1/fd is out of reach).
fn close_inherited_fds(channel: &SetupChannel, for_init: &ForInit) -> Result<()> {
    let kept: Vec<RawFd> = std::iter::once(channel.report.as_raw_fd())
        .chain(for_init.leave_cgroup.iter().map(AsRawFd::as_raw_fd))
        .chain(for_init.cpu_usage.iter().map(AsRawFd::as_raw_fd))
        .collect();
    sys::close_fds_from_except(3, &kept).during("close inherited file descriptors", UNEXPECTED)?;
    Ok(())
}
