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
    #[error(transparent)]
    PodFile(#[from] crate::pod_runtime::PodFileError),
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
    #[error(transparent)]
    Command(#[from] CommandError),
    /// What only a throwaway run takes, asked of a run in a session.
    #[error("{what} is for throwaway runs: a session keeps its layer already; leave it out, or leave out the session")]
    NotForSessions { what: &'static str },
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
    /// An agent asking to list or answer approvals: a person decides (see [`crate::Role`]).
    #[error("an agent may not {what}: a person answers them ('airlock approvals' at the machine, or the API with an operator token)")]
    ApprovalsForOperators { what: &'static str },
    /// The request's token is not bound to what it names (see [`crate::Grant`]).
    #[error(
        "this token may not {what} — an operator makes a token for it with 'airlock token create'"
    )]
    OutsideGrant { what: String },
    /// The review page's login was refused (a link unknown, used or expired; a token that opens
    /// nothing).
    #[error("cannot log in to the review page: {why}")]
    Login { why: String },
    /// A file of airlock's own state (not a session's) could not be used.
    #[error("cannot {action} {path}: {source} — check the permissions of the state directory, or pass --state-dir")]
    State {
        action: &'static str,
        path: PathBuf,
        source: std::io::Error,
    },
    /// A file of airlock's own state that someone other than this user could have written.
    #[error("refusing to trust {path}: {why}")]
    StateUntrusted { path: PathBuf, why: String },
    #[error("cannot tell the current directory — pass --workspace DIR")]
    NoWorkingDirectory,
    #[error("no approval {id} — 'airlock approvals' lists those waiting")]
    ApprovalNotFound { id: String },
    /// An approval answered already, past its time, or whose run has gone.
    #[error("approval {id} cannot be answered: it is {} already", status_word(*.status))]
    ApprovalClosed {
        id: String,
        status: crate::approvals::ApprovalStatus,
    },
    /// A `[[secret]]` whose value cannot be read now: never an empty value instead, and never
    /// the value in the message.
    #[error("secret {secret} (from {from}): {why}")]
    SecretUnavailable {
        secret: String,
        from: String,
        why: String,
    },
    /// The gate cannot terminate TLS for a profile's secrets' hosts or `[[network.http]]` hosts
    /// here (no root certificates to verify them by, the run's CA not made).
    #[error("cannot read the HTTPS of the profile's secrets' and [[network.http]] hosts: {why}")]
    InjectionUnavailable { why: String },
    /// A limit the profile names that the kernel cannot hold this run to.
    #[error("[limits] {limit} cannot be enforced by the kernel here ({why}); refusing to run with less than the profile asks for — run 'airlock check', or accept it explicitly with --allow-degraded={flag}")]
    LimitNotEnforced {
        limit: &'static str,
        why: String,
        flag: &'static str,
    },
}

crate::io_failure::io_variant!(Error, State);

fn status_word(status: crate::approvals::ApprovalStatus) -> &'static str {
    use crate::approvals::ApprovalStatus as S;
    match status {
        S::Pending => "pending",
        S::AllowedOnce => "allowed once",
        S::AllowedSession => "allowed for its session",
        S::Denied => "denied",
        S::Expired => "expired (nobody answered in time)",
        S::Ended => "ended (its run stopped waiting)",
    }
}

/// Paths a person typed, one after another, with control characters escaped.
pub(crate) fn shown_paths(paths: &[PathBuf]) -> String {
    paths
        .iter()
        .map(|p| p.display().to_string().escape_debug().to_string())
        .collect::<Vec<_>>()
        .join(", ")
}

/// What kind of failure an error is, for a front end to say in its own terms (an HTTP status, an
/// exit code): the request's fault, a refusal, or the machine's.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ErrorKind {
    /// The request cannot be carried out as asked: fix it.
    Invalid,
    /// The caller may not do it (its role, its token's binding, the kill switch).
    Forbidden,
    /// What it names does not exist.
    NotFound,
    /// The state of what it names does not allow it now (applied, discarded, busy, hazards).
    Conflict,
    /// This machine cannot enforce what the policy asks.
    Unavailable,
    /// airlock's own state or the system failed: not the caller's fault.
    Internal,
    /// The caller's credentials do not, or no longer, open the door (a token revoked, expired).
    Unauthenticated,
    /// The caller has as much going on as it may (its runs, its requests): wait and ask again.
    Busy,
    /// The caller went away or cancelled what it asked: nothing more was done.
    Cancelled,
}

/// A refusal as every front end passes it on: the stable code, its kind, and the message that
/// says what to do. What a server's worker hands back, what MCP's tools answer with, what the API
/// turns into a status and a body.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize, thiserror::Error)]
#[error("{message}")]
pub struct Refusal {
    pub code: String,
    pub kind: ErrorKind,
    pub message: String,
}

impl Refusal {
    pub fn new(kind: ErrorKind, code: impl Into<String>, message: impl Into<String>) -> Refusal {
        Refusal {
            code: code.into(),
            kind,
            message: message.into(),
        }
    }

    /// airlock failed itself: the message says what, and to report it.
    pub fn internal(message: impl Into<String>) -> Refusal {
        Refusal::new(ErrorKind::Internal, "internal", message)
    }
}

impl From<Error> for Refusal {
    fn from(err: Error) -> Refusal {
        let (code, kind) = err.code();
        Refusal::new(kind, code, err.to_string())
    }
}

/// A command a request gives that no program could be run as.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CommandError {
    #[error("give command (a shell line) or argv (a program and its arguments)")]
    Missing,
    #[error("give either command (a shell line) or argv (a program and its arguments), not both")]
    Both,
    #[error("argv is empty: give the program and its arguments")]
    EmptyArgv,
    #[error("an argument holds a NUL byte, which no program can receive")]
    Nul,
    #[error("the command is {size} bytes; at most {max}: put long input in stdin")]
    TooLong { size: usize, max: usize },
    #[error("timeout is seconds, more than 0")]
    BadTimeout,
}

impl Error {
    /// A stable name for the error (`session_not_found`, `role_forbidden`, …) and its kind: what
    /// scripts and API clients branch on, where the message is for people.
    pub fn code(&self) -> (&'static str, ErrorKind) {
        use ErrorKind::*;
        match self {
            Error::Session(e) => session_code(e),
            Error::Audit(_) => ("audit_failed", Internal),
            Error::Control(e) => control_code(e),
            Error::Jail(e) => jail_code(e),
            Error::Policy(
                airlock_policy::PolicyError::NotFound { .. }
                | airlock_policy::PolicyError::NoStarter { .. },
            ) => ("profile_not_found", NotFound),
            Error::Policy(_) => ("profile_invalid", Invalid),
            Error::StateDir(_) => ("state_dir", Internal),
            Error::Changes(e) => changes_code(e),
            Error::Apply(e) => apply_code(e),
            Error::PodFile(e) => e.code(),
            Error::Workspace { .. } => ("workspace_refused", Invalid),
            Error::ProfilePath { .. } => ("profile_path_refused", Invalid),
            Error::Argument { .. } => ("bad_argument", Invalid),
            Error::NotForSessions { .. } => ("not_for_sessions", Invalid),
            Error::Command(e) => command_code(e),
            Error::ProfileOfSession { .. } => ("profile_of_session", Invalid),
            Error::Record(_) => ("record_failed", Internal),
            Error::NothingAtPaths { .. } => ("nothing_at_paths", Invalid),
            Error::NotPermitted { .. } | Error::ApprovalsForOperators { .. } => {
                ("role_forbidden", Forbidden)
            }
            Error::Login { .. } => ("login_refused", Forbidden),
            Error::OutsideGrant { .. } => ("outside_token_binding", Forbidden),
            Error::State { .. } | Error::StateUntrusted { .. } => ("state_io", Internal),
            Error::NoWorkingDirectory => ("workspace_required", Invalid),
            Error::LimitNotEnforced { .. } => ("limit_not_enforced", Unavailable),
            Error::SecretUnavailable { .. } => ("secret_unavailable", Unavailable),
            Error::InjectionUnavailable { .. } => ("injection_unavailable", Unavailable),
            Error::ApprovalNotFound { .. } => ("approval_not_found", NotFound),
            Error::ApprovalClosed { .. } => ("approval_closed", Conflict),
        }
    }
}

fn session_code(e: &crate::session::SessionError) -> (&'static str, ErrorKind) {
    use crate::session::SessionError as S;
    use ErrorKind::*;
    match e {
        S::Image { .. } | S::Io { .. } => ("state_io", Internal),
        S::Unknown { .. } => ("session_not_found", NotFound),
        S::Ambiguous { .. } => ("session_ambiguous", Conflict),
        S::OtherWorkspace { .. } => ("session_other_workspace", Invalid),
        S::BadId(_) => ("bad_session_id", Invalid),
        S::NameTaken(_) => ("session_name_taken", Conflict),
        S::Discarded { .. } => ("session_discarded", Conflict),
        S::Applied { .. } => ("session_applied", Conflict),
        S::KilledWhileWaiting { .. } => ("session_killed", Conflict),
        S::InterruptedApply { .. } => ("apply_interrupted", Conflict),
        S::WorkspaceGone { .. } | S::WorkspaceRedirected { .. } => ("workspace_gone", Conflict),
        S::Damaged { .. } => ("session_damaged", Conflict),
        S::OtherWay { .. } => ("session_other_way", Conflict),
    }
}

fn command_code(e: &CommandError) -> (&'static str, ErrorKind) {
    use ErrorKind::Invalid;
    match e {
        CommandError::Missing => ("no_command", Invalid),
        CommandError::Both => ("command_and_argv", Invalid),
        CommandError::EmptyArgv | CommandError::Nul => ("bad_argv", Invalid),
        CommandError::TooLong { .. } => ("command_too_long", Invalid),
        CommandError::BadTimeout => ("bad_timeout", Invalid),
    }
}

fn control_code(e: &crate::control::ControlError) -> (&'static str, ErrorKind) {
    use crate::control::ControlError as C;
    match e {
        C::Disabled(_) => ("disabled", ErrorKind::Forbidden),
        C::NoMatch(_) => ("no_such_sandbox", ErrorKind::NotFound),
        C::Session(e) => session_code(e),
        C::Jail(e) => jail_code(e),
        C::Audit(_) => ("audit_failed", ErrorKind::Internal),
        C::Io { .. } | C::Record(_) => ("state_io", ErrorKind::Internal),
    }
}

fn jail_code(e: &airlock_jail::JailError) -> (&'static str, ErrorKind) {
    use airlock_jail::JailError as J;
    // Every variant named, so that a new one is given its code here.
    match e {
        J::Refused(_)
        | J::LayerMissing { .. }
        | J::UserNamespacesRestricted(_)
        | J::SystemdScope { .. } => ("layer_unavailable", ErrorKind::Unavailable),
        J::NoCommand
        | J::SandboxUserIsRoot
        | J::HostsRootWithoutPrivilege
        | J::LandlockRequiredForRoot
        | J::NotUtf8 { .. }
        | J::NotBeneath { .. }
        | J::EtcCacheUnstable { .. }
        | J::NoMkfs
        | J::MkfsFailed { .. }
        | J::SandboxEnded { .. }
        | J::StopOutpaced
        | J::FreezerStuck { .. }
        | J::DiskLow { .. }
        | J::InodesLow { .. }
        | J::Caller(_) => ("sandbox_invalid", ErrorKind::Invalid),
        J::Path { .. }
        | J::Syscall { .. }
        | J::UnexpectedMessage { .. }
        | J::MalformedMessage { .. }
        | J::MalformedCommand(_)
        | J::UnknownMessage { .. }
        | J::TooManyDescriptors { .. }
        | J::NoUserNamespaces { .. }
        | J::SendFailed { .. }
        | J::ReceiveFailed { .. }
        | J::PeerGone { .. }
        | J::SetupReported(_)
        | J::Landlock(_)
        | J::UnexpectedWaitStatus(_) => ("sandbox_failed", ErrorKind::Internal),
    }
}

fn changes_code(e: &crate::changes::ChangesError) -> (&'static str, ErrorKind) {
    use crate::changes::ChangesError as C;
    match e {
        C::Session(e) => session_code(e),
        C::Scan { .. } => ("scan_failed", ErrorKind::Internal),
        C::ToolPattern(_) => ("profile_invalid", ErrorKind::Invalid),
        C::OutsideWorkspace { .. } => ("path_outside_workspace", ErrorKind::Invalid),
    }
}

fn apply_code(e: &crate::apply::ApplyError) -> (&'static str, ErrorKind) {
    use crate::apply::ApplyError as A;
    match e {
        A::Session(e) => session_code(e),
        A::Changes(e) => changes_code(e),
        A::Audit(_) => ("audit_failed", ErrorKind::Internal),
        A::Io { .. } | A::Record(_) => ("apply_io", ErrorKind::Internal),
        A::AlreadyApplied(_) => ("session_applied", ErrorKind::Conflict),
        A::Discarded(_) => ("session_discarded", ErrorKind::Conflict),
        A::NothingToRevert(_) => ("nothing_to_revert", ErrorKind::Conflict),
        A::NothingToRollBack(_) => ("nothing_to_roll_back", ErrorKind::Conflict),
        A::ReviewStale { .. } => ("review_stale", ErrorKind::Conflict),
        A::InsideTree { .. } => ("path_inside_tree", ErrorKind::Invalid),
        A::NameTooLong(_) => ("name_too_long", ErrorKind::Conflict),
        A::LinkLeadsOut { .. } | A::UndoLeadsOut { .. } => {
            ("symlink_leads_out", ErrorKind::Conflict)
        }
    }
}
