//! Warm sandboxes: a throwaway run's sandbox prepared before its request comes (`airlock serve`
//! keeps a few per profile and workspace), then given the request's command.
//!
//! What is prepared ahead is phases 1 to 4 and the jail's steps 1 to 11: namespaces, the root
//! filesystem, the cgroup, the gate's sockets. Nothing of a run has happened yet: no intent is
//! written, the kill switch does not list it, no secret's value has been read. When the request
//! comes, core judges it as it judges every run ([`resolve`] and [`check`] again, the kill
//! switch asked); the sandbox is used only if the one the request would get is the one that was
//! prepared (same profile as loaded now, same spec but for the command, the same host paths
//! under its mounts, not older than [`MAX_WAIT`]), else it is destroyed and the run is built
//! cold. Then the run goes on exactly as a cold one: its intent is written and synced before
//! its command starts. A prepared sandbox is used for one run only.

use std::os::unix::fs::MetadataExt as _;
use std::time::Instant;

use super::*;

/// How long a prepared sandbox may wait for its request. Its mounts hold the host as it was when
/// they were made (its `/etc`, the files its hides masked: a file renamed over a masked one is
/// seen through the mask); what [`HostPaths`] cannot see changing is bounded by this. Older, it
/// is not used: a pool should replace its sandboxes before.
pub const MAX_WAIT: Duration = Duration::from_secs(60);

/// A throwaway run's sandbox, prepared up to its go-ahead, waiting for its command. Dropping it
/// kills the sandbox (none of a command ever ran in it).
pub struct PreparedRun<'a> {
    plan: Plan<'a>,
    built: Built,
    launching: airlock_jail::Launching,
    /// When, and the host paths under its mounts as they were just before they were made.
    prepared: Instant,
    host: HostPaths,
}

impl PreparedRun<'_> {
    /// How the kill switch would find its sandbox.
    pub fn sandbox(&self) -> airlock_jail::control::SandboxId {
        self.launching.id()
    }
}

/// Prepare the sandbox of a throwaway run that `template` describes (its command, environment
/// and timeout are not used: they come with the request, in [`run_prepared`]). Only a run kept
/// in memory can be prepared: not one in a session, kept or learning.
///
/// Must be called while the process is single-threaded (the jail forks). SECURITY: the
/// sandbox's processes are clones of this one: call it in a process that has read no secret
/// (a fresh worker), and give the sandbox the stdio its command is to have.
pub fn prepare_run(caller: &Caller, template: RunRequest) -> Result<PreparedRun<'_>, Error> {
    let plan = resolve(caller, template)?;
    if !can_be_warm(&plan) {
        return Err(Error::Argument {
            arg: "a warm sandbox".into(),
            why: "only a throwaway run kept in memory can be prepared ahead: not one in a \
                  session, kept (--keep) or learning"
                .into(),
        });
    }
    let network = airlock_jail::start_network(caller.way)?;
    let built = build(&plan)?;
    let cache = plan.state_dir.join("cache");
    let host = HostPaths::of(&built.spec);
    let prepared = Instant::now();
    let launching =
        airlock_jail::prepare_without_command(&built.spec, &built.staging, &cache, network)?;
    Ok(PreparedRun {
        plan,
        built,
        launching,
        prepared,
        host,
    })
}

/// Run `request` in `prepared` if it is the sandbox the request would get, else in a sandbox
/// built for it now (`prepared` is then destroyed unused). Judged, recorded and refused exactly
/// as [`run`]: a refusal is recorded as `run.refused`.
///
/// Must be called while the process is single-threaded (the jail forks).
pub fn run_prepared(
    caller: &Caller,
    prepared: PreparedRun,
    request: RunRequest,
    answer: &mut dyn FnMut(&RunReport),
) -> Result<RunReport, Error> {
    let session = request.session.clone();
    crate::refusal::audited(caller, "run.refused", session.as_deref(), || {
        let plan = resolve(caller, request)?;
        let prepared_at = prepared.prepared;
        match matching(&plan, prepared)? {
            Some((built, launching)) => carry_out(
                &plan,
                built,
                Sandboxing::Warm(Box::new(launching), prepared_at),
                answer,
            ),
            None => {
                let network = airlock_jail::start_network(caller.way)?;
                let built = build(&plan)?;
                carry_out(&plan, built, Sandboxing::Cold(network), answer)
            }
        }
    })
}

/// The prepared sandbox, with what it was built from and the request's command, if it is the one
/// `plan` would get: judged again by [`check`] (the workspace, the profile's paths, the kill
/// switch), the same profile as loaded now and the same spec but for the command. None: it is
/// not (dropped here, which kills it).
fn matching(
    plan: &Plan,
    prepared: PreparedRun,
) -> Result<Option<(Built, airlock_jail::Launching)>, Error> {
    let PreparedRun {
        plan: was,
        built,
        launching,
        prepared,
        host,
    } = prepared;
    if prepared.elapsed() > MAX_WAIT
        || !can_be_warm(plan)
        || plan.profile != was.profile
        || !same_caller(plan.caller, was.caller)
        || !same_places(plan, &was)
    {
        return Ok(None);
    }
    let (_, disk_guard) = check(plan)?;
    let trust = built.spec.trust.clone();
    let wanted = sandbox_spec(plan, &built.turn, &built.placeholders, trust, disk_guard);
    if !same_sandbox(&wanted, &built.spec) || HostPaths::of(&wanted) != host {
        return Ok(None);
    }
    Ok(Some((
        Built {
            spec: wanted,
            ..built
        },
        launching,
    )))
}

/// Only a throwaway run whose layer lives in memory leaves nothing of itself on disk before it
/// starts, and nothing after.
fn can_be_warm(plan: &Plan) -> bool {
    plan.session.is_none() && !plan.keep && !plan.learning && layer_in_memory(plan)
}

/// The same identity asks: the same role, token and way (the worker that prepared a sandbox
/// for a token serves that token's requests alone).
fn same_caller(caller: &Caller, was: &Caller) -> bool {
    caller.role == was.role && caller.grant == was.grant && caller.way == was.way
}

/// The host paths a sandbox's mounts are made over or from (the workspace, each bind, each
/// hide), each with its identity (device and inode, not following a last symlink) or its
/// absence. A path that appeared since (a file under a hide that was not there to mask), went,
/// or was replaced (renamed over: a mask over the old file no longer covers the new one) makes
/// the prepared sandbox another than the one the request would get.
#[derive(Debug, PartialEq, Eq)]
struct HostPaths(Vec<(PathBuf, Option<(u64, u64)>)>);

impl HostPaths {
    fn of(spec: &SandboxSpec) -> HostPaths {
        let paths = std::iter::once(&spec.workspace.lower)
            .chain(spec.binds.iter().map(|bind| &bind.path))
            .chain(&spec.hide);
        HostPaths(
            paths
                .map(|path| {
                    let identity = std::fs::symlink_metadata(path)
                        .ok()
                        .map(|meta| (meta.dev(), meta.ino()));
                    (path.clone(), identity)
                })
                .collect(),
        )
    }
}

fn same_places(plan: &Plan, was: &Plan) -> bool {
    plan.state_dir == was.state_dir
        && plan.workspace == was.workspace
        && plan.profile_ref == was.profile_ref
        && plan.policy_dirs == was.policy_dirs
        && plan.host_ids == was.host_ids
        && plan.degraded == was.degraded
        && plan.resolve == was.resolve
        && plan.limit_output == was.limit_output
}

/// The same sandbox but for what runs in it: its command, environment, working directory and
/// wall-clock limit, which a warm sandbox is given at its start.
fn same_sandbox(wanted: &SandboxSpec, prepared: &SandboxSpec) -> bool {
    let command_aside = |spec: &SandboxSpec| {
        let mut spec = spec.clone();
        spec.argv.clear();
        spec.env.clear();
        spec.cwd = PathBuf::new();
        spec.limits.timeout = None;
        spec
    };
    command_aside(wanted) == command_aside(prepared)
}
