//! `fabro new NAME [--template linear|branch-loop|review-gate|parallel] [--dir DIR] [--force]`

use std::path::PathBuf;

use fabro::starter::{check_name, template, Template};

use super::exit;

/// The starter templates, as the command line names them.
#[derive(Debug, Clone, Copy, clap::ValueEnum)]
pub enum TemplateArg {
    /// plan, implement, check and review, one after another
    Linear,
    /// implement, run the tests, and loop through a fix stage until they pass
    BranchLoop,
    /// plan, implement (a goal gate), summarize for the reviewer, then a human approves the change or sends it back
    ReviewGate,
    /// three reviews at once, merged at a fan-in
    Parallel,
}

impl From<TemplateArg> for Template {
    fn from(arg: TemplateArg) -> Template {
        match arg {
            TemplateArg::Linear => Template::Linear,
            TemplateArg::BranchLoop => Template::BranchLoop,
            TemplateArg::ReviewGate => Template::ReviewGate,
            TemplateArg::Parallel => Template::Parallel,
        }
    }
}

#[derive(clap::Args)]
pub struct NewArgs {
    /// The workflow name: a plain identifier, used as the digraph name; the file is NAME.dot.
    pub name: String,
    /// The starter workflow to write.
    #[arg(long, short, value_enum, default_value = "linear")]
    pub template: TemplateArg,
    /// The directory to write NAME.dot in (default: the current directory).
    #[arg(long, value_name = "DIR")]
    pub dir: Option<PathBuf>,
    /// Overwrite NAME.dot if it exists.
    #[arg(long)]
    pub force: bool,
}

pub fn run(args: NewArgs) -> u8 {
    if let Err(error) = check_name(&args.name) {
        eprintln!("error: {error}");
        eprintln!("  = help: fabro new {}", error.suggestion);
        return exit::INVALID;
    }
    let kind = Template::from(args.template);
    let file_name = format!("{}.dot", args.name);
    let path = match &args.dir {
        Some(dir) => dir.join(&file_name),
        None => PathBuf::from(&file_name),
    };
    if let Some(dir) = &args.dir {
        if !dir.is_dir() {
            eprintln!("error: `{}` is not a directory", dir.display());
            return exit::INVALID;
        }
    }
    if !args.force && (path.exists() || path.symlink_metadata().is_ok()) {
        eprintln!(
            "error: `{}` already exists; nothing was written (use --force to overwrite it)",
            path.display()
        );
        return exit::INVALID;
    }
    let text = template(kind, &args.name);
    if let Err(error) = fabro::atomic_file::write_atomic(&path, text.as_bytes()) {
        eprintln!("error: cannot write `{}`: {error}", path.display());
        return exit::INVALID;
    }
    println!("wrote {} ({} template: {})", path.display(), kind.name(), kind.description());
    let shown = shell_word(&path.display().to_string());
    match kind {
        Template::ReviewGate => {
            println!("next: fabro run {shown} --simulate");
            println!(
                "      (the human gate asks on the terminal; add --auto-approve to take the first choice)"
            );
        }
        _ => println!("next: fabro run {shown} --simulate"),
    }
    exit::SUCCESS
}

/// `text` quoted for a POSIX shell when it needs it.
fn shell_word(text: &str) -> String {
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_alphanumeric() || "/._-+:,@%".contains(c)) {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', r"'\''"))
    }
}
