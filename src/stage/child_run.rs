//! Child runs: how a stage (a manager) runs another workflow through the engine running it, with
//! the same handlers and services, in a run directory of its own under the parent's:
//!
//! ```text
//! <parent run dir>/children/<node_id>/<visit>/      a complete run directory
//! <parent run dir>/children/<node_id>/<visit>-2/    a second start, when the first never got
//!                                                   past its first stage, or a retried attempt
//! ```
//!
//! This is the contract between the two: a stage asks a [`ChildRunner`] (which the engine
//! implements) to run a [`ChildRunRequest`]; in a child run, the engine asks the run's
//! [`ParentLink`] what the parent adds to each stage's preamble. The scheduler knows nothing
//! about managers, and managers nothing about the scheduler.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::child_workflow::ChildWorkflowError;
use crate::event_log::LoggedEvent;
use crate::graph::{HandlerType, Node, Workflow};
use crate::run_dir::layout;
use crate::run_dir::{ResumeError, RunResult, SavedRun};
use crate::ValidWorkflow;

/// What a stage may ask of the engine that runs it: run a child workflow with the same handlers,
/// services and run options (dry run, checkpoint durability).
#[async_trait::async_trait]
pub trait ChildRunner: Send + Sync {
    /// The first node of `workflow` (in declaration order) that no handler of this engine runs.
    fn first_unhandled<'w>(&self, workflow: &'w Workflow) -> Option<&'w Node>;

    /// The child workflow of the manager stage `node_id`, loaded with the run's workflow; `None`
    /// when the stage names none.
    fn child_workflow(&self, node_id: &str) -> Option<Result<&ValidWorkflow, &ChildWorkflowError>>;

    /// Runs (or continues) the child to its end, pause or interruption; a
    /// [`ChildSlot::Finished`] slot gives its recorded result.
    async fn run(&self, request: ChildRunRequest<'_>) -> Result<ChildEnd, ChildRunError>;
}

/// How a child run stopped.
#[derive(Debug)]
pub struct ChildEnd {
    pub result: RunResult,
    /// Why it paused, when it did.
    pub pause: Option<crate::outcome::Pause>,
}

/// Why a child run could not start (its run directory, its lock, its worktree).
#[derive(Debug, thiserror::Error)]
#[error(transparent)]
pub struct ChildRunError(pub Box<dyn std::error::Error + Send + Sync>);

/// Where a child run of one stage visit stands, from its directory.
#[derive(Debug)]
pub enum ChildSlot {
    /// No child has got anywhere yet: start one in this (new) directory.
    Fresh(PathBuf),
    /// A child that stopped before its end (paused, interrupted, killed): continue it.
    Unfinished(Box<SavedRun>),
    /// A child that ended, but the parent stopped before it recorded the stage.
    Finished(Box<RunResult>),
}

/// Why the child's directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum ChildSlotError {
    #[error("the child run in `{}` cannot be continued: {source}", path.display())]
    Unreadable { path: PathBuf, source: ResumeError },
    #[error("the child run in `{}` ended but its result.json cannot be read: {message}", path.display())]
    NoResult { path: PathBuf, message: String },
}

/// One child run to start or continue.
pub struct ChildRunRequest<'r> {
    /// The child workflow; for an [`ChildSlot::Unfinished`] slot, loaded from its stored copy.
    pub workflow: &'r ValidWorkflow,
    /// [`ChildSlot::Fresh`] or [`ChildSlot::Unfinished`].
    pub slot: ChildSlot,
    /// Where the child's stages run (ignored when continuing: the child's manifest says).
    pub work_dir: PathBuf,
    /// The context the child starts with.
    pub context: Vec<(String, Value)>,
    pub link: ParentLink,
    /// Sees every event of the child.
    pub observe: Box<dyn Fn(&LoggedEvent) + Send + Sync>,
    /// Cancelling it stops the child (as SIGINT stops a run: checkpoint saved, resumable).
    pub cancel: CancellationToken,
}

/// Finds the child run of visit `visit`, attempt `attempt`, of node `node_id` under
/// `parent_run_dir`: the last of `children/<node>/<visit>`, `<visit>-2`, `<visit>-3`, ... that
/// exists. A directory holding no checkpoint (the child stopped inside its first stage) is left
/// as it is and the child starts again beside it; so does a retried attempt after a child that
/// ended.
pub fn locate_child(
    parent_run_dir: &Path,
    node_id: &str,
    visit: u32,
    attempt: u32,
) -> Result<ChildSlot, ChildSlotError> {
    let candidate = |n: u32| crate::run_dir::layout::child_run_dir(parent_run_dir, node_id, visit, n);
    let mut n = 1;
    while candidate(n + 1).exists() {
        n += 1;
    }
    let mut last = candidate(n);
    if !last.exists() {
        return Ok(ChildSlot::Fresh(last));
    }
    // A child that took a `loop_restart` edge went on in a directory beside this one.
    while let Some(next) = restarted_as(&last) {
        last = next;
    }
    match SavedRun::open(&last) {
        Ok(saved) => Ok(ChildSlot::Unfinished(Box::new(saved))),
        Err(ResumeError::NotARun { .. } | ResumeError::NotStarted { .. }) => {
            Ok(ChildSlot::Fresh(candidate(n + 1)))
        }
        Err(ResumeError::Finished { .. }) if attempt > 1 => Ok(ChildSlot::Fresh(candidate(n + 1))),
        Err(ResumeError::Finished { .. }) => {
            let text = crate::regular_file::read_to_string(
                last.join(layout::RESULT),
                crate::regular_file::FileKind::Record,
            )
            .map_err(|e| ChildSlotError::NoResult { path: last.clone(), message: e.to_string() })?;
            let result = serde_json::from_str(&text)
                .map_err(|e| ChildSlotError::NoResult { path: last.clone(), message: e.to_string() })?;
            Ok(ChildSlot::Finished(Box::new(result)))
        }
        Err(source) => Err(ChildSlotError::Unreadable { path: last, source }),
    }
}

/// Where the run in `dir` continued after a `loop_restart` edge, if it did.
fn restarted_as(dir: &Path) -> Option<PathBuf> {
    let text = crate::regular_file::read_to_string(
        dir.join(layout::MANIFEST),
        crate::regular_file::FileKind::Record,
    )
    .ok()?;
    let manifest: crate::run_dir::Manifest = serde_json::from_str(&text).ok()?;
    let next = PathBuf::from(manifest.restarted_as?);
    // Only a directory beside this one: a manifest must not send the parent anywhere else.
    (next.parent() == dir.parent() && next != dir && next.is_dir()).then_some(next)
}

/// What a child run knows of its parent: the manager stage's preamble, which every preamble of
/// the child includes, and the steering messages waiting for the child's next LLM stage.
#[derive(Debug, Clone, Default)]
pub struct ParentLink {
    preamble: Option<String>,
    steering: SteeringInbox,
}

impl ParentLink {
    pub fn new(preamble: Option<String>, steering: SteeringInbox) -> Self {
        ParentLink { preamble, steering }
    }

    /// The preamble of `node` in the child run: its own (`own`), then the parent's under a
    /// heading; LLM stages also take every steering message waiting.
    pub(crate) fn stage_preamble(&self, node: &Node, own: Option<String>) -> Option<String> {
        let wants_preamble = node.handler_type().is_llm() || node.handler_type() == HandlerType::Manager;
        if !wants_preamble {
            return own;
        }
        let mut preamble = match &self.preamble {
            Some(parent) => Some(crate::fidelity::preamble::with_parent(own.as_deref(), parent)),
            None => own,
        };
        if node.handler_type().is_llm() {
            let messages = self.steering.take();
            if !messages.is_empty() {
                preamble = Some(crate::fidelity::preamble::with_steering(preamble.as_deref(), &messages));
            }
        }
        preamble
    }
}

/// Steering messages from a manager to its running child, delivered (and removed) when the
/// child's next LLM stage builds its prompt. Shared between the manager and the child run.
#[derive(Debug, Clone, Default)]
pub struct SteeringInbox(Arc<Mutex<Vec<String>>>);

impl SteeringInbox {
    pub fn push(&self, message: String) {
        if let Ok(mut messages) = self.0.lock() {
            if !messages.contains(&message) {
                messages.push(message);
            }
        }
    }

    /// Every waiting message, oldest first; the inbox is empty afterwards.
    pub fn take(&self) -> Vec<String> {
        self.0.lock().map(|mut messages| std::mem::take(&mut *messages)).unwrap_or_default()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_dir::RunDir;
    use crate::run_status::RunStatus;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn manifest(status: &str) -> String {
        serde_json::json!({
            "run_id": "c", "workflow": "child", "source_path": "child.dot", "source_sha256": "",
            "goal": "", "work_dir": ".", "started_at": "", "finished_at": null,
            "status": status, "tool_version": "0"
        })
        .to_string()
    }

    #[test]
    fn a_new_visit_starts_fresh_and_a_child_without_checkpoint_is_left_beside_the_new_one() {
        let temp = tempfile::tempdir().unwrap();
        let slot = locate_child(temp.path(), "manage", 2, 1).unwrap();
        assert!(matches!(slot, ChildSlot::Fresh(dir) if dir.ends_with("children/manage/2")));
        let first = temp.path().join("children/manage/2");
        RunDir::create(&first).unwrap();
        write(&first.join("manifest.json"), &manifest("running"));
        let slot = locate_child(temp.path(), "manage", 2, 1).unwrap();
        assert!(matches!(slot, ChildSlot::Fresh(dir) if dir.ends_with("children/manage/2-2")));
    }

    #[test]
    fn a_finished_child_gives_its_result_unless_the_stage_is_retried() {
        let temp = tempfile::tempdir().unwrap();
        let dir = temp.path().join("children/manage/1");
        let checkpoint = serde_json::json!({
            "run_id": "c", "status": "failed", "current_node": "exit", "next_node": null,
            "completed_nodes": [], "node_outcomes": {}, "node_visits": {}, "node_retries": {},
            "context": {}, "timestamp": ""
        });
        let result = serde_json::json!({
            "run_id": "c", "status": "failed", "failure_reason": "boom", "completed_nodes": [],
            "duration_ms": 1, "stages": [], "run_dir": dir.display().to_string()
        });
        write(&dir.join("manifest.json"), &manifest("failed"));
        write(&dir.join("checkpoint.json"), &checkpoint.to_string());
        write(&dir.join("result.json"), &result.to_string());
        match locate_child(temp.path(), "manage", 1, 1).unwrap() {
            ChildSlot::Finished(result) => {
                assert_eq!(result.status, RunStatus::Failed);
                assert_eq!(result.failure_reason.as_deref(), Some("boom"));
            }
            other => panic!("{other:?}"),
        }
        let retried = locate_child(temp.path(), "manage", 1, 2).unwrap();
        assert!(matches!(retried, ChildSlot::Fresh(dir) if dir.ends_with("children/manage/1-2")));
    }

    #[test]
    fn a_child_that_restarted_is_continued_in_its_latest_directory() {
        let temp = tempfile::tempdir().unwrap();
        let first = temp.path().join("children/manage/1");
        let second = temp.path().join("children/manage/0193");
        let mut restarted: serde_json::Value = serde_json::from_str(&manifest("restarted")).unwrap();
        restarted["restarted_as"] = second.display().to_string().into();
        write(&first.join("manifest.json"), &restarted.to_string());
        write(&second.join("manifest.json"), &manifest("interrupted"));
        write(&second.join("workflow.dot"), "digraph child { start [shape=Mdiamond] }");
        let checkpoint = serde_json::json!({
            "run_id": "c", "status": "interrupted", "current_node": "start", "next_node": "work",
            "completed_nodes": ["start"], "node_outcomes": {}, "node_visits": {"start": 1},
            "node_retries": {}, "context": {}, "timestamp": ""
        });
        write(&second.join("checkpoint.json"), &checkpoint.to_string());
        match locate_child(temp.path(), "manage", 1, 1).unwrap() {
            ChildSlot::Unfinished(saved) => assert_eq!(saved.dir.root(), second),
            other => panic!("{other:?}"),
        }
        // A manifest pointing outside the child's directory is not followed.
        restarted["restarted_as"] = temp.path().display().to_string().into();
        write(&first.join("manifest.json"), &restarted.to_string());
        assert_eq!(restarted_as(&first), None);
    }

    #[test]
    fn steering_messages_are_taken_once_and_not_repeated() {
        let inbox = SteeringInbox::default();
        inbox.push("fix the tests first".into());
        inbox.push("fix the tests first".into());
        inbox.push("then lint".into());
        assert_eq!(inbox.clone().take(), vec!["fix the tests first".to_string(), "then lint".to_string()]);
        assert!(inbox.take().is_empty());
    }
}
