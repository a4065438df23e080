//! `airlock serve` as the API tests use it: the real server, started as the identity under test
//! on its default unix socket or on a loopback port, killed when dropped; tokens made with the
//! CLI; and a small blocking HTTP/1.1 client over std's sockets (no crate to hide what goes over
//! the wire: a test can stop reading, or hang up, when it chooses).

use std::io::{BufRead, BufReader, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::net::UnixStream;
use std::path::PathBuf;
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use nix::sys::signal::{kill, Signal};
use nix::unistd::Pid;
use serde_json::Value;

use super::{stderr, stdout, World};

/// Where a server listens.
#[derive(Debug, Clone)]
pub enum Addr {
    Unix(PathBuf),
    Tcp(SocketAddr),
}

/// A running `airlock serve`, killed (SIGKILL) when dropped if it is still running.
pub struct Server {
    child: Child,
    exited: Option<ExitStatus>,
    /// It speaks TLS (--tls-cert): not to this module's client.
    tls: bool,
    pub addr: Addr,
    /// Where its stderr goes.
    pub log: PathBuf,
}

impl Server {
    /// `airlock serve` on its default listener, STATE/airlock.sock, with `extra` arguments.
    pub fn start(w: &World, extra: &[&str]) -> Server {
        let socket = w.state.join("airlock.sock");
        let mut server = spawn(w, None, extra, Addr::Unix(socket));
        server.wait_until_ready();
        server
    }

    /// `airlock serve --listen 127.0.0.1:PORT` on a port that was free a moment ago (the server
    /// cannot be told to take any port: a port taken meanwhile is tried again with another).
    pub fn start_tcp(w: &World, extra: &[&str]) -> Server {
        for _ in 0..5 {
            let port = free_port();
            let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
            let mut server = spawn(w, Some(&addr.to_string()), extra, Addr::Tcp(addr));
            if server.try_until_ready() {
                return server;
            }
            let said = server.stderr();
            assert!(
                said.contains("cannot listen"),
                "airlock serve did not start: {said}"
            );
        }
        panic!("no free loopback port for airlock serve in five tries");
    }

    pub fn pid(&self) -> Pid {
        Pid::from_raw(self.child.id() as i32)
    }

    pub fn signal(&self, signal: Signal) {
        kill(self.pid(), signal).unwrap();
    }

    /// What the server wrote to stderr so far.
    pub fn stderr(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// Its exit status, once it ended: it must end `within`.
    pub fn wait(&mut self, within: Duration) -> ExitStatus {
        let deadline = Instant::now() + within;
        loop {
            if let Some(status) = self.poll_exit() {
                return status;
            }
            assert!(
                Instant::now() < deadline,
                "airlock serve did not exit within {within:?}: {}",
                self.stderr()
            );
            std::thread::sleep(Duration::from_millis(10));
        }
    }

    fn poll_exit(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().unwrap();
        }
        self.exited
    }

    fn wait_until_ready(&mut self) {
        assert!(
            self.try_until_ready(),
            "airlock serve did not start: {}",
            self.stderr()
        );
    }

    /// Poll GET /v1/health until it answers (true) or the server exits (false).
    fn try_until_ready(&mut self) -> bool {
        let deadline = Instant::now() + Duration::from_secs(20);
        let client = self.anonymous();
        while Instant::now() < deadline {
            if self.poll_exit().is_some() {
                return false;
            }
            if self.tls {
                // The test's client speaks no TLS: the server says when it listens.
                if self.stderr().contains("airlock: serving on") {
                    return true;
                }
            } else if let Ok(reply) = client.try_send("GET", "/v1/health", &[], b"") {
                assert_eq!(reply.status, 200, "health: {}", reply.text());
                return true;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        panic!(
            "airlock serve did not answer within 20 s: {}",
            self.stderr()
        );
    }

    /// A client that sends `token`.
    pub fn client(&self, token: &str) -> Client {
        Client {
            addr: self.addr.clone(),
            token: Some(token.to_string()),
        }
    }

    /// A client that sends no token.
    pub fn anonymous(&self) -> Client {
        Client {
            addr: self.addr.clone(),
            token: None,
        }
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if self.poll_exit().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// A loopback port nothing listened on a moment ago.
pub fn free_port() -> u16 {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    listener.local_addr().unwrap().port()
}

/// `airlock serve [--listen ADDR] extra…` as the identity under test, its stderr in a file.
fn spawn(w: &World, listen: Option<&str>, extra: &[&str], addr: Addr) -> Server {
    let mut serve = w.airlock();
    serve.arg("serve");
    if let Some(listen) = listen {
        serve.args(["--listen", listen]);
    }
    serve.args(extra);
    spawn_command(w, serve, extra.contains(&"--tls-cert"), addr)
}

/// `serve` started, its stdout to nowhere and its stderr in a file.
fn spawn_command(w: &World, mut serve: Command, tls: bool, addr: Addr) -> Server {
    let log = w.base.join(format!(
        "serve-{}.log",
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    ));
    let file = std::fs::File::create(&log).unwrap();
    let child = serve.stdout(Stdio::null()).stderr(file).spawn().unwrap();
    Server {
        child,
        exited: None,
        tls,
        addr,
        log,
    }
}

/// systemd's `systemd-socket-activate`, where Debian puts it.
pub const SOCKET_ACTIVATE: &str = "/usr/bin/systemd-socket-activate";

/// True when systemd-socket-activate is missing and the test must be skipped, having said so; in
/// CI (`CI=true`, or `AIRLOCK_TEST_REQUIRE_ROOT=1`) a missing one fails the test instead.
pub fn skip_without_socket_activate() -> bool {
    if std::path::Path::new(SOCKET_ACTIVATE).exists() {
        return false;
    }
    let ci = std::env::var_os("CI").is_some_and(|v| v == "true")
        || std::env::var_os("AIRLOCK_TEST_REQUIRE_ROOT").is_some_and(|v| v == "1");
    assert!(
        !ci,
        "{SOCKET_ACTIVATE} is missing, and CI must not skip the socket activation tests: apt-get install systemd"
    );
    eprintln!("skipped: {SOCKET_ACTIVATE} is missing (apt-get install systemd)");
    true
}

/// `systemd-socket-activate -l ADDR… airlock … serve extra…`: systemd's tool binds each ADDR (as
/// the test's own identity), and on the first connection execs the server as the identity under
/// test, the sockets passed as LISTEN_FDS. Not yet ready: the first connection starts it.
pub fn spawn_activated(w: &World, sockets: &[&str], extra: &[&str], addr: Addr) -> Server {
    let mut inner = w.airlock();
    inner.arg("serve").args(extra);
    let mut outer = Command::new(SOCKET_ACTIVATE);
    for socket in sockets {
        outer.args(["-l", socket]);
    }
    outer
        .arg("--")
        .arg(inner.get_program())
        .args(inner.get_args());
    outer.env_clear();
    for (name, value) in inner.get_envs() {
        if let Some(value) = value {
            outer.env(name, value);
        }
    }
    outer
        .current_dir(inner.get_current_dir().unwrap())
        .stdin(Stdio::null());
    spawn_command(w, outer, false, addr)
}

impl Server {
    /// [`spawn_activated`] on one socket, and ready: its first request started it.
    pub fn start_activated(w: &World, socket: &str, extra: &[&str], addr: Addr) -> Server {
        let mut server = spawn_activated(w, &[socket], extra, addr);
        server.wait_until_ready();
        server
    }

    /// `airlock serve` from a command the test made (its environment, its arguments), as
    /// [`Server::start`] on `addr`.
    pub fn start_command(w: &World, serve: Command, addr: Addr) -> Server {
        let mut server = spawn_command(w, serve, false, addr);
        server.wait_until_ready();
        server
    }
}

/// A token made with `airlock token create`: its id and the token.
pub struct Token {
    pub id: String,
    pub token: String,
}

/// `airlock token create --role ROLE extra… --json`.
pub fn make_token(w: &World, role: &str, extra: &[&str]) -> Token {
    let out = w
        .airlock()
        .args(["token", "create", "--role", role, "--json"])
        .args(extra)
        .output()
        .unwrap();
    assert!(out.status.success(), "token create: {}", stderr(&out));
    let text = stdout(&out);
    let mut lines = text.lines();
    let record: Value = serde_json::from_str(lines.next().unwrap()).unwrap();
    let token = lines.last().unwrap().to_string();
    assert_eq!(
        record["token"],
        token.as_str(),
        "the token is the last line"
    );
    Token {
        id: record["id"].as_str().unwrap().to_string(),
        token,
    }
}

/// An agent token of the default profile over the world's workspace.
pub fn agent_token(w: &World) -> Token {
    let workspace = w.workspace.to_str().unwrap();
    make_token(w, "agent", &["--workspace", workspace])
}

/// An operator token of the default profile, bound to no workspace.
pub fn operator_token(w: &World) -> Token {
    make_token(w, "operator", &[])
}

/// Every audit record, as `airlock log --json` reads them.
pub fn audit_log(w: &World) -> Vec<Value> {
    let out = w.airlock().args(["log", "--json"]).output().unwrap();
    assert!(out.status.success(), "log: {}", stderr(&out));
    stdout(&out)
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The audit records of `action`.
pub fn audit_of(w: &World, action: &str) -> Vec<Value> {
    audit_log(w)
        .into_iter()
        .filter(|r| r["action"] == action)
        .collect()
}

/// A blocking HTTP/1.1 client: one connection per request (`Connection: close`).
#[derive(Debug, Clone)]
pub struct Client {
    pub addr: Addr,
    pub token: Option<String>,
}

/// A whole answer.
#[derive(Debug)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: Vec<u8>,
}

impl Reply {
    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    #[track_caller]
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|e| panic!("not JSON ({e}): {} {}", self.status, self.text()))
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }
}

fn header<'a>(headers: &'a [(String, String)], name: &str) -> Option<&'a str> {
    headers
        .iter()
        .find(|(k, _)| k.eq_ignore_ascii_case(name))
        .map(|(_, v)| v.as_str())
}

/// Assert the answer is `status` with the error `code`, and a message that says something.
#[track_caller]
pub fn assert_refused(reply: &Reply, status: u16, code: &str) -> Value {
    let body = reply.json();
    assert_eq!(
        (reply.status, body["code"].as_str()),
        (status, Some(code)),
        "{body}"
    );
    let message = body["message"].as_str().unwrap_or_default();
    assert!(message.len() > 10, "a message that says why: {body}");
    body
}

/// Assert the answer is 2xx; its JSON.
#[track_caller]
pub fn assert_ok(reply: &Reply) -> Value {
    assert!(
        (200..300).contains(&reply.status),
        "{} {}",
        reply.status,
        reply.text()
    );
    reply.json()
}

/// Either kind of socket.
pub trait Conn: Read + Write + Send {
    /// Stop sending and receiving: the server sees the client gone.
    fn hang_up(&self);
}

impl Conn for UnixStream {
    fn hang_up(&self) {
        let _ = self.shutdown(std::net::Shutdown::Both);
    }
}

impl Conn for TcpStream {
    fn hang_up(&self) {
        let _ = self.shutdown(std::net::Shutdown::Both);
    }
}

/// How long a test waits for any one read before it fails (rather than hang).
const READ_TIMEOUT: Duration = Duration::from_secs(60);

impl Client {
    /// `GET path`.
    #[track_caller]
    pub fn get(&self, path: &str) -> Reply {
        self.send("GET", path, &[], b"")
    }

    /// `POST path` with a JSON body.
    #[track_caller]
    pub fn post(&self, path: &str, body: &Value) -> Reply {
        self.send("POST", path, &[], body.to_string().as_bytes())
    }

    #[track_caller]
    pub fn send(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Reply {
        self.try_send(method, path, headers, body)
            .unwrap_or_else(|e| panic!("{method} {path}: {e}"))
    }

    /// The request's answer, or why none came (no connection, say).
    pub fn try_send(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Reply> {
        let mut open = self.open(method, path, headers, body)?;
        let mut all = Vec::new();
        open.body.read_to_end(&mut all)?;
        Ok(Reply {
            status: open.status,
            headers: open.headers,
            body: all,
        })
    }

    /// A connection to the server.
    pub fn connect(&self) -> std::io::Result<Box<dyn Conn>> {
        Ok(match &self.addr {
            Addr::Unix(path) => {
                let stream = UnixStream::connect(path)?;
                stream.set_read_timeout(Some(READ_TIMEOUT))?;
                Box::new(stream)
            }
            Addr::Tcp(addr) => {
                let stream = TcpStream::connect(addr)?;
                stream.set_read_timeout(Some(READ_TIMEOUT))?;
                Box::new(stream)
            }
        })
    }

    /// Send `POST path` with a JSON body and read nothing: the connection, for the caller to
    /// hang up on while the server works on the request.
    pub fn post_unread(&self, path: &str, body: &Value) -> Box<dyn Conn> {
        let mut conn = self.connect().unwrap();
        let request = self.request("POST", path, &[], body.to_string().as_bytes());
        conn.write_all(&request).unwrap();
        conn
    }

    /// Send the request and read the answer's head; its body is read as the caller chooses.
    pub fn open(
        &self,
        method: &str,
        path: &str,
        headers: &[(&str, &str)],
        body: &[u8],
    ) -> std::io::Result<Open> {
        let mut conn = self.connect()?;
        let request = self.request(method, path, headers, body);
        // A server may answer (413, 401) and close before it read the whole body: its answer
        // is what counts, and the failed write only if there is none.
        let written = conn.write_all(&request).and_then(|()| conn.flush());
        let mut reader = BufReader::new(conn);
        let (status, headers) = match (read_head(&mut reader), written) {
            (Ok(head), _) => head,
            (Err(_), Err(e)) | (Err(e), Ok(())) => return Err(e),
        };
        let framing = match (
            header(&headers, "transfer-encoding"),
            header(&headers, "content-length"),
        ) {
            (Some(te), _) if te.eq_ignore_ascii_case("chunked") => Framing::Chunked(0),
            (_, Some(length)) => Framing::Length(length.trim().parse().map_err(invalid)?),
            _ => Framing::Eof,
        };
        Ok(Open {
            status,
            headers,
            body: BufReader::new(BodyReader { reader, framing }),
        })
    }

    /// The request's bytes: its head, then its body.
    fn request(&self, method: &str, path: &str, headers: &[(&str, &str)], body: &[u8]) -> Vec<u8> {
        let said = |name: &str| headers.iter().any(|(n, _)| n.eq_ignore_ascii_case(name));
        let mut head = format!("{method} {path} HTTP/1.1\r\nConnection: close\r\n");
        if !said("host") {
            // The name a client's URL gives: over TCP the server refuses names it does not know.
            let host = match &self.addr {
                Addr::Unix(_) => "localhost".to_string(),
                Addr::Tcp(addr) => addr.to_string(),
            };
            head.push_str(&format!("Host: {host}\r\n"));
        }
        if let Some(token) = &self.token {
            head.push_str(&format!("Authorization: Bearer {token}\r\n"));
        }
        if !body.is_empty() && !said("content-type") {
            head.push_str("Content-Type: application/json\r\n");
        }
        for (name, value) in headers {
            head.push_str(&format!("{name}: {value}\r\n"));
        }
        head.push_str(&format!("Content-Length: {}\r\n\r\n", body.len()));
        let mut request = head.into_bytes();
        request.extend_from_slice(body);
        request
    }

    /// `POST path` with a JSON body, its answer read line by line (NDJSON).
    #[track_caller]
    pub fn stream(&self, path: &str, body: &Value) -> Open {
        let open = self
            .open("POST", path, &[], body.to_string().as_bytes())
            .unwrap_or_else(|e| panic!("POST {path}: {e}"));
        assert_eq!(open.status, 200, "POST {path}");
        assert_eq!(
            open.header("content-type"),
            Some("application/x-ndjson"),
            "POST {path}"
        );
        open
    }
}

fn invalid(e: impl std::fmt::Display) -> std::io::Error {
    std::io::Error::new(std::io::ErrorKind::InvalidData, e.to_string())
}

fn read_head(
    reader: &mut BufReader<Box<dyn Conn>>,
) -> std::io::Result<(u16, Vec<(String, String)>)> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(std::io::Error::new(
            std::io::ErrorKind::UnexpectedEof,
            "the server closed the connection without an answer",
        ));
    }
    let status = line
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .ok_or_else(|| invalid(format!("not a status line: {line:?}")))?;
    let mut headers = Vec::new();
    loop {
        line.clear();
        reader.read_line(&mut line)?;
        let line = line.trim_end();
        if line.is_empty() {
            return Ok((status, headers));
        }
        let (name, value) = line
            .split_once(':')
            .ok_or_else(|| invalid(format!("not a header: {line:?}")))?;
        headers.push((name.trim().to_string(), value.trim().to_string()));
    }
}

/// An answer whose body is being read.
pub struct Open {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: BufReader<BodyReader>,
}

impl Open {
    pub fn header(&self, name: &str) -> Option<&str> {
        header(&self.headers, name)
    }

    /// The next NDJSON line; None at the end of the body.
    #[track_caller]
    pub fn next_line(&mut self) -> Option<Value> {
        let mut line = String::new();
        let n = self
            .body
            .read_line(&mut line)
            .unwrap_or_else(|e| panic!("reading the stream: {e}"));
        (n > 0).then(|| {
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("not JSON ({e}): {line:?}"))
        })
    }

    /// The lines up to the end.
    #[track_caller]
    pub fn rest(mut self) -> Vec<Value> {
        std::iter::from_fn(|| self.next_line()).collect()
    }

    /// Hang up without reading the rest.
    pub fn hang_up(self) {
        self.body.get_ref().reader.get_ref().hang_up();
    }
}

enum Framing {
    /// Chunked: bytes left in the current chunk (0: read the next size line).
    Chunked(u64),
    /// The last chunk was read.
    Done,
    Length(u64),
    Eof,
}

/// The body of an answer, its framing taken off.
pub struct BodyReader {
    reader: BufReader<Box<dyn Conn>>,
    framing: Framing,
}

impl Read for BodyReader {
    fn read(&mut self, buf: &mut [u8]) -> std::io::Result<usize> {
        loop {
            match self.framing {
                Framing::Done | Framing::Length(0) => return Ok(0),
                Framing::Eof => return self.reader.read(buf),
                Framing::Length(left) => {
                    let room = buf.len().min(left as usize);
                    let n = self.reader.read(&mut buf[..room])?;
                    if n == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    self.framing = Framing::Length(left - n as u64);
                    return Ok(n);
                }
                Framing::Chunked(0) => {
                    let mut line = String::new();
                    if self.reader.read_line(&mut line)? == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    let line = line.trim();
                    if line.is_empty() {
                        // The CRLF that ends the previous chunk.
                        continue;
                    }
                    let size = line.split(';').next().unwrap_or_default();
                    let size = u64::from_str_radix(size, 16).map_err(invalid)?;
                    self.framing = if size == 0 {
                        Framing::Done
                    } else {
                        Framing::Chunked(size)
                    };
                }
                Framing::Chunked(left) => {
                    let room = buf.len().min(left as usize);
                    let n = self.reader.read(&mut buf[..room])?;
                    if n == 0 {
                        return Err(std::io::ErrorKind::UnexpectedEof.into());
                    }
                    self.framing = Framing::Chunked(left - n as u64);
                    return Ok(n);
                }
            }
        }
    }
}
