//! `airlock session new`, `airlock sessions`, `airlock discard`, `airlock gc`.

use airlock_jail::note;
use std::process::ExitCode;
use std::time::{Duration, UNIX_EPOCH};

use anyhow::{Context, Result};
use serde::Serialize;

use airlock_core::{NewSession, Session, SessionMeta, SessionStatus};

use crate::cli::{DiscardArgs, GcArgs, GlobalArgs, SessionNewArgs, SessionsArgs};
use crate::run::{describe_profile, load_profile, profile_ref, resolve_workspace, state_dir};

pub fn new(global: &GlobalArgs, args: SessionNewArgs) -> Result<ExitCode> {
    let state = state_dir(global)?;
    let workspace = resolve_workspace(args.choice.workspace.as_deref())?;
    let chosen = profile_ref(&args.choice)?;
    // Loaded now so that a misspelt or broken profile fails here, not at the first run.
    load_profile(&chosen, &workspace)?;
    let home = std::env::var_os("HOME").map(std::path::PathBuf::from);
    airlock_core::check_workspace_for(&workspace, &state, home.as_deref())?;
    let session = airlock_core::create_session(
        &state,
        NewSession {
            workspace: &workspace,
            name: args.name.as_deref(),
            profile: chosen,
        },
    )?;
    if args.json {
        println!(
            "{}",
            serde_json::to_string_pretty(&Listed::of(&session, &[]))?
        );
    } else {
        println!("{}", session.id);
    }
    Ok(ExitCode::SUCCESS)
}

/// One session as `sessions --json` shows it.
#[derive(Serialize)]
struct Listed<'a> {
    #[serde(flatten)]
    meta: &'a SessionMeta,
    status: SessionStatus,
    /// Files, symlinks and special files the session changed (directories not counted); None
    /// when the layer is gone or cannot be read.
    changed_files: Option<usize>,
    created_at: String,
    last_run_at: Option<String>,
}

impl<'a> Listed<'a> {
    fn of(session: &'a Session, running: &[airlock_core::control::Running]) -> Listed<'a> {
        let mut status = session.status();
        let paused = running
            .iter()
            .any(|r| r.session.as_deref() == Some(session.id.as_str()) && r.sandbox.is_paused());
        if status == SessionStatus::Running && paused {
            status = SessionStatus::Paused;
        }
        let changed_files = match status {
            SessionStatus::Idle => session
                .existing_workspace()
                .ok()
                .and_then(|ws| airlock_changes::scan(&session.upper(), ws).ok())
                .map(|set| set.file_count()),
            _ => None,
        };
        Listed {
            meta: &session.meta,
            status,
            changed_files,
            created_at: timestamp(session.meta.created),
            last_run_at: session.meta.last_run.map(timestamp),
        }
    }
}

fn timestamp(seconds: u64) -> String {
    humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(seconds)).to_string()
}

/// `2026-11-29 20:15`: UTC, to the minute, for the table.
fn short_time(seconds: u64) -> String {
    let full = timestamp(seconds);
    full.get(..16).unwrap_or(&full).replace('T', " ")
}

pub fn list(global: &GlobalArgs, args: SessionsArgs) -> Result<ExitCode> {
    let state = state_dir(global)?;
    let sessions = Session::list(&state)?;
    let running = airlock_core::control::running(&state);
    let listed: Vec<Listed> = sessions.iter().map(|s| Listed::of(s, &running)).collect();
    if args.json {
        println!("{}", serde_json::to_string_pretty(&listed)?);
        return Ok(ExitCode::SUCCESS);
    }
    if listed.is_empty() {
        note!(
            "no sessions in {} — 'airlock session new' starts one",
            state.display()
        );
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
                l.meta.runs.to_string(),
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
    let mut widths = header.map(str::len);
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let print_row = |cells: &[String]| {
        let mut line = String::new();
        for (i, cell) in cells.iter().enumerate() {
            if i + 1 == cells.len() {
                line.push_str(cell);
            } else {
                line.push_str(&format!("{cell:<width$}  ", width = widths[i]));
            }
        }
        println!("{}", line.trim_end());
    };
    print_row(&header.map(String::from));
    for row in &rows {
        print_row(row);
    }
    Ok(ExitCode::SUCCESS)
}

pub fn discard(global: &GlobalArgs, args: DiscardArgs) -> Result<ExitCode> {
    let state = state_dir(global)?;
    let session = airlock_core::discard_session(&state, &args.session, &|s: &Session| {
        note!(
            "airlock: session {} is busy with a run; waiting for it to end…",
            s.id
        )
    })?;
    if args.json {
        println!(
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
    let state = state_dir(global)?;
    let min_age = match &args.older_than {
        Some(text) => humantime::parse_duration(text)
            .with_context(|| format!("--older-than {text:?}: not a duration (try 30m, 12h, 7d)"))?,
        None => Duration::ZERO,
    };
    let now = std::time::SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let mut chosen = Vec::new();
    for session in Session::list(&state)? {
        let ended = session.meta.ended.unwrap_or(session.meta.created);
        let old_enough = now.saturating_sub(ended) >= min_age.as_secs();
        let status = session.status();
        if matches!(status, SessionStatus::Discarded | SessionStatus::Applied) && old_enough {
            chosen.push((session, status));
        }
    }
    let verb = if args.dry_run {
        "would remove"
    } else {
        "removed"
    };
    if !args.dry_run && !chosen.is_empty() {
        // Logged before it acts, as every action is: an applied session removed here can no
        // longer be reverted.
        airlock_core::audit::append(
            &airlock_core::audit::log(&state),
            "gc.intent",
            serde_json::json!({
                "sessions": chosen.iter().map(|(s, _)| s.id.clone()).collect::<Vec<_>>(),
                "older_than": args.older_than,
            }),
        )?;
    }
    let state_of = |status: &SessionStatus| {
        if status == &SessionStatus::Applied {
            "applied"
        } else {
            "discarded"
        }
    };
    if args.json {
        let sessions: Vec<serde_json::Value> = chosen
            .iter()
            .map(|(session, status)| {
                serde_json::json!({
                    "id": session.id,
                    "status": state_of(status),
                    "workspace": session.workspace(),
                })
            })
            .collect();
        println!(
            "{}",
            serde_json::json!({ "dry_run": args.dry_run, "sessions": sessions })
        );
    } else {
        for (session, status) in chosen.iter() {
            println!(
                "{verb} {} ({}, workspace {})",
                session.id,
                state_of(status),
                crate::shown::printable(&session.workspace().display().to_string())
            );
        }
    }
    let count = chosen.len();
    if !args.dry_run {
        for (session, _) in chosen {
            let id = session.id.clone();
            session
                .remove()
                .with_context(|| format!("cannot remove session {id}"))?;
        }
    }
    note!("airlock: {verb} {count} discarded or applied session(s)");
    Ok(ExitCode::SUCCESS)
}
