//! The server's state, and who a request is: its token, checked by core, as core's caller.

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;
use tokio::sync::OwnedSemaphorePermit;

use airlock_core::tokens::{TokenRecord, Tokens};
use airlock_core::Caller;

use crate::error::ApiError;
use crate::limits::Limiter;
use airlock_runner::Jobs;

pub struct App {
    /// The server as core's caller: its state directory and environment. Each request's caller
    /// is made from it and the request's token.
    pub service: Caller,
    pub tokens: Tokens,
    pub limiter: Limiter,
    pub jobs: Arc<Jobs>,
    /// This program, started as each run's worker.
    pub exe: PathBuf,
    /// Warm workers, each with a sandbox prepared (None: `--warm 0`).
    pub pool: Option<Arc<airlock_runner::pool::WarmPool>>,
    /// Where workers leave their results.
    pub results_dir: PathBuf,
    /// Bytes of each output stream a run's answer keeps.
    pub keep_output: u64,
    /// The review page's logins.
    pub logins: crate::page::Logins,
    /// Names the server answers to besides its addresses and `localhost` (`--host-name`).
    pub host_names: Vec<String>,
    /// Whether it serves over TLS (the page's cookie is then `Secure`).
    pub tls: bool,
    /// agent-sandbox's runtime (`--agent-sandbox`): what it is bound to, its session.
    pub pod: Option<Arc<crate::routes::pod::Pod>>,
}

pub type Shared = Arc<App>;

/// A request with a valid token, within its rate: core's caller for it.
pub struct Authed {
    pub caller: Caller,
    pub token: TokenRecord,
    /// One of the token's places for requests in progress (see [`Limiter::request_slot`]): held
    /// while the body is read and, moved into [`blocking`], until core's answer.
    pub slot: RequestSlot,
    /// The review page's login it came with (its cookie's value), if it came with one: what
    /// goes on after it (an audit log followed) ends with the login.
    pub page_login: Option<String>,
}

/// The token in a header of airlock's own, when `Authorization` cannot carry it: agent-sandbox's
/// router drops `Authorization` on its way to a pod. (A browser sends a header of its own only
/// after asking this server, which never says yes: no page can make it send one.)
pub const TOKEN_HEADER: &str = "x-airlock-token";

/// A place for a request in progress, shared by what it hands work to.
pub type RequestSlot = Arc<OwnedSemaphorePermit>;

impl FromRequestParts<Shared> for Authed {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, app: &Shared) -> Result<Authed, ApiError> {
        let presented = parts
            .headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| {
                v.strip_prefix("Bearer ")
                    .or_else(|| v.strip_prefix("bearer "))
            })
            .or_else(|| {
                parts
                    .headers
                    .get(TOKEN_HEADER)
                    .and_then(|v| v.to_str().ok())
            })
            .map(str::trim);
        // A bearer token decides when one is sent; else the review page's cookie, if any.
        let from_page = match presented {
            Some(_) => None,
            None => crate::page::logged_in(parts, app)?,
        };
        let (token, page_login) = match from_page {
            Some((record, cookie)) => (record, Some(cookie)),
            None => (app.tokens.authenticate(presented)?, None),
        };
        app.limiter.admit(&token.id)?;
        let slot = Arc::new(app.limiter.request_slot(&token.id)?);
        let asked = format!("{} {}", parts.method, parts.uri.path());
        Ok(Authed {
            caller: Caller::with_token(&app.service, &token, asked),
            token,
            slot,
            page_login,
        })
    }
}

/// Carry out a core operation on a blocking thread (core reads and writes files, takes locks),
/// holding the request's `slot` until it ends: a thread waiting for a session's lock goes on
/// waiting when its client has gone, and a token must not take every thread that way.
pub async fn blocking<T: Send + 'static>(
    slot: RequestSlot,
    work: impl FnOnce() -> Result<T, airlock_core::Error> + Send + 'static,
) -> Result<T, ApiError> {
    Ok(tokio::task::spawn_blocking(move || {
        let answer = work();
        drop(slot);
        answer
    })
    .await??)
}
