//! The scheduler: walks a validated workflow one stage at a time from its start node, runs each
//! stage's handler (with retries), records what happened, and follows the selected edge until the
//! exit node, a failure, a pause or a cancellation. Everything it records goes through the run
//! directory and the event log; the loop itself holds no I/O details.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use petgraph::graph::NodeIndex;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::edge_selection::{failure_route, select_edge};
use super::events::{now_rfc3339, EventLog};
use super::retry::RetryPolicy;
use crate::context::artifacts::ArtifactStore;
use crate::context::Context;
use crate::fidelity::preamble::{PreambleInput, StageSummary};
use crate::graph::{HandlerType, Node, Workflow};
use crate::handlers::{Handler, HandlerError, HandlerRegistry, Services, StageRun};
use crate::outcome::{Outcome, StageStatus};
use crate::run_dir::{
    CheckpointRef, Manifest, RunDir, RunDirError, RunResult, RunStatus, SavedRun, StageRecord,
    StageStatusFile,
};
use crate::worktree::RunWorktree;
use crate::ValidWorkflow;

/// How to run a workflow.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Where the run's files go; `None` for `.fabro/runs/<run_id>` under the current directory.
    pub run_dir: Option<PathBuf>,
    pub work_dir: PathBuf,
    /// Simulate every side effect; visits are capped low so loops end quickly.
    pub dry_run: bool,
    /// Extra context values (`--set key=value`).
    pub context: Vec<(String, Value)>,
    /// Run in a fresh git worktree on branch `fabro/run/<run_id>` (created from HEAD of the
    /// repository containing `work_dir`) and commit after every stage.
    pub worktree: bool,
    /// Whether checkpoints are fsynced (`--checkpoint-sync stage`, the default) or only renamed
    /// into place (`never`: survives a crash of fabro, not of the machine).
    pub checkpoint_sync: crate::run_dir::Durability,
    /// `--max-tokens`/`--max-cost`; the graph's `max_tokens`/`max_cost` apply when unset.
    pub limits: super::budget::UsageLimits,
}

/// Why a run could not start.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    #[error("cannot open the event log: {0}")]
    Events(std::io::Error),
    #[error("the workflow has no start node")]
    NoStart,
    #[error("the checkpoint continues at node `{0}`, which the workflow does not have")]
    MissingNode(String),
    #[error(transparent)]
    Worktree(#[from] crate::worktree::WorktreeError),
}

/// How a run ended, with `result.json`'s content.
#[derive(Debug, Clone)]
pub struct RunReport {
    pub result: RunResult,
    /// Why the run paused (a human gate without an answer), when it did.
    pub pause_reason: Option<String>,
    pub timings: RunTimings,
    /// In worktree mode: the branch and how to merge it.
    pub worktree_hint: Option<String>,
}

/// Where the engine's own time went, for `-v` and the engine benchmark.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunTimings {
    /// Writing `checkpoint.json` after every stage.
    pub checkpoints: std::time::Duration,
    /// Creating stage directories and writing `status.json`.
    pub stage_files: std::time::Duration,
    /// Appending buffered events to `events.jsonl`.
    pub events: std::time::Duration,
    pub checkpoint_count: u32,
}

/// Runs workflows with a set of handlers and services.
pub struct Engine {
    handlers: HandlerRegistry,
    services: Arc<Services>,
}

/// Default cap on how often any one node may run (graph `max_node_visits` overrides it).
const DEFAULT_MAX_NODE_VISITS: i64 = 1000;
/// Under `--dry-run` loops stop after this many visits of a node.
const DRY_RUN_MAX_VISITS: i64 = 3;

impl Engine {
    pub fn new(handlers: HandlerRegistry, services: Services) -> Engine {
        Engine { handlers, services: Arc::new(services) }
    }

    /// Creates the run directory and runs the workflow to its end. `observe` sees every event.
    pub async fn run(
        &self,
        valid: &ValidWorkflow,
        options: &RunOptions,
        observe: impl Fn(&super::events::Event) + Send + Sync + 'static,
        cancel: CancellationToken,
    ) -> Result<RunReport, StartError> {
        let workflow = &valid.workflow;
        let start = workflow
            .graph()
            .node_indices()
            .find(|&i| workflow.node_at(i).handler_type() == HandlerType::Start)
            .ok_or(StartError::NoStart)?;
        let run_id = uuid::Uuid::now_v7().to_string();
        let root =
            options.run_dir.clone().unwrap_or_else(|| PathBuf::from(".fabro").join("runs").join(&run_id));
        let run_dir = RunDir::create(&root)?;
        let lock = run_dir.lock()?;
        let worktree = match options.worktree {
            true => Some(RunWorktree::create(&options.work_dir, &run_id, &run_dir.root().join("worktree"))?),
            false => None,
        };
        let work_dir = worktree.as_ref().map_or_else(|| options.work_dir.clone(), |w| w.path().to_path_buf());
        let mut events = EventLog::open(run_dir.root(), &run_id, 0).map_err(StartError::Events)?;
        events.observe(observe);
        let manifest = Manifest {
            run_id: run_id.clone(),
            workflow: workflow.name().to_string(),
            source_path: workflow.source().path().display().to_string(),
            source_sha256: sha256_hex(workflow.source().text()),
            goal: workflow.goal().to_string(),
            work_dir: work_dir.display().to_string(),
            started_at: now_rfc3339(),
            finished_at: None,
            status: RunStatus::Running,
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            restarted_from: None,
            restarted_as: None,
            forked_from: None,
            worktree: worktree.as_ref().map(|w| crate::run_dir::WorktreeRecord {
                path: w.path().display().to_string(),
                branch: w.branch().to_string(),
            }),
        };
        run_dir.write_json("manifest.json", &manifest)?;
        run_dir.write_text("workflow.dot", workflow.source().text())?;
        let artifacts = artifact_store(workflow, run_dir.root());
        let mut run = Run {
            preamble: None,
            current_thread: None,
            threads: std::collections::HashMap::new(),
            artifacts,
            engine: self,
            workflow,
            run_dir,
            run_id,
            options,
            events,
            cancel,
            manifest,
            state: RunState { context: seed_context(workflow, options, &work_dir), ..RunState::default() },
            started: Instant::now(),
            timings: RunTimings::default(),
            entered_by: None,
            checkpoint_seq: 0,
            degrade_full_fidelity: false,
            _lock: lock,
            work_dir,
            worktree,
            last_commit: None,
        };
        run.context_set("internal.run_id", run.run_id.clone());
        run.events.run_event("run.started", json!({"workflow": workflow.name(), "goal": workflow.goal()}));
        Ok(run.execute(start).await)
    }

    /// Continues a saved run from its checkpoint: same run id and directory, events appended,
    /// completed stages not run again, the stage that was waiting or in flight run again.
    /// `valid` must be loaded from the saved run's `workflow_source`.
    pub async fn resume(
        &self,
        valid: &ValidWorkflow,
        saved: SavedRun,
        options: &RunOptions,
        observe: impl Fn(&super::events::Event) + Send + Sync + 'static,
        cancel: CancellationToken,
    ) -> Result<RunReport, StartError> {
        let workflow = &valid.workflow;
        let lock = saved.dir.lock()?;
        let ended = matches!(saved.checkpoint.status, RunStatus::Succeeded | RunStatus::Failed);
        let next_id = match (&saved.checkpoint.next_node, ended) {
            (Some(next), false) => next.clone(),
            _ => saved.checkpoint.current_node.clone(),
        };
        let next = workflow.index_of(&next_id).ok_or_else(|| StartError::MissingNode(next_id.clone()))?;
        let mut events = EventLog::open(saved.dir.root(), &saved.manifest.run_id, saved.last_event_seq)
            .map_err(StartError::Events)?;
        events.observe(observe);
        let previous = saved.checkpoint.status;
        let worktree = match &saved.manifest.worktree {
            Some(record) => Some(RunWorktree::open(
                std::path::Path::new(&record.path),
                saved.checkpoint.commit.as_deref(),
            )?),
            None => None,
        };
        let work_dir = worktree
            .as_ref()
            .map_or_else(|| std::path::PathBuf::from(&saved.manifest.work_dir), |w| w.path().to_path_buf());
        let last_commit = saved.checkpoint.commit.clone();
        let mut manifest = saved.manifest;
        manifest.status = RunStatus::Running;
        manifest.finished_at = None;
        saved.dir.write_json("manifest.json", &manifest)?;
        let checkpoint = saved.checkpoint;
        let checkpoint_seq = saved.last_checkpoint_seq;
        let artifacts = artifact_store(workflow, saved.dir.root());
        let summaries = saved
            .stages
            .iter()
            .map(|record| {
                let script = workflow.node(&record.node_id).and_then(|n| n.attributes.text("script"));
                let dir =
                    saved.dir.root().join("stages").join(&record.node_id).join(record.visit.to_string());
                StageSummary::from_stage_dir(record, script, &dir)
            })
            .collect();
        let threads = load_threads(saved.dir.root());
        let run = Run {
            preamble: None,
            current_thread: None,
            threads,
            artifacts,
            engine: self,
            workflow,
            run_dir: saved.dir,
            run_id: manifest.run_id.clone(),
            options,
            events,
            cancel,
            manifest,
            state: RunState {
                context: checkpoint.context,
                completed: checkpoint.completed_nodes,
                outcomes: checkpoint.node_outcomes,
                visits: checkpoint.node_visits,
                retries: checkpoint.node_retries,
                stages: saved.stages,
                summaries,
            },
            started: Instant::now(),
            timings: RunTimings::default(),
            entered_by: None,
            checkpoint_seq,
            degrade_full_fidelity: true,
            _lock: lock,
            work_dir,
            worktree,
            last_commit,
        };
        run.events.run_event("run.resumed", json!({"from": next_id, "previous_status": previous.as_str()}));
        if ended {
            // The process stopped after the final checkpoint, before recording the end.
            let reason = (previous == RunStatus::Failed).then(|| {
                "the run failed; its reason was not recorded before the process stopped".to_string()
            });
            return Ok(run.finish(next, previous, reason));
        }
        Ok(run.execute(next).await)
    }
}

/// Conversation threads persisted in a run directory (`threads/<encoded key>.jsonl`).
fn load_threads(
    run_dir: &std::path::Path,
) -> std::collections::HashMap<String, Vec<crate::backends::Message>> {
    let mut threads = std::collections::HashMap::new();
    for entry in std::fs::read_dir(run_dir.join("threads")).into_iter().flatten().flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(key) = name.strip_suffix(".jsonl").and_then(crate::context::artifacts::decode_key) else {
            continue;
        };
        let Ok(text) = std::fs::read_to_string(entry.path()) else { continue };
        let messages = text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect();
        threads.insert(key, messages);
    }
    threads
}

/// The run's artifact store, with the graph's `artifact_threshold` (default 100 KiB).
fn artifact_store(workflow: &Workflow, run_dir: &std::path::Path) -> ArtifactStore {
    let threshold = workflow
        .attributes()
        .integer("artifact_threshold")
        .and_then(|n| usize::try_from(n).ok())
        .unwrap_or(crate::context::artifacts::DEFAULT_THRESHOLD);
    ArtifactStore::new(run_dir, threshold)
}

/// Context at the start: `graph.*` mirrors of every graph attribute, then `--set` values.
fn seed_context(workflow: &Workflow, options: &RunOptions, work_dir: &std::path::Path) -> Context {
    let mut context = Context::new();
    for (key, attr) in workflow.attributes().iter() {
        let value = match &attr.value {
            crate::graph::Value::Integer(n) => json!(n),
            crate::graph::Value::Float(x) => json!(x),
            crate::graph::Value::Boolean(b) => json!(b),
            other => json!(other.to_string()),
        };
        context.set(format!("graph.{key}"), value);
    }
    context.set("internal.work_dir", work_dir.display().to_string());
    for (key, value) in &options.context {
        context.set(key.clone(), value.clone());
    }
    context
}

/// The SHA-256 of a workflow source, as the manifest records it.
pub fn sha256_hex(text: &str) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(text.as_bytes()).iter().map(|b| format!("{b:02x}")).collect()
}

#[derive(Default)]
struct RunState {
    context: Context,
    completed: Vec<String>,
    outcomes: BTreeMap<String, StageStatus>,
    visits: BTreeMap<String, u32>,
    retries: BTreeMap<String, u32>,
    stages: Vec<StageRecord>,
    /// What preambles say about each completed stage, built once when it completes.
    summaries: Vec<StageSummary>,
}

/// How one stage visit ended.
enum StageEnd {
    Done { outcome: Outcome, attempts: u32 },
    Paused(String),
    Cancelled,
}

/// Where the loop goes after a stage.
enum Step {
    Next(NodeIndex),
    /// Follow a `loop_restart` edge: continue at the node in a fresh run directory.
    Restart(NodeIndex),
    Finish(RunStatus, Option<String>),
}

struct Run<'e> {
    engine: &'e Engine,
    workflow: &'e Workflow,
    run_dir: RunDir,
    run_id: String,
    options: &'e RunOptions,
    events: EventLog,
    cancel: CancellationToken,
    manifest: Manifest,
    state: RunState,
    started: Instant,
    timings: RunTimings,
    /// The edge the current stage was entered by (none for the first stage after a start or
    /// resume, or after a jump to a retry target).
    entered_by: Option<petgraph::graph::EdgeIndex>,
    /// Number of the last checkpoint written (`checkpoints/<seq>-<node>.json`).
    checkpoint_seq: u64,
    /// Set on resume: the first stage cannot continue a conversation thread that did not survive
    /// the stop, so `full` fidelity becomes `summary:high` for it.
    degrade_full_fidelity: bool,
    /// Held for as long as this process drives the run.
    _lock: crate::run_dir::RunLock,
    /// Where stages run: `--workdir`, or the run's git worktree.
    work_dir: PathBuf,
    worktree: Option<RunWorktree>,
    /// The worktree commit after the last completed stage.
    last_commit: Option<String>,
    /// Where context values too large for checkpoints go.
    artifacts: ArtifactStore,
    /// The preamble of the LLM stage about to run (none under full fidelity).
    preamble: Option<String>,
    /// The thread of the full-fidelity LLM stage about to run.
    current_thread: Option<String>,
    /// Conversation threads by key, persisted in `threads/<key>.jsonl`.
    threads: std::collections::HashMap<String, Vec<crate::backends::Message>>,
}

impl Run<'_> {
    fn context_set(&mut self, key: &str, value: impl Into<Value>) {
        self.state.context.set(key, value);
    }

    async fn execute(mut self, start: NodeIndex) -> RunReport {
        let mut current = start;
        loop {
            match self.visit(current).await {
                Step::Next(next) => current = next,
                Step::Restart(target) => match self.restart(current, target) {
                    Ok(()) => current = target,
                    Err(error) => return self.finish(current, RunStatus::Failed, Some(error.to_string())),
                },
                Step::Finish(status, reason) => return self.finish(current, status, reason),
            }
        }
    }

    /// Runs one visit of the node at `index` and decides where to go next.
    async fn visit(&mut self, index: NodeIndex) -> Step {
        let workflow = self.workflow;
        let node = workflow.node_at(index);
        if node.handler_type() == HandlerType::Exit {
            if let Some(step) = self.enforce_goal_gates(node) {
                return step;
            }
        }
        let visit = {
            let count = self.state.visits.entry(node.id.clone()).or_insert(0);
            *count += 1;
            *count
        };
        if let Some(reason) = self.visit_limit_exceeded(node, visit) {
            return Step::Finish(RunStatus::Failed, Some(reason));
        }
        // Hook: usage ceilings pause the run before an LLM stage.
        if let Some(reason) = self.usage_ceiling_reached(node) {
            self.uncount_visit(&node.id);
            self.save_checkpoint(RunStatus::Paused, &node.id, Some(&node.id));
            self.events.stage_event("run.paused", &node.id, visit, json!({"reason": reason}));
            return Step::Finish(RunStatus::Paused, Some(reason));
        }
        let files_clock = Instant::now();
        let stage_dir = self.run_dir.stage_dir(&node.id, visit);
        self.timings.stage_files += files_clock.elapsed();
        let stage_dir = match stage_dir {
            Ok(dir) => dir,
            Err(error) => return Step::Finish(RunStatus::Failed, Some(error.to_string())),
        };
        self.context_set("current_node", node.id.clone());
        self.context_set("internal.node_visit_count", visit);
        let edge = self.entered_by.take().map(|index| &workflow.graph()[index].attributes);
        let mut fidelity = crate::fidelity::resolve(edge, &node.attributes, workflow.attributes());
        if std::mem::take(&mut self.degrade_full_fidelity) && fidelity == crate::fidelity::FidelityMode::Full
        {
            fidelity = crate::fidelity::FidelityMode::SummaryHigh;
        }
        let full_llm = fidelity == crate::fidelity::FidelityMode::Full && node.handler_type().is_llm();
        let previous = self.state.completed.last().cloned();
        let thread = full_llm
            .then(|| crate::fidelity::resolve_thread(node, edge, workflow, previous.as_deref()))
            .flatten()
            .map(str::to_string);
        self.current_thread = thread.clone();
        self.context_set("internal.fidelity", fidelity.as_str());
        self.preamble = if node.handler_type().is_llm() {
            let input = PreambleInput {
                goal: workflow.goal(),
                run_id: &self.run_id,
                stages: &self.state.summaries,
                context: &self.state.context,
            };
            crate::fidelity::preamble::build(fidelity, &input)
        } else {
            None
        };
        self.context_set("internal.thread_id", thread.map_or(Value::Null, Value::from));
        self.events.stage_event(
            "stage.started",
            &node.id,
            visit,
            json!({"handler": node.handler_type().name()}),
        );
        let started_at = now_rfc3339();
        let clock = Instant::now();
        let (outcome, attempts) = match self.run_stage(node, visit, &stage_dir).await {
            StageEnd::Done { outcome, attempts } => (outcome, attempts),
            StageEnd::Paused(reason) => {
                self.uncount_visit(&node.id);
                self.save_checkpoint(RunStatus::Paused, &node.id, Some(&node.id));
                self.events.stage_event("run.paused", &node.id, visit, json!({"reason": reason}));
                return Step::Finish(RunStatus::Paused, Some(reason));
            }
            StageEnd::Cancelled => {
                self.uncount_visit(&node.id);
                self.save_checkpoint(RunStatus::Interrupted, &node.id, Some(&node.id));
                return Step::Finish(
                    RunStatus::Interrupted,
                    Some(format!("interrupted during stage `{}`", node.id)),
                );
            }
        };
        let duration_ms = clock.elapsed().as_millis() as u64;
        self.record(node, visit, &stage_dir, &outcome, attempts, started_at, duration_ms);
        self.extend_thread(&stage_dir);
        self.commit_worktree(node, visit, outcome.status);
        if node.handler_type() == HandlerType::Exit {
            return Step::Finish(RunStatus::Succeeded, None);
        }
        let step = self.next_step(index, &outcome);
        let next_id = match &step {
            Step::Next(next) | Step::Restart(next) => Some(workflow.node_at(*next).id.as_str()),
            Step::Finish(..) => None,
        };
        self.save_checkpoint(RunStatus::Running, &node.id, next_id);
        step
    }

    /// Moves context values over the artifact threshold into the artifact store, leaving
    /// pointers, so checkpoints stay small; copies each into the work directory for agents.
    fn offload_large_values<'k>(&mut self, node: &Node, visit: u32, keys: impl Iterator<Item = &'k String>) {
        let offloaded = match self.artifacts.offload(&mut self.state.context, keys) {
            Ok(offloaded) => offloaded,
            Err(error) => {
                tracing::warn!(%error, "a large context value stays inline");
                return;
            }
        };
        for artifact in offloaded {
            if let Err(error) = self.artifacts.copy_to_work_dir(&artifact, &self.work_dir) {
                tracing::warn!(%error, "artifact not copied into the work directory");
            }
            self.events.stage_event(
                "artifact.offloaded",
                &node.id,
                visit,
                json!({"key": artifact.key, "bytes": artifact.bytes, "path": artifact.path.display().to_string()}),
            );
        }
    }

    /// Under `full` fidelity: adds the stage's exchange (what it sent, what came back) to its
    /// thread, in memory and in `threads/<key>.jsonl`, so the next stage on the thread sees it and
    /// a resumed run can rebuild it.
    fn extend_thread(&mut self, stage_dir: &std::path::Path) {
        use crate::backends::{Message, Role};
        let Some(key) = self.current_thread.take() else { return };
        let (Ok(prompt), Ok(response)) = (
            std::fs::read_to_string(stage_dir.join("prompt.md")),
            std::fs::read_to_string(stage_dir.join("response.md")),
        ) else {
            return;
        };
        let exchange = [
            Message { role: Role::User, content: prompt },
            Message { role: Role::Assistant, content: response },
        ];
        let dir = self.run_dir.root().join("threads");
        let path = dir.join(format!("{}.jsonl", crate::context::artifacts::encode_key(&key)));
        let lines: String =
            exchange.iter().filter_map(|m| serde_json::to_string(m).ok()).map(|l| l + "\n").collect();
        let appended = std::fs::create_dir_all(&dir).and_then(|()| {
            use std::io::Write as _;
            std::fs::OpenOptions::new().create(true).append(true).open(&path)?.write_all(lines.as_bytes())
        });
        if let Err(error) = appended {
            tracing::warn!(%error, "thread `{key}` not persisted");
        }
        self.threads.entry(key).or_default().extend(exchange);
    }

    /// Worktree mode: commits what the stage changed; a failed commit is reported, not fatal.
    fn commit_worktree(&mut self, node: &Node, visit: u32, status: StageStatus) {
        let Some(worktree) = &self.worktree else { return };
        match worktree.commit_stage(&self.run_id, &node.id, visit, status.as_str()) {
            Ok(sha) => {
                self.events.stage_event("worktree.committed", &node.id, visit, json!({"commit": sha}));
                self.last_commit = Some(sha);
            }
            Err(error) => {
                tracing::warn!(%error, "worktree commit failed");
                self.events.stage_event(
                    "worktree.commit_failed",
                    &node.id,
                    visit,
                    json!({"error": error.to_string()}),
                );
            }
        }
    }

    /// A stage that paused or was interrupted runs again on resume as the same visit (in a new,
    /// suffixed stage directory, so its partial files are kept).
    fn uncount_visit(&mut self, node_id: &str) {
        if let Some(count) = self.state.visits.get_mut(node_id) {
            *count -= 1;
            if *count == 0 {
                self.state.visits.remove(node_id);
            }
        }
    }

    /// Why an LLM stage may not start: the run's usage has reached `--max-tokens`/`--max-cost`.
    fn usage_ceiling_reached(&self, node: &Node) -> Option<String> {
        if !node.handler_type().is_llm() || self.options.dry_run {
            return None;
        }
        super::budget::UsageLimits::resolve(self.options.limits, self.workflow).reached(&self.state.stages)
    }

    /// `max_visits` on the node, graph `max_node_visits`, and the dry-run cap.
    fn visit_limit_exceeded(&self, node: &Node, visit: u32) -> Option<String> {
        let visit = i64::from(visit);
        if let Some(max) = node.attributes.integer("max_visits").filter(|max| visit > *max) {
            return Some(format!(
                "node `{}` would run a {} time, but max_visits={max}",
                node.id,
                ordinal(visit)
            ));
        }
        let graph_max =
            self.workflow.attributes().integer("max_node_visits").unwrap_or(DEFAULT_MAX_NODE_VISITS);
        let max = if self.options.dry_run { graph_max.min(DRY_RUN_MAX_VISITS) } else { graph_max };
        (visit > max).then(|| {
            let why = if self.options.dry_run { "the dry-run visit cap" } else { "max_node_visits" };
            format!("node `{}` would run a {} time, but {why} is {max}", node.id, ordinal(visit))
        })
    }

    /// Runs the node's handler, retrying failed attempts as the node's retry settings allow.
    async fn run_stage(&mut self, node: &Node, visit: u32, stage_dir: &std::path::Path) -> StageEnd {
        let Some(handler) = self.engine.handlers.for_node(node).cloned() else {
            let reason = format!("no handler is registered for type `{}`", node.handler_type());
            return StageEnd::Done { outcome: Outcome::fail(reason), attempts: 1 };
        };
        let max_retries = node
            .attributes
            .integer("max_retries")
            .or_else(|| self.workflow.attributes().integer("default_max_retries"))
            .unwrap_or(0)
            .max(0) as u32;
        let policy = RetryPolicy::preset(node.attributes.text("retry_policy"));
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = self.attempt(handler.as_ref(), node, visit, attempt, stage_dir).await;
            let mut outcome = match result {
                Ok(outcome) => outcome,
                Err(HandlerError::Retryable(reason)) => {
                    Outcome { failure_reason: Some(reason), ..Outcome::new(StageStatus::Retry) }
                }
                Err(HandlerError::Terminal(reason)) => {
                    return StageEnd::Done { outcome: Outcome::fail(reason), attempts: attempt }
                }
                Err(HandlerError::Paused(reason)) => return StageEnd::Paused(reason),
                Err(HandlerError::Cancelled) => return StageEnd::Cancelled,
            };
            if !matches!(outcome.status, StageStatus::Fail | StageStatus::Retry) {
                return StageEnd::Done { outcome, attempts: attempt };
            }
            if attempt <= max_retries {
                let retries = self.state.retries.entry(node.id.clone()).or_insert(0);
                *retries += 1;
                let retries = *retries;
                self.context_set(&format!("internal.retry_count.{}", node.id), retries);
                let delay = if self.options.dry_run {
                    std::time::Duration::ZERO
                } else {
                    policy.delay(attempt, seed(&self.run_id, &node.id))
                };
                self.events.stage_event(
                    "stage.retrying",
                    &node.id,
                    visit,
                    json!({"attempt": attempt + 1, "delay_ms": delay.as_millis() as u64, "reason": outcome.failure_reason}),
                );
                archive_attempt(stage_dir, attempt);
                tokio::select! {
                    _ = tokio::time::sleep(delay) => continue,
                    _ = self.cancel.cancelled() => return StageEnd::Cancelled,
                }
            }
            if node.attributes.boolean("allow_partial").unwrap_or(false) {
                outcome.status = StageStatus::PartialSuccess;
                outcome.notes =
                    Some(format!("retries exhausted after {attempt} attempts; allow_partial accepts it"));
            } else {
                outcome.status = StageStatus::Fail;
            }
            return StageEnd::Done { outcome, attempts: attempt };
        }
    }

    /// One attempt; a panicking handler becomes a failed attempt.
    async fn attempt(
        &self,
        handler: &dyn Handler,
        node: &Node,
        visit: u32,
        attempt: u32,
        stage_dir: &std::path::Path,
    ) -> Result<Outcome, HandlerError> {
        let stage = StageRun {
            node,
            workflow: self.workflow,
            context: &self.state.context,
            run_id: &self.run_id,
            run_dir: self.run_dir.root(),
            work_dir: &self.work_dir,
            stage_dir,
            visit,
            attempt,
            services: &self.engine.services,
            events: &self.events,
            cancel: &self.cancel,
            dry_run: self.options.dry_run,
            preamble: self.preamble.as_deref(),
            thread: self
                .current_thread
                .as_deref()
                .map(|key| (key, self.threads.get(key).map_or(&[][..], Vec::as_slice))),
            // Hook: the ceilings' remainder bounds a stage that makes several model calls.
            usage_left: super::budget::UsageLimits::resolve(self.options.limits, self.workflow)
                .left(&self.state.stages)
                .filter(|_| !self.options.dry_run),
        };
        match AssertUnwindSafe(handler.run(&stage)).catch_unwind().await {
            Ok(result) => result,
            Err(panic) => {
                let message = panic
                    .downcast_ref::<String>()
                    .map(String::as_str)
                    .or_else(|| panic.downcast_ref::<&str>().copied())
                    .unwrap_or("unknown panic");
                Ok(Outcome::fail(format!("the `{}` handler panicked: {message}", node.handler_type())))
            }
        }
    }

    /// Writes status.json, applies the outcome to the context and records the visit.
    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        node: &Node,
        visit: u32,
        stage_dir: &std::path::Path,
        outcome: &Outcome,
        attempts: u32,
        started_at: String,
        duration_ms: u64,
    ) {
        let status_file = StageStatusFile {
            outcome: outcome.clone(),
            handler: node.handler_type().name().to_string(),
            fidelity: self.state.context.get_text("internal.fidelity"),
            attempts,
            started_at,
            duration_ms,
        };
        let files_clock = Instant::now();
        if let Err(error) = crate::run_dir::write_json_file(&stage_dir.join("status.json"), &status_file) {
            tracing::warn!(%error, "could not write status.json");
        }
        self.timings.stage_files += files_clock.elapsed();
        self.state.context.apply(&outcome.context_updates);
        self.offload_large_values(node, visit, outcome.context_updates.keys());
        let context = &mut self.state.context;
        if node.handler_type() != HandlerType::Conditional {
            context.set("last_stage", node.id.clone());
        }
        context.set("outcome", outcome.status.as_str());
        match &outcome.preferred_label {
            Some(label) => context.set("preferred_label", label.clone()),
            None => {
                context.remove("preferred_label");
            }
        }
        if outcome.status == StageStatus::Fail {
            let reason = outcome.failure_reason.clone().unwrap_or_default();
            context.set("failure_class", if attempts > 1 { "retries_exhausted" } else { "stage_failed" });
            context.set("failure_signature", format!("{}:{}", node.id, reason.lines().next().unwrap_or("")));
        }
        self.state.completed.push(node.id.clone());
        self.state.outcomes.insert(node.id.clone(), outcome.status);
        self.state.stages.push(StageRecord {
            node_id: node.id.clone(),
            visit,
            status: outcome.status,
            duration_ms,
            handler: node.handler_type().name().to_string(),
            failure_reason: outcome.failure_reason.clone(),
            usage: outcome.usage,
            cost_usd: outcome.cost_usd,
        });
        if let Some(record) = self.state.stages.last() {
            let script = node.attributes.text("script");
            self.state.summaries.push(StageSummary::from_stage_dir(record, script, stage_dir));
        }
        let event = if outcome.status == StageStatus::Fail { "stage.failed" } else { "stage.completed" };
        self.events.stage_event(
            event,
            &node.id,
            visit,
            json!({"status": outcome.status, "duration_ms": duration_ms, "attempts": attempts,
                   "notes": outcome.notes, "failure_reason": outcome.failure_reason}),
        );
    }

    /// The edge to follow, the failure route, or the end of the run.
    fn next_step(&mut self, index: NodeIndex, outcome: &Outcome) -> Step {
        let workflow = self.workflow;
        let node = workflow.node_at(index);
        if let Some((edge, reason)) =
            select_edge(workflow, index, outcome, &self.state.context, Some(&self.artifacts))
        {
            let restart = edge.edge.attributes.boolean("loop_restart").unwrap_or(false);
            self.events.run_event(
                "edge.selected",
                json!({"from": node.id, "to": edge.to.id, "reason": reason.as_str(), "loop_restart": restart}),
            );
            self.entered_by = Some(edge.index);
            let step = if restart { Step::Restart } else { Step::Next };
            return workflow.index_of(&edge.to.id).map_or(Step::Finish(RunStatus::Failed, None), step);
        }
        if outcome.status == StageStatus::Fail {
            if let Some(target) = failure_route(workflow, index) {
                self.events.run_event(
                    "edge.selected",
                    json!({"from": node.id, "to": target, "reason": "retry_target"}),
                );
                return workflow.index_of(target).map_or(Step::Finish(RunStatus::Failed, None), Step::Next);
            }
            let reason = outcome.failure_reason.clone().unwrap_or_else(|| "no reason given".to_string());
            return Step::Finish(RunStatus::Failed, Some(format!("stage `{}` failed: {reason}", node.id)));
        }
        Step::Finish(
            RunStatus::Failed,
            Some(format!(
                "stage `{}` ended with outcome {} but none of its outgoing edges is eligible",
                node.id, outcome.status
            )),
        )
    }

    /// At the exit node: every goal gate must have succeeded; otherwise jump to the first
    /// unsatisfied gate's retry target, or fail the run.
    fn enforce_goal_gates(&mut self, exit: &Node) -> Option<Step> {
        let workflow = self.workflow;
        let gate = workflow
            .nodes()
            .filter(|node| node.is_goal_gate())
            .find(|node| !self.state.outcomes.get(&node.id).is_some_and(|status| status.is_successful()))?;
        let candidates = [
            gate.attributes.non_empty_text("retry_target"),
            gate.attributes.non_empty_text("fallback_retry_target"),
            workflow.attributes().non_empty_text("retry_target"),
            workflow.attributes().non_empty_text("fallback_retry_target"),
        ];
        let status = self.state.outcomes.get(&gate.id).map_or("not run".to_string(), |s| s.to_string());
        match candidates.into_iter().flatten().map(str::trim).find_map(|t| workflow.index_of(t)) {
            Some(target) => {
                let to = &workflow.node_at(target).id;
                self.events.run_event(
                    "edge.selected",
                    json!({"from": exit.id, "to": to, "reason": "goal_gate", "gate": gate.id, "gate_status": status}),
                );
                Some(Step::Next(target))
            }
            None => Some(Step::Finish(
                RunStatus::Failed,
                Some(format!("goal gate `{}` has not succeeded ({status}) and has no retry target", gate.id)),
            )),
        }
    }

    fn save_checkpoint(&mut self, status: RunStatus, current: &str, next: Option<&str>) {
        let clock = Instant::now();
        self.events.flush();
        self.timings.events += clock.elapsed();
        let clock = Instant::now();
        let checkpoint = CheckpointRef {
            run_id: &self.run_id,
            status,
            current_node: current,
            next_node: next,
            completed_nodes: &self.state.completed,
            node_outcomes: &self.state.outcomes,
            node_visits: &self.state.visits,
            node_retries: &self.state.retries,
            context: &self.state.context,
            timestamp: now_rfc3339(),
            commit: self.last_commit.as_deref(),
        };
        self.checkpoint_seq += 1;
        let written = self.run_dir.save_checkpoint(
            self.checkpoint_seq,
            current,
            &checkpoint,
            self.options.checkpoint_sync,
        );
        self.timings.checkpoints += clock.elapsed();
        self.timings.checkpoint_count += 1;
        match written {
            Ok(()) => self
                .events
                .run_event("checkpoint.saved", json!({"node_id": current, "status": status.as_str()})),
            Err(error) => {
                tracing::warn!(%error, "checkpoint not saved");
                self.events.run_event("checkpoint.failed", json!({"error": error.to_string()}));
            }
        }
    }

    /// Writes the final checkpoint, manifest and result, and emits the closing event.
    fn finish(mut self, last: NodeIndex, status: RunStatus, reason: Option<String>) -> RunReport {
        let last_id = self.workflow.node_at(last).id.clone();
        if matches!(status, RunStatus::Succeeded | RunStatus::Failed) {
            self.save_checkpoint(status, &last_id, None);
        }
        let result = self.close(status, if status == RunStatus::Paused { None } else { reason.clone() });
        let event = match status {
            RunStatus::Succeeded => "run.completed",
            RunStatus::Paused => "run.paused",
            RunStatus::Interrupted => "run.interrupted",
            _ => "run.failed",
        };
        if status != RunStatus::Paused {
            self.events.run_event(event, json!({"status": status.as_str(), "failure_reason": reason, "duration_ms": result.duration_ms}));
        }
        self.events.flush();
        let pause_reason = if status == RunStatus::Paused { reason } else { None };
        let worktree_hint = self.worktree.as_ref().map(RunWorktree::merge_hint);
        RunReport { result, pause_reason, timings: self.timings, worktree_hint }
    }
}

impl Run<'_> {
    /// Records how this run directory's run ended: manifest status and result.json.
    fn close(&mut self, status: RunStatus, failure_reason: Option<String>) -> RunResult {
        self.manifest.finished_at = Some(now_rfc3339());
        self.manifest.status = status;
        if let Err(error) = self.run_dir.write_json("manifest.json", &self.manifest) {
            tracing::warn!(%error, "manifest not updated");
        }
        let result = RunResult {
            run_id: self.run_id.clone(),
            status,
            failure_reason,
            completed_nodes: self.state.completed.clone(),
            duration_ms: self.started.elapsed().as_millis() as u64,
            stages: self.state.stages.clone(),
            run_dir: self.run_dir.root().display().to_string(),
            usage: crate::run_dir::UsageTotals::of(&self.state.stages),
        };
        if let Err(error) = self.run_dir.write_json("result.json", &result) {
            tracing::warn!(%error, "result.json not written");
        }
        result
    }

    /// A `loop_restart` edge: closes this run directory as `restarted` and continues in a new
    /// one beside it, linked both ways through the manifests. The context carries over; visits,
    /// completed stages and the event log start fresh.
    fn restart(&mut self, from: NodeIndex, target: NodeIndex) -> Result<(), RunDirError> {
        let workflow = self.workflow;
        let target_id = workflow.node_at(target).id.clone();
        let new_id = uuid::Uuid::now_v7().to_string();
        let parent = self.run_dir.root().parent().map(PathBuf::from).unwrap_or_default();
        let new_dir = RunDir::create(&parent.join(&new_id))?;
        let new_lock = new_dir.lock()?;
        let old_root = self.run_dir.root().display().to_string();
        let new_root = new_dir.root().display().to_string();

        let from_id = workflow.node_at(from).id.clone();
        self.save_checkpoint(RunStatus::Restarted, &from_id, Some(&target_id));
        self.manifest.restarted_as = Some(new_root.clone());
        self.close(RunStatus::Restarted, None);
        self.events.run_event("run.restarted", json!({"to": target_id, "run_dir": new_root}));
        self.events
            .reopen(new_dir.root(), &new_id)
            .map_err(|source| RunDirError::Io { path: new_dir.root().join("events.jsonl"), source })?;

        self.manifest = Manifest {
            run_id: new_id.clone(),
            started_at: now_rfc3339(),
            finished_at: None,
            status: RunStatus::Running,
            restarted_from: Some(old_root.clone()),
            restarted_as: None,
            ..self.manifest.clone()
        };
        new_dir.write_json("manifest.json", &self.manifest)?;
        new_dir.write_text("workflow.dot", workflow.source().text())?;
        self.artifacts = artifact_store(workflow, new_dir.root());
        self.run_dir = new_dir;
        self._lock = new_lock;
        self.checkpoint_seq = 0;
        self.run_id = new_id;
        let context = std::mem::take(&mut self.state.context);
        self.state = RunState { context, ..RunState::default() };
        self.context_set("internal.run_id", self.run_id.clone());
        self.started = Instant::now();
        self.events
            .run_event("run.started", json!({"workflow": workflow.name(), "restarted_from": old_root}));
        Ok(())
    }
}

/// Moves what attempt `attempt` left in the stage directory into `attempts/<attempt>/`, so the
/// next attempt starts clean and nothing an earlier attempt wrote is overwritten.
fn archive_attempt(stage_dir: &std::path::Path, attempt: u32) {
    let archive = stage_dir.join("attempts").join(attempt.to_string());
    let Ok(entries) = std::fs::read_dir(stage_dir) else { return };
    let entries: Vec<_> = entries.flatten().filter(|entry| entry.file_name() != "attempts").collect();
    if entries.is_empty() {
        return;
    }
    if let Err(error) = std::fs::create_dir_all(&archive) {
        tracing::warn!(%error, "could not archive attempt {attempt}");
        return;
    }
    for entry in entries {
        if let Err(error) = std::fs::rename(entry.path(), archive.join(entry.file_name())) {
            tracing::warn!(%error, "could not archive {}", entry.path().display());
        }
    }
}

fn seed(run_id: &str, node_id: &str) -> u64 {
    run_id
        .bytes()
        .chain(node_id.bytes())
        .fold(0xcbf2_9ce4_8422_2325u64, |h, b| (h ^ u64::from(b)).wrapping_mul(0x100_0000_01b3))
}

fn ordinal(n: i64) -> String {
    let suffix = match (n % 10, n % 100) {
        (1, 11) | (2, 12) | (3, 13) => "th",
        (1, _) => "st",
        (2, _) => "nd",
        (3, _) => "rd",
        _ => "th",
    };
    format!("{n}{suffix}")
}
