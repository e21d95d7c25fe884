//! The on-disk layout of a run, and the only code that writes it:
//!
//! ```text
//! <run_dir>/manifest.json      who, what, when; status
//! <run_dir>/workflow.dot       the exact source that ran
//! <run_dir>/journal.jsonl      one line per change of state (a stage, a pause, the end): the record
//! <run_dir>/checkpoint.json    a snapshot of the state (every 100 entries and at the end; atomic)
//! <run_dir>/run.lock           held by the process driving the run
//! <run_dir>/result.json        the outcome, when the run ends
//! <run_dir>/events.jsonl       one event per line
//! <run_dir>/stages/<node>/<visit>/status.json, prompt.md, response.md, stdout.log, stderr.log
//! ```
//!
//! Every JSON file is written atomically (temporary file, fsync, rename, fsync of the directory),
//! and nothing is ever overwritten except `manifest.json` and `checkpoint.json`, which are
//! replaced whole; `journal.jsonl` and `events.jsonl` are only appended to. Runs made before the
//! journal kept every checkpoint in `checkpoints/`; they are still read.

pub mod containers;
mod history;
pub mod housekeeping;
pub mod journal;
pub mod layout;
pub(crate) mod lock;
pub mod lookup;
mod records;
mod saved;
pub mod stage_output;
pub mod stage_process;
pub mod stage_summary;
pub mod submission;
mod view;

use std::path::{Path, PathBuf};

use crate::atomic_file::{write_atomic, write_atomic_with, Durability};
pub use history::{fork, parse_target, rewind, ForkOrigin, Forked, HistoryError, Rewound};
pub use journal::JournalEnd;
pub use lock::holder as lock_holder;
pub use lock::is_held as lock_is_held;
pub use lock::RunLock;
pub(crate) use records::recorded_handler;
pub use records::{
    has_labels, parse_label, AssumedEdge, Checkpoint, CheckpointRef, DryRunWalk, LaunchRecord, Manifest,
    PauseRecord, RunResult, StageRecord, StageStatusFile, WalkedEdge, WorktreeRecord,
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
    /// (A submitted run's directory holds its submission and output log already: those stay.)
    pub fn create(root: &Path) -> Result<RunDir, RunDirError> {
        let submitted = |entry: &std::fs::DirEntry| {
            entry.file_name().to_str().is_some_and(layout::is_submission_file)
                && entry.file_type().is_ok_and(|kind| kind.is_file())
        };
        if root.read_dir().is_ok_and(|entries| entries.flatten().any(|entry| !submitted(&entry))) {
            return Err(RunDirError::NotEmpty { path: root.to_path_buf() });
        }
        std::fs::create_dir_all(layout::stages_dir(root)).map_err(|source| io(root, source))?;
        Ok(RunDir { root: root.to_path_buf() })
    }

    /// [`RunDir::create`], except that a directory holding a run that never started (fabro was
    /// killed before its first stage was journaled) is cleared and reused; the names removed are
    /// returned, for a notice. Anything else in the directory is refused as by `create`.
    pub fn create_or_reuse(root: &Path) -> Result<(RunDir, Vec<String>), RunDirError> {
        let removed = match never_started(root) {
            Some(names) => {
                for name in &names {
                    let path = root.join(name);
                    let removed = if path.is_dir() {
                        std::fs::remove_dir_all(&path)
                    } else {
                        std::fs::remove_file(&path)
                    };
                    removed.map_err(|source| io(&path, source))?;
                }
                names
            }
            None => Vec::new(),
        };
        Ok((RunDir::create(root)?, removed))
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

    /// Replaces `checkpoint.json` (compact JSON) with a snapshot of the run's state.
    pub fn write_snapshot(
        &self,
        value: &impl serde::Serialize,
        durability: Durability,
    ) -> Result<(), RunDirError> {
        let path = self.root.join(layout::CHECKPOINT);
        let mut bytes = serde_json::to_vec(value).map_err(|e| io(&path, std::io::Error::other(e)))?;
        bytes.push(b'\n');
        write_atomic_with(&path, &bytes, durability).map_err(|source| io(&path, source))
    }

    /// Opens the run's journal for appending after entry `last_seq` (see [`journal::Writer`]).
    pub fn journal(
        &self,
        last_seq: u64,
        torn: Option<&journal::Torn>,
        mode: journal::SyncMode,
    ) -> Result<journal::Writer, RunDirError> {
        journal::Writer::open(&self.root, last_seq, torn, mode)
            .map_err(|source| io(&self.root.join(layout::JOURNAL), source))
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

/// What fabro writes into a run directory before its first stage is journaled.
const START_FILES: [&str; 7] = [
    layout::MANIFEST,
    layout::SAVED_WORKFLOW,
    layout::CONFIG_FILES,
    layout::EVENTS,
    layout::RUN_LOCK,
    layout::JOURNAL,
    layout::STAGES_DIR,
];

/// The entries of `root` when it holds a run that never started: only the files fabro writes
/// when a run starts (and temporary files of atomic writes), no journaled stage, no snapshot or
/// result, no worktree, no symbolic link, and no process driving it. `None` otherwise.
pub fn never_started(root: &Path) -> Option<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(root).ok()? {
        let entry = entry.ok()?;
        let name = entry.file_name().into_string().ok()?;
        // Temporary files of fabro's atomic writes of the start files: `.<file>.<pid>.tmp`.
        let temp = name.strip_prefix('.').and_then(|rest| rest.strip_suffix(".tmp")).is_some_and(|rest| {
            START_FILES.iter().any(|file| rest.strip_prefix(file).is_some_and(|pid| pid.starts_with('.')))
        });
        if entry.file_type().ok()?.is_symlink() {
            return None;
        }
        if layout::is_submission_file(&name) {
            continue;
        }
        if !(START_FILES.contains(&name.as_str()) || temp) {
            return None;
        }
        names.push(name);
    }
    let journaled = journal::Journal::exists(root)
        && journal::Journal::read(root).map_or(true, |journal| !journal.entries.is_empty());
    if names.is_empty() || journaled || lock::is_held(root) {
        return None;
    }
    names.sort();
    Some(names)
}

/// Why a run record could not be read.
pub(crate) enum RecordError {
    Io(std::io::Error),
    /// Not the JSON the record should be: what is wrong.
    Corrupt(String),
}

/// Reads and parses the JSON record at `path` (a regular file of at most the record size);
/// `Ok(None)` when it does not exist.
pub(crate) fn read_record<T: serde::de::DeserializeOwned>(path: &Path) -> Result<Option<T>, RecordError> {
    let text = match crate::regular_file::read_to_string(path, crate::regular_file::FileKind::Record) {
        Ok(text) => text,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(RecordError::Io(error)),
    };
    serde_json::from_str(&text).map(Some).map_err(|error| RecordError::Corrupt(error.to_string()))
}

/// The result of the run in `root`, when it has ended and its record parses.
/// Asks the process running the run in `root` to pause it once the stage in flight ends
/// ([`layout::INTERRUPT_REQUEST`]).
pub fn request_interrupt(root: &Path) -> Result<(), RunDirError> {
    let path = root.join(layout::INTERRUPT_REQUEST);
    crate::atomic_file::write_atomic(&path, crate::event_log::now_rfc3339().as_bytes())
        .map_err(|source| RunDirError::Io { path, source })
}

/// Takes a pending interrupt request of the run in `root`: whether there was one. A request left
/// from a run that ended before acting on it is taken (and dropped) when the run starts again.
pub fn take_interrupt_request(root: &Path) -> bool {
    std::fs::remove_file(root.join(layout::INTERRUPT_REQUEST)).is_ok()
}

pub fn read_result(root: &Path) -> Option<RunResult> {
    read_record(&root.join(layout::RESULT)).ok().flatten()
}

/// The manifest of the run in `root`, when it is a regular file of sane size that parses.
pub fn read_manifest(root: &Path) -> Option<Manifest> {
    read_record(&root.join(layout::MANIFEST)).ok().flatten()
}

fn io(path: &Path, source: std::io::Error) -> RunDirError {
    RunDirError::Io { path: path.to_path_buf(), source }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_run_that_never_started_is_reused() {
        let temp = tempfile::tempdir().unwrap();
        let root = temp.path().join("run");
        // What a kill in the first milliseconds leaves.
        std::fs::create_dir_all(root.join("stages/start/1")).unwrap();
        std::fs::write(root.join("events.jsonl"), "{\"event\":\"run.started\"}\n").unwrap();
        std::fs::write(root.join("run.lock"), "1").unwrap();
        std::fs::write(root.join("config-files.json"), "{}").unwrap();
        std::fs::write(root.join(layout::JOURNAL), "{\"seq\":1,").unwrap();
        let (run, removed) = RunDir::create_or_reuse(&root).unwrap();
        assert_eq!(removed, ["config-files.json", "events.jsonl", "journal.jsonl", "run.lock", "stages"]);
        assert!(run.root().join("stages").is_dir());
        assert!(!run.root().join("events.jsonl").exists());
        // A journaled stage, a foreign file or a live lock: refused.
        std::fs::write(root.join("notes.txt"), "mine").unwrap();
        assert!(matches!(RunDir::create_or_reuse(&root), Err(RunDirError::NotEmpty { .. })));
        std::fs::remove_file(root.join("notes.txt")).unwrap();
        let mut journal = run.journal(0, None, journal::SyncMode::Never).unwrap();
        journal.append(&mut journal::Entry::default()).unwrap();
        assert!(matches!(RunDir::create_or_reuse(&root), Err(RunDirError::NotEmpty { .. })));
        std::fs::remove_file(root.join(layout::JOURNAL)).unwrap();
        let _held = run.lock().unwrap();
        assert!(matches!(RunDir::create_or_reuse(&root), Err(RunDirError::NotEmpty { .. })));
    }

    #[test]
    fn a_snapshot_replaces_checkpoint_json_whole() {
        let temp = tempfile::tempdir().unwrap();
        let run = RunDir::create(&temp.path().join("run")).unwrap();
        run.write_snapshot(&serde_json::json!({"n": 1}), Durability::Synced).unwrap();
        run.write_snapshot(&serde_json::json!({"n": 2}), Durability::Unsynced).unwrap();
        let read = |p: &str| std::fs::read_to_string(run.root().join(p)).unwrap();
        assert_eq!(read("checkpoint.json"), "{\"n\":2}\n");
        assert!(!run.root().join("checkpoints").exists());
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
