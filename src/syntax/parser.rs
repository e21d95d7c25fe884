//! The pest driver: runs `grammar/dot.pest`, turns its pairs into a [`SyntaxTree`], and turns its
//! errors into plain words.

use std::borrow::Cow;

use pest::error::{ErrorVariant, InputLocation};
use pest::iterators::Pair;
use pest::Parser as _;

use super::syntax_error::{SyntaxError, SyntaxErrorKind};
use super::tree::{Attribute, DefaultsKind, Id, Literal, Statement, Subgraph, SyntaxTree};
use crate::dot_string::unescape;
use crate::source::Span;

#[derive(pest_derive::Parser)]
#[grammar = "../grammar/dot.pest"]
struct DotParser;

/// Parses one workflow file's text.
pub fn parse(text: &str) -> Result<SyntaxTree<'_>, SyntaxError> {
    if is_blank(text) {
        return Err(SyntaxError::new(SyntaxErrorKind::Empty, Span::at(0)));
    }
    if let Some(offset) = too_deep(text) {
        return Err(SyntaxError::new(SyntaxErrorKind::TooDeep(MAX_NESTING), Span::at(offset)));
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

/// Parses a run of statements cut out of a graph's body (positions relative to `text`). An
/// error is only reported as such: the caller parses the whole file to explain it.
pub(super) fn parse_statements(text: &str) -> Result<Vec<Statement<'_>>, SyntaxError> {
    if let Some(offset) = too_deep(text) {
        return Err(SyntaxError::new(SyntaxErrorKind::TooDeep(MAX_NESTING), Span::at(offset)));
    }
    let mut list = DotParser::parse(Rule::statement_list, text).map_err(|e| translate_error(text, &e))?;
    let mut statements = Vec::new();
    for pair in list.next().into_iter().flat_map(Pair::into_inner) {
        match pair.as_rule() {
            Rule::EOI => {}
            Rule::edge_tail => return Err(subgraph_endpoint(&statements, &pair)),
            _ => statements.push(build_statement(pair)?),
        }
    }
    Ok(statements)
}

/// Deepest nesting of `{` (subgraphs) or `<` (HTML labels) the parser accepts. The grammar and the
/// tree builder recurse per level, so unbounded nesting would overflow the stack.
const MAX_NESTING: usize = 100;

/// The offset of the first `{` or `<` nested deeper than [`MAX_NESTING`], outside strings and
/// comments.
fn too_deep(text: &str) -> Option<usize> {
    let bytes = text.as_bytes();
    let (mut braces, mut angles) = (0usize, 0usize);
    let mut i = 0;
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = text[i + 2..].find("*/").map_or(bytes.len(), |end| i + 2 + end + 1);
            }
            b'#' => i = text[i..].find('\n').map_or(bytes.len(), |end| i + end),
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i = text[i..].find('\n').map_or(bytes.len(), |end| i + end)
            }
            b'{' => braces += 1,
            b'}' => braces = braces.saturating_sub(1),
            b'<' => angles += 1,
            b'>' => angles = angles.saturating_sub(1),
            _ => {}
        }
        if braces > MAX_NESTING || angles > MAX_NESTING {
            return Some(i);
        }
        i += 1;
    }
    None
}

/// True when the text holds nothing but whitespace and comments.
fn is_blank(text: &str) -> bool {
    let mut rest = text.trim_start_matches('\u{FEFF}').trim_start();
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

fn build_graph(graph: Pair<'_, Rule>) -> Result<SyntaxTree<'_>, SyntaxError> {
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
            Rule::edge_tail => return Err(subgraph_endpoint(&statements, &pair)),
            _ => statements.push(build_statement(pair)?),
        }
    }
    Ok(SyntaxTree { name, statements, span })
}

fn build_statement(pair: Pair<'_, Rule>) -> Result<Statement<'_>, SyntaxError> {
    let span = span_of(&pair);
    match pair.as_rule() {
        Rule::id_statement => build_id_statement(pair),
        Rule::subgraph => Ok(Statement::Subgraph(build_subgraph(pair)?)),
        other => unreachable_rule(other, span),
    }
}

/// `a = v`, `a -> b [..]`, `a [..]` or `node [..]`, told apart by the first id and what follows.
fn build_id_statement(pair: Pair<'_, Rule>) -> Result<Statement<'_>, SyntaxError> {
    let span = span_of(&pair);
    let mut parts = pair.into_inner().peekable();
    let Some(first) = parts.next() else { return unreachable_rule(Rule::id_statement, span) };
    let defaults_kind = match first.as_str() {
        word if word.eq_ignore_ascii_case("node") => Some(DefaultsKind::Node),
        word if word.eq_ignore_ascii_case("edge") => Some(DefaultsKind::Edge),
        word if word.eq_ignore_ascii_case("graph") => Some(DefaultsKind::Graph),
        _ => None,
    };
    let next = parts.peek().map(Pair::as_rule);
    if let (Some(kind), Some(Rule::attribute_list)) = (defaults_kind, next) {
        return Ok(Statement::Defaults { kind, attributes: build_attribute_lists(parts)?, span });
    }
    match next {
        Some(Rule::equals) => {
            let key_span = span_of(&first);
            let key = build_id(first);
            let value = parts.nth(1);
            let Some(value) = value else { return unreachable_rule(Rule::id_statement, span) };
            Ok(Statement::GraphAttribute(Attribute { key: key.name, key_span, value: build_literal(value)? }))
        }
        Some(Rule::edge_operator) => {
            let mut endpoints = vec![check_keyword(build_id(first))?];
            let mut lists = Vec::new();
            for part in parts {
                match part.as_rule() {
                    Rule::id => endpoints.push(check_keyword(build_id(part))?),
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
            Ok(Statement::Edge { endpoints, attributes: build_attribute_lists(lists.into_iter())?, span })
        }
        _ => Ok(Statement::Node {
            id: check_keyword(build_id(first))?,
            attributes: build_attribute_lists(parts)?,
        }),
    }
}

/// DOT keywords cannot be unquoted node ids (`node`, `edge` and `graph` only parse as ids when no
/// attribute list follows them, which is a mistake either way).
fn check_keyword(id: Id<'_>) -> Result<Id<'_>, SyntaxError> {
    const KEYWORDS: [&str; 6] = ["node", "edge", "graph", "digraph", "subgraph", "strict"];
    if !id.quoted && KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(&id.name)) {
        return Err(SyntaxError::new(SyntaxErrorKind::KeywordAsId(id.name.into_owned()), id.span));
    }
    Ok(id)
}

/// `subgraph { .. } -> b`: points at the subgraph the edge starts from.
fn subgraph_endpoint(statements: &[Statement<'_>], edge_tail: &Pair<'_, Rule>) -> SyntaxError {
    let span = match statements.last() {
        Some(Statement::Subgraph(subgraph)) => Span::new(subgraph.span.start, edge_tail.as_span().start()),
        _ => span_of(edge_tail),
    };
    SyntaxError::new(SyntaxErrorKind::SubgraphEndpoint, span)
}

fn build_subgraph(pair: Pair<'_, Rule>) -> Result<Subgraph<'_>, SyntaxError> {
    let span = span_of(&pair);
    let mut name = None;
    let mut statements = Vec::new();
    for part in pair.into_inner() {
        match part.as_rule() {
            Rule::id => name = Some(build_id(part)),
            Rule::subgraph_keyword | Rule::open_brace | Rule::close_brace => {}
            Rule::edge_tail => return Err(subgraph_endpoint(&statements, &part)),
            _ => statements.push(build_statement(part)?),
        }
    }
    Ok(Subgraph { name, statements, span })
}

fn build_attribute_lists<'i>(
    lists: impl Iterator<Item = Pair<'i, Rule>>,
) -> Result<Vec<Attribute<'i>>, SyntaxError> {
    let mut attributes = Vec::new();
    for list in lists {
        for attribute in list.into_inner().filter(|p| p.as_rule() == Rule::attribute) {
            attributes.push(build_attribute(attribute)?);
        }
    }
    Ok(attributes)
}

/// Builds an `attribute` or `graph_attribute` pair: `key = value`.
fn build_attribute(pair: Pair<'_, Rule>) -> Result<Attribute<'_>, SyntaxError> {
    let span = span_of(&pair);
    let mut key = None;
    let mut value = None;
    for part in pair.into_inner() {
        match part.as_rule() {
            Rule::key => key = Some(part),
            Rule::quoted | Rule::html | Rule::bare => value = Some(part),
            _ => {}
        }
    }
    let (Some(key), Some(value)) = (key, value) else {
        return unreachable_rule(Rule::attribute, span);
    };
    let key_text = match key.as_str().starts_with('"') {
        true => decode_quoted(key.as_str()),
        false => Cow::Borrowed(key.as_str()),
    };
    Ok(Attribute { key: key_text, key_span: span_of(&key), value: build_literal(value)? })
}

fn build_literal(value: Pair<'_, Rule>) -> Result<Literal<'_>, SyntaxError> {
    Ok(match value.as_rule() {
        Rule::html => return Err(SyntaxError::new(SyntaxErrorKind::HtmlLabel, span_of(&value))),
        Rule::quoted => Literal { text: decode_quoted(value.as_str()), quoted: true, span: span_of(&value) },
        _ => Literal { text: Cow::Borrowed(value.as_str()), quoted: false, span: span_of(&value) },
    })
}

fn build_id(pair: Pair<'_, Rule>) -> Id<'_> {
    let span = span_of(&pair);
    let text = pair.as_str();
    match text.starts_with('"') {
        true => Id { name: decode_quoted(text), quoted: true, span },
        false => Id { name: Cow::Borrowed(text), quoted: false, span },
    }
}

/// Decodes a quoted literal as the grammar matched it: one or more `"..."` strings joined by `+`
/// with only whitespace around it, each with escapes.
fn decode_quoted(text: &str) -> Cow<'_, str> {
    // Most strings are one segment without escapes.
    if let Some(body) = text.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        if !body.contains(['"', '\\']) {
            return Cow::Borrowed(body);
        }
    }
    let mut decoded = String::new();
    let mut rest = text;
    while let Some(start) = rest.find('"') {
        let body = &rest[start + 1..];
        let mut end = body.len();
        let mut escaped = false;
        for (i, c) in body.char_indices() {
            match c {
                _ if escaped => escaped = false,
                '\\' => escaped = true,
                '"' => {
                    end = i;
                    break;
                }
                _ => {}
            }
        }
        decoded.push_str(&unescape(&body[..end]));
        rest = body.get(end + 1..).unwrap_or("");
    }
    Cow::Owned(decoded)
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
    if let Some(mistake) = beginner_mistake(text, offset) {
        return mistake;
    }
    let before = significant_prefix(text, offset);
    let kind = SyntaxErrorKind::Unexpected {
        expected: expected_words(&positives, before.ends_with("->")),
        found: found_words(text, offset),
        after: previous_token(before),
    };
    SyntaxError::new(kind, Span::at(offset))
}

/// The mistakes people new to DOT make, recognised where the parse stopped on their line: a value
/// with spaces and no quotes (`prompt=Write a plan`), single quotes (`prompt='Write a plan'`),
/// and a `#` comment after a statement.
fn beginner_mistake(text: &str, offset: usize) -> Option<SyntaxError> {
    let offset = (0..=offset.min(text.len())).rev().find(|&i| text.is_char_boundary(i))?;
    let line_start = text[..offset].rfind('\n').map_or(0, |i| i + 1);
    let line_end = text[offset..].find('\n').map_or(text.len(), |i| offset + i);
    let line = &text[line_start..line_end];
    let at = offset - line_start;
    if line[at..].starts_with('#') && !line[..at].trim().is_empty() {
        return Some(SyntaxError::new(SyntaxErrorKind::HashComment, Span::at(offset)));
    }
    // The `key = value` this position is in: the last `=` before it with no separator or quote
    // in between.
    let equals = line[..at].rfind('=')?;
    if line[equals + 1..at].contains([',', ';', '[', ']', '"', '{', '}']) {
        return None;
    }
    let key: String = line[..equals]
        .trim_end()
        .chars()
        .rev()
        .take_while(|c| c.is_alphanumeric() || matches!(c, '_' | '.'))
        .collect::<Vec<_>>()
        .into_iter()
        .rev()
        .collect();
    if key.is_empty() {
        return None;
    }
    let value_at = equals + 1 + (line[equals + 1..].len() - line[equals + 1..].trim_start().len());
    let rest = &line[value_at..];
    let span = Span::at(line_start + value_at);
    if let Some(quoted) = rest.strip_prefix('\'') {
        let value = quoted.split('\'').next().unwrap_or(quoted).to_string();
        return Some(SyntaxError::new(SyntaxErrorKind::SingleQuotes { key, value }, span));
    }
    let value = rest.split([',', ';', ']']).next().unwrap_or(rest).trim_end();
    let first_word = value.split_whitespace().next()?;
    if value_at + first_word.len() > at || !value.contains(char::is_whitespace) {
        return None;
    }
    let kind =
        SyntaxErrorKind::UnquotedValue { key, first_word: first_word.to_string(), value: value.to_string() };
    Some(SyntaxError::new(kind, span))
}

/// How [`expected_words`] names the start of a statement.
const STATEMENT: &str = "a new statement";

/// True when a new statement could have started where `error` is: what came before it was
/// complete.
pub(super) fn statement_could_start(error: &SyntaxError) -> bool {
    match &error.kind {
        SyntaxErrorKind::Unexpected { expected, .. } => expected.contains(STATEMENT),
        _ => true,
    }
}

fn expected_words(positives: &[Rule], after_edge_operator: bool) -> String {
    let statement_rules = [Rule::subgraph, Rule::id_statement];
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
        Rule::subgraph_keyword => "a new statement",
        Rule::id | Rule::dotted_identifier | Rule::numeral | Rule::endpoint => "a node id",
        Rule::edge_tail => "`->`",
        Rule::edge_operator => "`->`",
        Rule::attribute_list | Rule::open_bracket => "`[`",
        Rule::close_bracket => "`]`",
        Rule::attribute => "an attribute (`name=value`)",
        Rule::key => "an attribute name",
        Rule::equals => "`=`",
        Rule::quoted | Rule::bare | Rule::html | Rule::string_body => "a value",
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

/// The text before `offset` up to the end of its last token: trailing whitespace and comments
/// dropped, so the error can say what the parser saw last.
fn significant_prefix(text: &str, offset: usize) -> &str {
    let mut limit = offset.min(text.len());
    while !text.is_char_boundary(limit) {
        limit -= 1;
    }
    let head = &text[..limit];
    let (mut i, mut end) = (0, 0);
    let mut line_start = true;
    while let Some(c) = head[i..].chars().next() {
        let rest = &head[i..];
        if rest.starts_with("/*") {
            i = rest.find("*/").map_or(head.len(), |at| i + at + 2);
        } else if rest.starts_with("//") || (c == '#' && line_start) {
            i = rest.find('\n').map_or(head.len(), |at| i + at);
        } else if c == '"' {
            i = string_end(rest).map_or(head.len(), |len| i + len);
            end = i;
        } else {
            i += c.len_utf8();
            if c.is_whitespace() {
                line_start |= c == '\n';
                continue;
            }
            end = i;
        }
        line_start = false;
    }
    &head[..end]
}

/// The byte length of the quoted string at the start of `text`, quotes included, if it closes.
fn string_end(text: &str) -> Option<usize> {
    let mut escaped = false;
    for (at, c) in text.char_indices().skip(1) {
        match c {
            _ if escaped => escaped = false,
            '\\' => escaped = true,
            '"' => return Some(at + 1),
            _ => {}
        }
    }
    None
}

/// The token at the end of `before`, to say where the parser stopped.
fn previous_token(before: &str) -> Option<String> {
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
        assert_eq!(endpoints.iter().map(|e| e.name.as_ref()).collect::<Vec<_>>(), ["a", "b", "c"]);
        assert_eq!(attributes[0].value.text, "2");
    }

    #[test]
    fn attribute_lists_accept_any_separator_and_repeat() {
        let tree = parse("digraph { a [x=1, y=2; z=3\n w=4][v=5] }").unwrap();
        let Statement::Node { attributes, .. } = &tree.statements[0] else { panic!() };
        let keys: Vec<_> = attributes.iter().map(|a| a.key.as_ref()).collect();
        assert_eq!(keys, ["x", "y", "z", "w", "v"]);
    }

    #[test]
    fn values_keep_their_text() {
        let tree =
            parse(r#"digraph { a [m=gpt-5.2, f=summary:high, t=900s, s="x\"y" + "z", k.d=1] }"#).unwrap();
        let Statement::Node { attributes, .. } = &tree.statements[0] else { panic!() };
        let texts: Vec<_> = attributes.iter().map(|a| a.value.text.as_ref()).collect();
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
        assert_eq!(error("digraph { edge -> b }").kind, SyntaxErrorKind::KeywordAsId("edge".into()));
        let deep = format!("digraph {{ {} a {} }}", "subgraph {".repeat(5000), "}".repeat(5000));
        assert_eq!(error(&deep).kind, SyntaxErrorKind::TooDeep(MAX_NESTING));
        let html = format!("digraph {{ a [label={}] }}", "<".repeat(5000));
        assert_eq!(error(&html).kind, SyntaxErrorKind::TooDeep(MAX_NESTING));
        assert!(parse(&format!("digraph {{ a [label=\"{}\"] }}", "{<".repeat(5000))).is_ok());
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
