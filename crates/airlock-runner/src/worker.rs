//! `airlock __serve-worker`: one run for the server, in a process of its own (see [`crate::job`]).

use std::ffi::OsString;
// writeln! to stderr rather than eprintln!, which panics when stderr is closed: the worker must
// still exit with its status.
use std::io::Write as _;
use std::path::Path;
use std::process::ExitCode;

use airlock_core::{Caller, Session};

use crate::job::{Job, WorkerReport, JOB_VAR, WARM_VAR};

fn nothing_to_tell(_: &Session) {}

/// The exit status of a warm worker that ended without taking a job: its profile was disabled
/// (its sandbox goes with it), or its server dropped it. The server then runs a job it had just
/// handed it in a new worker.
pub const DRAINED: u8 = 75;

/// Read the job, run it, write the outcome. The exit status only says whether the outcome could
/// be written (0) or not (125), or that a warm worker took no job ([`DRAINED`]): the server
/// reads everything else from the file.
pub fn main() -> ExitCode {
    // The server's death ends this run: its sandbox dies with this process (parent-death signal).
    if nix::sys::prctl::set_pdeathsig(nix::sys::signal::Signal::SIGKILL).is_err() {
        return ExitCode::from(125);
    }
    let Some(path) = std::env::var_os(JOB_VAR) else {
        let _ = writeln!(
            std::io::stderr(),
            "airlock: __serve-worker is airlock serve's, not for people: run 'airlock run' instead"
        );
        return ExitCode::from(125);
    };
    let job = match read_job(Path::new(&path)) {
        Ok(job) => job,
        Err(e) => {
            let _ = writeln!(std::io::stderr(), "airlock: __serve-worker: {e}");
            return ExitCode::from(125);
        }
    };
    // A server that died before the parent-death signal was set would never send it: this
    // process would then be another's child, and must not start a run no one waits for.
    if nix::unistd::getppid().as_raw() != job.server_pid {
        return ExitCode::from(125);
    }
    // The server decided the way for its process; this one has the same credentials, and a
    // job that says otherwise was not written by it.
    if job.way != airlock_core::Way::of_this_process() {
        let _ = writeln!(
            std::io::stderr(),
            "airlock: __serve-worker: the job's way ({:?}) is not this process's: not run",
            job.way
        );
        return ExitCode::from(125);
    }
    if std::env::var_os(WARM_VAR).is_some() {
        return crate::warm::serve_one(&job);
    }
    let mut answer = Answer::new(&job);
    let outcome = run(&job, &mut answer);
    answer.finish(&outcome)
}

/// The worker's answer to its server: the outcome in the job's result file, then the end of its
/// output streams. PERF: given as soon as core has the report, before what is left of the
/// sandbox is reaped and this process exits: the server answers its client when both streams
/// have ended and the file holds an outcome, and waits for this process only after that.
pub(crate) struct Answer<'a> {
    job: &'a Job,
    /// The exit status once the outcome was written (or could not be).
    given: Option<ExitCode>,
}

impl<'a> Answer<'a> {
    pub(crate) fn new(job: &'a Job) -> Answer<'a> {
        Answer { job, given: None }
    }

    /// The report core gives before the sandbox is reaped.
    pub(crate) fn ran(&mut self, report: &airlock_core::RunReport) {
        if self.given.is_none() {
            let status = write_outcome(self.job, &WorkerReport::Ran(report.end()));
            if status == ExitCode::SUCCESS {
                end_output();
            }
            self.given = Some(status);
        }
    }

    /// The outcome, unless it was given already; the exit status.
    pub(crate) fn finish(self, outcome: &WorkerReport) -> ExitCode {
        match self.given {
            Some(status) => status,
            None => write_outcome(self.job, outcome),
        }
    }
}

/// The server reads this process's stdout and stderr (the command's output, relayed) until
/// their end: both are pointed at /dev/null once the outcome is written. Every byte of the
/// command's output was written before (the relay drains before core reports).
fn end_output() {
    if let Ok(null) = std::fs::OpenOptions::new().write(true).open("/dev/null") {
        let _ = nix::unistd::dup2_stdout(&null);
        let _ = nix::unistd::dup2_stderr(&null);
    }
}

/// The outcome in the job's result file; the exit status says whether it could be written.
pub(crate) fn write_outcome(job: &Job, outcome: &WorkerReport) -> ExitCode {
    let written = serde_json::to_vec(outcome)
        .map_err(std::io::Error::other)
        .and_then(|text| {
            crate::files::create_private(&job.result_file)
                .and_then(|mut file| std::io::Write::write_all(&mut file, &text))
        });
    match written {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            let _ = writeln!(
                std::io::stderr(),
                "airlock: cannot write {}: {e}",
                job.result_file.display()
            );
            ExitCode::from(125)
        }
    }
}

/// The job in the file the server wrote, which is removed once read.
fn read_job(path: &Path) -> Result<Job, String> {
    let text = crate::files::read_private(path)
        .map_err(|e| format!("cannot read the job {}: {e}", path.display()))?;
    let _ = std::fs::remove_file(path);
    serde_json::from_slice(&text)
        .map_err(|e| format!("the job {} is not valid: {e}", path.display()))
}

/// The caller the job describes: the token's role and binding; the server's state directory and
/// environment (where profiles are looked up).
pub(crate) fn caller(job: &Job) -> Caller {
    let env: Vec<(OsString, OsString)> =
        std::env::vars_os().filter(|(k, _)| k != JOB_VAR).collect();
    Caller {
        role: job.role,
        way: job.way,
        state_dir: job.state_dir.clone(),
        cwd: job.cwd.clone(),
        env,
        asked: job.asked.clone(),
        on_busy: nothing_to_tell,
        grant: job.grant(),
    }
}

pub(crate) fn run(job: &Job, answer: &mut Answer) -> WorkerReport {
    let request = job.request();
    match airlock_core::run_answering(&caller(job), request, &mut |report| answer.ran(report)) {
        Ok(report) => WorkerReport::Ran(report.end()),
        Err(err) => WorkerReport::Refused(err.into()),
    }
}
