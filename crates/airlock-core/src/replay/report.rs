//! Gathering the attempts by run and destination, and what the replay found.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use airlock_policy::NetworkMode;
use serde::Serialize;
use serde_json::{Map, Value};

use super::attempt::{Attempt, Stage};

/// What a draft would have done to the runs replayed. Serialized as `policy replay --json`
/// prints it.
#[derive(Debug, Clone, Serialize)]
pub struct Replay {
    /// The draft's name.
    pub draft: String,
    /// The profile whose runs were replayed.
    pub runs_of: String,
    /// Runs with at least one network attempt replayed.
    pub runs: usize,
    /// Attempts replayed (DNS queries and connections, repeats counted).
    pub attempts: u64,
    /// Attempts the gate allowed then and the draft would refuse, by destination: what the
    /// runs needed. Not empty: the draft would break them.
    pub would_refuse: Vec<ReplayedDestination>,
    /// The same, by run.
    pub runs_broken: Vec<RunBroken>,
    /// Attempts the gate refused then and the draft would allow, by destination.
    pub would_now_allow: Vec<ReplayedDestination>,
    /// The draft's allow entries that no attempt of the runs would have gone through.
    pub never_used: Vec<String>,
    /// Events the gate counted in a flood without keeping their destination (`net.suppressed`
    /// beyond its samples): not replayed.
    pub not_replayed: u64,
}

impl Replay {
    /// Would the draft refuse something the runs needed?
    pub fn breaks(&self) -> bool {
        !self.would_refuse.is_empty()
    }
}

/// One destination, and the runs that tried it.
#[derive(Debug, Clone, Serialize)]
pub struct ReplayedDestination {
    /// The name the sandbox asked for, or the bare address it connected to.
    pub host: String,
    /// None: only a DNS query was recorded (see `note`).
    pub port: Option<u16>,
    /// `dns` or `connect`: where the gate decided.
    pub stage: &'static str,
    pub attempts: u64,
    /// The rule that decided then, and the one that would decide now.
    pub then: String,
    pub now: String,
    /// What the records cannot say, when they cannot say it (a port never tried).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub note: Option<String>,
    pub runs: Vec<ReplayedRun>,
}

impl ReplayedDestination {
    /// `host:port`, or the name alone for a DNS query.
    pub fn target(&self) -> String {
        match (self.port, self.host.contains(':')) {
            (Some(port), true) => format!("[{}]:{port}", self.host),
            (Some(port), false) => format!("{}:{port}", self.host),
            (None, _) => self.host.clone(),
        }
    }
}

/// One run, as its `run.intent` record names it.
#[derive(Debug, Clone, Serialize, PartialEq, Eq)]
pub struct ReplayedRun {
    /// The `seq` of its `run.intent` record (None: the intent is not in the records read).
    pub intent_seq: Option<u64>,
    /// When it started (or, without its intent, its first attempt).
    pub time: Option<String>,
    pub session: Option<String>,
    pub argv: Vec<String>,
    /// Its attempts at the destination (or, in [`RunBroken`], at all that would break).
    pub attempts: u64,
}

/// A run the draft would break, and where.
#[derive(Debug, Clone, Serialize)]
pub struct RunBroken {
    pub run: ReplayedRun,
    /// `host:port` (or a name, for a DNS query) of each destination that would be refused.
    pub destinations: Vec<String>,
}

/// A run as read: its intent's facts.
#[derive(Debug, Clone)]
struct Run {
    seq: Option<u64>,
    time: Option<String>,
    session: Option<String>,
    argv: Vec<String>,
}

impl Run {
    fn shown(&self, attempts: u64) -> ReplayedRun {
        ReplayedRun {
            intent_seq: self.seq,
            time: self.time.clone(),
            session: self.session.clone(),
            argv: self.argv.clone(),
            attempts,
        }
    }
}

/// Records going in, one at a time, in the log's order.
pub(super) struct Replaying<'a> {
    draft: &'a NetworkMode,
    since: Option<String>,
    runs: Vec<Run>,
    /// The run each airlock process (pid) runs in each session, by its last intent.
    current: HashMap<(Option<u64>, Option<String>), usize>,
    /// Learning runs (`run.learn`), by the same key: their network was open, so what they
    /// reached says nothing of what the profile's runs need. Their attempts are passed over.
    learning: std::collections::HashSet<(Option<u64>, Option<String>)>,
    /// Attempts alike in one run, counted.
    attempts: BTreeMap<(usize, Attempt), u64>,
    not_replayed: u64,
}

fn text(record: &Map<String, Value>, key: &str) -> Option<String> {
    record.get(key).and_then(Value::as_str).map(str::to_string)
}

impl<'a> Replaying<'a> {
    pub(super) fn new(draft: &'a NetworkMode, since: Option<String>) -> Replaying<'a> {
        Replaying {
            draft,
            since,
            runs: Vec::new(),
            current: HashMap::new(),
            learning: std::collections::HashSet::new(),
            attempts: BTreeMap::new(),
            not_replayed: 0,
        }
    }

    pub(super) fn add(&mut self, record: &Map<String, Value>) {
        let action = text(record, "action").unwrap_or_default();
        let pid = record
            .get("by")
            .and_then(|by| by.get("pid"))
            .and_then(Value::as_u64);
        let key = (pid, text(record, "session"));
        if action == "run.learn" {
            self.current.remove(&key);
            self.learning.insert(key);
            return;
        }
        if self.learning.contains(&key) && action.starts_with("net.") {
            return;
        }
        if action == "run.intent" {
            let argv = record
                .get("argv")
                .and_then(Value::as_array)
                .map(|argv| {
                    argv.iter()
                        .filter_map(Value::as_str)
                        .map(str::to_string)
                        .collect()
                })
                .unwrap_or_default();
            self.runs.push(Run {
                seq: record.get("seq").and_then(Value::as_u64),
                time: text(record, "time"),
                session: key.1.clone(),
                argv,
            });
            self.current.insert(key, self.runs.len() - 1);
            return;
        }
        let Some(kind) = action.strip_prefix("net.") else {
            return;
        };
        let time = text(record, "time");
        if let Some(since) = &self.since {
            if time.as_deref().is_none_or(|t| t < since.as_str()) {
                return;
            }
        }
        let mut found: Vec<(Attempt, u64)> = Vec::new();
        if kind == "suppressed" {
            let samples = record.get("top").and_then(Value::as_array);
            let mut sampled = 0;
            for sample in samples.into_iter().flatten().filter_map(Value::as_object) {
                let count = sample.get("count").and_then(Value::as_u64).unwrap_or(1);
                sampled += count;
                let kind = sample.get("kind").and_then(Value::as_str).unwrap_or("");
                if let Some(attempt) = Attempt::of(kind, sample) {
                    found.push((attempt, count));
                }
            }
            let counted = record.get("suppressed").and_then(Value::as_u64);
            self.not_replayed += counted.unwrap_or(0).saturating_sub(sampled);
        } else if let Some(attempt) = Attempt::of(kind, record) {
            found.push((attempt, 1));
        }
        if found.is_empty() {
            return;
        }
        let run = match self.current.get(&key) {
            Some(run) => *run,
            None => {
                // Its intent is not among the records read (another profile's file, a copy
                // that starts later): the run is known by its session and time only.
                self.runs.push(Run {
                    seq: None,
                    time,
                    session: key.1.clone(),
                    argv: Vec::new(),
                });
                self.current.insert(key, self.runs.len() - 1);
                self.runs.len() - 1
            }
        };
        for (attempt, count) in found {
            *self.attempts.entry((run, attempt)).or_default() += count;
        }
    }

    pub(super) fn finish(self, draft_name: &str, runs_of: &str) -> Replay {
        // A DNS query whose run also connected to the name is told by its connections: their
        // port is known, and a name the draft will not resolve refuses them too.
        let connected: BTreeSet<(usize, &str)> = self
            .attempts
            .keys()
            .filter(|(_, a)| a.stage == Stage::Connect)
            .filter_map(|(run, a)| a.name.as_deref().map(|name| (*run, name)))
            .collect();
        let mut used = BTreeSet::new();
        let mut refuse = Groups::default();
        let mut now_allow = Groups::default();
        let mut runs_seen = BTreeSet::new();
        let mut total = 0;
        for ((run, attempt), count) in &self.attempts {
            runs_seen.insert(*run);
            total += count;
            let decision = attempt.decide(self.draft);
            if let Some(entry) = self.draft.allowed_by(&decision) {
                used.insert(entry.to_string());
            }
            let told_by_connections = attempt.stage == Stage::Dns
                && attempt
                    .name
                    .as_deref()
                    .is_some_and(|name| connected.contains(&(*run, name)));
            if told_by_connections || attempt.allowed == decision.allowed {
                continue;
            }
            let groups = if attempt.allowed {
                &mut refuse
            } else {
                &mut now_allow
            };
            groups.add(*run, attempt, &decision.rule, *count);
        }
        let never_used = self
            .draft
            .allow_entries()
            .iter()
            .map(ToString::to_string)
            .filter(|entry| !used.contains(entry))
            .collect();
        let runs_broken = refuse.by_run(&self.runs);
        Replay {
            draft: draft_name.to_string(),
            runs_of: runs_of.to_string(),
            runs: runs_seen.len(),
            attempts: total,
            would_refuse: refuse.destinations(&self.runs, true),
            runs_broken,
            would_now_allow: now_allow.destinations(&self.runs, false),
            never_used,
            not_replayed: self.not_replayed,
        }
    }
}

/// Destination: where it stopped, the host, the port.
type Target = (Stage, String, Option<u16>);

/// Attempts gathered by destination, each with its rules and its runs.
#[derive(Default)]
struct Groups {
    by_target: BTreeMap<Target, Group>,
}

#[derive(Default)]
struct Group {
    then: String,
    now: String,
    runs: BTreeMap<usize, u64>,
}

impl Groups {
    fn add(&mut self, run: usize, attempt: &Attempt, now: &str, count: u64) {
        let target = (attempt.stage, attempt.host(), attempt.port);
        let group = self.by_target.entry(target).or_insert_with(|| Group {
            then: attempt.rule.clone(),
            now: now.to_string(),
            runs: BTreeMap::new(),
        });
        *group.runs.entry(run).or_default() += count;
    }

    /// Most attempts first. `needed`: these were allowed then (for what a DNS-only one says).
    fn destinations(&self, runs: &[Run], needed: bool) -> Vec<ReplayedDestination> {
        let mut all: Vec<ReplayedDestination> = self
            .by_target
            .iter()
            .map(|((stage, host, port), group)| ReplayedDestination {
                host: host.clone(),
                port: *port,
                stage: match stage {
                    Stage::Dns => "dns",
                    Stage::Connect => "connect",
                },
                attempts: group.runs.values().sum(),
                then: group.then.clone(),
                now: group.now.clone(),
                note: (*stage == Stage::Dns).then(|| {
                    if needed {
                        "resolved, and no connection to it was recorded: the port it was for is unknown".to_string()
                    } else {
                        "refused at DNS, so no connection was tried: the port it was for is unknown".to_string()
                    }
                }),
                runs: group
                    .runs
                    .iter()
                    .map(|(run, count)| runs[*run].shown(*count))
                    .collect(),
            })
            .collect();
        all.sort_by_key(|d| std::cmp::Reverse(d.attempts));
        all
    }

    /// Each run with the destinations it would lose, in the order the runs started.
    fn by_run(&self, runs: &[Run]) -> Vec<RunBroken> {
        let mut by_run: BTreeMap<usize, (u64, Vec<String>)> = BTreeMap::new();
        for ((_, host, port), group) in &self.by_target {
            let target = match port {
                Some(port) if host.contains(':') => format!("[{host}]:{port}"),
                Some(port) => format!("{host}:{port}"),
                None => format!("{host} (DNS)"),
            };
            for (run, count) in &group.runs {
                let entry = by_run.entry(*run).or_default();
                entry.0 += count;
                entry.1.push(target.clone());
            }
        }
        by_run
            .into_iter()
            .map(|(run, (attempts, destinations))| RunBroken {
                run: runs[run].shown(attempts),
                destinations,
            })
            .collect()
    }
}

#[cfg(test)]
mod tests;
