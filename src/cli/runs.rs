//! `fabro runs [--dir DIR] [--json] [--all] [--label KEY=VALUE]...`: the runs in a runs directory
//! (those with every label given), unfinished ones first (queued ones too), newest first. An entry that cannot be read is listed as `unreadable` with the reason; it never
//! stops the listing. `--delete RUN` and `--prune [--older-than AGE]` remove runs (`--dry-run`
//! only lists them); a run whose lock is held is never deleted.

use std::path::{Path, PathBuf};
use std::time::SystemTime;

use fabro::run_dir::housekeeping::{delete_run, prune_candidates, PruneReason};
use fabro::run_dir::submission::{RunState, Submission};
use fabro::run_dir::RunView;
use fabro::run_status::RunStatus;
use serde_json::{json, Value};

use super::exit;
use fabro::run_dir::layout;

#[derive(clap::Args)]
pub struct Args {
    /// The directory holding run directories.
    #[arg(long, default_value = ".fabro/runs")]
    pub dir: PathBuf,
    /// Print a JSON array instead of a table.
    #[arg(long)]
    pub json: bool,
    /// List every run; by default the unfinished ones and the newest finished ones.
    #[arg(long)]
    pub all: bool,
    /// Delete a run (its directory, id or unique id prefix); refused while a process drives it.
    #[arg(long, value_name = "RUN", conflicts_with_all = ["prune", "json"])]
    pub delete: Option<String>,
    /// Delete the runs whose workflow file no longer exists (with --older-than: the finished runs
    /// older than that instead).
    #[arg(long, conflicts_with = "json")]
    pub prune: bool,
    /// With --prune: how long ago a finished run must have finished, e.g. 30d or 12h.
    #[arg(long, value_name = "AGE", requires = "prune", value_parser = humantime::parse_duration)]
    pub older_than: Option<std::time::Duration>,
    /// With --delete or --prune: list what would be deleted and delete nothing.
    #[arg(long)]
    pub dry_run: bool,
    /// Only the runs labeled so (`fabro run --label`); repeatable: every label must match.
    #[arg(long = "label", value_name = "KEY=VALUE")]
    pub labels: Vec<String>,
}

/// Finished runs listed without --all.
const RECENT_FINISHED: usize = 10;

/// One line of the listing.
struct Entry {
    dir: PathBuf,
    run_id: String,
    workflow: String,
    status: String,
    started_at: Option<String>,
    started: Option<SystemTime>,
    duration_ms: Option<u64>,
    current_node: Option<String>,
    labels: std::collections::BTreeMap<String, String>,
    error: Option<String>,
}

impl Entry {
    fn short_id(&self) -> String {
        self.run_id.chars().take(13).collect()
    }

    fn to_json(&self) -> Value {
        json!({
            "id": self.short_id(),
            "run_id": self.run_id,
            "run_dir": self.dir.display().to_string(),
            "workflow": self.workflow,
            "status": self.status,
            "started_at": self.started_at,
            "duration_ms": self.duration_ms,
            "current_node": self.current_node,
            "labels": self.labels,
            "error": self.error,
        })
    }
}

fn read_entry(dir: &Path) -> Entry {
    let name = dir.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    let submission = Submission::read(dir).ok().flatten();
    // A submitted run (`--detach`, the run service) that has not written its manifest, or one
    // that waits in the queue again (to be resumed), is what its submission says.
    let state = submission.as_ref().map(|_| RunState::of(dir));
    if let (Some(submission), Some(state)) = (&submission, &state) {
        if !dir.join(layout::MANIFEST).exists() || *state == RunState::Queued {
            return Entry {
                dir: dir.to_path_buf(),
                run_id: submission.run_id.clone(),
                workflow: submission.workflow_name().unwrap_or_default(),
                status: state.as_str().to_string(),
                started_at: Some(submission.submitted_at.clone()),
                started: humantime::parse_rfc3339_weak(&submission.submitted_at).ok(),
                duration_ms: None,
                current_node: None,
                labels: Default::default(),
                error: None,
            };
        }
    }
    match RunView::open(dir) {
        Ok(view) => {
            let started = humantime::parse_rfc3339_weak(&view.manifest.started_at).ok();
            let status = view.status();
            let duration_ms = match (&view.result, status) {
                (_, RunStatus::Running) => started
                    .and_then(|s| SystemTime::now().duration_since(s).ok())
                    .map(|d| d.as_millis() as u64),
                (Some(result), _) => Some(result.duration_ms),
                (None, _) => None,
            };
            Entry {
                dir: dir.to_path_buf(),
                run_id: view.manifest.run_id.clone(),
                workflow: view.manifest.workflow.clone(),
                status: view.status_label().to_string(),
                started_at: Some(view.manifest.started_at.clone()),
                started,
                duration_ms,
                current_node: view.current_node().map(str::to_string),
                labels: view.manifest.labels.clone(),
                error: None,
            }
        }
        Err(error) => Entry {
            dir: dir.to_path_buf(),
            run_id: name,
            workflow: String::new(),
            status: "unreadable".to_string(),
            started_at: None,
            started: None,
            duration_ms: None,
            current_node: None,
            labels: Default::default(),
            error: Some(error.to_string()),
        },
    }
}

fn list(dir: &Path) -> Vec<Entry> {
    let mut dirs: Vec<PathBuf> = std::fs::read_dir(dir)
        .into_iter()
        .flatten()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.join(layout::MANIFEST).exists() || path.join(layout::SUBMISSION).exists())
        .collect();
    dirs.sort();
    let mut entries: Vec<Entry> = dirs.iter().map(|d| read_entry(d)).collect();
    // Newest first; entries without a start time last.
    entries.sort_by(|a, b| match (a.started, b.started) {
        (Some(x), Some(y)) => y.cmp(&x),
        (Some(_), None) => std::cmp::Ordering::Less,
        (None, Some(_)) => std::cmp::Ordering::Greater,
        (None, None) => a.dir.cmp(&b.dir),
    });
    entries
}

fn format_duration(ms: u64) -> String {
    let secs = ms / 1000;
    if secs < 60 {
        format!("{}.{}s", secs, (ms % 1000) / 100)
    } else if secs < 3600 {
        format!("{}m{:02}s", secs / 60, secs % 60)
    } else {
        format!("{}h{:02}m", secs / 3600, (secs % 3600) / 60)
    }
}

fn render_text(dir: &Path, entries: &[Entry]) -> String {
    if entries.is_empty() {
        return format!("no runs in {}\n", dir.display());
    }
    let rows: Vec<[String; 7]> = entries
        .iter()
        .map(|e| {
            [
                e.short_id(),
                e.workflow.clone(),
                e.status.clone(),
                e.started_at.clone().unwrap_or_else(|| "-".into()),
                e.duration_ms.map_or_else(|| "-".into(), format_duration),
                match &e.error {
                    Some(error) => error.clone(),
                    None => e.current_node.clone().unwrap_or_else(|| "-".into()),
                },
                e.dir.display().to_string(),
            ]
        })
        .collect();
    let header = ["ID", "WORKFLOW", "STATUS", "STARTED", "DURATION", "NODE", "DIR"];
    let mut widths = header.map(|h| h.chars().count());
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    let line = |cells: Vec<&str>| -> String {
        let mut text = String::new();
        for (i, (cell, width)) in cells.iter().zip(widths).enumerate() {
            if i + 1 == cells.len() {
                text.push_str(cell);
            } else {
                text.push_str(&format!("{cell:<width$}  "));
            }
        }
        text.trim_end().to_string() + "\n"
    };
    let mut out = line(header.to_vec());
    for row in &rows {
        out.push_str(&line(row.iter().map(String::as_str).collect()));
    }
    out
}

pub fn run(args: Args) -> u8 {
    if let Some(reference) = &args.delete {
        let dir = match fabro::run_dir::lookup::find_run(reference, &args.dir) {
            Ok(dir) => dir,
            Err(error) => {
                eprintln!("error: {error}");
                return exit::INVALID;
            }
        };
        return delete(&[(dir, None)], args.dry_run);
    }
    if args.prune {
        let candidates = prune_candidates(&args.dir, args.older_than, std::time::SystemTime::now());
        if candidates.is_empty() {
            println!("nothing to prune in {}", args.dir.display());
            return exit::SUCCESS;
        }
        let cwd = std::env::current_dir().unwrap_or_default();
        let runs: Vec<(PathBuf, Option<String>)> = candidates
            .into_iter()
            .map(|c| {
                let reason = match c.reason {
                    PruneReason::WorkflowGone(path) => {
                        PruneReason::WorkflowGone(fabro::report::relative_display(Path::new(&path), &cwd))
                    }
                    other => other,
                };
                (c.dir, Some(reason.to_string()))
            })
            .collect();
        return delete(&runs, args.dry_run);
    }
    let wanted =
        match args.labels.iter().map(|text| fabro::run_dir::parse_label(text)).collect::<Result<Vec<_>, _>>()
        {
            Ok(wanted) => wanted,
            Err(message) => {
                eprintln!("error: --label: {message}");
                return exit::INVALID;
            }
        };
    let mut entries = list(&args.dir);
    entries.retain(|entry| fabro::run_dir::has_labels(&entry.labels, &wanted));
    let (entries, older) = shown(entries, args.all);
    let text = if args.json {
        let array: Vec<Value> = entries.iter().map(Entry::to_json).collect();
        match serde_json::to_string_pretty(&array) {
            Ok(text) => text + "\n",
            Err(error) => {
                eprintln!("error: {error}");
                return exit::FAILED;
            }
        }
    } else {
        let mut text = render_text(&args.dir, &entries);
        if older > 0 {
            text.push_str(&format!("… and {older} older finished run(s); `fabro runs --all` lists them\n"));
        }
        text
    };
    super::print(&text)
}

/// Unfinished runs first (they may want attention), then finished ones, newest first in each;
/// without `all`, only the newest finished ones. Returns how many finished runs are left out.
fn shown(entries: Vec<Entry>, all: bool) -> (Vec<Entry>, usize) {
    let (mut unfinished, finished): (Vec<Entry>, Vec<Entry>) = entries.into_iter().partition(|entry| {
        matches!(
            entry.status.as_str(),
            "queued" | "starting" | "running" | "paused" | "interrupted" | "crashed"
        )
    });
    let left_out = if all { 0 } else { finished.len().saturating_sub(RECENT_FINISHED) };
    unfinished.extend(finished.into_iter().take(if all { usize::MAX } else { RECENT_FINISHED }));
    (unfinished, left_out)
}

/// Deletes each run (or, with `dry_run`, says it would), listing every one; exit 1 when any
/// could not be deleted.
fn delete(runs: &[(PathBuf, Option<String>)], dry_run: bool) -> u8 {
    let mut failed = false;
    for (dir, reason) in runs {
        let why = reason.as_ref().map(|reason| format!(" ({reason})")).unwrap_or_default();
        if dry_run {
            println!("would delete {}{why}", dir.display());
            continue;
        }
        match delete_run(dir) {
            Ok(()) => println!("deleted {}{why}", dir.display()),
            Err(error) => {
                eprintln!("error: {error}");
                failed = true;
            }
        }
    }
    if failed {
        exit::FAILED
    } else {
        exit::SUCCESS
    }
}
