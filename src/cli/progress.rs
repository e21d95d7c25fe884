//! What `fabro run` and `fabro resume` show on stderr while a run goes on. On a terminal: one
//! spinner per running stage (parallel branches each have theirs), finished stages printed
//! above them, in colour unless `NO_COLOR` is set. Elsewhere (or with `CI` set): one timestamped
//! line per event. A failed command stage shows the end of its output and where its logs are;
//! `-v` streams command output and LLM stages' answers as they are written. Output that cannot
//! be written (a closed pipe) is dropped: it never stops the run.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fabro::event::{Event, SelectedEdge, StageEnd};
use fabro::event_log::LoggedEvent;
use fabro::graph::HandlerType;
use fabro::run_dir::stage_output::{follow_stage, tail_lines, LogFollower, OUTPUT_LOGS};
use indicatif::{MultiProgress, ProgressBar, ProgressDrawTarget, ProgressStyle};

/// Lines of each log shown under a failed command stage.
const FAILURE_TAIL_LINES: usize = 10;
/// How often `-v` looks for new command output.
const FOLLOW_INTERVAL: Duration = Duration::from_millis(100);

/// How the view behaves, decided by the CLI from its flags and the terminal.
#[derive(Debug, Clone, Copy, Default)]
pub struct ViewOptions {
    /// Nothing but the final summary (`-q`, `--json`).
    pub quiet: bool,
    /// A person answers gates at this terminal (no `--answers`/`--auto-approve`).
    pub asks_person: bool,
    /// Stream command output as it is written (`-v`).
    pub stream_output: bool,
}

/// One running stage: `(node, visit, branch)`.
type StageKey = (String, u64, String);

pub struct ProgressView {
    options: ViewOptions,
    live: bool,
    colour: bool,
    screen: Arc<Screen>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    run_dir: Option<PathBuf>,
    /// The run directory was given by [`ProgressView::pin_run_dir`]: the events' (which name it
    /// as the run's own process saw it, relative to its directory) do not replace it.
    pinned: bool,
    /// Handler and stage directory (relative to the run directory) of each started stage.
    stages: HashMap<StageKey, (String, String)>,
    spinners: HashMap<StageKey, ProgressBar>,
}

/// Where lines go: above the spinners on a terminal, else straight to stderr.
struct Screen {
    multi: Option<MultiProgress>,
    followers: Mutex<HashMap<StageKey, Vec<LogFollower>>>,
}

impl Screen {
    fn print(&self, line: &str) {
        // Streamed command output and failure tails are the stages' own text: no secrets.
        let line = &*fabro::secrets::redact(line);
        match &self.multi {
            // MultiProgress::println prints nothing while hidden (a gate is asking): write then.
            Some(multi) if !multi.is_hidden() => {
                let _ = multi.println(line);
            }
            _ => {
                let _ = writeln!(std::io::stderr(), "{line}");
            }
        }
    }

    /// Prints new lines of every followed log, prefixed with the stage's node id.
    fn drain_followers(&self) {
        let mut followers = self.followers.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        for ((node, ..), logs) in followers.iter_mut() {
            for follower in logs.iter_mut() {
                for line in follower.poll() {
                    self.print(&format!("  {node} │ {line}"));
                }
            }
        }
    }
}

impl ProgressView {
    pub fn new(options: ViewOptions) -> Arc<ProgressView> {
        let stderr_is_terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
        let live = !options.quiet && stderr_is_terminal && std::env::var_os("CI").is_none();
        // No colour in CI (docs/ci.md), even when its runner gives fabro a terminal.
        let colour = stderr_is_terminal
            && std::env::var_os("CI").is_none()
            && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
        let multi = live.then(|| MultiProgress::with_draw_target(ProgressDrawTarget::stderr()));
        let screen = Arc::new(Screen { multi, followers: Mutex::default() });
        if options.stream_output && !options.quiet {
            let watched = Arc::downgrade(&screen);
            std::thread::spawn(move || {
                while let Some(screen) = watched.upgrade() {
                    screen.drain_followers();
                    drop(screen);
                    std::thread::sleep(FOLLOW_INTERVAL);
                }
            });
        }
        Arc::new(ProgressView { options, live, colour, screen, state: Mutex::default() })
    }

    pub fn show(&self, logged: &LoggedEvent) {
        if self.options.quiet {
            return;
        }
        match &logged.event {
            Event::RunStarted { run_dir, .. } if !self.state().pinned => {
                self.state().run_dir = run_dir.clone()
            }
            Event::RunResumed { run_dir, .. } if !self.state().pinned => {
                self.state().run_dir = Some(run_dir.clone())
            }
            Event::StageStarted { handler, stage_dir, branch_id, .. } => {
                let key = stage_key(logged, branch_id.as_deref());
                self.stage_started(logged, key, handler, stage_dir.as_deref().unwrap_or(""));
            }
            Event::StageCompleted(end) => self.stage_ended(logged, end, false),
            Event::StageFailed(end) => self.stage_ended(logged, end, true),
            Event::InterviewStarted { .. } => {
                // The terminal belongs to the question until it is answered: the spinners stop
                // and go (none is left drawn above it), and come back after.
                if let Some(multi) = &self.screen.multi {
                    for spinner in self.state().spinners.values() {
                        spinner.disable_steady_tick();
                    }
                    let _ = multi.clear();
                    multi.set_draw_target(ProgressDrawTarget::hidden());
                }
                if self.options.asks_person {
                    let node = logged.node_id.as_deref().unwrap_or("");
                    self.print(logged, &self.paint(Paint::Ask, &format!("? {node}: waiting for an answer")));
                }
            }
            event => {
                if matches!(event, Event::InterviewCompleted { .. } | Event::InterviewTimeout { .. }) {
                    if let Some(multi) = &self.screen.multi {
                        multi.set_draw_target(ProgressDrawTarget::stderr());
                        for spinner in self.state().spinners.values() {
                            spinner.enable_steady_tick(Duration::from_millis(100));
                        }
                    }
                }
                if let Some(line) = describe(logged) {
                    self.print(logged, &line);
                }
            }
        }
    }

    /// Shows a run written by another process: its stages' files are under `dir`.
    pub fn pin_run_dir(&self, dir: &Path) {
        let mut state = self.state();
        state.run_dir = Some(dir.to_path_buf());
        state.pinned = true;
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn stage_started(&self, event: &LoggedEvent, key: StageKey, handler: &str, stage_dir: &str) {
        let run_dir = self.state().run_dir.clone();
        let kind = HandlerType::from_type_name(handler);
        if self.options.stream_output {
            if let Some(dir) = run_dir.as_ref().map(|run| run.join(stage_dir)) {
                let logs = follow_stage(kind, &dir);
                if !logs.is_empty() {
                    self.followers().insert(key.clone(), logs);
                }
            }
        }
        let label = match &key.2 {
            branch if branch.is_empty() => format!("{} ({handler})", key.0),
            branch => format!("{} ({handler}, branch {branch})", key.0),
        };
        match &self.screen.multi {
            Some(multi) => {
                let spinner = multi.add(ProgressBar::new_spinner());
                let style = ProgressStyle::with_template("{spinner} {msg} {elapsed}")
                    .unwrap_or_else(|_| ProgressStyle::default_spinner());
                spinner.set_style(style);
                spinner.set_message(label);
                spinner.enable_steady_tick(Duration::from_millis(100));
                self.state().spinners.insert(key.clone(), spinner);
            }
            None => self.print(event, &format!("▶ {label}")),
        }
        self.state().stages.insert(key, (handler.to_string(), stage_dir.to_string()));
    }

    fn stage_ended(&self, event: &LoggedEvent, end: &StageEnd, failed: bool) {
        let key = &stage_key(event, end.branch_id.as_deref());
        if let Some(logs) = self.followers().remove(key) {
            for mut follower in logs {
                for line in follower.finish() {
                    self.screen.print(&format!("  {} │ {line}", key.0));
                }
            }
        }
        let (spinner, started) = {
            let mut state = self.state();
            (state.spinners.remove(key), state.stages.get(key).cloned())
        };
        if let Some(spinner) = spinner {
            spinner.finish_and_clear();
            if let Some(multi) = &self.screen.multi {
                multi.remove(&spinner);
            }
        }
        let (handler, stage_dir) = started.unwrap_or_default();
        let kind = HandlerType::from_type_name(&handler);
        let line = if kind == HandlerType::Conditional {
            // A conditional only routes: the outcome it passes on is not a failure of its own.
            let notes = end.notes.as_deref().unwrap_or("routed");
            self.paint(Paint::Plain, &format!("◇ {}: {notes}", key.0))
        } else {
            let mark = if failed { self.paint(Paint::Fail, "✗") } else { self.paint(Paint::Done, "✓") };
            let mut line = format!("{mark} {}: {} in {}", key.0, end.status, seconds(end.duration_ms));
            if let Some(reason) = end.failure_reason.as_deref().filter(|reason| !reason.is_empty()) {
                line.push_str(&format!(" ({reason})"));
            }
            line
        };
        self.print(event, &line);
        if failed && kind == HandlerType::Command && !self.options.stream_output {
            let run_dir = self.state().run_dir.clone();
            if let Some(dir) = run_dir.map(|run| run.join(&stage_dir)) {
                for tail_line in self.failure_tail(&dir) {
                    self.screen.print(&tail_line);
                }
            }
        }
    }

    /// The end of a failed command's stderr and stdout, and where its logs are.
    fn failure_tail(&self, stage_dir: &Path) -> Vec<String> {
        let mut lines = Vec::new();
        for name in OUTPUT_LOGS {
            let tail = tail_lines(&stage_dir.join(name), FAILURE_TAIL_LINES);
            if tail.is_empty() {
                continue;
            }
            let stream = name.trim_end_matches(".log");
            let count = if tail.len() == 1 { "line".to_string() } else { format!("{} lines", tail.len()) };
            lines.push(format!("    {stream}, last {count}:"));
            lines.extend(tail.iter().map(|line| format!("    {} {line}", self.paint(Paint::Dim, "│"))));
        }
        lines.push(format!("    logs: {}/{{stdout,stderr}}.log", stage_dir.display()));
        lines
    }

    fn followers(&self) -> std::sync::MutexGuard<'_, HashMap<StageKey, Vec<LogFollower>>> {
        self.screen.followers.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn print(&self, event: &LoggedEvent, line: &str) {
        if self.live {
            self.screen.print(line);
        } else {
            self.screen.print(&format!("[{}] {line}", event.ts.get(11..19).unwrap_or("")));
        }
    }

    fn paint(&self, paint: Paint, text: &str) -> String {
        if !self.colour {
            return text.to_string();
        }
        let code = match paint {
            Paint::Done => "32",
            Paint::Fail => "31",
            Paint::Ask => "33",
            Paint::Dim => "2",
            Paint::Plain => return text.to_string(),
        };
        format!("\x1b[{code}m{text}\x1b[0m")
    }
}

#[derive(Clone, Copy)]
enum Paint {
    Done,
    Fail,
    Ask,
    Dim,
    Plain,
}

/// The stage an event is about; `branch` for a stage of a parallel branch.
fn stage_key(event: &LoggedEvent, branch: Option<&str>) -> StageKey {
    (
        event.node_id.clone().unwrap_or_default(),
        u64::from(event.visit.unwrap_or(0)),
        branch.unwrap_or("").to_string(),
    )
}

/// The progress line for an event that is not a stage starting or ending, if it deserves one.
fn describe(logged: &LoggedEvent) -> Option<String> {
    let node = logged.node_id.as_deref().unwrap_or("");
    Some(match &logged.event {
        Event::StageRetrying { reason, .. } => {
            format!("↻ {node}: retrying ({})", reason.as_deref().unwrap_or(""))
        }
        Event::LlmRetry { provider, attempt, delay_ms, error, .. } => format!(
            "↻ {node}: {provider}: {error}; trying again in {} (attempt {attempt} failed)",
            seconds(*delay_ms)
        ),
        Event::LlmTruncated { max_output_tokens, .. } => {
            format!("! {node}: the model's answer was cut off at its output limit ({max_output_tokens} tokens)")
        }
        Event::RunDirReused { run_dir, .. } => format!(
            "! {} held a run that never started (fabro was stopped before its first stage completed); its files were removed and the directory is reused",
            run_dir.display()
        ),
        Event::StageSurvivorKilled { stage_dir, pgid } => {
            format!("! killed process group {pgid} that {stage_dir} left running when fabro was stopped")
        }
        // Plain edges say nothing worth a reason; conditions, labels and retries do.
        Event::EdgeSelected(SelectedEdge { to, reason, .. }) => match reason.as_str() {
            "weight" | "lexical" => format!("  → {to}"),
            // Each branch shows as its stages start.
            "fan_out" => return None,
            reason => format!("  → {to} ({reason})"),
        },
        Event::InterviewCompleted { answer, key, label, target } => match (key, label) {
            (Some(key), Some(label)) => {
                let target = target.as_deref().unwrap_or("");
                let label = fabro::graph::Choice::from_edge(Some(label), target).label.to_string();
                format!("  {node}: chose [{key}] {label} → {target}")
            }
            _ => format!("  {node}: answered {}", serde_json::Value::from(answer.as_str())),
        },
        Event::InterviewTimeout { key, target, .. } => match key {
            Some(key) => {
                format!("  {node}: no answer in time; took the default [{key}] → {}", target.as_deref().unwrap_or(""))
            }
            None => format!("  {node}: no answer in time"),
        },
        Event::ChildStarted { run_dir, resumed, .. } => {
            let verb = if *resumed { "continues" } else { "starts" };
            format!("  ↳ {node}: child run {verb} in {run_dir}")
        }
        Event::ManagerSteered { child_node, .. } => format!("  ↳ {node}: steered the child at {child_node}"),
        Event::ChildFinished { status, .. } => format!("  ↳ {node}: child run {}", status.as_str()),
        _ => return None,
    })
}

pub fn seconds(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}
