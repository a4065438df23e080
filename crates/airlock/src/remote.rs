//! The CLI as a client of a running `airlock serve` (`--server URL` or `AIRLOCK_URL`, with the
//! token in `AIRLOCK_TOKEN`): the same commands, answered by the server's core instead of this
//! process's. Nothing is judged here either; the server's answer is printed.

use std::io::{IsTerminal, Read, Write};
use std::process::ExitCode;
use std::sync::Arc;

use airlock_core::bodies::{ApplyBody, ControlBody, NewSessionBody, NoFields, SwitchBody};
use airlock_core::{RunBody, RunEvent};
use anyhow::{bail, Context, Result};
use bytes::Bytes;
use http_body_util::{BodyExt, Full};
use hyper::{Method, Request, StatusCode};
use hyper_util::rt::TokioIo;
use serde_json::Value;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_rustls::rustls;

use crate::cli::Command;

/// Where the server is.
enum Target {
    Unix(std::path::PathBuf),
    Http { host: String, port: u16 },
    Https { host: String, port: u16 },
}

impl Target {
    fn parse(url: &str) -> Result<Target> {
        if let Some(path) = url.strip_prefix("unix:") {
            return Ok(Target::Unix(path.into()));
        }
        let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
            (true, rest)
        } else if let Some(rest) = url.strip_prefix("http://") {
            (false, rest)
        } else {
            bail!("--server {url:?}: give unix:PATH, http://HOST:PORT or https://HOST:PORT");
        };
        let authority = rest.trim_end_matches('/');
        let (host, port) = match authority.rsplit_once(':') {
            Some((host, port)) if !host.ends_with(']') || authority.contains("]:") => (
                host.trim_start_matches('[')
                    .trim_end_matches(']')
                    .to_string(),
                port.parse()
                    .with_context(|| format!("--server {url:?}: the port is not a number"))?,
            ),
            _ => (authority.to_string(), if tls { 443 } else { 80 }),
        };
        let loopback = host == "localhost"
            || host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback());
        if !tls && !loopback {
            // As the server refuses to listen beyond loopback without TLS: the token would cross
            // the network in clear text (to whoever answers at that address).
            bail!("--server {url:?}: not a loopback address, and http://: the token would cross the network in clear text — use https://{host}:{port}");
        }
        Ok(match tls {
            true => Target::Https { host, port },
            false => Target::Http { host, port },
        })
    }
}

impl Target {
    /// What the Host header says: the server checks it against DNS rebinding (a name it was not
    /// given with --host-name is refused over TCP), so it is the name the URL gave.
    fn host_header(&self) -> String {
        match self {
            Target::Unix(_) => "localhost".into(),
            Target::Http { host, port } | Target::Https { host, port } => {
                if host.contains(':') {
                    format!("[{host}]:{port}")
                } else {
                    format!("{host}:{port}")
                }
            }
        }
    }
}

/// Takes each line of a streamed answer as it comes.
type LineHandler<'a> = dyn FnMut(&[u8]) -> Result<()> + 'a;

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

pub struct Remote {
    target: Target,
    url: String,
    token: String,
}

/// The server to talk to, if one is named (and the command is not one answered here anyway).
pub fn from_args(server: Option<&str>, command: &Command) -> Result<Option<Remote>> {
    let here = matches!(
        command,
        Command::Check(_)
            | Command::Man(_)
            | Command::Completions(_)
            | Command::Complete(_)
            | Command::Serve(_)
            | Command::Review(_)
            | Command::Token(_)
            | Command::Policy(_)
            | Command::ClaudeCode(_)
            | Command::Codex(_)
            // An exported file is read here, and export and prune work on this machine's log.
            | Command::Log(crate::cli::LogArgs {
                command: Some(
                    crate::cli::LogCommand::Verify { from: Some(_), .. }
                        | crate::cli::LogCommand::Export { .. }
                        | crate::cli::LogCommand::Prune { .. }
                ),
                ..
            })
    );
    let Some(url) = server.filter(|_| !here) else {
        return Ok(None);
    };
    let token = std::env::var("AIRLOCK_TOKEN").context(
        "--server (AIRLOCK_URL) is set but AIRLOCK_TOKEN is not: put the token 'airlock token create' printed there",
    )?;
    Ok(Some(Remote {
        target: Target::parse(url)?,
        url: url.to_string(),
        token: token.trim().to_string(),
    }))
}

fn tls_connector() -> Result<tokio_rustls::TlsConnector> {
    let file = std::env::var_os("AIRLOCK_CA_FILE")
        .map(std::path::PathBuf::from)
        .unwrap_or_else(|| "/etc/ssl/certs/ca-certificates.crt".into());
    let pem = std::fs::File::open(&file).with_context(|| {
        format!(
            "cannot open {} (the CAs to check the server's certificate by; set AIRLOCK_CA_FILE)",
            file.display()
        )
    })?;
    let mut roots = rustls::RootCertStore::empty();
    for cert in rustls_pemfile::certs(&mut std::io::BufReader::new(pem)) {
        let cert = cert.with_context(|| format!("{}: not PEM", file.display()))?;
        let _ = roots.add(cert);
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .context("cannot set up TLS")?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

impl Remote {
    async fn connect(&self) -> Result<Box<dyn Io>> {
        let failed = || format!("cannot reach the airlock server at {}", self.url);
        Ok(match &self.target {
            Target::Unix(path) => Box::new(
                tokio::net::UnixStream::connect(path)
                    .await
                    .with_context(failed)?,
            ),
            Target::Http { host, port } => Box::new(
                tokio::net::TcpStream::connect((host.as_str(), *port))
                    .await
                    .with_context(failed)?,
            ),
            Target::Https { host, port } => {
                let tcp = tokio::net::TcpStream::connect((host.as_str(), *port))
                    .await
                    .with_context(failed)?;
                let name = rustls::pki_types::ServerName::try_from(host.clone())
                    .with_context(|| format!("--server: {host:?} is not a host name or address"))?;
                Box::new(
                    tls_connector()?
                        .connect(name, tcp)
                        .await
                        .with_context(failed)?,
                )
            }
        })
    }

    /// Send one request; the answer's status and body, read to its end unless `each_line` takes
    /// the lines of a streamed answer as they come.
    async fn send(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        accept: &str,
        each_line: Option<&mut LineHandler<'_>>,
    ) -> Result<(StatusCode, Vec<u8>)> {
        let (status, body, _) = self
            .send_for_headers(method, path, body, accept, each_line)
            .await?;
        Ok((status, body))
    }

    /// As [`Self::send`], with the answer's headers.
    async fn send_for_headers(
        &self,
        method: Method,
        path: &str,
        body: Option<Value>,
        accept: &str,
        mut each_line: Option<&mut LineHandler<'_>>,
    ) -> Result<(StatusCode, Vec<u8>, hyper::HeaderMap)> {
        let io = self.connect().await?;
        let (mut sender, connection) = hyper::client::conn::http1::handshake(TokioIo::new(io))
            .await
            .with_context(|| format!("cannot speak HTTP with {}", self.url))?;
        tokio::spawn(connection);
        let payload = body.map(|b| b.to_string()).unwrap_or_default();
        let request = Request::builder()
            .method(method)
            .uri(path)
            .header("host", self.target.host_header())
            .header("authorization", format!("Bearer {}", self.token))
            .header("content-type", "application/json")
            .header("accept", accept)
            .body(Full::new(Bytes::from(payload)))?;
        let mut response = sender
            .send_request(request)
            .await
            .with_context(|| format!("the airlock server at {} did not answer", self.url))?;
        let status = response.status();
        let headers = response.headers().clone();
        let mut all = Vec::new();
        let mut pending = Vec::new();
        while let Some(frame) = response.body_mut().frame().await {
            let frame = frame.with_context(|| format!("the answer from {} broke off", self.url))?;
            let Ok(data) = frame.into_data() else {
                continue;
            };
            match (&mut each_line, status.is_success()) {
                (Some(each), true) => {
                    pending.extend_from_slice(&data);
                    while let Some(end) = pending.iter().position(|&b| b == b'\n') {
                        let line: Vec<u8> = pending.drain(..=end).collect();
                        each(&line)?;
                    }
                }
                _ => all.extend_from_slice(&data),
            }
        }
        Ok((status, all, headers))
    }
}

/// The server's refusal as this CLI's failure: its code and message, and the code kept for the
/// exit status and `--json` as a refusal made here would keep it.
fn refusal(status: StatusCode, body: &[u8]) -> anyhow::Error {
    match serde_json::from_slice::<Value>(body) {
        Ok(error) => {
            let code = error["code"].as_str().unwrap_or("?");
            let message = format!(
                "the server refused ({} {code}): {}",
                status.as_u16(),
                error["message"].as_str().unwrap_or("")
            );
            let kind = match status {
                StatusCode::CONFLICT => airlock_core::ErrorKind::Conflict,
                StatusCode::FORBIDDEN => airlock_core::ErrorKind::Forbidden,
                StatusCode::NOT_FOUND => airlock_core::ErrorKind::NotFound,
                StatusCode::UNAUTHORIZED => airlock_core::ErrorKind::Unauthenticated,
                StatusCode::TOO_MANY_REQUESTS => airlock_core::ErrorKind::Busy,
                s if s.is_server_error() => airlock_core::ErrorKind::Internal,
                _ => airlock_core::ErrorKind::Invalid,
            };
            airlock_core::Refusal::new(kind, code, message).into()
        }
        Err(_) => anyhow::anyhow!(
            "the server answered {status}: {}",
            String::from_utf8_lossy(body)
        ),
    }
}

/// Carry out `command` through the server.
pub fn dispatch(remote: &Remote, command: Command) -> Result<ExitCode> {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the client's runtime")?;
    runtime.block_on(carry_out(remote, command))
}

async fn carry_out(remote: &Remote, command: Command) -> Result<ExitCode> {
    let session = |id: &str| format!("/v1/sessions/{}", encode(id));
    let diffed = match &command {
        Command::Diff(args) => args.session.clone(),
        _ => String::new(),
    };
    let (method, path, body, accept) = match command {
        Command::Run(args) => return run(remote, args).await,
        Command::Session(crate::cli::SessionCommand::New(args)) => (
            Method::POST,
            "/v1/sessions".to_string(),
            body(NewSessionBody {
                workspace: args.choice.workspace,
                name: args.name,
            })?,
            "application/json",
        ),
        Command::Sessions(args) => return sessions(remote, args.json).await,
        Command::Approvals(args) => return approvals(remote, args.json).await,
        Command::Approve(args) => {
            let decision = if args.session {
                airlock_core::ApprovalDecision::AllowSession
            } else {
                airlock_core::ApprovalDecision::AllowOnce
            };
            return decide(remote, &args.id, decision, args.reason, args.json).await;
        }
        Command::Deny(args) => {
            let deny = airlock_core::ApprovalDecision::Deny;
            return decide(remote, &args.id, deny, args.reason, args.json).await;
        }
        Command::Diff(args) if args.json => (Method::GET, format!("{}/diff", session(&args.session)), Value::Null, "application/json"),
        Command::Diff(args) => (Method::GET, format!("{}/diff", session(&args.session)), Value::Null, "text/x-diff"),
        Command::Apply(args) => (
            Method::POST,
            format!("{}/apply", session(&args.session)),
            body(ApplyBody {
                paths: args.paths,
                force: args.force,
                allow_hazards: args.allow_hazard,
                dry_run: args.dry_run,
                reviewed: args.reviewed,
            })?,
            "application/json",
        ),
        Command::Revert(args) => (Method::POST, format!("{}/revert", session(&args.session)), body(NoFields {})?, "application/json"),
        Command::Discard(args) => (Method::POST, format!("{}/discard", session(&args.session)), body(NoFields {})?, "application/json"),
        Command::Kill(args) => control(&session, args, "kill")?,
        Command::Pause(args) => control(&session, args, "pause")?,
        Command::Resume(args) => control(&session, args, "resume")?,
        Command::Status(_) => (Method::GET, "/v1/status".into(), Value::Null, "application/json"),
        Command::Disable(args) => (Method::POST, "/v1/disable".into(), body(SwitchBody { reason: Some(args.reason) })?, "application/json"),
        Command::Enable(_) => (Method::POST, "/v1/enable".into(), body(SwitchBody::default())?, "application/json"),
        _ => bail!("this command works on this machine only: unset AIRLOCK_URL (or drop --server) to run it here"),
    };
    let body = (!body.is_null()).then_some(body);
    let (status, answer, headers) = remote
        .send_for_headers(method, &path, body, accept, None)
        .await?;
    if !status.is_success() {
        return Err(refusal(status, &answer));
    }
    // A patch's digest, said apart from it as the local diff says it.
    if let Some(digest) = headers.get("airlock-digest").and_then(|d| d.to_str().ok()) {
        crate::shown::note!(
            "airlock: digest {digest}: 'airlock apply {} --reviewed {digest}' writes exactly this change set, or nothing",
            crate::shown::printable(&diffed)
        );
    }
    std::io::stdout().write_all(&answer)?;
    if !answer.ends_with(b"\n") {
        crate::shown::out!();
    }
    Ok(ExitCode::SUCCESS)
}

/// `airlock run --json` through the server: its answer to the run, printed as it came.
async fn run_for_json(remote: &Remote, path: &str, body: RunBody) -> Result<ExitCode> {
    let body = serde_json::to_value(body)?;
    let (status, answer) = remote
        .send(Method::POST, path, Some(body), "application/json", None)
        .await?;
    if !status.is_success() {
        return Err(refusal(status, &answer));
    }
    let answer: airlock_core::RunAnswer = serde_json::from_slice(&answer)
        .context("the server's answer to the run is not what this airlock reads")?;
    crate::shown::out!("{}", serde_json::to_string(&answer)?);
    Ok(ExitCode::from(
        u8::try_from(answer.result.end.exit_code).unwrap_or(crate::EXIT_AIRLOCK_ERROR),
    ))
}

/// The token's sessions, shown as `airlock sessions` shows them here: a table, or `--json`.
async fn sessions(remote: &Remote, json: bool) -> Result<ExitCode> {
    let (status, answer) = remote
        .send(Method::GET, "/v1/sessions", None, "application/json", None)
        .await?;
    if !status.is_success() {
        return Err(refusal(status, &answer));
    }
    let listed: airlock_core::SessionList = serde_json::from_slice(&answer)
        .context("the server's list of sessions is not what this airlock reads")?;
    crate::session::show_list(
        &listed.sessions,
        json,
        "no sessions for this token — 'airlock session new' starts one",
    )
}

/// The approvals the token may answer, shown as `airlock approvals` shows them here.
async fn approvals(remote: &Remote, json: bool) -> Result<ExitCode> {
    let (status, answer) = remote
        .send(Method::GET, "/v1/approvals", None, "application/json", None)
        .await?;
    if !status.is_success() {
        return Err(refusal(status, &answer));
    }
    let listed: airlock_core::ApprovalList = serde_json::from_slice(&answer)
        .context("the server's list of approvals is not what this airlock reads")?;
    crate::approvals::show_list(&listed.approvals, json)
}

/// Answer an approval through the server (its token must be an operator's).
async fn decide(
    remote: &Remote,
    id: &str,
    decision: airlock_core::ApprovalDecision,
    reason: Option<String>,
    json: bool,
) -> Result<ExitCode> {
    let body = serde_json::to_value(airlock_core::DecideRequest { decision, reason })?;
    let path = format!("/v1/approvals/{}", encode(id));
    let (status, answer) = remote
        .send(Method::POST, &path, Some(body), "application/json", None)
        .await?;
    if status == StatusCode::CONFLICT {
        let said: Value = serde_json::from_slice(&answer).unwrap_or_default();
        if let (Some(code), Some(message)) = (said["code"].as_str(), said["message"].as_str()) {
            let kind = airlock_core::ErrorKind::Conflict;
            let refused = airlock_core::Refusal::new(kind, code, message);
            return crate::approvals::closed(&refused, json);
        }
    }
    if !status.is_success() {
        return Err(refusal(status, &answer));
    }
    let approval: airlock_core::Approval = serde_json::from_slice(&answer)
        .context("the server's answer is not an approval this airlock reads")?;
    crate::approvals::show_decided(&approval, json)
}

/// Kill, pause or resume a session's sandboxes: through the server, a token names its session.
fn control(
    session: &dyn Fn(&str) -> String,
    args: crate::cli::ControlArgs,
    action: &str,
) -> Result<(Method, String, Value, &'static str)> {
    let Some(id) = &args.session else {
        bail!("with --server, name the session (--session ID): a token acts on its own sessions");
    };
    let body = body(ControlBody {
        reason: args.reason,
        network_only: args.network,
    })?;
    Ok((
        Method::POST,
        format!("{}/{action}", session(id)),
        body,
        "application/json",
    ))
}

/// A request body as the server reads it: core's type, as JSON.
fn body(body: impl serde::Serialize) -> Result<Value> {
    Ok(serde_json::to_value(body)?)
}

/// Path segments as the server's router takes them.
fn encode(segment: &str) -> String {
    segment
        .bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            other => format!("%{other:02X}"),
        })
        .collect()
}

/// A run, streamed: its output as it comes, then its exit status as this process's.
async fn run(remote: &Remote, args: crate::cli::RunArgs) -> Result<ExitCode> {
    let argv: Vec<String> = args
        .command
        .iter()
        .map(|a| {
            a.to_str()
                .map(str::to_string)
                .context("an argument is not UTF-8, which the API cannot carry")
        })
        .collect::<Result<_>>()?;
    let mut body = RunBody {
        argv: Some(argv),
        workspace: args.choice.workspace.clone(),
        keep: args.keep,
        ..RunBody::default()
    };
    if !std::io::stdin().is_terminal() {
        let mut input = String::new();
        std::io::stdin()
            .read_to_string(&mut input)
            .context("cannot read stdin (the API takes it as UTF-8 text)")?;
        body.stdin = Some(input);
    }
    // The server judges keep and workspace with a session as a local run would (core's rule).
    let runs = match &args.session {
        Some(id) => format!("/v1/sessions/{}/runs", encode(id)),
        None => "/v1/runs".into(),
    };
    if args.json {
        return run_for_json(remote, &runs, body).await;
    }
    let path = format!("{runs}/stream");
    let mut exit = None;
    let mut failure = None;
    let mut each = |line: &[u8]| -> Result<()> {
        let event: RunEvent = serde_json::from_slice(line)
            .context("the server sent a line that is not a run's event")?;
        match event {
            RunEvent::Stdout { data } => std::io::stdout().write_all(data.as_bytes())?,
            RunEvent::Stderr { data } => std::io::stderr().write_all(data.as_bytes())?,
            RunEvent::Result(result) => {
                // What a local run says of its end, said the same way (and no escape sequence
                // the server's strings might hold reaches the terminal).
                for line in result.end.notes() {
                    eprintln!("airlock: {}", crate::shown::printable(&line));
                }
                exit = Some(result.end.exit_code);
            }
            RunEvent::Error { code, message } => failure = Some(format!("{code}: {message}")),
            RunEvent::Unknown => {}
        }
        Ok(())
    };
    let (status, answer) = remote
        .send(
            Method::POST,
            &path,
            Some(serde_json::to_value(body)?),
            "application/x-ndjson",
            Some(&mut each),
        )
        .await?;
    if !status.is_success() {
        return Err(refusal(status, &answer));
    }
    let _ = std::io::stdout().flush();
    if let Some(failure) = failure {
        bail!("the server refused the run: {failure}");
    }
    let code = exit.context("the server's answer ended without the run's result")?;
    Ok(ExitCode::from(
        u8::try_from(code).unwrap_or(crate::EXIT_AIRLOCK_ERROR),
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_token_goes_in_clear_text_to_loopback_only() {
        for url in [
            "http://127.0.0.1:8700",
            "http://localhost:8700",
            "http://[::1]:8700",
        ] {
            assert!(Target::parse(url).is_ok(), "{url}");
        }
        for url in [
            "http://192.0.2.1:8700",
            "http://example.com",
            "http://10.0.0.1:80/",
        ] {
            let refused = Target::parse(url).err().map(|e| e.to_string());
            assert!(refused.is_some_and(|e| e.contains("clear text")), "{url}");
        }
        assert!(Target::parse("https://example.com:8700").is_ok());
    }
}
