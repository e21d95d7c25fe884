//! The board of `fabro serve` (`/`): every run of the runs directory, queued ones included, in a
//! column per status (queued, running, waiting, interrupted, succeeded, failed, canceled), newest
//! first, each a card with its workflow, goal, labels, times and usage. Filters are GET query
//! parameters (`status`, `label=key=value`, `q` for text, `workflow`), so a filtered board is a
//! link to share, and it works without JavaScript.

use std::fmt::Write as _;

use crate::report::run_page::escape;
use crate::run_dir::lookup::RunEntry;
use crate::run_dir::submission::RunState;
use crate::run_status::RunStatus;

/// The columns of the board, in order: key and heading.
pub const COLUMNS: [(&str, &str); 7] = [
    ("queued", "Queued"),
    ("running", "Running"),
    ("waiting", "Waiting"),
    ("interrupted", "Interrupted"),
    ("succeeded", "Succeeded"),
    ("failed", "Failed"),
    ("canceled", "Canceled"),
];

/// The column a run in `state` stands in: waiting is paused (at a gate, a ceiling, a step);
/// interrupted is what resumes (interrupted, crashed); failed is what never ran through.
pub fn column(state: &RunState) -> &'static str {
    match state {
        RunState::Queued | RunState::Starting => "queued",
        RunState::Running => "running",
        RunState::Ended(RunStatus::Paused) => "waiting",
        RunState::Ended(RunStatus::Interrupted) | RunState::Crashed => "interrupted",
        RunState::Ended(RunStatus::Succeeded | RunStatus::Restarted) => "succeeded",
        RunState::Ended(RunStatus::Failed) | RunState::NeverStarted | RunState::Unknown => "failed",
        RunState::Ended(RunStatus::Running) => "running",
        RunState::Canceled => "canceled",
    }
}

/// What the board shows: the runs with this status (a column's key or a run state, as the API
/// names it), this label, this text in their id, workflow, goal or labels, of this workflow.
#[derive(Debug, Clone, Default, serde::Deserialize)]
pub struct BoardFilter {
    pub status: Option<String>,
    pub label: Option<String>,
    pub q: Option<String>,
    pub workflow: Option<String>,
}

impl BoardFilter {
    /// Empty fields (a form sends them) filter nothing.
    fn field(value: &Option<String>) -> Option<&str> {
        value.as_deref().map(str::trim).filter(|value| !value.is_empty())
    }
}

/// One run on the board.
struct Card {
    id: String,
    state: RunState,
    workflow: String,
    goal: String,
    labels: std::collections::BTreeMap<String, String>,
    started: String,
    duration_ms: Option<u64>,
    tokens: Option<(u64, u64)>,
    cost: Option<f64>,
    pause: Option<String>,
}

fn card(entry: &RunEntry) -> Card {
    let dir = &entry.dir;
    let manifest = crate::run_dir::read_manifest(dir);
    let result = crate::run_dir::read_result(dir);
    let usage = result.as_ref().and_then(|result| result.usage.as_ref());
    Card {
        id: entry.run_id.clone(),
        state: RunState::of(dir),
        workflow: match &manifest {
            Some(manifest) => manifest.workflow.clone(),
            // Queued or starting: the name recorded when it was submitted.
            None => crate::run_dir::submission::Submission::read(dir)
                .ok()
                .flatten()
                .and_then(|submission| submission.workflow_name())
                .unwrap_or_default(),
        },
        goal: manifest.as_ref().map(|m| m.goal.clone()).unwrap_or_default(),
        labels: manifest.as_ref().map(|m| m.labels.clone()).unwrap_or_default(),
        started: manifest.as_ref().map(|m| m.started_at.clone()).unwrap_or_default(),
        duration_ms: result.as_ref().map(|result| result.duration_ms),
        tokens: usage.map(|usage| (usage.input_tokens, usage.output_tokens)),
        cost: usage.and_then(|usage| usage.cost_usd),
        pause: manifest.and_then(|m| m.pause).map(|pause| pause.reason),
    }
}

/// Whether `card` passes `filter` (`label` already parsed).
fn keeps(card: &Card, filter: &BoardFilter, label: Option<&(String, String)>) -> bool {
    let status = BoardFilter::field(&filter.status);
    let text = BoardFilter::field(&filter.q).map(str::to_lowercase);
    let workflow = BoardFilter::field(&filter.workflow);
    status.is_none_or(|wanted| wanted == column(&card.state) || wanted == card.state.as_str())
        && label.is_none_or(|(key, value)| card.labels.get(key) == Some(value))
        && workflow.is_none_or(|wanted| wanted == card.workflow)
        && text.is_none_or(|text| {
            [&card.id, &card.workflow, &card.goal]
                .into_iter()
                .chain(card.labels.keys())
                .chain(card.labels.values())
                .any(|field| field.to_lowercase().contains(&text))
        })
}

/// The board of `runs` (oldest first, as found) that `filter` keeps; `label` is its parsed
/// `label`. `can_start`: the service may start workflows (`--workflows`), so it links the form.
pub fn board(
    mut runs: Vec<RunEntry>,
    filter: &BoardFilter,
    label: Option<&(String, String)>,
    can_start: bool,
) -> String {
    runs.reverse();
    let cards: Vec<Card> = runs.iter().map(card).filter(|card| keeps(card, filter, label)).collect();
    let value = |field: &Option<String>| escape(BoardFilter::field(field).unwrap_or(""));
    let mut body = String::from("<h1>Runs</h1>\n");
    if can_start {
        body.push_str("<p><a id=\"start-run\" href=\"/runs/new\">Start a run</a></p>\n");
    }
    let _ = write!(
        body,
        "<form id=\"filters\" method=\"get\" action=\"/\">\n\
         <label>Search <input type=\"search\" name=\"q\" value=\"{}\" placeholder=\"id, workflow, goal, label\"></label>\n\
         <label>Label <input name=\"label\" value=\"{}\" placeholder=\"key=value\"></label>\n\
         <label>Status <select name=\"status\"><option value=\"\">all</option>",
        value(&filter.q),
        value(&filter.label),
    );
    let status = BoardFilter::field(&filter.status);
    for (key, heading) in COLUMNS {
        let selected = if status == Some(key) { " selected" } else { "" };
        let _ = write!(body, "<option value=\"{key}\"{selected}>{heading}</option>");
    }
    let _ = writeln!(
        body,
        "</select></label>\n<input type=\"hidden\" name=\"workflow\" value=\"{}\">\n<button type=\"submit\">Filter</button> <a href=\"/\">clear</a>\n</form>",
        value(&filter.workflow)
    );
    body.push_str("<div id=\"board\" class=\"board\">\n");
    for (key, heading) in COLUMNS {
        let in_column: Vec<&Card> = cards.iter().filter(|card| column(&card.state) == key).collect();
        if status.is_some() && in_column.is_empty() {
            continue;
        }
        let _ = writeln!(
            body,
            "<section class=\"column\" id=\"column-{key}\">\n<h2>{heading} <span class=\"count\">{}</span></h2>\n<ul>",
            in_column.len()
        );
        for card in in_column {
            body.push_str(&card_html(card));
        }
        body.push_str("</ul>\n</section>\n");
    }
    body.push_str("</div>\n");
    super::pages::page("runs", &body)
}

fn card_html(card: &Card) -> String {
    let id = escape(&card.id);
    let state = card.state.as_str();
    let title = if card.workflow.is_empty() { "(not started yet)" } else { card.workflow.as_str() };
    let mut html = format!(
        "<li class=\"card\" id=\"card-{id}\"><a href=\"/runs/{id}\">{}</a> <span class=\"{state}\">{state}</span> <code>{}</code>",
        escape(title),
        escape(&card.id.chars().take(13).collect::<String>()),
    );
    if !card.goal.is_empty() {
        let _ = write!(html, "<br><span class=\"goal\">{}</span>", escape(&excerpt(&card.goal, 160)));
    }
    if let Some(reason) = &card.pause {
        let _ = write!(html, "<br><em class=\"waiting\">{}</em>", escape(&excerpt(reason, 160)));
    }
    if !card.labels.is_empty() {
        html.push_str("<br>");
        for (key, value) in &card.labels {
            let pair = format!("{key}={value}");
            let _ = write!(
                html,
                "<a class=\"label\" href=\"/?label={}\">{}</a> ",
                escape(&super::percent_encode(&pair)),
                escape(&pair)
            );
        }
    }
    let mut facts = Vec::new();
    if !card.started.is_empty() {
        facts.push(escape(&card.started));
    }
    if let Some(ms) = card.duration_ms {
        facts.push(format!("{:.1}s", ms as f64 / 1000.0));
    }
    if let Some((input, output)) = card.tokens {
        facts.push(format!("{input} / {output} tokens"));
    }
    if let Some(cost) = card.cost {
        facts.push(format!("${cost:.4}"));
    }
    if !facts.is_empty() {
        let _ = write!(html, "<br><small>{}</small>", facts.join(" · "));
    }
    html.push_str("</li>\n");
    html
}

/// `text` cut to `most` characters, with `…` when cut.
fn excerpt(text: &str, most: usize) -> String {
    match text.char_indices().nth(most) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_state_has_a_column_and_filters_match_column_or_state() {
        for state in [
            RunState::Queued,
            RunState::Starting,
            RunState::Running,
            RunState::Crashed,
            RunState::Canceled,
            RunState::NeverStarted,
            RunState::Ended(RunStatus::Paused),
        ] {
            assert!(COLUMNS.iter().any(|(key, _)| *key == column(&state)), "{state:?}");
        }
        let card = Card {
            id: "0199-abc".into(),
            state: RunState::Ended(RunStatus::Paused),
            workflow: "deploy".into(),
            goal: "Ship the <b>thing</b>".into(),
            labels: [("team".to_string(), "payments".to_string())].into(),
            started: String::new(),
            duration_ms: None,
            tokens: None,
            cost: None,
            pause: None,
        };
        let filter = |status: &str, q: &str| BoardFilter {
            status: Some(status.into()),
            q: Some(q.into()),
            ..BoardFilter::default()
        };
        assert!(keeps(&card, &filter("waiting", ""), None));
        assert!(keeps(&card, &filter("paused", "SHIP"), None));
        assert!(keeps(&card, &filter("", "payments"), None));
        assert!(!keeps(&card, &filter("failed", ""), None));
        assert!(!keeps(&card, &filter("", "nothing"), None));
        let label = ("team".to_string(), "search".to_string());
        assert!(!keeps(&card, &BoardFilter::default(), Some(&label)));
        assert!(card_html(&card).contains("Ship the &lt;b&gt;thing&lt;/b&gt;"));
    }
}
