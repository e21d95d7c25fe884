//! Model providers: one call to a model ([`chat`]), over HTTP with its error classes and
//! retries ([`http`]), in Anthropic's and OpenAI's wire formats ([`anthropic`], [`openai`]), and
//! failing over to the next model ([`failover`]). Nothing here knows of stages, agents or runs.

pub mod anthropic;
pub mod chat;
pub mod failover;
pub mod http;
pub mod openai;

/// Why a model call (or a stage's use of a backend) did not give an answer.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum BackendError {
    /// Rate limits, timeouts, 5xx: the engine's retry policy applies.
    #[error("{0}")]
    Retryable(String),
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
