//! The conversation a real provider sees, independent of any wire format: messages with tool
//! calls and tool results, tool definitions, and one model call ([`ChatProvider`]). The
//! Anthropic and OpenAI modules translate these to and from their JSON.

use std::borrow::Cow;
use std::time::Duration;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::{BackendError, Usage};

/// A tool the model may call: its name, what it does, and a JSON Schema for its arguments.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolDefinition {
    pub name: Cow<'static, str>,
    pub description: Cow<'static, str>,
    pub parameters: Value,
}

/// One tool call the model asked for.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolCall {
    /// The provider's id, echoed back with the result.
    pub id: String,
    pub name: String,
    /// A JSON object (providers that send malformed arguments get `{}` plus an error result).
    pub arguments: Value,
}

/// What a tool call produced, as sent back to the model.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolResult {
    pub call_id: String,
    pub name: String,
    pub content: String,
    pub is_error: bool,
}

/// One message of a conversation.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(tag = "role", rename_all = "snake_case")]
pub enum ChatMessage {
    User {
        content: String,
    },
    Assistant {
        content: String,
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<ToolCall>,
        /// The provider's own reasoning blocks (Anthropic's signed `thinking` and
        /// `redacted_thinking`), sent back unchanged: a tool loop with extended thinking must
        /// return them with the turn they belong to. Opaque to everything else.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        reasoning: Vec<Value>,
    },
    /// The results of the previous assistant message's tool calls, in call order.
    ToolResults {
        results: Vec<ToolResult>,
    },
}

impl ChatMessage {
    pub fn user(content: impl Into<String>) -> ChatMessage {
        ChatMessage::User { content: content.into() }
    }

    /// An assistant turn without provider reasoning blocks.
    pub fn assistant(content: impl Into<String>, tool_calls: Vec<ToolCall>) -> ChatMessage {
        ChatMessage::Assistant { content: content.into(), tool_calls, reasoning: Vec::new() }
    }

    /// Characters of text in the message, for token estimates.
    pub fn char_count(&self) -> usize {
        match self {
            ChatMessage::User { content } => content.len(),
            ChatMessage::Assistant { content, tool_calls, .. } => {
                content.len()
                    + tool_calls.iter().map(|c| c.name.len() + c.arguments.to_string().len()).sum::<usize>()
            }
            ChatMessage::ToolResults { results } => {
                results.iter().map(|r| r.content.len() + r.name.len()).sum()
            }
        }
    }
}

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
    };
    provider.chat(&request).await
}
