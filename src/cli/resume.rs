//! `fabro resume RUN_DIR [...]`: continue a paused, interrupted or crashed run from its last
//! checkpoint, with the workflow source stored in the run directory.

use std::path::{Path, PathBuf};

use fabro::config_files::ConfigFiles;
use fabro::engine::RunOptions;
use fabro::run_dir::SavedRun;
use fabro::run_settings::Sources;
use fabro::run_setup::ResumeSource;
use fabro::source::SourceFile;
use fabro::Loader;
use tokio_util::sync::CancellationToken;

use super::progress::ProgressView;
use super::run::{conclude, engine_for, refuse, report_diagnostics, watch_signals, LaunchArgs, Refusal};

#[derive(clap::Args)]
pub struct ResumeArgs {
    #[command(flatten)]
    run: super::RunRef,
    /// Continue with this workflow file instead of the copy stored in the run directory; refused
    /// when it lacks a node the checkpoint needs. The stored copy is kept as workflow.<n>.dot.
    #[arg(long, value_name = "FILE")]
    workflow: Option<PathBuf>,
    /// Use the real LLM providers even though the run started with --simulate, --responses or
    /// --dry-run (which a resume otherwise keeps).
    #[arg(long, conflicts_with_all = ["simulate", "responses", "dry_run"])]
    live: bool,
    #[command(flatten)]
    pub launch: LaunchArgs,
}

pub fn resume(args: ResumeArgs) -> u8 {
    super::block_on(resume_async(args))
}

async fn resume_async(mut args: ResumeArgs) -> u8 {
    continue_run(&mut args).await.unwrap_or_else(refuse)
}

async fn continue_run(args: &mut ResumeArgs) -> Result<u8, Refusal> {
    let run_dir = args.run.resolve().map_err(Refusal::error)?;
    let mut saved = SavedRun::open(&run_dir).map_err(Refusal::error)?;
    if let Some(taken) = args.launch.inherit(&saved.manifest.launch, args.live) {
        if !args.launch.quiet && !args.launch.json {
            eprintln!("note: continuing with {taken}, as the run started");
        }
    }
    let source = ResumeSource::choose(&saved, args.workflow.as_deref())?;
    if source.original_changed {
        eprintln!(
            "note: {} changed since the run started; continuing with the copy stored in the run directory \
             (use --workflow to continue with the new file)",
            source.path.display()
        );
    }
    let loaded = Loader::new()
        .with_inputs(saved.manifest.inputs.clone())
        .load_source(SourceFile::new(&source.path, source.text.clone()));
    let valid = report_diagnostics(loaded, &source.path, true)?;
    source.adopt(&mut saved, &valid.workflow)?;
    // Configuration that can run code is what the run started with: a confined stage may have
    // rewritten the files since.
    let config_files =
        ConfigFiles::saved_at(&fabro::run_dir::layout::config_files(&run_dir)).map_err(Refusal::error)?;
    let workflow_path = args.workflow.clone().unwrap_or_else(|| PathBuf::from(&saved.manifest.source_path));
    let work_dir = PathBuf::from(&saved.manifest.work_dir);
    let run_config = saved.manifest.launch.run_config.clone();
    let sources = Sources::for_run(&work_dir, Some(&workflow_path), run_config.as_deref().map(Path::new));
    let settings = fabro::run_settings::load(&sources, &config_files)
        .map_err(|error| super::run::refusal(&error, "the run was left as it was"))?;
    args.launch.take_limits(&settings);
    let user_sandbox = settings.sandbox.as_ref().map(|set| set.value);
    super::run::check_sandbox(&args.launch, &valid.workflow, user_sandbox, &work_dir)?;
    super::run::remove_left_containers(&args.launch, &valid.workflow, user_sandbox, &run_dir);
    let engine = engine_for(&args.launch, &valid, &config_files, &settings)?;
    super::run::check_providers(&engine, &valid.workflow, &args.launch, "the run was left as it was").await?;
    for changed in config_files.changed() {
        eprintln!(
            "warning: {} changed since the run started; continuing with the configuration the run started \
             with (hooks, MCP servers, providers): start a new run to use the new one",
            changed.display()
        );
    }
    let options = RunOptions {
        run_dir: Some(run_dir),
        run_id: None,
        work_dir,
        dry_run: args.launch.dry_run,
        context: Vec::new(),
        checkpoint_sync: args.launch.checkpoint_sync.sync_mode(),
        limits: args.launch.limits(),
        // The run's manifest says whether it has a worktree.
        worktree: false,
        keep_worktrees: args.launch.keep_worktrees,
        parent: None,
        // The run's reference files stay as they were resolved; --context-file adds to them.
        launch: fabro::run_dir::LaunchRecord {
            context_files: fabro::agent::context::reference_files::merged(
                saved.manifest.launch.context_files.clone(),
                args.launch.reference_files(None)?,
            ),
            run_config,
            ..args.launch.record()
        },
        max_output: args.launch.max_output,
        sandbox: args.launch.sandbox,
        user_sandbox,
        hooks: settings.hooks.clone(),
        config_files,
        labels: saved.manifest.labels.clone(),
    };
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let view = ProgressView::new(args.launch.view_options());
    let report = engine.resume(&valid, saved, &options, move |event| view.show(event), cancel).await;
    conclude(report, &args.launch, valid.workflow.name())
}
