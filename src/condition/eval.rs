//! AST -> bool. Runs on every edge selection: no parsing, no regex compilation, no panics,
//! and values are borrowed from the scope unless a number or JSON must be rendered as text.

use std::borrow::Cow;

use serde_json::Value as Json;

use super::{context_name, Clause, ConditionScope, Expr, Key, Literal, OrderOp, Test};
use crate::outcome::StageStatus;

impl Expr {
    pub(super) fn evaluate(&self, scope: &dyn ConditionScope) -> bool {
        match self {
            Expr::Any(items) => items.iter().any(|item| item.evaluate(scope)),
            Expr::All(items) => items.iter().all(|item| item.evaluate(scope)),
            Expr::Not(inner) => !inner.evaluate(scope),
            Expr::Clause(clause) => clause.evaluate(scope),
        }
    }
}

/// What a key resolved to. `Missing` behaves as the empty string.
#[derive(Clone, Copy)]
enum Resolved<'s> {
    Missing,
    Status(StageStatus),
    Text(&'s str),
    Json(&'s Json),
}

impl Key {
    fn resolve<'s>(&self, scope: &'s dyn ConditionScope) -> Resolved<'s> {
        let found = match self {
            Key::Outcome => scope.outcome().map(Resolved::Status),
            Key::PreferredLabel => scope.preferred_label().map(Resolved::Text),
            Key::Context(written) => {
                // `context.X` reads `X`, falling back to a key literally named `context.X`.
                let name = context_name(written);
                scope
                    .context(name)
                    .or_else(|| (name.len() != written.len()).then(|| scope.context(written)).flatten())
                    .map(Resolved::Json)
            }
        };
        found.unwrap_or(Resolved::Missing)
    }
}

impl Clause {
    fn evaluate(&self, scope: &dyn ConditionScope) -> bool {
        let value = self.key.resolve(scope);
        match &self.test {
            Test::Truthy => is_truthy(value),
            Test::Status { status, negated } => {
                matches!(value, Resolved::Status(actual) if actual == *status) != *negated
            }
            Test::Equals { literal, negated } => equals(value, literal) != *negated,
            Test::Order { op, bound } => as_number(value).is_some_and(|number| match op {
                OrderOp::Less => number < *bound,
                OrderOp::LessOrEqual => number <= *bound,
                OrderOp::Greater => number > *bound,
                OrderOp::GreaterOrEqual => number >= *bound,
            }),
            Test::Contains { literal, negated } => {
                let found = match value {
                    Resolved::Json(Json::Array(items)) => {
                        items.iter().any(|item| equals(Resolved::Json(item), literal))
                    }
                    _ => as_text(value).contains(literal.text.as_str()),
                };
                found != *negated
            }
            Test::Matches(regex) => regex.is_match(&as_text(value)),
        }
    }
}

/// Exact, case-sensitive text, except that a JSON number equals a numeric literal by value (so
/// `1` equals `1.0`); strings that look like numbers still compare as text (`"1.10"` is not
/// `"1.1"`). JSON booleans render as `true`/`false`, so they equal those literals.
fn equals(value: Resolved<'_>, literal: &Literal) -> bool {
    match (value, literal.number) {
        (Resolved::Json(Json::Number(number)), Some(expected)) => number.as_f64() == Some(expected),
        _ => as_text(value) == literal.text,
    }
}

fn as_number(value: Resolved<'_>) -> Option<f64> {
    match value {
        Resolved::Json(Json::Number(number)) => number.as_f64(),
        Resolved::Json(Json::String(text)) => super::parse_number(text),
        Resolved::Text(text) => super::parse_number(text),
        _ => None,
    }
}

/// The string a value compares as: strings unquoted, null/missing empty, containers as compact JSON.
fn as_text(value: Resolved<'_>) -> Cow<'_, str> {
    match value {
        Resolved::Missing | Resolved::Json(Json::Null) => Cow::Borrowed(""),
        Resolved::Status(status) => Cow::Borrowed(status.as_str()),
        Resolved::Text(text) => Cow::Borrowed(text),
        Resolved::Json(Json::String(text)) => Cow::Borrowed(text),
        Resolved::Json(Json::Bool(flag)) => Cow::Borrowed(if *flag { "true" } else { "false" }),
        Resolved::Json(other) => Cow::Owned(other.to_string()),
    }
}

/// False for missing, null, false, "", "false", "0", 0 and empty containers.
fn is_truthy(value: Resolved<'_>) -> bool {
    match value {
        Resolved::Missing => false,
        Resolved::Status(_) => true,
        Resolved::Text(text) => !matches!(text, "" | "false" | "0"),
        Resolved::Json(json) => match json {
            Json::Null => false,
            Json::Bool(flag) => *flag,
            Json::Number(number) => number.as_f64().is_some_and(|n| n != 0.0),
            Json::String(text) => !matches!(text.as_str(), "" | "false" | "0"),
            Json::Array(items) => !items.is_empty(),
            Json::Object(fields) => !fields.is_empty(),
        },
    }
}
