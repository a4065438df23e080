//! Step 18 of [`crate::protocol`] (watch): the supervisor's poll loop over a started sandbox,
//! and what it learns of the run's end.

use std::os::fd::AsFd;
use std::time::Instant;

use nix::poll::{poll, PollFd, PollFlags, PollTimeout};
use nix::sys::signal::{kill, Signal};
use nix::sys::wait::WaitStatus;

use super::{Finished, Outcome, Sandbox};
use crate::error::{JailError, Result, SyscallContext, UNEXPECTED};
use crate::output::Wait;
use crate::protocol::{self, ExitReport};

/// How the watch of step 18 ended.
enum Ended {
    /// Pid 1 reported the command's end (EXITED).
    Reported(ExitReport),
    /// The wall-clock limit passed: the sandbox was killed.
    TimedOut,
    /// The disk watch saw the layer take too much: the sandbox was killed.
    DiskFull,
    /// Pid 1 is gone without a report.
    Gone,
}

/// What one poll of the watch found ready.
struct Events {
    /// Pid 1 has exited (its pidfd).
    exited: bool,
    /// A signal to forward.
    signalled: bool,
    /// Pid 1 wrote to the report pipe (or closed it).
    reported: bool,
    /// The output relay's streams that can go on.
    output: Vec<Wait>,
}

impl Sandbox {
    /// Step 18 (watch): forward signals and enforce the wall-clock limit until the command has
    /// ended: until pid 1 reports it (EXITED), just before it exits, or until pid 1 is gone.
    /// The sandbox may still be exiting when this returns (the kernel tears its namespaces down
    /// as pid 1 exits); its drop waits for that.
    pub fn wait(&mut self) -> Result<Finished> {
        // Their namespaces are in use by now; the helper processes are not needed any more.
        for namespace in &mut self.helper_namespaces {
            namespace.reap();
        }
        let ended = self.watch()?;
        self.finish(ended)
    }

    /// The poll loop of step 18, until the command has ended one way or another.
    fn watch(&mut self) -> Result<Ended> {
        // Interrupts (INT, TERM, HUP) are the command's to handle, once: the second one kills
        // the sandbox, as a command that ignores them (or a paused one) would never end.
        let mut interrupts = 0;
        loop {
            let Some(timeout) = self.time_left() else {
                self.kill();
                return Ok(Ended::TimedOut);
            };
            let Some(events) = self.poll_events(timeout)? else {
                continue;
            };
            if self.disk_watch.as_ref().is_some_and(|w| w.exceeded()) {
                self.kill();
                return Ok(Ended::DiskFull);
            }
            if let Some(relay) = &mut self.output {
                for wait in events.output {
                    relay.on_ready(wait);
                }
            }
            if events.reported {
                if let Some(report) = self.read_exit_report() {
                    return Ok(Ended::Reported(report));
                }
            }
            if events.signalled {
                self.forward_signal(&mut interrupts);
            }
            if events.exited {
                return Ok(Ended::Gone);
            }
        }
    }

    /// How long the next poll may wait: until just past the deadline, if there is one; None once
    /// it has passed.
    fn time_left(&self) -> Option<PollTimeout> {
        let left = self.time_to_deadline()?;
        if self.disk_watch.is_none() {
            return Some(left);
        }
        let interval = PollTimeout::try_from(super::disk::INTERVAL).unwrap_or(PollTimeout::MAX);
        Some(if left == PollTimeout::NONE {
            interval
        } else {
            left.min(interval)
        })
    }

    fn time_to_deadline(&self) -> Option<PollTimeout> {
        match self.deadline {
            Some(deadline) => {
                let left = deadline.saturating_duration_since(Instant::now());
                if left.is_zero() {
                    return None;
                }
                // Just past the deadline, at most i32::MAX ms (the poll wakes and asks again):
                // a limit of more than 24.8 days overflowed the + 1.
                let millis = left.as_millis().min(i32::MAX as u128 - 1) as i32;
                Some(PollTimeout::try_from(millis + 1).unwrap_or(PollTimeout::MAX))
            }
            None => Some(PollTimeout::NONE),
        }
    }

    /// Wait until pid 1 exits, a signal comes, pid 1 reports or the output relay can go on; None
    /// when a signal handler interrupted the wait.
    fn poll_events(&self, timeout: PollTimeout) -> Result<Option<Events>> {
        let waits = self
            .output
            .as_ref()
            .map(|relay| relay.waits())
            .unwrap_or_default();
        let mut fds = vec![
            PollFd::new(self.pidfd.as_fd(), PollFlags::POLLIN),
            PollFd::new(self.signals.as_fd(), PollFlags::POLLIN),
        ];
        // Without a report pipe, a stand-in that is never ready keeps the indices fixed.
        fds.push(match &self.report {
            Some(pipe) => PollFd::new(pipe.as_fd(), PollFlags::POLLIN),
            None => PollFd::new(self.pidfd.as_fd(), PollFlags::empty()),
        });
        fds.extend(waits.iter().map(|(_, fd, flags)| PollFd::new(*fd, *flags)));
        match poll(&mut fds, timeout) {
            Err(nix::errno::Errno::EINTR) => return Ok(None),
            Err(e) => {
                return Err(JailError::Syscall {
                    action: "wait for the sandbox",
                    errno: e,
                    hint: UNEXPECTED,
                })
            }
            Ok(_) => {}
        }
        let has = |fd: &PollFd| fd.revents().is_some_and(|r| !r.is_empty());
        let output: Vec<Wait> = waits
            .iter()
            .zip(&fds[3..])
            .filter(|(_, fd)| has(fd))
            .map(|((wait, _, _), _)| *wait)
            .collect();
        Ok(Some(Events {
            exited: has(&fds[0]),
            signalled: has(&fds[1]),
            reported: self.report.is_some() && has(&fds[2]),
            output,
        }))
    }

    /// Pass the signal the supervisor received on to pid 1; a second interrupt kills the
    /// sandbox instead.
    fn forward_signal(&mut self, interrupts: &mut usize) {
        if let Ok(Some(info)) = self.signals.read_signal() {
            if let Ok(sig) = Signal::try_from(info.ssi_signo as i32) {
                let interrupt = matches!(sig, Signal::SIGINT | Signal::SIGTERM | Signal::SIGHUP);
                if interrupt && *interrupts > 0 {
                    note!("airlock: {sig} again: killing the sandbox");
                    self.kill();
                } else {
                    let _ = kill(self.pid, sig);
                }
                *interrupts += usize::from(interrupt);
            }
        }
    }

    /// How the run ended, once the watch is over: the exit code, the memory it used, the output
    /// it dropped.
    fn finish(&mut self, ended: Ended) -> Result<Finished> {
        let (limit, report) = match ended {
            Ended::Reported(report) => (None, Some(report)),
            Ended::TimedOut => (Some(Outcome::TimedOut), None),
            Ended::DiskFull => (Some(Outcome::DiskLimitReached), None),
            Ended::Gone => (None, None),
        };
        // Without a report (pid 1 was killed, or the time ran out), its exit status says.
        let code = match &report {
            Some(report) => Ok(report.code),
            None => self
                .reap_pid1()
                .during("reap the sandbox", UNEXPECTED)
                .and_then(|status| match status {
                    WaitStatus::Exited(_, code) => Ok(code),
                    WaitStatus::Signaled(_, sig, _) => Ok(128 + sig as i32),
                    other => Err(JailError::UnexpectedWaitStatus(other)),
                }),
        };
        let memory = self.cgroup.as_ref().map(|group| group.memory_stats());
        // PERF: its cgroups are removed when it is reaped, which the caller may do after it
        // has answered its own client (see `Sandbox`'s drop).
        self.command_reported = report.is_some();
        // The pipes end when every process of the sandbox has closed them, which each does as it
        // exits: before the kernel's teardown of the namespaces, so this does not wait for it.
        let (output_dropped, output_failures, output_tails) =
            self.output.as_mut().map_or((0, Vec::new(), None), |relay| {
                relay.drain();
                (relay.dropped(), relay.failures(), Some(relay.tails()))
            });
        let outcome = if let Some(limit) = limit {
            limit
        } else if report.is_some_and(|report| report.cpu_limit_reached) {
            Outcome::CpuLimitReached
        } else {
            Outcome::Exited(code?)
        };
        Ok(Finished {
            outcome,
            output_dropped,
            output_failures,
            output_tails,
            memory,
            usage: report.map(|report| report.usage),
        })
    }

    /// Pid 1's report of the command's end, if that is what the pipe holds. End of file (pid 1
    /// died without one) or anything else closes the pipe: its exit status will say.
    fn read_exit_report(&mut self) -> Option<ExitReport> {
        let report = protocol::read_exit_report(self.report.as_mut()?);
        if report.is_none() {
            self.report = None;
        }
        report
    }
}
