//! The injector never hands a secret's value back to the sandbox (issue 33): a secret's host
//! that reflects what it received — `TRACE` echoed as Apache does, a redirect that keeps the
//! query, a request header echoed in a response header — would otherwise show the sandbox the
//! value the gate put on the wire. A local HTTPS server that does all three, reached through
//! `--resolve`; each harm shown without airlock first. Root and unprivileged user both.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::process::{Command, Output};

use support::servers::{https_python_server, Server};
use support::{ran, stderr, Mode, World};

const API: &str = "api.reflect.test";
/// The header secret's value.
const TOKEN: &str = "ghp_R3flectT0kenValue0123456789abcdefAB";
/// The query secret's value: characters that are percent-encoded on the wire.
const KEY: &str = "key/Value+9f8e7d6c5b4a";
const KEY_ENCODED: &str = "key%2FValue%2B9f8e7d6c5b4a";
/// The placeholder-mode secret's value.
const PASS: &str = "p4ss-W0rd-reflect-2026xyz";

/// A server that reflects: `TRACE` answered with the request (as Apache's `TraceEnable on`),
/// `/redirect…` a 301 to `/dir/` keeping the query, and on every answer the request's
/// `X-Request-Id`, `Origin` and `Authorization` echoed as response headers. Each request's
/// method, path and headers are logged as a JSON line.
struct Reflector {
    server: Server,
    log: PathBuf,
    ca: PathBuf,
}

impl Reflector {
    fn start(w: &World) -> Reflector {
        let dir = support::pki::ca_and_server(w, API, &[API]);
        support::pki::give_all(w, &dir);
        let script = r#"
import http.server, json, ssl, sys
log = open(sys.argv[3], "a")
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def answer(self):
        n = int(self.headers.get("Content-Length", 0) or 0)
        if n: self.rfile.read(n)
        log.write(json.dumps({"method": self.command, "path": self.path, "headers": self.headers.items()}) + "\n"); log.flush()
        if self.command == "TRACE":
            body = (self.requestline + "\r\n" + str(self.headers)).encode()
            self.send_response(200); self.send_header("Content-Type", "message/http")
        elif self.path.startswith("/redirect"):
            body = b"moved\n"
            self.send_response(301); self.send_header("Location", "/dir/?" + self.path.partition("?")[2])
        else:
            body = b"ok\n"
            self.send_response(200)
        for name in ("X-Request-Id", "Origin", "Authorization"):
            if self.headers.get(name): self.send_header("Echo-" + name, self.headers[name])
        self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    do_GET = do_POST = do_TRACE = do_TRACK = answer
    def log_message(self, *a): pass
"#;
        let log = w.outside.join("reflect.jsonl");
        let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
        let server = https_python_server(script, &cert, &key, &log);
        Reflector {
            server,
            log,
            ca: dir.join("ca.pem"),
        }
    }

    fn url(&self, path: &str) -> String {
        format!("https://{API}:{}{path}", self.server.port)
    }

    fn received(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// curl outside any sandbox, as a naive setup would send the value itself.
    fn naive(&self, w: &World, args: &str) -> String {
        let out = w.outside(&format!(
            "curl -sS -m 10 --cacert {} --resolve {API}:{}:127.0.0.1 {args}",
            self.ca.display(),
            self.server.port
        ));
        assert!(out.status.success(), "{}", stderr(&out));
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// `airlock run` of `sh -c script` with the three secrets.
    fn airlock(&self, w: &World, script: &str) -> Output {
        let profile = w.profile(&format!(
            r#"
[network]
allow = ["{API}:{port}"]

[[secret]]
name = "TOKEN"
from = {{ env = "TEST_TOKEN" }}
hosts = ["{API}"]
inject = {{ header = "Authorization", format = "Bearer {{}}" }}

[[secret]]
name = "KEY"
from = {{ env = "TEST_KEY" }}
hosts = ["{API}"]
inject = {{ query = "api_key" }}

[[secret]]
name = "PASS"
from = {{ env = "TEST_PASS" }}
hosts = ["{API}"]
inject = "placeholder"
"#,
            port = self.server.port
        ));
        let mut cmd: Command = w.airlock();
        cmd.env("TEST_TOKEN", TOKEN)
            .env("TEST_KEY", KEY)
            .env("TEST_PASS", PASS)
            .env("SSL_CERT_FILE", &self.ca)
            .args(["run", "--profile-file", &profile])
            .args(["--resolve", &format!("{API}=127.0.0.1")])
            .arg("--workspace")
            .arg(&w.workspace)
            .args(["--", "sh", "-c", script]);
        cmd.output().unwrap()
    }
}

fn shows_a_value(text: &str) -> bool {
    [TOKEN, KEY, KEY_ENCODED, PASS]
        .iter()
        .any(|v| text.contains(v))
}

both_modes!(trace_is_refused_and_echoes_nothing, |w: &World| {
    let r = Reflector::start(w);
    // Without airlock: the server sends the credential back.
    let naive = r.naive(
        w,
        &format!("-X TRACE -H 'Authorization: Bearer {TOKEN}' {}", r.url("/")),
    );
    assert!(naive.contains(TOKEN), "the harm, shown: {naive}");
    let before = r.received().lines().count();
    let out = r.airlock(
        w,
        &format!(
            "for m in TRACE TRACK; do curl -sS -m 10 -X $m -w '\\n%{{http_code}}\\n' -H \"Authorization: Bearer $TOKEN\" {}; done",
            r.url("/")
        ),
    );
    let said = ran(&out);
    assert_eq!(said.matches("\n405").count(), 2, "{said}\n{}", stderr(&out));
    assert!(!shows_a_value(&said), "{said}");
    assert_eq!(
        r.received().lines().count(),
        before,
        "nothing reached the server"
    );
});

both_modes!(no_answer_header_carries_a_value_back, |w: &World| {
    let r = Reflector::start(w);
    // Without airlock: a redirect keeps the query, the server echoes request headers.
    let naive = r.naive(
        w,
        &format!(
            "-o /dev/null -D - -H 'X-Request-Id: {PASS}' -H 'Authorization: Bearer {TOKEN}' '{}'",
            r.url(&format!("/redirect?x=1&api_key={KEY_ENCODED}"))
        ),
    );
    assert!(
        naive.contains(KEY_ENCODED) && naive.contains(PASS) && naive.contains(TOKEN),
        "the harm, shown: {naive}"
    );
    let before = r.received().lines().count();
    // Inside: the placeholder put where a server echoes it, and where credentials travel.
    let out = r.airlock(
        w,
        &format!(
            "echo KEY=$KEY; curl -sS -m 10 -o /dev/null -D - -H \"X-Request-Id: $PASS\" -H \"Origin: https://$PASS\" -H \"Cookie: s=$PASS\" '{}'",
            r.url("/redirect?x=1")
        ),
    );
    let said = ran(&out);
    assert!(said.contains(" 301"), "{said}\n{}", stderr(&out));
    assert!(!shows_a_value(&said), "{said}");
    let key = said
        .lines()
        .find_map(|l| l.strip_prefix("KEY="))
        .unwrap()
        .to_string();
    assert!(
        said.to_ascii_lowercase().contains(&format!(
            "location: /dir/?x=1&api_key={}",
            key.to_ascii_lowercase()
        )),
        "followable, with the placeholder: {said}"
    );
    let received: Vec<String> = r
        .received()
        .lines()
        .skip(before)
        .map(String::from)
        .collect();
    let received = received.join("\n");
    // The credential went out where credentials travel, and only there.
    assert!(received.contains(&format!("s={PASS}")), "{received}");
    assert!(received.contains(&format!("Bearer {TOKEN}")), "{received}");
    assert!(
        !received.contains(&format!("\"X-Request-Id\", \"{PASS}\"")),
        "{received}"
    );
    assert!(!received.contains(&format!("https://{PASS}")), "{received}");
    let log =
        String::from_utf8_lossy(&w.airlock().args(["log", "--json"]).output().unwrap().stdout)
            .into_owned();
    assert!(log.contains("carried the value of secret TOKEN"), "{log}");
    assert!(
        log.contains("placeholder of secret PASS sent to host"),
        "{log}"
    );
    assert!(!shows_a_value(&log));
});
