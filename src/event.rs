//! What an event says: one variant per line kind of `events.jsonl`, named as the line names it
//! (`"event": "stage.started"`), with its fields typed. [`crate::event_log::EventLog`] adds what
//! every line has (`seq`, `ts`, `run_id`, and `node_id`/`visit` for a stage's events).
//!
//! The JSON is the log's format, read by `fabro logs`, `fabro serve`, reports and other tools:
//! a field that is `null` today stays `null` (an `Option` without `skip_serializing_if`), one
//! that is left out stays left out (tests/integration/event_log.rs holds the lines). A line of a
//! log written by another fabro version may not deserialize (an event this version does not
//! know, a field it lacks): readers of `events.jsonl` from disk read it as JSON and fall back on
//! that.

use std::collections::BTreeMap;
use std::path::PathBuf;

use serde::{Deserialize, Serialize};

use crate::branch_results::BranchStatus;
use crate::outcome::StageStatus;
use crate::run_status::RunStatus;

/// One event, without the keys every line has.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "event")]
pub enum Event {
    // The run.
    /// A run starts: fresh (`goal` and `run_dir`) or after a `loop_restart` (`restarted_from`).
    #[serde(rename = "run.started")]
    RunStarted {
        workflow: String,
        #[serde(skip_serializing_if = "Option::is_none")]
        goal: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        run_dir: Option<PathBuf>,
        #[serde(skip_serializing_if = "Option::is_none")]
        restarted_from: Option<String>,
    },
    /// The run directory held a run that never started; its files were removed.
    #[serde(rename = "run.dir_reused")]
    RunDirReused { run_dir: PathBuf, removed: Vec<String> },
    /// A saved run continues from node `from`.
    #[serde(rename = "run.resumed")]
    RunResumed { from: String, previous_status: RunStatus, run_dir: PathBuf },
    /// A stage event: the run stops until it is resumed. `kind` says what it waits for
    /// (`answer`, `ceiling`, `stage_ceiling`, `step`, `storage`, `provider`).
    #[serde(rename = "run.paused")]
    RunPaused {
        reason: String,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        kind: Option<String>,
    },
    #[serde(rename = "run.completed")]
    RunCompleted(RunEnd),
    #[serde(rename = "run.failed")]
    RunFailed(RunEnd),
    #[serde(rename = "run.interrupted")]
    RunInterrupted(RunEnd),
    /// A `loop_restart` edge: the run continues at `to` in the new directory `run_dir`.
    #[serde(rename = "run.restarted")]
    RunRestarted { to: String, run_dir: String },
    /// The first event of a run forked from another (`fabro fork`).
    #[serde(rename = "run.forked")]
    RunForked { from_run_dir: String, from_run_id: String, node: String, visit: u32, next_node: String },
    /// `fabro rewind`: later history moved into `archive`.
    #[serde(rename = "run.rewound")]
    RunRewound { to: String, visit: u32, next_node: String, archive: String, moved: Vec<String> },
    /// A resume found the journal's last entry torn and cut it off.
    #[serde(rename = "journal.truncated")]
    JournalTruncated { offset: u64, bytes: u64, entries: u64 },
    #[serde(rename = "checkpoint.saved")]
    CheckpointSaved { node_id: String, status: RunStatus },
    #[serde(rename = "checkpoint.failed")]
    CheckpointFailed { error: String },

    // Stages.
    #[serde(rename = "stage.started")]
    StageStarted {
        handler: String,
        /// Relative to the run directory; none for a stage that keeps no files.
        #[serde(skip_serializing_if = "Option::is_none")]
        stage_dir: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        branch_id: Option<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        sandbox: Option<String>,
    },
    #[serde(rename = "stage.completed")]
    StageCompleted(StageEnd),
    #[serde(rename = "stage.failed")]
    StageFailed(StageEnd),
    /// Attempt `attempt` starts after `delay_ms`.
    #[serde(rename = "stage.retrying")]
    StageRetrying { attempt: u32, delay_ms: u64, reason: Option<String> },
    /// A resume killed the process group a stage left running when fabro was stopped.
    #[serde(rename = "stage.survivor_killed")]
    StageSurvivorKilled { stage_dir: String, pgid: i32 },
    #[serde(rename = "edge.selected")]
    EdgeSelected(SelectedEdge),
    /// A stage tried to set a key only the engine sets.
    #[serde(rename = "context.update_refused")]
    ContextUpdateRefused { key: String, reason: String },
    /// A context value too large for checkpoints moved to the artifact store.
    #[serde(rename = "artifact.offloaded")]
    ArtifactOffloaded { key: String, bytes: u64, path: String },
    #[serde(rename = "worktree.committed")]
    WorktreeCommitted { commit: String },
    #[serde(rename = "worktree.commit_failed")]
    WorktreeCommitFailed { error: String },

    // Human gates.
    #[serde(rename = "interview.started")]
    InterviewStarted {
        question: String,
        choices: Vec<String>,
        #[serde(skip_serializing_if = "Option::is_none")]
        timeout: Option<String>,
    },
    /// The answer, and the choice it led to (none for free text that names none).
    #[serde(rename = "interview.completed")]
    InterviewCompleted { answer: String, key: Option<String>, label: Option<String>, target: Option<String> },
    /// Nobody answered in time; the default choice, if the gate has one that names a choice.
    #[serde(rename = "interview.timeout")]
    InterviewTimeout {
        timeout: Option<String>,
        default: Option<String>,
        key: Option<String>,
        label: Option<String>,
        target: Option<String>,
    },

    // Parallel stages.
    #[serde(rename = "parallel.started")]
    ParallelStarted {
        branch_count: usize,
        join: String,
        max_parallel: usize,
        join_policy: String,
        fail_fast: bool,
        already_finished: usize,
    },
    /// The work directory is shared by the branches (no git repository to give each its own).
    #[serde(rename = "parallel.shared_work_dir")]
    ParallelSharedWorkDir { reason: String },
    /// A run event: `node_id` is the branch's first node.
    #[serde(rename = "parallel.branch.started")]
    ParallelBranchStarted { branch_id: String, node_id: String },
    #[serde(rename = "parallel.branch.completed")]
    ParallelBranchCompleted {
        branch_id: String,
        status: BranchStatus,
        duration_ms: u64,
        failure_reason: Option<String>,
    },
    /// The join policy no longer needed the branch; `duration_ms` only when it had started.
    #[serde(rename = "parallel.branch.cancelled")]
    ParallelBranchCancelled {
        branch_id: String,
        started: bool,
        #[serde(skip_serializing_if = "Option::is_none")]
        duration_ms: Option<u64>,
    },
    #[serde(rename = "parallel.branch.commit_failed")]
    ParallelBranchCommitFailed { branch_id: String, error: String },
    #[serde(rename = "parallel.completed")]
    ParallelCompleted { success_count: usize, failure_count: usize, duration_ms: u64, status: StageStatus },
    /// A fan-in merged a branch's commit into the work directory.
    #[serde(rename = "parallel.merged")]
    ParallelMerged { branch_id: String, commit: String, fast_forward: bool },

    // Lifecycle hooks (`[[hooks]]`, see [`crate::lifecycle_hooks`]).
    /// A hook ran to its end and succeeded (exit 0, or a 2xx answer).
    #[serde(rename = "hook.ran")]
    HookRan {
        hook: String,
        hook_event: String,
        duration_ms: u64,
        exit_code: Option<i32>,
        http_status: Option<u16>,
        /// What a hook answered: a lifecycle hook `proceed`, `skip`, `override`; a tool-call
        /// hook `allow`, `block`, `modify` (pre_tool_use), `note`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        decision: Option<String>,
    },
    /// A hook failed: a non-zero exit, a non-2xx answer, a timeout, or it could not start. A
    /// blocking hook's failure also fails the stage or run it was told about.
    #[serde(rename = "hook.failed")]
    HookFailed {
        hook: String,
        hook_event: String,
        blocking: bool,
        duration_ms: u64,
        exit_code: Option<i32>,
        http_status: Option<u16>,
        message: String,
    },

    // Manager stages.
    #[serde(rename = "child.started")]
    ChildStarted { workflow: String, run_dir: String, resumed: bool },
    #[serde(rename = "child.finished")]
    ChildFinished {
        status: RunStatus,
        failure_reason: Option<String>,
        run_dir: String,
        /// `stop_condition` or `max_cycles` when the manager stopped the child.
        stopped_by: Option<String>,
    },
    /// One supervision cycle, with what the manager saw of the child (if it had a checkpoint).
    #[serde(rename = "manager.cycle")]
    ManagerCycle {
        cycle: u64,
        #[serde(flatten)]
        child: Option<ChildObservation>,
    },
    #[serde(rename = "manager.steered")]
    ManagerSteered { child_node: String, child_visit: u32, path: String },

    // Model calls and agent loops.
    #[serde(rename = "llm.reasoning_effort_ignored")]
    LlmReasoningEffortIgnored { provider: String, model: String, reasoning_effort: String },
    /// Attempt `attempt` of a model call failed (the provider could not be reached, or was busy)
    /// and is tried again after `delay_ms`.
    #[serde(rename = "llm.retry")]
    LlmRetry { provider: String, model: String, attempt: u32, delay_ms: u64, error: String },
    /// The model's answer was cut off at the output limit (`stop_reason`: OpenAI's `length`,
    /// Anthropic's `max_tokens`); `turn` is an agent stage's turn.
    #[serde(rename = "llm.truncated")]
    LlmTruncated {
        model: String,
        stop_reason: String,
        max_output_tokens: u32,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        turn: Option<u32>,
    },
    /// A `memory=true` stage used the project memory where fabro kept it before (the workflow
    /// file's repository, `store`), because the work directory's project (`project_store`) has
    /// none yet; `mv store project_store` moves it where it belongs.
    #[serde(rename = "memory.old_store")]
    MemoryOldStore { store: String, project_store: String },
    /// The provider's server could not stream a call (it refused, or ended the stream before any
    /// of the answer): the call was made again without streaming, and so are the provider's later
    /// calls of its kind (`with_tools` or not) for the rest of the run.
    #[serde(rename = "llm.unstreamed")]
    LlmUnstreamed { provider: String, model: String, with_tools: bool, reason: String },
    /// A streamed answer came without the server's token counts: the stage's usage counts fabro's
    /// estimate (four characters a token) for it, and its status.json says `usage_estimated`.
    /// Once per stage.
    #[serde(rename = "llm.usage_estimated")]
    LlmUsageEstimated { model: String, input_tokens: u64, output_tokens: u64 },
    /// A call failed with a retryable error after the provider's own retries, and the stage goes
    /// on with its next `fallback_models` model, keeping the conversation.
    #[serde(rename = "llm.failover")]
    LlmFailover {
        from_model: String,
        from_provider: String,
        to_model: String,
        to_provider: String,
        reason: String,
    },
    /// A stage reached its own ceiling (`bound`: max_stage_tokens or max_stage_cost; `limit` in
    /// tokens or US dollars) and stops before its next model call; the run pauses.
    #[serde(rename = "llm.cost_ceiling")]
    LlmCostCeiling { bound: String, limit: f64, spent_tokens: u64, spent_usd: f64 },
    /// An agent stage started sub-agent `id` on `model` with `task`.
    #[serde(rename = "agent.sub.spawned")]
    AgentSubSpawned { id: String, model: String, task: String },
    /// Sub-agent `id` answered (its session took `turns` turns and these tokens).
    #[serde(rename = "agent.sub.completed")]
    AgentSubCompleted { id: String, turns: u32, input_tokens: u64, output_tokens: u64 },
    /// Sub-agent `id`'s session failed (its `wait` answers the error).
    #[serde(rename = "agent.sub.failed")]
    AgentSubFailed { id: String, error: String },
    /// Sub-agent `id` was closed (`working`: it was stopped mid-task).
    #[serde(rename = "agent.sub.closed")]
    AgentSubClosed { id: String, working: bool },
    /// A `SKILL.md` in an agent stage's skill directories that is not a skill (the stage goes on
    /// without it).
    #[serde(rename = "agent.skill_invalid")]
    AgentSkillInvalid { file: String, message: String },
    /// An agent stage runs its tool loop on a small-tier model (known only at run time: from
    /// `--model` or the config file); `fix` names a stronger model.
    #[serde(rename = "agent.small_tier_parent")]
    AgentSmallTierParent { model: String, fix: String },
    /// The agent called `mark_task_done`: the finished task's `replaced_turns` turns were replaced
    /// by its completion record (`fallback` says why the task's operations stand in instead).
    #[serde(rename = "agent.task_checkpoint")]
    AgentTaskCheckpoint {
        turn: u32,
        detail: String,
        replaced_turns: usize,
        before_tokens: u64,
        after_tokens: u64,
        #[serde(default, skip_serializing_if = "Option::is_none")]
        fallback: Option<String>,
    },
    /// A stage with memory wrote an entry of the project's memory (`source`: `tool` for
    /// `remember`, `extract` for `memory_extract`).
    #[serde(rename = "agent.memory.remembered")]
    AgentMemoryRemembered { kind: String, name: String, replaced: bool, source: String },
    #[serde(rename = "agent.turn_limit")]
    AgentTurnLimit { max_turns: u32 },
    /// Context layers dropped or shortened old turns before a call; tokens saved per layer.
    #[serde(rename = "agent.context.trimmed")]
    AgentContextTrimmed {
        turn: u32,
        before_tokens: u64,
        after_tokens: u64,
        saved_tokens: BTreeMap<String, u64>,
    },
    #[serde(rename = "agent.tool_result.offloaded")]
    AgentToolResultOffloaded { tool: String, chars: usize, path: String },
    /// The agent is going round in circles: the same tool call several times in a row, or a
    /// cycle of 2 or 3 calls (`period`) repeated; `tool` names the cycle's tools, `arguments` are
    /// its first call's.
    #[serde(rename = "agent.watchdog")]
    AgentWatchdog {
        tool: String,
        arguments: String,
        repeats: u32,
        #[serde(default = "one", skip_serializing_if = "is_one")]
        period: u32,
    },
    /// A tool call above the stage's `permissions` did not run: `reason` is what the model was
    /// told (no terminal, or the person denied it).
    #[serde(rename = "agent.permission_denied")]
    AgentPermissionDenied { tool: String, permissions: String, reason: String },
    /// The person at the terminal let a call above the stage's `permissions` run: `scope` is
    /// `once` or `stage`.
    #[serde(rename = "agent.permission_granted")]
    AgentPermissionGranted { tool: String, permissions: String, scope: String },
    /// An MCP server started (when the first stage working in its work directory and sandbox
    /// wanted it), with its tools and the sandbox it runs in (`none` or `bwrap`).
    #[serde(rename = "mcp.server_started")]
    McpServerStarted { server: String, tools: Vec<String>, sandbox: String },
    /// The image of a devcontainer (`build.dockerfile`) was built, when the first stage that
    /// needed it started: the image (tagged by the Dockerfile's digest, so an unchanged Dockerfile
    /// is not built again), the Dockerfile, the build's log (relative to the run directory).
    #[serde(rename = "container.image_built")]
    ContainerImageBuilt { image: String, dockerfile: String, log: String, duration_ms: u64 },
    /// A warning: the description or input schema of an MCP server's tool passed its bound and
    /// was cut before the model saw it (sizes as the server sent them, in bytes).
    #[serde(rename = "mcp.tool_cut")]
    McpToolCut { server: String, tool: String, description_bytes: usize, schema_bytes: usize },
    /// A server's reported input tokens set the stage's characters-per-token ratio (the first
    /// time, and when it moves by more than a tenth).
    #[serde(rename = "agent.context.calibrated")]
    AgentContextCalibrated { chars_per_token: f64, sent_chars: usize, reported_tokens: u64 },
    /// The context window an agent stage goes by, and where it came from: at the start (`node`,
    /// `config`, `known`, `learned` earlier in the run, `server`, `default`), and again when a rejection
    /// states a smaller one (`error`).
    #[serde(rename = "agent.context.window")]
    AgentContextWindow { tokens: u64, source: String },
    #[serde(rename = "agent.context_window_warning")]
    AgentContextWindowWarning { estimated_tokens: u64, context_window_size: u64, usage_percent: u64 },
    /// `trigger`: `window`, `turns`, `budget` or `overflow` (the next call would not fit the
    /// window, or was rejected for its size); `mode`: the stage's compaction_mode.
    #[serde(rename = "agent.compaction.started")]
    AgentCompactionStarted { estimated_tokens: u64, turn_count: usize, mode: String, trigger: String },
    #[serde(rename = "agent.compaction.completed")]
    AgentCompactionCompleted(Compaction),
    /// A summary call failed; `fallback` says what replaced the turns (`compaction_failed_marker`,
    /// or `lossless` under hybrid).
    #[serde(rename = "agent.compaction.failed")]
    AgentCompactionFailed { error: String, fallback: String },
    /// The input tokens sent since the last compaction reached `context_budget_warn`.
    #[serde(rename = "agent.context.budget_warning")]
    AgentContextBudgetWarning { input_tokens: u64, warn_at: u64 },
    /// A call rejected for its size is sent again smaller: `step` 1-3 of the trim ladder.
    #[serde(rename = "agent.context.trim_retry")]
    AgentContextTrimRetry {
        turn: u32,
        step: usize,
        action: String,
        error: String,
        before_tokens: u64,
        after_tokens: u64,
    },
    /// The filters of a stage's replayed conversation thread changed what it is sent.
    #[serde(rename = "agent.context.thread_filtered")]
    AgentContextThreadFiltered {
        thread: String,
        filters: Vec<String>,
        messages_before: usize,
        messages_after: usize,
        before_tokens: u64,
        after_tokens: u64,
    },
    /// The anti-thrash guard held a compaction back.
    #[serde(rename = "agent.context.compaction_held")]
    AgentContextCompactionHeld { estimated_tokens: u64, recent_compactions: usize, min_savings: f64 },
}

impl Event {
    /// `run.paused` for `pause`.
    pub fn run_paused(pause: &crate::outcome::Pause) -> Event {
        Event::RunPaused { reason: pause.reason.clone(), kind: Some(pause.kind.as_str().to_string()) }
    }
}

/// How a run ended (`run.completed`, `run.failed`, `run.interrupted`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RunEnd {
    pub status: RunStatus,
    pub failure_reason: Option<String>,
    pub duration_ms: u64,
}

/// How a stage visit ended (`stage.completed`, `stage.failed`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct StageEnd {
    pub status: StageStatus,
    pub duration_ms: u64,
    pub attempts: u32,
    pub notes: Option<String>,
    pub failure_reason: Option<String>,
    /// Why a failed stage failed (`transient_infra`, `deterministic`, ...).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_class: Option<crate::outcome::FailureClass>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch_id: Option<String>,
}

/// The route taken after `from` (`edge.selected`); `reason` says which rule chose it.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct SelectedEdge {
    pub from: String,
    pub to: String,
    pub reason: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub loop_restart: Option<bool>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub gate_status: Option<String>,
    /// Why a dry run took this edge where a real run decides (`dry_run_*` reasons).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub assumption: Option<String>,
}

impl SelectedEdge {
    /// From `from` to `to` for `reason`, with no more to say.
    pub fn new(from: &str, to: &str, reason: &str) -> SelectedEdge {
        SelectedEdge {
            from: from.to_string(),
            to: to.to_string(),
            reason: reason.to_string(),
            loop_restart: None,
            branch_id: None,
            gate: None,
            gate_status: None,
            assumption: None,
        }
    }
}

/// What a manager read from its child's checkpoint, under the context keys it sets.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ChildObservation {
    #[serde(rename = "stack.child.status")]
    pub status: RunStatus,
    #[serde(rename = "stack.child.current_node")]
    pub current_node: String,
    #[serde(rename = "stack.child.completed_count")]
    pub completed_count: usize,
    #[serde(rename = "stack.child.last_outcome")]
    pub last_outcome: Option<String>,
    #[serde(rename = "stack.child.run_dir")]
    pub run_dir: String,
}

/// A compaction rewrote an agent's history: the turns it found and kept, the block it left (none
/// under `window`), and the estimate before and after.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Compaction {
    pub original_turn_count: usize,
    pub preserved_turn_count: usize,
    pub summary_token_estimate: u64,
    pub tracked_file_count: usize,
    pub mode: String,
    pub before_tokens: u64,
    pub after_tokens: u64,
}

/// The default `period` of `agent.watchdog` (one call repeated).
fn one() -> u32 {
    1
}

fn is_one(value: &u32) -> bool {
    *value == 1
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_line_of_the_log_reads_back_as_its_event_and_an_unknown_one_does_not() {
        let line = r#"{"attempts":2,"duration_ms":35,"event":"stage.completed","failure_reason":null,"node_id":"flaky","notes":"exit 0 in 0.0s","run_id":"r","seq":8,"status":"success","ts":"t","visit":1}"#;
        let value: serde_json::Value = serde_json::from_str(line).unwrap();
        let end = StageEnd {
            status: StageStatus::Success,
            duration_ms: 35,
            attempts: 2,
            notes: Some("exit 0 in 0.0s".into()),
            failure_reason: None,
            failure_class: None,
            branch_id: None,
        };
        assert_eq!(Event::deserialize(&value).unwrap(), Event::StageCompleted(end));
        let newer: serde_json::Value = serde_json::from_str(r#"{"event":"stage.paused","seq":9}"#).unwrap();
        assert!(Event::deserialize(&newer).is_err());
    }

    #[test]
    fn a_manager_cycle_holds_the_childs_keys_only_when_it_saw_the_child() {
        let unseen = serde_json::to_value(Event::ManagerCycle { cycle: 1, child: None }).unwrap();
        assert_eq!(unseen, serde_json::json!({"event": "manager.cycle", "cycle": 1}));
        let child = ChildObservation {
            status: RunStatus::Running,
            current_node: "work".into(),
            completed_count: 1,
            last_outcome: None,
            run_dir: "run/children/manage/1".into(),
        };
        let seen = serde_json::to_value(Event::ManagerCycle { cycle: 2, child: Some(child) }).unwrap();
        assert_eq!(seen["stack.child.last_outcome"], serde_json::Value::Null);
        assert_eq!(seen["stack.child.current_node"], "work");
    }
}
