//! Wait stages (`shape=insulator`): sleep for the node's `duration`, stopping early when the run
//! is cancelled.

use crate::graph::attribute::format_duration;
use crate::outcome::Outcome;
use crate::stage::{Handler, HandlerError, StageRun};

/// Runs wait stages.
pub struct WaitHandler;

#[async_trait::async_trait]
impl Handler for WaitHandler {
    async fn run(&self, stage: &StageRun<'_>) -> Result<Outcome, HandlerError> {
        let node_id = &stage.node.id;
        let settings = stage.node.settings.wait().ok_or_else(|| {
            HandlerError::Terminal(format!(
                "stage `{node_id}` is a {} stage, not a wait",
                stage.node.handler_type()
            ))
        })?;
        let duration = settings
            .duration
            .clone()
            .map_err(|error| HandlerError::Terminal(format!("wait stage `{node_id}` {error}")))?;
        let spelled = format_duration(duration);
        if stage.run.dry_run {
            return Ok(Outcome::success().with_notes(format!("dry run: would wait {spelled}")));
        }
        tokio::select! {
            () = tokio::time::sleep(duration) => Ok(Outcome::success().with_notes(format!("waited {spelled}"))),
            () = stage.run.cancel.cancelled() => Err(HandlerError::Cancelled),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::{Duration, Instant};

    use super::*;
    use crate::graph::{Attr, Value};
    use crate::handlers::test_support::Fixture;
    use crate::outcome::StageStatus;

    fn fixture(duration: &str) -> Fixture {
        Fixture::new(&format!(
            "digraph T {{ start [shape=Mdiamond]; exit [shape=Msquare]\n  pause [shape=insulator, duration={duration}]\n  start -> pause -> exit }}"
        ))
    }

    #[tokio::test]
    async fn sleeps_for_the_duration() {
        let fixture = fixture("300ms");
        let started = Instant::now();
        let outcome = WaitHandler.run(&fixture.stage("pause")).await.expect("waits");
        let elapsed = started.elapsed();
        assert!(elapsed >= Duration::from_millis(300), "{elapsed:?}");
        assert!(elapsed < Duration::from_secs(2), "{elapsed:?}");
        assert_eq!(outcome.status, StageStatus::Success);
        assert_eq!(outcome.notes.as_deref(), Some("waited 300ms"));
    }

    #[tokio::test]
    async fn cancellation_ends_the_wait() {
        let fixture = fixture("1h");
        let cancel = fixture.cancel.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(100)).await;
            cancel.cancel();
        });
        let started = Instant::now();
        let result = WaitHandler.run(&fixture.stage("pause")).await;
        assert_eq!(result, Err(HandlerError::Cancelled));
        assert!(started.elapsed() < Duration::from_secs(2), "{:?}", started.elapsed());
    }

    #[tokio::test]
    async fn dry_run_returns_at_once() {
        let mut fixture = fixture("2h");
        fixture.dry_run = true;
        let started = Instant::now();
        let outcome = WaitHandler.run(&fixture.stage("pause")).await.expect("waits");
        assert!(started.elapsed() < Duration::from_secs(1));
        assert_eq!(outcome.status, StageStatus::Success);
        assert_eq!(outcome.notes.as_deref(), Some("dry run: would wait 2h"));
    }

    #[tokio::test]
    async fn invalid_duration_is_a_terminal_error() {
        let mut fixture = fixture("2s");
        for node in fixture.workflow.nodes_mut().filter(|node| node.id == "pause") {
            let attr = node.attributes.get("duration").cloned().expect("duration set");
            node.attributes.set("duration", Attr { value: Value::Text("soon".into()), ..attr });
        }
        crate::graph::settings::read_settings(&mut fixture.workflow);
        let result = WaitHandler.run(&fixture.stage("pause")).await;
        assert_eq!(
            result,
            Err(HandlerError::Terminal("wait stage `pause` has an invalid duration `soon`".into()))
        );
    }

    #[tokio::test]
    async fn missing_duration_is_a_terminal_error() {
        let mut fixture = fixture("1s");
        for node in fixture.workflow.nodes_mut() {
            if node.id == "pause" {
                let mut attributes = crate::graph::Attributes::default();
                for (key, attr) in node.attributes.iter().filter(|(key, _)| *key != "duration") {
                    attributes.set(key.to_string(), attr.clone());
                }
                node.attributes = attributes;
            }
        }
        crate::graph::settings::read_settings(&mut fixture.workflow);
        let result = WaitHandler.run(&fixture.stage("pause")).await;
        assert_eq!(result, Err(HandlerError::Terminal("wait stage `pause` has no duration".into())));
    }
}
