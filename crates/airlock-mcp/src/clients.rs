//! Who a tool call comes from: on stdio, the one client of the person at the machine; over HTTP,
//! the request's token (each token a client of its own, whatever MCP session it speaks in).

use std::collections::HashMap;
use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use rmcp::service::RequestContext;
use rmcp::RoleServer;

use airlock_core::{Caller, Role};
use airlock_serve::error::ApiError;

use crate::host::{runner, Client, Runner, Standing, StdioConfig, TokenUse};

pub trait Clients: Send + Sync + 'static {
    /// The client a call comes from.
    fn client(&self, context: &RequestContext<RoleServer>) -> Result<Client, ApiError>;
}

/// The person at the machine, on stdio: one client, its caller and standing made once.
pub struct Local {
    caller: Caller,
    profile: String,
    workspace: PathBuf,
    standing: Arc<Standing>,
    pub runner: Arc<Runner>,
}

fn no_one_to_tell(_: &airlock_core::Session) {}

impl Local {
    pub fn new(config: StdioConfig) -> anyhow::Result<Local> {
        let mut caller = Caller::this_process(config.state_dir.clone(), no_one_to_tell);
        caller.role = Role::Agent;
        caller.asked = vec!["airlock mcp".into()];
        let workspace = match config.workspace {
            Some(dir) => dir,
            None => std::env::current_dir()
                .context("cannot tell this process's working directory: give --workspace DIR")?,
        };
        let workspace = workspace.canonicalize().with_context(|| {
            format!(
                "--workspace {}: no such directory (give the project the agent works on)",
                workspace.display()
            )
        })?;
        let standing = Arc::new(Standing::default());
        if let Some(session) = config.session {
            let summary = airlock_core::session_summary(&caller, &session)
                .with_context(|| format!("--session {session}"))?;
            *standing.session.try_lock()? = Some(summary.meta.id);
        }
        Ok(Local {
            runner: Arc::new(runner(&caller, config.keep_output)?),
            profile: config.profile.unwrap_or_else(|| "default".into()),
            caller,
            workspace,
            standing,
        })
    }
}

impl Clients for Local {
    fn client(&self, _: &RequestContext<RoleServer>) -> Result<Client, ApiError> {
        Ok(Client {
            caller: self.caller.clone(),
            profile: self.profile.clone(),
            workspace: Some(self.workspace.clone()),
            token: None,
            standing: self.standing.clone(),
            runner: self.runner.clone(),
        })
    }
}

/// A request's token, as the HTTP layer checked it (see [`crate::http`]).
#[derive(Clone)]
pub struct Authorized {
    pub caller: Caller,
    pub token: String,
}

/// Over HTTP: the token of each request is its client.
pub struct OverHttp {
    pub app: airlock_serve::app::Shared,
    pub runner: Arc<Runner>,
    standings: std::sync::Mutex<HashMap<String, Arc<Standing>>>,
}

impl OverHttp {
    pub fn new(app: airlock_serve::app::Shared) -> OverHttp {
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

    fn standing_of(&self, token: &str) -> Result<Arc<Standing>, ApiError> {
        let mut standings = self
            .standings
            .lock()
            .map_err(|_| ApiError::internal("the clients' table was lost — please report it"))?;
        Ok(standings.entry(token.to_string()).or_default().clone())
    }
}

impl Clients for OverHttp {
    fn client(&self, context: &RequestContext<RoleServer>) -> Result<Client, ApiError> {
        // Put there by the HTTP layer for every request it let through: none comes without.
        let authorized = context
            .extensions
            .get::<axum::http::request::Parts>()
            .and_then(|parts| parts.extensions.get::<Authorized>())
            .cloned()
            .ok_or_else(|| ApiError::internal("an MCP request without its token reached a tool"))?;
        let (app, id) = (self.app.clone(), authorized.token.clone());
        let valid = Arc::new(move || app.tokens.is_valid(&id));
        let (app, id) = (self.app.clone(), authorized.token.clone());
        let run_slot = Box::new(move || app.limiter.run_slot(&id));
        let (app, id) = (self.app.clone(), authorized.token.clone());
        let request_slot = Box::new(move || app.limiter.request_slot(&id));
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
