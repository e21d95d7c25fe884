//! Model providers: one call to a model ([`chat`]), over HTTP with its error classes ([`http`]),
//! in Anthropic's and OpenAI's wire formats ([`anthropic`], [`openai`]), retried in place while
//! the provider is away or busy ([`retry`]), and failing over to the next model ([`failover`]).
//! Nothing here knows of stages, agents or runs.

pub mod anthropic;
pub mod chat;
pub mod failover;
pub mod http;
pub mod openai;
pub mod retry;
pub mod stream;

use std::time::Duration;

/// Why a model call (or a stage's use of a backend) did not give an answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BackendError {
    /// Rate limits, timeouts, 5xx that persisted through the in-place retries: the engine's retry
    /// policy applies.
    #[error("{0}")]
    Retryable(String),
    /// One attempt failed in a way worth trying again soon; [`retry::Retrying`] decides. Reaches a
    /// stage only from a provider called without it, and is then [`BackendError::Retryable`].
    #[error("{}", .0.message)]
    Transient(Transient),
    /// The provider could not be reached for its whole retry window: the run pauses, and the
    /// stage runs again on resume.
    #[error("{0}")]
    Unreachable(Unreachable),
    /// Bad request, authentication, malformed response: the stage fails.
    #[error("{0}")]
    Terminal(String),
    /// A usage ceiling was reached mid-stage: the run pauses and the stage runs again on resume.
    #[error("{0}")]
    Paused(String),
    /// The provider rejected the request for its size (HTTP 413 or a context-length error): an
    /// agent stage retries with less ([`crate::agent::context::trim_retry`]), anything else fails.
    #[error("{0}")]
    TooLarge(String),
    /// The stage reached its own ceiling (`max_stage_tokens`/`max_stage_cost`): the run pauses
    /// and the stage runs again on resume only with a higher bound.
    #[error("{}", ceiling.reason(node))]
    StageCeiling { node: String, ceiling: crate::usage::StageCeiling },
}

/// One failed attempt that may succeed when tried again.
#[derive(Debug, Clone, PartialEq)]
pub struct Transient {
    pub cause: TransientCause,
    pub message: String,
    /// How long the server asked us to wait (`Retry-After`).
    pub retry_after: Option<Duration>,
}

/// Why an attempt failed, which decides how long it is retried.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TransientCause {
    /// Nothing answered: the connection was refused or lost, the name did not resolve, or a
    /// gateway said the server behind it is down (502, 503, 504). Retried for the retry window.
    Unreachable,
    /// The server answered but could not serve the call now: 429, 408, 409, 425, other 5xx, or
    /// the request ran past its timeout. Retried `max_retries` times within the window.
    Busy,
}

/// A provider that stayed out of reach for its retry window.
#[derive(Debug, Clone, PartialEq)]
pub struct Unreachable {
    /// The provider key (`openai_compatible`, a config file name, ...).
    pub provider: String,
    pub base_url: String,
    /// From the first failed attempt to giving up.
    pub waited: Duration,
    pub attempts: u32,
    /// The last attempt's error.
    pub error: String,
}

impl std::fmt::Display for Unreachable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "provider `{}` at {} could not be reached for {:.1}s ({} attempt{}; the last: {})",
            self.provider,
            self.base_url,
            self.waited.as_secs_f64(),
            self.attempts,
            if self.attempts == 1 { "" } else { "s" },
            self.error
        )
    }
}
