//! The runtime's file operations, each a run of a small script inside the sandbox: what the
//! sandbox sees is what is read, and what is written lands in the session's layer, as the
//! sandbox's user.

use serde::Serialize;

use super::PodBinding;
use crate::{Error, ErrorKind, RunBody, RunRequest};

/// How a script says that the path is not there (or not of the kind asked).
const ABSENT: i32 = 3;
/// How the delete script says that a directory is not empty (and no recursion was asked).
const NOT_EMPTY: i32 = 4;

/// The entries of directory `$1`: for each, GNU find's name, size, type letter, modification
/// time and permission bits, NUL-ended; links followed, as the contract's runtimes list them. An
/// entry find cannot follow is not the listing's failure: a link to nothing is listed as a file
/// (the link's own size), a link loop is left out; a directory that cannot be read fails it.
const LIST: &str = r#"[ -r "$1" ] && [ -x "$1" ] || { echo "$1: permission denied" >&2; exit 1; }; find -L "$1" -mindepth 1 -maxdepth 1 -printf '%f\t%s\t%y\t%T@\t%m\0' 2>/dev/null; exit 0"#;

/// Each operation's script, run by `/bin/sh -c SCRIPT airlock-file PATH [ARG]` in the
/// workspace. The path comes as `$1` (never as text of a script), always relative and starting
/// with `.`, so that no program takes it for an option; `$2` is the mode to give, or `recursive`.
fn script(op: &FileOp) -> String {
    match op {
        // PERF: the parent by the shell's own expansion, made only when missing, and `cat` the
        // last program when no mode is to be set: every program started costs about a
        // millisecond here (the path always has a `/`: it starts with `./`).
        FileOp::Write { .. } => concat!(
            r#"dir="${1%/*}"; [ -d "$dir" ] || mkdir -p -- "$dir" || exit 1; "#,
            r#"[ -n "$2" ] || exec cat >"$1"; cat >"$1" && exec chmod -- "$2" "$1""#
        )
        .into(),
        FileOp::Read(_) => r#"[ -f "$1" ] || exit 3; exec cat -- "$1""#.into(),
        FileOp::List(_) => format!(r#"[ -d "$1" ] || exit 3; {LIST}"#),
        FileOp::Get(_) => format!(
            r#"if [ -d "$1" ]; then printf D; {LIST}; elif [ -f "$1" ]; then printf F; exec cat -- "$1"; else exit 3; fi"#
        ),
        // What a read or a listing finds: a hidden file (a device over it) is not there.
        FileOp::Exists(_) => r#"[ -f "$1" ] || [ -d "$1" ] || exit 3"#.into(),
        FileOp::Delete { .. } => concat!(
            r#"if [ "$1" = . ]; then [ "$2" = recursive ] || exit 4; "#,
            r#"exec find . -mindepth 1 -maxdepth 1 -exec rm -rf -- {} +; fi; "#,
            r#"[ -e "$1" ] || [ -L "$1" ] || exit 3; "#,
            r#"if [ -d "$1" ] && [ ! -L "$1" ]; then "#,
            r#"if [ "$2" = recursive ]; then exec rm -rf -- "$1"; fi; rmdir -- "$1" 2>/dev/null || exit 4; "#,
            r#"else exec rm -f -- "$1"; fi"#
        )
        .into(),
    }
}

impl PodBinding {
    /// The run that carries out `op` in the session (a write reads the file's bytes on stdin).
    pub fn file_run(&self, session: &str, op: &FileOp) -> Result<RunRequest, Error> {
        let extra = match op {
            FileOp::Write {
                mode: Some(mode), ..
            } => mode.0.clone(),
            FileOp::Delete {
                recursive: true, ..
            } => "recursive".into(),
            _ => String::new(),
        };
        let argv = vec![
            "/bin/sh".into(),
            "-c".into(),
            script(op),
            "airlock-file".into(),
            op.path().argument(),
            extra,
        ];
        let body = RunBody {
            argv: Some(argv),
            ..RunBody::default()
        };
        Ok(body.request(Some(session.to_string()))?)
    }
}

/// A path the client names, within the workspace: relative (a leading `/` names the workspace's
/// root, as the contract's runtimes take it), `.` and `..` resolved by their names (one that
/// climbs out of the workspace is refused), never empty (the workspace itself is `.`). Links are
/// followed inside the sandbox, which sees only what the profile lets it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodPath(String);

impl PodPath {
    pub fn parse(raw: &str) -> Result<PodPath, Error> {
        // SECURITY: bounded before anything of it is kept: a multipart file name can be as long
        // as the body, and the path goes into messages and the audit log's requests.
        if raw.len() > MAX_PATH_BYTES {
            return Err(PodFileError::Invalid {
                path: shown_start(raw),
                why: "it is longer than 4096 bytes (PATH_MAX)",
            }
            .into());
        }
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
    pub(super) fn argument(&self) -> String {
        if self.0 == "." {
            ".".into()
        } else {
            format!("./{}", self.0)
        }
    }
}

/// The longest path taken: Linux's PATH_MAX.
const MAX_PATH_BYTES: usize = 4096;

/// The start of a path too long to show whole, for its message.
fn shown_start(raw: &str) -> String {
    let mut end = 64.min(raw.len());
    while !raw.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", raw[..end].escape_debug())
}

/// Permission bits for a written file, as sandboxd takes them: `0` and three octal digits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileMode(String);

impl FileMode {
    pub fn parse(text: &str) -> Result<FileMode, Error> {
        let octal = text.len() == 4
            && text.starts_with('0')
            && text.bytes().skip(1).all(|b| (b'0'..=b'7').contains(&b));
        if octal {
            Ok(FileMode(text.into()))
        } else {
            Err(Error::Argument {
                arg: format!("mode={text}"),
                why: "permission bits are 0 and three octal digits, as 0644".into(),
            })
        }
    }
}

/// What the client asks of a file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FileOp {
    /// Write the bytes given (its parents made), replacing what was there; then set its mode.
    Write {
        path: PodPath,
        mode: Option<FileMode>,
    },
    /// Read a regular file.
    Read(PodPath),
    /// List a directory.
    List(PodPath),
    /// Read a file or list a directory, whichever it is (sandboxd's GET).
    Get(PodPath),
    /// Whether a file or a directory is there (links followed).
    Exists(PodPath),
    /// Remove a file, or an empty directory (any directory, `recursive`).
    Delete { path: PodPath, recursive: bool },
}

/// What a file operation found.
#[derive(Debug, Clone, PartialEq)]
pub enum FileAnswer {
    Written,
    Read(Vec<u8>),
    Listed(Vec<PodEntry>),
    Exists(bool),
    Deleted,
}

/// One entry of a listing, in the legacy contract's words (its JSON).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct PodEntry {
    pub name: String,
    pub size: u64,
    #[serde(rename = "type")]
    pub kind: EntryKind,
    /// Seconds since the epoch.
    pub mod_time: f64,
    /// Permission bits (sandboxd's listing says them; the legacy one does not).
    #[serde(skip)]
    pub mode: u32,
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

impl<'a> FileRunEnd<'a> {
    /// How the operation's run ended, from its result and the output kept of it.
    pub fn of(
        result: &crate::RunResult,
        stdout: Vec<u8>,
        stderr: &'a str,
        kept_bytes: u64,
    ) -> FileRunEnd<'a> {
        FileRunEnd {
            exit_code: result.end.exit_code,
            stdout,
            stdout_cut: result.stdout_truncated || result.end.output_dropped > 0,
            stderr,
            kept_bytes,
        }
    }
}

impl FileOp {
    pub fn path(&self) -> &PodPath {
        match self {
            FileOp::Write { path, .. }
            | FileOp::Read(path)
            | FileOp::List(path)
            | FileOp::Get(path)
            | FileOp::Exists(path)
            | FileOp::Delete { path, .. } => path,
        }
    }

    /// The answer to the client, from how the operation's run ended.
    pub fn answer(&self, end: FileRunEnd) -> Result<FileAnswer, Error> {
        let path = self.path().as_str().to_string();
        let reads = matches!(self, FileOp::Read(_) | FileOp::List(_) | FileOp::Get(_));
        match (self, end.exit_code) {
            (FileOp::Exists(_), 0) => Ok(FileAnswer::Exists(true)),
            (FileOp::Exists(_), ABSENT) => Ok(FileAnswer::Exists(false)),
            (FileOp::List(_), ABSENT) => Err(PodFileError::NotADirectory { path }.into()),
            (FileOp::Delete { .. }, NOT_EMPTY) => Err(PodFileError::NotEmpty { path }.into()),
            (_, ABSENT) => Err(PodFileError::NotFound { path }.into()),
            (_, 0) if reads && end.stdout_cut => Err(PodFileError::TooLarge {
                path,
                max: end.kept_bytes,
            }
            .into()),
            (FileOp::Write { .. }, 0) => Ok(FileAnswer::Written),
            (FileOp::Delete { .. }, 0) => Ok(FileAnswer::Deleted),
            (FileOp::Read(_), 0) => Ok(FileAnswer::Read(end.stdout)),
            (FileOp::List(_), 0) => Ok(FileAnswer::Listed(listing(&end.stdout))),
            (FileOp::Get(_), 0) => match end.stdout.split_first() {
                Some((b'D', entries)) => Ok(FileAnswer::Listed(listing(entries))),
                Some((b'F', content)) => Ok(FileAnswer::Read(content.to_vec())),
                _ => Err(PodFileError::Failed {
                    path,
                    action: self.action(),
                    why: "its script answered nothing it knows".into(),
                }
                .into()),
            },
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
            FileOp::Write { .. } => "write",
            FileOp::Read(_) | FileOp::Get(_) => "read",
            FileOp::List(_) => "list",
            FileOp::Exists(_) => "look for",
            FileOp::Delete { .. } => "remove",
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

/// The [`LIST`] script's entries (a name may hold tabs: the fields after it may not), sorted by
/// name. Types other than a directory are files, as the contracts say.
fn listing(out: &[u8]) -> Vec<PodEntry> {
    let mut entries: Vec<PodEntry> = out
        .split(|byte| *byte == 0)
        .filter(|record| !record.is_empty())
        .filter_map(|record| {
            let text = String::from_utf8_lossy(record);
            let mut fields = text.rsplitn(5, '\t');
            let mode = u32::from_str_radix(fields.next()?, 8).unwrap_or(0);
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
                mode,
            })
        })
        .collect();
    entries.sort_by(|a, b| a.name.cmp(&b.name));
    entries
}

/// Why a file operation is refused or failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PodFileError {
    #[error("{path}: climbs out of the workspace — name a path within it")]
    Outside { path: String },
    #[error("{path}: not a path: {why}")]
    Invalid { path: String, why: &'static str },
    #[error("{path}: no such file in the sandbox's view of the workspace")]
    NotFound { path: String },
    #[error("{path}: no such directory in the sandbox's view of the workspace")]
    NotADirectory { path: String },
    #[error(
        "{path}: a directory that is not empty: remove it recursively, or what is in it first"
    )]
    NotEmpty { path: String },
    #[error(
        "{path}: more than a run's output may carry here (the profile's [limits] output, or the server's --max-output of {max} bytes, whichever is less): read it in parts with a command"
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
            PodFileError::NotEmpty { .. } => ("directory_not_empty", ErrorKind::Conflict),
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
        let long = "é".repeat(3000);
        let refused = PodPath::parse(&long).unwrap_err();
        assert_eq!(refused.code().0, "bad_path");
        assert!(refused.to_string().len() < 200, "{refused}");
        assert!(PodPath::parse(&"a/".repeat(2048)).is_ok());
    }

    #[test]
    fn modes_are_four_octal_digits() {
        for good in ["0644", "0755", "0000", "0777"] {
            assert!(FileMode::parse(good).is_ok(), "{good}");
        }
        for bad in ["644", "0844", "1777", "0644 ", "0o644", "", "-rf"] {
            assert!(FileMode::parse(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn a_listing_is_read_from_find_sorted_and_names_may_hold_tabs() {
        let out = b"sub\t4096\td\t1700000001.0000000000\t755\0a.txt\t3\tf\t1700000000.5\t644\0odd\tname\t0\tl\t0\t777\0";
        let entries = listing(out);
        assert_eq!(entries.len(), 3);
        assert_eq!(entries[0].name, "a.txt");
        assert_eq!(entries[0].size, 3);
        assert_eq!(entries[0].kind, EntryKind::File);
        assert_eq!(entries[0].mod_time, 1700000000.5);
        assert_eq!(entries[0].mode, 0o644);
        assert_eq!(entries[1].name, "odd\tname");
        assert_eq!(entries[1].kind, EntryKind::File);
        assert_eq!(entries[2].kind, EntryKind::Directory);
    }

    fn end<'a>(code: i32, stdout: &[u8], stderr: &'a str) -> FileRunEnd<'a> {
        FileRunEnd {
            exit_code: code,
            stdout: stdout.to_vec(),
            stdout_cut: false,
            stderr,
            kept_bytes: 10,
        }
    }

    fn path(text: &str) -> PodPath {
        PodPath::parse(text).unwrap()
    }

    #[test]
    fn a_run_that_found_nothing_answers_not_found_and_a_failure_says_why() {
        let read = FileOp::Read(path("x"));
        assert_eq!(
            read.answer(end(ABSENT, b"", "")).unwrap_err().code().0,
            "file_not_found"
        );
        let exists = FileOp::Exists(path("x"));
        assert_eq!(
            exists.answer(end(ABSENT, b"", "")).unwrap(),
            FileAnswer::Exists(false)
        );
        assert_eq!(
            exists.answer(end(0, b"", "")).unwrap(),
            FileAnswer::Exists(true)
        );
        let write = FileOp::Write {
            path: path("x"),
            mode: None,
        };
        let failed = write
            .answer(end(
                1,
                b"",
                "sh: 1: cannot create ./x: Read-only file system\n",
            ))
            .unwrap_err();
        assert_eq!(failed.code().0, "file_operation_failed");
        assert!(
            failed.to_string().contains("Read-only file system"),
            "{failed}"
        );
        for op in [read, FileOp::Get(path("x"))] {
            let cut = FileRunEnd {
                stdout_cut: true,
                ..end(0, b"Fxx", "")
            };
            assert_eq!(op.answer(cut).unwrap_err().code().0, "file_too_large");
        }
    }

    #[test]
    fn a_get_answers_a_file_or_a_listing_and_a_delete_says_not_empty() {
        let get = FileOp::Get(path("x"));
        assert_eq!(
            get.answer(end(0, b"Fhello", "")).unwrap(),
            FileAnswer::Read(b"hello".to_vec())
        );
        match get.answer(end(0, b"Da\t1\tf\t0\t644\0", "")).unwrap() {
            FileAnswer::Listed(entries) => assert_eq!(entries[0].name, "a"),
            other => panic!("{other:?}"),
        }
        assert_eq!(
            get.answer(end(ABSENT, b"", "")).unwrap_err().code().0,
            "file_not_found"
        );
        let delete = FileOp::Delete {
            path: path("d"),
            recursive: false,
        };
        assert_eq!(
            delete.answer(end(NOT_EMPTY, b"", "")).unwrap_err().code().0,
            "directory_not_empty"
        );
        assert_eq!(delete.answer(end(0, b"", "")).unwrap(), FileAnswer::Deleted);
    }
}
