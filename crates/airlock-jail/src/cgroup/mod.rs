//! Per-run cgroups for memory and process limits, on cgroup v2 (first) or v1, where this process
//! may create them. rlimits are always set as well, so a host without a writable cgroup still has
//! limits; `airlock check` says which applies.

use std::fs;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};

use nix::unistd::Pid;

use crate::error::{PathContext, Result};
use crate::spec::ResourceLimits;

mod delegated;
mod systemd;
pub use delegated::settle_server;
pub use systemd::UserManager;

const ROOT: &str = "/sys/fs/cgroup";

/// Which cgroup hierarchy airlock would use here, if any.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum CgroupSupport {
    /// Unified hierarchy with memory and pids delegated to a directory we can write.
    V2 {
        parent: PathBuf,
        /// The cpu controller is there too (for `cpu.max`).
        cpu: bool,
    },
    /// Unified hierarchy where this (unprivileged) user may not make cgroups itself, and their
    /// systemd user manager, which has memory and pids delegated, makes each run a scope (see
    /// `systemd.rs`).
    V2Systemd {
        manager: UserManager,
        /// The cpu controller is delegated too (for `CPUQuota`).
        cpu: bool,
    },
    /// Legacy memory and pids hierarchies (root only), and the freezer's and cpuacct's when
    /// they are mounted.
    V1 {
        memory: PathBuf,
        pids: PathBuf,
        freezer: Option<PathBuf>,
        cpuacct: Option<PathBuf>,
        /// The cpu controller's hierarchy (for `cpu.cfs_quota_us`), when mounted and writable.
        cpu: Option<PathBuf>,
    },
    Unavailable {
        why: String,
    },
}

fn writable_dir(path: &Path) -> bool {
    nix::unistd::access(path, nix::unistd::AccessFlags::W_OK).is_ok()
}

/// Find a hierarchy where a per-run cgroup with memory and pids limits can be made.
pub fn detect() -> CgroupSupport {
    let root = Path::new(ROOT);
    // cgroup v2 at the root (not v1, nor hybrid with v2 beside it): only there can a server's
    // cgroup be delegated by systemd, or an ordinary user's come from their manager. PERF: one
    // stat on v1, rather than reading /proc/self/cgroup at every run.
    let unified = root.join("cgroup.controllers").exists();
    if let Some((parent, cpu)) = unified.then(delegated::server_parent).flatten() {
        return CgroupSupport::V2 { parent, cpu };
    }
    let v2_controllers =
        fs::read_to_string(root.join("cgroup.subtree_control")).unwrap_or_default();
    if v2_controllers.split_whitespace().any(|c| c == "memory")
        && v2_controllers.split_whitespace().any(|c| c == "pids")
        && writable_dir(root)
    {
        return CgroupSupport::V2 {
            parent: root.join("airlock"),
            cpu: v2_controllers.split_whitespace().any(|c| c == "cpu"),
        };
    }
    let memory = root.join("memory");
    let pids = root.join("pids");
    // The root of a v1 hierarchy has no limit files of its own; its cgroup.procs shows it is mounted.
    if memory.join("memory.usage_in_bytes").exists()
        && pids.join("cgroup.procs").exists()
        && writable_dir(&memory)
        && writable_dir(&pids)
    {
        let freezer = root.join("freezer");
        let freezer = (freezer.join("cgroup.procs").exists() && writable_dir(&freezer))
            .then(|| freezer.join("airlock"));
        // Often mounted together with cpu, as "cpu,cpuacct", with a "cpuacct" link to it.
        let cpuacct = root.join("cpuacct");
        let cpuacct = (cpuacct.join("cpuacct.usage").exists() && writable_dir(&cpuacct))
            .then(|| cpuacct.join("airlock"));
        let cpu = root.join("cpu");
        let cpu = (cpu.join("cpu.cfs_quota_us").exists() && writable_dir(&cpu))
            .then(|| cpu.join("airlock"));
        return CgroupSupport::V1 {
            memory: memory.join("airlock"),
            pids: pids.join("airlock"),
            freezer,
            cpuacct,
            cpu,
        };
    }
    if unified {
        let euid = nix::unistd::geteuid();
        if euid.is_root() {
            return CgroupSupport::Unavailable {
                why: "cgroup v2, and its root /sys/fs/cgroup is not writable here or does not \
                      hand memory and pids down (a container's, mounted read-only? see \
                      docs/containers.md)"
                    .into(),
            };
        }
        return through_systemd(euid.as_raw());
    }
    CgroupSupport::Unavailable {
        why: if !memory.exists() {
            "no cgroup hierarchy with memory and pids controllers is mounted".into()
        } else {
            "cgroup v1, whose memory and pids hierarchies only root may write (systemd delegates \
             cgroups to users on v2 only)"
                .into()
        },
    }
}

/// On cgroup v2, where this user may not write the root: their systemd user manager's scopes,
/// when it has memory and pids delegated.
fn through_systemd(uid: u32) -> CgroupSupport {
    let manager = match systemd::find_user_manager(uid) {
        Ok(manager) => manager,
        Err(why) => return CgroupSupport::Unavailable { why },
    };
    let delegated = systemd::delegated_controllers(&manager);
    let has = |name: &str| delegated.iter().any(|c| c == name);
    if !(has("memory") && has("pids")) {
        return CgroupSupport::Unavailable {
            why: format!(
                "cgroup v2, and systemd delegated only [{}] to this user's manager ({}): \
                 memory and pids are needed — add a drop-in to user@.service with \
                 `Delegate=memory pids cpu` (see docs/limits.md)",
                delegated.join(" "),
                manager.cgroup.display()
            ),
        };
    }
    CgroupSupport::V2Systemd {
        cpu: has("cpu"),
        manager,
    }
}

impl CgroupSupport {
    /// Can a run's CPU bandwidth be limited here?
    pub fn has_cpu(&self) -> bool {
        match self {
            CgroupSupport::V2 { cpu, .. } | CgroupSupport::V2Systemd { cpu, .. } => *cpu,
            CgroupSupport::V1 { cpu, .. } => cpu.is_some(),
            CgroupSupport::Unavailable { .. } => false,
        }
    }
}

/// The scheduler's period for the quota: the kernel's default, short enough that a sandbox at
/// its quota stalls for at most a tenth of a second, long enough to cost nothing.
pub(crate) const CPU_PERIOD_US: u64 = 100_000;

/// The quota per period for `millicpus` thousandths of a CPU (at least the kernel's 1 ms).
fn cpu_quota_us(millicpus: u64) -> u64 {
    (millicpus.saturating_mul(CPU_PERIOD_US) / 1000).max(1000)
}

fn open_to_read(path: &Path) -> Result<OwnedFd> {
    fs::File::open(path)
        .map(OwnedFd::from)
        .on_path("open cgroup file", path, DELEGATION_HINT)
}

/// CPU time used so far by everything in a cgroup, from its `cpuacct.usage` (v1, nanoseconds)
/// or `cpu.stat` (v2, `usage_usec`), read again from the start. None when it cannot be read.
pub(crate) fn cpu_time_used(file: &OwnedFd) -> Option<std::time::Duration> {
    let mut buf = [0u8; 512];
    let n = nix::sys::uio::pread(file, &mut buf, 0).ok()?;
    let text = std::str::from_utf8(&buf[..n]).ok()?;
    parse_cpu_time(text)
}

fn parse_cpu_time(text: &str) -> Option<std::time::Duration> {
    if let Ok(nanoseconds) = text.trim().parse::<u64>() {
        return Some(std::time::Duration::from_nanos(nanoseconds));
    }
    text.lines()
        .find_map(|line| line.strip_prefix("usage_usec "))
        .and_then(|value| value.trim().parse::<u64>().ok())
        .map(std::time::Duration::from_micros)
}

/// Remove, now, the cgroups of runs whose supervisor is gone (every run does this before it makes
/// its own; a server that was killed does it when it starts again).
pub fn remove_orphaned_runs(support: &CgroupSupport) {
    match support {
        // systemd removes a scope when its last process ends.
        CgroupSupport::Unavailable { .. } | CgroupSupport::V2Systemd { .. } => {}
        CgroupSupport::V2 { parent, .. } => remove_orphans(parent),
        CgroupSupport::V1 {
            memory,
            pids,
            freezer,
            cpuacct,
            cpu,
        } => {
            for parent in [
                Some(memory),
                Some(pids),
                freezer.as_ref(),
                cpuacct.as_ref(),
                cpu.as_ref(),
            ]
            .into_iter()
            .flatten()
            {
                remove_orphans(parent);
            }
        }
    }
}

/// Cgroups of runs whose supervisor is gone (killed with SIGKILL, it could not remove them; its
/// sandbox died with it, so they are empty). Named `run-<supervisor pid>`. A cgroup with a
/// process in it cannot be removed; one made a moment ago is not yet joined by its sandbox and
/// is left alone: its supervisor may be alive in another pid namespace, where this /proc does
/// not show it (an airlock in a container, say), and removing it would fail that run.
fn remove_orphans(parent: &Path) {
    const JOINED_WITHIN: std::time::Duration = std::time::Duration::from_secs(30);
    let Ok(entries) = fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(pid) = name.to_str().and_then(|n| n.strip_prefix("run-")) else {
            continue;
        };
        let settled = || {
            entry
                .metadata()
                .and_then(|meta| meta.modified())
                .is_ok_and(|made| made.elapsed().is_ok_and(|age| age > JOINED_WITHIN))
        };
        if pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists() && settled() {
            let _ = fs::remove_dir(entry.path());
        }
    }
}

/// A cgroup made for one run; removed by [`RunCgroup::remove`].
#[derive(Debug)]
pub struct RunCgroup {
    dirs: Vec<PathBuf>,
    join: Join,
    freezer: Option<crate::control::Freezer>,
    /// The CPU time of everything in the run's cgroup, ended processes included: v1's
    /// `cpuacct.usage` or v2's `cpu.stat`, open for pid 1 (see [`cpu_time_used`]).
    cpu_usage: Option<OwnedFd>,
}

/// What the run's memory cgroup saw.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct MemoryStats {
    pub peak_bytes: Option<u64>,
    pub oom_kills: u64,
}

/// How the sandbox's first process gets into the run's cgroup.
#[derive(Debug)]
pub enum Join {
    /// v1: the process moves itself by writing `0` to each of the `join` files (the run's
    /// `tasks` files), opened by the supervisor (the kernel checks the opener's credentials).
    /// Moving oneself as a single thread skips the global lock that moving a process by pid
    /// takes; taking that lock waits for an RCU grace period, which costs 5 to 15 ms a run when
    /// runs are seconds apart.
    ///
    /// Once it has started the command, pid 1 moves itself out again the same way, through the
    /// `leave` files (its parents' `tasks` files): the command and all it starts stay in, pid 1
    /// (which only waits and reaps) does not. The run's cgroups are then empty as soon as the
    /// command's last process has ended, and the supervisor removes them while the kernel is
    /// still tearing pid 1's namespaces down, rather than after.
    ItselfThrough {
        join: Vec<OwnedFd>,
        leave: Vec<OwnedFd>,
    },
    /// v2 (a domain cgroup has no per-thread moves): the supervisor writes the pid.
    BySupervisor,
    /// v2 through systemd: the process is in already, moved by systemd as it made the scope.
    Joined,
}

const DELEGATION_HINT: &str = "is the cgroup hierarchy delegated to this user? run 'airlock check'";

fn write(path: &Path, value: &str) -> Result<()> {
    fs::write(path, value).on_path("write cgroup file", path, DELEGATION_HINT)
}

fn make_dir(path: &Path) -> Result<()> {
    fs::create_dir_all(path).on_path("create cgroup", path, DELEGATION_HINT)
}

/// Each of `paths` (v1 `tasks` files) open for writing, for the setup process to join through.
fn open_to_write(paths: &[PathBuf]) -> Result<Vec<OwnedFd>> {
    paths
        .iter()
        .map(|path| {
            fs::OpenOptions::new()
                .write(true)
                .open(path)
                .map(OwnedFd::from)
                .on_path("open cgroup file", path, DELEGATION_HINT)
        })
        .collect()
}

impl RunCgroup {
    /// The run's cgroup for the sandbox whose first process is `sandbox` (which systemd moves
    /// into its scope; the others are joined through [`RunCgroup::join`]).
    pub fn create(
        support: &CgroupSupport,
        limits: &ResourceLimits,
        sandbox: Pid,
    ) -> Result<Option<RunCgroup>> {
        // Named after the supervisor, so that a later run can tell when it is gone.
        let run_id = format!("run-{}", std::process::id());
        let run_id = run_id.as_str();
        match support {
            CgroupSupport::Unavailable { .. } => Ok(None),
            CgroupSupport::V2Systemd { manager, cpu } => {
                let scope = systemd::request_scope(manager, sandbox, limits, *cpu)?;
                RunCgroup::v2(scope, Join::Joined).map(Some)
            }
            CgroupSupport::V2 { parent, cpu } => {
                RunCgroup::in_own_v2(parent, *cpu, limits, run_id).map(Some)
            }
            CgroupSupport::V1 {
                memory,
                pids,
                freezer,
                cpuacct,
                cpu,
            } => {
                let mut group = RunCgroup {
                    dirs: Vec::new(),
                    join: Join::BySupervisor,
                    freezer: None,
                    cpu_usage: None,
                };
                // The run's cgroup in one hierarchy, in `dirs` as soon as it exists (so that a
                // failure further on removes it), with its `tasks` file and its parent's.
                let (mut tasks, mut parent_tasks) = (Vec::new(), Vec::new());
                let mut add = |parent: &PathBuf| -> Result<PathBuf> {
                    remove_orphans(parent);
                    let dir = parent.join(run_id);
                    make_dir(&dir)?;
                    group.dirs.push(dir.clone());
                    tasks.push(dir.join("tasks"));
                    parent_tasks.push(parent.join("tasks"));
                    Ok(dir)
                };
                let mem_dir = add(memory)?;
                let pids_dir = add(pids)?;
                // For `airlock pause`; without it, pause stops every process with SIGSTOP.
                let freezer_dir = freezer.as_ref().map(&mut add).transpose()?;
                // For the CPU time limit over all the run's processes (see `init`).
                let cpuacct_dir = cpuacct.as_ref().map(&mut add).transpose()?;
                // For `cpus`, the CPU bandwidth (without it, prepare refused or nice 19 applies).
                let cpu_dir = cpu.as_ref().map(&mut add).transpose()?;
                group.freezer = freezer_dir.map(crate::control::Freezer::V1);
                group.cpu_usage = cpuacct_dir
                    .map(|dir| open_to_read(&dir.join("cpuacct.usage")))
                    .transpose()?;
                write(
                    &mem_dir.join("memory.limit_in_bytes"),
                    &limits.memory_bytes.to_string(),
                )?;
                // Without swap accounting this file is absent; the memory limit still holds.
                let _ = write(
                    &mem_dir.join("memory.memsw.limit_in_bytes"),
                    &limits.memory_bytes.to_string(),
                );
                write(&pids_dir.join("pids.max"), &limits.processes.to_string())?;
                if let Some(cpu_dir) = &cpu_dir {
                    write(
                        &cpu_dir.join("cpu.cfs_period_us"),
                        &CPU_PERIOD_US.to_string(),
                    )?;
                    write(
                        &cpu_dir.join("cpu.cfs_quota_us"),
                        &cpu_quota_us(limits.cpus.millicpus).to_string(),
                    )?;
                }
                group.join = Join::ItselfThrough {
                    join: open_to_write(&tasks)?,
                    leave: open_to_write(&parent_tasks)?,
                };
                Ok(Some(group))
            }
        }
    }

    /// A v2 cgroup at `dir`, that the sandbox's first process joins as `join` says.
    /// The group holds `dir` before anything can fail, so that its drop removes it.
    fn v2(dir: PathBuf, join: Join) -> Result<RunCgroup> {
        let mut group = RunCgroup {
            dirs: vec![dir.clone()],
            join,
            freezer: Some(crate::control::Freezer::V2(dir.clone())),
            cpu_usage: None,
        };
        // Every v2 cgroup has it, with or without the cpu controller.
        group.cpu_usage = Some(open_to_read(&dir.join("cpu.stat"))?);
        Ok(group)
    }

    /// The run's cgroup `run_id` made under `parent` (airlock's own subtree, or a server's
    /// delegated unit), with the limits written by airlock itself.
    fn in_own_v2(
        parent: &Path,
        cpu: bool,
        limits: &ResourceLimits,
        run_id: &str,
    ) -> Result<RunCgroup> {
        make_dir(parent)?;
        remove_orphans(parent);
        // Children of `parent` get memory and pids only if `parent` hands them down.
        let controllers = if cpu {
            "+memory +pids +cpu"
        } else {
            "+memory +pids"
        };
        write(&parent.join("cgroup.subtree_control"), controllers)?;
        let dir = parent.join(run_id);
        make_dir(&dir)?;
        // Pid 1 stays: under a parent that hands controllers down, v2 allows no process (the
        // "no internal processes" rule), so it has nowhere to go.
        let group = RunCgroup::v2(dir.clone(), Join::BySupervisor)?;
        write(&dir.join("memory.max"), &limits.memory_bytes.to_string())?;
        write(&dir.join("memory.swap.max"), "0").ok();
        write(&dir.join("pids.max"), &limits.processes.to_string())?;
        if cpu {
            let quota = cpu_quota_us(limits.cpus.millicpus);
            write(&dir.join("cpu.max"), &format!("{quota} {CPU_PERIOD_US}"))?;
        }
        Ok(group)
    }

    /// Peak memory and OOM kills so far (read before the cgroup is removed).
    pub fn memory_stats(&self) -> MemoryStats {
        let read = |path: PathBuf| fs::read_to_string(path).unwrap_or_default();
        let field = |text: &str, key: &str| {
            text.lines()
                .find_map(|l| l.strip_prefix(key)?.trim().parse::<u64>().ok())
        };
        let Some(dir) = self.dirs.first() else {
            return MemoryStats::default();
        };
        if dir.join("memory.max_usage_in_bytes").exists() {
            MemoryStats {
                peak_bytes: read(dir.join("memory.max_usage_in_bytes"))
                    .trim()
                    .parse()
                    .ok(),
                oom_kills: field(&read(dir.join("memory.oom_control")), "oom_kill ").unwrap_or(0),
            }
        } else {
            MemoryStats {
                peak_bytes: read(dir.join("memory.peak")).trim().parse().ok(),
                oom_kills: field(&read(dir.join("memory.events")), "oom_kill ").unwrap_or(0),
            }
        }
    }

    /// The run's freezer, when there is one.
    pub fn freezer(&self) -> Option<&crate::control::Freezer> {
        self.freezer.as_ref()
    }

    /// How the sandbox's first process joins; see [`Join`].
    pub fn join(&self) -> &Join {
        &self.join
    }

    /// The file pid 1 reads the run's CPU time from, when the hierarchy counts it.
    pub fn cpu_usage(&self) -> Option<&OwnedFd> {
        self.cpu_usage.as_ref()
    }

    /// The setup process holds its own copies of the `tasks` files once they were sent; the
    /// supervisor needs them no more.
    pub fn close_tasks_files(&mut self) {
        if let Join::ItselfThrough { join, leave } = &mut self.join {
            join.clear();
            leave.clear();
        }
    }

    /// Move `pid` (with all its threads) into the run's cgroup.
    pub fn add(&self, pid: Pid) -> Result<()> {
        for dir in &self.dirs {
            write(&dir.join("cgroup.procs"), &pid.to_string())?;
        }
        Ok(())
    }

    /// Once the command has ended: remove the run's cgroups that are empty already, without
    /// waiting; [`RunCgroup::remove`] waits for the rest. Only where pid 1 left them (see
    /// [`Join`]); elsewhere pid 1 is in them until its namespaces are torn down.
    pub fn remove_empty(&mut self) {
        if !matches!(self.join, Join::ItselfThrough { .. }) {
            return;
        }
        // A daemon the command left behind is still in them (until pid 1's exit kills it).
        self.dirs.retain(|dir| fs::remove_dir(dir).is_err());
        if let Some(crate::control::Freezer::V1(dir)) = &self.freezer {
            if !self.dirs.contains(dir) {
                self.freezer = None;
            }
        }
    }

    /// Remove the run's cgroups. The kernel refuses while a process is still in one; every process
    /// of the sandbox is dead once its pid 1 is reaped, but their exit may lag by a moment.
    pub fn remove(mut self) {
        if matches!(self.join, Join::Joined) {
            // systemd's scope: systemd removes it once empty (see `systemd.rs`).
            self.dirs.clear();
        }
        // Taken, so that the drop that follows has nothing left to try.
        for dir in &std::mem::take(&mut self.dirs) {
            for _ in 0..100 {
                if fs::remove_dir(dir).is_ok() || !dir.exists() {
                    break;
                }
                std::thread::sleep(std::time::Duration::from_millis(2));
            }
        }
    }
}

impl Drop for RunCgroup {
    fn drop(&mut self) {
        if matches!(self.join, Join::Joined) {
            return;
        }
        for dir in &self.dirs {
            let _ = fs::remove_dir(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cpu_time_is_read_from_either_hierarchy() {
        let v1 = "1500000000\n";
        assert_eq!(
            parse_cpu_time(v1),
            Some(std::time::Duration::from_millis(1500))
        );
        let v2 = "usage_usec 2500000\nuser_usec 2000000\nsystem_usec 500000\n";
        assert_eq!(
            parse_cpu_time(v2),
            Some(std::time::Duration::from_millis(2500))
        );
        assert_eq!(parse_cpu_time("nr_periods 0\n"), None);
    }

    #[test]
    fn cpu_quota_is_a_share_of_the_period() {
        assert_eq!(cpu_quota_us(1500), 150_000);
        assert_eq!(cpu_quota_us(250), 25_000);
        // The kernel refuses a quota under 1 ms.
        assert_eq!(cpu_quota_us(1), 1000);
    }
}
