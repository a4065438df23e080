//! A session's change set as a front end shows it: a git patch, a summary, or one entry per
//! change with hashes and hazards. Read under the session's shared lock, so that no run changes
//! the layer while it is shown.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use airlock_changes::hazard::Verdict;
use airlock_changes::patch::{self, Roots};
use airlock_changes::{Change, Hazard, Kind, Node, Status};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::caller::Caller;
use crate::changes::{read_changes, relative_paths, ReadChanges};
use crate::error::Error;
use crate::review::ReviewInputs;

#[derive(Debug, Clone, Default)]
pub struct DiffRequest {
    /// The session's id or name.
    pub session: String,
    /// Only changes at or under these paths (relative to the caller's working directory when it
    /// lies in the workspace, else to the workspace; or absolute inside it).
    pub paths: Vec<PathBuf>,
}

/// What a session changed, held as read until dropped.
pub struct Diff {
    read: ReadChanges,
    inputs: ReviewInputs,
}

/// One side of a change.
#[derive(Debug, Serialize)]
pub struct Side {
    pub kind: Kind,
    /// Permission bits in octal, with setuid/setgid/sticky: "0644".
    pub mode: String,
    pub size: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub sha256: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub target: Option<String>,
}

/// One change, with what a person must know before applying it.
#[derive(Debug, Serialize)]
pub struct ChangeEntry {
    pub path: String,
    pub status: Status,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub old: Option<Side>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub new: Option<Side>,
    pub hazards: Vec<Hazard>,
    /// What each hazard means, in its order (for a person: the page shows them).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub hazard_notes: Vec<&'static str>,
    /// `git status` will not show it: the repository's ignore rules (as they will be after the
    /// apply) hide it. Listed apart in the text output; `apply --no-ignored` leaves it out.
    pub ignored: bool,
    /// Why the session's profile asks about it (`[apply] tool_config`: `PATTERN: REASON`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub reasons: Vec<String>,
}

/// Read what a session changed against its workspace as it is now.
pub fn diff(caller: &Caller, request: &DiffRequest) -> Result<Diff, Error> {
    let state_dir = caller.state_dir()?;
    let mut session = caller.find_session(&state_dir, &request.session)?;
    let workspace = session.existing_workspace(caller.way)?.to_path_buf();
    let inputs = ReviewInputs::of(caller, &session, &workspace)?;
    let mut read = read_changes(&mut session, caller.way, &caller.on_busy)?;
    let filters = relative_paths(&request.paths, &read.workspace, caller.cwd.as_deref())?;
    read.changes.filter(&filters);
    Ok(Diff { read, inputs })
}

impl Diff {
    fn roots(&self) -> Roots<'_> {
        Roots {
            host: &self.read.workspace,
            layer: &self.read.layer,
        }
    }

    pub fn changes(&self) -> &[Change] {
        &self.read.changes.changes
    }

    pub fn workspace(&self) -> &Path {
        &self.read.workspace
    }

    /// What a person must know about each change before applying it, in change order.
    pub fn verdicts(&self) -> Result<Vec<Verdict>, Error> {
        let roots = self.roots();
        let review = self
            .inputs
            .review(roots.layer, roots.host, self.changes())?;
        Ok(self.changes().iter().map(|c| review.judge(c)).collect())
    }

    /// The changes `git status` will not show, each with what a person must know about it.
    pub fn not_shown_by_git(&self) -> Result<Vec<(&Change, Verdict)>, Error> {
        let roots = self.roots();
        let review = self
            .inputs
            .review(roots.layer, roots.host, self.changes())?;
        Ok(self
            .changes()
            .iter()
            .filter(|c| review.is_ignored(c))
            .map(|c| (c, review.judge(c)))
            .collect())
    }

    /// Every change with its sides' kinds, modes, sizes, hashes, its hazards and whether git
    /// shows it.
    pub fn entries(&self) -> io::Result<Vec<ChangeEntry>> {
        let roots = self.roots();
        let verdicts = self.verdicts().map_err(io::Error::other)?;
        self.changes()
            .iter()
            .zip(verdicts)
            .map(|(change, verdict)| {
                Ok(ChangeEntry {
                    path: change.path.to_string_lossy().into_owned(),
                    status: change.status,
                    old: side(roots.host, change, &change.old)?,
                    new: side(roots.layer, change, &change.new)?,
                    hazard_notes: verdict.hazards.iter().map(|h| h.describe()).collect(),
                    hazards: verdict.hazards,
                    ignored: verdict.ignored,
                    reasons: verdict.reasons,
                })
            })
            .collect()
    }

    /// The changes as a git patch; returns those a patch cannot express (fifos, sockets, devices).
    pub fn write_patch(&self, out: &mut impl Write) -> io::Result<Vec<Change>> {
        patch::write_patch(out, self.roots(), self.changes())
    }

    /// The bytes of the regular files on both sides of some of the changes (in change order):
    /// what a patch of them reads into memory, which a service bounds before making one.
    pub fn patch_input_bytes(&self, changes: std::ops::Range<usize>) -> u64 {
        self.changes()
            .get(changes)
            .unwrap_or_default()
            .iter()
            .flat_map(|change| [&change.old, &change.new])
            .flatten()
            .filter(|node| node.kind == Kind::File)
            .map(|node| node.size)
            .fold(0, u64::saturating_add)
    }

    /// The patch of some of the changes (a page of them, in change order), as [`Self::write_patch`].
    pub fn write_patch_of(
        &self,
        out: &mut impl Write,
        changes: std::ops::Range<usize>,
    ) -> io::Result<Vec<Change>> {
        let changes = self.changes().get(changes).unwrap_or_default();
        patch::write_patch(out, self.roots(), changes)
    }

    /// As `git diff --stat`.
    pub fn write_stat(&self, out: &mut impl Write) -> io::Result<()> {
        patch::write_stat(out, self.roots(), self.changes())
    }

    /// As `git diff --name-status`.
    pub fn write_name_status(&self, out: &mut impl Write) -> io::Result<()> {
        patch::write_name_status(out, self.changes())
    }
}

fn side(root: &Path, change: &Change, node: &Option<Node>) -> io::Result<Option<Side>> {
    let Some(node) = node else {
        return Ok(None);
    };
    let sha256 = if node.kind == Kind::File {
        let mut file = airlock_changes::node::open_regular(&root.join(&change.path))?;
        let mut hasher = Sha256::new();
        io::copy(&mut file, &mut hasher)?;
        Some(hex::encode(hasher.finalize()))
    } else {
        None
    };
    Ok(Some(Side {
        kind: node.kind,
        mode: format!("{:04o}", node.mode),
        size: node.size,
        sha256,
        target: node
            .target
            .as_ref()
            .map(|t| t.to_string_lossy().into_owned()),
    }))
}
