//! Where real providers come from: environment variables and an optional TOML config file, plus
//! the `--model`/`--provider` overrides; and which provider and model a stage uses.
//!
//! Environment (wins over the file):
//! - `ANTHROPIC_API_KEY` (`ANTHROPIC_BASE_URL`): the `anthropic` provider.
//! - `OPENAI_API_KEY`, `OPENAI_BASE_URL`: the `openai` provider.
//! - `GEMINI_API_KEY` (or `GOOGLE_API_KEY`): the `gemini` provider (its OpenAI-compatible API).
//! - `FABRO_LLM_BASE_URL` (`FABRO_LLM_API_KEY`): an OpenAI-compatible server as provider
//!   `openai_compatible`; models no other provider claims go there.
//! - `FABRO_LLM_MODEL`, `FABRO_LLM_PROVIDER`: defaults for stages that name none.
//! - `FABRO_LLM_REQUEST_TIMEOUT` (e.g. `90s`), `FABRO_LLM_MAX_RETRIES`, `FABRO_LLM_RETRY_WINDOW`
//!   (e.g. `2m`).
//! - `BRAVE_API_KEY`: web search for agent stages through the Brave Search API (the config
//!   file's `[web_search]` says more).
//! - `FABRO_CONFIG`: the config file (default `$XDG_CONFIG_HOME/fabro/config.toml`, else
//!   `~/.config/fabro/config.toml`).

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::config_files::ConfigFiles;
use crate::llm::openai::{RequestOptions, ToolChoice};
use crate::llm::retry::RetrySettings;
use crate::models::{self, Price};
use crate::redaction::Secrets;

/// The API a provider speaks.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ProviderKind {
    Anthropic,
    #[serde(rename = "openai")]
    OpenAi,
    #[serde(rename = "openai_compatible")]
    OpenAiCompatible,
}

/// One configured provider.
#[derive(Debug, Clone, PartialEq)]
pub struct ProviderSettings {
    pub kind: ProviderKind,
    pub base_url: String,
    pub api_key: Option<String>,
    /// Models routed to this provider by name (config file `models = [...]`).
    pub models: Vec<String>,
    /// Config file `reasoning_effort = true|false`: whether an OpenAI-compatible server is sent
    /// the stage's `reasoning_effort` (default: only Gemini's endpoint; OpenAI always is).
    pub sends_reasoning_effort: Option<bool>,
    /// Config file `retry_window` of this provider (over the file's own and the environment's).
    pub retry_window: Option<Duration>,
    /// Config file `tool_choice`, `temperature` and `seed` (OpenAI-API providers only).
    pub options: RequestOptions,
    /// Config file `stream = true|false` (default true): whether answers are streamed.
    pub stream: bool,
}

impl ProviderSettings {
    /// Whether an OpenAI-API provider named `name` is sent `reasoning_effort`.
    pub fn takes_reasoning_effort(&self, name: &str) -> bool {
        match self.kind {
            ProviderKind::OpenAi => true,
            _ => self.sends_reasoning_effort.unwrap_or(name == "gemini"),
        }
    }
}

/// Prices and context windows from the config file, by model name.
#[derive(Debug, Clone, Default, PartialEq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ModelOverride {
    pub input_per_mtok: Option<f64>,
    pub output_per_mtok: Option<f64>,
    pub context_window: Option<u64>,
}

/// Everything real providers need.
#[derive(Debug, Clone, Default)]
pub struct LlmConfig {
    pub providers: BTreeMap<String, ProviderSettings>,
    pub default_model: Option<String>,
    pub default_provider: Option<String>,
    /// `--model` / `--provider`: replace every stage's model / provider.
    pub model_override: Option<String>,
    pub provider_override: Option<String>,
    /// Per model call.
    pub request_timeout: Duration,
    /// How calls are retried in place; a provider's own `retry_window` wins (see
    /// [`LlmConfig::retry_for`]).
    pub retry: RetrySettings,
    pub models: BTreeMap<String, ModelOverride>,
    /// The config file's `[context]`: the user's default context settings of LLM stages (below
    /// the graph's `default_<name>` and the node's own).
    pub context: crate::graph::settings::ContextSettings,
    /// The config file's `small_tier_parent`: the guard of agent stages that set none (below the
    /// graph's `default_small_tier_parent`).
    pub small_tier_parent: Option<crate::graph::settings::SmallTierParent>,
    /// The config file's `small_model`, and `--small-model` (which wins): the model of agentic
    /// tool wrappers' sub-conversations for stages that name none.
    pub small_model: Option<String>,
    pub small_model_override: Option<String>,
    /// The config file's `[mcp_servers.NAME]`, with `--mcp-config`'s entries over them.
    pub mcp_servers: BTreeMap<String, crate::agent::mcp::ServerConfig>,
    /// The config file's `permissions`: agent stages' tool permissions when neither the node, the
    /// graph nor `--permissions` says.
    pub permissions: Option<crate::graph::settings::PermissionLevel>,
    /// The config file's `turn_limit_outcome`: how agent stages stopped by `max_turns` end when
    /// neither the node nor the graph says.
    pub turn_limit_outcome: Option<crate::graph::settings::TurnLimitOutcome>,
    /// `--permissions`: below the node's and the graph's, over the config file's.
    pub permissions_flag: Option<crate::graph::settings::PermissionLevel>,
    /// The config file's `api_key_env` names: secrets (see [`crate::secrets`]).
    pub key_env_names: Vec<String>,
    /// The search provider of agent stages' `web_search`: the config file's `[web_search]`, else
    /// `BRAVE_API_KEY`'s; none: no `web_search`.
    pub web_search: Option<crate::agent::web_search::SearchProvider>,
}

/// The default per-call request timeout.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(300);

/// Why the configuration cannot be used, or a stage has no provider.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ConfigError {
    #[error("cannot read the fabro config file {path}: {message}")]
    Unreadable { path: PathBuf, message: String },
    #[error("the fabro config file {path} is invalid: {message}")]
    Invalid { path: PathBuf, message: String },
    #[error("{name} is `{value}`, which is not {expected}")]
    BadEnv { name: &'static str, value: String, expected: &'static str },
    #[error("{0}")]
    NoProvider(String),
    /// A provider's entry in the config file has a setting it cannot use.
    #[error("provider `{provider}` in the fabro config file: {message}")]
    ProviderSetting { provider: String, message: String },
    /// A stage's `backend`/`cli_agent` cannot be used.
    #[error("{0}")]
    Backend(String),
    /// The config file's `[context]` settings contradict each other.
    #[error("the [context] section of the fabro config file: {0}")]
    Context(String),
    /// An `[mcp_servers.NAME]` entry (config file or `--mcp-config`) cannot be used.
    #[error("{0}")]
    Mcp(String),
    /// The config file's `[web_search]` cannot be used.
    #[error("the [web_search] section of the fabro config file: {0}")]
    WebSearch(#[from] crate::agent::web_search::SearchConfigError),
}

/// The config file as written.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileConfig {
    default_model: Option<String>,
    default_provider: Option<String>,
    request_timeout: Option<String>,
    max_retries: Option<u32>,
    /// How long a call is retried while its provider cannot be reached (e.g. `2m`).
    retry_window: Option<String>,
    #[serde(default)]
    providers: BTreeMap<String, FileProvider>,
    #[serde(default)]
    models: BTreeMap<String, ModelOverride>,
    /// Where stages' programs run by default: `none` or `bwrap` ([`crate::run_settings`] reads it).
    #[serde(default, rename = "sandbox")]
    _sandbox: Option<serde::de::IgnoredAny>,
    /// Default context settings of LLM stages (the node attribute names).
    #[serde(default)]
    context: crate::graph::settings::ContextSettings,
    /// What agent stages on small-tier models get: warn, refuse or allow.
    small_tier_parent: Option<crate::graph::settings::SmallTierParent>,
    /// The model of agentic tool wrappers' sub-conversations.
    small_model: Option<String>,
    /// MCP servers whose tools agent stages get.
    #[serde(default)]
    mcp_servers: BTreeMap<String, crate::agent::mcp::ServerConfig>,
    /// Agent stages' tool permissions when neither the node, the graph nor `--permissions` says.
    permissions: Option<crate::graph::settings::PermissionLevel>,
    /// How agent stages stopped by `max_turns` end when neither the node nor the graph says.
    turn_limit_outcome: Option<crate::graph::settings::TurnLimitOutcome>,
    /// The search provider of `web_search`.
    web_search: Option<crate::agent::web_search::SearchSection>,
    /// Run lifecycle hooks: an array here, its entries skipped unread; [`crate::lifecycle_hooks`]
    /// is their one parser.
    #[serde(default, rename = "hooks")]
    _hooks: Vec<serde::de::IgnoredAny>,
    /// The settings layers' keys ([`crate::run_settings`] reads them).
    #[serde(default, rename = "_version")]
    _version: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "run")]
    _run: Option<serde::de::IgnoredAny>,
    #[serde(default, rename = "workflow")]
    _workflow: Option<serde::de::IgnoredAny>,
}

#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct FileProvider {
    kind: Option<ProviderKind>,
    base_url: Option<String>,
    api_key: Option<String>,
    /// The name of an environment variable holding the key (keeps keys out of the file).
    api_key_env: Option<String>,
    #[serde(default)]
    models: Vec<String>,
    /// Whether the server is sent stages' `reasoning_effort` (OpenAI-compatible servers).
    reasoning_effort: Option<bool>,
    /// This provider's retry window (over the file's `retry_window`).
    retry_window: Option<String>,
    /// `auto` (default), `required` or `omit`: what requests offering tools say of them.
    tool_choice: Option<ToolChoice>,
    /// Sampling temperature sent with every request (0 to 2).
    temperature: Option<f64>,
    /// Sampling seed sent with every request.
    seed: Option<u64>,
    /// Whether answers are streamed (default true).
    stream: Option<bool>,
}

impl FileProvider {
    /// The request options of the provider `name`, speaking `kind`'s API.
    fn options(&self, name: &str, kind: ProviderKind) -> Result<RequestOptions, ConfigError> {
        let invalid = |message: String| ConfigError::ProviderSetting { provider: name.to_string(), message };
        if kind == ProviderKind::Anthropic {
            let set: Vec<&str> = [
                ("tool_choice", self.tool_choice.is_some()),
                ("temperature", self.temperature.is_some()),
                ("seed", self.seed.is_some()),
            ]
            .into_iter()
            .filter_map(|(setting, is_set)| is_set.then_some(setting))
            .collect();
            if !set.is_empty() {
                return Err(invalid(format!(
                    "it speaks Anthropic's Messages API, and fabro sends tool_choice, temperature and \
                     seed to OpenAI-API providers only; remove {}",
                    set.join(", ")
                )));
            }
        }
        if let Some(temperature) = self.temperature.filter(|t| !(0.0..=2.0).contains(t)) {
            return Err(invalid(format!("temperature is {temperature}, which is not between 0 and 2")));
        }
        Ok(RequestOptions {
            tool_choice: self.tool_choice.unwrap_or_default(),
            temperature: self.temperature,
            seed: self.seed,
        })
    }
}

/// A stage's provider and model.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolved {
    pub provider: String,
    pub model: String,
}

const GEMINI_BASE_URL: &str = "https://generativelanguage.googleapis.com/v1beta/openai";
pub const COMPATIBLE: &str = "openai_compatible";

impl LlmConfig {
    /// Reads the config file (if any) and the environment.
    pub fn from_env() -> Result<LlmConfig, ConfigError> {
        LlmConfig::from_files(&ConfigFiles::from_disk())
    }

    /// Reads the config file (if any) from `files` (a resume's hold the text the run started
    /// with) and the environment.
    pub fn from_files(files: &ConfigFiles) -> Result<LlmConfig, ConfigError> {
        let env = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
        let file = match config_path(&env) {
            Some(path) => match read_file(&path, files)? {
                Some(file) => Some(file),
                None if env("FABRO_CONFIG").is_some() => {
                    let message = "no such file (FABRO_CONFIG names it)".to_string();
                    return Err(ConfigError::Unreadable { path, message });
                }
                None => None,
            },
            None => None,
        };
        Self::build(file.unwrap_or_default(), &env)
    }

    fn build(file: FileConfig, env: &dyn Fn(&str) -> Option<String>) -> Result<LlmConfig, ConfigError> {
        let mut config = LlmConfig {
            default_model: env("FABRO_LLM_MODEL").or(file.default_model),
            default_provider: env("FABRO_LLM_PROVIDER").or(file.default_provider),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            models: file.models,
            context: file.context,
            small_tier_parent: file.small_tier_parent,
            small_model: file.small_model.filter(|model| !model.trim().is_empty()),
            permissions: file.permissions,
            turn_limit_outcome: file.turn_limit_outcome,
            ..LlmConfig::default()
        };
        crate::agent::mcp::check_all(&file.mcp_servers)
            .map_err(|problem| ConfigError::Mcp(format!("the fabro config file's {problem}")))?;
        config.mcp_servers = file.mcp_servers;
        config.web_search = crate::agent::web_search::SearchSection::provider(file.web_search.as_ref(), env)?;
        config.key_env_names.extend(file.web_search.as_ref().map(|section| section.key_env().to_string()));
        let conflicts = config.context.conflicts(|_| crate::source::Span::default());
        if let Some(conflict) = conflicts.first() {
            return Err(ConfigError::Context(conflict.to_string()));
        }
        if let Some(text) = file.request_timeout {
            config.request_timeout = parse_duration("request_timeout", &text)?;
        }
        if let Some(text) = env("FABRO_LLM_REQUEST_TIMEOUT") {
            config.request_timeout = parse_duration("FABRO_LLM_REQUEST_TIMEOUT", &text)?;
        }
        if let Some(text) = file.retry_window {
            config.retry.window = parse_duration("retry_window", &text)?;
        }
        if let Some(text) = env("FABRO_LLM_RETRY_WINDOW") {
            config.retry.window = parse_duration("FABRO_LLM_RETRY_WINDOW", &text)?;
        }
        config.retry.max_retries = file.max_retries.unwrap_or(config.retry.max_retries);
        if let Some(text) = env("FABRO_LLM_MAX_RETRIES") {
            config.retry.max_retries = text.trim().parse().map_err(|_| ConfigError::BadEnv {
                name: "FABRO_LLM_MAX_RETRIES",
                value: text.clone(),
                expected: "a whole number",
            })?;
        }
        for (name, provider) in file.providers {
            let kind = provider.kind.unwrap_or(match name.as_str() {
                "anthropic" => ProviderKind::Anthropic,
                "openai" => ProviderKind::OpenAi,
                _ => ProviderKind::OpenAiCompatible,
            });
            let options = provider.options(&name, kind)?;
            let base_url = provider.base_url.or_else(|| default_base_url(&name, kind).map(str::to_string));
            let Some(base_url) = base_url else {
                return Err(ConfigError::NoProvider(format!(
                    "provider `{name}` in the config file needs a base_url (e.g. http://localhost:11434/v1)"
                )));
            };
            let api_key = provider.api_key.or_else(|| provider.api_key_env.as_deref().and_then(env));
            config.key_env_names.extend(provider.api_key_env);
            let retry_window =
                provider.retry_window.map(|text| parse_duration("retry_window", &text)).transpose()?;
            config.providers.insert(
                name,
                ProviderSettings {
                    kind,
                    base_url,
                    api_key,
                    models: provider.models,
                    sends_reasoning_effort: provider.reasoning_effort,
                    retry_window,
                    options,
                    stream: provider.stream.unwrap_or(true),
                },
            );
        }
        let mut from_env = |name: &str, kind, key: Option<String>, url: Option<String>| {
            if key.is_none() && url.is_none() {
                return;
            }
            let entry = config.providers.entry(name.to_string()).or_insert_with(|| ProviderSettings {
                kind,
                base_url: String::new(),
                api_key: None,
                models: Vec::new(),
                sends_reasoning_effort: None,
                retry_window: None,
                options: RequestOptions::default(),
                stream: true,
            });
            if let Some(url) = url {
                entry.base_url = url;
            }
            if entry.base_url.is_empty() {
                entry.base_url = default_base_url(name, kind).unwrap_or_default().to_string();
            }
            if key.is_some() {
                entry.api_key = key;
            }
        };
        from_env("anthropic", ProviderKind::Anthropic, env("ANTHROPIC_API_KEY"), env("ANTHROPIC_BASE_URL"));
        from_env("openai", ProviderKind::OpenAi, env("OPENAI_API_KEY"), env("OPENAI_BASE_URL"));
        from_env(
            "gemini",
            ProviderKind::OpenAiCompatible,
            env("GEMINI_API_KEY").or(env("GOOGLE_API_KEY")),
            None,
        );
        from_env(
            COMPATIBLE,
            ProviderKind::OpenAiCompatible,
            env("FABRO_LLM_API_KEY"),
            env("FABRO_LLM_BASE_URL"),
        );
        // An Anthropic or OpenAI entry without a key (only a URL) is not usable against the real
        // services, but a proxy may not need one: keep it.
        Ok(config)
    }

    /// Adds this configuration's secrets to the run's ([`crate::secrets::register`]): the
    /// variables named by `api_key_env` and `allowed_env_vars`, the keys in use and the MCP
    /// header values; returns every secret value known, for redaction.
    pub fn register_secrets(&self) -> Secrets {
        let names = self
            .key_env_names
            .iter()
            .cloned()
            .chain(self.mcp_servers.values().flat_map(|server| server.allowed_env_vars.iter().cloned()));
        let keys = self
            .providers
            .values()
            .filter_map(|p| p.api_key.clone())
            .chain(self.web_search.as_ref().and_then(|search| search.api_key.clone()));
        crate::secrets::register(
            names,
            keys.chain(self.mcp_servers.values().flat_map(crate::agent::mcp::ServerConfig::secrets)),
        );
        crate::secrets::values()
    }

    /// Registers the secrets of the config file, if there is a readable one (see
    /// [`LlmConfig::register_secrets`]); a command that needs the file reports what is wrong
    /// with it.
    pub fn register_file_secrets() {
        if let Ok(config) = LlmConfig::from_env() {
            config.register_secrets();
        }
    }

    /// The provider and model of a stage that asks for `model` and `provider` (either may be
    /// unset), after `--model`/`--provider` and the defaults.
    /// Whether any provider is configured (a key, a base URL or the config file).
    pub fn has_providers(&self) -> bool {
        !self.providers.is_empty()
    }

    pub fn resolve(
        &self,
        node_id: &str,
        model: Option<&str>,
        provider: Option<&str>,
    ) -> Result<Resolved, ConfigError> {
        let (model, provider) = match (&self.model_override, &self.provider_override) {
            (Some(m), p) => (Some(m.as_str()), p.as_deref()),
            (None, Some(p)) => {
                // Keep the stage's model only when it belongs to the forced provider.
                let keep = model.filter(|m| models::infer_provider(m).is_none_or(|inferred| inferred == p));
                (keep, Some(p.as_str()))
            }
            (None, None) => (model, provider),
        };
        self.resolve_as_given(node_id, model, provider)
    }

    /// A fallback model of stage `node_id` (`fallback_models`), its provider inferred; `--model`
    /// and `--provider` do not replace it.
    pub fn resolve_fallback(&self, node_id: &str, model: &str) -> Result<Resolved, ConfigError> {
        self.resolve_as_given(node_id, Some(model), None)
    }

    fn resolve_as_given(
        &self,
        node_id: &str,
        model: Option<&str>,
        provider: Option<&str>,
    ) -> Result<Resolved, ConfigError> {
        let provider = match provider {
            Some(provider) => provider.to_string(),
            None => match model {
                Some(model) => self.provider_for_model(model).ok_or_else(|| {
                    ConfigError::NoProvider(format!(
                        "stage `{node_id}` uses model `{model}`, which no configured provider serves. {}",
                        self.hint()
                    ))
                })?,
                None => self.default_provider_name().ok_or_else(|| {
                    ConfigError::NoProvider(format!(
                        "stage `{node_id}` is an LLM stage but no LLM provider is configured. {}",
                        self.hint()
                    ))
                })?,
            },
        };
        let Some(settings) = self.providers.get(&provider) else {
            let configured: Vec<&str> = self.providers.keys().map(String::as_str).collect();
            return Err(ConfigError::NoProvider(format!(
                "stage `{node_id}` uses provider `{provider}`{}, which is not configured ({}). {}",
                model.map(|m| format!(" (model `{m}`)")).unwrap_or_default(),
                if configured.is_empty() {
                    "no provider is".to_string()
                } else {
                    format!("configured: {}", configured.join(", "))
                },
                self.hint_for(&provider)
            )));
        };
        let model =
            model.map(str::to_string).or_else(|| self.default_model.clone()).or_else(|| {
                match settings.kind {
                    ProviderKind::Anthropic => Some("claude-sonnet-4-5".to_string()),
                    ProviderKind::OpenAi => Some("gpt-5.2".to_string()),
                    ProviderKind::OpenAiCompatible if provider == "gemini" => {
                        Some("gemini-2.5-pro".to_string())
                    }
                    ProviderKind::OpenAiCompatible => settings.models.first().cloned(),
                }
            });
        let model = model.ok_or_else(|| {
            ConfigError::NoProvider(format!(
                "stage `{node_id}` runs on provider `{provider}` but names no model: set llm_model on the node, \
                 --model, or FABRO_LLM_MODEL"
            ))
        })?;
        Ok(Resolved { provider, model })
    }

    /// The provider a model name belongs to: one that lists it in the config file, the one its
    /// name implies (when configured), else the OpenAI-compatible server or the default.
    /// The provider and model of the agentic tool wrappers of a stage running on `stage`: the
    /// node's `small_model`, else `--small-model`, else the config file's `small_model` (served by
    /// the provider that serves it, else the stage's), else the stage provider's cheap tier
    /// (claude-haiku-4-5, gpt-5-mini, gemini-2.5-flash), else the stage's own model.
    pub fn small_model(&self, stage: &Resolved, node_small_model: Option<&str>) -> Resolved {
        let requested = node_small_model
            .or(self.small_model_override.as_deref())
            .or(self.small_model.as_deref())
            .map(str::trim)
            .filter(|model| !model.is_empty());
        if let Some(model) = requested {
            let provider = self
                .provider_for_model(model)
                .filter(|provider| self.providers.contains_key(provider))
                .unwrap_or_else(|| stage.provider.clone());
            return Resolved { provider, model: model.to_string() };
        }
        let cheap = match self.providers.get(&stage.provider).map(|settings| settings.kind) {
            Some(ProviderKind::Anthropic) => Some("claude-haiku-4-5"),
            Some(ProviderKind::OpenAi) => Some("gpt-5-mini"),
            _ if stage.provider == "gemini" => Some("gemini-2.5-flash"),
            _ => None,
        };
        Resolved {
            provider: stage.provider.clone(),
            model: cheap.map_or_else(|| stage.model.clone(), str::to_string),
        }
    }

    fn provider_for_model(&self, model: &str) -> Option<String> {
        if let Some((name, _)) = self.providers.iter().find(|(_, p)| p.models.iter().any(|m| m == model)) {
            return Some(name.clone());
        }
        if let Some(inferred) = models::infer_provider(model) {
            // Claude models go to Anthropic even when it is not configured: the error says so.
            return Some(inferred.to_string());
        }
        if self.providers.contains_key(COMPATIBLE) {
            return Some(COMPATIBLE.to_string());
        }
        self.default_provider.clone()
    }

    /// The OpenAI-compatible providers whose model a stage naming none (`stages`: each stage's
    /// own provider, if it names one) would have to guess: no `--model`, `FABRO_LLM_MODEL`,
    /// `default_model` or `models = [...]` names one. [`LlmConfig::take_served_model`] asks them.
    pub fn providers_without_a_model<'a>(
        &self,
        stages: impl IntoIterator<Item = Option<&'a str>>,
    ) -> Vec<String> {
        if self.model_override.is_some() || self.default_model.is_some() {
            return Vec::new();
        }
        let mut names: Vec<String> = stages
            .into_iter()
            .filter_map(|stage| match &self.provider_override {
                Some(forced) => Some(forced.clone()),
                None => stage.map(str::to_string).or_else(|| self.default_provider_name()),
            })
            .filter(|name| {
                self.providers.get(name).is_some_and(|settings| {
                    settings.kind == ProviderKind::OpenAiCompatible
                        && name != "gemini"
                        && settings.models.is_empty()
                })
            })
            .collect();
        names.sort();
        names.dedup();
        names
    }

    /// Takes the one model that provider `name` lists (`served`: the ids of its `GET /models`)
    /// as its model, for the stages that name none. Several, or none, is an error naming them
    /// and how to choose.
    pub fn take_served_model(
        &mut self,
        name: &str,
        served: Result<Vec<String>, String>,
    ) -> Result<(), ConfigError> {
        let Some(settings) = self.providers.get_mut(name) else { return Ok(()) };
        let choose = "name one with --model, FABRO_LLM_MODEL or llm_model on the stage";
        let url = format!("{}/models", settings.base_url.trim_end_matches('/'));
        match served {
            Ok(models) if models.len() == 1 => {
                settings.models = models;
                Ok(())
            }
            Ok(models) if models.is_empty() => Err(ConfigError::NoProvider(format!(
                "provider `{name}` has no model named, and {url} lists none; {choose}"
            ))),
            Ok(models) => Err(ConfigError::NoProvider(format!(
                "provider `{name}` has no model named, and {url} lists {}: {}; {choose}",
                models.len(),
                models.join(", ")
            ))),
            Err(reason) => Err(ConfigError::NoProvider(format!(
                "provider `{name}` has no model named, and its model list could not be read ({reason}); {choose}"
            ))),
        }
    }

    fn default_provider_name(&self) -> Option<String> {
        if let Some(name) = &self.default_provider {
            return Some(name.clone());
        }
        if let Some(model) = &self.default_model {
            return self.provider_for_model(model);
        }
        ["anthropic", "openai", "gemini", COMPATIBLE]
            .iter()
            .find(|name| self.providers.contains_key(**name))
            .map(|name| name.to_string())
            .or_else(|| self.providers.keys().next().cloned())
    }

    fn hint(&self) -> &'static str {
        "Set ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY or FABRO_LLM_BASE_URL (a local OpenAI-compatible \
         server), or add providers to the fabro config file; --simulate runs without one"
    }

    fn hint_for(&self, provider: &str) -> String {
        match provider {
            "anthropic" => "Set ANTHROPIC_API_KEY, or pick another model with --model".to_string(),
            "openai" => {
                "Set OPENAI_API_KEY (and OPENAI_BASE_URL for a proxy), or pick another model with --model"
                    .to_string()
            }
            "gemini" => "Set GEMINI_API_KEY, or pick another model with --model".to_string(),
            COMPATIBLE => {
                "Set FABRO_LLM_BASE_URL to the server's URL (e.g. http://localhost:11434/v1)".to_string()
            }
            _ => format!("Add [providers.{provider}] with a base_url to the fabro config file"),
        }
    }

    /// Shortens every retry window (the run's and each provider's) to at most `most`, for calls
    /// that are worth only a short wait.
    pub fn limit_retry_window(&mut self, most: Duration) {
        self.retry.window = self.retry.window.min(most);
        for provider in self.providers.values_mut() {
            provider.retry_window = provider.retry_window.map(|window| window.min(most));
        }
    }

    /// How the calls to `provider` are retried in place: the run's settings with the provider's
    /// own `retry_window` when it has one.
    pub fn retry_for(&self, provider: &str) -> RetrySettings {
        let window = self.providers.get(provider).and_then(|settings| settings.retry_window);
        RetrySettings { window: window.unwrap_or(self.retry.window), ..self.retry }
    }

    /// The price of a model: the config file's, else the built-in table's.
    pub fn price(&self, model: &str) -> Option<Price> {
        let builtin = models::builtin_price(model);
        match self.models.get(model) {
            Some(o) => match (o.input_per_mtok, o.output_per_mtok, builtin) {
                (Some(i), Some(out), _) => Some(Price { input_per_mtok: i, output_per_mtok: out }),
                (i, out, Some(b)) => Some(Price {
                    input_per_mtok: i.unwrap_or(b.input_per_mtok),
                    output_per_mtok: out.unwrap_or(b.output_per_mtok),
                }),
                (Some(i), None, None) => Some(Price { input_per_mtok: i, output_per_mtok: 0.0 }),
                (None, Some(out), None) => Some(Price { input_per_mtok: 0.0, output_per_mtok: out }),
                (None, None, None) => None,
            },
            None => builtin,
        }
    }

    /// The context window of a model: the config file's, the built-in table's, else the default.
    /// The context window of `model` when fabro knows it, and from where: the config file's
    /// model entry (`config`), else fabro's table (`known`).
    pub fn known_context_window(&self, model: &str) -> Option<(u64, &'static str)> {
        match self.models.get(model).and_then(|o| o.context_window) {
            Some(window) => Some((window, "config")),
            None => models::builtin_context_window(model).map(|window| (window, "known")),
        }
    }

    pub fn context_window(&self, model: &str) -> u64 {
        self.models
            .get(model)
            .and_then(|o| o.context_window)
            .or_else(|| models::builtin_context_window(model))
            .unwrap_or(models::DEFAULT_CONTEXT_WINDOW)
    }
}

fn default_base_url(name: &str, kind: ProviderKind) -> Option<&'static str> {
    match (name, kind) {
        (_, ProviderKind::Anthropic) => Some(crate::llm::anthropic::DEFAULT_BASE_URL),
        (_, ProviderKind::OpenAi) => Some(crate::llm::openai::DEFAULT_BASE_URL),
        ("gemini", _) => Some(GEMINI_BASE_URL),
        _ => None,
    }
}

/// The config file's path: `FABRO_CONFIG`, else `$XDG_CONFIG_HOME/fabro/config.toml`, else
/// `~/.config/fabro/config.toml` (which may not exist).
pub fn config_file_path() -> Option<PathBuf> {
    config_path(&|name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty()))
}

fn config_path(env: &dyn Fn(&str) -> Option<String>) -> Option<PathBuf> {
    if let Some(path) = env("FABRO_CONFIG") {
        return Some(PathBuf::from(path));
    }
    let base = env("XDG_CONFIG_HOME")
        .map(PathBuf::from)
        .or_else(|| env("HOME").map(|h| Path::new(&h).join(".config")))?;
    Some(base.join("fabro").join("config.toml"))
}

/// Checks the text of the config file against its schema (providers, models,
/// `[context]`, ...), for a run that may not read it otherwise (one without LLM stages).
pub fn check_file_text(text: &str) -> Result<(), toml::de::Error> {
    toml::from_str::<FileConfig>(text).map(drop)
}

/// The config file at `path`, `None` when there is none.
fn read_file(path: &Path, files: &ConfigFiles) -> Result<Option<FileConfig>, ConfigError> {
    let Some(text) = files
        .read(path)
        .map_err(|error| ConfigError::Unreadable { path: path.to_path_buf(), message: error.to_string() })?
    else {
        return Ok(None);
    };
    toml::from_str(&text)
        .map(Some)
        .map_err(|error| ConfigError::Invalid { path: path.to_path_buf(), message: error.to_string() })
}

fn parse_duration(name: &'static str, text: &str) -> Result<Duration, ConfigError> {
    humantime::parse_duration(text.trim()).map_err(|_| ConfigError::BadEnv {
        name,
        value: text.to_string(),
        expected: "a duration such as 90s or 5m",
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn config(vars: &[(&str, &str)], file: &str) -> Result<LlmConfig, ConfigError> {
        let vars: BTreeMap<String, String> =
            vars.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect();
        let file: FileConfig = toml::from_str(file).expect("valid toml");
        LlmConfig::build(file, &|name| vars.get(name).cloned())
    }

    #[test]
    fn environment_configures_providers() {
        let config = config(
            &[("ANTHROPIC_API_KEY", "sk-ant-xyz12345"), ("FABRO_LLM_BASE_URL", "http://127.0.0.1:9/v1")],
            "",
        )
        .unwrap();
        assert_eq!(config.providers["anthropic"].base_url, "https://api.anthropic.com");
        assert_eq!(config.providers[COMPATIBLE].kind, ProviderKind::OpenAiCompatible);
        let resolved = config.resolve("plan", Some("claude-opus-4-6"), None).unwrap();
        assert_eq!(resolved, Resolved { provider: "anthropic".into(), model: "claude-opus-4-6".into() });
        // Unknown names go to the compatible server.
        assert_eq!(config.resolve("plan", Some("qwen2.5-coder"), None).unwrap().provider, COMPATIBLE);
        // No model anywhere: the first configured provider's default.
        assert_eq!(config.resolve("plan", None, None).unwrap().model, "claude-sonnet-4-5");
        assert_eq!(config.register_secrets().redact("sk-ant-xyz12345"), "[REDACTED]");
    }

    #[test]
    fn the_small_model_is_the_node_s_the_flag_s_the_file_s_or_the_provider_s_cheap_tier() {
        let vars = [
            ("ANTHROPIC_API_KEY", "sk-ant-xyz12345"),
            ("OPENAI_API_KEY", "sk-openai-12345"),
            ("FABRO_LLM_BASE_URL", "http://127.0.0.1:9/v1"),
        ];
        let mut config = config(&vars, "").unwrap();
        let on = |provider: &str, model: &str| Resolved { provider: provider.into(), model: model.into() };
        let small =
            |config: &LlmConfig, stage: &Resolved, node: Option<&str>| config.small_model(stage, node);
        assert_eq!(
            small(&config, &on("anthropic", "claude-opus-4-6"), None),
            on("anthropic", "claude-haiku-4-5")
        );
        assert_eq!(small(&config, &on("openai", "gpt-5.2"), None), on("openai", "gpt-5-mini"));
        // A provider with no known small model: the stage's model.
        assert_eq!(small(&config, &on(COMPATIBLE, "qwen"), None), on(COMPATIBLE, "qwen"));
        config.small_model = Some("gpt-5-nano".into());
        assert_eq!(small(&config, &on("anthropic", "claude-opus-4-6"), None), on("openai", "gpt-5-nano"));
        config.small_model_override = Some("claude-haiku-4-5".into());
        assert_eq!(small(&config, &on("openai", "gpt-5.2"), None), on("anthropic", "claude-haiku-4-5"));
        assert_eq!(small(&config, &on("openai", "gpt-5.2"), Some("tiny")), on(COMPATIBLE, "tiny"));
        // A model whose provider is not configured runs on the stage's.
        assert_eq!(
            small(&config, &on("openai", "gpt-5.2"), Some("gemini-2.5-flash")),
            on("openai", "gemini-2.5-flash")
        );
    }

    #[test]
    fn missing_providers_are_clear_errors() {
        let config = config(&[("OPENAI_API_KEY", "sk-abcdefgh")], "").unwrap();
        let error = config.resolve("review", Some("claude-opus-4-6"), None).unwrap_err().to_string();
        assert!(error.contains("stage `review`") && error.contains("ANTHROPIC_API_KEY"), "{error}");
        let none = LlmConfig::default().resolve("plan", None, None).unwrap_err().to_string();
        assert!(none.contains("no LLM provider is configured"), "{none}");
    }

    #[test]
    fn overrides_replace_every_stage() {
        let mut config =
            config(&[("OPENAI_API_KEY", "sk-abcdefgh"), ("ANTHROPIC_API_KEY", "sk-ant-12345678")], "")
                .unwrap();
        config.model_override = Some("gpt-5-mini".into());
        let resolved = config.resolve("plan", Some("claude-opus-4-6"), Some("anthropic")).unwrap();
        assert_eq!(resolved, Resolved { provider: "openai".into(), model: "gpt-5-mini".into() });
        config.model_override = None;
        config.provider_override = Some("openai".into());
        assert_eq!(config.resolve("plan", Some("claude-opus-4-6"), None).unwrap().model, "gpt-5.2");
    }

    #[test]
    fn the_file_adds_providers_prices_and_windows() {
        let file = r#"
            default_model = "llama3.1"
            request_timeout = "90s"
            [providers.ollama]
            base_url = "http://localhost:11434/v1"
            models = ["llama3.1"]
            [providers.anthropic]
            api_key_env = "MY_KEY"
            [models."llama3.1"]
            input_per_mtok = 0.0
            output_per_mtok = 0.0
            context_window = 8192
            [models."claude-opus-4-6"]
            output_per_mtok = 30.0
        "#;
        let config = config(&[("MY_KEY", "sk-from-env-var")], file).unwrap();
        assert_eq!(config.request_timeout, Duration::from_secs(90));
        assert_eq!(
            config.resolve("a", None, None).unwrap(),
            Resolved { provider: "ollama".into(), model: "llama3.1".into() }
        );
        assert_eq!(config.providers["anthropic"].api_key.as_deref(), Some("sk-from-env-var"));
        assert_eq!(config.context_window("llama3.1"), 8192);
        assert_eq!(config.price("llama3.1"), Some(Price { input_per_mtok: 0.0, output_per_mtok: 0.0 }));
        assert_eq!(
            config.price("claude-opus-4-6"),
            Some(Price { input_per_mtok: 5.0, output_per_mtok: 30.0 })
        );
        let bad: Result<FileConfig, _> = toml::from_str("[providers.x]\nbase = 1");
        assert!(bad.is_err());
    }

    #[test]
    fn the_retry_window_is_the_provider_s_else_the_environment_s_else_the_file_s_else_a_minute() {
        let file = r#"
            retry_window = "90s"
            [providers.local]
            base_url = "http://127.0.0.1:8080/v1"
            retry_window = "5s"
            [providers.other]
            base_url = "http://127.0.0.1:8081/v1"
        "#;
        let from_file = config(&[], file).unwrap();
        assert_eq!(from_file.retry_for("local").window, Duration::from_secs(5));
        assert_eq!(from_file.retry_for("other").window, Duration::from_secs(90));
        let from_env = config(&[("FABRO_LLM_RETRY_WINDOW", "2m")], "").unwrap();
        assert_eq!(from_env.retry_for("openai").window, Duration::from_secs(120));
        assert_eq!(LlmConfig::default().retry_for("x").window, Duration::from_secs(60));
        let mut limited = from_file;
        limited.limit_retry_window(Duration::from_secs(10));
        assert_eq!(limited.retry_for("local").window, Duration::from_secs(5));
        assert_eq!(limited.retry_for("other").window, Duration::from_secs(10));
        let bad = config(&[], "retry_window = \"soon\"").unwrap_err().to_string();
        assert!(bad.contains("retry_window") && bad.contains("a duration"), "{bad}");
    }

    #[test]
    fn providers_take_tool_choice_temperature_and_seed() {
        let file = r#"
            [providers.llama]
            base_url = "http://127.0.0.1:8080/v1"
            tool_choice = "required"
            temperature = 0.0
            seed = 42
            [providers.strict]
            base_url = "http://127.0.0.1:8081/v1"
            tool_choice = "omit"
        "#;
        let configured = config(&[("FABRO_LLM_BASE_URL", "http://127.0.0.1:9/v1")], file).unwrap();
        let options = configured.providers["llama"].options;
        assert_eq!(
            options,
            RequestOptions { tool_choice: ToolChoice::Required, temperature: Some(0.0), seed: Some(42) }
        );
        assert_eq!(configured.providers["strict"].options.tool_choice, ToolChoice::Omit);
        assert_eq!(
            configured.providers[COMPATIBLE].options,
            RequestOptions::default(),
            "auto, server defaults"
        );

        let unknown =
            toml::from_str::<FileConfig>("[providers.x]\ntool_choice = \"always\"").unwrap_err().to_string();
        assert!(unknown.contains("`auto`, `required`, `omit`"), "{unknown}");
        let hot = config(&[], "[providers.x]\nbase_url = \"http://h/v1\"\ntemperature = 2.5")
            .unwrap_err()
            .to_string();
        assert_eq!(
            hot,
            "provider `x` in the fabro config file: temperature is 2.5, which is not between 0 and 2"
        );
        let anthropic =
            config(&[], "[providers.anthropic]\nseed = 1\ntool_choice = \"auto\"").unwrap_err().to_string();
        assert!(anthropic.ends_with("to OpenAI-API providers only; remove tool_choice, seed"), "{anthropic}");
    }

    #[test]
    fn web_search_comes_from_its_section_or_brave_api_key_and_its_key_is_a_secret() {
        assert_eq!(config(&[], "").unwrap().web_search, None);
        let alone = config(&[("BRAVE_API_KEY", "brave-env-key-1")], "").unwrap();
        let provider = alone.web_search.unwrap();
        assert_eq!(
            (provider.endpoint.as_str(), provider.api_key.as_deref()),
            (crate::agent::web_search::BRAVE_ENDPOINT, Some("brave-env-key-1"))
        );
        let file = r#"
            [context]
            web_tools = false
            [web_search]
            provider = "brave"
            endpoint = "http://127.0.0.1:8000/res/v1/web/search"
            api_key_env = "MY_SEARCH_KEY"
            count = 5
        "#;
        let configured = config(&[("MY_SEARCH_KEY", "my-search-key-1")], file).unwrap();
        assert_eq!(configured.context.web_tools, Some(false));
        let provider = configured.web_search.clone().unwrap();
        assert_eq!((provider.api_key.as_deref(), provider.count), (Some("my-search-key-1"), 5));
        assert!(configured.key_env_names.contains(&"MY_SEARCH_KEY".to_string()));
        let written = config(&[], "[web_search]\napi_key = \"written-search-key-1\"\n").unwrap();
        written.register_secrets();
        assert_eq!(crate::secrets::redact("k=written-search-key-1"), "k=[REDACTED]");
        let keyless = config(&[], "[web_search]\nprovider = \"brave\"\n").unwrap_err();
        assert!(
            keyless
                .to_string()
                .contains("[web_search] section of the fabro config file: Brave Search needs a key"),
            "{keyless}"
        );
        assert!(toml::from_str::<FileConfig>("[web_search]\nprovider = \"google\"").is_err());
        assert!(toml::from_str::<FileConfig>("[web_search]\nkey = \"x\"").is_err());
    }

    #[test]
    fn the_context_section_sets_defaults_and_contradictions_are_refused() {
        let file = r#"
            [context]
            max_in_turn_tool_pairs = 3
            compaction_mode = "lossless"
            thread_exclude_nodes = ["lint"]
            [context.tool_result_chars]
            grep = 20000
            [context.compaction_thresholds]
            small = 0.30
        "#;
        let context = config(&[], file).unwrap().context;
        assert_eq!(context.max_in_turn_tool_pairs, Some(3));
        assert_eq!(context.compaction_mode, Some(crate::graph::settings::CompactionMode::Lossless));
        assert_eq!(context.thread_exclude_nodes, Some(vec!["lint".to_string()]));
        assert_eq!(context.tool_result_chars["grep"], 20000);
        assert_eq!(context.threshold("claude-haiku-4-5"), 0.30);
        let contradiction = config(&[], "[context]\ncompaction = \"none\"\ncontext_budget_cutover = 1000\n");
        assert!(
            matches!(contradiction, Err(ConfigError::Context(message)) if message.contains("compaction=none"))
        );
        let unknown: Result<FileConfig, _> = toml::from_str("[context]\ncompaction_style = 1");
        assert!(unknown.is_err());
    }
}
