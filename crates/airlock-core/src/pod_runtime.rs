//! The runtime inside an agent-sandbox pod (kubernetes-sigs/agent-sandbox): what its client asks
//! of a sandbox — run a command; write, read or list a file; say whether one exists — each as a
//! run in the pod's session. So every request goes through every layer, the profile, the audit
//! log and the kill switch as `airlock run --session` does; what a command or an upload writes
//! lands in the session's layer, for a person to review and apply; and what is read is what the
//! sandbox sees (a path the profile hides reads as hidden). The front end (`airlock serve
//! --agent-sandbox`) turns the contract's HTTP into these requests and their answers into its
//! JSON; the rules are here.

use std::path::{Path, PathBuf};

use serde::Serialize;

use crate::bodies::NewSessionBody;
use crate::{Caller, Error, ErrorKind, Lifecycle, ProfileChoice, Role, RunBody, RunRequest};

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

/// How a file operation's script says that the path is not there (or not of the kind asked).
const ABSENT: i32 = 3;

/// Each file operation's script, run by `/bin/sh -c SCRIPT airlock-file PATH` in the workspace;
/// the path comes as `$1` (never as text of the script), always relative and starting with `.`,
/// so that no program takes it for an option.
const WRITE_SCRIPT: &str = r#"mkdir -p -- "$(dirname -- "$1")" && exec cat >"$1""#;
const READ_SCRIPT: &str = r#"[ -f "$1" ] || exit 3; exec cat -- "$1""#;
/// GNU find: each entry's name, size, type letter and modification time, NUL-ended; symlinks
/// followed, as the contract's runtime lists them.
/// An entry find cannot follow (a loop, a link to nothing) is listed as find sees it, its error
/// not the listing's; a directory that cannot be read fails it.
const LIST_SCRIPT: &str = r#"[ -d "$1" ] || exit 3; [ -r "$1" ] && [ -x "$1" ] || { echo "$1: permission denied" >&2; exit 1; }; find -L "$1" -mindepth 1 -maxdepth 1 -printf '%f\t%s\t%y\t%T@\0' 2>/dev/null; exit 0"#;
const EXISTS_SCRIPT: &str = r#"[ -e "$1" ] || exit 3"#;

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

    /// The run that carries out `op` in the session (a write reads the file's bytes on stdin).
    pub fn file_run(&self, session: &str, op: &FileOp) -> Result<RunRequest, Error> {
        let script = match op {
            FileOp::Write(_) => WRITE_SCRIPT,
            FileOp::Read(_) => READ_SCRIPT,
            FileOp::List(_) => LIST_SCRIPT,
            FileOp::Exists(_) => EXISTS_SCRIPT,
        };
        let argv = [
            "/bin/sh",
            "-c",
            script,
            "airlock-file",
            &op.path().argument(),
        ]
        .map(String::from)
        .to_vec();
        let body = RunBody {
            argv: Some(argv),
            ..RunBody::default()
        };
        Ok(body.request(Some(session.to_string()))?)
    }
}

/// A path the client names, within the workspace: relative (a leading `/` names the workspace's
/// root, as the contract's runtime takes it), `.` and `..` resolved by their names (one that
/// climbs out of the workspace is refused), never empty (the workspace itself is `.`). Links are
/// followed inside the sandbox, which sees only what the profile lets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPath(String);

impl PodPath {
    pub fn parse(raw: &str) -> Result<PodPath, Error> {
        if raw.contains('\0') {
            return Err(PodFileError::Invalid {
                path: raw.escape_debug().to_string(),
                why: "it holds a NUL byte",
            }
            .into());
        }
        let mut parts: Vec<&str> = Vec::new();
        for part in raw.split('/') {
            match part {
                "" | "." => {}
                ".." => {
                    if parts.pop().is_none() {
                        return Err(PodFileError::Outside {
                            path: raw.to_string(),
                        }
                        .into());
                    }
                }
                name => parts.push(name),
            }
        }
        Ok(PodPath(if parts.is_empty() {
            ".".into()
        } else {
            parts.join("/")
        }))
    }

    /// As the client named it, tidied: `dir/file`, or `.` for the workspace.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// As the scripts take it: `./dir/file` (never starting with `-`), or `.`.
    fn argument(&self) -> String {
        if self.0 == "." {
            ".".into()
        } else {
            format!("./{}", self.0)
        }
    }
}

/// What the client asks of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOp {
    /// Write the bytes given (its parents made), replacing what was there.
    Write(PodPath),
    /// Read a regular file.
    Read(PodPath),
    /// List a directory.
    List(PodPath),
    /// Whether anything is there (links followed).
    Exists(PodPath),
}

/// What a file operation found.
#[derive(Debug, Clone, PartialEq)]
pub enum FileAnswer {
    Written,
    Read(Vec<u8>),
    Listed(Vec<PodEntry>),
    Exists(bool),
}

/// One entry of a listing, in the contract's words.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PodEntry {
    pub name: String,
    pub size: u64,
    #[serde(rename = "type")]
    pub kind: EntryKind,
    /// Seconds since the epoch.
    pub mod_time: f64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum EntryKind {
    File,
    Directory,
}

/// How a file operation's run ended, as its answer is read from it.
pub struct FileRunEnd<'a> {
    pub exit_code: i32,
    pub stdout: Vec<u8>,
    /// Not all it wrote came: past the server's --max-output, or the profile's output limit.
    pub stdout_cut: bool,
    pub stderr: &'a str,
    /// What the server keeps of a run's output, in bytes (for the message when a file is larger).
    pub kept_bytes: u64,
}

impl FileOp {
    pub fn path(&self) -> &PodPath {
        match self {
            FileOp::Write(path)
            | FileOp::Read(path)
            | FileOp::List(path)
            | FileOp::Exists(path) => path,
        }
    }

    /// The answer to the client, from how the operation's run ended.
    pub fn answer(&self, end: FileRunEnd) -> Result<FileAnswer, Error> {
        let path = self.path().as_str().to_string();
        match (self, end.exit_code) {
            (FileOp::Exists(_), 0) => Ok(FileAnswer::Exists(true)),
            (FileOp::Exists(_), ABSENT) => Ok(FileAnswer::Exists(false)),
            (FileOp::Read(_), ABSENT) => Err(PodFileError::NotFound { path }.into()),
            (FileOp::List(_), ABSENT) => Err(PodFileError::NotADirectory { path }.into()),
            (FileOp::Read(_) | FileOp::List(_), 0) if end.stdout_cut => {
                Err(PodFileError::TooLarge {
                    path,
                    max: end.kept_bytes,
                }
                .into())
            }
            (FileOp::Write(_), 0) => Ok(FileAnswer::Written),
            (FileOp::Read(_), 0) => Ok(FileAnswer::Read(end.stdout)),
            (FileOp::List(_), 0) => Ok(FileAnswer::Listed(listing(&end.stdout))),
            (_, code) => Err(PodFileError::Failed {
                path,
                action: self.action(),
                why: failure(code, end.stderr),
            }
            .into()),
        }
    }

    fn action(&self) -> &'static str {
        match self {
            FileOp::Write(_) => "write",
            FileOp::Read(_) => "read",
            FileOp::List(_) => "list",
            FileOp::Exists(_) => "look for",
        }
    }
}

/// What the sandbox said of a failed operation: its last line of errors, or its status.
fn failure(code: i32, stderr: &str) -> String {
    match stderr.lines().rev().find(|line| !line.trim().is_empty()) {
        Some(line) => line.trim().to_string(),
        None => format!("it ended with status {code}"),
    }
}

/// `find -printf '%f\t%s\t%y\t%T@\0'`'s entries (a name may hold tabs: the fields after it may
/// not). Types other than a directory are files, as the contract's runtime says.
fn listing(out: &[u8]) -> Vec<PodEntry> {
    out.split(|byte| *byte == 0)
        .filter(|record| !record.is_empty())
        .filter_map(|record| {
            let text = String::from_utf8_lossy(record);
            let mut fields = text.rsplitn(4, '\t');
            let mod_time = fields.next()?.parse::<f64>().unwrap_or(0.0);
            let kind = match fields.next()? {
                "d" => EntryKind::Directory,
                _ => EntryKind::File,
            };
            let size = fields.next()?.parse::<u64>().unwrap_or(0);
            let name = fields.next()?.to_string();
            Some(PodEntry {
                name,
                size,
                kind,
                mod_time,
            })
        })
        .collect()
}

/// Why a file operation is refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodFileError {
    #[error("{path}: climbs out of the workspace — name a path within it")]
    Outside { path: String },
    #[error("{path}: not a path: {why}")]
    Invalid { path: String, why: &'static str },
    #[error("{path}: no such file (or not a regular file) in the sandbox's view of the workspace")]
    NotFound { path: String },
    #[error("{path}: no such directory in the sandbox's view of the workspace")]
    NotADirectory { path: String },
    #[error(
        "{path}: more than a run's output may carry here (the profile's [limits] output, or the server's --max-output, {max} bytes): read it in parts with a command"
    )]
    TooLarge { path: String, max: u64 },
    #[error("cannot {action} {path} in the sandbox: {why}")]
    Failed {
        path: String,
        action: &'static str,
        why: String,
    },
}

impl PodFileError {
    pub(crate) fn code(&self) -> (&'static str, ErrorKind) {
        match self {
            PodFileError::Outside { .. } => ("path_outside_workspace", ErrorKind::Forbidden),
            PodFileError::Invalid { .. } => ("bad_path", ErrorKind::Invalid),
            PodFileError::NotFound { .. } => ("file_not_found", ErrorKind::NotFound),
            PodFileError::NotADirectory { .. } => ("not_a_directory", ErrorKind::NotFound),
            PodFileError::TooLarge { .. } => ("file_too_large", ErrorKind::Invalid),
            PodFileError::Failed { .. } => ("file_operation_failed", ErrorKind::Conflict),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn paths_stay_within_the_workspace() {
        for (raw, tidy) in [
            ("a/b.txt", "a/b.txt"),
            ("/etc/passwd", "etc/passwd"),
            ("", "."),
            (".", "."),
            ("/", "."),
            ("a/./b//c/", "a/b/c"),
            ("a/../b", "b"),
            ("-rf", "-rf"),
        ] {
            assert_eq!(PodPath::parse(raw).unwrap().as_str(), tidy, "{raw}");
        }
        assert_eq!(PodPath::parse("-rf").unwrap().argument(), "./-rf");
        for raw in ["..", "../x", "a/../../x", "/.."] {
            let err = PodPath::parse(raw).unwrap_err();
            assert_eq!(err.code().0, "path_outside_workspace", "{raw}");
        }
        assert_eq!(PodPath::parse("a\0b").unwrap_err().code().0, "bad_path");
    }

    #[test]
    fn a_listing_is_read_from_find_and_names_may_hold_tabs() {
        let out =
            b"a.txt\t3\tf\t1700000000.5\0sub\t4096\td\t1700000001.0000000000\0odd\tname\t0\tl\t0\0";
        let entries = listing(out);
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0].name, "a.txt");
        assert_eq!(entries[0].size, 3);
        assert_eq!(entries[0].kind, EntryKind::File);
        assert_eq!(entries[0].mod_time, 1700000000.5);
        assert_eq!(entries[1].kind, EntryKind::Directory);
        assert_eq!(entries[2].name, "odd\tname");
        assert_eq!(entries[2].kind, EntryKind::File);
    }

    #[test]
    fn a_run_that_found_nothing_answers_not_found_and_a_failure_says_why() {
        let path = PodPath::parse("x").unwrap();
        let end = |code, stderr| FileRunEnd {
            exit_code: code,
            stdout: Vec::new(),
            stdout_cut: false,
            stderr,
            kept_bytes: 10,
        };
        let read = FileOp::Read(path.clone());
        assert_eq!(
            read.answer(end(ABSENT, "")).unwrap_err().code().0,
            "file_not_found"
        );
        let exists = FileOp::Exists(path.clone());
        assert_eq!(
            exists.answer(end(ABSENT, "")).unwrap(),
            FileAnswer::Exists(false)
        );
        assert_eq!(exists.answer(end(0, "")).unwrap(), FileAnswer::Exists(true));
        let write = FileOp::Write(path);
        let failed = write
            .answer(end(1, "sh: 1: cannot create ./x: Read-only file system\n"))
            .unwrap_err();
        assert_eq!(failed.code().0, "file_operation_failed");
        assert!(
            failed.to_string().contains("Read-only file system"),
            "{failed}"
        );
        let truncated = FileRunEnd {
            stdout_cut: true,
            ..end(0, "")
        };
        assert_eq!(
            read_of("big").answer(truncated).unwrap_err().code().0,
            "file_too_large"
        );
    }

    fn read_of(path: &str) -> FileOp {
        FileOp::Read(PodPath::parse(path).unwrap())
    }
}
