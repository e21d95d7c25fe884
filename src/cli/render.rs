//! Renders diagnostics and load errors the way compilers do: `severity[rule] file:line:col`, the
//! source line with a caret under the position, and the fix.

use std::fmt::Write as _;
use std::path::Path;

use fabro::source::{SourceFile, Span};
use fabro::{Diagnostic, LoadError, Severity};
use serde_json::json;

pub fn render_diagnostic(diagnostic: &Diagnostic, source: &SourceFile) -> String {
    let subject = match (&diagnostic.node_id, &diagnostic.edge) {
        (Some(id), _) => format!(" node {id}:"),
        (None, Some((from, to))) => format!(" edge {from} -> {to}:"),
        (None, None) => ":".to_string(),
    };
    let place = match diagnostic.span {
        Some(span) => position(source, span),
        None => source.path().display().to_string(),
    };
    let mut out = format!(
        "{}[{}] {place}{subject} {}\n",
        diagnostic.severity.as_str(),
        diagnostic.rule,
        diagnostic.message
    );
    if let Some(span) = diagnostic.span {
        out.push_str(&snippet(source, span));
    }
    if let Some(fix) = &diagnostic.fix {
        let _ = writeln!(out, "   = fix: {fix}");
    }
    out.push('\n');
    out
}

pub fn render_load_error(error: &LoadError) -> String {
    match error {
        LoadError::Read { .. } => format!("error: {error}\n"),
        LoadError::Syntax { error, file } => {
            let mut out = format!("error[syntax] {}: {error}\n", position(file, error.span));
            out.push_str(&snippet(file, error.span));
            if let Some(help) = error.help() {
                let _ = writeln!(out, "   = fix: {help}");
            }
            out
        }
    }
}

/// `file:line:col`
fn position(source: &SourceFile, span: Span) -> String {
    let location = source.location(span.start);
    format!("{}:{}:{}", source.path().display(), location.line, location.column)
}

/// How many characters of a long source line a snippet shows, around the position.
const WINDOW_CHARS: usize = 100;
/// How many of them come before the position.
const WINDOW_LEAD: usize = 40;

/// The source line of `span` with carets under it (one caret for an empty span; multi-line spans
/// are underlined to the end of their first line). Of a line longer than [`WINDOW_CHARS`] only a
/// window around the position is shown, with `…` where it was cut, as rustc does.
fn snippet(source: &SourceFile, span: Span) -> String {
    let start = source.location(span.start);
    let end = source.location(span.end);
    let line = source.line_text(start.line);
    let line_len = line.chars().count();
    let column = start.column - 1;
    let (from, to) = if line_len <= WINDOW_CHARS {
        (0, line_len)
    } else {
        let from = column.saturating_sub(WINDOW_LEAD).min(line_len - WINDOW_CHARS);
        (from, from + WINDOW_CHARS)
    };
    let mut shown: String = line.chars().skip(from).take(to - from).collect::<String>().replace('\t', " ");
    let mut caret_at = column - from;
    if from > 0 {
        shown.insert(0, '…');
        caret_at += 1;
    }
    if to < line_len {
        shown.push('…');
    }
    let width = if end.line == start.line { end.column.saturating_sub(start.column) } else { usize::MAX };
    let carets = width.clamp(1, to.saturating_sub(column).max(1));
    let gutter = start.line.to_string().len();
    format!(
        "{:gutter$} |\n{} | {shown}\n{:gutter$} | {}{}\n",
        "",
        start.line,
        "",
        " ".repeat(caret_at),
        "^".repeat(carets),
    )
}

/// How many findings of one rule are shown in full; the rest are counted in one line.
const SHOWN_PER_RULE: usize = 5;

/// Renders `diagnostics` in order, the first [`SHOWN_PER_RULE`] of each rule in full, then one
/// line per rule saying how many more there are (`--json` lists them all).
pub fn render_diagnostics<'d>(
    diagnostics: impl IntoIterator<Item = &'d Diagnostic>,
    source: &SourceFile,
) -> String {
    let mut out = String::new();
    let mut seen: std::collections::BTreeMap<(&str, &str), usize> = std::collections::BTreeMap::new();
    for diagnostic in diagnostics {
        let count = seen.entry((diagnostic.severity.as_str(), &diagnostic.rule)).or_default();
        *count += 1;
        if *count <= SHOWN_PER_RULE {
            out.push_str(&render_diagnostic(diagnostic, source));
        }
    }
    for ((severity, rule), count) in seen {
        if count > SHOWN_PER_RULE {
            let more = count - SHOWN_PER_RULE;
            let _ = writeln!(
                out,
                "{severity}[{rule}]: {more} more like {} (`fabro validate --json` lists every finding)\n",
                if SHOWN_PER_RULE == 1 { "this" } else { "these" }
            );
        }
    }
    out
}

/// `FILE: valid (N warnings)`, or `FILE: invalid: N errors, N warnings`; `other_errors` are
/// errors found outside the workflow (its settings layers, hooks among them).
pub fn summary_line(path: &Path, diagnostics: &[Diagnostic], other_errors: usize) -> String {
    let count = |severity| diagnostics.iter().filter(|d| d.severity == severity).count();
    let (errors, warnings) = (count(Severity::Error) + other_errors, count(Severity::Warning));
    let plural = |n: usize, word: &str| format!("{n} {word}{}", if n == 1 { "" } else { "s" });
    if errors > 0 {
        format!("{}: invalid: {}, {}", path.display(), plural(errors, "error"), plural(warnings, "warning"))
    } else {
        format!("{}: valid ({})", path.display(), plural(warnings, "warning"))
    }
}

pub fn diagnostic_json(diagnostic: &Diagnostic, source: &SourceFile) -> serde_json::Value {
    let location = diagnostic.location(source);
    json!({
        "rule": diagnostic.rule,
        "severity": diagnostic.severity,
        "message": diagnostic.message,
        "node_id": diagnostic.node_id,
        "edge": diagnostic.edge.as_ref().map(|(from, to)| [from, to]),
        "line": location.map(|l| l.line),
        "column": location.map(|l| l.column),
        "fix": diagnostic.fix,
    })
}
