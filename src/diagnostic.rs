//! A finding about a workflow: which rule, how serious, where, and how to fix it. Transforms and
//! validation rules both produce these; the CLI renders them.

use crate::source::{Location, SourceFile, Span};

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Severity {
    /// The workflow will not run.
    Error,
    /// The workflow runs, but probably not as intended.
    Warning,
    Info,
}

impl Severity {
    pub fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "error",
            Severity::Warning => "warning",
            Severity::Info => "info",
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Diagnostic {
    /// The rule id, e.g. `start_node`.
    pub rule: String,
    pub severity: Severity,
    pub message: String,
    pub node_id: Option<String>,
    /// `(from, to)` for findings about one edge.
    pub edge: Option<(String, String)>,
    /// Where in the source the finding points; `None` for whole-graph findings with no better place.
    pub span: Option<Span>,
    /// A suggested fix in plain words.
    pub fix: Option<String>,
    /// The fix as text edits, when it is mechanical (a rename, a canonical spelling, an edge to
    /// add): what an editor's quick fix applies. Spans are into the same source as `span`.
    pub edits: Vec<Edit>,
}

/// One text edit of a mechanical fix: replace `span` (empty to insert) with `text`.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Edit {
    pub span: Span,
    pub text: String,
}

impl Diagnostic {
    pub fn new(severity: Severity, rule: impl Into<String>, message: impl Into<String>) -> Self {
        Diagnostic {
            rule: rule.into(),
            severity,
            message: message.into(),
            node_id: None,
            edge: None,
            span: None,
            fix: None,
            edits: Vec::new(),
        }
    }

    pub fn error(rule: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(Severity::Error, rule, message)
    }

    pub fn warning(rule: impl Into<String>, message: impl Into<String>) -> Self {
        Self::new(Severity::Warning, rule, message)
    }

    pub fn node(mut self, id: impl Into<String>) -> Self {
        self.node_id = Some(id.into());
        self
    }

    pub fn edge(mut self, from: impl Into<String>, to: impl Into<String>) -> Self {
        self.edge = Some((from.into(), to.into()));
        self
    }

    pub fn span(mut self, span: Span) -> Self {
        self.span = Some(span);
        self
    }

    pub fn fix(mut self, fix: impl Into<String>) -> Self {
        self.fix = Some(fix.into());
        self
    }

    /// Adds a text edit to the fix: replace `span` with `text`.
    pub fn edit(mut self, span: Span, text: impl Into<String>) -> Self {
        self.edits.push(Edit { span, text: text.into() });
        self
    }

    /// Adds `edit` when there is one.
    pub fn edit_opt(mut self, edit: Option<Edit>) -> Self {
        self.edits.extend(edit);
        self
    }

    /// Adds the edit replacing `span` with `text` when the source there reads `written` (quoted
    /// or not): positions an import or a stylesheet lent a value are left alone.
    pub fn edit_written(
        self,
        source: &SourceFile,
        span: Span,
        written: &str,
        text: impl Into<String>,
    ) -> Self {
        let here = source.text().get(span.start..span.end).map(|raw| raw.trim_matches('"'));
        if here == Some(written) {
            self.edit(span, text)
        } else {
            self
        }
    }

    pub fn is_error(&self) -> bool {
        self.severity == Severity::Error
    }

    pub fn location(&self, source: &SourceFile) -> Option<Location> {
        self.span.map(|span| source.location(span.start))
    }
}

/// "did you mean `x`?" for the closest candidate within edit distance 2, if any.
pub fn did_you_mean<'a>(word: &str, candidates: impl IntoIterator<Item = &'a str>) -> Option<&'a str> {
    let length = word.chars().count();
    candidates
        .into_iter()
        // The edit distance is at least the difference in length: skip what cannot be near.
        .filter(|candidate| candidate.chars().count().abs_diff(length) <= 2)
        .map(|candidate| (strsim::levenshtein(word, candidate), candidate))
        .filter(|(distance, candidate)| *distance <= 2 && *distance < candidate.len().max(word.len()))
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, candidate)| candidate)
}
