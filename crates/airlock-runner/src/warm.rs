//! A warm worker (`airlock __serve-worker` with [`crate::job::WARM_VAR`] set): it prepares the
//! sandbox of the run its job file describes (core's `prepare_run`), then waits for the job it
//! is to run, which the server writes on its stdin (a length, then the job as JSON) followed by
//! what the command reads; it runs that job in the prepared sandbox (core's `run_prepared`,
//! which judges it as any run and builds another sandbox when the prepared one is not the one
//! the job would get) and writes its outcome as any worker does.
//!
//! The server's pool ends it (SIGKILL; its sandbox goes with it) when the kill switch disables
//! its profile, or when it is no longer wanted (see [`crate::pool`]). It watches nothing itself:
//! a watch of its own (inotify) would cost every run ~10 ms when closed, the kernel waiting for
//! a grace period (SRCU) before the close returns.

use std::io::Read as _;
use std::os::fd::AsFd as _;
use std::process::ExitCode;

use crate::job::{Job, WorkerReport};
use crate::worker::{caller, run, Answer, DRAINED};

/// The most bytes of a job on stdin: far above any job (a command line is at most 64 KiB, six
/// times that in JSON), a bound on what a worker reads.
pub(crate) const MAX_JOB_BYTES: u32 = 32 << 20;

/// Prepare, wait, run one job. Its stdin: the rest of this process's (the request's input), or
/// /dev/null (none).
pub(crate) fn serve_one(prepare: &Job) -> ExitCode {
    let preparer = caller(prepare);
    // SECURITY: first, before this process has read anything of a request: the sandbox's
    // processes are its clones. A preparation that fails is not an answer to anyone: the job,
    // when it comes, is judged and built cold, and its refusal, if any, is recorded then.
    let prepared = airlock_core::prepare_run(&preparer, prepare.request()).ok();
    let job = match read_job_from_stdin() {
        Waited::Job(job) => job,
        Waited::Drained => return ExitCode::from(DRAINED),
        Waited::Unreadable(why) => {
            let _ = std::io::Write::write_all(
                &mut std::io::stderr(),
                format!("airlock: __serve-worker: {why}\n").as_bytes(),
            );
            return ExitCode::from(125);
        }
    };
    // The server that prepared it hands it its jobs alone.
    if job.server_pid != prepare.server_pid || job.way != prepare.way {
        return ExitCode::from(125);
    }
    // What the command reads, whichever sandbox it gets: core gives it this process's stdin.
    if !job.stdin_given {
        let null = std::fs::File::open("/dev/null");
        if null
            .and_then(|null| nix::unistd::dup2_stdin(&null).map_err(std::io::Error::from))
            .is_err()
        {
            return ExitCode::from(125);
        }
    }
    let mut answer = Answer::new(&job);
    let outcome = match prepared {
        Some(prepared) => {
            let ran =
                airlock_core::run_prepared(&caller(&job), prepared, job.request(), &mut |r| {
                    answer.ran(r);
                });
            match ran {
                Ok(report) => WorkerReport::Ran(report.end()),
                Err(err) => WorkerReport::Refused(err.into()),
            }
        }
        None => run(&job, &mut answer),
    };
    answer.finish(&outcome)
}

enum Waited {
    Job(Box<Job>),
    /// The server closed stdin without a job (it let this worker go).
    Drained,
    Unreadable(String),
}

/// A length (u32, little-endian) and that many bytes of JSON, read exactly: what follows is the
/// command's stdin, which the sandbox reads from the same pipe.
fn read_job_from_stdin() -> Waited {
    // Unbuffered: a buffer would take the command's input with the job.
    let mut stdin = match std::io::stdin().as_fd().try_clone_to_owned() {
        Ok(fd) => std::fs::File::from(fd),
        Err(e) => return Waited::Unreadable(format!("cannot read stdin: {e}")),
    };
    let mut length = [0u8; 4];
    match stdin.read_exact(&mut length) {
        Ok(()) => {}
        // Closed without a job: the server dropped this worker.
        Err(e) if e.kind() == std::io::ErrorKind::UnexpectedEof => return Waited::Drained,
        Err(e) => return Waited::Unreadable(format!("cannot read the job: {e}")),
    }
    let length = u32::from_le_bytes(length);
    if length > MAX_JOB_BYTES {
        return Waited::Unreadable(format!("a job of {length} bytes is past the limit"));
    }
    let mut text = vec![0u8; length as usize];
    if let Err(e) = stdin.read_exact(&mut text) {
        return Waited::Unreadable(format!("cannot read the job: {e}"));
    }
    match serde_json::from_slice(&text) {
        Ok(job) => Waited::Job(Box::new(job)),
        Err(e) => Waited::Unreadable(format!("the job on stdin is not valid: {e}")),
    }
}
