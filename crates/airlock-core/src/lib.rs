//! airlock's operations and their order: check the request against the policy, prepare the
//! session's layer, run confined, report. No system calls of its own beyond files; confinement
//! (and checking what the kernel can enforce) is `airlock-jail`'s job.
#![forbid(unsafe_code)]

mod apply;
pub mod audit;
mod changes;
pub mod control;
mod ledger;
pub mod netlog;
mod operations;
mod paths;
mod run;
mod session;

pub use apply::{
    apply, revert, ApplyError, ApplyOptions, ApplyReport, Item as ApplyItem, Result as ApplyResult,
};
pub use changes::{read_changes, relative_paths, ChangesError, ReadChanges, MAX_FILE_BYTES};
pub use operations::{create_session, discard_session};
pub use paths::{state_dir, StateDirError};
pub use run::{check_workspace_for, run, RunError, RunReport, RunRequest, DEFAULT_ROOT_SANDBOX_ID};
pub use session::{
    Lifecycle, NewSession, ProfileRef, Session, SessionError, SessionLock, SessionMeta,
    SessionStatus,
};
