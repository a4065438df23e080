//! airlock's operations and their order: check the request against the policy, prepare the
//! session's layer, run confined, report. No system calls of its own beyond files; confinement
//! (and checking what the kernel can enforce) is `airlock-jail`'s job.
#![forbid(unsafe_code)]

mod paths;
mod run;
mod session;

pub use paths::{state_dir, StateDirError};
pub use run::{run, RunError, RunReport, RunRequest, DEFAULT_ROOT_SANDBOX_ID};
pub use session::{Session, SessionError};
