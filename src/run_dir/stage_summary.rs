//! What a preamble knows about one completed stage visit, gathered once when the stage completes:
//! the record's fields, the outcome's notes, model and human choice, and bounded excerpts of the
//! stage's logs and response. Reading happens here and only here; rendering never opens a stage
//! file.

use std::io::{Read, Seek, SeekFrom};
use std::path::Path;

use serde_json::Value;

use super::layout;
use super::StageRecord;
use crate::excerpt::{clip, last_chars, tail_lines};
use crate::graph::HandlerType;
use crate::outcome::{Outcome, StageStatus};
use crate::usage::Usage;

/// Lines of stdout/stderr kept for a command stage.
pub const TAIL_LINES: usize = 10;
/// Characters of an LLM response kept for a stage.
pub const RESPONSE_EXCERPT_CHARS: usize = 500;
/// Bytes read from the end of a log to find its last lines.
const TAIL_READ_BYTES: u64 = 64 * 1024;
/// Bytes read from the start of `response.md`.
const HEAD_READ_BYTES: u64 = 4 * 1024;
/// Characters kept of a tail, however long its lines are.
pub const TAIL_CHARS: usize = 2_000;

/// What the preamble knows about one completed stage visit; built once when the stage completes
/// and journaled with it (`journal.jsonl`), so a resumed run has it without reading stage files.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StageSummary {
    #[serde(rename = "node")]
    pub node_id: String,
    pub visit: u32,
    /// Journaled as `run_dir`'s records write it (`""` when not known).
    #[serde(with = "crate::run_dir::recorded_handler")]
    pub handler: Option<HandlerType<String>>,
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
    /// The stage's directory relative to the run directory, as [`StageRecord::dir`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
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
            dir: record.dir.clone(),
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
            dir: self.dir.clone(),
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
            #[serde(default, with = "crate::run_dir::recorded_handler")]
            handler: Option<HandlerType<String>>,
        }
        let status =
            crate::regular_file::read(stage_dir.join(layout::STATUS), crate::regular_file::FileKind::Record)
                .ok()
                .and_then(|bytes| serde_json::from_slice::<Status>(&bytes).ok());
        let Some(status) = status else {
            let mut summary = StageSummary::from_record(record);
            summary.script = script.map(str::to_string);
            return summary;
        };
        let mut summary = StageSummary::from_outcome(record, script, &status.outcome, Some(stage_dir));
        if summary.handler.is_none() {
            summary.handler = status.handler.filter(|handler| !handler.name().trim().is_empty());
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
        .or_else(|| {
            if summary.handler == Some(HandlerType::Human) {
                text(&outcome.preferred_label)
            } else {
                None
            }
        });
        if let Some(dir) = stage_dir {
            summary.stdout_tail = read_tail(&dir.join(layout::STDOUT_LOG));
            summary.stderr_tail = read_tail(&dir.join(layout::STDERR_LOG));
            summary.response_excerpt = read_head(&dir.join(layout::RESPONSE));
        }
        summary
    }

    /// Whether the stage ran a script, so its blocks show the script and its output.
    pub fn is_command(&self) -> bool {
        self.handler == Some(HandlerType::Command) || self.script.is_some()
    }
}

/// The last [`TAIL_LINES`] lines of a file, reading at most [`TAIL_READ_BYTES`] from its end.
fn read_tail(path: &Path) -> Option<String> {
    // No more than a preamble ever shows: the summary is journaled with the stage.
    read_whole_tail(path).map(|tail| last_chars(tail.trim_end(), TAIL_CHARS).to_string())
}

/// The last lines of a log, reading at most [`TAIL_READ_BYTES`] from its end.
/// The stage wrote its directory: a link or a FIFO there is not read.
fn read_whole_tail(path: &Path) -> Option<String> {
    let mut file = crate::regular_file::open(path, false).ok()?;
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
    let file = crate::regular_file::open(path, false).ok()?;
    let mut bytes = Vec::new();
    file.take(HEAD_READ_BYTES).read_to_end(&mut bytes).ok()?;
    let text = String::from_utf8_lossy(&bytes);
    Some(clip(text.trim(), RESPONSE_EXCERPT_CHARS))
}

#[cfg(test)]
mod tests {
    use std::fmt::Write as _;

    use super::*;

    fn record(handler: &str, status: StageStatus) -> StageRecord {
        StageRecord {
            node_id: "test".into(),
            visit: 3,
            status,
            duration_ms: 1234,
            handler: Some(handler.into()),
            failure_reason: Some("exited with code 1".into()),
            usage: None,
            branch: None,
            cost_usd: None,
            dir: None,
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
        assert_eq!(summary.usage, Some(Usage::new(5, 7)));
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
}
