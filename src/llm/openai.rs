//! OpenAI Chat Completions (`POST /chat/completions`) with function tools, for OpenAI itself and
//! for any server that speaks the same API (ollama, llama.cpp server, vLLM, LM Studio, ...).

use serde_json::{json, Value};

use super::chat::{ChatProvider, ChatRequest, ChatResponse};
use super::http::{Answered, Post};
use super::stream::{OpenAiChunks, Streaming};
use super::BackendError;
use crate::chat::{ChatMessage, ToolCall};
use crate::redaction::Secrets;
use crate::usage::Usage;

pub const DEFAULT_BASE_URL: &str = "https://api.openai.com/v1";

/// Which dialect of the API the server speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dialect {
    /// api.openai.com: `max_completion_tokens` and `reasoning_effort`.
    OpenAi,
    /// Other servers: the widely supported `max_tokens`, and `reasoning_effort` only for servers
    /// known or configured to take it (Gemini's endpoint, vLLM, ollama and LM Studio for models
    /// that reason; strict servers reject unknown fields).
    Compatible { reasoning_effort: bool },
}

impl Dialect {
    /// Whether requests carry the stage's `reasoning_effort`.
    pub fn sends_reasoning_effort(self) -> bool {
        match self {
            Dialect::OpenAi => true,
            Dialect::Compatible { reasoning_effort } => reasoning_effort,
        }
    }
}

/// Whether a request that offers tools says the model may choose among them (`tool_choice`).
/// Some servers ignore the tools without it: llama.cpp's `chatml-function-calling` format
/// answers in plain text unless it is set.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolChoice {
    /// `"auto"`: the model calls tools or answers (OpenAI's documented default, so sending it
    /// changes nothing for servers that already offer the tools).
    #[default]
    Auto,
    /// `"required"`: the model must call a tool on every turn.
    Required,
    /// No `tool_choice` field, for servers that refuse it.
    Omit,
}

/// What the provider's config entry adds to every request, beyond the conversation.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct RequestOptions {
    /// Sent only with tools.
    pub tool_choice: ToolChoice,
    /// Sampling temperature; the server's default when `None`.
    pub temperature: Option<f64>,
    /// Sampling seed, for repeatable answers where the server honours it.
    pub seed: Option<u64>,
}

/// A configured Chat Completions endpoint.
pub struct OpenAi {
    pub name: String,
    pub base_url: String,
    /// Local servers often need none.
    pub api_key: Option<String>,
    pub dialect: Dialect,
    pub options: RequestOptions,
    pub streaming: Streaming,
    pub client: reqwest::Client,
    pub secrets: Secrets,
}

impl OpenAi {
    fn url(&self) -> String {
        format!("{}/chat/completions", self.base_url.trim_end_matches('/'))
    }
}

#[async_trait::async_trait]
impl ChatProvider for OpenAi {
    fn name(&self) -> &str {
        &self.name
    }

    fn applies_reasoning_effort(&self, _model: &str) -> bool {
        self.dialect.sends_reasoning_effort()
    }

    async fn chat(&self, request: &ChatRequest<'_>) -> Result<ChatResponse, BackendError> {
        let headers: Vec<(&str, String)> =
            self.api_key.iter().map(|key| ("authorization", format!("Bearer {key}"))).collect();
        let url = self.url();
        let post = Post {
            client: &self.client,
            url: &url,
            headers: &headers,
            timeout: request.timeout,
            secrets: &self.secrets,
        };
        let body = request_body(request, self.dialect, self.options);
        let stream = [("stream", json!(true)), ("stream_options", json!({"include_usage": true}))];
        let mut chunks = OpenAiChunks::default();
        match post.call(&body, &stream, &self.streaming, &self.name, request, &mut chunks).await? {
            Answered::Assembled => {
                let reported = chunks.has_usage();
                let mut response = self.read(&chunks.into_completion())?;
                if !reported {
                    response.estimate_usage(request);
                }
                Ok(response)
            }
            Answered::Whole(value) => self.read(&value),
        }
    }
}

impl OpenAi {
    /// The answer in `value`, or the error that says what is wrong with it.
    fn read(&self, value: &Value) -> Result<ChatResponse, BackendError> {
        parse_response(value).map_err(|message| {
            BackendError::Terminal(
                self.secrets.redact(&format!("{} returned a malformed completion: {message}", self.url())),
            )
        })
    }
}

/// The JSON body of a Chat Completions call.
pub fn request_body(request: &ChatRequest<'_>, dialect: Dialect, options: RequestOptions) -> Value {
    let mut messages = Vec::new();
    if !request.system.is_empty() {
        messages.push(json!({"role": "system", "content": request.system}));
    }
    for message in request.messages {
        match message {
            ChatMessage::User { content } => messages.push(json!({"role": "user", "content": content})),
            ChatMessage::Assistant { content, tool_calls, .. } => {
                let mut entry = json!({"role": "assistant", "content": content});
                if !tool_calls.is_empty() {
                    entry["tool_calls"] = tool_calls
                        .iter()
                        .map(|call| {
                            json!({"id": call.id, "type": "function",
                                   "function": {"name": call.name, "arguments": call.arguments.to_string()}})
                        })
                        .collect();
                }
                messages.push(entry);
            }
            ChatMessage::ToolResults { results } => {
                for result in results {
                    messages.push(
                        json!({"role": "tool", "tool_call_id": result.call_id, "content": result.content}),
                    );
                }
            }
        }
    }
    let mut body = json!({"model": request.model, "messages": messages});
    match dialect {
        Dialect::OpenAi => body["max_completion_tokens"] = json!(request.max_output_tokens),
        Dialect::Compatible { .. } => body["max_tokens"] = json!(request.max_output_tokens),
    }
    if let Some(effort) = request.reasoning_effort.filter(|_| dialect.sends_reasoning_effort()) {
        body["reasoning_effort"] = json!(effort);
    }
    if let Some(temperature) = options.temperature {
        body["temperature"] = json!(temperature);
    }
    if let Some(seed) = options.seed {
        body["seed"] = json!(seed);
    }
    if !request.tools.is_empty() {
        body["tools"] = request
            .tools
            .iter()
            .map(|tool| {
                json!({"type": "function",
                       "function": {"name": tool.name, "description": tool.description, "parameters": tool.parameters}})
            })
            .collect();
        match options.tool_choice {
            ToolChoice::Auto => body["tool_choice"] = json!("auto"),
            ToolChoice::Required => body["tool_choice"] = json!("required"),
            ToolChoice::Omit => {}
        }
    }
    body
}

/// Reads a Chat Completions answer; `Err` says what is missing.
pub fn parse_response(value: &Value) -> Result<ChatResponse, String> {
    let choice = value["choices"].get(0).ok_or("it has no `choices`")?;
    let message =
        choice.get("message").filter(|m| m.is_object()).ok_or("its first choice has no `message`")?;
    let mut response = ChatResponse {
        text: message["content"].as_str().unwrap_or_default().to_string(),
        model: value["model"].as_str().map(str::to_string),
        stop_reason: choice["finish_reason"].as_str().map(str::to_string),
        ..ChatResponse::default()
    };
    if let Some(calls) = message["tool_calls"].as_array() {
        for (index, call) in calls.iter().enumerate() {
            let function = &call["function"];
            let name = function["name"].as_str().ok_or("a tool call has no function name")?;
            let arguments = match &function["arguments"] {
                Value::String(raw) if raw.trim().is_empty() => json!({}),
                // Malformed arguments stay a string; the tool reports the error to the model.
                Value::String(raw) => {
                    serde_json::from_str(raw).unwrap_or_else(|_| Value::String(raw.clone()))
                }
                Value::Object(_) => function["arguments"].clone(),
                _ => json!({}),
            };
            let id = call["id"].as_str().map_or_else(|| format!("call_{index}"), str::to_string);
            response.tool_calls.push(ToolCall { id, name: name.to_string(), arguments });
        }
    }
    let usage = &value["usage"];
    response.usage = Usage {
        input_tokens: usage["prompt_tokens"].as_u64().unwrap_or(0),
        output_tokens: usage["completion_tokens"].as_u64().unwrap_or(0),
        ..Usage::default()
    };
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::chat::{ToolDefinition, ToolResult};

    #[test]
    fn requests_follow_the_dialect() {
        let messages = vec![
            ChatMessage::user("hi"),
            ChatMessage::Assistant {
                reasoning: Vec::new(),
                content: String::new(),
                tool_calls: vec![ToolCall {
                    id: "c1".into(),
                    name: "shell".into(),
                    arguments: json!({"command": "ls"}),
                }],
            },
            ChatMessage::ToolResults {
                results: vec![ToolResult {
                    call_id: "c1".into(),
                    name: "shell".into(),
                    content: "a".into(),
                    is_error: false,
                }],
            },
        ];
        let request = ChatRequest {
            model: "gpt-x",
            system: "sys",
            messages: &messages,
            tools: &[],
            reasoning_effort: Some("high"),
            max_output_tokens: 50,
            timeout: std::time::Duration::from_secs(1),
            watcher: None,
        };
        let body = request_body(&request, Dialect::OpenAi, RequestOptions::default());
        assert_eq!(body["reasoning_effort"], "high");
        assert_eq!(body["max_completion_tokens"], 50);
        assert_eq!(body["messages"][0]["role"], "system");
        assert_eq!(body["messages"][2]["tool_calls"][0]["function"]["arguments"], r#"{"command":"ls"}"#);
        assert_eq!(body["messages"][3]["role"], "tool");
        let compatible = request_body(
            &request,
            Dialect::Compatible { reasoning_effort: false },
            RequestOptions::default(),
        );
        assert_eq!(compatible["max_tokens"], 50);
        assert!(compatible.get("reasoning_effort").is_none());
        let gemini =
            request_body(&request, Dialect::Compatible { reasoning_effort: true }, RequestOptions::default());
        assert_eq!(gemini["reasoning_effort"], "high");
        assert!(gemini.get("max_completion_tokens").is_none());
        for absent in ["tool_choice", "temperature", "seed"] {
            assert!(body.get(absent).is_none(), "{absent} is not sent unless asked for");
        }
    }

    #[test]
    fn tool_choice_goes_with_the_tools_and_sampling_with_every_request() {
        let messages = vec![ChatMessage::user("hi")];
        let tools = [ToolDefinition {
            name: "shell".into(),
            description: "Runs a command".into(),
            parameters: json!({"type": "object"}),
        }];
        let with_tools = ChatRequest {
            model: "m",
            system: "",
            messages: &messages,
            tools: &tools,
            reasoning_effort: None,
            max_output_tokens: 50,
            timeout: std::time::Duration::from_secs(1),
            watcher: None,
        };
        let compatible = Dialect::Compatible { reasoning_effort: false };
        let body = |request: &ChatRequest<'_>, options| request_body(request, compatible, options);
        assert_eq!(body(&with_tools, RequestOptions::default())["tool_choice"], "auto");
        let required = RequestOptions { tool_choice: ToolChoice::Required, ..RequestOptions::default() };
        assert_eq!(body(&with_tools, required)["tool_choice"], "required");
        let omit = RequestOptions { tool_choice: ToolChoice::Omit, ..RequestOptions::default() };
        assert!(body(&with_tools, omit).get("tool_choice").is_none());
        let plain = ChatRequest { tools: &[], ..with_tools.clone() };
        assert!(body(&plain, required).get("tool_choice").is_none(), "no tools, no tool_choice");
        let sampled = RequestOptions { temperature: Some(0.0), seed: Some(42), ..RequestOptions::default() };
        let sent = body(&plain, sampled);
        assert_eq!((sent["temperature"].as_f64(), sent["seed"].as_u64()), (Some(0.0), Some(42)));
    }

    #[test]
    fn responses_parse_tool_calls_and_usage() {
        let value = json!({"model": "gpt-x", "choices": [{"finish_reason": "tool_calls", "message": {"content": null,
            "tool_calls": [{"id": "c", "type": "function", "function": {"name": "grep", "arguments": "{\"pattern\": \"x\"}"}},
                           {"id": "d", "type": "function", "function": {"name": "grep", "arguments": "{oops"}}]}}],
            "usage": {"prompt_tokens": 7, "completion_tokens": 2}});
        let response = parse_response(&value).unwrap();
        assert_eq!(response.text, "");
        assert_eq!(response.tool_calls[0].arguments["pattern"], "x");
        assert_eq!(response.tool_calls[1].arguments, json!("{oops"));
        assert_eq!(response.usage, Usage::new(7, 2));
        assert!(parse_response(&json!({"choices": []})).is_err());
    }
}
