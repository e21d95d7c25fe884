//! Layer 3, age-based truncation: the older a tool result, the less of it is sent. Results 11 to
//! 20 messages from the end keep 2,000 tokens, 21 to 40 keep 1,000, older ones 500, each with a
//! notice of what was cut. On unless `tool_result_aging=false`.

use super::{cut, ContextSettings};
use crate::chat::ChatMessage;
use crate::usage::CHARS_PER_TOKEN;

/// (oldest age in messages, tokens kept) from the youngest band to the oldest.
const BANDS: [(usize, usize); 3] = [(20, 2000), (40, 1000), (usize::MAX, 500)];
/// Results this young (in messages from the end) are never cut.
const YOUNG: usize = 10;

pub fn apply(messages: &mut [ChatMessage], settings: &ContextSettings) {
    if !settings.tool_result_aging() {
        return;
    }
    let count = messages.len();
    for (index, message) in messages.iter_mut().enumerate() {
        let age = count - index;
        if age <= YOUNG {
            continue;
        }
        let ChatMessage::ToolResults { results } = message else { continue };
        let Some(&(_, kept_tokens)) = BANDS.iter().find(|(oldest, _)| age <= *oldest) else { continue };
        let max = kept_tokens * CHARS_PER_TOKEN;
        for result in results.iter_mut() {
            if let Some(shorter) = cut(&result.content, max, |dropped| {
                format!("\n[… {dropped} more characters: results {age} messages old keep {kept_tokens} tokens; run the tool again if you need them]")
            }) {
                result.content = shorter;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::context::tests::{conversation, results};

    #[test]
    fn older_results_keep_less() {
        // 30 turns of 2 messages: results sit 2, 4, ... 60 messages from the end.
        let turns: Vec<_> =
            (0..30).map(|i| ("read_file", serde_json::json!({"path": i}), "q".repeat(10_000))).collect();
        let mut messages = conversation(&turns);
        apply(&mut messages, &ContextSettings::default());
        let kept: Vec<usize> =
            results(&messages).iter().map(|r| r.chars().take_while(|c| *c == 'q').count()).collect();
        assert_eq!(kept[29], 10_000, "2 messages old");
        assert_eq!(kept[25], 10_000, "10 messages old");
        assert_eq!(kept[24], 8000, "12 messages old");
        assert_eq!(kept[20], 8000, "20 messages old");
        assert_eq!(kept[19], 4000, "22 messages old");
        assert_eq!(kept[10], 4000, "40 messages old");
        assert_eq!(kept[9], 2000, "42 messages old");
        let off = ContextSettings { tool_result_aging: Some(false), ..ContextSettings::default() };
        let mut untouched = conversation(&turns);
        apply(&mut untouched, &off);
        assert!(results(&untouched).iter().all(|r| r.len() == 10_000));
    }
}
