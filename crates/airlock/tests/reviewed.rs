//! Apply exactly what was reviewed (issue 29, part 3): a diff's digest named with `apply
//! --reviewed` writes that change set or nothing, also when a run wrote after the diff was read
//! (one still going while the person read it included); without the digest, apply says what it
//! wrote that the last diff shown did not hold; a tree git ignores is one row of the diff and is
//! written whole or not at all. Every test runs as root and as an unprivileged user.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Output;
use std::time::{Duration, Instant};

use serde_json::Value;

use support::sessions::{diff_json, new_session, run_in};
use support::{ran, stderr, stdout, Mode, World};

/// `apply --reviewed`: the session changed since that diff.
const EXIT_REVIEW_STALE: i32 = 3;

fn airlock(w: &World, args: &[&str]) -> Output {
    w.airlock().args(args).output().unwrap()
}

fn digest_of(w: &World, id: &str, extra: &[&str]) -> String {
    let out = airlock(w, &[&["diff", id, "--json"], extra].concat());
    assert!(out.status.success(), "{}", stderr(&out));
    let diff: Value = serde_json::from_slice(&out.stdout).unwrap();
    let digest = diff["digest"].as_str().unwrap().to_string();
    assert!(
        digest.starts_with("sha256:") && digest.len() == 71,
        "{diff:#}"
    );
    digest
}

both_modes!(
    a_run_that_wrote_after_the_diff_makes_the_reviewed_apply_write_nothing,
    |w: &World| {
        let id = new_session(w, &[]);
        ran(&run_in(w, &id, "echo seen > seen.txt"));
        // The text diff shows the digest apart from the patch, which git apply still takes.
        let text = airlock(w, &["diff", &id]);
        assert!(text.status.success(), "{}", stderr(&text));
        let reviewed = digest_of(w, &id, &[]);
        assert!(stderr(&text).contains(&reviewed), "{}", stderr(&text));
        assert!(!stdout(&text).contains("sha256:"), "{}", stdout(&text));

        ran(&run_in(w, &id, "echo late > late.txt"));
        let stale = airlock(w, &["apply", &id, "--reviewed", &reviewed]);
        assert_eq!(
            stale.status.code(),
            Some(EXIT_REVIEW_STALE),
            "{}",
            stderr(&stale)
        );
        assert!(stderr(&stale).contains(&reviewed), "{}", stderr(&stale));
        assert!(
            stderr(&stale).contains("airlock diff"),
            "{}",
            stderr(&stale)
        );
        let (seen, late) = (w.workspace.join("seen.txt"), w.workspace.join("late.txt"));
        assert!(!seen.exists() && !late.exists(), "a stale apply wrote");
        // Scripts read the stable code.
        let json = airlock(w, &["apply", &id, "--reviewed", &reviewed, "--json"]);
        let failure: Value = serde_json::from_slice(&json.stdout).unwrap();
        assert_eq!(failure["code"], "review_stale", "{failure}");

        // Named paths do not narrow the digest: it is the whole set's, which changed.
        let part = airlock(w, &["apply", &id, "seen.txt", "--reviewed", &reviewed]);
        assert_eq!(part.status.code(), Some(EXIT_REVIEW_STALE));
        assert!(!seen.exists());

        // A digest mistyped is said as such.
        let typo = airlock(w, &["apply", &id, "--reviewed", &reviewed[..20]]);
        assert_eq!(typo.status.code(), Some(125));
        assert!(stderr(&typo).contains("not a digest"), "{}", stderr(&typo));
        assert!(!seen.exists());

        let again = digest_of(w, &id, &[]);
        assert_ne!(again, reviewed);
        let applied = airlock(w, &["apply", &id, "--reviewed", &again]);
        assert_eq!(applied.status.code(), Some(0), "{}", stderr(&applied));
        assert!(seen.exists() && late.exists());
        // The audit log names the change set written, and that it was the one reviewed.
        let log = stdout(&airlock(w, &["log", "--action", "apply.intent", "--json"]));
        let intent: Value = serde_json::from_str(log.lines().last().unwrap()).unwrap();
        assert_eq!(
            (intent["digest"].as_str(), intent["reviewed"].as_bool()),
            (Some(again.as_str()), Some(true)),
            "{intent}"
        );
    }
);

/// The session's status as `airlock sessions --json` says it.
fn status_of(w: &World, id: &str) -> String {
    let out = airlock(w, &["sessions", "--json"]);
    let listed: Value = serde_json::from_slice(&out.stdout).unwrap();
    let sessions = listed.as_array().or(listed["sessions"].as_array()).cloned();
    sessions
        .unwrap_or_default()
        .iter()
        .find(|s| s["id"] == id)
        .map(|s| s["status"].as_str().unwrap_or_default().to_string())
        .unwrap_or_default()
}

both_modes!(
    a_run_still_going_while_the_person_reads_is_seen_by_the_reviewed_apply,
    |w: &World| {
        let id = new_session(w, &[]);
        ran(&run_in(w, &id, "echo seen > seen.txt"));
        let reviewed = digest_of(w, &id, &[]);
        // The agent's next run is going while the person reads; it writes after the review,
        // once the test lets it go (it is surely seen running).
        let mut going = w
            .airlock()
            .args(["run", "--session", &id, "--", "sh", "-c"])
            .arg("read go; echo unseen > unseen.txt")
            .stdin(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        let started = Instant::now();
        while status_of(w, &id) != "running" {
            assert!(
                started.elapsed() < Duration::from_secs(60),
                "the run never started"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        // The apply waits for the run, then finds the set is not the one reviewed.
        let apply = w
            .airlock()
            .args(["apply", &id, "--reviewed", &reviewed])
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(300));
        let mut go = going.stdin.take().unwrap();
        std::io::Write::write_all(&mut go, b"go\n").unwrap();
        drop(go);
        assert!(going.wait().unwrap().success());
        let stale = apply.wait_with_output().unwrap();
        assert_eq!(
            stale.status.code(),
            Some(EXIT_REVIEW_STALE),
            "{}",
            stderr(&stale)
        );
        assert!(!w.workspace.join("seen.txt").exists());
        assert!(!w.workspace.join("unseen.txt").exists());
    }
);

both_modes!(
    an_apply_without_a_digest_names_what_the_last_diff_did_not_show,
    |w: &World| {
        let id = new_session(w, &[]);
        ran(&run_in(w, &id, "echo seen > seen.txt"));
        // No diff shown yet: the apply says so.
        let blind = airlock(w, &["apply", &id, "--dry-run"]);
        assert!(
            stderr(&blind).contains("no 'airlock diff"),
            "{}",
            stderr(&blind)
        );
        let shown = airlock(w, &["diff", &id]);
        assert!(shown.status.success(), "{}", stderr(&shown));
        ran(&run_in(w, &id, "echo unseen > unseen.txt"));
        let applied = airlock(w, &["apply", &id, "--json"]);
        assert_eq!(applied.status.code(), Some(0), "{}", stderr(&applied));
        let report: Value = serde_json::from_slice(&applied.stdout).unwrap();
        assert_eq!(
            report["unseen"],
            serde_json::json!({ "diff_shown": true, "paths": ["unseen.txt"] }),
            "{report:#}"
        );
        assert!(report["digest"].as_str().unwrap().starts_with("sha256:"));
        // Today's behaviour otherwise: both were written.
        assert!(w.workspace.join("seen.txt").exists());
        assert!(w.workspace.join("unseen.txt").exists());
        // And in the text a person reads.
        let id = new_session(w, &[]);
        ran(&run_in(w, &id, "echo a > a.txt"));
        // --stat shows names, not content: no diff was shown.
        ran(&airlock(w, &["diff", &id, "--stat"]));
        let blind = airlock(w, &["apply", &id, "--dry-run"]);
        assert!(
            stderr(&blind).contains("no 'airlock diff"),
            "{}",
            stderr(&blind)
        );
        ran(&airlock(w, &["diff", &id]));
        ran(&run_in(w, &id, "echo changed > a.txt"));
        let applied = airlock(w, &["apply", &id]);
        let said = stderr(&applied);
        assert!(
            said.contains("did not hold") && said.contains("  a.txt"),
            "{said}"
        );
    }
);

/// A git repository in the workspace that ignores `.venv/`.
fn repository_ignoring_venv(w: &World) {
    let script = "git init -q . && printf '.venv/\\n' > .gitignore && git add -A && git -c user.name=t -c user.email=t@t commit -qm init";
    ran(&w
        .command("sh")
        .current_dir(&w.workspace)
        .args(["-c", script])
        .output()
        .unwrap());
}

fn tree<'a>(report: &'a Value, root: &str) -> &'a Value {
    report["trees"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["root"] == root)
        .unwrap_or_else(|| panic!("no {root} tree in {report:#}"))
}

both_modes!(
    an_ignored_tree_with_a_file_that_is_never_written_is_not_half_applied,
    |w: &World| {
        repository_ignoring_venv(w);
        let id = new_session(w, &[]);
        ran(&run_in(
            w,
            &id,
            "set -e; mkdir -p .venv/bin .venv/lib/site-packages; \
             echo 'x = 1' > .venv/lib/site-packages/mod.py; \
             printf '#!/bin/sh\\n' > .venv/bin/tool; chmod 755 .venv/bin/tool; \
             printf '#!/bin/sh\\n' > .venv/bin/suid; chmod 4755 .venv/bin/suid; \
             echo code > main.py",
        ));
        // The diff: one row for the tree, none of its files in the patch.
        let text = airlock(w, &["diff", &id]);
        assert!(text.status.success(), "{}", stderr(&text));
        assert!(!stdout(&text).contains(".venv"), "{}", stdout(&text));
        assert!(stdout(&text).contains("main.py"));
        let row = stderr(&text);
        assert!(
            row.contains(".venv/  3 files, 4 dirs, 2 executables"),
            "{row}"
        );
        let diff = diff_json(w, &id);
        let venv = tree(&diff, ".venv");
        assert_eq!(venv["executables"], 2, "{venv:#}");
        assert!(venv["hazard_counts"]["set_id"] == 1, "{venv:#}");
        assert!(
            diff["changes"]
                .as_array()
                .unwrap()
                .iter()
                .all(|c| !c["path"].as_str().unwrap().starts_with(".venv")),
            "{diff:#}"
        );
        // --no-ignored leaves it out, as apply --no-ignored does, with a digest of its own.
        let without = airlock(w, &["diff", &id, "--no-ignored", "--json"]);
        let without: Value = serde_json::from_slice(&without.stdout).unwrap();
        assert_eq!(without["trees"], serde_json::json!([]), "{without:#}");
        assert_ne!(without["digest"], diff["digest"]);

        // Not named: left out whole, the rest written.
        let plain = airlock(w, &["apply", &id, "--json"]);
        assert_eq!(plain.status.code(), Some(1), "{}", stderr(&plain));
        let report: Value = serde_json::from_slice(&plain.stdout).unwrap();
        assert_eq!(tree(&report, ".venv")["result"], "tree_held", "{report:#}");
        assert!(w.workspace.join("main.py").exists());
        assert!(
            !w.workspace.join(".venv").exists(),
            "half a tree was written"
        );

        // Named, it is still held whole: the setuid file in it is never written.
        let named = airlock(w, &["apply", &id, ".venv", "--json"]);
        assert_eq!(named.status.code(), Some(1), "{}", stderr(&named));
        let report: Value = serde_json::from_slice(&named.stdout).unwrap();
        let held = tree(&report, ".venv");
        assert_eq!(held["result"], "tree_held", "{report:#}");
        assert!(
            held["reason"].as_str().unwrap().contains(".venv/bin/suid"),
            "{held:#}"
        );
        assert!(
            !w.workspace.join(".venv").exists(),
            "half a tree was written"
        );

        // A path inside the tree is refused: the tree is applied whole.
        let inside = airlock(w, &["apply", &id, ".venv/lib"]);
        assert_eq!(inside.status.code(), Some(125));
        assert!(
            stderr(&inside).contains("name .venv"),
            "{}",
            stderr(&inside)
        );

        // Without the file that can never be written, the named tree is written whole.
        ran(&run_in(w, &id, "rm .venv/bin/suid"));
        // Read one change at a time (named at its root), the tree counts as shown.
        let opened = airlock(w, &["diff", &id, ".venv"]);
        assert!(
            stdout(&opened).contains(".venv/bin/tool"),
            "{}",
            stdout(&opened)
        );
        let whole = airlock(w, &["apply", &id, ".venv", "--json"]);
        assert_eq!(whole.status.code(), Some(0), "{}", stderr(&whole));
        let report: Value = serde_json::from_slice(&whole.stdout).unwrap();
        assert_eq!(
            report["unseen"],
            serde_json::json!({ "diff_shown": true, "paths": [] }),
            "{report:#}"
        );
        assert!(w.workspace.join(".venv/bin/tool").exists());
        assert!(w.workspace.join(".venv/lib/site-packages/mod.py").exists());
    }
);

both_modes!(
    the_digest_of_a_diff_without_ignored_content_applies_without_it,
    |w: &World| {
        repository_ignoring_venv(w);
        let id = new_session(w, &[]);
        ran(&run_in(
            w,
            &id,
            "mkdir -p .venv && echo v > .venv/v.py && echo code > main.py",
        ));
        let reviewed = digest_of(w, &id, &["--no-ignored"]);
        // Compared as it was made: without what git ignores.
        let mismatch = airlock(w, &["apply", &id, "--reviewed", &reviewed]);
        assert_eq!(mismatch.status.code(), Some(EXIT_REVIEW_STALE));
        assert!(
            stderr(&mismatch).contains("--no-ignored"),
            "{}",
            stderr(&mismatch)
        );
        let applied = airlock(w, &["apply", &id, "--no-ignored", "--reviewed", &reviewed]);
        assert_eq!(applied.status.code(), Some(0), "{}", stderr(&applied));
        assert!(w.workspace.join("main.py").exists());
        assert!(!w.workspace.join(".venv").exists());
    }
);

both_modes!(
    a_hook_or_an_agents_file_is_never_folded_into_an_ignored_tree,
    |w: &World| {
        // Rules that ignore every dot-file ignore .git and .venv alike.
        let script = "git init -q . && printf '.*\\n!.gitignore\\n' > .gitignore && git add -A && git -c user.name=t -c user.email=t@t commit -qm init";
        ran(&w
            .command("sh")
            .current_dir(&w.workspace)
            .args(["-c", script])
            .output()
            .unwrap());
        let id = new_session(w, &[]);
        ran(&run_in(
            w,
            &id,
            "set -e; printf '#!/bin/sh\\necho PWNED\\n' > .git/hooks/pre-commit; chmod 755 .git/hooks/pre-commit; \
             mkdir -p .venv/lib .venv/.claude; echo 'x = 1' > .venv/lib/mod.py; echo '{}' > .venv/.claude/settings.json",
        ));
        let diff = diff_json(w, &id);
        let rows: Vec<&str> = diff["changes"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["path"].as_str().unwrap())
            .collect();
        assert!(
            rows.contains(&".git/hooks/pre-commit"),
            "the hook is a row of its own: {diff:#}"
        );
        assert!(
            rows.contains(&".venv/.claude/settings.json"),
            "an agent's settings too: {diff:#}"
        );
        let roots: Vec<&str> = diff["trees"]
            .as_array()
            .unwrap()
            .iter()
            .map(|t| t["root"].as_str().unwrap())
            .collect();
        assert!(!roots.iter().any(|r| r.starts_with(".git")), "{roots:?}");
        assert!(roots.contains(&".venv"), "{roots:?}");
        // Naming the tree, as a path or as a hazard to allow (what the page sends when a tree
        // is ticked), writes the tree, not the agent's settings in it; the hook stays out.
        let named = airlock(
            w,
            &[
                "apply",
                &id,
                ".venv",
                ".git",
                "--allow-hazard",
                ".venv",
                "--allow-hazard",
                ".git",
                "--allow-hazard",
                ".",
                "--json",
            ],
        );
        let report: Value = serde_json::from_slice(&named.stdout).unwrap();
        assert!(w.workspace.join(".venv/lib/mod.py").exists(), "{report:#}");
        assert!(
            !w.workspace.join(".venv/.claude/settings.json").exists(),
            "{report:#}"
        );
        assert!(
            !w.workspace.join(".git/hooks/pre-commit").exists(),
            "{report:#}"
        );
    }
);
