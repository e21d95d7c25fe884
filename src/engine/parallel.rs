//! Parallel fan-out: a `component` node runs one branch per outgoing edge, each a whole path from
//! the edge's target to the join node (see [`Workflow::join_of`]), each on its own fork of the
//! context, at most `max_parallel` at once. The join policy decides when the stage is done and how
//! it went; the results go to the context as `parallel.results` for the fan-in stage.
//!
//! Every finished branch is journaled in `parallel/<node>/<visit>/<branch>.json`, so a run stopped
//! inside a parallel stage re-runs only the branches that had not finished. Journal entries and
//! branch status files are renamed into place but not fsynced one by one: a process crash keeps
//! them, and after a machine crash a lost or torn entry only means that branch runs again.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::Arc;
use std::time::Instant;

use futures::{Future, StreamExt};
use petgraph::graph::NodeIndex;
use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::walker::{StageEnd, Step, Walker};
use crate::atomic_file::Durability;
use crate::branch_results::{BranchResult, BranchStatus};
use crate::event::{Event, SelectedEdge};
use crate::graph::settings::{ParallelSettings, ParallelSettingsError};
use crate::graph::{HandlerType, Node, Workflow};
use crate::outcome::{Outcome, Pause, StageStatus};
use crate::run_dir::StageRecord;
use crate::run_status::RunStatus;
use crate::worktree::branch::{BranchBase, BranchWorktree, BASE_SHA_KEY};

/// The parallel stage's settings, read when the workflow loaded; a workflow that validated has
/// them.
fn settings_of(node: &Node) -> Result<ParallelSettings, String> {
    match node.settings.parallel() {
        Some(Ok(settings)) => Ok(*settings),
        Some(Err(errors)) => Err(format!(
            "parallel stage `{}` has invalid settings: {}",
            node.id,
            errors.iter().map(ParallelSettingsError::to_string).collect::<Vec<_>>().join("; ")
        )),
        None => Err(format!("`{}` is not a parallel stage", node.id)),
    }
}

/// One branch to run: its id (the target node's id, suffixed when two edges share a target),
/// where it starts, and the edge that leads there.
#[derive(Debug, Clone)]
struct BranchPlan {
    id: String,
    start: NodeIndex,
    edge: petgraph::graph::EdgeIndex,
}

fn branch_plans(workflow: &Workflow, parallel: NodeIndex) -> Vec<BranchPlan> {
    let mut plans: Vec<BranchPlan> = Vec::new();
    for edge in workflow.outgoing(parallel) {
        let Some(start) = workflow.index_of(&edge.to.id) else { continue };
        let mut id = edge.to.id.clone();
        let mut n = 1;
        while plans.iter().any(|plan| plan.id == id) {
            n += 1;
            id = format!("{}-{n}", edge.to.id);
        }
        plans.push(BranchPlan { id, start, edge: edge.index });
    }
    plans
}

/// What a finished branch leaves behind: its result and its stage records, journaled so a resumed
/// run does not run it again.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
struct BranchJournal {
    result: BranchResult,
    stages: Vec<StageRecord>,
    completed: Vec<String>,
    outcomes: BTreeMap<String, StageStatus>,
}

/// How a branch's walk ended.
enum BranchEnd {
    Finished(Box<BranchJournal>),
    Paused(Pause),
    /// The run itself was cancelled (SIGINT).
    Interrupted,
}

/// Runs the parallel stage at `index` for the walker `parent`: every branch, then the join policy.
/// (Boxed: branches walk with the same code that calls this, so the future is recursive.)
pub(super) fn run<'a, 'e>(
    parent: &'a mut Walker<'e>,
    index: NodeIndex,
    visit: u32,
) -> Pin<Box<dyn Future<Output = StageEnd> + Send + 'a>> {
    Box::pin(run_branches(parent, index, visit))
}

async fn run_branches(parent: &mut Walker<'_>, index: NodeIndex, visit: u32) -> StageEnd {
    let scope = Arc::clone(&parent.scope);
    let workflow = scope.workflow;
    let node = workflow.node_at(index);
    let settings = match settings_of(node) {
        Ok(settings) => settings,
        Err(reason) => return StageEnd::Done { outcome: Outcome::fail(reason), attempts: 1 },
    };
    let Some(join) = workflow.join_of(index) else {
        let reason = format!(
            "the branches of parallel stage `{}` never meet again, so they cannot be joined",
            node.id
        );
        return StageEnd::Done { outcome: Outcome::fail(reason), attempts: 1 };
    };
    let plans = branch_plans(workflow, index);
    let journal_dir = crate::run_dir::layout::parallel_journal_dir(scope.run_dir.root(), &node.id, visit);
    let mut journaled = read_journal(&journal_dir, &plans);
    for entry in journaled.values() {
        let mut visits = scope.visits();
        for record in &entry.stages {
            visits.raise(&record.node_id, record.visit);
        }
    }
    let clock = Instant::now();
    let started = Event::ParallelStarted {
        branch_count: plans.len(),
        join: workflow.node_at(join).id.clone(),
        max_parallel: settings.max_parallel,
        join_policy: settings.join.describe(),
        fail_fast: settings.fail_fast(),
        already_finished: journaled.len(),
    };
    scope.events.stage_event(&node.id, visit, started);
    parent.fire_parallel_hooks(node, visit, plans.len(), None).await;
    let git_base = match branch_base(parent, node, visit) {
        Ok(base) => base,
        Err(reason) => return StageEnd::Done { outcome: Outcome::fail(reason), attempts: 1 },
    };
    let mut base = parent.state.context.fork();
    let cancel_rest = parent.cancel.child_token();
    let mut successes = journaled.values().filter(|entry| entry.result.status.is_successful()).count();
    let needed = settings.join.needed(plans.len());
    if needed.is_some_and(|needed| successes >= needed) {
        cancel_rest.cancel();
    }
    let mut ends: BTreeMap<String, (BranchEnd, Option<Walker<'_>>)> = BTreeMap::new();
    let mut branch_walks = Vec::new();
    let mut failed_to_start: Vec<(String, String)> = Vec::new();
    for plan in plans.iter().filter(|plan| !journaled.contains_key(&plan.id)) {
        scope.edge_selected(
            SelectedEdge {
                branch_id: Some(plan.id.clone()),
                ..SelectedEdge::new(&node.id, &workflow.node_at(plan.start).id, "fan_out")
            },
            None,
        );
        let mut context = base.fork();
        context.set("parallel.branch_id", plan.id.clone());
        let worktree = match &git_base {
            Some(git_base) => {
                let path = free_path(crate::run_dir::layout::branch_worktree_dir(
                    scope.run_dir.root(),
                    &node.id,
                    visit,
                    &plan.id,
                ));
                match git_base.add_worktree(&scope.run_id, &plan.id, &path) {
                    Ok(worktree) => Some(worktree),
                    Err(error) => {
                        let reason = format!("cannot create the branch's git worktree: {error}");
                        failed_to_start.push((plan.id.clone(), reason));
                        continue;
                    }
                }
            }
            None => None,
        };
        let work_dir = worktree.as_ref().map_or_else(|| parent.worktree.work_dir.clone(), |w| w.path.clone());
        context.set("internal.work_dir", work_dir.display().to_string());
        let walker = parent.branch(&plan.id, plan.edge, context, work_dir, cancel_rest.child_token());
        let walk: Pin<Box<dyn Future<Output = (String, BranchEnd, Walker<'_>)> + Send + '_>> =
            Box::pin(walk_branch(walker, plan.clone(), join, parent.cancel.clone(), worktree));
        branch_walks.push(walk);
    }
    for (id, reason) in failed_to_start {
        let entry = BranchJournal {
            result: BranchResult {
                branch_id: id.clone(),
                status: BranchStatus::Fail,
                notes: None,
                failure_reason: Some(reason),
                duration_ms: 0,
                last_response: None,
                context_updates: Map::new(),
                head_sha: None,
            },
            stages: Vec::new(),
            completed: Vec::new(),
            outcomes: BTreeMap::new(),
        };
        ends.insert(id, (BranchEnd::Finished(Box::new(entry)), None));
    }
    let mut running = futures::stream::iter(branch_walks).buffer_unordered(settings.max_parallel);
    let mut failed_fast = false;
    while let Some((id, end, walker)) = running.next().await {
        if let BranchEnd::Finished(entry) = &end {
            let status = entry.result.status;
            if status != BranchStatus::Cancelled {
                write_journal(&journal_dir, &id, entry);
            }
            if status.is_successful() {
                successes += 1;
                if needed.is_some_and(|needed| successes >= needed) {
                    cancel_rest.cancel();
                }
            } else if status == BranchStatus::Fail && settings.fail_fast() && !cancel_rest.is_cancelled() {
                failed_fast = true;
                cancel_rest.cancel();
            }
        }
        ends.insert(id, (end, Some(walker)));
    }
    drop(running);

    // Everything below goes in declaration order, whatever order the branches finished in.
    let mut finished = Vec::with_capacity(plans.len());
    let mut paused = None;
    let mut interrupted = false;
    for plan in &plans {
        if let Some(entry) = journaled.remove(&plan.id) {
            finished.push((entry, None));
            continue;
        }
        match ends.remove(&plan.id) {
            Some((BranchEnd::Finished(entry), walker)) => finished.push((*entry, walker)),
            Some((BranchEnd::Paused(reason), _)) => {
                paused.get_or_insert(reason);
            }
            Some((BranchEnd::Interrupted, _)) | None => interrupted = true,
        }
    }
    // A stage that stops here runs again on resume; its finished branches wait in the journal.
    if interrupted || parent.cancel.is_cancelled() {
        return StageEnd::Cancelled;
    }
    if let Some(reason) = paused {
        return StageEnd::Paused(reason);
    }
    let mut results = Vec::with_capacity(finished.len());
    for (entry, walker) in finished {
        match walker {
            Some(walker) => adopt_summaries(parent, walker),
            None => summarize_journaled(parent, &entry.stages),
        }
        parent.state.stages.extend(entry.stages);
        parent.state.completed.extend(entry.completed);
        parent.state.outcomes.extend(entry.outcomes);
        results.push(entry.result);
    }
    let mut outcome = join_outcome(node, &settings, &results, failed_fast);
    if let Some(git_base) = &git_base {
        outcome = outcome.with_update(BASE_SHA_KEY, git_base.commit.clone());
    }
    if outcome.status != StageStatus::Fail && workflow.node_at(join).handler_type() != HandlerType::FanIn {
        outcome = merge_without_fan_in(parent, &results, git_base.as_ref(), outcome);
    }
    let failures = results.iter().filter(|r| !r.status.is_successful()).count();
    let completed = Event::ParallelCompleted {
        success_count: results.len() - failures,
        failure_count: failures,
        duration_ms: clock.elapsed().as_millis() as u64,
        status: outcome.status,
    };
    scope.events.stage_event(&node.id, visit, completed);
    parent.fire_parallel_hooks(node, visit, results.len(), Some(&outcome)).await;
    StageEnd::Done { outcome: with_results(outcome, &results), attempts: 1 }
}

/// When the join node is not a fan-in stage, the parallel stage does the fan-in's work itself: the
/// best branch (by status, score, order) has its context updates applied and its commit merged.
fn merge_without_fan_in(
    parent: &Walker<'_>,
    results: &[BranchResult],
    git_base: Option<&BranchBase>,
    outcome: Outcome,
) -> Outcome {
    let ranked = crate::branch_results::rank(results);
    let Some(best) = ranked.first() else { return outcome };
    let merged = crate::branch_results::consolidate(results, best);
    let mut outcome = outcome;
    for (key, value) in merged.context_updates {
        outcome.context_updates.insert(key, value);
    }
    if let (Some(base), Some(head)) = (git_base, &best.head_sha) {
        if let Err(error) = crate::worktree::branch::merge_into_work_dir(
            &parent.worktree.work_dir,
            &base.commit,
            head,
            &best.branch_id,
        ) {
            return Outcome::fail(format!(
                "merging the best branch `{}` into the work directory failed: {error}",
                best.branch_id
            ));
        }
    }
    outcome
}

/// Keeps the preamble summaries of the stages a branch ran (it started with the parent's).
fn adopt_summaries(parent: &mut Walker<'_>, mut walker: Walker<'_>) {
    let inherited = parent.state.summaries.len().min(walker.state.summaries.len());
    parent.state.summaries.extend(walker.state.summaries.split_off(inherited));
}

/// Preamble summaries for the stages of a branch that finished before a resume, from their stage
/// directories.
fn summarize_journaled(parent: &mut Walker<'_>, stages: &[StageRecord]) {
    let scope = Arc::clone(&parent.scope);
    for record in stages {
        let script = scope.workflow.node(&record.node_id).and_then(|n| n.script());
        let dir = record.dir_in(scope.run_dir.root()).unwrap_or_default();
        parent
            .state
            .summaries
            .push(crate::run_dir::stage_summary::StageSummary::from_stage_dir(record, script, &dir));
    }
}

/// Walks one branch from its first node until it reaches the join node.
/// `stopped_from_above` is the parallel stage's own line: when it is cancelled (SIGINT, or an
/// enclosing parallel stage gave up on it) the branch was interrupted, not cancelled by this stage's
/// join policy.
async fn walk_branch(
    mut walker: Walker<'_>,
    plan: BranchPlan,
    join: NodeIndex,
    stopped_from_above: CancellationToken,
    worktree: Option<BranchWorktree>,
) -> (String, BranchEnd, Walker<'_>) {
    let scope = Arc::clone(&walker.scope);
    let workflow: &Workflow = scope.workflow;
    let join_node = workflow.node_at(join);
    let finished = |status, failure_reason: Option<String>, walker: &Walker<'_>, duration_ms| {
        Box::new(BranchJournal {
            result: BranchResult {
                branch_id: plan.id.clone(),
                status,
                notes: walker.last_outcome.as_ref().and_then(|o| o.notes.clone()),
                failure_reason,
                duration_ms,
                last_response: walker.state.context.get_text("last_response"),
                context_updates: branch_updates(&walker.state.context),
                head_sha: None,
            },
            stages: walker.state.stages.clone(),
            completed: walker.state.completed.clone(),
            outcomes: walker.state.outcomes.clone(),
        })
    };
    if walker.cancel.is_cancelled() {
        let end = if stopped_from_above.is_cancelled() {
            BranchEnd::Interrupted
        } else {
            scope.events.run_event(Event::ParallelBranchCancelled {
                branch_id: plan.id.clone(),
                started: false,
                duration_ms: None,
            });
            BranchEnd::Finished(finished(
                BranchStatus::Cancelled,
                Some("cancelled before it started: the join policy no longer needed it".into()),
                &walker,
                0,
            ))
        };
        return (plan.id.clone(), end, walker);
    }
    scope.events.run_event(Event::ParallelBranchStarted {
        branch_id: plan.id.clone(),
        node_id: workflow.node_at(plan.start).id.clone(),
    });
    let clock = Instant::now();
    let mut current = plan.start;
    let ended: Result<(), BranchStop> = loop {
        if current == join {
            break Ok(());
        }
        let node = workflow.node_at(current);
        if node.handler_type() == HandlerType::Exit {
            break Err(BranchStop::Failed(format!(
                "the branch reached the exit `{}` without joining at `{}`",
                node.id, join_node.id
            )));
        }
        match walker.visit(current).await {
            Step::Next(next) => current = next,
            Step::Restart(_) => {
                break Err(BranchStop::Failed(format!(
                    "stage `{}` follows a loop_restart edge, which cannot restart the run from inside a parallel branch",
                    node.id
                )))
            }
            Step::Pause(pause) => break Err(BranchStop::Paused(pause)),
            Step::Finish(RunStatus::Interrupted, _) => break Err(BranchStop::Cancelled),
            Step::Finish(_, reason) => {
                break Err(BranchStop::Failed(reason.unwrap_or_else(|| {
                    format!(
                        "the branch ended at `{}`, a stage without outgoing edges, without joining at `{}`",
                        node.id, join_node.id
                    )
                })))
            }
        }
    };
    let head_sha =
        worktree.as_ref().and_then(|worktree| finish_worktree(&walker, &plan.id, worktree, &ended));
    let duration_ms = clock.elapsed().as_millis() as u64;
    let end = match ended {
        Ok(()) => {
            let last = walker.last_outcome.as_ref();
            let status = last.map_or(BranchStatus::Success, |o| BranchStatus::of(o.status));
            let reason = last.and_then(|o| o.failure_reason.clone()).filter(|_| !status.is_successful());
            BranchEnd::Finished(finished(status, reason, &walker, duration_ms))
        }
        Err(BranchStop::Failed(reason)) => {
            BranchEnd::Finished(finished(BranchStatus::Fail, Some(reason), &walker, duration_ms))
        }
        Err(BranchStop::Paused(reason)) => BranchEnd::Paused(reason),
        Err(BranchStop::Cancelled) if stopped_from_above.is_cancelled() => BranchEnd::Interrupted,
        Err(BranchStop::Cancelled) => {
            scope.events.run_event(Event::ParallelBranchCancelled {
                branch_id: plan.id.clone(),
                started: true,
                duration_ms: Some(duration_ms),
            });
            BranchEnd::Finished(finished(
                BranchStatus::Cancelled,
                Some("cancelled: the join policy no longer needed it".into()),
                &walker,
                duration_ms,
            ))
        }
    };
    let mut end = end;
    if let BranchEnd::Finished(entry) = &mut end {
        entry.result.head_sha = head_sha;
        if entry.result.status != BranchStatus::Cancelled {
            scope.events.run_event(Event::ParallelBranchCompleted {
                branch_id: plan.id.clone(),
                status: entry.result.status,
                duration_ms,
                failure_reason: entry.result.failure_reason.clone(),
            });
        }
    }
    (plan.id.clone(), end, walker)
}

/// Commits what a branch changed in its worktree (its head is the branch's result) and removes the
/// worktree unless `--keep-worktrees`. A paused or interrupted branch keeps its worktree as it is.
fn finish_worktree(
    walker: &Walker<'_>,
    branch_id: &str,
    worktree: &BranchWorktree,
    ended: &Result<(), BranchStop>,
) -> Option<String> {
    if matches!(ended, Err(BranchStop::Paused(_))) {
        return None;
    }
    let scope = &walker.scope;
    let message = format!(
        "fabro({}): branch {branch_id}\n\nFabro-Run: {}\nFabro-Branch: {branch_id}\n",
        scope.run_id, scope.run_id
    );
    let head = match worktree.commit(&message) {
        Ok(head) => Some(head),
        Err(error) => {
            scope.events.run_event(Event::ParallelBranchCommitFailed {
                branch_id: branch_id.to_string(),
                error: error.to_string(),
            });
            None
        }
    };
    if !scope.options.keep_worktrees {
        if let Err(error) = worktree.remove() {
            tracing::warn!(%error, "branch worktree {} not removed", worktree.path.display());
        }
    }
    head
}

/// With the work directory in a git repository: the commit branches start from. Otherwise `None`,
/// and an event says that the branches share the work directory.
fn branch_base(parent: &Walker<'_>, node: &Node, visit: u32) -> Result<Option<BranchBase>, String> {
    let scope = &parent.scope;
    let shared = |reason: &str| {
        scope.events.stage_event(
            &node.id,
            visit,
            Event::ParallelSharedWorkDir { reason: reason.to_string() },
        );
    };
    if scope.options.dry_run {
        shared("--dry-run touches no git repository");
        return Ok(None);
    }
    match crate::worktree::branch::prepare(&parent.worktree.work_dir, &format!("parallel stage {}", node.id))
    {
        Ok(Ok(base)) => Ok(Some(base)),
        Ok(Err(no_git)) => {
            shared(no_git.reason());
            Ok(None)
        }
        Err(error) => Err(format!("cannot prepare git worktrees for the branches of `{}`: {error}", node.id)),
    }
}

/// `path`, or `path.2`, `path.3`, ... when it exists (a resumed stage's earlier worktree).
fn free_path(path: PathBuf) -> PathBuf {
    let mut candidate = path.clone();
    let mut n = 1;
    while std::fs::symlink_metadata(&candidate).is_ok() {
        n += 1;
        candidate = path.with_extension(n.to_string());
    }
    candidate
}

enum BranchStop {
    Failed(String),
    Paused(Pause),
    Cancelled,
}

/// What a branch changed relative to its fork, without engine bookkeeping.
fn branch_updates(context: &crate::context::Context) -> Map<String, Value> {
    context
        .changes()
        .filter(|(key, _)| {
            !key.starts_with("internal.") && *key != "current_node" && *key != "parallel.branch_id"
        })
        .map(|(key, value)| (key.to_string(), value.clone()))
        .collect()
}

/// The parallel stage's own outcome under its join policy.
fn join_outcome(
    node: &Node,
    settings: &ParallelSettings,
    results: &[BranchResult],
    failed_fast: bool,
) -> Outcome {
    let total = results.len();
    let successes = results.iter().filter(|r| r.status.is_successful()).count();
    let summary = format!("{successes} of {total} branches succeeded ({})", settings.join.describe());
    let failed: Vec<String> = results
        .iter()
        .filter(|r| r.status == BranchStatus::Fail)
        .map(|r| format!("`{}`: {}", r.branch_id, r.failure_reason.as_deref().unwrap_or("no reason given")))
        .collect();
    let status = if failed_fast {
        StageStatus::Fail
    } else {
        match settings.join.needed(total) {
            None if successes == total => StageStatus::Success,
            None if successes == 0 && total > 0 => StageStatus::Fail,
            None => StageStatus::PartialSuccess,
            Some(needed) if successes >= needed => StageStatus::Success,
            Some(_) => StageStatus::Fail,
        }
    };
    let outcome = Outcome::new(status).with_notes(summary.clone());
    if status != StageStatus::Fail {
        return outcome;
    }
    let why = if failed_fast {
        format!("error_policy=fail_fast stopped parallel stage `{}` at the first failure", node.id)
    } else {
        format!("parallel stage `{}`: {summary}", node.id)
    };
    let details = if failed.is_empty() { String::new() } else { format!("; failed: {}", failed.join("; ")) };
    Outcome { failure_reason: Some(format!("{why}{details}")), ..outcome }
}

/// Adds `parallel.results` and the counts to the stage's context updates.
fn with_results(outcome: Outcome, results: &[BranchResult]) -> Outcome {
    let successes = results.iter().filter(|r| r.status.is_successful()).count();
    outcome
        .with_update("parallel.results", serde_json::to_value(results).unwrap_or(Value::Null))
        .with_update("parallel.branch_count", results.len())
        .with_update("parallel.success_count", successes)
        .with_update("parallel.failure_count", results.len() - successes)
}

fn read_journal(dir: &Path, plans: &[BranchPlan]) -> BTreeMap<String, BranchJournal> {
    plans
        .iter()
        .filter_map(|plan| {
            let text = crate::regular_file::read_to_string(
                journal_path(dir, &plan.id),
                crate::regular_file::FileKind::Record,
            )
            .ok()?;
            let entry: BranchJournal = serde_json::from_str(&text).ok()?;
            Some((plan.id.clone(), entry))
        })
        .collect()
}

fn write_journal(dir: &Path, branch_id: &str, entry: &BranchJournal) {
    let path = journal_path(dir, branch_id);
    let written = std::fs::create_dir_all(dir)
        .map_err(|source| crate::run_dir::RunDirError::Io { path: dir.to_path_buf(), source })
        .and_then(|()| crate::run_dir::write_json_file_with(&path, entry, Durability::Unsynced));
    if let Err(error) = written {
        tracing::warn!(%error, "branch `{branch_id}` not journaled; a resumed run would run it again");
    }
}

fn journal_path(dir: &Path, branch_id: &str) -> PathBuf {
    dir.join(format!("{}.json", crate::context::artifacts::encode_key(branch_id)))
}
