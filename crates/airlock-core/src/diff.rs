//! A session's change set as a front end shows it: a git patch, a summary, or one entry per
//! change with hashes and hazards. Read under the session's shared lock, so that no run changes
//! the layer while it is shown.

use std::io::{self, Write};
use std::path::{Path, PathBuf};

use airlock_changes::hazard::Verdict;
use airlock_changes::patch::{self, Roots};
use airlock_changes::{Change, Hazard, Kind, Node, ScanError, Status};
use serde::Serialize;
use sha2::{Digest, Sha256};

use crate::caller::Caller;
use crate::changes::{read_changes, relative_paths, ChangesError, ReadChanges};
use crate::digest::{self, Judged, TreeSummary};
use crate::error::Error;
use crate::review::ReviewInputs;
use crate::shown::ShownRecord;

#[derive(Debug, Clone, Default)]
pub struct DiffRequest {
    /// The session's id or name.
    pub session: String,
    /// Only changes at or under these paths (relative to the caller's working directory when it
    /// lies in the workspace, else to the workspace; or absolute inside it). A path at or in an
    /// ignored tree shows that tree's changes one by one.
    pub paths: Vec<PathBuf>,
    /// Leave out everything the repository's ignore rules hide, as `apply --no-ignored` does;
    /// the digest is then of the set without it.
    pub no_ignored: bool,
}

/// What a session changed, held as read until dropped: the whole change set judged once, and
/// what of it this diff shows (the paths asked for; an ignored tree as one row).
pub struct Diff {
    read: ReadChanges,
    /// Of every change of `read`, in its order.
    judged: Vec<Judged>,
    /// The changes shown one by one, in change order, and their indexes in `read`.
    shown: Vec<Change>,
    shown_at: Vec<usize>,
    trees: Vec<TreeSummary>,
    /// Trees shown whole but one change at a time (named at their root): root and digest.
    opened_whole: Vec<(String, String)>,
    digest: String,
    no_ignored: bool,
    session_dir: PathBuf,
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

/// A diff as the JSON of every front end says it (`airlock diff --json`, the API's
/// `GET /v1/sessions/{id}/diff`).
#[derive(Debug, Serialize)]
pub struct DiffView {
    /// The session as the request named it (id or name).
    pub session: String,
    pub workspace: PathBuf,
    /// The change set's digest: `apply --reviewed DIGEST` writes this set or nothing.
    pub digest: String,
    /// The changes shown one by one, in git's order.
    pub changes: Vec<ChangeEntry>,
    /// The trees git ignores, one summary each, their changes left out of `changes`.
    pub trees: Vec<TreeSummary>,
}

/// Read what a session changed against its workspace as it is now.
pub fn diff(caller: &Caller, request: &DiffRequest) -> Result<Diff, Error> {
    let state_dir = caller.state_dir()?;
    let mut session = caller.find_session(&state_dir, &request.session)?;
    let workspace = session.existing_workspace(caller.way)?.to_path_buf();
    let inputs = ReviewInputs::of(caller, &session, &workspace)?;
    let read = read_changes(&mut session, caller.way, &caller.on_busy)?;
    let filters = relative_paths(&request.paths, &read.workspace, caller.cwd.as_deref())?;
    let all = &read.changes.changes;
    // Judged against the whole set, as apply judges it: a path asked for narrows what is
    // shown, never what it is judged by nor what the digest covers.
    let review = inputs.review(&read.layer, &read.workspace, all)?;
    let judged =
        digest::judge_all(&read.layer, all, &review).map_err(|source| ChangesError::Scan {
            id: session.id.clone(),
            source: ScanError::Io {
                path: read.layer.clone(),
                source,
            },
        })?;
    let digest = digest::set_digest(&judged, request.no_ignored);
    let asked = |path: &Path| {
        filters.is_empty()
            || filters
                .iter()
                .any(|p| p.as_os_str().is_empty() || path.starts_with(p))
    };
    // A path named at or inside a tree opens it: its changes are shown one by one.
    let opened = |root: &Path| {
        filters
            .iter()
            .any(|p| !p.as_os_str().is_empty() && p.starts_with(root))
    };
    let mut shown_at = Vec::new();
    for (i, (change, judged)) in all.iter().zip(&judged).enumerate() {
        let folded = judged.tree.as_deref().is_some_and(|root| !opened(root));
        let left_out = request.no_ignored && judged.verdict.ignored;
        if asked(&change.path) && !folded && !left_out {
            shown_at.push(i);
        }
    }
    let (mut trees, mut opened_whole) = (Vec::new(), Vec::new());
    if !request.no_ignored {
        for tree in digest::trees(all, &judged) {
            let root = Path::new(&tree.root);
            if filters.iter().any(|p| p == root) {
                // Named at its root: every change of it is shown, one by one.
                opened_whole.push((tree.root.clone(), tree.digest.clone()));
            } else if asked(root) && !opened(root) {
                trees.push(tree);
            }
        }
    }
    let shown = shown_at.iter().map(|&i| all[i].clone()).collect();
    Ok(Diff {
        judged,
        shown,
        shown_at,
        trees,
        opened_whole,
        digest,
        no_ignored: request.no_ignored,
        session_dir: session.dir.clone(),
        read,
    })
}

impl Diff {
    fn roots(&self) -> Roots<'_> {
        Roots {
            host: &self.read.workspace,
            layer: &self.read.layer,
        }
    }

    /// The changes shown one by one (not those of an ignored tree shown as one row).
    pub fn changes(&self) -> &[Change] {
        &self.shown
    }

    pub fn workspace(&self) -> &Path {
        &self.read.workspace
    }

    /// The digest of the whole change set (whatever paths were asked for), as
    /// `apply --reviewed` compares it: `sha256:HEX`.
    pub fn digest(&self) -> &str {
        &self.digest
    }

    /// The diff was read without what git ignores: its digest is one for `apply --no-ignored`.
    pub fn no_ignored(&self) -> bool {
        self.no_ignored
    }

    /// The trees git ignores, as one row each.
    pub fn trees(&self) -> &[TreeSummary] {
        &self.trees
    }

    fn shown_judged(&self) -> impl Iterator<Item = &Judged> {
        self.shown_at.iter().map(|&i| &self.judged[i])
    }

    /// What a person must know about each change shown, in change order.
    pub fn verdicts(&self) -> Result<Vec<Verdict>, Error> {
        Ok(self.shown_judged().map(|j| j.verdict.clone()).collect())
    }

    /// The changes shown that `git status` will not show, each with what a person must know
    /// about it (an ignored tree is not among them: it is a row of [`Self::trees`]).
    pub fn not_shown_by_git(&self) -> Result<Vec<(&Change, Verdict)>, Error> {
        Ok(self
            .shown
            .iter()
            .zip(self.shown_judged())
            .filter(|(_, j)| j.verdict.ignored)
            .map(|(c, j)| (c, j.verdict.clone()))
            .collect())
    }

    /// Every change shown with its sides' kinds, modes, sizes, hashes, its hazards and whether
    /// git shows it.
    pub fn entries(&self) -> io::Result<Vec<ChangeEntry>> {
        let roots = self.roots();
        self.shown
            .iter()
            .zip(self.shown_judged())
            .map(|(change, judged)| {
                let verdict = judged.verdict.clone();
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

    /// The diff as JSON says it, with the session as the request named it.
    pub fn view(&self, session: &str) -> io::Result<DiffView> {
        Ok(DiffView {
            session: session.to_string(),
            workspace: self.read.workspace.clone(),
            digest: self.digest.clone(),
            changes: self.entries()?,
            trees: self.trees.clone(),
        })
    }

    /// Remember this diff as the last one shown to a person: its digest, and what it showed of
    /// each change and tree. An apply without `--reviewed` then names what it writes that this
    /// diff did not hold.
    pub fn record_shown(&self) -> Result<(), Error> {
        let record = ShownRecord {
            digest: self.digest.clone(),
            no_ignored: self.no_ignored,
            changes: self
                .shown
                .iter()
                .zip(self.shown_judged())
                .map(|(c, j)| {
                    (
                        c.path.to_string_lossy().into_owned(),
                        hex::encode(j.fingerprint),
                    )
                })
                .collect(),
            trees: self
                .trees
                .iter()
                .map(|t| (t.root.clone(), t.digest.clone()))
                .chain(self.opened_whole.iter().cloned())
                .collect(),
        };
        record.save(&self.session_dir)
    }

    /// The changes as a git patch; returns those it leaves out or expresses only in part (fifos,
    /// sockets, devices; files too large), each with why.
    pub fn write_patch(&self, out: &mut impl Write) -> io::Result<Vec<patch::LeftOut>> {
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
    ) -> io::Result<Vec<patch::LeftOut>> {
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
