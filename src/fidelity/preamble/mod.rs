//! The preamble an LLM stage's prompt starts with: what the run has done so far, as Markdown, at
//! the detail its [`FidelityMode`] asks for. Building one has two steps: [`PreambleFacts::gather`]
//! collects what is known (the stages' [`StageSummary`]s, gathered once when each completed, and
//! the context values a preamble may show), and [`render()`] turns those facts into text per mode.
//! Neither calls a model; only gathering touches files.
//!
//! | mode | content |
//! |---|---|
//! | `full` | no preamble (the conversation thread carries the history) |
//! | `truncate` | goal and run id |
//! | `compact` | goal, every completed stage with handler details, then the remaining context |
//! | `summary:low` | goal, stage count, one line per recent stage (~600 tokens) |
//! | `summary:medium` | recent stages with failures, retries, human choices and notes, plus the context (~1,500 tokens) |
//! | `summary:high` | a section per recent stage with an excerpt of its output, plus a context table (~3,000 tokens) |
//!
//! Summary levels hold their budget (tokens estimated as characters / 4) however long the run is:
//! stages are rendered newest first until the budget is spent and the older ones are counted in an
//! `(… N earlier stages elided)` line. Context keys starting with `internal.`, `current`, `graph.`,
//! `thread.` or `response.` never appear; offloaded values appear as a reference to their file.

mod compact;
mod facts;
mod render;
mod summary_levels;
mod text;

use std::fmt::Write as _;

pub use facts::{is_internal_key, ContextEntry, ContextValue, PreambleFacts};
pub use render::render;
pub use summary_levels::{HIGH_BUDGET_TOKENS, LOW_BUDGET_TOKENS, MEDIUM_BUDGET_TOKENS};
pub use text::VALUE_CHARS;

use crate::context::Context;
use crate::graph::settings::FidelityMode;
use crate::run_dir::stage_summary::StageSummary;

/// The run as it stands before a stage, which [`build`] gathers a preamble's facts from.
#[derive(Debug, Clone, Copy)]
pub struct PreambleInput<'a> {
    pub goal: &'a str,
    pub run_id: &'a str,
    /// Completed stage visits, oldest first.
    pub stages: &'a [StageSummary],
    pub context: &'a Context,
}

/// The preamble for a stage under `mode`; None under Full (full fidelity sends the thread instead).
pub fn build(mode: FidelityMode, input: &PreambleInput<'_>) -> Option<String> {
    render(mode, &PreambleFacts::gather(input, mode))
}

/// The heading a child run's preambles put before their parent's preamble.
pub const PARENT_HEADING: &str = "## Parent run";
/// The heading before steering messages from a child run's manager.
pub const STEERING_HEADING: &str = "## Steering from the manager";

/// A child run's preamble: its own (if any), then the preamble of the manager stage that started
/// it, under [`PARENT_HEADING`], so the child's stages know what the parent had done.
pub fn with_parent(own: Option<&str>, parent: &str) -> String {
    let mut out = String::new();
    if let Some(own) = own.map(str::trim_end).filter(|own| !own.is_empty()) {
        out.push_str(own);
        out.push_str("\n\n");
    }
    let _ = write!(out, "{PARENT_HEADING}\n\n{}\n", parent.trim_end());
    out
}

/// A preamble followed by the steering messages a manager sent, under [`STEERING_HEADING`],
/// last so they are closest to the stage's own prompt.
pub fn with_steering(preamble: Option<&str>, messages: &[String]) -> String {
    let mut out = String::new();
    if let Some(preamble) = preamble.map(str::trim_end).filter(|p| !p.is_empty()) {
        out.push_str(preamble);
        out.push_str("\n\n");
    }
    out.push_str(STEERING_HEADING);
    out.push_str("\n\n");
    for message in messages {
        out.push_str(message.trim());
        out.push_str("\n\n");
    }
    out.truncate(out.trim_end().len());
    out.push('\n');
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_child_preamble_has_its_own_then_the_parents_then_steering() {
        let with = with_parent(Some("Goal: child\n"), "Goal: parent\n");
        assert_eq!(with, "Goal: child\n\n## Parent run\n\nGoal: parent\n");
        assert_eq!(with_parent(None, "Goal: parent"), "## Parent run\n\nGoal: parent\n");
        let steered = with_steering(Some(&with), &["Fix the tests first.".into(), " Then lint. ".into()]);
        assert_eq!(
            steered,
            "Goal: child\n\n## Parent run\n\nGoal: parent\n\n## Steering from the manager\n\nFix the tests first.\n\nThen lint.\n"
        );
        assert_eq!(with_steering(None, &["Stop.".into()]), "## Steering from the manager\n\nStop.\n");
    }
}
