//! `submission.json`: a run submitted before its process started (`fabro run --detach`, the run
//! service), and what its process printed (`output.log`). With these two files a run directory
//! exists, with its id, from the moment the run is asked for; the run's own process creates the
//! rest. [`RunState`] reads where a run is from its files alone (queued, starting, running, ended),
//! so that any process (a second service, `fabro wait`) can tell what a first one left.

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::layout;
use super::{read_record, RecordError, RunDirError};
use crate::run_status::RunStatus;

/// Where a submitted run is before its process runs it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SubmissionState {
    /// Waiting for a place (the run service's `max_concurrent_runs`).
    Queued,
    /// Its process was started.
    Launched,
    /// Cancelled before its process started.
    Canceled,
}

/// The process a submitted run was started in.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct LaunchedProcess {
    pub pid: i32,
    /// The process's start time (clock ticks since boot), so that a reused pid is not taken for it.
    pub start_ticks: Option<u64>,
    pub launched_at: String,
}

/// `submission.json`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Submission {
    pub run_id: String,
    pub submitted_at: String,
    /// Who asked: `cli` (`fabro run --detach`) or `service`.
    pub by: String,
    /// The arguments of the `fabro` process that runs it (after the executable).
    pub args: Vec<String>,
    /// The directory that process starts in.
    pub cwd: PathBuf,
    /// The workflow's name (its graph's), checked when it was submitted: what listings show
    /// before the run has written its manifest.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workflow: Option<String>,
    pub state: SubmissionState,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub process: Option<LaunchedProcess>,
    /// How often the run service started it again after its process died.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub relaunches: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

impl Submission {
    /// The name of the workflow a `fabro run` submission runs, for listings before the run has
    /// written its manifest: as recorded (a submission from before fabro recorded it: its file's
    /// stem).
    pub fn workflow_name(&self) -> Option<String> {
        if let Some(name) = &self.workflow {
            return Some(name.clone());
        }
        match self.args.as_slice() {
            [command, file, ..] if command == "run" => {
                Path::new(file).file_stem().map(|stem| stem.to_string_lossy().into_owned())
            }
            _ => None,
        }
    }

    /// The submission of the run in `root`, if it was submitted.
    pub fn read(root: &Path) -> Result<Option<Submission>, RunDirError> {
        let path = root.join(layout::SUBMISSION);
        read_record(&path).map_err(|error| match error {
            RecordError::Io(source) => RunDirError::Io { path, source },
            RecordError::Corrupt(message) => RunDirError::Io {
                path,
                source: std::io::Error::new(std::io::ErrorKind::InvalidData, message),
            },
        })
    }

    /// Writes it into `root` (created when missing), replacing the one there.
    pub fn write(&self, root: &Path) -> Result<(), RunDirError> {
        std::fs::create_dir_all(root)
            .map_err(|source| RunDirError::Io { path: root.to_path_buf(), source })?;
        super::write_json_file(&root.join(layout::SUBMISSION), self)
    }

    /// Whether its process is still alive (same pid, same start time, not a zombie).
    pub fn process_alive(&self) -> bool {
        self.process.as_ref().is_some_and(|process| {
            let ticks = super::stage_process::start_ticks(process.pid);
            let zombie = std::fs::read_to_string(format!("/proc/{}/stat", process.pid)).is_ok_and(|stat| {
                stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'))
            });
            ticks.is_some() && !zombie && (process.start_ticks.is_none() || ticks == process.start_ticks)
        })
    }
}

/// Where a run is, read from its directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RunState {
    /// Submitted, waiting for a place.
    Queued,
    /// Its process was started and has not created the run yet.
    Starting,
    /// Its process runs it (the lock is held).
    Running,
    /// It stopped in this state: paused, succeeded, failed, interrupted (or restarted elsewhere).
    Ended(RunStatus),
    /// Its manifest says it runs, but no process holds it: the process died (`fabro resume`
    /// continues it).
    Crashed,
    /// Cancelled before it started.
    Canceled,
    /// Its process ended before it created the run (a refused workflow, a bad flag): what it
    /// printed is in `output.log`.
    NeverStarted,
    /// Not a run directory.
    Unknown,
}

impl RunState {
    /// The state of the run in `root`.
    pub fn of(root: &Path) -> RunState {
        let manifest = super::read_manifest(root);
        if super::lock::is_held(root) {
            // (Held after the manifest said it ended: the process is finishing its records.)
            return match manifest {
                Some(_) => RunState::Running,
                None => RunState::Starting,
            };
        }
        let submission = Submission::read(root).ok().flatten();
        let started = |submission: &Submission| match submission.state {
            SubmissionState::Queued => RunState::Queued,
            // Told to stop while it started: settled once its process is gone.
            SubmissionState::Launched | SubmissionState::Canceled if submission.process_alive() => {
                RunState::Starting
            }
            SubmissionState::Launched => RunState::NeverStarted,
            SubmissionState::Canceled => RunState::Canceled,
        };
        match (manifest, submission) {
            // Its process died; unless it was queued or started again (to be resumed).
            (Some(manifest), submission) if manifest.status == RunStatus::Running => {
                match submission.as_ref().map(started) {
                    Some(state @ (RunState::Queued | RunState::Starting)) => state,
                    _ => RunState::Crashed,
                }
            }
            (Some(manifest), _) => RunState::Ended(manifest.status),
            (None, None) => RunState::Unknown,
            (None, Some(submission)) => match started(&submission) {
                // The process may have created the manifest since it was read.
                RunState::NeverStarted if super::read_manifest(root).is_some() => RunState::of(root),
                state => state,
            },
        }
    }

    /// Whether it will not change by itself any more.
    pub fn is_settled(&self) -> bool {
        !matches!(self, RunState::Queued | RunState::Starting | RunState::Running)
    }

    /// How the API and `fabro runs` name it.
    pub fn as_str(&self) -> &'static str {
        match self {
            RunState::Queued => "queued",
            RunState::Starting => "starting",
            RunState::Running => "running",
            RunState::Ended(status) => status.as_str(),
            RunState::Crashed => "crashed",
            RunState::Canceled => "canceled",
            RunState::NeverStarted => "never_started",
            RunState::Unknown => "unknown",
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn submission(state: SubmissionState) -> Submission {
        Submission {
            run_id: "r".into(),
            submitted_at: "t".into(),
            by: "cli".into(),
            args: vec!["run".into()],
            cwd: PathBuf::from("/"),
            workflow: None,
            state,
            process: None,
            relaunches: 0,
        }
    }

    #[test]
    fn the_state_of_a_submitted_run_comes_from_its_files() {
        let dir = tempfile::tempdir().unwrap();
        assert_eq!(RunState::of(dir.path()), RunState::Unknown);
        submission(SubmissionState::Queued).write(dir.path()).unwrap();
        assert_eq!(RunState::of(dir.path()), RunState::Queued);
        let mut launched = submission(SubmissionState::Launched);
        let me = std::process::id() as i32;
        launched.process = Some(LaunchedProcess {
            pid: me,
            start_ticks: super::super::stage_process::start_ticks(me),
            launched_at: "t".into(),
        });
        launched.write(dir.path()).unwrap();
        assert_eq!(RunState::of(dir.path()), RunState::Starting);
        launched.process.as_mut().unwrap().start_ticks = Some(1);
        launched.write(dir.path()).unwrap();
        assert_eq!(RunState::of(dir.path()), RunState::NeverStarted, "a reused pid is not the process");
        assert_eq!(Submission::read(dir.path()).unwrap(), Some(launched));
    }
}
