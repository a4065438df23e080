//! airlock's operations and their order: load the policy, check what the kernel can enforce,
//! prepare the session's layer, run confined, report. No system calls of its own beyond files;
//! confinement is `airlock-jail`'s job.

mod paths;
mod run;
mod session;

pub use paths::{state_dir, StateDirError};
pub use run::{
    check_profile_paths, run, RunError, RunReport, RunRequest, DEFAULT_ROOT_SANDBOX_ID,
    SANDBOX_HOME, SANDBOX_USER,
};
pub use session::{staging_dir, Session, SessionError};
