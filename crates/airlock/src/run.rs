//! `airlock run`: the arguments as a request to core, and its report as messages and an exit
//! status.

use airlock_jail::note;
use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Result;

use airlock_core::{Caller, ProfileChoice, RunRequest, Session};
use airlock_jail::Outcome;

use crate::cli::{GlobalArgs, ProfileAndWorkspace, RunArgs};

fn tell_busy(session: &Session) {
    note!(
        "airlock: session {} is busy with a run; waiting for it to end…",
        session.id
    );
}

/// This process as core's caller.
pub fn caller(global: &GlobalArgs) -> Caller {
    Caller::this_process(global.state_dir.clone(), tell_busy)
}

/// The profile the arguments name.
pub fn profile_choice(choice: &ProfileAndWorkspace) -> ProfileChoice {
    ProfileChoice {
        name: choice.profile.clone(),
        file: choice.profile_file.clone(),
    }
}

pub fn run(global: &GlobalArgs, args: RunArgs) -> Result<ExitCode> {
    let request = RunRequest {
        argv: args.command,
        profile: profile_choice(&args.choice),
        workspace: args.choice.workspace,
        session: args.session,
        keep: args.keep,
        allow_degraded: args.allow_degraded,
        sandbox_uid: args.sandbox_uid,
        resolve: args.resolve,
        // A person watching a terminal gets the command's output directly; output that is kept
        // (a pipe, a file) is relayed and limited.
        limit_output: !(std::io::stdout().is_terminal() && std::io::stderr().is_terminal()),
        env: None,
        timeout: None,
    };
    let keep = request.keep && request.session.is_none();
    let report = airlock_core::run(&caller(global), request)?;
    if let Some(error) = &report.audit_error {
        note!("airlock: warning: the run's result could not be written to the audit log: {error}");
    }
    if report.output_dropped > 0 {
        note!(
            "airlock: the output limit was reached: {} dropped (raise [limits] output in the profile)",
            crate::shown::counted(report.output_dropped, "byte was", "bytes were")
        );
    }
    if let (true, Some(id)) = (keep, &report.session_id) {
        note!("airlock: session {id} kept: 'airlock diff {id}' shows its changes");
    }
    if report.oom_kills > 0 {
        note!(
            "airlock: the memory limit was reached: the kernel killed {} of the sandbox (raise [limits] memory in the profile)",
            crate::shown::counted(report.oom_kills, "process", "processes")
        );
    }
    if let Some(why) = &report.killed_by_switch {
        note!("airlock: the sandbox was killed ({why})");
    }
    // A reader that went away (EPIPE) is a closed pipe to the command too, as in a plain
    // pipeline: nothing to say. Output lost otherwise (a full disk) is airlock's failure to
    // deliver it, and a command that succeeded must not hide that.
    let mut undelivered = false;
    for (stream, errno) in &report.output_failures {
        if *errno != nix::errno::Errno::EPIPE {
            undelivered = true;
            note!(
                "airlock: the command's {stream} could not be written ({errno}); its pipe was closed"
            );
        }
    }
    match report.outcome {
        Outcome::Exited(0) if undelivered => return Ok(ExitCode::from(crate::EXIT_AIRLOCK_ERROR)),
        Outcome::Exited(_) => {}
        Outcome::TimedOut => {
            note!("airlock: the command passed its time limit; every process of the sandbox was killed");
        }
        Outcome::CpuLimitReached => {
            note!(
                "airlock: the sandbox used up its CPU time limit ({}), all its processes together; every one was killed (raise [limits] cpu in the profile)",
                humantime::format_duration(report.cpu_limit)
            );
        }
        Outcome::DiskLimitReached => {
            note!(
                "airlock: the session's layer reached what it may take of the state directory's filesystem (its free margin, or the profile's disk); every process of the sandbox was killed (free some space, or raise [limits] disk)"
            );
        }
    }
    let status = report.exit_status();
    Ok(ExitCode::from(
        u8::try_from(status).unwrap_or(crate::EXIT_AIRLOCK_ERROR),
    ))
}

/// The state directory this process's arguments and environment name.
pub fn state_dir(global: &GlobalArgs) -> Result<std::path::PathBuf> {
    Ok(caller(global).state_dir()?)
}
