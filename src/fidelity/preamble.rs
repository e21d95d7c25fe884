//! The preamble an LLM stage's prompt starts with: what the run has done so far, as Markdown, at
//! the detail its [`FidelityMode`] asks for. Pure and deterministic: [`build`] reads no stage files
//! and calls no model; [`StageSummary::from_stage_dir`] gathers what it needs once, when a stage
//! completes.
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

use std::fmt::Write as _;
use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde_json::Value;

use super::FidelityMode;
use crate::context::artifacts::Pointer;
use crate::context::Context;
use crate::outcome::{Outcome, StageStatus};
use crate::run_dir::StageRecord;
use crate::usage::Usage;

/// Lines of stdout/stderr kept for a command stage.
pub const TAIL_LINES: usize = 10;
/// Characters of an LLM response kept for a stage.
pub const RESPONSE_EXCERPT_CHARS: usize = 500;
/// Characters a context value is shortened to.
pub const VALUE_CHARS: usize = 200;

/// Token budgets of the summary levels (estimated as characters / 4).
pub const LOW_BUDGET_TOKENS: usize = 600;
pub const MEDIUM_BUDGET_TOKENS: usize = 1_500;
pub const HIGH_BUDGET_TOKENS: usize = 3_000;

/// Bytes read from the end of a log to find its last lines.
const TAIL_READ_BYTES: u64 = 64 * 1024;
/// Bytes read from the start of `response.md`.
const HEAD_READ_BYTES: u64 = 4 * 1024;
/// Characters kept of a tail, however long its lines are.
const TAIL_CHARS: usize = 2_000;
/// Characters of a script shown.
const SCRIPT_CHARS: usize = 500;
/// Files listed per stage before `(+N more)`.
const MAX_FILES: usize = 20;

/// What the preamble knows about one completed stage visit; built once when the stage completes
/// and journaled with it (`journal.jsonl`), so a resumed run has it without reading stage files.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StageSummary {
    #[serde(rename = "node")]
    pub node_id: String,
    pub visit: u32,
    pub handler: String,
    pub status: StageStatus,
    pub duration_ms: u64,
    /// The parallel branch the stage ran in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    /// Command stages: the script (from the workflow, never journaled) and the last ~10 lines
    /// of each stream.
    #[serde(skip)]
    pub script: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stdout_tail: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub stderr_tail: Option<String>,
    /// LLM stages: the model, tokens and the first ~500 characters of the response.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<Usage>,
    /// Estimated cost in US dollars, when the model's price is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub response_excerpt: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files_touched: Vec<String>,
    /// Human gates: the label of the chosen edge (or the freeform text).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub human_choice: Option<String>,
}

impl StageSummary {
    /// A summary with only the record's fields filled in.
    pub fn from_record(record: &StageRecord) -> StageSummary {
        StageSummary {
            node_id: record.node_id.clone(),
            visit: record.visit,
            handler: record.handler.clone(),
            status: record.status,
            duration_ms: record.duration_ms,
            branch: record.branch.clone(),
            failure_reason: record.failure_reason.clone(),
            notes: None,
            script: None,
            stdout_tail: None,
            stderr_tail: None,
            model: None,
            usage: record.usage,
            cost_usd: record.cost_usd,
            response_excerpt: None,
            files_touched: Vec::new(),
            human_choice: None,
        }
    }

    /// The record `result.json` lists for this visit.
    pub fn record(&self) -> StageRecord {
        StageRecord {
            node_id: self.node_id.clone(),
            visit: self.visit,
            status: self.status,
            duration_ms: self.duration_ms,
            handler: self.handler.clone(),
            failure_reason: self.failure_reason.clone(),
            usage: self.usage,
            branch: self.branch.clone(),
            cost_usd: self.cost_usd,
        }
    }

    /// Reads `status.json` (notes, model, usage, human choice, `files_touched` when present), the
    /// last lines of `stdout.log`/`stderr.log` (reading at most 64 KiB from their ends) and the
    /// start of `response.md`. Never fails: a missing or unreadable file leaves its fields empty.
    pub fn from_stage_dir(record: &StageRecord, script: Option<&str>, stage_dir: &Path) -> StageSummary {
        /// What a summary takes from `status.json`.
        #[derive(serde::Deserialize)]
        struct Status {
            #[serde(flatten)]
            outcome: Outcome,
            #[serde(default)]
            handler: String,
        }
        let status =
            crate::regular_file::read(stage_dir.join("status.json"), crate::regular_file::FileKind::Record)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<Status>(&bytes).ok());
        let Some(status) = status else {
            let mut summary = StageSummary::from_record(record);
            summary.script = script.map(str::to_string);
            return summary;
        };
        let mut summary = StageSummary::from_outcome(record, script, &status.outcome, Some(stage_dir));
        if summary.handler.is_empty() && !status.handler.trim().is_empty() {
            summary.handler = status.handler;
        }
        summary
    }

    /// The summary of a stage that ended with `outcome`; its logs and response are read from
    /// `stage_dir` when it has one (routing stages have none).
    pub fn from_outcome(
        record: &StageRecord,
        script: Option<&str>,
        outcome: &Outcome,
        stage_dir: Option<&Path>,
    ) -> StageSummary {
        let text = |value: &Option<String>| value.as_ref().filter(|s| !s.trim().is_empty()).cloned();
        let update = |key: &str| {
            outcome.context_updates.get(key).and_then(Value::as_str).filter(|s| !s.trim().is_empty())
        };
        let mut summary = StageSummary::from_record(record);
        summary.script = script.map(str::to_string);
        summary.notes = text(&outcome.notes);
        summary.model = text(&outcome.model);
        summary.usage = summary.usage.or(outcome.usage);
        summary.cost_usd = summary.cost_usd.or(outcome.cost_usd);
        if summary.failure_reason.is_none() {
            summary.failure_reason = text(&outcome.failure_reason);
        }
        summary.files_touched.clone_from(&outcome.files_touched);
        summary.human_choice = match update("human.gate.selected") {
            Some("freeform") => update("human.gate.text"),
            _ => None,
        }
        .or_else(|| update("human.gate.label"))
        .map(str::to_string)
        .or_else(|| if summary.handler == "human" { text(&outcome.preferred_label) } else { None });
        if let Some(dir) = stage_dir {
            summary.stdout_tail = read_tail(&dir.join("stdout.log"));
            summary.stderr_tail = read_tail(&dir.join("stderr.log"));
            summary.response_excerpt = read_head(&dir.join("response.md"));
        }
        summary
    }

    fn is_command(&self) -> bool {
        self.handler == "command" || self.script.is_some()
    }
}

/// The last [`TAIL_LINES`] lines of a file, reading at most [`TAIL_READ_BYTES`] from its end.
fn read_tail(path: &Path) -> Option<String> {
    // No more than a preamble ever shows: the summary is journaled with the stage.
    read_whole_tail(path).map(|tail| last_chars(tail.trim_end(), TAIL_CHARS).to_string())
}

/// The last lines of a log, reading at most [`TAIL_READ_BYTES`] from its end.
fn read_whole_tail(path: &Path) -> Option<String> {
    let mut file = std::fs::File::open(path).ok()?;
    let len = file.metadata().ok()?.len();
    let start = len.saturating_sub(TAIL_READ_BYTES);
    file.seek(SeekFrom::Start(start)).ok()?;
    let mut bytes = Vec::with_capacity((len - start) as usize);
    file.take(TAIL_READ_BYTES).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    if start == 0 {
        return Some(tail_lines(&text, TAIL_LINES).to_string());
    }
    // Reading from the middle of the file: the first line is partial. It is dropped when whole
    // lines follow it; when the window is all one long last line, its end is the tail.
    match text.trim_end_matches('\n').split_once('\n') {
        Some(_) => {
            Some(tail_lines(text.split_once('\n').map_or("", |(_, rest)| rest), TAIL_LINES).to_string())
        }
        None => Some(format!("…{}", text.trim_start_matches('\u{FFFD}'))),
    }
}

/// The first [`RESPONSE_EXCERPT_CHARS`] characters of a file, reading at most [`HEAD_READ_BYTES`].
fn read_head(path: &Path) -> Option<String> {
    let file = std::fs::File::open(path).ok()?;
    let mut bytes = Vec::new();
    file.take(HEAD_READ_BYTES).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    Some(clip(text.trim(), RESPONSE_EXCERPT_CHARS))
}

/// What [`build`] renders from.
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
    Some(match mode {
        FidelityMode::Full => return None,
        FidelityMode::Truncate => format!("Goal: {}\nRun: {}\n", input.goal.trim(), input.run_id),
        FidelityMode::Compact => compact(input),
        FidelityMode::SummaryLow => summary(input, Level::Low),
        FidelityMode::SummaryMedium => summary(input, Level::Medium),
        FidelityMode::SummaryHigh => summary(input, Level::High),
    })
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

/// Estimated tokens of a text: characters / 4, rounded up.
pub fn estimate_tokens(text: &str) -> usize {
    text.chars().count().div_ceil(4)
}

/// Whether preambles leave a context key out: engine bookkeeping, and `response.*` (the previous
/// stage's answer, which the preamble shows as such).
pub fn is_internal_key(key: &str) -> bool {
    crate::context::is_bookkeeping(key) || key.starts_with("response.")
}

// ---------------------------------------------------------------------------------------------
// Context

/// Which engine-written context keys the rendered stages already say.
#[derive(Default)]
struct Shown {
    stage: bool,
    command_output: bool,
    human: bool,
    response: bool,
}

impl Shown {
    fn note(&mut self, stage: &StageSummary, level: Option<Level>) {
        self.stage = true;
        if stage.is_command() && matches!(level, None | Some(Level::High)) {
            self.command_output = true;
        }
        if stage.human_choice.is_some() && level != Some(Level::Low) {
            self.human = true;
        }
        if stage.response_excerpt.is_some() && level == Some(Level::High) {
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

/// The context entries a preamble shows, in key order.
fn visible_context<'c>(
    context: &'c Context,
    shown: &'c Shown,
) -> impl Iterator<Item = (&'c str, &'c Value)> + 'c {
    context.iter().filter(move |(key, _)| !is_internal_key(key) && !shown.hides(key))
}

/// A context value as one line: offloaded values as a reference to their file, the rest
/// shortened to [`VALUE_CHARS`].
fn context_value(value: &Value) -> String {
    if let Some(pointer) = Pointer::parse(value) {
        // One `stat` per offloaded value (values over 100 KB only); no content is read.
        return match std::fs::metadata(pointer.path()) {
            Ok(meta) => format!("(offloaded: {}, {})", pointer.path().display(), fmt_bytes(meta.len())),
            Err(_) => format!("(offloaded: {})", pointer.path().display()),
        };
    }
    match value {
        Value::String(text) => clip_line(text, VALUE_CHARS),
        other => clip_line(&other.to_string(), VALUE_CHARS),
    }
}

/// Appends `## Context` as a bullet list (or a table), stopping before `max_bytes` with a count of
/// the values left out. Nothing when there is nothing to show.
fn push_context(out: &mut String, context: &Context, shown: &Shown, table: bool, max_bytes: usize) {
    let entries: Vec<(&str, &Value)> = visible_context(context, shown).collect();
    if entries.is_empty() {
        return;
    }
    let start = out.len();
    out.push_str(if table { "\n## Context\n\n| Key | Value |\n|---|---|\n" } else { "\n## Context\n" });
    let mut line = String::new();
    for (index, (key, value)) in entries.iter().enumerate() {
        line.clear();
        if table {
            let _ = writeln!(line, "| {} | {} |", table_cell(key), table_cell(&context_value(value)));
        } else {
            let _ = writeln!(line, "- {}: {}", clip_line(key, VALUE_CHARS), context_value(value));
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
// Compact

fn compact(input: &PreambleInput<'_>) -> String {
    let mut out = String::with_capacity(256 + input.stages.len() * 160);
    let _ = writeln!(out, "Goal: {}", input.goal.trim());
    let mut shown = Shown::default();
    if !input.stages.is_empty() {
        out.push_str("\n## Completed stages\n");
        for stage in input.stages {
            shown.note(stage, None);
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
    push_context(&mut out, input.context, &shown, false, usize::MAX);
    out
}

/// `- **id** (visit 2): fail — reason`
fn push_stage_line(out: &mut String, stage: &StageSummary, reason_chars: usize) {
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
fn push_llm_lines(out: &mut String, stage: &StageSummary, bullet: &str) {
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
fn push_labeled_code(out: &mut String, indent: &str, label: &str, text: &str) {
    if text.trim().is_empty() {
        let _ = writeln!(out, "{indent}- {label}: (empty)");
    } else if !text.contains('\n') {
        let _ = writeln!(out, "{indent}- {label}: {}", inline_code(text));
    } else {
        let _ = writeln!(out, "{indent}- {label}:");
        push_fenced(out, &format!("{indent}  "), text);
    }
}

fn push_fenced(out: &mut String, indent: &str, text: &str) {
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

// ---------------------------------------------------------------------------------------------
// Summaries

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Level {
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
}

fn summary(input: &PreambleInput<'_>, level: Level) -> String {
    // Byte lengths bound character counts, so budgeting bytes keeps the estimate within budget.
    let budget = level.budget_tokens() * 4;
    let mut out = String::with_capacity(budget + 64);
    let _ = writeln!(out, "Goal: {}", clip(input.goal.trim(), budget / 5));
    out.push('\n');
    push_counts(&mut out, input.stages);

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
    for stage in input.stages.iter().rev() {
        let block = stage_block(stage, level);
        if used + block.len() > stage_budget {
            break;
        }
        used += block.len();
        shown.note(stage, Some(level));
        blocks.push(block);
    }
    if !input.stages.is_empty() {
        out.push_str(heading);
        let elided = input.stages.len() - blocks.len();
        if elided > 0 {
            let _ = writeln!(out, "(… {elided} earlier {} elided)", plural(elided, "stage", "stages"));
        }
        for block in blocks.iter().rev() {
            out.push_str(block);
        }
    }
    if level != Level::Low {
        let max = budget.saturating_sub(out.len());
        push_context(&mut out, input.context, &shown, level == Level::High, max);
    }
    out
}

/// `Completed stages: 5 (success 3, fail 1, skipped 1)`
fn push_counts(out: &mut String, stages: &[StageSummary]) {
    let mut counts = [0usize; StageStatus::ALL.len()];
    for stage in stages {
        if let Some(index) = StageStatus::ALL.iter().position(|s| *s == stage.status) {
            counts[index] += 1;
        }
    }
    let _ = write!(out, "Completed stages: {}", stages.len());
    let mut first = true;
    for (status, count) in StageStatus::ALL.iter().zip(counts) {
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
            if !stage.handler.is_empty() {
                let _ = writeln!(out, "- Handler: {}", stage.handler);
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

// ---------------------------------------------------------------------------------------------
// Text helpers (all linear in their input)

fn plural<'a>(count: usize, one: &'a str, many: &'a str) -> &'a str {
    if count == 1 {
        one
    } else {
        many
    }
}

/// `842`, `12.4k`.
fn fmt_tokens(tokens: u64) -> String {
    if tokens < 1000 {
        tokens.to_string()
    } else {
        let tenths = (tokens + 50) / 100;
        format!("{}.{}k", tenths / 10, tenths % 10)
    }
}

fn fmt_usage(usage: &Usage) -> String {
    format!("{} tokens in / {} out", fmt_tokens(usage.input_tokens), fmt_tokens(usage.output_tokens))
}

fn fmt_files(files: &[String]) -> String {
    let mut out = String::new();
    for (index, file) in files.iter().take(MAX_FILES).enumerate() {
        if index > 0 {
            out.push_str(", ");
        }
        out.push_str(&clip_line(file, VALUE_CHARS));
    }
    if files.len() > MAX_FILES {
        let _ = write!(out, " (+{} more)", files.len() - MAX_FILES);
    }
    out
}

fn fmt_bytes(bytes: u64) -> String {
    const KB: u64 = 1024;
    if bytes < KB {
        format!("{bytes} B")
    } else if bytes < KB * KB {
        format!("{:.1} KB", bytes as f64 / KB as f64)
    } else {
        format!("{:.1} MB", bytes as f64 / (KB * KB) as f64)
    }
}

fn fmt_duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}m {}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

/// The stream's tail, at most `lines` lines and [`TAIL_CHARS`] characters; "" when absent.
fn stream_tail(tail: &Option<String>, lines: usize) -> &str {
    let text = tail.as_deref().unwrap_or("").trim_end();
    last_chars(tail_lines(text, lines), TAIL_CHARS)
}

/// The last `n` characters of `text`.
fn last_chars(text: &str, n: usize) -> &str {
    match text.char_indices().rev().nth(n.saturating_sub(1)) {
        Some((index, _)) if index > 0 => &text[index..],
        _ => text,
    }
}

/// The last `n` lines of `text` (without a trailing newline).
fn tail_lines(text: &str, n: usize) -> &str {
    let text = text.trim_end_matches(['\n', '\r']);
    let mut start = text.len();
    for _ in 0..n {
        match text[..start].rfind('\n') {
            Some(index) => start = index,
            None => return text,
        }
    }
    &text[start + 1..]
}

fn last_line(text: &str) -> Option<&str> {
    text.lines().rev().map(str::trim).find(|line| !line.is_empty())
}

/// `text` cut to `max` characters, with `…` when cut.
fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((index, _)) => format!("{}…", &text[..index]),
        None => text.to_string(),
    }
}

/// The last `max` characters of `text`, with `…` in front when cut.
fn clip_tail(text: &str, max: usize) -> String {
    match text.char_indices().rev().nth(max.saturating_sub(1)) {
        Some((index, _)) if index > 0 => format!("…{}", &text[index..]),
        _ => text.to_string(),
    }
}

/// `text` on one line (whitespace runs become one space), cut to `max` characters with `…`.
fn clip_line(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max * 4 + 4));
    let mut count = 0;
    let mut space = false;
    for ch in text.trim().chars() {
        if ch.is_whitespace() {
            space = true;
            continue;
        }
        if space {
            if count == max {
                out.push('…');
                return out;
            }
            out.push(' ');
            count += 1;
            space = false;
        }
        if count == max {
            out.push('…');
            return out;
        }
        out.push(ch);
        count += 1;
    }
    out
}

fn longest_backtick_run(text: &str) -> usize {
    let (mut best, mut run) = (0, 0);
    for byte in text.bytes() {
        if byte == b'`' {
            run += 1;
            best = best.max(run);
        } else {
            run = 0;
        }
    }
    best
}

/// `text` as inline code, with a delimiter longer than any backtick run inside.
fn inline_code(text: &str) -> String {
    let ticks = "`".repeat(longest_backtick_run(text) + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') { " " } else { "" };
    format!("{ticks}{pad}{text}{pad}{ticks}")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stage(node_id: &str, visit: u32, handler: &str, status: StageStatus) -> StageSummary {
        StageSummary {
            node_id: node_id.into(),
            visit,
            branch: None,
            handler: handler.into(),
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
        }
    }

    fn fixture_stages() -> Vec<StageSummary> {
        let mut plan = stage("plan", 1, "agent", StageStatus::Success);
        plan.model = Some("claude-sonnet-4-5".into());
        plan.usage = Some(Usage { input_tokens: 12_400, output_tokens: 3_150 });
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
        fix2.usage = Some(Usage { input_tokens: 950, output_tokens: 1_000 });
        fix2.notes = Some("patched handler".into());
        vec![plan, test, fix, review, fix2]
    }

    fn fixture_context() -> Context {
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

    fn render(mode: FidelityMode) -> Option<String> {
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

    #[test]
    fn full_has_no_preamble_and_truncate_has_goal_and_run() {
        assert_eq!(render(FidelityMode::Full), None);
        assert_eq!(render(FidelityMode::Truncate).unwrap(), "Goal: Add a /health endpoint\nRun: r-1\n");
    }

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

    const ALL_PREAMBLE_MODES: [FidelityMode; 5] = [
        FidelityMode::Truncate,
        FidelityMode::Compact,
        FidelityMode::SummaryLow,
        FidelityMode::SummaryMedium,
        FidelityMode::SummaryHigh,
    ];

    #[test]
    fn internal_keys_never_appear() {
        for mode in ALL_PREAMBLE_MODES {
            let text = render(mode).unwrap();
            for needle in
                ["internal.", "current_node", "graph.goal", "thread.id", "response.plan", "the whole plan"]
            {
                assert!(!text.contains(needle), "{mode}: {needle} in\n{text}");
            }
        }
        assert!(
            is_internal_key("currently") && is_internal_key("response.x") && !is_internal_key("responses")
        );
    }

    #[test]
    fn offloaded_values_show_as_a_reference() {
        let dir = tempfile::tempdir().unwrap();
        let values = dir.path().join("artifacts").join("values");
        std::fs::create_dir_all(&values).unwrap();
        let path = values.join(format!("{}.json", crate::context::artifacts::encode_key("command.output")));
        let raw = format!("\"{}\"", "SECRET-RAW-CONTENT ".repeat(10_000));
        std::fs::write(&path, &raw).unwrap();
        let mut context = Context::new();
        context.set("command.output", format!("file://{}", path.display()));
        context.set("notes", format!("file://{}/artifacts/values/gone.json", dir.path().display()));
        let input = PreambleInput { goal: "g", run_id: "r", stages: &[], context: &context };
        for mode in [FidelityMode::Compact, FidelityMode::SummaryMedium, FidelityMode::SummaryHigh] {
            let text = build(mode, &input).unwrap();
            assert!(text.contains(&format!("(offloaded: {}, 185.5 KB)", path.display())), "{text}");
            assert!(
                text.contains(&format!("(offloaded: {}/artifacts/values/gone.json)", dir.path().display()))
            );
            assert!(!text.contains("SECRET") && !text.contains("file://"), "{text}");
        }
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
                        s.usage = Some(Usage { input_tokens: 12_345 + i as u64, output_tokens: 987 });
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

    #[test]
    fn small_helpers() {
        assert_eq!(fmt_tokens(999), "999");
        assert_eq!(fmt_tokens(1_000), "1.0k");
        assert_eq!(fmt_tokens(12_449), "12.4k");
        assert_eq!(fmt_tokens(3_150), "3.2k");
        assert_eq!(clip_line("  a \n\n b  c ", 10), "a b c");
        assert_eq!(clip_line("abcdef", 3), "abc…");
        assert_eq!(clip_line("ab cdef", 2), "ab…");
        assert_eq!(clip("héllo", 2), "hé…");
        assert_eq!(clip_tail("héllo", 3), "…llo");
        assert_eq!(tail_lines("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail_lines("a\nb", 5), "a\nb");
        assert_eq!(inline_code("a `b`"), "`` a `b` ``");
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_duration(125_000), "2m 5s");
    }

    fn record(handler: &str, status: StageStatus) -> StageRecord {
        StageRecord {
            node_id: "test".into(),
            visit: 3,
            status,
            duration_ms: 1234,
            handler: handler.into(),
            failure_reason: Some("exited with code 1".into()),
            usage: None,
            branch: None,
            cost_usd: None,
        }
    }

    #[test]
    fn from_stage_dir_reads_bounded_tails_and_heads() {
        let dir = tempfile::tempdir().unwrap();
        let mut stdout = String::new();
        for i in 0..200_000 {
            let _ = writeln!(stdout, "line {i}");
        }
        std::fs::write(dir.path().join("stdout.log"), &stdout).unwrap();
        std::fs::write(dir.path().join("stderr.log"), "").unwrap();
        std::fs::write(dir.path().join("response.md"), "é".repeat(3_000)).unwrap();
        std::fs::write(
            dir.path().join("status.json"),
            r#"{"outcome":"fail","notes":"ran the tests","model":"m-1","usage":{"input_tokens":5,"output_tokens":7},
               "handler":"command","attempts":1,"started_at":"x","duration_ms":1234}"#,
        )
        .unwrap();
        let summary = StageSummary::from_stage_dir(
            &record("command", StageStatus::Fail),
            Some("make test"),
            dir.path(),
        );
        let expected: Vec<String> = (199_990..200_000).map(|i| format!("line {i}")).collect();
        assert_eq!(summary.stdout_tail.as_deref(), Some(expected.join("\n").as_str()));
        assert_eq!(summary.stderr_tail.as_deref(), Some(""));
        let excerpt = summary.response_excerpt.unwrap();
        assert_eq!(excerpt.chars().count(), RESPONSE_EXCERPT_CHARS + 1);
        assert!(excerpt.ends_with('…'));
        assert_eq!(summary.notes.as_deref(), Some("ran the tests"));
        assert_eq!(summary.model.as_deref(), Some("m-1"));
        assert_eq!(summary.usage, Some(Usage { input_tokens: 5, output_tokens: 7 }));
        assert_eq!(summary.script.as_deref(), Some("make test"));
        assert_eq!((summary.node_id.as_str(), summary.visit, summary.duration_ms), ("test", 3, 1234));
        assert_eq!(summary.failure_reason.as_deref(), Some("exited with code 1"));
        assert_eq!(summary.human_choice, None);
    }

    #[test]
    fn from_stage_dir_never_fails_and_reads_human_choices() {
        let dir = tempfile::tempdir().unwrap();
        let missing = StageSummary::from_stage_dir(
            &record("agent", StageStatus::Success),
            None,
            &dir.path().join("nope"),
        );
        assert_eq!(missing, StageSummary::from_record(&record("agent", StageStatus::Success)));

        std::fs::write(
            dir.path().join("status.json"),
            r#"{"outcome":"success","preferred_label":"Ship","context_updates":{"human.gate.selected":"S","human.gate.label":"[S] Ship"},"handler":"human","attempts":1,"started_at":"x","duration_ms":1}"#,
        )
        .unwrap();
        let human = StageSummary::from_stage_dir(&record("human", StageStatus::Success), None, dir.path());
        assert_eq!(human.human_choice.as_deref(), Some("[S] Ship"));
        assert_eq!((human.stdout_tail, human.response_excerpt), (None, None));

        std::fs::write(
            dir.path().join("status.json"),
            r#"{"outcome":"success","context_updates":{"human.gate.selected":"freeform","human.gate.label":"other","human.gate.text":"do it twice"}}"#,
        )
        .unwrap();
        let free = StageSummary::from_stage_dir(&record("human", StageStatus::Success), None, dir.path());
        assert_eq!(free.human_choice.as_deref(), Some("do it twice"));

        std::fs::write(dir.path().join("status.json"), "not json").unwrap();
        let broken = StageSummary::from_stage_dir(&record("human", StageStatus::Success), None, dir.path());
        assert_eq!(broken.notes, None);
    }

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
