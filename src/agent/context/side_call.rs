//! Sizing a request to the window of the model it goes to: the stage's own calls ask for no more
//! output than the window leaves, and the side calls of an agent stage (compaction summaries,
//! task completion records, memory extraction) send no more input than fits, cutting the middle
//! of what they would quote (the instructions at the start and the latest work at the end stay).

use super::calibration::Calibration;

/// The fewest output tokens a request asks for, however full the window.
pub const MIN_OUTPUT_TOKENS: u64 = 64;

/// What is kept free of the window for the estimate's error: a twentieth, at least 64 tokens.
/// A count calibrated on the last request misjudges what was added since (llama-cpp-python's
/// function-calling template drops tool results and HTML-escapes the arguments of tool calls: a
/// turn counted 36 tokens came to 75), so the margin is a turn's worth on a small window.
fn margin(window: u64) -> u64 {
    (window / 20).max(64)
}

/// The output tokens a request of `estimate` tokens may ask for: `max_output_tokens`, but never
/// more than the window leaves (less the margin), and at least [`MIN_OUTPUT_TOKENS`].
pub fn output_budget(max_output_tokens: u32, window: u64, estimate: u64) -> u32 {
    let left = window.saturating_sub(estimate + margin(window)).max(MIN_OUTPUT_TOKENS);
    u32::try_from(left).unwrap_or(u32::MAX).min(max_output_tokens)
}

/// Whether a request of `estimate` tokens leaves the margin and [`MIN_OUTPUT_TOKENS`] of
/// `window` free.
pub fn fits(window: u64, estimate: u64) -> bool {
    room(window, 0) >= estimate
}

/// The tokens a request may still add to `estimate` and fit `window` (see [`fits`]).
pub fn room(window: u64, estimate: u64) -> u64 {
    window.saturating_sub(estimate + margin(window) + MIN_OUTPUT_TOKENS)
}

/// The window of the model a side call goes to, and how its tokens are counted.
#[derive(Debug, Clone, Copy)]
pub struct SideCall {
    pub window: u64,
    pub calibration: Calibration,
}

impl SideCall {
    /// `question` and the output tokens to ask for, sized to the window: the output at most
    /// `max_output_tokens` and a quarter of the window; the question cut in its middle to what is
    /// left after the system prompt, the output and the margin.
    pub fn fit(&self, system: &str, question: String, max_output_tokens: u32) -> (String, u32) {
        let output = u64::from(max_output_tokens).min(self.window / 4).max(MIN_OUTPUT_TOKENS);
        let input = self
            .window
            .saturating_sub(output + margin(self.window) + self.calibration.tokens(system.chars().count()));
        let max_chars = (input as f64 * self.calibration.chars_per_token()) as usize;
        let question = crate::agent::tools::cap_middle(&question, max_chars.max(200));
        (question, u32::try_from(output).unwrap_or(u32::MAX))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_small_window_gets_a_question_and_an_answer_that_fit() {
        let side = SideCall { window: 1280, calibration: Calibration::default() };
        let question = format!("Summarize.\n{}\nThe end.", "x".repeat(20_000));
        let (fitted, output) = side.fit("You summarize.", question, 4096);
        assert_eq!(output, 320);
        let tokens = side.calibration.tokens(fitted.chars().count() + "You summarize.".len());
        assert!(tokens + u64::from(output) <= 1280, "{tokens} + {output}");
        assert!(fitted.starts_with("Summarize.") && fitted.ends_with("The end."));
        // A large window leaves the question whole.
        let side = SideCall { window: 200_000, calibration: Calibration::default() };
        let (whole, output) = side.fit("s", "q".repeat(10_000), 4096);
        assert_eq!((whole.len(), output), (10_000, 4096));
    }

    #[test]
    fn the_output_never_asks_for_more_than_the_window_leaves() {
        assert_eq!(output_budget(8192, 128_000, 1_000), 8192);
        assert_eq!(output_budget(8192, 2_400, 2_000), 2_400 - 2_000 - 120);
        assert_eq!(output_budget(8192, 2_400, 5_000), 64);
        // What fits leaves the margin and the fewest output tokens free.
        assert_eq!(room(1_280, 1_000), 1_280 - 1_000 - 64 - 64);
        assert!(fits(1_280, 1_152) && !fits(1_280, 1_153));
        assert_eq!(room(1_280, 1_300), 0);
    }
}
