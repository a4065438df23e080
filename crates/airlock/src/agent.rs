//! What the coding-agent integrations (`airlock claude-code`, `airlock codex`) share: the
//! workspace and profile they are set up for, the airlock session of one agent session, and
//! core's answer to "may this command run there". Every decision is core's; this only names
//! the session and asks.

use std::ffi::OsStr;
use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use clap::Args;
use serde_json::Value;

use airlock_core::{
    Caller, ErrorKind, ProfileChoice, RunRequest, SessionRequest, DEFAULT_PROFILE_NAME,
};

#[derive(Debug, Args)]
pub struct Target {
    /// The workspace the agent works on (its project directory)
    #[arg(short, long, value_name = "DIR")]
    pub workspace: PathBuf,
    /// Profile of the sessions, by name [default: default]
    #[arg(short, long, value_name = "NAME")]
    pub profile: Option<String>,
}

impl Target {
    /// The target with its workspace canonical, as settings name it and sessions are made over.
    pub fn resolved(&self) -> Result<Self> {
        let workspace = std::fs::canonicalize(&self.workspace).with_context(|| {
            format!(
                "workspace {}: not found (name the directory the agent works on)",
                self.workspace.display()
            )
        })?;
        Ok(Self {
            workspace,
            profile: self.profile.clone(),
        })
    }

    /// The profile the settings name (the default one when they name none).
    pub fn profile_name(&self) -> &str {
        self.profile.as_deref().unwrap_or(DEFAULT_PROFILE_NAME)
    }

    /// That profile, as a choice core holds a session's runs to: a run that names it in a
    /// session made with another is refused (`profile_of_session`), since the session's runs
    /// would get the other's access.
    fn profile_choice(&self) -> ProfileChoice {
        ProfileChoice {
            name: Some(self.profile_name().to_string()),
            file: None,
        }
    }
}

/// Hook input is a few KiB; a tool input can be larger (a file's content).
const MAX_HOOK_INPUT_BYTES: u64 = 16 << 20;

/// The JSON object an agent gives its hook on stdin.
pub fn read_hook_input() -> Result<Value> {
    let mut text = String::new();
    std::io::stdin()
        .take(MAX_HOOK_INPUT_BYTES)
        .read_to_string(&mut text)
        .context("stdin")?;
    serde_json::from_str(&text).context("not JSON")
}

pub fn this_binary() -> Result<PathBuf> {
    std::env::current_exe()
        .and_then(std::fs::canonicalize)
        .context("cannot find the path of this airlock binary (/proc/self/exe)")
}

pub fn text(path: &Path) -> Result<&str> {
    path.to_str().with_context(|| {
        format!(
            "{}: not UTF-8, which the agent's settings cannot carry",
            path.display()
        )
    })
}

/// The airlock session of the agent's session `id`: `<prefix>-<id>` (`claude-…`, `codex-…`).
pub fn session_name(prefix: &str, agent: &str, id: &str) -> Result<String> {
    let plain = !id.is_empty()
        && id.len() <= 56
        && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-');
    if !plain {
        bail!("{agent}'s session id {id:?} is not the id this expects (letters, digits and '-'); nothing was run");
    }
    Ok(format!("{prefix}-{id}"))
}

/// Session `name`, made on first use over the target. Core decides whether it may be made
/// (profile, workspace, kill switch) and whether the one found is over this workspace.
pub fn attach(caller: &Caller, target: &Target, name: &str, agent: &str) -> Result<String> {
    let found = match airlock_core::session_summary(caller, name) {
        Ok(found) => found,
        Err(err) if err.code().1 == ErrorKind::NotFound => {
            let request = SessionRequest {
                profile: target.profile_choice(),
                workspace: Some(target.workspace.clone()),
                name: Some(name.to_string()),
            };
            match airlock_core::create_session(caller, request) {
                Ok(made) => made,
                // Made meanwhile by another hook of the same session.
                Err(err) => airlock_core::session_summary(caller, name).map_err(|_| err)?,
            }
        }
        Err(err) => return Err(err.into()),
    };
    if found.meta.workspace != target.workspace {
        bail!(
            "session {name} is over {}, not {}: start {agent} in that workspace, or discard the session",
            found.meta.workspace.display(),
            target.workspace.display()
        );
    }
    Ok(name.to_string())
}

/// What core says of running `command` with `/bin/bash -c` in `session`, as the agent's
/// shell will ask for it (with the target's profile, see [`run_args`]): the kill switch, the
/// session's state, its profile and workspace.
pub fn check_command(caller: &Caller, target: &Target, session: &str, command: &str) -> Result<()> {
    let request = RunRequest {
        argv: vec!["/bin/bash".into(), "-c".into(), command.into()],
        profile: target.profile_choice(),
        workspace: None,
        session: Some(session.to_string()),
        keep: false,
        allow_degraded: Vec::new(),
        sandbox_uid: None,
        resolve: Vec::new(),
        limit_output: true,
        env: None,
        timeout: None,
        learn: false,
    };
    Ok(airlock_core::check_run(caller, request)?)
}

/// `airlock run`'s arguments for `script` in `session`, as the agent shells run it: the
/// target's profile named, so that core refuses a session made with another (the agent can
/// name the session itself in `airlock codex shell … ID`).
pub fn run_args<'a>(target: &'a Target, session: &'a str, script: &'a OsStr) -> [&'a OsStr; 9] {
    [
        "run".as_ref(),
        "--session".as_ref(),
        session.as_ref(),
        "--profile".as_ref(),
        target.profile_name().as_ref(),
        "--".as_ref(),
        "/bin/bash".as_ref(),
        "-c".as_ref(),
        script,
    ]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn session_names_come_from_plain_ids_only() {
        assert_eq!(
            session_name(
                "claude",
                "Claude Code",
                "27dbecfc-5559-4084-82be-f43272ff341e"
            )
            .unwrap(),
            "claude-27dbecfc-5559-4084-82be-f43272ff341e"
        );
        for bad in ["", "../x", "a b", "a/b", &"x".repeat(57)] {
            assert!(session_name("codex", "Codex", bad).is_err(), "{bad:?}");
        }
    }

    /// A session's runs take its own profile, whatever the run asks for: a command in one made
    /// with another profile (another conversation's, under other settings, or a person's
    /// session whose name the agent wrote itself into `airlock codex shell`) would run with that
    /// profile's network, paths and secrets, not the settings'. Core refuses it, for the hooks'
    /// check as for the shells' run (both name the target's profile).
    #[test]
    fn a_command_in_a_session_of_another_profile_is_refused() {
        let dirs: Vec<tempfile::TempDir> = (0..3).map(|_| tempfile::tempdir().unwrap()).collect();
        let (state, workspace, home) = (dirs[0].path(), dirs[1].path(), dirs[2].path());
        std::fs::create_dir_all(home.join("config/airlock/profiles")).unwrap();
        std::fs::write(home.join("config/airlock/profiles/net.toml"), "").unwrap();
        let mut caller = Caller::bare(state.to_path_buf(), airlock_core::Role::Operator);
        caller.env = vec![
            ("HOME".into(), home.into()),
            ("XDG_CONFIG_HOME".into(), home.join("config").into()),
        ];
        let workspace = workspace.canonicalize().unwrap();
        let with = |profile: Option<&str>| Target {
            workspace: workspace.clone(),
            profile: profile.map(str::to_string),
        };
        let check = |target: &Target, name: &str| {
            let session = attach(&caller, target, name, "Codex")?;
            check_command(&caller, target, &session, "true")
        };
        check(&with(Some("net")), "codex-other").unwrap();
        check(&with(Some("net")), "codex-other").unwrap();
        let err = check(&with(Some("default")), "codex-other").unwrap_err();
        assert!(format!("{err:#}").contains("profile"), "{err:#}");
        assert!(check(&with(None), "codex-other").is_err());
        check(&with(None), "codex-mine").unwrap();
        check(&with(Some("default")), "codex-mine").unwrap();
        // The shells' run names the profile too, for core to hold the run to it.
        let default = with(None);
        let args = run_args(&default, "codex-mine", OsStr::new("id"));
        assert_eq!(args[3..5], [OsStr::new("--profile"), OsStr::new("default")]);
    }
}
