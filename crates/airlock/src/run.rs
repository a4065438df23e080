//! `airlock run`: the arguments as a request to core, and its report as messages and an exit
//! status.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::{Context as _, Result};

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
        learn: false,
    };
    if args.json {
        return run_for_json(global, request);
    }
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

/// `airlock run --json`: the run carried out as the API carries out one (by a worker process of
/// airlock-runner, its output gathered), and its answer printed in the API's shape. The command
/// reads this process's stdin as it goes, and gets the signals this process gets, as with a
/// plain `airlock run` (a second interrupt kills the sandbox).
fn run_for_json(global: &GlobalArgs, mut request: RunRequest) -> Result<ExitCode> {
    let caller = caller(global);
    // Gathered output is kept output: relayed, and held to the profile's limit.
    request.limit_output = true;
    let state_dir = caller.state_dir()?;
    let session = request.session.clone();
    let job = airlock_runner::Job {
        state_dir: global.state_dir.clone(),
        role: caller.role,
        way: caller.way,
        token: None,
        profile: request
            .profile
            .name
            .clone()
            .unwrap_or_else(|| airlock_core::DEFAULT_PROFILE_NAME.into()),
        workspace: None,
        asked: caller.asked.clone(),
        cwd: caller.cwd.clone(),
        run: request,
        result_file: std::path::PathBuf::new(),
        server_pid: std::process::id() as i32,
        stdin_given: false,
    };
    let exe =
        std::env::current_exe().context("cannot tell where this program is (/proc/self/exe)")?;
    let results_dir = airlock_runner::results_dir(&state_dir)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .context("cannot start the run's runtime")?;
    let answer = runtime.block_on(async {
        let jobs = std::sync::Arc::new(airlock_runner::Jobs::default());
        let (events, mut received) = tokio::sync::mpsc::channel(16);
        let launch = airlock_runner::Launch {
            exe: &exe,
            results_dir: &results_dir,
            jobs: jobs.clone(),
            stdin: airlock_runner::Input::Inherit,
            keep_bytes: u64::MAX,
            token_valid: std::sync::Arc::new(|| true),
            pool: None,
        };
        let recorded = caller.clone();
        let abandoned: airlock_runner::Recorder = std::sync::Arc::new(move |why: &str| {
            airlock_core::audit::record_abandoned(&recorded, session.as_deref(), why)
        });
        let run = airlock_runner::execute(launch, job, events, abandoned);
        let collected = airlock_runner::collect(&mut received);
        let answer = tokio::select! {
            (_, answer) = async { tokio::join!(run, collected) } => answer,
            // Never ends by itself: only by the run's end above.
            signalled = pass_signals_on(&jobs) => signalled,
        };
        // The worker answers before it has reaped its sandbox: this process waits for that
        // (it would die with this process, its run's cgroups left behind).
        jobs.all_ended(WORKER_REAPS_WITHIN).await;
        answer
    });
    let answer = answer?;
    crate::shown::out!("{}", serde_json::to_string(&answer)?);
    Ok(ExitCode::from(
        u8::try_from(answer.result.end.exit_code).unwrap_or(crate::EXIT_AIRLOCK_ERROR),
    ))
}

/// How long `airlock run --json` waits for its worker to reap what is left of the sandbox after
/// its answer (milliseconds, as a rule).
const WORKER_REAPS_WITHIN: std::time::Duration = std::time::Duration::from_secs(10);

/// Pass the signals a person or a supervisor sends this process on to the run's worker, as the
/// worker's own group does not get a terminal's (see airlock-runner's `execute`). Ends only if
/// the signals cannot be watched, with that refusal.
async fn pass_signals_on(
    jobs: &airlock_runner::Jobs,
) -> std::result::Result<airlock_core::RunAnswer, airlock_core::Refusal> {
    use tokio::signal::unix::{signal, SignalKind};
    let watch = |kind| {
        signal(kind).map_err(|e| {
            airlock_core::Refusal::internal(format!("cannot watch for signals to pass on: {e}"))
        })
    };
    let mut interrupt = watch(SignalKind::interrupt())?;
    let mut terminate = watch(SignalKind::terminate())?;
    let mut hangup = watch(SignalKind::hangup())?;
    let mut quit = watch(SignalKind::quit())?;
    loop {
        let passed = tokio::select! {
            _ = interrupt.recv() => nix::sys::signal::Signal::SIGINT,
            _ = terminate.recv() => nix::sys::signal::Signal::SIGTERM,
            _ = hangup.recv() => nix::sys::signal::Signal::SIGHUP,
            _ = quit.recv() => nix::sys::signal::Signal::SIGQUIT,
        };
        jobs.signal_all(passed);
    }
}
