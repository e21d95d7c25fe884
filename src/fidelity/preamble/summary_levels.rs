//! The `summary:low`, `summary:medium` and `summary:high` preambles: the goal, counts per status,
//! then the newest stages at rising detail, then (medium and high) the context. Each level holds
//! its token budget (estimated as characters / 4) however long the run is: stages are rendered
//! newest first until the budget is spent and the older ones are counted in an
//! `(… N earlier stages elided)` line.

use std::fmt::Write as _;

use super::facts::PreambleFacts;
use super::render::{
    push_context, push_fenced, push_labeled_code, push_llm_lines, push_stage_line, stream_tail, Shown,
    StageDetail,
};
use super::text::{fmt_duration, inline_code, plural, VALUE_CHARS};
use crate::excerpt::{clip, clip_line, clip_tail, last_line};
use crate::outcome::StageStatus;
use crate::run_dir::stage_summary::StageSummary;
use crate::run_dir::stage_summary::RESPONSE_EXCERPT_CHARS;

/// Token budgets of the summary levels (estimated as characters / 4).
pub const LOW_BUDGET_TOKENS: usize = 600;
pub const MEDIUM_BUDGET_TOKENS: usize = 1_500;
pub const HIGH_BUDGET_TOKENS: usize = 3_000;

/// How much a summary shows: `summary:low`, `summary:medium` or `summary:high`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Level {
    Low,
    Medium,
    High,
}

impl Level {
    fn budget_tokens(self) -> usize {
        match self {
            Level::Low => LOW_BUDGET_TOKENS,
            Level::Medium => MEDIUM_BUDGET_TOKENS,
            Level::High => HIGH_BUDGET_TOKENS,
        }
    }

    /// What this level's stage blocks show besides the status line.
    fn detail(self) -> StageDetail {
        StageDetail {
            command_output: self == Level::High,
            human_choice: self != Level::Low,
            response: self == Level::High,
        }
    }
}

pub(super) fn render(facts: &PreambleFacts<'_>, level: Level) -> String {
    // Byte lengths bound character counts, so budgeting bytes keeps the estimate within budget.
    let budget = level.budget_tokens() * crate::usage::CHARS_PER_TOKEN;
    let mut out = String::with_capacity(budget + 64);
    let _ = writeln!(out, "Goal: {}", clip(facts.goal, budget / 5));
    out.push('\n');
    push_counts(&mut out, facts.stages);

    // Stages newest first while they fit; the context section gets what they leave, up to a third.
    let context_share = if level == Level::Low { 0 } else { budget / 3 };
    let heading = match level {
        Level::Low => "",
        Level::Medium => "\n## Recent stages\n",
        Level::High => "\n## Stages\n",
    };
    let reserve = 48; // the elision line
    let stage_budget = budget.saturating_sub(out.len() + heading.len() + context_share + reserve);
    let mut blocks: Vec<String> = Vec::new();
    let mut used = 0;
    let mut shown = Shown::default();
    for stage in facts.stages.iter().rev() {
        let block = stage_block(stage, level);
        if used + block.len() > stage_budget {
            break;
        }
        used += block.len();
        shown.note(stage, level.detail());
        blocks.push(block);
    }
    if !facts.stages.is_empty() {
        out.push_str(heading);
        let elided = facts.stages.len() - blocks.len();
        if elided > 0 {
            let _ = writeln!(out, "(… {elided} earlier {} elided)", plural(elided, "stage", "stages"));
        }
        for block in blocks.iter().rev() {
            out.push_str(block);
        }
    }
    if level != Level::Low {
        let max = budget.saturating_sub(out.len());
        push_context(&mut out, &facts.context, &shown, level == Level::High, max);
    }
    out
}

/// `Completed stages: 5 (success 3, fail 1, skipped 1)`
fn push_counts(out: &mut String, stages: &[StageSummary]) {
    // Built-in statuses first, then custom outcomes in the order they came.
    let mut counts: Vec<(StageStatus, usize)> = StageStatus::ALL.iter().map(|status| (*status, 0)).collect();
    for stage in stages {
        match counts.iter_mut().find(|(status, _)| *status == stage.status) {
            Some((_, count)) => *count += 1,
            None => counts.push((stage.status, 1)),
        }
    }
    let _ = write!(out, "Completed stages: {}", stages.len());
    let mut first = true;
    for (status, count) in counts {
        if count > 0 {
            out.push_str(if first { " (" } else { ", " });
            let _ = write!(out, "{} {count}", status.as_str());
            first = false;
        }
    }
    out.push_str(if first { "\n" } else { ")\n" });
}

fn stage_block(stage: &StageSummary, level: Level) -> String {
    let mut out = String::with_capacity(128);
    match level {
        Level::Low => {
            let _ = write!(out, "- {}", stage.node_id);
            if stage.visit > 1 {
                let _ = write!(out, " (visit {})", stage.visit);
            }
            let _ = write!(out, ": {}", stage.status.as_str());
            if let Some(reason) = &stage.failure_reason {
                let _ = write!(out, " — {}", clip_line(reason, 80));
            }
            out.push('\n');
        }
        Level::Medium => {
            push_stage_line(&mut out, stage, VALUE_CHARS);
            if let Some(choice) = &stage.human_choice {
                let _ = writeln!(out, "  - Human chose: {}", clip_line(choice, VALUE_CHARS));
            }
            if let Some(notes) = &stage.notes {
                let _ = writeln!(out, "  - Notes: {}", clip_line(notes, VALUE_CHARS));
            }
            if !stage.status.is_successful() {
                if let Some(line) = stage.stderr_tail.as_deref().and_then(last_line) {
                    let _ = writeln!(out, "  - Last stderr: {}", inline_code(&clip_line(line, VALUE_CHARS)));
                }
            }
        }
        Level::High => {
            let _ = write!(out, "\n### {}", stage.node_id);
            if stage.visit > 1 {
                let _ = write!(out, " (visit {})", stage.visit);
            }
            out.push_str("\n\n");
            let _ = writeln!(out, "- Status: {}", stage.status.as_str());
            if let Some(reason) = &stage.failure_reason {
                let _ = writeln!(out, "- Failure: {}", clip_line(reason, VALUE_CHARS));
            }
            if let Some(handler) = &stage.handler {
                let _ = writeln!(out, "- Handler: {handler}");
            }
            let _ = writeln!(out, "- Duration: {}", fmt_duration(stage.duration_ms));
            push_llm_lines(&mut out, stage, "- ");
            if let Some(choice) = &stage.human_choice {
                let _ = writeln!(out, "- Human chose: {}", clip_line(choice, VALUE_CHARS));
            }
            if let Some(notes) = &stage.notes {
                let _ = writeln!(out, "- Notes: {}", clip_line(notes, VALUE_CHARS));
            }
            if let Some(response) = stage.response_excerpt.as_deref().filter(|r| !r.trim().is_empty()) {
                out.push_str("\nResponse excerpt:\n\n");
                push_fenced(&mut out, "", &clip(response.trim(), RESPONSE_EXCERPT_CHARS));
            } else if stage.is_command() {
                if let Some(script) = &stage.script {
                    push_labeled_code(&mut out, "", "Script", &clip(script.trim_end(), 200));
                }
                push_labeled_code(
                    &mut out,
                    "",
                    "Stdout",
                    &clip_tail(stream_tail(&stage.stdout_tail, 5), 300),
                );
                push_labeled_code(
                    &mut out,
                    "",
                    "Stderr",
                    &clip_tail(stream_tail(&stage.stderr_tail, 5), 300),
                );
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::super::render::fixtures::{fixture_context, render, stage};
    use super::super::{build, PreambleInput};
    use super::*;
    use crate::context::Context;
    use crate::graph::settings::FidelityMode;
    use crate::usage::Usage;

    #[test]
    fn summary_low_golden() {
        let expected = "\
Goal: Add a /health endpoint

Completed stages: 5 (success 4, fail 1)
- plan: success
- test: success
- fix: fail — model timed out after 900s
- review: success
- fix (visit 2): success
";
        assert_eq!(render(FidelityMode::SummaryLow).unwrap(), expected);
    }

    #[test]
    fn summary_medium_golden() {
        let expected = "\
Goal: Add a /health endpoint

Completed stages: 5 (success 4, fail 1)

## Recent stages
- **plan**: success
- **test**: success
- **fix**: fail — model timed out after 900s
- **review**: success
  - Human chose: Retry the fix
- **fix** (visit 2): success
  - Notes: patched handler

## Context
- command.exit_code: 0
- command.output: 41 passed, 1 failed
- last_response: Done.
- tests_passed: false
";
        assert_eq!(render(FidelityMode::SummaryMedium).unwrap(), expected);
    }

    #[test]
    fn summary_high_golden() {
        let expected = "\
Goal: Add a /health endpoint

Completed stages: 5 (success 4, fail 1)

## Stages

### plan

- Status: success
- Handler: agent
- Duration: 42.0s
- Model: claude-sonnet-4-5, 12.4k tokens in / 3.2k out
- Files: docs/plan.md

Response excerpt:

```
Plan: add a /health route
then test it.
```

### test

- Status: success
- Handler: command
- Duration: 800 ms
- Script: `cargo test 2>&1 || true`
- Stdout:
  ```
  running 42 tests
  41 passed, 1 failed
  ```
- Stderr: (empty)

### fix

- Status: fail
- Failure: model timed out after 900s
- Handler: agent
- Duration: 1.5s
- Model: claude-sonnet-4-5

### review

- Status: success
- Handler: human
- Duration: 1.5s
- Human chose: Retry the fix

### fix (visit 2)

- Status: success
- Handler: agent
- Duration: 1.5s
- Model: claude-sonnet-4-5, 950 tokens in / 1.0k out
- Notes: patched handler

## Context

| Key | Value |
|---|---|
| command.exit_code | 0 |
| tests_passed | false |
";
        assert_eq!(render(FidelityMode::SummaryHigh).unwrap(), expected);
    }

    fn long_run(count: usize) -> (Vec<StageSummary>, Context) {
        let stages = (0..count)
            .map(|i| {
                let mut s = match i % 4 {
                    0 => {
                        let mut s = stage(
                            &format!("implement_{i}"),
                            1 + (i / 4) as u32 % 3,
                            "agent",
                            StageStatus::Success,
                        );
                        s.model = Some("claude-sonnet-4-5".into());
                        s.usage = Some(Usage::new(12_345 + i as u64, 987));
                        s.files_touched = (0..30).map(|f| format!("src/module_{f}/file_{i}.rs")).collect();
                        s.response_excerpt = Some("The change is done. ".repeat(40));
                        s
                    }
                    1 => {
                        let mut s = stage(&format!("test_{i}"), 1, "command", StageStatus::Fail);
                        s.failure_reason = Some("command exited with code 101 ".repeat(20));
                        s.script = Some("cargo test --workspace 2>&1".into());
                        s.stdout_tail = Some("test result: FAILED. 41 passed; 1 failed\n".repeat(10));
                        s.stderr_tail = Some("error: test failed, to rerun pass `--lib`\n".repeat(10));
                        s
                    }
                    2 => {
                        let mut s = stage(&format!("gate_{i}"), 2, "human", StageStatus::Success);
                        s.human_choice = Some("Approve and continue ".repeat(20));
                        s
                    }
                    _ => stage(&format!("check_{i}"), 1, "conditional", StageStatus::PartialSuccess),
                };
                s.notes = Some("something worth noting ".repeat(20));
                s
            })
            .collect();
        let mut context = fixture_context();
        for k in 0..200 {
            context.set(format!("key_{k:03}"), "value ".repeat(100));
        }
        (stages, context)
    }

    fn elided_count(text: &str) -> usize {
        let line =
            text.lines().find(|l| l.starts_with("(… ") && l.contains("elided")).expect("an elision line");
        line["(… ".len()..].split(' ').next().unwrap().parse().unwrap()
    }

    /// Estimated tokens of a text, as the budgets count them: characters / 4, rounded up.
    fn estimate_tokens(text: &str) -> usize {
        crate::usage::estimated_tokens(text.chars().count()) as usize
    }

    #[test]
    fn summary_budgets_hold_at_a_thousand_stages() {
        let (stages, context) = long_run(1_000);
        let goal = "Ship it. ".repeat(1_000);
        let input = PreambleInput { goal: &goal, run_id: "r", stages: &stages, context: &context };
        for (mode, budget, marker) in [
            (FidelityMode::SummaryLow, LOW_BUDGET_TOKENS, "- "),
            (FidelityMode::SummaryMedium, MEDIUM_BUDGET_TOKENS, "- **"),
            (FidelityMode::SummaryHigh, HIGH_BUDGET_TOKENS, "### "),
        ] {
            let text = build(mode, &input).unwrap();
            let tokens = estimate_tokens(&text);
            assert!(tokens <= budget, "{mode}: {tokens} tokens > {budget}\n{text}");
            let shown = text.lines().filter(|l| l.starts_with(marker)).count();
            let elided = elided_count(&text);
            assert!(shown >= 3, "{mode}: only {shown} stages shown\n{text}");
            assert_eq!(shown + elided, 1_000, "{mode}\n{text}");
            assert!(text.contains(&format!("(… {elided} earlier stages elided)")));
            // The newest stage is the last one shown.
            assert!(text.contains("check_999"), "{mode}");
            assert!(text.contains("Completed stages: 1000 ("), "{mode}");
            if mode != FidelityMode::SummaryLow {
                assert!(text.contains("more context values)"), "{mode}");
            }
        }
        // Compact has no budget but renders every stage.
        let compact = build(FidelityMode::Compact, &input).unwrap();
        assert_eq!(compact.lines().filter(|l| l.starts_with("- **")).count(), 1_000);
        assert!(compact.contains("(+10 more)"));
    }
}
