//! The run service's HTTP API under `/api/v1` (JSON; its OpenAPI 3 document at
//! `/api/v1/openapi.json`, generated from these handlers and types): submit a run, list runs,
//! read one with its stages, cancel one, follow its events as server-sent events that resume from
//! `Last-Event-ID`. A submitted run is queued (see [`super::queue`]) and runs in a `fabro run`
//! process of its own; everything the API answers is read from the run directories, so a second
//! service over the same runs directory answers the same.
//!
//! Errors are `{"error": {"code": "...", "message": "..."}}` with a stable `code`.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Component, Path, PathBuf};
use std::sync::Arc;

use axum::extract::rejection::JsonRejection;
use axum::extract::{Path as UrlPath, Query, State};
use axum::http::{HeaderMap, StatusCode};
use axum::response::sse::{Event as SseEvent, Sse};
use axum::response::{IntoResponse, Response};
use axum::Json;
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use super::AppState;
use crate::log_tail::LogTail;
use crate::run_dir::layout;
use crate::run_dir::lookup::RunEntry;
use crate::run_dir::submission::{RunState, Submission};

/// The API's routes and its OpenAPI document, made from the same handlers.
pub fn router() -> (axum::Router<Arc<AppState>>, utoipa::openapi::OpenApi) {
    use utoipa_axum::{router::OpenApiRouter, routes};
    #[derive(utoipa::OpenApi)]
    #[openapi(info(title = "fabro run service", description = "Start, list, follow and cancel fabro runs."))]
    struct Document;
    OpenApiRouter::with_openapi(<Document as utoipa::OpenApi>::openapi())
        .routes(routes!(create_run, list_runs))
        .routes(routes!(get_run, delete_run))
        .routes(routes!(cancel_run))
        .routes(routes!(answer_run))
        .routes(routes!(resume_run))
        .routes(routes!(run_events))
        .routes(routes!(interrupt_run))
        .routes(routes!(rewind_run))
        .routes(routes!(fork_run))
        .routes(routes!(stage_visit))
        .routes(routes!(stage_file))
        .split_for_parts()
}

/// An API error: its HTTP status, stable code and message.
#[derive(Debug, Serialize, ToSchema)]
pub struct ApiError {
    pub error: ErrorBody,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct ErrorBody {
    /// `not_found`, `bad_request`, `invalid_workflow`, `not_cancelable`, `not_resumable`,
    /// `not_running`, `not_waiting`, `already_answered`, `not_rewindable`, `in_use`, `too_large`,
    /// `forbidden`, `unauthorized`, `internal`.
    pub code: String,
    pub message: String,
    /// For `invalid_workflow`: the validator's findings, as `fabro validate` prints them.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub diagnostics: Vec<String>,
}

pub(super) fn error(status: StatusCode, code: &'static str, message: impl Into<String>) -> Response {
    Refusal(status, code, message.into()).into_response()
}

/// An API error before it is a response: its status, code and message.
struct Refusal(StatusCode, &'static str, String);

impl IntoResponse for Refusal {
    fn into_response(self) -> Response {
        let Refusal(status, code, message) = self;
        let body = ApiError { error: ErrorBody { code: code.into(), message, diagnostics: Vec::new() } };
        (status, Json(body)).into_response()
    }
}

/// A run to start.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct NewRun {
    /// A workflow file under the service's `--workflows` directory (relative to it).
    pub workflow: Option<String>,
    /// Or the workflow's DOT text itself.
    pub source: Option<String>,
    /// Replaces the workflow's goal.
    pub goal: Option<String>,
    /// Run inputs (`{{ inputs.KEY }}`), as `--input KEY=VALUE`.
    #[serde(default)]
    #[schema(value_type = Object)]
    pub inputs: BTreeMap<String, serde_json::Value>,
    /// Labels kept in the manifest, for filtering.
    #[serde(default)]
    pub labels: BTreeMap<String, String>,
    /// Where the run works (an existing directory); default: where the service was started.
    pub workdir: Option<String>,
    /// Answer LLM stages with simulated responses (`--simulate`).
    #[serde(default)]
    pub simulate: bool,
}

/// A submitted run.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunCreated {
    pub id: String,
    pub status: String,
}

/// A run as the list shows it.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunSummary {
    pub id: String,
    /// `queued`, `starting`, `running`, `paused`, `succeeded`, `failed`, `interrupted`,
    /// `restarted`, `crashed`, `canceled`, `never_started`.
    pub status: String,
    pub workflow: Option<String>,
    pub goal: Option<String>,
    pub labels: BTreeMap<String, String>,
    pub submitted_at: Option<String>,
    pub started_at: Option<String>,
    pub finished_at: Option<String>,
    pub failure_reason: Option<String>,
    pub run_dir: String,
}

/// A run with its stages.
#[derive(Debug, Serialize, ToSchema)]
pub struct RunDetail {
    #[serde(flatten)]
    pub run: RunSummary,
    pub stages: Vec<StageInfo>,
    /// The human gate the run is paused at, waiting for `POST .../answer`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<GateInfo>,
}

/// A human gate waiting for an answer.
#[derive(Debug, Serialize, ToSchema)]
pub struct GateInfo {
    /// The gate's node id.
    pub id: String,
    pub question: String,
    pub choices: Vec<ChoiceInfo>,
    /// Whether it takes free text (`{"text": ...}`) besides its choices.
    pub freeform: bool,
}

/// One answer a gate offers: its accelerator key, its label, and the node it leads to (the
/// `answer` to send).
#[derive(Debug, Serialize, ToSchema)]
pub struct ChoiceInfo {
    pub key: String,
    pub label: String,
    pub target: String,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StageInfo {
    pub node_id: String,
    pub visits: u32,
    pub status: Option<String>,
    pub duration_ms: u64,
}

#[derive(Debug, Deserialize, utoipa::IntoParams)]
pub struct RunsQuery {
    /// Only runs with this status.
    pub status: Option<String>,
    /// `key=value`: only runs with this label.
    pub label: Option<String>,
    /// Only runs of this workflow (its graph name).
    pub workflow: Option<String>,
    /// Only runs whose id, workflow, goal or labels contain this text.
    pub q: Option<String>,
}

/// The runs of the runs directory, newest first.
#[utoipa::path(get, path = "/api/v1/runs", params(RunsQuery),
    responses((status = 200, body = Vec<RunSummary>), (status = 400, body = ApiError)))]
async fn list_runs(State(state): State<Arc<AppState>>, Query(query): Query<RunsQuery>) -> Response {
    let label = match query.label.as_deref().map(crate::run_dir::parse_label).transpose() {
        Ok(label) => label,
        Err(message) => return error(StatusCode::BAD_REQUEST, "bad_request", format!("label: {message}")),
    };
    let mut runs: Vec<RunSummary> = super::all_runs(&state.options.runs_dir)
        .iter()
        .map(|entry| summary(&entry.dir, &entry.run_id))
        .collect();
    runs.retain(|run| {
        query.status.as_ref().is_none_or(|status| &run.status == status)
            && label.as_ref().is_none_or(|(key, value)| run.labels.get(key) == Some(value))
            && query.workflow.as_ref().is_none_or(|name| run.workflow.as_ref() == Some(name))
            && query.q.as_ref().is_none_or(|text| {
                let text = text.to_lowercase();
                [Some(&run.id), run.workflow.as_ref(), run.goal.as_ref()]
                    .into_iter()
                    .flatten()
                    .chain(run.labels.values())
                    .any(|field| field.to_lowercase().contains(&text))
            })
    });
    runs.reverse();
    Json(runs).into_response()
}

/// What the run in `dir` is, read from its files.
fn summary(dir: &Path, id: &str) -> RunSummary {
    let manifest = crate::run_dir::read_manifest(dir);
    let submission = Submission::read(dir).ok().flatten();
    let result = crate::run_dir::read_result(dir);
    RunSummary {
        id: id.to_string(),
        status: RunState::of(dir).as_str().to_string(),
        workflow: match &manifest {
            Some(manifest) => Some(manifest.workflow.clone()),
            None => submission.as_ref().and_then(Submission::workflow_name),
        },
        goal: manifest.as_ref().map(|manifest| manifest.goal.clone()).filter(|goal| !goal.is_empty()),
        labels: manifest.as_ref().map(|manifest| manifest.labels.clone()).unwrap_or_default(),
        submitted_at: submission.map(|submission| submission.submitted_at),
        started_at: manifest.as_ref().map(|manifest| manifest.started_at.clone()),
        finished_at: manifest.as_ref().and_then(|manifest| manifest.finished_at.clone()),
        failure_reason: result.and_then(|result| result.failure_reason),
        run_dir: dir.display().to_string(),
    }
}

/// The directory of the run with id `id`.
fn find(state: &AppState, id: &str) -> Option<RunEntry> {
    if id.is_empty() || !id.chars().all(|c| c.is_ascii_alphanumeric() || c == '-') {
        return None;
    }
    super::all_runs(&state.options.runs_dir).into_iter().find(|run| run.run_id == id)
}

/// A run and its stages.
#[utoipa::path(get, path = "/api/v1/runs/{id}", params(("id" = String, Path, description = "The run id")),
    responses((status = 200, body = RunDetail), (status = 404, body = ApiError)))]
async fn get_run(State(state): State<Arc<AppState>>, UrlPath(id): UrlPath<String>) -> Response {
    let Some(run) = find(&state, &id) else {
        return error(StatusCode::NOT_FOUND, "not_found", format!("no run `{id}`"));
    };
    let stages = crate::run_dir::RunView::open(&run.dir)
        .map(|view| {
            view.stages()
                .into_iter()
                .map(|stage| StageInfo {
                    node_id: stage.node_id,
                    visits: stage.visits,
                    status: stage.status.map(|status| status.as_str().to_string()),
                    duration_ms: stage.duration_ms,
                })
                .collect()
        })
        .unwrap_or_default();
    let gate = super::waiting_gate(&run.dir).map(|gate| GateInfo {
        id: gate.id,
        question: gate.question,
        choices: gate
            .choices
            .into_iter()
            .map(|choice| ChoiceInfo { key: choice.key, label: choice.label, target: choice.target })
            .collect(),
        freeform: gate.freeform,
    });
    Json(RunDetail { run: summary(&run.dir, &run.run_id), stages, gate }).into_response()
}

/// Starts a run: it is queued, and runs when a place is free (`max_concurrent_runs`).
#[utoipa::path(post, path = "/api/v1/runs", request_body = NewRun,
    responses((status = 202, body = RunCreated), (status = 400, body = ApiError), (status = 422, body = ApiError)))]
async fn create_run(
    State(state): State<Arc<AppState>>,
    body: Result<Json<NewRun>, JsonRejection>,
) -> Response {
    let request = match body {
        Ok(Json(request)) => request,
        Err(rejection) => return error(StatusCode::BAD_REQUEST, "bad_request", rejection.body_text()),
    };
    match super::actions::submit_run(&state, &request.into()).await {
        Ok(id) => (StatusCode::ACCEPTED, Json(RunCreated { id, status: "queued".into() })).into_response(),
        Err(refused) => refusal(refused),
    }
}

impl From<NewRun> for super::actions::RunRequest {
    fn from(run: NewRun) -> Self {
        super::actions::RunRequest {
            workflow: run.workflow,
            source: run.source,
            goal: run.goal,
            inputs: run.inputs,
            labels: run.labels,
            workdir: run.workdir,
            simulate: run.simulate,
        }
    }
}

/// An action's refusal as the API's JSON error (with the validator's findings, when any).
fn refusal(refused: super::actions::ActionError) -> Response {
    let body = ApiError {
        error: ErrorBody {
            code: refused.code().into(),
            message: refused.to_string(),
            diagnostics: refused.diagnostics().to_vec(),
        },
    };
    (refused.status(), Json(body)).into_response()
}

/// Cancels a run: a queued one will not start; a running one is stopped as Ctrl-C would (it
/// ends interrupted and can be resumed).
#[utoipa::path(post, path = "/api/v1/runs/{id}/cancel", params(("id" = String, Path, description = "The run id")),
    responses((status = 202, body = RunCreated), (status = 404, body = ApiError), (status = 409, body = ApiError)))]
async fn cancel_run(State(state): State<Arc<AppState>>, UrlPath(id): UrlPath<String>) -> Response {
    let Some(run) = find(&state, &id) else {
        return error(StatusCode::NOT_FOUND, "not_found", format!("no run `{id}`"));
    };
    match super::actions::cancel(&id, &run.dir) {
        Ok(true) => {
            (StatusCode::ACCEPTED, Json(RunCreated { id, status: "canceled".into() })).into_response()
        }
        Ok(false) => {
            (StatusCode::ACCEPTED, Json(RunCreated { id, status: "canceling".into() })).into_response()
        }
        Err(refused) => refusal(refused),
    }
}

/// Answers the human gate a paused run waits at (`answer`: the target node of a choice; or
/// `text`, at a gate that takes free text) and resumes the run.
#[utoipa::path(post, path = "/api/v1/runs/{id}/answer", request_body = super::AnswerForm,
    params(("id" = String, Path, description = "The run id")),
    responses((status = 202, body = RunCreated), (status = 400, body = ApiError), (status = 404, body = ApiError),
        (status = 409, body = ApiError)))]
async fn answer_run(
    State(state): State<Arc<AppState>>,
    UrlPath(id): UrlPath<String>,
    body: Result<Json<super::AnswerForm>, JsonRejection>,
) -> Response {
    let form = match body {
        Ok(Json(form)) => form,
        Err(rejection) => return error(StatusCode::BAD_REQUEST, "bad_request", rejection.body_text()),
    };
    let Some(run) = find(&state, &id) else {
        return error(StatusCode::NOT_FOUND, "not_found", format!("no run `{id}`"));
    };
    match super::answer_gate(&state, &id, &run.dir, form) {
        Ok(()) => (StatusCode::ACCEPTED, Json(RunCreated { id, status: "resuming".into() })).into_response(),
        Err(refused) => error(refused.status(), refused.code(), refused.message()),
    }
}

/// Continues a paused, interrupted or crashed run from its last checkpoint (`fabro resume`).
#[utoipa::path(post, path = "/api/v1/runs/{id}/resume", params(("id" = String, Path, description = "The run id")),
    responses((status = 202, body = RunCreated), (status = 404, body = ApiError), (status = 409, body = ApiError)))]
async fn resume_run(State(state): State<Arc<AppState>>, UrlPath(id): UrlPath<String>) -> Response {
    let Some(run) = find(&state, &id) else {
        return error(StatusCode::NOT_FOUND, "not_found", format!("no run `{id}`"));
    };
    match super::actions::resume(&state, &id, &run.dir) {
        Ok(()) => (StatusCode::ACCEPTED, Json(RunCreated { id, status: "resuming".into() })).into_response(),
        Err(refused) => refusal(refused),
    }
}

/// Deletes a run's directory; refused while a process runs it.
#[utoipa::path(delete, path = "/api/v1/runs/{id}", params(("id" = String, Path, description = "The run id")),
    responses((status = 204), (status = 404, body = ApiError), (status = 409, body = ApiError)))]
async fn delete_run(State(state): State<Arc<AppState>>, UrlPath(id): UrlPath<String>) -> Response {
    let Some(run) = find(&state, &id) else {
        return error(StatusCode::NOT_FOUND, "not_found", format!("no run `{id}`"));
    };
    if matches!(RunState::of(&run.dir), RunState::Queued | RunState::Starting | RunState::Running) {
        return error(
            StatusCode::CONFLICT,
            "in_use",
            format!("run `{id}` is queued or running; cancel it first"),
        );
    }
    let deleted = match crate::run_dir::read_manifest(&run.dir) {
        Some(_) => crate::run_dir::housekeeping::delete_run(&run.dir).map_err(|problem| problem.to_string()),
        // A run that never started is its submission only.
        None => std::fs::remove_dir_all(&run.dir).map_err(|problem| problem.to_string()),
    };
    match deleted {
        Ok(()) => StatusCode::NO_CONTENT.into_response(),
        Err(problem) => error(StatusCode::CONFLICT, "in_use", problem),
    }
}

/// The run's events (each line of its `events.jsonl`) as server-sent events, each with its
/// `seq` as the event id: a client that reconnects with `Last-Event-ID` gets the events after it.
/// The stream ends when the run has settled and every event was sent.
#[utoipa::path(get, path = "/api/v1/runs/{id}/events", params(("id" = String, Path, description = "The run id")),
    responses((status = 200, content_type = "text/event-stream", description = "The run's events"), (status = 404, body = ApiError)))]
async fn run_events(
    State(state): State<Arc<AppState>>,
    UrlPath(id): UrlPath<String>,
    headers: HeaderMap,
) -> Response {
    let Some(run) = find(&state, &id) else {
        return error(StatusCode::NOT_FOUND, "not_found", format!("no run `{id}`"));
    };
    let after: u64 = headers
        .get("last-event-id")
        .and_then(|value| value.to_str().ok())
        .and_then(|text| text.trim().parse().ok())
        .unwrap_or(0);
    let events = LogTail::new(&run.dir.join(layout::EVENTS));
    let start = Follow { dir: run.dir, events, lines: VecDeque::new(), after, done: false };
    let stream = futures::stream::unfold(start, |mut follow| async move {
        loop {
            if let Some(text) = follow.lines.pop_front() {
                let seq = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|event| event["seq"].as_u64())
                    .unwrap_or(0);
                if seq != 0 && seq <= follow.after {
                    continue;
                }
                follow.after = follow.after.max(seq);
                let event = SseEvent::default().id(seq.to_string()).data(text);
                return Some((Ok::<_, std::convert::Infallible>(event), follow));
            }
            if follow.done {
                return None;
            }
            // Settled before the read: what is read now is all there will be.
            let settled = RunState::of(&follow.dir).is_settled();
            let new = follow.events.read_new().lines;
            if new.is_empty() {
                if settled {
                    follow.done = true;
                    continue;
                }
                tokio::time::sleep(super::EVENT_POLL).await;
            }
            follow.lines.extend(new);
        }
    });
    Sse::new(stream).keep_alive(axum::response::sse::KeepAlive::default()).into_response()
}

/// Where an event stream is in a run's `events.jsonl`.
struct Follow {
    dir: PathBuf,
    events: LogTail,
    /// Lines read and not yet sent.
    lines: VecDeque<String>,
    /// Events up to this seq were sent (before a reconnection, by `Last-Event-ID`): a log read
    /// again from its start does not send them twice.
    after: u64,
    done: bool,
}

/// Pauses a running run once the stage in flight ends (it can be resumed from the next stage);
/// `cancel` stops it at once instead.
#[utoipa::path(post, path = "/api/v1/runs/{id}/interrupt", params(("id" = String, Path, description = "The run id")),
    responses((status = 202, body = RunCreated), (status = 404, body = ApiError), (status = 409, body = ApiError)))]
async fn interrupt_run(State(state): State<Arc<AppState>>, UrlPath(id): UrlPath<String>) -> Response {
    let Some(run) = find(&state, &id) else {
        return error(StatusCode::NOT_FOUND, "not_found", format!("no run `{id}`"));
    };
    match super::actions::interrupt(&id, &run.dir) {
        Ok(()) => {
            (StatusCode::ACCEPTED, Json(RunCreated { id, status: "interrupting".into() })).into_response()
        }
        Err(refused) => refusal(refused),
    }
}

/// Where a rewind goes back to, or a fork starts from.
#[derive(Debug, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct HistoryTarget {
    /// `NODE` (its last visit) or `NODE@VISIT`.
    pub to: String,
    /// Resume the run right away from there.
    #[serde(default)]
    pub resume: bool,
}

/// A rewound or forked run.
#[derive(Debug, Serialize, ToSchema)]
pub struct HistoryMoved {
    /// The run that goes on: the same run for a rewind, the new one for a fork.
    pub id: String,
    /// `rewound`, `forked`, or `resuming` when asked to resume.
    pub status: String,
    /// The stage it goes on at.
    pub next_node: String,
}

/// Which history operation a request asks for.
#[derive(Clone, Copy)]
enum HistoryOperation {
    Rewind,
    Fork,
}

/// Rewinds or forks the run `id` as `body` says, then resumes the run that goes on when asked:
/// what both routes share.
async fn move_history(
    state: Arc<AppState>,
    id: String,
    body: Result<Json<HistoryTarget>, JsonRejection>,
    operation: HistoryOperation,
) -> Response {
    let HistoryTarget { to, resume } = match body {
        Ok(Json(target)) => target,
        Err(rejection) => return error(StatusCode::BAD_REQUEST, "bad_request", rejection.body_text()),
    };
    let Some(run) = find(&state, &id) else {
        return error(StatusCode::NOT_FOUND, "not_found", format!("no run `{id}`"));
    };
    // The run that goes on: its id, directory and next stage.
    let moved = tokio::task::spawn_blocking({
        let state = state.clone();
        move || match operation {
            HistoryOperation::Rewind => super::actions::rewind(&state, &id, &run.dir, &to)
                .map(|rewound| (id, run.dir, rewound.next_node)),
            HistoryOperation::Fork => super::actions::fork(&run.dir, &to)
                .map(|forked| (forked.run_id, forked.run_dir, forked.next_node)),
        }
    })
    .await;
    let (id, dir, next_node) = match moved {
        Ok(Ok(moved)) => moved,
        Ok(Err(refused)) => return refusal(refused),
        Err(join) => return error(StatusCode::INTERNAL_SERVER_ERROR, "internal", join.to_string()),
    };
    let (mut status, code) = match operation {
        HistoryOperation::Rewind => ("rewound", StatusCode::OK),
        HistoryOperation::Fork => ("forked", StatusCode::CREATED),
    };
    if resume {
        if let Err(refused) = super::actions::resume(&state, &id, &dir) {
            return refusal(refused);
        }
        status = "resuming";
    }
    (code, Json(HistoryMoved { id, status: status.into(), next_node })).into_response()
}

/// Moves a run that is not running back to the state right after a stage visit, in place (what
/// came after moves into `rewound/`; nothing is deleted), as `fabro rewind` does.
#[utoipa::path(post, path = "/api/v1/runs/{id}/rewind", request_body = HistoryTarget,
    params(("id" = String, Path, description = "The run id")),
    responses((status = 200, body = HistoryMoved), (status = 400, body = ApiError), (status = 404, body = ApiError),
        (status = 409, body = ApiError)))]
async fn rewind_run(
    State(state): State<Arc<AppState>>,
    UrlPath(id): UrlPath<String>,
    body: Result<Json<HistoryTarget>, JsonRejection>,
) -> Response {
    move_history(state, id, body, HistoryOperation::Rewind).await
}

/// Copies a run's state right after a stage visit into a new run in the runs directory (the run
/// itself is only read), as `fabro fork` does; the new run's id.
#[utoipa::path(post, path = "/api/v1/runs/{id}/fork", request_body = HistoryTarget,
    params(("id" = String, Path, description = "The run id")),
    responses((status = 201, body = HistoryMoved), (status = 400, body = ApiError), (status = 404, body = ApiError),
        (status = 409, body = ApiError)))]
async fn fork_run(
    State(state): State<Arc<AppState>>,
    UrlPath(id): UrlPath<String>,
    body: Result<Json<HistoryTarget>, JsonRejection>,
) -> Response {
    move_history(state, id, body, HistoryOperation::Fork).await
}

/// A stage visit: its status record and the files in its directory.
#[derive(Debug, Serialize, ToSchema)]
pub struct StageVisit {
    pub node_id: String,
    pub visit: u32,
    /// Its `status.json` as the stage left it (none while it runs).
    #[schema(value_type = Object)]
    pub status: Option<serde_json::Value>,
    /// The files of its directory (paths relative to it), for `.../files/{path}`.
    pub files: Vec<StageFile>,
}

#[derive(Debug, Serialize, ToSchema)]
pub struct StageFile {
    pub path: String,
    pub bytes: u64,
}

/// The largest stage file the API returns.
const MAX_STAGE_FILE: u64 = 16 << 20;
/// The most files a stage visit lists.
const MAX_STAGE_FILES: usize = 10_000;

/// The directory of stage visit `node@visit` of the run `id`: real directories all the way (no
/// link a stage may have planted), or the refusal.
fn visit_dir(state: &AppState, id: &str, node: &str, visit: u32) -> Result<PathBuf, Refusal> {
    let not_found = || {
        Refusal(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("run `{id}` has no visit {visit} of stage `{node}`"),
        )
    };
    let run = find(state, id)
        .ok_or_else(|| Refusal(StatusCode::NOT_FOUND, "not_found", format!("no run `{id}`")))?;
    if node.is_empty() || node.contains(['/', '\\']) || node.starts_with('.') {
        return Err(not_found());
    }
    let dir = layout::node_dir(&run.dir, node).join(visit.to_string());
    let real_dirs = [
        layout::node_dir(&run.dir, node).parent().map(Path::to_path_buf),
        Some(layout::node_dir(&run.dir, node)),
        Some(dir.clone()),
    ];
    let all_real = real_dirs
        .iter()
        .flatten()
        .all(|path| std::fs::symlink_metadata(path).is_ok_and(|meta| meta.is_dir()));
    if all_real {
        Ok(dir)
    } else {
        Err(not_found())
    }
}

/// A stage visit's status and files.
#[utoipa::path(get, path = "/api/v1/runs/{id}/stages/{node}/{visit}",
    params(("id" = String, Path, description = "The run id"), ("node" = String, Path, description = "The stage's node id"),
        ("visit" = u32, Path, description = "The visit, from 1")),
    responses((status = 200, body = StageVisit), (status = 404, body = ApiError)))]
async fn stage_visit(
    State(state): State<Arc<AppState>>,
    UrlPath((id, node, visit)): UrlPath<(String, String, u32)>,
) -> Response {
    let dir = match visit_dir(&state, &id, &node, visit) {
        Ok(dir) => dir,
        Err(refused) => return refused.into_response(),
    };
    let status =
        crate::regular_file::read_to_string(dir.join(layout::STATUS), crate::regular_file::FileKind::Record)
            .ok()
            .and_then(|text| serde_json::from_str(&text).ok());
    let mut files = Vec::new();
    // Not following links: a link is listed as what it is, never read through.
    for entry in walkdir::WalkDir::new(&dir).follow_links(false).min_depth(1).into_iter().flatten() {
        if files.len() >= MAX_STAGE_FILES {
            break;
        }
        if !entry.file_type().is_file() {
            continue;
        }
        let Ok(relative) = entry.path().strip_prefix(&dir) else { continue };
        let bytes = entry.metadata().map(|meta| meta.len()).unwrap_or_default();
        files.push(StageFile { path: relative.display().to_string(), bytes });
    }
    files.sort_by(|a, b| a.path.cmp(&b.path));
    Json(StageVisit { node_id: node, visit, status, files }).into_response()
}

/// One file of a stage visit's directory, as it is (`application/octet-stream`; text files as
/// `text/plain`).
#[utoipa::path(get, path = "/api/v1/runs/{id}/stages/{node}/{visit}/files/{path}",
    params(("id" = String, Path, description = "The run id"), ("node" = String, Path, description = "The stage's node id"),
        ("visit" = u32, Path, description = "The visit, from 1"), ("path" = String, Path, description = "The file, relative to the visit's directory")),
    responses((status = 200, description = "The file's bytes"), (status = 404, body = ApiError), (status = 413, body = ApiError)))]
async fn stage_file(
    State(state): State<Arc<AppState>>,
    UrlPath((id, node, visit, path)): UrlPath<(String, String, u32, String)>,
) -> Response {
    let dir = match visit_dir(&state, &id, &node, visit) {
        Ok(dir) => dir,
        Err(refused) => return refused.into_response(),
    };
    let not_found = || {
        error(
            StatusCode::NOT_FOUND,
            "not_found",
            format!("stage `{node}` visit {visit} has no file `{path}`"),
        )
    };
    let relative = Path::new(&path);
    if path.is_empty() || !relative.components().all(|part| matches!(part, Component::Normal(_))) {
        return not_found();
    }
    // Every directory on the way is a real one; the file itself is opened without following.
    let mut walked = dir.clone();
    let parts: Vec<_> = relative.components().collect();
    for part in &parts[..parts.len() - 1] {
        walked.push(part);
        if !std::fs::symlink_metadata(&walked).is_ok_and(|meta| meta.is_dir()) {
            return not_found();
        }
    }
    let file_path = dir.join(relative);
    let Ok(mut file) = crate::regular_file::open(&file_path, false) else { return not_found() };
    match file.metadata() {
        Ok(meta) if !meta.is_file() => return not_found(),
        Ok(meta) if meta.len() > MAX_STAGE_FILE => {
            return error(
                StatusCode::PAYLOAD_TOO_LARGE,
                "too_large",
                format!(
                    "`{path}` is {} bytes, more than the {} the API returns; read it in the run directory",
                    meta.len(),
                    MAX_STAGE_FILE
                ),
            )
        }
        Ok(_) => {}
        Err(_) => return not_found(),
    }
    let mut bytes = Vec::new();
    if std::io::Read::read_to_end(&mut std::io::Read::take(&mut file, MAX_STAGE_FILE), &mut bytes).is_err() {
        return not_found();
    }
    let content_type = if std::str::from_utf8(&bytes).is_ok() {
        "text/plain; charset=utf-8"
    } else {
        "application/octet-stream"
    };
    ([(axum::http::header::CONTENT_TYPE, content_type)], bytes).into_response()
}
