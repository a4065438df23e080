//! The last diff a person was shown of a session (`STATE/sessions/ID/shown.json`): its digest
//! and what it showed of each change and ignored tree. An apply that names no digest keeps
//! today's behaviour, but says what it writes that this diff did not hold: a path written
//! after the diff was read, or changed since.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use crate::error::Error;

const FILE: &str = "shown.json";

#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub(crate) struct ShownRecord {
    pub(crate) digest: String,
    pub(crate) no_ignored: bool,
    /// Each change shown one by one: its path and its fingerprint (hex).
    pub(crate) changes: BTreeMap<String, String>,
    /// Each ignored tree shown as one row: its root and its digest.
    pub(crate) trees: BTreeMap<String, String>,
}

impl ShownRecord {
    /// Write it into the session's directory, replacing the last: a reader sees one whole
    /// record. Diffs read under a shared lock may write at once: each its own temporary file.
    pub(crate) fn save(&self, session_dir: &Path) -> Result<(), Error> {
        let path = session_dir.join(FILE);
        let temp = session_dir.join(format!("{FILE}.{}.tmp", std::process::id()));
        let state = |action| {
            let path = path.clone();
            move |source| Error::State {
                action,
                path,
                source,
            }
        };
        let text = serde_json::to_vec(self)?;
        let mut file = std::fs::File::create(&temp).map_err(state("write"))?;
        file.write_all(&text).map_err(state("write"))?;
        drop(file);
        std::fs::rename(&temp, &path).map_err(state("replace"))
    }

    /// The last record of the session, if a diff was shown and its record reads.
    pub(crate) fn load(session_dir: &Path) -> Option<ShownRecord> {
        let text = std::fs::read(session_dir.join(FILE)).ok()?;
        serde_json::from_slice(&text).ok()
    }
}

/// What an apply wrote that the last diff shown did not hold.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct Unseen {
    /// Whether a diff of the session was shown at all (by `airlock diff`) before the apply.
    pub diff_shown: bool,
    /// Paths written (or, for a dry run, to be written) that the last diff shown did not hold,
    /// or held with other content; an ignored tree by its root with a trailing `/`. Empty when
    /// no diff was shown: then nothing written was seen.
    pub paths: Vec<String>,
}
