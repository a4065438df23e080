//! One destination's loop: read a batch of records after the cursor, deliver it until the
//! destination acknowledges it, move the cursor, again. The batch waits in memory (bounded) while
//! a destination is down; everything after it waits in the log, where it already is.

use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use airlock_audit::{Tail, Tailed};

use crate::cursor::Cursor;
use crate::trouble::Trouble;

/// What a destination said to one batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Delivery {
    /// Acknowledged; with what to tell a person (a collector that rejected part of it).
    Delivered { note: Option<String> },
    /// Not now (the destination is unreachable, busy or overloaded): try again, after `after`
    /// if it said when (Retry-After), else after the backoff.
    Retry {
        after: Option<Duration>,
        why: String,
    },
    /// Refused as it is (a request the collector calls bad, a credential it does not take). Not
    /// resent at once, as OTLP asks; but not dropped either: the log keeps every record for
    /// the destination, so it is tried again after a long pause, for someone to fix the cause.
    Refused { why: String },
    /// Too large as one request (HTTP 413): sent again in halves, down to one record a request
    /// (one refused alone is a [`Delivery::Refused`]: never skipped).
    TooLarge { why: String },
}

/// Somewhere records go.
pub trait Sink: Send {
    fn deliver(&mut self, batch: &[Tailed]) -> Delivery;
}

/// The loop's timings and bounds.
#[derive(Debug, Clone)]
pub struct Pacing {
    /// How often the log is looked at when there is nothing new.
    pub poll: Duration,
    /// The first wait after a failed delivery; doubled with each failure after it…
    pub first_retry: Duration,
    /// …up to this.
    pub max_retry: Duration,
    /// The longest a Retry-After is obeyed.
    pub max_retry_after: Duration,
    /// The wait after a refusal.
    pub refused_pause: Duration,
    /// A batch's bounds: records, and bytes of stored lines (at least one record, however long).
    pub max_records: usize,
    pub max_bytes: usize,
}

impl Default for Pacing {
    fn default() -> Pacing {
        Pacing {
            poll: Duration::from_millis(200),
            first_retry: Duration::from_millis(500),
            // A collector that comes back is found within 5 s: one connection attempt every 5 s
            // costs nothing, and an outage of a day is still a line a minute on stderr.
            max_retry: Duration::from_secs(5),
            max_retry_after: Duration::from_secs(300),
            refused_pause: Duration::from_secs(60),
            max_records: 512,
            max_bytes: 1 << 20,
        }
    }
}

impl Pacing {
    /// The wait before attempt `failures + 1`, after `failures` failed ones.
    /// A collector's `Retry-After` is taken up to `max_retry_after`, and never shorter than the
    /// backoff: `Retry-After: 0` would otherwise have the exporter ask as fast as it can, taking
    /// the CPU the runs need.
    pub fn retry_wait(&self, failures: u32, delivery: &Delivery) -> Duration {
        let doublings = failures.saturating_sub(1).min(16);
        let backoff = self
            .first_retry
            .saturating_mul(1 << doublings)
            .min(self.max_retry);
        match delivery {
            Delivery::Refused { .. } => self.refused_pause,
            Delivery::Retry {
                after: Some(after), ..
            } => (*after).min(self.max_retry_after).max(backoff),
            _ => backoff,
        }
    }
}

/// When to stop.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Until [`Stop::finish`]: then what the log holds is sent, for as long as it allows.
    Follow,
    /// Send what the log holds now; a failed delivery ends the loop with it (a one-shot export,
    /// which the next one continues).
    UntilCaughtUp,
}

/// Tells a following loop to finish: send what the log holds, then end, by a deadline.
#[derive(Default)]
pub struct Stop {
    deadline: Mutex<Option<Instant>>,
    woken: Condvar,
}

impl Stop {
    pub fn finish(&self, within: Duration) {
        if let Ok(mut deadline) = self.deadline.lock() {
            *deadline = Some(Instant::now() + within);
        }
        self.woken.notify_all();
    }

    fn deadline(&self) -> Option<Instant> {
        self.deadline.lock().ok().and_then(|d| *d)
    }

    /// Wait `wait`, or less if asked to finish meanwhile. False: the deadline comes first, so
    /// stop now.
    fn sleep(&self, wait: Duration) -> bool {
        let Ok(guard) = self.deadline.lock() else {
            return false;
        };
        match *guard {
            Some(deadline) if deadline < Instant::now() + wait => return false,
            Some(_) => {
                drop(guard);
                std::thread::sleep(wait);
                return true;
            }
            None => {}
        }
        let Ok((guard, _)) = self.woken.wait_timeout_while(guard, wait, |d| d.is_none()) else {
            return false;
        };
        guard.is_none_or(|deadline| Instant::now() < deadline)
    }
}

/// How a loop ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Ended {
    /// Everything the log held was delivered (with how many records).
    CaughtUp { sent: u64 },
    /// Stopped before it was: what the last delivery said.
    Lagging { sent: u64, why: String },
}

/// Everything one destination's loop uses.
pub struct Pump {
    pub sink: Box<dyn Sink>,
    pub tail: Tail,
    pub cursor: Cursor,
    pub trouble: Trouble,
    pub pacing: Pacing,
    pub stop: Arc<Stop>,
    /// Batches made smaller than the pacing says by a collector's 413 (None: they are not).
    pub(crate) shrunk: Option<Shrunk>,
}

/// A 413 halves the batches from then on (the collector's limit will not change by itself);
/// after [`GROW_AFTER`] batches taken whole in a row they double again, up to the pacing's bound
/// (found by review: one 413, from a single large record, left a server sending one record a
/// request until restarted). A collector whose limit stays costs one 413 in so many batches.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Shrunk {
    bytes: usize,
    whole_in_a_row: u32,
}

const GROW_AFTER: u32 = 16;

impl Pump {
    /// Run until the mode says to end.
    pub fn run(mut self, mode: Mode) -> Ended {
        let mut sent = 0u64;
        loop {
            let (batch, unread) = self.next_batch();
            if !batch.is_empty() {
                if let Err(why) = self.deliver_in_parts(&batch, mode, &mut sent) {
                    return Ended::Lagging { sent, why };
                }
            }
            let finishing = mode == Mode::UntilCaughtUp || self.stop.deadline().is_some();
            if let Some(why) = unread {
                // The log could not be read on: what follows is not sent, and an export that
                // ends now must not say it sent everything (found by review: it exited 0).
                if finishing {
                    return Ended::Lagging { sent, why };
                }
                self.stop.sleep(self.pacing.poll);
                continue;
            }
            if batch.is_empty() {
                if finishing {
                    return Ended::CaughtUp { sent };
                }
                self.stop.sleep(self.pacing.poll);
            }
        }
    }

    /// Deliver `batch`, in halves while the destination says it is too large, in order; the
    /// cursor moves after each part taken. Err: stopped first.
    fn deliver_in_parts(
        &mut self,
        batch: &[Tailed],
        mode: Mode,
        sent: &mut u64,
    ) -> Result<(), String> {
        let mut parts = vec![batch];
        let mut whole = true;
        while let Some(part) = parts.pop() {
            if let Some(why) = self.deliver(part, mode)? {
                whole = false;
                let (first, second) = part.split_at(part.len() / 2);
                let bytes: usize = part.iter().map(|r| r.line.len()).sum();
                let smaller = self.batch_bytes().min(bytes / 2).max(1);
                self.shrunk = Some(Shrunk {
                    bytes: smaller,
                    whole_in_a_row: 0,
                });
                self.trouble.note(&format!(
                    "{why}: sending those {} records in two parts, and batches of at most {smaller} bytes for a while",
                    part.len(),
                ));
                parts.push(second);
                parts.push(first);
                continue;
            }
            *sent += part.len() as u64;
            if let Some(last) = part.last() {
                if let Err(e) = self.cursor.save(&last.position()) {
                    // The batch was delivered; only its acknowledgement is not kept: after a
                    // restart it is sent again, a duplicate and not a gap.
                    self.trouble.failed(
                        Instant::now(),
                        &format!("cannot write {}: {e}", self.cursor.path().display()),
                    );
                }
            }
        }
        if whole {
            self.grow_batches();
        }
        Ok(())
    }

    /// The most bytes of a batch now.
    fn batch_bytes(&self) -> usize {
        self.shrunk.map_or(self.pacing.max_bytes, |s| s.bytes)
    }

    /// One more batch taken whole: after [`GROW_AFTER`] in a row, shrunk batches may hold twice
    /// the bytes, up to the pacing's bound.
    fn grow_batches(&mut self) {
        let Some(shrunk) = &mut self.shrunk else {
            return;
        };
        shrunk.whole_in_a_row += 1;
        if shrunk.whole_in_a_row >= GROW_AFTER {
            let doubled = shrunk.bytes.saturating_mul(2);
            self.shrunk = (doubled < self.pacing.max_bytes).then_some(Shrunk {
                bytes: doubled,
                whole_in_a_row: 0,
            });
        }
    }

    /// The records after the last batch, within the pacing's bounds; the log's trouble said.
    /// With why the log could not be read on, when it could not.
    fn next_batch(&mut self) -> (Vec<Tailed>, Option<String>) {
        let mut unread = None;
        let mut batch = Vec::new();
        let mut bytes = 0usize;
        let max_bytes = self.batch_bytes();
        while batch.len() < self.pacing.max_records && bytes < max_bytes {
            match self.tail.next_record() {
                Ok(Some(record)) => {
                    bytes += record.line.len();
                    batch.push(record);
                }
                Ok(None) => break,
                Err(e) => {
                    let why = e.to_string();
                    self.trouble.failed(Instant::now(), &why);
                    unread = Some(why);
                    break;
                }
            }
        }
        for note in self.tail.take_notes() {
            self.trouble.note(&note);
        }
        (batch, unread)
    }

    /// Deliver `batch`, trying again as the destination and the pacing say. Some(why): it is too
    /// large, to be sent in parts. Err: stopped first.
    fn deliver(&mut self, batch: &[Tailed], mode: Mode) -> Result<Option<String>, String> {
        let mut failures = 0u32;
        loop {
            let mut delivery = self.sink.deliver(batch);
            if let Delivery::TooLarge { why } = &delivery {
                if batch.len() > 1 {
                    return Ok(Some(why.clone()));
                }
                // One record too large alone: a person must raise the collector's limit. It is
                // asked again after a pause, never skipped (export must not lose a record).
                delivery = Delivery::Refused {
                    why: too_large_alone(why, batch),
                };
            }
            let why = match &delivery {
                Delivery::Delivered { note } => {
                    if let Some(note) = note {
                        self.trouble.note(note);
                    }
                    self.trouble.delivered();
                    return Ok(None);
                }
                Delivery::Retry { why, .. }
                | Delivery::Refused { why }
                | Delivery::TooLarge { why } => why.clone(),
            };
            failures += 1;
            self.trouble.failed(Instant::now(), &why);
            if mode == Mode::UntilCaughtUp {
                return Err(why);
            }
            if !self.stop.sleep(self.pacing.retry_wait(failures, &delivery)) {
                return Err(why);
            }
        }
    }
}

/// What is said of a record the destination refuses as too large even alone.
fn too_large_alone(why: &str, batch: &[Tailed]) -> String {
    let (seq, bytes) = batch.first().map_or((0, 0), |r| (r.seq, r.line.len()));
    format!(
        "{why}: record {seq} ({bytes} bytes) is too large for the collector even alone; it is not skipped: raise the collector's limit on a request's size (an OpenTelemetry Collector's max_request_body_size) — it is asked again every minute, and the records after it wait"
    )
}

#[cfg(test)]
#[path = "pump_tests.rs"]
mod tests;
