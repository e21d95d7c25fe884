//! LLM backends: what agent and prompt stages call. This issue ships the `simulated` backend
//! (deterministic placeholder text) and the `scripted` one (responses from a file); real
//! providers come later behind the same trait.

pub mod scripted;
pub mod simulated;

use std::time::Duration;

/// One model call.
#[derive(Debug, Clone)]
pub struct LlmRequest<'a> {
    pub node_id: &'a str,
    /// 1 for the node's first visit in the run.
    pub visit: u32,
    /// `true` for agent stages (tool use allowed), `false` for single prompts.
    pub agentic: bool,
    /// The full text sent: preamble and prompt.
    pub prompt: &'a str,
    pub model: Option<&'a str>,
    pub provider: Option<&'a str>,
    pub reasoning_effort: Option<&'a str>,
    pub timeout: Option<Duration>,
    /// Under `full` fidelity: the conversation thread this call continues...
    pub thread: Option<&'a str>,
    /// ...and its earlier messages, oldest first (empty for a new thread or other fidelities).
    pub history: &'a [Message],
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Role {
    User,
    Assistant,
}

/// One message of a conversation thread.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Message {
    pub role: Role,
    pub content: String,
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Usage {
    pub input_tokens: u64,
    pub output_tokens: u64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LlmResponse {
    pub text: String,
    /// The model that answered, when the backend knows it.
    pub model: Option<String>,
    pub usage: Option<Usage>,
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// Rate limits, timeouts, 5xx: the engine's retry policy applies.
    #[error("{0}")]
    Retryable(String),
    /// Bad request, authentication, malformed response: the stage fails.
    #[error("{0}")]
    Terminal(String),
}

#[async_trait::async_trait]
pub trait Backend: Send + Sync {
    /// A short name for logs and status files (`simulated`, `scripted`, ...).
    fn name(&self) -> &str;
    async fn complete(&self, request: &LlmRequest<'_>) -> Result<LlmResponse, BackendError>;
}
