//! Starter workflows for `fabro new`: small, commented, realistic pipelines that validate with
//! no errors and no warnings, so a new user starts from something that works.

use std::fmt;
use std::str::FromStr;

/// The starter templates.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Template {
    /// plan -> implement -> check -> review.
    Linear,
    /// implement, run the tests, loop through a fix stage until they pass.
    BranchLoop,
    /// plan, implement (a goal gate), summarize for the reviewer, then a human approves or sends
    /// the change back.
    ReviewGate,
    /// three reviews at once, merged at a fan-in.
    Parallel,
}

impl Template {
    pub const ALL: [Template; 4] =
        [Template::Linear, Template::BranchLoop, Template::ReviewGate, Template::Parallel];

    /// The name used on the command line.
    pub fn name(self) -> &'static str {
        match self {
            Template::Linear => "linear",
            Template::BranchLoop => "branch-loop",
            Template::ReviewGate => "review-gate",
            Template::Parallel => "parallel",
        }
    }

    /// One line about what the template does.
    pub fn description(self) -> &'static str {
        match self {
            Template::Linear => "plan, implement, check and review, one after another",
            Template::BranchLoop => "implement, run the tests, and loop through a fix stage until they pass",
            Template::ReviewGate => "plan, implement (a goal gate), summarize for the reviewer, then a human approves the change or sends it back",
            Template::Parallel => "three reviews at once, merged at a fan-in",
        }
    }

    fn text(self) -> &'static str {
        match self {
            Template::Linear => LINEAR,
            Template::BranchLoop => BRANCH_LOOP,
            Template::ReviewGate => REVIEW_GATE,
            Template::Parallel => PARALLEL,
        }
    }
}

impl fmt::Display for Template {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A template name that is not one of [`Template::ALL`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("unknown template `{0}`; choose one of linear, branch-loop, review-gate, parallel")]
pub struct UnknownTemplate(pub String);

impl FromStr for Template {
    type Err = UnknownTemplate;

    fn from_str(text: &str) -> Result<Template, UnknownTemplate> {
        let wanted = text.trim().to_ascii_lowercase().replace('_', "-");
        Template::ALL
            .into_iter()
            .find(|template| template.name() == wanted)
            .ok_or_else(|| UnknownTemplate(text.to_string()))
    }
}

/// The text of the starter workflow `kind`, as the digraph `name` (see [`check_name`]).
pub fn template(kind: Template, name: &str) -> String {
    kind.text().replace("__NAME__", name)
}

/// A workflow name that cannot be a digraph name and file name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid workflow name `{name}`: {reason}; try `{suggestion}`")]
pub struct InvalidName {
    pub name: String,
    pub reason: &'static str,
    /// A valid name close to the one given.
    pub suggestion: String,
}

const DOT_KEYWORDS: [&str; 6] = ["node", "edge", "graph", "digraph", "subgraph", "strict"];

/// Checks that `name` is a plain identifier `[A-Za-z_][A-Za-z0-9_]*` and not a DOT keyword.
pub fn check_name(name: &str) -> Result<(), InvalidName> {
    let reason = if name.is_empty() {
        Some("it is empty")
    } else if !name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_') {
        Some("a name is a plain identifier: letters, digits and `_`")
    } else if name.starts_with(|c: char| c.is_ascii_digit()) {
        Some("a name cannot start with a digit")
    } else if DOT_KEYWORDS.contains(&name.to_ascii_lowercase().as_str()) {
        Some("it is a DOT keyword")
    } else {
        None
    };
    match reason {
        None => Ok(()),
        Some(reason) => Err(InvalidName { name: name.to_string(), reason, suggestion: suggest_name(name) }),
    }
}

/// A valid name close to `name`: `my-flow.dot` -> `my_flow`, `2fast` -> `w_2fast`.
pub fn suggest_name(name: &str) -> String {
    let base = name.strip_suffix(".dot").unwrap_or(name);
    let mut out = String::new();
    for c in base.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '_' { c } else { '_' };
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    let mut out = out.trim_matches('_').to_string();
    if out.is_empty() {
        out = "my_workflow".to_string();
    }
    if out.starts_with(|c: char| c.is_ascii_digit()) {
        out.insert_str(0, "w_");
    }
    if DOT_KEYWORDS.contains(&out.to_ascii_lowercase().as_str()) {
        out.push_str("_workflow");
    }
    out
}

const LINEAR: &str = r#"// __NAME__.dot: a linear pipeline (made by `fabro new --template linear`). A model plans the
// change, an agent implements it, a command checks it, and a second agent reviews the result.
//
// Check it:  fabro validate __NAME__.dot
// Run it:    fabro run __NAME__.dot --simulate     (placeholder LLM answers; the command runs)
digraph __NAME__ {
    // Every `$goal` in a prompt becomes this text; `fabro run --goal TEXT` replaces it.
    goal = "Describe the change you want, e.g. add a --json flag to the list command"
    // Here a stage that fails for good ends the run (see the edges below), on purpose: the
    // failure_path lint, which points such stages out, is accepted.
    allow_lints = "failure_path"

    start [shape=Mdiamond, label="Start"]
    exit  [shape=Msquare, label="Exit"]

    // tab: a single LLM call, no tools.
    plan [
        shape=tab,
        label="Plan",
        prompt="Write a short, numbered implementation plan for: $goal. Name the files you expect to touch and the tests that will prove the change works. Do not write code yet."
    ]

    // box (the default shape): an agent with tools that edits files and runs commands.
    // A fail or retry outcome is tried once more after a short backoff.
    implement [
        label="Implement",
        prompt="Implement the plan from the previous stage for: $goal. Keep the change focused, add or update tests, and run them before you finish.",
        max_retries=1,
        retry_policy=standard
    ]

    // parallelogram: a shell command, run in the work directory. It succeeds when the script
    // exits 0. Replace the script with your project's check (cargo test, npm test, make check).
    check [
        shape=parallelogram,
        label="Check",
        script="echo 'replace this script with your test command'",
        timeout=10m
    ]

    review [
        label="Review",
        prompt="Review the change against the goal ($goal): correctness, error handling and test coverage. Fix small problems directly and end with a one-paragraph summary."
    ]

    // Unconditional edges are taken after success. A stage that fails for good has no edge
    // to follow here, so the run stops with status failed.
    start -> plan -> implement -> check -> review -> exit
}
"#;

const BRANCH_LOOP: &str = r#"// __NAME__.dot: implement a change, run the tests, and loop through a fix stage until they pass
// (made by `fabro new --template branch-loop`). Shows a failure branch, a bounded loop and retries.
//
// Check it:  fabro validate __NAME__.dot
// Run it:    fabro run __NAME__.dot --simulate     (placeholder LLM answers; the command runs)
digraph __NAME__ {
    // Every `$goal` in a prompt becomes this text; `fabro run --goal TEXT` replaces it.
    goal = "Describe the bug to fix, e.g. the last page of search results is dropped"
    // The agents end the run if they fail for good (after their retries); only the tests
    // have a failure path. The failure_path lint, which points out the agents, is accepted.
    allow_lints = "failure_path"

    start [shape=Mdiamond, label="Start"]
    exit  [shape=Msquare, label="Exit"]

    implement [
        label="Implement",
        prompt="Find and fix the cause of: $goal. Add a regression test that fails without your fix.",
        max_retries=2,
        retry_policy=standard
    ]

    // A command stage succeeds when its script exits 0 and fails otherwise. Replace the script
    // with your project's test command (cargo test, npm test, pytest, ...).
    run_tests [
        shape=parallelogram,
        label="Run tests",
        script="echo 'replace this script with your test command'",
        timeout=15m
    ]

    // The loop body. max_visits bounds the loop: after five fix attempts the run stops.
    fix [
        label="Fix failing tests",
        prompt="The test run failed; its output is in the context as command.output and command.stderr. Fix the code (not the tests, unless a test is wrong) and explain each change in one sentence. Goal: $goal",
        max_visits=5,
        max_retries=1,
        retry_policy=linear
    ]

    start -> implement -> run_tests

    // After success the unconditional edge is taken. A failed stage never follows an
    // unconditional edge: only an edge whose condition matches, so the failure path is
    // spelled out with condition="outcome=fail".
    run_tests -> exit [label="Passed"]
    run_tests -> fix  [label="Failed", condition="outcome=fail"]

    fix -> run_tests [label="Re-run tests"]
}
"#;

const REVIEW_GATE: &str = r#"// __NAME__.dot: an agent implements a planned change, and a human approves it or sends it back
// (made by `fabro new --template review-gate`). Shows a human gate and a goal gate.
//
// Check it:  fabro validate __NAME__.dot
// Run it:    fabro run __NAME__.dot --simulate     (the gate asks on the terminal; add
//            --auto-approve to take the first choice, or --answers FILE to script the answers)
digraph __NAME__ {
    // Every `$goal` in a prompt becomes this text; `fabro run --goal TEXT` replaces it.
    goal = "Describe the change you want, e.g. rate-limit the public search endpoint"

    start [shape=Mdiamond, label="Start"]
    exit  [shape=Msquare, label="Exit"]

    plan [
        shape=tab,
        label="Plan",
        prompt="Draft a plan for: $goal. Cover the design, the edge cases and how the change will be tested."
    ]

    // goal_gate: the run may only exit once this stage has succeeded. If it fails for good,
    // the run goes back to `plan` (retry_target) to rethink the approach.
    implement [
        label="Implement",
        prompt="Implement the plan for: $goal. Include tests, and run them before you finish.",
        goal_gate=true,
        retry_target="plan",
        max_retries=1,
        retry_policy=standard
    ]

    summarize [
        shape=tab,
        label="Summarize for the reviewer",
        prompt="Write a reviewer-facing summary of the change: what it does, the decisions and their trade-offs, and what the reviewer should look at closely."
    ]

    // hexagon: a human gate. The choices are its outgoing edges' labels; `[A]` is the key that
    // picks a choice. Without a terminal and without an answer the run pauses (exit 3) and
    // `fabro resume RUN_DIR --answers FILE` continues it.
    review [
        shape=hexagon,
        label="Approve the change?"
    ]

    revise [
        label="Revise",
        prompt="A reviewer requested changes. Address every point of their feedback, rerun the tests, and list what you changed.",
        max_visits=3
    ]

    start -> plan -> implement -> summarize -> review

    review -> exit   [label="[A] Approve"]
    review -> revise [label="[R] Request changes"]

    revise -> summarize
    // If the revision fails for good, the reviewer decides again rather than the run ending.
    revise -> review [label="Revision failed", condition="outcome=fail"]
}
"#;

const PARALLEL: &str = r#"// __NAME__.dot: after implementing a change, three reviews run at the same time and a fan-in
// stage merges their findings (made by `fabro new --template parallel`).
//
// Check it:  fabro validate __NAME__.dot
// Run it:    fabro run __NAME__.dot --simulate
digraph __NAME__ {
    // Every `$goal` in a prompt becomes this text; `fabro run --goal TEXT` replaces it.
    goal = "Describe the change you want, e.g. stream the CSV export instead of buffering it"
    // A stage outside the parallel reviews that fails for good ends the run, on purpose: the
    // failure_path lint, which points such stages out, is accepted.
    allow_lints = "failure_path"

    start [shape=Mdiamond, label="Start"]
    exit  [shape=Msquare, label="Exit"]

    implement [
        label="Implement",
        prompt="Implement: $goal. Keep public signatures unchanged and make sure the existing tests pass."
    ]

    // component: the fan-out. Every outgoing edge starts one branch; the join waits for all of
    // them, and a failed branch does not cancel its siblings.
    reviews [
        shape=component,
        label="Parallel reviews",
        max_parallel=3,
        join_policy=wait_all,
        error_policy=continue
    ]

    security_review [
        label="Security review",
        prompt="Review the diff for security problems: untrusted input, injection, unbounded memory use. List findings with severity; do not edit code."
    ]

    // A command branch: replace the script with your linter or test command.
    lint [
        shape=parallelogram,
        label="Lint",
        script="echo 'replace this script with your lint command'",
        timeout=10m
    ]

    performance_review [
        shape=tab,
        label="Performance review",
        prompt="Review the diff for performance: needless allocations, quadratic loops, unbuffered I/O. List findings; do not edit code."
    ]

    // tripleoctagon: the fan-in, where the branches meet. One LLM call merges their findings.
    merge_findings [
        shape=tripleoctagon,
        label="Merge findings",
        prompt="Merge the findings of the security review, the lint run and the performance review into one list ordered by severity, dropping duplicates and anything not actionable."
    ]

    apply_fixes [
        label="Apply fixes",
        prompt="Fix every must-fix item in the merged list for: $goal. Rerun the tests and note any item you chose not to fix and why."
    ]

    start -> implement -> reviews

    reviews -> security_review    [label="Security"]
    reviews -> lint               [label="Lint"]
    reviews -> performance_review [label="Performance"]

    security_review -> merge_findings
    lint -> merge_findings
    performance_review -> merge_findings

    merge_findings -> apply_fixes -> exit
}
"#;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceFile;
    use crate::Loader;

    #[test]
    fn every_template_validates_with_no_errors_and_no_warnings() {
        for kind in Template::ALL {
            let text = template(kind, "my_flow");
            assert!(text.contains("digraph my_flow {"), "{kind}");
            assert!(!text.contains("__NAME__"), "{kind}");
            let checked = Loader::new()
                .load_source(SourceFile::new("my_flow.dot", text))
                .unwrap_or_else(|e| panic!("{kind}: {e}"));
            assert!(checked.diagnostics.is_empty(), "{kind}: {:#?}", checked.diagnostics);
        }
    }

    #[test]
    fn failure_paths_are_conditional_edges() {
        let text = template(Template::BranchLoop, "w");
        assert!(text.contains(r#"run_tests -> fix  [label="Failed", condition="outcome=fail"]"#));
        assert!(template(Template::Parallel, "w").contains("shape=tripleoctagon"));
    }

    #[test]
    fn template_names_round_trip() {
        for kind in Template::ALL {
            assert_eq!(kind.name().parse::<Template>(), Ok(kind));
        }
        assert_eq!("Branch_Loop".parse::<Template>(), Ok(Template::BranchLoop));
        let error = "fancy".parse::<Template>().unwrap_err();
        assert!(error.to_string().contains("linear, branch-loop, review-gate, parallel"));
    }

    #[test]
    fn names_must_be_plain_identifiers() {
        assert!(check_name("my_flow").is_ok());
        assert!(check_name("_x9").is_ok());
        for (bad, suggestion) in [
            ("my-flow", "my_flow"),
            ("my flow!", "my_flow"),
            ("ship.dot", "ship"),
            ("2fast", "w_2fast"),
            ("graph", "graph_workflow"),
            ("", "my_workflow"),
            ("ünï", "n"),
        ] {
            let error = check_name(bad).unwrap_err();
            assert_eq!(error.suggestion, suggestion, "{bad}");
            assert!(check_name(&error.suggestion).is_ok(), "{bad}");
        }
    }
}
