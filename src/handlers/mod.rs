//! The built-in handlers: one file per node kind. They implement the stage contract of
//! [`crate::stage`], which the engine drives; neither this module nor the engine imports the
//! other.

pub mod command;
pub mod fan_in;
pub mod human;
pub mod llm;
pub mod manager;
pub mod pass_through;
pub mod wait;

use std::sync::Arc;

use crate::outcome::Outcome;
use crate::stage::{Handler, HandlerRegistry, StageRun};

/// Builds the image of the stage's devcontainer (`build.dockerfile`) when the service lacks it,
/// before the stage's first program, with the event `container.image_built` and the build's log
/// in the run directory.
pub(crate) async fn prepare_container(stage: &StageRun<'_>) -> Result<(), crate::stage::HandlerError> {
    use crate::sandbox::devcontainer;
    let confinement = &stage.confinement;
    let Some(written) = confinement.container.as_ref().and_then(|spec| spec.devcontainer.as_deref()) else {
        return Ok(());
    };
    if stage.run.dry_run {
        return Ok(());
    }
    let terminal = |error: &dyn std::fmt::Display| crate::stage::HandlerError::Terminal(error.to_string());
    let dev = devcontainer::load(stage.work_dir, written).map_err(|error| terminal(&error))?;
    let devcontainer::DevImage::Built { dockerfile, tag, .. } = &dev.image else { return Ok(()) };
    let digest = tag.rsplit(':').next().unwrap_or_default();
    let log_name = format!("devcontainer-build-{digest}.log");
    let log = stage.run.run_dir.join(&log_name);
    let built = crate::sandbox::container::build_devcontainer_image(confinement.kind, &dev, &log)
        .await
        .map_err(|error| terminal(&error))?;
    if let Some(built) = built {
        stage.run.events.stage_event(
            &stage.node.id,
            stage.visit,
            crate::event::Event::ContainerImageBuilt {
                image: built.image,
                dockerfile: dockerfile.display().to_string(),
                log: log_name,
                duration_ms: u64::try_from(built.duration.as_millis()).unwrap_or(u64::MAX),
            },
        );
    }
    Ok(())
}

/// `outcome` with the container the stage's programs ran in (sandbox=podman or docker), which
/// the run's `containers.json` then also records.
pub(crate) async fn with_container(stage: &StageRun<'_>, mut outcome: Outcome) -> Outcome {
    if !stage.confinement.kind.is_container() {
        return outcome;
    }
    if let Some(container) = crate::sandbox::container::of_stage(&stage.confinement).await {
        crate::run_dir::containers::record(stage.run.run_dir, &container);
        outcome.container = Some(container);
    }
    outcome
}

/// The built-in handlers. (Parallel fan-out needs none: the engine runs the branches itself.)
pub fn builtin_handlers() -> HandlerRegistry {
    let mut registry = HandlerRegistry::new();
    registry.register("start", Arc::new(pass_through::PassThrough));
    registry.register("exit", Arc::new(pass_through::Exit));
    registry.register("conditional", Arc::new(pass_through::Conditional));
    registry.register("command", Arc::new(command::CommandHandler));
    registry.register("wait", Arc::new(wait::WaitHandler));
    registry.register("human", Arc::new(human::HumanHandler));
    registry.register("fan_in", Arc::new(fan_in::FanInHandler));
    let llm: Arc<dyn Handler> = Arc::new(llm::LlmHandler);
    registry.register("agent", llm.clone());
    registry.register("prompt", llm);
    registry.register("manager", Arc::new(manager::ManagerHandler));
    registry
}

#[cfg(test)]
pub(crate) mod test_support {
    //! Builds a [`StageRun`] for one node of a workflow written inline, with a temporary run
    //! directory, so handler tests stay short.

    use std::sync::Arc;

    use tokio_util::sync::CancellationToken;

    use crate::backends::simulated::SimulatedBackend;
    use crate::context::Context;
    use crate::event_log::EventLog;
    use crate::graph::Workflow;
    use crate::interview::{Answer, Interviewer, Question};
    use crate::source::SourceFile;
    use crate::stage::{RunEnv, RunSoFar, StageBudget};
    use crate::stage::{Services, StageRun};

    /// An interviewer that always gives the same answer.
    pub struct FixedAnswer(pub Answer);

    #[async_trait::async_trait]
    impl Interviewer for FixedAnswer {
        async fn ask(&self, _question: &Question<'_>) -> Answer {
            self.0.clone()
        }
    }

    pub struct Fixture {
        pub workflow: Workflow,
        pub context: Context,
        pub dir: tempfile::TempDir,
        work_dir: std::path::PathBuf,
        /// `stages/<node>/1` for every node, created up front.
        stage_dirs: std::collections::HashMap<String, std::path::PathBuf>,
        pub services: Services,
        /// Runs the child workflows of manager stages (simulated backend, no answers; leaked, as
        /// a test's engine lives as long as the test).
        children: crate::engine::ChildLauncher<'static>,
        pub events: EventLog,
        pub cancel: CancellationToken,
        pub dry_run: bool,
    }

    impl Fixture {
        /// Loads `dot` (which must be valid) with the simulated backend and an interviewer that
        /// has no answers.
        pub fn new(dot: &str) -> Fixture {
            let checked = crate::Loader::new().load_source(SourceFile::new("test.dot", dot)).expect("parses");
            assert!(!checked.has_errors(), "{:?}", checked.diagnostics);
            let dir = tempfile::tempdir().expect("temp dir");
            let work_dir = dir.path().join("work");
            std::fs::create_dir_all(&work_dir).expect("work dir");
            let stage_dirs = checked
                .workflow
                .nodes()
                .map(|node| {
                    let stage_dir = dir.path().join("stages").join(&node.id).join("1");
                    std::fs::create_dir_all(&stage_dir).expect("stage dir");
                    (node.id.clone(), stage_dir)
                })
                .collect();
            let events = EventLog::open(&dir.path().join("events.jsonl"), "test-run", 0).expect("event log");
            Fixture {
                work_dir,
                stage_dirs,
                workflow: checked.workflow,
                context: Context::new(),
                dir,
                services: Services {
                    backend: Arc::new(SimulatedBackend),
                    interviewer: Arc::new(FixedAnswer(Answer::Unavailable)),
                },
                children: crate::engine::ChildLauncher::new(
                    Box::leak(Box::new(crate::engine::Engine::new(
                        super::builtin_handlers(),
                        Services {
                            backend: Arc::new(SimulatedBackend),
                            interviewer: Arc::new(FixedAnswer(Answer::Unavailable)),
                        },
                    ))),
                    Box::leak(Box::default()),
                    Box::leak(Box::default()),
                ),
                events,
                cancel: CancellationToken::new(),
                dry_run: false,
            }
        }

        /// The stage run for `node_id`, visit 1, attempt 1, in its stage directory.
        pub fn stage(&self, node_id: &str) -> StageRun<'_> {
            let node = self.workflow.node(node_id).expect("node exists");
            StageRun {
                node,
                context: &self.context,
                work_dir: &self.work_dir,
                stage_dir: &self.stage_dirs[node_id],
                visit: 1,
                attempt: 1,
                confinement: crate::sandbox::Confinement::default(),
                past: RunSoFar::default(),
                budget: StageBudget::default(),
                run: RunEnv {
                    workflow: &self.workflow,
                    run_id: "test-run",
                    run_dir: self.dir.path(),
                    services: &self.services,
                    events: &self.events,
                    cancel: &self.cancel,
                    dry_run: self.dry_run,
                    children: &self.children,
                    reference_files: &[],
                    max_output: None,
                    tool_hooks: &[],
                },
            }
        }
    }
}
