//! sandboxd, the runtime agent-sandbox's client prefers inside a cluster: its gRPC
//! `ProcessService` and its REST files API, each on a port of its own beside airlock's API
//! (`airlock serve --agent-sandbox --sandboxd-rest ADDR --sandboxd-grpc ADDR`). Every request is
//! a run in the pod's session, as the legacy runtime's are (see `routes::pod`).
//!
//! Each port takes at most [`CONNECTIONS_PER_PORT`] connections at once (a flood of them leaves
//! airlock's own API its places and the process its descriptors); REST's requests are read as the
//! API's are (HTTP/1.1, a request's head within 30 s), gRPC's within the limits of `grpc`.

mod grpc;
mod rest;

use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context as TaskContext, Poll};
use std::time::{Duration, Instant};

use anyhow::{Context, Result};
use hyper_util::service::TowerToHyperService;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::app::Shared;
use crate::browser::Transport;

/// Connections each sandboxd port serves at once.
const CONNECTIONS_PER_PORT: usize = 128;

/// Where sandboxd's two services listen (either may be left out).
#[derive(Debug, Clone, Default)]
pub struct SandboxdPorts {
    pub rest: Option<SocketAddr>,
    pub grpc: Option<SocketAddr>,
}

/// sandboxd's services, serving until told to stop.
pub struct Served {
    stop: tokio::sync::watch::Sender<bool>,
}

impl Served {
    /// No new connection or call is taken; a call being answered goes on, as the API's do.
    pub fn stop(self) {
        let _ = self.stop.send(true);
    }
}

/// A stop as a future: what the accept loops and gRPC's server wait for beside their work.
async fn stopped(mut stop: tokio::sync::watch::Receiver<bool>) {
    let _ = stop.wait_for(|stopped| *stopped).await;
}

/// Bind both services now (an address taken stops the server at once, with its reason), then
/// serve them on tasks of their own.
pub async fn start(app: &Shared, ports: &SandboxdPorts, max_body: usize) -> Result<Served> {
    let (stop, told) = tokio::sync::watch::channel(false);
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
        tokio::spawn(serve_rest(listener, router, told.clone()));
    }
    if let Some(addr) = ports.grpc {
        let listener = TcpListener::bind(addr)
            .await
            .with_context(|| format!("--sandboxd-grpc: cannot listen on {addr}"))?;
        say(&format!("sandboxd's ProcessService (gRPC) on {addr}"));
        tokio::spawn(grpc::serve(app.clone(), listener, told.clone()));
    }
    Ok(Served { stop })
}

/// REST's connections, each served as the API's are, until `stop`.
async fn serve_rest(
    listener: TcpListener,
    router: axum::Router,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let places = Arc::new(Semaphore::new(CONNECTIONS_PER_PORT));
    let graceful = hyper_util::server::graceful::GracefulShutdown::new();
    loop {
        let accepted = tokio::select! {
            accepted = accept(&listener, &places) => accepted,
            _ = stopped(stop.clone()) => return,
        };
        let Some(stream) = accepted else {
            tokio::time::sleep(Duration::from_millis(10)).await;
            continue;
        };
        let service = TowerToHyperService::new(router.clone());
        tokio::spawn(crate::server::serve_connection(
            stream,
            service,
            graceful.watcher(),
        ));
    }
}

/// The next connection, once one of the port's places is free (None: accept failed).
async fn accept(listener: &TcpListener, places: &Arc<Semaphore>) -> Option<Held> {
    let place = places.clone().acquire_owned().await.ok()?;
    let (stream, _) = listener.accept().await.ok()?;
    Some(Held {
        stream,
        _place: place,
    })
}

/// A connection holding one of its port's places until it is dropped.
pub(crate) struct Held {
    stream: TcpStream,
    _place: OwnedSemaphorePermit,
}

impl Held {
    /// Once the peer has sent something (or closed): a byte looked at, not taken.
    async fn sent_something(&self) -> std::io::Result<()> {
        let mut first = [0u8; 1];
        self.stream.peek(&mut first).await.map(drop)
    }
}

impl AsyncRead for Held {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for Held {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut TaskContext<'_>,
        buf: &[u8],
    ) -> Poll<std::io::Result<usize>> {
        Pin::new(&mut self.get_mut().stream).poll_write(cx, buf)
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut TaskContext<'_>) -> Poll<std::io::Result<()>> {
        Pin::new(&mut self.get_mut().stream).poll_shutdown(cx)
    }
}

impl tonic::transport::server::Connected for Held {
    type ConnectInfo = tonic::transport::server::TcpConnectInfo;

    fn connect_info(&self) -> Self::ConnectInfo {
        self.stream.connect_info()
    }
}

fn say(line: &str) {
    use std::io::Write as _;
    let _ = writeln!(std::io::stderr(), "airlock: {line}");
}
