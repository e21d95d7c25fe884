//! How an LLM stage manages what it sends the model: the context layers of an agent stage, its
//! compaction, its context budget and the filters on a replayed conversation thread.
//!
//! Every setting is a node attribute; the graph's `default_<name>` sets a run-wide default, and
//! the `[context]` section of the config file (same names) the user's default. A field left
//! `None` is unset at that level; [`ContextSettings::or`] fills it from the level below, and the
//! accessors give the built-in default of what is still unset.

use std::collections::BTreeMap;

use super::{noted, read, InvalidAttribute};
use crate::graph::attribute::{Attributes, Value};
use crate::source::Span;

/// Assistant messages in replayed history are cut to this many characters by default.
pub const DEFAULT_MAX_REPLAY_CHARS: usize = 2000;
/// The attribute prefix of per-tool result caps: `tool_result_chars.grep=20000`.
pub const TOOL_RESULT_CHARS_PREFIX: &str = "tool_result_chars.";
/// Turns kept verbatim by a compaction without a preset or `compaction_keep_turns`.
pub const DEFAULT_KEEP_TURNS: usize = 6;

/// A count of a turn-count compaction: in turns (an assistant message and the results of its tool
/// calls: `compaction_trigger_turns`, `compaction_keep_turns`) or in messages (the presets).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CompactionCount {
    Turns(usize),
    Messages(usize),
}

impl CompactionCount {
    /// In messages, a turn counting two (its assistant message and its tool results).
    pub fn messages(self) -> usize {
        match self {
            CompactionCount::Turns(turns) => turns * 2,
            CompactionCount::Messages(messages) => messages,
        }
    }
}

/// Why a turn-count trigger that does not exceed what a compaction keeps is refused.
fn trigger_not_above_keep(trigger: CompactionCount, keep: CompactionCount) -> String {
    let why = "a compaction must leave fewer turns than made it start";
    match (trigger, keep) {
        (CompactionCount::Turns(trigger), CompactionCount::Turns(keep)) => {
            format!("compaction_trigger_turns ({trigger}) must be more than compaction_keep_turns ({keep}): {why}")
        }
        _ => format!(
            "the compaction trigger ({trigger}: compaction_trigger_turns, or the preset's) must be more than \
             what a compaction keeps ({keep}: compaction_keep_turns, or the preset's): {why}"
        ),
    }
}

impl std::fmt::Display for CompactionCount {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            CompactionCount::Turns(n) => write!(f, "{n} turns"),
            CompactionCount::Messages(n) => write!(f, "{n} messages"),
        }
    }
}
/// Share of the context window above which a stage compacts, for models of no known tier.
pub const DEFAULT_THRESHOLD: f64 = 0.80;
/// Messages over this many characters are cut before they go to the summarizer.
pub const DEFAULT_PRUNE_CHARS: usize = 8000;
/// Most characters of a block a deterministic compaction writes (and of the file list in the
/// others), by default...
pub const DEFAULT_BLOCK_CHARS: usize = 4000;
/// ...and at the least: below it the block's fixed parts leave no room for the stage's work.
pub const MIN_BLOCK_CHARS: usize = 1000;
/// The anti-thrash guard looks at this many of the latest compactions...
pub const DEFAULT_ANTI_THRASH_WINDOW: usize = 10;
/// ...and holds compaction back while each of them saved less than this share.
pub const DEFAULT_ANTI_THRASH_MIN_SAVINGS: f64 = 0.10;

/// How a compaction rebuilds the older part of a conversation.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompactionMode {
    /// A summary written by a model (the default).
    #[default]
    Llm,
    /// The oldest turns are dropped until the estimate is under the token budget; no model call.
    Window,
    /// One line per tool call of the stage's own log; no model call.
    Intent,
    /// The run's durable records: position, goal gates, stages, commands, files, context keys.
    Lossless,
    /// The lossless block, then a model's summary (the lossless block alone if that fails).
    Hybrid,
}

impl CompactionMode {
    pub const NAMES: &'static [&'static str] = &["llm", "window", "intent", "lossless", "hybrid"];

    pub fn from_name(name: &str) -> Option<CompactionMode> {
        Some(match name {
            "llm" => CompactionMode::Llm,
            "window" => CompactionMode::Window,
            "intent" => CompactionMode::Intent,
            "lossless" => CompactionMode::Lossless,
            "hybrid" => CompactionMode::Hybrid,
            _ => return None,
        })
    }

    pub fn as_str(self) -> &'static str {
        Self::NAMES[self as usize]
    }
}

/// How often a stage compacts, as a named pair of turn counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CompactionPreset {
    Aggressive,
    Strong,
    Standard,
    Careful,
    /// Never compacts.
    None,
}

impl CompactionPreset {
    pub const NAMES: &'static [&'static str] = &["aggressive", "strong", "standard", "careful", "none"];

    pub fn from_name(name: &str) -> Option<CompactionPreset> {
        Some(match name {
            "aggressive" => CompactionPreset::Aggressive,
            "strong" => CompactionPreset::Strong,
            "standard" => CompactionPreset::Standard,
            "careful" => CompactionPreset::Careful,
            "none" => CompactionPreset::None,
            _ => return None,
        })
    }

    /// (compact once more than this many messages are uncompacted, keep this many most recent
    /// messages verbatim), counted in messages as the compaction presets are defined; none for
    /// `none`.
    pub fn messages(self) -> Option<(usize, usize)> {
        match self {
            CompactionPreset::Aggressive => Some((7, 5)),
            CompactionPreset::Strong => Some((12, 10)),
            CompactionPreset::Standard => Some((17, 15)),
            CompactionPreset::Careful => Some((27, 25)),
            CompactionPreset::None => None,
        }
    }
}

/// What a conversation thread carries when it moves to another node.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ThreadHandoff {
    /// Every message (the default).
    #[default]
    Full,
    /// The previous node's turns become one task summary.
    Summary,
}

impl ThreadHandoff {
    pub const NAMES: &'static [&'static str] = &["full", "summary"];

    pub fn from_name(name: &str) -> Option<ThreadHandoff> {
        match name {
            "full" => Some(ThreadHandoff::Full),
            "summary" => Some(ThreadHandoff::Summary),
            _ => None,
        }
    }
}

/// The model of an agent stage's sub-agents (`subagent_model`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SubagentModel {
    /// The stage's own model (the default).
    #[default]
    Same,
    /// The stage's small model (`small_model`, else the provider's cheap tier).
    Small,
}

impl SubagentModel {
    pub const NAMES: &'static [&'static str] = &["same", "small"];

    pub fn from_name(name: &str) -> Option<SubagentModel> {
        match name {
            "same" => Some(SubagentModel::Same),
            "small" => Some(SubagentModel::Small),
            _ => None,
        }
    }
}

/// A model's size class, judged by its name; it sets the share of the window a stage may fill
/// before it compacts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ModelTier {
    Frontier,
    Mid,
    Small,
}

impl ModelTier {
    /// The tier of a model by family: small (haiku, flash, mini, nano), mid (sonnet, gpt-4o,
    /// gpt-4.1), frontier (opus, gpt-5, o3, gemini pro); none for models fabro does not know.
    pub fn of(model: &str) -> Option<ModelTier> {
        let model = model.to_ascii_lowercase();
        let name = model.rsplit('/').next().unwrap_or(&model);
        let words: Vec<&str> = name.split(['-', '.', ':', '_', '@']).collect();
        let word = |options: &[&str]| words.iter().any(|w| options.contains(w));
        let contains = |parts: &[&str]| parts.iter().any(|part| name.contains(part));
        if word(&["haiku", "flash", "mini", "nano", "lite", "small"]) {
            Some(ModelTier::Small)
        } else if contains(&["sonnet", "gpt-4o", "gpt-4.1", "gpt-4-"]) {
            Some(ModelTier::Mid)
        } else if word(&["opus", "pro", "o1", "o3"]) || name.starts_with("gpt-5") {
            Some(ModelTier::Frontier)
        } else {
            None
        }
    }

    /// The built-in compaction threshold of the tier (share of the context window).
    pub fn default_threshold(self) -> f64 {
        match self {
            ModelTier::Frontier => 0.85,
            ModelTier::Mid => 0.65,
            ModelTier::Small => 0.35,
        }
    }
}

/// The config file's `[context.compaction_thresholds]`: per-tier shares of the window, and the
/// share for models of no known tier.
#[derive(Debug, Clone, Copy, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct TierThresholds {
    pub frontier: Option<f64>,
    pub mid: Option<f64>,
    pub small: Option<f64>,
    pub other: Option<f64>,
}

/// An LLM stage's context settings at one level (node with graph defaults, or the config file).
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ContextSettings {
    // Layers of every call.
    pub max_in_turn_tool_pairs: Option<usize>,
    pub max_in_turn_context_tokens: Option<u64>,
    pub max_tool_result_chars: Option<usize>,
    /// Per-tool caps, overriding `max_tool_result_chars`.
    #[serde(default)]
    pub tool_result_chars: BTreeMap<String, usize>,
    pub max_replay_chars: Option<usize>,
    pub tool_result_aging: Option<bool>,
    /// The runtime block at the top of the system prompt (on by default).
    pub runtime_context: Option<bool>,
    /// The project's instruction files (AGENTS.md, CLAUDE.md, ...) in the system prompt (on by
    /// default).
    pub project_docs: Option<bool>,
    /// Writing an existing file the stage has not read (as it is now) is refused (on by default).
    pub read_before_write: Option<bool>,
    /// The directories skills are found in, instead of the user's and the project's.
    pub skill_dirs: Option<Vec<String>>,
    /// The most sub-agents an agent stage has open at once (0, the default: no sub-agent tools).
    pub max_subagents: Option<usize>,
    /// How many levels of sub-agents may spawn their own (default 1: sub-agents spawn none).
    pub max_subagent_depth: Option<usize>,
    /// Which model sub-agents run on by default.
    pub subagent_model: Option<SubagentModel>,
    /// The `mark_task_done` tool and the task checkpoints it writes (on by default).
    pub task_checkpoints: Option<bool>,
    /// The agentic tool wrappers (on by default).
    pub agentic_tools: Option<bool>,
    /// web_fetch, web_search and agentic_fetch_url, where the stage may reach the web (on by
    /// default; see [`crate::agent::web`]).
    pub web_tools: Option<bool>,
    // Compaction.
    pub compaction: Option<CompactionPreset>,
    pub compaction_mode: Option<CompactionMode>,
    pub compaction_trigger_turns: Option<usize>,
    pub compaction_keep_turns: Option<usize>,
    /// `window` mode drops turns until the conversation is under this many tokens.
    pub compaction_token_budget: Option<u64>,
    /// Share of the context window above which the stage compacts (wins over the tier's).
    pub compaction_threshold: Option<f64>,
    #[serde(default)]
    pub compaction_thresholds: TierThresholds,
    pub compaction_model: Option<String>,
    pub compaction_prune_chars: Option<usize>,
    /// The size ceiling of intent and lossless blocks: older operations fold into totals.
    pub compaction_block_chars: Option<usize>,
    pub compaction_anti_thrash_window: Option<usize>,
    pub compaction_anti_thrash_min_savings: Option<f64>,
    // Context budget.
    pub context_budget_warn: Option<u64>,
    pub context_budget_cutover: Option<u64>,
    // Thread filters.
    pub thread_text_only: Option<bool>,
    pub thread_max_turn_age: Option<usize>,
    pub thread_max_tail_messages: Option<usize>,
    pub thread_exclude_nodes: Option<Vec<String>>,
    pub thread_handoff: Option<ThreadHandoff>,
}

/// Why a stage's context settings cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ContextSettingsError {
    #[error(transparent)]
    Attribute(#[from] InvalidAttribute),
    /// At the trigger (or preset) value.
    #[error("{}", trigger_not_above_keep(*trigger, *keep))]
    TriggerNotAboveKeep { trigger: CompactionCount, keep: CompactionCount, span: Span },
    /// At the `context_budget_cutover` value.
    #[error("context_budget_cutover compacts, but compaction=none turns compaction off")]
    CutoverWithoutCompaction { span: Span },
    /// At the value.
    #[error("`{key}` is {value}, expected a share above 0 and at most 1")]
    NotAShare { key: &'static str, value: f64, span: Span },
    /// At the value.
    #[error(
        "compaction_block_chars is {value}, below the {MIN_BLOCK_CHARS} characters a block needs for its fixed parts"
    )]
    BlockTooSmall { value: usize, span: Span },
}

impl ContextSettingsError {
    pub fn span(&self) -> Span {
        match self {
            ContextSettingsError::Attribute(invalid) => invalid.span,
            ContextSettingsError::TriggerNotAboveKeep { span, .. }
            | ContextSettingsError::CutoverWithoutCompaction { span }
            | ContextSettingsError::NotAShare { span, .. }
            | ContextSettingsError::BlockTooSmall { span, .. } => *span,
        }
    }

    /// How to fix it.
    pub fn fix(&self) -> &'static str {
        match self {
            ContextSettingsError::Attribute(_) => "give the attribute a value of its type",
            ContextSettingsError::TriggerNotAboveKeep { .. } => {
                "raise compaction_trigger_turns above compaction_keep_turns (or lower the keep count)"
            }
            ContextSettingsError::CutoverWithoutCompaction { .. } => {
                "remove context_budget_cutover, or choose a compaction preset other than none"
            }
            ContextSettingsError::NotAShare { .. } => "use a number such as 0.5",
            ContextSettingsError::BlockTooSmall { .. } => "use at least 1000 (the default is 4000)",
        }
    }
}

/// Fills each unset field of `$high` from `$low`.
macro_rules! fill {
    ($high:ident, $low:ident; $($field:ident),* $(,)?) => {
        $( if $high.$field.is_none() { $high.$field = $low.$field.clone(); } )*
    };
}

impl ContextSettings {
    /// The settings `node` writes, each from the node, else the graph's `default_<name>`; the
    /// per-tool caps from `tool_result_chars.<tool>` of the graph, then of the node. Errors are
    /// values of the wrong type and settings that contradict each other.
    pub fn parse(
        node: &Attributes,
        graph: &Attributes,
    ) -> Result<ContextSettings, Vec<ContextSettingsError>> {
        let mut errors: Vec<ContextSettingsError> = Vec::new();
        let mut spans = BTreeMap::new();
        let mut values = BTreeMap::new();
        for (name, default) in NAMES {
            let (attributes, key) = if node.get(name).is_some() { (node, *name) } else { (graph, *default) };
            let Some(span) = attributes.get(key).map(|attr| attr.span) else { continue };
            let valid = |value: &Value| (!matches!(value, Value::Invalid { .. })).then(|| value.clone());
            if let Some(value) = noted(read(attributes, key, valid), &mut errors) {
                spans.insert(*name, span);
                values.insert(*name, value);
            }
        }
        let count = |name: &str| match values.get(name) {
            Some(Value::Integer(n)) => usize::try_from(*n).ok(),
            _ => None,
        };
        let share = |name: &str| match values.get(name) {
            Some(Value::Float(x)) => Some(*x),
            Some(Value::Integer(n)) => Some(*n as f64),
            _ => None,
        };
        let flag = |name: &str| match values.get(name) {
            Some(Value::Boolean(b)) => Some(*b),
            _ => None,
        };
        let word = |name: &str| values.get(name).and_then(Value::as_text).map(str::trim);
        let mut tool_result_chars = BTreeMap::new();
        for attributes in [graph, node] {
            for (key, attr) in attributes.iter() {
                let Some(tool) = key.strip_prefix(TOOL_RESULT_CHARS_PREFIX) else { continue };
                match attr.value.to_string().trim().parse::<usize>() {
                    Ok(chars) => {
                        tool_result_chars.insert(tool.to_string(), chars);
                    }
                    Err(_) => errors.push(ContextSettingsError::Attribute(InvalidAttribute {
                        key: "tool_result_chars.<tool>",
                        raw: attr.value.to_string(),
                        expected: crate::graph::attribute::ValueType::Count,
                        span: attr.span,
                    })),
                }
            }
        }
        let settings = ContextSettings {
            max_in_turn_tool_pairs: count("max_in_turn_tool_pairs"),
            max_in_turn_context_tokens: count("max_in_turn_context_tokens").map(|n| n as u64),
            max_tool_result_chars: count("max_tool_result_chars"),
            tool_result_chars,
            max_replay_chars: count("max_replay_chars"),
            tool_result_aging: flag("tool_result_aging"),
            runtime_context: flag("runtime_context"),
            project_docs: flag("project_docs"),
            read_before_write: flag("read_before_write"),
            max_subagents: count("max_subagents"),
            max_subagent_depth: count("max_subagent_depth"),
            subagent_model: word("subagent_model").and_then(SubagentModel::from_name),
            skill_dirs: values.get("skill_dirs").and_then(Value::as_text).map(|list| {
                list.split(',').map(str::trim).filter(|dir| !dir.is_empty()).map(str::to_string).collect()
            }),
            task_checkpoints: flag("task_checkpoints"),
            agentic_tools: flag("agentic_tools"),
            web_tools: flag("web_tools"),
            compaction: word("compaction").and_then(CompactionPreset::from_name),
            compaction_mode: word("compaction_mode").and_then(CompactionMode::from_name),
            compaction_trigger_turns: count("compaction_trigger_turns"),
            compaction_keep_turns: count("compaction_keep_turns"),
            compaction_token_budget: count("compaction_token_budget").map(|n| n as u64),
            compaction_threshold: share("compaction_threshold"),
            compaction_thresholds: TierThresholds::default(),
            compaction_model: word("compaction_model").filter(|m| !m.is_empty()).map(str::to_string),
            compaction_prune_chars: count("compaction_prune_chars"),
            compaction_block_chars: count("compaction_block_chars"),
            compaction_anti_thrash_window: count("compaction_anti_thrash_window"),
            compaction_anti_thrash_min_savings: share("compaction_anti_thrash_min_savings"),
            context_budget_warn: count("context_budget_warn").map(|n| n as u64),
            context_budget_cutover: count("context_budget_cutover").map(|n| n as u64),
            thread_text_only: flag("thread_text_only"),
            thread_max_turn_age: count("thread_max_turn_age"),
            thread_max_tail_messages: count("thread_max_tail_messages"),
            thread_exclude_nodes: word("thread_exclude_nodes").map(|list| {
                list.split(',').map(str::trim).filter(|id| !id.is_empty()).map(str::to_string).collect()
            }),
            thread_handoff: word("thread_handoff").and_then(ThreadHandoff::from_name),
        };
        let span = |name: &str| spans.get(name).copied().unwrap_or_default();
        errors.extend(settings.conflicts(|name| span(name)));
        if errors.is_empty() {
            Ok(settings)
        } else {
            Err(errors)
        }
    }

    /// These settings, with each unset field taken from `lower` (a lower level).
    pub fn or(mut self, lower: &ContextSettings) -> ContextSettings {
        fill!(self, lower;
            max_in_turn_tool_pairs, max_in_turn_context_tokens, max_tool_result_chars, max_replay_chars,
            tool_result_aging, runtime_context, project_docs, read_before_write, skill_dirs, max_subagents, max_subagent_depth, subagent_model, task_checkpoints, agentic_tools, web_tools, compaction, compaction_mode, compaction_trigger_turns, compaction_keep_turns,
            compaction_token_budget, compaction_threshold, compaction_model, compaction_prune_chars,
            compaction_block_chars, compaction_anti_thrash_window, compaction_anti_thrash_min_savings, context_budget_warn,
            context_budget_cutover, thread_text_only, thread_max_turn_age, thread_max_tail_messages,
            thread_exclude_nodes, thread_handoff,
        );
        for (tool, chars) in &lower.tool_result_chars {
            self.tool_result_chars.entry(tool.clone()).or_insert(*chars);
        }
        let (mine, theirs) = (&mut self.compaction_thresholds, &lower.compaction_thresholds);
        fill!(mine, theirs; frontier, mid, small, other);
        self
    }

    /// Settings that contradict each other (`span` gives the position of a setting by name).
    pub fn conflicts(&self, span: impl Fn(&str) -> Span) -> Vec<ContextSettingsError> {
        let mut errors = Vec::new();
        if let Some((trigger, keep)) = self.compaction_counts() {
            if trigger.messages() <= keep.messages() {
                let at = if self.compaction_trigger_turns.is_some() {
                    "compaction_trigger_turns"
                } else {
                    "compaction"
                };
                errors.push(ContextSettingsError::TriggerNotAboveKeep { trigger, keep, span: span(at) });
            }
        }
        if self.context_budget_cutover.is_some() && self.compaction == Some(CompactionPreset::None) {
            errors.push(ContextSettingsError::CutoverWithoutCompaction {
                span: span("context_budget_cutover"),
            });
        }
        if let Some(value) = self.compaction_block_chars.filter(|chars| *chars < MIN_BLOCK_CHARS) {
            errors.push(ContextSettingsError::BlockTooSmall { value, span: span("compaction_block_chars") });
        }
        for (key, value) in [
            ("compaction_threshold", self.compaction_threshold),
            ("compaction_anti_thrash_min_savings", self.compaction_anti_thrash_min_savings),
        ] {
            if let Some(value) = value.filter(|v| !(*v > 0.0 && *v <= 1.0)) {
                errors.push(ContextSettingsError::NotAShare { key, value, span: span(key) });
            }
        }
        errors
    }

    pub fn max_replay_chars(&self) -> usize {
        self.max_replay_chars.unwrap_or(DEFAULT_MAX_REPLAY_CHARS)
    }

    pub fn tool_result_aging(&self) -> bool {
        self.tool_result_aging.unwrap_or(true)
    }

    pub fn runtime_context(&self) -> bool {
        self.runtime_context.unwrap_or(true)
    }

    pub fn project_docs(&self) -> bool {
        self.project_docs.unwrap_or(true)
    }

    pub fn read_before_write(&self) -> bool {
        self.read_before_write.unwrap_or(true)
    }

    pub fn max_subagents(&self) -> usize {
        self.max_subagents.unwrap_or(0)
    }

    pub fn max_subagent_depth(&self) -> usize {
        self.max_subagent_depth.unwrap_or(1)
    }

    pub fn subagent_model(&self) -> SubagentModel {
        self.subagent_model.unwrap_or_default()
    }

    pub fn task_checkpoints(&self) -> bool {
        self.task_checkpoints.unwrap_or(true)
    }

    pub fn agentic_tools(&self) -> bool {
        self.agentic_tools.unwrap_or(true)
    }

    pub fn web_tools(&self) -> bool {
        self.web_tools.unwrap_or(true)
    }

    /// Whether the stage ever compacts (not with `compaction=none`).
    pub fn compacts(&self) -> bool {
        self.compaction != Some(CompactionPreset::None)
    }

    pub fn compaction_mode(&self) -> CompactionMode {
        self.compaction_mode.unwrap_or_default()
    }

    /// (compact once more is uncompacted, keep this much), when a preset or
    /// `compaction_trigger_turns` asks for a turn-count trigger; explicit counts (in turns) win
    /// over the preset's (in messages).
    pub fn compaction_counts(&self) -> Option<(CompactionCount, CompactionCount)> {
        let preset = self.compaction.and_then(CompactionPreset::messages);
        let trigger = self
            .compaction_trigger_turns
            .map(CompactionCount::Turns)
            .or(preset.map(|(trigger, _)| CompactionCount::Messages(trigger)))?;
        Some((trigger, self.keep()))
    }

    /// What a compaction keeps verbatim: `compaction_keep_turns`, else the preset's messages, else
    /// [`DEFAULT_KEEP_TURNS`].
    pub fn keep(&self) -> CompactionCount {
        let preset = self.compaction.and_then(CompactionPreset::messages);
        self.compaction_keep_turns
            .map(CompactionCount::Turns)
            .or(preset.map(|(_, keep)| CompactionCount::Messages(keep)))
            .unwrap_or(CompactionCount::Turns(DEFAULT_KEEP_TURNS))
    }

    /// The share of the context window above which a stage on `model` compacts: the stage's
    /// `compaction_threshold`, else the config file's share for the model's tier, else the
    /// tier's built-in share (frontier 0.85, mid 0.65, small 0.35), else the share for other
    /// models (0.80).
    pub fn threshold(&self, model: &str) -> f64 {
        let configured = &self.compaction_thresholds;
        self.compaction_threshold.unwrap_or_else(|| match ModelTier::of(model) {
            Some(tier) => {
                let set = match tier {
                    ModelTier::Frontier => configured.frontier,
                    ModelTier::Mid => configured.mid,
                    ModelTier::Small => configured.small,
                };
                set.unwrap_or_else(|| tier.default_threshold())
            }
            None => configured.other.unwrap_or(DEFAULT_THRESHOLD),
        })
    }

    pub fn prune_chars(&self) -> usize {
        self.compaction_prune_chars.unwrap_or(DEFAULT_PRUNE_CHARS)
    }

    pub fn block_chars(&self) -> usize {
        self.compaction_block_chars.unwrap_or(DEFAULT_BLOCK_CHARS)
    }

    /// (window, minimum savings share) of the anti-thrash guard; none when either is 0.
    pub fn anti_thrash(&self) -> Option<(usize, f64)> {
        let window = self.compaction_anti_thrash_window.unwrap_or(DEFAULT_ANTI_THRASH_WINDOW);
        let ratio = self.compaction_anti_thrash_min_savings.unwrap_or(DEFAULT_ANTI_THRASH_MIN_SAVINGS);
        (window > 0 && ratio > 0.0).then_some((window, ratio))
    }

    pub fn thread_handoff(&self) -> ThreadHandoff {
        self.thread_handoff.unwrap_or_default()
    }
}

/// The settings read from attributes: (node attribute, graph default attribute).
const NAMES: &[(&str, &str)] = &[
    ("max_in_turn_tool_pairs", "default_max_in_turn_tool_pairs"),
    ("max_in_turn_context_tokens", "default_max_in_turn_context_tokens"),
    ("max_tool_result_chars", "default_max_tool_result_chars"),
    ("max_replay_chars", "default_max_replay_chars"),
    ("tool_result_aging", "default_tool_result_aging"),
    ("runtime_context", "default_runtime_context"),
    ("project_docs", "default_project_docs"),
    ("read_before_write", "default_read_before_write"),
    ("skill_dirs", "default_skill_dirs"),
    ("max_subagents", "default_max_subagents"),
    ("max_subagent_depth", "default_max_subagent_depth"),
    ("subagent_model", "default_subagent_model"),
    ("task_checkpoints", "default_task_checkpoints"),
    ("agentic_tools", "default_agentic_tools"),
    ("web_tools", "default_web_tools"),
    ("compaction", "default_compaction"),
    ("compaction_mode", "default_compaction_mode"),
    ("compaction_trigger_turns", "default_compaction_trigger_turns"),
    ("compaction_keep_turns", "default_compaction_keep_turns"),
    ("compaction_token_budget", "default_compaction_token_budget"),
    ("compaction_threshold", "default_compaction_threshold"),
    ("compaction_model", "default_compaction_model"),
    ("compaction_prune_chars", "default_compaction_prune_chars"),
    ("compaction_block_chars", "default_compaction_block_chars"),
    ("compaction_anti_thrash_window", "default_compaction_anti_thrash_window"),
    ("compaction_anti_thrash_min_savings", "default_compaction_anti_thrash_min_savings"),
    ("context_budget_warn", "default_context_budget_warn"),
    ("context_budget_cutover", "default_context_budget_cutover"),
    ("thread_text_only", "default_thread_text_only"),
    ("thread_max_turn_age", "default_thread_max_turn_age"),
    ("thread_max_tail_messages", "default_thread_max_tail_messages"),
    ("thread_exclude_nodes", "default_thread_exclude_nodes"),
    ("thread_handoff", "default_thread_handoff"),
];

/// The attribute names of the context settings, with their graph-default names.
pub fn attribute_names() -> impl Iterator<Item = (&'static str, &'static str)> {
    NAMES.iter().copied()
}

#[cfg(test)]
mod tests {
    use super::super::tests::built;
    use super::*;

    fn settings(dot: &str) -> Result<ContextSettings, Vec<ContextSettingsError>> {
        let workflow = built(dot);
        ContextSettings::parse(&workflow.node("a").unwrap().attributes, workflow.attributes())
    }

    #[test]
    fn settings_come_from_the_node_else_the_graph_default() {
        let read = settings(
            r#"digraph G { default_max_tool_result_chars=1000; "tool_result_chars.grep"="20000"; default_compaction=strong; default_web_tools=false
               a [max_in_turn_tool_pairs=3, tool_result_aging=false, compaction_mode=intent, thread_exclude_nodes="x, y"] }"#,
        )
        .unwrap();
        assert_eq!(read.max_in_turn_tool_pairs, Some(3));
        assert_eq!(read.max_tool_result_chars, Some(1000));
        assert_eq!(read.tool_result_chars["grep"], 20000);
        assert!(!read.tool_result_aging());
        assert_eq!(read.max_replay_chars(), DEFAULT_MAX_REPLAY_CHARS);
        assert_eq!(read.compaction_mode(), CompactionMode::Intent);
        assert_eq!(
            read.compaction_counts(),
            Some((CompactionCount::Messages(12), CompactionCount::Messages(10)))
        );
        assert_eq!(read.thread_exclude_nodes, Some(vec!["x".to_string(), "y".to_string()]));
        assert!(!read.web_tools());
        assert!(ContextSettings::default().web_tools());
    }

    #[test]
    fn contradictions_are_errors_at_their_attribute() {
        let errors =
            settings("digraph G { a [compaction_trigger_turns=4, compaction_keep_turns=4] }").unwrap_err();
        assert_eq!(errors.len(), 1);
        assert!(
            errors[0].to_string().contains("(4) must be more than compaction_keep_turns (4)"),
            "{}",
            errors[0]
        );
        // The default keep count (6) counts too.
        assert!(settings("digraph G { a [compaction_trigger_turns=5] }").is_err());
        let errors = settings("digraph G { a [compaction=none, context_budget_cutover=1000] }").unwrap_err();
        assert!(matches!(errors[0], ContextSettingsError::CutoverWithoutCompaction { .. }));
        let errors = settings("digraph G { a [compaction_threshold=1.5] }").unwrap_err();
        assert!(matches!(errors[0], ContextSettingsError::NotAShare { .. }));
        let errors = settings("digraph G { default_compaction_block_chars=500; a }").unwrap_err();
        assert!(matches!(errors[0], ContextSettingsError::BlockTooSmall { value: 500, .. }));
        assert_eq!(settings("digraph G { a [compaction_block_chars=2000] }").unwrap().block_chars(), 2000);
        assert!(settings("digraph G { a [compaction=sometimes] }").is_err());
        assert!(settings("digraph G { a [compaction=aggressive, context_budget_cutover=1000] }").is_ok());
    }

    #[test]
    fn lower_levels_fill_what_is_unset() {
        let node =
            ContextSettings { compaction_mode: Some(CompactionMode::Window), ..ContextSettings::default() };
        let config = ContextSettings {
            compaction_mode: Some(CompactionMode::Intent),
            max_tool_result_chars: Some(500),
            compaction_thresholds: TierThresholds { small: Some(0.3), ..TierThresholds::default() },
            ..ContextSettings::default()
        };
        let merged = node.or(&config);
        assert_eq!(merged.compaction_mode(), CompactionMode::Window);
        assert_eq!(merged.max_tool_result_chars, Some(500));
        assert_eq!(merged.threshold("claude-haiku-4-5"), 0.3);
        assert_eq!(merged.threshold("claude-opus-4-6"), 0.85);
        assert_eq!(merged.threshold("claude-sonnet-4-5"), 0.65);
        assert_eq!(merged.threshold("local-model"), DEFAULT_THRESHOLD);
    }

    #[test]
    fn tiers_follow_the_model_family() {
        assert_eq!(ModelTier::of("gpt-5-mini"), Some(ModelTier::Small));
        assert_eq!(ModelTier::of("gemini-2.5-flash"), Some(ModelTier::Small));
        assert_eq!(ModelTier::of("gemini-2.5-pro"), Some(ModelTier::Frontier));
        assert_eq!(ModelTier::of("openai/gpt-4o"), Some(ModelTier::Mid));
        assert_eq!(ModelTier::of("gpt-5.2"), Some(ModelTier::Frontier));
        assert_eq!(ModelTier::of("claude-haiku-4-5"), Some(ModelTier::Small));
        assert_eq!(ModelTier::of("claude-opus-4-6"), Some(ModelTier::Frontier));
        assert_eq!(ModelTier::of("o3"), Some(ModelTier::Frontier));
        assert_eq!(ModelTier::of("llama3.1"), None);
    }
}
