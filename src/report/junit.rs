//! JUnit XML for a run: one `<testsuite>` named after the workflow, one `<testcase>` per stage
//! visit, in the order the visits ran.
//!
//! ```xml
//! <?xml version="1.0" encoding="UTF-8"?>
//! <testsuites name="ci" tests="2" failures="1" errors="0" skipped="0" time="1.250">
//!   <testsuite name="ci" tests="2" failures="1" errors="0" skipped="0" time="1.250">
//!     <properties>
//!       <property name="fabro.status" value="failed"/>
//!       ...
//!     </properties>
//!     <testcase classname="ci" name="build (visit 1)" time="1.200">
//!       <failure message="command exited with code 1" type="command">command exited with code 1</failure>
//!       <system-out>the last 4 KiB of stdout.log</system-out>
//!     </testcase>
//!   </testsuite>
//! </testsuites>
//! ```
//!
//! A `<failure>` is a visit whose failure ended the run: the last failed visit of a run that
//! failed (its type is the stage's handler). A failure the workflow handled (a test run that
//! failed and was routed to a fix, a visit retried later) passes, and says so in its output; a
//! conditional routes a failure on and is never one of its own. So a run that exits 0 has no
//! failures. A skipped visit is `<skipped/>`; everything else passes. How the run ended (`fabro.status`,
//! `fabro.failure_reason`, `fabro.run_id`, `fabro.run_dir`) goes in `<properties>`: a paused or
//! interrupted run lists the visits that ran so far.

use std::fmt::Write as _;
use std::path::Path;

use crate::graph::HandlerType;
use crate::outcome::StageStatus;
use crate::run_dir::{RunResult, StageRecord};
use crate::run_status::RunStatus;

use super::{seconds_3, visit_output};

/// The JUnit XML document for `result`; stage output is read from `run_dir`.
pub fn render(result: &RunResult, run_dir: &Path, workflow_name: &str) -> String {
    let fatal = fatal_visit(result);
    let stage_failures = usize::from(fatal.is_some());
    let run_case = run_outcome_case(result, stage_failures);
    let tests = result.stages.len() + usize::from(run_case.is_some());
    let failures = stage_failures + usize::from(matches!(run_case, Some(RunCase::Failed(_))));
    let skipped = result.stages.iter().filter(|s| s.status == StageStatus::Skipped).count()
        + usize::from(matches!(run_case, Some(RunCase::Paused)));
    let time = seconds_3(result.duration_ms);
    let name = escape(workflow_name);
    let counts =
        format!(r#"tests="{tests}" failures="{failures}" errors="0" skipped="{skipped}" time="{time}""#);

    let mut out = String::from("<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n");
    let _ = writeln!(out, r#"<testsuites name="{name}" {counts}>"#);
    let _ = writeln!(out, r#"  <testsuite name="{name}" {counts}>"#);
    out.push_str("    <properties>\n");
    property(&mut out, "fabro.status", result.status.as_str());
    if let Some(reason) = &result.failure_reason {
        property(&mut out, "fabro.failure_reason", reason);
    }
    property(&mut out, "fabro.run_id", &result.run_id);
    property(&mut out, "fabro.run_dir", &result.run_dir);
    out.push_str("    </properties>\n");
    for (index, stage) in result.stages.iter().enumerate() {
        testcase(&mut out, stage, run_dir, &name, fatal == Some(index));
    }
    match run_case {
        Some(RunCase::Failed(reason)) => {
            let _ = writeln!(
                out,
                "    <testcase classname=\"{name}\" name=\"run outcome\" time=\"{time}\">\n      <failure message=\"{}\" type=\"run\">{}</failure>\n    </testcase>",
                escape(&reason),
                escape_text(&reason)
            );
        }
        Some(RunCase::Paused) => {
            let _ = writeln!(
                out,
                "    <testcase classname=\"{name}\" name=\"run outcome\" time=\"{time}\">\n      <skipped message=\"paused: waiting for input\"/>\n    </testcase>"
            );
        }
        None => {}
    }
    out.push_str("  </testsuite>\n</testsuites>\n");
    out
}

/// A testcase for the run itself, when its stages alone would not show how it ended: a run that
/// failed (or was interrupted) without a failed stage, or a run that paused.
enum RunCase {
    Failed(String),
    Paused,
}

fn run_outcome_case(result: &RunResult, stage_failures: usize) -> Option<RunCase> {
    match result.status {
        RunStatus::Failed | RunStatus::Interrupted if stage_failures == 0 => Some(RunCase::Failed(
            result.failure_reason.clone().unwrap_or_else(|| format!("the run {}", result.status.as_str())),
        )),
        RunStatus::Paused => Some(RunCase::Paused),
        _ => None,
    }
}

fn is_failure(stage: &StageRecord) -> bool {
    // A final `retry` does not happen (exhausted retries end as fail), but if it did, it did not pass.
    matches!(stage.status, StageStatus::Fail | StageStatus::Retry)
        && !matches!(stage.handler, Some(HandlerType::Conditional))
}

/// The index of the visit whose failure ended the run: the last failed visit of a run that
/// failed or was interrupted.
fn fatal_visit(result: &RunResult) -> Option<usize> {
    if !matches!(result.status, RunStatus::Failed | RunStatus::Interrupted) {
        return None;
    }
    result.stages.iter().rposition(is_failure)
}

fn property(out: &mut String, name: &str, value: &str) {
    let _ = writeln!(out, r#"      <property name="{}" value="{}"/>"#, escape(name), escape(value));
}

fn testcase(out: &mut String, stage: &StageRecord, run_dir: &Path, classname: &str, failed: bool) {
    let name = escape(&format!("{} (visit {})", stage.node_id, stage.visit));
    let time = seconds_3(stage.duration_ms);
    let _ = write!(out, r#"    <testcase classname="{classname}" name="{name}" time="{time}""#);
    let mut output = visit_output(run_dir, &stage.node_id, stage.visit).filter(|text| !text.is_empty());
    if !failed && is_failure(stage) {
        let reason = stage.failure_reason.as_deref().unwrap_or("no reason given");
        let note =
            format!("[fabro] this visit failed ({reason}); the workflow handled the failure and went on\n");
        output = Some(note + output.as_deref().unwrap_or(""));
    }
    let skipped = stage.status == StageStatus::Skipped;
    if !failed && !skipped && output.is_none() {
        out.push_str("/>\n");
        return;
    }
    out.push_str(">\n");
    if failed {
        let reason = stage.failure_reason.as_deref().unwrap_or("the stage failed");
        let handler = stage.handler.as_ref().map_or("stage", |handler| handler.name());
        let _ = writeln!(
            out,
            r#"      <failure message="{}" type="{}">{}</failure>"#,
            escape(reason),
            escape(handler),
            escape_text(reason)
        );
    }
    if skipped {
        out.push_str("      <skipped/>\n");
    }
    if let Some(text) = output {
        let _ = writeln!(out, "      <system-out>{}</system-out>", escape_text(&text));
    }
    out.push_str("    </testcase>\n");
}

/// Escapes text for an XML attribute value, and drops the characters XML 1.0 does not allow
/// (control characters other than tab, newline and carriage return, DEL, U+FFFE and U+FFFF).
/// Newlines, carriage returns and tabs become character references, so they survive
/// attribute-value normalization.
pub fn escape(text: &str) -> String {
    escape_with(text, true)
}

/// Escapes text for XML element content: like [`escape`], but newlines and tabs stay as they are.
pub fn escape_text(text: &str) -> String {
    escape_with(text, false)
}

fn escape_with(text: &str, attribute: bool) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '\n' | '\t' if !attribute => out.push(c),
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&apos;"),
            '\n' => out.push_str("&#10;"),
            '\r' => out.push_str("&#13;"),
            '\t' => out.push_str("&#9;"),
            c if (c as u32) < 0x20 || c == '\u{7f}' || c == '\u{fffe}' || c == '\u{ffff}' => {}
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn escapes_markup_and_drops_control_characters() {
        assert_eq!(escape(r#"a<b>&"c"'d'"#), "a&lt;b&gt;&amp;&quot;c&quot;&apos;d&apos;");
        assert_eq!(escape("red\u{1b}[31m\u{0}x\u{fffe}"), "red[31mx");
        assert_eq!(escape("line 1\nline 2\tend\r"), "line 1&#10;line 2&#9;end&#13;");
        assert_eq!(escape("é ✓"), "é ✓");
        assert_eq!(escape_text("a\n\tb\r<\u{7}"), "a\n\tb&#13;&lt;");
    }
}
