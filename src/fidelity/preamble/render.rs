//! Rendering a preamble's facts as Markdown at the detail a fidelity mode asks for: the dispatch
//! per mode, and the pieces the mode families ([`super::compact`], [`super::summary`]) share: the
//! stage line, model and file lines, code blocks, and the context section. Pure and
//! deterministic: everything it shows was gathered before (see [`PreambleFacts`]).

use std::fmt::Write as _;

use serde_json::Value;

use super::compact;
use super::facts::{ContextEntry, ContextValue, PreambleFacts};
use super::summary_levels::{self, Level};
use super::text::{fmt_bytes, fmt_files, fmt_usage, inline_code, longest_backtick_run, plural, VALUE_CHARS};
use crate::excerpt::{clip_line, last_chars, tail_lines};
use crate::graph::settings::FidelityMode;
use crate::run_dir::stage_summary::StageSummary;
use crate::run_dir::stage_summary::TAIL_CHARS;

/// The preamble `facts` render to under `mode`; None under Full (full fidelity sends the thread
/// instead).
pub fn render(mode: FidelityMode, facts: &PreambleFacts<'_>) -> Option<String> {
    Some(match mode {
        FidelityMode::Full => return None,
        FidelityMode::Truncate => format!("Goal: {}\nRun: {}\n", facts.goal, facts.run_id),
        FidelityMode::Compact => compact::render(facts),
        FidelityMode::SummaryLow => summary_levels::render(facts, Level::Low),
        FidelityMode::SummaryMedium => summary_levels::render(facts, Level::Medium),
        FidelityMode::SummaryHigh => summary_levels::render(facts, Level::High),
    })
}

// ---------------------------------------------------------------------------------------------
// Context

/// What a mode's block for a stage says besides its status line, so that the context section can
/// leave out the engine-written keys that would repeat it.
#[derive(Debug, Clone, Copy)]
pub(super) struct StageDetail {
    /// A command stage's stdout and stderr.
    pub command_output: bool,
    /// A human gate's choice.
    pub human_choice: bool,
    /// An excerpt of an LLM stage's response.
    pub response: bool,
}

/// Which engine-written context keys the rendered stages already say.
#[derive(Default)]
pub(super) struct Shown {
    stage: bool,
    command_output: bool,
    human: bool,
    response: bool,
}

impl Shown {
    /// Notes that `stage` was rendered with `detail`.
    pub(super) fn note(&mut self, stage: &StageSummary, detail: StageDetail) {
        self.stage = true;
        if stage.is_command() && detail.command_output {
            self.command_output = true;
        }
        if stage.human_choice.is_some() && detail.human_choice {
            self.human = true;
        }
        if stage.response_excerpt.is_some() && detail.response {
            self.response = true;
        }
    }

    fn hides(&self, key: &str) -> bool {
        match key {
            "outcome" | "last_stage" => self.stage,
            "command.output" | "command.stderr" => self.command_output,
            "last_response" => self.response,
            _ => self.human && key.starts_with("human.gate."),
        }
    }
}

/// A context value as one line: offloaded values as a reference to their file, the rest
/// shortened to [`VALUE_CHARS`].
fn context_value(value: &ContextValue<'_>) -> String {
    match value {
        ContextValue::Offloaded { path, bytes: Some(bytes) } => {
            format!("(offloaded: {}, {})", path.display(), fmt_bytes(*bytes))
        }
        ContextValue::Offloaded { path, bytes: None } => format!("(offloaded: {})", path.display()),
        ContextValue::Inline(Value::String(text)) => clip_line(text, VALUE_CHARS),
        ContextValue::Inline(other) => clip_line(&other.to_string(), VALUE_CHARS),
    }
}

/// Appends `## Context` as a bullet list (or a table), stopping before `max_bytes` with a count of
/// the values left out. Nothing when there is nothing to show.
pub(super) fn push_context(
    out: &mut String,
    context: &[ContextEntry<'_>],
    shown: &Shown,
    table: bool,
    max_bytes: usize,
) {
    let entries: Vec<&ContextEntry<'_>> = context.iter().filter(|entry| !shown.hides(entry.key)).collect();
    if entries.is_empty() {
        return;
    }
    let start = out.len();
    out.push_str(if table { "\n## Context\n\n| Key | Value |\n|---|---|\n" } else { "\n## Context\n" });
    let mut line = String::new();
    for (index, entry) in entries.iter().enumerate() {
        line.clear();
        if table {
            let _ = writeln!(
                line,
                "| {} | {} |",
                table_cell(entry.key),
                table_cell(&context_value(&entry.value))
            );
        } else {
            let _ =
                writeln!(line, "- {}: {}", clip_line(entry.key, VALUE_CHARS), context_value(&entry.value));
        }
        let left = entries.len() - index;
        if out.len() - start + line.len() + 48 > max_bytes {
            let _ = writeln!(out, "(… {left} more context {})", plural(left, "value", "values"));
            return;
        }
        out.push_str(&line);
    }
}

fn table_cell(text: &str) -> String {
    clip_line(text, VALUE_CHARS).replace('|', "\\|")
}

// ---------------------------------------------------------------------------------------------
// Stage blocks

/// `- **id** (visit 2): fail — reason`
pub(super) fn push_stage_line(out: &mut String, stage: &StageSummary, reason_chars: usize) {
    let _ = write!(out, "- **{}**", stage.node_id);
    if stage.visit > 1 {
        let _ = write!(out, " (visit {})", stage.visit);
    }
    let _ = write!(out, ": {}", stage.status.as_str());
    if let Some(reason) = &stage.failure_reason {
        let _ = write!(out, " — {}", clip_line(reason, reason_chars));
    }
    out.push('\n');
}

/// `Model: m, 12.4k tokens in / 3.2k out` and `Files: a, b`.
pub(super) fn push_llm_lines(out: &mut String, stage: &StageSummary, bullet: &str) {
    let cost = stage.cost_usd.map_or_else(String::new, |cost| format!(", ~${cost:.4}"));
    match (&stage.model, &stage.usage) {
        (Some(model), Some(usage)) => {
            let _ = writeln!(out, "{bullet}Model: {}, {}{cost}", clip_line(model, 100), fmt_usage(usage));
        }
        (Some(model), None) => {
            let _ = writeln!(out, "{bullet}Model: {}", clip_line(model, 100));
        }
        (None, Some(usage)) => {
            let _ = writeln!(out, "{bullet}Tokens: {}{cost}", fmt_usage(usage));
        }
        (None, None) => {}
    }
    if !stage.files_touched.is_empty() {
        let _ = writeln!(out, "{bullet}Files: {}", fmt_files(&stage.files_touched));
    }
}

/// A nested `- Label:` bullet followed by `text` in a fenced block, or `(empty)`. Single lines
/// stay inline as code.
pub(super) fn push_labeled_code(out: &mut String, indent: &str, label: &str, text: &str) {
    if text.trim().is_empty() {
        let _ = writeln!(out, "{indent}- {label}: (empty)");
    } else if !text.contains('\n') {
        let _ = writeln!(out, "{indent}- {label}: {}", inline_code(text));
    } else {
        let _ = writeln!(out, "{indent}- {label}:");
        push_fenced(out, &format!("{indent}  "), text);
    }
}

pub(super) fn push_fenced(out: &mut String, indent: &str, text: &str) {
    let fence = "`".repeat(longest_backtick_run(text).max(2) + 1);
    let _ = writeln!(out, "{indent}{fence}");
    for line in text.lines() {
        if line.is_empty() {
            out.push('\n');
        } else {
            let _ = writeln!(out, "{indent}{line}");
        }
    }
    let _ = writeln!(out, "{indent}{fence}");
}

/// The stream's tail, at most `lines` lines and [`TAIL_CHARS`] characters; "" when absent.
pub(super) fn stream_tail(tail: &Option<String>, lines: usize) -> &str {
    let text = tail.as_deref().unwrap_or("").trim_end();
    last_chars(tail_lines(text, lines), TAIL_CHARS)
}

/// The stages and context the preamble tests render, and the renderer they call.
#[cfg(test)]
pub(super) mod fixtures {
    use super::super::{build, PreambleInput};
    use super::*;
    use crate::context::Context;
    use crate::outcome::StageStatus;
    use crate::usage::Usage;

    pub(in crate::fidelity::preamble) const ALL_PREAMBLE_MODES: [FidelityMode; 5] = [
        FidelityMode::Truncate,
        FidelityMode::Compact,
        FidelityMode::SummaryLow,
        FidelityMode::SummaryMedium,
        FidelityMode::SummaryHigh,
    ];

    pub(in crate::fidelity::preamble) fn stage(
        node_id: &str,
        visit: u32,
        handler: &str,
        status: StageStatus,
    ) -> StageSummary {
        StageSummary {
            node_id: node_id.into(),
            visit,
            branch: None,
            handler: Some(handler.into()),
            status,
            duration_ms: 1_500,
            failure_reason: None,
            notes: None,
            script: None,
            stdout_tail: None,
            stderr_tail: None,
            model: None,
            usage: None,
            cost_usd: None,
            response_excerpt: None,
            files_touched: Vec::new(),
            human_choice: None,
            dir: None,
        }
    }

    pub(in crate::fidelity::preamble) fn fixture_stages() -> Vec<StageSummary> {
        let mut plan = stage("plan", 1, "agent", StageStatus::Success);
        plan.model = Some("claude-sonnet-4-5".into());
        plan.usage = Some(Usage::new(12_400, 3_150));
        plan.files_touched = vec!["docs/plan.md".into()];
        plan.response_excerpt = Some("Plan: add a /health route\nthen test it.".into());
        plan.duration_ms = 42_000;

        let mut test = stage("test", 1, "command", StageStatus::Success);
        test.script = Some("cargo test 2>&1 || true".into());
        test.stdout_tail = Some("running 42 tests\n41 passed, 1 failed\n".into());
        test.stderr_tail = Some(String::new());
        test.duration_ms = 800;

        let mut fix = stage("fix", 1, "agent", StageStatus::Fail);
        fix.failure_reason = Some("model timed out\nafter 900s".into());
        fix.model = Some("claude-sonnet-4-5".into());

        let mut review = stage("review", 1, "human", StageStatus::Success);
        review.human_choice = Some("Retry the fix".into());

        let mut fix2 = stage("fix", 2, "agent", StageStatus::Success);
        fix2.model = Some("claude-sonnet-4-5".into());
        fix2.usage = Some(Usage::new(950, 1_000));
        fix2.notes = Some("patched handler".into());
        vec![plan, test, fix, review, fix2]
    }

    pub(in crate::fidelity::preamble) fn fixture_context() -> Context {
        let mut context = Context::new();
        context.set("internal.run_id", "r-1");
        context.set("internal.fidelity", "compact");
        context.set("current_node", "deploy");
        context.set("graph.goal", "Add a /health endpoint");
        context.set("thread.id", "t");
        context.set("response.plan", "the whole plan");
        context.set("outcome", "success");
        context.set("last_stage", "fix");
        context.set("last_response", "Done.");
        context.set("command.output", "41 passed, 1 failed");
        context.set("command.exit_code", 0);
        context.set("human.gate.label", "Retry the fix");
        context.set("tests_passed", false);
        context
    }

    pub(in crate::fidelity::preamble) fn render(mode: FidelityMode) -> Option<String> {
        let stages = fixture_stages();
        let context = fixture_context();
        let input = PreambleInput {
            goal: "Add a /health endpoint",
            run_id: "r-1",
            stages: &stages,
            context: &context,
        };
        build(mode, &input)
    }
}

#[cfg(test)]
mod tests {
    use super::fixtures::render;
    use super::*;

    #[test]
    fn full_has_no_preamble_and_truncate_has_goal_and_run() {
        assert_eq!(render(FidelityMode::Full), None);
        assert_eq!(render(FidelityMode::Truncate).unwrap(), "Goal: Add a /health endpoint\nRun: r-1\n");
    }
}
