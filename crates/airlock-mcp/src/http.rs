//! The tools over MCP's Streamable HTTP transport, for `airlock serve` to mount at `/mcp` behind
//! its own check of each request's token (see airlock-serve's `mcp`): only what that check let
//! through reaches a tool, with the token's caller. No MCP session is kept: every request stands
//! alone.

use std::sync::Arc;

use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::{StreamableHttpServerConfig, StreamableHttpService};

use crate::clients::Clients;
use crate::tools::Airlock;

/// The router of `/mcp`, its clients told apart by `clients`.
pub fn router(clients: Arc<dyn Clients>, max_body: usize) -> axum::Router {
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
    axum::Router::new().nest_service("/mcp", service)
}
