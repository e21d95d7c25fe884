//! Retrying a model call in place ([`Retrying`]): a provider that cannot be reached is tried
//! again with exponential backoff (with jitter) until its retry window has passed, so that a
//! local server's restart or a short outage costs a wait instead of the run; then the call fails
//! with [`BackendError::Unreachable`] and the run pauses. A busy provider (429, other 5xx, a
//! request timeout) is tried again `max_retries` times within the same window, after the
//! server's `Retry-After` when it sends one; then the call fails with
//! [`BackendError::Retryable`] and the stage's own retry policy applies. Every retry is reported
//! as an `llm.retry` event. Other errors (authentication, bad requests) are never retried here.

use std::time::{Duration, Instant};

use super::chat::{ChatProvider, ChatRequest, ChatResponse};
use super::{BackendError, Transient, TransientCause, Unreachable};
use crate::event::Event;

/// Longest wait between two attempts (but a server's `Retry-After`).
const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// How a provider's failed calls are retried in place before the run pauses or the engine's retry
/// policy takes over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySettings {
    /// Extra attempts after the first while the provider is busy (0 = none).
    pub max_retries: u32,
    /// The first backoff delay (an eighth of the window when that is shorter); doubles per
    /// attempt up to 10 s.
    pub base_delay: Duration,
    /// A `Retry-After` longer than this is not waited for here: the error goes to the engine.
    pub max_delay: Duration,
    /// How long a call is tried again while the provider cannot be reached, from its first
    /// failure; no retry of a call starts after it.
    pub window: Duration,
}

/// The default retry window.
pub const DEFAULT_WINDOW: Duration = Duration::from_secs(60);

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            max_retries: 2,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
            window: DEFAULT_WINDOW,
        }
    }
}

impl RetrySettings {
    /// The wait after the `attempt`th failed attempt (1 for the first): the backoff with jitter.
    pub fn delay_after(&self, attempt: u32) -> Duration {
        jittered(self.backoff(attempt))
    }

    /// The wait after the `attempt`th failed attempt (1 for the first), before jitter.
    fn backoff(&self, attempt: u32) -> Duration {
        let base = self.base_delay.min(self.window / 8);
        base.saturating_mul(2u32.saturating_pow(attempt.saturating_sub(1))).min(MAX_BACKOFF)
    }
}

/// Between half of `delay` and all of it, so that the calls of parallel stages waiting for the
/// same server do not all come back at once.
fn jittered(delay: Duration) -> Duration {
    use std::hash::{BuildHasher, Hasher};
    let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
    hasher.write_u8(0);
    let fraction = (hasher.finish() >> 11) as f64 / (1u64 << 53) as f64;
    delay.mul_f64(0.5 + fraction / 2.0)
}

/// A provider whose failed calls are retried in place by its [`RetrySettings`], each retry
/// reported to `report`.
pub struct Retrying<'p> {
    pub provider: &'p dyn ChatProvider,
    /// Where the provider is, for the error when it stays out of reach.
    pub base_url: &'p str,
    pub settings: RetrySettings,
    pub report: &'p (dyn Fn(Event) + Send + Sync),
}

#[async_trait::async_trait]
impl ChatProvider for Retrying<'_> {
    fn name(&self) -> &str {
        self.provider.name()
    }

    fn applies_reasoning_effort(&self, model: &str) -> bool {
        self.provider.applies_reasoning_effort(model)
    }

    async fn chat(&self, request: &ChatRequest<'_>) -> Result<ChatResponse, BackendError> {
        let settings = &self.settings;
        let mut first_failure = None;
        let mut attempt = 0;
        let mut busy_retries = 0;
        loop {
            let failure = match self.provider.chat(request).await {
                Err(BackendError::Transient(failure)) => failure,
                answered => return answered,
            };
            attempt += 1;
            let waited = first_failure.get_or_insert_with(Instant::now).elapsed();
            let left = settings.window.saturating_sub(waited);
            let Transient { cause, message, retry_after } = failure;
            let backoff = settings.delay_after(attempt);
            let delay = match cause {
                TransientCause::Unreachable if left.is_zero() => {
                    return Err(BackendError::Unreachable(Unreachable {
                        provider: self.name().to_string(),
                        base_url: self.base_url.to_string(),
                        waited,
                        attempts: attempt,
                        error: message,
                    }))
                }
                TransientCause::Unreachable => retry_after.unwrap_or(backoff).min(left),
                TransientCause::Busy => {
                    let delay = retry_after.unwrap_or(backoff);
                    if busy_retries >= settings.max_retries || delay > settings.max_delay || delay > left {
                        let plural = if attempt == 1 { "" } else { "s" };
                        return Err(BackendError::Retryable(format!(
                            "{message} (after {attempt} attempt{plural})"
                        )));
                    }
                    busy_retries += 1;
                    delay
                }
            };
            (self.report)(Event::LlmRetry {
                provider: self.name().to_string(),
                model: request.model.to_string(),
                attempt,
                delay_ms: delay.as_millis() as u64,
                error: message,
            });
            tokio::time::sleep(delay).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::ChatMessage;
    use std::sync::Mutex;

    /// Fails with the scripted errors in turn, then answers.
    struct Flaky {
        errors: Mutex<Vec<BackendError>>,
        calls: Mutex<u32>,
    }

    impl Flaky {
        fn new(errors: Vec<BackendError>) -> Flaky {
            Flaky { errors: Mutex::new(errors), calls: Mutex::new(0) }
        }
    }

    #[async_trait::async_trait]
    impl ChatProvider for Flaky {
        fn name(&self) -> &str {
            "local"
        }

        fn applies_reasoning_effort(&self, _model: &str) -> bool {
            false
        }

        async fn chat(&self, _request: &ChatRequest<'_>) -> Result<ChatResponse, BackendError> {
            *self.calls.lock().unwrap() += 1;
            let mut errors = self.errors.lock().unwrap();
            match errors.is_empty() {
                true => Ok(ChatResponse { text: "ok".into(), ..ChatResponse::default() }),
                false => Err(errors.remove(0)),
            }
        }
    }

    fn transient(cause: TransientCause, retry_after: Option<Duration>) -> BackendError {
        BackendError::Transient(Transient { cause, message: format!("{cause:?}"), retry_after })
    }

    fn settings(max_retries: u32, window_ms: u64) -> RetrySettings {
        RetrySettings {
            max_retries,
            base_delay: Duration::from_millis(8),
            max_delay: Duration::from_secs(1),
            window: Duration::from_millis(window_ms),
        }
    }

    /// One call through [`Retrying`]; the result and the `llm.retry` events.
    async fn call(
        provider: &Flaky,
        settings: RetrySettings,
    ) -> (Result<ChatResponse, BackendError>, Vec<Event>) {
        let events = Mutex::new(Vec::new());
        let report = |event| events.lock().unwrap().push(event);
        let retrying = Retrying { provider, base_url: "http://127.0.0.1:9/v1", settings, report: &report };
        let messages = [ChatMessage::user("hi")];
        let request = ChatRequest {
            model: "m",
            system: "",
            messages: &messages,
            tools: &[],
            reasoning_effort: None,
            max_output_tokens: 10,
            timeout: Duration::from_secs(1),
            watcher: None,
        };
        let result = retrying.chat(&request).await;
        (result, events.into_inner().unwrap())
    }

    #[tokio::test]
    async fn an_unreachable_provider_is_retried_through_the_window_whatever_max_retries_says() {
        let flaky = Flaky::new((0..4).map(|_| transient(TransientCause::Unreachable, None)).collect());
        let (result, events) = call(&flaky, settings(0, 10_000)).await;
        assert_eq!(result.unwrap().text, "ok");
        assert_eq!(events.len(), 4);
        let Event::LlmRetry { attempt, delay_ms, ref error, .. } = events[3] else { panic!("{events:?}") };
        assert_eq!((attempt, error.as_str()), (4, "Unreachable"));
        // 8 ms doubled three times, jittered down at most by half.
        assert!((32..=64).contains(&delay_ms), "{delay_ms}");
    }

    #[tokio::test]
    async fn an_unreachable_provider_past_the_window_is_unreachable() {
        let flaky = Flaky::new((0..1000).map(|_| transient(TransientCause::Unreachable, None)).collect());
        let started = Instant::now();
        let (result, events) = call(&flaky, settings(2, 100)).await;
        let Err(BackendError::Unreachable(unreachable)) = result else { panic!("{result:?}") };
        assert!(started.elapsed() >= Duration::from_millis(100));
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
        assert_eq!(unreachable.attempts as usize, events.len() + 1);
        assert_eq!(unreachable.base_url, "http://127.0.0.1:9/v1");
        assert!(unreachable
            .to_string()
            .starts_with("provider `local` at http://127.0.0.1:9/v1 could not be reached"));
    }

    #[tokio::test]
    async fn a_busy_provider_gets_max_retries_within_the_window_after_its_retry_after() {
        let busy = || transient(TransientCause::Busy, Some(Duration::from_millis(20)));
        let flaky = Flaky::new(vec![busy(), busy(), busy()]);
        let (result, events) = call(&flaky, settings(2, 10_000)).await;
        assert_eq!(result, Err(BackendError::Retryable("Busy (after 3 attempts)".into())));
        assert_eq!(events.len(), 2);
        assert!(matches!(events[0], Event::LlmRetry { delay_ms: 20, .. }), "{events:?}");
        // A wait past the window is not made.
        let flaky = Flaky::new(vec![busy()]);
        let (result, events) = call(&flaky, settings(2, 10)).await;
        assert_eq!(result, Err(BackendError::Retryable("Busy (after 1 attempt)".into())));
        assert!(events.is_empty());
    }

    #[tokio::test]
    async fn other_errors_are_not_retried() {
        let flaky = Flaky::new(vec![BackendError::Terminal("HTTP 401".into())]);
        let (result, events) = call(&flaky, settings(2, 10_000)).await;
        assert_eq!(result, Err(BackendError::Terminal("HTTP 401".into())));
        assert!(events.is_empty());
        assert_eq!(*flaky.calls.lock().unwrap(), 1);
    }
}
