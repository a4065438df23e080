//! `airlock kill`, `pause`, `resume`, `disable`, `enable`, `status`.

use airlock_jail::note;
use std::process::ExitCode;

use anyhow::Result;

use airlock_core::control::{self, Acted, Action, Target};
use airlock_core::Session;

use crate::cli::{ControlArgs, DisableArgs, EnableArgs, GlobalArgs, StatusArgs};
use crate::run::state_dir;

/// Exit status when some targets could not be acted on.
const EXIT_PARTIAL: u8 = 1;

fn target(state: &std::path::Path, args: &ControlArgs) -> Result<Target> {
    Ok(if args.all {
        Target::All
    } else if let Some(profile) = &args.profile {
        Target::Profile(profile.clone())
    } else if let Some(pid) = args.pid {
        Target::Pid(pid)
    } else {
        let name = args.session.as_deref().unwrap_or_default();
        // A name is resolved to its id; an id of a session whose record is gone still matches
        // while a sandbox of it runs. Anything else is a mistake (a typo), not "nothing to do".
        match Session::find(state, name) {
            Ok(session) => Target::Session(session.id),
            Err(_)
                if control::running(state)
                    .iter()
                    .any(|run| run.session.as_deref() == Some(name)) =>
            {
                Target::Session(name.to_string())
            }
            Err(err) => anyhow::bail!("{err}"),
        }
    })
}

/// What was done to each sandbox: `verb` for people, `action` (its audit name) for --json.
fn report(verb: &str, action: &str, acted: &[Acted], json: bool) -> ExitCode {
    let failed = acted.iter().filter(|act| act.error.is_some()).count();
    let code = if failed > 0 {
        ExitCode::from(EXIT_PARTIAL)
    } else {
        ExitCode::SUCCESS
    };
    if json {
        println!(
            "{}",
            serde_json::json!({ "action": action, "sandboxes": acted, "failed": failed })
        );
        return code;
    }
    for act in acted {
        let session = act.session.as_deref().unwrap_or("-");
        match &act.error {
            None => println!(
                "{verb:<8} sandbox {} (session {session}, profile {})",
                act.pid, act.profile
            ),
            Some(error) => {
                println!("FAILED   sandbox {} (session {session}): {error}", act.pid);
            }
        }
    }
    if acted.is_empty() {
        note!("airlock: no sandbox is running");
    }
    code
}

pub fn act(global: &GlobalArgs, args: ControlArgs, action: Action) -> Result<ExitCode> {
    let state = state_dir(global)?;
    let target = target(&state, &args)?;
    let action = match action {
        Action::Kill if args.network => Action::CutNetwork,
        other if args.network => {
            anyhow::bail!(
                "--network goes with kill only (it cuts the network); not with {}",
                other.name()
            )
        }
        other => other,
    };
    let acted = control::act(&state, action, &target, args.reason.as_deref())?;
    let verb = match action {
        Action::Kill => "killed",
        Action::Pause => "paused",
        Action::Resume => "resumed",
        Action::CutNetwork => "cut",
    };
    Ok(report(verb, action.name(), &acted, args.json))
}

pub fn disable(global: &GlobalArgs, args: DisableArgs) -> Result<ExitCode> {
    let state = state_dir(global)?;
    if args.reason.trim().is_empty() {
        anyhow::bail!("--reason is empty: say why (everyone who is refused reads it)");
    }
    let acted = control::disable(&state, args.profile.as_deref(), &args.reason)?;
    match &args.profile {
        Some(name) => note!("airlock: disabled for profile {name}: every run of it is refused until 'airlock enable --profile {name}'"),
        None => note!("airlock: disabled: every run is refused until 'airlock enable'"),
    }
    Ok(report("killed", "kill", &acted, args.json))
}

pub fn enable(global: &GlobalArgs, args: EnableArgs) -> Result<ExitCode> {
    let state = state_dir(global)?;
    let was_on = control::switches(&state).map_or(true, |s| match args.profile.as_deref() {
        Some(name) => s.profiles.contains_key(name),
        None => s.all.is_some(),
    });
    if !was_on {
        match args.profile.as_deref() {
            Some(name) => {
                note!("airlock: profile {name} was not disabled (its own switch was off)")
            }
            None => note!("airlock: the switch for everything was not on"),
        }
    }
    control::enable(&state, args.profile.as_deref())?;
    let still = control::check_enabled(&state, args.profile.as_deref().unwrap_or(""));
    if let Err(still) = &still {
        note!("airlock: enabled; but another switch is still on: {still}");
    }
    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "profile": args.profile,
                "was_on": was_on,
                "still_disabled": still.as_ref().err().map(|e| e.to_string()),
            })
        );
    }
    Ok(ExitCode::SUCCESS)
}

pub fn status(global: &GlobalArgs, args: StatusArgs) -> Result<ExitCode> {
    let state = state_dir(global)?;
    let switches = control::switches(&state);
    let running = control::running(&state);
    // What cannot be read cannot be reported as "enabled" or "nothing running".
    let registry = state.join("running");
    let unreadable = match std::fs::read_dir(&registry) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Some(format!("cannot read {}: {e}", registry.display()))
        }
        _ => None,
    };
    let status = if switches.is_err() || unreadable.is_some() {
        ExitCode::from(crate::EXIT_AIRLOCK_ERROR)
    } else {
        ExitCode::SUCCESS
    };
    if args.json {
        let runs: Vec<serde_json::Value> = running
            .iter()
            .map(|r| {
                let mut v = serde_json::to_value(r).unwrap_or_default();
                v["paused"] = r.sandbox.is_paused().into();
                v
            })
            .collect();
        let switches = switches.as_ref().map_err(|e| e.to_string());
        println!(
            "{}",
            serde_json::to_string_pretty(&serde_json::json!({
                "switches": switches.as_ref().ok(),
                "switches_error": switches.as_ref().err(),
                "running": runs,
                "running_error": unreadable,
            }))?
        );
        return Ok(status);
    }
    match &switches {
        Ok(s) if s.all.is_none() && s.profiles.is_empty() => println!("enabled"),
        Ok(s) => {
            if let Some(all) = &s.all {
                println!("DISABLED for everything by uid {}: {}", all.by, all.reason);
            }
            for (profile, switch) in &s.profiles {
                println!(
                    "DISABLED for profile {profile} by uid {}: {}",
                    switch.by, switch.reason
                );
            }
        }
        Err(e) => println!("DISABLED: {e}"),
    }
    if let Some(error) = &unreadable {
        println!("UNKNOWN which sandboxes run: {error}");
    } else if running.is_empty() {
        println!("no sandbox running");
    }
    for run in &running {
        println!(
            "{:<8} pid {:<7} session {:<12} profile {:<10} {}",
            if run.sandbox.is_paused() {
                "paused"
            } else {
                "running"
            },
            run.sandbox.pid,
            crate::shown::printable(run.session.as_deref().unwrap_or("-")),
            crate::shown::printable(&run.profile),
            crate::shown::command_line(&run.argv)
        );
    }
    Ok(status)
}
