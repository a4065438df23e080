//! The tools an agent gets: run (and start/poll for long commands), changes, log. No tool
//! applies, reverts, discards, kills or changes policy: the agent cannot approve its own changes.
//! Each tool asks core, with the client's caller; none checks a rule of its own.

use std::sync::Arc;
use std::time::Duration;

use rmcp::handler::server::common::schema_for_output;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock, Implementation, ServerCapabilities, ServerConfig};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, RoleServer, ServerHandler};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

use airlock_core::Refusal;

use crate::clients::Clients;
use crate::host::{Client, RunAsk};
use crate::runs::{self, Background, PollAnswer, Progress, RunResult};
use crate::text;

#[derive(Clone)]
pub struct Airlock {
    clients: Arc<dyn Clients>,
    tool_router: ToolRouter<Self>,
}

/// A command to run: a shell line or a program with its arguments.
#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct RunParams {
    /// A shell command line, run by /bin/sh -c in the sandbox (give this or argv).
    pub command: Option<String>,
    /// The program and its arguments, run as they are (give this or command).
    pub argv: Option<Vec<String>>,
    /// Text given to the command as its standard input (none: it reads end of file).
    pub stdin: Option<String>,
    /// Seconds: a time limit shorter than the profile's (it cannot be made longer).
    pub timeout: Option<f64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct PollParams {
    /// The run's id, as start answered it.
    pub run: String,
    /// Seconds to wait for output or the end when there is none yet (default 10, at most 60).
    pub wait: Option<f64>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct ChangesParams {
    /// Which page of changed files (from 1; each page lists up to 50 files with their patch).
    pub page: Option<usize>,
}

#[derive(Debug, Deserialize, JsonSchema)]
#[serde(deny_unknown_fields)]
pub struct LogParams {
    /// At most this many of the session's latest audit records (default 50, at most 1000).
    pub limit: Option<usize>,
}

/// What `start` answers.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Started {
    /// Give it to poll.
    pub run: String,
    pub session: String,
}

/// What `changes` answers.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Changes {
    /// The session, or null before the first run.
    pub session: Option<String>,
    /// Changed files on this page: path, status (added, modified, deleted…), hazards.
    pub files: Vec<serde_json::Value>,
    /// The git patch of this page's files (empty when too large to show here).
    pub patch: String,
    /// The directories git ignores (node_modules, .venv, …), one summary each: counts, the
    /// first executables and hazards. Their files are not in `files`: a person reviews each
    /// as one row and applies it whole or not at all.
    pub trees: Vec<serde_json::Value>,
    pub page: usize,
    pub pages: usize,
    pub review: String,
}

/// What `log` answers.
#[derive(Debug, Serialize, JsonSchema)]
pub struct Log {
    pub session: Option<String>,
    /// The session's audit records, oldest first: what was asked, refused, run, and its result.
    pub records: Vec<serde_json::Value>,
}

const INSTRUCTIONS: &str = "airlock runs your commands in a sandbox: a copy-on-write view of the \
workspace, as an unprivileged user, with only the network the profile allows. Use the run tool \
for every shell command. Files you change stay in your airlock session: a person reviews them \
(airlock diff) and applies them (airlock apply); you cannot apply them, and nothing you do here \
reaches the workspace before that. The changes tool shows what you changed; log shows what was \
recorded. For a command that may run longer than your tool timeout, use start and then poll.";

#[tool_router]
impl Airlock {
    pub fn new(clients: Arc<dyn Clients>) -> Self {
        Self {
            clients,
            tool_router: Self::tool_router(),
        }
    }

    /// Run a command in the sandbox and wait for its end.
    #[tool(
        description = "Run a shell command (or argv) in airlock's sandbox over the workspace and answer its exit status, stdout and stderr. File changes stay in this client's airlock session for a person to review and apply. Output comes as progress notifications when a progress token is given. For commands longer than your tool timeout use start and poll.",
        output_schema = schema_for_output::<RunResult>()
    )]
    async fn run(
        &self,
        Parameters(params): Parameters<RunParams>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let progress = context.meta.get_progress_token().map(|token| Progress {
            peer: context.peer.clone(),
            token,
        });
        let answer = async {
            let client = self.clients.client(&context)?;
            let ask = ask_of(&params)?;
            let (session, events, place) = start_in_session(&client, ask).await?;
            let result = runs::collect(events, progress, &session).await;
            drop(place);
            result
        };
        // A client that stops waiting says so (notifications/cancelled, or its connection gone):
        // the run's events are then dropped, which interrupts it, and it is recorded abandoned.
        let answer = tokio::select! {
            answer = answer => answer,
            () = context.ct.cancelled() => Err(cancelled()),
        };
        match answer {
            Ok(result) => structured(&result, text::run(&result)),
            Err(error) => refused(&error),
        }
    }

    /// Start a command in the background; poll collects its output and end.
    #[tool(
        description = "Start a shell command (or argv) in airlock's sandbox without waiting for it: answers a run id; call poll with it for the output and the end. Same sandbox and session as run.",
        output_schema = schema_for_output::<Started>()
    )]
    async fn start(
        &self,
        Parameters(params): Parameters<RunParams>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let answer = async {
            let client = self.clients.client(&context)?;
            let ask = ask_of(&params)?;
            let (session, events, place) = start_in_session(&client, ask).await?;
            let run = Background::follow(session.clone(), events, place);
            let id = client.remember(run).await;
            Ok::<_, Refusal>(Started { run: id, session })
        };
        match answer.await {
            Ok(started) => {
                let text = format!(
                    "Started run {} in airlock session {}: call poll with run \"{}\" for its output and end.",
                    started.run, started.session, started.run
                );
                structured(&started, text)
            }
            Err(error) => refused(&error),
        }
    }

    /// Output since the last poll of a started run, and its result once it ended.
    #[tool(
        description = "Wait a little (default 10 s) for a started run: answers its output since the last poll, and its exit status once it has ended.",
        output_schema = schema_for_output::<PollAnswer>()
    )]
    async fn poll(
        &self,
        Parameters(params): Parameters<PollParams>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let wait = params.wait.unwrap_or(10.0);
        let wait = if wait.is_finite() {
            Duration::from_secs_f64(wait.clamp(0.0, 60.0))
        } else {
            Duration::from_secs(10)
        };
        let answer = async {
            let client = self.clients.client(&context)?;
            client.poll(&params.run, wait).await
        };
        match answer.await {
            Ok(answer) => {
                let text = text::poll(&answer);
                structured(&answer, text)
            }
            Err(error) => refused(&error),
        }
    }

    /// The session's changes: which files, their hazards, and the patch.
    #[tool(
        description = "Show what your commands changed in this client's airlock session: the changed files (with hazards such as executable bits, git hooks or tool configuration) and their git patch, 50 files a page. A person reviews and applies them; you cannot.",
        output_schema = schema_for_output::<Changes>()
    )]
    async fn changes(
        &self,
        Parameters(params): Parameters<ChangesParams>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let answer = async {
            let client = self.clients.client(&context)?;
            crate::review::changes(&client, params.page.unwrap_or(1)).await
        };
        match answer.await {
            Ok(changes) => {
                let text = text::changes(&changes);
                structured(&changes, text)
            }
            Err(error) => refused(&error),
        }
    }

    /// The session's audit records.
    #[tool(
        description = "Show the audit log of this client's airlock session: every command asked for, refused or run, and how it ended.",
        output_schema = schema_for_output::<Log>()
    )]
    async fn log(
        &self,
        Parameters(params): Parameters<LogParams>,
        context: RequestContext<RoleServer>,
    ) -> CallToolResult {
        let limit = params.limit.unwrap_or(50).clamp(1, 1000);
        let answer = async {
            let client = self.clients.client(&context)?;
            crate::review::log(&client, limit).await
        };
        match answer.await {
            Ok(log) => {
                let text = text::log(&log);
                structured(&log, text)
            }
            Err(error) => refused(&error),
        }
    }
}

/// Start the run in the client's session; a session a person applied or discarded meanwhile is
/// followed by a new one.
async fn start_in_session(
    client: &Client,
    ask: RunAsk,
) -> Result<
    (
        String,
        tokio::sync::mpsc::Receiver<airlock_runner::JobEvent>,
        tokio::sync::OwnedSemaphorePermit,
    ),
    Refusal,
> {
    let session = client.session().await?;
    let session = match client.check(&session, &ask).await {
        Err(e) if e.code == "session_applied" || e.code == "session_discarded" => {
            client.session_after(&session).await?
        }
        Err(e) => return Err(e),
        Ok(()) => session,
    };
    let (events, place) = client.start(&session, ask)?;
    Ok((session, events, place))
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Airlock {
    fn get_info(&self) -> ServerConfig {
        ServerConfig::new(ServerCapabilities::builder().enable_tools().build())
            .with_server_info(Implementation::new("airlock", env!("CARGO_PKG_VERSION")))
            .with_instructions(INSTRUCTIONS)
    }
}

fn ask_of(params: &RunParams) -> Result<RunAsk, Refusal> {
    Ok(RunAsk {
        argv: airlock_core::command_argv(params.command.as_deref(), params.argv.as_deref())
            .map_err(airlock_core::Error::from)?,
        stdin: params.stdin.clone(),
        timeout_ms: airlock_core::timeout_ms(params.timeout).map_err(airlock_core::Error::from)?,
    })
}

fn cancelled() -> Refusal {
    Refusal::new(
        airlock_core::ErrorKind::Cancelled,
        "cancelled",
        "the client cancelled the call: the command was interrupted, then killed",
    )
}

/// A tool's answer: its structured content, and a text for the model to read.
fn structured(value: &impl Serialize, text: String) -> CallToolResult {
    let mut result = CallToolResult::success(vec![ContentBlock::text(text)]);
    result.structured_content = serde_json::to_value(value).ok();
    result
}

/// A refusal, as a tool error the model reads: what was refused, why, and the stable code.
fn refused(error: &Refusal) -> CallToolResult {
    CallToolResult::error(vec![ContentBlock::text(format!(
        "airlock refused: {} ({})",
        error.message, error.code
    ))])
}

#[cfg(test)]
mod tests {
    /// The agent side gets no door to approvals: no tool lists or answers them (an operator
    /// answers, through the CLI or the API with an operator token).
    #[test]
    fn no_tool_lists_or_answers_approvals() {
        let tools: Vec<String> = super::Airlock::tool_router()
            .list_all()
            .into_iter()
            .map(|tool| tool.name.to_string())
            .collect();
        assert!(tools.len() >= 4, "{tools:?}");
        for tool in &tools {
            assert!(
                !tool.contains("approv") && !tool.contains("decide") && !tool.contains("allow"),
                "{tool}"
            );
        }
        assert_eq!(
            tools.iter().collect::<std::collections::BTreeSet<_>>(),
            ["changes", "log", "poll", "run", "start"]
                .iter()
                .map(|s| s.to_string())
                .collect::<Vec<_>>()
                .iter()
                .collect(),
            "a new tool: make sure an agent cannot answer an approval with it, then list it here"
        );
    }
}
