//! Runs for airlock's multi-threaded front ends. A run forks its sandbox, which a threaded
//! process must not do: each is carried out by a fresh `airlock __serve-worker` process
//! (single-threaded, as `airlock run` is) that calls core exactly as the CLI does. `airlock
//! serve`, `airlock mcp` and the agent-sandbox runtime start their runs here, and pass on what
//! comes back in their own terms; none of them decides anything about a run.
#![forbid(unsafe_code)]

mod files;
pub mod job;
pub mod jobs;
pub mod pool;
mod warm;
pub mod worker;

pub use job::{Job, WorkerReport, JOB_VAR};
pub use jobs::{
    collect, collect_bytes, execute, result_of, results_dir, Input, JobEnd, JobEvent, Jobs, Launch,
    Recorder, Stream,
};
