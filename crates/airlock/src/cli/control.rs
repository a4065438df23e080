//! The arguments of the audit log, the kill switch, approvals and clean-up: `log`, `kill`,
//! `pause`, `resume`, `disable`, `enable`, `status`, `approvals`, `approve`, `deny`, `gc`.

use clap::{Args, Subcommand};

#[derive(Debug, Args)]
pub struct LogArgs {
    #[command(subcommand)]
    pub command: Option<LogCommand>,
    /// Only records of this session (id)
    #[arg(long, value_name = "ID")]
    pub session: Option<String>,
    /// Only records of runs and sessions with this profile
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Only records since this long ago (10m, 2h, 7d) or this time (2026-11-29T20:00:00Z)
    #[arg(long, value_name = "WHEN")]
    pub since: Option<String>,
    /// Only these actions, or families of them: run, run.result, session, apply… (repeatable)
    #[arg(long, value_name = "ACTION")]
    pub action: Vec<String>,
    /// Only refusals and denials
    #[arg(long)]
    pub denied: bool,
    /// Only records of requests made with this API token (its id, as 'airlock token list' shows)
    #[arg(long, value_name = "ID")]
    pub token: Option<String>,
    /// Keep printing records as they are written
    #[arg(long, short = 'f')]
    pub follow: bool,
    /// Print records as stored: one JSON object per line
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Subcommand)]
pub enum LogCommand {
    /// Walk the hash chain; name the first record altered, removed or reordered
    #[command(
        long_about = "Walk the hash chain of this state directory's audit log and name the first \
            record altered, removed, reordered or cut off the end; or, when intact, print the \
            last record's hash (keep it elsewhere as an anchor).\n\n\
            --from FILE verifies an exported copy instead: the JSON lines 'airlock log export' or \
            'airlock serve' wrote on stdout (as a cluster's log collector kept them, other lines \
            between them skipped), or the records' bodies as an OTLP collector kept them, one a \
            line. Records sent twice (export is at-least-once) are counted, not refused; a \
            record missing, altered or out of order breaks the chain.",
        after_help = "Exit status: 0 intact; 2 broken (or --from FILE holds no record); 125 the \
            log or FILE cannot be read."
    )]
    Verify {
        /// Print the verdict as JSON
        #[arg(long)]
        json: bool,
        /// Verify an exported stream of records (JSON lines) instead of this machine's log;
        /// - for stdin
        #[arg(long, value_name = "FILE")]
        from: Option<std::path::PathBuf>,
    },
    /// Send the log's records to the destinations of [audit] export in airlock's config
    #[command(
        long_about = "Send the audit log's records to the destinations that [audit] export names \
            in airlock's config (stdout: each record as the JSON line it is stored as; otlp: \
            OpenTelemetry logs over OTLP/HTTP to a collector), each from where the last export \
            to it stopped (its cursor in STATE/export/), in order, at least once. 'airlock \
            serve' exports by itself while it runs; this is for machines without a server, or \
            to catch up by hand.\n\n\
            Without --follow: sends what the log holds now and exits; a destination that fails \
            stops at its first failure and the next export continues from there. With --follow: \
            keeps sending new records as they are written, retrying a destination that is down, \
            until killed (the cursor keeps the place).",
        after_help = "The config is --config FILE (AIRLOCK_CONFIG), else /etc/airlock/config.toml \
            as root and $XDG_CONFIG_HOME/airlock/config.toml (~/.config/airlock/config.toml) \
            otherwise:\n  [audit]\n  export = [\"otlp\"]\n  [audit.otlp]\n  endpoint = \
            \"http://127.0.0.1:4318/v1/logs\"\n\n\
            Exit status: 0 every destination has every record; 1 a destination failed (said on \
            stderr); 125 the config is wrong or names no destination, or a cursor is held by \
            another airlock process (a server exporting)."
    )]
    Export {
        /// Keep sending records as they are written, until killed
        #[arg(long, short = 'f')]
        follow: bool,
        /// airlock's config file [default: /etc/airlock/config.toml as root, else
        /// $XDG_CONFIG_HOME/airlock/config.toml]
        #[arg(long, value_name = "FILE", env = "AIRLOCK_CONFIG")]
        config: Option<std::path::PathBuf>,
    },
    /// Remove the sealed segments past [audit] keep_days / keep_size, recording it in the log
    #[command(
        long_about = "Remove the oldest sealed segments of the audit log (STATE/audit/) that \
            are past the retention airlock's config sets under [audit]: keep_days (every record \
            of the segment older than that) and keep_size (the whole log larger than that). \
            The removal is written to the log first, as a log.retention record naming each \
            segment, its records and its last hash, so that 'airlock log verify' tells it from \
            tampering. The open segment is never removed, nor a segment holding a record an \
            export destination has not sent yet (said on stderr). 'airlock serve' does this by \
            itself at start and every hour; this is for machines without a server (a timer).",
        after_help = "The config is --config FILE (AIRLOCK_CONFIG), else /etc/airlock/config.toml \
            as root and $XDG_CONFIG_HOME/airlock/config.toml otherwise:\n  [audit]\n  \
            keep_days = 365\n  keep_size = \"20GiB\"\n\n\
            Exit status: 0 done (or nothing past the retention); 125 the config is wrong or \
            sets no retention, or the log cannot be written."
    )]
    Prune {
        /// airlock's config file [default: /etc/airlock/config.toml as root, else
        /// $XDG_CONFIG_HOME/airlock/config.toml]
        #[arg(long, value_name = "FILE", env = "AIRLOCK_CONFIG")]
        config: Option<std::path::PathBuf>,
    },
}

#[derive(Debug, Args)]
#[command(group(clap::ArgGroup::new("target").required(true).args(["session", "profile", "pid", "all"])))]
pub struct ControlArgs {
    /// Session id or name
    #[arg(value_name = "SESSION")]
    pub session: Option<String>,
    /// Every running sandbox of this profile
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// The sandbox with this pid, as 'airlock status' shows it (or its airlock process's pid):
    /// a throwaway run has no session to name
    #[arg(long, value_name = "PID")]
    pub pid: Option<u32>,
    /// Every running sandbox
    #[arg(long)]
    pub all: bool,
    /// Why (recorded in the audit log)
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// kill only: cut the network (close its connections, refuse new ones and DNS) and let the
    /// processes go on
    #[arg(long)]
    pub network: bool,
    /// Print what was done as JSON: {"action", "sandboxes": [{supervisor, pid, session,
    /// profile, error}], "failed"}
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DisableArgs {
    /// Only this profile [default: everything]
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Why: shown to everyone who is refused, and logged
    #[arg(long, value_name = "TEXT", required = true)]
    pub reason: String,
    /// Print the sandboxes killed as JSON (as 'airlock kill --json')
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct EnableArgs {
    /// Only this profile's switch [default: the one for everything]
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// Print the result as JSON: {"profile", "was_on", "still_disabled"}
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct StatusArgs {
    /// Print JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ApprovalsArgs {
    /// Print JSON: {"approvals": [{id, status, session, profile, run, host, port, program,
    /// entry, asked_at, expires_at, timeout_seconds, seconds_left, profile_line, answer}]}
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct ApproveArgs {
    /// The approval's id, as 'airlock approvals' lists it (ap_…)
    #[arg(value_name = "ID")]
    pub id: String,
    /// Allow it for every later run of the session too, not only the run that asked
    #[arg(long)]
    pub session: bool,
    /// Why: kept in the audit log with your decision
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Print the answered approval as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct DenyArgs {
    /// The approval's id, as 'airlock approvals' lists it (ap_…)
    #[arg(value_name = "ID")]
    pub id: String,
    /// Why: kept in the audit log, and shown in the run's refusal summary
    #[arg(long, value_name = "TEXT")]
    pub reason: Option<String>,
    /// Print the answered approval as JSON
    #[arg(long)]
    pub json: bool,
}

#[derive(Debug, Args)]
pub struct GcArgs {
    /// Only sessions discarded or applied at least this long ago (e.g. 30m, 12h, 7d)
    #[arg(long, value_name = "AGE")]
    pub older_than: Option<String>,
    /// List what would be removed; remove nothing
    #[arg(short = 'n', long)]
    pub dry_run: bool,
    /// Print the sessions removed (or that would be) as JSON: {"dry_run", "sessions": [{id,
    /// status, workspace}]}
    #[arg(long)]
    pub json: bool,
}
