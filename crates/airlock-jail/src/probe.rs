//! What this kernel and this user can actually do, found by trying it in a throwaway child:
//! the basis of `airlock check` and of refusing to run with less than was asked for.

use std::path::Path;

use nix::mount::{mount, MsFlags};
use nix::sched::{unshare, CloneFlags};
use nix::sys::wait::{waitpid, WaitStatus};

use crate::apparmor;
use crate::cgroup::{self, CgroupSupport};
use crate::privilege::Way;
use crate::sys::{self, clone_fork, Forked};

/// One protection layer and whether this machine provides it.
#[derive(Debug, Clone, serde::Serialize)]
pub struct LayerReport {
    pub name: &'static str,
    pub available: bool,
    /// What it is and what it means for `run` here.
    pub detail: String,
    /// `run` refuses without it unless `--allow-degraded=<flag>` (None: always required).
    pub degradable_as: Option<&'static str>,
    /// Missing but not needed (limits fall back to rlimits).
    pub optional: bool,
    /// The commands that would provide it, one per line, when airlock knows them.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub fix: Option<String>,
}

pub fn landlock_abi() -> i32 {
    // The fail-closed path needs a kernel without Landlock to be tested; debug builds (the test
    // suite's) can pretend to be on one. Release builds never look at this variable.
    #[cfg(debug_assertions)]
    if std::env::var_os("AIRLOCK_TEST_HIDE_LANDLOCK").is_some() {
        return 0;
    }
    sys::landlock_abi_version()
}

/// Try one step in a forked child; true when it succeeded.
fn try_in_child(flags: libc::c_int, step: impl FnOnce() -> bool) -> bool {
    match clone_fork(flags) {
        Ok(Forked::Child) => std::process::exit(if step() { 0 } else { 1 }),
        Ok(Forked::Parent(pid)) => matches!(waitpid(pid, None), Ok(WaitStatus::Exited(_, 0))),
        Err(_) => false,
    }
}

/// An overlay mount in a fresh user+mount namespace, the way an unprivileged run mounts it.
fn overlay_in_user_namespace(scratch: &Path, way: Way) -> bool {
    let dirs = ["lower", "upper", "work", "merged"].map(|d| scratch.join(d));
    if dirs.iter().any(|d| std::fs::create_dir_all(d).is_err()) {
        return false;
    }
    let rootful = way.is_rootful();
    let (uid, gid) = (nix::unistd::geteuid(), nix::unistd::getegid());
    try_in_child(0, || {
        if !rootful {
            // As an unprivileged run does: our own user namespace, mapping only ourselves.
            let mapped = unshare(CloneFlags::CLONE_NEWUSER).is_ok()
                && std::fs::write("/proc/self/setgroups", "deny").is_ok()
                && std::fs::write("/proc/self/uid_map", format!("{uid} {uid} 1")).is_ok()
                && std::fs::write("/proc/self/gid_map", format!("{gid} {gid} 1")).is_ok();
            if !mapped {
                return false;
            }
        }
        // Private before anything is mounted: where / is shared (systemd makes it so), a mount
        // in a new namespace of root's would also appear in the host's, and outlive this child.
        let private = unshare(CloneFlags::CLONE_NEWNS).is_ok()
            && mount(
                None::<&str>,
                "/",
                None::<&str>,
                MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                None::<&str>,
            )
            .is_ok();
        if !private {
            return false;
        }
        let options = format!(
            "lowerdir={},upperdir={},workdir={}{}",
            dirs[0].display(),
            dirs[1].display(),
            dirs[2].display(),
            if rootful { "" } else { ",userxattr" }
        );
        mount(
            Some("overlay"),
            &dirs[3],
            Some("overlay"),
            MsFlags::empty(),
            Some(options.as_str()),
        )
        .is_ok()
            && std::fs::write(dirs[3].join("probe"), b"x").is_ok()
    })
}

/// Probe every layer as `way` builds sandboxes. `scratch` is an empty directory on the
/// filesystem that holds sessions.
pub fn probe_layers(scratch: &Path, way: Way) -> Vec<LayerReport> {
    let rootful = way.is_rootful();
    let mut layers = vec![user_namespace()];
    layers.extend(namespaces(rootful));
    layers.extend([
        private_proc(rootful, scratch),
        overlayfs(scratch, way),
        landlock(),
        seccomp(),
        network_gate(),
        memory_layer(way),
        cgroups(),
    ]);
    layers
}

fn user_namespace() -> LayerReport {
    // On Ubuntu 23.10+ an unconfined process still gets its user namespace, but no
    // capabilities in it: AppArmor's verdict decides, not the clone. Root is asked too: the
    // rootful way makes user namespaces as well (the sandbox user's), and a container's
    // seccomp profile may refuse them to root as to anyone.
    let apparmor = apparmor::detect_here();
    let userns = !apparmor.blocks() && try_in_child(libc::CLONE_NEWUSER, || true);
    let detail = if userns {
        "the command runs as an unprivileged uid with no capabilities on the host".into()
    } else if apparmor.blocks() {
        String::new()
    } else if under_outside_seccomp() {
        format!("cannot create a user namespace: refused under {OUTSIDE_SECCOMP}")
    } else {
        "cannot create a user namespace (sysctl user.max_user_namespaces=0, or an LSM restricts it)"
            .into()
    };
    let detail = match apparmor.summary() {
        Some(summary) if detail.is_empty() => summary,
        Some(summary) => format!("{detail}; {summary}"),
        None => detail,
    };
    LayerReport {
        name: "user namespace",
        available: userns,
        detail,
        degradable_as: None,
        optional: false,
        fix: apparmor.fix(),
    }
}

/// The other namespaces of a run, each made in a child (in a user namespace when unprivileged).
fn namespaces(rootful: bool) -> Vec<LayerReport> {
    let ns_flags = [
        (
            "mount namespace",
            libc::CLONE_NEWNS,
            "private filesystem view: host files not bound in do not exist",
        ),
        (
            "pid namespace",
            libc::CLONE_NEWPID,
            "host processes are invisible; everything dies with the run",
        ),
        (
            "network namespace",
            libc::CLONE_NEWNET,
            "no network but a private loopback",
        ),
        (
            "ipc namespace",
            libc::CLONE_NEWIPC,
            "no shared memory or message queues with the host",
        ),
        ("uts namespace", libc::CLONE_NEWUTS, "own hostname"),
    ];
    let mut layers = Vec::new();
    let user = if rootful { 0 } else { libc::CLONE_NEWUSER };
    for (name, flag, meaning) in ns_flags {
        let ok = try_in_child(user | flag, || true);
        let detail = match (ok, flag) {
            (true, libc::CLONE_NEWUTS) => uts_meaning(user),
            (true, _) => meaning.into(),
            (false, _) if under_outside_seccomp() => format!("refused under {OUTSIDE_SECCOMP}"),
            (false, _) => "cannot be created by this user".into(),
        };
        layers.push(LayerReport {
            name,
            available: ok,
            detail,
            degradable_as: None,
            optional: false,
            fix: None,
        });
    }
    layers
}

/// What airlock's own seccomp filter is not: one this process was started under, by a container
/// engine or a service manager.
const OUTSIDE_SECCOMP: &str = "a seccomp filter from outside airlock (this process already runs \
     under one: a container's profile refuses unshare without CAP_SYS_ADMIN)";

/// Does this process already run under a seccomp filter? airlock's own is only ever installed
/// in the sandbox, so one here was put there by whatever started airlock.
fn under_outside_seccomp() -> bool {
    std::fs::read_to_string("/proc/self/status").is_ok_and(|status| {
        status
            .lines()
            .any(|l| l.split_whitespace().eq(["Seccomp:", "2"]))
    })
}

/// A UTS namespace of the sandbox's own: its hostname, when the filter around airlock lets it
/// set one (a run keeps the host's name otherwise, see `inside::set_hostname`).
fn uts_meaning(user: libc::c_int) -> String {
    let named = try_in_child(user | libc::CLONE_NEWUTS, || {
        nix::unistd::sethostname("airlock").is_ok()
    });
    if named {
        "own hostname".into()
    } else {
        "own namespace, but sethostname is refused under a seccomp filter from outside airlock \
         (a container's): the sandbox keeps this machine's hostname"
            .into()
    }
}

/// A private /proc, as a run mounts one: in new pid and mount namespaces (and a user
/// namespace, unprivileged). The kernel allows a new procfs only where no part of the /proc
/// already mounted is hidden or read-only (a container masks /proc/kcore and others, and makes
/// /proc/sys read-only).
fn private_proc(rootful: bool, scratch: &Path) -> LayerReport {
    let user = if rootful { 0 } else { libc::CLONE_NEWUSER };
    let target = scratch.join("proc");
    let mounted = std::fs::create_dir_all(&target).is_ok()
        && try_in_child(user | libc::CLONE_NEWNS | libc::CLONE_NEWPID, || {
            let private = mount(
                None::<&str>,
                "/",
                None::<&str>,
                MsFlags::MS_REC | MsFlags::MS_PRIVATE,
                None::<&str>,
            );
            private.is_ok()
                && mount(
                    Some("proc"),
                    &target,
                    Some("proc"),
                    MsFlags::MS_NOSUID | MsFlags::MS_NODEV | MsFlags::MS_NOEXEC,
                    None::<&str>,
                )
                .is_ok()
        });
    LayerReport {
        name: "private /proc",
        available: mounted,
        detail: if mounted {
            "the sandbox's own /proc: its processes only".into()
        } else {
            "cannot mount a new /proc: part of this one is masked or read-only (as a container \
             does), and the kernel then allows no new one"
                .into()
        },
        degradable_as: None,
        optional: false,
        fix: None,
    }
}

fn overlayfs(scratch: &Path, way: Way) -> LayerReport {
    let overlay = overlay_in_user_namespace(scratch, way);
    LayerReport {
        name: "overlayfs",
        available: overlay,
        detail: if overlay {
            "workspace is copy-on-write: the host workspace is never written by a run".into()
        } else if on_overlayfs(scratch) {
            format!(
                "cannot mount a writable overlay: the state directory ({}) is itself on overlayfs \
                 (a container's root filesystem), which overlayfs cannot take as its upper layer; \
                 give it a volume or a tmpfs",
                scratch.parent().unwrap_or(scratch).display()
            )
        } else {
            "cannot mount a writable overlay here (kernel < 5.11 for user namespaces, or a state dir on a filesystem without user xattrs)".into()
        },
        degradable_as: None,
        optional: false,
        fix: None,
    }
}

fn on_overlayfs(path: &Path) -> bool {
    nix::sys::statfs::statfs(path)
        .is_ok_and(|fs| fs.filesystem_type() == nix::sys::statfs::OVERLAYFS_SUPER_MAGIC)
}

fn landlock() -> LayerReport {
    let abi = landlock_abi();
    LayerReport {
        name: "landlock",
        available: abi > 0,
        detail: match abi {
            0 => "not available: the second filesystem wall is missing".into(),
            1..=3 => format!("ABI {abi}: filesystem rules; no TCP rules or IPC scoping (the network namespace still isolates)"),
            4 | 5 => format!("ABI {abi}: filesystem and TCP rules; no abstract-socket or signal scoping"),
            _ => format!("ABI {abi}: filesystem, TCP, abstract unix socket and signal scoping"),
        },
        degradable_as: Some("landlock"),
        optional: false,
        fix: None,
    }
}

fn seccomp() -> LayerReport {
    let seccomp = std::fs::read_to_string("/proc/self/status")
        .map(|s| {
            s.lines()
                .any(|l| l.starts_with("Seccomp_filters:") || l.starts_with("Seccomp:"))
        })
        .unwrap_or(false);
    LayerReport {
        name: "seccomp",
        available: seccomp,
        detail: if seccomp {
            "filter compiled at build time: mount, namespaces, ptrace, bpf, io_uring, keyctl, TIOCSTI… refused".into()
        } else {
            "kernel without seccomp filters".into()
        },
        degradable_as: None,
        optional: false,
        fix: None,
    }
}

fn network_gate() -> LayerReport {
    // The network gate answers connects through seccomp user notifications (Linux 5.0): it
    // copies the connecting socket with pidfd_getfd (5.6), checks with
    // SECCOMP_IOCTL_NOTIF_ID_VALID that the thread still waits before it reads or rewrites its
    // memory (the ioctl's corrected number, which libc defines, is accepted from 5.9 and by
    // stable kernels it was backported to), and lets the connect run with
    // SECCOMP_USER_NOTIF_FLAG_CONTINUE (5.5); no socket is put into the sandbox (see `gate`).
    // Asking the notification sizes tells only whether the kernel has notifications at all: a
    // 5.0 to 5.8 kernel without those backports passes, though its gate cannot let a connect
    // out (which fails closed: the sandbox's own namespace reaches nothing).
    let gate = crate::sys::seccomp_notify_supported();
    LayerReport {
        name: "network gate",
        available: gate,
        detail: if gate {
            "seccomp user notification: profiles with network rules run through airlock's gate"
                .into()
        } else {
            "no seccomp user notifications (the gate needs Linux 5.9+): profiles with network rules cannot run; network = \"none\" still can".into()
        },
        degradable_as: None,
        optional: true,
        fix: None,
    }
}

fn memory_layer(way: Way) -> LayerReport {
    let memory_layer = crate::launch::memory_layer_supported(way);
    LayerReport {
        name: "memory layer",
        available: memory_layer,
        detail: if memory_layer {
            "a throwaway run keeps its changes in a tmpfs inside the sandbox: no disk is touched"
                .into()
        } else {
            "unprivileged overlayfs needs user xattrs on tmpfs (Linux 6.6): throwaway runs use a disk layer, deleted after the run".into()
        },
        degradable_as: None,
        optional: true,
        fix: None,
    }
}

fn cgroups() -> LayerReport {
    let cgroups = cgroup::detect();
    let (available, detail) =
        match &cgroups {
            CgroupSupport::V2 { parent, .. } => (
                true,
                format!(
                    "cgroup v2 under {}: memory and process limits per run, its CPU time counted \
                 by the kernel",
                    parent.display()
                ),
            ),
            CgroupSupport::V2Systemd { manager, cpu } => {
                (
                    true,
                    format!(
                "cgroup v2 through systemd: each run is a scope of this user's manager ({}, \
                 delegated memory pids{}), its memory{} limits set by systemd and checked before \
                 the command starts, its CPU time counted by the kernel",
                manager.cgroup.display(),
                if *cpu { " cpu" } else { "" },
                if *cpu { ", process and CPU" } else { " and process" },
            ),
                )
            }
            CgroupSupport::V1 {
                memory, cpuacct, ..
            } => (
                true,
                format!(
                    "cgroup v1 under {}: memory and process limits per run{}",
                    memory.display(),
                    if cpuacct.is_some() {
                        ", its CPU time counted by the kernel (cpuacct)"
                    } else {
                        "; no cpuacct hierarchy: the CPU limit over all its processes counts what \
                     pid 1 sees"
                    }
                ),
            ),
            CgroupSupport::Unavailable { why } => (
                false,
                format!(
                "{why}; limits fall back to rlimits (RLIMIT_AS, RLIMIT_NPROC per user namespace), \
                 and the CPU limit over all the run's processes counts what its pid 1 sees"
            ),
            ),
        };
    LayerReport {
        name: "cgroups",
        available,
        detail,
        degradable_as: None,
        optional: true,
        fix: None,
    }
}
