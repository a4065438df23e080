//! Links that lead out through other links, judged by a review of a real layer over a real host
//! tree, as `airlock diff` and `airlock apply` judge them.

use std::os::unix::fs::symlink;
use std::path::Path;

use crate::hazard::{Hazard, Review, Setup, Verdict};

/// A host workspace and a session's layer over it.
struct World {
    host: tempfile::TempDir,
    layer: tempfile::TempDir,
}

impl World {
    fn new() -> World {
        World {
            host: tempfile::tempdir().unwrap(),
            layer: tempfile::tempdir().unwrap(),
        }
    }

    fn host_dir(&self, path: &str) {
        std::fs::create_dir_all(self.host.path().join(path)).unwrap();
    }

    fn host_link(&self, path: &str, target: &str) {
        let path = self.host.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        symlink(target, path).unwrap();
    }

    fn session_dir(&self, path: &str) {
        std::fs::create_dir_all(self.layer.path().join(path)).unwrap();
    }

    fn session_link(&self, path: &str, target: &str) {
        let path = self.layer.path().join(path);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        symlink(target, path).unwrap();
    }

    /// The review's verdict on every change, by path.
    fn verdicts(&self) -> Vec<(String, Verdict)> {
        let (l, h) = (self.layer.path(), self.host.path());
        let set = crate::scan(l, h, crate::OverlayXattrs::User).unwrap();
        let review = Review::new(l, h, &set.changes, Setup::default()).unwrap();
        set.changes
            .iter()
            .map(|c| (c.path.display().to_string(), review.judge(c)))
            .collect()
    }

    /// The changes flagged as leading out, with the reason given for each.
    fn leading_out(&self) -> Vec<(String, String)> {
        self.verdicts()
            .into_iter()
            .filter(|(_, v)| v.hazards.contains(&Hazard::SymlinkOutside))
            .map(|(path, v)| (path, v.reasons.join("; ")))
            .collect()
    }
}

fn paths(found: &[(String, String)]) -> Vec<&str> {
    found.iter().map(|(p, _)| p.as_str()).collect()
}

/// The reviewer's case: `x/y/up -> ../..` is the workspace's root, so `up/../../..` is above it.
#[test]
fn a_link_through_the_sessions_own_link_and_up_leads_out() {
    let w = World::new();
    w.session_link("plain", "../../../etc/passwd");
    w.session_link("x/y/up", "../..");
    w.session_link("tricky", "x/y/up/../../../etc/passwd");
    w.session_link("root", "x/y/up/../../..");
    w.session_link("inside", "x/y/up/x");
    let found = w.leading_out();
    assert_eq!(paths(&found), ["plain", "root", "tricky"], "{found:?}");
    let tricky = &found[2].1;
    assert!(
        tricky.contains("through the symlinks on its way"),
        "{tricky}"
    );
}

#[test]
fn a_link_through_a_host_link_and_up_leads_out() {
    let w = World::new();
    w.host_link("x/y/up", "../..");
    w.host_dir("sub");
    w.host_link("abs", w.host.path().join("sub").to_str().unwrap());
    w.session_link("tricky", "x/y/up/../etc");
    w.session_link("fine", "x/y/up/sub");
    // A host link with an absolute target inside the workspace is followed from its root.
    w.session_link("through_abs", "abs/../..");
    w.session_link("into_abs", "abs/file");
    assert_eq!(paths(&w.leading_out()), ["through_abs", "tricky"]);
}

/// The session made `x/y/up` a directory where the host has a link to the root: an apply that
/// leaves that change out keeps the link, and `tricky` then leads out.
#[test]
fn a_changed_path_on_the_way_counts_either_side() {
    let w = World::new();
    w.host_link("x/y/up", "../..");
    w.session_dir("x/y/up");
    w.session_link("tricky", "x/y/up/../../../z");
    assert_eq!(paths(&w.leading_out()), ["tricky"]);
}

/// The host's `lnk -> a/b/../..` is the root; the session makes `a/b` a link to `.` (inside
/// itself), so that `lnk` now leads out: the change to `a/b` is flagged, naming `lnk`.
#[test]
fn a_change_that_sends_a_host_link_out_is_flagged_naming_it() {
    let w = World::new();
    w.host_dir("a/b");
    w.host_link("lnk", "a/b/../..");
    w.session_link("a/b", ".");
    let found = w.leading_out();
    assert_eq!(paths(&found), ["a/b"], "{found:?}");
    assert!(found[0].1.contains("sends lnk"), "{found:?}");
}

/// What the host's tree alone already does is not the session's doing; links going round lead
/// nowhere.
#[test]
fn the_hosts_own_way_out_and_loops_are_not_flagged() {
    let w = World::new();
    w.host_link("out", "../elsewhere");
    w.host_dir("d");
    w.session_link("d/new", "../inside");
    w.session_link("loop1", "loop2");
    w.session_link("loop2", "loop1/x");
    assert!(w.leading_out().is_empty(), "{:?}", w.leading_out());
    assert!(Path::new(w.host.path()).join("out").is_symlink());
}

/// A host link that names the workspace by another absolute path (a symlinked home) is
/// followed inside it, and a change that sends it out is flagged.
#[test]
fn a_host_link_naming_the_workspace_by_an_alias_is_followed_inside() {
    let w = World::new();
    let elsewhere = tempfile::tempdir().unwrap();
    let alias = elsewhere.path().join("alias");
    symlink(w.host.path(), &alias).unwrap();
    w.host_dir("a/b");
    w.host_link("lnk", alias.join("a/b/../..").to_str().unwrap());
    w.session_link("a/b", ".");
    let found = w.leading_out();
    assert_eq!(paths(&found), ["a/b"], "{found:?}");
}

/// A judge's resolutions share one budget; what is left unjudged when it runs out leads out.
#[test]
fn every_resolution_shares_one_budget() {
    let w = World::new();
    w.session_link("a", "b");
    w.session_link("b", "c");
    w.session_link("c", "d");
    let (l, h) = (w.layer.path(), w.host.path());
    let set = crate::scan(l, h, crate::OverlayXattrs::User).unwrap();
    let layout = crate::hazard::Layout::of_changes(h, &set.changes);
    let mut budget = 2;
    let follow = |budget: &mut usize| {
        layout.follow(
            Path::new("a"),
            std::ffi::OsStr::new("b"),
            false,
            crate::hazard::LinkTree::Written,
            budget,
        )
    };
    assert_eq!(follow(&mut budget), crate::hazard::Leads::Unjudged);
    assert!(
        follow(&mut budget).is_out(),
        "what is left unjudged leads out"
    );
    let mut budget = 100;
    assert_eq!(follow(&mut budget), crate::hazard::Leads::Inside);
}

/// Links of a few KB each, chained: each walks thousands of levels down a tree that is not there.
/// Found by a helper: 16 of them took 191 s (a lookup of every ancestor at every step). A walk
/// deeper than a path can be is not a place; what it cannot finish is flagged.
#[test]
fn a_chain_of_deep_links_is_judged_without_walking_it_all() {
    let w = World::new();
    let deep = vec!["a"; 1999].join("/");
    let k = 16;
    for i in 0..k {
        let next = if i + 1 < k {
            format!("c{}", i + 1)
        } else {
            "a".into()
        };
        w.session_link(&format!("c{i}"), &format!("{next}/{deep}"));
    }
    let found = w.leading_out();
    assert_eq!(found.len(), k - 1, "{:?}", paths(&found));
}
