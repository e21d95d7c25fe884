//! What fabro knows about models by name: which provider serves them, their price per million
//! tokens and their context window. Lookups take the longest matching prefix, so
//! `claude-sonnet-4-5-20250929` finds `claude-sonnet-4-5`. The config file can add or override
//! prices and context windows (see [`crate::backends::config`]).

use crate::usage::Usage;

/// US dollars per million tokens.
#[derive(Debug, Clone, Copy, PartialEq, serde::Deserialize)]
pub struct Price {
    pub input_per_mtok: f64,
    pub output_per_mtok: f64,
}

/// The estimated cost of `usage` when its small-model share (if any) is priced at `small` and the
/// rest at `main`; `None` when a price it needs is unknown.
pub fn cost_of(usage: &Usage, main: Option<Price>, small: Option<Price>) -> Option<f64> {
    let Some(share) = usage.small_model.filter(|s| s.input_tokens + s.output_tokens > 0) else {
        return main.map(|price| price.cost(usage));
    };
    let own = Usage::new(
        usage.input_tokens.saturating_sub(share.input_tokens),
        usage.output_tokens.saturating_sub(share.output_tokens),
    );
    let own_cost = if own == Usage::default() { Some(0.0) } else { main.map(|price| price.cost(&own)) };
    Some(own_cost? + small?.cost(&Usage::new(share.input_tokens, share.output_tokens)))
}

impl Price {
    /// The estimated cost of `usage` in US dollars.
    pub fn cost(&self, usage: &Usage) -> f64 {
        (usage.input_tokens as f64 * self.input_per_mtok + usage.output_tokens as f64 * self.output_per_mtok)
            / 1_000_000.0
    }
}

/// Context window used for models fabro does not know (override with `context_window=`).
pub const DEFAULT_CONTEXT_WINDOW: u64 = 128_000;

/// (prefix, input $/Mtok, output $/Mtok, context window in tokens).
const KNOWN: &[(&str, f64, f64, u64)] = &[
    ("claude-opus-4-6", 5.0, 25.0, 200_000),
    ("claude-opus-4-5", 5.0, 25.0, 200_000),
    ("claude-opus-4", 15.0, 75.0, 200_000),
    ("claude-sonnet-4", 3.0, 15.0, 200_000),
    ("claude-3-7-sonnet", 3.0, 15.0, 200_000),
    ("claude-haiku-4", 1.0, 5.0, 200_000),
    ("claude-3-5-haiku", 0.8, 4.0, 200_000),
    ("claude", 3.0, 15.0, 200_000),
    ("gpt-5.2", 1.75, 14.0, 400_000),
    ("gpt-5-mini", 0.25, 2.0, 400_000),
    ("gpt-5-nano", 0.05, 0.4, 400_000),
    ("gpt-5", 1.25, 10.0, 400_000),
    ("gpt-4.1-mini", 0.4, 1.6, 1_047_576),
    ("gpt-4.1-nano", 0.1, 0.4, 1_047_576),
    ("gpt-4.1", 2.0, 8.0, 1_047_576),
    ("gpt-4o-mini", 0.15, 0.6, 128_000),
    ("gpt-4o", 2.5, 10.0, 128_000),
    ("o4-mini", 1.1, 4.4, 200_000),
    ("o3-mini", 1.1, 4.4, 200_000),
    ("o3", 2.0, 8.0, 200_000),
    ("gemini-2.5-pro", 1.25, 10.0, 1_048_576),
    ("gemini-2.5-flash", 0.3, 2.5, 1_048_576),
    ("gemini", 1.25, 10.0, 1_048_576),
];

fn known(model: &str) -> Option<&'static (&'static str, f64, f64, u64)> {
    let model = model.to_ascii_lowercase();
    // Names may carry a vendor path (`openai/gpt-4o`): look at the last part.
    let name = model.rsplit('/').next().unwrap_or(&model);
    KNOWN.iter().filter(|(prefix, ..)| name.starts_with(prefix)).max_by_key(|(prefix, ..)| prefix.len())
}

/// The built-in price of a model, if fabro knows it.
pub fn builtin_price(model: &str) -> Option<Price> {
    known(model).map(|&(_, input, output, _)| Price { input_per_mtok: input, output_per_mtok: output })
}

/// The built-in context window of a model, if fabro knows it.
pub fn builtin_context_window(model: &str) -> Option<u64> {
    known(model).map(|&(.., window)| window)
}

/// The provider that serves a model, judged by its name: `anthropic` for `claude*`, `openai`
/// for `gpt*`/`o1*`/`o3*`/`o4*`/`chatgpt*`/`codex*`, `gemini` for `gemini*`.
pub fn infer_provider(model: &str) -> Option<&'static str> {
    let model = model.to_ascii_lowercase();
    if model.starts_with("claude") {
        Some("anthropic")
    } else if ["gpt", "o1", "o3", "o4", "chatgpt", "codex"].iter().any(|p| model.starts_with(p)) {
        Some("openai")
    } else if model.starts_with("gemini") {
        Some("gemini")
    } else {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn longest_prefix_wins() {
        assert_eq!(builtin_price("claude-opus-4-6").unwrap().input_per_mtok, 5.0);
        assert_eq!(builtin_price("claude-opus-4-1-20250805").unwrap().input_per_mtok, 15.0);
        assert_eq!(builtin_price("gpt-5-mini-2025").unwrap().output_per_mtok, 2.0);
        assert_eq!(builtin_context_window("openai/gpt-4o"), Some(128_000));
        assert_eq!(builtin_price("llama3.1:8b"), None);
    }

    #[test]
    fn costs_are_per_million_tokens() {
        let price = Price { input_per_mtok: 3.0, output_per_mtok: 15.0 };
        let cost = price.cost(&Usage::new(1_000_000, 100_000));
        assert!((cost - 4.5).abs() < 1e-9);
    }

    #[test]
    fn providers_follow_model_names() {
        assert_eq!(infer_provider("claude-haiku-4-5"), Some("anthropic"));
        assert_eq!(infer_provider("gpt-5.2"), Some("openai"));
        assert_eq!(infer_provider("o3-mini"), Some("openai"));
        assert_eq!(infer_provider("gemini-2.5-pro"), Some("gemini"));
        assert_eq!(infer_provider("qwen2.5-coder"), None);
    }
}
