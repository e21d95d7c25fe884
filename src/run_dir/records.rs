//! The JSON records of a run directory.

use std::collections::BTreeMap;

use crate::context::Context;
use crate::graph::HandlerType;
use crate::outcome::{Outcome, StageStatus};
use crate::run_status::RunStatus;
use crate::usage::UsageTotals;

/// `manifest.json`: what ran, from where, when, and how it ended.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Manifest {
    pub run_id: String,
    pub workflow: String,
    pub source_path: String,
    pub source_sha256: String,
    pub goal: String,
    pub work_dir: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    pub status: RunStatus,
    pub tool_version: String,
    /// The run directory this run was restarted from by a `loop_restart` edge.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarted_from: Option<String>,
    /// The run directory a `loop_restart` edge continued this run in.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restarted_as: Option<String>,
    /// The run and stage this run was forked from (`fabro fork`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forked_from: Option<super::history::ForkOrigin>,
    /// The git worktree the run works in (`fabro run --worktree`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worktree: Option<WorktreeRecord>,
    /// How LLM stages were answered, so `fabro resume` goes on the same way.
    #[serde(default, skip_serializing_if = "LaunchRecord::is_default")]
    pub launch: LaunchRecord,
    /// What a paused run waits for; absent unless the run is paused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pause: Option<PauseRecord>,
    /// `--label key=value`: what the run is, for finding it (`fabro runs --label`, `fabro serve`).
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub labels: std::collections::BTreeMap<String, String>,
    /// The run's inputs (`--input`, `--inputs`): a resume loads the workflow with them again.
    #[serde(default, skip_serializing_if = "std::collections::BTreeMap::is_empty")]
    pub inputs: crate::graph::inputs::Inputs,
    /// The containers its stages ran in (sandbox=podman or docker): id, image, image digest; as
    /// `containers.json` holds them when the run stopped.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub containers: Vec<crate::outcome::ContainerRecord>,
    /// The commit the work directory's repository was at when the run started (its HEAD); absent
    /// outside git and for runs made before fabro recorded it. What the run changed is the diff
    /// from it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub base_commit: Option<String>,
}

/// Why a run paused, as its manifest records it: the kind (`answer`, `ceiling`, `stage_ceiling`,
/// `step`, `storage`, `provider`) and the sentence that says what to do.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct PauseRecord {
    pub kind: String,
    pub reason: String,
}

impl PauseRecord {
    pub fn of(pause: &crate::outcome::Pause) -> PauseRecord {
        PauseRecord { kind: pause.kind.as_str().to_string(), reason: pause.reason.clone() }
    }
}

#[cfg(test)]
impl Manifest {
    /// A manifest for unit tests: workflow `w` in `/tmp`, nothing optional set.
    pub(crate) fn sample(run_id: &str, started_at: &str, status: RunStatus) -> Manifest {
        Manifest {
            run_id: run_id.into(),
            workflow: "w".into(),
            source_path: "w.dot".into(),
            source_sha256: String::new(),
            goal: String::new(),
            work_dir: "/tmp".into(),
            started_at: started_at.into(),
            finished_at: None,
            status,
            tool_version: "0".into(),
            restarted_from: None,
            restarted_as: None,
            forked_from: None,
            worktree: None,
            launch: LaunchRecord::default(),
            pause: None,
            labels: Default::default(),
            inputs: Default::default(),
            containers: Vec::new(),
            base_commit: None,
        }
    }
}

/// How a run's LLM stages are answered (`--simulate`, `--responses FILE`, `--dry-run`, else the
/// real providers) and the model and provider overrides it started with: `fabro resume` and the
/// commands fabro prints reuse them unless told otherwise. Absent from the manifest of a run on
/// the real providers without overrides.
#[derive(Debug, Clone, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct LaunchRecord {
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub simulate: bool,
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub dry_run: bool,
    /// The scripted responses file, as an absolute path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub responses: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub model: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub provider: Option<String>,
    /// `--small-model`: the model of agentic tool wrappers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub small_model: Option<String>,
    /// `--sandbox`: a resume runs the rest of the run in the same sandbox.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
    /// The run's reference files (the graph's `context_files` and `--context-file`), resolved to
    /// absolute paths when the run started, so a resume shows the same ones.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub context_files: Vec<crate::agent::context::reference_files::ReferenceFile>,
    /// `--mcp-config`, as an absolute path.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub mcp_config: Option<String>,
    /// `--permissions`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub permissions: Option<String>,
    /// The run configuration the run started from (`fabro run run.toml`), as an absolute path:
    /// a resume reads its settings layer again (from the texts the run started with).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_config: Option<String>,
}

impl LaunchRecord {
    pub fn is_default(&self) -> bool {
        *self == LaunchRecord::default()
    }

    /// True when LLM stages are answered without a provider.
    pub fn is_offline(&self) -> bool {
        self.simulate || self.dry_run || self.responses.is_some()
    }
}

/// Where a run's git worktree is and which branch it commits to.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct WorktreeRecord {
    pub path: String,
    pub branch: String,
}

/// `checkpoint.json`: the state of a run. With a journal (`journal_seq` set) it is a snapshot:
/// the state after that journal entry; `partial` snapshots (written every
/// [`super::journal::SNAPSHOT_EVERY`] entries while the run goes on) hold no per-stage history,
/// which the journal has. Runs made before the journal rewrote it whole after every stage.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct Checkpoint {
    pub run_id: String,
    pub status: RunStatus,
    /// The stage that just completed (or, when paused, the stage waiting for input).
    pub current_node: String,
    /// Where the run goes next; `None` when it has ended.
    pub next_node: Option<String>,
    #[serde(default)]
    pub completed_nodes: Vec<String>,
    #[serde(default)]
    pub node_outcomes: BTreeMap<String, StageStatus>,
    #[serde(default)]
    pub node_visits: BTreeMap<String, u32>,
    #[serde(default)]
    pub node_retries: BTreeMap<String, u32>,
    pub context: Context,
    pub timestamp: String,
    /// The worktree commit made right after the last completed stage (worktree mode).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub commit: Option<String>,
    /// The journal entry this snapshot is the state after.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub journal_seq: Option<u64>,
    /// Without the per-stage history (completed nodes, outcomes, counters): read the journal.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
}

/// The same record as [`Checkpoint`], borrowing the engine's state so that saving it after every
/// stage copies nothing. It serializes to exactly what [`Checkpoint`] reads.
#[derive(Debug, serde::Serialize)]
pub struct CheckpointRef<'a> {
    pub run_id: &'a str,
    pub status: RunStatus,
    pub current_node: &'a str,
    pub next_node: Option<&'a str>,
    pub completed_nodes: &'a [String],
    pub node_outcomes: &'a BTreeMap<String, StageStatus>,
    pub node_visits: &'a BTreeMap<String, u32>,
    pub node_retries: &'a BTreeMap<String, u32>,
    pub context: &'a Context,
    pub timestamp: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub commit: Option<&'a str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub journal_seq: Option<u64>,
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub partial: bool,
}

/// One visit of one stage, as `result.json` lists it.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct StageRecord {
    pub node_id: String,
    pub visit: u32,
    pub status: StageStatus,
    pub duration_ms: u64,
    /// The stage's handler type (`agent`, `command`, ...); None in records from before handlers
    /// were recorded.
    #[serde(default, with = "recorded_handler")]
    pub handler: Option<HandlerType<String>>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure_reason: Option<String>,
    /// Tokens an LLM stage used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<crate::usage::Usage>,
    /// The parallel branch the stage ran in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    /// Estimated cost of an LLM stage in US dollars, when its model's price is known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub cost_usd: Option<f64>,
    /// The stage's directory relative to the run directory (`stages/plan/1.2` when the visit ran
    /// again); none for routing stages, which keep no files, and in records from before fabro
    /// wrote it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dir: Option<String>,
}

impl StageRecord {
    /// The visit's directory in the run directory `root`: the recorded one, else (older records)
    /// the directory the visit finished in.
    pub fn dir_in(&self, root: &std::path::Path) -> Option<std::path::PathBuf> {
        match &self.dir {
            Some(dir) => Some(root.join(dir)),
            None => super::layout::finished_visit_dir(root, &self.node_id, self.visit),
        }
    }
}

impl UsageTotals {
    /// The totals of `stages`, or `None` when no stage used a model.
    pub fn of(stages: &[StageRecord]) -> Option<UsageTotals> {
        let mut totals: Option<UsageTotals> = None;
        for stage in stages {
            if stage.usage.is_none() && stage.cost_usd.is_none() {
                continue;
            }
            let total = totals.get_or_insert_with(UsageTotals::default);
            if let Some(usage) = &stage.usage {
                total.input_tokens = total.input_tokens.saturating_add(usage.input_tokens);
                total.output_tokens = total.output_tokens.saturating_add(usage.output_tokens);
            }
            if let Some(cost) = stage.cost_usd {
                total.cost_usd = Some(total.cost_usd.unwrap_or(0.0) + cost);
            }
        }
        totals
    }
}

/// `result.json`: how the run ended.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct RunResult {
    pub run_id: String,
    pub status: RunStatus,
    pub failure_reason: Option<String>,
    pub completed_nodes: Vec<String>,
    pub duration_ms: u64,
    pub stages: Vec<StageRecord>,
    pub run_dir: String,
    /// Tokens and estimated cost of all LLM stages.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub usage: Option<UsageTotals>,
    /// A dry run's walk: the edges it assumed where a real run decides, and those never taken.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub dry_run: Option<DryRunWalk>,
}

/// What a dry run assumed where a real run would decide (no condition held because simulated
/// stages set no context, or a loop reached the dry-run visit cap), and the workflow's edges it
/// never took, in the order the file declares them.
#[derive(Debug, Clone, Default, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct DryRunWalk {
    pub assumed: Vec<AssumedEdge>,
    pub never_taken: Vec<WalkedEdge>,
}

/// An edge a dry run took on an assumption, and which.
#[derive(Debug, Clone, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AssumedEdge {
    pub from: String,
    pub to: String,
    /// `dry_run_outcome`, `dry_run_weight` or `dry_run_loop_exit`, as in its `edge.selected` event.
    pub reason: String,
    /// The sentence that says why.
    pub why: String,
}

/// An edge of the workflow, by its ends.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
pub struct WalkedEdge {
    pub from: String,
    pub to: String,
}

/// `stages/<node>/<visit>/status.json`: the stage's outcome plus how it ran.
#[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
pub struct StageStatusFile {
    #[serde(flatten)]
    pub outcome: Outcome,
    #[serde(with = "recorded_handler")]
    pub handler: Option<HandlerType<String>>,
    /// The fidelity the stage ran with (`internal.fidelity`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub fidelity: Option<String>,
    /// The parallel branch the stage ran in, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub branch: Option<String>,
    pub attempts: u32,
    pub started_at: String,
    pub duration_ms: u64,
    /// Notes from the operator (step mode) this stage received in its preamble.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub operator_notes: Vec<String>,
    /// Where the stage's programs ran (`none`, `bwrap`), for stages that run programs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sandbox: Option<String>,
}

/// A record's `handler` field: the type's canonical name, or `""` when the handler is not known
/// (records from before handlers were recorded read as a missing field or `""`).
pub(crate) mod recorded_handler {
    use serde::{Deserialize, Deserializer, Serializer};

    use crate::graph::HandlerType;

    pub fn serialize<S: Serializer>(
        handler: &Option<HandlerType<String>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(handler.as_ref().map_or("", |handler| handler.name()))
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<HandlerType<String>>, D::Error> {
        let name = String::deserialize(deserializer)?;
        Ok((!name.is_empty()).then(|| HandlerType::from(name)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_borrowed_checkpoint_reads_back_as_a_checkpoint() {
        let mut context = Context::new();
        context.set("graph.goal", "ship");
        let completed = vec!["start".to_string(), "plan".to_string()];
        let outcomes = BTreeMap::from([("plan".to_string(), StageStatus::Success)]);
        let visits = BTreeMap::from([("plan".to_string(), 1)]);
        let retries = BTreeMap::new();
        let view = CheckpointRef {
            run_id: "r1",
            status: RunStatus::Running,
            current_node: "plan",
            next_node: Some("exit"),
            completed_nodes: &completed,
            node_outcomes: &outcomes,
            node_visits: &visits,
            node_retries: &retries,
            context: &context,
            timestamp: "2026-11-21T00:00:00Z".into(),
            commit: Some("abc123"),
            journal_seq: Some(7),
            partial: false,
        };
        let read: Checkpoint = serde_json::from_str(&serde_json::to_string(&view).unwrap()).unwrap();
        assert_eq!(read.completed_nodes, completed);
        assert_eq!(read.next_node.as_deref(), Some("exit"));
        assert_eq!(read.node_outcomes, outcomes);
        assert_eq!(read.context, context);
        assert_eq!(read.journal_seq, Some(7));
        assert!(!read.partial);
    }

    #[test]
    fn a_stage_records_handler_reads_and_writes_back_byte_for_byte() {
        let line = |handler: &str| {
            format!(r#"{{"node_id":"n","visit":1,"status":"success","duration_ms":3,"handler":{handler}}}"#)
        };
        for (handler, read) in [
            (r#""command""#, Some(HandlerType::Command)),
            (r#""deploy""#, Some(HandlerType::Custom("deploy".to_string()))),
            (r#""""#, None),
        ] {
            let record: StageRecord = serde_json::from_str(&line(handler)).unwrap();
            assert_eq!(record.handler, read);
            assert_eq!(serde_json::to_string(&record).unwrap(), line(handler));
        }
        // Records from before handlers were recorded have no field, and are written with "".
        let old = r#"{"node_id":"n","visit":1,"status":"success","duration_ms":3}"#;
        let record: StageRecord = serde_json::from_str(old).unwrap();
        assert_eq!(record.handler, None);
        assert_eq!(serde_json::to_string(&record).unwrap(), line(r#""""#));
    }

    #[test]
    fn a_run_directory_from_before_the_journal_reads_and_writes_back_unchanged() {
        fn round_trips<T: serde::Serialize + serde::de::DeserializeOwned>(path: &std::path::Path) {
            let text = std::fs::read_to_string(path).unwrap();
            let as_written: serde_json::Value = serde_json::from_str(&text).unwrap();
            let read: T = serde_json::from_str(&text).unwrap();
            assert_eq!(serde_json::to_value(&read).unwrap(), as_written, "{}", path.display());
        }
        let run = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pre_journal_run");
        round_trips::<RunResult>(&run.join("result.json"));
        let mut status_files = 0;
        for stage in std::fs::read_dir(run.join("stages")).unwrap().flatten() {
            for visit in std::fs::read_dir(stage.path()).unwrap().flatten() {
                round_trips::<StageStatusFile>(&visit.path().join("status.json"));
                status_files += 1;
            }
        }
        assert!(status_files >= 4);
    }
}

/// Whether a run's `labels` have every `key=value` of `wanted`.
pub fn has_labels(labels: &std::collections::BTreeMap<String, String>, wanted: &[(String, String)]) -> bool {
    wanted.iter().all(|(key, value)| labels.get(key) == Some(value))
}

/// Reads `key=value` as a run label. A key is letters, digits, `_`, `-`, `.` and `/`; the value
/// any text.
pub fn parse_label(text: &str) -> Result<(String, String), String> {
    let Some((key, value)) = text.split_once('=') else {
        return Err(format!("`{text}` is not a label: write key=value, e.g. team=payments"));
    };
    let key = key.trim();
    let valid = !key.is_empty()
        && key.chars().all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | '/'));
    if !valid {
        return Err(format!(
            "`{key}` is not a label key: use letters, digits, `_`, `-`, `.` and `/` (e.g. team=payments)"
        ));
    }
    Ok((key.to_string(), value.trim().to_string()))
}

#[cfg(test)]
mod label_tests {
    use super::*;

    #[test]
    fn labels_are_key_value_with_plain_keys() {
        assert_eq!(parse_label("team=payments"), Ok(("team".into(), "payments".into())));
        assert_eq!(parse_label("ticket=ABC-1=2"), Ok(("ticket".into(), "ABC-1=2".into())));
        assert!(parse_label("team").unwrap_err().contains("key=value"));
        assert!(parse_label("a b=c").unwrap_err().contains("not a label key"));
        let mut manifest = Manifest::sample("r", "t", RunStatus::Running);
        manifest.labels.insert("team".into(), "payments".into());
        assert!(has_labels(&manifest.labels, &[("team".into(), "payments".into())]));
        assert!(!has_labels(&manifest.labels, &[("team".into(), "search".into())]));
        assert!(has_labels(&manifest.labels, &[]));
    }
}
