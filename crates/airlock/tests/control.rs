//! The kill switch: kill, pause, resume, disable, from another process than the one that started
//! the sandbox. Root and unprivileged user both (the user has no freezer cgroup here: pause falls
//! back to stopping every process), unless noted.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Child, Output, Stdio};
use std::time::{Duration, Instant};

use support::{process_running, ran, stderr, stdout, wait_for, Mode, World};

fn airlock(w: &World, args: &[&str]) -> Output {
    w.airlock().args(args).output().unwrap()
}

fn new_session(w: &World, name: &str) -> String {
    let out = w
        .airlock()
        .args(["session", "new", "--name", name, "--workspace"])
        .arg(&w.workspace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    stdout(&out).trim().to_string()
}

/// A run that is killed if the test fails before it ends, so that no sandbox outlives the test.
struct Run(Child);

impl Drop for Run {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

impl std::ops::Deref for Run {
    type Target = Child;
    fn deref(&self) -> &Child {
        &self.0
    }
}

impl std::ops::DerefMut for Run {
    fn deref_mut(&mut self) -> &mut Child {
        &mut self.0
    }
}

/// Start `script` in session `name` and wait until it printed its first line.
fn start(w: &World, name: &str, script: &str) -> (Run, BufReader<std::process::ChildStdout>) {
    let mut child = w
        .airlock()
        .args(["run", "--session", name, "--", "sh", "-c", script])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let child = Run(child);
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    assert!(!line.is_empty(), "the run printed nothing");
    (child, out)
}

fn wait_for_exit(child: &mut Child) -> std::process::ExitStatus {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(Instant::now() < deadline, "the run did not end");
        std::thread::sleep(Duration::from_millis(20));
    }
}

both_modes!(
    kill_leaves_nothing_running_and_keeps_the_layer,
    |w: &World| {
        // Unique to this test and mode: both modes run at once in this process.
        let marker = format!("4242.{}{}", std::process::id(), w.mode as u8);
        new_session(w, "victim");
        let script = format!(
        "echo before > evidence.txt
         for i in $(seq 100); do sleep {marker} & done
         setsid sh -c 'exec sleep {marker}' </dev/null >/dev/null 2>&1 &
         python3 -c 'import socket,time; a,b=socket.socketpair(); a.send(b\"x\"); time.sleep(1000)' &
         echo started; wait"
    );
        let (mut child, _out) = start(w, "victim", &script);
        assert!(
            process_running(&format!("sleep {marker}")),
            "the sleeps are not running?"
        );
        let out = airlock(w, &["kill", "victim", "--reason", "test", "--json"]);
        assert!(out.status.success(), "{}\n{}", stderr(&out), stdout(&out));
        let report: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        assert_eq!(report["action"], "kill");
        assert_eq!(report["failed"], 0);
        assert_eq!(report["sandboxes"].as_array().unwrap().len(), 1, "{report}");
        let status = wait_for_exit(&mut child);
        assert_eq!(status.code(), Some(137));
        assert!(
            !process_running(&format!("sleep {marker}")),
            "a process survived the kill"
        );
        // The killed run says who killed it, and its result record too.
        let result = stdout(&airlock(w, &["log", "--action", "run.result", "--json"]));
        assert!(
            result.contains("\"killed_by\":\"kill switch, uid") && result.contains(": test"),
            "{result}"
        );
        // The layer is kept for review.
        let diff = airlock(w, &["diff", "victim", "--name-status"]);
        assert_eq!(stdout(&diff), "A\tevidence.txt\n");
        let log = stdout(&airlock(w, &["log", "--action", "kill"]));
        assert!(
            log.contains("kill.intent") && log.contains("kill.result"),
            "{log}"
        );
    }
);

both_modes!(
    pause_stops_a_counting_loop_and_resume_continues_it,
    |w: &World| {
        new_session(w, "counter");
        let (mut child, out) = start(
            w,
            "counter",
            "i=0; while :; do i=$((i+1)); echo $i; sleep 0.05; done",
        );
        let lines = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(1));
        let counted = lines.clone();
        std::thread::spawn(move || {
            for _ in out.lines() {
                counted.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            }
        });
        let count = || lines.load(std::sync::atomic::Ordering::SeqCst);
        std::thread::sleep(Duration::from_millis(300));
        let out = airlock(w, &["pause", "counter"]);
        assert!(out.status.success(), "{}\n{}", stderr(&out), stdout(&out));
        // Lines written just before the freeze may still be on their way: the count is taken
        // once it has held for half a second (ten of the loop's turns), then must hold on.
        let mut paused_at = count();
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            std::thread::sleep(Duration::from_millis(500));
            let now = count();
            if now == paused_at {
                break;
            }
            assert!(Instant::now() < deadline, "the loop went on while paused");
            paused_at = now;
        }
        std::thread::sleep(Duration::from_millis(700));
        assert_eq!(count(), paused_at, "the loop went on while paused");
        let status = stdout(&airlock(w, &["status"]));
        assert!(status.contains("paused"), "{status}");
        let sessions = stdout(&airlock(w, &["sessions"]));
        assert!(sessions.contains("paused"), "{sessions}");
        let out = airlock(w, &["resume", "counter"]);
        assert!(out.status.success(), "{}", stderr(&out));
        wait_for(
            "the loop going on after resume",
            Duration::from_secs(20),
            || count() > paused_at + 3,
        );
        // A paused sandbox can be killed too.
        assert!(airlock(w, &["pause", "counter"]).status.success());
        assert!(airlock(w, &["kill", "counter"]).status.success());
        assert_eq!(wait_for_exit(&mut child).code(), Some(137));
    }
);

both_modes!(
    disable_refuses_new_runs_everywhere_and_kills_running_ones,
    |w: &World| {
        new_session(w, "busy");
        let (mut child, _out) = start(w, "busy", "echo started; sleep 1000");
        let out = airlock(
            w,
            &["disable", "--reason", "incident 42: agent misbehaving"],
        );
        assert!(out.status.success(), "{}\n{}", stderr(&out), stdout(&out));
        assert_eq!(wait_for_exit(&mut child).code(), Some(137));
        // Refused from any process, with the reason.
        let refused = airlock(
            w,
            &[
                "run",
                "--workspace",
                w.workspace.to_str().unwrap(),
                "--",
                "true",
            ],
        );
        assert_eq!(refused.status.code(), Some(125));
        assert!(
            stderr(&refused).contains("incident 42"),
            "{}",
            stderr(&refused)
        );
        let refused = w
            .airlock()
            .args(["session", "new", "--workspace"])
            .arg(&w.workspace)
            .output()
            .unwrap();
        assert_eq!(refused.status.code(), Some(125));
        assert!(stdout(&airlock(w, &["status"])).contains("DISABLED for everything"));
        let enabled = airlock(w, &["enable", "--json"]);
        assert!(enabled.status.success());
        let said: serde_json::Value = serde_json::from_slice(&enabled.stdout).unwrap();
        assert_eq!(said["was_on"], true, "{said}");
        assert!(said["still_disabled"].is_null(), "{said}");
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
        // A profile's switch stops that profile only.
        let profile = w.profile("[limits]\nprocesses = 100\n");
        assert!(
            airlock(w, &["disable", "--profile", "profile", "--reason", "audit"])
                .status
                .success()
        );
        let refused = airlock(
            w,
            &[
                "run",
                "--profile-file",
                &profile,
                "--workspace",
                w.workspace.to_str().unwrap(),
                "--",
                "true",
            ],
        );
        assert_eq!(refused.status.code(), Some(125), "{}", stderr(&refused));
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
        assert!(airlock(w, &["enable", "--profile", "profile"])
            .status
            .success());
        ran(&airlock(
            w,
            &[
                "run",
                "--profile-file",
                &profile,
                "--workspace",
                w.workspace.to_str().unwrap(),
                "--",
                "true",
            ],
        ));
    }
);

#[test]
fn another_user_cannot_kill_or_pause_a_users_sandbox() {
    let Some(w) = World::new(Mode::User) else {
        return;
    };
    if support::skip_unless_root(
        "needs root to act as a second user against the first one's sandbox",
    ) {
        return;
    }
    new_session(&w, "mine");
    let (mut child, _out) = start(&w, "mine", "echo started; sleep 1000");
    let intruder = |args: &[&str]| {
        std::process::Command::new("setpriv")
            .args(["--reuid=4243", "--regid=4243", "--clear-groups", "--"])
            .arg(support::airlock_bin())
            .arg("--state-dir")
            .arg(&w.state)
            .args(args)
            .env_clear()
            .env("HOME", "/nonexistent")
            .output()
            .unwrap()
    };
    for args in [
        &["kill", "--all"][..],
        &["pause", "--all"],
        &["kill", "mine"],
    ] {
        let out = intruder(args);
        assert_ne!(out.status.code(), Some(0), "{args:?}: {}", stdout(&out));
    }
    // Its own state dir has nothing of the first user's.
    let own = std::process::Command::new("setpriv")
        .args(["--reuid=4243", "--regid=4243", "--clear-groups", "--"])
        .arg(support::airlock_bin())
        .args([
            "--state-dir",
            "/tmp/airlock-intruder-state",
            "kill",
            "--all",
        ])
        .env_clear()
        .output()
        .unwrap();
    assert!(
        stderr(&own).contains("no sandbox is running"),
        "{}",
        stderr(&own)
    );
    let _ = std::fs::remove_dir_all("/tmp/airlock-intruder-state");
    assert!(
        child.try_wait().unwrap().is_none(),
        "the intruder stopped the sandbox"
    );
    assert!(airlock(&w, &["kill", "mine"]).status.success());
    assert_eq!(wait_for_exit(&mut child).code(), Some(137));
}

both_modes!(
    kill_stops_the_runs_waiting_for_the_session_too,
    |w: &World| {
        new_session(w, "queued");
        let (mut first, _out) = start(w, "queued", "echo started; sleep 60");
        // A second run of the session waits for the first (runs take turns).
        let mut second = w
            .airlock()
            .args([
                "run",
                "--session",
                "queued",
                "--",
                "sh",
                "-c",
                "echo SECOND-RAN",
            ])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut err = BufReader::new(second.stderr.take().unwrap());
        let mut line = String::new();
        err.read_line(&mut line).unwrap();
        assert!(line.contains("waiting"), "{line}");
        let out = airlock(w, &["kill", "queued"]);
        assert!(out.status.success(), "{}", stderr(&out));
        assert_eq!(wait_for_exit(&mut first).code(), Some(137));
        let status = wait_for_exit(&mut second);
        let mut rest = String::new();
        std::io::Read::read_to_string(&mut err, &mut rest).unwrap();
        let mut said = String::new();
        std::io::Read::read_to_string(second.stdout.as_mut().unwrap(), &mut said).unwrap();
        assert!(
            !said.contains("SECOND-RAN"),
            "the queued run started: {said}"
        );
        assert_eq!(status.code(), Some(125), "{rest}");
        assert!(rest.contains("was killed"), "{rest}");
        // A run asked for after the kill starts as usual.
        let out = airlock(w, &["run", "--session", "queued", "--", "echo", "after"]);
        assert_eq!(stdout(&out), "after\n", "{}", stderr(&out));
        // Kill names what exists: a typo is an error, not "nothing to do".
        let out = airlock(w, &["kill", "no-such-session"]);
        assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("no session no-such-session"),
            "{}",
            stderr(&out)
        );
    }
);

both_modes!(a_throwaway_run_is_killed_by_its_pid, |w: &World| {
    // A run without a session has no name to kill it by: the pid 'airlock status' shows does.
    let mut child = w
        .airlock()
        .args(["run", "--workspace"])
        .arg(&w.workspace)
        .args(["--", "sh", "-c", "echo started; sleep 60"])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut out = BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    out.read_line(&mut line).unwrap();
    let child = &mut Run(child);
    let status: serde_json::Value =
        serde_json::from_str(&stdout(&airlock(w, &["status", "--json"]))).unwrap();
    let pid = status["running"][0]["sandbox"]["pid"].as_i64().unwrap();
    let out = airlock(w, &["kill", "--pid", &pid.to_string()]);
    assert!(out.status.success(), "{}{}", stdout(&out), stderr(&out));
    assert_eq!(wait_for_exit(child).code(), Some(137));
    // A pid that is no sandbox's is a mistake, not "nothing to do".
    let out = airlock(w, &["kill", "--pid", "999999999"]);
    assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
});

both_modes!(
    a_run_whose_supervisor_was_killed_is_closed_by_the_next,
    |w: &World| {
        // `kill -9` of 'airlock run' itself: no Drop, no result record. Its sandbox dies with it,
        // but its intent stays open and its session holds half of what it wrote, until the next
        // process that reads the registry closes it.
        new_session(w, "cut-short");
        let marker = format!("4343.{}{}", std::process::id(), w.mode as u8);
        let script = format!("echo half > half.txt; echo started; sleep {marker}");
        let (mut child, _out) = start(w, "cut-short", &script);
        child.kill().unwrap();
        child.wait().unwrap();
        let deadline = Instant::now() + Duration::from_secs(10);
        while process_running(&format!("sleep {marker}")) {
            assert!(
                Instant::now() < deadline,
                "the sandbox outlived its supervisor"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        let log = |action: &str| -> Vec<serde_json::Value> {
            let out = airlock(w, &["log", "--action", action, "--json"]);
            stdout(&out)
                .lines()
                .map(|line| serde_json::from_str(line).unwrap())
                .collect()
        };
        let intent = log("run.intent").pop().unwrap();
        assert!(
            log("run.result").is_empty(),
            "the killed run wrote a result?"
        );
        assert!(log("run.abandoned").is_empty());
        // The next reader of the registry ('airlock sessions' here; any run, 'status', 'serve')
        // closes it, once.
        let listed = stdout(&airlock(w, &["sessions", "--json"]));
        let sessions: serde_json::Value = serde_json::from_str(&listed).unwrap();
        assert_eq!(sessions[0]["interrupted_runs"], 1, "{listed}");
        assert_eq!(sessions[0]["runs"], 0, "{listed}");
        let abandoned = log("run.abandoned");
        assert_eq!(abandoned.len(), 1, "{abandoned:?}");
        assert_eq!(abandoned[0]["run_id"], intent["run_id"]);
        assert!(abandoned[0]["why"]
            .as_str()
            .unwrap()
            .contains("supervisor ended"));
        let table = stdout(&airlock(w, &["sessions"]));
        assert!(table.contains("0 (+1 interrupted)"), "{table}");
        let after = airlock(
            w,
            &["run", "--session", "cut-short", "--", "cat", "half.txt"],
        );
        assert_eq!(ran(&after), "half\n");
        assert_eq!(log("run.abandoned").len(), 1, "closed twice");
    }
);

/// A reader in another pid namespace (a container sharing the state directory, say) sees no
/// process of the host's: it must not take a live run for one whose supervisor is gone, close
/// it, and leave it out of the kill switch's reach. (Before, it did: pids and /proc decided.)
#[test]
fn a_reader_in_another_pid_namespace_closes_no_live_run() {
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    new_session(&w, "alive");
    let (mut child, _out) = start(&w, "alive", "echo started; sleep 300");
    let status = w
        .command("unshare")
        .args(["--pid", "--fork", "--mount-proc", "--"])
        .arg(support::airlock_bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(["status", "--json"])
        .output()
        .unwrap();
    assert!(status.status.success(), "{}", stderr(&status));
    let log = stdout(&airlock(
        &w,
        &["log", "--action", "run.abandoned", "--json"],
    ));
    assert!(log.trim().is_empty(), "a live run was closed: {log}");
    let out = airlock(&w, &["kill", "alive", "--reason", "test"]);
    assert!(out.status.success(), "{}", stderr(&out));
    assert_eq!(wait_for_exit(&mut child).code(), Some(137));
}

/// `airlock` in a pid namespace of its own (as in a container), against `w`'s state directory.
fn in_own_pid_namespace(w: &World, args: &[&str]) -> std::process::Command {
    let mut cmd = w.command("unshare");
    cmd.args(["--pid", "--fork", "--kill-child", "--mount-proc", "--"])
        .arg(support::airlock_bin())
        .arg("--state-dir")
        .arg(&w.state)
        .args(args);
    cmd
}

/// A frozen run whose supervisor was killed, first read from another pid namespace (which sees
/// the cgroup frozen but not its processes): left for a reader that can end it, not forgotten
/// frozen for good.
#[test]
fn a_frozen_orphan_is_left_for_a_reader_that_can_end_it() {
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    new_session(&w, "frozen");
    let marker = format!("4345.{}", std::process::id());
    let (mut child, _out) = start(&w, "frozen", &format!("echo started; sleep {marker}"));
    assert!(airlock(&w, &["pause", "frozen"]).status.success());
    child.kill().unwrap();
    child.wait().unwrap();
    let elsewhere = in_own_pid_namespace(&w, &["status"]).output().unwrap();
    assert!(elsewhere.status.success(), "{}", stderr(&elsewhere));
    let log = stdout(&airlock(
        &w,
        &["log", "--action", "run.abandoned", "--json"],
    ));
    assert!(log.trim().is_empty(), "closed while still frozen: {log}");
    assert!(process_running(&format!("sleep {marker}")));
    // A reader in the host's namespace ends it and closes it.
    assert!(airlock(&w, &["status"]).status.success());
    let deadline = Instant::now() + Duration::from_secs(10);
    while process_running(&format!("sleep {marker}")) {
        assert!(Instant::now() < deadline, "the frozen orphan was not ended");
        std::thread::sleep(Duration::from_millis(20));
    }
    let log = stdout(&airlock(
        &w,
        &["log", "--action", "run.abandoned", "--json"],
    ));
    assert_eq!(log.lines().count(), 1, "{log}");
}

/// Two airlock processes in pid namespaces of their own are both pid 1: the second run must not
/// take the first one's place in the registry (which would hide the first from the kill switch).
#[test]
fn runs_of_the_same_pid_in_two_namespaces_do_not_share_an_entry() {
    let Some(w) = World::new(Mode::Root) else {
        return;
    };
    let marker = format!("4346.{}", std::process::id());
    let workspace = w.workspace.to_str().unwrap().to_string();
    let mut first = in_own_pid_namespace(&w, &["run", "--workspace", &workspace, "--", "sh", "-c"])
        .arg(format!("echo started; sleep {marker}"))
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut line = String::new();
    BufReader::new(first.stdout.take().unwrap())
        .read_line(&mut line)
        .unwrap();
    let first = Run(first);
    let second = in_own_pid_namespace(&w, &["run", "--workspace", &workspace, "--", "true"])
        .output()
        .unwrap();
    assert_eq!(second.status.code(), Some(125), "{}", stderr(&second));
    assert!(
        stderr(&second).contains("pid namespaces share this state directory"),
        "{}",
        stderr(&second)
    );
    // Ended with its namespace (the kill switch on the host does not reach a run registered
    // with another namespace's pids: a limit docs/kill-switch.md states).
    drop(first);
    let deadline = Instant::now() + Duration::from_secs(10);
    while process_running(&format!("sleep {marker}")) {
        assert!(
            Instant::now() < deadline,
            "the first run outlived its namespace"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

both_modes!(
    a_paused_run_whose_supervisor_was_killed_is_not_left_frozen,
    |w: &World| {
        // Frozen, its processes outlive the parent-death signal (a v1 freezer's do): the run that
        // closes it must end them, or they stay frozen for good with nothing that lists them.
        new_session(w, "frozen");
        let marker = format!("4344.{}{}", std::process::id(), w.mode as u8);
        let (mut child, _out) = start(w, "frozen", &format!("echo started; sleep {marker}"));
        let out = airlock(w, &["pause", "frozen"]);
        assert!(out.status.success(), "{}", stderr(&out));
        child.kill().unwrap();
        child.wait().unwrap();
        let out = airlock(w, &["status"]);
        assert!(out.status.success(), "{}", stderr(&out));
        let deadline = Instant::now() + Duration::from_secs(10);
        while process_running(&format!("sleep {marker}")) {
            assert!(
                Instant::now() < deadline,
                "the paused sandbox outlived its supervisor"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }
);

/// Wait until process `pid` is stopped (state T), as the launch's test pause leaves it.
fn wait_stopped(pid: u32) {
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let state = stat
            .rsplit(") ")
            .next()
            .and_then(|rest| rest.chars().next());
        if state == Some('T') {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "the run never reached its pause: {stat}"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
}

fn a_disable_during_the_launch_stops_the_command(pause_at: &str) {
    // The run stops itself at `pause_at` (before or after it is listed for the kill switch);
    // 'airlock disable' meanwhile must keep its command from ever running: either the switch
    // finds the listed run and kills it, or the run finds the switch before its go-ahead.
    for mode in [Mode::Root, Mode::User] {
        let Some(w) = World::new(mode) else {
            continue;
        };
        let child = w
            .airlock_with_test_hooks()
            .env("AIRLOCK_TEST_PAUSE", pause_at)
            .args(["run", "--workspace"])
            .arg(&w.workspace)
            .args(["--", "sh", "-c", "echo COMMAND-RAN"])
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let mut run = Run(child);
        // Under setpriv the airlock process is setpriv's exec: the same pid.
        wait_stopped(run.id());
        let disabled = airlock(&w, &["disable", "--reason", "incident"]);
        assert!(disabled.status.success(), "{}", stderr(&disabled));
        nix::sys::signal::kill(
            nix::unistd::Pid::from_raw(run.id() as i32),
            nix::sys::signal::Signal::SIGCONT,
        )
        .unwrap();
        let out = std::mem::replace(
            &mut run.0,
            std::process::Command::new("true").spawn().unwrap(),
        )
        .wait_with_output()
        .unwrap();
        assert!(
            !stdout(&out).contains("COMMAND-RAN"),
            "the command ran after disable ({pause_at})"
        );
        assert_eq!(out.status.code(), Some(125), "{}", stderr(&out));
        let enabled = airlock(&w, &["enable"]);
        assert!(enabled.status.success(), "{}", stderr(&enabled));
    }
}

#[test]
fn a_disable_before_the_run_is_listed_is_seen_by_the_run() {
    a_disable_during_the_launch_stops_the_command("reserved");
}

#[test]
fn a_disable_after_the_run_is_listed_kills_it() {
    a_disable_during_the_launch_stops_the_command("listed");
}
