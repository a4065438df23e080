//! airlock's own configuration file: what the whole installation does beyond any one profile.
//! Today only `[audit]`: where copies of the audit log's records go (`export`), and how long the
//! log keeps its sealed segments (`keep_days`, `keep_size`).
//!
//! ```toml
//! [audit]
//! export = ["stdout", "otlp"]          # each record also as a JSON line on stdout, and over OTLP
//! keep_days = 365                      # remove sealed segments whose records are all older
//! keep_size = "20GiB"                  # remove the oldest sealed segments past this size
//!
//! [audit.otlp]
//! endpoint = "https://collector.example:4318/v1/logs"
//! headers = { authorization = { env = "OTLP_AUTHORIZATION" } }   # or "literal", or { file = PATH }
//! ca_file = "/etc/airlock/collector-ca.pem"                      # else the system's CAs
//! ```
//!
//! Found at `--config PATH` (or `AIRLOCK_CONFIG`), else `/etc/airlock/config.toml` as root and
//! `$XDG_CONFIG_HOME/airlock/config.toml` (`~/.config/airlock/config.toml`) otherwise; a file that
//! is not there means the defaults (no export), unless it was named explicitly. Read strictly:
//! an unknown key, an unknown destination or an endpoint that is not a URL stops the program at
//! start with the file, the line and what to do — a typo must never mean "export quietly off".

use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::fmt;
use std::ops::Range;
use std::path::{Path, PathBuf};

use serde::Deserialize;
use toml::Spanned;

/// The file's name in the directories searched.
pub const CONFIG_FILE: &str = "config.toml";

#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file's content is wrong; located at the offending key or value.
    #[error("{}:{line}:{column}: {message}; {hint}", .path.display())]
    Invalid {
        path: PathBuf,
        line: usize,
        column: usize,
        message: String,
        hint: String,
    },
    #[error("cannot read airlock's config {}: {source}; {hint}", .path.display())]
    Unreadable {
        path: PathBuf,
        source: std::io::Error,
        hint: &'static str,
    },
}

/// The whole file, validated. `Config::default()` is what an absent file means.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Config {
    pub audit: AuditConfig,
}

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct AuditConfig {
    /// Where each record also goes, in the order named; empty: nowhere (the local log only).
    pub export: Vec<Destination>,
    /// How long sealed segments are kept (`keep_days`, `keep_size`); unlimited by default.
    pub retention: airlock_audit::Retention,
}

/// One place exported records go.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// One JSON line per record, exactly as stored, on the exporting process's stdout.
    Stdout,
    /// OpenTelemetry logs over OTLP/HTTP (protobuf).
    Otlp(OtlpConfig),
}

impl Destination {
    /// Every destination's name, as [`Destination::name`] gives it: the cursors a state
    /// directory may hold.
    pub const NAMES: [&'static str; 2] = ["stdout", "otlp"];

    /// Its name in `export = [...]`, which also names its cursor in the state directory.
    pub fn name(&self) -> &'static str {
        match self {
            Destination::Stdout => "stdout",
            Destination::Otlp(_) => "otlp",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OtlpConfig {
    pub endpoint: Endpoint,
    /// Sent with every request, their values already read (from the file, the environment).
    pub headers: Vec<(String, HeaderValue)>,
    /// The CAs the collector's certificate is checked by (PEM); None: the system's.
    pub ca_file: Option<PathBuf>,
}

/// A header's value: kept out of `Debug` output, as it is usually a credential.
#[derive(Clone, PartialEq, Eq)]
pub struct HeaderValue(pub String);

impl fmt::Debug for HeaderValue {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("HeaderValue(…)")
    }
}

/// Where an OTLP/HTTP collector takes logs: `http[s]://HOST[:PORT]/PATH`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub tls: bool,
    /// A name, or an IP address (an IPv6 one without its brackets).
    pub host: String,
    pub port: u16,
    /// The path (and query) to POST to; `/v1/logs` when the URL gives none.
    pub path: String,
}

impl Endpoint {
    /// What the Host header says.
    pub fn authority(&self) -> String {
        let host = if self.host.contains(':') {
            format!("[{}]", self.host)
        } else {
            self.host.clone()
        };
        let default = if self.tls { 443 } else { 80 };
        if self.port == default {
            host
        } else {
            format!("{host}:{}", self.port)
        }
    }

    fn is_loopback(&self) -> bool {
        self.host == "localhost"
            || self
                .host
                .parse::<std::net::IpAddr>()
                .is_ok_and(|ip| ip.is_loopback())
    }
}

impl fmt::Display for Endpoint {
    /// As a person reads it in messages: the query, which may carry a key, left out.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let scheme = if self.tls { "https" } else { "http" };
        let path = match self.path.split_once('?') {
            Some((path, _)) => format!("{path}?…"),
            None => self.path.clone(),
        };
        write!(f, "{scheme}://{}{path}", self.authority())
    }
}

/// Which file to read: the one named (`--config`, `AIRLOCK_CONFIG`), which must exist, else the
/// default place for this user, which may not. `None` when no default can be found (no HOME).
pub fn config_path(
    explicit: Option<&OsStr>,
    is_root: bool,
    xdg_config_home: Option<&OsStr>,
    home: Option<&OsStr>,
) -> Option<(PathBuf, bool)> {
    if let Some(path) = explicit.filter(|p| !p.is_empty()) {
        return Some((PathBuf::from(path), true));
    }
    let dir = if is_root {
        PathBuf::from("/etc/airlock")
    } else if let Some(xdg) = xdg_config_home.filter(|d| !d.is_empty()) {
        PathBuf::from(xdg).join("airlock")
    } else {
        PathBuf::from(home.filter(|d| !d.is_empty())?).join(".config/airlock")
    };
    Some((dir.join(CONFIG_FILE), false))
}

/// Where this process looks for its config: `explicit` (from `--config` or `AIRLOCK_CONFIG`),
/// else the default place for its user; and whether the file was named (so must exist).
pub fn location(explicit: Option<&Path>) -> Option<(PathBuf, bool)> {
    config_path(
        explicit.map(Path::as_os_str),
        nix::unistd::geteuid().is_root(),
        std::env::var_os("XDG_CONFIG_HOME").as_deref(),
        std::env::var_os("HOME").as_deref(),
    )
}

/// This process's config: `explicit` (from `--config` or `AIRLOCK_CONFIG`) or the default file.
/// Returns the file read, if one was, with what it says.
pub fn load(explicit: Option<&Path>) -> Result<(Config, Option<PathBuf>), ConfigError> {
    let Some((path, named)) = location(explicit) else {
        return Ok((Config::default(), None));
    };
    let text = match std::fs::read_to_string(&path) {
        Ok(text) => text,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound && !named => {
            return Ok((Config::default(), None))
        }
        Err(source) => {
            return Err(ConfigError::Unreadable {
                path,
                source,
                hint: if named {
                    "check the path given with --config (or AIRLOCK_CONFIG)"
                } else {
                    "make it readable, or name another file with --config"
                },
            })
        }
    };
    let config = parse(&path, &text, &|name| std::env::var(name).ok())?;
    Ok((config, Some(path)))
}

// The file as written, before validation. Every table refuses keys it does not know.

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawConfig {
    audit: Option<RawAudit>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawAudit {
    #[serde(default)]
    export: Vec<Spanned<String>>,
    otlp: Option<Spanned<RawOtlp>>,
    keep_days: Option<Spanned<i64>>,
    keep_size: Option<Spanned<String>>,
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct RawOtlp {
    endpoint: Spanned<String>,
    #[serde(default)]
    headers: BTreeMap<String, Spanned<RawHeaderValue>>,
    ca_file: Option<Spanned<String>>,
}

/// A header's value as written: a string, `{ env = "NAME" }` or `{ file = "/path" }` (read as a
/// plain TOML value, so that anything else gets a message that shows the three forms).
type RawHeaderValue = toml::Value;

/// Where a problem is, and how to say it.
struct Located<'a> {
    path: &'a Path,
    text: &'a str,
}

impl Located<'_> {
    fn error(&self, span: Range<usize>, message: impl Into<String>, hint: &str) -> ConfigError {
        let (line, column) = airlock_policy::line_column(self.text, span.start);
        ConfigError::Invalid {
            path: self.path.to_path_buf(),
            line,
            column,
            message: message.into(),
            hint: hint.to_string(),
        }
    }
}

/// Parse and validate `text`, the content of `path`; `env` reads the environment (a header's
/// value may come from it).
pub fn parse(
    path: &Path,
    text: &str,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<Config, ConfigError> {
    let at = Located { path, text };
    let raw: RawConfig = toml::from_str(text).map_err(|e| {
        at.error(
            e.span().unwrap_or(0..0),
            e.message().trim_end(),
            "the config takes an [audit] table with `export`, `keep_days`, `keep_size` and [audit.otlp] (see docs/audit.md)",
        )
    })?;
    let Some(audit) = raw.audit else {
        return Ok(Config::default());
    };
    let retention = retention(&at, audit.keep_days, audit.keep_size)?;
    let mut otlp = audit.otlp;
    let mut export = Vec::new();
    for name in &audit.export {
        let destination = match name.get_ref().as_str() {
            "stdout" => Destination::Stdout,
            "otlp" => {
                let Some(raw) = otlp.take() else {
                    return Err(at.error(
                        name.span(),
                        "\"otlp\" is named in `export` but there is no [audit.otlp] table, or it is named twice",
                        "add [audit.otlp] with endpoint = \"http://collector:4318/v1/logs\"",
                    ));
                };
                Destination::Otlp(otlp_config(&at, raw.into_inner(), env)?)
            }
            other => {
                return Err(at.error(
                    name.span(),
                    format!("unknown export destination {other:?}"),
                    "name \"stdout\" or \"otlp\"",
                ))
            }
        };
        if export.contains(&destination) {
            return Err(at.error(
                name.span(),
                format!("{:?} is named twice in `export`", destination.name()),
                "name each destination once",
            ));
        }
        export.push(destination);
    }
    if let Some(unused) = otlp {
        return Err(at.error(
            unused.span(),
            "[audit.otlp] is set but `export` does not name \"otlp\"",
            "add \"otlp\" to export = [...] under [audit], or remove the table",
        ));
    }
    Ok(Config {
        audit: AuditConfig { export, retention },
    })
}

fn retention(
    at: &Located<'_>,
    keep_days: Option<Spanned<i64>>,
    keep_size: Option<Spanned<String>>,
) -> Result<airlock_audit::Retention, ConfigError> {
    let keep_days = match keep_days {
        Some(days) if *days.get_ref() < 1 => {
            return Err(at.error(
                days.span(),
                format!("keep_days = {} keeps nothing", days.get_ref()),
                "give a number of days of at least 1, or leave keep_days out to keep every day",
            ))
        }
        Some(days) => Some(days.into_inner().unsigned_abs()),
        None => None,
    };
    let keep_bytes = match keep_size {
        Some(size) => {
            let bytes = airlock_policy::units::parse_size(size.get_ref())
                .ok()
                .filter(|bytes| *bytes > 0)
                .ok_or_else(|| {
                    at.error(
                        size.span(),
                        format!("keep_size {:?} is not a size", size.get_ref()),
                        "give a size such as \"20GiB\" or \"500MiB\", or leave keep_size out to keep every size",
                    )
                })?;
            Some(bytes)
        }
        None => None,
    };
    Ok(airlock_audit::Retention {
        keep_days,
        keep_bytes,
    })
}

fn otlp_config(
    at: &Located<'_>,
    raw: RawOtlp,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<OtlpConfig, ConfigError> {
    let endpoint = parse_endpoint(raw.endpoint.get_ref()).map_err(|why| {
        at.error(
            raw.endpoint.span(),
            format!("endpoint {:?}: {why}", raw.endpoint.get_ref()),
            "give the collector's OTLP/HTTP URL, e.g. \"http://otel-collector:4318/v1/logs\"",
        )
    })?;
    let mut headers = Vec::new();
    for (name, value) in &raw.headers {
        let span = value.span();
        check_header_name(name).map_err(|why| {
            at.error(
                span.clone(),
                format!("header {name:?}: {why}"),
                "name a header of your own, such as authorization",
            )
        })?;
        let value = header_value(value.get_ref(), env).map_err(|(why, hint)| {
            at.error(span.clone(), format!("header {name:?}: {why}"), hint)
        })?;
        headers.push((name.to_ascii_lowercase(), value));
    }
    if !headers.is_empty() && !endpoint.tls && !endpoint.is_loopback() {
        // As `--server` refuses a token over http:// beyond loopback: whoever answers at that
        // address, or sees the network, would have the credential.
        return Err(at.error(
            raw.endpoint.span(),
            format!("headers would cross the network in clear text to {endpoint}"),
            "use an https:// endpoint (with ca_file for a private CA)",
        ));
    }
    let ca_file = match raw.ca_file {
        Some(file) if !Path::new(file.get_ref()).is_absolute() => {
            return Err(at.error(
                file.span(),
                format!("ca_file {:?} is not an absolute path", file.get_ref()),
                "give the PEM file's absolute path",
            ))
        }
        Some(file) if !endpoint.tls => {
            return Err(at.error(
                file.span(),
                "ca_file is set but the endpoint is http://",
                "use an https:// endpoint, or remove ca_file",
            ))
        }
        Some(file) => Some(PathBuf::from(file.into_inner())),
        None => None,
    };
    Ok(OtlpConfig {
        endpoint,
        headers,
        ca_file,
    })
}

/// `http[s]://HOST[:PORT][/PATH]`, strictly: no credentials in the URL, no fragment.
pub fn parse_endpoint(url: &str) -> Result<Endpoint, String> {
    let (tls, rest) = if let Some(rest) = url.strip_prefix("https://") {
        (true, rest)
    } else if let Some(rest) = url.strip_prefix("http://") {
        (false, rest)
    } else {
        return Err("not an http:// or https:// URL".into());
    };
    if url
        .chars()
        .any(|c| c.is_ascii_control() || c.is_whitespace())
    {
        return Err("it holds spaces or control characters".into());
    }
    if url.contains('#') {
        return Err("a fragment (#…) means nothing to a collector".into());
    }
    let (authority, path) = match rest.find(['/', '?']) {
        Some(at) => rest.split_at(at),
        None => (rest, ""),
    };
    if authority.contains('@') {
        return Err("credentials in the URL are refused: put them in headers".into());
    }
    let (host, port) = split_host_port(authority)?;
    if host.is_empty() {
        return Err("no host".into());
    }
    let port = match port {
        Some(port) => port
            .parse::<u16>()
            .ok()
            .filter(|p| *p > 0)
            .ok_or_else(|| format!("port {port:?} is not a port number"))?,
        None if tls => 443,
        None => 80,
    };
    let path = match path {
        "" | "/" => "/v1/logs".to_string(),
        p if p.starts_with('?') => format!("/v1/logs{p}"),
        p => p.to_string(),
    };
    Ok(Endpoint {
        tls,
        host: host.to_string(),
        port,
        path,
    })
}

/// `name`, `name:port`, `[v6]`, `[v6]:port`.
fn split_host_port(authority: &str) -> Result<(&str, Option<&str>), String> {
    if let Some(rest) = authority.strip_prefix('[') {
        let (host, after) = rest
            .split_once(']')
            .ok_or("an IPv6 address without its closing ]")?;
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("[{host}] is not an IPv6 address"));
        }
        return match after {
            "" => Ok((host, None)),
            _ => match after.strip_prefix(':') {
                Some(port) => Ok((host, Some(port))),
                None => Err(format!("{after:?} after the address")),
            },
        };
    }
    let (host, port) = match authority.split_once(':') {
        Some((host, port)) => (host, Some(port)),
        None => (authority, None),
    };
    let name_char = |c: char| c.is_ascii_alphanumeric() || c == '-' || c == '.' || c == '_';
    if !host.chars().all(name_char) {
        return Err(format!(
            "{host:?} is not a host name or address (IPv6 goes in [ ])"
        ));
    }
    Ok((host, port))
}

/// A header name (RFC 9110's token), and not one the exporter sets itself.
fn check_header_name(name: &str) -> Result<(), String> {
    let token = |c: char| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c);
    if name.is_empty() || !name.chars().all(token) {
        return Err("not a header name".into());
    }
    let lower = name.to_ascii_lowercase();
    if matches!(
        lower.as_str(),
        "host"
            | "content-type"
            | "content-length"
            | "content-encoding"
            | "transfer-encoding"
            | "connection"
    ) {
        return Err("airlock sets this header itself".into());
    }
    Ok(())
}

fn header_value(
    raw: &RawHeaderValue,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<HeaderValue, (String, &'static str)> {
    const FORMS: &str =
        "write a string, { env = \"VARIABLE\" } or { file = \"/run/secrets/otlp-token\" }";
    let source = match raw {
        toml::Value::String(_) => None,
        toml::Value::Table(table) if table.len() == 1 => table.iter().next(),
        _ => return Err(("not a header value".into(), FORMS)),
    };
    let value = match source {
        None => raw.as_str().unwrap_or_default().to_string(),
        Some((kind, toml::Value::String(name))) if kind == "env" => env(name).ok_or_else(|| {
            (
                format!("the environment variable {name} is not set"),
                "set it in the environment of the process reading the config (a Kubernetes Secret as an env var)",
            )
        })?,
        Some((kind, toml::Value::String(file))) if kind == "file" => std::fs::read_to_string(file)
            .map(|text| text.trim_end_matches(['\n', '\r']).to_string())
            .map_err(|e| {
                (
                    format!("cannot read {file}: {e}"),
                    "give a readable file holding the value (a mounted Secret)",
                )
            })?,
        Some((kind, _)) => return Err((format!("`{kind}` is not a source of a header value"), FORMS)),
    };
    if value.chars().any(|c| c.is_ascii_control() && c != '\t') || !value.is_ascii() {
        return Err((
            "the value holds control characters or non-ASCII text".into(),
            "a header value is one line of ASCII",
        ));
    }
    Ok(HeaderValue(value))
}

#[cfg(test)]
mod tests;
