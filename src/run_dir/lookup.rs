//! Finding a run the way people name it: a run directory's path, a run id or a unique prefix of
//! one (as `fabro runs` prints them), or the newest run. Ids are looked up among the run
//! directories of a runs directory (`.fabro/runs` by default).

use std::path::{Path, PathBuf};

use super::layout;
use super::records::Manifest;

/// The runs directory `fabro run` uses when no `--run-dir` is given.
pub const DEFAULT_RUNS_DIR: &str = ".fabro/runs";

/// Why no single run was found.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum LookupError {
    #[error("no run directory or run id `{reference}` (run ids are looked up in {}); `fabro runs` lists the runs", runs_dir.display())]
    NotFound { reference: String, runs_dir: PathBuf },
    #[error("`{reference}` names {} runs: {}; give more of the id", matches.len(), matches.join(", "))]
    Ambiguous { reference: String, matches: Vec<String> },
    #[error("there are no runs in {}", runs_dir.display())]
    NoRuns { runs_dir: PathBuf },
}

/// A run found in a runs directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunEntry {
    pub dir: PathBuf,
    pub run_id: String,
    pub started_at: String,
}

/// The run directories under `runs_dir` (those with a readable manifest), oldest first.
pub fn runs_in(runs_dir: &Path) -> Vec<RunEntry> {
    let mut runs: Vec<RunEntry> = std::fs::read_dir(runs_dir)
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let dir = entry.path();
            let manifest = read_manifest(&dir.join(layout::MANIFEST))?;
            Some(RunEntry { dir, run_id: manifest.run_id, started_at: manifest.started_at })
        })
        .collect();
    // RFC 3339 times of one clock sort as text; run ids (UUIDv7) break ties in time order.
    runs.sort_by(|a, b| (&a.started_at, &a.run_id).cmp(&(&b.started_at, &b.run_id)));
    runs
}

/// A manifest that is a regular file of sane size and parses; anything else is not a run here.
fn read_manifest(path: &Path) -> Option<Manifest> {
    const MAX_MANIFEST_BYTES: u64 = 1 << 20;
    let meta = std::fs::metadata(path).ok()?;
    if !meta.is_file() || meta.len() > MAX_MANIFEST_BYTES {
        return None;
    }
    serde_json::from_slice(&crate::regular_file::read(path, crate::regular_file::FileKind::Record).ok()?).ok()
}

/// The run `reference` names: an existing directory, else the run in `runs_dir` whose id (or
/// directory name) is `reference` or starts with it.
pub fn find_run(reference: &str, runs_dir: &Path) -> Result<PathBuf, LookupError> {
    let as_path = Path::new(reference);
    if as_path.is_dir() {
        return Ok(as_path.to_path_buf());
    }
    let wanted = reference.trim();
    let runs = all_runs(runs_dir);
    let named = |run: &&RunEntry| {
        let dir_name = run.dir.file_name().map(|name| name.to_string_lossy()).unwrap_or_default();
        run.run_id == wanted || dir_name == wanted
    };
    if let Some(exact) = runs.iter().find(named) {
        return Ok(exact.dir.clone());
    }
    let matches: Vec<&RunEntry> = if wanted.is_empty() {
        Vec::new()
    } else {
        runs.iter().filter(|run| run.run_id.starts_with(wanted)).collect()
    };
    match matches.as_slice() {
        [] => {
            Err(LookupError::NotFound { reference: reference.to_string(), runs_dir: runs_dir.to_path_buf() })
        }
        [only] => Ok(only.dir.clone()),
        many => Err(LookupError::Ambiguous {
            reference: reference.to_string(),
            matches: many.iter().map(|run| run.run_id.clone()).collect(),
        }),
    }
}

/// The runs of `runs_dir`: those with a manifest ([`runs_in`]) and those submitted (`--detach`,
/// the run service) that have not created it yet, oldest first.
pub fn all_runs(runs_dir: &Path) -> Vec<RunEntry> {
    let mut runs = runs_in(runs_dir);
    // A run may create its manifest between the two looks: a directory is named once.
    let submitted: Vec<RunEntry> = submitted_in(runs_dir)
        .into_iter()
        .filter(|entry| runs.iter().all(|run| run.dir != entry.dir))
        .collect();
    runs.extend(submitted);
    runs.sort_by(|a, b| (&a.started_at, &a.run_id).cmp(&(&b.started_at, &b.run_id)));
    runs
}

/// The runs of `runs_dir` that were submitted (`--detach`, the run service), whether or not they
/// created their manifest yet, as entries named by their submission.
fn submitted_in(runs_dir: &Path) -> Vec<RunEntry> {
    let Ok(entries) = std::fs::read_dir(runs_dir) else { return Vec::new() };
    entries
        .flatten()
        .filter(|entry| entry.file_type().is_ok_and(|kind| kind.is_dir()))
        .filter_map(|entry| {
            let submission = super::submission::Submission::read(&entry.path()).ok()??;
            Some(RunEntry {
                dir: entry.path(),
                run_id: submission.run_id,
                started_at: submission.submitted_at,
            })
        })
        .collect()
}

/// The newest run in `runs_dir` (by start time).
pub fn last_run(runs_dir: &Path) -> Result<PathBuf, LookupError> {
    runs_in(runs_dir)
        .pop()
        .map(|run| run.dir)
        .ok_or_else(|| LookupError::NoRuns { runs_dir: runs_dir.to_path_buf() })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::run_dir::write_json_file;
    use crate::run_status::RunStatus;

    fn add_run(runs: &Path, id: &str, started_at: &str) -> PathBuf {
        let dir = runs.join(id);
        std::fs::create_dir_all(&dir).unwrap();
        let manifest = Manifest::sample(id, started_at, RunStatus::Running);
        write_json_file(&dir.join("manifest.json"), &manifest).unwrap();
        dir
    }

    #[test]
    fn runs_are_found_by_path_id_or_unique_prefix() {
        let temp = tempfile::tempdir().unwrap();
        let runs = temp.path().join("runs");
        let first = add_run(&runs, "019ab000-aaaa-7000-8000-000000000001", "2026-11-24T10:00:00Z");
        let second = add_run(&runs, "019ab000-aaab-7000-8000-000000000002", "2026-11-24T11:00:00Z");
        std::fs::create_dir_all(runs.join("not-a-run")).unwrap();

        assert_eq!(find_run(first.to_str().unwrap(), &runs), Ok(first.clone()));
        assert_eq!(find_run("019ab000-aaaa-7000-8000-000000000001", &runs), Ok(first.clone()));
        assert_eq!(find_run("019ab000-aaab", &runs), Ok(second.clone()));
        let ambiguous = find_run("019ab000-aaa", &runs).unwrap_err();
        assert!(matches!(&ambiguous, LookupError::Ambiguous { matches, .. } if matches.len() == 2));
        assert!(ambiguous.to_string().ends_with("; give more of the id"), "{ambiguous}");
        let missing = find_run("0200", &runs).unwrap_err().to_string();
        assert!(missing.starts_with("no run directory or run id `0200`"), "{missing}");
        assert!(find_run("", &runs).is_err());

        assert_eq!(last_run(&runs), Ok(second));
        assert_eq!(
            last_run(&temp.path().join("none")),
            Err(LookupError::NoRuns { runs_dir: temp.path().join("none") })
        );
    }
}
