//! `/mcp` on `airlock serve`: the same tools over MCP's Streamable HTTP transport. Every request's
//! bearer token is checked as every endpoint of the API checks it (401, 403, 429 with the API's
//! error codes), and only an agent's token opens it: the tools are an agent's. Each token is one
//! client, whatever connection its requests come in — its session, its started runs. No MCP
//! session is kept: every request stands alone.

use std::sync::Arc;

use axum::extract::{FromRequestParts as _, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use airlock_core::Role;
use airlock_serve::app::{Authed, Shared};
use airlock_serve::error::{ApiError, StatusCode};

use crate::clients::{Authorized, OverHttp};
use crate::tools::Airlock;

/// The router of `/mcp`, for `airlock serve` to merge into its own.
pub fn router(app: Shared, max_body: usize) -> axum::Router {
    let clients = Arc::new(OverHttp::new(app.clone()));
    let mut config = StreamableHttpServerConfig::default();
    config.max_request_body_bytes = max_body;
    // The Host check guards servers that answer whoever reaches them (a page's DNS rebinding
    // would reach a local one); every request here needs a token, which such a page does not
    // have, and a server behind TLS answers to names this one is not told.
    config.allowed_hosts.clear();
    // Every request stands alone, in every revision: a client's state here is its token's, not
    // an MCP session's, and a request whose client went away (its connection closed: a timeout,
    // a crash) then cancels its call, which interrupts the call's run. Sessions would keep the
    // call going for a resumption, and keep per-client state in memory for a token to multiply.
    config.legacy_session_mode = false;
    // No session is made (see above): the manager only carries each request's own.
    let service = StreamableHttpService::new(
        move || Ok(Airlock::new(clients.clone())),
        Arc::new(LocalSessionManager::default()),
        config,
    );
    axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(app, authorize))
}

/// Let a request through with its token's caller in its extensions, or answer the refusal.
async fn authorize(State(app): State<Shared>, request: Request, next: Next) -> Response {
    let (mut parts, body) = request.into_parts();
    let authed = match Authed::from_request_parts(&mut parts, &app).await {
        Ok(authed) => authed,
        Err(refused) => return refused.into_response(),
    };
    if authed.token.role != Role::Agent {
        return ApiError::new(
            StatusCode::FORBIDDEN,
            "role_forbidden",
            "/mcp is for agent tokens (its tools are an agent's): make one with airlock token create --role agent --workspace DIR",
        )
        .into_response();
    }
    parts.extensions.insert(Authorized {
        token: authed.token.id.clone(),
        caller: authed.caller,
    });
    let response = next.run(Request::from_parts(parts, body)).await;
    // The token's place for a request in progress is held until the answer's head is out.
    drop(authed.slot);
    response
}
