//! sandboxd's REST files API, as agent-sandbox's client calls it: `PUT`, `GET`, `HEAD` and
//! `DELETE /v1/files/{path}` (a `GET` of a directory lists it), `GET /v1/health` and `GET
//! /v1/metadata`. Each file operation is a run in the pod's session (see `routes::pod`); its
//! errors are sandboxd's `{"code", "message"}`, airlock's own code beside them.

use std::time::Instant;

use airlock_core::pod_runtime::{DirectoryListing, FileAnswer, FileMode, FileOp, PodPath};
use axum::extract::{Path, Query, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::get;
use axum::{Json, Router};
use serde::Deserialize;

use crate::app::Shared;
use crate::error::ApiError;
use crate::routes::pod::{asked_op, body_place, file_op, not_for_other_pages, seat};
use crate::routes::runs::holding;

pub fn router(app: Shared, max_body: usize, started: Instant) -> Router {
    let files = get(read).head(exists).put(write).delete(remove);
    Router::new()
        .route("/v1/files/", files.clone())
        .route("/v1/files/{*path}", files)
        .route("/v1/health", get(move || health(started)))
        .route("/v1/metadata", get(metadata))
        .fallback(|| async {
            SandboxdError(ApiError::new(
                StatusCode::NOT_FOUND,
                "no_such_endpoint",
                "no such endpoint of sandboxd's files API",
            ))
        })
        .layer(axum::extract::DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::map_response(not_for_other_pages))
        .with_state((app, max_body))
}

type RestState = (Shared, usize);

/// An error as sandboxd says it: its code for the status, the message, and airlock's code.
struct SandboxdError(ApiError);

impl From<ApiError> for SandboxdError {
    fn from(error: ApiError) -> SandboxdError {
        SandboxdError(error)
    }
}

impl From<airlock_core::Error> for SandboxdError {
    fn from(error: airlock_core::Error) -> SandboxdError {
        SandboxdError(error.into())
    }
}

impl IntoResponse for SandboxdError {
    fn into_response(self) -> Response {
        let SandboxdError(error) = self;
        let code = match error.status {
            StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => "INVALID_ARGUMENT",
            StatusCode::FORBIDDEN | StatusCode::UNAUTHORIZED => "PERMISSION_DENIED",
            StatusCode::NOT_FOUND => "NOT_FOUND",
            StatusCode::CONFLICT => "CONFLICT",
            StatusCode::SERVICE_UNAVAILABLE | StatusCode::TOO_MANY_REQUESTS => "UNAVAILABLE",
            _ => "INTERNAL",
        };
        let body = serde_json::json!({
            "code": code,
            "message": error.message,
            "airlock_code": error.code,
        });
        let mut response = (error.status, Json(body)).into_response();
        if let Some(seconds) = error.retry_after {
            response
                .headers_mut()
                .insert(header::RETRY_AFTER, header::HeaderValue::from(seconds));
        }
        response
    }
}

type Answer = Result<Response, SandboxdError>;

/// The path a request names: `/v1/files/` is the workspace itself.
fn path_of(raw: Option<Path<String>>) -> Result<PodPath, ApiError> {
    let raw = raw.map(|Path(raw)| raw).unwrap_or_default();
    Ok(PodPath::parse(&raw)?)
}

async fn read(State((app, _)): State<RestState>, raw: Option<Path<String>>) -> Answer {
    let path = path_of(raw)?;
    let (answer, slot) = asked_op(&app, "GET /v1/files/", FileOp::Get(path.clone())).await?;
    let response = match answer {
        FileAnswer::Read(bytes) => {
            ([(header::CONTENT_TYPE, "application/octet-stream")], bytes).into_response()
        }
        FileAnswer::Listed(entries) => Json(DirectoryListing::of(&path, entries)).into_response(),
        _ => return Err(unexpected()),
    };
    Ok(holding(slot, response))
}

async fn exists(State((app, _)): State<RestState>, raw: Option<Path<String>>) -> Answer {
    match asked_op(&app, "HEAD /v1/files/", FileOp::Exists(path_of(raw)?)).await? {
        (FileAnswer::Exists(true), _) => Ok(StatusCode::OK.into_response()),
        (FileAnswer::Exists(false), _) => Ok(StatusCode::NOT_FOUND.into_response()),
        _ => Err(unexpected()),
    }
}

fn unexpected() -> SandboxdError {
    SandboxdError(ApiError::internal(
        "a file operation answered another's kind — please report it",
    ))
}

#[derive(Deserialize)]
struct WriteQuery {
    mode: Option<String>,
}

/// `PUT`: the body is the file, as it is (charged to the pod's rate before it is read, which must
/// arrive within the time any request's body has; given a place and a session once it has).
async fn write(
    State((app, max_body)): State<RestState>,
    raw: Option<Path<String>>,
    Query(query): Query<WriteQuery>,
    request: Request,
) -> Answer {
    let path = path_of(raw)?;
    let mode = query.mode.as_deref().map(FileMode::parse).transpose()?;
    let reading = body_place(&app)?;
    let bytes = tokio::time::timeout(
        crate::routes::BODY_TIMEOUT,
        axum::body::to_bytes(request.into_body(), max_body),
    )
    .await
    .map_err(|_| crate::routes::body_timeout())?
    .map_err(|_| crate::error::too_large())?;
    drop(reading);
    let admitted = seat(&app, format!("PUT /v1/files/{}", path.as_str())).await?;
    let op = FileOp::Write { path, mode };
    let (_, slot) = file_op(&app, admitted, op, Some(bytes.to_vec())).await?;
    Ok(holding(slot, StatusCode::NO_CONTENT.into_response()))
}

#[derive(Deserialize)]
struct RemoveQuery {
    #[serde(default)]
    recursive: bool,
}

async fn remove(
    State((app, _)): State<RestState>,
    raw: Option<Path<String>>,
    Query(query): Query<RemoveQuery>,
) -> Answer {
    let op = FileOp::Delete {
        path: path_of(raw)?,
        recursive: query.recursive,
    };
    let (_, slot) = asked_op(&app, "DELETE /v1/files/", op).await?;
    Ok(holding(slot, StatusCode::NO_CONTENT.into_response()))
}

async fn health(started: Instant) -> Response {
    Json(serde_json::json!({
        "status": "ok",
        "uptime_seconds": started.elapsed().as_secs(),
    }))
    .into_response()
}

/// sandboxd answers with its own `SANDBOX_…` variables; airlock tells nothing of its environment
/// (a name cannot say whether a value is a secret, and a command's variables are the profile's):
/// the shape, empty. Neither client asks for it.
async fn metadata() -> Response {
    Json(serde_json::json!({ "env": {} })).into_response()
}
