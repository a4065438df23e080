//! The principle behind the tables: a dot-file or dot-directory is where tools keep their
//! configuration, and the tables cannot keep up with every tool. So a path with one in it that no
//! table explains is configuration that may run code until a person names it
//! ([`super::Hazard::UnexplainedDotPath`]), unless it is one of the few dot-files known to run
//! nothing. The list grows by research, one reason a line; the default fails closed.

use std::ffi::OsStr;

use super::{folded, is_in};

/// Dot-files that run nothing, wherever they are. Only files: a dot-directory holds whatever a
/// tool puts in it.
pub(super) const KNOWN_INERT: &[(&str, &str)] = &[
    (
        ".gitignore",
        "git: patterns of paths git status leaves out; what it hides is judged apart (hidden_from_git)",
    ),
    (".gitkeep", "an empty marker that keeps a directory in git; nothing reads it"),
    (".keep", "an empty marker that keeps a directory in git; nothing reads it"),
    (
        ".editorconfig",
        "EditorConfig: indentation, charset, line endings; no key names a program",
    ),
    (
        ".mailmap",
        "git: maps authors' names and emails in log and shortlog; runs nothing",
    ),
    (
        ".git-blame-ignore-revs",
        "git blame: commits to skip, read only when blame.ignoreRevsFile names it",
    ),
    (".nojekyll", "GitHub Pages: an empty marker that turns Jekyll off"),
    (".prettierignore", "Prettier: patterns of files it leaves alone"),
    (".eslintignore", "ESLint: patterns of files it leaves alone"),
];

/// Looked at and not called inert, so that the next reader need not look again.
#[allow(dead_code)]
pub(super) const NOT_INERT: &[(&str, &str)] = &[
    (
        ".prettierrc, .eslintrc.json, .stylelintrc",
        "JSON or YAML, but they name plugins and parsers, which are code the tool loads",
    ),
    (
        ".dockerignore, .npmignore",
        "patterns, but taking one back in puts a host file (.env, a key) into an image or a published package",
    ),
    (
        ".nvmrc, .python-version, .node-version",
        "select a version, which version managers (mise, asdf) may install on cd",
    ),
    (
        ".github/CODEOWNERS, .github/dependabot.yml",
        "who must review, and registries and commands of update jobs",
    ),
    (
        ".github/ISSUE_TEMPLATE/",
        "text only, but not researched further: named to apply, like the rest of .github",
    ),
];

/// Does a name begin with a dot, as a reader sees it (folded: code points HFS+ ignores in front
/// of the dot do not hide it)?
fn is_dot_name(name: &OsStr) -> bool {
    name.as_encoded_bytes().first() == Some(&b'.')
        || folded(name).is_some_and(|name| name.starts_with('.'))
}

/// Has the path a dot-directory, or a last name that is a dot-file not known to be inert?
pub(super) fn has_unexplained_dot_name(parts: &[&OsStr]) -> bool {
    let Some((last, dirs)) = parts.split_last() else {
        return false;
    };
    dirs.iter().any(|dir| is_dot_name(dir)) || is_dot_name(last) && !is_known_inert(last)
}

/// One of [`KNOWN_INERT`], in any case (a case-insensitive filesystem's spelling is the same
/// file), but not by NTFS's `NAME:STREAM` reading that folding allows: on Linux
/// `.gitignore:x` is another file, which nothing reads as `.gitignore`.
fn is_known_inert(name: &OsStr) -> bool {
    !name.as_encoded_bytes().contains(&b':') && is_in(name, KNOWN_INERT)
}
