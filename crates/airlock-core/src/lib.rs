//! airlock's operations and their order: check the request against the policy, prepare the
//! session's layer, run confined, report. No system calls of its own beyond files; confinement
//! (and checking what the kernel can enforce) is `airlock-jail`'s job.
//!
//! Every front end (the CLI, the HTTP API, MCP, hooks) says who asks ([`Caller`]) and what they
//! ask (a typed request: [`RunRequest`], [`SessionRequest`], [`DiffRequest`], [`ApplyRequest`],
//! [`kill_switch::ControlRequest`], …) and gets a typed answer. Core takes every decision: where
//! profiles come from and whether they can be trusted, which workspaces are allowed, who the
//! sandbox runs as, the kill switch, and the audit order (intent before the act, refusals too).
//! A front end parses and prints; it checks no rule.
#![forbid(unsafe_code)]

mod abandoned;
mod apply;
mod approvals;
pub mod audit;
pub mod bodies;
mod caller;
mod changes;
pub mod config;
pub mod control;
mod diff;
mod digest;
mod error;
mod identity;
mod io_failure;
pub mod k8s;
pub mod kill_switch;
mod ledger;
pub mod netlog;
mod operations;
pub mod page_login;
mod paths;
pub mod pod_runtime;
mod policy;
mod refusal;
pub mod replay;
mod review;
mod run;
pub mod secrets;
pub use secrets::Placeholder;
mod session;
pub mod session_runs;
mod shown;
pub mod tokens;

pub use abandoned::close as close_abandoned_runs;
pub use airlock_jail::Way;
pub use airlock_policy::{
    to_toml as profile_to_toml, units, Listed, ListedFrom, Profile, DEFAULT_PROFILE_NAME,
};
pub use apply::{
    apply, revert, ApplyError, ApplyOptions, ApplyReport, ApplyRequest, ApplyResult,
    Item as ApplyItem, TreeOutcome,
};
pub use approvals::{
    decide_approval, get_approval, list_approvals, Answer as ApprovalAnswer, Approval,
    ApprovalList, ApprovalStatus, DecideRequest, Decision as ApprovalDecision,
};
pub use caller::{describe_profile, Caller, Grant, ProfileChoice, Role};
pub use changes::{ChangesError, MAX_FILE_BYTES};
pub use diff::{diff, ChangeEntry, Diff, DiffRequest, DiffView, Side};
pub use digest::{TreeHazard, TreeSummary, TREE_LIST_MAX};
pub use error::{CommandError, Error, ErrorKind, Refusal};
pub use identity::DEFAULT_ROOT_SANDBOX_ID;
pub use operations::{
    create_session, discard_session, gc, list_sessions, names_for_completion, session_summary,
    settle_server_cgroup, tidy_after_crash, timestamp, Collected, GcReport, GcRequest, NameKind,
    SessionList, SessionRequest, SessionSummary,
};
pub use paths::{state_dir, StateDirError};
pub use policy::{
    check_profile_file, effective_profile, learn, list_profiles, profile_as_written,
    profile_origin, starter_text, Learned, ProfileOrigin,
};
pub use refusal::flush_suppressed as flush_suppressed_refusals;
pub use run::{
    check_limits, check_run, command_argv, counted, prepare_run, run, run_answering, run_prepared,
    timeout_ms, Limit, LimitCheck, PreparedRun, RefusedDestination, RunAnswer, RunBody, RunEnd,
    RunEvent, RunReport, RunRequest, RunResult, EXIT_CPU_LIMIT, EXIT_DISK_LIMIT, EXIT_TIMED_OUT,
    MAX_COMMAND_BYTES, SANDBOX_HOME, SANDBOX_USER, WARM_MAX_WAIT,
};
pub use session::{
    LayerImage, Lifecycle, ProfileRef, Session, SessionError, SessionMeta, SessionStatus,
};
pub use shown::Unseen;
