//! Runs: in a session or throwaway; answered once the run ends, or streamed as NDJSON (output as
//! it comes, then the result).

use std::convert::Infallible;
use std::path::PathBuf;
use std::sync::Arc;

use airlock_core::{RunBody, RunEvent};
use axum::body::Body as HttpBody;
use axum::extract::State;
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::Json;
use bytes::Bytes;
use tokio::sync::mpsc;

use super::{Body, SessionId};
use crate::app::{blocking, Authed, Shared};
use crate::error::{ApiError, ApiResult};
use airlock_runner::{Job, JobEvent, Launch, Stream};

/// The job for the worker, from the request and the token: the binding is core's to judge.
fn job_of(
    authed: &Authed,
    app: &Shared,
    body: &RunBody,
    session: Option<String>,
    asked: String,
) -> Result<Job, ApiError> {
    let grant = authed
        .caller
        .grant
        .clone()
        .ok_or_else(|| ApiError::internal("a request without a token reached a run"))?;
    Ok(Job {
        state_dir: app.service.state_dir.clone(),
        role: authed.caller.role,
        way: authed.caller.way,
        token: Some(grant.token),
        profile: grant.profile,
        workspace: grant.workspace,
        asked: vec![asked],
        cwd: None,
        run: body.request(session).map_err(airlock_core::Error::from)?,
        result_file: PathBuf::new(),
        server_pid: std::process::id() as i32,
        stdin_given: false,
    })
}

fn asked_of(session: Option<&str>) -> String {
    match session {
        Some(id) => format!("POST /v1/sessions/{id}/runs"),
        None => "POST /v1/runs".into(),
    }
}

/// Judge the run as core will before its answer's 200 goes out: a session the token does not
/// reach, a workspace beyond its own, a disabled profile are the answer's status, not the last
/// line of a stream the client took for a run.
async fn check_first(
    authed: &Authed,
    app: &Shared,
    body: &RunBody,
    session: Option<String>,
) -> ApiResult<()> {
    let asked = asked_of(session.as_deref());
    let request = job_of(authed, app, body, session, asked)?.request();
    let caller = authed.caller.clone();
    blocking(authed.slot.clone(), move || {
        airlock_core::check_run(&caller, request)
    })
    .await
}

/// One of the token's run places (see [`crate::limits::Limiter::run_slot`]), held by the run and
/// by its answer until the answer has gone out: a client that does not read its answer must not
/// make the server keep answer after answer (each up to twice --max-output) beyond its places.
pub(crate) type RunSlot = Arc<tokio::sync::OwnedSemaphorePermit>;

/// The run's events, and its place.
pub(crate) struct Started {
    pub(crate) events: mpsc::Receiver<JobEvent>,
    pub(crate) slot: RunSlot,
}

/// Who asked for a run, as the server keeps it going: the key its places are counted under,
/// whether its credentials still open the door, and its caller (for the record of a run its
/// client left).
pub(crate) struct Asker {
    pub(crate) key: String,
    pub(crate) still_valid: Arc<dyn Fn() -> bool + Send + Sync>,
    pub(crate) caller: airlock_core::Caller,
}

/// Start the run on a task of its own; its events come through the returned receiver, which the
/// caller drops to say that the client went away.
async fn start(
    app: &Shared,
    authed: Authed,
    body: RunBody,
    session: Option<String>,
) -> ApiResult<Started> {
    let job = job_of(
        &authed,
        app,
        &body,
        session.clone(),
        asked_of(session.as_deref()),
    )?;
    let stdin = body.stdin.map_or(airlock_runner::Input::Nothing, |text| {
        airlock_runner::Input::Bytes(text.into_bytes())
    });
    let asker = Asker {
        still_valid: {
            let (app, id) = (app.clone(), authed.token.id.clone());
            Arc::new(move || app.tokens.is_valid(&id))
        },
        key: authed.token.id,
        caller: authed.caller,
    };
    start_job(app, asker, job, stdin, session).await
}

/// Start `job` for `asker` in one of its run places, with `stdin` as the command's input.
pub(crate) async fn start_job(
    app: &Shared,
    asker: Asker,
    job: Job,
    stdin: airlock_runner::Input,
    session: Option<String>,
) -> ApiResult<Started> {
    let slot: RunSlot = Arc::new(app.limiter.run_slot(&asker.key).await?);
    let run_holds = slot.clone();
    let (events, receiver) = mpsc::channel(16);
    let app = app.clone();
    let Asker {
        still_valid,
        caller,
        ..
    } = asker;
    tokio::spawn(async move {
        let launch = Launch {
            exe: &app.exe,
            results_dir: &app.results_dir,
            jobs: app.jobs.clone(),
            stdin,
            keep_bytes: app.keep_output,
            token_valid: still_valid,
            pool: app.pool.clone(),
        };
        let record: airlock_runner::Recorder = Arc::new(move |why: &str| {
            airlock_core::audit::record_abandoned(&caller, session.as_deref(), why)
        });
        airlock_runner::execute(launch, job, events, record).await;
        drop(run_holds);
    });
    Ok(Started {
        events: receiver,
        slot,
    })
}

/// `response` with its body holding `slot` until the body has been sent (or the client is gone).
pub(crate) fn holding(slot: RunSlot, response: Response) -> Response {
    let (mut parts, body) = response.into_parts();
    // A body made of a stream has no size of its own: its length still goes in the head, or the
    // answer would be chunked (which clients that read Content-Length alone do not take).
    if let Some(length) = http_body::Body::size_hint(&body).exact() {
        parts.headers.insert(header::CONTENT_LENGTH, length.into());
    }
    let frames = http_body_util::BodyExt::into_data_stream(body);
    let held = futures_util::stream::unfold((frames, slot), |(mut frames, slot)| async move {
        let frame = futures_util::StreamExt::next(&mut frames).await?;
        Some((frame, (frames, slot)))
    });
    Response::from_parts(parts, HttpBody::from_stream(held))
}

/// Collect the run's events into one answer.
async fn answer(started: Started) -> ApiResult<Response> {
    let Started { mut events, slot } = started;
    let answer = airlock_runner::collect(&mut events).await?;
    Ok(holding(slot, Json(answer).into_response()))
}

/// The run's events as NDJSON lines, each a [`RunEvent`]: `stdout` and `stderr` as they come,
/// then `result` or `error`.
fn streamed(started: Started) -> Response {
    let Started { events, slot } = started;
    let lines = futures_util::stream::unfold(
        (events, (0u64, 0u64), slot),
        |(mut events, mut kept, slot)| async move {
            let line = match events.recv().await? {
                JobEvent::Output { stream, data } => {
                    // Only a count of the bytes is kept, for the truncation flags of the result.
                    let bytes = data.len() as u64;
                    let data = String::from_utf8_lossy(&data).into_owned();
                    match stream {
                        Stream::Stdout => {
                            kept.0 += bytes;
                            RunEvent::Stdout { data }
                        }
                        Stream::Stderr => {
                            kept.1 += bytes;
                            RunEvent::Stderr { data }
                        }
                    }
                }
                JobEvent::Done(finished) => match airlock_runner::result_of(*finished, kept) {
                    Ok(result) => RunEvent::Result(result),
                    Err(error) => RunEvent::Error {
                        code: error.code.to_string(),
                        message: error.message,
                    },
                },
            };
            let mut text = serde_json::to_string(&line).unwrap_or_default();
            text.push('\n');
            Some((
                Ok::<Bytes, Infallible>(Bytes::from(text)),
                (events, kept, slot),
            ))
        },
    );
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/x-ndjson")],
        HttpBody::from_stream(lines),
    )
        .into_response()
}

pub async fn in_session(
    State(app): State<Shared>,
    authed: Authed,
    SessionId(id): SessionId,
    Body(body): Body<RunBody>,
) -> ApiResult<Response> {
    answer(start(&app, authed, body, Some(id)).await?).await
}

pub async fn throwaway(
    State(app): State<Shared>,
    authed: Authed,
    Body(body): Body<RunBody>,
) -> ApiResult<Response> {
    answer(start(&app, authed, body, None).await?).await
}

pub async fn in_session_streamed(
    State(app): State<Shared>,
    authed: Authed,
    SessionId(id): SessionId,
    Body(body): Body<RunBody>,
) -> ApiResult<Response> {
    check_first(&authed, &app, &body, Some(id.clone())).await?;
    Ok(streamed(start(&app, authed, body, Some(id)).await?))
}

pub async fn throwaway_streamed(
    State(app): State<Shared>,
    authed: Authed,
    Body(body): Body<RunBody>,
) -> ApiResult<Response> {
    check_first(&authed, &app, &body, None).await?;
    Ok(streamed(start(&app, authed, body, None).await?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_held_answer_keeps_its_length() {
        let semaphore = Arc::new(tokio::sync::Semaphore::new(1));
        let slot: RunSlot = Arc::new(semaphore.try_acquire_owned().unwrap());
        let answer = holding(
            slot,
            Json(serde_json::json!({"exit_code": 0})).into_response(),
        );
        let length = answer.headers().get(header::CONTENT_LENGTH).unwrap();
        assert_eq!(
            length.to_str().unwrap(),
            r#"{"exit_code":0}"#.len().to_string()
        );
    }
}
