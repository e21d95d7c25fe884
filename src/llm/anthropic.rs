//! The Anthropic Messages API (`POST /v1/messages`) with tool use.

use serde_json::{json, Value};

use super::chat::{ChatProvider, ChatRequest, ChatResponse};
use super::http::{Answered, Post};
use super::stream::{AnthropicEvents, Streaming};
use super::BackendError;
use crate::chat::{ChatMessage, ToolCall};
use crate::redaction::Secrets;
use crate::usage::Usage;

/// The API version header fabro speaks.
const API_VERSION: &str = "2023-06-01";

pub const DEFAULT_BASE_URL: &str = "https://api.anthropic.com";

/// A configured Anthropic endpoint.
pub struct Anthropic {
    pub name: String,
    pub base_url: String,
    pub api_key: String,
    pub streaming: Streaming,
    pub client: reqwest::Client,
    pub secrets: Secrets,
}

impl Anthropic {
    fn url(&self) -> String {
        let base = self.base_url.trim_end_matches('/');
        if base.ends_with("/v1") {
            format!("{base}/messages")
        } else {
            format!("{base}/v1/messages")
        }
    }
}

#[async_trait::async_trait]
impl ChatProvider for Anthropic {
    fn name(&self) -> &str {
        &self.name
    }

    fn applies_reasoning_effort(&self, model: &str) -> bool {
        supports_thinking(model)
    }

    async fn chat(&self, request: &ChatRequest<'_>) -> Result<ChatResponse, BackendError> {
        let headers = [("x-api-key", self.api_key.clone()), ("anthropic-version", API_VERSION.to_string())];
        let url = self.url();
        let post = Post {
            client: &self.client,
            url: &url,
            headers: &headers,
            timeout: request.timeout,
            secrets: &self.secrets,
        };
        let mut events = AnthropicEvents::default();
        let stream = [("stream", json!(true))];
        match post
            .call(&request_body(request), &stream, &self.streaming, &self.name, request, &mut events)
            .await?
        {
            Answered::Assembled => self.read(&events.into_message()?),
            Answered::Whole(value) => self.read(&value),
        }
    }
}

impl Anthropic {
    /// The answer in `value`, or the error that says what is wrong with it.
    fn read(&self, value: &Value) -> Result<ChatResponse, BackendError> {
        parse_response(value).map_err(|message| {
            BackendError::Terminal(
                self.secrets.redact(&format!("{} returned a malformed message: {message}", self.url())),
            )
        })
    }
}

/// The extended-thinking budget (tokens) for a stage's `reasoning_effort`. The API's minimum
/// is 1,024; the budget comes on top of the answer's own `max_tokens`.
pub fn thinking_budget(effort: &str) -> Option<u32> {
    match effort {
        "low" => Some(1_024),
        "medium" => Some(4_096),
        "high" => Some(16_384),
        _ => None,
    }
}

/// Whether a Claude model takes extended thinking: Claude 3.7 Sonnet and every Claude 4 model do;
/// the Claude 3 and 3.5 models and older reject it.
pub fn supports_thinking(model: &str) -> bool {
    let model = model.to_ascii_lowercase();
    let name = model.rsplit('/').next().unwrap_or(&model);
    !["claude-3-5", "claude-3-opus", "claude-3-sonnet", "claude-3-haiku", "claude-2", "claude-instant"]
        .iter()
        .any(|old| name.starts_with(old))
}

/// The JSON body of a Messages API call. A `reasoning_effort` turns on extended thinking with
/// the [`thinking_budget`] for models that have it.
pub fn request_body(request: &ChatRequest<'_>) -> Value {
    let mut body = json!({
        "model": request.model,
        "max_tokens": request.max_output_tokens,
        "messages": messages(request.messages),
    });
    let budget =
        request.reasoning_effort.filter(|_| supports_thinking(request.model)).and_then(thinking_budget);
    if let Some(budget) = budget {
        body["thinking"] = json!({"type": "enabled", "budget_tokens": budget});
        body["max_tokens"] = json!(request.max_output_tokens.saturating_add(budget));
    }
    if !request.system.is_empty() {
        body["system"] = json!(request.system);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|tool| json!({"name": tool.name, "description": tool.description, "input_schema": tool.parameters}))
            .collect();
    }
    body
}

/// Messages with content blocks; consecutive messages of one role are merged, as the API wants
/// roles to alternate.
fn messages(messages: &[ChatMessage]) -> Value {
    let mut out: Vec<(&'static str, Vec<Value>)> = Vec::new();
    for message in messages {
        let (role, blocks) = match message {
            ChatMessage::User { content } => ("user", vec![text_block(content)]),
            ChatMessage::Assistant { content, tool_calls, reasoning } => {
                // Thinking blocks come first, unchanged (their signatures are checked).
                let mut blocks = reasoning.clone();
                if !content.trim().is_empty() || tool_calls.is_empty() {
                    blocks.push(text_block(content));
                }
                blocks.extend(tool_calls.iter().map(|call| {
                    json!({"type": "tool_use", "id": call.id, "name": call.name, "input": call.arguments})
                }));
                ("assistant", blocks)
            }
            ChatMessage::ToolResults { results } => (
                "user",
                results
                    .iter()
                    .map(|result| {
                        json!({"type": "tool_result", "tool_use_id": result.call_id,
                               "content": result.content, "is_error": result.is_error})
                    })
                    .collect(),
            ),
        };
        match out.last_mut() {
            Some((last_role, last_blocks)) if *last_role == role => last_blocks.extend(blocks),
            _ => out.push((role, blocks)),
        }
    }
    out.into_iter().map(|(role, content)| json!({"role": role, "content": content})).collect()
}

/// The API refuses empty text blocks.
fn text_block(text: &str) -> Value {
    let text = if text.trim().is_empty() { "(empty)" } else { text };
    json!({"type": "text", "text": text})
}

/// Reads a Messages API answer; `Err` says what is missing.
pub fn parse_response(value: &Value) -> Result<ChatResponse, String> {
    let blocks = value["content"].as_array().ok_or("it has no `content` array")?;
    let mut response = ChatResponse {
        model: value["model"].as_str().map(str::to_string),
        stop_reason: value["stop_reason"].as_str().map(str::to_string),
        ..ChatResponse::default()
    };
    for block in blocks {
        match block["type"].as_str() {
            Some("text") => response.text.push_str(block["text"].as_str().unwrap_or_default()),
            Some("tool_use") => {
                let (Some(id), Some(name)) = (block["id"].as_str(), block["name"].as_str()) else {
                    return Err("a `tool_use` block lacks its id or name".to_string());
                };
                let arguments = match &block["input"] {
                    Value::Object(_) => block["input"].clone(),
                    _ => json!({}),
                };
                response.tool_calls.push(ToolCall { id: id.to_string(), name: name.to_string(), arguments });
            }
            Some("thinking" | "redacted_thinking") => response.reasoning.push(block.clone()),
            // Other block types carry nothing fabro sends back or records.
            _ => {}
        }
    }
    let usage = &value["usage"];
    let count = |key: &str| usage[key].as_u64().unwrap_or(0);
    response.usage = Usage {
        input_tokens: count("input_tokens")
            + count("cache_creation_input_tokens")
            + count("cache_read_input_tokens"),
        output_tokens: count("output_tokens"),
        ..Usage::default()
    };
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::{ToolDefinition, ToolResult};

    #[test]
    fn requests_merge_roles_and_carry_tools() {
        let messages = vec![
            ChatMessage::user("summary"),
            ChatMessage::user("do it"),
            ChatMessage::Assistant {
                reasoning: Vec::new(),
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "t1".into(),
                    name: "read_file".into(),
                    arguments: json!({"path": "a"}),
                }],
            },
            ChatMessage::ToolResults {
                results: vec![ToolResult {
                    call_id: "t1".into(),
                    name: "read_file".into(),
                    content: "x".into(),
                    is_error: false,
                }],
            },
        ];
        let tools = [ToolDefinition {
            name: "read_file".into(),
            description: "reads".into(),
            parameters: json!({"type": "object"}),
        }];
        let request = ChatRequest {
            model: "claude-x",
            system: "sys",
            messages: &messages,
            tools: &tools,
            reasoning_effort: None,
            max_output_tokens: 100,
            timeout: std::time::Duration::from_secs(1),
            watcher: None,
        };
        let body = request_body(&request);
        assert_eq!(body["system"], "sys");
        assert_eq!(body["tools"][0]["input_schema"]["type"], "object");
        let sent = body["messages"].as_array().unwrap();
        assert_eq!(sent.len(), 3);
        assert_eq!(sent[0]["content"].as_array().unwrap().len(), 2);
        assert_eq!(sent[1]["content"][0]["type"], "tool_use");
        assert_eq!(sent[2]["content"][0]["tool_use_id"], "t1");
    }

    #[test]
    fn responses_parse_text_tools_and_usage() {
        let value = json!({"model": "claude-x", "stop_reason": "tool_use",
            "content": [{"type": "text", "text": "Let me look."}, {"type": "tool_use", "id": "t", "name": "glob", "input": {"pattern": "*"}}],
            "usage": {"input_tokens": 10, "cache_read_input_tokens": 5, "output_tokens": 3}});
        let response = parse_response(&value).unwrap();
        assert_eq!(response.text, "Let me look.");
        assert_eq!(response.tool_calls[0].name, "glob");
        assert_eq!(response.usage, Usage::new(15, 3));
        assert!(parse_response(&json!({"id": 1})).is_err());
    }

    #[test]
    fn reasoning_effort_turns_on_thinking_for_models_that_have_it() {
        let messages = vec![
            ChatMessage::user("go"),
            ChatMessage::Assistant {
                content: String::new(),
                tool_calls: vec![ToolCall { id: "t1".into(), name: "glob".into(), arguments: json!({}) }],
                reasoning: vec![json!({"type": "redacted_thinking", "data": "opaque"})],
            },
        ];
        let mut request = ChatRequest {
            model: "claude-opus-4-6",
            system: "",
            messages: &messages,
            tools: &[],
            reasoning_effort: Some("medium"),
            max_output_tokens: 8192,
            timeout: std::time::Duration::from_secs(1),
            watcher: None,
        };
        let body = request_body(&request);
        assert_eq!(body["thinking"]["budget_tokens"], 4096);
        assert_eq!(body["max_tokens"], 8192 + 4096);
        assert_eq!(body["messages"][1]["content"][0]["type"], "redacted_thinking");
        assert_eq!(body["messages"][1]["content"][1]["type"], "tool_use");
        request.model = "claude-3-5-sonnet-20241022";
        assert!(request_body(&request).get("thinking").is_none());
        assert_eq!(request_body(&request)["max_tokens"], 8192);
        assert!(supports_thinking("claude-haiku-4-5") && supports_thinking("anthropic/claude-3-7-sonnet"));
        assert!(!supports_thinking("claude-3-opus-20240229"));
    }

    #[test]
    fn thinking_blocks_are_kept_for_the_next_turn() {
        let value = json!({"content": [
            {"type": "thinking", "thinking": "hmm", "signature": "s"},
            {"type": "redacted_thinking", "data": "x"},
            {"type": "text", "text": "done"}], "usage": {}});
        let response = parse_response(&value).unwrap();
        assert_eq!(response.reasoning.len(), 2);
        assert_eq!(response.text, "done");
        assert_eq!(response.thinking().as_deref(), Some("hmm\n\n[redacted thinking]"));
    }
}
