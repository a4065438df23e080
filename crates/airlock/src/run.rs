//! `airlock run`.

use airlock_jail::note;
use std::io::IsTerminal;
use std::path::{Path, PathBuf};
use std::process::ExitCode;

use anyhow::{bail, Context, Result};

use airlock_core::{ProfileRef, RunRequest, Session, DEFAULT_ROOT_SANDBOX_ID};
use airlock_jail::{Degraded, Outcome};
use airlock_policy::{Profile, DEFAULT_PROFILE_NAME};

use crate::cli::{GlobalArgs, ProfileAndWorkspace, RunArgs};

/// Exit status when the wall-clock limit ended the run, as timeout(1) uses.
const EXIT_TIMED_OUT: u8 = 124;
/// 128 + SIGXCPU: what a single process past its own CPU limit (RLIMIT_CPU) exits with.
const EXIT_CPU_LIMIT: u8 = 152;

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

/// The host user with `uid`, if any. Asked of `getent passwd`, a dynamically linked program that
/// goes through every NSS service the host configures (LDAP, sssd, systemd's dynamic users): this
/// binary, when statically linked, reads /etc/passwd only (see airlock_jail::nss). A check that
/// cannot be made refuses the run rather than looking in /etc/passwd alone.
fn host_user_with_uid(uid: u32) -> Result<Option<String>> {
    let getent = ["/usr/bin/getent", "/bin/getent"]
        .into_iter()
        .find(|path| Path::new(path).exists())
        .unwrap_or("getent");
    let out = std::process::Command::new(getent)
        .args(["passwd", &uid.to_string()])
        .stdin(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .output()
        .with_context(|| {
            format!("--sandbox-uid {uid}: cannot run {getent} to check that no host user has that uid (Debian: apt-get install libc-bin)")
        })?;
    match out.status.code() {
        Some(0) => {
            let line = String::from_utf8_lossy(&out.stdout);
            Ok(Some(line.split(':').next().unwrap_or_default().to_string()))
        }
        // getent's "no such key".
        Some(2) => Ok(None),
        _ => bail!(
            "--sandbox-uid {uid}: '{getent} passwd {uid}' failed ({}), so whether a host user has that uid is unknown",
            out.status
        ),
    }
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

/// How the caller chose a profile: `-p NAME`, `--profile-file PATH` (made canonical), or neither.
pub fn profile_ref(choice: &ProfileAndWorkspace) -> Result<ProfileRef> {
    Ok(
        match (choice.profile.as_deref(), choice.profile_file.as_deref()) {
            (_, Some(path)) => {
                let canonical = path.canonicalize().with_context(|| {
                    format!("--profile-file {}: cannot open it", path.display())
                })?;
                ProfileRef {
                    name: canonical
                        .file_stem()
                        .map(|s| s.to_string_lossy().into_owned())
                        .unwrap_or_default(),
                    file: Some(canonical),
                }
            }
            (name, None) => ProfileRef {
                name: name.unwrap_or(DEFAULT_PROFILE_NAME).to_string(),
                file: None,
            },
        },
    )
}

/// Load the profile `chosen` names; never one that lies inside the workspace.
pub fn load_profile(chosen: &ProfileRef, workspace: &Path) -> Result<Profile> {
    let profile = if let Some(path) = &chosen.file {
        let canonical = path
            .canonicalize()
            .with_context(|| format!("profile file {}: cannot open it", path.display()))?;
        airlock_policy::ensure_outside_workspace(&canonical, workspace)?;
        airlock_policy::load_file(&canonical)?
    } else {
        let profile = airlock_policy::load_named(&chosen.name, &search_dirs())?;
        if let Some(source) = &profile.source {
            let canonical = source.canonicalize().unwrap_or_else(|_| source.clone());
            airlock_policy::ensure_outside_workspace(&canonical, workspace)?;
        }
        profile
    };
    Ok(profile)
}

/// The workspace a command names (`--workspace`, else the current directory), made canonical.
pub fn resolve_workspace(arg: Option<&Path>) -> Result<PathBuf> {
    let dir = match arg {
        Some(dir) => dir.to_path_buf(),
        None => std::env::current_dir()
            .context("cannot tell the current directory — pass --workspace DIR")?,
    };
    dir.canonicalize()
        .with_context(|| format!("--workspace {}: no such directory", dir.display()))
}

/// A session's workspace, which must still be there.
pub fn session_workspace(session: &Session) -> Result<PathBuf> {
    let workspace = session.workspace();
    if !workspace.is_dir() {
        bail!(
            "session {}: its workspace {} no longer exists (moved or deleted?) — put it back, or discard the session with 'airlock discard {}'",
            session.id,
            workspace.display(),
            session.id
        );
    }
    Ok(workspace.to_path_buf())
}

/// Workspace and profile of a run: the session's when it names one (what the caller passes must
/// agree with them), else the caller's.
fn workspace_and_profile(state: &Path, args: &RunArgs) -> Result<(PathBuf, ProfileRef)> {
    let chosen = profile_ref(&args.choice)?;
    let Some(id) = &args.session else {
        return Ok((resolve_workspace(args.choice.workspace.as_deref())?, chosen));
    };
    let session = Session::find(state, id)?;
    let workspace = session_workspace(&session)?;
    if let Some(dir) = &args.choice.workspace {
        session.check_workspace(&resolve_workspace(Some(dir))?)?;
    }
    let given = args.choice.profile.is_some() || args.choice.profile_file.is_some();
    if given && chosen != session.meta.profile {
        bail!(
            "session {} runs with profile {}; omit -p/--profile-file, or start a new session for another profile",
            session.id,
            describe_profile(&session.meta.profile)
        );
    }
    Ok((workspace, session.meta.profile.clone()))
}

pub fn describe_profile(profile: &ProfileRef) -> String {
    match &profile.file {
        Some(file) => file.display().to_string(),
        None => profile.name.clone(),
    }
}

fn tell_busy(session: &Session) {
    note!(
        "airlock: session {} is busy with another run; waiting for it to end…",
        session.id
    );
}

pub fn run(global: &GlobalArgs, args: RunArgs) -> Result<ExitCode> {
    let degraded = degraded(&args.allow_degraded)?;
    let caller_cwd = std::env::current_dir().ok();
    let state = state_dir(global)?;
    let (workspace, chosen) = workspace_and_profile(&state, &args)?;
    let profile = load_profile(&chosen, &workspace)?;
    let cpu_limit = std::time::Duration::from_secs(profile.limits.cpu_seconds);
    // No sandbox may write where policy comes from: the search dirs, and the profile's own dir.
    let mut policy_dirs = search_dirs();
    policy_dirs.extend(
        profile
            .source
            .as_ref()
            .and_then(|p| p.parent())
            .map(|p| p.to_path_buf()),
    );
    if args.sandbox_uid.is_some() && !nix::unistd::geteuid().is_root() {
        bail!("--sandbox-uid (or AIRLOCK_SANDBOX_UID) applies to root's runs only: unprivileged, the sandbox user is you; leave it out");
    }
    let root_sandbox_id = args.sandbox_uid.unwrap_or(DEFAULT_ROOT_SANDBOX_ID);
    if root_sandbox_id == 0 {
        bail!("--sandbox-uid 0: the sandbox user must never be root; choose an unused unprivileged id");
    }
    // Only an id the caller chose is looked up: the lookup costs more than a run's setup step;
    // the default is airlock's own choice.
    let owner = args
        .sandbox_uid
        .map(host_user_with_uid)
        .transpose()?
        .flatten();
    if let Some(name) = owner {
        // The sandbox's files and processes would be that user's, and theirs the sandbox's.
        bail!(
            "--sandbox-uid {root_sandbox_id}: that is the uid of user {name}; choose an id no user or service of this host has"
        );
    }
    let request = RunRequest {
        profile,
        profile_ref: chosen,
        workspace,
        caller_cwd,
        caller_home: std::env::var_os("HOME").map(std::path::PathBuf::from),
        argv: args.command,
        caller_env: std::env::vars_os().collect(),
        state_dir: state,
        session: args.session,
        on_session_busy: tell_busy,
        resolve: args
            .resolve
            .iter()
            .map(|pair| {
                let (name, ip) = pair.split_once('=').with_context(|| {
                    format!("--resolve {pair:?}: write NAME=IP, e.g. --resolve api.test=127.0.0.1")
                })?;
                let ip = ip
                    .parse()
                    .with_context(|| format!("--resolve {pair:?}: {ip:?} is not an IP address"))?;
                Ok((name.trim_end_matches('.').to_ascii_lowercase(), ip))
            })
            .collect::<Result<Vec<_>>>()?,
        keep: args.keep,
        degraded,
        root_sandbox_id,
        policy_dirs,
        // A person watching a terminal gets the command's output directly; output that is kept
        // (a pipe, a file) is relayed and limited.
        limit_output: !(std::io::stdout().is_terminal() && std::io::stderr().is_terminal()),
    };
    let keep = request.keep && request.session.is_none();
    let report = airlock_core::run(request)?;
    if let Some(error) = &report.audit_error {
        note!("airlock: warning: the run's result could not be written to the audit log: {error}");
    }
    if report.output_dropped > 0 {
        note!(
            "airlock: the output limit was reached: {} bytes were dropped (raise [limits] output in the profile)",
            report.output_dropped
        );
    }
    if let (true, Some(id)) = (keep, &report.session_id) {
        note!("airlock: session {id} kept: 'airlock diff {id}' shows its changes");
    }
    if report.oom_kills > 0 {
        note!(
            "airlock: the memory limit was reached: the kernel killed {} process(es) of the sandbox (raise [limits] memory in the profile)",
            report.oom_kills
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
    Ok(match report.outcome {
        Outcome::Exited(0) if undelivered => ExitCode::from(crate::EXIT_AIRLOCK_ERROR),
        Outcome::Exited(code) => {
            ExitCode::from(u8::try_from(code).unwrap_or(crate::EXIT_AIRLOCK_ERROR))
        }
        Outcome::TimedOut => {
            note!("airlock: the command passed its time limit; every process of the sandbox was killed");
            ExitCode::from(EXIT_TIMED_OUT)
        }
        Outcome::CpuLimitReached => {
            note!(
                "airlock: the sandbox used up its CPU time limit ({}), all its processes together; every one was killed (raise [limits] cpu in the profile)",
                humantime::format_duration(cpu_limit)
            );
            ExitCode::from(EXIT_CPU_LIMIT)
        }
    })
}
