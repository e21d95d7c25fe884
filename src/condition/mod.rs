//! Edge conditions: the small boolean language of an edge's `condition` attribute,
//! e.g. `outcome=success && context.tests.passed` or `context.branch matches "^feat/"`.
//!
//! A condition is parsed exactly once, when the graph is loaded, into an AST held by
//! [`Condition`]. Everything that can be wrong with it (syntax, unknown outcome names,
//! invalid regexes, non-numeric bounds) is reported then, with a byte offset. Evaluation
//! only walks that AST against a [`ConditionScope`]: it never parses, never compiles a
//! regex and never panics.
//!
//! The language is small enough that it is parsed by a small hand-written lexer and
//! recursive-descent parser (`parser.rs`, whose doc comment gives the grammar in EBNF): clauses
//! `key OP value` or a bare `key` (truthiness), combined with `!`, `&&`, `||` and parentheses, in
//! that order of precedence. Operators: `=` (also `==`), `!=`, `<`, `<=`, `>`, `>=`, `contains`,
//! `!contains` (also `not contains`), `matches`.

mod eval;
mod parser;
mod scope;
#[cfg(test)]
mod tests;

use std::fmt;

use regex::Regex;

use crate::outcome::StageStatus;

pub use scope::Scope;

/// A parsed edge condition: the AST plus the text it came from.
#[derive(Debug, Clone)]
pub struct Condition {
    text: String,
    expr: Expr,
}

impl Condition {
    /// Parses `text`. Empty or all-whitespace text is NOT accepted here (callers treat an
    /// empty condition as "no condition").
    pub fn parse(text: &str) -> Result<Condition, ConditionError> {
        let expr = parser::parse(text)?;
        Ok(Condition { text: text.to_string(), expr })
    }

    /// Evaluates the condition against the run state in `scope`. Never parses.
    pub fn evaluate(&self, scope: &dyn ConditionScope) -> bool {
        self.expr.evaluate(scope)
    }

    /// The text exactly as given to [`Condition::parse`].
    pub fn text(&self) -> &str {
        &self.text
    }

    /// How the condition parses, in words, one clause a line, indented under `all of` / `any of`
    /// / `not` (for an editor's hover).
    pub fn explain(&self) -> String {
        let mut out = String::new();
        self.expr.explain(0, &mut out);
        out
    }

    /// Context keys the condition reads (without the `context.` prefix), in order of first
    /// appearance, each once. Lint rules use this to check keys are ever written.
    pub fn context_keys(&self) -> Vec<&str> {
        let mut keys = Vec::new();
        self.expr.visit_clauses(&mut |clause| {
            if let Key::Context(written) = &clause.key {
                let name = context_name(written);
                if !keys.contains(&name) {
                    keys.push(name);
                }
            }
        });
        keys
    }

    /// Keys written without the `context.` prefix that are not `outcome` or `preferred_label`,
    /// each once: `outcom=success` reads a context key named `outcom`, which lint rules check for
    /// near misses.
    pub fn bare_context_keys(&self) -> Vec<&str> {
        let mut keys = Vec::new();
        self.expr.visit_clauses(&mut |clause| {
            if let Key::Context(written) = &clause.key {
                if !written.starts_with("context.") && !keys.contains(&written.as_str()) {
                    keys.push(written.as_str());
                }
            }
        });
        keys
    }

    /// True when any clause reads `outcome`, i.e. the edge depends on how the stage ended.
    pub fn tests_outcome(&self) -> bool {
        let mut found = false;
        self.expr.visit_clauses(&mut |clause| {
            found |= matches!(clause.key, Key::Outcome);
        });
        found
    }

    /// Statuses named in `outcome = ...` clauses (not `!=`), in order, each once, regardless
    /// of any surrounding `!`. Lint rules compare them with what a stage can produce.
    pub fn tested_outcomes(&self) -> Vec<StageStatus> {
        let mut statuses = Vec::new();
        self.expr.visit_clauses(&mut |clause| {
            if let Test::Status { status, negated: false } = clause.test {
                if !statuses.contains(&status) {
                    statuses.push(status);
                }
            }
        });
        statuses
    }
}

/// Two conditions are equal when their texts are: the AST is a pure function of the text.
impl PartialEq for Condition {
    fn eq(&self, other: &Self) -> bool {
        self.text == other.text
    }
}

impl Eq for Condition {}

impl fmt::Display for Condition {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

/// What the evaluator reads. The engine implements this over its run state.
pub trait ConditionScope {
    fn outcome(&self) -> Option<StageStatus>;
    fn preferred_label(&self) -> Option<&str>;
    /// Looks up a context key exactly as written after stripping `context.`.
    fn context(&self, key: &str) -> Option<&serde_json::Value>;
}

/// Why a condition text was rejected, and where.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message}")]
pub struct ConditionError {
    /// Byte offset inside the condition text where the problem is.
    pub offset: usize,
    /// Plain words, never parser internals; says what was expected and what was found.
    pub message: String,
}

impl ConditionError {
    fn new(offset: usize, message: impl Into<String>) -> Self {
        ConditionError { offset, message: message.into() }
    }
}

/// Boolean structure. `!` chains are folded at parse time, so `Not` never nests directly.
#[derive(Debug, Clone)]
enum Expr {
    Any(Vec<Expr>),
    All(Vec<Expr>),
    Not(Box<Expr>),
    Clause(Clause),
}

impl Expr {
    fn explain(&self, depth: usize, out: &mut String) {
        let indent = "  ".repeat(depth);
        match self {
            Expr::Any(items) | Expr::All(items) => {
                let what = if matches!(self, Expr::Any(_)) { "any of (||)" } else { "all of (&&)" };
                out.push_str(&format!("{indent}{what}:\n"));
                items.iter().for_each(|item| item.explain(depth + 1, out));
            }
            Expr::Not(inner) => {
                out.push_str(&format!("{indent}not (!):\n"));
                inner.explain(depth + 1, out);
            }
            Expr::Clause(clause) => {
                let key = match &clause.key {
                    Key::Outcome => "the stage's outcome".to_string(),
                    Key::PreferredLabel => "the stage's preferred label".to_string(),
                    Key::Context(written) => format!("context key `{}`", context_name(written)),
                };
                let not = |negated: bool| if negated { " not" } else { "" };
                let test = match &clause.test {
                    Test::Truthy => "is set and truthy".to_string(),
                    Test::Status { status, negated } => format!("is{} {}", not(*negated), status.as_str()),
                    Test::Equals { literal, negated } => format!("is{} `{}`", not(*negated), literal.text),
                    Test::Order { op, bound } => {
                        let op = match op {
                            OrderOp::Less => "<",
                            OrderOp::LessOrEqual => "<=",
                            OrderOp::Greater => ">",
                            OrderOp::GreaterOrEqual => ">=",
                        };
                        format!("is a number {op} {bound}")
                    }
                    Test::Contains { literal, negated } => {
                        format!("does{} contain `{}`", not(*negated), literal.text)
                    }
                    Test::Matches(regex) => format!("matches the regular expression `{}`", regex.as_str()),
                };
                out.push_str(&format!("{indent}{key} {test}\n"));
            }
        }
    }

    fn visit_clauses<'a>(&'a self, visit: &mut dyn FnMut(&'a Clause)) {
        match self {
            Expr::Any(items) | Expr::All(items) => items.iter().for_each(|item| item.visit_clauses(visit)),
            Expr::Not(inner) => inner.visit_clauses(visit),
            Expr::Clause(clause) => visit(clause),
        }
    }
}

#[derive(Debug, Clone)]
struct Clause {
    key: Key,
    test: Test,
}

#[derive(Debug, Clone)]
enum Key {
    Outcome,
    PreferredLabel,
    /// A context key as written: `context.X` or a plain dotted `X`.
    Context(String),
}

/// The context key looked up for `written`: `context.X` reads `X`.
fn context_name(written: &str) -> &str {
    written.strip_prefix("context.").unwrap_or(written)
}

#[derive(Debug, Clone)]
enum Test {
    /// Bare key.
    Truthy,
    /// `outcome = status` / `outcome != status`, compared as statuses so spellings don't matter.
    Status {
        status: StageStatus,
        negated: bool,
    },
    Equals {
        literal: Literal,
        negated: bool,
    },
    Order {
        op: OrderOp,
        bound: f64,
    },
    /// `contains` (`negated`: `!contains` / `not contains`).
    Contains {
        literal: Literal,
        negated: bool,
    },
    Matches(Regex),
}

#[derive(Debug, Clone, Copy)]
enum OrderOp {
    Less,
    LessOrEqual,
    Greater,
    GreaterOrEqual,
}

/// A right-hand side, with its number pre-parsed so evaluation never parses the literal.
#[derive(Debug, Clone)]
struct Literal {
    text: String,
    number: Option<f64>,
}

impl Literal {
    fn new(text: String) -> Self {
        let number = parse_number(&text);
        Literal { text, number }
    }
}

/// Finite numbers only: `inf` and `NaN` stay text, so they compare as strings.
fn parse_number(text: &str) -> Option<f64> {
    text.parse::<f64>().ok().filter(|number| number.is_finite())
}
