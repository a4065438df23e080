//! How many refusal records a token may cause a second. Bounded records are not enough: a token
//! may make a hundred requests a second, each refused, each a record. Past
//! [`RECORDS_PER_SECOND`] in a second a token's refusals are counted instead of written, and the
//! count goes into one `refusals.suppressed` record: at its next refusal in a later second, or
//! when `airlock serve` flushes them (every second, and as it stops). Shared by every process of
//! the state directory (the server, its workers), through one file under a lock:
//!
//! ```text
//! STATE/refusals.json   {TOKEN_ID: {second, written, suppressed, since}}, read and rewritten
//!                       under its own flock
//! ```

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read as _, Seek as _, Write as _};
use std::os::unix::fs::OpenOptionsExt as _;
use std::path::{Path, PathBuf};
use std::time::{SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// Refusal records one token may cause in one second; the rest are counted.
pub const RECORDS_PER_SECOND: u32 = 5;

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
}

/// What a refusal of a token may do now.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Allowance {
    /// Write its record; first, a record of the ones counted before, if any (count, since).
    Write(Option<(u64, u64)>),
    /// Counted, not written.
    Counted,
}

fn file_of(state_dir: &Path) -> PathBuf {
    state_dir.join("refusals.json")
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// The tallies, locked until the guard is dropped; None when the file cannot be opened or
/// locked (the refusal is then written: the budget never loses a record by failing).
struct Locked {
    file: nix::fcntl::Flock<File>,
    tallies: BTreeMap<String, Tally>,
}

impl Locked {
    fn open(state_dir: &Path) -> Option<Locked> {
        let file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o600)
            .open(file_of(state_dir))
            .ok()?;
        let mut file = nix::fcntl::Flock::lock(file, nix::fcntl::FlockArg::LockExclusive).ok()?;
        let mut text = Vec::new();
        file.read_to_end(&mut text).ok()?;
        // A file that does not parse (cut by a full disk) starts over: it only counts.
        let tallies = serde_json::from_slice(&text).unwrap_or_default();
        Some(Locked { file, tallies })
    }

    fn save(mut self) {
        let Ok(text) = serde_json::to_vec(&self.tallies) else {
            return;
        };
        let _ = self
            .file
            .rewind()
            .and_then(|()| self.file.set_len(0))
            .and_then(|()| self.file.write_all(&text));
    }
}

/// Count a refusal of `token` and say whether its record may be written.
pub(crate) fn take(state_dir: &Path, token: &str) -> Allowance {
    let Some(mut locked) = Locked::open(state_dir) else {
        return Allowance::Write(None);
    };
    let second = now();
    let tally = locked.tallies.entry(token.to_string()).or_default();
    let allowance = decide(tally, second);
    locked.save();
    allowance
}

/// The rule, apart from the file: a new second starts a new count and hands over what was
/// counted before.
fn decide(tally: &mut Tally, second: u64) -> Allowance {
    let mut before = None;
    if tally.second != second {
        if tally.suppressed > 0 {
            before = Some((tally.suppressed, tally.since));
        }
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
    Allowance::Counted
}

/// Every token's count of refusals not on record, from seconds already over (`everything`: the
/// current one too, when no refusal can come any more), handed to `record` (token, count, since)
/// and cleared; tokens with nothing left are forgotten.
pub(crate) fn flush(state_dir: &Path, everything: bool, mut record: impl FnMut(&str, u64, u64)) {
    if !file_of(state_dir).exists() {
        return;
    }
    let Some(mut locked) = Locked::open(state_dir) else {
        return;
    };
    let second = if everything { u64::MAX } else { now() };
    locked.tallies.retain(|token, tally| {
        if tally.second >= second {
            return true;
        }
        if tally.suppressed > 0 {
            record(token, tally.suppressed, tally.since);
        }
        false
    });
    locked.save();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn five_a_second_are_written_the_rest_counted_and_handed_over_in_the_next_second() {
        let mut tally = Tally::default();
        for _ in 0..RECORDS_PER_SECOND {
            assert_eq!(decide(&mut tally, 100), Allowance::Write(None));
        }
        for _ in 0..95 {
            assert_eq!(decide(&mut tally, 100), Allowance::Counted);
        }
        assert_eq!(decide(&mut tally, 101), Allowance::Write(Some((95, 100))));
        assert_eq!(decide(&mut tally, 101), Allowance::Write(None));
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
        };
        locked.tallies.insert("abc".into(), counted(now() - 1));
        // A second still going is not over: it is kept for now.
        locked.tallies.insert("def".into(), counted(now() + 3600));
        locked.save();
        let mut handed = Vec::new();
        flush(state.path(), false, |token, count, _| {
            handed.push((token.to_string(), count))
        });
        assert_eq!(handed, [("abc".to_string(), 3)]);
        flush(state.path(), false, |_, _, _| panic!("nothing is over"));
        flush(state.path(), true, |token, _, _| assert_eq!(token, "def"));
        flush(state.path(), true, |_, _, _| panic!("nothing is left"));
    }
}
