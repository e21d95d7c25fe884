//! A run's retrospective (`fabro retro RUN`, `fabro run --retro`): a deterministic part, what
//! every stage visit cost and how it went, with totals, read from the run's records; and, when a
//! provider is configured, a narrative part in which a model reads the run's events and rates
//! the run (effortless, smooth, bumpy, struggled), names the friction points and suggests
//! follow-ups. Written as `retro.json` and `retro.md` in the run directory.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::path::Path;

use serde::{Deserialize, Serialize};

use super::{seconds, shorten};
use crate::outcome::StageStatus;
use crate::run_dir::layout;
use crate::run_dir::{RunView, StageRecord, StageStatusFile, ViewError};
use crate::run_status::RunStatus;

/// The most characters of the event log a narrative is given (the log's end when it is longer).
const MAX_EVENT_CHARS: usize = 60_000;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Retro {
    pub run_id: String,
    pub workflow: String,
    pub status: RunStatus,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    pub stages: Vec<RetroStage>,
    pub totals: RetroTotals,
    /// The model's reading of the run, when a provider was configured and answered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub narrative: Option<Narrative>,
}

/// One stage visit.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct RetroStage {
    pub node_id: String,
    pub visit: u32,
    pub outcome: StageStatus,
    pub duration_ms: u64,
    /// Attempts after the first (`max_retries`).
    pub retries: u32,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub files_touched: Vec<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
}

#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct RetroTotals {
    pub stage_visits: usize,
    pub failed_visits: usize,
    pub retries: u32,
    pub duration_ms: u64,
    /// The summed cost of the visits whose price is known.
    pub cost_usd: f64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// Distinct files the stages wrote or edited.
    pub files_touched: usize,
}

/// How the run went, in a model's words.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct Narrative {
    pub rating: Rating,
    pub summary: String,
    pub friction_points: Vec<String>,
    pub follow_ups: Vec<String>,
    /// The model that wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Rating {
    Effortless,
    Smooth,
    Bumpy,
    Struggled,
}

impl Rating {
    pub const NAMES: [&'static str; 4] = ["effortless", "smooth", "bumpy", "struggled"];
}

#[derive(Debug, thiserror::Error)]
pub enum RetroError {
    #[error(transparent)]
    View(#[from] ViewError),
    #[error("the run in {0} has no stage records yet")]
    NoRecords(String),
    #[error("cannot write {path}: {source}")]
    Write { path: String, source: std::io::Error },
}

impl Retro {
    /// The deterministic part, from the run's records in `root`.
    pub fn read(root: &Path) -> Result<Retro, RetroError> {
        let view = RunView::open(root)?;
        let result = view.result.as_ref().ok_or_else(|| RetroError::NoRecords(root.display().to_string()))?;
        let stages: Vec<RetroStage> = result.stages.iter().map(|record| stage(root, record)).collect();
        let mut files = BTreeSet::new();
        let mut totals = RetroTotals { stage_visits: stages.len(), ..RetroTotals::default() };
        for stage in &stages {
            totals.failed_visits += usize::from(stage.outcome == StageStatus::Fail);
            totals.retries += stage.retries;
            totals.duration_ms += stage.duration_ms;
            totals.cost_usd += stage.cost_usd.unwrap_or(0.0);
            totals.input_tokens += stage.input_tokens;
            totals.output_tokens += stage.output_tokens;
            files.extend(stage.files_touched.iter().cloned());
        }
        totals.files_touched = files.len();
        totals.duration_ms = totals.duration_ms.max(result.duration_ms);
        Ok(Retro {
            run_id: result.run_id.clone(),
            workflow: view.manifest.workflow.clone(),
            status: result.status,
            failure_reason: result.failure_reason.clone(),
            stages,
            totals,
            narrative: None,
        })
    }

    /// What a model is asked for the narrative part: the deterministic part and the run's events.
    pub fn narrative_prompt(&self, events: &str) -> String {
        let facts =
            serde_json::to_string_pretty(&Retro { narrative: None, ..self.clone() }).unwrap_or_default();
        let start = events.len().saturating_sub(MAX_EVENT_CHARS);
        let start = (start..events.len()).find(|i| events.is_char_boundary(*i)).unwrap_or(events.len());
        format!(
            "You write the retrospective of a finished workflow run. The run's facts:\n\n{facts}\n\nIts event \
             log (JSON lines{}):\n\n{}\n\nAnswer with one JSON object and nothing else: {{\"rating\": one of \
             \"effortless\", \"smooth\", \"bumpy\", \"struggled\", \"summary\": two sentences on how the run \
             went, \"friction_points\": [what slowed or broke it, each one sentence naming the stage], \
             \"follow_ups\": [concrete changes to the workflow or the code that would help next time]}}",
            if start > 0 { ", its last part" } else { "" },
            &events[start..]
        )
    }

    /// Reads a model's answer to [`Retro::narrative_prompt`]: the JSON object in it.
    pub fn parse_narrative(answer: &str, model: Option<String>) -> Result<Narrative, String> {
        let start = answer.find('{').ok_or("the answer holds no JSON object")?;
        let end =
            answer.rfind('}').filter(|end| *end > start).ok_or("the answer's JSON object is not closed")?;
        #[derive(Deserialize)]
        struct Answer {
            rating: String,
            #[serde(default)]
            summary: String,
            #[serde(default)]
            friction_points: Vec<String>,
            #[serde(default)]
            follow_ups: Vec<String>,
        }
        let parsed: Answer = serde_json::from_str(&answer[start..=end])
            .map_err(|error| format!("the answer's JSON object cannot be read: {error}"))?;
        let rating =
            serde_json::from_value(serde_json::Value::String(parsed.rating.trim().to_ascii_lowercase()))
                .map_err(|_| {
                    format!("rating `{}` is not one of {}", parsed.rating, Rating::NAMES.join(", "))
                })?;
        Ok(Narrative {
            rating,
            summary: parsed.summary.trim().to_string(),
            friction_points: parsed.friction_points,
            follow_ups: parsed.follow_ups,
            model,
        })
    }

    /// The narrative part: `backend` reads the run's facts and the events in `root`.
    pub async fn narrate(
        &self,
        root: &Path,
        backend: &dyn crate::backends::Backend,
    ) -> Result<Narrative, String> {
        let events = crate::regular_file::read_to_string(
            root.join(layout::EVENTS),
            crate::regular_file::FileKind::EventLog,
        )
        .unwrap_or_default();
        let prompt = self.narrative_prompt(&events);
        let request = crate::backends::LlmRequest {
            node_id: "retro",
            visit: 1,
            agentic: false,
            prompt: &prompt,
            model: None,
            provider: None,
            reasoning_effort: None,
            timeout: None,
            thread: None,
            history: &[],
            stage: None,
        };
        let answer = backend.complete(&request).await.map_err(|error| error.to_string())?;
        Retro::parse_narrative(&answer.text, answer.model)
    }

    /// Writes `retro.json` and `retro.md` into `root`, each replaced atomically.
    pub fn write(&self, root: &Path) -> Result<(), RetroError> {
        let json = serde_json::to_string_pretty(self).unwrap_or_default() + "\n";
        for (name, text) in [(layout::RETRO_JSON, json), (layout::RETRO_MD, self.markdown())] {
            let path = root.join(name);
            crate::atomic_file::write_atomic(&path, text.as_bytes())
                .map_err(|source| RetroError::Write { path: path.display().to_string(), source })?;
        }
        Ok(())
    }

    pub fn markdown(&self) -> String {
        let mut out = String::new();
        let _ = writeln!(out, "# Retrospective: {} ({})\n", self.workflow, self.status.as_str());
        let totals = &self.totals;
        let _ = writeln!(
            out,
            "{} stage visits, {} failed, {} retries, {}, {} tokens in / {} out, ${:.4}, {} files touched.",
            totals.stage_visits,
            totals.failed_visits,
            totals.retries,
            seconds(totals.duration_ms),
            totals.input_tokens,
            totals.output_tokens,
            totals.cost_usd,
            totals.files_touched
        );
        if let Some(reason) = &self.failure_reason {
            let _ = writeln!(out, "\nThe run failed: {reason}");
        }
        if let Some(narrative) = &self.narrative {
            let rating = serde_json::to_value(narrative.rating).ok();
            let rating = rating.as_ref().and_then(|r| r.as_str()).unwrap_or("");
            let by = narrative.model.as_deref().map(|m| format!(" (by {m})")).unwrap_or_default();
            let _ = writeln!(out, "\n## How it went: {rating}{by}\n\n{}", narrative.summary);
            for (title, items) in
                [("Friction points", &narrative.friction_points), ("Follow-ups", &narrative.follow_ups)]
            {
                if !items.is_empty() {
                    let _ = writeln!(out, "\n### {title}\n");
                    for item in items {
                        let _ = writeln!(out, "- {item}");
                    }
                }
            }
        }
        out.push_str(
            "\n## Stages\n\n| stage | visit | outcome | time | retries | cost | files | failure |\n",
        );
        out.push_str("|---|---:|---|---:|---:|---:|---:|---|\n");
        for stage in &self.stages {
            let _ = writeln!(
                out,
                "| {} | {} | {} | {} | {} | {} | {} | {} |",
                stage.node_id,
                stage.visit,
                stage.outcome,
                seconds(stage.duration_ms),
                stage.retries,
                stage.cost_usd.map_or_else(|| "-".to_string(), |cost| format!("${cost:.4}")),
                stage.files_touched.len(),
                stage.failure_reason.as_deref().map(cell).unwrap_or_default()
            );
        }
        out
    }
}

/// A stage visit from its record and its `status.json`.
fn stage(root: &Path, record: &StageRecord) -> RetroStage {
    let status: Option<StageStatusFile> = record
        .dir_in(root)
        .and_then(|dir| {
            crate::regular_file::read_to_string(
                dir.join(layout::STATUS),
                crate::regular_file::FileKind::Record,
            )
            .ok()
        })
        .and_then(|text| serde_json::from_str(&text).ok());
    let usage = record.usage.unwrap_or_default();
    RetroStage {
        node_id: record.node_id.clone(),
        visit: record.visit,
        outcome: record.status,
        duration_ms: record.duration_ms,
        retries: status.as_ref().map_or(0, |status| status.attempts.saturating_sub(1)),
        cost_usd: record.cost_usd,
        input_tokens: usage.input_tokens,
        output_tokens: usage.output_tokens,
        files_touched: status.map(|status| status.outcome.files_touched).unwrap_or_default(),
        failure_reason: record.failure_reason.clone(),
    }
}

/// Text fit for one Markdown table cell.
fn cell(text: &str) -> String {
    shorten(&text.lines().next().unwrap_or("").replace('|', "\\|"), 120)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_narrative_is_read_from_the_json_object_in_the_answer() {
        let answer = "Here it is:\n{\"rating\": \"Bumpy\", \"summary\": \"Tests failed once.\", \
                      \"friction_points\": [\"test failed on the first try\"], \"follow_ups\": [\"pin the toolchain\"]}";
        let narrative = Retro::parse_narrative(answer, Some("m".into())).unwrap();
        assert_eq!(narrative.rating, Rating::Bumpy);
        assert_eq!(narrative.friction_points, ["test failed on the first try"]);
        let error = Retro::parse_narrative("{\"rating\": \"meh\"}", None).unwrap_err();
        assert_eq!(error, "rating `meh` is not one of effortless, smooth, bumpy, struggled");
        assert!(Retro::parse_narrative("no json", None).is_err());
    }

    #[test]
    fn long_failure_reasons_fit_one_cell() {
        assert_eq!(cell("a | b\nsecond line"), "a \\| b");
        assert_eq!(cell(&"é".repeat(130)).chars().count(), 121);
    }
}
