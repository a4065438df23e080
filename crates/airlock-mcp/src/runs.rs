//! A run's events as a tool answers them: collected to the end (with progress notifications that
//! carry the output as it comes), or kept for `poll` when the run was started in the background.

use std::sync::Mutex;
use std::time::Duration;

use rmcp::model::{ProgressNotificationParam, ProgressToken};
use rmcp::{Peer, RoleServer};
use schemars::JsonSchema;
use serde::Serialize;
use tokio::sync::{mpsc, Notify, OwnedSemaphorePermit};

use airlock_core::Refusal;
use airlock_runner::{JobEnd, JobEvent, Stream};

/// A finished run, as `run` and `poll` answer it.
#[derive(Debug, Clone, Serialize, JsonSchema)]
pub struct RunResult {
    /// The command's exit status; 124 when the time limit ended it, 152 the CPU limit, 153 the
    /// disk limit, 137 a kill (the kill switch, or memory).
    pub exit_code: i32,
    pub stdout: String,
    pub stderr: String,
    /// More output came than this server keeps of a run; the rest was dropped.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub duration_ms: u64,
    /// The limit that ended the run: timeout, cpu, disk, memory or kill_switch; null if none.
    pub limit: Option<String>,
    /// What airlock says of the run beyond its output (a limit reached, output dropped, a kill),
    /// in the words every front end uses.
    pub notes: Vec<String>,
    /// What the network gate refused during the run, a destination each (the notes say it in
    /// words).
    pub refused: Vec<airlock_core::RefusedDestination>,
    /// The airlock session the command ran in: its file changes stay there.
    pub session: String,
    /// What happens to the changes: a person reviews and applies them; the agent cannot.
    pub review: String,
}

/// What is said to the agent of its changes, every time.
pub fn review_note(session: &str) -> String {
    format!(
        "Changes to files stay in airlock session {session} and do not reach the workspace until a person reviews and applies them (airlock diff {session}; airlock apply {session}). You cannot apply them yourself; the changes tool shows them."
    )
}

/// Output so far, each stream's bytes kept and carried.
#[derive(Debug, Default)]
struct Output {
    stdout: Vec<u8>,
    stderr: Vec<u8>,
}

impl Output {
    fn take(&mut self, stream: Stream, data: &[u8]) {
        match stream {
            Stream::Stdout => self.stdout.extend_from_slice(data),
            Stream::Stderr => self.stderr.extend_from_slice(data),
        }
    }
}

fn lossy(bytes: Vec<u8>) -> String {
    String::from_utf8(bytes).unwrap_or_else(|e| String::from_utf8_lossy(e.as_bytes()).into_owned())
}

/// The result of a run that ended, with the output the answer carries, and how many bytes of
/// each stream were passed on in all (to say whether the run's output was cut).
fn result_of(
    finished: JobEnd,
    output: Output,
    passed: (u64, u64),
    session: &str,
) -> Result<RunResult, Refusal> {
    let (ran, duration, totals) = match finished {
        JobEnd::Ran {
            ran,
            duration,
            totals,
        } => (ran, duration, totals),
        JobEnd::Refused(error) => return Err(error),
    };
    let notes = ran.notes();
    let refused = ran.refused;
    let session = ran.session.unwrap_or_else(|| session.to_string());
    Ok(RunResult {
        exit_code: ran.exit_code,
        stdout: lossy(output.stdout),
        stderr: lossy(output.stderr),
        stdout_truncated: totals.0 > passed.0 || ran.output_dropped > 0,
        stderr_truncated: totals.1 > passed.1 || ran.output_dropped > 0,
        duration_ms: duration.as_millis() as u64,
        limit: ran.limit.map(|limit| limit.as_str().to_string()),
        notes,
        refused,
        review: review_note(&session),
        session,
    })
}

/// Where progress notifications go, if the client asked for them.
pub struct Progress {
    pub peer: Peer<RoleServer>,
    pub token: ProgressToken,
}

impl Progress {
    async fn tell(&self, carried: u64, stream: Stream, data: &[u8]) {
        let prefix = match stream {
            Stream::Stdout => "",
            Stream::Stderr => "[stderr] ",
        };
        let message = format!("{prefix}{}", String::from_utf8_lossy(data));
        let param = ProgressNotificationParam::new(self.token.clone(), carried as f64)
            .with_message(message);
        // A client that no longer listens to progress still gets the answer.
        let _ = self.peer.notify_progress(param).await;
    }
}

/// Wait for the run to end: its result, the output in it. Dropping this future (the client
/// cancelled the call) drops `events`, which interrupts the run.
pub async fn collect(
    mut events: mpsc::Receiver<JobEvent>,
    progress: Option<Progress>,
    session: &str,
) -> Result<RunResult, Refusal> {
    let mut output = Output::default();
    let mut passed = (0u64, 0u64);
    while let Some(event) = events.recv().await {
        match event {
            JobEvent::Output { stream, data } => {
                count(&mut passed, stream, data.len());
                if let Some(progress) = &progress {
                    progress.tell(passed.0 + passed.1, stream, &data).await;
                }
                output.take(stream, &data);
            }
            JobEvent::Done(finished) => return result_of(*finished, output, passed, session),
        }
    }
    Err(ended_without_result())
}

fn count(passed: &mut (u64, u64), stream: Stream, bytes: usize) {
    match stream {
        Stream::Stdout => passed.0 += bytes as u64,
        Stream::Stderr => passed.1 += bytes as u64,
    }
}

fn ended_without_result() -> Refusal {
    Refusal::internal("the run ended without a result — please report it")
}

/// A run started with `start`: its output not yet polled, and its end once it came.
pub struct Background {
    pub session: String,
    state: Mutex<Kept>,
    changed: Notify,
    /// The run's place among its client's runs, given back when the run is forgotten (its end
    /// polled), not when it ends: its output is kept here until then.
    _place: OwnedSemaphorePermit,
}

#[derive(Default)]
struct Kept {
    unread: Output,
    passed: (u64, u64),
    /// The run's end; the output it carried was passed on before it.
    ended: Option<Result<RunResult, Refusal>>,
}

/// What `poll` answers: the output since the last poll, and the result once the run ended.
#[derive(Debug, Serialize, JsonSchema)]
pub struct PollAnswer {
    pub run: String,
    /// The run goes on: poll again for the rest.
    pub running: bool,
    /// Output since the last poll.
    pub stdout: String,
    pub stderr: String,
    /// Once the run has ended (its stdout and stderr fields empty: the output came in polls).
    pub result: Option<RunResult>,
}

impl Background {
    /// Keep the run's events as they come, on a task of its own.
    pub fn follow(
        session: String,
        mut events: mpsc::Receiver<JobEvent>,
        place: OwnedSemaphorePermit,
    ) -> std::sync::Arc<Self> {
        let run = std::sync::Arc::new(Background {
            session,
            state: Mutex::new(Kept::default()),
            changed: Notify::new(),
            _place: place,
        });
        let kept = run.clone();
        tokio::spawn(async move {
            while let Some(event) = events.recv().await {
                let done = kept.keep(event);
                kept.changed.notify_waiters();
                if done {
                    return;
                }
            }
            kept.end(Err(ended_without_result()));
        });
        run
    }

    /// Keep one event; whether it was the last.
    fn keep(&self, event: JobEvent) -> bool {
        let Ok(mut kept) = self.state.lock() else {
            return true;
        };
        match event {
            JobEvent::Output { stream, data } => {
                count(&mut kept.passed, stream, data.len());
                kept.unread.take(stream, &data);
                false
            }
            JobEvent::Done(finished) => {
                let passed = kept.passed;
                kept.ended = Some(result_of(
                    *finished,
                    Output::default(),
                    passed,
                    &self.session,
                ));
                true
            }
        }
    }

    fn end(&self, result: Result<RunResult, Refusal>) {
        if let Ok(mut kept) = self.state.lock() {
            kept.ended.get_or_insert(result);
        }
        self.changed.notify_waiters();
    }

    /// Wait up to `wait` for output or the end, then say what there is. The run's end, once
    /// told, is its last answer (the caller forgets the run).
    pub async fn poll(&self, id: &str, wait: Duration) -> Result<PollAnswer, Refusal> {
        let waited = self.changed.notified();
        if self.is_quiet() {
            let _ = tokio::time::timeout(wait, waited).await;
        }
        let mut kept = self
            .state
            .lock()
            .map_err(|_| Refusal::internal("a run's output was lost — please report it"))?;
        let unread = std::mem::take(&mut kept.unread);
        let result = kept.ended.take().transpose()?;
        Ok(PollAnswer {
            run: id.to_string(),
            running: result.is_none(),
            stdout: lossy(unread.stdout),
            stderr: lossy(unread.stderr),
            result,
        })
    }

    /// No output waits and the run goes on.
    fn is_quiet(&self) -> bool {
        self.state.lock().is_ok_and(|kept| {
            kept.unread.stdout.is_empty() && kept.unread.stderr.is_empty() && kept.ended.is_none()
        })
    }
}
