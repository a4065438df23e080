//! The index of a sealed segment: what a reader needs to know to leave the segment unopened.
//!
//! Written once, when the segment is sealed, beside it (`STATE/audit/<first seq>.index`, JSON,
//! read-only like the segment): the segment's range (first and last seq, the first record's
//! `prev`, the last record's `hash`), its times, and the distinct sessions, profiles, API tokens
//! and actions its records name, sorted. A lookup (`airlock log --session S`, `--since`, the
//! API's `/v1/audit`) reads each index (a few KiB: tens of bytes per distinct session) and opens
//! only the segments that may hold a match. `verify` rebuilds each index from its segment and
//! compares: an index cannot hide a record without saying so.
//!
//! Each list is bounded: the names come from callers (a session's name, a token's id), and an
//! index must stay small whatever they send. Past [`MAX_LISTED`] distinct names a list keeps
//! the first (sorted) and is marked in `overflowed`: a reader then takes the segment as possibly
//! holding any name of that kind, and opens it — a segment is never skipped wrongly.

use std::collections::BTreeSet;
use std::io::{self, BufRead};

use serde::{Deserialize, Serialize};
use serde_json::{Map, Value};

use crate::reader::{action_matches, Filter};

/// The format of an index file; another is read as no index (the segment is then read whole).
pub const INDEX_VERSION: u32 = 1;

/// The most distinct names a list of an index holds (a few tens of KiB at most).
pub const MAX_LISTED: usize = 1024;

#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct SegmentIndex {
    pub version: u32,
    pub first_seq: u64,
    pub last_seq: u64,
    pub records: u64,
    /// The segment's size in bytes.
    pub bytes: u64,
    /// The first record's `prev`: the last hash of the segment before (the chain crosses here).
    pub first_prev: String,
    pub last_hash: String,
    pub first_time: String,
    pub last_time: String,
    /// The latest `time` in the segment. Usually `last_time`; later when the clock was set back
    /// while the segment was open, and `--since` must not skip a segment holding a later record.
    pub max_time: String,
    pub actions: Vec<String>,
    pub sessions: Vec<String>,
    pub profiles: Vec<String>,
    /// The ids of the API tokens whose requests the records are (`by.token`).
    pub tokens: Vec<String>,
    /// Records with `"denied": true`.
    pub denied: u64,
    /// Lines that are not records (none in a segment airlock wrote; `verify` names them).
    pub unreadable: u64,
    /// The lists (`actions`, `sessions`, `profiles`, `tokens`) that held more than
    /// [`MAX_LISTED`] names and were cut: the segment may hold any name of that kind. Left out
    /// when empty, so that an index from before the cap reads and compares the same.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub overflowed: Vec<String>,
}

impl SegmentIndex {
    /// Whether the segment may hold a record `filter` keeps. False only when the index says it
    /// cannot: then the segment need not be opened.
    pub fn may_hold(&self, filter: &Filter) -> bool {
        let holds = |kind: &str, list: &[String], wanted: &Option<String>| {
            wanted.as_deref().is_none_or(|w| {
                self.overflowed(kind) || list.binary_search_by(|x| x.as_str().cmp(w)).is_ok()
            })
        };
        holds("sessions", &self.sessions, &filter.session)
            && holds("profiles", &self.profiles, &filter.profile)
            && holds("tokens", &self.tokens, &filter.token)
            && filter
                .since
                .as_deref()
                .is_none_or(|since| self.max_time.as_str() >= since)
            && (filter.actions.is_empty()
                || self.overflowed("actions")
                || self
                    .actions
                    .iter()
                    .any(|action| filter.actions.iter().any(|a| action_matches(action, a))))
            && (!filter.denied || self.denied > 0)
    }
}

impl SegmentIndex {
    /// Whether the list `kind` (`sessions`, …) was cut: the segment may hold any name of it.
    pub fn overflowed(&self, kind: &str) -> bool {
        self.overflowed.iter().any(|k| k == kind)
    }

    /// The index with each list cut to [`MAX_LISTED`] names, and the cut ones said.
    pub(crate) fn capped(mut self) -> SegmentIndex {
        for (kind, list) in [
            ("actions", &mut self.actions),
            ("sessions", &mut self.sessions),
            ("profiles", &mut self.profiles),
            ("tokens", &mut self.tokens),
        ] {
            if list.len() > MAX_LISTED {
                list.truncate(MAX_LISTED);
                self.overflowed.push(kind.to_string());
            }
        }
        self
    }
}

/// Builds an index from a segment's records, in order.
#[derive(Debug, Default)]
pub struct IndexBuilder {
    first: Option<(u64, String, String)>,
    last: Option<(u64, String, String)>,
    max_time: String,
    records: u64,
    bytes: u64,
    actions: BTreeSet<String>,
    sessions: BTreeSet<String>,
    profiles: BTreeSet<String>,
    tokens: BTreeSet<String>,
    denied: u64,
    unreadable: u64,
}

impl IndexBuilder {
    /// One line of the segment (with its newline), `record` its parse if it is a record.
    pub fn add(&mut self, line_len: usize, record: Option<&Map<String, Value>>) {
        self.bytes += line_len as u64;
        let Some(record) = record else {
            self.unreadable += 1;
            return;
        };
        let text = |key: &str| record.get(key).and_then(Value::as_str);
        let seq = record.get("seq").and_then(Value::as_u64).unwrap_or(0);
        let time = text("time").unwrap_or_default().to_string();
        if self.first.is_none() {
            let prev = text("prev").unwrap_or_default().to_string();
            self.first = Some((seq, prev, time.clone()));
        }
        if time > self.max_time {
            self.max_time.clone_from(&time);
        }
        let hash = text("hash").unwrap_or_default().to_string();
        self.last = Some((seq, hash, time));
        self.records += 1;
        let note = |set: &mut BTreeSet<String>, value: Option<&str>| {
            if let Some(value) = value {
                if !set.contains(value) {
                    set.insert(value.to_string());
                }
            }
        };
        note(&mut self.actions, text("action"));
        note(&mut self.sessions, text("session"));
        note(&mut self.profiles, text("profile"));
        let token = record
            .get("by")
            .and_then(|by| by.get("token"))
            .and_then(Value::as_str);
        note(&mut self.tokens, token);
        if record.get("denied") == Some(&Value::Bool(true)) {
            self.denied += 1;
        }
    }

    /// The index, its lists cut to [`MAX_LISTED`]; None when no record was added.
    pub fn finish(self) -> Option<SegmentIndex> {
        self.finish_uncapped().map(SegmentIndex::capped)
    }

    /// The index with every name listed, as airlock wrote them before lists were capped.
    pub(crate) fn finish_uncapped(self) -> Option<SegmentIndex> {
        let (first_seq, first_prev, first_time) = self.first?;
        let (last_seq, last_hash, last_time) = self.last?;
        Some(SegmentIndex {
            version: INDEX_VERSION,
            first_seq,
            last_seq,
            records: self.records,
            bytes: self.bytes,
            first_prev,
            last_hash,
            first_time,
            last_time,
            max_time: self.max_time,
            actions: self.actions.into_iter().collect(),
            sessions: self.sessions.into_iter().collect(),
            profiles: self.profiles.into_iter().collect(),
            tokens: self.tokens.into_iter().collect(),
            denied: self.denied,
            unreadable: self.unreadable,
            overflowed: Vec::new(),
        })
    }
}

/// The index of a whole segment, read from `input`. None when it holds no record.
pub fn index_of(input: impl BufRead) -> io::Result<Option<SegmentIndex>> {
    let mut builder = IndexBuilder::default();
    for line in input.split(b'\n') {
        let line = line?;
        let record = match serde_json::from_slice::<Value>(&line) {
            Ok(Value::Object(record)) => Some(record),
            _ => None,
        };
        builder.add(line.len() + 1, record.as_ref());
    }
    Ok(builder.finish())
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn record(seq: u64, time: &str, fields: Value) -> Map<String, Value> {
        let mut record = Map::new();
        record.insert("seq".into(), seq.into());
        record.insert("time".into(), time.into());
        record.insert("prev".into(), format!("p{seq}").into());
        if let Value::Object(fields) = fields {
            record.extend(fields);
        }
        record.insert("hash".into(), format!("h{seq}").into());
        record
    }

    #[test]
    fn an_index_holds_the_range_and_the_distinct_names_sorted() {
        let mut builder = IndexBuilder::default();
        let records = [
            record(
                7,
                "2026-01-02T00:00:05.000Z",
                json!({"action": "run.intent", "session": "s2", "profile": "ci", "by": {"token": "t1"}}),
            ),
            // The clock set back: the latest time is not the last record's.
            record(
                8,
                "2026-01-02T00:00:01.000Z",
                json!({"action": "net.connect", "session": "s1", "denied": true}),
            ),
            record(
                9,
                "2026-01-02T00:00:02.000Z",
                json!({"action": "run.result", "session": "s2", "profile": 3}),
            ),
        ];
        for r in &records {
            builder.add(100, Some(r));
        }
        builder.add(5, None);
        let index = builder.finish().unwrap();
        assert_eq!((index.first_seq, index.last_seq, index.records), (7, 9, 3));
        assert_eq!(
            (index.first_prev.as_str(), index.last_hash.as_str()),
            ("p7", "h9")
        );
        assert_eq!(index.bytes, 305);
        assert_eq!(index.last_time, "2026-01-02T00:00:02.000Z");
        assert_eq!(index.max_time, "2026-01-02T00:00:05.000Z");
        assert_eq!(index.sessions, ["s1", "s2"]);
        assert_eq!(
            index.profiles,
            ["ci"],
            "a profile that is not text is no name"
        );
        assert_eq!(index.tokens, ["t1"]);
        assert_eq!(index.actions, ["net.connect", "run.intent", "run.result"]);
        assert_eq!((index.denied, index.unreadable), (1, 1));

        let holds = |filter: Filter| index.may_hold(&filter);
        assert!(holds(Filter::default()));
        let session = |s: &str| Filter {
            session: Some(s.into()),
            ..Filter::default()
        };
        assert!(holds(session("s1")) && holds(session("s2")));
        assert!(!holds(session("s3")));
        assert!(!holds(Filter {
            profile: Some("other".into()),
            ..Filter::default()
        }));
        assert!(!holds(Filter {
            token: Some("t2".into()),
            ..Filter::default()
        }));
        let since = |t: &str| Filter {
            since: Some(t.into()),
            ..Filter::default()
        };
        assert!(holds(since("2026-01-02T00:00:05.000Z")));
        assert!(!holds(since("2026-01-02T00:00:05.001Z")));
        let actions = |a: &[&str]| Filter {
            actions: a.iter().map(|a| a.to_string()).collect(),
            ..Filter::default()
        };
        assert!(holds(actions(&["run"])) && holds(actions(&["apply", "net.connect"])));
        assert!(!holds(actions(&["apply", "ru"])));
        assert!(holds(Filter {
            denied: true,
            ..Filter::default()
        }));
    }

    #[test]
    fn no_record_no_index() {
        assert_eq!(index_of(&b""[..]).unwrap(), None);
        assert_eq!(index_of(&b"not json\n"[..]).unwrap(), None);
    }
}
