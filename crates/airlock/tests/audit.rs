//! The audit log: every action written before it happens, a chain that shows tampering, and
//! refusal when the log cannot be written. Root and unprivileged user both, unless noted.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Output;

use support::{ran, stderr, stdout, Mode, World};

fn airlock(w: &World, args: &[&str]) -> Output {
    w.airlock().args(args).output().unwrap()
}

fn records(w: &World) -> Vec<serde_json::Value> {
    let out = airlock(w, &["log", "--json"]);
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect()
}

fn actions(w: &World) -> Vec<String> {
    records(w)
        .iter()
        .map(|r| r["action"].as_str().unwrap().to_string())
        .collect()
}

both_modes!(every_action_is_logged_intent_first, |w: &World| {
    let out = w
        .airlock()
        .args(["session", "new", "--name", "audited", "--workspace"])
        .arg(&w.workspace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let id = stdout(&out).trim().to_string();
    ran(&airlock(
        w,
        &[
            "run",
            "--session",
            "audited",
            "--",
            "sh",
            "-c",
            "echo x > f; exit 3",
        ],
    ));
    let refused = airlock(w, &["run", "-p", "no-such-profile", "--", "true"]);
    assert_eq!(refused.status.code(), Some(125));
    assert_eq!(airlock(w, &["apply", "audited"]).status.code(), Some(0));
    assert_eq!(airlock(w, &["revert", "audited"]).status.code(), Some(0));
    assert_eq!(airlock(w, &["discard", "audited"]).status.code(), Some(0));
    assert_eq!(
        actions(w),
        [
            "session.create",
            "session.created",
            "run.intent",
            "run.result",
            "run.refused",
            "apply.intent",
            "apply.result",
            "revert.intent",
            "revert.result",
            "session.discard",
            "session.discarded"
        ]
    );
    let all = records(w);
    let intent = &all[2];
    assert_eq!(intent["session"], id.as_str());
    assert_eq!(
        intent["argv"],
        serde_json::json!(["sh", "-c", "echo x > f; exit 3"])
    );
    assert_eq!(intent["profile"], "default");
    assert_eq!(intent["policy"], "builtin");
    assert_eq!(intent["network"]["mode"], "none");
    assert!(intent["limits"]["memory_bytes"].as_u64().unwrap() > 0);
    let result = &all[3];
    assert_eq!(result["exit_code"], 3);
    assert!(result["duration_ms"].is_u64());
    assert!(result["cpu_ms"].is_i64() || result["cpu_ms"].is_u64());
    assert_eq!(all[4]["denied"], true);
    assert!(all[4]["error"]
        .as_str()
        .unwrap()
        .contains("no-such-profile"));
    let applied = &all[6]["paths"][0];
    assert_eq!(applied["path"], "f");
    assert_eq!(applied["old_sha256"], serde_json::Value::Null);
    // printf 'x\n' | sha256sum
    assert_eq!(
        applied["new_sha256"],
        "73cb3858a687a8494ca3323053016282f3dad39d42cf62ca4e79dda2aac7d9ac"
    );
    // Filters.
    let out = airlock(w, &["log", "--session", &id, "--action", "run"]);
    assert_eq!(stdout(&out).lines().count(), 2, "{}", stdout(&out));
    let out = airlock(w, &["log", "--denied"]);
    assert_eq!(stdout(&out).lines().count(), 1, "{}", stdout(&out));
    let out = airlock(w, &["log", "--since", "1h"]);
    assert_eq!(stdout(&out).lines().count(), 11);
    let out = airlock(w, &["log", "--since", "2999-01-01T00:00:00Z"]);
    assert_eq!(stdout(&out), "");
    // The chain is intact.
    let out = airlock(w, &["log", "verify"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(
        stdout(&out).contains("intact, 11 records"),
        "{}",
        stdout(&out)
    );
});

/// `airlock …` with segments of 1 KiB: a run's records roll one.
fn small_segments(w: &World, args: &[&str]) -> Output {
    w.airlock()
        .env("AIRLOCK_AUDIT_SEGMENT_SIZE", "1K")
        .args(args)
        .output()
        .unwrap()
}

fn new_session(w: &World, name: &str) -> String {
    let out = small_segments(
        w,
        &[
            "session",
            "new",
            "--name",
            name,
            "--workspace",
            w.workspace.to_str().unwrap(),
        ],
    );
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out).trim().to_string()
}

both_modes!(
    the_log_rolls_into_segments_read_verified_and_pruned,
    |w: &World| {
        let one = new_session(w, "one");
        let two = new_session(w, "two");
        for _ in 0..3 {
            for session in ["one", "two"] {
                ran(&small_segments(
                    w,
                    &["run", "--session", session, "--", "true"],
                ));
            }
        }
        let sealed = airlock_audit::sealed_segments(&w.state).unwrap();
        assert!(sealed.len() >= 4, "{sealed:?}");
        // A session's records, from every segment, in order, and no other session's.
        let out = small_segments(w, &["log", "--session", &one, "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let found: Vec<serde_json::Value> = stdout(&out)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        // session.created (session.create names no session yet) and three runs.
        assert_eq!(found.len(), 1 + 3 * 2, "{found:?}");
        assert!(found.iter().all(|r| r["session"] == one.as_str()));
        let seqs: Vec<u64> = found.iter().map(|r| r["seq"].as_u64().unwrap()).collect();
        assert!(seqs.windows(2).all(|w| w[0] < w[1]), "{seqs:?}");
        assert_eq!(records(w).len() as u64, seqs.last().unwrap() + 2);
        // Verified across the segments.
        let out = small_segments(w, &["log", "verify"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let said = stdout(&out);
        assert!(
            said.contains(&format!("and {} sealed segments in", sealed.len())),
            "{said}"
        );
        // Retention by size keeps what sessions still under review wrote, and says so.
        let config = w.base.join("config.toml");
        w.write(&config, "[audit]\nkeep_size = \"1\"\n");
        let prune = || small_segments(w, &["log", "prune", "--config", config.to_str().unwrap()]);
        let out = prune();
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("sessions still waiting for review")
                && stderr(&out).contains(&one)
                && stderr(&out).contains(&two),
            "{}",
            stderr(&out)
        );
        assert_eq!(
            airlock_audit::sealed_segments(&w.state).unwrap().len(),
            sealed.len()
        );
        // Once both are discarded, every sealed segment goes, recorded first; verify says where
        // the chain starts and why.
        for session in [&one, &two] {
            ran(&small_segments(w, &["discard", session]));
        }
        let sealed = airlock_audit::sealed_segments(&w.state).unwrap();
        let out = prune();
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!(
                "audit retention: removed {} sealed segments (records 1 to",
                sealed.len()
            )),
            "{}",
            stderr(&out)
        );
        assert!(airlock_audit::sealed_segments(&w.state).unwrap().is_empty());
        let out = small_segments(w, &["log", "verify", "--json"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let verdict: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        let through = verdict["retention"]["through"].as_u64().unwrap();
        assert_eq!(verdict["first"], through + 1);
        let out = small_segments(w, &["log", "verify"]);
        assert!(
            stderr(&out).contains(&format!("records 1 to {through} removed by retention at")),
            "{}",
            stderr(&out)
        );
        // A session's records after the cut are found.
        let three = new_session(w, "three");
        ran(&small_segments(
            w,
            &["run", "--session", "three", "--", "true"],
        ));
        let out = small_segments(
            w,
            &[
                "log",
                "--session",
                &three,
                "--action",
                "run.result",
                "--json",
            ],
        );
        let kept: Vec<serde_json::Value> = stdout(&out)
            .lines()
            .map(|l| serde_json::from_str(l).unwrap())
            .collect();
        assert!(!kept.is_empty(), "{}", stderr(&out));
        assert!(kept.iter().all(|r| r["seq"].as_u64().unwrap() > through));
        // A segment removed by hand is no retention: verify names it.
        ran(&small_segments(
            w,
            &["run", "--session", "three", "--", "true"],
        ));
        ran(&small_segments(
            w,
            &["run", "--session", "three", "--", "true"],
        ));
        let sealed = airlock_audit::sealed_segments(&w.state).unwrap();
        assert!(sealed.len() >= 2, "{sealed:?}");
        std::fs::remove_file(&sealed[0].path).unwrap();
        let out = small_segments(w, &["log", "verify"]);
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        assert!(
            stderr(&out).contains(&format!("{}: BROKEN after", sealed[1].path.display()))
                && stderr(&out).contains("no retention record says"),
            "{}",
            stderr(&out)
        );
    }
);

both_modes!(verify_names_a_tampered_record, |w: &World| {
    for _ in 0..3 {
        ran(&airlock(
            w,
            &[
                "run",
                "--workspace",
                w.workspace.to_str().unwrap(),
                "--",
                "true",
            ],
        ));
    }
    let path = w.state.join("audit.log");
    let text = std::fs::read_to_string(&path).unwrap();
    let edited = text.replacen("\"exit_code\":0", "\"exit_code\":1", 1);
    assert_ne!(text, edited);
    std::fs::write(&path, edited).unwrap();
    let out = airlock(w, &["log", "verify"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("line 2 (record 2) was altered"),
        "{}",
        stderr(&out)
    );
    // The same for scripts.
    let out = airlock(w, &["log", "verify", "--json"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    let verdict: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(verdict["intact"], false);
    assert_eq!(
        verdict["problem_at"],
        serde_json::json!({"kind": "altered", "line": 2, "seq": 2}),
        "{verdict}"
    );
});

both_modes!(
    appends_killed_at_random_never_break_the_chain,
    |w: &World| {
        // Writers killed with SIGKILL at random moments (some mid-append): whatever they left, the
        // next append recovers it and the chain stays whole.
        let mut killed = 0;
        for i in 0..60u64 {
            let mut child = w
                .airlock()
                .args(["session", "new", "--workspace"])
                .arg(&w.workspace)
                .stdout(std::process::Stdio::null())
                .stderr(std::process::Stdio::null())
                .spawn()
                .unwrap();
            std::thread::sleep(std::time::Duration::from_micros((i * 397) % 4000));
            if child.try_wait().unwrap().is_none() {
                let _ = nix::sys::signal::kill(
                    nix::unistd::Pid::from_raw(child.id() as i32),
                    nix::sys::signal::Signal::SIGKILL,
                );
                killed += 1;
            }
            let _ = child.wait();
        }
        assert!(killed > 0, "no writer was killed: the test did not test");
        let out = w
            .airlock()
            .args(["session", "new", "--workspace"])
            .arg(&w.workspace)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let out = airlock(w, &["log", "verify"]);
        assert!(out.status.success(), "{}\n{}", stderr(&out), stdout(&out));
        // Every session that exists was announced before it was made.
        let created = records(w)
            .iter()
            .filter(|r| r["action"] == "session.create")
            .count();
        let sessions = std::fs::read_dir(w.state.join("sessions")).unwrap().count();
        assert!(
            created >= sessions,
            "{created} intents for {sessions} sessions"
        );
    }
);

both_modes!(
    a_record_torn_by_a_crash_is_reported_then_recovered,
    |w: &World| {
        ran(&airlock(
            w,
            &[
                "run",
                "--workspace",
                w.workspace.to_str().unwrap(),
                "--",
                "true",
            ],
        ));
        // Killed in the middle of writing the next intent: half a line is on disk, and nothing ran.
        let out = w
            .airlock_with_test_hooks()
            .args([
                "run",
                "--workspace",
                w.workspace.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                "echo ran",
            ])
            .env("AIRLOCK_TEST_FAULT", "audit:run.intent")
            .output()
            .unwrap();
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&out.status),
            Some(9)
        );
        assert!(!stdout(&out).contains("ran"));
        let out = airlock(w, &["log", "verify"]);
        assert_eq!(out.status.code(), Some(2), "{}", stdout(&out));
        assert!(
            stderr(&out).contains("line 3, the last, was cut short"),
            "{}",
            stderr(&out)
        );
        // The next append cuts it off, says so, and the chain is whole with every complete record.
        ran(&airlock(
            w,
            &[
                "run",
                "--workspace",
                w.workspace.to_str().unwrap(),
                "--",
                "true",
            ],
        ));
        let out = airlock(w, &["log", "verify"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(
            actions(w),
            [
                "run.intent",
                "run.result",
                "log.recovered",
                "run.intent",
                "run.result"
            ]
        );
    }
);

#[test]
fn a_full_disk_refuses_the_run_before_it_starts() {
    // Root only: the state dir is a tiny tmpfs in a private mount namespace of the test.
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    // Once the filesystem is full, runs go on only while the log's last page has room; the first
    // run whose intent cannot be written must be refused before its command starts.
    let script = format!(
        r#"set -e
        mount -t tmpfs -o size=1m tmpfs '{state}'
        '{bin}' --state-dir '{state}' run --workspace '{ws}' -- true
        head -c 2m /dev/zero > '{state}/filler' 2>/dev/null || true
        for i in 1 2 3 4 5 6 7 8 9 10; do
            '{bin}' --state-dir '{state}' run --workspace '{ws}' -- sh -c "echo ran-$i" || exit $?
        done
        "#,
        state = w.state.display(),
        bin = support::airlock_bin().display(),
        ws = w.workspace.display(),
    );
    let out = std::process::Command::new("unshare")
        .args(["-m", "--propagation", "private", "sh", "-c", &script])
        .output()
        .unwrap();
    assert_eq!(
        out.status.code(),
        Some(125),
        "{}\n{}",
        stdout(&out),
        stderr(&out)
    );
    // The refused run's command never ran: the runs before it printed their marker, it did not.
    let ran_last = stdout(&out).lines().count();
    assert!(ran_last < 10, "{}", stdout(&out));
    assert!(!stdout(&out).contains(&format!("ran-{}", ran_last + 1)));
    // Whichever write meets the full disk first (the intent, or the run's entry for the kill
    // switch), the run is refused before its command starts, and says why.
    assert!(
        stderr(&out).contains("No space left on device"),
        "{}",
        stderr(&out)
    );
}

#[test]
fn a_log_that_cannot_be_written_refuses_the_run() {
    // Unprivileged: a log the user may not write (root would write it anyway).
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    ran(&airlock(
        &w,
        &[
            "run",
            "--workspace",
            w.workspace.to_str().unwrap(),
            "--",
            "true",
        ],
    ));
    let log = w.state.join("audit.log");
    std::fs::set_permissions(&log, std::os::unix::fs::PermissionsExt::from_mode(0o400)).unwrap();
    let out = airlock(
        &w,
        &[
            "run",
            "--workspace",
            w.workspace.to_str().unwrap(),
            "--",
            "sh",
            "-c",
            "echo the command ran",
        ],
    );
    assert_eq!(out.status.code(), Some(125));
    assert!(!stdout(&out).contains("the command ran"));
    assert!(
        stderr(&out).contains("cannot write the audit log"),
        "{}",
        stderr(&out)
    );
    assert!(
        stderr(&out).contains("nothing was done"),
        "{}",
        stderr(&out)
    );
}

both_modes!(follow_prints_records_as_they_are_written, |w: &World| {
    let ws = w.workspace.to_str().unwrap().to_string();
    ran(&airlock(w, &["run", "--workspace", &ws, "--", "true"]));
    let mut follower = w
        .airlock()
        .args(["log", "--follow", "--json", "--action", "run.result"])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout_pipe = follower.stdout.take().unwrap();
    let (sender, receiver) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout_pipe).lines() {
            let _ = sender.send(line.unwrap());
        }
    });
    let next = || -> serde_json::Value {
        let line = receiver
            .recv_timeout(std::time::Duration::from_secs(10))
            .expect("no record followed");
        serde_json::from_str(&line).unwrap()
    };
    // What was there, then what comes after: a follower that stopped at the end would not see it.
    assert_eq!(next()["exit_code"], 0);
    ran(&airlock(
        w,
        &["run", "--workspace", &ws, "--", "sh", "-c", "exit 7"],
    ));
    assert_eq!(next()["exit_code"], 7);
    let _ = follower.kill();
    let _ = follower.wait();
});

#[test]
fn a_run_ended_by_its_memory_limit_says_so() {
    // Root: the run has a memory cgroup whose peak and OOM kills the result records.
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    let profile = w.profile("[limits]\nmemory = \"128MiB\"\n");
    let out = airlock(
        &w,
        &[
            "run",
            "--profile-file",
            &profile,
            "--workspace",
            w.workspace.to_str().unwrap(),
            "--",
            "python3",
            "-c",
            "b = bytearray(512 * 1024 * 1024); b[::4096] = b'x' * len(b[::4096])",
        ],
    );
    assert_ne!(out.status.code(), Some(0));
    let result = records(&w)
        .into_iter()
        .find(|r| r["action"] == "run.result")
        .unwrap();
    assert_eq!(result["limit"], "memory", "{result}");
    assert!(result["oom_kills"].as_u64().unwrap() >= 1, "{result}");
    assert!(
        result["peak_memory_bytes"].as_u64().unwrap() > 64 << 20,
        "{result}"
    );
}

both_modes!(
    a_failing_last_check_stops_the_run_before_its_command,
    |w: &World| {
        // The sandbox is built while the intent is synced; if the sync fails, the command never runs.
        let out = w
            .airlock_with_test_hooks()
            .args([
                "run",
                "--workspace",
                w.workspace.to_str().unwrap(),
                "--",
                "sh",
                "-c",
                "echo the command ran",
            ])
            .env("AIRLOCK_TEST_FAULT", "gate")
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
        assert!(!stdout(&out).contains("the command ran"));
        assert!(
            stderr(&out).contains("could not be synced"),
            "{}",
            stderr(&out)
        );
    }
);

both_modes!(the_result_counts_what_the_command_used, |w: &World| {
    // The command's CPU time and its largest process, as pid 1 reports them when the command
    // ends (a throwaway run, and a session's). Killed by the time limit, pid 1 has no word: the
    // supervisor counts what it reaped then, which does not include the processes the kernel
    // killed with pid 1 (it reaps them without counting).
    let busy = "import time\nb = bytearray(96 << 20)\nb[::4096] = b'x' * len(b[::4096])\n\
                t = time.process_time()\nwhile time.process_time() - t < 0.3: pass\n";
    let forever = format!("{busy}while True: pass\n");
    let profile = w.profile("[limits]\ntimeout = \"2s\"\n");
    let ws = w.workspace.to_str().unwrap();
    let cases: [(&[&str], &str, Option<i32>); 3] = [
        (&["run", "--workspace", ws], busy, Some(0)),
        (&["run", "--keep", "--workspace", ws], busy, Some(0)),
        (
            &["run", "--profile-file", &profile, "--workspace", ws],
            &forever,
            None,
        ),
    ];
    for (args, program, code) in cases {
        let out = w
            .airlock()
            .args(args)
            .args(["--", "python3", "-c", program])
            .output()
            .unwrap();
        if code.is_some() {
            assert_eq!(out.status.code(), code, "{}", stderr(&out));
        } else {
            assert_ne!(out.status.code(), Some(0), "{}", stderr(&out));
        }
        let result = records(w)
            .into_iter()
            .rfind(|r| r["action"] == "run.result")
            .unwrap();
        if code.is_none() {
            assert_eq!(result["limit"], "timeout", "{result}");
            assert!(result["cpu_ms"].is_u64(), "{result}");
            continue;
        }
        assert!(
            result["cpu_ms"].as_u64().unwrap() >= 250,
            "{args:?}: {result}"
        );
        assert!(
            result["peak_rss_bytes"].as_u64().unwrap() >= 96 << 20,
            "{args:?}: {result}"
        );
    }
});

both_modes!(
    an_export_to_stdout_sends_each_record_once_and_its_copy_verifies,
    |w: &World| {
        let run = || {
            ran(&airlock(
                w,
                &[
                    "run",
                    "--workspace",
                    w.workspace.to_str().unwrap(),
                    "--",
                    "true",
                ],
            ))
        };
        let config = w.base.join("config.toml");
        w.write(&config, "[audit]\nexport = [\"stdout\"]\n");
        let export = || airlock(w, &["log", "export", "--config", config.to_str().unwrap()]);
        run();
        let first = export();
        assert!(first.status.success(), "{}", stderr(&first));
        assert!(
            stderr(&first).contains("export to stdout: 2 records sent"),
            "{}",
            stderr(&first)
        );
        // The next export starts at the cursor: only what was written since.
        run();
        let second = export();
        assert!(second.status.success(), "{}", stderr(&second));
        let mut exported = first.stdout.clone();
        exported.extend_from_slice(&second.stdout);
        assert_eq!(exported, std::fs::read(w.state.join("audit.log")).unwrap());

        // The copy verifies, with another line and a record sent twice between its records.
        let copy = w.base.join("exported.jsonl");
        let mut mixed = b"a line of something else\n".to_vec();
        mixed.extend_from_slice(&exported);
        mixed.extend_from_slice(&second.stdout);
        w.write(&copy, &String::from_utf8(mixed).unwrap());
        let out = airlock(w, &["log", "verify", "--from", copy.to_str().unwrap()]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            stdout(&out)
                .contains("intact, records 1 to 4 (2 records sent twice, 1 other line skipped)"),
            "{}",
            stdout(&out)
        );
        // A record missing from the copy breaks it.
        let lines: Vec<&str> = std::str::from_utf8(&exported).unwrap().lines().collect();
        w.write(&copy, &format!("{}\n{}\n", lines[0], lines[2]));
        let out = airlock(
            w,
            &["log", "verify", "--from", copy.to_str().unwrap(), "--json"],
        );
        assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
        let verdict: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(
            verdict["problem_at"],
            serde_json::json!({"kind": "missing", "line": 2, "expected": 2, "found": 3})
        );

        // A config with a key it does not know is refused, naming where.
        w.write(&config, "[audit]\nexport = [\"stdout\"]\nsink = 1\n");
        let out = export();
        assert_eq!(out.status.code(), Some(125));
        assert!(
            stderr(&out).contains("config.toml:3:1: unknown field `sink`"),
            "{}",
            stderr(&out)
        );
    }
);
