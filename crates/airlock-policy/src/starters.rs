//! Starter profiles shipped with airlock: the hosts one common tool needs (pip, npm, cargo, Go
//! modules, GitHub, apt), each file commented host by host.
//!
//! They are compiled into the binary from `packaging/profiles/`, so every airlock has them (a
//! .deb, a source build, the static binary) and none can be out of step with the binary that
//! reads it. A name is looked up in the profile directories first: a user's or the system's file
//! of the same name always wins, and a starter is only what `-p NAME` means when no file says
//! otherwise. A starter is never more than a network allow list: no paths, no variables, no
//! secrets.

use std::path::Path;

use crate::error::PolicyError;
use crate::parse::parse_profile;
use crate::profile::Profile;

/// One starter: its name (what `-p` takes) and its text, comments and all.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Starter {
    pub name: &'static str,
    pub text: &'static str,
}

/// Every starter, by name.
pub const STARTERS: &[Starter] = &[
    Starter {
        name: "apt",
        text: include_str!("../../../packaging/profiles/apt.toml"),
    },
    Starter {
        name: "cargo",
        text: include_str!("../../../packaging/profiles/cargo.toml"),
    },
    Starter {
        name: "github",
        text: include_str!("../../../packaging/profiles/github.toml"),
    },
    Starter {
        name: "go",
        text: include_str!("../../../packaging/profiles/go.toml"),
    },
    Starter {
        name: "npm",
        text: include_str!("../../../packaging/profiles/npm.toml"),
    },
    Starter {
        name: "pip",
        text: include_str!("../../../packaging/profiles/pip.toml"),
    },
];

/// The starter called `name`, if there is one.
pub fn starter(name: &str) -> Option<&'static Starter> {
    STARTERS.iter().find(|s| s.name == name)
}

/// The starter called `name`, or an error that names the starters there are.
pub fn find_starter(name: &str) -> Result<&'static Starter, PolicyError> {
    starter(name).ok_or_else(|| PolicyError::NoStarter {
        name: name.to_string(),
    })
}

impl Starter {
    /// What it is for: its first line, without the `# `.
    pub fn about(&self) -> &'static str {
        self.text
            .lines()
            .next()
            .and_then(|line| line.strip_prefix("# "))
            .unwrap_or("")
    }

    /// The profile it is. It has no file: its `source` is None, as the built-in default's.
    pub fn profile(&self) -> Result<Profile, PolicyError> {
        let origin = format!("(airlock's starter profile {})", self.name);
        let mut profile = parse_profile(self.text, self.name, Path::new(&origin))?;
        profile.source = None;
        Ok(profile)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::NetworkMode;

    #[test]
    fn every_starter_is_a_valid_profile_that_allows_only_named_hosts_on_named_ports() {
        for starter in STARTERS {
            let profile = starter
                .profile()
                .unwrap_or_else(|e| panic!("starter {}: {e}", starter.name));
            assert_eq!(profile.name, starter.name);
            assert_eq!(profile.source, None);
            assert!(
                !starter.about().is_empty(),
                "{}: no first comment",
                starter.name
            );
            assert!(
                profile.secrets.is_empty() && profile.filesystem.read_write.is_empty(),
                "{}",
                starter.name
            );
            let NetworkMode::Allow { allow, deny } = &profile.network else {
                panic!("{}: a starter names its hosts", starter.name);
            };
            assert!(deny.is_empty() && !allow.is_empty(), "{}", starter.name);
            for entry in allow {
                let airlock_rules::Destination::Name { wildcard, port, .. } = entry else {
                    panic!("{}: {entry} is not a host name", starter.name);
                };
                assert!(!wildcard && port.is_some(), "{}: {entry}", starter.name);
            }
            // Every host says why it is there: the line before each entry is a comment.
            let lines: Vec<&str> = starter.text.lines().collect();
            for (i, line) in lines.iter().enumerate() {
                if line.trim_start().starts_with('"') {
                    let before = lines[i - 1].trim_start();
                    assert!(
                        before.starts_with('#') || before.starts_with('"'),
                        "{}: {line} has no comment",
                        starter.name
                    );
                }
            }
        }
    }

    #[test]
    fn the_starters_the_docs_name_are_there() {
        let names: Vec<&str> = STARTERS.iter().map(|s| s.name).collect();
        assert_eq!(names, ["apt", "cargo", "github", "go", "npm", "pip"]);
        let pip = starter("pip").unwrap().profile().unwrap();
        let allowed = |host: &str| {
            pip.network
                .decide(Some(host), "151.101.0.223".parse().unwrap(), 443)
        };
        assert!(allowed("files.pythonhosted.org").allowed);
        assert!(!allowed("example.org").allowed);
        assert_eq!(starter("nope"), None);
        let error = find_starter("nope").unwrap_err().to_string();
        assert!(
            error.contains("are apt, cargo, github, go, npm, pip"),
            "{error}"
        );
    }
}
