//! Layer 1, the in-turn sliding window: `max_in_turn_tool_pairs=N` keeps the last N tool results
//! in full and replaces older ones by a notice; `max_in_turn_context_tokens=N` replaces the
//! oldest results only while the conversation is over N tokens. The calls stay, so every call id
//! still has its result.

use super::{result_at, result_positions, tokens, ContextSettings};
use crate::chat::ChatMessage;

/// What an omitted result says instead.
pub const OMITTED: &str = "[result omitted: sliding window; re-run the tool if you need it]";

pub fn apply(messages: &mut [ChatMessage], settings: &ContextSettings) {
    let positions = result_positions(messages);
    if let Some(keep) = settings.max_in_turn_tool_pairs {
        let old = positions.len().saturating_sub(keep);
        for &position in &positions[..old] {
            omit(messages, position);
        }
    }
    if let Some(budget) = settings.max_in_turn_context_tokens {
        for &position in &positions {
            if tokens(messages) <= budget {
                break;
            }
            omit(messages, position);
        }
    }
}

fn omit(messages: &mut [ChatMessage], position: (usize, usize)) {
    if let Some(result) = result_at(messages, position) {
        if result.content.len() > OMITTED.len() {
            result.content = OMITTED.to_string();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::context::tests::{conversation, results};

    #[test]
    fn only_the_last_pairs_keep_their_results() {
        let turns: Vec<_> = (0..4)
            .map(|i| ("grep", serde_json::json!({"pattern": i}), format!("match {i} {}", "y".repeat(200))))
            .collect();
        let mut messages = conversation(&turns);
        apply(
            &mut messages,
            &ContextSettings { max_in_turn_tool_pairs: Some(2), ..ContextSettings::default() },
        );
        let results = results(&messages);
        assert_eq!(results[..2], [OMITTED, OMITTED]);
        assert!(results[2].starts_with("match 2") && results[3].starts_with("match 3"));
    }

    #[test]
    fn a_token_budget_trims_the_oldest_results_until_it_fits() {
        let turns: Vec<_> =
            (0..4).map(|i| ("read_file", serde_json::json!({"path": i}), "z".repeat(4000))).collect();
        let mut messages = conversation(&turns);
        // 4 results of 1,000 tokens each: a 2,500-token budget drops the two oldest.
        apply(
            &mut messages,
            &ContextSettings { max_in_turn_context_tokens: Some(2500), ..ContextSettings::default() },
        );
        let results = results(&messages);
        assert_eq!(results.iter().filter(|r| *r == OMITTED).count(), 2);
        assert_eq!(results[3].len(), 4000);
        assert!(tokens(&messages) <= 2500);
    }
}
