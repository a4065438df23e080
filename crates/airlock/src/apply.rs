//! `airlock apply` and `airlock revert`: print what happened to each path, and a summary.

use airlock_jail::note;
use std::process::ExitCode;

use anyhow::Result;

use airlock_core::{relative_paths, ApplyItem, ApplyOptions, ApplyReport, ApplyResult, Session};

use crate::cli::{ApplyArgs, GlobalArgs, RevertArgs};
use crate::run::state_dir;

/// Exit status when some paths were left out (conflicts, hazards, refusals).
const EXIT_PARTIAL: u8 = 1;

fn tell_busy(session: &Session) {
    note!(
        "airlock: session {} is busy with a run; waiting for it to end…",
        session.id
    );
}

fn label(result: ApplyResult) -> &'static str {
    match result {
        ApplyResult::Applied => "applied",
        ApplyResult::WouldApply => "would apply",
        ApplyResult::Unchanged => "unchanged",
        ApplyResult::Conflict => "CONFLICT",
        ApplyResult::Hazard => "HAZARD",
        ApplyResult::Refused => "REFUSED",
        ApplyResult::Undone => "undone",
    }
}

fn print_items(items: &[ApplyItem]) {
    for item in items {
        let status = item
            .status
            .map(|s| s.letter().to_string())
            .unwrap_or_else(|| " ".into());
        // Names were made in the sandbox: one must not pass for two, or drive the terminal.
        let path = crate::shown::printable(&item.path);
        match &item.reason {
            Some(reason) => println!(
                "{:<11} {status} {path}  ({})",
                label(item.result),
                crate::shown::printable(reason)
            ),
            None => println!("{:<11} {status} {path}", label(item.result)),
        }
    }
}

fn count(report: &ApplyReport, result: ApplyResult) -> usize {
    report.items.iter().filter(|i| i.result == result).count()
}

fn exit(report: &ApplyReport) -> ExitCode {
    if report.skipped() > 0 {
        ExitCode::from(EXIT_PARTIAL)
    } else {
        ExitCode::SUCCESS
    }
}

pub fn apply(global: &GlobalArgs, args: ApplyArgs) -> Result<ExitCode> {
    let state = state_dir(global)?;
    let session = Session::find(&state, &args.session)?;
    let workspace = session.existing_workspace()?.to_path_buf();
    let cwd = std::env::current_dir().ok();
    let options = ApplyOptions {
        paths: relative_paths(&args.paths, &workspace, cwd.as_deref())?,
        force: args.force,
        allowed_hazards: relative_paths(&args.allow_hazard, &workspace, cwd.as_deref())?,
        all_hazards: args.allow_hazards,
        dry_run: args.dry_run,
        rollback: args.rollback,
    };
    let report = airlock_core::apply(&state, &session.id, &options, &tell_busy)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(exit(&report));
    }
    print_items(&report.items);
    let skipped = report.skipped();
    if report.recovered {
        let what = if args.rollback {
            "rolled back"
        } else {
            "finished"
        };
        note!(
            "airlock: apply {} of session {} had been interrupted; {what} it ({} paths)",
            report.number.unwrap_or(0),
            report.session,
            report.items.len()
        );
    } else if args.dry_run {
        note!(
            "airlock: dry run: {} paths would be applied, {skipped} left out; nothing was written",
            count(&report, ApplyResult::WouldApply)
        );
    } else if report.items.is_empty() && !args.paths.is_empty() {
        // A path that matches nothing is most likely a typo: not "nothing to do".
        anyhow::bail!(
            "session {} changed nothing at or under {} — 'airlock diff {} --name-status' lists what it changed",
            report.session,
            args.paths
                .iter()
                .map(|p| crate::shown::printable(&p.display().to_string()))
                .collect::<Vec<_>>()
                .join(", "),
            args.session
        );
    } else if report.items.is_empty() {
        note!("airlock: session {} changed nothing", report.session);
    } else {
        note!(
            "airlock: applied {} paths of session {} to {}{}",
            count(&report, ApplyResult::Applied),
            report.session,
            workspace.display(),
            if skipped > 0 {
                format!("; {skipped} left out (see above)")
            } else {
                String::new()
            }
        );
        if report.number.is_some() && count(&report, ApplyResult::Applied) > 0 {
            note!(
                "airlock: 'airlock revert {}' takes it back out",
                args.session
            );
        }
    }
    Ok(exit(&report))
}

pub fn revert(global: &GlobalArgs, args: RevertArgs) -> Result<ExitCode> {
    let state = state_dir(global)?;
    let report = airlock_core::revert(&state, &args.session, &tell_busy)?;
    if args.json {
        println!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(exit(&report));
    }
    print_items(&report.items);
    let skipped = report.skipped();
    note!(
        "airlock: reverted apply {} of session {}: {} paths restored{}",
        report.number.unwrap_or(0),
        report.session,
        count(&report, ApplyResult::Undone),
        if skipped > 0 {
            format!("; {skipped} changed on the host since, left alone (see above)")
        } else {
            String::new()
        }
    );
    Ok(exit(&report))
}
