//! The words of a conversation with a model, independent of any provider and wire format:
//! messages, tool calls and their results, tool definitions. Everything that keeps, trims,
//! journals or shows a conversation uses these; only `backends/` talks to providers.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

/// A tool the model may call: its name, what it does, and a JSON Schema for its arguments.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ToolDefinition {
    pub name: Cow<'static, str>,
    pub description: Cow<'static, str>,
    pub parameters: Value,
}

impl ToolDefinition {
    /// The characters a request spends on this definition (name, description, parameter schema).
    pub fn char_count(&self) -> usize {
        self.name.len() + self.description.len() + self.parameters.to_string().len()
    }
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
                    + tool_calls.iter().map(|c| c.name.len() + json_len(&c.arguments)).sum::<usize>()
            }
            ChatMessage::ToolResults { results } => {
                results.iter().map(|r| r.content.len() + r.name.len()).sum()
            }
        }
    }
}

/// The length of `value` written as JSON, without writing it anywhere.
fn json_len(value: &serde_json::Value) -> usize {
    struct Counter(usize);
    impl std::io::Write for Counter {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut counter = Counter(0);
    // Writing to a counter cannot fail, nor can a `Value` fail to serialize.
    let _ = serde_json::to_writer(&mut counter, value);
    counter.0
}

/// One message of a conversation thread: what an earlier stage sent or received (tool calls and
/// results included), and the node of that stage (none in threads written before fabro noted it).
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct ThreadMessage {
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
    #[serde(flatten)]
    pub message: ChatMessage,
}
