//! The API's endpoints: each parses its request, calls core with the token's caller, and says
//! core's answer in JSON. None checks a rule of its own.

mod approvals;
mod audit;
mod control;
pub(crate) mod pod;
pub(crate) mod runs;
mod sessions;

use axum::extract::{DefaultBodyLimit, FromRequest, FromRequestParts, Path, Request};
use axum::http::request::Parts;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::Router;
use serde::de::DeserializeOwned;

use crate::app::Shared;
use crate::error::ApiError;

/// The OpenAPI document the server answers to (kept in the repository, checked against the
/// server by the tests).
pub const OPENAPI: &str = include_str!("../../openapi.json");

pub fn router(app: Shared, max_body: usize) -> Router {
    Router::new()
        .route("/openapi.json", get(openapi))
        .route("/v1/health", get(health))
        .route("/v1/sessions", post(sessions::create).get(sessions::list))
        .route("/v1/sessions/{id}", get(sessions::get))
        .route(
            "/v1/sessions/{id}/runs",
            post(runs::in_session).get(sessions::runs),
        )
        .route(
            "/v1/sessions/{id}/runs/stream",
            post(runs::in_session_streamed),
        )
        .route("/v1/sessions/{id}/diff", get(sessions::diff))
        .route("/v1/sessions/{id}/apply", post(sessions::apply))
        .route("/v1/sessions/{id}/revert", post(sessions::revert))
        .route("/v1/sessions/{id}/discard", post(sessions::discard))
        .route("/v1/sessions/{id}/kill", post(control::kill))
        .route("/v1/sessions/{id}/pause", post(control::pause))
        .route("/v1/sessions/{id}/resume", post(control::resume))
        .route("/v1/runs", post(runs::throwaway))
        .route("/v1/runs/stream", post(runs::throwaway_streamed))
        .route("/v1/disable", post(control::disable))
        .route("/v1/enable", post(control::enable))
        .route("/v1/status", get(control::status))
        .route("/v1/audit", get(audit::records))
        .route("/v1/approvals", get(approvals::list))
        .route(
            "/v1/approvals/{id}",
            get(approvals::get).post(approvals::decide),
        )
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(max_body))
        .with_state(app)
}

async fn openapi() -> Response {
    ([(header::CONTENT_TYPE, "application/json")], OPENAPI).into_response()
}

async fn health() -> Response {
    axum::Json(serde_json::json!({
        "status": "ok",
        "version": env!("CARGO_PKG_VERSION"),
    }))
    .into_response()
}

async fn not_found() -> ApiError {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "no_such_endpoint",
        "no such endpoint: GET /openapi.json lists them",
    )
}

async fn method_not_allowed() -> ApiError {
    ApiError::new(
        StatusCode::METHOD_NOT_ALLOWED,
        "method_not_allowed",
        "this endpoint does not take that method: GET /openapi.json lists what it takes",
    )
}

/// The session a path names (`{id}`: its id or name), its rejection — a segment that is not
/// UTF-8 once percent-decoded — as the API's error (axum's own would be plain text).
pub struct SessionId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for SessionId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<SessionId, ApiError> {
        let Path(id) = Path::<String>::from_request_parts(parts, state).await?;
        Ok(SessionId(id))
    }
}

/// The approval a path names (`{id}`), its rejection as the API's error.
pub struct ApprovalId(pub String);

impl<S: Send + Sync> FromRequestParts<S> for ApprovalId {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<ApprovalId, ApiError> {
        let Path(id) = Path::<String>::from_request_parts(parts, state).await?;
        Ok(ApprovalId(id))
    }
}

/// How long a request's body may take to arrive, once its head has.
pub(crate) const BODY_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30);

pub(crate) fn body_timeout() -> ApiError {
    ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "body_timeout",
        format!(
            "the request's body did not arrive within {} s: send it whole, at once",
            BODY_TIMEOUT.as_secs()
        ),
    )
}

/// A JSON body, its rejections as the API's errors. An empty body is an empty object (every
/// field of every request is optional or says so).
pub struct Body<T>(pub T);

impl<T: DeserializeOwned> FromRequest<Shared> for Body<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, app: &Shared) -> Result<Body<T>, ApiError> {
        // A body sent slowly (or never, after its head) does not hold the connection for long.
        let bytes = tokio::time::timeout(BODY_TIMEOUT, axum::body::Bytes::from_request(req, app))
            .await
            .map_err(|_| body_timeout())?
            .map_err(|rejection| {
                if rejection.status() == StatusCode::PAYLOAD_TOO_LARGE {
                    crate::error::too_large()
                } else {
                    ApiError::bad_request("bad_body", rejection.body_text())
                }
            })?;
        let bytes: &[u8] = if bytes.iter().all(u8::is_ascii_whitespace) {
            b"{}"
        } else {
            &bytes
        };
        check_object(bytes)?;
        serde_json::from_slice(bytes).map(Body).map_err(|e| {
            let code = if e.is_syntax() || e.is_eof() {
                "bad_json"
            } else {
                "bad_request_body"
            };
            ApiError::bad_request(
                code,
                format!("the body is not what this endpoint takes: {e} — GET /openapi.json describes it"),
            )
        })
    }
}

/// Every request body is a JSON object. serde would also read a struct from an array of its
/// fields in order (`[null, "name"]`), a form no client means and the document does not describe.
fn check_object(bytes: &[u8]) -> Result<(), ApiError> {
    let first = bytes.iter().find(|b| !b.is_ascii_whitespace());
    if first == Some(&b'{') {
        return Ok(());
    }
    let what = match serde_json::from_slice::<serde_json::Value>(bytes) {
        Err(e) => {
            return Err(ApiError::bad_request(
                "bad_json",
                format!(
                "the body is not JSON: {e} — GET /openapi.json describes what this endpoint takes"
            ),
            ))
        }
        Ok(serde_json::Value::Array(_)) => "an array",
        Ok(serde_json::Value::String(_)) => "a string",
        Ok(serde_json::Value::Number(_)) => "a number",
        Ok(serde_json::Value::Bool(_)) => "a boolean",
        Ok(_) => "null",
    };
    Err(ApiError::bad_request(
        "bad_request_body",
        format!("the body is {what}: send a JSON object ({{}} when nothing is needed) — GET /openapi.json describes it"),
    ))
}
