//! The syntax tree: statements exactly as written, in source order, with spans. Text borrows from
//! the source wherever it can (ids, keys, bare values, strings without escapes).

use std::borrow::Cow;

use crate::source::Span;

/// One parsed `digraph Name { ... }`.
#[derive(Debug, Clone, PartialEq)]
pub struct SyntaxTree<'a> {
    pub name: Option<Id<'a>>,
    pub statements: Vec<Statement<'a>>,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Statement<'a> {
    /// `graph [..]`, `node [..]` or `edge [..]`.
    Defaults {
        kind: DefaultsKind,
        attributes: Vec<Attribute<'a>>,
        span: Span,
    },
    /// A top-level or subgraph-level `key = value`.
    GraphAttribute(Attribute<'a>),
    Node {
        id: Id<'a>,
        attributes: Vec<Attribute<'a>>,
    },
    /// `a -> b -> c [..]`: the attributes apply to every hop.
    Edge {
        endpoints: Vec<Id<'a>>,
        attributes: Vec<Attribute<'a>>,
        span: Span,
    },
    Subgraph(Subgraph<'a>),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DefaultsKind {
    Graph,
    Node,
    Edge,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Subgraph<'a> {
    pub name: Option<Id<'a>>,
    pub statements: Vec<Statement<'a>>,
    pub span: Span,
}

/// A node or graph identifier; `quoted` is true for `"..."` ids.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Id<'a> {
    pub name: Cow<'a, str>,
    pub quoted: bool,
    pub span: Span,
}

#[derive(Debug, Clone, PartialEq)]
pub struct Attribute<'a> {
    pub key: Cow<'a, str>,
    pub key_span: Span,
    pub value: Literal<'a>,
}

/// An attribute value as written: its decoded text and whether it was quoted. Typing happens in
/// the graph layer, by the attribute it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Literal<'a> {
    pub text: Cow<'a, str>,
    pub quoted: bool,
    pub span: Span,
}
