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
    /// A model provider could not be reached for its retry window: start it (or wait), then
    /// resume.
    Provider,
    /// A stage showed no sign of life for `stall_timeout` and was stopped.
    Stall,
    /// Someone asked for the run to pause after the stage in flight (the run service's
    /// `POST /api/v1/runs/{id}/interrupt`).
    Interrupt,
}

impl PauseKind {
    /// The kind's name in `run.paused` events and the manifest.
    pub fn as_str(self) -> &'static str {
        match self {
            PauseKind::Answer => "answer",
            PauseKind::Ceiling => "ceiling",
            PauseKind::StageCeiling(_) => "stage_ceiling",
            PauseKind::Step => "step",
            PauseKind::Storage => "storage",
            PauseKind::Provider => "provider",
            PauseKind::Stall => "stall",
            PauseKind::Interrupt => "interrupt",
        }
    }
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
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum StageStatus {
    Success,
    PartialSuccess,
    Retry,
    Fail,
    Skipped,
    /// An outcome a workflow names for its own routing (kilroy's `needs_dod`): not a failure,
    /// and not a success that satisfies a goal gate.
    Custom(CustomOutcome),
}

impl StageStatus {
    /// The built-in statuses.
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
            StageStatus::Custom(custom) => custom.as_str(),
        }
    }

    /// True for the statuses that satisfy a goal gate.
    pub fn is_successful(self) -> bool {
        matches!(self, StageStatus::Success | StageStatus::PartialSuccess)
    }

    /// The built-in status a spelling names (`fail`, `failed`, `failure`, ... in any case).
    fn built_in(text: &str) -> Option<StageStatus> {
        let known = |lower: &str| match lower {
            "success" | "succeeded" => Some(StageStatus::Success),
            "partial_success" | "partially_succeeded" => Some(StageStatus::PartialSuccess),
            "retry" => Some(StageStatus::Retry),
            "fail" | "failed" | "failure" => Some(StageStatus::Fail),
            "skipped" | "skip" => Some(StageStatus::Skipped),
            _ => None,
        };
        known(text).or_else(|| known(&text.to_ascii_lowercase()))
    }
}

impl fmt::Display for StageStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Spellings of the built-in statuses, for "did you mean".
const STATUS_SPELLINGS: [&str; 10] = [
    "success",
    "partial_success",
    "retry",
    "fail",
    "skipped",
    "succeeded",
    "partially_succeeded",
    "failed",
    "failure",
    "skip",
];

/// The built-in status spelling `text` is a near miss of (`sucess`: `success`), if any: one edit
/// away, or two for a long word (`ready` is not a typo of `retry`).
pub fn closest_status_spelling(text: &str) -> Option<&'static str> {
    let lowered = text.to_ascii_lowercase();
    let near = |distance: usize| distance == 1 || (distance == 2 && lowered.len() >= 8);
    STATUS_SPELLINGS
        .iter()
        .map(|spelling| (strsim::levenshtein(&lowered, spelling), *spelling))
        .min_by_key(|(distance, _)| *distance)
        .filter(|(distance, _)| near(*distance))
        .map(|(_, spelling)| spelling)
}

/// The name of a custom outcome: a lower-case identifier (letters, digits and `_`, starting with
/// a letter) of at most [`CustomOutcome::MAX_LEN`] bytes that is not a near miss of a built-in
/// spelling (`sucess` is a typo, not an outcome). Names are interned, so a
/// [`StageStatus`] stays `Copy`; a run meets a handful of them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct CustomOutcome(&'static str);

impl CustomOutcome {
    pub const MAX_LEN: usize = 64;
    /// Distinct names one process interns at most; beyond, a new name is refused.
    const MAX_NAMES: usize = 4096;

    /// The outcome named `text` (lower-cased), or `None` when `text` is not such a name.
    pub fn new(text: &str) -> Option<CustomOutcome> {
        let name = text.trim().to_ascii_lowercase();
        let mut chars = name.chars();
        let well_formed = name.len() <= Self::MAX_LEN
            && chars.next().is_some_and(|first| first.is_ascii_lowercase())
            && chars.all(|ch| ch.is_ascii_lowercase() || ch.is_ascii_digit() || ch == '_');
        if !well_formed || closest_status_spelling(&name).is_some() {
            return None;
        }
        static NAMES: std::sync::LazyLock<std::sync::Mutex<std::collections::HashSet<&'static str>>> =
            std::sync::LazyLock::new(Default::default);
        let mut names = NAMES.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        if let Some(known) = names.get(name.as_str()) {
            return Some(CustomOutcome(known));
        }
        if names.len() >= Self::MAX_NAMES {
            return None;
        }
        let interned: &'static str = Box::leak(name.into_boxed_str());
        names.insert(interned);
        Some(CustomOutcome(interned))
    }

    pub fn as_str(self) -> &'static str {
        self.0
    }
}

/// The spelling was neither a built-in status nor a custom outcome name.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UnknownStatus(pub String);

impl fmt::Display for UnknownStatus {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "unknown outcome `{}`", self.0)?;
        if let Some(meant) = closest_status_spelling(self.0.trim()) {
            write!(f, " (did you mean `{meant}`?)")?;
        }
        f.write_str(
            "; expected success, partial_success, retry, fail, skipped or a custom outcome (a lower-case name \
             of letters, digits and _)",
        )
    }
}

impl std::error::Error for UnknownStatus {}

impl FromStr for StageStatus {
    type Err = UnknownStatus;

    /// Accepts both the Attractor and the Fabro spellings (`fail`/`failed`, ...),
    /// case-insensitively, and any other well-formed name as a custom outcome.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let text = s.trim();
        StageStatus::built_in(text)
            .or_else(|| CustomOutcome::new(text).map(StageStatus::Custom))
            .ok_or_else(|| UnknownStatus(s.to_string()))
    }
}

/// Written by its canonical spelling.
impl serde::Serialize for StageStatus {
    fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.as_str())
    }
}

/// Read from any accepted spelling.
impl<'de> serde::Deserialize<'de> for StageStatus {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        let text = <std::borrow::Cow<'de, str> as serde::Deserialize>::deserialize(deserializer)?;
        text.parse().map_err(serde::de::Error::custom)
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
        for status in StageStatus::ALL {
            assert_eq!(status.as_str().parse(), Ok(status));
        }
    }

    #[test]
    fn other_names_are_custom_outcomes_and_nonsense_is_refused() {
        let needs_dod: StageStatus = "Needs_DoD".parse().unwrap();
        assert_eq!(needs_dod.as_str(), "needs_dod");
        assert_eq!("needs_dod".parse(), Ok(needs_dod));
        assert_eq!("ready".parse::<StageStatus>().map(|status| status.as_str()), Ok("ready"));
        assert!(!needs_dod.is_successful());
        assert_eq!(serde_json::to_value(needs_dod).unwrap(), "needs_dod");
        assert_eq!(serde_json::from_value::<StageStatus>("needs_dod".into()).unwrap(), needs_dod);
        for nonsense in ["", "2fast", "needs dod", "ça", "sucess", "partial_sucess", &"x".repeat(65)] {
            assert!(nonsense.parse::<StageStatus>().is_err(), "{nonsense}");
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
    pub context_tokens_saved: crate::usage::Savings,
    /// Names of the project memory entries an agent stage wrote.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub memory_added: Vec<String>,
    /// The context window an agent stage went by, and the token ratio it counted with.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub context_window: Option<crate::usage::ContextWindow>,
    /// Tokens and estimated cost per model, when an LLM stage failed over (`fallback_models`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub usage_by_model: std::collections::BTreeMap<String, crate::usage::ModelUsage>,
    /// An answer of an LLM stage was cut off at the output limit.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub truncated: bool,
    /// Some of an LLM stage's usage is fabro's estimate: the server streamed answers without
    /// token counts (`llm.usage_estimated`).
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub usage_estimated: bool,
    /// Why a failed stage failed; a failure no handler classifies is `deterministic`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_class: Option<FailureClass>,
    /// The project instruction files (AGENTS.md, ...) an agent stage's system prompt carried,
    /// relative to the repository root, with what the budget cut.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub project_docs: Vec<String>,
    /// The container the stage's programs ran in (sandbox=podman or docker).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub container: Option<ContainerRecord>,
    /// What an LLM stage sent and what came back, for its conversation thread under `full`
    /// fidelity; kept in memory only (the stage's `prompt.md` and `response.md` record it).
    #[serde(skip)]
    pub exchange: Option<Exchange>,
}

/// A container stages ran in: its id, the image as named and the image's id (the digest of its
/// configuration, `sha256:...`), which names exactly what ran.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ContainerRecord {
    pub id: String,
    pub image: String,
    pub image_digest: String,
}

/// One prompt of an LLM stage, exactly as sent (with its preamble), and the answer.
#[derive(Debug, Clone, PartialEq)]
pub struct Exchange {
    pub prompt: String,
    pub response: String,
    /// The whole conversation from the prompt to the answer when the stage had tool turns (its
    /// thread carries them); empty otherwise.
    pub conversation: Vec<crate::chat::ChatMessage>,
}

/// Why a stage failed, as far as what to do about it goes (context key `failure_class`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureClass {
    /// Rate limits, timeouts, the network, 5xx, a provider outage: worth trying again.
    TransientInfra,
    /// Authentication, bad configuration, invalid requests, a command that exits non-zero: the
    /// same attempt fails the same way.
    Deterministic,
    /// The context length, a token, turn, output or cost limit, a quota.
    BudgetExhausted,
    /// The run was cancelled.
    Canceled,
    /// A permission, a scope or a team rule refused it (a blocking hook).
    Structural,
}

impl FailureClass {
    pub const NAMES: &'static [&'static str] =
        &["transient_infra", "deterministic", "budget_exhausted", "canceled", "structural"];

    pub fn as_str(self) -> &'static str {
        match self {
            FailureClass::TransientInfra => "transient_infra",
            FailureClass::Deterministic => "deterministic",
            FailureClass::BudgetExhausted => "budget_exhausted",
            FailureClass::Canceled => "canceled",
            FailureClass::Structural => "structural",
        }
    }
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
            context_window: None,
            usage_by_model: Default::default(),
            truncated: false,
            usage_estimated: false,
            project_docs: Vec::new(),
            container: None,
            failure_class: None,
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

    /// This outcome, failed for `class`'s kind of reason.
    pub fn with_class(mut self, class: FailureClass) -> Self {
        self.failure_class = Some(class);
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
        let custom: Outcome = serde_json::from_str(r#"{"outcome":"needs_dod"}"#).unwrap();
        assert_eq!(custom.status.as_str(), "needs_dod");
        assert!(serde_json::from_str::<Outcome>(r#"{"outcome":"not good"}"#).is_err());
    }
}
