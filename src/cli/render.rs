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

/// The source line of `span` with carets under it (one caret for an empty span; multi-line spans
/// are underlined to the end of their first line).
fn snippet(source: &SourceFile, span: Span) -> String {
    let start = source.location(span.start);
    let end = source.location(span.end);
    let line = source.line_text(start.line).replace('\t', " ");
    let width = if end.line == start.line { end.column.saturating_sub(start.column) } else { usize::MAX };
    let line_len = line.chars().count();
    let carets = width.clamp(1, line_len.saturating_sub(start.column - 1).max(1));
    let gutter = start.line.to_string().len();
    format!(
        "{:gutter$} |\n{} | {line}\n{:gutter$} | {}{}\n",
        "",
        start.line,
        "",
        " ".repeat(start.column - 1),
        "^".repeat(carets),
    )
}

pub fn summary_line(path: &Path, diagnostics: &[Diagnostic]) -> String {
    let count = |severity| diagnostics.iter().filter(|d| d.severity == severity).count();
    let (errors, warnings) = (count(Severity::Error), count(Severity::Warning));
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
