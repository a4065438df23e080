//! `airlock serve`: airlock as an HTTP service, with a token per automation. Every request's
//! token is checked by core, which takes every decision for it as it does for the CLI; runs are
//! carried out by worker processes (see [`airlock_runner`]), so that a sandbox is never forked
//! from this multi-threaded server. `/mcp` is airlock's MCP server (airlock-mcp) over HTTP.
#![forbid(unsafe_code)]

mod activation;
pub mod app;
mod browser;
pub mod error;
mod limits;
mod listen;
mod mcp;
mod page;
mod routes;
mod sandboxd;
mod server;

pub use limits::Quotas;
pub use listen::{Listen, TlsFiles};
pub use routes::OPENAPI;
pub use sandboxd::SandboxdPorts;
pub use server::{serve, ServeConfig};
