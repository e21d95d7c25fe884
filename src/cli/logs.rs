//! `fabro logs RUN|--last [-f] [--output] [--node ID] [--json]`: a run's `events.jsonl`, one line per event.

use std::collections::HashMap;
use std::io::Write;
use std::path::{Path, PathBuf};

use fabro::graph::HandlerType;
use fabro::run_dir::stage_output::{follow_stage, LogFollower};
use fabro::terminal_text::escape_controls;
use std::time::Duration;

use serde_json::{Map, Value};

use super::exit;
use fabro::log_tail::LogTail;
use fabro::run_dir::layout;

#[derive(clap::Args)]
pub struct LogsArgs {
    #[command(flatten)]
    pub run: super::RunRef,
    /// Keep printing events as the run writes them; stops when the run ends or pauses.
    #[arg(short, long)]
    pub follow: bool,
    /// Only the events of this node (its stage events and the edges chosen after it).
    #[arg(long, value_name = "ID")]
    pub node: Option<String>,
    /// Print the raw JSON lines instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also print what stages wrote: command stages' stdout and stderr, LLM stages' streamed
    /// answers; each line under its stage, and with -f as it is written.
    #[arg(long, conflicts_with = "json")]
    pub output: bool,
}

/// How often `--follow` looks for new events.
const POLL: Duration = Duration::from_millis(200);
/// Longest value printed in full.
const MAX_VALUE_CHARS: usize = 120;
/// Events after which nothing more is written to this run directory.
const FINAL_EVENTS: [&str; 5] =
    ["run.completed", "run.failed", "run.interrupted", "run.paused", "run.restarted"];
/// Fields every event has; shown in their own columns, not as `key=value`.
const COLUMNS: [&str; 6] = ["seq", "ts", "run_id", "event", "node_id", "visit"];

pub fn run(args: LogsArgs) -> u8 {
    let run_dir = match args.run.dir() {
        Ok(dir) => dir,
        Err(code) => return code,
    };
    let path = run_dir.join(layout::EVENTS);
    if let Err(message) = wait_for_log(&run_dir, &path, args.follow) {
        eprintln!("error: {message}");
        return exit::INVALID;
    }
    let mut events = LogTail::new(&path);
    let mut printer = Printer {
        args: &args,
        line_no: 0,
        out: std::io::stdout().lock(),
        run_dir: run_dir.clone(),
        outputs: HashMap::new(),
    };
    loop {
        let new = events.read_new();
        if new.restarted {
            printer.line_no = 0; // a log that was replaced or cut short is read from its start
        }
        let mut finished = false;
        for line in &new.lines {
            match printer.line(line.as_bytes()) {
                Ok(is_final) => finished |= is_final,
                Err(_) => return exit::SUCCESS, // stdout closed (`fabro logs ... | head`)
            }
        }
        if new.more {
            continue;
        }
        if !args.follow {
            // A last line without a newline: the file as it stands is all there is.
            if let Some(line) = events.take_unfinished() {
                let _ = printer.line(line.as_bytes());
            }
            return exit::SUCCESS;
        }
        if finished {
            return exit::SUCCESS;
        }
        if new.lines.is_empty() && !fabro::run_dir::lock_is_held(&run_dir) {
            // Nothing new and no process drives the run: whatever it wrote before it stopped has
            // been read once the file is read again.
            let last = events.read_new();
            for line in &last.lines {
                if printer.line(line.as_bytes()).is_err() {
                    return exit::SUCCESS;
                }
            }
            if last.lines.is_empty() {
                let _ = printer.out.flush();
                eprintln!(
                    "note: no process drives this run and it recorded no end (its fabro was killed); \
                     `fabro resume` continues it"
                );
                return exit::SUCCESS;
            }
            continue;
        }
        if printer.print_new_output().is_err() || printer.out.flush().is_err() {
            return exit::SUCCESS;
        }
        std::thread::sleep(POLL);
    }
}

/// Checks that `events.jsonl` can be read. When following a run that has only just been created,
/// waits for it.
fn wait_for_log(run_dir: &Path, path: &Path, follow: bool) -> Result<(), String> {
    if !run_dir.is_dir() {
        return Err(format!("`{}` is not a directory", run_dir.display()));
    }
    let mut waited = Duration::ZERO;
    loop {
        match fabro::regular_file::open(path, false) {
            Ok(file) => {
                let limit = fabro::regular_file::FileKind::EventLog.limit();
                if file.metadata().is_ok_and(|meta| meta.len() > limit) {
                    return Err(format!(
                        "cannot read `{}`: it is larger than {} GiB, more than any run's event log",
                        path.display(),
                        limit >> 30
                    ));
                }
                return Ok(());
            }
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                let starting = follow && run_dir.join(layout::MANIFEST).is_file();
                if !starting || waited >= Duration::from_secs(10) {
                    return Err(format!(
                        "`{}` is not a fabro run directory (no events.jsonl)",
                        run_dir.display()
                    ));
                }
                std::thread::sleep(POLL);
                waited += POLL;
            }
            Err(error) => return Err(format!("cannot read `{}`: {error}", path.display())),
        }
    }
}

struct Printer<'a, W: Write> {
    args: &'a LogsArgs,
    line_no: usize,
    out: W,
    run_dir: PathBuf,
    /// The logs of stages that have started and not yet ended (`--output`), by
    /// node, visit and branch.
    outputs: HashMap<(String, String, String), (String, Vec<LogFollower>)>,
}

impl<W: Write> Printer<'_, W> {
    /// Prints one line of the log (when it passes the filter); returns whether it is a final event.
    fn line(&mut self, bytes: &[u8]) -> std::io::Result<bool> {
        self.line_no += 1;
        let text = String::from_utf8_lossy(bytes);
        let text = text.trim_end_matches('\r');
        if text.trim().is_empty() {
            return Ok(false);
        }
        let event = match serde_json::from_str::<Value>(text) {
            Ok(Value::Object(map)) => map,
            Ok(_) => return self.unreadable(text, "not a JSON object").map(|()| false),
            Err(error) => return self.unreadable(text, &error.to_string()).map(|()| false),
        };
        let name = event.get("event").and_then(Value::as_str).unwrap_or("");
        let is_final = FINAL_EVENTS.contains(&name);
        if let Some(node) = &self.args.node {
            if !belongs_to(&event, node) {
                return Ok(is_final);
            }
        }
        if self.args.json {
            writeln!(self.out, "{text}")?;
        } else {
            if self.args.output {
                self.follow_output(name, &event)?;
            }
            writeln!(self.out, "{}", escape_controls(&format_event(&event)))?;
        }
        Ok(is_final)
    }

    /// `--output`: starts following a stage's logs (a command's output, an LLM stage's answers)
    /// when it starts, and prints what is left of them when it ends (before its end event).
    fn follow_output(&mut self, name: &str, event: &Map<String, Value>) -> std::io::Result<()> {
        let text = |key: &str| event.get(key).and_then(Value::as_str).unwrap_or("").to_string();
        let visit = event.get("visit").map(value_text).unwrap_or_default();
        let branch = if event.contains_key("branch_id") { text("branch_id") } else { text("branch") };
        let key = (text("node_id"), visit, branch);
        match name {
            "stage.started" if !text("stage_dir").is_empty() => {
                let handler = text("handler");
                let logs = follow_stage(
                    HandlerType::from_type_name(&handler),
                    &self.run_dir.join(text("stage_dir")),
                );
                if !logs.is_empty() {
                    self.outputs.insert(key.clone(), (key.0.clone(), logs));
                }
            }
            "stage.completed" | "stage.failed" => {
                if let Some((node, mut logs)) = self.outputs.remove(&key) {
                    for follower in &mut logs {
                        for line in follower.finish() {
                            writeln!(self.out, "  {node} │ {}", escape_controls(&line))?;
                        }
                    }
                }
            }
            _ => {}
        }
        Ok(())
    }

    /// `--output -f`: what running stages wrote since the last look.
    fn print_new_output(&mut self) -> std::io::Result<()> {
        for (node, logs) in self.outputs.values_mut() {
            for follower in logs.iter_mut() {
                for line in follower.poll() {
                    writeln!(self.out, "  {node} │ {}", escape_controls(&line))?;
                }
            }
        }
        Ok(())
    }

    fn unreadable(&mut self, text: &str, error: &str) -> std::io::Result<()> {
        if self.args.json {
            if self.args.node.is_none() {
                // The raw lines, as they are.
                writeln!(self.out, "{text}")?;
            } else {
                eprintln!("warning: unreadable line {}: {error}", self.line_no);
            }
            return Ok(());
        }
        writeln!(
            self.out,
            "(unreadable line {}: {}: {})",
            self.line_no,
            error,
            escape_controls(&shorten(text, 60))
        )
    }
}

/// Whether an event is about `node`: a stage event of it, or the edge chosen after it. The
/// `checkpoint.*` records after a stage name it too, but are the run's, not the stage's.
fn belongs_to(event: &Map<String, Value>, node: &str) -> bool {
    let is = |key: &str| event.get(key).and_then(Value::as_str) == Some(node);
    let name = event.get("event").and_then(Value::as_str).unwrap_or("");
    if name.starts_with("checkpoint.") {
        false
    } else if event.contains_key("node_id") {
        is("node_id")
    } else {
        is("from")
    }
}

/// `HH:MM:SS.mmm  #seq  event  node@visit  key=value ...`
fn format_event(event: &Map<String, Value>) -> String {
    let ts = event.get("ts").and_then(Value::as_str).unwrap_or("");
    let time = ts.get(11..23).filter(|_| ts.get(10..11) == Some("T")).unwrap_or(ts);
    let seq = event.get("seq").map(|seq| format!("#{}", value_text(seq))).unwrap_or_else(|| "#?".into());
    let name = event.get("event").and_then(Value::as_str).unwrap_or("?");
    let node = match (event.get("node_id").and_then(Value::as_str), event.get("visit")) {
        (Some(node), Some(visit)) => format!("{node}@{}", value_text(visit)),
        (Some(node), None) => node.to_string(),
        (None, _) => "-".to_string(),
    };
    let fields: Vec<String> = event
        .iter()
        .filter(|(key, value)| !COLUMNS.contains(&key.as_str()) && !value.is_null())
        .map(|(key, value)| format!("{key}={}", shorten(&value_text(value), MAX_VALUE_CHARS)))
        .collect();
    let line = format!("{time:<12}  {seq:<5}  {name:<18}  {node:<16}  {}", fields.join(" "));
    line.trim_end().to_string()
}

/// A value on one line: strings unquoted, everything else compact JSON.
fn value_text(value: &Value) -> String {
    let text = match value {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    text.replace('\r', "\\r").replace('\n', "\\n").replace('\t', " ")
}

fn shorten(text: &str, max: usize) -> String {
    if text.chars().count() <= max {
        return text.to_string();
    }
    let mut out: String = text.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}
