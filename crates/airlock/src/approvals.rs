//! `airlock approvals`, `approve`, `deny`: the connections waiting for a person, and their
//! answers. Core decides who may answer and records it; this prints.

use std::process::ExitCode;

use anyhow::Result;

use airlock_core::{Approval, ApprovalDecision, ApprovalStatus, DecideRequest};

use crate::cli::{ApprovalsArgs, ApproveArgs, DenyArgs, GlobalArgs};
use crate::run::caller;
use crate::shown::{note, printable};

/// Exit status of `approve`/`deny` for an approval that can no longer be answered.
pub const EXIT_CLOSED: u8 = 2;

pub fn list(global: &GlobalArgs, args: ApprovalsArgs) -> Result<ExitCode> {
    let approvals = airlock_core::list_approvals(&caller(global))?;
    show_list(&approvals, args.json)
}

/// Print the waiting approvals: a table, or `--json`.
pub fn show_list(approvals: &[Approval], json: bool) -> Result<ExitCode> {
    if json {
        let listed = airlock_core::ApprovalList {
            approvals: approvals.to_vec(),
        };
        crate::shown::out!("{}", serde_json::to_string(&listed)?);
        return Ok(ExitCode::SUCCESS);
    }
    if approvals.is_empty() {
        note!("airlock: no connection waits for a person");
        return Ok(ExitCode::SUCCESS);
    }
    let rows: Vec<[String; 6]> = approvals
        .iter()
        .map(|a| {
            [
                a.id.clone(),
                printable(&a.destination()),
                printable(a.program.as_deref().unwrap_or("-")),
                printable(a.session.as_deref().unwrap_or("-")),
                printable(&a.profile),
                format!("{} s", a.seconds_left),
            ]
        })
        .collect();
    crate::shown::out!(text: crate::shown::table(
        ["ID", "DESTINATION", "PROGRAM", "SESSION", "PROFILE", "LEFT"],
        &rows
    ));
    note!("airlock: answer with 'airlock approve ID' (--session: for its session too) or 'airlock deny ID'; silence refuses");
    Ok(ExitCode::SUCCESS)
}

pub fn approve(global: &GlobalArgs, args: ApproveArgs) -> Result<ExitCode> {
    let decision = if args.session {
        ApprovalDecision::AllowSession
    } else {
        ApprovalDecision::AllowOnce
    };
    decide(global, &args.id, decision, args.reason, args.json)
}

pub fn deny(global: &GlobalArgs, args: DenyArgs) -> Result<ExitCode> {
    decide(
        global,
        &args.id,
        ApprovalDecision::Deny,
        args.reason,
        args.json,
    )
}

fn decide(
    global: &GlobalArgs,
    id: &str,
    decision: ApprovalDecision,
    reason: Option<String>,
    json: bool,
) -> Result<ExitCode> {
    let request = DecideRequest { decision, reason };
    match airlock_core::decide_approval(&caller(global), id, &request) {
        Ok(approval) => show_decided(&approval, json),
        Err(err @ airlock_core::Error::ApprovalClosed { .. }) => closed(&err.into(), json),
        Err(err) => Err(err.into()),
    }
}

/// An approval that can no longer be answered: said, exit 2.
pub fn closed(refusal: &airlock_core::Refusal, json: bool) -> Result<ExitCode> {
    note!("airlock: {}", refusal.message);
    if json {
        let failure = serde_json::json!({ "error": refusal.message, "code": refusal.code, "exit_status": EXIT_CLOSED });
        crate::shown::out!("{failure}");
    }
    Ok(ExitCode::from(EXIT_CLOSED))
}

/// What was answered, and the profile line that would make it permanent.
pub fn show_decided(approval: &Approval, json: bool) -> Result<ExitCode> {
    if json {
        crate::shown::out!("{}", serde_json::to_string(approval)?);
        return Ok(ExitCode::SUCCESS);
    }
    let destination = printable(&approval.destination());
    let said = match approval.status {
        ApprovalStatus::AllowedOnce => format!("allowed {destination} for run {}", approval.run),
        ApprovalStatus::AllowedSession => format!(
            "allowed {destination} for session {}",
            printable(approval.session.as_deref().unwrap_or("-"))
        ),
        _ => format!("denied {destination} for run {}", approval.run),
    };
    crate::shown::out!("{said} (approval {})", approval.id);
    if approval.status != ApprovalStatus::Denied {
        note!(
            "airlock: to allow it for good, add to profile {}'s [network]: {}",
            printable(&approval.profile),
            printable(&approval.profile_line)
        );
    }
    Ok(ExitCode::SUCCESS)
}
