//! Why a file could not be parsed, with the position to underline.

use crate::source::Span;

/// A parse failure: what went wrong and where. Rendering (file:line:col, the source line and a
/// caret) is the CLI's job; [`SyntaxError::help`] says how to fix it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind}")]
pub struct SyntaxError {
    pub kind: SyntaxErrorKind,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SyntaxErrorKind {
    /// The grammar could not continue: `expected` and `found` are plain words.
    #[error("expected {expected}{}, found {found}", after.as_ref().map(|a| format!(" after {a}")).unwrap_or_default())]
    Unexpected { expected: String, found: String, after: Option<String> },
    /// `prompt=Write a plan`: a value with spaces needs quotes.
    #[error("the value of `{key}` has spaces but no quotes, so DOT reads only `{first_word}` as its value")]
    UnquotedValue { key: String, first_word: String, value: String },
    /// `prompt='Write a plan'`: DOT has no single-quoted strings.
    #[error("DOT strings use double quotes; `'` does not start a string")]
    SingleQuotes { key: String, value: String },
    /// `a -> b # note`: `#` is a comment only at the start of a line.
    #[error("`#` starts a comment only at the beginning of a line")]
    HashComment,
    #[error("`strict` graphs are not supported")]
    StrictGraph,
    #[error("undirected graphs are not supported: workflows are directed")]
    UndirectedGraph,
    #[error("undirected edge `--`: workflow edges are directed")]
    UndirectedEdge,
    #[error("HTML labels are not supported")]
    HtmlLabel,
    #[error("a workflow file holds exactly one graph, but a second one starts here")]
    SeveralGraphs,
    #[error("a subgraph cannot be an edge endpoint")]
    SubgraphEndpoint,
    #[error("`{0}` is a DOT keyword and cannot be a node id")]
    KeywordAsId(String),
    #[error("nesting deeper than {0} levels (subgraphs or `<`)")]
    TooDeep(usize),
    #[error("the file is empty: expected `digraph Name {{ ... }}`")]
    Empty,
}

impl SyntaxError {
    pub fn new(kind: SyntaxErrorKind, span: Span) -> Self {
        SyntaxError { kind, span }
    }

    /// A suggested fix, when there is an obvious one.
    pub fn help(&self) -> Option<String> {
        Some(
            match &self.kind {
                SyntaxErrorKind::UnquotedValue { key, value, .. }
                | SyntaxErrorKind::SingleQuotes { key, value } => {
                    return Some(format!("quote the value: `{key}=\"{}\"`", value.replace('"', "\\\"")));
                }
                SyntaxErrorKind::HashComment => "use `//` for a comment at the end of a line",
                SyntaxErrorKind::StrictGraph => "remove `strict`; duplicate edges are kept as written",
                SyntaxErrorKind::UndirectedGraph => "write `digraph Name { ... }`",
                SyntaxErrorKind::UndirectedEdge => "write `->`",
                SyntaxErrorKind::HtmlLabel => "use a double-quoted string: label=\"...\"",
                SyntaxErrorKind::SeveralGraphs => "move the second graph to its own file",
                SyntaxErrorKind::SubgraphEndpoint => "write one edge per node: `a -> b` and `a -> c`",
                SyntaxErrorKind::KeywordAsId(_) => "rename the node (for example `review_node`)",
                SyntaxErrorKind::TooDeep(_) => {
                    "flatten the subgraphs; fabro does not need them nested this deep"
                }
                SyntaxErrorKind::Empty => "start the file with `digraph Name {` and end it with `}`",
                SyntaxErrorKind::Unexpected { found, .. }
                    if found.starts_with("`-") && !found.starts_with("`->") =>
                {
                    "node ids are plain identifiers ([A-Za-z_][A-Za-z0-9_]*): use `_` instead of `-`"
                }
                SyntaxErrorKind::Unexpected { .. } => return None,
            }
            .to_string(),
        )
    }
}
