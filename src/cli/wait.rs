//! `fabro wait RUN`: waits until a run (started with `--detach`, by the run service, or at
//! another terminal) settles, and exits as `fabro run` would have: 0 succeeded, 1 failed, 2 it
//! never started, 3 paused, 130 interrupted or cancelled.

use std::time::Duration;

use fabro::run_dir::submission::RunState;
use fabro::run_status::RunStatus;

use super::exit;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::RunRef,
    /// Give up after this long (30s, 5m, 2h): exit 124, the run goes on.
    #[arg(long, value_name = "DURATION", value_parser = humantime::parse_duration)]
    timeout: Option<Duration>,
    /// Work on the run service at this URL (as `fabro serve` prints it; a `?token=` in it or
    /// FABRO_SERVER_TOKEN is sent) instead of the runs directory here.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
}

/// How often the run's directory is looked at.
const POLL: Duration = Duration::from_millis(200);

pub fn run(args: Args) -> u8 {
    if let Some(url) = &args.server {
        let timeout = args.timeout;
        return super::remote::on_server(url, args.run, move |client, id| async move {
            super::remote::wait(&client, &id, timeout).await
        });
    }
    let dir = match args.run.dir() {
        Ok(dir) => dir,
        Err(code) => return code,
    };
    super::block_on(wait(dir, args.timeout))
}

async fn wait(dir: std::path::PathBuf, timeout: Option<Duration>) -> u8 {
    let waiting = fabro::run_launcher::wait(&dir, POLL);
    let waited = match timeout {
        Some(timeout) => tokio::time::timeout(timeout, waiting).await.ok(),
        None => Some(waiting.await),
    };
    let Some((dir, state)) = waited else {
        eprintln!("the run has not settled yet; it goes on");
        return 124;
    };
    settled(&dir, &state)
}

/// Says how the run in `dir` settled (as `state`); the exit code `fabro run` would have given.
pub(super) fn settled(dir: &std::path::Path, state: &RunState) -> u8 {
    let shown = dir.display();
    match state {
        RunState::Ended(RunStatus::Succeeded) => {
            eprintln!("run {shown} succeeded");
            exit::SUCCESS
        }
        RunState::Ended(RunStatus::Failed) => {
            let reason = fabro::run_dir::read_result(dir).and_then(|result| result.failure_reason);
            eprintln!("run {shown} failed{}", reason.map(|reason| format!(": {reason}")).unwrap_or_default());
            exit::FAILED
        }
        RunState::Ended(RunStatus::Paused) => {
            eprintln!("run {shown} paused; continue it with: fabro resume {shown}");
            exit::PAUSED
        }
        RunState::Ended(_) | RunState::Canceled => {
            eprintln!("run {shown} was {}", state.as_str());
            exit::INTERRUPTED
        }
        RunState::Crashed => {
            eprintln!("run {shown} stopped without finishing (its process died); continue it with: fabro resume {shown}");
            exit::FAILED
        }
        RunState::NeverStarted => {
            let log = dir.join(fabro::run_dir::layout::OUTPUT_LOG);
            let output = std::fs::read_to_string(&log).unwrap_or_default();
            let tail: Vec<&str> = output.lines().rev().take(20).collect();
            let tail: Vec<&str> = tail.into_iter().rev().collect();
            eprintln!(
                "run {shown} never started; its process printed ({}):\n{}",
                log.display(),
                tail.join("\n")
            );
            exit::INVALID
        }
        RunState::Unknown | RunState::Queued | RunState::Starting | RunState::Running => {
            eprintln!("error: {shown} is not a run directory");
            exit::INVALID
        }
    }
}
