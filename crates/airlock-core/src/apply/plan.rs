//! Planning an apply: for every change, what to write or why it is left out (hazards that were
//! not named, ignored content under `--no-ignored`, conflicts, what is never written).

use std::path::Path;

use airlock_changes::apply::{layer_entry, Entry, Op, Owner, Workspace};
use airlock_changes::hazard::{Review, Verdict};
use airlock_changes::{Change, Kind};

use super::{io, ApplyError, ApplyOptions, ApplyResult, Item};
use crate::changes::ChangesError;
use crate::ledger::Ledger;
use crate::review::ReviewInputs;
use crate::session::Session;

/// The writes an apply makes, each with the index of the item it belongs to.
pub(super) type PlannedOps = Vec<(Op, usize)>;

/// What every change of one apply is judged against.
struct Planner<'a> {
    /// Where the layer's overlay keeps its whiteouts.
    xattrs: airlock_changes::OverlayXattrs,
    workspace: &'a Workspace,
    layer: &'a Path,
    ledger: Ledger,
    created_ns: i128,
    options: &'a ApplyOptions,
    /// As root: the owner new entries get (the workspace root's).
    root_owner: Option<Owner>,
    review: Review<'a>,
}

/// An item for every change of the session's layer (at or under the options' paths), and the
/// writes they need, each with the index of its item, in the order they must be made.
pub(super) fn plan_all(
    session: &Session,
    workspace: &Workspace,
    workspace_path: &Path,
    layer: &Path,
    options: &ApplyOptions,
    inputs: &ReviewInputs,
) -> std::result::Result<(Vec<Item>, PlannedOps), ApplyError> {
    let mut set = airlock_changes::scan(layer, workspace_path, session.overlay_xattrs()).map_err(
        |source| ChangesError::Scan {
            id: session.id.clone(),
            source,
        },
    )?;
    let review = inputs.review(layer, workspace_path, &set.changes)?;
    set.filter(&options.paths);
    let root_owner = workspace
        .root_owner()
        .map_err(io("inspect", workspace_path))?;
    let rootful = nix::unistd::geteuid().is_root();
    let planner = Planner {
        workspace,
        layer,
        xattrs: session.overlay_xattrs(),
        ledger: Ledger::load(session)?,
        created_ns: i128::from(session.meta.created) * 1_000_000_000,
        options,
        root_owner: rootful.then_some(root_owner),
        review,
    };
    let mut items = Vec::new();
    let mut ops: PlannedOps = Vec::new();
    for change in &set.changes {
        let (plan, item) = planner.plan(change)?;
        ops.extend(plan.map(|op| (op, items.len())));
        items.push(item);
    }
    // Deletions first, deepest first, so that a directory is empty when its turn comes; then
    // the rest in path order, so that a directory exists before what goes in it.
    ops.sort_by(|(a, _), (b, _)| {
        let deletes = |op: &Op| op.new == Entry::Absent;
        let depth = |op: &Op| op.path().components().count();
        match (deletes(a), deletes(b)) {
            (true, true) => depth(b).cmp(&depth(a)).then(a.path.cmp(&b.path)),
            (true, false) => std::cmp::Ordering::Less,
            (false, true) => std::cmp::Ordering::Greater,
            (false, false) => a.path.cmp(&b.path),
        }
    });
    Ok((items, ops))
}

impl Planner<'_> {
    /// Decide what to do with one change: an op to make, or the reason it is skipped.
    fn plan(&self, change: &Change) -> std::result::Result<(Option<Op>, Item), ApplyError> {
        let Verdict {
            hazards,
            ignored,
            reasons,
        } = self.review.judge(change);
        let mut item = Item {
            path: change.path.to_string_lossy().into_owned(),
            status: Some(change.status),
            result: ApplyResult::WouldApply,
            hazards: hazards.clone(),
            ignored,
            reason: None,
        };
        let skip = |mut item: Item, result, reason: String| {
            item.result = result;
            item.reason = Some(reason);
            Ok((None, item))
        };
        let socket = change
            .new
            .as_ref()
            .is_some_and(|n| matches!(n.kind, Kind::Socket | Kind::CharDevice | Kind::BlockDevice));
        if let Some(never) = hazards.iter().find(|h| h.never_written()) {
            return skip(item, ApplyResult::Refused, never.describe().into());
        }
        if socket {
            return skip(
                item,
                ApplyResult::Refused,
                "a socket is never applied".into(),
            );
        }
        if ignored && self.options.no_ignored {
            let why = "not shown by git status (the repository ignores it): --no-ignored";
            return skip(item, ApplyResult::Ignored, why.into());
        }
        if !hazards.is_empty() && !self.named(change) {
            let what: Vec<&str> = hazards.iter().map(|h| h.describe()).collect();
            let mut why = what.join("; ");
            for reason in &reasons {
                why.push_str(&format!(" (the profile's [apply] tool_config: {reason})"));
            }
            return skip(
                item,
                ApplyResult::Hazard,
                format!("{why} — name it with --allow-hazard to apply it"),
            );
        }
        if !self.options.force {
            let entry_now = || self.workspace.entry(&change.path).ok();
            let conflict = self.ledger.conflict(
                &change.path,
                change.old.as_ref(),
                self.created_ns,
                &entry_now,
            );
            if let Some(why) = conflict {
                return skip(
                    item,
                    ApplyResult::Conflict,
                    format!("{why} — --force overwrites it"),
                );
            }
        }
        let (workspace, layer) = (self.workspace, self.layer);
        let old = workspace
            .entry(&change.path)
            .map_err(io("read", &workspace.path().join(&change.path)))?;
        let new = layer_entry(&layer.join(&change.path), self.xattrs)
            .map_err(io("read", &layer.join(&change.path)))?;
        if old == new {
            item.result = ApplyResult::Unchanged;
            return Ok((None, item));
        }
        let old_owner = match self.root_owner {
            Some(_) => workspace.owner(&change.path).ok().flatten(),
            None => None,
        };
        // What replaces a host entry keeps its owner; what is new gets the workspace owner's.
        let owner = self.root_owner.map(|root| old_owner.unwrap_or(root));
        let op = Op {
            path: change.path.clone().into_os_string(),
            old,
            new,
            owner,
            old_owner,
        };
        Ok((Some(op), item))
    }

    /// Naming a path allows it, what is under it, and the directories it needs on its way.
    fn named(&self, change: &Change) -> bool {
        let is_dir = change.new.as_ref().is_some_and(|n| n.kind == Kind::Dir);
        self.options.all_hazards
            || self
                .options
                .allowed_hazards
                .iter()
                .any(|p| change.path.starts_with(p) || (is_dir && p.starts_with(&change.path)))
    }
}
