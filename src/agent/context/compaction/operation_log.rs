//! The stage's tool-call log as its intent and lossless blocks use it, in bounded memory and at a
//! bounded cost: an operation waits until a compaction covers its turn, then counts into running
//! totals (per shell command kind, per other tool) and joins the latest ones kept verbatim; failed
//! ones are also kept verbatim, the latest up to a cap. Nothing else is kept: the full log is the
//! stage's transcript.

use std::collections::{BTreeMap, VecDeque};

use super::intent::Operation;

/// Operations kept verbatim once counted...
const LATEST: usize = 64;
/// ...failed ones besides...
const FAILURES: usize = 8;
/// ...and operations waiting for a compaction to cover their turn, at most (older ones are
/// counted at once).
const PENDING: usize = 256;
/// Kinds of command (and tools) counted apart; the others are counted together.
const KINDS: usize = 32;
/// The kind the others are counted under.
const OTHER_KIND: &str = "(other)";

/// Programs whose first argument says what they do (`cargo test`, `git commit`).
const WITH_SUBCOMMANDS: &[&str] = &[
    "cargo", "git", "npm", "pnpm", "yarn", "bun", "deno", "go", "docker", "kubectl", "dotnet", "uv", "pip",
    "pip3", "poetry", "make", "just", "gradle", "mvn",
];

/// What a shell command is, for counting: its program (after `cd ... &&` and variable
/// assignments), with the subcommand of the programs that have them: `cargo test`, `wc`.
pub fn command_kind(command: &str) -> String {
    let segments = command.split(['&', ';', '|', '\n']).map(str::trim).filter(|s| !s.is_empty());
    let mut segments = segments.skip_while(|segment| segment.starts_with("cd ")).peekable();
    let segment = segments.peek().copied().unwrap_or(command.trim());
    let mut words = segment.split_whitespace().skip_while(|word| word.contains('='));
    let Some(program) = words.next() else { return OTHER_KIND.to_string() };
    let program = program.rsplit('/').next().unwrap_or(program);
    match words.next() {
        Some(sub) if WITH_SUBCOMMANDS.contains(&program) && !sub.starts_with('-') => {
            format!("{program} {sub}")
        }
        _ => program.to_string(),
    }
}

/// The running totals of one kind of operation.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
struct Tally {
    calls: u64,
    failed: u64,
    last_turn: u32,
    /// How the last one ended, when it said (`exit 0`, an error's first line).
    last_detail: Option<String>,
    last_succeeded: bool,
}

impl Tally {
    fn count(&mut self, op: &Operation) {
        self.calls += 1;
        self.failed += u64::from(!op.succeeded);
        self.last_turn = op.turn;
        self.last_detail = op.detail.clone();
        self.last_succeeded = op.succeeded;
    }

    /// `120 calls, all succeeded, last turn 96`; `10 calls, 2 failed, last: exit 2 (turn 95)`.
    fn describe(&self) -> String {
        let calls = if self.calls == 1 { "1 call".to_string() } else { format!("{} calls", self.calls) };
        let failed = match self.failed {
            0 => "all succeeded".to_string(),
            n if n == self.calls => "all failed".to_string(),
            n => format!("{n} failed"),
        };
        let last = match (&self.last_detail, self.last_succeeded) {
            (Some(detail), _) => format!("last: {detail} (turn {})", self.last_turn),
            (None, false) => format!("last: failed (turn {})", self.last_turn),
            (None, true) => format!("last turn {}", self.last_turn),
        };
        format!("{calls}, {failed}, {last}")
    }
}

/// Which operations a part of a block is about.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// Every tool call.
    All,
    /// Shell commands only.
    Commands,
}

impl Scope {
    fn takes(self, op: &Operation) -> bool {
        self == Scope::All || op.is_command()
    }
}

/// The stage's tool calls: the latest verbatim, all of them counted.
#[derive(Debug, Clone, Default)]
pub struct OperationLog {
    /// Not counted yet: no compaction has covered their turn.
    pending: VecDeque<Operation>,
    /// The latest counted, oldest first.
    latest: VecDeque<Operation>,
    /// The latest counted that failed, oldest first, and how many failed in all.
    failures: VecDeque<Operation>,
    failed: u64,
    /// Totals per shell command kind, and per other tool.
    commands: BTreeMap<String, Tally>,
    tools: BTreeMap<String, Tally>,
    /// Operations counted, and the last turn of those no longer kept verbatim (0: none).
    counted: u64,
    dropped_through: u32,
}

impl OperationLog {
    pub fn push(&mut self, op: Operation) {
        self.pending.push_back(op);
        if self.pending.len() > PENDING {
            if let Some(oldest) = self.pending.pop_front() {
                self.count(oldest);
            }
        }
    }

    /// Counts the operations of turns up to `turn`: a compaction covers them.
    pub fn count_through(&mut self, turn: u32) {
        while self.pending.front().is_some_and(|op| op.turn <= turn) {
            if let Some(op) = self.pending.pop_front() {
                self.count(op);
            }
        }
    }

    fn count(&mut self, op: Operation) {
        let (tallies, kind) = if op.is_command() {
            (&mut self.commands, command_kind(&op.target))
        } else {
            (&mut self.tools, op.tool.clone())
        };
        let kind =
            if tallies.contains_key(&kind) || tallies.len() < KINDS { kind } else { OTHER_KIND.to_string() };
        tallies.entry(kind).or_default().count(&op);
        self.counted += 1;
        if !op.succeeded {
            self.failed += 1;
            self.failures.push_back(op.clone());
            if self.failures.len() > FAILURES {
                self.failures.pop_front();
            }
        }
        self.latest.push_back(op);
        if self.latest.len() > LATEST {
            if let Some(dropped) = self.latest.pop_front() {
                self.dropped_through = dropped.turn;
            }
        }
    }

    /// Whether every operation of turns `first..` the log has seen is still kept verbatim.
    pub fn holds_from(&self, first: u32) -> bool {
        self.dropped_through < first
    }

    /// The operations of turns `first..=last` still kept verbatim, oldest first.
    pub fn held(&self, first: u32, last: u32) -> impl DoubleEndedIterator<Item = &Operation> {
        self.latest.iter().chain(&self.pending).filter(move |op| op.turn >= first && op.turn <= last)
    }

    /// One line per kind of the counted operations in `scope`, shell commands first, `line` making
    /// each from the kind (a tool, or a command's kind with `is_command`) and its totals; at most
    /// `budget` characters.
    pub fn totals(
        &self,
        scope: Scope,
        budget: usize,
        line: impl Fn(&str, bool, &str) -> String,
    ) -> Vec<String> {
        let commands = self.commands.iter().map(|(kind, tally)| (kind, true, tally));
        let tools = self.tools.iter().map(|(kind, tally)| (kind, false, tally));
        let all = commands.chain(tools.filter(|_| scope == Scope::All));
        fitting(all.map(|(kind, is_command, tally)| line(kind, is_command, &tally.describe())), budget)
    }

    /// The latest counted failures in `scope` that fit in `budget` characters, oldest first, and
    /// how many failed in all.
    pub fn failures(
        &self,
        scope: Scope,
        budget: usize,
        line: impl Fn(&Operation) -> String,
    ) -> (Vec<String>, u64) {
        let failed =
            if scope == Scope::All { self.failed } else { self.commands.values().map(|t| t.failed).sum() };
        let newest_first = self.failures.iter().rev().filter(|op| scope.takes(op));
        let mut lines = fitting(newest_first.map(line), budget);
        lines.reverse();
        (lines, failed)
    }

    /// The latest operations in `scope` of turns up to `last` that fit in `budget` characters,
    /// oldest first.
    pub fn latest(
        &self,
        scope: Scope,
        last: u32,
        budget: usize,
        line: impl Fn(&Operation) -> String,
    ) -> Vec<String> {
        let newest_first = self.held(0, last).rev().filter(|op| scope.takes(op));
        let mut lines = fitting(newest_first.map(line), budget);
        lines.reverse();
        lines
    }
}

/// The first `lines` whose total length, a newline each, is within `budget`.
pub fn fitting(lines: impl Iterator<Item = String>, budget: usize) -> Vec<String> {
    let mut used = 0;
    lines
        .take_while(|line| {
            used += line.len() + 1;
            used <= budget
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn op(turn: u32, tool: &str, target: &str, exit: Option<i32>) -> Operation {
        Operation {
            turn,
            tool: tool.into(),
            target: target.into(),
            succeeded: exit.is_none_or(|code| code == 0),
            detail: exit.map(|code| format!("exit {code}")),
        }
    }

    #[test]
    fn commands_are_counted_by_what_they_run() {
        assert_eq!(command_kind("wc -c out/f1.txt"), "wc");
        assert_eq!(command_kind("cargo test --lib"), "cargo test");
        assert_eq!(command_kind("cd sub && RUST_LOG=1 cargo build"), "cargo build");
        assert_eq!(command_kind("/usr/bin/git -C x status"), "git");
        assert_eq!(command_kind("ls | head"), "ls");
        assert_eq!(command_kind("  "), OTHER_KIND);
    }

    #[test]
    fn the_log_keeps_totals_and_the_latest_operations_in_bounded_memory() {
        let mut log = OperationLog::default();
        for turn in 1..=10_000u32 {
            let exit = if turn % 1_000 == 0 { 2 } else { 0 };
            log.push(op(turn, "shell", &format!("wc -c f{turn}"), Some(exit)));
            log.push(op(turn, "write_file", &format!("f{turn}"), None));
            if turn % 3 == 0 {
                log.count_through(turn - 1);
            }
        }
        assert!(log.pending.len() <= PENDING && log.latest.len() <= LATEST && log.failures.len() <= FAILURES);
        assert!(!log.holds_from(1) && log.holds_from(9_998));
        let totals = log.totals(Scope::All, 1_000, |kind, command, totals| {
            format!("{}{kind}: {totals}", if command { "shell " } else { "" })
        });
        assert_eq!(
            totals,
            [
                "shell wc: 9998 calls, 9 failed, last: exit 0 (turn 9998)",
                "write_file: 9998 calls, all succeeded, last turn 9998"
            ]
        );
        let (failures, failed) = log.failures(Scope::Commands, 60, |op| op.line());
        assert_eq!(failed, 9);
        assert_eq!(failures, ["✗ shell → \"wc -c f9000\" — exit 2 (turn 9000)"]);
        let latest = log.latest(Scope::Commands, 9_998, 100, |op| op.target.clone());
        assert_eq!(latest.last().map(String::as_str), Some("wc -c f9998"));
        assert!(latest.join("\n").len() <= 100);
        // Pending operations wait for their turn to be covered.
        assert_eq!(log.held(9_999, 10_000).count(), 4);
    }
}
