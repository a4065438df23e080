//! Refusals are audited too: what was asked, by whom, and why it was refused. Every operation
//! that would change something records its own refusal here, whichever front end asked.

use serde::Serialize;

use crate::caller::Caller;
use crate::error::Error;

#[derive(Serialize)]
struct Refusal<'a> {
    session: Option<String>,
    argv: &'a [String],
    error: String,
    denied: bool,
}

/// Carry out `operation`; if it fails, record `action` (`run.refused`, …) before returning the
/// error. `session` is the session the caller named, if any.
pub(crate) fn audited<T>(
    caller: &Caller,
    action: &str,
    session: Option<&str>,
    operation: impl FnOnce() -> Result<T, Error>,
) -> Result<T, Error> {
    let result = operation();
    if let Err(err) = &result {
        record(caller, action, session, err);
    }
    result
}

/// Best effort: a refusal that cannot be logged (the log itself failing, say) still reaches the
/// caller as an error.
fn record(caller: &Caller, action: &str, session: Option<&str>, err: &Error) {
    let Ok(state) = caller.state_dir() else {
        return;
    };
    // Recorded by id, as the session's other records are, when the name given resolves to a
    // session the caller reaches (the record is the caller's to read: another token's session's
    // id is not told in it).
    let session = session.map(|name| {
        caller
            .find_session(&state, name)
            .map_or_else(|_| name.to_string(), |s| s.id)
    });
    let refusal = Refusal {
        session,
        argv: &caller.asked,
        error: err.to_string(),
        denied: true,
    };
    if let Ok(fields) = serde_json::to_value(refusal) {
        let _ = crate::audit::append(&crate::audit::log_for(caller, &state), action, fields);
    }
}
