//! Hooks around an agent stage's tool calls: `pre_tool_use` hooks decide whether a call runs
//! (allow, block with a reason the model sees, or modify its arguments), `post_tool_use` and
//! `post_tool_use_failure` hooks see its result and can add a note the model reads with it. They
//! come from the settings layers' `[[hooks]]` (parsed in [`crate::lifecycle_hooks`]) and from a
//! stage's `tool_hooks.pre`/`tool_hooks.post`, which are the same hooks written on the node.
//!
//! A hook is a command (`sh -c` in the stage's sandbox, the call as JSON on stdin), an HTTP POST
//! of the same JSON, or a prompt: one question to the stage's small model (else its model) that
//! answers `{"ok": true}` or `{"ok": false, "reason": ...}`. A command answers by its exit code
//! (0 allow, 2 block, anything else blocks with the code) or by a JSON decision on stdout; HTTP
//! and prompt hooks fail open (an error, a timeout or an answer that is not a decision allows
//! the call), commands fail closed, as Fabro has it.

use std::sync::Arc;
use std::time::{Duration, Instant};

use serde_json::{json, Value};

use super::tools::{cap_middle, run_collected, ToolOutput, Toolbox, Unfinished};
use crate::chat::ToolCall;
use crate::llm::chat::ChatProvider;

/// How long a command or HTTP hook may take unless its entry says.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(60);
/// How long a prompt hook may take unless its entry says.
pub const DEFAULT_PROMPT_TIMEOUT: Duration = Duration::from_secs(30);
/// The most of a note (or of a reason) the model is shown.
const NOTE_CHARS: usize = 4_000;

/// When a tool-call hook runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolEvent {
    /// Before the call: it may allow, block or modify it.
    PreToolUse,
    /// After a call that succeeded.
    PostToolUse,
    /// After a call that failed (its result is an error).
    PostToolUseFailure,
}

impl ToolEvent {
    pub const ALL: [ToolEvent; 3] =
        [ToolEvent::PreToolUse, ToolEvent::PostToolUse, ToolEvent::PostToolUseFailure];

    pub fn as_str(self) -> &'static str {
        match self {
            ToolEvent::PreToolUse => "pre_tool_use",
            ToolEvent::PostToolUse => "post_tool_use",
            ToolEvent::PostToolUseFailure => "post_tool_use_failure",
        }
    }

    pub fn parse(text: &str) -> Option<ToolEvent> {
        ToolEvent::ALL.into_iter().find(|event| event.as_str() == text)
    }
}

/// What a tool-call hook does.
#[derive(Debug, Clone)]
pub enum ToolHookAction {
    Command(String),
    Http(HttpTarget),
    /// A one-turn question to a model; `model` must be the stage's model or its small model
    /// (`small`); none: the small model, else the stage's.
    Prompt {
        prompt: String,
        model: Option<String>,
    },
}

/// One tool-call hook.
#[derive(Debug, Clone)]
pub struct ToolHook {
    pub name: String,
    pub event: ToolEvent,
    /// Fires only for calls whose tool name, or the stage's node id, this matches.
    pub matcher: Option<regex::Regex>,
    /// Fires only for calls whose arguments (as compact JSON) this matches.
    pub arguments_matcher: Option<regex::Regex>,
    pub action: ToolHookAction,
    pub timeout: Duration,
    /// A blocking hook's decision counts: a pre hook's block or modify, a post hook's block
    /// (the call's result becomes an error). Notes reach the model either way.
    pub blocking: bool,
}

impl ToolHook {
    /// `tool_hooks.pre`/`tool_hooks.post` of a node: a blocking command hook for every call.
    pub fn of_node(attribute: &str, event: ToolEvent, command: &str) -> ToolHook {
        ToolHook {
            name: attribute.to_string(),
            event,
            matcher: None,
            arguments_matcher: None,
            action: ToolHookAction::Command(command.to_string()),
            timeout: super::tools::HOOK_TIMEOUT,
            blocking: event == ToolEvent::PreToolUse,
        }
    }

    fn fires(&self, event: ToolEvent, node_id: &str, tool: &str, arguments: &str) -> bool {
        self.event == event
            && self.matcher.as_ref().is_none_or(|matcher| matcher.is_match(tool) || matcher.is_match(node_id))
            && self.arguments_matcher.as_ref().is_none_or(|matcher| matcher.is_match(arguments))
    }
}

/// The stage the hooks are told about.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct HookedStage {
    pub run_id: String,
    pub workflow: String,
    pub node_id: String,
    pub visit: u32,
}

/// The tool-call hooks of one stage.
#[derive(Debug, Clone, Default)]
pub struct ToolHooks {
    hooks: Arc<[ToolHook]>,
    stage: HookedStage,
}

/// The models a prompt hook may ask: the stage's, and its small model when it has one (the
/// default).
#[derive(Clone, Copy)]
pub struct HookModel<'a> {
    pub stage: (&'a dyn ChatProvider, &'a str),
    pub small: Option<(&'a dyn ChatProvider, &'a str)>,
}

/// What the pre hooks decided about a call.
#[derive(Debug, Clone, PartialEq)]
pub enum PreDecision {
    /// Run it, with these arguments (a `modify` replaced them).
    Run(Value),
    /// Do not run it: what the model is told.
    Block(String),
}

/// How one hook went, for the stage's events and transcript.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolHookReport {
    pub hook: String,
    pub event: ToolEvent,
    pub blocking: bool,
    pub duration_ms: u64,
    pub exit_code: Option<i32>,
    pub http_status: Option<u16>,
    /// `allow`, `block`, `modify` or `note`, when the hook answered one.
    pub decision: Option<&'static str>,
    /// Why it failed (it could not run, timed out, exited other than 0 or 2, a non-2xx answer).
    pub failure: Option<String>,
}

/// What one hook answered.
#[derive(Debug, Default)]
struct Answer {
    decision: Option<Decision>,
    exit_code: Option<i32>,
    http_status: Option<u16>,
    failure: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
enum Decision {
    Allow,
    Block(String),
    Modify(Value),
    Note(String),
}

impl Decision {
    fn name(&self) -> &'static str {
        match self {
            Decision::Allow => "allow",
            Decision::Block(_) => "block",
            Decision::Modify(_) => "modify",
            Decision::Note(_) => "note",
        }
    }
}

impl ToolHooks {
    pub fn new(hooks: Vec<ToolHook>, stage: HookedStage) -> ToolHooks {
        ToolHooks { hooks: hooks.into(), stage }
    }

    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty()
    }

    fn firing<'h>(&'h self, event: ToolEvent, tool: &'h str, arguments: &Value) -> Vec<&'h ToolHook> {
        if self.hooks.is_empty() {
            return Vec::new();
        }
        let text = arguments.to_string();
        self.hooks.iter().filter(|hook| hook.fires(event, &self.stage.node_id, tool, &text)).collect()
    }

    fn payload(&self, event: ToolEvent, call_id: &str, tool: &str) -> Value {
        let stage = &self.stage;
        json!({"event": event.as_str(), "run_id": stage.run_id, "workflow": stage.workflow,
               "node_id": stage.node_id, "visit": stage.visit, "tool_name": tool, "tool_call_id": call_id})
    }

    /// Runs the `pre_tool_use` hooks of the call `tool(arguments)` in order: the first blocking
    /// hook that blocks decides; a blocking `modify` replaces the arguments the later hooks and
    /// the call see.
    pub async fn before(
        &self,
        toolbox: &Toolbox,
        model: Option<HookModel<'_>>,
        call: &ToolCall,
        report: &mut (dyn FnMut(ToolHookReport) + Send),
    ) -> PreDecision {
        let (call_id, tool) = (call.id.as_str(), call.name.as_str());
        let mut arguments = call.arguments.clone();
        for hook in self.firing(ToolEvent::PreToolUse, tool, &arguments) {
            let mut payload = self.payload(ToolEvent::PreToolUse, call_id, tool);
            payload["tool_input"] = arguments.clone();
            let (answer, duration_ms) = timed(hook.answer(toolbox, model, &payload)).await;
            let decision = answer.decision.clone();
            report(hook.report(&answer, duration_ms));
            if !hook.blocking {
                continue;
            }
            match decision {
                Some(Decision::Block(reason)) => {
                    return PreDecision::Block(format!(
                        "The hook `{}` blocked this `{tool}` call; it did not run. Reason: {}",
                        hook.name,
                        cap_middle(&reason, NOTE_CHARS)
                    ))
                }
                Some(Decision::Modify(replaced)) => arguments = replaced,
                _ => {}
            }
        }
        PreDecision::Run(arguments)
    }

    /// Runs the `post_tool_use` (or, for a failed call, `post_tool_use_failure`) hooks of the
    /// call (with the arguments it ran with), and adds what they say to its result: each note, and for a blocking hook's block
    /// its reason, the result then being an error.
    pub async fn after(
        &self,
        toolbox: &Toolbox,
        model: Option<HookModel<'_>>,
        call: &ToolCall,
        output: &mut ToolOutput,
        report: &mut (dyn FnMut(ToolHookReport) + Send),
    ) {
        let (call_id, tool, arguments) = (call.id.as_str(), call.name.as_str(), &call.arguments);
        let event = if output.is_error { ToolEvent::PostToolUseFailure } else { ToolEvent::PostToolUse };
        for hook in self.firing(event, tool, arguments) {
            let mut payload = self.payload(event, call_id, tool);
            payload["tool_input"] = arguments.clone();
            let key = if output.is_error { "error_message" } else { "tool_output" };
            payload[key] = json!(cap_middle(&output.content, 100_000));
            let (answer, duration_ms) = timed(hook.answer(toolbox, model, &payload)).await;
            let decision = answer.decision.clone();
            report(hook.report(&answer, duration_ms));
            let note = match decision {
                Some(Decision::Note(note)) => note,
                Some(Decision::Block(reason)) if hook.blocking => {
                    output.is_error = true;
                    reason
                }
                Some(Decision::Block(reason)) => reason,
                _ => continue,
            };
            let note = cap_middle(note.trim(), NOTE_CHARS);
            if !note.is_empty() {
                output.content.push_str(&format!("\n\n[hook `{}`] {note}", hook.name));
            }
        }
    }
}

async fn timed<T>(future: impl std::future::Future<Output = T>) -> (T, u64) {
    let clock = Instant::now();
    let value = future.await;
    (value, clock.elapsed().as_millis() as u64)
}

impl ToolHook {
    fn report(&self, answer: &Answer, duration_ms: u64) -> ToolHookReport {
        ToolHookReport {
            hook: self.name.clone(),
            event: self.event,
            blocking: self.blocking,
            duration_ms,
            exit_code: answer.exit_code,
            http_status: answer.http_status,
            decision: answer.decision.as_ref().map(Decision::name),
            failure: answer.failure.clone(),
        }
    }

    async fn answer(&self, toolbox: &Toolbox, model: Option<HookModel<'_>>, payload: &Value) -> Answer {
        // Hooks tell other tools: never the run's secrets.
        let json = crate::secrets::redact(&payload.to_string()).into_owned();
        match &self.action {
            ToolHookAction::Command(command) => self.run_command(toolbox, command, &json, payload).await,
            ToolHookAction::Http(target) => self.post(target, json).await,
            ToolHookAction::Prompt { prompt, model: wanted } => {
                self.ask(model, wanted.as_deref(), prompt, &json).await
            }
        }
    }

    async fn run_command(&self, toolbox: &Toolbox, command: &str, json: &str, payload: &Value) -> Answer {
        let mut process = toolbox.sh(command);
        let text = |key: &str| payload[key].as_str().unwrap_or("").to_string();
        process
            .env("FABRO_HOOK_EVENT", json)
            .env("FABRO_EVENT", self.event.as_str())
            .env("FABRO_RUN_ID", text("run_id"))
            .env("FABRO_NODE_ID", text("node_id"))
            .env("FABRO_TOOL_NAME", text("tool_name"));
        let ran = match run_collected(process, Some(json), self.timeout).await {
            Ok(ran) => ran,
            Err(Unfinished::NotStarted(error)) => {
                return self.command_failed(None, format!("cannot start the hook: {error}"))
            }
            Err(Unfinished::TimedOut) => {
                let timeout = humantime::format_duration(self.timeout);
                return self
                    .command_failed(None, format!("the hook timed out after {timeout} and was killed"));
            }
        };
        let code = ran.status.as_ref().ok().and_then(|status| status.code());
        let stdout = String::from_utf8_lossy(&ran.out).trim().to_string();
        let stderr = String::from_utf8_lossy(&ran.err).trim().to_string();
        let said = |fallback: &str| {
            [stderr.as_str(), stdout.as_str()]
                .into_iter()
                .find(|text| !text.is_empty())
                .map_or_else(|| fallback.to_string(), str::to_string)
        };
        let json_decision = self.json_decision(&stdout);
        let decision = match (code, json_decision) {
            (Some(0 | 2), Some(Ok(decision))) => decision,
            (Some(0 | 2), Some(Err(problem))) => {
                return Answer { exit_code: code, ..self.command_failed(code, problem) };
            }
            (Some(0), None) => match self.event {
                ToolEvent::PreToolUse => Decision::Allow,
                // What a post hook prints is its note (`cargo fmt --check`'s diff).
                _ => Decision::Note(stdout.clone()),
            },
            (Some(2), None) => Decision::Block(said("the hook exited with code 2")),
            (Some(code), _) => {
                let message = format!("the hook exited with code {code}");
                let detail = said("");
                let failure = if detail.is_empty() { message } else { format!("{message}: {detail}") };
                return self.command_failed(Some(code), failure);
            }
            (None, _) => return self.command_failed(None, "the hook was killed by a signal".to_string()),
        };
        Answer { decision: Some(decision), exit_code: code, ..Answer::default() }
    }

    /// A command that could not answer blocks (a pre hook) or tells the model so (a post hook):
    /// commands fail closed.
    fn command_failed(&self, exit_code: Option<i32>, failure: String) -> Answer {
        Answer {
            decision: Some(Decision::Block(failure.clone())),
            exit_code,
            failure: Some(failure),
            ..Answer::default()
        }
    }

    /// A decision printed as JSON: `{"decision": "allow" | "block" | "modify" | "note", "reason",
    /// "arguments", "note"}` (`proceed` is `allow`, `tool_input` is `arguments`); `None` when
    /// the text is not a JSON object; the problem when it is one but no decision.
    fn json_decision(&self, text: &str) -> Option<Result<Decision, String>> {
        let Ok(Value::Object(object)) = serde_json::from_str::<Value>(text) else { return None };
        let reason = object.get("reason").and_then(Value::as_str).unwrap_or("").to_string();
        let note = object.get("note").and_then(Value::as_str).map(str::to_string);
        let decision = match object.get("decision").and_then(Value::as_str) {
            Some("allow" | "proceed") | None if note.is_none() => Decision::Allow,
            Some("block") => {
                Decision::Block(if reason.is_empty() { "no reason given".to_string() } else { reason })
            }
            Some("modify") if self.event == ToolEvent::PreToolUse => {
                match object.get("arguments").or_else(|| object.get("tool_input")) {
                    Some(arguments @ Value::Object(_)) => Decision::Modify(arguments.clone()),
                    _ => {
                        return Some(Err(
                            "the hook answered `modify` without `arguments` (a JSON object of the call's new arguments)"
                                .to_string(),
                        ))
                    }
                }
            }
            Some("note") | None => Decision::Note(note.unwrap_or(reason)),
            Some("allow" | "proceed") => Decision::Note(note.unwrap_or_default()),
            Some(other) => {
                return Some(Err(format!(
                    "the hook answered the decision `{other}`; a {} hook answers {}",
                    self.event.as_str(),
                    match self.event {
                        ToolEvent::PreToolUse => "allow, block or modify",
                        _ => "note or block",
                    }
                )))
            }
        };
        Some(Ok(decision))
    }

    /// An HTTP hook: a 2xx answer's JSON decision counts; anything else allows (fails open).
    async fn post(&self, target: &HttpTarget, json: String) -> Answer {
        let url = &target.url;
        let response = match target.post_json(json, self.timeout).await {
            Ok(response) => response,
            Err(failure) => return Answer { failure: Some(failure), ..Answer::default() },
        };
        let status = response.status();
        if !status.is_success() {
            return Answer {
                http_status: Some(status.as_u16()),
                failure: Some(format!("POST {url} answered {status}")),
                ..Answer::default()
            };
        }
        let body = response.text().await.unwrap_or_default();
        let decision = match self.json_decision(body.trim()) {
            Some(Ok(decision)) => Some(decision),
            Some(Err(problem)) => {
                return Answer {
                    http_status: Some(status.as_u16()),
                    failure: Some(problem),
                    ..Answer::default()
                }
            }
            None => Some(Decision::Allow),
        };
        Answer { decision, http_status: Some(status.as_u16()), ..Answer::default() }
    }

    /// A prompt hook: one question to the model; `{"ok": false, "reason"}` blocks (a pre hook)
    /// or is a note (a post hook). Errors, timeouts and other answers allow (fail open).
    async fn ask(
        &self,
        model: Option<HookModel<'_>>,
        wanted: Option<&str>,
        prompt: &str,
        json: &str,
    ) -> Answer {
        let Some(model) = model else {
            return Answer { failure: Some("no model is at hand to ask".to_string()), ..Answer::default() };
        };
        let (provider, name) = match (wanted, model.small) {
            (None | Some("small"), Some(small)) => small,
            (None, None) => model.stage,
            (Some(name), Some(small)) if name == small.1 => small,
            (Some(name), _) if name == model.stage.1 => model.stage,
            (Some(name), small) => {
                return Answer {
                    failure: Some(format!(
                        "model `{name}` is not one this stage can ask: a prompt hook runs on the stage's model `{}`{}",
                        model.stage.1,
                        small.map(|small| format!(" or its small model `{}` (\"small\")", small.1)).unwrap_or_default()
                    )),
                    ..Answer::default()
                }
            }
        };
        let system = "You check one tool call of an AI coding agent against a team's rule. Read the rule and the \
                      event (JSON), then answer with JSON only: {\"ok\": true} when the rule allows it, or \
                      {\"ok\": false, \"reason\": \"...\"} when it does not, the reason saying why in one sentence.";
        let question = format!("Rule: {prompt}\n\nEvent: {json}");
        let asked = crate::llm::chat::ask(provider, name, system, question, 256, self.timeout);
        let answer = match tokio::time::timeout(self.timeout, asked).await {
            Ok(Ok(answer)) => answer,
            Ok(Err(error)) => {
                return Answer {
                    failure: Some(format!("the model call failed: {error}")),
                    ..Answer::default()
                }
            }
            Err(_) => {
                let timeout = humantime::format_duration(self.timeout);
                return Answer {
                    failure: Some(format!("the model did not answer within {timeout}")),
                    ..Answer::default()
                };
            }
        };
        match parse_ok(&answer.text) {
            Some((true, _)) => Answer { decision: Some(Decision::Allow), ..Answer::default() },
            Some((false, reason)) => {
                let reason = reason.unwrap_or_else(|| "the model said no".to_string());
                let decision = match self.event {
                    ToolEvent::PreToolUse => Decision::Block(reason),
                    _ => Decision::Note(reason),
                };
                Answer { decision: Some(decision), ..Answer::default() }
            }
            None => Answer {
                failure: Some(format!(
                    "the model's answer is not {{\"ok\": ...}}: {}",
                    crate::llm::http::excerpt(answer.text.trim(), 200)
                )),
                ..Answer::default()
            },
        }
    }
}

/// POSTs `json` to `url` (a hook's event) within `timeout`; why it could not, as a hook's
/// failure message.
/// Where an http hook posts: its URL, the headers it adds (a value's `$NAME` or `${NAME}` read
/// from the environment when the hook fires, only names its entry allows) and whether the
/// server's TLS certificate is checked.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HttpTarget {
    pub url: reqwest::Url,
    pub headers: Vec<(String, String)>,
    pub verify_tls: bool,
}

impl HttpTarget {
    pub fn new(url: reqwest::Url) -> HttpTarget {
        HttpTarget { url, headers: Vec::new(), verify_tls: true }
    }

    /// POSTs `json` to the URL with the headers (the environment's values put in).
    pub async fn post_json(&self, json: String, timeout: Duration) -> Result<reqwest::Response, String> {
        let url = &self.url;
        let client = reqwest::Client::builder()
            .timeout(timeout)
            .danger_accept_invalid_certs(!self.verify_tls)
            .build()
            .map_err(|error| format!("cannot make an HTTP client: {error}"))?;
        let mut request = client.post(url.clone()).header(reqwest::header::CONTENT_TYPE, "application/json");
        for (name, template) in &self.headers {
            let value = with_environment(template, &|name| std::env::var(name).ok())
                .map_err(|missing| format!("header `{name}` reads `${missing}`, which is not set"))?;
            request = request.header(name.as_str(), value);
        }
        request.body(json).send().await.map_err(|error| match error.is_timeout() {
            true => format!("POST {url} timed out after {}", humantime::format_duration(timeout)),
            false => format!("POST {url} failed: {error}"),
        })
    }
}

/// The `$NAME` and `${NAME}` in `text`: each name with the text before it, and the text after
/// the last.
fn references(text: &str) -> (Vec<(&str, &str)>, &str) {
    let mut found = Vec::new();
    let mut rest = text;
    let mut literal_start = 0;
    let mut at_offset = 0;
    while let Some(at) = rest[at_offset..].find('$').map(|at| at + at_offset) {
        let after_dollar = &rest[at + 1..];
        let (name, consumed) = match after_dollar.strip_prefix('{') {
            Some(braced) => match braced.find('}') {
                Some(end) => (&braced[..end], end + 2),
                None => ("", 0),
            },
            None => {
                let end = after_dollar
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .unwrap_or(after_dollar.len());
                (&after_dollar[..end], end)
            }
        };
        if name.is_empty() {
            at_offset = at + 1;
            continue;
        }
        found.push((&rest[literal_start..at], name));
        rest = &rest[at + 1 + consumed..];
        literal_start = 0;
        at_offset = 0;
    }
    (found, rest)
}

/// The environment variables `$NAME` and `${NAME}` in `text` name.
pub fn environment_names(text: &str) -> Vec<&str> {
    references(text).0.into_iter().map(|(_, name)| name).collect()
}

/// `text` with each `$NAME` and `${NAME}` replaced by `lookup(NAME)`; the first name it has no
/// value for is the error.
fn with_environment(text: &str, lookup: &dyn Fn(&str) -> Option<String>) -> Result<String, String> {
    let (found, tail) = references(text);
    let mut out = String::new();
    for (literal, name) in found {
        out.push_str(literal);
        out.push_str(&lookup(name).ok_or_else(|| name.to_string())?);
    }
    out.push_str(tail);
    Ok(out)
}

/// `{"ok": bool, "reason"?: string}` in a model's answer, also inside a code fence or prose.
fn parse_ok(text: &str) -> Option<(bool, Option<String>)> {
    let start = text.find('{')?;
    let end = text.rfind('}')?;
    let value: Value = serde_json::from_str(text.get(start..=end)?).ok()?;
    let ok = value.get("ok")?.as_bool()?;
    let reason =
        value.get("reason").and_then(Value::as_str).map(str::to_string).filter(|r| !r.trim().is_empty());
    Some((ok, reason))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hook(event: ToolEvent) -> ToolHook {
        ToolHook {
            name: "h".into(),
            event,
            matcher: None,
            arguments_matcher: None,
            action: ToolHookAction::Command("true".into()),
            timeout: DEFAULT_TIMEOUT,
            blocking: true,
        }
    }

    #[test]
    fn header_values_take_the_environment_by_name() {
        let lookup = |name: &str| match name {
            "API_KEY" => Some("s3cret".to_string()),
            "API" => Some("short".to_string()),
            _ => None,
        };
        assert_eq!(with_environment("Bearer $API_KEY", &lookup).unwrap(), "Bearer s3cret");
        assert_eq!(with_environment("${API}_KEY and $API-x", &lookup).unwrap(), "short_KEY and short-x");
        assert_eq!(with_environment("cost: 5$ $", &lookup).unwrap(), "cost: 5$ $");
        assert_eq!(with_environment("$MISSING", &lookup), Err("MISSING".to_string()));
        assert_eq!(environment_names("a $X b ${Y_2}c $ {"), ["X", "Y_2"]);
    }

    #[test]
    fn matchers_read_the_tool_or_node_and_the_arguments() {
        let mut h = hook(ToolEvent::PreToolUse);
        h.matcher = Some(regex::Regex::new("^shell$").unwrap());
        h.arguments_matcher = Some(regex::Regex::new(r"rm\s+-rf").unwrap());
        assert!(h.fires(ToolEvent::PreToolUse, "work", "shell", r#"{"command":"rm -rf /"}"#));
        assert!(!h.fires(ToolEvent::PreToolUse, "work", "shell", r#"{"command":"ls"}"#));
        assert!(!h.fires(ToolEvent::PreToolUse, "work", "write_file", r#"{"command":"rm -rf /"}"#));
        assert!(!h.fires(ToolEvent::PostToolUse, "work", "shell", r#"{"command":"rm -rf /"}"#));
        h.matcher = Some(regex::Regex::new("^work$").unwrap());
        assert!(h.fires(ToolEvent::PreToolUse, "work", "read_file", r#"{"command":"rm -rf x"}"#));
    }

    #[test]
    fn json_decisions_read_as_fabro_writes_them() {
        let pre = hook(ToolEvent::PreToolUse);
        assert_eq!(pre.json_decision("not json"), None);
        assert_eq!(pre.json_decision(r#"{"decision":"proceed"}"#), Some(Ok(Decision::Allow)));
        assert_eq!(
            pre.json_decision(r#"{"decision":"block","reason":"no"}"#),
            Some(Ok(Decision::Block("no".into())))
        );
        assert_eq!(
            pre.json_decision(r#"{"decision":"modify","tool_input":{"command":"ls"}}"#),
            Some(Ok(Decision::Modify(json!({"command": "ls"}))))
        );
        assert!(matches!(pre.json_decision(r#"{"decision":"modify"}"#), Some(Err(_))));
        assert!(matches!(pre.json_decision(r#"{"decision":"skip"}"#), Some(Err(_))));
        let post = hook(ToolEvent::PostToolUse);
        assert_eq!(post.json_decision(r#"{"note":"fmt"}"#), Some(Ok(Decision::Note("fmt".into()))));
        assert!(matches!(post.json_decision(r#"{"decision":"modify","arguments":{}}"#), Some(Err(_))));
    }

    #[test]
    fn model_answers_are_found_in_prose_and_fences() {
        assert_eq!(parse_ok("{\"ok\": true}"), Some((true, None)));
        assert_eq!(
            parse_ok("Sure.\n```json\n{\"ok\": false, \"reason\": \"deletes files\"}\n```"),
            Some((false, Some("deletes files".into())))
        );
        assert_eq!(parse_ok("yes"), None);
        assert_eq!(parse_ok("{\"ok\": \"yes\"}"), None);
    }
}
