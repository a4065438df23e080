//! The review page at `/`: one HTML document, its script and its style, compiled into the
//! binary (no external asset: it works offline), served with a Content-Security-Policy that lets
//! it load nothing else and run no inline script. The page is a client of the API like any other:
//! it reads and changes through `/v1/...`, with an operator's token kept behind a cookie.
//!
//! Login: `POST /v1/login` with the code of a one-time link (`airlock review`) or an operator
//! token, judged by core; the answer sets an HttpOnly, SameSite=Strict cookie and gives the CSRF
//! token the page sends in `X-Airlock-CSRF` with every request that changes something.

mod logins;

use axum::extract::State;
use axum::http::request::Parts;
use axum::http::{header, HeaderMap, HeaderValue, Method, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;

use airlock_core::bodies::{LoginBody, NoFields};
use airlock_core::page_login::{page_login, PageCredential};
use airlock_core::tokens::TokenRecord;

use crate::app::{Authed, Shared};
use crate::error::{ApiError, ApiResult};
use crate::routes::Body;

pub use logins::{Login, Logins, LOGIN_LIFETIME};

const INDEX: &str = include_str!("../../page/index.html");
const SCRIPT: &str = include_str!("../../page/app.js");
const STYLE: &str = include_str!("../../page/app.css");

/// The cookie that names a login.
const COOKIE: &str = "airlock_page";
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
        page_login(&service, &app2.tokens, credential)
    })
    .await??;
    let (cookie, login) = app.logins.open(&record.id)?;
    let mut response = axum::Json(described(&record, &login)).into_response();
    let secure = if app.tls { "; Secure" } else { "" };
    let set = format!(
        "{COOKIE}={cookie}; Path=/; HttpOnly; SameSite=Strict; Max-Age={}{secure}",
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

/// `GET /v1/login`: who the page is logged in as, and its CSRF token (a page loaded again has
/// lost it).
async fn whoami(State(app): State<Shared>, headers: HeaderMap) -> ApiResult<Response> {
    let cookie = cookie_of(&headers).ok_or_else(not_logged_in)?;
    let login = app.logins.get(cookie).ok_or_else(not_logged_in)?;
    let record = app
        .tokens
        .valid_record(&login.token_id)
        .ok_or_else(not_logged_in)?;
    let mut response = axum::Json(described(&record, &login)).into_response();
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
    drop(authed);
    if let Some(cookie) = cookie_of(&headers) {
        app.logins.close(cookie);
    }
    let mut response = StatusCode::NO_CONTENT.into_response();
    response.headers_mut().insert(
        header::SET_COOKIE,
        HeaderValue::from_static("airlock_page=; Path=/; HttpOnly; SameSite=Strict; Max-Age=0"),
    );
    Ok(response)
}

fn described(record: &TokenRecord, login: &Login) -> serde_json::Value {
    let ends = std::time::SystemTime::now() + LOGIN_LIFETIME.saturating_sub(login.since.elapsed());
    serde_json::json!({
        "token_id": record.id,
        "token_name": record.name,
        "profile": record.profile,
        "csrf": login.csrf,
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

/// The value of the page's cookie, if the request carries it.
fn cookie_of(headers: &HeaderMap) -> Option<&str> {
    headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .find_map(|pair| pair.trim().strip_prefix(COOKIE)?.strip_prefix('='))
        .filter(|value| !value.is_empty())
}

/// The operator token a request's page login stands for, if it carries the page's cookie: only
/// for `/v1/...` (never `/mcp`), and for a request that changes something only with the login's
/// CSRF token. `None`: no cookie (the request is then judged by its bearer token, or as having
/// none).
pub fn logged_in(parts: &Parts, app: &Shared) -> Result<Option<TokenRecord>, ApiError> {
    if !parts.uri.path().starts_with("/v1/") {
        return Ok(None);
    }
    let Some(cookie) = cookie_of(&parts.headers) else {
        return Ok(None);
    };
    let login = app.logins.get(cookie).ok_or_else(not_logged_in)?;
    let record = app.tokens.valid_record(&login.token_id).ok_or_else(|| {
        app.logins.close(cookie);
        not_logged_in()
    })?;
    let changes_state = !matches!(parts.method, Method::GET | Method::HEAD | Method::OPTIONS);
    if changes_state {
        let sent = parts
            .headers
            .get(CSRF_HEADER)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("");
        if !same(sent, &login.csrf) {
            return Err(ApiError::new(
                StatusCode::FORBIDDEN,
                "csrf_refused",
                "a request that changes something from the review page must carry the page's X-Airlock-CSRF header: load the page again",
            ));
        }
    }
    Ok(Some(record))
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
        assert_eq!(cookie_of(&headers), Some("abc"));
        headers.insert(header::COOKIE, "airlock_pagex=abc".parse().unwrap());
        assert_eq!(cookie_of(&headers), None);
        headers.insert(header::COOKIE, "airlock_page=".parse().unwrap());
        assert_eq!(cookie_of(&headers), None);
    }
}
