//! What an agent stage sends the model on each call: a view of its conversation that the layers
//! here make smaller, without touching the conversation itself (the transcript, compaction and
//! the file tracker keep seeing everything). Each layer is a pure function from messages to
//! messages and keeps every tool call id valid: a result is shortened, never removed.
//!
//! The layers, in the order they apply:
//! 1. [`sliding_window`]: only the last `max_in_turn_tool_pairs` tool results in full, or the
//!    oldest shortened once the conversation passes `max_in_turn_context_tokens`.
//! 2. [`replay_caps`]: `max_tool_result_chars` (per tool with `tool_result_chars.<tool>`), a
//!    `read_file` result whose file was written later cut to a stub, and long assistant messages
//!    before the latest cut to `max_replay_chars`.
//! 3. [`aging`]: tool results cut by age (11-20 messages old: 2,000 tokens; 21-40: 1,000; older:
//!    500), unless `tool_result_aging=false`.

pub mod aging;
pub mod replay_caps;
pub mod sliding_window;

use std::collections::{BTreeMap, HashMap};

use crate::backends::chat::ChatMessage;
use crate::graph::Attributes;

/// Characters per token in the estimates the layers use (as compaction does).
pub const CHARS_PER_TOKEN: usize = 4;

/// Assistant messages in replayed history are cut to this many characters by default.
pub const DEFAULT_MAX_REPLAY_CHARS: usize = 2000;

/// The attribute prefix of per-tool result caps: `tool_result_chars.grep=20000`.
pub const TOOL_RESULT_CHARS_PREFIX: &str = "tool_result_chars.";

/// How an agent stage trims what it sends (node attributes, else the graph's `default_<name>`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ContextSettings {
    pub max_in_turn_tool_pairs: Option<usize>,
    pub max_in_turn_context_tokens: Option<u64>,
    pub max_tool_result_chars: Option<usize>,
    /// Per-tool caps, overriding `max_tool_result_chars`.
    pub tool_result_chars: HashMap<String, usize>,
    pub max_replay_chars: usize,
    pub tool_result_aging: bool,
}

impl Default for ContextSettings {
    fn default() -> Self {
        ContextSettings {
            max_in_turn_tool_pairs: None,
            max_in_turn_context_tokens: None,
            max_tool_result_chars: None,
            tool_result_chars: HashMap::new(),
            max_replay_chars: DEFAULT_MAX_REPLAY_CHARS,
            tool_result_aging: true,
        }
    }
}

impl ContextSettings {
    /// The settings of a stage: each from the node, else the graph's `default_<name>`.
    pub fn from_attributes(node: &Attributes, graph: &Attributes) -> ContextSettings {
        let count = |name: &str| {
            node.integer(name)
                .or_else(|| graph.integer(&format!("default_{name}")))
                .and_then(|n| u64::try_from(n).ok())
        };
        let mut tool_result_chars = HashMap::new();
        for attributes in [graph, node] {
            for (key, attr) in attributes.iter() {
                let Some(tool) = key.strip_prefix(TOOL_RESULT_CHARS_PREFIX) else { continue };
                if let Ok(chars) = attr.value.to_string().trim().parse::<usize>() {
                    tool_result_chars.insert(tool.to_string(), chars);
                }
            }
        }
        ContextSettings {
            max_in_turn_tool_pairs: count("max_in_turn_tool_pairs").map(|n| n as usize),
            max_in_turn_context_tokens: count("max_in_turn_context_tokens"),
            max_tool_result_chars: count("max_tool_result_chars").map(|n| n as usize),
            tool_result_chars,
            max_replay_chars: count("max_replay_chars").map_or(DEFAULT_MAX_REPLAY_CHARS, |n| n as usize),
            tool_result_aging: node
                .boolean("tool_result_aging")
                .or_else(|| graph.boolean("default_tool_result_aging"))
                .unwrap_or(true),
        }
    }
}

/// Estimated tokens saved by each layer (by layer name), over a stage's calls.
pub type Savings = BTreeMap<String, u64>;

/// A layer: shortens what a view sends, in place.
type Layer = fn(&mut [ChatMessage], &ContextSettings);

/// The layers by name, in the order they apply.
const LAYERS: [(&str, Layer); 3] = [
    ("sliding_window", sliding_window::apply),
    ("replay_caps", replay_caps::apply),
    ("tool_result_aging", aging::apply),
];

/// The view of `messages` to send, and the tokens each layer saved on it.
pub fn view(messages: &[ChatMessage], settings: &ContextSettings) -> (Vec<ChatMessage>, Savings) {
    let mut savings = Savings::new();
    let mut current = messages.to_vec();
    for (name, layer) in LAYERS {
        let before = tokens(&current);
        layer(&mut current, settings);
        let saved = before.saturating_sub(tokens(&current));
        if saved > 0 {
            savings.insert(name.to_string(), saved);
        }
    }
    (current, savings)
}

/// Estimated tokens of messages.
pub fn tokens(messages: &[ChatMessage]) -> u64 {
    (messages.iter().map(ChatMessage::char_count).sum::<usize>().div_ceil(CHARS_PER_TOKEN)) as u64
}

/// `text` cut to `max` characters (at a character boundary) followed by `notice`, when longer.
pub(crate) fn cut(text: &str, max: usize, notice: impl FnOnce(usize) -> String) -> Option<String> {
    let (at, _) = text.char_indices().nth(max)?;
    let dropped = text[at..].chars().count();
    Some(format!("{}{}", &text[..at], notice(dropped)))
}

/// Every tool result of a conversation, oldest first: (message index, result index).
pub(crate) fn result_positions(messages: &[ChatMessage]) -> Vec<(usize, usize)> {
    messages
        .iter()
        .enumerate()
        .flat_map(|(m, message)| match message {
            ChatMessage::ToolResults { results } => (0..results.len()).map(|r| (m, r)).collect(),
            _ => Vec::new(),
        })
        .collect()
}

/// The tool result at a position.
pub(crate) fn result_at(
    messages: &mut [ChatMessage],
    (m, r): (usize, usize),
) -> Option<&mut crate::backends::chat::ToolResult> {
    match messages.get_mut(m) {
        Some(ChatMessage::ToolResults { results }) => results.get_mut(r),
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::backends::chat::{ToolCall, ToolResult};

    /// A conversation: a prompt, then one assistant turn per (tool, arguments, result) with its
    /// result message.
    pub fn conversation(turns: &[(&str, serde_json::Value, String)]) -> Vec<ChatMessage> {
        let mut messages = vec![ChatMessage::user("Do the task")];
        for (i, (tool, arguments, result)) in turns.iter().enumerate() {
            let id = format!("c{i}");
            messages.push(ChatMessage::Assistant {
                reasoning: Vec::new(),
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: id.clone(),
                    name: tool.to_string(),
                    arguments: arguments.clone(),
                }],
            });
            messages.push(ChatMessage::ToolResults {
                results: vec![ToolResult {
                    call_id: id,
                    name: tool.to_string(),
                    content: result.clone(),
                    is_error: false,
                }],
            });
        }
        messages
    }

    pub fn results(messages: &[ChatMessage]) -> Vec<String> {
        messages
            .iter()
            .flat_map(|m| match m {
                ChatMessage::ToolResults { results } => results.iter().map(|r| r.content.clone()).collect(),
                _ => Vec::new(),
            })
            .collect()
    }

    #[test]
    fn the_view_changes_only_what_the_settings_ask_and_counts_savings() {
        let big = "x".repeat(40_000);
        let turns: Vec<_> = (0..3)
            .map(|i| ("read_file", serde_json::json!({"path": format!("f{i}")}), big.clone()))
            .collect();
        let messages = conversation(&turns);
        let (same, savings) = view(&messages, &ContextSettings::default());
        assert_eq!(same, messages, "recent results and short histories are left alone");
        assert!(savings.is_empty());
        let settings = ContextSettings { max_in_turn_tool_pairs: Some(1), ..ContextSettings::default() };
        let (trimmed, savings) = view(&messages, &settings);
        assert_eq!(trimmed.len(), messages.len(), "every message and call id stays");
        assert!(savings["sliding_window"] > 19_000, "{savings:?}");
    }

    #[test]
    fn settings_come_from_the_node_else_the_graph_default() {
        use crate::graph::attribute::{Attr, Value};
        use crate::source::Span;
        let attr = |value: Value| Attr { value, span: Span::at(0), key_span: Span::at(0), inherited: false };
        let mut node = Attributes::default();
        let mut graph = Attributes::default();
        graph.set("default_max_tool_result_chars", attr(Value::Integer(1000)));
        graph.set("tool_result_chars.grep", attr(Value::Text("20000".into())));
        node.set("max_in_turn_tool_pairs", attr(Value::Integer(3)));
        node.set("tool_result_aging", attr(Value::Boolean(false)));
        let settings = ContextSettings::from_attributes(&node, &graph);
        assert_eq!(settings.max_in_turn_tool_pairs, Some(3));
        assert_eq!(settings.max_tool_result_chars, Some(1000));
        assert_eq!(settings.tool_result_chars["grep"], 20000);
        assert!(!settings.tool_result_aging);
        assert_eq!(settings.max_replay_chars, DEFAULT_MAX_REPLAY_CHARS);
    }
}
