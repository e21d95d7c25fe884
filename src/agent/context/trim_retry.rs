//! Adaptive trim retry: when a provider rejects a call for its size (HTTP 413 or a context-length
//! error), the agent loop sends the same call again, smaller, in up to three steps, and fails the
//! stage only when the last one is rejected too:
//! 1. every tool result cut to 4,000 characters (a `read_file` result whose file was written
//!    later to 500);
//! 2. every tool result cut to 500 characters;
//! 3. no tool messages at all: tool results dropped, tool calls taken out of assistant messages.

use super::{replay_caps, ContextSettings};
use crate::chat::ChatMessage;

/// The steps, in order: (tool result cap, what the step does).
pub const STEPS: [(Option<usize>, &str); 3] = [
    (Some(4000), "tool results cut to 4000 characters"),
    (Some(500), "tool results cut to 500 characters"),
    (None, "tool messages dropped"),
];

/// `view` made smaller as step `step` (0-based) of [`STEPS`] says.
pub fn trimmed(view: &[ChatMessage], step: usize) -> Vec<ChatMessage> {
    match STEPS.get(step).and_then(|(cap, _)| *cap) {
        Some(cap) => {
            let mut smaller = view.to_vec();
            let settings = ContextSettings { max_tool_result_chars: Some(cap), ..ContextSettings::default() };
            replay_caps::apply(&mut smaller, &settings);
            smaller
        }
        None => text_only(view),
    }
}

/// `messages` without tool frames: tool results dropped, tool calls taken out of assistant
/// messages, and assistant messages left with no text dropped.
pub fn text_only(messages: &[ChatMessage]) -> Vec<ChatMessage> {
    messages
        .iter()
        .filter_map(|message| match message {
            ChatMessage::ToolResults { .. } => None,
            ChatMessage::Assistant { content, .. } if content.trim().is_empty() => None,
            ChatMessage::Assistant { content, .. } => {
                Some(ChatMessage::assistant(content.clone(), Vec::new()))
            }
            user => Some(user.clone()),
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::context::tests::{conversation, results};

    #[test]
    fn each_step_sends_less() {
        let turns: Vec<_> = (0..3)
            .map(|i| ("shell", serde_json::json!({"command": format!("c{i}")}), "x".repeat(10_000)))
            .collect();
        let view = conversation(&turns);
        let first = trimmed(&view, 0);
        assert!(results(&first).iter().all(|r| r.len() < 4100));
        assert_eq!(first.len(), view.len(), "call ids stay paired");
        let second = trimmed(&view, 1);
        assert!(results(&second).iter().all(|r| r.len() < 600));
        let third = trimmed(&view, 2);
        assert_eq!(third, vec![ChatMessage::user("Do the task")]);
    }
}
