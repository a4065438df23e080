//! `airlock check`'s list of limits: for each, how this host enforces it, in the words `run`
//! acts on (see `limits`).

use std::path::Path;

use airlock_jail::cgroup::{self, CgroupSupport};
use serde::Serialize;

use super::limits::{default_millicpus, free_inode_margin, free_margin};

/// One limit and how it is enforced here.
#[derive(Debug, Clone, Serialize)]
pub struct LimitCheck {
    pub name: &'static str,
    /// `kernel`: the kernel holds the sandbox to it; `supervisor`: airlock's watch (and an
    /// rlimit) does; `refused`: a profile that names it is refused unless `--allow-degraded`.
    pub enforced_by: &'static str,
    pub how: String,
    /// The flag that accepts less, where a profile's explicit value is refused.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub degradable_as: Option<&'static str>,
}

/// Every limit of `[limits]` that depends on this host, for a state directory at `state_dir`
/// and sandboxes built `way`.
pub fn check_limits(state_dir: &Path, way: airlock_jail::Way) -> Vec<LimitCheck> {
    let support = cgroup::detect();
    let online = std::thread::available_parallelism().map_or(1, |n| n.get() as u64);
    let memory_layer = airlock_jail::memory_layer_supported(way);
    let mut checks = vec![cpus(&support, online)];
    checks.extend(layer_limits(
        memory_layer,
        airlock_jail::image::images_supported(way),
    ));
    checks.push(margin(state_dir));
    checks.push(memory_and_processes(&support));
    checks
}

fn cpus(support: &CgroupSupport, online: u64) -> LimitCheck {
    let default = default_millicpus(online) as f64 / 1000.0;
    let one_cpu = if online <= 1 {
        "; on this host of one CPU no quota leaves a CPU free, so the sandbox also runs at nice 19"
    } else {
        ""
    };
    let (enforced_by, how, degradable_as) = match support {
        CgroupSupport::V2 { cpu: true, parent } => (
            "kernel",
            format!("the run's cgroup under {}: cpu.max; default {default} of {online} CPUs (all but one){one_cpu}", parent.display()),
            None,
        ),
        CgroupSupport::V2Systemd { cpu: true, manager } => (
            "kernel",
            format!("the run's systemd scope under {}: CPUQuota (cpu.max); default {default} of {online} CPUs (all but one){one_cpu}", manager.cgroup.display()),
            None,
        ),
        CgroupSupport::V1 { cpu: Some(dir), .. } => (
            "kernel",
            format!("the run's cgroup under {}: cpu.cfs_quota_us per 100 ms; default {default} of {online} CPUs (all but one){one_cpu}", dir.display()),
            None,
        ),
        _ => (
            "refused",
            "no cgroup with the cpu controller is writable by this user: a profile's cpus is \
             refused (--allow-degraded=cpus runs it at nice 19); by default the sandbox runs at \
             nice 19, which lets the host's work go first but takes every idle CPU"
                .to_string(),
            Some("cpus"),
        ),
    };
    LimitCheck {
        name: "cpus",
        enforced_by,
        how,
        degradable_as,
    }
}

fn layer_limits(memory_layer: bool, images: bool) -> [LimitCheck; 3] {
    let throwaway = if memory_layer {
        LimitCheck {
            name: "disk, files (throwaway run)",
            enforced_by: "kernel",
            how: "the run's layer is a tmpfs: size= is disk (default tmp_size), nr_inodes= is \
                  files (default: the kernel's)"
                .into(),
            degradable_as: None,
        }
    } else {
        LimitCheck {
            name: "disk, files (throwaway run)",
            enforced_by: "refused",
            how: "this kernel has no unprivileged overlayfs over tmpfs (Linux 6.6): a throwaway \
                  run's layer is a session on disk, as below"
                .into(),
            degradable_as: Some("disk"),
        }
    };
    let session = if images {
        LimitCheck {
            name: "disk, files (session)",
            enforced_by: "kernel",
            how: "a session whose profile names disk or files gets a filesystem of its own: a \
                  sparse ext4 image of disk bytes with files inodes (rounded up), loop-mounted \
                  where its layer lives (ext4's own metadata takes a share of it)"
                .into(),
            degradable_as: None,
        }
    } else {
        LimitCheck {
            name: "disk, files (session)",
            enforced_by: "refused",
            how: "a session's layer is a directory in the state directory, and no kernel quota \
                  bounds a directory (an unprivileged user has none; as root, a filesystem \
                  image needs mkfs.ext4 and /dev/loop-control): a profile's disk or files is \
                  refused for a session; --allow-degraded=disk makes disk the free-space \
                  watch's budget (files unbounded)"
                .into(),
            degradable_as: Some("disk"),
        }
    };
    let kept = LimitCheck {
        name: "disk, files (--keep)",
        enforced_by: session.enforced_by,
        how: "as for a session".into(),
        degradable_as: session.degradable_as,
    };
    [throwaway, session, kept]
}

fn margin(state_dir: &Path) -> LimitCheck {
    let how = match nix::sys::statvfs::statvfs(state_dir) {
        Ok(stat) => {
            let size = stat.blocks() * stat.fragment_size();
            let free = stat.blocks_available() * stat.fragment_size();
            format!(
                "a run in a session is killed before the filesystem of {} falls below {} MiB \
                 free (a twentieth, 64 MiB to 1 GiB; {} MiB free now) or {} free inodes (a \
                 twentieth; {} free now): the supervisor reads its free space every 10 ms, \
                 RLIMIT_FSIZE holds each file to what is left, and fallocate may not take space",
                state_dir.display(),
                free_margin(size) >> 20,
                free >> 20,
                free_inode_margin(stat.files()),
                stat.files_available()
            )
        }
        Err(errno) => format!("cannot read the state directory's filesystem: {errno}"),
    };
    LimitCheck {
        name: "free margin",
        enforced_by: "supervisor",
        how,
        degradable_as: None,
    }
}

fn memory_and_processes(support: &CgroupSupport) -> LimitCheck {
    let (enforced_by, how) = match support {
        CgroupSupport::Unavailable { .. } => (
            "kernel",
            "rlimits only: RLIMIT_AS per process, RLIMIT_NPROC per user namespace".to_string(),
        ),
        CgroupSupport::V2Systemd { .. } => (
            "kernel",
            "the run's systemd scope (MemoryMax, TasksMax), and rlimits".to_string(),
        ),
        _ => (
            "kernel",
            "the run's cgroup (memory, pids), and rlimits".to_string(),
        ),
    };
    LimitCheck {
        name: "memory, processes",
        enforced_by,
        how,
        degradable_as: None,
    }
}
