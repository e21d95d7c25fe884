//! Model failover (`fallback_models`): a stage's calls go to its own model, and when a call still
//! fails with a retryable error after the provider's in-place retries (429, 5xx, a timeout), or
//! its provider could not be reached for its retry window, to the next model of the list, for
//! this call and every later one of the stage.
//! The conversation carries over as it is: the next model gets the same messages. Authentication
//! and request errors do not fail over. Usage is kept per model, so each share is priced at its
//! own model's price.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Mutex;

use super::chat::{ChatProvider, ChatRequest, ChatResponse};
use super::BackendError;
use crate::event::Event;
use crate::usage::Usage;

/// One model of the chain and the provider that serves it.
pub struct Target<'p> {
    pub provider: &'p dyn ChatProvider,
    pub model: String,
}

/// A [`ChatProvider`] over a chain of models: the stage's own first, then its fallbacks.
pub struct Failover<'p> {
    chain: Vec<Target<'p>>,
    current: AtomicUsize,
    /// Tokens each model used, in the order the models answered.
    usage: Mutex<BTreeMap<String, Usage>>,
    /// Where `llm.failover` goes.
    report: Box<dyn Fn(Event) + Send + Sync + 'p>,
}

impl<'p> Failover<'p> {
    /// `chain` must not be empty: its first target is the stage's own model.
    pub fn new(chain: Vec<Target<'p>>, report: impl Fn(Event) + Send + Sync + 'p) -> Failover<'p> {
        Failover { chain, current: AtomicUsize::new(0), usage: Mutex::default(), report: Box::new(report) }
    }

    /// The model calls go to now.
    pub fn model(&self) -> &str {
        &self.chain[self.current.load(Ordering::Acquire)].model
    }

    /// Tokens per model that answered (one entry unless the stage failed over).
    pub fn usage_by_model(&self) -> BTreeMap<String, Usage> {
        self.usage.lock().unwrap_or_else(|poisoned| poisoned.into_inner()).clone()
    }
}

#[async_trait::async_trait]
impl ChatProvider for Failover<'_> {
    fn name(&self) -> &str {
        self.chain[self.current.load(Ordering::Acquire)].provider.name()
    }

    fn applies_reasoning_effort(&self, _model: &str) -> bool {
        let target = &self.chain[self.current.load(Ordering::Acquire)];
        target.provider.applies_reasoning_effort(&target.model)
    }

    async fn chat(&self, request: &ChatRequest<'_>) -> Result<ChatResponse, BackendError> {
        // A side call on a model of its own (`compaction_model`) goes to the stage's provider as is.
        if request.model != self.chain[0].model {
            return self.chain[0].provider.chat(request).await;
        }
        loop {
            let index = self.current.load(Ordering::Acquire);
            let target = &self.chain[index];
            let call = ChatRequest { model: &target.model, ..request.clone() };
            match target.provider.chat(&call).await {
                Ok(answer) => {
                    let mut usage = self.usage.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
                    usage.entry(target.model.clone()).or_default().add(&answer.usage);
                    return Ok(answer);
                }
                Err(error @ (BackendError::Retryable(_) | BackendError::Unreachable(_)))
                    if index + 1 < self.chain.len() =>
                {
                    let next = &self.chain[index + 1];
                    (self.report)(Event::LlmFailover {
                        from_model: target.model.clone(),
                        from_provider: target.provider.name().to_string(),
                        to_model: next.model.clone(),
                        to_provider: next.provider.name().to_string(),
                        reason: error.to_string(),
                    });
                    // Another call of the stage may have moved on already: never move back.
                    self.current.fetch_max(index + 1, Ordering::AcqRel);
                }
                Err(error) => return Err(error),
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::ChatMessage;
    use std::time::Duration;

    /// Answers with its name, or fails with the error it was given.
    struct Fixed {
        name: &'static str,
        error: Option<BackendError>,
    }

    #[async_trait::async_trait]
    impl ChatProvider for Fixed {
        fn name(&self) -> &str {
            self.name
        }

        fn applies_reasoning_effort(&self, _model: &str) -> bool {
            false
        }

        async fn chat(&self, request: &ChatRequest<'_>) -> Result<ChatResponse, BackendError> {
            match &self.error {
                Some(error) => Err(error.clone()),
                None => Ok(ChatResponse {
                    text: format!("{} answered as {}", self.name, request.model),
                    tool_calls: Vec::new(),
                    usage: Usage::new(10, 2),
                    model: Some(request.model.to_string()),
                    ..ChatResponse::default()
                }),
            }
        }
    }

    fn ask(failover: &Failover<'_>) -> Result<ChatResponse, BackendError> {
        ask_model(failover, "gpt-5.2")
    }

    /// One call on `model` (the stage's own is gpt-5.2).
    fn ask_model(failover: &Failover<'_>, model: &str) -> Result<ChatResponse, BackendError> {
        let messages = [ChatMessage::user("hi")];
        let request = ChatRequest {
            model,
            system: "",
            messages: &messages,
            tools: &[],
            reasoning_effort: None,
            max_output_tokens: 100,
            timeout: Duration::from_secs(1),
            watcher: None,
        };
        futures::executor::block_on(failover.chat(&request))
    }

    #[test]
    fn a_retryable_failure_moves_to_the_next_model_for_good() {
        let down = Fixed { name: "openai", error: Some(BackendError::Retryable("HTTP 500".into())) };
        let up = Fixed { name: "anthropic", error: None };
        let events = Mutex::new(Vec::new());
        let chain = vec![
            Target { provider: &down, model: "gpt-5.2".into() },
            Target { provider: &up, model: "claude-sonnet-4-5".into() },
        ];
        let failover = Failover::new(chain, |event| events.lock().unwrap().push(event));
        assert_eq!(ask(&failover).unwrap().text, "anthropic answered as claude-sonnet-4-5");
        assert_eq!(ask(&failover).unwrap().text, "anthropic answered as claude-sonnet-4-5");
        assert_eq!(failover.model(), "claude-sonnet-4-5");
        assert_eq!(events.lock().unwrap().len(), 1, "one failover, then the second model stays");
        assert_eq!(
            failover.usage_by_model(),
            BTreeMap::from([("claude-sonnet-4-5".into(), Usage::new(20, 4))])
        );
    }

    #[test]
    fn a_call_on_another_model_goes_to_the_stage_provider_as_is() {
        let own = Fixed { name: "openai", error: None };
        let chain = vec![Target { provider: &own, model: "gpt-5.2".into() }];
        let failover = Failover::new(chain, |_| {});
        assert_eq!(ask_model(&failover, "gpt-5-mini").unwrap().text, "openai answered as gpt-5-mini");
    }

    #[test]
    fn request_errors_and_the_last_model_do_not_fail_over() {
        let refused = Fixed { name: "openai", error: Some(BackendError::Terminal("HTTP 401".into())) };
        let up = Fixed { name: "anthropic", error: None };
        let chain = vec![
            Target { provider: &refused, model: "gpt-5.2".into() },
            Target { provider: &up, model: "claude-sonnet-4-5".into() },
        ];
        let failover = Failover::new(chain, |_| {});
        assert_eq!(ask(&failover).unwrap_err(), BackendError::Terminal("HTTP 401".into()));
        let down = Fixed { name: "openai", error: Some(BackendError::Retryable("HTTP 503".into())) };
        let failover = Failover::new(vec![Target { provider: &down, model: "gpt-5.2".into() }], |_| {});
        assert_eq!(ask(&failover).unwrap_err(), BackendError::Retryable("HTTP 503".into()));
    }
}
