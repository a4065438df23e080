//! airlock profiles: finding, parsing and validating the policy for one automation.
//!
//! A *profile* is a TOML file named `NAME.toml`, looked up by name in
//! [`profile_search_dirs`] (the user's `~/.config/airlock/profiles`, then
//! `/etc/airlock/profiles`) or given by path. It is never read from inside a workspace
//! ([`ensure_outside_workspace`]), because the sandboxed command can write there.
//! With no `default.toml`, the profile `default` is [`Profile::builtin_default`]; with no file
//! of its name, a starter's name is the starter shipped with airlock ([`STARTERS`]: pip, npm,
//! cargo, go, github, apt).
//!
//! This crate is pure: apart from reading the one profile file it does no I/O, and it decides
//! nothing about how the policy is enforced.
//!
//! # Format
//!
//! Every section and key is optional; a missing one takes the built-in default, shown in the
//! comments. Unknown keys are errors, so a typo never silently weakens a policy.
//!
//! ```toml
//! [network]                                  # default network = "none": a private loopback
//! allow = ["api.github.com", "github.com"]
//!
//! [[network.http]]                            # any number, one per host; default: none
//! host = "api.github.com"                     # a DNS name [network] allows
//! allow = ["GET /repos/acme/*", "POST /repos/acme/*/issues"]  # METHOD PATH (* any method);
//!                                             # * one whole segment, a last ** the rest
//! # or inspect = true                         # no rules: every request let through, recorded
//!
//! [filesystem]                  # host paths, absolute, without `..`; default: none
//! read_only = ["/opt/tools"]    # bound read-only at the same path
//! read_write = ["/srv/cache"]   # bound read-write: writes here reach the host directly
//! hide = ["/opt/tools/private"] # made empty inside, even under a bound path
//!
//! [env]                         # the caller's PATH HOME LANG LC_* TERM TZ always pass
//! allow = ["CI", "GITHUB_*"]    # also pass these: exact names, or prefixes ending in `*`
//! set = { RUST_LOG = "info" }   # set inside, overriding anything inherited
//!
//! [apply]                       # besides the built-in tables, apply asks about these paths
//! tool_config = [               # a name at any depth, or with a `/` a glob from the root
//!   { path = ".toolrc", reason = "tool: runs the hooks it names on every build" },
//! ]
//!
//! [limits]
//! memory = "2GiB"      # whole process tree; at least 16MiB         (default 2GiB)
//! processes = 256      # alive at once, 1..=1000000                 (default 512)
//! cpu = "10m"          # CPU time, all processes together; > 0      (default 1h)
//! timeout = "30m"      # wall clock; 0 or absent means none         (default none)
//! tmp_size = "512MiB"  # each of the /tmp and $HOME tmpfs           (default 1GiB)
//! output = "16MiB"     # stdout + stderr bytes kept                 (default 64MiB)
//! open_files = 1024    # RLIMIT_NOFILE, at least 16                 (default 4096)
//! cpus = 1.5           # CPU bandwidth, whole sandbox, 0.01..=4096  (default: all CPUs but one)
//! disk = "10GiB"       # bytes the workspace's layer may hold; >= 4MiB (default: see below)
//! files = 100000       # files (inodes) the layer may hold; >= 64   (default: the filesystem's)
//!
//! [[secret]]                                  # any number; default: none
//! name = "GITHUB_TOKEN"                       # the variable the sandbox sees: a placeholder
//! from = { env = "CI_BOT_GITHUB_TOKEN" }      # airlock's own environment; or
//!                                             # { file = "/etc/airlock/secrets/gh" } (absolute,
//!                                             # not group/world-writable) or
//!                                             # { command = ["pass", "gh"] } (no shell, 10 s)
//! hosts = ["api.github.com", "github.com"]    # DNS names, each allowed by [network]
//! inject = { header = "Authorization", format = "Bearer {}" }
//! # or inject = { basic = "x-access-token" }  Authorization: Basic base64("x-access-token:" value)
//! # or inject = { query = "access_token" }    the request's query parameter set to the value
//! # or inject = "placeholder"                 the placeholder replaced where the client put it
//! ```
//!
//! A `[[secret]]`'s value never enters the sandbox: inside, `name` holds a placeholder of the
//! same shape (random per session), and the network gate puts the real value on the wire only
//! on a TLS connection to one of `hosts` whose certificate verified. Its source is read on the
//! host when a session or a run starts; a missing, unreadable or empty source is an error then.
//! Refused: a name that is not a variable name, or is also in [env] set; an env source that
//! [env] allow would pass through; hosts the gate would refuse; `network = "none"`.
//!
//! `cpus` is enforced by the run's cgroup (v2 `cpu.max`, v1 `cpu.cfs_quota_us`). `disk` and
//! `files` bound a throwaway run's tmpfs layer (`size=`, `nr_inodes=`; without `disk` it is
//! `tmp_size`) and, as root, a session's own filesystem image. Without `disk`, a session may
//! not take the state directory's filesystem below a free margin. Where the kernel cannot
//! enforce a limit the profile names, `airlock run` refuses unless `--allow-degraded=cpus` or
//! `--allow-degraded=disk` accepts less; `airlock check` lists how each limit is enforced.
//!
//! Sizes are a whole number of bytes, or a string with a unit: `B`; binary `K`, `M`, `G`, `T`
//! and `KiB`, `MiB`, `GiB`, `TiB`; decimal `KB`, `MB`, `GB`, `TB` (any case, optional space).
//! Durations are whole seconds, or a string ending in `s`, `m` or `h`: `"90s"`, `"10m"`, `"2h"`.
//!
//! # Errors
//!
//! A bad profile is refused with the file, line and column of the offending key or value, and
//! what to do about it:
//!
//! ```text
//! /etc/airlock/profiles/ci.toml:7:1: unknown key `memroy` in [limits]; expected one of memory, processes, cpu, timeout, tmp_size, output, open_files, cpus, disk, files
//! ```
//!
//! ```
//! use std::path::Path;
//! use airlock_policy::{parse_profile, NetworkMode};
//!
//! let text = "[limits]\nmemory = \"512MiB\"\ntimeout = \"30m\"\n";
//! let profile = parse_profile(text, "ci", Path::new("/etc/airlock/profiles/ci.toml"))?;
//! assert_eq!(profile.limits.memory_bytes, 512 << 20);
//! assert_eq!(profile.limits.timeout_seconds, Some(1800));
//! assert_eq!(profile.network, NetworkMode::None);
//! assert!(profile.env_allowed("LC_ALL"));
//!
//! let err = parse_profile("[limits]\nmemroy = 1\n", "ci", Path::new("ci.toml")).unwrap_err();
//! assert!(err.to_string().starts_with("ci.toml:2:1: unknown key `memroy` in [limits]; "));
//! # Ok::<(), airlock_policy::PolicyError>(())
//! ```

#![forbid(unsafe_code)]

mod doc;
mod error;
mod http_gaps;
pub mod learn;
mod load;
mod parse;
mod profile;
mod render;
mod starters;
pub mod units;

pub use error::{line_column, PolicyError};
pub use load::{
    ensure_outside_workspace, list_profiles, load_file, load_named, profile_names,
    profile_search_dirs, Listed, ListedFrom,
};
pub use parse::parse_profile;
pub use profile::{
    ApplyPolicy, AskPolicy, EnvPolicy, Filesystem, HttpRules, Injection, Limits, NetworkMode,
    Profile, RequestRule, SecretSource, SecretSpec, ToolConfigEntry, BASE_ENV_ALLOW,
    DEFAULT_ASK_TIMEOUT_SECONDS, DEFAULT_PROFILE_NAME, MAX_ASK_TIMEOUT_SECONDS,
};
pub use render::to_toml;
pub use starters::{find_starter, starter, Starter, STARTERS};
