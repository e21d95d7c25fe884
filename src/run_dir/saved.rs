//! Reading a run directory back to continue it.

use std::path::{Path, PathBuf};

use super::records::{Checkpoint, Manifest, RunResult, RunStatus, StageRecord};
use super::RunDir;

/// Why a directory cannot be resumed.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("`{}` is not a fabro run directory (no {missing})", path.display())]
    NotARun { path: PathBuf, missing: &'static str },
    #[error("`{}` is corrupt: {message}", path.display())]
    Corrupt { path: PathBuf, message: String },
    #[error("the run in `{}` already {}; there is nothing to resume", path.display(), describe(*status))]
    Finished { path: PathBuf, status: RunStatus },
    #[error("the checkpoint in `{}` names no stage to continue from", path.display())]
    NoNextStage { path: PathBuf },
    #[error("`{}` is a symbolic link; fabro does not follow links in run directories (it could write outside the run)", path.display())]
    Link { path: PathBuf },
}

fn describe(status: RunStatus) -> &'static str {
    match status {
        RunStatus::Succeeded => "succeeded",
        RunStatus::Failed => "failed (a stage failed for good; change the workflow and start a new run)",
        RunStatus::Restarted => "continued in a new run directory (see restarted_as in its manifest)",
        _ => "ended",
    }
}

/// A run as its directory holds it: what the engine needs to pick it up again.
#[derive(Debug)]
pub struct SavedRun {
    pub dir: RunDir,
    pub manifest: Manifest,
    pub checkpoint: Checkpoint,
    /// The stages recorded so far (from result.json when the run ended paused or interrupted).
    pub stages: Vec<StageRecord>,
    /// The exact source that ran.
    pub workflow_source: String,
    /// The last event sequence number, so new events continue the log.
    pub last_event_seq: u64,
    /// The number of the last checkpoint in `checkpoints/`, so new ones continue the series.
    pub last_checkpoint_seq: u64,
}

impl SavedRun {
    /// Reads a run directory; refuses ones that are not runs, are corrupt, or have ended.
    pub fn open(root: &Path) -> Result<SavedRun, ResumeError> {
        refuse_links(root)?;
        let manifest: Manifest = read_json(root, "manifest.json")?;
        let checkpoint: Checkpoint = read_json(root, "checkpoint.json")?;
        if matches!(checkpoint.status, RunStatus::Succeeded | RunStatus::Failed | RunStatus::Restarted) {
            return Err(ResumeError::Finished { path: root.to_path_buf(), status: checkpoint.status });
        }
        if checkpoint.next_node.is_none() {
            return Err(ResumeError::NoNextStage { path: root.to_path_buf() });
        }
        let workflow_source = std::fs::read_to_string(root.join("workflow.dot"))
            .map_err(|_| ResumeError::NotARun { path: root.to_path_buf(), missing: "workflow.dot" })?;
        let stages = match std::fs::read_to_string(root.join("result.json")) {
            Ok(text) => serde_json::from_str::<RunResult>(&text).map(|r| r.stages).unwrap_or_default(),
            Err(_) => Vec::new(),
        };
        let last_event_seq = std::fs::read_to_string(root.join("events.jsonl"))
            .ok()
            .and_then(|text| {
                text.lines().rev().find_map(|line| {
                    serde_json::from_str::<serde_json::Value>(line).ok()?.get("seq")?.as_u64()
                })
            })
            .unwrap_or(0);
        let last_checkpoint_seq = std::fs::read_dir(root.join("checkpoints"))
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| entry.file_name().to_str()?.split('-').next()?.parse::<u64>().ok())
            .max()
            .unwrap_or(0);
        Ok(SavedRun {
            dir: RunDir { root: root.to_path_buf() },
            manifest,
            checkpoint,
            stages,
            workflow_source,
            last_event_seq,
            last_checkpoint_seq,
        })
    }
}

/// Refuses a run directory that is, or directly holds, a symbolic link: everything fabro writes
/// when it continues a run must stay inside the run directory.
fn refuse_links(root: &Path) -> Result<(), ResumeError> {
    let is_link = |path: &Path| std::fs::symlink_metadata(path).is_ok_and(|m| m.file_type().is_symlink());
    if is_link(root) {
        return Err(ResumeError::Link { path: root.to_path_buf() });
    }
    for entry in std::fs::read_dir(root).into_iter().flatten().flatten() {
        if is_link(&entry.path()) {
            return Err(ResumeError::Link { path: entry.path() });
        }
    }
    Ok(())
}

fn read_json<T: serde::de::DeserializeOwned>(root: &Path, name: &'static str) -> Result<T, ResumeError> {
    let path = root.join(name);
    let text = std::fs::read_to_string(&path)
        .map_err(|_| ResumeError::NotARun { path: root.to_path_buf(), missing: name })?;
    serde_json::from_str(&text).map_err(|error| ResumeError::Corrupt { path, message: error.to_string() })
}
