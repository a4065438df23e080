//! What one sandbox is made of: plain data, decided by the caller, carried out by [`crate::prepare`] and [`crate::Launching::start`].

use std::ffi::OsString;
use std::path::PathBuf;

/// The uid and gid the command has inside, and the host ids they stand for.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct IdMapping {
    pub inside_uid: u32,
    pub inside_gid: u32,
    pub host_uid: u32,
    pub host_gid: u32,
}

/// A host directory seen inside at the same path through a copy-on-write overlay:
/// reads come from `lower`, every write lands in the layer (the change set).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OverlayWorkspace {
    /// The host workspace; never written.
    pub lower: PathBuf,
    pub layer: ChangeLayer,
}

/// Where the workspace's changes are kept.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ChangeLayer {
    /// In a session on disk, surviving the run.
    Disk {
        /// Must be owned by the host uid of the mapping.
        upper: PathBuf,
        /// overlayfs' scratch dir; same filesystem as `upper`.
        work: PathBuf,
    },
    /// In a tmpfs that exists only in the sandbox's mount namespace and vanishes with it: for
    /// throwaway runs, which then touch no disk at all. Its pages count as the sandbox's memory.
    /// The kernel holds it to `size_bytes` (ENOSPC) and, when given, to `inodes` files.
    Memory {
        size_bytes: u64,
        inodes: Option<u64>,
    },
}

/// A host path made visible inside at the same path.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Bind {
    pub path: PathBuf,
    pub writable: bool,
}

/// Resource limits: processes, CPU time and open files by rlimits, memory and processes also by
/// cgroups where a hierarchy is writable (else memory by RLIMIT_AS), tmpfs sizes by mount
/// options, time and output by the supervisor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResourceLimits {
    pub memory_bytes: u64,
    pub processes: u64,
    pub cpu_seconds: u64,
    pub open_files: u64,
    /// Size of each private tmpfs (/tmp, $HOME).
    pub tmp_bytes: u64,
    /// Wall-clock limit; the whole sandbox is killed when it passes.
    pub timeout: Option<std::time::Duration>,
    /// Total stdout+stderr bytes passed on; the rest is dropped. None: the command writes to the
    /// caller's stdout and stderr directly.
    pub output_bytes: Option<u64>,
    /// CPU bandwidth for the whole sandbox, in thousandths of a CPU, by the run's cgroup.
    pub cpus: CpuBandwidth,
    /// A watch on the free space of the filesystem a disk layer is on; None: nothing to watch
    /// (a memory layer, or one on a filesystem of its own that the kernel holds to its size).
    pub disk_guard: Option<DiskGuard>,
}

/// The `cpus` limit as the jail enforces it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CpuBandwidth {
    pub millicpus: u64,
    /// The profile named it: where no cgroup can enforce it, [`crate::prepare`] refuses unless
    /// [`Degraded::cpus`]. A default that cannot be enforced falls back to nice 19.
    pub explicit: bool,
}

/// The supervisor's watch on the filesystem under a session's layer, where the kernel bounds
/// nothing smaller than the filesystem: it kills the sandbox before the free space falls below
/// `keep_free_bytes` or its free inodes below `keep_free_inodes`, or once the free space has
/// fallen by more than `budget_bytes` since the start. RLIMIT_FSIZE holds every single file to
/// what is left, by the kernel.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiskGuard {
    /// A directory on the filesystem to watch (statvfs).
    pub path: PathBuf,
    pub keep_free_bytes: u64,
    /// 0 where the filesystem has no fixed count of inodes (statvfs says 0 in all: btrfs).
    pub keep_free_inodes: u64,
    pub budget_bytes: Option<u64>,
}

/// Layers the caller accepts to run without (`--allow-degraded`). Anything not named here that the
/// kernel cannot provide makes [`crate::prepare`] refuse.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Degraded {
    pub landlock: bool,
    /// An explicit `cpus` without a cgroup to enforce it: run at nice 19 instead.
    pub cpus: bool,
    /// An explicit `disk`/`files` on a layer the kernel cannot hold to it: the supervisor's
    /// watch on free space and RLIMIT_FSIZE instead (decided in airlock-core).
    pub disk: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSpec {
    /// argv[0] is looked up in the sandbox's PATH.
    pub argv: Vec<OsString>,
    /// Rootful, or in a user namespace: the caller decided it once for the request.
    pub way: crate::privilege::Way,
    /// The complete environment of the command; nothing else is inherited.
    pub env: Vec<(OsString, OsString)>,
    /// Working directory inside (normally inside the workspace).
    pub cwd: PathBuf,
    pub ids: IdMapping,
    pub workspace: OverlayWorkspace,
    /// Extra binds from the profile, beyond the system directories.
    pub binds: Vec<Bind>,
    /// Paths hidden under an empty read-only tmpfs (or /dev/null for files).
    pub hide: Vec<PathBuf>,
    pub limits: ResourceLimits,
    pub degraded: Degraded,
    pub hostname: String,
    pub user_name: String,
    pub home: PathBuf,
    /// Who answers the sandbox's network beyond its own loopback.
    pub network_gate: NetworkGate,
    /// Certificates trusted inside beyond the host's (the run's CA when the gate injects
    /// secrets); None: the host's alone.
    pub trust: Option<crate::trust::Trust>,
}

/// Who answers a sandbox's network beyond its own loopback. In both gated kinds every `connect`
/// stops at the supervisor's gate (see `gate`) and the sandbox's resolver (127.0.0.53, UDP and
/// TCP) is the supervisor's.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NetworkGate {
    /// Nobody: a loopback of its own, TCP refused by Landlock, no resolver. A lookup fails as a
    /// temporary error and nothing is recorded (the jail's own tests).
    Absent,
    /// The gate refuses everything that leaves the loopback, at once, and says what was asked
    /// for (a profile with no network). Landlock still refuses TCP, but to the resolver's port.
    Refusing,
    /// The gate decides and relays (a profile with network rules): TCP is the gate's to decide.
    Relaying,
}

impl NetworkGate {
    /// Does a supervisor's gate answer for this sandbox?
    pub fn gated(self) -> bool {
        self != NetworkGate::Absent
    }
}
