//! `compaction_mode=lossless`: the compacted turns replaced by what the run's durable records say,
//! with no model call: where the stage is in the workflow and the goal, the goal gates and their
//! status, the stages completed so far with their outcomes, the commands run (the run's command
//! stages and this stage's shell calls, with exit codes), the files this stage wrote (the file
//! tracker) and the context keys set, within `compaction_block_chars` (the shell calls counted by
//! kind once they do not fit) and with where the stage's full log is. Nothing in it comes from a
//! model, so nothing in it can be made up.

use super::intent::{lines_len, Operation};
use super::operation_log::{fitting, OperationLog, Scope};
use crate::agent::context::shortened;
use crate::agent::file_tracker::FileList;

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

/// What the model is told to do with the block.
const NOTE: &str = "RESUMPTION NOTE: the turns above were replaced by the run's own records, which are ground \
                    truth. Files on disk hold the current state: read them instead of relying on memory of earlier \
                    turns.";

/// The block that replaces turns 1..=`last` of the stage, in at most `budget` characters (give
/// or take the run's goal and goal gates): the stage's shell commands listed while they fit,
/// else counted by kind with the latest failures and the latest commands; the files the stage
/// touched (`files` renders them in a budget); where the full log is (`full_log`).
pub fn block(
    record: &RunRecord,
    log: &OperationLog,
    files: &dyn Fn(usize) -> FileList,
    full_log: &str,
    last: u32,
    budget: usize,
) -> String {
    let mut out = format!("{HEADER}, covering turns 1-{last} of this stage]\n\n");
    out.push_str("## Workflow position\n");
    out.push_str(&format!("- run {}, stage `{}` (visit {})\n", record.run_id, record.node, record.visit));
    if !record.goal.trim().is_empty() {
        out.push_str(&format!("- goal: {}\n", shortened(record.goal.trim(), budget / 8, "…")));
    }
    if !record.goal_gates.is_empty() {
        out.push_str("\n## Goal gates\n");
        for (node, status) in &record.goal_gates {
            out.push_str(&format!("- `{node}`: {status}\n"));
        }
    }
    out.push_str("\n## Completed stages\n");
    out.push_str(&stages(&record.stages, budget / 8));
    let keys = context_keys(&record.context_keys, budget / 16);
    // The section titles take about 100 characters.
    let room = budget.saturating_sub(out.len() + keys.len() + NOTE.len() + full_log.len() + 100);
    let (commands, every_command) = commands(&record.stages, log, last, room / 2);
    out.push_str("\n## Commands run\n");
    out.push_str(&commands);
    out.push_str("\n\n## Files this stage touched\n");
    let files = files(room.saturating_sub(commands.len()));
    out.push_str(&files.text);
    out.push_str("\n\n## Context keys set\n");
    out.push_str(&keys);
    out.push_str("\n\n");
    // While every command and file is listed, the block holds what the log would add.
    let folded = !(every_command && files.every_file);
    if folded && !full_log.is_empty() {
        out.push_str(full_log);
        out.push_str("\n\n");
    }
    out.push_str(NOTE);
    out
}

/// The completed stage visits, the latest that fit in `budget` characters.
fn stages(stages: &[StageLine], budget: usize) -> String {
    if stages.is_empty() {
        return "- (none before this one)\n".to_string();
    }
    let lines = stages.iter().rev().map(|stage| {
        let reason = stage.failure_reason.as_deref().map(|r| format!(": {r}")).unwrap_or_default();
        format!("- `{}` (visit {}, {}): {}{reason}", stage.node, stage.visit, stage.handler, stage.status)
    });
    let mut lines = fitting(lines, budget);
    lines.reverse();
    let earlier = stages.len() - lines.len();
    if earlier > 0 {
        lines.insert(0, format!("- ({earlier} earlier stage visits are in the run's records)"));
    }
    lines.join("\n") + "\n"
}

/// The context keys set, as many as fit in `budget` characters.
fn context_keys(keys: &[String], budget: usize) -> String {
    if keys.is_empty() {
        return "- (none)".to_string();
    }
    let shown = fitting(keys.iter().cloned(), budget);
    let more = match keys.len() - shown.len() {
        0 => String::new(),
        n => format!(" and {n} more"),
    };
    format!("- {}{more}", shown.join(", "))
}

/// The run's command stages and the stage's shell commands of turns up to `last`: one line each
/// while they fit in `budget` characters (and then true); else the command stages that fit, the
/// shell commands counted by kind, the latest failures and the latest commands.
fn commands(stages: &[StageLine], log: &OperationLog, last: u32, budget: usize) -> (String, bool) {
    let command_stages: Vec<String> = stages
        .iter()
        .filter_map(|stage| {
            let command = stage.command.as_ref()?;
            Some(format!("- stage `{}`: `{command}` {}", stage.node, stage.status))
        })
        .collect();
    let line = |op: &Operation| {
        format!(
            "- `{}` {} (turn {})",
            shortened(&op.target, 200, "…"),
            op.detail.as_deref().unwrap_or(if op.succeeded { "ok" } else { "failed" }),
            op.turn
        )
    };
    if log.holds_from(1) {
        let all: Vec<String> = command_stages
            .iter()
            .cloned()
            .chain(log.held(1, last).filter(|op| op.is_command()).map(line))
            .collect();
        if all.is_empty() {
            return ("- (none)".to_string(), true);
        }
        if lines_len(&all) <= budget {
            return (all.join("\n"), true);
        }
    }
    let mut stages = fitting(command_stages.iter().rev().cloned(), budget / 4);
    stages.reverse();
    let totals =
        log.totals(Scope::Commands, budget / 2, |kind, _, totals| format!("- `{kind}` commands: {totals}"));
    let (failures, failed) = log.failures(Scope::Commands, budget / 4, |op| format!("  {}", line(op)));
    let room = budget.saturating_sub(lines_len(&stages) + lines_len(&totals) + lines_len(&failures) + 80);
    let latest = log.latest(Scope::Commands, last, room, |op| format!("  {}", line(op)));
    let mut out = stages;
    out.extend(totals);
    match (failed, failures.len()) {
        (0, _) => {}
        (failed, 0) => out.push(format!("- {failed} failed")),
        (failed, shown) => {
            out.push(format!("- failed, the latest {shown} of {failed}:"));
            out.extend(failures);
        }
    }
    if !latest.is_empty() {
        out.push(format!("- the latest {}:", latest.len()));
        out.extend(latest);
    }
    (out.join("\n"), false)
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
        let mut log = OperationLog::default();
        log.push(Operation {
            turn: 2,
            tool: "shell".into(),
            target: "cargo test".into(),
            succeeded: false,
            detail: Some("exit 101".into()),
        });
        log.count_through(3);
        let files = |_: usize| FileList { text: "- out/a.txt (written)".to_string(), every_file: false };
        let text = block(&record, &log, &files, "FULL LOG", 3, 4_000);
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
            "FULL LOG",
        ] {
            assert!(text.contains(needle), "{needle} in\n{text}");
        }
        // Everything listed: the log adds nothing.
        let complete = |_: usize| FileList { text: "- out/a.txt (written)".to_string(), every_file: true };
        assert!(!block(&record, &log, &complete, "FULL LOG", 3, 4_000).contains("FULL LOG"));
    }

    #[test]
    fn a_long_stage_counts_its_commands_and_stays_within_the_budget() {
        let record = RunRecord {
            stages: (0..500)
                .map(|i| StageLine {
                    node: format!("s{i}"),
                    status: "succeeded".into(),
                    ..StageLine::default()
                })
                .collect(),
            context_keys: (0..500).map(|i| format!("key{i}")).collect(),
            ..RunRecord::default()
        };
        let mut log = OperationLog::default();
        for turn in 1..=3_000 {
            let failed = turn == 10;
            log.push(Operation {
                turn,
                tool: "shell".into(),
                target: format!("wc -c out/f{turn}.txt"),
                succeeded: !failed,
                detail: Some(format!("exit {}", u8::from(failed))),
            });
        }
        log.count_through(2_999);
        let files =
            |budget: usize| FileList { text: "- PLAN.md (created)\n".repeat(budget / 20), every_file: false };
        for budget in [2_000, 4_000, 20_000] {
            let text = block(&record, &log, &files, "FULL LOG", 2_999, budget);
            assert!(text.len() <= budget, "{budget}: {}\n{text}", text.len());
            for needle in [
                "earlier stage visits are in the run's records",
                "- `s499` (visit 0, ): succeeded",
                "- `wc` commands: 2999 calls, 1 failed, last: exit 0 (turn 2999)",
                "  - `wc -c out/f10.txt` exit 1 (turn 10)",
                "  - `wc -c out/f2999.txt` exit 0 (turn 2999)",
                "- PLAN.md (created)",
                "more\n",
                "FULL LOG",
            ] {
                assert!(text.contains(needle), "{budget}: {needle} in\n{text}");
            }
        }
    }
}
