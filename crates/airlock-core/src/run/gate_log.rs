//! A run's network gate and where its events go: the audit log, where a flood of them is counted
//! rather than written (see [`crate::netlog`]); and each refusal to the run's tally (see
//! [`super::refused`]), which the run's answer lists so that the person sees why a tool failed.

use std::sync::{Arc, Mutex};

use airlock_egress::gate::NetEvent;
use airlock_jail::JailError;
use serde::Serialize;

use super::refused::{RefusalTally, RefusedDestination};
use crate::netlog::{NetLog, Summary};
use airlock_egress::gate::NetEventKind;
use airlock_policy::learn::Observed;

/// One network record: the gate's event (or a summary of counted ones) and whose run it was.
#[derive(Serialize)]
struct NetRecord<'a, T: Serialize> {
    #[serde(flatten)]
    event: T,
    session: Option<&'a str>,
    profile: &'a str,
    denied: bool,
}

/// Where a run's network events go.
#[derive(Clone)]
pub(super) struct GateLog {
    /// The gate itself (None in the events' own copy).
    running: Option<Arc<airlock_egress::gate::Running>>,
    audit: crate::audit::Log,
    limiter: Arc<Mutex<NetLog>>,
    refusals: Arc<Mutex<RefusalTally>>,
    /// A learning run's: the destinations let through (see [`super::RunRequest::learn`]).
    observed: Option<Arc<Mutex<Observed>>>,
    session: Option<String>,
    profile: String,
    /// Asks a person about the connections the profile's `ask` names (None: it names none).
    approver: Option<Arc<crate::approvals::asker::RunApprover>>,
}

/// Start the network gate of `plan`'s run: it decides by the profile's network (with none, it
/// refuses everything, and says what). The returned log must be flushed when the run ends.
/// `inject`: the run's secrets (the sandbox holds their placeholders), for the gate to put on
/// the wire to their hosts.
pub(super) fn start_gate(
    sockets: airlock_jail::GateSockets,
    plan: &super::Plan,
    session: Option<String>,
    inject: Option<Arc<airlock_egress::inject::Injector>>,
) -> Result<GateLog, JailError> {
    let profile = &plan.profile;
    let audit = crate::audit::log_for(plan.caller, &plan.state_dir);
    let approver = (!profile.ask.hosts.is_empty()).then(|| {
        Arc::new(crate::approvals::asker::RunApprover::new(
            plan.state_dir.clone(),
            audit.clone(),
            session.clone(),
            profile.name.clone(),
            std::time::Duration::from_secs(profile.ask.timeout_seconds),
            profile.ask.webhook.clone(),
        ))
    });
    let gate_log = GateLog {
        running: None,
        audit,
        approver: approver.clone(),
        limiter: Arc::new(Mutex::new(NetLog::new())),
        refusals: Arc::new(Mutex::new(RefusalTally::default())),
        observed: plan
            .learning
            .then(|| Arc::new(Mutex::new(Observed::default()))),
        session: session.clone(),
        profile: profile.name.clone(),
    };
    let events = gate_log.clone();
    let running = airlock_egress::gate::start(
        sockets,
        airlock_egress::gate::Config {
            egress: profile.network.clone(),
            resolve: plan.resolve.clone(),
            on_event: Box::new(move |event: &NetEvent| events.write_event(event)),
            cut_when: Some(crate::control::cut_flag(
                &plan.state_dir,
                std::process::id(),
            )),
            inject,
            approvals: approver.map(|approver| airlock_egress::gate::Approvals {
                ask: profile.ask.hosts.clone(),
                approver,
            }),
        },
    )
    .map_err(|e| JailError::Caller(format!("cannot start the network gate: {e}")))?;
    Ok(GateLog {
        running: Some(Arc::new(running)),
        ..gate_log
    })
}

impl GateLog {
    fn append<T: Serialize>(&self, action: &str, event: T, denied: bool) {
        let record = NetRecord {
            event,
            session: self.session.as_deref(),
            profile: &self.profile,
            denied,
        };
        if let Ok(fields) = serde_json::to_value(record) {
            let _ = crate::audit::append_deferred(&self.audit, action, fields);
        }
    }

    fn write_event(&self, event: &NetEvent) {
        if !event.allowed {
            if let Ok(mut refusals) = self.refusals.lock() {
                refusals.add(event);
            }
        }
        if let Some(observed) = &self.observed {
            observe(observed, event);
        }
        let admitted = match self.limiter.lock() {
            Ok(mut limiter) => limiter.admit(event, std::time::Instant::now()),
            Err(_) => return,
        };
        if let Some(summary) = admitted.summary {
            self.write_summary(&summary);
        }
        if admitted.write {
            self.append(
                &format!("net.{}", event.kind.as_str()),
                event,
                !event.allowed,
            );
        }
    }

    fn write_summary(&self, summary: &Summary) {
        self.append("net.suppressed", summary.fields(), summary.denied > 0);
    }

    /// The run is over: its connections' last events, and what was still being counted, are
    /// written.
    pub(super) fn flush(&self) {
        // Nobody waits for an answer any more.
        if let Some(approver) = &self.approver {
            approver.end(std::time::Duration::from_secs(2));
        }
        if let Some(running) = &self.running {
            running.finish(std::time::Duration::from_secs(2));
        }
        let summary = self.limiter.lock().ok().and_then(|mut l| l.take_summary());
        if let Some(summary) = summary {
            self.write_summary(&summary);
        }
    }

    /// Has the sandbox used the network at all (see [`airlock_egress::gate::Running::used`])?
    pub(super) fn used(&self) -> bool {
        self.running.as_ref().is_some_and(|r| r.used())
    }

    /// What a learning run's gate let through (once flushed); None for another run.
    pub(super) fn observed(&self) -> Option<Observed> {
        let observed = self.observed.as_ref()?;
        observed.lock().ok().map(|observed| observed.clone())
    }

    /// What the gate refused, by destination, and the attempts past that list (once flushed).
    pub(super) fn refused(&self) -> (Vec<RefusedDestination>, u64) {
        self.refusals
            .lock()
            .map_or_else(|_| (Vec::new(), 0), |tally| tally.finish(&self.profile))
    }
}

/// Count a connection a learning run was let through: by the name it asked for (or the address
/// it connected to by address) and its port, with the program that connected.
fn observe(observed: &Mutex<Observed>, event: &NetEvent) {
    if let (NetEventKind::Request, true, Some(name), Some(method), Some(path)) = (
        event.kind,
        event.allowed,
        &event.name,
        &event.method,
        &event.path,
    ) {
        if let Ok(mut observed) = observed.lock() {
            observed.requested(name, method, path);
        }
        return;
    }
    if !matches!(event.kind, NetEventKind::Connect | NetEventKind::Failed) {
        return;
    }
    let Some(host) = event.host() else {
        return;
    };
    if let (Some(port), Ok(mut observed)) = (event.port, observed.lock()) {
        match event.kind {
            // An allowed connection that never reached its destination was counted when it
            // was let through: taken back.
            NetEventKind::Failed => observed.failed(&host, port),
            _ if event.allowed => observed.connected(&host, port, event.program.as_deref()),
            _ => {}
        }
    }
}
