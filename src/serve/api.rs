//! The run service's HTTP API under `/api/v1` (JSON; its OpenAPI 3 document at
//! `/api/v1/openapi.json`, generated from these handlers and types): submit a run, list runs,
//! read one with its stages, cancel one, follow its events as server-sent events that resume from
//! `Last-Event-ID`. A submitted run is queued (see [`super::queue`]) and runs in a `fabro run`
//! process of its own; everything the API answers is read from the run directories, so a second
//! service over the same runs directory answers the same.
//!
//! Errors are `{"error": {"code": "...", "message": "..."}}` with a stable `code`.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
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
    /// `not_waiting`, `already_answered`, `in_use`, `forbidden`, `unauthorized`, `internal`.
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
        workflow: manifest.as_ref().map(|manifest| manifest.workflow.clone()),
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
    Json(RunDetail { run: summary(&run.dir, &run.run_id), stages }).into_response()
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
    let start = Follow { dir: run.dir, offset: 0, pending: Vec::new(), after, done: false };
    let stream = futures::stream::unfold(start, |mut follow| async move {
        loop {
            if let Some(end) = follow.pending.iter().position(|&b| b == b'\n') {
                let line: Vec<u8> = follow.pending.drain(..=end).collect();
                let text = String::from_utf8_lossy(&line[..end]).into_owned();
                let seq = serde_json::from_str::<serde_json::Value>(&text)
                    .ok()
                    .and_then(|event| event["seq"].as_u64())
                    .unwrap_or(0);
                if seq != 0 && seq <= follow.after {
                    continue;
                }
                let event = SseEvent::default().id(seq.to_string()).data(text);
                return Some((Ok::<_, std::convert::Infallible>(event), follow));
            }
            if follow.done {
                return None;
            }
            // Settled before the read: what is read now is all there will be.
            let settled = RunState::of(&follow.dir).is_settled();
            let chunk = super::read_from(&follow.dir.join(layout::EVENTS), follow.offset);
            follow.offset += chunk.len() as u64;
            follow.pending.extend_from_slice(&chunk);
            if chunk.is_empty() {
                if settled {
                    follow.done = true;
                    continue;
                }
                tokio::time::sleep(super::EVENT_POLL).await;
            }
        }
    });
    Sse::new(stream).keep_alive(axum::response::sse::KeepAlive::default()).into_response()
}

/// Where an event stream is in a run's `events.jsonl`.
struct Follow {
    dir: PathBuf,
    offset: u64,
    pending: Vec<u8>,
    /// Events up to this seq were sent before (`Last-Event-ID`).
    after: u64,
    done: bool,
}
