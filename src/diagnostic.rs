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
