//! The front end's side of a run: start a worker process, pass the command's output on as it
//! comes, read the outcome; kill the run if its client goes away or the front end stops.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde::Serialize;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWriteExt};
use tokio::process::Command;
use tokio::sync::mpsc;

use airlock_core::{ErrorKind, Refusal, RunAnswer, RunEnd, RunResult};

use crate::job::{Job, WorkerReport, JOB_VAR};

/// What a run sends its client, in order: output as it comes, then the result (or a refusal).
#[derive(Debug)]
pub enum JobEvent {
    Output { stream: Stream, data: Vec<u8> },
    Done(Box<JobEnd>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Stream {
    Stdout,
    Stderr,
}

/// How a run ended, as the server saw it.
#[derive(Debug)]
pub enum JobEnd {
    Ran {
        ran: RunEnd,
        duration: Duration,
        /// Bytes each stream carried (stdout, stderr), kept or not.
        totals: (u64, u64),
    },
    Refused(Refusal),
}

/// Writes `run.abandoned` for a run, saying why.
pub type Recorder = Arc<dyn Fn(&str) + Send + Sync>;

/// The workers running now, so that a stopping server can end them (and record why), and the
/// workers that have answered and are reaping what is left of their sandbox (no recorder: their
/// run ended, and they are neither interrupted nor recorded as abandoned, only waited for).
#[derive(Default)]
pub struct Jobs {
    running: Mutex<HashMap<u64, (u32, Option<Recorder>)>>,
    next: AtomicU64,
    /// Set once the server stops: no new run starts.
    closed: std::sync::atomic::AtomicBool,
}

impl Jobs {
    fn enter(&self, pid: u32, recorder: Recorder) -> Option<u64> {
        let id = self.next.fetch_add(1, Ordering::Relaxed);
        let mut running = self.running.lock().ok()?;
        if self.closed.load(Ordering::SeqCst) {
            return None;
        }
        running.insert(id, (pid, Some(recorder)));
        Some(id)
    }

    /// The worker gave its answer: its run has ended, and it only reaps its sandbox now.
    fn answered(&self, id: u64) {
        if let Ok(mut running) = self.running.lock() {
            if let Some(entry) = running.get_mut(&id) {
                entry.1 = None;
            }
        }
    }

    /// Wait, up to `within`, until no worker is left, answered ones included: a front end that
    /// exits first would have their reaping cut short (they die with it, by their parent-death
    /// signal, and leave their run's cgroups behind).
    pub async fn all_ended(&self, within: Duration) {
        let deadline = tokio::time::Instant::now() + within;
        while self.count() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
    }

    fn leave(&self, id: u64) {
        if let Ok(mut running) = self.running.lock() {
            running.remove(&id);
        }
    }

    pub fn count(&self) -> usize {
        self.running.lock().map_or(0, |r| r.len())
    }

    /// Stop taking runs, and interrupt every worker (see [`interrupt`]), recording why.
    pub fn close_and_interrupt(&self) {
        self.closed.store(true, Ordering::SeqCst);
        for (pid, recorder) in self.running_now() {
            recorder("the server stopped and its grace period ended: the run was interrupted, then killed");
            tokio::spawn(interrupt(pid));
        }
    }

    /// The workers whose run goes on (a copy: signalling them must not hold the table).
    fn running_now(&self) -> Vec<(u32, Recorder)> {
        self.running
            .lock()
            .map(|r| {
                r.values()
                    .filter_map(|(pid, recorder)| Some((*pid, recorder.clone()?)))
                    .collect()
            })
            .unwrap_or_default()
    }

    pub fn close(&self) {
        self.closed.store(true, Ordering::SeqCst);
    }

    /// Pass `signal` on to every worker, which passes it on to its command as `airlock run` does
    /// (a second interrupt or termination kills the sandbox).
    pub fn signal_all(&self, signal: Signal) {
        for (pid, _) in self.running_now() {
            if let Ok(pid) = i32::try_from(pid) {
                let _ = kill(Pid::from_raw(pid), signal);
            }
        }
    }
}

/// End a worker's run the way a person at a terminal would: an interrupt (passed on to the
/// command), then a second, which kills the sandbox. The worker then records the result.
async fn interrupt(pid: u32) {
    let Ok(pid) = i32::try_from(pid) else {
        return;
    };
    let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
    // Two signals sent at once would be one: the worker reads them from a signalfd.
    tokio::time::sleep(Duration::from_millis(100)).await;
    let _ = kill(Pid::from_raw(pid), Signal::SIGTERM);
}

/// Where workers leave their results (`STATE/serve`, this user's alone), made ready: what the
/// workers of a server killed outright left there is removed, and their runs' cgroups (empty).
pub fn results_dir(state_dir: &Path) -> anyhow::Result<PathBuf> {
    let dir = state_dir.join("serve");
    crate::files::private_dir(&dir)?;
    airlock_core::tidy_after_crash();
    remove_results(&dir);
    Ok(dir)
}

/// Result files the workers of a server that was killed left (named `SERVERPID-N.json`; those of
/// a server still running on the same state directory are its own).
fn remove_results(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name();
        let server = name
            .to_str()
            .and_then(|n| n.split_once('-'))
            .map(|(pid, _)| pid);
        if server
            .is_some_and(|pid| pid.parse::<u32>().is_ok() && !Path::new("/proc").join(pid).exists())
        {
            let _ = std::fs::remove_file(entry.path());
        }
    }
}

/// What the command reads on its stdin.
#[derive(Debug, Clone)]
pub enum Input {
    /// End of file at once.
    Nothing,
    /// These bytes (a request's body), written beside the run.
    Bytes(Vec<u8>),
    /// The front end's own stdin, handed to the worker as it is (`airlock run --json`): read as
    /// the command reads it, never gathered first.
    Inherit,
}

/// What starting a worker needs from the server.
pub struct Launch<'a> {
    pub exe: &'a Path,
    pub results_dir: &'a Path,
    pub jobs: Arc<Jobs>,
    pub stdin: Input,
    /// Bytes of each stream passed on; the rest is counted, not kept.
    pub keep_bytes: u64,
    /// Whether the request's token still opens the door: once revoked or expired, its run is
    /// interrupted (a revocation stops what the token started, not only what it asks next).
    pub token_valid: Arc<dyn Fn() -> bool + Send + Sync>,
    /// Warm workers to take the run from, and to refill once it ends (see [`crate::pool`]).
    pub pool: Option<Arc<crate::pool::WarmPool>>,
}

/// How long an interrupted run has to end before its worker is killed.
const KILL_AFTER_INTERRUPT: Duration = Duration::from_secs(10);

/// How often a run's token is looked at again.
const TOKEN_CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// How the relay of a run's output ended.
enum Relay {
    /// Both streams reached their end: the bytes each carried.
    Done(u64, u64),
    ClientGone,
    TokenEnded,
}

/// Start the run and pass its events to `events` until it ends. If `events` is closed (the client
/// went away), the run is interrupted; `abandoned` is then called once it has ended.
pub async fn execute(
    launch: Launch<'_>,
    mut job: Job,
    events: mpsc::Sender<JobEvent>,
    abandoned: Recorder,
) {
    let started = Instant::now();
    job.result_file = launch.results_dir.join(format!(
        "{}-{}.json",
        std::process::id(),
        launch.jobs.next.fetch_add(1, Ordering::Relaxed)
    ));
    let kind = launch
        .pool
        .as_ref()
        .and_then(|_| crate::pool::WarmPool::kind_of(&job, &launch.stdin));
    let warm = kind.as_ref().map(|(key, _)| key.as_str());
    let finished = match run_worker(&launch, &job, warm, &events, abandoned.clone()).await {
        Ok(Some((outcome, totals))) => finished(outcome, started.elapsed(), totals),
        Ok(None) => {
            abandoned("the client went away before the run ended: it was interrupted, then killed");
            let _ = std::fs::remove_file(&job.result_file);
            return;
        }
        Err(err) => JobEnd::Refused(err),
    };
    // SECURITY: only a run that ran (core let it) makes its kind worth keeping warm: refused
    // requests (a workspace beyond the token's, a disabled profile) prepare nothing.
    let ran = matches!(finished, JobEnd::Ran { .. });
    let _ = events.send(JobEvent::Done(Box::new(finished))).await;
    // The answer goes out first: removing the file and refilling the pool are no part of it. The
    // request's task was woken to this thread's next turn, which this task keeps until it yields.
    tokio::task::yield_now().await;
    let _ = std::fs::remove_file(&job.result_file);
    if let (Some(pool), Some((key, template)), true) = (&launch.pool, kind, ran) {
        pool.refill(key, &template, launch.token_valid.clone());
    }
}

fn finished(outcome: WorkerReport, duration: Duration, totals: (u64, u64)) -> JobEnd {
    match outcome {
        WorkerReport::Ran(ran) => JobEnd::Ran {
            ran,
            duration,
            totals,
        },
        WorkerReport::Refused(refusal) => JobEnd::Refused(refusal),
    }
}

/// A worker started for a run: a warm one from the pool, given its job on stdin, or a new one
/// with its job in a file.
struct Started {
    child: tokio::process::Child,
    job_file: Option<PathBuf>,
}

/// Run the worker to its end: its outcome, and the bytes each stream carried. None: the client
/// went away, and the run was ended for it. `warm`: the run's kind in the pool, to take a warm
/// worker of.
async fn run_worker(
    launch: &Launch<'_>,
    job: &Job,
    warm: Option<&str>,
    events: &mpsc::Sender<JobEvent>,
    recorder: Recorder,
) -> Result<Option<(WorkerReport, (u64, u64))>, Refusal> {
    let _ = std::fs::remove_file(&job.result_file);
    let framed = match warm {
        Some(_) => frame(job, &launch.stdin)?,
        None => None,
    };
    let taken = match (warm, &framed) {
        (Some(key), Some(_)) => launch.pool.as_ref().and_then(|pool| pool.take(key)),
        _ => None,
    };
    let from_pool = taken.is_some();
    let started = match (taken, framed) {
        (Some(warm), Some(framed)) => hand_over(warm, framed),
        _ => start_cold(launch, job)?,
    };
    let outcome = follow(launch, job, started, events, recorder.clone()).await;
    match outcome {
        // A warm worker that ended without taking the job (it found its stdin ended before a
        // job came: not expected of one handed a job, but then nothing of the job ran): the job
        // goes to a new worker, which judges it. Any other end is the run's, never run twice.
        Err(Followed::Drained) if from_pool => {
            Box::pin(run_worker(launch, job, None, events, recorder)).await
        }
        Err(Followed::Drained) => Err(Refusal::internal(
            "the run's worker ended before it took its job — please report it",
        )),
        Err(Followed::Refused(refusal)) => Err(refusal),
        Ok(done) => Ok(done),
    }
}

/// How following a worker failed.
enum Followed {
    /// It ended with [`crate::worker::DRAINED`] and no result: it never took the job.
    Drained,
    Refused(Refusal),
}

impl From<Refusal> for Followed {
    fn from(refusal: Refusal) -> Followed {
        Followed::Refused(refusal)
    }
}

/// What a warm worker is given on stdin: the job's length and the job, then the command's input;
/// end of file then. None: a job too large for a warm worker (it goes to a new one).
fn frame(job: &Job, stdin: &Input) -> Result<Option<Vec<u8>>, Refusal> {
    let mut job = job.clone();
    job.stdin_given = matches!(stdin, Input::Bytes(_));
    let text = serde_json::to_vec(&job)
        .map_err(|e| Refusal::internal(format!("cannot encode the job: {e}")))?;
    let Some(length) = u32::try_from(text.len())
        .ok()
        .filter(|n| *n <= crate::warm::MAX_JOB_BYTES)
    else {
        return Ok(None);
    };
    let mut framed = length.to_le_bytes().to_vec();
    framed.extend_from_slice(&text);
    if let Input::Bytes(data) = stdin {
        framed.extend_from_slice(data);
    }
    Ok(Some(framed))
}

/// A warm worker given its framed job.
fn hand_over(warm: crate::pool::Warm, framed: Vec<u8>) -> Started {
    let mut child = warm.child;
    if let Some(mut pipe) = child.stdin.take() {
        // Written beside the run: a command that reads nothing must not block on a full pipe.
        tokio::spawn(async move {
            let _ = pipe.write_all(&framed).await;
        });
    }
    Started {
        child,
        job_file: None,
    }
}

/// A new worker for `job`, its job in a file beside its result.
fn start_cold(launch: &Launch<'_>, job: &Job) -> Result<Started, Refusal> {
    let job_file = job.result_file.with_extension("job.json");
    // What a process of the same pid left (unlink does not follow a symlink): the files are then
    // made anew, and a name planted meanwhile fails the run rather than being written through.
    let _ = std::fs::remove_file(&job_file);
    write_job(&job_file, job)?;
    let started = Command::new(launch.exe)
        .arg("__serve-worker")
        .env(JOB_VAR, &job_file)
        .stdin(match launch.stdin {
            Input::Nothing => Stdio::null(),
            Input::Bytes(_) => Stdio::piped(),
            Input::Inherit => Stdio::inherit(),
        })
        // A group of its own: a terminal's Ctrl-C reaches the front end, which passes it on
        // (see [`Jobs::signal_all`]), never the worker twice.
        .process_group(0)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .kill_on_drop(false)
        .spawn();
    let mut child = started.map_err(|e| {
        let _ = std::fs::remove_file(&job_file);
        Refusal::internal(format!(
            "cannot start {} __serve-worker: {e}",
            launch.exe.display()
        ))
    })?;
    if let (Some(mut stdin), Input::Bytes(data)) = (child.stdin.take(), launch.stdin.clone()) {
        // Written beside the run: a command that reads nothing must not block on a full pipe.
        tokio::spawn(async move {
            let _ = stdin.write_all(&data).await;
        });
    }
    Ok(Started {
        child,
        job_file: Some(job_file),
    })
}

/// Relay the worker's output until it ends, and read its outcome.
async fn follow(
    launch: &Launch<'_>,
    job: &Job,
    started: Started,
    events: &mpsc::Sender<JobEvent>,
    recorder: Recorder,
) -> Result<Option<(WorkerReport, (u64, u64))>, Followed> {
    let Started {
        mut child,
        job_file,
    } = started;
    let pid = child.id().unwrap_or(0);
    let Some(entry) = launch.jobs.enter(pid, recorder.clone()) else {
        let _ = child.start_kill();
        let _ = child.wait().await;
        return Err(stopping().into());
    };
    let stdout = child.stdout.take();
    let stderr = child.stderr.take();
    let keep = launch.keep_bytes;
    let relay = async {
        tokio::join!(
            pass_on(stdout, Stream::Stdout, events, keep),
            pass_on(stderr, Stream::Stderr, events, keep)
        )
    };
    let relayed = tokio::select! {
        (Some(out), Some(err)) = relay => Relay::Done(out, err),
        () = events.closed() => Relay::ClientGone,
        () = token_ended(launch.token_valid.as_ref()) => Relay::TokenEnded,
        else => Relay::ClientGone,
    };
    if let Relay::Done(out, err) = relayed {
        // PERF: a worker ends its output once its outcome is written, before it reaps what is
        // left of its sandbox and exits: the answer does not wait for that (see
        // `worker::Answer`). A worker that ended without an outcome is waited for below.
        if let Some(outcome) = written_outcome(&job.result_file) {
            let jobs = launch.jobs.clone();
            jobs.answered(entry);
            tokio::spawn(async move {
                let _ = child.wait().await;
                jobs.leave(entry);
            });
            if let Some(job_file) = &job_file {
                let _ = std::fs::remove_file(job_file);
            }
            return Ok(Some((outcome, (out, err))));
        }
    } else {
        interrupt(pid).await;
    }
    let status = match tokio::time::timeout(KILL_AFTER_INTERRUPT, child.wait()).await {
        Ok(status) => status,
        // Two interrupts that came before the command started are one to it (pending signals
        // merge), and a command may ignore them: the worker is killed, its sandbox with it.
        Err(_) if !matches!(relayed, Relay::Done(..)) => {
            let _ = child.start_kill();
            child.wait().await
        }
        Err(_) => child.wait().await,
    };
    // The worker removes it once read; not if it died first.
    if let Some(job_file) = &job_file {
        let _ = std::fs::remove_file(job_file);
    }
    launch.jobs.leave(entry);
    let drained = status
        .as_ref()
        .is_ok_and(|s| s.code() == Some(i32::from(crate::worker::DRAINED)))
        && !job.result_file.exists();
    match relayed {
        Relay::Done(..) if drained => Err(Followed::Drained),
        Relay::ClientGone => Ok(None),
        Relay::TokenEnded => {
            recorder("the token was revoked, or expired, before the run ended: it was interrupted, then killed");
            Err(token_ended_error().into())
        }
        Relay::Done(out, err) => Ok(Some((read_outcome(&job.result_file, status)?, (out, err)))),
    }
}

/// Returns once the token no longer opens the door.
async fn token_ended(token_valid: &(dyn Fn() -> bool + Send + Sync)) {
    loop {
        tokio::time::sleep(TOKEN_CHECK_INTERVAL).await;
        if !token_valid() {
            return;
        }
    }
}

fn token_ended_error() -> Refusal {
    Refusal::new(
        ErrorKind::Unauthenticated,
        "token_ended",
        "the token was revoked, or expired, while the run went on: the run was interrupted, then killed",
    )
}

/// The job, for the worker to read, in a file only this user may read (it names the token's id,
/// its workspace, the command and its environment).
pub(crate) fn write_job(path: &Path, job: &Job) -> Result<(), Refusal> {
    use std::io::Write as _;
    let text = serde_json::to_vec(job)
        .map_err(|e| Refusal::internal(format!("cannot encode the job: {e}")))?;
    crate::files::create_private(path)
        .and_then(|mut file| file.write_all(&text))
        .map_err(|e| {
            Refusal::internal(format!(
                "cannot write the run's job {}: {e}",
                path.display()
            ))
        })
}

fn stopping() -> Refusal {
    Refusal::new(
        ErrorKind::Unavailable,
        "server_stopping",
        "the server is stopping: it starts no new runs; ask again once it is back",
    )
}

/// Pass a stream on in chunks, up to `keep` bytes; read the rest to its end (the sandbox must
/// not block on it). The bytes it carried; None: the client is gone.
async fn pass_on(
    from: Option<impl AsyncRead + Unpin>,
    stream: Stream,
    events: &mpsc::Sender<JobEvent>,
    keep: u64,
) -> Option<u64> {
    let Some(mut from) = from else {
        return Some(0);
    };
    let mut carried = 0u64;
    // Read into room not zeroed first, and under 64 KiB: freeing a chunk that large makes glibc's
    // malloc consolidate its fast bins. Both showed in the server's profile, for every run.
    let mut buf = Vec::with_capacity(32 * 1024);
    loop {
        buf.clear();
        let n = match from.read_buf(&mut buf).await {
            Ok(0) | Err(_) => return Some(carried),
            Ok(n) => n,
        };
        let room = keep.saturating_sub(carried).min(n as u64) as usize;
        carried += n as u64;
        if room > 0 {
            let event = JobEvent::Output {
                stream,
                data: buf[..room].to_vec(),
            };
            events.send(event).await.ok()?;
        } else if events.is_closed() {
            return None;
        }
    }
}

/// The outcome in a worker's result file, if it holds a whole one.
fn written_outcome(path: &Path) -> Option<WorkerReport> {
    let text = crate::files::read_private(path).ok()?;
    serde_json::from_slice(&text).ok()
}

fn read_outcome(
    path: &Path,
    status: std::io::Result<std::process::ExitStatus>,
) -> Result<WorkerReport, Refusal> {
    let text = crate::files::read_private(path).map_err(|e| {
        Refusal::internal(format!(
            "the run's worker ended ({}) without a result in {}: {e}",
            status.map_or_else(|e| e.to_string(), |s| s.to_string()),
            path.display()
        ))
    })?;
    serde_json::from_slice(&text).map_err(|e| {
        Refusal::internal(format!(
            "the run's result {} is not valid: {e}",
            path.display()
        ))
    })
}

/// How the run ended, from the worker's end, what the front end saw, and the bytes of each
/// stream it kept.
pub fn result_of(end: JobEnd, kept: (u64, u64)) -> Result<RunResult, Refusal> {
    match end {
        JobEnd::Ran {
            ran,
            duration,
            totals,
        } => Ok(RunResult {
            end: ran,
            stdout_truncated: totals.0 > kept.0,
            stderr_truncated: totals.1 > kept.1,
            duration_ms: u64::try_from(duration.as_millis()).unwrap_or(u64::MAX),
        }),
        JobEnd::Refused(refusal) => Err(refusal),
    }
}

/// A run's events gathered into one answer, as the API gives it (and `airlock run --json`).
pub async fn collect(events: &mut mpsc::Receiver<JobEvent>) -> Result<RunAnswer, Refusal> {
    let (result, out, err) = collect_bytes(events).await?;
    Ok(RunAnswer {
        result,
        stdout: lossy(out),
        stderr: lossy(err),
    })
}

/// A run's result and its output as the bytes it wrote (stdout, stderr), as much as was kept.
pub async fn collect_bytes(
    events: &mut mpsc::Receiver<JobEvent>,
) -> Result<(RunResult, Vec<u8>, Vec<u8>), Refusal> {
    let mut out = Vec::new();
    let mut err = Vec::new();
    while let Some(event) = events.recv().await {
        match event {
            JobEvent::Output {
                stream: Stream::Stdout,
                data,
            } => out.extend_from_slice(&data),
            JobEvent::Output {
                stream: Stream::Stderr,
                data,
            } => err.extend_from_slice(&data),
            JobEvent::Done(end) => {
                let kept = (out.len() as u64, err.len() as u64);
                return Ok((result_of(*end, kept)?, out, err));
            }
        }
    }
    Err(Refusal::internal(
        "the run ended without a result — please report it",
    ))
}

/// UTF-8, each byte that is not becoming U+FFFD.
fn lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_answered_worker_is_waited_for_but_neither_interrupted_nor_recorded() {
        // Found by review: a worker reaping its sandbox after its answer was recorded as
        // abandoned ("interrupted, then killed") by a front end stopping meanwhile (an MCP
        // client closing stdin right after its answer), and sent SIGTERM.
        let jobs = Jobs::default();
        let recorded = Arc::new(AtomicU64::new(0));
        let counted = recorded.clone();
        let recorder: Recorder = Arc::new(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        // No such pid: nothing is signalled whatever happens.
        let id = jobs.enter(u32::MAX, recorder).unwrap();
        jobs.answered(id);
        jobs.close_and_interrupt();
        jobs.signal_all(Signal::SIGTERM);
        assert_eq!(recorded.load(Ordering::SeqCst), 0, "recorded as abandoned");
        assert_eq!(jobs.count(), 1, "no longer waited for");
        jobs.leave(id);
        assert_eq!(jobs.count(), 0);
    }
}
