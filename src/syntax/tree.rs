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

fn owned(text: Cow<'_, str>) -> Cow<'static, str> {
    Cow::Owned(text.into_owned())
}

/// Moves a span that starts at or after `from` (an offset of the old text) to where it is in a
/// text whose bytes from `from` on now start at `to`.
fn moved(span: &mut Span, from: usize, to: usize) {
    span.start = span.start - from + to;
    span.end = span.end - from + to;
}

impl SyntaxTree<'_> {
    /// The tree with its text copied out of the source, so that it outlives it.
    pub fn into_owned(self) -> SyntaxTree<'static> {
        SyntaxTree {
            name: self.name.map(Id::into_owned),
            statements: self.statements.into_iter().map(Statement::into_owned).collect(),
            span: self.span,
        }
    }
}

impl Statement<'_> {
    /// Where the statement's first token starts.
    pub fn start(&self) -> usize {
        match self {
            Statement::Defaults { span, .. } | Statement::Edge { span, .. } => span.start,
            Statement::GraphAttribute(attribute) => attribute.key_span.start,
            Statement::Node { id, .. } => id.span.start,
            Statement::Subgraph(subgraph) => subgraph.span.start,
        }
    }

    pub fn into_owned(self) -> Statement<'static> {
        let attributes = |list: Vec<Attribute<'_>>| list.into_iter().map(Attribute::into_owned).collect();
        match self {
            Statement::Defaults { kind, attributes: list, span } => {
                Statement::Defaults { kind, attributes: attributes(list), span }
            }
            Statement::GraphAttribute(attribute) => Statement::GraphAttribute(attribute.into_owned()),
            Statement::Node { id, attributes: list } => {
                Statement::Node { id: id.into_owned(), attributes: attributes(list) }
            }
            Statement::Edge { endpoints, attributes: list, span } => Statement::Edge {
                endpoints: endpoints.into_iter().map(Id::into_owned).collect(),
                attributes: attributes(list),
                span,
            },
            Statement::Subgraph(subgraph) => Statement::Subgraph(Subgraph {
                name: subgraph.name.map(Id::into_owned),
                statements: subgraph.statements.into_iter().map(Statement::into_owned).collect(),
                span: subgraph.span,
            }),
        }
    }

    /// Moves every span of the statement (written at or after `from`) so that `from` is `to`.
    pub(crate) fn move_spans(&mut self, from: usize, to: usize) {
        let attributes = |list: &mut [Attribute<'_>]| {
            for attribute in list {
                moved(&mut attribute.key_span, from, to);
                moved(&mut attribute.value.span, from, to);
            }
        };
        match self {
            Statement::Defaults { attributes: list, span, .. } => {
                moved(span, from, to);
                attributes(list);
            }
            Statement::GraphAttribute(attribute) => attributes(std::slice::from_mut(attribute)),
            Statement::Node { id, attributes: list } => {
                moved(&mut id.span, from, to);
                attributes(list);
            }
            Statement::Edge { endpoints, attributes: list, span } => {
                moved(span, from, to);
                for endpoint in endpoints {
                    moved(&mut endpoint.span, from, to);
                }
                attributes(list);
            }
            Statement::Subgraph(subgraph) => {
                moved(&mut subgraph.span, from, to);
                if let Some(name) = &mut subgraph.name {
                    moved(&mut name.span, from, to);
                }
                for statement in &mut subgraph.statements {
                    statement.move_spans(from, to);
                }
            }
        }
    }
}

impl Id<'_> {
    pub fn into_owned(self) -> Id<'static> {
        Id { name: owned(self.name), quoted: self.quoted, span: self.span }
    }
}

impl Attribute<'_> {
    pub fn into_owned(self) -> Attribute<'static> {
        Attribute {
            key: owned(self.key),
            key_span: self.key_span,
            value: Literal { text: owned(self.value.text), quoted: self.value.quoted, span: self.value.span },
        }
    }
}
