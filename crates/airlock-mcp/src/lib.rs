//! `airlock mcp`: airlock as a Model Context Protocol server. An agent's client (Claude Code,
//! Codex, n8n's MCP Client, any MCP SDK) gets tools to run commands in airlock's sandbox over the
//! workspace — in one session of its own, made at its first run — and to see what they changed
//! and what the audit log holds. No tool applies, reverts, discards, kills or changes policy: a
//! person reviews and applies. Every decision is core's; runs are carried out by
//! airlock-runner's workers, so that no sandbox is forked from this multi-threaded process.
#![forbid(unsafe_code)]

mod clients;
mod host;
mod http;
mod review;
mod runs;
mod text;
mod tools;

use std::sync::Arc;
use std::time::Duration;

use anyhow::Context as _;
use rmcp::ServiceExt as _;

pub use clients::Clients;
pub use host::{Client, Runner, Standing, StdioConfig, TokenUse};
pub use http::router;

/// How long runs still going when the client goes away get to end, once interrupted, before
/// this process exits (their sandboxes die with it in any case: the workers' parent-death signal).
const RUNS_END_WITHIN: Duration = Duration::from_secs(3);

/// Serve one client on stdin and stdout until it closes them.
pub fn serve_stdio(config: StdioConfig) -> anyhow::Result<()> {
    let local = clients::Local::new(config)?;
    let runner = local.runner.clone();
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .context("cannot start the MCP server's runtime")?;
    runtime.block_on(async {
        let service = tools::Airlock::new(Arc::new(local))
            .serve(rmcp::transport::stdio())
            .await
            .context("the MCP client did not start the session")?;
        let _ = service.waiting().await;
        // The client is gone: what it started is interrupted, and recorded as abandoned.
        runner.jobs.close_and_interrupt();
        let deadline = tokio::time::Instant::now() + RUNS_END_WITHIN;
        while runner.jobs.count() > 0 && tokio::time::Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        Ok(())
    })
}
