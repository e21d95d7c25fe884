//! The `live` backend: real model calls. Each request is routed to its stage's provider and
//! model ([`LlmConfig::resolve`]); prompt stages make one call, agent stages run the tool loop
//! ([`crate::agent::tool_loop`]), and `backend="cli"` stages run an installed coding agent
//! ([`super::cli_agent`]). Usage and estimated cost come back with the response; everything
//! recorded is redacted.

use crate::agent::context::side_call::output_budget;
use crate::agent::context::thread_filters;
use crate::agent::context::tokens;
use crate::agent::context::too_large;
use crate::agent::context::trim_retry::text_only;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use serde_json::json;

use super::config::{ConfigError, LlmConfig, ProviderKind, Resolved};
use super::{Backend, LlmRequest, LlmResponse, StageEnv, TurnLimit};
use crate::agent::answer_log::AnswerLog;
use crate::agent::tool_loop::{self, AgentSettings};
use crate::agent::tools::{ToolFamily, Toolbox};
use crate::agent::transcript::{assistant_record, Transcript};
use crate::chat::ChatMessage;
use crate::event::Event;
use crate::graph::{settings, Workflow};
use crate::llm::anthropic::Anthropic;
use crate::llm::chat::{ChatProvider, ChatRequest};
use crate::llm::failover;
use crate::llm::openai::{Dialect, OpenAi};
use crate::llm::retry::Retrying;
use crate::llm::stream::{AnswerEvent, AnswerWatcher, Streaming};
use crate::llm::{BackendError, Unreachable};
use crate::redaction::Secrets;
use crate::run_dir::layout;
use crate::usage::{ModelUsage, Usage};

/// Where a provider is asked whether it is there: its model list (`GET /v1/models`), which both
/// APIs and every OpenAI-compatible server have and which costs nothing.
fn probe_url(settings: &super::config::ProviderSettings) -> String {
    let base = settings.base_url.trim_end_matches('/');
    match settings.kind {
        ProviderKind::Anthropic if !base.ends_with("/v1") => format!("{base}/v1/models"),
        _ => format!("{base}/models"),
    }
}

/// Checks that the MCP servers every agent stage of `workflow` names are among `servers`: a
/// live run checks this before it starts, and so do simulated and dry runs, which start none.
pub fn check_mcp_servers(
    workflow: &Workflow,
    servers: &crate::agent::mcp::McpServers,
) -> Result<(), ConfigError> {
    for node in workflow.nodes().filter(|node| node.handler_type() == crate::graph::HandlerType::Agent) {
        let Some(llm) = node.settings.llm() else { continue };
        if let Some(name) = servers.unknown(&llm.mcp_servers).first() {
            let configured: Vec<&str> = servers.names().collect();
            return Err(ConfigError::Mcp(format!(
                "stage `{}` has mcp_servers naming `{name}`, which is not configured ({}); add \
                 [mcp_servers.{name}] to the config file or an --mcp-config file",
                node.id,
                match configured.is_empty() {
                    true => "no MCP server is".to_string(),
                    false => format!("configured: {}", configured.join(", ")),
                }
            )));
        }
    }
    Ok(())
}

/// Most output tokens asked for per call (less for small context windows).
const MAX_OUTPUT_TOKENS: u64 = 8_192;

/// The output tokens a call to a model with `window` asks for at most: a quarter of the window,
/// from 256 to [`MAX_OUTPUT_TOKENS`].
fn output_limit(window: u64) -> u32 {
    (window / 4).clamp(256, MAX_OUTPUT_TOKENS) as u32
}

/// Real providers, built once per run from the configuration.
pub struct LiveBackend {
    config: LlmConfig,
    providers: BTreeMap<String, Arc<dyn ChatProvider>>,
    secrets: Secrets,
    /// The run's MCP servers, started on first use.
    mcp: crate::agent::mcp::McpServers,
    /// Who is asked about tool calls above a stage's permissions (none: they are denied).
    person: Option<Arc<dyn crate::interview::Interviewer>>,
    /// What servers said of their models during the run (by provider and model): the window a
    /// rejection stated, the characters-per-token ratio their reports set.
    learned: std::sync::Mutex<BTreeMap<(String, String), Learned>>,
    /// The web tools' client and search provider.
    web: crate::agent::web::Web,
}

/// What the run learned of one model on one provider.
#[derive(Debug, Clone, Copy, Default)]
struct Learned {
    /// The window a rejection stated.
    window: Option<u64>,
    /// The window the server's model list (or llama.cpp's `/props`) states.
    listed: Option<u64>,
    chars_per_token: Option<f64>,
}

impl LiveBackend {
    pub fn new(config: LlmConfig) -> Result<LiveBackend, BackendError> {
        let client = crate::llm::http::client()?;
        let secrets = config.register_secrets();
        let mut providers: BTreeMap<String, Arc<dyn ChatProvider>> = BTreeMap::new();
        for (name, settings) in &config.providers {
            let provider: Arc<dyn ChatProvider> = match settings.kind {
                ProviderKind::Anthropic => Arc::new(Anthropic {
                    name: name.clone(),
                    base_url: settings.base_url.clone(),
                    api_key: settings.api_key.clone().unwrap_or_default(),
                    streaming: Streaming::new(settings.stream),
                    client: client.clone(),
                    secrets: secrets.clone(),
                }),
                kind => Arc::new(OpenAi {
                    name: name.clone(),
                    base_url: settings.base_url.clone(),
                    api_key: settings.api_key.clone(),
                    dialect: if kind == ProviderKind::OpenAi {
                        Dialect::OpenAi
                    } else {
                        Dialect::Compatible { reasoning_effort: settings.takes_reasoning_effort(name) }
                    },
                    options: settings.options,
                    streaming: Streaming::new(settings.stream),
                    client: client.clone(),
                    secrets: secrets.clone(),
                }),
            };
            providers.insert(name.clone(), provider);
        }
        let mcp = crate::agent::mcp::McpServers::new(config.mcp_servers.clone());
        let web = crate::agent::web::Web::new(config.web_search.clone()).map_err(|error| {
            BackendError::Terminal(format!("cannot set up the HTTP client of the web tools: {error}"))
        })?;
        Ok(LiveBackend { config, providers, secrets, mcp, person: None, learned: Default::default(), web })
    }

    /// Keeps the context windows an OpenAI-compatible server states for its models: in its model
    /// list (vLLM's `max_model_len`, LM Studio's loaded context length), else at llama.cpp's
    /// `/props`, for every model the provider serves.
    async fn note_listed_windows(
        &self,
        client: &reqwest::Client,
        provider: &str,
        settings: &super::config::ProviderSettings,
        list: Option<&str>,
    ) {
        let mut windows = list.map(crate::llm::http::listed_windows).unwrap_or_default();
        if windows.is_empty() {
            let root = settings.base_url.trim_end_matches('/').trim_end_matches("/v1");
            if let Ok(Some(props)) = crate::llm::http::probe(client, &format!("{root}/props")).await {
                if let Some(window) = crate::llm::http::props_window(&props) {
                    // llama.cpp's server serves one model, whatever name a stage gives it.
                    windows = vec![(String::new(), window)];
                }
            }
        }
        let Ok(mut learned) = self.learned.lock() else { return };
        for (model, window) in windows {
            learned.entry((provider.to_string(), model)).or_default().listed = Some(window);
        }
    }

    /// Asks `person` about agent tool calls above a stage's permissions.
    pub fn with_person(mut self, person: Option<Arc<dyn crate::interview::Interviewer>>) -> LiveBackend {
        self.person = person;
        self
    }

    /// Checks that every LLM stage of `workflow` has a provider and model (or a CLI agent), and
    /// that the MCP servers agent stages name are configured, so a run does not stop halfway for
    /// want of a key.
    pub fn check(&self, workflow: &Workflow) -> Result<(), ConfigError> {
        check_mcp_servers(workflow, &self.mcp)?;
        for node in workflow.nodes().filter(|node| node.handler_type().is_llm()) {
            let Some(llm) = node.settings.llm() else { continue };
            let backend = node.settings.backend.as_ref().map_err(|invalid| {
                ConfigError::Backend(format!("stage `{}` has an invalid backend: {invalid}", node.id))
            })?;
            match backend {
                settings::Backend::Cli => {
                    if llm.cli_agent.is_none() {
                        return Err(ConfigError::Backend(format!(
                            "stage `{}` has backend=\"cli\" but no cli_agent; set cli_agent=\"claude\", \"codex\", \
                             \"gemini\" or a command",
                            node.id
                        )));
                    }
                }
                settings::Backend::Api => {
                    let resolved =
                        self.config.resolve(&node.id, llm.model.as_deref(), llm.provider.as_deref())?;
                    for fallback in &llm.fallback_models {
                        self.config.resolve_fallback(&node.id, fallback).map_err(|error| {
                            ConfigError::NoProvider(format!("`{fallback}` in fallback_models: {error}"))
                        })?;
                    }
                    let guard = llm.small_tier_parent;
                    if node.handler_type() == crate::graph::HandlerType::Agent
                        && settings::is_small_tier(&resolved.model)
                        && self.small_tier_parent(guard) == settings::SmallTierParent::Refuse
                    {
                        let (problem, fix) = settings::small_tier_complaint(&node.id, &resolved.model);
                        return Err(ConfigError::Backend(format!(
                            "{problem}, and small_tier_parent=refuse; {fix}"
                        )));
                    }
                }
            }
        }
        Ok(())
    }

    pub fn config(&self) -> &LlmConfig {
        &self.config
    }

    /// The built-in tools of an agent stage: its `tools` (checked by validation: unknown names are
    /// left out here), else those shaped for the family of its model; the web tools only where
    /// the stage may use them (a web tool its `tools` names and it may not use is a
    /// `web_tool_withheld` transcript record).
    fn builtin_tools(
        &self,
        stage: &StageEnv<'_>,
        resolved: &Resolved,
        web_tools: bool,
        transcript: &Transcript<'_>,
    ) -> Vec<&'static str> {
        let mut tools = self.shaped_tools(stage, resolved);
        tools.retain(|tool| match self.web.allows(tool, web_tools, &stage.confinement) {
            Ok(()) => true,
            Err(withheld) => {
                if stage.tools.is_some() {
                    transcript
                        .record("web_tool_withheld", json!({"tool": tool, "reason": withheld.reason()}));
                }
                false
            }
        });
        tools
    }

    /// The built-in tools an agent stage's `tools` names, else those shaped for the family of its
    /// model.
    fn shaped_tools(&self, stage: &StageEnv<'_>, resolved: &Resolved) -> Vec<&'static str> {
        if let Some(named) = &stage.tools {
            return crate::agent::tools::BUILTIN_TOOLS
                .into_iter()
                .filter(|tool| named.iter().any(|name| name == tool))
                .collect();
        }
        let kind = self.config.providers.get(&resolved.provider).map(|provider| provider.kind);
        let family = match (kind, crate::models::infer_provider(&resolved.model)) {
            (Some(ProviderKind::OpenAi), _) | (_, Some("openai")) => ToolFamily::OpenAi,
            (Some(ProviderKind::Anthropic), _) | (_, Some("anthropic")) => ToolFamily::Anthropic,
            _ if resolved.provider == "gemini" => ToolFamily::Gemini,
            (_, Some("gemini")) => ToolFamily::Gemini,
            _ => ToolFamily::Other,
        };
        family.default_tools()
    }

    /// The stage's small-tier guard, else the config file's, else `warn`.
    fn small_tier_parent(&self, stage: Option<settings::SmallTierParent>) -> settings::SmallTierParent {
        stage.or(self.config.small_tier_parent).unwrap_or_default()
    }

    async fn run_cli(
        &self,
        request: &LlmRequest<'_>,
        stage: &StageEnv<'_>,
        agent: &str,
    ) -> Result<LlmResponse, BackendError> {
        let transcript = Transcript::new(
            Some(stage.stage_dir),
            Some(stage.events),
            request.node_id,
            request.visit,
            self.secrets.clone(),
        );
        // Absolute: the agent runs in the work directory.
        let prompt_file =
            std::path::absolute(stage.stage_dir.join(layout::PROMPT)).ok().filter(|p| p.exists());
        let run = super::cli_agent::run(
            agent,
            request.prompt,
            stage.work_dir,
            prompt_file.as_deref(),
            request.timeout,
            &self.secrets,
            &stage.confinement,
        )
        .await?;
        transcript.record("cli_agent", json!({"agent": agent, "stdout": run.stdout, "stderr": run.stderr}));
        Ok(LlmResponse {
            text: run.stdout.trim_end().to_string(),
            model: Some(format!("cli:{}", agent.trim())),
            ..LlmResponse::default()
        })
    }

    async fn run_model(&self, request: &LlmRequest<'_>) -> Result<LlmResponse, BackendError> {
        let resolved = self
            .config
            .resolve(request.node_id, request.model, request.provider)
            .map_err(|error| BackendError::Terminal(error.to_string()))?;
        let provider = self.providers.get(&resolved.provider).ok_or_else(|| {
            BackendError::Terminal(format!("provider `{}` is not configured", resolved.provider))
        })?;
        let model = resolved.model.as_str();
        let stage = request.stage.as_ref();
        let transcript = Transcript::new(
            stage.map(|s| s.stage_dir),
            stage.map(|s| s.events),
            request.node_id,
            request.visit,
            self.secrets.clone(),
        );
        let report = |event: Event| {
            let waiting = matches!(event, Event::LlmRetry { .. });
            transcript.event(event);
            if waiting {
                // Watchers see a wait for the provider as it happens, not when the stage ends.
                transcript.flush_events();
            }
        };
        // Streamed answers go to the stage's answer.log as they are written.
        let answer_log = AnswerLog::new(stage.map(|s| s.stage_dir), self.secrets.clone());
        let watch = |event: AnswerEvent<'_>| match event {
            AnswerEvent::Unstreamed { provider, model, with_tools, reason } => {
                transcript.event(Event::LlmUnstreamed {
                    provider: provider.to_string(),
                    model: model.to_string(),
                    with_tools,
                    reason: reason.to_string(),
                });
            }
            other => answer_log.take(other),
        };
        // Every call is retried in place while its provider is away or busy (`llm.retry`).
        let mut targets = vec![(self.retrying(&resolved.provider, &report)?, model.to_string())];
        for fallback in stage.map_or(&[][..], |s| s.fallback_models.as_slice()) {
            targets.push(self.fallback_target(request.node_id, fallback, &report)?);
        }
        let chain = targets
            .iter()
            .map(|(provider, model)| failover::Target { provider, model: model.clone() })
            .collect();
        let failover = failover::Failover::new(chain, report);
        let learned_key = (resolved.provider.clone(), model.to_string());
        // What the run learned of this model, and of any model the provider serves (`/props`).
        let (learned, served) = self
            .learned
            .lock()
            .map(|learned| {
                let of = |model: &str| learned.get(&(resolved.provider.clone(), model.to_string())).copied();
                (of(model).unwrap_or_default(), of("").unwrap_or_default())
            })
            .unwrap_or_default();
        let (window, window_source) =
            match (stage.and_then(|s| s.context_window), self.config.known_context_window(model)) {
                (Some(window), _) => (window, "node"),
                (None, Some((window, source))) => (window, source),
                (None, None) => match (learned.window, learned.listed.or(served.listed)) {
                    (Some(window), _) => (window, "learned"),
                    (None, Some(window)) => (window, "server"),
                    (None, None) => (crate::models::DEFAULT_CONTEXT_WINDOW, "default"),
                },
            };
        // Node `max_tokens` caps it further.
        let max_output_tokens = match stage.and_then(|s| s.max_output_tokens) {
            Some(cap) => output_limit(window).min(cap),
            None => output_limit(window),
        };
        // Calls are streamed to a model whose window is known. One whose server states none may
        // be a llama-cpp-python server, which answers a streamed call that does not fit its
        // window with keep-alives only, where a plain call is refused with the window stated.
        let watcher: Option<&dyn AnswerWatcher> =
            (stage.is_some() && window_source != "default").then_some(&watch as &dyn AnswerWatcher);
        let request_timeout = match request.timeout {
            Some(stage_limit) => stage_limit.min(self.config.request_timeout),
            None => self.config.request_timeout,
        };
        // The stage's context settings, with the config file's [context] below them.
        let context =
            stage.map_or_else(|| self.config.context.clone(), |s| s.context.clone().or(&self.config.context));
        if let Some(conflict) = context.conflicts(|_| crate::source::Span::default()).first() {
            return Err(BackendError::Terminal(format!(
                "stage `{}`: its context settings with the config file's [context]: {conflict}",
                request.node_id
            )));
        }
        let mut context_savings = crate::usage::Savings::new();
        let (thread, filters) = thread_filters::replay(request.history, request.node_id, &context);
        let mut messages: Vec<ChatMessage> = thread.into_iter().map(|t| t.message).collect();
        if !filters.is_empty() {
            let before: Vec<ChatMessage> = request.history.iter().map(|t| t.message.clone()).collect();
            let (before_tokens, after_tokens) = (tokens(&before), tokens(&messages));
            transcript.event(Event::AgentContextThreadFiltered {
                thread: request.thread.unwrap_or_default().to_string(),
                filters: filters.iter().map(ToString::to_string).collect(),
                messages_before: before.len(),
                messages_after: messages.len(),
                before_tokens,
                after_tokens,
            });
            context_savings.insert("thread_filters".to_string(), before_tokens.saturating_sub(after_tokens));
        }
        if !request.agentic {
            // A one-shot call offers no tools, so it is sent the thread's text only.
            messages = text_only(&messages);
        }
        messages.push(ChatMessage::user(request.prompt));
        transcript.record(
            "request",
            json!({"provider": resolved.provider, "model": model, "agentic": request.agentic,
                   "history_messages": request.history.len(), "prompt_chars": request.prompt.len()}),
        );
        let reasoning_effort = request.reasoning_effort;
        if let Some(effort) = reasoning_effort.filter(|_| !provider.applies_reasoning_effort(model)) {
            transcript.event(Event::LlmReasoningEffortIgnored {
                provider: resolved.provider.clone(),
                model: model.to_string(),
                reasoning_effort: effort.to_string(),
            });
        }
        // The agentic tool wrappers' model, to price its share of the usage.
        let mut small_model: Option<String> = None;
        let mut response = match stage.filter(|_| request.agentic) {
            Some(stage) => {
                if settings::is_small_tier(model) {
                    let (problem, fix) = settings::small_tier_complaint(request.node_id, model);
                    match self.small_tier_parent(stage.small_tier_parent) {
                        settings::SmallTierParent::Allow => {}
                        settings::SmallTierParent::Warn => {
                            transcript.event(Event::AgentSmallTierParent { model: model.to_string(), fix })
                        }
                        settings::SmallTierParent::Refuse => {
                            return Err(BackendError::Terminal(format!(
                                "{problem}, and small_tier_parent=refuse; {fix}"
                            )))
                        }
                    }
                }
                let small =
                    context.agentic_tools().then(|| self.config.small_model(&resolved, stage.small_model));
                let small_provider =
                    small.as_ref().and_then(|small| self.retrying(&small.provider, &report).ok());
                small_model = small.as_ref().map(|small| small.model.clone());
                let skills = stage_skills(stage.work_dir, &context, &transcript);
                let settings = AgentSettings {
                    model,
                    reasoning_effort,
                    max_turns: stage.max_turns.unwrap_or(tool_loop::DEFAULT_MAX_TURNS).max(1),
                    context_window: window,
                    request_timeout,
                    max_output_tokens,
                    watcher,
                    offload_dir: crate::context::artifacts::ArtifactStore::new(stage.run_dir, 0)
                        .root()
                        .join("tool_output"),
                    usage_left: stage.usage_left,
                    stage_limits: stage.stage_limits,
                    price: self.config.price(model),
                    small_model: small.as_ref().zip(small_provider.as_ref()).map(|(small, provider)| {
                        crate::agent::agentic_tools::SmallModel {
                            provider,
                            model: &small.model,
                            timeout: request_timeout,
                            max_output_tokens: output_limit(self.config.context_window(&small.model)),
                        }
                    }),
                    small_price: small.as_ref().and_then(|small| self.config.price(&small.model)),
                    context: &context,
                    run_record: stage.run_record.as_ref(),
                    watchdog: stage.watchdog,
                    reference_files: stage.reference_files,
                    memory: stage.memory.as_ref(),
                    chars_per_token: learned.chars_per_token,
                    compaction_window: context
                        .compaction_model
                        .as_deref()
                        .map(|compaction_model| self.config.context_window(compaction_model)),
                    skills: &skills,
                    subagents: tool_loop::SubagentLimits {
                        max_open: context.max_subagents(),
                        depth_left: context.max_subagent_depth(),
                        model: context.subagent_model(),
                    },
                };
                transcript
                    .event(Event::AgentContextWindow { tokens: window, source: window_source.to_string() });
                // The stage's own directory too: compaction blocks send the model to its transcript.
                let mut readable = vec![settings.offload_dir.clone(), stage.stage_dir.to_path_buf()];
                readable.extend(stage.reference_files.iter().map(|file| file.path.clone()));
                // A skill's other files are for reading.
                readable.extend(skills.iter().map(|skill| skill.dir.clone()));
                let _ = std::fs::create_dir_all(&settings.offload_dir);
                let mut toolbox = Toolbox::new(stage.work_dir, readable)
                    .map_err(|error| {
                        BackendError::Terminal(format!(
                            "the work directory {} cannot be used: {error}",
                            stage.work_dir.display()
                        ))
                    })?
                    .confined(stage.confinement.clone())
                    .with_read_before_write(context.read_before_write())
                    .with_builtin_tools(self.builtin_tools(
                        stage,
                        &resolved,
                        context.web_tools(),
                        &transcript,
                    ))
                    .with_web(self.web.clone())
                    .with_hooks(stage.tool_hooks.clone())
                    .with_permissions(crate::agent::permissions::Permissions::new(
                        stage
                            .permissions
                            .or(self.config.permissions_flag)
                            .or(self.config.permissions)
                            .unwrap_or_default(),
                        self.person.clone(),
                    ));
                // MCP tools need permissions=full: a stage below it with no one to allow them gets none.
                if !self.mcp.is_empty() && toolbox.permissions.withheld_above().is_none() {
                    let (tools, started) = self
                        .mcp
                        .for_stage(&stage.mcp_servers, stage.work_dir, &stage.confinement)
                        .await
                        .map_err(|problem| BackendError::Terminal(self.secrets.redact(&problem)))?;
                    for server in started {
                        for cut in &server.cut {
                            transcript.event(Event::McpToolCut {
                                server: server.name.clone(),
                                tool: cut.tool.clone(),
                                description_bytes: cut.description_bytes,
                                schema_bytes: cut.schema_bytes,
                            });
                        }
                        transcript.event(Event::McpServerStarted {
                            server: server.name,
                            tools: server.tools,
                            sandbox: server.sandbox.as_str().to_string(),
                        });
                    }
                    toolbox = toolbox.with_mcp(tools);
                }
                let run = tool_loop::run(&failover, &settings, &mut toolbox, messages, &transcript).await?;
                if let Ok(mut learned) = self.learned.lock() {
                    let entry = learned.entry(learned_key).or_default();
                    entry.window = run.learned_window.or(entry.window);
                    entry.chars_per_token = run.chars_per_token.or(entry.chars_per_token);
                }
                let context_window = Some(crate::usage::ContextWindow {
                    tokens: run.learned_window.unwrap_or(window),
                    source: if run.learned_window.is_some() { "error" } else { window_source }.to_string(),
                    chars_per_token: run.chars_per_token,
                });
                let mut text = run.text;
                let turn_limit = run.hit_turn_limit.then(|| TurnLimit {
                    max_turns: settings.max_turns,
                    outcome: stage.turn_limit_outcome.or(self.config.turn_limit_outcome).unwrap_or_default(),
                });
                if let Some(limit) = turn_limit {
                    text.push_str(&format!(
                        "\n\n[fabro: the agent stopped after max_turns={} turns]",
                        limit.max_turns
                    ));
                }
                let mut conversation = run.conversation;
                if !matches!(conversation.last(), Some(ChatMessage::Assistant { tool_calls, .. }) if tool_calls.is_empty())
                {
                    conversation.push(ChatMessage::assistant(text.clone(), Vec::new()));
                }
                for (layer, saved) in run.context_savings {
                    *context_savings.entry(layer).or_default() += saved;
                }
                LlmResponse {
                    text,
                    model: run.model.or_else(|| Some(model.to_string())),
                    usage: Some(run.usage),
                    files_touched: run.files_changed,
                    context_savings,
                    conversation,
                    memory_added: run.memory_added,
                    turn_limit,
                    context_window,
                    truncated: run.truncated,
                    usage_estimated: run.usage_estimated,
                    project_docs: run.project_docs,
                    ..LlmResponse::default()
                }
            }
            None => {
                // One call: it asks for no more output than the window leaves after the prompt.
                let calibration =
                    crate::agent::context::calibration::Calibration::starting_at(learned.chars_per_token);
                let estimate = calibration.rescale(tokens(&messages));
                let mut chat = ChatRequest {
                    model,
                    system: "",
                    messages: &messages,
                    tools: &[],
                    reasoning_effort,
                    max_output_tokens: output_budget(max_output_tokens, window, estimate),
                    timeout: request_timeout,
                    watcher,
                };
                let mut learned_window = None;
                let answer = match failover.chat(&chat).await {
                    // A rejection that states a smaller window: the run learns it, and the call
                    // is made once more asking for no more output than that window leaves.
                    Err(BackendError::TooLarge(error)) => {
                        let Some(stated) = too_large::stated_window(&error).filter(|stated| *stated < window)
                        else {
                            return Err(BackendError::TooLarge(error));
                        };
                        transcript
                            .event(Event::AgentContextWindow { tokens: stated, source: "error".into() });
                        if let Ok(mut learned) = self.learned.lock() {
                            learned.entry(learned_key.clone()).or_default().window = Some(stated);
                        }
                        learned_window = Some(stated);
                        let prompt = too_large::stated_prompt_tokens(&error).unwrap_or(estimate);
                        let limit = output_limit(stated).min(max_output_tokens);
                        chat.max_output_tokens = output_budget(limit, stated, prompt);
                        failover.chat(&chat).await?
                    }
                    answer => answer?,
                };
                transcript.record("assistant", assistant_record(1, &answer));
                let truncated = answer.is_truncated();
                if truncated {
                    transcript.event(Event::LlmTruncated {
                        model: failover.model().to_string(),
                        stop_reason: answer.stop_reason.clone().unwrap_or_default(),
                        max_output_tokens: chat.max_output_tokens,
                        turn: None,
                    });
                }
                if answer.usage_estimated {
                    transcript.event(Event::LlmUsageEstimated {
                        model: failover.model().to_string(),
                        input_tokens: answer.usage.input_tokens,
                        output_tokens: answer.usage.output_tokens,
                    });
                }
                LlmResponse {
                    usage_estimated: answer.usage_estimated,
                    text: answer.text,
                    model: answer.model.or_else(|| Some(model.to_string())),
                    usage: Some(answer.usage),
                    context_savings,
                    truncated,
                    context_window: learned_window.map(|tokens| crate::usage::ContextWindow {
                        tokens,
                        source: "error".to_string(),
                        chars_per_token: None,
                    }),
                    ..LlmResponse::default()
                }
            }
        };
        response.text = self.secrets.redact(&response.text);
        let small_price = small_model.as_deref().and_then(|small| self.config.price(small));
        let by_model = failover.usage_by_model();
        let failed_over = by_model.keys().any(|answered| answered != model);
        if let Some(usage) = &response.usage {
            response.cost_usd = if failed_over {
                // The stage failed over: each model's share at its own price.
                let main: Option<f64> = by_model
                    .iter()
                    .map(|(m, share)| self.config.price(m).map(|price| price.cost(share)))
                    .sum();
                let small =
                    usage.small_model.map(|share| Usage::new(share.input_tokens, share.output_tokens));
                let small_cost = match small.filter(|share| *share != Usage::default()) {
                    Some(share) => small_price.map(|price| price.cost(&share)),
                    None => Some(0.0),
                };
                main.zip(small_cost).map(|(main, small)| main + small)
            } else {
                crate::models::cost_of(usage, self.config.price(model), small_price)
            };
        }
        if failed_over {
            response.usage_by_model = by_model
                .into_iter()
                .map(|(m, share)| {
                    let cost_usd = self.config.price(&m).map(|price| price.cost(&share));
                    let usage = ModelUsage {
                        input_tokens: share.input_tokens,
                        output_tokens: share.output_tokens,
                        cost_usd,
                    };
                    (m, usage)
                })
                .collect();
        }
        Ok(response)
    }

    /// For each LLM stage of `workflow` that calls a provider: its provider, then its fallbacks'.
    fn provider_chains(&self, workflow: &Workflow) -> Vec<Vec<String>> {
        let mut chains = Vec::new();
        for node in workflow.nodes().filter(|node| node.handler_type().is_llm()) {
            let Some(llm) = node.settings.llm() else { continue };
            if node.settings.backend.as_ref().is_ok_and(|backend| *backend == settings::Backend::Cli) {
                continue;
            }
            let Ok(own) = self.config.resolve(&node.id, llm.model.as_deref(), llm.provider.as_deref()) else {
                continue;
            };
            let fallbacks = llm
                .fallback_models
                .iter()
                .filter_map(|model| self.config.resolve_fallback(&node.id, model).ok());
            chains.push(std::iter::once(own).chain(fallbacks).map(|resolved| resolved.provider).collect());
        }
        chains
    }

    /// A `fallback_models` model of stage `node_id`, with the configured provider that serves it.
    fn fallback_target<'a>(
        &'a self,
        node_id: &str,
        model: &str,
        report: &'a (dyn Fn(Event) + Send + Sync),
    ) -> Result<(Retrying<'a>, String), BackendError> {
        let resolved = self
            .config
            .resolve_fallback(node_id, model)
            .map_err(|error| BackendError::Terminal(format!("`{model}` in fallback_models: {error}")))?;
        let provider = self.retrying(&resolved.provider, report).map_err(|_| {
            BackendError::Terminal(format!(
                "fallback model `{model}` of stage `{node_id}` needs provider `{}`, which is not configured",
                resolved.provider
            ))
        })?;
        Ok((provider, resolved.model))
    }

    /// The configured provider `name`, its calls retried in place by its retry settings and each
    /// retry reported to `report`.
    fn retrying<'a>(
        &'a self,
        name: &str,
        report: &'a (dyn Fn(Event) + Send + Sync),
    ) -> Result<Retrying<'a>, BackendError> {
        let (Some(provider), Some(settings)) = (self.providers.get(name), self.config.providers.get(name))
        else {
            return Err(BackendError::Terminal(format!("provider `{name}` is not configured")));
        };
        Ok(Retrying {
            provider: provider.as_ref(),
            base_url: &settings.base_url,
            settings: self.config.retry_for(name),
            report,
        })
    }
}

#[async_trait::async_trait]
impl Backend for LiveBackend {
    fn name(&self) -> &str {
        "live"
    }

    /// Asks each provider a stage of `workflow` would call (its own, or one of its fallbacks')
    /// for its model list, without credentials: any HTTP answer means it is there. Only a stage
    /// none of whose providers answers stops the check, after its provider's retry window.
    async fn check_reachable(
        &self,
        workflow: &Workflow,
        waiting: &(dyn for<'s> Fn(&'s str) + Send + Sync),
    ) -> Result<(), Unreachable> {
        let chains = self.provider_chains(workflow);
        let Ok(client) = crate::llm::http::probe_client() else { return Ok(()) };
        let mut pending: Vec<&str> = chains.iter().flatten().map(String::as_str).collect();
        pending.sort_unstable();
        pending.dedup();
        let mut down: BTreeMap<&str, String> = BTreeMap::new();
        let started = std::time::Instant::now();
        let mut attempt = 0;
        loop {
            for name in pending {
                let Some(settings) = self.config.providers.get(name) else { continue };
                match crate::llm::http::probe(&client, &probe_url(settings)).await {
                    Ok(list) if settings.kind != ProviderKind::Anthropic => {
                        self.note_listed_windows(&client, name, settings, list.as_deref()).await
                    }
                    Ok(_) => {}
                    Err(error) => {
                        down.insert(name, self.secrets.redact(&error));
                    }
                }
            }
            let blocked =
                chains.iter().find(|chain| chain.iter().all(|name| down.contains_key(name.as_str())));
            let Some(name) = blocked.and_then(|chain| chain.first()) else { return Ok(()) };
            attempt += 1;
            let retry = self.config.retry_for(name);
            let base_url = self.config.providers.get(name).map(|p| p.base_url.clone()).unwrap_or_default();
            let error = down.get(name.as_str()).cloned().unwrap_or_default();
            let waited = started.elapsed();
            let left = retry.window.saturating_sub(waited);
            if left.is_zero() {
                return Err(Unreachable {
                    provider: name.clone(),
                    base_url,
                    waited,
                    attempts: attempt,
                    error,
                });
            }
            if attempt == 1 {
                waiting(&format!(
                    "provider `{name}` at {base_url} cannot be reached ({error}); waiting up to {} for it \
                     (retry_window)",
                    humantime::format_duration(retry.window)
                ));
            }
            tokio::time::sleep(retry.delay_after(attempt).min(left)).await;
            pending = down.keys().copied().collect();
            down.clear();
        }
    }

    async fn complete(&self, request: &LlmRequest<'_>) -> Result<LlmResponse, BackendError> {
        let work = async {
            match &request.stage {
                Some(stage) if stage.backend == settings::Backend::Cli => {
                    let agent = stage.cli_agent.unwrap_or("claude");
                    self.run_cli(request, stage, agent).await
                }
                _ => self.run_model(request).await,
            }
        };
        // The node's timeout bounds the whole stage (the CLI agent enforces its own).
        match request
            .timeout
            .filter(|_| request.stage.as_ref().is_some_and(|s| s.backend != settings::Backend::Cli))
        {
            Some(limit) => {
                tokio::time::timeout(limit + Duration::from_millis(50), work).await.unwrap_or_else(|_| {
                    Err(BackendError::Terminal(format!(
                        "stage `{}` ran past its timeout of {}s",
                        request.node_id,
                        limit.as_secs_f64()
                    )))
                })
            }
            None => work.await,
        }
    }
}

/// The skills of an agent stage working in `work_dir`: from its `skill_dirs`, else the user's
/// and the project's skill directories. Each `SKILL.md` that is not a skill is an
/// `agent.skill_invalid` event and a warning; the stage goes on without it.
fn stage_skills(
    work_dir: &std::path::Path,
    context: &settings::ContextSettings,
    transcript: &Transcript<'_>,
) -> Vec<crate::agent::skills::Skill> {
    use crate::agent::skills;
    let home = std::env::var_os("HOME").filter(|home| !home.is_empty()).map(std::path::PathBuf::from);
    let dirs = match &context.skill_dirs {
        Some(named) => skills::named_dirs(named, work_dir, home.as_deref()),
        None => skills::default_dirs(work_dir, home.as_deref()),
    };
    let (found, problems) = skills::discover(&dirs);
    for problem in problems {
        tracing::warn!(file = %problem.file.display(), "not a skill: {}", problem.message);
        transcript.event(Event::AgentSkillInvalid {
            file: problem.file.display().to_string(),
            message: problem.message,
        });
    }
    found
}
