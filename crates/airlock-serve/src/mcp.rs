//! `/mcp`: airlock's MCP tools (airlock-mcp) over HTTP. Every request's bearer token is checked as
//! every endpoint of the API checks it (401, 403, 429 with the API's error codes), and only an
//! agent's token opens it: the tools are an agent's. Each token is one client, whatever
//! connection its requests come in — its session, its started runs.

use std::collections::HashMap;
use std::sync::Arc;

use axum::extract::{FromRequestParts as _, Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use rmcp::service::RequestContext;
use rmcp::RoleServer;

use airlock_core::{Caller, Refusal, Role};
use airlock_mcp::{Client, Clients, Runner, Standing, TokenUse};

use crate::app::{Authed, Shared};
use crate::error::{ApiError, StatusCode};

/// The router of `/mcp`, merged into the API's.
pub fn router(app: Shared, max_body: usize) -> axum::Router {
    let clients = Arc::new(OverHttp::new(app.clone()));
    airlock_mcp::router(clients, max_body)
        .layer(axum::middleware::from_fn_with_state(app, authorize))
}

/// A request's token, as [`authorize`] checked it.
#[derive(Clone)]
struct Authorized {
    caller: Caller,
    token: String,
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

/// Over HTTP: the token of each request is its client.
struct OverHttp {
    app: Shared,
    runner: Arc<Runner>,
    standings: std::sync::Mutex<HashMap<String, Arc<Standing>>>,
}

impl OverHttp {
    fn new(app: Shared) -> OverHttp {
        let runner = Arc::new(Runner {
            exe: app.exe.clone(),
            results_dir: app.results_dir.clone(),
            jobs: app.jobs.clone(),
            keep_output: app.keep_output,
        });
        OverHttp {
            app,
            runner,
            standings: std::sync::Mutex::new(HashMap::new()),
        }
    }

    fn standing_of(&self, token: &str) -> Result<Arc<Standing>, Refusal> {
        let mut standings = self
            .standings
            .lock()
            .map_err(|_| Refusal::internal("the clients' table was lost — please report it"))?;
        Ok(standings.entry(token.to_string()).or_default().clone())
    }
}

impl Clients for OverHttp {
    fn client(&self, context: &RequestContext<RoleServer>) -> Result<Client, Refusal> {
        // Put there by `authorize` for every request it let through: none comes without.
        let authorized = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Authorized>())
            .cloned()
            .ok_or_else(|| Refusal::internal("an MCP request without its token reached a tool"))?;
        let (app, id) = (self.app.clone(), authorized.token.clone());
        let valid = Arc::new(move || app.tokens.is_valid(&id));
        let (app, id) = (self.app.clone(), authorized.token.clone());
        let run_slot = Box::new(move || app.limiter.try_run_slot(&id).map_err(Refusal::from));
        let (app, id) = (self.app.clone(), authorized.token.clone());
        let request_slot = Box::new(move || app.limiter.request_slot(&id).map_err(Refusal::from));
        Ok(Client {
            standing: self.standing_of(&authorized.token)?,
            caller: authorized.caller,
            profile: String::new(),
            workspace: None,
            token: Some(TokenUse {
                run_slot,
                request_slot,
                valid,
            }),
            runner: self.runner.clone(),
        })
    }
}
