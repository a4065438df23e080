//! Requests by method and path (`[[network.http]]`): the gate terminates TLS for a host with
//! rules (no secret needed), lets through what they allow and answers anything else 403,
//! recording each request. A local HTTPS server with a test CA of its own logs every request
//! it receives, reached through `--resolve NAME=127.0.0.1`; airlock trusts that CA for
//! upstreams through SSL_CERT_FILE. Real curl and Python's http.client, root and unprivileged
//! user both. The same requests through a profile without rules reach the server, so that no
//! refusal here is for want of an attack.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::path::PathBuf;
use std::process::Output;

use support::servers::{https_python_server, python_server, Server};
use support::{ran, stderr, stdout, Mode, World};

const API: &str = "rules.test";

/// A test CA and a certificate it signed for API.
fn pki(w: &World) -> PathBuf {
    support::pki::ca_and_server(w, "rules.test", &[API])
}

/// An HTTPS server (HTTP/1.1, kept alive) that logs each request's method and path, one line
/// each, and answers 200 "ok" to any method.
struct Echo {
    server: Server,
    log: PathBuf,
}

impl Echo {
    fn start(w: &World, pki: &std::path::Path) -> Echo {
        Echo::serving(w, pki, ECHO)
    }

    /// The server of `script`: python3 with the certificate, its key and the log as arguments.
    fn serving(w: &World, pki: &std::path::Path, script: &str) -> Echo {
        let log = w.outside.join("received.log");
        let (cert, key) = (pki.join("cert.pem"), pki.join("key.pem"));
        let server = https_python_server(script, &cert, &key, &log);
        Echo { server, log }
    }

    fn received(&self) -> Vec<String> {
        std::fs::read_to_string(&self.log)
            .unwrap_or_default()
            .lines()
            .map(str::to_string)
            .collect()
    }
}

/// [`Echo`]'s server: it reads each request's body as its Content-Length says.
const ECHO: &str = r#"
import http.server, ssl, sys
log = open(sys.argv[3], "a")
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def __getattr__(self, name):
        if not name.startswith("do_"): raise AttributeError(name)
        return self.answer
    def answer(self):
        n = int(self.headers.get("Content-Length", 0) or 0)
        if n: self.rfile.read(n)
        log.write("%s %s\n" % (self.command, self.path)); log.flush()
        body = b"ok\n"
        self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def log_message(self, *a): pass
"#;

/// Each request the script makes, `LABEL STATUS` on a line (and curl's HTTP version): curl
/// through airlock's proxy and without it, HTTP/2 and HTTP/1.1, the path as written
/// (`--path-as-is`), and Python's http.client over one kept-alive connection whose second
/// request breaks the rules.
fn script(port: u16) -> String {
    let api = format!("https://{API}:{port}");
    format!(
        r#"set -u
code() {{ label=$1; shift; echo "$label $(curl -sS -m 10 -o /dev/null -w '%{{http_code}} HTTP/%{{http_version}}' "$@")"; }}
code get-allowed --http1.1 "{api}/repos/acme/widgets?page=2"
code post-allowed --noproxy '*' -X POST -d '{{}}' {api}/repos/acme/widgets/issues
code delete --http1.1 -X DELETE {api}/repos/acme/widgets
code other-path --noproxy '*' {api}/repos/other/widgets
code dotdot --http1.1 --path-as-is {api}/repos/acme/../other/widgets
code encoded-dotdot --path-as-is --noproxy '*' {api}/repos/acme/%2e%2e/other/widgets
code encoded-slash --path-as-is {api}/repos/acme/x%2f..%2f..%2fother
/usr/bin/python3 - <<'PY'
import http.client, ssl
c = http.client.HTTPSConnection("{API}", {port}, context=ssl.create_default_context(), timeout=10)
def exchange(label, method, path):
    try:
        c.request(method, path)
        r = c.getresponse(); r.read()
        print(label, r.status)
    except Exception as e:
        print(label, type(e).__name__)
exchange("kept-first", "GET", "/repos/acme/kept-1")
exchange("kept-second", "DELETE", "/repos/acme/kept-2")
PY
"#
    )
}

const REFUSED: [&str; 6] = [
    "delete",
    "other-path",
    "dotdot",
    "encoded-dotdot",
    "encoded-slash",
    "kept-second",
];

fn run(w: &World, pki: &std::path::Path, profile: &str, script: &str) -> Output {
    w.airlock()
        .env("SSL_CERT_FILE", pki.join("ca.pem"))
        .args(["run", "--profile-file", profile])
        .args(["--resolve", &format!("{API}=127.0.0.1")])
        .arg("--workspace")
        .arg(&w.workspace)
        .args(["--", "sh", "-c", script])
        .output()
        .unwrap()
}

/// `LABEL STATUS [VERSION]` lines as (label, status) pairs.
fn statuses(said: &str) -> Vec<(String, String)> {
    said.lines()
        .filter_map(|line| {
            let mut words = line.split(' ');
            Some((words.next()?.to_string(), words.next()?.to_string()))
        })
        .collect()
}

both_modes!(rules_hold_by_method_and_path, |w: &World| {
    let pki = pki(w);
    let echo = Echo::start(w, &pki);
    let port = echo.server.port;
    let script = script(port);
    // Without rules (a profile that only allows the host, and a CA for the server, as with
    // them): every request reaches the server, the tricks as written.
    std::fs::copy(pki.join("ca.pem"), w.workspace.join("test-ca.pem")).unwrap();
    let without = w.profile(&format!("[network]\nallow = [\"{API}:{port}\"]\n"));
    let trusting =
        format!("export CURL_CA_BUNDLE=$PWD/test-ca.pem SSL_CERT_FILE=$PWD/test-ca.pem\n{script}");
    let out = run(w, &pki, &without, &trusting);
    let said = ran(&out);
    let bare = statuses(&said);
    assert_eq!(bare.len(), 9, "{said}\n{}", stderr(&out));
    assert!(
        bare.iter().all(|(_, status)| status == "200"),
        "{said}\n{}",
        stderr(&out)
    );
    let received = echo.received();
    for line in [
        "DELETE /repos/acme/widgets",
        "GET /repos/acme/../other/widgets",
        "GET /repos/acme/%2e%2e/other/widgets",
        "GET /repos/acme/x%2f..%2f..%2fother",
        "DELETE /repos/acme/kept-2",
    ] {
        assert!(received.iter().any(|r| r == line), "{line}: {received:?}");
    }
    let before = received.len();

    // With rules: what they allow passes, the rest is 403 and never reaches the server.
    let with = w.profile(&format!(
        r#"[network]
allow = ["{API}:{port}"]

[[network.http]]
host = "{API}"
allow = ["GET /repos/acme/*", "POST /repos/acme/*/issues"]
"#
    ));
    let out = run(w, &pki, &with, &script);
    let said = ran(&out);
    // curl spoke HTTP/2 to the gate where it was not told otherwise.
    for version in ["HTTP/1.1", "HTTP/2"] {
        assert!(said.contains(version), "{version}: {said}");
    }
    let judged = statuses(&said);
    assert_eq!(judged.len(), 9, "{said}\n{}", stderr(&out));
    for (label, status) in &judged {
        let want = if REFUSED.contains(&label.as_str()) {
            "403"
        } else {
            "200"
        };
        assert_eq!(status, want, "{label}: {said}\n{}", stderr(&out));
    }
    let received = echo.received();
    assert_eq!(
        &received[before..],
        [
            "GET /repos/acme/widgets?page=2",
            "POST /repos/acme/widgets/issues",
            "GET /repos/acme/kept-1"
        ],
        "{received:?}"
    );
    // Each request is in the audit log, refused ones as refusals, with method and path (no
    // query); each refusal is said on stderr too.
    let log = stdout(&w.airlock().args(["log", "--json"]).output().unwrap());
    let records: Vec<serde_json::Value> = log
        .lines()
        .filter_map(|line| serde_json::from_str(line).ok())
        .filter(|r: &serde_json::Value| r.to_string().contains("\"kind\":\"request\""))
        .collect();
    let text = |r: &serde_json::Value| r.to_string();
    for (method, path) in [
        ("DELETE", "/repos/acme/widgets"),
        ("GET", "/repos/other/widgets"),
        ("GET", "/repos/acme/../other/widgets"),
        ("GET", "/repos/acme/%2e%2e/other/widgets"),
        ("DELETE", "/repos/acme/kept-2"),
    ] {
        let found = records.iter().any(|r| {
            let t = text(r);
            t.contains(&format!("\"method\":\"{method}\""))
                && t.contains(&format!("\"path\":\"{path}\""))
                && t.contains("\"allowed\":false")
        });
        assert!(found, "{method} {path}: {log}");
    }
    let allowed = records
        .iter()
        .filter(|r| text(r).contains("\"allowed\":true"))
        .count();
    assert_eq!(allowed, 3, "{log}");
    assert!(
        !records.iter().any(|r| text(r).contains("page=2")),
        "the query is not recorded: {log}"
    );
    // The run's end says it, a line for the host with the count.
    assert!(
        stderr(&out).contains("airlock: refused rules.test:")
            && stderr(&out).contains("(6×)")
            && stderr(&out).contains("[[network.http]] for rules.test"),
        "{}",
        stderr(&out)
    );
});

both_modes!(plain_http_to_a_host_with_rules_is_refused, |w: &World| {
    // A plain-HTTP server on the host: without rules the sandbox reaches it.
    let server = python_server(
        r#"
import http.server
class H(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        self.send_response(200); self.send_header("Content-Length", "3"); self.end_headers(); self.wfile.write(b"ok\n")
    def log_message(self, *a): pass
s = http.server.HTTPServer(("127.0.0.1", 0), H)
print(s.server_address[1], flush=True)
s.serve_forever()
"#,
        &[],
    );
    let port = server.port;
    let get = format!(
        "curl -sS -m 10 -w ' %{{http_code}}' http://{API}:{port}/repos/acme/x; curl -sS -m 10 --noproxy '*' -w ' %{{http_code}}' http://{API}:{port}/repos/acme/x"
    );
    let without = w.profile(&format!("[network]\nallow = [\"{API}:{port}\"]\n"));
    let pki = pki(w);
    let said = ran(&run(w, &pki, &without, &get));
    assert_eq!(said.matches("ok\n 200").count(), 2, "{said}");
    let with = w.profile(&format!(
        "[network]\nallow = [\"{API}:{port}\"]\n[[network.http]]\nhost = \"{API}\"\nallow = [\"GET /repos/acme/*\"]\n"
    ));
    let out = run(w, &pki, &with, &get);
    let said = ran(&out);
    assert_eq!(said.matches(" 403").count(), 2, "{said}\n{}", stderr(&out));
    assert!(said.contains("not TLS"), "{said}");
});

/// A server as Python's http.server writes them: a GET's body is not read (BaseHTTPRequestHandler
/// reads none), so what follows a GET's head on the connection is the next request to it.
const LAX: &str = r#"
import http.server, ssl, sys
log = open(sys.argv[3], "a")
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    def do_GET(self):
        log.write("%s %s\n" % (self.command, self.path)); log.flush()
        self.send_response(200); self.send_header("Content-Length", "3"); self.end_headers()
        self.wfile.write(b"ok\n")
    do_DELETE = do_GET
    def log_message(self, *a): pass
"#;

/// A GET whose body is a DELETE: curl over HTTP/2 to the gate (passed on as HTTP/1.1 with its
/// Content-Length) and Python's http.client over HTTP/1.1, each on a connection of its own.
fn smuggling(port: u16) -> String {
    let smuggled = format!(
        "DELETE /admin/everything HTTP/1.1\\r\\nHost: {API}\\r\\nContent-Length: 0\\r\\n\\r\\n"
    );
    format!(
        r#"set -u
printf '{smuggled}' | curl -sS -m 10 -o /dev/null -w 'curl-get-body %{{http_code}} HTTP/%{{http_version}}\n' -X GET --data-binary @- https://{API}:{port}/repos/acme/widgets
/usr/bin/python3 - <<'PY'
import http.client, ssl
c = http.client.HTTPSConnection("{API}", {port}, context=ssl.create_default_context(), timeout=10)
try:
    c.request("GET", "/repos/acme/widgets", body=b"{smuggled}")
    r = c.getresponse(); r.read()
    print("python-get-body", r.status)
except Exception as e:
    print("python-get-body", type(e).__name__)
PY
"#
    )
}

both_modes!(
    a_request_in_a_get_body_never_reaches_the_server,
    |w: &World| {
        let pki = pki(w);
        let lax = Echo::serving(w, &pki, LAX);
        let port = lax.server.port;
        let script = smuggling(port);
        let network = format!("[network]\nallow = [\"{API}:{port}\"]\n");
        let profile = |entry: &str| {
            w.profile(&format!(
                "{network}[[network.http]]\nhost = \"{API}\"\n{entry}\n"
            ))
        };
        // The host inspected, not ruled: both requests go on through the gate as they came, and
        // the server runs the DELETE in each body.
        let inspected = profile("inspect = true");
        let out = run(w, &pki, &inspected, &script);
        let said = ran(&out);
        assert!(
            said.contains("curl-get-body 200 HTTP/2"),
            "{said}\n{}",
            stderr(&out)
        );
        assert!(
            said.contains("python-get-body 200"),
            "{said}\n{}",
            stderr(&out)
        );
        let received = lax.received();
        let deletes = received
            .iter()
            .filter(|r| *r == "DELETE /admin/everything")
            .count();
        assert_eq!(deletes, 2, "{received:?}");
        let before = received.len();

        // Ruled: the GET is allowed, but not with a body; nothing reaches the server.
        let ruled = profile(r#"allow = ["GET /repos/acme/*"]"#);
        let out = run(w, &pki, &ruled, &script);
        let said = ran(&out);
        assert!(
            said.contains("curl-get-body 403 HTTP/2"),
            "{said}\n{}",
            stderr(&out)
        );
        assert!(
            said.contains("python-get-body 403"),
            "{said}\n{}",
            stderr(&out)
        );
        assert_eq!(lax.received().len(), before, "{:?}", lax.received());
        assert!(
            stderr(&out).contains("a body on a GET request"),
            "{}",
            stderr(&out)
        );
    }
);

both_modes!(policy_check_warns_of_ways_around_the_rules, |w: &World| {
    let ruled = format!("[[network.http]]\nhost = \"{API}\"\nallow = [\"GET /x\"]\n");
    let check = |network: &str| {
        let profile = w.profile(&format!("[network]\n{network}\n{ruled}"));
        let out = w
            .airlock()
            .args(["policy", "check", &profile])
            .output()
            .unwrap();
        assert_eq!(out.status.code(), Some(0), "{}", stderr(&out));
        assert!(stdout(&out).contains("valid"), "{}", stdout(&out));
        stderr(&out)
    };
    assert_eq!(check(&format!("allow = [\"{API}\"]")), "");
    let open = check(&format!("open = true\nallow = [\"{API}\"]"));
    assert!(
        open.contains("airlock: warning:") && open.contains("network is open"),
        "{open}"
    );
    let wide = check(&format!("allow = [\"{API}\", \"127.0.0.1\", \"cdn.test\"]"));
    assert!(
        wide.contains("addresses (127.0.0.1)") && wide.contains("other names (cdn.test)"),
        "{wide}"
    );
});
