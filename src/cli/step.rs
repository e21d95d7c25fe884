//! `--step`: after every stage, the terminal shows what it did and where the run goes next, and
//! asks: Enter goes on, `q` pauses the run here, any other text is a note for the next LLM stage.

use std::sync::Arc;

use fabro::engine::step::{StageReview, StepDecision, StepReviewer};
use fabro::interview::console::Console;

/// Asks on the terminal, through the same console that answers gates.
pub struct TerminalStepper(pub Arc<Console>);

#[async_trait::async_trait]
impl StepReviewer for TerminalStepper {
    async fn review(&self, stage: &StageReview<'_>) -> StepDecision {
        let mut text = format!("── step: `{}` (visit {}) ended {}", stage.node_id, stage.visit, stage.status);
        if let Some(reason) = stage.failure_reason {
            text.push_str(&format!(" ({reason})"));
        }
        text.push('\n');
        if !stage.changed_keys.is_empty() {
            text.push_str(&format!("   set: {}\n", stage.changed_keys.join(", ")));
        }
        text.push_str(&format!("   next: {}\n", stage.next_node.unwrap_or("(the run ends)")));
        text.push_str(
            "   [Enter] go on · q: pause here · any other text: a note for the next LLM stage\nstep> ",
        );
        match self.0.ask_line(&text).await {
            None => StepDecision::Stop,
            Some(line) => decide(&line),
        }
    }
}

/// What a typed line means.
fn decide(line: &str) -> StepDecision {
    match line.trim() {
        "" => StepDecision::Continue,
        "q" | "Q" | "quit" => StepDecision::Stop,
        note => StepDecision::Note(note.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn enter_goes_on_q_stops_and_text_is_a_note() {
        assert_eq!(decide(""), StepDecision::Continue);
        assert_eq!(decide("  "), StepDecision::Continue);
        assert_eq!(decide("q"), StepDecision::Stop);
        assert_eq!(decide(" Use the v2 API "), StepDecision::Note("Use the v2 API".into()));
    }
}
