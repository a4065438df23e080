//! Hazardous names that are symlinks into the workspace: `.claude -> config/claude`,
//! `AGENTS.md -> docs/ai.md`, `.git/hooks -> ../githooks`. A session that writes through one
//! changes the file at the target's path, whose own name says nothing; yet the next agent or
//! git reads it through the hazardous name. So a change at or under a target takes the hazards
//! its path would have under the name that reaches it, with that name as the reason. And a
//! change to where such a link leads (a directory or link on its way, `docs -> evil`, retargeted
//! or put in a directory's place) takes the link's own hazards: after it, the link reads what
//! the session chose.
//!
//! The aliases are the host workspace's symlinks (walked once per review; not below `.git`'s
//! object store) and the session's own new ones. A target is resolved through the host's links,
//! a chain of them included (40 at most, as the kernel), an absolute target inside the
//! workspace too.

use std::collections::BTreeMap;
use std::ffi::{OsStr, OsString};
use std::path::{Component, Path, PathBuf};

use super::{path_hazards, Hazard};
use crate::node::Kind;
use crate::scan::Change;

/// Entries a host walk visits at most: a workspace is not near this; one that is, is judged by
/// the entries seen.
const WALK_LIMIT: usize = 2_000_000;
/// Links followed in one resolution, as the kernel's limit.
const HOPS: usize = 40;

/// Hazardous symlinks of the tree a change set leads to, by their targets.
#[derive(Debug, Default)]
pub(super) struct Aliases {
    /// Target (workspace-relative; empty: the root) → the links that reach it.
    by_target: BTreeMap<PathBuf, Vec<PathBuf>>,
    /// A path on the way to a target (a link followed, a directory passed) → the links whose
    /// way it is on.
    on_the_way: BTreeMap<PathBuf, Vec<PathBuf>>,
}

impl Aliases {
    /// The hazardous ones of the host's symlinks `host_links` (see [`host_links`]) and of the
    /// session's new ones in `changes`.
    pub(super) fn new(
        host: &Path,
        changes: &[Change],
        host_links: &[(PathBuf, OsString)],
    ) -> Aliases {
        let mut aliases = Aliases::default();
        let mut links = host_links.to_vec();
        for change in changes {
            let target = change
                .new
                .as_ref()
                .filter(|n| n.kind == Kind::Symlink)
                .and_then(|n| n.target.clone());
            if let Some(target) = target {
                links.push((change.path.clone(), target));
            }
        }
        for (link, target) in links {
            aliases.add(host, &link, Path::new(&target));
        }
        aliases
    }

    /// `link` (workspace-relative) pointing at `target`, kept when its name is hazardous and
    /// its target lies inside the workspace.
    fn add(&mut self, host: &Path, link: &Path, target: &Path) {
        if !path_hazards(link).iter().any(|h| h.runs_code()) {
            return;
        }
        let Some((resolved, way)) = resolve(host, link, target) else {
            return;
        };
        for passed in way {
            self.on_the_way
                .entry(passed)
                .or_default()
                .push(link.to_path_buf());
        }
        self.by_target
            .entry(resolved)
            .or_default()
            .push(link.to_path_buf());
    }

    /// The hazards `path` takes through the links that reach it or a directory above it, each
    /// with the name it is reached by.
    pub(super) fn reached_through(&self, path: &Path) -> Vec<(Hazard, PathBuf)> {
        let mut found = Vec::new();
        for ancestor in path.ancestors() {
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

    /// The hazards of the links whose way `change` alters (a link on it made, retargeted or
    /// removed, a directory on it turned into a link), each with the link.
    pub(super) fn redirected_by(&self, change: &Change) -> Vec<(Hazard, PathBuf)> {
        let kind = |side: &Option<crate::node::Node>| side.as_ref().map(|n| n.kind);
        let (old, new) = (kind(&change.old), kind(&change.new));
        let redirects = old == Some(Kind::Symlink) || new == Some(Kind::Symlink) || old != new;
        let Some(links) = self.on_the_way.get(&change.path).filter(|_| redirects) else {
            return Vec::new();
        };
        links
            .iter()
            .flat_map(|link| {
                path_hazards(link)
                    .into_iter()
                    .filter(|h| h.runs_code())
                    .map(|h| (h, link.clone()))
            })
            .collect()
    }
}

/// The host workspace's symlinks (workspace-relative), with their targets.
pub fn host_links(host: &Path) -> Vec<(PathBuf, OsString)> {
    let mut links = Vec::new();
    let mut budget = WALK_LIMIT;
    walk(host, Path::new(""), &mut budget, &mut links);
    links
}

/// The host's symlinks under `dir`, with their targets.
fn walk(host: &Path, dir: &Path, budget: &mut usize, links: &mut Vec<(PathBuf, OsString)>) {
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
                links.push((path, target.into_os_string()));
            }
        } else if kind.is_dir() && !is_object_store(&path) {
            walk(host, &path, budget, links);
        }
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

/// Where `target`, the target of `link`, leads in the host's tree (workspace-relative; empty:
/// the root), following the host's links on the way; with every path passed on the way (each
/// link followed, each directory entered, the end). None when it leaves the workspace or goes
/// round more than [`HOPS`] links. A part that does not exist is taken as written.
fn resolve(host: &Path, link: &Path, target: &Path) -> Option<(PathBuf, Vec<PathBuf>)> {
    // Parts still to walk, the next one last.
    let mut parts: Vec<OsString> = Vec::new();
    let mut at = PathBuf::new();
    let start = |parts: &mut Vec<OsString>, at: &mut PathBuf, target: &Path| -> Option<()> {
        let relative = if target.is_absolute() {
            *at = PathBuf::new();
            target.strip_prefix(host).ok()?
        } else {
            target
        };
        let names: Vec<OsString> = relative
            .components()
            .map(|c| c.as_os_str().to_os_string())
            .collect();
        parts.extend(names.into_iter().rev());
        Some(())
    };
    at.push(link.parent().unwrap_or(Path::new("")));
    start(&mut parts, &mut at, target)?;
    let (mut way, mut hops) = (Vec::new(), 0);
    while let Some(part) = parts.pop() {
        match component(part.as_os_str()) {
            Component::CurDir => {}
            Component::ParentDir => {
                if !at.pop() {
                    return None;
                }
            }
            Component::Normal(name) => {
                let next = at.join(name);
                way.push(next.clone());
                match std::fs::read_link(host.join(&next)) {
                    Ok(further) => {
                        hops += 1;
                        if hops > HOPS {
                            return None;
                        }
                        start(&mut parts, &mut at, &further)?;
                    }
                    Err(_) => at = next,
                }
            }
            _ => return None,
        }
    }
    Some((at, way))
}

/// A path's part as a [`Component`].
fn component(part: &OsStr) -> Component<'_> {
    match part.to_str() {
        Some(".") => Component::CurDir,
        Some("..") => Component::ParentDir,
        _ => Component::Normal(part),
    }
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
        let aliases = Aliases::new(h, &[], &host_links(h));
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
    fn targets_are_resolved_through_the_hosts_links() {
        let host = tempfile::tempdir().unwrap();
        let h = host.path();
        std::fs::create_dir_all(h.join("config/claude")).unwrap();
        std::fs::create_dir_all(h.join("packages/docs/src")).unwrap();
        // A chain, a directory link on the way, an absolute target inside, the root itself.
        std::os::unix::fs::symlink("cfg", h.join(".claude")).unwrap();
        std::os::unix::fs::symlink("config/claude", h.join("cfg")).unwrap();
        std::os::unix::fs::symlink("packages/docs/src", h.join("docs")).unwrap();
        std::os::unix::fs::symlink("docs/ai.md", h.join("AGENTS.md")).unwrap();
        std::os::unix::fs::symlink(h.join("config/claude"), h.join(".cursor")).unwrap();
        std::os::unix::fs::symlink(".", h.join(".roo")).unwrap();
        let resolved = |link: &str| {
            let target = std::fs::read_link(h.join(link)).unwrap();
            resolve(h, Path::new(link), &target).map(|(at, _)| at)
        };
        assert_eq!(resolved(".claude"), Some(PathBuf::from("config/claude")));
        assert_eq!(
            resolved("AGENTS.md"),
            Some(PathBuf::from("packages/docs/src/ai.md"))
        );
        assert_eq!(resolved(".cursor"), Some(PathBuf::from("config/claude")));
        assert_eq!(resolved(".roo"), Some(PathBuf::new()));
        let (_, way) = resolve(h, Path::new("AGENTS.md"), Path::new("docs/ai.md")).unwrap();
        assert!(way.contains(&PathBuf::from("docs")), "{way:?}");
        // Out of the workspace, or round and round: no alias.
        assert_eq!(resolve(h, Path::new("a"), Path::new("../x")), None);
        assert_eq!(resolve(h, Path::new("a"), Path::new("/etc")), None);
        std::os::unix::fs::symlink("loop", h.join("loop")).unwrap();
        assert_eq!(resolve(h, Path::new(".vscode"), Path::new("loop")), None);
        let aliases = Aliases::new(h, &[], &host_links(h));
        let first = |p: &str| {
            aliases
                .reached_through(Path::new(p))
                .first()
                .map(|(h, _)| *h)
        };
        assert_eq!(
            first("packages/docs/src/ai.md"),
            Some(Hazard::EditorOrAgentConfig)
        );
        assert_eq!(
            first("settings.json"),
            Some(Hazard::EditorOrAgentConfig),
            ".roo -> ."
        );
    }
}
