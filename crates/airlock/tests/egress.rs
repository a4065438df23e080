//! The network gate: only the names a profile allows are reachable, by DNS and by connection, and
//! a connection must ask for the name it connected by. Real servers on the host's loopback (HTTP
//! and HTTPS with a self-signed certificate), reached through `--resolve NAME=127.0.0.1`. Each
//! attempt is also shown to work without airlock. Root and unprivileged user both.
// Tests: a panic is how a test fails, helpers included.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod support;

use std::process::{Command, Stdio};

use support::servers::{
    allowing_only_allowed_test, python_server, run_python, run_python_resolving, KilledOnDrop,
    Server,
};
use support::{ran, stderr, stdout, Mode, World};

fn server(tls: Option<&std::path::Path>) -> Server {
    let script = r#"
import http.server, ssl, sys
class H(http.server.BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"  # keeps connections alive between requests
    def do_GET(self):
        body = b"hello from host"
        # As most servers: a request target in absolute form is not theirs to serve.
        status = 200 if self.path.startswith("/") else 400
        self.send_response(status); self.send_header("Content-Length", str(len(body))); self.end_headers()
        self.wfile.write(body)
    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self.do_GET()
    def log_message(self, *a): pass
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
if len(sys.argv) > 1:
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.load_cert_chain(sys.argv[1] + "/cert.pem", sys.argv[1] + "/key.pem")
    s.socket = ctx.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;
    match tls {
        Some(dir) => python_server(script, &[dir.as_os_str()]),
        None => python_server(script, &[]),
    }
}

fn certificate(dir: &std::path::Path) {
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "rsa:2048",
            "-nodes",
            "-days",
            "1",
            "-subj",
            "/CN=allowed.test",
        ])
        .arg("-keyout")
        .arg(dir.join("key.pem"))
        .arg("-out")
        .arg(dir.join("cert.pem"))
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
}

/// `script` in python3 as the identity under test, without airlock.
fn python_outside(w: &World, script: &str) -> std::process::Output {
    w.outside(&format!(
        "/usr/bin/python3 -c '{}'",
        script.replace('\'', "'\\''")
    ))
}

/// Python that prints "LABEL REACHED …" or "LABEL blocked …" for each `attempt(LABEL, f)`.
const ATTEMPT: &str = r#"
import socket, urllib.request
def attempt(label, f):
    try: print(label, "REACHED", f())
    except Exception as e: print(label, "blocked", type(e).__name__, e)
"#;

/// Fetch `url` with Python's urllib as the identity under test, without airlock; what it read.
fn fetched_without_airlock(w: &World, url: &str) -> String {
    let out = w.outside(&format!(
        "/usr/bin/python3 -c 'import urllib.request; print(urllib.request.urlopen(\"{url}\").read())'"
    ));
    format!("{}{}", stdout(&out), stderr(&out))
}

both_modes!(only_allowed_names_are_reachable_over_http, |w: &World| {
    let http = server(None);
    let port = http.port;
    // Without airlock, every one of these reaches the server.
    let outside = fetched_without_airlock(w, &format!("http://127.0.0.1:{port}/"));
    assert!(outside.contains("hello from host"), "{outside}");

    let profile = allowing_only_allowed_test(w, port);
    let script = format!(
        r#"{ATTEMPT}
attempt("allowed", lambda: urllib.request.urlopen("http://allowed.test:{port}/", timeout=5).read())
attempt("denied-name", lambda: urllib.request.urlopen("http://denied.test:{port}/", timeout=5).read())
attempt("host-loopback", lambda: urllib.request.urlopen("http://127.0.0.1:{port}/", timeout=5).read())
attempt("metadata", lambda: socket.create_connection(("169.254.169.254", 80), timeout=5))
attempt("bare-ip", lambda: socket.create_connection(("93.184.216.34", 443), timeout=5))
attempt("wrong-port", lambda: socket.create_connection(("allowed.test", 22), timeout=5))
def udp():
    s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM); s.sendto(b"x", ("8.8.8.8", 53)); return "sent"
attempt("udp", udp)
def fronting():
    s = socket.create_connection(("allowed.test", {port}), timeout=5)
    s.sendall(b"GET / HTTP/1.1\r\nHost: denied.test\r\nConnection: close\r\n\r\n")
    data = s.recv(100)
    if not data: raise ConnectionError("closed without an answer")
    return data
attempt("fronting", fronting)
"#
    );
    let out = run_python(w, &profile, &script);
    let said = ran(&out);
    assert!(
        said.contains("allowed REACHED b'hello from host'"),
        "{said}\n{}",
        stderr(&out)
    );
    for label in [
        "denied-name",
        "host-loopback",
        "metadata",
        "bare-ip",
        "wrong-port",
        "udp",
        "fronting",
    ] {
        assert!(
            said.contains(&format!("{label} blocked")),
            "{label}: {said}\n{}",
            stderr(&out)
        );
    }
    // Each refusal was said on stderr and logged.
    let notices = stderr(&out);
    // (urllib goes through airlock's proxy, which refuses the name itself.)
    assert!(
        notices.contains("denied.test:") && notices.contains("refused"),
        "{notices}"
    );
    assert!(notices.contains("domain fronting"), "{notices}");
    let log = stdout(
        &w.airlock()
            .args(["log", "--action", "net", "--json"])
            .output()
            .unwrap(),
    );
    assert!(log.contains("\"kind\":\"closed\""), "{log}");
    assert!(log.contains("\"bytes_in\""), "{log}");
});

both_modes!(tls_must_name_the_host_it_connected_to, |w: &World| {
    let certs = w.outside.join("certs");
    std::fs::create_dir(&certs).unwrap();
    certificate(&certs);
    let https = server(Some(&certs));
    let port = https.port;
    // Without airlock, a TLS connection may ask for any name.
    let fronted = w.outside(&format!(
        "/usr/bin/python3 -c 'import socket,ssl; c=ssl.create_default_context(); c.check_hostname=False; c.verify_mode=ssl.CERT_NONE; s=c.wrap_socket(socket.create_connection((\"127.0.0.1\",{port})), server_hostname=\"denied.test\"); print(\"handshake\", s.version())'"
    ));
    assert!(
        stdout(&fronted).contains("handshake TLS"),
        "{}",
        stderr(&fronted)
    );
    let profile = allowing_only_allowed_test(w, port);
    let script = format!(
        r#"
import socket, ssl
ctx = ssl.create_default_context(); ctx.check_hostname = False; ctx.verify_mode = ssl.CERT_NONE
def get(sni):
    with socket.create_connection(("allowed.test", {port}), timeout=5) as raw:
        with ctx.wrap_socket(raw, server_hostname=sni) as s:
            s.sendall(b"GET / HTTP/1.1\r\nHost: " + sni.encode() + b"\r\nConnection: close\r\n\r\n")
            data = b""
            while True:
                try: chunk = s.recv(4096)
                except ssl.SSLZeroReturnError: break
                if not chunk: break
                data += chunk
            if not data: raise ConnectionError("closed without an answer")
            return data
for sni in ["allowed.test", "denied.test"]:
    try: print(sni, "REACHED", b"hello from host" in get(sni))
    except Exception as e: print(sni, "blocked", type(e).__name__)
"#
    );
    let out = run_python(w, &profile, &script);
    let said = ran(&out);
    assert!(
        said.contains("allowed.test REACHED True"),
        "{said}\n{}",
        stderr(&out)
    );
    assert!(
        said.contains("denied.test blocked"),
        "{said}\n{}",
        stderr(&out)
    );
    assert!(stderr(&out).contains("domain fronting"), "{}", stderr(&out));
});

both_modes!(network_none_still_has_no_network, |w: &World| {
    let http = server(None);
    let out = w.inside(&format!(
        "/usr/bin/python3 -c 'import socket; socket.create_connection((\"127.0.0.1\", {}), timeout=3)' 2>&1 || echo blocked",
        http.port
    ));
    assert!(ran(&out).contains("blocked"));
    let _ = Mode::Root;
});

// Under network = "none" a lookup gets "no such name" at once, over UDP and TCP, and a connect
// "network unreachable": answers a resolver and a tool take as final. Without the gate's
// answer a lookup failed as a temporary error (EAI_AGAIN), which npm retried for 71 s, and
// nothing said why; now the run ends naming each host, and its result record lists them.
both_modes!(
    with_no_network_each_refusal_is_final_at_once_and_named_at_the_end,
    |w: &World| {
        let script = r#"
for opts in '' use-vc; do
  RES_OPTIONS="$opts" /usr/bin/python3 -c '
import socket, sys
try: socket.getaddrinfo(sys.argv[1], 443); print(sys.argv[1], "resolved")
except socket.gaierror as e: print(sys.argv[1], "gaierror", e.errno)
' "lookup${opts:+-tcp}.example.test"
done
/usr/bin/python3 -c '
import socket
try: socket.create_connection(("203.0.113.9", 8443), timeout=3); print("connected")
except OSError as e: print("connect errno", e.errno)
'
"#;
        let out = w.inside(script);
        let said = ran(&out);
        // -2: EAI_NONAME ("Name or service not known"), not -3: EAI_AGAIN (try again).
        for name in ["lookup.example.test", "lookup-tcp.example.test"] {
            assert!(
                said.contains(&format!("{name} gaierror -2")),
                "{said}\n{}",
                stderr(&out)
            );
        }
        assert!(said.contains("connect errno 101"), "{said}"); // ENETUNREACH
        let notes = stderr(&out);
        for line in [
            "airlock: refused lookup.example.test (1×) — profile 'default' allows no network",
            "airlock: refused lookup-tcp.example.test (1×) — profile 'default' allows no network",
            "airlock: refused 203.0.113.9:8443 (1×) — profile 'default' allows no network",
        ] {
            assert!(notes.contains(line), "{line}:\n{notes}");
        }
        assert!(
            notes
                .trim_end()
                .lines()
                .last()
                .unwrap_or("")
                .contains("[network] allow"),
            "{notes}"
        );
        // The run's result record lists them; each lookup has its own record.
        let log = |action: &str| -> Vec<serde_json::Value> {
            stdout(
                &w.airlock()
                    .args(["log", "--action", action, "--json"])
                    .output()
                    .unwrap(),
            )
            .lines()
            .map(|line| serde_json::from_str(line).unwrap())
            .collect()
        };
        let results = log("run.result");
        let refused = &results.last().unwrap()["refused"];
        assert_eq!(refused.as_array().map(Vec::len), Some(3), "{refused}");
        assert_eq!(refused[2]["host"], "203.0.113.9", "{refused}");
        assert_eq!(refused[2]["port"], 8443, "{refused}");
        let lookups = log("net.dns");
        assert!(
            lookups
                .iter()
                .any(|r| r["name"] == "lookup-tcp.example.test"
                    && r["qtype"] == "A"
                    && r["denied"] == true),
            "{lookups:?}"
        );
        // `--json` answers the same list.
        let json = w
            .airlock()
            .args([
                "run",
                "--json",
                "--",
                "getent",
                "hosts",
                "json.example.test",
            ])
            .output()
            .unwrap();
        let answer: serde_json::Value = serde_json::from_str(&stdout(&json)).unwrap();
        assert_eq!(
            answer["refused"][0]["host"], "json.example.test",
            "{answer}"
        );
        assert_eq!(
            answer["refused"][0]["rule"], "network = \"none\"",
            "{answer}"
        );
    }
);

both_modes!(
    proxy_users_and_proxy_ignorers_get_the_same_decisions,
    |w: &World| {
        let http = server(None);
        let port = http.port;
        let profile = allowing_only_allowed_test(w, port);
        let script = format!(
        "for flag in '' '--noproxy *'; do \
           echo \"mode:$flag\"; \
           curl -sS -m 5 $flag http://allowed.test:{port}/ ; echo; \
           curl -fsS -m 5 $flag http://denied.test:{port}/ >/dev/null 2>&1 && echo denied-REACHED || echo denied-blocked; \
         done; echo \"proxy=$HTTP_PROXY\""
    );
        let out = w
            .airlock()
            .args([
                "run",
                "--profile-file",
                &profile,
                "--resolve",
                "allowed.test=127.0.0.1",
                "--resolve",
                "denied.test=127.0.0.1",
                "--workspace",
            ])
            .arg(&w.workspace)
            .args(["--", "sh", "-c", &script])
            .output()
            .unwrap();
        let said = ran(&out);
        assert_eq!(
            said.matches("hello from host").count(),
            2,
            "{said}\n{}",
            stderr(&out)
        );
        assert_eq!(
            said.matches("denied-blocked").count(),
            2,
            "{said}\n{}",
            stderr(&out)
        );
        assert!(said.contains("proxy=http://198.19.255.254:3128"), "{said}");
        // The proxy answers a refusal with a 403 and the reason as JSON.
        let out = w
            .airlock()
            .args([
                "run",
                "--profile-file",
                &profile,
                "--resolve",
                "denied.test=127.0.0.1",
                "--workspace",
            ])
            .arg(&w.workspace)
            .args([
                "--",
                "curl",
                "-sS",
                "-m",
                "5",
                "-w",
                "\\n%{http_code}",
                &format!("http://denied.test:{port}/"),
            ])
            .output()
            .unwrap();
        let said = stdout(&out);
        assert!(
            said.contains("\"rule\":\"no allow entry names it\""),
            "{said}"
        );
        assert!(said.trim_end().ends_with("403"), "{said}");
    }
);

both_modes!(
    git_clones_over_http_from_an_allowed_name_only,
    |w: &World| {
        // A bare repository served over git's "dumb" HTTP protocol by a plain file server.
        let repo = w.outside.join("served");
        let setup = w.outside(&format!(
        "set -e; mkdir -p '{r}/src' && cd '{r}/src' && git init -q && echo hi > f && git add f && \
         git -c user.name=t -c user.email=t@t commit -qm one && git clone -q --bare . ../repo.git && \
         cd ../repo.git && git update-server-info",
        r = repo.display()
    ));
        assert!(setup.status.success(), "{}", stderr(&setup));
        let files = python_server(
            "import functools, http.server, sys\n\
             h = functools.partial(http.server.SimpleHTTPRequestHandler, directory=sys.argv[1])\n\
             s = http.server.ThreadingHTTPServer(('127.0.0.1', 0), h)\n\
             print(s.server_address[1], flush=True)\n\
             s.serve_forever()\n",
            &[repo.as_os_str()],
        );
        let port = files.port;
        // Without airlock the clone works from anywhere.
        let outside = w.outside(&format!(
            "git clone -q http://127.0.0.1:{port}/repo.git '{}/plain' && cat '{}/plain/f'",
            w.outside.display(),
            w.outside.display()
        ));
        assert_eq!(stdout(&outside), "hi\n", "{}", stderr(&outside));
        let profile = allowing_only_allowed_test(w, port);
        let out = w
        .airlock()
        .args(["run", "--profile-file", &profile, "--resolve", "allowed.test=127.0.0.1", "--resolve", "denied.test=127.0.0.1", "--workspace"])
        .arg(&w.workspace)
        .args(["--", "sh", "-c", &format!(
            "git clone -q http://allowed.test:{port}/repo.git ok && cat ok/f; \
             git clone -q http://denied.test:{port}/repo.git no 2>/dev/null && echo denied-REACHED || echo denied-blocked"
        )])
        .output()
        .unwrap();
        let said = ran(&out);
        assert!(said.contains("hi\n"), "{said}\n{}", stderr(&out));
        assert!(said.contains("denied-blocked"), "{said}");
    }
);

both_modes!(a_sessions_network_can_be_cut_while_it_runs, |w: &World| {
    let http = server(None);
    let port = http.port;
    let profile = allowing_only_allowed_test(w, port);
    let out = w
        .airlock()
        .args([
            "session",
            "new",
            "--name",
            "net",
            "--profile-file",
            &profile,
            "--workspace",
        ])
        .arg(&w.workspace)
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", stderr(&out));
    let script = format!(
        r#"
import socket, sys, time
for i in range(200):
    try:
        s = socket.create_connection(("allowed.test", {port}), timeout=3)
        s.sendall(b"GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
        reply = b""
        while True:
            data = s.recv(4096)
            if not data: break
            reply += data
        ok = b"hello from host" in reply
        print("ok" if ok else "empty", flush=True)
    except Exception as e:
        print("fail", type(e).__name__, flush=True)
    time.sleep(0.05)
"#
    );
    let mut child = w
        .airlock()
        .args([
            "run",
            "--session",
            "net",
            "--resolve",
            "allowed.test=127.0.0.1",
            "--",
            "/usr/bin/python3",
            "-c",
            &script,
        ])
        .stdout(Stdio::piped())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufRead::lines(std::io::BufReader::new(child.stdout.take().unwrap()));
    let first = lines.next().unwrap().unwrap();
    assert_eq!(first, "ok");
    let out = w
        .airlock()
        .args(["kill", "--network", "net"])
        .output()
        .unwrap();
    assert!(out.status.success(), "{}\n{}", stderr(&out), stdout(&out));
    // Within a moment every attempt fails, and the program goes on running.
    let mut after = Vec::new();
    for line in lines.by_ref().take(30) {
        after.push(line.unwrap());
    }
    let last: Vec<&String> = after.iter().rev().take(10).collect();
    assert!(last.iter().all(|l| l.starts_with("fail")), "{after:?}");
    let _ = child.kill();
    let _ = child.wait();
    let log = stdout(
        &w.airlock()
            .args(["log", "--action", "net.cut", "--action", "cut_network"])
            .output()
            .unwrap(),
    );
    assert!(
        log.contains("net.cut") && log.contains("cut_network.intent"),
        "{log}"
    );
});

both_modes!(open_mode_allows_all_but_what_deny_names, |w: &World| {
    let http = server(None);
    let port = http.port;
    let profile = w.profile("network = { open = true, deny = [\"denied.test\"] }\n");
    let script = format!(
        r#"
import socket
for name in ["allowed.test", "denied.test"]:
    try:
        s = socket.create_connection((name, {port}), timeout=5)
        s.sendall(b"GET / HTTP/1.1\r\nHost: " + name.encode() + b"\r\nConnection: close\r\n\r\n")
        reply = b"".join(iter(lambda: s.recv(4096), b""))
        print(name, "REACHED" if b"hello from host" in reply else "empty")
    except Exception as e:
        print(name, "blocked", type(e).__name__)
for addr in [("127.0.0.1", {port}), ("169.254.169.254", 80)]:
    try:
        socket.create_connection(addr, timeout=3); print(addr[0], "REACHED")
    except Exception as e:
        print(addr[0], "blocked", type(e).__name__)
"#
    );
    let out = run_python(w, &profile, &script);
    let said = ran(&out);
    assert!(
        said.contains("allowed.test REACHED"),
        "{said}\n{}",
        stderr(&out)
    );
    assert!(said.contains("denied.test blocked"), "{said}");
    // Open is not open to the host: its loopback and the metadata service stay refused.
    assert!(said.contains("127.0.0.1 blocked"), "{said}");
    assert!(said.contains("169.254.169.254 blocked"), "{said}");
});

both_modes!(plain_text_http2_cannot_hide_its_host, |w: &World| {
    let http = server(None);
    let port = http.port;
    let profile = allowing_only_allowed_test(w, port);
    let script = format!(
        r#"
import socket
s = socket.create_connection(("allowed.test", {port}), timeout=5)
s.sendall(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
print("answered" if s.recv(100) else "closed")
"#
    );
    let out = run_python(w, &profile, &script);
    assert_eq!(ran(&out).trim(), "closed", "{}", stderr(&out));
    assert!(stderr(&out).contains("h2c"), "{}", stderr(&out));
});

both_modes!(
    the_gate_hands_no_host_socket_into_the_sandbox,
    |w: &World| {
        // A "secret" service on the host's loopback, and an allowed server. An allowed connection's
        // socket, disconnected (connect AF_UNSPEC), must not reach the secret service by reconnect,
        // TCP Fast Open, or listen: it never was a socket of the host's namespace.
        let secret = server(None);
        let allowed = server(None);
        let secret_port = secret.port;
        let port = allowed.port;
        let outside = w.outside(&format!(
        "/usr/bin/python3 -c 'import socket; s=socket.create_connection((\"127.0.0.1\",{secret_port})); s.sendall(b\"GET / HTTP/1.0\\r\\n\\r\\n\"); print(s.recv(100))'"
    ));
        assert!(stdout(&outside).contains("200"), "{}", stderr(&outside));
        let profile = allowing_only_allowed_test(w, port);
        let script = format!(
            r#"
import socket, ctypes, struct, select, threading
libc = ctypes.CDLL(None, use_errno=True)
UNSPEC = struct.pack("H", 0) + b"\0" * 14
def handed():
    s = socket.create_connection(("allowed.test", {port}), timeout=5)
    libc.connect(s.fileno(), UNSPEC, 16)
    return s
def attempt(label, f):
    try: print(label, "REACHED", f(), flush=True)
    except Exception as e: print(label, "blocked", type(e).__name__, flush=True)
def reconnect():
    s = handed(); s.connect(("127.0.0.1", {secret_port})); s.sendall(b"GET / HTTP/1.0\r\n\r\n"); return s.recv(100)
def fastopen():
    s = handed(); s.setblocking(False)
    try: s.sendto(b"GET / HTTP/1.0\r\n\r\n", 0x20000000, ("127.0.0.1", {secret_port}))
    except BlockingIOError: pass
    select.select([s], [], [], 3); s.setblocking(True); s.settimeout(3)
    data = s.recv(100)
    if not data: raise ConnectionError("nothing")
    return data
def listen():
    s = handed(); s.listen(); return "listening on %s" % (s.getsockname(),)
attempt("reconnect", reconnect)
attempt("fastopen", fastopen)
attempt("listen", listen)
# From another thread, an allowed connection still works.
out = []
def in_thread():
    s = socket.create_connection(("allowed.test", {port}), timeout=5)
    s.sendall(b"GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"); out.append(b"".join(iter(lambda: s.recv(4096), b"")))
t = threading.Thread(target=in_thread); t.start(); t.join()
print("thread", b"hello from host" in out[0] if out else "failed")
"#
        );
        let out = run_python(w, &profile, &script);
        let said = ran(&out);
        assert!(
            said.contains("reconnect blocked"),
            "{said}\n{}",
            stderr(&out)
        );
        assert!(
            said.contains("fastopen blocked"),
            "{said}\n{}",
            stderr(&out)
        );
        // listen may succeed, but only inside the sandbox's own namespace: the host cannot reach it.
        if let Some(line) = said.lines().find(|l| l.starts_with("listen REACHED")) {
            let port: u16 = line
                .rsplit(", ")
                .next()
                .unwrap()
                .trim_end_matches(')')
                .parse()
                .unwrap();
            assert!(
                std::net::TcpStream::connect(("127.0.0.1", port)).is_err(),
                "the sandbox's listener is reachable from the host: {line}"
            );
        }
        assert!(said.contains("thread True"), "{said}\n{}", stderr(&out));
    }
);

both_modes!(
    fronting_is_refused_however_the_request_is_dressed,
    |w: &World| {
        let http = server(None);
        let port = http.port;
        let profile = allowing_only_allowed_test(w, port);
        let script = format!(
            r#"
import socket, time
def attempt(label, data, delay=0):
    try:
        s = socket.create_connection(("allowed.test", {port}), timeout=15)
        if delay: time.sleep(delay)
        s.sendall(data)
        got = s.recv(100)
        print(label, "ANSWERED" if got else "closed", flush=True)
    except Exception as e:
        print(label, "closed", type(e).__name__, flush=True)
bad = b"GET / HTTP/1.1\r\nHost: denied.test\r\nConnection: close\r\n\r\n"
attempt("late", bad, delay=0.6)
attempt("leading-crlf", b"\r\n" + bad)
attempt("two-hosts", b"GET / HTTP/1.1\r\nHost: allowed.test\r\nHost: denied.test\r\n\r\n")
attempt("oversized", b"GET / HTTP/1.1\r\nX: " + b"a" * 20000 + b"\r\nHost: denied.test\r\n\r\n")
# Heads a lax reading takes for "not HTTP" while servers serve them.
attempt("not-utf8", b"GET / HTTP/1.1\r\nHost: denied.test\r\nX: \xff\r\n\r\n")
attempt("two-spaces", b"GET  / HTTP/1.1\r\nHost: denied.test\r\n\r\n")
attempt("lower-case", b"get / HTTP/1.1\r\nHost: denied.test\r\n\r\n")
attempt("userinfo", b"GET http://allowed.test:1@denied.test/ HTTP/1.1\r\nHost: allowed.test\r\n\r\n")
attempt("odd-method", b"_X / HTTP/1.1\r\nHost: allowed.test\r\n\r\n" + bad)
def split(label, first, rest, pause):
    try:
        s = socket.create_connection(("allowed.test", {port}), timeout=30)
        s.sendall(first); time.sleep(pause); s.sendall(rest)
        print(label, "ANSWERED" if s.recv(100) else "closed", flush=True)
    except Exception as e:
        print(label, "closed", type(e).__name__, flush=True)
# The first bytes stop on a CR, the rest comes later.
split("split-line", b"GET / HTTP/1.1\r", b"\nHost: denied.test\r\n\r\n", 0.5)
# Nothing at all until both of the gate's waits are over.
split("silent", b"", bad, 21)
attempt("good", b"GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
"#
        );
        let out = run_python(w, &profile, &script);
        let said = ran(&out);
        for label in [
            "late",
            "leading-crlf",
            "two-hosts",
            "oversized",
            "not-utf8",
            "two-spaces",
            "lower-case",
            "userinfo",
            "odd-method",
            "split-line",
            "silent",
        ] {
            assert!(
                said.contains(&format!("{label} closed")),
                "{label}: {said}\n{}",
                stderr(&out)
            );
        }
        assert!(said.contains("good ANSWERED"), "{said}\n{}", stderr(&out));
    }
);

both_modes!(the_hosts_own_public_address_is_the_host, |w: &World| {
    // A host with a public address: a service listening on 0.0.0.0 answers there too, so a
    // sandbox that may reach "everything" could reach the host's services through it. Built in
    // a network namespace of this test's own, with 45.45.45.45 on its loopback, entered by a
    // thread of its own (the processes it starts inherit it; nothing else runs in it).
    if support::skip_unless_root("making a network namespace needs root") {
        return;
    }
    std::thread::scope(|scope| {
        if let Err(panic) = scope.spawn(|| own_address_in_a_namespace(w)).join() {
            std::panic::resume_unwind(panic);
        }
    });
});

fn own_address_in_a_namespace(w: &World) {
    nix::sched::unshare(nix::sched::CloneFlags::CLONE_NEWNET).unwrap();
    for args in [
        &["link", "set", "lo", "up"][..],
        &["addr", "add", "45.45.45.45/32", "dev", "lo"],
    ] {
        assert!(Command::new("ip").args(args).status().unwrap().success());
    }
    let service = python_server(
        "import http.server\n\
         s = http.server.ThreadingHTTPServer(('0.0.0.0', 0), http.server.BaseHTTPRequestHandler)\n\
         print(s.server_address[1], flush=True)\n\
         s.serve_forever()\n",
        &[],
    );
    let port = service.port;
    let script = format!(
        r#"
import socket
try:
    socket.create_connection(("45.45.45.45", {port}), timeout=3); print("REACHED")
except Exception as e:
    print("blocked", type(e).__name__)
"#
    );
    // Without airlock, the address reaches the host's service.
    let outside = Command::new("/usr/bin/python3")
        .args(["-c", &script])
        .output()
        .unwrap();
    assert_eq!(stdout(&outside).trim(), "REACHED");
    let open = w.profile("network = \"open\"\n");
    let out = run_python(w, &open, &script);
    assert!(ran(&out).contains("blocked"), "{}", stderr(&out));
    assert!(
        stderr(&out).contains("this host's own address 45.45.45.45"),
        "{}",
        stderr(&out)
    );
    // An allow entry naming the address opens it, as for a private one.
    let named = w.base.join("named.toml");
    w.write(
        &named,
        &format!("network = {{ allow = [\"45.45.45.45:{port}\"] }}\n"),
    );
    let out = run_python(w, named.to_str().unwrap(), &script);
    assert!(ran(&out).contains("REACHED"), "{}", stderr(&out));
}

both_modes!(
    a_get_with_a_body_passes_unless_the_body_could_be_a_request,
    |w: &World| {
        let http = server(None);
        let port = http.port;
        // Python's http.server does not read a GET's body: it takes it for the next request. A
        // JSON body (Elasticsearch's search API) is harmless; one that is a request for another
        // host gets that host served.
        let script = |connect: &str, body: &str| {
            format!(
                r#"
import socket
s = socket.create_connection(("{connect}", {port}), timeout=5)
body = {body}
s.sendall(b"GET /_search HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
data = b""
try:
    while True:
        chunk = s.recv(4096)
        if not chunk: break
        data += chunk
except Exception: pass
print("answers", data.count(b"hello from host"))
"#
            )
        };
        let json = r#"b'{"query": {"match_all": {}}}'"#;
        let hidden = r#"b"GET / HTTP/1.1\r\nHost: denied.test\r\nConnection: close\r\n\r\n""#;
        let outside = python_outside(w, &script("127.0.0.1", hidden));
        assert!(
            stdout(&outside).contains("answers 2"),
            "{}{}",
            stdout(&outside),
            stderr(&outside)
        );
        let profile = allowing_only_allowed_test(w, port);
        let out = run_python(w, &profile, &script("allowed.test", json));
        assert!(ran(&out).contains("answers 1"), "{}", stderr(&out));
        // Refused before the request went out, or after its head: never served twice.
        let out = run_python(w, &profile, &script("allowed.test", hidden));
        assert!(!ran(&out).contains("answers 2"), "{}", stderr(&out));
        assert!(
            stderr(&out).contains("could read as the next request"),
            "{}",
            stderr(&out)
        );
    }
);

both_modes!(
    a_kept_alive_connection_cannot_carry_a_later_request_elsewhere,
    |w: &World| {
        let http = server(None);
        let port = http.port;
        // Two requests on one connection, the second for another host: a shared server (a CDN, a
        // virtual host) would serve it. The second is hidden behind a first that passes, and behind
        // a body that looks like a request.
        let script = |connect: &str| {
            format!(
                r#"
import socket
s = socket.create_connection(("{connect}", {port}), timeout=5)
def exchange(request, answers=1):
    s.sendall(request)
    data = b""
    while data.count(b"hello from host") < answers:
        chunk = s.recv(4096)
        if not chunk: return "closed"
        data += chunk
    return "answered"
body = b"GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n"
print("first", exchange(b"POST / HTTP/1.1\r\nHost: allowed.test\r\nContent-Length: %d\r\n\r\n" % len(body) + body + b"GET / HTTP/1.1\r\nHost: allowed.test\r\n\r\n", 2))
try: print("second", exchange(b"GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n"))
except Exception as e: print("second", "closed", type(e).__name__)
"#
            )
        };
        // Without airlock the server answers both.
        let outside = python_outside(w, &script("127.0.0.1"));
        assert!(
            stdout(&outside).contains("second answered"),
            "{}{}",
            stdout(&outside),
            stderr(&outside)
        );
        let profile = allowing_only_allowed_test(w, port);
        let out = run_python(w, &profile, &script("allowed.test"));
        let said = ran(&out);
        assert!(said.contains("first answered"), "{said}\n{}", stderr(&out));
        assert!(said.contains("second closed"), "{said}\n{}", stderr(&out));
        assert!(
            stderr(&out).contains("a later request asked for denied.test"),
            "{}",
            stderr(&out)
        );
    }
);

both_modes!(
    a_flood_of_refused_attempts_is_counted_not_logged_one_by_one,
    |w: &World| {
        let profile = w.profile("[network]\nallow = [\"allowed.test\"]\n");
        let script = "import socket\n\
                  refused = 0\n\
                  for i in range(3000):\n\
                  \x20   try: socket.create_connection(('10.9.9.9', 80), timeout=2)\n\
                  \x20   except OSError: refused += 1\n\
                  print('refused', refused)\n";
        let out = run_python(w, &profile, script);
        assert!(ran(&out).contains("refused 3000"), "{}", stderr(&out));
        // Said once, at the end, with the count.
        let said = stderr(&out);
        let notices: Vec<&str> = said
            .lines()
            .filter(|line| line.contains("10.9.9.9:80"))
            .collect();
        assert_eq!(
            notices,
            ["airlock: refused 10.9.9.9:80 (3000×) — private address 10.9.9.9: allowed only when an allow entry names it"],
            "{}",
            stderr(&out)
        );
        // Every attempt is accounted for: written one by one, or counted in a summary.
        let log = stdout(
            &w.airlock()
                .args(["log", "--action", "net", "--json"])
                .output()
                .unwrap(),
        );
        let (mut written, mut counted) = (0u64, 0u64);
        for line in log.lines() {
            let record: serde_json::Value = serde_json::from_str(line).unwrap();
            match record["action"].as_str() {
                Some("net.connect") if record["ip"] == "10.9.9.9" => written += 1,
                Some("net.suppressed") => {
                    for event in record["top"].as_array().unwrap() {
                        if event["ip"] == "10.9.9.9" {
                            counted += event["count"].as_u64().unwrap();
                        }
                    }
                }
                _ => {}
            }
        }
        assert_eq!(
            written + counted,
            3000,
            "{written} written, {counted} counted"
        );
        assert!(
            written < 50,
            "{written} records for one refused destination"
        );
    }
);

both_modes!(an_allowed_name_is_reached_over_ipv6, |w: &World| {
    // A server on the host's IPv6 loopback only.
    let v6 = python_server(
        "import http.server, socket\n\
         class H(http.server.BaseHTTPRequestHandler):\n\
         \x20   def do_GET(self):\n\
         \x20       self.send_response(200); self.send_header('Content-Length', '13'); self.end_headers()\n\
         \x20       self.wfile.write(b'hello over v6')\n\
         \x20   def log_message(self, *a): pass\n\
         class S(http.server.ThreadingHTTPServer):\n\
         \x20   address_family = socket.AF_INET6\n\
         s = S(('::1', 0), H)\n\
         print(s.server_address[1], flush=True)\n\
         s.serve_forever()\n",
        &[],
    );
    let port = v6.port;
    let outside = fetched_without_airlock(w, &format!("http://[::1]:{port}/"));
    assert!(outside.contains("hello over v6"), "{outside}");
    let profile = w.profile(&format!("[network]\nallow = [\"v6.test:{port}\"]\n"));
    let script = format!(
        r#"{ATTEMPT}
attempt("by-name", lambda: urllib.request.urlopen("http://v6.test:{port}/", timeout=5).read())
attempt("by-name-direct", lambda: socket.create_connection(("v6.test", {port}), timeout=5) and "connected")
attempt("bare-v6", lambda: socket.create_connection(("2606:4700::1111", 443), timeout=5))
attempt("metadata-v6", lambda: socket.create_connection(("fd00:ec2::254", 80), timeout=5))
def short_sockaddr():
    # The 24-byte sockaddr_in6 of RFC 2133 (no scope id), which the kernel accepts.
    import ctypes, struct
    libc = ctypes.CDLL(None, use_errno=True)
    s = socket.socket(socket.AF_INET6)
    ip = socket.getaddrinfo("v6.test", {port}, socket.AF_INET6)[0][4][0]
    sa = struct.pack("=H", socket.AF_INET6) + struct.pack("!HI", {port}, 0) + socket.inet_pton(socket.AF_INET6, ip)
    if libc.connect(s.fileno(), sa, 24) != 0:
        raise OSError(ctypes.get_errno(), "connect")
    s.sendall(b"GET / HTTP/1.0\r\nHost: v6.test:{port}\r\n\r\n")
    return s.recv(100)[:15]
attempt("short-sockaddr", short_sockaddr)
def v6_only():
    # A socket that may not reach IPv4-mapped addresses; the gate's relay is one.
    s = socket.socket(socket.AF_INET6)
    s.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    s.settimeout(5)
    s.connect((socket.getaddrinfo("v6.test", {port}, socket.AF_INET6)[0][4][0], {port}))
    s.sendall(b"GET / HTTP/1.0\r\nHost: v6.test:{port}\r\n\r\n")
    return s.recv(100)[:15]
attempt("v6-only", v6_only)
"#
    );
    let out = run_python_resolving(w, &profile, &["v6.test=::1"], &script);
    let said = ran(&out);
    assert!(
        said.contains("by-name REACHED b'hello over v6'"),
        "{said}\n{}",
        stderr(&out)
    );
    assert!(said.contains("by-name-direct REACHED connected"), "{said}");
    assert!(
        said.contains("v6-only REACHED b'HTTP/1.0 200 OK'"),
        "{said}\n{}",
        stderr(&out)
    );
    assert!(said.contains("bare-v6 blocked"), "{said}");
    assert!(said.contains("metadata-v6 blocked"), "{said}");
    assert!(
        said.contains("short-sockaddr REACHED b'HTTP/1.0 200 OK'"),
        "{said}\n{}",
        stderr(&out)
    );
});

both_modes!(
    a_connect_the_gate_cannot_read_is_refused_and_logged,
    |w: &World| {
        // connect() with an address the process cannot have (an unmapped pointer): the gate cannot
        // read it, so it cannot decide; the connect is refused and the attempt is in the log.
        let profile = w.profile("[network]\nallow = [\"allowed.test\"]\n");
        let script = "import ctypes, socket\n\
                  libc = ctypes.CDLL(None, use_errno=True)\n\
                  s = socket.socket()\n\
                  rc = libc.connect(s.fileno(), ctypes.c_void_p(8), 16)\n\
                  print('rc', rc, ctypes.get_errno())\n";
        let out = run_python(w, &profile, script);
        assert!(
            ran(&out).contains("rc -1 111"), // ECONNREFUSED
            "{}{}",
            ran(&out),
            stderr(&out)
        );
        assert!(
            stderr(&out).contains("could not read or answer this connect"),
            "{}",
            stderr(&out)
        );
        let log = stdout(
            &w.airlock()
                .args(["log", "--action", "net.connect", "--json"])
                .output()
                .unwrap(),
        );
        assert!(
            log.contains("could not read or answer this connect"),
            "{log}"
        );
    }
);

both_modes!(
    an_upgrade_is_followed_only_if_the_server_switches,
    |w: &World| {
        // A server that switches to an echo protocol when asked for "Upgrade: echo", and otherwise
        // answers each request with the host it asked for, dropping whatever else came in the same
        // read as the request (as Node does with a declined upgrade).
        let server = python_server(
            r#"
import socket, threading
s = socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(16)
print(s.getsockname()[1], flush=True)
def serve(c):
    data = b""
    while True:
        while b"\r\n\r\n" not in data:
            chunk = c.recv(65536)
            if not chunk: return
            data += chunk
        head = data.split(b"\r\n\r\n")[0].decode("latin1")
        data = b""
        host = [l.split(":", 1)[1].strip() for l in head.split("\r\n") if l.lower().startswith("host:")]
        if "upgrade: echo" in head.lower() and "/switch" in head:
            c.sendall(b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: echo\r\n\r\n")
            while True:
                chunk = c.recv(65536)
                if not chunk: return
                c.sendall(chunk)
        body = ("served " + (host[0] if host else "?")).encode()
        c.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % len(body) + body)
while True:
    c, _ = s.accept(); threading.Thread(target=serve, args=(c,), daemon=True).start()
"#,
            &[],
        );
        let port = server.port;
        let script = |connect: &str| {
            format!(
                r#"
import socket, time
def talk(path, connect="{connect}"):
    s = socket.create_connection((connect, {port}), timeout=5)
    up = b"GET " + path + b" HTTP/1.1\r\nHost: allowed.test\r\nUpgrade: echo\r\nConnection: Upgrade\r\n\r\n"
    s.sendall(up + b"\x81\x85abcdhello")
    first = s.recv(65536)
    if b"101" in first and b"hello" not in first:
        # The frame sent with the request comes back once switched, with nothing more sent.
        try: first += s.recv(65536)
        except Exception: pass
    time.sleep(0.3)
    s.sendall(b"GET / HTTP/1.1\r\nHost: denied.test\r\n\r\n")
    try: later = s.recv(65536)
    except Exception: later = b""
    return first, later
first, later = talk(b"/switch")
print("switch", b"101" in first, b"hello" in first, b"denied.test" in later)
first, later = talk(b"/declined")
print("declined", b"served allowed.test" in first, "SERVED-DENIED" if b"served denied.test" in later else "refused")
"#
            )
        };
        // Without airlock the declined upgrade lets the later request through.
        let outside = python_outside(w, &script("127.0.0.1"));
        assert!(
            stdout(&outside).contains("declined True SERVED-DENIED"),
            "{}{}",
            stdout(&outside),
            stderr(&outside)
        );
        let profile = allowing_only_allowed_test(w, port);
        let out = run_python(w, &profile, &script("allowed.test"));
        let said = ran(&out);
        // Switched: the echo protocol passes unread (the "request" after it is only echoed bytes).
        assert!(
            said.contains("switch True True True"),
            "{said}\n{}",
            stderr(&out)
        );
        // Declined: what follows is a request like any, and refused.
        assert!(
            said.contains("declined True refused"),
            "{said}\n{}",
            stderr(&out)
        );
    }
);

both_modes!(a_port_probe_is_not_a_refusal, |w: &World| {
    // Connect and close without a word, as `nc -z` and wait-for-port scripts do: allowed, and
    // nothing refused (the gate once reported each as "neither side said anything").
    let http = server(None);
    let port = http.port;
    let profile = allowing_only_allowed_test(w, port);
    let script = format!(
        "import socket\n\
         for _ in range(5):\n\
         \x20   socket.create_connection(('allowed.test', {port}), timeout=5).close()\n\
         print('probed')\n"
    );
    let out = run_python(w, &profile, &script);
    assert!(ran(&out).contains("probed"), "{}", stderr(&out));
    assert!(!stderr(&out).contains("refused"), "{}", stderr(&out));
    let log = stdout(
        &w.airlock()
            .args(["log", "--action", "net.fronting", "--json"])
            .output()
            .unwrap(),
    );
    assert!(log.trim().is_empty(), "{log}");
});

both_modes!(a_silent_server_does_not_hold_the_runs_end, |w: &World| {
    // A server that accepts and never answers. The program gives up and exits; the run's end
    // closes both sides of the relayed connection, so its last event is written, not lost.
    let silent = python_server(
        "import socket, time\n\
         s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(16)\n\
         print(s.getsockname()[1], flush=True)\n\
         held = []\n\
         while True:\n\
         \x20   c, _ = s.accept(); held.append(c)\n",
        &[],
    );
    let port = silent.port;
    let profile = allowing_only_allowed_test(w, port);
    let script = format!(
        "import socket\n\
         s = socket.create_connection(('allowed.test', {port}), timeout=5)\n\
         s.sendall(b'GET / HTTP/1.1\\r\\nHost: allowed.test\\r\\n\\r\\n')\n\
         s.settimeout(0.5)\n\
         try: s.recv(100)\n\
         except OSError: print('gave up')\n"
    );
    let out = run_python(w, &profile, &script);
    assert!(ran(&out).contains("gave up"), "{}", stderr(&out));
    let log = stdout(
        &w.airlock()
            .args(["log", "--action", "net.closed", "--json"])
            .output()
            .unwrap(),
    );
    assert!(
        log.contains(&format!("\"port\":{port}")),
        "no closed event: {log}"
    );
});

both_modes!(the_proxy_serves_one_request_per_connection, |w: &World| {
    // curl honours the HTTP_PROXY airlock sets and reuses its proxy connection for the next URL,
    // to the same host or another: each request must reach its server in origin form.
    let http = server(None);
    let port = http.port;
    let profile = w.profile(&format!(
        "[network]\nallow = [\"allowed.test:{port}\", \"other.test:{port}\"]\n"
    ));
    let out = w
        .airlock()
        .args([
            "run",
            "--profile-file",
            &profile,
            "--resolve",
            "allowed.test=127.0.0.1",
            "--resolve",
            "other.test=127.0.0.1",
            "--workspace",
        ])
        .arg(&w.workspace)
        .args(["--", "curl", "-s", "-w", "%{http_code} "])
        .args(["-o", "/dev/null", "-o", "/dev/null", "-o", "/dev/null"])
        .arg(format!("http://allowed.test:{port}/a"))
        .arg(format!("http://allowed.test:{port}/b"))
        .arg(format!("http://other.test:{port}/c"))
        .output()
        .unwrap();
    assert_eq!(stdout(&out), "200 200 200 ", "{}", stderr(&out));
});

both_modes!(first_bytes_that_name_no_host_pass_at_once, |w: &World| {
    // git's own protocol (git://) starts with a pkt-line and no newline; a client may also say
    // a word and close its side. Neither waits for an HTTP head that never comes.
    let repo = w.base.join("srv/repo.git");
    let git = |args: &[&str], dir: &std::path::Path| {
        let out = Command::new("git")
            .args(args)
            .current_dir(dir)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {}", stderr(&out));
    };
    std::fs::create_dir_all(&repo).unwrap();
    git(&["init", "-q", "--bare"], &repo);
    git(&["symbolic-ref", "HEAD", "refs/heads/main"], &repo);
    let work = w.base.join("srv/work");
    std::fs::create_dir_all(&work).unwrap();
    git(&["init", "-q"], &work);
    std::fs::write(work.join("README"), "over git://\n").unwrap();
    git(&["add", "README"], &work);
    git(
        &[
            "-c",
            "user.name=t",
            "-c",
            "user.email=t@t",
            "commit",
            "-qm",
            "one",
        ],
        &work,
    );
    git(
        &["push", "-q", repo.to_str().unwrap(), "HEAD:refs/heads/main"],
        &work,
    );
    let port = {
        let probe = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        probe.local_addr().unwrap().port()
    };
    let base = w.base.join("srv");
    // git-daemon itself, not `git daemon`, which would leave it running when killed.
    let exec_path = stdout(&Command::new("git").arg("--exec-path").output().unwrap());
    let daemon = Command::new(std::path::Path::new(exec_path.trim()).join("git-daemon"))
        .args(["--listen=127.0.0.1", "--reuseaddr", "--export-all"])
        .arg(format!("--port={port}"))
        .arg(format!("--base-path={}", base.display()))
        .arg(&base)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    // Killed when the test ends, passed or not.
    let _daemon = KilledOnDrop(daemon);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(
            std::time::Instant::now() < deadline,
            "git daemon did not start"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    }
    let echo = python_server(
        "import socket, threading\n\
         s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(16)\n\
         print(s.getsockname()[1], flush=True)\n\
         def serve(c):\n\
         \x20   data = b''\n\
         \x20   while True:\n\
         \x20       chunk = c.recv(65536)\n\
         \x20       if not chunk: break\n\
         \x20       data += chunk\n\
         \x20   c.sendall(b'got ' + data); c.close()\n\
         while True:\n\
         \x20   c, _ = s.accept(); threading.Thread(target=serve, args=(c,)).start()\n",
        &[],
    );
    let profile = w.profile(&format!(
        "[network]\nallow = [\"allowed.test:{port}\", \"allowed.test:{}\"]\n",
        echo.port
    ));
    let script = format!(
        "import socket, subprocess\n\
         r = subprocess.run(['git', 'clone', '-q', 'git://allowed.test:{port}/repo.git', '/tmp/c'], capture_output=True, timeout=30)\n\
         print('clone', r.returncode, open('/tmp/c/README').read().strip() if r.returncode == 0 else r.stderr)\n\
         s = socket.create_connection(('allowed.test', {}), timeout=5)\n\
         s.sendall(b'hello'); s.shutdown(socket.SHUT_WR)\n\
         print('echo', s.recv(100))\n",
        echo.port
    );
    let out = run_python(w, &profile, &script);
    let said = ran(&out);
    assert!(
        said.contains("clone 0 over git://"),
        "{said}\n{}",
        stderr(&out)
    );
    assert!(
        said.contains("echo b'got hello'"),
        "{said}\n{}",
        stderr(&out)
    );
});

both_modes!(
    a_server_that_greets_late_is_still_a_server_first_protocol,
    |w: &World| {
        // An SSH-like server that greets 11 s after the connection (a loaded server, an SMTP
        // greet delay): its banner reaches the client. The gate once watched the server only for
        // the first 10 s, then waited for the client alone and closed the connection.
        let slow = python_server(
            "import socket, threading, time\n\
         s = socket.socket(); s.bind(('127.0.0.1', 0)); s.listen(16)\n\
         print(s.getsockname()[1], flush=True)\n\
         def serve(c):\n\
         \x20   time.sleep(11); c.sendall(b'SSH-2.0-late\\r\\n'); time.sleep(5)\n\
         while True:\n\
         \x20   c, _ = s.accept(); threading.Thread(target=serve, args=(c,)).start()\n",
            &[],
        );
        let port = slow.port;
        let profile = allowing_only_allowed_test(w, port);
        let script = format!(
            "import socket\n\
         s = socket.create_connection(('allowed.test', {port}), timeout=30)\n\
         print('banner', s.recv(100))\n"
        );
        let out = run_python(w, &profile, &script);
        assert!(
            ran(&out).contains("banner b'SSH-2.0-late\\r\\n'"),
            "{}{}",
            ran(&out),
            stderr(&out)
        );
    }
);

both_modes!(
    programs_serve_each_other_on_the_sandboxs_own_loopback,
    |w: &World| {
        // With a network profile, a test suite's local server works inside: bind, listen and
        // connect on the sandbox's own loopback (v4 and v6). The host's loopback stays out of reach.
        let http = server(None);
        let profile = w.profile("[network]\nallow = [\"allowed.test\"]\n");
        let script = format!(
        "import socket\n\
         for family, host in ((socket.AF_INET, '127.0.0.1'), (socket.AF_INET6, '::1')):\n\
         \x20   s = socket.socket(family); s.bind((host, 0)); s.listen()\n\
         \x20   c = socket.create_connection((host, s.getsockname()[1]), timeout=5)\n\
         \x20   a, _ = s.accept(); c.sendall(b'hi'); print(host, 'served', a.recv(2))\n\
         try:\n\
         \x20   socket.create_connection(('127.0.0.1', {}), timeout=3); print('host loopback REACHED')\n\
         except OSError as e: print('host loopback blocked', type(e).__name__)\n",
        http.port
    );
        let out = run_python(w, &profile, &script);
        let said = ran(&out);
        assert!(
            said.contains("127.0.0.1 served b'hi'"),
            "{said}{}",
            stderr(&out)
        );
        assert!(said.contains("::1 served b'hi'"), "{said}{}", stderr(&out));
        assert!(
            said.contains("host loopback blocked"),
            "{said}{}",
            stderr(&out)
        );
    }
);

both_modes!(
    a_destination_that_is_not_there_is_not_taken_for_one_that_is,
    |w: &World| {
        // A closed port on an allowed name: through the proxy the client gets a 502 that says so
        // (not "established" or an empty reply); by name, its connect is refused as it would be
        // directly, blocking or not; either way the failure is in the log.
        // Bound but not listening: connects to it are refused, and no other test's server can
        // take the port meanwhile.
        use nix::sys::socket::{bind, getsockname, socket, AddressFamily, SockFlag, SockType};
        use std::os::fd::AsRawFd;
        let holder = socket(
            AddressFamily::Inet,
            SockType::Stream,
            SockFlag::empty(),
            None,
        )
        .unwrap();
        bind(
            holder.as_raw_fd(),
            &nix::sys::socket::SockaddrIn::new(127, 0, 0, 1, 0),
        )
        .unwrap();
        let closed = getsockname::<nix::sys::socket::SockaddrIn>(holder.as_raw_fd())
            .unwrap()
            .port();
        let profile = w.profile(&format!("[network]\nallow = [\"allowed.test:{closed}\"]\n"));
        let script = format!(
        "import socket, subprocess\n\
         r = subprocess.run(['curl', '-s', '-o', '/dev/null', '-w', '%{{http_code}}', 'http://allowed.test:{closed}/'], capture_output=True)\n\
         print('proxy', r.stdout.decode())\n\
         r = subprocess.run(['curl', '-s', '-p', '-o', '/dev/null', '-w', '%{{http_connect}}', 'http://allowed.test:{closed}/'], capture_output=True)\n\
         print('tunnel', r.stdout.decode())\n\
         try: socket.create_connection(('allowed.test', {closed}), timeout=5); print('direct connected')\n\
         except OSError as e: print('direct', type(e).__name__)\n\
         s = socket.socket()\n\
         try: s.connect(('allowed.test', {closed})); print('blocking connected')\n\
         except OSError as e: print('blocking', type(e).__name__)\n"
    );
        let out = run_python(w, &profile, &script);
        let said = ran(&out);
        assert!(said.contains("proxy 502"), "{said}{}", stderr(&out));
        assert!(said.contains("tunnel 502"), "{said}{}", stderr(&out));
        assert!(
            said.contains("direct ConnectionRefusedError")
                && said.contains("blocking ConnectionRefusedError"),
            "{said}{}",
            stderr(&out)
        );
        let log = stdout(
            &w.airlock()
                .args(["log", "--action", "net.failed", "--json"])
                .output()
                .unwrap(),
        );
        assert!(log.contains("did not take the connection"), "{log}");
    }
);

both_modes!(
    names_are_looked_up_when_the_sandbox_asks_for_them,
    |w: &World| {
        // The gate asks the host's resolver when the sandbox's DNS query comes (the program's
        // resolver waits, not its connect): a name the host cannot resolve is a DNS error in the
        // sandbox (it was a synthetic address, then a refused connect), and one it can is reached.
        // The host's resolver is given its own hosts file in a private mount namespace.
        if support::skip_unless_root("needs root to give airlock its own /etc/hosts") {
            return;
        }
        let http = server(None);
        let port = http.port;
        let hosts = w.base.join("hosts");
        // dual.test: ::1 first, where nothing listens; the gate goes on to 127.0.0.1, as a
        // program connecting directly would.
        std::fs::write(
            &hosts,
            "127.0.0.1 localhost\n127.0.0.1 hostonly.test\n::1 dual.test\n127.0.0.1 dual.test\n",
        )
        .unwrap();
        let resolv = w.base.join("resolv.conf");
        std::fs::write(
            &resolv,
            "nameserver 127.0.0.1\noptions timeout:1 attempts:1\n",
        )
        .unwrap();
        let profile = w.profile(&format!(
            "[network]\nallow = [\"hostonly.test:{port}\", \"dual.test:{port}\", \"nohost.test\", \"127.0.0.1\", \"::1\"]\n"
        ));
        let script = format!(
        "import socket, urllib.request\n\
         try: socket.getaddrinfo('nohost.test', 80); print('nohost resolved')\n\
         except socket.gaierror: print('nohost gaierror')\n\
         print('hostonly', urllib.request.urlopen('http://hostonly.test:{port}/', timeout=5).read())\n\
         s = socket.create_connection(('dual.test', {port}), timeout=5)\n\
         s.sendall(b'GET / HTTP/1.1\\r\\nHost: dual.test\\r\\nConnection: close\\r\\n\\r\\n')\n\
         print('dual', b''.join(iter(lambda: s.recv(4096), b'')).endswith(b'hello from host'))\n"
    );
        let mut airlock = w.airlock();
        airlock
            .args(["run", "--profile-file", &profile, "--workspace"])
            .arg(&w.workspace)
            .args(["--", "/usr/bin/python3", "-c", &script]);
        let out = Command::new("unshare")
        .args([
            "-m",
            "sh",
            "-c",
            "mount --bind \"$1\" /etc/hosts && mount --bind \"$2\" /etc/resolv.conf && shift 2 && exec \"$@\"",
            "sh",
        ])
        .arg(&hosts)
        .arg(&resolv)
        .arg(airlock.get_program())
        .args(airlock.get_args())
        .envs(airlock.get_envs().filter_map(|(k, v)| v.map(|v| (k, v))))
        .output()
        .unwrap();
        let said = ran(&out);
        assert!(said.contains("nohost gaierror"), "{said}{}", stderr(&out));
        assert!(
            said.contains("hostonly b'hello from host'"),
            "{said}{}",
            stderr(&out)
        );
        assert!(said.contains("dual True"), "{said}{}", stderr(&out));
    }
);

both_modes!(
    requests_dressed_as_other_protocols_are_still_checked,
    |w: &World| {
        // From the fourth review: each of these reached another host's page on some server (Go's
        // net/http, Python's http.server / Werkzeug) while the gate took it for "not HTTP".
        let http = server(None);
        let port = http.port;
        let profile = allowing_only_allowed_test(w, port);
        let script = format!(
            r#"{ATTEMPT}
def send(data, half_close=False):
    s = socket.create_connection(("allowed.test", {port}), timeout=5)
    s.sendall(data)
    if half_close: s.shutdown(socket.SHUT_WR)
    reply = b"".join(iter(lambda: s.recv(4096), b""))
    if not reply: raise ConnectionError("closed without an answer")
    return reply[:12]
attempt("git-method", lambda: send(b"0032git-x / HTTP/1.1\r\nHost: denied.test\r\nConnection: close\r\n\r\n"))
attempt("half-closed", lambda: send(b"GET http://denied.test:{port}/ HTTP/1.1", True))
attempt("http09-headers", lambda: send(b"GET /\r\nHost: denied.test\r\n\r\n"))
attempt("http09-absolute", lambda: send(b"GET http://denied.test:{port}/\r\n\r\n"))
attempt("plain", lambda: send(b"GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n"))
"#
        );
        let out = run_python(w, &profile, &script);
        let said = ran(&out);
        for label in [
            "git-method",
            "half-closed",
            "http09-headers",
            "http09-absolute",
        ] {
            assert!(
                said.contains(&format!("{label} blocked")),
                "{label}: {said}\n{}",
                stderr(&out)
            );
        }
        assert!(
            said.contains("plain REACHED b'HTTP/1.1 200'"),
            "{said}\n{}",
            stderr(&out)
        );
    }
);

// `airlock learn`: a trial run with the network open, recorded; the profile it writes lets the
// same command through and refuses any other host, which the default profile (no network) and
// an open one (everything) do not tell apart. A learning run keeps private and metadata
// addresses refused; --extend adds a second run's host.
both_modes!(
    a_learned_profile_lets_that_command_through_and_nothing_else,
    |w: &World| {
        let http = server(None);
        let port = http.port;
        let fetch = |host: &str| {
            format!(
                "{ATTEMPT}\nattempt(\"{host}\", lambda: urllib.request.urlopen(\"http://{host}:{port}/\", timeout=5).read())\n"
            )
        };
        let metadata = "attempt(\"metadata\", lambda: socket.create_connection((\"169.254.169.254\", 80), timeout=3))\n";
        let resolving = [
            "--resolve",
            "pkgs.test=127.0.0.1",
            "--resolve",
            "other.test=127.0.0.1",
        ];
        // Under the default profile the fetch is refused: there is something to learn.
        let before = w
            .airlock()
            .args(["run"])
            .args(resolving)
            .args(["--", "/usr/bin/python3", "-c", &fetch("pkgs.test")])
            .output()
            .unwrap();
        assert!(
            ran(&before).contains("pkgs.test blocked"),
            "{}",
            ran(&before)
        );

        let learned = w.outside.join("learned.toml");
        let learn = |extra: &[&str], script: &str| {
            w.airlock()
                .arg("learn")
                .args(resolving)
                .args(extra)
                .args(["--", "/usr/bin/python3", "-c", script])
                .output()
                .unwrap()
        };
        let out = learn(
            &["--out", learned.to_str().unwrap()],
            &format!("{}{metadata}", fetch("pkgs.test")),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        assert!(ran(&out).contains("pkgs.test REACHED"), "{}", ran(&out));
        assert!(ran(&out).contains("metadata blocked"), "{}", ran(&out));
        let text = std::fs::read_to_string(&learned).unwrap();
        assert!(
            text.contains(&format!("\"pkgs.test:{port}\", # 1 connection by python3")),
            "{text}"
        );
        assert!(!text.contains("\"169.254"), "{text}");
        assert!(
            stderr(&out).contains("learned: 1 host reached"),
            "{}",
            stderr(&out)
        );
        let check = w
            .airlock()
            .args(["policy", "check", learned.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(check.status.success(), "{}", stderr(&check));
        // --out never overwrites.
        let again = learn(&["--out", learned.to_str().unwrap()], "pass");
        assert_eq!(again.status.code(), Some(125), "{}", stderr(&again));

        let under = |host: &str| {
            let out = w
                .airlock()
                .args(["run", "--profile-file", learned.to_str().unwrap()])
                .args(resolving)
                .args(["--", "/usr/bin/python3", "-c", &fetch(host)])
                .output()
                .unwrap();
            ran(&out)
        };
        assert!(under("pkgs.test").contains("pkgs.test REACHED"));
        assert!(under("other.test").contains("other.test blocked"));

        // A second run extends it.
        let out = learn(
            &["--extend", learned.to_str().unwrap()],
            &fetch("other.test"),
        );
        assert!(out.status.success(), "{}", stderr(&out));
        let text = std::fs::read_to_string(&learned).unwrap();
        assert!(text.contains(&format!("\"pkgs.test:{port}\"")), "{text}");
        assert!(text.contains(&format!("\"other.test:{port}\"")), "{text}");
        assert!(under("other.test").contains("other.test REACHED"));

        // Each learning run is on record as such, its network open.
        let log = stdout(
            &w.airlock()
                .args(["log", "--action", "run.learn", "--json"])
                .output()
                .unwrap(),
        );
        assert_eq!(log.lines().count(), 2, "{log}"); // the refused --out ran nothing
        assert!(log.contains("\"mode\":\"open\""), "{log}");
    }
);

// The gate connects an allowed connect's socket to its relay itself: the address the program
// passed is left as it was. (It was rewritten with the relay's before, in the program's memory;
// apt keeps that address and connects to it again later, and reached a relay address that was
// gone: `apt-get update` failed after its first file.)
both_modes!(
    a_programs_own_address_is_left_as_it_passed_it,
    |w: &World| {
        let http = server(None);
        let port = http.port;
        let profile = allowing_only_allowed_test(w, port);
        let script = format!(
            r#"
import ctypes, socket
libc = ctypes.CDLL(None, use_errno=True)
ip = socket.getaddrinfo("allowed.test", {port}, socket.AF_INET)[0][4][0]
sockaddr = socket.AF_INET.to_bytes(2, "little") + ({port}).to_bytes(2, "big") + socket.inet_aton(ip) + bytes(8)
passed = ctypes.create_string_buffer(sockaddr, 16)
for attempt in range(2):
    s = socket.socket()
    rc = libc.connect(s.fileno(), passed, 16)
    print("connect", attempt, rc, ctypes.get_errno(), "same" if passed.raw == sockaddr else "rewritten")
    s.sendall(b"GET / HTTP/1.1\r\nHost: allowed.test\r\nConnection: close\r\n\r\n")
    answer = b""
    while chunk := s.recv(4096):
        answer += chunk
    print("answer", attempt, b"hello from host" in answer)
    s.close()
"#
        );
        let out = run_python(w, &profile, &script);
        let said = ran(&out);
        for attempt in 0..2 {
            assert!(
                said.contains(&format!("connect {attempt} 0 0 same")),
                "{said}\n{}",
                stderr(&out)
            );
            assert!(
                said.contains(&format!("answer {attempt} True")),
                "{said}\n{}",
                stderr(&out)
            );
        }
    }
);

// The command sends its lookups and exits at once, without waiting for an answer: each is still
// in the run's list when it ends (the gate's queue is drained before the result is written, not
// after the sandbox is torn down).
both_modes!(
    lookups_sent_just_before_the_end_are_not_lost,
    |w: &World| {
        let script = r#"
import socket, struct
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
for i in range(20):
    name = b"".join(bytes([len(p)]) + p for p in [b"gone%d" % i, b"example", b"test"]) + b"\0"
    s.sendto(struct.pack(">HHHHHH", i, 0x0100, 1, 0, 0, 0) + name + struct.pack(">HH", 1, 1), ("127.0.0.53", 53))
"#;
        let out = w
            .airlock()
            .args(["run", "--json", "--", "/usr/bin/python3", "-c", script])
            .output()
            .unwrap();
        let answer: serde_json::Value = serde_json::from_str(&stdout(&out)).unwrap();
        let refused = answer["refused"].as_array().cloned().unwrap_or_default();
        assert_eq!(refused.len(), 20, "{answer}");
    }
);
