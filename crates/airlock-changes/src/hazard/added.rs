//! Entries a profile adds to the tool-configuration table (`[apply] tool_config`): globs over
//! workspace paths, each with the reason a person gave.

use std::path::Path;

use globset::{GlobBuilder, GlobMatcher};

/// One entry as a profile names it: a glob and a one-line reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolEntry {
    /// Without a `/`: a name at any depth (and all under a directory of that name); with one:
    /// a path from the workspace's root (and all under it). `*` stays within a name, `**`
    /// crosses directories; compared without regard to case, as the built-in table is.
    pub path: String,
    pub reason: String,
}

/// How a pattern is compiled; the policy crate validates profiles with the same settings.
pub fn compile(pattern: &str) -> Result<GlobMatcher, globset::Error> {
    let anchored = pattern.trim_start_matches('/').trim_end_matches('/');
    GlobBuilder::new(anchored)
        .literal_separator(true)
        .case_insensitive(true)
        .backslash_escape(true)
        .build()
        .map(|glob| glob.compile_matcher())
}

/// A profile's entries, compiled.
#[derive(Debug, Default)]
pub struct AddedTools {
    entries: Vec<(GlobMatcher, bool, ToolEntry)>,
}

impl AddedTools {
    pub fn new(entries: &[ToolEntry]) -> Result<AddedTools, globset::Error> {
        let entries = entries
            .iter()
            .map(|entry| {
                let by_name = !entry.path.trim_end_matches('/').contains('/');
                Ok((compile(&entry.path)?, by_name, entry.clone()))
            })
            .collect::<Result<_, globset::Error>>()?;
        Ok(AddedTools { entries })
    }

    /// The first entry that names `path` (relative to the workspace): itself or a directory
    /// above it.
    pub fn matching(&self, path: &Path) -> Option<&ToolEntry> {
        let parts = super::names(path);
        self.entries
            .iter()
            .find(|(glob, by_name, _)| match by_name {
                true => parts.iter().any(|name| glob.is_match(name)),
                false => path
                    .ancestors()
                    .filter(|p| !p.as_os_str().is_empty())
                    .any(|p| glob.is_match(p)),
            })
            .map(|(_, _, entry)| entry)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn entry(path: &str) -> ToolEntry {
        ToolEntry {
            path: path.into(),
            reason: "test".into(),
        }
    }

    #[test]
    fn names_match_anywhere_and_paths_from_the_root() {
        let added =
            AddedTools::new(&[entry(".toolrc"), entry("deploy/*.yml"), entry("/hooks/")]).unwrap();
        let hit = |p: &str| added.matching(Path::new(p)).is_some();
        assert!(hit(".toolrc"));
        assert!(hit("a/b/.TOOLRC"));
        assert!(hit(".toolrc/inner"));
        assert!(hit("deploy/prod.yml"));
        assert!(!hit("deploy/sub/prod.yml"));
        assert!(!hit("x/deploy/prod.yml"));
        assert!(hit("hooks/pre"));
        assert!(!hit("src/hooks"));
        assert!(!hit("src/main.rs"));
        assert!(AddedTools::new(&[entry("a[")]).is_err());
    }
}
