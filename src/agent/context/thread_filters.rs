//! What an LLM stage under `full` fidelity receives of its conversation thread: the thread as
//! the earlier stages left it, filtered by the stage's settings. The thread on disk is never
//! changed; only what this stage is sent. In order:
//! 1. `thread_handoff=summary`: every stretch of messages from another node becomes one task
//!    summary (that task's prompt, its operations, its answer), so that one task's "done" does not
//!    read as the current task's;
//! 2. `thread_exclude_nodes`: the messages of those nodes are left out;
//! 3. `thread_text_only`: tool calls and results are left out;
//! 4. `thread_max_turn_age=N`: only the messages of the last N assistant turns;
//! 5. `thread_max_tail_messages=N`: at most the last N messages.
//!
//! A cut never leaves a tool result without its call.

use super::compaction::intent::Operation;
use super::shortened;
use super::trim_retry::text_only;
use crate::chat::ThreadMessage;
use crate::chat::{ChatMessage, ToolCall};
use crate::graph::settings::{ContextSettings, ThreadHandoff};

/// The first line of a task summary.
pub const HANDOFF_HEADER: &str = "[Task handoff:";

/// The thread `node` is sent, and the names of the filters that changed it.
pub fn replay(
    thread: &[ThreadMessage],
    node: &str,
    settings: &ContextSettings,
) -> (Vec<ThreadMessage>, Vec<&'static str>) {
    let mut applied = Vec::new();
    let mut messages = thread.to_vec();
    let mut step = |name: &'static str, filtered: Vec<ThreadMessage>, messages: &mut Vec<ThreadMessage>| {
        if filtered != *messages {
            applied.push(name);
        }
        *messages = without_orphans(filtered);
    };
    if settings.thread_handoff() == ThreadHandoff::Summary {
        step("thread_handoff", handoff(&messages, node), &mut messages);
    }
    if let Some(excluded) = settings.thread_exclude_nodes.as_ref().filter(|list| !list.is_empty()) {
        let kept = messages
            .iter()
            .filter(|m| m.node.as_ref().is_none_or(|n| !excluded.contains(n)))
            .cloned()
            .collect();
        step("thread_exclude_nodes", kept, &mut messages);
    }
    if settings.thread_text_only == Some(true) {
        let kept = messages
            .iter()
            .filter_map(|m| {
                let text = text_only(std::slice::from_ref(&m.message)).pop()?;
                Some(ThreadMessage { node: m.node.clone(), message: text })
            })
            .collect();
        step("thread_text_only", kept, &mut messages);
    }
    if let Some(turns) = settings.thread_max_turn_age {
        step("thread_max_turn_age", last_turns(&messages, turns), &mut messages);
    }
    if let Some(tail) = settings.thread_max_tail_messages {
        let from = messages.len().saturating_sub(tail);
        step("thread_max_tail_messages", messages[from..].to_vec(), &mut messages);
    }
    (messages, applied)
}

/// The messages of the last `turns` assistant turns, with the user message that started the
/// first of them.
fn last_turns(messages: &[ThreadMessage], turns: usize) -> Vec<ThreadMessage> {
    let assistants: Vec<usize> = messages
        .iter()
        .enumerate()
        .filter(|(_, m)| matches!(m.message, ChatMessage::Assistant { .. }))
        .map(|(i, _)| i)
        .collect();
    let Some(&first) = assistants.len().checked_sub(turns).and_then(|k| assistants.get(k)) else {
        return messages.to_vec();
    };
    let start = match first.checked_sub(1).map(|i| &messages[i].message) {
        Some(ChatMessage::User { .. }) => first - 1,
        _ => first,
    };
    messages[start..].to_vec()
}

/// Tool results whose call is not right before them are dropped; an assistant message whose
/// results do not follow it loses its calls (and goes, when it has no text).
fn without_orphans(messages: Vec<ThreadMessage>) -> Vec<ThreadMessage> {
    let results_follow: Vec<bool> = (0..messages.len())
        .map(|i| matches!(messages.get(i + 1).map(|m| &m.message), Some(ChatMessage::ToolResults { .. })))
        .collect();
    let mut out: Vec<ThreadMessage> = Vec::with_capacity(messages.len());
    for (i, mut message) in messages.into_iter().enumerate() {
        match &mut message.message {
            ChatMessage::ToolResults { .. } => {
                let answers_a_call = matches!(
                    out.last().map(|m| &m.message),
                    Some(ChatMessage::Assistant { tool_calls, .. }) if !tool_calls.is_empty()
                );
                if !answers_a_call {
                    continue;
                }
            }
            ChatMessage::Assistant { tool_calls, content, .. }
                if !tool_calls.is_empty() && !results_follow[i] =>
            {
                tool_calls.clear();
                if content.trim().is_empty() {
                    continue;
                }
            }
            _ => {}
        }
        out.push(message);
    }
    out
}

/// Every stretch of messages from a node other than `node` becomes one task summary.
fn handoff(messages: &[ThreadMessage], node: &str) -> Vec<ThreadMessage> {
    let mut out = Vec::new();
    let mut stretch: Vec<ThreadMessage> = Vec::new();
    let flush = |stretch: &mut Vec<ThreadMessage>, out: &mut Vec<ThreadMessage>| {
        if let Some(first) = stretch.first() {
            let from = first.node.clone();
            let summary = task_summary(from.as_deref(), stretch);
            out.push(ThreadMessage { node: from, message: ChatMessage::user(summary) });
        }
        stretch.clear();
    };
    for message in messages.iter().cloned() {
        let other = message.node.as_deref().is_some_and(|n| n != node);
        let same_stretch = stretch.first().is_some_and(|first| first.node == message.node);
        if other && same_stretch {
            stretch.push(message);
        } else if other {
            flush(&mut stretch, &mut out);
            stretch.push(message);
        } else {
            flush(&mut stretch, &mut out);
            out.push(message);
        }
    }
    flush(&mut stretch, &mut out);
    out
}

/// One finished task on the thread, from its own messages: its prompt, its tool calls and how
/// they ended, and its answer.
fn task_summary(node: Option<&str>, messages: &[ThreadMessage]) -> String {
    let task = messages.iter().find_map(|m| match &m.message {
        ChatMessage::User { content } => Some(content.as_str()),
        _ => None,
    });
    let answer = messages.iter().rev().find_map(|m| match &m.message {
        ChatMessage::Assistant { content, .. } if !content.trim().is_empty() => Some(content.as_str()),
        _ => None,
    });
    let mut calls: Vec<(u32, &ToolCall)> = Vec::new();
    let mut operations = Vec::new();
    let mut turn = 0;
    for message in messages {
        match &message.message {
            ChatMessage::Assistant { tool_calls, .. } => {
                turn += 1;
                calls.extend(tool_calls.iter().map(|call| (turn, call)));
            }
            ChatMessage::ToolResults { results } => {
                for result in results {
                    if let Some((turn, call)) = calls.iter().find(|(_, call)| call.id == result.call_id) {
                        operations.push(format!(
                            "  {}",
                            Operation::of(*turn, call, &result.content, result.is_error).line()
                        ));
                    }
                }
            }
            ChatMessage::User { .. } => {}
        }
    }
    let node = node.map_or_else(|| "an earlier stage".to_string(), |n| format!("node `{n}`"));
    let mut out = format!(
        "{HANDOFF_HEADER} {node} finished its task on this thread; this is a summary of it, not your current task.]\n"
    );
    if let Some(task) = task {
        out.push_str(&format!("\nTask:\n{}\n", shortened(task.trim(), 1000, " […]")));
    }
    if !operations.is_empty() {
        out.push_str(&format!("\nOperations:\n{}\n", operations.join("\n")));
    }
    if let Some(answer) = answer {
        out.push_str(&format!("\nIts answer:\n{}\n", shortened(answer.trim(), 2000, " […]")));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::ToolResult;

    /// A node's task: its prompt, one tool turn, its answer.
    fn task(node: &str, tool: &str, result: &str) -> Vec<ThreadMessage> {
        let at = |message| ThreadMessage { node: Some(node.to_string()), message };
        let id = format!("{node}-c");
        vec![
            at(ChatMessage::user(format!("Task of {node}"))),
            at(ChatMessage::assistant(
                "",
                vec![ToolCall {
                    id: id.clone(),
                    name: tool.into(),
                    arguments: serde_json::json!({"path": "a.txt"}),
                }],
            )),
            at(ChatMessage::ToolResults {
                results: vec![ToolResult {
                    call_id: id,
                    name: tool.into(),
                    content: result.into(),
                    is_error: false,
                }],
            }),
            at(ChatMessage::assistant(format!("{node} is done"), Vec::new())),
        ]
    }

    fn thread() -> Vec<ThreadMessage> {
        [task("plan", "read_file", "contents"), task("build", "write_file", "wrote 5 bytes")].concat()
    }

    fn settings(edit: impl FnOnce(&mut ContextSettings)) -> ContextSettings {
        let mut settings = ContextSettings::default();
        edit(&mut settings);
        settings
    }

    #[test]
    fn without_settings_the_thread_is_sent_whole() {
        let (sent, applied) = replay(&thread(), "review", &ContextSettings::default());
        assert_eq!(sent, thread());
        assert!(applied.is_empty());
    }

    #[test]
    fn text_only_and_excluded_nodes_leave_out_tool_frames_and_whole_tasks() {
        let (sent, applied) = replay(&thread(), "review", &settings(|s| s.thread_text_only = Some(true)));
        assert_eq!(applied, ["thread_text_only"]);
        assert_eq!(sent.len(), 4);
        assert!(sent.iter().all(|m| !matches!(&m.message, ChatMessage::ToolResults { .. })));
        let (sent, _) =
            replay(&thread(), "review", &settings(|s| s.thread_exclude_nodes = Some(vec!["plan".into()])));
        assert_eq!(sent, task("build", "write_file", "wrote 5 bytes"));
    }

    #[test]
    fn age_and_tail_cuts_keep_calls_and_results_paired() {
        let (sent, _) = replay(&thread(), "review", &settings(|s| s.thread_max_turn_age = Some(2)));
        assert_eq!(
            sent,
            task("build", "write_file", "wrote 5 bytes"),
            "the last two assistant turns and their prompt"
        );
        // Two messages from the end would start at a tool result: it goes with its call.
        let (sent, _) = replay(&thread(), "review", &settings(|s| s.thread_max_tail_messages = Some(2)));
        assert_eq!(sent.len(), 1);
        assert_eq!(sent[0].message, ChatMessage::assistant("build is done", Vec::new()));
    }

    #[test]
    fn a_handoff_summarizes_each_other_nodes_task() {
        let mut thread = thread();
        thread.extend(task("review", "read_file", "old review"));
        let (sent, applied) =
            replay(&thread, "review", &settings(|s| s.thread_handoff = Some(ThreadHandoff::Summary)));
        assert_eq!(applied, ["thread_handoff"]);
        assert_eq!(sent.len(), 2 + 4, "one summary per other task, the node's own turns whole");
        let ChatMessage::User { content } = &sent[1].message else { panic!("{sent:?}") };
        assert!(
            content.starts_with("[Task handoff: node `build` finished its task on this thread"),
            "{content}"
        );
        assert!(content.contains("Task:\nTask of build"));
        assert!(content.contains("✓ write_file → \"a.txt\" (turn 1)"));
        assert!(content.contains("Its answer:\nbuild is done"));
    }
}
