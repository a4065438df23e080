//! Symlinks an apply or a revert would send out of the workspace, end to end: a session's layer
//! over a real host workspace, `apply_changes` and `revert_last_apply`, and the kernel's own
//! answer (`canonicalize`) for where a link leads afterwards. Found by helpers attacking the
//! review's and the apply's checks.

use std::os::unix::fs::symlink;
use std::path::{Path, PathBuf};

use airlock_changes::Hazard;
use airlock_jail::Way;

use super::*;
use crate::review::ReviewInputs;
use crate::session::{NewSession, ProfileRef, Session};

struct World {
    state: tempfile::TempDir,
    _root: tempfile::TempDir,
    ws: PathBuf,
}

impl World {
    fn new() -> World {
        let root = tempfile::tempdir().unwrap();
        let ws = root.path().canonicalize().unwrap().join("ws");
        std::fs::create_dir(&ws).unwrap();
        let state = tempfile::tempdir().unwrap();
        World {
            state,
            _root: root,
            ws,
        }
    }

    /// A session over the host as it is now (a second later: the ledger tells the host's
    /// changes by their times).
    fn session(&self) -> Session {
        std::thread::sleep(std::time::Duration::from_millis(1100));
        let new = NewSession {
            image: None,
            token: None,
            way: Way::of_this_process(),
            workspace: &self.ws,
            name: None,
            profile: ProfileRef {
                name: "default".into(),
                file: None,
            },
        };
        Session::create(self.state.path(), new).unwrap()
    }

    fn apply(&self, s: &Session) -> Result<ApplyReport, ApplyError> {
        self.apply_with(s, &ApplyOptions::default())
    }

    fn apply_with(&self, s: &Session, options: &ApplyOptions) -> Result<ApplyReport, ApplyError> {
        apply_changes(
            self.state.path(),
            &crate::audit::log_for_token(self.state.path(), None),
            &s.id,
            Way::of_this_process(),
            options,
            &ReviewInputs::for_tests(),
            &|_| {},
        )
    }

    fn revert(&self, s: &Session) -> Result<ApplyReport, ApplyError> {
        revert_last_apply(
            self.state.path(),
            &crate::audit::log_for_token(self.state.path(), None),
            &s.id,
            Way::of_this_process(),
            &|_| {},
        )
    }

    /// Where `link` leads by the kernel, when that is outside the workspace.
    fn leads_out(&self, link: &str) -> Option<PathBuf> {
        let real = std::fs::canonicalize(self.ws.join(link)).ok()?;
        (!real.starts_with(&self.ws)).then_some(real)
    }
}

fn mkdir(path: &Path) {
    std::fs::create_dir_all(path).unwrap();
}

fn ln(target: &str, path: &Path) {
    mkdir(path.parent().unwrap());
    symlink(target, path).unwrap();
}

/// The session replaces the host's `a/b` by a link: its ignored `build/` is held (a tree is
/// written only when named), so the host's `a/b` cannot go, and that write fails at its turn.
/// The apply checked a tree with `a/b` replaced; the tree made kept it, and `lnk` and `t` led
/// out (t to /etc/passwd). The write is held from the start now, and the check sees the tree
/// that is made.
#[test]
fn a_write_that_cannot_be_made_is_held_and_not_counted_on() {
    let w = World::new();
    std::fs::write(w.ws.join(".gitignore"), "build/\n").unwrap();
    mkdir(&w.ws.join("a/b/build"));
    std::fs::write(w.ws.join("a/b/build/out.o"), "x").unwrap();
    std::fs::write(w.ws.join("a/b/main.c"), "int main;").unwrap();
    mkdir(&w.ws.join("c/d"));
    ln("a/b/../../c/d/../..", &w.ws.join("lnk"));
    let s = w.session();
    let up = s.upper();
    mkdir(&up.join("a"));
    mkdir(&up.join("c"));
    ln("x/y", &up.join("a/b"));
    ln(".", &up.join("c/d"));
    let deep: Vec<String> = (1..=30).map(|i| format!("x{i}")).collect();
    let d = format!("e/{}/d", deep.join("/"));
    ln(&"../".repeat(31), &up.join(&d));
    let t = format!("a/b/../../{d}/{}etc/passwd", "../".repeat(32));
    ln(&t, &up.join("t"));
    // Counted on, a/b's write left t inside; the tree made kept a/b, and t led out.
    match w.apply(&s) {
        Err(ApplyError::LinkLeadsOut { link, .. }) => assert_eq!(link, Path::new("t")),
        other => panic!("not refused: {:?}", other.map(|r| r.items.len())),
    }
    assert_eq!(w.leads_out("lnk"), None);
    assert_eq!(w.leads_out("t"), None);
    // a/b alone: held, naming what holds it.
    let only_a = ApplyOptions {
        paths: vec![PathBuf::from("a")],
        ..ApplyOptions::default()
    };
    let report = w.apply_with(&s, &only_a).unwrap();
    let a_b = report.items.iter().find(|i| i.path == "a/b").unwrap();
    assert_eq!(a_b.result, ApplyResult::Conflict, "{a_b:?}");
    assert!(
        a_b.reason.as_deref().unwrap().contains("a/b/build"),
        "{a_b:?}"
    );
    assert!(w.ws.join("a/b").symlink_metadata().unwrap().is_dir());
}

/// Session 1 made the host's link `x/y/up` (to the root) a directory; session 2's `t` through it
/// stays inside; reverting session 1 puts the link back, which sends `t` to /etc/passwd. The
/// revert refuses, and undoes nothing.
#[test]
fn a_revert_that_would_send_a_link_out_undoes_nothing() {
    let w = World::new();
    ln("../..", &w.ws.join("x/y/up"));
    let first = w.session();
    mkdir(&first.upper().join("x/y/up"));
    w.apply(&first).unwrap();
    assert!(w.ws.join("x/y/up").symlink_metadata().unwrap().is_dir());
    let second = w.session();
    ln("x/y/up/../../../etc/passwd", &second.upper().join("t"));
    w.apply(&second).unwrap();
    assert_eq!(w.leads_out("t"), None);
    match w.revert(&first) {
        Err(ApplyError::UndoLeadsOut { link, through }) => {
            assert_eq!(link, Path::new("t"));
            assert_eq!(through, [PathBuf::from("x/y/up")]);
        }
        other => panic!("not refused: {:?}", other.map(|r| r.items.len())),
    }
    assert_eq!(w.leads_out("t"), None);
    assert!(w.ws.join("x/y/up").symlink_metadata().unwrap().is_dir());
}

/// Edits, a node_modules of relative links, a link to a package of the workspace, over a host
/// with a pnpm-like store of links: no link flagged as leading out, the apply not refused.
#[test]
fn an_ordinary_session_is_not_refused() {
    let w = World::new();
    std::fs::write(w.ws.join("index.js"), "1").unwrap();
    mkdir(&w.ws.join("packages/lib"));
    for i in 0..50 {
        let store = format!("node_modules/.pnpm/p{i}@1.0.0/node_modules/p{i}");
        mkdir(&w.ws.join(&store));
        ln(
            &format!(".pnpm/p{i}@1.0.0/node_modules/p{i}"),
            &w.ws.join(format!("node_modules/p{i}")),
        );
    }
    let s = w.session();
    let up = s.upper();
    std::fs::write(up.join("index.js"), "2").unwrap();
    for i in 0..50 {
        mkdir(&up.join(format!("web/node_modules/m{i}/bin")));
        std::fs::write(up.join(format!("web/node_modules/m{i}/bin/cli.js")), "x").unwrap();
        ln(
            &format!("../m{i}/bin/cli.js"),
            &up.join(format!("web/node_modules/.bin/m{i}")),
        );
    }
    ln("../../packages/lib", &up.join("web/node_modules/lib"));
    let report = w.apply(&s).unwrap();
    let out: Vec<&String> = report
        .items
        .iter()
        .filter(|i| i.hazards.contains(&Hazard::SymlinkOutside))
        .map(|i| &i.path)
        .collect();
    assert!(out.is_empty(), "{out:?}");
    assert_eq!(std::fs::read_to_string(w.ws.join("index.js")).unwrap(), "2");
    assert!(w.ws.join("web/node_modules/lib").exists());
}

/// The workspace's own links, there before the apply, lead where they led once it is undone:
/// `py -> venv/bin/python` with `venv -> ../outside` (found by a helper: refused).
#[test]
fn a_revert_that_puts_back_the_hosts_own_way_out_is_not_refused() {
    let w = World::new();
    ln("../outside", &w.ws.join("venv"));
    ln("venv/bin/python", &w.ws.join("py"));
    let s = w.session();
    mkdir(&s.upper().join("venv"));
    w.apply(&s).unwrap();
    w.revert(&s).unwrap();
    assert!(w.ws.join("venv").symlink_metadata().unwrap().is_symlink());
}
