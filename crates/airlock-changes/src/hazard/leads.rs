//! Symlinks that lead out of the workspace through other links: `tricky ->
//! x/y/up/../../../etc/passwd` reads as staying inside, but with `x/y/up -> ../..` (a link of the
//! session's, or of the host's) it reaches `/etc/passwd`. A link's target is therefore followed
//! as the kernel will follow it in a given tree — the host workspace with some writes on top —
//! through every link on its way, the written ones and the host's.
//!
//! Two judges use it. The review (what `airlock diff` flags) follows each of the session's new
//! links as after a full apply and as with nothing else written, and each of the host's links as
//! after a full apply and, for one the session changed, as kept. The apply follows, in the tree
//! it is about to make, every link it writes and every host link it keeps: it writes nothing
//! when one leads out that nobody named (a partial apply leaves the review's two trees).
//!
//! Strict where it cannot tell: an absolute target of the session's leads out; one of the host's
//! counts as inside when a prefix of it is the workspace (its canonical path, a symlinked home's
//! too). Every resolution of one judge shares [`STEP_BUDGET`]: past it, what is left unjudged
//! counts as leading out. A link that goes round more than [`HOPS`] times leads nowhere (the
//! kernel refuses it), so nowhere out.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use crate::apply::Entry;
use crate::node::{Kind, Node};
use crate::scan::Change;

/// Links followed in one resolution, as the kernel's limit.
const HOPS: usize = 40;
/// The longest path the kernel takes (PATH_MAX, its NUL left out).
const MAX_PATH_BYTES: usize = 4095;
/// Steps of one judge in all, a step costing more the deeper it is (one for a path under 256
/// bytes): a monorepo's 200,000 links of ten steps each are far inside it; a judge spends
/// seconds, not hours.
pub const STEP_BUDGET: usize = 32_000_000;

/// What lies at a path, as far as a walk through it cares.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Shape {
    Absent,
    Dir,
    Link(OsString),
    Other,
}

impl Shape {
    pub fn of_node(node: Option<&Node>) -> Shape {
        match node {
            None => Shape::Absent,
            Some(n) => match (&n.kind, &n.target) {
                (Kind::Dir, _) => Shape::Dir,
                (Kind::Symlink, Some(target)) => Shape::Link(target.clone()),
                _ => Shape::Other,
            },
        }
    }

    pub fn of_entry(entry: &Entry) -> Shape {
        match entry {
            Entry::Absent => Shape::Absent,
            Entry::Dir { .. } => Shape::Dir,
            Entry::Symlink { target } => Shape::Link(target.clone()),
            _ => Shape::Other,
        }
    }
}

/// The host workspace with writes on top: each written path's shape on the host and after.
pub struct Layout<'a> {
    host: &'a Path,
    written: BTreeMap<PathBuf, (Shape, Shape)>,
}

/// Where one link leads.
#[derive(Debug, PartialEq, Eq)]
pub enum Leads {
    Inside,
    /// Out of the workspace, through these written paths (those on the walk that could send it
    /// elsewhere: see [`redirects`]).
    Out(BTreeSet<PathBuf>),
    /// Round and round: the kernel refuses it.
    Nowhere,
    /// Not followed to its end: the judge's budget ran out.
    Unjudged,
}

impl Leads {
    pub fn is_out(&self) -> bool {
        matches!(self, Leads::Out(_) | Leads::Unjudged)
    }
}

/// Which tree a walk reads.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Tree {
    /// The host's as it is.
    Host,
    /// The host's with the layout's writes.
    Written,
}

/// A walk under way: where it is and how deep, what is left (the next part last), links
/// followed, the written paths read differently from the host, and the depth of the written
/// directory it is in that hides the host's entries below it (one put where the host had none,
/// or the host's removed or replaced), if any.
struct Walk {
    at: PathBuf,
    depth: usize,
    parts: Vec<OsString>,
    hops: usize,
    through: BTreeSet<PathBuf>,
    hidden_below: Option<usize>,
}

impl Walk {
    fn enter(&mut self, next: PathBuf, hides: bool) {
        self.at = next;
        self.depth += 1;
        if hides && self.hidden_below.is_none() {
            self.hidden_below = Some(self.depth);
        }
    }

    fn leave(&mut self) -> bool {
        if !self.at.pop() {
            return false;
        }
        if self.hidden_below == Some(self.depth) {
            self.hidden_below = None;
        }
        self.depth -= 1;
        true
    }
}

impl<'a> Layout<'a> {
    /// `written`: each path written, with its shape on the host and after the write.
    pub fn new(host: &'a Path, written: BTreeMap<PathBuf, (Shape, Shape)>) -> Layout<'a> {
        Layout { host, written }
    }

    /// The layout of a full apply of `changes`.
    pub fn of_changes(host: &'a Path, changes: &[Change]) -> Layout<'a> {
        let written = changes
            .iter()
            .map(|c| {
                let sides = (
                    Shape::of_node(c.old.as_ref()),
                    Shape::of_node(c.new.as_ref()),
                );
                (c.path.clone(), sides)
            })
            .collect();
        Layout { host, written }
    }

    /// Is `path` written, to something else than the host has?
    pub fn rewrites(&self, path: &Path) -> bool {
        self.written.get(path).is_some_and(|(h, a)| h != a)
    }

    /// Could a write of this layout send a link elsewhere (see [`redirects`])?
    pub fn redirects(&self) -> bool {
        self.written
            .values()
            .any(|(host, after)| redirects(host, after))
    }

    /// Where the writes send the host's link at `link` (with `target`) out of the workspace,
    /// which the host's tree alone does not: `Out` with the writes it goes out through, or
    /// `Unjudged`; else `Inside`. Out through the host's tree alone is not the writes' doing.
    pub fn sends_out(&self, link: &Path, target: &OsStr, budget: &mut usize) -> Leads {
        match self.follow(link, target, true, Tree::Written, budget) {
            Leads::Out(through) if !through.is_empty() => {
                let before = self.follow(link, target, true, Tree::Host, budget);
                if before.is_out() {
                    Leads::Inside
                } else {
                    Leads::Out(through)
                }
            }
            Leads::Unjudged => Leads::Unjudged,
            _ => Leads::Inside,
        }
    }

    /// Where the link at `link` with `target` leads in `tree`; `hosts_link`: the host's own (an
    /// absolute target of the session's always leads out). Each component walked costs one of
    /// `budget`.
    pub fn follow(
        &self,
        link: &Path,
        target: &OsStr,
        hosts_link: bool,
        tree: Tree,
        budget: &mut usize,
    ) -> Leads {
        let at = link.parent().unwrap_or(Path::new("")).to_path_buf();
        let mut walk = Walk {
            depth: at.components().count(),
            hidden_below: (tree == Tree::Written)
                .then(|| self.hidden_depth(&at))
                .flatten(),
            at,
            parts: Vec::new(),
            hops: 0,
            through: BTreeSet::new(),
        };
        match self.hop(&mut walk, Path::new(target), hosts_link) {
            Step::On => {}
            Step::Out => return Leads::Out(walk.through),
            Step::Nowhere => return Leads::Nowhere,
        }
        while let Some(part) = walk.parts.pop() {
            // A step costs as deep as the walk is: its lookups go up the path (a chain of long
            // links walks tens of thousands of levels down a tree that is not there).
            let cost = 1 + walk.at.as_os_str().len() / 256;
            if *budget < cost {
                *budget = 0;
                return Leads::Unjudged;
            }
            // Deeper than any path the kernel takes: not a place, whatever the links say.
            if walk.at.as_os_str().len() > MAX_PATH_BYTES {
                return Leads::Unjudged;
            }
            *budget -= cost;
            match self.step(&mut walk, part, tree) {
                Step::On => {}
                Step::Out => return Leads::Out(walk.through),
                Step::Nowhere => return Leads::Nowhere,
            }
        }
        Leads::Inside
    }

    /// Walk one part.
    fn step(&self, walk: &mut Walk, part: OsString, tree: Tree) -> Step {
        match part.to_str() {
            Some(".") => return Step::On,
            Some("..") if walk.leave() => return Step::On,
            Some("..") => return Step::Out,
            _ => {}
        }
        let next = walk.at.join(&part);
        let mut hides = false;
        let (target, hosts_link) = match self.written.get(&next).filter(|_| tree == Tree::Written) {
            Some((host, after)) => {
                if redirects(host, after) {
                    walk.through.insert(next.clone());
                }
                hides = hides_the_hosts(host, after);
                match after {
                    Shape::Link(target) => (Some(PathBuf::from(target)), false),
                    _ => (None, false),
                }
            }
            None if walk.hidden_below.is_some() => (None, false),
            None => (std::fs::read_link(self.host.join(&next)).ok(), true),
        };
        match target {
            Some(target) => self.hop(walk, &target, hosts_link),
            None => {
                walk.enter(next, hides);
                Step::On
            }
        }
    }

    /// The depth of the shallowest written directory at or above `dir` that hides the host's
    /// entries below it, if any.
    fn hidden_depth(&self, dir: &Path) -> Option<usize> {
        let mut path = PathBuf::new();
        for (depth, part) in dir.components().enumerate() {
            path.push(part);
            let hides = self
                .written
                .get(&path)
                .is_some_and(|(host, after)| hides_the_hosts(host, after));
            if hides {
                return Some(depth + 1);
            }
        }
        None
    }

    /// Follow a link's `target` from where the walk is.
    fn hop(&self, walk: &mut Walk, target: &Path, hosts_link: bool) -> Step {
        walk.hops += 1;
        if walk.hops > HOPS {
            return Step::Nowhere;
        }
        let relative = if target.is_absolute() {
            match self.inside(target).filter(|_| hosts_link) {
                Some(inside) => {
                    walk.at = PathBuf::new();
                    walk.depth = 0;
                    walk.hidden_below = None;
                    inside
                }
                None => return Step::Out,
            }
        } else {
            target.to_path_buf()
        };
        let names: Vec<OsString> = relative
            .components()
            .map(|c| c.as_os_str().to_os_string())
            .collect();
        walk.parts.extend(names.into_iter().rev());
        Step::On
    }

    /// An absolute target of the host's as a path inside the workspace: after the shortest
    /// prefix of it that is the workspace (as written, or canonically: a symlinked home).
    /// None: it lies outside.
    fn inside(&self, target: &Path) -> Option<PathBuf> {
        if let Ok(rest) = target.strip_prefix(self.host) {
            return Some(rest.to_path_buf());
        }
        let mut prefix = PathBuf::new();
        let mut parts = target.components();
        for part in parts.by_ref() {
            prefix.push(part);
            let Ok(real) = std::fs::canonicalize(&prefix) else {
                return None;
            };
            if let Ok(within) = real.strip_prefix(self.host) {
                return Some(within.join(parts.as_path()));
            }
        }
        None
    }
}

/// Can this write send a link through it elsewhere: a link made, retargeted or removed, or a
/// directory of the host's removed or replaced (what lay under it no longer shows)? A directory
/// put where the host had none, or had a file, changes no walk: one through a part the host does
/// not have goes on as if it were a directory.
fn redirects(host: &Shape, after: &Shape) -> bool {
    host != after
        && (matches!(host, Shape::Link(_) | Shape::Dir) || matches!(after, Shape::Link(_)))
}

/// A directory written over the host's entry hides what the host has below it when one side
/// is a directory and the other is not.
fn hides_the_hosts(host: &Shape, after: &Shape) -> bool {
    (*host == Shape::Dir) != (*after == Shape::Dir)
}

enum Step {
    On,
    Out,
    Nowhere,
}

/// The changes a review flags for leading out, each with the link that does.
#[derive(Debug, Default)]
pub(super) struct LeadsOut {
    by_change: BTreeMap<PathBuf, PathBuf>,
}

impl LeadsOut {
    /// Judge the session's new links and the host's `host_links` (workspace-relative, with
    /// their targets) for a review of `changes` over `host`.
    pub(super) fn new(host: &Path, changes: &[Change], host_links: &[(PathBuf, OsString)]) -> Self {
        let full = Layout::of_changes(host, changes);
        let mut budget = STEP_BUDGET;
        let mut leads = LeadsOut::default();
        for change in changes {
            let Shape::Link(target) = Shape::of_node(change.new.as_ref()) else {
                continue;
            };
            // After a full apply, and with nothing else of the session's written.
            let out = [Tree::Written, Tree::Host].into_iter().any(|tree| {
                full.follow(&change.path, &target, false, tree, &mut budget)
                    .is_out()
            });
            if out {
                leads.flag(&change.path, &change.path);
            }
        }
        if !full.redirects() {
            return leads;
        }
        // Out through the session's writes (a link it changed: as if kept).
        for (link, target) in host_links {
            match full.sends_out(link, target, &mut budget) {
                Leads::Out(through) => {
                    for path in through {
                        leads.flag(&path, link);
                    }
                }
                Leads::Unjudged => {
                    for change in changes.iter().filter(|c| full.rewrites(&c.path)) {
                        leads.flag(&change.path, link);
                    }
                    break;
                }
                _ => {}
            }
        }
        leads
    }

    fn flag(&mut self, change: &Path, link: &Path) {
        self.by_change
            .entry(change.to_path_buf())
            .or_insert_with(|| link.to_path_buf());
    }

    /// The link that leads out of the workspace through `path`, if one does.
    pub(super) fn through(&self, path: &Path) -> Option<&Path> {
        self.by_change.get(path).map(PathBuf::as_path)
    }
}

#[cfg(test)]
mod tests;
