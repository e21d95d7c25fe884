//! The status a stage ends with, and its DOT/condition spellings in one place.

use std::fmt;
use std::str::FromStr;

/// What a paused run waits for, so that the right resume can be suggested.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PauseKind {
    /// A human gate waits for an answer.
    Answer,
    /// A `--max-tokens`/`--max-cost` ceiling was reached.
    Ceiling,
    /// A stage reached its own ceiling (`max_stage_tokens` or `max_stage_cost`).
    StageCeiling(crate::usage::StageBound),
    /// Step mode stopped after a stage.
    Step,
    /// A record or stage file could not be written (a full disk): free space, then resume.
    Storage,
}

/// Why a run (or a stage) paused: what it waits for, and the sentence that says so.
#[derive(Debug, Clone, PartialEq)]
pub struct Pause {
    pub kind: PauseKind,
    pub reason: String,
    /// The stage ceiling a stage stopped at (`max_stage_tokens`/`max_stage_cost`): the run keeps
    /// it so the stage runs again only with a higher bound.
    pub stage_ceiling: Option<crate::usage::StageCeiling>,
}

impl Pause {
    pub fn new(kind: PauseKind, reason: impl Into<String>) -> Pause {
        Pause { kind, reason: reason.into(), stage_ceiling: None }
    }
}

impl fmt::Display for Pause {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.reason)
    }
}

/// How a stage ended. Conditions compare against it as `outcome=...`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum StageStatus {
    Success,
    PartialSuccess,
    Retry,
    Fail,
    Skipped,
}

impl StageStatus {
    pub const ALL: [StageStatus; 5] = [
        StageStatus::Success,
        StageStatus::PartialSuccess,
        StageStatus::Retry,
        StageStatus::Fail,
        StageStatus::Skipped,
    ];

    /// The canonical spelling, as written in status files and events.
    pub fn as_str(self) -> &'static str {
        match self {
            StageStatus::Success => "success",
            StageStatus::PartialSuccess => "partial_success",
            StageStatus::Retry => "retry",
            StageStatus::Fail => "fail",
            StageStatus::Skipped => "skipped",
        }
    }

    /// True for the statuses that satisfy a goal gate.
    pub fn is_successful(self) -> bool {
        matches!(self, StageStatus::Success | StageStatus::PartialSuccess)
    }
}

impl fmt::Display for StageStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The spelling was not one of the accepted status names.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown outcome `{0}`; expected success, partial_success, retry, fail or skipped")]
pub struct UnknownStatus(pub String);

impl FromStr for StageStatus {
    type Err = UnknownStatus;

    /// Accepts both the Attractor and the Fabro spellings (`fail`/`failed`, ...), case-insensitively.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s.trim().to_ascii_lowercase().as_str() {
            "success" | "succeeded" => Ok(StageStatus::Success),
            "partial_success" | "partially_succeeded" => Ok(StageStatus::PartialSuccess),
            "retry" => Ok(StageStatus::Retry),
            "fail" | "failed" | "failure" => Ok(StageStatus::Fail),
            "skipped" | "skip" => Ok(StageStatus::Skipped),
            _ => Err(UnknownStatus(s.to_string())),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_spellings_parse_to_one_status() {
        assert_eq!("succeeded".parse(), Ok(StageStatus::Success));
        assert_eq!("FAILED".parse(), Ok(StageStatus::Fail));
        assert_eq!("partially_succeeded".parse(), Ok(StageStatus::PartialSuccess));
        assert!("sucess".parse::<StageStatus>().is_err());
        for status in StageStatus::ALL {
            assert_eq!(status.as_str().parse(), Ok(status));
        }
    }
}

/// What a stage reports when it ends: its status and how it wants the run to continue. This is
/// also the Attractor status-file contract (`status.json`); `preferred_next_label` is accepted as
/// another name for `preferred_label`.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct Outcome {
    #[serde(rename = "outcome", deserialize_with = "deserialize_status")]
    pub status: StageStatus,
    #[serde(default, alias = "preferred_next_label", skip_serializing_if = "Option::is_none")]
    pub preferred_label: Option<String>,
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub suggested_next_ids: Vec<String>,
    #[serde(default, skip_serializing_if = "serde_json::Map::is_empty")]
    pub context_updates: serde_json::Map<String, serde_json::Value>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub notes: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// The model that answered an LLM stage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    /// Tokens an LLM stage used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::usage::Usage>,
    /// Estimated cost of an LLM stage in US dollars (when the model's price is known).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// Files an agent stage wrote or edited, relative to the work directory.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub files_touched: Vec<String>,
    /// Estimated tokens the context layers kept out of an agent stage's model calls, per layer.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub context_tokens_saved: crate::agent_context::Savings,
    /// Names of the project memory entries an agent stage wrote.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory_added: Vec<String>,
    /// What an LLM stage sent and what came back, for its conversation thread under `full`
    /// fidelity; kept in memory only (the stage's `prompt.md` and `response.md` record it).
    #[serde(skip)]
    pub exchange: Option<Exchange>,
}

/// One prompt of an LLM stage, exactly as sent (with its preamble), and the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Exchange {
    pub prompt: String,
    pub response: String,
    /// The whole conversation from the prompt to the answer when the stage had tool turns (its
    /// thread carries them); empty otherwise.
    pub conversation: Vec<crate::backends::chat::ChatMessage>,
}

/// Reads a status in any accepted spelling (`failed`, `succeeded`, ...).
fn deserialize_status<'de, D: serde::Deserializer<'de>>(deserializer: D) -> Result<StageStatus, D::Error> {
    let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(deserializer)?;
    text.parse().map_err(serde::de::Error::custom)
}

impl Outcome {
    pub fn new(status: StageStatus) -> Self {
        Outcome {
            status,
            preferred_label: None,
            suggested_next_ids: Vec::new(),
            context_updates: serde_json::Map::new(),
            notes: None,
            failure_reason: None,
            model: None,
            usage: None,
            cost_usd: None,
            files_touched: Vec::new(),
            context_tokens_saved: Default::default(),
            memory_added: Vec::new(),
            exchange: None,
        }
    }

    pub fn success() -> Self {
        Self::new(StageStatus::Success)
    }

    pub fn fail(reason: impl Into<String>) -> Self {
        Outcome { failure_reason: Some(reason.into()), ..Self::new(StageStatus::Fail) }
    }

    pub fn with_notes(mut self, notes: impl Into<String>) -> Self {
        self.notes = Some(notes.into());
        self
    }

    pub fn with_update(mut self, key: impl Into<String>, value: impl Into<serde_json::Value>) -> Self {
        self.context_updates.insert(key.into(), value.into());
        self
    }
}

#[cfg(test)]
mod outcome_tests {
    use super::*;

    #[test]
    fn status_files_accept_both_contracts() {
        let attractor: Outcome = serde_json::from_str(
            r#"{"outcome":"failed","preferred_next_label":"Fix","suggested_next_ids":["fix"],"context_updates":{"a":1},"notes":"n"}"#,
        )
        .unwrap();
        assert_eq!(attractor.status, StageStatus::Fail);
        assert_eq!(attractor.preferred_label.as_deref(), Some("Fix"));
        assert_eq!(attractor.context_updates["a"], 1);
        let written = serde_json::to_value(Outcome::success()).unwrap();
        assert_eq!(written, serde_json::json!({"outcome": "success"}));
        assert!(serde_json::from_str::<Outcome>(r#"{"outcome":"great"}"#).is_err());
    }
}
