//! Where a run stands: running, paused, ended one way or another. The manifest, the journal,
//! checkpoints, results and events all say it in these words.

/// The status of a run.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum RunStatus {
    #[default]
    Running,
    Paused,
    Succeeded,
    Failed,
    Interrupted,
    /// A `loop_restart` edge ended this run; it continues in a new run directory.
    Restarted,
}

impl RunStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            RunStatus::Running => "running",
            RunStatus::Paused => "paused",
            RunStatus::Succeeded => "succeeded",
            RunStatus::Failed => "failed",
            RunStatus::Interrupted => "interrupted",
            RunStatus::Restarted => "restarted",
        }
    }
}
