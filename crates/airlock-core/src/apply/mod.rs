//! `apply` and `revert`: the only operations that write the host workspace, in this order: hold
//! the session alone, finish (or roll back) an apply that was interrupted, read the change set,
//! refuse conflicts and hazards that were not named, keep every old file, record the journal,
//! then make each change atomically (see `airlock_changes::apply`).

use std::path::{Path, PathBuf};

use serde::Serialize;

use airlock_changes::apply::{
    self as engine, ApplyDir, Journal, JournalState, Op, OpsDone, Workspace,
};
use airlock_changes::{Hazard, Status};
use airlock_jail::Way;

#[cfg(test)]
mod link_tests;
mod links;
mod outcome;
mod plan;
mod records;

use outcome::{tree_outcomes, unseen_by};
use plan::{plan_all, Plan, PlannedOps};

use records::{
    logged_paths, ApplyIntent, ApplyOutcome, ApplyRecord, InWorkspace, Paths, Recovery, Skipped,
};

use crate::caller::Caller;
use crate::changes::{relative_paths, ChangesError};
use crate::error::Error;
use crate::io_failure::io;
use crate::ledger;
use crate::review::ReviewInputs;
use crate::session::{now, Lifecycle, Session, SessionError};
use crate::shown::{ShownRecord, Unseen};

/// Paths of a session's, control characters escaped, the first few of many.
fn listed(paths: &[PathBuf]) -> String {
    const SHOWN: usize = 5;
    let mut text = crate::error::shown_paths(&paths[..paths.len().min(SHOWN)]);
    if paths.len() > SHOWN {
        text.push_str(&format!(" and {} more", paths.len() - SHOWN));
    }
    text
}

/// What [`ApplyError::UndoLeadsOut`] says.
fn undo_leads_out(link: &Path, through: &[PathBuf]) -> String {
    let link = listed(&[link.to_path_buf()]);
    let through = match through.len() {
        0 => " (too many links to follow them all)".to_string(),
        1 => format!(", once {} is put back", listed(through)),
        _ => format!(", once {} are put back", listed(through)),
    };
    format!("undoing it would send symlink {link} out of the workspace{through}: nothing was undone — change or remove {link} first (a later session wrote it, or the workspace has it), then undo again")
}

/// What [`ApplyError::LinkLeadsOut`] says.
fn link_leads_out(link: &Path, through: &[PathBuf]) -> String {
    let shown = listed(&[link.to_path_buf()]);
    if through.is_empty() {
        return format!("the symlinks of the workspace and of this apply are too many to follow all of them (at {shown}): nothing was written — apply fewer paths by naming them");
    }
    if through == [link] {
        return format!("symlink {shown} would lead out of the workspace, through the links on its way: nothing was written — leave it out (apply the other paths by naming them), or name it with --allow-hazard if that is meant");
    }
    let (is, that) = if through.len() == 1 {
        ("is", "it")
    } else {
        ("are", "them")
    };
    format!("symlink {shown} would lead out of the workspace once {} {is} written: nothing was written — leave {that} out (apply the other paths by naming them), or name {that} with --allow-hazard if that is meant", listed(through))
}

#[derive(Debug, thiserror::Error)]
pub enum ApplyError {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Changes(#[from] ChangesError),
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditError),
    #[error("cannot {action} {path}: {source}")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("cannot encode an audit record: {0}")]
    Record(#[from] serde_json::Error),
    #[error("session {0} is already applied — 'airlock revert {0}' takes the changes back out")]
    AlreadyApplied(String),
    #[error("session {0} has no apply to revert")]
    NothingToRevert(String),
    /// Its layer and its applies' state went with the discard: what an apply wrote stays in the
    /// workspace, the host's own to keep or undo.
    #[error("session {0} was discarded: its applies can no longer be reverted, nor its changes applied — what was applied stays in the workspace (undo it there, with git for example, if it must go)")]
    Discarded(String),
    #[error("--rollback: session {0} has no interrupted apply to roll back")]
    NothingToRollBack(String),
    /// The change set is not the one reviewed: a run wrote since the diff was read (or the
    /// host changed under it). Nothing was written.
    #[error("session {session} is not the change set reviewed: reviewed {reviewed}, now {found} (a run wrote since that diff was read, or the workspace changed under it) — nothing was written; run 'airlock diff {session}{flag}' again, read it, and apply with the digest it shows{hint}", flag = if *.no_ignored { " --no-ignored" } else { "" }, hint = if *.no_ignored { "" } else { " (a digest of 'airlock diff --no-ignored' is one for 'apply --no-ignored')" })]
    ReviewStale {
        session: String,
        reviewed: String,
        found: String,
        no_ignored: bool,
    },
    #[error("{} lies in {root}/, a tree git ignores, which is applied whole or not at all — name {root} instead", .path.display())]
    InsideTree { path: PathBuf, root: String },
    /// A path the workspace's filesystem (or the kernel) cannot take. Nothing was written.
    #[error(transparent)]
    NameTooLong(#[from] airlock_changes::limits::TooLong),
    /// A symlink would lead out of the workspace after the writes of this apply (`through`;
    /// empty: too many links to follow them all). Nothing was written.
    #[error("{}", link_leads_out(.link, .through))]
    LinkLeadsOut {
        link: PathBuf,
        through: Vec<PathBuf>,
    },
    /// Undoing an apply (a revert) would send a symlink of the workspace that it keeps out of
    /// it, through what it puts back (`through`; empty: too many links to follow them all).
    /// Nothing was undone.
    #[error("{}", undo_leads_out(.link, .through))]
    UndoLeadsOut {
        link: PathBuf,
        through: Vec<PathBuf>,
    },
}

crate::io_failure::io_variant!(ApplyError, Io);

/// An apply as a front end asks for it: the options with paths as the caller typed them
/// (relative to the caller's working directory when it lies in the workspace, else to the
/// workspace; or absolute inside it), which core makes relative to the workspace.
#[derive(Debug, Clone, Default)]
pub struct ApplyRequest {
    /// The session's id or name.
    pub session: String,
    pub options: ApplyOptions,
}

/// Write a session's changes (or those at or under the request's paths) into its workspace.
/// A refusal is recorded in the audit log (`apply.refused`); so is a request whose paths match
/// no change, most likely a typo rather than "nothing to do".
pub fn apply(caller: &Caller, request: &ApplyRequest) -> std::result::Result<ApplyReport, Error> {
    crate::refusal::audited(caller, "apply.refused", Some(&request.session), || {
        caller.must_be_operator("apply a session's changes")?;
        let state_dir = caller.state_dir()?;
        let session = caller.find_session(&state_dir, &request.session)?;
        let workspace = session.existing_workspace(caller.way)?.to_path_buf();
        let cwd = caller.cwd.as_deref();
        let asked = &request.options;
        if let Some(reviewed) = &asked.reviewed {
            check_digest_form(reviewed)?;
        }
        let options = ApplyOptions {
            paths: relative_paths(&asked.paths, &workspace, cwd)?,
            allowed_hazards: relative_paths(&asked.allowed_hazards, &workspace, cwd)?,
            ..asked.clone()
        };
        let inputs = ReviewInputs::of(caller, &session, &workspace)?;
        let report = apply_changes(
            &state_dir,
            &crate::audit::log_for(caller, &state_dir),
            &session.id,
            caller.way,
            &options,
            &inputs,
            &caller.on_busy,
        )?;
        let matched_nothing = report.items.is_empty() && !asked.paths.is_empty();
        if matched_nothing && !report.recovered && !asked.dry_run {
            return Err(Error::NothingAtPaths {
                session: report.session,
                named: request.session.clone(),
                paths: asked.paths.clone(),
            });
        }
        Ok(report)
    })
}

/// A digest as a diff shows it, `sha256:` and 64 lowercase hex digits: anything else is a
/// mistake in copying it, said as such rather than as a session that changed.
fn check_digest_form(digest: &str) -> std::result::Result<(), Error> {
    let hex = digest.strip_prefix("sha256:").unwrap_or_default();
    let plain = hex.len() == 64 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'));
    match plain {
        true => Ok(()),
        false => Err(Error::Argument {
            arg: "--reviewed".into(),
            why: format!(
                "{:?} is not a digest (sha256: and 64 hex digits) — copy it from what 'airlock diff' showed",
                digest
            ),
        }),
    }
}

/// Take a session's last apply back out of its workspace. A refusal is recorded in the audit
/// log (`revert.refused`).
pub fn revert(caller: &Caller, session: &str) -> std::result::Result<ApplyReport, Error> {
    crate::refusal::audited(caller, "revert.refused", Some(session), || {
        caller.must_be_operator("revert an apply")?;
        let state_dir = caller.state_dir()?;
        let session = caller.find_session(&state_dir, session)?;
        let log = crate::audit::log_for(caller, &state_dir);
        Ok(revert_last_apply(
            &state_dir,
            &log,
            &session.id,
            caller.way,
            &caller.on_busy,
        )?)
    })
}

/// What the caller asks of `apply`.
#[derive(Debug, Clone, Default)]
pub struct ApplyOptions {
    /// Only changes at or under these paths (relative to the workspace once core has read the
    /// request); all when empty.
    pub paths: Vec<PathBuf>,
    /// Overwrite changes the host made meanwhile.
    pub force: bool,
    /// Hazards to write anyway, named as `paths` are.
    pub allowed_hazards: Vec<PathBuf>,
    /// Write every hazard that may be written at all.
    pub all_hazards: bool,
    /// Leave out everything the repository's ignore rules hide (build output, caches).
    pub no_ignored: bool,
    /// Say what would happen; change nothing.
    pub dry_run: bool,
    /// Undo an interrupted apply instead of finishing it.
    pub rollback: bool,
    /// The digest of the diff a person reviewed (`sha256:HEX`): write that change set or
    /// nothing. It covers the whole set, whatever `paths` name.
    pub reviewed: Option<String>,
}

/// What happened to one path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ApplyResult {
    Applied,
    /// `--dry-run`: would be applied.
    WouldApply,
    /// The host has the session's version already.
    Unchanged,
    /// The host changed it meanwhile: skipped (`--force` overwrites).
    Conflict,
    /// A hazard that was not named: skipped.
    Hazard,
    /// Never written (setuid/setgid, device node, socket).
    Refused,
    /// Not shown by git status, and left out as asked (`--no-ignored`).
    Ignored,
    /// In a tree git ignores that was not named, or another path of which is left out: the
    /// tree is written whole or not at all.
    TreeHeld,
    /// An interrupted apply's change, taken back (`--rollback`) or a revert's.
    Undone,
}

#[derive(Debug, Clone, Serialize)]
pub struct Item {
    pub path: String,
    pub status: Option<Status>,
    pub result: ApplyResult,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hazards: Vec<Hazard>,
    /// `git status` will not show it: the repository's ignore rules hide it.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub ignored: bool,
    /// The tree git ignores it lies in (its root), written whole or not at all.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub tree: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

/// What became of one tree git ignores, all its paths together.
#[derive(Debug, Clone, Serialize)]
pub struct TreeOutcome {
    pub root: String,
    /// Its changes (files and directories) at or under the paths asked for.
    pub paths: usize,
    /// `applied`, `would_apply`, `unchanged`, `tree_held`, `ignored`; `conflict` when the host
    /// changed one of its paths while it was being written (the rest was written).
    pub result: ApplyResult,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}

#[derive(Debug, Clone, Serialize)]
pub struct ApplyReport {
    pub session: String,
    /// The host workspace written.
    #[serde(skip)]
    pub workspace: PathBuf,
    /// The apply's number (`applies/N` in the session's directory); None for a dry run.
    pub number: Option<u32>,
    /// This call finished (or rolled back) an apply that had been interrupted.
    pub recovered: bool,
    /// The digest of the change set this apply found (and, with `reviewed`, the one it was
    /// given); None for a recovery or a revert.
    pub digest: Option<String>,
    pub items: Vec<Item>,
    /// The trees git ignores, one outcome each (their paths are items too, marked `tree`).
    pub trees: Vec<TreeOutcome>,
    /// Without `reviewed`: what was written that the last diff shown (`airlock diff`) did not
    /// hold. None with `reviewed` (the digest says it all), for a recovery and a revert.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unseen: Option<Unseen>,
    pub lifecycle: Lifecycle,
}

impl ApplyReport {
    /// Something was left out: conflicts, hazards, refusals.
    pub fn skipped(&self) -> usize {
        self.items
            .iter()
            .filter(|i| {
                matches!(
                    i.result,
                    ApplyResult::Conflict
                        | ApplyResult::Hazard
                        | ApplyResult::Refused
                        | ApplyResult::TreeHeld
                )
            })
            .count()
    }
}

fn applies_dir(session: &Session) -> PathBuf {
    session.dir.join("applies")
}

/// The session's applies, oldest first.
fn journals(session: &Session) -> std::result::Result<Vec<(ApplyDir, Journal)>, ApplyError> {
    let dir = applies_dir(session);
    let entries = match std::fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("read", &dir)(e).into()),
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let apply = ApplyDir { dir: entry.path() };
        // A directory without a journal is an apply that died before it changed anything.
        if let Ok(journal) = apply.read() {
            found.push((apply, journal));
        }
    }
    found.sort_by_key(|(_, journal)| journal.number);
    Ok(found)
}

/// Refuse to apply or revert a discarded session (checked under its lock: a discard in between
/// is seen). Its journals may still be on disk, but the session is over: an apply of a layer
/// that is gone, or a revert that rewrites the workspace after the session was given up, would
/// act on the host for a session no one works in any more.
fn check_not_discarded(session: &Session) -> std::result::Result<(), ApplyError> {
    if session.meta.lifecycle == Lifecycle::Discarded {
        return Err(ApplyError::Discarded(session.id.clone()));
    }
    Ok(())
}

/// Refuse to touch the layer while an apply of it is half done.
pub(crate) fn check_no_interrupted_apply(
    session: &Session,
) -> std::result::Result<(), SessionError> {
    let interrupted = journals(session)
        .ok()
        .into_iter()
        .flatten()
        .find(|(_, journal)| journal.state == JournalState::Prepared);
    match interrupted {
        Some((_, journal)) => Err(SessionError::InterruptedApply {
            id: session.id.clone(),
            number: journal.number,
        }),
        None => Ok(()),
    }
}

fn item(op: &Op, result: ApplyResult, reason: Option<String>) -> Item {
    Item {
        path: engine::display_path(&op.path),
        status: None,
        result,
        hazards: Vec::new(),
        ignored: false,
        tree: None,
        reason,
    }
}

fn outcome_items(journal: &Journal, outcome: &OpsDone, done: ApplyResult) -> Vec<Item> {
    let mut items: Vec<Item> = outcome
        .done
        .iter()
        .map(|&i| item(&journal.ops[i], done, None))
        .collect();
    items.extend(
        outcome
            .conflicts
            .iter()
            .map(|(i, why)| item(&journal.ops[*i], ApplyResult::Conflict, Some(why.clone()))),
    );
    items.sort_by(|a, b| a.path.cmp(&b.path));
    items
}

/// Write a session's changes into its workspace.
fn apply_changes(
    state_dir: &Path,
    log: &crate::audit::Log,
    id: &str,
    way: Way,
    options: &ApplyOptions,
    inputs: &ReviewInputs,
    on_busy: &dyn Fn(&Session),
) -> std::result::Result<ApplyReport, ApplyError> {
    let mut session = Session::find(state_dir, id)?;
    let _lock = session.lock_exclusive(on_busy)?;
    check_not_discarded(&session)?;
    let workspace_path = session.existing_workspace(way)?.to_path_buf();
    let workspace = Workspace::open(&workspace_path).map_err(io("open", &workspace_path))?;

    if let Some((apply_dir, mut journal)) = journals(&session)?
        .into_iter()
        .find(|(_, j)| j.state == JournalState::Prepared)
    {
        return recover(
            &mut session,
            &workspace,
            apply_dir,
            &mut journal,
            options,
            log,
        );
    }
    if options.rollback {
        return Err(ApplyError::NothingToRollBack(session.id.clone()));
    }
    if session.meta.lifecycle == Lifecycle::Applied {
        return Err(ApplyError::AlreadyApplied(session.id.clone()));
    }

    // Planned, and the reviewed digest compared, under the exclusive lock the writes are made
    // under: no run writes between the check and the apply.
    let layer = session.upper();
    let Plan {
        mut items,
        ops,
        digest,
        now,
    } = plan_all(
        &session,
        &workspace,
        &workspace_path,
        &layer,
        options,
        inputs,
    )?;
    let unseen = match options.reviewed {
        Some(_) => None,
        None => Some(ShownRecord::load(&session.dir)),
    };
    let report = |number, items: Vec<Item>, session: &Session| {
        let unseen = unseen.map(|shown| unseen_by(shown.as_ref(), &now, &items));
        ApplyReport {
            session: session.id.clone(),
            workspace: session.meta.workspace.clone(),
            number,
            recovered: false,
            digest: Some(digest.clone()),
            trees: tree_outcomes(&items),
            items,
            unseen,
            lifecycle: session.meta.lifecycle,
        }
    };
    if options.dry_run {
        return Ok(report(None, items, &session));
    }
    if ops.is_empty() {
        finish(&mut session, options, &items)?;
        return Ok(report(None, items, &session));
    }
    let target = Target {
        session: &session,
        workspace: &workspace,
        workspace_path: &workspace_path,
        layer: &layer,
    };
    let number = write_all(&target, options, &digest, &mut items, ops, log)?;
    finish(&mut session, options, &items)?;
    Ok(report(Some(number), items, &session))
}

/// Where an apply writes, and from what.
struct Target<'a> {
    session: &'a Session,
    workspace: &'a Workspace,
    workspace_path: &'a Path,
    layer: &'a Path,
}

/// Log, keep the old files, journal, then write: the items planned as writes then say what
/// happened to them. Returns the apply's number.
fn write_all(
    target: &Target,
    options: &ApplyOptions,
    digest: &str,
    items: &mut [Item],
    ops: PlannedOps,
    log: &crate::audit::Log,
) -> std::result::Result<u32, ApplyError> {
    let session = target.session;
    let (ops, item_of_op): (Vec<Op>, Vec<usize>) = ops.into_iter().unzip();
    let number = journals(session)?
        .last()
        .map_or(1, |(_, journal)| journal.number + 1);
    let intent = ApplyIntent {
        workspace: target.workspace_path,
        paths: &options.paths,
        force: options.force,
        allowed_hazards: &options.allowed_hazards,
        all_hazards: options.all_hazards,
        no_ignored: options.no_ignored,
        digest,
        reviewed: options.reviewed.is_some(),
        writes: ops.len(),
        skipped: items
            .iter()
            .filter(|i| i.result != ApplyResult::WouldApply)
            .count(),
    };
    ApplyRecord::of(session, number, intent).append(log, "apply.intent")?;
    let apply_dir = ApplyDir {
        dir: applies_dir(session).join(number.to_string()),
    };
    std::fs::create_dir_all(&apply_dir.dir).map_err(io("create", &apply_dir.dir))?;
    let mut journal = Journal {
        number,
        state: JournalState::Prepared,
        created: now(),
        ops,
    };
    let stale = engine::keep_backups(target.workspace, &apply_dir, &journal.ops)
        .map_err(io("keep the old files of", target.workspace_path))?;
    let stale_indexes: Vec<usize> = stale.iter().map(|(i, _)| *i).collect();
    apply_dir
        .write(&journal)
        .map_err(io("write", &apply_dir.journal_path()))?;
    let outcome = engine::commit(target.workspace, target.layer, &journal, &stale_indexes)
        .map_err(io("apply to", target.workspace_path))?;
    journal.state = JournalState::Committed;
    apply_dir
        .write(&journal)
        .map_err(io("write", &apply_dir.journal_path()))?;

    let conflicts: Vec<(usize, String)> =
        stale.into_iter().chain(outcome.conflicts.clone()).collect();
    for (index, why) in &conflicts {
        let item = &mut items[item_of_op[*index]];
        item.result = ApplyResult::Conflict;
        item.reason = Some(why.clone());
    }
    for item in items
        .iter_mut()
        .filter(|i| i.result == ApplyResult::WouldApply)
    {
        item.result = ApplyResult::Applied;
    }
    let mut logged = OpsDone {
        done: outcome.done,
        conflicts,
    };
    logged.done.sort_unstable();
    let result = ApplyOutcome {
        paths: logged_paths(&journal, &logged),
        skipped: items
            .iter()
            .filter(|i| {
                matches!(
                    i.result,
                    ApplyResult::Conflict
                        | ApplyResult::Hazard
                        | ApplyResult::Refused
                        | ApplyResult::Ignored
                )
            })
            .map(|i| Skipped {
                path: &i.path,
                result: i.result,
                reason: &i.reason,
            })
            .collect(),
    };
    ApplyRecord::of(session, number, result).append(log, "apply.result")?;
    Ok(number)
}

/// Mark the session applied when everything it changed reached the workspace.
fn finish(
    session: &mut Session,
    options: &ApplyOptions,
    items: &[Item],
) -> std::result::Result<(), ApplyError> {
    let complete = options.paths.is_empty()
        && items
            .iter()
            .all(|i| matches!(i.result, ApplyResult::Applied | ApplyResult::Unchanged));
    if complete {
        session.meta.lifecycle = Lifecycle::Applied;
        session.meta.ended = Some(now());
        session.save()?;
    }
    Ok(())
}

/// Finish an apply that was interrupted, or undo it (`--rollback`).
fn recover(
    session: &mut Session,
    workspace: &Workspace,
    apply_dir: ApplyDir,
    journal: &mut Journal,
    options: &ApplyOptions,
    log: &crate::audit::Log,
) -> std::result::Result<ApplyReport, ApplyError> {
    let path = workspace.path().to_path_buf();
    let what = if options.rollback {
        "rollback"
    } else {
        "finish"
    };
    let recovery = Recovery { what, paths: None };
    ApplyRecord::of(session, journal.number, recovery).append(log, "apply.recover")?;
    let (outcome, done, state) = if options.rollback {
        let outcome =
            engine::undo(workspace, &apply_dir, journal).map_err(io("roll back in", &path))?;
        (outcome, ApplyResult::Undone, JournalState::RolledBack)
    } else {
        let outcome = engine::commit(workspace, &session.upper(), journal, &[])
            .map_err(io("apply to", &path))?;
        (outcome, ApplyResult::Applied, JournalState::Committed)
    };
    journal.state = state;
    apply_dir
        .write(journal)
        .map_err(io("write", &apply_dir.journal_path()))?;
    let recovery = Recovery {
        what,
        paths: Some(logged_paths(journal, &outcome)),
    };
    ApplyRecord::of(session, journal.number, recovery).append(log, "apply.recovered")?;
    if options.rollback {
        let restored: Vec<PathBuf> = outcome
            .done
            .iter()
            .map(|&i| journal.ops[i].path().to_path_buf())
            .collect();
        ledger::record_restored(session, &restored)?;
    }
    let items = outcome_items(journal, &outcome, done);
    if !options.rollback {
        // The interrupted apply may have covered only some paths: the session is applied when
        // nothing is left to write.
        let left = airlock_changes::scan(&session.upper(), &path, session.overlay_xattrs())
            .map_err(|source| ChangesError::Scan {
                id: session.id.clone(),
                source,
            })?;
        if left.is_empty() {
            session.meta.lifecycle = Lifecycle::Applied;
            session.meta.ended = Some(now());
            session.save()?;
        }
    }
    Ok(ApplyReport {
        session: session.id.clone(),
        workspace: session.meta.workspace.clone(),
        number: Some(journal.number),
        recovered: true,
        digest: None,
        items,
        trees: Vec::new(),
        unseen: None,
        lifecycle: session.meta.lifecycle,
    })
}

/// Take the session's last apply back out of the workspace.
fn revert_last_apply(
    state_dir: &Path,
    log: &crate::audit::Log,
    id: &str,
    way: Way,
    on_busy: &dyn Fn(&Session),
) -> std::result::Result<ApplyReport, ApplyError> {
    let mut session = Session::find(state_dir, id)?;
    let _lock = session.lock_exclusive(on_busy)?;
    check_not_discarded(&session)?;
    let workspace_path = session.existing_workspace(way)?.to_path_buf();
    let workspace = Workspace::open(&workspace_path).map_err(io("open", &workspace_path))?;
    let Some((apply_dir, mut journal)) = journals(&session)?
        .into_iter()
        .rev()
        .find(|(_, j)| matches!(j.state, JournalState::Committed | JournalState::Prepared))
    else {
        return Err(ApplyError::NothingToRevert(session.id.clone()));
    };
    let intent = InWorkspace {
        workspace: &workspace_path,
    };
    let journal_path = apply_dir.journal_path();
    let applied = std::fs::metadata(&journal_path)
        .and_then(|m| m.modified())
        .map_err(io("read", &journal_path))?;
    links::check_undo_keeps_links_inside(&workspace_path, &journal.ops, applied)?;
    ApplyRecord::of(&session, journal.number, intent).append(log, "revert.intent")?;
    let outcome =
        engine::undo(&workspace, &apply_dir, &journal).map_err(io("revert in", &workspace_path))?;
    let result = Paths {
        paths: logged_paths(&journal, &outcome),
    };
    ApplyRecord::of(&session, journal.number, result).append(log, "revert.result")?;
    let restored: Vec<PathBuf> = outcome
        .done
        .iter()
        .map(|&i| journal.ops[i].path().to_path_buf())
        .collect();
    ledger::record_restored(&session, &restored)?;
    if outcome.conflicts.is_empty() {
        journal.state = JournalState::Reverted;
        apply_dir
            .write(&journal)
            .map_err(io("write", &apply_dir.journal_path()))?;
    }
    if session.meta.lifecycle == Lifecycle::Applied {
        session.meta.lifecycle = Lifecycle::Active;
        session.meta.ended = None;
        session.save()?;
    }
    Ok(ApplyReport {
        session: session.id.clone(),
        workspace: session.meta.workspace.clone(),
        number: Some(journal.number),
        recovered: false,
        digest: None,
        items: outcome_items(&journal, &outcome, ApplyResult::Undone),
        trees: Vec::new(),
        unseen: None,
        lifecycle: session.meta.lifecycle,
    })
}
