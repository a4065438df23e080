//! The review page at `/`: one HTML document, its script and its style, compiled into the
//! binary (no external asset: it works offline), served with a Content-Security-Policy that lets
//! it load nothing else and run no inline script. The page is a client of the API like any other:
//! it reads and changes through `/v1/...`, with an operator's token kept behind a cookie.
//!
//! Login: `POST /v1/login` with the code of a one-time link (`airlock review`) or an operator
//! token, judged by core; the answer sets an HttpOnly, SameSite=Strict cookie and gives the page
//! a second secret, which it keeps in sessionStorage and sends in `X-Airlock-CSRF` with every
//! request (reads too). Browsers send cookies to every port of a host, so a cookie alone is no
//! login: a page served from another port of this machine could read it (an image request carries
//! it) or set one of its own; sessionStorage is this origin's alone, port included. Never answered
//! again: a new tab or a closed one logs in again.

mod logins;

use axum::extract::State;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use airlock_core::bodies::{LoginBody, NoFields};
use airlock_core::page_login::{page_login, record_refused_logins, PageCredential};
use airlock_core::tokens::TokenRecord;

use crate::app::{Authed, Shared};
use crate::error::{ApiError, ApiResult};
use crate::routes::Body;

pub use logins::{Login, Logins, LOGIN_LIFETIME};

const INDEX: &str = include_str!("../../page/index.html");
const SCRIPT: &str = include_str!("../../page/app.js");
const STYLE: &str = include_str!("../../page/app.css");

/// The cookie that names a login; over TLS `__Host-airlock_page` (the browser then takes it only
/// from this origin over https, for every path, and no other site can set one of that name).
const COOKIE: &str = "airlock_page";
const COOKIE_TLS: &str = "__Host-airlock_page";
/// The header every request that changes something carries, with the login's CSRF token.
pub const CSRF_HEADER: &str = "x-airlock-csrf";

/// What the page may load and do: its own script and style, requests to this server, nothing
/// inline, no frame around it.
const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self'; \
                   connect-src 'self'; form-action 'none'; frame-ancestors 'none'; base-uri 'none'";

pub fn router(app: Shared, max_body: usize) -> Router {
    Router::new()
        .route("/", get(index))
        .route("/login", get(index))
        .route("/page/app.js", get(script))
        .route("/page/app.css", get(style))
        .route("/v1/login", post(login).get(whoami))
        .route("/v1/logout", post(logout))
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .with_state(app)
}

async fn index() -> Response {
    asset("text/html; charset=utf-8", INDEX)
}

async fn script() -> Response {
    asset("text/javascript; charset=utf-8", SCRIPT)
}

async fn style() -> Response {
    asset("text/css; charset=utf-8", STYLE)
}

fn asset(content_type: &'static str, text: &'static str) -> Response {
    let mut response = ([(header::CONTENT_TYPE, content_type)], text).into_response();
    protect(response.headers_mut());
    response
}

/// Headers every answer of the page carries.
fn protect(headers: &mut HeaderMap) {
    for (name, value) in [
        ("content-security-policy", CSP),
        ("x-content-type-options", "nosniff"),
        ("x-frame-options", "DENY"),
        ("referrer-policy", "no-referrer"),
        ("cache-control", "no-store"),
        ("cross-origin-opener-policy", "same-origin"),
        ("cross-origin-resource-policy", "same-origin"),
    ] {
        headers.insert(name, HeaderValue::from_static(value));
    }
}

/// `POST /v1/login`: core judges what was presented; an operator's token opens a login.
async fn login(State(app): State<Shared>, Body(body): Body<LoginBody>) -> ApiResult<Response> {
    // Unauthenticated, and each refusal is audited: one bucket for every anonymous attempt.
    app.limiter.admit("login attempts")?;
    let credential = body.credential()?;
    let owned = match credential {
        PageCredential::Link(code) => Owned::Link(code.to_string()),
        PageCredential::Token(token) => Owned::Token(token.to_string()),
    };
    let service = app.service.clone();
    let app2 = app.clone();
    let record = tokio::task::spawn_blocking(move || {
        let credential = match &owned {
            Owned::Link(code) => PageCredential::Link(code),
            Owned::Token(token) => PageCredential::Token(token),
        };
        let judged = page_login(&service, &app2.tokens, credential);
        if let Err(refused) = &judged {
            app2.logins.refused(refused.to_string(), |count, why| {
                record_refused_logins(&service, count, why)
            });
        }
        judged
    })
    .await??;
    let (cookie, login) = app.logins.open(&record.id)?;
    let mut answer = described(&record, &login);
    answer["csrf"] = login.csrf.clone().into();
    let mut response = axum::Json(answer).into_response();
    let (name, secure) = if app.tls {
        (COOKIE_TLS, "; Secure")
    } else {
        (COOKIE, "")
    };
    let set = format!(
        "{name}={cookie}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
        LOGIN_LIFETIME.as_secs()
    );
    let set = HeaderValue::from_str(&set)
        .map_err(|_| ApiError::internal("cannot say the page's cookie — please report it"))?;
    response.headers_mut().insert(header::SET_COOKIE, set);
    protect(response.headers_mut());
    Ok(response)
}

enum Owned {
    Link(String),
    Token(String),
}

/// Record the refused logins not on record yet, every second while the server runs: a burst's
/// count is written within a second of its end, not at the next refusal.
pub async fn record_refusals(app: Shared) {
    let mut every = tokio::time::interval(std::time::Duration::from_secs(1));
    loop {
        every.tick().await;
        let app = app.clone();
        let _ = tokio::task::spawn_blocking(move || {
            app.logins.flush(|count, why| {
                record_refused_logins(&app.service, count, why);
            });
            if let Ok(state_dir) = app.service.state_dir() {
                airlock_core::flush_suppressed_refusals(&state_dir, false);
            }
        })
        .await;
    }
}

/// `GET /v1/login`: who the page is logged in as (with the login's cookie and its secret: never
/// the secret itself, which only the login's answer gives).
async fn whoami(State(app): State<Shared>, authed: Authed) -> ApiResult<Response> {
    let Some(cookie) = &authed.page_login else {
        return Err(not_logged_in());
    };
    let login = app.logins.get(cookie).ok_or_else(not_logged_in)?;
    let mut response = axum::Json(described(&authed.token, &login)).into_response();
    protect(response.headers_mut());
    Ok(response)
}

/// `POST /v1/logout`: the login closed and the cookie cleared.
async fn logout(
    State(app): State<Shared>,
    authed: Authed,
    headers: HeaderMap,
    Body(_): Body<NoFields>,
) -> ApiResult<Response> {
    let Some(cookie) = &authed.page_login else {
        return Err(not_logged_in());
    };
    app.logins.close(cookie);
    drop(headers);
    let mut response = StatusCode::NO_CONTENT.into_response();
    let cleared = if app.tls {
        "__Host-airlock_page=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0; Secure"
    } else {
        "airlock_page=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"
    };
    response
        .headers_mut()
        .insert(header::SET_COOKIE, HeaderValue::from_static(cleared));
    Ok(response)
}

fn described(record: &TokenRecord, login: &Login) -> serde_json::Value {
    let ends = std::time::SystemTime::now() + LOGIN_LIFETIME.saturating_sub(login.since.elapsed());
    serde_json::json!({
        "token_id": record.id,
        "token_name": record.name,
        "profile": record.profile,
        "expires_at": humantime::format_rfc3339_seconds(ends).to_string(),
    })
}

fn not_logged_in() -> ApiError {
    ApiError::new(
        StatusCode::UNAUTHORIZED,
        "login_required",
        "not logged in to the review page: open the link 'airlock review' prints, or log in with an operator token",
    )
}

/// The value of the page's cookie, if the request carries it; refused when it carries two: a page
/// of another port of this host set one (cookies are shared across ports), to log this browser
/// out or in as someone else.
fn cookie_of(headers: &HeaderMap) -> Result<Option<&str>, ApiError> {
    let mut found = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| {
            let (name, value) = pair.trim().split_once('=')?;
            (name == COOKIE || name == COOKIE_TLS).then_some(value)
        });
    let first = found.next();
    if found.next().is_some() {
        return Err(ApiError::new(
            StatusCode::UNAUTHORIZED,
            "login_required",
            "the browser sent two review-page cookies: a page elsewhere on this host set one — clear this site's cookies, then log in again",
        ));
    }
    Ok(first.filter(|value| !value.is_empty()))
}

/// A request's page login: the operator token its cookie stands for and the cookie's value, if it
/// carries the page's cookie. Only `/v1/...` takes it (never `/mcp`), and only with the login's
/// secret in `X-Airlock-CSRF`, on every request: the cookie alone opens nothing. `None`: no
/// cookie (the request is then judged by its bearer token, or as having none).
pub fn logged_in(parts: &Parts, app: &Shared) -> Result<Option<(TokenRecord, String)>, ApiError> {
    if !parts.uri.path().starts_with("/v1/") {
        return Ok(None);
    }
    let Some(cookie) = cookie_of(&parts.headers)? else {
        return Ok(None);
    };
    let login = app.logins.get(cookie).ok_or_else(not_logged_in)?;
    let sent = parts
        .headers
        .get(CSRF_HEADER)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    if !same(sent, &login.csrf) {
        return Err(ApiError::new(
            StatusCode::FORBIDDEN,
            "csrf_refused",
            "a request with the review page's cookie must carry the login's X-Airlock-CSRF header (the page sends it): log in again",
        ));
    }
    let record = app.tokens.valid_record(&login.token_id).ok_or_else(|| {
        app.logins.close(cookie);
        not_logged_in()
    })?;
    Ok(Some((record, cookie.to_string())))
}

/// Equal without telling, by how long it took, how much of the two was.
fn same(a: &str, b: &str) -> bool {
    a.len() == b.len() && a.bytes().zip(b.bytes()).fold(0u8, |d, (x, y)| d | (x ^ y)) == 0
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cookie_is_found_among_others() {
        let mut headers = HeaderMap::new();
        headers.insert(
            header::COOKIE,
            "a=1; airlock_page=abc; b=2".parse().unwrap(),
        );
        assert_eq!(cookie_of(&headers).unwrap(), Some("abc"));
        headers.insert(header::COOKIE, "airlock_pagex=abc".parse().unwrap());
        assert_eq!(cookie_of(&headers).unwrap(), None);
        headers.insert(header::COOKIE, "airlock_page=".parse().unwrap());
        assert_eq!(cookie_of(&headers).unwrap(), None);
        headers.insert(header::COOKIE, "__Host-airlock_page=abc".parse().unwrap());
        assert_eq!(cookie_of(&headers).unwrap(), Some("abc"));
        // Two: one was set by a page of another port of this host.
        headers.insert(
            header::COOKIE,
            "airlock_page=junk; airlock_page=abc".parse().unwrap(),
        );
        assert_eq!(cookie_of(&headers).unwrap_err().code, "login_required");
        headers.insert(header::COOKIE, "airlock_page=junk".parse().unwrap());
        headers.append(header::COOKIE, "airlock_page=abc".parse().unwrap());
        assert!(cookie_of(&headers).is_err());
    }
}
