//! A run's progress, read back from its directory, to draw over the workflow graph: which stages
//! ended how, how often each ran, where the run stands, and which edges it took.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::outcome::StageStatus;
use crate::run_dir::layout;
use crate::run_dir::Checkpoint;
use crate::run_status::RunStatus;

/// Why a directory's progress cannot be read.
#[derive(Debug, thiserror::Error)]
pub enum OverlayError {
    #[error("`{}` is not a fabro run directory (no {missing})", path.display())]
    NotARun { path: PathBuf, missing: &'static str },
    #[error("cannot read `{}`: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("`{}` is corrupt: {message}", path.display())]
    Corrupt { path: PathBuf, message: String },
}

/// How often a run went from one node to another, split by the kind of edge that was taken: the
/// `edge.selected` event names the endpoints and the reason, not the edge, so when two edges join
/// the same nodes the reason tells a conditional edge (`condition`) from an unconditional one.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct EdgeCounts {
    /// Selected because its condition was true.
    pub conditional: u32,
    /// Selected by preferred label, suggested next id, weight or lexical order.
    pub unconditional: u32,
    /// Selected for a reason this version does not know (counts for either kind).
    pub unknown: u32,
}

/// How an `edge.selected` event chose its edge.
enum EdgeKind {
    Conditional,
    Unconditional,
    Unknown,
}

/// What happened to one node in a run, as drawn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NodeState {
    /// Its last visit ended in success or partial success.
    Succeeded,
    /// Its last visit ended in fail.
    Failed,
    /// Its last visit asked for a retry.
    Retry,
    /// Its last visit was skipped.
    Skipped,
    /// The stage the unfinished run is at (running, paused at it, or interrupted in it).
    Active,
    /// The run never reached it.
    NotReached,
}

/// A run's progress over its workflow.
#[derive(Debug, Clone)]
pub struct Overlay {
    pub status: RunStatus,
    /// Where an unfinished run continues (the paused gate, the interrupted or running stage).
    pub next_node: Option<String>,
    /// The outcome of each node's last visit.
    pub outcomes: BTreeMap<String, StageStatus>,
    /// How often each node ran.
    pub visits: BTreeMap<String, u32>,
    /// `edge.selected` events by (from, to).
    pub edges: BTreeMap<(String, String), EdgeCounts>,
}

impl Overlay {
    /// Reads `checkpoint.json` (required) and `events.jsonl` (optional: without it no edge is
    /// highlighted) of a run directory. Event lines that do not parse, such as a line cut short
    /// by a crash, are skipped.
    pub fn from_run_dir(root: &Path) -> Result<Overlay, OverlayError> {
        let checkpoint: Checkpoint = match crate::run_dir::journal::load_checkpoint(root) {
            Ok(Some(checkpoint)) => checkpoint,
            Ok(None) => {
                return Err(OverlayError::NotARun { path: root.to_path_buf(), missing: layout::CHECKPOINT })
            }
            Err(error) => {
                return Err(match error.corrupt_file() {
                    Ok((path, message)) => OverlayError::Corrupt { path, message },
                    Err((path, source)) => OverlayError::Read { path, source },
                })
            }
        };
        let events_path = root.join(layout::EVENTS);
        let events = match crate::regular_file::read_to_string(
            &events_path,
            crate::regular_file::FileKind::EventLog,
        ) {
            Ok(text) => text,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => String::new(),
            Err(source) => return Err(OverlayError::Read { path: events_path, source }),
        };
        let mut overlay = Overlay::from_checkpoint(&checkpoint);
        overlay.read_events(&events);
        Ok(overlay)
    }

    /// The node states of a checkpoint, without any edges.
    pub fn from_checkpoint(checkpoint: &Checkpoint) -> Overlay {
        Overlay {
            status: checkpoint.status,
            next_node: checkpoint.next_node.clone(),
            outcomes: checkpoint.node_outcomes.clone(),
            visits: checkpoint.node_visits.clone(),
            edges: BTreeMap::new(),
        }
    }

    /// Counts the `edge.selected` events of an `events.jsonl` text. Jumps that follow no edge
    /// (`retry_target`, `goal_gate`, `join`) are not counted. After `fabro rewind` (event
    /// `run.rewound`), only the history up to the checkpoint it went back to counts.
    pub fn read_events(&mut self, events: &str) {
        let mut taken: Vec<((String, String), EdgeKind)> = Vec::new();
        // How many edges had been taken at the checkpoint after each main-line stage visit.
        let mut taken_at: BTreeMap<(String, u64), usize> = BTreeMap::new();
        let mut last_visit: BTreeMap<String, u64> = BTreeMap::new();
        for line in events.lines() {
            let Ok(event) = serde_json::from_str::<serde_json::Value>(line) else { continue };
            let field = |name: &str| event.get(name).and_then(|v| v.as_str());
            let node = field("node_id").unwrap_or_default().to_string();
            match field("event").unwrap_or_default() {
                "stage.completed" | "stage.failed" if event.get("branch_id").is_none() => {
                    let visit = event.get("visit").and_then(serde_json::Value::as_u64).unwrap_or(0);
                    last_visit.insert(node, visit);
                }
                "checkpoint.saved" => {
                    if let Some(&visit) = last_visit.get(&node) {
                        taken_at.insert((node, visit), taken.len());
                    }
                }
                "run.rewound" => {
                    let to = field("to").unwrap_or_default().to_string();
                    let visit = event.get("visit").and_then(serde_json::Value::as_u64).unwrap_or(0);
                    if let Some(&kept) = taken_at.get(&(to, visit)) {
                        taken.truncate(kept);
                    }
                }
                "edge.selected" => {
                    let (Some(from), Some(to)) = (field("from"), field("to")) else { continue };
                    let kind = match field("reason") {
                        Some("retry_target" | "goal_gate" | "join") => continue,
                        Some("condition") => EdgeKind::Conditional,
                        Some("preferred_label" | "suggested_next_id" | "weight" | "lexical" | "fan_out") => {
                            EdgeKind::Unconditional
                        }
                        _ => EdgeKind::Unknown,
                    };
                    taken.push(((from.to_string(), to.to_string()), kind));
                }
                _ => {}
            }
        }
        for (key, kind) in taken {
            let counts = self.edges.entry(key).or_default();
            match kind {
                EdgeKind::Conditional => counts.conditional += 1,
                EdgeKind::Unconditional => counts.unconditional += 1,
                EdgeKind::Unknown => counts.unknown += 1,
            }
        }
    }

    /// Whether the run can still continue (running, paused or interrupted).
    pub fn is_unfinished(&self) -> bool {
        matches!(self.status, RunStatus::Running | RunStatus::Paused | RunStatus::Interrupted)
    }

    pub fn node_state(&self, id: &str) -> NodeState {
        if self.is_unfinished() && self.next_node.as_deref() == Some(id) {
            return NodeState::Active;
        }
        match self.outcomes.get(id) {
            // A custom outcome (kilroy's `needs_dod`) ended the stage without failing it.
            Some(StageStatus::Success | StageStatus::PartialSuccess | StageStatus::Custom(_)) => {
                NodeState::Succeeded
            }
            Some(StageStatus::Fail) => NodeState::Failed,
            Some(StageStatus::Retry) => NodeState::Retry,
            Some(StageStatus::Skipped) => NodeState::Skipped,
            // Visited but no outcome recorded: the stage was in flight.
            None if self.visits(id) > 0 => NodeState::Active,
            None => NodeState::NotReached,
        }
    }

    pub fn visits(&self, id: &str) -> u32 {
        self.visits.get(id).copied().unwrap_or(0)
    }

    /// How often the run took an edge from `from` to `to` that is conditional or not.
    pub fn times_taken(&self, from: &str, to: &str, conditional: bool) -> u32 {
        let Some(counts) = self.edges.get(&(from.to_string(), to.to_string())) else { return 0 };
        let by_kind = if conditional { counts.conditional } else { counts.unconditional };
        by_kind + counts.unknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overlay(status: RunStatus, next: Option<&str>) -> Overlay {
        Overlay {
            status,
            next_node: next.map(String::from),
            outcomes: BTreeMap::from([
                ("a".to_string(), StageStatus::Success),
                ("b".to_string(), StageStatus::Fail),
                ("c".to_string(), StageStatus::PartialSuccess),
            ]),
            visits: BTreeMap::from([("a".to_string(), 2), ("b".to_string(), 1), ("c".to_string(), 1)]),
            edges: BTreeMap::new(),
        }
    }

    #[test]
    fn node_states_follow_outcomes_and_the_next_node_of_an_unfinished_run() {
        let paused = overlay(RunStatus::Paused, Some("a"));
        assert_eq!(paused.node_state("a"), NodeState::Active);
        assert_eq!(paused.node_state("b"), NodeState::Failed);
        assert_eq!(paused.node_state("c"), NodeState::Succeeded);
        assert_eq!(paused.node_state("d"), NodeState::NotReached);
        let done = overlay(RunStatus::Succeeded, Some("a"));
        assert_eq!(done.node_state("a"), NodeState::Succeeded);
        assert_eq!(done.visits("a"), 2);
        assert_eq!(done.visits("d"), 0);
    }

    #[test]
    fn edge_events_are_counted_by_kind_and_jumps_are_ignored() {
        let mut overlay = overlay(RunStatus::Succeeded, None);
        let events = [
            r#"{"event":"edge.selected","from":"a","to":"b","reason":"condition"}"#,
            r#"{"event":"edge.selected","from":"a","to":"b","reason":"weight"}"#,
            r#"{"event":"edge.selected","from":"a","to":"b","reason":"weight"}"#,
            r#"{"event":"edge.selected","from":"b","to":"a","reason":"retry_target"}"#,
            r#"{"event":"edge.selected","from":"c","to":"a"}"#,
            r#"{"event":"stage.started","node_id":"a"}"#,
            r#"{"event":"edge.selected","from":"c","#,
        ]
        .join("\n");
        overlay.read_events(&events);
        assert_eq!(overlay.times_taken("a", "b", true), 1);
        assert_eq!(overlay.times_taken("a", "b", false), 2);
        assert_eq!(overlay.times_taken("b", "a", false), 0);
        assert_eq!(overlay.times_taken("c", "a", true), 1);
        assert_eq!(overlay.times_taken("c", "a", false), 1);
        assert_eq!(overlay.times_taken("x", "y", false), 0);
    }

    #[test]
    fn a_directory_without_a_checkpoint_is_not_a_run() {
        let temp = tempfile::tempdir().unwrap();
        let error = Overlay::from_run_dir(temp.path()).unwrap_err();
        assert!(matches!(error, OverlayError::NotARun { missing: "checkpoint.json", .. }), "{error}");
        std::fs::write(temp.path().join("checkpoint.json"), "{").unwrap();
        let error = Overlay::from_run_dir(temp.path()).unwrap_err();
        assert!(matches!(error, OverlayError::Corrupt { .. }), "{error}");
    }
}
