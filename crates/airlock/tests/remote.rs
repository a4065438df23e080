//! The CLI as a client of `airlock serve` (AIRLOCK_URL, AIRLOCK_TOKEN): the same commands,
//! answered by the server's core, with the token's limits.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::Write;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use support::servers::KilledOnDrop;
use support::*;

/// A server on a unix socket in the world's state directory, and an agent token for the
/// workspace.
struct Served {
    _server: KilledOnDrop,
    url: String,
    token: String,
}

fn serve(w: &World) -> Served {
    let made = w
        .airlock()
        .args(["token", "create", "--role", "agent", "--workspace"])
        .arg(&w.workspace)
        .output()
        .unwrap();
    assert!(made.status.success(), "{}", stderr(&made));
    let token = stdout(&made).lines().last().unwrap().to_string();
    let socket = w.state.join("airlock.sock");
    let server = w
        .airlock()
        .arg("serve")
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::os::unix::net::UnixStream::connect(&socket).is_err() {
        assert!(
            Instant::now() < deadline,
            "the server did not listen on {socket:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    Served {
        _server: KilledOnDrop(server),
        url: format!("unix:{}", socket.display()),
        token,
    }
}

impl Served {
    fn cli(&self, w: &World, args: &[&str]) -> Command {
        let mut cmd = w.command(airlock_bin());
        cmd.env("AIRLOCK_URL", &self.url)
            .env("AIRLOCK_TOKEN", &self.token)
            .args(args);
        cmd
    }
}

both_modes!(
    a_run_through_the_server_streams_its_output_and_exits_with_its_status,
    |w: &World| {
        let served = serve(w);
        let out = served
            .cli(
                w,
                &[
                    "run",
                    "--",
                    "sh",
                    "-c",
                    "echo out; echo err >&2; id -un; exit 7",
                ],
            )
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(7), "{}", stderr(&out));
        assert_eq!(stdout(&out), "out\nagent\n");
        assert!(stderr(&out).contains("err"), "{}", stderr(&out));
        let mut cat = served
            .cli(w, &["run", "--", "cat"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .unwrap();
        cat.stdin
            .take()
            .unwrap()
            .write_all(b"given on stdin\n")
            .unwrap();
        let out = cat.wait_with_output().unwrap();
        assert_eq!(stdout(&out), "given on stdin\n", "{}", stderr(&out));
        // --json: the server's answer as it is, the command's status as airlock's.
        let out = served
            .cli(w, &["run", "--json", "--", "sh", "-c", "echo hi; exit 4"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(4), "{}", stderr(&out));
        let answer: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(answer["stdout"], "hi\n", "{answer}");
        assert_eq!(answer["exit_code"], 4, "{answer}");
    }
);

both_modes!(
    a_session_through_the_server_is_the_agents_and_a_person_applies_it,
    |w: &World| {
        let served = serve(w);
        let made = served.cli(w, &["session", "new"]).output().unwrap();
        assert!(made.status.success(), "{}", stderr(&made));
        let session: serde_json::Value = serde_json::from_slice(&made.stdout).unwrap();
        let id = session["id"].as_str().unwrap().to_string();
        // Listed as here: the table people read, and with --json the array scripts read.
        let listed = served.cli(w, &["sessions"]).output().unwrap();
        assert!(listed.status.success(), "{}", stderr(&listed));
        let table = stdout(&listed);
        assert!(table.starts_with("ID "), "{table}");
        assert!(table.lines().any(|l| l.starts_with(&id)), "{table}");
        let listed = served.cli(w, &["sessions", "--json"]).output().unwrap();
        let array: serde_json::Value = serde_json::from_slice(&listed.stdout).unwrap();
        assert_eq!(array[0]["id"], id.as_str(), "{array}");
        let out = served
            .cli(
                w,
                &[
                    "run",
                    "--session",
                    &id,
                    "--",
                    "sh",
                    "-c",
                    "echo made > new.txt",
                ],
            )
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(
            !w.workspace.join("new.txt").exists(),
            "a run wrote the host workspace"
        );
        let diff = served.cli(w, &["diff", &id]).output().unwrap();
        assert!(stdout(&diff).contains("+made"), "{}", stdout(&diff));
        // The patch's digest is said apart from it, as the local diff says it.
        assert!(
            stderr(&diff).contains("airlock: digest sha256:"),
            "{}",
            stderr(&diff)
        );
        // The agent's token cannot approve its own change; the person at the machine can.
        let apply = served.cli(w, &["apply", &id]).output().unwrap();
        assert_eq!(apply.status.code(), Some(125));
        assert!(
            stderr(&apply).contains("role_forbidden"),
            "{}",
            stderr(&apply)
        );
        assert!(!w.workspace.join("new.txt").exists());
        let apply = w.airlock().args(["apply", &id]).output().unwrap();
        assert!(apply.status.success(), "{}", stderr(&apply));
        assert_eq!(
            std::fs::read_to_string(w.workspace.join("new.txt")).unwrap(),
            "made\n"
        );
        // Its records name the token: the local log finds them by its id.
        let id_of_token = served.token.split('_').nth(1).unwrap();
        let log = w
            .airlock()
            .args([
                "log",
                "--json",
                "--action",
                "run.intent",
                "--token",
                id_of_token,
            ])
            .output()
            .unwrap();
        assert_eq!(stdout(&log).lines().count(), 1, "{}", stdout(&log));
    }
);

both_modes!(
    without_a_token_the_cli_refuses_rather_than_running_here,
    |w: &World| {
        let out = w
            .command(airlock_bin())
            .env("AIRLOCK_URL", "unix:/nonexistent.sock")
            .args(["run", "--", "touch", "ran-here"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125));
        assert!(stderr(&out).contains("AIRLOCK_TOKEN"), "{}", stderr(&out));
        let out = w
            .command(airlock_bin())
            .env("AIRLOCK_URL", "unix:/nonexistent.sock")
            .env("AIRLOCK_TOKEN", "airlock_x_y")
            .args(["run", "--", "touch", "ran-here"])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(125));
        assert!(stderr(&out).contains("cannot reach"), "{}", stderr(&out));
        assert!(!w.workspace.join("ran-here").exists());
    }
);

/// The lines airlock itself writes on stderr (the command's own are the rest).
fn airlock_lines(out: &std::process::Output) -> Vec<String> {
    stderr(out)
        .lines()
        .filter(|l| l.starts_with("airlock: "))
        .map(str::to_string)
        .collect()
}

both_modes!(
    a_run_ends_and_is_refused_in_the_same_words_here_and_through_the_server,
    |w: &World| {
        w.named_profile("timed", "[limits]\ntimeout = \"1s\"\n");
        let served = serve(w);
        let made = w
            .airlock()
            .args(["token", "create", "--role", "agent", "--profile", "timed"])
            .arg("--workspace")
            .arg(&w.workspace)
            .output()
            .unwrap();
        assert!(made.status.success(), "{}", stderr(&made));
        let timed_token = stdout(&made).lines().last().unwrap().to_string();

        // The time limit ends both, and airlock says so in the same words.
        let here = w
            .airlock()
            .args(["run", "-p", "timed", "--", "sleep", "30"])
            .output()
            .unwrap();
        let there = served
            .cli(w, &["run", "--", "sleep", "30"])
            .env("AIRLOCK_TOKEN", &timed_token)
            .output()
            .unwrap();
        assert_eq!(here.status.code(), Some(124), "{}", stderr(&here));
        assert_eq!(there.status.code(), Some(124), "{}", stderr(&there));
        assert!(
            stderr(&here).contains("passed its time limit"),
            "{}",
            stderr(&here)
        );
        assert_eq!(airlock_lines(&here), airlock_lines(&there));

        // keep is for throwaway runs: core refuses it with a session, whichever door.
        let here = w
            .airlock()
            .args(["run", "--keep", "--session", "nosuch", "--", "true"])
            .output()
            .unwrap();
        let there = served
            .cli(w, &["run", "--keep", "--session", "nosuch", "--", "true"])
            .output()
            .unwrap();
        for out in [&here, &there] {
            assert_ne!(out.status.code(), Some(0));
            assert!(
                stderr(out).contains("keep is for throwaway runs"),
                "{}",
                stderr(out)
            );
        }
    }
);
