//! The setup process: the first process of the sandbox (pid 1 of its pid namespace). It builds the
//! filesystem, takes on the sandbox identity, confines itself, and then becomes the init that
//! starts the command. The order of the steps in [`run`] is the security argument.

use std::io::{Read, Write};
use std::os::fd::OwnedFd;
use std::path::Path;

use nix::sched::{unshare, CloneFlags};
use nix::sys::prctl;
use nix::sys::signal::Signal;
use nix::unistd::sethostname;

use crate::confine;
use crate::error::{JailError, Result, SyscallContext};
use crate::init;
use crate::rootfs::{self, MounterIds, RootfsPlan};
use crate::spec::SandboxSpec;
use crate::sys;

/// Messages from the setup process to the supervisor, one byte each (an error carries text).
pub(crate) const MSG_WRITE_ID_MAPS: u8 = b'M';
pub(crate) const MSG_READY: u8 = b'R';
pub(crate) const MSG_ERROR: u8 = b'E';

/// How the setup process was started.
pub(crate) struct SetupChannel {
    /// The supervisor writes one byte to let the next step go; EOF means it died.
    pub go: OwnedFd,
    pub report: OwnedFd,
}

impl SetupChannel {
    fn wait_for_go(&mut self) -> Result<()> {
        let mut byte = [0u8; 1];
        let mut file = std::fs::File::from(self.go.try_clone().map_err(io)?);
        match file.read(&mut byte) {
            Ok(1) => Ok(()),
            _ => Err(JailError::Inside(
                "the supervisor went away during setup".into(),
            )),
        }
    }

    fn send(&mut self, bytes: &[u8]) -> Result<()> {
        let mut file = std::fs::File::from(self.report.try_clone().map_err(io)?);
        file.write_all(bytes).map_err(io)
    }
}

fn io(e: std::io::Error) -> JailError {
    JailError::Inside(e.to_string())
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
    /// No memory cgroup: limit the address space with RLIMIT_AS instead.
    pub memory_by_rlimit: bool,
    /// Root only: a user namespace whose mapping shows the workspace owner's files as the
    /// sandbox user's on the overlay's lower layer (see `idmap`).
    pub lower_idmap: Option<&'a std::os::fd::OwnedFd>,
}

/// Entry point of the setup process; never returns.
pub(crate) fn run(spec: &SandboxSpec, mut channel: SetupChannel, mode: &SetupMode) -> ! {
    let result = setup(spec, &mut channel, mode);
    match result {
        Ok(()) => init::run_command(spec),
        Err(err) => {
            let mut message = vec![MSG_ERROR];
            message.extend_from_slice(err.to_string().as_bytes());
            let _ = channel.send(&message);
            std::process::exit(125)
        }
    }
}

fn setup(spec: &SandboxSpec, channel: &mut SetupChannel, mode: &SetupMode) -> Result<()> {
    let rootful = mode.rootful;
    // If the supervisor dies, so does the sandbox, at every step from here on.
    prctl::set_pdeathsig(Signal::SIGKILL).during("set the parent-death signal", "unexpected")?;
    // Unprivileged, the supervisor writes our id maps first.
    channel.wait_for_go()?;
    sethostname(&spec.hostname).during("set the hostname", "unexpected: please report it")?;
    sys::loopback_up().during(
        "bring up loopback in the sandbox's network namespace",
        "run 'airlock check'",
    )?;

    // Root mounts with its real credentials, before any user namespace exists, so the overlay can
    // copy up files of every owner. Unprivileged, we are already in our user namespace.
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
    rootfs::build_and_enter(&RootfsPlan {
        spec,
        staging: mode.staging,
        in_user_namespace: !rootful,
        owner,
        lower_idmap: mode.lower_idmap,
        etc: mode.etc,
    })?;

    // The supervisor moves us into the run's cgroup while we mount (moving a process is slow on
    // cgroup v1); nothing may be forked before it is done.
    channel.wait_for_go()?;
    // A cgroup namespace rooted at the run's cgroup: the sandbox sees no other cgroup.
    unshare(CloneFlags::CLONE_NEWCGROUP)
        .during("create a cgroup namespace", "run 'airlock check'")?;

    if rootful {
        // A user namespace owned by root whose only id is the sandbox user: the sandbox has no
        // privilege over the mount namespace it lives in, and uid 1000 inside is an unprivileged
        // host uid outside.
        unshare(CloneFlags::CLONE_NEWUSER)
            .during("create a user namespace", "run 'airlock check'")?;
        channel.send(&[MSG_WRITE_ID_MAPS])?;
        channel.wait_for_go()?;
    }
    confine::become_sandbox_user(spec, rootful)?;
    // Changing credentials cleared the parent-death signal; set it again.
    prctl::set_pdeathsig(Signal::SIGKILL).during("set the parent-death signal", "unexpected")?;
    confine::set_no_new_privs()?;
    confine::apply_landlock(spec, !spec.degraded.landlock)?;
    confine::apply_rlimits(spec, mode.memory_by_rlimit)?;
    confine::drop_capabilities()?;
    confine::apply_seccomp()?;
    // Tell the supervisor we are ready, then drop every descriptor but stdio: the pipes, and
    // anything the caller leaked to us.
    if let Some(ends) = mode.output {
        nix::unistd::dup2_stdout(&ends.stdout)
            .during("redirect stdout", "unexpected: please report it")?;
        nix::unistd::dup2_stderr(&ends.stderr)
            .during("redirect stderr", "unexpected: please report it")?;
    }
    channel.send(&[MSG_READY])?;
    sys::close_fds_from(3).during(
        "close inherited file descriptors",
        "unexpected: please report it",
    )?;
    Ok(())
}
