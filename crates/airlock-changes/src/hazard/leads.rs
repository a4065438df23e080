//! Symlinks that lead out of the workspace through other links: `tricky ->
//! x/y/up/../../../etc/passwd` reads as staying inside, but with `x/y/up -> ../..` (a link of the
//! session's, or of the host's) it reaches `/etc/passwd`. A link's target is therefore followed
//! as the kernel will follow it after an apply, through every link on its way, whether the
//! session's or the host's.
//!
//! An apply may write only some of the changes (paths named, a conflict, a hazard left out), so a
//! changed path on the way is followed both as the host has it and as the session left it, in
//! every combination. A link that can lead out is flagged: a new link of the session's by
//! itself; a host link that only the session's changes send out, at those changes.
//!
//! Strict where it cannot tell: an absolute target (outside the workspace, or a link of the
//! session's) leads out; a resolution that takes more than [`STEP_BUDGET`] steps in all is
//! taken as leading out. A link that goes round more than [`HOPS`] times leads nowhere (the
//! kernel refuses it), so nowhere out.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::node::{Kind, Node};
use crate::scan::Change;

/// Links followed in one resolution, as the kernel's limit.
const HOPS: usize = 40;
/// Components walked for one link, over every combination of the changed paths on its way.
const STEP_BUDGET: usize = 20_000;

/// The changes of a change set that lead out of the workspace, each with the link that does.
#[derive(Debug, Default)]
pub(super) struct LeadsOut {
    /// Changed path → the link (itself, or a host link it sends out) that leads out through it.
    by_change: BTreeMap<PathBuf, PathBuf>,
}

impl LeadsOut {
    /// Judge the session's new links and the host's `host_links` (workspace-relative, with
    /// their targets) in the tree `changes` lead to over `host`.
    pub(super) fn new(host: &Path, changes: &[Change], host_links: &[(PathBuf, OsString)]) -> Self {
        let tree = After::new(host, changes);
        let mut leads = LeadsOut::default();
        for change in changes {
            let Some(target) = change.new.as_ref().and_then(symlink_target) else {
                continue;
            };
            if tree.can_lead_out(&change.path, target, true).is_some() {
                leads
                    .by_change
                    .insert(change.path.clone(), change.path.clone());
            }
        }
        for (link, target) in host_links {
            if tree.changed.contains_key(link) {
                // Changed by the session: judged above when it is still a link.
                continue;
            }
            let Some(culprits) = tree.can_lead_out(link, target, false) else {
                continue;
            };
            for culprit in culprits {
                leads
                    .by_change
                    .entry(culprit)
                    .or_insert_with(|| link.clone());
            }
        }
        leads
    }

    /// The link that leads out of the workspace through `path`, if one does.
    pub(super) fn through(&self, path: &Path) -> Option<&Path> {
        self.by_change.get(path).map(PathBuf::as_path)
    }
}

fn symlink_target(node: &Node) -> Option<&OsStr> {
    (node.kind == Kind::Symlink)
        .then_some(node.target.as_deref())
        .flatten()
}

/// A changed path's entries: the host's, the session's (None: there is none).
type Sides<'a> = (Option<&'a Node>, Option<&'a Node>);

/// The host workspace with the change set on top, either side of each changed path.
struct After<'a> {
    host: &'a Path,
    changed: BTreeMap<PathBuf, Sides<'a>>,
}

/// Which side of a changed path a way takes: the same each time it passes it.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Side {
    Host,
    Session,
}

/// One way of resolving a target: where it is, what is left to walk (the next part last), the
/// links followed, and the side taken at each changed path that reads differently.
#[derive(Clone)]
struct Way {
    at: PathBuf,
    parts: Vec<OsString>,
    hops: usize,
    sides: BTreeMap<PathBuf, Side>,
}

enum Step {
    On,
    Out,
    Nowhere,
}

impl Way {
    /// Walk a link's `target` next: from where the way is (a relative one) or from the root (an
    /// absolute one of the host's inside the workspace). Out when it leads out, Nowhere when
    /// it goes round too often.
    fn hop(&mut self, host: &Path, target: &Path, hosts_link: bool) -> Step {
        self.hops += 1;
        if self.hops > HOPS {
            return Step::Nowhere;
        }
        let relative = if target.is_absolute() {
            match target.strip_prefix(host) {
                Ok(inside) if hosts_link => {
                    self.at = PathBuf::new();
                    inside
                }
                _ => return Step::Out,
            }
        } else {
            target
        };
        let names: Vec<OsString> = relative
            .components()
            .map(|c| c.as_os_str().to_os_string())
            .collect();
        self.parts.extend(names.into_iter().rev());
        Step::On
    }

    /// The changed paths on the way taken as the session left them.
    fn sessions(&self) -> BTreeSet<PathBuf> {
        let taken = self
            .sides
            .iter()
            .filter(|(_, side)| **side == Side::Session);
        taken.map(|(path, _)| path.clone()).collect()
    }
}

impl<'a> After<'a> {
    fn new(host: &'a Path, changes: &'a [Change]) -> After<'a> {
        let changed = changes
            .iter()
            .map(|c| (c.path.clone(), (c.old.as_ref(), c.new.as_ref())))
            .collect();
        After { host, changed }
    }

    /// Whether `link`'s `target` can lead out of the workspace in some combination of the
    /// changed paths on its way: with the changed paths that way takes as the session left
    /// them. A host link (`sessions_link` false) counts only when some are: out through the
    /// host's tree alone is not the session's doing.
    fn can_lead_out(
        &self,
        link: &Path,
        target: &OsStr,
        sessions_link: bool,
    ) -> Option<BTreeSet<PathBuf>> {
        let mut start = Way {
            at: link.parent().unwrap_or(Path::new("")).to_path_buf(),
            parts: Vec::new(),
            hops: 0,
            sides: BTreeMap::new(),
        };
        let (mut pending, mut steps) = (Vec::new(), 0);
        match start.hop(self.host, Path::new(target), !sessions_link) {
            Step::Out => return Some(BTreeSet::new()),
            Step::On => pending.push(start),
            Step::Nowhere => {}
        }
        while let Some(mut way) = pending.pop() {
            while let Some(part) = way.parts.pop() {
                steps += 1;
                if steps > STEP_BUDGET {
                    return Some(way.sessions());
                }
                match self.step(&mut way, part, &mut pending) {
                    Step::On => continue,
                    Step::Out if sessions_link || !way.sessions().is_empty() => {
                        return Some(way.sessions())
                    }
                    Step::Out | Step::Nowhere => break,
                }
            }
        }
        None
    }

    /// Walk one part of `way`. At a changed path that reads differently on either side and
    /// that the way has not passed yet, the host's side is left in `pending` for later.
    fn step(&self, way: &mut Way, part: OsString, pending: &mut Vec<Way>) -> Step {
        match part.to_str() {
            Some(".") => return Step::On,
            Some("..") if way.at.pop() => return Step::On,
            Some("..") => return Step::Out,
            _ => {}
        }
        let next = way.at.join(&part);
        let (target, hosts_link) = match self.changed.get(&next) {
            Some(&sides) => {
                let side = self.side(way, &next, sides, part, pending);
                let node = match side {
                    Side::Host => sides.0,
                    Side::Session => sides.1,
                };
                let target = node.and_then(symlink_target).map(PathBuf::from);
                (target, side == Side::Host)
            }
            None if self.hidden_from_host(way, &next) => (None, false),
            None => (std::fs::read_link(self.host.join(&next)).ok(), true),
        };
        match target {
            Some(target) => way.hop(self.host, &target, hosts_link),
            None => {
                way.at = next;
                Step::On
            }
        }
    }

    /// The side `way` takes at the changed path `next`: the one it took before, or the
    /// session's, with a copy of the way taking the host's left in `pending`.
    fn side(
        &self,
        way: &mut Way,
        next: &Path,
        (host_side, session_side): Sides,
        part: OsString,
        pending: &mut Vec<Way>,
    ) -> Side {
        if let Some(side) = way.sides.get(next) {
            return *side;
        }
        if !differ(host_side, session_side) {
            return Side::Session;
        }
        let mut host_way = way.clone();
        host_way.sides.insert(next.to_path_buf(), Side::Host);
        host_way.parts.push(part);
        pending.push(host_way);
        way.sides.insert(next.to_path_buf(), Side::Session);
        Side::Session
    }
}

impl After<'_> {
    /// Is the host's entry at `path` (a path the change set does not name) hidden by a changed
    /// directory above it, taken as the session left it: one the session made where the host
    /// had none (nothing of the host's shows through it), or removed (nothing is there).
    fn hidden_from_host(&self, way: &Way, path: &Path) -> bool {
        path.ancestors().skip(1).any(|dir| {
            self.changed
                .get(dir)
                .is_some_and(|&(host_side, session_side)| {
                    let is_dir = |n: Option<&Node>| n.is_some_and(|n| n.kind == Kind::Dir);
                    way.sides.get(dir) != Some(&Side::Host)
                        && !(is_dir(host_side) && is_dir(session_side))
                })
        })
    }
}

/// Do the two sides of a changed path read differently to a path walked through it: a link
/// either side (to different targets), or a directory on one side only (the host's entries
/// under it show through only one)?
fn differ(host: Option<&Node>, session: Option<&Node>) -> bool {
    let is_dir = |n: Option<&Node>| n.is_some_and(|n| n.kind == Kind::Dir);
    host.and_then(symlink_target) != session.and_then(symlink_target)
        || is_dir(host) != is_dir(session)
}

#[cfg(test)]
mod tests;
