//! Keeps API keys out of everything fabro writes: error messages, events, transcripts, tool
//! output. Every text that came from a provider or a tool passes through [`Secrets::redact`]
//! before it is written anywhere.
//!
//! Besides each value as it is, its trivial transforms are caught: the value reversed, and its
//! standard base64 (at each of the three byte offsets it can start at inside a longer encoded
//! text, so the encoded value is found within the base64 of a larger text too; one or two
//! characters at each end, which also encode neighbouring bytes, may stay). Not caught: other
//! encodings (hex, URL-safe base64, percent-encoding), a value split, spaced out or with its case
//! changed, and values shorter than 8 characters.

use std::borrow::Cow;
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
        let mut values: Vec<String> = values
            .into_iter()
            .filter(|v| v.len() >= MIN_SECRET_LEN)
            .flat_map(|value| {
                let mut forms = vec![value.chars().rev().collect::<String>()];
                forms.extend(base64_forms(value.as_bytes()));
                forms.push(value);
                forms
            })
            .filter(|v| v.len() >= MIN_SECRET_LEN)
            .collect();
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
        self.redact_cow(text).into_owned()
    }

    /// [`Secrets::redact`] that copies only when there is something to replace.
    pub fn redact_cow<'a>(&self, text: &'a str) -> Cow<'a, str> {
        let mut out = Cow::Borrowed(text);
        for secret in self.0.iter() {
            if out.contains(secret.as_str()) {
                out = Cow::Owned(out.replace(secret.as_str(), REDACTED));
            }
        }
        out
    }

    /// How much of `text`, the start of a text still arriving, can be redacted and written now:
    /// all but a tail where a secret may have begun, and never a cut through a secret it holds.
    pub fn ready_len(&self, text: &str) -> usize {
        let Some(longest) = self.0.first() else { return text.len() };
        let mut cut = text.len().saturating_sub(longest.len() - 1);
        while !text.is_char_boundary(cut) {
            cut -= 1;
        }
        // A secret that begins before the cut ends inside `text` (none is longer than the tail
        // kept): the cut moves to its start, until no secret spans it.
        loop {
            let spanning = self.0.iter().find_map(|secret| {
                // The first match that can still reach past the cut; it spans it if it starts before.
                let from = cut.saturating_sub(secret.len() - 1);
                find(text.as_bytes(), secret.as_bytes(), from).filter(|at| *at < cut)
            });
            match spanning {
                Some(start) => cut = start,
                None => return cut,
            }
        }
    }

    /// `bytes` (any encoding; a secret is matched as its UTF-8 bytes) with every secret replaced.
    pub fn redact_bytes<'a>(&self, bytes: &'a [u8]) -> Cow<'a, [u8]> {
        let mut out = Cow::Borrowed(bytes);
        for secret in self.0.iter() {
            let needle = secret.as_bytes();
            if find(&out, needle, 0).is_none() {
                continue;
            }
            let mut replaced = Vec::with_capacity(out.len());
            let mut from = 0;
            while let Some(at) = find(&out, needle, from) {
                replaced.extend_from_slice(&out[from..at]);
                replaced.extend_from_slice(REDACTED.as_bytes());
                from = at + needle.len();
            }
            replaced.extend_from_slice(&out[from..]);
            out = Cow::Owned(replaced);
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

/// Where `needle` first occurs in `haystack` at or after `from`.
fn find(haystack: &[u8], needle: &[u8], from: usize) -> Option<usize> {
    let first = *needle.first()?;
    let mut at = from;
    while at + needle.len() <= haystack.len() {
        let next = haystack[at..=haystack.len() - needle.len()].iter().position(|b| *b == first)?;
        at += next;
        if haystack[at..at + needle.len()] == *needle {
            return Some(at);
        }
        at += 1;
    }
    None
}

/// The base64 characters that encode only `value`'s bytes when it starts 0, 1 or 2 bytes into a
/// 3-byte group of a longer encoded text: the characters that also encode a neighbour are left
/// out, so each form matches wherever the value lies.
fn base64_forms(value: &[u8]) -> Vec<String> {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    (0..3)
        .map(|offset| {
            let mut bytes = vec![0u8; offset];
            bytes.extend_from_slice(value);
            let mut encoded = String::with_capacity(bytes.len() * 4 / 3 + 4);
            for chunk in bytes.chunks(3) {
                let group =
                    chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
                for i in 0..=chunk.len() {
                    encoded.push(ALPHABET[(group >> (18 - 6 * i) & 63) as usize] as char);
                }
            }
            // The characters that hold bits of the bytes before and after the value.
            let head = [0, 2, 3][offset];
            let tail = usize::from(bytes.len() % 3 != 0);
            encoded.get(head..encoded.len().saturating_sub(tail)).unwrap_or("").to_string()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_still_arriving_is_written_up_to_where_a_secret_may_begin() {
        let secrets = Secrets::new(["abcdefghij".to_string()]);
        let longest = secrets.0[0].len();
        let text = "x".repeat(40);
        assert_eq!(secrets.ready_len(&text), 40 - (longest - 1));
        // A whole secret before the cut stays before it; one across the cut moves it back.
        let whole = format!("abcdefghij{}", "y".repeat(30));
        assert_eq!(secrets.ready_len(&whole), whole.len() - (longest - 1));
        let across = format!("{}abcdefghij{}", "y".repeat(30), "z".repeat(longest - 5));
        assert_eq!(secrets.ready_len(&across), 30);
        assert_eq!(Secrets::default().ready_len("anything"), 8);
        assert_eq!(secrets.ready_len("short"), 0);
    }

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

    #[test]
    fn the_reversed_value_and_its_base64_at_any_offset_are_replaced() {
        let secrets = Secrets::new(["tok-0123456789abcdef".to_string()]);
        assert_eq!(secrets.redact("said fedcba9876543210-kot"), "said [REDACTED]");
        // base64("tok-0123456789abcdef"), and of the same with one and two bytes before it.
        assert_eq!(secrets.redact("dG9rLTAxMjM0NTY3ODlhYmNkZWY="), "[REDACTED]Y=");
        assert!(!secrets.redact("PXRvay0wMTIzNDU2Nzg5YWJjZGVm").contains("WJjZGVm"));
        assert!(!secrets.redact("YT10b2stMDEyMzQ1Njc4OWFiY2RlZg==").contains("NDU2Nzg5"));
        assert_eq!(secrets.redact_bytes(b"\x00tok-0123456789abcdef\xff"), &b"\x00[REDACTED]\xff"[..]);
    }
}
