//! A session's runs as a person reviewing it reads them: each command, how it ended, what the gate
//! refused, and the end of its output. The audit log is the record of the runs; the output's end
//! (the last [`airlock_jail::TAIL_BYTES`] of each stream, when airlock relayed it: not when the
//! command wrote to a terminal itself) is kept beside the session, by the process that ran it.
//!
//! ```text
//! STATE/sessions/ID/outputs/RUN.json   the end of the output of the run RUN (its intent's run_id)
//! ```
//!
//! The run's id (random, in its `run.intent` record) pairs its output with it: never a pid, which
//! a sandbox can make the system come back to.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::caller::Caller;
use crate::error::Error;

/// Outputs a session keeps, its latest runs'.
pub const KEPT_OUTPUTS: usize = 100;
/// Runs one answer lists at most, the latest.
pub const MAX_RUNS: usize = 500;

/// The end of a run's output, as kept.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct KeptOutput {
    /// Text (bytes that are not UTF-8 as U+FFFD).
    pub stdout: String,
    pub stderr: String,
    /// Bytes before what is kept that are not (0: the whole output is here).
    pub stdout_cut: u64,
    pub stderr_cut: u64,
}

/// One run of a session.
#[derive(Debug, Clone, Serialize)]
pub struct SessionRun {
    pub started_at: String,
    pub argv: Vec<String>,
    /// The run's id (its `run.intent` record's `run_id`).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// The process that carried it out (its records' `by.pid`).
    pub pid: Option<i64>,
    /// The API token that asked for it, if one did.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// Whether its result is on record (false: still going, or its supervisor was lost).
    pub ended: bool,
    pub exit_code: Option<i64>,
    pub duration_ms: Option<u64>,
    /// Destinations the gate refused it, as the run's result says.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub refused: Vec<Value>,
    /// Why it was refused before it started, if it was (a `run.refused` record).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refusal: Option<String>,
    /// Why it was closed without a result, if it was (a `run.abandoned` record naming its id:
    /// its supervisor ended first; see [`crate::abandoned`]).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub interrupted: Option<String>,
    /// The end of its output, when airlock relayed it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub output: Option<KeptOutput>,
}

/// `GET /v1/sessions/{id}/runs`: the session's runs, oldest first (at most [`MAX_RUNS`], the
/// latest). An agent's token reads its own session's runs only, as its audit records.
pub fn session_runs(caller: &Caller, id: &str) -> Result<Vec<SessionRun>, Error> {
    let state_dir = caller.state_dir()?;
    let session = caller.find_session(&state_dir, id)?;
    let filter = airlock_audit::Filter {
        session: Some(session.id.clone()),
        actions: vec!["run".into()],
        ..airlock_audit::Filter::default()
    };
    let (mut records, filter) = crate::audit::records(caller, filter)?;
    let mut runs: Vec<SessionRun> = Vec::new();
    while let Some(record) = records.next_matching(&filter).map_err(Error::from)? {
        take(&mut runs, &record);
        if runs.len() > MAX_RUNS * 2 {
            runs.drain(..MAX_RUNS);
        }
    }
    let skip = runs.len().saturating_sub(MAX_RUNS);
    let mut runs: Vec<SessionRun> = runs.into_iter().skip(skip).collect();
    let dir = outputs_dir(&session.dir);
    for run in &mut runs {
        // An id is hex (made by core); anything else in a record names no file.
        let id = run
            .run_id
            .as_deref()
            .filter(|id| id.bytes().all(|b| b.is_ascii_hexdigit()));
        if let Some(id) = id {
            run.output = read_output(&dir.join(format!("{id}.json")));
        }
    }
    Ok(runs)
}

/// Fold one audit record into the runs: an intent opens a run, a result closes the latest open
/// run of the same process, a refusal is a run that never started.
fn take(runs: &mut Vec<SessionRun>, record: &Map<String, Value>) {
    let action = record.get("action").and_then(Value::as_str).unwrap_or("");
    let pid = record
        .get("by")
        .and_then(|by| by.get("pid"))
        .and_then(Value::as_i64);
    let text = |key: &str| record.get(key).and_then(Value::as_str).map(str::to_string);
    match action {
        "run.intent" | "run.learn" | "run.refused" => runs.push(SessionRun {
            started_at: text("time").unwrap_or_default(),
            argv: record
                .get("argv")
                .and_then(Value::as_array)
                .map(|words| {
                    words
                        .iter()
                        .map(|w| w.as_str().unwrap_or("").to_string())
                        .collect()
                })
                .unwrap_or_default(),
            run_id: text("run_id"),
            pid,
            token: record
                .get("by")
                .and_then(|by| by.get("token"))
                .and_then(Value::as_str)
                .map(str::to_string),
            ended: action == "run.refused",
            exit_code: None,
            duration_ms: None,
            refused: Vec::new(),
            refusal: (action == "run.refused").then(|| text("error").unwrap_or_default()),
            interrupted: None,
            output: None,
        }),
        // Closed by another process than the one that ran it: paired by the run's id.
        "run.abandoned" => {
            let id = text("run_id");
            let open = runs
                .iter_mut()
                .rev()
                .find(|run| !run.ended && id.is_some() && run.run_id == id);
            if let Some(run) = open {
                run.ended = true;
                run.interrupted = Some(text("why").unwrap_or_default());
            }
        }
        "run.result" => {
            let open = runs
                .iter_mut()
                .rev()
                .find(|run| !run.ended && run.pid == pid);
            if let Some(run) = open {
                run.ended = true;
                run.exit_code = record.get("exit_code").and_then(Value::as_i64);
                run.duration_ms = record.get("duration_ms").and_then(Value::as_u64);
                run.refused = record
                    .get("refused")
                    .and_then(Value::as_array)
                    .cloned()
                    .unwrap_or_default();
            }
        }
        _ => {}
    }
}

fn outputs_dir(session_dir: &Path) -> PathBuf {
    session_dir.join("outputs")
}

fn read_output(path: &Path) -> Option<KeptOutput> {
    serde_json::from_slice(&fs::read(path).ok()?).ok()
}

/// Keep the end of a run's output beside its session (best effort: the run's answer and its
/// records do not depend on it), and drop the oldest past [`KEPT_OUTPUTS`].
pub(crate) fn keep_output(session_dir: &Path, run_id: &str, tails: &airlock_jail::OutputTails) {
    let dir = outputs_dir(session_dir);
    if fs::create_dir_all(&dir).is_err() {
        return;
    }
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    let kept = KeptOutput {
        stdout: text(&tails.stdout),
        stderr: text(&tails.stderr),
        stdout_cut: tails.stdout_bytes.saturating_sub(tails.stdout.len() as u64),
        stderr_cut: tails.stderr_bytes.saturating_sub(tails.stderr.len() as u64),
    };
    let Ok(json) = serde_json::to_vec(&kept) else {
        return;
    };
    let path = dir.join(format!("{run_id}.json"));
    let written = fs::OpenOptions::new()
        .create(true)
        .truncate(true)
        .write(true)
        .mode(0o600)
        .open(&path)
        .and_then(|mut file| file.write_all(&json));
    if written.is_ok() {
        forget_oldest(&dir);
    }
}

fn forget_oldest(dir: &Path) {
    let Ok(entries) = fs::read_dir(dir) else {
        return;
    };
    let mut files: Vec<(std::time::SystemTime, PathBuf)> = entries
        .flatten()
        .filter_map(|e| Some((e.metadata().ok()?.modified().ok()?, e.path())))
        .collect();
    if files.len() <= KEPT_OUTPUTS {
        return;
    }
    files.sort();
    for (_, path) in &files[..files.len() - KEPT_OUTPUTS] {
        let _ = fs::remove_file(path);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(value: Value) -> Map<String, Value> {
        value.as_object().unwrap().clone()
    }

    #[test]
    fn a_result_closes_the_run_of_its_process() {
        let mut runs = Vec::new();
        for r in [
            json!({"action": "run.intent", "argv": ["sh", "-c", "a"], "by": {"pid": 10}, "time": "t1"}),
            json!({"action": "run.intent", "argv": ["b"], "by": {"pid": 11, "token": "abc"}, "time": "t2"}),
            json!({"action": "run.result", "exit_code": 3, "duration_ms": 9, "by": {"pid": 11}}),
            json!({"action": "run.refused", "argv": ["c"], "error": "disabled", "by": {"pid": 12}}),
            json!({"action": "run.result", "exit_code": 0, "duration_ms": 5, "by": {"pid": 10},
                   "refused": [{"host": "x.test", "port": 443}]}),
        ] {
            take(&mut runs, &record(r));
        }
        assert_eq!(runs.len(), 3);
        assert_eq!(runs[0].argv, ["sh", "-c", "a"]);
        assert_eq!((runs[0].ended, runs[0].exit_code), (true, Some(0)));
        assert_eq!(runs[0].refused.len(), 1);
        assert_eq!(
            (runs[1].exit_code, runs[1].token.as_deref()),
            (Some(3), Some("abc"))
        );
        assert_eq!(runs[2].refusal.as_deref(), Some("disabled"));
    }

    #[test]
    fn an_output_is_kept_and_the_oldest_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let tails = airlock_jail::OutputTails {
            stdout: b"end\n".to_vec(),
            stderr: vec![0xff],
            stdout_bytes: 10,
            stderr_bytes: 1,
        };
        keep_output(dir.path(), "00ff", &tails);
        let kept = read_output(&outputs_dir(dir.path()).join("00ff.json")).unwrap();
        assert_eq!(kept.stdout, "end\n");
        assert_eq!(kept.stdout_cut, 6);
        assert_eq!((kept.stderr.as_str(), kept.stderr_cut), ("\u{fffd}", 0));
        for n in 0..KEPT_OUTPUTS + 5 {
            fs::write(outputs_dir(dir.path()).join(format!("x{n}.json")), b"{}").unwrap();
        }
        forget_oldest(&outputs_dir(dir.path()));
        assert_eq!(
            fs::read_dir(outputs_dir(dir.path())).unwrap().count(),
            KEPT_OUTPUTS
        );
    }
}
