//! Start and exit stages do nothing and succeed (goal gates are checked by the scheduler before
//! the exit stage), except an exit with `outcome=fail`, which ends the run failed on purpose. A conditional stage does nothing either, but passes the outcome and preferred
//! label of the stage before it through, so its edges can route on them
//! (`validate -> gate; gate -> fix [condition="outcome=fail"]`).

use crate::outcome::{Outcome, StageStatus};
use crate::stage::{Handler, HandlerError, StageRun};

pub struct PassThrough;

#[async_trait::async_trait]
impl Handler for PassThrough {
    async fn run(&self, _stage: &StageRun<'_>) -> Result<Outcome, HandlerError> {
        Ok(Outcome::success())
    }

    fn keeps_stage_files(&self) -> bool {
        false
    }
}

/// An exit node: the run ends here, succeeded unless the node says `outcome=fail` (kilroy's
/// `fail_exit`).
pub struct Exit;

#[async_trait::async_trait]
impl Handler for Exit {
    async fn run(&self, stage: &StageRun<'_>) -> Result<Outcome, HandlerError> {
        Ok(if stage.node.is_failing_exit() {
            Outcome::fail(format!("the run reached `{}`, an exit node with outcome=fail", stage.node.id))
        } else {
            Outcome::success()
        })
    }

    fn keeps_stage_files(&self) -> bool {
        false
    }
}

pub struct Conditional;

#[async_trait::async_trait]
impl Handler for Conditional {
    async fn run(&self, stage: &StageRun<'_>) -> Result<Outcome, HandlerError> {
        let previous = stage.context.get_text("outcome").and_then(|text| text.parse::<StageStatus>().ok());
        let Some(status) = previous else { return Ok(Outcome::success()) };
        let from = stage.context.get_text("last_stage").unwrap_or_else(|| "the previous stage".to_string());
        Ok(Outcome {
            preferred_label: stage.context.get_text("preferred_label"),
            notes: Some(format!("routes on outcome {status} of {from}")),
            failure_reason: (status == StageStatus::Fail).then(|| {
                stage
                    .context
                    .get_text("failure_reason")
                    .unwrap_or_else(|| "the previous stage failed".to_string())
            }),
            ..Outcome::new(status)
        })
    }

    fn keeps_stage_files(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handlers::test_support::Fixture;

    #[tokio::test]
    async fn a_conditional_passes_the_previous_outcome_through() {
        let mut fixture = Fixture::new(
            "digraph T { start [shape=Mdiamond]; exit [shape=Msquare]; gate [shape=diamond]; start -> gate -> exit }",
        );
        let outcome = Conditional.run(&fixture.stage("gate")).await.unwrap();
        assert_eq!(outcome.status, StageStatus::Success);
        fixture.context.set("outcome", "fail");
        fixture.context.set("preferred_label", "Fix");
        fixture.context.set("last_stage", "tests");
        let outcome = Conditional.run(&fixture.stage("gate")).await.unwrap();
        assert_eq!(outcome.status, StageStatus::Fail);
        assert_eq!(outcome.preferred_label.as_deref(), Some("Fix"));
        assert_eq!(outcome.notes.as_deref(), Some("routes on outcome fail of tests"));
    }
}
