//! The LLM handler: agent (`box`) and prompt (`tab`) stages send their prompt to the backend and
//! report the answer.
//!
//! The prompt is the node's `prompt` (else its label) with `{{context.KEY}}`/`{{KEY}}` placeholders
//! filled from the run context; what is sent is written to `prompt.md` and the answer to
//! `response.md` in the stage directory. The answer may steer routing with a JSON object (bare or in
//! a ```` ```json ```` fence) carrying any of `outcome`, `preferred_label` (or
//! `preferred_next_label`), `suggested_next_ids` and `context_updates`; the last such object wins.

use crate::agent::tool_hooks::{HookedStage, ToolEvent, ToolHook, ToolHooks};
use std::collections::HashMap;
use std::path::Path;

use serde_json::{Map, Value};

use crate::agent::context::compaction::lossless::{RunRecord, StageLine};
use crate::backends::simulated::SimulatedBackend;
use crate::backends::{Backend, LlmRequest, LlmResponse, StageEnv};
use crate::context::Context;
use crate::event::Event;
use crate::graph::settings::TurnLimitOutcome;
use crate::graph::HandlerType;
use crate::llm::BackendError;
use crate::memory::MemoryStore;
use crate::outcome::{Exchange, FailureClass, Outcome, Pause, PauseKind, StageStatus};
use crate::run_dir::layout;
use crate::stage::{Handler, HandlerError, StageRun};

use super::prepare_container;

/// How many characters of the response go into the `last_response` context key.
pub const LAST_RESPONSE_CHARS: usize = 200;

/// Keys that make a JSON object in a response a routing directive.
pub const DIRECTIVE_KEYS: &[&str] =
    &["outcome", "preferred_label", "preferred_next_label", "suggested_next_ids", "context_updates"];

/// Runs agent and prompt stages through the configured backend (the simulated one under
/// `--dry-run`).
pub struct LlmHandler;

#[async_trait::async_trait]
impl Handler for LlmHandler {
    async fn run(&self, stage: &StageRun<'_>) -> Result<Outcome, HandlerError> {
        prepare_container(stage).await?;
        let outcome = self.run_llm(stage).await?;
        Ok(super::with_container(stage, outcome).await)
    }
}

impl LlmHandler {
    /// Runs the stage's prompt through its backend.
    async fn run_llm(&self, stage: &StageRun<'_>) -> Result<Outcome, HandlerError> {
        let node = stage.node;
        let template = node.prompt().unwrap_or_else(|| node.label());
        let mut prompt = expand_prompt(template, stage.context);
        if let Some(preamble) = stage.past.preamble {
            // What the stage knows of the run so far, at its fidelity; kept on its own too.
            write_file(&stage.stage_dir.join(layout::PREAMBLE), preamble).await?;
            prompt = format!("{}\n\n---\n\n{prompt}", preamble.trim_end());
        }
        write_file(&stage.stage_dir.join(layout::PROMPT), &prompt).await?;
        let (thread, history) =
            stage.past.thread.map_or((None, &[][..]), |(key, history)| (Some(key), history));
        if !history.is_empty() {
            // The conversation this call continues, exactly as the backend receives it.
            let lines: Vec<String> = history.iter().filter_map(|m| serde_json::to_string(m).ok()).collect();
            write_file(&stage.stage_dir.join(layout::HISTORY), &(lines.join("\n") + "\n")).await?;
        }

        let mut request = request_for(stage, &prompt)?;
        request.agentic = node.handler_type() == HandlerType::Agent;
        request.thread = thread;
        request.history = history;
        let (response, backend_name) = complete(stage, &request).await?;
        write_file(&stage.stage_dir.join(layout::RESPONSE), &response.text).await?;

        let mut outcome = outcome_for(&node.id, &backend_name, &response);
        let allowed = node.settings.llm().is_some_and(|settings| settings.allow_truncated);
        if response.truncated && !request.agentic && !allowed {
            // A one-shot answer cut short is not the answer asked for.
            outcome = Outcome {
                status: StageStatus::Fail,
                failure_reason: Some(
                    "the model's answer was cut off at its output limit (see response.md); ask for a shorter \
                     answer, or set allow_truncated=true on the stage to accept it"
                        .to_string(),
                ),
                preferred_label: None,
                suggested_next_ids: Vec::new(),
                ..outcome
            };
        }
        let exchange = Exchange { prompt, response: response.text, conversation: response.conversation };
        Ok(Outcome { exchange: Some(exchange), ..outcome })
    }
}

/// A single-prompt request for `stage`'s node: its model settings and the stage's environment
/// (work and stage directories, events, agent settings, what the usage ceilings leave).
pub(crate) fn request_for<'a>(
    stage: &'a StageRun<'_>,
    prompt: &'a str,
) -> Result<LlmRequest<'a>, HandlerError> {
    let node = stage.node;
    let backend = node.settings.backend.as_ref().map_err(|invalid| {
        HandlerError::Terminal(format!("stage `{}` has an invalid backend: {invalid}", node.id))
    })?;
    let settings = node.settings.llm().ok_or_else(|| {
        HandlerError::Terminal(format!(
            "stage `{}` is a {} stage, not an LLM stage",
            node.id,
            node.handler_type()
        ))
    })?;
    let context = settings.context.as_ref().map_err(|errors| {
        let reasons: Vec<String> = errors.iter().map(ToString::to_string).collect();
        HandlerError::Terminal(format!(
            "stage `{}` has invalid context settings: {}",
            node.id,
            reasons.join("; ")
        ))
    })?;
    Ok(LlmRequest {
        node_id: &node.id,
        visit: stage.visit,
        agentic: false,
        prompt,
        model: settings.model.as_deref(),
        provider: settings.provider.as_deref(),
        reasoning_effort: settings.reasoning_effort.as_deref(),
        timeout: node.settings.stage.timeout,
        thread: None,
        history: &[],
        stage: Some(StageEnv {
            work_dir: stage.work_dir,
            stage_dir: stage.stage_dir,
            run_dir: stage.run.run_dir,
            events: stage.run.events,
            max_turns: settings.max_turns,
            context_window: settings.context_window,
            max_output_tokens: settings.max_output_tokens,
            backend: *backend,
            cli_agent: settings.cli_agent.as_deref(),
            usage_left: stage.budget.usage_left,
            stage_limits: stage.budget.stage_limits,
            reference_files: stage.run.reference_files,
            small_model: settings.small_model.as_deref(),
            fallback_models: settings.fallback_models.clone(),
            mcp_servers: settings.mcp_servers.clone(),
            tools: settings.tools.clone(),
            permissions: settings.permissions,
            memory: settings.memory.then(|| crate::memory::StageMemory {
                store: memory_store(stage, settings.memory_dir.as_deref()),
                extract: settings.memory_extract,
                run_id: stage.run.run_id.to_string(),
            }),
            confinement: stage.confinement.clone(),
            tool_hooks: tool_hooks(stage, &settings.tool_hooks),
            context: context.clone(),
            run_record: Some(run_record(stage)),
            watchdog: settings.watchdog,
            small_tier_parent: settings.small_tier_parent,
            turn_limit_outcome: settings.turn_limit_outcome,
        }),
    })
}

/// The hooks around the stage's tool calls: the run's, then the node's `tool_hooks.pre`/`.post`
/// (the same hooks written on the node).
fn tool_hooks(stage: &StageRun<'_>, node: &crate::graph::settings::ToolHooks) -> ToolHooks {
    let mut hooks = stage.run.tool_hooks.to_vec();
    let own = [
        ("tool_hooks.pre", ToolEvent::PreToolUse, &node.pre),
        ("tool_hooks.post", ToolEvent::PostToolUse, &node.post),
    ];
    hooks.extend(own.into_iter().filter_map(|(attribute, event, command)| {
        command.as_deref().map(|command| ToolHook::of_node(attribute, event, command))
    }));
    // The node's post hook hears of failed calls too, as it always did.
    if let Some(command) = node.post.as_deref() {
        hooks.push(ToolHook::of_node("tool_hooks.post", ToolEvent::PostToolUseFailure, command));
    }
    let hooked = HookedStage {
        run_id: stage.run.run_id.to_string(),
        workflow: stage.run.workflow.name().to_string(),
        node_id: stage.node.id.clone(),
        visit: stage.visit,
    };
    ToolHooks::new(hooks, hooked)
}

/// The project memory of a `memory=true` stage: `memory_dir`, else the work directory's project's.
/// A store still where fabro kept it before (the workflow file's repository), when the project's
/// has none yet, is used where it is, with an event that says how to move it.
fn memory_store(stage: &StageRun<'_>, memory_dir: Option<&str>) -> MemoryStore {
    let store = MemoryStore::for_stage(stage.work_dir, memory_dir);
    if memory_dir.is_some() || store.has_entries() {
        return store;
    }
    let workflow_dir = stage.run.workflow.source().path().parent().filter(|dir| !dir.as_os_str().is_empty());
    let Some(old) = workflow_dir.map(MemoryStore::of_project) else { return store };
    if old == store || !old.has_entries() {
        return store;
    }
    stage.run.events.stage_event(
        &stage.node.id,
        stage.visit,
        Event::MemoryOldStore {
            store: old.dir().display().to_string(),
            project_store: store.dir().display().to_string(),
        },
    );
    old
}

/// What the run's records say as the stage starts, for a lossless compaction inside it.
fn run_record(stage: &StageRun<'_>) -> RunRecord {
    let last_status = |node: &str| {
        stage.past.stages.iter().rev().find(|s| s.node_id == node).map(|s| match &s.failure_reason {
            Some(reason) => format!("{}: {reason}", s.status.as_str()),
            None => s.status.as_str().to_string(),
        })
    };
    RunRecord {
        run_id: stage.run.run_id.to_string(),
        goal: stage.run.workflow.goal().to_string(),
        node: stage.node.id.clone(),
        visit: stage.visit,
        goal_gates: stage
            .run
            .workflow
            .nodes()
            .filter(|node| node.is_goal_gate())
            .map(|node| (node.id.clone(), last_status(&node.id).unwrap_or_else(|| "not run yet".to_string())))
            .collect(),
        stages: stage
            .past
            .stages
            .iter()
            .map(|s| StageLine {
                node: s.node_id.clone(),
                visit: s.visit,
                handler: s.handler.as_ref().map(ToString::to_string).unwrap_or_default(),
                status: s.status.as_str().to_string(),
                failure_reason: s.failure_reason.clone(),
                command: s
                    .script
                    .as_deref()
                    .and_then(|script| script.lines().find(|l| !l.trim().is_empty()))
                    .map(|l| l.trim().to_string()),
            })
            .collect(),
        context_keys: stage
            .context
            .iter()
            .map(|(key, _)| key)
            .filter(|key| !crate::fidelity::preamble::is_internal_key(key))
            .map(str::to_string)
            .collect(),
    }
}

/// Sends `request` through the stage's backend (the simulated one under `--dry-run`), giving up
/// when the run is cancelled; returns the answer and the backend's name.
pub(crate) async fn complete(
    stage: &StageRun<'_>,
    request: &LlmRequest<'_>,
) -> Result<(LlmResponse, String), HandlerError> {
    let simulated = stage.run.dry_run;
    let backend: &dyn Backend =
        if simulated { &SimulatedBackend } else { stage.run.services.backend.as_ref() };
    let response = tokio::select! {
        biased;
        () = stage.run.cancel.cancelled() => return Err(HandlerError::Cancelled),
        result = backend.complete(request) => result,
    };
    let response = response.map_err(|err| match err {
        BackendError::Retryable(message) => HandlerError::Retryable(message),
        BackendError::Transient(transient) => HandlerError::Retryable(transient.message),
        BackendError::Unreachable(unreachable) => HandlerError::Paused(Pause::new(
            PauseKind::Provider,
            format!(
                "{unreachable}; `fabro resume {}` continues the stage once it is back",
                stage.run.run_dir.display()
            ),
        )),
        BackendError::Terminal(message) => HandlerError::Failed(FailureClass::Deterministic, message),
        BackendError::TooLarge(message) => HandlerError::Failed(FailureClass::BudgetExhausted, message),
        BackendError::Paused(message) => HandlerError::Paused(Pause::new(PauseKind::Ceiling, message)),
        BackendError::StageCeiling { node, ceiling } => HandlerError::Paused(Pause {
            stage_ceiling: Some(ceiling),
            ..Pause::new(PauseKind::StageCeiling(ceiling.bound), ceiling.reason(&node))
        }),
    })?;
    Ok((response, backend.name().to_string()))
}

/// Writes a stage file; failing to do so fails the stage (retrying will not help).
async fn write_file(path: &Path, text: &str) -> Result<(), HandlerError> {
    tokio::fs::write(path, text)
        .await
        .map_err(|err| HandlerError::Terminal(format!("cannot write {}: {err}", path.display())))
}

/// The stage's outcome: success with the response in context, adjusted by the response's last
/// routing directive, if it has one.
fn outcome_for(node_id: &str, backend_name: &str, response: &LlmResponse) -> Outcome {
    let text = &response.text;
    let mut notes = response.model.as_deref().unwrap_or(backend_name).to_string();
    if let Some(usage) = &response.usage {
        notes.push_str(&format!(
            " · {} tokens in / {} out",
            format_tokens(usage.input_tokens),
            format_tokens(usage.output_tokens)
        ));
    }
    if let Some(cost) = response.cost_usd {
        notes.push_str(&format!(" · ${cost:.4}"));
    }
    let base = |outcome: Outcome| {
        Outcome {
            usage: response.usage,
            model: response.model.clone(),
            cost_usd: response.cost_usd,
            files_touched: response.files_touched.clone(),
            context_tokens_saved: response.context_savings.clone(),
            memory_added: response.memory_added.clone(),
            usage_by_model: response.usage_by_model.clone(),
            context_window: response.context_window.clone(),
            truncated: response.truncated,
            usage_estimated: response.usage_estimated,
            project_docs: response.project_docs.clone(),
            ..outcome
        }
        .with_notes(notes.clone())
        .with_update("last_stage", node_id)
        .with_update("last_response", text.chars().take(LAST_RESPONSE_CHARS).collect::<String>())
        .with_update(format!("response.{node_id}"), text.as_str())
    };
    if let Some(limit) = response.turn_limit {
        return match limit.outcome {
            TurnLimitOutcome::Fail => base(
                Outcome::fail(format!(
                    "the agent was still calling tools when max_turns={} stopped it; raise max_turns, or \
                     set turn_limit_outcome=partial_success or success to accept unfinished work",
                    limit.max_turns
                ))
                .with_class(FailureClass::BudgetExhausted),
            ),
            accepted => {
                let status = match accepted {
                    TurnLimitOutcome::PartialSuccess => StageStatus::PartialSuccess,
                    _ => StageStatus::Success,
                };
                let outcome = base(Outcome { status, ..Outcome::success() });
                let notes = format!(
                    "{} · stopped by max_turns={} (turn_limit_outcome accepts it)",
                    outcome.notes.as_deref().unwrap_or_default(),
                    limit.max_turns
                );
                outcome.with_notes(notes)
            }
        };
    }
    let Some(directive) = find_directive(text) else { return base(Outcome::success()) };
    match apply_directive(base(Outcome::success()), &directive) {
        Ok(outcome) => outcome,
        Err(reason) => base(Outcome::fail(format!("the response's routing directive is invalid: {reason}"))),
    }
}

/// Token counts for notes: `950`, `1.2k`, `12.4k`.
pub fn format_tokens(count: u64) -> String {
    if count < 1000 {
        count.to_string()
    } else {
        format!("{:.1}k", count as f64 / 1000.0)
    }
}

/// Fills `{{context.KEY}}` and `{{KEY}}` from the context (missing keys become empty) and `$goal`
/// from `graph.goal` when the context has it. One pass: substituted text is not expanded again.
/// Braces that do not enclose a plain key (`{{ }}`, `{{a b}}`) are left as written.
pub fn expand_prompt(template: &str, context: &Context) -> String {
    let goal = context.get_text("graph.goal");
    let mut out = String::with_capacity(template.len());
    let mut rest = template;
    while let Some(pos) = rest.find(['{', '$']) {
        out.push_str(&rest[..pos]);
        rest = &rest[pos..];
        if let Some(after) = rest.strip_prefix("{{") {
            if let Some(end) = after.find("}}") {
                let key = after[..end].trim();
                if is_placeholder_key(key) {
                    let key = key.strip_prefix("context.").unwrap_or(key);
                    out.push_str(&context.get_text(key).unwrap_or_default());
                    rest = &after[end + 2..];
                    continue;
                }
            }
            out.push_str("{{");
            rest = after;
            continue;
        }
        if let (Some(goal), Some(after)) = (goal.as_deref(), rest.strip_prefix("$goal")) {
            out.push_str(goal);
            rest = after;
            continue;
        }
        // `{` or `$`, both one byte.
        out.push_str(&rest[..1]);
        rest = &rest[1..];
    }
    out.push_str(rest);
    out
}

fn is_placeholder_key(key: &str) -> bool {
    !key.is_empty() && key.chars().all(|c| c.is_alphanumeric() || matches!(c, '_' | '.' | '-'))
}

/// The last JSON object in `text` that has a directive key. Objects nested in another parsed
/// object are part of it and not considered on their own.
pub fn find_directive(text: &str) -> Option<Map<String, Value>> {
    let mut last = None;
    for object in json_objects(text) {
        if DIRECTIVE_KEYS.iter().any(|key| object.contains_key(*key)) {
            last = Some(object);
        }
    }
    last
}

/// Applies a directive to the handler's outcome; `Err` says what is wrong with it.
fn apply_directive(mut outcome: Outcome, directive: &Map<String, Value>) -> Result<Outcome, String> {
    let text_field = |key: &str| -> Result<Option<String>, String> {
        match directive.get(key) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::String(text)) => Ok(Some(text.clone())),
            Some(other) => Err(format!("`{key}` must be a string, not {other}")),
        }
    };
    if let Some(status) = text_field("outcome")? {
        let status: StageStatus = status.parse().map_err(|err| format!("{err}"))?;
        outcome.status = status;
        if status == StageStatus::Fail {
            let reason = text_field("failure_reason")?
                .filter(|reason| !reason.trim().is_empty())
                .unwrap_or_else(|| "the response reported outcome `fail`".to_string());
            outcome.failure_reason = Some(reason);
        }
    }
    let label = match text_field("preferred_label")? {
        Some(label) => Some(label),
        None => text_field("preferred_next_label")?,
    };
    if label.is_some() {
        outcome.preferred_label = label;
    }
    match directive.get("suggested_next_ids") {
        None | Some(Value::Null) => {}
        Some(Value::String(id)) => outcome.suggested_next_ids = vec![id.clone()],
        Some(Value::Array(items)) => {
            outcome.suggested_next_ids = items
                .iter()
                .map(|item| match item {
                    Value::String(id) => Ok(id.clone()),
                    other => Err(format!("`suggested_next_ids` must list node ids as strings, not {other}")),
                })
                .collect::<Result<_, _>>()?;
        }
        Some(other) => return Err(format!("`suggested_next_ids` must be an array of node ids, not {other}")),
    }
    match directive.get("context_updates") {
        None | Some(Value::Null) => {}
        Some(Value::Object(updates)) => {
            for (key, value) in updates {
                outcome.context_updates.insert(key.clone(), value.clone());
            }
        }
        Some(other) => return Err(format!("`context_updates` must be an object, not {other}")),
    }
    Ok(outcome)
}

/// Every top-level JSON object in `text`, in order: balanced `{...}` spans (braces inside JSON
/// strings do not count) that parse as JSON objects. Text around and between them is ignored;
/// a span that does not parse is searched for objects inside it.
pub fn json_objects(text: &str) -> Vec<Map<String, Value>> {
    let mut scanner = BraceScanner::new(text.as_bytes());
    let mut objects = Vec::new();
    let mut from = 0;
    while let Some(offset) = text.get(from..).and_then(|rest| rest.find('{')) {
        let start = from + offset;
        from = start + 1;
        let Some(end) = scanner.matching_close(start) else { continue };
        // Both ends are ASCII braces, so the slice is on character boundaries.
        let Some(candidate) = text.get(start..=end) else { continue };
        if let Ok(Value::Object(object)) = serde_json::from_str::<Value>(candidate) {
            objects.push(object);
            from = end + 1;
        }
    }
    objects
}

/// Finds the `}` closing a `{`, treating `"..."` (with backslash escapes) as JSON strings.
///
/// A scan from one brace sees every brace it passes outside a string exactly as a scan starting
/// there would, so their results are remembered: known spans are skipped and a brace known to be
/// unclosed ends the scan at once. That keeps text full of stray braces linear; a step budget
/// bounds whatever is left.
struct BraceScanner<'a> {
    bytes: &'a [u8],
    known: HashMap<usize, Option<usize>>,
    budget: usize,
}

impl<'a> BraceScanner<'a> {
    fn new(bytes: &'a [u8]) -> Self {
        BraceScanner { bytes, known: HashMap::new(), budget: bytes.len().saturating_mul(16).max(1 << 20) }
    }

    fn matching_close(&mut self, start: usize) -> Option<usize> {
        if let Some(known) = self.known.get(&start) {
            return *known;
        }
        if self.bytes.get(start) != Some(&b'{') {
            return None;
        }
        let mut open = vec![start];
        let mut in_string = false;
        let mut escaped = false;
        let mut i = start + 1;
        while let Some(&byte) = self.bytes.get(i) {
            if self.budget == 0 {
                return None;
            }
            self.budget -= 1;
            if in_string {
                if escaped {
                    escaped = false;
                } else if byte == b'\\' {
                    escaped = true;
                } else if byte == b'"' {
                    in_string = false;
                }
            } else {
                match byte {
                    b'"' => in_string = true,
                    b'{' => match self.known.get(&i) {
                        Some(Some(close)) => {
                            i = close + 1;
                            continue;
                        }
                        Some(None) => break,
                        None => open.push(i),
                    },
                    b'}' => {
                        if let Some(opened) = open.pop() {
                            self.known.insert(opened, Some(i));
                        }
                        if open.is_empty() {
                            return Some(i);
                        }
                    }
                    _ => {}
                }
            }
            i += 1;
        }
        for opened in open {
            self.known.insert(opened, None);
        }
        None
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::backends::scripted::ScriptedBackend;
    use crate::handlers::test_support::Fixture;

    const DOT: &str = r#"digraph G {
        graph [goal="Ship it"]
        start [shape=Mdiamond]
        exit [shape=Msquare]
        plan [shape=box, prompt="Plan for $goal using {{context.lang}} and {{ tool }}.", llm_model="gpt-5.2", reasoning_effort="high"]
        ask [shape=tab, label="Summarise the plan"]
        start -> plan -> ask -> exit
    }"#;

    fn scripted(json: &str) -> Arc<dyn Backend> {
        Arc::new(ScriptedBackend::from_json(json, "test").expect("valid responses"))
    }

    fn read(fixture: &Fixture, node: &str, file: &str) -> String {
        std::fs::read_to_string(fixture.dir.path().join("stages").join(node).join("1").join(file))
            .expect("stage file")
    }

    /// Runs `plan` with a scripted response.
    async fn run_with_response(response: &str) -> Outcome {
        let mut fixture = Fixture::new(DOT);
        fixture.services.backend = scripted(&serde_json::json!({ "plan": response }).to_string());
        LlmHandler.run(&fixture.stage("plan")).await.expect("stage runs")
    }

    /// Records the request it gets and answers or fails as told.
    struct Recording {
        result: Result<String, BackendError>,
        seen: std::sync::Mutex<Vec<Seen>>,
    }

    /// What a [`Recording`] backend was asked: prompt, agentic, model, provider, reasoning effort.
    type Seen = (String, bool, Option<String>, Option<String>, Option<String>);

    #[async_trait::async_trait]
    impl Backend for Recording {
        fn name(&self) -> &str {
            "recording"
        }

        async fn complete(&self, request: &LlmRequest<'_>) -> Result<LlmResponse, BackendError> {
            if let Ok(mut seen) = self.seen.lock() {
                seen.push((
                    request.prompt.to_string(),
                    request.agentic,
                    request.model.map(str::to_string),
                    request.provider.map(str::to_string),
                    request.reasoning_effort.map(str::to_string),
                ));
            }
            let text = self.result.clone()?;
            Ok(LlmResponse { text, ..LlmResponse::default() })
        }
    }

    fn recording(result: Result<String, BackendError>) -> Arc<Recording> {
        Arc::new(Recording { result, seen: Default::default() })
    }

    /// Never answers.
    struct Hang;

    #[async_trait::async_trait]
    impl Backend for Hang {
        fn name(&self) -> &str {
            "hang"
        }

        async fn complete(&self, _request: &LlmRequest<'_>) -> Result<LlmResponse, BackendError> {
            std::future::pending().await
        }
    }

    #[tokio::test]
    async fn writes_exactly_what_is_sent_and_received() {
        let mut fixture = Fixture::new(DOT);
        fixture.context.set("lang", "Rust");
        fixture.context.set("tool", serde_json::json!({"name": "cargo"}));
        fixture.services.backend = scripted(r#"{"plan": "Step 1: write code.\n"}"#);
        let outcome = LlmHandler.run(&fixture.stage("plan")).await.unwrap();

        let prompt = read(&fixture, "plan", "prompt.md");
        assert_eq!(prompt, r#"Plan for Ship it using Rust and {"name":"cargo"}."#);
        assert_eq!(read(&fixture, "plan", "response.md"), "Step 1: write code.\n");
        assert_eq!(outcome.status, StageStatus::Success);
        assert_eq!(outcome.context_updates["last_stage"], "plan");
        assert_eq!(outcome.context_updates["last_response"], "Step 1: write code.\n");
        assert_eq!(outcome.context_updates["response.plan"], "Step 1: write code.\n");
        assert_eq!(outcome.notes.as_deref(), Some("scripted · 13 tokens in / 5 out"));
    }

    #[tokio::test]
    async fn request_carries_node_settings() {
        let mut fixture = Fixture::new(DOT);
        let backend = recording(Ok("fine".to_string()));
        fixture.services.backend = backend.clone();
        LlmHandler.run(&fixture.stage("plan")).await.unwrap();
        LlmHandler.run(&fixture.stage("ask")).await.unwrap();
        let seen = backend.seen.lock().unwrap();
        assert_eq!(seen[0].0, "Plan for Ship it using  and .");
        assert!(seen[0].1, "box stages are agentic");
        assert_eq!(seen[0].2.as_deref(), Some("gpt-5.2"));
        assert_eq!(seen[0].3, None);
        assert_eq!(seen[0].4.as_deref(), Some("high"));
        assert_eq!(seen[1].0, "Summarise the plan");
        assert!(!seen[1].1, "tab stages are single prompts");
    }

    #[tokio::test]
    async fn missing_keys_expand_to_nothing_and_label_is_the_fallback_prompt() {
        let mut fixture = Fixture::new(DOT);
        fixture.services.backend = scripted("{}");
        LlmHandler.run(&fixture.stage("ask")).await.unwrap();
        assert_eq!(read(&fixture, "ask", "prompt.md"), "Summarise the plan");
        LlmHandler.run(&fixture.stage("plan")).await.unwrap();
        assert_eq!(read(&fixture, "plan", "prompt.md"), "Plan for Ship it using  and .");
    }

    #[test]
    fn placeholders_expand_once_and_odd_braces_stay() {
        let mut context = Context::new();
        context.set("a", "{{b}}");
        context.set("b", "B");
        context.set("n", 3);
        context.set("graph.goal", "Win");
        assert_eq!(expand_prompt("{{a}}|{{context.b}}|{{ n }}|$goal", &context), "{{b}}|B|3|Win");
        assert_eq!(expand_prompt("{{ }} {{a b}} {{{x}}} {{ $ {", &context), "{{ }} {{a b}} {{{x}}} {{ $ {");
        assert_eq!(expand_prompt("é{{b}}ü$", &context), "éBü$");
        assert_eq!(expand_prompt("no goal $goal", &Context::new()), "no goal $goal");
    }

    #[tokio::test]
    async fn goal_override_in_context_expands_remaining_goal() {
        let mut fixture = Fixture::new(
            r#"digraph G { start [shape=Mdiamond]; exit [shape=Msquare];
               plan [label="Work on $goal"]; start -> plan -> exit }"#,
        );
        fixture.context.set("graph.goal", "the override");
        LlmHandler.run(&fixture.stage("plan")).await.unwrap();
        assert_eq!(read(&fixture, "plan", "prompt.md"), "Work on the override");
    }

    #[tokio::test]
    async fn last_response_is_cut_at_200_characters() {
        let long = "é".repeat(150) + &"ü".repeat(100);
        let outcome = run_with_response(&long).await;
        let last = outcome.context_updates["last_response"].as_str().unwrap();
        assert_eq!(last.chars().count(), 200);
        assert_eq!(last, "é".repeat(150) + &"ü".repeat(50));
        assert_eq!(outcome.context_updates["response.plan"], long.as_str());
    }

    #[tokio::test]
    async fn the_last_directive_wins() {
        let response = r#"First I thought: {"outcome": "success", "preferred_label": "Ship"}
Then: {"outcome": "failed", "preferred_label": "Fix", "context_updates": {"tests": "red", "last_stage": "x"}}
Done."#;
        let outcome = run_with_response(response).await;
        assert_eq!(outcome.status, StageStatus::Fail);
        assert_eq!(outcome.preferred_label.as_deref(), Some("Fix"));
        assert!(outcome.failure_reason.is_some());
        assert_eq!(outcome.context_updates["tests"], "red");
        // Directive updates go on top of the handler's own.
        assert_eq!(outcome.context_updates["last_stage"], "x");
        assert_eq!(outcome.context_updates["response.plan"], response);
    }

    #[tokio::test]
    async fn fenced_directives_are_read() {
        let response = "Looks good.\n\n```json\n{\n  \"outcome\": \"partial_success\",\n  \"preferred_next_label\": \"Review\",\n  \"suggested_next_ids\": [\"review\"],\n  \"note\": \"a } in a string { and \\\" quote\"\n}\n```\n";
        let outcome = run_with_response(response).await;
        assert_eq!(outcome.status, StageStatus::PartialSuccess);
        assert_eq!(outcome.preferred_label.as_deref(), Some("Review"));
        assert_eq!(outcome.suggested_next_ids, vec!["review".to_string()]);
        assert_eq!(outcome.failure_reason, None);
    }

    #[tokio::test]
    async fn json_without_directive_keys_is_ignored() {
        let outcome = run_with_response(r#"Config: {"name": "x", "data": {"outcome": "fail"}} ok"#).await;
        assert_eq!(outcome.status, StageStatus::Success);
        assert_eq!(outcome.preferred_label, None);
        assert!(!outcome.context_updates.contains_key("name"));
    }

    #[tokio::test]
    async fn custom_outcomes_route_and_malformed_ones_fail_the_stage_clearly() {
        let outcome = run_with_response(r#"{"outcome": "needs_dod"}"#).await;
        assert_eq!(outcome.status.as_str(), "needs_dod");
        assert_eq!(outcome.failure_reason, None);

        let outcome = run_with_response(r#"{"outcome": "pretty great"}"#).await;
        assert_eq!(outcome.status, StageStatus::Fail);
        let reason = outcome.failure_reason.unwrap();
        assert!(reason.contains("unknown outcome `pretty great`"), "{reason}");
        assert_eq!(outcome.context_updates["last_stage"], "plan");

        let outcome = run_with_response(r#"{"outcome": 3}"#).await;
        assert_eq!(outcome.status, StageStatus::Fail);
        assert!(outcome.failure_reason.unwrap().contains("`outcome` must be a string"));

        let outcome = run_with_response(r#"{"context_updates": [1]}"#).await;
        assert_eq!(outcome.status, StageStatus::Fail);
    }

    #[tokio::test]
    async fn malformed_json_never_panics() {
        for response in [
            "{",
            "}",
            "{{{{",
            "}}}{",
            r#"{"outcome": "fail""#,
            r#"{"outcome": fail}"#,
            "{\"a\": \"\\",
            "{\"é\": \"ü\\\"}\" ",
            "``` json {\"outcome\": } ```",
            "\u{0}{\u{fffd}}",
            "",
        ] {
            let outcome = run_with_response(response).await;
            assert_eq!(outcome.status, StageStatus::Success, "{response:?}");
        }
        // An unparsable span around a directive still lets the directive be found.
        let outcome = run_with_response(r#"{ broken {"outcome": "retry"} "#).await;
        assert_eq!(outcome.status, StageStatus::Retry);
        // A stray quote before a directive does not hide it.
        let outcome = run_with_response(r#"the { key, a 5" screen {"outcome": "skipped"}"#).await;
        assert_eq!(outcome.status, StageStatus::Skipped);
    }

    #[test]
    fn scanning_pathological_text_is_fast() {
        let text = "{\"".repeat(50_000) + &"{".repeat(100_000) + r#"{"outcome": "fail"}"#;
        let started = std::time::Instant::now();
        let _ = find_directive(&text);
        assert!(started.elapsed() < std::time::Duration::from_secs(5));
        assert!(find_directive(&("{".repeat(200_000) + r#"{"outcome": "fail"}"#)).is_some());
    }

    #[test]
    fn token_counts_are_short() {
        assert_eq!(format_tokens(0), "0");
        assert_eq!(format_tokens(999), "999");
        assert_eq!(format_tokens(1000), "1.0k");
        assert_eq!(format_tokens(1234), "1.2k");
        assert_eq!(format_tokens(12_400), "12.4k");
    }

    #[tokio::test]
    async fn backend_errors_map_to_handler_errors() {
        let mut fixture = Fixture::new(DOT);
        fixture.services.backend = recording(Err(BackendError::Retryable("rate limited".into())));
        assert_eq!(
            LlmHandler.run(&fixture.stage("plan")).await,
            Err(HandlerError::Retryable("rate limited".into()))
        );
        fixture.services.backend = recording(Err(BackendError::Terminal("bad key".into())));
        assert_eq!(
            LlmHandler.run(&fixture.stage("plan")).await,
            Err(HandlerError::Failed(FailureClass::Deterministic, "bad key".into()))
        );
        fixture.services.backend = recording(Err(BackendError::TooLarge("context length exceeded".into())));
        assert_eq!(
            LlmHandler.run(&fixture.stage("plan")).await,
            Err(HandlerError::Failed(FailureClass::BudgetExhausted, "context length exceeded".into()))
        );
        assert!(!fixture.dir.path().join("stages/plan/1/response.md").exists());
    }

    #[tokio::test]
    async fn dry_run_uses_the_simulated_backend() {
        let mut fixture = Fixture::new(DOT);
        fixture.services.backend = scripted(r#"{"plan": "{\"outcome\": \"fail\"}"}"#);
        fixture.dry_run = true;
        let outcome = LlmHandler.run(&fixture.stage("plan")).await.unwrap();
        assert_eq!(outcome.status, StageStatus::Success);
        let response = read(&fixture, "plan", "response.md");
        assert!(response.starts_with("[simulated] Stage `plan`, visit 1"), "{response}");
        assert!(outcome.notes.unwrap().starts_with("simulated · "));
    }

    #[tokio::test]
    async fn cancellation_stops_the_call() {
        let mut fixture = Fixture::new(DOT);
        fixture.services.backend = Arc::new(Hang);
        let stage = fixture.stage("plan");
        let cancel = fixture.cancel.clone();
        let (result, ()) = tokio::join!(LlmHandler.run(&stage), async move {
            tokio::time::sleep(std::time::Duration::from_millis(20)).await;
            cancel.cancel();
        });
        assert_eq!(result, Err(HandlerError::Cancelled));
        // Already cancelled: returns at once.
        assert_eq!(LlmHandler.run(&stage).await, Err(HandlerError::Cancelled));
    }
}
