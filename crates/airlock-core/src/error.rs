//! What can go wrong in an operation a front end asks of core. Each message names the path or
//! argument, and says what to do next.

use std::path::PathBuf;

/// The error of every operation core offers its front ends.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Session(#[from] crate::session::SessionError),
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditError),
    #[error(transparent)]
    Control(#[from] crate::control::ControlError),
    #[error(transparent)]
    Jail(#[from] airlock_jail::JailError),
    #[error(transparent)]
    Policy(#[from] airlock_policy::PolicyError),
    #[error(transparent)]
    StateDir(#[from] crate::paths::StateDirError),
    #[error(transparent)]
    Changes(#[from] crate::changes::ChangesError),
    #[error(transparent)]
    Apply(#[from] crate::apply::ApplyError),
    #[error("workspace {path}: {why}")]
    Workspace { path: PathBuf, why: String },
    #[error("profile {profile}: [filesystem] path {path}: {why}")]
    ProfilePath {
        profile: String,
        path: PathBuf,
        why: String,
    },
    /// A request that cannot be carried out as it was asked: `arg` names what was asked
    /// (an option, a field) as the caller gave it.
    #[error("{arg}: {why}")]
    Argument { arg: String, why: String },
    #[error("session {id} runs with profile {profile}; omit -p/--profile-file, or start a new session for another profile")]
    ProfileOfSession { id: String, profile: String },
    #[error("cannot encode an audit record: {0}")]
    Record(#[from] serde_json::Error),
    #[error("session {session} changed nothing at or under {} — 'airlock diff {named} --name-status' lists what it changed", shown_paths(.paths))]
    NothingAtPaths {
        session: String,
        named: String,
        paths: Vec<PathBuf>,
    },
    /// The caller's role does not allow it (see [`crate::Role`]).
    #[error(
        "an agent may not {what}: a person reviews and does that (airlock diff, airlock apply)"
    )]
    NotPermitted { what: String },
    #[error("cannot tell the current directory — pass --workspace DIR")]
    NoWorkingDirectory,
    /// A limit the profile names that the kernel cannot hold this run to.
    #[error("[limits] {limit} cannot be enforced by the kernel here ({why}); refusing to run with less than the profile asks for — run 'airlock check', or accept it explicitly with --allow-degraded={flag}")]
    LimitNotEnforced {
        limit: &'static str,
        why: String,
        flag: &'static str,
    },
}

/// Paths a person typed, one after another, with control characters escaped.
fn shown_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string().escape_debug().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}
