//! The kill switch: kill, pause, resume a session's sandboxes; disable and enable the token's
//! profile; status.

use airlock_core::bodies::{ControlBody, SwitchBody};
use airlock_core::control::Action;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::{Body, SessionId};
use crate::app::{blocking, Authed};
use crate::error::ApiResult;

async fn act(authed: Authed, id: String, body: ControlBody, action: Action) -> ApiResult<Response> {
    let (caller, slot) = (authed.caller, authed.slot);
    let request = body.request(action, id);
    let report = blocking(slot, move || {
        airlock_core::kill_switch::act(&caller, &request)
    })
    .await?;
    Ok(Json(report).into_response())
}

pub async fn kill(
    authed: Authed,
    SessionId(id): SessionId,
    Body(body): Body<ControlBody>,
) -> ApiResult<Response> {
    act(authed, id, body, Action::Kill).await
}

pub async fn pause(
    authed: Authed,
    SessionId(id): SessionId,
    Body(body): Body<ControlBody>,
) -> ApiResult<Response> {
    act(authed, id, body, Action::Pause).await
}

pub async fn resume(
    authed: Authed,
    SessionId(id): SessionId,
    Body(body): Body<ControlBody>,
) -> ApiResult<Response> {
    act(authed, id, body, Action::Resume).await
}

/// Disable the token's profile: every entry point refuses it, its sandboxes are killed.
pub async fn disable(authed: Authed, Body(body): Body<SwitchBody>) -> ApiResult<Response> {
    let (caller, slot) = (authed.caller, authed.slot);
    let reason = body.reason.unwrap_or_default();
    let report = blocking(slot, move || {
        airlock_core::kill_switch::disable(&caller, None, &reason)
    })
    .await?;
    Ok(Json(report).into_response())
}

pub async fn enable(authed: Authed, Body(_): Body<SwitchBody>) -> ApiResult<Response> {
    let (caller, slot) = (authed.caller, authed.slot);
    let report = blocking(slot, move || {
        airlock_core::kill_switch::enable(&caller, None)
    })
    .await?;
    Ok(Json(report).into_response())
}

pub async fn status(authed: Authed) -> ApiResult<Response> {
    let (caller, slot) = (authed.caller, authed.slot);
    let report = blocking(slot, move || airlock_core::kill_switch::status(&caller)).await?;
    Ok(Json(report).into_response())
}
