//! The policy for one automation, as the rest of airlock consumes it: plain data, already valid.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::Serialize;

/// The profile used when none is named and no `default.toml` exists.
pub const DEFAULT_PROFILE_NAME: &str = "default";

/// Variables every sandbox inherits from the caller, whatever the profile says. Without them most
/// programs misbehave (no `PATH`, garbled text), and none of them carries a secret.
pub const BASE_ENV_ALLOW: &[&str] = &["PATH", "HOME", "LANG", "LC_*", "TERM", "TZ"];

const KIB: u64 = 1 << 10;
const MIB: u64 = KIB * KIB;
const GIB: u64 = MIB * KIB;

/// A validated profile. Every field has a value: keys missing from the file take the built-in
/// defaults, so consumers never deal with "unset".
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Profile {
    /// `"default"` for the built-in, else the name it was loaded by (the file stem for a file).
    pub name: String,
    /// The file it came from; `None` for the built-in.
    pub source: Option<PathBuf>,
    pub filesystem: Filesystem,
    pub env: EnvPolicy,
    pub limits: Limits,
    pub network: NetworkMode,
    /// `[[network.http]]`: hosts whose requests the gate reads (it terminates their TLS) and
    /// lets through by method and path, each allowed by `network`, one entry per host.
    pub http: Vec<HttpRules>,
    /// `[network] ask`, `ask_timeout`, `ask_webhook`: connections a person decides.
    pub ask: AskPolicy,
    pub apply: ApplyPolicy,
    /// Credentials the sandbox uses without seeing them: it gets a placeholder in `name`, the
    /// network gate puts the value on the wire towards `hosts` only.
    pub secrets: Vec<SecretSpec>,
}

/// One `[[secret]]`: where its value comes from, where it may go, and how it is put there. The
/// value itself is never part of a profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct SecretSpec {
    /// The environment variable the sandbox sees, holding the placeholder.
    pub name: String,
    pub source: SecretSource,
    /// Lower-case DNS names (no IPs, no wildcards), each allowed by `[network]`.
    pub hosts: Vec<String>,
    pub inject: Injection,
}

/// Where the supervisor reads a secret's value, on the host, when a session or a run starts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SecretSource {
    /// A variable of airlock's own environment (not the caller's list).
    Env(String),
    /// An absolute path, read whole; one trailing newline is dropped.
    File(PathBuf),
    /// A program and its arguments, run without a shell; its stdout is the value.
    Command(Vec<String>),
}

/// How the gate puts the value into a request to one of the secret's hosts.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Injection {
    /// The header `name` set to `format` with its one `{}` replaced by the value.
    Header { name: String, format: String },
    /// `Authorization: Basic base64(username ":" value)`.
    Basic { username: String },
    /// The request target's query parameter `param` set to the value.
    Query { param: String },
    /// The placeholder replaced by the value where the client put it in a header credentials
    /// travel in (`Authorization`, also inside a decoded `Basic`; `Proxy-Authorization`;
    /// `Cookie`) or in one of `headers` (as written; matched case-blind). Never elsewhere: a
    /// header a server may echo (`X-Request-Id`, `Origin`) would hand the value back.
    Placeholder { headers: Vec<String> },
}

impl std::fmt::Display for SecretSource {
    /// As a profile writes it, e.g. `env CI_TOKEN`, `file /etc/airlock/secrets/gh`,
    /// `command ["pass", "gh"]`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            SecretSource::Env(name) => write!(f, "env {name}"),
            SecretSource::File(path) => write!(f, "file {}", path.display()),
            SecretSource::Command(argv) => write!(f, "command {argv:?}"),
        }
    }
}

/// What `airlock apply` asks about beyond its built-in tables.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct ApplyPolicy {
    /// Entries added to the tool-configuration table: paths whose change is a hazard.
    pub tool_config: Vec<ToolConfigEntry>,
}

/// A path (a glob: a name at any depth, or with a `/` a path from the workspace's root) and the
/// one-line reason a person gave for asking about it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolConfigEntry {
    pub path: String,
    pub reason: String,
}

/// Host paths the sandbox may see beyond the minimal system and the workspace. All absolute,
/// without `..`, and normalised (no `.`, no doubled or trailing `/`).
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Filesystem {
    /// Bound read-only at the same path.
    pub read_only: Vec<PathBuf>,
    /// Bound read-write at the same path: writes here reach the host directly, bypassing the
    /// session's copy-on-write layer and `airlock apply`.
    pub read_write: Vec<PathBuf>,
    /// Made empty or invisible inside, even if a bound path contains them.
    pub hide: Vec<PathBuf>,
}

/// Which of the caller's environment variables reach the command, and what is set for it.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct EnvPolicy {
    /// Names, or prefixes ending in `*`, inherited in addition to [`BASE_ENV_ALLOW`].
    pub allow: Vec<String>,
    /// Set inside, overriding anything inherited.
    pub set: BTreeMap<String, String>,
}

/// Resource limits for one run.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct Limits {
    /// Memory for the whole process tree.
    pub memory_bytes: u64,
    /// Processes (and threads) alive at once.
    pub processes: u64,
    /// CPU time, summed over the tree.
    pub cpu_seconds: u64,
    /// Wall-clock time; `None` means the command may run as long as it likes.
    pub timeout_seconds: Option<u64>,
    /// Size of the `/tmp` tmpfs, and separately of the `$HOME` tmpfs.
    pub tmp_bytes: u64,
    /// Total bytes of stdout and stderr kept; the rest is dropped.
    pub output_bytes: u64,
    /// `RLIMIT_NOFILE`.
    pub open_files: u64,
    /// CPU bandwidth for the whole sandbox, in thousandths of a CPU; `None`: the default, all
    /// the host's CPUs but one (decided where the host is known, at the run).
    pub millicpus: Option<u64>,
    /// Bytes the workspace's layer may hold; `None`: a throwaway run's layer is bounded by
    /// `tmp_bytes`, a session's by a free margin on the state directory's filesystem.
    pub disk_bytes: Option<u64>,
    /// Files (inodes) the workspace's layer may hold; `None`: as the filesystem allows.
    pub files: Option<u64>,
}

/// Connections a person decides while they wait (`[network] ask`): to a host the `ask` entries
/// name that no allow entry does (deny entries and protected addresses still refuse).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AskPolicy {
    pub hosts: airlock_rules::Ask,
    /// How long a connection waits for a person; then it is refused.
    pub timeout_seconds: u64,
    /// Where the question is also sent, as JSON (an n8n Webhook node, a chat bridge).
    pub webhook: Option<String>,
}

/// How long a connection waits for a person unless the profile says (`ask_timeout`).
pub const DEFAULT_ASK_TIMEOUT_SECONDS: u64 = 60;
/// The longest a profile may let a connection wait for a person: a program waiting longer
/// has given up, and its held connect holds a place in the gate.
pub const MAX_ASK_TIMEOUT_SECONDS: u64 = 3600;

impl Default for AskPolicy {
    fn default() -> Self {
        AskPolicy {
            hosts: airlock_rules::Ask::default(),
            timeout_seconds: DEFAULT_ASK_TIMEOUT_SECONDS,
            webhook: None,
        }
    }
}

/// What network the sandbox gets.
pub type NetworkMode = airlock_rules::Egress;

/// One `[[network.http]]`: a host's requests, by method and path.
pub use airlock_rules::{HttpRules, RequestRule};

impl Default for Limits {
    /// Generous enough for a build or a test suite, small enough that a runaway command cannot
    /// take the machine down with it.
    fn default() -> Self {
        Limits {
            memory_bytes: 2 * GIB,
            processes: 512,
            cpu_seconds: 3600,
            timeout_seconds: None,
            tmp_bytes: GIB,
            output_bytes: 64 * MIB,
            open_files: 4096,
            millicpus: None,
            disk_bytes: None,
            files: None,
        }
    }
}

impl Profile {
    /// The policy used when no profile file exists: nothing from the host beyond the minimal
    /// system, no extra environment, no network, default limits.
    pub fn builtin_default() -> Profile {
        Profile {
            name: DEFAULT_PROFILE_NAME.to_string(),
            source: None,
            filesystem: Filesystem::default(),
            env: EnvPolicy::default(),
            limits: Limits::default(),
            network: NetworkMode::None,
            http: Vec::new(),
            ask: AskPolicy::default(),
            apply: ApplyPolicy::default(),
            secrets: Vec::new(),
        }
    }

    /// Does the caller's variable `name` pass into the sandbox? It does if it matches
    /// [`BASE_ENV_ALLOW`] or `env.allow`, where a pattern is an exact name or a prefix ending in
    /// `*`.
    pub fn env_allowed(&self, name: &str) -> bool {
        if name.is_empty() {
            return false;
        }
        BASE_ENV_ALLOW
            .iter()
            .copied()
            .chain(self.env.allow.iter().map(String::as_str))
            .any(|pattern| pattern_matches(pattern, name))
    }
}

fn pattern_matches(pattern: &str, name: &str) -> bool {
    match pattern.strip_suffix('*') {
        Some(prefix) => name.starts_with(prefix),
        None => pattern == name,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn builtin_default_values() {
        let p = Profile::builtin_default();
        assert_eq!(p.name, "default");
        assert_eq!(p.source, None);
        assert_eq!(p.filesystem, Filesystem::default());
        assert!(p.env.allow.is_empty());
        assert!(p.env.set.is_empty());
        assert_eq!(p.network, NetworkMode::None);
        assert_eq!(
            p.limits,
            Limits {
                memory_bytes: 2 * 1024 * 1024 * 1024,
                processes: 512,
                cpu_seconds: 3600,
                timeout_seconds: None,
                tmp_bytes: 1024 * 1024 * 1024,
                output_bytes: 64 * 1024 * 1024,
                open_files: 4096,
                millicpus: None,
                disk_bytes: None,
                files: None,
            }
        );
    }

    #[test]
    fn base_allowlist_applies_without_any_profile_entry() {
        let p = Profile::builtin_default();
        for name in [
            "PATH", "HOME", "LANG", "LC_ALL", "LC_CTYPE", "LC_", "TERM", "TZ",
        ] {
            assert!(p.env_allowed(name), "{name}");
        }
        for name in [
            "",
            "path",
            "PATHX",
            "XPATH",
            "LCX",
            "TERMINFO",
            "SSH_AUTH_SOCK",
            "AWS_SECRET",
        ] {
            assert!(!p.env_allowed(name), "{name}");
        }
    }

    #[test]
    fn profile_patterns_add_to_the_base() {
        let mut p = Profile::builtin_default();
        p.env.allow = vec!["CI".into(), "GITHUB_*".into()];
        assert!(p.env_allowed("CI"));
        assert!(!p.env_allowed("CIRCLECI"));
        assert!(p.env_allowed("GITHUB_SHA"));
        assert!(p.env_allowed("GITHUB_"));
        assert!(!p.env_allowed("GITHUB"));
        assert!(!p.env_allowed("MY_GITHUB_TOKEN"));
        assert!(p.env_allowed("PATH"));
    }

    #[test]
    fn lone_star_allows_every_nonempty_name() {
        let mut p = Profile::builtin_default();
        p.env.allow = vec!["*".into()];
        assert!(p.env_allowed("ANYTHING"));
        assert!(!p.env_allowed(""));
    }

    #[test]
    fn serializes_with_lowercase_network() {
        let json = serde_json::to_value(Profile::builtin_default()).unwrap();
        assert_eq!(json["network"]["mode"], "none");
        assert_eq!(json["name"], "default");
        assert_eq!(json["source"], serde_json::Value::Null);
        assert_eq!(json["limits"]["processes"], 512);
    }
}
