//! A loopback proxy in front of a real model server that records every exchange: what fabro
//! asked (method, path, JSON body) and what the server answered (status, JSON body). Tests of
//! `local_models.rs` read the request shapes (`max_tokens`, the messages) and the rejections
//! from it, whatever the model said.

#![allow(dead_code)]

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::sync::{Arc, Mutex};

use serde_json::Value;

use super::llm_server::read_request;
use super::model_server::ModelServer;

/// One request and its answer.
#[derive(Debug, Clone)]
pub struct Exchange {
    pub method: String,
    pub path: String,
    /// `null` for a request without a JSON body.
    pub request: Value,
    pub status: u16,
    /// `null` for an answer that is not JSON.
    pub response: Value,
}

impl Exchange {
    /// A chat completion request.
    pub fn is_chat(&self) -> bool {
        self.method == "POST" && self.path.ends_with("/chat/completions")
    }

    /// Whether the request offered tools (an agent stage's own call, not a side call).
    pub fn offers_tools(&self) -> bool {
        self.request["tools"].as_array().is_some_and(|tools| !tools.is_empty())
    }

    /// The input tokens the server counted: `usage.prompt_tokens` of an answer (of a streamed
    /// answer's events, where the server sends it), or "P in the messages" of llama-cpp-python's
    /// rejection for the context length.
    pub fn prompt_tokens(&self) -> Option<u64> {
        let reported = |answer: &Value| answer["usage"]["prompt_tokens"].as_u64();
        if let Some(events) = self.response.as_str() {
            return events
                .lines()
                .filter_map(|line| serde_json::from_str::<Value>(line.strip_prefix("data: ")?).ok())
                .find_map(|event| reported(&event));
        }
        if let Some(tokens) = reported(&self.response) {
            return Some(tokens);
        }
        let message = self.response["error"]["message"].as_str()?;
        let (before, _) = message.split_once(" in the messages")?;
        before.rsplit(['(', ' ']).next()?.parse().ok()
    }

    /// Whether fabro asked for a streamed answer.
    pub fn streamed(&self) -> bool {
        self.request["stream"] == true
    }

    /// Whether the server refused the request for its length (HTTP 400, context length).
    pub fn rejected_for_length(&self) -> bool {
        self.status == 400 && self.response.to_string().contains("maximum context length")
    }
}

/// The running proxy; it stops with the test process.
pub struct RecordingProxy<'a> {
    pub port: u16,
    server: &'a ModelServer,
    exchanges: Arc<Mutex<Vec<Exchange>>>,
}

impl<'a> RecordingProxy<'a> {
    /// A proxy on a free loopback port that forwards to `server`.
    pub fn start(server: &'a ModelServer) -> RecordingProxy<'a> {
        let listener = TcpListener::bind("127.0.0.1:0").expect("bind loopback");
        let port = listener.local_addr().expect("address").port();
        let exchanges = Arc::new(Mutex::new(Vec::new()));
        let recorded = exchanges.clone();
        let upstream = server.port;
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let recorded = recorded.clone();
                std::thread::spawn(move || forward(stream, upstream, &recorded));
            }
        });
        RecordingProxy { port, server, exchanges }
    }

    /// The base URL fabro is given (`http://127.0.0.1:PORT/v1`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// [`ModelServer::config`], with the provider reached through the proxy.
    pub fn config(&self, settings: &[&str]) -> String {
        self.server.config(settings).replace(&self.server.url(), &self.url())
    }

    pub fn exchanges(&self) -> Vec<Exchange> {
        self.exchanges.lock().unwrap().clone()
    }

    /// The chat completion requests, in the order they came.
    pub fn chats(&self) -> Vec<Exchange> {
        self.exchanges().into_iter().filter(Exchange::is_chat).collect()
    }

    /// Every exchange as a line, for assertion messages.
    pub fn shown(&self) -> String {
        let lines: Vec<String> = self
            .exchanges()
            .iter()
            .map(|exchange| {
                let messages = exchange.request["messages"].as_array().map_or(0, Vec::len);
                format!(
                    "{} {} -> {}: {} messages, max_tokens {}, tools {}, prompt tokens {:?}; {}",
                    exchange.method,
                    exchange.path,
                    exchange.status,
                    messages,
                    exchange.request["max_tokens"],
                    exchange.offers_tools(),
                    exchange.prompt_tokens(),
                    exchange.response.to_string().chars().take(300).collect::<String>()
                )
            })
            .collect();
        lines.join("\n")
    }
}

/// Sends one request on to the server on `upstream` and its answer back as it came, and records
/// both.
fn forward(mut client: TcpStream, upstream: u16, recorded: &Mutex<Vec<Exchange>>) {
    let Some(request) = read_request(&client) else { return };
    let raw = relay(upstream, &request.method, &request.path, &request.body).unwrap_or_else(|error| {
        let body = format!(r#"{{"error": {{"message": "the recording proxy: {error}"}}}}"#);
        format!(
            "HTTP/1.1 502 Bad Gateway\r\ncontent-length: {}\r\nconnection: close\r\n\r\n{body}",
            body.len()
        )
        .into_bytes()
    });
    let text = String::from_utf8_lossy(&raw);
    let (head, body) = text.split_once("\r\n\r\n").unwrap_or((&text, ""));
    let status = head.split_whitespace().nth(1).and_then(|code| code.parse().ok()).unwrap_or(0);
    let body = if head.to_ascii_lowercase().contains("transfer-encoding: chunked") {
        dechunk(body)
    } else {
        body.to_string()
    };
    recorded.lock().unwrap().push(Exchange {
        method: request.method,
        path: request.path,
        request: serde_json::from_str(&request.body).unwrap_or(Value::Null),
        status,
        // A streamed answer is kept as its text (server-sent events).
        response: serde_json::from_str(&body).unwrap_or(Value::String(body)),
    });
    let _ = client.write_all(&raw);
}

/// One HTTP/1.1 exchange with the server, the connection closed after it: the raw answer.
fn relay(port: u16, method: &str, path: &str, body: &str) -> std::io::Result<Vec<u8>> {
    let mut stream = TcpStream::connect(("127.0.0.1", port))?;
    write!(
        stream,
        "{method} {path} HTTP/1.1\r\nhost: 127.0.0.1:{port}\r\ncontent-type: application/json\r\n\
         content-length: {}\r\nconnection: close\r\n\r\n{body}",
        body.len()
    )?;
    let mut raw = Vec::new();
    stream.read_to_end(&mut raw)?;
    Ok(raw)
}

/// The body of a chunked answer.
fn dechunk(mut body: &str) -> String {
    let mut out = String::new();
    while let Some((size, rest)) = body.split_once("\r\n") {
        let Ok(size) = usize::from_str_radix(size.trim(), 16) else { break };
        if size == 0 || rest.len() < size {
            break;
        }
        out.push_str(&rest[..size]);
        body = rest[size..].trim_start_matches("\r\n");
    }
    out
}
