//! What the run service does to runs, shared by the API (JSON) and the web view (forms that post
//! and redirect): submit a run (a workflow under the `--workflows` root or DOT text, with inputs,
//! goal and labels), resume, cancel and rewind one. Each action is refused with an
//! [`ActionError`] that says why, which the API turns into its JSON error and the pages into text.

use std::collections::BTreeMap;
use std::path::{Component, Path, PathBuf};
use std::sync::atomic::Ordering;

use axum::http::StatusCode;

use super::AppState;
use crate::run_dir::submission::{RunState, SubmissionState};
use crate::run_status::RunStatus;

/// Why an action on a run was not taken.
#[derive(Debug, thiserror::Error)]
pub enum ActionError {
    #[error("{0}")]
    BadRequest(String),
    #[error("{0}")]
    NotFound(String),
    /// The workflow does not validate: the validator's findings.
    #[error("the workflow does not validate; the run was not started")]
    InvalidWorkflow(Vec<String>),
    #[error("{0}")]
    NotCancelable(String),
    #[error("{0}")]
    NotResumable(String),
    /// Interrupt refused: the run is not running.
    #[error("{0}")]
    NotRunning(String),
    /// Rewind or fork refused: the run is running or resuming, or has no checkpoint history.
    #[error("{0}")]
    NotRewindable(String),
    #[error("{0}")]
    Internal(String),
}

impl ActionError {
    pub fn status(&self) -> StatusCode {
        match self {
            ActionError::BadRequest(_) => StatusCode::BAD_REQUEST,
            ActionError::NotFound(_) => StatusCode::NOT_FOUND,
            ActionError::InvalidWorkflow(_) => StatusCode::UNPROCESSABLE_ENTITY,
            ActionError::NotCancelable(_)
            | ActionError::NotResumable(_)
            | ActionError::NotRunning(_)
            | ActionError::NotRewindable(_) => StatusCode::CONFLICT,
            ActionError::Internal(_) => StatusCode::INTERNAL_SERVER_ERROR,
        }
    }

    /// The API's stable code for it.
    pub fn code(&self) -> &'static str {
        match self {
            ActionError::BadRequest(_) => "bad_request",
            ActionError::NotFound(_) => "not_found",
            ActionError::InvalidWorkflow(_) => "invalid_workflow",
            ActionError::NotCancelable(_) => "not_cancelable",
            ActionError::NotResumable(_) => "not_resumable",
            ActionError::NotRunning(_) => "not_running",
            ActionError::NotRewindable(_) => "not_rewindable",
            ActionError::Internal(_) => "internal",
        }
    }

    /// The validator's findings, for [`ActionError::InvalidWorkflow`].
    pub fn diagnostics(&self) -> &[String] {
        match self {
            ActionError::InvalidWorkflow(problems) => problems,
            _ => &[],
        }
    }
}

/// A run to submit, as the API's JSON or the web view's form gives it.
#[derive(Debug, Default, Clone)]
pub struct RunRequest {
    /// A workflow file under the `--workflows` root (relative to it).
    pub workflow: Option<String>,
    /// Or the workflow's DOT text.
    pub source: Option<String>,
    pub goal: Option<String>,
    pub inputs: BTreeMap<String, serde_json::Value>,
    pub labels: BTreeMap<String, String>,
    /// Where the run works; default: where the service was started.
    pub workdir: Option<String>,
    pub simulate: bool,
}

/// Checks the workflow of `request` with its inputs and goal, and queues the run; its id.
pub async fn submit_run(state: &AppState, request: &RunRequest) -> Result<String, ActionError> {
    let id = crate::run_launcher::new_run_id();
    let root = state.options.runs_dir.join(&id);
    let workflow = workflow_file(state, request, &id)?;
    let mut loader = crate::Loader::new().with_inputs(request.inputs.clone());
    if let Some(goal) = &request.goal {
        loader = loader.with_goal(goal.clone());
    }
    let checked = tokio::task::spawn_blocking({
        let workflow = workflow.clone();
        move || loader.load_file(&workflow)
    })
    .await;
    let mut name = String::new();
    let problems = match checked {
        Ok(Ok(checked)) => {
            name = checked.workflow.name().to_string();
            checked
                .diagnostics
                .iter()
                .filter(|diagnostic| diagnostic.is_error())
                .map(|diagnostic| {
                    let at = diagnostic.span.map(|span| checked.workflow.source().location(span.start));
                    let at = at.map(|at| format!("{}:{}: ", at.line, at.column)).unwrap_or_default();
                    format!("{at}{} [{}]", diagnostic.message, diagnostic.rule)
                })
                .collect::<Vec<_>>()
        }
        Ok(Err(crate::LoadError::Syntax { error, file })) => {
            let at = file.location(error.span.start);
            vec![format!("{}:{}: {} [syntax]", at.line, at.column, error.kind)]
        }
        Ok(Err(problem)) => vec![problem.to_string()],
        Err(join) => return Err(ActionError::Internal(join.to_string())),
    };
    if !problems.is_empty() {
        return Err(ActionError::InvalidWorkflow(problems));
    }
    let cwd = match &request.workdir {
        Some(dir) if Path::new(dir).is_dir() => PathBuf::from(dir),
        Some(dir) => return Err(ActionError::BadRequest(format!("workdir `{dir}` is not a directory"))),
        None => state.options.service_dir.clone(),
    };
    let mut args = vec![
        "run".to_string(),
        workflow.display().to_string(),
        "--run-dir".into(),
        root.display().to_string(),
        "--run-id".into(),
        id.clone(),
        "--workdir".into(),
        cwd.display().to_string(),
        "-q".into(),
    ];
    if request.simulate {
        args.push("--simulate".into());
    }
    if let Some(goal) = &request.goal {
        args.extend(["--goal".into(), goal.clone()]);
    }
    for (key, value) in &request.inputs {
        args.extend(["--input".into(), format!("{key}={}", crate::graph::inputs::text_of(value))]);
    }
    for (key, value) in &request.labels {
        args.extend(["--label".into(), format!("{key}={value}")]);
    }
    let run = crate::run_launcher::RunToSubmit {
        run_id: &id,
        workflow: &name,
        args,
        cwd: &state.options.service_dir,
        by: super::queue::SERVICE,
        state: SubmissionState::Queued,
    };
    crate::run_launcher::submit(&root, run).map_err(|problem| ActionError::Internal(problem.to_string()))?;
    state.queue.notify_one();
    Ok(id)
}

/// The workflow file a request names: under the workflows root (no `..`, no absolute path, no
/// link out of it), or its source written beside the service's runs.
fn workflow_file(state: &AppState, request: &RunRequest, id: &str) -> Result<PathBuf, ActionError> {
    match (&request.workflow, &request.source) {
        (Some(_), Some(_)) => Err(ActionError::BadRequest("give `workflow` or `source`, not both".into())),
        (None, None) => Err(ActionError::BadRequest(
            "give `workflow` (a file under the workflows directory) or `source` (DOT text)".into(),
        )),
        (Some(name), None) => {
            let Some(root) = &state.options.workflows_dir else {
                return Err(ActionError::BadRequest(
                    "this service was started without --workflows: send the workflow as `source`".into(),
                ));
            };
            workflow_under(root, name)
        }
        (None, Some(source)) => {
            let dir = state.options.runs_dir.join(super::queue::SOURCES_DIR);
            let path = dir.join(format!("{id}.dot"));
            std::fs::create_dir_all(&dir)
                .and_then(|()| std::fs::write(&path, source))
                .map_err(|problem| ActionError::Internal(problem.to_string()))?;
            Ok(path)
        }
    }
}

/// The file `name` (relative) under the workflows root `root`: no `..`, not absolute, no link
/// out of the root.
pub fn workflow_under(root: &Path, name: &str) -> Result<PathBuf, ActionError> {
    let relative = Path::new(name);
    if name.is_empty() || !relative.components().all(|part| matches!(part, Component::Normal(_))) {
        return Err(ActionError::BadRequest(format!(
            "`{name}` must be a path under the workflows directory (no `..`, not absolute)"
        )));
    }
    let inside = match (std::fs::canonicalize(root.join(relative)), std::fs::canonicalize(root)) {
        (Ok(path), Ok(root)) if path.starts_with(&root) && path.is_file() => Some(path),
        _ => None,
    };
    inside.ok_or_else(|| ActionError::NotFound(format!("no workflow `{name}` under {}", root.display())))
}

/// The most workflow files the web view lists, and how deep it looks for them.
const MOST_WORKFLOWS: usize = 500;
const WORKFLOW_DEPTH: usize = 4;

/// The workflow files (`*.dot`) under the workflows root, relative to it, sorted; links are not
/// followed, hidden directories not entered.
pub fn workflows_under(root: &Path) -> Vec<String> {
    fn walk(root: &Path, dir: &Path, depth: usize, found: &mut Vec<String>) {
        let Ok(entries) = std::fs::read_dir(dir) else { return };
        let mut entries: Vec<_> = entries.flatten().collect();
        entries.sort_by_key(|entry| entry.file_name());
        for entry in entries {
            if found.len() >= MOST_WORKFLOWS {
                return;
            }
            let Ok(kind) = entry.file_type() else { continue };
            let name = entry.file_name();
            let Some(name) = name.to_str().filter(|name| !name.starts_with('.')) else { continue };
            let path = entry.path();
            if kind.is_dir() && depth < WORKFLOW_DEPTH {
                walk(root, &path, depth + 1, found);
            } else if kind.is_file() && name.ends_with(".dot") {
                if let Some(relative) = path.strip_prefix(root).ok().and_then(Path::to_str) {
                    found.push(relative.to_string());
                }
            }
        }
    }
    let mut found = Vec::new();
    walk(root, root, 0, &mut found);
    found
}

/// Cancels run `id` (in `dir`): a queued one will not start; a running one is stopped as Ctrl-C
/// would (it ends interrupted and can be resumed). Whether it was dequeued (else signalled).
pub fn cancel(id: &str, dir: &Path) -> Result<bool, ActionError> {
    match crate::run_launcher::cancel(dir) {
        Ok(crate::run_launcher::Canceled::Dequeued) => Ok(true),
        Ok(crate::run_launcher::Canceled::Signalled(_)) => Ok(false),
        Err(crate::run_launcher::LaunchError::NotCancelable { state, .. }) => {
            Err(ActionError::NotCancelable(format!("run `{id}` is {state}: there is nothing to cancel")))
        }
        Err(problem) => Err(ActionError::Internal(problem.to_string())),
    }
}

/// Asks run `id` (in `dir`, or the directory a `loop_restart` took it to) to pause once the
/// stage in flight ends; it then resumes at the next stage.
pub fn interrupt(id: &str, dir: &Path) -> Result<(), ActionError> {
    let dir = crate::run_launcher::latest_dir(dir);
    let run_state = RunState::of(&dir);
    if run_state != RunState::Running {
        let message = format!("run `{id}` is {}: only a running run is interrupted", run_state.as_str());
        return Err(ActionError::NotRunning(message));
    }
    crate::run_dir::request_interrupt(&dir).map_err(|problem| ActionError::Internal(problem.to_string()))
}

/// Whether a run in this state continues with `fabro resume`: paused, interrupted or crashed.
pub fn is_resumable(state: &RunState) -> bool {
    matches!(state, RunState::Crashed | RunState::Ended(RunStatus::Paused | RunStatus::Interrupted))
}

/// Continues run `id` (in `dir`) from its last checkpoint with `fabro resume`, in the background;
/// one resume per run at a time.
pub fn resume(state: &AppState, id: &str, dir: &Path) -> Result<(), ActionError> {
    let run_state = RunState::of(dir);
    if !is_resumable(&run_state) {
        return Err(ActionError::NotResumable(format!(
            "run `{id}` is {}: only a paused, interrupted or crashed run resumes",
            run_state.as_str()
        )));
    }
    let mut resumes = state.resumes.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if resumes.get(id).is_some_and(|running| running.load(Ordering::SeqCst)) {
        return Err(ActionError::NotResumable(format!("run `{id}` is resuming already")));
    }
    let running = super::resume(&state.options.fabro_exe, dir, None)
        .map_err(|problem| ActionError::Internal(format!("cannot start fabro resume: {problem}")))?;
    resumes.insert(id.to_string(), running);
    Ok(())
}

/// Moves run `id` (in `dir`) back to right after stage visit `target` (`NODE` or `NODE@VISIT`);
/// refused while a process runs it or resumes it. What came later is kept under `rewound/`.
pub fn rewind(
    state: &AppState,
    id: &str,
    dir: &Path,
    target: &str,
) -> Result<crate::run_dir::Rewound, ActionError> {
    let run_state = RunState::of(dir);
    if !run_state.is_settled() {
        return Err(ActionError::NotRewindable(format!(
            "run `{id}` is {}: cancel it before rewinding it",
            run_state.as_str()
        )));
    }
    let resumes = state.resumes.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
    if resumes.get(id).is_some_and(|running| running.load(Ordering::SeqCst)) {
        return Err(ActionError::NotRewindable(format!("run `{id}` is resuming: wait for it to stop")));
    }
    let (node, visit) = crate::run_dir::parse_target(target)?;
    Ok(crate::run_dir::rewind(dir, &node, visit)?)
}

/// Copies the state of run `id` (in `dir`) right after stage visit `target` into a new run in
/// the runs directory, ready to resume; the run itself is only read.
pub fn fork(dir: &Path, target: &str) -> Result<crate::run_dir::Forked, ActionError> {
    let (node, visit) = crate::run_dir::parse_target(target)?;
    Ok(crate::run_dir::fork(dir, &node, visit, None)?)
}

impl From<crate::run_dir::HistoryError> for ActionError {
    /// A point the run does not have is a bad request; a run that cannot go back, a conflict.
    fn from(problem: crate::run_dir::HistoryError) -> ActionError {
        use crate::run_dir::HistoryError;
        match problem {
            HistoryError::BadTarget { .. }
            | HistoryError::UnknownNode { .. }
            | HistoryError::NoSuchVisit { .. }
            | HistoryError::NothingToContinue { .. } => ActionError::BadRequest(problem.to_string()),
            HistoryError::NoHistory { .. }
            | HistoryError::RunDir(crate::run_dir::RunDirError::Locked { .. }) => {
                ActionError::NotRewindable(problem.to_string())
            }
            other => ActionError::Internal(other.to_string()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn workflows_are_files_under_the_root_and_never_outside_it() {
        let root = tempfile::tempdir().unwrap();
        let outside = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(root.path().join("team/.hidden")).unwrap();
        for file in ["a.dot", "team/b.dot", "team/.hidden/c.dot", "notes.md"] {
            std::fs::write(root.path().join(file), "digraph x {}").unwrap();
        }
        std::fs::write(outside.path().join("secret.dot"), "digraph s {}").unwrap();
        std::os::unix::fs::symlink(outside.path(), root.path().join("linked")).unwrap();
        std::os::unix::fs::symlink(outside.path().join("secret.dot"), root.path().join("s.dot")).unwrap();
        assert_eq!(workflows_under(root.path()), ["a.dot", "team/b.dot"]);
        assert!(workflow_under(root.path(), "team/b.dot").is_ok());
        for name in ["../x.dot", "/etc/passwd", "", "linked/secret.dot", "s.dot", "missing.dot"] {
            assert!(workflow_under(root.path(), name).is_err(), "{name}");
        }
    }
}
