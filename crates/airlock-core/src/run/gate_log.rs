//! A run's network gate and where its events go: the audit log, and each refusal to stderr so
//! that the person sees why a tool failed; a flood of them is counted rather than written (see
//! [`crate::netlog`]).

// writeln! to stderr rather than eprintln!, which panics when stderr is closed: a refused
// connection is noted, never a reason for the gate to die.
use std::io::Write as _;
use std::sync::{Arc, Mutex};

use airlock_egress::gate::NetEvent;
use airlock_jail::JailError;
use airlock_policy::Profile;
use serde::Serialize;

use crate::netlog::{NetLog, Summary};

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
    session: Option<String>,
    profile: String,
}

/// Start the network gate of a run whose profile allows some network. The returned log must be
/// flushed when the run ends. `inject`: the run's secrets (the sandbox holds their placeholders),
/// for the gate to put on the wire to their hosts.
pub(super) fn start_gate(
    sockets: airlock_jail::GateSockets,
    profile: &Profile,
    resolve: &[(String, std::net::IpAddr)],
    audit: crate::audit::Log,
    state_dir: &std::path::Path,
    session: Option<String>,
    inject: Option<Arc<airlock_egress::inject::Injector>>,
) -> Result<GateLog, JailError> {
    let gate_log = GateLog {
        running: None,
        audit,
        limiter: Arc::new(Mutex::new(NetLog::new())),
        session,
        profile: profile.name.clone(),
    };
    let events = gate_log.clone();
    let running = airlock_egress::gate::start(
        sockets,
        airlock_egress::gate::Config {
            egress: profile.network.clone(),
            resolve: resolve.to_vec(),
            on_event: Box::new(move |event: &NetEvent| events.write_event(event)),
            cut_when: Some(crate::control::cut_flag(state_dir, std::process::id())),
            inject,
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
        let admitted = match self.limiter.lock() {
            Ok(mut limiter) => limiter.admit(event, std::time::Instant::now()),
            Err(_) => return,
        };
        if let Some(summary) = admitted.summary {
            self.write_summary(&summary);
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
            let _ = writeln!(
                std::io::stderr(),
                "airlock: network: {} {what} refused: {}",
                event.kind.as_str(),
                event.rule
            );
        }
        self.append(
            &format!("net.{}", event.kind.as_str()),
            event,
            !event.allowed,
        );
    }

    fn write_summary(&self, summary: &Summary) {
        if summary.denied > 0 {
            let _ = writeln!(
            std::io::stderr(),
                "airlock: network: {} more refused attempts not shown one by one ('airlock log --action net.suppressed')",
                summary.denied
            );
        }
        self.append("net.suppressed", summary.fields(), summary.denied > 0);
    }

    /// The run is over: its connections' last events, and what was still being counted, are
    /// written.
    pub(super) fn flush(&self) {
        if let Some(running) = &self.running {
            running.finish(std::time::Duration::from_secs(2));
        }
        let summary = self.limiter.lock().ok().and_then(|mut l| l.take_summary());
        if let Some(summary) = summary {
            self.write_summary(&summary);
        }
    }
}
