//! The on-disk layout of a run, and the only code that writes it:
//!
//! ```text
//! <run_dir>/manifest.json      who, what, when; status
//! <run_dir>/workflow.dot       the exact source that ran
//! <run_dir>/checkpoint.json    state after the last completed stage (atomic)
//! <run_dir>/result.json        the outcome, when the run ends
//! <run_dir>/events.jsonl       one event per line
//! <run_dir>/stages/<node>/<visit>/status.json, prompt.md, response.md, stdout.log, stderr.log
//! ```
//!
//! Every JSON file is written atomically (temporary file, fsync, rename, fsync of the directory),
//! and nothing is ever overwritten except `manifest.json` and `checkpoint.json`, which are
//! replaced whole.

mod atomic;
mod records;
mod saved;
mod view;

use std::path::{Path, PathBuf};

pub use atomic::write_atomic;
pub use records::{Checkpoint, CheckpointRef, Manifest, RunResult, RunStatus, StageRecord, StageStatusFile};
pub use saved::{ResumeError, SavedRun};
pub use view::{RunView, StageSummary, ViewError};

#[derive(Debug, thiserror::Error)]
pub enum RunDirError {
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
        std::fs::create_dir_all(root.join("stages")).map_err(|source| io(root, source))?;
        Ok(RunDir { root: root.to_path_buf() })
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Creates `stages/<node>/<visit>/`. A directory left by an earlier attempt of the same
    /// visit is kept and the new one gets a suffix, so nothing is overwritten.
    pub fn stage_dir(&self, node_id: &str, visit: u32) -> Result<PathBuf, RunDirError> {
        let node_dir = self.root.join("stages").join(node_id);
        let mut dir = node_dir.join(visit.to_string());
        let mut extra = 1;
        while dir.exists() {
            extra += 1;
            dir = node_dir.join(format!("{visit}.{extra}"));
        }
        std::fs::create_dir_all(&dir).map_err(|source| io(&dir, source))?;
        Ok(dir)
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
    let mut bytes = serde_json::to_vec_pretty(value).map_err(|e| io(path, std::io::Error::other(e)))?;
    bytes.push(b'\n');
    write_atomic(path, &bytes).map_err(|source| io(path, source))
}

fn io(path: &Path, source: std::io::Error) -> RunDirError {
    RunDirError::Io { path: path.to_path_buf(), source }
}

#[cfg(test)]
mod tests {
    use super::*;

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
