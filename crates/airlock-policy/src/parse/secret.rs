//! `[[secret]]`: a credential the sandbox uses without seeing it.
//!
//! ```toml
//! [[secret]]
//! name = "GITHUB_TOKEN"                       # the variable the sandbox sees (a placeholder)
//! from = { env = "CI_BOT_GITHUB_TOKEN" }      # or { file = "/abs/path" } or { command = ["pass", "gh"] }
//! hosts = ["api.github.com", "github.com"]    # names only, each allowed by [network]
//! inject = { header = "Authorization", format = "Bearer {}" }
//! ```
//!
//! Every rule here closes a way the real value could reach somewhere it must not: the sandbox's
//! environment ([env] set or allow naming it), a host the gate would refuse anyway, or no
//! network at all (a secret that could never be used is a mistake worth saying).

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Component, Path, PathBuf};

use airlock_rules::Destination;
use toml::de::DeValue;

use crate::doc::{Doc, Key, Section, Value};
use crate::error::PolicyError;
use crate::profile::{Injection, NetworkMode, Profile, SecretSource, SecretSpec};

const SECRET: Section = Section {
    name: Some("secret"),
    keys: &["name", "from", "hosts", "inject"],
};
const FROM: Section = Section {
    name: Some("secret.from"),
    keys: &["env", "file", "command"],
};
const INJECT: Section = Section {
    name: Some("secret.inject"),
    keys: &["header", "format", "basic", "query", "placeholder"],
};
const EXAMPLE: &str = "e.g. [[secret]] name = \"GITHUB_TOKEN\", from = { env = \"CI_BOT_GITHUB_TOKEN\" }, hosts = [\"api.github.com\"], inject = { header = \"Authorization\", format = \"Bearer {}\" }";
const FROM_HINT: &str = "write exactly one of from = { env = \"VAR\" }, from = { file = \"/etc/airlock/secrets/NAME\" } or from = { command = [\"pass\", \"NAME\"] }";
const INJECT_HINT: &str = "write inject = { header = \"Authorization\", format = \"Bearer {}\" }, inject = { basic = \"USER\" }, inject = { query = \"PARAM\" }, inject = \"placeholder\" or inject = { placeholder = [\"PRIVATE-TOKEN\"] }";

/// Every `[[secret]]` of the file, judged against the rest of `profile`.
pub(super) fn secrets(
    doc: &Doc,
    key: &Key,
    value: &Value,
    profile: &Profile,
) -> Result<Vec<SecretSpec>, PolicyError> {
    let items = doc.array(key, value, EXAMPLE)?;
    if profile.network == NetworkMode::None && !items.is_empty() {
        return Err(doc.error(
            key.span.clone(),
            "[[secret]] with network = \"none\": no request could ever carry it",
            "allow its hosts in [network], e.g. network = { allow = [\"api.github.com\"] }, or remove the [[secret]]",
        ));
    }
    let item_key = key.item();
    let mut out: Vec<SecretSpec> = Vec::new();
    let mut seen: BTreeMap<String, ()> = BTreeMap::new();
    for item in items {
        let (spec, name_span) = entry(doc, &item_key, item, profile)?;
        if seen.insert(spec.name.clone(), ()).is_some() {
            return Err(doc.error(
                name_span,
                format!("two [[secret]] entries are named `{}`", spec.name),
                "give each secret its own variable name, or remove one",
            ));
        }
        out.push(spec);
    }
    Ok(out)
}

/// What a `[[secret]]` entry has been given so far, and where.
#[derive(Default)]
struct Parts {
    name: Option<(String, Range<usize>)>,
    source: Option<SecretSource>,
    hosts: Option<Vec<String>>,
    inject: Option<Injection>,
}

fn entry(
    doc: &Doc,
    key: &Key,
    item: &Value,
    profile: &Profile,
) -> Result<(SecretSpec, Range<usize>), PolicyError> {
    let DeValue::Table(table) = item.get_ref() else {
        return Err(doc.wrong_type_of(&key.describe(), item, "a table", EXAMPLE));
    };
    let mut parts = Parts::default();
    for (field, value) in doc.entries(table, &SECRET) {
        match field.name {
            "name" => parts.name = Some(name(doc, &field, value, profile)?),
            "from" => parts.source = Some(source(doc, &field, value, profile)?),
            "hosts" => parts.hosts = Some(hosts(doc, &field, value, profile)?),
            "inject" => parts.inject = Some(inject(doc, value)?),
            _ => return Err(doc.unknown_key(&field)),
        }
    }
    let missing = |what: &str| {
        doc.error(
            item.span(),
            format!("a [[secret]] has no `{what}`"),
            EXAMPLE,
        )
    };
    let (name, name_span) = parts.name.ok_or_else(|| missing("name"))?;
    let spec = SecretSpec {
        name,
        source: parts.source.ok_or_else(|| missing("from"))?,
        hosts: parts.hosts.ok_or_else(|| missing("hosts"))?,
        inject: parts.inject.ok_or_else(|| missing("inject"))?,
    };
    Ok((spec, name_span))
}

/// A name a shell and every program can read back: `[A-Za-z_][A-Za-z0-9_]*`.
fn is_env_name(name: &str) -> bool {
    let mut chars = name.chars();
    chars
        .next()
        .is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

fn name(
    doc: &Doc,
    key: &Key,
    value: &Value,
    profile: &Profile,
) -> Result<(String, Range<usize>), PolicyError> {
    let text = doc.string(key, value, "e.g. name = \"GITHUB_TOKEN\"")?;
    if !is_env_name(text) {
        return Err(doc.error(
            value.span(),
            format!(
                "`name` in [[secret]]: `{}` is not an environment variable name",
                text.escape_debug()
            ),
            "use letters, digits and `_`, not starting with a digit, e.g. name = \"GITHUB_TOKEN\"",
        ));
    }
    if profile.env.set.contains_key(text) {
        return Err(doc.error(
            value.span(),
            format!("`name` in [[secret]]: `{text}` is also set by [env] set"),
            "the secret's placeholder is the variable's value: remove it from [env] set, or name the secret differently",
        ));
    }
    Ok((text.to_string(), value.span()))
}

fn source(
    doc: &Doc,
    key: &Key,
    value: &Value,
    profile: &Profile,
) -> Result<SecretSource, PolicyError> {
    let DeValue::Table(table) = value.get_ref() else {
        return Err(doc.wrong_type_of(&key.describe(), value, "a table", FROM_HINT));
    };
    let entries = doc.entries(table, &FROM);
    let [(field, inner)] = entries.as_slice() else {
        return Err(doc.error(
            value.span(),
            format!(
                "`from` in [[secret]] names {} sources",
                if entries.is_empty() { "no" } else { "several" }
            ),
            FROM_HINT,
        ));
    };
    match field.name {
        "env" => {
            let var = doc.string(field, inner, FROM_HINT)?;
            if !is_env_name(var) {
                return Err(doc.error(
                    inner.span(),
                    format!(
                        "`env` in [secret.from]: `{}` is not an environment variable name",
                        var.escape_debug()
                    ),
                    "name the variable of airlock's own environment that holds the value, e.g. from = { env = \"CI_BOT_GITHUB_TOKEN\" }",
                ));
            }
            if profile.env_allowed(var) {
                return Err(doc.error(
                    inner.span(),
                    format!("`env` in [secret.from]: `{var}` passes into the sandbox through [env] allow, with the real value"),
                    "remove it (or the pattern that matches it) from [env] allow, or keep the value in another variable",
                ));
            }
            Ok(SecretSource::Env(var.to_string()))
        }
        "file" => source_file(doc, field, inner),
        "command" => source_command(doc, field, inner),
        _ => Err(doc.unknown_key(field)),
    }
}

fn source_file(doc: &Doc, key: &Key, value: &Value) -> Result<SecretSource, PolicyError> {
    let hint = "write the full path, starting with `/`, e.g. from = { file = \"/etc/airlock/secrets/gh\" }";
    let text = doc.string(key, value, hint)?;
    let path = Path::new(text);
    if !path.is_absolute() || path.components().any(|c| c == Component::ParentDir) {
        return Err(doc.error(
            value.span(),
            format!(
                "`file` in [secret.from]: `{}` is not an absolute path without `..`",
                text.escape_debug()
            ),
            hint,
        ));
    }
    Ok(SecretSource::File(path.components().collect::<PathBuf>()))
}

fn source_command(doc: &Doc, key: &Key, value: &Value) -> Result<SecretSource, PolicyError> {
    let hint = "the program and its arguments, run without a shell, e.g. from = { command = [\"pass\", \"show\", \"gh\"] }";
    let item_key = key.item();
    let mut argv = Vec::new();
    for item in doc.array(key, value, hint)? {
        let arg = doc.string(&item_key, item, hint)?;
        if arg.contains('\0') {
            return Err(doc.error(
                item.span(),
                "an entry of `command` in [secret.from] contains a NUL character",
                hint,
            ));
        }
        argv.push(arg.to_string());
    }
    if argv.first().is_none_or(|program| program.is_empty()) {
        return Err(doc.error(
            value.span(),
            "`command` in [secret.from] names no program",
            hint,
        ));
    }
    Ok(SecretSource::Command(argv))
}

fn hosts(
    doc: &Doc,
    key: &Key,
    value: &Value,
    profile: &Profile,
) -> Result<Vec<String>, PolicyError> {
    let example = "e.g. hosts = [\"api.github.com\", \"github.com\"]";
    let item_key = key.item();
    let items = doc.array(key, value, example)?;
    if items.is_empty() {
        return Err(doc.error(
            value.span(),
            "`hosts` in [[secret]] is empty: the secret could go nowhere",
            example,
        ));
    }
    let mut out = Vec::new();
    for item in items {
        let text = doc.string(&item_key, item, example)?;
        let problem = |what: String, hint: &str| {
            doc.error(
                item.span(),
                format!("an entry of `hosts` in [[secret]]: {what}"),
                hint,
            )
        };
        let host = match Destination::parse(text) {
            Ok(Destination::Name {
                name,
                wildcard: false,
                port: None,
            }) => name,
            _ => return Err(problem(
                format!("`{}` is not a host name", text.escape_debug()),
                "write one DNS name, without a wildcard, port or address, e.g. \"api.github.com\"",
            )),
        };
        let decision = profile.network.may_resolve(&host);
        if !decision.allowed {
            return Err(problem(
                format!("`{host}` is not allowed by [network] ({})", decision.rule),
                "allow it in [network] too, or remove it: the gate refuses every connection to it",
            ));
        }
        if !out.contains(&host) {
            out.push(host);
        }
    }
    Ok(out)
}

fn inject(doc: &Doc, value: &Value) -> Result<Injection, PolicyError> {
    let table = match value.get_ref() {
        DeValue::String(mode) if mode.as_ref() == "placeholder" => {
            return Ok(Injection::Placeholder {
                headers: Vec::new(),
            })
        }
        DeValue::Table(table) => table,
        _ => {
            return Err(doc.error(
                value.span(),
                "`inject` in [[secret]] is not a way to inject",
                INJECT_HINT,
            ))
        }
    };
    let mut fields: BTreeMap<&str, (&Key, &Value)> = BTreeMap::new();
    let entries = doc.entries(table, &INJECT);
    for (field, inner) in &entries {
        if !INJECT.keys.contains(&field.name) {
            return Err(doc.unknown_key(field));
        }
        fields.insert(field.name, (field, inner));
    }
    let string = |name: &str| -> Result<Option<(&str, Range<usize>)>, PolicyError> {
        match fields.get(name) {
            Some((field, inner)) => {
                Ok(Some((doc.string(field, inner, INJECT_HINT)?, inner.span())))
            }
            None => Ok(None),
        }
    };
    if let Some((field, inner)) = fields.get("placeholder") {
        if fields.len() > 1 {
            return Err(doc.error(
                value.span(),
                "`inject` in [[secret]] names more than one way to inject",
                INJECT_HINT,
            ));
        }
        return placeholder_headers(doc, field, inner);
    }
    let (header, format) = (string("header")?, string("format")?);
    let (basic, query) = (string("basic")?, string("query")?);
    let shape = |what: &str| {
        doc.error(
            value.span(),
            format!("`inject` in [[secret]] {what}"),
            INJECT_HINT,
        )
    };
    match (header, format, basic, query) {
        (Some(header), format, None, None) => header_injection(doc, header, format),
        (None, None, Some((user, span)), None) => {
            if user.contains(':') || user.chars().any(char::is_control) {
                return Err(doc.error(
                    span,
                    "`basic` in [secret.inject]: a user name cannot contain `:` or control characters",
                    "e.g. inject = { basic = \"x-access-token\" }",
                ));
            }
            Ok(Injection::Basic {
                username: user.to_string(),
            })
        }
        (None, None, None, Some((param, span))) => {
            let bad = |c: char| c.is_control() || c.is_whitespace() || "&=#?%+".contains(c);
            if param.is_empty() || param.chars().any(bad) {
                return Err(doc.error(
                    span,
                    format!(
                        "`query` in [secret.inject]: `{}` is not a query parameter name",
                        param.escape_debug()
                    ),
                    "a plain name without spaces or any of & = # ? % +, e.g. inject = { query = \"access_token\" }",
                ));
            }
            Ok(Injection::Query {
                param: param.to_string(),
            })
        }
        (None, Some(_), None, None) => Err(shape("has a `format` but no `header`")),
        (None, None, None, None) => Err(shape("names no way to inject")),
        _ => Err(shape("names more than one way to inject")),
    }
}

/// RFC 9110 `token`: what a header's name may be made of.
fn is_token(name: &str) -> bool {
    !name.is_empty()
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || "!#$%&'*+-.^_`|~".contains(c))
}

/// `inject = { placeholder = ["PRIVATE-TOKEN"] }`: placeholder mode, replaced in these headers
/// too. A header that names the request's host, its framing or its route is refused: the
/// placeholder has no business there, and a value there reaches places it must not.
fn placeholder_headers(doc: &Doc, key: &Key, value: &Value) -> Result<Injection, PolicyError> {
    let hint = "the headers besides Authorization, Proxy-Authorization and Cookie that carry the credential, e.g. inject = { placeholder = [\"PRIVATE-TOKEN\"] }";
    let item_key = key.item();
    let mut headers: Vec<String> = Vec::new();
    for item in doc.array(key, value, hint)? {
        let header = doc.string(&item_key, item, hint)?;
        if !is_token(header) {
            return Err(doc.error(
                item.span(),
                format!(
                    "an entry of `placeholder` in [secret.inject]: `{}` is not a header name",
                    header.escape_debug()
                ),
                "letters, digits and ! # $ % & ' * + - . ^ _ ` | ~, e.g. \"PRIVATE-TOKEN\"",
            ));
        }
        const NOT_CREDENTIALS: [&str; 9] = [
            "host",
            "content-length",
            "transfer-encoding",
            "connection",
            "upgrade",
            "te",
            "trailer",
            "keep-alive",
            "expect",
        ];
        let lower = header.to_ascii_lowercase();
        if NOT_CREDENTIALS.contains(&lower.as_str()) {
            return Err(doc.error(
                item.span(),
                format!("an entry of `placeholder` in [secret.inject]: `{header}` says how the request is routed or framed, it carries no credential"),
                "name only headers that carry the credential, e.g. \"PRIVATE-TOKEN\"",
            ));
        }
        if !headers.iter().any(|h| h.eq_ignore_ascii_case(header)) {
            headers.push(header.to_string());
        }
    }
    Ok(Injection::Placeholder { headers })
}

fn header_injection(
    doc: &Doc,
    (header, header_span): (&str, Range<usize>),
    format: Option<(&str, Range<usize>)>,
) -> Result<Injection, PolicyError> {
    if !is_token(header) {
        return Err(doc.error(
            header_span,
            format!(
                "`header` in [secret.inject]: `{}` is not a header name",
                header.escape_debug()
            ),
            "letters, digits and ! # $ % & ' * + - . ^ _ ` | ~, e.g. header = \"Authorization\"",
        ));
    }
    let (format, format_span) = format.unwrap_or(("{}", header_span));
    if format.matches("{}").count() != 1 || format.chars().any(char::is_control) {
        return Err(doc.error(
            format_span,
            format!(
                "`format` in [secret.inject]: `{}` must hold exactly one `{{}}` (where the value goes) and no control characters",
                format.escape_debug()
            ),
            "e.g. format = \"Bearer {}\"",
        ));
    }
    Ok(Injection::Header {
        name: header.to_string(),
        format: format.to_string(),
    })
}

#[cfg(test)]
mod tests;
