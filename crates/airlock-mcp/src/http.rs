//! `/mcp` on `airlock serve`: the same tools over MCP's Streamable HTTP transport. Every request's
//! bearer token is checked as every endpoint of the API checks it (401, 403, 429 with the API's
//! error codes), and only an agent's token opens it: the tools are an agent's. Each token is one
//! client, whatever MCP session its requests come in — its session, its started runs.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};

use axum::extract::{FromRequestParts as _, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::transport::streamable_http_server::session::local::LocalSessionManager;
use rmcp::transport::streamable_http_server::session::SessionManager as _;
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
    let manager = Arc::new(LocalSessionManager::default());
    let service = StreamableHttpService::new(
        move || Ok(Airlock::new(clients.clone())),
        manager.clone(),
        config,
    );
    let gate = Arc::new(Gate {
        app,
        sessions: Sessions {
            manager,
            owners: Mutex::new(Owners::default()),
        },
    });
    axum::Router::new()
        .nest_service("/mcp", service)
        .layer(axum::middleware::from_fn_with_state(gate, authorize))
}

/// MCP sessions a token keeps at once; its next initialize closes its oldest. Each is a task,
/// channels and a service kept through five minutes of silence: unbounded, one token at its
/// request rate could keep tens of thousands.
const SESSIONS_PER_TOKEN: usize = 16;

struct Gate {
    app: Shared,
    sessions: Sessions,
}

/// Which token made each MCP session: a session answers its own token's requests only (its
/// stream, its requests' cancellation and their output are that token's).
struct Sessions {
    manager: Arc<LocalSessionManager>,
    owners: Mutex<Owners>,
}

#[derive(Default)]
struct Owners {
    token_of: HashMap<String, String>,
    /// Each token's sessions, oldest first.
    of_token: HashMap<String, VecDeque<String>>,
}

impl Sessions {
    /// Whether `token` may speak in the MCP session `id`: only in one it made.
    fn belongs(&self, id: &str, token: &str) -> bool {
        self.owners
            .lock()
            .is_ok_and(|owners| owners.token_of.get(id).is_some_and(|t| t == token))
    }

    /// Record the session `id` as `token`'s; close its oldest past [`SESSIONS_PER_TOKEN`].
    async fn made(&self, id: &str, token: &str) {
        let oldest = {
            let Ok(mut owners) = self.owners.lock() else {
                return;
            };
            owners.token_of.insert(id.to_string(), token.to_string());
            let mine = owners.of_token.entry(token.to_string()).or_default();
            mine.push_back(id.to_string());
            let oldest = (mine.len() > SESSIONS_PER_TOKEN).then(|| mine.pop_front());
            let oldest = oldest.flatten();
            if let Some(oldest) = &oldest {
                owners.token_of.remove(oldest);
            }
            oldest
        };
        if let Some(oldest) = oldest {
            // One already ended (its client's DELETE, its silence) is closed already.
            let _ = self.manager.close_session(&Arc::from(oldest)).await;
        }
    }
}

const SESSION_HEADER: &str = "mcp-session-id";

fn session_of(headers: &axum::http::HeaderMap) -> Option<String> {
    headers
        .get(SESSION_HEADER)
        .and_then(|v| v.to_str().ok())
        .map(str::to_string)
}

fn no_such_session() -> Response {
    ApiError::new(
        StatusCode::NOT_FOUND,
        "mcp_session_not_found",
        "no such MCP session for this token (each token speaks in the sessions it initialized): initialize a new one",
    )
    .into_response()
}

/// Let a request through with its token's caller in its extensions, or answer the refusal.
async fn authorize(State(gate): State<Arc<Gate>>, request: Request, next: Next) -> Response {
    let app = &gate.app;
    let (mut parts, body) = request.into_parts();
    let authed = match Authed::from_request_parts(&mut parts, app).await {
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
    let asked_in = session_of(&parts.headers);
    if let Some(id) = &asked_in {
        if !gate.sessions.belongs(id, &authed.token.id) {
            return no_such_session();
        }
    }
    parts.extensions.insert(Authorized {
        token: authed.token.id.clone(),
        caller: authed.caller,
    });
    let response = next.run(Request::from_parts(parts, body)).await;
    if asked_in.is_none() {
        if let Some(made) = session_of(response.headers()) {
            gate.sessions.made(&made, &authed.token.id).await;
        }
    }
    // The token's place for a request in progress is held until the answer's head is out.
    drop(authed.slot);
    response
}
