//! Where an MCP client's commands go: its airlock session over the workspace, made on first use,
//! and the runs it started and has not collected yet. Runs are carried out by `airlock serve`'s
//! workers (a sandbox is never forked from this multi-threaded process); every decision on them
//! is core's, with the client's caller: the person at the machine in the agent role (stdio), or
//! the request's token (HTTP).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use tokio::sync::{mpsc, Mutex, OwnedSemaphorePermit, Semaphore};

use airlock_core::{Caller, ProfileChoice, RunRequest, SessionRequest};
use airlock_core::{ErrorKind, Refusal};
use airlock_runner::{Job, JobEvent, Jobs, Launch, Recorder};

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

/// Runs one client may have at once: going on in the foreground, or started and not yet polled
/// to their end (their output waits in memory until then).
const MAX_RUNS: usize = 8;

/// What every client's runs share: the workers' program, where they leave results, the runs
/// going on (ended when the server stops).
pub struct Runner {
    pub exe: PathBuf,
    pub results_dir: PathBuf,
    pub jobs: Arc<Jobs>,
    /// Bytes of each output stream a run's answer keeps.
    pub keep_output: u64,
}

/// One client's standing: its session, once it has one, and the runs it started for polling.
pub struct Standing {
    pub(crate) session: Mutex<Option<String>>,
    background: Mutex<HashMap<String, Arc<Background>>>,
    started: AtomicU64,
    places: Arc<Semaphore>,
}

impl Default for Standing {
    fn default() -> Self {
        Standing {
            session: Mutex::new(None),
            background: Mutex::new(HashMap::new()),
            started: AtomicU64::new(0),
            places: Arc::new(Semaphore::new(MAX_RUNS)),
        }
    }
}

/// A client's token, for its runs: a place among its runs, a place among its requests in
/// progress (held while core works for a tool), and whether it still opens the door.
pub struct TokenUse {
    pub run_slot: Box<dyn Fn() -> Result<OwnedSemaphorePermit, Refusal> + Send + Sync>,
    pub request_slot: Box<dyn Fn() -> Result<OwnedSemaphorePermit, Refusal> + Send + Sync>,
    pub valid: Arc<dyn Fn() -> bool + Send + Sync>,
}

/// Who asks, for one tool call, and where their runs go.
pub struct Client {
    /// Core's caller: the request's token, or the person at the machine as an agent.
    pub caller: Caller,
    /// The profile a person named (stdio); with a token, its own (core sees to it).
    pub profile: String,
    /// The workspace a person named (stdio); with a token, its own.
    pub workspace: Option<PathBuf>,
    pub token: Option<TokenUse>,
    pub standing: Arc<Standing>,
    pub runner: Arc<Runner>,
}

/// The runner of a server whose caller is `service`.
pub fn runner(service: &Caller, keep_output: u64) -> anyhow::Result<Runner> {
    let state_dir = service.state_dir()?;
    Ok(Runner {
        exe: std::env::current_exe()
            .context("cannot tell where this program is (/proc/self/exe)")?,
        results_dir: airlock_runner::results_dir(&state_dir)?,
        jobs: Arc::new(Jobs::default()),
        keep_output,
    })
}

impl Client {
    /// The client's session: the one it has, or a new one over the workspace.
    pub async fn session(&self) -> Result<String, Refusal> {
        let mut held = self.standing.session.lock().await;
        if let Some(id) = held.as_ref() {
            return Ok(id.clone());
        }
        let id = self.new_session().await?;
        *held = Some(id.clone());
        Ok(id)
    }

    /// Replace the client's session `ended` (applied or discarded by a person) by a new one.
    pub async fn session_after(&self, ended: &str) -> Result<String, Refusal> {
        let mut held = self.standing.session.lock().await;
        if let Some(id) = held.as_ref().filter(|id| id.as_str() != ended) {
            return Ok(id.clone());
        }
        let id = self.new_session().await?;
        *held = Some(id.clone());
        Ok(id)
    }

    /// The session, if the client has one yet.
    pub async fn current_session(&self) -> Option<String> {
        self.standing.session.lock().await.clone()
    }

    async fn new_session(&self) -> Result<String, Refusal> {
        let caller = self.caller.clone();
        let request = match caller.grant {
            // The token's profile and workspace.
            Some(_) => SessionRequest::default(),
            None => SessionRequest {
                profile: ProfileChoice {
                    name: Some(self.profile.clone()),
                    file: None,
                },
                workspace: self.workspace.clone(),
                name: None,
            },
        };
        let summary = self
            .core(move || airlock_core::create_session(&caller, request))
            .await?;
        Ok(summary.meta.id)
    }

    /// Judge the run as core will, before it starts (a session applied or discarded meanwhile, a
    /// disabled profile): what `start` says at once rather than at the first poll.
    pub async fn check(&self, session: &str, ask: &RunAsk) -> Result<(), Refusal> {
        let request = self.job(session, ask).request();
        let caller = self.caller.clone();
        self.core(move || airlock_core::check_run(&caller, request))
            .await
    }

    /// Carry out a core operation for this client on a blocking thread, holding one of its
    /// token's places for requests in progress until it ends, as the API's endpoints hold theirs:
    /// the HTTP layer's place is given back once the answer's head (an event stream) is out,
    /// and a thread waiting for a session another run holds goes on waiting — without a place
    /// of its own, a token could take every thread core's operations share.
    pub async fn core<T: Send + 'static>(
        &self,
        work: impl FnOnce() -> Result<T, airlock_core::Error> + Send + 'static,
    ) -> Result<T, Refusal> {
        let slot = self
            .token
            .as_ref()
            .map(|t| (t.request_slot)())
            .transpose()?;
        let answer = core(work).await;
        drop(slot);
        answer
    }

    /// Start `ask` in `session`; its events come through the returned receiver, which the
    /// caller drops to say it no longer waits (the run is then interrupted and recorded). The
    /// returned place among the client's runs is the caller's to hold until the run's end is
    /// told: a started run's output waits in memory until it is polled, and a place given back
    /// at the run's end let runs never polled pile up without end.
    pub fn start(
        &self,
        session: &str,
        ask: RunAsk,
    ) -> Result<(mpsc::Receiver<JobEvent>, OwnedSemaphorePermit), Refusal> {
        let place = self.standing.places.clone().try_acquire_owned().map_err(|_| {
            Refusal::new(
                ErrorKind::Busy,
                "too_many_runs",
                format!("{MAX_RUNS} runs of this client are going on or waiting to be polled: poll one to its end first"),
            )
        })?;
        let token_slot = self.token.as_ref().map(|t| (t.run_slot)()).transpose()?;
        let token_valid = match &self.token {
            Some(token) => token.valid.clone(),
            None => Arc::new(|| true),
        };
        let job = self.job(session, &ask);
        let (events, receiver) = mpsc::channel(16);
        let runner = self.runner.clone();
        let caller = self.caller.clone();
        let session = session.to_string();
        tokio::spawn(async move {
            let launch = Launch {
                exe: &runner.exe,
                results_dir: &runner.results_dir,
                jobs: runner.jobs.clone(),
                stdin: ask.stdin.map_or(airlock_runner::Input::Nothing, |text| {
                    airlock_runner::Input::Bytes(text.into_bytes())
                }),
                keep_bytes: runner.keep_output,
                token_valid,
                // An agent's runs over MCP are in its session: none is ever warm.
                pool: None,
            };
            let record: Recorder = Arc::new(move |why: &str| {
                airlock_core::audit::record_abandoned(&caller, Some(&session), why)
            });
            airlock_runner::execute(launch, job, events, record).await;
            drop(token_slot);
        });
        Ok((receiver, place))
    }

    /// Keep a started run for `poll`: its id.
    pub async fn remember(&self, run: Arc<Background>) -> String {
        let mut background = self.standing.background.lock().await;
        let number = self.standing.started.fetch_add(1, Ordering::Relaxed) + 1;
        let id = format!("run-{number}");
        background.insert(id.clone(), run);
        id
    }

    /// Poll a started run; once its end is told, it is forgotten.
    pub async fn poll(&self, id: &str, wait: Duration) -> Result<PollAnswer, Refusal> {
        let found = self.standing.background.lock().await.get(id).cloned();
        let run = found.ok_or_else(|| {
            Refusal::new(
                ErrorKind::NotFound,
                "no_such_run",
                format!("no run {id} is going on or waiting to be polled: start answers a run's id, and its end is told once"),
            )
        })?;
        let answer = run.poll(id, wait).await;
        if !answer.as_ref().is_ok_and(|a| a.running) {
            self.standing.background.lock().await.remove(id);
        }
        answer
    }

    fn job(&self, session: &str, ask: &RunAsk) -> Job {
        let grant = self.caller.grant.clone();
        // With a token, its profile (core sees to it); without, the one the person named.
        let profile = ProfileChoice {
            name: grant.is_none().then(|| self.profile.clone()),
            file: None,
        };
        Job {
            state_dir: self.caller.state_dir.clone(),
            role: self.caller.role,
            way: self.caller.way,
            profile: grant
                .as_ref()
                .map_or_else(|| self.profile.clone(), |g| g.profile.clone()),
            workspace: grant.as_ref().and_then(|g| g.workspace.clone()),
            token: grant.map(|g| g.token),
            asked: vec![format!("mcp run: {}", ask.argv.join(" "))],
            cwd: None,
            run: RunRequest {
                argv: ask.argv.iter().map(Into::into).collect(),
                profile,
                session: Some(session.to_string()),
                limit_output: true,
                env: Some(Vec::new()),
                timeout: ask.timeout_ms.map(Duration::from_millis),
                ..RunRequest::default()
            },
            result_file: PathBuf::new(),
            server_pid: std::process::id() as i32,
            stdin_given: false,
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
) -> Result<T, Refusal> {
    match tokio::task::spawn_blocking(work).await {
        Ok(answer) => Ok(answer?),
        Err(e) => Err(Refusal::internal(format!(
            "an operation ended before its answer: {e}"
        ))),
    }
}
