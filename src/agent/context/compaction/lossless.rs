//! `compaction_mode=lossless`: the compacted turns replaced by what the run's durable records say,
//! with no model call: where the stage is in the workflow and the goal, the goal gates and their
//! status, the stages completed so far with their outcomes, the commands run (the run's command
//! stages and this stage's shell calls, with exit codes), the files this stage wrote (the file
//! tracker) and the context keys set. Nothing in it comes from a model, so nothing in it can be
//! made up.

use super::intent::Operation;

/// The first line of every lossless block.
pub const HEADER: &str = "[Lossless reconstruction from the run's records";

/// What the run's records say when the stage starts (they do not change while it runs).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RunRecord {
    pub run_id: String,
    pub goal: String,
    /// The stage (node id) and its visit.
    pub node: String,
    pub visit: u32,
    /// Goal gates: (node, status: `succeeded`, `failed: <reason>`, `not run yet`, ...).
    pub goal_gates: Vec<(String, String)>,
    /// Completed stage visits, oldest first.
    pub stages: Vec<StageLine>,
    /// Context keys set so far (engine bookkeeping left out).
    pub context_keys: Vec<String>,
}

/// One completed stage visit.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct StageLine {
    pub node: String,
    pub visit: u32,
    pub handler: String,
    pub status: String,
    pub failure_reason: Option<String>,
    /// Command stages: the script's first line.
    pub command: Option<String>,
}

/// The block that replaces turns 1..=`last` of the stage.
pub fn block(record: &RunRecord, operations: &[Operation], files: &str, last: u32) -> String {
    let mut out = format!("{HEADER}, covering turns 1-{last} of this stage]\n\n");
    out.push_str("## Workflow position\n");
    out.push_str(&format!("- run {}, stage `{}` (visit {})\n", record.run_id, record.node, record.visit));
    if !record.goal.trim().is_empty() {
        out.push_str(&format!("- goal: {}\n", record.goal.trim()));
    }
    if !record.goal_gates.is_empty() {
        out.push_str("\n## Goal gates\n");
        for (node, status) in &record.goal_gates {
            out.push_str(&format!("- `{node}`: {status}\n"));
        }
    }
    out.push_str("\n## Completed stages\n");
    if record.stages.is_empty() {
        out.push_str("- (none before this one)\n");
    }
    for stage in &record.stages {
        let reason = stage.failure_reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
        out.push_str(&format!(
            "- `{}` (visit {}, {}): {}{reason}\n",
            stage.node, stage.visit, stage.handler, stage.status
        ));
    }
    let commands: Vec<String> = record
        .stages
        .iter()
        .filter_map(|stage| {
            stage
                .command
                .as_ref()
                .map(|command| format!("- stage `{}`: `{command}` {}", stage.node, stage.status))
        })
        .chain(operations.iter().filter(|op| op.is_command() && op.turn <= last).map(|op| {
            format!(
                "- `{}` {} (turn {})",
                op.target,
                op.detail.as_deref().unwrap_or(if op.succeeded { "ok" } else { "failed" }),
                op.turn
            )
        }))
        .collect();
    out.push_str("\n## Commands run\n");
    out.push_str(&if commands.is_empty() { "- (none)".to_string() } else { commands.join("\n") });
    out.push_str("\n\n## Files this stage touched\n");
    out.push_str(files);
    out.push_str("\n\n## Context keys set\n");
    out.push_str(&if record.context_keys.is_empty() {
        "- (none)".to_string()
    } else {
        format!("- {}", record.context_keys.join(", "))
    });
    out.push_str(
        "\n\nRESUMPTION NOTE: the turns above were replaced by the run's own records, which are ground truth. \
         Files on disk hold the current state: read them instead of relying on memory of earlier turns.",
    );
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_block_states_the_records() {
        let record = RunRecord {
            run_id: "r1".into(),
            goal: "Ship it".into(),
            node: "work".into(),
            visit: 2,
            goal_gates: vec![("verify".into(), "failed: tests failed".into())],
            stages: vec![StageLine {
                node: "build".into(),
                visit: 1,
                handler: "command".into(),
                status: "succeeded".into(),
                failure_reason: None,
                command: Some("make".into()),
            }],
            context_keys: vec!["plan".into()],
        };
        let ops = [Operation {
            turn: 2,
            tool: "shell".into(),
            target: "cargo test".into(),
            succeeded: false,
            detail: Some("exit 101".into()),
        }];
        let text = block(&record, &ops, "- out/a.txt (written)", 3);
        for needle in [
            "covering turns 1-3",
            "stage `work` (visit 2)",
            "- goal: Ship it",
            "- `verify`: failed: tests failed",
            "- `build` (visit 1, command): succeeded",
            "- stage `build`: `make` succeeded",
            "- `cargo test` exit 101 (turn 2)",
            "- out/a.txt (written)",
            "- plan",
        ] {
            assert!(text.contains(needle), "{needle} in\n{text}");
        }
    }
}
