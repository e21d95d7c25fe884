//! The scheduler: walks a validated workflow one stage at a time from its start node, runs each
//! stage's handler (with retries), records what happened, and follows the selected edge until the
//! exit node, a failure, a pause or a cancellation. Everything it records goes through the run
//! directory and the event log; the loop itself holds no I/O details.

use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Instant;

use petgraph::graph::NodeIndex;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::conversation::Conversation;
use super::line_worktree::LineWorktree;
use super::run_scope::{RunScope, VisitCounts};
use super::walker::{LineState, Step, Walker};
use crate::context::artifacts::ArtifactStore;
use crate::context::Context;
use crate::event::{Event, RunEnd};
use crate::event_log::{now_rfc3339, EventLog, LoggedEvent};
use crate::graph::{HandlerType, Workflow};
use crate::run_dir::layout;
use crate::run_dir::stage_summary::StageSummary;
use crate::run_dir::{Manifest, RunDir, RunDirError, RunResult, SavedRun};
use crate::run_status::RunStatus;
use crate::stage::{HandlerRegistry, Services};
use crate::worktree::RunWorktree;
use crate::ValidWorkflow;

/// How to run a workflow.
#[derive(Debug, Clone, Default)]
pub struct RunOptions {
    /// Where the run's files go; `None` for `.fabro/runs/<run_id>` under the current directory.
    pub run_dir: Option<PathBuf>,
    /// The run's id when its launcher chose it (`fabro run --detach`, the run service); a new
    /// one otherwise.
    pub run_id: Option<String>,
    pub work_dir: PathBuf,
    /// Simulate every side effect; visits are capped low so loops end quickly.
    pub dry_run: bool,
    /// Extra context values (`--set key=value`).
    pub context: Vec<(String, Value)>,
    /// Run in a fresh git worktree on branch `fabro/run/<run_id>` (created from HEAD of the
    /// repository containing `work_dir`) and commit after every stage.
    pub worktree: bool,
    /// When journal entries are fsynced: after every stage (`--checkpoint-sync stage`, the
    /// default), at most 50 ms later (`batch`), or never (survives a crash of fabro, not of the
    /// machine).
    pub checkpoint_sync: crate::run_dir::journal::SyncMode,
    /// Keep the git worktrees of parallel branches after their parallel stage (they are removed
    /// by default; their branches are always kept).
    pub keep_worktrees: bool,
    /// Set when this run is the child of a manager stage (see [`crate::stage::child_run`]).
    pub parent: Option<crate::stage::child_run::ParentLink>,
    /// `--max-tokens`/`--max-cost`; the graph's `max_tokens`/`max_cost` apply when unset.
    pub limits: crate::usage::UsageLimits,
    /// How LLM stages are answered, recorded in the manifest for `fabro resume`.
    pub launch: crate::run_dir::LaunchRecord,
    /// `--label key=value`, kept in the manifest.
    pub labels: std::collections::BTreeMap<String, String>,
    /// `--max-output`: the most bytes a command stage may write to its logs.
    pub max_output: Option<u64>,
    /// `--sandbox`: where stages' programs run, unless a stage says otherwise.
    pub sandbox: Option<crate::graph::settings::SandboxKind>,
    /// The config file's `sandbox`: used when neither the stage, `--sandbox` nor the graph says.
    pub user_sandbox: Option<crate::graph::settings::SandboxKind>,
    /// Run lifecycle hooks (`[[hooks]]`); none fire in a dry run or in a manager's child runs.
    pub hooks: crate::lifecycle_hooks::LifecycleHooks,
    /// The configuration files read to set the run up, kept in the run directory when it starts
    /// so that a resume uses them as they were.
    pub config_files: crate::config_files::ConfigFiles,
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
    /// Why the run paused (a human gate without an answer, a ceiling, ...), when it did.
    pub pause: Option<crate::outcome::Pause>,
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
    pub(super) handlers: HandlerRegistry,
    pub(super) services: Arc<Services>,
    /// Step mode: reviews every stage of the main line.
    pub(super) step: Option<Arc<dyn super::step::StepReviewer>>,
}

impl Engine {
    pub fn new(handlers: HandlerRegistry, services: Services) -> Engine {
        Engine { handlers, services: Arc::new(services), step: None }
    }

    /// Step mode: `reviewer` sees every stage of the main line when it ends and decides whether
    /// the run goes on, goes on with a note for the next LLM stage, or pauses.
    pub fn with_step_reviewer(mut self, reviewer: Arc<dyn super::step::StepReviewer>) -> Engine {
        self.step = Some(reviewer);
        self
    }

    /// Checks that the providers the LLM stages of `workflow` call can be reached, waiting for
    /// them up to their retry windows (`waiting` is told when it waits); call it before
    /// [`Engine::run`] or [`Engine::resume`] to refuse a run whose provider is not there rather
    /// than pause it at its first LLM stage.
    pub async fn check_providers(
        &self,
        workflow: &Workflow,
        waiting: &(dyn Fn(&str) + Send + Sync),
    ) -> Result<(), crate::llm::Unreachable> {
        self.services.backend.check_reachable(workflow, waiting).await
    }

    /// Creates the run directory and runs the workflow to its end. `observe` sees every event.
    pub async fn run(
        &self,
        valid: &ValidWorkflow,
        options: &RunOptions,
        observe: impl Fn(&LoggedEvent) + Send + Sync + 'static,
        cancel: CancellationToken,
    ) -> Result<RunReport, StartError> {
        let workflow = &valid.workflow;
        let start = workflow
            .graph()
            .node_indices()
            .find(|&i| workflow.node_at(i).handler_type() == HandlerType::Start)
            .ok_or(StartError::NoStart)?;
        let run_id = options.run_id.clone().unwrap_or_else(|| uuid::Uuid::now_v7().to_string());
        let root = match &options.run_dir {
            Some(root) => root.clone(),
            None => {
                crate::fabro_dir::keep_out_of_git(Path::new(".fabro"));
                PathBuf::from(".fabro").join("runs").join(&run_id)
            }
        };
        let (run_dir, reused) = RunDir::create_or_reuse(&root)?;
        let lock = run_dir.lock()?;
        let worktree = match options.worktree {
            true => Some(RunWorktree::create(
                &options.work_dir,
                &run_id,
                &crate::run_dir::layout::run_worktree_dir(run_dir.root()),
            )?),
            false => None,
        };
        let worktree = LineWorktree::new(options.work_dir.clone(), worktree, None);
        let work_dir = &worktree.work_dir;
        let events = open_events(run_dir.root(), &run_id, 0, observe)?;
        let manifest = Manifest {
            run_id: run_id.clone(),
            workflow: workflow.name().to_string(),
            // Absolute, so a resume from another directory finds the file (and its children).
            source_path: std::path::absolute(workflow.source().path())
                .unwrap_or_else(|_| workflow.source().path().to_path_buf())
                .display()
                .to_string(),
            source_sha256: crate::source::sha256_hex(workflow.source().text()),
            goal: workflow.goal().to_string(),
            work_dir: work_dir.display().to_string(),
            started_at: now_rfc3339(),
            finished_at: None,
            status: RunStatus::Running,
            tool_version: env!("CARGO_PKG_VERSION").to_string(),
            restarted_from: None,
            restarted_as: None,
            forked_from: None,
            worktree: worktree.worktree.as_ref().map(|w| crate::run_dir::WorktreeRecord {
                path: w.path().display().to_string(),
                branch: w.branch().to_string(),
            }),
            launch: options.launch.clone(),
            pause: None,
            labels: options.labels.clone(),
            inputs: workflow.inputs().clone(),
            containers: Vec::new(),
            base_commit: crate::worktree::changes::head_commit(&options.work_dir),
        };
        run_dir.write_json(layout::MANIFEST, &manifest)?;
        run_dir.write_text(layout::SAVED_WORKFLOW, workflow.source().text())?;
        let config_files = crate::run_dir::layout::config_files(run_dir.root());
        options
            .config_files
            .save(&config_files)
            .map_err(|source| crate::run_dir::RunDirError::Io { path: config_files, source })?;
        let journal = run_dir.journal(0, None, options.checkpoint_sync)?;
        let mut context = seed_context(workflow, options, work_dir);
        context.set("internal.run_id", run_id.clone());
        let start_state = RunStart {
            run_dir,
            run_id,
            events,
            journal,
            visits: VisitCounts::default(),
            state: LineState { context, ..LineState::default() },
            conversation: Conversation::default(),
            worktree,
            manifest,
            lock,
        };
        let run = self.begin(valid, options, start_state, cancel);
        if !reused.is_empty() {
            run.main.scope.events.run_event(Event::RunDirReused { run_dir: root.clone(), removed: reused });
        }
        run.main.scope.events.run_event(Event::RunStarted {
            workflow: workflow.name().to_string(),
            goal: Some(workflow.goal().to_string()),
            run_dir: Some(root),
            restarted_from: None,
        });
        if let Err(veto) = run.main.fire_run_hooks(None, None).await {
            let reason = format!("the run did not start: {veto}");
            return Ok(run.finish(start, RunStatus::Failed, Some(reason)).await);
        }
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
        observe: impl Fn(&LoggedEvent) + Send + Sync + 'static,
        cancel: CancellationToken,
    ) -> Result<RunReport, StartError> {
        let workflow = &valid.workflow;
        let lock = saved.lock;
        let ended = matches!(saved.checkpoint.status, RunStatus::Succeeded | RunStatus::Failed);
        let next_id = match (&saved.checkpoint.next_node, ended) {
            (Some(next), false) => next.clone(),
            _ => saved.checkpoint.current_node.clone(),
        };
        let next = workflow.index_of(&next_id).ok_or_else(|| StartError::MissingNode(next_id.clone()))?;
        let events = open_events(saved.dir.root(), &saved.manifest.run_id, saved.last_event_seq, observe)?;
        // An interrupt asked of the run's last process, which ended before acting on it.
        crate::run_dir::take_interrupt_request(saved.dir.root());
        // A stage whose fabro was killed may still be running: stop it before it runs again.
        for survivor in crate::run_dir::stage_process::kill_survivors(saved.dir.root()) {
            let stage = survivor.stage_dir.strip_prefix(saved.dir.root()).unwrap_or(&survivor.stage_dir);
            events.run_event(Event::StageSurvivorKilled {
                stage_dir: stage.display().to_string(),
                pgid: survivor.pgid,
            });
        }
        let previous = saved.checkpoint.status;
        let worktree = match &saved.manifest.worktree {
            Some(record) => Some(RunWorktree::open(
                std::path::Path::new(&record.path),
                saved.checkpoint.commit.as_deref(),
            )?),
            None => None,
        };
        let worktree = LineWorktree::new(
            PathBuf::from(&saved.manifest.work_dir),
            worktree,
            saved.checkpoint.commit.clone(),
        );
        let mut manifest = saved.manifest;
        manifest.launch = options.launch.clone();
        manifest.status = RunStatus::Running;
        manifest.finished_at = None;
        manifest.pause = None;
        saved.dir.write_json(layout::MANIFEST, &manifest)?;
        let checkpoint = saved.checkpoint;
        let mut summaries = saved.summaries;
        for summary in &mut summaries {
            summary.script = workflow.node(&summary.node_id).and_then(|n| n.script()).map(str::to_string);
        }
        let conversation = Conversation::resumed(saved.dir.root());
        let journal = saved.dir.journal(
            saved.journal.last_seq,
            saved.journal.torn.as_ref(),
            options.checkpoint_sync,
        )?;
        if let Some(torn) = &saved.journal.torn {
            events.run_event(Event::JournalTruncated {
                offset: torn.offset,
                bytes: torn.bytes,
                entries: saved.journal.last_seq,
            });
        }
        let state = LineState {
            context: checkpoint.context,
            completed: checkpoint.completed_nodes,
            outcomes: checkpoint.node_outcomes,
            retries: checkpoint.node_retries,
            stages: summaries.iter().map(StageSummary::record).collect(),
            summaries,
        };
        let start_state = RunStart {
            run_id: manifest.run_id.clone(),
            run_dir: saved.dir,
            events,
            journal,
            visits: VisitCounts::new(checkpoint.node_visits),
            state,
            conversation,
            worktree,
            manifest,
            lock,
        };
        let mut run = self.begin(valid, options, start_state, cancel);
        let main = &mut run.main;
        main.journaled_stages = main.state.summaries.len();
        // A run from before the journal starts one holding its whole state.
        main.journal_from_scratch = saved.journal.last_seq == 0;
        main.scope.events.run_event(Event::RunResumed {
            from: next_id.clone(),
            previous_status: previous,
            run_dir: main.scope.run_dir.root().to_path_buf(),
        });
        if ended {
            // The process stopped after the final checkpoint, before recording the end.
            let reason = (previous == RunStatus::Failed).then(|| {
                "the run failed; its reason was not recorded before the process stopped".to_string()
            });
            return Ok(run.finish(next, previous, reason).await);
        }
        Ok(run.execute(next).await)
    }
}

/// Opens the run's event log (continuing after `next_seq`) with `observe` watching it.
fn open_events(
    root: &Path,
    run_id: &str,
    next_seq: u64,
    observe: impl Fn(&LoggedEvent) + Send + Sync + 'static,
) -> Result<EventLog, StartError> {
    let mut events =
        EventLog::open(&root.join(layout::EVENTS), run_id, next_seq).map_err(StartError::Events)?;
    events.observe(observe);
    Ok(events)
}

/// What a new or resumed run starts with, before its main line walks.
struct RunStart {
    run_dir: RunDir,
    run_id: String,
    events: EventLog,
    journal: crate::run_dir::journal::Writer,
    visits: VisitCounts,
    state: LineState,
    conversation: Conversation,
    worktree: LineWorktree,
    manifest: Manifest,
    lock: crate::run_dir::RunLock,
}

impl Engine {
    /// The run's shared scope and its main line, ready to walk.
    fn begin<'e>(
        &'e self,
        valid: &'e ValidWorkflow,
        options: &'e RunOptions,
        start: RunStart,
        cancel: CancellationToken,
    ) -> Run<'e> {
        let workflow = &valid.workflow;
        let scope = RunScope {
            engine: self,
            workflow,
            children: &valid.children,
            options,
            artifacts: artifact_store(workflow, start.run_dir.root()),
            run_dir: start.run_dir,
            run_id: start.run_id,
            events: start.events,
            visits: Mutex::new(start.visits),
            timings: Mutex::default(),
            journal: Mutex::new(start.journal),
            walk: Mutex::default(),
        };
        let main = Walker::main(Arc::new(scope), start.state, start.conversation, start.worktree, cancel);
        Run { main, manifest: start.manifest, started: Instant::now(), _lock: start.lock }
    }
}

/// The run's artifact store, with the graph's `artifact_threshold` (default 100 KiB).
fn artifact_store(workflow: &Workflow, run_dir: &std::path::Path) -> ArtifactStore {
    let threshold =
        workflow.settings().artifact_threshold.unwrap_or(crate::context::artifacts::DEFAULT_THRESHOLD);
    ArtifactStore::new(run_dir, threshold)
}

/// Context at the start: `graph.*` mirrors of every graph attribute, `inputs.*` the run's inputs,
/// then `--set` values.
fn seed_context(workflow: &Workflow, options: &RunOptions, work_dir: &std::path::Path) -> Context {
    let mut context = Context::new();
    for (key, value) in workflow.context_mirror() {
        context.set(key, value);
    }
    for (key, value) in workflow.inputs() {
        context.set(format!("inputs.{key}"), value.clone());
    }
    context.set("internal.work_dir", work_dir.display().to_string());
    for (key, value) in &options.context {
        context.set(key.clone(), value.clone());
    }
    context
}

/// A run in progress: its main line (which owns the shared scope) and what only the run as a
/// whole has: the manifest and the lock.
struct Run<'e> {
    main: Walker<'e>,
    manifest: Manifest,
    started: Instant,
    /// Held for as long as this process drives the run.
    _lock: crate::run_dir::RunLock,
}

impl Run<'_> {
    async fn execute(mut self, start: NodeIndex) -> RunReport {
        let mut current = start;
        loop {
            match self.main.visit(current).await {
                Step::Next(next) => current = next,
                Step::Restart(target) => match self.restart(current, target) {
                    Ok(()) => current = target,
                    Err(error) => {
                        return self.finish(current, RunStatus::Failed, Some(error.to_string())).await
                    }
                },
                Step::Finish(status, reason) => return self.finish(current, status, reason).await,
                Step::Pause(pause) => {
                    let reason = Some(pause.reason.clone());
                    self.manifest.pause = Some(crate::run_dir::PauseRecord::of(&pause));
                    let mut report = self.finish(current, RunStatus::Paused, reason).await;
                    report.pause = Some(pause);
                    return report;
                }
            }
        }
    }

    /// Writes the final checkpoint, result.json, the closing event and the manifest, in that
    /// order: a process killed anywhere in between leaves the manifest saying `running`, and a
    /// resume finishes the records.
    /// `reason`: why it failed, or why it paused. The run's hooks hear of the end after the
    /// closing event.
    async fn finish(mut self, last: NodeIndex, status: RunStatus, reason: Option<String>) -> RunReport {
        let last_id = self.main.scope.workflow.node_at(last).id.clone();
        if matches!(status, RunStatus::Succeeded | RunStatus::Failed) {
            // Not saved: result.json and the manifest still record the end.
            let _ = self.main.save_checkpoint(status, &last_id, None);
        }
        let result =
            self.write_result(status, if status == RunStatus::Paused { None } else { reason.clone() });
        let failure_reason = if status == RunStatus::Paused { None } else { reason.clone() };
        let end = RunEnd { status, failure_reason, duration_ms: result.duration_ms };
        let events = &self.main.scope.events;
        // A paused run's `run.paused` came from the stage that paused it.
        match status {
            RunStatus::Paused => {}
            RunStatus::Succeeded => events.run_event(Event::RunCompleted(end)),
            RunStatus::Interrupted => events.run_event(Event::RunInterrupted(end)),
            _ => events.run_event(Event::RunFailed(end)),
        }
        // Nothing to veto: the run has ended.
        let _ = self.main.fire_run_hooks(Some(status), reason.as_deref()).await;
        let events = &self.main.scope.events;
        events.flush();
        self.write_manifest(status);
        let worktree_hint = self.main.worktree.merge_hint();
        let timings = *self.main.scope.timings();
        RunReport { result, pause: None, timings, worktree_hint }
    }

    /// Writes result.json: how this run directory's run ended.
    fn write_result(&mut self, status: RunStatus, failure_reason: Option<String>) -> RunResult {
        let scope = &self.main.scope;
        let result = RunResult {
            run_id: scope.run_id.clone(),
            status,
            failure_reason,
            completed_nodes: self.main.state.completed.clone(),
            duration_ms: self.started.elapsed().as_millis() as u64,
            stages: self.main.state.stages.clone(),
            run_dir: scope.run_dir.root().display().to_string(),
            usage: crate::usage::UsageTotals::of(&self.main.state.stages),
            dry_run: scope.options.dry_run.then(|| scope.walk().report(scope.workflow)),
        };
        if let Err(error) = scope.run_dir.write_json(layout::RESULT, &result) {
            tracing::warn!(%error, "result.json not written");
        }
        result
    }

    /// Records the run's end in its manifest: the last of its records.
    fn write_manifest(&mut self, status: RunStatus) {
        self.manifest.finished_at = Some(now_rfc3339());
        self.manifest.status = status;
        self.manifest.containers = crate::run_dir::containers::read(self.main.scope.run_dir.root());
        if let Err(error) = self.main.scope.run_dir.write_json(layout::MANIFEST, &self.manifest) {
            tracing::warn!(%error, "manifest not updated");
        }
    }

    /// A `loop_restart` edge: closes this run directory as `restarted` and continues in a new
    /// one beside it, linked both ways through the manifests. The context carries over; visits,
    /// completed stages and the event log start fresh.
    fn restart(&mut self, from: NodeIndex, target: NodeIndex) -> Result<(), RunDirError> {
        let workflow = self.main.scope.workflow;
        let target_id = workflow.node_at(target).id.clone();
        let new_id = uuid::Uuid::now_v7().to_string();
        let parent = self.main.scope.run_dir.root().parent().map(PathBuf::from).unwrap_or_default();
        let new_dir = RunDir::create(&parent.join(&new_id))?;
        let new_lock = new_dir.lock()?;
        let old_root = self.main.scope.run_dir.root().display().to_string();
        let new_root = new_dir.root().display().to_string();

        let from_id = workflow.node_at(from).id.clone();
        self.main.save_checkpoint(RunStatus::Restarted, &from_id, Some(&target_id)).map_err(|error| {
            RunDirError::Io {
                path: self.main.scope.run_dir.root().join(layout::CHECKPOINT),
                source: std::io::Error::other(error),
            }
        })?;
        self.manifest.restarted_as = Some(new_root.clone());
        self.write_result(RunStatus::Restarted, None);
        self.main.scope.events.run_event(Event::RunRestarted { to: target_id.clone(), run_dir: new_root });
        self.main.scope.events.flush();
        self.write_manifest(RunStatus::Restarted);
        let Some(scope) = Arc::get_mut(&mut self.main.scope) else {
            let source =
                std::io::Error::other("a loop_restart edge was followed while parallel branches still ran");
            return Err(RunDirError::Io { path: new_dir.root().to_path_buf(), source });
        };
        scope
            .events
            .reopen(&new_dir.root().join(layout::EVENTS), &new_id)
            .map_err(|source| RunDirError::Io { path: new_dir.root().join(layout::EVENTS), source })?;

        self.manifest = Manifest {
            run_id: new_id.clone(),
            started_at: now_rfc3339(),
            finished_at: None,
            status: RunStatus::Running,
            restarted_from: Some(old_root.clone()),
            restarted_as: None,
            pause: None,
            containers: Vec::new(),
            ..self.manifest.clone()
        };
        new_dir.write_json(layout::MANIFEST, &self.manifest)?;
        new_dir.write_text(layout::SAVED_WORKFLOW, workflow.source().text())?;
        scope.journal = Mutex::new(new_dir.journal(0, None, scope.options.checkpoint_sync)?);
        scope.artifacts = artifact_store(workflow, new_dir.root());
        scope.run_dir = new_dir;
        scope.visits = Mutex::default();
        scope.run_id = new_id;
        self._lock = new_lock;
        let context = std::mem::take(&mut self.main.state.context);
        self.main.state = LineState { context, ..LineState::default() };
        self.main.journaled_stages = 0;
        self.main.journal_from_scratch = true;
        let run_id = self.main.scope.run_id.clone();
        self.main.context_set("internal.run_id", run_id);
        self.started = Instant::now();
        self.main.scope.events.run_event(Event::RunStarted {
            workflow: workflow.name().to_string(),
            goal: None,
            run_dir: None,
            restarted_from: Some(old_root),
        });
        Ok(())
    }
}
