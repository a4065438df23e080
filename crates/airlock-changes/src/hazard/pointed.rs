//! Files a changed configuration runs by naming them: a workflow's `run: ./scripts/deploy.sh`,
//! a task's `"command": "tools/x.py"`, a `.git/config`'s `fsmonitor = hooks-x`. The script is
//! ordinary code by its name, but it runs when the configuration does, so it needs the same yes.
//!
//! The configuration's text (NUL bytes and all: shells and git read past them) is cut into
//! words at blanks, brackets and the punctuation of config formats; quotes and backslashes
//! inside a word are dropped, as a shell drops them. A word names a path of the change set (and
//! all the change set has under it, a directory the host has already included) when it is that
//! path from the workspace's root or from the configuration's directory, when a part of it
//! after a `/` is (`$GITHUB_WORKSPACE/scripts/x.sh`), when it is a file name with an extension
//! that a changed file has anywhere (`cd scripts && ./x.sh`, a `working-directory`), when it is
//! a Python module (`-m tools.mod`), or when it is a pattern (`scripts/*.sh`) that matches. A
//! configuration too large to read whole names every changed script and executable.
//!
//! Best effort against an adversary, which it is: a path built at run time (`$(echo …)`, a
//! variable's value), a script that a named script runs in turn, and an unchanged
//! configuration that already runs a changed script (an ordinary code change, shown by git diff
//! as any other) are not followed. The configuration itself needs a person's yes, and says what
//! it runs to the person who reads it.

use std::collections::{BTreeMap, BTreeSet};
use std::ffi::OsStr;
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use crate::node::Kind;
use crate::scan::Change;

/// The most of one configuration read: no honest one is near this.
const CONFIG_READ_BYTES: u64 = 1 << 20;

/// Extensions of files that are programs by their name.
const SCRIPT_EXTENSIONS: &[&str] = &[
    "sh", "bash", "zsh", "fish", "ps1", "py", "rb", "pl", "js", "mjs", "cjs", "ts", "php", "lua",
];

/// Paths of a change set that a changed configuration which runs code names.
#[derive(Debug, Default)]
pub(super) struct RunByConfig {
    /// Each named path, with the first configuration that names it.
    named: BTreeMap<PathBuf, PathBuf>,
}

/// The change set's written paths, as the words of a configuration are looked up in it.
struct Written {
    /// In path order, component by component: what lies under a path follows it.
    paths: BTreeSet<PathBuf>,
    /// File names, each with the changed files that have it.
    by_name: BTreeMap<String, Vec<PathBuf>>,
    /// Changed files that are programs by their mode or their name.
    programs: BTreeSet<PathBuf>,
}

impl Written {
    fn of(changes: &[Change]) -> Written {
        let mut written = Written {
            paths: BTreeSet::new(),
            by_name: BTreeMap::new(),
            programs: BTreeSet::new(),
        };
        for change in changes {
            let Some(new) = &change.new else { continue };
            written.paths.insert(change.path.clone());
            if new.kind != Kind::File {
                continue;
            }
            if let Some(name) = change.path.file_name().and_then(OsStr::to_str) {
                written
                    .by_name
                    .entry(name.to_string())
                    .or_default()
                    .push(change.path.clone());
            }
            if new.mode & 0o111 != 0 || is_script_name(&change.path) {
                written.programs.insert(change.path.clone());
            }
        }
        written
    }

    /// `named` and what the change set has under it; when `named` is not changed itself (a
    /// directory the host has: `hooksPath = githooks`), only the programs under it, or every
    /// word that names a directory (`src`) would hold back all of its changes.
    fn at_or_under<'w>(&'w self, named: &'w Path) -> impl Iterator<Item = &'w PathBuf> + 'w {
        let changed = self.paths.contains(named);
        self.paths
            .range(named.to_path_buf()..)
            .take_while(move |p| p.starts_with(named))
            .filter(move |p| changed || self.programs.contains(*p))
    }

    /// The changed paths `word`, a word of the configuration at `config`, names; a directory
    /// the host has, only when `directories` (see [`Written::at_or_under`]).
    fn named_by_word(&self, config: &Path, word: &str, directories: bool) -> Vec<PathBuf> {
        let dir = config.parent().unwrap_or(Path::new(""));
        let mut found = Vec::new();
        let look = |found: &mut Vec<PathBuf>, candidate: &Path| {
            if let Some(named) = normalised(candidate) {
                if directories || self.paths.contains(&named) {
                    found.extend(self.at_or_under(&named).cloned());
                }
            }
        };
        if word.contains(['*', '?']) {
            for path in &self.paths {
                let text = path.to_string_lossy();
                let relative = path.strip_prefix(dir).ok().map(|p| p.to_string_lossy());
                if wildcard(word, &text) || relative.is_some_and(|r| wildcard(word, &r)) {
                    found.push(path.clone());
                }
            }
            return found;
        }
        if !word.starts_with('/') {
            look(&mut found, &dir.join(word));
            look(&mut found, Path::new(word));
        }
        // Every part after a '/': what a variable (`${workspaceFolder}/x.sh`) or an absolute
        // prefix led to.
        for (at, _) in word.match_indices('/') {
            look(&mut found, Path::new(&word[at + 1..]));
        }
        if !word.contains('/') {
            // A program's file name with an extension, wherever the command is run from.
            if word
                .rfind('.')
                .is_some_and(|dot| dot > 0 && dot + 1 < word.len())
            {
                if let Some(paths) = self.by_name.get(word) {
                    let programs = paths.iter().filter(|p| self.programs.contains(*p));
                    found.extend(programs.cloned());
                }
            }
            // A Python module: `tools.mod` is tools/mod.py or the package tools/mod.
            if word.contains('.') && word.split('.').all(is_identifier) {
                let module = word.replace('.', "/");
                look(&mut found, Path::new(&format!("{module}.py")));
                look(&mut found, Path::new(&module));
            }
        }
        found
    }
}

impl RunByConfig {
    /// For `changes` of `layer`: each change `runs_code` says is such a configuration is read
    /// (when a regular file of at most `size_limit` bytes).
    pub(super) fn new(
        layer: &Path,
        changes: &[Change],
        size_limit: u64,
        runs_code: impl Fn(&Change) -> Option<bool>,
    ) -> RunByConfig {
        let written = Written::of(changes);
        let mut found = RunByConfig::default();
        let configs = changes.iter().filter_map(|c| {
            let file = c
                .new
                .as_ref()
                .is_some_and(|n| n.kind == Kind::File && n.size <= size_limit);
            file.then(|| runs_code(c)).flatten().map(|dirs| (c, dirs))
        });
        for (config, directories) in configs {
            let Some((text, whole)) = read_text(&layer.join(&config.path)) else {
                continue;
            };
            let mut named: Vec<PathBuf> = words(&text)
                .flat_map(|word| written.named_by_word(&config.path, &word, directories))
                .collect();
            if !whole {
                named.extend(written.programs.iter().cloned());
            }
            for path in named.into_iter().filter(|p| *p != config.path) {
                found
                    .named
                    .entry(path)
                    .or_insert_with(|| config.path.clone());
            }
        }
        found
    }

    /// The configuration that names `path`, if one does.
    pub(super) fn named_by(&self, path: &Path) -> Option<&Path> {
        self.named.get(path).map(PathBuf::as_path)
    }
}

fn is_script_name(path: &Path) -> bool {
    path.extension()
        .and_then(OsStr::to_str)
        .is_some_and(|ext| SCRIPT_EXTENSIONS.contains(&ext.to_ascii_lowercase().as_str()))
}

fn is_identifier(part: &str) -> bool {
    let mut chars = part.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Does `pattern` (`*` any run of characters but `/`, `?` one) match all of `text`?
fn wildcard(pattern: &str, text: &str) -> bool {
    let (p, t): (Vec<char>, Vec<char>) = (pattern.chars().collect(), text.chars().collect());
    // The classic two-pointer match, backtracking to the last `*`.
    let (mut pi, mut ti, mut star, mut mark) = (0, 0, None, 0);
    while ti < t.len() {
        if pi < p.len() && (p[pi] == '?' && t[ti] != '/' || p[pi] == t[ti]) {
            pi += 1;
            ti += 1;
        } else if pi < p.len() && p[pi] == '*' {
            star = Some(pi);
            mark = ti;
            pi += 1;
        } else if let Some(at) = star.filter(|_| t[mark] != '/') {
            pi = at + 1;
            mark += 1;
            ti = mark;
        } else {
            return false;
        }
    }
    p[pi..].iter().all(|c| *c == '*')
}

/// The text of a file of the layer, read through no symlink, at most [`CONFIG_READ_BYTES`]
/// (lossily: a NUL or a byte that is not UTF-8 stops no reader of configurations), and whether
/// that was all of it.
fn read_text(file: &Path) -> Option<(String, bool)> {
    let file = crate::node::open_regular(file).ok()?;
    let mut bytes = Vec::new();
    file.take(CONFIG_READ_BYTES + 1)
        .read_to_end(&mut bytes)
        .ok()?;
    let whole = bytes.len() as u64 <= CONFIG_READ_BYTES;
    bytes.truncate(CONFIG_READ_BYTES as usize);
    Some((String::from_utf8_lossy(&bytes).into_owned(), whole))
}

/// Characters that end a word of a configuration: blanks, controls (NUL among them), brackets,
/// and what YAML, JSON, TOML, INI and shell put between a key or a command and a path.
fn ends_a_word(c: char) -> bool {
    c.is_whitespace() || c.is_control() || "(){}[]<>,;=|&:".contains(c)
}

/// The words of `text` that may be relative paths: quotes and backslashes dropped (as a shell
/// reads `scr"ipts/x.sh"` or `x\.sh`), without a leading `./` or a trailing `/`.
fn words(text: &str) -> impl Iterator<Item = String> {
    // JSON's escaped slash, `scripts\u002fx.sh`, is a slash to the program that reads it.
    let text = text.replace("\\u002f", "/").replace("\\u002F", "/");
    let words: Vec<String> = text.split(ends_a_word).map(str::to_string).collect();
    words.into_iter().filter_map(|word| {
        let word: String = word.chars().filter(|c| !"\"'`\\".contains(*c)).collect();
        let mut word = word.trim_end_matches('/');
        while let Some(rest) = word.strip_prefix("./") {
            word = rest;
        }
        let plain = !word.is_empty() && word != "." && word != "/";
        plain.then(|| word.to_string())
    })
}

/// `path` with `.` and `..` taken away, or None when it climbs out of the workspace.
fn normalised(path: &Path) -> Option<PathBuf> {
    let mut out = PathBuf::new();
    for component in path.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::CurDir => {}
            Component::ParentDir if out.pop() => {}
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_that_may_be_paths() {
        let text = "run: ./scripts/deploy.sh --to prod\n\"command\": \"tools/x.py\",\nfsmonitor = hooks/x\nuses: ./.github/actions/a/\n  - bash -c 'make  build'\n/usr/bin/env";
        let found: Vec<String> = words(text).collect();
        for word in [
            "scripts/deploy.sh",
            "tools/x.py",
            "hooks/x",
            ".github/actions/a",
            "make",
        ] {
            assert!(found.iter().any(|w| w == word), "{word} in {found:?}");
        }
        // An absolute word is kept: what follows a '/' in it may be a workspace path.
        assert!(found.iter().any(|w| w == "/usr/bin/env"), "{found:?}");
    }

    fn written(paths: &[&str]) -> Written {
        let mut written = Written {
            paths: paths.iter().map(PathBuf::from).collect(),
            by_name: BTreeMap::new(),
            // All of them, as if executable.
            programs: paths.iter().map(PathBuf::from).collect(),
        };
        for path in paths {
            let name = Path::new(path).file_name().unwrap().to_str().unwrap();
            written
                .by_name
                .entry(name.to_string())
                .or_default()
                .push(PathBuf::from(path));
        }
        written
    }

    /// The scripts the workflow below names, one way each.
    const NAMED: &[&str] = &[
        "scripts/x1.sh",
        "scripts/x2.sh",
        "scripts/x3.sh",
        "scripts/g7.sh",
        "tools/mod8.py",
        "githooks/pre-commit",
        "scripts/x9.sh",
        "ci/x10.sh",
        "scripts/x11.sh",
        "scripts/x12.sh",
    ];

    /// What the reviewer of the first version found went past it, each named now.
    #[test]
    fn ordinary_ways_of_naming_a_script_name_it() {
        let set = written(NAMED);
        let workflow = Path::new(".github/workflows/ci.yml");
        let text = "#\0 run: ./x1.sh\nbash scr\"ipts/x2.sh\" scripts/x3\\.sh\nfor f in scripts/g*.sh\npython -m tools.mod8\nhooksPath = githooks\ncd scripts && ./x9.sh\n$GITHUB_WORKSPACE/ci/x10.sh\n\"command\": \"${workspaceFolder}/scripts/x11.sh\"\nscripts\\u002fx12.sh";
        let named: BTreeSet<PathBuf> = words(text)
            .flat_map(|w| set.named_by_word(workflow, &w, true))
            .collect();
        for path in NAMED {
            assert!(named.contains(Path::new(path)), "{path} not in {named:?}");
        }
    }

    /// An editor's settings name directories where to look, not what to run: the programs of
    /// a host directory named there are not held back, nor a file that is no program.
    #[test]
    fn settings_that_name_a_directory_hold_back_nothing_under_it() {
        let mut set = written(&["src/app.py", "README.md"]);
        set.programs.remove(Path::new("README.md"));
        let settings = Path::new(".vscode/settings.json");
        let text = "\"extraPaths\": [\"src\"], \"open\": \"README.md\"";
        let named: Vec<PathBuf> = words(text)
            .flat_map(|w| set.named_by_word(settings, &w, false))
            .collect();
        assert_eq!(
            named,
            [PathBuf::from("README.md")],
            "named by its path, as written"
        );
        let mut elsewhere = written(&["docs/README.md"]);
        elsewhere.programs.clear();
        let by_name = elsewhere.named_by_word(Path::new("ci/x.yml"), "README.md", true);
        assert!(
            by_name.is_empty(),
            "no program: not by its name from elsewhere"
        );
    }

    #[test]
    fn a_pattern_matches_within_one_directory() {
        assert!(wildcard("scripts/g*.sh", "scripts/go.sh"));
        assert!(wildcard("scripts/?o.sh", "scripts/go.sh"));
        assert!(!wildcard("scripts/*.sh", "scripts/sub/go.sh"));
        assert!(!wildcard("*.sh", "a/b.sh"));
        assert!(wildcard("*", "anything"));
    }

    #[test]
    fn paths_are_taken_from_the_root_and_from_the_configuration() {
        assert_eq!(
            normalised(Path::new(".github/workflows/../../scripts/x.sh")),
            Some(PathBuf::from("scripts/x.sh"))
        );
        assert_eq!(normalised(Path::new("../x")), None);
        assert_eq!(normalised(Path::new("a/..")), None);
    }
}
