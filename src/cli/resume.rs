//! `fabro resume RUN_DIR [...]`: continue a paused, interrupted or crashed run from its last
//! checkpoint, with the workflow source stored in the run directory.

use std::path::PathBuf;

use fabro::engine::RunOptions;
use fabro::run_dir::SavedRun;
use fabro::source::SourceFile;
use fabro::Loader;
use tokio_util::sync::CancellationToken;

use super::exit;
use super::progress::ProgressView;
use super::render::render_load_error;
use super::run::{conclude, engine_for, report_diagnostics, watch_signals, LaunchArgs};

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
    let run_dir = match args.run.resolve() {
        Ok(dir) => dir,
        Err(error) => {
            eprintln!("error: {error}");
            return exit::INVALID;
        }
    };
    let mut saved = match SavedRun::open(&run_dir) {
        Ok(saved) => saved,
        Err(error) => {
            eprintln!("error: {error}");
            return exit::INVALID;
        }
    };
    if let Some(taken) = args.launch.inherit(&saved.manifest.launch, args.live) {
        if !args.launch.quiet && !args.launch.json {
            eprintln!("note: continuing with {taken}, as the run started");
        }
    }
    let (source_path, source_text) = match &args.workflow {
        Some(path) => match fabro::regular_file::read_to_string(path, fabro::regular_file::FileKind::Input) {
            Ok(text) => (path.clone(), text),
            Err(error) => {
                eprintln!("error: cannot read `{}`: {error}", path.display());
                return exit::INVALID;
            }
        },
        None => {
            // The stored copy is what ran; say so when the original file has changed since.
            let path = PathBuf::from(&saved.manifest.source_path);
            if fabro::regular_file::read_to_string(&path, fabro::regular_file::FileKind::Input)
                .is_ok_and(|current| current != saved.workflow_source)
            {
                eprintln!(
                    "note: {} changed since the run started; continuing with the copy stored in the run directory \
                     (use --workflow to continue with the new file)",
                    path.display()
                );
            }
            (path, saved.workflow_source.clone())
        }
    };
    let loaded = Loader::new().load_source(SourceFile::new(&source_path, source_text.clone()));
    let checked = match loaded {
        Ok(checked) => checked,
        Err(error) => {
            eprint!("{}", render_load_error(&error));
            return exit::INVALID;
        }
    };
    let Some(valid) = report_diagnostics(checked, &source_path, true) else {
        return exit::INVALID;
    };
    if args.workflow.is_some() {
        let missing = saved.missing_nodes(&valid.workflow);
        if !missing.is_empty() {
            eprintln!(
                "error: {} lacks node(s) {} that the checkpoint needs (renamed or removed); nothing was changed. \
                 Resume without --workflow to continue with the stored copy",
                source_path.display(),
                missing.iter().map(|id| format!("`{id}`")).collect::<Vec<_>>().join(", ")
            );
            return exit::INVALID;
        }
        if let Err(error) = saved.adopt_workflow(&source_path, &source_text) {
            eprintln!("error: {error}");
            return exit::INVALID;
        }
    }
    let user_sandbox = match super::run::check_sandbox(&args.launch, &valid.workflow) {
        Ok(user) => user,
        Err(message) => {
            eprintln!("error: {message}");
            return exit::INVALID;
        }
    };
    let engine = match engine_for(&args.launch, &valid.workflow) {
        Ok(engine) => engine,
        Err(message) => {
            eprintln!("error: {message}");
            return exit::INVALID;
        }
    };
    let options = RunOptions {
        run_dir: Some(run_dir),
        work_dir: PathBuf::from(&saved.manifest.work_dir),
        dry_run: args.launch.dry_run,
        context: Vec::new(),
        checkpoint_sync: args.launch.checkpoint_sync.sync_mode(),
        limits: args.launch.limits(),
        // The run's manifest says whether it has a worktree.
        worktree: false,
        keep_worktrees: args.launch.keep_worktrees,
        parent: None,
        launch: args.launch.record(),
        max_output: args.launch.max_output,
        sandbox: args.launch.sandbox,
        user_sandbox,
    };
    let cancel = CancellationToken::new();
    watch_signals(cancel.clone());
    let view = ProgressView::new(args.launch.view_options());
    let report = engine.resume(&valid, saved, &options, move |event| view.show(event), cancel).await;
    conclude(report, &args.launch, valid.workflow.name())
}
