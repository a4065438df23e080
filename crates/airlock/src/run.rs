//! `airlock run`.

use std::io::IsTerminal;
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use airlock_core::{RunRequest, DEFAULT_ROOT_SANDBOX_ID};
use airlock_jail::{Degraded, Outcome};
use airlock_policy::{Profile, DEFAULT_PROFILE_NAME};

use crate::cli::{GlobalArgs, RunArgs};

/// Exit status when the wall-clock limit ended the run, as timeout(1) uses.
const EXIT_TIMED_OUT: u8 = 124;

fn degraded(names: &[String]) -> Result<Degraded> {
    let mut degraded = Degraded::default();
    for name in names {
        match name.trim() {
            "landlock" => degraded.landlock = true,
            other => bail!(
                "--allow-degraded: unknown layer {other:?}; the layers that may be given up are: landlock \
                 (namespaces, overlayfs and seccomp are always required)"
            ),
        }
    }
    Ok(degraded)
}

pub fn state_dir(global: &GlobalArgs) -> Result<std::path::PathBuf> {
    Ok(airlock_core::state_dir(
        global.state_dir.as_deref().map(|p| p.as_os_str()),
        nix::unistd::geteuid().is_root(),
        std::env::var_os("XDG_STATE_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
    )?)
}

fn search_dirs() -> Vec<std::path::PathBuf> {
    airlock_policy::profile_search_dirs(
        std::env::var_os("XDG_CONFIG_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
    )
}

fn load_profile(args: &RunArgs, workspace: &std::path::Path) -> Result<Profile> {
    let profile = if let Some(path) = &args.profile_file {
        let canonical = path
            .canonicalize()
            .with_context(|| format!("--profile-file {}: cannot open it", path.display()))?;
        airlock_policy::ensure_outside_workspace(&canonical, workspace)?;
        airlock_policy::load_file(&canonical)?
    } else {
        let name = args.profile.as_deref().unwrap_or(DEFAULT_PROFILE_NAME);
        let profile = airlock_policy::load_named(name, &search_dirs())?;
        if let Some(source) = &profile.source {
            let canonical = source.canonicalize().unwrap_or_else(|_| source.clone());
            airlock_policy::ensure_outside_workspace(&canonical, workspace)?;
        }
        profile
    };
    Ok(profile)
}

pub fn run(global: &GlobalArgs, args: RunArgs) -> Result<ExitCode> {
    let degraded = degraded(&args.allow_degraded)?;
    let caller_cwd = std::env::current_dir().ok();
    let workspace_arg = match &args.workspace {
        Some(dir) => dir.clone(),
        None => caller_cwd
            .clone()
            .context("cannot tell the current directory — pass --workspace DIR")?,
    };
    let workspace = workspace_arg
        .canonicalize()
        .with_context(|| format!("--workspace {}: no such directory", workspace_arg.display()))?;
    let profile = load_profile(&args, &workspace)?;
    // No sandbox may write where policy comes from: the search dirs, and the profile's own dir.
    let mut policy_dirs = search_dirs();
    policy_dirs.extend(
        profile
            .source
            .as_ref()
            .and_then(|p| p.parent())
            .map(|p| p.to_path_buf()),
    );
    let root_sandbox_id = args.sandbox_uid.unwrap_or(DEFAULT_ROOT_SANDBOX_ID);
    if root_sandbox_id == 0 {
        bail!("--sandbox-uid 0: the sandbox user must never be root; choose an unused unprivileged id");
    }
    let request = RunRequest {
        profile,
        workspace,
        caller_cwd,
        caller_home: std::env::var_os("HOME").map(std::path::PathBuf::from),
        argv: args.command,
        caller_env: std::env::vars_os().collect(),
        state_dir: state_dir(global)?,
        session: args.session,
        keep: args.keep,
        degraded,
        root_sandbox_id,
        policy_dirs,
        // A person watching a terminal gets the command's output directly; output that is kept
        // (a pipe, a file) is relayed and limited.
        limit_output: !(std::io::stdout().is_terminal() && std::io::stderr().is_terminal()),
    };
    let report = airlock_core::run(request)?;
    if report.output_dropped > 0 {
        eprintln!(
            "airlock: the output limit was reached: {} bytes were dropped (raise [limits] output in the profile)",
            report.output_dropped
        );
    }
    if let (true, Some(id)) = (report.kept, &report.session_id) {
        eprintln!("airlock: session {id} kept");
    }
    Ok(match report.outcome {
        Outcome::Exited(code) => {
            ExitCode::from(u8::try_from(code).unwrap_or(crate::EXIT_AIRLOCK_ERROR))
        }
        Outcome::TimedOut => {
            eprintln!("airlock: the command passed its time limit; every process of the sandbox was killed");
            ExitCode::from(EXIT_TIMED_OUT)
        }
    })
}
