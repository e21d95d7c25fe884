//! The engine's side of child runs ([`crate::stage::child_run`]): a child runs through the same engine,
//! with the parent's run options.

use super::{Engine, RunOptions, RunReport};
use crate::child_workflow::ChildWorkflowError;
use crate::graph::{Node, Workflow};
use crate::load::ChildWorkflows;
use crate::stage::child_run::{ChildEnd, ChildRunError, ChildRunRequest, ChildRunner, ChildSlot};
use crate::ValidWorkflow;

/// Runs child workflows (the ones loaded with the run's workflow) with the engine and run options
/// of the run whose stage asks. Cheap to copy.
#[derive(Clone, Copy)]
pub struct ChildLauncher<'a> {
    engine: &'a Engine,
    options: &'a RunOptions,
    children: &'a ChildWorkflows,
}

impl<'a> ChildLauncher<'a> {
    pub fn new(engine: &'a Engine, options: &'a RunOptions, children: &'a ChildWorkflows) -> Self {
        ChildLauncher { engine, options, children }
    }
}

#[async_trait::async_trait]
impl ChildRunner for ChildLauncher<'_> {
    fn first_unhandled<'w>(&self, workflow: &'w Workflow) -> Option<&'w Node> {
        self.engine.handlers.first_unhandled(workflow)
    }

    fn child_workflow(&self, node_id: &str) -> Option<Result<&ValidWorkflow, &ChildWorkflowError>> {
        self.children.of(node_id)
    }

    async fn run(&self, request: ChildRunRequest<'_>) -> Result<ChildEnd, ChildRunError> {
        let ChildRunRequest { workflow, slot, work_dir, context, link, observe, cancel } = request;
        let mut options = RunOptions {
            run_dir: None,
            run_id: None,
            work_dir,
            dry_run: self.options.dry_run,
            context,
            worktree: false,
            checkpoint_sync: self.options.checkpoint_sync,
            keep_worktrees: self.options.keep_worktrees,
            limits: self.options.limits,
            parent: Some(link),
            launch: self.options.launch.clone(),
            max_output: self.options.max_output,
            sandbox: self.options.sandbox,
            user_sandbox: self.options.user_sandbox,
            // The parent run's hooks tell about the parent run.
            hooks: Default::default(),
            config_files: self.options.config_files.clone(),
            // A child run carries its parent's labels.
            labels: self.options.labels.clone(),
        };
        let report = match slot {
            ChildSlot::Fresh(dir) => {
                options.run_dir = Some(dir);
                self.engine.run(workflow, &options, observe, cancel).await
            }
            ChildSlot::Unfinished(saved) => {
                options.run_dir = Some(saved.dir.root().to_path_buf());
                self.engine.resume(workflow, *saved, &options, observe, cancel).await
            }
            ChildSlot::Finished(result) => return Ok(ChildEnd { result: *result, pause: None }),
        };
        let RunReport { result, pause, .. } = report.map_err(|error| ChildRunError(Box::new(error)))?;
        Ok(ChildEnd { result, pause })
    }
}
