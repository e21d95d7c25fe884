//! LLM backends: what agent and prompt stages call. `simulated` (placeholder text) and
//! `scripted` (responses from a file) answer without a model; `live` talks to real providers
//! (Anthropic, OpenAI, OpenAI-compatible servers) and runs agent stages as a tool-using loop, or
//! runs an installed CLI agent for `backend="cli"` stages.

pub mod cli_agent;
pub mod config;
pub mod live;
pub mod scripted;
pub mod simulated;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use crate::chat::ThreadMessage;
use crate::event_log::EventLog;
use crate::llm::BackendError;
use crate::usage::Usage;

/// One model call.
#[derive(Debug, Clone)]
pub struct LlmRequest<'a> {
    pub node_id: &'a str,
    /// 1 for the node's first visit in the run.
    pub visit: u32,
    /// `true` for agent stages (tool use allowed), `false` for single prompts.
    pub agentic: bool,
    /// The full text sent: preamble and prompt.
    pub prompt: &'a str,
    pub model: Option<&'a str>,
    pub provider: Option<&'a str>,
    pub reasoning_effort: Option<&'a str>,
    pub timeout: Option<Duration>,
    /// Under `full` fidelity: the conversation thread this call continues...
    pub thread: Option<&'a str>,
    /// ...and its earlier messages, oldest first (empty for a new thread or other fidelities).
    pub history: &'a [ThreadMessage],
    /// Where the stage runs, for backends that do real work (agent tools, transcripts, events).
    pub stage: Option<StageEnv<'a>>,
}

/// The stage an [`LlmRequest`] belongs to: its directories, event log and agent settings.
#[derive(Clone)]
pub struct StageEnv<'a> {
    pub work_dir: &'a Path,
    /// `stages/<node>/<visit>/`: `transcript.jsonl` goes here.
    pub stage_dir: &'a Path,
    pub run_dir: &'a Path,
    pub events: &'a EventLog,
    /// Node `max_turns`.
    pub max_turns: Option<u32>,
    /// Node `context_window` (tokens), overriding the known-model table.
    pub context_window: Option<u64>,
    /// Node `max_tokens`: the most output tokens each model call asks for.
    pub max_output_tokens: Option<u32>,
    /// Node `backend` (`cli` runs an installed coding agent).
    pub backend: crate::graph::settings::Backend,
    /// Node `cli_agent`.
    pub cli_agent: Option<&'a str>,
    /// What the stage may still use under the run's ceilings.
    pub usage_left: Option<crate::usage::UsageLeft>,
    /// The stage's own ceilings: the agent loop stops before a model call once one is reached.
    pub stage_limits: crate::usage::StageLimits,
    /// How the agent loop trims what it sends and compacts (node attributes and graph defaults;
    /// the backend fills what they leave unset from its configuration).
    pub context: crate::graph::settings::ContextSettings,
    /// What the run's records said when the stage started (for lossless compaction).
    pub run_record: Option<crate::agent::context::compaction::lossless::RunRecord>,
    /// Where the shell tool's commands and CLI agents run.
    pub confinement: crate::sandbox::Confinement,
    /// The hooks around every agent tool call: the run's `[[hooks]]` of tool events, then the
    /// node's `tool_hooks.pre`/`tool_hooks.post`.
    pub tool_hooks: crate::agent::tool_hooks::ToolHooks,
    /// What the agent loop does when the same tool call repeats.
    pub watchdog: crate::graph::settings::WatchdogMode,
    /// The node's `small_model` (else the graph's `default_small_model`).
    pub small_model: Option<&'a str>,
    /// The project memory of a stage with `memory=true`.
    pub memory: Option<crate::memory::StageMemory>,
    /// The run's reference files: indexed in the system prompt, readable by the tools.
    pub reference_files: &'a [crate::agent::context::reference_files::ReferenceFile],
    /// The node's (or graph's) small-tier guard; the config file's applies when unset.
    pub small_tier_parent: Option<crate::graph::settings::SmallTierParent>,
    /// The node's `fallback_models` (else the graph's `default_fallback_models`), in order.
    pub fallback_models: Vec<String>,
    /// The MCP servers whose tools the stage gets (node `mcp_servers`, else the graph's).
    pub mcp_servers: crate::graph::settings::McpSelection,
    /// The built-in tools the stage is offered (node `tools`, else the graph's `default_tools`;
    /// unset: those of its model's family).
    pub tools: Option<Vec<String>>,
    /// The node's `permissions` (else the graph's); the backend's default applies when unset.
    pub permissions: Option<crate::graph::settings::PermissionLevel>,
    /// The node's `turn_limit_outcome` (else the graph's); the backend's default applies when unset.
    pub turn_limit_outcome: Option<crate::graph::settings::TurnLimitOutcome>,
}

impl std::fmt::Debug for StageEnv<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StageEnv")
            .field("work_dir", &self.work_dir)
            .field("stage_dir", &self.stage_dir)
            .field("max_turns", &self.max_turns)
            .field("context_window", &self.context_window)
            .field("max_output_tokens", &self.max_output_tokens)
            .field("backend", &self.backend)
            .field("cli_agent", &self.cli_agent)
            .finish_non_exhaustive()
    }
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct LlmResponse {
    pub text: String,
    /// The model that answered, when the backend knows it.
    pub model: Option<String>,
    pub usage: Option<Usage>,
    /// Estimated cost in US dollars, when the model's price is known.
    pub cost_usd: Option<f64>,
    /// Files the stage wrote or edited (relative to the work directory).
    pub files_touched: Vec<String>,
    /// Estimated tokens the context layers kept out of an agent stage's calls, per layer.
    pub context_savings: crate::usage::Savings,
    /// An agent stage's conversation from its prompt to its answer, tool turns included (as
    /// compaction left it), for its thread under `full` fidelity; empty when the backend has none.
    pub conversation: Vec<crate::chat::ChatMessage>,
    /// Names of the memory entries the stage wrote (`remember`, `memory_extract`).
    pub memory_added: Vec<String>,
    /// Tokens and estimated cost per model, when the stage failed over to another model.
    pub usage_by_model: BTreeMap<String, crate::usage::ModelUsage>,
    /// The context window an agent stage went by.
    pub context_window: Option<crate::usage::ContextWindow>,
    /// Set when `max_turns` stopped an agent stage while the model still called tools.
    pub turn_limit: Option<TurnLimit>,
    /// An answer was cut off at the output limit (the `llm.truncated` event says which).
    pub truncated: bool,
    /// Some usage is fabro's estimate (`llm.usage_estimated`).
    pub usage_estimated: bool,
    /// The project instruction files an agent stage's system prompt carried.
    pub project_docs: Vec<String>,
}

/// An agent stage stopped by its turn limit, and how the stage ends for it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TurnLimit {
    pub max_turns: u32,
    pub outcome: crate::graph::settings::TurnLimitOutcome,
}

#[async_trait::async_trait]
pub trait Backend: Send + Sync {
    /// A short name for logs and status files (`simulated`, `scripted`, ...).
    fn name(&self) -> &str;
    async fn complete(&self, request: &LlmRequest<'_>) -> Result<LlmResponse, BackendError>;

    /// Checks, before a run's first stage, that the providers the LLM stages of `workflow` call
    /// can be reached, waiting for them up to their retry windows (`waiting` is told once when
    /// it waits). Backends without providers have nothing to check.
    async fn check_reachable(
        &self,
        _workflow: &crate::graph::Workflow,
        _waiting: &(dyn for<'s> Fn(&'s str) + Send + Sync),
    ) -> Result<(), crate::llm::Unreachable> {
        Ok(())
    }
}

/// Introduces the ids a model must choose from, in [`choice_instruction`].
const CHOICE_LEAD: &str = "where <id> is exactly one of: ";

/// The closing instruction of a prompt that asks the model to choose one of `ids` (a fan-in stage
/// picking the best branch); [`chosen`] reads the answer back.
pub fn choice_instruction(ids: &[&str]) -> String {
    let list: Vec<String> = ids.iter().map(|id| format!("`{id}`")).collect();
    format!("\nEnd your answer with a line `best: <id>`, {CHOICE_LEAD}{}.\n", list.join(", "))
}

/// The ids a prompt built with [`choice_instruction`] offers, in order.
pub fn offered_choices(prompt: &str) -> Option<Vec<String>> {
    let line = prompt.lines().rev().find(|line| line.contains(CHOICE_LEAD))?;
    let (_, list) = line.split_once(CHOICE_LEAD)?;
    let ids = list.trim_end().trim_end_matches('.').split(", ").map(|id| id.trim_matches('`').to_string());
    Some(ids.filter(|id| !id.is_empty()).collect())
}

/// The id an answer chose: its last `best: <id>` line, with Markdown emphasis, quotes and a final
/// period taken off. The caller must still check that the id is exactly one it offered.
pub fn chosen(answer: &str) -> Option<&str> {
    answer.lines().rev().find_map(|line| {
        let line = line.trim().trim_matches(|c| c == '*' || c == '_' || c == '`').trim();
        let rest = line.get(..5).filter(|head| head.eq_ignore_ascii_case("best:")).map(|_| &line[5..])?;
        let id =
            rest.trim_matches(|c: char| c.is_whitespace() || matches!(c, '`' | '"' | '\'' | '*' | '_' | '.'));
        (!id.is_empty()).then_some(id)
    })
}

#[cfg(test)]
mod choice_tests {
    use super::*;

    #[test]
    fn choices_round_trip_through_the_instruction() {
        let prompt = format!("Pick one.\n{}", choice_instruction(&["fast", "safe-2"]));
        assert_eq!(offered_choices(&prompt), Some(vec!["fast".to_string(), "safe-2".to_string()]));
        assert_eq!(offered_choices("no instruction here"), None);
    }

    #[test]
    fn the_last_best_line_is_the_choice() {
        assert_eq!(chosen("Both are fine.\nbest: fast\n"), Some("fast"));
        assert_eq!(chosen("**Best:** `safe-2`."), Some("safe-2"));
        assert_eq!(chosen("best: a\nthen again\nBEST: b"), Some("b"));
        assert_eq!(chosen("the best is a"), None);
        assert_eq!(chosen("best:"), None);
    }
}
