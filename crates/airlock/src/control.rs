//! `airlock kill`, `pause`, `resume`, `disable`, `enable`, `status`.

use std::process::ExitCode;

use anyhow::Result;

use airlock_core::control::Action;
use airlock_core::kill_switch::{self, ControlReport, ControlRequest, TargetChoice};

use crate::cli::{ControlArgs, DisableArgs, EnableArgs, GlobalArgs, StatusArgs};
use crate::run::caller;
use crate::shown::note;

/// Exit status when some targets could not be acted on.
const EXIT_PARTIAL: u8 = 1;

/// What was done to each sandbox: `verb` for people; --json gives the report as it is.
fn report(verb: &str, report: &ControlReport, json: bool) -> Result<ExitCode> {
    let code = if report.failed > 0 {
        ExitCode::from(EXIT_PARTIAL)
    } else {
        ExitCode::SUCCESS
    };
    if json {
        crate::shown::out!("{}", serde_json::to_string(report)?);
        return Ok(code);
    }
    for act in &report.sandboxes {
        let session = act.session.as_deref().unwrap_or("-");
        match &act.error {
            None => crate::shown::out!(
                "{verb:<8} sandbox {} (session {session}, profile {})",
                act.pid,
                act.profile
            ),
            Some(error) => {
                crate::shown::out!("FAILED   sandbox {} (session {session}): {error}", act.pid);
            }
        }
    }
    if report.sandboxes.is_empty() {
        note!("airlock: no sandbox is running");
    }
    Ok(code)
}

pub fn act(global: &GlobalArgs, args: ControlArgs, action: Action) -> Result<ExitCode> {
    let request = ControlRequest {
        action,
        target: TargetChoice {
            all: args.all,
            profile: args.profile,
            pid: args.pid,
            session: args.session,
        },
        network_only: args.network,
        reason: args.reason,
    };
    let done = kill_switch::act(&caller(global), &request)?;
    let verb = match done.action {
        Action::Kill => "killed",
        Action::Pause => "paused",
        Action::Resume => "resumed",
        Action::CutNetwork => "cut",
    };
    report(verb, &done, args.json)
}

pub fn disable(global: &GlobalArgs, args: DisableArgs) -> Result<ExitCode> {
    let done = kill_switch::disable(&caller(global), args.profile.as_deref(), &args.reason)?;
    match &args.profile {
        Some(name) => note!("airlock: disabled for profile {name}: every run of it is refused until 'airlock enable --profile {name}'"),
        None => note!("airlock: disabled: every run is refused until 'airlock enable'"),
    }
    report("killed", &done, args.json)
}

pub fn enable(global: &GlobalArgs, args: EnableArgs) -> Result<ExitCode> {
    let done = kill_switch::enable(&caller(global), args.profile.as_deref())?;
    if !done.was_on {
        match args.profile.as_deref() {
            Some(name) => {
                note!("airlock: profile {name} was not disabled (its own switch was off)")
            }
            None => note!("airlock: the switch for everything was not on"),
        }
    }
    if let Some(still) = &done.still_disabled {
        note!("airlock: enabled; but another switch is still on: {still}");
    }
    if args.json {
        crate::shown::out!("{}", serde_json::to_string(&done)?);
    }
    Ok(ExitCode::SUCCESS)
}

pub fn status(global: &GlobalArgs, args: StatusArgs) -> Result<ExitCode> {
    let status = kill_switch::status(&caller(global))?;
    let code = if status.is_complete() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(crate::EXIT_AIRLOCK_ERROR)
    };
    if args.json {
        crate::shown::out!("{}", serde_json::to_string_pretty(&status)?);
        return Ok(code);
    }
    match (&status.switches, &status.switches_error) {
        (_, Some(e)) => crate::shown::out!("DISABLED: {e}"),
        (Some(s), None) if s.all.is_none() && s.profiles.is_empty() => {
            crate::shown::out!("enabled")
        }
        (Some(s), None) => {
            if let Some(all) = &s.all {
                crate::shown::out!("DISABLED for everything by uid {}: {}", all.by, all.reason);
            }
            for (profile, switch) in &s.profiles {
                crate::shown::out!(
                    "DISABLED for profile {profile} by uid {}: {}",
                    switch.by,
                    switch.reason
                );
            }
        }
        (None, None) => {}
    }
    if let Some(error) = &status.running_error {
        crate::shown::out!("UNKNOWN which sandboxes run: {error}");
    } else if status.running.is_empty() {
        crate::shown::out!("no sandbox running");
    }
    for listed in &status.running {
        let run = &listed.run;
        crate::shown::out!(
            "{:<8} pid {:<7} session {:<12} profile {:<10} {}",
            if listed.paused { "paused" } else { "running" },
            run.sandbox.pid,
            crate::shown::printable(run.session.as_deref().unwrap_or("-")),
            crate::shown::printable(&run.profile),
            crate::shown::command_line(&run.argv)
        );
    }
    Ok(code)
}
