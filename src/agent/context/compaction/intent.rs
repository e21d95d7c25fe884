//! `compaction_mode=intent`: the compacted turns rebuilt from the stage's own tool-call log, one
//! line per operation, with no model call. What the log says happened did happen: the tools ran
//! in this process, so the block is ground truth, not a model's recollection. When every line
//! does not fit under `compaction_block_chars`, the operations are counted
//! ([`super::operation_log`]) and only the latest and the failed are listed, with the files the
//! stage touched and where its full log is.

use serde_json::Value;

use super::operation_log::{OperationLog, Scope};
use crate::agent::context::shortened;
use crate::agent::file_tracker::FileList;
use crate::chat::ToolCall;

/// The first line of every intent block.
pub const HEADER: &str = "[Intent-derived reconstruction";

/// One tool call the stage made and how it ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Operation {
    /// The loop turn of the call (1 for the first model call).
    pub turn: u32,
    pub tool: String,
    /// The path, command or pattern the call was about (empty when it had none).
    pub target: String,
    pub succeeded: bool,
    /// An exit code (`exit 0`) or the first line of an error.
    pub detail: Option<String>,
}

impl Operation {
    /// The operation a call and its result make. A shell call succeeded when it exited 0.
    pub fn of(turn: u32, call: &ToolCall, content: &str, is_error: bool) -> Operation {
        let argument = |key: &str| call.arguments.get(key).and_then(Value::as_str).map(str::to_string);
        let target = argument("path")
            .or_else(|| argument("command"))
            .or_else(|| argument("pattern"))
            .unwrap_or_default();
        let exit_code = (call.name == "shell")
            .then(|| content.lines().next()?.strip_prefix("exit code ")?.trim().parse::<i32>().ok())
            .flatten();
        let succeeded = !is_error && exit_code.is_none_or(|code| code == 0);
        let detail = match exit_code {
            Some(code) => Some(format!("exit {code}")),
            None if is_error => {
                content.lines().find(|l| !l.trim().is_empty()).map(|line| shortened(line, 120, "…"))
            }
            None => None,
        };
        Operation { turn, tool: call.name.clone(), target, succeeded, detail }
    }

    /// Whether the operation changed a file (write or edit) or ran a command.
    pub fn is_command(&self) -> bool {
        self.tool == "shell"
    }

    /// `✓ write_file → "out/a.txt" (turn 3)`, `✗ shell → "cargo test" — exit 101 (turn 4)`.
    pub fn line(&self) -> String {
        let mark = if self.succeeded { '✓' } else { '✗' };
        let target = if self.target.is_empty() {
            String::new()
        } else {
            format!(" → \"{}\"", shortened(&self.target, 200, "…"))
        };
        let detail = self.detail.as_ref().map(|d| format!(" — {d}")).unwrap_or_default();
        format!("{mark} {}{target}{detail} (turn {})", self.tool, self.turn)
    }
}

/// The operations of turns `first..=last` still kept verbatim, one indented line each, after a
/// line saying where the others are when some are no longer kept.
pub fn listing(log: &OperationLog, first: u32, last: u32) -> String {
    let mut lines: Vec<String> = log.held(first, last).map(|op| format!("  {}", op.line())).collect();
    if !log.holds_from(first) {
        lines.insert(0, "  (earlier operations of these turns are in the stage's transcript)".to_string());
    }
    if lines.is_empty() {
        "  (no tool calls)".to_string()
    } else {
        lines.join("\n")
    }
}

/// What the model is told to do with the block.
const NOTE: &str = "RESUMPTION NOTE: these turns were compacted from the stage's tool-call log, which is ground \
                    truth. Do not redo operations marked ✓ (they took effect); retry operations marked ✗ if the \
                    task still needs them.";

/// The block that replaces turns 1..=`last`, in at most `budget` characters (give or take the
/// header): every operation when they all fit; else the totals per tool and command kind, the
/// latest failures, the files the stage touched (`files` renders them in a budget), the latest
/// operations, and where the full log is (`full_log`).
pub fn block(
    log: &OperationLog,
    last: u32,
    files: &dyn Fn(usize) -> FileList,
    full_log: &str,
    budget: usize,
) -> String {
    let header = format!("{HEADER} of turns 1-{last} of this stage, from its own tool-call log]\n\n");
    if log.holds_from(1) {
        let whole = format!("{header}OPERATIONS (chronological):\n{}\n\n{NOTE}", listing(log, 1, last));
        if whole.len() <= budget {
            return whole;
        }
    }
    // The section titles take about 150 characters.
    let room = budget.saturating_sub(header.len() + NOTE.len() + full_log.len() + 150);
    let totals = log.totals(Scope::All, room / 4, |kind, is_command, totals| {
        if is_command {
            format!("  shell `{kind}`: {totals}")
        } else {
            format!("  {kind}: {totals}")
        }
    });
    let (failures, failed) = log.failures(Scope::All, room / 8, |op| format!("  {}", op.line()));
    let files = files(room / 4).text;
    let used = lines_len(&totals) + lines_len(&failures) + files.len();
    let latest = log.latest(Scope::All, last, room.saturating_sub(used), |op| format!("  {}", op.line()));
    let mut out = header;
    out.push_str(&format!("TOTALS (turns 1-{last}):\n{}\n", totals.join("\n")));
    match (failed, failures.len()) {
        (0, _) => {}
        (failed, 0) => out.push_str(&format!("FAILED: {failed}\n")),
        (failed, shown) => {
            out.push_str(&format!("FAILED (the latest {shown} of {failed}):\n{}\n", failures.join("\n")))
        }
    }
    out.push_str(&format!("FILES TOUCHED:\n{files}\n"));
    out.push_str(&format!(
        "OPERATIONS (the latest {}, chronological):\n{}\n\n",
        latest.len(),
        latest.join("\n")
    ));
    out.push_str(full_log);
    out.push_str("\n\n");
    out.push_str(NOTE);
    out
}

/// Characters of `lines` joined by newlines, one more.
pub(crate) fn lines_len(lines: &[String]) -> usize {
    lines.iter().map(|line| line.len() + 1).sum()
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn call(name: &str, arguments: Value) -> ToolCall {
        ToolCall { id: "c".into(), name: name.into(), arguments }
    }

    #[test]
    fn operations_say_what_ran_and_how_it_ended() {
        let write =
            Operation::of(3, &call("write_file", json!({"path": "out/a.txt"})), "wrote 5 bytes", false);
        assert_eq!(write.line(), "✓ write_file → \"out/a.txt\" (turn 3)");
        let test = Operation::of(
            4,
            &call("shell", json!({"command": "cargo test"})),
            "exit code 101\nfailed",
            false,
        );
        assert_eq!(test.line(), "✗ shell → \"cargo test\" — exit 101 (turn 4)");
        let edit = Operation::of(
            5,
            &call("edit_file", json!({"path": "a.rs"})),
            "\nold text not found in a.rs",
            true,
        );
        assert_eq!(edit.line(), "✗ edit_file → \"a.rs\" — old text not found in a.rs (turn 5)");
        let mut log = OperationLog::default();
        for op in [write, test, edit] {
            log.push(op);
        }
        log.count_through(4);
        let files = |_: usize| FileList { text: "- out/a.txt (created)".to_string(), every_file: true };
        let text = block(&log, 4, &files, "FULL LOG", 4_000);
        assert!(text.starts_with(HEADER) && text.contains("turns 1-4"));
        assert!(text.contains("  ✓ write_file") && text.contains("  ✗ shell") && !text.contains("edit_file"));
        assert!(text.contains("Do not redo operations marked ✓"));
        assert!(!text.contains("FULL LOG"), "every operation is listed: {text}");
    }

    #[test]
    fn a_long_log_folds_into_totals_within_the_budget_and_says_where_the_full_log_is() {
        let mut log = OperationLog::default();
        for turn in 1..=5_000 {
            let write = call("write_file", json!({"path": format!("out/f{turn}.txt")}));
            log.push(Operation::of(turn, &write, "", false));
            let exit = if turn == 7 { "exit code 1" } else { "exit code 0" };
            log.push(Operation::of(turn, &call("shell", json!({"command": "cargo test"})), exit, false));
        }
        log.count_through(4_998);
        let files = |budget: usize| FileList {
            text: if budget > 19 { "- PLAN.md (created)".to_string() } else { String::new() },
            every_file: false,
        };
        for budget in [1_000, 4_000, 16_000] {
            let text = block(&log, 4_998, &files, "FULL LOG", budget);
            assert!(text.len() <= budget, "{budget}: {}\n{text}", text.len());
            assert!(
                text.contains("shell `cargo test`: 4998 calls, 1 failed, last: exit 0 (turn 4998)"),
                "{text}"
            );
            assert!(text.contains("✗ shell → \"cargo test\" — exit 1 (turn 7)"), "{text}");
            assert!(text.contains("- PLAN.md (created)") && text.contains("FULL LOG"), "{text}");
            assert!(text.contains("(turn 4998)\n\nFULL LOG"), "the latest operation is listed: {text}");
            assert!(!text.contains("turn 4999"), "{text}");
        }
    }
}
