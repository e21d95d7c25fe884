//! Answers that arrive as they are written: server-sent events ([`SseReader`]), put back
//! together into the answer a plain call would have given (OpenAI's chunks in
//! [`OpenAiChunks`], Anthropic's events in [`AnthropicEvents`]), with each piece told to an
//! [`AnswerWatcher`] as it comes.
//!
//! A streamed call is also one that stops: when the stage's timeout or a cancel drops it, the
//! connection closes and the server stops writing at its next token.

use std::sync::atomic::{AtomicBool, Ordering};

use serde_json::{json, Map, Value};

use super::chat::ChatRequest;
use super::BackendError;

/// What a watcher hears of an answer while it is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AnswerEvent<'a> {
    /// A streamed answer began (one per model call, retries included).
    Started,
    /// More of the answer's text.
    Text(&'a str),
    /// The model began a tool call, by the tool's name.
    ToolCall(&'a str),
    /// The server could not stream a call, which was made again without streaming; the
    /// provider's later calls of the same kind (with tools, or without) are not streamed.
    Unstreamed { provider: &'a str, model: &'a str, with_tools: bool, reason: &'a str },
}

/// Who follows answers as they are written (a stage's `answer.log`).
pub trait AnswerWatcher: Send + Sync {
    fn on(&self, event: AnswerEvent<'_>);
}

impl<F: Fn(AnswerEvent<'_>) + Send + Sync> AnswerWatcher for F {
    fn on(&self, event: AnswerEvent<'_>) {
        self(event)
    }
}

impl std::fmt::Debug for dyn AnswerWatcher + '_ {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AnswerWatcher")
    }
}

/// Whether a provider streams its answers, and which kinds of call (with tools, without) its
/// server turned out not to stream: those go unstreamed for the rest of the run.
#[derive(Debug)]
pub struct Streaming {
    enabled: bool,
    refused_plain: AtomicBool,
    refused_with_tools: AtomicBool,
}

impl Streaming {
    /// `enabled`: the provider's `stream` setting.
    pub fn new(enabled: bool) -> Streaming {
        Streaming {
            enabled,
            refused_plain: AtomicBool::new(false),
            refused_with_tools: AtomicBool::new(false),
        }
    }

    fn refusal(&self, with_tools: bool) -> &AtomicBool {
        if with_tools {
            &self.refused_with_tools
        } else {
            &self.refused_plain
        }
    }

    /// The watcher to stream a call to, when the call is to be streamed.
    pub fn watcher<'a>(&self, request: &ChatRequest<'a>) -> Option<&'a dyn AnswerWatcher> {
        let refused = self.refusal(!request.tools.is_empty()).load(Ordering::Relaxed);
        request.watcher.filter(|_| self.enabled && !refused)
    }

    /// The server of `provider` could not stream `request`, for `reason`: its kind of call goes
    /// unstreamed from now on.
    pub fn refused(
        &self,
        provider: &str,
        request: &ChatRequest<'_>,
        reason: &str,
        watcher: &dyn AnswerWatcher,
    ) {
        let with_tools = !request.tools.is_empty();
        self.refusal(with_tools).store(true, Ordering::Relaxed);
        watcher.on(AnswerEvent::Unstreamed { provider, model: request.model, with_tools, reason });
    }
}

/// One server-sent event: its `event:` name (none for OpenAI's) and its `data:` lines joined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SseMessage {
    pub event: Option<String>,
    pub data: String,
}

/// Reads server-sent events from the bytes of a response as they come, in pieces of any size.
#[derive(Debug, Default)]
pub struct SseReader {
    pending: Vec<u8>,
    event: Option<String>,
    data: Vec<String>,
}

/// The longest line an event stream may have (a tool call's arguments arrive in many lines).
const MAX_LINE_BYTES: usize = 16 << 20;

impl SseReader {
    /// The messages `bytes` complete.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Vec<SseMessage>, String> {
        self.pending.extend_from_slice(bytes);
        let mut messages = Vec::new();
        let mut start = 0;
        while let Some(end) = self.pending[start..].iter().position(|&b| b == b'\n') {
            let line = &self.pending[start..start + end];
            let line = line.strip_suffix(b"\r").unwrap_or(line);
            let line = String::from_utf8_lossy(line).into_owned();
            start += end + 1;
            if let Some(message) = self.line(&line) {
                messages.push(message);
            }
        }
        self.pending.drain(..start);
        if self.pending.len() > MAX_LINE_BYTES {
            return Err(format!("the event stream sent a line longer than {} MiB", MAX_LINE_BYTES >> 20));
        }
        Ok(messages)
    }

    /// What is left when the stream ends: a last message with no blank line after it.
    pub fn finish(&mut self) -> Option<SseMessage> {
        let rest = String::from_utf8_lossy(&std::mem::take(&mut self.pending)).into_owned();
        let mut message = None;
        for line in rest.lines() {
            message = self.line(line).or(message);
        }
        message.or_else(|| self.line(""))
    }

    fn line(&mut self, line: &str) -> Option<SseMessage> {
        if line.is_empty() {
            if self.data.is_empty() {
                self.event = None;
                return None;
            }
            let data = std::mem::take(&mut self.data).join("\n");
            return Some(SseMessage { event: self.event.take(), data });
        }
        if line.starts_with(':') {
            return None; // a comment: keep-alive pings
        }
        let (field, value) = line.split_once(':').unwrap_or((line, ""));
        let value = value.strip_prefix(' ').unwrap_or(value);
        match field {
            "data" => self.data.push(value.to_string()),
            "event" => self.event = Some(value.to_string()),
            _ => {} // `id:`, `retry:`: nothing fabro uses
        }
        None
    }
}

/// Whether a streamed answer is whole or still coming.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    More,
    Done,
}

/// Puts a streamed answer back together from its events.
pub trait Assembler: Send {
    /// Takes one event of the stream, telling `watcher` what it adds to the answer.
    fn take(&mut self, message: &SseMessage, watcher: &dyn AnswerWatcher) -> Result<Step, BackendError>;
    /// Whether any of the answer came.
    fn started(&self) -> bool;
    /// Whether the answer got as far as saying why it stopped.
    fn finished(&self) -> bool;
}

/// A Chat Completions answer from its chunks (`stream: true`), as [`super::openai::parse_response`]
/// reads a whole one.
#[derive(Debug, Default)]
pub struct OpenAiChunks {
    text: String,
    /// By the index the chunks give: id, name, arguments so far.
    tool_calls: Vec<(Option<String>, String, String)>,
    model: Option<String>,
    finish_reason: Option<String>,
    usage: Option<Value>,
    started: bool,
}

impl Assembler for OpenAiChunks {
    fn take(&mut self, message: &SseMessage, watcher: &dyn AnswerWatcher) -> Result<Step, BackendError> {
        let data = message.data.trim();
        if data == "[DONE]" {
            self.started = true;
            return Ok(Step::Done);
        }
        let chunk: Value = serde_json::from_str(data).map_err(|error| {
            BackendError::Terminal(format!(
                "the stream sent a chunk that is not JSON ({error}): {}",
                super::http::excerpt(data, 200)
            ))
        })?;
        if chunk.get("error").is_some_and(|e| !e.is_null()) {
            return Err(super::http::stream_error(data));
        }
        self.started = true;
        if let Some(model) = chunk["model"].as_str() {
            self.model = Some(model.to_string());
        }
        if chunk["usage"].is_object() {
            self.usage = Some(chunk["usage"].clone());
        }
        let Some(choice) = chunk["choices"].get(0) else { return Ok(Step::More) };
        let delta = &choice["delta"];
        if let Some(text) = delta["content"].as_str().filter(|text| !text.is_empty()) {
            self.text.push_str(text);
            watcher.on(AnswerEvent::Text(text));
        }
        for call in delta["tool_calls"].as_array().map(Vec::as_slice).unwrap_or_default() {
            let index =
                call["index"].as_u64().map_or(self.tool_calls.len().saturating_sub(1), |i| i as usize);
            if index > self.tool_calls.len() || index > 1024 {
                return Err(BackendError::Terminal(format!(
                    "the stream sent tool call {index} before tool call {}",
                    self.tool_calls.len()
                )));
            }
            if index == self.tool_calls.len() {
                self.tool_calls.push((None, String::new(), String::new()));
            }
            let entry = &mut self.tool_calls[index];
            if let Some(id) = call["id"].as_str() {
                entry.0 = Some(id.to_string());
            }
            let function = &call["function"];
            if let Some(name) = function["name"].as_str().filter(|name| !name.is_empty()) {
                if entry.1.is_empty() {
                    watcher.on(AnswerEvent::ToolCall(name));
                }
                entry.1.push_str(name);
            }
            if let Some(arguments) = function["arguments"].as_str() {
                entry.2.push_str(arguments);
            }
        }
        if let Some(reason) = choice["finish_reason"].as_str() {
            self.finish_reason = Some(reason.to_string());
        }
        Ok(Step::More)
    }

    fn started(&self) -> bool {
        self.started
    }

    fn finished(&self) -> bool {
        self.finish_reason.is_some()
    }
}

impl OpenAiChunks {
    /// Whether the server reported the call's usage.
    pub fn has_usage(&self) -> bool {
        self.usage.is_some()
    }

    /// The answer as a whole Chat Completions response.
    pub fn into_completion(self) -> Value {
        let tool_calls: Vec<Value> = self
            .tool_calls
            .into_iter()
            .enumerate()
            .map(|(index, (id, name, arguments))| {
                json!({"id": id.unwrap_or_else(|| format!("call_{index}")), "type": "function",
                       "function": {"name": name, "arguments": arguments}})
            })
            .collect();
        let mut message = json!({"role": "assistant", "content": self.text});
        if !tool_calls.is_empty() {
            message["tool_calls"] = Value::Array(tool_calls);
        }
        json!({
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": self.finish_reason}],
            "usage": self.usage.unwrap_or(Value::Null),
        })
    }
}

/// A Messages API answer from its events (`stream: true`), as
/// [`super::anthropic::parse_response`] reads a whole one.
#[derive(Debug, Default)]
pub struct AnthropicEvents {
    /// The content blocks, by index; a tool call's input as the JSON text so far.
    blocks: Vec<(Value, String)>,
    message: Map<String, Value>,
    usage: Map<String, Value>,
    stopped: bool,
    started: bool,
}

impl Assembler for AnthropicEvents {
    fn take(&mut self, message: &SseMessage, watcher: &dyn AnswerWatcher) -> Result<Step, BackendError> {
        let event: Value = serde_json::from_str(message.data.trim()).map_err(|error| {
            BackendError::Terminal(format!(
                "the stream sent an event that is not JSON ({error}): {}",
                super::http::excerpt(&message.data, 200)
            ))
        })?;
        self.started = true;
        let kind = event["type"].as_str().or(message.event.as_deref()).unwrap_or_default();
        match kind {
            "message_start" => {
                if let Some(start) = event["message"].as_object() {
                    self.message = start.clone();
                    if let Some(usage) = start.get("usage").and_then(Value::as_object) {
                        self.usage.extend(usage.clone());
                    }
                }
            }
            "content_block_start" => {
                let index = event["index"].as_u64().unwrap_or(self.blocks.len() as u64) as usize;
                if index != self.blocks.len() {
                    return Err(BackendError::Terminal(format!(
                        "the stream started content block {index} after {} blocks",
                        self.blocks.len()
                    )));
                }
                let block = event["content_block"].clone();
                if block["type"] == "tool_use" {
                    watcher.on(AnswerEvent::ToolCall(block["name"].as_str().unwrap_or_default()));
                }
                if let Some(text) = block["text"].as_str().filter(|text| !text.is_empty()) {
                    watcher.on(AnswerEvent::Text(text));
                }
                self.blocks.push((block, String::new()));
            }
            "content_block_delta" => {
                let index = event["index"].as_u64().unwrap_or(0) as usize;
                let Some((block, input)) = self.blocks.get_mut(index) else {
                    return Err(BackendError::Terminal(format!(
                        "the stream sent a delta for content block {index}, which it did not start"
                    )));
                };
                let delta = &event["delta"];
                let append = |block: &mut Value, field: &str, piece: &str| {
                    let text = block[field].as_str().unwrap_or_default().to_string() + piece;
                    block[field] = Value::String(text);
                };
                match delta["type"].as_str() {
                    Some("text_delta") => {
                        let piece = delta["text"].as_str().unwrap_or_default();
                        append(block, "text", piece);
                        watcher.on(AnswerEvent::Text(piece));
                    }
                    Some("input_json_delta") => {
                        input.push_str(delta["partial_json"].as_str().unwrap_or_default())
                    }
                    Some("thinking_delta") => {
                        append(block, "thinking", delta["thinking"].as_str().unwrap_or_default())
                    }
                    Some("signature_delta") => {
                        append(block, "signature", delta["signature"].as_str().unwrap_or_default())
                    }
                    _ => {}
                }
            }
            "message_delta" => {
                if let Some(reason) = event["delta"]["stop_reason"].as_str() {
                    self.message.insert("stop_reason".into(), Value::String(reason.to_string()));
                    self.stopped = true;
                }
                if let Some(usage) = event["usage"].as_object() {
                    // Counts here are the totals so far, not increments.
                    self.usage.extend(
                        usage.iter().filter(|(_, v)| !v.is_null()).map(|(k, v)| (k.clone(), v.clone())),
                    );
                }
            }
            "message_stop" => {
                self.stopped = true;
                return Ok(Step::Done);
            }
            "error" => return Err(super::http::stream_error(&message.data)),
            _ => {} // `ping`, `content_block_stop`, and events added later
        }
        Ok(Step::More)
    }

    fn started(&self) -> bool {
        self.started
    }

    fn finished(&self) -> bool {
        self.stopped
    }
}

impl AnthropicEvents {
    /// The answer as a whole Messages API response.
    pub fn into_message(mut self) -> Result<Value, BackendError> {
        let mut content = Vec::with_capacity(self.blocks.len());
        for (mut block, input) in self.blocks {
            if block["type"] == "tool_use" {
                block["input"] = match input.trim() {
                    "" => json!({}),
                    text => serde_json::from_str(text).map_err(|error| {
                        BackendError::Terminal(format!(
                            "the stream's tool call `{}` has input that is not JSON ({error}): {}",
                            block["name"].as_str().unwrap_or_default(),
                            super::http::excerpt(text, 200)
                        ))
                    })?,
                };
            }
            content.push(block);
        }
        self.message.insert("content".into(), Value::Array(content));
        self.message.insert("usage".into(), Value::Object(self.usage));
        Ok(Value::Object(self.message))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Mutex;

    /// What a watcher heard, one line per event.
    #[derive(Default)]
    struct Heard(Mutex<Vec<String>>);

    impl AnswerWatcher for Heard {
        fn on(&self, event: AnswerEvent<'_>) {
            self.0.lock().unwrap().push(format!("{event:?}"));
        }
    }

    #[test]
    fn events_are_read_across_any_split_of_the_bytes() {
        let stream = b"event: a\r\ndata: {\"x\":\r\ndata: 1}\r\n\r\n: ping\n\ndata: [DONE]\n\n";
        for size in 1..stream.len() {
            let mut reader = SseReader::default();
            let mut messages = Vec::new();
            for piece in stream.chunks(size) {
                messages.extend(reader.feed(piece).unwrap());
            }
            assert_eq!(reader.finish(), None);
            assert_eq!(
                messages,
                [
                    SseMessage { event: Some("a".into()), data: "{\"x\":\n1}".into() },
                    SseMessage { event: None, data: "[DONE]".into() },
                ],
                "split every {size} bytes"
            );
        }
        let mut reader = SseReader::default();
        assert!(reader.feed(b"data: last").unwrap().is_empty());
        assert_eq!(reader.finish(), Some(SseMessage { event: None, data: "last".into() }));
    }

    fn data(text: &str) -> SseMessage {
        SseMessage { event: None, data: text.to_string() }
    }

    #[test]
    fn openai_chunks_make_the_whole_completion() {
        let watcher = Heard::default();
        let mut chunks = OpenAiChunks::default();
        for chunk in [
            r#"{"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":"Let"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"content":" me"}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"id":"c1","type":"function","function":{"name":"shell","arguments":""}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"{\"command\":"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{"tool_calls":[{"index":0,"function":{"arguments":"\"ls\"}"}}]}}]}"#,
            r#"{"choices":[{"index":0,"delta":{},"finish_reason":"tool_calls"}]}"#,
            r#"{"choices":[],"usage":{"prompt_tokens":9,"completion_tokens":4}}"#,
        ] {
            assert!(matches!(chunks.take(&data(chunk), &watcher).unwrap(), Step::More));
        }
        assert!(matches!(chunks.take(&data("[DONE]"), &watcher).unwrap(), Step::Done));
        assert!(chunks.finished() && chunks.has_usage());
        let response = super::super::openai::parse_response(&chunks.into_completion()).unwrap();
        assert_eq!(response.text, "Let me");
        assert_eq!(response.tool_calls[0].id, "c1");
        assert_eq!(response.tool_calls[0].arguments["command"], "ls");
        assert_eq!(response.stop_reason.as_deref(), Some("tool_calls"));
        assert_eq!(response.usage, crate::usage::Usage::new(9, 4));
        assert_eq!(*watcher.0.lock().unwrap(), [r#"Text("Let")"#, r#"Text(" me")"#, r#"ToolCall("shell")"#]);
        let error = OpenAiChunks::default()
            .take(&data(r#"{"error":{"message":"model overloaded"}}"#), &watcher)
            .err()
            .unwrap();
        assert!(matches!(error, BackendError::Transient(_)), "{error:?}");
    }

    #[test]
    fn anthropic_events_make_the_whole_message() {
        let watcher = Heard::default();
        let mut events = AnthropicEvents::default();
        for event in [
            r#"{"type":"message_start","message":{"id":"msg","model":"claude-x","content":[],"stop_reason":null,"usage":{"input_tokens":20,"cache_read_input_tokens":5,"output_tokens":1}}}"#,
            r#"{"type":"content_block_start","index":0,"content_block":{"type":"thinking","thinking":""}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"thinking_delta","thinking":"hmm"}}"#,
            r#"{"type":"content_block_delta","index":0,"delta":{"type":"signature_delta","signature":"sig"}}"#,
            r#"{"type":"content_block_stop","index":0}"#,
            r#"{"type":"content_block_start","index":1,"content_block":{"type":"text","text":""}}"#,
            r#"{"type":"content_block_delta","index":1,"delta":{"type":"text_delta","text":"Looking."}}"#,
            r#"{"type":"content_block_start","index":2,"content_block":{"type":"tool_use","id":"t1","name":"glob","input":{}}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":"{\"pattern\":"}}"#,
            r#"{"type":"content_block_delta","index":2,"delta":{"type":"input_json_delta","partial_json":" \"*.rs\"}"}}"#,
            r#"{"type":"ping"}"#,
            r#"{"type":"message_delta","delta":{"stop_reason":"tool_use"},"usage":{"output_tokens":12}}"#,
        ] {
            assert!(matches!(events.take(&data(event), &watcher).unwrap(), Step::More), "{event}");
        }
        assert!(matches!(events.take(&data(r#"{"type":"message_stop"}"#), &watcher).unwrap(), Step::Done));
        let response = super::super::anthropic::parse_response(&events.into_message().unwrap()).unwrap();
        assert_eq!(response.text, "Looking.");
        assert_eq!(response.tool_calls[0].arguments["pattern"], "*.rs");
        assert_eq!(response.reasoning, [json!({"type": "thinking", "thinking": "hmm", "signature": "sig"})]);
        assert_eq!(response.usage, crate::usage::Usage::new(25, 12));
        assert_eq!(response.stop_reason.as_deref(), Some("tool_use"));
        assert_eq!(*watcher.0.lock().unwrap(), [r#"Text("Looking.")"#, r#"ToolCall("glob")"#]);
        let overloaded = r#"{"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}"#;
        let error = AnthropicEvents::default().take(&data(overloaded), &watcher).err().unwrap();
        assert!(matches!(error, BackendError::Transient(_)), "{error:?}");
        let refused = r#"{"type":"error","error":{"type":"invalid_request_error","message":"bad"}}"#;
        let error = AnthropicEvents::default().take(&data(refused), &watcher).err().unwrap();
        assert!(matches!(error, BackendError::Terminal(_)), "{error:?}");
    }
}
