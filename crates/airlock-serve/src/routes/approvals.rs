//! Approvals: the connections waiting for a person, and an operator's answer. Core refuses an
//! agent token and a token bound to another profile; the answer is audited there.

use airlock_core::DecideRequest;
use axum::response::{IntoResponse, Response};
use axum::Json;

use super::{ApprovalId, Body};
use crate::app::{blocking, Authed};
use crate::error::ApiResult;

pub async fn list(authed: Authed) -> ApiResult<Response> {
    let (caller, slot) = (authed.caller, authed.slot);
    let approvals = blocking(slot, move || airlock_core::list_approvals(&caller)).await?;
    Ok(Json(airlock_core::ApprovalList { approvals }).into_response())
}

pub async fn get(authed: Authed, ApprovalId(id): ApprovalId) -> ApiResult<Response> {
    let (caller, slot) = (authed.caller, authed.slot);
    let approval = blocking(slot, move || airlock_core::get_approval(&caller, &id)).await?;
    Ok(Json(approval).into_response())
}

pub async fn decide(
    authed: Authed,
    ApprovalId(id): ApprovalId,
    Body(body): Body<DecideRequest>,
) -> ApiResult<Response> {
    let (caller, slot) = (authed.caller, authed.slot);
    let approval = blocking(slot, move || {
        airlock_core::decide_approval(&caller, &id, &body)
    })
    .await?;
    Ok(Json(approval).into_response())
}
