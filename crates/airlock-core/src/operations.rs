//! Session operations that change state, each written to the audit log before it acts.

use std::path::Path;

use serde_json::json;

use crate::audit;
use crate::run::RunError;
use crate::session::{NewSession, Session};

/// Start a session (the intent is logged first; nothing is made if that fails).
pub fn create_session(state_dir: &Path, new: NewSession) -> Result<Session, RunError> {
    crate::control::check_enabled(state_dir, &new.profile.name)?;
    let log = audit::log(state_dir);
    audit::append(
        &log,
        "session.create",
        json!({
            "workspace": new.workspace,
            "name": new.name,
            "profile": new.profile.name,
            "profile_file": new.profile.file,
        }),
    )?;
    let session = Session::create(state_dir, new)?;
    audit::append(
        &log,
        "session.created",
        json!({ "session": session.id, "name": session.meta.name, "profile": session.meta.profile.name }),
    )?;
    Ok(session)
}

/// Drop a session's layer, once any run in it has ended.
pub fn discard_session(
    state_dir: &Path,
    id: &str,
    on_busy: &dyn Fn(&Session),
) -> Result<Session, RunError> {
    let mut session = Session::find(state_dir, id)?;
    let lock = session.lock_exclusive(on_busy)?;
    session.check_active()?;
    let log = audit::log(state_dir);
    audit::append(
        &log,
        "session.discard",
        json!({ "session": session.id, "profile": session.meta.profile.name }),
    )?;
    session.discard(&lock)?;
    audit::append(
        &log,
        "session.discarded",
        json!({ "session": session.id, "profile": session.meta.profile.name }),
    )?;
    Ok(session)
}
