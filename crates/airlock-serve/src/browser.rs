//! Checks a browser makes necessary, on every request, before any route sees it. Since the review
//! page, a browser may hold an operator's credential (a cookie), and a page from anywhere can make
//! that browser send requests here; so:
//!
//! - **Host** (over TCP): an IP address, `localhost`, or a name given with `airlock serve
//!   --host-name`. A name the server does not know is how DNS rebinding reaches a loopback server
//!   from a foreign page (its name made to resolve to 127.0.0.1): refused, 421.
//! - **Origin**: on every request that changes state, every request to `/mcp` (as the MCP
//!   specification requires) and every request to agent-sandbox's runtime (no token guards its
//!   reads), an Origin header, if sent, must be this server's own; `null` (a sandboxed frame, a
//!   `data:` page, a redirect) is refused too. Clients that are not browsers send none and are not
//!   affected. `Sec-Fetch-Site: cross-site` is refused the same way (and `same-site`, for the
//!   runtime).
//! - **Content-Type**: a request body is JSON, said as `application/json`: a browser sends a
//!   cross-site `text/plain` or form body without asking first, and a JSON parser would have read
//!   it all the same.
//!
//! The cookie's own protections (HttpOnly, SameSite=Strict, a CSRF token in a header for every
//! change) are in [`crate::page`]; these hold for tokens too.

use std::net::IpAddr;

use axum::extract::{Request, State};
use axum::http::{header, HeaderMap, Method, StatusCode};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::app::Shared;
use crate::error::ApiError;

/// How a request arrived: what its Host and Origin can be checked against.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transport {
    /// A Unix socket: no browser connects to one, and its Host says nothing (clients send any).
    Unix,
    Tcp {
        tls: bool,
    },
}

/// The middleware: refuse what a browser may be tricked into sending, pass on the rest.
pub async fn guard(State(app): State<Shared>, request: Request, next: Next) -> Response {
    let transport = request
        .extensions()
        .get::<Transport>()
        .copied()
        .unwrap_or(Transport::Tcp { tls: false });
    if let Err(refused) = check(
        request.method(),
        request.uri().path(),
        request.headers(),
        transport,
        &app.host_names,
    ) {
        return refused.into_response();
    }
    next.run(request).await
}

/// Whether a request may go on, by its method, path, headers and transport alone.
pub fn check(
    method: &Method,
    path: &str,
    headers: &HeaderMap,
    transport: Transport,
    host_names: &[String],
) -> Result<(), ApiError> {
    let changes_state = !matches!(*method, Method::GET | Method::HEAD | Method::OPTIONS);
    let mcp = path == "/mcp" || path.starts_with("/mcp/");
    let pod = is_pod_route(path);
    let host = headers.get(header::HOST).and_then(|v| v.to_str().ok());
    if let Transport::Tcp { .. } = transport {
        let known = host.is_some_and(|host| known_host(host, host_names));
        if !known {
            return Err(ApiError::new(
                StatusCode::MISDIRECTED_REQUEST,
                "host_not_allowed",
                format!(
                    "this server does not answer to the name {:?}: it answers to its IP addresses, localhost and the names given with 'airlock serve --host-name NAME' (a name it does not know may be DNS rebinding, a foreign page reaching a server on this machine)",
                    host.unwrap_or("")
                ),
            ));
        }
    }
    if changes_state || mcp || pod {
        if let Some(origin) = headers.get(header::ORIGIN) {
            let origin = origin.to_str().unwrap_or("null");
            if !same_origin(origin, host, transport) {
                return Err(ApiError::new(
                    StatusCode::FORBIDDEN,
                    "origin_forbidden",
                    format!(
                        "a request from the page {origin:?} may not change anything here, use /mcp or reach agent-sandbox's runtime: only this server's own page may (clients that are not browsers send no Origin)"
                    ),
                ));
            }
        }
        // The pod runtime's reads carry the workspace's files and need no credential: a page of
        // a sibling site may not read them either.
        let cross_site = headers
            .get("sec-fetch-site")
            .and_then(|v| v.to_str().ok())
            .is_some_and(|site| {
                site.eq_ignore_ascii_case("cross-site")
                    || (pod && site.eq_ignore_ascii_case("same-site"))
            });
        if cross_site {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "origin_forbidden",
                "a request another site's page made may not change anything here, use /mcp or reach agent-sandbox's runtime",
            ));
        }
    }
    // agent-sandbox's runtime takes its uploads as a multipart form (its contract); the Origin
    // checks above hold for it, and it carries no credential a browser could lend.
    let pod_upload = path == "/upload" && media_type(headers) == "multipart/form-data";
    // sandboxd's PUT of a file carries the file as it is; a browser asks before it sends a PUT
    // to another origin, which this server never allows.
    let file_put = *method == Method::PUT && path.starts_with("/v1/files/");
    if changes_state && has_body(headers) && !is_json(headers) && !pod_upload && !file_put {
        return Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported_media_type",
            "a request body must be JSON, sent with Content-Type: application/json",
        ));
    }
    Ok(())
}

/// agent-sandbox's in-pod runtime (`airlock serve --agent-sandbox`): no token, so no request a
/// browser makes from another page may reach it, whatever its method (a `<script src>` of a
/// download would read a workspace's file).
fn is_pod_route(path: &str) -> bool {
    matches!(path, "/execute" | "/upload" | "/v1/metadata")
        || ["/download/", "/list/", "/exists/", "/v1/files/"]
            .iter()
            .any(|prefix| path.starts_with(prefix))
}

/// An IP address, `localhost`, or a name the operator gave; with or without a port.
fn known_host(host: &str, host_names: &[String]) -> bool {
    let name = name_of(host);
    if name.is_empty() {
        return false;
    }
    let bare = name.trim_start_matches('[').trim_end_matches(']');
    bare.parse::<IpAddr>().is_ok()
        || name.eq_ignore_ascii_case("localhost")
        || host_names.iter().any(|known| names_match(known, name))
}

/// Refuse a `--host-name` that is not a DNS name or `*.` before one of two labels or more: a
/// bare `*`, `*.` or `*.com` would answer names an attacker controls, and DNS rebinding is what
/// the Host check is for.
pub fn check_host_names(names: &[String]) -> anyhow::Result<()> {
    for name in names {
        let (wildcard, rest) = match name.strip_prefix("*.") {
            Some(rest) => (true, rest),
            None => (false, name.as_str()),
        };
        let labels: Vec<&str> = rest.split('.').collect();
        let label_ok = |label: &&str| {
            !label.is_empty()
                && label.len() <= 63
                && label
                    .bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'-')
                && !label.starts_with('-')
                && !label.ends_with('-')
        };
        let named = rest.len() <= 253 && labels.iter().all(label_ok);
        if !named || (wildcard && labels.len() < 2) {
            anyhow::bail!(
                "--host-name {name:?}: give a DNS name (airlock.internal), or every name under one of two labels or more (*.agents.svc.cluster.local): no empty label, no trailing dot, no other '*'"
            );
        }
    }
    Ok(())
}

/// Whether `name` is the name the operator gave, or, for `*.SUFFIX`, a name of one or more
/// labels under SUFFIX (a pod's Service names, `ID.NAMESPACE.svc.cluster.local`).
fn names_match(known: &str, name: &str) -> bool {
    match known.strip_prefix("*.") {
        Some(suffix) => {
            let cut = name.len().saturating_sub(suffix.len());
            match (name.get(..cut), name.get(cut..)) {
                (Some(labels), Some(tail)) => {
                    labels.len() > 1 && labels.ends_with('.') && tail.eq_ignore_ascii_case(suffix)
                }
                _ => false,
            }
        }
        None => known.eq_ignore_ascii_case(name),
    }
}

/// The name (or address) of a Host header, without its port.
fn name_of(host: &str) -> &str {
    if host.starts_with('[') {
        return host
            .split_once(']')
            .map_or(host, |(v6, _)| &host[..v6.len() + 1]);
    }
    host.rsplit_once(':').map_or(host, |(name, _)| name)
}

/// Whether `origin` is this server as the request reached it (scheme, name and port).
fn same_origin(origin: &str, host: Option<&str>, transport: Transport) -> bool {
    let Some(host) = host else {
        return false;
    };
    let scheme = match transport {
        Transport::Tcp { tls: true } => "https",
        _ => "http",
    };
    let Some(rest) = origin
        .strip_prefix(scheme)
        .and_then(|r| r.strip_prefix("://"))
    else {
        return false;
    };
    let default_port = if scheme == "https" { ":443" } else { ":80" };
    let bare = |h: &str| {
        h.strip_suffix(default_port)
            .unwrap_or(h)
            .to_ascii_lowercase()
    };
    bare(rest) == bare(host)
}

fn has_body(headers: &HeaderMap) -> bool {
    let length = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse::<u64>().ok());
    match length {
        Some(length) => length > 0,
        None => headers.contains_key(header::TRANSFER_ENCODING),
    }
}

fn is_json(headers: &HeaderMap) -> bool {
    let essence = media_type(headers);
    essence == "application/json"
        || (essence.starts_with("application/") && essence.ends_with("+json"))
}

/// The Content-Type's type and subtype, lower-cased, without parameters ("" when none is sent).
fn media_type(headers: &HeaderMap) -> String {
    headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|value| value.split(';').next())
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(pairs: &[(&str, &str)]) -> HeaderMap {
        let mut map = HeaderMap::new();
        for (name, value) in pairs {
            map.append(
                header::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                value.parse().unwrap(),
            );
        }
        map
    }

    const TCP: Transport = Transport::Tcp { tls: false };

    fn code(result: Result<(), ApiError>) -> Option<String> {
        result.err().map(|e| e.code)
    }

    #[test]
    fn names_the_server_does_not_know_are_refused_over_tcp() {
        let names = vec!["airlock.example".to_string()];
        for host in [
            "127.0.0.1:8700",
            "[::1]:8700",
            "localhost:8700",
            "LOCALHOST",
            "10.1.2.3",
            "airlock.example:443",
        ] {
            let h = headers(&[("host", host)]);
            assert_eq!(
                code(check(&Method::GET, "/", &h, TCP, &names)),
                None,
                "{host}"
            );
        }
        for host in [
            "attacker.example:8700",
            "127.0.0.1.nip.io:8700",
            "",
            "localhost.attacker.example",
        ] {
            let h = headers(&[("host", host)]);
            assert_eq!(
                code(check(&Method::GET, "/", &h, TCP, &names)).as_deref(),
                Some("host_not_allowed"),
                "{host}"
            );
        }
        assert_eq!(
            code(check(&Method::GET, "/", &HeaderMap::new(), TCP, &names)).as_deref(),
            Some("host_not_allowed")
        );
        // A pod's Service names, all of one namespace: one label or more under the suffix.
        let names = vec!["*.agents.svc.cluster.local".to_string()];
        for (host, known) in [
            ("pod-1.agents.svc.cluster.local:8888", true),
            ("a.b.agents.svc.cluster.local", true),
            ("POD.AGENTS.svc.cluster.local", true),
            ("agents.svc.cluster.local", false),
            (".agents.svc.cluster.local", false),
            ("pod-1.other.svc.cluster.local", false),
            ("pod-1.xagents.svc.cluster.local", false),
            ("pod-1.agents.svc.cluster.local.attacker.example", false),
        ] {
            let h = headers(&[("host", host)]);
            let refused = code(check(&Method::GET, "/", &h, TCP, &names));
            assert_eq!(refused.is_none(), known, "{host}: {refused:?}");
        }
        let given = |name: &str| check_host_names(&[name.to_string()]);
        for refused in [
            "*", "*.", "*.com", "..a.b", "a..b", "a.b.", "*.a.b.", "a b", "x.*.b", "-a.b",
        ] {
            assert!(given(refused).is_err(), "{refused}");
        }
        for taken in [
            "airlock",
            "airlock.internal",
            "*.agents.svc.cluster.local",
            "*.a.b",
            "10.0.0.1",
        ] {
            assert!(given(taken).is_ok(), "{taken}");
        }
        // Over a Unix socket the Host is whatever the client wrote.
        let names = vec!["airlock.example".to_string()];
        let h = headers(&[("host", "airlock")]);
        assert_eq!(
            code(check(
                &Method::POST,
                "/v1/runs",
                &h,
                Transport::Unix,
                &names
            )),
            None
        );
    }

    #[test]
    fn a_foreign_or_null_origin_changes_nothing() {
        let post = |origin: &str, path: &str| {
            let h = headers(&[("host", "127.0.0.1:8700"), ("origin", origin)]);
            code(check(&Method::POST, path, &h, TCP, &[]))
        };
        assert_eq!(post("http://127.0.0.1:8700", "/v1/disable"), None);
        for (origin, path) in [
            ("http://evil.example", "/v1/disable"),
            ("null", "/v1/sessions/x/apply"),
            ("https://127.0.0.1:8700", "/v1/disable"),
            ("http://127.0.0.1:8701", "/v1/disable"),
            ("http://localhost:8700", "/v1/disable"),
            ("http://evil.example", "/mcp"),
            ("null", "/mcp"),
        ] {
            assert_eq!(
                post(origin, path).as_deref(),
                Some("origin_forbidden"),
                "{origin} {path}"
            );
        }
        // Reading is not refused for its Origin (no answer is shared with another origin), but
        // /mcp is, whatever the method.
        let h = headers(&[
            ("host", "127.0.0.1:8700"),
            ("origin", "http://evil.example"),
        ]);
        assert_eq!(
            code(check(&Method::GET, "/v1/sessions", &h, TCP, &[])),
            None
        );
        assert_eq!(
            code(check(&Method::GET, "/mcp", &h, TCP, &[])).as_deref(),
            Some("origin_forbidden")
        );
        let h = headers(&[("host", "127.0.0.1:8700"), ("sec-fetch-site", "cross-site")]);
        assert_eq!(
            code(check(&Method::POST, "/v1/enable", &h, TCP, &[])).as_deref(),
            Some("origin_forbidden")
        );
        // Over TLS the page's origin is https.
        let h = headers(&[("host", "localhost"), ("origin", "https://localhost:443")]);
        assert_eq!(
            code(check(
                &Method::POST,
                "/v1/enable",
                &h,
                Transport::Tcp { tls: true },
                &[]
            )),
            None
        );
    }

    #[test]
    fn a_body_is_json_said_as_json() {
        let post = |pairs: &[(&str, &str)]| {
            let mut all = vec![("host", "127.0.0.1")];
            all.extend_from_slice(pairs);
            code(check(
                &Method::POST,
                "/v1/disable",
                &headers(&all),
                TCP,
                &[],
            ))
        };
        assert_eq!(
            post(&[
                ("content-length", "2"),
                ("content-type", "application/json")
            ]),
            None
        );
        assert_eq!(
            post(&[
                ("content-length", "2"),
                ("content-type", "application/json; charset=utf-8")
            ]),
            None
        );
        assert_eq!(post(&[("content-length", "0")]), None);
        assert_eq!(post(&[]), None);
        for refused in [
            vec![("content-length", "2"), ("content-type", "text/plain")],
            vec![
                ("content-length", "9"),
                ("content-type", "application/x-www-form-urlencoded"),
            ],
            vec![
                ("content-length", "9"),
                ("content-type", "multipart/form-data; boundary=x"),
            ],
            vec![("content-length", "9")],
            vec![
                ("transfer-encoding", "chunked"),
                ("content-type", "text/plain"),
            ],
        ] {
            assert_eq!(
                post(&refused).as_deref(),
                Some("unsupported_media_type"),
                "{refused:?}"
            );
        }
    }

    #[test]
    fn only_the_pod_runtimes_upload_takes_a_form_and_not_from_another_site() {
        let upload = |path: &str, pairs: &[(&str, &str)]| {
            let mut all = vec![
                ("host", "127.0.0.1:8888"),
                ("content-length", "9"),
                ("content-type", "multipart/form-data; boundary=x"),
            ];
            all.extend_from_slice(pairs);
            code(check(&Method::POST, path, &headers(&all), TCP, &[]))
        };
        assert_eq!(upload("/upload", &[]), None);
        assert_eq!(
            upload("/v1/sessions", &[]).as_deref(),
            Some("unsupported_media_type")
        );
        assert_eq!(
            upload("/upload", &[("origin", "https://evil.example")]).as_deref(),
            Some("origin_forbidden")
        );
        assert_eq!(
            upload("/upload", &[("sec-fetch-site", "cross-site")]).as_deref(),
            Some("origin_forbidden")
        );
    }

    #[test]
    fn another_page_may_not_read_the_pod_runtimes_files() {
        let get = |path: &str, pairs: &[(&str, &str)]| {
            let mut all = vec![("host", "127.0.0.1:8888")];
            all.extend_from_slice(pairs);
            code(check(&Method::GET, path, &headers(&all), TCP, &[]))
        };
        assert_eq!(get("/download/config.js", &[]), None);
        for path in ["/download/config.js", "/list/", "/exists/a"] {
            for site in ["cross-site", "same-site"] {
                assert_eq!(
                    get(path, &[("sec-fetch-site", site)]).as_deref(),
                    Some("origin_forbidden"),
                    "{path} {site}"
                );
            }
            assert_eq!(
                get(path, &[("origin", "http://evil.test")]).as_deref(),
                Some("origin_forbidden")
            );
            assert_eq!(get(path, &[("sec-fetch-site", "same-origin")]), None);
        }
        // The API's own reads are the page's, which its cookie rules guard.
        assert_eq!(
            get("/v1/sessions", &[("sec-fetch-site", "same-site")]),
            None
        );
    }
}
