//! Session operations: start, list, discard, collect. Each that changes state is written to the
//! audit log before it acts, and its refusal after.

use std::path::{Path, PathBuf};
use std::time::{Duration, UNIX_EPOCH};

use serde::Serialize;

use crate::audit;
use crate::caller::{load_trusted_profile, Caller, ProfileChoice};
use crate::control::Running;
use crate::error::Error;
use crate::session::{NewSession, Session, SessionMeta, SessionStatus};

/// A new session, as a front end asks for it.
#[derive(Debug, Clone, Default)]
pub struct SessionRequest {
    pub profile: ProfileChoice,
    /// Default: the caller's working directory.
    pub workspace: Option<PathBuf>,
    pub name: Option<String>,
}

/// One session as a listing shows it (and the remote CLI reads it back from the API).
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SessionSummary {
    #[serde(flatten)]
    pub meta: SessionMeta,
    pub status: SessionStatus,
    /// Files, symlinks and special files the session changed (directories not counted); None
    /// when the layer is gone, cannot be read, or a run is changing it.
    pub changed_files: Option<usize>,
    pub created_at: String,
    pub last_run_at: Option<String>,
    /// Runs whose supervisor ended before recording how they ended (killed, crashed, the machine
    /// stopped): the layer may hold part of what they wrote.
    #[serde(default)]
    pub interrupted_runs: usize,
}

impl SessionSummary {
    fn of(session: &Session, running: &[Running]) -> SessionSummary {
        let mut status = session.status();
        let paused = running
            .iter()
            .any(|r| r.session.as_deref() == Some(session.id.as_str()) && r.sandbox.is_paused());
        if status == SessionStatus::Running && paused {
            status = SessionStatus::Paused;
        }
        let changed_files = match status {
            SessionStatus::Idle => session
                .existing_workspace(session.meta.way)
                .ok()
                .and_then(|ws| {
                    airlock_changes::scan(&session.upper(), ws, session.overlay_xattrs()).ok()
                })
                .map(|set| set.file_count()),
            _ => None,
        };
        SessionSummary {
            meta: session.meta.clone(),
            status,
            changed_files,
            created_at: timestamp(session.meta.created),
            last_run_at: session.meta.last_run.map(timestamp),
            interrupted_runs: crate::abandoned::interrupted(&session.dir).len(),
        }
    }
}

/// `GET /v1/sessions`: the sessions a caller reaches, as the API answers and the remote CLI reads.
#[derive(Debug, Clone, Serialize, serde::Deserialize)]
pub struct SessionList {
    pub sessions: Vec<SessionSummary>,
}

/// RFC 3339, to the second, UTC.
pub fn timestamp(seconds: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(seconds)).to_string()
}

/// `session.create`: what the session is asked for.
#[derive(Serialize)]
struct SessionIntent<'a> {
    workspace: &'a Path,
    name: Option<&'a str>,
    profile: &'a str,
    profile_file: Option<&'a Path>,
}

/// `session.created`, `session.discard`, `session.discarded`.
#[derive(Serialize)]
struct SessionRecord<'a> {
    session: &'a str,
    /// Only in `session.created`: the name, or null.
    #[serde(skip_serializing_if = "Option::is_none")]
    name: Option<Option<&'a str>>,
    profile: &'a str,
}

/// `gc.intent`: the sessions about to be removed.
#[derive(Serialize)]
struct GcIntent<'a> {
    sessions: Vec<&'a str>,
    older_than: Option<&'a str>,
}

/// Start a session over a workspace no session may be refused for, with a profile that loads
/// (so that a misspelt or broken one fails now, not at the first run). The intent is logged
/// first; nothing is made if that fails.
pub fn create_session(caller: &Caller, request: SessionRequest) -> Result<SessionSummary, Error> {
    crate::refusal::audited(caller, "session.refused", None, || {
        let state_dir = caller.state_dir()?;
        // Made (or checked to be ours) first, so that it is compared by the directory it is.
        crate::session::staging_dir(&state_dir)?;
        let workspace = caller.workspace(request.workspace.as_deref())?;
        let profile = request.profile.resolve(caller)?;
        let loaded = load_trusted_profile(caller, &profile, &workspace)?;
        crate::run::check_workspace_for(&workspace, &state_dir, caller.home().as_deref())?;
        crate::control::check_enabled(&state_dir, &profile.name)?;
        // Every source read now: one that fails fails the session before anything of it is made.
        let placeholders = crate::secrets::for_new_session(&loaded)?;
        let log = audit::log_for(caller, &state_dir);
        let intent = SessionIntent {
            workspace: &workspace,
            name: request.name.as_deref(),
            profile: &profile.name,
            profile_file: profile.file.as_deref(),
        };
        audit::append(&log, "session.create", serde_json::to_value(intent)?)?;
        let new = NewSession {
            workspace: &workspace,
            name: request.name.as_deref(),
            profile,
            image: crate::run::limits::layer_image(&loaded.limits, &state_dir, caller.way)?,
            token: caller.grant.as_ref().map(|g| g.token.clone()),
            way: caller.way,
        };
        let session = Session::create(&state_dir, new)?;
        if let Err(err) = crate::secrets::keep_for_session(&session, &placeholders) {
            let _ = session.remove();
            return Err(err);
        }
        let created = SessionRecord {
            session: &session.id,
            name: Some(session.meta.name.as_deref()),
            profile: &session.meta.profile.name,
        };
        audit::append(&log, "session.created", serde_json::to_value(created)?)?;
        Ok(SessionSummary::of(&session, &[]))
    })
}

/// Every session of the caller's state directory, oldest first.
pub fn list_sessions(caller: &Caller) -> Result<Vec<SessionSummary>, Error> {
    let state_dir = caller.state_dir()?;
    let sessions = Session::list(&state_dir)?;
    let running = crate::control::running(&state_dir);
    Ok(sessions
        .iter()
        .filter(|s| caller.reaches(s))
        .map(|s| SessionSummary::of(s, &running))
        .collect())
}

/// What a supervisor killed outright leaves behind, removed: the empty cgroups of its runs. (Its
/// sandboxes died with it; their mounts were in their own namespaces.) For a server starting
/// again; every run also does it before it makes its own cgroup.
pub fn tidy_after_crash() {
    airlock_jail::cgroup::remove_orphaned_runs(&airlock_jail::cgroup::detect());
}

/// For a server that systemd started in a cgroup delegated to it (`Delegate=yes`): its runs'
/// cgroups go inside that unit (see `airlock_jail::cgroup::settle_server`). Called first, while
/// the server has one thread. The unit's cgroup when so; an error in words when it is delegated
/// but unusable (runs then get a cgroup as a command's would).
pub fn settle_server_cgroup() -> Result<Option<std::path::PathBuf>, String> {
    airlock_jail::cgroup::settle_server()
}

/// What a person may type where a session or a profile is asked for (shell completion): the
/// names and ids of the caller's sessions still alive, or the profiles the caller can name.
/// Nothing when the state cannot be read: completion says nothing rather than fail.
pub fn names_for_completion(caller: &Caller, what: NameKind) -> Vec<String> {
    match what {
        NameKind::Profiles => airlock_policy::profile_names(&caller.profile_search_dirs()),
        NameKind::Sessions => {
            let Ok(state_dir) = caller.state_dir() else {
                return Vec::new();
            };
            let alive = Session::list(&state_dir)
                .unwrap_or_default()
                .into_iter()
                .filter(|s| s.meta.lifecycle != crate::session::Lifecycle::Discarded);
            let mut names: Vec<String> = alive
                .flat_map(|s| s.meta.name.clone().into_iter().chain([s.id.clone()]))
                .collect();
            names.sort();
            names.dedup();
            names
        }
    }
}

/// What [`names_for_completion`] lists.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NameKind {
    Sessions,
    Profiles,
}

/// One session, if the caller reaches it.
pub fn session_summary(caller: &Caller, id: &str) -> Result<SessionSummary, Error> {
    let state_dir = caller.state_dir()?;
    let session = caller.find_session(&state_dir, id)?;
    let running = crate::control::running(&state_dir);
    Ok(SessionSummary::of(&session, &running))
}

/// Drop a session's layer, once any run in it has ended.
pub fn discard_session(caller: &Caller, id: &str) -> Result<Session, Error> {
    crate::refusal::audited(caller, "discard.refused", Some(id), || {
        caller.must_be_operator("discard a session")?;
        let state_dir = caller.state_dir()?;
        let mut session = caller.find_session(&state_dir, id)?;
        let lock = session.lock_exclusive(&caller.on_busy)?;
        session.check_active()?;
        // A half-done apply is finished or rolled back first: once discarded, the session takes
        // no apply or revert, and the workspace would stay half written.
        crate::apply::check_no_interrupted_apply(&session)?;
        let log = audit::log_for(caller, &state_dir);
        let fields = serde_json::to_value(SessionRecord {
            session: &session.id,
            name: None,
            profile: &session.meta.profile.name,
        })?;
        audit::append(&log, "session.discard", fields.clone())?;
        session.discard(&lock)?;
        audit::append(&log, "session.discarded", fields)?;
        Ok(session)
    })
}

/// Which sessions `gc` removes: discarded and applied ones that ended at least this long ago.
#[derive(Debug, Clone, Default)]
pub struct GcRequest {
    /// A duration as a person writes it (`30m`, `12h`, `7d`); default: any age.
    pub older_than: Option<String>,
    /// Say what would be removed; remove nothing.
    pub dry_run: bool,
}

#[derive(Debug, Clone, Serialize)]
pub struct GcReport {
    pub dry_run: bool,
    pub sessions: Vec<Collected>,
}

/// A session `gc` removed (or would remove).
#[derive(Debug, Clone, Serialize)]
pub struct Collected {
    pub id: String,
    /// `applied`, `discarded`, or `unfinished` (a directory a killed `session new` left without
    /// a record, older than ten minutes).
    pub status: &'static str,
    /// None for an unfinished one: no record says.
    pub workspace: Option<PathBuf>,
}

/// Remove discarded and applied sessions' records (an applied one can then no longer be
/// reverted). Logged before it acts.
pub fn gc(caller: &Caller, request: GcRequest) -> Result<GcReport, Error> {
    caller.must_be_operator("remove sessions")?;
    let state_dir = caller.state_dir()?;
    let min_age = match &request.older_than {
        Some(text) => airlock_policy::units::parse_duration(text)
            .map(Duration::from_secs)
            .map_err(|e| Error::Argument {
                arg: format!("--older-than {text:?}"),
                why: e.to_string(),
            })?,
        None => Duration::ZERO,
    };
    let now = std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut chosen = Vec::new();
    for session in Session::list(&state_dir)? {
        let ended = session.meta.ended.unwrap_or(session.meta.created);
        let old_enough = now.saturating_sub(ended) >= min_age.as_secs();
        let status = match session.status() {
            SessionStatus::Discarded => "discarded",
            SessionStatus::Applied => "applied",
            _ => continue,
        };
        if old_enough {
            chosen.push((session, status));
        }
    }
    let unfinished = Session::unfinished(&state_dir);
    let collected = chosen.iter().map(|(session, status)| Collected {
        id: session.id.clone(),
        status,
        workspace: Some(session.workspace().to_path_buf()),
    });
    let report = GcReport {
        dry_run: request.dry_run,
        sessions: collected
            .chain(unfinished.iter().map(|left| Collected {
                id: left.id.clone(),
                status: "unfinished",
                workspace: None,
            }))
            .collect(),
    };
    if request.dry_run || report.sessions.is_empty() {
        return Ok(report);
    }
    let intent = GcIntent {
        sessions: report.sessions.iter().map(|s| s.id.as_str()).collect(),
        older_than: request.older_than.as_deref(),
    };
    audit::append(
        &audit::log_for(caller, &state_dir),
        "gc.intent",
        serde_json::to_value(intent)?,
    )?;
    for (session, _) in chosen {
        session.remove()?;
    }
    for left in unfinished {
        left.remove()?;
    }
    Ok(report)
}
