//! The syntax tree: statements exactly as written, in source order, with spans.

use crate::source::Span;

/// One parsed `digraph Name { ... }`.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntaxTree {
    pub name: Option<Id>,
    pub statements: Vec<Statement>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    /// `graph [..]`, `node [..]` or `edge [..]`.
    Defaults {
        kind: DefaultsKind,
        attributes: Vec<Attribute>,
        span: Span,
    },
    /// A top-level or subgraph-level `key = value`.
    GraphAttribute(Attribute),
    Node {
        id: Id,
        attributes: Vec<Attribute>,
    },
    /// `a -> b -> c [..]`: the attributes apply to every hop.
    Edge {
        endpoints: Vec<Id>,
        attributes: Vec<Attribute>,
        span: Span,
    },
    Subgraph(Subgraph),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultsKind {
    Graph,
    Node,
    Edge,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Subgraph {
    pub name: Option<Id>,
    pub statements: Vec<Statement>,
    pub span: Span,
}

/// A node or graph identifier; `quoted` is true for `"..."` ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Id {
    pub name: String,
    pub quoted: bool,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Attribute {
    pub key: String,
    pub key_span: Span,
    pub value: Literal,
}

/// An attribute value as written: its decoded text and whether it was quoted. Typing happens in
/// the graph layer, by the attribute it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Literal {
    pub text: String,
    pub quoted: bool,
    pub span: Span,
}
