//! One JSON POST to a provider, with the error classes the engine's retry policy needs.
//!
//! Rate limits (429), server errors (5xx, 529 overloaded), request timeouts and connection
//! errors are retried here a few times with exponential backoff, honouring `Retry-After`; when
//! they persist they become [`BackendError::Retryable`] so the stage's `max_retries` applies.
//! 400/401/403/404/422 and answers that are not JSON are [`BackendError::Terminal`] with the
//! provider's own message. Every message is redacted.

use std::time::Duration;

use serde_json::Value;

use super::BackendError;
use crate::redaction::Secrets;

/// How a provider's requests are retried in place before the engine's retry policy takes over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RetrySettings {
    /// Extra attempts after the first (0 = none).
    pub max_retries: u32,
    /// The first backoff delay; doubles per attempt.
    pub base_delay: Duration,
    /// A `Retry-After` longer than this is not waited for here: the error goes to the engine.
    pub max_delay: Duration,
}

impl Default for RetrySettings {
    fn default() -> Self {
        RetrySettings {
            max_retries: 2,
            base_delay: Duration::from_secs(1),
            max_delay: Duration::from_secs(60),
        }
    }
}

/// A reqwest client (rustls) shared by all providers of a run.
pub fn client() -> Result<reqwest::Client, BackendError> {
    reqwest::Client::builder()
        .user_agent(concat!("fabro/", env!("CARGO_PKG_VERSION")))
        .connect_timeout(Duration::from_secs(30))
        .build()
        .map_err(|error| BackendError::Terminal(format!("cannot set up the HTTP client: {error}")))
}

/// One classified failure: the message and, for retryable ones, how long the server asked us to
/// wait.
#[derive(Debug)]
enum Failure {
    Retryable {
        message: String,
        retry_after: Option<Duration>,
    },
    Terminal(String),
    /// The request is too large for the model or the server (never retried as is).
    TooLarge(String),
}

/// POSTs `body` to `url` with `headers`, retrying retryable failures, and returns the parsed JSON.
pub async fn post_json(
    client: &reqwest::Client,
    url: &str,
    headers: &[(&str, String)],
    body: &Value,
    timeout: Duration,
    retry: RetrySettings,
    secrets: &Secrets,
) -> Result<Value, BackendError> {
    let mut attempt = 0;
    loop {
        match post_once(client, url, headers, body, timeout).await {
            Ok(value) => return Ok(value),
            Err(Failure::Terminal(message)) => return Err(BackendError::Terminal(secrets.redact(&message))),
            Err(Failure::TooLarge(message)) => return Err(BackendError::TooLarge(secrets.redact(&message))),
            Err(Failure::Retryable { message, retry_after }) => {
                let backoff = retry.base_delay.saturating_mul(2u32.saturating_pow(attempt));
                let delay = retry_after.unwrap_or(backoff);
                if attempt >= retry.max_retries || delay > retry.max_delay {
                    let tries = attempt + 1;
                    let message =
                        format!("{message} (after {tries} attempt{})", if tries == 1 { "" } else { "s" });
                    return Err(BackendError::Retryable(secrets.redact(&message)));
                }
                tracing::debug!(%url, attempt, delay_ms = delay.as_millis() as u64, "retrying a provider request");
                tokio::time::sleep(delay).await;
                attempt += 1;
            }
        }
    }
}

async fn post_once(
    client: &reqwest::Client,
    url: &str,
    headers: &[(&str, String)],
    body: &Value,
    timeout: Duration,
) -> Result<Value, Failure> {
    let mut request = client.post(url).timeout(timeout).header("content-type", "application/json");
    for (name, value) in headers {
        request = request.header(*name, value);
    }
    let sent = request.body(body.to_string()).send().await;
    let response = sent.map_err(|error| transport_failure(url, timeout, &error))?;
    let status = response.status();
    let retry_after = retry_after(response.headers());
    let text = response.text().await.map_err(|error| transport_failure(url, timeout, &error))?;
    if status.is_success() {
        return serde_json::from_str(&text).map_err(|error| {
            Failure::Terminal(format!(
                "{url} answered with malformed JSON ({error}): {}",
                excerpt(&text, 200)
            ))
        });
    }
    let detail = error_detail(&text);
    let code = status.as_u16();
    let message = format!("{url} answered HTTP {code}: {detail}");
    match code {
        408 | 409 | 425 | 429 | 500..=599 => Err(Failure::Retryable { message, retry_after }),
        401 | 403 => Err(Failure::Terminal(format!("{message} (check the API key)"))),
        413 => Err(Failure::TooLarge(message)),
        400 if is_context_length_error(&text) => Err(Failure::TooLarge(message)),
        _ => Err(Failure::Terminal(message)),
    }
}

/// Whether a 400 answer says the request does not fit the model's context: OpenAI's
/// `context_length_exceeded`, Anthropic's "prompt is too long", and the wordings of
/// OpenAI-compatible servers (vLLM, llama.cpp, Ollama, LiteLLM).
pub fn is_context_length_error(body: &str) -> bool {
    let body = body.to_ascii_lowercase();
    [
        "context_length_exceeded",
        "maximum context length",
        "prompt is too long",
        "exceeds the context window",
        "exceed context window",
        "context window exceeded",
        "context size",
        "too many tokens",
        "input is too long",
        "request too large",
        "request_too_large",
        "reduce the length of the messages",
    ]
    .iter()
    .any(|phrase| body.contains(phrase))
}

fn transport_failure(url: &str, timeout: Duration, error: &reqwest::Error) -> Failure {
    let message = if error.is_timeout() {
        format!("the request to {url} timed out after {}s", timeout.as_secs_f64())
    } else if error.is_connect() {
        format!("cannot connect to {url}: {}", error_chain(error))
    } else {
        format!("the request to {url} failed: {}", error_chain(error))
    };
    Failure::Retryable { message, retry_after: None }
}

/// The error and its sources, joined, so "connection refused" is not lost behind "error sending
/// request".
fn error_chain(error: &dyn std::error::Error) -> String {
    let mut parts = vec![error.to_string()];
    let mut source = error.source();
    while let Some(next) = source {
        let text = next.to_string();
        if !parts.iter().any(|p| p.contains(&text)) {
            parts.push(text);
        }
        source = next.source();
    }
    parts.join(": ")
}

/// `Retry-After` in seconds (the HTTP-date form is rare from APIs and is ignored).
fn retry_after(headers: &reqwest::header::HeaderMap) -> Option<Duration> {
    let value = headers.get(reqwest::header::RETRY_AFTER)?.to_str().ok()?.trim();
    let seconds: f64 = value.parse().ok()?;
    (seconds.is_finite() && seconds >= 0.0).then(|| Duration::from_secs_f64(seconds.min(86_400.0)))
}

/// The provider's error message (`{"error": {"message": ...}}` for both APIs), else the body.
fn error_detail(body: &str) -> String {
    let parsed: Option<Value> = serde_json::from_str(body).ok();
    let message = parsed.as_ref().and_then(|v| {
        v["error"]["message"].as_str().or_else(|| v["error"].as_str()).or_else(|| v["message"].as_str())
    });
    match message {
        Some(message) => excerpt(message, 500),
        None if body.trim().is_empty() => "(empty body)".to_string(),
        None => excerpt(body, 300),
    }
}

/// At most `max` characters of `text` on one line.
pub fn excerpt(text: &str, max: usize) -> String {
    let flat: String = text.trim().chars().map(|c| if c.is_control() { ' ' } else { c }).collect();
    if flat.chars().count() <= max {
        return flat;
    }
    flat.chars().take(max).collect::<String>() + "…"
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_details_come_from_the_provider_message() {
        assert_eq!(error_detail(r#"{"error": {"type": "x", "message": "bad key"}}"#), "bad key");
        assert_eq!(error_detail(r#"{"error": "overloaded"}"#), "overloaded");
        assert_eq!(error_detail("<html>oops</html>"), "<html>oops</html>");
        assert_eq!(error_detail(""), "(empty body)");
    }

    #[test]
    fn context_length_errors_are_recognized_in_each_providers_wording() {
        for body in [
            r#"{"error": {"message": "This model's maximum context length is 8192 tokens. However, your messages resulted in 9000 tokens.", "code": "context_length_exceeded"}}"#,
            r#"{"type": "error", "error": {"type": "invalid_request_error", "message": "prompt is too long: 210000 tokens > 200000 maximum"}}"#,
            r#"{"error": {"message": "the request exceeds the available context size, try increasing it"}}"#,
            r#"{"object": "error", "message": "Input is too long for requested model."}"#,
        ] {
            assert!(is_context_length_error(body), "{body}");
        }
        assert!(!is_context_length_error(r#"{"error": {"message": "invalid model"}}"#));
    }

    #[test]
    fn retry_after_reads_seconds() {
        let mut headers = reqwest::header::HeaderMap::new();
        assert_eq!(retry_after(&headers), None);
        headers.insert(reqwest::header::RETRY_AFTER, "2".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_secs(2)));
        headers.insert(reqwest::header::RETRY_AFTER, "0.5".parse().unwrap());
        assert_eq!(retry_after(&headers), Some(Duration::from_millis(500)));
        headers.insert(reqwest::header::RETRY_AFTER, "Wed, 21 Oct 2015 07:28:00 GMT".parse().unwrap());
        assert_eq!(retry_after(&headers), None);
    }

    #[test]
    fn excerpts_are_short_single_lines() {
        assert_eq!(excerpt("a\nb", 10), "a b");
        assert_eq!(excerpt(&"é".repeat(20), 5), "ééééé…");
    }
}
