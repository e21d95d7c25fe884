//! Retry backoff: what each `retry_policy` preset waits, and the delay before each further attempt.

use std::time::Duration;

use crate::graph::settings::RetryPreset;

/// Exponential (or linear) backoff with a cap and jitter.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct RetryPolicy {
    pub initial: Duration,
    /// Multiplier per attempt; 1.0 with `linear` adds `initial` each time instead.
    pub factor: f64,
    pub linear: bool,
    pub cap: Duration,
    /// Fraction of the delay randomized, e.g. 0.25 for +-25%.
    pub jitter: f64,
}

impl RetryPolicy {
    /// The backoff of a `retry_policy` preset.
    pub fn of(preset: RetryPreset) -> RetryPolicy {
        let ms = Duration::from_millis;
        match preset {
            RetryPreset::None => RetryPolicy {
                initial: Duration::ZERO,
                factor: 1.0,
                linear: false,
                cap: Duration::ZERO,
                jitter: 0.0,
            },
            RetryPreset::Aggressive => {
                RetryPolicy { initial: ms(100), factor: 2.0, linear: false, cap: ms(5_000), jitter: 0.25 }
            }
            RetryPreset::Linear => {
                RetryPolicy { initial: ms(500), factor: 1.0, linear: true, cap: ms(30_000), jitter: 0.25 }
            }
            RetryPreset::Patient => {
                RetryPolicy { initial: ms(2_000), factor: 3.0, linear: false, cap: ms(300_000), jitter: 0.25 }
            }
            RetryPreset::Standard => {
                RetryPolicy { initial: ms(200), factor: 2.0, linear: false, cap: ms(60_000), jitter: 0.25 }
            }
        }
    }

    /// The delay before retry number `retry` (1 for the first retry). `seed` varies the jitter
    /// between stages without a random number generator.
    pub fn delay(&self, retry: u32, seed: u64) -> Duration {
        let base = self.initial.as_secs_f64();
        let steps = retry.saturating_sub(1);
        let raw =
            if self.linear { base * f64::from(retry.max(1)) } else { base * self.factor.powi(steps as i32) };
        let capped = raw.min(self.cap.as_secs_f64());
        let unit = (splitmix(seed ^ u64::from(retry)) >> 11) as f64 / (1u64 << 53) as f64;
        let jittered = capped * (1.0 + self.jitter * (2.0 * unit - 1.0));
        Duration::from_secs_f64(jittered.clamp(0.0, self.cap.as_secs_f64().max(0.0) * (1.0 + self.jitter)))
    }
}

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn presets_back_off_within_their_jitter_and_cap() {
        let standard = RetryPolicy::of(RetryPreset::default());
        for (retry, nominal) in [(1, 0.2), (2, 0.4), (3, 0.8)] {
            let delay = standard.delay(retry, 7).as_secs_f64();
            assert!((nominal * 0.75..=nominal * 1.25).contains(&delay), "retry {retry}: {delay}");
        }
        assert!(standard.delay(40, 7) <= Duration::from_secs(75));
        let linear = RetryPolicy::of(RetryPreset::Linear);
        assert!((1.1..=1.9).contains(&linear.delay(3, 1).as_secs_f64()));
        assert_eq!(RetryPolicy::of(RetryPreset::None).delay(3, 1), Duration::ZERO);
        assert_ne!(standard.delay(1, 1), standard.delay(1, 2), "jitter varies with the seed");
    }
}
