//! What a front end hands a worker process for one run, and what the worker hands back. The
//! command's stdout and stderr are the worker's; the job comes in a file the front end names in
//! an environment variable (a job can be larger than one variable may be: 128 KiB, and a 64 KiB
//! command line of control characters is six times that in JSON), the result goes to a file the
//! front end names.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use airlock_core::{Grant, ProfileChoice, Refusal, Role, RunEnd, RunRequest, Way};

/// The environment variable naming the file the job is in (the worker removes it once read).
pub const JOB_VAR: &str = "AIRLOCK_SERVE_JOB";

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
    pub asked: String,
    pub argv: Vec<String>,
    pub session: Option<String>,
    pub workspace_asked: Option<PathBuf>,
    pub keep: bool,
    pub env: Vec<(String, String)>,
    pub timeout_ms: Option<u64>,
    /// Where the worker writes its [`WorkerReport`].
    pub result_file: PathBuf,
    /// The server's pid: a worker whose parent is no longer it does not start the run.
    pub server_pid: i32,
}

impl Job {
    pub fn grant(&self) -> Option<Grant> {
        self.token.as_ref().map(|token| Grant {
            token: token.clone(),
            profile: self.profile.clone(),
            workspace: self.workspace.clone(),
        })
    }

    /// The run core is asked for: with a token, its profile (core sees to it); without, the
    /// profile named.
    pub fn request(&self) -> RunRequest {
        let profile = ProfileChoice {
            name: self.token.is_none().then(|| self.profile.clone()),
            file: None,
        };
        RunRequest {
            argv: self.argv.iter().map(OsString::from).collect(),
            profile,
            workspace: self.workspace_asked.clone(),
            session: self.session.clone(),
            keep: self.keep,
            limit_output: true,
            env: Some(self.env()),
            timeout: self.timeout_ms.map(Duration::from_millis),
            ..RunRequest::default()
        }
    }

    pub fn env(&self) -> Vec<(OsString, OsString)> {
        self.env
            .iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
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
