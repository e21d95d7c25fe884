//! Human-gate choices read from outgoing edge labels: the accelerator key (`[A] Approve`,
//! `A) Approve`, `A - Approve`, else the first letter) and the label without it. Edge selection
//! also uses [`normalize_label`] to compare preferred labels.

/// One choice of a human gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Choice<'w> {
    /// The accelerator key, uppercase.
    pub key: String,
    /// The label without its accelerator, e.g. `Approve`.
    pub label: &'w str,
    /// The edge's target node id.
    pub target: &'w str,
}

impl<'w> Choice<'w> {
    /// Reads a choice from an edge label; an unlabeled edge is named after its target.
    pub fn from_edge(label: Option<&'w str>, target: &'w str) -> Choice<'w> {
        let text = label.map(str::trim).filter(|l| !l.is_empty()).unwrap_or(target);
        let (key, label) = match split_accelerator(text) {
            Some((key, rest)) => (key.to_string(), rest),
            None => (text.chars().next().map(|c| c.to_uppercase().to_string()).unwrap_or_default(), text),
        };
        Choice { key: key.to_uppercase(), label, target }
    }

    /// True when an answer names this choice by key, label (with or without accelerator) or
    /// target id; case-insensitive except for the target id.
    pub fn matches(&self, answer: &str) -> bool {
        let answer = answer.trim();
        answer == self.target
            || answer.eq_ignore_ascii_case(&self.key)
            || normalize_label(answer) == normalize_label(self.label)
    }
}

/// Splits `[A] Approve`, `A) Approve` and `A - Approve` into key and label.
fn split_accelerator(text: &str) -> Option<(&str, &str)> {
    if let Some(rest) = text.strip_prefix('[') {
        let (key, label) = rest.split_once(']')?;
        return valid_key(key).then(|| (key.trim(), label.trim()));
    }
    if let Some((key, label)) = text.split_once(')') {
        if valid_key(key) {
            return Some((key.trim(), label.trim()));
        }
    }
    let (key, label) = text.split_once(" - ")?;
    valid_key(key).then(|| (key.trim(), label.trim()))
}

/// A key is one or two letters or digits.
fn valid_key(key: &str) -> bool {
    let key = key.trim();
    (1..=2).contains(&key.chars().count()) && key.chars().all(char::is_alphanumeric)
}

/// Lowercase, trimmed, accelerator stripped: how labels are compared when routing.
pub fn normalize_label(label: &str) -> String {
    let label = label.trim();
    let stripped = split_accelerator(label).map_or(label, |(_, rest)| rest);
    stripped.trim().to_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accelerators_in_every_style() {
        for label in ["[A] Approve", "A) Approve", "A - Approve", "Approve"] {
            let choice = Choice::from_edge(Some(label), "deploy");
            assert_eq!((choice.key.as_str(), choice.label), ("A", "Approve"), "{label}");
        }
        let unlabeled = Choice::from_edge(None, "fix");
        assert_eq!((unlabeled.key.as_str(), unlabeled.label), ("F", "fix"));
    }

    #[test]
    fn answers_match_key_label_or_target() {
        let choice = Choice::from_edge(Some("[R] Request changes"), "revise");
        for answer in ["R", "r", "Request changes", "request CHANGES", "[R] Request changes", "revise"] {
            assert!(choice.matches(answer), "{answer}");
        }
        assert!(!choice.matches("Approve"));
        assert_eq!(normalize_label("  [A] Approve "), "approve");
    }
}
