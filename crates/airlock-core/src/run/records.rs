//! What a run writes to the audit log: its intent, before the command may start, and its result.

use std::path::Path;

use airlock_jail::{Finished, Outcome, ResourceLimits, Usage};
use airlock_policy::{NetworkMode, Profile};
use serde::Serialize;

/// `run.intent`: everything that decides what the command may do.
#[derive(Serialize)]
pub(super) struct Intent<'a> {
    /// Names this run among the session's (its kept output, see [`crate::session_runs`]).
    pub run_id: String,
    pub session: Option<&'a str>,
    pub profile: &'a str,
    /// Which policy the run had (see [`crate::audit::policy_digest`]).
    pub policy: String,
    pub argv: Vec<String>,
    pub cwd: &'a Path,
    pub workspace: &'a Path,
    pub network: &'a NetworkMode,
    /// `[network] ask`: what a person is asked about, and for how long (the webhook by its
    /// presence only: its URL may hold its secret).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub ask: Option<Ask>,
    pub limits: Limits,
    pub sandbox_uid: u32,
    /// A warm sandbox (prepared before its request, see `run::warm`): how many milliseconds
    /// before this intent it was prepared. Absent: built for this run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub prepared_ms_before: Option<u64>,
}

#[derive(Serialize)]
pub(super) struct Ask {
    entries: Vec<String>,
    timeout_seconds: u64,
    webhook: bool,
}

impl Ask {
    /// None when the profile asks nothing.
    pub(super) fn of(profile: &Profile) -> Option<Ask> {
        let ask = &profile.ask;
        if ask.hosts.is_empty() {
            return None;
        }
        let any = ask.hosts.any.then(|| "*".to_string());
        Some(Ask {
            entries: any
                .into_iter()
                .chain(ask.hosts.entries.iter().map(ToString::to_string))
                .collect(),
            timeout_seconds: ask.timeout_seconds,
            webhook: ask.webhook.is_some(),
        })
    }
}

#[derive(Serialize)]
pub(super) struct Limits {
    memory_bytes: u64,
    processes: u64,
    cpu_seconds: u64,
    timeout_seconds: Option<u64>,
    tmp_bytes: u64,
    output_bytes: Option<u64>,
    open_files: u64,
    millicpus: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    disk_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    files: Option<u64>,
    /// The free space kept on the state directory's filesystem, for a layer on disk.
    #[serde(skip_serializing_if = "Option::is_none")]
    keep_free_bytes: Option<u64>,
}

impl<'a> Intent<'a> {
    pub(super) fn limits(limits: &ResourceLimits, profile: &airlock_policy::Limits) -> Limits {
        Limits {
            millicpus: limits.cpus.millicpus,
            disk_bytes: profile.disk_bytes,
            files: profile.files,
            keep_free_bytes: limits.disk_guard.as_ref().map(|g| g.keep_free_bytes),
            memory_bytes: limits.memory_bytes,
            processes: limits.processes,
            cpu_seconds: limits.cpu_seconds,
            timeout_seconds: limits.timeout.map(|t| t.as_secs()),
            tmp_bytes: limits.tmp_bytes,
            output_bytes: limits.output_bytes,
            open_files: limits.open_files,
        }
    }
}

/// `run.result`: how the run ended, what it used, and which limit (if any) ended it.
#[derive(Serialize, Default)]
pub(super) struct ResultRecord<'a> {
    pub session: Option<&'a str>,
    pub profile: &'a str,
    pub duration_ms: u64,
    pub cpu_ms: Option<u64>,
    /// The largest single process of the run.
    pub peak_rss_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    exit_code: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    signal: Option<i32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    limit: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_dropped_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub peak_memory_bytes: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    oom_kills: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    output_failed: Option<Vec<String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    killed_by: Option<String>,
    /// Why the run could not be carried out, when it could not.
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<String>,
    /// What the network gate refused, by destination (each attempt has its own `net.*` record).
    #[serde(skip_serializing_if = "<[_]>::is_empty")]
    pub refused: &'a [super::RefusedDestination],
    #[serde(skip_serializing_if = "is_zero")]
    pub refused_unlisted: u64,
}

fn is_zero(n: &u64) -> bool {
    *n == 0
}

impl<'a> ResultRecord<'a> {
    pub(super) fn new(
        session: Option<&'a str>,
        profile: &'a Profile,
        duration: std::time::Duration,
        usage: Option<Usage>,
    ) -> ResultRecord<'a> {
        ResultRecord {
            session,
            profile: &profile.name,
            duration_ms: duration.as_millis() as u64,
            cpu_ms: usage.map(|u| u.cpu.as_millis() as u64),
            peak_rss_bytes: usage.map(|u| u.max_rss_bytes),
            ..ResultRecord::default()
        }
    }

    /// The command ran and ended so; `killed_by` is why the kill switch stopped it, if it did.
    pub(super) fn finished(mut self, finished: &Finished, killed_by: Option<String>) -> Self {
        match finished.outcome {
            Outcome::Exited(code) => {
                self.exit_code = Some(code);
                self.signal = (code > 128).then_some(code - 128);
            }
            Outcome::TimedOut => self.limit = Some("timeout"),
            Outcome::CpuLimitReached => self.limit = Some("cpu"),
            Outcome::DiskLimitReached => self.limit = Some("disk"),
        }
        self.output_dropped_bytes = Some(finished.output_dropped);
        if let Some(memory) = finished.memory {
            self.peak_memory_bytes = memory.peak_bytes;
            if memory.oom_kills > 0 {
                self.oom_kills = Some(memory.oom_kills);
                self.limit = Some("memory");
            }
        }
        if !finished.output_failures.is_empty() {
            self.output_failed = Some(
                finished
                    .output_failures
                    .iter()
                    .map(|(stream, errno)| format!("{stream}: {}", errno.desc()))
                    .collect(),
            );
        }
        if finished.output_dropped > 0 {
            self.limit = Some("output");
        }
        self.killed_by = killed_by;
        self
    }

    /// The run could not be carried out.
    pub(super) fn failed(mut self, error: String) -> Self {
        self.error = Some(error);
        self
    }
}
