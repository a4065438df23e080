//! Everything that can go wrong finding, reading or validating a profile. Each message names the
//! file (and for content errors the line and column) and says what to do next.

use std::fmt::Write as _;
use std::io;
use std::ops::Range;
use std::path::{Path, PathBuf};

#[derive(Debug, thiserror::Error)]
pub enum PolicyError {
    /// The file's content is wrong: bad TOML, an unknown key, a wrong type, a value out of range.
    #[error("{}:{line}:{column}: {message}; {hint}", .path.display())]
    Invalid {
        path: PathBuf,
        /// 1-based.
        line: usize,
        /// 1-based, counted in characters.
        column: usize,
        message: String,
        hint: String,
    },

    #[error(
        "profile `{name}` not found; looked for {name}.toml in {}; create one there \
         (e.g. ~/.config/airlock/profiles/{name}.toml) or pass --profile-file PATH \
         ('airlock policy list' lists the profiles there and the starters shipped with airlock)",
        list_dirs(.searched)
    )]
    NotFound {
        name: String,
        searched: Vec<PathBuf>,
    },

    /// The file exists (or was named explicitly) but could not be read. A profile we cannot read
    /// is an error, never a reason to fall back to another one.
    #[error("cannot read profile {}: {error}; check that it exists and is a readable file", .path.display())]
    Unreadable { path: PathBuf, error: io::Error },

    #[error(
        "invalid profile name `{name}`; a name uses only letters, digits, `_`, `-` and `.`, \
         and does not start with `.` (to load a file by path, pass --profile-file PATH)"
    )]
    InvalidName { name: String },

    #[error(
        "refusing profile {}: it lies inside the workspace {}; profiles are never read from \
         inside a workspace, because the sandboxed command can write there: move it to \
         ~/.config/airlock/profiles/",
        .profile.display(),
        .workspace.display()
    )]
    InsideWorkspace {
        profile: PathBuf,
        workspace: PathBuf,
    },

    #[error(
        "no starter profile `{name}`; the starters shipped with airlock are {} \
         ('airlock policy list' shows what each is for)",
        crate::starters::STARTERS.iter().map(|s| s.name).collect::<Vec<_>>().join(", ")
    )]
    NoStarter { name: String },
}

fn list_dirs(dirs: &[PathBuf]) -> String {
    if dirs.is_empty() {
        return "no directories (neither XDG_CONFIG_HOME nor HOME is set)".to_string();
    }
    let mut out = String::new();
    for (i, dir) in dirs.iter().enumerate() {
        if i > 0 {
            out.push_str(", ");
        }
        // Writing to a String cannot fail.
        let _ = write!(out, "{}", dir.display());
    }
    out
}

impl PolicyError {
    /// An [`PolicyError::Invalid`] located at the start of `span`, a byte range into `text`.
    pub(crate) fn invalid(
        origin: &Path,
        text: &str,
        span: Range<usize>,
        message: impl Into<String>,
        hint: impl Into<String>,
    ) -> PolicyError {
        let (line, column) = line_column(text, span.start);
        PolicyError::Invalid {
            path: origin.to_path_buf(),
            line,
            column,
            message: message.into(),
            hint: hint.into(),
        }
    }
}

/// 1-based line and column of byte `offset` in `text`. Columns count characters, not bytes,
/// because that is what editors show; an offset inside a character or past the end is clamped.
/// (Also how airlock's config file, read by core, points at its errors.)
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let bytes = text.as_bytes();
    let before = &bytes[..offset.min(bytes.len())];
    let line_start = before
        .iter()
        .rposition(|&b| b == b'\n')
        .map_or(0, |newline| newline + 1);
    let line = before.iter().filter(|&&b| b == b'\n').count() + 1;
    // UTF-8 continuation bytes look like 0b10xx_xxxx; every other byte starts a character.
    let column = before[line_start..]
        .iter()
        .filter(|&&b| b & 0xC0 != 0x80)
        .count()
        + 1;
    (line, column)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_column_is_one_based() {
        let text = "a = 1\nbb = 2\n\n  é = 3";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 4), (1, 5));
        assert_eq!(line_column(text, 5), (1, 6));
        assert_eq!(line_column(text, 6), (2, 1));
        assert_eq!(line_column(text, 11), (2, 6));
        assert_eq!(line_column(text, 13), (3, 1));
        assert_eq!(line_column(text, 16), (4, 3));
        // `é` is two bytes; the `=` after it is still the fifth character on the line.
        assert_eq!(line_column(text, 19), (4, 5));
        assert_eq!(line_column(text, 10_000), (4, 8));
    }

    #[test]
    fn not_found_lists_every_directory() {
        let err = PolicyError::NotFound {
            name: "ci".into(),
            searched: vec![
                "/home/u/.config/airlock/profiles".into(),
                "/etc/airlock/profiles".into(),
            ],
        };
        assert_eq!(
            err.to_string(),
            "profile `ci` not found; looked for ci.toml in /home/u/.config/airlock/profiles, \
             /etc/airlock/profiles; create one there (e.g. ~/.config/airlock/profiles/ci.toml) \
             or pass --profile-file PATH ('airlock policy list' lists the profiles there and \
             the starters shipped with airlock)"
        );
    }

    #[test]
    fn invalid_display_is_path_line_column_message_hint() {
        let err = PolicyError::invalid(
            Path::new("/p/ci.toml"),
            "x\nmemroy = 1",
            2..8,
            "unknown key `memroy` in [limits]",
            "expected one of memory, processes",
        );
        assert_eq!(
            err.to_string(),
            "/p/ci.toml:2:1: unknown key `memroy` in [limits]; expected one of memory, processes"
        );
    }
}
