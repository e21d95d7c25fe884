//! `fabro attach RUN`: shows a run started elsewhere (`fabro run --detach`, the run service,
//! another terminal) as `fabro run` shows its own: what happened so far, then each stage as it
//! goes. When the run stops at a human gate and this is a terminal, the question is asked here;
//! the answer resumes the run in a process of its own and the view goes on. Ctrl-C detaches and
//! leaves the run alone. Exits as `fabro wait` does once the run settles.

use std::path::{Path, PathBuf};
use std::time::Duration;

use fabro::event_log::LoggedEvent;
use fabro::graph::Choice;
use fabro::interview::console::Console;
use fabro::interview::{Answer, Interviewer, Question};
use fabro::log_tail::LogTail;
use fabro::run_dir::layout;
use fabro::run_dir::submission::RunState;
use fabro::run_status::RunStatus;

use super::exit;
use super::progress::{ProgressView, ViewOptions};

#[derive(clap::Args)]
pub struct Args {
    #[command(flatten)]
    run: super::RunRef,
    /// Only show the run: a gate it stops at is not asked here (the command exits 3 then).
    #[arg(long)]
    no_answer: bool,
    /// Work on the run service at this URL (as `fabro serve` prints it; a `?token=` in it or
    /// FABRO_SERVER_TOKEN is sent) instead of the runs directory here.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// Set from the global -v: stream command output and LLM answers as they are written.
    #[arg(skip)]
    pub stream_output: bool,
}

/// How often the run's files are looked at.
const POLL: Duration = Duration::from_millis(150);
/// How long a resume started here may take to take the run before attach gives up on it.
const RESUME_START: Duration = Duration::from_secs(30);

pub fn run(args: Args) -> u8 {
    if let Some(url) = &args.server {
        let no_answer = args.no_answer;
        return super::remote::on_server(url, args.run, move |client, id| async move {
            detachable(super::remote::attach(&client, &id, no_answer)).await
        });
    }
    let dir = match args.run.dir() {
        Ok(dir) => dir,
        Err(code) => return code,
    };
    super::block_on(detachable(attach(dir, args.no_answer, args.stream_output)))
}

/// Runs `following` until it ends or Ctrl-C detaches (leaving the run alone: exit 130).
pub(super) async fn detachable(following: impl std::future::Future<Output = u8>) -> u8 {
    tokio::select! {
        code = following => code,
        _ = tokio::signal::ctrl_c() => {
            eprintln!("\ndetached; the run goes on (`fabro attach` again to follow it)");
            exit::INTERRUPTED
        }
    }
}

async fn attach(root: PathBuf, no_answer: bool, stream_output: bool) -> u8 {
    let asks = !no_answer && Console::is_available();
    let view = ProgressView::new(ViewOptions { quiet: false, asks_person: asks, stream_output });
    let mut events = EventFollower::new(&root);
    let mut said_queued = false;
    loop {
        // A `loop_restart` goes on in a new directory: follow the newest.
        let dir = fabro::run_launcher::latest_dir(&root);
        if dir != events.dir {
            events = EventFollower::new(&dir);
        }
        view.pin_run_dir(&dir);
        let state = RunState::of(&dir);
        // Settled before the read: what is read now is all this process of the run wrote.
        for event in events.read_new() {
            view.show(&event);
        }
        match &state {
            RunState::Queued | RunState::Starting if !said_queued => {
                eprintln!("{}: {}, waiting for it to start", dir.display(), state.as_str());
                said_queued = true;
            }
            RunState::Ended(RunStatus::Restarted)
            | RunState::Queued
            | RunState::Starting
            | RunState::Running => {}
            RunState::Ended(RunStatus::Paused) if asks && waits_for_an_answer(&dir) => {
                match answer_here(&dir).await {
                    Ok(()) => continue,
                    Err(code) => return code,
                }
            }
            settled => return super::wait::settled(&dir, settled),
        }
        tokio::time::sleep(POLL).await;
    }
}

/// Whether the run in `dir` paused at a human gate (not at a ceiling, in step mode...).
fn waits_for_an_answer(dir: &Path) -> bool {
    fabro::run_dir::read_manifest(dir)
        .and_then(|manifest| manifest.pause)
        .is_some_and(|pause| pause.kind == fabro::outcome::PauseKind::Answer.as_str())
}

/// Asks the gate the run in `dir` waits at, writes the answer and resumes the run with it in a
/// process of its own; returns once that process has taken the run. Err: the exit code to end
/// with (nobody answered, or the resume could not start).
async fn answer_here(dir: &Path) -> Result<(), u8> {
    let Some(gate) = fabro::serve::waiting_gate(dir) else {
        // Paused for an answer, but its gate cannot be read back: say how it is done elsewhere.
        return Err(super::wait::settled(dir, &RunState::Ended(RunStatus::Paused)));
    };
    let choices: Vec<Choice<'_>> = gate
        .choices
        .iter()
        .map(|choice| Choice { key: choice.key.clone(), label: &choice.label, target: &choice.target })
        .collect();
    let question = Question {
        gate_id: &gate.id,
        text: &gate.question,
        choices: &choices,
        timeout: None,
        freeform: gate.freeform,
    };
    let answer = match Console::new().ask(&question).await {
        Answer::Choice(index) => choices[index].target.to_string(),
        Answer::Freeform(text) => text,
        Answer::Unrecognized(_) | Answer::Timeout | Answer::Unavailable => {
            return Err(super::wait::settled(dir, &RunState::Ended(RunStatus::Paused)));
        }
    };
    let exe = std::env::current_exe().map_err(|error| {
        eprintln!("error: cannot find the fabro executable to resume the run with: {error}");
        exit::FAILED
    })?;
    let resumed = fabro::run_launcher::write_answer(dir, &gate.id, &answer)
        .and_then(|answers| fabro::run_launcher::launch_resume(dir, &exe, Some(&answers), "cli"));
    let child = resumed.map_err(|error| {
        eprintln!("error: cannot resume the run: {error}");
        exit::FAILED
    })?;
    // Reaped when it ends, while this process lives; after that, init does it.
    std::thread::spawn(move || {
        let mut child = child;
        let _ = child.wait();
    });
    let started = std::time::Instant::now();
    while RunState::of(dir) == RunState::Ended(RunStatus::Paused) {
        if started.elapsed() > RESUME_START {
            let log = dir.join(layout::OUTPUT_LOG);
            eprintln!("error: the resume did not start; see {}", log.display());
            return Err(exit::FAILED);
        }
        tokio::time::sleep(POLL).await;
    }
    Ok(())
}

/// The events a run directory's `events.jsonl` gains.
struct EventFollower {
    dir: PathBuf,
    events: LogTail,
}

impl EventFollower {
    fn new(dir: &Path) -> EventFollower {
        EventFollower { dir: dir.to_path_buf(), events: LogTail::new(&dir.join(layout::EVENTS)) }
    }

    /// Every event written since the last read.
    fn read_new(&mut self) -> Vec<LoggedEvent> {
        let mut events = Vec::new();
        loop {
            let new = self.events.read_new();
            events.extend(new.lines.iter().filter_map(|line| LoggedEvent::from_line(line)));
            if !new.more {
                return events;
            }
        }
    }
}
