//! What every line of a run shares: the engine, the workflow, the run directory, the event log,
//! the artifact store, visit counters, timings and the journal. Branches borrow it concurrently.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::{Mutex, MutexGuard};

use super::scheduler::{Engine, RunOptions, RunTimings};
use crate::context::artifacts::ArtifactStore;
use crate::event::{Event, SelectedEdge};
use crate::event_log::EventLog;
use crate::graph::Workflow;
use crate::run_dir::journal;
use crate::run_dir::{AssumedEdge, DryRunWalk, RunDir, WalkedEdge};

/// What every line of a run shares; branches borrow it concurrently.
pub(super) struct RunScope<'e> {
    pub engine: &'e Engine,
    pub workflow: &'e Workflow,
    /// The child workflows of its manager stages, loaded with it.
    pub children: &'e crate::load::ChildWorkflows,
    pub options: &'e RunOptions,
    pub run_dir: RunDir,
    pub run_id: String,
    pub events: EventLog,
    /// Where context values too large for checkpoints go.
    pub artifacts: ArtifactStore,
    /// Visits per node over all lines, so that every visit gets its own stage directory.
    pub visits: Mutex<VisitCounts>,
    pub timings: Mutex<RunTimings>,
    /// The run's journal (`journal.jsonl`), appended to by the main line.
    pub journal: Mutex<journal::Writer>,
    /// A dry run's walk over all lines: the edges taken, and those taken on an assumption.
    pub walk: Mutex<Walk>,
}

/// The edges a run took (recorded in a dry run, to list those never taken) and the ones a dry run
/// took on an assumption.
#[derive(Debug, Default)]
pub(super) struct Walk {
    taken: BTreeSet<WalkedEdge>,
    assumed: Vec<AssumedEdge>,
}

impl Walk {
    /// The dry run's report: its assumptions, and the workflow's edges it never took.
    pub fn report(&self, workflow: &Workflow) -> DryRunWalk {
        let graph = workflow.graph();
        let mut never_taken = Vec::new();
        // Edge indices follow the file's order.
        for edge in graph.edge_indices() {
            let Some((from, to)) = graph.edge_endpoints(edge) else { continue };
            let walked = WalkedEdge { from: graph[from].id.clone(), to: graph[to].id.clone() };
            if !self.taken.contains(&walked) && !never_taken.contains(&walked) {
                never_taken.push(walked);
            }
        }
        DryRunWalk { assumed: self.assumed.clone(), never_taken }
    }
}

/// Visit counters per node, and which changed since the journal last recorded them.
#[derive(Debug, Default)]
pub(super) struct VisitCounts {
    counts: BTreeMap<String, u32>,
    unjournaled: BTreeSet<String>,
}

impl VisitCounts {
    pub fn new(counts: BTreeMap<String, u32>) -> VisitCounts {
        VisitCounts { counts, unjournaled: BTreeSet::new() }
    }

    /// Counts one more visit of `node`; returns its number.
    pub fn count(&mut self, node: &str) -> u32 {
        let count = self.counts.entry(node.to_string()).or_insert(0);
        // Never wraps: a count this high is past every visit cap.
        *count = count.saturating_add(1);
        let count = *count;
        self.unjournaled.insert(node.to_string());
        count
    }

    /// How many visits of `node` were counted: the number of its latest visit.
    pub fn latest(&self, node: &str) -> u32 {
        self.counts.get(node).copied().unwrap_or(0)
    }

    /// Takes back the last visit of `node` (it will run again as the same visit).
    pub fn uncount(&mut self, node: &str) {
        if let Some(count) = self.counts.get_mut(node) {
            *count -= 1;
            if *count == 0 {
                self.counts.remove(node);
            }
            self.unjournaled.insert(node.to_string());
        }
    }

    /// Makes `node`'s count at least `visit` (visits a journaled parallel branch made).
    pub fn raise(&mut self, node: &str, visit: u32) {
        let count = self.counts.entry(node.to_string()).or_insert(0);
        if *count < visit {
            *count = visit;
            self.unjournaled.insert(node.to_string());
        }
    }

    pub fn counts(&self) -> &BTreeMap<String, u32> {
        &self.counts
    }

    /// The counters changed since [`VisitCounts::mark_journaled`] (0 for a node without visits).
    pub fn changed(&self) -> BTreeMap<String, u32> {
        self.unjournaled
            .iter()
            .map(|node| (node.clone(), self.counts.get(node).copied().unwrap_or(0)))
            .collect()
    }

    pub fn mark_journaled(&mut self) {
        self.unjournaled.clear();
    }

    /// Every counter is new to the journal (a journal started afresh).
    pub fn mark_all_unjournaled(&mut self) {
        self.unjournaled = self.counts.keys().cloned().collect();
    }
}

impl RunScope<'_> {
    pub fn visits(&self) -> MutexGuard<'_, VisitCounts> {
        self.visits.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn journal(&self) -> MutexGuard<'_, journal::Writer> {
        self.journal.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn timings(&self) -> MutexGuard<'_, RunTimings> {
        self.timings.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    pub fn walk(&self) -> MutexGuard<'_, Walk> {
        self.walk.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Emits `edge.selected`; a dry run also records the edge as taken, and as assumed when a
    /// dry-run rule chose it (`why` says which).
    pub fn edge_selected(&self, mut edge: SelectedEdge, why: Option<String>) {
        if self.options.dry_run {
            let mut walk = self.walk();
            walk.taken.insert(WalkedEdge { from: edge.from.clone(), to: edge.to.clone() });
            if let Some(why) = &why {
                let (from, to, reason) = (edge.from.clone(), edge.to.clone(), edge.reason.clone());
                walk.assumed.push(AssumedEdge { from, to, reason, why: why.clone() });
            }
        }
        edge.assumption = why;
        self.events.run_event(Event::EdgeSelected(edge));
    }
}
