//! `fabro memory list|show|rm|clear`: the project memory agent stages with `memory=true` recall
//! (`.fabro/memory/` at the root of the git repository of the directory, else in it).

use std::path::PathBuf;

use fabro::memory::{MemoryError, MemoryStore};
use fabro::terminal_text::escape_controls;

use super::exit;

#[derive(clap::Args)]
pub struct Args {
    #[command(subcommand)]
    action: Action,
    /// The project: a directory in it (default: the current directory).
    #[arg(long, value_name = "DIR", global = true)]
    dir: Option<PathBuf>,
}

#[derive(clap::Subcommand)]
enum Action {
    /// List the entries, ordered by kind then name.
    List {
        /// Print the entries as a JSON array.
        #[arg(long)]
        json: bool,
    },
    /// Print one entry whole.
    Show { name: String },
    /// Remove one entry.
    Rm { name: String },
    /// Remove every entry.
    Clear,
}

pub fn run(args: Args) -> u8 {
    let dir = match args.dir.map_or_else(std::env::current_dir, Ok) {
        Ok(dir) => dir,
        Err(error) => {
            eprintln!("error: cannot tell the current directory: {error}");
            return exit::INVALID;
        }
    };
    if !dir.is_dir() {
        eprintln!("error: --dir {} is not a directory", dir.display());
        return exit::INVALID;
    }
    let store = MemoryStore::of_project(&dir);
    match act(&store, args.action) {
        Ok(text) => super::print(&text),
        Err(error @ MemoryError::NotFound(_)) => {
            eprintln!("error: {error} in {} (see `fabro memory list`)", store.dir().display());
            exit::INVALID
        }
        Err(error) => {
            eprintln!("error: {error}");
            exit::FAILED
        }
    }
}

fn act(store: &MemoryStore, action: Action) -> Result<String, MemoryError> {
    Ok(match action {
        Action::List { json: true } => {
            let entries = store.list()?;
            serde_json::to_string_pretty(&entries).unwrap_or_default() + "\n"
        }
        Action::List { json: false } => {
            let entries = store.list()?;
            if entries.is_empty() {
                return Ok(format!("no memory entries in {}\n", store.dir().display()));
            }
            let mut out = format!("{} entries in {}\n", entries.len(), store.dir().display());
            // Names and texts are model-written: printed with their control characters escaped.
            for entry in entries {
                let text: String = entry.text.replace(['\n', '\t'], " ").chars().take(100).collect();
                let more = if entry.text.chars().count() > 100 { "…" } else { "" };
                out.push_str(&format!(
                    "{:<10} {:<24} {}{more}\n",
                    entry.kind.as_str(),
                    escape_controls(&entry.name.replace('\t', " ")),
                    escape_controls(&text)
                ));
            }
            out
        }
        Action::Show { name } => {
            let entry = store.get(&name)?;
            let origin = match (&entry.run_id, &entry.node) {
                (Some(run), Some(node)) => format!(" by run {run}, stage {node}"),
                _ => String::new(),
            };
            let shown = format!(
                "{} {}\n{}\n(written {}{origin})\n",
                entry.kind.as_str(),
                entry.name,
                entry.text,
                entry.updated_at
            );
            escape_controls(&shown).into_owned()
        }
        Action::Rm { name } => {
            store.remove(&name)?;
            format!("removed `{}`\n", name.trim())
        }
        Action::Clear => format!("removed {} entries from {}\n", store.clear()?, store.dir().display()),
    })
}
