//! The on-disk layout of a run, and the only code that writes it:
//!
//! ```text
//! <run_dir>/manifest.json      who, what, when; status
//! <run_dir>/workflow.dot       the exact source that ran
//! <run_dir>/checkpoint.json    state after the last completed stage (atomic)
//! <run_dir>/checkpoints/<seq>-<node>.json   every checkpoint, for fork and rewind
//! <run_dir>/run.lock           held by the process driving the run
//! <run_dir>/result.json        the outcome, when the run ends
//! <run_dir>/events.jsonl       one event per line
//! <run_dir>/stages/<node>/<visit>/status.json, prompt.md, response.md, stdout.log, stderr.log
//! ```
//!
//! Every JSON file is written atomically (temporary file, fsync, rename, fsync of the directory),
//! and nothing is ever overwritten except `manifest.json` and `checkpoint.json`, which are
//! replaced whole.

mod atomic;
mod history;
pub mod housekeeping;
pub mod layout;
pub(crate) mod lock;
pub mod lookup;
mod records;
mod saved;
pub mod stage_output;
pub mod stage_process;
mod view;

use std::path::{Path, PathBuf};

pub use atomic::{link_atomic, write_atomic, write_atomic_with, Durability};
pub use history::{fork, parse_target, rewind, select_checkpoint, ForkOrigin, Forked, HistoryError, Rewound};
pub use lock::is_held as lock_is_held;
pub use lock::{RunLock, LOCK_FILE};
pub use records::{
    Checkpoint, CheckpointRef, LaunchRecord, Manifest, RunResult, RunStatus, StageRecord, StageStatusFile,
    UsageTotals, WorktreeRecord,
};
pub use saved::{ResumeError, SavedRun};
pub use view::{RunView, StageSummary, ViewError};

#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
    #[error("run directory `{}` is in use by {} (lock file {}); wait for it to finish or stop it", path.parent().map(|p| p.display().to_string()).unwrap_or_default(), pid.map_or_else(|| "another process".to_string(), |pid| format!("process {pid}")), path.display())]
    Locked { path: PathBuf, pid: Option<i32> },
    #[error("run directory `{}` already exists and is not empty; choose another with --run-dir", path.display())]
    NotEmpty { path: PathBuf },
    #[error("cannot write `{}`: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
}

/// A run's directory.
#[derive(Debug, Clone)]
pub struct RunDir {
    root: PathBuf,
}

impl RunDir {
    /// Creates a new run directory; refuses one that exists with anything in it.
    pub fn create(root: &Path) -> Result<RunDir, RunDirError> {
        if root.read_dir().is_ok_and(|mut entries| entries.next().is_some()) {
            return Err(RunDirError::NotEmpty { path: root.to_path_buf() });
        }
        std::fs::create_dir_all(layout::stages_dir(root)).map_err(|source| io(root, source))?;
        Ok(RunDir { root: root.to_path_buf() })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Creates `stages/<node>/<visit>/`. A directory left by an earlier attempt of the same
    /// visit is kept and the new one gets a suffix, so nothing is overwritten.
    pub fn stage_dir(&self, node_id: &str, visit: u32) -> Result<PathBuf, RunDirError> {
        let node_dir = layout::node_dir(&self.root, node_id);
        for path in [layout::stages_dir(&self.root), node_dir.clone()] {
            if std::fs::symlink_metadata(&path).is_ok_and(|m| m.file_type().is_symlink()) {
                let source = std::io::Error::other(
                    "is a symbolic link; fabro does not write through links in run directories",
                );
                return Err(io(&path, source));
            }
        }
        let mut run = 1;
        let mut dir = node_dir.join(layout::visit_dir_name(visit, run));
        while dir.exists() {
            run += 1;
            dir = node_dir.join(layout::visit_dir_name(visit, run));
        }
        std::fs::create_dir_all(&dir).map_err(|source| io(&dir, source))?;
        Ok(dir)
    }

    /// Saves a checkpoint: `checkpoints/<seq>-<node>.json` is written once, and `checkpoint.json`
    /// becomes another name for it, so keeping every checkpoint costs no second write.
    pub fn save_checkpoint(
        &self,
        seq: u64,
        node_id: &str,
        value: &impl serde::Serialize,
        durability: Durability,
    ) -> Result<(), RunDirError> {
        let history = self.root.join("checkpoints");
        std::fs::create_dir_all(&history).map_err(|source| io(&history, source))?;
        let path = history.join(format!("{seq:06}-{node_id}.json"));
        let mut bytes = serde_json::to_vec(value).map_err(|e| io(&path, std::io::Error::other(e)))?;
        bytes.push(b'\n');
        write_atomic_with(&path, &bytes, durability).map_err(|source| io(&path, source))?;
        let current = self.root.join("checkpoint.json");
        link_atomic(&path, &current, durability).map_err(|source| io(&current, source))
    }

    /// Takes the run's lock, so that only one process drives the run at a time.
    pub fn lock(&self) -> Result<RunLock, RunDirError> {
        lock::take(&self.root)
    }

    /// Writes `value` as compact JSON (one line) to `relative`, atomically: for files rewritten
    /// after every stage, where size is time.
    pub fn write_compact_json(
        &self,
        relative: impl AsRef<Path>,
        value: &impl serde::Serialize,
    ) -> Result<(), RunDirError> {
        let path = self.root.join(relative);
        let mut bytes = serde_json::to_vec(value).map_err(|e| io(&path, std::io::Error::other(e)))?;
        bytes.push(b'\n');
        write_atomic(&path, &bytes).map_err(|source| io(&path, source))
    }

    /// Writes `value` as pretty JSON to `relative` inside the run directory, atomically.
    pub fn write_json(
        &self,
        relative: impl AsRef<Path>,
        value: &impl serde::Serialize,
    ) -> Result<(), RunDirError> {
        let path = self.root.join(relative);
        write_json_file(&path, value)
    }

    /// Writes text to `relative` inside the run directory, atomically.
    pub fn write_text(&self, relative: impl AsRef<Path>, text: &str) -> Result<(), RunDirError> {
        let path = self.root.join(relative);
        write_atomic(&path, text.as_bytes()).map_err(|source| io(&path, source))
    }
}

/// Writes `value` as pretty JSON to `path`, atomically.
pub fn write_json_file(path: &Path, value: &impl serde::Serialize) -> Result<(), RunDirError> {
    write_json_file_with(path, value, Durability::Synced)
}

/// [`write_json_file`] with a choice of durability.
pub fn write_json_file_with(
    path: &Path,
    value: &impl serde::Serialize,
    durability: Durability,
) -> Result<(), RunDirError> {
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| io(path, std::io::Error::other(e)))?;
    bytes.push(b'\n');
    write_atomic_with(path, &bytes, durability).map_err(|source| io(path, source))
}

/// Gives a `.fabro` directory that fabro made its own `.gitignore` (`*`), so run directories and
/// artifact copies never show in `git status`. An existing `.gitignore` is left as it is; a
/// failure only costs that convenience.
pub fn keep_out_of_git(fabro_dir: &Path) {
    let ignore = fabro_dir.join(".gitignore");
    if std::fs::symlink_metadata(&ignore).is_ok() || std::fs::create_dir_all(fabro_dir).is_err() {
        return;
    }
    let text = b"# Made by fabro: run directories and artifact copies stay out of git.\n*\n";
    if let Err(error) = write_atomic_with(&ignore, text, Durability::Unsynced) {
        tracing::debug!(%error, path = %ignore.display(), "no .gitignore for the .fabro directory");
    }
}

fn io(path: &Path, source: std::io::Error) -> RunDirError {
    RunDirError::Io { path: path.to_path_buf(), source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_checkpoint_is_kept_and_checkpoint_json_is_the_latest() {
        let temp = tempfile::tempdir().unwrap();
        let run = RunDir::create(&temp.path().join("run")).unwrap();
        run.save_checkpoint(1, "plan", &serde_json::json!({"n": 1}), Durability::Synced).unwrap();
        run.save_checkpoint(2, "build", &serde_json::json!({"n": 2}), Durability::Unsynced).unwrap();
        let read = |p: &str| std::fs::read_to_string(run.root().join(p)).unwrap();
        assert_eq!(read("checkpoints/000001-plan.json"), "{\"n\":1}\n");
        assert_eq!(read("checkpoints/000002-build.json"), "{\"n\":2}\n");
        assert_eq!(read("checkpoint.json"), "{\"n\":2}\n");
    }

    #[test]
    fn stage_dirs_are_never_created_through_a_symbolic_link() {
        let temp = tempfile::tempdir().unwrap();
        let run = RunDir::create(&temp.path().join("run")).unwrap();
        let outside = temp.path().join("outside");
        std::fs::create_dir(&outside).unwrap();
        std::fs::remove_dir(run.root().join("stages")).unwrap();
        std::os::unix::fs::symlink(&outside, run.root().join("stages")).unwrap();
        let error = run.stage_dir("plan", 1).unwrap_err().to_string();
        assert!(error.contains("is a symbolic link"), "{error}");
        assert!(std::fs::read_dir(&outside).unwrap().next().is_none(), "nothing written outside");
    }

    #[test]
    fn refuses_a_non_empty_directory_and_never_reuses_a_stage_dir() {
        let temp = tempfile::tempdir().unwrap();
        let run = RunDir::create(&temp.path().join("run")).unwrap();
        assert!(matches!(RunDir::create(run.root()), Err(RunDirError::NotEmpty { .. })));
        let first = run.stage_dir("plan", 1).unwrap();
        let again = run.stage_dir("plan", 1).unwrap();
        assert!(first.ends_with("stages/plan/1"));
        assert!(again.ends_with("stages/plan/1.2"));
        run.write_json("checkpoint.json", &serde_json::json!({"a": 1})).unwrap();
        run.write_json("checkpoint.json", &serde_json::json!({"a": 2})).unwrap();
        let text = std::fs::read_to_string(run.root().join("checkpoint.json")).unwrap();
        assert!(text.contains("\"a\": 2"));
    }
}
