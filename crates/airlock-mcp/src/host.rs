//! Where an MCP client's commands go: its airlock session over the workspace, made on first use,
//! and the runs it started and has not collected yet. Runs are carried out by `airlock serve`'s
//! workers (a sandbox is never forked from this multi-threaded process); every decision on them
//! is core's.

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::{mpsc, Mutex, Semaphore};

use airlock_core::{Caller, ProfileChoice, Role, SessionRequest};
use airlock_serve::error::{ApiError, StatusCode};
use airlock_serve::job::Job;
use airlock_serve::jobs::{Event, Jobs, Launch, Recorder};

use crate::runs::{Background, PollAnswer};

/// `airlock mcp` on stdio: the person at the machine hands a client (an agent) the workspace.
#[derive(Debug, Clone)]
pub struct StdioConfig {
    pub state_dir: Option<PathBuf>,
    /// Default: this process's working directory (where clients start their servers).
    pub workspace: Option<PathBuf>,
    /// Default: `default`.
    pub profile: Option<String>,
    /// Go on in this session (id or name) rather than start one at the first run.
    pub session: Option<String>,
    /// Bytes of each output stream a run's answer keeps.
    pub keep_output: u64,
}

/// Runs one client may have going at once (in the foreground and started for polling).
const MAX_RUNS: usize = 8;

fn no_one_to_tell(_: &airlock_core::Session) {}

pub struct Host {
    /// The person at the machine, as an agent: what core lets an agent do, and nothing else.
    pub caller: Caller,
    pub profile: String,
    pub workspace: PathBuf,
    exe: PathBuf,
    results_dir: PathBuf,
    pub jobs: Arc<Jobs>,
    pub keep_output: u64,
    /// The client's session, once it has one.
    session: Mutex<Option<String>>,
    /// Runs started with `start`, by their id, until `poll` has told their end.
    background: Mutex<HashMap<String, Arc<Background>>>,
    places: Arc<Semaphore>,
    started: AtomicU64,
}

impl Host {
    pub fn local(config: StdioConfig) -> anyhow::Result<Host> {
        let mut caller = Caller::this_process(config.state_dir.clone(), no_one_to_tell);
        caller.role = Role::Agent;
        caller.asked = vec!["airlock mcp".into()];
        let workspace = match config.workspace {
            Some(dir) => dir,
            None => std::env::current_dir()
                .context("cannot tell this process's working directory: give --workspace DIR")?,
        };
        let workspace = workspace.canonicalize().with_context(|| {
            format!(
                "--workspace {}: no such directory (give the project the agent works on)",
                workspace.display()
            )
        })?;
        let state_dir = caller.state_dir()?;
        let host = Host {
            profile: config.profile.unwrap_or_else(|| "default".into()),
            workspace,
            exe: std::env::current_exe()
                .context("cannot tell where this program is (/proc/self/exe)")?,
            results_dir: airlock_serve::jobs::results_dir(&state_dir)?,
            jobs: Arc::new(Jobs::default()),
            keep_output: config.keep_output,
            session: Mutex::new(None),
            background: Mutex::new(HashMap::new()),
            places: Arc::new(Semaphore::new(MAX_RUNS)),
            started: AtomicU64::new(0),
            caller,
        };
        if let Some(session) = config.session {
            let summary = airlock_core::session_summary(&host.caller, &session)
                .with_context(|| format!("--session {session}"))?;
            *host.session.try_lock()? = Some(summary.meta.id);
        }
        Ok(host)
    }

    /// The client's session: the one it has, or a new one over the workspace.
    pub async fn session(&self) -> Result<String, ApiError> {
        let mut held = self.session.lock().await;
        if let Some(id) = held.as_ref() {
            return Ok(id.clone());
        }
        let id = self.new_session().await?;
        *held = Some(id.clone());
        Ok(id)
    }

    /// Replace the client's session `ended` (applied or discarded by a person) by a new one.
    pub async fn session_after(&self, ended: &str) -> Result<String, ApiError> {
        let mut held = self.session.lock().await;
        if let Some(id) = held.as_ref().filter(|id| id.as_str() != ended) {
            return Ok(id.clone());
        }
        let id = self.new_session().await?;
        *held = Some(id.clone());
        Ok(id)
    }

    /// The session, if the client has one yet.
    pub async fn current_session(&self) -> Option<String> {
        self.session.lock().await.clone()
    }

    async fn new_session(&self) -> Result<String, ApiError> {
        let caller = self.caller.clone();
        let request = SessionRequest {
            profile: ProfileChoice {
                name: Some(self.profile.clone()),
                file: None,
            },
            workspace: Some(self.workspace.clone()),
            name: None,
        };
        let summary = core(move || airlock_core::create_session(&caller, request)).await?;
        Ok(summary.meta.id)
    }

    /// Start `argv` in `session`; its events come through the returned receiver, which the
    /// caller drops to say it no longer waits (the run is then interrupted and recorded).
    pub fn start(&self, session: &str, ask: RunAsk) -> Result<mpsc::Receiver<Event>, ApiError> {
        let place = self.places.clone().try_acquire_owned().map_err(|_| {
            ApiError::new(
                StatusCode::TOO_MANY_REQUESTS,
                "too_many_runs",
                format!("{MAX_RUNS} runs are going on already: poll one to its end first"),
            )
        })?;
        let job = self.job(session, &ask);
        let (events, receiver) = mpsc::channel(16);
        let launch_parts = (
            self.exe.clone(),
            self.results_dir.clone(),
            self.jobs.clone(),
            self.keep_output,
        );
        let caller = self.caller.clone();
        let session = session.to_string();
        tokio::spawn(async move {
            let (exe, results_dir, jobs, keep_bytes) = launch_parts;
            let launch = Launch {
                exe: &exe,
                results_dir: &results_dir,
                jobs,
                stdin: ask.stdin.map(String::into_bytes),
                keep_bytes,
                token_valid: Arc::new(|| true),
            };
            let record: Recorder = Arc::new(move |why: &str| {
                airlock_core::audit::record_abandoned(&caller, Some(&session), why)
            });
            airlock_serve::jobs::execute(launch, job, events, record).await;
            drop(place);
        });
        Ok(receiver)
    }

    /// Judge the run as core will, before it starts (a session applied or discarded meanwhile, a
    /// disabled profile): what `start` says at once rather than at the first poll.
    pub async fn check(&self, session: &str, ask: &RunAsk) -> Result<(), ApiError> {
        let request = self.job(session, ask).request();
        let caller = self.caller.clone();
        core(move || airlock_core::check_run(&caller, request)).await
    }

    /// Keep a started run for `poll`: its id.
    pub async fn remember(&self, run: Arc<Background>) -> String {
        let mut background = self.background.lock().await;
        let id = format!("run-{}", self.started.fetch_add(1, Ordering::Relaxed) + 1);
        background.insert(id.clone(), run);
        id
    }

    /// Poll a started run; once its end is told, it is forgotten.
    pub async fn poll(&self, id: &str, wait: Duration) -> Result<PollAnswer, ApiError> {
        let run = self.background.lock().await.get(id).cloned().ok_or_else(|| {
            ApiError::new(
                StatusCode::NOT_FOUND,
                "no_such_run",
                format!("no run {id} is going on or waiting to be polled: start answers a run's id, and its end is told once"),
            )
        })?;
        let answer = run.poll(id, wait).await;
        if !answer.as_ref().is_ok_and(|a| a.running) {
            self.background.lock().await.remove(id);
        }
        answer
    }

    fn job(&self, session: &str, ask: &RunAsk) -> Job {
        Job {
            state_dir: self.caller.state_dir.clone(),
            role: self.caller.role,
            token: None,
            profile: self.profile.clone(),
            workspace: None,
            asked: format!("airlock mcp: {}", ask.argv.join(" ")),
            argv: ask.argv.clone(),
            session: Some(session.to_string()),
            workspace_asked: None,
            keep: false,
            env: Vec::new(),
            timeout_ms: ask.timeout_ms,
            result_file: PathBuf::new(),
            server_pid: std::process::id() as i32,
        }
    }
}

/// What a client asked to run, checked.
#[derive(Debug, Clone)]
pub struct RunAsk {
    pub argv: Vec<String>,
    pub stdin: Option<String>,
    pub timeout_ms: Option<u64>,
}

/// Carry out a core operation on a blocking thread (core reads and writes files, takes locks).
pub async fn core<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, airlock_core::Error> + Send + 'static,
) -> Result<T, ApiError> {
    match tokio::task::spawn_blocking(work).await {
        Ok(answer) => Ok(answer?),
        Err(e) => Err(ApiError::internal(format!(
            "an operation ended before its answer: {e}"
        ))),
    }
}
