//! Reading a run directory back to continue it.

use std::path::{Path, PathBuf};

use super::journal::{Journal, JournalEnd};
use super::layout;
use super::records::{Checkpoint, Manifest, RunResult, StageRecord, StageStatusFile};
use super::RunDir;
use crate::run_dir::stage_summary::StageSummary;
use crate::run_status::RunStatus;

/// Why a directory cannot be resumed.
#[derive(Debug, thiserror::Error)]
pub enum ResumeError {
    #[error("`{}` is not a fabro run directory (no {missing})", path.display())]
    NotARun { path: PathBuf, missing: &'static str },
    #[error("`{}` is corrupt: {message}", path.display())]
    Corrupt { path: PathBuf, message: String },
    #[error("{}", finished(path, *status, rewind.as_ref()))]
    Finished {
        path: PathBuf,
        status: RunStatus,
        /// For a run that failed at a stage: how to run that stage again.
        rewind: Option<RewindHint>,
    },
    #[error("the checkpoint in `{}` names no stage to continue from", path.display())]
    NoNextStage { path: PathBuf },
    #[error("the run in `{}` stopped before its first stage completed; there is nothing to resume: start it again with `fabro run` (the same --run-dir is reused)", path.display())]
    NotStarted { path: PathBuf },
    #[error("`{}` is a symbolic link; fabro does not follow links in run directories (it could write outside the run)", path.display())]
    Link { path: PathBuf },
    #[error(transparent)]
    RunDir(#[from] super::RunDirError),
}

/// The stage a failed run ended at, and the stage visit before it, which `fabro rewind --to`
/// goes back to so that `fabro resume` runs the failed stage again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RewindHint {
    pub failed: String,
    /// `NODE@VISIT`.
    pub to: String,
}

impl RewindHint {
    /// For the failed stage `failed`: the main-line visit completed before its last visit.
    fn of(failed: &str, summaries: &[StageSummary]) -> Option<RewindHint> {
        let main: Vec<&StageSummary> = summaries.iter().filter(|s| s.branch.is_none()).collect();
        let at = main.iter().rposition(|s| s.node_id == failed)?;
        let before = main[..at].last()?;
        Some(RewindHint { failed: failed.to_string(), to: format!("{}@{}", before.node_id, before.visit) })
    }
}

fn finished(path: &Path, status: RunStatus, rewind: Option<&RewindHint>) -> String {
    let path = path.display();
    match (status, rewind) {
        (RunStatus::Failed, Some(RewindHint { failed, to })) => format!(
            "the run in `{path}` already failed (stage `{failed}` failed for good); there is nothing to resume. \
             To run `{failed}` again (once what made it fail is fixed), go back to right before it with \
             `fabro rewind {path} --to {to}`, then `fabro resume {path}`; or start a new run"
        ),
        (RunStatus::Failed, None) => format!(
            "the run in `{path}` already failed; there is nothing to resume. `fabro rewind {path} --to NODE` \
             goes back to right after a stage so that `fabro resume {path}` runs the later ones again; or start \
             a new run"
        ),
        (RunStatus::Succeeded, _) => format!("the run in `{path}` already succeeded; there is nothing to resume"),
        (RunStatus::Restarted, _) => format!(
            "the run in `{path}` already continued in a new run directory (see restarted_as in its manifest); \
             there is nothing to resume"
        ),
        _ => format!("the run in `{path}` already ended; there is nothing to resume"),
    }
}

/// A run as its directory holds it: what the engine needs to pick it up again.
#[derive(Debug)]
pub struct SavedRun {
    pub dir: RunDir,
    /// The run's lock, taken before anything was read: what is read is what the resume drives.
    pub lock: super::RunLock,
    pub manifest: Manifest,
    /// The state to continue from: the journal folded over the latest snapshot, or for a run
    /// made before the journal, `checkpoint.json`.
    pub checkpoint: Checkpoint,
    /// The stage visits completed so far, in order, with what preambles say about them.
    pub summaries: Vec<StageSummary>,
    /// The exact source that ran.
    pub workflow_source: String,
    /// The last event sequence number, so new events continue the log.
    pub last_event_seq: u64,
    /// Where the journal ends (entry 0: the run has none yet).
    pub journal: JournalEnd,
}

impl SavedRun {
    /// Takes the run's lock and reads its directory; refuses ones that are not runs, are
    /// corrupt, are driven by another process, or have ended.
    pub fn open(root: &Path) -> Result<SavedRun, ResumeError> {
        refuse_links(root)?;
        if !std::fs::symlink_metadata(root.join(layout::MANIFEST)).is_ok_and(|meta| meta.is_file()) {
            if super::never_started(root).is_some() {
                return Err(ResumeError::NotStarted { path: root.to_path_buf() });
            }
            return Err(ResumeError::NotARun { path: root.to_path_buf(), missing: layout::MANIFEST });
        }
        let dir = RunDir { root: root.to_path_buf() };
        let lock = dir.lock()?;
        let manifest: Manifest = read_json(root, layout::MANIFEST)?;
        let (checkpoint, summaries, journal) = if Journal::exists(root) {
            let Some((state, end)) = super::journal::read_state(root).map_err(corrupt)? else {
                return Err(ResumeError::NotStarted { path: root.to_path_buf() });
            };
            (state.checkpoint(&manifest.run_id), state.stages, end)
        } else {
            let checkpoint: Checkpoint = read_json(root, layout::CHECKPOINT)?;
            let summaries = legacy_summaries(root, &checkpoint);
            (checkpoint, summaries, JournalEnd::default())
        };
        let ended =
            matches!(checkpoint.status, RunStatus::Succeeded | RunStatus::Failed | RunStatus::Restarted);
        // The end of a run is recorded in the order result.json, the closing event, the
        // manifest. A process killed before the manifest leaves it saying `running`; one
        // killed by an earlier fabro, which wrote the manifest first, may leave no result.json.
        // Resuming such a run only finishes its records.
        let unrecorded_end = ended
            && (manifest.status == RunStatus::Running
                || (checkpoint.status != RunStatus::Restarted && !root.join(layout::RESULT).exists()));
        if ended && !unrecorded_end {
            let rewind = match checkpoint.status {
                RunStatus::Failed => RewindHint::of(&checkpoint.current_node, &summaries),
                _ => None,
            };
            return Err(ResumeError::Finished {
                path: root.to_path_buf(),
                status: checkpoint.status,
                rewind,
            });
        }
        if !ended && checkpoint.next_node.is_none() {
            return Err(ResumeError::NoNextStage { path: root.to_path_buf() });
        }
        let workflow_source = crate::regular_file::read_to_string(
            root.join(layout::SAVED_WORKFLOW),
            crate::regular_file::FileKind::SavedWorkflow,
        )
        .map_err(|_| ResumeError::NotARun { path: root.to_path_buf(), missing: layout::SAVED_WORKFLOW })?;
        let last_event_seq = crate::event_log::EventLog::last_seq_in(&root.join(layout::EVENTS));
        Ok(SavedRun { dir, lock, manifest, checkpoint, summaries, workflow_source, last_event_seq, journal })
    }
}

fn corrupt(error: super::journal::JournalError) -> ResumeError {
    match error.corrupt_file() {
        Ok((path, message)) => ResumeError::Corrupt { path, message },
        Err((path, source)) => ResumeError::RunDir(super::RunDirError::Io { path, source }),
    }
}

/// A run made before the journal: its stage records come from result.json when the run
/// stopped cleanly, else from its stage directories; the preambles' summaries from the stage
/// directories.
pub(super) fn legacy_summaries(root: &Path, checkpoint: &Checkpoint) -> Vec<StageSummary> {
    let visits = &checkpoint.node_visits;
    // Of result.json's visits, those the checkpoint counts (a fork or rewind picks an earlier one).
    let recorded =
        crate::regular_file::read_to_string(root.join(layout::RESULT), crate::regular_file::FileKind::Record)
            .ok()
            .and_then(|text| serde_json::from_str::<RunResult>(&text).ok())
            .map(|result| {
                result
                    .stages
                    .into_iter()
                    .filter(|stage| stage.visit <= visits.get(&stage.node_id).copied().unwrap_or(0))
                    .collect::<Vec<_>>()
            });
    let stages = recorded.unwrap_or_else(|| stages_from_status_files(root, checkpoint));
    stages
        .iter()
        .map(|record| {
            // The directory the visit finished in: `<visit>.<n>` when it ran again.
            let dir = record.dir_in(root).unwrap_or_default();
            StageSummary::from_stage_dir(record, None, &dir)
        })
        .collect()
}

impl SavedRun {
    /// The nodes the checkpoint refers to (completed, visited, scored, next) that `workflow` lacks;
    /// a workflow that renamed or removed any of them cannot continue this run.
    pub fn missing_nodes(&self, workflow: &crate::graph::Workflow) -> Vec<String> {
        let checkpoint = &self.checkpoint;
        let mut needed: Vec<&String> = checkpoint.completed_nodes.iter().collect();
        needed.extend(checkpoint.node_visits.keys());
        needed.extend(checkpoint.node_outcomes.keys());
        needed.extend(checkpoint.next_node.iter());
        let mut missing: Vec<String> =
            needed.into_iter().filter(|id| workflow.node(id).is_none()).cloned().collect();
        missing.sort();
        missing.dedup();
        missing
    }

    /// Makes `source` the workflow the run continues with: the stored copy moves aside to
    /// `workflow.<n>.dot` (never overwritten) and the manifest records the new file and hash.
    pub fn adopt_workflow(&mut self, path: &Path, source: &str) -> Result<(), super::RunDirError> {
        // The run's lock is held since `open`.
        let root = self.dir.root().to_path_buf();
        let stored = root.join(layout::SAVED_WORKFLOW);
        let mut n = 1;
        while root.join(format!("workflow.{n}.dot")).exists() {
            n += 1;
        }
        let previous = root.join(format!("workflow.{n}.dot"));
        std::fs::rename(&stored, &previous)
            .map_err(|source| super::RunDirError::Io { path: previous, source })?;
        self.dir.write_text(layout::SAVED_WORKFLOW, source)?;
        self.workflow_source = source.to_string();
        self.manifest.source_path = path.display().to_string();
        self.manifest.source_sha256 = crate::source::sha256_hex(source);
        Ok(())
    }
}

/// The stage visits of a run, rebuilt from `stages/<node>/<visit>/status.json` in the order they
/// started. Per node, only as many visits as the checkpoint counts as completed are kept: a
/// stage that finished after the last checkpoint was saved runs again on resume.
fn stages_from_status_files(root: &Path, checkpoint: &Checkpoint) -> Vec<StageRecord> {
    let mut found: Vec<(String, StageRecord)> = Vec::new();
    for node_dir in std::fs::read_dir(super::layout::stages_dir(root)).into_iter().flatten().flatten() {
        let node_id = node_dir.file_name().to_string_lossy().into_owned();
        for visit_dir in std::fs::read_dir(node_dir.path()).into_iter().flatten().flatten() {
            let name = visit_dir.file_name().to_string_lossy().into_owned();
            let Some((visit, _)) = super::layout::parse_visit_dir_name(&name) else { continue };
            let Ok(text) = crate::regular_file::read_to_string(
                visit_dir.path().join(layout::STATUS),
                crate::regular_file::FileKind::Record,
            ) else {
                continue;
            };
            let Ok(status) = serde_json::from_str::<StageStatusFile>(&text) else { continue };
            let record = StageRecord {
                node_id: node_id.clone(),
                visit,
                status: status.outcome.status,
                duration_ms: status.duration_ms,
                handler: status.handler,
                failure_reason: status.outcome.failure_reason,
                usage: status.outcome.usage,
                branch: status.branch,
                cost_usd: status.outcome.cost_usd,
                dir: visit_dir.path().strip_prefix(root).ok().map(|dir| dir.display().to_string()),
            };
            found.push((status.started_at, record));
        }
    }
    found.sort_by(|a, b| a.0.cmp(&b.0));
    let mut kept: std::collections::HashMap<String, usize> = std::collections::HashMap::new();
    found
        .into_iter()
        .filter(|(_, record)| {
            let completed = checkpoint.completed_nodes.iter().filter(|id| **id == record.node_id).count();
            let count = kept.entry(record.node_id.clone()).or_insert(0);
            *count += 1;
            *count <= completed
        })
        .map(|(_, record)| record)
        .collect()
}

/// Refuses a run directory with a symbolic link anywhere in what fabro writes (everything but
/// the git worktree, whose files are the project's), before anything is changed.
fn refuse_links(root: &Path) -> Result<(), ResumeError> {
    if std::fs::symlink_metadata(root).is_ok_and(|m| m.file_type().is_symlink()) {
        return Err(ResumeError::Link { path: root.to_path_buf() });
    }
    let walk = walkdir::WalkDir::new(root)
        .follow_links(false)
        .into_iter()
        .filter_entry(|entry| !(entry.depth() == 1 && entry.file_name() == layout::RUN_WORKTREE_DIR));
    for entry in walk.flatten() {
        if entry.path_is_symlink() {
            return Err(ResumeError::Link { path: entry.into_path() });
        }
    }
    Ok(())
}

fn read_json<T: serde::de::DeserializeOwned>(root: &Path, name: &'static str) -> Result<T, ResumeError> {
    let path = root.join(name);
    let text = crate::regular_file::read_to_string(&path, crate::regular_file::FileKind::Record)
        .map_err(|_| ResumeError::NotARun { path: root.to_path_buf(), missing: name })?;
    serde_json::from_str(&text).map_err(|error| ResumeError::Corrupt { path, message: error.to_string() })
}
