//! What judging a session's changes needs besides them, gathered by core for diff and apply
//! alike: the session's profile's additions to the tool table (read from where policy lives,
//! as for a run) and the caller's global git excludes.

use std::path::{Path, PathBuf};

use airlock_changes::hazard::{global_excludes, Review, Setup, ToolEntry};
use airlock_changes::Change;

use crate::caller::{load_trusted_profile, Caller};
use crate::changes::{ChangesError, MAX_FILE_BYTES};
use crate::error::Error;
use crate::session::Session;

pub(crate) struct ReviewInputs {
    tool_config: Vec<ToolEntry>,
    global_excludes: Option<PathBuf>,
}

impl ReviewInputs {
    /// For `session` over its canonical `workspace`, as `caller` asks. The profile must load:
    /// hazards judged without the entries it adds would let their files through.
    pub(crate) fn of(
        caller: &Caller,
        session: &Session,
        workspace: &Path,
    ) -> Result<ReviewInputs, Error> {
        let profile = load_trusted_profile(caller, &session.meta.profile, workspace)?;
        let tool_config = profile
            .apply
            .tool_config
            .into_iter()
            .map(|entry| ToolEntry {
                path: entry.path,
                reason: entry.reason,
            })
            .collect();
        let (home, xdg) = caller.git_config_dirs();
        Ok(ReviewInputs {
            tool_config,
            global_excludes: global_excludes(home.as_deref(), xdg.as_deref()),
        })
    }

    /// The review of `changes` of `layer` over `host`.
    pub(crate) fn review<'a>(
        &'a self,
        layer: &'a Path,
        host: &'a Path,
        changes: &[Change],
    ) -> Result<Review<'a>, ChangesError> {
        let setup = Setup {
            size_limit: MAX_FILE_BYTES,
            tool_config: &self.tool_config,
            global_excludes: self.global_excludes.as_deref(),
        };
        Review::new(layer, host, changes, setup)
            .map_err(|e| ChangesError::ToolPattern(e.to_string()))
    }
}

#[cfg(test)]
impl ReviewInputs {
    /// No profile's tool table, no global excludes.
    pub(crate) fn for_tests() -> ReviewInputs {
        ReviewInputs {
            tool_config: Vec::new(),
            global_excludes: None,
        }
    }
}
