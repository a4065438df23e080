//! A profile written back in its own syntax, every built-in default filled in: what
//! `airlock policy show` prints. Read back by [`crate::parse_profile`] it is the same profile. A
//! secret is shown by its source's reference (a variable's name, a path, a command line) and its
//! hosts; its value is no part of a profile, so it cannot be here.

use toml::{Table, Value};

use crate::profile::{
    EnvPolicy, Filesystem, Injection, Limits, NetworkMode, Profile, SecretSource, SecretSpec,
};
use crate::units::{format_duration, format_size};

/// `profile` as a profile file's TOML.
pub fn to_toml(profile: &Profile) -> Table {
    let mut root = Table::new();
    root.insert("network".into(), network(profile));
    root.insert("filesystem".into(), filesystem(&profile.filesystem).into());
    root.insert("env".into(), env(&profile.env).into());
    root.insert("limits".into(), limits(&profile.limits).into());
    let tool_config = profile
        .apply
        .tool_config
        .iter()
        .map(|entry| {
            let mut t = Table::new();
            t.insert("path".into(), entry.path.clone().into());
            t.insert("reason".into(), entry.reason.clone().into());
            Value::Table(t)
        })
        .collect::<Vec<_>>();
    let mut apply = Table::new();
    apply.insert("tool_config".into(), tool_config.into());
    root.insert("apply".into(), apply.into());
    if !profile.secrets.is_empty() {
        let secrets = profile.secrets.iter().map(secret).map(Value::Table);
        root.insert("secret".into(), Value::Array(secrets.collect()));
    }
    root
}

fn strings<S: ToString>(items: &[S]) -> Value {
    Value::Array(items.iter().map(|s| Value::String(s.to_string())).collect())
}

fn paths(items: &[std::path::PathBuf]) -> Value {
    Value::Array(
        items
            .iter()
            .map(|p| Value::String(p.to_string_lossy().into_owned()))
            .collect(),
    )
}

fn network(profile: &Profile) -> Value {
    let (network, http, ask) = (&profile.network, &profile.http[..], &profile.ask);
    let (allow, deny, open) = match network {
        NetworkMode::None => return "none".into(),
        NetworkMode::Open { allow, deny }
            if allow.is_empty() && deny.is_empty() && http.is_empty() =>
        {
            return "open".into()
        }
        NetworkMode::Open { allow, deny } => (allow, deny, true),
        NetworkMode::Allow { allow, deny } => (allow, deny, false),
    };
    let mut table = Table::new();
    table.insert("allow".into(), strings(allow));
    table.insert("deny".into(), strings(deny));
    if open {
        table.insert("open".into(), true.into());
    }
    if !ask.hosts.is_empty() {
        let mut entries: Vec<String> = ask.hosts.any.then(|| "*".to_string()).into_iter().collect();
        entries.extend(ask.hosts.entries.iter().map(ToString::to_string));
        table.insert("ask".into(), strings(&entries));
        table.insert(
            "ask_timeout".into(),
            format_duration(ask.timeout_seconds).into(),
        );
        if let Some(webhook) = &ask.webhook {
            table.insert("ask_webhook".into(), webhook.clone().into());
        }
    }
    if !http.is_empty() {
        let entries = http.iter().map(|rules| {
            let mut entry = Table::new();
            entry.insert("host".into(), rules.host.clone().into());
            match &rules.allow {
                Some(allow) => entry.insert("allow".into(), strings(allow)),
                None => entry.insert("inspect".into(), true.into()),
            };
            Value::Table(entry)
        });
        table.insert("http".into(), Value::Array(entries.collect()));
    }
    table.into()
}

fn filesystem(fs: &Filesystem) -> Table {
    let mut table = Table::new();
    table.insert("read_only".into(), paths(&fs.read_only));
    table.insert("read_write".into(), paths(&fs.read_write));
    table.insert("hide".into(), paths(&fs.hide));
    table
}

fn env(env: &EnvPolicy) -> Table {
    let mut table = Table::new();
    table.insert("allow".into(), strings(&env.allow));
    let set = env
        .set
        .iter()
        .map(|(k, v)| (k.clone(), Value::String(v.clone())))
        .collect::<Table>();
    table.insert("set".into(), set.into());
    table
}

/// Sizes and durations as a profile writes them (`"2GiB"`, `"1h"`), counts as numbers.
fn limits(limits: &Limits) -> Table {
    let number = |n: u64| Value::Integer(i64::try_from(n).unwrap_or(i64::MAX));
    let size = |n: u64| Value::String(format_size(n));
    let duration = |n: u64| Value::String(format_duration(n));
    let mut table = Table::new();
    table.insert("memory".into(), size(limits.memory_bytes));
    table.insert("processes".into(), number(limits.processes));
    table.insert("cpu".into(), duration(limits.cpu_seconds));
    if let Some(timeout) = limits.timeout_seconds {
        table.insert("timeout".into(), duration(timeout));
    }
    table.insert("tmp_size".into(), size(limits.tmp_bytes));
    table.insert("output".into(), size(limits.output_bytes));
    table.insert("open_files".into(), number(limits.open_files));
    if let Some(millicpus) = limits.millicpus {
        // Exact for every value the parser keeps (thousandths, at most 4096 CPUs).
        table.insert("cpus".into(), Value::Float(millicpus as f64 / 1000.0));
    }
    if let Some(disk) = limits.disk_bytes {
        table.insert("disk".into(), size(disk));
    }
    if let Some(files) = limits.files {
        table.insert("files".into(), number(files));
    }
    table
}

fn secret(spec: &SecretSpec) -> Table {
    let mut from = Table::new();
    match &spec.source {
        SecretSource::Env(name) => from.insert("env".into(), name.clone().into()),
        SecretSource::File(path) => {
            from.insert("file".into(), path.to_string_lossy().into_owned().into())
        }
        SecretSource::Command(argv) => from.insert("command".into(), strings(argv)),
    };
    let inject = match &spec.inject {
        Injection::Placeholder { headers } if headers.is_empty() => {
            Value::String("placeholder".into())
        }
        Injection::Placeholder { headers } => {
            let mut t = Table::new();
            t.insert("placeholder".into(), strings(headers));
            t.into()
        }
        Injection::Header { name, format } => {
            let mut t = Table::new();
            t.insert("header".into(), name.clone().into());
            t.insert("format".into(), format.clone().into());
            t.into()
        }
        Injection::Basic { username } => {
            let mut t = Table::new();
            t.insert("basic".into(), username.clone().into());
            t.into()
        }
        Injection::Query { param } => {
            let mut t = Table::new();
            t.insert("query".into(), param.clone().into());
            t.into()
        }
    };
    let mut table = Table::new();
    table.insert("name".into(), spec.name.clone().into());
    table.insert("from".into(), from.into());
    table.insert("hosts".into(), strings(&spec.hosts));
    table.insert("inject".into(), inject);
    table
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use super::*;

    fn round_trip(text: &str) {
        let origin = Path::new("/etc/airlock/profiles/p.toml");
        let profile = crate::parse_profile(text, "p", origin).unwrap();
        let shown = to_toml(&profile).to_string();
        let again =
            crate::parse_profile(&shown, "p", origin).unwrap_or_else(|e| panic!("{e}\n{shown}"));
        assert_eq!(again, profile, "{shown}");
    }

    #[test]
    fn sizes_and_durations_are_shown_as_written() {
        let origin = Path::new("/etc/airlock/profiles/p.toml");
        let text = "[limits]\nmemory = \"2GiB\"\ntimeout = \"1h\"\ncpu = \"7d\"\n";
        let profile = crate::parse_profile(text, "p", origin).unwrap();
        let shown = to_toml(&profile);
        let limits = shown["limits"].as_table().unwrap();
        assert_eq!(limits["memory"].as_str(), Some("2GiB"));
        assert_eq!(limits["timeout"].as_str(), Some("1h"));
        assert_eq!(limits["cpu"].as_str(), Some("7d"));
        assert_eq!(
            limits["processes"].as_integer(),
            Some(profile.limits.processes as i64)
        );
    }

    #[test]
    fn the_built_in_default_reads_back_as_itself() {
        round_trip("");
        round_trip("network = \"open\"\n");
    }

    #[test]
    fn every_section_reads_back_as_itself() {
        round_trip(
            r#"network = { allow = ["api.github.com", "github.com", "*.pypi.org:443", "10.0.0.0/8"], deny = ["evil.github.com"] }
[filesystem]
read_only = ["/opt/tools"]
read_write = ["/srv/cache"]
hide = ["/opt/tools/private"]
[env]
allow = ["CI", "GITHUB_*"]
set = { RUST_LOG = "info" }
[apply]
tool_config = [{ path = ".toolrc", reason = "runs hooks" }]
[limits]
memory = "1GiB"
processes = 64
cpu = "10m"
timeout = "30m"
tmp_size = "512MiB"
output = "16MiB"
open_files = 1024
cpus = 1.5
disk = "10GiB"
files = 100000

[[secret]]
name = "GITHUB_TOKEN"
from = { env = "CI_BOT_GITHUB_TOKEN" }
hosts = ["api.github.com", "github.com"]
inject = { header = "Authorization", format = "Bearer {}" }

[[secret]]
name = "GIT_PASSWORD"
from = { file = "/etc/airlock/secrets/gh" }
hosts = ["github.com"]
inject = { basic = "x-access-token" }

[[secret]]
name = "MAPS_KEY"
from = { command = ["pass", "show", "maps"] }
hosts = ["api.github.com"]
inject = { query = "key" }

[[secret]]
name = "OTHER"
from = { env = "OTHER_SOURCE" }
hosts = ["github.com"]
inject = "placeholder"

[[secret]]
name = "GITLAB"
from = { env = "GITLAB_SOURCE" }
hosts = ["github.com"]
inject = { placeholder = ["PRIVATE-TOKEN"] }
"#,
        );
        round_trip("network = { open = true, deny = [\"10.0.0.0/8\"] }\n");
    }

    #[test]
    fn http_rules_read_back_as_themselves() {
        round_trip(
            r#"[network]
allow = ["api.github.com", "example.org"]
[[network.http]]
host = "api.github.com"
allow = ["GET /repos/acme/*", "* /repos/acme/*/issues/**"]
[[network.http]]
host = "example.org"
inspect = true
"#,
        );
        round_trip(
            "[network]\nopen = true\n[[network.http]]\nhost = \"example.org\"\ninspect = true\n",
        );
    }
}
