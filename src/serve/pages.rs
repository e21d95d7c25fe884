//! The HTML pages of `fabro serve`, rendered on the server from run directories.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::graph::HandlerType;
use crate::interview::Gate;
use crate::render::{dot, DotOptions, Overlay};
use crate::report::run_page::{escape, visit_html, RunPage, STYLE};
use crate::run_dir::layout;
use crate::run_dir::submission::RunState;
use crate::run_dir::RunView;
use crate::run_status::RunStatus;
use crate::source::SourceFile;

/// What `fabro serve` adds to the report style.
const SERVE_STYLE: &str = ".running{color:#b26a00}#graph svg{max-width:100%;height:auto}#events{max-height:24rem;overflow:auto;font-family:monospace;font-size:.85rem}\n\
.board{display:flex;gap:1rem;overflow-x:auto;align-items:flex-start}.column{min-width:10rem;flex:1}.column ul{list-style:none;padding:0}\
.card{border:1px solid #ccc;border-radius:6px;padding:.5rem;margin-bottom:.5rem}.count{color:#777;font-size:.9rem}.label{font-size:.8rem;background:#eef;border-radius:4px;padding:0 .3rem;margin-right:.2rem}\
form.action{display:inline-block;margin-right:.5rem}#filters label{margin-right:.8rem}.note{color:#555;font-style:italic}\
table.diff{border-collapse:collapse;width:100%;font-family:monospace;font-size:.85rem}table.diff td{padding:0 .3rem;border:none;vertical-align:top}table.diff pre{margin:0;white-space:pre-wrap}\
table.diff td.n{color:#999;text-align:right;width:3rem}tr.add{background:#e6ffed}tr.del{background:#ffeef0}tr.hunk{background:#f1f8ff;color:#555}span.add{color:#22863a}span.del{color:#cb2431}\n";

/// The style sheet of every page (`/fabro.css`): the report's style and what serve adds. A file,
/// not inline, so the Content-Security-Policy allows no inline style.
pub fn style_sheet() -> String {
    let report = STYLE.trim_start_matches("<style>\n").trim_end_matches("</style>\n");
    format!("{report}{SERVE_STYLE}")
}

/// A page of the web view: `body` under the link back to the board.
pub(super) fn page(title: &str, body: &str) -> String {
    page_with_head(title, "", body)
}

/// [`page`] with `head` (trusted markup, e.g. a refresh) in its head.
fn page_with_head(title: &str, head: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n{head}<title>{} · fabro</title>\n<link rel=\"stylesheet\" href=\"/fabro.css\">\n</head>\n<body>\n<p><a href=\"/\">runs</a></p>\n{body}</body>\n</html>\n",
        escape(title)
    )
}

/// A run submitted and not started yet (queued, starting), or that never started (canceled, its
/// process refused it): its state, a cancel button while it waits, what its process printed; the
/// page reloads itself every two seconds while the run is to start.
pub fn not_started(dir: &Path, id: &str) -> String {
    let state = RunState::of(dir);
    let name = state.as_str();
    let mut body = format!(
        "<h1>Run <code>{}</code> <span id=\"status\" class=\"{name}\">{name}</span></h1>\n",
        escape(id)
    );
    if !state.is_settled() {
        body.push_str("<p>The run waits for a place in the service's queue, or is starting.</p>\n");
        body.push_str(&action_form(id, "cancel", "Cancel"));
    }
    let output =
        crate::run_dir::stage_output::read_tail(&dir.join(layout::OUTPUT_LOG), 16 * 1024).unwrap_or_default();
    if !output.trim().is_empty() {
        let _ = writeln!(body, "<h2>Output</h2>\n<pre id=\"output\">{}</pre>", escape(&output));
    }
    let head = if state.is_settled() { "" } else { "<meta http-equiv=\"refresh\" content=\"2\">\n" };
    page_with_head("run", head, &body)
}

/// A form with one button that posts to `/runs/<id>/<action>`.
fn action_form(id: &str, action: &str, label: &str) -> String {
    format!(
        "<form class=\"action\" method=\"post\" action=\"/runs/{}/{action}\"><button type=\"submit\" id=\"{action}-button\">{label}</button></form>\n",
        escape(id)
    )
}

/// A gate the run is paused at, with its choices.
#[derive(Debug, Clone)]
pub struct WaitingGate {
    pub id: String,
    pub question: String,
    /// One per edge but a `freeform=true` one.
    pub choices: Vec<OwnedChoice>,
    /// The gate takes text that names none of its choices (`human.freeform=true` or a
    /// `freeform=true` edge).
    pub freeform: bool,
}

#[derive(Debug, Clone)]
pub struct OwnedChoice {
    pub key: String,
    pub label: String,
    pub target: String,
}

/// The human gate the run in `dir` is paused at, if it is.
pub fn waiting_gate(dir: &Path) -> Option<WaitingGate> {
    let view = RunView::open(dir).ok()?;
    if view.status() != RunStatus::Paused {
        return None;
    }
    let gate_id = view.next_node()?.to_string();
    let checked = load_workflow(dir, &view)?;
    let workflow = &checked.workflow;
    let node = workflow.node(&gate_id).filter(|node| node.handler_type() == HandlerType::Human)?;
    let gate = Gate::of(workflow, node);
    let choices = gate
        .choices
        .into_iter()
        .map(|choice| OwnedChoice {
            key: choice.key,
            label: choice.label.to_string(),
            target: choice.target.to_string(),
        })
        .collect();
    let question = node.prompt().unwrap_or_else(|| node.label()).to_string();
    Some(WaitingGate { id: gate_id, question, choices, freeform: gate.freeform })
}

fn load_workflow(dir: &Path, view: &RunView) -> Option<crate::CheckedWorkflow> {
    // Not through a link a stage may have put in its place.
    std::fs::symlink_metadata(dir.join(layout::SAVED_WORKFLOW)).ok().filter(std::fs::Metadata::is_file)?;
    let text = crate::regular_file::read_to_string(
        dir.join(layout::SAVED_WORKFLOW),
        crate::regular_file::FileKind::Input,
    )
    .ok()?;
    crate::Loader::new().load_source(SourceFile::new(&view.manifest.source_path, text)).ok()
}

/// The workflow drawn by Graphviz with the run's progress; a plain list of stages when Graphviz
/// is not installed, fails or takes too long.
fn graph_svg(dir: &Path, view: &RunView) -> String {
    let drawn = load_workflow(dir, view).and_then(|checked| {
        let overlay = Overlay::from_run_dir(dir).ok();
        let text = dot::write(&checked.workflow, &DotOptions { direction: None, overlay });
        graphviz_svg(&text)
    });
    match drawn {
        Some(svg) => svg,
        None => {
            let mut list = String::from("<p>(No drawing: Graphviz is not installed, failed or took over 10 s. Each stage's last outcome:)</p><ul>");
            for (node, status) in view.checkpoint.iter().flat_map(|c| c.node_outcomes.iter()) {
                let _ = write!(
                    list,
                    "<li class=\"{}\">{}: {}</li>",
                    status.as_str(),
                    escape(node),
                    status.as_str()
                );
            }
            list.push_str("</ul>");
            list
        }
    }
}

/// How long Graphviz may take to draw a run's workflow; past it the page shows the plain list.
const GRAPHVIZ_TIMEOUT: Duration = Duration::from_secs(10);

/// `dot -Tsvg` over `text`, killed when it takes longer than [`GRAPHVIZ_TIMEOUT`].
fn graphviz_svg(text: &str) -> Option<String> {
    use std::io::{Read as _, Write as _};
    let mut child = std::process::Command::new("dot")
        .arg("-Tsvg")
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::null())
        .spawn()
        .ok()?;
    let (mut stdin, mut stdout) = (child.stdin.take()?, child.stdout.take()?);
    let input = text.as_bytes().to_vec();
    let writer = std::thread::spawn(move || stdin.write_all(&input));
    let reader = std::thread::spawn(move || {
        let mut svg = Vec::new();
        stdout.read_to_end(&mut svg).map(|_| svg)
    });
    let started = Instant::now();
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if started.elapsed() < GRAPHVIZ_TIMEOUT => std::thread::sleep(Duration::from_millis(20)),
            _ => {
                let _ = child.kill();
                let _ = child.wait();
                return None;
            }
        }
    };
    let _ = writer.join();
    let svg = reader.join().ok()?.ok()?;
    let svg = String::from_utf8(svg).ok().filter(|_| status.success())?;
    // Inline: without the XML prolog and doctype.
    svg.find("<svg").map(|at| svg[at..].to_string())
}

/// A run: header, graph, gate, stages, chart, live events.
pub fn run(dir: &Path, id: &str) -> String {
    let Ok(view) = RunView::open(dir) else { return page("run", "<p>This run cannot be read.</p>") };
    let report = RunPage::read(dir).unwrap_or_default();
    let status = view.status().as_str();
    let mut body = format!(
        "<h1>{} <span id=\"status\" class=\"{status}\">{status}</span></h1>\n",
        escape(&view.manifest.workflow)
    );
    if !view.manifest.goal.is_empty() {
        let _ = writeln!(body, "<p><strong>Goal:</strong> {}</p>", escape(&view.manifest.goal));
    }
    let (input, output) = report.total_tokens();
    let _ = writeln!(
        body,
        "<p>Run <code>{}</code>, started {}; tokens {input} in / {output} out</p>",
        escape(id),
        escape(&view.manifest.started_at)
    );
    body.push_str(&run_actions(dir, id, &report));
    if let Some(gate) = waiting_gate(dir) {
        let _ = writeln!(
            body,
            "<form id=\"gate\" method=\"post\" action=\"/runs/{}/answer\">\n<p><strong>Waiting at <code>{}</code>:</strong> {}</p>",
            escape(id),
            escape(&gate.id),
            escape(&gate.question)
        );
        for choice in &gate.choices {
            let _ = writeln!(
                body,
                "<button type=\"submit\" name=\"answer\" value=\"{}\" id=\"choice-{}\">[{}] {}</button>",
                escape(&choice.target),
                escape(&choice.key),
                escape(&choice.key),
                escape(&choice.label)
            );
        }
        if gate.freeform {
            body.push_str(
                "<p><label for=\"gate-text\">Or answer in your own words:</label><br>\n\
                 <textarea id=\"gate-text\" name=\"text\" rows=\"3\" cols=\"60\"></textarea><br>\n\
                 <button type=\"submit\" id=\"send-text\">Send</button></p>\n",
            );
        }
        body.push_str("</form>\n");
    }
    let _ = writeln!(body, "<h2>Workflow</h2>\n<div id=\"graph\">{}</div>", graph_svg(dir, &view));
    body.push_str("<h2>Stages</h2>\n<table id=\"stages\">\n<tr><th>stage</th><th>visit</th><th>handler</th><th>outcome</th><th>time</th><th>tokens in / out</th><th>failure</th></tr>\n");
    for visit in &report.visits {
        let _ = writeln!(
            body,
            "<tr id=\"row-{node}-{n}\"><td><a href=\"/runs/{id}/stages/{node}/{n}\">{node}</a></td><td>{n}</td><td>{}</td><td class=\"{status}\">{status}</td><td>{:.1}s</td><td>{}</td><td>{}</td></tr>",
            escape(&visit.handler),
            visit.duration_ms as f64 / 1000.0,
            match (visit.input_tokens, visit.output_tokens) {
                (Some(i), Some(o)) => format!("{i} / {o}"),
                _ => "-".to_string(),
            },
            escape(visit.failure_reason.as_deref().unwrap_or("")),
            node = escape(&visit.node_id),
            n = visit.visit,
            id = escape(id),
            status = escape(&visit.status),
        );
    }
    body.push_str("</table>\n");
    body.push_str(&usage_table(&report));
    if let Some(chart) = &report.context_chart {
        let _ = writeln!(body, "<h2>Context usage</h2>\n{chart}");
    }
    let _ = writeln!(
        body,
        "<h2>Events</h2>\n<ol id=\"events\" data-run=\"{}\"></ol>\n<script src=\"/fabro.js\"></script>",
        escape(id)
    );
    page(&view.manifest.workflow, &body)
}

/// The run's links and buttons: its files changed; cancel and pause-after-this-stage while it
/// runs, resume when it can go on; when it has stopped, rewind (to right after a stage visit,
/// then resume) and fork (a new run from right after a stage visit).
fn run_actions(dir: &Path, id: &str, report: &RunPage) -> String {
    let state = RunState::of(dir);
    let mut html = format!(
        "<div id=\"actions\"><p><a id=\"files-link\" href=\"/runs/{}/files\">Files changed</a></p>\n",
        escape(id)
    );
    if !state.is_settled() {
        html.push_str(&action_form(id, "cancel", "Cancel"));
    }
    if state == RunState::Running {
        html.push_str(&action_form(id, "interrupt", "Pause after this stage"));
    }
    // A run waiting at a human gate goes on by the gate's answer: resumed without one, it would
    // only stop at the gate again.
    if super::actions::is_resumable(&state) && waiting_gate(dir).is_none() {
        html.push_str(&action_form(id, "resume", "Resume"));
    }
    let points: Vec<String> = report
        .visits
        .iter()
        // Right after the exit there is nothing to continue.
        .filter(|visit| !visit.handler.is_empty() && visit.handler != "exit" && visit.status != "running")
        .map(|visit| format!("{}@{}", visit.node_id, visit.visit))
        .collect();
    let history_forms =
        [("rewind", "Rewind to right after", "Rewind"), ("fork", "Fork a new run from right after", "Fork")];
    for (action, label, button) in history_forms.iter().filter(|_| state.is_settled() && !points.is_empty()) {
        let _ = write!(
            html,
            "<form class=\"action\" id=\"{action}\" method=\"post\" action=\"/runs/{}/{action}\">\
             <label>{label} <select name=\"to\">",
            escape(id)
        );
        for point in points.iter().rev() {
            let _ = write!(html, "<option value=\"{0}\">{0}</option>", escape(point));
        }
        let _ = writeln!(
            html,
            "</select></label> <label><input type=\"checkbox\" name=\"resume\" value=\"1\" checked> and resume</label> \
             <button type=\"submit\" id=\"{action}-button\">{button}</button></form>"
        );
    }
    html.push_str("</div>\n");
    html
}

/// Tokens in and out and cost per model, with the totals; cost `n/a` where a model's price is
/// unknown.
fn usage_table(report: &RunPage) -> String {
    if report.models.is_empty() {
        return String::new();
    }
    let cost = |cost: Option<f64>| cost.map_or_else(|| "n/a".to_string(), |cost| format!("${cost:.4}"));
    let mut html = String::from(
        "<h2>Usage</h2>\n<table id=\"usage\">\n<tr><th>model</th><th>tokens in</th><th>tokens out</th><th>cost</th></tr>\n",
    );
    for (model, totals) in &report.models {
        let _ = writeln!(
            html,
            "<tr><td><code>{}</code></td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(model),
            totals.input_tokens,
            totals.output_tokens,
            cost(totals.cost_usd)
        );
    }
    let (input, output) = report.total_tokens();
    let _ = writeln!(
        html,
        "<tr id=\"usage-total\"><th>total</th><th>{input}</th><th>{output}</th><th>{}</th></tr>\n</table>",
        cost(report.total_cost())
    );
    html
}

/// The run page's script (`/fabro.js`): follows the events of the run its `#events` list names,
/// lists them, and turns stage rows (each a link to its stage page, where a running stage's
/// output grows) and graph nodes running (yellow), succeeded (green) or failed (red) as they
/// happen. A file, not inline, so the Content-Security-Policy allows no inline
/// script.
pub const LIVE_SCRIPT: &str = r##"
const fills = {started: "#fff59d", completed: "#c8e6c9", failed: "#ffcdd2"};
function paint(node, fill) {
  for (const g of document.querySelectorAll("#graph g.node")) {
    const title = g.querySelector("title");
    if (title && title.textContent === node) {
      for (const shape of g.querySelectorAll("polygon, ellipse, path")) shape.setAttribute("fill", fill);
      g.setAttribute("data-state", Object.keys(fills).find(k => fills[k] === fill));
    }
  }
}
function row(e, status) {
  const id = "row-" + e.node_id + "-" + e.visit;
  let tr = document.getElementById(id);
  if (!tr) {
    tr = document.createElement("tr");
    tr.id = id;
    tr.innerHTML = "<td></td><td></td><td></td><td></td><td></td><td></td><td></td>";
    const link = document.createElement("a");
    link.href = "/runs/" + encodeURIComponent(document.getElementById("events").dataset.run) + "/stages/" + encodeURIComponent(e.node_id) + "/" + e.visit;
    link.textContent = e.node_id;
    tr.cells[0].appendChild(link);
    tr.cells[1].textContent = e.visit;
    tr.cells[2].textContent = e.handler || "";
    document.getElementById("stages").appendChild(tr);
  }
  tr.cells[3].textContent = status;
  tr.cells[3].className = status;
}
const source = new EventSource("/runs/" + encodeURIComponent(document.getElementById("events").dataset.run) + "/events");
source.onmessage = (message) => {
  let e;
  try { e = JSON.parse(message.data); } catch (_) { return; }
  const li = document.createElement("li");
  li.textContent = e.ts + " " + e.event + (e.node_id ? " " + e.node_id : "");
  document.getElementById("events").appendChild(li);
  if (e.event === "stage.started") { paint(e.node_id, fills.started); row(e, "running"); }
  if (e.event === "stage.completed") { paint(e.node_id, fills.completed); row(e, e.status); }
  if (e.event === "stage.failed") { paint(e.node_id, fills.failed); row(e, e.status); }
  if (e.event === "run.completed") document.getElementById("status").textContent = "succeeded";
  if (e.event === "run.failed") document.getElementById("status").textContent = "failed";
  if (e.event === "run.paused") {
    document.getElementById("status").textContent = "paused";
    const waiting = document.getElementById("row-" + e.node_id + "-" + e.visit);
    if (waiting && waiting.cells[3].textContent === "running") row(e, "waiting");
  }
  if (e.event === "run.resumed") { document.getElementById("status").textContent = "running"; const gate = document.getElementById("gate"); if (gate) gate.remove(); }
};
"##;

/// One stage visit: what it was told and answered, its output, its transcript and status.json.
/// A visit still running shows what it has written so far (an LLM stage's streamed answers, a
/// command's output), growing as it is written, until it ends.
pub fn stage(dir: &Path, id: &str, node: &str, visit: u32) -> Option<String> {
    let report = RunPage::read(dir).ok()?;
    let finished = report.visits.iter().find(|v| v.node_id == node && v.visit == visit);
    // A routing stage (start, exit, conditional) has no directory: its page shows its record.
    let visit_dir = crate::run_dir::layout::finished_visit_dir(dir, node, visit);
    if let Some(visit_dir) = &visit_dir {
        // Never follow a link out of the run directory.
        let inside = std::fs::canonicalize(visit_dir).ok()?.starts_with(std::fs::canonicalize(dir).ok()?);
        if !inside {
            return None;
        }
    }
    let Some(page_visit) = finished else {
        return running_stage(dir, id, node, visit, visit_dir.as_deref()?);
    };
    let mut body = format!(
        "<p><a href=\"/runs/{}\">run</a></p>\n<h1><code>{}</code> (visit {visit}): <span class=\"{}\">{}</span></h1>\n",
        escape(id),
        escape(node),
        escape(&page_visit.status),
        escape(&page_visit.status)
    );
    body.push_str(&visit_html(page_visit));
    let read = |name: &str| {
        visit_dir
            .as_ref()
            .and_then(|d| crate::run_dir::stage_output::read_tail(&d.join(name), 256 * 1024))
            .unwrap_or_default()
    };
    let transcript = read(layout::TRANSCRIPT);
    if !transcript.is_empty() {
        body.push_str("<h2>Transcript</h2>\n<ol id=\"transcript\">\n");
        for entry in
            transcript.lines().filter_map(|line| serde_json::from_str::<serde_json::Value>(line).ok())
        {
            let kind = entry["type"].as_str().unwrap_or("?");
            let _ = writeln!(
                body,
                "<li><strong>{}</strong> <pre>{}</pre></li>",
                escape(kind),
                escape(&entry.to_string())
            );
        }
        body.push_str("</ol>\n");
    }
    if visit_dir.is_some() {
        let status = read(layout::STATUS);
        let _ = writeln!(body, "<h2>status.json</h2>\n<pre id=\"status-json\">{}</pre>", escape(&status));
    }
    Some(page(node, &body))
}

/// The logs a running stage may be writing, as the page names them (`?log=`): its streamed
/// answers, its standard output and error.
pub const LIVE_LOGS: [(&str, &str, &str); 4] = [
    ("answer", layout::ANSWER_LOG, "Answer so far"),
    ("transcript", layout::TRANSCRIPT, "Turns and tool calls so far"),
    ("stdout", layout::STDOUT_LOG, "stdout so far"),
    ("stderr", layout::STDERR_LOG, "stderr so far"),
];

/// The logs a running visit of `node` shows: those its kind writes (an LLM stage's streamed
/// answers and transcript, a command's output), and any other it has written.
fn shown_logs(dir: &Path, node: &str, visit_dir: &Path) -> Vec<(&'static str, &'static str, &'static str)> {
    let checked = RunView::open(dir).ok().and_then(|view| load_workflow(dir, &view));
    let mut expected: Vec<&str> = Vec::new();
    if let Some(kind) =
        checked.as_ref().and_then(|checked| checked.workflow.node(node)).map(|node| node.handler_type())
    {
        expected.extend(crate::run_dir::stage_output::live_logs(kind));
        if matches!(kind, HandlerType::Agent | HandlerType::Prompt) {
            expected.push(layout::TRANSCRIPT);
        }
    }
    LIVE_LOGS
        .into_iter()
        .filter(|(_, file, _)| {
            expected.contains(file)
                || std::fs::symlink_metadata(visit_dir.join(file)).is_ok_and(|meta| meta.is_file())
        })
        .collect()
}

/// The page of a visit that has not ended: each log it writes, followed by [`STAGE_SCRIPT`].
fn running_stage(dir: &Path, id: &str, node: &str, visit: u32, visit_dir: &Path) -> Option<String> {
    let mut body = format!(
        "<p><a href=\"/runs/{id}\">run</a></p>\n<h1><code>{node}</code> (visit {visit}): <span class=\"running\">running</span></h1>\n",
        id = escape(id),
        node = escape(node),
    );
    for (name, _, title) in shown_logs(dir, node, visit_dir) {
        let _ = writeln!(
            body,
            "<h2>{title}</h2>\n<pre class=\"live-log\" id=\"live-{name}\" data-log=\"{name}\" data-src=\"/runs/{}/stages/{}/{visit}/live?log={name}\"></pre>",
            escape(&crate::serve::percent_encode(id)),
            escape(&crate::serve::percent_encode(node)),
        );
    }
    body.push_str("<script src=\"/fabro-stage.js\"></script>\n");
    Some(page(node, &body))
}

/// The running stage page's script (`/fabro-stage.js`): each log's new text, fetched from where
/// the last fetch ended, appended as it comes; the page reloads when the stage has ended.
pub const STAGE_SCRIPT: &str = r##"
// A transcript comes as JSON lines: each whole line is shown as one readable line.
function turn(e) {
  const what = e.type || "?";
  if (what === "assistant") return "[model" + (e.model ? " " + e.model : "") + "] " + (e.text || "") + (e.tool_calls && e.tool_calls.length ? " (calls " + e.tool_calls.map(c => c.name).join(", ") + ")" : "");
  if (what === "tool_call") return "[calls " + e.name + "] " + JSON.stringify(e.arguments);
  if (what === "tool_result") return "[" + e.name + (e.is_error ? " failed" : " answered") + "] " + String(e.content || "").slice(0, 2000);
  return "[" + what + "] " + JSON.stringify(e);
}
for (const pre of document.querySelectorAll("pre.live-log")) {
  let offset = 0;
  let partial = "";
  const show = (text) => {
    if (pre.dataset.log !== "transcript") { pre.textContent += text; return; }
    const lines = (partial + text).split("\n");
    partial = lines.pop();
    for (const line of lines) {
      if (!line.trim()) continue;
      let e;
      try { e = JSON.parse(line); } catch (_) { pre.textContent += line + "\n"; continue; }
      pre.textContent += turn(e) + "\n";
    }
  };
  const poll = async () => {
    let response;
    try { response = await fetch(pre.dataset.src + "&offset=" + offset); } catch (_) { setTimeout(poll, 1000); return; }
    if (!response.ok) return;
    const text = await response.text();
    offset = Number(response.headers.get("x-fabro-offset")) || offset;
    if (text) show(text);
    if (response.headers.get("x-fabro-ended") === "true") { setTimeout(() => location.reload(), 300); return; }
    setTimeout(poll, 500);
  };
  poll();
}
"##;
