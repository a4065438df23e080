//! `[[network.http]]`: what the gate lets through of the requests to a host whose connections it
//! reads (it terminates their TLS, as for a secret's host).
//!
//! ```toml
//! [[network.http]]
//! host = "api.github.com"                                     # a DNS name [network] allows
//! allow = ["GET /repos/acme/*", "POST /repos/acme/*/issues"]  # METHOD PATH; anything else: 403
//!
//! [[network.http]]
//! host = "example.org"
//! inspect = true                                              # no rules: every request recorded
//! ```

use airlock_rules::{Destination, HttpRules, RequestRule};
use toml::de::DeValue;

use crate::doc::{Doc, Key, Section, Value};
use crate::error::PolicyError;
use crate::profile::NetworkMode;

const HTTP: Section = Section {
    name: Some("network.http"),
    keys: &["host", "allow", "inspect"],
};
const EXAMPLE: &str = "e.g. [[network.http]] host = \"api.github.com\", allow = [\"GET /repos/acme/*\", \"POST /repos/acme/*/issues\"]";
const RULE_HINT: &str = "a method (or * for any) and a path, e.g. \"GET /repos/acme/*\": * is one whole segment, a last ** the rest of the path";

/// Every `[[network.http]]` of the file, judged against `network` (the rest of `[network]`).
pub(super) fn http(
    doc: &Doc,
    key: &Key,
    value: &Value,
    network: &NetworkMode,
) -> Result<Vec<HttpRules>, PolicyError> {
    let item_key = key.item();
    let mut out: Vec<HttpRules> = Vec::new();
    for item in doc.array(key, value, EXAMPLE)? {
        let rules = entry(doc, &item_key, item, network)?;
        if out.iter().any(|r| r.host == rules.host) {
            return Err(doc.error(
                item.span(),
                format!("two [[network.http]] entries are for `{}`", rules.host),
                "write one entry per host, with all its rules in its `allow`",
            ));
        }
        out.push(rules);
    }
    Ok(out)
}

fn entry(
    doc: &Doc,
    key: &Key,
    item: &Value,
    network: &NetworkMode,
) -> Result<HttpRules, PolicyError> {
    let DeValue::Table(table) = item.get_ref() else {
        return Err(doc.wrong_type_of(&key.describe(), item, "a table", EXAMPLE));
    };
    let (mut host, mut allow, mut inspect) = (None, None, None);
    for (field, value) in doc.entries(table, &HTTP) {
        match field.name {
            "host" => host = Some(self::host(doc, &field, value, network)?),
            "allow" => allow = Some((rules(doc, &field, value)?, value.span())),
            "inspect" => match value.get_ref() {
                DeValue::Boolean(b) => inspect = Some((*b, value.span())),
                _ => {
                    return Err(doc.wrong_type_of(
                        &field.describe(),
                        value,
                        "true or false",
                        "inspect = true: the gate reads the host's requests and records each",
                    ))
                }
            },
            _ => return Err(doc.unknown_key(&field)),
        }
    }
    let Some(host) = host else {
        return Err(doc.error(item.span(), "a [[network.http]] has no `host`", EXAMPLE));
    };
    match (allow, inspect) {
        (Some(_), Some((false, span))) => Err(doc.error(
            span,
            format!("`inspect = false` in the [[network.http]] for {host}, which has rules"),
            "rules need the gate to read the requests: remove inspect = false",
        )),
        (Some((allow, span)), _) if allow.is_empty() => Err(doc.error(
            span,
            format!("`allow` in the [[network.http]] for {host} is empty: every request would be refused"),
            "name the requests it may make, or, to keep the sandbox from it, remove it from [network] allow",
        )),
        (Some((allow, _)), _) => Ok(HttpRules {
            host,
            allow: Some(allow),
        }),
        (None, Some((true, _))) => Ok(HttpRules { host, allow: None }),
        (None, _) => Err(doc.error(
            item.span(),
            format!("the [[network.http]] for {host} says nothing"),
            "give it rules, allow = [\"GET /repos/acme/*\"], or inspect = true to record its requests and let them all through",
        )),
    }
}

fn host(doc: &Doc, key: &Key, value: &Value, network: &NetworkMode) -> Result<String, PolicyError> {
    let example = "e.g. host = \"api.github.com\"";
    let text = doc.string(key, value, example)?;
    let host = match Destination::parse(text) {
        Ok(Destination::Name {
            name,
            wildcard: false,
            port: None,
        }) => name,
        _ => {
            return Err(doc.error(
                value.span(),
                format!(
                    "`host` in [[network.http]]: `{}` is not a host name",
                    text.escape_debug()
                ),
                "write one DNS name, without a wildcard, port or address, e.g. host = \"api.github.com\"",
            ))
        }
    };
    let decision = network.may_resolve(&host);
    if !decision.allowed {
        return Err(doc.error(
            value.span(),
            format!(
                "`host` in [[network.http]]: `{host}` is not allowed by [network] ({})",
                decision.rule
            ),
            "allow it in [network] allow too, or remove this entry: the gate refuses every connection to it",
        ));
    }
    Ok(host)
}

fn rules(doc: &Doc, key: &Key, value: &Value) -> Result<Vec<RequestRule>, PolicyError> {
    let example = "e.g. allow = [\"GET /repos/acme/*\", \"POST /repos/acme/*/issues\"]";
    let item_key = key.item();
    let mut out = Vec::new();
    for item in doc.array(key, value, example)? {
        let text = doc.string(&item_key, item, example)?;
        let rule = RequestRule::parse(text).map_err(|e| {
            doc.error(
                item.span(),
                format!("{}: {e}", item_key.describe()),
                RULE_HINT,
            )
        })?;
        out.push(rule);
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
