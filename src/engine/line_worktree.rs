//! Where a line's stages run: `--workdir`, the run's git worktree (worktree mode, main line), or a
//! parallel branch's worktree; and, in worktree mode, the commit after every stage.

use std::path::PathBuf;

use crate::event::Event;
use crate::event_log::EventLog;
use crate::graph::Node;
use crate::outcome::StageStatus;
use crate::worktree::RunWorktree;

/// One line's work directory and, in worktree mode, the run's worktree.
#[derive(Debug)]
pub(super) struct LineWorktree {
    /// Where stages run.
    pub work_dir: PathBuf,
    /// Worktree mode (main line only): the run's worktree, committed after every stage.
    pub worktree: Option<RunWorktree>,
    /// The worktree commit after the last completed stage.
    pub last_commit: Option<String>,
}

impl LineWorktree {
    /// Stages run in `work_dir`, nothing is committed.
    pub fn plain(work_dir: PathBuf) -> LineWorktree {
        LineWorktree { work_dir, worktree: None, last_commit: None }
    }

    /// Worktree mode when `worktree` is given (stages run in it), else `work_dir`.
    pub fn new(
        work_dir: PathBuf,
        worktree: Option<RunWorktree>,
        last_commit: Option<String>,
    ) -> LineWorktree {
        let work_dir = worktree.as_ref().map_or(work_dir, |w| w.path().to_path_buf());
        LineWorktree { work_dir, worktree, last_commit }
    }

    /// Worktree mode: commits what the stage changed; a failed commit is reported, not fatal.
    pub fn commit_stage(
        &mut self,
        events: &EventLog,
        run_id: &str,
        node: &Node,
        visit: u32,
        status: StageStatus,
    ) {
        let Some(worktree) = &self.worktree else { return };
        match worktree.commit_stage(run_id, &node.id, visit, status.as_str()) {
            Ok(sha) => {
                events.stage_event(&node.id, visit, Event::WorktreeCommitted { commit: sha.clone() });
                self.last_commit = Some(sha);
            }
            Err(error) => {
                tracing::warn!(%error, "worktree commit failed");
                events.stage_event(&node.id, visit, Event::WorktreeCommitFailed { error: error.to_string() });
            }
        }
    }

    /// In worktree mode, how to merge the run's branch.
    pub fn merge_hint(&self) -> Option<String> {
        self.worktree.as_ref().map(RunWorktree::merge_hint)
    }
}
