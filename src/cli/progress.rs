//! What `fabro run` and `fabro resume` show on stderr while a run goes on. On a terminal: one
//! spinner per running stage (parallel branches each have theirs), finished stages printed
//! above them, in colour unless `NO_COLOR` is set. Elsewhere (or with `CI` set): one timestamped
//! line per event. A failed command stage shows the end of its output and where its logs are;
//! `-v` streams command output as it is written. Output that cannot be written (a closed pipe)
//! is dropped: it never stops the run.

use std::collections::HashMap;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fabro::events::Event;
use fabro::graph::HandlerType;
use fabro::run_dir::stage_output::{tail_lines, LogFollower, OUTPUT_LOGS};
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
        let colour = stderr_is_terminal && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
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

    pub fn show(&self, event: &Event) {
        if self.options.quiet {
            return;
        }
        let key = stage_key(event);
        match event.event.as_str() {
            "run.started" | "run.resumed" => {
                self.state().run_dir = text(event, "run_dir").map(PathBuf::from);
            }
            "stage.started" => self.stage_started(event, key),
            "stage.completed" | "stage.failed" => self.stage_ended(event, &key),
            "interview.started" => {
                // The terminal belongs to the question until it is answered.
                if let Some(multi) = &self.screen.multi {
                    multi.set_draw_target(ProgressDrawTarget::hidden());
                }
                if self.options.asks_person {
                    self.print(
                        event,
                        &self.paint(Paint::Ask, &format!("? {}: waiting for an answer", key.0)),
                    );
                }
            }
            "interview.completed" | "interview.timeout" => {
                if let Some(multi) = &self.screen.multi {
                    multi.set_draw_target(ProgressDrawTarget::stderr());
                }
                if let Some(line) = describe(event) {
                    self.print(event, &line);
                }
            }
            _ => {
                if let Some(line) = describe(event) {
                    self.print(event, &line);
                }
            }
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    fn stage_started(&self, event: &Event, key: StageKey) {
        let handler = text(event, "handler").unwrap_or("").to_string();
        let stage_dir = text(event, "stage_dir").unwrap_or("").to_string();
        let run_dir = self.state().run_dir.clone();
        let kind = HandlerType::from_type_name(&handler);
        if self.options.stream_output && kind == HandlerType::Command {
            if let Some(dir) = run_dir.as_ref().map(|run| run.join(&stage_dir)) {
                let logs = OUTPUT_LOGS.iter().rev().map(|name| LogFollower::new(dir.join(name))).collect();
                self.followers().insert(key.clone(), logs);
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
        self.state().stages.insert(key, (handler, stage_dir));
    }

    fn stage_ended(&self, event: &Event, key: &StageKey) {
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
        let failed = event.event == "stage.failed";
        let line = if kind == HandlerType::Conditional {
            // A conditional only routes: the outcome it passes on is not a failure of its own.
            let notes = text(event, "notes").unwrap_or("routed");
            self.paint(Paint::Plain, &format!("◇ {}: {notes}", key.0))
        } else {
            let mark = if failed { self.paint(Paint::Fail, "✗") } else { self.paint(Paint::Done, "✓") };
            let ms = event.fields.get("duration_ms").and_then(|v| v.as_u64()).unwrap_or(0);
            let status = text(event, "status").unwrap_or("");
            let mut line = format!("{mark} {}: {status} in {}", key.0, seconds(ms));
            if let Some(reason) = text(event, "failure_reason").filter(|reason| !reason.is_empty()) {
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

    fn print(&self, event: &Event, line: &str) {
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

fn stage_key(event: &Event) -> StageKey {
    (
        event.node_id.clone().unwrap_or_default(),
        u64::from(event.visit.unwrap_or(0)),
        text(event, "branch_id").or_else(|| text(event, "branch")).unwrap_or("").to_string(),
    )
}

fn text<'e>(event: &'e Event, key: &str) -> Option<&'e str> {
    event.fields.get(key).and_then(|v| v.as_str())
}

/// The progress line for an event that is not a stage starting or ending, if it deserves one.
fn describe(event: &Event) -> Option<String> {
    let node = event.node_id.as_deref().unwrap_or("");
    let field = |key: &str| text(event, key).unwrap_or("");
    Some(match event.event.as_str() {
        "stage.retrying" => format!("↻ {node}: retrying ({})", field("reason")),
        "run.dir_reused" => format!(
            "! {} held a run that never started (fabro was stopped before its first stage completed); its files were removed and the directory is reused",
            field("run_dir")
        ),
        "stage.survivor_killed" => format!(
            "! killed process group {} that {} left running when fabro was stopped",
            event.fields.get("pgid").map(|p| p.to_string()).unwrap_or_default(),
            field("stage_dir")
        ),
        // Plain edges say nothing worth a reason; conditions, labels and retries do.
        "edge.selected" => match field("reason") {
            "weight" | "lexical" => format!("  → {}", field("to")),
            // Each branch shows as its stages start.
            "fan_out" => return None,
            reason => format!("  → {} ({reason})", field("to")),
        },
        "interview.completed" => match (text(event, "key"), text(event, "label")) {
            (Some(key), Some(label)) => {
                let label = fabro::graph::Choice::from_edge(Some(label), field("target")).label.to_string();
                format!("  {node}: chose [{key}] {label} → {}", field("target"))
            }
            _ => format!(
                "  {node}: answered {}",
                event.fields.get("answer").map(|a| a.to_string()).unwrap_or_default()
            ),
        },
        "interview.timeout" => match text(event, "key") {
            Some(key) => {
                format!("  {node}: no answer in time; took the default [{key}] → {}", field("target"))
            }
            None => format!("  {node}: no answer in time"),
        },
        "child.started" => {
            let verb = if event.fields.get("resumed") == Some(&serde_json::Value::Bool(true)) {
                "continues"
            } else {
                "starts"
            };
            format!("  ↳ {node}: child run {verb} in {}", field("run_dir"))
        }
        "manager.steered" => format!("  ↳ {node}: steered the child at {}", field("child_node")),
        "child.finished" => format!("  ↳ {node}: child run {}", field("status")),
        _ => return None,
    })
}

pub fn seconds(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}
