//! What a user relies on besides confinement: exit codes, signals, stdin, clear errors, limits,
//! and real tools working inside.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Write;
use std::process::Stdio;

use support::*;

both_modes!(exit_codes_propagate, |w: &World| {
    assert_eq!(w.inside("exit 42").status.code(), Some(42));
    assert_eq!(w.inside("true").status.code(), Some(0));
});

both_modes!(death_by_signal_is_128_plus_n, |w: &World| {
    assert_eq!(w.inside("kill -TERM $$").status.code(), Some(128 + 15));
    assert_eq!(w.inside("kill -KILL $$").status.code(), Some(128 + 9));
});

both_modes!(signals_to_airlock_reach_the_command, |w: &World| {
    // The time limit ends the loop if the signal never arrives, so a broken forwarder fails the
    // test (exit 124, no "got-term") instead of hanging it.
    let profile = w.profile("[limits]\ntimeout = \"30s\"\n");
    let mut child = w
        .airlock_sh(
            &["--profile-file", &profile],
            "trap 'echo got-term; exit 7' TERM; echo ready; while :; do sleep 0.1; done",
        )
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
    std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
    assert_eq!(line.trim(), "ready");
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let status = child.wait().unwrap();
    let mut rest = String::new();
    std::io::Read::read_to_string(&mut reader, &mut rest).unwrap();
    assert_eq!(rest.trim(), "got-term");
    assert_eq!(status.code(), Some(7));
});

both_modes!(
    a_second_interrupt_kills_a_command_that_ignores_the_first,
    |w: &World| {
        let profile = w.profile("[limits]\ntimeout = \"30s\"\n");
        let mut child = w
            .airlock_sh(
                &["--profile-file", &profile],
                "trap '' INT TERM; echo ready; while :; do sleep 0.1; done",
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut line = String::new();
        let mut reader = std::io::BufReader::new(child.stdout.take().unwrap());
        std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
        assert_eq!(line.trim(), "ready");
        let airlock = nix::unistd::Pid::from_raw(child.id() as i32);
        nix::sys::signal::kill(airlock, nix::sys::signal::Signal::SIGINT).unwrap();
        // Forwarded and ignored: the command goes on; the second one ends the sandbox.
        std::thread::sleep(std::time::Duration::from_millis(300));
        assert!(
            child.try_wait().unwrap().is_none(),
            "the first interrupt ended it"
        );
        nix::sys::signal::kill(airlock, nix::sys::signal::Signal::SIGTERM).unwrap();
        let out = child.wait_with_output().unwrap();
        // 137: killed, not 124 (the time limit).
        assert_eq!(out.status.code(), Some(137), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("again: killing the sandbox"),
            "{}",
            stderr(&out)
        );
    }
);

both_modes!(
    a_caller_that_ignores_sigchld_does_not_break_the_run,
    |w: &World| {
        // An ignored SIGCHLD is inherited across exec (some process managers leave it so): children
        // are then reaped by the kernel at once, so waiting for the network helper failed, and the
        // sandbox's pid 1, which inherited it too, never learned that the command had ended.
        let out = w
        .command("timeout")
        .args([
            "20",
            "python3",
            "-c",
            "import os, signal, sys; signal.signal(signal.SIGCHLD, signal.SIG_IGN); os.execv(sys.argv[1], sys.argv[1:])",
        ])
        .arg(airlock_bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(["run", "--workspace"])
        .arg(&w.workspace)
        .args(["--", "sh", "-c", "echo hi; exit 3"])
        .output()
        .unwrap();
        assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
        assert_eq!(stdout(&out), "hi\n");
    }
);

both_modes!(the_command_may_use_every_cpu_airlock_may, |w: &World| {
    // The launch steers the setup process off the supervisor's CPU; the command gets them all.
    let outside = std::process::Command::new("grep")
        .args(["Cpus_allowed_list", "/proc/self/status"])
        .output()
        .unwrap();
    let out = w.inside("grep Cpus_allowed_list /proc/self/status");
    assert_eq!(stdout(&out), stdout(&outside), "{}", stderr(&out));
});

both_modes!(stdin_passes_through, |w: &World| {
    let mut child = w
        .airlock_sh(&[], "tr a-z A-Z")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(b"hello sandbox\n")
        .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(stdout(&out), "HELLO SANDBOX\n");
});

both_modes!(
    command_not_found_is_127_with_a_clear_message,
    |w: &World| {
        let out = w
            .airlock()
            .args(["run", "--", "no-such-tool-xyz", "arg"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(127));
        assert!(
            stderr(&out).contains("no-such-tool-xyz: command not found"),
            "{}",
            stderr(&out)
        );
        // A script whose interpreter is not inside, and a host path that is not inside: each
        // says which, rather than "command not found".
        let script = w.workspace.join("tool.sh");
        std::fs::write(&script, "#!/opt/no-such/python9\nprint(1)\n").unwrap();
        std::fs::set_permissions(&script, std::os::unix::fs::PermissionsExt::from_mode(0o755))
            .unwrap();
        let out = w
            .airlock()
            .args(["run", "--workspace"])
            .arg(&w.workspace)
            .arg("--")
            .arg(&script)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(127));
        assert!(
            stderr(&out).contains("its interpreter (/opt/no-such/python9) is not in the sandbox"),
            "{}",
            stderr(&out)
        );
        let out = w
            .airlock()
            .args(["run", "--", "/opt/no-such/bin/tool"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(127));
        assert!(
            stderr(&out).contains("/opt/no-such/bin/tool: no such file in the sandbox"),
            "{}",
            stderr(&out)
        );
    }
);

both_modes!(identity_inside, |w: &World| {
    let out = w.inside("id -u; id -g; id -un; hostname; echo $HOME; grep -c . /proc/self/status >/dev/null; grep CapEff /proc/self/status; grep NoNewPrivs /proc/self/status; grep Seccomp: /proc/self/status");
    let text = ran(&out);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(
        &lines[..5],
        &["1000", "1000", "agent", "airlock", "/home/agent"],
        "{text}"
    );
    assert!(text.contains("CapEff:\t0000000000000000"), "{text}");
    assert!(text.contains("NoNewPrivs:\t1"), "{text}");
    assert!(text.contains("Seccomp:\t2"), "{text}");
});

both_modes!(changes_persist_within_a_kept_session_only, |w: &World| {
    let out = w.inside_with(&["--keep"], "echo one > state.txt");
    let said = stderr(&out);
    let id = said
        .split_whitespace()
        .nth(2)
        .expect("session id on stderr")
        .to_string();
    let out = w.inside_with(&["--session", &id], "cat state.txt");
    assert_eq!(ran(&out).trim(), "one");
    let out = w.inside("cat state.txt 2>/dev/null || echo absent");
    assert_eq!(
        ran(&out).trim(),
        "absent",
        "a fresh run must not see another session's changes"
    );
    assert!(!w.workspace.join("state.txt").exists());
});

both_modes!(wall_clock_timeout_kills_everything, |w: &World| {
    let profile = w.profile("[limits]\ntimeout = \"1s\"\n");
    let started = std::time::Instant::now();
    let out = w.inside_with(&["--profile-file", &profile], "sleep 60 & sleep 60");
    assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    assert!(stderr(&out).contains("time limit"));
    // Not a timing assertion: only that the run did not wait for the 60 s sleeps.
    assert!(started.elapsed() < std::time::Duration::from_secs(50));
});

both_modes!(bad_profile_names_file_line_and_column, |w: &World| {
    let profile = w.profile("[limits]\nmemroy = \"1GiB\"\n");
    let out = w.inside_with(&["--profile-file", &profile], "true");
    assert_eq!(out.status.code(), Some(125));
    assert!(
        stderr(&out).contains(&format!("{profile}:2:1")),
        "{}",
        stderr(&out)
    );
});

both_modes!(profile_inside_the_workspace_is_refused, |w: &World| {
    let path = w.workspace.join("evil.toml");
    w.write(&path, "[limits]\nprocesses = 100000\n");
    let out = w.inside_with(&["--profile-file", path.to_str().unwrap()], "true");
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("inside"), "{}", stderr(&out));
});

both_modes!(unknown_degraded_layer_is_an_error, |w: &World| {
    let out = w.inside_with(&["--allow-degraded=seccomp"], "true");
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains("unknown layer"), "{}", stderr(&out));
});

both_modes!(profile_env_and_paths, |w: &World| {
    let tools = w.outside.join("tools");
    std::fs::create_dir_all(&tools).unwrap();
    w.give(&tools);
    w.write(&tools.join("tool.sh"), "echo tool-ran");
    w.write(&tools.join("private.key"), "secret");
    let profile = w.profile(&format!(
        "[filesystem]\nread_only = [\"{t}\"]\nhide = [\"{t}/private.key\"]\n[env]\nallow = [\"CI\"]\nset = {{ GREETING = \"hi\" }}\n",
        t = tools.display()
    ));
    let out = w
        .airlock_sh(
            &["--profile-file", &profile],
            &format!("sh {t}/tool.sh; echo $CI $GREETING; cat {t}/private.key; echo x > {t}/new 2>/dev/null || echo read-only", t = tools.display()),
        )
        .env("CI", "yes")
        .output()
        .unwrap();
    let text = ran(&out);
    assert!(text.contains("tool-ran"), "{text}{}", stderr(&out));
    assert!(text.contains("yes hi"), "{text}");
    assert!(!text.contains("secret"), "{text}");
    assert!(text.contains("read-only"), "{text}");
});

both_modes!(real_tools_work_inside, |w: &World| {
    let script = "set -e
        git init -q repo && cd repo
        git -c user.email=a@b -c user.name=agent commit -q --allow-empty -m first
        git log --oneline | wc -l
        python3 -c 'print(sum(range(10)))'
        echo ok";
    let out = w.inside(script);
    assert_eq!(
        ran(&out).split_whitespace().collect::<Vec<_>>(),
        ["1", "45", "ok"],
        "{}",
        stderr(&out)
    );
});

#[test]
fn a_chosen_sandbox_uid_runs_unless_a_host_user_or_group_has_it() {
    // Root only: the sandbox uid is root's choice. The check asks NSS, which a statically linked
    // airlock must do without loading libnss_systemd (it crashed there: exit 139, no message).
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    let free = w.inside_with(&["--sandbox-uid", "54321"], "echo ran");
    assert_eq!(ran(&free).trim(), "ran", "{}", stderr(&free));
    // uid 1 is daemon's on Debian.
    let taken = w.inside_with(&["--sandbox-uid", "1"], "echo ran");
    assert_eq!(taken.status.code(), Some(125), "{}", stderr(&taken));
    assert!(!stdout(&taken).contains("ran"));
    assert!(
        stderr(&taken).contains("that is the uid of user daemon"),
        "{}",
        stderr(&taken)
    );
    // The id is the sandbox's gid too: a group that has it (and no user) is refused as well,
    // or the sandbox would read what that group may read.
    let gid = "54322";
    let added = std::process::Command::new("groupadd")
        .args(["-g", gid, "airlock-test-group"])
        .status()
        .unwrap();
    assert!(added.success(), "groupadd failed");
    let by_group = w.inside_with(&["--sandbox-uid", gid], "echo ran");
    let _ = std::process::Command::new("groupdel")
        .arg("airlock-test-group")
        .status();
    assert_eq!(by_group.status.code(), Some(125), "{}", stderr(&by_group));
    assert!(
        stderr(&by_group).contains("that is the gid of group airlock-test-group"),
        "{}",
        stderr(&by_group)
    );
}

#[test]
fn what_the_command_starts_stays_in_the_runs_cgroups_and_they_are_gone_when_airlock_returns() {
    // Root on a v1 hierarchy (as here): pid 1 moves itself out of the run's cgroups once the
    // command has started, so that airlock can remove them while the kernel tears pid 1's
    // namespaces down. Everything the command starts must stay in them, and nothing of them
    // may be left when airlock returns, a daemon the command left behind notwithstanding.
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    if !std::path::Path::new("/sys/fs/cgroup/memory/memory.usage_in_bytes").exists() {
        eprintln!("skipped: no cgroup v1 memory hierarchy here");
        return;
    }
    let script = "sh -c 'grep -E \":(memory|pids):\" /proc/self/cgroup' | sed 's/^/command /'; \
                  grep -E ':(memory|pids):' /proc/1/cgroup | sed 's/^/init /'; \
                  sleep 60 >/dev/null 2>&1 &";
    let child = w
        .airlock_sh(&[], script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    // As root the test runs airlock itself, and its cgroups are named after its pid.
    let supervisor = child.id();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let said = stdout(&out);
    // Paths are relative to the sandbox's cgroup namespace, rooted at the run's cgroups.
    for controller in ["memory", "pids"] {
        assert!(
            said.lines()
                .any(|l| l.starts_with("command ") && l.ends_with(&format!(":{controller}:/"))),
            "the command is not in the run's {controller} cgroup: {said}"
        );
        assert!(
            said.lines()
                .any(|l| l.starts_with("init ") && l.ends_with(&format!(":{controller}:/.."))),
            "pid 1 is still in the run's {controller} cgroup: {said}"
        );
    }
    for hierarchy in ["memory", "pids", "freezer"] {
        let dir = format!("/sys/fs/cgroup/{hierarchy}/airlock/run-{supervisor}");
        assert!(
            !std::path::Path::new(&dir).exists(),
            "{dir} is left after the run"
        );
    }
}

#[test]
fn cargo_builds_a_tiny_crate_inside() {
    // Root only: the toolchain lives under /root here, which an unprivileged uid cannot reach.
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    let rustup = std::env::var("RUSTUP_HOME")
        .unwrap_or_else(|_| format!("{}/.rustup", std::env::var("HOME").unwrap_or_default()));
    let cargo_home = std::env::var("CARGO_HOME")
        .unwrap_or_else(|_| format!("{}/.cargo", std::env::var("HOME").unwrap_or_default()));
    if !std::path::Path::new(&rustup).is_dir() {
        eprintln!("skipped: no rustup toolchain at {rustup}");
        return;
    }
    let profile = w.profile(&format!(
        "[filesystem]\nread_only = [\"{rustup}\", \"{cargo_home}/bin\"]\n[env]\nset = {{ RUSTUP_HOME = \"{rustup}\", PATH = \"{cargo_home}/bin:/usr/bin:/bin\", CARGO_HOME = \"/home/agent/.cargo\" }}\n[limits]\nmemory = \"2GiB\"\n"
    ));
    let script = "set -e; cargo new -q --vcs none tiny; cd tiny; cargo build -q --offline; ./target/debug/tiny";
    let out = w.inside_with(&["--profile-file", &profile], script);
    assert_eq!(ran(&out).trim(), "Hello, world!", "{}", stderr(&out));
}

#[test]
fn check_reports_every_layer_as_json() {
    let Some(w) = World::new(if is_root() { Mode::Root } else { Mode::User }) else {
        return;
    };
    let out = w.airlock().args(["check", "--json"]).output().unwrap();
    let report: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let names: Vec<&str> = report["layers"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["name"].as_str().unwrap())
        .collect();
    for layer in [
        "user namespace",
        "mount namespace",
        "pid namespace",
        "network namespace",
        "overlayfs",
        "landlock",
        "seccomp",
        "cgroups",
    ] {
        assert!(names.contains(&layer), "{layer} missing from {names:?}");
    }
    assert_eq!(
        report["protection"], "full",
        "this test machine provides every layer"
    );
    assert_eq!(out.status.code(), Some(0));
}

/// `check` probes overlayfs with a mount in a namespace of its own. Where / is shared (systemd
/// makes it so; this machine's is private, so the test makes a namespace where it is shared), a
/// mount made there before the namespace is made private shows in the host's too, and stays.
#[test]
fn check_leaves_no_mount_where_the_root_is_shared() {
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    let script = r#"mount --make-rshared / || exit 9
"$@" check >/dev/null
grep -c " $0/check-" /proc/self/mountinfo"#;
    let out = w
        .command("unshare")
        .args(["--mount", "--propagation", "unchanged", "sh", "-c", script])
        .arg(&w.state)
        .arg(airlock_bin())
        .arg("--state-dir")
        .arg(&w.state)
        .output()
        .unwrap();
    assert_eq!(
        stdout(&out).trim(),
        "0",
        "check left its probe's mounts in the caller's namespace: {}",
        stderr(&out)
    );
    let left: Vec<_> = std::fs::read_dir(&w.state)
        .unwrap()
        .flatten()
        .map(|entry| entry.file_name())
        .filter(|name| name.to_string_lossy().starts_with("check-"))
        .collect();
    assert!(
        left.is_empty(),
        "check left {left:?} in the state directory"
    );
}

both_modes!(killing_airlock_kills_the_whole_sandbox, |w: &World| {
    let marker = format!("{}.{}", 5000 + std::process::id() % 1000, w.mode as u8 + 1);
    let mut airlock = w
        .airlock_sh(&[], &format!("setsid sleep {marker} & sleep {marker}"))
        .stdout(Stdio::null())
        .spawn()
        .unwrap();
    let alive = || process_running(&format!("^sleep {marker}$"));
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !alive() {
        assert!(
            std::time::Instant::now() < deadline,
            "the sandboxed sleeps never started"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    // setpriv execs airlock, so this is airlock's pid in both modes.
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(airlock.id() as i32),
        nix::sys::signal::Signal::SIGKILL,
    )
    .unwrap();
    airlock.wait().unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while alive() {
        assert!(
            std::time::Instant::now() < deadline,
            "sandboxed processes outlived a killed supervisor"
        );
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let mounts = std::fs::read_to_string("/proc/self/mountinfo").unwrap();
    assert!(
        !mounts.contains(w.state.to_str().unwrap()),
        "a sandbox mount leaked to the host: {mounts}"
    );
});

both_modes!(sigpipe_has_its_default_action_inside, |w: &World| {
    // airlock itself ignores SIGPIPE (as every Rust program does); the command must not inherit that.
    let out = w.inside("bash -c 'yes | head -1 >/dev/null; echo ${PIPESTATUS[0]}'");
    assert_eq!(ran(&out).trim(), "141", "{}", stderr(&out));
});

both_modes!(missing_landlock_is_refused_unless_accepted, |w: &World| {
    // Debug builds pretend the kernel has no Landlock when this variable is set.
    let run = |extra: &[&str]| {
        let mut cmd = w.airlock_with_test_hooks();
        cmd.arg("run").arg("--workspace").arg(&w.workspace);
        cmd.args(extra).args(["--", "sh", "-c", "echo ran"]);
        cmd.env("AIRLOCK_TEST_HIDE_LANDLOCK", "1");
        cmd
    };
    let refused = run(&[]).output().unwrap();
    assert_eq!(refused.status.code(), Some(125));
    assert!(
        !stdout(&refused).contains("ran"),
        "ran without a required layer"
    );
    assert!(
        stderr(&refused).contains("--allow-degraded=landlock"),
        "{}",
        stderr(&refused)
    );
    let accepted = run(&["--allow-degraded=landlock"]).output().unwrap();
    assert_eq!(ran(&accepted).trim(), "ran");
    let check = w
        .airlock_with_test_hooks()
        .args(["check", "--json"])
        .env("AIRLOCK_TEST_HIDE_LANDLOCK", "1")
        .output()
        .unwrap();
    assert_eq!(check.status.code(), Some(3));
    let report: serde_json::Value = serde_json::from_slice(&check.stdout).unwrap();
    assert_eq!(report["protection"], "degraded");
});

both_modes!(
    output_beyond_the_limit_is_dropped_not_blocking,
    |w: &World| {
        let profile = w.profile("[limits]\noutput = \"1KiB\"\n");
        // 6.9 MB of output: the command must run to its end, not block on a full pipe.
        let out = w.inside_with(
            &["--profile-file", &profile],
            "seq 1 1000000; echo finished >&2; exit 3",
        );
        assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
        assert_eq!(out.stdout.len(), 1024, "exactly the limit is kept");
        assert!(stdout(&out).starts_with("1\n2\n3\n"));
        assert!(
            stderr(&out).contains("output limit was reached"),
            "{}",
            stderr(&out)
        );
        // Within the limit, nothing is lost or reordered per stream.
        let out = w.inside("seq 1 1000 | tr '\\n' ' '");
        assert_eq!(ran(&out).split_whitespace().count(), 1000);
    }
);

both_modes!(
    a_reader_that_goes_away_closes_the_commands_pipe,
    |w: &World| {
        // `yes | head -n1`: once the reader is gone, the command's next write fails as on a
        // plain pipe (SIGPIPE), instead of its output being read and dropped until a limit.
        let profile = w.profile("[limits]\ntimeout = \"60s\"\n");
        let mut airlock = w
            .airlock()
            .args(["run", "--profile-file", &profile, "--workspace"])
            .arg(&w.workspace)
            .args(["--", "yes"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut reader = std::io::BufReader::new(airlock.stdout.take().unwrap());
        let mut line = String::new();
        std::io::BufRead::read_line(&mut reader, &mut line).unwrap();
        assert_eq!(line, "y\n");
        drop(reader);
        let out = airlock.wait_with_output().unwrap();
        // 141 = 128 + SIGPIPE, as `yes` ends in a shell pipeline; 124 would be the time limit.
        assert_eq!(out.status.code(), Some(141), "{}", stderr(&out));
    }
);

both_modes!(
    one_failing_output_stream_does_not_take_the_other,
    |w: &World| {
        // stderr to a full device: stdout still arrives whole; the lost stderr makes a command
        // that succeeded airlock's failure (125).
        let script = "echo err >&2; sleep 0.2; echo out";
        let out = w
            .airlock_sh(&[], script)
            .stderr(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        assert_eq!(stdout(&out), "out\n");
        assert_eq!(out.status.code(), Some(125));
        // stdout to a full device: the command's own status stays, and airlock says why.
        let out = w
            .airlock_sh(&[], "echo out; echo err >&2; exit 3")
            .stdout(std::fs::File::create("/dev/full").unwrap())
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("stdout could not be written (ENOSPC"),
            "{}",
            stderr(&out)
        );
        assert!(stderr(&out).contains("err"), "{}", stderr(&out));
    }
);

both_modes!(
    a_slow_reader_does_not_hold_off_the_time_limit,
    |w: &World| {
        // 5 s: long enough that a loaded machine's look still finds the shell before the limit.
        let profile = w.profile("[limits]\ntimeout = \"5s\"\n");
        let marker = format!("{}.{}", 6000 + std::process::id() % 1000, w.mode as u8 + 1);
        // Far more output than a pipe holds, then a long sleep; nobody reads airlock's stdout yet.
        let airlock = w
            .airlock_sh(
                &["--profile-file", &profile],
                &format!("head -c 2000000 /dev/zero; sleep {marker}"),
            )
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // The sandboxed shell, blocked writing output nobody reads.
        let alive = || {
            process_running(&format!(
                "^sh -c head -c 2000000 /dev/zero; sleep {marker}$"
            ))
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
        let mut seen = false;
        loop {
            let now_alive = alive();
            seen |= now_alive;
            if seen && !now_alive {
                break;
            }
            assert!(std::time::Instant::now() < deadline, "the time limit did not end the sandbox while its output was not read (started: {seen})");
            std::thread::sleep(std::time::Duration::from_millis(50));
        }
        // Now read: everything airlock kept arrives, and it reports the time limit.
        let out = airlock.wait_with_output().unwrap();
        assert_eq!(out.status.code(), Some(124), "{}", stderr(&out));
    }
);

/// `cd ~ && airlock run -- true` as a user: the home is the workspace, and airlock's state
/// directory is in it by default. The refusal names the home, not the state directory.
#[test]
fn a_home_as_the_workspace_is_refused_as_a_home() {
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    let out = w
        .command(airlock_bin())
        .env("HOME", &w.workspace)
        .args(["run", "--", "true"])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    let said = stderr(&out);
    let workspace = w.workspace.display().to_string();
    assert!(
        said.contains(&format!("workspace {workspace}: is a home directory")),
        "{said}"
    );
    assert!(said.contains(".local/state/airlock"), "{said}");
    assert!(
        said.contains("run airlock in a project directory"),
        "{said}"
    );
    assert!(!said.contains("--state-dir"), "{said}");
}

both_modes!(a_state_dir_owned_by_someone_else_is_refused, |w: &World| {
    if support::skip_unless_root("needs root to make a directory owned by someone else") {
        return;
    }
    let foreign = w.base.join("foreign-state");
    std::fs::create_dir(&foreign).unwrap();
    // Owned by the other identity: root for the unprivileged run, the test uid for root's.
    let other = if w.mode == Mode::Root { TEST_UID } else { 0 };
    std::os::unix::fs::chown(&foreign, Some(other), Some(other)).unwrap();
    let out = w
        .command(airlock_bin())
        .args([
            "--state-dir",
            foreign.to_str().unwrap(),
            "run",
            "-w",
            w.workspace.to_str().unwrap(),
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("not a directory owned by"),
        "{}",
        stderr(&out)
    );
});

both_modes!(cpu_time_limit_ends_a_busy_loop, |w: &World| {
    let profile = w.profile("[limits]\ncpu = \"1s\"\ntimeout = \"60s\"\n");
    let out = w.inside_with(&["--profile-file", &profile], "while :; do :; done");
    // RLIMIT_CPU: SIGXCPU at the limit (128+24), which is the run's limit as well.
    assert_eq!(out.status.code(), Some(152), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("used up its CPU time limit (1s)"),
        "{}",
        stderr(&out)
    );
});

both_modes!(
    cpu_time_limit_holds_over_all_the_sandboxs_processes,
    |w: &World| {
        // Four processes of 1.5 s of CPU each: none passes a 2 s RLIMIT_CPU by itself, together
        // they use 6 s. pid 1 adds them up and kills them all once they pass 2 s.
        let profile = w.profile("[limits]\ncpu = \"2s\"\ntimeout = \"60s\"\n");
        let script = "for i in 1 2 3 4; do python3 -c 'import time\nwhile time.process_time() < 1.5: pass' & done; wait; echo DONE";
        let outside = w.outside(script);
        assert!(stdout(&outside).contains("DONE"), "{}", stderr(&outside));
        let inside = w.inside_with(&["--profile-file", &profile], script);
        assert_eq!(inside.status.code(), Some(152), "{}", stderr(&inside));
        assert!(!ran(&inside).contains("DONE"));
        assert!(
            stderr(&inside).contains("used up its CPU time limit (2s)"),
            "{}",
            stderr(&inside)
        );
        let log = w
            .airlock()
            .args(["log", "--action", "run.result"])
            .output()
            .unwrap();
        assert!(
            stdout(&log).contains("CPU time limit reached"),
            "{}",
            stdout(&log)
        );
    }
);

#[test]
fn cpu_time_of_processes_the_kernel_reaped_counts_too() {
    // Root, where the run has a cgroup that counts CPU time (v1 cpuacct or v2): children of a
    // process that ignores SIGCHLD are reaped by the kernel, and their time reaches no parent's
    // count; the cgroup's count has it. (Without a cgroup pid 1 cannot see them: documented.)
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    let counted = std::path::Path::new("/sys/fs/cgroup/cpuacct/cpuacct.usage").exists()
        || std::fs::read_to_string("/sys/fs/cgroup/cgroup.subtree_control")
            .is_ok_and(|c| c.contains("memory") && c.contains("pids"));
    if !counted {
        eprintln!("skipped: no cgroup here counts a run's CPU time");
        return;
    }
    let profile = w.profile("[limits]\ncpu = \"2s\"\ntimeout = \"60s\"\n");
    // 30 workers of 0.2 s each, one after the other, none ever waited for: 6 s in all. Each
    // starts once the kernel has reaped the one before (kill(pid, 0) then fails), so however
    // busy the host, the parent cannot reach DONE before all 6 s are spent.
    let script = "python3 -c '
import os, signal, time
signal.signal(signal.SIGCHLD, signal.SIG_IGN)
for i in range(30):
    pid = os.fork()
    if pid == 0:
        t = time.process_time()
        while time.process_time() - t < 0.2: pass
        os._exit(0)
    while True:
        try:
            os.kill(pid, 0)
            time.sleep(0.01)
        except ProcessLookupError:
            break
print(\"DONE\")'";
    let outside = w.outside(script);
    assert!(stdout(&outside).contains("DONE"), "{}", stderr(&outside));
    let inside = w.inside_with(&["--profile-file", &profile], script);
    assert_eq!(inside.status.code(), Some(152), "{}", stderr(&inside));
    assert!(!ran(&inside).contains("DONE"));
}

both_modes!(tmp_size_limit_holds, |w: &World| {
    let profile = w.profile("[limits]\ntmp_size = \"1MiB\"\n");
    let out = w.inside_with(
        &["--profile-file", &profile],
        "head -c 2000000 /dev/zero > /tmp/big 2>/dev/null; echo tmp=$?; head -c 2000000 /dev/zero > ~/big 2>/dev/null; echo home=$?",
    );
    let said = ran(&out);
    assert!(
        said.contains("tmp=1") && said.contains("home=1"),
        "{said}{}",
        stderr(&out)
    );
    // Outside the same write works, so the limit is what stopped it.
    let outside = w.outside(&format!(
        "head -c 2000000 /dev/zero > {}/big && echo ok",
        w.outside.display()
    ));
    assert!(stdout(&outside).contains("ok"));
});

both_modes!(
    usage_errors_are_125_and_dash_dash_is_optional,
    |w: &World| {
        let run = |args: &[&str]| {
            w.airlock()
                .args(["run", "-w", w.workspace.to_str().unwrap()])
                .args(args)
                .output()
                .unwrap()
        };
        let out = run(&["--no-such-flag", "true"]);
        assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
        let out = run(&["sh", "-c", "exit 2"]);
        assert_eq!(
            out.status.code(),
            Some(2),
            "the command's own 2, not a usage error: {}",
            stderr(&out)
        );
        let out = w.command(airlock_bin()).arg("--help").output().unwrap();
        assert_eq!(out.status.code(), Some(0));
        // Manual pages, from the same text as --help: one per command.
        let pages = w.base.join("man1");
        std::fs::create_dir(&pages).unwrap();
        w.give(&pages);
        let out = w
            .command(airlock_bin())
            .arg("man")
            .arg(&pages)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        let run_page = std::fs::read_to_string(pages.join("airlock-run.1")).unwrap();
        assert!(run_page.contains(".TH airlock-run"), "{run_page}");
        assert!(run_page.contains("second interrupt"), "{run_page}");
        assert!(pages.join("airlock-session-new.1").exists());
    }
);

both_modes!(
    hides_and_read_only_paths_inside_the_workspace,
    |w: &World| {
        w.write(&w.workspace.join(".env"), "API_KEY=canary");
        let git = w.workspace.join(".git");
        std::fs::create_dir_all(&git).unwrap();
        w.give(&git);
        w.write(&git.join("config"), "[core]");
        let profile = w.profile(&format!(
            "[filesystem]\nread_only = [\"{ws}/.git\"]\nhide = [\"{ws}/.env\"]\n",
            ws = w.workspace.display()
        ));
        let out = w.inside_with(
        &["--profile-file", &profile],
        "cat .env; echo; echo hook > .git/config 2>/dev/null || echo git-read-only; echo fine > other && cat other",
    );
        let said = ran(&out);
        assert!(!said.contains("canary"), "hidden file readable: {said}");
        assert!(said.contains("git-read-only"), "{said}{}", stderr(&out));
        assert!(
            said.contains("fine"),
            "the rest of the workspace stays writable: {said}"
        );
    }
);

both_modes!(bad_network_rules_are_named_where_they_stand, |w: &World| {
    let profile = w.profile("[network]\nallow = [\"https://github.com\"]\n");
    let out = w.inside_with(&["--profile-file", &profile], "echo ran");
    assert_eq!(out.status.code(), Some(125));
    assert!(stderr(&out).contains(":2:10:"), "{}", stderr(&out));
    assert!(stderr(&out).contains("not a URL"), "{}", stderr(&out));
});

// `airlock run --json`: the answer the API gives to POST /v1/runs, for scripts.
both_modes!(run_json_answers_as_the_api_does, |w: &World| {
    let out = w
        .airlock_sh(
            &["--json"],
            "echo out; echo err >&2; echo made > made.txt; exit 3",
        )
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(3), "{}", stderr(&out));
    let answer: serde_json::Value =
        serde_json::from_slice(&out.stdout).unwrap_or_else(|e| panic!("{e}: {}", stdout(&out)));
    assert_eq!(answer["exit_code"], 3, "{answer}");
    assert_eq!(answer["stdout"], "out\n", "{answer}");
    assert_eq!(answer["stderr"], "err\n", "{answer}");
    assert_eq!(answer["limit"], serde_json::Value::Null, "{answer}");
    assert_eq!(answer["kept"], false, "{answer}");
    assert!(answer["duration_ms"].is_u64(), "{answer}");
    assert!(
        !w.workspace.join("made.txt").exists(),
        "a throwaway run wrote the host"
    );
    // Refused: no answer on stdout, the reason on stderr, airlock's own status.
    let refused = w
        .airlock()
        .args([
            "run",
            "--json",
            "--keep",
            "--session",
            "nosuch",
            "--",
            "true",
        ])
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(125), "{}", stderr(&refused));
    let failure: serde_json::Value = serde_json::from_slice(&refused.stdout).unwrap();
    assert_eq!(failure["code"], "not_for_sessions", "{failure}");
    assert_eq!(failure["exit_status"], 125, "{failure}");
    assert!(
        stderr(&refused).contains("keep is for throwaway runs"),
        "{}",
        stderr(&refused)
    );
});

/// A profile with a 30 s time limit and `marks`, a directory outside the workspace the command
/// may write: its files tell the test where the command is.
fn marked(w: &World) -> (String, std::path::PathBuf) {
    let marks = w.base.join("marks");
    std::fs::create_dir_all(&marks).unwrap();
    w.give(&marks);
    // As root the sandbox is a uid of its own, which must be able to write here too.
    std::fs::set_permissions(&marks, std::os::unix::fs::PermissionsExt::from_mode(0o777)).unwrap();
    // In a directory of its own: a profile's directory and what lies under it take no bind.
    let policy = w.base.join("policy");
    std::fs::create_dir_all(&policy).unwrap();
    w.give(&policy);
    let profile = policy.join("marked.toml");
    w.write(
        &profile,
        &format!(
            "[limits]\ntimeout = \"30s\"\n[filesystem]\nread_write = [\"{}\"]\n",
            marks.display()
        ),
    );
    (profile.to_str().unwrap().to_string(), marks)
}

fn wait_for(path: &std::path::Path) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
    while !path.exists() {
        assert!(std::time::Instant::now() < deadline, "{path:?} never came");
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
}

// `run --json` passes its signals on to the command as a plain run does, and the run ends with
// its answer (not a killed CLI, an orphaned worker, an intent without a result).
both_modes!(run_json_passes_signals_on, |w: &World| {
    let (profile, marks) = marked(w);
    let script = format!(
        "trap 'echo got-term; exit 7' TERM; touch {}/ready; while :; do sleep 0.1; done",
        marks.display()
    );
    let child = w
        .airlock_sh(&["--json", "--profile-file", &profile], &script)
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    wait_for(&marks.join("ready"));
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(child.id() as i32),
        nix::sys::signal::Signal::SIGTERM,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["stdout"], "got-term\n", "{answer}");
});

// `run --json` hands its stdin to the command as it comes: a command that reads one line ends
// while the writer still holds the pipe open (stdin is never gathered first).
both_modes!(run_json_streams_stdin, |w: &World| {
    let mut child = w
        .airlock_sh(&["--json"], "head -n 1")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    std::io::Write::write_all(&mut stdin, b"first\n").unwrap();
    // Ends while stdin is still open; gathered first, it would wait for an end that never comes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while child.try_wait().unwrap().is_none() {
        if std::time::Instant::now() > deadline {
            let _ = child.kill();
            panic!("run --json waited for stdin to end before it ran the command");
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    let out = child.wait_with_output().unwrap();
    drop(stdin);
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["stdout"], "first\n", "{answer}");
});

/// A child of `parent` that is stopped (state T), once there is one.
fn stopped_child_of(parent: u32) -> u32 {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        for entry in std::fs::read_dir("/proc").unwrap().flatten() {
            let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
                continue;
            };
            let stat = std::fs::read_to_string(entry.path().join("stat")).unwrap_or_default();
            let fields: Vec<&str> = stat
                .rsplit_once(") ")
                .map_or(Vec::new(), |(_, rest)| rest.split(' ').collect());
            if fields.len() > 1 && fields[0] == "T" && fields[1] == parent.to_string() {
                return pid;
            }
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no stopped child of {parent}"
        );
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

// `run --json` gets its worker's answer before the worker has reaped what is left of the
// sandbox, and waits for that before it exits: the worker would die with it (its parent-death
// signal) and leave the run's cgroups behind (found by review). The test build's pause
// 'answered' stops the worker right after its answer.
both_modes!(run_json_waits_for_its_worker_to_reap, |w: &World| {
    let child = w
        .airlock_with_test_hooks()
        .env("AIRLOCK_TEST_PAUSE", "answered")
        .args(["run", "--json", "--workspace"])
        .arg(&w.workspace)
        .args(["--", "sh", "-c", "echo hi"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let worker = stopped_child_of(child.id());
    let memory = format!("/sys/fs/cgroup/memory/airlock/run-{worker}");
    let own_cgroups = matches!(w.mode, Mode::Root) && std::path::Path::new(&memory).exists();
    std::thread::sleep(std::time::Duration::from_millis(300));
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", child.id())).unwrap_or_default();
    assert!(
        stat.rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z')),
        "run --json ended while its worker had yet to reap its sandbox"
    );
    nix::sys::signal::kill(
        nix::unistd::Pid::from_raw(worker as i32),
        nix::sys::signal::Signal::SIGCONT,
    )
    .unwrap();
    let out = child.wait_with_output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
    let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(answer["stdout"], "hi\n", "{answer}");
    if own_cgroups {
        for hierarchy in ["memory", "pids", "freezer"] {
            let dir = format!("/sys/fs/cgroup/{hierarchy}/airlock/run-{worker}");
            assert!(!std::path::Path::new(&dir).exists(), "{dir} is left");
        }
    }
});
