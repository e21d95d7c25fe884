//! `fabro cancel RUN`: stops a running run as Ctrl-C would (it ends interrupted, its records
//! complete, `fabro resume` can continue it), or takes a queued one off the queue.

use std::time::{Duration, Instant};

use fabro::run_launcher::Canceled;

use super::exit;

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::RunRef,
    /// Return once the run was told to stop, without waiting for it to end.
    #[arg(long)]
    no_wait: bool,
    /// Work on the run service at this URL (as `fabro serve` prints it; a `?token=` in it or
    /// FABRO_SERVER_TOKEN is sent) instead of the runs directory here.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
}

/// How long `fabro cancel` waits for a run to end after telling it to stop.
const END_WAIT: Duration = Duration::from_secs(60);

pub fn run(args: Args) -> u8 {
    if let Some(url) = &args.server {
        let no_wait = args.no_wait;
        return super::remote::on_server(url, args.run, move |client, id| async move {
            super::remote::cancel(&client, &id, no_wait).await
        });
    }
    let dir = match args.run.dir() {
        Ok(dir) => dir,
        Err(code) => return code,
    };
    match fabro::run_launcher::cancel(&dir) {
        Ok(Canceled::Dequeued) => {
            eprintln!("run {} was queued; it will not start", dir.display());
            exit::SUCCESS
        }
        Ok(Canceled::Signalled(pid)) => {
            if args.no_wait {
                eprintln!("told run {} (process {pid}) to stop", dir.display());
                return exit::SUCCESS;
            }
            let deadline = Instant::now() + END_WAIT;
            let dir = fabro::run_launcher::latest_dir(&dir);
            while !fabro::run_dir::submission::RunState::of(&dir).is_settled() {
                if Instant::now() > deadline {
                    eprintln!(
                        "error: run {} (process {pid}) has not stopped after {}s",
                        dir.display(),
                        END_WAIT.as_secs()
                    );
                    return exit::FAILED;
                }
                std::thread::sleep(Duration::from_millis(100));
            }
            let state = fabro::run_dir::submission::RunState::of(&dir);
            eprintln!("run {} stopped: {}", dir.display(), state.as_str());
            exit::SUCCESS
        }
        Err(error) => {
            eprintln!("error: {error}");
            exit::INVALID
        }
    }
}
