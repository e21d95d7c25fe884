//! The JSON records of a run directory.

use std::collections::BTreeMap;

use crate::context::Context;
use crate::outcome::{Outcome, StageStatus};

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    Running,
    Paused,
    Succeeded,
    Failed,
    Interrupted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Paused => "paused",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
        }
    }
}

/// `manifest.json`: what ran, from where, when, and how it ended.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    pub run_id: String,
    pub workflow: String,
    pub source_path: String,
    pub source_sha256: String,
    pub goal: String,
    pub work_dir: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub status: RunStatus,
    pub tool_version: String,
}

/// `checkpoint.json`: everything needed to continue after the last completed stage.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Checkpoint {
    pub run_id: String,
    pub status: RunStatus,
    /// The stage that just completed (or, when paused, the stage waiting for input).
    pub current_node: String,
    /// Where the run goes next; `None` when it has ended.
    pub next_node: Option<String>,
    pub completed_nodes: Vec<String>,
    pub node_outcomes: BTreeMap<String, StageStatus>,
    pub node_visits: BTreeMap<String, u32>,
    pub node_retries: BTreeMap<String, u32>,
    pub context: Context,
    pub timestamp: String,
}

/// One visit of one stage, as `result.json` lists it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StageRecord {
    pub node_id: String,
    pub visit: u32,
    pub status: StageStatus,
    pub duration_ms: u64,
}

/// `result.json`: how the run ended.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RunResult {
    pub run_id: String,
    pub status: RunStatus,
    pub failure_reason: Option<String>,
    pub completed_nodes: Vec<String>,
    pub duration_ms: u64,
    pub stages: Vec<StageRecord>,
    pub run_dir: String,
}

/// `stages/<node>/<visit>/status.json`: the stage's outcome plus how it ran.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct StageStatusFile {
    #[serde(flatten)]
    pub outcome: Outcome,
    pub handler: String,
    pub attempts: u32,
    pub started_at: String,
    pub duration_ms: u64,
}
