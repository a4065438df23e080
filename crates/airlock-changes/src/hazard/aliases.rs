//! Hazardous names that are symlinks into the workspace: `.claude -> config/claude`,
//! `AGENTS.md -> docs/ai.md`, `.git/hooks -> ../githooks`. A session that writes through one
//! changes the file at the target's path, whose own name says nothing; yet the next agent or
//! git reads it through the hazardous name. So a change at or under a target takes the hazards
//! its path would have under the name that reaches it, with that name as the reason.
//!
//! The aliases are the host workspace's symlinks (walked once per review; not below `.git`'s
//! object store) and the session's own new ones. A target is resolved by its text alone, from
//! the link's directory; a chain of links, or a target through another link, is not followed.

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Component, Path, PathBuf};

use super::{path_hazards, Hazard};
use crate::node::Kind;
use crate::scan::Change;

/// Entries a host walk visits at most: a workspace is not near this; one that is, is judged by
/// the entries seen.
const WALK_LIMIT: usize = 2_000_000;

/// Hazardous symlinks of the tree a change set leads to, by their targets.
#[derive(Debug, Default)]
pub(super) struct Aliases {
    /// Target (workspace-relative) → the links that reach it.
    by_target: BTreeMap<PathBuf, Vec<PathBuf>>,
}

impl Aliases {
    /// The host's hazardous symlinks under `host`, and the session's new ones in `changes`.
    pub(super) fn new(host: &Path, changes: &[Change]) -> Aliases {
        let mut aliases = Aliases::default();
        let mut budget = WALK_LIMIT;
        aliases.walk(host, Path::new(""), &mut budget);
        for change in changes {
            let target = change
                .new
                .as_ref()
                .filter(|n| n.kind == Kind::Symlink)
                .and_then(|n| n.target.as_deref());
            if let Some(target) = target {
                aliases.add(&change.path, target);
            }
        }
        aliases
    }

    fn walk(&mut self, host: &Path, dir: &Path, budget: &mut usize) {
        let Ok(entries) = std::fs::read_dir(host.join(dir)) else {
            return;
        };
        for entry in entries.flatten() {
            if *budget == 0 {
                return;
            }
            *budget -= 1;
            let Ok(kind) = entry.file_type() else {
                continue;
            };
            let path = dir.join(entry.file_name());
            if kind.is_symlink() {
                if let Ok(target) = std::fs::read_link(entry.path()) {
                    self.add(&path, target.as_os_str());
                }
            } else if kind.is_dir() && !is_object_store(&path) {
                self.walk(host, &path, budget);
            }
        }
    }

    /// `link` (workspace-relative) pointing at `target`, kept when its name is hazardous and
    /// its target lies inside the workspace.
    fn add(&mut self, link: &Path, target: &OsStr) {
        if !path_hazards(link).iter().any(|h| h.runs_code()) {
            return;
        }
        let Some(resolved) = inside(link, Path::new(target)) else {
            return;
        };
        self.by_target
            .entry(resolved)
            .or_default()
            .push(link.to_path_buf());
    }

    /// The hazards `path` takes through the links that reach it or a directory above it, each
    /// with the name it is reached by.
    pub(super) fn reached_through(&self, path: &Path) -> Vec<(Hazard, PathBuf)> {
        let mut found = Vec::new();
        for ancestor in path.ancestors().filter(|a| !a.as_os_str().is_empty()) {
            let Some(links) = self.by_target.get(ancestor) else {
                continue;
            };
            let rest = path.strip_prefix(ancestor).unwrap_or(Path::new(""));
            for link in links {
                let seen_as = link.join(rest);
                for hazard in path_hazards(&seen_as) {
                    if hazard.runs_code() {
                        found.push((hazard, seen_as.clone()));
                    }
                }
            }
        }
        found
    }
}

/// `.git/objects` (at any depth): git's store holds no symlink worth a walk of its thousands of
/// files.
fn is_object_store(path: &Path) -> bool {
    path.file_name().is_some_and(|n| n == "objects")
        && path
            .parent()
            .and_then(Path::file_name)
            .is_some_and(super::is_git_dir_name)
}

/// The workspace-relative path `target` names from `link`'s directory, or None when it is
/// absolute or climbs out.
fn inside(link: &Path, target: &Path) -> Option<PathBuf> {
    if target.is_absolute() {
        return None;
    }
    let mut out = link.parent().unwrap_or(Path::new("")).to_path_buf();
    for component in target.components() {
        match component {
            Component::Normal(name) => out.push(name),
            Component::CurDir => {}
            Component::ParentDir => {
                if !out.pop() {
                    return None;
                }
            }
            _ => return None,
        }
    }
    (!out.as_os_str().is_empty()).then_some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_write_through_a_hazardous_host_link_takes_its_hazards() {
        let host = tempfile::tempdir().unwrap();
        let h = host.path();
        std::fs::create_dir_all(h.join("config/claude")).unwrap();
        std::fs::create_dir_all(h.join("docs")).unwrap();
        std::os::unix::fs::symlink("config/claude", h.join(".claude")).unwrap();
        std::os::unix::fs::symlink("docs/ai.md", h.join("AGENTS.md")).unwrap();
        std::fs::create_dir_all(h.join(".git")).unwrap();
        std::os::unix::fs::symlink("../githooks", h.join(".git/hooks")).unwrap();
        // Not hazardous by its name, or pointing out: no alias.
        std::os::unix::fs::symlink("docs", h.join("handbook")).unwrap();
        std::os::unix::fs::symlink("/etc", h.join(".vscode")).unwrap();
        let aliases = Aliases::new(h, &[]);
        let hazards = |p: &str| -> Vec<Hazard> {
            aliases
                .reached_through(Path::new(p))
                .into_iter()
                .map(|(h, _)| h)
                .collect()
        };
        assert_eq!(
            hazards("config/claude/settings.json"),
            [Hazard::EditorOrAgentConfig]
        );
        assert_eq!(hazards("docs/ai.md"), [Hazard::EditorOrAgentConfig]);
        assert_eq!(hazards("githooks/pre-commit"), [Hazard::GitHook]);
        assert!(hazards("docs/other.md").is_empty());
        assert!(hazards("src/main.rs").is_empty());
        let (_, seen_as) = &aliases.reached_through(Path::new("docs/ai.md"))[0];
        assert_eq!(seen_as, Path::new("AGENTS.md"));
    }

    #[test]
    fn targets_are_resolved_from_the_links_directory() {
        assert_eq!(
            inside(
                Path::new(".github/copilot-instructions.md"),
                Path::new("../docs/ai.md")
            ),
            Some(PathBuf::from("docs/ai.md"))
        );
        assert_eq!(inside(Path::new("a"), Path::new("../x")), None);
        assert_eq!(inside(Path::new("a"), Path::new("/etc")), None);
    }
}
