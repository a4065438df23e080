//! What the gate does to one request of an intercepted connection before it goes on: the host
//! it names checked against the connection's, CONNECT, upgrades and TRACE refused, the session's
//! secrets put in. Pure: a request head in, the head changed and what was found, out.

use base64::engine::general_purpose::STANDARD as BASE64;
use base64::Engine as _;
use hyper::header::{
    HeaderMap, HeaderName, HeaderValue, AUTHORIZATION, COOKIE, HOST, PROXY_AUTHORIZATION, UPGRADE,
};
use hyper::http::request::Parts;
use hyper::http::uri::{Authority, PathAndQuery};
use hyper::{Method, Uri};

use super::secret::{Inject, Secret};

/// Why a request is not passed on.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Refused {
    /// It names another host than its connection's (or none, or two): 421, and the
    /// connection is closed. The rule, and what it asked for.
    OtherHost { rule: String, asked: Option<String> },
    /// CONNECT or a protocol upgrade, which the gate cannot follow inside a connection it
    /// terminated: 501.
    Tunnel(String),
    /// A method whose purpose is to send the request back (TRACE, and IIS's TRACK): the
    /// answer would carry the secrets just put in. 405, the connection kept.
    Reflects(String),
}

/// Methods a server answers with the request it received, headers included.
const REFLECTING: [&str; 2] = ["TRACE", "TRACK"];

/// Check that a request may go on a connection to `host`:`port`.
pub(super) fn check(parts: &Parts, host: &str, port: u16) -> Result<(), Refused> {
    if parts.method == Method::CONNECT {
        return Err(Refused::Tunnel(format!(
            "a CONNECT request inside the TLS connection to {host} cannot be followed by the gate"
        )));
    }
    if REFLECTING
        .iter()
        .any(|m| parts.method.as_str().eq_ignore_ascii_case(m))
    {
        return Err(Refused::Reflects(format!(
            "a {} request to {host} asks the server to send the request back, with the secrets the gate puts in: refused",
            parts.method
        )));
    }
    if let Some(upgrade) = parts.headers.get(UPGRADE) {
        return Err(Refused::Tunnel(format!(
            "an upgrade to {} inside the TLS connection to {host} cannot be followed by the gate",
            String::from_utf8_lossy(upgrade.as_bytes())
        )));
    }
    check_host(parts, host, port)
}

/// Every name the request gives its host (the target's authority, `:authority` in HTTP/2, the
/// Host header) must be `host`, and a port, if given, `port`.
fn check_host(parts: &Parts, host: &str, port: u16) -> Result<(), Refused> {
    let other = |rule: String, asked: Option<&str>| Refused::OtherHost {
        rule,
        asked: asked.map(str::to_string),
    };
    let hosts: Vec<&HeaderValue> = parts.headers.get_all(HOST).iter().collect();
    if hosts.len() > 1 {
        return Err(other(
            format!("a request to {host} with more than one Host header: refused (servers read them differently)"),
            None,
        ));
    }
    let mut named: Vec<String> = parts
        .uri
        .authority()
        .map(|a| a.to_string())
        .into_iter()
        .collect();
    for value in hosts {
        named.push(String::from_utf8_lossy(value.as_bytes()).into_owned());
    }
    if named.is_empty() {
        return Err(other(
            format!("a request on the connection to {host} names no host: refused"),
            None,
        ));
    }
    for asked in &named {
        if !same_host(asked, host, port) {
            return Err(other(
                format!(
                    "connected to {host} but a request asked for {asked}: refused (domain fronting)"
                ),
                Some(asked),
            ));
        }
    }
    Ok(())
}

/// Is `asked` (an authority: name, optional port) the connection's `host` and `port`?
fn same_host(asked: &str, host: &str, port: u16) -> bool {
    let Ok(authority) = asked.parse::<Authority>() else {
        return false;
    };
    // No user information: `host@other` is read as either by one server or another.
    !authority.as_str().contains('@')
        && authority.host().eq_ignore_ascii_case(host)
        && authority.port_u16().is_none_or(|p| p == port)
}

/// What putting the secrets into one request did, for the log: names of secrets.
#[derive(Debug, Default, PartialEq, Eq)]
pub(super) struct Put<'s> {
    /// Put on the wire.
    pub(super) injected: Vec<&'s str>,
    /// Their placeholder was in the request where it is not replaced.
    pub(super) unreplaced: Vec<&'s str>,
}

/// Put every secret for `host` into the request as it says; note the placeholders of the
/// others (and of these, where they are not replaced). Err: a secret could not be put in
/// (its text says why, never the value).
pub(super) fn inject<'s>(
    parts: &mut Parts,
    secrets: &'s [Secret],
    host: &str,
) -> Result<Put<'s>, String> {
    let mut put = Put::default();
    for secret in secrets {
        let name = secret.name.as_str();
        if !secret.is_for(host) {
            if seen(parts, &secret.placeholder, None) {
                put.unreplaced.push(name);
            }
            continue;
        }
        let cannot = || {
            format!("the value of secret {name} cannot be put in a request header (it holds characters headers cannot carry)")
        };
        let except = match &secret.inject {
            Inject::Header {
                name: header,
                format,
            } => {
                let header = HeaderName::from_bytes(header.as_bytes())
                    .map_err(|_| format!("secret {name}: {header:?} is not a header name"))?;
                let value = sensitive(&format.replace("{}", &secret.value)).ok_or_else(cannot)?;
                parts.headers.insert(header.clone(), value);
                Some(header)
            }
            Inject::Basic { username } => {
                let pair = format!("{username}:{}", secret.value.as_str());
                let value =
                    sensitive(&format!("Basic {}", BASE64.encode(pair))).ok_or_else(cannot)?;
                parts.headers.insert(AUTHORIZATION, value);
                Some(AUTHORIZATION)
            }
            Inject::Query { param } => {
                parts.uri = with_query(&parts.uri, param, &secret.value).ok_or_else(|| {
                    format!("secret {name} cannot be put in the request's target")
                })?;
                None
            }
            Inject::Placeholder { headers } => {
                if replace_in_headers(parts, &secret.placeholder, &secret.value, headers)
                    .ok_or_else(cannot)?
                {
                    put.injected.push(name);
                }
                if seen(parts, &secret.placeholder, None) {
                    put.unreplaced.push(name);
                }
                continue;
            }
        };
        put.injected.push(name);
        if seen(parts, &secret.placeholder, except.as_ref()) {
            put.unreplaced.push(name);
        }
    }
    Ok(put)
}

/// A header value that HTTP/2's header compression must not index.
fn sensitive(text: &str) -> Option<HeaderValue> {
    let mut value = HeaderValue::from_str(text).ok()?;
    value.set_sensitive(true);
    Some(value)
}

fn contains(hay: &[u8], needle: &[u8]) -> bool {
    !needle.is_empty() && hay.windows(needle.len()).any(|w| w == needle)
}

/// `Authorization: Basic …` decoded, if it is that.
fn basic_credentials(value: &HeaderValue) -> Option<String> {
    let text = value.to_str().ok()?;
    let (scheme, encoded) = text.split_once(' ')?;
    if !scheme.eq_ignore_ascii_case("basic") {
        return None;
    }
    let decoded = BASE64.decode(encoded.trim()).ok()?;
    String::from_utf8(decoded).ok()
}

/// Is `placeholder` anywhere in the request's head (a header value other than `except`'s, a
/// decoded Basic authorization, the target)?
fn seen(parts: &Parts, placeholder: &str, except: Option<&HeaderName>) -> bool {
    let needle = placeholder.as_bytes();
    let in_headers = parts.headers.iter().any(|(name, value)| {
        Some(name) != except
            && (contains(value.as_bytes(), needle)
                || (name == AUTHORIZATION
                    && basic_credentials(value).is_some_and(|c| contains(c.as_bytes(), needle))))
    });
    in_headers || contains(parts.uri.to_string().as_bytes(), needle)
}

/// The headers credentials travel in: the placeholder is replaced there (and in the headers
/// a profile names), never in one a server may echo back.
const CREDENTIAL_HEADERS: [HeaderName; 3] = [AUTHORIZATION, PROXY_AUTHORIZATION, COOKIE];

/// Replace `placeholder` by `value` in the values of the credential headers and of `also`
/// (lowercase names), and inside a decoded `Authorization: Basic`. Some(true): it was
/// somewhere; None: the result is no header value.
fn replace_in_headers(
    parts: &mut Parts,
    placeholder: &str,
    value: &str,
    also: &[String],
) -> Option<bool> {
    let needle = placeholder.as_bytes();
    let mut replaced = false;
    let carries = |name: &HeaderName| {
        CREDENTIAL_HEADERS.contains(name)
            || also.iter().any(|a| a.eq_ignore_ascii_case(name.as_str()))
    };
    for (name, header) in parts.headers.iter_mut().filter(|(name, _)| carries(name)) {
        if *name == AUTHORIZATION {
            if let Some(credentials) = basic_credentials(header) {
                if contains(credentials.as_bytes(), needle) {
                    let pair = credentials.replace(placeholder, value);
                    *header = sensitive(&format!("Basic {}", BASE64.encode(pair)))?;
                    replaced = true;
                    continue;
                }
            }
        }
        if contains(header.as_bytes(), needle) {
            let text = String::from_utf8_lossy(header.as_bytes()).replace(placeholder, value);
            *header = sensitive(&text)?;
            replaced = true;
        }
    }
    Some(replaced)
}

/// Replace, in every header of an answer (`headers`: a response's head or its trailers),
/// every form in which a secret for `host` went on the wire (as it is, percent-encoded as a
/// query parameter, inside a Basic pair) by the secret's placeholder: a server that echoes a
/// request header or keeps the query in a redirect's `Location` would otherwise hand the value
/// to the sandbox. The placeholder keeps a redirect followable (the gate puts the value back).
/// The names of the secrets found, for the log.
pub(super) fn scrub<'s>(
    headers: &mut HeaderMap,
    secrets: &'s [Secret],
    host: &str,
) -> Vec<&'s str> {
    let mut found = Vec::new();
    for secret in secrets.iter().filter(|s| s.is_for(host)) {
        let forms = wire_forms(secret);
        let mut seen = false;
        for value in headers.values_mut() {
            let mut bytes = value.as_bytes().to_vec();
            let mut changed = false;
            for form in &forms {
                if contains(&bytes, form.as_bytes()) {
                    bytes = replace_bytes(&bytes, form.as_bytes(), secret.placeholder.as_bytes());
                    changed = true;
                }
            }
            if changed {
                seen = true;
                // The placeholder is printable ASCII, so what was a header value still is; if
                // not, the header is emptied rather than passed on with the value in it.
                *value = HeaderValue::from_bytes(&bytes).unwrap_or(HeaderValue::from_static(""));
            }
        }
        // A name is shown as much as a value: one that holds a form (names are lowercase, so
        // compared as such) is dropped with its values.
        let named: Vec<HeaderName> = headers
            .keys()
            .filter(|name| {
                forms
                    .iter()
                    .any(|f| contains(name.as_str().as_bytes(), f.to_ascii_lowercase().as_bytes()))
            })
            .cloned()
            .collect();
        for name in named {
            headers.remove(name);
            seen = true;
        }
        if seen {
            found.push(secret.name.as_str());
        }
    }
    found
}

/// Every form a secret's value takes on the wire, longest first (so that a form is never
/// half-replaced by a shorter one inside it); none for an empty value.
fn wire_forms(secret: &Secret) -> Vec<String> {
    let value = secret.value.as_str();
    if value.is_empty() {
        return Vec::new();
    }
    let mut forms = vec![
        value.to_string(),
        percent_encoded(value),
        percent_encoded(value).to_ascii_lowercase(),
        // As a form encoder writes a space.
        percent_encoded(value).replace("%20", "+"),
    ];
    if let Inject::Basic { username } = &secret.inject {
        let pair = format!("{username}:{value}");
        forms.push(BASE64.encode(&pair));
        forms.push(pair);
    }
    forms.sort_by(|a, b| b.len().cmp(&a.len()).then_with(|| a.cmp(b)));
    forms.dedup();
    forms
}

fn replace_bytes(hay: &[u8], needle: &[u8], with: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(hay.len());
    let mut i = 0;
    while i < hay.len() {
        if hay[i..].starts_with(needle) {
            out.extend_from_slice(with);
            i += needle.len();
        } else {
            out.push(hay[i]);
            i += 1;
        }
    }
    out
}

/// `uri` with its query parameter `param` set to `value` (any the client sent dropped).
fn with_query(uri: &Uri, param: &str, value: &str) -> Option<Uri> {
    let own = format!("{}={}", percent_encoded(param), percent_encoded(value));
    let mut pairs: Vec<&str> = uri
        .query()
        .unwrap_or("")
        .split('&')
        .filter(|pair| !pair.is_empty() && pair.split('=').next() != Some(param))
        .collect();
    pairs.push(&own);
    let target = format!("{}?{}", uri.path(), pairs.join("&"));
    let mut parts = uri.clone().into_parts();
    parts.path_and_query = Some(target.parse::<PathAndQuery>().ok()?);
    Uri::from_parts(parts).ok()
}

/// `text` as a query component: unreserved characters as they are, every other byte `%XX`.
fn percent_encoded(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for byte in text.bytes() {
        if byte.is_ascii_alphanumeric() || b"-._~".contains(&byte) {
            out.push(char::from(byte));
        } else {
            out.push_str(&format!("%{byte:02X}"));
        }
    }
    out
}

#[cfg(test)]
#[path = "request_tests.rs"]
mod tests;
