//! `airlock run`: from a profile, a workspace and a command to a confined process and its status.

use airlock_jail::note;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::time::Duration;

use airlock_jail::{
    Bind, Degraded, IdMapping, JailError, Layer, Outcome, OverlayWorkspace, ResourceLimits,
    SandboxSpec,
};
use airlock_policy::Profile;

use crate::session::{now, staging_dir, NewSession, ProfileRef, Session, SessionError};

/// The sandbox user's name and home, inside.
pub const SANDBOX_USER: &str = "agent";
pub const SANDBOX_HOME: &str = "/home/agent";
const INSIDE_ID: u32 = 1000;
/// Host uid and gid a sandbox runs as when airlock itself runs as root: unprivileged, and outside
/// the ranges distributions give to users and to subordinate ids, so it owns nothing else.
pub const DEFAULT_ROOT_SANDBOX_ID: u32 = 2_999_000;
const DEFAULT_PATH: &str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin";

#[derive(Debug)]
pub struct RunRequest {
    pub profile: Profile,
    /// How the profile was chosen, recorded in a new session for its later runs.
    pub profile_ref: ProfileRef,
    /// Canonical host path of the workspace.
    pub workspace: PathBuf,
    /// Caller's working directory; used inside when it lies in the workspace.
    pub caller_cwd: Option<PathBuf>,
    /// Caller's home directory, which a workspace may not contain.
    pub caller_home: Option<PathBuf>,
    pub argv: Vec<OsString>,
    /// The caller's whole environment; only what the profile allows gets through.
    pub caller_env: Vec<(OsString, OsString)>,
    pub state_dir: PathBuf,
    /// Run in this session (id or name); it must belong to `workspace`.
    pub session: Option<String>,
    /// Told when another run holds the session and this one waits for it.
    pub on_session_busy: fn(&Session),
    /// Names the network gate resolves to these addresses instead of asking the host's resolver
    /// (`--resolve NAME=IP`; trusted: a loopback or private address given here is not refused).
    pub resolve: Vec<(String, std::net::IpAddr)>,
    /// Keep a fresh session's layer after the run instead of discarding it.
    pub keep: bool,
    pub degraded: Degraded,
    /// Host uid/gid for the sandbox when running as root.
    pub root_sandbox_id: u32,
    /// Where profiles are read from: no sandbox may write there.
    pub policy_dirs: Vec<PathBuf>,
    /// Relay output through airlock and apply the profile's output limit (for output that is
    /// kept: a pipe or a file). False: the command writes to airlock's stdout and stderr directly.
    pub limit_output: bool,
}

#[derive(Debug)]
pub struct RunReport {
    pub outcome: Outcome,
    /// The session the run used; None for a throwaway run kept in memory.
    pub session_id: Option<String>,
    /// The session's layer survives the run (named session or `--keep`).
    pub kept: bool,
    /// Bytes of output dropped past the output limit.
    pub output_dropped: u64,
    /// Processes the kernel killed for reaching the memory limit, when the run's cgroup says.
    pub oom_kills: u64,
    /// Why the kill switch killed the run, if it did.
    pub killed_by_switch: Option<String>,
    /// Streams whose destination failed, each closed then (see `airlock_jail::OutputFailure`).
    pub output_failures: Vec<airlock_jail::OutputFailure>,
    /// The run's result could not be written to the audit log (its intent was).
    pub audit_error: Option<String>,
}

#[derive(Debug, thiserror::Error)]
pub enum RunError {
    #[error(transparent)]
    Session(#[from] SessionError),
    #[error(transparent)]
    Audit(#[from] crate::audit::AuditError),
    #[error(transparent)]
    Control(#[from] crate::control::ControlError),
    #[error(transparent)]
    Jail(#[from] JailError),
    #[error("workspace {path}: {why}")]
    Workspace { path: PathBuf, why: String },
    #[error("profile {profile}: [filesystem] path {path}: {why}")]
    ProfilePath {
        profile: String,
        path: PathBuf,
        why: String,
    },
}

/// The environment the command gets: allowed variables of the caller, then the sandbox identity,
/// then the profile's values.
fn sandbox_env(
    profile: &Profile,
    caller_env: &[(OsString, OsString)],
) -> Vec<(OsString, OsString)> {
    let mut env: Vec<(OsString, OsString)> = caller_env
        .iter()
        .filter(|(k, _)| k.to_str().is_some_and(|name| profile.env_allowed(name)))
        .cloned()
        .collect();
    let mut set = |key: &str, value: &str| {
        env.retain(|(k, _)| k != key);
        env.push((key.into(), value.into()));
    };
    // HOME is on the allowlist as a name; its value is always the sandbox's own home, since the
    // caller's home does not exist inside.
    set("HOME", SANDBOX_HOME);
    set("USER", SANDBOX_USER);
    set("LOGNAME", SANDBOX_USER);
    if !caller_env.iter().any(|(k, _)| k == "PATH") {
        set("PATH", DEFAULT_PATH);
    }
    if profile.network != airlock_policy::NetworkMode::None {
        // For tools that prefer a proxy: airlock's, behind the same gate and decisions.
        let proxy = airlock_egress::gate::PROXY_URL;
        for key in [
            "HTTP_PROXY",
            "HTTPS_PROXY",
            "ALL_PROXY",
            "http_proxy",
            "https_proxy",
            "all_proxy",
        ] {
            set(key, proxy);
        }
        for key in ["NO_PROXY", "no_proxy"] {
            set(key, "localhost,127.0.0.1,::1");
        }
    }
    for (key, value) in &profile.env.set {
        set(key, value);
    }
    env
}

/// Paths of a profile that would open a hole in the sandbox, refused before anything is built
/// (`state_dir` canonical):
/// a read-write bind is written by sandboxes, so nothing else may be bound or hidden inside it
/// (a run could plant a symlink there for the next), it may not hold the workspace (writes would
/// bypass the session layer) nor airlock's state or policy; no bind may expose the state dir.
pub fn check_profile_paths(
    profile: &Profile,
    workspace: &Path,
    state_dir: &Path,
    policy_dirs: &[PathBuf],
) -> Result<(), RunError> {
    let fs = &profile.filesystem;
    let refuse = |path: &Path, why: String| {
        Err(RunError::ProfilePath {
            profile: profile
                .source
                .as_ref()
                .map_or_else(|| profile.name.clone(), |p| p.display().to_string()),
            path: path.to_path_buf(),
            why,
        })
    };
    let overlaps = |a: &Path, b: &Path| a.starts_with(b) || b.starts_with(a);
    let state = state_dir;
    for path in fs.read_only.iter().chain(&fs.read_write) {
        if overlaps(path, state) {
            return refuse(path, format!("it would show airlock's state directory {} to the sandbox; bind a narrower path", state.display()));
        }
        if path == workspace {
            return refuse(
                path,
                "it is the workspace, which every run sees already; remove it".into(),
            );
        }
    }
    for rw in &fs.read_write {
        if overlaps(rw, workspace) {
            return refuse(rw, format!("a read-write bind may not contain or lie inside the workspace {}: writes would reach the host without going through the session; use a path outside it", workspace.display()));
        }
        if let Some(dir) = policy_dirs.iter().find(|dir| overlaps(rw, dir)) {
            return refuse(
                rw,
                format!(
                    "the sandbox could write airlock's policy in {}; bind a narrower path",
                    dir.display()
                ),
            );
        }
        for inner in fs.read_only.iter().chain(&fs.read_write).chain(&fs.hide) {
            if inner != rw && inner.starts_with(rw) {
                return refuse(inner, format!("it lies inside the read-write bind {}, where a run could replace it with a symlink for the next; list paths outside read-write binds", rw.display()));
            }
        }
    }
    Ok(())
}

/// Refuse a profile whose binds name paths this host does not have, before anything starts.
fn check_profile_paths_exist(profile: &Profile) -> Result<(), RunError> {
    let fs = &profile.filesystem;
    match fs
        .read_only
        .iter()
        .chain(&fs.read_write)
        .find(|p| !p.exists())
    {
        Some(path) => Err(RunError::ProfilePath {
            profile: profile
                .source
                .as_ref()
                .map_or_else(|| profile.name.clone(), |p| p.display().to_string()),
            path: path.clone(),
            why: "it does not exist on this host; create it, or remove it from the profile".into(),
        }),
        None => Ok(()),
    }
}

/// Home directories a workspace may lie in but never contain: they hold keys and credentials.
/// Refuse a workspace no session may have (the same checks `run` makes), before a session is made
/// for it.
pub fn check_workspace_for(
    workspace: &Path,
    state_dir: &Path,
    caller_home: Option<&Path>,
) -> Result<(), RunError> {
    let state_dir = state_dir
        .canonicalize()
        .unwrap_or_else(|_| state_dir.to_path_buf());
    check_workspace(workspace, &state_dir, &homes(caller_home))
}

fn homes(caller_home: Option<&Path>) -> Vec<PathBuf> {
    let mut homes = vec![PathBuf::from("/root"), PathBuf::from("/home")];
    homes.extend(caller_home.and_then(|home| home.canonicalize().ok()));
    homes
}

fn check_workspace(workspace: &Path, state_dir: &Path, homes: &[PathBuf]) -> Result<(), RunError> {
    let refuse = |why: &str| {
        Err(RunError::Workspace {
            path: workspace.to_path_buf(),
            why: why.to_string(),
        })
    };
    if !workspace.is_dir() {
        return refuse("is not a directory — pass --workspace DIR");
    }
    if workspace == Path::new("/") {
        return refuse("the whole filesystem cannot be a workspace — pass --workspace with a project directory");
    }
    for system in ["/proc", "/sys", "/dev", "/usr", "/etc", "/boot"] {
        if workspace.starts_with(system) {
            return refuse("is a system directory — pass --workspace with a project directory");
        }
    }
    if workspace.starts_with(state_dir) || state_dir.starts_with(workspace) {
        return refuse("contains or lies inside airlock's state directory, which no sandbox may reach — pass --state-dir elsewhere");
    }
    if homes.iter().any(|home| home.starts_with(workspace)) {
        return refuse("is or contains a home directory, with its keys and credentials — run airlock in a project directory, or pass --workspace with one");
    }
    Ok(())
}

/// The network gate of a run whose profile allows some network: its events go to the audit log,
/// and each refusal to stderr, so that the person sees why a tool failed; a flood of them is
/// counted rather than written (see [`crate::netlog`]). The returned log must be flushed when the
/// run ends.
fn start_gate(
    gate: airlock_jail::Gate,
    profile: &Profile,
    resolve: &[(String, std::net::IpAddr)],
    state_dir: &Path,
    session: Option<String>,
) -> Result<GateLog, JailError> {
    let gate_log = GateLog {
        running: None,
        audit: crate::audit::log(state_dir),
        limiter: std::sync::Arc::new(std::sync::Mutex::new(crate::netlog::NetLog::new())),
        session,
        profile: profile.name.clone(),
    };
    let events = gate_log.clone();
    let on_event = move |event: &airlock_egress::gate::Event| {
        let admitted = match events.limiter.lock() {
            Ok(mut limiter) => limiter.admit(event, std::time::Instant::now()),
            Err(_) => return,
        };
        if let Some(summary) = admitted.summary {
            events.write_summary(&summary);
        }
        if !admitted.write {
            return;
        }
        if !event.allowed {
            let what = match (&event.name, event.ip, event.port) {
                (Some(name), _, Some(port)) => format!("{name}:{port}"),
                (Some(name), _, None) => name.clone(),
                (None, Some(ip), Some(port)) => std::net::SocketAddr::new(ip, port).to_string(),
                _ => "(destination not read)".into(),
            };
            note!(
                "airlock: network: {} {what} refused: {}",
                event.kind,
                event.rule
            );
        }
        let mut fields = serde_json::to_value(event).unwrap_or_default();
        events.add_run(&mut fields);
        if let Some(map) = fields.as_object_mut() {
            map.insert("denied".into(), (!event.allowed).into());
        }
        let _ =
            crate::audit::append_deferred(&events.audit, &format!("net.{}", event.kind), fields);
    };
    let running = airlock_egress::gate::start(
        gate,
        airlock_egress::gate::Config {
            egress: profile.network.clone(),
            resolve: resolve.to_vec(),
            on_event: Box::new(on_event),
            cut_when: Some(crate::control::cut_flag(state_dir, std::process::id())),
        },
    )
    .map_err(|e| JailError::Invalid(format!("cannot start the network gate: {e}")))?;
    Ok(GateLog {
        running: Some(std::sync::Arc::new(running)),
        ..gate_log
    })
}

/// Where a run's network events go.
#[derive(Clone)]
struct GateLog {
    /// The gate itself (None in the events' own copy).
    running: Option<std::sync::Arc<airlock_egress::gate::Running>>,
    audit: airlock_audit::AuditLog,
    limiter: std::sync::Arc<std::sync::Mutex<crate::netlog::NetLog>>,
    session: Option<String>,
    profile: String,
}

impl GateLog {
    fn add_run(&self, fields: &mut serde_json::Value) {
        if let Some(map) = fields.as_object_mut() {
            map.insert("session".into(), self.session.clone().into());
            map.insert("profile".into(), self.profile.clone().into());
        }
    }

    fn write_summary(&self, summary: &crate::netlog::Summary) {
        if summary.denied > 0 {
            note!(
                "airlock: network: {} more refused attempts not shown one by one ('airlock log --action net.suppressed')",
                summary.denied
            );
        }
        let mut fields = summary.fields();
        self.add_run(&mut fields);
        if let Some(map) = fields.as_object_mut() {
            map.insert("denied".into(), (summary.denied > 0).into());
        }
        let _ = crate::audit::append_deferred(&self.audit, "net.suppressed", fields);
    }

    /// The run is over: its connections' last events, and what was still being counted, are
    /// written.
    fn flush(&self) {
        if let Some(running) = &self.running {
            running.finish(std::time::Duration::from_secs(2));
        }
        let summary = self.limiter.lock().ok().and_then(|mut l| l.take_summary());
        if let Some(summary) = summary {
            self.write_summary(&summary);
        }
    }
}

/// Run one command confined, wait for it, and discard its throwaway session unless asked to keep it.
///
/// Must be called while the process is single-threaded (the jail forks).
pub fn run(request: RunRequest) -> Result<RunReport, RunError> {
    // As root, the sandbox's network namespace is made on the other CPU while this prepares.
    let network = airlock_jail::start_network()?;
    // Made (or checked to be ours) first, so that it can be compared by its canonical path.
    let staging = staging_dir(&request.state_dir)?;
    let state_dir = request
        .state_dir
        .canonicalize()
        .unwrap_or_else(|_| request.state_dir.clone());
    check_workspace(
        &request.workspace,
        &state_dir,
        &homes(request.caller_home.as_deref()),
    )?;
    check_profile_paths(
        &request.profile,
        &request.workspace,
        &state_dir,
        &request.policy_dirs,
    )?;
    check_profile_paths_exist(&request.profile)?;
    let rootful = nix::unistd::geteuid().is_root();
    let (host_uid, host_gid) = if rootful {
        (request.root_sandbox_id, request.root_sandbox_id)
    } else {
        (
            nix::unistd::geteuid().as_raw(),
            nix::unistd::getegid().as_raw(),
        )
    };
    let throwaway = request.session.is_none() && !request.keep;
    // A throwaway run keeps its changes in memory when the kernel allows: no disk at all.
    let mut session = if throwaway && airlock_jail::memory_layer_supported() {
        None
    } else {
        Some(match &request.session {
            Some(id) => {
                let session = Session::find(&request.state_dir, id)?;
                session.check_workspace(&request.workspace)?;
                session
            }
            None => Session::create(
                &request.state_dir,
                NewSession {
                    workspace: &request.workspace,
                    name: None,
                    profile: request.profile_ref.clone(),
                },
            )?,
        })
    };
    // Runs in one session take turns: each sees the layer as the previous one left it.
    let lock = match &mut session {
        Some(session) => {
            let waiting_since = crate::ledger::now_ns();
            let lock = session.lock_exclusive(&request.on_session_busy)?;
            // A kill of the session meant its queued commands too.
            session.check_not_killed_since(waiting_since)?;
            session.check_active()?;
            crate::apply::check_no_interrupted_apply(session)?;
            Some(lock)
        }
        None => None,
    };
    if rootful {
        if let Some(session) = &session {
            session.chown_layer(host_uid, host_gid)?;
        }
    }
    let layer = match &session {
        Some(session) => Layer::Disk {
            upper: session.upper(),
            work: session.work(),
        },
        None => Layer::Memory {
            size_bytes: request.profile.limits.tmp_bytes,
        },
    };
    let profile = &request.profile;
    let cwd = request
        .caller_cwd
        .filter(|cwd| cwd.starts_with(&request.workspace))
        .unwrap_or_else(|| request.workspace.clone());
    let mut binds: Vec<Bind> = profile
        .filesystem
        .read_only
        .iter()
        .map(|path| Bind {
            path: path.clone(),
            writable: false,
        })
        .collect();
    binds.extend(profile.filesystem.read_write.iter().map(|path| Bind {
        path: path.clone(),
        writable: true,
    }));
    let spec = SandboxSpec {
        argv: request.argv,
        env: sandbox_env(profile, &request.caller_env),
        cwd,
        ids: IdMapping {
            inside_uid: INSIDE_ID,
            inside_gid: INSIDE_ID,
            host_uid,
            host_gid,
        },
        workspace: OverlayWorkspace {
            lower: request.workspace.clone(),
            layer,
        },
        binds,
        hide: profile.filesystem.hide.clone(),
        limits: ResourceLimits {
            memory_bytes: profile.limits.memory_bytes,
            processes: profile.limits.processes,
            cpu_seconds: profile.limits.cpu_seconds,
            open_files: profile.limits.open_files,
            tmp_bytes: profile.limits.tmp_bytes,
            timeout: profile.limits.timeout_seconds.map(Duration::from_secs),
            output_bytes: request.limit_output.then_some(profile.limits.output_bytes),
        },
        degraded: request.degraded,
        hostname: "airlock".into(),
        network_gate: profile.network != airlock_policy::NetworkMode::None,
        user_name: SANDBOX_USER.into(),
        home: PathBuf::from(SANDBOX_HOME),
    };
    let cache = request.state_dir.join("cache");
    // A switch set with 'airlock disable' stops every run of its scope.
    crate::control::check_enabled(&request.state_dir, &profile.name)?;
    let audit = crate::audit::log(&request.state_dir);
    let session_id = session.as_ref().map(|s| s.id.clone());
    let limits = &spec.limits;
    let intent = serde_json::json!({
        "session": session_id,
        "profile": profile.name,
        "policy": crate::audit::policy_digest(profile),
        "argv": spec.argv.iter().map(crate::audit::text).collect::<Vec<_>>(),
        "cwd": spec.cwd,
        "workspace": request.workspace,
        "network": &profile.network,
        "limits": {
            "memory_bytes": limits.memory_bytes,
            "processes": limits.processes,
            "cpu_seconds": limits.cpu_seconds,
            "timeout_seconds": limits.timeout.map(|t| t.as_secs()),
            "tmp_bytes": limits.tmp_bytes,
            "output_bytes": limits.output_bytes,
            "open_files": limits.open_files,
        },
        "sandbox_uid": host_uid,
    });
    let started = now();
    let started_ns = crate::ledger::now_ns();
    let clock = std::time::Instant::now();
    let argv_text: Vec<String> = spec.argv.iter().map(crate::audit::text).collect();
    // The intent is written, and the run's entry in the registry of running sandboxes (which
    // 'airlock kill/pause' read) is given its space, while the sandbox is being set up: both are
    // on disk before the command starts, which waits for this; if either fails, the sandbox is
    // stopped and its command never runs. (A full disk refuses the run here.)
    let mut registration = None;
    let mut refusal: Option<RunError> = None;
    let mut before_start = || {
        let written = crate::audit::append_deferred(&audit, "run.intent", intent.clone())
            .map_err(RunError::from)
            .and_then(|()| crate::control::reserve(&request.state_dir).map_err(RunError::from));
        match written {
            Ok(reserved) => registration = Some(reserved),
            Err(err) => {
                let text = err.to_string();
                refusal = Some(err);
                return Err(text);
            }
        }
        // Debug builds: AIRLOCK_TEST_FAULT=gate makes the last check fail, for the tests.
        if cfg!(debug_assertions) && std::env::var("AIRLOCK_TEST_FAULT").as_deref() == Ok("gate") {
            return Err("the audit log could not be synced (test fault)".to_string());
        }
        audit.sync().map_err(|e| e.to_string())
    };
    let spawned = airlock_jail::spawn(&spec, &staging, &cache, network, &mut before_start);
    if let Some(err) = refusal {
        return Err(err);
    }
    if registration.is_none() {
        // The launch failed before it came to that: the attempt is recorded all the same,
        // with its result below.
        crate::audit::append_deferred(&audit, "run.intent", intent)?;
    }
    let mut gate_log = None;
    let mut killed_by_switch = None;
    // Once its command has ended, the sandbox is reaped as late as it can be: the kernel tears
    // its namespaces down meanwhile, in parallel with the bookkeeping below.
    let mut ending: Option<airlock_jail::Sandbox> = None;
    // Each step below that needs the sandbox gone reaps it, if no earlier step has.
    let reap = |ending: &mut Option<airlock_jail::Sandbox>| {
        if let Some(sandbox) = ending.take() {
            sandbox.reap();
        }
    };
    let result = spawned.and_then(|mut sandbox| {
        if let Some(gate) = sandbox.take_gate() {
            gate_log = Some(start_gate(
                gate,
                profile,
                &request.resolve,
                &request.state_dir,
                session_id.clone(),
            )?);
        }
        let entry = crate::control::Running {
            supervisor: std::process::id(),
            sandbox: sandbox.id(),
            session: session_id.clone(),
            profile: profile.name.clone(),
            argv: argv_text.clone(),
            uid: nix::unistd::getuid().as_raw(),
            started,
        };
        let filled = match &registration {
            Some(registration) => registration.fill(&entry).map_err(|e| e.to_string()),
            None => Err("no entry was reserved".to_string()),
        };
        match filled {
            Ok(()) => {
                let finished = sandbox.wait();
                killed_by_switch = registration
                    .as_ref()
                    .and_then(crate::control::Registration::killed_by_switch);
                ending = Some(sandbox);
                finished
            }
            // A run the kill switch cannot reach does not go on.
            Err(err) => {
                sandbox.kill();
                let _ = sandbox.wait();
                sandbox.reap();
                Err(airlock_jail::JailError::Invalid(format!(
                    "the run could not be listed for the kill switch, so it was stopped: {err}"
                )))
            }
        }
    });
    // The gate's last events, and a session's layer, are only complete once no process of the
    // sandbox is left.
    if gate_log.is_some() || session.is_some() {
        reap(&mut ending);
    }
    if let Some(gate_log) = &gate_log {
        gate_log.flush();
    }
    let usage = match result.as_ref().ok().and_then(|finished| finished.usage) {
        Some(usage) => Some(usage),
        // Pid 1 had no word (killed, timed out): once reaped, it is among our children.
        None => {
            reap(&mut ending);
            airlock_jail::Usage::of_children()
        }
    };
    let mut fields = serde_json::json!({
        "session": session_id,
        "profile": profile.name,
        "duration_ms": clock.elapsed().as_millis() as u64,
        "cpu_ms": usage.map(|u| u.cpu.as_millis() as u64),
        // The largest single process of the run.
        "peak_rss_bytes": usage.map(|u| u.max_rss_bytes),
    });
    match &result {
        Ok(finished) => {
            let map = fields.as_object_mut().expect("an object");
            match finished.outcome {
                Outcome::Exited(code) => {
                    map.insert("exit_code".into(), code.into());
                    if code > 128 {
                        map.insert("signal".into(), (code - 128).into());
                    }
                }
                Outcome::TimedOut => {
                    map.insert("limit".into(), "timeout".into());
                }
                Outcome::CpuLimitReached => {
                    map.insert("limit".into(), "cpu".into());
                }
            }
            map.insert(
                "output_dropped_bytes".into(),
                finished.output_dropped.into(),
            );
            if let Some(memory) = finished.memory {
                if let Some(peak) = memory.peak_bytes {
                    map.insert("peak_memory_bytes".into(), peak.into());
                }
                if memory.oom_kills > 0 {
                    map.insert("oom_kills".into(), memory.oom_kills.into());
                    map.insert("limit".into(), "memory".into());
                }
            }
            if !finished.output_failures.is_empty() {
                let failures: Vec<String> = finished
                    .output_failures
                    .iter()
                    .map(|(stream, errno)| format!("{stream}: {}", errno.desc()))
                    .collect();
                map.insert("output_failed".into(), failures.into());
            }
            if finished.output_dropped > 0 {
                map.insert("limit".into(), "output".into());
            }
            if let Some(why) = &killed_by_switch {
                map.insert("killed_by".into(), why.clone().into());
            }
        }
        Err(err) => {
            let map = fields.as_object_mut().expect("an object");
            map.insert("error".into(), err.to_string().into());
        }
    }
    // The command ran: a result that cannot be written is reported, not the run's failure. It
    // is not waited for: the next record's fsync (or the kernel) makes it durable.
    let audit_error = crate::audit::append_deferred(&audit, "run.result", fields)
        .err()
        .map(|e| e.to_string());
    // The run leaves the registry of running sandboxes once its result is written, then returns
    // only when nothing of the sandbox remains.
    drop(registration);
    reap(&mut ending);
    if let Some(mut session) = session {
        if throwaway {
            // The layer of a throwaway session is garbage whatever happened; a failure to delete
            // it is not the command's failure.
            drop(lock);
            let _ = session.remove();
        } else {
            session.meta.last_run = Some(started);
            session.meta.runs += 1;
            session.save()?;
            // What the host had at each path this run touched first, for apply's conflict check.
            // Without it apply judges by the session's start, more strictly: not worth the
            // command's exit status.
            let _ = crate::ledger::record_after_run(&session, started_ns);
        }
    }
    let finished = result?;
    Ok(RunReport {
        outcome: finished.outcome,
        output_dropped: finished.output_dropped,
        output_failures: finished.output_failures,
        oom_kills: finished.memory.map_or(0, |m| m.oom_kills),
        killed_by_switch,
        session_id,
        kept: !throwaway,
        audit_error,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pairs(list: &[(&str, &str)]) -> Vec<(OsString, OsString)> {
        list.iter()
            .map(|(k, v)| (OsString::from(k), OsString::from(v)))
            .collect()
    }

    #[test]
    fn env_keeps_only_the_allowlist_and_sets_identity() {
        let mut profile = Profile::builtin_default();
        profile.env.set.insert("RUST_LOG".into(), "info".into());
        let env = sandbox_env(
            &profile,
            &pairs(&[
                ("PATH", "/usr/bin"),
                ("AWS_SECRET_ACCESS_KEY", "x"),
                ("LC_ALL", "C"),
                ("HOME", "/root"),
            ]),
        );
        let get = |k: &str| {
            env.iter()
                .find(|(key, _)| key == k)
                .map(|(_, v)| v.to_str().unwrap().to_string())
        };
        assert_eq!(get("AWS_SECRET_ACCESS_KEY"), None);
        assert_eq!(get("PATH").as_deref(), Some("/usr/bin"));
        assert_eq!(get("LC_ALL").as_deref(), Some("C"));
        assert_eq!(get("HOME").as_deref(), Some(SANDBOX_HOME));
        assert_eq!(get("RUST_LOG").as_deref(), Some("info"));
    }

    #[test]
    fn profile_paths_that_open_holes_are_refused() {
        let ws = Path::new("/srv/ws");
        let state = Path::new("/var/lib/airlock");
        let policy = vec![PathBuf::from("/etc/airlock/profiles")];
        let check = |ro: &[&str], rw: &[&str], hide: &[&str]| {
            let mut profile = Profile::builtin_default();
            profile.filesystem.read_only = ro.iter().map(PathBuf::from).collect();
            profile.filesystem.read_write = rw.iter().map(PathBuf::from).collect();
            profile.filesystem.hide = hide.iter().map(PathBuf::from).collect();
            check_profile_paths(&profile, ws, state, &policy).is_ok()
        };
        assert!(check(
            &["/opt/tools", "/srv/ws/.git"],
            &["/srv/cache"],
            &["/srv/ws/.env"]
        ));
        assert!(!check(&["/var/lib"], &[], &[]), "state dir exposed");
        assert!(
            !check(&["/var/lib/airlock/sessions"], &[], &[]),
            "state dir exposed"
        );
        assert!(!check(&[], &["/srv"], &[]), "rw containing the workspace");
        assert!(
            !check(&[], &["/srv/ws/build"], &[]),
            "rw inside the workspace"
        );
        assert!(
            !check(&["/srv/cache/tools"], &["/srv/cache"], &[]),
            "ro nested in rw"
        );
        assert!(
            !check(&[], &["/srv/cache"], &["/srv/cache/key"]),
            "hide nested in rw"
        );
        assert!(!check(&[], &["/etc"], &[]), "rw over policy");
        assert!(!check(&["/srv/ws"], &[], &[]), "the workspace itself");
    }

    #[test]
    fn workspace_refusals() {
        let state = tempfile::tempdir().unwrap();
        let homes = homes(None);
        assert!(check_workspace(Path::new("/"), state.path(), &homes).is_err());
        assert!(check_workspace(Path::new("/usr/lib"), state.path(), &homes).is_err());
        assert!(check_workspace(state.path(), &state.path().join("x"), &homes).is_err());
        assert!(check_workspace(Path::new("/home"), state.path(), &homes).is_err());
        let home = tempfile::tempdir().unwrap();
        let mine = super::homes(Some(home.path()));
        assert!(
            check_workspace(home.path(), state.path(), &mine).is_err(),
            "the caller's home"
        );
        std::fs::create_dir(home.path().join("project")).unwrap();
        assert!(check_workspace(&home.path().join("project"), state.path(), &mine).is_ok());
        let ws = tempfile::tempdir().unwrap();
        assert!(check_workspace(ws.path(), state.path(), &homes).is_ok());
    }
}
