//! The kill switch: kill, pause, resume a session's sandboxes; disable and enable the token's
//! profile; status.

use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::Deserialize;

use airlock_core::control::Action;
use airlock_core::kill_switch::{ControlRequest, TargetChoice};

use super::{Body, SessionId};
use crate::app::{blocking, Authed};
use crate::error::ApiResult;

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Why {
    /// Why, for the audit log (required to disable).
    reason: Option<String>,
    /// With kill: cut the sandboxes' network instead, leaving their processes.
    #[serde(default)]
    network_only: bool,
}

async fn act(authed: Authed, id: String, body: Why, action: Action) -> ApiResult<Response> {
    let (caller, slot) = (authed.caller, authed.slot);
    let request = ControlRequest {
        action,
        target: TargetChoice {
            session: Some(id),
            ..TargetChoice::default()
        },
        network_only: body.network_only,
        reason: body.reason,
    };
    let report = blocking(slot, move || {
        airlock_core::kill_switch::act(&caller, &request)
    })
    .await?;
    Ok(Json(report).into_response())
}

pub async fn kill(
    authed: Authed,
    SessionId(id): SessionId,
    Body(body): Body<Why>,
) -> ApiResult<Response> {
    act(authed, id, body, Action::Kill).await
}

pub async fn pause(
    authed: Authed,
    SessionId(id): SessionId,
    Body(body): Body<Why>,
) -> ApiResult<Response> {
    act(authed, id, body, Action::Pause).await
}

pub async fn resume(
    authed: Authed,
    SessionId(id): SessionId,
    Body(body): Body<Why>,
) -> ApiResult<Response> {
    act(authed, id, body, Action::Resume).await
}

#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Switch {
    reason: Option<String>,
}

/// Disable the token's profile: every entry point refuses it, its sandboxes are killed.
pub async fn disable(authed: Authed, Body(body): Body<Switch>) -> ApiResult<Response> {
    let (caller, slot) = (authed.caller, authed.slot);
    let reason = body.reason.unwrap_or_default();
    let report = blocking(slot, move || {
        airlock_core::kill_switch::disable(&caller, None, &reason)
    })
    .await?;
    Ok(Json(report).into_response())
}

pub async fn enable(authed: Authed, Body(_): Body<Switch>) -> ApiResult<Response> {
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
