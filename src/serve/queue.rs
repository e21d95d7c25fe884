//! The run service's queue: runs submitted through the API wait in their run directories
//! (`submission.json`, state `queued`) and start, oldest first, while fewer than
//! `max_concurrent_runs` of the service's runs are starting or running, each in a `fabro run`
//! process of its own. The queue is the runs directory itself: a service that restarts (or a
//! second one) finds the queued runs where they are, and resumes the runs whose process died
//! (at most [`MAX_RELAUNCHES`] times each; or leaves them crashed, as `--crashed-runs show` says).

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use crate::run_dir::submission::{RunState, Submission, SubmissionState};

/// Who submitted a run, in its submission: the service.
pub const SERVICE: &str = "service";
/// Where the workflow texts submitted as `source` are kept, inside the runs directory.
pub const SOURCES_DIR: &str = ".sources";
/// How often the queue looks at the runs directory when nothing tells it to.
const TICK: Duration = Duration::from_millis(250);
/// How often a run whose process died is resumed before it is left crashed.
pub const MAX_RELAUNCHES: u32 = 3;

/// Starts queued runs as places free up, forever.
pub(super) async fn run(state: Arc<super::AppState>) {
    loop {
        if let Err(error) = step(&state) {
            tracing::warn!("the run queue: {error}");
        }
        let _ = tokio::time::timeout(TICK, state.queue.notified()).await;
    }
}

/// One look at the runs directory: resume what crashed, start what fits.
fn step(state: &super::AppState) -> Result<(), crate::run_launcher::LaunchError> {
    let options = &state.options;
    let mut active = 0;
    let mut queued = Vec::new();
    // Only the service's submissions: a run directory without one costs one failed open, not the
    // parse of its manifest (the queue looks four times a second, however many runs there are).
    for dir in service_runs(&options.runs_dir) {
        let Some(submission) = Submission::read(&dir).ok().flatten() else { continue };
        if submission.by != SERVICE {
            continue;
        }
        match RunState::of(&dir) {
            RunState::Starting | RunState::Running => active += 1,
            RunState::Queued => queued.push((submission.run_id.clone(), dir)),
            RunState::Crashed if options.resume_crashed_runs && submission.relaunches < MAX_RELAUNCHES => {
                let run_id = submission.run_id.clone();
                requeue_to_resume(&dir, submission)?;
                queued.push((run_id, dir));
            }
            _ => {}
        }
    }
    // Run ids are made in time order: the oldest submission first.
    queued.sort();
    for (_, dir) in queued.into_iter().take(options.max_concurrent_runs.saturating_sub(active)) {
        let (_, child) = crate::run_launcher::launch(&dir, &options.fabro_exe)?;
        // Reaped here, so that no finished run is left a zombie of the service.
        tokio::task::spawn_blocking(move || {
            let mut child = child;
            let _ = child.wait();
        });
    }
    Ok(())
}

/// The run directories of `runs_dir` that are directories of their own (not links).
fn service_runs(runs_dir: &Path) -> Vec<std::path::PathBuf> {
    let Ok(entries) = std::fs::read_dir(runs_dir) else { return Vec::new() };
    entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .map(|entry| entry.path())
        .collect()
}

/// A run whose process died goes back into the queue, to be continued by `fabro resume`.
fn requeue_to_resume(dir: &Path, mut submission: Submission) -> Result<(), crate::run_launcher::LaunchError> {
    submission.args = vec!["resume".into(), dir.display().to_string(), "-q".into()];
    submission.state = SubmissionState::Queued;
    submission.process = None;
    submission.relaunches += 1;
    submission.write(dir)?;
    Ok(())
}
