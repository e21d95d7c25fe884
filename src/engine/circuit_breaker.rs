//! The circuit breaker: every failed stage gets a signature (its node, its failure class and its
//! reason with the details that vary between attempts masked), and the same `deterministic` or
//! `structural` signature reaching the graph's `failure_signature_limit` (default 3) ends the run.
//! The counts live in the run's context, so a success in between does not reset them and a
//! resume or a `loop_restart` carries them on: a fix loop that keeps failing the same way stops.

use serde_json::{json, Map, Value};

use crate::context::Context;
use crate::outcome::FailureClass;

/// Where the counts are kept: `{signature: {"count": n, "visits": [visit, ...]}}`.
pub(super) const SIGNATURES_KEY: &str = "internal.failure_signatures";
/// How often the same signature may come back unless `failure_signature_limit` says.
pub const DEFAULT_LIMIT: u64 = 3;
/// A signature's message is cut to this many characters.
const MESSAGE_CHARS: usize = 240;
/// The most signatures the context keeps; past it a new one takes the place of one seen once.
const KEPT_SIGNATURES: usize = 200;
/// The visits a signature lists (the latest).
const KEPT_VISITS: usize = 10;

/// `node|class|message`, the message lower-cased, hexadecimal words (7 or more hex digits, such
/// as a commit or an address) read `<hex>`, every other run of digits `<n>`, white space
/// collapsed, cut to 240 characters.
pub fn signature(node_id: &str, class: FailureClass, reason: &str) -> String {
    format!("{node_id}|{}|{}", class.as_str(), normalize(reason))
}

fn normalize(reason: &str) -> String {
    let lower = reason.trim().to_lowercase();
    let mut out = String::with_capacity(lower.len());
    let mut chars = lower.chars().peekable();
    let mut previous: Option<char> = None;
    while let Some(c) = chars.next() {
        if c.is_ascii_hexdigit() && !previous.is_some_and(is_word_char) {
            // A word made of hex digits: `<hex>` when long enough, `<n>` for its digits otherwise.
            let mut word = String::from(c);
            while let Some(&next) = chars.peek().filter(|next| next.is_ascii_hexdigit()) {
                word.push(next);
                chars.next();
            }
            let whole_word = !chars.peek().copied().is_some_and(is_word_char);
            if whole_word && word.len() >= 7 && word.chars().any(|c| c.is_ascii_digit()) {
                out.push_str("<hex>");
            } else {
                mask_digits(&word, &mut out);
            }
            previous = word.chars().last();
            continue;
        }
        if c.is_whitespace() {
            if !out.ends_with(' ') {
                out.push(' ');
            }
        } else if c.is_ascii_digit() {
            if !previous.is_some_and(|p| p.is_ascii_digit()) {
                out.push_str("<n>");
            }
        } else {
            out.push(c);
        }
        previous = Some(c);
    }
    match out.char_indices().nth(MESSAGE_CHARS) {
        Some((end, _)) => out[..end].trim_end().to_string(),
        None => out,
    }
}

fn is_word_char(c: char) -> bool {
    c.is_alphanumeric() || c == '_'
}

/// `word` with each run of digits as `<n>`.
fn mask_digits(word: &str, out: &mut String) {
    let mut in_digits = false;
    for c in word.chars() {
        if c.is_ascii_digit() {
            if !in_digits {
                out.push_str("<n>");
            }
            in_digits = true;
        } else {
            out.push(c);
            in_digits = false;
        }
    }
}

/// A signature that reached its limit: what ends the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct Tripped {
    pub signature: String,
    pub count: u64,
    pub limit: u64,
    /// The visits of the node that failed this way (the latest ten).
    pub visits: Vec<u64>,
}

impl Tripped {
    pub fn reason(&self, node_id: &str) -> String {
        let visits = self.visits.iter().map(u64::to_string).collect::<Vec<_>>().join(", ");
        format!(
            "circuit breaker: stage `{node_id}` failed the same way {} times (failure_signature_limit={}), at visits \
             {visits}: `{}`; the run stops rather than repeat it (raise failure_signature_limit, or 0 to turn \
             the breaker off)",
            self.count, self.limit, self.signature
        )
    }
}

/// Counts one failure of visit `visit` with `signature` in `context`; the trip when the class is
/// one the breaker watches (`deterministic`, `structural`) and the count reached `limit` (0: off).
pub(super) fn count(
    context: &mut Context,
    signature: &str,
    class: FailureClass,
    visit: u32,
    limit: u64,
) -> Option<Tripped> {
    if limit == 0 || !matches!(class, FailureClass::Deterministic | FailureClass::Structural) {
        return None;
    }
    let mut counts: Map<String, Value> = match context.get(SIGNATURES_KEY) {
        Some(Value::Object(counts)) => counts.clone(),
        _ => Map::new(),
    };
    if !counts.contains_key(signature) && counts.len() >= KEPT_SIGNATURES {
        let seen_once = counts.iter().find(|(_, entry)| entry["count"].as_u64() == Some(1));
        let evicted = seen_once.or_else(|| counts.iter().next()).map(|(key, _)| key.clone());
        if let Some(key) = evicted {
            counts.remove(&key);
        }
    }
    let entry = counts.entry(signature.to_string()).or_insert_with(|| json!({"count": 0, "visits": []}));
    let count = entry["count"].as_u64().unwrap_or(0) + 1;
    let mut visits: Vec<u64> = entry["visits"]
        .as_array()
        .map(|visits| visits.iter().filter_map(Value::as_u64).collect())
        .unwrap_or_default();
    visits.push(u64::from(visit));
    if visits.len() > KEPT_VISITS {
        visits.drain(..visits.len() - KEPT_VISITS);
    }
    *entry = json!({"count": count, "visits": visits});
    context.set(SIGNATURES_KEY, Value::Object(counts));
    (count >= limit).then(|| Tripped { signature: signature.to_string(), count, limit, visits })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn signatures_mask_what_varies_between_attempts() {
        assert_eq!(
            signature("verify", FailureClass::Deterministic, "  Test  FAILED at line 42:\n  assert x == 7 "),
            "verify|deterministic|test failed at line <n>: assert x == <n>"
        );
        assert_eq!(
            normalize("commit 3f9a2b7c0d1e is bad; 0xdeadbeef99; tmp_12345 abc1 cafebabe"),
            "commit <hex> is bad; <n>xdeadbeef<n>; tmp_<n> abc<n> cafebabe"
        );
        assert_eq!(normalize("exit code 4"), normalize("exit code 17"));
        assert_eq!(normalize("run 1a2b3c4d5e6f7a8b"), "run <hex>");
    }

    #[test]
    fn signatures_are_cut_to_240_characters_on_a_character_boundary() {
        let long = "é".repeat(300);
        let normalized = normalize(&long);
        assert_eq!(normalized.chars().count(), MESSAGE_CHARS);
    }

    #[test]
    fn the_third_deterministic_failure_trips_and_others_never_count() {
        let mut context = Context::new();
        let sig = signature("fix", FailureClass::Deterministic, "boom");
        assert_eq!(count(&mut context, &sig, FailureClass::Deterministic, 1, 3), None);
        assert_eq!(count(&mut context, "other", FailureClass::TransientInfra, 2, 3), None);
        assert_eq!(count(&mut context, &sig, FailureClass::Deterministic, 3, 3), None);
        let tripped = count(&mut context, &sig, FailureClass::Deterministic, 5, 3).expect("trips");
        assert_eq!((tripped.count, tripped.visits.as_slice()), (3, &[1, 3, 5][..]));
        assert!(tripped.reason("fix").contains("`fix|deterministic|boom`"), "{}", tripped.reason("fix"));
        assert_eq!(
            count(&mut Context::new(), &sig, FailureClass::Structural, 1, 1).map(|t| t.count),
            Some(1)
        );
        assert_eq!(count(&mut Context::new(), &sig, FailureClass::Deterministic, 1, 0), None);
    }

    #[test]
    fn the_counts_stay_bounded() {
        let mut context = Context::new();
        for n in 0..(KEPT_SIGNATURES + 50) {
            count(&mut context, &format!("s{n}"), FailureClass::Deterministic, 1, 3);
        }
        let kept = context.get(SIGNATURES_KEY).and_then(Value::as_object).map(Map::len);
        assert_eq!(kept, Some(KEPT_SIGNATURES));
    }
}
