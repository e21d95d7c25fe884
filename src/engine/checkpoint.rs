//! The main line's records: a journal entry after every stage (what changed since the last one),
//! `checkpoint.json` snapshots, and the pause when the records cannot be saved.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use super::walker::{Step, Walker};
use crate::event::Event;
use crate::event_log::now_rfc3339;
use crate::graph::Node;
use crate::outcome::{Pause, PauseKind};
use crate::run_dir::journal::{self, Entry};
use crate::run_dir::CheckpointRef;
use crate::run_status::RunStatus;

impl Walker<'_> {
    /// Records the main line's state in the run's journal: the stages completed since the last
    /// entry, the context and counters that changed, where the run goes next. One append, made
    /// durable as `--checkpoint-sync` says; `checkpoint.json` is rewritten as a snapshot every
    /// [`journal::SNAPSHOT_EVERY`] entries (compact) and whole when the run stops going on. An
    /// error says why the state could not be recorded (it is then not durable); branches are
    /// recorded by their parallel stage.
    pub fn save_checkpoint(
        &mut self,
        status: RunStatus,
        current: &str,
        next: Option<&str>,
    ) -> Result<(), String> {
        if !self.is_main() {
            return Ok(());
        }
        let scope = Arc::clone(&self.scope);
        let clock = Instant::now();
        scope.events.flush();
        scope.timings().events += clock.elapsed();
        let clock = Instant::now();
        let mut entry = self.journal_entry(status, current, next);
        let appended = scope.journal().append(&mut entry);
        let written = match appended {
            Ok(seq) => {
                self.journaled_stages = self.state.summaries.len();
                self.journal_from_scratch = false;
                self.state.context.mark_journaled();
                scope.visits().mark_journaled();
                let whole = status != RunStatus::Running;
                if whole || seq % journal::snapshot_every() == 0 {
                    self.write_snapshot(status, current, next, seq, whole)
                } else {
                    Ok(())
                }
            }
            Err(error) => Err(format!("cannot append to {}: {error}", scope.journal().path().display())),
        };
        {
            let mut timings = scope.timings();
            timings.checkpoints += clock.elapsed();
            timings.checkpoint_count += 1;
        }
        match written {
            Ok(()) => {
                scope.events.run_event(Event::CheckpointSaved { node_id: current.to_string(), status });
                Ok(())
            }
            Err(error) => {
                tracing::warn!(%error, "checkpoint not saved");
                scope.events.run_event(Event::CheckpointFailed { error: error.clone() });
                Err(error)
            }
        }
    }

    /// The journal entry for the state now: what changed since the last one, or everything for
    /// a journal started afresh.
    fn journal_entry(&self, status: RunStatus, current: &str, next: Option<&str>) -> Entry {
        let from_scratch = self.journal_from_scratch;
        let visits = {
            let mut visits = self.scope.visits();
            if from_scratch {
                visits.mark_all_unjournaled();
            }
            visits.changed()
        };
        let delta = match from_scratch {
            true => crate::context::Delta { set: self.state.context.to_map(), removed: Vec::new() },
            false => self.state.context.delta(),
        };
        let retries = match from_scratch {
            true => self.state.retries.clone(),
            false => self
                .state
                .retries
                .get(current)
                .map(|n| BTreeMap::from([(current.to_string(), *n)]))
                .unwrap_or_default(),
        };
        let first_new = if from_scratch { 0 } else { self.journaled_stages };
        Entry {
            seq: 0,
            ts: now_rfc3339(),
            status,
            node: current.to_string(),
            next: next.map(str::to_string),
            reset: from_scratch,
            stages: self.state.summaries.get(first_new..).unwrap_or_default().to_vec(),
            set: delta.set,
            removed: delta.removed,
            visits,
            retries,
            commit: self.worktree.last_commit.clone(),
        }
    }

    /// Writes `checkpoint.json`: the whole state, or (`whole` false, while the run goes on) the
    /// state without its per-stage history, which the journal holds.
    fn write_snapshot(
        &self,
        status: RunStatus,
        current: &str,
        next: Option<&str>,
        seq: u64,
        whole: bool,
    ) -> Result<(), String> {
        let scope = &self.scope;
        let mode = scope.options.checkpoint_sync;
        scope.journal().sync().map_err(|error| format!("cannot sync the journal: {error}"))?;
        // A compact snapshot copies no per-node map.
        let visits = if whole { scope.visits().counts().clone() } else { BTreeMap::new() };
        let (empty_list, empty_statuses, empty_counts) = (Vec::new(), BTreeMap::new(), BTreeMap::new());
        let checkpoint = CheckpointRef {
            run_id: &scope.run_id,
            status,
            current_node: current,
            next_node: next,
            completed_nodes: if whole { &self.state.completed } else { &empty_list },
            node_outcomes: if whole { &self.state.outcomes } else { &empty_statuses },
            node_visits: &visits,
            node_retries: if whole { &self.state.retries } else { &empty_counts },
            context: &self.state.context,
            timestamp: now_rfc3339(),
            commit: self.worktree.last_commit.as_deref(),
            journal_seq: Some(seq),
            partial: !whole,
        };
        scope.run_dir.write_snapshot(&checkpoint, mode.durability()).map_err(|error| error.to_string())
    }

    /// Pauses the run after `node` because its journal entry or stage record could not be saved:
    /// going on would run stages whose effects nothing records.
    pub(super) fn pause_undurable(&self, node: &Node, visit: u32, error: &str) -> Step {
        let reason = format!(
            "the records of `{}` could not be saved ({error}); the run pauses because going on would run \
             stages nothing records. Free the space (or fix the error) and `fabro resume` continues after the \
             last stage the journal holds",
            node.id
        );
        let pause = Pause::new(PauseKind::Storage, reason);
        self.scope.events.stage_event(&node.id, visit, Event::run_paused(&pause));
        Step::Pause(pause)
    }
}
