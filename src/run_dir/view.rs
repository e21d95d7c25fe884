//! Reading a run directory to look at it (`fabro inspect`): whatever state the run is in
//! (running, paused, finished, crashed), without changing anything.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use super::layout;
use super::records::{Checkpoint, Manifest, RunResult};
use crate::outcome::StageStatus;
use crate::run_status::RunStatus;

/// Why a directory cannot be looked at.
#[derive(Debug, thiserror::Error)]
pub enum ViewError {
    #[error("`{}` is not a fabro run directory (no {missing})", path.display())]
    NotARun { path: PathBuf, missing: &'static str },
    #[error("cannot read `{}`: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("`{}` is corrupt: {message}", path.display())]
    Corrupt { path: PathBuf, message: String },
}

/// A run as its directory holds it right now. Only `manifest.json` is required:
/// `checkpoint.json` appears after the first stage and `result.json` when the run ends (or
/// pauses, or is interrupted).
#[derive(Debug, Clone)]
pub struct RunView {
    pub root: PathBuf,
    pub manifest: Manifest,
    pub checkpoint: Option<Checkpoint>,
    pub result: Option<RunResult>,
}

/// Everything recorded about one node across its visits.
#[derive(Debug, Clone, PartialEq, serde::Serialize)]
pub struct StageSummary {
    pub node_id: String,
    pub visits: u32,
    /// The outcome of the last visit; `None` when no visit has finished.
    pub status: Option<StageStatus>,
    /// The time of the visits `result.json` records.
    pub duration_ms: u64,
    pub input_tokens: u64,
    pub output_tokens: u64,
    /// The estimated cost of its visits, when any of them had a price.
    pub cost_usd: Option<f64>,
}

impl RunView {
    /// Reads `manifest.json`, and `checkpoint.json` and `result.json` when present.
    pub fn open(root: &Path) -> Result<RunView, ViewError> {
        if !root.is_dir() {
            return Err(ViewError::NotARun { path: root.to_path_buf(), missing: layout::MANIFEST });
        }
        let manifest = read_json::<Manifest>(root, layout::MANIFEST)?
            .ok_or_else(|| ViewError::NotARun { path: root.to_path_buf(), missing: layout::MANIFEST })?;
        let checkpoint =
            super::journal::load_checkpoint(root).map_err(|error| match error.corrupt_file() {
                Ok((path, message)) => ViewError::Corrupt { path, message },
                Err((path, source)) => ViewError::Io { path, source },
            })?;
        let result = read_json::<RunResult>(root, layout::RESULT)?;
        Ok(RunView { root: root.to_path_buf(), manifest, checkpoint, result })
    }

    /// The run's status: the manifest's, which is written when the run starts and when it ends.
    pub fn status(&self) -> RunStatus {
        self.manifest.status
    }

    /// True when the manifest says `running` but no live process holds the run's lock: the
    /// process driving it was killed (`fabro resume` continues it).
    pub fn is_crashed(&self) -> bool {
        self.status() == RunStatus::Running && !super::lock_is_held(&self.root)
    }

    /// The status to show: `crashed` for a crashed run, else the manifest's.
    pub fn status_label(&self) -> &'static str {
        if self.is_crashed() {
            "crashed"
        } else {
            self.status().as_str()
        }
    }

    /// The stage that completed last (or, when paused, the one waiting for input).
    pub fn current_node(&self) -> Option<&str> {
        self.checkpoint.as_ref().map(|c| c.current_node.as_str())
    }

    /// Where the run goes next; `None` when it has ended or has not checkpointed yet.
    pub fn next_node(&self) -> Option<&str> {
        self.checkpoint.as_ref().and_then(|c| c.next_node.as_deref())
    }

    /// One summary per node that ran, in the order the nodes first ran. Durations and tokens
    /// come from `result.json`; visits and the last outcome from the checkpoint when it is newer
    /// (a running run's `result.json` is absent, or left over from before a resume).
    pub fn stages(&self) -> Vec<StageSummary> {
        let mut order: Vec<String> = Vec::new();
        let mut by_node: BTreeMap<String, StageSummary> = BTreeMap::new();
        let mut entry = |node: &str, order: &mut Vec<String>| -> String {
            if !by_node.contains_key(node) {
                order.push(node.to_string());
                by_node.insert(
                    node.to_string(),
                    StageSummary {
                        node_id: node.to_string(),
                        visits: 0,
                        status: None,
                        duration_ms: 0,
                        input_tokens: 0,
                        output_tokens: 0,
                        cost_usd: None,
                    },
                );
            }
            node.to_string()
        };
        let mut keys = Vec::new();
        if let Some(result) = &self.result {
            for record in &result.stages {
                keys.push((entry(&record.node_id, &mut order), Some(record)));
            }
        }
        if let Some(checkpoint) = &self.checkpoint {
            for node in checkpoint.completed_nodes.iter().chain(checkpoint.node_visits.keys()) {
                keys.push((entry(node, &mut order), None));
            }
        }
        for (node, record) in keys {
            let Some(summary) = by_node.get_mut(&node) else { continue };
            if let Some(record) = record {
                summary.visits += 1;
                summary.status = Some(record.status);
                summary.duration_ms += record.duration_ms;
                if let Some(usage) = &record.usage {
                    summary.input_tokens += usage.input_tokens;
                    summary.output_tokens += usage.output_tokens;
                }
                if let Some(cost) = record.cost_usd {
                    summary.cost_usd = Some(summary.cost_usd.unwrap_or(0.0) + cost);
                }
            }
        }
        if let Some(checkpoint) = &self.checkpoint {
            for (node, visits) in &checkpoint.node_visits {
                if let Some(summary) = by_node.get_mut(node) {
                    summary.visits = summary.visits.max(*visits);
                }
            }
            for (node, status) in &checkpoint.node_outcomes {
                if let Some(summary) = by_node.get_mut(node) {
                    summary.status = Some(*status);
                }
            }
            for node in &checkpoint.completed_nodes {
                if let Some(summary) = by_node.get_mut(node) {
                    summary.visits = summary.visits.max(1);
                }
            }
        }
        order.into_iter().filter_map(|node| by_node.remove(&node)).collect()
    }

    /// Files under `artifacts/`, as paths relative to it, sorted; `None` when the directory
    /// does not exist.
    pub fn artifacts(&self) -> Option<Vec<String>> {
        let dir = self.root.join("artifacts");
        if !dir.is_dir() {
            return None;
        }
        let mut files = Vec::new();
        collect_files(&dir, &dir, &mut files, 0);
        files.sort();
        Some(files)
    }
}

fn collect_files(base: &Path, dir: &Path, out: &mut Vec<String>, depth: usize) {
    if depth > 32 {
        return;
    }
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        let Ok(kind) = entry.file_type() else { continue };
        if kind.is_dir() {
            collect_files(base, &path, out, depth + 1);
        } else if let Ok(relative) = path.strip_prefix(base) {
            out.push(relative.to_string_lossy().into_owned());
        }
    }
}

/// Reads and parses `root/name`; `Ok(None)` when the file does not exist.
fn read_json<T: serde::de::DeserializeOwned>(
    root: &Path,
    name: &'static str,
) -> Result<Option<T>, ViewError> {
    let path = root.join(name);
    super::read_record(&path).map_err(|error| match error {
        super::RecordError::Io(source) => ViewError::Io { path, source },
        super::RecordError::Corrupt(message) => ViewError::Corrupt { path, message },
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::context::Context;
    use crate::run_dir::{write_json_file, StageRecord};
    use crate::usage::Usage;

    fn manifest(status: RunStatus) -> Manifest {
        Manifest::sample("r1", "2026-11-21T00:00:00Z", status)
    }

    fn record(
        node: &str,
        visit: u32,
        status: StageStatus,
        ms: u64,
        tokens: Option<(u64, u64)>,
    ) -> StageRecord {
        StageRecord {
            node_id: node.into(),
            visit,
            status,
            duration_ms: ms,
            handler: Some(crate::graph::HandlerType::Agent),
            failure_reason: None,
            usage: tokens.map(|(input_tokens, output_tokens)| Usage::new(input_tokens, output_tokens)),
            branch: None,
            cost_usd: None,
            dir: None,
        }
    }

    #[test]
    fn a_directory_without_a_manifest_is_not_a_run() {
        let temp = tempfile::tempdir().unwrap();
        let error = RunView::open(temp.path()).unwrap_err();
        assert!(matches!(error, ViewError::NotARun { missing: "manifest.json", .. }), "{error}");
        let error = RunView::open(&temp.path().join("missing")).unwrap_err();
        assert!(matches!(error, ViewError::NotARun { .. }));
    }

    #[test]
    fn corrupt_json_names_the_file() {
        let temp = tempfile::tempdir().unwrap();
        write_json_file(&temp.path().join("manifest.json"), &manifest(RunStatus::Running)).unwrap();
        std::fs::write(temp.path().join("checkpoint.json"), "{not json").unwrap();
        let error = RunView::open(temp.path()).unwrap_err();
        assert!(error.to_string().contains("checkpoint.json"), "{error}");
    }

    #[test]
    fn a_run_that_only_started_has_no_stages() {
        let temp = tempfile::tempdir().unwrap();
        write_json_file(&temp.path().join("manifest.json"), &manifest(RunStatus::Running)).unwrap();
        let view = RunView::open(temp.path()).unwrap();
        assert!(view.checkpoint.is_none() && view.result.is_none());
        assert!(view.stages().is_empty());
        assert_eq!(view.current_node(), None);
        assert_eq!(view.artifacts(), None);
    }

    #[test]
    fn stages_sum_visits_durations_and_tokens_and_prefer_the_checkpoint_outcome() {
        let temp = tempfile::tempdir().unwrap();
        write_json_file(&temp.path().join("manifest.json"), &manifest(RunStatus::Running)).unwrap();
        let result = RunResult {
            run_id: "r1".into(),
            status: RunStatus::Paused,
            failure_reason: None,
            completed_nodes: vec!["start".into(), "fix".into(), "fix".into()],
            duration_ms: 30,
            stages: vec![
                record("start", 1, StageStatus::Success, 1, None),
                record("fix", 1, StageStatus::Fail, 10, Some((5, 2))),
                record("fix", 2, StageStatus::Fail, 20, Some((7, 3))),
            ],
            run_dir: "x".into(),
            usage: None,
            dry_run: None,
        };
        write_json_file(&temp.path().join("result.json"), &result).unwrap();
        let checkpoint = Checkpoint {
            run_id: "r1".into(),
            status: RunStatus::Running,
            current_node: "test".into(),
            next_node: Some("exit".into()),
            completed_nodes: vec!["start".into(), "fix".into(), "fix".into(), "fix".into(), "test".into()],
            node_outcomes: BTreeMap::from([
                ("start".into(), StageStatus::Success),
                ("fix".into(), StageStatus::Success),
                ("test".into(), StageStatus::Success),
            ]),
            node_visits: BTreeMap::from([("start".into(), 1), ("fix".into(), 3), ("test".into(), 1)]),
            node_retries: BTreeMap::new(),
            context: Context::new(),
            timestamp: String::new(),
            commit: None,
            journal_seq: None,
            partial: false,
        };
        write_json_file(&temp.path().join("checkpoint.json"), &checkpoint).unwrap();
        std::fs::create_dir_all(temp.path().join("artifacts/sub")).unwrap();
        std::fs::write(temp.path().join("artifacts/sub/b.txt"), "b").unwrap();
        std::fs::write(temp.path().join("artifacts/a.txt"), "a").unwrap();

        let view = RunView::open(temp.path()).unwrap();
        assert_eq!(view.status(), RunStatus::Running);
        assert_eq!(view.current_node(), Some("test"));
        assert_eq!(view.next_node(), Some("exit"));
        let stages = view.stages();
        let ids: Vec<_> = stages.iter().map(|s| s.node_id.as_str()).collect();
        assert_eq!(ids, ["start", "fix", "test"]);
        assert_eq!(stages[1].visits, 3);
        assert_eq!(stages[1].status, Some(StageStatus::Success));
        assert_eq!((stages[1].duration_ms, stages[1].input_tokens, stages[1].output_tokens), (30, 12, 5));
        assert_eq!(stages[2].visits, 1);
        let artifacts = view.artifacts().unwrap();
        assert_eq!(artifacts, ["a.txt", &format!("sub{}b.txt", std::path::MAIN_SEPARATOR)]);
    }
}
