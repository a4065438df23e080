//! Runs whose supervisor ended without recording how they ended: `kill -9` of `airlock run` or of
//! the server that carried them out, a crash, the machine stopping. Their sandbox died with the
//! supervisor (parent-death signal), but their `run.intent` has no `run.result`, and a session
//! may hold part of what the run wrote. Whoever reads the registry of running sandboxes next (any
//! run, `airlock serve` as it starts, `status`, the kill switch) closes each such run:
//!
//! ```text
//! STATE/running/PID.json          the entry, while its supervisor lives
//! STATE/running/.PID.abandoned    claimed by the one process that closes it (rename is atomic)
//! STATE/sessions/ID/interrupted   a line per run of the session that was closed so
//! ```
//!
//! and a `run.abandoned` record with the run's id says what happened.

use std::fs;
use std::io::Write as _;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::control::{running_dir, Running};

/// What a session's `interrupted` file says of one run.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Interrupted {
    pub run_id: Option<String>,
    /// Seconds since the epoch when it was found.
    pub found: u64,
}

/// Why such a run is closed, in its record.
const WHY: &str = "its supervisor ended without recording the run's result (killed, crashed, or the machine stopped); its sandbox ended with it, and a session's layer may hold part of what the run wrote";

/// Close every run of `state_dir` whose supervisor is gone. Best effort: what cannot be closed
/// now (the log cannot be written) is left for the next reader.
pub fn close(state_dir: &Path) {
    let dir = running_dir(state_dir);
    let Ok(entries) = fs::read_dir(&dir) else {
        return;
    };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.extension().is_none_or(|e| e != "json")
            || entry.file_name().to_string_lossy().starts_with('.')
        {
            continue;
        }
        let Ok(text) = fs::read(&path) else { continue };
        // An empty entry is reserved by a run that is starting (its sandbox not made yet).
        let Ok(run) = serde_json::from_slice::<Running>(text.trim_ascii()) else {
            continue;
        };
        if run.supervisor_gone() {
            close_one(state_dir, &path, &run);
        }
    }
}

/// Claim the entry (only one process wins the rename), record the run as abandoned, note it in
/// its session, then remove what the entry left.
fn close_one(state_dir: &Path, entry: &Path, run: &Running) {
    let claimed = entry.with_file_name(format!(".{}.abandoned", run.supervisor));
    if fs::rename(entry, &claimed).is_err() {
        return;
    }
    let fields = serde_json::json!({
        "run_id": run.run_id,
        "session": run.session,
        "profile": run.profile,
        "argv": run.argv,
        "supervisor": run.supervisor,
        "token": run.token,
        "why": WHY,
    });
    if crate::audit::append(&crate::audit::log(state_dir), "run.abandoned", fields).is_err() {
        // Put back for the next reader: a run is never closed without its record.
        let _ = fs::rename(&claimed, entry);
        return;
    }
    if let Some(session) = &run.session {
        note_in_session(state_dir, session, run.run_id.clone());
    }
    let _ = fs::remove_file(&claimed);
    for flag in ["cut", "killed", "paused"] {
        let _ = fs::remove_file(entry.with_extension(flag));
    }
}

fn interrupted_file(session_dir: &Path) -> PathBuf {
    session_dir.join("interrupted")
}

/// One line appended (a write this small is whole), to a file only its owner reads.
fn note_in_session(state_dir: &Path, session_id: &str, run_id: Option<String>) {
    // The id comes from our own registry; a session gone since has nothing to note.
    let Ok(session) = crate::session::Session::find(state_dir, session_id) else {
        return;
    };
    let line = Interrupted {
        run_id,
        found: crate::session::now(),
    };
    let Ok(mut text) = serde_json::to_vec(&line) else {
        return;
    };
    text.push(b'\n');
    let file = fs::OpenOptions::new()
        .append(true)
        .create(true)
        .mode(0o600)
        .open(interrupted_file(&session.dir));
    if let Ok(mut file) = file {
        let _ = file.write_all(&text);
    }
}

/// The runs of the session in `session_dir` that were closed as abandoned.
pub fn interrupted(session_dir: &Path) -> Vec<Interrupted> {
    fs::read_to_string(interrupted_file(session_dir))
        .map(|text| {
            text.lines()
                .filter_map(|line| serde_json::from_str(line).ok())
                .collect()
        })
        .unwrap_or_default()
}
