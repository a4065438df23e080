//! What a profile's `[[network.http]]` allows of the requests to one host whose connections the
//! gate reads (it terminates their TLS): rules of `METHOD PATH`, and the decision for one
//! request. Pure: the policy crate parses the rules, the injector asks [`HttpRules::decide_head`].
//!
//! A path is compared segment by segment, after its percent-escapes are decoded; a rule's
//! segment is literal text, `*` (any one non-empty segment) or, last, `**` (the rest: one
//! non-empty segment or more). The query is not part of the match. A request path that servers
//! could read as another path than the one matched (`..` or `.`, also escaped or before a `;`,
//! an escaped `/`, `\` or `%`, an empty segment, a segment ending in `.` or a space, a Unicode
//! look-alike of `.` or `/`, a byte no path holds, a `;` where no rule has one) is refused
//! whatever the rules say: the request goes on exactly as it came, so what is matched must be
//! what the server reads. So is a request whose method or path another header or query
//! parameter may stand for, and a body on a method that has none.

use std::fmt;

use serde::Serialize;

use crate::rules::{Decision, RuleError};

/// The rules of one host: `None` lets every request through (the host is inspected: each
/// request is recorded), `Some` only those a rule allows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HttpRules {
    /// A lower-case DNS name.
    pub host: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub allow: Option<Vec<RequestRule>>,
}

/// One `METHOD PATH` of `allow`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestRule {
    /// `None`: any method (`*`).
    method: Option<String>,
    path: Vec<Segment>,
    /// As written, for decisions and `policy show`.
    text: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Segment {
    /// Decoded text.
    Literal(Vec<u8>),
    /// `*`: one segment, not empty.
    One,
    /// `**`, last: the rest of the path, one segment (not empty) or more.
    Rest,
}

/// Longest part of a request's path a decision quotes (the record stays small).
const SHOWN: usize = 256;

impl RequestRule {
    /// Parse `METHOD PATH`; the error says what is wrong and how to write it.
    pub fn parse(text: &str) -> Result<RequestRule, RuleError> {
        let bad = |why: &str| RuleError(format!("{text:?}: {why}"));
        let words: Vec<&str> = text.split_whitespace().collect();
        let [written, path] = words[..] else {
            return Err(bad("write a method and a path, e.g. \"GET /repos/acme/*\""));
        };
        let method = match written {
            "*" => None,
            m if !is_token(m) => return Err(bad("the method is not an HTTP method name")),
            m if m.bytes().any(|b| b.is_ascii_lowercase()) => {
                return Err(bad(
                    "methods are case-sensitive and clients send them in capitals: write e.g. GET",
                ))
            }
            "CONNECT" => return Err(bad(
                "CONNECT cannot be allowed: the gate refuses tunnels inside a connection it reads",
            )),
            m => Some(m.to_string()),
        };
        if path.contains('?') || path.contains('#') {
            return Err(bad(
                "the query (and a fragment) is not matched: write the path alone",
            ));
        }
        let segments = read_path(path).map_err(|why| bad(&why))?;
        let last = segments.len() - 1;
        let mut rule = Vec::with_capacity(segments.len());
        // As written, not decoded: `%2A` is a literal `*`. One for each decoded segment, as
        // read_path refuses an escaped `/`.
        let raw_segments = path.split('/').skip(1);
        for (i, (segment, raw)) in segments.into_iter().zip(raw_segments).enumerate() {
            rule.push(match raw {
                "*" => Segment::One,
                "**" if i == last => Segment::Rest,
                "**" => return Err(bad("`**` (the rest of the path) may only end a path")),
                s if s.contains('*') => return Err(bad(
                    "`*` stands for a whole segment (`/repos/*/issues`); it cannot be part of one",
                )),
                _ => Segment::Literal(segment),
            });
        }
        Ok(RequestRule {
            method,
            path: rule,
            text: format!("{written} {path}"),
        })
    }

    fn matches(&self, method: &str, path: &[Vec<u8>]) -> bool {
        if self.method.as_deref().is_some_and(|m| m != method) {
            return false;
        }
        let mut at = 0;
        for segment in &self.path {
            match segment {
                // At least one segment, not empty: `/repos/acme/widget/**` is not
                // `/repos/acme/widget`, nor `/repos/acme/widget/` (the same to many servers).
                Segment::Rest => return path.get(at).is_some_and(|s| !s.is_empty()),
                Segment::One if path.get(at).is_some_and(|s| !s.is_empty()) => {}
                Segment::Literal(text) if path.get(at) == Some(text) => {}
                _ => return false,
            }
            at += 1;
        }
        at == path.len()
    }
}

impl fmt::Display for RequestRule {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl Serialize for RequestRule {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&self.text)
    }
}

/// Headers by which servers let a request stand for another method (Rails, Laravel, Express's
/// method-override, ASP.NET, Google's APIs…) or another path (IIS's and Symfony's
/// `X-Original-URL` and `X-Rewrite-URL`), by their letters and digits in lower case: CGI and
/// PHP read `X_HTTP_METHOD_OVERRIDE` as `X-HTTP-Method-Override`.
const OVERRIDE_HEADERS: [&str; 6] = [
    "xhttpmethodoverride",
    "xhttpmethod",
    "xmethodoverride",
    "xoriginalurl",
    "xrewriteurl",
    "xoverrideurl",
];

/// Methods for which a body has no defined meaning (RFC 9110, 9.3): a server may leave such a
/// body unread and take it for the next request on the connection.
const BODILESS: [&str; 5] = ["GET", "HEAD", "OPTIONS", "DELETE", "TRACE"];

/// May a request of `method` carry a body where rules apply? Not one of [`BODILESS`]'s.
pub fn takes_a_body(method: &str) -> bool {
    !BODILESS.contains(&method)
}

impl HttpRules {
    /// [`HttpRules::decide`] for a request's head: `target` is its path and query, `headers`
    /// its header names, `body` whether it carries a body (a `Content-Length` above 0, a
    /// `Transfer-Encoding`, HTTP/2 data). Where rules apply, a request is refused that names
    /// another method or path for the servers that read one there (a header of
    /// [`OVERRIDE_HEADERS`], a query parameter [`names_a_method`]): what would be served is not
    /// what was matched; and so is a body on a method without one ([`takes_a_body`]), which a
    /// server that does not read it takes for the next request.
    pub fn decide_head<'h>(
        &self,
        method: &str,
        target: &str,
        headers: impl IntoIterator<Item = &'h str>,
        body: bool,
    ) -> Decision {
        let (path, query) = target.split_once('?').unwrap_or((target, ""));
        if self.allow.is_some() {
            let request = format!("{method} {}", shown(path));
            let header = headers
                .into_iter()
                .find(|name| OVERRIDE_HEADERS.contains(&letters(name.as_bytes()).as_str()));
            if let Some(header) = header {
                return Decision::deny(format!(
                    "{request}: refused, a {header} header (servers may take it for the method or the path)"
                ));
            }
            let key = query
                .split(['&', ';'])
                .map(|pair| pair.split('=').next().unwrap_or_default())
                .find(|key| names_a_method(&query_key(key)));
            if let Some(key) = key {
                return Decision::deny(format!(
                    "{request}: refused, a {} query parameter (servers may take it for the method)",
                    shown(key)
                ));
            }
            if body && !takes_a_body(method) {
                return Decision::deny(format!(
                    "{request}: refused, a body on a {method} request (a server may leave it unread and take it for the next request)"
                ));
            }
        }
        self.decide(method, path)
    }

    /// May the request `method` `path` go on? `path` is the request's path: without the query
    /// (anything from a `?` on is left out here all the same). The decision's rule names the
    /// request (its path cut at 256 bytes), and the rule that allowed it or why none did.
    pub fn decide(&self, method: &str, path: &str) -> Decision {
        let path = path.split_once('?').map_or(path, |(path, _)| path);
        let request = format!("{method} {}", shown(path));
        let Some(allow) = &self.allow else {
            return Decision::allow(format!("{request}: inspected ({} has no rules)", self.host));
        };
        let segments = match read_path(path) {
            Ok(segments) => segments,
            Err(why) => {
                return Decision::deny(format!("{request}: refused, {why}"));
            }
        };
        // A raw `;` starts path parameters for servlet containers, which cut them before
        // routing (`/repos/acme/;x/issues` is `/repos/acme//issues` to Tomcat, `/repos/acme/;`
        // is `/repos/acme/` to Jetty): refused unless the host's rules write one themselves.
        if path.contains(';') && !allow.iter().any(|rule| rule.text.contains(';')) {
            return Decision::deny(format!(
                "{request}: refused, a `;` (servers may cut path parameters from a segment), and no rule for {} has one",
                self.host
            ));
        }
        match allow.iter().find(|rule| rule.matches(method, &segments)) {
            Some(rule) => Decision::allow(format!("{request}: allowed by \"{rule}\"")),
            None => Decision::deny(format!(
                "{request}: no rule of [[network.http]] for {} allows it",
                self.host
            )),
        }
    }
}

/// `path` as the log shows it: cut at [`SHOWN`] bytes (on a character's boundary).
pub fn shown(path: &str) -> String {
    if path.len() <= SHOWN {
        return path.to_string();
    }
    let mut end = SHOWN;
    while !path.is_char_boundary(end) {
        end -= 1;
    }
    format!("{}…", &path[..end])
}

/// `text`'s ASCII letters and digits, in lower case: a name as servers that drop or change
/// the other characters (`-`, `_`, `.`, a space) may read it.
fn letters(text: &[u8]) -> String {
    text.iter()
        .filter(|b| b.is_ascii_alphanumeric())
        .map(|b| char::from(b.to_ascii_lowercase()))
        .collect()
}

/// A query parameter's name as servers read it: `+` a space, `%XX` decoded (a `%` that is no
/// escape left as it is), cut at a NUL (as PHP does).
fn query_key(raw: &str) -> Vec<u8> {
    let bytes = raw.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let hex = |at: usize| bytes.get(at).and_then(|&h| char::from(h).to_digit(16));
        match (bytes[i], hex(i + 1), hex(i + 2)) {
            // Both digits are below 16.
            (b'%', Some(high), Some(low)) => {
                out.push((high * 16 + low) as u8);
                i += 3;
                continue;
            }
            (b'+', _, _) => out.push(b' '),
            (b, _, _) => out.push(b),
        }
        i += 1;
    }
    if let Some(nul) = out.iter().position(|&b| b == 0) {
        out.truncate(nul);
    }
    out
}

/// Does a query parameter of this (decoded) name name the request's method for the servers
/// that read one? Best-effort, by the names frameworks read: its letters and digits are
/// `method` (`_method`, also as PHP reads `.method`, ` _method` or `_method[]`),
/// `httpmethod` (Salesforce's `_HttpMethod`) or `xhttpmethod`, each maybe followed by
/// `override` (ASP.NET's `X-HTTP-Method-Override`), or `xmethodoverride`. Not the bare word
/// `method`, which RPC-style APIs (Flickr's, Last.fm's) use for the call's name and no
/// framework reads as the method; nor names that only end in it (`payment_method`).
pub fn names_a_method(key: &[u8]) -> bool {
    let name = letters(key);
    let name = name.strip_suffix("override").unwrap_or(&name);
    let name = name.strip_prefix('x').unwrap_or(name);
    let name = name.strip_prefix("http").unwrap_or(name);
    name == "method" && !key.eq_ignore_ascii_case(b"method")
}

/// RFC 9110 `token`: what a method's name is made of.
fn is_token(text: &str) -> bool {
    !text.is_empty()
        && text
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b))
}

/// Characters that Unicode normalization (NFKC) or Windows' best-fit mapping turns into `.`,
/// `/`, `\`, `%` or `;` (fullwidth, small and other look-alikes, `‥` and `…` into dots).
const LOOK_ALIKES: [char; 15] = [
    '\u{FF0E}', '\u{2024}', '\u{2025}', '\u{2026}', '\u{FE52}', '\u{FF0F}', '\u{2215}', '\u{2044}',
    '\u{FF3C}', '\u{2216}', '\u{29F8}', '\u{FE68}', '\u{FF05}', '\u{FE6A}', '\u{FF1B}',
];

/// A path's segments, each decoded: Err says why the path cannot be matched safely (the same
/// reading for a rule's path and a request's). At least one segment (`/` is one empty one).
pub fn read_path(path: &str) -> Result<Vec<Vec<u8>>, String> {
    let Some(rest) = path.strip_prefix('/') else {
        return Err("the path does not start with `/`".into());
    };
    let raw: Vec<&str> = rest.split('/').collect();
    let last = raw.len() - 1;
    let mut segments = Vec::with_capacity(raw.len());
    for (i, segment) in raw.into_iter().enumerate() {
        if segment.is_empty() && i != last {
            return Err("an empty segment (`//`), which servers may merge".into());
        }
        let decoded = decode(segment)?;
        if std::str::from_utf8(&decoded).is_err() {
            return Err(
                "an escape that is not UTF-8 (servers decode such bytes differently)".into(),
            );
        }
        // `..;x` is `..` to servlet containers, which take `;` as a parameter's start.
        let name = decoded.split(|&b| b == b';').next().unwrap_or_default();
        if name == b".." || name == b"." {
            return Err(format!(
                "a `{}` segment, which servers read as a move in the path",
                String::from_utf8_lossy(name)
            ));
        }
        // Windows (IIS, and servers on its file systems) drops a segment's trailing dots and
        // spaces: `..%20` and `....` are `..` there, `x.` is `x`.
        for part in [name, &decoded[..]] {
            if part.ends_with(b".") || part.ends_with(b" ") {
                return Err(
                    "a segment that ends in `.` or a space, which Windows servers drop".into(),
                );
            }
        }
        let text = String::from_utf8_lossy(&decoded);
        if let Some(c) = text.chars().find(|c| LOOK_ALIKES.contains(c)) {
            return Err(format!(
                "a U+{:04X}, which servers that normalize Unicode read as `.`, `/`, `\\`, `%` or `;`",
                u32::from(c)
            ));
        }
        segments.push(decoded);
    }
    Ok(segments)
}

/// One segment with its percent-escapes decoded; Err: a byte or an escape no path may hold,
/// or one that servers read as a separator.
fn decode(segment: &str) -> Result<Vec<u8>, String> {
    let bytes = segment.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        let b = bytes[i];
        match b {
            b'%' => {
                let hex = |at: usize| bytes.get(at).and_then(|&h| char::from(h).to_digit(16));
                let (Some(high), Some(low)) = (hex(i + 1), hex(i + 2)) else {
                    return Err("a `%` that is not an escape (`%` and two hex digits)".into());
                };
                // Both digits are below 16.
                let decoded = (high * 16 + low) as u8;
                match decoded {
                    b'/' | b'\\' => {
                        return Err(format!(
                            "an escaped `{}`, which servers may read as a separator",
                            char::from(decoded)
                        ))
                    }
                    b'%' => return Err("an escaped `%` (servers that decode twice differ)".into()),
                    c if c < 0x20 || c == 0x7f => return Err("an escaped control character".into()),
                    c => out.push(c),
                }
                i += 3;
            }
            b'\\' => return Err("a `\\`, which servers may read as `/`".into()),
            b'#' => return Err("a fragment (`#`)".into()),
            b'?' => return Err("a `?`, which starts the query".into()),
            c if c <= 0x20 || c >= 0x7f => return Err("a byte a path cannot hold unescaped".into()),
            c => {
                out.push(c);
                i += 1;
            }
        }
    }
    Ok(out)
}

#[cfg(test)]
mod tests;
