//! What the operations write to the audit log, and when: the intent before the action (which does
//! not start if the append fails), the result after.

use std::ffi::OsString;
use std::path::Path;

use serde_json::Value;
use sha2::{Digest, Sha256};

pub use airlock_audit::{AuditError, AuditLog, Sync};
use airlock_policy::Profile;

use crate::caller::Caller;

/// The audit log as one caller writes to it: each record says who asked.
#[derive(Clone)]
pub struct Log {
    log: AuditLog,
    /// The id of the API token the request came with.
    token: Option<String>,
}

impl std::ops::Deref for Log {
    type Target = AuditLog;
    fn deref(&self) -> &AuditLog {
        &self.log
    }
}

/// The audit log of `state_dir`, fsync'd unless `AIRLOCK_AUDIT_FSYNC=0`, written by this process
/// for no token.
pub fn log(state_dir: &Path) -> Log {
    Log {
        log: AuditLog::new(state_dir, Sync::from_env()),
        token: None,
    }
}

/// The audit log as `caller` writes to it: with the id of the token it came with, if any.
pub fn log_for(caller: &Caller, state_dir: &Path) -> Log {
    log_for_token(state_dir, caller.grant.as_ref().map(|g| g.token.clone()))
}

/// The audit log as a request with `token` writes to it (its records are that token's to read).
pub(crate) fn log_for_token(state_dir: &Path, token: Option<String>) -> Log {
    Log {
        token,
        ..log(state_dir)
    }
}

/// Who asked: the caller's uid, the supervisor's pid, and the API token's id.
#[derive(serde::Serialize)]
struct Actor<'a> {
    uid: u32,
    pid: u32,
    #[serde(skip_serializing_if = "Option::is_none")]
    token: Option<&'a str>,
}

fn actor(token: Option<&str>) -> Value {
    let actor = Actor {
        uid: nix::unistd::getuid().as_raw(),
        pid: std::process::id(),
        token,
    };
    serde_json::to_value(actor).unwrap_or(Value::Null)
}

/// The record's fields with who asked added.
fn with_actor(mut fields: Value, token: Option<&str>) -> Value {
    if let Value::Object(map) = &mut fields {
        map.insert("by".into(), actor(token));
    }
    fields
}

/// SHA-256 of the profile's file (of a starter's text: the same digest as a copy of it), or
/// `builtin` for the built-in default: which policy a run had.
pub fn policy_digest(profile: &Profile) -> String {
    match &profile.source {
        Some(path) => match std::fs::read(path) {
            Ok(bytes) => hex::encode(Sha256::digest(&bytes)),
            Err(_) => "unreadable".into(),
        },
        None => match airlock_policy::starter(&profile.name) {
            Some(starter) => hex::encode(Sha256::digest(starter.text.as_bytes())),
            None => "builtin".into(),
        },
    }
}

pub fn text(value: &OsString) -> String {
    value.to_string_lossy().into_owned()
}

/// Append, durably, before acting.
pub fn append(log: &Log, action: &str, fields: Value) -> Result<(), AuditError> {
    let fields = with_actor(fields, log.token.as_deref());
    log.log.append(action, fields).map(drop)
}

/// Append now, make durable later with `log.sync()` (before the action itself starts).
pub fn append_deferred(log: &Log, action: &str, fields: Value) -> Result<(), AuditError> {
    let fields = with_actor(fields, log.token.as_deref());
    log.log.append_deferred(action, fields).map(drop)
}

/// The audit log's records a caller may read, through `filter`: an agent's token reads only the
/// records of its own requests. The filter's session may be a session's name, as everywhere a
/// session is named: records carry only its id.
pub fn records(
    caller: &Caller,
    mut filter: airlock_audit::Filter,
) -> Result<(airlock_audit::Records, airlock_audit::Filter), crate::Error> {
    if let Some(grant) = &caller.grant {
        if caller.role == crate::Role::Agent {
            filter.token = Some(grant.token.clone());
        }
    }
    let state_dir = caller.state_dir()?;
    if let Some(named) = filter.session.take() {
        filter.session = Some(session_id(caller, &state_dir, named)?);
    }
    Ok((log(&state_dir).records()?, filter))
}

/// The id of the session `named` names. A session gone from the state dir (removed by 'airlock
/// gc') or one the caller's token does not reach is taken as an id as it is: its records are
/// still in the log, and the token filter keeps a token to its own.
fn session_id(caller: &Caller, state_dir: &Path, named: String) -> Result<String, crate::Error> {
    use crate::session::SessionError;
    match caller.find_session(state_dir, &named) {
        Ok(session) => Ok(session.id),
        Err(crate::Error::Session(err @ SessionError::Ambiguous { .. })) => Err(err.into()),
        Err(_) => Ok(named),
    }
}

/// `run.abandoned`: a run its client stopped waiting for (it went away, or the server stopped),
/// interrupted and then killed. Best effort: the run's own result record says how it ended.
pub fn record_abandoned(caller: &Caller, session: Option<&str>, why: &str) {
    let Ok(state_dir) = caller.state_dir() else {
        return;
    };
    let fields = serde_json::json!({ "session": session, "why": why, "argv": caller.asked });
    let _ = append(&log_for(caller, &state_dir), "run.abandoned", fields);
}

/// Remove the sealed segments past `retention` (`[audit] keep_days`, `keep_size`), the oldest
/// first, and none named from `keep_from` on or holding a record from it on (the first seq of the
/// oldest segment an export destination still has records to send from); the removal is recorded in the log, saying who did it, before any file goes
/// (see [`airlock_audit::AuditLog::apply_retention`]). Nothing at all without a limit.
pub fn apply_retention(
    state_dir: &Path,
    retention: &airlock_audit::Retention,
    keep_from: Option<u64>,
) -> Result<airlock_audit::RetentionReport, AuditError> {
    if retention.is_unlimited() {
        return Ok(airlock_audit::RetentionReport::default());
    }
    let mut fields = serde_json::Map::new();
    fields.insert("by".into(), actor(None));
    // The sessions still waiting for a person (not applied, not discarded): their records stay.
    // A state that cannot be read keeps nothing back by session, and says so by failing: so
    // retention does not run at all then.
    let under_review: std::collections::BTreeSet<String> = crate::session::Session::list(state_dir)
        .map_err(|e| AuditError::Read {
            path: state_dir.join("sessions"),
            source: std::io::Error::other(e.to_string()),
        })?
        .into_iter()
        .filter(|s| s.meta.lifecycle == crate::session::Lifecycle::Active)
        .map(|s| s.meta.id.clone())
        .collect();
    log(state_dir).apply_retention_holding(retention, keep_from, &under_review, fields)
}
