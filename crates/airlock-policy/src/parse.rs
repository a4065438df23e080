//! The profile format: which keys exist, and the rules their values must follow.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};

use toml::de::DeValue;

use crate::doc::{Doc, Key, Section, Value};
use crate::error::PolicyError;
use crate::profile::{AskPolicy, EnvPolicy, Filesystem, Limits, NetworkMode, Profile};
use airlock_rules::{Destination, HttpRules};

const TOP: Section = Section {
    name: None,
    keys: &["network", "filesystem", "env", "limits", "apply", "secret"],
};
const NETWORK: Section = Section {
    name: Some("network"),
    keys: &[
        "allow",
        "deny",
        "open",
        "http",
        "ask",
        "ask_timeout",
        "ask_webhook",
    ],
};
const FILESYSTEM: Section = Section {
    name: Some("filesystem"),
    keys: &["read_only", "read_write", "hide"],
};
const ENV: Section = Section {
    name: Some("env"),
    keys: &["allow", "set"],
};
const LIMITS: Section = Section {
    name: Some("limits"),
    keys: &[
        "memory",
        "processes",
        "cpu",
        "timeout",
        "tmp_size",
        "output",
        "open_files",
        "cpus",
        "disk",
        "files",
    ],
};

/// Below this a shell barely starts, and the failure would look like a bug in the command.
const MIN_MEMORY_BYTES: u64 = 16 << 20;
/// Beyond any real build; a larger number is almost surely a typo, and `pid_max` caps it anyway.
const MAX_PROCESSES: u64 = 1_000_000;
/// The dynamic loader and a shell already hold a handful of descriptors.
const MIN_OPEN_FILES: u64 = 16;
/// cgroup v1 takes a quota of at least 1ms per 100ms period: a hundredth of a CPU.
const MIN_MILLICPUS: u64 = 10;
/// More CPUs than any machine airlock runs on has; a larger number is a typo.
const MAX_MILLICPUS: u64 = 4096 * 1000;
/// A filesystem image smaller than this holds little more than its own metadata.
const MIN_DISK_BYTES: u64 = 4 << 20;
/// The layer's own directories and overlayfs' work dir take a handful of inodes.
const MIN_FILES: u64 = 64;

/// Parses and validates a profile. `origin` is named in errors and recorded as the source.
pub fn parse_profile(text: &str, name: &str, origin: &Path) -> Result<Profile, PolicyError> {
    let doc = Doc { text, origin };
    let root = doc.parse()?;
    let mut profile = Profile {
        name: name.to_string(),
        source: Some(origin.to_path_buf()),
        ..Profile::builtin_default()
    };
    // Judged last: a secret's hosts and name are checked against [network] and [env], which
    // may be written after it.
    let mut secrets = None;
    for (key, value) in doc.entries(root.get_ref(), &TOP) {
        match key.name {
            "network" => (profile.network, profile.http, profile.ask) = network(&doc, value)?,
            "filesystem" => filesystem(&doc, &key, value, &mut profile.filesystem)?,
            "env" => env(&doc, &key, value, &mut profile.env)?,
            "limits" => limits(&doc, &key, value, &mut profile.limits)?,
            "apply" => apply::apply(&doc, &key, value, &mut profile.apply)?,
            "secret" => secrets = Some((key, value)),
            _ => return Err(doc.unknown_key(&key)),
        }
    }
    if let Some((key, value)) = secrets {
        profile.secrets = secret::secrets(&doc, &key, value, &profile)?;
    }
    Ok(profile)
}

/// `network = "none"`, `network = "open"`, or a table: `allow = [...]`, `deny = [...]`,
/// `open = true` for everything but what `deny` names, and `[[network.http]]` rules.
fn network(
    doc: &Doc,
    value: &Value,
) -> Result<(NetworkMode, Vec<HttpRules>, AskPolicy), PolicyError> {
    const HINT: &str = "write network = \"none\", network = \"open\", or network = { allow = [\"github.com\", \"*.pypi.org:443\"] }";
    if let toml::de::DeValue::String(mode) = value.get_ref() {
        return match mode.as_ref() {
            "none" => Ok((NetworkMode::None, Vec::new(), AskPolicy::default())),
            "open" => Ok((
                NetworkMode::Open {
                    allow: Vec::new(),
                    deny: Vec::new(),
                },
                Vec::new(),
                AskPolicy::default(),
            )),
            other => Err(doc.error(
                value.span(),
                format!(
                    "network = \"{}\" is not a network mode",
                    other.escape_debug()
                ),
                HINT,
            )),
        };
    }
    let toml::de::DeValue::Table(table) = value.get_ref() else {
        return Err(doc.wrong_type_of("`network`", value, "a string or a table", HINT));
    };
    let (mut allow, mut deny, mut open) = (Vec::new(), Vec::new(), false);
    let mut ask = AskPolicy::default();
    // Judged last: a rule's host must be allowed by the keys around it.
    let mut rules = None;
    // Judged last: asking means nothing when everything is open.
    let mut asked_at = None;
    for (key, value) in doc.entries(table, &NETWORK) {
        match key.name {
            "http" => rules = Some((key, value)),
            "allow" => allow = destinations(doc, &key, value)?,
            "deny" => deny = destinations(doc, &key, value)?,
            "ask" => {
                ask.hosts = asked(doc, &key, value)?;
                asked_at = Some(value.span());
            }
            "ask_timeout" => ask.timeout_seconds = ask_timeout(doc, &key, value)?,
            "ask_webhook" => ask.webhook = Some(webhook(doc, &key, value)?),
            "open" => match value.get_ref() {
                toml::de::DeValue::Boolean(b) => open = *b,
                _ => {
                    return Err(doc.error(value.span(), "network.open must be true or false", HINT))
                }
            },
            _ => return Err(doc.unknown_key(&key)),
        }
    }
    if let Some(span) = asked_at.filter(|_| open && !ask.hosts.is_empty()) {
        return Err(doc.error(
            span,
            "network.ask with open = true: every public host is allowed already, so nothing would be asked",
            "leave out open = true and list what is allowed without asking in allow",
        ));
    }
    let mode = if open {
        NetworkMode::Open { allow, deny }
    } else {
        NetworkMode::Allow { allow, deny }
    };
    let rules = match rules {
        Some((key, value)) => http::http(doc, &key, value, &mode)?,
        None => Vec::new(),
    };
    Ok((mode, rules, ask))
}

/// `ask = ["*.github.com", "api.example.com:443"]`, or `["*"]` for any public host no allow
/// entry names: entries as `allow` writes them.
fn asked(doc: &Doc, key: &Key, value: &Value) -> Result<airlock_rules::Ask, PolicyError> {
    let example = "e.g. ask = [\"*.github.com\", \"api.example.com:443\"], or ask = [\"*\"] for any public host";
    let item_key = key.item();
    let mut ask = airlock_rules::Ask::default();
    for item in doc.array(key, value, example)? {
        let text = doc.string(&item_key, item, example)?;
        if text.trim() == "*" {
            ask.any = true;
            continue;
        }
        let destination = Destination::parse(text).map_err(|e| {
            doc.error(
                item.span(),
                format!("{}: {e}", item_key.describe()),
                "a host name (a leading `*.` for its subdomains), an IP address or a network, each with an optional :PORT; or \"*\" for any public host",
            )
        })?;
        ask.entries.push(destination);
    }
    Ok(ask)
}

/// `ask_timeout = "2m"` or a number of seconds: at least a second, at most an hour.
fn ask_timeout(doc: &Doc, key: &Key, value: &Value) -> Result<u64, PolicyError> {
    let seconds = doc.duration(key, value, "e.g. ask_timeout = \"2m\"")?;
    if !(1..=crate::profile::MAX_ASK_TIMEOUT_SECONDS).contains(&seconds) {
        return Err(doc.error(
            value.span(),
            format!("{} must be from 1 second to 1 hour", key.describe()),
            "e.g. ask_timeout = \"2m\" (the default is 60 seconds)",
        ));
    }
    Ok(seconds)
}

/// `ask_webhook = "https://n8n.example.com/webhook/airlock"`: an http(s) URL with a host, and
/// nothing a person could not read back.
fn webhook(doc: &Doc, key: &Key, value: &Value) -> Result<String, PolicyError> {
    let example = "e.g. ask_webhook = \"https://n8n.example.com/webhook/airlock\"";
    let text = doc.string(key, value, example)?;
    let rest = text
        .strip_prefix("https://")
        .or_else(|| text.strip_prefix("http://"));
    let host = rest.map(|r| r.split(['/', '?', '#']).next().unwrap_or_default());
    let fine = text.len() <= 2048
        && text.bytes().all(|b| b.is_ascii_graphic())
        && host.is_some_and(|h| !h.is_empty() && !h.contains('@'));
    if !fine {
        return Err(doc.error(
            value.span(),
            format!(
                "{} is not an http:// or https:// URL with a host (and no user:password@)",
                key.describe()
            ),
            example,
        ));
    }
    Ok(text.to_string())
}

/// Hosts (`github.com`, `*.pypi.org`, with `:PORT`), addresses and networks.
fn destinations(doc: &Doc, key: &Key, value: &Value) -> Result<Vec<Destination>, PolicyError> {
    let example = format!(
        "e.g. {} = [\"github.com\", \"*.pypi.org:443\", \"10.0.0.5:5432\"]",
        key.name
    );
    let item_key = key.item();
    let mut out = Vec::new();
    for item in doc.array(key, value, &example)? {
        let text = doc.string(&item_key, item, &example)?;
        let destination = Destination::parse(text).map_err(|e| {
            doc.error(
                item.span(),
                format!("{}: {e}", item_key.describe()),
                "a host name (a leading `*.` for its subdomains), an IP address or a network, each with an optional :PORT",
            )
        })?;
        out.push(destination);
    }
    Ok(out)
}

fn filesystem(doc: &Doc, key: &Key, value: &Value, fs: &mut Filesystem) -> Result<(), PolicyError> {
    for (key, value) in doc.entries(doc.table(key, value)?, &FILESYSTEM) {
        match key.name {
            "read_only" => fs.read_only = paths(doc, &key, value, false)?,
            "read_write" => fs.read_write = paths(doc, &key, value, false)?,
            // Hiding `/` would leave the command nothing to run, and is surely a mistake.
            "hide" => fs.hide = paths(doc, &key, value, true)?,
            _ => return Err(doc.unknown_key(&key)),
        }
    }
    Ok(())
}

/// Absolute paths without `..`, normalised. `..` is refused rather than resolved: resolving it
/// without the filesystem could disagree with the kernel (symlinks), and the jail must bind
/// exactly the path the user read in the profile.
fn paths(
    doc: &Doc,
    key: &Key,
    value: &Value,
    refuse_root: bool,
) -> Result<Vec<PathBuf>, PolicyError> {
    let example = format!("e.g. {} = [\"/opt/tools\"]", key.name);
    let item_key = key.item();
    let mut out = Vec::new();
    for item in doc.array(key, value, &example)? {
        let text = doc.string(&item_key, item, &example)?;
        let problem = |what: String, hint: &str| {
            doc.error(
                item.span(),
                format!("{}: {what}", item_key.describe()),
                hint,
            )
        };
        let path = Path::new(text);
        if text.is_empty() {
            return Err(problem(
                "empty path".into(),
                "remove it, or write a full path starting with `/`",
            ));
        }
        if !path.is_absolute() {
            return Err(problem(
                format!("`{}` is not an absolute path", text.escape_debug()),
                "write the full path, starting with `/` (`~` and variables are not expanded)",
            ));
        }
        if path.components().any(|c| c == Component::ParentDir) {
            return Err(problem(
                format!("`{}` contains `..`", text.escape_debug()),
                "write the path without `..` components",
            ));
        }
        let path: PathBuf = path.components().collect();
        if refuse_root && path == Path::new("/") {
            return Err(problem(
                "hiding `/` would hide everything".into(),
                "list the directories to hide, e.g. hide = [\"/opt/tools/private\"]",
            ));
        }
        out.push(path);
    }
    Ok(out)
}

fn env(doc: &Doc, key: &Key, value: &Value, env: &mut EnvPolicy) -> Result<(), PolicyError> {
    for (key, value) in doc.entries(doc.table(key, value)?, &ENV) {
        match key.name {
            "allow" => env.allow = env_allow(doc, &key, value)?,
            "set" => env.set = env_set(doc, &key, value)?,
            _ => return Err(doc.unknown_key(&key)),
        }
    }
    Ok(())
}

fn env_allow(doc: &Doc, key: &Key, value: &Value) -> Result<Vec<String>, PolicyError> {
    let example = "e.g. allow = [\"CI\", \"GITHUB_*\"]";
    let item_key = key.item();
    let mut allow = Vec::new();
    for item in doc.array(key, value, example)? {
        let pattern = doc.string(&item_key, item, example)?;
        check_env_name(doc, &item_key.describe(), item.span(), pattern, true)?;
        allow.push(pattern.to_string());
    }
    Ok(allow)
}

fn env_set(doc: &Doc, key: &Key, value: &Value) -> Result<BTreeMap<String, String>, PolicyError> {
    let example = "e.g. set = { RUST_LOG = \"info\" }";
    let mut set = BTreeMap::new();
    for (name, val) in doc.map_entries(key, value, example)? {
        let subject = "a variable name in [env] set";
        check_env_name(doc, subject, name.span(), name.get_ref(), false)?;
        let shown = name.get_ref().escape_debug();
        let DeValue::String(text) = val.get_ref() else {
            return Err(doc.wrong_type_of(
                &format!("the value of `{shown}` in [env] set"),
                val,
                "a string",
                &format!("quote it: {shown} = \"…\""),
            ));
        };
        if text.contains('\0') {
            return Err(doc.error(
                val.span(),
                format!("the value of `{shown}` in [env] set contains a NUL character"),
                "remove the \\u0000; the environment cannot carry it",
            ));
        }
        set.insert(name.get_ref().to_string(), text.to_string());
    }
    Ok(set)
}

/// A name the environment can carry: the kernel splits `NAME=value` at the first `=` and ends it
/// at NUL, so either inside a name would silently become a different variable.
pub(crate) fn check_env_name(
    doc: &Doc,
    subject: &str,
    span: Range<usize>,
    name: &str,
    is_pattern: bool,
) -> Result<(), PolicyError> {
    let shown = name.escape_debug();
    let problem = if name.is_empty() {
        Some(("empty variable name".to_string(), "remove it"))
    } else if name.contains('=') {
        let hint = if is_pattern {
            "a name cannot contain `=`; to give a variable a value, use set = { NAME = \"value\" }"
        } else {
            "a name cannot contain `=`; write it as NAME = \"value\""
        };
        Some((format!("`{shown}` contains `=`"), hint))
    } else if name.contains('\0') {
        Some((
            format!("`{shown}` contains a NUL character"),
            "remove the \\u0000",
        ))
    } else if is_pattern && name.strip_suffix('*').unwrap_or(name).contains('*') {
        Some((
            format!("`{shown}` has `*` before its end"),
            "`*` may only end a pattern, e.g. \"GITHUB_*\"",
        ))
    } else {
        None
    };
    match problem {
        Some((what, hint)) => Err(doc.error(span, format!("{subject}: {what}"), hint)),
        None => Ok(()),
    }
}

fn limits(doc: &Doc, key: &Key, value: &Value, limits: &mut Limits) -> Result<(), PolicyError> {
    for (key, value) in doc.entries(doc.table(key, value)?, &LIMITS) {
        let out_of_range = |what: &str, hint: &str| {
            doc.error(value.span(), format!("{} {what}", key.describe()), hint)
        };
        match key.name {
            "memory" => {
                let bytes = doc.size(&key, value, "e.g. memory = \"2GiB\"")?;
                if bytes < MIN_MEMORY_BYTES {
                    return Err(out_of_range(
                        "is below the minimum of 16MiB",
                        "raise it to at least \"16MiB\"",
                    ));
                }
                limits.memory_bytes = bytes;
            }
            "processes" => {
                let n = doc.integer(&key, value, "e.g. processes = 256")?;
                if n == 0 || n > MAX_PROCESSES {
                    return Err(out_of_range(
                        "must be between 1 and 1000000",
                        "e.g. processes = 256",
                    ));
                }
                limits.processes = n;
            }
            "cpu" => {
                let seconds = doc.duration(&key, value, "e.g. cpu = \"10m\"")?;
                if seconds == 0 {
                    return Err(out_of_range(
                        "is 0, which would kill the command before it starts",
                        "give a CPU time like cpu = \"10m\", or remove the key for the default of 1h",
                    ));
                }
                limits.cpu_seconds = seconds;
            }
            "timeout" => {
                let seconds = doc.duration(&key, value, "e.g. timeout = \"30m\"")?;
                // 0 lets a profile spell out "no timeout"; a zero-second limit would be useless.
                limits.timeout_seconds = (seconds > 0).then_some(seconds);
            }
            "tmp_size" => {
                let bytes = doc.size(&key, value, "e.g. tmp_size = \"512MiB\"")?;
                if bytes == 0 {
                    return Err(out_of_range(
                        "must be more than 0",
                        "e.g. tmp_size = \"512MiB\", or remove the key for the default of 1GiB",
                    ));
                }
                limits.tmp_bytes = bytes;
            }
            "output" => {
                let bytes = doc.size(&key, value, "e.g. output = \"16MiB\"")?;
                if bytes == 0 {
                    return Err(out_of_range(
                        "must be more than 0",
                        "e.g. output = \"16MiB\", or remove the key for the default of 64MiB",
                    ));
                }
                limits.output_bytes = bytes;
            }
            "open_files" => {
                let n = doc.integer(&key, value, "e.g. open_files = 1024")?;
                if n < MIN_OPEN_FILES {
                    return Err(out_of_range(
                        "is below the minimum of 16",
                        "e.g. open_files = 1024",
                    ));
                }
                limits.open_files = n;
            }
            "cpus" => limits.millicpus = Some(cpus(doc, &key, value)?),
            "disk" => {
                let bytes = doc.size(&key, value, "e.g. disk = \"10GiB\"")?;
                if bytes < MIN_DISK_BYTES {
                    return Err(out_of_range(
                        "is below the minimum of 4MiB",
                        "e.g. disk = \"10GiB\", or remove the key: by default a session only has to leave the state directory's filesystem a free margin",
                    ));
                }
                limits.disk_bytes = Some(bytes);
            }
            "files" => {
                let n = doc.integer(&key, value, "e.g. files = 1000000")?;
                if n < MIN_FILES {
                    return Err(out_of_range(
                        "is below the minimum of 64",
                        "e.g. files = 1000000",
                    ));
                }
                limits.files = Some(n);
            }
            _ => return Err(doc.unknown_key(&key)),
        }
    }
    Ok(())
}

/// `cpus = 1.5` or `cpus = 2`: CPU bandwidth, kept in thousandths of a CPU (what cgroups take,
/// without a float in the profile's data).
fn cpus(doc: &Doc, key: &Key, value: &Value) -> Result<u64, PolicyError> {
    const EXAMPLE: &str = "e.g. cpus = 1.5 (CPUs' worth of time for the whole sandbox)";
    let cpus = match value.get_ref() {
        DeValue::Float(_) | DeValue::Integer(_) => value_as_f64(value.get_ref()),
        _ => None,
    };
    let Some(cpus) = cpus else {
        return Err(doc.wrong_type_of(&key.describe(), value, "a number of CPUs", EXAMPLE));
    };
    let millicpus = (cpus * 1000.0).round();
    if !millicpus.is_finite()
        || millicpus < MIN_MILLICPUS as f64
        || millicpus > MAX_MILLICPUS as f64
    {
        return Err(doc.error(
            value.span(),
            format!("{} must be between 0.01 and 4096", key.describe()),
            "e.g. cpus = 1.5, or remove the key for the default: all CPUs but one",
        ));
    }
    // In range, so the conversion is exact.
    Ok(millicpus as u64)
}

fn value_as_f64(value: &DeValue) -> Option<f64> {
    match value {
        DeValue::Float(f) => f.as_str().replace('_', "").parse().ok(),
        DeValue::Integer(i) => i64::from_str_radix(i.as_str(), i.radix())
            .ok()
            .map(|n| n as f64),
        _ => None,
    }
}

mod apply;
mod http;
mod secret;

#[cfg(test)]
mod tests;
