//! `airlock run`: the arguments as a request to core, and its report as messages and an exit
//! status.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::Result;

use airlock_core::{Caller, ProfileChoice, RunRequest, Session};
use airlock_jail::Outcome;

use crate::cli::{GlobalArgs, ProfileAndWorkspace, RunArgs};
use crate::shown::note;

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
    let report = airlock_core::run(&caller(global), request)?;
    for line in report.end().notes() {
        note!("airlock: {}", crate::shown::printable(&line));
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
    if undelivered && report.outcome == Outcome::Exited(0) {
        return Ok(ExitCode::from(crate::EXIT_AIRLOCK_ERROR));
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
