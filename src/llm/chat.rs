//! One model call to a real provider, independent of any wire format ([`ChatProvider`]), over
//! the conversation vocabulary of [`crate::chat`]. The Anthropic and OpenAI modules translate
//! these to and from their JSON.

use std::time::Duration;

use serde_json::Value;

use super::stream::AnswerWatcher;
use super::BackendError;
use crate::chat::{ChatMessage, ToolCall, ToolDefinition, ToolResult};
use crate::usage::Usage;

/// One model call.
#[derive(Debug, Clone)]
pub struct ChatRequest<'a> {
    pub model: &'a str,
    pub system: &'a str,
    pub messages: &'a [ChatMessage],
    /// Empty for plain prompts.
    pub tools: &'a [ToolDefinition],
    pub reasoning_effort: Option<&'a str>,
    /// Most tokens the answer may have.
    pub max_output_tokens: u32,
    /// How long the whole HTTP exchange may take.
    pub timeout: Duration,
    /// Who follows the answer as it is written: with one, providers that can stream do.
    pub watcher: Option<&'a dyn AnswerWatcher>,
}

impl ChatRequest<'_> {
    /// The characters the request sends: system prompt, messages, tool definitions.
    pub fn char_count(&self) -> usize {
        self.system.len()
            + self.messages.iter().map(ChatMessage::char_count).sum::<usize>()
            + self.tools.iter().map(ToolDefinition::char_count).sum::<usize>()
    }
}

/// What the model answered.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct ChatResponse {
    pub text: String,
    pub tool_calls: Vec<ToolCall>,
    pub usage: Usage,
    /// The model id the provider reports.
    pub model: Option<String>,
    /// Why the model stopped (`end_turn`, `tool_use`, `stop`, `length`, ...).
    pub stop_reason: Option<String>,
    /// Provider reasoning blocks to send back with this turn (see [`ChatMessage::Assistant`]).
    pub reasoning: Vec<Value>,
    /// The server reported no usage (a stream without it): `usage` is fabro's estimate, at four
    /// characters a token.
    pub usage_estimated: bool,
}

impl ChatResponse {
    /// The two messages a tool turn adds to a conversation: this answer with its tool calls, then
    /// their results.
    pub fn into_tool_turn(self, results: Vec<ToolResult>) -> [ChatMessage; 2] {
        [
            ChatMessage::Assistant {
                content: self.text,
                tool_calls: self.tool_calls,
                reasoning: self.reasoning,
            },
            ChatMessage::ToolResults { results },
        ]
    }

    /// Fills in `usage` by estimate, for an answer to `request` that came without it.
    pub fn estimate_usage(&mut self, request: &ChatRequest<'_>) {
        let answer_chars = self.text.len()
            + self
                .tool_calls
                .iter()
                .map(|call| call.name.len() + call.arguments.to_string().len())
                .sum::<usize>();
        self.usage = Usage {
            input_tokens: crate::usage::estimated_tokens(request.char_count()),
            output_tokens: crate::usage::estimated_tokens(answer_chars),
            ..Usage::default()
        };
        self.usage_estimated = true;
    }

    /// Whether the answer was cut off at the request's `max_output_tokens`: OpenAI's
    /// `finish_reason: "length"`, Anthropic's `stop_reason: "max_tokens"`.
    pub fn is_truncated(&self) -> bool {
        matches!(self.stop_reason.as_deref(), Some("length" | "max_tokens"))
    }

    /// The readable text of the reasoning blocks, for the transcript (`None` without any).
    pub fn thinking(&self) -> Option<String> {
        let parts: Vec<&str> = self
            .reasoning
            .iter()
            .map(|block| block["thinking"].as_str().unwrap_or("[redacted thinking]"))
            .collect();
        (!parts.is_empty()).then(|| parts.join("\n\n"))
    }
}

/// A provider that can answer a [`ChatRequest`].
#[async_trait::async_trait]
pub trait ChatProvider: Send + Sync {
    /// The provider key (`anthropic`, `openai`, or a configured name).
    fn name(&self) -> &str;
    /// Whether a request's `reasoning_effort` reaches `model` (a provider or model without a
    /// reasoning setting ignores it, and the stage's transcript says so).
    fn applies_reasoning_effort(&self, model: &str) -> bool;
    async fn chat(&self, request: &ChatRequest<'_>) -> Result<ChatResponse, BackendError>;
}

/// One question to `model` with no tools and no history: the side calls of an agent stage
/// (compaction summaries, task completion records, memory extraction).
pub async fn ask(
    provider: &dyn ChatProvider,
    model: &str,
    system: &str,
    question: String,
    max_output_tokens: u32,
    timeout: Duration,
) -> Result<ChatResponse, BackendError> {
    let messages = [ChatMessage::user(question)];
    let request = ChatRequest {
        model,
        system,
        messages: &messages,
        tools: &[],
        reasoning_effort: None,
        max_output_tokens,
        timeout,
        watcher: None,
    };
    provider.chat(&request).await
}
