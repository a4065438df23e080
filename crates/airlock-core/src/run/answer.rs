//! A run's answer as every front end gives it: the same types for the CLI's messages, the API's
//! answer and its streamed lines, a worker's hand-off to the server, the remote CLI's reading of
//! them and MCP's text; and the messages a person reads about a run, made here once.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::refused::RefusedDestination;
use super::{Outcome, RunReport};
use crate::error::CommandError;

/// A run as the HTTP API takes it (and the remote CLI sends it): exactly one of `command` and
/// `argv`. Every object the API takes is closed: a field it does not know is refused.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct RunBody {
    /// A shell command line, run by `/bin/sh -c`.
    pub command: Option<String>,
    /// The program and its arguments, run as they are.
    pub argv: Option<Vec<String>>,
    /// Given to the command as its standard input (none: it reads end of file).
    pub stdin: Option<String>,
    /// Seconds: a time limit shorter than the profile's.
    pub timeout: Option<f64>,
    /// Variables the command gets, those the profile's `[env] allow` lets through.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// A throwaway run's workspace: a directory within the token's (default: the token's).
    pub workspace: Option<PathBuf>,
    /// Keep a throwaway run's layer, as a new session of this token.
    #[serde(default)]
    pub keep: bool,
}

/// The longest command line a request may carry (as `ARG_MAX` would refuse a longer one).
pub const MAX_COMMAND_BYTES: usize = 64 * 1024;

impl RunBody {
    /// The program and its arguments the body names (see [`command_argv`]).
    pub fn program(&self) -> Result<Vec<String>, CommandError> {
        command_argv(self.command.as_deref(), self.argv.as_deref())
    }

    /// The body's time limit in milliseconds (see [`timeout_ms`]).
    pub fn timeout_ms(&self) -> Result<Option<u64>, CommandError> {
        timeout_ms(self.timeout)
    }

    /// The run core is asked for, in `session` or throwaway: the profile is the token's (core
    /// sees to it), the output relayed and held to the profile's limit.
    pub fn request(&self, session: Option<String>) -> Result<super::RunRequest, CommandError> {
        Ok(super::RunRequest {
            argv: self.program()?.into_iter().map(Into::into).collect(),
            workspace: self.workspace.clone(),
            session,
            keep: self.keep,
            limit_output: true,
            env: Some(self.env.iter().map(|(k, v)| (k.into(), v.into())).collect()),
            timeout: self.timeout_ms()?.map(Duration::from_millis),
            ..super::RunRequest::default()
        })
    }
}

/// The command a request gives, as the program and its arguments: a shell line (`command`, run
/// by `/bin/sh -c`) or `argv`, exactly one, within what `execve` takes.
pub fn command_argv(
    command: Option<&str>,
    argv: Option<&[String]>,
) -> Result<Vec<String>, CommandError> {
    let argv = match (command, argv) {
        (Some(command), None) => vec!["/bin/sh".into(), "-c".into(), command.to_string()],
        (None, Some(argv)) if !argv.is_empty() => argv.to_vec(),
        (None, Some(_)) => return Err(CommandError::EmptyArgv),
        (Some(_), Some(_)) => return Err(CommandError::Both),
        (None, None) => return Err(CommandError::Missing),
    };
    let size: usize = argv.iter().map(|a| a.len() + 1).sum();
    if size > MAX_COMMAND_BYTES {
        return Err(CommandError::TooLong {
            size,
            max: MAX_COMMAND_BYTES,
        });
    }
    if argv.iter().any(|a| a.contains('\0')) {
        return Err(CommandError::Nul);
    }
    Ok(argv)
}

/// A request's time limit in seconds, as milliseconds (rounded up).
pub fn timeout_ms(seconds: Option<f64>) -> Result<Option<u64>, CommandError> {
    match seconds {
        None => Ok(None),
        Some(seconds) if seconds.is_finite() && seconds > 0.0 && seconds <= 1e9 => {
            Ok(Some((seconds * 1000.0).ceil() as u64))
        }
        Some(_) => Err(CommandError::BadTimeout),
    }
}

/// The limit that ended a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Limit {
    /// The wall-clock limit (exit status 124).
    Timeout,
    /// The CPU time of all its processes together (152).
    Cpu,
    /// What its layer may take of the disk (153).
    Disk,
    /// The kernel killed a process for the memory limit.
    Memory,
    /// An operator killed it, or disabled its profile.
    KillSwitch,
    /// A limit a newer airlock names, read from its answer: the run still ended.
    #[serde(other)]
    Other,
}

impl Limit {
    /// As the audit log and the API name it.
    pub fn as_str(self) -> &'static str {
        match self {
            Limit::Timeout => "timeout",
            Limit::Cpu => "cpu",
            Limit::Disk => "disk",
            Limit::Memory => "memory",
            Limit::KillSwitch => "kill_switch",
            Limit::Other => "other",
        }
    }
}

/// How a run ended, as core says it: what a worker hands its server, and the heart of the API's
/// [`RunResult`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunEnd {
    /// As `airlock run` exits: the command's status, or 124 (timeout), 152 (CPU), 153 (disk).
    pub exit_code: i32,
    pub limit: Option<Limit>,
    /// The session the run wrote into: the one named, or a throwaway run's kept layer.
    pub session: Option<String>,
    /// A throwaway run's layer was kept (`keep`) as the new session `session`.
    pub kept: bool,
    /// Bytes the profile's output limit dropped.
    pub output_dropped: u64,
    /// Processes the kernel killed for the memory limit.
    pub oom_kills: u64,
    /// Why the kill switch killed the run, if it did.
    pub killed_by_switch: Option<String>,
    /// The result could not be written to the audit log (the intent was).
    pub audit_error: Option<String>,
    /// The CPU time limit, when it is what ended the run (for the message that says so).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cpu_limit_ms: Option<u64>,
    /// What the network gate refused, a destination each, in the order first refused (at most
    /// [`super::refused::MAX_LISTED`]).
    #[serde(default)]
    pub refused: Vec<RefusedDestination>,
    /// Refused attempts at destinations past that list.
    #[serde(default)]
    pub refused_unlisted: u64,
}

/// A finished run without its output: [`RunEnd`] and what the server saw of its output and time.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunResult {
    #[serde(flatten)]
    pub end: RunEnd,
    /// More stdout came than the server keeps: the answer has the first part.
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    /// Wall-clock time of the run, sandbox set-up included.
    pub duration_ms: u64,
}

/// A finished run and its output (UTF-8; bytes that are not become U+FFFD).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct RunAnswer {
    #[serde(flatten)]
    pub result: RunResult,
    pub stdout: String,
    pub stderr: String,
}

/// One line of a streamed run: output as it comes, then exactly one `result` or `error`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum RunEvent {
    Stdout {
        data: String,
    },
    Stderr {
        data: String,
    },
    Result(RunResult),
    /// Refused or failed once the answer had started: what its status would have said.
    Error {
        code: String,
        message: String,
    },
    /// A line of a kind a newer airlock sends: a reader passes over it (never sent by this one).
    #[serde(other)]
    Unknown,
}

impl RunReport {
    /// How the run ended, for a front end to say.
    pub fn end(&self) -> RunEnd {
        let limit = self.limit();
        RunEnd {
            exit_code: self.exit_status(),
            limit,
            session: self.session_id.clone(),
            kept: self.kept,
            output_dropped: self.output_dropped,
            oom_kills: self.oom_kills,
            killed_by_switch: self.killed_by_switch.clone(),
            audit_error: self.audit_error.clone(),
            cpu_limit_ms: (limit == Some(Limit::Cpu))
                .then(|| u64::try_from(self.cpu_limit.as_millis()).unwrap_or(u64::MAX)),
            refused: self.refused.clone(),
            refused_unlisted: self.refused_unlisted,
        }
    }

    /// The limit that ended the run: `memory` when the kernel killed a process for it,
    /// `kill_switch` when that killed it.
    pub fn limit(&self) -> Option<Limit> {
        match self.outcome {
            Outcome::TimedOut => Some(Limit::Timeout),
            Outcome::CpuLimitReached => Some(Limit::Cpu),
            Outcome::DiskLimitReached => Some(Limit::Disk),
            Outcome::Exited(_) if self.killed_by_switch.is_some() => Some(Limit::KillSwitch),
            Outcome::Exited(_) if self.oom_kills > 0 => Some(Limit::Memory),
            Outcome::Exited(_) => None,
        }
    }
}

impl RunEnd {
    /// What a person is told about the run beyond its output, a line each, whichever front end
    /// they asked through.
    pub fn notes(&self) -> Vec<String> {
        let mut notes = Vec::new();
        if let Some(error) = &self.audit_error {
            notes.push(format!(
                "warning: the run's result could not be written to the audit log: {error}"
            ));
        }
        if self.output_dropped > 0 {
            notes.push(format!(
                "the output limit was reached: {} dropped (raise [limits] output in the profile)",
                counted(self.output_dropped, "byte was", "bytes were")
            ));
        }
        if let (true, Some(id)) = (self.kept, &self.session) {
            notes.push(format!(
                "session {id} kept: 'airlock diff {id}' shows its changes"
            ));
        }
        if self.oom_kills > 0 {
            notes.push(format!(
                "the memory limit was reached: the kernel killed {} of the sandbox (raise [limits] memory in the profile)",
                counted(self.oom_kills, "process", "processes")
            ));
        }
        if let Some(why) = &self.killed_by_switch {
            notes.push(format!("the sandbox was killed ({why})"));
        }
        match self.limit {
            Some(Limit::Timeout) => notes.push(
                "the command passed its time limit; every process of the sandbox was killed"
                    .into(),
            ),
            Some(Limit::Cpu) => {
                let limit = self.cpu_limit_ms.map_or_else(String::new, |ms| {
                    format!(" ({})", humantime::format_duration(Duration::from_millis(ms)))
                });
                notes.push(format!(
                    "the sandbox used up its CPU time limit{limit}, all its processes together; every one was killed (raise [limits] cpu in the profile)"
                ));
            }
            Some(Limit::Disk) => notes.push(
                "the session's layer reached what it may take of the state directory's filesystem (its free margin, or the profile's disk); every process of the sandbox was killed (free some space, or raise [limits] disk)"
                    .into(),
            ),
            Some(Limit::Memory | Limit::KillSwitch | Limit::Other) | None => {}
        }
        notes.extend(self.refused.iter().map(RefusedDestination::line));
        if self.refused_unlisted > 0 {
            notes.push(format!(
                "refused {} at other destinations too",
                counted(self.refused_unlisted, "attempt", "attempts")
            ));
        }
        notes.extend(super::refused::advice(&self.refused));
        notes
    }
}

/// `n` and the noun that counts it, in the number it takes: `1 path`, `3 paths`, `0 paths`. The
/// CLI's counts and the notes about a run say numbers alike.
pub fn counted(n: u64, one: &str, many: &str) -> String {
    format!("{n} {}", if n == 1 { one } else { many })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn end() -> RunEnd {
        RunEnd {
            exit_code: 0,
            limit: None,
            session: None,
            kept: false,
            output_dropped: 0,
            oom_kills: 0,
            killed_by_switch: None,
            audit_error: None,
            cpu_limit_ms: None,
            refused: Vec::new(),
            refused_unlisted: 0,
        }
    }

    #[test]
    fn a_clean_run_says_nothing() {
        assert!(end().notes().is_empty());
    }

    #[test]
    fn each_limit_and_loss_is_said_once_in_the_words_of_its_count() {
        let notes = RunEnd {
            exit_code: EXIT_CPU,
            limit: Some(Limit::Cpu),
            cpu_limit_ms: Some(2_000),
            output_dropped: 1,
            oom_kills: 3,
            session: Some("k3v9x2".into()),
            kept: true,
            ..end()
        }
        .notes();
        assert_eq!(notes.len(), 4, "{notes:#?}");
        assert!(notes[0].contains("1 byte was dropped"), "{notes:#?}");
        assert!(notes[1].contains("session k3v9x2 kept"), "{notes:#?}");
        assert!(notes[2].contains("killed 3 processes"), "{notes:#?}");
        assert!(notes[3].contains("CPU time limit (2s)"), "{notes:#?}");
    }

    const EXIT_CPU: i32 = super::super::EXIT_CPU_LIMIT;

    #[test]
    fn a_streamed_line_is_tagged_by_type_and_the_result_is_flat() {
        let result = RunEvent::Result(RunResult {
            end: RunEnd {
                limit: Some(Limit::KillSwitch),
                killed_by_switch: Some("operator: stop".into()),
                ..end()
            },
            stdout_truncated: false,
            stderr_truncated: true,
            duration_ms: 12,
        });
        let line = serde_json::to_value(&result).unwrap();
        assert_eq!(line["type"], "result");
        assert_eq!(line["limit"], "kill_switch");
        assert_eq!(line["stderr_truncated"], true);
        assert!(line.get("cpu_limit_ms").is_none());
        assert_eq!(serde_json::from_value::<RunEvent>(line).unwrap(), result);
        let output: RunEvent = serde_json::from_str(r#"{"type":"stderr","data":"x"}"#).unwrap();
        assert_eq!(output, RunEvent::Stderr { data: "x".into() });
        // What a newer server adds is passed over, not a broken stream.
        let newer: RunEvent = serde_json::from_str(r#"{"type":"progress","done":3}"#).unwrap();
        assert_eq!(newer, RunEvent::Unknown);
        let newer: RunEvent = serde_json::from_value(serde_json::json!({
            "type": "result", "exit_code": 1, "limit": "gpu", "session": null, "kept": false,
            "output_dropped": 0, "oom_kills": 0, "killed_by_switch": null, "audit_error": null,
            "stdout_truncated": false, "stderr_truncated": false, "duration_ms": 3,
        }))
        .unwrap();
        assert!(
            matches!(&newer, RunEvent::Result(r) if r.end.limit == Some(Limit::Other)),
            "{newer:?}"
        );
    }
}
