//! A run's cgroup from systemd, where this user may not make one itself: on cgroup v2 an ordinary
//! user's cgroups belong to their systemd user manager (`user@UID.service`, which systemd
//! delegates `memory pids cpu` to by default), so the run asks that manager for a transient scope
//! of its own, `Delegate=yes`, with the sandbox's first process in it and the limits as the
//! scope's properties (MemoryMax, TasksMax, CPUQuota): systemd writes them, the kernel enforces
//! them exactly as in a cgroup airlock made itself. Read back before the command starts: a limit
//! systemd did not set refuses the run.
//!
//! The scope ends when its last process does (systemd removes it; `CollectMode` also collects one
//! that failed, an OOM kill say), so nothing is left to remove when a supervisor is killed.

use std::fs;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use nix::unistd::Pid;

use crate::dbus::{self, Arg, MethodCall, Value};
use crate::error::{JailError, Result};
use crate::spec::ResourceLimits;

use super::{CPU_PERIOD_US, ROOT};

/// Where this user's systemd manager listens, and the cgroup it was given.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct UserManager {
    /// Its private socket (`/run/user/UID/systemd/private`): peer to peer, no bus daemon needed.
    pub socket: PathBuf,
    /// Its cgroup (`…/user@UID.service`), whose `cgroup.controllers` says what was delegated.
    pub cgroup: PathBuf,
}

/// Why this user has no manager to ask, in words that say what to do.
pub(super) fn find_user_manager(uid: u32) -> std::result::Result<UserManager, String> {
    let socket = PathBuf::from(format!("/run/user/{uid}/systemd/private"));
    let cgroup = Path::new(ROOT).join(format!("user.slice/user-{uid}.slice/user@{uid}.service"));
    if !socket.exists() {
        return Err(format!(
            "cgroup v2, and no systemd user manager runs for uid {uid} ({} is absent), which \
             would give this user's runs a cgroup: `loginctl enable-linger $USER` starts one (or \
             log in through a PAM session)",
            socket.display()
        ));
    }
    if !cgroup.join("cgroup.controllers").exists() {
        return Err(format!(
            "cgroup v2, and the systemd user manager's cgroup {} is not where systemd puts it",
            cgroup.display()
        ));
    }
    Ok(UserManager { socket, cgroup })
}

/// The controllers systemd gave the user manager (`Delegate=` of user@.service).
pub(super) fn delegated_controllers(manager: &UserManager) -> Vec<String> {
    fs::read_to_string(manager.cgroup.join("cgroup.controllers"))
        .unwrap_or_default()
        .split_whitespace()
        .map(str::to_string)
        .collect()
}

/// How long systemd may take to move the sandbox's first process into its new scope.
const MOVED_WITHIN: Duration = Duration::from_secs(10);

/// Ask `manager` for a scope holding `pid`, limited by `limits` (and `cpus`, when `cpu`); its
/// cgroup directory once `pid` is in it and the limits read back as asked.
pub(super) fn request_scope(
    manager: &UserManager,
    pid: Pid,
    limits: &ResourceLimits,
    cpu: bool,
) -> Result<PathBuf> {
    // Unique among this manager's units: the supervisor's pid and the sandbox's, and the time
    // (two runs of one pid number in two pid namespaces of one user are told apart by it).
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.subsec_nanos());
    let unit = format!(
        "airlock-run-{}-{}-{nanos:x}.scope",
        std::process::id(),
        pid.as_raw()
    );
    let failed = |why: String| JailError::SystemdScope {
        unit: unit.clone(),
        why,
    };
    let mut properties = vec![
        (
            "Description".to_string(),
            Value::Str(format!("airlock run (supervisor {})", std::process::id())),
        ),
        (
            "PIDs".into(),
            Value::U32Array(vec![pid.as_raw().unsigned_abs()]),
        ),
        ("Delegate".into(), Value::Bool(true)),
        (
            "CollectMode".into(),
            Value::Str("inactive-or-failed".into()),
        ),
        ("MemoryMax".into(), Value::U64(limits.memory_bytes)),
        ("MemorySwapMax".into(), Value::U64(0)),
        ("TasksMax".into(), Value::U64(limits.processes)),
    ];
    if cpu {
        properties.push((
            "CPUQuotaPerSecUSec".into(),
            Value::U64(quota_per_second_us(limits.cpus.millicpus)),
        ));
    }
    let call = MethodCall {
        destination: "org.freedesktop.systemd1",
        path: "/org/freedesktop/systemd1",
        interface: "org.freedesktop.systemd1.Manager",
        member: "StartTransientUnit",
        args: vec![
            Arg::Str(unit.clone()),
            Arg::Str("fail".into()),
            Arg::Properties(properties),
            Arg::NoAuxiliaryUnits,
        ],
    };
    let uid = nix::unistd::geteuid().as_raw();
    let mut connection =
        dbus::Connection::open(&manager.socket, uid).map_err(|error| failed(error.to_string()))?;
    let peer = connection
        .peer()
        .map_err(|error| failed(error.to_string()))?;
    same_pid_namespace(peer, uid).map_err(failed)?;
    match connection.call(&call) {
        Ok(_) => {}
        // systemd said no: there is no scope, and no move to come.
        Err(refused @ dbus::CallError::Refused { .. }) => return Err(failed(refused.to_string())),
        // The call may still reach it, or did without an answer: no scope may take the process
        // (or one given its pid once it is reaped) afterwards.
        Err(error) => {
            stop_scope(manager, uid, &unit);
            return Err(failed(error.to_string()));
        }
    }
    let moved =
        wait_until_moved(pid, &unit).and_then(|dir| verify_limits(&dir, limits, cpu).map(|()| dir));
    if moved.is_err() {
        // The move may still be on its way (through the system manager, from a login session):
        // stopped, the scope can take no process, this one or one given its pid once it is reaped.
        stop_scope(manager, uid, &unit);
    }
    moved.map_err(failed)
}

/// Ask `manager` to stop `unit` (its job cancelled, any process in it killed); on a connection of
/// its own, the first one's time being spent.
fn stop_scope(manager: &UserManager, uid: u32, unit: &str) {
    let stop = MethodCall {
        destination: "org.freedesktop.systemd1",
        path: "/org/freedesktop/systemd1",
        interface: "org.freedesktop.systemd1.Manager",
        member: "StopUnit",
        args: vec![Arg::Str(unit.to_string()), Arg::Str("replace".into())],
    };
    if let Ok(mut connection) = dbus::Connection::open(&manager.socket, uid) {
        let _ = connection.call(&stop);
    }
}

/// `PIDs` names processes by their number in the manager's pid namespace: it must be this
/// process's, or the scope would take some other process (the manager of a host, asked from a
/// container that shares its /run/user, say). The kernel gives the peer's pid in our namespace,
/// 0 when it is not in it or below it.
fn same_pid_namespace(peer: dbus::Peer, uid: u32) -> std::result::Result<(), String> {
    if peer.uid != uid {
        return Err(format!(
            "the manager's socket is held by uid {}, not this user's {uid}",
            peer.uid
        ));
    }
    let elsewhere = "the user manager is in another pid namespace than airlock, where the \
                     sandbox's pid means another process: run airlock where its systemd runs";
    if peer.pid <= 0 {
        return Err(elsewhere.into());
    }
    let namespace = |pid: &str| {
        let link = format!("/proc/{pid}/ns/pid");
        fs::read_link(&link)
            .map_err(|e| format!("cannot tell the user manager's pid namespace: {link}: {e}"))
    };
    if namespace(&peer.pid.to_string())? != namespace("self")? {
        return Err(elsewhere.into());
    }
    Ok(())
}

/// systemd's CPUQuota per second for `millicpus` thousandths of a CPU, at least the kernel's
/// 1 ms per 100 ms period (as the cgroup airlock writes itself).
fn quota_per_second_us(millicpus: u64) -> u64 {
    super::cpu_quota_us(millicpus) * (1_000_000 / CPU_PERIOD_US)
}

/// The job systemd queued moves `pid` soon after it answers; its cgroup once it is in `unit`.
fn wait_until_moved(pid: Pid, unit: &str) -> std::result::Result<PathBuf, String> {
    let file = format!("/proc/{pid}/cgroup");
    let deadline = Instant::now() + MOVED_WITHIN;
    let mut pause = Duration::from_micros(200);
    loop {
        let text = fs::read_to_string(&file).map_err(|e| format!("read {file}: {e}"))?;
        if let Some(path) = text.lines().find_map(|line| line.strip_prefix("0::")) {
            if Path::new(path).file_name() == Some(std::ffi::OsStr::new(unit)) {
                return Ok(Path::new(ROOT).join(path.trim_start_matches('/')));
            }
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "the sandbox's first process was not moved into it within {} s",
                MOVED_WITHIN.as_secs()
            ));
        }
        std::thread::sleep(pause);
        pause = (pause * 2).min(Duration::from_millis(10));
    }
}

/// Fail closed: each limit asked for, as the kernel now holds the scope to it. systemd sets what
/// it can and logs the rest (a controller not delegated to the user manager, say).
fn verify_limits(
    dir: &Path,
    limits: &ResourceLimits,
    cpu: bool,
) -> std::result::Result<(), String> {
    let read = |name: &str| {
        fs::read_to_string(dir.join(name))
            .map(|text| text.trim().to_string())
            .map_err(|e| format!("read {}: {e}", dir.join(name).display()))
    };
    let not_set = |file: &str, held: &str, wanted: &str, controller: &str| {
        format!(
            "systemd left {file} at {held}, not {wanted} (is the {controller} controller delegated \
             to the user manager? `cat \
             /sys/fs/cgroup/user.slice/user-$UID.slice/user@$UID.service/cgroup.controllers` says)"
        )
    };
    let memory = read("memory.max")?;
    if !memory_holds(&memory, limits.memory_bytes, page_size()) {
        return Err(not_set(
            "memory.max",
            &memory,
            &limits.memory_bytes.to_string(),
            "memory",
        ));
    }
    // Without swap accounting the file is absent: memory.max then bounds what the run holds in
    // RAM, not what it pushes to swap (as in every cgroup airlock makes itself there).
    if dir.join("memory.swap.max").exists() {
        let swap = read("memory.swap.max")?;
        if swap != "0" {
            return Err(not_set("memory.swap.max", &swap, "0", "memory"));
        }
    }
    let processes = read("pids.max")?;
    if processes != limits.processes.to_string() {
        return Err(not_set(
            "pids.max",
            &processes,
            &limits.processes.to_string(),
            "pids",
        ));
    }
    if cpu {
        let wanted = format!(
            "{} {CPU_PERIOD_US}",
            super::cpu_quota_us(limits.cpus.millicpus)
        );
        let bandwidth = read("cpu.max")?;
        if bandwidth != wanted {
            return Err(not_set("cpu.max", &bandwidth, &wanted, "cpu"));
        }
    }
    Ok(())
}

fn page_size() -> u64 {
    nix::unistd::sysconf(nix::unistd::SysconfVar::PAGE_SIZE)
        .ok()
        .flatten()
        .map_or(4096, |size| size.unsigned_abs())
}

/// Does `memory.max` as read hold a run to `wanted` bytes? The kernel rounds down to whole pages,
/// and shows "max" for any limit of its largest count of pages or more (`LONG_MAX` bytes).
fn memory_holds(held: &str, wanted: u64, page: u64) -> bool {
    let largest_pages = i64::MAX.unsigned_abs() / page;
    match held.parse::<u64>() {
        Ok(bytes) => bytes <= wanted && bytes + page > wanted,
        Err(_) => held == "max" && wanted / page >= largest_pages,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn memory_max_is_read_as_the_kernel_writes_it() {
        let page = 4096;
        assert!(memory_holds("67108864", 64 << 20, page));
        // Rounded down to whole pages.
        assert!(memory_holds("67108864", (64 << 20) + 100, page));
        assert!(!memory_holds("max", 64 << 20, page));
        assert!(!memory_holds("67104768", 64 << 20, page));
        assert!(!memory_holds("67108865", 64 << 20, page));
        // A limit past what the kernel counts reads as "max".
        assert!(memory_holds("max", u64::MAX, page));
        assert!(!memory_holds("garbage", u64::MAX, page));
    }

    #[test]
    fn the_quota_per_second_is_ten_periods_of_the_kernels() {
        assert_eq!(quota_per_second_us(100), 100_000);
        assert_eq!(quota_per_second_us(1500), 1_500_000);
        // At least 1 ms per 100 ms period, as airlock's own cgroups.
        assert_eq!(quota_per_second_us(1), 10_000);
    }
}
