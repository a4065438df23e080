//! What the server hands a worker process for one run, and what the worker hands back. A run
//! forks the sandbox, which a multi-threaded server must not do: each run is carried out by a
//! fresh `airlock __serve-worker` process (single-threaded, as `airlock run` is), which calls
//! core exactly as the CLI does. The command's stdout and stderr are the worker's; the job comes
//! in a file the server names in an environment variable (a job can be larger than one variable
//! may be: 128 KiB, and a 64 KiB command line of control characters is six times that in JSON),
//! the result goes to a file the server names.

use std::ffi::OsString;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use airlock_core::{Grant, ProfileChoice, Role, RunEnd, RunRequest, Way};

use crate::error::ApiError;

/// The longest command line a request may carry (as `ARG_MAX` would refuse a longer one).
const MAX_COMMAND_BYTES: usize = 64 * 1024;

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
    /// Where the worker writes its [`Outcome`].
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
pub enum Outcome {
    /// A run core carried out (the output itself came through the pipes).
    Ran(RunEnd),
    Refused {
        code: String,
        kind: airlock_core::ErrorKind,
        message: String,
    },
}

/// The command a request gives, as the program and its arguments: a shell line (`command`, run
/// by `/bin/sh -c`) or `argv`, exactly one, within what `execve` takes.
pub fn argv_of(command: Option<&str>, argv: Option<&[String]>) -> Result<Vec<String>, ApiError> {
    let argv = match (command, argv) {
        (Some(command), None) => vec!["/bin/sh".into(), "-c".into(), command.to_string()],
        (None, Some(argv)) if !argv.is_empty() => argv.to_vec(),
        (None, Some(_)) => {
            return Err(ApiError::bad_request(
                "bad_argv",
                "argv is empty: give the program and its arguments",
            ))
        }
        (Some(_), Some(_)) => return Err(ApiError::bad_request(
            "command_and_argv",
            "give either command (a shell line) or argv (a program and its arguments), not both",
        )),
        (None, None) => {
            return Err(ApiError::bad_request(
                "no_command",
                "give command (a shell line) or argv (a program and its arguments)",
            ))
        }
    };
    let size: usize = argv.iter().map(|a| a.len() + 1).sum();
    if size > MAX_COMMAND_BYTES {
        return Err(ApiError::bad_request(
            "command_too_long",
            format!(
                "the command is {size} bytes; at most {MAX_COMMAND_BYTES}: put long input in stdin"
            ),
        ));
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(ApiError::bad_request(
            "bad_argv",
            "an argument holds a NUL byte, which no program can receive",
        ));
    }
    Ok(argv)
}

/// A request's time limit in seconds, as milliseconds (rounded up).
pub fn timeout_of(seconds: Option<f64>) -> Result<Option<u64>, ApiError> {
    match seconds {
        None => Ok(None),
        Some(seconds) if seconds.is_finite() && seconds > 0.0 && seconds <= 1e9 => {
            Ok(Some((seconds * 1000.0).ceil() as u64))
        }
        Some(_) => Err(ApiError::bad_request(
            "bad_timeout",
            "timeout is seconds, more than 0",
        )),
    }
}
