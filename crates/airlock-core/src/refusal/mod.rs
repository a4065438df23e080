//! Refusals are audited too: what was asked, by whom, and why it was refused. Every operation
//! that would change something records its own refusal here, whichever front end asked.

mod budget;

use serde::Serialize;

use crate::caller::Caller;
use crate::error::Error;
use budget::Allowance;
pub use budget::RECORDS_PER_SECOND;

#[derive(Serialize)]
struct Refusal {
    session: Option<String>,
    argv: Vec<String>,
    error: String,
    denied: bool,
}

/// Bytes of one caller-supplied field a refusal record keeps: enough for a person to see what
/// was asked, bounded so that refused requests (anyone with a token can make them, a hundred a
/// second) cannot fill the state directory's disk through the log.
const FIELD_BYTES: usize = 1024;
/// Words of a request's argv kept.
const ARGV_WORDS: usize = 64;

/// `text` whole if it is short, else its first [`FIELD_BYTES`] (at a character's end) and what
/// tells the rest apart: its length and SHA-256.
pub(crate) fn bounded(text: &str) -> String {
    bounded_to(text, FIELD_BYTES)
}

/// [`bounded`] to `limit` bytes.
pub(crate) fn bounded_to(text: &str, limit: usize) -> String {
    if text.len() <= limit {
        return text.to_string();
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    use sha2::Digest as _;
    let digest = hex::encode(sha2::Sha256::digest(text.as_bytes()));
    format!(
        "{}… [cut: {} bytes in all, sha256 {digest}]",
        &text[..end],
        text.len()
    )
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
    // A token's refusals past its budget are counted, not written (see [`budget`]). A person at
    // the machine (no token) is not a flood to guard against.
    if let Some(grant) = &caller.grant {
        let asked = caller.asked.join(" ");
        let kind = budget::Kind::new(action, &asked, &err.to_string());
        match budget::take(&state, &grant.token, err.code().0, kind) {
            Allowance::Counted => return,
            Allowance::Write(Some(summary)) => record_suppressed(&state, &grant.token, summary),
            Allowance::Write(None) => {}
        }
    }
    // Recorded by id, as the session's other records are, when the name given resolves to a
    // session the caller reaches (the record is the caller's to read: another token's session's
    // id is not told in it).
    let session = session.map(|name| {
        caller
            .find_session(&state, name)
            .map_or_else(|_| bounded(name), |s| s.id)
    });
    let mut argv: Vec<String> = caller
        .asked
        .iter()
        .take(ARGV_WORDS)
        .map(|w| bounded(w))
        .collect();
    if caller.asked.len() > ARGV_WORDS {
        argv.push(format!("… [{} words in all]", caller.asked.len()));
    }
    let refusal = Refusal {
        session,
        argv,
        error: bounded(&err.to_string()),
        denied: true,
    };
    if let Ok(fields) = serde_json::to_value(refusal) {
        let _ = crate::audit::append(&crate::audit::log_for(caller, &state), action, fields);
    }
}

/// `refusals.suppressed`: the refusals of `token` counted and not written one by one: how many,
/// from when, and what they were.
fn record_suppressed(state_dir: &std::path::Path, token: &str, summary: budget::Summary) {
    let fields = serde_json::json!({
        "count": summary.count,
        "since": crate::operations::timestamp(summary.since),
        "refused": summary.kinds,
        "others": summary.others,
        "why": format!("more than {RECORDS_PER_SECOND} refusals of this token in a second: the rest are summed up here, each distinct one with its count"),
    });
    let log = crate::audit::log_for_token(state_dir, Some(token.to_string()));
    let _ = crate::audit::append(&log, "refusals.suppressed", fields);
}

/// Write the refusals not on record yet, from seconds already over (`airlock serve` calls this
/// every second, so that a burst's summary is written within a second of its end, not at the
/// token's next refusal); `everything`, the current second's too (as it stops).
pub fn flush_suppressed(state_dir: &std::path::Path, everything: bool) {
    budget::flush(state_dir, everything, |token, summary| {
        record_suppressed(state_dir, token, summary)
    });
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_field_is_kept_whole_when_short_and_cut_with_its_length_and_hash_when_long() {
        assert_eq!(bounded("short"), "short");
        let long = "é".repeat(600_000);
        let kept = bounded(&long);
        assert!(kept.len() < FIELD_BYTES + 120, "{}", kept.len());
        assert!(kept.contains("1200000 bytes in all, sha256 "), "{kept}");
        assert!(kept.starts_with("éé"));
    }

    #[test]
    fn a_huge_refused_request_leaves_a_small_record() {
        let state = tempfile::tempdir().unwrap();
        let mut caller = Caller::bare(state.path().to_path_buf(), crate::Role::Agent);
        caller.asked = vec!["x".repeat(1 << 20); 100];
        let huge = "n".repeat(1 << 20);
        let refused = audited(
            &caller,
            "session.refused",
            Some(&huge),
            || -> Result<(), Error> {
                Err(Error::Argument {
                    arg: format!("--name {huge}"),
                    why: "no".into(),
                })
            },
        );
        assert!(refused.is_err());
        let log = std::fs::read(state.path().join("audit.log")).unwrap();
        assert!(log.len() < 80_000, "the record is {} bytes", log.len());
    }
}
