//! `airlock apply` and `airlock revert`: print what happened to each path, and a summary.

use std::process::ExitCode;

use anyhow::Result;

use airlock_core::{ApplyOptions, ApplyReport, ApplyRequest, ApplyResult};

use crate::cli::{ApplyArgs, GlobalArgs, RevertArgs};
use crate::progress::Progress;
use crate::run::caller;
use crate::shown::{counted, note};

/// Exit status when some paths were left out (conflicts, hazards, refusals).
const EXIT_PARTIAL: u8 = 1;

fn label(result: ApplyResult) -> &'static str {
    match result {
        ApplyResult::Applied => "applied",
        ApplyResult::WouldApply => "would apply",
        ApplyResult::Unchanged => "unchanged",
        ApplyResult::Conflict => "CONFLICT",
        ApplyResult::Hazard => "HAZARD",
        ApplyResult::Refused => "REFUSED",
        ApplyResult::Ignored => "ignored",
        ApplyResult::TreeHeld => "HELD",
        ApplyResult::Undone => "undone",
    }
}

/// Each path, but those of a tree git ignores, which are one line each tree.
fn print_items(report: &ApplyReport) {
    for item in report.items.iter().filter(|i| i.tree.is_none()) {
        let status = item
            .status
            .map(|s| s.letter().to_string())
            .unwrap_or_else(|| " ".into());
        // Names were made in the sandbox: one must not pass for two, or drive the terminal.
        let path = crate::shown::printable(&item.path);
        match &item.reason {
            Some(reason) => crate::shown::out!(
                "{:<11} {status} {path}  ({})",
                label(item.result),
                crate::shown::printable(reason)
            ),
            None => crate::shown::out!("{:<11} {status} {path}", label(item.result)),
        }
    }
    for tree in &report.trees {
        let root = crate::shown::printable(&tree.root);
        let what = paths(tree.paths as u64);
        match &tree.reason {
            Some(reason) => crate::shown::out!(
                "{:<11}   {root}/  ({what}: {})",
                label(tree.result),
                crate::shown::printable(reason)
            ),
            None => crate::shown::out!("{:<11}   {root}/  ({what})", label(tree.result)),
        }
    }
}

/// Say what was written that the person did not see in the last diff shown.
fn note_unseen(report: &ApplyReport, dry_run: bool) {
    let Some(unseen) = &report.unseen else {
        return;
    };
    let written = count(report, ApplyResult::Applied) + count(report, ApplyResult::WouldApply);
    if written == 0 {
        return;
    }
    let verb = if dry_run { "would write" } else { "wrote" };
    if !unseen.diff_shown {
        note!(
            "airlock: no 'airlock diff {}' was shown before this apply: nobody here reviewed what it {verb} ('airlock apply --reviewed DIGEST' writes only what a diff showed)",
            report.session
        );
        return;
    }
    if unseen.paths.is_empty() {
        return;
    }
    note!(
        "airlock: this apply {verb} {} that the last 'airlock diff' shown did not hold (written or changed after it was read, or not shown by it):",
        paths(unseen.paths.len() as u64)
    );
    for path in &unseen.paths {
        note!("  {}", crate::shown::printable(path));
    }
}

fn count(report: &ApplyReport, result: ApplyResult) -> u64 {
    report.items.iter().filter(|i| i.result == result).count() as u64
}

fn paths(n: u64) -> String {
    counted(n, "path", "paths")
}

fn exit(report: &ApplyReport) -> ExitCode {
    if report.skipped() > 0 {
        ExitCode::from(EXIT_PARTIAL)
    } else {
        ExitCode::SUCCESS
    }
}

pub fn apply(global: &GlobalArgs, args: ApplyArgs) -> Result<ExitCode> {
    let request = ApplyRequest {
        session: args.session.clone(),
        options: ApplyOptions {
            paths: args.paths,
            force: args.force,
            allowed_hazards: args.allow_hazard,
            all_hazards: args.allow_hazards,
            no_ignored: args.no_ignored,
            dry_run: args.dry_run,
            rollback: args.rollback,
            reviewed: args.reviewed.clone(),
        },
    };
    let progress = Progress::start(format!("applying session {}", args.session), args.json);
    let report = airlock_core::apply(&caller(global), &request)?;
    drop(progress);
    if args.json {
        crate::shown::out!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(exit(&report));
    }
    print_items(&report);
    let skipped = report.skipped();
    if report.recovered {
        let what = if args.rollback {
            "rolled back"
        } else {
            "finished"
        };
        note!(
            "airlock: apply {} of session {} had been interrupted; {what} it ({})",
            report.number.unwrap_or(0),
            report.session,
            paths(report.items.len() as u64)
        );
    } else if args.dry_run {
        note!(
            "airlock: dry run: {} would be applied, {skipped} left out; nothing was written",
            paths(count(&report, ApplyResult::WouldApply))
        );
    } else if report.items.is_empty() {
        note!("airlock: session {} changed nothing", report.session);
    } else {
        note!(
            "airlock: applied {} of session {} to {}{}",
            paths(count(&report, ApplyResult::Applied)),
            report.session,
            report.workspace.display(),
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
    if let (Some(digest), Some(_)) = (&report.digest, &args.reviewed) {
        note!("airlock: the change set is the one reviewed ({digest})");
    }
    note_unseen(&report, args.dry_run);
    Ok(exit(&report))
}

pub fn revert(global: &GlobalArgs, args: RevertArgs) -> Result<ExitCode> {
    let progress = Progress::start(format!("reverting session {}", args.session), args.json);
    let report = airlock_core::revert(&caller(global), &args.session)?;
    drop(progress);
    if args.json {
        crate::shown::out!("{}", serde_json::to_string_pretty(&report)?);
        return Ok(exit(&report));
    }
    print_items(&report);
    let skipped = report.skipped();
    note!(
        "airlock: reverted apply {} of session {}: {} restored{}",
        report.number.unwrap_or(0),
        report.session,
        paths(count(&report, ApplyResult::Undone)),
        if skipped > 0 {
            format!("; {skipped} changed on the host since, left alone (see above)")
        } else {
            String::new()
        }
    );
    Ok(exit(&report))
}
