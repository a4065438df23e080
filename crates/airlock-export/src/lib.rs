//! The audit log leaves the machine: each record, as it is written, also goes to the destinations
//! `[audit] export` names in airlock's config (`airlock_core::config`) — `stdout` (one JSON line
//! per record, as stored: what a cluster's log collector reads) and `otlp` (OpenTelemetry logs
//! over OTLP/HTTP to a collector).
//!
//! The local log stays the source of truth, and export is only its reader: each destination has
//! a thread that tails the log (its sealed segments, then `STATE/audit.log`: [`airlock_audit::Tail`])
//! after its cursor
//! (`STATE/export/NAME.cursor`, the last record the destination acknowledged), sends batches of at
//! most 512 records or 1 MiB, and moves the cursor once the destination has taken a batch. So a
//! run never waits for an export (it appends to the log and goes on); a slow or dead destination
//! only makes its export lag, and memory holds one batch whatever the lag; after an outage, or a
//! restart, export takes up again at the cursor, in the log's order. Delivery is at-least-once: a
//! batch acknowledged but not yet noted in the cursor when the process died is sent again (a
//! receiver may see a record twice, never a gap; `airlock log verify --from` counts duplicates).
//! The exporter's own trouble goes to stderr, a line a minute at most — never into an exported
//! stream.
//!
//! `airlock serve` runs the exporters while it serves (in a Kubernetes pod, the process whose
//! stdout the cluster collects); `airlock log export` sends what is there, or follows, where no
//! server runs. Retention ([`retention_pass`]) keeps every segment holding a record a
//! destination has not sent yet ([`first_unsent`]).

use std::path::Path;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use airlock_audit::Tail;
use airlock_core::config::{AuditConfig, Destination};

mod cursor;
mod http;
mod lines;
pub mod ocsf;
pub mod otlp;
mod pump;
mod trouble;

pub use cursor::EXPORT_DIR;
pub use pump::Ended;

use cursor::Cursor;
use pump::{Mode, Pacing, Pump, Stop};
use trouble::Trouble;

#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    #[error("cannot use the export cursor {}: {source} — the state directory must be writable by the exporting user", .path.display())]
    Cursor {
        path: std::path::PathBuf,
        source: std::io::Error,
    },
    #[error("another airlock process exports to {destination} from this state directory (it holds {}): stop it, or leave the export to it", .lock.display())]
    Busy {
        destination: String,
        lock: std::path::PathBuf,
    },
    #[error("{0}")]
    Start(String),
}

/// The exporters running for a state directory, one thread per destination.
pub struct Exporters {
    running: Vec<Running>,
}

struct Running {
    destination: &'static str,
    stop: Arc<Stop>,
    thread: JoinHandle<Ended>,
}

/// Start exporting `state_dir`'s log to every destination of `audit`, each on a thread of its own.
/// Every destination is checked and claimed before any starts: a destination that cannot be
/// used (its cursor held by another process, its CA file unreadable) is an error now.
pub fn start(state_dir: &Path, audit: &AuditConfig) -> Result<Exporters, ExportError> {
    let pumps = audit
        .export
        .iter()
        .map(|destination| prepare(state_dir, destination).map(|pump| (destination.name(), pump)))
        .collect::<Result<Vec<_>, _>>()?;
    let mut running = Vec::new();
    for (destination, pump) in pumps {
        let stop = pump.stop.clone();
        let thread = std::thread::Builder::new()
            .name(format!("export-{destination}"))
            .spawn(move || pump.run(Mode::Follow))
            .map_err(|e| {
                ExportError::Start(format!("cannot start the {destination} exporter: {e}"))
            })?;
        running.push(Running {
            destination,
            stop,
            thread,
        });
    }
    Ok(Exporters { running })
}

/// Send what `state_dir`'s log holds now to every destination, one after the other, and return
/// how each ended (a destination that fails ends at its first failure; the next export continues
/// from its cursor).
pub fn export_now(
    state_dir: &Path,
    audit: &AuditConfig,
) -> Result<Vec<(&'static str, Ended)>, ExportError> {
    let pumps = audit
        .export
        .iter()
        .map(|destination| prepare(state_dir, destination).map(|pump| (destination.name(), pump)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(pumps
        .into_iter()
        .map(|(destination, pump)| (destination, pump.run(Mode::UntilCaughtUp)))
        .collect())
}

/// One destination's loop, its cursor claimed, its sink ready.
fn prepare(state_dir: &Path, destination: &Destination) -> Result<Pump, ExportError> {
    let name = destination.name();
    let log_path = state_dir.join(airlock_audit::LOG_FILE);
    let claimed = Cursor::claim(state_dir, name)?;
    let sink: Box<dyn pump::Sink> = match destination {
        Destination::Stdout => Box::new(lines::LineSink::new(std::io::stdout())),
        Destination::Otlp(config) => {
            let resource = otlp::resource(&log_path, &|name| std::env::var(name).ok());
            Box::new(http::OtlpSink::new(config, resource)?)
        }
    };
    let mut trouble = Trouble::on_stderr(name);
    if let Some(note) = &claimed.note {
        trouble.note(note);
    }
    Ok(Pump {
        sink,
        tail: Tail::after(&log_path, claimed.position),
        cursor: claimed.cursor,
        trouble,
        pacing: Pacing::default(),
        stop: Arc::default(),
        shrunk: None,
    })
}

/// Where retention must keep the log from for the destinations of `audit` (the first seq of the
/// oldest segment a destination still has records to send from), and which destination: every
/// segment named from there on, or holding a record from there on, is kept (an export never
/// loses a record to it). A destination with no cursor, or one that does not read, has sent
/// nothing: everything is kept for it. None when there is no destination.
///
/// A cursor counts only where the log holds its record at the offset it names, with its seq and
/// hash ([`airlock_audit::Position::keep_from`]): one the log does not hold there (the log
/// replaced or restored since, a cursor edited) has sent nothing of this log, so everything is
/// kept. Never by the cursor's seq alone (found by review: a record with a false high seq,
/// exported, let `log prune` remove the records after it, never sent; and before that, a log
/// replaced under a cursor had records of the new log removed).
///
/// A destination this config does not name holds back too when its cursor is there: it was
/// exported to from this state directory (by `airlock serve` with another config, say), and a
/// `log prune` run with a config that leaves it out must not remove what it has yet to send.
/// Its cursor file is removed by hand once that destination is given up (the report says so).
pub fn first_unsent(state_dir: &Path, audit: &AuditConfig) -> Option<(u64, &'static str)> {
    let open_path = state_dir.join(airlock_audit::LOG_FILE);
    let keep_for = |name: &str| {
        Cursor::read(state_dir, name)
            .and_then(|position| position.keep_from(state_dir, &open_path).ok().flatten())
            .unwrap_or(1)
    };
    let configured = audit.export.iter().map(|destination| destination.name());
    let others_with_a_cursor = Destination::NAMES
        .into_iter()
        .filter(|name| !audit.export.iter().any(|d| d.name() == *name))
        .filter(|name| Cursor::exists(state_dir, name));
    configured
        .chain(others_with_a_cursor)
        .map(|name| (keep_for(name), name))
        .min_by_key(|(seq, _)| *seq)
}

/// One pass of retention over `state_dir`'s log as `audit` says (`keep_days`, `keep_size`),
/// holding back what an export destination has not sent: what `airlock log prune` and `airlock
/// serve` (at start, then hourly) run. Returns the report and what a person should read of it.
pub fn retention_pass(
    state_dir: &Path,
    audit: &AuditConfig,
) -> Result<(airlock_audit::RetentionReport, Vec<String>), airlock_audit::AuditError> {
    let unsent = first_unsent(state_dir, audit);
    let report =
        airlock_core::audit::apply_retention(state_dir, &audit.retention, unsent.map(|u| u.0))?;
    let mut said = Vec::new();
    if let (Some(first), Some(last)) = (report.removed.first(), report.removed.last()) {
        let bytes: u64 = report.removed.iter().map(|r| r.bytes).sum();
        said.push(format!(
            "audit retention: removed {} (records {} to {}, {}, the last written {}); record {} says so",
            airlock_core::counted(report.removed.len() as u64, "sealed segment", "sealed segments"),
            first.first,
            last.last,
            mebibytes(bytes),
            last.last_time,
            report.record.unwrap_or(0),
        ));
    }
    if !report.held_for_sessions.is_empty() {
        said.push(format!(
            "audit retention: segments past keep_days/keep_size kept: they hold records of sessions still waiting for review ({}); they go once each is applied or discarded",
            report.held_for_sessions.join(", "),
        ));
    }
    if let (Some(held), Some((seq, destination))) = (report.held.first(), unsent) {
        said.push(format!(
            "audit retention: {} past keep_days/keep_size kept from record {}: export to {destination} has not sent every record of the segments from record {seq} on (they go once it has; the log may grow past keep_size meanwhile; if {destination} is no longer exported to, remove {})",
            airlock_core::counted(report.held.len() as u64, "sealed segment", "sealed segments"),
            held.first,
            state_dir.join(cursor::EXPORT_DIR).join(format!("{destination}.cursor")).display(),
        ));
    }
    Ok((report, said))
}

/// `12.3 MiB`: a size a person reads at a glance.
fn mebibytes(bytes: u64) -> String {
    format!("{:.1} MiB", bytes as f64 / f64::from(1u32 << 20))
}

impl Exporters {
    /// The destinations being exported to.
    pub fn destinations(&self) -> Vec<&'static str> {
        self.running.iter().map(|r| r.destination).collect()
    }

    /// Send what the log holds, then stop; give up on a destination still sending after
    /// `within` (its cursor says where the next start takes up). How each ended; None for one
    /// given up on.
    pub fn finish(self, within: Duration) -> Vec<(&'static str, Option<Ended>)> {
        for running in &self.running {
            running.stop.finish(within);
        }
        // A little past the deadline: a loop checks it between attempts, and an attempt under
        // way has its own timeout.
        let until = Instant::now() + within + Duration::from_secs(1);
        self.running
            .into_iter()
            .map(|running| {
                while !running.thread.is_finished() && Instant::now() < until {
                    std::thread::sleep(Duration::from_millis(20));
                }
                let ended = if running.thread.is_finished() {
                    running.thread.join().ok()
                } else {
                    None
                };
                (running.destination, ended)
            })
            .collect()
    }

    /// Follow until the process ends (`airlock log export --follow`).
    pub fn wait(self) {
        for running in self.running {
            let _ = running.thread.join();
        }
    }
}
