//! `fabro inspect RUN|--last [--json] [--all]`: a run's status, stages, context and artifacts.

use std::path::Path;

use fabro::run_dir::{RunView, StageSummary};
use fabro::run_status::RunStatus;
use serde_json::{json, Map, Value};

use super::exit;

#[derive(clap::Args)]
pub struct InspectArgs {
    #[command(flatten)]
    pub run: super::RunRef,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
    /// Also show engine-managed context keys (internal.*, graph.*, thread.*, current*).
    #[arg(long)]
    pub all: bool,
}

/// Longest context key or stage id printed in full in a table column.
const MAX_KEY_CHARS: usize = 60;
/// Longest context value printed in full.
const MAX_VALUE_CHARS: usize = 100;

pub fn run(args: InspectArgs) -> u8 {
    let view = match args
        .run
        .resolve()
        .map_err(|e| e.to_string())
        .and_then(|dir| RunView::open(&dir).map_err(|e| e.to_string()))
    {
        Ok(view) => view,
        Err(error) => {
            eprintln!("error: {error}");
            return exit::INVALID;
        }
    };
    let text = if args.json { render_json(&view, args.all) } else { render_text(&view, args.all) };
    super::print(&text)
}

fn shown_context(view: &RunView, all: bool) -> Vec<(&str, &Value)> {
    let Some(checkpoint) = &view.checkpoint else { return Vec::new() };
    let mut entries: Vec<(&str, &Value)> =
        checkpoint.context.iter().filter(|(key, _)| all || !fabro::context::is_bookkeeping(key)).collect();
    entries.sort_by(|a, b| a.0.cmp(b.0));
    entries
}

fn render_json(view: &RunView, all: bool) -> String {
    let stages: Vec<Value> = view
        .stages()
        .iter()
        .map(|s| {
            json!({
                "node_id": s.node_id,
                "visits": s.visits,
                "status": s.status.map(|status| status.as_str()),
                "duration_ms": s.duration_ms,
                "input_tokens": s.input_tokens,
                "output_tokens": s.output_tokens,
                "cost_usd": s.cost_usd,
            })
        })
        .collect();
    let context: Map<String, Value> =
        shown_context(view, all).into_iter().map(|(key, value)| (key.to_string(), value.clone())).collect();
    let value = json!({
        "manifest": view.manifest,
        "status": view.status_label(),
        "current_node": view.current_node(),
        "next_node": view.next_node(),
        "stages": stages,
        "context": context,
        "artifacts": view.artifacts().unwrap_or_default(),
    });
    format!("{value}\n")
}

fn render_text(view: &RunView, all: bool) -> String {
    let m = &view.manifest;
    let mut out = String::new();
    let mut field = |name: &str, value: &str| out.push_str(&format!("{:<13}{}\n", format!("{name}:"), value));
    let cwd = std::env::current_dir().unwrap_or_default();
    let source = fabro::report::relative_display(Path::new(&m.source_path), &cwd);
    field("workflow", &format!("{} ({source})", m.workflow));
    field("run id", &m.run_id);
    match &m.pause {
        Some(pause) if view.status() == RunStatus::Paused => {
            field("status", &format!("{} ({})", view.status_label(), pause.kind));
            field("paused", &one_line(&pause.reason, 300));
        }
        _ => field("status", view.status_label()),
    }
    if !m.goal.is_empty() {
        field("goal", &one_line(&m.goal, MAX_VALUE_CHARS));
    }
    field("started", &m.started_at);
    field("finished", m.finished_at.as_deref().unwrap_or("-"));
    field("work dir", &m.work_dir);
    let current = view.current_node().unwrap_or("-");
    match view.status() {
        RunStatus::Paused => field("waiting at", current),
        RunStatus::Running => field("current node", current),
        _ => field("last node", current),
    }
    field("next node", view.next_node().unwrap_or("-"));
    if let Some(reason) = view.result.as_ref().and_then(|r| r.failure_reason.as_deref()) {
        field("failure", &one_line(reason, 200));
    }
    if let Some(from) = &m.restarted_from {
        field("restarted from", from);
    }
    if let Some(to) = &m.restarted_as {
        field("continued in", to);
    }

    let stages = view.stages();
    out.push('\n');
    if stages.is_empty() {
        out.push_str("stages: none completed yet\n");
    } else {
        out.push_str(&stage_table(view, &stages));
    }

    out.push_str("\ncontext:\n");
    let context = shown_context(view, all);
    if context.is_empty() {
        out.push_str("  (empty)\n");
    }
    let width = context.iter().map(|(key, _)| key.chars().count()).max().unwrap_or(0).min(MAX_KEY_CHARS);
    for (key, value) in context {
        let text = match value {
            Value::String(text) => text.clone(),
            other => other.to_string(),
        };
        let key = one_line(key, MAX_KEY_CHARS);
        let line = format!("  {key:<width$}  {}", one_line(&text, MAX_VALUE_CHARS));
        out.push_str(line.trim_end());
        out.push('\n');
    }
    if !all {
        out.push_str("  (engine keys internal.*, graph.*, thread.*, current* hidden; --all shows them)\n");
    }

    out.push('\n');
    match view.artifacts() {
        Some(files) if !files.is_empty() => {
            out.push_str("artifacts:\n");
            for file in files {
                out.push_str(&format!("  {file}\n"));
            }
        }
        _ => out.push_str("artifacts: none\n"),
    }
    out
}

fn stage_table(view: &RunView, stages: &[StageSummary]) -> String {
    let width = stages.iter().map(|s| s.node_id.chars().count()).max().unwrap_or(0).clamp(5, MAX_KEY_CHARS);
    let mut out = format!(
        "{:<width$}  {:>6}  {:<16}  {:>9}  {:>9}  {:>10}  {:>9}\n",
        "stage", "visits", "last outcome", "time", "tokens in", "tokens out", "cost"
    );
    let tokens = |n: u64| if n == 0 { "-".to_string() } else { n.to_string() };
    // A stage without model calls has no cost; one whose model has no known price, `n/a`.
    let cost = |cost: Option<f64>, used_tokens: bool| match cost {
        Some(usd) => format!("${usd:.4}"),
        None if used_tokens => "n/a".to_string(),
        None => "-".to_string(),
    };
    let unpriced = stages.iter().any(|s| s.cost_usd.is_none() && s.input_tokens + s.output_tokens > 0);
    for s in stages {
        out.push_str(&format!(
            "{:<width$}  {:>6}  {:<16}  {:>9}  {:>9}  {:>10}  {:>9}\n",
            one_line(&s.node_id, MAX_KEY_CHARS),
            s.visits,
            s.status.map(|status| status.as_str()).unwrap_or("-"),
            seconds(s.duration_ms),
            tokens(s.input_tokens),
            tokens(s.output_tokens),
            cost(s.cost_usd, s.input_tokens + s.output_tokens > 0),
        ));
    }
    let visits: u32 = stages.iter().map(|s| s.visits).sum();
    let stage_ms: u64 = stages.iter().map(|s| s.duration_ms).sum();
    // The run's own duration when result.json is current (it includes the engine's time).
    let total_ms = match &view.result {
        Some(result) if result.status == view.status() => result.duration_ms.max(stage_ms),
        _ => stage_ms,
    };
    out.push_str(&format!(
        "{:<width$}  {:>6}  {:<16}  {:>9}  {:>9}  {:>10}  {:>9}\n",
        "total",
        visits,
        "",
        seconds(total_ms),
        tokens(stages.iter().map(|s| s.input_tokens).sum()),
        tokens(stages.iter().map(|s| s.output_tokens).sum()),
        cost(
            stages.iter().filter_map(|s| s.cost_usd).reduce(|a, b| a + b),
            stages.iter().any(|s| s.input_tokens + s.output_tokens > 0)
        ),
    ));
    if unpriced {
        out.push_str("(n/a: no price is known for the model; set input_per_mtok and output_per_mtok in the config file)\n");
    }
    out
}

fn seconds(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// `text` on one line, cut to `max` characters with "…".
fn one_line(text: &str, max: usize) -> String {
    let flat = text.replace('\r', "\\r").replace('\n', "\\n").replace('\t', " ");
    if flat.chars().count() <= max {
        return flat;
    }
    let mut out: String = flat.chars().take(max.saturating_sub(1)).collect();
    out.push('…');
    out
}
