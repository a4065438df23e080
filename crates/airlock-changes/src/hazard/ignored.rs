//! What `git status` will not show: paths the host repository's ignore rules hide, read as they
//! will be after the apply (the host's files overlaid by the change set's, so that a session
//! cannot hide its own file with a `.gitignore` it plants). Read with the `ignore` crate's
//! gitignore matcher; git itself is never run (its config can name programs).

use std::cell::RefCell;
use std::collections::HashMap;
use std::io::Read;
use std::os::unix::fs::FileTypeExt;
use std::path::{Path, PathBuf};
use std::rc::Rc;

use ignore::gitignore::{Gitignore, GitignoreBuilder};
use ignore::Match;

use super::is_one_of;

/// The most of one ignore file read; git reads any size, but no honest one is near this.
const MAX_IGNORE_FILE_BYTES: u64 = 16 << 20;

/// The ignore rules of the tree a session leads to.
pub struct Ignores<'a> {
    layer: &'a Path,
    host: &'a Path,
    /// `.gitignore` files of the directories between the workspace and the top of the
    /// repository it lies in (the sandbox cannot write them), deepest first.
    above: Vec<Gitignore>,
    /// `info/exclude` of the repository, then the user's global excludes.
    repository: Vec<Gitignore>,
    /// For each workspace directory asked about: the `.gitignore` files that bear on its
    /// entries (its own and its ancestors' that have rules), nearest first. Each directory's
    /// file is read once, and a deep tree costs no more per path than a shallow one.
    chains: RefCell<HashMap<PathBuf, Chain>>,
    /// Directories already judged: ignored themselves or below an ignored one.
    dirs: RefCell<HashMap<PathBuf, bool>>,
}

impl<'a> Ignores<'a> {
    /// The rules for `layer` over `host` (the canonical workspace), with the invoking user's
    /// global excludes file (see [`global_excludes`]).
    pub fn new(layer: &'a Path, host: &'a Path, global: Option<&Path>) -> Ignores<'a> {
        let top = repository_top(host);
        let mut ignores = Ignores {
            layer,
            host,
            above: Vec::new(),
            repository: Vec::new(),
            chains: RefCell::default(),
            dirs: RefCell::default(),
        };
        if let Some(top) = &top {
            ignores.above = host
                .ancestors()
                .skip(1)
                .take_while(|dir| dir.starts_with(top))
                .map(|dir| matcher(dir, read_host(&dir.join(".gitignore"))))
                .collect();
        }
        let top = top.unwrap_or_else(|| host.to_path_buf());
        let exclude = ignores.git_dir(&top).map(|dir| dir.join("info/exclude"));
        let exclude = exclude.and_then(|file| ignores.read(&file));
        ignores.repository = vec![
            matcher(&top, exclude),
            matcher(&top, global.and_then(|file| ignores.read(file))),
        ];
        ignores
    }

    /// Will `git status` leave `path` (relative to the workspace) out: is it, or a directory
    /// above it, ignored? As in git, nothing under an ignored directory is taken back in.
    pub fn is_ignored(&self, path: &Path, is_dir: bool) -> bool {
        let above = path
            .parent()
            .is_some_and(|p| !p.as_os_str().is_empty() && self.dir_ignored(p));
        above || self.decide(path, is_dir)
    }

    /// The topmost directory at or above `path` that git ignores: where the ignored tree that
    /// `path` lies in begins (`.venv`, `node_modules`), or None when no directory hides it (an
    /// ignored file on its own, or nothing ignored).
    pub fn ignored_root(&self, path: &Path, is_dir: bool) -> Option<PathBuf> {
        let mut prefix = PathBuf::new();
        let mut names = path.components().peekable();
        while let Some(name) = names.next() {
            prefix.push(name);
            let last = names.peek().is_none();
            if last && !is_dir {
                return None;
            }
            // Shortest first: the first one ignored is the top of the tree.
            if self.dir_ignored(&prefix) {
                return Some(prefix);
            }
        }
        None
    }

    fn dir_ignored(&self, dir: &Path) -> bool {
        if let Some(known) = self.dirs.borrow().get(dir) {
            return *known;
        }
        let answer = self.is_ignored(dir, true);
        self.dirs.borrow_mut().insert(dir.to_path_buf(), answer);
        answer
    }

    /// git's order: the `.gitignore` nearest the path first, then those above it, then
    /// `info/exclude`, then the global excludes; in each, the last matching line decides.
    fn decide(&self, path: &Path, is_dir: bool) -> bool {
        let full = self.host.join(path);
        let verdict = |m: &Gitignore| match m.matched(&full, is_dir) {
            Match::Ignore(_) => Some(true),
            Match::Whitelist(_) => Some(false),
            Match::None => None,
        };
        let chain = self.chain(path.parent().unwrap_or(Path::new("")));
        chain
            .iter()
            .map(|m| &**m)
            .chain(&self.above)
            .chain(&self.repository)
            .find_map(verdict)
            .unwrap_or(false)
    }

    /// The non-empty matchers of `dir` and its ancestors in the workspace, nearest first.
    fn chain(&self, dir: &Path) -> Chain {
        if let Some(known) = self.chains.borrow().get(dir) {
            return known.clone();
        }
        let file = self.read(&self.host.join(dir).join(".gitignore"));
        let own = matcher(&self.host.join(dir), file);
        let mut chain: Vec<Rc<Gitignore>> = Vec::new();
        if !own.is_empty() {
            chain.push(Rc::new(own));
        }
        if let Some(parent) = dir.parent() {
            chain.extend(self.chain(parent).iter().cloned());
        }
        let chain = Rc::new(chain);
        self.chains
            .borrow_mut()
            .insert(dir.to_path_buf(), chain.clone());
        chain
    }

    /// The text of a file as it will be after the apply: inside the workspace the layer's
    /// (a whiteout: none), else the host's. No symlink of the layer is followed, nor the file
    /// itself when a symlink (git does not follow a symlinked `.gitignore` either).
    fn read(&self, file: &Path) -> Option<String> {
        let Ok(inside) = file.strip_prefix(self.host) else {
            return read_host(file);
        };
        let in_layer = self.layer.join(inside);
        match std::fs::symlink_metadata(&in_layer) {
            Ok(meta) if meta.file_type().is_char_device() => None,
            Ok(_) if self.layer_path_is_plain(inside) => read_host(&in_layer),
            Ok(_) => None,
            Err(_) => read_host(file),
        }
    }

    fn layer_path_is_plain(&self, inside: &Path) -> bool {
        inside
            .ancestors()
            .skip(1)
            .filter(|p| !p.as_os_str().is_empty())
            .all(|p| {
                std::fs::symlink_metadata(self.layer.join(p)).is_ok_and(|m| m.file_type().is_dir())
            })
    }

    /// The git directory of the repository whose work tree starts at `top`: its `.git`
    /// directory, or the common directory a `.git` file leads to (linked worktrees keep
    /// `info/exclude` there).
    fn git_dir(&self, top: &Path) -> Option<PathBuf> {
        let dot_git = top.join(".git");
        if std::fs::symlink_metadata(&dot_git).is_ok_and(|m| m.is_dir()) {
            return Some(dot_git);
        }
        let text = self.read(&dot_git)?;
        let named = text.lines().next()?.strip_prefix("gitdir:")?.trim();
        let dir = top.join(named);
        match self.read(&dir.join("commondir")) {
            Some(common) => Some(dir.join(common.trim_end_matches(['\n', '\r']))),
            None => Some(dir),
        }
    }
}

type Chain = Rc<Vec<Rc<Gitignore>>>;

/// The nearest directory at or above `dir` that holds a `.git`: the top of the repository.
fn repository_top(dir: &Path) -> Option<PathBuf> {
    dir.ancestors()
        .find(|d| std::fs::symlink_metadata(d.join(".git")).is_ok())
        .map(Path::to_path_buf)
}

/// An ignore file's text. One too large to read whole is taken as hiding everything below its
/// directory: its rules past the bound are unknown, and git reads them (up to 100 MiB).
fn read_host(file: &Path) -> Option<String> {
    let bytes = read_bounded(file)?;
    match bytes.len() as u64 > MAX_IGNORE_FILE_BYTES {
        true => Some("*\n".into()),
        false => Some(String::from_utf8_lossy(&bytes).into_owned()),
    }
}

/// A git config file's text; none when too large to read whole.
fn read_config(file: &Path) -> Option<String> {
    let bytes = read_bounded(file)?;
    (bytes.len() as u64 <= MAX_IGNORE_FILE_BYTES)
        .then(|| String::from_utf8_lossy(&bytes).into_owned())
}

/// Up to one byte past the bound, so that a caller can tell a file that is over it.
fn read_bounded(file: &Path) -> Option<Vec<u8>> {
    let file = crate::node::open_regular(file).ok()?;
    let mut bytes = Vec::new();
    file.take(MAX_IGNORE_FILE_BYTES + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    Some(bytes)
}

/// A matcher of `text`'s lines, relative to `root`. A line the crate cannot read is left out, as
/// git leaves out a pattern it cannot use. Where git's patterns and the crate's globs differ,
/// each line is first rewritten ([`as_crate_glob`]) so that the crate hides at least what git
/// does: a review that misses an ignored file lets it through unseen.
fn matcher(root: &Path, text: Option<String>) -> Gitignore {
    let mut builder = GitignoreBuilder::new(root);
    let text = text.unwrap_or_default();
    // git skips a UTF-8 byte order mark at the top of the file.
    let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
    for line in text.lines().filter_map(as_crate_glob) {
        let _ = builder.add_line(None, &line);
    }
    builder.build().unwrap_or_else(|_| Gitignore::empty())
}

/// A git ignore line as a glob of the `ignore` crate that hides no less. Braces are literal to
/// git (the crate reads `{a,b}` as either): escaped. git knows POSIX classes (`[[:alpha:]]`),
/// the crate does not: in a line that hides, every bracket expression becomes `?` (any one
/// character, so more is hidden); a line that takes paths back in (`!`) with one is left out
/// (so that less is taken back).
fn as_crate_glob(line: &str) -> Option<String> {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        match c {
            '\\' => {
                out.push(c);
                out.extend(chars.next());
            }
            '{' | '}' => {
                out.push('\\');
                out.push(c);
            }
            _ => out.push(c),
        }
    }
    if !line.contains("[:") {
        return Some(out);
    }
    match line.starts_with('!') {
        true => None,
        false => Some(widen_brackets(&out)),
    }
}

/// Every bracket expression of a glob (`[...]`, POSIX classes inside included) as `?`.
fn widen_brackets(glob: &str) -> String {
    let chars: Vec<char> = glob.chars().collect();
    let mut out = String::with_capacity(glob.len());
    let mut i = 0;
    while i < chars.len() {
        match chars[i] {
            '\\' => {
                out.extend(&chars[i..(i + 2).min(chars.len())]);
                i += 2;
            }
            '[' => match bracket_end(&chars, i) {
                Some(end) => {
                    out.push('?');
                    i = end + 1;
                }
                None => {
                    out.push('[');
                    i += 1;
                }
            },
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    out
}

/// The index of the `]` that closes the bracket expression opening at `start`, as git's
/// wildmatch reads one: a leading `!` or `^`, a `]` first is a member, `[:name:]` inside.
fn bracket_end(chars: &[char], start: usize) -> Option<usize> {
    let mut i = start + 1;
    if matches!(chars.get(i), Some('!' | '^')) {
        i += 1;
    }
    if chars.get(i) == Some(&']') {
        i += 1;
    }
    while i < chars.len() {
        match chars[i] {
            ']' => return Some(i),
            '\\' => i += 2,
            '[' if chars.get(i + 1) == Some(&':') => {
                let close = (i + 2..chars.len().saturating_sub(1))
                    .find(|&j| chars[j] == ':' && chars[j + 1] == ']');
                i = close.map_or(i + 1, |j| j + 2);
            }
            _ => i += 1,
        }
    }
    None
}

/// The invoking user's global excludes file: `core.excludesFile` of their global git config
/// (`$XDG_CONFIG_HOME/git/config`, then `~/.gitconfig`, which wins), else
/// `$XDG_CONFIG_HOME/git/ignore` (`~/.config/git/ignore`). `include` directives are not followed.
pub fn global_excludes(home: Option<&Path>, xdg_config_home: Option<&Path>) -> Option<PathBuf> {
    let xdg = xdg_config_home
        .filter(|p| p.is_absolute())
        .map(Path::to_path_buf)
        .or_else(|| home.map(|h| h.join(".config")));
    let configs = [
        home.map(|h| h.join(".gitconfig")),
        xdg.as_ref().map(|x| x.join("git/config")),
    ];
    let named = configs
        .iter()
        .flatten()
        .find_map(|file| excludes_file_of(&read_config(file)?));
    match named {
        Some(path) => match path.strip_prefix("~/") {
            Some(rest) => home.map(|h| h.join(rest)),
            None => Some(PathBuf::from(path)),
        },
        None => xdg.map(|x| x.join("git/ignore")),
    }
}

/// `core.excludesFile` of a git config file's text: the last one set, as git takes it.
fn excludes_file_of(text: &str) -> Option<String> {
    let mut in_core = false;
    let mut found = None;
    for line in text.lines().map(str::trim) {
        if let Some(section) = line.strip_prefix('[') {
            let name = section.split([']', ' ', '"']).next().unwrap_or("");
            in_core = name.eq_ignore_ascii_case("core");
            continue;
        }
        let Some((key, value)) = line.split_once('=') else {
            continue;
        };
        if in_core && key.trim().eq_ignore_ascii_case("excludesfile") {
            let value = value.split(['#', ';']).next().unwrap_or("").trim();
            found = Some(value.trim_matches('"').to_string());
        }
    }
    found.filter(|v| !v.is_empty())
}

/// Where a project's tools find code to run without a person naming it: all of `node_modules`
/// (`npm run` puts `.bin` on PATH, `require` loads any package's files, `npm rebuild` runs
/// each package's lifecycle scripts), all of a virtualenv (`bin` is on PATH once activated;
/// its `lib` is imported), a `site-packages` or `dist-packages` directory (a `.pth` file there
/// runs at every start of Python, `sitecustomize.py` too), Python's bytecode cache (imported in
/// place of the source next to it).
pub fn in_auto_run_location(path: &Path) -> bool {
    let parts = super::names(path);
    let dirs = &parts[..parts.len().saturating_sub(1)];
    dirs.iter().any(|d| {
        is_one_of(
            d,
            &[
                "node_modules",
                ".venv",
                "venv",
                "site-packages",
                "dist-packages",
                "__pycache__",
            ],
        )
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_last_excludes_file_of_core_counts() {
        let text = "[user]\n\tname = x\n[core]\n\texcludesFile = ~/.ignore-a\n[Core]\nexcludesfile = \"/etc/ig\" # note\n";
        assert_eq!(excludes_file_of(text), Some("/etc/ig".into()));
        assert_eq!(excludes_file_of("[user]\nexcludesfile = /x\n"), None);
        let home = tempfile::tempdir().unwrap();
        std::fs::write(
            home.path().join(".gitconfig"),
            "[core]\nexcludesfile = ~/g\n",
        )
        .unwrap();
        assert_eq!(
            global_excludes(Some(home.path()), None),
            Some(home.path().join("g"))
        );
        assert_eq!(
            global_excludes(None, Some(Path::new("/x"))),
            Some(PathBuf::from("/x/git/ignore"))
        );
    }

    #[test]
    fn rules_are_read_as_they_will_be_after_the_apply() {
        let host = tempfile::tempdir().unwrap();
        let layer = tempfile::tempdir().unwrap();
        let global = tempfile::tempdir().unwrap();
        let (h, l) = (host.path(), layer.path());
        std::fs::create_dir_all(h.join(".git/info")).unwrap();
        std::fs::write(h.join(".git/info/exclude"), "*.local\n").unwrap();
        std::fs::write(h.join(".gitignore"), "node_modules/\n*.log\n!keep.log\n").unwrap();
        std::fs::write(global.path().join("ignore"), "*.swp\n").unwrap();
        // The session plants a .gitignore that hides its own file, and one in a new directory.
        std::fs::write(
            l.join(".gitignore"),
            "node_modules/\n*.log\n!keep.log\nsneaky.sh\n",
        )
        .unwrap();
        std::fs::create_dir_all(l.join("sub")).unwrap();
        std::fs::write(l.join("sub/.gitignore"), "/out\n").unwrap();
        let rules = Ignores::new(l, h, Some(&global.path().join("ignore")));
        let ignored = |p: &str| rules.is_ignored(Path::new(p), false);
        assert!(ignored("node_modules/.bin/jest"));
        assert!(ignored("a/node_modules/x/y.js"));
        assert!(ignored("debug.log"));
        assert!(!ignored("keep.log"));
        assert!(ignored("sneaky.sh"));
        assert!(ignored("sub/out"));
        assert!(!ignored("out"));
        assert!(ignored("x.local"));
        assert!(ignored("a/b.swp"));
        assert!(!ignored("src/main.rs"));
        // Nothing under an ignored directory is taken back in.
        std::fs::write(l.join("sub/.gitignore"), "/out\n!keep.log\n").unwrap();
        std::fs::write(l.join(".gitignore"), "build/\n").unwrap();
        let rules = Ignores::new(l, h, None);
        assert!(rules.is_ignored(Path::new("build/sub/.gitignore"), false));
        // A whiteout of the host's .gitignore: its rules are gone.
        let layer = tempfile::tempdir().unwrap();
        let whiteout = std::process::Command::new("mknod")
            .arg(layer.path().join(".gitignore"))
            .args(["c", "0", "0"])
            .status();
        if whiteout.is_ok_and(|s| s.success()) {
            let rules = Ignores::new(layer.path(), h, None);
            assert!(!rules.is_ignored(Path::new("debug.log"), false));
        }
    }

    /// Ignore files the `ignore` crate would read otherwise than git: each hides `run.sh` (or
    /// `{run.sh`) from git (checked with git's own `check-ignore` where git is installed).
    #[test]
    fn lines_git_reads_otherwise_than_the_crate_still_hide() {
        let cases: &[(&str, &str)] = &[
            // git drops a UTF-8 BOM at the top of the file.
            ("\u{feff}run.sh\n", "run.sh"),
            // Braces are literal to git; the crate reads them as alternatives.
            ("*.sh\n!{x,run.sh}\n", "run.sh"),
            ("{run.sh\n", "{run.sh"),
            // POSIX classes: git has them, the crate reads `[[:alpha:]` as a set.
            ("[[:alpha:]]un.sh\n", "run.sh"),
            ("[[:alpha:]][[:lower:]]n.sh\n", "run.sh"),
        ];
        for (text, name) in cases {
            let host = tempfile::tempdir().unwrap();
            let layer = tempfile::tempdir().unwrap();
            std::fs::create_dir(host.path().join(".git")).unwrap();
            std::fs::write(layer.path().join(".gitignore"), text).unwrap();
            let rules = Ignores::new(layer.path(), host.path(), None);
            assert!(
                rules.is_ignored(Path::new(name), false),
                "{text:?} should hide {name:?}"
            );
            git_agrees(layer.path(), text, name);
        }
    }

    /// Where git is installed: git itself hides `name` with `text` as the `.gitignore`.
    fn git_agrees(dir: &Path, text: &str, name: &str) {
        let repo = dir.join("repo");
        std::fs::create_dir_all(&repo).unwrap();
        std::fs::write(repo.join(".gitignore"), text).unwrap();
        let git = std::process::Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["init", "-q"])
            .status();
        if !git.is_ok_and(|s| s.success()) {
            return;
        }
        let out = std::process::Command::new("git")
            .arg("-C")
            .arg(&repo)
            .args(["check-ignore", "-q", "--no-index", name])
            .status()
            .unwrap();
        assert!(out.success(), "git does not hide {name:?} with {text:?}");
    }

    #[test]
    fn an_ignore_file_too_large_to_read_hides_everything_below_it() {
        let host = tempfile::tempdir().unwrap();
        let layer = tempfile::tempdir().unwrap();
        std::fs::create_dir(host.path().join(".git")).unwrap();
        let mut text = "# padding\n".repeat((MAX_IGNORE_FILE_BYTES / 10) as usize + 1);
        text.push_str("run.sh\n");
        std::fs::write(layer.path().join(".gitignore"), text).unwrap();
        let rules = Ignores::new(layer.path(), host.path(), None);
        assert!(rules.is_ignored(Path::new("run.sh"), false));
    }

    #[test]
    fn auto_run_locations() {
        assert!(in_auto_run_location(Path::new("node_modules/.bin/jest")));
        assert!(in_auto_run_location(Path::new("a/node_modules/.bin/x")));
        assert!(in_auto_run_location(Path::new(".venv/bin/python")));
        assert!(in_auto_run_location(Path::new("pkg/__pycache__/m.pyc")));
        // Code a tool loads, not only what it puts on PATH.
        assert!(in_auto_run_location(Path::new("node_modules/jest/bin")));
        assert!(in_auto_run_location(Path::new(
            "node_modules/jest-cli/build/run.js"
        )));
        assert!(in_auto_run_location(Path::new(
            "node_modules/esbuild/package.json"
        )));
        assert!(in_auto_run_location(Path::new(
            ".venv/lib/python3.11/site-packages/evil.pth"
        )));
        assert!(in_auto_run_location(Path::new(
            ".direnv/python-3.11/lib/python3.11/site-packages/sitecustomize.py"
        )));
        assert!(!in_auto_run_location(Path::new("node_modules")));
        assert!(!in_auto_run_location(Path::new("dist/app.js")));
        assert!(!in_auto_run_location(Path::new("src/node_modules.txt")));
    }
}
