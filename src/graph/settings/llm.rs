//! What an LLM (agent or prompt) stage sets: its model and provider, its agent's turns, tools,
//! permissions, memory and watchdog, and its context management ([`super::ContextSettings`]).
//! A node's value wins over the graph's default where the graph has one.

use super::context::{ContextSettings, ContextSettingsError};
use super::permissions::Level as PermissionLevel;
use super::small_tier::SmallTierParent;
use super::stage::text;
use super::watchdog::WatchdogMode;
use crate::graph::Attributes;

/// The settings of an LLM stage.
#[derive(Debug, Clone, PartialEq)]
pub struct LlmSettings {
    /// `llm_model`.
    pub model: Option<String>,
    /// `llm_provider`.
    pub provider: Option<String>,
    /// `reasoning_effort`.
    pub reasoning_effort: Option<String>,
    /// `max_turns`: the most model calls of an agent stage.
    pub max_turns: Option<u32>,
    /// `context_window` (tokens).
    pub context_window: Option<u64>,
    /// Node `max_tokens`: the most output tokens each of the stage's model calls asks for.
    pub max_output_tokens: Option<u32>,
    /// `cli_agent`: the installed coding agent a `backend=cli` stage runs.
    pub cli_agent: Option<String>,
    /// `small_model`, else the graph's `default_small_model`.
    pub small_model: Option<String>,
    /// `fallback_models`, else the graph's `default_fallback_models`: the models tried next, in
    /// order, each once.
    pub fallback_models: Vec<String>,
    /// `mcp_servers` (node, else graph).
    pub mcp_servers: McpSelection,
    /// `tools`, else the graph's `default_tools`: the built-in tools an agent stage is offered
    /// (unset: those shaped for its model's family).
    pub tools: Option<Vec<String>>,
    /// `permissions` (node, else graph; `--permissions` and the config file apply when unset).
    pub permissions: Option<PermissionLevel>,
    /// `memory` (node, else the graph's `default_memory`).
    pub memory: bool,
    /// `memory_extract` (node, else the graph's `default_memory_extract`).
    pub memory_extract: bool,
    /// `memory_dir` (node, else the graph's `default_memory_dir`): the memory store, relative to
    /// the work directory, instead of the project's.
    pub memory_dir: Option<String>,
    /// `tool_hooks.pre` and `tool_hooks.post` (node, else graph).
    pub tool_hooks: ToolHooks,
    /// `watchdog`, else the graph's `default_watchdog`.
    pub watchdog: WatchdogMode,
    /// `small_tier_parent`, else the graph's `default_small_tier_parent` (the config file's
    /// setting applies when both are unset).
    pub small_tier_parent: Option<SmallTierParent>,
    /// `turn_limit_outcome`, else the graph's `default_turn_limit_outcome` (the config file's
    /// applies when both are unset, then `fail`).
    pub turn_limit_outcome: Option<TurnLimitOutcome>,
    /// `allow_truncated`: a prompt stage whose answer was cut off at the output limit succeeds
    /// anyway (by default it fails).
    pub allow_truncated: bool,
    /// Context management, or why it cannot be read.
    pub context: Result<ContextSettings, Vec<ContextSettingsError>>,
}

/// Which configured MCP servers an agent stage uses (`mcp_servers`).
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum McpSelection {
    /// Unset: every configured server.
    #[default]
    All,
    /// The servers named (none for `mcp_servers=""`).
    Only(Vec<String>),
}

impl McpSelection {
    /// The selection an `mcp_servers` value makes (`None` when unset).
    pub fn of(value: Option<&str>) -> McpSelection {
        match value {
            None => McpSelection::All,
            Some(list) => McpSelection::Only(
                list.split(',').map(str::trim).filter(|name| !name.is_empty()).map(str::to_string).collect(),
            ),
        }
    }
}

/// How an agent stage stopped by `max_turns` while still calling tools ends.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TurnLimitOutcome {
    /// The stage fails, naming `max_turns` (the default): unfinished work never passes silently.
    #[default]
    Fail,
    /// The stage ends `partial_success`.
    PartialSuccess,
    /// The stage succeeds with what the agent did so far.
    Success,
}

impl TurnLimitOutcome {
    pub const NAMES: &'static [&'static str] = &["fail", "partial_success", "success"];

    pub fn from_name(name: &str) -> Option<TurnLimitOutcome> {
        match name.trim() {
            "fail" => Some(TurnLimitOutcome::Fail),
            "partial_success" => Some(TurnLimitOutcome::PartialSuccess),
            "success" => Some(TurnLimitOutcome::Success),
            _ => None,
        }
    }
}

/// The commands a stage runs around each tool call (`tool_hooks.pre`, `tool_hooks.post`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ToolHooks {
    pub pre: Option<String>,
    pub post: Option<String>,
}

impl LlmSettings {
    pub(super) fn parse(attributes: &Attributes, graph: &Attributes) -> LlmSettings {
        let own_or_graph = |key: &str| text(attributes, key).or_else(|| text(graph, key));
        // The graph's default for a node attribute is `default_<name>`: found without building
        // the name for every stage of a large workflow.
        let default_name = |key: &str| {
            graph.iter().map(|(name, _)| name).find(|name| name.strip_prefix("default_") == Some(key))
        };
        let own_or_default = |key: &str| {
            text(attributes, key).or_else(|| default_name(key).and_then(|name| text(graph, name)))
        };
        let flag = |key: &str| {
            attributes
                .boolean(key)
                .or_else(|| default_name(key).and_then(|name| graph.boolean(name)))
                .unwrap_or(false)
        };
        LlmSettings {
            model: text(attributes, "llm_model"),
            provider: text(attributes, "llm_provider"),
            reasoning_effort: text(attributes, "reasoning_effort"),
            max_turns: attributes.integer("max_turns").and_then(|n| u32::try_from(n).ok()),
            context_window: attributes.integer("context_window").and_then(|n| u64::try_from(n).ok()),
            max_output_tokens: attributes
                .integer("max_tokens")
                .and_then(|n| u32::try_from(n).ok())
                .filter(|n| *n > 0),
            cli_agent: text(attributes, "cli_agent"),
            small_model: own_or_default("small_model"),
            fallback_models: parse_models(own_or_default("fallback_models").as_deref().unwrap_or_default()),
            mcp_servers: McpSelection::of(
                attributes.text("mcp_servers").or_else(|| graph.text("mcp_servers")),
            ),
            tools: own_or_default("tools").map(|list| {
                list.split(',').map(str::trim).filter(|tool| !tool.is_empty()).map(str::to_string).collect()
            }),
            permissions: own_or_graph("permissions").as_deref().and_then(PermissionLevel::parse),
            memory: flag("memory"),
            memory_extract: flag("memory_extract"),
            memory_dir: own_or_default("memory_dir"),
            tool_hooks: ToolHooks {
                pre: own_or_graph("tool_hooks.pre"),
                post: own_or_graph("tool_hooks.post"),
            },
            watchdog: own_or_default("watchdog")
                .and_then(|name| WatchdogMode::from_name(name.trim()))
                .unwrap_or_default(),
            small_tier_parent: own_or_default("small_tier_parent")
                .as_deref()
                .and_then(SmallTierParent::from_name),
            turn_limit_outcome: own_or_default("turn_limit_outcome")
                .as_deref()
                .and_then(TurnLimitOutcome::from_name),
            allow_truncated: attributes.boolean("allow_truncated").unwrap_or(false),
            context: ContextSettings::parse(attributes, graph),
        }
    }
}

/// The models of `fallback_models="a, b"`, in order, each once.
pub fn parse_models(text: &str) -> Vec<String> {
    let mut models: Vec<String> = Vec::new();
    for model in text.split(',').map(str::trim).filter(|model| !model.is_empty()) {
        if !models.iter().any(|known| known == model) {
            models.push(model.to_string());
        }
    }
    models
}

#[cfg(test)]
mod tests {
    use super::super::tests::built;
    use super::*;

    fn llm(dot: &str, id: &str) -> LlmSettings {
        let workflow = built(dot);
        workflow.node(id).unwrap().settings.llm().cloned().expect("an LLM stage")
    }

    #[test]
    fn a_node_wins_over_the_graph_default() {
        let dot = r#"digraph G { default_small_model=s; default_fallback_models="x, y"; permissions="read-only";
            default_watchdog=stop; default_memory=true; mcp_servers="fs"; "tool_hooks.pre"="check";
            a [llm_model=m, small_model=t, fallback_models="z", permissions=full, watchdog=off, memory=false,
               mcp_servers="", max_turns=9, context_window=4000, allow_truncated=true];
            b }"#;
        let a = llm(dot, "a");
        assert_eq!((a.model.as_deref(), a.small_model.as_deref()), (Some("m"), Some("t")));
        assert_eq!((a.fallback_models, a.permissions), (vec!["z".to_string()], Some(PermissionLevel::Full)));
        assert_eq!(
            (a.watchdog, a.memory, a.mcp_servers),
            (WatchdogMode::Off, false, McpSelection::Only(vec![]))
        );
        assert_eq!((a.max_turns, a.context_window, a.allow_truncated), (Some(9), Some(4000), true));
        let b = llm(dot, "b");
        assert!(!b.allow_truncated, "a node's own choice only");
        assert_eq!((b.model, b.small_model.as_deref()), (None, Some("s")));
        assert_eq!(
            (b.fallback_models, b.permissions),
            (vec!["x".to_string(), "y".to_string()], Some(PermissionLevel::ReadOnly))
        );
        assert_eq!(
            (b.watchdog, b.memory, b.mcp_servers),
            (WatchdogMode::Stop, true, McpSelection::Only(vec!["fs".into()]))
        );
        assert_eq!(b.tool_hooks, ToolHooks { pre: Some("check".into()), post: None });
    }

    #[test]
    fn fallback_models_are_listed_once_in_order() {
        assert_eq!(parse_models(" gpt-5.2, claude-sonnet-4-5 ,,gpt-5.2"), ["gpt-5.2", "claude-sonnet-4-5"]);
        assert!(parse_models(" , ").is_empty());
        assert_eq!(McpSelection::of(None), McpSelection::All);
    }
}
