//! pid 1 of the sandbox: starts the command, reaps every orphan, forwards signals, and exits with
//! the command's status. When it exits the kernel kills everything left in the pid namespace, so
//! no daemon outlives the run.

use std::ffi::{CString, OsStr, OsString};
use std::os::fd::OwnedFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use nix::errno::Errno;
use nix::sys::signal::{kill, SigSet, Signal};
use nix::sys::wait::{waitpid, WaitPidFlag, WaitStatus};
use nix::unistd::{chdir, Pid};

use crate::inside::ExitReport;
use crate::launch::Usage;
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

/// `leave_cgroup`: the `tasks` files this process moves itself out of the run's cgroups through
/// once the command has started (v1; see `cgroup::Join`).
pub(crate) fn run_command(spec: &SandboxSpec, report: OwnedFd, leave_cgroup: Vec<OwnedFd>) -> ! {
    let mut waited = forwarded_set();
    waited.add(Signal::SIGCHLD);
    // Blocked signals stay pending until sigwait picks them up, so none is lost between the spawn
    // and the loop below.
    if waited.thread_block().is_err() {
        std::process::exit(125);
    }
    let command = start_command(spec);
    // The command and all it starts stay in the run's cgroups. Should a move fail, this process
    // stays in: the supervisor then removes the cgroups after it is gone, as on v2.
    for tasks_file in leave_cgroup {
        let _ = nix::unistd::write(&tasks_file, b"0");
    }
    loop {
        let Ok(signal) = waited.wait() else { continue };
        if signal != Signal::SIGCHLD {
            // The command runs in its own session; its process group id is its pid.
            let _ = kill(Pid::from_raw(-command.as_raw()), signal);
            continue;
        }
        loop {
            match waitpid(None, Some(WaitPidFlag::WNOHANG)) {
                Ok(WaitStatus::Exited(pid, code)) if pid == command => exit_reporting(code, report),
                Ok(WaitStatus::Signaled(pid, sig, _)) if pid == command => {
                    exit_reporting(128 + sig as i32, report)
                }
                Ok(WaitStatus::StillAlive) | Err(Errno::ECHILD) => break,
                Ok(_) => continue,
                Err(_) => break,
            }
        }
    }
}

/// Tell the supervisor how the command ended and what its processes used, then exit with its
/// status. The kernel kills whatever is left in the sandbox as this process exits; the
/// supervisor still waits for that before it returns, but need not wait to learn the status.
fn exit_reporting(code: i32, report: OwnedFd) -> ! {
    let usage = Usage::of_children().unwrap_or_default();
    // The supervisor reads the command's output to its end before it goes on; pid 1's own
    // copies of the pipes would otherwise last until the kernel's teardown.
    let _ = crate::sys::close_stdio();
    // A supervisor that is gone cannot be told; it would see the exit status anyway.
    let _ = nix::unistd::write(&report, &ExitReport { code, usage }.encode());
    std::process::exit(code)
}

/// Start the command, found as a shell would find it, or exit as a shell would when it cannot:
/// 127 not found, 126 not executable.
fn start_command(spec: &SandboxSpec) -> Pid {
    // Spawned children inherit the working directory; init itself has no use for its own.
    if let Err(errno) = chdir(&spec.cwd) {
        note!(
            "airlock: cannot enter {}: {}",
            spec.cwd.display(),
            errno.desc()
        );
        std::process::exit(125);
    }
    let Some(program) = spec.argv.first() else {
        note!("airlock: no command given");
        std::process::exit(125);
    };
    let to_c = |s: &OsStr| CString::new(s.as_bytes()).ok();
    let argv: Option<Vec<CString>> = spec.argv.iter().map(|a| to_c(a)).collect();
    let env: Option<Vec<CString>> = spec
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
    for candidate in candidates(program, spec) {
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
        let search = path_variable(spec).unwrap_or_default();
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

fn path_variable(spec: &SandboxSpec) -> Option<OsString> {
    spec.env
        .iter()
        .find(|(k, _)| k == "PATH")
        .map(|(_, v)| v.clone())
}

/// Where to look for `program`, as a shell would: itself when it names a path, else each PATH dir.
fn candidates(program: &OsStr, spec: &SandboxSpec) -> Vec<std::path::PathBuf> {
    if program.as_bytes().contains(&b'/') {
        return vec![program.into()];
    }
    let path = path_variable(spec).unwrap_or_else(|| OsString::from("/usr/bin:/bin"));
    std::env::split_paths(&path)
        .filter(|dir| !dir.as_os_str().is_empty())
        .map(|dir| dir.join(program))
        .collect()
}
