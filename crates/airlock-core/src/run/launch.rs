//! Phases 5 to 8 of a run (see [`super`]): launch the sandbox once its intent is on disk, supervise
//! it, record its result, settle its session.

use super::*;

/// When a run started, by the three clocks its records use.
pub(super) struct Started {
    /// Seconds since the epoch: the session's `last_run`, the registry's entry.
    pub(super) seconds: u64,
    /// Nanoseconds since the epoch: what the ledger compares host changes with.
    pub(super) nanos: i128,
    pub(super) clock: std::time::Instant,
}

impl Started {
    pub(super) fn now() -> Started {
        Started {
            seconds: now(),
            nanos: crate::ledger::now_ns(),
            clock: std::time::Instant::now(),
        }
    }
}

/// Phase 5: nothing of the command runs before its intent is on disk and it is listed where the
/// kill switch finds it. An error here stopped the sandbox before its command could start.
/// A sandbox that could not be built is returned as its error, its attempt recorded all the same.
pub(super) fn launch(
    plan: &Plan,
    launch: LaunchPlan,
    sandboxing: Sandboxing,
    audit: &crate::audit::Log,
) -> Result<Launched, Error> {
    let LaunchPlan {
        spec,
        staging,
        intent,
        listing,
        placeholders,
        ca,
    } = launch;
    let intent = serde_json::to_value(intent)?;
    // A learning run's intent says so in its action: its network was open.
    let action = if plan.learning {
        "run.learn"
    } else {
        "run.intent"
    };
    let cache = plan.state_dir.join("cache");
    // Steps 1 to 11 of the jail's protocol: the sandbox is built up to its go-ahead (a warm one
    // was, before its request came).
    let (launching, warm) = match sandboxing {
        Sandboxing::Warm(launching, _) => (*launching, true),
        Sandboxing::Cold(network) => match airlock_jail::prepare(spec, staging, &cache, network) {
            Ok(launching) => (launching, false),
            Err(err) => {
                // The attempt is recorded all the same, with its result.
                crate::audit::append_deferred(audit, action, intent)?;
                return Ok((Err(err), None, None));
            }
        },
    };
    // The sandbox is cloned and its command not started: the moment to read the values.
    let (launching, injector) = read_secrets(plan, placeholders, ca, launching)?;
    // Step 12 (intent). PERF: written, and the run listed in the registry of running sandboxes
    // (which 'airlock kill/pause/disable' read), while the sandbox confines itself. SECURITY:
    // both are on disk before the go-ahead; if either fails, dropping `launching` kills the
    // sandbox before its command could start. (A full disk refuses the run here.)
    crate::audit::append_deferred(audit, action, intent)?;
    // PERF: the intent is made durable on a thread of its own while the run is listed; the
    // go-ahead below waits for both. Nothing forks meanwhile (the sandbox's processes are
    // cloned already), and the thread has ended before anything does.
    let (listed, synced) = std::thread::scope(|scope| {
        // A thread that cannot be made (no process left to the user) syncs here, after.
        let syncing = std::thread::Builder::new()
            .name("intent-sync".into())
            .spawn_scoped(scope, || sync_intent(audit));
        let listed = list(plan, listing, launching.id());
        let synced = match syncing {
            Ok(syncing) => syncing
                .join()
                .unwrap_or_else(|_| Err("the audit log's sync failed".to_string())),
            Err(_) => sync_intent(audit),
        };
        (listed, synced)
    });
    let registration = listed?;
    // SECURITY: asked again now that the kill switch can see the run: an 'airlock disable'
    // from here on kills it, and one before is seen here; either way its command never starts.
    if let Err(disabled) = crate::control::check_enabled(&plan.state_dir, &plan.profile.name) {
        drop(launching.refuse(disabled.to_string()));
        return Err(disabled.into());
    }
    // Step 16 (go-ahead), or the sandbox stopped for the reason the intent is not durable. A
    // warm sandbox gets its command now, and this process's stdin as it is now, as a cold one
    // inherits it (its own is this process's stdin at its preparation).
    let started = match synced {
        Ok(()) if warm => launching.start_command(
            &airlock_jail::Command::of(spec),
            std::os::fd::AsFd::as_fd(&std::io::stdin()),
            spec.limits.timeout,
        ),
        Ok(()) => launching.start(),
        Err(why) => Err(launching.refuse(why)),
    };
    Ok((started, Some(registration), injector))
}

/// The run in the registry of running sandboxes, which 'airlock kill/pause/disable' read.
fn list(
    plan: &Plan,
    listing: Listing,
    sandbox: airlock_jail::control::SandboxId,
) -> Result<Registration, Error> {
    let registration = crate::control::reserve(&plan.state_dir)?;
    test_pause("reserved");
    registration.fill(&listing.entry(plan, sandbox))?;
    test_pause("listed");
    Ok(registration)
}

/// The intent made durable (step 12's end): the go-ahead waits for it.
fn sync_intent(audit: &crate::audit::Log) -> Result<(), String> {
    if cfg!(debug_assertions) && std::env::var("AIRLOCK_TEST_FAULT").as_deref() == Ok("gate") {
        // Debug builds: AIRLOCK_TEST_FAULT=gate makes the last check fail, for the tests.
        return Err("the audit log could not be synced (test fault)".to_string());
    }
    audit.sync().map_err(|e| e.to_string())
}

/// SECURITY: the values are read only once the sandbox's processes are cloned, so that none of
/// them has a copy of this process's memory with a value in it. A source that fails stops the
/// sandbox before its command could start. The values move into the gate's injector, with the
/// CA the sandbox was given.
pub(super) fn read_secrets(
    plan: &Plan,
    placeholders: &[Placeholder],
    ca: Option<SessionCa>,
    launching: airlock_jail::Launching,
) -> Result<(airlock_jail::Launching, Option<Arc<Injector>>), Error> {
    let injector = match ca {
        None => Ok(None),
        Some(ca) => crate::secrets::for_run(&plan.profile, placeholders)
            .and_then(|secrets| injection::injector(ca, secrets, &plan.profile))
            .map(Some),
    };
    match injector {
        Ok(injector) => Ok((launching, injector)),
        Err(err) => {
            drop(launching.refuse(err.to_string()));
            Err(err)
        }
    }
}

/// The sandbox started (or why not), its listing for the kill switch, and the gate's injector of
/// the run's secrets.
type Launched = (
    Result<Sandbox, JailError>,
    Option<Registration>,
    Option<Arc<Injector>>,
);

/// Debug builds: `AIRLOCK_TEST_PAUSE=STEP` stops this process (SIGSTOP) at that step of the
/// launch, for the tests of what another process does meanwhile.
pub(super) fn test_pause(step: &str) {
    if cfg!(debug_assertions) && std::env::var("AIRLOCK_TEST_PAUSE").as_deref() == Ok(step) {
        let _ = nix::sys::signal::raise(nix::sys::signal::Signal::SIGSTOP);
    }
}

/// What the kill switch's registry says of a run.
pub(super) struct Listing {
    pub(super) run_id: String,
    pub(super) session: Option<String>,
    pub(super) argv: Vec<String>,
    pub(super) started: u64,
}

impl Listing {
    pub(super) fn entry(
        self,
        plan: &Plan,
        sandbox: airlock_jail::control::SandboxId,
    ) -> crate::control::Running {
        crate::control::Running {
            supervisor: std::process::id(),
            sandbox,
            session: self.session,
            profile: plan.profile.name.clone(),
            argv: self.argv,
            uid: nix::unistd::getuid().as_raw(),
            started: self.started,
            token: plan.caller.grant.as_ref().map(|g| g.token.clone()),
            run_id: Some(self.run_id),
            locked: true,
        }
    }
}

/// What phase 5 builds and records.
pub(super) struct LaunchPlan<'a> {
    pub(super) spec: &'a SandboxSpec,
    pub(super) staging: &'a Path,
    pub(super) intent: &'a Intent<'a>,
    pub(super) listing: Listing,
    pub(super) placeholders: &'a [Placeholder],
    /// The CA the sandbox trusts, for the injector (None: the profile has no secrets).
    pub(super) ca: Option<SessionCa>,
}

/// A run from its start to its command's end.
pub(super) struct Supervised {
    pub(super) result: Result<Finished, JailError>,
    pub(super) gate_log: Option<GateLog>,
    pub(super) killed_by_switch: Option<String>,
    /// PERF: once its command has ended, the sandbox is reaped as late as it can be: the kernel
    /// tears its namespaces down meanwhile, in parallel with the bookkeeping.
    pub(super) ending: Option<Sandbox>,
}

impl Supervised {
    /// Wait until nothing of the sandbox is left (once; each step that needs it gone calls this).
    pub(super) fn reap(&mut self) {
        if let Some(sandbox) = self.ending.take() {
            sandbox.reap();
        }
    }
}

/// Phase 6: the gate, and the wait for the command to end.
pub(super) fn supervise(
    plan: &Plan,
    launched: Result<Sandbox, JailError>,
    registration: Option<&Registration>,
    session: Option<String>,
    injector: Option<Arc<Injector>>,
) -> Supervised {
    let mut supervised = Supervised {
        result: Err(JailError::Caller("the run was not supervised".into())),
        gate_log: None,
        killed_by_switch: None,
        ending: None,
    };
    supervised.result = launched.and_then(|mut sandbox| {
        if let Some(sockets) = sandbox.take_gate_sockets() {
            supervised.gate_log = Some(start_gate(sockets, plan, session, injector)?);
        }
        let finished = sandbox.wait();
        supervised.killed_by_switch =
            registration.and_then(crate::control::Registration::killed_by_switch);
        supervised.ending = Some(sandbox);
        finished
    });
    supervised
}

/// Phase 7: `run.result`. The command ran: a result that cannot be written is reported, not the
/// run's failure. Also returned: its CPU time in milliseconds and the most memory it held (its
/// memory cgroup's peak), when known. PERF: it is not waited for: the next record's fsync (or the kernel) makes it
/// durable.
pub(super) fn record_result(
    audit: &crate::audit::Log,
    profile: &Profile,
    clock: &Started,
    supervised: &mut Supervised,
    session_id: &Option<String>,
    refused: &(Vec<super::RefusedDestination>, u64),
) -> (Option<String>, (Option<u64>, Option<u64>)) {
    let usage = match supervised.result.as_ref().ok().and_then(|f| f.usage) {
        Some(usage) => Some(usage),
        // Pid 1 had no word (killed, timed out): once reaped, it is among our children.
        None => {
            supervised.reap();
            airlock_jail::Usage::of_children()
        }
    };
    let mut record =
        ResultRecord::new(session_id.as_deref(), profile, clock.clock.elapsed(), usage);
    (record.refused, record.refused_unlisted) = (&refused.0, refused.1);
    let record = match &supervised.result {
        Ok(finished) => record.finished(finished, supervised.killed_by_switch.clone()),
        Err(err) => record.failed(err.to_string()),
    };
    let measured = (record.cpu_ms, record.peak_memory_bytes);
    let error = match serde_json::to_value(record) {
        Ok(fields) => crate::audit::append_deferred(audit, "run.result", fields)
            .err()
            .map(|e| e.to_string()),
        Err(e) => Some(e.to_string()),
    };
    (error, measured)
}

/// Phase 8: a throwaway layer goes; a kept session counts the run and remembers what the host
/// had at each path the run touched first.
pub(super) fn settle(turn: &mut Turn, clock: &Started) -> Result<(), Error> {
    let Some(session) = turn.session.take() else {
        return Ok(());
    };
    if turn.throwaway {
        // The layer of a throwaway session is garbage whatever happened; a failure to delete
        // it is not the command's failure.
        turn.lock = None;
        let _ = session.remove();
        return Ok(());
    }
    let mut session = session;
    session.meta.last_run = Some(clock.seconds);
    session.meta.runs += 1;
    session.save()?;
    // For apply's conflict check. Without it apply judges by the session's start, more
    // strictly: not worth the command's exit status.
    let _ = crate::ledger::record_after_run(&session, clock.nanos);
    Ok(())
}
