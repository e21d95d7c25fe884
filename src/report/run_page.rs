//! A whole run as one document for people (`fabro report`, `fabro run --output`): the header
//! (workflow, goal, status, times, tokens and cost per model), a table of stage visits, then per
//! visit what it was told and answered, command output, gate answers, context events and files,
//! and the context at the end. [`RunPage::read`] gathers it from a run directory; [`markdown`]
//! and [`html`] render it (HTML as one self-contained file: no script, no link to anything).

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::path::Path;

use serde_json::Value;

use super::read_tail;
use super::{seconds, shorten};
use crate::run_dir::layout;
use crate::run_dir::stage_output::tail_lines;
use crate::run_dir::{RunView, StageRecord, ViewError};

/// How much of a preamble, prompt or response a report shows.
const TEXT_BYTES: u64 = 16 * 1024;
/// Lines of command output shown per stream.
const OUTPUT_LINES: usize = 20;
/// Context values longer than this are cut in the report.
const CONTEXT_VALUE_CHARS: usize = 200;

/// Everything a report shows about a run.
#[derive(Debug, Clone, Default)]
pub struct RunPage {
    pub workflow: String,
    pub goal: String,
    pub run_id: String,
    pub status: String,
    pub started_at: String,
    pub duration_ms: Option<u64>,
    pub failure_reason: Option<String>,
    /// Tokens in and out and estimated cost, per model.
    pub models: BTreeMap<String, ModelTotals>,
    pub visits: Vec<VisitPage>,
    /// The context at the end, engine-managed keys left out.
    pub context: Vec<(String, String)>,
    /// Commits on the run's branch, in worktree mode.
    pub worktree_branch: Option<String>,
    /// The context-usage chart (SVG), when LLM stages made calls.
    pub context_chart: Option<String>,
    /// In worktree mode, the run's commits on its branch, newest first: short id and summary.
    pub commits: Vec<(String, String)>,
}

#[derive(Debug, Clone, Default, PartialEq)]
pub struct ModelTotals {
    pub input_tokens: u64,
    pub output_tokens: u64,
    pub cost_usd: Option<f64>,
}

/// One stage visit.
#[derive(Debug, Clone, Default)]
pub struct VisitPage {
    pub node_id: String,
    pub visit: u32,
    pub handler: String,
    pub status: String,
    pub duration_ms: u64,
    pub model: Option<String>,
    pub input_tokens: Option<u64>,
    pub output_tokens: Option<u64>,
    pub cost_usd: Option<f64>,
    pub failure_reason: Option<String>,
    pub notes: Option<String>,
    pub preamble: Option<String>,
    pub prompt: Option<String>,
    pub response: Option<String>,
    pub stdout_tail: Vec<String>,
    pub stderr_tail: Vec<String>,
    /// Operator notes (step mode), gate answers, compaction and context-budget events, one line
    /// each.
    pub events: Vec<String>,
    pub files_touched: Vec<String>,
}

impl VisitPage {
    /// True when the visit has anything to show beyond its row in the stage table.
    pub fn has_details(&self) -> bool {
        self.notes.is_some()
            || self.preamble.is_some()
            || self.prompt.is_some()
            || self.response.is_some()
            || !self.stdout_tail.is_empty()
            || !self.stderr_tail.is_empty()
            || !self.events.is_empty()
            || !self.files_touched.is_empty()
    }
}

impl RunPage {
    /// Reads the run in `root`; a visit's missing files leave its fields empty.
    pub fn read(root: &Path) -> Result<RunPage, ViewError> {
        let view = RunView::open(root)?;
        let events = read_events(root);
        let result = view.result.as_ref();
        let records: Vec<StageRecord> = result.map(|r| r.stages.clone()).unwrap_or_default();
        let visits: Vec<VisitPage> = records.iter().map(|record| visit_page(root, record, &events)).collect();
        let mut models: BTreeMap<String, ModelTotals> = BTreeMap::new();
        for visit in &visits {
            let (Some(model), Some(input)) = (&visit.model, visit.input_tokens) else { continue };
            let totals = models.entry(model.clone()).or_default();
            totals.input_tokens += input;
            totals.output_tokens += visit.output_tokens.unwrap_or(0);
            if let Some(cost) = visit.cost_usd {
                *totals.cost_usd.get_or_insert(0.0) += cost;
            }
        }
        let mut context: Vec<(String, String)> = view
            .checkpoint
            .as_ref()
            .map(|checkpoint| {
                checkpoint
                    .context
                    .iter()
                    .filter(|(key, _)| !crate::context::is_bookkeeping(key))
                    .map(|(key, value)| (key.to_string(), shorten(&value_text(value), CONTEXT_VALUE_CHARS)))
                    .collect()
            })
            .unwrap_or_default();
        context.sort();
        Ok(RunPage {
            workflow: view.manifest.workflow.clone(),
            goal: view.manifest.goal.clone(),
            run_id: view.manifest.run_id.clone(),
            status: view.status().as_str().to_string(),
            started_at: view.manifest.started_at.clone(),
            duration_ms: result.map(|r| r.duration_ms),
            failure_reason: result.and_then(|r| r.failure_reason.clone()),
            models,
            visits,
            context,
            worktree_branch: view.manifest.worktree.as_ref().map(|w| w.branch.clone()),
            commits: view
                .manifest
                .worktree
                .as_ref()
                .map(|w| run_commits(Path::new(&w.path), &w.branch, &view.manifest.run_id))
                .unwrap_or_default(),
            context_chart: result.and_then(|result| {
                super::context_chart::render(&super::context_chart::read_series(root, result))
            }),
        })
    }

    /// Tokens in and out over every model.
    pub fn total_tokens(&self) -> (u64, u64) {
        self.models.values().fold((0, 0), |(i, o), m| (i + m.input_tokens, o + m.output_tokens))
    }

    /// Estimated cost over the models whose price is known.
    pub fn total_cost(&self) -> Option<f64> {
        self.models.values().filter_map(|m| m.cost_usd).reduce(|a, b| a + b)
    }
}

/// The commits of run `run_id` on `branch` (those with its `Fabro-Run:` trailer), newest first,
/// read from the repository of the run's worktree; none when it cannot be read.
fn run_commits(worktree: &Path, branch: &str, run_id: &str) -> Vec<(String, String)> {
    const MOST: usize = 1000;
    let Ok(repo) = git2::Repository::open(worktree) else { return Vec::new() };
    let Ok(tip) = repo.revparse_single(&format!("refs/heads/{branch}")) else { return Vec::new() };
    let Ok(mut walk) = repo.revwalk() else { return Vec::new() };
    if walk.push(tip.id()).is_err() {
        return Vec::new();
    }
    let trailer = format!("Fabro-Run: {run_id}");
    walk.flatten()
        .take(MOST)
        .filter_map(|oid| repo.find_commit(oid).ok())
        .take_while(|commit| String::from_utf8_lossy(commit.message_bytes()).contains(&trailer))
        .map(|commit| {
            let id = commit.id().to_string().chars().take(10).collect();
            (id, String::from_utf8_lossy(commit.summary_bytes().unwrap_or_default()).into_owned())
        })
        .collect()
}

fn read_events(root: &Path) -> Vec<Value> {
    let text = read_tail(&root.join(layout::EVENTS), 64 * 1024 * 1024).unwrap_or_default();
    text.lines().filter_map(|line| serde_json::from_str(line).ok()).collect()
}

fn visit_page(root: &Path, record: &StageRecord, events: &[Value]) -> VisitPage {
    let dir = record.dir_in(root);
    let read = |name: &str| {
        dir.as_ref()
            .map(|dir| dir.join(name))
            .filter(|path| path.is_file())
            .and_then(|path| read_tail(&path, TEXT_BYTES))
            .filter(|text| !text.trim().is_empty())
    };
    let status: Value =
        read(layout::STATUS).and_then(|text| serde_json::from_str(&text).ok()).unwrap_or_default();
    let tail =
        |name: &str| dir.as_ref().map(|dir| tail_lines(&dir.join(name), OUTPUT_LINES)).unwrap_or_default();
    let here = |event: &&Value| {
        event["node_id"].as_str() == Some(record.node_id.as_str())
            && event["visit"].as_u64() == Some(u64::from(record.visit))
    };
    VisitPage {
        node_id: record.node_id.clone(),
        visit: record.visit,
        handler: record.handler.as_ref().map(ToString::to_string).unwrap_or_default(),
        status: record.status.as_str().to_string(),
        duration_ms: record.duration_ms,
        model: status["model"].as_str().map(str::to_string),
        input_tokens: record.usage.as_ref().map(|u| u.input_tokens),
        output_tokens: record.usage.as_ref().map(|u| u.output_tokens),
        cost_usd: record.cost_usd,
        failure_reason: record.failure_reason.clone(),
        // A routing stage keeps no status.json: its notes are in its completion event.
        notes: status["notes"].as_str().map(str::to_string).or_else(|| {
            events
                .iter()
                .filter(here)
                .find(|event| matches!(event["event"].as_str(), Some("stage.completed" | "stage.failed")))
                .and_then(|event| event["notes"].as_str().map(str::to_string))
        }),
        preamble: read(layout::PREAMBLE),
        prompt: read(layout::PROMPT),
        response: read(layout::RESPONSE),
        stdout_tail: tail(layout::STDOUT_LOG),
        stderr_tail: tail(layout::STDERR_LOG),
        events: status["operator_notes"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|note| note.as_str().map(|note| format!("note from the operator: {note}")))
            .chain(events.iter().filter(here).filter_map(describe_event))
            .collect(),
        files_touched: status["files_touched"]
            .as_array()
            .map(|files| files.iter().filter_map(|f| f.as_str().map(str::to_string)).collect())
            .unwrap_or_default(),
    }
}

/// The line a report gives an event of a visit, for the events worth showing.
fn describe_event(event: &Value) -> Option<String> {
    let name = event["event"].as_str()?;
    let field = |key: &str| value_text(&event[key]);
    Some(match name {
        "interview.completed" => match event["key"].as_str() {
            Some(key) => {
                let target = field("target");
                let label = field("label");
                let choice = crate::graph::Choice::from_edge(Some(&label), &target);
                format!("answered `{}`: chose [{key}] {} → {target}", field("answer"), choice.label)
            }
            None => format!("answered `{}`", field("answer")),
        },
        "interview.timeout" => {
            format!("no answer within {}; default: {}", field("timeout"), field("default"))
        }
        name if name.starts_with("agent.compaction") || name.starts_with("agent.context") => {
            let fields: Vec<String> = event
                .as_object()?
                .iter()
                .filter(|(key, value)| {
                    !["event", "ts", "seq", "run_id", "node_id", "visit"].contains(&key.as_str())
                        && !value.is_null()
                })
                .map(|(key, value)| format!("{key}={}", value_text(value)))
                .collect();
            format!("{name} {}", fields.join(" "))
        }
        _ => return None,
    })
}

fn value_text(value: &Value) -> String {
    match value {
        Value::String(text) => text.clone(),
        Value::Null => String::new(),
        other => other.to_string(),
    }
}

fn cost(cost: Option<f64>) -> String {
    cost.map_or_else(|| "n/a".to_string(), |usd| format!("${usd:.4}"))
}

fn tokens(value: Option<u64>) -> String {
    value.map_or_else(|| "-".to_string(), |n| n.to_string())
}

/// The run as Markdown.
pub fn markdown(page: &RunPage) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "# Run of `{}`: {}\n", page.workflow, page.status);
    if !page.goal.is_empty() {
        let _ = writeln!(out, "**Goal:** {}\n", page.goal);
    }
    let _ = writeln!(out, "- Run id: `{}`", page.run_id);
    let _ = writeln!(out, "- Started: {}", page.started_at);
    let _ = writeln!(out, "- Duration: {}", page.duration_ms.map_or_else(|| "-".to_string(), seconds));
    let (input, output) = page.total_tokens();
    let _ = writeln!(out, "- Tokens: {input} in / {output} out, estimated cost {}", cost(page.total_cost()));
    for (model, totals) in &page.models {
        let _ = writeln!(
            out,
            "  - `{model}`: {} in / {} out, {}",
            totals.input_tokens,
            totals.output_tokens,
            cost(totals.cost_usd)
        );
    }
    if let Some(reason) = &page.failure_reason {
        let _ = writeln!(out, "- Failure: {reason}");
    }
    if let Some(branch) = &page.worktree_branch {
        let _ = writeln!(out, "- Commits on branch `{branch}`:");
        for (id, summary) in &page.commits {
            let _ = writeln!(out, "  - `{id}` {summary}");
        }
    }
    out.push_str("\n## Stages\n\n| stage | visit | handler | outcome | time | model | tokens in | tokens out | cost | failure |\n|---|---:|---|---|---:|---|---:|---:|---:|---|\n");
    for visit in &page.visits {
        let _ = writeln!(
            out,
            "| `{}` | {} | {} | {} | {} | {} | {} | {} | {} | {} |",
            visit.node_id,
            visit.visit,
            visit.handler,
            visit.status,
            seconds(visit.duration_ms),
            visit.model.as_deref().unwrap_or("-"),
            tokens(visit.input_tokens),
            tokens(visit.output_tokens),
            if visit.input_tokens.is_some() { cost(visit.cost_usd) } else { "-".to_string() },
            visit.failure_reason.as_deref().unwrap_or("").replace('|', "\\|").replace('\n', " "),
        );
    }
    if page.context_chart.is_some() {
        let _ = writeln!(
            out,
            "\nContext usage: see `{}` in the run directory.",
            super::context_chart::CHART_FILE
        );
    }
    for visit in page.visits.iter().filter(|visit| visit.has_details()) {
        let _ = writeln!(out, "\n## `{}` (visit {}): {}\n", visit.node_id, visit.visit, visit.status);
        if let Some(notes) = &visit.notes {
            let _ = writeln!(out, "{notes}\n");
        }
        for (title, text) in
            [("Preamble", &visit.preamble), ("Prompt", &visit.prompt), ("Response", &visit.response)]
        {
            if let Some(text) = text {
                let _ = writeln!(out, "**{title}**\n\n{}\n", fenced(text));
            }
        }
        for (title, lines) in [("stdout", &visit.stdout_tail), ("stderr", &visit.stderr_tail)] {
            if !lines.is_empty() {
                let _ = writeln!(
                    out,
                    "**{title}** (last {} lines)\n\n{}\n",
                    lines.len(),
                    fenced(&lines.join("\n"))
                );
            }
        }
        for event in &visit.events {
            let _ = writeln!(out, "- {event}");
        }
        if !visit.files_touched.is_empty() {
            let _ = writeln!(out, "- Files: {}", visit.files_touched.join(", "));
        }
    }
    if !page.context.is_empty() {
        out.push_str("\n## Context at the end\n\n| key | value |\n|---|---|\n");
        for (key, value) in &page.context {
            let _ = writeln!(out, "| `{key}` | {} |", value.replace('|', "\\|").replace('\n', " "));
        }
    }
    out
}

/// A fenced code block long enough not to be closed by the text's own backticks.
fn fenced(text: &str) -> String {
    let longest = text.split(|c| c != '`').map(str::len).max().unwrap_or(0);
    let fence = "`".repeat(longest.max(2) + 1);
    format!("{fence}\n{}\n{fence}", text.trim_end())
}

/// The run as one self-contained HTML page.
pub fn html(page: &RunPage) -> String {
    let e = escape;
    let mut out = String::from("<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n");
    let _ = writeln!(out, "<title>{} · {}</title>", e(&page.workflow), e(&page.status));
    out.push_str(STYLE);
    out.push_str("</head>\n<body>\n");
    let _ = writeln!(
        out,
        "<h1>Run of <code>{}</code>: <span class=\"{}\">{}</span></h1>",
        e(&page.workflow),
        e(&page.status),
        e(&page.status)
    );
    if !page.goal.is_empty() {
        let _ = writeln!(out, "<p><strong>Goal:</strong> {}</p>", e(&page.goal));
    }
    let (input, output) = page.total_tokens();
    out.push_str("<ul>\n");
    let _ = writeln!(out, "<li>Run id: <code>{}</code></li>", e(&page.run_id));
    let _ = writeln!(out, "<li>Started: {}</li>", e(&page.started_at));
    let _ = writeln!(out, "<li>Duration: {}</li>", page.duration_ms.map_or_else(|| "-".to_string(), seconds));
    let _ = writeln!(
        out,
        "<li>Tokens: {input} in / {output} out, estimated cost {}</li>",
        cost(page.total_cost())
    );
    for (model, totals) in &page.models {
        let _ = writeln!(
            out,
            "<li><code>{}</code>: {} in / {} out, {}</li>",
            e(model),
            totals.input_tokens,
            totals.output_tokens,
            cost(totals.cost_usd)
        );
    }
    if let Some(reason) = &page.failure_reason {
        let _ = writeln!(out, "<li>Failure: {}</li>", e(reason));
    }
    if let Some(branch) = &page.worktree_branch {
        let _ = writeln!(out, "<li>Commits on branch <code>{}</code>:<ul>", e(branch));
        for (id, summary) in &page.commits {
            let _ = writeln!(out, "<li><code>{}</code> {}</li>", e(id), e(summary));
        }
        out.push_str("</ul></li>\n");
    }
    out.push_str("</ul>\n<h2>Stages</h2>\n<table>\n<tr><th>stage</th><th>visit</th><th>handler</th><th>outcome</th><th>time</th><th>model</th><th>tokens in</th><th>tokens out</th><th>cost</th><th>failure</th></tr>\n");
    for visit in &page.visits {
        let _ = writeln!(
            out,
            "<tr><td>{}</td><td>{}</td><td>{}</td><td class=\"{}\">{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            if visit.has_details() {
                format!("<a href=\"#{}-{}\">{}</a>", e(&visit.node_id), visit.visit, e(&visit.node_id))
            } else {
                e(&visit.node_id)
            },
            visit.visit,
            e(&visit.handler),
            e(&visit.status),
            e(&visit.status),
            seconds(visit.duration_ms),
            e(visit.model.as_deref().unwrap_or("-")),
            tokens(visit.input_tokens),
            tokens(visit.output_tokens),
            if visit.input_tokens.is_some() { cost(visit.cost_usd) } else { "-".to_string() },
            e(visit.failure_reason.as_deref().unwrap_or("")),
        );
    }
    out.push_str("</table>\n");
    if let Some(chart) = &page.context_chart {
        let _ = writeln!(out, "<h2>Context usage</h2>\n{chart}");
    }
    for visit in page.visits.iter().filter(|visit| visit.has_details()) {
        let _ = writeln!(
            out,
            "<h2 id=\"{}-{}\"><code>{}</code> (visit {}): <span class=\"{}\">{}</span></h2>",
            e(&visit.node_id),
            visit.visit,
            e(&visit.node_id),
            visit.visit,
            e(&visit.status),
            e(&visit.status)
        );
        out.push_str(&visit_html(visit));
    }
    if !page.context.is_empty() {
        out.push_str("<h2>Context at the end</h2>\n<table>\n<tr><th>key</th><th>value</th></tr>\n");
        for (key, value) in &page.context {
            let _ = writeln!(out, "<tr><td><code>{}</code></td><td>{}</td></tr>", e(key), e(value));
        }
        out.push_str("</table>\n");
    }
    out.push_str("</body>\n</html>\n");
    out
}

/// What a report (and `fabro serve`'s stage page) shows of one visit, in HTML: notes, preamble
/// (collapsed), prompt, response, output tails, events and files.
pub fn visit_html(visit: &VisitPage) -> String {
    let e = escape;
    let mut out = String::new();
    if let Some(notes) = &visit.notes {
        let _ = writeln!(out, "<p>{}</p>", e(notes));
    }
    if let Some(preamble) = &visit.preamble {
        let _ = writeln!(out, "<details><summary>Preamble</summary><pre>{}</pre></details>", e(preamble));
    }
    for (title, text) in [("Prompt", &visit.prompt), ("Response", &visit.response)] {
        if let Some(text) = text {
            let _ =
                writeln!(out, "<h3>{title}</h3>\n<pre class=\"{}\">{}</pre>", title.to_lowercase(), e(text));
        }
    }
    for (title, lines) in [("stdout", &visit.stdout_tail), ("stderr", &visit.stderr_tail)] {
        if !lines.is_empty() {
            let _ = writeln!(
                out,
                "<h3>{title} (last {} lines)</h3>\n<pre class=\"{title}\">{}</pre>",
                lines.len(),
                e(&lines.join("\n"))
            );
        }
    }
    if !visit.events.is_empty() || !visit.files_touched.is_empty() {
        out.push_str("<ul>\n");
        for event in &visit.events {
            let _ = writeln!(out, "<li>{}</li>", e(event));
        }
        if !visit.files_touched.is_empty() {
            let _ = writeln!(out, "<li>Files: {}</li>", e(&visit.files_touched.join(", ")));
        }
        out.push_str("</ul>\n");
    }
    out
}

/// The style of fabro's HTML pages (reports and `fabro serve`).
pub const STYLE: &str = "<style>\nbody{font-family:system-ui,sans-serif;max-width:72rem;margin:2rem auto;padding:0 1rem;color:#222}\ntable{border-collapse:collapse}td,th{border:1px solid #ccc;padding:.25rem .5rem;text-align:left;vertical-align:top}\npre{background:#f6f6f6;padding:.5rem;overflow:auto;white-space:pre-wrap}\n.success,.succeeded{color:#2e7d32}.fail,.failed{color:#c62828}.paused,.interrupted,.retry,.partial_success{color:#b26a00}\n</style>\n";

/// Escapes text for HTML content and attribute values.
pub fn escape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    for c in text.chars() {
        match c {
            '&' => out.push_str("&amp;"),
            '<' => out.push_str("&lt;"),
            '>' => out.push_str("&gt;"),
            '"' => out.push_str("&quot;"),
            '\'' => out.push_str("&#39;"),
            c => out.push(c),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fences_outgrow_the_backticks_of_the_text() {
        assert_eq!(fenced("a ``` b"), "````\na ``` b\n````");
        assert_eq!(fenced("plain"), "```\nplain\n```");
    }

    #[test]
    fn html_escapes_everything_it_shows() {
        let page = RunPage {
            workflow: "<w>".into(),
            status: "failed".into(),
            goal: "a & b".into(),
            failure_reason: Some("\"x\" <script>".into()),
            ..RunPage::default()
        };
        let html = html(&page);
        assert!(html.contains("&lt;w&gt;") && html.contains("a &amp; b"), "{html}");
        assert!(!html.contains("<script>"), "{html}");
        assert!(!html.contains("http"), "self-contained: {html}");
    }
}
