//! Text -> AST. Runs once per condition, at load time; all errors carry a byte offset.

use pest::error::{ErrorVariant, InputLocation};
use pest::iterators::Pair;
use pest::Parser as _;
use regex::Regex;

use super::{parse_number, Clause, ConditionError, Expr, Key, Literal, OrderOp, Test};
use crate::outcome::StageStatus;

#[derive(pest_derive::Parser)]
#[grammar = "../grammar/condition.pest"]
struct ConditionParser;

/// Parenthesis depth beyond which we refuse the text, so hostile input cannot exhaust the
/// stack in the parser or the (recursive) evaluator.
const MAX_NESTING: usize = 64;

pub(super) fn parse(text: &str) -> Result<Expr, ConditionError> {
    if text.trim().is_empty() {
        return Err(ConditionError::new(0, "the condition is empty"));
    }
    check_nesting(text)?;
    let pairs =
        ConditionParser::parse(Rule::condition, text).map_err(|error| translate_pest_error(text, &error))?;
    let top = pairs.flatten().find(|pair| pair.as_rule() == Rule::or_expr).ok_or_else(|| malformed(0))?;
    build_or(top)
}

/// Only reachable if the grammar and this builder disagree; reported rather than panicking.
fn malformed(offset: usize) -> ConditionError {
    ConditionError::new(offset, "could not understand the condition here")
}

fn check_nesting(text: &str) -> Result<(), ConditionError> {
    let mut depth = 0usize;
    let mut quote = None;
    let mut escaped = false;
    for (offset, ch) in text.char_indices() {
        match quote {
            Some(_) if escaped => escaped = false,
            Some('"') if ch == '\\' => escaped = true,
            Some(open) if ch == open => quote = None,
            Some(_) => {}
            None => match ch {
                '"' | '\'' => quote = Some(ch),
                '(' if depth == MAX_NESTING => {
                    let message = format!("parentheses nested more than {MAX_NESTING} deep");
                    return Err(ConditionError::new(offset, message));
                }
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
    }
    Ok(())
}

fn build_or(pair: Pair<'_, Rule>) -> Result<Expr, ConditionError> {
    let items = pair
        .into_inner()
        .filter(|child| child.as_rule() == Rule::and_expr)
        .map(build_and)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(flatten(items, Expr::Any))
}

fn build_and(pair: Pair<'_, Rule>) -> Result<Expr, ConditionError> {
    let items = pair
        .into_inner()
        .filter(|child| child.as_rule() == Rule::unary)
        .map(build_unary)
        .collect::<Result<Vec<_>, _>>()?;
    Ok(flatten(items, Expr::All))
}

/// A single operand stands for itself; only real lists become `Any`/`All`.
fn flatten(mut items: Vec<Expr>, combine: fn(Vec<Expr>) -> Expr) -> Expr {
    match items.len() {
        1 => items.remove(0),
        _ => combine(items),
    }
}

fn build_unary(pair: Pair<'_, Rule>) -> Result<Expr, ConditionError> {
    let offset = pair.as_span().start();
    let mut negations = 0usize;
    let mut operand = None;
    for child in pair.into_inner() {
        match child.as_rule() {
            Rule::not_op => negations += 1,
            Rule::group => operand = Some(build_group(child)?),
            Rule::clause => operand = Some(Expr::Clause(build_clause(child)?)),
            _ => {}
        }
    }
    let operand = operand.ok_or_else(|| malformed(offset))?;
    Ok(match negations % 2 {
        0 => operand,
        _ => Expr::Not(Box::new(operand)),
    })
}

fn build_group(pair: Pair<'_, Rule>) -> Result<Expr, ConditionError> {
    let offset = pair.as_span().start();
    let mut inner = None;
    let mut closed = false;
    for child in pair.into_inner() {
        match child.as_rule() {
            Rule::or_expr => inner = Some(child),
            Rule::close_paren => closed = true,
            _ => {}
        }
    }
    if !closed {
        return Err(ConditionError::new(offset, "unclosed `(` opened here"));
    }
    build_or(inner.ok_or_else(|| malformed(offset))?)
}

fn build_clause(pair: Pair<'_, Rule>) -> Result<Clause, ConditionError> {
    let offset = pair.as_span().start();
    let mut children = pair.into_inner();
    let key = match children.next() {
        Some(key) if key.as_rule() == Rule::key => match key.as_str() {
            "outcome" => Key::Outcome,
            "preferred_label" => Key::PreferredLabel,
            other => Key::Context(other.to_string()),
        },
        _ => return Err(malformed(offset)),
    };
    let test = match (children.next(), children.next()) {
        (None, _) => Test::Truthy,
        (Some(operator), Some(value)) => build_test(&key, &operator, value)?,
        (Some(operator), None) => return Err(malformed(operator.as_span().start())),
    };
    Ok(Clause { key, test })
}

fn build_test(key: &Key, operator: &Pair<'_, Rule>, value: Pair<'_, Rule>) -> Result<Test, ConditionError> {
    let operator_text = operator.as_str();
    let value_offset = value.as_span().start();
    let text = literal_text(value)?;
    let is_outcome = matches!(key, Key::Outcome);
    match operator_text {
        "=" | "==" | "!=" => {
            let negated = operator_text == "!=";
            Ok(match is_outcome {
                true => Test::Status { status: parse_status(&text, value_offset)?, negated },
                false => Test::Equals { literal: Literal::new(text), negated },
            })
        }
        _ if is_outcome && operator_text != "matches" => Err(ConditionError::new(
            operator.as_span().start(),
            format!("`outcome` cannot be compared with `{operator_text}`; use `=`, `!=` or `matches`"),
        )),
        "<" | "<=" | ">" | ">=" => {
            let op = match operator_text {
                "<" => OrderOp::Less,
                "<=" => OrderOp::LessOrEqual,
                ">" => OrderOp::Greater,
                _ => OrderOp::GreaterOrEqual,
            };
            let bound = parse_number(&text).ok_or_else(|| {
                let message = format!("`{operator_text}` compares numbers, but `{text}` is not a number");
                ConditionError::new(value_offset, message)
            })?;
            Ok(Test::Order { op, bound })
        }
        "contains" => Ok(Test::Contains(Literal::new(text))),
        "matches" => Regex::new(&text).map(Test::Matches).map_err(|error| {
            let message = format!("invalid regex `{text}`: {}", summarize_regex_error(&error));
            ConditionError::new(value_offset, message)
        }),
        _ => Err(malformed(operator.as_span().start())),
    }
}

/// The value's text: bare words as written, quoted strings unquoted (and unescaped for `"`).
fn literal_text(value: Pair<'_, Rule>) -> Result<String, ConditionError> {
    let offset = value.as_span().start();
    let literal = value.into_inner().next().ok_or_else(|| malformed(offset))?;
    let rule = literal.as_rule();
    if rule == Rule::bare_word {
        return Ok(literal.as_str().to_string());
    }
    let mut body = None;
    let mut closed = false;
    for part in literal.into_inner() {
        match part.as_rule() {
            Rule::dq_text | Rule::sq_text => body = Some(part),
            Rule::dq_close | Rule::sq_close => closed = true,
            _ => {}
        }
    }
    let quote = if rule == Rule::dq_string { '"' } else { '\'' };
    if !closed {
        return Err(ConditionError::new(offset, format!("unclosed `{quote}` opened here")));
    }
    match body {
        Some(body) if quote == '"' => unescape(body.as_str(), body.as_span().start()),
        Some(body) => Ok(body.as_str().to_string()),
        None => Ok(String::new()),
    }
}

/// Resolves `\"`, `\\`, `\n` and `\t`; any other escape is an error at its backslash.
fn unescape(raw: &str, start: usize) -> Result<String, ConditionError> {
    let mut text = String::with_capacity(raw.len());
    let mut chars = raw.char_indices();
    while let Some((index, ch)) = chars.next() {
        if ch != '\\' {
            text.push(ch);
            continue;
        }
        match chars.next().map(|(_, escaped)| escaped) {
            Some('"') => text.push('"'),
            Some('\\') => text.push('\\'),
            Some('n') => text.push('\n'),
            Some('t') => text.push('\t'),
            other => {
                let shown = other.map(String::from).unwrap_or_default();
                let message = format!(
                    "unknown escape `\\{shown}`; double-quoted values accept \\\", \\\\, \\n and \\t \
                     (use single quotes for text with backslashes, such as a regex)"
                );
                return Err(ConditionError::new(start + index, message));
            }
        }
    }
    Ok(text)
}

/// Spellings [`StageStatus::from_str`] accepts, for "did you mean".
const STATUS_SPELLINGS: [&str; 10] = [
    "success",
    "partial_success",
    "retry",
    "fail",
    "skipped",
    "succeeded",
    "partially_succeeded",
    "failed",
    "failure",
    "skip",
];

fn parse_status(text: &str, offset: usize) -> Result<StageStatus, ConditionError> {
    if let Ok(status) = text.parse::<StageStatus>() {
        return Ok(status);
    }
    if text.is_empty() {
        let message = "expected an outcome (success, partial_success, retry, fail or skipped), \
                       found an empty value";
        return Err(ConditionError::new(offset, message));
    }
    let lowered = text.to_ascii_lowercase();
    let suggestion = STATUS_SPELLINGS
        .iter()
        .map(|spelling| (strsim::levenshtein(&lowered, spelling), spelling))
        .min_by_key(|(distance, _)| *distance)
        .filter(|(distance, _)| *distance <= 2)
        .map(|(_, spelling)| format!(" (did you mean `{spelling}`?)"))
        .unwrap_or_default();
    let message = format!(
        "unknown outcome `{text}`; expected success, partial_success, retry, fail or skipped{suggestion}"
    );
    Err(ConditionError::new(offset, message))
}

/// The regex crate's syntax errors are multi-line drawings; keep just the `error:` line.
fn summarize_regex_error(error: &regex::Error) -> String {
    match error {
        regex::Error::Syntax(details) => details
            .lines()
            .rev()
            .find_map(|line| line.trim().strip_prefix("error: "))
            .unwrap_or(details.trim())
            .to_string(),
        regex::Error::CompiledTooBig(limit) => {
            format!("the compiled regex would exceed the size limit of {limit} bytes")
        }
        other => other.to_string(),
    }
}

// Descriptions for what the parser expected, in the order they are listed in messages.
const KEY: &str = "a key such as `outcome` or `context.name`";
const NOT: &str = "`!`";
const OPEN: &str = "`(`";
const OPERATOR: &str = "an operator (=, !=, <, <=, >, >=, contains, matches)";
const VALUE: &str = "a value";
const AND: &str = "`&&`";
const OR: &str = "`||`";
const CLOSE: &str = "`)`";
const DOUBLE_QUOTE: &str = "`\"`";
const SINGLE_QUOTE: &str = "`'`";
const END: &str = "the end of the condition";
const EXPECTATIONS: [&str; 11] =
    [KEY, NOT, OPEN, OPERATOR, VALUE, AND, OR, CLOSE, DOUBLE_QUOTE, SINGLE_QUOTE, END];

/// Plain-words meaning of a grammar rule the parser was trying when it stopped.
fn describe(rule: Rule) -> &'static [&'static str] {
    match rule {
        Rule::condition | Rule::or_expr | Rule::and_expr | Rule::unary | Rule::group => &[KEY, NOT, OPEN],
        Rule::clause | Rule::key => &[KEY],
        Rule::not_op => &[NOT],
        Rule::open_paren => &[OPEN],
        Rule::operator => &[OPERATOR],
        Rule::value | Rule::dq_string | Rule::sq_string | Rule::bare_word => &[VALUE],
        Rule::dq_text | Rule::sq_text => &[VALUE],
        Rule::and_op => &[AND],
        Rule::or_op => &[OR],
        Rule::close_paren => &[CLOSE],
        Rule::dq_close => &[DOUBLE_QUOTE],
        Rule::sq_close => &[SINGLE_QUOTE],
        Rule::EOI => &[END],
        _ => &[],
    }
}

/// Turns pest's "expected [rules]" into "expected X, Y or Z after `prev`, found `tok`".
fn translate_pest_error(text: &str, error: &pest::error::Error<Rule>) -> ConditionError {
    let offset = match error.location {
        InputLocation::Pos(offset) => offset,
        InputLocation::Span((start, _)) => start,
    };
    let expected: &[Rule] = match &error.variant {
        ErrorVariant::ParsingError { positives, .. } => positives,
        ErrorVariant::CustomError { .. } => &[],
    };
    let found = token_at(text, offset);
    if found == Some(")") && expected.contains(&Rule::EOI) {
        return ConditionError::new(offset, "`)` has no matching `(`");
    }
    let wanted: Vec<&str> = EXPECTATIONS
        .into_iter()
        .filter(|description| expected.iter().any(|rule| describe(*rule).contains(description)))
        .collect();
    let mut message = match wanted.split_last() {
        None => "expected a valid condition".to_string(),
        Some((last, [])) => format!("expected {last}"),
        Some((last, rest)) => format!("expected {} or {last}", rest.join(", ")),
    };
    if let Some(previous) = token_before(text, offset) {
        message.push_str(&format!(" after `{previous}`"));
    }
    match found {
        Some(token) => message.push_str(&format!(", found `{token}`")),
        None => message.push_str(", found the end of the condition"),
    }
    ConditionError::new(offset, message)
}

#[derive(PartialEq)]
enum CharClass {
    Space,
    Operator,
    Single,
    Word,
}

fn char_class(ch: char) -> CharClass {
    match ch {
        _ if ch.is_whitespace() => CharClass::Space,
        '=' | '!' | '<' | '>' | '&' | '|' => CharClass::Operator,
        '(' | ')' | '"' | '\'' => CharClass::Single,
        _ => CharClass::Word,
    }
}

/// The token starting at `offset` (a run of word or operator characters, or one bracket/quote).
fn token_at(text: &str, offset: usize) -> Option<&str> {
    let rest = text.get(offset..)?.trim_start();
    let first = rest.chars().next()?;
    let class = char_class(first);
    let end = match class {
        CharClass::Single => first.len_utf8(),
        _ => rest.find(|ch| char_class(ch) != class).unwrap_or(rest.len()),
    };
    rest.get(..end)
}

/// The token that ends right before `offset`: a word, an operator or a parenthesis.
fn token_before(text: &str, offset: usize) -> Option<&str> {
    let before = text.get(..offset)?.trim_end();
    let last = before.chars().next_back()?;
    let start = match char_class(last) {
        CharClass::Space => return None,
        CharClass::Single if last == '"' || last == '\'' => return None,
        CharClass::Single => before.len() - last.len_utf8(),
        class => before
            .char_indices()
            .rev()
            .take_while(|(_, ch)| char_class(*ch) == class)
            .last()
            .map_or(0, |(index, _)| index),
    };
    before.get(start..)
}
