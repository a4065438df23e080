//! Servers a test starts on the host's loopback, and the python runs inside that reach them by
//! name (`--resolve NAME=127.0.0.1`).

use std::ffi::OsStr;
use std::io::BufRead;
use std::path::Path;
use std::process::{Child, ChildStdout, Command, Output, Stdio};

use super::World;

/// A process the test started, killed when dropped, whether the test passed or not.
pub struct KilledOnDrop(pub Child);

impl Drop for KilledOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A server started by the test, killed when dropped.
pub struct Server {
    _process: KilledOnDrop,
    pub port: u16,
    /// What it prints after its port.
    pub lines: std::io::BufReader<ChildStdout>,
}

/// Start `program` with `args`; it binds port 0 (so that no two servers of parallel tests can
/// race for one port), prints the port it got once it listens, and serves; killed when dropped.
pub fn start<S: AsRef<OsStr>>(program: &str, args: &[S]) -> Server {
    let mut child = Command::new(program)
        .args(args)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut lines = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut line = String::new();
    lines.read_line(&mut line).unwrap();
    let port = line
        .trim()
        .parse()
        .expect("the test server printed no port");
    Server {
        _process: KilledOnDrop(child),
        port,
        lines,
    }
}

/// [`start`] a python `script` with `args`.
pub fn python_server(script: &str, args: &[&OsStr]) -> Server {
    let mut all: Vec<&OsStr> = vec![OsStr::new("-c"), OsStr::new(script)];
    all.extend_from_slice(args);
    start("/usr/bin/python3", &all)
}

/// What ends every HTTPS server script of the tests: the handler class `H` served over TLS with
/// the certificate and key given as `sys.argv[1]` and `[2]`, its port printed.
const SERVE_H_OVER_TLS: &str = r#"
s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
ctx.load_cert_chain(sys.argv[1], sys.argv[2])
s.socket = ctx.wrap_socket(s.socket, server_side=True)
print(s.server_address[1], flush=True)
s.serve_forever()
"#;

/// [`python_server`] of `handler` (python that defines the class `H`, and may use `sys.argv[3]`,
/// the `log`), served over TLS with `cert` and `key`.
pub fn https_python_server(handler: &str, cert: &Path, key: &Path, log: &Path) -> Server {
    python_server(
        &format!("{handler}{SERVE_H_OVER_TLS}"),
        &[cert.as_os_str(), key.as_os_str(), log.as_os_str()],
    )
}

/// `script` in python3 inside, with `profile`, allowed.test and denied.test at 127.0.0.1.
pub fn run_python(w: &World, profile: &str, script: &str) -> Output {
    run_python_resolving(
        w,
        profile,
        &["allowed.test=127.0.0.1", "denied.test=127.0.0.1"],
        script,
    )
}

/// `script` in python3 inside, with `profile` and these `--resolve NAME=IP` entries.
pub fn run_python_resolving(w: &World, profile: &str, resolves: &[&str], script: &str) -> Output {
    let mut airlock = w.airlock();
    airlock.args(["run", "--profile-file", profile]);
    for entry in resolves {
        airlock.args(["--resolve", entry]);
    }
    airlock
        .arg("--workspace")
        .arg(&w.workspace)
        .args(["--", "/usr/bin/python3", "-c", script])
        .output()
        .unwrap()
}

/// A profile whose network allows allowed.test on `port`, and nothing else.
pub fn allowing_only_allowed_test(w: &World, port: u16) -> String {
    w.profile(&format!("[network]\nallow = [\"allowed.test:{port}\"]\n"))
}
