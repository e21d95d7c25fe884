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
pub mod calibration;
pub mod compaction;
pub mod project_docs;
pub mod reference_files;
pub mod replay_caps;
pub mod runtime;
pub mod side_call;
pub mod sliding_window;
pub mod thread_filters;
pub mod too_large;
pub mod trim_retry;

use crate::chat::ChatMessage;
use crate::graph::settings::ContextSettings;

use crate::usage::Savings;

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
    crate::usage::estimated_tokens(messages.iter().map(ChatMessage::char_count).sum())
}

/// `text` cut to `max` characters (at a character boundary) followed by `notice`, when longer.
pub(crate) fn cut(text: &str, max: usize, notice: impl FnOnce(usize) -> String) -> Option<String> {
    let (at, _) = text.char_indices().nth(max)?;
    let dropped = text[at..].chars().count();
    Some(format!("{}{}", &text[..at], notice(dropped)))
}

/// `text` cut to `max` characters followed by `mark`, or whole when not longer.
pub(crate) fn shortened(text: &str, max: usize, mark: &str) -> String {
    cut(text, max, |_| mark.to_string()).unwrap_or_else(|| text.to_string())
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
) -> Option<&mut crate::chat::ToolResult> {
    match messages.get_mut(m) {
        Some(ChatMessage::ToolResults { results }) => results.get_mut(r),
        _ => None,
    }
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::chat::{ToolCall, ToolResult};

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
}
