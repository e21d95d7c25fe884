//! `fabro serve`: a local web view of the runs in a runs directory. Server-rendered HTML with a
//! little plain JavaScript served as a file (no build step): the board of runs by status (see
//! [`board`]), a run page (the workflow graph colored by progress, the stage table, usage per
//! model, the context-usage chart, the events as they happen over server-sent events, the
//! question of a gate the run is waiting at, and cancel / resume / rewind buttons), stage pages,
//! a run's files changed ([`files_page`]) and the form to start a run ([`start_page`]).
//!
//! It changes runs only through forms that post (see [`forms`]) and the API: answering a waiting
//! gate writes an answers file into the run directory and starts `fabro resume` on it (one
//! resume per run at a time); starting, canceling, resuming and rewinding are [`actions`].
//! Everything in a run directory may have been written by a stage or a model, so: only run
//! directories that are real directories (not links) are listed, run files are read without
//! following links, ids and names are checked, and pages send a Content-Security-Policy that
//! allows no inline script. Requests must name the server by a host name it serves (no DNS
//! rebinding), state-changing ones must come from its own pages (`Origin` or `Referer`), and a
//! token, when set, is required on every request.

mod actions;
mod api;
mod board;
mod files_page;
mod forms;
mod guard;
mod pages;
mod queue;
mod start_page;

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::os::unix::fs::OpenOptionsExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::extract::{Form, Path as UrlPath, Query, State};
use axum::http::{header, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{Html, IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use axum::Router;

use crate::log_tail::LogTail;
use crate::run_dir::lookup::{runs_in, RunEntry};

use crate::run_dir::layout;
pub use guard::{percent_decode, percent_encode};
pub use pages::{waiting_gate, OwnedChoice, WaitingGate};

/// How often the event stream looks for new events.
const EVENT_POLL: Duration = Duration::from_millis(200);

/// How long a client may take to send a request's headers before its connection is closed, so
/// that slow or silent connections cannot hold the server's resources.
pub const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(5);

/// What the server serves and how.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// The directory holding run directories (`.fabro/runs`).
    pub runs_dir: PathBuf,
    /// Required on every request (`?token=` once, then a cookie), when set.
    pub token: Option<String>,
    /// The `fabro` executable that resumes a run after a gate is answered.
    pub fabro_exe: PathBuf,
    /// A host name the server is reached by besides its address, `localhost`, `127.0.0.1` and
    /// `[::1]` (the name given to `--bind`).
    pub host_name: Option<String>,
    /// The workflows the API may start by name (`--workflows`); none: only as `source`.
    pub workflows_dir: Option<PathBuf>,
    /// The most runs started through the API that run at once; the others wait, queued.
    pub max_concurrent_runs: usize,
    /// Where the service was started: the runs' processes start here and work here unless the
    /// request names a `workdir`.
    pub service_dir: PathBuf,
    /// Whether a run the service started whose process died is resumed by the queue (else it is
    /// shown crashed, with a resume action).
    pub resume_crashed_runs: bool,
}

struct AppState {
    options: ServeOptions,
    /// Per run id: whether the `fabro resume` this server started for it still runs. Held while
    /// a gate is answered, so concurrent answers start one resume.
    resumes: Mutex<HashMap<String, Arc<AtomicBool>>>,
    /// Woken when a run is submitted, so that it starts without waiting for the queue's tick.
    queue: tokio::sync::Notify,
}

/// The address a connection came in on, which names the server as the client reached it.
#[derive(Debug, Clone, Copy)]
struct LocalAddr(SocketAddr);

/// Serves until the future is dropped. A connection that does not send its request headers
/// within [`HEADER_READ_TIMEOUT`] is closed.
pub async fn serve(listener: tokio::net::TcpListener, options: ServeOptions) -> std::io::Result<()> {
    let state = Arc::new(AppState {
        options,
        resumes: Mutex::new(HashMap::new()),
        queue: tokio::sync::Notify::new(),
    });
    tokio::spawn(queue::run(state.clone()));
    let (api, document) = api::router();
    let document = Arc::new(document);
    let app = Router::new()
        .merge(api)
        .route(
            "/api/v1/openapi.json",
            get(move || {
                let document = document.clone();
                async move { axum::Json(document.as_ref().clone()) }
            }),
        )
        .route("/", get(index))
        .route("/fabro.js", get(script))
        .route("/fabro.css", get(style))
        .route("/runs", post(forms::start_run))
        .route("/runs/new", get(forms::new_run))
        .route("/runs/{id}", get(run_page))
        .route("/runs/{id}/cancel", post(forms::cancel))
        .route("/runs/{id}/resume", post(forms::resume))
        .route("/runs/{id}/rewind", post(forms::rewind))
        .route("/runs/{id}/interrupt", post(forms::interrupt))
        .route("/runs/{id}/fork", post(forms::fork))
        .route("/runs/{id}/files", get(forms::files))
        .route("/runs/{id}/events", get(events))
        .route("/runs/{id}/answer", post(answer))
        .route("/runs/{id}/stages/{node}/{visit}", get(stage_page))
        .route("/runs/{id}/stages/{node}/{visit}/live", get(live_log))
        .route("/fabro-stage.js", get(stage_script))
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard::require_token))
        .layer(axum::middleware::from_fn_with_state(state.clone(), guard::same_origin))
        .layer(axum::middleware::from_fn(guard::security_headers))
        .with_state(state);
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder.timer(hyper_util::rt::TokioTimer::new()).header_read_timeout(HEADER_READ_TIMEOUT);
    loop {
        let (stream, _) = match listener.accept().await {
            Ok(accepted) => accepted,
            Err(error) => {
                // Out of file descriptors and the like: wait for connections to close.
                tracing::warn!("fabro serve cannot accept a connection: {error}");
                tokio::time::sleep(Duration::from_millis(50)).await;
                continue;
            }
        };
        let Ok(local) = stream.local_addr() else { continue };
        let router = app.clone();
        let service =
            hyper::service::service_fn(move |mut request: hyper::Request<hyper::body::Incoming>| {
                request.extensions_mut().insert(LocalAddr(local));
                let mut router = router.clone();
                async move { tower_service::Service::call(&mut router, request).await }
            });
        let connection = builder.serve_connection(hyper_util::rt::TokioIo::new(stream), service);
        tokio::spawn(async move {
            if let Err(error) = connection.await {
                tracing::debug!("fabro serve connection ended: {error}");
            }
        });
    }
}

/// A new random token (128 bits from the kernel's generator) for a server reachable from other
/// machines.
pub fn new_token() -> std::io::Result<String> {
    use std::io::Read as _;
    let mut bytes = [0u8; 16];
    std::fs::File::open("/dev/urandom")?.read_exact(&mut bytes)?;
    Ok(bytes.iter().map(|b| format!("{b:02x}")).collect())
}

fn not_found(what: &str) -> Response {
    (StatusCode::NOT_FOUND, format!("{what}\n")).into_response()
}

/// The runs of the runs directory that are directories of their own: an entry that is a
/// symbolic link (to a directory elsewhere) or not a directory is not served.
fn served_runs(runs_dir: &Path) -> Vec<RunEntry> {
    let mut runs = runs_in(runs_dir);
    runs.retain(|run| std::fs::symlink_metadata(&run.dir).is_ok_and(|meta| meta.is_dir()));
    runs
}

/// [`served_runs`] and the runs submitted to start (queued, starting), oldest first.
fn all_runs(runs_dir: &Path) -> Vec<RunEntry> {
    let mut runs = crate::run_dir::lookup::all_runs(runs_dir);
    runs.retain(|run| std::fs::symlink_metadata(&run.dir).is_ok_and(|meta| meta.is_dir()));
    runs
}

/// Whether `id` can be a run id: letters, digits and `-`.
fn is_run_id(id: &str) -> bool {
    !id.is_empty() && id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-')
}

/// The run directory of run `id`: a direct child of the runs directory whose manifest has that id.
fn run_dir(state: &AppState, id: &str) -> Option<PathBuf> {
    if !is_run_id(id) {
        return None;
    }
    served_runs(&state.options.runs_dir).into_iter().find(|run| run.run_id == id).map(|run| run.dir)
}

/// [`run_dir`], or the directory of run `id` submitted and not started yet.
fn any_run_dir(state: &AppState, id: &str) -> Option<PathBuf> {
    if !is_run_id(id) {
        return None;
    }
    all_runs(&state.options.runs_dir).into_iter().find(|run| run.run_id == id).map(|run| run.dir)
}

/// The board: every run in a column per status, filtered by the query.
async fn index(State(state): State<Arc<AppState>>, Query(filter): Query<board::BoardFilter>) -> Response {
    let label = filter.label.as_deref().map(str::trim).filter(|label| !label.is_empty());
    let label = match label.map(crate::run_dir::parse_label).transpose() {
        Ok(label) => label,
        Err(message) => return (StatusCode::BAD_REQUEST, format!("label: {message}\n")).into_response(),
    };
    let can_start = state.options.workflows_dir.is_some();
    let runs = all_runs(&state.options.runs_dir);
    Html(board::board(runs, &filter, label.as_ref(), can_start)).into_response()
}

async fn script() -> Response {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], pages::LIVE_SCRIPT).into_response()
}

async fn stage_script() -> Response {
    ([(header::CONTENT_TYPE, "text/javascript; charset=utf-8")], pages::STAGE_SCRIPT).into_response()
}

async fn style() -> Response {
    ([(header::CONTENT_TYPE, "text/css; charset=utf-8")], pages::style_sheet()).into_response()
}

async fn run_page(State(state): State<Arc<AppState>>, UrlPath(id): UrlPath<String>) -> Response {
    match run_dir(&state, &id) {
        // Off the async workers: drawing the graph waits on Graphviz.
        Some(dir) => match tokio::task::spawn_blocking(move || pages::run(&dir, &id)).await {
            Ok(page) => Html(page).into_response(),
            Err(error) => (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot render the run: {error}\n"))
                .into_response(),
        },
        None => match any_run_dir(&state, &id) {
            Some(dir) => Html(pages::not_started(&dir, &id)).into_response(),
            None => not_found("no such run"),
        },
    }
}

async fn stage_page(
    State(state): State<Arc<AppState>>,
    UrlPath((id, node, visit)): UrlPath<(String, String, u32)>,
) -> Response {
    let Some(dir) = run_dir(&state, &id) else { return not_found("no such run") };
    if !is_node_name(&node) {
        return not_found("no such stage");
    }
    match pages::stage(&dir, &id, &node, visit) {
        Some(page) => Html(page).into_response(),
        None => not_found("no such stage visit"),
    }
}

/// Node ids are file names under stages/: nothing that could leave that directory.
fn is_node_name(node: &str) -> bool {
    !(node.is_empty() || node.contains(['/', '\\']) || node == "." || node == "..")
}

#[derive(serde::Deserialize)]
struct LiveQuery {
    log: String,
    #[serde(default)]
    offset: u64,
}

/// What a running stage's log (`?log=answer|stdout|stderr`) holds past `offset`, as text; the
/// `x-fabro-offset` header says where the next read starts, and `x-fabro-ended` whether the visit
/// has ended (its status.json is written).
async fn live_log(
    State(state): State<Arc<AppState>>,
    UrlPath((id, node, visit)): UrlPath<(String, String, u32)>,
    Query(query): Query<LiveQuery>,
) -> Response {
    let Some(dir) = run_dir(&state, &id) else { return not_found("no such run") };
    let Some((_, file, _)) = pages::LIVE_LOGS.iter().find(|(name, _, _)| *name == query.log) else {
        return not_found("no such log");
    };
    if !is_node_name(&node) {
        return not_found("no such stage");
    }
    let Some(visit_dir) = layout::latest_visit_dir(&dir, &node, visit) else {
        return not_found("no such stage visit");
    };
    let inside = match (std::fs::canonicalize(&visit_dir), std::fs::canonicalize(&dir)) {
        (Ok(visit_dir), Ok(dir)) => visit_dir.starts_with(dir),
        _ => false,
    };
    if !inside {
        return not_found("no such stage visit");
    }
    let ended = visit_dir.join(layout::STATUS).is_file();
    let chunk = read_from(&visit_dir.join(file), query.offset);
    // Never a cut through a character: the rest comes with the next read.
    let whole = match std::str::from_utf8(&chunk) {
        Ok(_) => chunk.len(),
        Err(error) if error.error_len().is_none() => error.valid_up_to(),
        Err(_) => chunk.len(),
    };
    let offset = query.offset + whole as u64;
    (
        [
            (header::CONTENT_TYPE, "text/plain; charset=utf-8".to_string()),
            (header::CACHE_CONTROL, "no-store".to_string()),
            (header::HeaderName::from_static("x-fabro-offset"), offset.to_string()),
            (header::HeaderName::from_static("x-fabro-ended"), ended.to_string()),
        ],
        String::from_utf8_lossy(&chunk[..whole]).into_owned(),
    )
        .into_response()
}

/// Server-sent events: every line of `events.jsonl` as it is written, from the start.
async fn events(State(state): State<Arc<AppState>>, UrlPath(id): UrlPath<String>) -> Response {
    let Some(dir) = run_dir(&state, &id) else { return not_found("no such run") };
    let start = (LogTail::new(&dir.join(layout::EVENTS)), VecDeque::new());
    let stream = futures::stream::unfold(start, |(mut events, mut lines)| async move {
        loop {
            if let Some(text) = lines.pop_front() {
                return Some((
                    Ok::<_, std::convert::Infallible>(SseEvent::default().data(text)),
                    (events, lines),
                ));
            }
            let new = events.read_new().lines;
            if new.is_empty() {
                tokio::time::sleep(EVENT_POLL).await;
                continue;
            }
            lines.extend(new);
        }
    });
    Sse::new(stream).keep_alive(axum::response::sse::KeepAlive::default()).into_response()
}

/// What a file holds after `offset` (at most 1 MiB at a time); nothing when it is not a
/// regular file.
fn read_from(path: &Path, offset: u64) -> Vec<u8> {
    use std::io::{Read, Seek, SeekFrom};
    let regular = std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_file());
    let Some(mut file) = regular.then(|| std::fs::File::open(path).ok()).flatten() else { return Vec::new() };
    let mut chunk = Vec::new();
    if file.seek(SeekFrom::Start(offset)).is_ok() {
        let _ = file.take(1 << 20).read_to_end(&mut chunk);
    }
    chunk
}

/// A gate's answer from the run page: the choice clicked, or (at a gate that takes free text)
/// the text written.
#[derive(serde::Deserialize, utoipa::ToSchema)]
struct AnswerForm {
    answer: Option<String>,
    text: Option<String>,
}

/// Answers the gate a paused run waits at from its page, then resumes the run in the background.
async fn answer(
    State(state): State<Arc<AppState>>,
    UrlPath(id): UrlPath<String>,
    Form(form): Form<AnswerForm>,
) -> Response {
    let Some(dir) = run_dir(&state, &id) else { return not_found("no such run") };
    match answer_gate(&state, &id, &dir, form) {
        Ok(()) => Redirect::to(&format!("/runs/{id}")).into_response(),
        Err(refused) => (refused.status(), format!("{}\n", refused.message())).into_response(),
    }
}

/// Why a gate's answer was not taken.
enum GateRefusal {
    /// The resume a first answer started still runs.
    AlreadyAnswered,
    NotWaiting,
    /// Not an answer this gate takes: why.
    BadAnswer(&'static str),
    Failed(String),
}

impl GateRefusal {
    fn status(&self) -> StatusCode {
        match self {
            GateRefusal::AlreadyAnswered | GateRefusal::NotWaiting => StatusCode::CONFLICT,
            GateRefusal::BadAnswer(_) => StatusCode::BAD_REQUEST,
            GateRefusal::Failed(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The API's stable code for it.
    fn code(&self) -> &'static str {
        match self {
            GateRefusal::AlreadyAnswered => "already_answered",
            GateRefusal::NotWaiting => "not_waiting",
            GateRefusal::BadAnswer(_) => "bad_request",
            GateRefusal::Failed(_) => "internal",
        }
    }

    fn message(&self) -> String {
        match self {
            GateRefusal::AlreadyAnswered => "the gate is already answered: the run is resuming".into(),
            GateRefusal::NotWaiting => "the run is not waiting at a human gate".into(),
            GateRefusal::BadAnswer(why) => why.to_string(),
            GateRefusal::Failed(why) => why.clone(),
        }
    }
}

/// Takes `form` as the answer of the gate run `id` (in `dir`) waits at and resumes the run in
/// the background. Answers to one run are taken one at a time: while the resume this server
/// started still runs, another answer is refused, so the run is resumed once.
fn answer_gate(state: &AppState, id: &str, dir: &Path, form: AnswerForm) -> Result<(), GateRefusal> {
    let mut resumes = state.resumes.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if resumes.get(id).is_some_and(|running| running.load(Ordering::SeqCst)) {
        return Err(GateRefusal::AlreadyAnswered);
    }
    let gate = pages::waiting_gate(dir).ok_or(GateRefusal::NotWaiting)?;
    let chosen = form.answer.filter(|answer| !answer.is_empty());
    let written = form.text.map(|text| text.trim().to_string()).filter(|text| !text.is_empty());
    let answer = match (chosen, written) {
        (Some(answer), _) if gate.choices.iter().any(|choice| choice.target == answer) => answer,
        (Some(_), _) => return Err(GateRefusal::BadAnswer("that is not one of the gate's choices")),
        (None, Some(text)) if gate.freeform => text,
        (None, Some(_)) => {
            return Err(GateRefusal::BadAnswer("this gate takes one of its choices, not text"))
        }
        (None, None) => {
            return Err(GateRefusal::BadAnswer("choose one of the gate's choices, or write an answer"))
        }
    };
    let answers = crate::run_launcher::write_answer(dir, &gate.id, &answer)
        .map_err(|error| GateRefusal::Failed(format!("cannot write the answer: {error}")))?;
    let running = resume(&state.options.fabro_exe, dir, Some(&answers))
        .map_err(|error| GateRefusal::Failed(format!("cannot start fabro resume: {error}")))?;
    resumes.insert(id.to_string(), running);
    Ok(())
}

/// Starts `fabro resume DIR [--answers ANSWERS]` (output in `serve-resume.log`); the flag it
/// returns turns false when the process ends.
fn resume(fabro_exe: &Path, dir: &Path, answers: Option<&Path>) -> std::io::Result<Arc<AtomicBool>> {
    // Never through a link a stage may have put there.
    let log = std::fs::OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_NOFOLLOW)
        .open(dir.join(layout::SERVE_RESUME_LOG));
    let mut command = std::process::Command::new(fabro_exe);
    command.arg("resume").arg(dir).arg("-q").stdin(std::process::Stdio::null());
    if let Some(answers) = answers {
        command.arg("--answers").arg(answers);
    }
    if let Ok(log) = log {
        if let Ok(copy) = log.try_clone() {
            command.stdout(copy);
        }
        command.stderr(log);
    }
    let mut child = command.spawn()?;
    let running = Arc::new(AtomicBool::new(true));
    let flag = running.clone();
    // Reap it when it ends, so it leaves no zombie behind.
    std::thread::spawn(move || {
        let _ = child.wait();
        flag.store(false, Ordering::SeqCst);
    });
    Ok(running)
}
