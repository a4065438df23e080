//! Every hazard of every change of one change set, judged once against the tree it leads to:
//! its name and kind, the git directories and ignore rules of that tree, the host's names, and
//! the entries the session's profile adds to the tool table.

use std::path::{Path, PathBuf};

use super::added::{AddedTools, ToolEntry};
use super::aliases::{host_links, Aliases};
use super::collide::Collisions;
use super::ignored::{in_auto_run_location, Ignores};
use super::leads::LeadsOut;
use super::pointed::RunByConfig;
use super::{hazards_in, path_hazards, Hazard, Tree};
use crate::node::Kind;
use crate::scan::Change;

/// What a review needs besides the change set.
#[derive(Debug, Clone, Copy, Default)]
pub struct Setup<'s> {
    /// Larger files are a hazard.
    pub size_limit: u64,
    /// The session's profile's additions to the tool table.
    pub tool_config: &'s [ToolEntry],
    /// The invoking user's global excludes file ([`super::global_excludes`]).
    pub global_excludes: Option<&'s Path>,
}

/// What a person must know about one change before applying it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Verdict {
    pub hazards: Vec<Hazard>,
    /// `git status` will not show it: the repository's ignore rules, as they will be after the
    /// apply, hide it or a directory above it.
    pub ignored: bool,
    /// Why, besides its hazards' descriptions: the profile's tool-table entry that names it
    /// (`PATTERN: REASON`), the changed configuration that runs it.
    pub reasons: Vec<String>,
}

/// The judge of one change set.
pub struct Review<'a> {
    size_limit: u64,
    tree: Tree<'a>,
    ignores: Ignores<'a>,
    /// The host's rules as they are now: what `git status` hides if the session's own ignore
    /// files are not all written (a partial apply, a conflict, `--no-ignored` skipping a
    /// `.gitignore` that hides itself).
    ignores_now: Ignores<'a>,
    names: Collisions<'a>,
    added: AddedTools,
    /// Hazardous names that are symlinks into the workspace.
    aliases: Aliases,
    /// Changes by which a symlink leads out of the workspace through other links.
    leads_out: LeadsOut,
    /// The host workspace's symlinks, with their targets.
    host_links: Vec<(PathBuf, std::ffi::OsString)>,
    run_by: RunByConfig,
}

impl<'a> Review<'a> {
    /// A review of `changes` (of `layer` over the canonical workspace `host`). Fails only on a
    /// profile pattern the policy crate would have refused.
    pub fn new(
        layer: &'a Path,
        host: &'a Path,
        changes: &[Change],
        setup: Setup<'_>,
    ) -> Result<Review<'a>, globset::Error> {
        let host_links = host_links(host);
        let mut review = Review {
            size_limit: setup.size_limit,
            tree: Tree::new(layer, host, changes),
            ignores: Ignores::new(layer, host, setup.global_excludes),
            ignores_now: Ignores::new(host, host, setup.global_excludes),
            names: Collisions::new(host),
            added: AddedTools::new(setup.tool_config)?,
            aliases: Aliases::new(host, changes, &host_links),
            leads_out: LeadsOut::new(host, changes, &host_links),
            host_links,
            run_by: RunByConfig::default(),
        };
        let run_by = RunByConfig::new(layer, changes, setup.size_limit, |change| {
            review.configuration_that_runs_code(change)
        });
        review.run_by = run_by;
        Ok(review)
    }

    /// Is the change a configuration whose text may name what it runs: a hook, a CI workflow,
    /// an editor's, agent's or tool's configuration (a profile's entry included), a shell
    /// startup file, an unexplained dot-file outside an ignored tree; of a git directory, only
    /// its config files (its objects, index and logs name no program).
    /// And whether a directory it names holds what it runs: so for hooks, git's configuration
    /// (`hooksPath`), CI, tools' configuration and shell startup files, which carry commands;
    /// not for an editor's settings or an unexplained dot-file, where a directory named
    /// (`"extraPaths": ["src"]`) is where to look, not what to run.
    fn configuration_that_runs_code(&self, change: &Change) -> Option<bool> {
        if !self.is_configuration_that_runs_code(change) {
            return None;
        }
        let mut hazards = path_hazards(&change.path);
        hazards.extend(
            self.aliases
                .reached_through(&change.path)
                .into_iter()
                .map(|(hazard, _)| hazard),
        );
        let carries_commands = hazards.iter().any(|h| {
            matches!(
                h,
                Hazard::GitHook
                    | Hazard::GitConfig
                    | Hazard::CiWorkflow
                    | Hazard::ToolConfig
                    | Hazard::ShellStartup
            )
        });
        Some(carries_commands || self.added.matching(&change.path).is_some())
    }

    fn is_configuration_that_runs_code(&self, change: &Change) -> bool {
        let mut hazards = path_hazards(&change.path);
        if self.tree_root(change).is_some() {
            hazards.retain(|h| *h != Hazard::UnexplainedDotPath);
        }
        let git_config_file = change.path.file_name().is_some_and(|name| {
            super::is_one_of(
                name,
                &["config", "config.worktree", ".gitmodules", ".gitattributes"],
            )
        });
        let in_git_dir = hazards.contains(&Hazard::GitConfig) || self.tree.contains(&change.path);
        let through_a_link = self.aliases.reached_through(&change.path);
        let (linked_hazards, linked_names): (Vec<Hazard>, Vec<PathBuf>) =
            through_a_link.into_iter().unzip();
        let linked_git_config = linked_names.iter().any(|name| {
            name.file_name()
                .is_some_and(|n| super::is_one_of(n, &["config", "config.worktree"]))
        });
        hazards.extend(linked_hazards.iter().filter(|h| **h != Hazard::GitConfig));
        self.added.matching(&change.path).is_some()
            || linked_git_config && linked_hazards.contains(&Hazard::GitConfig)
            || in_git_dir && git_config_file
            || hazards
                .iter()
                .any(|h| h.runs_code() && *h != Hazard::GitConfig)
    }

    /// Will `git status` leave the change out (see [`Verdict::ignored`])? Cheaper than
    /// [`Review::judge`], which reads the content.
    pub fn is_ignored(&self, change: &Change) -> bool {
        let side = change.new.as_ref().or(change.old.as_ref());
        side.is_some_and(|node| {
            self.ignores
                .is_ignored(&change.path, node.kind == Kind::Dir)
        })
    }

    /// The ignored tree the change lies in: the topmost directory at or above it that git
    /// ignores both by the rules as they will be after the apply and as they are now (the
    /// deeper of the two tops), so that a session cannot fold its own changes into one row by
    /// planting a `.gitignore`. Such a tree is reviewed as one row and applied whole or not at
    /// all.
    pub fn tree_root(&self, change: &Change) -> Option<PathBuf> {
        let side = change.new.as_ref().or(change.old.as_ref())?;
        let is_dir = side.kind == Kind::Dir;
        let after = self.ignores.ignored_root(&change.path, is_dir)?;
        let now = self.ignores_now.ignored_root(&change.path, is_dir)?;
        // Both are the path or directories above it: one lies in the other.
        Some(if after.starts_with(&now) { after } else { now })
    }

    /// The host workspace's symlinks (workspace-relative), with their targets: what an apply
    /// follows again in the tree it makes.
    pub fn host_links(&self) -> &[(PathBuf, std::ffi::OsString)] {
        &self.host_links
    }

    pub fn judge(&self, change: &Change) -> Verdict {
        let mut verdict = Verdict {
            hazards: hazards_in(change, self.size_limit, &self.tree),
            ..Verdict::default()
        };
        if let Some(entry) = self.added.matching(&change.path) {
            // The profile explains the dot-file: it is tool configuration.
            verdict.hazards.retain(|h| *h != Hazard::UnexplainedDotPath);
            verdict.hazards.push(Hazard::ToolConfig);
            verdict
                .reasons
                .push(format!("{}: {}", entry.path, entry.reason));
        }
        for (hazard, seen_as) in self.aliases.reached_through(&change.path) {
            verdict.hazards.push(hazard);
            verdict.reasons.push(format!(
                "reached through {}, a symlink the next tool reads it by",
                seen_as.display()
            ));
        }
        for (hazard, link) in self.aliases.redirected_by(change) {
            verdict.hazards.push(hazard);
            verdict.reasons.push(format!(
                "changes where {} leads, a symlink the next tool reads",
                link.display()
            ));
        }
        if let Some(link) = self.leads_out.through(&change.path) {
            if !verdict.hazards.contains(&Hazard::SymlinkOutside) {
                verdict.hazards.push(Hazard::SymlinkOutside);
                verdict.reasons.push(if link == change.path {
                    "leads out of the workspace through the symlinks on its way".to_string()
                } else {
                    format!(
                        "sends {}, a symlink of the workspace, out of it",
                        link.display()
                    )
                });
            }
        }
        if let Some(config) = self.run_by.named_by(&change.path) {
            verdict.hazards.push(Hazard::RunByFlaggedConfig);
            verdict.reasons.push(format!(
                "named by {}, a changed configuration that runs code",
                config.display()
            ));
        }
        // A tree git ignores is applied only when named as a whole (or a row of it by its own
        // path): there the principle adds nothing but noise, `.venv` and `node_modules/.bin`
        // by the thousand.
        if self.tree_root(change).is_some() {
            verdict.hazards.retain(|h| *h != Hazard::UnexplainedDotPath);
        }
        verdict.ignored = self.is_ignored(change);
        if let Some(new) = &change.new {
            let runs = new.kind == Kind::File && new.mode & 0o111 != 0
                || new.kind != Kind::Dir && in_auto_run_location(&change.path);
            let hidden = || {
                verdict.ignored
                    || self
                        .ignores_now
                        .is_ignored(&change.path, new.kind == Kind::Dir)
            };
            if runs && hidden() {
                verdict.hazards.push(Hazard::HiddenFromGit);
            }
            if change.old.is_none() && self.names.collides(&change.path) {
                verdict.hazards.push(Hazard::NameCollision);
            }
            if change.old.is_none() && self.names.looks_like_a_host_name(&change.path) {
                verdict.hazards.push(Hazard::ConfusableName);
            }
        }
        verdict.hazards.sort();
        verdict.hazards.dedup();
        verdict
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::os::unix::fs::PermissionsExt;

    /// The session rewrites `.gitignore` so that it no longer hides `node_modules` and hides
    /// itself: read as after a full apply nothing of `node_modules` is ignored, but an apply
    /// that leaves the `.gitignore` out (`--no-ignored`, a conflict, naming paths) keeps the
    /// host's rule, and `git status` hides the planted jest.
    #[test]
    fn content_the_host_rules_hide_is_hidden_whatever_the_session_rules_say() {
        let host = tempfile::tempdir().unwrap();
        let layer = tempfile::tempdir().unwrap();
        let (h, l) = (host.path(), layer.path());
        std::fs::create_dir(h.join(".git")).unwrap();
        std::fs::write(h.join(".gitignore"), "node_modules/\n").unwrap();
        std::fs::write(l.join(".gitignore"), "/.gitignore\n").unwrap();
        std::fs::create_dir_all(l.join("node_modules/.bin")).unwrap();
        let jest = l.join("node_modules/.bin/jest");
        std::fs::write(&jest, "#!/bin/sh\n").unwrap();
        std::fs::set_permissions(&jest, std::fs::Permissions::from_mode(0o755)).unwrap();
        let set = crate::scan(l, h, crate::OverlayXattrs::User).unwrap();
        let setup = Setup {
            size_limit: u64::MAX,
            ..Setup::default()
        };
        let review = Review::new(l, h, &set.changes, setup).unwrap();
        let verdict = |p: &str| {
            let change = set.changes.iter().find(|c| c.path == Path::new(p)).unwrap();
            review.judge(change)
        };
        assert!(verdict(".gitignore").ignored);
        let jest = verdict("node_modules/.bin/jest");
        assert!(
            !jest.ignored,
            "read as after a full apply, git status shows it"
        );
        assert!(jest.hazards.contains(&Hazard::HiddenFromGit), "{jest:?}");
    }

    /// `.venv` is ignored by the host's rules: everything in it is one tree. `src` is ignored
    /// only by the `.gitignore` the session wrote: its changes stay rows of their own.
    #[test]
    fn a_tree_is_what_both_the_host_rules_and_the_session_rules_ignore() {
        let host = tempfile::tempdir().unwrap();
        let layer = tempfile::tempdir().unwrap();
        let (h, l) = (host.path(), layer.path());
        std::fs::create_dir(h.join(".git")).unwrap();
        std::fs::write(h.join(".gitignore"), ".venv/\n*.log\n").unwrap();
        std::fs::write(l.join(".gitignore"), ".venv/\n*.log\nsrc/\n").unwrap();
        std::fs::create_dir_all(l.join(".venv/lib/site")).unwrap();
        std::fs::write(l.join(".venv/lib/site/a.py"), "").unwrap();
        std::fs::create_dir_all(l.join("src")).unwrap();
        std::fs::write(l.join("src/main.py"), "").unwrap();
        std::fs::write(l.join("build.log"), "").unwrap();
        let set = crate::scan(l, h, crate::OverlayXattrs::User).unwrap();
        let review = Review::new(l, h, &set.changes, Setup::default()).unwrap();
        let root = |p: &str| {
            let change = set.changes.iter().find(|c| c.path == Path::new(p)).unwrap();
            review.tree_root(change)
        };
        assert_eq!(root(".venv"), Some(PathBuf::from(".venv")));
        assert_eq!(root(".venv/lib/site/a.py"), Some(PathBuf::from(".venv")));
        assert_eq!(root("src/main.py"), None, "the session's own rule");
        assert_eq!(root("build.log"), None, "an ignored file on its own");
    }

    /// A workflow and a task that run scripts by their paths, a `core.hooksPath` of a git
    /// directory that names a directory: what they name, and only that, needs the same yes.
    #[test]
    fn what_a_changed_configuration_that_runs_code_names_is_a_hazard() {
        let host = tempfile::tempdir().unwrap();
        let layer = tempfile::tempdir().unwrap();
        let l = layer.path();
        let write = |path: &str, text: &str| {
            let path = l.join(path);
            std::fs::create_dir_all(path.parent().unwrap()).unwrap();
            std::fs::write(path, text).unwrap();
        };
        write(
            ".github/workflows/ci.yml",
            "jobs:\n  a:\n    steps:\n      - run: ./scripts/deploy.sh --prod\n",
        );
        write(
            ".vscode/tasks.json",
            r#"{"tasks": [{"command": "python3", "args": ["../tools/x.py"]}]}"#,
        );
        write("repo.git/HEAD", "ref: refs/heads/main\n");
        write("repo.git/objects/.keep", "");
        write("repo.git/config", "[core]\n\thooksPath = githooks\n");
        write("README.md", "run scripts/other.sh by hand\n");
        // Of a git directory only its config files are read: its objects, logs, index name
        // no program.
        write(".git/logs/HEAD", "commit: src/main.rs\n");
        for file in [
            "scripts/deploy.sh",
            "scripts/other.sh",
            "tools/x.py",
            "githooks/pre-commit",
            "src/main.rs",
        ] {
            write(file, "echo\n");
        }
        let set = crate::scan(l, host.path(), crate::OverlayXattrs::User).unwrap();
        let setup = Setup {
            size_limit: u64::MAX,
            ..Setup::default()
        };
        let review = Review::new(l, host.path(), &set.changes, setup).unwrap();
        let verdict = |p: &str| {
            let change = set.changes.iter().find(|c| c.path == Path::new(p)).unwrap();
            review.judge(change)
        };
        for (path, config) in [
            ("scripts/deploy.sh", ".github/workflows/ci.yml"),
            ("tools/x.py", ".vscode/tasks.json"),
            ("githooks/pre-commit", "repo.git/config"),
        ] {
            let judged = verdict(path);
            assert_eq!(judged.hazards, vec![Hazard::RunByFlaggedConfig], "{path}");
            assert!(judged.reasons[0].contains(config), "{judged:?}");
        }
        // Named by a file that runs nothing, by a git log, or by nothing.
        for path in ["scripts/other.sh", "src/main.rs", "README.md"] {
            assert_eq!(verdict(path).hazards, vec![], "{path}");
        }
    }
}
