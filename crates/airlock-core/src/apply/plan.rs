//! Planning an apply: for every change, what to write or why it is left out (hazards that were
//! not named, ignored content under `--no-ignored`, conflicts, what is never written).

use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;
use std::path::{Path, PathBuf};

use airlock_changes::apply::{layer_entry, Entry, Op, Owner, Workspace};
use airlock_changes::hazard::Verdict;
use airlock_changes::{Change, Kind, ScanError};

use super::{io, ApplyError, ApplyOptions, ApplyResult, Item};
use crate::changes::ChangesError;
use crate::digest;
use crate::ledger::Ledger;
use crate::review::ReviewInputs;
use crate::session::Session;
use crate::shown::ShownRecord;

/// The writes an apply makes, each with the index of the item it belongs to.
pub(super) type PlannedOps = Vec<(Op, usize)>;

/// What an apply will do, and what it found.
pub(super) struct Plan {
    pub(super) items: Vec<Item>,
    pub(super) ops: PlannedOps,
    /// The digest of the change set found (see [`crate::digest::set_digest`]).
    pub(super) digest: String,
    /// What each change and each ignored tree is now: path (or root) → fingerprint (or digest).
    pub(super) now: ShownRecord,
}

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
}

/// An item for every change of the session's layer (at or under the options' paths), and the
/// writes they need, each with the index of its item, in the order they must be made. Refused
/// (nothing planned) when the options name a reviewed digest that is not the set's now.
pub(super) fn plan_all(
    session: &Session,
    workspace: &Workspace,
    workspace_path: &Path,
    layer: &Path,
    options: &ApplyOptions,
    inputs: &ReviewInputs,
) -> std::result::Result<Plan, ApplyError> {
    let scan_error = |source| ChangesError::Scan {
        id: session.id.clone(),
        source,
    };
    let set = airlock_changes::scan(layer, workspace_path, session.overlay_xattrs())
        .map_err(scan_error)?;
    let review = inputs.review(layer, workspace_path, &set.changes)?;
    let judged = digest::judge_all(layer, &set.changes, &review).map_err(|source| {
        scan_error(ScanError::Io {
            path: layer.to_path_buf(),
            source,
        })
    })?;
    let digest = digest::set_digest(&judged, options.no_ignored);
    check_reviewed(session, options, &digest)?;
    let trees = digest::trees(&set.changes, &judged);
    check_no_path_inside_a_tree(options, &trees)?;
    let now = shown_record(&set.changes, &judged, &trees, &digest, options.no_ignored);
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
    };
    let selected = |path: &Path| {
        options.paths.is_empty()
            || options
                .paths
                .iter()
                .any(|p| p.as_os_str().is_empty() || path.starts_with(p))
    };
    // A tree is named by its root, as a path to apply or a hazard to allow, or by
    // --allow-hazards: the person's yes to the one row they read, hazards and all.
    let named_tree = |root: &Path| {
        options.all_hazards
            || options.paths.iter().any(|p| p == root)
            || options.allowed_hazards.iter().any(|p| p == root)
    };
    let mut items = Vec::new();
    let mut ops: PlannedOps = Vec::new();
    for (change, judged) in set.changes.iter().zip(judged) {
        if !selected(&change.path) {
            continue;
        }
        let tree = judged.tree.as_deref();
        let (plan, mut item) = match tree {
            Some(root) if !options.no_ignored && !named_tree(root) => {
                let why = format!(
                    "in {root}/, a tree git ignores: written whole, and only when named — 'airlock apply {} {root}' writes it (naming it allows the hazards in it; --allow-hazards names every tree)",
                    session.id,
                    root = root.display(),
                );
                (None, held_item(change, judged.verdict, why))
            }
            _ => planner.plan(
                change,
                judged.verdict,
                tree.is_some(),
                judged.kept_out_of.as_deref(),
            )?,
        };
        item.tree = tree.map(|t| t.to_string_lossy().into_owned());
        ops.extend(plan.map(|op| (op, items.len())));
        items.push(item);
    }
    loop {
        hold_trees_left_in_part(&mut items, &mut ops);
        if !hold_dirs_left_in_part(&mut items, &mut ops) {
            break;
        }
    }
    order_writes(&mut ops);
    check_name_limits(workspace, workspace_path, &ops)?;
    super::links::check_links_stay_inside(
        workspace_path,
        review.host_links(),
        &items,
        &ops,
        options,
    )?;
    Ok(Plan {
        items,
        ops,
        digest,
        now,
    })
}

/// Refused when the options name a reviewed digest that is not the change set's now.
fn check_reviewed(
    session: &Session,
    options: &ApplyOptions,
    digest: &str,
) -> std::result::Result<(), ApplyError> {
    match &options.reviewed {
        Some(reviewed) if reviewed != digest => Err(ApplyError::ReviewStale {
            session: session.id.clone(),
            reviewed: reviewed.clone(),
            found: digest.to_string(),
            no_ignored: options.no_ignored,
        }),
        _ => Ok(()),
    }
}

/// A tree is applied whole: a path named inside one (not its root) is refused.
fn check_no_path_inside_a_tree(
    options: &ApplyOptions,
    trees: &[digest::TreeSummary],
) -> std::result::Result<(), ApplyError> {
    for path in &options.paths {
        let inside = trees
            .iter()
            .find(|tree| path.starts_with(&tree.root) && path != Path::new(&tree.root));
        if let Some(tree) = inside {
            return Err(ApplyError::InsideTree {
                path: path.clone(),
                root: tree.root.clone(),
            });
        }
    }
    Ok(())
}

/// Refused, before anything is written, when a path to write is longer than the workspace takes.
fn check_name_limits(
    workspace: &Workspace,
    workspace_path: &Path,
    ops: &PlannedOps,
) -> std::result::Result<(), ApplyError> {
    let limits = workspace
        .name_limits()
        .map_err(io("inspect", workspace_path))?;
    for (op, _) in ops.iter().filter(|(op, _)| op.new != Entry::Absent) {
        airlock_changes::limits::check(workspace_path, limits, op.path())?;
    }
    Ok(())
}

/// The change set as this apply found it, to compare with the last diff shown.
fn shown_record(
    changes: &[Change],
    judged: &[digest::Judged],
    trees: &[digest::TreeSummary],
    digest: &str,
    no_ignored: bool,
) -> ShownRecord {
    ShownRecord {
        digest: digest.to_string(),
        no_ignored,
        changes: changes
            .iter()
            .zip(judged)
            .map(|(c, j)| {
                (
                    c.path.to_string_lossy().into_owned(),
                    hex::encode(j.fingerprint),
                )
            })
            .collect(),
        trees: trees
            .iter()
            .map(|t| (t.root.clone(), t.digest.clone()))
            .collect(),
    }
}

/// Deletions first, deepest first, so that a directory is empty when its turn comes; then the
/// rest in path order, so that a directory exists before what goes in it.
fn order_writes(ops: &mut PlannedOps) {
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
}

/// An item held back with its ignored tree.
fn held_item(change: &Change, verdict: Verdict, why: String) -> Item {
    Item {
        path: change.path.to_string_lossy().into_owned(),
        status: Some(change.status),
        result: ApplyResult::TreeHeld,
        hazards: verdict.hazards,
        ignored: verdict.ignored,
        tree: None,
        reason: Some(why),
    }
}

/// An ignored tree is written whole or not at all: when any of its paths is left out (a
/// conflict, a hazard, a refusal), none of its writes is made, and each says which path holds
/// it back.
fn hold_trees_left_in_part(items: &mut [Item], ops: &mut PlannedOps) {
    let mut holding: BTreeMap<String, String> = BTreeMap::new();
    for item in items.iter() {
        let left_out = matches!(
            item.result,
            ApplyResult::Conflict | ApplyResult::Hazard | ApplyResult::Refused
        );
        if let (Some(tree), true) = (&item.tree, left_out) {
            holding.entry(tree.clone()).or_insert_with(|| {
                format!(
                    "held with {tree}/, a tree git ignores, written whole or not at all: {} is left out ({})",
                    item.path,
                    item.reason.as_deref().unwrap_or("see it")
                )
            });
        }
    }
    if holding.is_empty() {
        return;
    }
    for item in items.iter_mut() {
        let why = item.tree.as_ref().and_then(|tree| holding.get(tree));
        if let (Some(why), ApplyResult::WouldApply) = (why, item.result) {
            item.result = ApplyResult::TreeHeld;
            item.reason = Some(why.clone());
        }
    }
    ops.retain(|(_, index)| items[*index].result == ApplyResult::WouldApply);
}

/// A host directory is removed or replaced only with everything under it: the kernel removes no
/// directory that still holds entries, so its write would fail at its turn (a conflict, after
/// the others were made), and the tree made would not be the one checked (a link through it
/// followed as replaced, `check_links_stay_inside`). Such a write is held from the start, naming
/// what holds it. Whether any was held.
fn hold_dirs_left_in_part(items: &mut [Item], ops: &mut PlannedOps) -> bool {
    let left_out: BTreeSet<PathBuf> = items
        .iter()
        .filter(|i| !matches!(i.result, ApplyResult::WouldApply | ApplyResult::Unchanged))
        .map(|i| PathBuf::from(&i.path))
        .collect();
    let reason_of = |path: &Path| {
        let item = items.iter().find(|i| Path::new(&i.path) == path);
        item.and_then(|i| i.reason.clone())
            .unwrap_or_else(|| "see it".into())
    };
    let mut holds = Vec::new();
    for (op, index) in ops.iter() {
        let removes_a_dir =
            matches!(op.old, Entry::Dir { .. }) && !matches!(op.new, Entry::Dir { .. });
        let dir = op.path();
        let under = left_out
            .range::<Path, _>((Bound::Excluded(dir), Bound::Unbounded))
            .next()
            .filter(|p| removes_a_dir && p.starts_with(dir));
        if let Some(under) = under {
            let why = format!(
                "the host directory holds {}, which this apply leaves out ({}): it is removed only with everything in it",
                under.display(),
                reason_of(under)
            );
            holds.push((*index, why));
        }
    }
    let held = !holds.is_empty();
    for (index, why) in holds {
        if let Some(item) = items.get_mut(index) {
            item.result = ApplyResult::Conflict;
            item.reason = Some(why);
        }
    }
    ops.retain(|(_, index)| items[*index].result == ApplyResult::WouldApply);
    held
}

impl Planner<'_> {
    /// Decide what to do with one change judged `verdict`; `in_named_tree`: it lies in an
    /// ignored tree the person named, whose hazards are then allowed; `kept_out_of`: the
    /// ignored tree it lies in although it is a row of its own.
    fn plan(
        &self,
        change: &Change,
        verdict: Verdict,
        in_named_tree: bool,
        kept_out_of: Option<&Path>,
    ) -> std::result::Result<(Option<Op>, Item), ApplyError> {
        let Verdict {
            hazards,
            ignored,
            reasons,
        } = verdict;
        let mut item = Item {
            path: change.path.to_string_lossy().into_owned(),
            status: Some(change.status),
            result: ApplyResult::WouldApply,
            hazards: hazards.clone(),
            ignored,
            tree: None,
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
        if !hazards.is_empty() && !in_named_tree && !self.named(change, kept_out_of) {
            let what: Vec<&str> = hazards.iter().map(|h| h.describe()).collect();
            let mut why = what.join("; ");
            for reason in &reasons {
                why.push_str(&format!(" ({reason})"));
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

    /// Naming a path allows it, what is under it, and the directories it needs on its way. In
    /// an ignored tree, a change kept out of the tree's row (`kept_out_of`: a hook, an agent's
    /// file) is named only by its own path or one below the tree's root: naming the tree, or
    /// what holds it, names the row a person read, not these.
    fn named(&self, change: &Change, kept_out_of: Option<&Path>) -> bool {
        let is_dir = change.new.as_ref().is_some_and(|n| n.kind == Kind::Dir);
        self.options.all_hazards
            || self.options.allowed_hazards.iter().any(|p| {
                let names = change.path.starts_with(p) || (is_dir && p.starts_with(&change.path));
                names && kept_out_of.is_none_or(|root| p.starts_with(root) && p != root)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn planned(path: &str, result: ApplyResult, tree: Option<&str>) -> Item {
        Item {
            path: path.into(),
            status: None,
            result,
            hazards: Vec::new(),
            ignored: tree.is_some(),
            tree: tree.map(str::to_string),
            reason: None,
        }
    }

    fn op(path: &str) -> Op {
        Op {
            path: path.into(),
            old: Entry::Absent,
            new: Entry::Dir { mode: 0o755 },
            owner: None,
            old_owner: None,
        }
    }

    /// One path of `.venv` refused: none of `.venv` is written, `dist` and `src` are.
    #[test]
    fn a_tree_with_a_path_left_out_is_held_whole() {
        let mut items = vec![
            planned(".venv/a", ApplyResult::WouldApply, Some(".venv")),
            planned(".venv/suid", ApplyResult::Refused, Some(".venv")),
            planned(".venv/z", ApplyResult::WouldApply, Some(".venv")),
            planned("dist/a", ApplyResult::WouldApply, Some("dist")),
            planned("src/a", ApplyResult::WouldApply, None),
        ];
        let mut ops: PlannedOps = vec![
            (op(".venv/a"), 0),
            (op(".venv/z"), 2),
            (op("dist/a"), 3),
            (op("src/a"), 4),
        ];
        hold_trees_left_in_part(&mut items, &mut ops);
        let written: Vec<usize> = ops.iter().map(|(_, i)| *i).collect();
        assert_eq!(written, [3, 4]);
        assert_eq!(items[0].result, ApplyResult::TreeHeld);
        assert_eq!(items[2].result, ApplyResult::TreeHeld);
        assert!(items[0]
            .reason
            .as_deref()
            .is_some_and(|r| r.contains(".venv/suid")));
        assert_eq!(items[1].result, ApplyResult::Refused);
    }
}
