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
    Verify {
        /// Print the verdict as JSON
        #[arg(long)]
        json: bool,
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
