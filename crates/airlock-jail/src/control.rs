//! Acting on a running sandbox from another process: kill it, freeze it, thaw it.
//!
//! A sandbox is named by its pid 1 as the host sees it and that process's start time, so that a
//! pid reused after the sandbox ended is never taken for it. Killing pid 1 of a pid namespace
//! kills every process in it. Freezing uses the run's freezer cgroup (v2 `cgroup.freeze`, v1
//! `freezer.state`); where there is none, every process of the sandbox is stopped with SIGSTOP,
//! again and again until a pass finds none left running (a process forked meanwhile is caught by
//! the next pass).

use std::collections::HashMap;
use std::fs;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::{Deserialize, Serialize};

use crate::error::{JailError, PathContext, Result, SyscallContext};

/// A run's freezer cgroup.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Freezer {
    /// A v1 freezer cgroup directory (`freezer.state`).
    V1(PathBuf),
    /// A v2 cgroup directory (`cgroup.freeze`).
    V2(PathBuf),
}

/// A running sandbox, as another process can find it again.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SandboxId {
    /// Its pid 1, in the host's pid namespace.
    pub pid: i32,
    /// That process's start time (clock ticks after boot, /proc/PID/stat field 22).
    pub start_time: u64,
    pub freezer: Option<Freezer>,
}

/// The fields of a /proc/PID/stat line from the state (field 3) on. The command name before them
/// is in parentheses and may hold anything, these included: they start after the last ')'.
pub(crate) fn stat_fields_after_name(text: &str) -> Option<std::str::SplitWhitespace<'_>> {
    text.rsplit_once(')')
        .map(|(_, rest)| rest.split_whitespace())
}

/// Fields of /proc/PID/stat after the command name: (state, ppid, start time).
fn stat(pid: i32) -> Option<(char, i32, u64)> {
    let text = fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let fields: Vec<&str> = stat_fields_after_name(&text)?.collect();
    let state = fields.first()?.chars().next()?;
    let ppid = fields.get(1)?.parse().ok()?;
    // Field 22 overall; the state is field 3, so it is index 19 here.
    let start = fields.get(19)?.parse().ok()?;
    Some((state, ppid, start))
}

/// The start time of `pid`, if it exists.
pub fn start_time(pid: i32) -> Option<u64> {
    stat(pid).map(|(_, _, start)| start)
}

impl SandboxId {
    /// Is this sandbox still running (and not a newer process that got its pid)?
    pub fn is_alive(&self) -> bool {
        start_time(self.pid) == Some(self.start_time)
    }

    fn check(&self) -> Result<()> {
        if self.is_alive() {
            Ok(())
        } else {
            Err(JailError::SandboxEnded { pid: self.pid })
        }
    }

    /// Every process of the sandbox: its pid 1 and all descendants (everything in a pid
    /// namespace descends from its pid 1, which adopts orphans).
    fn processes(&self) -> Vec<i32> {
        let mut children: HashMap<i32, Vec<i32>> = HashMap::new();
        if let Ok(entries) = fs::read_dir("/proc") {
            for entry in entries.flatten() {
                let Some(pid) = entry
                    .file_name()
                    .to_str()
                    .and_then(|n| n.parse::<i32>().ok())
                else {
                    continue;
                };
                if let Some((_, ppid, _)) = stat(pid) {
                    children.entry(ppid).or_default().push(pid);
                }
            }
        }
        let mut all = vec![self.pid];
        let mut next = 0;
        while next < all.len() {
            if let Some(kids) = children.get(&all[next]) {
                all.extend(kids);
            }
            next += 1;
        }
        all
    }

    /// Kill every process of the sandbox; returns once its pid 1 is gone (or after 5 s).
    /// Returns false when it had already ended.
    pub fn kill(&self) -> Result<bool> {
        let signalled = self.send_kill()?;
        self.wait_gone();
        Ok(signalled)
    }

    /// SIGKILL its pid 1 (which takes the pid namespace), without waiting; false when it had
    /// already ended. Killing many: signal all, then [`SandboxId::wait_gone`] for each.
    pub fn send_kill(&self) -> Result<bool> {
        if !self.is_alive() {
            return Ok(false);
        }
        kill(Pid::from_raw(self.pid), Signal::SIGKILL).during(
            "kill the sandbox",
            "it belongs to another user: only its owner or root may kill it",
        )?;
        // A frozen process dies only once thawed (v1); stopped ones die as they are.
        let _ = self.thaw();
        Ok(true)
    }

    /// Wait (at most 5 s) until its pid 1 is gone.
    pub fn wait_gone(&self) {
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.is_alive() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Stop every process of the sandbox until [`SandboxId::resume`].
    pub fn pause(&self) -> Result<()> {
        self.check()?;
        match &self.freezer {
            Some(Freezer::V1(dir)) => freeze_v1(dir, "FROZEN"),
            Some(Freezer::V2(dir)) => freeze_v2(dir, true),
            None => self.stop_all(),
        }
    }

    /// Let a paused sandbox run again.
    pub fn resume(&self) -> Result<()> {
        self.check()?;
        self.thaw()
    }

    fn thaw(&self) -> Result<()> {
        match &self.freezer {
            Some(Freezer::V1(dir)) => freeze_v1(dir, "THAWED"),
            Some(Freezer::V2(dir)) => freeze_v2(dir, false),
            None => {
                for pid in self.processes() {
                    let _ = kill(Pid::from_raw(pid), Signal::SIGCONT);
                }
                Ok(())
            }
        }
    }

    /// SIGSTOP every process, pass after pass, until one pass finds all of them stopped.
    fn stop_all(&self) -> Result<()> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            let mut running = 0;
            for pid in self.processes() {
                // A zombie is as stopped as it gets: a stopped shell cannot reap the child
                // that just ended, which would otherwise count as running forever.
                if !matches!(stat(pid), Some(('T' | 't' | 'Z' | 'X', _, _)) | None) {
                    running += 1;
                    match kill(Pid::from_raw(pid), Signal::SIGSTOP) {
                        // It ended between the listing and the signal.
                        Ok(()) | Err(nix::errno::Errno::ESRCH) => {}
                        Err(errno) => {
                            return Err(errno).during(
                                "stop a process of the sandbox",
                                "it belongs to another user: only its owner or root may pause it",
                            )
                        }
                    }
                }
            }
            if running == 0 {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(JailError::StopOutpaced);
            }
            std::thread::sleep(Duration::from_millis(2));
        }
    }

    /// Is the sandbox frozen by its freezer cgroup now? Read from the cgroup, which every reader
    /// sees alike, in whatever pid namespace (false without a freezer).
    pub fn is_frozen(&self) -> bool {
        self.freezer.is_some() && self.is_paused()
    }

    /// Is the sandbox paused now?
    pub fn is_paused(&self) -> bool {
        match &self.freezer {
            Some(Freezer::V1(dir)) => {
                fs::read_to_string(dir.join("freezer.state")).is_ok_and(|s| s.trim() == "FROZEN")
            }
            Some(Freezer::V2(dir)) => fs::read_to_string(dir.join("cgroup.events"))
                .is_ok_and(|s| s.lines().any(|l| l == "frozen 1")),
            None => matches!(stat(self.pid), Some(('T', _, _))),
        }
    }
}

fn freeze_v1(dir: &std::path::Path, state: &'static str) -> Result<()> {
    let file = dir.join("freezer.state");
    fs::write(&file, state).on_path("write", &file, "run 'airlock check'")?;
    // FREEZING becomes FROZEN once every task has stopped.
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if fs::read_to_string(&file).is_ok_and(|s| s.trim() == state) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Err(JailError::FreezerStuck {
        file,
        wanted: state,
    })
}

fn freeze_v2(dir: &std::path::Path, frozen: bool) -> Result<()> {
    let file = dir.join("cgroup.freeze");
    fs::write(&file, if frozen { "1" } else { "0" }).on_path(
        "write",
        &file,
        "run 'airlock check'",
    )?;
    let want = if frozen { "frozen 1" } else { "frozen 0" };
    let events = dir.join("cgroup.events");
    let deadline = Instant::now() + Duration::from_secs(5);
    while Instant::now() < deadline {
        if fs::read_to_string(&events).is_ok_and(|s| s.lines().any(|l| l == want)) {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(2));
    }
    Err(JailError::FreezerStuck {
        file: events,
        wanted: want,
    })
}
