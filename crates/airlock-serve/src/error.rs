//! Errors as the API answers them: an HTTP status, a stable `code`, and a message that says what
//! to do. Core decides what went wrong ([`airlock_core::Error::code`]); this only says it in HTTP.

pub use axum::http::StatusCode;
use axum::http::{header, HeaderValue};
use axum::response::{IntoResponse, Response};
use serde::Serialize;

use airlock_core::{ErrorKind, Refusal};

#[derive(Debug, Serialize)]
pub struct ApiError {
    #[serde(skip)]
    pub status: StatusCode,
    pub code: String,
    pub message: String,
    /// Seconds to wait before asking again (429 only).
    #[serde(skip)]
    pub retry_after: Option<u64>,
}

impl ApiError {
    pub fn new(
        status: StatusCode,
        code: impl Into<String>,
        message: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            code: code.into(),
            message: message.into(),
            retry_after: None,
        }
    }

    pub fn bad_request(code: &'static str, message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::BAD_REQUEST, code, message)
    }

    pub fn internal(message: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::INTERNAL_SERVER_ERROR, "internal", message)
    }
}

pub fn status_of(kind: ErrorKind) -> StatusCode {
    match kind {
        ErrorKind::Invalid => StatusCode::BAD_REQUEST,
        ErrorKind::Forbidden => StatusCode::FORBIDDEN,
        ErrorKind::NotFound => StatusCode::NOT_FOUND,
        ErrorKind::Conflict => StatusCode::CONFLICT,
        ErrorKind::Unavailable => StatusCode::SERVICE_UNAVAILABLE,
        ErrorKind::Internal => StatusCode::INTERNAL_SERVER_ERROR,
        ErrorKind::Unauthenticated => StatusCode::UNAUTHORIZED,
        ErrorKind::Busy => StatusCode::TOO_MANY_REQUESTS,
        ErrorKind::Cancelled => StatusCode::REQUEST_TIMEOUT,
    }
}

/// The kind of failure a status says, for a refusal passed on beyond HTTP (to MCP's tools).
pub fn kind_of(status: StatusCode) -> ErrorKind {
    match status {
        StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => ErrorKind::Invalid,
        StatusCode::UNAUTHORIZED => ErrorKind::Unauthenticated,
        StatusCode::FORBIDDEN => ErrorKind::Forbidden,
        StatusCode::NOT_FOUND => ErrorKind::NotFound,
        StatusCode::CONFLICT => ErrorKind::Conflict,
        StatusCode::TOO_MANY_REQUESTS => ErrorKind::Busy,
        StatusCode::REQUEST_TIMEOUT => ErrorKind::Cancelled,
        StatusCode::SERVICE_UNAVAILABLE => ErrorKind::Unavailable,
        _ => ErrorKind::Internal,
    }
}

impl From<Refusal> for ApiError {
    fn from(refusal: Refusal) -> ApiError {
        ApiError::new(status_of(refusal.kind), refusal.code, refusal.message)
    }
}

impl From<ApiError> for Refusal {
    fn from(error: ApiError) -> Refusal {
        Refusal::new(kind_of(error.status), error.code, error.message)
    }
}

impl From<airlock_core::Error> for ApiError {
    fn from(err: airlock_core::Error) -> ApiError {
        let (code, kind) = err.code();
        ApiError::new(status_of(kind), code, err.to_string())
    }
}

impl From<airlock_core::tokens::AuthError> for ApiError {
    fn from(err: airlock_core::tokens::AuthError) -> ApiError {
        ApiError::new(StatusCode::UNAUTHORIZED, err.code(), err.to_string())
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let status = self.status;
        let retry_after = self.retry_after;
        let mut response = (status, axum::Json(self)).into_response();
        if status == StatusCode::UNAUTHORIZED {
            response
                .headers_mut()
                .insert(header::WWW_AUTHENTICATE, HeaderValue::from_static("Bearer"));
        }
        if let Some(seconds) = retry_after {
            if let Ok(value) = HeaderValue::from_str(&seconds.to_string()) {
                response.headers_mut().insert(header::RETRY_AFTER, value);
            }
        }
        response
    }
}

/// A body larger than `--max-body` (the router's limit, met while reading it).
pub fn too_large() -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "body_too_large",
        "the body is larger than this server takes (airlock serve --max-body); send less, or stdin in smaller runs",
    )
}

impl From<axum::extract::rejection::QueryRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::QueryRejection) -> ApiError {
        ApiError::bad_request("bad_query", rejection.body_text())
    }
}

impl From<axum::extract::rejection::PathRejection> for ApiError {
    fn from(rejection: axum::extract::rejection::PathRejection) -> ApiError {
        ApiError::bad_request("bad_path", rejection.body_text())
    }
}

/// A core call on a blocking thread that panicked or was cancelled.
impl From<tokio::task::JoinError> for ApiError {
    fn from(err: tokio::task::JoinError) -> ApiError {
        ApiError::internal(format!(
            "the operation failed inside airlock: {err} — please report it"
        ))
    }
}

pub type ApiResult<T> = Result<T, ApiError>;
