//! `compaction_mode=llm` (and the second half of `hybrid`): a model summarizes the compacted
//! turns in fixed sections. Before they go to the summarizer, tool arguments and results are cut
//! to [`SUMMARY_FIELD_CHARS`] and any other message over `compaction_prune_chars` is cut, with the
//! tool calls of its turn listed on one line, so that one verbose turn cannot dominate the summary
//! prompt. Earlier compaction blocks go whole.

use std::time::Duration;

use crate::agent::context::shortened;
use crate::agent::context::side_call::SideCall;
use crate::chat::ChatMessage;
use crate::llm::chat::{ask, ChatProvider};
use crate::usage::Usage;

/// Tool arguments and results are cut to this many characters for the summarizer.
pub const SUMMARY_FIELD_CHARS: usize = 500;

/// The sections the summarizer writes (File Operations is added from the tracker).
pub const SECTIONS: &[&str] =
    &["Goal", "Progress", "Key Decisions", "Failed Approaches", "Open Issues", "Next Steps"];

/// The first line of a summary block.
pub const HEADER: &str =
    "[Summary of the earlier part of this stage's conversation, compacted to fit the context window]";

/// The system prompt of summary calls.
pub const SYSTEM: &str =
    "You summarize the history of a coding agent's work so it can continue with a smaller context.";

/// The most output tokens a summary call asks for.
pub const MAX_SUMMARY_TOKENS: u32 = 4096;

/// A summary, or why there is none; both with what the call used.
pub type Summarized = Result<(String, Usage), (String, Usage)>;

/// Asks `model` to summarize `messages` in at most `max_output_tokens` (and
/// [`MAX_SUMMARY_TOKENS`]); the summary's own File Operations section is dropped (the tracker's
/// list is authoritative). An empty summary is a failure.
pub async fn summarize(
    provider: &dyn ChatProvider,
    model: &str,
    timeout: Duration,
    messages: &[ChatMessage],
    prune_chars: usize,
    side_call: &SideCall,
    max_output_tokens: u32,
) -> Summarized {
    let request_text = format!(
        "Summarize the conversation below for the coding agent that continues it; it will see only your summary \
         and the most recent turns. Write Markdown with exactly these sections, in order: {}. Be specific: name \
         files, commands, errors and decisions. Do not list file operations; they are added for you.\n\n\
         <conversation>\n{}\n</conversation>",
        SECTIONS.iter().map(|s| format!("## {s}")).collect::<Vec<_>>().join(", "),
        render_for_summary(messages, prune_chars)
    );
    let (request_text, max_output) =
        side_call.fit(SYSTEM, request_text, max_output_tokens.min(MAX_SUMMARY_TOKENS));
    let response = ask(provider, model, SYSTEM, request_text, max_output, timeout)
        .await
        .map_err(|error| (error.to_string(), Usage::default()))?;
    let summary = strip_file_section(&response.text).trim();
    if summary.is_empty() {
        return Err(("the summary came back empty".to_string(), response.usage));
    }
    Ok((summary.to_string(), response.usage))
}

/// The model's own File Operations section is dropped: the tracker's list is authoritative.
fn strip_file_section(text: &str) -> &str {
    match text.find("## File Operations") {
        Some(at) => &text[..at],
        None => text,
    }
}

/// The conversation as text for the summarizer: tool arguments and results cut to
/// [`SUMMARY_FIELD_CHARS`], other messages over `prune_chars` cut (compaction blocks excepted).
pub fn render_for_summary(messages: &[ChatMessage], prune_chars: usize) -> String {
    let mut out = String::new();
    for message in messages {
        match message {
            ChatMessage::User { content } => {
                let content =
                    if super::is_block(content) { content.clone() } else { prune(content, prune_chars) };
                out.push_str(&format!("USER:\n{content}\n\n"));
            }
            ChatMessage::Assistant { content, tool_calls, .. } => {
                let long = content.chars().count() > prune_chars;
                if !content.trim().is_empty() {
                    out.push_str(&format!("ASSISTANT:\n{}\n\n", prune(content, prune_chars)));
                }
                if long && !tool_calls.is_empty() {
                    // The turn was pruned: its calls on one line.
                    let calls: Vec<String> = tool_calls
                        .iter()
                        .map(|call| {
                            format!("{}({})", call.name, shortened(&call.arguments.to_string(), 80, " […]"))
                        })
                        .collect();
                    out.push_str(&format!("TOOL CALLS OF THIS TURN: {}\n\n", calls.join(", ")));
                    continue;
                }
                for call in tool_calls {
                    out.push_str(&format!(
                        "TOOL CALL {}: {}\n\n",
                        call.name,
                        shortened(&call.arguments.to_string(), SUMMARY_FIELD_CHARS, " […]")
                    ));
                }
            }
            ChatMessage::ToolResults { results } => {
                for result in results {
                    let mark = if result.is_error { " (error)" } else { "" };
                    out.push_str(&format!(
                        "TOOL RESULT {}{mark}: {}\n\n",
                        result.name,
                        shortened(&result.content, SUMMARY_FIELD_CHARS, " […]")
                    ));
                }
            }
        }
    }
    out
}

/// A message over `max` characters, cut with a note of its full length.
fn prune(text: &str, max: usize) -> String {
    let total = |dropped: usize| format!(" [TRUNCATED — {} chars total]", max + dropped);
    crate::agent::context::cut(text, max, total).unwrap_or_else(|| text.to_string())
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;

    /// A side call to a model with a large window.
    fn wide() -> SideCall {
        SideCall { window: 200_000, calibration: Default::default() }
    }
    use crate::chat::ToolCall;
    use crate::llm::chat::{ChatRequest, ChatResponse};
    use crate::llm::BackendError;

    pub struct Summarizer(pub Result<&'static str, BackendError>, pub std::sync::Mutex<Vec<String>>);

    #[async_trait::async_trait]
    impl ChatProvider for Summarizer {
        fn name(&self) -> &str {
            "test"
        }
        fn applies_reasoning_effort(&self, _model: &str) -> bool {
            false
        }
        async fn chat(&self, request: &ChatRequest<'_>) -> Result<ChatResponse, BackendError> {
            if let ChatMessage::User { content } = &request.messages[0] {
                self.1.lock().unwrap().push(content.clone());
            }
            self.0.clone().map(|text| ChatResponse { text: text.to_string(), ..ChatResponse::default() })
        }
    }

    #[tokio::test]
    async fn the_summary_drops_its_own_file_list_and_an_empty_one_fails() {
        let provider = Summarizer(Ok("## Goal\nFix it\n## File Operations\n- made up"), Default::default());
        let messages = [ChatMessage::user("Fix the bug")];
        let (summary, _) =
            summarize(&provider, "m", Duration::from_secs(1), &messages, 8000, &wide(), MAX_SUMMARY_TOKENS)
                .await
                .unwrap();
        assert_eq!(summary, "## Goal\nFix it");
        assert!(provider.1.lock().unwrap()[0].contains("USER:\nFix the bug"));
        let empty = Summarizer(Ok("  "), Default::default());
        assert!(summarize(&empty, "m", Duration::from_secs(1), &messages, 8000, &wide(), MAX_SUMMARY_TOKENS)
            .await
            .is_err());
        let down = Summarizer(Err(BackendError::Retryable("down".into())), Default::default());
        assert_eq!(
            summarize(&down, "m", Duration::from_secs(1), &messages, 8000, &wide(), MAX_SUMMARY_TOKENS)
                .await
                .unwrap_err()
                .0,
            "down"
        );
    }

    #[test]
    fn long_messages_are_pruned_and_their_calls_listed_on_one_line() {
        let messages = vec![
            ChatMessage::user("u".repeat(9000)),
            ChatMessage::assistant(
                "a".repeat(9000),
                vec![ToolCall {
                    id: "c".into(),
                    name: "shell".into(),
                    arguments: serde_json::json!({"command": "ls"}),
                }],
            ),
            ChatMessage::user(format!("{}\n{}", super::super::llm_summary::HEADER, "s".repeat(9000))),
        ];
        let text = render_for_summary(&messages, 8000);
        assert!(text.contains(&format!("{} [TRUNCATED — 9000 chars total]", "u".repeat(8000))));
        assert!(text.contains("TOOL CALLS OF THIS TURN: shell({\"command\":\"ls\"})"), "{text}");
        assert!(!text.contains("TOOL CALL shell:"));
        assert!(text.contains(&"s".repeat(9000)), "compaction blocks go whole");
    }
}
