//! Approvals: a connection the profile's `[network] ask` names waits while a person decides.
//! The gate holds the connect; the run's supervisor asks (see [`asker`]); an operator answers
//! from another process (`airlock approve`, the API); silence denies.
//!
//! ```text
//! STATE/approvals/ID.json          the question, written once `approval.asked` is durable
//! STATE/approvals/ID.answer.json   the answer (a person's, or the waiting side's when nobody
//!                                  answered in time or the run ended): written once, under
//!                                  STATE/approvals/lock, after its audit record
//! STATE/sessions/ID/approved.json  destinations allowed for the rest of a session
//! ```
//!
//! The order is the security argument: the question is in the audit log before anyone can see
//! it; a decision is in the log, naming who made it, before it takes effect; and whoever takes
//! the lock first (a person, or the clock) is the one answer there is.

pub(crate) mod asker;
#[cfg(test)]
mod tests;
mod webhook;

use std::fs;
use std::io::Write as _;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::caller::Caller;
use crate::error::Error;
use crate::io_failure::io;

/// One approval: the question, and its answer once there is one.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Approval {
    /// `ap_` and 16 hex digits.
    pub id: String,
    pub status: ApprovalStatus,
    /// The session of the run that asks (None: a run outside any session).
    pub session: Option<String>,
    pub profile: String,
    /// The run that asks: its supervisor's process id.
    pub run: u32,
    /// The name the command connects to, or the address it connects to by address.
    pub host: String,
    pub port: u16,
    /// The program that connects, as the kernel names it (the sandbox chose it: shown, never
    /// trusted).
    pub program: Option<String>,
    /// The `ask` entry that named it (`*` for `ask = ["*"]`).
    pub entry: String,
    /// Seconds since the Unix epoch.
    pub asked_at: u64,
    /// When the connection is refused if nobody answered (seconds since the Unix epoch).
    pub expires_at: u64,
    /// The profile's `ask_timeout`.
    pub timeout_seconds: u64,
    /// Seconds until `expires_at` when this was read (0 once answered or past).
    #[serde(default)]
    pub seconds_left: u64,
    /// The line that would allow it for good, for a person to copy into the profile's
    /// `[network]` section: `allow = ["api.github.com:443"]`.
    pub profile_line: String,
    /// The answer; None while it waits.
    #[serde(default)]
    pub answer: Option<Answer>,
}

/// The approvals waiting for a person: what `GET /v1/approvals` and `airlock approvals --json`
/// answer.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ApprovalList {
    pub approvals: Vec<Approval>,
}

impl Approval {
    /// `host:port` (`[v6]:port`), as an allow entry writes it.
    pub fn destination(&self) -> String {
        airlock_policy::learn::destination(&self.host, self.port)
    }
}

/// Where an approval stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ApprovalStatus {
    /// Waiting for a person.
    Pending,
    /// Allowed for the run that asked (every connection of that run to this host and port).
    AllowedOnce,
    /// Allowed for the run that asked and every later run of its session.
    AllowedSession,
    /// Refused by a person.
    Denied,
    /// Nobody answered within the profile's `ask_timeout`: refused.
    Expired,
    /// The run ended, was killed, its network cut, or airlock disabled before anyone answered:
    /// refused.
    Ended,
}

/// What an operator answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Decision {
    /// Let this run connect to the host and port (this connection, and its others there).
    AllowOnce,
    /// Let this run and every later run of its session connect there without asking.
    AllowSession,
    Deny,
}

/// A decision on an approval, as a front end passes it on.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct DecideRequest {
    pub decision: Decision,
    /// Why, in the person's words (at most [`MAX_REASON`] characters): in the audit log, and
    /// in the refusal a denied run shows.
    #[serde(default)]
    pub reason: Option<String>,
}

/// The answer an approval got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Answer {
    pub status: ApprovalStatus,
    /// Who: `uid 1000`, `token 3f9a…` (an operator's API token, by its id), or `nobody`.
    pub by: String,
    #[serde(default)]
    pub reason: Option<String>,
    /// Seconds since the Unix epoch.
    pub at: u64,
}

/// The longest reason kept.
pub const MAX_REASON: usize = 500;

fn dir(state_dir: &Path) -> PathBuf {
    state_dir.join("approvals")
}

fn question_path(state_dir: &Path, id: &str) -> PathBuf {
    dir(state_dir).join(format!("{id}.json"))
}

fn answer_path(state_dir: &Path, id: &str) -> PathBuf {
    dir(state_dir).join(format!("{id}.answer.json"))
}

/// Hold the lock every answer is written under.
fn lock(state_dir: &Path) -> Result<nix::fcntl::Flock<fs::File>, Error> {
    let path = dir(state_dir).join("lock");
    fs::create_dir_all(dir(state_dir)).map_err(io("create", &dir(state_dir)))?;
    Ok(crate::paths::lock_exclusive(&path).map_err(io("lock", &path))?)
}

/// Write `value` to `path` whole or not at all, durably (temporary file, fsync, rename, fsync
/// of the directory): a reader sees the old state or the new one.
fn write_atomically(path: &Path, value: &impl Serialize) -> Result<(), Error> {
    let dir = path.parent().unwrap_or(Path::new("/"));
    fs::create_dir_all(dir).map_err(io("create", dir))?;
    let temp = dir.join(format!(
        ".{}.tmp",
        path.file_name().unwrap_or_default().to_string_lossy()
    ));
    let text = serde_json::to_vec_pretty(value)?;
    let file = fs::File::create(&temp).map_err(io("write", &temp))?;
    (&file)
        .write_all(&text)
        .and_then(|()| file.sync_all())
        .map_err(io("write", &temp))?;
    fs::rename(&temp, path).map_err(io("write", path))?;
    fs::File::open(dir)
        .and_then(|d| d.sync_all())
        .map_err(io("sync", dir))?;
    Ok(())
}

fn read_json<T: for<'de> Deserialize<'de>>(path: &Path) -> Result<Option<T>, Error> {
    match fs::read(path) {
        Ok(bytes) => Ok(Some(serde_json::from_slice(&bytes).map_err(|e| {
            Error::StateUntrusted {
                path: path.to_path_buf(),
                why: format!("not an approval record ({e}): remove it"),
            }
        })?)),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(e) => Err(io("read", path)(e).into()),
    }
}

/// An approval as it stands now: its question, its answer if any, and the seconds it has left.
fn read(state_dir: &Path, id: &str) -> Result<Option<Approval>, Error> {
    let Some(mut approval) = read_json::<Approval>(&question_path(state_dir, id))? else {
        return Ok(None);
    };
    approval.answer = read_json(&answer_path(state_dir, id))?;
    if let Some(answer) = &approval.answer {
        approval.status = answer.status;
    }
    approval.seconds_left = match approval.status {
        ApprovalStatus::Pending => approval.expires_at.saturating_sub(crate::session::now()),
        _ => 0,
    };
    Ok(Some(approval))
}

/// How long an approval is kept after it was asked, for `GET /v1/approvals/{id}` and
/// `airlock approve`'s "answered already": a day past the longest it can wait (its records stay
/// in the audit log for good). One whose run died before answering it is removed so too.
const KEPT: std::time::Duration =
    std::time::Duration::from_secs(24 * 3600 + airlock_policy::MAX_ASK_TIMEOUT_SECONDS);

/// Remove the approvals asked longer than [`KEPT`] ago (when a new one is asked: the directory
/// holds no more than a day's questions).
fn prune(state_dir: &Path) {
    let Ok(entries) = fs::read_dir(dir(state_dir)) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_suffix(".json").filter(|id| check_id(id).is_ok()) else {
            continue;
        };
        let old = entry
            .metadata()
            .and_then(|m| m.modified())
            .is_ok_and(|at| at.elapsed().is_ok_and(|age| age > KEPT));
        if old {
            let _ = fs::remove_file(answer_path(state_dir, id));
            let _ = fs::remove_file(entry.path());
        }
    }
}

/// Could anyone still answer it: pending, in time, and its run still there to wait for it? A
/// run that died without answering (its supervisor killed) leaves a question nobody waits for.
fn answerable(approval: &Approval) -> bool {
    approval.status == ApprovalStatus::Pending
        && approval.seconds_left > 0
        // Another user's process (EPERM) is there all the same.
        && !matches!(
            nix::sys::signal::kill(nix::unistd::Pid::from_raw(approval.run as i32), None),
            Err(nix::errno::Errno::ESRCH)
        )
}

/// An approval id as airlock makes them, and nothing else (it names a file).
fn check_id(id: &str) -> Result<(), Error> {
    let hex = id.strip_prefix("ap_").unwrap_or_default();
    if hex.len() == 16 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        return Ok(());
    }
    Err(Error::Argument {
        arg: format!("approval {}", id.escape_debug()),
        why: "not an approval id (ap_ and 16 hex digits) — 'airlock approvals' lists them".into(),
    })
}

/// Refuse an agent: only a person decides.
fn operators_only(caller: &Caller) -> Result<(), Error> {
    match caller.role {
        crate::Role::Operator => Ok(()),
        crate::Role::Agent => Err(Error::ApprovalsForOperators {
            what: "list or answer approvals",
        }),
    }
}

/// Refuse an agent, and a token bound to another profile than the approval's.
fn check_reach(caller: &Caller, approval: Option<&Approval>) -> Result<(), Error> {
    operators_only(caller)?;
    if let (Some(grant), Some(approval)) = (&caller.grant, approval) {
        if grant.profile != approval.profile {
            return Err(Error::OutsideGrant {
                what: format!(
                    "answer approval {} of profile {}: it is bound to profile {}",
                    approval.id, approval.profile, grant.profile
                ),
            });
        }
    }
    Ok(())
}

/// The approvals waiting for a person, oldest first. Operators only; a token bound to a profile
/// sees that profile's.
pub fn list_approvals(caller: &Caller) -> Result<Vec<Approval>, Error> {
    check_reach(caller, None)?;
    let state_dir = caller.state_dir()?;
    let dir = dir(&state_dir);
    let entries = match fs::read_dir(&dir) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
        Err(e) => return Err(io("read", &dir)(e).into()),
    };
    let mut found = Vec::new();
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(id) = name.strip_suffix(".json").filter(|id| check_id(id).is_ok()) else {
            continue;
        };
        // One that cannot be read is not listed; 'airlock approve ID' says why.
        let Ok(Some(approval)) = read(&state_dir, id) else {
            continue;
        };
        let bound = caller.grant.as_ref().map(|g| g.profile.as_str());
        if answerable(&approval) && bound.is_none_or(|p| p == approval.profile) {
            found.push(approval);
        }
    }
    found.sort_by(|a, b| (a.asked_at, &a.id).cmp(&(b.asked_at, &b.id)));
    Ok(found)
}

/// One approval, whatever its status. Operators only.
pub fn get_approval(caller: &Caller, id: &str) -> Result<Approval, Error> {
    operators_only(caller)?;
    check_id(id)?;
    let state_dir = caller.state_dir()?;
    let approval =
        read(&state_dir, id)?.ok_or_else(|| Error::ApprovalNotFound { id: id.into() })?;
    check_reach(caller, Some(&approval))?;
    Ok(approval)
}

/// Who an operator is, as the audit log and the answer name them.
fn who(caller: &Caller) -> String {
    match &caller.grant {
        Some(grant) => format!("token {}", grant.token),
        None => format!("uid {}", nix::unistd::getuid()),
    }
}

/// `approval.decided`: who answered what, written before the answer takes effect.
#[derive(Serialize)]
struct Decided<'a> {
    id: &'a str,
    session: Option<&'a str>,
    profile: &'a str,
    run: u32,
    host: &'a str,
    port: u16,
    decision: Decision,
    decided_by: &'a str,
    reason: Option<&'a str>,
}

/// Answer an approval: the run's connection goes on or is refused. Operators only; the
/// decision is in the audit log, naming who made it, before the waiting run can see it. An
/// approval answered already, past its time, or whose run is gone cannot be answered.
pub fn decide_approval(
    caller: &Caller,
    id: &str,
    request: &DecideRequest,
) -> Result<Approval, Error> {
    // A refusal (an agent's attempt above all) is on record too.
    crate::refusal::audited(caller, "approval.refused", None, || {
        decide(caller, id, request)
    })
}

fn decide(caller: &Caller, id: &str, request: &DecideRequest) -> Result<Approval, Error> {
    operators_only(caller)?;
    check_id(id)?;
    let reason = checked_reason(request.reason.as_deref())?;
    let state_dir = caller.state_dir()?;
    let found = read(&state_dir, id)?.ok_or_else(|| Error::ApprovalNotFound { id: id.into() })?;
    check_reach(caller, Some(&found))?;
    let _lock = lock(&state_dir)?;
    // Read again under the lock: the waiting side may have closed it meanwhile.
    let approval =
        read(&state_dir, id)?.ok_or_else(|| Error::ApprovalNotFound { id: id.into() })?;
    if !answerable(&approval) {
        let status = match approval.status {
            ApprovalStatus::Pending if approval.seconds_left == 0 => ApprovalStatus::Expired,
            ApprovalStatus::Pending => ApprovalStatus::Ended,
            status => status,
        };
        return Err(Error::ApprovalClosed {
            id: id.into(),
            status,
        });
    }
    // A run paused, cut off or killed, or a profile disabled, takes no yes: it may not connect.
    if request.decision != Decision::Deny {
        if let Some(why) = crate::control::run_flags(&state_dir, approval.run) {
            return Err(Error::Argument {
                arg: "decision".into(),
                why: format!("the run of approval {id} may not connect now ({why}): deny it, or resume the run first"),
            });
        }
        crate::control::check_enabled(&state_dir, &approval.profile)?;
    }
    if request.decision == Decision::AllowSession && approval.session.is_none() {
        return Err(Error::Argument {
            arg: "decision allow_session".into(),
            why: format!("approval {id} is of a run in no session: answer allow_once"),
        });
    }
    let by = who(caller);
    crate::audit::append(
        &crate::audit::log_for(caller, &state_dir),
        "approval.decided",
        serde_json::to_value(Decided {
            id,
            session: approval.session.as_deref(),
            profile: &approval.profile,
            run: approval.run,
            host: &approval.host,
            port: approval.port,
            decision: request.decision,
            decided_by: &by,
            reason: reason.as_deref(),
        })?,
    )?;
    let status = match request.decision {
        Decision::AllowOnce => ApprovalStatus::AllowedOnce,
        Decision::AllowSession => ApprovalStatus::AllowedSession,
        Decision::Deny => ApprovalStatus::Denied,
    };
    if let (ApprovalStatus::AllowedSession, Some(session)) = (status, &approval.session) {
        allow_for_session(&state_dir, session, &approval.host, approval.port)?;
    }
    let answer = Answer {
        status,
        by,
        reason,
        at: crate::session::now(),
    };
    write_atomically(&answer_path(&state_dir, id), &answer)?;
    read(&state_dir, id)?.ok_or_else(|| Error::ApprovalNotFound { id: id.into() })
}

/// A reason as it is kept: trimmed, at most [`MAX_REASON`] characters, no control characters
/// (it is shown in terminals and in the run's refusal).
fn checked_reason(reason: Option<&str>) -> Result<Option<String>, Error> {
    let Some(reason) = reason.map(str::trim).filter(|r| !r.is_empty()) else {
        return Ok(None);
    };
    if reason.chars().count() > MAX_REASON {
        return Err(Error::Argument {
            arg: "reason".into(),
            why: format!("at most {MAX_REASON} characters"),
        });
    }
    if reason.chars().any(char::is_control) {
        return Err(Error::Argument {
            arg: "reason".into(),
            why: "holds a control character (a newline, an escape): write it on one line".into(),
        });
    }
    Ok(Some(reason.to_string()))
}

/// The destinations allowed for the rest of a session, as `allow` entries.
#[derive(Debug, Default, Serialize, Deserialize)]
struct SessionAllowed {
    allow: Vec<String>,
}

fn session_allowed_path(state_dir: &Path, session: &str) -> PathBuf {
    state_dir
        .join("sessions")
        .join(session)
        .join("approved.json")
}

/// Add `host:port` to what `session`'s runs may reach (under the approvals lock).
fn allow_for_session(state_dir: &Path, session: &str, host: &str, port: u16) -> Result<(), Error> {
    let path = session_allowed_path(state_dir, session);
    if !path.parent().is_some_and(Path::is_dir) {
        return Err(Error::Argument {
            arg: "decision allow_session".into(),
            why: format!("session {session} is gone: answer allow_once"),
        });
    }
    let mut allowed: SessionAllowed = read_json(&path)?.unwrap_or_default();
    let entry = airlock_policy::learn::destination(host, port);
    if !allowed.allow.contains(&entry) {
        allowed.allow.push(entry);
    }
    write_atomically(&path, &allowed)
}

/// What people allowed for the rest of `session` (see [`Decision::AllowSession`]): merged into
/// the allow entries of its runs by core when it starts their gate. An entry that does not
/// parse is left out (it allows nothing).
pub(crate) fn session_allowed(state_dir: &Path, session: &str) -> Vec<airlock_rules::Destination> {
    let path = session_allowed_path(state_dir, session);
    let Ok(Some(allowed)) = read_json::<SessionAllowed>(&path) else {
        return Vec::new();
    };
    allowed
        .allow
        .iter()
        .filter_map(|entry| airlock_rules::Destination::parse(entry).ok())
        .collect()
}

/// The profile line that allows `host:port` for good.
fn profile_line(host: &str, port: u16) -> String {
    format!(
        "allow = [\"{}\"]",
        airlock_policy::learn::destination(host, port).escape_debug()
    )
}
