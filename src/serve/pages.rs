//! The HTML pages of `fabro serve`, rendered on the server from run directories.

use std::fmt::Write as _;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::graph::HandlerType;
use crate::interview::Gate;
use crate::render::{dot, DotOptions, Overlay};
use crate::report::run_page::{escape, visit_html, RunPage, STYLE};
use crate::run_dir::layout;
use crate::run_dir::lookup::RunEntry;
use crate::run_dir::RunView;
use crate::run_status::RunStatus;
use crate::source::SourceFile;

/// What `fabro serve` adds to the report style.
const SERVE_STYLE: &str = ".running{color:#b26a00}#graph svg{max-width:100%;height:auto}#events{max-height:24rem;overflow:auto;font-family:monospace;font-size:.85rem}\n";

/// The style sheet of every page (`/fabro.css`): the report's style and what serve adds. A file,
/// not inline, so the Content-Security-Policy allows no inline style.
pub fn style_sheet() -> String {
    let report = STYLE.trim_start_matches("<style>\n").trim_end_matches("</style>\n");
    format!("{report}{SERVE_STYLE}")
}

fn page(title: &str, body: &str) -> String {
    format!(
        "<!DOCTYPE html>\n<html lang=\"en\">\n<head>\n<meta charset=\"utf-8\">\n<title>{} · fabro</title>\n<link rel=\"stylesheet\" href=\"/fabro.css\">\n</head>\n<body>\n<p><a href=\"/\">runs</a></p>\n{body}</body>\n</html>\n",
        escape(title)
    )
}

/// Which runs the list shows: those with this status, those with this label.
#[derive(Debug, Clone, Copy, Default)]
pub struct RunFilter<'a> {
    pub status: Option<&'a str>,
    pub label: Option<&'a (String, String)>,
}

/// The runs, newest first, those `filter` keeps; each with its labels.
pub fn runs_list(mut runs: Vec<RunEntry>, filter: RunFilter<'_>) -> String {
    let mut body = String::from("<h1>Runs</h1>\n<p>Status: <a href=\"/\">all</a>");
    for name in ["running", "paused", "interrupted", "succeeded", "failed"] {
        let _ = write!(body, " · <a href=\"/?status={name}\">{name}</a>");
    }
    body.push_str("</p>\n<table id=\"runs\">\n<tr><th>run</th><th>status</th><th>workflow</th><th>goal</th><th>started</th><th>duration</th><th>tokens in / out</th><th>cost</th></tr>\n");
    runs.reverse();
    for entry in runs {
        let Ok(view) = RunView::open(&entry.dir) else { continue };
        let run_status = view.status().as_str();
        if filter.status.is_some_and(|wanted| wanted != run_status) {
            continue;
        }
        if filter.label.is_some_and(|label| {
            !crate::run_dir::has_labels(&view.manifest.labels, std::slice::from_ref(label))
        }) {
            continue;
        }
        let result = view.result.as_ref();
        let usage = result.and_then(|r| r.usage.as_ref());
        let _ = writeln!(
            body,
            "<tr><td><a href=\"/runs/{id}\">{short}</a></td><td class=\"{run_status}\">{run_status}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td><td>{}</td></tr>",
            escape(&view.manifest.workflow),
            escape(&view.manifest.goal),
            escape(&view.manifest.started_at),
            result.map_or_else(|| "-".to_string(), |r| format!("{:.1}s", r.duration_ms as f64 / 1000.0)),
            usage.map_or_else(|| "-".to_string(), |u| format!("{} / {}", u.input_tokens, u.output_tokens)),
            usage.and_then(|u| u.cost_usd).map_or_else(|| "n/a".to_string(), |c| format!("${c:.4}")),
            id = escape(&view.manifest.run_id),
            short = escape(&view.manifest.run_id.chars().take(13).collect::<String>()),
        );
    }
    body.push_str("</table>\n");
    page("runs", &body)
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
        return running_stage(id, node, visit, visit_dir.as_deref()?);
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
pub const LIVE_LOGS: [(&str, &str, &str); 3] = [
    ("answer", layout::ANSWER_LOG, "Answer so far"),
    ("stdout", layout::STDOUT_LOG, "stdout so far"),
    ("stderr", layout::STDERR_LOG, "stderr so far"),
];

/// The page of a visit that has not ended: each log it writes, followed by [`STAGE_SCRIPT`].
fn running_stage(id: &str, node: &str, visit: u32, visit_dir: &Path) -> Option<String> {
    let mut body = format!(
        "<p><a href=\"/runs/{id}\">run</a></p>\n<h1><code>{node}</code> (visit {visit}): <span class=\"running\">running</span></h1>\n",
        id = escape(id),
        node = escape(node),
    );
    for (name, file, title) in LIVE_LOGS {
        if std::fs::symlink_metadata(visit_dir.join(file)).is_ok_and(|meta| meta.is_file()) {
            let _ = writeln!(
                body,
                "<h2>{title}</h2>\n<pre class=\"live-log\" id=\"live-{name}\" data-src=\"/runs/{}/stages/{}/{visit}/live?log={name}\"></pre>",
                escape(&crate::serve::percent_encode(id)),
                escape(&crate::serve::percent_encode(node)),
            );
        }
    }
    body.push_str("<script src=\"/fabro-stage.js\"></script>\n");
    Some(page(node, &body))
}

/// The running stage page's script (`/fabro-stage.js`): each log's new text, fetched from where
/// the last fetch ended, appended as it comes; the page reloads when the stage has ended.
pub const STAGE_SCRIPT: &str = r##"
for (const pre of document.querySelectorAll("pre.live-log")) {
  let offset = 0;
  const poll = async () => {
    let response;
    try { response = await fetch(pre.dataset.src + "&offset=" + offset); } catch (_) { setTimeout(poll, 1000); return; }
    if (!response.ok) return;
    const text = await response.text();
    offset = Number(response.headers.get("x-fabro-offset")) || offset;
    if (text) pre.textContent += text;
    if (response.headers.get("x-fabro-ended") === "true") { setTimeout(() => location.reload(), 300); return; }
    setTimeout(poll, 500);
  };
  poll();
}
"##;
