//! `compaction_mode=intent`: the compacted turns rebuilt from the stage's own tool-call log, one
//! line per operation, with no model call. What the log says happened did happen: the tools ran
//! in this process, so the block is ground truth, not a model's recollection.

use serde_json::Value;

use crate::agent::context::shortened;
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

/// The operations of turns `first..=last`, one indented line each.
pub fn listing(operations: &[Operation], first: u32, last: u32) -> String {
    let lines: Vec<String> = operations
        .iter()
        .filter(|op| op.turn >= first && op.turn <= last)
        .map(|op| format!("  {}", op.line()))
        .collect();
    if lines.is_empty() {
        "  (no tool calls)".to_string()
    } else {
        lines.join("\n")
    }
}

/// The block that replaces turns `first..=last`, made from the operations of those turns.
pub fn block(operations: &[Operation], first: u32, last: u32) -> String {
    let listed = listing(operations, first, last);
    format!(
        "{HEADER} of turns 1-{last} of this stage, from its own tool-call log]\n\nOPERATIONS (chronological):\n{listed}\n\n\
         RESUMPTION NOTE: these turns were compacted from the stage's tool-call log, which is ground truth. Do not \
         redo operations marked ✓ (they took effect); retry operations marked ✗ if the task still needs them."
    )
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
        let text = block(&[write, test, edit], 1, 4);
        assert!(text.starts_with(HEADER) && text.contains("turns 1-4"));
        assert!(text.contains("  ✓ write_file") && text.contains("  ✗ shell") && !text.contains("edit_file"));
        assert!(text.contains("Do not redo operations marked ✓"));
    }
}
