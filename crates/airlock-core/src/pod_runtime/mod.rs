//! The runtime inside an agent-sandbox pod (kubernetes-sigs/agent-sandbox): what its client asks
//! of a sandbox — run a command; write, read or list a file; say whether one exists — each as a
//! run in the pod's session. So every request goes through every layer, the profile, the audit
//! log and the kill switch as `airlock run --session` does; what a command or an upload writes
//! lands in the session's layer, for a person to review and apply; and what is read is what the
//! sandbox sees (a path the profile hides reads as hidden). The front end (`airlock serve
//! --agent-sandbox`) turns the contract's HTTP into these requests and their answers into its
//! JSON; the rules are here.

mod answers;
mod files;

use std::path::{Path, PathBuf};

use crate::bodies::NewSessionBody;
use crate::{Caller, Error, Lifecycle, ProfileChoice, Role, RunBody, RunRequest};

pub use answers::{output_cut_note, timed_out, CommandAnswer, DirectoryListing, ListedEntry};
pub use files::{
    EntryKind, FileAnswer, FileMode, FileOp, FileRunEnd, PodEntry, PodFileError, PodPath,
};

/// What a pod's runtime is bound to, by the operator who started it: the workspace its runs
/// overlay, the profile they run with, and (optionally) the session they go into.
#[derive(Debug, Clone)]
pub struct PodBinding {
    workspace: PathBuf,
    profile: String,
    /// The session named by the operator: used as it is, never replaced. None: the runtime makes
    /// its own, and a new one when a person has applied or discarded it.
    named_session: Option<String>,
}

/// The names of the sessions a pod runtime makes.
const SESSION_PREFIX: &str = "pod-";

impl PodBinding {
    /// The binding `airlock serve --agent-sandbox` is started with: the workspace must exist (it
    /// is kept as its canonical path), the profile defaults to `default`.
    pub fn new(
        workspace: &Path,
        profile: Option<String>,
        session: Option<String>,
    ) -> Result<PodBinding, Error> {
        let workspace = workspace.canonicalize().map_err(|e| Error::Workspace {
            path: workspace.to_path_buf(),
            why: format!("{e} — give the directory the agent works on (--workspace)"),
        })?;
        Ok(PodBinding {
            workspace,
            profile: profile.unwrap_or_else(|| crate::DEFAULT_PROFILE_NAME.into()),
            named_session: session,
        })
    }

    pub fn workspace(&self) -> &Path {
        &self.workspace
    }

    pub fn profile(&self) -> &str {
        &self.profile
    }

    /// Who a request to the runtime is: an agent, bound by the operator's command line as
    /// `airlock mcp` on stdio is (no token: the pod's network is what reaches the runtime).
    pub fn caller(&self, service: &Caller, asked: String) -> Caller {
        let mut caller = service.clone();
        caller.role = Role::Agent;
        caller.grant = None;
        caller.cwd = None;
        caller.asked = vec![asked];
        caller
    }

    /// The session the pod's runs go into: `current` while it is active; else the one the
    /// operator named (refused as it is when applied or discarded); else the newest active
    /// session this runtime made over the same workspace and profile (one made before a restart
    /// of the server, its changes not yet reviewed); else a new one, named `pod-…`.
    pub fn session(&self, caller: &Caller, current: Option<&str>) -> Result<String, Error> {
        if let Some(named) = &self.named_session {
            let summary = crate::session_summary(caller, named)?;
            self.check_named(named, &summary.meta)?;
            return Ok(summary.meta.id);
        }
        if let Some(id) = current {
            match crate::session_summary(caller, id) {
                Ok(summary) if summary.meta.lifecycle == Lifecycle::Active => return Ok(id.into()),
                Ok(_) | Err(Error::Session(crate::SessionError::Unknown { .. })) => {}
                Err(other) => return Err(other),
            }
        }
        let ours = crate::list_sessions(caller)?
            .into_iter()
            .filter(|s| self.made_it(&s.meta))
            .max_by_key(|s| s.meta.created);
        if let Some(summary) = ours {
            return Ok(summary.meta.id);
        }
        let mut request = NewSessionBody {
            workspace: Some(self.workspace.clone()),
            name: Some(format!("{SESSION_PREFIX}{}", crate::tokens::random_hex(4)?)),
        }
        .request();
        request.profile = ProfileChoice {
            name: Some(self.profile.clone()),
            file: None,
        };
        Ok(crate::create_session(caller, request)?.meta.id)
    }

    /// SECURITY: the session named must be over the runtime's workspace with its profile: a
    /// session's runs take its own, and `airlock disable --profile` would not stop another's.
    fn check_named(&self, named: &str, meta: &crate::SessionMeta) -> Result<(), Error> {
        let same = meta.workspace == self.workspace
            && meta.profile.name == self.profile
            && meta.profile.file.is_none();
        if same {
            return Ok(());
        }
        let profile = match &meta.profile.file {
            Some(file) => file.display().to_string(),
            None => meta.profile.name.clone(),
        };
        Err(Error::Argument {
            arg: format!("--session {named}"),
            why: format!(
                "it overlays {} with profile {profile}, and the runtime is bound to {} with profile {}: name a session over --workspace made with --profile, or leave --session out",
                meta.workspace.display(),
                self.workspace.display(),
                self.profile,
            ),
        })
    }

    /// An active session a pod runtime bound as this one made (no token's, its name `pod-…`).
    fn made_it(&self, meta: &crate::SessionMeta) -> bool {
        meta.lifecycle == Lifecycle::Active
            && meta.token.is_none()
            && meta.workspace == self.workspace
            && meta.profile.name == self.profile
            && meta.profile.file.is_none()
            && meta
                .name
                .as_deref()
                .is_some_and(|name| name.starts_with(SESSION_PREFIX))
    }

    /// `POST /execute`: the command line, by `/bin/sh -c` (as sandboxd runs it and the client
    /// says of both runtimes), in the session, with the time limit asked for.
    pub fn command(
        &self,
        session: &str,
        command: &str,
        timeout_seconds: Option<f64>,
    ) -> Result<RunRequest, Error> {
        let body = RunBody {
            command: Some(command.to_string()),
            timeout: timeout_seconds,
            ..RunBody::default()
        };
        Ok(body.request(Some(session.to_string()))?)
    }

    /// sandboxd's `Execute`: the program and its arguments as given (its client sends `/bin/sh
    /// -c LINE`), the variables asked for (the profile's `[env] allow` passes some), in `cwd`
    /// (within the workspace; default its root), with the caller's deadline as its time limit.
    pub fn program(
        &self,
        session: &str,
        argv: Vec<String>,
        env: std::collections::BTreeMap<String, String>,
        cwd: Option<&str>,
        timeout_seconds: Option<f64>,
    ) -> Result<RunRequest, Error> {
        let argv = match cwd {
            None => argv,
            Some(cwd) => {
                let dir = PodPath::parse(cwd)?;
                let mut entered = [
                    "/bin/sh",
                    "-c",
                    ENTER_SCRIPT,
                    "airlock-cwd",
                    &dir.argument(),
                ]
                .map(String::from)
                .to_vec();
                entered.extend(argv);
                entered
            }
        };
        let body = RunBody {
            argv: Some(argv),
            env,
            timeout: timeout_seconds,
            ..RunBody::default()
        };
        Ok(body.request(Some(session.to_string()))?)
    }
}

/// The program given after the directory, started in it (`$1`, within the workspace).
const ENTER_SCRIPT: &str = r#"cd -- "$1" || exit 125; shift; exec "$@""#;
