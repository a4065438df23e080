//! Who a tool call comes from: on stdio, the one client of the person at the machine; over HTTP,
//! the request's token (each token a client of its own, whatever MCP session it speaks in).

use std::path::PathBuf;
use std::sync::Arc;

use anyhow::Context as _;
use rmcp::service::RequestContext;
use rmcp::RoleServer;

use airlock_core::Refusal;
use airlock_core::{Caller, Role};

use crate::host::{runner, Client, Runner, Standing, StdioConfig};

pub trait Clients: Send + Sync + 'static {
    /// The client a call comes from.
    fn client(&self, context: &RequestContext<RoleServer>) -> Result<Client, Refusal>;
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
            profile: config
                .profile
                .unwrap_or_else(|| airlock_core::DEFAULT_PROFILE_NAME.into()),
            caller,
            workspace,
            standing,
        })
    }
}

impl Clients for Local {
    fn client(&self, _: &RequestContext<RoleServer>) -> Result<Client, Refusal> {
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
