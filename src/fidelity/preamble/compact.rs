//! The `compact` preamble (the default fidelity): the goal, every completed stage with what its
//! handler did (a command's script and output, a model's usage and files, a human's choice), then
//! the context. It has no budget: it grows with the run.

use std::fmt::Write as _;

use super::facts::PreambleFacts;
use super::render::{
    push_context, push_labeled_code, push_llm_lines, push_stage_line, stream_tail, Shown, StageDetail,
};
use super::text::VALUE_CHARS;
use crate::excerpt::{clip, clip_line};
use crate::run_dir::stage_summary::TAIL_LINES;

/// Characters of a script shown.
const SCRIPT_CHARS: usize = 500;

/// Compact stage blocks show a command's output and a human's choice, not the response.
const DETAIL: StageDetail = StageDetail { command_output: true, human_choice: true, response: false };

pub(super) fn render(facts: &PreambleFacts<'_>) -> String {
    let mut out = String::with_capacity(256 + facts.stages.len() * 160);
    let _ = writeln!(out, "Goal: {}", facts.goal);
    let mut shown = Shown::default();
    if !facts.stages.is_empty() {
        out.push_str("\n## Completed stages\n");
        for stage in facts.stages {
            shown.note(stage, DETAIL);
            push_stage_line(&mut out, stage, VALUE_CHARS);
            if stage.is_command() {
                if let Some(script) = &stage.script {
                    push_labeled_code(&mut out, "  ", "Script", &clip(script.trim_end(), SCRIPT_CHARS));
                }
                push_labeled_code(&mut out, "  ", "Stdout", stream_tail(&stage.stdout_tail, TAIL_LINES));
                push_labeled_code(&mut out, "  ", "Stderr", stream_tail(&stage.stderr_tail, TAIL_LINES));
            }
            push_llm_lines(&mut out, stage, "  - ");
            if let Some(choice) = &stage.human_choice {
                let _ = writeln!(out, "  - Choice: {}", clip_line(choice, VALUE_CHARS));
            }
        }
    }
    push_context(&mut out, &facts.context, &shown, false, usize::MAX);
    out
}

#[cfg(test)]
mod tests {
    use super::super::render::fixtures::render;
    use crate::graph::settings::FidelityMode;

    #[test]
    fn compact_golden() {
        let expected = "\
Goal: Add a /health endpoint

## Completed stages
- **plan**: success
  - Model: claude-sonnet-4-5, 12.4k tokens in / 3.2k out
  - Files: docs/plan.md
- **test**: success
  - Script: `cargo test 2>&1 || true`
  - Stdout:
    ```
    running 42 tests
    41 passed, 1 failed
    ```
  - Stderr: (empty)
- **fix**: fail — model timed out after 900s
  - Model: claude-sonnet-4-5
- **review**: success
  - Choice: Retry the fix
- **fix** (visit 2): success
  - Model: claude-sonnet-4-5, 950 tokens in / 1.0k out

## Context
- command.exit_code: 0
- last_response: Done.
- tests_passed: false
";
        assert_eq!(render(FidelityMode::Compact).unwrap(), expected);
    }
}
