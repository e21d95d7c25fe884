//! `fabro report RUN|--last [--format md|html] [-o FILE]`: a run as one document for people.

use std::path::{Path, PathBuf};

use fabro::report::run_page::{self, RunPage};

use super::exit;

#[derive(clap::Args)]
pub struct ReportArgs {
    #[command(flatten)]
    pub run: super::RunRef,
    /// md (the default, or from -o's extension) or html (one self-contained file).
    #[arg(long, value_enum)]
    pub format: Option<ReportFormat>,
    /// Write to FILE (atomically) instead of stdout.
    #[arg(short, long, value_name = "FILE")]
    pub output: Option<PathBuf>,
}

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum ReportFormat {
    Md,
    Html,
}

impl ReportFormat {
    /// The format a file name asks for: `.html`/`.htm` is HTML, anything else Markdown.
    pub fn of(path: &Path) -> ReportFormat {
        match path.extension().and_then(|ext| ext.to_str()) {
            Some(ext) if ext.eq_ignore_ascii_case("html") || ext.eq_ignore_ascii_case("htm") => {
                ReportFormat::Html
            }
            _ => ReportFormat::Md,
        }
    }
}

pub fn run(args: ReportArgs) -> u8 {
    let run_dir = match args.run.dir() {
        Ok(dir) => dir,
        Err(code) => return code,
    };
    let format =
        args.format.or_else(|| args.output.as_deref().map(ReportFormat::of)).unwrap_or(ReportFormat::Md);
    let text = match render(&run_dir, format) {
        Ok(text) => text,
        Err(message) => {
            eprintln!("error: {message}");
            return exit::INVALID;
        }
    };
    match &args.output {
        Some(path) => match write(path, &text) {
            Ok(()) => exit::SUCCESS,
            Err(message) => {
                eprintln!("error: {message}");
                exit::FAILED
            }
        },
        None => super::print(&text),
    }
}

/// The report of the run in `run_dir`.
pub fn render(run_dir: &Path, format: ReportFormat) -> Result<String, String> {
    let page = RunPage::read(run_dir).map_err(|error| error.to_string())?;
    Ok(match format {
        ReportFormat::Md => run_page::markdown(&page),
        ReportFormat::Html => run_page::html(&page),
    })
}

/// Writes a report atomically, making missing directories.
pub fn write(path: &Path, text: &str) -> Result<(), String> {
    if let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) {
        let _ = std::fs::create_dir_all(parent);
    }
    fabro::atomic_file::write_atomic(path, text.as_bytes())
        .map_err(|error| format!("cannot write the report {}: {error}", path.display()))
}
