//! Credentials the sandbox can use but never see (`[[secret]]`): inside, the variable holds a
//! placeholder; the gate terminates TLS for the secret's hosts only, with the run's own CA, and
//! puts the real value on the wire there. A local HTTPS server with a test CA of its own records
//! what it receives (and never sends a secret back), reached through `--resolve NAME=127.0.0.1`;
//! airlock is told to trust that CA for upstreams through SSL_CERT_FILE, as a corporate CA would
//! be. Real curl, Python requests, Node's fetch and git. Root and unprivileged user both.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::io::{BufRead, Read};
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use support::servers::{https_python_server, KilledOnDrop, Server};
use support::{ran, stderr, stdout, Mode, World};

/// The real value, as a GitHub token looks (the placeholder must look the same).
const SECRET: &str = "ghp_R3alS3cretValue0123456789abcdefABCD";
/// The second secret's real value (placeholder mode).
const PASS: &str = "p4ss-W0rd-of-the-deploy-bot-2026xyz";
const API: &str = "api.secret.test";
const OTHER: &str = "other.secret.test";
const BAD: &str = "bad.secret.test";
/// An allowed host no secret is for: relayed untouched, TLS and all.
const PLAIN: &str = "plain.secret.test";
/// The third secret's value (for OTHER only).
const OTHER_VALUE: &str = "other-value-9f8e7d6c5b4a";

/// A test CA and a server certificate it signed for API and OTHER; a self-signed one for BAD.
struct Pki {
    dir: PathBuf,
}

impl Pki {
    fn new(w: &World) -> Pki {
        let dir = support::pki::ca_and_server(w, "api.secret.test", &[API, OTHER, PLAIN]);
        let bad_san = format!("subjectAltName=DNS:{BAD}");
        support::pki::openssl(
            &dir,
            &[
                &["req", "-x509", "-days", "2", "-subj", "/CN=bad.secret.test"][..],
                &support::pki::EC,
                &[
                    "-keyout",
                    "bad-key.pem",
                    "-out",
                    "bad-cert.pem",
                    "-addext",
                    &bad_san,
                ],
            ]
            .concat(),
        );
        support::pki::give_all(w, &dir);
        Pki { dir }
    }

    fn ca(&self) -> PathBuf {
        self.dir.join("ca.pem")
    }
}

/// An HTTPS server (HTTP/1.1, kept alive) that writes each request's host, path and headers as
/// a JSON line to its log, and answers "ok" (never what it received).
struct Echo {
    server: Server,
    log: PathBuf,
}

impl Echo {
    fn start(w: &World, pki: &Pki, cert: &str, key: &str, name: &str) -> Echo {
        let script = r#"
import http.server, json, ssl, sys
log = open(sys.argv[3], "a")
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self):
        n = int(self.headers.get("Content-Length", 0) or 0)
        if n: self.rfile.read(n)
        log.write(json.dumps({"path": self.path, "headers": self.headers.items()}) + "\n"); log.flush()
        body = b"ok\n"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = answer
    def log_message(self, *a): pass
"#;
        let log = w.outside.join(format!("{name}.jsonl"));
        let (cert, key) = (pki.dir.join(cert), pki.dir.join(key));
        let server = https_python_server(script, &cert, &key, &log);
        Echo { server, log }
    }

    fn port(&self) -> u16 {
        self.server.port
    }

    /// Every request received so far, one JSON line each.
    fn received(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
}

/// Everything a test needs: the PKI, the good server (API and OTHER), the bad one, the profile.
struct Setup {
    pki: Pki,
    good: Echo,
    bad: Echo,
    profile: String,
    secret_file: PathBuf,
}

impl Setup {
    fn new(w: &World) -> Setup {
        let pki = Pki::new(w);
        let good = Echo::start(w, &pki, "cert.pem", "key.pem", "good");
        let bad = Echo::start(w, &pki, "bad-cert.pem", "bad-key.pem", "bad");
        let secret_file = w.outside.join("pass-secret");
        w.write(&secret_file, &format!("{PASS}\n"));
        let (port, bad_port) = (good.port(), bad.port());
        let profile = w.profile(&format!(
            r#"
[network]
allow = ["{API}:{port}", "{OTHER}:{port}", "{PLAIN}:{port}", "{BAD}:{bad_port}"]

# Node reserves ~10 GiB of address space for WebAssembly (its fetch parses HTTP with it), which
# the memory limit's fallback without a cgroup (RLIMIT_AS, as an unprivileged user here) counts.
[limits]
memory = "64GiB"

[[secret]]
name = "API_TOKEN"
from = {{ env = "TEST_BOT_TOKEN" }}
hosts = ["{API}"]
inject = {{ header = "Authorization", format = "Bearer {{}}" }}

[[secret]]
name = "PASS_TOKEN"
from = {{ file = "{file}" }}
hosts = ["{API}", "{BAD}"]
# X-Pass is this API's credential header: named, or the placeholder goes on as it is.
inject = {{ placeholder = ["X-Pass"] }}

[[secret]]
name = "OTHER_TOKEN"
from = {{ env = "TEST_OTHER_TOKEN" }}
hosts = ["{OTHER}"]
inject = "placeholder"
"#,
            file = secret_file.display()
        ));
        Setup {
            pki,
            good,
            bad,
            profile,
            secret_file,
        }
    }

    /// `airlock run` (or with `extra` before `--`) of `sh -c script`, with the secret's source in
    /// airlock's own environment and the test CA trusted for upstreams.
    fn airlock(&self, w: &World, extra: &[&str], script: &str) -> Command {
        let mut cmd = w.airlock();
        cmd.env("TEST_BOT_TOKEN", SECRET)
            .env("TEST_OTHER_TOKEN", OTHER_VALUE)
            .env("SSL_CERT_FILE", self.pki.ca())
            .arg("run");
        // A session's runs take its profile.
        if !extra.contains(&"--session") {
            cmd.args(["--profile-file", &self.profile]);
        }
        for name in [API, OTHER, PLAIN, BAD] {
            cmd.args(["--resolve", &format!("{name}=127.0.0.1")]);
        }
        cmd.arg("--workspace")
            .arg(&w.workspace)
            .args(extra)
            .args(["--", "sh", "-c", script]);
        cmd
    }

    fn run(&self, w: &World, extra: &[&str], script: &str) -> Output {
        self.airlock(w, extra, script).output().unwrap()
    }

    /// A new session with the profile; its id. Its secrets' sources are read here.
    fn session(&self, w: &World) -> String {
        let out = w
            .airlock()
            .env("TEST_BOT_TOKEN", SECRET)
            .env("TEST_OTHER_TOKEN", OTHER_VALUE)
            .args([
                "session",
                "new",
                "--profile-file",
                &self.profile,
                "--workspace",
            ])
            .arg(&w.workspace)
            .output()
            .unwrap();
        assert!(out.status.success(), "{}", stderr(&out));
        stdout(&out).trim().to_string()
    }
}

/// Every file under `dir`, as bytes, with its path: for grepping a state directory.
fn every_file(dir: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        let Ok(entries) = std::fs::read_dir(&dir) else {
            continue;
        };
        for entry in entries.flatten() {
            let path = entry.path();
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            if kind.is_dir() {
                stack.push(path);
            } else if kind.is_file() {
                if let Ok(bytes) = std::fs::read(&path) {
                    files.push((path, bytes));
                }
            }
        }
    }
    files
}

fn contains(haystack: &[u8], needle: &str) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle.as_bytes())
}

/// The placeholder a run printed as `NAME=VALUE`.
fn printed(out: &str, name: &str) -> String {
    out.lines()
        .find_map(|line| line.strip_prefix(&format!("{name}=")))
        .unwrap_or_else(|| panic!("{name} not printed: {out}"))
        .to_string()
}

both_modes!(
    the_secret_reaches_its_host_and_only_its_host,
    |w: &World| {
        let s = Setup::new(w);
        let port = s.good.port();
        // Without airlock a token in the environment is the token: anything may print or send it.
        let bare = w.outside(&format!("TOKEN={SECRET} sh -c 'echo $TOKEN'"));
        assert!(stdout(&bare).contains(SECRET));

        let api = format!("https://{API}:{port}");
        let other = format!("https://{OTHER}:{port}");
        let plain = format!("https://{PLAIN}:{port}");
        // The plain host's certificate is the test CA's, which the sandbox does not trust.
        std::fs::copy(s.pki.ca(), w.workspace.join("test-ca.pem")).unwrap();
        let script = format!(
            r#"echo API_TOKEN=$API_TOKEN; echo PASS_TOKEN=$PASS_TOKEN
curl -sS -m 10 -H "Authorization: Bearer $API_TOKEN" -H "X-Pass: $PASS_TOKEN" {api}/curl-proxy
curl -sS -m 10 --noproxy '*' -H "Authorization: Bearer $API_TOKEN" {api}/curl-direct
curl -sS -m 10 -H "Authorization: Bearer $API_TOKEN" -H "X-Pass: $PASS_TOKEN" {other}/curl-other
curl -sS -m 10 --cacert test-ca.pem -H "Authorization: Bearer $API_TOKEN" {plain}/curl-plain
/usr/bin/python3 -c 'import requests; print("requests", requests.get("{api}/python", timeout=10).text.strip())'
node -e 'fetch("{api}/node").then(r => r.text()).then(t => console.log("node", t.trim()), e => {{ console.log("node failed", e.cause || e); process.exit(1) }})'
git ls-remote {api}/repo.git >/dev/null 2>&1; echo git-done
"#
        );
        let out = s.run(w, &[], &script);
        let said = ran(&out);
        assert!(out.status.success(), "{said}\n{}", stderr(&out));
        // Inside: placeholders of the real values' shape, never the values.
        let placeholder = printed(&said, "API_TOKEN");
        let pass_placeholder = printed(&said, "PASS_TOKEN");
        assert!(!said.contains(SECRET) && !said.contains(PASS), "{said}");
        assert!(placeholder.starts_with("ghp_"), "{placeholder}");
        assert_eq!(placeholder.len(), SECRET.len());
        assert_eq!(pass_placeholder.len(), PASS.len());
        for client in ["requests ok", "node ok", "git-done"] {
            assert!(said.contains(client), "{client}: {said}\n{}", stderr(&out));
        }
        // On the wire: the value for API, through the proxy and without it, from every client.
        let received = s.good.received();
        let requests: Vec<&str> = received.lines().collect();
        let to = |path: &str| {
            requests
                .iter()
                .filter(|line| line.contains(&format!("\"path\": \"{path}")))
                .copied()
                .collect::<Vec<_>>()
        };
        for path in [
            "/curl-proxy",
            "/curl-direct",
            "/python",
            "/node",
            "/repo.git/info/refs",
        ] {
            let seen = to(path);
            assert!(!seen.is_empty(), "{path} not received: {received}");
            for line in seen {
                assert!(line.contains(&format!("Bearer {SECRET}")), "{path}: {line}");
                assert!(!line.contains(&placeholder), "{path}: {line}");
            }
        }
        // Placeholder mode: replaced where the client put it, for its host.
        assert!(
            to("/curl-proxy")[0].contains(&format!("\"x-pass\", \"{PASS}\"")),
            "{received}"
        );
        // Another allowed host gets the placeholders as they were, and no value.
        let other_seen = to("/curl-other");
        assert_eq!(other_seen.len(), 1, "{received}");
        assert!(
            !other_seen[0].contains(SECRET) && !other_seen[0].contains(PASS),
            "{received}"
        );
        assert!(other_seen[0].contains(&placeholder), "{received}");
        assert!(other_seen[0].contains(&pass_placeholder), "{received}");
        // A host no secret is for: relayed as it was, so the placeholder went as it was.
        let plain_seen = to("/curl-plain");
        assert_eq!(plain_seen.len(), 1, "{received}");
        assert!(plain_seen[0].contains(&placeholder), "{received}");
        // The audit log names what was injected and where a placeholder went unreplaced; no file of
        // the state directory (sessions, audit log, tokens…) holds a value.
        let log = stdout(&w.airlock().args(["log", "--json"]).output().unwrap());
        assert!(
            log.contains(&format!("secret API_TOKEN injected for host {API}")),
            "{log}"
        );
        assert!(
            log.contains(&format!("secret PASS_TOKEN injected for host {API}")),
            "{log}"
        );
        assert!(
            log.contains(&format!(
                "placeholder of secret API_TOKEN sent to host {OTHER}: not replaced"
            )),
            "{log}"
        );
        for (path, bytes) in every_file(&w.state) {
            assert!(
                !contains(&bytes, SECRET),
                "{} holds the secret",
                path.display()
            );
            for value in [PASS, OTHER_VALUE] {
                assert!(
                    !contains(&bytes, value),
                    "{} holds a secret",
                    path.display()
                );
            }
        }
        let _ = &s.secret_file;
    }
);

both_modes!(
    an_upstream_whose_certificate_does_not_verify_is_refused,
    |w: &World| {
        let s = Setup::new(w);
        // Without airlock, a client that does not verify reaches it.
        let bare = w.outside(&format!(
            "curl -sSk -m 10 --resolve {BAD}:{p}:127.0.0.1 https://{BAD}:{p}/bare",
            p = s.bad.port()
        ));
        assert!(stdout(&bare).contains("ok"), "{}", stderr(&bare));
        let before = s.bad.received().lines().count();
        let out = s.run(
        w,
        &[],
        &format!(
            "curl -sS -m 10 -o /dev/null -w '%{{http_code}}\\n' -H \"X-Pass: $PASS_TOKEN\" https://{BAD}:{}/inside",
            s.bad.port()
        ),
    );
        let said = ran(&out);
        assert!(said.contains("502"), "{said}\n{}", stderr(&out));
        // Nothing reached the server that could not prove who it is.
        assert_eq!(
            s.bad.received().lines().count(),
            before,
            "{}",
            s.bad.received()
        );
        let log = stdout(&w.airlock().args(["log", "--json"]).output().unwrap());
        assert!(log.contains("\"kind\":\"tls\""), "{log}");
    }
);

both_modes!(
    a_placeholder_of_one_session_is_only_a_placeholder_in_another,
    |w: &World| {
        let s = Setup::new(w);
        let port = s.good.port();
        let (a, b) = (s.session(w), s.session(w));
        let print = "echo PASS_TOKEN=$PASS_TOKEN";
        let in_a = ran(&s.run(w, &["--session", &a], print));
        let again_a = ran(&s.run(w, &["--session", &a], print));
        let in_b = ran(&s.run(w, &["--session", &b], print));
        let (pa, pb) = (printed(&in_a, "PASS_TOKEN"), printed(&in_b, "PASS_TOKEN"));
        assert_eq!(
            pa,
            printed(&again_a, "PASS_TOKEN"),
            "a session keeps its placeholder"
        );
        assert_ne!(pa, pb, "each session has its own");
        // A's placeholder sent from B, to the secret's own host, stays a placeholder.
        let out = s.run(
            w,
            &["--session", &b],
            &format!("curl -sS -m 10 -H 'X-Pass: {pa}' https://{API}:{port}/from-b"),
        );
        ran(&out);
        let received = s.good.received();
        let line = received
            .lines()
            .find(|line| line.contains("/from-b"))
            .unwrap_or_else(|| panic!("not received: {received}"));
        assert!(line.contains(&pa) && !line.contains(PASS), "{line}");
    }
);

both_modes!(
    a_request_for_another_host_on_a_kept_alive_connection_is_refused,
    |w: &World| {
        let s = Setup::new(w);
        let port = s.good.port();
        // Without airlock, one TLS connection to the server may carry requests for both names.
        let script = format!(
            r#"
import http.client, socket, ssl, sys
ctx = ssl.create_default_context(cafile=sys.argv[1])
c = http.client.HTTPSConnection("{API}", {port})
c.sock = ctx.wrap_socket(socket.create_connection((sys.argv[2], {port}), timeout=10), server_hostname="{API}")
def exchange(host, path):
    c.request("GET", path, headers={{"Host": host}})
    r = c.getresponse(); r.read()
    return "HTTP/1.1 %d" % r.status
print("first", exchange("{API}", "/kept-1"))
try: print("second", exchange("{OTHER}", "/kept-2"))
except Exception as e: print("second", type(e).__name__)
"#
        );
        let bare = w
            .command("/usr/bin/python3")
            .args(["-c", &script])
            .arg(s.pki.ca())
            .arg("127.0.0.1")
            .output()
            .unwrap();
        let bare_said = stdout(&bare);
        assert!(
            bare_said.contains("second HTTP/1.1 200"),
            "{bare_said}{}",
            stderr(&bare)
        );
        let quoted = script.replace('\'', "'\\''");
        let out = s.run(
            w,
            &[],
            &format!("/usr/bin/python3 -c '{quoted}' \"$SSL_CERT_FILE\" {API}"),
        );
        let said = ran(&out);
        assert!(
            said.contains("first HTTP/1.1 200"),
            "{said}\n{}",
            stderr(&out)
        );
        assert!(said.contains("second HTTP/1.1 421"), "{said}");
        let received = s.good.received();
        assert_eq!(
            received.matches("/kept-2").count(),
            1,
            "only the bare run's: {received}"
        );
    }
);

/// The bytes of every readable mapping of process `pid` (as root, from outside).
fn memory_of(pid: u32) -> Vec<u8> {
    use std::io::{Seek, SeekFrom};
    let Ok(maps) = std::fs::read_to_string(format!("/proc/{pid}/maps")) else {
        return Vec::new();
    };
    let Ok(mut mem) = std::fs::File::open(format!("/proc/{pid}/mem")) else {
        return Vec::new();
    };
    let mut all = Vec::new();
    for line in maps.lines() {
        let mut fields = line.split_whitespace();
        let (Some(range), Some(perms)) = (fields.next(), fields.next()) else {
            continue;
        };
        if !perms.starts_with('r') || line.ends_with("[vvar]") || line.ends_with("[vsyscall]") {
            continue;
        }
        let Some((start, end)) = range.split_once('-') else {
            continue;
        };
        let (start, end) = (
            u64::from_str_radix(start, 16).unwrap(),
            u64::from_str_radix(end, 16).unwrap(),
        );
        let mut chunk = vec![0u8; (end - start) as usize];
        if mem.seek(SeekFrom::Start(start)).is_ok() && mem.read_exact(&mut chunk).is_ok() {
            all.extend_from_slice(&chunk);
        }
    }
    all
}

/// Is `pid` the first process of its pid namespace (a sandbox's init)?
fn is_pid_one(pid: u32) -> bool {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .unwrap_or_default()
        .lines()
        .find_map(|line| line.strip_prefix("NSpid:"))
        .is_some_and(|ids| ids.split_whitespace().last() == Some("1"))
}

/// Every process descended from `ancestor`, not counting it.
fn descendants(ancestor: u32) -> Vec<u32> {
    let parent_of = |pid: u32| -> Option<u32> {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
        let after_name = &stat[stat.rfind(')')? + 2..];
        after_name.split_whitespace().nth(1)?.parse().ok()
    };
    let pids: Vec<u32> = std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse().ok())
        .collect();
    pids.into_iter()
        .filter(|&pid| {
            let mut at = pid;
            while let Some(parent) = parent_of(at) {
                if parent == ancestor {
                    return true;
                }
                if parent <= 1 {
                    return false;
                }
                at = parent;
            }
            false
        })
        .collect()
}

both_modes!(no_process_inside_holds_the_value, |w: &World| {
    if support::skip_unless_root("reading another process's memory needs root") {
        return;
    }
    let s = Setup::new(w);
    let port = s.good.port();
    // The scanner finds a value where one is: a process given it in its environment, outside.
    let mut bare = KilledOnDrop(
        Command::new("sleep")
            .arg("30")
            .env("TOKEN", SECRET)
            .spawn()
            .unwrap(),
    );
    let bare_pid = bare.0.id();
    // spawn returns once the exec has begun (the vfork is released), which may be before the
    // kernel has laid out the new stack and its environment: wait for it.
    let environ_of_bare = || std::fs::read(format!("/proc/{bare_pid}/environ")).unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(5);
    while !contains(&environ_of_bare(), SECRET) && std::time::Instant::now() < deadline {
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    assert!(contains(&environ_of_bare(), SECRET));
    assert!(contains(&memory_of(bare_pid), SECRET));
    let _ = bare.0.kill();
    // Inside: a program that used the secret (the server got it) and is still alive.
    let script = format!(
        "/usr/bin/python3 -c 'import requests, sys, time; r = requests.get(\"https://{API}:{port}/held\", headers={{\"X-Pass\": \"'$PASS_TOKEN'\"}}, timeout=10); print(\"got\", r.text.strip(), flush=True); time.sleep(30)' & sleep 30; wait"
    );
    let mut child = s
        .airlock(w, &[], &script)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    lines.read_line(&mut line).unwrap();
    let child = KilledOnDrop(child);
    assert!(line.contains("got ok"), "{line}");
    assert!(s.good.received().contains(PASS), "the server got the value");
    let inside = descendants(child.0.id());
    assert!(inside.len() >= 3, "sandbox processes: {inside:?}");
    let mut saw_placeholder = false;
    let mut saw_init = false;
    for pid in inside {
        let memory = memory_of(pid);
        let environ = std::fs::read(format!("/proc/{pid}/environ")).unwrap_or_default();
        // The sandbox's pid 1 is airlock's own init, forked from the supervisor before any
        // secret was read: it holds no value read from a file or a command. It does hold a copy
        // of airlock's own environment, where an `env` source's value is (it is not dumpable:
        // only root outside reads it, as it reads the supervisor). Every other process is the
        // command's, and holds no value at all.
        let values: &[&str] = if is_pid_one(pid) {
            saw_init = true;
            &[PASS]
        } else {
            &[SECRET, PASS]
        };
        for value in values {
            assert!(!contains(&memory, value), "process {pid} holds the value");
            assert!(
                !contains(&environ, value),
                "process {pid}'s environment holds it"
            );
        }
        saw_placeholder |= contains(&environ, "ghp_");
    }
    assert!(saw_placeholder, "the scan saw the sandbox's environments");
    assert!(saw_init, "the scan saw the sandbox's init");
});
