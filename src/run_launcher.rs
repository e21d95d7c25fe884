//! Runs in processes of their own: `fabro run --detach` and the run service submit a run (its
//! directory and `submission.json`, see [`crate::run_dir::submission`]), start a `fabro run` for
//! it in a new session with its output in `output.log` (no terminal, so that closing one never
//! stops it), wait for it to settle and cancel it, all through the run directory: nothing here
//! needs the process that started the run.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::event_log::now_rfc3339;
use crate::run_dir::layout;
use crate::run_dir::submission::{LaunchedProcess, RunState, Submission, SubmissionState};
use crate::run_dir::RunDirError;

/// Why a run could not be submitted, started or cancelled.
#[derive(Debug, thiserror::Error)]
pub enum LaunchError {
    #[error(transparent)]
    RunDir(#[from] RunDirError),
    #[error("run directory `{}` already holds a run; choose another with --run-dir", .0.display())]
    Taken(PathBuf),
    #[error("cannot start `{}`: {source}", exe.display())]
    Spawn { exe: PathBuf, source: std::io::Error },
    #[error("run `{}` was not submitted to be started (it has no submission.json)", .0.display())]
    NotSubmitted(PathBuf),
    #[error("run `{run}` is {state}: there is nothing to cancel")]
    NotCancelable { run: String, state: &'static str },
    #[error("cannot signal process {pid} of run `{run}`: {source}")]
    Signal { run: String, pid: i32, source: std::io::Error },
}

/// A new run id (time-ordered, as the engine makes them).
pub fn new_run_id() -> String {
    uuid::Uuid::now_v7().to_string()
}

/// Whether `text` is a run id fabro could have made (a UUID), so that it is safe as a name.
pub fn is_run_id(text: &str) -> bool {
    uuid::Uuid::try_parse(text).is_ok()
}

/// A run to submit: `fabro ARGS` in `cwd`, of the workflow named `workflow`.
#[derive(Debug, Clone)]
pub struct RunToSubmit<'a> {
    pub run_id: &'a str,
    pub workflow: &'a str,
    pub args: Vec<String>,
    pub cwd: &'a Path,
    /// Who asks (`cli`, `service`).
    pub by: &'a str,
    pub state: SubmissionState,
}

/// Records a run to be started in `root` (which must be new or empty).
pub fn submit(root: &Path, run: RunToSubmit<'_>) -> Result<Submission, LaunchError> {
    if root.read_dir().is_ok_and(|mut entries| entries.next().is_some()) {
        return Err(LaunchError::Taken(root.to_path_buf()));
    }
    let submission = Submission {
        run_id: run.run_id.to_string(),
        submitted_at: now_rfc3339(),
        by: run.by.to_string(),
        args: run.args,
        cwd: run.cwd.to_path_buf(),
        workflow: Some(run.workflow.to_string()),
        state: run.state,
        process: None,
        relaunches: 0,
    };
    submission.write(root)?;
    Ok(submission)
}

/// Starts the submitted run in `root` with the `fabro` at `exe`: a new session, stdin from
/// /dev/null, stdout and stderr appended to `output.log`. Records the process in the submission;
/// the caller reaps the child (or ends before it, leaving that to init).
pub fn launch(root: &Path, exe: &Path) -> Result<(Submission, std::process::Child), LaunchError> {
    let mut submission =
        Submission::read(root)?.ok_or_else(|| LaunchError::NotSubmitted(root.to_path_buf()))?;
    let log_path = root.join(layout::OUTPUT_LOG);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&log_path)
        .map_err(|source| RunDirError::Io { path: log_path.clone(), source })?;
    let err = log.try_clone().map_err(|source| RunDirError::Io { path: log_path, source })?;
    let mut command = std::process::Command::new(exe);
    command
        .args(&submission.args)
        .current_dir(&submission.cwd)
        .stdin(std::process::Stdio::null())
        .stdout(log)
        .stderr(err);
    // A session of its own: no terminal, so no hang-up or Ctrl-C of the one that started it.
    // SAFETY: setsid(2) is async-signal-safe and touches no memory of the parent.
    unsafe {
        std::os::unix::process::CommandExt::pre_exec(&mut command, || {
            if libc::setsid() == -1 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command.spawn().map_err(|source| LaunchError::Spawn { exe: exe.to_path_buf(), source })?;
    let pid = child.id() as i32;
    submission.state = SubmissionState::Launched;
    submission.process = Some(LaunchedProcess {
        pid,
        start_ticks: crate::run_dir::stage_process::start_ticks(pid),
        launched_at: now_rfc3339(),
    });
    submission.write(root)?;
    Ok((submission, child))
}

/// Writes the answer to the gate `gate_id` (a choice's target node id, or free text) as an
/// answers file in the run directory `dir`, for `fabro resume --answers`; its path.
pub fn write_answer(dir: &Path, gate_id: &str, answer: &str) -> Result<PathBuf, LaunchError> {
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|since| since.as_millis())
        .unwrap_or_default();
    let path = dir.join(format!("answers-{millis}.json"));
    let text = serde_json::json!({ gate_id: [answer] }).to_string();
    crate::atomic_file::write_atomic(&path, text.as_bytes())
        .map_err(|source| RunDirError::Io { path: path.clone(), source })?;
    Ok(path)
}

/// Continues the run in `dir` (paused, interrupted or crashed) with `fabro resume` in a process
/// of its own, as [`launch`] starts one, with the answers file given: the resume goes on when
/// the terminal that asked for it closes. A run submitted before keeps its submission's origin
/// (a service's run stays the service's); any other becomes submitted by `by`.
pub fn launch_resume(
    dir: &Path,
    exe: &Path,
    answers: Option<&Path>,
    by: &str,
) -> Result<std::process::Child, LaunchError> {
    let dir =
        &std::path::absolute(dir).map_err(|source| RunDirError::Io { path: dir.to_path_buf(), source })?;
    let mut args = vec!["resume".to_string(), dir.display().to_string(), "-q".into()];
    if let Some(answers) = answers {
        args.extend(["--answers".into(), answers.display().to_string()]);
    }
    let cwd =
        std::env::current_dir().map_err(|source| RunDirError::Io { path: PathBuf::from("."), source })?;
    let mut submission = match Submission::read(dir)? {
        Some(submission) => submission,
        None => Submission {
            run_id: crate::run_dir::read_manifest(dir).map(|manifest| manifest.run_id).unwrap_or_default(),
            submitted_at: now_rfc3339(),
            by: by.to_string(),
            args: Vec::new(),
            cwd,
            workflow: crate::run_dir::read_manifest(dir).map(|manifest| manifest.workflow),
            state: SubmissionState::Launched,
            process: None,
            relaunches: 0,
        },
    };
    submission.args = args;
    // Written as launched, never as queued: a run service's queue must not start it as well.
    submission.state = SubmissionState::Launched;
    submission.process = None;
    submission.write(dir)?;
    launch(dir, exe).map(|(_, child)| child)
}

/// The run `root` became after `loop_restart` edges (its newest directory).
pub fn latest_dir(root: &Path) -> PathBuf {
    let mut dir = root.to_path_buf();
    for _ in 0..10_000 {
        let manifest = crate::run_dir::read_manifest(&dir);
        match manifest.and_then(|manifest| manifest.restarted_as) {
            Some(next) if Path::new(&next).is_dir() => dir = PathBuf::from(next),
            _ => break,
        }
    }
    dir
}

/// Waits until the run in `root` (or the run it restarted as) settles; its directory and state.
pub async fn wait(root: &Path, poll: Duration) -> (PathBuf, RunState) {
    loop {
        let dir = latest_dir(root);
        let state = RunState::of(&dir);
        if state.is_settled() && state != RunState::Ended(crate::run_status::RunStatus::Restarted) {
            return (dir, state);
        }
        tokio::time::sleep(poll).await;
    }
}

/// What [`cancel`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Canceled {
    /// It was queued: it will not start.
    Dequeued,
    /// Its process was asked to stop (SIGTERM): it ends as interrupted, its stage processes
    /// killed, its records complete.
    Signalled(i32),
}

/// Cancels the run in `root`: a queued one is taken off the queue, a running or starting one is
/// sent SIGTERM (the process interrupts it as at Ctrl-C).
pub fn cancel(root: &Path) -> Result<Canceled, LaunchError> {
    let dir = latest_dir(root);
    let run = dir.display().to_string();
    let state = RunState::of(&dir);
    let pid = match state {
        RunState::Queued => {
            if let Some(mut submission) = Submission::read(&dir)? {
                submission.state = SubmissionState::Canceled;
                submission.write(&dir)?;
            }
            return Ok(Canceled::Dequeued);
        }
        RunState::Running => crate::run_dir::lock_holder(&dir),
        RunState::Starting => match Submission::read(&dir)? {
            // Killed before it created the run, it reads as cancelled, not as never started.
            Some(mut submission) => {
                submission.state = SubmissionState::Canceled;
                submission.write(&dir)?;
                submission.process.map(|process| process.pid)
            }
            None => None,
        },
        other => return Err(LaunchError::NotCancelable { run, state: other.as_str() }),
    };
    let Some(pid) = pid.filter(|pid| *pid > 0) else {
        return Err(LaunchError::NotCancelable { run, state: "without a process to signal" });
    };
    // SAFETY: kill(2) with a positive pid signals that one process.
    if unsafe { libc::kill(pid, libc::SIGTERM) } == -1 {
        return Err(LaunchError::Signal { run, pid, source: std::io::Error::last_os_error() });
    }
    Ok(Canceled::Signalled(pid))
}
