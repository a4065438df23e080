//! What can go wrong with a session, each error naming the session, the path and what to do.

use std::path::PathBuf;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    /// The session's own filesystem (see [`LayerImage`]) could not be made, mounted or removed.
    #[error("session {id}: {source}")]
    Image {
        id: String,
        source: airlock_jail::JailError,
    },
    #[error("cannot {action} {path}: {source} — check the permissions of the state directory, or pass --state-dir")]
    Io {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("no session {id} in {dir} — 'airlock sessions' lists them; 'airlock session new' starts one")]
    Unknown { id: String, dir: PathBuf },
    #[error("session name {name:?} is used by {ids}; name the session by its id")]
    Ambiguous { name: String, ids: String },
    #[error("session {id} belongs to workspace {theirs}, not {ours} — use the session's workspace or a new session")]
    OtherWorkspace {
        id: String,
        theirs: PathBuf,
        ours: PathBuf,
    },
    #[error("invalid session id or name {0:?}: use letters, digits, '-', '_' and '.' (at most 64, not starting with '.' or '-')")]
    BadId(String),
    #[error("session name {0:?} is taken — choose another, or use that session")]
    NameTaken(String),
    #[error("session {id} was discarded: its layer is gone — start a new session with 'airlock session new'")]
    Discarded { id: String },
    #[error("session {id} was applied: it takes no more runs — 'airlock revert {id}' takes the apply back and makes it active again; or start a new session with 'airlock session new'")]
    Applied { id: String },
    #[error("session {id} was killed ('airlock kill') while this run waited for it: the run was not started — run it again to start it now")]
    KilledWhileWaiting { id: String },
    #[error("session {id}: apply {number} was interrupted — finish it with 'airlock apply {id}', or undo it with 'airlock apply {id} --rollback'")]
    InterruptedApply { id: String, number: u32 },
    #[error("session {id} was made {made}: its layer is read only that way (its overlay's xattrs are of that way's namespace) — run airlock for it as it was run then, or discard it and start a new session")]
    OtherWay { id: String, made: &'static str },
    #[error("session {id}: its workspace {path} no longer exists (moved or deleted?) — put it back, or discard the session with 'airlock discard {id}'")]
    WorkspaceGone { id: String, path: PathBuf },
    #[error("session {id}: its workspace {path} now leads to {now} (replaced by a symlink, or a directory on its way moved?) — put the directory back, or discard the session with 'airlock discard {id}'")]
    WorkspaceRedirected {
        id: String,
        path: PathBuf,
        now: PathBuf,
    },
    #[error(
        "session {id}: {path} is damaged ({why}) — discard the session with 'airlock discard {id}'"
    )]
    Damaged {
        id: String,
        path: PathBuf,
        why: String,
    },
}

crate::io_failure::io_variant!(SessionError, Io);
