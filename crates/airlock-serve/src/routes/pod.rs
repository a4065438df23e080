//! agent-sandbox's runtime inside a pod, as its client (`k8s-agent-sandbox`) speaks to it:
//! `POST /execute`, `POST /upload`, `GET /download/{path}`, `GET /list/{path}`, `GET
//! /exists/{path}`. Each request is a run in the pod's session, made and read by core (see
//! `airlock_core::pod_runtime`); this turns the contract's HTTP into those runs and their ends
//! into its JSON. The routes are served only by `airlock serve --agent-sandbox`, without a token:
//! who reaches the pod's port is the pod's agent (agent-sandbox's router, which drops an
//! `Authorization` header, sends it there), bound to what the operator's command line names.

use std::path::PathBuf;
use std::sync::Arc;

use airlock_core::pod_runtime::{
    CommandAnswer, FileAnswer, FileOp, FileRunEnd, PodBinding, PodPath,
};
use airlock_core::{Role, RunRequest};
use airlock_runner::{Input, Job};
use axum::extract::{DefaultBodyLimit, FromRequest, Multipart, Path, Request, State};
use axum::http::{header, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use axum::{Json, Router};
use serde::Deserialize;

use super::runs::{holding, start_job, Asker, RunSlot, Started};
use super::Body;
use crate::app::{blocking, Shared};
use crate::error::{ApiError, ApiResult};

/// The runtime's state: what the operator bound it to, and the session its runs go into now.
pub struct Pod {
    pub binding: PodBinding,
    session: tokio::sync::Mutex<Option<String>>,
    /// Places for upload bodies being read: at most this many at once are held in memory.
    bodies: Arc<tokio::sync::Semaphore>,
}

/// Upload bodies read at once (each at most --max-body).
const BODIES_AT_ONCE: usize = 16;

impl Pod {
    pub fn new(binding: PodBinding) -> Pod {
        Pod {
            binding,
            session: tokio::sync::Mutex::new(None),
            bodies: Arc::new(tokio::sync::Semaphore::new(BODIES_AT_ONCE)),
        }
    }

    /// The session found or made as the server starts (before any request: nothing waits).
    pub fn set_session(&self, id: String) {
        if let Ok(mut current) = self.session.try_lock() {
            *current = Some(id);
        }
    }
}

/// What the limiter counts the pod's requests and runs under (never a token's id: those are hex).
const POD_KEY: &str = "agent-sandbox";

pub fn router(app: Shared, max_body: usize) -> Router {
    Router::new()
        .route("/execute", post(execute))
        .route("/upload", post(upload))
        .route("/download/{*path}", get(download))
        .route("/list/", get(list_workspace))
        .route("/list/{*path}", get(list))
        .route("/exists/{*path}", get(exists))
        .layer(DefaultBodyLimit::max(max_body))
        .layer(axum::middleware::map_response(not_for_other_pages))
        .with_state(app)
}

/// Every answer of the runtime is this server's own to read: another site's page may not load it
/// (as a script, an image: the browser guard refuses such requests too, where browsers say where
/// they come from), nor take it for something to run.
pub(crate) async fn not_for_other_pages(mut response: Response) -> Response {
    let headers = response.headers_mut();
    headers.insert(
        header::HeaderName::from_static("cross-origin-resource-policy"),
        header::HeaderValue::from_static("same-origin"),
    );
    headers.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        header::HeaderValue::from_static("nosniff"),
    );
    response
}

/// A request to the runtime: the pod's caller, one of its places for requests in progress, and
/// the session its run goes into.
pub(crate) struct PodRequest {
    caller: airlock_core::Caller,
    slot: crate::app::RequestSlot,
    pub(crate) session: String,
}

/// A request to the runtime, admitted: counted against the pod's rate, given one of its places for
/// requests in progress, its session found.
pub(crate) async fn admit(app: &Shared, asked: String) -> ApiResult<(Arc<Pod>, PodRequest)> {
    charge(app)?;
    seat(app, asked).await
}

/// The pod's rate, charged for a request (before its body is read: a body that comes slowly
/// holds a connection, not one of the pod's places).
pub(crate) fn charge(app: &Shared) -> ApiResult<()> {
    app.limiter.admit(POD_KEY)
}

/// A place for an upload's body, charged to the pod's rate: a body is read only while it holds
/// one, so that no more than [`BODIES_AT_ONCE`] of them are held in memory at a time.
pub(crate) fn body_place(app: &Shared) -> ApiResult<tokio::sync::OwnedSemaphorePermit> {
    charge(app)?;
    let pod = app.pod.as_ref().ok_or_else(|| {
        ApiError::internal("a runtime route is served without --agent-sandbox — please report it")
    })?;
    pod.bodies.clone().try_acquire_owned().map_err(|_| {
        let mut refused = ApiError::new(
            StatusCode::TOO_MANY_REQUESTS,
            "too_many_uploads",
            format!("{BODIES_AT_ONCE} uploads are being received already: send this one again in a moment"),
        );
        refused.retry_after = Some(1);
        refused
    })
}

/// A place for a request in progress, and the session it goes into.
pub(crate) async fn seat(app: &Shared, asked: String) -> ApiResult<(Arc<Pod>, PodRequest)> {
    let pod = app.pod.clone().ok_or_else(|| {
        ApiError::internal("a runtime route is served without --agent-sandbox — please report it")
    })?;
    let slot = Arc::new(app.limiter.request_slot(POD_KEY)?);
    let caller = pod.binding.caller(&app.service, asked);
    // One request at a time finds (or makes) the session: two would make two.
    let mut current = pod.session.lock().await;
    let session = {
        let (pod, caller, current) = (pod.clone(), caller.clone(), current.clone());
        blocking(slot.clone(), move || {
            pod.binding.session(&caller, current.as_deref())
        })
        .await?
    };
    *current = Some(session.clone());
    drop(current);
    Ok((
        pod,
        PodRequest {
            caller,
            slot,
            session,
        },
    ))
}

/// Start `run` for the pod, `stdin` its input.
pub(crate) async fn start(
    app: &Shared,
    pod: &Pod,
    request: PodRequest,
    run: RunRequest,
    stdin: Input,
) -> ApiResult<Started> {
    let job = Job {
        state_dir: app.service.state_dir.clone(),
        role: Role::Agent,
        way: app.service.way,
        token: None,
        profile: pod.binding.profile().to_string(),
        workspace: Some(pod.binding.workspace().to_path_buf()),
        asked: request.caller.asked.clone(),
        cwd: None,
        run,
        result_file: PathBuf::new(),
        server_pid: std::process::id() as i32,
        stdin_given: false,
    };
    let asker = Asker {
        key: POD_KEY.into(),
        still_valid: Arc::new(|| true),
        caller: request.caller,
    };
    drop(request.slot);
    start_job(app, asker, job, stdin, Some(request.session)).await
}

/// `POST /execute`'s body: the client may send more than these (it is read leniently, as the
/// contract's runtime reads it).
#[derive(Deserialize)]
struct ExecuteBody {
    command: String,
    timeout_seconds: Option<f64>,
}

async fn execute(State(app): State<Shared>, Body(body): Body<ExecuteBody>) -> ApiResult<Response> {
    let (pod, request) = admit(&app, "POST /execute".into()).await?;
    let session = request.session.clone();
    let run = pod
        .binding
        .command(&session, &body.command, body.timeout_seconds)?;
    let Started { mut events, slot } = start(&app, &pod, request, run, Input::Nothing).await?;
    let answer = airlock_runner::collect(&mut events).await?;
    let executed = CommandAnswer::of(answer, session);
    Ok(holding(slot, Json(executed).into_response()))
}

/// Carry out `op` for `request` (a write with `bytes` as the file's content): its answer, and the
/// run's place, for the answer to hold until it has been sent.
pub(crate) async fn file_op(
    app: &Shared,
    (pod, request): (Arc<Pod>, PodRequest),
    op: FileOp,
    bytes: Option<Vec<u8>>,
) -> ApiResult<(FileAnswer, RunSlot)> {
    let run = pod.binding.file_run(&request.session, &op)?;
    let stdin = bytes.map_or(Input::Nothing, Input::Bytes);
    let Started { mut events, slot } = start(app, &pod, request, run, stdin).await?;
    let (result, stdout, stderr) = airlock_runner::collect_bytes(&mut events).await?;
    let stderr = String::from_utf8_lossy(&stderr);
    let answer = op.answer(FileRunEnd::of(&result, stdout, &stderr, app.keep_output))?;
    Ok((answer, slot))
}

/// Carry out `op`, asked by `asked` (the request line, the path to come): admitted, then done.
pub(crate) async fn asked_op(
    app: &Shared,
    asked: &str,
    op: FileOp,
) -> ApiResult<(FileAnswer, RunSlot)> {
    let admitted = admit(app, format!("{asked}{}", op.path().as_str())).await?;
    file_op(app, admitted, op, None).await
}

/// `POST /upload`: one multipart part named `file`, its file name the path to write. Charged to
/// the pod's rate before its body is read, which must arrive within the time any request's body
/// has; given a place and a session once it has.
async fn upload(State(app): State<Shared>, request: Request) -> ApiResult<Response> {
    let reading = body_place(&app)?;
    let (name, bytes) = tokio::time::timeout(super::BODY_TIMEOUT, read_upload(&app, request))
        .await
        .map_err(|_| super::body_timeout())??;
    drop(reading);
    let path = PodPath::parse(&name)?;
    let admitted = seat(&app, format!("POST /upload {}", path.as_str())).await?;
    let (_, slot) = file_op(
        &app,
        admitted,
        FileOp::Write { path, mode: None },
        Some(bytes),
    )
    .await?;
    let message = format!("File '{name}' uploaded successfully.");
    Ok(holding(
        slot,
        Json(serde_json::json!({ "message": message })).into_response(),
    ))
}

/// The path and the bytes of the upload's one `file` part (other parts are passed over).
async fn read_upload(app: &Shared, request: Request) -> ApiResult<(String, Vec<u8>)> {
    let mut form = Multipart::from_request(request, app)
        .await
        .map_err(|e| ApiError::bad_request("bad_upload", e.body_text()))?;
    let mut upload = None;
    while let Some(field) = form.next_field().await.map_err(upload_error)? {
        if field.name() != Some("file") {
            continue;
        }
        if upload.is_some() {
            return Err(ApiError::bad_request(
                "bad_upload",
                "more than one part named file: send one file per upload",
            ));
        }
        let Some(name) = field.file_name().map(str::to_string) else {
            return Err(ApiError::bad_request(
                "bad_upload",
                "the part named file has no file name: it names the path to write",
            ));
        };
        let bytes = field.bytes().await.map_err(upload_error)?.to_vec();
        upload = Some((name, bytes));
    }
    upload.ok_or_else(|| {
        ApiError::bad_request(
            "bad_upload",
            "no part named file: send the file as multipart/form-data, field 'file', its file name the path",
        )
    })
}

fn upload_error(e: axum::extract::multipart::MultipartError) -> ApiError {
    if e.status() == StatusCode::PAYLOAD_TOO_LARGE {
        crate::error::too_large()
    } else {
        ApiError::bad_request("bad_upload", e.body_text())
    }
}

async fn download(State(app): State<Shared>, Path(raw): Path<String>) -> ApiResult<Response> {
    let path = PodPath::parse(&raw)?;
    match asked_op(&app, "GET /download/", FileOp::Read(path)).await? {
        (FileAnswer::Read(bytes), slot) => Ok(holding(
            slot,
            (
                [
                    (header::CONTENT_TYPE, "application/octet-stream"),
                    (header::CONTENT_DISPOSITION, "attachment"),
                ],
                bytes,
            )
                .into_response(),
        )),
        _ => Err(unexpected()),
    }
}

async fn list(State(app): State<Shared>, Path(raw): Path<String>) -> ApiResult<Response> {
    listed(app, &raw).await
}

/// `GET /list/`: the workspace itself (the client's `list(".")` comes so).
async fn list_workspace(State(app): State<Shared>) -> ApiResult<Response> {
    listed(app, ".").await
}

async fn listed(app: Shared, raw: &str) -> ApiResult<Response> {
    let path = PodPath::parse(raw)?;
    match asked_op(&app, "GET /list/", FileOp::List(path)).await? {
        (FileAnswer::Listed(entries), slot) => Ok(holding(slot, Json(entries).into_response())),
        _ => Err(unexpected()),
    }
}

async fn exists(State(app): State<Shared>, Path(raw): Path<String>) -> ApiResult<Response> {
    let path = PodPath::parse(&raw)?;
    match asked_op(&app, "GET /exists/", FileOp::Exists(path)).await? {
        (FileAnswer::Exists(found), slot) => Ok(holding(
            slot,
            Json(serde_json::json!({ "path": raw, "exists": found })).into_response(),
        )),
        _ => Err(unexpected()),
    }
}

fn unexpected() -> ApiError {
    ApiError::internal("a file operation answered another's kind — please report it")
}
