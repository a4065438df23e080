//! What the coding-agent integrations (`airlock claude-code`, `airlock codex`) share: the
//! workspace and profile they are set up for, the airlock session of one agent session, and
//! core's answer to "may this command run there". Every decision is core's; this only names
//! the session and asks.

use std::io::Read as _;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context as _, Result};
use clap::Args;
use serde_json::Value;

use airlock_core::{Caller, ErrorKind, ProfileChoice, RunRequest, SessionRequest};

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
                profile: ProfileChoice {
                    name: target.profile.clone(),
                    file: None,
                },
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
    // The session's runs take its profile, not the one the settings name.
    let profile = target.profile.as_deref().unwrap_or("default");
    if found.meta.profile.file.is_some() || found.meta.profile.name != profile {
        bail!(
            "session {name} runs with profile {}, not {profile}, the one these settings name: its commands would get that profile's access; start a new {agent} session, or discard {name}",
            found.meta.profile.name
        );
    }
    Ok(name.to_string())
}

/// What core says of running `command` with `/bin/bash -c` in `session`, as the agent's
/// shell will ask for it: the kill switch, the session's state, its profile and workspace.
pub fn check_command(caller: &Caller, session: &str, command: &str) -> Result<()> {
    let request = RunRequest {
        argv: vec!["/bin/bash".into(), "-c".into(), command.into()],
        profile: ProfileChoice::default(),
        workspace: None,
        session: Some(session.to_string()),
        keep: false,
        allow_degraded: Vec::new(),
        sandbox_uid: None,
        resolve: Vec::new(),
        limit_output: true,
        env: None,
        timeout: None,
    };
    Ok(airlock_core::check_run(caller, request)?)
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

    /// A session's runs take its own profile, whatever the run asks for: attaching to one made
    /// with another profile (another conversation's, under other settings, or a person's
    /// session whose name the agent wrote itself into `airlock codex shell`) would run the
    /// command with that profile's network, paths and secrets, not the settings'.
    #[test]
    fn a_session_of_another_profile_is_not_attached() {
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
        attach(&caller, &with(Some("net")), "codex-other", "Codex").unwrap();
        attach(&caller, &with(Some("net")), "codex-other", "Codex").unwrap();
        let err = attach(&caller, &with(Some("default")), "codex-other", "Codex").unwrap_err();
        assert!(format!("{err:#}").contains("profile"), "{err:#}");
        assert!(attach(&caller, &with(None), "codex-other", "Codex").is_err());
        attach(&caller, &with(None), "codex-mine", "Codex").unwrap();
        attach(&caller, &with(Some("default")), "codex-mine", "Codex").unwrap();
    }
}
