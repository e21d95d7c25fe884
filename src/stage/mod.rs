//! The stage contract: what the engine hands a handler for one visit of one stage
//! ([`StageRun`]), what a handler answers ([`Outcome`] or a [`HandlerError`]), the shared
//! [`Services`], and the [`HandlerRegistry`] that maps node types to handlers. The engine
//! resolves a node's handler by its explicit `type`, then its shape, then the default agent
//! handler; library users may register their own by type name.
//!
//! A handler reports how the stage went as an [`Outcome`]; it must never panic (the engine turns
//! a panic into a failed stage anyway) and must stop promptly when the run is cancelled.

pub mod child_run;

use std::collections::HashMap;
use std::path::Path;
use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::backends::Backend;
use crate::context::Context;
use crate::event_log::EventLog;
use crate::graph::{Node, Workflow};
use crate::interview::Interviewer;
use crate::outcome::Outcome;

/// Everything a handler may read while it runs one visit of one stage: the stage itself, what
/// it is shown of the run so far, what it may still spend, and the run it belongs to. What the
/// node sets is in its typed settings (`node.settings`: every stage's, and its kind's).
pub struct StageRun<'a> {
    pub node: &'a Node,
    pub context: &'a Context,
    /// Where commands run and agents edit files (the line's worktree in a worktree run).
    pub work_dir: &'a Path,
    /// `stages/<node_id>/<visit>/`, already created unless the handler keeps no stage files;
    /// everything the stage writes goes here.
    pub stage_dir: &'a Path,
    /// 1 for the first visit of this node in the run.
    pub visit: u32,
    /// 1 for the first attempt of this visit; retries count up.
    pub attempt: u32,
    /// Where the stage's programs run (commands, the agent's shell tool, CLI agents).
    pub confinement: crate::sandbox::Confinement,
    pub past: RunSoFar<'a>,
    pub budget: StageBudget,
    pub run: RunEnv<'a>,
}

/// What a stage is shown of the run so far.
#[derive(Clone, Copy, Default)]
pub struct RunSoFar<'a> {
    /// For LLM and manager stages: the run so far as the stage's fidelity shows it (none under
    /// `full`).
    pub preamble: Option<&'a str>,
    /// For LLM stages under `full`: the thread key and its earlier messages.
    pub thread: Option<(&'a str, &'a [crate::chat::ThreadMessage])>,
    /// The stage visits completed before this one on its line, oldest first.
    pub stages: &'a [crate::run_dir::stage_summary::StageSummary],
}

/// What a stage may still spend on model calls.
#[derive(Debug, Clone, Copy, Default)]
pub struct StageBudget {
    /// What the run's ceilings (`--max-tokens`/`--max-cost`, graph `max_tokens`/`max_cost`) leave
    /// (none without ceilings).
    pub usage_left: Option<crate::usage::UsageLeft>,
    /// The stage's own ceilings (`max_stage_tokens`/`max_stage_cost`, resolved).
    pub stage_limits: crate::usage::StageLimits,
}

/// The run a stage belongs to: the same for every stage of a run (but `cancel`, which is the
/// stage's line's).
#[derive(Clone, Copy)]
pub struct RunEnv<'a> {
    pub workflow: &'a Workflow,
    pub run_id: &'a str,
    pub run_dir: &'a Path,
    pub services: &'a Services,
    pub events: &'a EventLog,
    /// Cancelled on SIGINT/SIGTERM or when the run is stopped; long work must watch it.
    pub cancel: &'a CancellationToken,
    /// `--dry-run`: simulate every side effect (commands, waits, LLM calls).
    pub dry_run: bool,
    /// Runs child workflows through the engine running this stage (manager stages).
    pub children: &'a dyn crate::stage::child_run::ChildRunner,
    /// The run's reference files (`context_files`, `--context-file`), for agent stages.
    pub reference_files: &'a [crate::agent::context::reference_files::ReferenceFile],
    /// `--max-output`: the most bytes a command stage may write (node `max_output` wins).
    pub max_output: Option<u64>,
    /// The run's `[[hooks]]` of tool events (`pre_tool_use`, ...), for agent stages.
    pub tool_hooks: &'a [crate::agent::tool_hooks::ToolHook],
}

/// Shared services handlers call out to.
pub struct Services {
    pub backend: Arc<dyn Backend>,
    pub interviewer: Arc<dyn Interviewer>,
}

/// Why a handler could not produce an outcome.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HandlerError {
    /// Worth trying again (rate limit, network): counts against `max_retries`.
    #[error("{0}")]
    Retryable(String),
    /// Trying again will not help: the stage fails at once.
    #[error("{0}")]
    Terminal(String),
    /// Like [`HandlerError::Terminal`], with why it failed.
    #[error("{1}")]
    Failed(crate::outcome::FailureClass, String),
    /// The stage needs input that is not available now (a human gate without an answer): the
    /// run pauses and can be resumed.
    #[error("{0}")]
    Paused(crate::outcome::Pause),
    /// The run was cancelled while the stage ran.
    #[error("cancelled")]
    Cancelled,
}

#[async_trait::async_trait]
pub trait Handler: Send + Sync {
    async fn run(&self, stage: &StageRun<'_>) -> Result<Outcome, HandlerError>;

    /// Whether the stage keeps files of its own (`stages/<node>/<visit>/` with its
    /// `status.json`). Handlers that only route (start, exit, conditional) say no: their visit
    /// lives in the run's journal alone, so a loop of thousands of them leaves no directories.
    fn keeps_stage_files(&self) -> bool {
        true
    }
}

/// Handlers by canonical type name (`agent`, `command`, ...) plus custom types.
#[derive(Default, Clone)]
pub struct HandlerRegistry {
    handlers: HashMap<String, Arc<dyn Handler>>,
}

impl HandlerRegistry {
    pub fn new() -> Self {
        Self::default()
    }

    /// Registers (or replaces) the handler for a type name.
    pub fn register(&mut self, type_name: impl Into<String>, handler: Arc<dyn Handler>) {
        self.handlers.insert(type_name.into(), handler);
    }

    /// The handler for a node: its resolved type's handler, if one is registered.
    pub fn for_node(&self, node: &Node) -> Option<&Arc<dyn Handler>> {
        self.handlers.get(node.handler_type().name())
    }

    /// The first node (in declaration order) whose type has no handler, if any. Parallel stages
    /// need none: the engine runs their branches itself.
    pub fn first_unhandled<'w>(&self, workflow: &'w Workflow) -> Option<&'w Node> {
        workflow.nodes().find(|node| {
            node.handler_type() != crate::graph::HandlerType::Parallel && self.for_node(node).is_none()
        })
    }
}
