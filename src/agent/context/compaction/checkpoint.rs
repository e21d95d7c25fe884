//! Task-boundary checkpoints: the agent calls `mark_task_done(detail)` when it has finished a task
//! of its stage; after that turn, the finished task's turns are replaced by a completion record in
//! six sections written by the model, with the file tracker's list copied in verbatim, so the
//! next task starts from a clean working set. Where compaction fires on context pressure, mid-task,
//! a checkpoint fires at a boundary the model recognizes. The stage's prompt and earlier blocks
//! stay. When the record cannot be written, the stage's own tool-call log of the task stands in.

use std::time::Duration;

use serde_json::json;

use super::operation_log::OperationLog;
use super::{intent, llm_summary};
use crate::agent::context::side_call::SideCall;
use crate::chat::{ChatMessage, ToolDefinition};
use crate::llm::chat::{ask, ChatProvider};
use crate::usage::Usage;

/// The tool the model calls at a task boundary.
pub const TOOL: &str = "mark_task_done";

/// Most characters of a `detail` kept (head and tail, the middle cut with a note): it is meant
/// to be one line, and it stays in every later request of the stage.
pub const MAX_DETAIL_CHARS: usize = 500;

/// The first line of a checkpoint block.
pub const HEADER: &str = "[Task checkpoint: the completion record of a finished task of this stage]";

/// The sections of a completion record, in order.
pub const SECTIONS: &[&str] = &[
    "Task",
    "Files & changes",
    "Technical context",
    "Strategy & approach",
    "Verification & next steps",
    "Where we are",
];

/// What the model is told about the tool.
pub fn definition() -> ToolDefinition {
    ToolDefinition {
        name: TOOL.into(),
        description: "Call this when you have finished one task of your work and are about to start the next (or to \
                      answer). detail: one line saying what was done. The turns of the finished task are then \
                      replaced by a completion record you will see instead, so later work starts from a clean \
                      context. Do not call it in the middle of a task.".into(),
        parameters: json!({"type": "object", "properties": {"detail": {"type": "string"}}, "required": ["detail"]}),
    }
}

/// What the tool answers.
pub const ACKNOWLEDGED: &str = "Task marked done. Before your next step, this task's turns are replaced by its \
                                completion record; go on with the next task, or answer if the stage's work is done.";

/// The record of the finished task `turns` (marked done with `detail`), or why there is none;
/// both with what the call used.
pub async fn write_record(
    provider: &dyn ChatProvider,
    model: &str,
    timeout: Duration,
    turns: &[ChatMessage],
    detail: &str,
    prune_chars: usize,
    side_call: &SideCall,
) -> Result<(String, Usage), (String, Usage)> {
    let request_text = format!(
        "The coding agent below has marked a task as done: \"{detail}\". Write the task's completion record; the \
         agent will see only this record in place of the task's turns. Write Markdown with exactly these \
         sections, in order:\n{}\nBe specific: name files, functions, commands and their results, decisions \
         and the alternatives rejected, what was verified and what was not. Under Files & changes, also name \
         files considered and not changed, with why.\n\n<task>\n{}\n</task>",
        SECTIONS.iter().map(|s| format!("# {s}")).collect::<Vec<_>>().join("\n"),
        llm_summary::render_for_summary(turns, prune_chars)
    );
    let system = "You write the completion record of a finished task of a coding agent.";
    let (request_text, max_output) = side_call.fit(system, request_text, 4096);
    let response = ask(provider, model, system, request_text, max_output, timeout)
        .await
        .map_err(|error| (error.to_string(), Usage::default()))?;
    let text = response.text.trim();
    if text.is_empty() {
        return Err(("the completion record came back empty".to_string(), response.usage));
    }
    Ok((text.to_string(), response.usage))
}

/// The block that replaces the task: the record, with the tracker's list under Files & changes.
pub fn block(detail: &str, record: &str, files: &str) -> String {
    let tracked = format!("Files this stage touched (fabro's file tracker):\n{files}\n");
    let section = format!("# {}", SECTIONS[1]);
    let record = match record.find(&section) {
        Some(at) => {
            let body = at + section.len();
            let end = record[body..].find("\n# ").map_or(record.len(), |next| body + next);
            format!("{}\n\n{tracked}{}", record[..end].trim_end(), &record[end..])
        }
        None => format!("{record}\n\n{section}\n{tracked}"),
    };
    format!("{HEADER}\nMarked done: {detail}\n\n{}\n", record.trim_end())
}

/// The block when no record could be written: the task's operations from the stage's own log.
pub fn fallback_block(
    detail: &str,
    error: &str,
    log: &OperationLog,
    first: u32,
    last: u32,
    files: &str,
) -> String {
    let listed = intent::listing(log, first, last);
    format!(
        "{HEADER}\nMarked done: {detail}\n\nThe completion record could not be written ({error}); the task's \
         operations from the stage's own tool-call log (ground truth) stand in:\n{listed}\n\n# {}\nFiles this \
         stage touched (fabro's file tracker):\n{files}\n",
        SECTIONS[1]
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tracker_list_goes_under_files_and_changes() {
        let record =
            "# Task\nAdd login\n\n# Files & changes\nEdited src/login.rs\n\n# Technical context\nAxum";
        let block = block("login added", record, "- src/login.rs (edited)");
        assert!(block.starts_with(HEADER), "{block}");
        assert!(block.contains("Marked done: login added\n\n# Task\nAdd login"), "{block}");
        assert!(
            block.contains(
                "# Files & changes\nEdited src/login.rs\n\nFiles this stage touched (fabro's file tracker):\n- src/login.rs (edited)\n\n# Technical context\nAxum"
            ),
            "{block}"
        );
        // A record without the section gets one.
        let block = super::block("done", "# Task\nX", "- a (read)");
        assert!(
            block.ends_with(
                "# Files & changes\nFiles this stage touched (fabro's file tracker):\n- a (read)\n"
            ),
            "{block}"
        );
    }
}
