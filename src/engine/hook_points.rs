//! Where the run tells its lifecycle hooks ([`crate::lifecycle_hooks`]) what happens (a run's
//! start and end, a stage's start, retry and end, a gate, an edge chosen, a parallel stage's
//! start and end, a checkpoint saved): the payload of each moment, where commands run (the stage's sandbox, else the work directory),
//! and the `hook.ran`/`hook.failed` events. A dry run fires nothing.

use std::path::Path;

use super::walker::Walker;
use crate::event::Event;
use crate::graph::{HandlerType, Node};
use crate::lifecycle_hooks::{Directive, Firing, HookEvent, HookPayload, HookReport, Veto};
use crate::outcome::{Outcome, StageStatus};
use crate::run_status::RunStatus;

impl Walker<'_> {
    fn hooks_fire(&self, event: HookEvent) -> bool {
        let options = self.scope.options;
        !options.dry_run && options.hooks.wants(event)
    }

    fn payload(&self, event: HookEvent) -> HookPayload {
        let scope = &self.scope;
        HookPayload::new(event, &scope.run_id, scope.workflow.name(), scope.run_dir.root())
    }

    /// Fires a run moment's hooks (run_start, run_complete, run_failed, run_paused) in the work
    /// directory; a run_start veto says why the run must not start.
    pub async fn fire_run_hooks(&self, status: Option<RunStatus>, reason: Option<&str>) -> Result<(), Veto> {
        let event = match status {
            None => HookEvent::RunStart,
            Some(RunStatus::Succeeded) => HookEvent::RunComplete,
            Some(RunStatus::Failed) => HookEvent::RunFailed,
            Some(RunStatus::Paused) => HookEvent::RunPaused,
            // An interrupted run was stopped by its user; a restart goes on in a new directory.
            Some(_) => return Ok(()),
        };
        if !self.hooks_fire(event) {
            return Ok(());
        }
        let mut payload = self.payload(event);
        payload.outcome = status.map(|status| status.as_str().to_string());
        match event {
            HookEvent::RunPaused => payload.reason = reason.map(str::to_string),
            _ => payload.failure_reason = reason.map(str::to_string),
        }
        self.fire(payload, None, None, None).await.map(|_| ())
    }

    /// Fires a stage moment's hooks: stage_start (which a blocking hook can veto, skip or send
    /// elsewhere), and for a human gate gate_waiting; `outcome` for the ends (stage_complete,
    /// stage_failed).
    pub async fn fire_stage_hooks(
        &self,
        node: &Node,
        visit: u32,
        stage_dir: &Path,
        outcome: Option<&Outcome>,
    ) -> Result<Option<Directive>, Veto> {
        let mut directive = None;
        let event = match outcome.map(|outcome| outcome.status) {
            None => HookEvent::StageStart,
            Some(StageStatus::Fail) => HookEvent::StageFailed,
            Some(_) => HookEvent::StageComplete,
        };
        if self.hooks_fire(event) {
            let mut payload = self.stage_payload(event, node, visit);
            if let Some(outcome) = outcome {
                payload.outcome = Some(outcome.status.as_str().to_string());
                payload.failure_reason = outcome.failure_reason.clone();
            }
            directive = self.fire(payload, Some(node), Some(stage_dir), outcome).await?;
        }
        if event == HookEvent::StageStart
            && node.handler_type() == HandlerType::Human
            && self.hooks_fire(HookEvent::GateWaiting)
        {
            let gate = crate::interview::Gate::of(self.scope.workflow, node);
            let mut payload = self.stage_payload(HookEvent::GateWaiting, node, visit);
            payload.question = Some(node.prompt().unwrap_or_else(|| node.label()).to_string());
            payload.choices = Some(
                gate.choices.iter().map(|choice| format!("[{}] {}", choice.key, choice.label)).collect(),
            );
            self.fire(payload, Some(node), Some(stage_dir), None).await?;
        }
        Ok(directive)
    }

    /// Fires stage_retrying: a failed attempt of `node` is about to run again.
    pub async fn fire_stage_retrying(
        &self,
        node: &Node,
        visit: u32,
        attempt: u32,
        max_attempts: u32,
        reason: Option<&str>,
    ) {
        if !self.hooks_fire(HookEvent::StageRetrying) {
            return;
        }
        let mut payload = self.stage_payload(HookEvent::StageRetrying, node, visit);
        payload.attempt = Some(attempt);
        payload.max_attempts = Some(max_attempts);
        payload.failure_reason = reason.map(str::to_string);
        let _ = self.fire(payload, Some(node), None, None).await;
    }

    /// Fires edge_selected for the edge from `node` to `to` the run is about to cross; a
    /// blocking hook's veto says why it must not, its override where to go instead.
    pub async fn fire_edge_selected(
        &self,
        node: &Node,
        visit: u32,
        to: &str,
        label: Option<&str>,
    ) -> Result<Option<Directive>, Veto> {
        if !self.hooks_fire(HookEvent::EdgeSelected) {
            return Ok(None);
        }
        let mut payload = self.stage_payload(HookEvent::EdgeSelected, node, visit);
        payload.edge_from = Some(node.id.clone());
        payload.edge_to = Some(to.to_string());
        payload.edge_label = label.map(str::to_string);
        self.fire(payload, None, None, None).await
    }

    /// Fires parallel_start (no `outcome`) or parallel_complete for the parallel stage `node`.
    pub async fn fire_parallel_hooks(
        &self,
        node: &Node,
        visit: u32,
        branch_count: usize,
        outcome: Option<&Outcome>,
    ) {
        let event = if outcome.is_some() { HookEvent::ParallelComplete } else { HookEvent::ParallelStart };
        if !self.hooks_fire(event) {
            return;
        }
        let mut payload = self.stage_payload(event, node, visit);
        payload.branch_count = Some(branch_count);
        payload.outcome = outcome.map(|outcome| outcome.status.as_str().to_string());
        let _ = self.fire(payload, None, None, outcome).await;
    }

    /// Fires checkpoint_saved after the checkpoint that recorded `node`'s visit.
    pub async fn fire_checkpoint_saved(&self, node: &Node, visit: u32) {
        if self.hooks_fire(HookEvent::CheckpointSaved) {
            let payload = self.stage_payload(HookEvent::CheckpointSaved, node, visit);
            let _ = self.fire(payload, None, None, None).await;
        }
    }

    fn stage_payload(&self, event: HookEvent, node: &Node, visit: u32) -> HookPayload {
        let mut payload = self.payload(event);
        payload.node_id = Some(node.id.clone());
        payload.visit = Some(visit);
        payload.handler = Some(node.handler_type().name().to_string());
        payload
    }

    async fn fire(
        &self,
        payload: HookPayload,
        node: Option<&Node>,
        stage_dir: Option<&Path>,
        outcome: Option<&Outcome>,
    ) -> Result<Option<Directive>, Veto> {
        let scope = &self.scope;
        let options = scope.options;
        // Commands of a stage that runs programs run where its programs run.
        let confinement = match node.filter(|node| crate::sandbox::runs_programs(node)) {
            Some(node) => {
                crate::sandbox::Confinement::of(node, scope.workflow, options.sandbox, options.user_sandbox)
                    .protecting(scope.run_dir.root())
            }
            None => crate::sandbox::Confinement::default(),
        };
        let stage = node.map(|node| (node.id.clone(), payload.visit.unwrap_or(1)));
        // A sandbox starts in the work directory: a run directory given as a relative path is
        // found from where fabro started, so the paths it binds are absolute.
        let absolute = |path: &Path| std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let stage_dir = stage_dir.map(absolute);
        let run_root = absolute(scope.run_dir.root());
        let firing = Firing {
            payload,
            outcome,
            context: &self.state.context,
            artifacts: Some(&scope.artifacts),
            work_dir: &self.worktree.work_dir,
            confinement,
            writable: stage_dir.as_deref().into_iter().collect(),
            readable: vec![run_root.as_path()],
        };
        let events = &scope.events;
        let mut report = |report: HookReport| {
            let event = hook_event(report);
            match &stage {
                Some((node_id, visit)) => events.stage_event(node_id, *visit, event),
                None => events.run_event(event),
            }
        };
        options.hooks.fire(&firing, &mut report).await
    }
}

fn hook_event(report: HookReport) -> Event {
    let HookReport { hook, event, blocking, duration_ms, result } = report;
    let hook_event = event.as_str().to_string();
    match result.failure {
        None => Event::HookRan {
            hook,
            hook_event,
            duration_ms,
            exit_code: result.exit_code,
            http_status: result.http_status,
            decision: result.decision.map(|decision| decision.as_str().to_string()),
        },
        Some(message) => Event::HookFailed {
            hook,
            hook_event,
            blocking,
            duration_ms,
            exit_code: result.exit_code,
            http_status: result.http_status,
            message,
        },
    }
}
