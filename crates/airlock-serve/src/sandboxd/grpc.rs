//! sandboxd's `process.v1.ProcessService`, as agent-sandbox's client calls it: `Execute`, a
//! command run whole, each a run in the pod's session. The streaming calls (`Start` and what
//! drives a started process) are not served: the client uses none of them.

use std::pin::Pin;
use std::time::Duration;

use airlock_core::pod_runtime::{output_cut_note, timed_out};
use airlock_core::RunResult;
use airlock_runner::Input;
use axum::http::StatusCode;
use tonic::{Code, Request, Response, Status};

use crate::app::Shared;
use crate::error::ApiError;
use crate::routes::pod::{admit, start};
use crate::routes::runs::Started;

/// The code compiled from the contract (build.rs).
#[allow(
    clippy::all,
    clippy::pedantic,
    clippy::unwrap_used,
    clippy::expect_used
)]
pub mod process {
    tonic::include_proto!("process.v1");
}

use process::process_service_server::{ProcessService, ProcessServiceServer};
use process::{
    ExecuteRequest, ExecuteResponse, ResizeTtyRequest, ResizeTtyResponse, SendSignalRequest,
    SendSignalResponse, StartRequest, StartResponse, WriteStdinRequest, WriteStdinResponse,
};

pub struct Process {
    app: Shared,
}

/// The largest call taken: a command line is at most 64 KiB (`MAX_COMMAND_BYTES`), its
/// variables a little more.
const MAX_MESSAGE: usize = 256 << 10;
/// Calls one connection may have going at once (each is a run: the pod's run places bound them
/// again).
const STREAMS_PER_CONNECTION: u32 = 16;

/// Serve `ProcessService` on `listener` until `stop`, each connection holding one of the port's
/// places, within HTTP/2 limits that keep one client from holding the server's memory.
pub(super) async fn serve(
    app: Shared,
    listener: tokio::net::TcpListener,
    stop: tokio::sync::watch::Receiver<bool>,
) {
    let places = std::sync::Arc::new(tokio::sync::Semaphore::new(super::CONNECTIONS_PER_PORT));
    // tonic waits for a connection's first bytes without a limit: a connection is handed to it
    // only once it has sent some, within FIRST_BYTES (a silent one gives its place back).
    let (ready, incoming) = tokio::sync::mpsc::channel::<super::Held>(16);
    let accepting = tokio::spawn(async move {
        loop {
            let Some(held) = super::accept(&listener, &places).await else {
                tokio::time::sleep(Duration::from_millis(10)).await;
                continue;
            };
            let ready = ready.clone();
            tokio::spawn(async move {
                if let Ok(Ok(())) = tokio::time::timeout(FIRST_BYTES, held.sent_something()).await {
                    let _ = ready.send(held).await;
                }
            });
        }
    });
    let incoming = futures_util::stream::unfold(incoming, |mut incoming| async {
        let held = incoming.recv().await?;
        Some((Ok::<_, std::io::Error>(held), incoming))
    });
    let service = ProcessServiceServer::new(Process { app }).max_decoding_message_size(MAX_MESSAGE);
    let served = tonic::transport::Server::builder()
        .max_concurrent_streams(Some(STREAMS_PER_CONNECTION))
        .concurrency_limit_per_connection(STREAMS_PER_CONNECTION as usize)
        .http2_max_local_error_reset_streams(Some(1024))
        .http2_max_pending_accept_reset_streams(Some(20))
        .http2_keepalive_interval(Some(Duration::from_secs(30)))
        .http2_keepalive_timeout(Some(Duration::from_secs(20)))
        .add_service(service)
        .serve_with_incoming_shutdown(Box::pin(incoming), super::stopped(stop))
        .await;
    accepting.abort();
    if let Err(why) = served {
        super::say(&format!("sandboxd's ProcessService stopped: {why}"));
    }
}

/// How long a new connection has to send its first bytes (HTTP/2's preface).
const FIRST_BYTES: Duration = Duration::from_secs(10);

/// What an answer may carry: the client reads at most 4 MiB (grpcio's default), and the rest of
/// the message needs a little room.
const MAX_ANSWER_OUTPUT: usize = (4 << 20) - (64 << 10);

type StartStream =
    Pin<Box<dyn futures_util::Stream<Item = Result<StartResponse, Status>> + Send + 'static>>;

fn not_served(what: &str) -> Status {
    Status::unimplemented(format!(
        "airlock's runtime runs commands whole (Execute); {what} is not served"
    ))
}

#[tonic::async_trait]
impl ProcessService for Process {
    type StartStream = StartStream;

    async fn start(&self, _: Request<StartRequest>) -> Result<Response<StartStream>, Status> {
        Err(not_served("Start"))
    }

    async fn execute(
        &self,
        request: Request<ExecuteRequest>,
    ) -> Result<Response<ExecuteResponse>, Status> {
        let deadline = request
            .metadata()
            .get("grpc-timeout")
            .and_then(|value| value.to_str().ok())
            .and_then(grpc_timeout);
        let config = request
            .into_inner()
            .config
            .ok_or_else(|| Status::invalid_argument("config is required"))?;
        if config.command.is_empty() {
            return Err(Status::invalid_argument(
                "config.command is empty: give the program and its arguments",
            ));
        }
        let (pod, admitted) = admit(&self.app, "gRPC process.v1.ProcessService/Execute".into())
            .await
            .map_err(status_of)?;
        let run = pod
            .binding
            .program(
                &admitted.session,
                config.command,
                config.env_vars.into_iter().collect(),
                config.cwd.as_deref(),
                deadline.map(|limit| run_limit(limit).as_secs_f64()),
            )
            .map_err(|e| status_of(e.into()))?;
        let Started { mut events, slot } = start(&self.app, &pod, admitted, run, Input::Nothing)
            .await
            .map_err(status_of)?;
        let (result, stdout, stderr) = airlock_runner::collect_bytes(&mut events)
            .await
            .map_err(|refusal| status_of(refusal.into()))?;
        drop(slot);
        if timed_out(&result) && deadline.is_some() {
            // As sandboxd ends a command at its caller's deadline.
            return Err(Status::deadline_exceeded(
                "the command ran past the call's deadline and was ended",
            ));
        }
        let (stdout, stderr) = fitted(&result, stdout, stderr);
        Ok(Response::new(ExecuteResponse {
            exit_code: result.end.exit_code,
            stdout,
            stderr,
        }))
    }

    async fn write_stdin(
        &self,
        _: Request<WriteStdinRequest>,
    ) -> Result<Response<WriteStdinResponse>, Status> {
        Err(not_served("WriteStdin"))
    }

    async fn send_signal(
        &self,
        _: Request<SendSignalRequest>,
    ) -> Result<Response<SendSignalResponse>, Status> {
        Err(not_served("SendSignal"))
    }

    async fn resize_tty(
        &self,
        _: Request<ResizeTtyRequest>,
    ) -> Result<Response<ResizeTtyResponse>, Status> {
        Err(not_served("ResizeTTY"))
    }
}

/// The output as an answer may carry it: at most [`MAX_ANSWER_OUTPUT`] (stderr keeps up to half
/// of it), the note of what was cut, by the limits or here, at stderr's end.
fn fitted(result: &RunResult, mut stdout: Vec<u8>, mut stderr: Vec<u8>) -> (Vec<u8>, Vec<u8>) {
    let too_long = stdout.len() + stderr.len() > MAX_ANSWER_OUTPUT;
    if too_long {
        stdout.truncate(MAX_ANSWER_OUTPUT - stderr.len().min(MAX_ANSWER_OUTPUT / 2));
        stderr.truncate(MAX_ANSWER_OUTPUT - stdout.len());
    }
    let note = output_cut_note(result).or(too_long.then_some(ANSWER_CUT_NOTE));
    if let Some(note) = note {
        stderr.extend_from_slice(note.as_bytes());
    }
    (stdout, stderr)
}

const ANSWER_CUT_NOTE: &str =
    "\nairlock: the command's output was cut short (a gRPC answer carries at most 4 MiB)\n";

/// A refusal as a gRPC status: its kind as the nearest code, airlock's code and message in the
/// details (the client shows them).
fn status_of(error: ApiError) -> Status {
    let code = match error.status {
        StatusCode::BAD_REQUEST | StatusCode::PAYLOAD_TOO_LARGE => Code::InvalidArgument,
        StatusCode::UNAUTHORIZED => Code::Unauthenticated,
        StatusCode::FORBIDDEN => Code::PermissionDenied,
        StatusCode::NOT_FOUND => Code::NotFound,
        StatusCode::CONFLICT => Code::FailedPrecondition,
        StatusCode::TOO_MANY_REQUESTS => Code::ResourceExhausted,
        StatusCode::REQUEST_TIMEOUT => Code::Cancelled,
        StatusCode::SERVICE_UNAVAILABLE => Code::Unavailable,
        _ => Code::Internal,
    };
    Status::new(code, format!("{}: {}", error.code, error.message))
}

/// The time a command may run within a call's deadline: the deadline less the time to end it and
/// answer (a fifth of it, at most 250 ms). tonic ends a call at its deadline itself, answering
/// CANCELLED, which the client does not take for a timeout: the run must end first, so that the
/// answer is DEADLINE_EXCEEDED (found when a loaded machine lost that race).
fn run_limit(deadline: Duration) -> Duration {
    const ANSWER_MARGIN: Duration = Duration::from_millis(250);
    deadline.saturating_sub(ANSWER_MARGIN.min(deadline / 5))
}

/// The `grpc-timeout` header: an amount of at most 8 digits and its unit (H, M, S, m, u, n).
fn grpc_timeout(text: &str) -> Option<Duration> {
    let (digits, unit) = text.split_at(text.len().checked_sub(1)?);
    if digits.is_empty() || digits.len() > 8 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let amount: u64 = digits.parse().ok()?;
    Some(match unit {
        "H" => Duration::from_secs(amount * 3600),
        "M" => Duration::from_secs(amount * 60),
        "S" => Duration::from_secs(amount),
        "m" => Duration::from_millis(amount),
        "u" => Duration::from_micros(amount),
        "n" => Duration::from_nanos(amount),
        _ => return None,
    })
    .filter(|limit| !limit.is_zero())
    // A deadline past any run's is none: the profile's limit holds.
    .filter(|limit| *limit < Duration::from_secs(30 * 24 * 3600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_command_ends_before_its_calls_deadline() {
        assert_eq!(
            run_limit(Duration::from_secs(1)),
            Duration::from_millis(800)
        );
        assert_eq!(
            run_limit(Duration::from_secs(60)),
            Duration::from_millis(59_750)
        );
        assert_eq!(run_limit(Duration::ZERO), Duration::ZERO);
    }

    #[test]
    fn a_deadline_is_read_as_grpc_writes_it() {
        assert_eq!(grpc_timeout("59999m"), Some(Duration::from_millis(59_999)));
        assert_eq!(grpc_timeout("5S"), Some(Duration::from_secs(5)));
        assert_eq!(grpc_timeout("2H"), Some(Duration::from_secs(7200)));
        for bad in ["", "S", "123456789S", "5s", "-5S", "0m", "5"] {
            assert_eq!(grpc_timeout(bad), None, "{bad}");
        }
    }
}
