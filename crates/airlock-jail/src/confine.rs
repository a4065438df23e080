//! What the setup process does to itself after the filesystem is in place, in this order:
//! identity, no_new_privs, Landlock, rlimits, capabilities, seccomp. Everything it forks after that
//! inherits all of it.

use std::path::Path;

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use nix::sys::resource::{setrlimit, Resource};
use nix::unistd::{setgroups, setresgid, setresuid, Gid, Uid};

use crate::error::{JailError, Result, SyscallContext, UNEXPECTED};
use crate::spec::SandboxSpec;
use crate::sys;

include!(concat!(env!("OUT_DIR"), "/seccomp_filters.rs"));

/// The newest Landlock ABI whose rules airlock knows and has tested; best effort below it.
pub const LANDLOCK_ABI: ABI = ABI::V6;

/// Become the sandbox user. `clear_groups`: drop supplementary groups (possible only when the
/// supervisor is root and so could leave setgroups allowed).
pub(crate) fn become_sandbox_user(spec: &SandboxSpec, clear_groups: bool) -> Result<()> {
    if clear_groups {
        setgroups(&[]).during("drop supplementary groups", UNEXPECTED)?;
    }
    let gid = Gid::from_raw(spec.ids.inside_gid);
    let uid = Uid::from_raw(spec.ids.inside_uid);
    setresgid(gid, gid, gid).during(
        "switch to the sandbox gid",
        "is the gid mapped? run 'airlock check'",
    )?;
    setresuid(uid, uid, uid).during(
        "switch to the sandbox uid",
        "is the uid mapped? run 'airlock check'",
    )
}

pub(crate) fn set_no_new_privs() -> Result<()> {
    nix::sys::prctl::set_no_new_privs().during("set no_new_privs", UNEXPECTED)
}

/// Landlock as a second wall behind the mount namespace: read and execute the system, read and
/// write only the workspace and the private tmpfs mounts; no TCP; no abstract unix sockets or
/// signals outside the sandbox.
pub(crate) fn apply_landlock(spec: &SandboxSpec) -> Result<()> {
    let required = !spec.degraded.landlock;
    let abi = LANDLOCK_ABI;
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi);
    let fail = |e: landlock::RulesetError| {
        JailError::Inside(format!(
            "landlock: {e} — run 'airlock check', or accept running without it: --allow-degraded=landlock"
        ))
    };

    let mut readable: Vec<&Path> = vec![Path::new("/")];
    let mut writable: Vec<&Path> = vec![
        spec.workspace.lower.as_path(),
        Path::new("/tmp"),
        spec.home.as_path(),
        Path::new("/dev/shm"),
        Path::new("/dev/pts"),
        Path::new("/dev/ptmx"),
        Path::new("/dev/null"),
        Path::new("/dev/zero"),
        Path::new("/dev/full"),
        Path::new("/dev/tty"),
        Path::new("/dev/random"),
        Path::new("/dev/urandom"),
    ];
    for bind in &spec.binds {
        if bind.writable {
            writable.push(&bind.path);
        } else {
            readable.push(&bind.path);
        }
    }
    let mut created = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(fail)?
        .handle_access(AccessNet::from_all(abi))
        .map_err(fail)?
        .scope(Scope::from_all(abi))
        .map_err(fail)?
        .create()
        .map_err(fail)?;
    for path in readable {
        let fd = PathFd::new(path)
            .map_err(|e| JailError::Inside(format!("landlock rule for {}: {e}", path.display())))?;
        created = created.add_rule(PathBeneath::new(fd, read)).map_err(fail)?;
    }
    for path in writable {
        let fd = PathFd::new(path)
            .map_err(|e| JailError::Inside(format!("landlock rule for {}: {e}", path.display())))?;
        let access = if std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(false) {
            all
        } else {
            AccessFs::from_file(abi)
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(fail)?;
    }
    let status = created.restrict_self().map_err(fail)?;
    // Partial enforcement is an older ABI without some of the rules (TCP, scoping), which
    // `airlock check` reports; none at all is a missing layer.
    if required && status.ruleset == RulesetStatus::NotEnforced {
        return Err(JailError::LayerMissing {
            layer: "Landlock",
            why: "the kernel enforced none of the ruleset".into(),
            flag: "landlock",
        });
    }
    Ok(())
}

/// rlimits: the floor that works on every kernel, with or without cgroups. RLIMIT_NPROC counts per
/// user namespace and uid (Linux >= 5.14), so the sandbox's count starts at zero.
pub(crate) fn apply_rlimits(spec: &SandboxSpec, memory_by_rlimit: bool) -> Result<()> {
    let limits = &spec.limits;
    let hint = "the limit may exceed the hard limit of the calling shell (ulimit -H)";
    setrlimit(Resource::RLIMIT_NPROC, limits.processes, limits.processes)
        .during("limit the number of processes", hint)?;
    setrlimit(Resource::RLIMIT_CPU, limits.cpu_seconds, limits.cpu_seconds)
        .during("limit CPU time", hint)?;
    setrlimit(
        Resource::RLIMIT_NOFILE,
        limits.open_files,
        limits.open_files,
    )
    .during("limit open files", hint)?;
    setrlimit(Resource::RLIMIT_CORE, 0, 0).during("disable core dumps", hint)?;
    if memory_by_rlimit {
        setrlimit(
            Resource::RLIMIT_AS,
            limits.memory_bytes,
            limits.memory_bytes,
        )
        .during("limit address space", hint)?;
    }
    Ok(())
}

pub(crate) fn drop_capabilities() -> Result<()> {
    sys::drop_all_capabilities().during("drop capabilities", UNEXPECTED)
}

/// Install the filter compiled by build.rs. From here on, the setup process can no longer mount,
/// create namespaces or trace anything, and neither can anything it starts.
pub(crate) fn apply_seccomp() -> Result<()> {
    sys::install_seccomp(FILTER).during("install the seccomp filter", "run 'airlock check'")
}
