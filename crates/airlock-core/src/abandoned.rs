//! Runs whose supervisor ended without recording how they ended: `kill -9` of `airlock run` or of
//! the server that carried them out, a crash, the machine stopping. Their sandbox died with the
//! supervisor (parent-death signal; one frozen by `airlock pause` is killed here), but their
//! `run.intent` has no `run.result`, and a session may hold part of what the run wrote. Whoever
//! reads the registry of running sandboxes next (any run, `airlock serve` as it starts,
//! `status`, the kill switch) closes each such run:
//!
//! ```text
//! STATE/running/PID.json          the entry, locked (flock) by its supervisor while it lives
//! STATE/sessions/ID/interrupted   a line per run of the session that was closed so
//! ```
//!
//! and a `run.abandoned` record with the run's id and `supervisor_gone: true` says what
//! happened. A supervisor is judged gone by its lock alone, which the kernel lets go of when it
//! dies: never by pids and /proc, which another pid namespace or a /proc mounted `hidepid`
//! would show wrongly (and a live run closed would be out of the kill switch's reach).

use std::fs;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::{MetadataExt as _, OpenOptionsExt as _};
use std::path::{Path, PathBuf};

use nix::fcntl::{Flock, FlockArg};
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
        close_entry(state_dir, &path);
    }
}

/// Close the run of the entry at `path` if its supervisor is gone.
pub(crate) fn close_entry(state_dir: &Path, path: &Path) {
    if let Some(gone) = Gone::take(path) {
        gone.close(state_dir);
    }
}

/// An entry whose supervisor is gone, locked by this process: no other closer has it.
struct Gone {
    path: PathBuf,
    run: Running,
    _lock: Flock<fs::File>,
}

impl Gone {
    /// The entry at `path`, if its supervisor is gone. Its lock held by another process: its
    /// supervisor lives (or another closer has it). Read from the file locked, not by its name
    /// again, and only while still linked (a closer before this one removed it).
    fn take(path: &Path) -> Option<Gone> {
        let file = fs::File::open(path).ok()?;
        let mut lock = Flock::lock(file, FlockArg::LockExclusiveNonblock).ok()?;
        if lock.metadata().ok()?.nlink() == 0 {
            return None;
        }
        let mut text = Vec::new();
        lock.read_to_end(&mut text).ok()?;
        // Empty: reserved by a run that died before it was filled in (its intent may be on
        // record): nothing names it; the entry goes.
        let Ok(run) = serde_json::from_slice::<Running>(text.trim_ascii()) else {
            if text.trim_ascii().is_empty() && same_file(path, &lock) {
                let _ = fs::remove_file(path);
            }
            return None;
        };
        // An entry of an airlock that held no lock: judged by its sandbox, which dies with its
        // supervisor.
        if !run.locked && run.sandbox.is_alive() {
            return None;
        }
        Some(Gone {
            path: path.to_path_buf(),
            run,
            _lock: lock,
        })
    }

    /// End what is left of the sandbox, record the run as abandoned, note it in its session,
    /// then remove the entry and its flags.
    fn close(self, state_dir: &Path) {
        let run = &self.run;
        // Frozen by 'airlock pause' (v1 freezer), its processes outlived the parent-death
        // signal: thawed and killed, or they would stay frozen for good, out of everyone's reach.
        // A reader that cannot see its pid 1 (another pid namespace) cannot kill it: the entry
        // stays for one that can, and the kill switch still lists it.
        if run.sandbox.is_frozen() {
            let _ = run.sandbox.send_kill();
            run.sandbox.wait_gone();
            if run.sandbox.is_frozen() {
                return;
            }
        }
        let fields = serde_json::json!({
            "run_id": run.run_id,
            "session": run.session,
            "profile": run.profile,
            "argv": run.argv,
            "supervisor": run.supervisor,
            "supervisor_gone": true,
            "why": WHY,
        });
        // As the run's own records are: its token's to read.
        let log = crate::audit::log_for_token(state_dir, run.token.clone());
        if crate::audit::append(&log, "run.abandoned", fields).is_err() {
            // Left for the next reader: a run is never closed without its record.
            return;
        }
        if let Some(session) = &run.session {
            note_in_session(state_dir, session, run.run_id.clone());
        }
        // Only the file this process locked: a run that reused the pid since has its own.
        if same_file(&self.path, &self._lock) {
            let _ = fs::remove_file(&self.path);
            for flag in ["cut", "killed", "paused"] {
                let _ = fs::remove_file(self.path.with_extension(flag));
            }
        }
    }
}

/// Is `path` still the file `locked` is open on?
fn same_file(path: &Path, locked: &fs::File) -> bool {
    fs::metadata(path)
        .ok()
        .zip(locked.metadata().ok())
        .is_some_and(|(named, open)| named.ino() == open.ino() && named.dev() == open.dev())
}

fn interrupted_file(session_dir: &Path) -> PathBuf {
    session_dir.join("interrupted")
}

/// One line appended (a write this small is whole), to a file only its owner reads.
fn note_in_session(state_dir: &Path, session_id: &str, run_id: Option<String>) {
    // The id comes from our own registry, and is taken as an id only (never as a name another
    // session took since); a session gone since has nothing to note.
    let Ok(session) = crate::session::Session::find_among(state_dir, session_id, &|_| false) else {
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
