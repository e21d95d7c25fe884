//! A walker follows one line of execution through the graph: the main line of a run, or one branch
//! of a parallel stage. It runs each stage's handler (with retries), records what happened, and
//! picks the next node. What all lines of a run share (the run directory, the event log, the
//! artifact store, visit counters) sits in a [`RunScope`] they borrow; what a line's LLM stages
//! carry is its [`Conversation`]; where its stages run is its [`LineWorktree`]; the main line's
//! journal entries are made in `checkpoint.rs`.

use std::collections::BTreeMap;
use std::panic::AssertUnwindSafe;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use futures::FutureExt;
use petgraph::graph::{EdgeIndex, NodeIndex};
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

use super::conversation::{Conversation, RunFacts};
use super::edge_selection::{assumed_edge, can_end, loop_exit, random_draw, select_edge, SelectionReason};
use super::line_worktree::LineWorktree;
use super::retry::RetryPolicy;
use super::run_scope::RunScope;
use super::step::{pending_notes, StageReview, StepDecision, OPERATOR_NOTES_KEY};
use crate::atomic_file::Durability;
use crate::context::Context;
use crate::event::{Event, SelectedEdge};
use crate::event_log::now_rfc3339;
use crate::graph::{EdgeRef, HandlerType, Node, Workflow};
use crate::lifecycle_hooks::{Directive, HookDecision};
use crate::outcome::{FailureClass, Outcome, Pause, PauseKind, StageStatus};
use crate::run_dir::layout;
use crate::run_dir::stage_summary::StageSummary;
use crate::run_dir::{StageRecord, StageStatusFile};
use crate::run_status::RunStatus;
use crate::stage::{Handler, HandlerError, RunEnv, RunSoFar, StageBudget, StageRun};
use crate::usage::{StageCeiling, StageLimits};

/// Default cap on how often any one node may run (graph `max_node_visits` overrides it).
const DEFAULT_MAX_NODE_VISITS: i64 = 1000;
/// Under `--dry-run` loops stop after this many visits of a node.
const DRY_RUN_MAX_VISITS: i64 = 3;

/// What one line has done so far, checkpointed for the main line.
#[derive(Default)]
pub(super) struct LineState {
    pub context: Context,
    pub completed: Vec<String>,
    pub outcomes: BTreeMap<String, StageStatus>,
    pub retries: BTreeMap<String, u32>,
    pub stages: Vec<StageRecord>,
    /// What preambles say about each completed stage, built once when it completes.
    pub summaries: Vec<StageSummary>,
}

/// Which line a walker follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Line {
    Main,
    /// A branch of a parallel stage, by branch id.
    Branch(String),
}

/// One line of execution and everything it carries from stage to stage.
pub(super) struct Walker<'e> {
    pub scope: Arc<RunScope<'e>>,
    pub line: Line,
    pub state: LineState,
    /// The edge the current stage was entered by (none for the first stage after a start or
    /// resume, or after a jump to a retry target).
    pub entered_by: Option<EdgeIndex>,
    /// The preamble, thread and notes of the LLM stage about to run; the threads so far.
    pub conversation: Conversation,
    /// Where stages run, and the run's worktree in worktree mode.
    pub worktree: LineWorktree,
    /// Cancelled on SIGINT/SIGTERM, or for a branch when its parallel stage no longer needs it.
    pub cancel: CancellationToken,
    /// The outcome of the last stage this line recorded.
    pub last_outcome: Option<Outcome>,
    /// How many of `state.summaries` the journal holds (main line).
    pub journaled_stages: usize,
    /// The next journal entry holds the whole state (a journal started afresh).
    pub journal_from_scratch: bool,
}

/// How one stage visit ended.
/// The longest context key a stage may set (a script writes `context_updates` in its
/// status.json; keys are shown in tables and used in conditions).
pub const MAX_CONTEXT_KEY_CHARS: usize = 1024;

/// Refuses an outcome that sets a context key longer than [`MAX_CONTEXT_KEY_CHARS`]: the stage
/// fails with the reason, and none of its updates are applied.
fn check_context_keys(outcome: Outcome) -> Result<Outcome, HandlerError> {
    match outcome.context_updates.keys().find(|key| key.chars().count() > MAX_CONTEXT_KEY_CHARS) {
        None => Ok(outcome),
        Some(key) => Err(HandlerError::Terminal(format!(
            "the stage set a context key of {} characters (`{}…`); keys may have at most {MAX_CONTEXT_KEY_CHARS}",
            key.chars().count(),
            key.chars().take(40).collect::<String>()
        ))),
    }
}

/// The outcome with the run's secrets ([`crate::secrets`]) redacted from what a stage's content
/// set (a script's status.json, a model's answer): context values, notes and the failure reason,
/// before they reach the context, later prompts, events, hooks and records.
fn redact_secrets(mut outcome: Outcome) -> Outcome {
    let secrets = crate::secrets::values();
    if secrets.is_empty() {
        return outcome;
    }
    for value in outcome.context_updates.values_mut() {
        *value = secrets.redact_json(value);
    }
    for text in
        [&mut outcome.notes, &mut outcome.failure_reason, &mut outcome.preferred_label].into_iter().flatten()
    {
        *text = secrets.redact(text);
    }
    outcome
}

// Returned once per stage and matched at once: boxing the outcome would only add an allocation.
#[allow(clippy::large_enum_variant)]
pub(super) enum StageEnd {
    Done { outcome: Outcome, attempts: u32 },
    Paused(Pause),
    Cancelled,
}

/// Where a line goes after a stage.
pub(super) enum Step {
    Next(NodeIndex),
    /// Follow a `loop_restart` edge: continue at the node in a fresh run directory.
    Restart(NodeIndex),
    /// The line ends (succeeded, failed or interrupted), with the failure's reason.
    Finish(RunStatus, Option<String>),
    /// The line pauses.
    Pause(Pause),
}

impl<'e> Walker<'e> {
    /// The main line of a run, continuing with `state` (empty for a new run).
    pub fn main(
        scope: Arc<RunScope<'e>>,
        state: LineState,
        conversation: Conversation,
        worktree: LineWorktree,
        cancel: CancellationToken,
    ) -> Walker<'e> {
        Walker {
            scope,
            line: Line::Main,
            state,
            entered_by: None,
            conversation,
            worktree,
            cancel,
            last_outcome: None,
            journaled_stages: 0,
            journal_from_scratch: false,
        }
    }

    /// A branch of this line's parallel stage: it starts at the edge `entered_by` with `context`
    /// (a fork of this line's), this line's preamble summaries and threads, working in `work_dir`.
    pub fn branch(
        &self,
        branch_id: &str,
        entered_by: EdgeIndex,
        context: Context,
        work_dir: PathBuf,
        cancel: CancellationToken,
    ) -> Walker<'e> {
        let state = LineState { context, summaries: self.state.summaries.clone(), ..LineState::default() };
        Walker {
            scope: Arc::clone(&self.scope),
            line: Line::Branch(branch_id.to_string()),
            state,
            entered_by: Some(entered_by),
            conversation: self.conversation.for_branch(),
            worktree: LineWorktree::plain(work_dir),
            cancel,
            last_outcome: None,
            journaled_stages: 0,
            journal_from_scratch: false,
        }
    }

    pub fn is_main(&self) -> bool {
        self.line == Line::Main
    }

    pub fn context_set(&mut self, key: &str, value: impl Into<Value>) {
        self.state.context.set(key, value);
    }

    /// Runs one visit of the node at `index` and decides where to go next.
    pub async fn visit(&mut self, index: NodeIndex) -> Step {
        let scope = Arc::clone(&self.scope);
        let workflow: &'e Workflow = scope.workflow;
        let node = workflow.node_at(index);
        // An exit with outcome=fail ends the run failed anyway: its goal gates are moot.
        if node.handler_type() == HandlerType::Exit && !node.is_failing_exit() && self.is_main() {
            if let Some(step) = self.enforce_goal_gates(node) {
                return step;
            }
        }
        let visit = scope.visits().count(&node.id);
        if let Some(reason) = self.visit_limit_exceeded(node, visit) {
            // The refused visit never ran: the records count only the visits that did.
            self.uncount_visit(&node.id);
            return Step::Finish(RunStatus::Failed, Some(reason));
        }
        // Usage ceilings pause the run before an LLM stage.
        let ceiling = self.usage_ceiling_reached(node).map(|reason| Pause::new(PauseKind::Ceiling, reason));
        if let Some(pause) = ceiling.or_else(|| self.stage_ceiling_not_raised(node)) {
            self.uncount_visit(&node.id);
            let _ = self.save_checkpoint(RunStatus::Paused, &node.id, Some(&node.id));
            if self.is_main() {
                scope.events.stage_event(&node.id, visit, Event::run_paused(&pause));
            }
            return Step::Pause(pause);
        }
        let keeps_files = self.keeps_stage_files(node);
        let stage_dir = if keeps_files {
            let files_clock = Instant::now();
            let created = scope.run_dir.stage_dir(&node.id, visit);
            scope.timings().stage_files += files_clock.elapsed();
            match created {
                Ok(dir) => dir,
                Err(error) => return Step::Finish(RunStatus::Failed, Some(error.to_string())),
            }
        } else {
            crate::run_dir::layout::node_dir(scope.run_dir.root(), &node.id).join(visit.to_string())
        };
        self.context_set("current_node", node.id.clone());
        self.context_set("internal.node_visit_count", visit);
        self.prepare_llm_stage(node);
        let started = Event::StageStarted {
            handler: node.handler_type().name().to_string(),
            stage_dir: keeps_files.then(|| relative_dir(scope.run_dir.root(), &stage_dir)),
            branch_id: match &self.line {
                Line::Branch(branch) => Some(branch.clone()),
                Line::Main => None,
            },
            sandbox: self.sandbox_of(node).map(|sandbox| sandbox.to_string()),
        };
        scope.events.stage_event(&node.id, visit, started);
        // Watchers (`fabro logs -f`, `fabro serve`) see a stage start while it runs, not only at
        // the next checkpoint: one write, no fsync. A routing stage ends at once.
        if keeps_files {
            scope.events.flush();
        }
        // Routing stages (start, exit, conditional) are not stages a hook hears of.
        let heard = match keeps_files {
            true => self.fire_stage_hooks(node, visit, &stage_dir, None).await,
            false => Ok(None),
        };
        let started_at = now_rfc3339();
        let clock = Instant::now();
        let mut sent_to = None;
        let end = match (heard, node.handler_type()) {
            // A blocking hook's veto fails the stage: its failure routing applies.
            (Err(veto), _) => StageEnd::Done {
                outcome: Outcome::fail(veto.to_string()).with_class(FailureClass::Structural),
                attempts: 1,
            },
            // A blocking hook's skip or override: the stage does not run.
            (Ok(Some(directive)), _) => {
                if let HookDecision::Override { to, .. } = &directive.decision {
                    sent_to = Some(to.clone());
                }
                StageEnd::Done { outcome: skipped_by_hook(&directive), attempts: 0 }
            }
            (Ok(None), HandlerType::Parallel) => super::parallel::run(self, index, visit).await,
            (Ok(None), _) => self.run_stage(node, visit, &stage_dir).await,
        };
        let (mut outcome, attempts) = match end {
            StageEnd::Done { outcome, attempts } => (outcome, attempts),
            StageEnd::Paused(pause) => {
                self.uncount_visit(&node.id);
                if let Some(ceiling) = &pause.stage_ceiling {
                    let remembered = serde_json::to_value(ceiling).unwrap_or_default();
                    self.context_set(&StageCeiling::context_key(&node.id), remembered);
                }
                let _ = self.save_checkpoint(RunStatus::Paused, &node.id, Some(&node.id));
                if self.is_main() {
                    scope.events.stage_event(&node.id, visit, Event::run_paused(&pause));
                }
                return Step::Pause(pause);
            }
            StageEnd::Cancelled => {
                self.uncount_visit(&node.id);
                let _ = self.save_checkpoint(RunStatus::Interrupted, &node.id, Some(&node.id));
                return Step::Finish(
                    RunStatus::Interrupted,
                    Some(format!("interrupted during stage `{}`", node.id)),
                );
            }
        };
        let duration_ms = clock.elapsed().as_millis() as u64;
        let stage_files = keeps_files.then_some(stage_dir.as_path());
        let exchange = outcome.exchange.take();
        let recorded = self.record(node, visit, stage_files, &outcome, attempts, started_at, duration_ms);
        if let Some(exchange) = exchange {
            self.conversation.extend_thread(scope.run_dir.root(), &node.id, exchange);
        }
        self.worktree.commit_stage(&scope.events, &scope.run_id, node, visit, outcome.status);
        if keeps_files {
            // Only starts can be vetoed: the end has happened.
            let _ = self.fire_stage_hooks(node, visit, &stage_dir, Some(&outcome)).await;
        }
        if node.handler_type() == HandlerType::Exit {
            return match outcome.status {
                StageStatus::Fail => Step::Finish(RunStatus::Failed, outcome.failure_reason.clone()),
                _ => Step::Finish(RunStatus::Succeeded, None),
            };
        }
        let step = match (self.circuit_breaker(node, visit, &outcome), &sent_to) {
            (Some(reason), _) => Step::Finish(RunStatus::Failed, Some(reason)),
            (None, Some(to)) => self.step_to(node, to, "stage_start"),
            (None, None) => self.next_step(index, &outcome),
        };
        let next_id = match &step {
            Step::Next(next) | Step::Restart(next) => Some(workflow.node_at(*next).id.as_str()),
            Step::Finish(..) | Step::Pause(_) => None,
        };
        // A stage whose files could not be written (or whose journal entry could not be) pauses
        // the run: going on would run stages whose records are lost.
        let saved = self.save_checkpoint(RunStatus::Running, &node.id, next_id);
        let checkpointed = saved.is_ok() && self.is_main();
        if let Err(error) = saved.and(recorded) {
            if matches!(step, Step::Next(_) | Step::Restart(_)) && self.is_main() {
                return self.pause_undurable(node, visit, &error);
            }
        }
        if checkpointed {
            self.fire_checkpoint_saved(node, visit).await;
        }
        let mut step = step;
        if let Step::Next(next) | Step::Restart(next) = &step {
            let label = self.entered_by.and_then(|edge| workflow.graph()[edge].label());
            let to = &workflow.node_at(*next).id;
            match self.fire_edge_selected(node, visit, to, label).await {
                Err(veto) => {
                    let reason = format!("edge `{}` -> `{to}` not crossed: {veto}", node.id);
                    self.last_outcome = Some(outcome);
                    return Step::Finish(RunStatus::Failed, Some(reason));
                }
                // A blocking hook sends the run elsewhere: the checkpoint says where, again.
                Ok(Some(Directive { decision: HookDecision::Override { to, .. }, .. })) => {
                    step = self.step_to(node, &to, "edge_selected");
                    if let Step::Next(next) = &step {
                        let next_id = workflow.node_at(*next).id.clone();
                        if let Err(error) = self.save_checkpoint(RunStatus::Running, &node.id, Some(&next_id))
                        {
                            if self.is_main() {
                                return self.pause_undurable(node, visit, &error);
                            }
                        }
                    }
                }
                Ok(_) => {}
            }
        }
        if let Step::Next(next) = &step {
            let next_id = workflow.node_at(*next).id.as_str();
            if let Some(stop) = self.review_step(node, visit, &outcome, next_id).await {
                self.last_outcome = Some(outcome);
                return stop;
            }
            if let Some(stop) = self.interrupt_if_asked(node, visit, next_id) {
                self.last_outcome = Some(outcome);
                return stop;
            }
        }
        self.last_outcome = Some(outcome);
        step
    }

    /// The step to `to`, where a blocking hook of `moment` sent the run from `node`: a node of
    /// the workflow, else the run fails naming it.
    fn step_to(&self, node: &Node, to: &str, moment: &str) -> Step {
        let workflow = self.scope.workflow;
        match workflow.index_of(to) {
            Some(next) => Step::Next(next),
            None => {
                let ids = workflow.nodes().map(|node| node.id.as_str());
                let hint = crate::diagnostic::did_you_mean(to, ids)
                    .map(|near| format!(" (did you mean `{near}`?)"))
                    .unwrap_or_default();
                Step::Finish(
                    RunStatus::Failed,
                    Some(format!(
                        "a {moment} hook at `{}` sent the run to `{to}`, which is no stage of this workflow{hint}",
                        node.id
                    )),
                )
            }
        }
    }

    /// Step mode (main line): asks the reviewer about the stage that just ended. A note waits in
    /// the context (checkpointed at once) for the next LLM stage; a stop pauses the run so that a
    /// resume starts at `next`.
    async fn review_step(&mut self, node: &Node, visit: u32, outcome: &Outcome, next: &str) -> Option<Step> {
        if !self.is_main() {
            return None;
        }
        let reviewer = self.scope.engine.step.clone()?;
        let mut changed_keys: Vec<&str> = outcome.context_updates.keys().map(String::as_str).collect();
        changed_keys.sort_unstable();
        let review = StageReview {
            node_id: &node.id,
            visit,
            status: outcome.status.as_str(),
            failure_reason: outcome.failure_reason.as_deref(),
            changed_keys,
            next_node: Some(next),
        };
        match reviewer.review(&review).await {
            StepDecision::Continue => None,
            StepDecision::Note(text) => {
                let mut notes = pending_notes(&self.state.context);
                notes.push(text);
                self.context_set(OPERATOR_NOTES_KEY, json!(notes));
                self.save_checkpoint(RunStatus::Running, &node.id, Some(next))
                    .err()
                    .map(|error| self.pause_undurable(node, visit, &error))
            }
            StepDecision::Stop => {
                let reason = format!("step mode: stopped after `{}`; the run goes on at `{next}`", node.id);
                let _ = self.save_checkpoint(RunStatus::Paused, &node.id, Some(next));
                let pause = Pause::new(PauseKind::Step, reason);
                self.scope.events.stage_event(&node.id, visit, Event::run_paused(&pause));
                Some(Step::Pause(pause))
            }
        }
    }

    /// Main line: pauses the run between two stages when someone asked for it (an interrupt
    /// request in the run directory, see [`crate::run_dir::request_interrupt`]), so that a
    /// resume starts at `next`.
    fn interrupt_if_asked(&mut self, node: &Node, visit: u32, next: &str) -> Option<Step> {
        if !self.is_main() || !crate::run_dir::take_interrupt_request(self.scope.run_dir.root()) {
            return None;
        }
        let reason = format!("interrupted on request after `{}`; the run goes on at `{next}`", node.id);
        let _ = self.save_checkpoint(RunStatus::Paused, &node.id, Some(next));
        let pause = Pause::new(PauseKind::Interrupt, reason);
        self.scope.events.stage_event(&node.id, visit, Event::run_paused(&pause));
        Some(Step::Pause(pause))
    }

    /// Resolves the stage's fidelity and, for LLM stages, its preamble and thread.
    fn prepare_llm_stage(&mut self, node: &Node) {
        let scope = Arc::clone(&self.scope);
        let workflow: &'e Workflow = scope.workflow;
        let edge = self.entered_by.take().map(|index| &workflow.graph()[index].settings);
        let run = RunFacts { workflow, run_id: &scope.run_id, parent: scope.options.parent.as_ref() };
        self.conversation.prepare(node, edge, &run, &mut self.state);
    }

    /// Moves context values over the artifact threshold into the artifact store, leaving
    /// pointers, so checkpoints stay small; copies each into the work directory for agents.
    fn offload_large_values<'k>(&mut self, node: &Node, visit: u32, keys: impl Iterator<Item = &'k String>) {
        let scope = Arc::clone(&self.scope);
        let offloaded = match scope.artifacts.offload(&mut self.state.context, keys) {
            Ok(offloaded) => offloaded,
            Err(error) => {
                tracing::warn!(%error, "a large context value stays inline");
                return;
            }
        };
        for artifact in offloaded {
            if let Err(error) = scope.artifacts.copy_to_work_dir(&artifact, &self.worktree.work_dir) {
                tracing::warn!(%error, "artifact not copied into the work directory");
            }
            let path = artifact.path.display().to_string();
            scope.events.stage_event(
                &node.id,
                visit,
                Event::ArtifactOffloaded { key: artifact.key.clone(), bytes: artifact.bytes, path },
            );
        }
    }

    /// A stage that paused or was interrupted runs again on resume as the same visit (in a new,
    /// suffixed stage directory, so its partial files are kept).
    fn uncount_visit(&mut self, node_id: &str) {
        self.scope.visits().uncount(node_id);
    }

    /// Why an LLM stage may not start: the run's usage has reached `--max-tokens`/`--max-cost`.
    fn usage_ceiling_reached(&self, node: &Node) -> Option<String> {
        let scope = &self.scope;
        if !node.handler_type().is_llm() || scope.options.dry_run {
            return None;
        }
        self.run_limits().reached(self.usage_so_far())
    }

    /// A stage that stopped at its own ceiling runs again only once that bound is higher (or
    /// gone): until then the run pauses again before it, with the same reason.
    fn stage_ceiling_not_raised(&mut self, node: &Node) -> Option<Pause> {
        let key = StageCeiling::context_key(&node.id);
        let ceiling: StageCeiling = serde_json::from_value(self.state.context.get(&key)?.clone()).ok()?;
        if self.stage_limits(node).raised_past(&ceiling) {
            self.state.context.remove(&key);
            return None;
        }
        Some(Pause {
            stage_ceiling: Some(ceiling),
            ..Pause::new(PauseKind::StageCeiling(ceiling.bound), ceiling.reason(&node.id))
        })
    }

    /// The run's ceilings: the command line's, else the graph's `max_tokens`/`max_cost`.
    fn run_limits(&self) -> crate::usage::UsageLimits {
        let given = self.scope.options.limits;
        let graph = self.scope.workflow.settings();
        crate::usage::UsageLimits {
            max_tokens: given.max_tokens.or(graph.max_tokens),
            max_cost: given.max_cost.or(graph.max_cost),
            stage: given.stage,
        }
    }

    /// What the run's LLM stages have used so far.
    fn usage_so_far(&self) -> crate::usage::UsageTotals {
        crate::usage::UsageTotals::of(&self.state.stages).unwrap_or_default()
    }

    /// The node's own ceilings under this run's options (none in a dry run): the command line's
    /// stage ceilings, else the node's `max_stage_tokens`/`max_stage_cost`, else the graph's
    /// `default_max_stage_tokens`/`default_max_stage_cost`.
    fn stage_limits(&self, node: &Node) -> StageLimits {
        let scope = &self.scope;
        if scope.options.dry_run {
            return StageLimits::default();
        }
        let given = scope.options.limits.stage;
        let own = &node.settings.stage;
        StageLimits {
            max_tokens: given.max_tokens.or(own.max_tokens),
            max_cost: given.max_cost.or(own.max_cost),
        }
    }

    /// `max_visits` on the node, graph `max_node_visits`, and the dry-run cap.
    fn visit_limit_exceeded(&self, node: &Node, visit: u32) -> Option<String> {
        let visit = i64::from(visit);
        if let Some(max) = node.settings.stage.max_visits.filter(|max| visit > *max) {
            return Some(format!(
                "node `{}` would run a {} time, but max_visits={max}",
                node.id,
                ordinal(visit)
            ));
        }
        let options = self.scope.options;
        let graph_max = self.scope.workflow.settings().max_node_visits.unwrap_or(DEFAULT_MAX_NODE_VISITS);
        let max = if options.dry_run { graph_max.min(DRY_RUN_MAX_VISITS) } else { graph_max };
        (visit > max).then(|| {
            let why = if options.dry_run { "the dry-run visit cap" } else { "max_node_visits" };
            format!("node `{}` would run a {} time, but {why} is {max}", node.id, ordinal(visit))
        })
    }

    /// Whether the node's stage gets a directory and a `status.json`: parallel stages and every
    /// handler but the routing ones (and a node without a handler, whose failure is worth a record).
    fn keeps_stage_files(&self, node: &Node) -> bool {
        node.handler_type() == HandlerType::Parallel
            || self.scope.engine.handlers.for_node(node).is_none_or(|handler| handler.keeps_stage_files())
    }

    /// Runs the node's handler, retrying failed attempts as the node's retry settings allow.
    async fn run_stage(&mut self, node: &Node, visit: u32, stage_dir: &Path) -> StageEnd {
        let scope = Arc::clone(&self.scope);
        let Some(handler) = scope.engine.handlers.for_node(node).cloned() else {
            let reason = format!("no handler is registered for type `{}`", node.handler_type());
            return StageEnd::Done { outcome: Outcome::fail(reason), attempts: 1 };
        };
        let retry = match &node.settings.retry {
            Ok(retry) => *retry,
            Err(invalid) => {
                let reason = format!("stage `{}` has an invalid retry setting: {invalid}", node.id);
                return StageEnd::Done { outcome: Outcome::fail(reason), attempts: 1 };
            }
        };
        let policy = RetryPolicy::of(retry.preset);
        let mut attempt = 0;
        loop {
            attempt += 1;
            let result = self.attempt(handler.as_ref(), node, visit, attempt, stage_dir).await;
            let mut outcome = match result.and_then(check_context_keys).map(redact_secrets) {
                Ok(outcome) => outcome,
                Err(HandlerError::Retryable(reason)) => Outcome {
                    failure_reason: Some(reason),
                    failure_class: Some(FailureClass::TransientInfra),
                    ..Outcome::new(StageStatus::Retry)
                },
                Err(HandlerError::Terminal(reason)) => {
                    let outcome = Outcome::fail(reason).with_class(FailureClass::Deterministic);
                    return StageEnd::Done { outcome, attempts: attempt };
                }
                Err(HandlerError::Failed(class, reason)) => {
                    return StageEnd::Done {
                        outcome: Outcome::fail(reason).with_class(class),
                        attempts: attempt,
                    }
                }
                Err(HandlerError::Paused(reason)) => return StageEnd::Paused(reason),
                Err(HandlerError::Cancelled) => return StageEnd::Cancelled,
            };
            if !matches!(outcome.status, StageStatus::Fail | StageStatus::Retry) {
                return StageEnd::Done { outcome, attempts: attempt };
            }
            let class = *outcome.failure_class.get_or_insert(FailureClass::Deterministic);
            if attempt <= retry.max_retries && retry.on.retries(class) {
                let retries = self.state.retries.entry(node.id.clone()).or_insert(0);
                *retries += 1;
                let retries = *retries;
                self.context_set(&format!("internal.retry_count.{}", node.id), retries);
                let delay = if scope.options.dry_run {
                    std::time::Duration::ZERO
                } else {
                    policy.delay(attempt, seed(&scope.run_id, &node.id))
                };
                let retrying = Event::StageRetrying {
                    attempt: attempt + 1,
                    delay_ms: delay.as_millis() as u64,
                    reason: outcome.failure_reason.clone(),
                };
                scope.events.stage_event(&node.id, visit, retrying);
                let reason = outcome.failure_reason.as_deref();
                self.fire_stage_retrying(node, visit, attempt + 1, retry.max_retries + 1, reason).await;
                archive_attempt(stage_dir, attempt);
                tokio::select! {
                    _ = tokio::time::sleep(delay) => continue,
                    _ = self.cancel.cancelled() => return StageEnd::Cancelled,
                }
            }
            if retry.allow_partial {
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
        stage_dir: &Path,
    ) -> Result<Outcome, HandlerError> {
        let scope = Arc::clone(&self.scope);
        let children = super::ChildLauncher::new(scope.engine, scope.options, scope.children);
        let stage = StageRun {
            node,
            context: &self.state.context,
            work_dir: &self.worktree.work_dir,
            stage_dir,
            visit,
            attempt,
            confinement: crate::sandbox::Confinement::of(
                node,
                scope.workflow,
                scope.options.sandbox,
                scope.options.user_sandbox,
            )
            .protecting(scope.run_dir.root()),
            past: RunSoFar {
                preamble: self.conversation.preamble.as_deref(),
                thread: self.conversation.thread(),
                stages: &self.state.summaries,
            },
            budget: StageBudget {
                // The ceilings' remainder bounds a stage that makes several model calls.
                usage_left: self.run_limits().left(self.usage_so_far()).filter(|_| !scope.options.dry_run),
                stage_limits: self.stage_limits(node),
            },
            run: RunEnv {
                workflow: scope.workflow,
                run_id: &scope.run_id,
                run_dir: scope.run_dir.root(),
                services: &scope.engine.services,
                events: &scope.events,
                cancel: &self.cancel,
                dry_run: scope.options.dry_run,
                children: &children,
                reference_files: &scope.options.launch.context_files,
                max_output: scope.options.max_output,
                // A dry run fires no hook.
                tool_hooks: match scope.options.dry_run {
                    true => &[],
                    false => scope.options.hooks.tool_hooks(),
                },
            },
        };
        let watched = match node.handler_type() {
            // Waiting is their work (a person, a timer), or their stages are watched themselves.
            HandlerType::Human | HandlerType::Wait | HandlerType::Parallel | HandlerType::Manager => None,
            _ if scope.options.dry_run => None,
            _ => scope.workflow.settings().stall_timeout(),
        };
        let running = AssertUnwindSafe(handler.run(&stage)).catch_unwind();
        let result = match watched {
            None => running.await,
            Some(timeout) => tokio::select! {
                result = running => result,
                quiet = stalled(&scope.events, stage_dir, timeout) => {
                    // Dropping the handler's future stops it (its processes, its model call).
                    let reason = format!(
                        "stage `{}` showed no sign of life for {} (no event, no output: stall_timeout={}) and was \
                         stopped",
                        node.id,
                        humantime::format_duration(quiet),
                        humantime::format_duration(timeout)
                    );
                    return Err(HandlerError::Paused(crate::outcome::Pause::new(
                        crate::outcome::PauseKind::Stall,
                        reason,
                    )));
                }
            },
        };
        match result {
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

    /// Writes status.json into `stage_dir` (a stage that keeps files), applies the outcome to the
    /// context and records the visit. An error says status.json could not be written (a full
    /// disk, typically): the visit is recorded all the same.
    #[allow(clippy::too_many_arguments)]
    fn record(
        &mut self,
        node: &Node,
        visit: u32,
        stage_dir: Option<&Path>,
        outcome: &Outcome,
        attempts: u32,
        started_at: String,
        duration_ms: u64,
    ) -> Result<(), String> {
        let scope = Arc::clone(&self.scope);
        let branch = match &self.line {
            Line::Branch(branch) => Some(branch.clone()),
            Line::Main => None,
        };
        // Engine keys are the engine's: a stage whose content (a script's status.json, a model's
        // answer) tries to set one is refused, with a warning. Fan-out and fan-in are the
        // engine's own and pass their bookkeeping this way.
        let mut recorded = outcome.clone();
        let from_content = !matches!(node.handler_type(), HandlerType::Parallel | HandlerType::FanIn);
        recorded.context_updates.retain(|key, _| {
            let owned = from_content && crate::context::is_engine_owned(key);
            if owned {
                tracing::warn!(key, node = %node.id, "a stage may not set an engine key");
                let reason = "engine key: internal.*, graph.* and current_node are set by the engine only";
                scope.events.stage_event(
                    &node.id,
                    visit,
                    Event::ContextUpdateRefused { key: key.clone(), reason: reason.to_string() },
                );
            }
            !owned
        });
        self.state.context.apply(&recorded.context_updates);
        self.offload_large_values(node, visit, recorded.context_updates.keys());
        // status.json holds what the context holds: a large value's artifact pointer, not a
        // second copy of the value.
        for (key, value) in recorded.context_updates.iter_mut() {
            if let Some(kept) = self.state.context.get(key) {
                if kept != value {
                    *value = kept.clone();
                }
            }
        }
        let status_file = StageStatusFile {
            outcome: recorded,
            handler: Some(node.handler_type().into_owned()),
            fidelity: self.state.context.get_text("internal.fidelity"),
            branch: branch.clone(),
            attempts,
            started_at,
            duration_ms,
            operator_notes: std::mem::take(&mut self.conversation.delivered_notes),
            sandbox: self.sandbox_of(node).map(str::to_string),
        };
        let files_clock = Instant::now();
        // Renamed into place without an fsync: the stage counts once the run's journal holds it,
        // and the journal's one fsync per stage is what makes it durable (a branch's stages are
        // journaled with their parallel stage).
        let written = match stage_dir {
            Some(dir) => {
                let path = dir.join(layout::STATUS);
                crate::run_dir::write_json_file_with(&path, &status_file, Durability::Unsynced)
            }
            None => Ok(()),
        };
        if let Err(error) = &written {
            tracing::warn!(%error, "could not write status.json");
        }
        scope.timings().stage_files += files_clock.elapsed();
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
            let class = outcome.failure_class.unwrap_or(FailureClass::Deterministic);
            context.set("failure_class", class.as_str());
            context.set("failure_detail", if attempts > 1 { "retries_exhausted" } else { "stage_failed" });
            context.set("failure_signature", super::circuit_breaker::signature(&node.id, class, &reason));
            context.set("failure_reason", reason);
        }
        self.state.completed.push(node.id.clone());
        self.state.outcomes.insert(node.id.clone(), outcome.status);
        self.state.stages.push(StageRecord {
            node_id: node.id.clone(),
            visit,
            status: outcome.status,
            duration_ms,
            handler: Some(node.handler_type().into_owned()),
            failure_reason: outcome.failure_reason.clone(),
            usage: outcome.usage,
            cost_usd: outcome.cost_usd,
            branch: branch.clone(),
            dir: stage_dir.map(|dir| relative_dir(scope.run_dir.root(), dir)),
        });
        if let Some(record) = self.state.stages.last() {
            let script = node.script();
            let summary = StageSummary::from_outcome(record, script, &status_file.outcome, stage_dir);
            self.state.summaries.push(summary);
        }
        let end = crate::event::StageEnd {
            status: outcome.status,
            duration_ms,
            attempts,
            notes: outcome.notes.clone(),
            failure_reason: outcome.failure_reason.clone(),
            failure_class: outcome.failure_class,
            branch_id: branch,
        };
        let event = if outcome.status == StageStatus::Fail {
            Event::StageFailed(end)
        } else {
            Event::StageCompleted(end)
        };
        scope.events.stage_event(&node.id, visit, event);
        written.map_err(|error| error.to_string())
    }

    /// Counts a failed stage's signature ([`super::circuit_breaker`]); why the run must stop
    /// when the same deterministic or structural failure reached `failure_signature_limit`.
    fn circuit_breaker(&mut self, node: &Node, visit: u32, outcome: &Outcome) -> Option<String> {
        if outcome.status != StageStatus::Fail {
            return None;
        }
        let signature = self.state.context.get_text("failure_signature")?;
        let class = outcome.failure_class.unwrap_or(FailureClass::Deterministic);
        let limit = self
            .scope
            .workflow
            .settings()
            .failure_signature_limit
            .unwrap_or(super::circuit_breaker::DEFAULT_LIMIT);
        super::circuit_breaker::count(&mut self.state.context, &signature, class, visit, limit)
            .map(|tripped| tripped.reason(&node.id))
    }

    /// The edge to follow, the failure route, or the end of the line.
    fn next_step(&mut self, index: NodeIndex, outcome: &Outcome) -> Step {
        let scope = Arc::clone(&self.scope);
        let workflow: &'e Workflow = scope.workflow;
        let node = workflow.node_at(index);
        if node.handler_type() == HandlerType::Parallel && outcome.status != StageStatus::Fail {
            // A parallel stage's edges are its branches; it continues where they joined.
            if let Some(join) = workflow.join_of(index) {
                let to = &workflow.node_at(join).id;
                scope.edge_selected(SelectedEdge::new(&node.id, to, "join"), None);
                return Step::Next(join);
            }
        }
        if node.handler_type() != HandlerType::Parallel {
            let draw = node
                .settings
                .stage
                .random_selection
                .then(|| random_draw(&scope.run_id, &node.id, scope.visits().latest(&node.id)));
            let mut selected =
                select_edge(workflow, index, outcome, &self.state.context, Some(&scope.artifacts), draw);
            if scope.options.dry_run && selected.is_none() && outcome.status != StageStatus::Fail {
                selected = assumed_edge(workflow, index, outcome);
            }
            if let Some((edge, reason)) = selected {
                let (edge, reason, why) = self.dry_run_loop_exit(index, outcome, edge, reason);
                // A dry run follows a loop_restart edge as a plain one: a fresh run directory would
                // forget the visits that cap its loops.
                let restart = !scope.options.dry_run && edge.edge.settings.loop_restart;
                // Starting over helps with what may pass the next time; any other failure would
                // only come back (as Fabro has it).
                let class = outcome.failure_class.unwrap_or(FailureClass::Deterministic);
                if restart && outcome.status == StageStatus::Fail && class != FailureClass::TransientInfra {
                    return Step::Finish(
                        RunStatus::Failed,
                        Some(format!(
                            "loop_restart edge `{}` -> `{}` not followed: stage `{}` failed with failure_class={} \
                             (a run restarts only after a transient_infra failure): {}",
                            node.id,
                            edge.to.id,
                            node.id,
                            class.as_str(),
                            outcome.failure_reason.as_deref().unwrap_or("no reason given")
                        )),
                    );
                }
                let chosen = SelectedEdge {
                    loop_restart: Some(restart),
                    ..SelectedEdge::new(&node.id, &edge.to.id, reason.as_str())
                };
                scope.edge_selected(chosen, why);
                self.entered_by = Some(edge.index);
                let step = if restart { Step::Restart } else { Step::Next };
                return workflow.index_of(&edge.to.id).map_or(Step::Finish(RunStatus::Failed, None), step);
            }
        }
        if outcome.status == StageStatus::Fail {
            if let Some(target) = workflow.failure_target(index) {
                scope.edge_selected(SelectedEdge::new(&node.id, target, "retry_target"), None);
                return workflow.index_of(target).map_or(Step::Finish(RunStatus::Failed, None), Step::Next);
            }
            let reason = outcome.failure_reason.clone().unwrap_or_else(|| "no reason given".to_string());
            let id = &node.id;
            if workflow.outgoing(index).is_empty() {
                return Step::Finish(
                    RunStatus::Failed,
                    Some(format!(
                        "stage `{id}` failed: {reason} (it has no outgoing edges, so the run ends there)"
                    )),
                );
            }
            return Step::Finish(
                RunStatus::Failed,
                Some(format!(
                    "stage `{id}` failed: {reason} (no `outcome=fail` edge, `retry_target` or \
                     `fallback_retry_target` from `{id}`, so the run ends)"
                )),
            );
        }
        // A stage without outgoing edges is a terminal (as in Fabro's own workflows): the run
        // ends there with the stage's outcome, its goal gates checked as at an exit.
        if workflow.outgoing(index).is_empty() {
            if self.is_main() {
                if let Some(step) = self.enforce_goal_gates(node) {
                    return step;
                }
            }
            return Step::Finish(RunStatus::Succeeded, None);
        }
        Step::Finish(
            RunStatus::Failed,
            Some(format!(
                "stage `{}` ended with outcome {} but none of its outgoing edges is eligible",
                node.id, outcome.status
            )),
        )
    }

    /// A dry run walks as far as a real run could: when every way on from `edge`'s target passes
    /// a node whose visit cap refuses its next visit (the loop it is in is used up), it leaves by
    /// another edge from which the run can still end, if there is one. Also says why a dry-run
    /// rule chose the edge, for the run's summary.
    fn dry_run_loop_exit(
        &self,
        from: NodeIndex,
        outcome: &Outcome,
        edge: EdgeRef<'e>,
        reason: SelectionReason,
    ) -> (EdgeRef<'e>, SelectionReason, Option<String>) {
        let scope = &self.scope;
        if !scope.options.dry_run {
            return (edge, reason, None);
        }
        let workflow: &'e Workflow = scope.workflow;
        let visits = |id: &str| scope.visits().counts().get(id).copied().unwrap_or(0);
        let refused = |target: &Node| self.visit_limit_exceeded(target, visits(&target.id) + 1);
        let capped = |node: &Node| refused(node).is_some();
        let can_end =
            |target: &Node| workflow.index_of(&target.id).is_some_and(|i| can_end(workflow, i, capped));
        if !can_end(edge.to) {
            if let Some(exit) = loop_exit(workflow, from, outcome, visits, |e| can_end(e.to)) {
                let why = refused(edge.to).unwrap_or_else(|| {
                    format!("every way on from `{}` passes a node at its visit cap", edge.to.id)
                });
                return (exit, SelectionReason::DryRunLoopExit, Some(format!("{why}: left the loop")));
            }
        }
        let why = match reason {
            SelectionReason::DryRunOutcome => Some(format!(
                "no condition held (a dry run sets no context); the edge tests outcome={}",
                outcome.status
            )),
            SelectionReason::DryRunWeight => Some(
                "no condition held (a dry run sets no context), and no edge tests this outcome: the best by \
                 weight and id"
                    .to_string(),
            ),
            _ => None,
        };
        (edge, reason, why)
    }

    /// At an exit node (or a stage without outgoing edges): every goal gate the run visited must
    /// have succeeded at its last visit (gates never visited are not checked, as in the Attractor
    /// specification and Fabro); otherwise jump to the first unsatisfied gate's retry target, or
    /// fail the run.
    fn enforce_goal_gates(&mut self, exit: &Node) -> Option<Step> {
        let scope = Arc::clone(&self.scope);
        let workflow: &'e Workflow = scope.workflow;
        let (gate, status) = workflow.nodes().filter(|node| node.is_goal_gate()).find_map(|node| {
            let status = *self.state.outcomes.get(&node.id)?;
            (!status.is_successful()).then_some((node, status))
        })?;
        let status = status.to_string();
        match gate.settings.stage.retry_targets.iter().find_map(|target| workflow.index_of(target)) {
            Some(target) => {
                let to = &workflow.node_at(target).id;
                let chosen = SelectedEdge {
                    gate: Some(gate.id.clone()),
                    gate_status: Some(status),
                    ..SelectedEdge::new(&exit.id, to, "goal_gate")
                };
                scope.edge_selected(chosen, None);
                Some(Step::Next(target))
            }
            None => Some(Step::Finish(
                RunStatus::Failed,
                Some(format!("goal gate `{}` has not succeeded ({status}) and has no retry target", gate.id)),
            )),
        }
    }

    /// The sandbox `node`'s programs run in, for stages that run programs.
    fn sandbox_of(&self, node: &Node) -> Option<&'static str> {
        let options = self.scope.options;
        crate::sandbox::runs_programs(node).then(|| {
            crate::sandbox::Confinement::of(node, self.scope.workflow, options.sandbox, options.user_sandbox)
                .kind
                .as_str()
        })
    }
}

/// Moves what attempt `attempt` left in the stage directory into `attempts/<attempt>/`, so the
/// next attempt starts clean and nothing an earlier attempt wrote is overwritten. The stage may
/// have written its directory: an `attempts` that is a link or a file is not followed but
/// replaced by a real directory (no process of a confined stage outlives it, so nothing can
/// swap it back meanwhile).
fn archive_attempt(stage_dir: &Path, attempt: u32) {
    let attempts = stage_dir.join(layout::ATTEMPTS_DIR);
    let Ok(entries) = std::fs::read_dir(stage_dir) else { return };
    let entries: Vec<_> =
        entries.flatten().filter(|entry| entry.file_name() != layout::ATTEMPTS_DIR).collect();
    if entries.is_empty() {
        return;
    }
    let archive = attempts.join(attempt.to_string());
    if let Err(error) = real_dir(&attempts).and_then(|()| real_dir(&archive)) {
        tracing::warn!(%error, "could not archive attempt {attempt}");
        return;
    }
    for entry in entries {
        if let Err(error) = std::fs::rename(entry.path(), archive.join(entry.file_name())) {
            tracing::warn!(%error, "could not archive {}", entry.path().display());
        }
    }
}

/// Makes `dir` a directory of its own: what else stands there (a link, a file, a FIFO) is
/// removed, never followed.
fn real_dir(dir: &Path) -> std::io::Result<()> {
    if crate::regular_file::is_real_dir(dir) {
        return Ok(());
    }
    crate::regular_file::remove_if_present(dir)?;
    std::fs::create_dir(dir)
}

/// `dir` relative to the run directory `root`, as events and records name stage directories.
fn relative_dir(root: &Path, dir: &Path) -> String {
    dir.strip_prefix(root).unwrap_or(dir).display().to_string()
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

/// Resolves once the stage shows no sign of life for `timeout`: no event in the run's log and no
/// growth of the files in its directory (command output, a streamed answer, its transcript).
/// Returns how long it was quiet.
async fn stalled(
    events: &crate::event_log::EventLog,
    stage_dir: &Path,
    timeout: std::time::Duration,
) -> std::time::Duration {
    let poll = (timeout / 4).clamp(std::time::Duration::from_millis(50), std::time::Duration::from_secs(5));
    let sign = || {
        let written: u64 = std::fs::read_dir(stage_dir)
            .map(|entries| {
                entries
                    .filter_map(Result::ok)
                    .filter_map(|entry| entry.metadata().ok())
                    .filter(std::fs::Metadata::is_file)
                    .map(|meta| meta.len())
                    .sum()
            })
            .unwrap_or(0);
        (events.last_seq(), written)
    };
    let mut last = sign();
    let mut since = tokio::time::Instant::now();
    loop {
        tokio::time::sleep(poll).await;
        let now = sign();
        if now != last {
            last = now;
            since = tokio::time::Instant::now();
        } else if since.elapsed() >= timeout {
            return since.elapsed();
        }
    }
}

/// The outcome of a stage a blocking lifecycle hook kept from running (`skip`, or `override`
/// elsewhere): skipped, with the hook and its reason in the notes.
fn skipped_by_hook(directive: &Directive) -> Outcome {
    let (what, reason) = match &directive.decision {
        HookDecision::Override { to, reason } => (format!("sent the run to `{to}`"), reason),
        HookDecision::Skip { reason } => ("skipped it".to_string(), reason),
        HookDecision::Proceed => ("let it run".to_string(), &None),
    };
    let reason = reason.as_ref().map(|reason| format!(": {reason}")).unwrap_or_default();
    Outcome::new(StageStatus::Skipped).with_notes(format!("hook `{}` {what}{reason}", directive.hook))
}
