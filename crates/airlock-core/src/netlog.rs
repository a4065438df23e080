//! The network gate's events, into the audit log without letting a sandbox flood it. A program
//! that retries a refused connection in a tight loop, or asks for random names, could otherwise
//! write records as fast as the disk takes them. Within each second, an event just like one
//! already written (same kind, destination, decision) is counted instead of written, and after
//! [`RECORDS_PER_SECOND`] records the rest are counted too; what was counted is written as one
//! `net.suppressed` record when the second is over (or the run ends), so no attempt goes
//! unaccounted.

use std::collections::{BTreeMap, HashSet};
use std::time::{Duration, Instant};

use airlock_egress::gate::{NetEvent, NetEventKind};
use serde_json::{json, Value};

/// The most network records one run writes in a second; more are counted.
pub const RECORDS_PER_SECOND: u32 = 500;
const WINDOW: Duration = Duration::from_secs(1);
/// The most distinct kinds of counted event a summary lists.
const SAMPLES: usize = 10;

/// What to do with one event.
#[derive(Debug, PartialEq)]
pub struct Admitted {
    /// Write the event's record (and its notice, if it was refused).
    pub write: bool,
    /// The summary of the second that just ended, to write first.
    pub summary: Option<Summary>,
}

/// The events of one second that were counted instead of written.
#[derive(Debug, Clone, PartialEq)]
pub struct Summary {
    pub suppressed: u64,
    pub denied: u64,
    /// Counted events by what they were, most frequent first (at most [`SAMPLES`]).
    pub top: Vec<(Value, u64)>,
}

impl Summary {
    /// The record's fields.
    pub fn fields(&self) -> Value {
        json!({
            "suppressed": self.suppressed,
            "denied_count": self.denied,
            "top": self.top.iter().map(|(event, count)| {
                let mut event = event.clone();
                if let Some(map) = event.as_object_mut() {
                    map.insert("count".into(), (*count).into());
                }
                event
            }).collect::<Vec<_>>(),
            "summary": format!(
                "{} network events in one second were counted, not written one by one",
                self.suppressed
            ),
        })
    }
}

/// One run's limiter.
#[derive(Debug)]
pub struct NetLog {
    started: Option<Instant>,
    written: u32,
    /// Events written this second, by what they were.
    seen: HashSet<String>,
    /// Events counted this second: what they were, and how many.
    counted: BTreeMap<String, (Value, u64)>,
    denied: u64,
}

impl Default for NetLog {
    fn default() -> Self {
        NetLog::new()
    }
}

impl NetLog {
    pub fn new() -> NetLog {
        NetLog {
            started: None,
            written: 0,
            seen: HashSet::new(),
            counted: BTreeMap::new(),
            denied: 0,
        }
    }

    /// Decide for `event`, seen at `now`.
    pub fn admit(&mut self, event: &NetEvent, now: Instant) -> Admitted {
        let summary = match self.started {
            Some(started) if now.duration_since(started) < WINDOW => None,
            _ => {
                self.started = Some(now);
                self.written = 0;
                self.seen.clear();
                self.take_summary()
            }
        };
        // What the event was, without what differs between two alike: a closed connection's
        // bytes and duration are its own, so closes are never taken for one another.
        let what = json!({
            "kind": event.kind.as_str(),
            "name": event.name,
            "ip": event.ip,
            "port": event.port,
            "protocol": event.protocol,
            "allowed": event.allowed,
            "rule": event.rule,
            "sni": event.sni,
        });
        let key = what.to_string();
        let repeat = event.kind != NetEventKind::Closed && self.seen.contains(&key);
        let write = !repeat && self.written < RECORDS_PER_SECOND;
        if write {
            self.written += 1;
            self.seen.insert(key);
        } else {
            self.counted.entry(key).or_insert((what, 0)).1 += 1;
            if !event.allowed {
                self.denied += 1;
            }
        }
        Admitted { write, summary }
    }

    /// What was counted and not yet summarised (the run ends).
    pub fn take_summary(&mut self) -> Option<Summary> {
        if self.counted.is_empty() {
            return None;
        }
        let mut top: Vec<(Value, u64)> = std::mem::take(&mut self.counted).into_values().collect();
        let suppressed = top.iter().map(|(_, n)| n).sum();
        top.sort_by_key(|(_, count)| std::cmp::Reverse(*count));
        top.truncate(SAMPLES);
        Some(Summary {
            suppressed,
            denied: std::mem::take(&mut self.denied),
            top,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(kind: NetEventKind, port: u16, allowed: bool) -> NetEvent {
        NetEvent {
            kind,
            name: Some("denied.test".into()),
            ip: None,
            port: Some(port),
            protocol: "tcp",
            qtype: None,
            allowed,
            rule: "no allow entry names it".into(),
            sni: None,
            bytes_out: None,
            bytes_in: None,
            duration_ms: None,
            program: None,
            secret: None,
            method: None,
            path: None,
        }
    }

    #[test]
    fn repeats_within_a_second_are_counted_and_summed_up_after_it() {
        let mut log = NetLog::new();
        let start = Instant::now();
        let mut written = 0;
        for i in 0..1000 {
            let admitted = log.admit(
                &event(NetEventKind::Connect, 80, false),
                start + Duration::from_micros(i),
            );
            assert_eq!(admitted.summary, None);
            written += u64::from(admitted.write);
        }
        assert_eq!(written, 1, "one record for a thousand alike");
        let next = log.admit(&event(NetEventKind::Connect, 80, false), start + WINDOW);
        assert!(next.write, "a new second writes again");
        let summary = next.summary.unwrap();
        assert_eq!((summary.suppressed, summary.denied), (999, 999));
        assert_eq!(summary.top.len(), 1);
        assert_eq!(summary.top[0].1, 999);
        assert_eq!(summary.fields()["top"][0]["count"], 999);
        assert_eq!(log.take_summary(), None);
    }

    #[test]
    fn distinct_events_are_capped_and_none_goes_unaccounted() {
        let mut log = NetLog::new();
        let now = Instant::now();
        let total = RECORDS_PER_SECOND as u64 + 250;
        let written: u64 = (0..total)
            .map(|port| {
                u64::from(
                    log.admit(&event(NetEventKind::Connect, port as u16, false), now)
                        .write,
                )
            })
            .sum();
        assert_eq!(written, u64::from(RECORDS_PER_SECOND));
        let summary = log.take_summary().unwrap();
        assert_eq!(written + summary.suppressed, total);
        assert_eq!(summary.top.len(), SAMPLES);
    }

    #[test]
    fn closed_connections_are_each_their_own_record() {
        let mut log = NetLog::new();
        let now = Instant::now();
        for _ in 0..3 {
            assert!(log.admit(&event(NetEventKind::Closed, 80, true), now).write);
        }
    }
}
