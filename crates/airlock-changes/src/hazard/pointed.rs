//! Files a changed configuration runs by naming them: a workflow's `run: ./scripts/deploy.sh`,
//! a task's `"command": "tools/x.py"`, a `.git/config`'s `fsmonitor = hooks-x`. The script is
//! ordinary code by its name, but it runs when the configuration does, so it needs the same yes.
//!
//! Kept simple and exact: the configuration's text is cut into words at blanks, quotes,
//! brackets and the punctuation of config formats, and a word that is a relative path of the
//! change set (from the workspace's root, or from the configuration's directory; a leading `./`
//! dropped) names that path, and all the change set has under it. Not followed: absolute paths
//! and paths built from variables (`$GITHUB_WORKSPACE/x.sh`), a script that a named script runs
//! in turn, and an unchanged configuration that already runs a changed script (that is an
//! ordinary code change, shown by git diff as any other).

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;
use std::path::{Component, Path, PathBuf};

use crate::node::Kind;
use crate::scan::Change;

/// The most of one configuration read: no honest one is near this.
const CONFIG_READ_BYTES: u64 = 1 << 20;

/// Paths of a change set that a changed configuration which runs code names.
#[derive(Debug, Default)]
pub(super) struct RunByConfig {
    /// Each named path, with the first configuration that names it.
    named: BTreeMap<PathBuf, PathBuf>,
}

impl RunByConfig {
    /// For `changes` of `layer`: each change `runs_code` says is such a configuration is read
    /// (when a regular file of at most `size_limit` bytes).
    pub(super) fn new(
        layer: &Path,
        changes: &[Change],
        size_limit: u64,
        runs_code: impl Fn(&Change) -> bool,
    ) -> RunByConfig {
        // In path order, component by component: what lies under a path follows it.
        let written: BTreeSet<PathBuf> = changes
            .iter()
            .filter(|c| c.new.is_some())
            .map(|c| c.path.clone())
            .collect();
        let mut found = RunByConfig::default();
        let configs = changes.iter().filter(|c| {
            c.new
                .as_ref()
                .is_some_and(|n| n.kind == Kind::File && n.size <= size_limit)
                && runs_code(c)
        });
        for config in configs {
            let Some(text) = read_text(&layer.join(&config.path)) else {
                continue;
            };
            let dir = config.path.parent().unwrap_or(Path::new(""));
            for word in words(&text) {
                for named in [dir.join(word), PathBuf::from(word)] {
                    let Some(named) = normalised(&named) else {
                        continue;
                    };
                    if named == config.path || !written.contains(&named) {
                        continue;
                    }
                    let below = written
                        .range(named.clone()..)
                        .take_while(|p| p.starts_with(&named));
                    for path in below {
                        found
                            .named
                            .entry(path.to_path_buf())
                            .or_insert_with(|| config.path.clone());
                    }
                }
            }
        }
        found
    }

    /// The configuration that names `path`, if one does.
    pub(super) fn named_by(&self, path: &Path) -> Option<&Path> {
        self.named.get(path).map(PathBuf::as_path)
    }
}

/// The text of a file of the layer, read through no symlink, at most [`CONFIG_READ_BYTES`];
/// none when it is binary (a NUL in its first 8000 bytes, as git decides).
fn read_text(file: &Path) -> Option<String> {
    let file = crate::node::open_regular(file).ok()?;
    let mut bytes = Vec::new();
    file.take(CONFIG_READ_BYTES).read_to_end(&mut bytes).ok()?;
    let binary = bytes[..bytes.len().min(8000)].contains(&0);
    (!binary).then(|| String::from_utf8_lossy(&bytes).into_owned())
}

/// Characters that end a word of a configuration: blanks, quotes, brackets, and what YAML,
/// JSON, TOML, INI and shell put between a key or a command and a path.
fn ends_a_word(c: char) -> bool {
    c.is_whitespace() || "\"'`(){}[]<>,;=|&:".contains(c)
}

/// The words of `text` that may be relative paths, without a leading `./` or a trailing `/`.
fn words(text: &str) -> impl Iterator<Item = &str> {
    text.split(ends_a_word).filter_map(|word| {
        let mut word = word.trim_end_matches('/');
        while let Some(rest) = word.strip_prefix("./") {
            word = rest;
        }
        let plain = !word.is_empty() && word != "." && !word.starts_with('/');
        plain.then_some(word)
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
        let found: Vec<&str> = words(text).collect();
        for word in [
            "scripts/deploy.sh",
            "tools/x.py",
            "hooks/x",
            ".github/actions/a",
            "make",
        ] {
            assert!(found.contains(&word), "{word} in {found:?}");
        }
        assert!(!found.iter().any(|w| w.starts_with('/')), "{found:?}");
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
