//! Confining one process tree on Linux. The only airlock crate that makes raw system calls, and the
//! only one with `unsafe` (each block carries a `// SAFETY:` comment).
//!
//! A run is started from a [`SandboxSpec`] by [`prepare`], then [`Launching::start`] once the
//! caller's intent is written (or [`Launching::refuse`] when it cannot be): the supervisor clones a setup
//! process into new mount, pid, ipc and uts namespaces (and a user namespace, when unprivileged)
//! and hands it a network namespace made beside it; it builds a minimal root with the workspace
//! as an overlay, joins the run's cgroup and a cgroup
//! namespace, becomes the unprivileged sandbox user (as root: in a user namespace the supervisor
//! made), sets no_new_privs, applies Landlock and rlimits, drops every capability, installs the
//! seccomp filter compiled at build time, closes every inherited descriptor, and becomes pid 1
//! for the command. `protocol.rs` lists the steps in their order, and `docs/security.md` walks
//! through the same list.

/// `eprintln!` that cannot panic: a message to a stderr that is gone (closed, full) is lost,
/// and pid 1 or the supervisor goes on to its exit status. Defined before the modules, which
/// see it by textual scope; other crates have their own.
macro_rules! note {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod apparmor;
mod beneath;
pub mod cgroup;
mod command;
mod confine;
pub mod container;
pub mod control;
pub mod dbus;
mod error;
mod etc;
pub mod gate;
mod idmap;
pub mod image;
mod init;
mod inside;
mod launch;
pub mod nss;
mod output;
pub use output::{OutputFailure, OutputTails, TAIL_BYTES};
pub mod privilege;
pub mod probe;
mod protocol;
mod rootfs;
/// The host's system directories every sandbox reads (bound read-only).
pub use rootfs::SYSTEM_DIRS;
mod spec;
mod sys;
pub mod trust;

pub use command::Command;
pub use error::{JailError, Peer, Result};
pub use launch::{
    memory_layer_supported, prepare, prepare_without_command, start_network, Finished, GateSockets,
    Launching, Outcome, PendingNetwork, Sandbox, Usage,
};
pub use privilege::Way;
pub use spec::{
    Bind, ChangeLayer, CpuBandwidth, Degraded, DiskGuard, IdMapping, NetworkGate, OverlayWorkspace,
    ResourceLimits, SandboxSpec,
};
