//! Layer 2, replay caps: a tool result longer than `max_tool_result_chars` (or its tool's
//! `tool_result_chars.<tool>`; 0 means no cap, for one tool or for all) is cut with a note of how
//! much; a `read_file` result whose file is
//! written or edited later is cut to a stub (what it showed is out of date); assistant messages
//! before the latest are cut to `max_replay_chars`. Compaction summaries are never cut.

use super::compaction::is_block;
use super::{cut, result_positions, ContextSettings};
use crate::chat::ChatMessage;

/// What is kept of a read whose file changed later.
pub const CONSUMED_READ_CHARS: usize = 500;

pub fn apply(messages: &mut [ChatMessage], settings: &ContextSettings) {
    cap_results(messages, settings);
    cap_consumed_reads(messages);
    cap_assistant_messages(messages, settings.max_replay_chars());
}

fn cap_results(messages: &mut [ChatMessage], settings: &ContextSettings) {
    for message in messages.iter_mut() {
        let ChatMessage::ToolResults { results } = message else { continue };
        for result in results.iter_mut() {
            let cap =
                settings.tool_result_chars.get(&result.name).copied().or(settings.max_tool_result_chars);
            let Some(max) = cap.filter(|max| *max > 0) else { continue };
            if let Some(shorter) = cut(&result.content, max, |dropped| {
                format!("\n[… {dropped} more characters cut by max_tool_result_chars={max}]")
            }) {
                result.content = shorter;
            }
        }
    }
}

/// The path a `read_file`, `write_file` or `edit_file` call names.
fn path_of(arguments: &serde_json::Value) -> Option<&str> {
    arguments.get("path").and_then(serde_json::Value::as_str)
}

fn cap_consumed_reads(messages: &mut [ChatMessage]) {
    // Every call, with where its result is, oldest first.
    let mut calls: Vec<(String, Option<String>, usize)> = Vec::new();
    for (index, message) in messages.iter().enumerate() {
        if let ChatMessage::Assistant { tool_calls, .. } = message {
            for call in tool_calls {
                calls.push((call.name.clone(), path_of(&call.arguments).map(str::to_string), index));
            }
        }
    }
    let changed_after = |path: &str, after: usize| {
        calls.iter().any(|(name, written, at)| {
            *at > after
                && matches!(name.as_str(), "write_file" | "edit_file")
                && written.as_deref() == Some(path)
        })
    };
    let mut stale: Vec<String> = Vec::new();
    for (name, path, at) in &calls {
        if let (true, Some(path)) = (name == "read_file", path) {
            if changed_after(path, *at) {
                stale.push(format!("{at}:{path}"));
            }
        }
    }
    if stale.is_empty() {
        return;
    }
    // Results follow their call's assistant message; match them by call id.
    let stale_ids: Vec<String> = messages
        .iter()
        .enumerate()
        .flat_map(|(index, message)| match message {
            ChatMessage::Assistant { tool_calls, .. } => tool_calls
                .iter()
                .filter(|call| {
                    call.name == "read_file"
                        && path_of(&call.arguments).is_some_and(|p| stale.contains(&format!("{index}:{p}")))
                })
                .map(|call| call.id.clone())
                .collect(),
            _ => Vec::new(),
        })
        .collect();
    for (m, r) in result_positions(messages) {
        let ChatMessage::ToolResults { results } = &mut messages[m] else { continue };
        let result = &mut results[r];
        if stale_ids.contains(&result.call_id) {
            if let Some(shorter) = cut(&result.content, CONSUMED_READ_CHARS, |dropped| {
                format!("\n[… {dropped} more characters: the file changed after this read; read it again if you need it]")
            }) {
                result.content = shorter;
            }
        }
    }
}

fn cap_assistant_messages(messages: &mut [ChatMessage], max: usize) {
    let last = messages.iter().rposition(|m| matches!(m, ChatMessage::Assistant { .. }));
    for (index, message) in messages.iter_mut().enumerate() {
        let ChatMessage::Assistant { content, .. } = message else { continue };
        if Some(index) == last || is_block(content) {
            continue;
        }
        if let Some(shorter) = cut(content, max, |dropped| {
            format!("\n[… {dropped} more characters cut by max_replay_chars={max}]")
        }) {
            *content = shorter;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::context::compaction::llm_summary::HEADER as SUMMARY_HEADER;
    use crate::agent::context::tests::{conversation, results};
    use serde_json::json;

    #[test]
    fn results_are_capped_per_tool_with_what_was_cut() {
        let mut messages = conversation(&[
            ("grep", json!({"pattern": "x"}), "g".repeat(300)),
            ("shell", json!({"command": "ls"}), "s".repeat(300)),
        ]);
        let mut settings = ContextSettings { max_tool_result_chars: Some(100), ..ContextSettings::default() };
        settings.tool_result_chars.insert("grep".into(), 250);
        apply(&mut messages, &settings);
        let results = results(&messages);
        assert!(
            results[0].starts_with(&"g".repeat(250))
                && results[0].ends_with("[… 50 more characters cut by max_tool_result_chars=250]")
        );
        assert!(results[1].ends_with("[… 200 more characters cut by max_tool_result_chars=100]"));
    }

    #[test]
    fn a_cap_of_zero_means_no_cap() {
        let mut messages = conversation(&[
            ("grep", json!({"pattern": "x"}), "g".repeat(300)),
            ("shell", json!({"command": "ls"}), "s".repeat(300)),
        ]);
        let mut settings = ContextSettings { max_tool_result_chars: Some(100), ..ContextSettings::default() };
        settings.tool_result_chars.insert("grep".into(), 0);
        apply(&mut messages, &settings);
        assert_eq!(results(&messages)[0], "g".repeat(300));
        assert!(results(&messages)[1].ends_with("cut by max_tool_result_chars=100]"));
        let mut messages = conversation(&[("shell", json!({"command": "ls"}), "s".repeat(300))]);
        apply(
            &mut messages,
            &ContextSettings { max_tool_result_chars: Some(0), ..ContextSettings::default() },
        );
        assert_eq!(results(&messages)[0], "s".repeat(300));
    }

    #[test]
    fn a_read_of_a_file_written_later_becomes_a_stub() {
        let mut messages = conversation(&[
            ("read_file", json!({"path": "src/lib.rs"}), "r".repeat(2000)),
            ("read_file", json!({"path": "README.md"}), "m".repeat(2000)),
            ("edit_file", json!({"path": "src/lib.rs"}), "ok".into()),
        ]);
        apply(&mut messages, &ContextSettings::default());
        let results = results(&messages);
        assert_eq!(results[0].len(), CONSUMED_READ_CHARS + "\n[… 1500 more characters: the file changed after this read; read it again if you need it]".len());
        assert_eq!(results[1].len(), 2000, "a file not changed later keeps its read");
    }

    #[test]
    fn long_assistant_messages_before_the_latest_are_cut_but_summaries_never() {
        let mut messages = vec![
            ChatMessage::assistant("a".repeat(3000), Vec::new()),
            ChatMessage::assistant(format!("{SUMMARY_HEADER}\n{}", "s".repeat(3000)), Vec::new()),
            ChatMessage::assistant("b".repeat(3000), Vec::new()),
        ];
        apply(&mut messages, &ContextSettings::default());
        let texts: Vec<usize> = messages
            .iter()
            .map(|m| match m {
                ChatMessage::Assistant { content, .. } => content.chars().count(),
                _ => 0,
            })
            .collect();
        assert!(texts[0] < 2100 && texts[1] > 3000 && texts[2] == 3000, "{texts:?}");
    }
}
