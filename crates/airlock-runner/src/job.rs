//! What a front end hands a worker process for one run, and what the worker hands back. The
//! command's stdout and stderr are the worker's; the job comes in a file the front end names in
//! an environment variable (a job can be larger than one variable may be: 128 KiB, and a 64 KiB
//! command line of control characters is six times that in JSON), the result goes to a file the
//! front end names.

use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use airlock_core::{Grant, Refusal, Role, RunEnd, RunRequest, Way};

/// The environment variable naming the file the job is in (the worker removes it once read).
pub const JOB_VAR: &str = "AIRLOCK_SERVE_JOB";

/// Set for a warm worker: its job file holds the run to prepare (no command), and the job it
/// runs comes later on its stdin (see [`crate::warm`]).
pub const WARM_VAR: &str = "AIRLOCK_SERVE_WARM";

#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Job {
    /// The server's state directory, as it was told it.
    pub state_dir: Option<PathBuf>,
    pub role: Role,
    /// The way the server builds sandboxes, decided once for it: the worker takes it as given.
    pub way: Way,
    /// The request's token (its id): the job is bound by it. None: the person at the machine
    /// asked (through `airlock mcp` on stdio), as they would with `airlock run`.
    pub token: Option<String>,
    /// The token's profile, or the one the person named.
    pub profile: String,
    /// The token's workspace (canonical).
    pub workspace: Option<PathBuf>,
    /// The request line, for refusal records.
    pub asked: Vec<String>,
    /// The caller's working directory, where its relative paths start: the CLI's; None for a
    /// server's request, whose paths must be absolute.
    #[serde(default)]
    pub cwd: Option<PathBuf>,
    /// The run, exactly as the front end asked core for it.
    pub run: RunRequest,
    /// Where the worker writes its [`WorkerReport`].
    pub result_file: PathBuf,
    /// The server's pid: a worker whose parent is no longer it does not start the run.
    pub server_pid: i32,
    /// A warm worker's job only: the command reads what follows the job on the worker's stdin.
    /// False: it reads /dev/null, as a cold worker's command does when given no input.
    #[serde(default)]
    pub stdin_given: bool,
}

impl Job {
    pub fn grant(&self) -> Option<Grant> {
        self.token.as_ref().map(|token| Grant {
            token: token.clone(),
            profile: self.profile.clone(),
            workspace: self.workspace.clone(),
        })
    }

    /// The run core is asked for, as the front end put it.
    pub fn request(&self) -> RunRequest {
        self.run.clone()
    }
}

/// What the worker reports: a finished run, or why none ran.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WorkerReport {
    /// A run core carried out (the output itself came through the pipes).
    Ran(RunEnd),
    Refused(Refusal),
}
