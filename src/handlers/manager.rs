//! Manager stages (`shape=house`, type `manager`, alias `stack.manager_loop`): run a child
//! workflow as a child run of this one and supervise it until it ends.
//!
//! The child starts on a copy of this run's context (without its `graph.*` and `internal.*`
//! keys, which the child sets for itself) in `children/<node>/<visit>/`, and its stages see this
//! stage's preamble under a heading. Every `manager.poll_interval` (or, without the `wait`
//! action, after every checkpoint of the child) the manager runs a cycle against the child's
//! latest checkpoint: `observe` copies its state into `stack.child.*`, `steer` hands
//! `manager.steer_prompt` to the child's next LLM stage, and `manager.stop_condition` (on the
//! child's context) or `manager.max_cycles` stop the child. When the child ends its outcome is the
//! stage's, and what it changed in the context comes back to this run.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde_json::{Map, Value};

use crate::child_workflow::{self, ChildWorkflowError};
use crate::condition::Condition;
use crate::condition::Scope;
use crate::context::artifacts::ArtifactStore;
use crate::context::Context;
use crate::event::{ChildObservation, Event};
use crate::graph::settings::ManagerSettings;
use crate::graph::Node;
use crate::outcome::{Outcome, Pause, PauseKind, StageStatus};
use crate::run_dir::layout;
use crate::run_dir::{Checkpoint, RunResult};
use crate::run_status::RunStatus;
use crate::source::SourceFile;
use crate::stage::child_run::{
    locate_child, ChildEnd, ChildRunError, ChildRunRequest, ChildSlot, ParentLink, SteeringInbox,
};
use crate::stage::{Handler, HandlerError, StageRun};
use crate::ValidWorkflow;

/// Runs manager stages.
pub struct ManagerHandler;

#[async_trait::async_trait]
impl Handler for ManagerHandler {
    async fn run(&self, stage: &StageRun<'_>) -> Result<Outcome, HandlerError> {
        let settings = settings_of(stage.node)?;
        let slot = locate_child(stage.run.run_dir, &stage.node.id, stage.visit, stage.attempt)
            .map_err(|e| HandlerError::Terminal(e.to_string()))?;
        let (report, stopped_by) = match slot {
            ChildSlot::Finished(result) => {
                // The child ended before this process stopped, but the stage was not recorded.
                (ChildEnd { result: *result, pause: None }, None)
            }
            slot => {
                if let Some(preamble) = stage.past.preamble {
                    // What the child's stages are given of this run, kept beside the stage.
                    write_stage_file(&stage.stage_dir.join(layout::PREAMBLE), preamble)?;
                }
                let child = child_workflow(stage, &slot)?;
                if let Some(node) = stage.run.children.first_unhandled(&child.get().workflow) {
                    return Err(HandlerError::Terminal(format!(
                        "the child workflow's node `{}` is a {} stage, which this version of fabro cannot run",
                        node.id,
                        node.handler_type()
                    )));
                }
                let supervisor = Supervisor::new(stage, settings);
                supervisor.run(child.get(), slot, child.resumed()).await?
            }
        };
        conclude(stage, settings, &report, stopped_by)
    }
}

fn write_stage_file(path: &Path, text: &str) -> Result<(), HandlerError> {
    crate::atomic_file::write_atomic(path, text.as_bytes())
        .map_err(|e| HandlerError::Terminal(format!("cannot write {}: {e}", path.display())))
}

/// The node's supervision settings, read when the workflow loaded; a workflow that validated has
/// them.
fn settings_of(node: &Node) -> Result<&ManagerSettings, HandlerError> {
    let settings = node
        .settings
        .manager()
        .ok_or_else(|| HandlerError::Terminal(format!("`{}` is not a manager stage", node.id)))?;
    settings.runnable().map_err(|errors| {
        let errors: Vec<String> = errors.iter().map(ToString::to_string).collect();
        HandlerError::Terminal(format!(
            "manager stage `{}` has invalid settings: {}",
            node.id,
            errors.join("; ")
        ))
    })
}

/// The child workflow a manager runs.
enum ChildWorkflow<'w> {
    /// For a new child: loaded with this run's workflow.
    Loaded(&'w ValidWorkflow),
    /// For a child that is continued: loaded from the copy stored in its run directory, which is
    /// what it started with.
    Stored(Box<ValidWorkflow>),
}

impl ChildWorkflow<'_> {
    fn get(&self) -> &ValidWorkflow {
        match self {
            ChildWorkflow::Loaded(valid) => valid,
            ChildWorkflow::Stored(valid) => valid,
        }
    }

    fn resumed(&self) -> bool {
        matches!(self, ChildWorkflow::Stored(_))
    }
}

/// The child workflow for `slot` (see [`ChildWorkflow`]).
fn child_workflow<'s>(stage: &'s StageRun<'_>, slot: &ChildSlot) -> Result<ChildWorkflow<'s>, HandlerError> {
    let failed = |error: &ChildWorkflowError| HandlerError::Terminal(error.to_string());
    match slot {
        ChildSlot::Unfinished(saved) => {
            let source = SourceFile::new(&saved.manifest.source_path, saved.workflow_source.clone());
            let ancestors = [child_workflow::canonical(stage.run.workflow.source().path())];
            // The child reads its parent's inputs.
            let inputs = stage.run.workflow.inputs();
            let valid =
                crate::load::load_child_source(source, &ancestors, inputs).map_err(|error| failed(&error))?;
            Ok(ChildWorkflow::Stored(Box::new(valid)))
        }
        _ => match stage.run.children.child_workflow(&stage.node.id) {
            Some(Ok(valid)) => Ok(ChildWorkflow::Loaded(valid)),
            Some(Err(error)) => Err(failed(error)),
            None => Err(HandlerError::Terminal(format!(
                "manager stage `{}` names no child workflow (set stack.child_workflow, or stack.child_dot_source to the DOT text)",
                stage.node.id
            ))),
        },
    }
}

/// Why the manager stopped its child before the child ended on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum StoppedBy {
    StopCondition,
    MaxCycles,
}

impl StoppedBy {
    fn as_str(self) -> &'static str {
        match self {
            StoppedBy::StopCondition => "stop_condition",
            StoppedBy::MaxCycles => "max_cycles",
        }
    }
}

/// The child's state as its latest checkpoint records it.
struct Observation {
    checkpoint: Checkpoint,
}

impl Observation {
    fn read(child_dir: &Path) -> Option<Observation> {
        let checkpoint = crate::run_dir::journal::load_checkpoint(child_dir).ok()??;
        Some(Observation { checkpoint })
    }

    /// The stage running now (or about to), else the last one completed.
    fn current_node(&self) -> &str {
        self.checkpoint.next_node.as_deref().unwrap_or(&self.checkpoint.current_node)
    }

    fn last_outcome(&self) -> Option<String> {
        self.checkpoint.context.get_text("outcome")
    }

    /// `stack.child.*` keys for the parent's context.
    fn keys(&self, status: RunStatus, child_dir: &Path) -> Map<String, Value> {
        match serde_json::to_value(self.seen(status, child_dir)) {
            Ok(Value::Object(keys)) => keys,
            _ => Map::new(),
        }
    }

    /// What `manager.cycle` records of the child: the same as [`Observation::keys`].
    fn seen(&self, status: RunStatus, child_dir: &Path) -> ChildObservation {
        ChildObservation {
            status,
            current_node: self.current_node().to_string(),
            completed_count: self.checkpoint.completed_nodes.len(),
            last_outcome: self.last_outcome(),
            run_dir: child_dir.display().to_string(),
        }
    }

    /// The directory of the stage the child is in now (the one after its latest checkpoint),
    /// with its node id and visit; none between two stages or after the child's end.
    fn active_stage_dir(&self, child_dir: &Path) -> Option<(String, u32, PathBuf)> {
        let checkpoint = &self.checkpoint;
        let node = checkpoint.next_node.as_deref()?;
        let visit = checkpoint.node_visits.get(node).copied().unwrap_or(0) + 1;
        let dir = crate::run_dir::layout::latest_visit_dir(child_dir, node, visit)?;
        Some((node.to_string(), visit, dir))
    }
}

/// Drives one child run and the cycles that watch it.
struct Supervisor<'s, 'a> {
    stage: &'s StageRun<'a>,
    settings: &'s ManagerSettings,
    steering: SteeringInbox,
    /// The child stage last steered, so each stage visit is steered once.
    steered: Option<(String, u32)>,
}

impl<'s, 'a> Supervisor<'s, 'a> {
    fn new(stage: &'s StageRun<'a>, settings: &'s ManagerSettings) -> Self {
        Supervisor { stage, settings, steering: SteeringInbox::default(), steered: None }
    }

    /// Runs the child to its end, or stops it when a cycle says so.
    async fn run(
        mut self,
        workflow: &ValidWorkflow,
        slot: ChildSlot,
        resumed: bool,
    ) -> Result<(ChildEnd, Option<StoppedBy>), HandlerError> {
        let stage = self.stage;
        let child_dir = match &slot {
            ChildSlot::Fresh(dir) => dir.clone(),
            ChildSlot::Unfinished(saved) => saved.dir.root().to_path_buf(),
            ChildSlot::Finished(result) => PathBuf::from(&result.run_dir),
        };
        let checkpoints = Arc::new(tokio::sync::Notify::new());
        let saved = checkpoints.clone();
        let cancel = stage.run.cancel.child_token();
        let request = ChildRunRequest {
            workflow,
            slot,
            work_dir: self.child_work_dir()?,
            context: inherited_context(stage.context),
            link: ParentLink::new(stage.past.preamble.map(str::to_string), self.steering.clone()),
            observe: Box::new(move |event| {
                if matches!(event.event, Event::CheckpointSaved { .. }) {
                    saved.notify_one();
                }
            }),
            cancel: cancel.clone(),
        };
        let child_started = Event::ChildStarted {
            workflow: workflow.workflow.name().to_string(),
            run_dir: child_dir.display().to_string(),
            resumed,
        };
        stage.run.events.stage_event(&stage.node.id, stage.visit, child_started);
        // The parent writes no checkpoint while its child runs: make its events visible now.
        stage.run.events.flush();
        let child = stage.run.children.run(request);
        tokio::pin!(child);
        let mut cycle = 0u64;
        let stopped_by = loop {
            let tick = async {
                if self.settings.actions.wait {
                    tokio::time::sleep(self.settings.poll_interval).await;
                } else {
                    checkpoints.notified().await;
                }
            };
            tokio::select! {
                report = &mut child => return Ok((started(report)?, None)),
                () = tick => {}
            }
            cycle += 1;
            if let Some(reason) = self.cycle(cycle, &child_dir) {
                break reason;
            }
        };
        cancel.cancel();
        Ok((started(child.await)?, Some(stopped_by)))
    }

    /// One supervision cycle; says why the child must stop, if it must.
    fn cycle(&mut self, cycle: u64, child_dir: &Path) -> Option<StoppedBy> {
        let stage = self.stage;
        let observation = Observation::read(child_dir);
        let child = observation.as_ref().map(|observed| observed.seen(observed.checkpoint.status, child_dir));
        stage.run.events.stage_event(&stage.node.id, stage.visit, Event::ManagerCycle { cycle, child });
        stage.run.events.flush();
        if let Some(observed) = &observation {
            if self.settings.actions.steer {
                self.steer(observed, child_dir);
            }
            if let Some(condition) = &self.settings.stop_condition {
                if stop_condition_holds(condition, &observed.checkpoint.context, child_dir) {
                    return Some(StoppedBy::StopCondition);
                }
            }
        }
        self.settings.max_cycles.filter(|max| cycle >= *max).map(|_| StoppedBy::MaxCycles)
    }

    /// Writes the steering message into the child's active stage directory (once per stage
    /// visit) and queues it for the child's next LLM stage.
    fn steer(&mut self, observed: &Observation, child_dir: &Path) {
        let Some(template) = &self.settings.steer_prompt else { return };
        let Some((node, visit, dir)) = observed.active_stage_dir(child_dir) else { return };
        if self.steered.as_ref() == Some(&(node.clone(), visit)) {
            return;
        }
        // `$goal` is this run's goal; placeholders read the child's context.
        let template = template.replace("$goal", stage_goal(self.stage));
        let message = super::llm::expand_prompt(&template, &observed.checkpoint.context);
        let path = free_name(&dir, "steering", "md");
        let stage = self.stage;
        if let Err(error) = crate::atomic_file::write_atomic(&path, message.as_bytes()) {
            tracing::warn!(%error, "steering message not written to {}", path.display());
            return;
        }
        self.steering.push(message);
        let steered = Event::ManagerSteered {
            child_node: node.clone(),
            child_visit: visit,
            path: path.display().to_string(),
        };
        stage.run.events.stage_event(&stage.node.id, stage.visit, steered);
        self.steered = Some((node, visit));
    }

    /// `stack.child_workdir` (node, else graph) relative to this run's work directory, created
    /// when missing; else this run's work directory.
    fn child_work_dir(&self) -> Result<PathBuf, HandlerError> {
        let stage = self.stage;
        let setting = stage.node.settings.manager().and_then(|manager| manager.child_workdir.as_deref());
        let Some(relative) = setting else { return Ok(stage.work_dir.to_path_buf()) };
        let dir = stage.work_dir.join(relative);
        std::fs::create_dir_all(&dir).map_err(|e| {
            HandlerError::Terminal(format!("cannot create the child's work directory {}: {e}", dir.display()))
        })?;
        Ok(dir)
    }
}

/// The goal of the run the manager stage belongs to (`--goal` and context overrides included).
fn stage_goal<'s>(stage: &'s StageRun<'_>) -> &'s str {
    match stage.context.get("graph.goal") {
        Some(Value::String(goal)) => goal,
        _ => stage.run.workflow.goal(),
    }
}

fn started(report: Result<ChildEnd, ChildRunError>) -> Result<ChildEnd, HandlerError> {
    report.map_err(|e| HandlerError::Terminal(format!("the child run could not start: {e}")))
}

/// `<stem>.<ext>` in `dir`, or `<stem>.<n>.<ext>` when taken: nothing is overwritten.
fn free_name(dir: &Path, stem: &str, ext: &str) -> PathBuf {
    let mut path = dir.join(format!("{stem}.{ext}"));
    let mut n = 1;
    while path.exists() {
        n += 1;
        path = dir.join(format!("{stem}.{n}.{ext}"));
    }
    path
}

/// The parent's context as the child starts with it: everything but the keys that describe the
/// parent run (`graph.*`, `internal.*`), which the child sets for itself.
fn inherited_context(context: &Context) -> Vec<(String, Value)> {
    context
        .iter()
        .filter(|(key, _)| !key.starts_with("graph.") && !key.starts_with("internal."))
        .map(|(key, value)| (key.to_string(), value.clone()))
        .collect()
}

/// Evaluates the stop condition against the child's context; `outcome` and `preferred_label` are
/// the child's last stage's. Offloaded values are read from the child's artifact store.
fn stop_condition_holds(condition: &Condition, context: &Context, child_dir: &Path) -> bool {
    let status = context.get_text("outcome").and_then(|s| s.parse().ok()).unwrap_or(StageStatus::Success);
    let outcome = Outcome { preferred_label: context.get_text("preferred_label"), ..Outcome::new(status) };
    let store = ArtifactStore::new(child_dir, crate::context::artifacts::DEFAULT_THRESHOLD);
    let scope = Scope::new(Some(&outcome), context).resolving(condition.context_keys(), &store);
    condition.evaluate(&scope)
}

/// The stage's outcome from how the child ended, with the child's context changes and (under
/// `observe`) its final state.
fn conclude(
    stage: &StageRun<'_>,
    settings: &ManagerSettings,
    report: &ChildEnd,
    stopped_by: Option<StoppedBy>,
) -> Result<Outcome, HandlerError> {
    let result = &report.result;
    let child_dir = PathBuf::from(&result.run_dir);
    let finished = Event::ChildFinished {
        status: result.status,
        failure_reason: result.failure_reason.clone(),
        run_dir: result.run_dir.clone(),
        stopped_by: stopped_by.map(|by| by.as_str().to_string()),
    };
    stage.run.events.stage_event(&stage.node.id, stage.visit, finished);
    let name = stage.node.id.as_str();
    let mut outcome = match (result.status, stopped_by) {
        (RunStatus::Paused, None) => {
            let (kind, reason) = match &report.pause {
                Some(pause) => (pause.kind, pause.reason.as_str()),
                None => (PauseKind::Answer, "waiting for input"),
            };
            return Err(HandlerError::Paused(Pause::new(
                kind,
                format!("the child run of `{name}` paused: {reason} (resume this run to continue it)"),
            )));
        }
        (RunStatus::Interrupted, None) if stage.run.cancel.is_cancelled() => {
            return Err(HandlerError::Cancelled)
        }
        (_, Some(StoppedBy::StopCondition)) => Outcome::success().with_notes(format!(
            "manager.stop_condition `{}` held; child stopped ({})",
            settings.stop_condition.as_ref().map_or("", Condition::text),
            summary(result)
        )),
        (_, Some(StoppedBy::MaxCycles)) => Outcome::fail(format!(
            "the child run did not finish within manager.max_cycles={} cycles ({})",
            settings.max_cycles.unwrap_or(0),
            summary(result)
        )),
        (RunStatus::Succeeded, None) => {
            Outcome::success().with_notes(format!("child succeeded ({})", summary(result)))
        }
        (status, None) => Outcome::fail(format!(
            "the child run {}: {}",
            status.as_str(),
            result.failure_reason.as_deref().unwrap_or("no reason given")
        )),
    };
    let Some(final_state) = Observation::read(&child_dir) else {
        return Ok(outcome);
    };
    outcome.context_updates = merged_changes(stage.context, &final_state.checkpoint.context, &child_dir);
    if settings.actions.observe {
        outcome.context_updates.extend(final_state.keys(result.status, &child_dir));
    }
    Ok(outcome)
}

/// `N stages in Xs, <run dir>`.
fn summary(result: &RunResult) -> String {
    format!(
        "{} stage(s) in {:.1}s, {}",
        result.stages.len(),
        result.duration_ms as f64 / 1000.0,
        result.run_dir
    )
}

/// What the child changed in the context, without the keys that describe the child run itself.
/// Values the child offloaded are read back, so the parent stores them in its own store.
fn merged_changes(parent: &Context, child: &Context, child_dir: &Path) -> Map<String, Value> {
    let store = ArtifactStore::new(child_dir, crate::context::artifacts::DEFAULT_THRESHOLD);
    child
        .iter()
        .filter(|(key, _)| !crate::context::is_bookkeeping(key))
        .filter(|(key, value)| parent.get(key) != Some(*value))
        .map(|(key, value)| {
            let value = match store.resolve(value) {
                Ok(Some(loaded)) => loaded,
                _ => value.clone(),
            };
            (key.to_string(), value)
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    #[test]
    fn the_child_inherits_everything_but_graph_and_internal_keys() {
        let mut context = Context::new();
        context.set("graph.goal", "parent goal");
        context.set("internal.run_id", "p");
        context.set("plan", "use a queue");
        let inherited = inherited_context(&context);
        assert_eq!(inherited, vec![("plan".to_string(), json!("use a queue"))]);
    }

    #[test]
    fn only_real_changes_of_the_child_come_back() {
        let temp = tempfile::tempdir().unwrap();
        let mut parent = Context::new();
        parent.set("plan", "use a queue");
        parent.set("graph.goal", "parent goal");
        let mut child = parent.clone();
        child.set("graph.goal", "child goal");
        child.set("internal.run_id", "c");
        child.set("current_node", "exit");
        child.set("thread.main", "x");
        child.set("tests.passed", true);
        child.set("plan", "use a stack");
        let changes = merged_changes(&parent, &child, temp.path());
        let keys: Vec<&str> = changes.keys().map(String::as_str).collect();
        assert_eq!(keys, ["plan", "tests.passed"]);
        assert_eq!(changes["plan"], "use a stack");
    }

    #[test]
    fn stop_conditions_read_the_childs_context_and_last_outcome() {
        let temp = tempfile::tempdir().unwrap();
        let mut context = Context::new();
        context.set("coverage", 91);
        context.set("outcome", "fail");
        let holds =
            |text: &str| stop_condition_holds(&Condition::parse(text).unwrap(), &context, temp.path());
        assert!(holds("context.coverage >= 90"));
        assert!(!holds("coverage > 95"));
        assert!(holds("outcome=fail && coverage=91"));
    }

    #[test]
    fn steering_files_are_never_overwritten() {
        let temp = tempfile::tempdir().unwrap();
        std::fs::write(temp.path().join("steering.md"), "x").unwrap();
        assert_eq!(free_name(temp.path(), "steering", "md"), temp.path().join("steering.2.md"));
    }
}
