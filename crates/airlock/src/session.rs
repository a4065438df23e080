//! `airlock session new`, `airlock sessions`, `airlock discard`, `airlock gc`.

use std::process::ExitCode;

use anyhow::Result;

use airlock_core::{describe_profile, GcRequest, SessionRequest, SessionSummary};

use crate::cli::{DiscardArgs, GcArgs, GlobalArgs, SessionNewArgs, SessionsArgs};
use crate::run::{caller, profile_choice};
use crate::shown::note;

pub fn new(global: &GlobalArgs, args: SessionNewArgs) -> Result<ExitCode> {
    let request = SessionRequest {
        profile: profile_choice(&args.choice),
        workspace: args.choice.workspace,
        name: args.name,
    };
    let session = airlock_core::create_session(&caller(global), request)?;
    if args.json {
        crate::shown::out!("{}", serde_json::to_string_pretty(&session)?);
    } else {
        crate::shown::out!("{}", session.meta.id);
    }
    Ok(ExitCode::SUCCESS)
}

/// `2026-11-29 20:15`: UTC, to the minute, for the table.
fn short_time(seconds: u64) -> String {
    let full = airlock_core::timestamp(seconds);
    full.get(..16).unwrap_or(&full).replace('T', " ")
}

pub fn list(global: &GlobalArgs, args: SessionsArgs) -> Result<ExitCode> {
    let caller = caller(global);
    let listed = airlock_core::list_sessions(&caller)?;
    let empty = format!(
        "no sessions in {} — 'airlock session new' starts one",
        caller.state_dir()?.display()
    );
    show_list(&listed, args.json, &empty)
}

/// The sessions as `airlock sessions` shows them, here or from a server: a table, or with `json`
/// the array; `empty` is said when there is none.
pub fn show_list(listed: &[SessionSummary], json: bool, empty: &str) -> Result<ExitCode> {
    if json {
        crate::shown::out!("{}", serde_json::to_string_pretty(&listed)?);
        return Ok(ExitCode::SUCCESS);
    }
    if listed.is_empty() {
        note!("{empty}");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<[String; 9]> = listed
        .iter()
        .map(|l| {
            [
                l.meta.id.clone(),
                l.meta.name.clone().unwrap_or_else(|| "-".into()),
                describe_profile(&l.meta.profile),
                l.status.as_str().to_string(),
                match l.interrupted_runs {
                    0 => l.meta.runs.to_string(),
                    n => format!("{} (+{n} interrupted)", l.meta.runs),
                },
                l.changed_files
                    .map_or_else(|| "-".into(), |n| n.to_string()),
                short_time(l.meta.created),
                l.meta.last_run.map_or_else(|| "-".into(), short_time),
                l.meta.workspace.display().to_string(),
            ]
        })
        .collect();
    let header = [
        "ID",
        "NAME",
        "PROFILE",
        "STATUS",
        "RUNS",
        "CHANGED",
        "CREATED (UTC)",
        "LAST RUN (UTC)",
        "WORKSPACE",
    ];
    crate::shown::out!(text: crate::shown::table(header, &rows));
    Ok(ExitCode::SUCCESS)
}

pub fn discard(global: &GlobalArgs, args: DiscardArgs) -> Result<ExitCode> {
    let session = airlock_core::discard_session(&caller(global), &args.session)?;
    if args.json {
        crate::shown::out!(
            "{}",
            serde_json::json!({ "session": session.id, "discarded": true })
        );
    }
    note!(
        "airlock: session {} discarded; its changes are gone (the host workspace was not touched)",
        session.id
    );
    Ok(ExitCode::SUCCESS)
}

pub fn gc(global: &GlobalArgs, args: GcArgs) -> Result<ExitCode> {
    let request = GcRequest {
        older_than: args.older_than,
        dry_run: args.dry_run,
    };
    let report = airlock_core::gc(&caller(global), request)?;
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    if args.json {
        crate::shown::out!("{}", serde_json::to_string(&report)?);
    } else {
        for session in &report.sessions {
            let workspace = session.workspace.as_ref().map_or_else(
                || "unknown".to_string(),
                |path| crate::shown::printable(&path.display().to_string()),
            );
            crate::shown::out!(
                "{verb} {} ({}, workspace {workspace})",
                session.id,
                session.status
            );
        }
    }
    note!(
        "airlock: {verb} {}",
        crate::shown::counted(
            report.sessions.len() as u64,
            "discarded, applied or unfinished session",
            "discarded, applied or unfinished sessions"
        )
    );
    Ok(ExitCode::SUCCESS)
}
