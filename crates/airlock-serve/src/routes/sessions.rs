//! Sessions: create, list, get, diff, apply, revert, discard.

use airlock_core::bodies::{ApplyBody, NewSessionBody, NoFields};
use airlock_core::DiffRequest;
use axum::extract::State;
use axum::http::{header, HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::{Body, SessionId};
use crate::app::{blocking, Authed, Shared};
use crate::error::{ApiError, ApiResult};

pub async fn create(
    State(_): State<Shared>,
    authed: Authed,
    Body(body): Body<NewSessionBody>,
) -> ApiResult<Response> {
    let (caller, slot) = (authed.caller, authed.slot);
    let request = body.request();
    let summary = blocking(slot, move || airlock_core::create_session(&caller, request)).await?;
    Ok((StatusCode::CREATED, Json(summary)).into_response())
}

pub async fn list(authed: Authed) -> ApiResult<Response> {
    let (caller, slot) = (authed.caller, authed.slot);
    let sessions = blocking(slot, move || airlock_core::list_sessions(&caller)).await?;
    Ok(Json(airlock_core::SessionList { sessions }).into_response())
}

pub async fn get(authed: Authed, SessionId(id): SessionId) -> ApiResult<Response> {
    let (caller, slot) = (authed.caller, authed.slot);
    let summary = blocking(slot, move || airlock_core::session_summary(&caller, &id)).await?;
    Ok(Json(summary).into_response())
}

/// The session's runs, each with how it ended and the end of its output.
pub async fn runs(authed: Authed, SessionId(id): SessionId) -> ApiResult<Response> {
    let (caller, slot) = (authed.caller, authed.slot);
    let runs = blocking(slot, move || {
        airlock_core::session_runs::session_runs(&caller, &id)
    })
    .await?;
    Ok(Json(serde_json::json!({ "runs": runs })).into_response())
}

/// The diff as it is answered: a patch, the JSON list, or a patch refused for its size.
enum DiffAnswer {
    /// The patch, and the change set's digest (sent as `Airlock-Digest`).
    Patch(Vec<u8>, String),
    List(airlock_core::DiffView),
    TooLarge(u64),
}

/// The response header that carries a patch's change-set digest (JSON has it as `digest`).
const DIGEST_HEADER: &str = "airlock-digest";

/// The patch when the client asks for `text/x-diff` (git's format, for `git apply`), else JSON:
/// every change with its hazards. A patch is made in memory from both sides of every file, whole
/// (about twice their size, and more): one of files larger than twice --max-output is refused,
/// or one request for the patch of a sandbox's gigabyte file took the server's memory.
pub async fn diff(
    State(app): State<Shared>,
    authed: Authed,
    SessionId(id): SessionId,
    headers: HeaderMap,
) -> ApiResult<Response> {
    let wants_patch = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(|accept| accept.contains("text/x-diff") || accept.contains("text/x-patch"));
    let largest_patch_input = app.keep_output.saturating_mul(2);
    let (caller, slot) = (authed.caller, authed.slot);
    let request = DiffRequest {
        session: id.clone(),
        paths: Vec::new(),
        no_ignored: false,
    };
    let answer = blocking(slot, move || {
        let diff = airlock_core::diff(&caller, &request)?;
        let io = |e: std::io::Error| airlock_core::Error::Argument {
            arg: "diff".into(),
            why: format!("cannot read the session's changes: {e}"),
        };
        if wants_patch {
            let input = diff.patch_input_bytes(0..diff.changes().len());
            if input > largest_patch_input {
                return Ok(DiffAnswer::TooLarge(input));
            }
            let mut patch = Vec::new();
            diff.write_patch(&mut patch).map_err(io)?;
            Ok(DiffAnswer::Patch(patch, diff.digest().to_string()))
        } else {
            // Each entry names its hazards, and whether git status would hide it; the trees
            // git ignores are one summary each; the digest is what an apply names.
            Ok(DiffAnswer::List(diff.view(&id).map_err(io)?))
        }
    })
    .await?;
    Ok(match answer {
        DiffAnswer::Patch(patch, digest) => (
            [
                (header::CONTENT_TYPE, "text/x-diff; charset=utf-8".to_string()),
                (header::HeaderName::from_static(DIGEST_HEADER), digest),
            ],
            patch,
        )
            .into_response(),
        DiffAnswer::List(json) => Json(json).into_response(),
        DiffAnswer::TooLarge(input) => ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "diff_too_large",
            format!(
                "the session's changed files hold {input} bytes, more than this server makes a patch of ({largest_patch_input}: twice airlock serve --max-output): ask for the list of changes (Accept: application/json), or run 'airlock diff' at the machine"
            ),
        )
        .into_response(),
    })
}

pub async fn apply(
    authed: Authed,
    SessionId(id): SessionId,
    Body(body): Body<ApplyBody>,
) -> ApiResult<Response> {
    let (caller, slot) = (authed.caller, authed.slot);
    let request = body.request(id);
    let report = blocking(slot, move || airlock_core::apply(&caller, &request)).await?;
    // Something left out (a conflict, a hazard) is the client's to look at: 409, with the report.
    let status = if report.skipped() == 0 {
        StatusCode::OK
    } else {
        StatusCode::CONFLICT
    };
    Ok((status, Json(report)).into_response())
}

pub async fn revert(
    authed: Authed,
    SessionId(id): SessionId,
    Body(_): Body<NoFields>,
) -> ApiResult<Response> {
    let (caller, slot) = (authed.caller, authed.slot);
    let report = blocking(slot, move || airlock_core::revert(&caller, &id)).await?;
    Ok(Json(report).into_response())
}

pub async fn discard(
    authed: Authed,
    SessionId(id): SessionId,
    Body(_): Body<NoFields>,
) -> ApiResult<Response> {
    let (caller, slot) = (authed.caller, authed.slot);
    let session = blocking(slot, move || airlock_core::discard_session(&caller, &id)).await?;
    Ok(
        Json(serde_json::json!({ "id": session.id, "lifecycle": session.meta.lifecycle }))
            .into_response(),
    )
}
