//! Counting tokens as the model's server does. fabro estimates a request's tokens from its
//! characters: everything sent (the system prompt, the tool definitions and the messages), at 4
//! characters a token until the server says otherwise. Each response that reports its input
//! tokens calibrates the ratio for the rest of the stage (and, through the backend, for later
//! stages on the same model), so that the window-based layers (compaction trigger, window
//! warning, the output budget) go by the server's tokenizer from the second call on.
//!
//! A report implying fewer than [`MIN_CHARS_PER_TOKEN`] or more than [`MAX_CHARS_PER_TOKEN`]
//! characters a token is no tokenizer's count (a proxy that reports a fixed usage, a cached
//! prompt counted apart): it is ignored.

use crate::event::Event;
use crate::usage::CHARS_PER_TOKEN;

/// The fewest characters a token a report may imply.
pub const MIN_CHARS_PER_TOKEN: f64 = 1.0;
/// The most characters a token a report may imply.
pub const MAX_CHARS_PER_TOKEN: f64 = 12.0;

/// A stage's characters-per-token ratio.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Calibration {
    chars_per_token: f64,
    /// Whether a server's report set the ratio (else it is the default or a remembered one).
    reported: bool,
}

impl Default for Calibration {
    fn default() -> Self {
        Calibration { chars_per_token: CHARS_PER_TOKEN as f64, reported: false }
    }
}

impl Calibration {
    /// Starts from a ratio learned earlier in the run (on the same model), else the default.
    pub fn starting_at(chars_per_token: Option<f64>) -> Calibration {
        match chars_per_token.filter(|ratio| plausible(*ratio)) {
            Some(chars_per_token) => Calibration { chars_per_token, reported: true },
            None => Calibration::default(),
        }
    }

    pub fn chars_per_token(&self) -> f64 {
        self.chars_per_token
    }

    /// Whether a server's report set the ratio.
    pub fn is_reported(&self) -> bool {
        self.reported
    }

    /// The tokens of `chars` characters.
    pub fn tokens(&self, chars: usize) -> u64 {
        (chars as f64 / self.chars_per_token).ceil() as u64
    }

    /// An estimate made at the default 4 characters a token, in this ratio's tokens.
    pub fn rescale(&self, default_estimate: u64) -> u64 {
        (default_estimate as f64 * CHARS_PER_TOKEN as f64 / self.chars_per_token).ceil() as u64
    }

    /// A default-ratio budget in this ratio: the default estimate that corresponds to `tokens`.
    pub fn default_estimate_of(&self, tokens: u64) -> u64 {
        (tokens as f64 * self.chars_per_token / CHARS_PER_TOKEN as f64) as u64
    }

    /// Takes a server's count: `sent_chars` characters were `reported_tokens` tokens. The event
    /// says so when the ratio is set for the first time or moves by more than a tenth; an
    /// implausible count changes nothing.
    pub fn observe(&mut self, sent_chars: usize, reported_tokens: u64) -> Option<Event> {
        if sent_chars == 0 || reported_tokens == 0 {
            return None;
        }
        let ratio = sent_chars as f64 / reported_tokens as f64;
        if !plausible(ratio) {
            return None;
        }
        let moved = (ratio - self.chars_per_token).abs() > self.chars_per_token / 10.0;
        let first = !self.reported;
        self.chars_per_token = ratio;
        self.reported = true;
        (first || moved).then(|| Event::AgentContextCalibrated {
            chars_per_token: (ratio * 100.0).round() / 100.0,
            sent_chars,
            reported_tokens,
        })
    }
}

fn plausible(ratio: f64) -> bool {
    ratio.is_finite() && (MIN_CHARS_PER_TOKEN..=MAX_CHARS_PER_TOKEN).contains(&ratio)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_servers_count_sets_the_ratio_and_estimates_follow_it() {
        let mut calibration = Calibration::default();
        assert_eq!(calibration.tokens(4000), 1000);
        let event = calibration.observe(7000, 967).expect("the first report is an event");
        assert!(matches!(event, Event::AgentContextCalibrated { reported_tokens: 967, .. }));
        assert!((calibration.chars_per_token() - 7.24).abs() < 0.01);
        assert_eq!(calibration.tokens(7000), 967);
        assert_eq!(calibration.rescale(1750), 967);
        // Close to the last ratio: no new event.
        assert!(calibration.observe(7100, 970).is_none());
        // A proxy's fixed usage is ignored.
        assert!(calibration.observe(60_000, 50).is_none());
        assert!((calibration.chars_per_token() - 7.32).abs() < 0.01);
        assert!(!Calibration::starting_at(Some(40.0)).is_reported());
        assert!(Calibration::starting_at(Some(3.1)).is_reported());
    }
}
