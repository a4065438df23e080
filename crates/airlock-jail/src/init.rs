//! pid 1 of the sandbox: starts the command, reaps every orphan, forwards signals, and exits with
//! the command's status. When it exits the kernel kills everything left in the pid namespace, so
//! no daemon outlives the run. Step 17 (command) of [`crate::protocol`].

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::{Duration, Instant};

use nix::errno::Errno;
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::wait::{waitid, waitpid, Id, WaitPidFlag, WaitStatus};
use nix::unistd::{chdir, Pid};

use crate::command::Command;
use crate::launch::Usage;
use crate::protocol::{self, ExitReport, Report};
use crate::spec::SandboxSpec;
use crate::sys::spawn_in_new_session;

/// Signals the supervisor forwards and init passes on to the command's process group.
pub(crate) const FORWARDED: &[Signal] = &[
    Signal::SIGINT,
    Signal::SIGTERM,
    Signal::SIGHUP,
    Signal::SIGQUIT,
    Signal::SIGUSR1,
    Signal::SIGUSR2,
    Signal::SIGWINCH,
];

pub(crate) fn forwarded_set() -> SigSet {
    let mut set = SigSet::empty();
    for sig in FORWARDED {
        set.add(*sig);
    }
    set
}

/// `for_init`: the `tasks` files this process moves itself out of the run's cgroups through once
/// the command has started (v1; see `cgroup::Join`), and the cgroup's count of CPU time.
pub(crate) fn run_command(
    spec: &SandboxSpec,
    command: &Command,
    report: OwnedFd,
    for_init: crate::inside::ForInit,
) -> ! {
    let crate::inside::ForInit {
        leave_cgroup,
        cpu_usage,
    } = for_init;
    let mut waited = forwarded_set();
    waited.add(Signal::SIGCHLD);
    // Blocked signals stay pending until sigwait picks them up, so none is lost between the spawn
    // and the loop below.
    if waited.thread_block().is_err() {
        std::process::exit(125);
    }
    let command = start_command(command);
    // PERF: the command and all it starts stay in the run's cgroups, pid 1 leaves them, so that
    // they are empty when the command's last process ends (see `cgroup::Join`). Should a move
    // fail, this process stays in: the supervisor then removes the cgroups after it is gone, as
    // on v2.
    for tasks_file in leave_cgroup {
        let _ = nix::unistd::write(&tasks_file, b"0");
    }
    // Counted here, once the command runs, rather than on the launch's path. The CPUs online,
    // not our affinity: the most the sandbox's processes can run on at once, as they may widen
    // their own (glibc reads /proc/stat when, as here, there is no /sys).
    let online_cpus = nix::unistd::sysconf(nix::unistd::SysconfVar::_NPROCESSORS_ONLN)
        .ok()
        .flatten()
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(1);
    let mut cpu = CpuBudget::new(
        Duration::from_secs(spec.limits.cpu_seconds),
        online_cpus,
        cpu_usage,
    );
    loop {
        // Looked at on every pass, not only when the wait times out: a stream of signals (one
        // the sandbox sends us, say) would otherwise put the look off for ever.
        if !cpu.reached && cpu.check() {
            // Every process of the pid namespace but this one; the command's status then ends
            // the run as usual.
            let _ = kill(Pid::from_raw(-1), Signal::SIGKILL);
        }
        let timeout = (!cpu.reached).then(|| cpu.until_next_check());
        let Some(signal) = crate::sys::wait_for_signal(&waited, timeout) else {
            continue;
        };
        if signal != Signal::SIGCHLD {
            // The command runs in its own session; its process group id is its pid.
            let _ = kill(Pid::from_raw(-command.as_raw()), signal);
            continue;
        }
        // Asked of the command while it is a zombie, before it is reaped below.
        let own_cpu_rlimit = command_ended_by_its_cpu_rlimit(command);
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == command => {
                    exit_reporting(code, report, cpu.reached)
                }
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == command => {
                    // Its own RLIMIT_CPU ended it: the run's limit, unless it lowered its own.
                    // The kernel decides that on a count sampled at each tick, which on a busy
                    // host can run well ahead of the precise count `cpu.used()` reads; so the
                    // limit the command still had says, and the count only where /proc could
                    // not tell.
                    let reached = cpu.reached
                        || (sig == Signal::SIGXCPU
                            && match own_cpu_rlimit {
                                Some(seconds) => seconds >= spec.limits.cpu_seconds,
                                None => cpu.used() + RLIMIT_CPU_SLACK >= cpu.limit,
                            });
                    exit_reporting(128 + sig as i32, report, reached)
                }
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
                Ok(_) => continue,
                Err(_) => break,
            }
        }
    }
}

/// The soft RLIMIT_CPU, in seconds, of the command if SIGXCPU has ended it and it is not yet
/// reaped: a zombie keeps its limits in /proc until then. None otherwise, or where /proc cannot
/// tell ("unlimited" is `u64::MAX`).
fn command_ended_by_its_cpu_rlimit(command: Pid) -> Option<u64> {
    let flags = WaitPidFlag::WEXITED | WaitPidFlag::WNOHANG | WaitPidFlag::WNOWAIT;
    match waitid(Id::Pid(command), flags) {
        Ok(WaitStatus::Signaled(_, Signal::SIGXCPU, _)) => {}
        _ => return None,
    }
    let limits = std::fs::read_to_string(format!("/proc/{command}/limits")).ok()?;
    soft_cpu_seconds_of_limits(&limits)
}

/// The soft limit of the "Max cpu time" line of a /proc/PID/limits text.
fn soft_cpu_seconds_of_limits(limits: &str) -> Option<u64> {
    let line = limits.lines().find(|l| l.starts_with("Max cpu time"))?;
    match line["Max cpu time".len()..].split_whitespace().next()? {
        "unlimited" => Some(u64::MAX),
        n => n.parse().ok(),
    }
}

/// EXITED (step 17): tell the supervisor how the command ended and what its processes used, then
/// exit with its status. The kernel kills whatever is left in the sandbox as this process exits;
/// the supervisor still waits for that before it returns, but need not wait to learn the status.
fn exit_reporting(code: i32, report: OwnedFd, cpu_limit_reached: bool) -> ! {
    let usage = Usage::of_children().unwrap_or_default();
    // The supervisor reads the command's output to its end before it goes on; pid 1's own
    // copies of the pipes would otherwise last until the kernel's teardown.
    let _ = crate::sys::close_stdio();
    let exited = Report::Exited(ExitReport {
        code,
        usage,
        cpu_limit_reached,
    });
    // A supervisor that is gone cannot be told; it would see the exit status anyway.
    let _ = protocol::report(std::os::fd::AsFd::as_fd(&report), &exited);
    std::process::exit(code)
}

/// The run's CPU time limit, over all the sandbox's processes together. RLIMIT_CPU (set too)
/// limits each process by itself, and a command that spreads its work over many processes
/// passes it. Pid 1 looks only when the limit could have been reached: the sandbox cannot use
/// more than `cpus` seconds of CPU per second, so the first look is at limit/cpus, the next when
/// what is left could be used up, and so on; a run that ends sooner is never looked at.
///
/// What it counts: the run's cgroup's own count when it has one (v1 cpuacct, v2 cpu.stat), which
/// sees every process that ran; without one, what it can see from inside (see
/// [`cpu_time_seen`]), which misses the children of a process that ignores SIGCHLD.
struct CpuBudget {
    limit: Duration,
    cpus: u32,
    next_check: Instant,
    /// The run's cgroup's count of CPU time.
    usage: Option<OwnedFd>,
    /// The limit was passed: every process but pid 1 has been killed.
    reached: bool,
}

/// How far short of the limit RLIMIT_CPU's tick-sampled count may send SIGXCPU.
const RLIMIT_CPU_SLACK: Duration = Duration::from_millis(100);

/// Looks come no closer together than this, so the limit may be passed by up to this much per
/// CPU before everything is killed.
const CPU_CHECK_INTERVAL_MIN: Duration = Duration::from_millis(50);

impl CpuBudget {
    fn new(limit: Duration, cpus: usize, usage: Option<OwnedFd>) -> CpuBudget {
        let cpus = u32::try_from(cpus).unwrap_or(u32::MAX).max(1);
        CpuBudget {
            limit,
            cpus,
            next_check: Instant::now() + limit / cpus,
            usage,
            reached: false,
        }
    }

    /// CPU time used by the sandbox so far.
    fn used(&self) -> Duration {
        self.usage
            .as_ref()
            .and_then(crate::cgroup::cpu_time_used)
            .unwrap_or_else(cpu_time_seen)
    }

    fn until_next_check(&self) -> Duration {
        self.next_check.saturating_duration_since(Instant::now())
    }

    /// Is the limit passed? If not, when to look again. Before the time, nothing to do.
    fn check(&mut self) -> bool {
        if Instant::now() < self.next_check {
            return false;
        }
        let used = self.used();
        if used >= self.limit {
            self.reached = true;
            return true;
        }
        self.next_check =
            Instant::now() + ((self.limit - used) / self.cpus).max(CPU_CHECK_INTERVAL_MIN);
        false
    }
}

/// CPU time of the sandbox's processes as seen from inside, without a cgroup's count: what pid 1
/// has reaped (with all those had reaped), and what each living process has used and reaped,
/// from the sandbox's own /proc. Reaped first: a process reaped between the two reads is then
/// missed once (and found at the next look) rather than counted twice. It misses what the
/// kernel reaps by itself (the children of a process that ignores SIGCHLD), and may count a
/// process twice when pids have wrapped around.
fn cpu_time_seen() -> Duration {
    let reaped = Usage::of_children()
        .map(|usage| usage.cpu)
        .unwrap_or_default();
    let ticks_per_second = nix::unistd::sysconf(nix::unistd::SysconfVar::CLK_TCK)
        .ok()
        .flatten()
        .filter(|t| *t > 0)
        .unwrap_or(100) as u64;
    let mut ticks: u64 = 0;
    if let Ok(entries) = std::fs::read_dir("/proc") {
        for entry in entries.flatten() {
            let name = entry.file_name();
            let Some(pid) = name.to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if pid == 1 {
                continue;
            }
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue;
            };
            ticks += cpu_ticks_of_stat(&stat);
        }
    }
    reaped + Duration::from_millis(ticks.saturating_mul(1000) / ticks_per_second)
}

/// utime + stime + cutime + cstime, in clock ticks, from a /proc/PID/stat line.
fn cpu_ticks_of_stat(stat: &str) -> u64 {
    let Some(fields) = crate::control::stat_fields_after_name(stat) else {
        return 0;
    };
    // From the state, field 3: utime, stime, cutime, cstime are fields 14 to 17.
    fields
        .skip(14 - 3)
        .take(4)
        .filter_map(|field| field.parse::<i64>().ok())
        .map(|ticks| ticks.max(0) as u64)
        .sum()
}

/// Start the command, found as a shell would find it, or exit as a shell would when it cannot:
/// 127 not found, 126 not executable.
fn start_command(command: &Command) -> Pid {
    // Spawned children inherit the working directory; init itself has no use for its own.
    if let Err(errno) = chdir(&command.cwd) {
        note!(
            "airlock: cannot enter {}: {}",
            command.cwd.display(),
            errno.desc()
        );
        std::process::exit(125);
    }
    let Some(program) = command.argv.first() else {
        note!("airlock: no command given");
        std::process::exit(125);
    };
    let to_c = |s: &OsStr| CString::new(s.as_bytes()).ok();
    let argv: Option<Vec<CString>> = command.argv.iter().map(|a| to_c(a)).collect();
    let env: Option<Vec<CString>> = command
        .env
        .iter()
        .map(|(k, v)| {
            let mut pair = OsString::from(k);
            pair.push("=");
            pair.push(v);
            to_c(&pair)
        })
        .collect();
    let (Some(argv), Some(env)) = (argv, env) else {
        note!("airlock: an argument or environment value contains a NUL byte");
        std::process::exit(125);
    };
    let pointers = |strings: &[CString]| -> Vec<*const libc::c_char> {
        strings
            .iter()
            .map(|s| s.as_ptr())
            .chain(std::iter::once(std::ptr::null()))
            .collect()
    };
    let (argv_ptrs, env_ptrs) = (pointers(&argv), pointers(&env));
    let mut denied = None;
    // A file that is there but cannot be started for a missing file: its #! interpreter (or
    // its ELF loader) is not in the sandbox.
    let mut missing_interpreter = None;
    for candidate in candidates(program, command) {
        let Some(path) = to_c(candidate.as_os_str()) else {
            continue;
        };
        match spawn_in_new_session(&path, &argv_ptrs, &env_ptrs) {
            Ok(pid) => return pid,
            Err(Errno::EACCES) => denied = Some(candidate),
            Err(Errno::ENOENT) if candidate.is_file() => {
                missing_interpreter.get_or_insert(candidate);
            }
            Err(Errno::ENOENT) | Err(Errno::ENOTDIR) => {}
            Err(errno) => {
                note!(
                    "airlock: cannot execute {}: {}",
                    candidate.display(),
                    errno.desc()
                );
                std::process::exit(126);
            }
        }
    }
    if let Some(path) = denied {
        note!("airlock: {}: permission denied", path.display());
        std::process::exit(126);
    }
    if let Some(path) = missing_interpreter {
        match interpreter(&path) {
            Some(line) => note!(
                "airlock: {}: its interpreter ({line}) is not in the sandbox",
                path.display()
            ),
            None => note!(
                "airlock: {}: cannot be started in the sandbox: the loader or a library it needs is missing",
                path.display()
            ),
        }
        std::process::exit(127);
    }
    if program.as_bytes().contains(&b'/') {
        note!(
            "airlock: {}: no such file in the sandbox (it sees the system directories, the workspace \
             and the profile's [filesystem] paths: add the file's directory to read_only in a profile)",
            Path::new(program).display()
        );
    } else {
        let search = path_variable(command).unwrap_or_default();
        note!(
            "airlock: {}: command not found in the sandbox (PATH={})",
            Path::new(program).display(),
            search.to_string_lossy()
        );
    }
    std::process::exit(127)
}

/// The `#!` line of a script, without the `#!`.
fn interpreter(path: &Path) -> Option<String> {
    use std::io::Read as _;
    let mut head = [0u8; 256];
    let n = std::fs::File::open(path).ok()?.read(&mut head).ok()?;
    let line = head[..n].strip_prefix(b"#!")?;
    let end = line.iter().position(|b| *b == b'\n').unwrap_or(line.len());
    Some(String::from_utf8_lossy(&line[..end]).trim().to_string())
}

fn path_variable(command: &Command) -> Option<OsString> {
    command
        .env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
}

/// Where to look for `program`, as a shell would: itself when it names a path, else each PATH dir.
fn candidates(program: &OsStr, command: &Command) -> Vec<std::path::PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return vec![program.into()];
    }
    let path = path_variable(command).unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(program))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_soft_cpu_limit_is_read_from_proc_limits() {
        let limits = "Limit                     Soft Limit           Hard Limit           Units     \n\
                      Max cpu time              1                    2                    seconds   \n\
                      Max file size             unlimited            unlimited            bytes     \n";
        assert_eq!(soft_cpu_seconds_of_limits(limits), Some(1));
        let unlimited = limits.replace("1                    2", "unlimited            unlimited");
        assert_eq!(soft_cpu_seconds_of_limits(&unlimited), Some(u64::MAX));
        assert_eq!(
            soft_cpu_seconds_of_limits("Max open files 1 1 files\n"),
            None
        );
        // This process's own, as the kernel writes it.
        let own = std::fs::read_to_string("/proc/self/limits").unwrap();
        assert!(soft_cpu_seconds_of_limits(&own).is_some(), "{own}");
    }

    #[test]
    fn cpu_ticks_are_read_after_the_command_name_whatever_it_holds() {
        // pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt
        // utime stime cutime cstime ...
        let plain = "42 (python3) R 1 42 42 0 -1 4194560 100 0 0 0 250 30 7 3 20 0 1 0";
        assert_eq!(cpu_ticks_of_stat(plain), 250 + 30 + 7 + 3);
        let tricky =
            "43 (a) R 1 2 3 4 5 6 7 8 9 10 11 12 13 14) S 1 43 43 0 -1 0 0 0 0 0 5 6 7 8 20";
        assert_eq!(cpu_ticks_of_stat(tricky), 5 + 6 + 7 + 8);
        assert_eq!(cpu_ticks_of_stat("garbage"), 0);
        assert_eq!(cpu_ticks_of_stat("44 (short) Z 1"), 0);
    }

    #[test]
    fn the_cpu_budget_is_first_looked_at_when_it_could_be_used_up() {
        let budget = CpuBudget::new(Duration::from_secs(3600), 2, None);
        let first = budget.until_next_check();
        assert!(first > Duration::from_secs(1799) && first <= Duration::from_secs(1800));
        let one_cpu = CpuBudget::new(Duration::from_secs(10), 0, None);
        assert!(one_cpu.until_next_check() > Duration::from_secs(9));
    }
}
