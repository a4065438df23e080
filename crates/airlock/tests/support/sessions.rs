//! Sessions as the session tests use them: made, run in, and their diff looked up by path.

use std::path::{Path, PathBuf};
use std::process::Output;

use super::{stderr, stdout, World};

/// `sh -c script` on the host, as the identity under test, in `dir`: what a person or a tool
/// does there, without airlock.
pub fn host_sh(w: &World, dir: &Path, script: &str) -> Output {
    w.command("sh")
        .current_dir(dir)
        .args(["-c", script])
        .output()
        .unwrap()
}

/// A directory `name` outside the workspace, the identity under test's: a host without airlock
/// where a harm is shown first.
pub fn demo_dir(w: &World, name: &str) -> PathBuf {
    let demo = w.outside.join(name);
    std::fs::create_dir_all(&demo).unwrap();
    w.give(&demo);
    demo
}

/// `airlock session new` for the world's workspace, with `extra` arguments; its one id.
pub fn new_session(w: &World, extra: &[&str]) -> String {
    let out = w
        .airlock()
        .args(["session", "new", "--workspace"])
        .arg(&w.workspace)
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "session new: {}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    assert!(!id.is_empty() && !id.contains('\n'), "one id: {id:?}");
    id
}

/// `script` in `sh -c`, in the session.
pub fn run_in(w: &World, session: &str, script: &str) -> Output {
    w.airlock()
        .args(["run", "--session", session, "--", "sh", "-c", script])
        .output()
        .unwrap()
}

/// What `diff --json` answers: `{session, workspace, digest, changes, trees}`.
pub fn diff_json(w: &World, id: &str) -> serde_json::Value {
    let out = w.airlock().args(["diff", id, "--json"]).output().unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    serde_json::from_slice(&out.stdout).unwrap()
}

/// What `diff --json` says of each path, looked up by path.
pub fn diff_entries(w: &World, id: &str) -> impl Fn(&str) -> serde_json::Value {
    let changes = diff_json(w, id)["changes"].clone();
    move |path: &str| {
        changes
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"] == path)
            .unwrap_or_else(|| panic!("{path:?} not in {changes:#}"))
            .clone()
    }
}
