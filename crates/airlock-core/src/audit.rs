//! What the operations write to the audit log, and when: the intent before the action (which does
//! not start if the append fails), the result after.

use std::ffi::OsString;
use std::path::Path;

use serde_json::Value;
use sha2::{Digest, Sha256};

pub use airlock_audit::{AuditError, AuditLog, Sync};
use airlock_policy::Profile;

/// The audit log of `state_dir`, fsync'd unless `AIRLOCK_AUDIT_FSYNC=0`.
pub fn log(state_dir: &Path) -> AuditLog {
    AuditLog::new(state_dir, Sync::from_env())
}

/// Who asked: the caller's uid, and the supervisor's pid.
#[derive(serde::Serialize)]
struct Actor {
    uid: u32,
    pid: u32,
}

fn actor() -> Value {
    let actor = Actor {
        uid: nix::unistd::getuid().as_raw(),
        pid: std::process::id(),
    };
    serde_json::to_value(actor).unwrap_or(Value::Null)
}

/// The record's fields with who asked added.
pub fn with_actor(mut fields: Value) -> Value {
    if let Value::Object(map) = &mut fields {
        map.insert("by".into(), actor());
    }
    fields
}

/// SHA-256 of the profile's file, or `builtin` for the built-in default: which policy a run had.
pub fn policy_digest(profile: &Profile) -> String {
    match &profile.source {
        Some(path) => match std::fs::read(path) {
            Ok(bytes) => Sha256::digest(&bytes)
                .iter()
                .map(|b| format!("{b:02x}"))
                .collect(),
            Err(_) => "unreadable".into(),
        },
        None => "builtin".into(),
    }
}

pub fn text(value: &OsString) -> String {
    value.to_string_lossy().into_owned()
}

/// Append, durably, before acting.
pub fn append(log: &AuditLog, action: &str, fields: Value) -> Result<(), AuditError> {
    log.append(action, with_actor(fields)).map(drop)
}

/// Append now, make durable later with `log.sync()` (before the action itself starts).
pub fn append_deferred(log: &AuditLog, action: &str, fields: Value) -> Result<(), AuditError> {
    log.append_deferred(action, with_actor(fields)).map(drop)
}
