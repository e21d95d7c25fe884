//! Setting a run up: which backend answers its LLM stages, who answers its human gates, step
//! mode, and what a resumed run continues with. The CLI is one user of this; a program that drives
//! fabro as a library makes the same choices and gets the same refusals, each a [`SetupError`].
//!
//! ```no_run
//! # async fn example() -> Result<(), Box<dyn std::error::Error>> {
//! use fabro::run_setup::{BackendChoice, EngineBuilder};
//! let valid = fabro::Loader::new().load_file("workflows/linear.dot".as_ref())?.into_valid()?;
//! let engine = EngineBuilder::new(BackendChoice::Simulated).auto_approve().build(&valid)?;
//! let options = fabro::engine::RunOptions { work_dir: std::env::current_dir()?, ..Default::default() };
//! let cancel = tokio_util::sync::CancellationToken::new();
//! let report = engine.run(&valid, &options, |_event| {}, cancel).await?;
//! println!("{}", report.result.status.as_str());
//! # Ok(()) }
//! ```

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::backends::config::{ConfigError, LlmConfig};
use crate::backends::live::LiveBackend;
use crate::backends::scripted::{ScriptError, ScriptedBackend};
use crate::backends::simulated::SimulatedBackend;
use crate::backends::Backend;
use crate::config_files::ConfigFiles;
use crate::engine::step::StepReviewer;
use crate::engine::Engine;
use crate::graph::Workflow;
use crate::interview::answers::{AnswersError, AnswersFile};
use crate::interview::{AutoApprove, FirstAvailable, Gate, Interviewer, NoAnswers};
use crate::llm::BackendError;
use crate::run_dir::{LaunchRecord, RunDirError, SavedRun};
use crate::run_settings::RunSettings;
use crate::stage::{HandlerRegistry, Services};
use crate::ValidWorkflow;

/// Why a run could not be set up. Nothing has run and nothing was written.
#[derive(Debug, thiserror::Error)]
pub enum SetupError {
    #[error(
        "node `{node}` is a {kind} stage, which this version of fabro cannot run yet; the run did not start"
    )]
    UnhandledStage { node: String, kind: String },
    #[error("{}", no_provider(stages))]
    NoProvider {
        /// The workflow's LLM stages, in graph order.
        stages: Vec<String>,
    },
    /// The provider configuration (environment, config file) cannot be read.
    #[error(transparent)]
    Config(ConfigError),
    /// A configured provider cannot serve the workflow's stages.
    #[error("{0}; the run did not start")]
    Provider(ConfigError),
    /// The configured providers cannot be set up.
    #[error(transparent)]
    Backend(#[from] BackendError),
    #[error(transparent)]
    Responses(#[from] ScriptError),
    /// The answers file cannot be read.
    #[error(transparent)]
    Answers(AnswersError),
    /// The answers file answers gates the workflow does not have, or not as they ask.
    #[error("{0}; the run did not start")]
    AnswersMismatch(AnswersError),
    #[error("cannot read `{}`: {source}", path.display())]
    Workflow { path: PathBuf, source: std::io::Error },
    #[error(
        "{} lacks node(s) {} that the checkpoint needs (renamed or removed); nothing was changed. \
         Resume without --workflow to continue with the stored copy",
        path.display(),
        missing.iter().map(|id| format!("`{id}`")).collect::<Vec<_>>().join(", ")
    )]
    MissingNodes { path: PathBuf, missing: Vec<String> },
    #[error(transparent)]
    RunDir(#[from] RunDirError),
}

fn no_provider(stages: &[String]) -> String {
    let named = match stages {
        [one] => format!("stage `{one}` needs"),
        [first, rest @ ..] => format!("stage `{first}` (and {} more LLM stage(s)) needs", rest.len()),
        [] => "LLM stages need".to_string(),
    };
    format!(
        "{named} an LLM provider, and none is configured. Run with --simulate (placeholder \
         responses) or --responses FILE (scripted responses), or configure a provider: \
         ANTHROPIC_API_KEY, OPENAI_API_KEY, GEMINI_API_KEY, or FABRO_LLM_BASE_URL for a local \
         OpenAI-compatible server (see docs/providers.md)"
    )
}

/// Who answers a run's LLM stages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackendChoice {
    /// Placeholder responses, no provider (`--simulate`, `--dry-run`).
    Simulated,
    /// Responses read from a file (`--responses FILE`).
    Scripted(PathBuf),
    /// The providers configured in the environment and the config file, with the model and
    /// provider overrides (`--model`, `--provider`; empty means none).
    Live {
        model: Option<String>,
        provider: Option<String>,
        small_model: Option<String>,
        /// `--mcp-config`.
        mcp_config: Option<String>,
        /// `--permissions`.
        permissions: Option<String>,
    },
}

impl BackendChoice {
    /// The backend a launch asks for: scripted responses first, then simulation (`--simulate`
    /// or `--dry-run`), else the real providers.
    pub fn of(launch: &LaunchRecord) -> BackendChoice {
        if let Some(path) = &launch.responses {
            return BackendChoice::Scripted(PathBuf::from(path));
        }
        if launch.simulate || launch.dry_run {
            return BackendChoice::Simulated;
        }
        BackendChoice::Live {
            model: launch.model.clone(),
            provider: launch.provider.clone(),
            small_model: launch.small_model.clone(),
            mcp_config: launch.mcp_config.clone(),
            permissions: launch.permissions.clone(),
        }
    }

    /// The backend for `workflow`. A workflow without LLM stages needs no provider; with real
    /// providers, every LLM stage must have one. `person` is asked about agent tool calls above
    /// a stage's permissions.
    pub fn backend_for(
        &self,
        workflow: &Workflow,
        person: Option<Arc<dyn Interviewer>>,
        files: &ConfigFiles,
        settings: &RunSettings,
    ) -> Result<Arc<dyn Backend>, SetupError> {
        let (model, provider, small_model, mcp_config, permissions) = match self {
            BackendChoice::Scripted(path) => return Ok(Arc::new(ScriptedBackend::from_file(path)?)),
            BackendChoice::Simulated => return Ok(Arc::new(SimulatedBackend)),
            BackendChoice::Live { mcp_config, .. }
                if !workflow.nodes().any(|node| node.handler_type().is_llm()) =>
            {
                // No server starts, but their variables are secrets all the same.
                let mut servers: Vec<crate::agent::mcp::ServerConfig> =
                    settings.mcp_servers.values().map(|set| set.value.clone()).collect();
                if let Some(Ok(given)) = mcp_config
                    .as_deref()
                    .map(|path| crate::agent::mcp::read_config_file(Path::new(path), files))
                {
                    servers.extend(given.into_values());
                }
                crate::secrets::register(
                    servers.iter().flat_map(|server| server.allowed_env_vars.clone()),
                    servers.iter().flat_map(crate::agent::mcp::ServerConfig::secrets),
                );
                return Ok(Arc::new(SimulatedBackend));
            }
            BackendChoice::Live { model, provider, small_model, mcp_config, permissions } => {
                (model, provider, small_model, mcp_config, permissions)
            }
        };
        let non_empty = |value: &Option<String>| value.clone().filter(|text| !text.trim().is_empty());
        let mut config = LlmConfig::from_files(files).map_err(SetupError::Config)?;
        settings.apply_defaults(&mut config);
        config.model_override = non_empty(model);
        config.provider_override = non_empty(provider);
        config.small_model_override = non_empty(small_model);
        config.permissions_flag =
            permissions.as_deref().and_then(crate::graph::settings::PermissionLevel::parse);
        if let Some(path) = mcp_config {
            let servers = crate::agent::mcp::read_config_file(Path::new(path), files).map_err(|problem| {
                SetupError::Provider(ConfigError::Mcp(format!("--mcp-config: {problem}")))
            })?;
            config.mcp_servers.extend(servers);
        }
        take_served_models(&mut config, workflow)?;
        let no_provider = config.providers.is_empty();
        let backend = LiveBackend::new(config)?.with_person(person);
        match backend.check(workflow) {
            Ok(()) => Ok(Arc::new(backend)),
            Err(ConfigError::NoProvider(_)) if no_provider => Err(SetupError::NoProvider {
                stages: workflow
                    .nodes()
                    .filter(|node| node.handler_type().is_llm())
                    .map(|node| node.id.clone())
                    .collect(),
            }),
            Err(error) => Err(SetupError::Provider(error)),
        }
    }
}

/// A local server named only by its URL (`FABRO_LLM_BASE_URL`, or a config file provider
/// without `models`) and stages that name no model: the server's one model is theirs, as its
/// `GET /models` lists it.
fn take_served_models(config: &mut LlmConfig, workflow: &Workflow) -> Result<(), SetupError> {
    let modelless = workflow
        .nodes()
        .filter(|node| node.handler_type().is_llm())
        .filter(|node| matches!(node.settings.backend, Ok(crate::graph::settings::Backend::Api)))
        .filter_map(|node| node.settings.llm())
        .filter(|llm| llm.model.is_none())
        .map(|llm| llm.provider.as_deref());
    for name in config.providers_without_a_model(modelless) {
        let Some(settings) = config.providers.get(&name) else { continue };
        let url = format!("{}/models", settings.base_url.trim_end_matches('/'));
        let served = crate::llm::http::served_models(&url, settings.api_key.as_deref());
        config.take_served_model(&name, served).map_err(SetupError::Provider)?;
    }
    Ok(())
}

/// What a live run checks of its configuration before it starts, for a run that asks no provider
/// and starts no MCP server (simulated, dry or scripted): the config file's and the settings
/// layers' servers and `--mcp-config` must be valid, every server an agent stage names must be
/// among them, and every provider a stage names must be one fabro knows (built in or in the
/// config file); its key is not needed.
fn check_without_providers(
    workflow: &Workflow,
    files: &ConfigFiles,
    settings: &RunSettings,
    mcp_config: Option<&str>,
) -> Result<(), SetupError> {
    let mut config = LlmConfig::from_files(files).map_err(SetupError::Config)?;
    settings.apply_defaults(&mut config);
    if let Some(path) = mcp_config.filter(|path| !path.trim().is_empty()) {
        let servers = crate::agent::mcp::read_config_file(Path::new(path), files)
            .map_err(|problem| SetupError::Provider(ConfigError::Mcp(format!("--mcp-config: {problem}"))))?;
        config.mcp_servers.extend(servers);
    }
    for node in workflow.nodes().filter(|node| node.handler_type().is_llm()) {
        let Some(name) = node.settings.llm().and_then(|llm| llm.provider.as_deref()) else { continue };
        if !BUILT_IN_PROVIDERS.contains(&name) && !config.providers.contains_key(name) {
            let mut known: Vec<&str> = BUILT_IN_PROVIDERS.to_vec();
            known.extend(
                config.providers.keys().map(String::as_str).filter(|key| !BUILT_IN_PROVIDERS.contains(key)),
            );
            return Err(SetupError::Provider(ConfigError::NoProvider(format!(
                "stage `{}` uses provider `{name}`, which fabro does not know (known: {}); fix llm_provider, or \
                 add [providers.{name}] with a base_url to the fabro config file",
                node.id,
                known.join(", ")
            ))));
        }
    }
    let servers = crate::agent::mcp::McpServers::new(config.mcp_servers);
    crate::backends::live::check_mcp_servers(workflow, &servers).map_err(SetupError::Provider)
}

/// The providers fabro has without a config file entry (their keys come from the environment).
const BUILT_IN_PROVIDERS: [&str; 4] = ["anthropic", "openai", "gemini", crate::backends::config::COMPATIBLE];

/// Builds an [`Engine`] for one workflow: the built-in handlers (or others), a backend, and the
/// chain that answers human gates: an answers file, then auto-approval, then a person (a
/// terminal, or any other interviewer); with none, a gate pauses the run.
pub struct EngineBuilder {
    backend: BackendChoice,
    handlers: HandlerRegistry,
    answers: Option<PathBuf>,
    auto_approve: bool,
    person: Option<Arc<dyn Interviewer>>,
    step: Option<Arc<dyn StepReviewer>>,
    config_files: ConfigFiles,
    settings: RunSettings,
    /// `--mcp-config`, checked for every backend (a live one also reads it).
    mcp_config: Option<String>,
}

impl EngineBuilder {
    pub fn new(backend: BackendChoice) -> EngineBuilder {
        EngineBuilder {
            backend,
            handlers: crate::handlers::builtin_handlers(),
            answers: None,
            auto_approve: false,
            person: None,
            step: None,
            config_files: ConfigFiles::from_disk(),
            settings: RunSettings::default(),
            mcp_config: None,
        }
    }

    /// The MCP config file the run was given (`--mcp-config`): a simulated, dry or scripted run
    /// starts no MCP server but refuses the file, and stages naming servers it lacks, as a live
    /// run does.
    pub fn mcp_config(mut self, path: impl Into<String>) -> EngineBuilder {
        self.mcp_config = Some(path.into());
        self
    }

    /// Where the config file and `--mcp-config` are read from: a resume passes the texts its
    /// run started with.
    pub fn config_files(mut self, files: ConfigFiles) -> EngineBuilder {
        self.config_files = files;
        self
    }

    /// The run's settings layers ([`crate::run_settings`]): the defaults of LLM stages (model,
    /// provider, permissions, MCP servers) over the config file's.
    pub fn settings(mut self, settings: RunSettings) -> EngineBuilder {
        self.settings = settings;
        self
    }

    /// Handlers instead of the built-in ones.
    pub fn handlers(mut self, handlers: HandlerRegistry) -> EngineBuilder {
        self.handlers = handlers;
        self
    }

    /// Gates are answered from this file first (`--answers`); it is checked against the gates of
    /// the workflow and its child workflows when the engine is built.
    pub fn answers_file(mut self, path: impl Into<PathBuf>) -> EngineBuilder {
        self.answers = Some(path.into());
        self
    }

    /// Gates the answers file leaves open take their default choice (`--auto-approve`).
    pub fn auto_approve(mut self) -> EngineBuilder {
        self.auto_approve = true;
        self
    }

    /// Asks `person` what neither the answers file nor auto-approval answers.
    pub fn person(mut self, person: Arc<dyn Interviewer>) -> EngineBuilder {
        self.person = Some(person);
        self
    }

    /// Step mode: `reviewer` sees every stage of the main line when it ends.
    pub fn step_reviewer(mut self, reviewer: Arc<dyn StepReviewer>) -> EngineBuilder {
        self.step = Some(reviewer);
        self
    }

    /// The engine for `valid`; refuses a workflow with stages no handler runs, a backend that
    /// cannot serve its LLM stages, and an answers file that does not fit the gates of the
    /// workflow and its child workflows.
    pub fn build(self, valid: &ValidWorkflow) -> Result<Engine, SetupError> {
        let workflow = &valid.workflow;
        if let Some(node) = self.handlers.first_unhandled(workflow) {
            return Err(SetupError::UnhandledStage {
                node: node.id.clone(),
                kind: node.handler_type().to_string(),
            });
        }
        if !matches!(self.backend, BackendChoice::Live { .. }) {
            check_without_providers(
                workflow,
                &self.config_files,
                &self.settings,
                self.mcp_config.as_deref(),
            )?;
        }
        let backend =
            self.backend.backend_for(workflow, self.person.clone(), &self.config_files, &self.settings)?;
        let mut chain: Vec<Arc<dyn Interviewer>> = Vec::new();
        if let Some(path) = &self.answers {
            let answers = AnswersFile::from_file(path).map_err(SetupError::Answers)?;
            let mut gates = Gate::all(workflow);
            gates.extend(valid.descendants().into_iter().flat_map(|child| Gate::all(&child.workflow)));
            answers.check(&gates).map_err(SetupError::AnswersMismatch)?;
            chain.push(Arc::new(answers));
        }
        if self.auto_approve {
            chain.push(Arc::new(AutoApprove));
        }
        chain.extend(self.person);
        let interviewer: Arc<dyn Interviewer> = match chain.len() {
            0 => Arc::new(NoAnswers),
            _ => Arc::new(FirstAvailable(chain)),
        };
        let engine = Engine::new(self.handlers, Services { backend, interviewer });
        Ok(match self.step {
            Some(reviewer) => engine.with_step_reviewer(reviewer),
            None => engine,
        })
    }
}

/// How a resumed run is launched: what is given now, and for everything not given, what the run
/// started with (`started`). The way LLM stages are answered (simulated, dry run, scripted) is
/// taken only when no way is given now and not `live`; the model, provider and sandbox overrides
/// whenever they are not given now. Returns the launch and the flags taken, e.g. `--simulate`,
/// `--model m`, for a note.
pub fn resumed_launch(
    started: &LaunchRecord,
    given: LaunchRecord,
    live: bool,
) -> (LaunchRecord, Vec<String>) {
    let mut launch = given;
    let mut taken = Vec::new();
    if !launch.is_offline() && !live {
        if started.simulate {
            launch.simulate = true;
            taken.push("--simulate".to_string());
        }
        if started.dry_run {
            launch.dry_run = true;
            taken.push("--dry-run".to_string());
        }
        if let Some(path) = &started.responses {
            launch.responses = Some(path.clone());
            taken.push(format!("--responses {path}"));
        }
    }
    let mut inherit = |now: &mut Option<String>, then: &Option<String>, flag: &str| {
        if let (None, Some(value)) = (now.as_ref(), then) {
            *now = Some(value.clone());
            taken.push(format!("--{flag} {value}"));
        }
    };
    inherit(&mut launch.model, &started.model, "model");
    inherit(&mut launch.provider, &started.provider, "provider");
    inherit(&mut launch.small_model, &started.small_model, "small-model");
    inherit(&mut launch.mcp_config, &started.mcp_config, "mcp-config");
    inherit(&mut launch.permissions, &started.permissions, "permissions");
    let sandbox =
        started.sandbox.as_deref().and_then(|text| crate::graph::settings::SandboxKind::parse(text).ok());
    inherit(&mut launch.sandbox, &sandbox.map(|kind| kind.as_str().to_string()), "sandbox");
    (launch, taken)
}

/// The workflow source a resume continues with.
#[derive(Debug, Clone)]
pub struct ResumeSource {
    pub path: PathBuf,
    pub text: String,
    /// Given with `--workflow` (it replaces the stored copy once checked); otherwise the copy
    /// stored in the run directory.
    pub given: bool,
    /// The stored copy is used, and the original file has changed since the run started.
    pub original_changed: bool,
}

impl ResumeSource {
    /// `given` (read now), else the copy of the workflow stored in the run directory, which is
    /// what ran.
    pub fn choose(saved: &SavedRun, given: Option<&Path>) -> Result<ResumeSource, SetupError> {
        let read =
            |path: &Path| crate::regular_file::read_to_string(path, crate::regular_file::FileKind::Input);
        if let Some(path) = given {
            let text =
                read(path).map_err(|source| SetupError::Workflow { path: path.to_path_buf(), source })?;
            return Ok(ResumeSource { path: path.to_path_buf(), text, given: true, original_changed: false });
        }
        let path = PathBuf::from(&saved.manifest.source_path);
        let original_changed = read(&path).is_ok_and(|current| current != saved.workflow_source);
        Ok(ResumeSource { path, text: saved.workflow_source.clone(), given: false, original_changed })
    }

    /// A given workflow must have every node the checkpoint needs; then it replaces the stored
    /// copy (kept as `workflow.<n>.dot`). The stored copy needs nothing.
    pub fn adopt(&self, saved: &mut SavedRun, workflow: &Workflow) -> Result<(), SetupError> {
        if !self.given {
            return Ok(());
        }
        let missing = saved.missing_nodes(workflow);
        if !missing.is_empty() {
            return Err(SetupError::MissingNodes { path: self.path.clone(), missing });
        }
        Ok(saved.adopt_workflow(&self.path, &self.text)?)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn launch(edit: impl FnOnce(&mut LaunchRecord)) -> LaunchRecord {
        let mut launch = LaunchRecord::default();
        edit(&mut launch);
        launch
    }

    #[test]
    fn a_resume_keeps_how_the_run_started_unless_told_otherwise() {
        let started = launch(|l| {
            l.simulate = true;
            l.model = Some("m".into());
            l.sandbox = Some("bwrap".into());
        });
        let (resumed, taken) = resumed_launch(&started, LaunchRecord::default(), false);
        assert!(resumed.simulate);
        assert_eq!(resumed.model.as_deref(), Some("m"));
        assert_eq!(taken, ["--simulate", "--model m", "--sandbox bwrap"]);

        // `--live` drops the simulation but keeps the overrides; a mode given now wins.
        let (live, taken) = resumed_launch(&started, LaunchRecord::default(), true);
        assert!(!live.simulate);
        assert_eq!(taken, ["--model m", "--sandbox bwrap"]);
        let given = launch(|l| l.responses = Some("/r.json".into()));
        let (scripted, _) = resumed_launch(&started, given, false);
        assert!(!scripted.simulate);
        assert_eq!(BackendChoice::of(&scripted), BackendChoice::Scripted("/r.json".into()));
    }

    #[test]
    fn an_override_given_now_is_kept_even_when_empty() {
        let started = launch(|l| l.model = Some("m".into()));
        let (resumed, taken) = resumed_launch(&started, launch(|l| l.model = Some(String::new())), false);
        assert_eq!(resumed.model.as_deref(), Some(""));
        assert!(taken.is_empty());
    }

    #[test]
    fn the_backend_follows_the_launch() {
        assert_eq!(BackendChoice::of(&launch(|l| l.dry_run = true)), BackendChoice::Simulated);
        assert_eq!(
            BackendChoice::of(&launch(|l| l.model = Some("m".into()))),
            BackendChoice::Live {
                model: Some("m".into()),
                provider: None,
                small_model: None,
                mcp_config: None,
                permissions: None
            }
        );
    }
}
