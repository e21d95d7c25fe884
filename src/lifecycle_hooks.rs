//! Run lifecycle hooks: `[[hooks]]` entries of the settings layers ([`crate::run_settings`]: the
//! config file, `.fabro/project.toml`, `workflow.toml` and `fabro.toml` beside the workflow, a run
//! configuration), each a shell command or an HTTP POST told about one kind of moment of a run (its
//! start and end, a pause, a stage's start and end, a human gate waiting). Loading checks every
//! entry (event names, URLs, `when` conditions) before a run starts; firing runs the hooks of one
//! moment in order and says whether a blocking one vetoed it, or answered that its stage be
//! skipped or the run go elsewhere ([`HookDecision`]).
//!
//! This module never decides what a veto or a decision does to the run (the engine does)
//! and never fails on its own: a hook that cannot run is a failed hook, reported to the caller.

use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Serialize;

use crate::agent::tool_hooks::{self, HttpTarget, ToolEvent, ToolHook, ToolHookAction};
use crate::condition::{Condition, Scope};
use crate::context::artifacts::ArtifactStore;
use crate::context::Context;
use crate::outcome::Outcome;
use crate::sandbox::Confinement;

/// How long a hook may take unless its entry says `timeout`.
pub const DEFAULT_TIMEOUT: Duration = Duration::from_secs(30);
/// The file beside a workflow whose `[[hooks]]` apply to it.
pub const WORKFLOW_HOOKS_FILE: &str = "fabro.toml";
/// The most of a failed command hook's stderr a failure message keeps.
const MESSAGE_CAP: usize = 500;

/// A moment of a run a hook is told about. The moments of an agent's tool calls
/// (`pre_tool_use`, `post_tool_use`, `post_tool_use_failure`) are
/// [`crate::agent::tool_hooks::ToolEvent`]s: their hooks run inside the stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum HookEvent {
    RunStart,
    RunComplete,
    RunFailed,
    RunPaused,
    StageStart,
    StageComplete,
    StageFailed,
    /// A failed stage is about to run again (`max_retries`).
    StageRetrying,
    /// A human gate asks for its answer.
    GateWaiting,
    /// The run chose the edge it takes next.
    EdgeSelected,
    /// A parallel stage starts its branches.
    ParallelStart,
    /// A parallel stage's branches have all ended.
    ParallelComplete,
    /// A stage's checkpoint is on disk.
    CheckpointSaved,
}

impl HookEvent {
    pub const ALL: [HookEvent; 13] = [
        HookEvent::RunStart,
        HookEvent::RunComplete,
        HookEvent::RunFailed,
        HookEvent::RunPaused,
        HookEvent::StageStart,
        HookEvent::StageComplete,
        HookEvent::StageFailed,
        HookEvent::StageRetrying,
        HookEvent::GateWaiting,
        HookEvent::EdgeSelected,
        HookEvent::ParallelStart,
        HookEvent::ParallelComplete,
        HookEvent::CheckpointSaved,
    ];

    pub fn as_str(self) -> &'static str {
        match self {
            HookEvent::RunStart => "run_start",
            HookEvent::RunComplete => "run_complete",
            HookEvent::RunFailed => "run_failed",
            HookEvent::RunPaused => "run_paused",
            HookEvent::StageStart => "stage_start",
            HookEvent::StageComplete => "stage_complete",
            HookEvent::StageFailed => "stage_failed",
            HookEvent::StageRetrying => "stage_retrying",
            HookEvent::GateWaiting => "gate_waiting",
            HookEvent::EdgeSelected => "edge_selected",
            HookEvent::ParallelStart => "parallel_start",
            HookEvent::ParallelComplete => "parallel_complete",
            HookEvent::CheckpointSaved => "checkpoint_saved",
        }
    }

    pub fn parse(text: &str) -> Option<HookEvent> {
        HookEvent::ALL.into_iter().find(|event| event.as_str() == text)
    }

    /// Only what has not happened yet can be stopped: a run's start, a stage's start, the
    /// crossing of a chosen edge.
    pub fn can_block(self) -> bool {
        matches!(self, HookEvent::RunStart | HookEvent::StageStart | HookEvent::EdgeSelected)
    }

    /// Whether a `matcher` has something to match: a stage's node id and handler, an edge's
    /// ends, a parallel stage's or a checkpoint's node; a run's moments have none.
    fn can_match(self) -> bool {
        !matches!(
            self,
            HookEvent::RunStart | HookEvent::RunComplete | HookEvent::RunFailed | HookEvent::RunPaused
        )
    }

    fn names() -> String {
        let tool = ToolEvent::ALL.iter().map(|event| event.as_str());
        HookEvent::ALL.iter().map(|event| event.as_str()).chain(tool).collect::<Vec<_>>().join(", ")
    }
}

/// What a hook does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookAction {
    /// `sh -c COMMAND`, with the event as JSON on stdin and in `$FABRO_HOOK_EVENT`.
    Command(String),
    /// A POST of the event as JSON.
    Http(HttpTarget),
}

/// One `[[hooks]]` entry, checked.
#[derive(Debug, Clone)]
pub struct LifecycleHook {
    /// The entry's `name`, else `<file name> hooks[<index>]`.
    pub name: String,
    pub event: HookEvent,
    pub action: HookAction,
    pub timeout: Duration,
    /// A failure vetoes the start it was told about (run_start and stage_start only).
    pub blocking: bool,
    /// The hook fires only when this holds.
    pub when: Option<Condition>,
    /// The hook fires only when this matches the node id, the handler or an edge's end.
    pub matcher: Option<regex::Regex>,
    /// The settings file that defines it.
    pub file: PathBuf,
    /// `sandbox = false`: a command runs on the host, not where the stage's programs run.
    pub on_host: bool,
}

/// The hooks of a run: the config file's first, then the workflow's.
#[derive(Debug, Clone, Default)]
pub struct LifecycleHooks {
    hooks: Arc<[LifecycleHook]>,
    /// The hooks of tool events, which agent stages run around their tool calls.
    tool: Arc<[ToolHook]>,
}

/// One `[[hooks]]` entry: told about a moment of the run, or about an agent's tool calls.
enum Entry {
    Run(LifecycleHook),
    Tool(ToolHook),
}

impl Entry {
    fn name(&self) -> &str {
        match self {
            Entry::Run(hook) => &hook.name,
            Entry::Tool(hook) => &hook.name,
        }
    }
}

/// Why the hooks of a config file or a `fabro.toml` cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HookConfigError {
    #[error("cannot read {path}: {message}")]
    Unreadable { path: PathBuf, message: String },
    #[error("{path} is not valid TOML: {message}")]
    Toml { path: PathBuf, message: String },
    #[error("{path}: {message}")]
    Structure { path: PathBuf, message: String },
    #[error("{path}: hooks[{index}]: {kind}")]
    Entry { path: PathBuf, index: usize, kind: HookEntryError },
}

/// What is wrong with one `[[hooks]]` entry.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum HookEntryError {
    #[error("{0}")]
    Shape(String),
    #[error("unknown event `{name}`{}; the events are {}", suggestion_text(.suggestion), HookEvent::names())]
    UnknownEvent { name: String, suggestion: Option<String> },
    #[error("unknown type `{0}`; a hook is `type = \"command\"` (with `command`), `type = \"http\"` (with `url`) or, for tool events, `type = \"prompt\"` (with `prompt`)")]
    UnknownType(String),
    #[error("a hook needs `command`, `url` or `prompt` (or `type`) to say what it does")]
    NoAction,
    #[error(
        "a `prompt` hook asks the stage's model about a tool call: it is for pre_tool_use, post_tool_use and \
         post_tool_use_failure, not `{0}`; use a command or http hook"
    )]
    PromptNotForEvent(HookEvent),
    #[error("`{field}` is not a regular expression: {message}")]
    BadMatcher { field: &'static str, message: String },
    #[error("`{field}` has nothing to match on a `{event}` hook (it fires at every {event}); remove it")]
    NothingToMatch { field: &'static str, event: String },
    #[error("a `{kind}` hook needs `{field}`")]
    Missing { kind: &'static str, field: &'static str },
    #[error("`{field}` does not belong to a `{kind}` hook")]
    Misplaced { kind: &'static str, field: &'static str },
    #[error("url `{url}` is not a URL: {message}")]
    BadUrl { url: String, message: String },
    #[error(
        "url `{0}` is not https; only https URLs are allowed, and http only to 127.0.0.1, ::1 or localhost"
    )]
    NotHttps(String),
    #[error("header `{name}`: {message}")]
    BadHeader { name: String, message: String },
    #[error(
        "header `{header}` reads `${variable}`, which `allowed_env_vars` does not list; add it there (a hook reads \
         only the variables listed)"
    )]
    HeaderVariable { header: String, variable: String },
    #[error("tls `{0}` is not one of verify, no_verify, off")]
    BadTls(String),
    #[error("timeout `{0}` is not a duration such as 30 (seconds), 30s or 2m")]
    BadTimeout(String),
    #[error(
        "`blocking = true` on a `{0}` hook: only run_start, stage_start, edge_selected and tool-call hooks can \
         block (the other moments have already happened); remove `blocking`"
    )]
    CannotBlock(HookEvent),
    #[error("`when` does not parse at character {}: {message}\n    {text}\n    {}^", .offset + 1, " ".repeat(*.offset))]
    BadWhen { text: String, offset: usize, message: String },
}

fn suggestion_text(suggestion: &Option<String>) -> String {
    suggestion.as_ref().map(|name| format!(" (did you mean `{name}`?)")).unwrap_or_default()
}

impl std::fmt::Display for HookEvent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An entry as written.
#[derive(Debug, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct HookEntry {
    event: String,
    #[serde(rename = "type")]
    kind: Option<String>,
    name: Option<String>,
    command: Option<String>,
    url: Option<String>,
    prompt: Option<String>,
    model: Option<String>,
    timeout: Option<toml::Value>,
    /// Fabro's spelling of `timeout`, in milliseconds.
    timeout_ms: Option<u64>,
    blocking: Option<bool>,
    when: Option<String>,
    matcher: Option<String>,
    arguments_matcher: Option<String>,
    /// Fabro's: whether a command runs in the stage's sandbox (the default) or on the host.
    sandbox: Option<bool>,
    /// An http hook's headers; `$NAME` in a value reads the environment variable, if listed in
    /// `allowed_env_vars`.
    headers: Option<std::collections::BTreeMap<String, String>>,
    allowed_env_vars: Option<Vec<String>>,
    /// An http hook's TLS: `verify` (the default), `no_verify`, `off` (plain http to any host).
    tls: Option<String>,
}

impl LifecycleHooks {
    /// The hooks of `layers`, lowest first (see [`crate::run_settings`]): each file's entries in
    /// order, except that an entry with the `name` of an earlier layer's entry takes its place.
    pub fn from_layers(layers: Vec<(PathBuf, Vec<toml::Value>)>) -> Result<LifecycleHooks, HookConfigError> {
        let mut entries: Vec<Entry> = Vec::new();
        for (path, written) in layers {
            for (entry, named) in parse_entries(&path, written)? {
                match entries.iter_mut().find(|earlier| named && earlier.name() == entry.name()) {
                    Some(earlier) => *earlier = entry,
                    None => entries.push(entry),
                }
            }
        }
        let (mut hooks, mut tool) = (Vec::new(), Vec::new());
        for entry in entries {
            match entry {
                Entry::Run(hook) => hooks.push(hook),
                Entry::Tool(hook) => tool.push(hook),
            }
        }
        Ok(LifecycleHooks { hooks: hooks.into(), tool: tool.into() })
    }

    /// The hooks of tool events (`pre_tool_use`, `post_tool_use`, `post_tool_use_failure`).
    pub fn tool_hooks(&self) -> &[ToolHook] {
        &self.tool
    }

    pub fn is_empty(&self) -> bool {
        self.hooks.is_empty() && self.tool.is_empty()
    }

    pub fn hooks(&self) -> &[LifecycleHook] {
        &self.hooks
    }

    /// Whether any hook is told about `event` (so a caller can skip building its payload).
    pub fn wants(&self, event: HookEvent) -> bool {
        self.hooks.iter().any(|hook| hook.event == event)
    }

    /// Runs the hooks of `firing.payload.event` whose `when` holds, in order, telling `report`
    /// how each went. A blocking hook that fails (or answers `block`) stops there: the veto says
    /// why. Otherwise the first blocking hook that answered `skip` or `override` decides, if one
    /// did (a block by a later one still wins).
    pub async fn fire(
        &self,
        firing: &Firing<'_>,
        report: &mut (dyn FnMut(HookReport) + Send),
    ) -> Result<Option<Directive>, Veto> {
        let mut directive = None;
        for hook in self.hooks.iter().filter(|hook| hook.event == firing.payload.event) {
            if hook.when.as_ref().is_some_and(|when| !firing.holds(when))
                || hook.matcher.as_ref().is_some_and(|matcher| !firing.payload.matched_by(matcher))
            {
                continue;
            }
            let clock = Instant::now();
            let result = hook.run(firing).await;
            let duration_ms = clock.elapsed().as_millis() as u64;
            let failed = result.failure.clone();
            let decided = result.decision.clone().filter(|decision| *decision != HookDecision::Proceed);
            if let (true, None, Some(decision)) = (hook.blocking, &directive, decided) {
                directive = Some(Directive { hook: hook.name.clone(), decision });
            }
            report(HookReport {
                hook: hook.name.clone(),
                event: hook.event,
                blocking: hook.blocking,
                duration_ms,
                result,
            });
            if let (true, Some(message)) = (hook.blocking, failed) {
                return Err(Veto { hook: hook.name.clone(), message });
            }
        }
        Ok(directive)
    }
}

fn near_hooks(key: &str) -> bool {
    crate::diagnostic::did_you_mean(&key.to_lowercase(), ["hooks"]).is_some()
}

/// The `[[hooks]]` entries of `text` (the file at `path`: the fabro config file, a `fabro.toml`),
/// whose other keys belong to other readers; but a near miss of `hooks` is a typo that would
/// silently drop every hook of the file.
pub fn entries_of(path: &Path, text: &str) -> Result<Vec<toml::Value>, HookConfigError> {
    let table: toml::Table = toml::from_str(text)
        .map_err(|error| HookConfigError::Toml { path: path.to_path_buf(), message: error.to_string() })?;
    if let Some(key) = table.keys().find(|key| *key != "hooks" && near_hooks(key)) {
        let message = format!("unknown table `{key}` (did you mean `hooks`?); hooks are `[[hooks]]` entries");
        return Err(HookConfigError::Structure { path: path.to_path_buf(), message });
    }
    match table.get("hooks") {
        None => Ok(Vec::new()),
        Some(toml::Value::Array(entries)) => Ok(entries.clone()),
        Some(_) => {
            let message = "`hooks` must be an array of tables (`[[hooks]]`)".to_string();
            Err(HookConfigError::Structure { path: path.to_path_buf(), message })
        }
    }
}

/// The entries of the file at `path`, each with whether its `name` was given.
fn parse_entries(path: &Path, entries: Vec<toml::Value>) -> Result<Vec<(Entry, bool)>, HookConfigError> {
    let file_name = path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    entries
        .into_iter()
        .enumerate()
        .map(|(index, entry)| {
            let default_name = format!("{file_name} hooks[{index}]");
            let entry = parse_entry(entry, &default_name, path).map_err(|kind| HookConfigError::Entry {
                path: path.to_path_buf(),
                index,
                kind,
            })?;
            let named = entry.name() != default_name;
            Ok((entry, named))
        })
        .collect()
}

/// What a hook does, from `type` (else the one of `command`, `url`, `prompt` it has).
enum Action {
    Command(String),
    Http(HttpTarget),
    Prompt { prompt: String, model: Option<String> },
}

fn parse_action(entry: &HookEntry) -> Result<Action, HookEntryError> {
    let kind = match entry.kind.as_deref() {
        Some(kind) => kind,
        None if entry.command.is_some() => "command",
        None if entry.url.is_some() => "http",
        None if entry.prompt.is_some() => "prompt",
        None => return Err(HookEntryError::NoAction),
    };
    let fields = [
        ("command", entry.command.is_some()),
        ("url", entry.url.is_some()),
        ("prompt", entry.prompt.is_some()),
        ("headers", entry.headers.is_some()),
        ("allowed_env_vars", entry.allowed_env_vars.is_some()),
        ("tls", entry.tls.is_some()),
    ];
    let own: &[&str] = match kind {
        "command" => &["command"],
        "http" => &["url", "headers", "allowed_env_vars", "tls"],
        "prompt" => &["prompt", "model"],
        other => return Err(HookEntryError::UnknownType(other.to_string())),
    };
    let kind: &'static str = match kind {
        "command" => "command",
        "http" => "http",
        _ => "prompt",
    };
    let mut given = fields.into_iter().chain([("model", entry.model.is_some())]);
    if let Some((field, _)) = given.find(|(field, set)| *set && !own.contains(field)) {
        return Err(HookEntryError::Misplaced { kind, field });
    }
    let non_blank = |text: &Option<String>| text.clone().filter(|text| !text.trim().is_empty());
    Ok(match kind {
        "command" => Action::Command(
            non_blank(&entry.command).ok_or(HookEntryError::Missing { kind, field: "command" })?,
        ),
        "http" => {
            let url = entry.url.as_deref().ok_or(HookEntryError::Missing { kind, field: "url" })?;
            Action::Http(http_target(url, entry)?)
        }
        _ => Action::Prompt {
            prompt: non_blank(&entry.prompt).ok_or(HookEntryError::Missing { kind, field: "prompt" })?,
            model: non_blank(&entry.model),
        },
    })
}

fn parse_matcher(field: &'static str, text: Option<&str>) -> Result<Option<regex::Regex>, HookEntryError> {
    text.map(|text| {
        regex::Regex::new(text)
            .map_err(|error| HookEntryError::BadMatcher { field, message: error.to_string() })
    })
    .transpose()
}

fn parse_entry(value: toml::Value, default_name: &str, file: &Path) -> Result<Entry, HookEntryError> {
    let entry: HookEntry = value
        .try_into()
        .map_err(|error: toml::de::Error| HookEntryError::Shape(error.message().to_string()))?;
    let tool_event = ToolEvent::parse(&entry.event);
    let event = HookEvent::parse(&entry.event);
    if tool_event.is_none() && event.is_none() {
        let names =
            HookEvent::ALL.iter().map(|e| e.as_str()).chain(ToolEvent::ALL.iter().map(|e| e.as_str()));
        return Err(HookEntryError::UnknownEvent {
            suggestion: crate::diagnostic::did_you_mean(&entry.event, names).map(str::to_string),
            name: entry.event.clone(),
        });
    }
    let action = parse_action(&entry)?;
    let timeout = match (&entry.timeout, entry.timeout_ms) {
        (Some(value), _) => Some(parse_timeout(value)?),
        (None, Some(ms)) if ms > 0 => Some(Duration::from_millis(ms)),
        (None, Some(ms)) => return Err(HookEntryError::BadTimeout(format!("timeout_ms = {ms}"))),
        (None, None) => None,
    };
    let name =
        entry.name.clone().filter(|name| !name.trim().is_empty()).unwrap_or_else(|| default_name.to_string());
    let matcher = parse_matcher("matcher", entry.matcher.as_deref())?;
    if let Some(event) = tool_event {
        if entry.when.is_some() {
            return Err(HookEntryError::Misplaced { kind: event.as_str(), field: "when" });
        }
        // A tool call's hooks run where the stage's programs run: there is no host to choose.
        if entry.sandbox.is_some() {
            return Err(HookEntryError::Misplaced { kind: event.as_str(), field: "sandbox" });
        }
        let action = match action {
            Action::Command(command) => ToolHookAction::Command(command),
            Action::Http(url) => ToolHookAction::Http(url),
            Action::Prompt { prompt, model } => ToolHookAction::Prompt { prompt, model },
        };
        let default_timeout = match action {
            ToolHookAction::Prompt { .. } => tool_hooks::DEFAULT_PROMPT_TIMEOUT,
            _ => tool_hooks::DEFAULT_TIMEOUT,
        };
        return Ok(Entry::Tool(ToolHook {
            name,
            event,
            matcher,
            arguments_matcher: parse_matcher("arguments_matcher", entry.arguments_matcher.as_deref())?,
            action,
            timeout: timeout.unwrap_or(default_timeout),
            blocking: entry.blocking.unwrap_or(event == ToolEvent::PreToolUse),
        }));
    }
    let Some(event) = event else { return Err(HookEntryError::NoAction) };
    let action = match action {
        Action::Command(command) => HookAction::Command(command),
        // An HTTP call is made from the host: `sandbox` would say nothing.
        Action::Http(_) if entry.sandbox.is_some() => {
            return Err(HookEntryError::Misplaced { kind: "http", field: "sandbox" })
        }
        Action::Http(url) => HookAction::Http(url),
        Action::Prompt { .. } => return Err(HookEntryError::PromptNotForEvent(event)),
    };
    if entry.arguments_matcher.is_some() {
        return Err(HookEntryError::Misplaced { kind: event.as_str(), field: "arguments_matcher" });
    }
    if matcher.is_some() && !event.can_match() {
        return Err(HookEntryError::NothingToMatch { field: "matcher", event: event.to_string() });
    }
    // The moments that have not happened yet block unless told not to, as in Fabro.
    let blocking = entry.blocking.unwrap_or(event.can_block());
    if blocking && !event.can_block() {
        return Err(HookEntryError::CannotBlock(event));
    }
    let when = entry
        .when
        .map(|text| {
            Condition::parse(&text).map_err(|error| HookEntryError::BadWhen {
                offset: text[..error.offset.min(text.len())].chars().count(),
                text,
                message: error.message,
            })
        })
        .transpose()?;
    Ok(Entry::Run(LifecycleHook {
        name,
        event,
        action,
        timeout: timeout.unwrap_or(DEFAULT_TIMEOUT),
        blocking,
        when,
        matcher,
        file: file.to_path_buf(),
        on_host: entry.sandbox == Some(false),
    }))
}

/// An http hook's URL, headers and TLS, checked: a header's `$NAME` must be listed in
/// `allowed_env_vars`; `tls = "off"` allows plain http to any host.
fn http_target(url: &str, entry: &HookEntry) -> Result<HttpTarget, HookEntryError> {
    let verify_tls = match entry.tls.as_deref().map(str::trim) {
        None | Some("verify") => true,
        Some("no_verify" | "off") => false,
        Some(other) => return Err(HookEntryError::BadTls(other.to_string())),
    };
    let url = match entry.tls.as_deref().map(str::trim) {
        Some("off") => reqwest::Url::parse(url)
            .map_err(|error| HookEntryError::BadUrl { url: url.to_string(), message: error.to_string() })?,
        _ => check_url(url)?,
    };
    let allowed = entry.allowed_env_vars.clone().unwrap_or_default();
    let mut headers = Vec::new();
    for (name, value) in entry.headers.clone().unwrap_or_default() {
        let bad = |message: String| HookEntryError::BadHeader { name: name.clone(), message };
        reqwest::header::HeaderName::from_bytes(name.as_bytes()).map_err(|error| bad(error.to_string()))?;
        if let Some(variable) =
            tool_hooks::environment_names(&value).into_iter().find(|v| !allowed.iter().any(|a| a == v))
        {
            return Err(HookEntryError::HeaderVariable {
                header: name.clone(),
                variable: variable.to_string(),
            });
        }
        headers.push((name, value));
    }
    Ok(HttpTarget { url, headers, verify_tls })
}

/// https anywhere; http only to this machine (a local relay, a test server).
fn check_url(text: &str) -> Result<reqwest::Url, HookEntryError> {
    let url = reqwest::Url::parse(text)
        .map_err(|error| HookEntryError::BadUrl { url: text.to_string(), message: error.to_string() })?;
    // The URL parser normalizes hosts: lowercase names, dotted IPv4, bracketed short IPv6.
    let loopback = matches!(url.host_str(), Some("localhost" | "127.0.0.1" | "[::1]"));
    match url.scheme() {
        "https" => Ok(url),
        "http" if loopback => Ok(url),
        _ => Err(HookEntryError::NotHttps(text.to_string())),
    }
}

fn parse_timeout(value: &toml::Value) -> Result<Duration, HookEntryError> {
    let duration = match value {
        toml::Value::Integer(seconds) => u64::try_from(*seconds).ok().map(Duration::from_secs),
        toml::Value::Float(seconds) if seconds.is_finite() && *seconds > 0.0 => {
            Some(Duration::from_secs_f64(*seconds))
        }
        toml::Value::String(text) => humantime::parse_duration(text.trim()).ok(),
        _ => None,
    };
    duration
        .filter(|duration| !duration.is_zero())
        .ok_or_else(|| HookEntryError::BadTimeout(value.to_string()))
}

/// What a hook is told, as JSON: on stdin and in `$FABRO_HOOK_EVENT` for a command, as the body
/// of an http hook's POST.
#[derive(Debug, Clone, Serialize)]
pub struct HookPayload {
    pub event: HookEvent,
    pub run_id: String,
    pub workflow: String,
    pub run_dir: PathBuf,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node_id: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub visit: Option<u32>,
    /// Stage moments: the stage's handler (`command`, `agent`, ...).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub handler: Option<String>,
    /// edge_selected: the edge's ends and label (or why it was chosen).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edge_from: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edge_to: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub edge_label: Option<String>,
    /// stage_retrying: the attempt about to start and how many there may be.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub attempt: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub max_attempts: Option<u32>,
    /// parallel_start, parallel_complete: how many branches.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub branch_count: Option<usize>,
    /// Stage and run ends: `success`, `fail`, ... for a stage; `succeeded`, `failed` for a run.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub outcome: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// run_paused: why.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
    /// gate_waiting: the gate's question and its choices.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub question: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub choices: Option<Vec<String>>,
}

impl HookPayload {
    pub fn new(event: HookEvent, run_id: &str, workflow: &str, run_dir: &Path) -> HookPayload {
        HookPayload {
            event,
            run_id: run_id.to_string(),
            workflow: workflow.to_string(),
            run_dir: run_dir.to_path_buf(),
            node_id: None,
            visit: None,
            handler: None,
            edge_from: None,
            edge_to: None,
            edge_label: None,
            attempt: None,
            max_attempts: None,
            branch_count: None,
            outcome: None,
            failure_reason: None,
            reason: None,
            question: None,
            choices: None,
        }
    }
}

impl HookPayload {
    /// Whether `matcher` matches any of the moment's node id, handler and edge ends.
    fn matched_by(&self, matcher: &regex::Regex) -> bool {
        [&self.node_id, &self.handler, &self.edge_from, &self.edge_to]
            .into_iter()
            .flatten()
            .any(|field| matcher.is_match(field))
    }
}

/// One moment the hooks are told about, and where their commands run.
pub struct Firing<'a> {
    pub payload: HookPayload,
    /// The stage's outcome (stage ends), for `when`.
    pub outcome: Option<&'a Outcome>,
    pub context: &'a Context,
    /// Where `when` reads the context's offloaded values from.
    pub artifacts: Option<&'a ArtifactStore>,
    pub work_dir: &'a Path,
    /// The stage's sandbox, for stage moments of stages that run programs.
    pub confinement: Confinement,
    /// What a confined command may write besides the work directory (the stage directory).
    pub writable: Vec<&'a Path>,
    /// What a confined command may read (the run directory).
    pub readable: Vec<&'a Path>,
}

impl Firing<'_> {
    /// Whether `when` holds at this moment: it reads the stage's outcome where there is one and
    /// the run context, offloaded values loaded back as edge conditions see them.
    fn holds(&self, when: &Condition) -> bool {
        let mut scope = Scope::new(self.outcome, self.context);
        if let Some(store) = self.artifacts {
            scope = scope.resolving(when.context_keys(), store);
        }
        when.evaluate(&scope)
    }
}

/// How one hook went.
#[derive(Debug, Clone)]
pub struct HookReport {
    pub hook: String,
    pub event: HookEvent,
    pub blocking: bool,
    pub duration_ms: u64,
    pub result: HookResult,
}

/// What a hook answered: an exit code, an HTTP status, the decision it printed (if any), and why
/// it failed if it did (a `block` decision is a failure).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HookResult {
    pub exit_code: Option<i32>,
    pub http_status: Option<u16>,
    pub decision: Option<HookDecision>,
    pub failure: Option<String>,
}

/// What a hook decided about the moment it was told of, answered as JSON (a command's stdout, an
/// HTTP hook's 2xx body): `{"decision": "proceed" | "skip" | "block" | "override", "reason",
/// "edge_to"}`, as Fabro's hooks answer. Only a blocking hook's decision changes the run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HookDecision {
    Proceed,
    /// stage_start: the stage does not run; it ends `skipped` and the run goes on from it.
    Skip {
        reason: Option<String>,
    },
    /// stage_start or edge_selected: the run goes to this node instead (of the stage about to
    /// start, or of the chosen edge's target).
    Override {
        to: String,
        reason: Option<String>,
    },
}

impl HookDecision {
    pub fn as_str(&self) -> &'static str {
        match self {
            HookDecision::Proceed => "proceed",
            HookDecision::Skip { .. } => "skip",
            HookDecision::Override { .. } => "override",
        }
    }

    /// The decision printed as `text`, for a hook of `event`: `None` when the text is not a JSON
    /// object with a `decision`; `Err` (why the hook fails) for `block` and for a decision that
    /// does not apply to the moment.
    fn parse(text: &str, event: HookEvent) -> Option<Result<HookDecision, String>> {
        let Ok(serde_json::Value::Object(object)) = serde_json::from_str(text.trim()) else { return None };
        let decision = object.get("decision")?.as_str().unwrap_or_default().to_string();
        let text_of = |key: &str| {
            object.get(key).and_then(serde_json::Value::as_str).map(str::trim).filter(|text| !text.is_empty())
        };
        let reason = text_of("reason").map(str::to_string);
        Some(match decision.as_str() {
            "proceed" | "allow" => Ok(HookDecision::Proceed),
            "block" => Err(format!("blocked: {}", reason.as_deref().unwrap_or("no reason given"))),
            "skip" if event == HookEvent::StageStart => Ok(HookDecision::Skip { reason }),
            "override" if matches!(event, HookEvent::StageStart | HookEvent::EdgeSelected) => {
                match text_of("edge_to") {
                    Some(to) => Ok(HookDecision::Override { to: to.to_string(), reason }),
                    None => Err("the hook answered `override` without `edge_to` (the node to go to)".to_string()),
                }
            }
            "skip" | "override" => Err(format!(
                "the hook answered `{decision}` at {}: only a stage_start hook skips its stage, and only \
                 stage_start and edge_selected hooks override where the run goes",
                event.as_str()
            )),
            other => Err(format!(
                "the hook answered the decision `{other}`; a lifecycle hook answers proceed, skip, block or override"
            )),
        })
    }
}

/// What the blocking hooks of a moment decided, when not to go on as planned.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Directive {
    pub hook: String,
    pub decision: HookDecision,
}

/// A blocking hook said no.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("blocking hook `{hook}` stopped it: {message}")]
pub struct Veto {
    pub hook: String,
    pub message: String,
}

impl LifecycleHook {
    async fn run(&self, firing: &Firing<'_>) -> HookResult {
        // Hooks tell other tools: never the run's secrets.
        let json =
            crate::secrets::redact(&serde_json::to_string(&firing.payload).unwrap_or_default()).into_owned();
        match &self.action {
            HookAction::Command(command) => self.run_command(command, &json, firing).await,
            HookAction::Http(target) => self.post(target, json).await,
        }
    }

    async fn run_command(&self, command: &str, json: &str, firing: &Firing<'_>) -> HookResult {
        use crate::agent::tools::{run_collected, Unfinished};
        let host = Confinement::default();
        let confinement = if self.on_host { &host } else { &firing.confinement };
        let mut process = confinement.command(
            "sh".as_ref(),
            &["-c".as_ref(), command.as_ref()],
            firing.work_dir,
            &firing.writable,
            &firing.readable,
        );
        process.stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        // The event as JSON on stdin, whole in `$FABRO_HOOK_EVENT`, and in the variables Fabro's
        // hooks read (`$FABRO_HOOK_CONTEXT` names the JSON's file: stdin).
        let payload = &firing.payload;
        process
            .env("FABRO_HOOK_EVENT", json)
            .env("FABRO_EVENT", payload.event.as_str())
            .env("FABRO_RUN_ID", &payload.run_id)
            .env("FABRO_WORKFLOW", &payload.workflow)
            .env("FABRO_HOOK_CONTEXT", "/dev/stdin");
        match &payload.node_id {
            Some(node) => process.env("FABRO_NODE_ID", node),
            None => process.env_remove("FABRO_NODE_ID"),
        };
        match run_collected(process, Some(json), self.timeout).await {
            Ok(ran) => {
                let exit_code = ran.status.as_ref().ok().and_then(|status| status.code());
                // Exit 0 or 2 with a JSON decision on stdout: the decision, whatever the code.
                let printed = matches!(exit_code, Some(0 | 2))
                    .then(|| HookDecision::parse(&String::from_utf8_lossy(&ran.out), self.event))
                    .flatten();
                if let Some(printed) = printed {
                    let (decision, failure) = match printed {
                        Ok(decision) => (Some(decision), None),
                        Err(failure) => (None, Some(failure)),
                    };
                    return HookResult { exit_code, http_status: None, decision, failure };
                }
                let failure = match &ran.status {
                    Ok(status) if status.success() => None,
                    Ok(status) => {
                        let stderr = String::from_utf8_lossy(&ran.err);
                        let last = stderr.lines().rev().find(|line| !line.trim().is_empty()).unwrap_or("");
                        let what = match status.code() {
                            Some(code) => format!("exited with code {code}"),
                            None => "was killed by a signal".to_string(),
                        };
                        Some(if last.is_empty() {
                            format!("the command {what}")
                        } else {
                            format!("the command {what}: {}", cap(last))
                        })
                    }
                    Err(error) => Some(format!("cannot wait for the command: {error}")),
                };
                HookResult { exit_code, http_status: None, decision: None, failure }
            }
            Err(Unfinished::NotStarted(error)) => HookResult {
                failure: Some(format!("cannot start the command: {error}")),
                ..HookResult::default()
            },
            Err(Unfinished::TimedOut) => HookResult {
                failure: Some(format!(
                    "timed out after {} and was killed",
                    humantime::format_duration(self.timeout)
                )),
                ..HookResult::default()
            },
        }
    }

    async fn post(&self, target: &HttpTarget, json: String) -> HookResult {
        let url = &target.url;
        match target.post_json(json, self.timeout).await {
            Ok(response) => {
                let status = response.status();
                let http_status = Some(status.as_u16());
                if !status.is_success() {
                    let failure = Some(format!("POST {url} answered {status}"));
                    return HookResult { http_status, failure, ..HookResult::default() };
                }
                let body = response.text().await.unwrap_or_default();
                match HookDecision::parse(&body, self.event) {
                    Some(Ok(decision)) => {
                        HookResult { http_status, decision: Some(decision), ..HookResult::default() }
                    }
                    Some(Err(failure)) => {
                        HookResult { http_status, failure: Some(failure), ..HookResult::default() }
                    }
                    None => HookResult { http_status, ..HookResult::default() },
                }
            }
            Err(failure) => HookResult { failure: Some(failure), ..HookResult::default() },
        }
    }
}

fn cap(text: &str) -> String {
    match text.char_indices().nth(MESSAGE_CAP) {
        Some((end, _)) => format!("{}…", &text[..end]),
        None => text.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parsed(text: &str) -> Result<Entry, HookEntryError> {
        let value: toml::Table = toml::from_str(text).expect("toml");
        parse_entry(toml::Value::Table(value), "test hooks[0]", Path::new("test"))
    }

    fn entry(text: &str) -> Result<LifecycleHook, HookEntryError> {
        match parsed(text)? {
            Entry::Run(hook) => Ok(hook),
            Entry::Tool(hook) => panic!("a tool hook: {hook:?}"),
        }
    }

    fn tool_entry(text: &str) -> Result<ToolHook, HookEntryError> {
        match parsed(text)? {
            Entry::Tool(hook) => Ok(hook),
            Entry::Run(hook) => panic!("a run hook: {hook:?}"),
        }
    }

    #[test]
    fn tool_hooks_read_matchers_decide_by_default_and_take_prompts() {
        let hook = tool_entry(
            "event = \"pre_tool_use\"\ncommand = \"guard\"\nmatcher = \"^shell$\"\narguments_matcher = 'rm\\s+-rf'",
        )
        .expect("valid");
        assert_eq!(hook.event, ToolEvent::PreToolUse);
        assert!(hook.blocking, "pre_tool_use hooks decide unless told not to");
        assert!(hook.matcher.as_ref().is_some_and(|m| m.is_match("shell")));
        assert!(hook.arguments_matcher.as_ref().is_some_and(|m| m.is_match("{\"command\":\"rm -rf /\"}")));
        assert_eq!(hook.timeout, tool_hooks::DEFAULT_TIMEOUT);
        let hook =
            tool_entry("event = \"post_tool_use\"\ntype = \"prompt\"\nprompt = \"ok?\"\ntimeout_ms = 1500")
                .expect("valid");
        assert!(!hook.blocking);
        assert_eq!(hook.timeout, Duration::from_millis(1500));
        assert!(matches!(hook.action, ToolHookAction::Prompt { .. }));
    }

    #[test]
    fn hook_entries_that_cannot_work_are_refused() {
        let error = |text: &str| parsed(text).err().map(|error| error.to_string()).unwrap_or_default();
        assert!(error("event = \"stage_start\"\nprompt = \"x\"").contains("is for pre_tool_use"));
        assert!(error("event = \"pre_tool_use\"\ncommand = \"x\"\nmatcher = \"(\"")
            .contains("not a regular expression"));
        assert!(error("event = \"run_start\"\ncommand = \"x\"\nmatcher = \"a\"").contains("nothing to match"));
        assert!(error("event = \"stage_start\"\nurl = \"https://x.example\"\ncommand = \"x\"")
            .contains("does not belong"));
        assert!(error("event = \"stage_start\"").contains("needs `command`, `url` or `prompt`"));
        assert!(error("event = \"pre_tool_us\"\ncommand = \"x\"").contains("did you mean `pre_tool_use`"));
        assert!(error("event = \"edge_selected\"\ncommand = \"x\"\nblocking = true").is_empty());
        assert!(error("event = \"checkpoint_saved\"\ncommand = \"x\"\nblocking = true").contains("can block"));
    }

    #[test]
    fn a_command_hook_reads_with_defaults() {
        let hook = entry("event = \"stage_start\"\ntype = \"command\"\ncommand = \"true\"").expect("valid");
        assert_eq!(hook.event, HookEvent::StageStart);
        assert_eq!(hook.action, HookAction::Command("true".to_string()));
        assert_eq!(hook.timeout, DEFAULT_TIMEOUT);
        assert!(hook.blocking, "a start blocks unless told not to, as in Fabro");
        assert_eq!(hook.name, "test hooks[0]");
        let hook = entry("event = \"stage_complete\"\ncommand = \"true\"").expect("valid");
        assert!(!hook.blocking, "what has happened cannot be blocked");
        let hook = entry("event = \"edge_selected\"\ncommand = \"true\"\nblocking = false").expect("valid");
        assert!(!hook.blocking);
    }

    #[test]
    fn an_unknown_event_suggests_the_closest_name() {
        let error = entry("event = \"stage_strat\"\ntype = \"command\"\ncommand = \"true\"").unwrap_err();
        let text = error.to_string();
        assert!(text.contains("unknown event `stage_strat` (did you mean `stage_start`?)"), "{text}");
        assert!(text.contains("run_start, run_complete"), "{text}");
    }

    #[test]
    fn only_https_or_loopback_http_urls_are_allowed() {
        assert!(check_url("https://hooks.example.com/x").is_ok());
        for url in ["http://127.0.0.1:8080/x", "http://localhost/x", "http://[::1]:9/x"] {
            assert!(check_url(url).is_ok(), "{url}");
        }
        for url in ["http://example.com/x", "http://10.0.0.1/x", "ftp://127.0.0.1/x"] {
            assert!(matches!(check_url(url), Err(HookEntryError::NotHttps(_))), "{url}");
        }
        assert!(matches!(check_url("not a url"), Err(HookEntryError::BadUrl { .. })));
    }

    #[test]
    fn blocking_is_only_for_starts() {
        let text = "event = \"run_complete\"\ntype = \"command\"\ncommand = \"true\"\nblocking = true";
        assert_eq!(entry(text).unwrap_err(), HookEntryError::CannotBlock(HookEvent::RunComplete));
        let text = "event = \"run_start\"\ntype = \"command\"\ncommand = \"true\"\nblocking = true";
        assert!(entry(text).expect("valid").blocking);
    }

    #[test]
    fn a_bad_when_says_where() {
        let text = "event = \"run_start\"\ntype = \"command\"\ncommand = \"true\"\nwhen = \"outcome=\"";
        let HookEntryError::BadWhen { offset, .. } = entry(text).unwrap_err() else { panic!("not BadWhen") };
        assert_eq!(offset, 8);
    }

    #[test]
    fn decisions_are_read_as_fabro_writes_them_and_only_where_they_apply() {
        let at = |text: &str, event| HookDecision::parse(text, event);
        assert_eq!(at("plain output", HookEvent::StageStart), None);
        assert_eq!(at(r#"{"note": "no decision"}"#, HookEvent::StageStart), None);
        assert_eq!(at(r#"{"decision": "proceed"}"#, HookEvent::RunStart), Some(Ok(HookDecision::Proceed)));
        assert_eq!(
            at(r#" {"decision": "skip", "reason": "off in CI"} "#, HookEvent::StageStart),
            Some(Ok(HookDecision::Skip { reason: Some("off in CI".into()) }))
        );
        assert_eq!(
            at(r#"{"decision": "override", "edge_to": "fix"}"#, HookEvent::EdgeSelected),
            Some(Ok(HookDecision::Override { to: "fix".into(), reason: None }))
        );
        assert_eq!(
            at(r#"{"decision": "block"}"#, HookEvent::StageStart),
            Some(Err("blocked: no reason given".into()))
        );
        let refused = |text: &str, event| at(text, event).and_then(Result::err).unwrap_or_default();
        assert!(refused(r#"{"decision": "override"}"#, HookEvent::StageStart).contains("without `edge_to`"));
        assert!(
            refused(r#"{"decision": "skip"}"#, HookEvent::RunStart).contains("only a stage_start hook skips")
        );
        assert!(refused(r#"{"decision": "maybe"}"#, HookEvent::StageStart)
            .contains("proceed, skip, block or override"));
    }

    #[test]
    fn http_headers_read_only_the_variables_they_are_allowed() {
        let http =
            |rest: &str| format!("event = \"run_complete\"\nurl = \"https://hooks.example.com/\"\n{rest}");
        let hook = entry(&http(
            "allowed_env_vars = [\"API_KEY\"]\n[headers]\nAuthorization = \"Bearer $API_KEY\"\nX-Team = \"ops\"\n",
        ))
        .expect("valid");
        let HookAction::Http(target) = hook.action else { panic!("an http hook") };
        assert_eq!(
            target.headers,
            [("Authorization".into(), "Bearer $API_KEY".into()), ("X-Team".into(), "ops".into())]
        );
        assert!(target.verify_tls);
        let refused = |text: &str| entry(text).err().map(|error| error.to_string()).unwrap_or_default();
        let unlisted = refused(&http("[headers]\nAuthorization = \"Bearer ${API_KEY}\"\n"));
        assert!(unlisted.contains("reads `$API_KEY`, which `allowed_env_vars` does not list"), "{unlisted}");
        assert!(refused(&http("[headers]\n\"bad header\" = \"x\"\n")).starts_with("header `bad header`"));
        assert!(refused(&http("tls = \"maybe\"\n")).contains("not one of verify, no_verify, off"));
        let plain = "event = \"run_complete\"\nurl = \"http://hooks.example.com/\"\n";
        assert!(refused(plain).contains("not https"));
        let HookAction::Http(target) = entry(&format!("{plain}tls = \"off\"\n")).expect("valid").action
        else {
            panic!("an http hook")
        };
        assert!(!target.verify_tls && target.url.scheme() == "http");
        let command = "event = \"run_complete\"\ncommand = \"true\"\nheaders = { A = \"b\" }\n";
        assert!(refused(command).contains("`headers` does not belong to a `command` hook"));
    }

    #[test]
    fn timeouts_take_seconds_or_durations() {
        assert_eq!(parse_timeout(&toml::Value::Integer(5)), Ok(Duration::from_secs(5)));
        assert_eq!(parse_timeout(&toml::Value::String("2m".into())), Ok(Duration::from_secs(120)));
        assert!(parse_timeout(&toml::Value::Integer(0)).is_err());
        assert!(parse_timeout(&toml::Value::Integer(-1)).is_err());
    }

    fn layer(path: &Path, text: &str) -> (PathBuf, Vec<toml::Value>) {
        (path.to_path_buf(), entries_of(path, text).expect("hooks"))
    }

    #[test]
    fn lower_layers_come_first_and_a_named_hook_takes_the_place_of_its_namesake() {
        let config = Path::new("/u/config.toml");
        let beside = Path::new("/w/fabro.toml");
        let command = |name: &str, command: &str| {
            format!("[[hooks]]\n{name}event = \"run_start\"\ntype = \"command\"\ncommand = \"{command}\"\n")
        };
        let hooks = LifecycleHooks::from_layers(vec![
            layer(
                config,
                &format!("default_model = \"m\"\n{}{}", command("", "a"), command("name = \"b\"\n", "b")),
            ),
            layer(beside, &format!("{}{}", command("name = \"b\"\n", "b2"), command("", "c"))),
        ])
        .expect("valid");
        let seen: Vec<(&str, &Path)> =
            hooks.hooks().iter().map(|hook| (hook.name.as_str(), hook.file.as_path())).collect();
        assert_eq!(seen, [("config.toml hooks[0]", config), ("b", beside), ("fabro.toml hooks[1]", beside)]);
        assert_eq!(hooks.hooks()[1].action, HookAction::Command("b2".into()));
    }

    #[test]
    fn hooks_must_be_tables() {
        let error = entries_of(Path::new("fabro.toml"), "hooks = \"x\"\n").unwrap_err();
        assert!(error.to_string().contains("must be an array of tables"), "{error}");
    }

    #[test]
    fn a_near_miss_of_hooks_is_refused_and_other_keys_are_left_to_their_readers() {
        let file = Path::new("fabro.toml");
        for typo in ["[[hook]]", "[[Hooks]]", "[[hoks]]"] {
            let text = format!("{typo}\nevent = \"run_start\"\ntype = \"command\"\ncommand = \"true\"\n");
            let error = entries_of(file, &text).unwrap_err();
            let name = typo.trim_matches(['[', ']']);
            assert!(
                error.to_string().contains(&format!("unknown table `{name}` (did you mean `hooks`?)")),
                "{error}"
            );
        }
        assert!(entries_of(file, "[run]\ngoal = \"x\"\n[sandbox]\nkind = \"local\"\n")
            .expect("loads")
            .is_empty());
    }

    #[tokio::test]
    async fn a_when_that_does_not_hold_skips_the_hook_and_a_blocking_failure_vetoes() {
        let dir = tempfile::tempdir().expect("tempdir");
        let hook = |command: &str, when: Option<&str>| LifecycleHook {
            name: command.to_string(),
            event: HookEvent::RunStart,
            action: HookAction::Command(command.to_string()),
            timeout: DEFAULT_TIMEOUT,
            blocking: true,
            when: when.map(|text| Condition::parse(text).expect("condition")),
            matcher: None,
            file: PathBuf::from("test"),
            on_host: false,
        };
        let hooks = LifecycleHooks {
            hooks: vec![hook("exit 3", Some("context.go=yes")), hook("echo no >&2; exit 4", None)].into(),
            tool: Vec::new().into(),
        };
        let context = Context::new();
        let firing = Firing {
            payload: HookPayload::new(HookEvent::RunStart, "r", "w", dir.path()),
            outcome: None,
            context: &context,
            artifacts: None,
            work_dir: dir.path(),
            confinement: Confinement::default(),
            writable: Vec::new(),
            readable: Vec::new(),
        };
        let mut reports = Vec::new();
        let veto = hooks.fire(&firing, &mut |report| reports.push(report)).await.unwrap_err();
        assert_eq!(veto.hook, "echo no >&2; exit 4");
        assert_eq!(veto.message, "the command exited with code 4: no");
        assert_eq!(reports.len(), 1);
        assert_eq!(reports[0].result.exit_code, Some(4));
    }
}
