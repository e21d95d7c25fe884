//! `fabro run WORKFLOW [...]`: validate, run, report. Progress goes to stderr, `--json` puts
//! result.json alone on stdout, and the exit code says how the run ended.

use std::path::PathBuf;
use std::sync::Arc;

use fabro::agent::context::reference_files::{self, ReferenceEntry, ReferenceFile};
use fabro::config_files::ConfigFiles;
use fabro::engine::{Engine, RunOptions};
use fabro::graph::Workflow;
use fabro::interview::console::Console;
use fabro::outcome::PauseKind;
use fabro::run_dir::{LaunchRecord, RunResult};
use fabro::run_setup::{BackendChoice, EngineBuilder};
use fabro::run_status::RunStatus;
use fabro::{Loader, Severity};
use tokio_util::sync::CancellationToken;

use super::exit;
use super::progress::{seconds, ProgressView, ViewOptions};
use super::render::{render_diagnostics, render_load_error};
use fabro::run_dir::layout;

#[derive(clap::Args)]
pub struct RunArgs {
    /// The workflow file (.dot), or a run configuration (.toml) naming one with its settings.
    workflow: PathBuf,
    /// Where the run's files go (default .fabro/runs/<run id>); must not exist or be empty.
    #[arg(long)]
    run_dir: Option<PathBuf>,
    /// Where commands run and agents work (default: the current directory).
    #[arg(long)]
    workdir: Option<PathBuf>,
    /// Work in a fresh git worktree on branch fabro/run/<run id> (from HEAD of the repository
    /// containing --workdir) and commit after every stage; your checkout is never touched.
    #[arg(long)]
    worktree: bool,
    /// Replace the workflow's goal.
    #[arg(long, conflicts_with = "goal_file")]
    goal: Option<String>,
    /// Replace the workflow's goal with the text of this file (Markdown welcome).
    #[arg(long, value_name = "PATH")]
    goal_file: Option<PathBuf>,
    /// A run input, read as `{{ inputs.KEY }}` in the workflow, `inputs.KEY` in conditions and
    /// `FABRO_INPUT_KEY` by scripts (JSON when it parses as JSON, else text). Repeatable; wins
    /// over --inputs.
    #[arg(long = "input", value_name = "KEY=VALUE")]
    inputs: Vec<String>,
    /// Run inputs from a TOML table or JSON object file.
    #[arg(long = "inputs", value_name = "FILE")]
    inputs_file: Option<PathBuf>,
    /// Label the run (kept in its manifest; `fabro runs --label` and `fabro serve` filter by
    /// labels). Repeatable.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    labels: Vec<String>,
    /// Seed a context value (JSON if it parses as JSON, else text). Repeatable.
    #[arg(long = "set", value_name = "KEY=VALUE")]
    set: Vec<String>,
    /// Check the workflow, then run it in the background and return at once: prints the run id
    /// on stdout (follow it and answer its gates with `fabro attach ID`, wait for its exit code
    /// with `fabro wait ID`, stop it with `fabro cancel ID`); what it prints goes to output.log
    /// in its directory.
    #[arg(long)]
    detach: bool,
    /// Start the run on the run service at this URL (as `fabro serve` prints it; a `?token=` in
    /// it or FABRO_SERVER_TOKEN is sent): the workflow file's text, --goal, --goal-file, --input,
    /// --label, --workdir (a directory on the service's machine) and --simulate go with it; then
    /// follow it as `fabro attach` does, or with --detach print its id and return.
    #[arg(long, value_name = "URL")]
    server: Option<String>,
    /// The run's id, chosen by `--detach` or the run service for the process they start.
    #[arg(long, hide = true, value_parser = parse_run_id)]
    run_id: Option<String>,
    #[command(flatten)]
    pub launch: LaunchArgs,
}

fn parse_run_id(text: &str) -> Result<String, String> {
    match fabro::run_launcher::is_run_id(text) {
        true => Ok(text.to_string()),
        false => Err(format!("`{text}` is not a run id (a UUID)")),
    }
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum CheckpointSync {
    /// Never fsync: survives a crash of fabro, not of the machine.
    Never,
    /// fsync the journal after every stage.
    Stage,
    /// fsync at most 50 ms after a stage: a crash of the machine loses at most the last 50 ms.
    Batch,
}

impl CheckpointSync {
    pub fn sync_mode(self) -> fabro::run_dir::journal::SyncMode {
        use fabro::run_dir::journal::SyncMode;
        match self {
            CheckpointSync::Never => SyncMode::Never,
            CheckpointSync::Stage => SyncMode::Stage,
            CheckpointSync::Batch => SyncMode::Batch,
        }
    }
}

/// How stages get their answers and how the run reports: shared by `run` and `resume`.
#[derive(clap::Args)]
pub struct LaunchArgs {
    /// Answer every LLM stage with deterministic placeholder text.
    #[arg(long)]
    pub simulate: bool,
    /// Answer LLM stages from a JSON file: {"node_id": "text" | ["visit 1", "visit 2", ...]}.
    #[arg(long, value_name = "FILE")]
    pub responses: Option<PathBuf>,
    /// Check the wiring: simulate LLM calls, commands and waits; cap loops at 3 visits.
    #[arg(long)]
    pub dry_run: bool,
    /// Take the first choice at every human gate.
    #[arg(long)]
    pub auto_approve: bool,
    /// Answers for human gates: {"gate_id": ["A", "Fix", "node_id", ...]}, used in order.
    #[arg(long, value_name = "FILE")]
    pub answers: Option<PathBuf>,
    /// Write a JUnit XML report of the run (one test case per stage visit) to FILE.
    #[arg(long, value_name = "FILE")]
    pub junit: Option<PathBuf>,
    /// Write the run as a document when it ends (also when it fails or pauses): FILE.md for
    /// Markdown, FILE.html for one self-contained HTML page.
    #[arg(long, value_name = "FILE")]
    pub output: Option<PathBuf>,

    /// Write the run's retrospective (retro.json, retro.md in the run directory) when it ends;
    /// a configured provider adds its reading of the run
    #[arg(long)]
    pub retro: bool,
    /// `stage` (default) fsyncs every checkpoint; `never` only renames it into place, which
    /// survives a crash of fabro but not of the machine, and is much faster.
    #[arg(long, value_enum, default_value_t = CheckpointSync::Stage)]
    pub checkpoint_sync: CheckpointSync,
    /// Keep the git worktree of every parallel branch under the run directory (they are removed
    /// once their parallel stage ends; the branches fabro/<run id>/<branch> are always kept).
    #[arg(long)]
    pub keep_worktrees: bool,
    /// Keep the run's containers (sandbox=podman or docker) when it ends, for inspection; fabro
    /// prints their ids. By default they are removed as the run ends.
    #[arg(long)]
    pub preserve_sandbox: bool,
    /// Use this model for every LLM stage (the provider follows from its name unless --provider).
    #[arg(long, value_name = "MODEL")]
    pub model: Option<String>,
    /// Use this provider for every LLM stage: anthropic, openai, gemini, openai_compatible or one
    /// from the config file.
    #[arg(long, value_name = "NAME")]
    pub provider: Option<String>,
    /// The model of agentic tool wrappers' sub-conversations (agentic_read_file, agentic_grep,
    /// agentic_research) for stages without small_model; default: the config file's small_model,
    /// else the provider's cheap tier.
    #[arg(long, value_name = "MODEL")]
    pub small_model: Option<String>,
    /// MCP servers for agent stages: a TOML file of [mcp_servers.NAME] entries, over the config
    /// file's entries of the same name.
    #[arg(long, value_name = "FILE")]
    pub mcp_config: Option<PathBuf>,
    /// What agent stages' tools may do without asking: read-only, read-write or full (default:
    /// the config file's permissions, else full); a node's or the graph's permissions wins.
    #[arg(long, value_name = "LEVEL", value_parser = parse_permissions)]
    pub permissions: Option<String>,
    /// Where command stages, the agent's shell tool and CLI agents run: none (default), or bwrap
    /// (read-only system, home hidden, no network, no API keys). A stage's `sandbox` wins.
    #[arg(long, value_name = "none|bwrap", value_parser = parse_sandbox)]
    pub sandbox: Option<fabro::graph::settings::SandboxKind>,
    /// Fail a command stage once its stdout and stderr pass this size (e.g. 200MB, 1GiB; default
    /// 1GiB); the node's max_output wins, the graph's default_max_output applies when unset.
    #[arg(long, value_name = "SIZE", value_parser = fabro::handlers::command::parse_size)]
    pub max_output: Option<u64>,
    /// Pause the run before the next LLM stage once this many tokens (in + out) have been used.
    #[arg(long, value_name = "N")]
    pub max_tokens: Option<u64>,
    /// Pause the run before the next LLM stage once the estimated cost reaches this many US dollars.
    #[arg(long, value_name = "USD")]
    pub max_cost: Option<f64>,
    /// Stop an LLM stage before its next model call once the stage itself has used this many
    /// tokens (in + out, its small-model calls included) and pause the run; over the node's
    /// max_stage_tokens. A resume goes on only with a higher bound.
    #[arg(long, value_name = "N")]
    pub max_stage_tokens: Option<u64>,
    /// Like --max-stage-tokens, for the stage's estimated cost in US dollars (over the node's
    /// max_stage_cost).
    #[arg(long, value_name = "USD")]
    pub max_stage_cost: Option<f64>,
    /// A reference file (or folder) every agent stage is told about and may read, named NAME in
    /// the index (default: the path); repeatable, added to the graph's context_files.
    #[arg(long = "context-file", value_name = "PATH[=NAME]")]
    pub context_files: Vec<String>,
    /// After every stage, show what it did and ask: Enter goes on, q pauses the run, any other
    /// text is a note for the next LLM stage. Needs a terminal.
    #[arg(long)]
    pub step: bool,
    /// Refuse to start (exit 2) when the workflow has any validation warning, for CI.
    #[arg(long)]
    pub deny_warnings: bool,
    /// Print result.json on stdout and nothing else.
    #[arg(long)]
    pub json: bool,
    /// No progress lines, only the summary.
    #[arg(short, long)]
    pub quiet: bool,
    /// `-v` given to fabro: stream command output and LLM answers as they are written.
    #[arg(skip)]
    pub verbose: u8,
}

impl LaunchArgs {
    /// How LLM stages are answered, as the manifest records it (`--responses` made absolute, so a
    /// resume from another directory finds the file).
    pub fn record(&self) -> LaunchRecord {
        let non_empty = |value: &Option<String>| value.clone().filter(|v| !v.trim().is_empty());
        LaunchRecord {
            simulate: self.simulate,
            dry_run: self.dry_run,
            responses: self
                .responses
                .as_ref()
                .map(|path| std::path::absolute(path).unwrap_or_else(|_| path.clone()).display().to_string()),
            model: non_empty(&self.model),
            provider: non_empty(&self.provider),
            small_model: non_empty(&self.small_model),
            sandbox: self.sandbox.map(|kind| kind.as_str().to_string()),
            context_files: Vec::new(),
            mcp_config: self
                .mcp_config
                .as_ref()
                .map(|path| std::path::absolute(path).unwrap_or_else(|_| path.clone()).display().to_string()),
            permissions: self.permissions.clone(),
            run_config: None,
        }
    }

    /// The run's reference files: the workflow's `context_files` (relative to its file) then
    /// `--context-file` (relative to the current directory).
    pub fn reference_files(&self, workflow: Option<&Workflow>) -> Result<Vec<ReferenceFile>, Refusal> {
        let files = match workflow {
            Some(workflow) => reference_files::of_workflow(workflow).map_err(Refusal::error)?,
            None => Vec::new(),
        };
        let given: Vec<ReferenceEntry> =
            self.context_files.iter().filter_map(|text| ReferenceEntry::parse(text)).collect();
        let cwd = std::env::current_dir().map_err(Refusal::error)?;
        let flags = reference_files::expand(&given, &cwd)
            .map_err(|error| format!("--context-file: {error}; the run did not start"))?;
        Ok(reference_files::merged(files, flags))
    }

    /// The flags as given, unresolved (for choosing the backend and for a resume's policy).
    fn given(&self) -> LaunchRecord {
        LaunchRecord {
            simulate: self.simulate,
            dry_run: self.dry_run,
            responses: self.responses.as_ref().map(|path| path.display().to_string()),
            model: self.model.clone(),
            provider: self.provider.clone(),
            small_model: self.small_model.clone(),
            sandbox: self.sandbox.map(|kind| kind.as_str().to_string()),
            context_files: Vec::new(),
            mcp_config: self.mcp_config.as_ref().map(|path| path.display().to_string()),
            permissions: self.permissions.clone(),
            run_config: None,
        }
    }

    /// Takes what the run started with for everything not given now (see
    /// [`fabro::run_setup::resumed_launch`]). Returns the flags taken, e.g. `--simulate --model m`,
    /// for a note.
    pub fn inherit(&mut self, started: &LaunchRecord, live: bool) -> Option<String> {
        let (launch, taken) = fabro::run_setup::resumed_launch(started, self.given(), live);
        self.simulate = launch.simulate;
        self.dry_run = launch.dry_run;
        self.responses = launch.responses.map(PathBuf::from);
        self.model = launch.model;
        self.provider = launch.provider;
        self.small_model = launch.small_model;
        self.mcp_config = launch.mcp_config.map(PathBuf::from);
        self.permissions = launch.permissions;
        self.sandbox =
            launch.sandbox.as_deref().and_then(|text| fabro::graph::settings::SandboxKind::parse(text).ok());
        (!taken.is_empty()).then(|| taken.join(" "))
    }

    /// The ceilings of the settings layers (`[run.limits]`), for those not given as flags.
    pub fn take_limits(&mut self, settings: &fabro::run_settings::RunSettings) {
        let value = |set: &Option<fabro::run_settings::Set<u64>>| set.as_ref().map(|set| set.value);
        let cost = |set: &Option<fabro::run_settings::Set<f64>>| set.as_ref().map(|set| set.value);
        self.max_tokens = self.max_tokens.or(value(&settings.max_tokens));
        self.max_cost = self.max_cost.or(cost(&settings.max_cost));
        self.max_stage_tokens = self.max_stage_tokens.or(value(&settings.max_stage_tokens));
        self.max_stage_cost = self.max_stage_cost.or(cost(&settings.max_stage_cost));
        self.max_output = self.max_output.or(value(&settings.max_output));
    }

    /// How the progress view behaves for these flags on this terminal.
    pub fn view_options(&self) -> ViewOptions {
        ViewOptions {
            quiet: self.quiet || self.json,
            asks_person: self.answers.is_none() && !self.auto_approve && person_can_answer(),
            stream_output: self.verbose > 0,
        }
    }

    /// `--max-tokens`, `--max-cost` and the stage ceilings.
    pub fn limits(&self) -> fabro::usage::UsageLimits {
        fabro::usage::UsageLimits {
            max_tokens: self.max_tokens,
            max_cost: self.max_cost,
            stage: fabro::usage::StageLimits {
                max_tokens: self.max_stage_tokens,
                max_cost: self.max_stage_cost,
            },
        }
    }
}

fn parse_sandbox(text: &str) -> Result<fabro::graph::settings::SandboxKind, String> {
    fabro::graph::settings::SandboxKind::parse(text)
}

fn parse_permissions(text: &str) -> Result<String, String> {
    match fabro::graph::settings::PermissionLevel::parse(text) {
        Some(level) => Ok(level.as_str().to_string()),
        None => Err(format!("`{text}` is not read-only, read-write or full")),
    }
}

/// Checks the sandbox settings of `workflow` and that the sandbox works on this machine, with
/// the settings layers' default sandbox (`user`) for stages that name none.
pub fn check_sandbox(
    launch: &LaunchArgs,
    workflow: &Workflow,
    user: Option<fabro::graph::settings::SandboxKind>,
    work_dir: &std::path::Path,
) -> Result<(), Refusal> {
    fabro::sandbox::check_workflow(workflow, launch.sandbox, user, work_dir)
        .map_err(|error| format!("{error}; the run did not start"))?;
    Ok(())
}

/// A refusal for `error`, with `outcome` (what did not happen) at the end of its first line: a
/// hook's `when` error has a caret line after it.
pub fn refusal(error: &dyn std::fmt::Display, outcome: &str) -> Refusal {
    let error = error.to_string();
    let (first, rest) = error.split_once('\n').map_or((error.as_str(), ""), |(first, rest)| (first, rest));
    let rest = if rest.is_empty() { String::new() } else { format!("\n{rest}") };
    Refusal::Message(format!("{first}; {outcome}{rest}"))
}

pub fn run(args: RunArgs) -> u8 {
    super::block_on(run_async(args))
}

async fn run_async(mut args: RunArgs) -> u8 {
    if let Some(url) = args.server.clone() {
        return start_on_server(&url, &args).await.unwrap_or_else(refuse);
    }
    start(&mut args).await.unwrap_or_else(refuse)
}

/// The options `fabro run --server` sends with the run (the others would be ignored by the
/// service, so they are refused).
const SENT_TO_SERVER: [&str; 10] = [
    "--server",
    "--detach",
    "--goal",
    "--goal-file",
    "--input",
    "--label",
    "--workdir",
    "--simulate",
    "--quiet",
    "--verbose",
];

/// `fabro run --server URL`: submits the workflow to the run service, then follows the run
/// there (or, with `--detach`, prints its id).
async fn start_on_server(url: &str, args: &RunArgs) -> Result<u8, Refusal> {
    for argument in std::env::args().skip(2) {
        let flag = argument.split('=').next().unwrap_or_default();
        if flag.starts_with("--") && !SENT_TO_SERVER.contains(&flag) {
            return Err(Refusal::Message(format!(
                "{flag} cannot go with --server (the service runs with its own settings); \
                 with --server only {} apply",
                SENT_TO_SERVER[1..].join(", ")
            )));
        }
    }
    let client = super::remote::client(url).map_err(|_| Refusal::Shown)?;
    let mut body = serde_json::Map::new();
    if args.workflow.extension().is_some_and(|extension| extension == "toml") {
        return Err(Refusal::Message(
            "--server takes a workflow file (.dot), not a run configuration; the run did not start".into(),
        ));
    }
    match std::fs::read_to_string(&args.workflow) {
        Ok(source) => body.insert("source".into(), source.into()),
        // Not a file here: a workflow under the service's --workflows directory.
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            body.insert("workflow".into(), args.workflow.display().to_string().into())
        }
        Err(error) => {
            return Err(Refusal::Message(format!("cannot read {}: {error}", args.workflow.display())));
        }
    };
    if let Some(goal) = goal_of(args)? {
        body.insert("goal".into(), goal.into());
    }
    let mut inputs = serde_json::Map::new();
    for text in &args.inputs {
        let (key, value) = text
            .split_once('=')
            .ok_or_else(|| format!("--input `{text}` is not KEY=VALUE; the run did not start"))?;
        let value =
            serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.to_string()));
        inputs.insert(key.to_string(), value);
    }
    body.insert("inputs".into(), inputs.into());
    let mut labels = serde_json::Map::new();
    for text in &args.labels {
        let (key, value) = fabro::run_dir::parse_label(text)
            .map_err(|message| Refusal::Message(format!("--label: {message}; the run did not start")))?;
        labels.insert(key, value.into());
    }
    body.insert("labels".into(), labels.into());
    if let Some(workdir) = &args.workdir {
        body.insert("workdir".into(), workdir.display().to_string().into());
    }
    body.insert("simulate".into(), args.launch.simulate.into());
    let id = client.submit(&serde_json::Value::Object(body)).await.map_err(|error| {
        super::remote::failed(&error);
        Refusal::Shown
    })?;
    println!("{id}");
    if args.detach {
        eprintln!(
            "submitted to the run service; follow it with `fabro attach --server URL {id}`, wait for \
             it with `fabro wait --server URL {id}`"
        );
        return Ok(exit::SUCCESS);
    }
    Ok(super::attach::detachable(super::remote::attach(&client, &id, false)).await)
}

/// Why `fabro run` or `fabro resume` did not start a run. Every refusal ends in [`refuse`].
pub enum Refusal {
    /// Already shown (diagnostics, a load error).
    Shown,
    /// Shown as `error: <message>`.
    Message(String),
}

impl Refusal {
    pub fn error(error: impl std::fmt::Display) -> Refusal {
        Refusal::Message(error.to_string())
    }
}

impl From<String> for Refusal {
    fn from(message: String) -> Refusal {
        Refusal::Message(message)
    }
}

impl From<fabro::run_setup::SetupError> for Refusal {
    fn from(error: fabro::run_setup::SetupError) -> Refusal {
        Refusal::error(error)
    }
}

/// Shows why the run did not start; the exit code says the same.
pub fn refuse(refusal: Refusal) -> u8 {
    if let Refusal::Message(message) = refusal {
        eprintln!("error: {message}");
    }
    exit::INVALID
}

async fn start(args: &mut RunArgs) -> Result<u8, Refusal> {
    let config_files = ConfigFiles::from_disk();
    let not_started = |error: &dyn std::fmt::Display| refusal(error, "the run did not start");
    let target = RunTarget::locate(&args.workflow, args.workdir.as_deref(), &config_files)
        .map_err(|message| not_started(&message))?;
    let settings = &target.settings(&config_files).map_err(|error| not_started(&error))?;
    let inputs = inputs_of(settings, args.inputs_file.as_deref(), &args.inputs)
        .map_err(|error| not_started(&error))?;
    let mut loader = Loader::new().with_inputs(inputs);
    let goal = match goal_of(args)? {
        Some(goal) => Some(goal),
        None => settings.goal_text().map_err(|error| not_started(&error))?,
    };
    if let Some(goal) = goal {
        loader = loader.with_goal(goal);
    }
    let mut labels: std::collections::BTreeMap<String, String> =
        settings.labels.iter().map(|(key, set)| (key.clone(), set.value.clone())).collect();
    for text in &args.labels {
        let (key, value) = fabro::run_dir::parse_label(text)
            .map_err(|message| Refusal::Message(format!("--label: {message}; the run did not start")))?;
        labels.insert(key, value);
    }
    args.launch.take_limits(settings);
    let valid = report_diagnostics(loader.load_file(&target.workflow), &target.workflow, args.launch.quiet)?;
    if args.launch.deny_warnings && !valid.warnings.is_empty() {
        if args.launch.quiet {
            eprint!("{}", render_diagnostics(&valid.warnings, valid.workflow.source()));
        }
        return Err(Refusal::Message(format!(
            "--deny-warnings: {} has {} warning(s); the run did not start",
            target.workflow.display(),
            valid.warnings.len()
        )));
    }
    let context = parse_sets(&args.set)?;
    check_sandbox(
        &args.launch,
        &valid.workflow,
        settings.sandbox.as_ref().map(|set| set.value),
        &target.work_dir,
    )?;
    let engine = engine_for(&args.launch, &valid, &config_files, settings)?;
    check_providers(&engine, &valid.workflow, &args.launch, "the run did not start").await?;
    if args.detach {
        return detach(args.run_dir.as_deref(), valid.workflow.name());
    }
    let options = RunOptions {
        run_dir: args.run_dir.clone(),
        run_id: args.run_id.clone(),
        work_dir: target.work_dir.clone(),
        dry_run: args.launch.dry_run,
        context,
        checkpoint_sync: args.launch.checkpoint_sync.sync_mode(),
        limits: args.launch.limits(),
        worktree: args.worktree || settings.worktree.as_ref().is_some_and(|set| set.value),
        keep_worktrees: args.launch.keep_worktrees,
        parent: None,
        launch: LaunchRecord {
            context_files: args.launch.reference_files(Some(&valid.workflow))?,
            run_config: target.run_config.as_ref().map(|path| path.display().to_string()),
            ..args.launch.record()
        },
        max_output: args.launch.max_output,
        sandbox: args.launch.sandbox,
        user_sandbox: settings.sandbox.as_ref().map(|set| set.value),
        hooks: settings.hooks.clone(),
        config_files,
        labels,
    };
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let view = ProgressView::new(args.launch.view_options());
    let report = engine.run(&valid, &options, move |event| view.show(event), cancel).await;
    conclude(report, &args.launch, valid.workflow.name())
}

/// `--detach`, once the workflow and its setup were checked: submits the run in `run_dir` (else
/// `.fabro/runs/<id>`) and starts this same command for it in a process of its own. Prints the
/// run id on stdout, what to do next on stderr.
fn detach(run_dir: Option<&std::path::Path>, workflow: &str) -> Result<u8, Refusal> {
    let not_started = |error: &dyn std::fmt::Display| refusal(error, "the run did not start");
    let run_id = fabro::run_launcher::new_run_id();
    let root = match run_dir {
        Some(dir) => dir.to_path_buf(),
        None => {
            fabro::fabro_dir::keep_out_of_git(std::path::Path::new(".fabro"));
            std::path::Path::new(fabro::run_dir::lookup::DEFAULT_RUNS_DIR).join(&run_id)
        }
    };
    let root = std::path::absolute(&root).map_err(|error| not_started(&error))?;
    let mut arguments = Vec::new();
    for argument in std::env::args_os().skip(1) {
        let argument = argument.into_string().map_err(|bad| {
            Refusal::Message(format!("--detach: the argument {bad:?} is not UTF-8; the run did not start"))
        })?;
        if argument != "--detach" {
            arguments.push(argument);
        }
    }
    if run_dir.is_none() {
        arguments.extend(["--run-dir".to_string(), root.display().to_string()]);
    }
    arguments.extend(["--run-id".to_string(), run_id.clone()]);
    let cwd = std::env::current_dir().map_err(|error| not_started(&error))?;
    let exe = std::env::current_exe().map_err(|error| not_started(&error))?;
    let state = fabro::run_dir::submission::SubmissionState::Queued;
    let run = fabro::run_launcher::RunToSubmit {
        run_id: &run_id,
        workflow,
        args: arguments,
        cwd: &cwd,
        by: "cli",
        state,
    };
    fabro::run_launcher::submit(&root, run).map_err(|error| not_started(&error))?;
    // The run outlives this process, which leaves reaping it to init.
    let _child = fabro::run_launcher::launch(&root, &exe).map_err(|error| not_started(&error))?;
    println!("{run_id}");
    let shown = relative_to_cwd(&root);
    eprintln!(
        "started in the background in {shown} (its output: {shown}/{}); follow it with `fabro attach {run_id}`, \
         wait for it with `fabro wait {run_id}`, stop it with `fabro cancel {run_id}`",
        fabro::run_dir::layout::OUTPUT_LOG
    );
    Ok(exit::SUCCESS)
}

fn relative_to_cwd(path: &std::path::Path) -> String {
    match std::env::current_dir() {
        Ok(cwd) => fabro::report::relative_display(path, &cwd),
        Err(_) => path.display().to_string(),
    }
}

/// What `fabro run`, `fabro validate` and `fabro settings` are pointed at: a workflow, or a run
/// configuration naming one; and where the run works.
pub struct RunTarget {
    pub workflow: PathBuf,
    /// The run configuration, as an absolute path.
    pub run_config: Option<PathBuf>,
    pub work_dir: PathBuf,
}

impl RunTarget {
    /// `given` (a workflow or a run configuration), working in `--workdir` (`workdir`), else the
    /// run configuration's `working_dir`, else the current directory.
    pub fn locate(
        given: &std::path::Path,
        workdir: Option<&std::path::Path>,
        files: &ConfigFiles,
    ) -> Result<RunTarget, String> {
        let (workflow, run_config, configured_dir) = if fabro::run_settings::is_run_config(given) {
            let config =
                fabro::run_settings::read_run_config(given, files).map_err(|error| error.to_string())?;
            let path = std::path::absolute(given).unwrap_or_else(|_| given.to_path_buf());
            let graph = config.graph.map(|set| set.value).unwrap_or_default();
            (graph, Some(path), config.working_dir)
        } else {
            (given.to_path_buf(), None, None)
        };
        let work_dir = match (workdir, &configured_dir) {
            (Some(path), _) => work_dir(Some(path), "--workdir", "leave --workdir out to work here")?,
            (None, Some(set)) => work_dir(
                Some(&set.value),
                &format!("working_dir ({})", set.origin),
                "remove working_dir to work in the current directory",
            )?,
            (None, None) => work_dir(None, "", "")?,
        };
        Ok(RunTarget { workflow, run_config, work_dir })
    }

    /// The settings of the run's layers.
    pub fn settings(
        &self,
        files: &ConfigFiles,
    ) -> Result<fabro::run_settings::RunSettings, fabro::run_settings::SettingsError> {
        let sources = fabro::run_settings::Sources::for_run(
            &self.work_dir,
            Some(&self.workflow),
            self.run_config.as_deref(),
        );
        fabro::run_settings::load(&sources, files)
    }
}

/// The run's inputs: the settings' `[run.inputs]` (replaced whole by `--inputs FILE`), then each
/// `--input key=value`.
pub fn inputs_of(
    settings: &fabro::run_settings::RunSettings,
    file: Option<&std::path::Path>,
    assignments: &[String],
) -> Result<fabro::graph::inputs::Inputs, fabro::graph::inputs::InputError> {
    let given = fabro::graph::inputs::gather(file, assignments)?;
    let mut inputs = match (file, &settings.inputs) {
        (None, Some(set)) => set.value.clone(),
        _ => Default::default(),
    };
    inputs.extend(given);
    Ok(inputs)
}

/// The goal `--goal` or `--goal-file` gives, if either does.
fn goal_of(args: &RunArgs) -> Result<Option<String>, Refusal> {
    let Some(path) = &args.goal_file else { return Ok(args.goal.clone()) };
    let text =
        fabro::regular_file::read_to_string(path, fabro::regular_file::FileKind::Input).map_err(|error| {
            Refusal::Message(format!(
                "--goal-file: cannot read `{}`: {error}; the run did not start",
                path.display()
            ))
        })?;
    if text.trim().is_empty() {
        return Err(Refusal::Message(format!(
            "--goal-file: `{}` is empty; write the goal in it, or leave the workflow's goal with no flag",
            path.display()
        )));
    }
    Ok(Some(text.trim().to_string()))
}

/// Refuses a run whose LLM stages' provider cannot be reached, after waiting for it up to its
/// retry window (a server started just before the run has that long to come up). `--simulate`,
/// `--dry-run` and `--responses` call no provider, so there is nothing to check. `outcome` ends
/// the message: what did not happen.
pub async fn check_providers(
    engine: &fabro::engine::Engine,
    workflow: &Workflow,
    launch: &LaunchArgs,
    outcome: &str,
) -> Result<(), Refusal> {
    let quiet = launch.quiet;
    let waiting = move |note: &str| {
        if !quiet {
            eprintln!("note: {note}");
        }
    };
    engine.check_providers(workflow, &waiting).await.map_err(|unreachable| {
        Refusal::Message(format!(
            "{unreachable}; start it (or correct its base_url), or run with --simulate or --dry-run; {outcome}"
        ))
    })
}

/// The work directory as an absolute path (so a resume from elsewhere works in the same place):
/// `given` (named `what` in errors, which suggest `instead` for a missing one), which must be an
/// existing directory, else the current directory.
fn work_dir(given: Option<&std::path::Path>, what: &str, instead: &str) -> Result<PathBuf, String> {
    let Some(path) = given else {
        return std::env::current_dir()
            .map_err(|error| format!("cannot read the current directory: {error}"));
    };
    match std::fs::metadata(path) {
        Ok(meta) if meta.is_dir() => std::path::absolute(path)
            .map_err(|error| format!("cannot resolve {what} {}: {error}", path.display())),
        Ok(_) => Err(format!("{what} {} is not a directory", path.display())),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            Err(format!("{what} {} does not exist (create it first, or {instead})", path.display()))
        }
        Err(error) => Err(format!("cannot read {what} {}: {error}", path.display())),
    }
}

/// Prints the diagnostics of a loaded workflow (errors only when `quiet`) and returns it when it
/// has no errors.
pub fn report_diagnostics(
    loaded: Result<fabro::CheckedWorkflow, fabro::LoadError>,
    path: &std::path::Path,
    quiet: bool,
) -> Result<fabro::ValidWorkflow, Refusal> {
    let checked = loaded.map_err(|error| {
        eprint!("{}", render_load_error(&error));
        Refusal::Shown
    })?;
    let source = checked.workflow.source().clone();
    let shown = checked.diagnostics.iter().filter(|d| d.severity == Severity::Error || !quiet);
    eprint!("{}", render_diagnostics(shown, &source));
    checked.into_valid().map_err(|invalid| {
        let errors = invalid.diagnostics.iter().filter(|d| d.is_error()).count();
        Refusal::Message(format!(
            "{} has {errors} validation error(s); the run did not start",
            path.display()
        ))
    })
}

/// The engine with the built-in handlers, the backend and the interviewer the options ask for;
/// refuses workflows with stages this version cannot run.
pub fn engine_for(
    launch: &LaunchArgs,
    valid: &fabro::ValidWorkflow,
    files: &ConfigFiles,
    settings: &fabro::run_settings::RunSettings,
) -> Result<Engine, Refusal> {
    for (flag, cost) in [("--max-cost", launch.max_cost), ("--max-stage-cost", launch.max_stage_cost)] {
        if let Some(cost) = cost.filter(|cost| !cost.is_finite() || *cost < 0.0) {
            return Err(Refusal::Message(format!("{flag} {cost} is not a cost in US dollars (0 or more)")));
        }
    }
    let console = person_can_answer().then(|| Arc::new(Console::new()));
    if launch.step && console.is_none() {
        return Err(Refusal::Message(
            "--step asks after every stage on a terminal, but stdin and stderr are not both a terminal \
             (or CI is set); run without --step"
                .to_string(),
        ));
    }
    let mut builder = EngineBuilder::new(BackendChoice::of(&launch.given()))
        .config_files(files.clone())
        .settings(settings.clone());
    if let Some(path) = launch.given().mcp_config {
        builder = builder.mcp_config(path);
    }
    if let Some(path) = &launch.answers {
        builder = builder.answers_file(path);
    }
    if launch.auto_approve {
        builder = builder.auto_approve();
    }
    if let Some(console) = console {
        if launch.step {
            builder = builder.step_reviewer(Arc::new(super::step::TerminalStepper(Arc::clone(&console))));
        }
        builder = builder.person(console);
    }
    Ok(builder.build(valid)?)
}

/// Prints the outcome, writes the CI reports (`--junit`, `$GITHUB_STEP_SUMMARY`) and turns the
/// outcome into the exit code. A report that cannot be written is a warning, never a new exit code.
pub fn conclude(
    report: Result<fabro::engine::RunReport, fabro::engine::StartError>,
    launch: &LaunchArgs,
    workflow_name: &str,
) -> Result<u8, Refusal> {
    end_containers(launch.preserve_sandbox);
    let report = report.map_err(Refusal::error)?;
    let result = &report.result;
    if launch.json {
        match serde_json::to_string_pretty(result) {
            Ok(text) => println!("{text}"),
            Err(error) => eprintln!("error: cannot print result.json: {error}"),
        }
    }
    let chart = fabro::report::context_chart::write_for_run(std::path::Path::new(&result.run_dir));
    write_reports(result, report.pause.as_ref().map(|pause| pause.kind), launch, workflow_name);
    if launch.retro {
        let root = std::path::Path::new(&result.run_dir);
        let written = tokio::task::block_in_place(|| {
            tokio::runtime::Handle::current().block_on(super::retro::write(root, true))
        });
        match written {
            Ok(()) => eprintln!("retrospective: {}", root.join(layout::RETRO_MD).display()),
            Err(message) => eprintln!("warning: no retrospective: {message}"),
        }
    }
    eprint!("{}", summary(result));
    if let Some(chart) = chart {
        eprintln!("context usage: {}", chart.display());
    }
    if let Some(hint) = &report.worktree_hint {
        eprintln!("{hint}");
    }
    if let Some(pause) = &report.pause {
        eprintln!("paused: {}", pause.reason);
        let dir = &result.run_dir;
        match pause.kind {
            PauseKind::Step => eprintln!("resume with: fabro resume {dir} [--step]"),
            PauseKind::Ceiling => {
                eprintln!("resume with: fabro resume {dir} --max-tokens N / --max-cost USD (a higher limit)")
            }
            PauseKind::StageCeiling(bound) => eprintln!(
                "resume with: fabro resume {dir} --{} {} (higher than the stage's bound)",
                bound.as_str().replace('_', "-"),
                bound.unit()
            ),
            PauseKind::Answer => {
                eprintln!("resume with: fabro resume {dir} --answers FILE (or --auto-approve)")
            }
            PauseKind::Storage => eprintln!("free some space, then resume with: fabro resume {dir}"),
            PauseKind::Stall => eprintln!(
                "look at the stage's logs (fabro logs {dir} --output) for why it hung; resume with: fabro resume {dir} \
                 (it runs the stage again), or raise stall_timeout on the graph"
            ),
            PauseKind::Provider => {
                eprintln!(
                    "start the provider (or wait until it is back), then resume with: fabro resume {dir}"
                )
            }
            PauseKind::Interrupt => eprintln!("resume with: fabro resume {dir}"),
        }
    }
    Ok(match result.status {
        RunStatus::Succeeded => exit::SUCCESS,
        RunStatus::Paused => exit::PAUSED,
        RunStatus::Interrupted => {
            eprintln!("interrupted; resume with: fabro resume {}", result.run_dir);
            exit::INTERRUPTED
        }
        RunStatus::Failed | RunStatus::Running | RunStatus::Restarted => exit::FAILED,
    })
}

/// `--junit FILE` (replaced atomically) and the Markdown summary appended to the file named by
/// `GITHUB_STEP_SUMMARY`. Problems are warnings on stderr.
fn write_reports(result: &RunResult, pause: Option<PauseKind>, launch: &LaunchArgs, workflow_name: &str) {
    let run_dir = std::path::Path::new(&result.run_dir);
    if let Some(path) = &launch.output {
        let written = super::report::render(run_dir, super::report::ReportFormat::of(path))
            .and_then(|text| super::report::write(path, &text));
        match written {
            Ok(()) => eprintln!("report: {}", path.display()),
            Err(message) => eprintln!("warning: {message}"),
        }
    }
    if let Some(path) = &launch.junit {
        let xml = fabro::report::junit::render(result, run_dir, workflow_name);
        if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
            // A missing directory shows up as the write error below.
            let _ = std::fs::create_dir_all(parent);
        }
        if let Err(error) = fabro::atomic_file::write_atomic(path, xml.as_bytes()) {
            eprintln!("warning: cannot write the JUnit report {}: {error}", path.display());
        }
    }
    let Some(summary_path) = std::env::var_os("GITHUB_STEP_SUMMARY").filter(|p| !p.is_empty()) else {
        return;
    };
    let summary_path = PathBuf::from(summary_path);
    let shown = match std::env::current_dir() {
        Ok(cwd) => fabro::report::relative_display(run_dir, &cwd),
        Err(_) => result.run_dir.clone(),
    };
    let mut markdown = fabro::report::github_step_summary::render(result, pause, workflow_name, &shown);
    // Earlier steps may have written to the same file: keep the heading on a line of its own.
    if std::fs::metadata(&summary_path).is_ok_and(|meta| meta.len() > 0) {
        markdown.insert(0, '\n');
    }
    let appended = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&summary_path)
        .and_then(|mut file| std::io::Write::write_all(&mut file, markdown.as_bytes()));
    if let Err(error) = appended {
        eprintln!("warning: cannot append the step summary to {}: {error}", summary_path.display());
    }
}

/// Someone sits at this terminal to answer gates (and `CI` is not set).
fn person_can_answer() -> bool {
    Console::is_available() && std::env::var_os("CI").is_none()
}

/// `--set key=value`: JSON values stay JSON, anything else is text.
fn parse_sets(sets: &[String]) -> Result<Vec<(String, serde_json::Value)>, String> {
    sets.iter()
        .map(|set| {
            let (key, value) =
                set.split_once('=').ok_or_else(|| format!("--set `{set}` is not KEY=VALUE"))?;
            let key = key.trim();
            if key.is_empty() {
                return Err(format!("--set `{set}` has an empty key"));
            }
            let value =
                serde_json::from_str(value).unwrap_or_else(|_| serde_json::Value::String(value.to_string()));
            Ok((key.to_string(), value))
        })
        .collect()
}

/// First SIGINT/SIGTERM: cancel the run (the current stage stops, the checkpoint is saved).
/// Second SIGINT: exit at once.
pub fn watch_signals(cancel: CancellationToken) {
    use tokio::signal::unix::{signal, SignalKind};
    // Listening starts here, not when the task first runs: a SIGTERM right after the run's
    // manifest is written (`fabro cancel` of a run that just started) is an interruption too.
    let mut terminate = signal(SignalKind::terminate()).ok();
    let mut interrupt = signal(SignalKind::interrupt()).ok();
    tokio::spawn(async move {
        tokio::select! {
            _ = received(interrupt.as_mut()) => {}
            _ = received(terminate.as_mut()) => {}
        }
        eprintln!("\nstopping: finishing the checkpoint (press Ctrl-C again to exit at once)");
        cancel.cancel();
        if interrupt.is_some() {
            received(interrupt.as_mut()).await;
            // Exiting skips destructors: stop the stages' processes first.
            fabro::process_group::kill_all();
            tokio::task::block_in_place(|| end_containers(false));
            std::process::exit(i32::from(exit::INTERRUPTED));
        }
    });
}

/// Resolves when `stream` delivers its signal; never when there is none.
async fn received(stream: Option<&mut tokio::signal::unix::Signal>) {
    match stream {
        Some(stream) => {
            stream.recv().await;
        }
        None => std::future::pending::<()>().await,
    }
}

/// Removes the containers the run's stages ran in (sandbox=podman or docker), or with
/// `--preserve-sandbox` names them.
fn end_containers(preserve: bool) {
    use fabro::sandbox::container;
    if preserve {
        for kept in container::session_containers() {
            eprintln!(
                "sandbox kept: container {} (image {}); remove it with `podman rm -f {0}` (or docker)",
                kept.id, kept.image
            );
        }
    } else {
        container::remove_session_containers();
    }
}

/// Removes the containers a killed fabro left for the run in `run_dir`, before the run goes on.
pub fn remove_left_containers(
    launch: &LaunchArgs,
    workflow: &Workflow,
    user: Option<fabro::graph::settings::SandboxKind>,
    run_dir: &std::path::Path,
) {
    for kind in fabro::sandbox::container_kinds(workflow, launch.sandbox, user) {
        for removed in fabro::sandbox::container::remove_run_containers(kind, run_dir) {
            eprintln!(
                "removed container {} (image {}) that the interrupted run left running",
                removed.id, removed.image
            );
        }
    }
}

fn summary(result: &RunResult) -> String {
    let mut out = String::from("\nstage                 visit  status            time\n");
    for stage in &result.stages {
        out.push_str(&format!(
            "{:<22}{:>5}  {:<16}{:>6}\n",
            stage.node_id,
            stage.visit,
            stage.status.as_str(),
            seconds(stage.duration_ms)
        ));
    }
    out.push_str(&format!(
        "\nrun {} in {}: {}\n",
        result.status.as_str(),
        seconds(result.duration_ms),
        result.run_dir
    ));
    if let Some(usage) = &result.usage {
        let cost = usage.cost_usd.map_or_else(String::new, |cost| format!(" · estimated cost ${cost:.4}"));
        out.push_str(&format!("tokens: {} in / {} out{cost}\n", usage.input_tokens, usage.output_tokens));
    }
    if let Some(reason) = &result.failure_reason {
        out.push_str(&format!("reason: {reason}\n"));
    }
    if let Some(walk) = &result.dry_run {
        out.push_str(&dry_run_walk(walk));
    }
    out
}

/// A dry run's assumptions (where a real run decides), then the edges it never took.
fn dry_run_walk(walk: &fabro::run_dir::DryRunWalk) -> String {
    let mut out = String::new();
    if !walk.assumed.is_empty() {
        out.push_str(&format!("\nassumed by the dry run ({}):\n", walk.assumed.len()));
        for edge in &walk.assumed {
            out.push_str(&format!("  {} -> {}: {}\n", edge.from, edge.to, edge.why));
        }
    }
    if walk.never_taken.is_empty() {
        out.push_str("\nevery edge was taken\n");
    } else {
        out.push_str(&format!("\nedges never taken ({}):\n", walk.never_taken.len()));
        for edge in &walk.never_taken {
            out.push_str(&format!("  {} -> {}\n", edge.from, edge.to));
        }
    }
    out
}
