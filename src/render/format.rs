//! Formatting a workflow file as written: the layout of normalized DOT (what `fabro graph`
//! prints: four-space indents, one statement a line, every value double-quoted, long attribute
//! lists one attribute a line) applied to the file's own statements, so nothing is inlined,
//! flattened or reordered, and its comments and blank lines between statements are kept. What an
//! editor's "format document" does.

use std::fmt::Write as _;

use crate::source::Span;
use crate::syntax::{self, Attribute, DefaultsKind, Statement, SyntaxError};

use super::dot::{id, quote, write_statement_at};

/// The formatted text of a workflow file, or why it cannot be parsed.
pub fn format_source(text: &str) -> Result<String, SyntaxError> {
    let tree = syntax::parse(text)?;
    let mut formatter =
        Formatter { text, comments: syntax::comments(text), next: 0, out: String::new(), last: None };
    formatter.comments_before(tree.span.start, 0);
    formatter.gap(tree.span.start);
    match &tree.name {
        Some(name) => {
            let _ = writeln!(formatter.out, "digraph {} {{", id(&name.name));
        }
        None => formatter.out.push_str("digraph {\n"),
    }
    formatter.last = None;
    formatter.block(&tree.statements, 1);
    formatter.comments_before(tree.span.end, 1);
    formatter.out.push_str("}\n");
    formatter.last = Some(tree.span.end);
    formatter.comments_before(text.len() + 1, 0);
    Ok(formatter.out)
}

struct Formatter<'a> {
    text: &'a str,
    comments: Vec<Span>,
    /// The first comment not written yet.
    next: usize,
    out: String,
    /// Where the last statement written ends (`None` right after an opening brace).
    last: Option<usize>,
}

impl Formatter<'_> {
    fn block(&mut self, statements: &[Statement<'_>], depth: usize) {
        let indent = "    ".repeat(depth);
        for statement in statements {
            let span = statement_span(statement);
            self.comments_before(span.start, depth);
            self.gap(span.start);
            match statement {
                Statement::Subgraph(subgraph) => {
                    let head = match &subgraph.name {
                        Some(name) => format!("subgraph {} {{", id(&name.name)),
                        None => "{".to_string(),
                    };
                    let _ = writeln!(self.out, "{indent}{head}");
                    self.last = None;
                    self.block(&subgraph.statements, depth + 1);
                    self.comments_before(subgraph.span.end.saturating_sub(1), depth + 1);
                    let _ = writeln!(self.out, "{indent}}}");
                }
                Statement::GraphAttribute(attribute) => {
                    let _ = writeln!(self.out, "{indent}{}", pair(attribute));
                }
                Statement::Defaults { kind, attributes, .. } => {
                    let head = match kind {
                        DefaultsKind::Graph => "graph",
                        DefaultsKind::Node => "node",
                        DefaultsKind::Edge => "edge",
                    };
                    write_statement_at(&mut self.out, &indent, head, &pairs(attributes));
                }
                Statement::Node { id: node, attributes } => {
                    write_statement_at(&mut self.out, &indent, &id(&node.name), &pairs(attributes));
                }
                Statement::Edge { endpoints, attributes, .. } => {
                    let head: Vec<_> = endpoints.iter().map(|endpoint| id(&endpoint.name)).collect();
                    write_statement_at(&mut self.out, &indent, &head.join(" -> "), &pairs(attributes));
                }
            }
            self.last = Some(span.end);
        }
    }

    /// A blank line where the source has one or more between the last thing written and `start`.
    fn gap(&mut self, start: usize) {
        let Some(last) = self.last else { return };
        let between = self.text.get(last..start).unwrap_or("");
        if between.matches('\n').count() >= 2 && !self.out.ends_with("\n\n") {
            self.out.push('\n');
        }
    }

    /// Writes the comments that start before `before`: one on the line a statement ends on stays
    /// at the end of that line, the others go on lines of their own.
    fn comments_before(&mut self, before: usize, depth: usize) {
        while let Some(&comment) = self.comments.get(self.next) {
            if comment.start >= before {
                break;
            }
            self.next += 1;
            let body = self.text.get(comment.start..comment.end).unwrap_or("").trim_end();
            let same_line = self.last.is_some_and(|last| {
                last <= comment.start && !self.text.get(last..comment.start).unwrap_or("\n").contains('\n')
            });
            if same_line && self.out.ends_with('\n') {
                self.out.pop();
                let _ = writeln!(self.out, " {body}");
            } else {
                self.gap(comment.start);
                let indent = "    ".repeat(depth);
                let _ = writeln!(self.out, "{indent}{body}");
            }
            self.last = Some(comment.end);
        }
    }
}

fn pair(attribute: &Attribute<'_>) -> String {
    format!("{}={}", id(&attribute.key), quote(&attribute.value.text))
}

fn pairs(attributes: &[Attribute<'_>]) -> Vec<String> {
    attributes.iter().map(pair).collect()
}

/// Where a statement starts and ends in the source.
fn statement_span(statement: &Statement<'_>) -> Span {
    let attributes_end = |attributes: &[Attribute<'_>], from: usize| {
        attributes.iter().map(|attribute| attribute.value.span.end).max().unwrap_or(from).max(from)
    };
    match statement {
        Statement::Defaults { span, .. } | Statement::Edge { span, .. } => *span,
        Statement::Subgraph(subgraph) => subgraph.span,
        Statement::GraphAttribute(attribute) => Span::new(attribute.key_span.start, attribute.value.span.end),
        Statement::Node { id, attributes } => {
            Span::new(id.span.start, attributes_end(attributes, id.span.end))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn formats_statements_as_normalized_dot_keeping_comments_and_blank_lines() {
        let text = "// header\ndigraph   w {\n  goal = \"ship\" // why\n\n\n  node [shape=box]\n  /* the start */\n  start [shape=Mdiamond];  exit [shape=Msquare]\n  subgraph cluster_a { label=Loop\n a -> b }\n  start->a->exit [label=go]\n}\n";
        let formatted = format_source(text).unwrap();
        assert_eq!(
            formatted,
            "// header\ndigraph w {\n    goal=\"ship\" // why\n\n    node [shape=\"box\"]\n    /* the start */\n    start [shape=\"Mdiamond\"]\n    exit [shape=\"Msquare\"]\n    subgraph cluster_a {\n        label=\"Loop\"\n        a -> b\n    }\n    start -> a -> exit [label=\"go\"]\n}\n"
        );
        assert_eq!(format_source(&formatted).unwrap(), formatted, "formatting is stable");
    }

    #[test]
    fn long_attribute_lists_go_one_a_line_and_a_syntax_error_is_an_error() {
        let prompt = "word ".repeat(30);
        let formatted = format_source(&format!("digraph w {{ a [prompt=\"{prompt}\", label=A] }}")).unwrap();
        assert!(formatted.contains("    a [\n        prompt="), "{formatted}");
        assert!(formatted.contains("        label=\"A\"\n    ]\n"), "{formatted}");
        assert!(format_source("digraph w { a -> }").is_err());
    }
}
