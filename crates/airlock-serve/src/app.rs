//! The server's state, and who a request is: its token, checked by core, as core's caller.

use std::path::PathBuf;
use std::sync::Arc;

use axum::extract::FromRequestParts;
use axum::http::header;
use axum::http::request::Parts;

use airlock_core::tokens::{TokenRecord, Tokens};
use airlock_core::Caller;

use crate::error::ApiError;
use crate::jobs::Jobs;
use crate::limits::Limiter;

pub struct App {
    /// The server as core's caller: its state directory and environment. Each request's caller
    /// is made from it and the request's token.
    pub service: Caller,
    pub tokens: Tokens,
    pub limiter: Limiter,
    pub jobs: Arc<Jobs>,
    /// This program, started as each run's worker.
    pub exe: PathBuf,
    /// Where workers leave their results.
    pub results_dir: PathBuf,
    /// Bytes of each output stream a run's answer keeps.
    pub keep_output: u64,
}

pub type Shared = Arc<App>;

/// A request with a valid token, within its rate: core's caller for it.
pub struct Authed {
    pub caller: Caller,
    pub token: TokenRecord,
}

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
            .map(str::trim);
        let token = app.tokens.authenticate(presented)?;
        app.limiter.admit(&token.id)?;
        let asked = format!("{} {}", parts.method, parts.uri.path());
        Ok(Authed {
            caller: Caller::with_token(&app.service, &token, asked),
            token,
        })
    }
}

/// Carry out a core operation on a blocking thread (core reads and writes files, takes locks).
pub async fn blocking<T: Send + 'static>(
    work: impl FnOnce() -> Result<T, airlock_core::Error> + Send + 'static,
) -> Result<T, ApiError> {
    Ok(tokio::task::spawn_blocking(work).await??)
}
