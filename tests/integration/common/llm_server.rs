//! A loopback HTTP/1.1 server that speaks the Anthropic Messages and OpenAI Chat Completions
//! wire formats with scripted replies, for driving the real providers offline. It records every
//! request (path, headers, body). Requests whose body asks for a conversation summary are
//! answered from a separate queue, so compaction can happen at any turn. A GET (fabro's check
//! that the server is there before a run) is answered with an empty model list and counted in
//! [`LlmServer::probes`], apart from the scripted requests. [`ServerOptions`] starts it on a
//! given port, serves the API only under a path (`/v1`, as llama.cpp and vLLM do), or makes it
//! stop listening once its scripted replies are used up (a server that goes away mid-run).
//!
//! A request that asks for a stream (`"stream": true`) gets its scripted answer as server-sent
//! events, in each API's chunks (text in pieces, tool calls with their arguments in two halves,
//! usage at the end where OpenAI's `stream_options.include_usage` asks for it), [`Reply::paced`]
//! between events; [`LlmServer::streams`] says how each stream ended (whole, or cut off by the
//! client). [`Reply::empty_stream`] ends a stream with no event, as llama-cpp-python does for a
//! streamed call with tools.

#![allow(dead_code)]

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// One scripted HTTP answer.
#[derive(Debug, Clone)]
pub struct Reply {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub body: String,
    pub delay: Duration,
    /// Between the events of a streamed answer.
    pub pace: Duration,
    /// Answer a streamed request with an event stream that ends before any event.
    pub empty_stream: bool,
}

impl Reply {
    pub fn json(value: Value) -> Reply {
        Reply::status(200, &value.to_string())
    }

    pub fn status(status: u16, body: &str) -> Reply {
        Reply {
            status,
            headers: Vec::new(),
            body: body.to_string(),
            delay: Duration::ZERO,
            pace: Duration::ZERO,
            empty_stream: false,
        }
    }

    /// A 200 event stream with no event in it (and an unstreamed request gets `fallback`).
    pub fn empty_stream(fallback: Reply) -> Reply {
        Reply { empty_stream: true, ..fallback }
    }

    /// Streamed, with `pace` between its events.
    pub fn paced(mut self, pace: Duration) -> Reply {
        self.pace = pace;
        self
    }

    pub fn header(mut self, name: &str, value: &str) -> Reply {
        self.headers.push((name.to_string(), value.to_string()));
        self
    }

    pub fn delayed(mut self, delay: Duration) -> Reply {
        self.delay = delay;
        self
    }

    /// The answer with `tokens` as its input tokens (OpenAI's `prompt_tokens`, Anthropic's
    /// `input_tokens`).
    pub fn with_input_tokens(mut self, tokens: u64) -> Reply {
        let Ok(mut answer) = serde_json::from_str::<Value>(&self.body) else { return self };
        let usage = &mut answer["usage"];
        let field = if usage.get("input_tokens").is_some() { "input_tokens" } else { "prompt_tokens" };
        usage[field] = json!(tokens);
        self.body = answer.to_string();
        self
    }
}

/// A request the server received.
#[derive(Debug, Clone)]
pub struct Request {
    pub path: String,
    /// Lower-cased names.
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// What the model of an OpenAI chat request reads, piece by piece: each message's text, each tool
/// call's name and arguments, and each tool's name, description and parameter schema (what fabro
/// counts for its token estimates).
pub fn read_by_the_model(body: &Value) -> Vec<String> {
    let list = |value: &Value| value.as_array().cloned().unwrap_or_default();
    let text = |value: &Value| value.as_str().unwrap_or("").to_string();
    let mut pieces = Vec::new();
    for message in list(&body["messages"]) {
        pieces.push(text(&message["content"]));
        for call in list(&message["tool_calls"]) {
            pieces.extend([text(&call["function"]["name"]), text(&call["function"]["arguments"])]);
        }
    }
    for tool in list(&body["tools"]) {
        let function = &tool["function"];
        pieces.extend([
            text(&function["name"]),
            text(&function["description"]),
            function["parameters"].to_string(),
        ]);
    }
    pieces
}

/// The characters of [`read_by_the_model`].
pub fn counted_chars(body: &Value) -> usize {
    read_by_the_model(body).iter().map(String::len).sum()
}

impl Request {
    pub fn json(&self) -> Value {
        serde_json::from_str(&self.body).unwrap_or(Value::Null)
    }

    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers.iter().find(|(n, _)| n == name).map(|(_, v)| v.as_str())
    }
}

#[derive(Default)]
struct Script {
    main: VecDeque<Reply>,
    summaries: VecDeque<Reply>,
    requests: Vec<Request>,
    probes: Vec<String>,
    /// Requests outside it answer 404 (none: everything is served).
    mount: Option<String>,
    /// The model list (`GET .../models`) and llama.cpp's `/props` (none: 404).
    models: Option<Value>,
    props: Option<Value>,
    streams: Vec<StreamEnd>,
    input_counter: Option<InputCounter>,
}

/// How one streamed answer ended.
#[derive(Debug, Clone, PartialEq)]
pub struct StreamEnd {
    /// The events written before the end.
    pub events: usize,
    /// Of how many.
    pub of: usize,
    /// Whether the client closed the connection before the last event.
    pub cut_off: bool,
    /// From the request to the end.
    pub after: Duration,
}

/// How an [`LlmServer`] listens.
#[derive(Debug, Clone, Default)]
pub struct ServerOptions {
    /// 0: any free port.
    pub port: u16,
    /// Serve only paths under this prefix (e.g. `/v1`); others answer 404 as llama.cpp does.
    pub mount: Option<String>,
    /// Stop listening (connections are refused) once the scripted main replies are used up;
    /// connections are then served one at a time.
    pub close_when_done: bool,
    /// What `GET .../models` answers (default: an empty list).
    pub models: Option<Value>,
    /// What `GET /props` answers, as llama.cpp's server does (default: 404).
    pub props: Option<Value>,
    /// Counts each request's input tokens for its answer's `usage`, as a real server would
    /// (default: the scripted counts stand).
    pub input_counter: Option<InputCounter>,
}

/// Counts the input tokens of a request (its JSON body), a real tokenizer's count, say.
#[derive(Clone)]
pub struct InputCounter(pub Arc<dyn Fn(&Value) -> u64 + Send + Sync>);

impl std::fmt::Debug for InputCounter {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("InputCounter")
    }
}

/// The running server; it stops with the test process.
pub struct LlmServer {
    pub port: u16,
    script: Arc<Mutex<Script>>,
}

/// Mark summarizer calls (`src/agent/context/compaction/summary.rs`) and completion records of
/// task checkpoints (`checkpoint.rs`): both are served from the `summaries` replies.
const SUMMARY_MARKERS: &[&str] = &["You summarize the history", "You write the completion record"];

fn is_summary(body: &str) -> bool {
    SUMMARY_MARKERS.iter().any(|marker| body.contains(marker))
}

impl LlmServer {
    /// Serves `main` replies in order, and `summaries` for summarizer calls.
    pub fn start(main: Vec<Reply>, summaries: Vec<Reply>) -> LlmServer {
        LlmServer::start_with(main, summaries, ServerOptions::default())
    }

    /// Like [`LlmServer::start`], listening as `options` say.
    pub fn start_with(main: Vec<Reply>, summaries: Vec<Reply>, options: ServerOptions) -> LlmServer {
        let listener = TcpListener::bind(("127.0.0.1", options.port)).expect("bind loopback");
        let port = listener.local_addr().expect("address").port();
        let script = Arc::new(Mutex::new(Script {
            main: main.into(),
            summaries: summaries.into(),
            mount: options.mount,
            models: options.models,
            props: options.props,
            input_counter: options.input_counter,
            ..Script::default()
        }));
        let shared = script.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let script = shared.clone();
                if !options.close_when_done {
                    std::thread::spawn(move || serve(stream, &script));
                    continue;
                }
                serve(stream, &script);
                if script.lock().unwrap().main.is_empty() {
                    // The listener goes with this thread: later connections are refused.
                    break;
                }
            }
        });
        LlmServer { port, script }
    }

    /// The paths of the GET requests (reachability checks) the server answered.
    pub fn probes(&self) -> Vec<String> {
        self.script.lock().unwrap().probes.clone()
    }

    /// `http://127.0.0.1:PORT` plus `suffix` (e.g. `/v1`).
    pub fn url(&self, suffix: &str) -> String {
        format!("http://127.0.0.1:{}{suffix}", self.port)
    }

    pub fn requests(&self) -> Vec<Request> {
        self.script.lock().unwrap().requests.clone()
    }

    /// Requests that were not summarizer calls.
    pub fn main_requests(&self) -> Vec<Request> {
        self.requests().into_iter().filter(|r| !is_summary(&r.body)).collect()
    }

    /// How each streamed answer ended, in order.
    pub fn streams(&self) -> Vec<StreamEnd> {
        self.script.lock().unwrap().streams.clone()
    }

    pub fn unused_replies(&self) -> usize {
        self.script.lock().unwrap().main.len()
    }
}

/// One HTTP request as it came in: method, path, lower-cased headers, body.
pub struct Incoming {
    pub method: String,
    pub path: String,
    pub headers: Vec<(String, String)>,
    pub body: String,
}

/// Reads one request from `stream` (none when the client went away or sent garbage).
pub fn read_request(stream: &TcpStream) -> Option<Incoming> {
    let _ = stream.set_read_timeout(Some(Duration::from_secs(30)));
    let mut reader = BufReader::new(stream.try_clone().ok()?);
    let mut request_line = String::new();
    reader.read_line(&mut request_line).ok()?;
    let method = request_line.split_whitespace().next().unwrap_or("").to_string();
    let path = request_line.split_whitespace().nth(1).unwrap_or("").to_string();
    let mut headers = Vec::new();
    loop {
        let mut line = String::new();
        if reader.read_line(&mut line).unwrap_or(0) == 0 {
            return None;
        }
        let line = line.trim_end();
        if line.is_empty() {
            break;
        }
        if let Some((name, value)) = line.split_once(':') {
            headers.push((name.trim().to_ascii_lowercase(), value.trim().to_string()));
        }
    }
    let length: usize =
        headers.iter().find(|(n, _)| n == "content-length").and_then(|(_, v)| v.parse().ok()).unwrap_or(0);
    let mut body = vec![0; length];
    reader.read_exact(&mut body).ok()?;
    Some(Incoming { method, path, headers, body: String::from_utf8_lossy(&body).into_owned() })
}

fn serve(stream: TcpStream, script: &Mutex<Script>) {
    let Some(Incoming { method, path, headers, body }) = read_request(&stream) else { return };
    let started = Instant::now();
    let request: Value = serde_json::from_str(&body).unwrap_or(Value::Null);
    let streamed = request["stream"] == true;
    let with_usage = request["stream_options"]["include_usage"] == true;
    let reply = {
        let mut script = script.lock().unwrap();
        let outside = script.mount.as_ref().is_some_and(|mount| !path.starts_with(mount.as_str()));
        let summary = is_summary(&body);
        if method == "GET" {
            script.probes.push(path.clone());
            let reply = if path.ends_with("/props") {
                script.props.clone().map_or_else(not_found, Reply::json)
            } else if outside {
                not_found()
            } else {
                Reply::json(script.models.clone().unwrap_or_else(|| json!({"object": "list", "data": []})))
            };
            drop(script);
            return answer(stream, &reply);
        }
        script.requests.push(Request { path, headers, body });
        if outside {
            drop(script);
            return answer(stream, &not_found());
        }
        let queue = if summary { &mut script.summaries } else { &mut script.main };
        queue.pop_front().unwrap_or_else(|| {
            Reply::status(500, r#"{"error": {"message": "the test server has no more scripted replies"}}"#)
        })
    };
    let counter = script.lock().unwrap().input_counter.clone();
    let reply = match counter {
        Some(counter) if reply.status == 200 => reply.with_input_tokens(counter.0(&request)),
        _ => reply,
    };
    if streamed && reply.status == 200 {
        let events = if reply.empty_stream { Some(Vec::new()) } else { events_of(&reply.body, with_usage) };
        if let Some(events) = events {
            let end = answer_stream(stream, &reply, &events, started);
            script.lock().unwrap().streams.push(end);
            return;
        }
    }
    answer(stream, &reply);
}

/// The server-sent events of a scripted answer (`None`: it is neither API's answer, and goes
/// as JSON).
fn events_of(body: &str, with_usage: bool) -> Option<Vec<String>> {
    let answer: Value = serde_json::from_str(body).ok()?;
    let data = |value: Value| format!("data: {value}\n\n");
    let named = |name: &str, value: Value| format!("event: {name}\ndata: {value}\n\n");
    let pieces = |text: &str| -> Vec<String> {
        let chars: Vec<char> = text.chars().collect();
        chars.chunks(12).map(|piece| piece.iter().collect()).collect()
    };
    let halves = |text: &str| -> [String; 2] {
        let mid = text.char_indices().nth(text.chars().count() / 2).map_or(text.len(), |(at, _)| at);
        [text[..mid].to_string(), text[mid..].to_string()]
    };
    let mut events = Vec::new();
    if let Some(choice) = answer["choices"].get(0) {
        let chunk = |delta: Value, finish: Value| {
            json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "model": answer["model"],
                   "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]})
        };
        events.push(data(chunk(json!({"role": "assistant"}), Value::Null)));
        let message = &choice["message"];
        for piece in pieces(message["content"].as_str().unwrap_or_default()) {
            events.push(data(chunk(json!({"content": piece}), Value::Null)));
        }
        for (index, call) in message["tool_calls"].as_array().into_iter().flatten().enumerate() {
            let function = &call["function"];
            let start = json!({"index": index, "id": call["id"], "type": "function",
                               "function": {"name": function["name"], "arguments": ""}});
            events.push(data(chunk(json!({"tool_calls": [start]}), Value::Null)));
            for half in halves(function["arguments"].as_str().unwrap_or_default()) {
                let more = json!({"index": index, "function": {"arguments": half}});
                events.push(data(chunk(json!({"tool_calls": [more]}), Value::Null)));
            }
        }
        events.push(data(chunk(json!({}), choice["finish_reason"].clone())));
        if with_usage && answer["usage"].is_object() {
            events
                .push(data(json!({"id": "chatcmpl-test", "object": "chat.completion.chunk", "choices": [],
                                   "usage": answer["usage"]})));
        }
        events.push("data: [DONE]\n\n".to_string());
        return Some(events);
    }
    let blocks = answer["content"].as_array().filter(|_| answer["type"] == "message")?;
    let mut start = answer.clone();
    start["content"] = json!([]);
    start["stop_reason"] = Value::Null;
    start["usage"]["output_tokens"] = json!(1);
    events.push(named("message_start", json!({"type": "message_start", "message": start})));
    for (index, block) in blocks.iter().enumerate() {
        let (empty, deltas): (Value, Vec<Value>) = match block["type"].as_str() {
            Some("text") => (
                json!({"type": "text", "text": ""}),
                pieces(block["text"].as_str().unwrap_or_default())
                    .into_iter()
                    .map(|text| json!({"type": "text_delta", "text": text}))
                    .collect(),
            ),
            Some("tool_use") => (
                json!({"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}),
                halves(&block["input"].to_string())
                    .into_iter()
                    .map(|json| json!({"type": "input_json_delta", "partial_json": json}))
                    .collect(),
            ),
            _ => (block.clone(), Vec::new()),
        };
        events.push(named(
            "content_block_start",
            json!({"type": "content_block_start", "index": index, "content_block": empty}),
        ));
        for delta in deltas {
            events.push(named(
                "content_block_delta",
                json!({"type": "content_block_delta", "index": index, "delta": delta}),
            ));
        }
        events.push(named("content_block_stop", json!({"type": "content_block_stop", "index": index})));
    }
    events.push(named(
        "message_delta",
        json!({"type": "message_delta", "delta": {"stop_reason": answer["stop_reason"]},
               "usage": {"output_tokens": answer["usage"]["output_tokens"]}}),
    ));
    events.push(named("message_stop", json!({"type": "message_stop"})));
    Some(events)
}

/// Writes `events` as an event stream, `reply.pace` apart, until the client goes away.
fn answer_stream(mut stream: TcpStream, reply: &Reply, events: &[String], started: Instant) -> StreamEnd {
    std::thread::sleep(reply.delay);
    let head = "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ncache-control: no-cache\r\nconnection: close\r\n\r\n";
    let mut written = 0;
    let mut cut_off = stream.write_all(head.as_bytes()).and_then(|()| stream.flush()).is_err();
    for event in events {
        if cut_off {
            break;
        }
        if written > 0 {
            std::thread::sleep(reply.pace);
        }
        cut_off = stream.write_all(event.as_bytes()).and_then(|()| stream.flush()).is_err();
        written += usize::from(!cut_off);
    }
    if !cut_off && written < events.len() {
        cut_off = true;
    }
    StreamEnd { events: written, of: events.len(), cut_off, after: started.elapsed() }
}

/// What llama.cpp's server answers for a path it does not serve.
fn not_found() -> Reply {
    Reply::status(404, r#"{"error": {"code": 404, "message": "File Not Found", "type": "not_found_error"}}"#)
}

fn answer(stream: TcpStream, reply: &Reply) {
    std::thread::sleep(reply.delay);
    let reason = match reply.status {
        200 => "OK",
        429 => "Too Many Requests",
        _ => "Status",
    };
    let mut response = format!(
        "HTTP/1.1 {} {reason}\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n",
        reply.status,
        reply.body.len()
    );
    for (name, value) in &reply.headers {
        response.push_str(&format!("{name}: {value}\r\n"));
    }
    response.push_str("\r\n");
    response.push_str(&reply.body);
    let mut stream = stream;
    let _ = stream.write_all(response.as_bytes());
    let _ = stream.flush();
}

// Anthropic Messages answers.

pub fn anthropic_text(text: &str, input_tokens: u64, output_tokens: u64) -> Reply {
    Reply::json(json!({
        "id": "msg_test", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": [{"type": "text", "text": text}], "stop_reason": "end_turn",
        "usage": {"input_tokens": input_tokens, "output_tokens": output_tokens}
    }))
}

/// A turn with tool calls: `(id, name, input)`.
pub fn anthropic_tools(text: &str, calls: &[(&str, &str, Value)]) -> Reply {
    let mut content = vec![json!({"type": "text", "text": text})];
    for (id, name, input) in calls {
        content.push(json!({"type": "tool_use", "id": id, "name": name, "input": input}));
    }
    Reply::json(json!({
        "id": "msg_test", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
        "content": content, "stop_reason": "tool_use",
        "usage": {"input_tokens": 100, "output_tokens": 20}
    }))
}

// OpenAI Chat Completions answers.

pub fn openai_text(text: &str, prompt_tokens: u64, completion_tokens: u64) -> Reply {
    Reply::json(json!({
        "id": "chatcmpl-test", "object": "chat.completion", "model": "test-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens}
    }))
}

pub fn openai_tools(calls: &[(&str, &str, Value)]) -> Reply {
    let tool_calls: Vec<Value> = calls
        .iter()
        .map(|(id, name, args)| {
            json!({"id": id, "type": "function", "function": {"name": name, "arguments": args.to_string()}})
        })
        .collect();
    Reply::json(json!({
        "id": "chatcmpl-test", "object": "chat.completion", "model": "test-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": null, "tool_calls": tool_calls},
                     "finish_reason": "tool_calls"}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 10}
    }))
}

/// Every file under `dir` whose bytes contain `needle`.
pub fn files_containing(dir: &std::path::Path, needle: &str) -> Vec<std::path::PathBuf> {
    let mut found = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if std::fs::read(&path)
                .is_ok_and(|bytes| bytes.windows(needle.len()).any(|w| w == needle.as_bytes()))
            {
                found.push(path);
            }
        }
    }
    found
}

/// The names of the tools a request body offered (OpenAI's shape or Anthropic's), in order.
pub fn offered_tools(body: &Value) -> Vec<String> {
    body["tools"]
        .as_array()
        .map(|tools| {
            tools
                .iter()
                .filter_map(|tool| tool["function"]["name"].as_str().or(tool["name"].as_str()))
                .map(str::to_string)
                .collect()
        })
        .unwrap_or_default()
}

/// The contents of the tool results a request body (OpenAI's shape) carries back, oldest first.
pub fn tool_results(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .map(|messages| {
            messages
                .iter()
                .filter(|message| message["role"] == "tool")
                .map(|message| message["content"].as_str().unwrap_or_default().to_string())
                .collect()
        })
        .unwrap_or_default()
}
