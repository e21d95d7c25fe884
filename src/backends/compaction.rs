//! Keeps an agent stage's conversation inside the model's context window.
//!
//! After every assistant turn the loop estimates the tokens of system prompt plus history
//! (characters / 4). Above [`THRESHOLD_PERCENT`] of the window, the older turns are replaced by
//! one summary message written by the same model, keeping the [`PRESERVED_TURNS`] most recent
//! turns verbatim. The summary has fixed sections; its file list is the tracker's, copied
//! verbatim. A failed or empty summary leaves the history as it was.

use super::chat::{ChatMessage, ChatProvider, ChatRequest};
use super::{BackendError, Usage};

/// Compaction starts above this share of the context window.
pub const THRESHOLD_PERCENT: u64 = 80;
/// Turns kept verbatim.
pub const PRESERVED_TURNS: usize = 6;
/// Tool arguments and results are cut to this many characters for the summarizer.
pub const SUMMARY_FIELD_CHARS: usize = 500;

/// The sections the summarizer writes (File Operations is added from the tracker).
pub const SECTIONS: &[&str] =
    &["Goal", "Progress", "Key Decisions", "Failed Approaches", "Open Issues", "Next Steps"];

/// The marker that starts a summary message.
pub const SUMMARY_HEADER: &str =
    "[Summary of the earlier part of this stage's conversation, compacted to fit the context window]";

/// Estimated tokens of a conversation: characters / 4.
pub fn estimate_tokens(system: &str, messages: &[ChatMessage]) -> u64 {
    let chars = system.len() + messages.iter().map(ChatMessage::char_count).sum::<usize>();
    chars.div_ceil(4) as u64
}

/// Where each turn starts: a user message is a turn; an assistant message and the tool results
/// after it are one turn.
pub fn turn_starts(messages: &[ChatMessage]) -> Vec<usize> {
    messages
        .iter()
        .enumerate()
        .filter(|(_, m)| !matches!(m, ChatMessage::ToolResults { .. }))
        .map(|(i, _)| i)
        .collect()
}

/// What a compaction did, for the `agent.compaction.completed` event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Compacted {
    pub original_turn_count: usize,
    pub preserved_turn_count: usize,
    pub summary_token_estimate: u64,
    pub tracked_file_count: usize,
    pub usage: Usage,
}

/// Why a compaction did not happen.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NotCompacted {
    /// Too few turns to compact (the window is simply too small).
    TooFewTurns,
    /// The summary call failed or came back empty.
    Failed { message: String, usage: Usage },
}

/// Replaces all but the last [`PRESERVED_TURNS`] turns of `messages` with a summary.
pub async fn compact(
    provider: &dyn ChatProvider,
    model: &str,
    timeout: std::time::Duration,
    messages: &mut Vec<ChatMessage>,
    files: (&str, usize),
) -> Result<Compacted, NotCompacted> {
    let starts = turn_starts(messages);
    if starts.len() <= PRESERVED_TURNS {
        return Err(NotCompacted::TooFewTurns);
    }
    let cut = starts[starts.len() - PRESERVED_TURNS];
    let request_text = format!(
        "Summarize the conversation below for the coding agent that continues it; it will see only your summary \
         and the most recent turns. Write Markdown with exactly these sections, in order: {}. Be specific: name \
         files, commands, errors and decisions. Do not list file operations; they are added for you.\n\n\
         <conversation>\n{}\n</conversation>",
        SECTIONS.iter().map(|s| format!("## {s}")).collect::<Vec<_>>().join(", "),
        render_for_summary(&messages[..cut])
    );
    let request_messages = [ChatMessage::user(request_text)];
    let request = ChatRequest {
        model,
        system:
            "You summarize the history of a coding agent's work so it can continue with a smaller context.",
        messages: &request_messages,
        tools: &[],
        reasoning_effort: None,
        max_output_tokens: 4096,
        timeout,
    };
    let response = provider.chat(&request).await.map_err(|error| NotCompacted::Failed {
        message: match error {
            BackendError::Retryable(m) | BackendError::Terminal(m) | BackendError::Paused(m) => m,
        },
        usage: Usage::default(),
    })?;
    let summary = strip_file_section(&response.text);
    if summary.trim().is_empty() {
        return Err(NotCompacted::Failed {
            message: "the summary came back empty".to_string(),
            usage: response.usage,
        });
    }
    let (file_list, file_count) = files;
    let content = format!("{SUMMARY_HEADER}\n\n{}\n\n## File Operations\n{file_list}\n", summary.trim());
    let summary_token_estimate = content.len().div_ceil(4) as u64;
    let original_turn_count = starts.len();
    messages.splice(..cut, [ChatMessage::user(content)]);
    Ok(Compacted {
        original_turn_count,
        preserved_turn_count: PRESERVED_TURNS,
        summary_token_estimate,
        tracked_file_count: file_count,
        usage: response.usage,
    })
}

/// The model's own File Operations section is dropped: the tracker's list is authoritative.
fn strip_file_section(text: &str) -> &str {
    match text.find("## File Operations") {
        Some(at) => &text[..at],
        None => text,
    }
}

/// The conversation as text for the summarizer, tool arguments and results cut to
/// [`SUMMARY_FIELD_CHARS`].
pub fn render_for_summary(messages: &[ChatMessage]) -> String {
    let cut = |text: &str| -> String {
        if text.chars().count() <= SUMMARY_FIELD_CHARS {
            text.to_string()
        } else {
            text.chars().take(SUMMARY_FIELD_CHARS).collect::<String>() + " […]"
        }
    };
    let mut out = String::new();
    for message in messages {
        match message {
            ChatMessage::User { content } => out.push_str(&format!("USER:\n{content}\n\n")),
            ChatMessage::Assistant { content, tool_calls, .. } => {
                if !content.trim().is_empty() {
                    out.push_str(&format!("ASSISTANT:\n{content}\n\n"));
                }
                for call in tool_calls {
                    out.push_str(&format!(
                        "TOOL CALL {}: {}\n\n",
                        call.name,
                        cut(&call.arguments.to_string())
                    ));
                }
            }
            ChatMessage::ToolResults { results } => {
                for result in results {
                    let mark = if result.is_error { " (error)" } else { "" };
                    out.push_str(&format!("TOOL RESULT {}{mark}: {}\n\n", result.name, cut(&result.content)));
                }
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backends::chat::{ChatResponse, ToolCall, ToolResult};

    fn conversation(turns: usize) -> Vec<ChatMessage> {
        let mut messages = vec![ChatMessage::user("Fix the bug")];
        for i in 0..turns {
            messages.push(ChatMessage::Assistant {
                reasoning: Vec::new(),
                content: format!("turn {i}"),
                tool_calls: vec![ToolCall {
                    id: format!("c{i}"),
                    name: "read_file".into(),
                    arguments: serde_json::json!({"path": "x".repeat(900)}),
                }],
            });
            messages.push(ChatMessage::ToolResults {
                results: vec![ToolResult {
                    call_id: format!("c{i}"),
                    name: "read_file".into(),
                    content: "y".repeat(2000),
                    is_error: false,
                }],
            });
        }
        messages
    }

    struct Summarizer(Result<&'static str, BackendError>, std::sync::Mutex<Vec<String>>);

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

    #[test]
    fn turns_group_assistant_messages_with_their_results() {
        let messages = conversation(3);
        assert_eq!(turn_starts(&messages), vec![0, 1, 3, 5]);
        assert!(estimate_tokens("sys", &messages) > 3 * 2900 / 4);
    }

    #[tokio::test]
    async fn old_turns_become_one_summary_and_recent_turns_stay() {
        let provider = Summarizer(Ok("## Goal\nFix it\n## File Operations\n- made up"), Default::default());
        let mut messages = conversation(8);
        let recent = messages[messages.len() - 12..].to_vec();
        let done = compact(
            &provider,
            "m",
            std::time::Duration::from_secs(1),
            &mut messages,
            ("- src/a.rs (edited)", 1),
        )
        .await
        .unwrap();
        assert_eq!((done.original_turn_count, done.preserved_turn_count, done.tracked_file_count), (9, 6, 1));
        assert_eq!(messages.len(), 13);
        assert_eq!(&messages[1..], &recent[..]);
        let ChatMessage::User { content } = &messages[0] else { panic!("summary first") };
        assert!(content.starts_with(SUMMARY_HEADER) && content.contains("## Goal\nFix it"));
        assert!(
            content.ends_with("## File Operations\n- src/a.rs (edited)\n") && !content.contains("made up")
        );
        let sent = provider.1.lock().unwrap()[0].clone();
        assert!(sent.contains("Fix the bug") && sent.contains("[…]"));
        assert!(!sent.contains(&"y".repeat(501)));
    }

    #[tokio::test]
    async fn failures_keep_the_history() {
        for result in [Ok("   "), Err(BackendError::Retryable("down".into()))] {
            let provider = Summarizer(result, Default::default());
            let mut messages = conversation(8);
            let before = messages.clone();
            let outcome =
                compact(&provider, "m", std::time::Duration::from_secs(1), &mut messages, ("", 0)).await;
            assert!(matches!(outcome, Err(NotCompacted::Failed { .. })));
            assert_eq!(messages, before);
        }
        let mut short = conversation(5);
        let provider = Summarizer(Ok("x"), Default::default());
        let outcome = compact(&provider, "m", std::time::Duration::from_secs(1), &mut short, ("", 0)).await;
        assert_eq!(outcome, Err(NotCompacted::TooFewTurns));
    }
}
