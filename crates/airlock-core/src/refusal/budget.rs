//! How many refusal records a token may cause a second. Bounded records are not enough: a token
//! may make a hundred requests a second, each refused, each a record. Past
//! [`RECORDS_PER_SECOND`] in a second a token's refusals are counted instead of written, and go
//! into one `refusals.suppressed` record: at its next refusal in a later second, or when
//! `airlock serve` flushes them (every second, and as it stops). The record names what was
//! refused, not only how often: each distinct refusal (action, request, error; [`KINDS_KEPT`] of
//! them, each text cut to [`TEXT_BYTES`] with the length and SHA-256 of what was cut) with its
//! count, so that five harmless refusals a second cannot hide the one that matters behind a
//! number. The budget is a token's for each error code apart: padding of one kind (refusals of
//! its own sessions, say) cannot crowd out a refusal of another (`outside_token_binding`: a
//! reach for another token's session or workspace), which has its own five records and sixteen
//! names a second. Shared by every process of the state directory (the server, its workers):
//!
//! ```text
//! STATE/refusals.lock   flock'd while the tallies are read and rewritten
//! STATE/refusals.json   {"TOKEN_ID CODE": {second, written, suppressed, since, kinds, others}},
//!                       replaced whole (written beside it, renamed over it)
//! ```

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Refusal records one token may cause in one second; the rest are counted.
pub const RECORDS_PER_SECOND: u32 = 5;
/// Distinct refusals one summary names; more are only counted (`others`).
pub const KINDS_KEPT: usize = 16;
/// Bytes of each text of a summary's refusal.
pub const TEXT_BYTES: usize = 256;

/// One distinct refusal a summary names, and how often it came.
#[derive(Debug, Clone, Serialize, Deserialize, PartialEq, Eq)]
pub struct Kind {
    pub action: String,
    /// The request (the API's method and path, a command's first words).
    pub asked: String,
    pub error: String,
    pub count: u64,
}

impl Kind {
    /// A refusal of `action`, its texts cut to [`TEXT_BYTES`].
    pub(crate) fn new(action: &str, asked: &str, error: &str) -> Kind {
        Kind {
            action: cut(action),
            asked: cut(asked),
            error: cut(error),
            count: 1,
        }
    }

    fn same(&self, other: &Kind) -> bool {
        (&self.action, &self.asked, &self.error) == (&other.action, &other.asked, &other.error)
    }
}

/// `text` whole if it is short, else its first [`TEXT_BYTES`] and what tells the rest apart.
fn cut(text: &str) -> String {
    super::bounded_to(text, TEXT_BYTES)
}

/// One token's count in its latest second.
#[derive(Debug, Default, Clone, Serialize, Deserialize, PartialEq, Eq)]
struct Tally {
    /// Seconds since the epoch.
    second: u64,
    /// Records written in that second.
    written: u32,
    /// Refusals not written since `since` (seconds since the epoch), not on record yet.
    suppressed: u64,
    since: u64,
    /// What they were, the first [`KINDS_KEPT`] distinct ones.
    #[serde(default)]
    kinds: Vec<Kind>,
    /// Refusals beyond those.
    #[serde(default)]
    others: u64,
}

/// Refusals counted and not written: how many, since when, and what they were.
#[derive(Debug, PartialEq, Eq)]
pub(crate) struct Summary {
    pub(crate) count: u64,
    pub(crate) since: u64,
    pub(crate) kinds: Vec<Kind>,
    pub(crate) others: u64,
}

impl Tally {
    /// What it holds not on record yet, taken out of it.
    fn take_summary(&mut self) -> Option<Summary> {
        (self.suppressed > 0).then(|| Summary {
            count: std::mem::take(&mut self.suppressed),
            since: self.since,
            kinds: std::mem::take(&mut self.kinds),
            others: std::mem::take(&mut self.others),
        })
    }
}

/// What a refusal of a token may do now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Allowance {
    /// Write its record; first, a record of the ones counted before, if any.
    Write(Option<Summary>),
    /// Counted, not written.
    Counted,
}

fn file_of(state_dir: &Path) -> PathBuf {
    state_dir.join("refusals.json")
}

fn lock_of(state_dir: &Path) -> PathBuf {
    state_dir.join("refusals.lock")
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The tallies, locked until the guard is dropped; None when the lock cannot be had (the
/// refusal is then written: the budget never loses a record by failing).
struct Locked {
    path: PathBuf,
    _lock: nix::fcntl::Flock<File>,
    tallies: BTreeMap<String, Tally>,
}

impl Locked {
    fn open(state_dir: &Path) -> Option<Locked> {
        let lock = crate::paths::lock_exclusive(&lock_of(state_dir)).ok()?;
        let path = file_of(state_dir);
        let mut text = Vec::new();
        if let Ok(mut file) = File::open(&path) {
            file.read_to_end(&mut text).ok()?;
        }
        // Replaced whole, it parses or is missing; anything else starts over (it only counts).
        let tallies = serde_json::from_slice(&text).unwrap_or_default();
        Some(Locked {
            path,
            _lock: lock,
            tallies,
        })
    }

    /// Written beside it and renamed over it: a reader sees the old tallies or the new, never a
    /// part. Not synced: a crash loses counts not on record yet, never a record. False when
    /// they could not be written.
    fn save(self) -> bool {
        let Ok(text) = serde_json::to_vec(&self.tallies) else {
            return false;
        };
        let temp = self.path.with_extension("json.new");
        let written = std::fs::OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(true)
            .mode(0o600)
            .open(&temp)
            .and_then(|mut file| file.write_all(&text));
        written.is_ok() && std::fs::rename(&temp, &self.path).is_ok()
    }
}

/// The tallies' key of a token's refusals with one error code.
fn key(token: &str, code: &str) -> String {
    format!("{token} {code}")
}

/// The token of a tallies' key.
fn token_of(key: &str) -> &str {
    key.split_once(' ').map_or(key, |(token, _)| token)
}

/// Count a refusal (`kind`, with the error `code`) of `token` and say whether its record may be
/// written. When the count cannot be kept, the record is written: never neither.
pub(crate) fn take(state_dir: &Path, token: &str, code: &str, kind: Kind) -> Allowance {
    let Some(mut locked) = Locked::open(state_dir) else {
        return Allowance::Write(None);
    };
    let second = now();
    let tally = locked.tallies.entry(key(token, code)).or_default();
    let allowance = decide(tally, second, kind);
    match (locked.save(), allowance) {
        (false, Allowance::Counted) => Allowance::Write(None),
        (_, allowance) => allowance,
    }
}

/// The rule, apart from the file: a new second starts a new count and hands over what was
/// counted before.
fn decide(tally: &mut Tally, second: u64, kind: Kind) -> Allowance {
    let mut before = None;
    if tally.second != second {
        before = tally.take_summary();
        *tally = Tally {
            second,
            ..Tally::default()
        };
    }
    if tally.written < RECORDS_PER_SECOND {
        tally.written += 1;
        return Allowance::Write(before);
    }
    if tally.suppressed == 0 {
        tally.since = second;
    }
    tally.suppressed += 1;
    if let Some(seen) = tally.kinds.iter_mut().find(|seen| seen.same(&kind)) {
        seen.count += 1;
    } else if tally.kinds.len() < KINDS_KEPT {
        tally.kinds.push(kind);
    } else {
        tally.others += 1;
    }
    Allowance::Counted
}

/// Every token's refusals not on record, from seconds already over (`everything`: the current
/// one too, when no refusal can come any more), handed to `record` and cleared; tokens with
/// nothing left are forgotten.
pub(crate) fn flush(state_dir: &Path, everything: bool, mut record: impl FnMut(&str, Summary)) {
    if !file_of(state_dir).exists() {
        return;
    }
    let Some(mut locked) = Locked::open(state_dir) else {
        return;
    };
    let second = if everything { u64::MAX } else { now() };
    locked.tallies.retain(|key, tally| {
        if tally.second >= second {
            return true;
        }
        if let Some(summary) = tally.take_summary() {
            record(token_of(key), summary);
        }
        false
    });
    let _ = locked.save();
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kind(error: &str) -> Kind {
        Kind::new("run.refused", "POST /v1/runs", error)
    }

    #[test]
    fn five_a_second_are_written_the_rest_counted_and_named_in_the_next_second() {
        let mut tally = Tally::default();
        for _ in 0..RECORDS_PER_SECOND {
            assert_eq!(
                decide(&mut tally, 100, kind("padding")),
                Allowance::Write(None)
            );
        }
        for _ in 0..94 {
            assert_eq!(decide(&mut tally, 100, kind("padding")), Allowance::Counted);
        }
        // The one that matters, behind the padding, is named in the summary.
        assert_eq!(
            decide(&mut tally, 100, kind("the probe")),
            Allowance::Counted
        );
        let Allowance::Write(Some(summary)) = decide(&mut tally, 101, kind("x")) else {
            panic!("the next second hands the summary over");
        };
        assert_eq!((summary.count, summary.since, summary.others), (95, 100, 0));
        let counts: Vec<(&str, u64)> = summary
            .kinds
            .iter()
            .map(|k| (k.error.as_str(), k.count))
            .collect();
        assert_eq!(counts, [("padding", 94), ("the probe", 1)]);
        assert_eq!(decide(&mut tally, 101, kind("x")), Allowance::Write(None));
    }

    #[test]
    fn a_summary_names_sixteen_kinds_and_counts_the_rest() {
        let mut tally = Tally::default();
        for _ in 0..RECORDS_PER_SECOND {
            decide(&mut tally, 7, kind("w"));
        }
        for n in 0..40 {
            decide(&mut tally, 7, kind(&format!("{n}{}", "é".repeat(300))));
        }
        let summary = tally.take_summary().unwrap();
        assert_eq!((summary.kinds.len(), summary.others), (KINDS_KEPT, 40 - 16));
        // Cut, with the length and hash of the whole.
        assert!(summary
            .kinds
            .iter()
            .all(|k| k.error.len() <= TEXT_BYTES + 120));
        assert!(summary.kinds[0].error.contains("sha256"));
    }

    /// The second reviewer's: five refusals and sixteen distinct kinds of padding, then the
    /// probe: with one budget a token, the probe went into `others`, unnamed.
    #[test]
    fn padding_of_one_code_cannot_crowd_out_a_refusal_of_another() {
        let state = tempfile::tempdir().unwrap();
        for n in 0..(RECORDS_PER_SECOND as usize + KINDS_KEPT + 4) {
            take(
                state.path(),
                "abc",
                "session_not_found",
                kind(&n.to_string()),
            );
        }
        let probe = kind("this token may not use session of another");
        assert_eq!(
            take(state.path(), "abc", "outside_token_binding", probe),
            Allowance::Write(None)
        );
    }

    #[test]
    fn a_flush_hands_over_past_seconds_only() {
        let state = tempfile::tempdir().unwrap();
        let mut locked = Locked::open(state.path()).unwrap();
        let counted = |second| Tally {
            second,
            written: RECORDS_PER_SECOND,
            suppressed: 3,
            since: second,
            kinds: vec![kind("k")],
            others: 0,
        };
        locked
            .tallies
            .insert(key("abc", "forbidden"), counted(now() - 1));
        // A second still going is not over: it is kept for now.
        locked
            .tallies
            .insert(key("def", "forbidden"), counted(now() + 3600));
        assert!(locked.save());
        let mut handed = Vec::new();
        flush(state.path(), false, |token, summary| {
            handed.push((token.to_string(), summary.count))
        });
        assert_eq!(handed, [("abc".to_string(), 3)]);
        flush(state.path(), false, |_, _| panic!("nothing is over"));
        flush(state.path(), true, |token, _| assert_eq!(token, "def"));
        flush(state.path(), true, |_, _| panic!("nothing is left"));
    }
}
