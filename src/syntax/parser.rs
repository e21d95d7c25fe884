//! The pest driver: runs `grammar/dot.pest`, turns its pairs into a [`SyntaxTree`], and turns its
//! errors into plain words.

use pest::error::{ErrorVariant, InputLocation};
use pest::iterators::Pair;
use pest::Parser as _;

use super::syntax_error::{SyntaxError, SyntaxErrorKind};
use super::tree::{Attribute, DefaultsKind, Id, Literal, Statement, Subgraph, SyntaxTree};
use super::unescape;
use crate::source::Span;

#[derive(pest_derive::Parser)]
#[grammar = "../grammar/dot.pest"]
struct DotParser;

/// Parses one workflow file's text.
pub fn parse(text: &str) -> Result<SyntaxTree, SyntaxError> {
    if is_blank(text) {
        return Err(SyntaxError::new(SyntaxErrorKind::Empty, Span::at(0)));
    }
    let mut file = DotParser::parse(Rule::file, text).map_err(|e| translate_error(text, &e))?;
    let mut graphs =
        file.next().into_iter().flat_map(Pair::into_inner).filter(|pair| pair.as_rule() == Rule::graph);
    let first = graphs.next().ok_or_else(|| SyntaxError::new(SyntaxErrorKind::Empty, Span::at(0)))?;
    if let Some(second) = graphs.next() {
        return Err(SyntaxError::new(SyntaxErrorKind::SeveralGraphs, span_of(&second)));
    }
    build_graph(first)
}

/// True when the text holds nothing but whitespace and comments.
fn is_blank(text: &str) -> bool {
    let mut rest = text.trim_start();
    loop {
        if let Some(after) = rest.strip_prefix("/*") {
            match after.find("*/") {
                Some(end) => rest = after[end + 2..].trim_start(),
                None => return false,
            }
        } else if rest.starts_with("//") || rest.starts_with('#') {
            rest = rest.find('\n').map_or("", |end| &rest[end..]).trim_start();
        } else {
            return rest.is_empty();
        }
    }
}

fn span_of(pair: &Pair<'_, Rule>) -> Span {
    let span = pair.as_span();
    Span::new(span.start(), span.end())
}

fn build_graph(graph: Pair<'_, Rule>) -> Result<SyntaxTree, SyntaxError> {
    let span = span_of(&graph);
    let mut name = None;
    let mut statements = Vec::new();
    for pair in graph.into_inner() {
        match pair.as_rule() {
            Rule::strict_keyword => {
                return Err(SyntaxError::new(SyntaxErrorKind::StrictGraph, span_of(&pair)))
            }
            Rule::graph_keyword => {
                return Err(SyntaxError::new(SyntaxErrorKind::UndirectedGraph, span_of(&pair)))
            }
            Rule::id => name = Some(build_id(pair)),
            Rule::open_brace | Rule::close_brace | Rule::digraph_keyword => {}
            _ => statements.push(build_statement(pair)?),
        }
    }
    Ok(SyntaxTree { name, statements, span })
}

fn build_statement(pair: Pair<'_, Rule>) -> Result<Statement, SyntaxError> {
    let span = span_of(&pair);
    match pair.as_rule() {
        Rule::defaults => {
            let mut inner = pair.into_inner();
            let kind = match inner.next().map(|k| k.as_rule()) {
                Some(Rule::graph_keyword) => DefaultsKind::Graph,
                Some(Rule::node_keyword) => DefaultsKind::Node,
                _ => DefaultsKind::Edge,
            };
            Ok(Statement::Defaults { kind, attributes: build_attribute_lists(inner)?, span })
        }
        Rule::graph_attribute => Ok(Statement::GraphAttribute(build_attribute(pair)?)),
        Rule::node_statement => {
            let mut inner = pair.into_inner();
            let id =
                inner.next().map(build_id).unwrap_or_else(|| Id { name: String::new(), quoted: false, span });
            Ok(Statement::Node { id, attributes: build_attribute_lists(inner)? })
        }
        Rule::edge_statement => build_edge(pair),
        Rule::subgraph => Ok(Statement::Subgraph(build_subgraph(pair)?)),
        other => unreachable_rule(other, span),
    }
}

fn build_edge(pair: Pair<'_, Rule>) -> Result<Statement, SyntaxError> {
    let span = span_of(&pair);
    let mut endpoints = Vec::new();
    let mut lists = Vec::new();
    for part in pair.into_inner() {
        match part.as_rule() {
            Rule::id => endpoints.push(build_id(part)),
            Rule::subgraph => {
                return Err(SyntaxError::new(SyntaxErrorKind::SubgraphEndpoint, span_of(&part)))
            }
            Rule::edge_operator if part.as_str() == "--" => {
                return Err(SyntaxError::new(SyntaxErrorKind::UndirectedEdge, span_of(&part)))
            }
            Rule::attribute_list => lists.push(part),
            _ => {}
        }
    }
    let attributes = build_attribute_lists(lists.into_iter())?;
    Ok(Statement::Edge { endpoints, attributes, span })
}

fn build_subgraph(pair: Pair<'_, Rule>) -> Result<Subgraph, SyntaxError> {
    let span = span_of(&pair);
    let mut name = None;
    let mut statements = Vec::new();
    for part in pair.into_inner() {
        match part.as_rule() {
            Rule::id => name = Some(build_id(part)),
            Rule::subgraph_keyword | Rule::open_brace | Rule::close_brace => {}
            _ => statements.push(build_statement(part)?),
        }
    }
    Ok(Subgraph { name, statements, span })
}

fn build_attribute_lists<'i>(
    lists: impl Iterator<Item = Pair<'i, Rule>>,
) -> Result<Vec<Attribute>, SyntaxError> {
    let mut attributes = Vec::new();
    for list in lists {
        for attribute in list.into_inner().filter(|p| p.as_rule() == Rule::attribute) {
            attributes.push(build_attribute(attribute)?);
        }
    }
    Ok(attributes)
}

/// Builds an `attribute` or `graph_attribute` pair: `key = value`.
fn build_attribute(pair: Pair<'_, Rule>) -> Result<Attribute, SyntaxError> {
    let span = span_of(&pair);
    let mut key = None;
    let mut value = None;
    for part in pair.into_inner() {
        match part.as_rule() {
            Rule::key => key = Some(part),
            Rule::value => value = part.into_inner().next(),
            _ => {}
        }
    }
    let (Some(key), Some(value)) = (key, value) else {
        return unreachable_rule(Rule::attribute, span);
    };
    let value = match value.as_rule() {
        Rule::html => return Err(SyntaxError::new(SyntaxErrorKind::HtmlLabel, span_of(&value))),
        Rule::quoted => Literal { text: decode_quoted(&value), quoted: true, span: span_of(&value) },
        _ => Literal { text: value.as_str().to_string(), quoted: false, span: span_of(&value) },
    };
    Ok(Attribute { key: key.as_str().to_string(), key_span: span_of(&key), value })
}

fn build_id(pair: Pair<'_, Rule>) -> Id {
    let span = span_of(&pair);
    match pair.into_inner().next() {
        Some(inner) if inner.as_rule() == Rule::quoted => {
            Id { name: decode_quoted(&inner), quoted: true, span }
        }
        Some(inner) => Id { name: inner.as_str().to_string(), quoted: false, span },
        None => Id { name: String::new(), quoted: false, span },
    }
}

/// Decodes `"a" + "b"` concatenations and escapes.
fn decode_quoted(pair: &Pair<'_, Rule>) -> String {
    pair.clone()
        .into_inner()
        .filter_map(|string| string.into_inner().next())
        .map(|body| unescape(body.as_str()))
        .collect()
}

/// The grammar guarantees the shapes above; should it ever change without this file, fail with a
/// position instead of panicking.
fn unreachable_rule<T>(rule: Rule, span: Span) -> Result<T, SyntaxError> {
    Err(SyntaxError::new(
        SyntaxErrorKind::Unexpected {
            expected: "a statement".into(),
            found: format!("an unsupported construct ({})", describe(rule)),
            after: None,
        },
        span,
    ))
}

/// Turns a pest error into plain words: what was expected, what was found, and after what.
fn translate_error(text: &str, error: &pest::error::Error<Rule>) -> SyntaxError {
    let offset = match error.location {
        InputLocation::Pos(pos) => pos,
        InputLocation::Span((start, _)) => start,
    };
    let positives: Vec<Rule> = match &error.variant {
        ErrorVariant::ParsingError { positives, .. } => positives.clone(),
        ErrorVariant::CustomError { .. } => Vec::new(),
    };
    let kind = SyntaxErrorKind::Unexpected {
        expected: expected_words(&positives, text[..offset.min(text.len())].trim_end().ends_with("->")),
        found: found_words(text, offset),
        after: previous_token(text, offset),
    };
    SyntaxError::new(kind, Span::at(offset))
}

fn expected_words(positives: &[Rule], after_edge_operator: bool) -> String {
    const STATEMENT: &str = "a new statement";
    let statement_rules =
        [Rule::defaults, Rule::subgraph, Rule::edge_statement, Rule::graph_attribute, Rule::node_statement];
    // After `->` the grammar also tries a subgraph endpoint; that is not worth mentioning.
    let statement_possible = !after_edge_operator && positives.iter().any(|r| statement_rules.contains(r));
    let mut words: Vec<&str> = Vec::new();
    for rule in positives {
        let word = if statement_rules.contains(rule) {
            if after_edge_operator {
                continue;
            }
            STATEMENT
        } else {
            describe(*rule)
        };
        // A new statement already covers the ids and names it starts with.
        let covered = statement_possible && matches!(word, "a node id" | "an attribute name");
        if !covered && !words.contains(&word) {
            words.push(word);
        }
    }
    // A statement starts with a node id or an attribute name; say so in one phrase.
    if let (Some(id), Some(name)) =
        (words.iter().position(|w| *w == "a node id"), words.iter().position(|w| *w == "an attribute name"))
    {
        if !after_edge_operator {
            words.remove(id.max(name));
            words.remove(id.min(name));
            words.push(STATEMENT);
        }
    }
    // Punctuation first, then "a new statement", so the likeliest fix reads first.
    words.sort_by_key(|word| (*word == STATEMENT, !word.starts_with('`')));
    match words.len() {
        0 => "valid DOT".to_string(),
        1 => words[0].to_string(),
        n => format!("{} or {}", words[..n - 1].join(", "), words[n - 1]),
    }
}

fn describe(rule: Rule) -> &'static str {
    match rule {
        Rule::graph | Rule::digraph_keyword | Rule::strict_keyword | Rule::graph_keyword => "`digraph`",
        Rule::id | Rule::identifier_id | Rule::identifier | Rule::numeral | Rule::endpoint => "a node id",
        Rule::edge_operator => "`->`",
        Rule::attribute_list | Rule::open_bracket => "`[`",
        Rule::close_bracket => "`]`",
        Rule::attribute => "an attribute (`name=value`)",
        Rule::key => "an attribute name",
        Rule::equals => "`=`",
        Rule::value | Rule::quoted | Rule::string | Rule::bare | Rule::html | Rule::string_body => "a value",
        Rule::open_brace => "`{`",
        Rule::close_brace => "`}`",
        Rule::EOI => "the end of the file",
        _ => "a new statement",
    }
}

/// What stands at `offset`: the next token, shortened, or "the end of the file".
fn found_words(text: &str, offset: usize) -> String {
    let rest = text.get(offset..).unwrap_or("");
    let Some(first) = rest.chars().next() else {
        return "the end of the file".to_string();
    };
    if first == '"' {
        return "a quoted string".to_string();
    }
    let token: String = if first.is_alphanumeric() || first == '_' {
        rest.chars().take_while(|c| c.is_alphanumeric() || *c == '_').take(24).collect()
    } else {
        rest.chars().take_while(|c| !c.is_whitespace()).take(2).collect()
    };
    format!("`{token}`")
}

/// The token just before `offset` (skipping whitespace), to say where the parser stopped.
fn previous_token(text: &str, offset: usize) -> Option<String> {
    let before = text.get(..offset)?.trim_end();
    let last = before.chars().last()?;
    if last.is_alphanumeric() || last == '_' {
        let start = before
            .char_indices()
            .rev()
            .take_while(|(_, c)| c.is_alphanumeric() || *c == '_' || *c == '.')
            .last()
            .map_or(0, |(i, _)| i);
        return Some(format!("`{}`", &before[start..]));
    }
    if before.ends_with("->") {
        return Some("`->`".to_string());
    }
    match last {
        '"' => Some("a quoted string".to_string()),
        '=' | '[' | ',' | ';' | '{' => Some(format!("`{last}`")),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn error(text: &str) -> SyntaxError {
        parse(text).expect_err("should not parse")
    }

    #[test]
    fn parses_statements_in_order_with_spans() {
        let tree =
            parse("digraph G {\n  a [label=\"A\"]\n  a -> b -> c [weight=2]\n  rankdir=LR\n}").unwrap();
        assert_eq!(tree.name.unwrap().name, "G");
        assert_eq!(tree.statements.len(), 3);
        let Statement::Edge { endpoints, attributes, .. } = &tree.statements[1] else { panic!() };
        assert_eq!(endpoints.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(attributes[0].value.text, "2");
    }

    #[test]
    fn attribute_lists_accept_any_separator_and_repeat() {
        let tree = parse("digraph { a [x=1, y=2; z=3\n w=4][v=5] }").unwrap();
        let Statement::Node { attributes, .. } = &tree.statements[0] else { panic!() };
        let keys: Vec<_> = attributes.iter().map(|a| a.key.as_str()).collect();
        assert_eq!(keys, ["x", "y", "z", "w", "v"]);
    }

    #[test]
    fn values_keep_their_text() {
        let tree =
            parse(r#"digraph { a [m=gpt-5.2, f=summary:high, t=900s, s="x\"y" + "z", k.d=1] }"#).unwrap();
        let Statement::Node { attributes, .. } = &tree.statements[0] else { panic!() };
        let texts: Vec<_> = attributes.iter().map(|a| a.value.text.as_str()).collect();
        assert_eq!(texts, ["gpt-5.2", "summary:high", "900s", "x\"yz", "1"]);
        assert_eq!(attributes[4].key, "k.d");
    }

    #[test]
    fn comments_are_ignored_but_not_inside_strings() {
        let tree = parse("# head\ndigraph { // x\n /* y */ a [p=\"// not a comment\"] }").unwrap();
        let Statement::Node { attributes, .. } = &tree.statements[0] else { panic!() };
        assert_eq!(attributes[0].value.text, "// not a comment");
    }

    #[test]
    fn rejected_constructs_have_their_own_messages() {
        assert_eq!(error("strict digraph { a }").kind, SyntaxErrorKind::StrictGraph);
        assert_eq!(error("graph { a }").kind, SyntaxErrorKind::UndirectedGraph);
        assert_eq!(error("digraph { a -- b }").kind, SyntaxErrorKind::UndirectedEdge);
        assert_eq!(error("digraph { a [label=<<b>x</b>>] }").kind, SyntaxErrorKind::HtmlLabel);
        assert_eq!(error("digraph { a }\ndigraph { b }").kind, SyntaxErrorKind::SeveralGraphs);
        assert_eq!(error("digraph { a -> {b c} }").kind, SyntaxErrorKind::SubgraphEndpoint);
        assert_eq!(error(" // only a comment\n").kind, SyntaxErrorKind::Empty);
    }

    #[test]
    fn unexpected_tokens_say_what_was_expected_after_what() {
        let err = error("digraph { a -> }");
        assert_eq!(err.to_string(), "expected a node id after `->`, found `}`");
        assert_eq!(err.span.start, 15);
        let err = error("digraph { a [label=] }");
        assert_eq!(err.to_string(), "expected a value after `=`, found `]`");
        let err = error("digraph { a [label=\"x\" }");
        assert!(err.to_string().starts_with("expected "), "{err}");
        assert!(err.to_string().contains("`]`"), "{err}");
        let err = error("digraph { a }}");
        assert!(err.to_string().contains("the end of the file"), "{err}");
    }
}
