//! `fabro graph WORKFLOW|RUN|--last [--format dot|svg|png] [-o FILE] [--direction LR|TB]`

use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use fabro::atomic_file::write_atomic;
use fabro::render::{dot, Direction, DotOptions, Overlay};
use fabro::run_dir::Manifest;
use fabro::source::SourceFile;
use fabro::{CheckedWorkflow, Loader};

use super::exit;
use super::render::{render_diagnostics, render_load_error, summary_line};
use fabro::run_dir::layout;

#[derive(clap::Args)]
pub struct GraphArgs {
    /// A workflow file, or a run (its directory, id or id prefix) to overlay its progress.
    #[arg(value_name = "WORKFLOW|RUN", required_unless_present = "last")]
    pub target: Option<PathBuf>,
    /// The newest run in .fabro/runs.
    #[arg(long, conflicts_with = "target")]
    pub last: bool,
    /// Output format; svg and png need Graphviz's `dot` program.
    #[arg(long, value_enum, default_value = "dot")]
    pub format: Format,
    /// Write to FILE (atomically) instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
    /// Which way the graph flows (sets `rankdir`, replacing the file's).
    #[arg(long, value_enum, ignore_case = true)]
    pub direction: Option<DirectionArg>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Format {
    Dot,
    Svg,
    Png,
}

#[derive(Clone, Copy, clap::ValueEnum)]
pub enum DirectionArg {
    #[value(name = "LR")]
    Lr,
    #[value(name = "TB")]
    Tb,
    #[value(name = "BT")]
    Bt,
    #[value(name = "RL")]
    Rl,
}

impl From<DirectionArg> for Direction {
    fn from(direction: DirectionArg) -> Direction {
        match direction {
            DirectionArg::Lr => Direction::LeftRight,
            DirectionArg::Tb => Direction::TopBottom,
            DirectionArg::Bt => Direction::BottomTop,
            DirectionArg::Rl => Direction::RightLeft,
        }
    }
}

/// A path that can only mean a workflow file (`.dot`, `.gv`, `.fabro`), so a missing one is
/// reported as a missing file rather than as an unknown run.
fn is_workflow_name(path: &Path) -> bool {
    path.extension()
        .is_some_and(|ext| ["dot", "gv", "fabro"].iter().any(|known| ext.eq_ignore_ascii_case(known)))
}

const NO_DOT: &str = "Graphviz's `dot` program is not installed: install it with `apt-get install graphviz` \
(Debian/Ubuntu) or `brew install graphviz` (macOS), or use --format dot";

pub fn run(args: GraphArgs) -> u8 {
    // A workflow file as given; anything else names a run.
    let workflow =
        args.target.as_ref().filter(|path| path.is_file() || (!path.exists() && is_workflow_name(path)));
    let (checked, overlay) = if let Some(workflow) = workflow {
        match Loader::new().load_file(workflow) {
            Ok(checked) => (checked, None),
            Err(error) => {
                eprint!("{}", render_load_error(&error));
                return exit::INVALID;
            }
        }
    } else {
        let run = super::RunRef {
            run: args.target.as_ref().map(|path| path.display().to_string()),
            last: args.last,
        };
        let run_dir = match run.resolve() {
            Ok(dir) => dir,
            Err(error) => {
                eprintln!("error: {error}");
                return exit::INVALID;
            }
        };
        match load_run_dir(&run_dir) {
            Ok(loaded) => loaded,
            Err(code) => return code,
        }
    };
    if checked.has_errors() {
        let source = checked.workflow.source().clone();
        eprint!("{}", render_diagnostics(&checked.diagnostics, &source));
        eprintln!("{}", summary_line(source.path(), &checked.diagnostics, 0));
        return exit::INVALID;
    }
    let options = DotOptions { direction: args.direction.map(Direction::from), overlay };
    let text = dot::write(&checked.workflow, &options);
    let bytes = match args.format {
        Format::Dot => text.into_bytes(),
        Format::Svg => match graphviz(&text, "svg") {
            Ok(bytes) => bytes,
            Err(code) => return code,
        },
        Format::Png => match graphviz(&text, "png") {
            Ok(bytes) => bytes,
            Err(code) => return code,
        },
    };
    match &args.output {
        Some(path) => {
            if let Err(error) = write_atomic(path, &bytes) {
                eprintln!("error: cannot write `{}`: {error}", path.display());
                return exit::FAILED;
            }
        }
        None => {
            let mut stdout = std::io::stdout().lock();
            if let Err(error) = stdout.write_all(&bytes).and_then(|()| stdout.flush()) {
                if error.kind() != std::io::ErrorKind::BrokenPipe {
                    eprintln!("error: cannot write to stdout: {error}");
                    return exit::FAILED;
                }
            }
        }
    }
    exit::SUCCESS
}

/// A run directory: its stored workflow (loaded under the original path, so `@prompt` files
/// resolve as they did) and its progress.
fn load_run_dir(root: &Path) -> Result<(CheckedWorkflow, Option<Overlay>), u8> {
    for required in [layout::SAVED_WORKFLOW] {
        if !root.join(required).is_file() {
            eprintln!(
                "error: `{}` is a directory but not a fabro run directory (no {required}); pass a workflow file or a run directory",
                root.display()
            );
            return Err(exit::INVALID);
        }
    }
    let workflow_path = root.join(layout::SAVED_WORKFLOW);
    let text =
        fabro::regular_file::read_to_string(&workflow_path, fabro::regular_file::FileKind::SavedWorkflow)
            .map_err(|error| {
                eprintln!("error: cannot read `{}`: {error}", workflow_path.display());
                exit::INVALID
            })?;
    let overlay = Overlay::from_run_dir(root).map_err(|error| {
        eprintln!("error: {error}");
        exit::INVALID
    })?;
    let manifest: Option<Manifest> = fabro::regular_file::read_to_string(
        root.join(layout::MANIFEST),
        fabro::regular_file::FileKind::Record,
    )
    .ok()
    .and_then(|text| serde_json::from_str(&text).ok());
    let mut loader = Loader::new();
    let source_path = match &manifest {
        Some(manifest) => {
            if !manifest.goal.is_empty() {
                loader = loader.with_goal(manifest.goal.clone());
            }
            original_path(manifest)
        }
        None => workflow_path,
    };
    match loader.load_source(SourceFile::new(source_path, text)) {
        Ok(checked) => Ok((checked, Some(overlay))),
        Err(error) => {
            eprint!("{}", render_load_error(&error));
            Err(exit::INVALID)
        }
    }
}

/// The path the run loaded its workflow from. A relative path is relative to where `fabro run`
/// was started; when it does not exist from here but does from the run's work directory, that
/// one is meant.
fn original_path(manifest: &Manifest) -> PathBuf {
    let path = PathBuf::from(&manifest.source_path);
    if path.is_relative() && !path.exists() {
        let from_work_dir = Path::new(&manifest.work_dir).join(&path);
        if from_work_dir.exists() {
            return from_work_dir;
        }
    }
    path
}

/// Runs `dot -T<format>` over `text`.
fn graphviz(text: &str, format: &str) -> Result<Vec<u8>, u8> {
    let spawned = Command::new("dot")
        .arg(format!("-T{format}"))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = match spawned {
        Ok(child) => child,
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
            eprintln!("error: {NO_DOT}");
            return Err(exit::INVALID);
        }
        Err(error) => {
            eprintln!("error: cannot run Graphviz's `dot`: {error}");
            return Err(exit::FAILED);
        }
    };
    // Feed stdin from a thread: dot may write output before it has read all of its input.
    let writer = child.stdin.take().map(|mut stdin| {
        let input = text.as_bytes().to_vec();
        std::thread::spawn(move || stdin.write_all(&input))
    });
    let output = child.wait_with_output();
    let written = writer.map(|handle| handle.join());
    let output = match output {
        Ok(output) => output,
        Err(error) => {
            eprintln!("error: cannot run Graphviz's `dot`: {error}");
            return Err(exit::FAILED);
        }
    };
    let stderr_text = String::from_utf8_lossy(&output.stderr);
    if !output.status.success() {
        eprintln!(
            "error: Graphviz's `dot -T{format}` failed ({}):\n{}",
            output.status,
            stderr_text.trim_end()
        );
        return Err(exit::FAILED);
    }
    if let Some(Ok(Err(error))) = written {
        eprintln!("error: cannot send the graph to Graphviz's `dot`: {error}");
        return Err(exit::FAILED);
    }
    Ok(output.stdout)
}
