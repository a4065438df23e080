//! The last look before an apply writes anything: every symlink it writes and every symlink of
//! the host's it keeps, followed through the tree it is about to make (the host workspace with
//! exactly these writes). The review flags what leads out after a full apply and with nothing
//! else written; an apply of some changes only (paths named, hazards and conflicts held back)
//! makes a tree in between, where a link may lead out through a change nobody flagged. Such an
//! apply writes nothing, and says which link and which writes, unless a person named them.

use std::collections::BTreeMap;
use std::ffi::OsString;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use airlock_changes::apply::{Entry, Op};
use airlock_changes::hazard::{host_links, Hazard, Layout, Leads, LinkTree, Shape, STEP_BUDGET};

use super::plan::PlannedOps;
use super::{ApplyError, ApplyOptions, Item};

/// What `ops` write (an apply has one op a path), each path's shape before and after; `undo`:
/// as undoing them writes it, back from each op's `new` to its `old`.
fn written_by<'o>(
    ops: impl Iterator<Item = &'o Op>,
    undo: bool,
) -> BTreeMap<PathBuf, (Shape, Shape)> {
    ops.map(|op| {
        let (old, new) = (Shape::of_entry(&op.old), Shape::of_entry(&op.new));
        let sides = if undo { (new, old) } else { (old, new) };
        (op.path().to_path_buf(), sides)
    })
    .collect()
}

/// Refused (nothing written) when a link would lead out of the workspace after `ops`, unless
/// the person named it (or the write that sends it out) as a hazard to allow.
pub(super) fn check_links_stay_inside(
    host: &Path,
    host_links: &[(PathBuf, OsString)],
    items: &[Item],
    ops: &PlannedOps,
    options: &ApplyOptions,
) -> Result<(), ApplyError> {
    let layout = Layout::new(host, written_by(ops.iter().map(|(op, _)| op), false));
    if !layout.redirects() {
        return Ok(());
    }
    // Named by the person: its own yes to a link out (a flagged hazard it named), or a path
    // named with --allow-hazard (--allow-hazards names all).
    let item_of: BTreeMap<&Path, usize> = ops.iter().map(|(op, i)| (op.path(), *i)).collect();
    let named = |path: &Path| {
        let flagged = item_of
            .get(path)
            .and_then(|index| items.get(*index))
            .is_some_and(|item| item.hazards.contains(&Hazard::SymlinkOutside));
        flagged
            || options.all_hazards
            || options.allowed_hazards.iter().any(|p| path.starts_with(p))
    };
    let refuse = |link: &Path, through: Vec<PathBuf>| ApplyError::LinkLeadsOut {
        link: link.to_path_buf(),
        through,
    };
    let mut budget = STEP_BUDGET;
    for (op, _) in ops {
        let Entry::Symlink { target } = &op.new else {
            continue;
        };
        let leads = layout.follow(op.path(), target, false, LinkTree::Written, &mut budget);
        if leads.is_out() && !named(op.path()) {
            return Err(refuse(op.path(), vec![op.path().to_path_buf()]));
        }
    }
    for (link, target) in host_links.iter().filter(|(l, _)| !layout.rewrites(l)) {
        match layout.sends_out(link, target, &mut budget) {
            Leads::Out(through) if !through.iter().any(|p| named(p)) => {
                return Err(refuse(link, through.into_iter().collect()));
            }
            Leads::Unjudged => return Err(refuse(link, Vec::new())),
            _ => {}
        }
    }
    Ok(())
}

/// Refused (nothing undone) when undoing `ops` (an apply's) would send out of the workspace a
/// symlink made since the apply (`applied`: when its journal was last written), which the undo
/// keeps: a later session's link was judged with these writes in place. The links the undo puts
/// back, and those the workspace had before the apply, lead where they led then: the host's own.
pub(super) fn check_undo_keeps_links_inside(
    host: &Path,
    ops: &[Op],
    applied: SystemTime,
) -> Result<(), ApplyError> {
    let layout = Layout::new(host, written_by(ops.iter(), true));
    if !layout.redirects() {
        return Ok(());
    }
    let made_since = |link: &Path| {
        let changed = std::fs::symlink_metadata(host.join(link)).ok().map(|m| {
            let since_epoch = Duration::new(m.ctime().max(0) as u64, m.ctime_nsec() as u32);
            UNIX_EPOCH + since_epoch
        });
        changed.is_none_or(|changed| changed >= applied)
    };
    let mut budget = STEP_BUDGET;
    let kept = host_links(host);
    let kept = kept
        .iter()
        .filter(|(l, _)| !layout.rewrites(l) && made_since(l));
    for (link, target) in kept {
        let through = match layout.sends_out(link, target, &mut budget) {
            Leads::Out(through) => through.into_iter().collect(),
            Leads::Unjudged => Vec::new(),
            _ => continue,
        };
        return Err(ApplyError::UndoLeadsOut {
            link: link.clone(),
            through,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::symlink;

    use super::*;
    use crate::apply::ApplyResult;

    fn write(path: &str, old: Entry, new: Entry) -> Op {
        Op {
            path: path.into(),
            old,
            new,
            owner: None,
            old_owner: None,
        }
    }

    fn link(target: &str) -> Entry {
        Entry::Symlink {
            target: target.into(),
        }
    }

    fn item(path: &str, hazards: &[Hazard]) -> Item {
        Item {
            path: path.into(),
            status: None,
            result: ApplyResult::WouldApply,
            hazards: hazards.to_vec(),
            ignored: false,
            tree: None,
            reason: None,
        }
    }

    /// The host's links under `host`, as the review finds them.
    fn host_links(host: &Path) -> Vec<(PathBuf, OsString)> {
        let mut links = Vec::new();
        for entry in std::fs::read_dir(host).unwrap().flatten() {
            if let Ok(target) = std::fs::read_link(entry.path()) {
                links.push((entry.file_name().into(), target.into_os_string()));
            }
        }
        links
    }

    /// Judge `ops` (each its own item, with the hazards given) over `host` with `options`.
    fn check(
        host: &Path,
        ops: Vec<(Op, &[Hazard])>,
        options: &ApplyOptions,
    ) -> Result<(), ApplyError> {
        let items: Vec<Item> = ops
            .iter()
            .map(|(op, hazards)| item(&op.path().to_string_lossy(), hazards))
            .collect();
        let planned: PlannedOps = ops
            .into_iter()
            .enumerate()
            .map(|(i, (op, _))| (op, i))
            .collect();
        check_links_stay_inside(host, &host_links(host), &items, &planned, options)
    }

    fn refused(result: Result<(), ApplyError>) -> (PathBuf, Vec<PathBuf>) {
        match result {
            Err(ApplyError::LinkLeadsOut { link, through }) => (link, through),
            other => panic!("not refused: {other:?}"),
        }
    }

    /// The review flags a/b, whose way out it meets first; the apply holds a/b back and would
    /// write c/d, which sends `lnk` out the other way: nothing is written.
    #[test]
    fn a_host_link_sent_out_by_what_is_written_refuses_the_apply() {
        let host = tempfile::tempdir().unwrap();
        let h = host.path();
        std::fs::create_dir_all(h.join("a/b")).unwrap();
        std::fs::create_dir_all(h.join("c/d")).unwrap();
        symlink("a/b/../../c/d/../..", h.join("lnk")).unwrap();
        let dir = || Entry::Dir { mode: 0o755 };
        let c_d = || vec![(write("c/d", dir(), link(".")), &[][..])];
        let (link_out, through) = refused(check(h, c_d(), &ApplyOptions::default()));
        assert_eq!(link_out, Path::new("lnk"));
        assert_eq!(through, [PathBuf::from("c/d")]);
        let named = ApplyOptions {
            allowed_hazards: vec![PathBuf::from("c/d")],
            ..ApplyOptions::default()
        };
        assert!(check(h, c_d(), &named).is_ok());
        // The host's own way out is not the apply's doing; a write that keeps it inside is fine.
        symlink("../elsewhere", h.join("out")).unwrap();
        let inside = vec![(write("c/d", dir(), link("e")), &[][..])];
        assert!(check(h, inside, &ApplyOptions::default()).is_ok());
    }

    /// A link written that leads out through another written one is refused unless it was
    /// flagged and so named by the person.
    #[test]
    fn a_written_link_that_leads_out_is_written_only_when_named() {
        let host = tempfile::tempdir().unwrap();
        let h = host.path();
        std::fs::create_dir_all(h.join("x/y")).unwrap();
        let ops = |hazards: &'static [Hazard]| {
            vec![
                (write("x/y/up", Entry::Absent, link("../..")), &[][..]),
                (
                    write("tricky", Entry::Absent, link("x/y/up/../../etc")),
                    hazards,
                ),
            ]
        };
        let (link_out, _) = refused(check(h, ops(&[]), &ApplyOptions::default()));
        assert_eq!(link_out, Path::new("tricky"));
        let named = ops(&[Hazard::SymlinkOutside]);
        assert!(check(h, named, &ApplyOptions::default()).is_ok());
    }
}
