//! What the setup process does to itself after the filesystem is in place, in this order:
//! identity, no_new_privs, Landlock, rlimits, capabilities, seccomp. Everything it forks after that
//! inherits all of it.

use std::path::Path;

use landlock::{
    Access, AccessFs, AccessNet, CompatLevel, Compatible, NetPort, PathBeneath, PathFd, Ruleset,
    RulesetAttr, RulesetCreatedAttr, RulesetStatus, Scope, ABI,
};
use nix::sys::resource::{getrlimit, setrlimit, Resource};

use crate::error::{JailError, PathContext, Result, SyscallContext, UNEXPECTED};
use crate::spec::{NetworkGate, SandboxSpec};

/// The port of the sandbox's resolver (127.0.0.53), over UDP and TCP.
pub(crate) const DNS_PORT: u16 = 53;
use crate::sys;

include!(concat!(env!("OUT_DIR"), "/seccomp_filters.rs"));

/// The newest Landlock ABI whose rules airlock knows and has tested; best effort below it.
pub const LANDLOCK_ABI: ABI = ABI::V6;

/// Become the sandbox user. `clear_groups`: drop supplementary groups (possible only when the
/// supervisor is root and so could leave setgroups allowed).
pub(crate) fn become_sandbox_user(spec: &SandboxSpec, clear_groups: bool) -> Result<()> {
    // By the system calls, not glibc's wrappers, which can wait for ever in a child of a
    // process with threads (see sys/confine.rs).
    if clear_groups {
        sys::drop_groups().during("drop supplementary groups", UNEXPECTED)?;
    }
    sys::set_gids(spec.ids.inside_gid).during(
        "switch to the sandbox gid",
        "is the gid mapped? run 'airlock check'",
    )?;
    sys::set_uids(spec.ids.inside_uid).during(
        "switch to the sandbox uid",
        "is the uid mapped? run 'airlock check'",
    )
}

pub(crate) fn set_no_new_privs() -> Result<()> {
    nix::sys::prctl::set_no_new_privs().during("set no_new_privs", UNEXPECTED)
}

/// Landlock as a second wall behind the mount namespace: read and execute the system, read and
/// write only the workspace and the private tmpfs mounts; no abstract unix sockets or signals
/// outside the sandbox; and, without a relaying network gate, no TCP at all but a connect to the
/// resolver's port when the refusing gate answers there (the network namespace has only the
/// sandbox's own loopback, and that gate refuses every connect leaving it).
/// With a relaying gate, TCP is left to the network namespace and to the gate, which decides
/// every connect: programs may serve and reach each other on that loopback (a test suite's
/// local server), as on any machine.
pub(crate) fn apply_landlock(spec: &SandboxSpec) -> Result<()> {
    let required = !spec.degraded.landlock;
    let abi = LANDLOCK_ABI;
    let read = AccessFs::from_read(abi);
    let all = AccessFs::from_all(abi);
    let fail = JailError::Landlock;

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
    let mut ruleset = Ruleset::default()
        .set_compatibility(CompatLevel::BestEffort)
        .handle_access(all)
        .map_err(fail)?;
    if spec.network_gate != NetworkGate::Relaying {
        ruleset = ruleset
            .handle_access(AccessNet::from_all(abi))
            .map_err(fail)?;
    }
    let mut created = ruleset
        .scope(Scope::from_all(abi))
        .map_err(fail)?
        .create()
        .map_err(fail)?;
    for path in readable {
        let fd = PathFd::new(path).on_path("open for a Landlock rule", path, UNEXPECTED)?;
        created = created.add_rule(PathBeneath::new(fd, read)).map_err(fail)?;
    }
    for path in writable {
        let fd = PathFd::new(path).on_path("open for a Landlock rule", path, UNEXPECTED)?;
        let access = if std::fs::metadata(path).map(|m| m.is_dir()).unwrap_or(false) {
            all
        } else {
            AccessFs::from_file(abi)
        };
        created = created
            .add_rule(PathBeneath::new(fd, access))
            .map_err(fail)?;
    }
    if spec.network_gate == NetworkGate::Refusing {
        created = created
            .add_rule(NetPort::new(DNS_PORT, AccessNet::ConnectTcp))
            .map_err(fail)?;
    }
    let status = created.restrict_self().map_err(fail)?;
    // Partial enforcement is an older ABI without some of the rules (TCP, scoping), which
    // `airlock check` reports; none at all is a missing layer.
    if required && status.ruleset == RulesetStatus::NotEnforced {
        return Err(JailError::LayerMissing {
            layer: "Landlock",
            why: "the kernel enforced none of the ruleset",
            flag: "landlock",
        });
    }
    Ok(())
}

/// What the setup process sets where the kernel offers no better bound (see [`apply_rlimits`]).
pub(crate) struct Fallbacks {
    /// No cgroup: memory by RLIMIT_AS.
    pub memory_by_rlimit: bool,
    /// No CPU bandwidth cgroup: nice 19.
    pub cpu_by_nice: bool,
    /// RLIMIT_FSIZE, from the disk guard.
    pub file_size_limit: Option<u64>,
}

/// rlimits: the floor that works on every kernel, with or without cgroups. RLIMIT_NPROC counts per
/// user namespace and uid (Linux >= 5.14), so the sandbox's count starts at zero.
pub(crate) fn apply_rlimits(spec: &SandboxSpec, fallbacks: Fallbacks) -> Result<()> {
    let limits = &spec.limits;
    // Lowering a limit needs no privilege (see `lower_rlimit`).
    let hint = UNEXPECTED;
    if fallbacks.cpu_by_nice {
        // Raising one's own nice needs no privilege; RLIMIT_NICE 0 keeps the command from
        // lowering it again (the kernel's ceiling is 20 - RLIMIT_NICE).
        rustix::process::setpriority_process(None, 19).map_err(|e| JailError::Syscall {
            action: "lower the sandbox's CPU priority (nice 19)",
            errno: nix::errno::Errno::from_raw(e.raw_os_error()),
            hint: UNEXPECTED,
        })?;
        lower_rlimit(Resource::RLIMIT_NICE, 0, 0).during("keep the priority low", hint)?;
    }
    // A real-time class escapes the cpu cgroup's CFS quota (without RT_GROUP_SCHED) and nice
    // alike; a caller's raised RLIMIT_RTPRIO (limits.conf for audio, say) would let the
    // command take one without CAP_SYS_NICE.
    lower_rlimit(Resource::RLIMIT_RTPRIO, 0, 0).during("forbid real-time scheduling", hint)?;
    if let Some(bytes) = fallbacks.file_size_limit {
        lower_rlimit(Resource::RLIMIT_FSIZE, bytes, bytes).during("limit file sizes", hint)?;
    }
    lower_rlimit(Resource::RLIMIT_NPROC, limits.processes, limits.processes)
        .during("limit the number of processes", hint)?;
    // SIGXCPU at the limit, as for the run's own limit (exit 152); SIGKILL a second later for a
    // process that ignores it (the kernel checks the hard limit first: equal ones kill at once).
    lower_rlimit(
        Resource::RLIMIT_CPU,
        limits.cpu_seconds,
        limits.cpu_seconds.saturating_add(1),
    )
    .during("limit CPU time", hint)?;
    lower_rlimit(
        Resource::RLIMIT_NOFILE,
        limits.open_files,
        limits.open_files,
    )
    .during("limit open files", hint)?;
    lower_rlimit(Resource::RLIMIT_CORE, 0, 0).during("disable core dumps", hint)?;
    if fallbacks.memory_by_rlimit {
        lower_rlimit(
            Resource::RLIMIT_AS,
            limits.memory_bytes,
            limits.memory_bytes,
        )
        .during("limit address space", hint)?;
    }
    Ok(())
}

/// Set `resource` to `soft` and `hard`, or to the hard limit already in place where that is lower
/// (a container's `--ulimit`, the calling shell's `ulimit -H`). SECURITY: never looser than asked:
/// an inherited hard limit below the profile's is the stricter bound, and raising it would need
/// CAP_SYS_RESOURCE, which the setup process may not have (a container's root has not).
fn lower_rlimit(resource: Resource, soft: u64, hard: u64) -> nix::Result<()> {
    let (_, inherited_hard) = getrlimit(resource)?;
    setrlimit(resource, soft.min(inherited_hard), hard.min(inherited_hard))
}

pub(crate) fn drop_capabilities() -> Result<()> {
    sys::drop_all_capabilities().during("drop capabilities", UNEXPECTED)
}

/// Install the filter compiled by build.rs. From here on, the setup process can no longer mount,
/// create namespaces or trace anything, and neither can anything it starts.
pub(crate) fn apply_seccomp() -> Result<()> {
    sys::install_seccomp(FILTER).during("install the seccomp filter", "run 'airlock check'")
}

/// The filter of a gated sandbox: the same, and every `connect` waits for the supervisor at the
/// returned listener.
pub(crate) fn apply_seccomp_gated() -> Result<std::os::fd::OwnedFd> {
    sys::install_seccomp_listener(FILTER_GATED).during(
        "install the seccomp filter with a listener",
        "the network gate needs seccomp user notifications and Linux 5.9 or later; run 'airlock check'",
    )
}

#[cfg(test)]
mod seccomp_tests {
    //! The compiled filter, run through a small classic-BPF interpreter: its decisions are
    //! checked for the calls that matter without installing it.
    use super::{FILTER, FILTER_GATED};

    const AUDIT_ARCH_X86_64: u32 = 0xC000_003E;
    const AUDIT_ARCH_I386: u32 = 0x4000_0003;
    const RET_ALLOW: u32 = 0x7fff_0000;
    const RET_KILL_PROCESS: u32 = 0x8000_0000;
    const RET_ERRNO: u32 = 0x0005_0000;

    /// Run the filter on (nr, arch, args) as the kernel would.
    fn decide(nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        decide_with(FILTER, nr, arch, args)
    }

    fn decide_with(filter: &[libc::sock_filter], nr: u32, arch: u32, args: [u64; 6]) -> u32 {
        let mut data = [0u8; 64];
        data[0..4].copy_from_slice(&nr.to_le_bytes());
        data[4..8].copy_from_slice(&arch.to_le_bytes());
        for (i, arg) in args.iter().enumerate() {
            data[16 + 8 * i..24 + 8 * i].copy_from_slice(&arg.to_le_bytes());
        }
        let (mut acc, mut pc) = (0u32, 0usize);
        loop {
            let insn = filter[pc];
            pc += 1;
            let k = insn.k;
            match insn.code {
                0x20 => {
                    acc = u32::from_le_bytes(data[k as usize..k as usize + 4].try_into().unwrap())
                }
                0x54 => acc &= k,
                0x05 => pc += k as usize,
                0x15 | 0x25 | 0x35 | 0x45 => {
                    let taken = match insn.code {
                        0x15 => acc == k,
                        0x25 => acc > k,
                        0x35 => acc >= k,
                        _ => acc & k != 0,
                    };
                    pc += if taken {
                        insn.jt as usize
                    } else {
                        insn.jf as usize
                    };
                }
                0x06 => return k,
                other => panic!("instruction {other:#x} not interpreted"),
            }
        }
    }

    fn x86(nr: i64, args: [u64; 6]) -> u32 {
        decide(nr as u32, AUDIT_ARCH_X86_64, args)
    }

    #[cfg(target_arch = "x86_64")]
    #[test]
    fn decisions() {
        let errno = |e: i32| RET_ERRNO | e as u32;
        let none = [0; 6];
        assert_eq!(x86(libc::SYS_read, none), RET_ALLOW);
        assert_eq!(x86(libc::SYS_execve, none), RET_ALLOW);
        assert_eq!(x86(libc::SYS_mount, none), errno(libc::EPERM));
        assert_eq!(x86(libc::SYS_ptrace, none), errno(libc::EPERM));
        assert_eq!(x86(libc::SYS_io_uring_setup, none), errno(libc::EPERM));
        assert_eq!(x86(libc::SYS_bpf, none), errno(libc::EPERM));
        // clone: plain forks and threads pass; any namespace flag is refused.
        let fork_flags = libc::SIGCHLD as u64;
        let thread_flags = (libc::CLONE_VM | libc::CLONE_THREAD | libc::CLONE_SIGHAND) as u64;
        assert_eq!(x86(libc::SYS_clone, [fork_flags, 0, 0, 0, 0, 0]), RET_ALLOW);
        assert_eq!(
            x86(libc::SYS_clone, [thread_flags, 0, 0, 0, 0, 0]),
            RET_ALLOW
        );
        for flag in [
            libc::CLONE_NEWUSER,
            libc::CLONE_NEWNS,
            libc::CLONE_NEWNET,
            libc::CLONE_NEWPID,
        ] {
            let flags = fork_flags | flag as u64;
            assert_eq!(
                x86(libc::SYS_clone, [flags, 0, 0, 0, 0, 0]),
                errno(libc::EPERM),
                "{flag:#x}"
            );
        }
        assert_eq!(x86(libc::SYS_clone3, none), errno(libc::ENOSYS));
        // ioctl: TIOCSTI refused, also with junk in the upper half of the request.
        assert_eq!(
            x86(libc::SYS_ioctl, [0, libc::TIOCSTI, 0, 0, 0, 0]),
            errno(libc::EPERM)
        );
        assert_eq!(
            x86(libc::SYS_ioctl, [0, libc::TIOCSTI | (1 << 40), 0, 0, 0, 0]),
            errno(libc::EPERM)
        );
        assert_eq!(
            x86(libc::SYS_ioctl, [0, libc::TIOCGWINSZ, 0, 0, 0, 0]),
            RET_ALLOW
        );
        // socket families.
        for family in [libc::AF_UNIX, libc::AF_INET, libc::AF_INET6] {
            assert_eq!(
                x86(libc::SYS_socket, [family as u64, 1, 0, 0, 0, 0]),
                RET_ALLOW
            );
        }
        for family in [libc::AF_NETLINK, libc::AF_PACKET, libc::AF_VSOCK] {
            assert_eq!(
                x86(libc::SYS_socket, [family as u64, 1, 0, 0, 0, 0]),
                errno(libc::EPERM)
            );
        }
        // fallocate: punching a hole frees space; every mode that takes it is refused, also
        // with the mode's bits hidden among junk in the upper half.
        let fallocate = |mode: u64| x86(libc::SYS_fallocate, [3, mode, 0, 1 << 30, 0, 0]);
        let (keep_size, punch_hole) = (libc::FALLOC_FL_KEEP_SIZE, libc::FALLOC_FL_PUNCH_HOLE);
        assert_eq!(fallocate((keep_size | punch_hole) as u64), RET_ALLOW);
        for mode in [
            0,
            keep_size,
            libc::FALLOC_FL_ZERO_RANGE,
            libc::FALLOC_FL_ZERO_RANGE | keep_size,
            libc::FALLOC_FL_INSERT_RANGE,
            libc::FALLOC_FL_UNSHARE_RANGE | keep_size,
        ] {
            assert_eq!(fallocate(mode as u64), errno(libc::EOPNOTSUPP), "{mode:#x}");
        }
        assert_eq!(
            fallocate((1 << 40) | keep_size as u64),
            errno(libc::EOPNOTSUPP)
        );
        // Newer than the reviewed list, and x32: ENOSYS. Another architecture: killed.
        assert_eq!(x86(470, none), errno(libc::ENOSYS));
        assert_eq!(
            x86(0x4000_0000 | libc::SYS_getpid, none),
            errno(libc::ENOSYS)
        );
        // The architecture is checked first: a foreign call is killed whatever its number.
        for nr in [20, 470, 0x4000_0014] {
            assert_eq!(decide(nr, AUDIT_ARCH_I386, none), RET_KILL_PROCESS, "{nr}");
        }
        // clone's flags are read as 32 bits by the kernel: junk above them changes nothing.
        assert_eq!(
            x86(libc::SYS_clone, [fork_flags | (1 << 40), 0, 0, 0, 0, 0]),
            RET_ALLOW
        );
        assert_eq!(
            x86(
                libc::SYS_clone,
                [
                    fork_flags | (1 << 40) | libc::CLONE_NEWUSER as u64,
                    0,
                    0,
                    0,
                    0,
                    0
                ]
            ),
            errno(libc::EPERM)
        );
    }

    /// Every number up to the newest reviewed one, one by one: build.rs encodes runs of denied
    /// numbers as ranges, which must refuse exactly those (and not their neighbours).
    #[cfg(target_arch = "x86_64")]
    #[test]
    fn every_syscall_number_gets_its_decision() {
        const RET_USER_NOTIF: u32 = 0x7fc0_0000;
        let errno = |e: i32| RET_ERRNO | e as u32;
        for (filter, gated) in [(FILTER, false), (FILTER_GATED, true)] {
            for nr in 0..=super::NEWEST_KNOWN_SYSCALL + 1 {
                let expected =
                    if nr > super::NEWEST_KNOWN_SYSCALL || i64::from(nr) == libc::SYS_clone3 {
                        errno(libc::ENOSYS)
                    } else if gated && i64::from(nr) == libc::SYS_connect {
                        RET_USER_NOTIF
                    } else if super::DENIED_NUMBERS.contains(&nr) {
                        errno(libc::EPERM)
                    } else if i64::from(nr) == libc::SYS_socket {
                        // Family 0 (AF_UNSPEC) is not one of the allowed ones.
                        errno(libc::EPERM)
                    } else if i64::from(nr) == libc::SYS_fallocate {
                        // Mode 0 takes space.
                        errno(libc::EOPNOTSUPP)
                    } else {
                        RET_ALLOW
                    };
                let got = decide_with(filter, nr, AUDIT_ARCH_X86_64, [0; 6]);
                assert_eq!(got, expected, "syscall {nr}, gated: {gated}");
            }
        }
        // The list is not empty, and holds runs that the filter encodes as ranges.
        assert!(super::DENIED_NUMBERS.windows(3).any(|w| w[2] == w[0] + 2));
    }

    /// Every instruction the kernel would have to verify and compile on each launch costs time;
    /// the filter stays small (see build.rs).
    #[test]
    fn filter_stays_compact() {
        assert!(FILTER.len() < 100, "{} instructions", FILTER.len());
    }
}
