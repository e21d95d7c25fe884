//! The web view's forms: start a run, cancel, interrupt, resume, rewind or fork one. Each is a plain HTML form
//! that posts and is redirected to the run's page (so it works without JavaScript), takes the
//! same action as the API (see [`super::actions`]), and passes the same guard: the token off
//! loopback, and a request from the server's own pages only (`Origin` or `Referer`).

use std::sync::Arc;

use axum::extract::{Form, Path as UrlPath, Query, State};
use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Redirect, Response};

use super::actions::ActionError;
use super::AppState;
use crate::report::run_page::escape;

#[derive(serde::Deserialize)]
pub(super) struct NewRunQuery {
    workflow: Option<String>,
}

/// `GET /runs/new`: the form to start a run.
pub(super) async fn new_run(
    State(state): State<Arc<AppState>>,
    Query(query): Query<NewRunQuery>,
) -> Response {
    let root = state.options.workflows_dir.as_deref();
    Html(super::start_page::start_page(root, query.workflow.as_deref(), None)).into_response()
}

/// `POST /runs`: queues the run the form describes and shows its page.
pub(super) async fn start_run(
    State(state): State<Arc<AppState>>,
    Form(fields): Form<Vec<(String, String)>>,
) -> Response {
    let root = state.options.workflows_dir.clone();
    let chosen = fields.iter().find(|(name, _)| name == "workflow").map(|(_, value)| value.clone());
    let refused = |status: StatusCode, why: String| {
        let page = super::start_page::start_page(root.as_deref(), chosen.as_deref(), Some(&why));
        (status, Html(page)).into_response()
    };
    if root.is_none() {
        return refused(StatusCode::BAD_REQUEST, "this service starts no workflow (no --workflows)".into());
    }
    let request = match super::start_page::run_request(&fields) {
        Ok(request) => request,
        Err(why) => return refused(StatusCode::BAD_REQUEST, why),
    };
    match super::actions::submit_run(&state, &request).await {
        Ok(id) => Redirect::to(&format!("/runs/{id}")).into_response(),
        Err(problem) => {
            let mut why = problem.to_string();
            for diagnostic in problem.diagnostics() {
                why.push('\n');
                why.push_str(diagnostic);
            }
            refused(problem.status(), why)
        }
    }
}

/// A refused action as a page that says why, with the way back to the run.
fn refusal(id: &str, problem: ActionError) -> Response {
    let body = format!(
        "<h1>Not done</h1>\n<p class=\"failed\" id=\"refusal\">{}</p>\n<p><a href=\"/runs/{}\">back to the run</a></p>\n",
        escape(&problem.to_string()),
        escape(id)
    );
    (problem.status(), Html(super::pages::page("not done", &body))).into_response()
}

fn no_run(id: &str) -> Response {
    refusal(id, ActionError::NotFound(format!("no run `{id}`")))
}

/// `POST /runs/<id>/cancel`.
pub(super) async fn cancel(State(state): State<Arc<AppState>>, UrlPath(id): UrlPath<String>) -> Response {
    let Some(dir) = super::any_run_dir(&state, &id) else { return no_run(&id) };
    match super::actions::cancel(&id, &dir) {
        Ok(_) => Redirect::to(&format!("/runs/{id}")).into_response(),
        Err(problem) => refusal(&id, problem),
    }
}

/// `POST /runs/<id>/resume`.
pub(super) async fn resume(State(state): State<Arc<AppState>>, UrlPath(id): UrlPath<String>) -> Response {
    let Some(dir) = super::run_dir(&state, &id) else { return no_run(&id) };
    match super::actions::resume(&state, &id, &dir) {
        Ok(()) => Redirect::to(&format!("/runs/{id}")).into_response(),
        Err(problem) => refusal(&id, problem),
    }
}

/// `POST /runs/<id>/interrupt`: pause once the stage in flight ends.
pub(super) async fn interrupt(State(state): State<Arc<AppState>>, UrlPath(id): UrlPath<String>) -> Response {
    let Some(dir) = super::run_dir(&state, &id) else { return no_run(&id) };
    match super::actions::interrupt(&id, &dir) {
        Ok(()) => Redirect::to(&format!("/runs/{id}")).into_response(),
        Err(problem) => refusal(&id, problem),
    }
}

/// `POST /runs/<id>/fork`: a new run from right after a stage visit (when asked, resumed); its
/// page.
pub(super) async fn fork(
    State(state): State<Arc<AppState>>,
    UrlPath(id): UrlPath<String>,
    Form(form): Form<RewindForm>,
) -> Response {
    let Some(dir) = super::run_dir(&state, &id) else { return no_run(&id) };
    let forked = tokio::task::spawn_blocking(move || {
        super::actions::fork(&dir, &form.to).map(|forked| (forked, form.resume))
    });
    let (forked, resume) = match forked.await {
        Ok(Ok(forked)) => forked,
        Ok(Err(problem)) => return refusal(&id, problem),
        Err(join) => return refusal(&id, ActionError::Internal(join.to_string())),
    };
    if resume.is_some_and(|value| !value.is_empty()) {
        if let Err(problem) = super::actions::resume(&state, &forked.run_id, &forked.run_dir) {
            return refusal(&forked.run_id, problem);
        }
    }
    Redirect::to(&format!("/runs/{}", forked.run_id)).into_response()
}

#[derive(serde::Deserialize)]
pub(super) struct RewindForm {
    /// `NODE@VISIT`.
    to: String,
    /// Resume right after the rewind.
    resume: Option<String>,
}

/// `POST /runs/<id>/rewind`: back to right after a stage visit, then (when asked) resumed.
pub(super) async fn rewind(
    State(state): State<Arc<AppState>>,
    UrlPath(id): UrlPath<String>,
    Form(form): Form<RewindForm>,
) -> Response {
    let Some(dir) = super::run_dir(&state, &id) else { return no_run(&id) };
    let rewound = {
        let (state, id, dir) = (state.clone(), id.clone(), dir.clone());
        tokio::task::spawn_blocking(move || super::actions::rewind(&state, &id, &dir, &form.to)).await
    };
    match rewound {
        Ok(Ok(_)) => {}
        Ok(Err(problem)) => return refusal(&id, problem),
        Err(join) => return refusal(&id, ActionError::Internal(join.to_string())),
    }
    if form.resume.is_some_and(|value| !value.is_empty()) {
        if let Err(problem) = super::actions::resume(&state, &id, &dir) {
            return refusal(&id, problem);
        }
    }
    Redirect::to(&format!("/runs/{id}")).into_response()
}

/// `GET /runs/<id>/files`: what the run changed.
pub(super) async fn files(State(state): State<Arc<AppState>>, UrlPath(id): UrlPath<String>) -> Response {
    let Some(dir) = super::run_dir(&state, &id) else { return super::not_found("no such run") };
    // Off the async workers: a diff reads the work directory.
    match tokio::task::spawn_blocking(move || super::files_page::files_changed(&dir, &id)).await {
        Ok(page) => Html(page).into_response(),
        Err(error) => {
            (StatusCode::INTERNAL_SERVER_ERROR, format!("cannot read the changes: {error}\n")).into_response()
        }
    }
}
