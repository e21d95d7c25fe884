//! The settings of a run, from layers of files, lowest first:
//!
//! 1. user: the fabro config file (`$FABRO_CONFIG`, else `~/.config/fabro/config.toml`), its
//!    `[run]` table and its own flat keys (`default_model`, `sandbox`, `mcp_servers`, ...);
//! 2. project: `.fabro/project.toml` at the root of the work directory's git repository (the
//!    work directory itself outside git);
//! 3. workflow: `workflow.toml` beside the workflow file (and the `[[hooks]]` of a `fabro.toml`
//!    there);
//! 4. run configuration: the `run.toml` given to `fabro run`;
//! 5. environment: `FABRO_LLM_MODEL`, `FABRO_LLM_PROVIDER`.
//!
//! A higher layer's value replaces a lower one's key by key; `[run.inputs]` is replaced whole,
//! `[run.labels]` and `[run.agent.mcps]` merge by name, and `[[run.hooks]]` add up (a hook with
//! the `name` of a lower layer's takes its place). Command-line flags are over all of them (the
//! CLI applies them). The settings are defaults: a node's or the graph's own attribute wins
//! over them, as over the config file before.
//!
//! Every value keeps where it came from ([`Origin`]), for `fabro settings`. The files are read
//! through [`ConfigFiles`], so a resume uses the texts the run started with.

pub mod file;

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use toml::Spanned;

use crate::agent::mcp::ServerConfig;
use crate::config_files::ConfigFiles;
use crate::graph::inputs::Inputs;
use crate::graph::settings::{PermissionLevel, SandboxKind};
use crate::lifecycle_hooks::{HookConfigError, LifecycleHooks};
use file::{LayerFile, RunTable, UserFile};

/// The project settings file, under the project's root.
pub const PROJECT_FILE: &str = ".fabro/project.toml";
/// The workflow settings file, beside the workflow.
pub const WORKFLOW_FILE: &str = "workflow.toml";

/// Where a setting can come from, lowest first.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Layer {
    User,
    Project,
    Workflow,
    RunConfig,
    Environment,
}

impl Layer {
    pub fn as_str(self) -> &'static str {
        match self {
            Layer::User => "user",
            Layer::Project => "project",
            Layer::Workflow => "workflow",
            Layer::RunConfig => "run config",
            Layer::Environment => "environment",
        }
    }
}

/// Where a value was set: the layer, the file (or variable) and line, and the key as written.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize)]
pub struct Origin {
    pub layer: Layer,
    /// The file's path, or the environment variable's name.
    pub source: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<usize>,
    /// The key as the file writes it (`run.model.name`, `default_model`).
    pub key: String,
}

impl std::fmt::Display for Origin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{} {}", self.layer.as_str(), self.source)?;
        if let Some(line) = self.line {
            write!(f, ":{line}")?;
        }
        write!(f, " ({})", self.key)
    }
}

/// A value and where it was set.
#[derive(Debug, Clone, PartialEq)]
pub struct Set<T> {
    pub value: T,
    pub origin: Origin,
}

/// `goal` or `goal_file`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Goal {
    Text(String),
    File(PathBuf),
}

/// The merged settings of a run.
#[derive(Debug, Clone, Default)]
pub struct RunSettings {
    /// `[workflow] graph` of a run configuration.
    pub graph: Option<Set<PathBuf>>,
    pub goal: Option<Set<Goal>>,
    pub working_dir: Option<Set<PathBuf>>,
    pub worktree: Option<Set<bool>>,
    pub inputs: Option<Set<Inputs>>,
    pub labels: BTreeMap<String, Set<String>>,
    /// The model and provider of LLM stages that name none.
    pub model: Option<Set<String>>,
    pub provider: Option<Set<String>>,
    pub small_model: Option<Set<String>>,
    /// The sandbox of stages that name none.
    pub sandbox: Option<Set<SandboxKind>>,
    pub permissions: Option<Set<PermissionLevel>>,
    pub max_tokens: Option<Set<u64>>,
    pub max_cost: Option<Set<f64>>,
    pub max_stage_tokens: Option<Set<u64>>,
    pub max_stage_cost: Option<Set<f64>>,
    pub max_output: Option<Set<u64>>,
    pub mcp_servers: BTreeMap<String, Set<ServerConfig>>,
    pub hooks: LifecycleHooks,
    /// The files looked at, lowest layer first, and whether each exists.
    pub files: Vec<(Layer, PathBuf, bool)>,
}

/// Why the settings cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum SettingsError {
    #[error("cannot read {}: {message}", path.display())]
    Unreadable { path: PathBuf, message: String },
    #[error("{}{}: {message}", path.display(), position(*line, *column))]
    Invalid { path: PathBuf, line: Option<usize>, column: Option<usize>, message: String },
    #[error(transparent)]
    Hooks(#[from] HookConfigError),
}

fn position(line: Option<usize>, column: Option<usize>) -> String {
    match (line, column) {
        (Some(line), Some(column)) => format!(":{line}:{column}"),
        (Some(line), None) => format!(":{line}"),
        _ => String::new(),
    }
}

/// The files of the layers of one run.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Sources {
    pub user: Option<PathBuf>,
    pub project: Option<PathBuf>,
    pub workflow: Option<PathBuf>,
    /// `fabro.toml` beside the workflow: its `[[hooks]]` only.
    pub workflow_hooks: Option<PathBuf>,
    pub run_config: Option<PathBuf>,
}

impl Sources {
    /// The layers of a run working in `work_dir` on `workflow` (a `.dot` file), started from
    /// `run_config` if any.
    pub fn for_run(work_dir: &Path, workflow: Option<&Path>, run_config: Option<&Path>) -> Sources {
        let beside = |name: &str| workflow.map(|path| path.parent().unwrap_or(Path::new("")).join(name));
        Sources {
            user: crate::backends::config::config_file_path(),
            project: Some(project_root(work_dir).join(PROJECT_FILE)),
            workflow: beside(WORKFLOW_FILE),
            workflow_hooks: beside(crate::lifecycle_hooks::WORKFLOW_HOOKS_FILE),
            run_config: run_config.map(Path::to_path_buf),
        }
    }
}

/// The root of the git repository `dir` is in (a linked worktree's own root), else `dir`.
pub fn project_root(dir: &Path) -> PathBuf {
    git2::Repository::discover(dir)
        .ok()
        .and_then(|repo| repo.workdir().map(Path::to_path_buf))
        .unwrap_or_else(|| dir.to_path_buf())
}

/// Whether `path` names a run configuration (a `.toml` file) rather than a workflow.
pub fn is_run_config(path: &Path) -> bool {
    path.extension().is_some_and(|ext| ext.eq_ignore_ascii_case("toml"))
}

/// What a run configuration says of where the run is: its workflow (`[workflow] graph`) and
/// work directory (`[run] working_dir`), both resolved against its directory. They decide where
/// the other layers are, so they are read first.
pub fn read_run_config(path: &Path, files: &ConfigFiles) -> Result<RunSettings, SettingsError> {
    let text = read(path, files)?.ok_or_else(|| SettingsError::Unreadable {
        path: path.to_path_buf(),
        message: "no such file".to_string(),
    })?;
    let layer = Reader { layer: Layer::RunConfig, path, text: &text };
    let mut settings = layer.layer_file()?;
    if settings.graph.is_none() {
        return Err(SettingsError::Invalid {
            path: path.to_path_buf(),
            line: None,
            column: None,
            message:
                "a run configuration names its workflow: add `[workflow]` with `graph = \"workflow.dot\"` \
                      (relative to this file)"
                    .to_string(),
        });
    }
    settings.files.push((Layer::RunConfig, path.to_path_buf(), true));
    Ok(settings)
}

/// The merged settings of `sources`, with the environment's `FABRO_LLM_MODEL` and
/// `FABRO_LLM_PROVIDER` over them.
pub fn load(sources: &Sources, files: &ConfigFiles) -> Result<RunSettings, SettingsError> {
    load_with(sources, files, &|name| std::env::var(name).ok().filter(|value| !value.trim().is_empty()))
}

fn load_with(
    sources: &Sources,
    files: &ConfigFiles,
    env: &dyn Fn(&str) -> Option<String>,
) -> Result<RunSettings, SettingsError> {
    let mut merged = RunSettings::default();
    let mut hook_layers = Vec::new();
    let mut seen: Vec<PathBuf> = Vec::new();
    let layers = [
        (Layer::User, &sources.user),
        (Layer::Project, &sources.project),
        (Layer::Workflow, &sources.workflow),
        (Layer::Workflow, &sources.workflow_hooks),
        (Layer::RunConfig, &sources.run_config),
    ];
    for (layer, path) in layers {
        let Some(path) = path else { continue };
        // A file named by two layers (the config file beside the workflow) counts once.
        let same = path.canonicalize().unwrap_or_else(|_| path.clone());
        if seen.contains(&same) {
            continue;
        }
        seen.push(same);
        let text = read(path, files)?;
        merged.files.push((layer, path.clone(), text.is_some()));
        let Some(text) = text else { continue };
        let reader = Reader { layer, path, text: &text };
        let (settings, hooks) = if layer == Layer::User {
            reader.user_file()?
        } else if Some(path) == sources.workflow_hooks.as_ref() {
            (RunSettings::default(), crate::lifecycle_hooks::entries_of(path, &text)?)
        } else {
            let file: LayerFile = file::parse(path, &text)?;
            file::check_version(path, &text, file.version.as_ref())?;
            let hooks =
                [file.hooks.clone(), file.run.as_ref().map(|run| run.hooks.clone()).unwrap_or_default()]
                    .concat();
            (reader.layer_settings(file)?, hooks)
        };
        hook_layers.push((path.clone(), hooks));
        merged.take(settings);
    }
    let from_env = |name: &str| {
        env(name).map(|value| Set {
            value: value.trim().to_string(),
            origin: Origin {
                layer: Layer::Environment,
                source: name.to_string(),
                line: None,
                key: name.to_string(),
            },
        })
    };
    merged.take(RunSettings {
        model: from_env("FABRO_LLM_MODEL"),
        provider: from_env("FABRO_LLM_PROVIDER"),
        ..RunSettings::default()
    });
    merged.hooks = LifecycleHooks::from_layers(hook_layers)?;
    Ok(merged)
}

fn read(path: &Path, files: &ConfigFiles) -> Result<Option<String>, SettingsError> {
    files
        .read_as_started(path)
        .map_err(|error| SettingsError::Unreadable { path: path.to_path_buf(), message: error.to_string() })
}

impl RunSettings {
    /// Takes every value `higher` sets (a higher layer's): key by key, inputs whole, labels and
    /// MCP servers by name.
    fn take(&mut self, higher: RunSettings) {
        fn over<T>(mine: &mut Option<T>, theirs: Option<T>) {
            if theirs.is_some() {
                *mine = theirs;
            }
        }
        over(&mut self.graph, higher.graph);
        over(&mut self.goal, higher.goal);
        over(&mut self.working_dir, higher.working_dir);
        over(&mut self.worktree, higher.worktree);
        over(&mut self.inputs, higher.inputs);
        self.labels.extend(higher.labels);
        over(&mut self.model, higher.model);
        over(&mut self.provider, higher.provider);
        over(&mut self.small_model, higher.small_model);
        over(&mut self.sandbox, higher.sandbox);
        over(&mut self.permissions, higher.permissions);
        over(&mut self.max_tokens, higher.max_tokens);
        over(&mut self.max_cost, higher.max_cost);
        over(&mut self.max_stage_tokens, higher.max_stage_tokens);
        over(&mut self.max_stage_cost, higher.max_stage_cost);
        over(&mut self.max_output, higher.max_output);
        self.mcp_servers.extend(higher.mcp_servers);
        self.files.extend(higher.files);
    }

    /// Puts the defaults of LLM stages (model, provider, small model, permissions, MCP servers)
    /// into `config`, over what it read of the config file and the environment.
    pub fn apply_defaults(&self, config: &mut crate::backends::config::LlmConfig) {
        let value = |set: &Option<Set<String>>| set.as_ref().map(|set| set.value.clone());
        config.default_model = value(&self.model).or(config.default_model.take());
        config.default_provider = value(&self.provider).or(config.default_provider.take());
        config.small_model = value(&self.small_model).or(config.small_model.take());
        if let Some(set) = &self.permissions {
            config.permissions = Some(set.value);
        }
        config
            .mcp_servers
            .extend(self.mcp_servers.iter().map(|(name, set)| (name.clone(), set.value.clone())));
    }

    /// The goal's text: `goal`, or the text of `goal_file` (which must not be empty).
    /// A loader that reads the workflow as a run with these settings does: with their goal and
    /// `inputs` (the settings' own, or what the command line made of them).
    pub fn loader(&self, inputs: Inputs) -> crate::load::Loader {
        let loader = crate::load::Loader::new().with_inputs(inputs);
        match self.goal_text() {
            Ok(Some(goal)) => loader.with_goal(goal),
            _ => loader,
        }
    }

    pub fn goal_text(&self) -> Result<Option<String>, SettingsError> {
        let Some(goal) = &self.goal else { return Ok(None) };
        let path = match &goal.value {
            Goal::Text(text) => return Ok(Some(text.clone())),
            Goal::File(path) => path,
        };
        let invalid = |message: String| SettingsError::Invalid {
            path: PathBuf::from(&goal.origin.source),
            line: goal.origin.line,
            column: None,
            message,
        };
        let text = crate::regular_file::read_to_string(path, crate::regular_file::FileKind::Input)
            .map_err(|error| invalid(format!("goal_file: cannot read `{}`: {error}", path.display())))?;
        if text.trim().is_empty() {
            return Err(invalid(format!("goal_file: `{}` is empty; write the goal in it", path.display())));
        }
        Ok(Some(text.trim().to_string()))
    }

    /// Every value set, as `(key, value as TOML, origin)`, in a stable order.
    pub fn entries(&self) -> Vec<(String, String, Origin)> {
        fn quoted(text: &str) -> String {
            toml::Value::String(text.to_string()).to_string()
        }
        let mut out = Vec::new();
        let mut add =
            |key: &str, value: String, origin: &Origin| out.push((key.to_string(), value, origin.clone()));
        if let Some(set) = &self.graph {
            add("workflow.graph", quoted(&set.value.display().to_string()), &set.origin);
        }
        if let Some(set) = &self.goal {
            match &set.value {
                Goal::Text(text) => add("run.goal", quoted(text), &set.origin),
                Goal::File(path) => add("run.goal_file", quoted(&path.display().to_string()), &set.origin),
            }
        }
        if let Some(set) = &self.working_dir {
            add("run.working_dir", quoted(&set.value.display().to_string()), &set.origin);
        }
        if let Some(set) = &self.worktree {
            add("run.worktree", set.value.to_string(), &set.origin);
        }
        if let Some(set) = &self.inputs {
            for (name, value) in &set.value {
                add(&format!("run.inputs.{name}"), value.to_string(), &set.origin);
            }
        }
        for (name, set) in &self.labels {
            add(&format!("run.labels.{name}"), quoted(&set.value), &set.origin);
        }
        for (key, set) in [("run.model.name", &self.model), ("run.model.provider", &self.provider)] {
            if let Some(set) = set {
                add(key, quoted(&set.value), &set.origin);
            }
        }
        if let Some(set) = &self.small_model {
            add("run.model.small_model", quoted(&set.value), &set.origin);
        }
        if let Some(set) = &self.sandbox {
            add("run.sandbox.provider", quoted(set.value.as_str()), &set.origin);
        }
        if let Some(set) = &self.permissions {
            add("run.agent.permissions", quoted(set.value.as_str()), &set.origin);
        }
        for (name, set) in &self.mcp_servers {
            let what = match set.value.transport {
                crate::agent::mcp::TransportKind::Stdio => set.value.command.join(" "),
                crate::agent::mcp::TransportKind::Http => set.value.url.clone().unwrap_or_default(),
            };
            add(&format!("run.agent.mcps.{name}"), quoted(&what), &set.origin);
        }
        for (key, set) in [
            ("run.limits.max_tokens", &self.max_tokens),
            ("run.limits.max_stage_tokens", &self.max_stage_tokens),
            ("run.limits.max_output", &self.max_output),
        ] {
            if let Some(set) = set {
                add(key, set.value.to_string(), &set.origin);
            }
        }
        for (key, set) in
            [("run.limits.max_cost", &self.max_cost), ("run.limits.max_stage_cost", &self.max_stage_cost)]
        {
            if let Some(set) = set {
                add(key, set.value.to_string(), &set.origin);
            }
        }
        out
    }
}

/// One layer's file being read.
struct Reader<'a> {
    layer: Layer,
    path: &'a Path,
    text: &'a str,
}

impl Reader<'_> {
    fn origin(&self, key: &str, span: std::ops::Range<usize>) -> Origin {
        Origin {
            layer: self.layer,
            source: self.path.display().to_string(),
            line: Some(file::line_column(self.text, span.start).0),
            key: key.to_string(),
        }
    }

    fn invalid(&self, span: std::ops::Range<usize>, message: String) -> SettingsError {
        let (line, column) = file::line_column(self.text, span.start);
        SettingsError::Invalid {
            path: self.path.to_path_buf(),
            line: Some(line),
            column: Some(column),
            message,
        }
    }

    /// A value as it is, with its origin.
    fn set<T: Clone>(&self, key: &str, value: &Spanned<T>) -> Set<T> {
        Set { value: value.get_ref().clone(), origin: self.origin(key, value.span()) }
    }

    /// A value turned into the setting by `convert`; its error is at the value's place.
    fn convert<T, U>(
        &self,
        key: &str,
        value: &Option<Spanned<T>>,
        convert: impl FnOnce(&T) -> Result<U, String>,
    ) -> Result<Option<Set<U>>, SettingsError> {
        let Some(value) = value else { return Ok(None) };
        let converted = convert(value.get_ref())
            .map_err(|message| self.invalid(value.span(), format!("{key}: {message}")))?;
        Ok(Some(Set { value: converted, origin: self.origin(key, value.span()) }))
    }

    /// A path relative to the file's directory, absolute, without `.` and `..` steps.
    fn path_of(&self, text: &str) -> PathBuf {
        let dir = self.path.parent().unwrap_or(Path::new(""));
        let joined = std::path::absolute(dir.join(text)).unwrap_or_else(|_| dir.join(text));
        let mut clean = PathBuf::new();
        for part in joined.components() {
            match part {
                std::path::Component::CurDir => {}
                std::path::Component::ParentDir => {
                    clean.pop();
                }
                other => clean.push(other),
            }
        }
        clean
    }

    /// A project, workflow or run configuration file.
    fn layer_file(&self) -> Result<RunSettings, SettingsError> {
        let file: LayerFile = file::parse(self.path, self.text)?;
        file::check_version(self.path, self.text, file.version.as_ref())?;
        self.layer_settings(file)
    }

    fn layer_settings(&self, file: LayerFile) -> Result<RunSettings, SettingsError> {
        let graph = file.workflow.and_then(|workflow| workflow.graph);
        if self.layer != Layer::RunConfig {
            self.only_in_run_config(
                graph.as_ref(),
                file.run.as_ref().and_then(|run| run.working_dir.as_ref()),
            )?;
        }
        let mut settings = match &file.run {
            Some(run) => self.run_table(run, "run.")?,
            None => RunSettings::default(),
        };
        settings.graph = self.convert("workflow.graph", &graph, |text| Ok(self.path_of(text)))?;
        Ok(settings)
    }

    /// Refuses what only a run configuration may say: its workflow and its work directory (the
    /// other layers' files are found from them).
    fn only_in_run_config(
        &self,
        graph: Option<&Spanned<String>>,
        working_dir: Option<&Spanned<String>>,
    ) -> Result<(), SettingsError> {
        if let Some(graph) = graph {
            return Err(self.invalid(
                graph.span(),
                "`[workflow] graph` belongs in a run configuration (the file given to `fabro run`); remove it \
                 here"
                    .to_string(),
            ));
        }
        if let Some(working_dir) = working_dir {
            return Err(self.invalid(
                working_dir.span(),
                "`working_dir` belongs in a run configuration (this file is found from the work directory); \
                 remove it here"
                    .to_string(),
            ));
        }
        Ok(())
    }

    /// The fabro config file: its `[run]` table and its own flat keys (both may not set the same
    /// setting); returns the settings and the `[[hooks]]` entries of both.
    fn user_file(&self) -> Result<(RunSettings, Vec<toml::Value>), SettingsError> {
        let file: UserFile = file::parse(self.path, self.text)?;
        crate::backends::config::check_file_text(self.text)
            .map_err(|error| file::error_at(self.path, self.text, &error))?;
        file::check_version(self.path, self.text, file.version.as_ref())?;
        self.only_in_run_config(
            file.workflow.as_ref().and_then(|workflow| workflow.graph.as_ref()),
            file.run.as_ref().and_then(|run| run.working_dir.as_ref()),
        )?;
        let mut hooks = crate::lifecycle_hooks::entries_of(self.path, self.text)?;
        let flat = RunTable {
            model: Some(file::ModelTable {
                name: file.default_model.clone(),
                provider: file.default_provider.clone(),
                small_model: file.small_model.clone(),
            }),
            sandbox: Some(file::SandboxTable { provider: file.sandbox.clone() }),
            agent: Some(file::AgentTable {
                permissions: file.permissions.clone(),
                mcps: file.mcp_servers.clone(),
            }),
            ..RunTable::default()
        };
        let mut settings = self.run_table(&flat, "")?;
        // The flat keys' names, as the file writes them.
        for (set, key) in [
            (settings.model.as_mut().map(|set| &mut set.origin), "default_model"),
            (settings.provider.as_mut().map(|set| &mut set.origin), "default_provider"),
            (settings.small_model.as_mut().map(|set| &mut set.origin), "small_model"),
            (settings.sandbox.as_mut().map(|set| &mut set.origin), "sandbox"),
            (settings.permissions.as_mut().map(|set| &mut set.origin), "permissions"),
        ] {
            if let Some(origin) = set {
                origin.key = key.to_string();
            }
        }
        for (name, set) in settings.mcp_servers.iter_mut() {
            set.origin.key = format!("mcp_servers.{name}");
        }
        if let Some(run) = &file.run {
            let namespaced = self.run_table(run, "run.")?;
            let flat_entries = settings.entries();
            let twice = namespaced.entries().into_iter().find_map(|(key, _, run)| {
                flat_entries
                    .iter()
                    .find(|(flat_key, _, _)| *flat_key == key)
                    .map(|(_, _, flat)| (flat.key.clone(), run))
            });
            if let Some((flat, run)) = twice {
                return Err(SettingsError::Invalid {
                    path: self.path.to_path_buf(),
                    line: run.line,
                    column: None,
                    message: format!("`{}` and `{flat}` set the same setting; keep one", run.key),
                });
            }
            hooks.extend(run.hooks.iter().cloned());
            settings.take(namespaced);
        }
        Ok((settings, hooks))
    }

    /// The settings of a `[run]` table whose keys are written under `prefix`.
    fn run_table(&self, run: &RunTable, prefix: &str) -> Result<RunSettings, SettingsError> {
        let key = |name: &str| format!("{prefix}{name}");
        let text_value = |name: &str| {
            let name = name.to_string();
            move |text: &String| {
                let text = text.trim();
                if text.is_empty() {
                    Err(format!("empty; give a value or remove `{name}`"))
                } else {
                    Ok(text.to_string())
                }
            }
        };
        let mut settings =
            RunSettings {
                goal: self
                    .convert(&key("goal"), &run.goal, |text| Ok(Goal::Text(text.trim().to_string())))?,
                working_dir: self
                    .convert(&key("working_dir"), &run.working_dir, |text| Ok(self.path_of(text)))?,
                worktree: run.worktree.as_ref().map(|value| self.set(&key("worktree"), value)),
                inputs: self.convert(&key("inputs"), &run.inputs, inputs_of)?,
                ..RunSettings::default()
            };
        if let Some(goal_file) =
            self.convert(&key("goal_file"), &run.goal_file, |text| Ok(self.path_of(text)))?
        {
            if let Some(goal) = &run.goal {
                return Err(self.invalid(goal.span(), "set `goal` or `goal_file`, not both".to_string()));
            }
            settings.goal = Some(Set { value: Goal::File(goal_file.value), origin: goal_file.origin });
        }
        for (name, value) in &run.labels {
            let label = crate::run_dir::parse_label(&format!("{name}={}", value.get_ref()))
                .map_err(|message| self.invalid(value.span(), format!("{}: {message}", key("labels"))))?;
            settings.labels.insert(
                label.0,
                Set { value: label.1, origin: self.origin(&key(&format!("labels.{name}")), value.span()) },
            );
        }
        if let Some(model) = &run.model {
            settings.model = self.convert(&key("model.name"), &model.name, text_value("name"))?;
            settings.provider =
                self.convert(&key("model.provider"), &model.provider, text_value("provider"))?;
            settings.small_model =
                self.convert(&key("model.small_model"), &model.small_model, text_value("small_model"))?;
        }
        if let Some(sandbox) = &run.sandbox {
            settings.sandbox =
                self.convert(&key("sandbox.provider"), &sandbox.provider, |text| SandboxKind::parse(text))?;
        }
        if let Some(agent) = &run.agent {
            settings.permissions = self.convert(&key("agent.permissions"), &agent.permissions, |text| {
                PermissionLevel::parse(text)
                    .ok_or_else(|| format!("`{text}` is not read-only, read-write or full"))
            })?;
            for (name, server) in &agent.mcps {
                let entry = key(&format!("agent.mcps.{name}"));
                server
                    .get_ref()
                    .check(name)
                    .map_err(|problem| self.invalid(server.span(), format!("{entry}: {problem}")))?;
                settings.mcp_servers.insert(name.clone(), self.set(&entry, server));
            }
        }
        if let Some(limits) = &run.limits {
            let cost = |cost: &f64| {
                if cost.is_finite() && *cost >= 0.0 {
                    Ok(*cost)
                } else {
                    Err(format!("{cost} is not a cost in US dollars (0 or more)"))
                }
            };
            settings.max_tokens = self.convert(&key("limits.max_tokens"), &limits.max_tokens, |n| Ok(*n))?;
            settings.max_cost = self.convert(&key("limits.max_cost"), &limits.max_cost, cost)?;
            settings.max_stage_tokens =
                self.convert(&key("limits.max_stage_tokens"), &limits.max_stage_tokens, |n| Ok(*n))?;
            settings.max_stage_cost =
                self.convert(&key("limits.max_stage_cost"), &limits.max_stage_cost, cost)?;
            settings.max_output =
                self.convert(&key("limits.max_output"), &limits.max_output, |value| match value {
                    toml::Value::Integer(bytes) => {
                        u64::try_from(*bytes).map_err(|_| format!("{bytes} is not a size"))
                    }
                    toml::Value::String(text) => crate::handlers::command::parse_size(text),
                    other => Err(format!("{other} is not a size (bytes, or text such as \"200MB\")")),
                })?;
        }
        Ok(settings)
    }
}

/// `[run.inputs]` as run inputs: names as `--input` takes them.
fn inputs_of(table: &toml::Table) -> Result<Inputs, String> {
    let mut inputs = Inputs::new();
    for (name, value) in table {
        if !crate::graph::inputs::is_input_name(name) {
            return Err(format!(
                "`{name}` is not an input name: use letters, digits and `_`, starting with a letter or `_`"
            ));
        }
        inputs.insert(name.clone(), serde_json::to_value(value).map_err(|error| error.to_string())?);
    }
    Ok(inputs)
}

#[cfg(test)]
mod tests;
