//! `airlock policy replay` on recorded runs: real runs of a profile reach a server on the host's
//! loopback by name (`--resolve NAME=127.0.0.1`), and their audit records are replayed against
//! drafts: a narrowed one names the run it would break (exit 1), the same one breaks nothing
//! (exit 0), a widened one lists what it allows that no run used.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::Output;

use serde_json::Value;
use support::servers::{python_server, Server};
use support::{ran, stderr, stdout, Mode, World};

fn server() -> Server {
    let script = r#"
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = b"hello from host"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;
    python_server(script, &[])
}

/// A run of profile `ci` that fetches `http://NAME:PORT/` for each name, and asks DNS for
/// denied.test (refused: no connection follows).
fn run_fetching(w: &World, port: u16, names: &[&str]) {
    let fetches: String = names
        .iter()
        .map(|name| {
            format!("print(urllib.request.urlopen('http://{name}:{port}/', timeout=5).read())\n")
        })
        .collect();
    let script = format!(
        "import socket, urllib.request\n{fetches}try: socket.getaddrinfo('denied.test', 443)\nexcept OSError as e: print('refused', e)\n"
    );
    let mut airlock = w.airlock();
    airlock.args(["run", "-p", "ci"]);
    for name in ["allowed.test", "second.test", "denied.test"] {
        airlock.args(["--resolve", &format!("{name}=127.0.0.1")]);
    }
    let out = airlock
        .arg("--workspace")
        .arg(&w.workspace)
        .args(["--", "/usr/bin/python3", "-c", &script])
        .output()
        .unwrap();
    let said = ran(&out);
    assert_eq!(
        said.matches("hello from host").count(),
        names.len(),
        "{said}{}",
        stderr(&out)
    );
}

/// A draft profile `ci` outside the workspace, with these allow entries.
fn draft(w: &World, dir: &str, allow: &[String]) -> String {
    let dir = w.base.join(dir);
    std::fs::create_dir_all(&dir).unwrap();
    w.give(&dir);
    let path = dir.join("ci.toml");
    let list: Vec<String> = allow.iter().map(|a| format!("{a:?}")).collect();
    w.write(
        &path,
        &format!("[network]\nallow = [{}]\n", list.join(", ")),
    );
    path.to_str().unwrap().to_string()
}

fn replay(w: &World, args: &[&str]) -> Output {
    w.airlock()
        .args(["policy", "replay"])
        .args(args)
        .output()
        .unwrap()
}

fn json(out: &Output) -> Value {
    serde_json::from_slice(&out.stdout)
        .unwrap_or_else(|e| panic!("{e}: {}{}", stdout(out), stderr(out)))
}

both_modes!(
    replay_names_the_runs_a_narrowed_profile_would_break,
    |w: &World| {
        let http = server();
        let port = http.port;
        let allowed = format!("allowed.test:{port}");
        let second = format!("second.test:{port}");
        w.named_profile(
            "ci",
            &format!("[network]\nallow = [\"{allowed}\", \"{second}\"]\n"),
        );
        run_fetching(w, port, &["allowed.test"]);
        run_fetching(w, port, &["allowed.test", "second.test"]);

        // Narrowed: second.test is gone. The second run needed it.
        let narrowed = draft(w, "narrowed", std::slice::from_ref(&allowed));
        let out = replay(w, &[&narrowed]);
        let text = stdout(&out);
        assert_eq!(out.status.code(), Some(1), "{text}{}", stderr(&out));
        assert!(text.contains("2 runs of profile ci"), "{text}");
        assert!(text.contains("WOULD REFUSE"), "{text}");
        assert!(
            text.contains(&format!("  {second}  1 attempt in 1 run")),
            "{text}"
        );
        assert!(text.contains("runs it would break:"), "{text}");
        assert!(text.contains(&format!("loses {second}")), "{text}");
        let out = replay(w, &[&narrowed, "--json"]);
        assert_eq!(out.status.code(), Some(1));
        let found = json(&out);
        let refused = found["would_refuse"].as_array().unwrap();
        assert_eq!(refused.len(), 1, "{found:#}");
        assert_eq!(refused[0]["host"], "second.test");
        assert_eq!(refused[0]["port"], port);
        assert_eq!(refused[0]["then"], format!("allow {second}"));
        assert_eq!(refused[0]["now"], "no allow entry names it");
        let runs = refused[0]["runs"].as_array().unwrap();
        assert_eq!(runs.len(), 1, "only the second run needed it: {found:#}");
        assert!(
            runs[0]["argv"][2].as_str().unwrap().contains("second.test"),
            "{found:#}"
        );
        assert!(runs[0]["intent_seq"].as_u64().is_some());
        assert_eq!(found["runs_broken"].as_array().unwrap().len(), 1);

        // The profile as it is: nothing breaks, nothing unused.
        let same = draft(w, "same", &[allowed.clone(), second.clone()]);
        let out = replay(w, &[&same, "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
        let found = json(&out);
        assert_eq!(found["runs"], 2);
        assert_eq!(found["never_used"], serde_json::json!([]));
        assert_eq!(found["would_now_allow"], serde_json::json!([]));
        let out = replay(w, &[&same]);
        assert!(stdout(&out).contains("nothing the runs needed would be refused"));

        // Widened: what it adds is listed as never used; a name refused at DNS then, now allowed,
        // is shown without a port (no connection was tried for it).
        let widened = draft(
            w,
            "widened",
            &[
                allowed.clone(),
                second.clone(),
                "registry.test".into(),
                "denied.test".into(),
            ],
        );
        let out = replay(w, &[&widened, "--json"]);
        assert_eq!(out.status.code(), Some(0), "{}", stdout(&out));
        let found = json(&out);
        assert_eq!(found["never_used"], serde_json::json!(["registry.test"]));
        let opened = &found["would_now_allow"][0];
        assert_eq!(opened["host"], "denied.test");
        assert_eq!(opened["port"], Value::Null);
        assert_eq!(opened["stage"], "dns");
        assert!(
            opened["note"].as_str().unwrap().contains("port"),
            "{found:#}"
        );
        let text = stdout(&replay(w, &[&widened]));
        assert!(text.contains("allows, never used"), "{text}");
        assert!(text.contains("allow registry.test"), "{text}");
        assert!(text.contains("denied.test (DNS)"), "{text}");

        // The same verdict from an exported copy of the log, read by another state directory.
        let exported = w.base.join("runs.jsonl");
        let out = w.airlock().args(["log", "--json"]).output().unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        w.write(&exported, &stdout(&out));
        let elsewhere = w.base.join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        w.give(&elsewhere);
        let out = w
            .command(support::airlock_bin())
            .arg("--state-dir")
            .arg(&elsewhere)
            .args(["policy", "replay", &narrowed, "--log"])
            .arg(&exported)
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(1), "{}", stderr(&out));
        assert!(stdout(&out).contains(&format!("loses {second}")));

        // Other runs' profile: nothing of theirs is replayed.
        let out = replay(w, &[&narrowed, "--runs-of", "other"]);
        assert_eq!(out.status.code(), Some(0));
        assert!(
            stderr(&out).contains("nothing was replayed"),
            "{}",
            stderr(&out)
        );
    }
);

both_modes!(bad_input_is_exit_2_with_the_file_and_line, |w: &World| {
    let bad = w.base.join("bad");
    std::fs::create_dir_all(&bad).unwrap();
    w.give(&bad);
    let profile = bad.join("ci.toml");
    w.write(&profile, "[network]\nallow = [\"https://x.test\"]\n");
    let out = replay(w, &[profile.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("{}:2:", profile.display())),
        "{}",
        stderr(&out)
    );

    let good = draft(w, "good", &["allowed.test".into()]);
    let log = w.base.join("log.jsonl");
    w.write(
        &log,
        "{\"seq\":1,\"action\":\"run.intent\",\"profile\":\"ci\"}\nnot a record\n",
    );
    let out = replay(w, &[&good, "--log", log.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(
        stderr(&out).contains(&format!("{}:2: not an audit record", log.display())),
        "{}",
        stderr(&out)
    );
    let out = replay(w, &[&good, "--since", "last tuesday"]);
    assert_eq!(out.status.code(), Some(2), "{}", stderr(&out));
    assert!(stderr(&out).contains("--since"), "{}", stderr(&out));
});
