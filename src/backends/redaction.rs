//! Keeps API keys out of everything fabro writes: error messages, events, transcripts, tool
//! output. Every text that came from a provider or a tool passes through [`Secrets::redact`]
//! before it is written anywhere.

use std::sync::Arc;

/// What a secret is replaced with.
pub const REDACTED: &str = "[REDACTED]";

/// Secrets shorter than this are not redacted (they would match ordinary text).
const MIN_SECRET_LEN: usize = 8;

/// The secret values in use (API keys), shared by every part that writes text.
#[derive(Debug, Clone, Default)]
pub struct Secrets(Arc<Vec<String>>);

impl Secrets {
    pub fn new(values: impl IntoIterator<Item = String>) -> Secrets {
        let mut values: Vec<String> = values.into_iter().filter(|v| v.len() >= MIN_SECRET_LEN).collect();
        // Longest first, so a key that contains another is replaced whole.
        values.sort_by_key(|v| std::cmp::Reverse(v.len()));
        values.dedup();
        Secrets(Arc::new(values))
    }

    /// Whether there is no secret to redact.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// `text` with every secret replaced by [`REDACTED`].
    pub fn redact(&self, text: &str) -> String {
        let mut out = text.to_string();
        for secret in self.0.iter() {
            if out.contains(secret.as_str()) {
                out = out.replace(secret.as_str(), REDACTED);
            }
        }
        out
    }

    /// Redacts every string inside a JSON value.
    pub fn redact_json(&self, value: &serde_json::Value) -> serde_json::Value {
        use serde_json::Value;
        if self.0.is_empty() {
            return value.clone();
        }
        match value {
            Value::String(s) => Value::String(self.redact(s)),
            Value::Array(items) => Value::Array(items.iter().map(|v| self.redact_json(v)).collect()),
            Value::Object(map) => {
                Value::Object(map.iter().map(|(k, v)| (self.redact(k), self.redact_json(v))).collect())
            }
            other => other.clone(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_are_replaced_everywhere_and_short_values_ignored() {
        let secrets =
            Secrets::new(["sk-test-123456".to_string(), "sk-test-123456789".to_string(), "abc".into()]);
        assert_eq!(
            secrets.redact("key sk-test-123456789 and sk-test-123456."),
            "key [REDACTED] and [REDACTED]."
        );
        assert_eq!(secrets.redact("abc stays"), "abc stays");
        let json = serde_json::json!({"a": ["x sk-test-123456"], "n": 3});
        assert_eq!(secrets.redact_json(&json), serde_json::json!({"a": ["x [REDACTED]"], "n": 3}));
    }
}
