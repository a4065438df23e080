//! Changes that can run code or open a hole the next time a person or a tool touches the
//! workspace, so `apply` writes them only when they are named (and some never).

use std::ffi::OsStr;
use std::path::{Component, Path};

use serde::Serialize;

use crate::node::{Kind, Node};
use crate::scan::Change;

/// Why a change needs a person's explicit yes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Hazard {
    /// `.git/hooks/*`: runs on the next commit, checkout, push.
    GitHook,
    /// Anything else git reads as a repository: all of a `.git` directory (config, `commondir`,
    /// `worktrees/`, `modules/`, `info/`, …) or a `.git` file pointing elsewhere, at any depth and
    /// under any name git takes for `.git`; a directory laid out as a git directory (`HEAD`,
    /// `config`, `objects`); `.gitmodules`, `.gitattributes`. They can name programs git runs
    /// (core.fsmonitor, core.sshCommand, filter drivers, submodule URLs), and `git status`
    /// shows none of it.
    GitConfig,
    /// `.envrc`, shell rc and profile files: run by the next shell or direnv.
    ShellStartup,
    /// Editor and agent configuration that runs commands or instructs the next agent
    /// (`.vscode/tasks.json`, `.claude/`, `.codex/`, `AGENTS.md`, …).
    EditorOrAgentConfig,
    /// CI pipelines: run with the repository's secrets on the next push.
    CiWorkflow,
    /// Configuration the project's tools read on ordinary commands, that runs code or redirects
    /// where code comes from (package managers, build tools, hook managers, environment
    /// loaders; the table is in `hazard/tools.rs`, and a profile's `[apply] tool_config` adds
    /// to it).
    ToolConfig,
    /// airlock's own configuration.
    AirlockConfig,
    /// setuid or setgid bits: never written.
    SetId,
    /// A device node: never written.
    Device,
    /// A fifo or a socket.
    Special,
    /// A symlink whose target leaves the workspace (absolute, or climbing out with `..`).
    SymlinkOutside,
    /// Larger than the size limit.
    Large,
    /// A name that deceives a reader or breaks tools: control characters, a leading `-`, bytes
    /// that are not UTF-8, bidirectional or invisible characters.
    DeceptiveName,
    /// Text whose content drives a terminal (escape sequences, a carriage return that rewrites
    /// its line, other control characters): shown raw, it can hide lines from the person
    /// reviewing the diff.
    TerminalControl,
    /// A file or directory that becomes writable by the group or by everyone: anyone else on the
    /// host could then change what the next build, commit or shell runs.
    LooseMode,
    /// New or changed content `git status` will not show (the repository's ignore rules hide
    /// it) that runs: executable, or in a place tools run from without being asked
    /// (`node_modules/`, a virtualenv, `site-packages/`, `__pycache__/`). Judged by the rules as
    /// they will be after the apply and as they are now, so that an apply leaving out the
    /// session's own `.gitignore` does not hide what was judged shown.
    HiddenFromGit,
    /// A new name that is an existing host name after case folding or Unicode normalisation
    /// (`makefile` beside `Makefile`, `café` in NFD beside `café` in NFC): one file on a
    /// case-insensitive or normalising filesystem, and tools pick one (make reads `makefile`
    /// first).
    NameCollision,
    /// A path with a dot-file or dot-directory in it that no table explains (neither git's,
    /// a shell's, an editor's or agent's, CI's, a tool's) and that is not a known-inert
    /// dot-file (`.gitignore`, `.editorconfig`, … in `hazard/dotpath.rs`): configuration that
    /// may run code, until a person names it. The tables cannot keep up with every tool; the
    /// default fails closed.
    UnexplainedDotPath,
    /// A file that a changed configuration which runs code (a CI workflow, an editor's or
    /// agent's tasks, a tool's configuration, a git hook, a shell startup file, an unexplained
    /// dot-file) names by its path: it runs when the configuration does, however ordinary its
    /// own name.
    RunByFlaggedConfig,
    /// A name that is not a name git or a tool treats specially (`.git`, `.github`,
    /// `CLAUDE.md`, `Makefile`, every name of the hazard tables) but looks the same, by
    /// Unicode's confusable characters (`.gіt` with a Cyrillic `і`), or looks the same as a host
    /// name in its directory: never written.
    ConfusableName,
}

impl Hazard {
    /// Hazards `apply` refuses even when named.
    pub fn never_written(self) -> bool {
        matches!(
            self,
            Hazard::SetId | Hazard::Device | Hazard::ConfusableName
        )
    }

    /// A hazard a table gives a path by its name, which explains a dot-file or dot-directory
    /// in it (no [`Hazard::UnexplainedDotPath`] then).
    fn explains_a_name(self) -> bool {
        self.runs_code() && self != Hazard::UnexplainedDotPath || self == Hazard::AirlockConfig
    }

    /// A configuration with this hazard runs code or commands: a path it names is
    /// [`Hazard::RunByFlaggedConfig`].
    pub fn runs_code(self) -> bool {
        matches!(
            self,
            Hazard::GitHook
                | Hazard::GitConfig
                | Hazard::ShellStartup
                | Hazard::EditorOrAgentConfig
                | Hazard::CiWorkflow
                | Hazard::ToolConfig
                | Hazard::UnexplainedDotPath
        )
    }

    pub fn describe(self) -> &'static str {
        match self {
            Hazard::GitHook => "git hook: runs on the next git command",
            Hazard::GitConfig => "git repository data or configuration: can make git run programs",
            Hazard::ShellStartup => "shell startup file: runs in the next shell",
            Hazard::EditorOrAgentConfig => {
                "editor or agent configuration: can run commands or instruct the next agent"
            }
            Hazard::CiWorkflow => "CI pipeline: runs with the repository's secrets",
            Hazard::ToolConfig => {
                "tool configuration: runs code or redirects sources for ordinary commands (npm, cargo, pip, git hooks, …)"
            }
            Hazard::AirlockConfig => "airlock configuration",
            Hazard::SetId => "setuid/setgid bit: never applied",
            Hazard::Device => "device node: never applied",
            Hazard::Special => "fifo or socket",
            Hazard::SymlinkOutside => "symlink pointing outside the workspace",
            Hazard::Large => "larger than the size limit",
            Hazard::DeceptiveName => {
                "name with control, invisible or bidirectional characters, a leading '-' or no valid UTF-8"
            }
            Hazard::LooseMode => "becomes writable by the group or by everyone",
            Hazard::TerminalControl => {
                "text with terminal control characters: can hide lines of the diff on a terminal"
            }
            Hazard::HiddenFromGit => {
                "ignored by git (not shown by git status) and executable or where tools run code from (node_modules, .venv, site-packages, __pycache__)"
            }
            Hazard::NameCollision => {
                "same name as a host path after case folding or Unicode normalisation: tools may read it instead"
            }
            Hazard::UnexplainedDotPath => {
                "dot-file or dot-directory no table explains: configuration that may run code until you name it"
            }
            Hazard::RunByFlaggedConfig => {
                "named by a changed configuration that runs code (CI, tasks, hooks, tool or unexplained dot-file config): runs when it does"
            }
            Hazard::ConfusableName => {
                "name that looks like a name git or a tool treats specially, or like a host name beside it (Unicode confusables): never applied"
            }
        }
    }
}

/// A name as a case-insensitive or HFS+ filesystem compares it: the code points HFS+ ignores
/// left out, lower case, trailing dots and spaces dropped (as Windows does). Hazard names are
/// matched in this form, so that `.ENVRC` or `.gitmodules.` is what it will be taken for there.
fn folded(name: &OsStr) -> Option<String> {
    let text = name.to_str()?;
    // NTFS: `NAME:STREAM` (`.git::$INDEX_ALLOCATION`) is NAME.
    let text = text.split(':').next().unwrap_or(text);
    let visible: String = text
        .chars()
        .filter(|c| !is_hfs_ignorable(*c))
        .collect::<String>()
        .to_lowercase();
    Some(visible.trim_end_matches(['.', ' ']).to_string())
}

/// Is `name`, folded, one of `list` (folded too)?
fn is_one_of(name: &OsStr, list: &[&str]) -> bool {
    folded(name).is_some_and(|name| list.iter().any(|entry| name == entry.to_lowercase()))
}

/// Characters no honest name needs: they hide, reorder or forge what a person reads. Controls,
/// Unicode's format characters (bidirectional marks and overrides, zero-width ones, the soft
/// hyphen, tags, variation selectors), blanks that show as nothing (Hangul fillers, the braille
/// blank) and spaces other than the plain one.
fn is_deceptive_char(c: char) -> bool {
    c.is_control()
        || is_hfs_ignorable(c)
        || matches!(c,
            '\u{00a0}' | '\u{00ad}' | '\u{034f}' | '\u{061c}' | '\u{115f}' | '\u{1160}'
            | '\u{1680}' | '\u{17b4}' | '\u{17b5}' | '\u{180b}'..='\u{180f}'
            | '\u{2000}'..='\u{200b}' | '\u{2028}' | '\u{2029}' | '\u{202f}'
            | '\u{205f}'..='\u{206f}' | '\u{2800}' | '\u{3000}' | '\u{3164}'
            | '\u{fe00}'..='\u{fe0f}' | '\u{ffa0}' | '\u{fff9}'..='\u{fffb}'
            | '\u{1bca0}'..='\u{1bca3}' | '\u{1d173}'..='\u{1d17a}'
            | '\u{e0000}'..='\u{e0fff}')
}

/// A name that deceives a reader or breaks tools (see [`Hazard::DeceptiveName`]).
pub fn is_deceptive_name(name: &OsStr) -> bool {
    match name.to_str() {
        None => true,
        Some(text) => text.starts_with('-') || text.chars().any(is_deceptive_char),
    }
}

/// Does git take this name for `.git`? Its own rules for case-insensitive and NTFS/HFS+
/// filesystems are the floor (`core.protectNTFS`, `core.protectHFS`): any case, trailing dots and
/// spaces, the 8.3 short name `git~1`, and the code points HFS+ ignores anywhere in a name. A
/// workspace may be copied or shared to such a filesystem, or served to a client on one.
pub fn is_git_dir_name(name: &OsStr) -> bool {
    is_one_of(name, &[".git", "git~1"])
}

/// NTFS 8.3 short names git treats as `.gitmodules` (git's `is_ntfs_dotgitmodules`): `gitmod~N`
/// and the hashed `gi7eba~N`.
fn is_gitmodules_short_name(name: &OsStr) -> bool {
    folded(name).is_some_and(|name| {
        ["gitmod~", "gi7eba~"].iter().any(|stem| {
            name.strip_prefix(stem)
                .is_some_and(|n| !n.is_empty() && n.bytes().all(|b| b.is_ascii_digit()))
        })
    })
}

/// Code points HFS+ leaves out when it compares names (git's `is_hfs_dotgit` list).
fn is_hfs_ignorable(c: char) -> bool {
    matches!(c,
        '\u{200c}'..='\u{200f}' | '\u{202a}'..='\u{202e}' | '\u{206a}'..='\u{206f}' | '\u{feff}')
}

fn names(path: &Path) -> Vec<&OsStr> {
    path.components()
        .filter_map(|c| match c {
            Component::Normal(name) => Some(name),
            _ => None,
        })
        .collect()
}

/// Is the path (its names) one of [`tools`]' table?
fn is_tool_config(parts: &[&OsStr]) -> bool {
    let Some((last, dirs)) = parts.split_last() else {
        return false;
    };
    let folded_last = folded(last).unwrap_or_default();
    tools::FILES
        .iter()
        .any(|(name, _)| is_one_of(last, &[name]))
        || tools::PREFIXES
            .iter()
            .any(|(prefix, _)| folded_last.starts_with(&prefix.to_lowercase()))
        || tools::PAIRS.iter().any(|(dir, file, _)| {
            dirs.last().is_some_and(|d| is_one_of(d, &[dir])) && is_one_of(last, &[file])
        })
        || tools::DIRS
            .iter()
            .any(|(dir, _)| parts.iter().any(|p| is_one_of(p, &[dir])))
}

/// Hazards of a path, from its name alone.
pub fn path_hazards(path: &Path) -> Vec<Hazard> {
    let parts = names(path);
    let mut found = Vec::new();
    let Some(last) = parts.last().copied() else {
        return found;
    };
    if parts.iter().any(|name| is_deceptive_name(name)) {
        found.push(Hazard::DeceptiveName);
    }
    if parts
        .iter()
        .any(|name| confusable::spoofs_a_special_name(name))
    {
        found.push(Hazard::ConfusableName);
    }
    found.extend(git_hazard(&parts));
    if is_in(last, agents::SHELL_STARTUP) {
        found.push(Hazard::ShellStartup);
    }
    if is_agent_config(&parts) {
        found.push(Hazard::EditorOrAgentConfig);
    }
    if is_ci(&parts) {
        found.push(Hazard::CiWorkflow);
    }
    if is_tool_config(&parts) {
        found.push(Hazard::ToolConfig);
    }
    if parts.iter().any(|p| is_one_of(p, &[".airlock"])) || has_pair(&parts, "airlock", "profiles")
    {
        found.push(Hazard::AirlockConfig);
    }
    let explained = found.iter().any(|hazard| hazard.explains_a_name());
    if !explained && dotpath::has_unexplained_dot_name(&parts) {
        found.push(Hazard::UnexplainedDotPath);
    }
    found
}

/// Is `name`, folded, one of the table's names?
fn is_in(name: &OsStr, table: &[(&str, &str)]) -> bool {
    folded(name).is_some_and(|name| table.iter().any(|(entry, _)| name == entry.to_lowercase()))
}

/// A directory named `a` holding one named `b`, anywhere in the path.
fn has_pair(parts: &[&OsStr], a: &str, b: &str) -> bool {
    parts
        .windows(2)
        .any(|w| is_one_of(w[0], &[a]) && is_one_of(w[1], &[b]))
}

/// Does a directory above the last name have one of the table's names?
fn in_dir_of(parts: &[&OsStr], table: &[(&str, &str)]) -> bool {
    parts[..parts.len().saturating_sub(1)]
        .iter()
        .any(|p| is_in(p, table))
}

/// The git hazard of a path: a hook, or anything else git reads as a repository.
fn git_hazard(parts: &[&OsStr]) -> Option<Hazard> {
    let last = parts.last()?;
    match parts.iter().position(|name| is_git_dir_name(name)) {
        Some(at)
            if parts
                .get(at + 1)
                .is_some_and(|next| is_one_of(next, &["hooks"])) =>
        {
            Some(Hazard::GitHook)
        }
        Some(_) => Some(Hazard::GitConfig),
        None if is_one_of(last, &[".gitmodules", ".gitattributes"])
            || is_gitmodules_short_name(last) =>
        {
            Some(Hazard::GitConfig)
        }
        None => None,
    }
}

/// Is the path an editor's or an agent's configuration ([`agents`]' tables)?
fn is_agent_config(parts: &[&OsStr]) -> bool {
    let Some(last) = parts.last() else {
        return false;
    };
    let folded_last = folded(last).unwrap_or_default();
    let under =
        |dir: &str, table: &[(&str, &str)]| table.iter().any(|(sub, _)| has_pair(parts, dir, sub));
    is_in(last, agents::AGENT_FILES)
        || agents::AGENT_PREFIXES
            .iter()
            .any(|(prefix, _)| folded_last.starts_with(&prefix.to_lowercase()))
        || agents::AGENT_SUFFIXES
            .iter()
            .any(|(suffix, _)| folded_last.ends_with(&suffix.to_lowercase()))
        || in_dir_of(parts, agents::AGENT_DIRS)
        || is_in(last, agents::AGENT_DIRS)
        || under(".github", agents::GITHUB_AGENT_DIRS)
        || under(".gitlab", agents::GITLAB_AGENT_DIRS)
}

/// CI: workflows, and what they run without being executables (composite actions under
/// .github/actions, GitLab CI includes under .gitlab/ci).
fn is_ci(parts: &[&OsStr]) -> bool {
    let Some(last) = parts.last() else {
        return false;
    };
    has_pair(parts, ".github", "workflows")
        || has_pair(parts, ".github", "actions")
        || has_pair(parts, ".gitlab", "ci")
        || in_dir_of(parts, agents::CI_DIRS)
        || is_in(last, agents::CI_DIRS)
        || is_in(last, agents::CI_FILES)
}

/// Does a symlink at `path` (relative to the workspace) with `target` point outside it?
pub fn symlink_leaves(path: &Path, target: &OsStr) -> bool {
    let target = Path::new(target);
    if target.is_absolute() {
        return true;
    }
    // Depth of the link's directory below the workspace root, then walk the target.
    let mut depth = names(path).len() as i64 - 1;
    for component in target.components() {
        match component {
            Component::ParentDir => {
                depth -= 1;
                if depth < 0 {
                    return true;
                }
            }
            Component::Normal(_) => depth += 1,
            _ => {}
        }
    }
    false
}

/// Every hazard of one change in the tree its session leads to: [`hazards`], whether it lies in
/// a directory laid out as a git directory, and whether its text drives a terminal.
pub fn hazards_in(change: &Change, size_limit: u64, tree: &Tree) -> Vec<Hazard> {
    let mut found = hazards(change, size_limit);
    let git = found.contains(&Hazard::GitConfig) || found.contains(&Hazard::GitHook);
    if !git && tree.contains(&change.path) {
        found.push(Hazard::GitConfig);
    }
    let text = change
        .new
        .as_ref()
        .is_some_and(|n| n.kind == Kind::File && n.size <= size_limit);
    if text && tree.drives_a_terminal(&change.path) {
        found.push(Hazard::TerminalControl);
    }
    found.sort();
    found
}

/// Every hazard of one change, judged on the session's side (what would be written), by its
/// name and what it is.
pub fn hazards(change: &Change, size_limit: u64) -> Vec<Hazard> {
    let mut found = path_hazards(&change.path);
    if let Some(new) = &change.new {
        found.extend(node_hazards(&change.path, new, size_limit));
        if becomes_writable_by_others(change.old.as_ref(), new) {
            found.push(Hazard::LooseMode);
        }
        let target = new.target.as_ref().map(|t| t.as_encoded_bytes());
        if new.kind == Kind::Symlink && target.is_some_and(has_terminal_controls) {
            found.push(Hazard::TerminalControl);
        }
    }
    found.sort();
    found.dedup();
    found
}

/// Group or world write bits the host's entry did not have (all of them, for a new entry).
/// Symlinks' modes mean nothing.
fn becomes_writable_by_others(old: Option<&Node>, new: &Node) -> bool {
    const OTHERS_WRITE: u32 = 0o022;
    let before = old.filter(|o| o.kind == new.kind).map_or(0, |o| o.mode);
    new.kind != Kind::Symlink && new.mode & OTHERS_WRITE & !before != 0
}

fn node_hazards(path: &Path, node: &Node, size_limit: u64) -> Vec<Hazard> {
    let mut found = Vec::new();
    if node.mode & 0o6000 != 0 {
        found.push(Hazard::SetId);
    }
    match node.kind {
        Kind::CharDevice | Kind::BlockDevice => found.push(Hazard::Device),
        Kind::Fifo | Kind::Socket => found.push(Hazard::Special),
        Kind::Symlink
            if node
                .target
                .as_deref()
                .is_some_and(|target| symlink_leaves(path, target)) =>
        {
            found.push(Hazard::SymlinkOutside)
        }
        Kind::File if node.size > size_limit => found.push(Hazard::Large),
        _ => {}
    }
    found
}

mod added;
mod agents;
mod aliases;
mod collide;
mod confusable;
mod dotpath;
mod ignored;
mod leads;
mod pointed;
mod review;
mod tools;
mod tree;
pub use added::{compile as compile_tool_pattern, AddedTools, ToolEntry};
pub use aliases::host_links;
pub use ignored::{global_excludes, in_auto_run_location, Ignores};
pub use leads::{Layout, Leads, Shape, Tree as LinkTree, STEP_BUDGET};
pub use review::{Review, Setup, Verdict};
pub use tree::{has_terminal_controls, Tree};

#[cfg(test)]
mod tests;
