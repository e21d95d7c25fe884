//! Command-line parsing and dispatch. Nothing here that a library user would need.

// Output that cannot be written (a closed pipe: `fabro run wf.dot 2>&1 | head -2`) is dropped:
// it must never stop or crash a run. These shadow the std macros in every subcommand below.
macro_rules! eprintln {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr());
    }};
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

macro_rules! eprint {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stderr(), $($arg)*);
    }};
}

macro_rules! println {
    () => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout());
    }};
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stdout(), $($arg)*);
    }};
}

macro_rules! print {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = write!(std::io::stdout(), $($arg)*);
    }};
}

mod attach;
mod cancel;
mod completions;
mod fork;
mod graph;
mod inspect;
mod logs;
mod lsp;
mod memory;
mod new;
mod progress;
mod remote;
mod render;
mod report;
mod resume;
mod retro;
mod rewind;
mod run;
mod runs;
mod serve;
mod settings;
mod step;
mod validate;
mod wait;

use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

/// Exit codes shared by every subcommand.
pub mod exit {
    pub const SUCCESS: u8 = 0;
    pub const FAILED: u8 = 1;
    pub const INVALID: u8 = 2;
    pub const PAUSED: u8 = 3;
    pub const INTERRUPTED: u8 = 130;
}

/// A run named on the command line: its directory, its id or a unique prefix of the id (as
/// `fabro runs` prints it), or `--last`.
#[derive(clap::Args)]
pub struct RunRef {
    /// The run: its directory, its run id, or a unique prefix of the id (ids are looked up in
    /// .fabro/runs).
    #[arg(value_name = "RUN", required_unless_present = "last")]
    pub run: Option<String>,
    /// The newest run in .fabro/runs.
    #[arg(long, conflicts_with = "run")]
    pub last: bool,
}

impl RunRef {
    /// The run directory named; else the error is shown and the exit code returned.
    pub fn dir(&self) -> Result<PathBuf, u8> {
        self.resolve().map_err(|error| {
            eprintln!("error: {error}");
            exit::INVALID
        })
    }

    /// The run directory named, or why none is.
    pub fn resolve(&self) -> Result<PathBuf, fabro::run_dir::lookup::LookupError> {
        let runs_dir = std::path::Path::new(fabro::run_dir::lookup::DEFAULT_RUNS_DIR);
        match &self.run {
            Some(reference) if !self.last => fabro::run_dir::lookup::find_run(reference, runs_dir),
            _ => fabro::run_dir::lookup::last_run(runs_dir),
        }
    }
}

#[derive(Parser)]
#[command(name = "fabro", version, about = "Run AI coding pipelines described as Graphviz DOT workflows")]
struct Cli {
    /// More diagnostics on stderr (-v info, -vv debug, -vvv trace).
    #[arg(short, long, action = clap::ArgAction::Count, global = true)]
    verbose: u8,
    #[command(subcommand)]
    command: Command,
}

// Made once per process: the size of the largest command's arguments costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand)]
enum Command {
    /// Run a workflow: exit 0 succeeded, 1 failed, 2 invalid input, 3 paused for input, 130 interrupted.
    Run(run::RunArgs),
    /// Continue a paused, interrupted or crashed run from its last checkpoint (same exit codes).
    Resume(resume::ResumeArgs),
    /// Wait until a run (say one started with `fabro run --detach`) settles; exit as `fabro run`
    /// would have.
    Wait(wait::Args),
    /// Follow a run started elsewhere (--detach, the run service, another terminal) live, and
    /// answer the gates it stops at here; exit as `fabro wait` does.
    Attach(attach::Args),
    /// Stop a running run as Ctrl-C would (it can be resumed), or take a queued one off the queue.
    Cancel(cancel::Args),
    /// Copy a run's state right after one of its stages into a new run directory, to resume.
    Fork(fork::Args),
    /// Move a stopped run back to the state right after one of its stages (nothing is deleted).
    Rewind(rewind::Args),
    /// List the runs in a runs directory.
    Runs(runs::Args),
    /// Print a workflow (or a run's progress over it) as normalized DOT, SVG or PNG.
    Graph(graph::GraphArgs),
    /// Show a run's event log; -f follows a live run.
    Logs(logs::LogsArgs),
    /// Show a run's status, stages and context.
    Inspect(inspect::InspectArgs),
    /// Write a run as one Markdown or HTML document: stages, prompts, responses, output, usage.
    Report(report::ReportArgs),
    /// Write a run's retrospective (retro.json, retro.md): per stage time, retries, cost, files and outcome, and a model's reading when a provider is configured.
    Retro(retro::RetroArgs),
    /// Serve a local web view of the runs: progress live, stage details, answering gates.
    Serve(serve::ServeArgs),
    /// List, show or remove the project memory agent stages with memory=true recall.
    Memory(memory::Args),
    /// Write a starter workflow that validates cleanly.
    New(new::NewArgs),
    /// Print the settings a run would take from its layers (user config, .fabro/project.toml,
    /// workflow.toml, a run configuration, environment), each with where it came from.
    Settings(settings::SettingsArgs),
    /// Print shell completions.
    Completions(completions::CompletionsArgs),
    /// Serve the Language Server Protocol over stdio for workflow files: diagnostics as you type,
    /// quick fixes, hover, completion, navigation, rename, formatting (docs/editors.md).
    Lsp(lsp::LspArgs),
    /// Parse, transform and lint a workflow; exit 0 when it has no errors, 2 otherwise.
    Validate {
        /// The workflow file (.dot), or a run configuration (.toml) naming one.
        workflow: PathBuf,
        /// Print `{"valid": bool, "diagnostics": [...]}` instead of text.
        #[arg(long)]
        json: bool,
        /// Treat warnings as errors (exit 2 when there is any), for CI.
        #[arg(long)]
        deny_warnings: bool,
        /// A run input the workflow reads (`{{ inputs.KEY }}`), as `fabro run --input` gives it.
        #[arg(long = "input", value_name = "KEY=VALUE")]
        inputs: Vec<String>,
        /// Run inputs from a TOML table or JSON object file.
        #[arg(long = "inputs", value_name = "FILE")]
        inputs_file: Option<PathBuf>,
    },
}

/// The whole command-line interface, for generating shell completions.
pub fn command() -> clap::Command {
    <Cli as clap::CommandFactory>::command()
}

pub fn main() -> ExitCode {
    let cli = Cli::parse();
    init_tracing(cli.verbose);
    // Before anything runs: the keys the config file names are secrets for every command.
    fabro::backends::config::LlmConfig::register_file_secrets();
    let code = match cli.command {
        Command::Validate { workflow, json, deny_warnings, inputs, inputs_file } => {
            validate::run(&workflow, json, deny_warnings, inputs_file.as_deref(), &inputs)
        }
        Command::Run(mut args) => {
            args.launch.verbose = cli.verbose;
            run::run(args)
        }
        Command::Resume(mut args) => {
            args.launch.verbose = cli.verbose;
            resume::resume(args)
        }
        Command::Wait(args) => wait::run(args),
        Command::Attach(mut args) => {
            args.stream_output = cli.verbose > 0;
            attach::run(args)
        }
        Command::Cancel(args) => cancel::run(args),
        Command::Fork(args) => fork::run(args),
        Command::Report(args) => report::run(args),
        Command::Retro(args) => retro::run(args),
        Command::Serve(args) => serve::run(args),
        Command::Rewind(args) => rewind::run(args),
        Command::Runs(args) => runs::run(args),
        Command::Graph(args) => graph::run(args),
        Command::Logs(args) => logs::run(args),
        Command::Inspect(args) => inspect::run(args),
        Command::New(args) => new::run(args),
        Command::Settings(args) => settings::run(args),
        Command::Memory(args) => memory::run(args),
        Command::Completions(args) => completions::run(args),
        Command::Lsp(args) => lsp::run(args),
    };
    ExitCode::from(code)
}

/// Prints `text` on stdout; a closed pipe (`fabro runs | head`) is not an error.
fn print(text: &str) -> u8 {
    use std::io::Write as _;
    let mut out = std::io::stdout().lock();
    match out.write_all(text.as_bytes()).and_then(|()| out.flush()) {
        Ok(()) => exit::SUCCESS,
        Err(error) if error.kind() == std::io::ErrorKind::BrokenPipe => exit::SUCCESS,
        Err(error) => {
            eprintln!("error: cannot write: {error}");
            exit::FAILED
        }
    }
}

/// Runs an async subcommand on a fresh multi-threaded runtime, as one of its tasks: the worker
/// that sees a response or a child's output ready goes on with the subcommand itself, where the
/// main thread would have to be woken for each (about 0.3 ms of CPU a turn of an agent stage).
fn block_on(command: impl std::future::Future<Output = u8> + Send + 'static) -> u8 {
    let runtime = match tokio::runtime::Builder::new_multi_thread().enable_all().build() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: cannot start the async runtime: {error}");
            return exit::INVALID;
        }
    };
    match runtime.block_on(runtime.spawn(command)) {
        Ok(code) => code,
        // The panic was reported where it happened; it ends the process as it would have.
        Err(error) if error.is_panic() => std::panic::resume_unwind(error.into_panic()),
        Err(_) => exit::FAILED,
    }
}

/// stderr for log lines, with the run's secrets redacted: what a library logs (an MCP server's
/// rejection echoing the Authorization header, logged by rmcp) lands in CI logs. The formatter
/// writes each event in one call, so a secret is never split across two.
struct RedactingStderr;

impl std::io::Write for RedactingStderr {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        std::io::stderr().write_all(&fabro::secrets::redact_bytes(bytes))?;
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        std::io::stderr().flush()
    }
}

fn init_tracing(verbose: u8) {
    let level = match verbose {
        0 => "warn",
        1 => "info",
        2 => "debug",
        _ => "trace",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("FABRO_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(level));
    // Colour only on a terminal, never in CI or with NO_COLOR set (docs/ci.md).
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr())
        && std::env::var_os("CI").is_none()
        && std::env::var_os("NO_COLOR").is_none_or(|value| value.is_empty());
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| RedactingStderr)
        .with_ansi(ansi)
        .without_time()
        .init();
}
