//! Confining one process tree on Linux. The only airlock crate that makes raw system calls, and the
//! only one with `unsafe` (each block carries a `// SAFETY:` comment).
//!
//! A run is started by [`spawn`] from a [`SandboxSpec`]: the supervisor clones a setup process
//! into new user, mount, pid, ipc, uts, net and cgroup namespaces; it builds a minimal root with
//! the workspace as an overlay, becomes the unprivileged sandbox user, sets no_new_privs, applies
//! Landlock, rlimits, drops every capability, installs the seccomp filter compiled at build time,
//! closes every inherited descriptor, and becomes pid 1 for the command.

mod beneath;
mod cgroup;
mod confine;
mod error;
mod etc;
mod idmap;
mod init;
mod inside;
mod launch;
mod output;
pub mod probe;
mod rootfs;
mod spec;
mod sys;

pub use cgroup::{detect as detect_cgroups, CgroupSupport};
pub use confine::{DENIED_SYSCALLS, LANDLOCK_ABI};
pub use error::{JailError, Result};
pub use etc::{ETC_BOUND, ETC_COPIED};
pub use launch::memory_layer_supported;
pub use launch::{spawn, Finished, Outcome, Sandbox};
pub use rootfs::SYSTEM_DIRS;
pub use spec::{Bind, Degraded, IdMapping, Layer, OverlayWorkspace, ResourceLimits, SandboxSpec};
