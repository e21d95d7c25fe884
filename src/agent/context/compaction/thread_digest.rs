//! The pinned digest of a shared thread's earlier stages. Under `full` fidelity a stage continues
//! the thread the stages before it wrote (a plan stage's prompt and its constraints, its answer);
//! its first compaction replaces those messages by this bounded digest of what they asked and
//! answered, which every compaction mode then keeps: facts from earlier stages survive however
//! long the stage runs.

use crate::chat::ChatMessage;
use crate::excerpt::clip;

/// The first line of the digest.
pub const HEADER: &str = "[Earlier in this thread: what the stages before this one asked and answered]";

/// Characters kept of one prompt or answer.
const ENTRY_CHARS: usize = 1_200;
/// Characters of all entries together.
const DIGEST_CHARS: usize = 6_000;

/// The digest of `history` (the messages before the stage's prompt): every prompt and every
/// answer without tool calls, each clipped; over the bound, the first (the thread's task) and the
/// latest that fit, with a note of how many were left out.
pub fn digest(history: &[ChatMessage]) -> String {
    let entries: Vec<String> = history
        .iter()
        .filter_map(|message| match message {
            ChatMessage::User { content } => Some(format!("- asked: {}", clip(content.trim(), ENTRY_CHARS))),
            ChatMessage::Assistant { content, tool_calls, .. }
                if tool_calls.is_empty() && !content.trim().is_empty() =>
            {
                Some(format!("- answered: {}", clip(content.trim(), ENTRY_CHARS)))
            }
            _ => None,
        })
        .collect();
    let mut kept: Vec<&String> = Vec::new();
    let mut used = 0;
    if let Some(first) = entries.first() {
        kept.push(first);
        used += first.len();
    }
    let mut latest: Vec<&String> = Vec::new();
    for entry in entries.iter().skip(1).rev() {
        if used + entry.len() > DIGEST_CHARS {
            break;
        }
        used += entry.len();
        latest.push(entry);
    }
    let left_out = entries.len() - kept.len() - latest.len();
    let mut out = format!("{HEADER}\n");
    for entry in kept {
        out.push_str(entry);
        out.push('\n');
    }
    if left_out > 0 {
        out.push_str(&format!("- ({left_out} earlier prompts and answers left out)\n"));
    }
    for entry in latest.into_iter().rev() {
        out.push_str(entry);
        out.push('\n');
    }
    out
}

/// Whether `message` is a digest.
pub fn is_digest(message: &ChatMessage) -> bool {
    matches!(message, ChatMessage::User { content } if content.starts_with(HEADER))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::ToolCall;

    #[test]
    fn prompts_and_answers_are_kept_and_tool_turns_left_out() {
        let call = ToolCall { id: "c1".into(), name: "list_dir".into(), arguments: serde_json::json!({}) };
        let history = [
            ChatMessage::user("Plan the change. Constraint: never touch vendor/."),
            ChatMessage::assistant("Looking.", vec![call]),
            ChatMessage::assistant("The plan: edit src/lib.rs only.", Vec::new()),
        ];
        let digest = digest(&history);
        assert!(digest.starts_with(HEADER));
        assert!(digest.contains("- asked: Plan the change. Constraint: never touch vendor/."));
        assert!(digest.contains("- answered: The plan: edit src/lib.rs only."));
        assert!(!digest.contains("Looking."));
        assert!(is_digest(&ChatMessage::user(digest)));
    }

    #[test]
    fn a_long_thread_keeps_its_first_prompt_and_its_latest_exchanges_within_the_bound() {
        let mut history = vec![ChatMessage::user("The task: keep the API stable.")];
        for i in 0..40 {
            history.push(ChatMessage::user(format!("step {i} {}", "x".repeat(2_000))));
            history.push(ChatMessage::assistant(format!("done {i}"), Vec::new()));
        }
        let digest = digest(&history);
        assert!(digest.len() < DIGEST_CHARS + HEADER.len() + 200, "{}", digest.len());
        assert!(digest.contains("The task: keep the API stable."));
        assert!(digest.contains("- answered: done 39"));
        assert!(digest.contains("earlier prompts and answers left out"));
    }
}
