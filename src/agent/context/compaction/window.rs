//! `compaction_mode=window`: the oldest turns are dropped until the conversation is under the
//! token budget, with no model call and no summary. The stage's prompt and earlier compaction
//! blocks are pinned: they are never dropped. A turn is an assistant message with the results of
//! its tool calls, so dropping one keeps every remaining call id paired with its result.

use crate::chat::ChatMessage;

/// Drops the oldest unpinned messages from `messages` (whole turns) while the estimate of
/// `fixed_tokens` plus the messages is over `budget` tokens or more than `max_turns` turns are left,
/// always keeping the last `keep` turns. `pinned` says which messages stay. Returns the number of
/// assistant turns dropped and which of the original messages went.
pub fn drop_oldest(
    messages: &mut Vec<ChatMessage>,
    fixed_tokens: u64,
    budget: u64,
    max_turns: Option<usize>,
    keep: usize,
    pinned: impl Fn(usize, &ChatMessage) -> bool,
) -> (usize, Vec<bool>) {
    // Units that may go, oldest first: a user message, or an assistant message with its results.
    let mut units: Vec<(usize, usize)> = Vec::new();
    let mut i = 0;
    while i < messages.len() {
        let end = match messages.get(i + 1) {
            Some(ChatMessage::ToolResults { .. }) if matches!(messages[i], ChatMessage::Assistant { .. }) => {
                i + 2
            }
            _ => i + 1,
        };
        if !pinned(i, &messages[i]) {
            units.push((i, end));
        }
        i = end;
    }
    let assistant = |(start, _): &(usize, usize)| matches!(messages[*start], ChatMessage::Assistant { .. });
    let total_turns = units.iter().filter(|u| assistant(u)).count();
    // The last `keep` turns (and anything after the first of them) stay.
    let protected_from =
        units.iter().filter(|u| assistant(u)).nth(total_turns.saturating_sub(keep.max(1))).map(|u| u.0);
    let mut tokens = fixed_tokens + super::super::tokens(messages);
    let mut turns = total_turns;
    let mut dropped = vec![false; messages.len()];
    let mut dropped_turns = 0;
    for unit in &units {
        let over_budget = tokens > budget;
        let over_turns = max_turns.is_some_and(|max| turns > max);
        if !(over_budget || over_turns) || protected_from.is_some_and(|from| unit.0 >= from) {
            break;
        }
        let unit_tokens = super::super::tokens(&messages[unit.0..unit.1]);
        tokens = tokens.saturating_sub(unit_tokens);
        if assistant(unit) {
            turns -= 1;
            dropped_turns += 1;
        }
        dropped[unit.0..unit.1].iter_mut().for_each(|d| *d = true);
    }
    let mut index = 0;
    messages.retain(|_| {
        index += 1;
        !dropped[index - 1]
    });
    (dropped_turns, dropped)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::agent::context::tests::conversation;

    #[test]
    fn the_oldest_turns_go_until_the_budget_holds_and_pins_stay() {
        let turns: Vec<_> = (0..6)
            .map(|i| ("read_file", serde_json::json!({"path": format!("f{i}")}), "x".repeat(4000)))
            .collect();
        let mut messages = conversation(&turns);
        let before = messages.len();
        // Each turn is about 1,000 tokens; a 3,500 budget keeps 3 of them with the prompt.
        let (dropped, _) = drop_oldest(&mut messages, 0, 3500, None, 1, |i, _| i == 0);
        assert_eq!(dropped, 3);
        assert_eq!(messages.len(), before - 6);
        assert_eq!(messages[0], ChatMessage::user("Do the task"));
        assert!(
            matches!(&messages[1], ChatMessage::Assistant { tool_calls, .. } if tool_calls[0].id == "c3")
        );
        // The kept tail is never dropped, whatever the budget.
        let mut messages = conversation(&turns);
        assert_eq!(drop_oldest(&mut messages, 0, 0, None, 2, |i, _| i == 0).0, 4);
        // A turn limit alone drops down to it.
        let mut messages = conversation(&turns);
        assert_eq!(drop_oldest(&mut messages, 0, u64::MAX, Some(4), 1, |i, _| i == 0).0, 2);
    }
}
