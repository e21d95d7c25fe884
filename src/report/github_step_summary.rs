//! The run as GitHub-flavored Markdown, for `$GITHUB_STEP_SUMMARY`: a heading with the outcome,
//! the failure reason, a table of stage visits, token totals and the run directory.

use std::fmt::Write as _;

use crate::outcome::{PauseKind, StageStatus};
use crate::run_dir::RunResult;
use crate::run_status::RunStatus;

/// The Markdown summary of `result`. `run_dir_display` is how to show the run directory (a
/// relative path: the summary is read on another machine, so it has no links); `pause` is what a
/// paused run waits for, which says how to resume it.
pub fn render(
    result: &RunResult,
    pause: Option<PauseKind>,
    workflow_name: &str,
    run_dir_display: &str,
) -> String {
    let mut out = String::new();
    let _ = writeln!(
        out,
        "## {} fabro run `{}`: {}\n",
        run_icon(result.status),
        code_text(workflow_name),
        result.status.as_str()
    );
    if let Some(reason) = &result.failure_reason {
        out.push_str("**Reason:**\n\n");
        out.push_str(&fenced(reason));
        out.push('\n');
    }
    if result.stages.is_empty() {
        out.push_str("No stage ran.\n\n");
    } else {
        out.push_str("| stage | visit | handler | status | duration | tokens (in / out) |\n");
        out.push_str("|---|---:|---|---|---:|---:|\n");
        for stage in &result.stages {
            let handler = stage.handler.as_ref().map_or("-", |handler| handler.name());
            let tokens = match &stage.usage {
                Some(usage) => format!("{} / {}", usage.input_tokens, usage.output_tokens),
                None => "-".to_string(),
            };
            let _ = writeln!(
                out,
                "| `{}` | {} | {} | {} {} | {} | {} |",
                code_text(&stage.node_id),
                stage.visit,
                cell(handler),
                stage_icon(stage.status),
                stage.status.as_str(),
                duration(stage.duration_ms),
                tokens
            );
        }
        out.push('\n');
    }
    let (input, output) =
        result.stages.iter().filter_map(|s| s.usage.as_ref()).fold((0u64, 0u64), |acc, u| {
            (acc.0.saturating_add(u.input_tokens), acc.1.saturating_add(u.output_tokens))
        });
    let cost = crate::usage::UsageTotals::of(&result.stages)
        .and_then(|totals| totals.cost_usd)
        .map_or_else(|| "n/a (no priced model)".to_string(), |cost| format!("${cost:.4} (estimated)"));
    let _ = writeln!(
        out,
        "**Tokens:** {input} in / {output} out · **Cost:** {cost} · **Duration:** {}\n",
        duration(result.duration_ms)
    );
    let _ = writeln!(out, "**Run directory:** `{}`", code_text(run_dir_display));
    if matches!(result.status, RunStatus::Paused | RunStatus::Interrupted) {
        let dir = code_text(run_dir_display);
        let line = match (result.status, pause) {
            (RunStatus::Paused, Some(PauseKind::Ceiling)) => {
                format!(
                    "Resume with `fabro resume {dir} --max-tokens N` or `--max-cost USD` (a higher limit)."
                )
            }
            (RunStatus::Paused, Some(PauseKind::StageCeiling(bound))) => format!(
                "Resume with `fabro resume {dir} --{} {}` (higher than the stage's bound).",
                bound.as_str().replace('_', "-"),
                bound.unit()
            ),
            (RunStatus::Paused, Some(PauseKind::Step)) => {
                format!("Resume with `fabro resume {dir}` (add `--step` to keep stepping).")
            }
            (RunStatus::Paused, Some(PauseKind::Storage)) => {
                format!("Free some space, then resume with `fabro resume {dir}`.")
            }
            (RunStatus::Paused, Some(PauseKind::Provider)) => {
                format!("A model provider could not be reached: once it is back, resume with `fabro resume {dir}`.")
            }
            (RunStatus::Paused, _) => {
                format!("Resume with `fabro resume {dir} --answers FILE` (or `--auto-approve`).")
            }
            _ => format!("Resume with `fabro resume {dir}`."),
        };
        let _ = writeln!(out, "\n{line}");
    }
    out.push('\n');
    out
}

fn run_icon(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Succeeded => "✅",
        RunStatus::Failed => "❌",
        RunStatus::Paused | RunStatus::Interrupted => "⏸️",
        RunStatus::Restarted => "🔁",
        RunStatus::Running => "⏳",
    }
}

fn stage_icon(status: StageStatus) -> &'static str {
    match status {
        StageStatus::Success => "✅",
        StageStatus::PartialSuccess => "⚠️",
        StageStatus::Retry => "🔁",
        StageStatus::Fail => "❌",
        StageStatus::Skipped => "⏭️",
        StageStatus::Custom(_) => "🔀",
    }
}

/// Seconds with one decimal below a minute, else minutes and seconds.
fn duration(ms: u64) -> String {
    if ms < 60_000 {
        format!("{}.{}s", ms / 1000, (ms % 1000) / 100)
    } else {
        let secs = ms / 1000;
        format!("{}m {:02}s", secs / 60, secs % 60)
    }
}

/// Text for a table cell: one line, pipes escaped.
fn cell(text: &str) -> String {
    text.replace(['\r', '\n'], " ").replace('|', "\\|")
}

/// Text for inline code in a table cell or heading: one line, no backticks, pipes escaped.
fn code_text(text: &str) -> String {
    cell(text).replace('`', "'")
}

/// Arbitrary text as a fenced code block, with a fence longer than any backtick run in it.
fn fenced(text: &str) -> String {
    let mut longest = 0;
    let mut run = 0;
    for c in text.chars() {
        run = if c == '`' { run + 1 } else { 0 };
        longest = longest.max(run);
    }
    let fence = "`".repeat((longest + 1).max(3));
    format!("{fence}text\n{}\n{fence}\n", text.trim_end_matches(['\n', '\r']))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_outgrow_the_backticks_inside() {
        assert_eq!(fenced("plain\n"), "```text\nplain\n```\n");
        assert_eq!(fenced("has ``` inside"), "````text\nhas ``` inside\n````\n");
    }

    #[test]
    fn a_stopped_run_says_how_to_resume_it() {
        let result = |status| RunResult {
            run_id: "r".into(),
            status,
            failure_reason: None,
            completed_nodes: vec![],
            duration_ms: 1,
            stages: vec![],
            run_dir: "run".into(),
            usage: None,
            dry_run: None,
        };
        let line = |status, pause| {
            let text = render(&result(status), pause, "w", "run");
            text.lines().find(|line| line.contains("resume")).unwrap_or_default().to_string()
        };
        assert_eq!(
            line(RunStatus::Paused, Some(PauseKind::Answer)),
            "Resume with `fabro resume run --answers FILE` (or `--auto-approve`)."
        );
        assert_eq!(
            line(RunStatus::Paused, Some(PauseKind::Ceiling)),
            "Resume with `fabro resume run --max-tokens N` or `--max-cost USD` (a higher limit)."
        );
        assert_eq!(
            line(RunStatus::Paused, Some(PauseKind::Step)),
            "Resume with `fabro resume run` (add `--step` to keep stepping)."
        );
        assert_eq!(
            line(RunStatus::Paused, Some(PauseKind::Storage)),
            "Free some space, then resume with `fabro resume run`."
        );
        assert_eq!(
            line(RunStatus::Paused, Some(PauseKind::Provider)),
            "A model provider could not be reached: once it is back, resume with `fabro resume run`."
        );
        assert_eq!(line(RunStatus::Interrupted, None), "Resume with `fabro resume run`.");
        assert_eq!(line(RunStatus::Succeeded, None), "");
    }

    #[test]
    fn durations_and_cells() {
        assert_eq!(duration(1_250), "1.2s");
        assert_eq!(duration(61_000), "1m 01s");
        assert_eq!(cell("a|b\nc"), "a\\|b c");
        assert_eq!(code_text("a`b"), "a'b");
    }
}
