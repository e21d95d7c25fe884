//! Text -> AST: a small hand-written lexer and recursive-descent parser. Runs once per
//! condition, at load time; all errors carry a byte offset.
//!
//! Grammar, in EBNF. Whitespace (space, tab, CR, LF) may appear between tokens, but not inside a
//! key, an operator or a value. `!` binds tightest, then `&&`, then `||`.
//!
//! ```text
//! condition = or_expr ;
//! or_expr   = and_expr , { "||" , and_expr } ;
//! and_expr  = unary , { "&&" , unary } ;
//! unary     = { "!" } , ( group | clause ) ;
//! group     = "(" , or_expr , ( ")" | END ) ;      (* a missing ")" is reported at the "(" *)
//! clause    = key , [ operator , value ] ;          (* a bare key tests truthiness *)
//! key       = segment , { "." , segment } ;
//! segment   = ( ALPHA | "_" ) , { ALPHA | DIGIT | "_" | "-" } ;
//! operator  = "==" | "!=" | "<=" | ">=" | "=" | "<" | ">"
//!           | ( "contains" | "!contains" | "not" , WS , { WS } , "contains" | "matches" ) ,
//!             ? not followed by ALPHA, DIGIT, "_" or "-" ? ;   (* WS: space or tab *)
//! value     = dq_string | sq_string | bare_word ;
//! dq_string = '"' , { "\" , CHAR | CHAR - '"' } , [ '"' ] ;   (* escapes: \" \\ \n \t *)
//! sq_string = "'" , { CHAR - "'" } , [ "'" ] ;               (* no escapes *)
//! bare_word = bare_char , { bare_char } ;
//! bare_char = CHAR - ( " " | TAB | CR | LF | "(" | ")" | "&" | "|" | "!" | "=" | "<" | ">"
//!                    | '"' | "'" ) ;
//! ```
//!
//! `ALPHA` and `DIGIT` are ASCII; `CHAR` is any character; `END` is the end of the text. A
//! missing closing quote is accepted by the grammar and reported as "unclosed" afterwards.
//!
//! The parser is deterministic (one token of lookahead; the only longer look is the check that
//! `contains`/`matches` is not the start of a longer word). Syntax errors name everything that
//! could have come next where parsing stopped: each failed attempt to read a token records what
//! was wanted at its offset, and the furthest offset wins. Errors in otherwise well-formed
//! clauses (unknown outcomes, bad regexes, unclosed quotes and parentheses, ...) are kept aside
//! and reported only when the whole text is syntactically valid, the first one in reading order,
//! except that an unclosed `(` takes precedence over errors inside its group.

use std::borrow::Cow;

use regex::Regex;

use super::{parse_number, Clause, ConditionError, Expr, Key, Literal, OrderOp, Test};
use crate::outcome::StageStatus;

/// Parenthesis depth beyond which we refuse the text, so hostile input cannot exhaust the
/// stack in the parser or the (recursive) evaluator.
const MAX_NESTING: usize = 64;

/// Kept out of line so profiles attribute all condition parsing to this one symbol.
#[inline(never)]
pub(super) fn parse(text: &str) -> Result<Expr, ConditionError> {
    if text.trim().is_empty() {
        return Err(ConditionError::new(0, "the condition is empty"));
    }
    // Nesting too deep takes more than MAX_NESTING `(`, so shorter texts need no scan.
    if text.len() > MAX_NESTING {
        check_nesting(text)?;
    }
    let mut parser = Parser::new(text);
    match parser.condition() {
        Ok(expr) => match parser.invalid {
            None => Ok(expr),
            Some(error) => Err(error),
        },
        Err(Stop::Syntax) => Err(parser.syntax_error()),
        Err(Stop::Fatal(error)) => Err(error),
    }
}

fn nesting_error(offset: usize) -> ConditionError {
    ConditionError::new(offset, format!("parentheses nested more than {MAX_NESTING} deep"))
}

/// Refuses more than MAX_NESTING open parentheses (outside quotes) before parsing, so the limit
/// is reported even when the text has other problems.
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
                '(' if depth == MAX_NESTING => return Err(nesting_error(offset)),
                '(' => depth += 1,
                ')' => depth = depth.saturating_sub(1),
                _ => {}
            },
        }
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Lexer

/// Whitespace between tokens. Only these four: other Unicode spaces are ordinary characters.
fn is_space(byte: u8) -> bool {
    matches!(byte, b' ' | b'\t' | b'\r' | b'\n')
}

fn is_segment_start(byte: u8) -> bool {
    byte.is_ascii_alphabetic() || byte == b'_'
}

fn is_segment_char(byte: u8) -> bool {
    byte.is_ascii_alphanumeric() || byte == b'_' || byte == b'-'
}

/// Characters that end a bare word (all ASCII, so byte scanning stays on char boundaries).
fn ends_bare_word(byte: u8) -> bool {
    matches!(
        byte,
        b' ' | b'\t' | b'\r' | b'\n' | b'(' | b')' | b'&' | b'|' | b'!' | b'=' | b'<' | b'>' | b'"' | b'\''
    )
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Operator {
    Equal,
    DoubleEqual,
    NotEqual,
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
    Contains,
    /// `!contains`, or `not contains` (other dialects' spellings).
    NotContains,
    Matches,
}

impl Operator {
    fn as_str(self) -> &'static str {
        match self {
            Operator::Equal => "=",
            Operator::DoubleEqual => "==",
            Operator::NotEqual => "!=",
            Operator::Less => "<",
            Operator::LessOrEqual => "<=",
            Operator::Greater => ">",
            Operator::GreaterOrEqual => ">=",
            Operator::Contains => "contains",
            Operator::NotContains => "!contains",
            Operator::Matches => "matches",
        }
    }
}

/// A right-hand side as written. Quoted bodies exclude the quotes; `closed` is false when the
/// text ended before the closing quote.
enum RawValue<'t> {
    Bare(&'t str),
    Quoted { quote: char, body: &'t str, body_start: usize, closed: bool },
}

/// A cursor over the text that reads the token the parser asks for at the current offset. The
/// language is context-sensitive (`contains` is a key or an operator, `a-b` a key or a bare
/// word), so the parser, not the lexer, decides which kind of token comes next.
struct Lexer<'t> {
    text: &'t str,
    bytes: &'t [u8],
    pos: usize,
}

impl<'t> Lexer<'t> {
    fn new(text: &'t str) -> Self {
        Lexer { text, bytes: text.as_bytes(), pos: 0 }
    }

    fn peek(&self) -> Option<u8> {
        self.bytes.get(self.pos).copied()
    }

    fn at_end(&self) -> bool {
        self.pos >= self.bytes.len()
    }

    fn skip_whitespace(&mut self) {
        while self.peek().is_some_and(is_space) {
            self.pos += 1;
        }
    }

    /// Consumes `token` (ASCII punctuation) if the text continues with it.
    fn eat(&mut self, token: &[u8]) -> bool {
        let found = self.bytes.get(self.pos..).is_some_and(|rest| rest.starts_with(token));
        if found {
            self.pos += token.len();
        }
        found
    }

    /// `segment ("." segment)*`; a `.` not followed by a segment is left unread.
    fn key(&mut self) -> Option<&'t str> {
        let start = self.pos;
        if !self.peek().is_some_and(is_segment_start) {
            return None;
        }
        let mut end = start;
        loop {
            end += 1;
            while self.bytes.get(end).copied().is_some_and(is_segment_char) {
                end += 1;
            }
            match (self.bytes.get(end), self.bytes.get(end + 1)) {
                (Some(b'.'), Some(&next)) if is_segment_start(next) => end += 1,
                _ => break,
            }
        }
        self.pos = end;
        self.text.get(start..end)
    }

    fn operator(&mut self) -> Option<Operator> {
        let rest = self.bytes.get(self.pos..)?;
        let (operator, length) = match rest {
            [b'=', b'=', ..] => (Operator::DoubleEqual, 2),
            [b'!', b'c', ..] => (Operator::NotContains, word_operator(rest, 1)?),
            [b'n', b'o', b't', b' ' | b'\t', ..] => {
                let gap = rest[3..].iter().take_while(|b| matches!(b, b' ' | b'\t')).count();
                (Operator::NotContains, word_operator(rest, 3 + gap)?)
            }
            [b'!', b'=', ..] => (Operator::NotEqual, 2),
            [b'<', b'=', ..] => (Operator::LessOrEqual, 2),
            [b'>', b'=', ..] => (Operator::GreaterOrEqual, 2),
            [b'=', ..] => (Operator::Equal, 1),
            [b'<', ..] => (Operator::Less, 1),
            [b'>', ..] => (Operator::Greater, 1),
            [b'c' | b'm', ..] => {
                let operator = match rest {
                    _ if rest.starts_with(b"contains") => Operator::Contains,
                    _ if rest.starts_with(b"matches") => Operator::Matches,
                    _ => return None,
                };
                let length = operator.as_str().len();
                // A word operator must not run on into a longer word (`containsx`).
                if rest.get(length).copied().is_some_and(is_segment_char) {
                    return None;
                }
                (operator, length)
            }
            _ => return None,
        };
        self.pos += length;
        Some(operator)
    }

    fn value(&mut self) -> Option<RawValue<'t>> {
        let start = self.pos;
        let first = self.peek()?;
        if first == b'"' || first == b'\'' {
            let body_start = start + 1;
            let mut end = body_start;
            while let Some(&byte) = self.bytes.get(end) {
                if byte == first {
                    break;
                }
                // `\` takes the next character along (so `\"` does not close the string); the
                // rest of a multi-byte character is never a quote or a backslash.
                end += if byte == b'\\' && first == b'"' && end + 1 < self.bytes.len() { 2 } else { 1 };
            }
            let closed = end < self.bytes.len();
            let body = self.text.get(body_start..end)?;
            self.pos = if closed { end + 1 } else { end };
            return Some(RawValue::Quoted { quote: char::from(first), body, body_start, closed });
        }
        if ends_bare_word(first) {
            return None;
        }
        let length = self.bytes[start..].iter().position(|&byte| ends_bare_word(byte));
        let end = length.map_or(self.bytes.len(), |length| start + length);
        self.pos = end;
        self.text.get(start..end).map(RawValue::Bare)
    }
}

// ---------------------------------------------------------------------------------------------
// Parser

/// What the parser expected where it stopped, one bit each, in the order messages list them.
const KEY: u16 = 1 << 0;
const NOT: u16 = 1 << 1;
const OPEN: u16 = 1 << 2;
const OPERATOR: u16 = 1 << 3;
const VALUE: u16 = 1 << 4;
const AND: u16 = 1 << 5;
const OR: u16 = 1 << 6;
const CLOSE: u16 = 1 << 7;
const DOUBLE_QUOTE: u16 = 1 << 8;
const SINGLE_QUOTE: u16 = 1 << 9;
const END: u16 = 1 << 10;
const EXPECTATIONS: [(u16, &str); 11] = [
    (KEY, "a key such as `outcome` or `context.name`"),
    (NOT, "`!`"),
    (OPEN, "`(`"),
    (OPERATOR, "an operator (=, !=, <, <=, >, >=, contains, !contains, matches)"),
    (VALUE, "a value"),
    (AND, "`&&`"),
    (OR, "`||`"),
    (CLOSE, "`)`"),
    (DOUBLE_QUOTE, "`\"`"),
    (SINGLE_QUOTE, "`'`"),
    (END, "the end of the condition"),
];

/// Why parsing stopped early.
enum Stop {
    /// No token that could come next is there; the parser's expectations say what was wanted.
    Syntax,
    /// Reported as is.
    Fatal(ConditionError),
}

struct Parser<'t> {
    lexer: Lexer<'t>,
    /// The furthest offset at which a token was wanted but not found, and what was wanted there.
    failed_at: usize,
    expected: u16,
    /// The first error found in a syntactically well-formed part, in reading order.
    invalid: Option<ConditionError>,
    depth: usize,
}

impl<'t> Parser<'t> {
    fn new(text: &'t str) -> Self {
        Parser { lexer: Lexer::new(text), failed_at: 0, expected: 0, invalid: None, depth: 0 }
    }

    /// Records that one of `wanted` was not found at `offset`.
    fn missed(&mut self, offset: usize, wanted: u16) {
        if offset > self.failed_at {
            self.failed_at = offset;
            self.expected = wanted;
        } else if offset == self.failed_at {
            self.expected |= wanted;
        }
    }

    /// Keeps the first problem in reading order; a clause's problem is computed only if no
    /// earlier one was found.
    fn invalid(&mut self, error: ConditionError) {
        if self.invalid.is_none() {
            self.invalid = Some(error);
        }
    }

    fn condition(&mut self) -> Result<Expr, Stop> {
        self.lexer.skip_whitespace();
        let expr = self.or_expr()?;
        self.lexer.skip_whitespace();
        if !self.lexer.at_end() {
            self.missed(self.lexer.pos, END);
            return Err(Stop::Syntax);
        }
        Ok(expr)
    }

    fn or_expr(&mut self) -> Result<Expr, Stop> {
        let first = self.and_expr()?;
        let mut rest = Vec::new();
        loop {
            self.lexer.skip_whitespace();
            if !self.lexer.eat(b"||") {
                self.missed(self.lexer.pos, OR);
                break;
            }
            self.lexer.skip_whitespace();
            rest.push(self.and_expr()?);
        }
        Ok(combine(first, rest, Expr::Any))
    }

    fn and_expr(&mut self) -> Result<Expr, Stop> {
        let first = self.unary()?;
        let mut rest = Vec::new();
        loop {
            self.lexer.skip_whitespace();
            if !self.lexer.eat(b"&&") {
                self.missed(self.lexer.pos, AND);
                break;
            }
            self.lexer.skip_whitespace();
            rest.push(self.unary()?);
        }
        Ok(combine(first, rest, Expr::All))
    }

    /// `!`* then a group or a clause; an even number of `!` cancels out.
    fn unary(&mut self) -> Result<Expr, Stop> {
        let mut negated = false;
        while self.lexer.eat(b"!") {
            negated = !negated;
            self.lexer.skip_whitespace();
        }
        self.missed(self.lexer.pos, NOT);
        let operand = match self.lexer.peek() {
            Some(b'(') => self.group()?,
            _ => match self.lexer.key() {
                Some(key) => Expr::Clause(self.clause(key)?),
                None => {
                    self.missed(self.lexer.pos, OPEN | KEY);
                    return Err(Stop::Syntax);
                }
            },
        };
        Ok(match negated {
            false => operand,
            true => Expr::Not(Box::new(operand)),
        })
    }

    fn group(&mut self) -> Result<Expr, Stop> {
        let open = self.lexer.pos;
        if self.depth == MAX_NESTING {
            // check_nesting already refused such texts; kept so recursion is bounded regardless.
            return Err(Stop::Fatal(nesting_error(open)));
        }
        self.lexer.pos += 1;
        let earlier_problem = self.invalid.is_some();
        self.depth += 1;
        self.lexer.skip_whitespace();
        let inner = self.or_expr()?;
        self.depth -= 1;
        self.lexer.skip_whitespace();
        if self.lexer.eat(b")") {
            return Ok(inner);
        }
        self.missed(self.lexer.pos, CLOSE);
        if !self.lexer.at_end() {
            return Err(Stop::Syntax);
        }
        // Unclosed at the end of the text: reported at the `(`, before anything inside the group.
        if !earlier_problem {
            self.invalid = Some(ConditionError::new(open, "unclosed `(` opened here"));
        }
        Ok(inner)
    }

    /// The rest of a clause whose key has just been read.
    fn clause(&mut self, written: &'t str) -> Result<Clause, Stop> {
        let key = match written {
            "outcome" => Key::Outcome,
            "preferred_label" => Key::PreferredLabel,
            other => Key::Context(other.to_string()),
        };
        self.lexer.skip_whitespace();
        let operator_offset = self.lexer.pos;
        let Some(operator) = self.lexer.operator() else {
            self.missed(operator_offset, OPERATOR);
            return Ok(Clause { key, test: Test::Truthy });
        };
        self.lexer.skip_whitespace();
        let value_offset = self.lexer.pos;
        let Some(value) = self.lexer.value() else {
            self.missed(value_offset, VALUE);
            return Err(Stop::Syntax);
        };
        if let RawValue::Quoted { quote, closed: false, .. } = value {
            self.missed(self.lexer.pos, if quote == '"' { DOUBLE_QUOTE } else { SINGLE_QUOTE });
        }
        let mut test = Test::Truthy;
        if self.invalid.is_none() {
            match build_test(&key, operator, operator_offset, &value, value_offset) {
                Ok(built) => test = built,
                Err(error) => self.invalid(error),
            }
        }
        Ok(Clause { key, test })
    }

    /// "expected X, Y or Z after `prev`, found `tok`", from what was wanted where parsing stopped.
    fn syntax_error(&self) -> ConditionError {
        let text = self.lexer.text;
        let offset = self.failed_at;
        let found = token_at(text, offset);
        if found == Some(")") && self.expected & END != 0 {
            return ConditionError::new(offset, "`)` has no matching `(`");
        }
        let wanted: Vec<&str> = EXPECTATIONS
            .iter()
            .filter(|(bit, _)| self.expected & bit != 0)
            .map(|(_, description)| *description)
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
}

/// A single operand stands for itself; only real lists become `Any`/`All`.
fn combine(first: Expr, mut rest: Vec<Expr>, list: fn(Vec<Expr>) -> Expr) -> Expr {
    if rest.is_empty() {
        return first;
    }
    rest.insert(0, first);
    list(rest)
}

/// `at` plus the length of `contains` when `rest[at..]` starts with it as a whole word (not the
/// start of a longer one such as `containsx`).
fn word_operator(rest: &[u8], at: usize) -> Option<usize> {
    let end = at + "contains".len();
    let whole = rest.get(at..end) == Some(b"contains".as_slice())
        && !rest.get(end).copied().is_some_and(is_segment_char);
    whole.then_some(end)
}

// ---------------------------------------------------------------------------------------------
// Clause semantics

fn build_test(
    key: &Key,
    operator: Operator,
    operator_offset: usize,
    value: &RawValue<'_>,
    value_offset: usize,
) -> Result<Test, ConditionError> {
    let text = literal_text(value, value_offset)?;
    let is_outcome = matches!(key, Key::Outcome);
    match operator {
        Operator::Equal | Operator::DoubleEqual | Operator::NotEqual => {
            let negated = operator == Operator::NotEqual;
            Ok(match is_outcome {
                true => Test::Status { status: parse_status(&text, value_offset)?, negated },
                false => Test::Equals { literal: Literal::new(text.into_owned()), negated },
            })
        }
        _ if is_outcome && operator != Operator::Matches => Err(ConditionError::new(
            operator_offset,
            format!("`outcome` cannot be compared with `{}`; use `=`, `!=` or `matches`", operator.as_str()),
        )),
        Operator::Less | Operator::LessOrEqual | Operator::Greater | Operator::GreaterOrEqual => {
            let op = match operator {
                Operator::Less => OrderOp::Less,
                Operator::LessOrEqual => OrderOp::LessOrEqual,
                Operator::Greater => OrderOp::Greater,
                _ => OrderOp::GreaterOrEqual,
            };
            let bound = parse_number(&text).ok_or_else(|| {
                let message =
                    format!("`{}` compares numbers, but `{text}` is not a number", operator.as_str());
                ConditionError::new(value_offset, message)
            })?;
            Ok(Test::Order { op, bound })
        }
        Operator::Contains | Operator::NotContains => Ok(Test::Contains {
            literal: Literal::new(text.into_owned()),
            negated: operator == Operator::NotContains,
        }),
        Operator::Matches => Regex::new(&text).map(Test::Matches).map_err(|error| {
            let message = format!("invalid regex `{text}`: {}", summarize_regex_error(&error));
            ConditionError::new(value_offset, message)
        }),
    }
}

/// The value's text: bare words as written, quoted strings unquoted (and unescaped for `"`).
fn literal_text<'t>(value: &RawValue<'t>, offset: usize) -> Result<Cow<'t, str>, ConditionError> {
    match *value {
        RawValue::Bare(word) => Ok(Cow::Borrowed(word)),
        RawValue::Quoted { quote, closed: false, .. } => {
            Err(ConditionError::new(offset, format!("unclosed `{quote}` opened here")))
        }
        RawValue::Quoted { quote: '"', body, body_start, .. } => unescape(body, body_start),
        RawValue::Quoted { body, .. } => Ok(Cow::Borrowed(body)),
    }
}

/// Resolves `\"`, `\\`, `\n` and `\t`; any other escape is an error at its backslash.
fn unescape(raw: &str, start: usize) -> Result<Cow<'_, str>, ConditionError> {
    if !raw.contains('\\') {
        return Ok(Cow::Borrowed(raw));
    }
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
    Ok(Cow::Owned(text))
}

fn parse_status(text: &str, offset: usize) -> Result<StageStatus, ConditionError> {
    // The usual lower-case spellings without the allocation `from_str` makes to lower-case.
    let known = match text {
        "success" | "succeeded" => Some(StageStatus::Success),
        "partial_success" | "partially_succeeded" => Some(StageStatus::PartialSuccess),
        "retry" => Some(StageStatus::Retry),
        "fail" | "failed" | "failure" => Some(StageStatus::Fail),
        "skipped" | "skip" => Some(StageStatus::Skipped),
        _ => text.parse::<StageStatus>().ok(),
    };
    if let Some(status) = known {
        return Ok(status);
    }
    if text.is_empty() {
        let message = "expected an outcome (success, partial_success, retry, fail, skipped or a custom \
                       outcome), found an empty value";
        return Err(ConditionError::new(offset, message));
    }
    let suggestion = crate::outcome::closest_status_spelling(text)
        .map(|spelling| format!(" (did you mean `{spelling}`?)"))
        .unwrap_or_default();
    let message = format!(
        "unknown outcome `{text}`{suggestion}; expected success, partial_success, retry, fail, skipped or a \
         custom outcome (a lower-case name of letters, digits and _)"
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

// ---------------------------------------------------------------------------------------------
// Tokens quoted in syntax errors

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
