//! The runtimes' answers, as their contracts shape them, from how a run ended: what the front
//! end sends back (the legacy runtime's JSON, sandboxd's listing) and what it says of a command's
//! time limit and of output that did not all come.

use serde::Serialize;

use super::files::{EntryKind, PodEntry, PodPath};
use crate::{Limit, RunAnswer, RunResult};

/// Whether the time limit ended the run (the contracts' `timed_out`, sandboxd's deadline).
pub fn timed_out(result: &RunResult) -> bool {
    result.end.limit == Some(Limit::Timeout)
}

/// The line for the end of a command's stderr when not all of its output came back: the
/// client has no other place to be told.
pub fn output_cut_note(result: &RunResult) -> Option<&'static str> {
    let cut = result.stdout_truncated || result.stderr_truncated || result.end.output_dropped > 0;
    cut.then_some(
        "\nairlock: the command's output was cut short (the profile's [limits] output, or the server's --max-output)\n",
    )
}

/// The legacy runtime's answer to `POST /execute`: output and status, `timed_out` when the time
/// limit ended it; airlock's truncation flags and session beside them (the client passes over
/// what it does not know).
#[derive(Debug, Serialize)]
pub struct CommandAnswer {
    pub stdout: String,
    pub stderr: String,
    pub exit_code: i32,
    pub timed_out: bool,
    pub stdout_truncated: bool,
    pub stderr_truncated: bool,
    pub session: String,
}

impl CommandAnswer {
    pub fn of(answer: RunAnswer, session: String) -> CommandAnswer {
        let mut stderr = answer.stderr;
        if let Some(note) = output_cut_note(&answer.result) {
            stderr.push_str(note);
        }
        CommandAnswer {
            timed_out: timed_out(&answer.result),
            exit_code: answer.result.end.exit_code,
            stdout_truncated: answer.result.stdout_truncated,
            stderr_truncated: answer.result.stderr_truncated,
            stdout: answer.stdout,
            stderr,
            session,
        }
    }
}

/// sandboxd's answer to a `GET` of a directory: its path from the workspace's root, its entries.
#[derive(Debug, Serialize)]
pub struct DirectoryListing {
    pub path: String,
    pub entries: Vec<ListedEntry>,
}

/// One entry of sandboxd's listing.
#[derive(Debug, Serialize)]
pub struct ListedEntry {
    pub name: String,
    pub size: u64,
    #[serde(rename = "type")]
    pub kind: EntryKind,
    /// RFC 3339, UTC, to the second.
    pub modified_at: String,
    /// The permission bits, as `0644`.
    pub mode: String,
}

impl DirectoryListing {
    pub fn of(path: &PodPath, entries: Vec<PodEntry>) -> DirectoryListing {
        DirectoryListing {
            path: match path.as_str() {
                "." => "/".into(),
                inside => format!("/{inside}"),
            },
            entries: entries
                .into_iter()
                .map(|entry| ListedEntry {
                    modified_at: crate::timestamp(entry.mod_time.max(0.0) as u64),
                    mode: format!("{:04o}", entry.mode & 0o7777),
                    name: entry.name,
                    size: entry.size,
                    kind: entry.kind,
                })
                .collect(),
        }
    }
}
