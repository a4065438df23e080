//! sandboxd, the runtime agent-sandbox's client prefers inside a cluster: its gRPC
//! `ProcessService` and its REST files API, each on a port of its own beside airlock's API
//! (`airlock serve --agent-sandbox --sandboxd-rest ADDR --sandboxd-grpc ADDR`). Every request is
//! a run in the pod's session, as the legacy runtime's are (see `routes::pod`).

mod grpc;
mod rest;

use std::net::SocketAddr;
use std::time::Instant;

use anyhow::{Context, Result};
use tokio::net::TcpListener;
use tokio::task::JoinHandle;

use crate::app::Shared;
use crate::browser::Transport;

/// Where sandboxd's two services listen (either may be left out).
#[derive(Debug, Clone, Default)]
pub struct SandboxdPorts {
    pub rest: Option<SocketAddr>,
    pub grpc: Option<SocketAddr>,
}

/// Bind both services now (an address taken stops the server at once, with its reason), then
/// serve them on tasks of their own, ended with the server.
pub async fn start(
    app: &Shared,
    ports: &SandboxdPorts,
    max_body: usize,
) -> Result<Vec<JoinHandle<()>>> {
    let mut tasks = Vec::new();
    if let Some(addr) = ports.rest {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("--sandboxd-rest: cannot listen on {addr}"))?;
        let router = rest::router(app.clone(), max_body, Instant::now())
            .layer(axum::middleware::from_fn_with_state(
                app.clone(),
                crate::browser::guard,
            ))
            .layer(axum::Extension(Transport::Tcp { tls: false }));
        say(&format!("sandboxd's files API on http://{addr}"));
        tasks.push(tokio::spawn(async move {
            if let Err(why) = axum::serve(listener, router).await {
                say(&format!("sandboxd's files API stopped: {why}"));
            }
        }));
    }
    if let Some(addr) = ports.grpc {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("--sandboxd-grpc: cannot listen on {addr}"))?;
        let service = grpc::service(app.clone());
        say(&format!("sandboxd's ProcessService (gRPC) on {addr}"));
        tasks.push(tokio::spawn(async move {
            let incoming = tonic::transport::server::TcpIncoming::from(listener);
            let served = tonic::transport::Server::builder()
                .add_service(service)
                .serve_with_incoming(incoming)
                .await;
            if let Err(why) = served {
                say(&format!("sandboxd's ProcessService stopped: {why}"));
            }
        }));
    }
    Ok(tasks)
}

fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "airlock: {line}");
}
