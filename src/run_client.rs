//! A client of the run service's API (`fabro serve`, `/api/v1`), for the commands that take
//! `--server URL`: submit a run, read its status and the gate it waits at, answer it, cancel it,
//! follow its events. The URL is the one `fabro serve` prints; a `?token=` in it (or
//! `FABRO_SERVER_TOKEN`) is sent as `Authorization: Bearer`.

use std::time::Duration;

use serde_json::Value;

use crate::event_log::LoggedEvent;

/// The environment variable read for the service's token when the URL carries none.
pub const TOKEN_ENV: &str = "FABRO_SERVER_TOKEN";

/// How long one API call may take (the event stream excepted).
const CALL_TIMEOUT: Duration = Duration::from_secs(30);

/// Why a call to the service failed.
#[derive(Debug, thiserror::Error)]
pub enum ClientError {
    #[error("`{0}` is not a URL of a fabro service (e.g. http://127.0.0.1:8080/)")]
    BadUrl(String),
    #[error("cannot reach the fabro service at {url}: {message}")]
    Unreachable { url: String, message: String },
    /// The service answered with an error: its HTTP status, stable code and message.
    #[error("the fabro service refused: {message} ({code})")]
    Refused { status: u16, code: String, message: String, diagnostics: Vec<String> },
    #[error("the fabro service answered what is not its API's JSON: {0}")]
    Unexpected(String),
}

/// A run service at a base URL.
#[derive(Debug, Clone)]
pub struct RunClient {
    base: String,
    token: Option<String>,
    http: reqwest::Client,
}

impl RunClient {
    /// The service at `url` (`http://HOST:PORT/`, with or without `?token=`).
    pub fn new(url: &str) -> Result<RunClient, ClientError> {
        let parsed = reqwest::Url::parse(url).map_err(|_| ClientError::BadUrl(url.to_string()))?;
        if !matches!(parsed.scheme(), "http" | "https") || parsed.host_str().is_none() {
            return Err(ClientError::BadUrl(url.to_string()));
        }
        let token = parsed
            .query_pairs()
            .find(|(key, _)| key == "token")
            .map(|(_, value)| value.into_owned())
            .or_else(|| std::env::var(TOKEN_ENV).ok())
            .filter(|token| !token.is_empty());
        let mut base = parsed.clone();
        base.set_query(None);
        base.set_fragment(None);
        let base = base.as_str().trim_end_matches('/').to_string();
        let http = reqwest::Client::builder()
            .build()
            .map_err(|error| ClientError::Unreachable { url: base.clone(), message: error.to_string() })?;
        Ok(RunClient { base, token, http })
    }

    /// Submits a run (`{"source": ...}` or `{"workflow": ...}` and the rest of the API's new-run
    /// body); its id.
    pub async fn submit(&self, body: &Value) -> Result<String, ClientError> {
        let answer = self.call(reqwest::Method::POST, "/runs", Some(body)).await?;
        answer["id"].as_str().map(str::to_string).ok_or_else(|| ClientError::Unexpected(answer.to_string()))
    }

    /// The service's runs, newest first.
    pub async fn runs(&self) -> Result<Vec<Value>, ClientError> {
        let runs = self.call(reqwest::Method::GET, "/runs", None).await?;
        Ok(runs.as_array().cloned().unwrap_or_default())
    }

    /// The run with id `id` (or a unique prefix of it): as `GET /api/v1/runs/{id}` answers it.
    pub async fn run(&self, id: &str) -> Result<Value, ClientError> {
        let id = self.resolve(id).await?;
        self.call(reqwest::Method::GET, &format!("/runs/{id}"), None).await
    }

    /// The full id of the run `id` names: itself, or the one run whose id starts with it.
    pub async fn resolve(&self, id: &str) -> Result<String, ClientError> {
        if uuid::Uuid::try_parse(id).is_ok() {
            return Ok(id.to_string());
        }
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Err(refused_locally(format!("`{id}` is not a run id or the start of one")));
        }
        let runs = self.call(reqwest::Method::GET, &format!("/runs?q={id}"), None).await?;
        let matching: Vec<&str> = runs
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|run| run["id"].as_str())
            .filter(|run_id| run_id.starts_with(id))
            .collect();
        match matching.as_slice() {
            [one] => Ok(one.to_string()),
            [] => Err(ClientError::Refused {
                status: 404,
                code: "not_found".into(),
                message: format!("no run `{id}` on {}", self.base),
                diagnostics: Vec::new(),
            }),
            many => Err(refused_locally(format!(
                "`{id}` is the start of {} run ids; give more of it",
                many.len()
            ))),
        }
    }

    /// Cancels the run `id`: the service's answer (`status`: `canceled` or `canceling`).
    pub async fn cancel(&self, id: &str) -> Result<Value, ClientError> {
        self.call(
            reqwest::Method::POST,
            &format!("/runs/{id}/cancel"),
            Some(&Value::Object(Default::default())),
        )
        .await
    }

    /// Answers the gate the run `id` waits at: a choice's target node, or free text.
    pub async fn answer(&self, id: &str, answer: &Value) -> Result<Value, ClientError> {
        self.call(reqwest::Method::POST, &format!("/runs/{id}/answer"), Some(answer)).await
    }

    /// The run's events after `after` (a seq), as the service streams them, each given to `each`
    /// as it arrives; returns the last seq seen when the stream ends (the run settled).
    pub async fn follow_events(
        &self,
        id: &str,
        after: u64,
        mut each: impl FnMut(LoggedEvent),
    ) -> Result<u64, ClientError> {
        let url = format!("{}/api/v1/runs/{id}/events", self.base);
        let mut request = self.http.get(&url).header("last-event-id", after.to_string());
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        let response = request.send().await.map_err(|error| self.unreachable(error))?;
        if !response.status().is_success() {
            return Err(refusal(response).await);
        }
        let mut last = after;
        let mut pending = Vec::new();
        let mut response = response;
        while let Some(chunk) = response.chunk().await.map_err(|error| self.unreachable(error))? {
            pending.extend_from_slice(&chunk);
            while let Some(end) = pending.windows(2).position(|pair| pair == b"\n\n") {
                let message: Vec<u8> = pending.drain(..end + 2).collect();
                let text = String::from_utf8_lossy(&message);
                let data: Vec<&str> = text.lines().filter_map(|line| line.strip_prefix("data:")).collect();
                let data = data.iter().map(|line| line.strip_prefix(' ').unwrap_or(line)).collect::<Vec<_>>();
                if let Some(event) = LoggedEvent::from_line(&data.join("\n")) {
                    last = last.max(event.seq);
                    each(event);
                }
            }
        }
        Ok(last)
    }

    async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<&Value>,
    ) -> Result<Value, ClientError> {
        let url = format!("{}/api/v1{path}", self.base);
        let mut request = self.http.request(method, &url).timeout(CALL_TIMEOUT);
        if let Some(token) = &self.token {
            request = request.bearer_auth(token);
        }
        if let Some(body) = body {
            // JSON and no Origin: what the service takes from a program.
            request = request.header("content-type", "application/json").body(body.to_string());
        }
        let response = request.send().await.map_err(|error| self.unreachable(error))?;
        if !response.status().is_success() {
            return Err(refusal(response).await);
        }
        if response.status() == reqwest::StatusCode::NO_CONTENT {
            return Ok(Value::Null);
        }
        let text = response.text().await.map_err(|error| self.unreachable(error))?;
        serde_json::from_str(&text).map_err(|_| ClientError::Unexpected(crate::excerpt::clip(&text, 200)))
    }

    fn unreachable(&self, error: reqwest::Error) -> ClientError {
        let mut message = error.to_string();
        let mut source = std::error::Error::source(&error);
        while let Some(cause) = source {
            message = format!("{message}: {cause}");
            source = cause.source();
        }
        ClientError::Unreachable { url: self.base.clone(), message }
    }
}

/// A refusal decided here, before asking the service.
fn refused_locally(message: String) -> ClientError {
    ClientError::Refused { status: 400, code: "bad_request".into(), message, diagnostics: Vec::new() }
}

/// The service's JSON error, or what it said instead.
async fn refusal(response: reqwest::Response) -> ClientError {
    let status = response.status().as_u16();
    let text = response.text().await.unwrap_or_default();
    let parsed: Option<Value> = serde_json::from_str(&text).ok();
    match parsed.as_ref().and_then(|value| value.get("error")) {
        Some(error) => ClientError::Refused {
            status,
            code: error["code"].as_str().unwrap_or("unknown").to_string(),
            message: error["message"].as_str().unwrap_or_default().to_string(),
            diagnostics: error["diagnostics"]
                .as_array()
                .into_iter()
                .flatten()
                .filter_map(|line| line.as_str().map(str::to_string))
                .collect(),
        },
        None => ClientError::Unexpected(format!("HTTP {status}: {}", crate::excerpt::clip(&text, 200))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_url_gives_the_base_and_the_token() {
        let client = RunClient::new("http://127.0.0.1:8080/?token=a%26b").unwrap();
        assert_eq!(client.base, "http://127.0.0.1:8080");
        assert_eq!(client.token.as_deref(), Some("a&b"));
        let client = RunClient::new("https://fabro.example:9000").unwrap();
        assert_eq!(client.base, "https://fabro.example:9000");
        for bad in ["", "127.0.0.1:8080", "ftp://x/", "http://"] {
            assert!(matches!(RunClient::new(bad), Err(ClientError::BadUrl(_))), "{bad}");
        }
    }
}
