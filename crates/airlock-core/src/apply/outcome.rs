//! What an apply says about itself beyond each path: what became of each tree git ignores, and
//! what it wrote that the last diff shown did not hold.

use super::{ApplyResult, Item, TreeOutcome};
use crate::shown::{ShownRecord, Unseen};

/// What was written (or would be) that the last diff shown did not hold: a path it did not
/// show, or showed with other content; a tree by its root.
pub(super) fn unseen_by(shown: Option<&ShownRecord>, now: &ShownRecord, items: &[Item]) -> Unseen {
    let Some(shown) = shown else {
        return Unseen {
            diff_shown: false,
            paths: Vec::new(),
        };
    };
    let mut paths: Vec<String> = Vec::new();
    let mut listed = std::collections::BTreeSet::new();
    for item in items
        .iter()
        .filter(|i| matches!(i.result, ApplyResult::Applied | ApplyResult::WouldApply))
    {
        let (key, seen, current) = match &item.tree {
            Some(root) => (
                format!("{root}/"),
                shown.trees.get(root),
                now.trees.get(root),
            ),
            None => (
                item.path.clone(),
                shown.changes.get(&item.path),
                now.changes.get(&item.path),
            ),
        };
        if (seen.is_none() || seen != current) && listed.insert(key.clone()) {
            paths.push(key);
        }
    }
    Unseen {
        diff_shown: true,
        paths,
    }
}

/// One outcome per tree git ignores: what became of all its items, the worst first.
pub(super) fn tree_outcomes(items: &[Item]) -> Vec<TreeOutcome> {
    let rank = |result: ApplyResult| match result {
        ApplyResult::TreeHeld => 0,
        ApplyResult::Conflict => 1,
        ApplyResult::Hazard => 2,
        ApplyResult::Refused => 3,
        ApplyResult::Ignored => 4,
        ApplyResult::WouldApply => 5,
        ApplyResult::Applied => 6,
        ApplyResult::Undone => 7,
        ApplyResult::Unchanged => 8,
    };
    let mut trees: Vec<TreeOutcome> = Vec::new();
    for item in items {
        let Some(root) = &item.tree else { continue };
        match trees.iter_mut().find(|t| &t.root == root) {
            Some(tree) => {
                tree.paths += 1;
                if rank(item.result) < rank(tree.result) {
                    tree.result = item.result;
                    tree.reason = item.reason.clone();
                }
            }
            None => trees.push(TreeOutcome {
                root: root.clone(),
                paths: 1,
                result: item.result,
                reason: item.reason.clone(),
            }),
        }
    }
    trees
}

#[cfg(test)]
mod tests {
    use super::*;

    fn item(path: &str, result: ApplyResult, tree: Option<&str>) -> Item {
        Item {
            path: path.into(),
            status: None,
            result,
            hazards: Vec::new(),
            ignored: tree.is_some(),
            tree: tree.map(str::to_string),
            reason: Some(format!("{path}'s reason")),
        }
    }

    fn record(changes: &[(&str, &str)], trees: &[(&str, &str)]) -> ShownRecord {
        let pairs = |list: &[(&str, &str)]| {
            list.iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect()
        };
        ShownRecord {
            changes: pairs(changes),
            trees: pairs(trees),
            ..ShownRecord::default()
        }
    }

    #[test]
    fn what_the_last_diff_did_not_hold_is_named_a_tree_by_its_root() {
        let shown = record(&[("a", "1"), ("b", "2")], &[(".venv", "t1")]);
        let now = record(&[("a", "1"), ("b", "3"), ("c", "4")], &[(".venv", "t2")]);
        let items = [
            item("a", ApplyResult::Applied, None),
            item("b", ApplyResult::Applied, None),
            item("c", ApplyResult::Applied, None),
            item("d", ApplyResult::Hazard, None),
            item(".venv/x", ApplyResult::Applied, Some(".venv")),
            item(".venv/y", ApplyResult::Applied, Some(".venv")),
        ];
        let unseen = unseen_by(Some(&shown), &now, &items);
        assert_eq!(unseen.paths, ["b", "c", ".venv/"]);
        assert!(unseen.diff_shown);
        let blind = unseen_by(None, &now, &items);
        assert_eq!((blind.diff_shown, blind.paths.len()), (false, 0));
    }

    #[test]
    fn a_tree_s_outcome_is_its_worst_item_s() {
        let items = [
            item("src/a", ApplyResult::Applied, None),
            item(".venv/a", ApplyResult::TreeHeld, Some(".venv")),
            item(".venv/b", ApplyResult::Refused, Some(".venv")),
            item("dist/a", ApplyResult::Applied, Some("dist")),
            item("dist/b", ApplyResult::Unchanged, Some("dist")),
        ];
        let trees = tree_outcomes(&items);
        let summary: Vec<_> = trees
            .iter()
            .map(|t| (t.root.as_str(), t.paths, t.result))
            .collect();
        assert_eq!(
            summary,
            [
                (".venv", 2, ApplyResult::TreeHeld),
                ("dist", 2, ApplyResult::Applied)
            ]
        );
        assert_eq!(trees[0].reason.as_deref(), Some(".venv/a's reason"));
    }
}
