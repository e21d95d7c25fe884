//! Removing runs that are no longer wanted (`fabro runs --delete` and `--prune`): a run is
//! deleted only while this process holds its lock, so a run that another process drives is never
//! touched, and only directories that hold a run manifest are ever removed.

use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use super::layout;
use super::lookup::runs_in;
use super::records::Manifest;
use super::{RunDir, RunDirError};
use crate::run_status::RunStatus;

/// Why a run was chosen for pruning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PruneReason {
    /// Its workflow file no longer exists.
    WorkflowGone(String),
    /// It finished longer ago than the age given.
    FinishedBefore(String),
}

impl std::fmt::Display for PruneReason {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            PruneReason::WorkflowGone(path) => write!(f, "its workflow {path} no longer exists"),
            PruneReason::FinishedBefore(at) => write!(f, "it finished at {at}"),
        }
    }
}

/// A run chosen for pruning.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PruneCandidate {
    pub dir: PathBuf,
    pub run_id: String,
    pub reason: PruneReason,
}

/// Why a run was not deleted.
#[derive(Debug, thiserror::Error)]
pub enum DeleteError {
    #[error("`{}` is not a run directory (no manifest.json); nothing was deleted", dir.display())]
    NotARun { dir: PathBuf },
    #[error("the run in `{}` is in use ({} holds its lock); nothing was deleted", dir.display(), pid.map_or_else(|| "another process".to_string(), |pid| format!("process {pid}")))]
    InUse { dir: PathBuf, pid: Option<i32> },
    #[error("cannot delete `{}`: {source}", dir.display())]
    Io { dir: PathBuf, source: std::io::Error },
}

/// The runs under `runs_dir` to prune: without `older_than`, those whose workflow file no longer
/// exists (a relative path is taken from the current directory, where the run started); with
/// it, the finished runs (succeeded, failed or restarted) that finished longer ago than that.
/// Unfinished runs are never pruned by age.
pub fn prune_candidates(
    runs_dir: &Path,
    older_than: Option<Duration>,
    now: SystemTime,
) -> Vec<PruneCandidate> {
    runs_in(runs_dir)
        .into_iter()
        .filter_map(|entry| {
            let manifest: Manifest = super::read_manifest(&entry.dir)?;
            let reason = match older_than {
                None => (!Path::new(&manifest.source_path).exists())
                    .then(|| PruneReason::WorkflowGone(manifest.source_path.clone()))?,
                Some(age) => {
                    let finished = matches!(
                        manifest.status,
                        RunStatus::Succeeded | RunStatus::Failed | RunStatus::Restarted
                    );
                    let at = manifest.finished_at.clone().filter(|_| finished)?;
                    let ended = humantime::parse_rfc3339_weak(&at).ok()?;
                    (now.duration_since(ended).unwrap_or_default() > age)
                        .then_some(PruneReason::FinishedBefore(at))?
                }
            };
            Some(PruneCandidate { dir: entry.dir, run_id: entry.run_id, reason })
        })
        .collect()
}

/// Deletes the run directory `dir`, holding its lock while doing so.
pub fn delete_run(dir: &Path) -> Result<(), DeleteError> {
    if !std::fs::symlink_metadata(dir.join(layout::MANIFEST)).is_ok_and(|meta| meta.is_file()) {
        return Err(DeleteError::NotARun { dir: dir.to_path_buf() });
    }
    let run = RunDir { root: dir.to_path_buf() };
    let lock = run.lock().map_err(|error| match error {
        RunDirError::Locked { pid, .. } => DeleteError::InUse { dir: dir.to_path_buf(), pid },
        RunDirError::Io { source, .. } => DeleteError::Io { dir: dir.to_path_buf(), source },
        other => DeleteError::Io { dir: dir.to_path_buf(), source: std::io::Error::other(other.to_string()) },
    })?;
    let removed =
        std::fs::remove_dir_all(dir).map_err(|source| DeleteError::Io { dir: dir.to_path_buf(), source });
    // The lock file went with the directory; the lock ends here.
    drop(lock);
    removed
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_dir::write_json_file;

    fn add_run(runs: &Path, id: &str, status: RunStatus, finished_at: Option<&str>, source: &str) -> PathBuf {
        let dir = runs.join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let mut manifest = Manifest::sample(id, "2026-01-01T00:00:00Z", status);
        manifest.finished_at = finished_at.map(str::to_string);
        manifest.source_path = source.to_string();
        write_json_file(&dir.join("manifest.json"), &manifest).unwrap();
        dir
    }

    #[test]
    fn prune_picks_runs_of_gone_workflows_or_old_finished_runs() {
        let temp = tempfile::tempdir().unwrap();
        let runs = temp.path().join("runs");
        let workflow = temp.path().join("w.dot");
        std::fs::write(&workflow, "digraph w {}").unwrap();
        let here = workflow.to_str().unwrap();
        let gone = temp.path().join("gone.dot");
        let gone = gone.to_str().unwrap();
        add_run(&runs, "a-old-done", RunStatus::Succeeded, Some("2026-01-02T00:00:00Z"), here);
        add_run(&runs, "b-old-paused", RunStatus::Paused, None, here);
        add_run(&runs, "c-new-done", RunStatus::Failed, Some("2026-03-01T00:00:00Z"), gone);
        let now = humantime::parse_rfc3339("2026-03-02T00:00:00Z").unwrap();

        let ids = |found: Vec<PruneCandidate>| found.into_iter().map(|c| c.run_id).collect::<Vec<_>>();
        assert_eq!(ids(prune_candidates(&runs, None, now)), ["c-new-done"]);
        let month = Duration::from_secs(30 * 86_400);
        assert_eq!(ids(prune_candidates(&runs, Some(month), now)), ["a-old-done"]);
    }

    #[test]
    fn a_locked_run_or_a_directory_that_is_no_run_is_never_deleted() {
        let temp = tempfile::tempdir().unwrap();
        let runs = temp.path().join("runs");
        let dir = add_run(&runs, "r1", RunStatus::Running, None, "w.dot");
        let held = crate::run_dir::lock::hold(&dir);
        assert!(matches!(delete_run(&dir), Err(DeleteError::InUse { .. })));
        assert!(dir.join("manifest.json").exists());
        drop(held);
        delete_run(&dir).unwrap();
        assert!(!dir.exists());

        let plain = temp.path().join("plain");
        std::fs::create_dir_all(&plain).unwrap();
        assert!(matches!(delete_run(&plain), Err(DeleteError::NotARun { .. })));
        assert!(plain.exists());
    }
}
