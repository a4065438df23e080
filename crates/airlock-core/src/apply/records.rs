//! What apply, recovery and revert write to the audit log: every record names the session, its
//! profile and the apply's number; results list each path with its old and new content.

use std::path::{Path, PathBuf};

use airlock_changes::apply::{self as engine, Entry, Journal, OpsDone};
use serde::Serialize;

use super::{ApplyError, ApplyResult};
use crate::session::Session;

/// An entry's content hash for the log: sha256 of a file, or the target of a symlink.
fn digest(entry: &Entry) -> Option<String> {
    match entry {
        Entry::File { sha256, .. } => Some(sha256.clone()),
        Entry::Symlink { target } => Some(format!("symlink:{}", target.to_string_lossy())),
        Entry::Dir { .. } => Some("directory".into()),
        Entry::Fifo { .. } => Some("fifo".into()),
        Entry::Absent => None,
    }
}

/// What an apply, recovery or revert did at one path, as its records say.
#[derive(Serialize)]
pub(super) struct LoggedPath {
    path: String,
    old_sha256: Option<String>,
    new_sha256: Option<String>,
    done: bool,
    conflict: Option<String>,
}

/// The fields every record of one apply carries, and the record's own.
#[derive(Serialize)]
pub(super) struct ApplyRecord<'a, T: Serialize> {
    session: &'a str,
    profile: &'a str,
    number: u32,
    #[serde(flatten)]
    details: T,
}

impl<'a, T: Serialize> ApplyRecord<'a, T> {
    pub(super) fn of(session: &'a Session, number: u32, details: T) -> Self {
        ApplyRecord {
            session: &session.id,
            profile: &session.meta.profile.name,
            number,
            details,
        }
    }

    /// Append it to `log` (fsync'd).
    pub(super) fn append(
        &self,
        log: &crate::audit::Log,
        action: &str,
    ) -> std::result::Result<(), ApplyError> {
        Ok(crate::audit::append(
            log,
            action,
            serde_json::to_value(self)?,
        )?)
    }
}

/// The record of an interrupted apply being finished or rolled back.
#[derive(Serialize)]
pub(super) struct Recovery<'a> {
    #[serde(rename = "do")]
    pub(super) what: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub(super) paths: Option<Vec<LoggedPath>>,
}

/// The paths of an apply's or revert's result.
#[derive(Serialize)]
pub(super) struct Paths {
    pub(super) paths: Vec<LoggedPath>,
}

/// The workspace of a revert's intent.
#[derive(Serialize)]
pub(super) struct InWorkspace<'a> {
    pub(super) workspace: &'a Path,
}

/// Every path an apply, recovery or revert touched, with old and new content and what happened.
pub(super) fn logged_paths(journal: &Journal, outcome: &OpsDone) -> Vec<LoggedPath> {
    let conflict = |i: usize| {
        outcome
            .conflicts
            .iter()
            .find(|(c, _)| *c == i)
            .map(|(_, why)| why.clone())
    };
    journal
        .ops
        .iter()
        .enumerate()
        .map(|(i, op)| LoggedPath {
            path: engine::display_path(&op.path),
            old_sha256: digest(&op.old),
            new_sha256: digest(&op.new),
            done: outcome.done.contains(&i),
            conflict: conflict(i),
        })
        .collect()
}

/// `apply.intent`: what is about to be written.
#[derive(Serialize)]
pub(super) struct ApplyIntent<'a> {
    pub(super) workspace: &'a Path,
    pub(super) paths: &'a [PathBuf],
    pub(super) force: bool,
    pub(super) allowed_hazards: &'a [PathBuf],
    pub(super) all_hazards: bool,
    pub(super) no_ignored: bool,
    /// The digest of the change set written from (see `crate::digest::set_digest`).
    pub(super) digest: &'a str,
    /// The digest was the one a person reviewed, named with the apply (`--reviewed`).
    pub(super) reviewed: bool,
    pub(super) writes: usize,
    pub(super) skipped: usize,
}

/// `apply.result`: what was written, and what was left out and why.
#[derive(Serialize)]
pub(super) struct ApplyOutcome<'a> {
    pub(super) paths: Vec<LoggedPath>,
    pub(super) skipped: Vec<Skipped<'a>>,
}

#[derive(Serialize)]
pub(super) struct Skipped<'a> {
    pub(super) path: &'a str,
    pub(super) result: ApplyResult,
    pub(super) reason: &'a Option<String>,
}
