//! The server's life: bind, serve connections, and on SIGTERM or SIGINT drain: stop accepting,
//! let runs finish for a grace period, then interrupt and record the rest.

// writeln! to stderr rather than eprintln!, which panics when stderr is closed (a server whose
// terminal went away must go on serving).
use std::io::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context, Result};
use hyper_util::rt::TokioIo;
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, UnixListener};
use tokio::signal::unix::{signal, SignalKind};
use tokio_rustls::TlsAcceptor;

use airlock_core::tokens::Tokens;
use airlock_core::{Caller, Session};

use crate::activation::Passed;
use crate::app::App;
use crate::browser::Transport;
use crate::limits::{Limiter, Quotas};
use crate::listen::{choose_source, tls_config, Listen, Source, TlsFiles, WireSecurity};
use crate::routes::pod::Pod;
use airlock_runner::Jobs;

#[derive(Debug, Clone)]
pub struct ServeConfig {
    /// None: a unix socket in the state directory (`airlock.sock`).
    pub listen: Option<Listen>,
    pub tls: Option<TlsFiles>,
    /// Beyond loopback without TLS, by the operator's explicit choice (`--allow-clear-text`).
    pub clear_text_allowed: bool,
    /// Where the tokens are read from, if not the state directory's `tokens.json`.
    pub tokens_file: Option<PathBuf>,
    pub state_dir: Option<PathBuf>,
    pub max_body: usize,
    pub keep_output: u64,
    pub quotas: Quotas,
    /// How long runs may go on after SIGTERM before they are interrupted.
    pub grace: Duration,
    /// Names the server answers to besides its IP addresses and `localhost`.
    pub host_names: Vec<String>,
    /// Warm sandboxes: how many for each kind of run, and in all (see `airlock_runner::pool`).
    pub warm: (usize, usize),
    /// Serve agent-sandbox's in-pod runtime too, its runs bound so (`--agent-sandbox`).
    pub agent_sandbox: Option<airlock_core::pod_runtime::PodBinding>,
    /// And sandboxd's services, on ports of their own.
    pub sandboxd: crate::SandboxdPorts,
    /// Where copies of the audit log's records go while the server runs (`[audit] export`).
    pub export: airlock_core::config::AuditConfig,
}

fn no_one_to_tell(_: &Session) {}

/// Connections served at once.
const MAX_CONNECTIONS: usize = 1024;

/// How long a connection may take to send a request's head (the first one, or the next one on a
/// kept-alive connection) before it is closed.
const HEADER_TIMEOUT: Duration = Duration::from_secs(30);

pub fn serve(config: ServeConfig) -> Result<()> {
    // First, while this process has one thread: it unsets the protocol's variables.
    let passed = crate::activation::take_from_systemd()?;
    // Also while it has one thread: the whole process moves into its unit's leaf cgroup.
    match airlock_core::settle_server_cgroup() {
        Ok(Some(unit)) => {
            let _ = writeln!(
                std::io::stderr(),
                "airlock: runs' cgroups under {} (delegated by systemd)",
                unit.display()
            );
        }
        Ok(None) => {}
        Err(why) => {
            let _ = writeln!(std::io::stderr(), "airlock: warning: {why}");
        }
    }
    let mut service = Caller::this_process(config.state_dir.clone(), no_one_to_tell);
    // Clients' paths mean nothing relative to the server's own directory.
    service.cwd = None;
    service.asked = Vec::new();
    let state_dir = service.state_dir()?;
    let results_dir = airlock_runner::results_dir(&state_dir)?;
    let source = choose_source(
        config.listen.clone(),
        passed,
        state_dir.join("airlock.sock"),
        WireSecurity {
            tls: config.tls.is_some(),
            clear_text_allowed: config.clear_text_allowed,
        },
    )?;
    crate::browser::check_host_names(&config.host_names)?;
    let tls = config.tls.as_ref().map(tls_config).transpose()?;
    let tokens = match &config.tokens_file {
        Some(file) => Tokens::from_file(file),
        None => Tokens::new(&state_dir),
    };
    tokens.check()?;
    // Runs a server killed outright (or a crash) left open are closed before any new one starts.
    airlock_core::close_abandoned_runs(&state_dir);
    let exe =
        std::env::current_exe().context("cannot tell where this program is (/proc/self/exe)")?;
    let (per_kind, max_workers) = config.warm;
    let pool = (per_kind > 0 && max_workers > 0).then(|| {
        Arc::new(airlock_runner::pool::WarmPool::new(
            exe.clone(),
            results_dir.clone(),
            per_kind,
            max_workers,
        ))
    });
    let app = Arc::new(App {
        tokens,
        limiter: Limiter::new(config.quotas),
        jobs: Arc::new(Jobs::default()),
        exe,
        pool,
        results_dir,
        keep_output: config.keep_output,
        logins: crate::page::Logins::default(),
        host_names: config.host_names.clone(),
        tls: tls.is_some(),
        pod: config
            .agent_sandbox
            .clone()
            .map(|binding| Arc::new(Pod::new(binding))),
        service,
    });
    if let Some(pod) = &app.pod {
        start_pod(&app, pod)?;
    }
    // Threads of their own, which read the log and never hold up a run (airlock-export).
    let exporters = airlock_export::start(&state_dir, &config.export)
        .context("cannot export the audit log as [audit] export says")?;
    if !exporters.destinations().is_empty() {
        let _ = writeln!(
            std::io::stderr(),
            "airlock: exporting the audit log to {}",
            exporters.destinations().join(" and ")
        );
    }
    start_retention(&state_dir, &config.export);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the server's runtime")?;
    let served = runtime.block_on(run(app, source, tls.map(TlsAcceptor::from), &config));
    finish_export(exporters);
    served
}

/// How often a server applies the log's retention, after once at start.
const RETENTION_EVERY: Duration = Duration::from_secs(3600);

/// Retention (`[audit] keep_days`, `keep_size`) on a thread of its own: now, then every hour.
/// It holds the log's lock to decide, record and unlink, reading the segments' indexes (a
/// segment whole only when its index is missing): runs wait for it about as long as for a roll.
fn start_retention(state_dir: &std::path::Path, audit: &airlock_core::config::AuditConfig) {
    if audit.retention.is_unlimited() {
        return;
    }
    let (state_dir, audit) = (state_dir.to_path_buf(), audit.clone());
    let started = std::thread::Builder::new()
        .name("audit-retention".into())
        .spawn(move || loop {
            match airlock_export::retention_pass(&state_dir, &audit) {
                Ok((_, said)) => {
                    for line in said {
                        let _ = writeln!(std::io::stderr(), "airlock: {line}");
                    }
                }
                Err(e) => {
                    let _ = writeln!(
                        std::io::stderr(),
                        "airlock: audit retention: {e}; tried again in an hour"
                    );
                }
            }
            std::thread::sleep(RETENTION_EVERY);
        });
    if let Err(e) = started {
        let _ = writeln!(
            std::io::stderr(),
            "airlock: warning: cannot start audit retention ({e}): run 'airlock log prune' from a timer"
        );
    }
}

/// How long a stopping server goes on sending the last records (a pod's state directory may not
/// outlive it); what is left is sent at the next start, from the cursor.
const EXPORT_FINISH: Duration = Duration::from_secs(5);

fn finish_export(exporters: airlock_export::Exporters) {
    for (destination, ended) in exporters.finish(EXPORT_FINISH) {
        if !matches!(ended, Some(airlock_export::Ended::CaughtUp { .. })) {
            let _ = writeln!(
                std::io::stderr(),
                "airlock: export to {destination}: stopped before every record was taken; the next start sends the rest"
            );
        }
    }
}

/// The pod runtime's session, found or made before the first request: a profile that does not
/// load, or a workspace no session may overlay, stops the server now, with its reason.
fn start_pod(app: &App, pod: &Pod) -> Result<()> {
    let caller = pod
        .binding
        .caller(&app.service, "airlock serve --agent-sandbox".into());
    let session = pod
        .binding
        .session(&caller, None)
        .context("--agent-sandbox: cannot start the pod's session")?;
    let _ = writeln!(
        std::io::stderr(),
        "airlock: agent-sandbox runtime for {} (profile {}): runs go into session {session}",
        pod.binding.workspace().display(),
        pod.binding.profile(),
    );
    pod.set_session(session);
    Ok(())
}

/// A bound listener: unix (with its path when this server made the socket, to remove it at the
/// end; systemd's own stays for the next server it starts) or TCP.
enum Bound {
    Unix(UnixListener, Option<PathBuf>),
    Tcp(TcpListener),
}

async fn bind(source: Source) -> Result<Bound> {
    let listen = match source {
        Source::Bind(listen) => listen,
        Source::Passed(passed) => return adopt(passed),
    };
    match &listen {
        Listen::Tcp(addr) => Ok(Bound::Tcp(
            TcpListener::bind(addr)
                .await
                .with_context(|| format!("cannot listen on {addr}"))?,
        )),
        Listen::Unix(path) => {
            remove_stale_socket(path).await?;
            // Made with no access for others from the start, not tightened after.
            let old = nix::sys::stat::umask(nix::sys::stat::Mode::from_bits_truncate(0o177));
            let bound = UnixListener::bind(path);
            nix::sys::stat::umask(old);
            let listener = bound.with_context(|| format!("cannot listen on {}", path.display()))?;
            Ok(Bound::Unix(listener, Some(path.clone())))
        }
    }
}

/// The socket systemd passed, as tokio's.
fn adopt(passed: Passed) -> Result<Bound> {
    let cannot = || "cannot serve on the socket systemd passed (LISTEN_FDS)";
    match passed {
        Passed::Unix(listener) => {
            listener.set_nonblocking(true).with_context(cannot)?;
            let listener = UnixListener::from_std(listener).with_context(cannot)?;
            Ok(Bound::Unix(listener, None))
        }
        Passed::Tcp(listener) => {
            listener.set_nonblocking(true).with_context(cannot)?;
            Ok(Bound::Tcp(
                TcpListener::from_std(listener).with_context(cannot)?,
            ))
        }
    }
}

/// A socket file left by a server that is gone is removed; one a live server answers on is not.
async fn remove_stale_socket(path: &std::path::Path) -> Result<()> {
    use std::os::unix::fs::FileTypeExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else {
        return Ok(());
    };
    if !meta.file_type().is_socket() {
        bail!(
            "{} exists and is not a socket: remove it, or --listen elsewhere",
            path.display()
        );
    }
    if answers(path).await {
        bail!(
            "another server answers on {}: stop it first, or --listen elsewhere",
            path.display()
        );
    }
    std::fs::remove_file(path)
        .with_context(|| format!("cannot remove the stale socket {}", path.display()))
}

/// Whether a server listens on the socket at `path`. A connection is taken by a listening socket
/// whoever holds it, and the kernel may release a killed server's socket a moment after the
/// server is gone (its last reference dropped by deferred work): one that refuses a connection
/// within ~100 ms is no server's.
async fn answers(path: &std::path::Path) -> bool {
    for _ in 0..5 {
        if tokio::net::UnixStream::connect(path).await.is_err() {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    true
}

async fn run(
    app: Arc<App>,
    source: Source,
    tls: Option<TlsAcceptor>,
    config: &ServeConfig,
) -> Result<()> {
    let passed = matches!(source, Source::Passed(_));
    let bound = bind(source).await?;
    let transport = match &bound {
        Bound::Unix(..) => Transport::Unix,
        Bound::Tcp(_) => Transport::Tcp { tls: tls.is_some() },
    };
    let mut router = crate::routes::router(app.clone(), config.max_body)
        .merge(crate::mcp::router(app.clone(), config.max_body))
        .merge(crate::page::router(app.clone(), config.max_body));
    if app.pod.is_some() {
        router = router.merge(crate::routes::pod::router(app.clone(), config.max_body));
    }
    let router = router
        .layer(axum::middleware::from_fn_with_state(
            app.clone(),
            crate::browser::guard,
        ))
        .layer(axum::Extension(transport));
    let sandboxd = crate::sandboxd::start(&app, &config.sandboxd, config.max_body).await?;
    let recorder = tokio::spawn(crate::page::record_refusals(app.clone()));
    let sweeper = match (app.pool.clone(), app.service.state_dir()) {
        (Some(pool), Ok(state_dir)) => Some(tokio::spawn(airlock_runner::pool::keep_swept(
            pool, state_dir,
        ))),
        _ => None,
    };
    let page_address = page_address(&bound, tls.is_some());
    if let Some(url) = &page_address {
        remember_address(&app, url);
    }
    let mut terminate = signal(SignalKind::terminate()).context("cannot watch for SIGTERM")?;
    let mut interrupt = signal(SignalKind::interrupt()).context("cannot watch for SIGINT")?;
    let graceful = GracefulShutdown::new();
    let _ = writeln!(
        std::io::stderr(),
        "airlock: serving on {}",
        described(&bound, tls.is_some(), passed)
    );
    if let Bound::Tcp(listener) = &bound {
        let beyond_loopback = listener.local_addr().is_ok_and(|a| !a.ip().is_loopback());
        if beyond_loopback && tls.is_none() {
            let _ = writeln!(
                std::io::stderr(),
                "airlock: warning: no TLS beyond loopback (--allow-clear-text): tokens cross this network in clear text; admit only the one client to it"
            );
        }
    }
    // Past this many connections at once, the next waits to be accepted (file descriptors are
    // kept for the runs' pipes and the sessions' files).
    let connections = Arc::new(tokio::sync::Semaphore::new(MAX_CONNECTIONS));
    loop {
        let Ok(permit) = connections.clone().acquire_owned().await else {
            break;
        };
        let accepted = tokio::select! {
            accepted = accept(&bound) => accepted,
            _ = terminate.recv() => break,
            _ = interrupt.recv() => break,
        };
        let Ok(stream) = accepted else {
            // A client that went away while connecting, or no file descriptor left: go on.
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let service = TowerToHyperService::new(router.clone());
        let tls = tls.clone();
        let watcher = graceful.watcher();
        tokio::spawn(async move {
            match (stream, tls) {
                (Stream::Tcp(tcp), Some(tls)) => {
                    if let Ok(Ok(stream)) =
                        tokio::time::timeout(Duration::from_secs(10), tls.accept(tcp)).await
                    {
                        serve_connection(stream, service, watcher).await;
                    }
                }
                (Stream::Tcp(tcp), None) => serve_connection(tcp, service, watcher).await,
                (Stream::Unix(unix), _) => serve_connection(unix, service, watcher).await,
            }
            drop(permit);
        });
    }
    // sandboxd's services take no more connections or calls either; those being answered go on
    // as the API's do.
    sandboxd.stop();
    drain(app.clone(), bound, graceful, config.grace).await;
    recorder.abort();
    if let Some(sweeper) = sweeper {
        sweeper.abort();
    }
    // The refused logins of the last second are on record too.
    app.logins.flush(|count, why| {
        airlock_core::page_login::record_refused_logins(&app.service, count, why);
    });
    // And the counts of tokens' refusals past their budget, the last second's included.
    if let Ok(state_dir) = app.service.state_dir() {
        airlock_core::flush_suppressed_refusals(&state_dir, true);
    }
    if page_address.is_some() {
        forget_address(&app);
    }
    Ok(())
}

/// The review page's address, when the server listens on TCP: what `airlock review` prints a
/// link to (an address that takes any, 0.0.0.0, is reached on this machine by its loopback).
fn page_address(bound: &Bound, tls: bool) -> Option<String> {
    let Bound::Tcp(listener) = bound else {
        return None;
    };
    let mut addr = listener.local_addr().ok()?;
    if addr.ip().is_unspecified() {
        addr.set_ip(match addr.ip() {
            std::net::IpAddr::V4(_) => std::net::Ipv4Addr::LOCALHOST.into(),
            std::net::IpAddr::V6(_) => std::net::Ipv6Addr::LOCALHOST.into(),
        });
    }
    Some(format!("{}://{addr}", if tls { "https" } else { "http" }))
}

/// Tell `airlock review` where the page is (best effort: it can be told with --url).
fn remember_address(app: &App, url: &str) {
    if let Ok(state_dir) = app.service.state_dir() {
        let _ = airlock_core::page_login::remember_page_address(&state_dir, url);
    }
}

fn forget_address(app: &App) {
    if let Ok(state_dir) = app.service.state_dir() {
        airlock_core::page_login::forget_page_address(&state_dir);
    }
}

/// Where the server listens, as its first line says.
fn described(bound: &Bound, tls: bool, passed: bool) -> String {
    let shown = match &bound {
        Bound::Unix(l, _) => l
            .local_addr()
            .ok()
            .and_then(|a| a.as_pathname().map(|p| format!("unix:{}", p.display())))
            .unwrap_or_else(|| "unix:?".into()),
        Bound::Tcp(l) => format!(
            "{}://{}",
            if tls { "https" } else { "http" },
            l.local_addr()
                .map_or_else(|_| "?".into(), |a| a.to_string())
        ),
    };
    let from = if passed {
        " (a socket from systemd)"
    } else {
        ""
    };
    format!("{shown}{from}")
}

enum Stream {
    Tcp(tokio::net::TcpStream),
    Unix(tokio::net::UnixStream),
}

async fn accept(bound: &Bound) -> std::io::Result<Stream> {
    match bound {
        Bound::Unix(listener, _) => listener.accept().await.map(|(s, _)| Stream::Unix(s)),
        Bound::Tcp(listener) => listener.accept().await.map(|(s, _)| {
            let _ = s.set_nodelay(true);
            Stream::Tcp(s)
        }),
    }
}

pub(crate) async fn serve_connection<S>(
    stream: S,
    service: TowerToHyperService<axum::Router>,
    watcher: hyper_util::server::graceful::Watcher,
) where
    S: AsyncRead + AsyncWrite + Unpin + Send + 'static,
{
    // HTTP/1.1 only: hyper's automatic choice of HTTP/1 or 2 waits for a connection's first
    // bytes without a timeout, so a client that connected and sent nothing held one of the
    // MAX_CONNECTIONS places for ever (1024 such connections and no one else was served). Here
    // the header read timeout runs from the moment the connection is accepted.
    let connection = hyper::server::conn::http1::Builder::new()
        .timer(hyper_util::rt::TokioTimer::new())
        // A client that sends its request's head slowly (or never) does not hold a connection for long.
        .header_read_timeout(HEADER_TIMEOUT)
        // A client that shuts its sending side down is taken as gone (hyper's default): that
        // is how a run whose client went away is seen and killed, and a half-closing client
        // (`nc -N`) gets no answer — said in docs/api.md.
        .serve_connection(TokioIo::new(stream), service);
    let _ = watcher.watch(connection).await;
}

/// Stop accepting; let what is going on finish for `grace`; then interrupt the runs left (each
/// recorded as ended by the server's stop) and give their answers a moment to go out.
async fn drain(app: Arc<App>, bound: Bound, graceful: GracefulShutdown, grace: Duration) {
    // Closed now, whichever it is: a TCP listener kept until the drain ended would leave new
    // clients waiting in its backlog, unanswered, instead of refused. (A socket from systemd
    // stays open in systemd: its new clients wait there for the next server it starts.)
    match bound {
        Bound::Unix(listener, path) => {
            drop(listener);
            if let Some(path) = path {
                let _ = std::fs::remove_file(path);
            }
        }
        Bound::Tcp(listener) => drop(listener),
    }
    let _ = writeln!(
        std::io::stderr(),
        "airlock: stopping: no new connections; {} run(s) going, {} s to finish",
        app.jobs.count(),
        grace.as_secs()
    );
    app.jobs.close();
    // The warm sandboxes go at once: none will be used.
    if let Some(pool) = &app.pool {
        pool.close();
    }
    let finished = tokio::time::timeout(grace, wait_for_runs(&app.jobs))
        .await
        .is_ok();
    if !finished {
        let _ = writeln!(
            std::io::stderr(),
            "airlock: the grace period is over: interrupting {} run(s)",
            app.jobs.count()
        );
        app.jobs.close_and_interrupt();
        let _ = tokio::time::timeout(Duration::from_secs(10), wait_for_runs(&app.jobs)).await;
    }
    // Answers of the runs just ended, and other requests in flight, get a moment to go out.
    let _ = tokio::time::timeout(Duration::from_secs(2), graceful.shutdown()).await;
    let _ = writeln!(std::io::stderr(), "airlock: stopped");
}

async fn wait_for_runs(jobs: &Jobs) {
    while jobs.count() > 0 {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
