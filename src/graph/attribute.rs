//! The attribute schema (every attribute fabro knows, its type and where it applies) and typed
//! attribute values. A literal is typed by the attribute it belongs to, not by how it was written:
//! `max_retries=3` and `max_retries="3"` are both the integer 3.

use std::fmt;
use std::sync::LazyLock;
use std::time::Duration;

use crate::source::Span;

/// Where an attribute may be written.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    Graph,
    Node,
    Edge,
}

impl Scope {
    pub fn plural(self) -> &'static str {
        match self {
            Scope::Graph => "graphs",
            Scope::Node => "nodes",
            Scope::Edge => "edges",
        }
    }
}

/// The type an attribute's value must be read as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ValueType {
    Text,
    Integer,
    /// An integer that is 0 or more.
    Count,
    Float,
    /// An amount of US dollars, 0 or more (cost ceilings).
    Dollars,
    Boolean,
    /// `250ms`, `900s`, `15m`, `2h`, `1d`, or a sum such as `1h30m`.
    Duration,
    /// Text from a fixed set of words.
    OneOf(&'static [&'static str]),
}

impl fmt::Display for ValueType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ValueType::Text => f.write_str("text"),
            ValueType::Integer => f.write_str("an integer"),
            ValueType::Count => f.write_str("a whole number (0 or more)"),
            ValueType::Float => f.write_str("a number"),
            ValueType::Dollars => f.write_str("an amount of US dollars (0 or more)"),
            ValueType::Boolean => f.write_str("true or false"),
            ValueType::Duration => f.write_str("a duration such as 250ms, 900s, 15m, 2h or 1d"),
            ValueType::OneOf(words) => write!(f, "one of {}", words.join(", ")),
        }
    }
}

/// One known attribute.
#[derive(Debug)]
pub struct AttributeSpec {
    pub name: &'static str,
    pub value_type: ValueType,
    pub scopes: &'static [Scope],
    pub doc: &'static str,
}

use Scope::{Edge as E, Graph as G, Node as N};

const GRAPH: &[Scope] = &[G];
const NODE: &[Scope] = &[N];
const EDGE: &[Scope] = &[E];
const GRAPH_NODE: &[Scope] = &[G, N];
const NODE_EDGE: &[Scope] = &[N, E];
const ANY: &[Scope] = &[G, N, E];

pub const REASONING_EFFORTS: &[&str] = &["low", "medium", "high"];
pub const RETRY_POLICIES: &[&str] = super::settings::RetryPreset::NAMES;
pub const RETRY_ON: &[&str] = super::settings::RetryOn::NAMES;
pub const JOIN_POLICIES: &[&str] = super::settings::JoinPolicy::NAMES;
pub const ERROR_POLICIES: &[&str] = super::settings::ErrorPolicy::NAMES;
pub const SANDBOXES: &[&str] = &["none", "bwrap", "podman", "docker"];
/// The values of an exit node's `outcome`.
pub const EXIT_OUTCOMES: &[&str] = &["success", "fail"];
/// The values of a stage's `backend`.
pub const BACKENDS: &[&str] = super::settings::Backend::NAMES;
pub const LANGUAGES: &[&str] = super::settings::Language::NAMES;
pub const COMPACTION_PRESETS: &[&str] = super::settings::CompactionPreset::NAMES;
pub const COMPACTION_MODES: &[&str] = super::settings::CompactionMode::NAMES;
pub const THREAD_HANDOFFS: &[&str] = super::settings::ThreadHandoff::NAMES;
pub const SUBAGENT_MODELS: &[&str] = super::settings::SubagentModel::NAMES;
pub const WATCHDOG_MODES: &[&str] = super::settings::WatchdogMode::NAMES;
/// The values of `turn_limit_outcome`.
pub const TURN_LIMIT_OUTCOMES: &[&str] = super::settings::TurnLimitOutcome::NAMES;
pub const SMALL_TIER_PARENT: &[&str] = super::settings::SmallTierParent::NAMES;

macro_rules! spec {
    ($name:literal, $ty:expr, $scopes:expr, $doc:literal) => {
        AttributeSpec { name: $name, value_type: $ty, scopes: $scopes, doc: $doc }
    };
}

/// Every attribute with a meaning to fabro. The README's attribute reference lists exactly these.
pub static ATTRIBUTES: &[AttributeSpec] = &[
    // Graph
    spec!(
        "goal",
        ValueType::Text,
        GRAPH,
        "What the run is for; `$goal` in prompts and `graph.goal` in context."
    ),
    spec!(
        "model_stylesheet",
        ValueType::Text,
        GRAPH,
        "CSS-like rules giving nodes llm_model, llm_provider, reasoning_effort, backend and image (Fabro's `speed` is refused: fabro has no fast mode)."
    ),
    spec!(
        "default_max_retries",
        ValueType::Count,
        GRAPH,
        "Retries for nodes without `max_retries` (default 0)."
    ),
    spec!(
        "default_fidelity",
        ValueType::Text,
        GRAPH,
        "Fidelity for nodes and edges that set none (default compact)."
    ),
    spec!(
        "allow_lints",
        ValueType::Text,
        GRAPH,
        "Lint warnings accepted for this workflow, e.g. failure_path (comma-separated rule ids)."
    ),
    spec!("default_max_output", ValueType::Count, GRAPH, "Default max_output of command stages, in bytes."),
    spec!("default_sandbox", ValueType::OneOf(SANDBOXES), GRAPH, "Default sandbox of stages that run programs: none, bwrap, podman or docker."),
    spec!("default_max_in_turn_tool_pairs", ValueType::Count, GRAPH, "Default max_in_turn_tool_pairs of agent stages."),
    spec!(
        "default_max_in_turn_context_tokens",
        ValueType::Count,
        GRAPH,
        "Default max_in_turn_context_tokens of agent stages."
    ),
    spec!("default_max_tool_result_chars", ValueType::Count, GRAPH, "Default max_tool_result_chars of agent stages."),
    spec!("default_max_replay_chars", ValueType::Count, GRAPH, "Default max_replay_chars of agent stages."),
    spec!("default_tool_result_aging", ValueType::Boolean, GRAPH, "Default tool_result_aging of agent stages."),
    spec!("default_runtime_context", ValueType::Boolean, GRAPH, "Default runtime_context of agent stages."),
    spec!("default_project_docs", ValueType::Boolean, GRAPH, "Default project_docs of agent stages."),
    spec!("default_read_before_write", ValueType::Boolean, GRAPH, "Default read_before_write of agent stages."),
    spec!("default_tools", ValueType::Text, GRAPH, "Default tools of agent stages."),
    spec!("default_skill_dirs", ValueType::Text, GRAPH, "Default skill_dirs of agent stages."),
    spec!("default_max_subagents", ValueType::Count, GRAPH, "Default max_subagents of agent stages."),
    spec!("default_max_subagent_depth", ValueType::Count, GRAPH, "Default max_subagent_depth of agent stages."),
    spec!("default_subagent_model", ValueType::OneOf(SUBAGENT_MODELS), GRAPH, "Default subagent_model of agent stages."),
    spec!("default_agentic_tools", ValueType::Boolean, GRAPH, "Default agentic_tools of agent stages."),
    spec!("default_web_tools", ValueType::Boolean, GRAPH, "Default web_tools of agent stages."),
    spec!("default_small_model", ValueType::Text, GRAPH, "Default small_model of agent stages."),
    spec!("default_fallback_models", ValueType::Text, GRAPH, "Default fallback_models of LLM stages."),
    spec!("default_memory", ValueType::Boolean, GRAPH, "Default memory of agent stages."),
    spec!("default_memory_dir", ValueType::Text, GRAPH, "Default memory_dir of agent stages."),
    spec!("default_memory_extract", ValueType::Boolean, GRAPH, "Default memory_extract of agent stages."),
    spec!("default_task_checkpoints", ValueType::Boolean, GRAPH, "Default task_checkpoints of agent stages."),
    spec!("default_small_tier_parent", ValueType::OneOf(SMALL_TIER_PARENT), GRAPH, "Default small_tier_parent of agent stages."),
    spec!("default_watchdog", ValueType::OneOf(WATCHDOG_MODES), GRAPH, "Default watchdog of agent stages."),
    spec!("default_turn_limit_outcome", ValueType::OneOf(TURN_LIMIT_OUTCOMES), GRAPH, "Default turn_limit_outcome of agent stages."),
    spec!("context_files", ValueType::Text, GRAPH, "Reference files every agent stage is told about (an index in its system prompt) and may read: comma-separated paths relative to the workflow file, PATH=NAME to name one; folders expand."),
    spec!("default_max_stage_tokens", ValueType::Count, GRAPH, "Default max_stage_tokens of LLM stages."),
    spec!("default_max_stage_cost", ValueType::Dollars, GRAPH, "Default max_stage_cost of LLM stages."),
    spec!("default_thread", ValueType::Text, GRAPH, "Thread id for full-fidelity stages that set none."),
    spec!("default_thread_text_only", ValueType::Boolean, GRAPH, "Default thread_text_only of LLM stages."),
    spec!("default_thread_max_turn_age", ValueType::Count, GRAPH, "Default thread_max_turn_age of LLM stages."),
    spec!("default_thread_max_tail_messages", ValueType::Count, GRAPH, "Default thread_max_tail_messages of LLM stages."),
    spec!("default_thread_exclude_nodes", ValueType::Text, GRAPH, "Default thread_exclude_nodes of LLM stages."),
    spec!("default_thread_handoff", ValueType::OneOf(THREAD_HANDOFFS), GRAPH, "Default thread_handoff of LLM stages."),
    spec!("default_compaction", ValueType::OneOf(COMPACTION_PRESETS), GRAPH, "Default compaction preset of LLM stages."),
    spec!("default_compaction_mode", ValueType::OneOf(COMPACTION_MODES), GRAPH, "Default compaction_mode of agent stages."),
    spec!("default_compaction_trigger_turns", ValueType::Count, GRAPH, "Default compaction_trigger_turns of agent stages."),
    spec!("default_compaction_keep_turns", ValueType::Count, GRAPH, "Default compaction_keep_turns of agent stages."),
    spec!("default_compaction_token_budget", ValueType::Count, GRAPH, "Default compaction_token_budget of agent stages."),
    spec!("default_compaction_threshold", ValueType::Float, GRAPH, "Default compaction_threshold of agent stages."),
    spec!("default_compaction_model", ValueType::Text, GRAPH, "Default compaction_model of agent stages."),
    spec!("default_compaction_prune_chars", ValueType::Count, GRAPH, "Default compaction_prune_chars of agent stages."),
    spec!("default_compaction_block_chars", ValueType::Count, GRAPH, "Default compaction_block_chars of agent stages."),
    spec!("default_compaction_anti_thrash_window", ValueType::Count, GRAPH, "Default compaction_anti_thrash_window of agent stages."),
    spec!("default_compaction_anti_thrash_min_savings", ValueType::Float, GRAPH, "Default compaction_anti_thrash_min_savings of agent stages."),
    spec!("default_context_budget_warn", ValueType::Count, GRAPH, "Default context_budget_warn of agent stages."),
    spec!("default_context_budget_cutover", ValueType::Count, GRAPH, "Default context_budget_cutover of agent stages."),
    spec!("stall_timeout", ValueType::Duration, GRAPH, "A stage that shows no sign of life (no event, no output, no growing answer) for this long is stopped and the run pauses (exit 3, kind stall) to be resumed; default 30m, 0 turns it off."),
    spec!("default_retry_on", ValueType::OneOf(RETRY_ON), GRAPH, "Default retry_on of nodes."),
    spec!("failure_signature_limit", ValueType::Count, GRAPH, "The same deterministic or structural failure (same stage, class and reason, numbers masked) this many times ends the run, even with successes between; default 3, 0 turns it off (Fabro's loop_restart_signature_limit)."),
    spec!(
        "max_node_visits",
        ValueType::Count,
        GRAPH,
        "How often any node may run in one run (default 1000)."
    ),
    spec!(
        "artifact_threshold",
        ValueType::Count,
        GRAPH,
        "Context values larger than this many bytes of JSON go to the artifact store (default 102400)."
    ),
    spec!(
        "max_tokens",
        ValueType::Count,
        GRAPH_NODE,
        "On the graph: pause before the next LLM stage once the run has used this many tokens (in + out). On an LLM stage (as Fabro writes it): the most output tokens each of its model calls asks for (never more than the window leaves)."
    ),
    spec!(
        "max_cost",
        ValueType::Dollars,
        GRAPH,
        "Pause before the next LLM stage once the run's estimated cost reaches this many US dollars."
    ),
    // Shared
    spec!(
        "label",
        ValueType::Text,
        ANY,
        "Display name; on edges also the routing key for preferred labels and human choices."
    ),
    spec!(
        "retry_target",
        ValueType::Text,
        GRAPH_NODE,
        "Node to jump to when this node (or, on the graph, a goal gate) fails for good."
    ),
    spec!(
        "fallback_retry_target",
        ValueType::Text,
        GRAPH_NODE,
        "Second choice when `retry_target` is unset or missing."
    ),
    spec!(
        "fidelity",
        ValueType::Text,
        NODE_EDGE,
        "How much run history the stage sees: full, truncate, compact, summary:low|medium|high."
    ),
    spec!("thread_id", ValueType::Text, NODE_EDGE, "Conversation thread to continue under full fidelity."),
    spec!("stack.child_dotfile", ValueType::Text, GRAPH_NODE, "Child workflow file run by a manager node."),
    spec!("stack.child_workdir", ValueType::Text, GRAPH_NODE, "Working directory of the child run."),
    spec!("tool_hooks.pre", ValueType::Text, GRAPH_NODE, "Command run before each agent tool call, the same as a blocking pre_tool_use hook (the call as JSON on stdin; exit 2 or another non-zero exit blocks it, printed JSON may allow, block or modify it)."),
    spec!("tool_hooks.post", ValueType::Text, GRAPH_NODE, "Command run after each agent tool call, the same as a post_tool_use and post_tool_use_failure hook (the call and its result as JSON on stdin; what it prints is a note the model reads with the result)."),
    spec!("mcp_servers", ValueType::Text, GRAPH_NODE, "The configured MCP servers whose tools agent stages get: `a,b`; `\"\"` for none (default: all)."),
    spec!("permissions", ValueType::OneOf(super::settings::PERMISSION_LEVELS), GRAPH_NODE, "What agent tools may do without asking: read-only (read and search), read-write (also write and edit files) or full (also shell, MCP and other tools; default)."),
    // Node
    spec!(
        "shape",
        ValueType::Text,
        NODE,
        "Graphviz shape; picks the handler unless `type` is set (default box)."
    ),
    spec!("type", ValueType::Text, NODE, "Explicit handler type; wins over shape."),
    spec!(
        "prompt",
        ValueType::Text,
        NODE,
        "Instruction for LLM stages; `$goal` expands, `@path` inlines a file."
    ),
    spec!("script", ValueType::Text, NODE, "Script of a command stage (alias `tool_command`), in its `language`."),
    spec!("language", ValueType::OneOf(LANGUAGES), NODE, "Language of a command stage's script, which names the program that runs it: shell (sh -c, the default; also sh), bash (bash -c), python (python3 -c) or node (node -e)."),
    spec!("max_retries", ValueType::Count, NODE, "Additional attempts after a fail or retry outcome."),
    spec!("retry_policy", ValueType::OneOf(RETRY_POLICIES), NODE, "Backoff preset between attempts."),
    spec!("retry_on", ValueType::OneOf(RETRY_ON), NODE, "Which failures max_retries retries: any (default) or transient (only failure_class=transient_infra: rate limits, timeouts, the network, 5xx)."),
    spec!("goal_gate", ValueType::Boolean, NODE, "Once this node has run, the run may only exit when its last visit succeeded (a gate never visited is not checked)."),
    spec!("class", ValueType::Text, NODE, "Classes for stylesheet `.class` selectors, separated by spaces or commas."),
    spec!("timeout", ValueType::Duration, NODE, "Longest a stage may run."),
    spec!("llm_model", ValueType::Text, NODE, "Model id, e.g. claude-opus-4-6 or gpt-5.2."),
    spec!("llm_provider", ValueType::Text, NODE, "Provider key; inferred from the model when unset."),
    spec!("reasoning_effort", ValueType::OneOf(REASONING_EFFORTS), NODE, "Reasoning depth: Anthropic thinking budget, OpenAI reasoning_effort (docs/providers.md)."),
    spec!(
        "auto_status",
        ValueType::Boolean,
        NODE,
        "A command stage that writes no status.json succeeds whatever its exit code."
    ),
    spec!(
        "allow_partial",
        ValueType::Boolean,
        NODE,
        "Exhausted retries end in partial_success instead of fail."
    ),
    spec!("max_visits", ValueType::Count, NODE, "How often this node may run in one run."),
    spec!("outcome", ValueType::OneOf(EXIT_OUTCOMES), NODE, "On an exit node: fail ends the run failed (exit 1) when it reaches this exit; success (the default) ends it succeeded."),
    spec!(
        "join_policy",
        ValueType::OneOf(JOIN_POLICIES),
        NODE,
        "When a parallel stage is done (default wait_all)."
    ),
    spec!("join_k", ValueType::Count, NODE, "Branches that must succeed for join_policy=k_of_n."),
    spec!(
        "join_quorum",
        ValueType::Float,
        NODE,
        "Fraction of branches that must succeed for join_policy=quorum."
    ),
    spec!(
        "error_policy",
        ValueType::OneOf(ERROR_POLICIES),
        NODE,
        "What a failed branch does to its siblings (default continue)."
    ),
    spec!(
        "max_parallel",
        ValueType::Count,
        NODE,
        "Branches of a parallel stage running at once (default 4)."
    ),
    spec!(
        "human.default_choice",
        ValueType::Text,
        NODE,
        "Choice a human gate takes when its timeout passes."
    ),
    spec!(
        "human.freeform",
        ValueType::Boolean,
        NODE,
        "A human gate also takes text that names no choice (kept in human.gate.text)."
    ),
    spec!("duration", ValueType::Duration, NODE, "How long a wait stage sleeps."),
    spec!(
        "stack.child_workflow",
        ValueType::Text,
        NODE,
        "Child workflow file of a manager node (alias of stack.child_dotfile)."
    ),
    spec!(
        "stack.child_dot_source",
        ValueType::Text,
        NODE,
        "The child workflow of a manager node written inline, as DOT text (instead of a file; a file named on the node wins). Its errors are reported with their line and column inside the text."
    ),
    spec!(
        "manager.poll_interval",
        ValueType::Duration,
        NODE,
        "How often a manager observes its child (default 45s)."
    ),
    spec!("manager.max_cycles", ValueType::Count, NODE, "Most supervision cycles of a manager."),
    spec!(
        "manager.stop_condition",
        ValueType::Text,
        NODE,
        "Condition on the child's context that stops the manager."
    ),
    spec!("manager.actions", ValueType::Text, NODE, "Comma-separated manager actions: observe, steer, wait."),
    spec!(
        "manager.steer_prompt",
        ValueType::Text,
        NODE,
        "Message the steer action sends to the child's next LLM stage; `$goal` is the parent's goal, `{{context.KEY}}` reads the child's context."
    ),
    spec!("import", ValueType::Text, NODE, "Workflow file whose graph replaces this node."),
    spec!("backend", ValueType::OneOf(BACKENDS), NODE, "LLM backend of the stage: api (the configured provider, the default) or cli (an installed coding agent, see cli_agent)."),
    spec!(
        "cli_agent",
        ValueType::Text,
        NODE,
        "Coding agent run by the cli backend: claude, codex, gemini or a command."
    ),
    spec!("max_turns", ValueType::Count, NODE, "Most tool-calling turns of an agent stage (default 50)."),
    spec!("turn_limit_outcome", ValueType::OneOf(TURN_LIMIT_OUTCOMES), NODE, "How an agent stage stopped by max_turns while still calling tools ends: fail (default, naming max_turns), partial_success or success."),
    spec!(
        "context_window",
        ValueType::Count,
        NODE,
        "Context window in tokens for compaction; overrides the known-model table."
    ),
    spec!(
        "max_output",
        ValueType::Count,
        NODE,
        "Bytes of stdout and stderr a command stage may write; past them it fails (default 1 GiB)."
    ),
    spec!(
        "sandbox",
        ValueType::OneOf(SANDBOXES),
        NODE,
        "Where the stage's programs run: none, bwrap (read-only system, no home, no network, no API keys), or podman or docker (a container of the run from `image`, the work directory mounted)."
    ),
    spec!(
        "image",
        ValueType::Text,
        GRAPH_NODE,
        "The container image of stages with sandbox=podman or docker, e.g. debian:12 (the node's, else the graph's)."
    ),
    spec!(
        "devcontainer",
        ValueType::Text,
        GRAPH_NODE,
        "The stage's container is the project's devcontainer (sandbox=podman or docker): true for .devcontainer/devcontainer.json, or the path of one, relative to the work directory."
    ),
    spec!(
        "container_cpus",
        ValueType::Text,
        GRAPH_NODE,
        "CPUs the stage's container may use, e.g. 2 or 0.5 (sandbox=podman or docker)."
    ),
    spec!(
        "container_memory",
        ValueType::Text,
        GRAPH_NODE,
        "Memory the stage's container may use, e.g. 512m or 2g (sandbox=podman or docker)."
    ),
    spec!(
        "container_pids",
        ValueType::Count,
        GRAPH_NODE,
        "Processes the stage's container may hold at once (sandbox=podman or docker)."
    ),
    spec!("sandbox_network", ValueType::Boolean, NODE, "The network is reachable inside the stage's sandbox."),
    spec!(
        "sandbox_paths",
        ValueType::Text,
        GRAPH_NODE,
        "Extra paths shown inside the sandbox: ro:/opt/sdk, rw:/var/cache/cargo."
    ),
    spec!(
        "sandbox_env",
        ValueType::Text,
        GRAPH_NODE,
        "Environment variables let into the sandbox, comma-separated (e.g. for a CLI agent's API key)."
    ),
    spec!(
        "keep_background",
        ValueType::Boolean,
        NODE,
        "Processes a command stage leaves in the background keep running after it (default false: stopped)."
    ),
    spec!(
        "max_in_turn_tool_pairs",
        ValueType::Count,
        NODE,
        "Agent calls send only the last N tool results in full; older ones become a notice."
    ),
    spec!(
        "max_in_turn_context_tokens",
        ValueType::Count,
        NODE,
        "Agent calls shorten the oldest tool results while the conversation is over N tokens."
    ),
    spec!(
        "max_tool_result_chars",
        ValueType::Count,
        NODE,
        "Tool results sent to the model are cut to N characters (per tool: tool_result_chars.<tool>); 0 means no cap."
    ),
    spec!(
        "max_replay_chars",
        ValueType::Count,
        NODE,
        "Assistant messages before the latest are cut to N characters (default 2000)."
    ),
    spec!(
        "tool_result_aging",
        ValueType::Boolean,
        NODE,
        "Older tool results keep fewer tokens: 2000, 1000, then 500 (default true)."
    ),
    spec!("watchdog", ValueType::OneOf(WATCHDOG_MODES), NODE, "The agent going round in circles (the same tool call 5 times in a row, or the same cycle of 2 or 3 calls with the same arguments 3 times in a row, within its last 10 calls): warn (event and a note to the model, default), off, or stop (the stage fails)."),
    spec!("max_stage_tokens", ValueType::Count, NODE, "The stage stops before its next model call once it has used this many tokens (in + out, small-model calls included); the run pauses (exit 3) and resumes only with a higher bound."),
    spec!("max_stage_cost", ValueType::Dollars, NODE, "Like max_stage_tokens, for the stage's estimated cost in US dollars."),
    spec!("small_tier_parent", ValueType::OneOf(SMALL_TIER_PARENT), NODE, "An agent stage on a small-tier model: warn (default), refuse (a validation error) or allow."),
    spec!("agentic_tools", ValueType::Boolean, NODE, "The agent gets agentic_read_file, agentic_grep and agentic_research: a sub-conversation on the small model reads and returns only a digest (default true)."),
    spec!("web_tools", ValueType::Boolean, NODE, "The agent gets web_fetch, agentic_fetch_url and (with a search provider configured) web_search, when its sandbox has a network (no sandbox, or sandbox_network=true) and it runs with permissions=full (default true)."),
    spec!("fallback_models", ValueType::Text, NODE, "Models to go on with, in order, when a call still fails with a retryable error (429, 5xx, timeout, connection) after its retries: `gpt-5.2, claude-sonnet-4-5` (each model's provider inferred); the conversation carries over."),
    spec!("allow_truncated", ValueType::Boolean, NODE, "A prompt stage (shape=tab) whose answer was cut off at the output limit (finish_reason length, stop_reason max_tokens) succeeds anyway; by default it fails (default false)."),
    spec!("small_model", ValueType::Text, NODE, "The model of the agentic tool wrappers (default --small-model, the config file's small_model, else the provider's cheap tier: claude-haiku-4-5, gpt-5-mini, gemini-2.5-flash)."),
    spec!("memory", ValueType::Boolean, NODE, "The agent recalls the project's memory (.fabro/memory/ at the root of the work directory's git repository, its main worktree) at its start and gets the remember(kind, name, text) tool."),
    spec!("memory_dir", ValueType::Text, NODE, "With memory=true: the memory store to use instead of the project's, relative to the work directory."),
    spec!("memory_extract", ValueType::Boolean, NODE, "With memory=true: at the end of a successful stage the model is asked for up to 5 entries worth keeping."),
    spec!("task_checkpoints", ValueType::Boolean, NODE, "The agent gets the mark_task_done(detail) tool: the finished task's turns are replaced by a six-section completion record (default true)."),
    spec!("runtime_context", ValueType::Boolean, NODE, "The system prompt starts with the OS, architecture, shell, work directory, date and time, model, git branch, status and latest commits, and the .gitignore (default true)."),
    spec!("max_subagents", ValueType::Count, NODE, "The most sub-agents (spawn_agent, send_input, wait, close_agent) an agent stage has open at once; 0 (the default) offers no sub-agent tools."),
    spec!("max_subagent_depth", ValueType::Count, NODE, "How many levels of sub-agents may spawn their own (default 1: a sub-agent spawns none)."),
    spec!("subagent_model", ValueType::OneOf(SUBAGENT_MODELS), NODE, "The model sub-agents run on unless spawn_agent names one: same (the stage's, default) or small (its small model)."),
    spec!("skill_dirs", ValueType::Text, NODE, "The directories whose skills (each a subdirectory with a SKILL.md) an agent stage gets, comma-separated, relative to the work directory (`~/` for the home directory); `\"\"` for none (default: ~/.fabro/skills, then the repository's .fabro/skills and skills)."),
    spec!("tools", ValueType::Text, NODE, "The built-in tools an agent stage is offered, e.g. `read_file, apply_patch, shell` (default: shaped for the model: apply_patch for OpenAI's, edit_file for the others, read_many_files too for Gemini; web_fetch and web_search for every model where the stage may use them, see web_tools)."),
    spec!("read_before_write", ValueType::Boolean, NODE, "Writing, editing or patching an existing file this stage has not read, or that changed on disk since it read it, is refused with a message to read it first; new files are always allowed (default true)."),
    spec!("project_docs", ValueType::Boolean, NODE, "The system prompt carries the project's AGENTS.md, CLAUDE.md, GEMINI.md and .codex/instructions.md from the repository root to the work directory, 32 KiB at most (default true)."),
    spec!("compaction", ValueType::OneOf(COMPACTION_PRESETS), NODE, "Compaction preset: aggressive, strong, standard, careful (compact once more than 7/12/17/27 messages are uncompacted, keep the latest turns within 5/10/15/25 messages) or none (never)."),
    spec!("compaction_mode", ValueType::OneOf(COMPACTION_MODES), NODE, "How compaction rebuilds old turns: llm (summary, default), window, intent, lossless or hybrid."),
    spec!("compaction_trigger_turns", ValueType::Count, NODE, "Compact once this many turns are uncompacted (must exceed compaction_keep_turns)."),
    spec!("compaction_keep_turns", ValueType::Count, NODE, "Turns a compaction keeps verbatim (default 6, or the preset's)."),
    spec!("compaction_token_budget", ValueType::Count, NODE, "compaction_mode=window drops the oldest turns until under N tokens (default 80% of the window)."),
    spec!("compaction_threshold", ValueType::Float, NODE, "Compact above this share of the context window (default by model tier: 0.85, 0.65, 0.35; else 0.80)."),
    spec!("compaction_model", ValueType::Text, NODE, "Model that writes compaction summaries (default the stage's)."),
    spec!("compaction_prune_chars", ValueType::Count, NODE, "Messages over N characters are cut before summarizing (default 8000)."),
    spec!("compaction_block_chars", ValueType::Count, NODE, "Most characters of an intent or lossless block, and of the file list in other blocks: older operations fold into totals (default 4000, at least 1000)."),
    spec!("compaction_anti_thrash_window", ValueType::Count, NODE, "Anti-thrash: how many recent compactions are judged (default 10; 0 turns the guard off)."),
    spec!("compaction_anti_thrash_min_savings", ValueType::Float, NODE, "Anti-thrash: compaction pauses while each judged one saved less than this share (default 0.10)."),
    spec!("context_budget_warn", ValueType::Count, NODE, "Warn once per compaction cycle when input tokens since the last compaction reach N."),
    spec!("context_budget_cutover", ValueType::Count, NODE, "Compact at once when input tokens since the last compaction reach N."),
    spec!("thread_text_only", ValueType::Boolean, NODE, "The replayed thread keeps only text: tool calls and results are left out."),
    spec!("thread_max_turn_age", ValueType::Count, NODE, "The replayed thread keeps only its last N assistant turns."),
    spec!("thread_max_tail_messages", ValueType::Count, NODE, "The replayed thread keeps at most its last N messages."),
    spec!("thread_exclude_nodes", ValueType::Text, NODE, "Comma-separated nodes whose messages the replayed thread leaves out."),
    spec!("thread_handoff", ValueType::OneOf(THREAD_HANDOFFS), NODE, "full (default) or summary: the previous node's turns become one task summary when the thread moves on."),
    // Edge
    spec!("condition", ValueType::Text, EDGE, "Guard expression; the edge is eligible only when it is true."),
    spec!("weight", ValueType::Integer, EDGE, "Priority among eligible edges; higher wins (default 0)."),
    spec!(
        "loop_restart",
        ValueType::Boolean,
        EDGE,
        "Taking this edge starts a fresh run directory from its target."
    ),
    spec!(
        "selection",
        ValueType::OneOf(&["deterministic", "random"]),
        NODE,
        "How a tie among the edges out of the stage is broken: deterministic (highest weight, then target id; the default) or random (a draw weighted by the edges' weights, a weight of 0 or less counting as 1, seeded by the run id, node and visit so a resume or a rerun of the run takes the same edge). Not with conditional edges."
    ),
    spec!(
        "freeform",
        ValueType::Boolean,
        EDGE,
        "On an edge out of a human gate: a free-text answer that names none of the gate's choices takes this edge (its text in human.gate.text); a gate whose only edge is freeform asks for text alone."
    ),
];

/// Other spellings accepted for an attribute, folded to the canonical name when the graph is built.
pub const ALIASES: &[(&str, &str)] = &[
    ("tool_command", "script"),
    ("default_max_retry", "default_max_retries"),
    ("model", "llm_model"),
    ("provider", "llm_provider"),
    ("loop_restart_signature_limit", "failure_signature_limit"),
];

/// Aliases that are another tool's dialect, with the tool: accepted with a `dialect_alias` warning.
/// forge also reads every dotted attribute spelled with `_` (`human_default_choice`).
pub const DIALECT_ALIASES: &[(&str, &str)] =
    &[("model", "Fabro"), ("provider", "Fabro"), ("loop_restart_signature_limit", "Fabro")];

/// The tool whose dialect spells an attribute `written` (fabro reading it as `canonical`), if
/// `written` is such a spelling.
pub fn dialect_of_alias(written: &str, canonical: &str) -> Option<&'static str> {
    if written == canonical {
        return None;
    }
    DIALECT_ALIASES
        .iter()
        .find(|(alias, _)| *alias == written)
        .map(|(_, tool)| *tool)
        .or_else(|| (canonical.contains('.') && canonical.replace('.', "_") == written).then_some("forge"))
}

/// Words of other dialects for a value of a fixed set of words, each with the word fabro reads
/// and what differs: forge's join policies.
pub const WORD_ALIASES: &[(&str, &str, &str)] = &[
    (
        "all_success",
        "wait_all",
        "forge's name; forge reports partial success when every branch fails, fabro fails the stage",
    ),
    ("any_success", "first_success", "forge's name"),
];

/// Attributes other engines define (Fabro, the Attractor implementations) that fabro does not
/// implement: name, whose it is, and what it means there. Setting one is a warning that says so
/// (`unsupported_attribute`), never silently nothing.
pub const UNSUPPORTED_ATTRIBUTES: &[(&str, &str, &str)] = &[(
    "project_memory",
    "Fabro",
    "puts the project's AGENTS.md and CLAUDE.md into prompt stages' system prompt",
)];

/// Graphviz display attributes: accepted anywhere, meaningless to fabro, never warned about.
pub const DISPLAY_ATTRIBUTES: &[&str] = &[
    "rankdir",
    "rank",
    "ranksep",
    "nodesep",
    "splines",
    "size",
    "ratio",
    "margin",
    "pad",
    "dpi",
    "bgcolor",
    "color",
    "fillcolor",
    "fontcolor",
    "fontname",
    "fontsize",
    "style",
    "penwidth",
    "width",
    "height",
    "fixedsize",
    "peripheries",
    "tooltip",
    "xlabel",
    "headlabel",
    "taillabel",
    "labelloc",
    "labeljust",
    "arrowhead",
    "arrowtail",
    "arrowsize",
    "dir",
    "constraint",
    "minlen",
    "group",
    "compound",
    "concentrate",
    "ordering",
    "newrank",
    "center",
    "orientation",
    "URL",
    "href",
    "target",
    "id",
    "comment",
    "layer",
    "sides",
    "skew",
    "distortion",
    "regular",
    "imagescale",
    "labelfontsize",
    "labelfontcolor",
    "decorate",
    "headport",
    "tailport",
    "lhead",
    "ltail",
    "samehead",
    "sametail",
    "charset",
    "labelURL",
    "labelhref",
    "edgeURL",
    "edgehref",
    "headURL",
    "headhref",
    "tailURL",
    "tailhref",
    "shapefile",
    "imagepath",
    "fontpath",
    "fontnames",
    "stylesheet",
];

/// Graphviz attributes holding a link, which its SVG output turns into a clickable `<a>`: drawn
/// only when they are [`web links`](is_web_link), since a workflow may come from anywhere and
/// `fabro serve` shows the SVG inside its pages.
pub const LINK_ATTRIBUTES: &[&str] = &[
    "URL",
    "href",
    "labelURL",
    "labelhref",
    "edgeURL",
    "edgehref",
    "headURL",
    "headhref",
    "tailURL",
    "tailhref",
];

/// Graphviz attributes that name files (or where to look for them) on the machine that draws the
/// graph: never passed to Graphviz, since reading a FIFO or a device would hang it and the drawing
/// could carry the file's contents.
pub const FILE_ATTRIBUTES: &[&str] =
    &["image", "shapefile", "imagepath", "fontpath", "fontnames", "stylesheet"];

/// Whether `name` is one of [`LINK_ATTRIBUTES`] (Graphviz spells them in any case).
pub fn is_link_attribute(name: &str) -> bool {
    LINK_ATTRIBUTES.iter().any(|link| link.eq_ignore_ascii_case(name))
}

/// Whether `name` is one of [`FILE_ATTRIBUTES`].
pub fn is_file_attribute(name: &str) -> bool {
    FILE_ATTRIBUTES.iter().any(|file| file.eq_ignore_ascii_case(name))
}

/// An absolute `http://` or `https://` link, the only kind a drawn graph may carry: no
/// `javascript:`, `data:` or relative link (exactly as written, without leading spaces, which
/// browsers would strip).
pub fn is_web_link(value: &str) -> bool {
    let lower = value.get(..8).unwrap_or(value).to_ascii_lowercase();
    lower.starts_with("http://") || lower.starts_with("https://")
}

static BY_NAME: LazyLock<rustc_hash::FxHashMap<&'static str, &'static AttributeSpec>> =
    LazyLock::new(|| ATTRIBUTES.iter().map(|spec| (spec.name, spec)).collect());

/// The spec of a known attribute (canonical name).
pub fn spec(name: &str) -> Option<&'static AttributeSpec> {
    BY_NAME.get(name).copied()
}

/// The canonical name of an attribute: aliases folded, everything else unchanged.
pub fn canonical_name(name: &str) -> &str {
    if let Some((_, canonical)) = ALIASES.iter().find(|(alias, _)| *alias == name) {
        return canonical;
    }
    // forge's spelling of a dotted attribute: `human_default_choice`.
    if name.contains('_') && spec(name).is_none() {
        if let Some(dotted) =
            ATTRIBUTES.iter().find(|s| s.name.contains('.') && s.name.replace('.', "_") == name)
        {
            return dotted.name;
        }
    }
    name
}

pub fn is_display_attribute(name: &str) -> bool {
    DISPLAY_ATTRIBUTES.contains(&name)
}

/// A typed attribute value.
#[derive(Debug, Clone, PartialEq)]
pub enum Value {
    Text(String),
    Integer(i64),
    Float(f64),
    Boolean(bool),
    Duration(Duration),
    /// The literal could not be read as the attribute's type; validation reports it.
    Invalid {
        raw: String,
        expected: ValueType,
    },
}

impl Value {
    /// Reads `raw` as `value_type`.
    pub fn typed(raw: &str, value_type: ValueType) -> Value {
        let text = raw.trim();
        let invalid = || Value::Invalid { raw: raw.to_string(), expected: value_type };
        match value_type {
            ValueType::Text => Value::Text(raw.to_string()),
            ValueType::Integer => whole_number(text).map_or_else(invalid, Value::Integer),
            ValueType::Count => match whole_number(text) {
                Some(n) if n >= 0 => Value::Integer(n),
                _ => invalid(),
            },
            ValueType::Float => match text.parse::<f64>() {
                Ok(x) if x.is_finite() => Value::Float(x),
                _ => invalid(),
            },
            ValueType::Dollars => match text.parse::<f64>() {
                Ok(x) if x.is_finite() && x >= 0.0 => Value::Float(x),
                _ => invalid(),
            },
            ValueType::Boolean => match text.to_ascii_lowercase().as_str() {
                "true" => Value::Boolean(true),
                "false" => Value::Boolean(false),
                _ => invalid(),
            },
            // Other dialects write bare seconds (`timeout=300`): read as such, and the
            // `dialect_value` lint rule suggests the unit.
            ValueType::Duration => parse_duration(text)
                .or_else(|| text.parse::<u64>().ok().map(Duration::from_secs))
                .map_or_else(invalid, Value::Duration),
            ValueType::OneOf(words) if words.contains(&text) => Value::Text(text.to_string()),
            // Another dialect's word for one of the words (forge's `all_success`): the
            // `dialect_value` lint rule suggests fabro's.
            ValueType::OneOf(words) => {
                match word_alias(text).filter(|(canonical, _)| words.contains(canonical)) {
                    Some((canonical, _)) => Value::Text(canonical.to_string()),
                    None => invalid(),
                }
            }
        }
    }

    pub fn as_text(&self) -> Option<&str> {
        match self {
            Value::Text(s) => Some(s),
            _ => None,
        }
    }
}

impl fmt::Display for Value {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Value::Text(s) => f.write_str(s),
            Value::Integer(n) => write!(f, "{n}"),
            Value::Float(x) => write!(f, "{x}"),
            Value::Boolean(b) => write!(f, "{b}"),
            Value::Duration(d) => f.write_str(&format_duration(*d)),
            Value::Invalid { raw, .. } => f.write_str(raw),
        }
    }
}

/// A whole number, also written as an integral float (`1.0`, as other dialects write weights; the
/// `dialect_value` lint rule suggests the integer).
fn whole_number(text: &str) -> Option<i64> {
    text.parse().ok().or_else(|| {
        let x = text.parse::<f64>().ok().filter(|x| x.is_finite() && x.fract() == 0.0 && x.abs() < 9.0e15)?;
        Some(x as i64)
    })
}

/// How another dialect wrote a value this dialect reads the same: the canonical spelling of
/// `raw` for `value_type`, when `raw` is not already canonical (`300` for a duration: `300s`;
/// `1.0` for a whole number: `1`).
pub fn canonical_spelling(raw: &str, value_type: ValueType) -> Option<String> {
    let text = raw.trim();
    match value_type {
        ValueType::Duration if parse_duration(text).is_none() => {
            text.parse::<u64>().ok().map(|n| format!("{n}s"))
        }
        ValueType::Integer | ValueType::Count if text.parse::<i64>().is_err() => {
            whole_number(text).map(|n| n.to_string())
        }
        ValueType::OneOf(words) => word_alias(text)
            .filter(|(canonical, _)| words.contains(canonical))
            .map(|(canonical, _)| canonical.to_string()),
        _ => None,
    }
}

/// The word fabro reads for another dialect's `word`, and what differs.
pub fn word_alias(word: &str) -> Option<(&'static str, &'static str)> {
    WORD_ALIASES.iter().find(|(alias, ..)| *alias == word).map(|(_, canonical, note)| (*canonical, *note))
}

/// Parses `250ms`, `900s`, `15m`, `2h`, `1d` and sums of them such as `1h30m`.
pub fn parse_duration(text: &str) -> Option<Duration> {
    let mut rest = text.trim();
    if rest.is_empty() {
        return None;
    }
    let mut total = Duration::ZERO;
    while !rest.is_empty() {
        let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
        if digits == 0 {
            return None;
        }
        let amount: u64 = rest[..digits].parse().ok()?;
        rest = &rest[digits..];
        let unit_len = rest.find(|c: char| c.is_ascii_digit()).unwrap_or(rest.len());
        let millis_per_unit: u64 = match &rest[..unit_len] {
            "ms" => 1,
            "s" => 1_000,
            "m" => 60_000,
            "h" => 3_600_000,
            "d" => 86_400_000,
            _ => return None,
        };
        rest = &rest[unit_len..];
        total = total.checked_add(Duration::from_millis(amount.checked_mul(millis_per_unit)?))?;
    }
    Some(total)
}

/// The shortest exact spelling of a duration in one unit (`90s`, `15m`, `250ms`).
pub fn format_duration(duration: Duration) -> String {
    let ms = duration.as_millis();
    for (unit, size) in [("d", 86_400_000), ("h", 3_600_000), ("m", 60_000), ("s", 1_000)] {
        if ms >= size && ms % size == 0 {
            return format!("{}{unit}", ms / size);
        }
    }
    format!("{ms}ms")
}

/// One attribute on a graph, node or edge.
#[derive(Debug, Clone, PartialEq)]
pub struct Attr {
    pub value: Value,
    /// The value's literal in the source (for a stylesheet-applied value, the stylesheet's).
    pub span: Span,
    pub key_span: Span,
    /// Set by a `node [..]`/`edge [..]` default block rather than on the node or edge itself.
    pub inherited: bool,
}

/// An attribute name: known names are the schema's static strings, so the thousands of attributes
/// in a large workflow do not each allocate their name.
pub type AttrName = std::borrow::Cow<'static, str>;

/// An ordered attribute map. Usually small (a handful of entries per node), where a vector with
/// linear lookup beats hashing; past [`INDEXED_FROM`] entries a hash index keeps setting and
/// looking up constant-time, so a node with thousands of attributes loads in linear time.
#[derive(Debug, Clone, Default)]
pub struct Attributes {
    entries: Vec<(AttrName, Attr)>,
    /// Positions in `entries` by name, once there are [`INDEXED_FROM`] entries.
    index: Option<rustc_hash::FxHashMap<AttrName, usize>>,
    /// One bit per name present (see [`name_bit`]): most lookups are of attributes a node does
    /// not have (reading its settings asks for every one), and a clear bit answers them without
    /// comparing names.
    names: u64,
}

/// The bit of `name` in [`Attributes::names`]: from its length and two of its bytes.
fn name_bit(name: &str) -> u64 {
    let bytes = name.as_bytes();
    let (middle, last) = (bytes.get(bytes.len() / 2), bytes.last());
    let mixed = bytes.len() * 7 ^ usize::from(*last.unwrap_or(&0)) ^ usize::from(*middle.unwrap_or(&0)) << 1;
    1 << (mixed % 64)
}

/// How many entries an attribute map holds before it keeps a hash index.
const INDEXED_FROM: usize = 32;

impl PartialEq for Attributes {
    fn eq(&self, other: &Self) -> bool {
        self.entries == other.entries
    }
}

impl Attributes {
    fn position(&self, key: &str) -> Option<usize> {
        if self.names & name_bit(key) == 0 {
            return None;
        }
        match &self.index {
            Some(index) => index.get(key).copied(),
            None => self.entries.iter().position(|(k, _)| k.as_ref() == key),
        }
    }

    /// Sets `key`, replacing an earlier value in place (keeping its position).
    pub fn set(&mut self, key: impl Into<AttrName>, attr: Attr) {
        let key = key.into();
        if let Some(at) = self.position(&key) {
            self.entries[at].1 = attr;
            return;
        }
        if let Some(index) = &mut self.index {
            index.insert(key.clone(), self.entries.len());
        }
        self.names |= name_bit(&key);
        self.entries.push((key, attr));
        if self.index.is_none() && self.entries.len() >= INDEXED_FROM {
            self.index =
                Some(self.entries.iter().enumerate().map(|(at, (key, _))| (key.clone(), at)).collect());
        }
    }

    /// A copy with every entry marked as inherited from a default block.
    pub fn as_inherited(&self) -> Attributes {
        let mut copy = self.clone();
        for (_, attr) in &mut copy.entries {
            attr.inherited = true;
        }
        copy
    }

    /// Overlays every entry of `other`.
    pub fn merge(&mut self, other: &Attributes) {
        for (key, attr) in &other.entries {
            self.set(key.clone(), attr.clone());
        }
    }

    pub fn get(&self, key: &str) -> Option<&Attr> {
        self.position(key).map(|at| &self.entries[at].1)
    }

    pub fn contains(&self, key: &str) -> bool {
        self.get(key).is_some()
    }

    pub fn iter(&self) -> impl Iterator<Item = (&str, &Attr)> {
        self.entries.iter().map(|(k, attr)| (k.as_ref(), attr))
    }

    pub fn iter_mut(&mut self) -> impl Iterator<Item = (&str, &mut Attr)> {
        self.entries.iter_mut().map(|(k, attr)| (&**k, attr))
    }

    pub fn len(&self) -> usize {
        self.entries.len()
    }

    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// The text of a text attribute; `None` when unset or not text.
    pub fn text(&self, key: &str) -> Option<&str> {
        self.get(key).and_then(|attr| attr.value.as_text())
    }

    /// Like [`Attributes::text`], but treats an empty or blank value as unset.
    pub fn non_empty_text(&self, key: &str) -> Option<&str> {
        self.text(key).filter(|text| !text.trim().is_empty())
    }

    pub fn integer(&self, key: &str) -> Option<i64> {
        match self.get(key)?.value {
            Value::Integer(n) => Some(n),
            _ => None,
        }
    }

    pub fn float(&self, key: &str) -> Option<f64> {
        match self.get(key)?.value {
            Value::Float(x) => Some(x),
            Value::Integer(n) => Some(n as f64),
            _ => None,
        }
    }

    pub fn boolean(&self, key: &str) -> Option<bool> {
        match self.get(key)?.value {
            Value::Boolean(b) => Some(b),
            _ => None,
        }
    }

    pub fn duration(&self, key: &str) -> Option<Duration> {
        match self.get(key)?.value {
            Value::Duration(d) => Some(d),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn large_attribute_maps_keep_order_and_replace_in_place() {
        let attr = |text: &str| Attr {
            value: Value::Text(text.into()),
            span: Span::default(),
            key_span: Span::default(),
            inherited: false,
        };
        let mut small = Attributes::default();
        let mut large = Attributes::default();
        for i in 0..100 {
            large.set(format!("k{i}"), attr("first"));
            if i < 3 {
                small.set(format!("k{i}"), attr("first"));
            }
        }
        large.set("k1", attr("second"));
        large.set("k70", attr("second"));
        assert_eq!(large.len(), 100);
        assert_eq!(large.text("k1"), Some("second"));
        assert_eq!(large.text("k70"), Some("second"));
        assert_eq!(large.text("k99"), Some("first"));
        assert_eq!(large.get("k100"), None);
        let order: Vec<&str> = large.iter().map(|(key, _)| key).take(3).collect();
        assert_eq!(order, ["k0", "k1", "k2"]);
        // Equality looks at the entries only, indexed or not.
        let mut copy = Attributes::default();
        for (key, value) in large.iter() {
            copy.set(key.to_string(), value.clone());
        }
        assert_eq!(copy, large);
        assert_ne!(small, large);
    }

    #[test]
    fn values_are_typed_by_their_attribute_not_their_spelling() {
        assert_eq!(Value::typed("3", ValueType::Count), Value::Integer(3));
        assert_eq!(Value::typed(" 3 ", ValueType::Count), Value::Integer(3));
        assert!(matches!(Value::typed("-1", ValueType::Count), Value::Invalid { .. }));
        assert_eq!(Value::typed("true", ValueType::Boolean), Value::Boolean(true));
        assert!(matches!(Value::typed("yes", ValueType::Boolean), Value::Invalid { .. }));
        assert_eq!(Value::typed("0.5", ValueType::Float), Value::Float(0.5));
        assert_eq!(Value::typed("2", ValueType::Dollars), Value::Float(2.0));
        assert!(matches!(Value::typed("-1", ValueType::Dollars), Value::Invalid { .. }));
        assert_eq!(Value::typed("high", ValueType::OneOf(REASONING_EFFORTS)), Value::Text("high".into()));
        assert!(matches!(Value::typed("max", ValueType::OneOf(REASONING_EFFORTS)), Value::Invalid { .. }));
    }

    #[test]
    fn durations_take_every_unit_and_sums() {
        assert_eq!(parse_duration("250ms"), Some(Duration::from_millis(250)));
        assert_eq!(parse_duration("900s"), Some(Duration::from_secs(900)));
        assert_eq!(parse_duration("15m"), Some(Duration::from_secs(900)));
        assert_eq!(parse_duration("2h"), Some(Duration::from_secs(7200)));
        assert_eq!(parse_duration("1d"), Some(Duration::from_secs(86_400)));
        assert_eq!(parse_duration("1h30m"), Some(Duration::from_secs(5400)));
        for bad in ["", "900", "s", "10x", "1.5h", "-1s", "99999999999999999999s"] {
            assert_eq!(parse_duration(bad), None, "{bad}");
        }
        assert_eq!(format_duration(Duration::from_secs(900)), "15m");
        assert_eq!(format_duration(Duration::from_millis(1500)), "1500ms");
    }

    #[test]
    fn every_name_set_is_found_and_no_other() {
        let mut attributes = Attributes::default();
        let names: Vec<&str> = ATTRIBUTES.iter().map(|spec| spec.name).chain(["", "x", "é"]).collect();
        for (at, name) in names.iter().enumerate() {
            assert!(attributes.get(name).is_none(), "{name} before it is set");
            let attr = Attr {
                value: Value::Text(at.to_string()),
                span: Span::default(),
                key_span: Span::default(),
                inherited: false,
            };
            attributes.set(name.to_string(), attr);
            for earlier in &names[..=at] {
                assert!(attributes.get(earlier).is_some(), "{earlier} after {name} was set");
            }
        }
    }

    #[test]
    fn every_attribute_is_listed_once() {
        let mut names: Vec<_> = ATTRIBUTES.iter().map(|spec| spec.name).collect();
        names.sort();
        names.dedup();
        assert_eq!(names.len(), ATTRIBUTES.len());
        assert!(names.iter().all(|name| !is_display_attribute(name)));
    }
}
