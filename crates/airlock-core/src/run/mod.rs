//! `airlock run`: from a front end's request to a confined process and its status, in phases
//! that follow one another in this order (each a function below):
//!
//! 1. [`resolve`] the request: state directory, workspace, session, profile (from where policy
//!    lives, never from the workspace), the sandbox's host identity, the layers given up;
//! 2. [`check`] it against the rules: where a workspace may be, which profile paths open holes;
//! 3. [`take_turn`] in the session: find or make its layer, wait for the runs before this one;
//!    then [`placeholders_for_turn`]: what the sandbox holds in place of the profile's secrets;
//! 4. [`sandbox_spec`]: what the jail builds;
//! 5. [`launch()`]: the kill switch is asked, the jail prepares the sandbox, the secrets' values
//!    are read (now that no process of the sandbox can hold a copy of them), and while it
//!    confines itself the intent is written to the audit log (fsync'd) and the run listed for the kill
//!    switch; only then may the command start;
//! 6. [`supervise`]: the network gate, the wait;
//! 7. [`record_result`], then 8. [`settle`] the session: count the run, or drop a throwaway layer.

mod answer;
mod checks;
mod env;
mod gate_log;
mod injection;
mod launch;
pub(crate) mod limits;
mod limits_check;
mod records;
mod refused;
mod warm;

use std::ffi::OsString;
use std::net::IpAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use airlock_jail::{
    Bind, ChangeLayer, Degraded, Finished, IdMapping, JailError, Outcome, OverlayWorkspace,
    ResourceLimits, Sandbox, SandboxSpec,
};
use airlock_policy::Profile;

use crate::caller::{
    describe_profile, load_trusted_profile, policy_dirs, Caller, ProfileChoice, Role,
};
use crate::control::Registration;
use crate::error::Error;
use crate::secrets::Placeholder;
use crate::session::{now, staging_dir, NewSession, ProfileRef, Session, SessionLock};
use airlock_egress::inject::{Injector, SessionCa};
pub use answer::{
    command_argv, counted, timeout_ms, Limit, RunAnswer, RunBody, RunEnd, RunEvent, RunResult,
    MAX_COMMAND_BYTES,
};
pub(crate) use checks::check_workspace_for;
pub use env::{SANDBOX_HOME, SANDBOX_USER};
use gate_log::{start_gate, GateLog};
use launch::{launch, record_result, settle, supervise, LaunchPlan, Listing, Started};
pub use limits_check::{check_limits, LimitCheck};
use records::{Intent, ResultRecord};
pub use refused::RefusedDestination;
pub use warm::{prepare_run, run_prepared, PreparedRun, MAX_WAIT as WARM_MAX_WAIT};

/// The sandbox user's uid and gid inside.
const INSIDE_ID: u32 = 1000;

/// One command to run confined, as a front end asks for it. Core resolves and judges each field.
/// A threaded front end hands it to a worker process as it is (see airlock-runner's `Job`).
#[derive(Debug, Clone, Default, serde::Serialize, serde::Deserialize)]
pub struct RunRequest {
    /// The command and its arguments.
    pub argv: Vec<OsString>,
    /// The profile; a session's runs take the session's (naming another is refused).
    pub profile: ProfileChoice,
    /// The workspace (default: the caller's working directory, or the session's).
    pub workspace: Option<PathBuf>,
    /// Run in this session (id or name) instead of a throwaway one.
    pub session: Option<String>,
    /// Keep a throwaway run's layer on disk, as a new session.
    pub keep: bool,
    /// Layers the caller accepts to run without (`landlock` only).
    pub allow_degraded: Vec<String>,
    /// As root: the host uid and gid the sandbox runs as (default [`crate::DEFAULT_ROOT_SANDBOX_ID`]).
    pub sandbox_uid: Option<u32>,
    /// `NAME=IP`: names the network gate resolves to these addresses instead of asking the host's
    /// resolver (trusted: a loopback or private address given here is not refused).
    pub resolve: Vec<String>,
    /// Relay output through airlock and apply the profile's output limit (for output that is
    /// kept: a pipe or a file). False: the command writes to airlock's stdout and stderr directly.
    pub limit_output: bool,
    /// The variables the request asks the command to get, of which the profile's allowlist
    /// passes some; None: the caller's environment is the source (the CLI's).
    pub env: Option<Vec<(OsString, OsString)>>,
    /// A wall-clock limit shorter than the profile's (a longer one is held to the profile's).
    pub timeout: Option<Duration>,
    /// A learning run (`airlock learn`): the profile's network is open to every public address
    /// (what it denies, and the private addresses it does not name, stay refused) and what the
    /// command reaches is gathered, with what it uses, for [`RunReport::learned`]; its secrets
    /// are not given. Kept as a session; an operator's act only: an agent must never turn its
    /// own network on by asking to learn.
    pub learn: bool,
}

impl RunRequest {
    /// A throwaway run: in no session, not kept, not learning. Only such a run's sandbox may be
    /// prepared before it comes (see [`prepare_run`]), when its layer also lives in memory.
    pub fn is_throwaway(&self) -> bool {
        self.session.is_none() && !self.keep && !self.learn
    }
}

#[derive(Debug)]
pub struct RunReport {
    pub outcome: Outcome,
    /// The session the run used; None for a throwaway run kept in memory.
    pub session_id: Option<String>,
    /// A throwaway run's layer was kept (`--keep`) as the new session `session_id`.
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
    /// The profile's CPU time limit, all processes together (to explain [`Outcome::CpuLimitReached`]).
    pub cpu_limit: Duration,
    /// What the network gate refused, by destination (see [`RunEnd::refused`]).
    pub refused: Vec<RefusedDestination>,
    /// Refused attempts at destinations past that list.
    pub refused_unlisted: u64,
    /// What a learning run used (see [`RunRequest::learn`]).
    pub learned: Option<airlock_policy::learn::Observed>,
}

/// Exit status when the wall-clock limit ended the run, as timeout(1) uses.
pub const EXIT_TIMED_OUT: i32 = 124;
/// 128 + SIGXCPU: what a single process past its own CPU limit (RLIMIT_CPU) exits with.
pub const EXIT_CPU_LIMIT: i32 = 152;
/// 128 + SIGXFSZ: what a process past RLIMIT_FSIZE gets, for the sandbox's disk limit.
pub const EXIT_DISK_LIMIT: i32 = 153;

impl RunReport {
    /// The status a front end reports for the run: the command's own, or the one that says
    /// which limit ended it.
    pub fn exit_status(&self) -> i32 {
        match self.outcome {
            Outcome::Exited(code) => code,
            Outcome::TimedOut => EXIT_TIMED_OUT,
            Outcome::CpuLimitReached => EXIT_CPU_LIMIT,
            Outcome::DiskLimitReached => EXIT_DISK_LIMIT,
        }
    }
}

/// Run one command confined, wait for it, and discard its throwaway session unless asked to keep
/// it. A refusal is recorded in the audit log (`run.refused`) with the caller's words.
///
/// Must be called while the process is single-threaded (the jail forks).
pub fn run(caller: &Caller, request: RunRequest) -> Result<RunReport, Error> {
    run_answering(caller, request, &mut |_| {})
}

/// [`run`], telling `answer` the report as soon as the run's result is recorded and its session
/// settled, before what is left of the sandbox is reaped (its pid 1's exit, its cgroups): for a
/// front end whose client waits for the answer, not for the cleanup. The report given is the
/// one returned.
///
/// Must be called while the process is single-threaded (the jail forks).
pub fn run_answering(
    caller: &Caller,
    request: RunRequest,
    answer: &mut dyn FnMut(&RunReport),
) -> Result<RunReport, Error> {
    let session = request.session.clone();
    crate::refusal::audited(caller, "run.refused", session.as_deref(), || {
        run_confined(caller, request, answer)
    })
}

/// Judge a run as [`run`] would before it builds anything: its places, profile and session,
/// and the kill switch; a refusal is recorded as `run.refused`. For a front end that must answer
/// before the run starts (a streamed answer, whose status goes out first); the run judges again.
pub fn check_run(caller: &Caller, request: RunRequest) -> Result<(), Error> {
    let session = request.session.clone();
    crate::refusal::audited(caller, "run.refused", session.as_deref(), || {
        let plan = resolve(caller, request)?;
        if let Some(session) = &plan.session {
            session.check_active()?;
        }
        crate::control::check_enabled(&plan.state_dir, &plan.profile.name)?;
        Ok(())
    })
}

fn run_confined(
    caller: &Caller,
    request: RunRequest,
    answer: &mut dyn FnMut(&RunReport),
) -> Result<RunReport, Error> {
    let plan = resolve(caller, request)?;
    // PERF: as root, the sandbox's network namespace is made on the other CPU while this prepares.
    let network = airlock_jail::start_network(caller.way)?;
    let built = build(&plan)?;
    carry_out(&plan, built, Sandboxing::Cold(network), answer)
}

/// Phases 2 to 4: what a run's sandbox is built from, judged and made ready.
struct Built {
    staging: PathBuf,
    turn: Turn,
    placeholders: Vec<Placeholder>,
    ca: Option<SessionCa>,
    spec: SandboxSpec,
}

fn build(plan: &Plan) -> Result<Built, Error> {
    let (staging, disk_guard) = check(plan)?;
    let ca = injection::session_ca(&plan.profile)?;
    let mut turn = take_turn(plan)?;
    let placeholders = placeholders_for_turn(plan, &mut turn)?;
    let trust = ca.as_ref().map(injection::trust);
    let spec = sandbox_spec(plan, &turn, &placeholders, trust, disk_guard);
    Ok(Built {
        staging,
        turn,
        placeholders,
        ca,
        spec,
    })
}

/// How the sandbox of a run comes to be: built now, or prepared ahead (a warm sandbox, see
/// [`warm`]) and given its command at the start.
enum Sandboxing {
    Cold(Option<airlock_jail::PendingNetwork>),
    /// Prepared at that instant.
    Warm(Box<airlock_jail::Launching>, std::time::Instant),
}

/// Phases 5 to 8: the run from its intent to its settled session; `answer` is told the report
/// before the sandbox's last remains are reaped.
fn carry_out(
    plan: &Plan,
    built: Built,
    sandboxing: Sandboxing,
    answer: &mut dyn FnMut(&RunReport),
) -> Result<RunReport, Error> {
    let Built {
        staging,
        mut turn,
        placeholders,
        ca,
        spec,
    } = built;
    let session_id = turn.session.as_ref().map(|s| s.id.clone());
    let audit = crate::audit::log_for(plan.caller, &plan.state_dir);
    let intent = intent_of(plan, session_id.as_deref(), &spec, &sandboxing)?;
    let clock = Started::now();
    let listing = Listing {
        run_id: intent.run_id.clone(),
        session: session_id.clone(),
        argv: intent.argv.clone(),
        started: clock.seconds,
    };
    let launch_plan = LaunchPlan {
        spec: &spec,
        staging: &staging,
        intent: &intent,
        listing,
        placeholders: &placeholders,
        ca,
    };
    let (launched, registration, injector) = launch(plan, launch_plan, sandboxing, &audit)?;
    // Runs whose supervisor is gone are closed while this one's command runs: none of it is on
    // the way to the command's start (an entry of this pid left by one is closed by `reserve`).
    crate::abandoned::close(&plan.state_dir);
    let session = session_id.clone();
    let mut supervised = supervise(plan, launched, registration.as_ref(), session, injector);
    let (refused, observed) = gate_findings(plan, &mut supervised, turn.session.is_some());
    let (audit_error, measured) = record_result(
        &audit,
        &plan.profile,
        &clock,
        &mut supervised,
        &session_id,
        &refused,
    );
    let learned = observed.map(|mut observed| {
        (observed.cpu_ms, observed.peak_memory_bytes) = measured;
        observed.layer_bytes = turn.session.as_ref().map(|s| layer_bytes(&s.upper()));
        observed
    });
    // The run leaves the registry of running sandboxes once its result is written, then returns
    // only when nothing of the sandbox remains.
    drop(registration);
    // What is left of the sandbox (pid 1 exiting, its cgroups) is reaped once the report is
    // given. The session's layer is settled before: a run with a layer on disk was reaped
    // above already (nothing writes to it any more), one without has nothing to settle.
    let ending = supervised.ending.take();
    // A session named by the request was the caller's already: kept is a throwaway's news.
    let kept = !turn.throwaway && plan.session.is_none();
    let session_dir = turn
        .session
        .as_ref()
        .filter(|_| !turn.throwaway)
        .map(|s| s.dir.clone());
    settle(&mut turn, &clock)?;
    let finished = supervised.result?;
    if let (Some(dir), Some(tails)) = (&session_dir, &finished.output_tails) {
        crate::session_runs::keep_output(dir, &intent.run_id, tails);
    }
    let report = RunReport {
        outcome: finished.outcome,
        output_dropped: finished.output_dropped,
        output_failures: finished.output_failures,
        oom_kills: finished.memory.map_or(0, |m| m.oom_kills),
        killed_by_switch: supervised.killed_by_switch,
        session_id,
        kept,
        audit_error,
        cpu_limit: Duration::from_secs(plan.profile.limits.cpu_seconds),
        refused: refused.0,
        refused_unlisted: refused.1,
        learned,
    };
    answer(&report);
    launch::test_pause("answered");
    if let Some(sandbox) = ending {
        sandbox.reap();
    }
    Ok(report)
}

/// Step 12's record: what is about to run, where, under which profile and limits.
fn intent_of<'a>(
    plan: &'a Plan,
    session: Option<&'a str>,
    spec: &'a SandboxSpec,
    sandboxing: &Sandboxing,
) -> Result<Intent<'a>, Error> {
    Ok(Intent {
        run_id: crate::tokens::random_hex(8)?,
        session,
        profile: &plan.profile.name,
        policy: crate::audit::policy_digest(&plan.profile),
        argv: spec.argv.iter().map(crate::audit::text).collect(),
        cwd: &spec.cwd,
        workspace: &plan.workspace,
        network: &plan.profile.network,
        ask: records::Ask::of(&plan.profile),
        limits: Intent::limits(&spec.limits, &plan.profile.limits),
        sandbox_uid: plan.host_ids.0,
        prepared_ms_before: match sandboxing {
            Sandboxing::Warm(_, prepared) => Some(prepared.elapsed().as_millis() as u64),
            Sandboxing::Cold(_) => None,
        },
    })
}

/// What the gate refused and (learning) observed, once its log is complete. A relaying gate's
/// last events (connections closed), and a session's layer, are only complete once no process
/// of the sandbox is left; so are a refusing gate's, when the sandbox used the network (a
/// process may still be asking as pid 1 ends): the sandbox is reaped first then. A run that
/// never did is not (its overlap with the bookkeeping is kept): flushing waits for what the
/// gate took and has not finished.
fn gate_findings(
    plan: &Plan,
    supervised: &mut launch::Supervised,
    has_layer: bool,
) -> (
    (Vec<RefusedDestination>, u64),
    Option<airlock_policy::learn::Observed>,
) {
    let relaying = plan.profile.network != airlock_policy::NetworkMode::None;
    let gate_used = supervised
        .gate_log
        .as_ref()
        .is_some_and(|g| relaying || g.used());
    if gate_used || has_layer {
        supervised.reap();
    }
    match &supervised.gate_log {
        Some(gate_log) => {
            gate_log.flush();
            (gate_log.refused(), gate_log.observed())
        }
        None => ((Vec::new(), 0), None),
    }
}

/// The bytes of the files under `dir` (not following links): what a learning run wrote.
fn layer_bytes(dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return 0;
    };
    entries
        .flatten()
        .map(|entry| match entry.metadata() {
            Ok(meta) if meta.is_dir() => layer_bytes(&entry.path()),
            Ok(meta) => meta.len(),
            Err(_) => 0,
        })
        .sum()
}

/// Who answers the sandbox's network: the gate decides and relays for a profile with network
/// rules; with none it refuses every lookup and connect at once and says what was asked for,
/// where the kernel lets it (seccomp user notifications), else the sandbox has its loopback
/// alone and nothing answers.
fn network_gate(network: &airlock_policy::NetworkMode) -> airlock_jail::NetworkGate {
    match network {
        airlock_policy::NetworkMode::None if airlock_jail::gate::supported() => {
            airlock_jail::NetworkGate::Refusing
        }
        airlock_policy::NetworkMode::None => airlock_jail::NetworkGate::Absent,
        _ => airlock_jail::NetworkGate::Relaying,
    }
}

/// A request made concrete: every path canonical, the profile loaded, the identity chosen.
struct Plan<'a> {
    caller: &'a Caller,
    state_dir: PathBuf,
    workspace: PathBuf,
    /// The session the request named, found.
    session: Option<Session>,
    profile_ref: ProfileRef,
    profile: Profile,
    policy_dirs: Vec<PathBuf>,
    /// The sandbox user on the host: uid, gid.
    host_ids: (u32, u32),
    degraded: Degraded,
    resolve: Vec<(String, IpAddr)>,
    argv: Vec<OsString>,
    keep: bool,
    limit_output: bool,
    env: Option<Vec<(OsString, OsString)>>,
    timeout: Option<Duration>,
    /// See [`RunRequest::learn`].
    learning: bool,
}

/// Phase 1: the request's places, policy and identity, each judged by core.
fn resolve(caller: &Caller, request: RunRequest) -> Result<Plan<'_>, Error> {
    check_role(caller, &request)?;
    let degraded = crate::identity::accepted_degradation(&request.allow_degraded)?;
    let state_dir = caller.state_dir()?;
    let chosen = request.profile.resolve(caller)?;
    let (workspace, profile_ref, session) = match &request.session {
        None => (
            caller.workspace(request.workspace.as_deref())?,
            chosen,
            None,
        ),
        Some(_) if request.keep => return Err(Error::NotForSessions { what: "keep" }),
        Some(_) if request.learn => return Err(Error::NotForSessions { what: "learn" }),
        Some(id) => {
            let session = caller.find_session(&state_dir, id)?;
            let workspace = session.existing_workspace(caller.way)?.to_path_buf();
            if let Some(dir) = &request.workspace {
                session.check_workspace(&caller.workspace(Some(dir))?)?;
            }
            if request.profile.is_given() && chosen != session.meta.profile {
                return Err(Error::ProfileOfSession {
                    id: session.id.clone(),
                    profile: describe_profile(&session.meta.profile),
                });
            }
            (workspace, session.meta.profile.clone(), Some(session))
        }
    };
    let mut profile = load_trusted_profile(caller, &profile_ref, &workspace)?;
    // What people allowed for the rest of the session joins its allow entries here, once: the
    // run's intent records it, and its gate decides by it.
    if let (Some(session), airlock_policy::NetworkMode::Allow { allow, .. }) =
        (&session, &mut profile.network)
    {
        allow.extend(crate::approvals::session_allowed(&state_dir, &session.id));
    }
    if request.learn {
        learning_profile(&mut profile);
    }
    let policy_dirs = policy_dirs(caller, &profile);
    let host_ids = crate::identity::sandbox_host_ids(caller.way, request.sandbox_uid)?;
    let resolve = request
        .resolve
        .iter()
        .map(|pair| parse_resolve(pair))
        .collect::<Result<_, _>>()?;
    Ok(Plan {
        caller,
        state_dir,
        workspace,
        session,
        profile_ref,
        profile,
        policy_dirs,
        host_ids,
        degraded,
        resolve,
        argv: request.argv,
        keep: request.keep || request.learn,
        env: request.env,
        timeout: request.timeout,
        learning: request.learn,
        // An agent's output is always kept within the profile's limit.
        limit_output: request.limit_output || caller.role == Role::Agent,
    })
}

/// The stricter of the profile's time limit and the request's.
fn shorter(profile: Option<Duration>, asked: Option<Duration>) -> Option<Duration> {
    match (profile, asked) {
        (Some(a), Some(b)) => Some(a.min(b)),
        (a, b) => a.or(b),
    }
}

/// What widens a run beyond its profile is an operator's to ask: addresses the gate trusts, the
/// host identity, a layer given up.
fn check_role(caller: &Caller, request: &RunRequest) -> Result<(), Error> {
    if !request.resolve.is_empty() {
        caller.must_be_operator("name trusted addresses for the network gate (--resolve)")?;
    }
    if request.sandbox_uid.is_some() {
        caller.must_be_operator("choose the sandbox's host uid (--sandbox-uid)")?;
    }
    if !request.allow_degraded.is_empty() {
        caller.must_be_operator("give up a protection layer (--allow-degraded)")?;
    }
    if request.learn {
        caller.must_be_operator(crate::policy::LEARNING)?;
    }
    Ok(())
}

/// A learning run's profile: all of `profile` but its network, which is open but for what it
/// denies (private, loopback, link-local and metadata addresses stay refused unless it names
/// them), and its secrets, which a learning run never gives (a host reached with a secret would
/// be a host the secret reached).
fn learning_profile(profile: &mut Profile) {
    let (allow, deny) = match &profile.network {
        airlock_policy::NetworkMode::None => (Vec::new(), Vec::new()),
        airlock_policy::NetworkMode::Allow { allow, deny }
        | airlock_policy::NetworkMode::Open { allow, deny } => (allow.clone(), deny.clone()),
    };
    profile.network = airlock_policy::NetworkMode::Open { allow, deny };
    profile.secrets.clear();
    // Hosts with [[network.http]] rules are read, every request let through and recorded: the
    // proposal's rules are the requests the command made.
    for rules in &mut profile.http {
        rules.allow = None;
    }
}

/// `NAME=IP`, the name in the form the gate compares: lower case, no trailing dot.
fn parse_resolve(pair: &str) -> Result<(String, IpAddr), Error> {
    let refuse = |why: String| Error::Argument {
        arg: format!("--resolve {pair:?}"),
        why,
    };
    let (name, ip) = pair
        .split_once('=')
        .ok_or_else(|| refuse("write NAME=IP, e.g. --resolve api.test=127.0.0.1".into()))?;
    let ip = ip
        .parse()
        .map_err(|_| refuse(format!("{ip:?} is not an IP address")))?;
    Ok((name.trim_end_matches('.').to_ascii_lowercase(), ip))
}

/// Phase 2: refuse a workspace or profile paths no sandbox may have, or a limit the kernel
/// cannot enforce, before anything is built. Returns the empty directory the sandbox's root is
/// mounted on, and the watch on the disk under a layer kept there.
fn check(plan: &Plan) -> Result<(PathBuf, Option<airlock_jail::DiskGuard>), Error> {
    // Made (or checked to be ours) first, so that it can be compared by its canonical path.
    let staging = staging_dir(&plan.state_dir)?;
    let state_dir = plan
        .state_dir
        .canonicalize()
        .unwrap_or_else(|_| plan.state_dir.clone());
    checks::check_workspace(
        &plan.workspace,
        &state_dir,
        &checks::homes(plan.caller.home().as_deref()),
    )?;
    checks::check_profile_paths(
        &plan.profile,
        &plan.workspace,
        &state_dir,
        &plan.policy_dirs,
    )?;
    checks::check_profile_paths_exist(&plan.profile)?;
    checks::check_secret_files(&plan.profile, &plan.workspace)?;
    // A session's own filesystem: the one it has, or the one a new session will get.
    let own_filesystem = match &plan.session {
        Some(session) => session.meta.image.is_some(),
        None => limits::layer_image(&plan.profile.limits, &state_dir, plan.caller.way)?.is_some(),
    };
    let disk_guard = limits::disk_guard(
        &plan.profile.limits,
        &state_dir,
        !layer_in_memory(plan),
        own_filesystem,
        &plan.degraded,
    )?;
    // Before any layer is made for the run; asked again at the launch, for a run that waited
    // for its session meanwhile.
    crate::control::check_enabled(&plan.state_dir, &plan.profile.name)?;
    Ok((staging, disk_guard))
}

/// A throwaway run keeps its changes in memory when the kernel allows: no disk at all.
fn layer_in_memory(plan: &Plan) -> bool {
    plan.session.is_none() && !plan.keep && airlock_jail::memory_layer_supported(plan.caller.way)
}

/// The session a run uses, held for the run: runs in one session take turns.
struct Turn {
    /// None: a throwaway run whose layer lives in memory.
    session: Option<Session>,
    lock: Option<SessionLock>,
    /// The layer goes when the run ends.
    throwaway: bool,
}

/// Phase 3: the session's layer, and this run's turn in it.
fn take_turn(plan: &Plan) -> Result<Turn, Error> {
    let throwaway = plan.session.is_none() && !plan.keep;
    let mut session = match &plan.session {
        Some(session) => Some(session.clone()),
        None if layer_in_memory(plan) => None,
        None => Some(Session::create(
            &plan.state_dir,
            NewSession {
                workspace: &plan.workspace,
                name: None,
                profile: plan.profile_ref.clone(),
                image: limits::layer_image(&plan.profile.limits, &plan.state_dir, plan.caller.way)?,
                token: plan.caller.grant.as_ref().map(|g| g.token.clone()),
                way: plan.caller.way,
            },
        )?),
    };
    let lock = match &mut session {
        Some(session) => {
            let waiting_since = crate::ledger::now_ns();
            let lock = session.lock_exclusive(&plan.caller.on_busy)?;
            // A kill of the session meant its queued commands too.
            session.check_not_killed_since(waiting_since)?;
            session.check_active()?;
            crate::apply::check_no_interrupted_apply(session)?;
            Some(lock)
        }
        None => None,
    };
    if let (true, Some(session)) = (plan.caller.way.is_rootful(), &session) {
        session.chown_layer(plan.host_ids.0, plan.host_ids.1)?;
    }
    Ok(Turn {
        session,
        lock,
        throwaway,
    })
}

/// Phase 3b: the placeholders of the profile's secrets: those of the session the run keeps its
/// changes in, fresh for a throwaway run. A source that fails fails the run, and a session made
/// for it (`--keep`) is not left behind.
fn placeholders_for_turn(plan: &Plan, turn: &mut Turn) -> Result<Vec<Placeholder>, Error> {
    let kept = turn.session.as_ref().filter(|_| !turn.throwaway);
    match crate::secrets::placeholders_for_run(&plan.profile, kept) {
        Ok(placeholders) => Ok(placeholders),
        Err(err) => {
            if let (None, Some(made)) = (&plan.session, turn.session.take()) {
                turn.lock = None;
                let _ = made.remove();
            }
            Err(err)
        }
    }
}

/// Phase 4: what the jail builds for this run.
fn sandbox_spec(
    plan: &Plan,
    turn: &Turn,
    placeholders: &[Placeholder],
    trust: Option<airlock_jail::trust::Trust>,
    disk_guard: Option<airlock_jail::DiskGuard>,
) -> SandboxSpec {
    let profile = &plan.profile;
    let layer = match &turn.session {
        Some(session) => ChangeLayer::Disk {
            upper: session.upper(),
            work: session.work(),
        },
        None => limits::memory_layer(&profile.limits),
    };
    let cwd = plan
        .caller
        .cwd
        .clone()
        .filter(|cwd| cwd.starts_with(&plan.workspace))
        .unwrap_or_else(|| plan.workspace.clone());
    let fs = &profile.filesystem;
    let binds = fs
        .read_only
        .iter()
        .map(|path| (path, false))
        .chain(fs.read_write.iter().map(|path| (path, true)))
        .map(|(path, writable)| Bind {
            path: path.clone(),
            writable,
        })
        .collect();
    let (host_uid, host_gid) = plan.host_ids;
    SandboxSpec {
        argv: plan.argv.clone(),
        way: plan.caller.way,
        env: env::sandbox_env(
            profile,
            plan.env.as_deref().unwrap_or(&plan.caller.env),
            placeholders,
        ),
        cwd,
        ids: IdMapping {
            inside_uid: INSIDE_ID,
            inside_gid: INSIDE_ID,
            host_uid,
            host_gid,
        },
        workspace: OverlayWorkspace {
            lower: plan.workspace.clone(),
            layer,
        },
        binds,
        hide: fs.hide.clone(),
        limits: ResourceLimits {
            memory_bytes: profile.limits.memory_bytes,
            processes: profile.limits.processes,
            cpu_seconds: profile.limits.cpu_seconds,
            open_files: profile.limits.open_files,
            tmp_bytes: profile.limits.tmp_bytes,
            timeout: shorter(
                profile.limits.timeout_seconds.map(Duration::from_secs),
                plan.timeout,
            ),
            output_bytes: plan.limit_output.then_some(profile.limits.output_bytes),
            cpus: limits::cpu_bandwidth(&profile.limits),
            disk_guard,
        },
        degraded: plan.degraded,
        hostname: "airlock".into(),
        network_gate: network_gate(&profile.network),
        user_name: SANDBOX_USER.into(),
        home: PathBuf::from(SANDBOX_HOME),
        trust,
    }
}
