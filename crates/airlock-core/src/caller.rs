//! Who asks, and from where. A front end says what it knows of its caller; core derives from it
//! every place a request may touch (state, policy, workspace) and judges each one itself.

use std::ffi::{OsStr, OsString};
use std::path::{Path, PathBuf};

use airlock_jail::Way;
use airlock_policy::{Profile, DEFAULT_PROFILE_NAME};

use crate::error::Error;
use crate::session::{ProfileRef, Session};

/// What the caller may do (DESIGN: "who may do what"). An agent runs commands and reads its
/// sessions; only an operator approves changes, stops sandboxes, or sets what widens a run.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Role {
    /// A person at the machine, or a token an operator holds: everything.
    Operator,
    /// An agent or automation: run, start and read sessions; never apply, revert, discard, kill,
    /// disable or enable, nor name trusted addresses, a sandbox uid or a layer to give up.
    Agent,
}

/// What a front end knows of the person or program that asked. SECURITY: every field but
/// `asked` is the front end's own configuration (its state directory, its environment, its
/// role for the request's credentials), never data from the request.
#[derive(Debug, Clone)]
pub struct Caller {
    pub role: Role,
    /// The way this request's sandboxes are built (rootful, or in a user namespace), decided
    /// once for the process that serves it (see [`Way::of_this_process`]) and carried from here:
    /// into each sandbox's spec and each session's record.
    pub way: Way,
    /// The state directory the caller named (`--state-dir`, `AIRLOCK_STATE_DIR`), if any.
    pub state_dir: Option<PathBuf>,
    /// The caller's working directory: the default workspace, and where relative paths start.
    pub cwd: Option<PathBuf>,
    /// The caller's environment. HOME and the XDG directories are read from it; of the rest,
    /// only what a profile allows reaches a sandbox.
    pub env: Vec<(OsString, OsString)>,
    /// What the caller asked, in its own words (a command line): kept in the records of refusals.
    pub asked: Vec<String>,
    /// Told when another operation holds a session and this one waits for it.
    pub on_busy: fn(&Session),
    /// The token the request came with, and what it is bound to; None for the person at the
    /// machine, bound to nothing.
    pub grant: Option<Grant>,
}

/// What a token opens (see [`crate::tokens`]): its profile, its own sessions (an agent's) or its
/// profile's (an operator's), and its workspace or what lies under it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Grant {
    /// The token's id (never the token): named in every audit record of its requests.
    pub token: String,
    pub profile: String,
    /// Canonical. None: each request names its workspace (operator tokens only).
    pub workspace: Option<PathBuf>,
}

fn say_nothing(_: &Session) {}

impl Caller {
    /// This process as the caller: its working directory, environment and arguments.
    /// The person at the terminal is the machine's operator.
    pub fn this_process(state_dir: Option<PathBuf>, on_busy: fn(&Session)) -> Caller {
        Caller {
            role: Role::Operator,
            way: Way::of_this_process(),
            state_dir,
            cwd: std::env::current_dir().ok(),
            env: std::env::vars_os().collect(),
            asked: std::env::args_os()
                .map(|a| a.to_string_lossy().into_owned())
                .collect(),
            on_busy,
            grant: None,
        }
    }

    /// A caller with no environment, working directory or words: what a test or a service
    /// that says everything explicitly starts from.
    pub fn bare(state_dir: PathBuf, role: Role) -> Caller {
        Caller {
            role,
            way: Way::of_this_process(),
            state_dir: Some(state_dir),
            cwd: None,
            env: Vec::new(),
            asked: Vec::new(),
            on_busy: say_nothing,
            grant: None,
        }
    }

    /// A request that came with a token: its role and binding, and the service's own state
    /// directory and environment (where profiles are looked up), never the request's.
    pub fn with_token(
        service: &Caller,
        token: &crate::tokens::TokenRecord,
        asked: String,
    ) -> Caller {
        Caller {
            role: token.role,
            way: service.way,
            state_dir: service.state_dir.clone(),
            cwd: None,
            env: service.env.clone(),
            asked: vec![asked],
            on_busy: say_nothing,
            grant: Some(token.grant()),
        }
    }

    /// The variable's first value, as getenv(3) and the programs a sandbox starts read it: a
    /// second copy must not pick another profile directory or home than the first names.
    /// Refuse what only an operator may do.
    pub(crate) fn must_be_operator(&self, what: &str) -> Result<(), Error> {
        match self.role {
            Role::Operator => Ok(()),
            Role::Agent => Err(Error::NotPermitted { what: what.into() }),
        }
    }

    fn var(&self, name: &str) -> Option<&OsStr> {
        self.env
            .iter()
            .find(|(key, _)| key == name)
            .map(|(_, value)| value.as_os_str())
    }

    /// The caller's home directory, which no workspace may contain.
    pub fn home(&self) -> Option<PathBuf> {
        self.var("HOME").map(PathBuf::from)
    }

    /// Where airlock's state lives for this caller (see [`crate::state_dir`]).
    pub fn state_dir(&self) -> Result<PathBuf, Error> {
        Ok(crate::paths::state_dir(
            self.state_dir.as_deref().map(Path::as_os_str),
            nix::unistd::geteuid().is_root(),
            self.var("XDG_STATE_HOME"),
            self.var("HOME"),
        )?)
    }

    /// The caller's `HOME` and `XDG_CONFIG_HOME`: where their global git configuration is.
    pub(crate) fn git_config_dirs(&self) -> (Option<PathBuf>, Option<PathBuf>) {
        let xdg = self.var("XDG_CONFIG_HOME").map(PathBuf::from);
        (self.home(), xdg)
    }

    /// Where named profiles are looked up: no sandbox may write there.
    pub(crate) fn profile_search_dirs(&self) -> Vec<PathBuf> {
        airlock_policy::profile_search_dirs(self.var("XDG_CONFIG_HOME"), self.var("HOME"))
    }

    /// `path` as the caller meant it: a relative one from the caller's working directory, never
    /// from this process's (a service's own directory means nothing to its clients).
    fn absolute(&self, path: &Path, arg: &str) -> Result<PathBuf, Error> {
        match (path.is_relative(), &self.cwd) {
            (false, _) => Ok(path.to_path_buf()),
            (true, Some(cwd)) => Ok(cwd.join(path)),
            (true, None) => Err(Error::Argument {
                arg: format!("{arg} {}", path.display()),
                why: "a relative path, and no working directory to take it from: give an absolute path".into(),
            }),
        }
    }

    /// The workspace a request names (else the caller's working directory, or the token's),
    /// made canonical; with a token, only its workspace or a directory under it.
    pub(crate) fn workspace(&self, named: Option<&Path>) -> Result<PathBuf, Error> {
        if let Some(bound) = self.grant.as_ref().and_then(|g| g.workspace.as_ref()) {
            let Some(named) = named else {
                return Ok(bound.clone());
            };
            let outside = || Error::OutsideGrant {
                what: format!(
                    "use workspace {}: its token is bound to {}",
                    named.display(),
                    bound.display()
                ),
            };
            // Judged by its words first, touching nothing: a path outside the binding must not
            // tell whether it exists, nor where its symlinks lead.
            if !lexically_normal(&bound.join(named)).starts_with(bound) {
                return Err(outside());
            }
            let dir = self.absolute_within(named, bound)?;
            if !dir.starts_with(bound) {
                return Err(outside());
            }
            return Ok(dir);
        }
        let dir = match named {
            Some(dir) => self.absolute(dir, "--workspace")?,
            None => self.cwd.clone().ok_or(Error::NoWorkingDirectory)?,
        };
        let dir = dir.canonicalize().map_err(|_| Error::Argument {
            arg: format!("--workspace {}", named.unwrap_or(&dir).display()),
            why: "no such directory".into(),
        })?;
        // Every path of a run is in its audit record as text: a name that is not UTF-8 is said
        // here, by its path, rather than as a record that cannot be written.
        if dir.to_str().is_none() {
            return Err(Error::Workspace {
                why: "its path is not UTF-8 (airlock writes every path of a run into its audit log as text): rename the directory, or work in one whose path is".into(),
                path: dir,
            });
        }
        Ok(dir)
    }
}

impl Caller {
    /// `named` canonical, a relative path taken from the token's workspace.
    fn absolute_within(&self, named: &Path, bound: &Path) -> Result<PathBuf, Error> {
        bound
            .join(named)
            .canonicalize()
            .map_err(|_| Error::Argument {
                arg: format!("workspace {}", named.display()),
                why: "no such directory".into(),
            })
    }

    /// Refuse a session the caller's token does not open: another profile's, or (for an agent)
    /// another token's or a person's.
    pub(crate) fn check_reaches(&self, session: &Session) -> Result<(), Error> {
        let Some(grant) = &self.grant else {
            return Ok(());
        };
        let profile_ok =
            session.meta.profile.file.is_none() && session.meta.profile.name == grant.profile;
        let owner_ok = self.role == Role::Operator
            || session.meta.token.as_deref() == Some(grant.token.as_str());
        if profile_ok && owner_ok {
            return Ok(());
        }
        Err(Error::OutsideGrant {
            what: format!(
                "reach session {}: it belongs to another {}",
                session.id,
                if profile_ok { "token" } else { "profile" }
            ),
        })
    }

    /// The session `id_or_name` names, if the caller's token reaches it. With a token, a name
    /// names only a session the token reaches: another token's of that name is not found (nor
    /// its id told).
    pub(crate) fn find_session(
        &self,
        state_dir: &Path,
        id_or_name: &str,
    ) -> Result<Session, Error> {
        let session = match &self.grant {
            None => Session::find(state_dir, id_or_name)?,
            Some(_) => Session::find_among(state_dir, id_or_name, &|s| self.reaches(s))?,
        };
        self.check_reaches(&session)?;
        Ok(session)
    }

    /// Whether the caller may see a running sandbox that `token` started (its command line, its
    /// session): an agent sees only its own token's; an operator's token, its profile's (the
    /// caller filters by profile); a person, everything.
    pub(crate) fn sees_run_of(&self, token: Option<&str>) -> bool {
        match &self.grant {
            Some(grant) if self.role == Role::Agent => token == Some(grant.token.as_str()),
            _ => true,
        }
    }

    /// The sessions the caller's token reaches (all, without one).
    pub(crate) fn reaches(&self, session: &Session) -> bool {
        self.check_reaches(session).is_ok()
    }

    /// A profile name a kill-switch request names, within the token's binding: its own profile
    /// when none is named; another is refused.
    pub(crate) fn profile_scope(&self, named: Option<&str>) -> Result<Option<String>, Error> {
        match (&self.grant, named) {
            (None, named) => Ok(named.map(str::to_string)),
            (Some(grant), None) => Ok(Some(grant.profile.clone())),
            (Some(grant), Some(name)) if name == grant.profile => Ok(Some(grant.profile.clone())),
            (Some(grant), Some(name)) => Err(Error::OutsideGrant {
                what: format!(
                    "act on profile {name}: its token is bound to profile {}",
                    grant.profile
                ),
            }),
        }
    }
}

/// `path` with `.` and `..` taken away by their words alone (`a/b/../c` is `a/c`), never by
/// looking at the filesystem.
fn lexically_normal(path: &Path) -> PathBuf {
    use std::path::Component;
    let mut normal = PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                normal.pop();
            }
            other => normal.push(other),
        }
    }
    normal
}

/// How a request chose its profile: by name (default: `default`), or as a file.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ProfileChoice {
    pub name: Option<String>,
    pub file: Option<PathBuf>,
}

impl ProfileChoice {
    /// A choice was made (rather than left to a session or the default).
    pub fn is_given(&self) -> bool {
        self.name.is_some() || self.file.is_some()
    }

    /// The profile this names, its file made canonical. Both a name and a file is ambiguous.
    pub(crate) fn resolve(&self, caller: &Caller) -> Result<ProfileRef, Error> {
        if let Some(grant) = &caller.grant {
            return self.within(grant);
        }
        if let (Some(name), Some(file)) = (&self.name, &self.file) {
            return Err(Error::Argument {
                arg: format!("-p {name} with --profile-file {}", file.display()),
                why: "name one profile, by name or by file".into(),
            });
        }
        let Some(path) = &self.file else {
            return Ok(ProfileRef {
                name: self
                    .name
                    .clone()
                    .unwrap_or_else(|| DEFAULT_PROFILE_NAME.into()),
                file: None,
            });
        };
        let path = caller.absolute(path, "--profile-file")?;
        let canonical = path.canonicalize().map_err(|_| Error::Argument {
            arg: format!("--profile-file {}", path.display()),
            why: "cannot open it".into(),
        })?;
        Ok(ProfileRef {
            name: canonical
                .file_stem()
                .map(|s| s.to_string_lossy().into_owned())
                .unwrap_or_default(),
            file: Some(canonical),
        })
    }
}

impl ProfileChoice {
    /// With a token: its profile, whatever the request leaves out; another, or a file, refused.
    fn within(&self, grant: &Grant) -> Result<ProfileRef, Error> {
        let other = match (&self.name, &self.file) {
            (_, Some(file)) => Some(file.display().to_string()),
            (Some(name), None) if *name != grant.profile => Some(name.clone()),
            _ => None,
        };
        if let Some(other) = other {
            return Err(Error::OutsideGrant {
                what: format!(
                    "choose profile {other}: its token is bound to profile {}",
                    grant.profile
                ),
            });
        }
        Ok(ProfileRef {
            name: grant.profile.clone(),
            file: None,
        })
    }
}

/// The profile `chosen` names, read from where policy lives and never from inside `workspace`
/// (canonical), which the sandboxed command can write.
pub(crate) fn load_trusted_profile(
    caller: &Caller,
    chosen: &ProfileRef,
    workspace: &Path,
) -> Result<Profile, Error> {
    if let Some(path) = &chosen.file {
        let canonical = path.canonicalize().map_err(|_| Error::Argument {
            arg: format!("profile file {}", path.display()),
            why: "cannot open it".into(),
        })?;
        airlock_policy::ensure_outside_workspace(&canonical, workspace)?;
        return Ok(airlock_policy::load_file(&canonical)?);
    }
    let profile = airlock_policy::load_named(&chosen.name, &caller.profile_search_dirs())?;
    if let Some(source) = &profile.source {
        let canonical = source.canonicalize().unwrap_or_else(|_| source.clone());
        airlock_policy::ensure_outside_workspace(&canonical, workspace)?;
    }
    Ok(profile)
}

/// Every directory policy comes from for a run of `profile`: the search dirs, and the profile's
/// own directory. No sandbox may write into any of them.
pub(crate) fn policy_dirs(caller: &Caller, profile: &Profile) -> Vec<PathBuf> {
    let mut dirs = caller.profile_search_dirs();
    dirs.extend(
        profile
            .source
            .as_ref()
            .and_then(|p| p.parent())
            .map(Path::to_path_buf),
    );
    dirs
}

/// How a profile is named to a person: its file, or its name.
pub fn describe_profile(profile: &ProfileRef) -> String {
    match &profile.file {
        Some(file) => file.display().to_string(),
        None => profile.name.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_workspace_whose_path_is_not_utf8_is_refused_by_its_path() {
        use std::os::unix::ffi::OsStrExt as _;
        let state = tempfile::tempdir().unwrap();
        let base = tempfile::tempdir().unwrap();
        let odd = base.path().join(std::ffi::OsStr::from_bytes(b"ws\xff"));
        std::fs::create_dir(&odd).unwrap();
        let caller = Caller::bare(state.path().to_path_buf(), Role::Operator);
        let refused = caller.workspace(Some(&odd)).unwrap_err();
        assert_eq!(refused.code().0, "workspace_refused");
        assert!(refused.to_string().contains("not UTF-8"), "{refused}");
        assert!(refused.to_string().contains("ws\u{fffd}"), "{refused}");
    }
}
