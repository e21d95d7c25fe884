//! `fabro run` against the Attractor specification: one test per row of the cross-feature parity
//! matrix (section 11.12) and the integration smoke test of section 11.13. Each test runs the real binary in a
//! temporary directory and checks what the run left behind: `result.json`, `checkpoint.json`,
//! `manifest.json`, `events.jsonl` and the stage directories. The rows that need the library
//! (custom handlers, the model a stage asks for) drive `fabro::engine::Engine` directly.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{fabro_bin, Ran, Test};
use serde_json::{json, Value};

/// Every CLI test passes `--run-dir run`, inside its temporary directory.
const RUN_DIR: &str = "run";

/// `fabro run workflow.dot --run-dir run ARGS` in a fresh directory holding `workflow` and
/// `files`; the exit status must be `status`.
fn run(workflow: &str, files: &[(&str, &str)], args: &[&str], status: i32) -> Ran {
    let mut test = Test::new().workflow(workflow);
    for (name, text) in files {
        test = test.file(name, text);
    }
    test.args(["run", "workflow.dot", "--run-dir", RUN_DIR]).args(args).status(status).run()
}

fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON ({e}):\n{text}", path.display()))
}

fn read_text(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

fn strings(value: &Value) -> Vec<String> {
    value
        .as_array()
        .unwrap_or_else(|| panic!("not an array: {value}"))
        .iter()
        .map(|v| v.as_str().unwrap_or_else(|| panic!("not a string: {v}")).to_string())
        .collect()
}

/// JSON responses for `--responses`: `{"node": text | [text per visit]}`.
fn responses(value: Value) -> String {
    value.to_string()
}

/// A routing directive as an LLM would write it at the end of its answer.
fn directive(value: Value) -> String {
    format!("Done.\n\n```json\n{value}\n```\n")
}

/// What a finished run left in its run directory.
trait RunFiles {
    fn run_dir(&self) -> PathBuf;
    fn result(&self) -> Value {
        read_json(&self.run_dir().join("result.json"))
    }
    fn checkpoint(&self) -> Value {
        read_json(&self.run_dir().join("checkpoint.json"))
    }
    fn manifest(&self) -> Value {
        read_json(&self.run_dir().join("manifest.json"))
    }
    /// Every line of `events.jsonl`, parsed.
    fn events(&self) -> Vec<Value> {
        read_text(&self.run_dir().join("events.jsonl"))
            .lines()
            .map(|line| serde_json::from_str(line).unwrap_or_else(|e| panic!("bad event line ({e}): {line}")))
            .collect()
    }
    fn events_named(&self, name: &str) -> Vec<Value> {
        self.events().into_iter().filter(|e| e["event"] == name).collect()
    }
    /// `result.json`'s `completed_nodes`.
    fn completed(&self) -> Vec<String> {
        strings(&self.result()["completed_nodes"])
    }
    /// Every `edge.selected` event as `from -> to (reason)`.
    fn routes(&self) -> Vec<String> {
        self.events_named("edge.selected")
            .iter()
            .map(|e| format!("{} -> {} ({})", text(&e["from"]), text(&e["to"]), text(&e["reason"])))
            .collect()
    }
    /// `stages/<node>/<visit>/`.
    fn stage(&self, node: &str, visit: u32) -> PathBuf {
        self.run_dir().join("stages").join(node).join(visit.to_string())
    }
    fn stage_status(&self, node: &str, visit: u32) -> Value {
        read_json(&self.stage(node, visit).join("status.json"))
    }
    /// The checkpoint's context.
    fn context(&self) -> Value {
        self.checkpoint()["context"].clone()
    }
}

impl RunFiles for Ran {
    fn run_dir(&self) -> PathBuf {
        self.dir.path().join(RUN_DIR)
    }
}

fn text(value: &Value) -> &str {
    value.as_str().unwrap_or_else(|| panic!("not a string: {value}"))
}

/// `result.json`'s stages as `node/visit status`.
fn stage_list(result: &Value) -> Vec<String> {
    result["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .map(|s| format!("{}/{} {}", text(&s["node_id"]), s["visit"], text(&s["status"])))
        .collect()
}

/// Whether `pid` still runs (a zombie waiting to be reaped counts as gone), polling for up to two
/// seconds since signals and reaping are asynchronous.
fn still_running(pid: i32) -> bool {
    let deadline = Instant::now() + Duration::from_secs(2);
    loop {
        let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
        let gone = stat.is_empty()
            || stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with(['Z', 'X']));
        if gone {
            return false;
        }
        if Instant::now() > deadline {
            return true;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

// ---------------------------------------------------------------------------------------------
// Execute a linear 3-node pipeline end-to-end
// ---------------------------------------------------------------------------------------------

const LINEAR: &str = r#"digraph linear3 {
    goal = "Print hello world"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    plan [shape=tab, prompt="Plan: $goal"]
    implement [prompt="Implement the plan for $goal"]
    review [prompt="Review the change"]
    start -> plan -> implement -> review -> exit
}
"#;

/// [Matrix] Execute a linear 3-node pipeline end-to-end
#[test]
fn execute_a_linear_3_node_pipeline_end_to_end() {
    let ran = run(LINEAR, &[], &["--simulate"], 0);

    let result = ran.result();
    assert_eq!(result["status"], "succeeded");
    assert_eq!(result["failure_reason"], Value::Null);
    assert_eq!(result["run_dir"], RUN_DIR);
    assert_eq!(ran.completed(), ["start", "plan", "implement", "review", "exit"]);
    assert_eq!(
        stage_list(&result),
        ["start/1 success", "plan/1 success", "implement/1 success", "review/1 success", "exit/1 success"]
    );

    // Every LLM stage leaves what it sent, what it got and how it ended.
    for (node, handler, prompt, answerer) in [
        ("plan", "prompt", "Plan: Print hello world", "model"),
        ("implement", "agent", "Implement the plan for Print hello world", "agent"),
        ("review", "agent", "Review the change", "agent"),
    ] {
        let dir = ran.stage(node, 1);
        assert_eq!(sent_prompt(&dir), prompt, "{node}");
        assert_eq!(
            read_text(&dir.join("response.md")),
            format!("[simulated] Stage `{node}`, visit 1: the {answerer} would answer the prompt here."),
            "{node}"
        );
        let status = ran.stage_status(node, 1);
        assert_eq!(status["outcome"], "success", "{node}");
        assert_eq!(status["handler"], handler, "{node}");
        assert_eq!(status["attempts"], 1, "{node}");
        assert_eq!(status["context_updates"]["last_stage"], node, "{node}");
    }
    // Start and exit only route: their visits live in the journal and result.json, with no
    // directory of their own.
    for node in ["start", "exit"] {
        assert!(!ran.stage(node, 1).exists(), "{node}");
        assert!(result["stages"]
            .as_array()
            .unwrap()
            .iter()
            .any(|s| s["node_id"] == node && s["handler"] == node));
    }

    // manifest.json describes the run and how it ended.
    let manifest = ran.manifest();
    let run_id = text(&manifest["run_id"]).to_string();
    assert_eq!(result["run_id"], run_id.as_str());
    assert_eq!(run_id.len(), 36, "a UUID: {run_id}");
    assert_eq!(manifest["workflow"], "linear3");
    let source_path = text(&manifest["source_path"]);
    assert!(Path::new(source_path).is_absolute() && source_path.ends_with("/workflow.dot"), "{source_path}");
    let sha = {
        use sha2::Digest;
        sha2::Sha256::digest(LINEAR.as_bytes()).iter().map(|b| format!("{b:02x}")).collect::<String>()
    };
    assert_eq!(manifest["source_sha256"], sha.as_str());
    assert_eq!(manifest["goal"], "Print hello world");
    assert_eq!(
        std::fs::canonicalize(text(&manifest["work_dir"])).unwrap(),
        std::fs::canonicalize(ran.dir.path()).unwrap(),
        "the work dir defaults to the current directory"
    );
    assert_eq!(manifest["status"], "succeeded");
    assert_eq!(manifest["tool_version"], env!("CARGO_PKG_VERSION"));
    let started = text(&manifest["started_at"]);
    let finished = text(&manifest["finished_at"]);
    assert!(started.ends_with('Z') && finished.ends_with('Z'), "{started} {finished}");
    assert!(started <= finished, "{started} > {finished}");

    // workflow.dot is the exact source that ran.
    assert_eq!(std::fs::read(ran.run_dir().join("workflow.dot")).unwrap(), LINEAR.as_bytes());

    // events.jsonl: numbered from 1, one run id, in this order.
    let events = ran.events();
    for (index, event) in events.iter().enumerate() {
        assert_eq!(event["seq"], index as u64 + 1, "{event}");
        assert_eq!(event["run_id"], run_id.as_str(), "{event}");
        assert!(text(&event["ts"]).ends_with('Z'), "{event}");
    }
    let names: Vec<String> = events
        .iter()
        .map(|e| match e["node_id"].as_str() {
            Some(node) => format!("{} {node}", text(&e["event"])),
            None => text(&e["event"]).to_string(),
        })
        .collect();
    let mut expected = vec!["run.started".to_string()];
    for node in ["start", "plan", "implement", "review"] {
        expected.extend([
            format!("stage.started {node}"),
            format!("stage.completed {node}"),
            "edge.selected".to_string(),
            format!("checkpoint.saved {node}"),
        ]);
    }
    expected.extend([
        "stage.started exit".to_string(),
        "stage.completed exit".to_string(),
        "checkpoint.saved exit".to_string(),
        "run.completed".to_string(),
    ]);
    assert_eq!(names, expected);
    assert_eq!(
        ran.routes(),
        [
            "start -> plan (weight)",
            "plan -> implement (weight)",
            "implement -> review (weight)",
            "review -> exit (weight)"
        ]
    );
    let started = ran.events_named("stage.started");
    assert_eq!(started[1]["handler"], "prompt");
    assert_eq!(started[1]["visit"], 1);

    // The summary goes to stderr.
    let stderr = ran.stderr();
    assert!(stderr.contains("run succeeded in "), "{stderr}");
    assert!(stderr.contains(": run\n"), "{stderr}");
}

// ---------------------------------------------------------------------------------------------
// Execute with conditional branching (success/fail paths)
// ---------------------------------------------------------------------------------------------

/// A diamond-shaped route: `check` goes to `good` or `bad` by its outcome and both meet at exit.
fn branching(script: &str) -> String {
    format!(
        r#"digraph branch {{
    start [shape=Mdiamond]
    exit [shape=Msquare]
    check [shape=parallelogram, script="{script}"]
    good [shape=parallelogram, script="echo good"]
    bad [shape=parallelogram, script="echo bad"]
    start -> check
    check -> good [label="Pass", condition="outcome=success"]
    check -> bad [label="Fail", condition="outcome=fail"]
    good -> exit
    bad -> exit
}}
"#
    )
}

/// [Matrix] Execute with conditional branching (success/fail paths)
#[test]
fn execute_with_conditional_branching_success_and_fail_paths() {
    // Success path.
    let ran = run(&branching("exit 0"), &[], &["-q"], 0);
    assert_eq!(ran.completed(), ["start", "check", "good", "exit"]);
    assert_eq!(
        ran.routes(),
        ["start -> check (weight)", "check -> good (condition)", "good -> exit (weight)"]
    );
    assert_eq!(read_text(&ran.stage("good", 1).join("stdout.log")), "good\n");
    assert!(!ran.run_dir().join("stages/bad").exists());

    // Fail path: the failure is routed, so the run still succeeds.
    let ran = run(&branching("exit 1"), &[], &["-q"], 0);
    assert_eq!(ran.result()["status"], "succeeded");
    assert_eq!(ran.completed(), ["start", "check", "bad", "exit"]);
    assert_eq!(ran.routes(), ["start -> check (weight)", "check -> bad (condition)", "bad -> exit (weight)"]);
    assert_eq!(stage_list(&ran.result())[1], "check/1 fail");
    assert_eq!(ran.stage_status("check", 1)["failure_reason"], "command exited with code 1");
    assert_eq!(read_text(&ran.stage("bad", 1).join("stdout.log")), "bad\n");
    assert!(!ran.run_dir().join("stages/good").exists());

    // The same routes taken by an LLM stage's routing directive.
    let workflow = r#"digraph branch {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    judge [prompt="Do the tests pass?"]
    good [prompt="Celebrate"]
    bad [prompt="Investigate"]
    start -> judge
    judge -> good [condition="outcome=success"]
    judge -> bad [condition="outcome=fail"]
    good -> exit
    bad -> exit
}
"#;
    for (outcome, taken) in [("success", "good"), ("fail", "bad")] {
        let script = responses(json!({ "judge": directive(json!({ "outcome": outcome })) }));
        let ran = run(workflow, &[("responses.json", &script)], &["--responses", "responses.json", "-q"], 0);
        assert_eq!(ran.completed(), ["start", "judge", taken, "exit"], "{outcome}");
        assert_eq!(ran.routes()[1], format!("judge -> {taken} (condition)"));
        assert_eq!(ran.stage_status("judge", 1)["outcome"], outcome);
    }
}

/// [Matrix] Execute with conditional branching (success/fail paths), routed by a `diamond`
/// (conditional) node placed after the stage, as `workflows/branch_and_loop.dot` does: the
/// failure path into the diamond is an explicit `outcome=fail` edge, and the diamond's
/// conditions read the outcome of the stage before it.
#[test]
fn execute_with_conditional_branching_through_a_diamond() {
    let workflow = |script: &str| {
        format!(
            r#"digraph branch {{
    start [shape=Mdiamond]
    exit [shape=Msquare]
    check [shape=parallelogram, script="{script}"]
    gate [shape=diamond, label="Passed?"]
    good [shape=parallelogram, script="echo good"]
    bad [shape=parallelogram, script="echo bad"]
    start -> check -> gate
    check -> gate [condition="outcome=fail"]
    gate -> good [condition="outcome=success"]
    gate -> bad [condition="outcome=fail"]
    gate -> exit
    good -> exit
    bad -> exit
}}
"#
        )
    };
    let ran = run(&workflow("exit 0"), &[], &["-q"], 0);
    assert_eq!(ran.completed(), ["start", "check", "gate", "good", "exit"]);

    let ran = run(&workflow("exit 1"), &[], &["-q"], 0);
    assert_eq!(ran.result()["status"], "succeeded");
    assert_eq!(ran.completed(), ["start", "check", "gate", "bad", "exit"]);
    assert_eq!(
        ran.routes(),
        [
            "start -> check (weight)",
            "check -> gate (condition)",
            "gate -> bad (condition)",
            "bad -> exit (weight)"
        ]
    );
}

/// The diamond half of the bug above on its own: the stage before the diamond ends in
/// `partial_success` (no failure involved), and the diamond's `outcome=partial_success` edge
/// should be taken.
#[test]
fn a_diamond_routes_on_the_outcome_of_the_stage_before_it() {
    let workflow = r#"digraph partial {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [prompt="Work"]
    gate [shape=diamond]
    polish [prompt="Polish the rough edges"]
    start -> work -> gate
    gate -> polish [condition="outcome=partial_success"]
    gate -> exit
    polish -> exit
}
"#;
    let script = responses(json!({ "work": directive(json!({ "outcome": "partial_success" })) }));
    let ran = run(workflow, &[("r.json", &script)], &["--responses", "r.json", "-q"], 0);
    assert_eq!(ran.completed(), ["start", "work", "gate", "polish", "exit"]);
}

/// Failure routing (the issue decides this over Attractor 3.3): a failed stage never follows an
/// unconditional edge, which is the way on after success. It takes an edge whose condition
/// matches the failure, else its retry_target, else the run fails with the stage's reason.
#[test]
fn a_failed_stage_follows_only_an_edge_that_matches_the_failure() {
    let workflow = |failure_edge: &str| {
        format!(
            r#"digraph fallback {{
    start [shape=Mdiamond]
    exit [shape=Msquare]
    lint [shape=parallelogram, script="exit 1"]
    ship [shape=parallelogram, script="echo ship"]
    explain [shape=parallelogram, script="echo explain"]
    start -> lint
    lint -> ship
    {failure_edge}
    ship -> exit
    explain -> exit
}}
"#
        )
    };
    let ran = run(&workflow("lint -> explain [condition=\"outcome=fail\"]"), &[], &["-q"], 0);
    assert_eq!(ran.completed(), ["start", "lint", "explain", "exit"]);
    assert_eq!(ran.routes()[1], "lint -> explain (condition)");

    let ran = run(&workflow(""), &[], &["-q"], 1);
    assert_eq!(ran.completed(), ["start", "lint"]);
    assert_eq!(ran.result()["failure_reason"], "stage `lint` failed: command exited with code 1 (no `outcome=fail` edge, `retry_target` or `fallback_retry_target` from `lint`, so the run ends)");
}

// ---------------------------------------------------------------------------------------------
// Execute with retry on failure (max_retries=2)
// ---------------------------------------------------------------------------------------------

/// A command that fails until its third attempt, counting attempts in the work directory.
const FLAKY: &str = r#"digraph retry {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    flaky [shape=parallelogram, max_retries=2, retry_policy=aggressive,
           script="n=$(cat attempts 2>/dev/null || echo 0); n=$((n+1)); echo $n > attempts; echo attempt $n; [ $n -ge 3 ]"]
    start -> flaky -> exit
}
"#;

/// [Matrix] Execute with retry on failure (max_retries=2)
#[test]
fn execute_with_retry_on_failure_max_retries_2() {
    let ran = run(FLAKY, &[], &["-q"], 0);
    assert_eq!(ran.completed(), ["start", "flaky", "exit"]);
    assert_eq!(read_text(&ran.dir.path().join("attempts")), "3\n");

    // One visit, three attempts.
    let status = ran.stage_status("flaky", 1);
    assert_eq!(status["outcome"], "success");
    assert_eq!(status["attempts"], 3);
    assert_eq!(status["context_updates"]["command.output"], "attempt 3\n");
    assert!(read_text(&ran.stage("flaky", 1).join("stdout.log")).ends_with("attempt 3\n"));
    assert!(!ran.run_dir().join("stages/flaky/2").exists());
    assert_eq!(stage_list(&ran.result())[1], "flaky/1 success");

    let retrying = ran.events_named("stage.retrying");
    assert_eq!(retrying.len(), 2);
    for (event, attempt) in retrying.iter().zip([2, 3]) {
        assert_eq!(event["node_id"], "flaky");
        assert_eq!(event["visit"], 1);
        assert_eq!(event["attempt"], attempt);
        assert_eq!(event["reason"], "command exited with code 1");
        assert!(event["delay_ms"].as_u64().unwrap() <= 5_000 * 5 / 4, "{event}");
    }
    let completed = ran.events_named("stage.completed");
    assert_eq!(completed[1]["node_id"], "flaky");
    assert_eq!(completed[1]["attempts"], 3);

    let checkpoint = ran.checkpoint();
    assert_eq!(checkpoint["context"]["internal.retry_count.flaky"], 2);
    assert_eq!(checkpoint["node_retries"], json!({"flaky": 2}));
}

/// [Matrix] Execute with retry on failure: exhausted retries fail the stage (and the run), unless
/// `allow_partial` accepts a partial success.
#[test]
fn exhausted_retries_fail_the_stage_or_end_in_partial_success() {
    let workflow = |extra: &str| {
        format!(
            r#"digraph exhausted {{
    start [shape=Mdiamond]
    exit [shape=Msquare]
    flaky [shape=parallelogram, max_retries=2, retry_policy=none{extra}, script="echo try >> tries; exit 4"]
    start -> flaky -> exit
}}
"#
        )
    };

    let ran = run(&workflow(""), &[], &["-q"], 1);
    let result = ran.result();
    assert_eq!(result["status"], "failed");
    assert_eq!(result["failure_reason"], "stage `flaky` failed: command exited with code 4 (no `outcome=fail` edge, `retry_target` or `fallback_retry_target` from `flaky`, so the run ends)");
    assert_eq!(ran.completed(), ["start", "flaky"]);
    assert_eq!(read_text(&ran.dir.path().join("tries")), "try\ntry\ntry\n");
    let status = ran.stage_status("flaky", 1);
    assert_eq!(status["outcome"], "fail");
    assert_eq!(status["attempts"], 3);
    assert_eq!(status["failure_reason"], "command exited with code 4");
    assert_eq!(ran.events_named("stage.retrying").len(), 2);
    assert_eq!(ran.events_named("stage.failed").len(), 1);
    let context = ran.context();
    assert_eq!(context["failure_class"], "deterministic");
    assert_eq!(context["failure_detail"], "retries_exhausted");
    assert_eq!(status["failure_class"], "deterministic");
    assert_eq!(context["failure_signature"], "flaky|deterministic|command exited with code <n>");
    assert_eq!(context["failure_reason"], "command exited with code 4");
    assert_eq!(ran.checkpoint()["status"], "failed");
    assert!(
        ran.stderr().contains("reason: stage `flaky` failed: command exited with code 4 (no `outcome=fail` edge, `retry_target` or `fallback_retry_target` from `flaky`, so the run ends)"),
        "{}",
        ran.stderr()
    );

    let ran = run(&workflow(", allow_partial=true"), &[], &["-q"], 0);
    assert_eq!(ran.result()["status"], "succeeded");
    assert_eq!(ran.completed(), ["start", "flaky", "exit"]);
    assert_eq!(stage_list(&ran.result())[1], "flaky/1 partial_success");
    let status = ran.stage_status("flaky", 1);
    assert_eq!(status["outcome"], "partial_success");
    assert_eq!(status["attempts"], 3);
    assert_eq!(status["notes"], "retries exhausted after 3 attempts; allow_partial accepts it");

    // The graph's default_max_retries applies to nodes without max_retries.
    let workflow = r#"digraph defaults {
    default_max_retries = 1
    start [shape=Mdiamond]
    exit [shape=Msquare]
    flaky [shape=parallelogram, retry_policy=none, script="echo try >> tries; exit 4"]
    start -> flaky -> exit
}
"#;
    let ran = run(workflow, &[], &["-q"], 1);
    assert_eq!(ran.stage_status("flaky", 1)["attempts"], 2);
    assert_eq!(read_text(&ran.dir.path().join("tries")), "try\ntry\n");
}

// ---------------------------------------------------------------------------------------------
// Goal gates
// ---------------------------------------------------------------------------------------------

/// `implement` is a goal gate; when it fails the run still goes on to the exit along its
/// `outcome=fail` edge, where the gate check decides.
fn gated(gate_attrs: &str, graph_attrs: &str) -> String {
    format!(
        r#"digraph gated {{
    {graph_attrs}
    start [shape=Mdiamond]
    exit [shape=Msquare]
    plan [prompt="Plan"]
    implement [prompt="Implement", goal_gate=true{gate_attrs}]
    start -> plan -> implement
    implement -> exit [label="Give up", condition="outcome=fail"]
    implement -> exit
}}
"#
    )
}

fn fails_then_succeeds() -> String {
    responses(json!({
        "implement": [directive(json!({"outcome": "fail", "failure_reason": "tests are red"})), "All green."]
    }))
}

/// [Matrix] Goal gate blocks exit when unsatisfied
#[test]
fn goal_gate_blocks_exit_when_unsatisfied() {
    // The gate's own retry_target, then the graph's: both send the run back to `plan`.
    for workflow in [gated(r#", retry_target="plan""#, ""), gated("", r#"retry_target = "plan""#)] {
        let ran = run(&workflow, &[("r.json", &fails_then_succeeds())], &["--responses", "r.json", "-q"], 0);
        assert_eq!(ran.result()["status"], "succeeded");
        assert_eq!(ran.completed(), ["start", "plan", "implement", "plan", "implement", "exit"]);
        assert_eq!(
            stage_list(&ran.result()),
            [
                "start/1 success",
                "plan/1 success",
                "implement/1 fail",
                "plan/2 success",
                "implement/2 success",
                "exit/1 success"
            ]
        );
        assert_eq!(
            ran.routes(),
            [
                "start -> plan (weight)",
                "plan -> implement (weight)",
                "implement -> exit (condition)",
                "exit -> plan (goal_gate)",
                "plan -> implement (weight)",
                "implement -> exit (weight)"
            ]
        );
        let gate_event = &ran.events_named("edge.selected")[3];
        assert_eq!(gate_event["gate"], "implement");
        assert_eq!(gate_event["gate_status"], "fail");
        // The exit stage ran once, after the gate was satisfied.
        let exits = ran.events_named("stage.completed").iter().filter(|e| e["node_id"] == "exit").count();
        assert_eq!(exits, 1);
        assert_eq!(ran.checkpoint()["node_outcomes"]["implement"], "success");
    }
}

/// [Matrix] Goal gate blocks exit when unsatisfied: with no retry target anywhere, the run fails.
#[test]
fn goal_gate_without_a_retry_target_fails_the_run() {
    let always_fails = responses(json!({ "implement": directive(json!({"outcome": "fail"})) }));
    let ran = run(&gated("", ""), &[("r.json", &always_fails)], &["--responses", "r.json"], 1);
    let result = ran.result();
    assert_eq!(result["status"], "failed");
    assert_eq!(
        result["failure_reason"],
        "goal gate `implement` has not succeeded (fail) and has no retry target"
    );
    assert_eq!(ran.completed(), ["start", "plan", "implement"]);
    assert!(!ran.run_dir().join("stages/exit").exists(), "the exit stage must not run");
    assert_eq!(ran.checkpoint()["status"], "failed");
    assert_eq!(ran.manifest()["status"], "failed");
    let last = ran.events().pop().unwrap();
    assert_eq!(last["event"], "run.failed");
    assert_eq!(
        last["failure_reason"],
        "goal gate `implement` has not succeeded (fail) and has no retry target"
    );
    let stderr = ran.stderr();
    assert!(stderr.contains("warning[goal_gate_has_retry]"), "{stderr}");
    assert!(
        stderr.contains("reason: goal gate `implement` has not succeeded (fail) and has no retry target"),
        "{stderr}"
    );
}

/// [Matrix] Goal gate allows exit when all satisfied
#[test]
fn goal_gate_allows_exit_when_all_satisfied() {
    let workflow = r#"digraph satisfied {
    retry_target = "plan"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    plan [prompt="Plan"]
    implement [prompt="Implement", goal_gate=true]
    test [shape=parallelogram, script="echo ok", goal_gate=true]
    document [prompt="Document", goal_gate=true]
    start -> plan -> implement -> test -> document -> exit
}
"#;
    // A partial success satisfies a gate too.
    let script = responses(json!({ "document": directive(json!({"outcome": "partial_success"})) }));
    let ran = run(workflow, &[("r.json", &script)], &["--responses", "r.json", "-q"], 0);
    assert_eq!(ran.result()["status"], "succeeded");
    assert_eq!(ran.completed(), ["start", "plan", "implement", "test", "document", "exit"]);
    assert!(ran.routes().iter().all(|route| !route.contains("goal_gate")), "{:?}", ran.routes());
    assert_eq!(ran.routes().last().unwrap(), "document -> exit (weight)");
    assert_eq!(stage_list(&ran.result())[4], "document/1 partial_success");
}

// ---------------------------------------------------------------------------------------------
// Wait.human
// ---------------------------------------------------------------------------------------------

const GATE: &str = r#"digraph review {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    gate [shape=hexagon, label="Ship it?"]
    deploy [shape=parallelogram, script="echo deploying"]
    revise [shape=parallelogram, script="echo revising"]
    start -> gate
    gate -> deploy [label="[A] Approve"]
    gate -> revise [label="[R] Request changes"]
    gate -> exit [label="[S] Skip"]
    deploy -> exit
    revise -> gate
}
"#;

/// [Matrix] Wait.human presents choices and routes on selection
#[test]
fn wait_human_presents_choices_and_routes_on_selection() {
    // By key, by label (without its accelerator), by target node id.
    let answers = json!({"gate": ["R", "Request changes", "deploy"]}).to_string();
    let ran = run(GATE, &[("answers.json", &answers)], &["--answers", "answers.json", "-q"], 0);
    assert_eq!(ran.completed(), ["start", "gate", "revise", "gate", "revise", "gate", "deploy", "exit"]);
    assert_eq!(
        ran.routes(),
        [
            "start -> gate (weight)",
            "gate -> revise (preferred_label)",
            "revise -> gate (weight)",
            "gate -> revise (preferred_label)",
            "revise -> gate (weight)",
            "gate -> deploy (preferred_label)",
            "deploy -> exit (weight)"
        ]
    );

    let asked = ran.events_named("interview.started");
    assert_eq!(asked.len(), 3);
    for (event, visit) in asked.iter().zip(1..) {
        assert_eq!(event["node_id"], "gate");
        assert_eq!(event["visit"], visit);
        assert_eq!(event["question"], "Ship it?");
        assert_eq!(event["choices"], json!(["[A] Approve", "[R] Request changes", "[S] Skip"]));
    }
    let answered: Vec<String> = ran
        .events_named("interview.completed")
        .iter()
        .map(|e| format!("{} {} -> {}", text(&e["key"]), text(&e["label"]), text(&e["target"])))
        .collect();
    assert_eq!(
        answered,
        ["R [R] Request changes -> revise", "R [R] Request changes -> revise", "A [A] Approve -> deploy"]
    );

    let status = ran.stage_status("gate", 3);
    assert_eq!(status["outcome"], "success");
    assert_eq!(status["handler"], "human");
    assert_eq!(status["preferred_label"], "[A] Approve");
    assert_eq!(status["notes"], "chose [A] Approve -> deploy");
    let context = ran.context();
    assert_eq!(context["human.gate.selected"], "A");
    assert_eq!(context["human.gate.label"], "[A] Approve");
    assert_eq!(context["human.gate.target"], "deploy");

    // --auto-approve takes the first choice.
    let ran = run(GATE, &[], &["--auto-approve", "-q"], 0);
    assert_eq!(ran.completed(), ["start", "gate", "deploy", "exit"]);
    assert_eq!(ran.context()["human.gate.selected"], "A");
    assert_eq!(ran.context()["human.gate.label"], "[A] Approve");

    // The answers file goes first; auto-approve answers what it does not.
    let answers = json!({"gate": ["S"]}).to_string();
    let ran = run(GATE, &[("a.json", &answers)], &["--answers", "a.json", "--auto-approve", "-q"], 0);
    assert_eq!(ran.completed(), ["start", "gate", "exit"]);
    assert_eq!(ran.context()["human.gate.selected"], "S");
    assert_eq!(ran.context()["human.gate.label"], "[S] Skip");
}

/// [Matrix] Wait.human: without an answer and without a terminal the run pauses (exit 3).
#[test]
fn wait_human_without_an_answer_pauses_the_run() {
    let ran = run(GATE, &[], &[], 3);
    let result = ran.result();
    assert_eq!(result["status"], "paused");
    assert_eq!(result["failure_reason"], Value::Null);
    assert_eq!(ran.completed(), ["start"]);
    let checkpoint = ran.checkpoint();
    assert_eq!(checkpoint["status"], "paused");
    assert_eq!(checkpoint["current_node"], "gate");
    assert_eq!(checkpoint["next_node"], "gate");
    assert_eq!(checkpoint["completed_nodes"], json!(["start"]));
    assert_eq!(ran.manifest()["status"], "paused");
    let events = ran.events();
    let last = events.last().unwrap();
    assert_eq!(last["event"], "run.paused");
    assert_eq!(last["node_id"], "gate");
    assert!(events.iter().all(|e| e["event"] != "run.completed" && e["event"] != "run.failed"));
    let stderr = ran.stderr();
    assert!(
        stderr.contains(
            r#"paused: human gate `gate` is waiting for an answer: [A] Approve, [R] Request changes, [S] Skip (answers file: {"gate": ["A"]})"#
        ),
        "{stderr}"
    );
    assert_eq!(stderr.matches("waiting for an answer").count(), 1, "one pause message: {stderr}");
    assert!(stderr.contains("resume with: fabro resume run --answers FILE (or --auto-approve)"), "{stderr}");
    assert!(stderr.contains("run paused in "), "{stderr}");

    // An answers file that runs out pauses at the next question.
    let answers = json!({"gate": ["R"]}).to_string();
    let ran = run(GATE, &[("a.json", &answers)], &["--answers", "a.json", "-q"], 3);
    assert_eq!(ran.completed(), ["start", "gate", "revise"]);
    assert_eq!(ran.checkpoint()["status"], "paused");
    assert_eq!(ran.checkpoint()["current_node"], "gate");
}

// ---------------------------------------------------------------------------------------------
// Edge selection
// ---------------------------------------------------------------------------------------------

/// `a` has three ways on; `edges` are the lines that wire them.
fn fork(edges: &str) -> String {
    format!(
        r#"digraph fork {{
    start [shape=Mdiamond]
    exit [shape=Msquare]
    a [prompt="Choose"]
    b [prompt="B"]
    c [prompt="C"]
    d [prompt="D"]
    start -> a
{edges}
    b -> exit
    c -> exit
    d -> exit
}}
"#
    )
}

/// [Matrix] Edge selection: condition match wins over weight
#[test]
fn edge_selection_condition_match_wins_over_weight() {
    let workflow = fork(
        r#"    a -> b [weight=100]
    a -> c [condition="outcome=success"]
    a -> d [weight=5]"#,
    );
    let ran = run(&workflow, &[], &["--simulate", "-q"], 0);
    assert_eq!(ran.completed(), ["start", "a", "c", "exit"]);
    assert_eq!(ran.routes()[1], "a -> c (condition)");

    // Among true conditions the weight decides.
    let workflow = fork(
        r#"    a -> b [condition="outcome=success", weight=1]
    a -> c [condition="outcome=success", weight=7]
    a -> d [weight=50]"#,
    );
    let ran = run(&workflow, &[], &["--simulate", "-q"], 0);
    assert_eq!(ran.routes()[1], "a -> c (condition)");

    // A false condition is never taken, however heavy.
    let workflow = fork(
        r#"    a -> b [condition="outcome=fail", weight=100]
    a -> c [weight=2]
    a -> d [weight=1]"#,
    );
    let ran = run(&workflow, &[], &["--simulate", "-q"], 0);
    assert_eq!(ran.routes()[1], "a -> c (weight)");
}

/// [Matrix] Edge selection: weight breaks ties for unconditional edges
#[test]
fn edge_selection_weight_breaks_ties_for_unconditional_edges() {
    let workflow = fork(
        r#"    a -> b [weight=1]
    a -> c [weight=10]
    a -> d [weight=5]"#,
    );
    let ran = run(&workflow, &[], &["--simulate", "-q"], 0);
    assert_eq!(ran.completed(), ["start", "a", "c", "exit"]);
    assert_eq!(ran.routes()[1], "a -> c (weight)");

    // Negative weights rank below the default 0.
    let workflow = fork(
        r#"    a -> b [weight=-1]
    a -> d
    a -> c [weight=-5]"#,
    );
    let ran = run(&workflow, &[], &["--simulate", "-q"], 0);
    assert_eq!(ran.routes()[1], "a -> d (weight)");
}

/// [Matrix] Edge selection: lexical tiebreak as final fallback
#[test]
fn edge_selection_lexical_tiebreak_as_final_fallback() {
    let workflow = fork(
        r#"    a -> d
    a -> c
    a -> b [condition="outcome=fail"]"#,
    );
    let ran = run(&workflow, &[], &["--simulate", "-q"], 0);
    assert_eq!(ran.completed(), ["start", "a", "c", "exit"]);
    assert_eq!(ran.routes()[1], "a -> c (lexical)");

    // Equal top weights: the lexically smallest target among them.
    let workflow = fork(
        r#"    a -> d [weight=3]
    a -> c [weight=3]
    a -> b [weight=1]"#,
    );
    let ran = run(&workflow, &[], &["--simulate", "-q"], 0);
    assert_eq!(ran.routes()[1], "a -> c (lexical)");
}

/// [Matrix] Edge selection: a preferred label, then suggested next ids, steer among unconditional
/// edges, after conditions and before weights.
#[test]
fn edge_selection_preferred_label_and_suggested_next_ids_steer() {
    let workflow = fork(
        r#"    a -> b [label="Bee", condition="outcome=fail"]
    a -> c [label="[C] Cee", weight=9]
    a -> d [label="Dee"]"#,
    );
    let steer = |answer: Value, args: &[&str]| {
        let script = responses(json!({ "a": directive(answer) }));
        let mut all = vec!["--responses", "r.json", "-q"];
        all.extend_from_slice(args);
        run(&workflow, &[("r.json", &script)], &all, 0)
    };

    // Labels match case-insensitively, without accelerators; the label beats the weight.
    let ran = steer(json!({"preferred_label": "dee"}), &[]);
    assert_eq!(ran.completed(), ["start", "a", "d", "exit"]);
    assert_eq!(ran.routes()[1], "a -> d (preferred_label)");
    assert_eq!(ran.stage_status("a", 1)["preferred_label"], "dee");
    let ran = steer(json!({"preferred_next_label": "Cee"}), &[]);
    assert_eq!(ran.routes()[1], "a -> c (preferred_label)");

    // The first suggested id that names an unconditional edge's target.
    let ran = steer(json!({"suggested_next_ids": ["nowhere", "d", "c"]}), &[]);
    assert_eq!(ran.routes()[1], "a -> d (suggested_next_id)");

    // A label on a conditional edge whose condition is false cannot be preferred; the weight decides.
    let ran = steer(json!({"preferred_label": "Bee"}), &[]);
    assert_eq!(ran.routes()[1], "a -> c (weight)");
    // A label naming no edge falls through to the weight as well.
    let ran = steer(json!({"preferred_label": "Nope"}), &[]);
    assert_eq!(ran.routes()[1], "a -> c (weight)");
}

// ---------------------------------------------------------------------------------------------
// Context
// ---------------------------------------------------------------------------------------------

/// [Matrix] Context updates from one node are visible to the next
#[test]
fn context_updates_from_one_node_are_visible_to_the_next() {
    let workflow = r#"digraph context {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    analyse [prompt="Analyse"]
    snapshot [shape=parallelogram, script="cat \"$FABRO_CONTEXT\" > seen.json"]
    green [shape=parallelogram, script="echo green"]
    red [shape=parallelogram, script="echo red"]
    start -> analyse -> snapshot
    snapshot -> green [condition="context.tests=green && context.count=3"]
    snapshot -> red
    green -> exit
    red -> exit
}
"#;
    let script = responses(json!({
        "analyse": directive(json!({"context_updates": {"tests": "green", "count": 3}}))
    }));
    let ran = run(workflow, &[("r.json", &script)], &["--responses", "r.json", "-q"], 0);
    assert_eq!(ran.completed(), ["start", "analyse", "snapshot", "green", "exit"]);
    assert_eq!(ran.routes()[2], "snapshot -> green (condition)");

    // The command read the context through $FABRO_CONTEXT.
    let seen = read_json(&ran.dir.path().join("seen.json"));
    assert_eq!(seen["tests"], "green");
    assert_eq!(seen["count"], 3);
    assert_eq!(seen["last_stage"], "analyse");
    assert_eq!(seen["outcome"], "success");
    assert_eq!(seen["current_node"], "snapshot");
    assert_eq!(seen["internal.run_id"], ran.manifest()["run_id"]);
    assert_eq!(read_json(&ran.stage("snapshot", 1).join("context.json")), seen);

    // Without the update the other edge is taken.
    let ran = run(workflow, &[], &["--simulate", "-q"], 0);
    assert_eq!(ran.completed(), ["start", "analyse", "snapshot", "red", "exit"]);
    assert_eq!(read_json(&ran.dir.path().join("seen.json"))["tests"], Value::Null);

    // A command's outcome and output are in the context of the stages after it.
    let workflow = r#"digraph command_context {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    produce [shape=parallelogram, script="echo 42"]
    consume [shape=parallelogram, script="cat \"$FABRO_CONTEXT\" > seen.json"]
    start -> produce -> consume -> exit
}
"#;
    let ran = run(workflow, &[], &["-q"], 0);
    let seen = read_json(&ran.dir.path().join("seen.json"));
    assert_eq!(seen["command.output"], "42\n");
    assert_eq!(seen["command.exit_code"], 0);
}

// ---------------------------------------------------------------------------------------------
// Checkpoints
// ---------------------------------------------------------------------------------------------

/// [Matrix] Checkpoint save (resume is not implemented yet): `checkpoint.json` holds the state
/// after the run, and a checkpoint is saved after every stage.
#[test]
fn checkpoint_save_records_the_state_after_every_stage() {
    let workflow = r#"digraph checkpointed {
    goal = "Checkpoint everything"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    draft [prompt="Draft for $goal"]
    check [shape=parallelogram, script="n=$(cat n 2>/dev/null || echo 0); echo $((n+1)) > n; [ $n -ge 1 ]"]
    start -> draft -> check
    check -> exit [condition="outcome=success"]
    check -> draft [condition="outcome=fail"]
}
"#;
    let ran = run(workflow, &[], &["--simulate", "-q"], 0);
    assert_eq!(ran.completed(), ["start", "draft", "check", "draft", "check", "exit"]);

    let checkpoint = ran.checkpoint();
    assert_eq!(checkpoint["run_id"], ran.manifest()["run_id"]);
    assert_eq!(checkpoint["status"], "succeeded");
    assert_eq!(checkpoint["current_node"], "exit");
    assert_eq!(checkpoint["next_node"], Value::Null);
    assert_eq!(checkpoint["completed_nodes"], json!(["start", "draft", "check", "draft", "check", "exit"]));
    assert_eq!(checkpoint["node_visits"], json!({"start": 1, "draft": 2, "check": 2, "exit": 1}));
    assert_eq!(
        checkpoint["node_outcomes"],
        json!({"start": "success", "draft": "success", "check": "success", "exit": "success"})
    );
    assert_eq!(checkpoint["node_retries"], json!({}));
    assert!(text(&checkpoint["timestamp"]).ends_with('Z'));
    let context = &checkpoint["context"];
    assert_eq!(context["graph.goal"], "Checkpoint everything");
    assert_eq!(context["internal.run_id"], ran.manifest()["run_id"]);
    assert_eq!(context["outcome"], "success");
    assert_eq!(context["current_node"], "exit");
    assert_eq!(context["last_stage"], "exit");

    // One checkpoint per stage, in stage order; the last one closes the run.
    let saved = ran.events_named("checkpoint.saved");
    let stages = ran.result()["stages"].as_array().unwrap().clone();
    assert_eq!(saved.len(), stages.len());
    let saved_nodes: Vec<&str> = saved.iter().map(|e| text(&e["node_id"])).collect();
    let stage_nodes: Vec<&str> = stages.iter().map(|s| text(&s["node_id"])).collect();
    assert_eq!(saved_nodes, stage_nodes);
    let statuses: Vec<&str> = saved.iter().map(|e| text(&e["status"])).collect();
    assert_eq!(statuses, ["running", "running", "running", "running", "running", "succeeded"]);
    // Each checkpoint follows its stage's completion event.
    let events = ran.events();
    for event in &saved {
        let seq = event["seq"].as_u64().unwrap() as usize;
        let before = &events[seq - 2];
        assert!(
            before["event"] == "edge.selected" || before["event"] == "stage.completed",
            "checkpoint {event} follows {before}"
        );
    }
    // Only the final checkpoint is left, whole and without temporary files beside it.
    let leftovers: Vec<String> = std::fs::read_dir(ran.run_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

// ---------------------------------------------------------------------------------------------
// Library tests: the stylesheet's models and custom handlers
// ---------------------------------------------------------------------------------------------

mod library {
    use super::*;

    use fabro::backends::simulated::SimulatedBackend;
    use fabro::backends::{Backend, LlmRequest, LlmResponse};
    use fabro::engine::{Engine, RunOptions};
    use fabro::event::{Event, SelectedEdge};
    use fabro::event_log::LoggedEvent;
    use fabro::handlers::builtin_handlers;
    use fabro::interview::NoAnswers;
    use fabro::llm::BackendError;
    use fabro::outcome::Outcome;
    use fabro::run_status::RunStatus;
    use fabro::source::SourceFile;
    use fabro::stage::{Handler, HandlerError, HandlerRegistry, Services, StageRun};
    use fabro::{Loader, ValidWorkflow};
    use tokio_util::sync::CancellationToken;

    fn load(loader: Loader, text: &str) -> ValidWorkflow {
        let checked = loader.load_source(SourceFile::new("workflow.dot", text)).expect("parses");
        checked.into_valid().unwrap_or_else(|invalid| panic!("{:#?}", invalid.diagnostics))
    }

    /// Runs `valid` in `dir` and returns the report and the names of the events seen.
    async fn run_engine(
        valid: &ValidWorkflow,
        handlers: HandlerRegistry,
        backend: Arc<dyn Backend>,
        dir: &Path,
        context: Vec<(String, Value)>,
    ) -> (fabro::engine::RunReport, Vec<LoggedEvent>) {
        let engine = Engine::new(handlers, Services { backend, interviewer: Arc::new(NoAnswers) });
        let options = RunOptions {
            run_dir: Some(dir.join(RUN_DIR)),
            run_id: None,
            work_dir: dir.to_path_buf(),
            dry_run: false,
            context,
            ..RunOptions::default()
        };
        let seen = Arc::new(Mutex::new(Vec::new()));
        let sink = seen.clone();
        let report = engine
            .run(
                valid,
                &options,
                move |event| sink.lock().unwrap().push(event.clone()),
                CancellationToken::new(),
            )
            .await
            .expect("the run starts");
        let events = seen.lock().unwrap().clone();
        (report, events)
    }

    /// Records the model settings of every request.
    #[derive(Default)]
    struct Recording(Mutex<Vec<String>>);

    #[async_trait::async_trait]
    impl Backend for Recording {
        fn name(&self) -> &str {
            "recording"
        }

        async fn complete(&self, request: &LlmRequest<'_>) -> Result<LlmResponse, BackendError> {
            self.0.lock().unwrap().push(format!(
                "{}: {} / {} / {}",
                request.node_id,
                request.model.unwrap_or("-"),
                request.provider.unwrap_or("-"),
                request.reasoning_effort.unwrap_or("-")
            ));
            Ok(LlmResponse {
                text: "ok".into(),
                model: request.model.map(str::to_string),
                ..LlmResponse::default()
            })
        }
    }

    /// [Matrix] Stylesheet applies model override to nodes by shape
    ///
    /// The simulated backend does not echo the model, so this row runs through the library with
    /// a backend that records every request: the model each stage asks for at run time, not just
    /// the loaded attribute (which is checked as well).
    #[tokio::test]
    async fn stylesheet_applies_model_override_to_nodes_by_shape() {
        let text = r#"digraph styled {
    model_stylesheet = "
        * { llm_model: base-model; llm_provider: acme }
        box { llm_model: box-model; reasoning_effort: medium }
        tab { llm_model: tab-model }
        .special { llm_model: class-model }
        #chosen { llm_provider: other }
    "
    start [shape=Mdiamond]
    exit [shape=Msquare]
    agent [shape=box, prompt="Agent work"]
    single [shape=tab, prompt="One call"]
    special [class="special", prompt="Special work"]
    pinned [llm_model="node-model", reasoning_effort=low, prompt="Pinned"]
    chosen [shape=tab, prompt="Chosen"]
    start -> agent -> single -> special -> pinned -> chosen -> exit
}
"#;
        let valid = load(Loader::new(), text);
        let model =
            |id: &str| valid.workflow.node(id).unwrap().attributes.text("llm_model").map(str::to_string);
        assert_eq!(model("agent").as_deref(), Some("box-model"));
        assert_eq!(model("single").as_deref(), Some("tab-model"));
        assert_eq!(model("start").as_deref(), Some("base-model"), "`*` matches every node");

        let dir = tempfile::tempdir().unwrap();
        let backend = Arc::new(Recording::default());
        let (report, _) = run_engine(&valid, builtin_handlers(), backend.clone(), dir.path(), vec![]).await;
        assert_eq!(report.result.status, RunStatus::Succeeded);
        assert_eq!(
            *backend.0.lock().unwrap(),
            [
                "agent: box-model / acme / medium",
                "single: tab-model / acme / -",
                "special: class-model / acme / medium",
                "pinned: node-model / acme / low",
                "chosen: tab-model / other / -",
            ]
        );
        // The model that answered is noted in the stage's status.json.
        let status = read_json(&dir.path().join("run/stages/agent/1/status.json"));
        assert_eq!(status["notes"], "box-model");
    }

    /// A custom `deploy` stage: deploys to the node's `environment` and says so in the context.
    struct Deploy;

    #[async_trait::async_trait]
    impl Handler for Deploy {
        async fn run(&self, stage: &StageRun<'_>) -> Result<Outcome, HandlerError> {
            let environment = stage.node.attributes.text("environment").unwrap_or("dev").to_string();
            let version = stage.context.get_text("version").unwrap_or_default();
            let log = format!(
                "deployed {version} to {environment} (visit {}, attempt {})\n",
                stage.visit, stage.attempt
            );
            std::fs::write(stage.stage_dir.join("deploy.log"), log)
                .map_err(|error| HandlerError::Terminal(error.to_string()))?;
            Ok(Outcome::success()
                .with_notes(format!("deployed to {environment}"))
                .with_update("deploy.environment", environment))
        }
    }

    const DEPLOY: &str = r#"digraph deploy_flow {
    allow_lints="failure_path"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    ship [type="deploy", environment="staging", label="Ship"]
    verify [shape=parallelogram, script="cat \"$FABRO_CONTEXT\" > seen.json"]
    rollback [shape=parallelogram, script="echo rollback"]
    start -> ship
    ship -> verify [condition="context.deploy.environment=staging"]
    ship -> rollback
    verify -> exit
    rollback -> exit
}
"#;

    /// [Matrix] Custom handler registration and execution works
    #[tokio::test]
    async fn custom_handler_registration_and_execution_works() {
        let valid = load(Loader::new().with_handler_type("deploy"), DEPLOY);
        assert!(valid.warnings.is_empty(), "{:#?}", valid.warnings);

        let mut handlers = builtin_handlers();
        handlers.register("deploy", Arc::new(Deploy));
        assert!(handlers.first_unhandled(&valid.workflow).is_none());
        let dir = tempfile::tempdir().unwrap();
        let context = vec![("version".to_string(), json!("1.2.3"))];
        let (report, events) =
            run_engine(&valid, handlers, Arc::new(SimulatedBackend), dir.path(), context).await;

        let result = &report.result;
        assert_eq!(result.status, RunStatus::Succeeded, "{result:?}");
        assert_eq!(result.failure_reason, None);
        assert_eq!(result.completed_nodes, ["start", "ship", "verify", "exit"]);
        let run_dir = dir.path().join(RUN_DIR);
        assert_eq!(
            read_text(&run_dir.join("stages/ship/1/deploy.log")),
            "deployed 1.2.3 to staging (visit 1, attempt 1)\n"
        );
        let status = read_json(&run_dir.join("stages/ship/1/status.json"));
        assert_eq!(status["handler"], "deploy");
        assert_eq!(status["outcome"], "success");
        assert_eq!(status["notes"], "deployed to staging");
        assert_eq!(read_json(&dir.path().join("seen.json"))["deploy.environment"], "staging");

        // The observer saw what events.jsonl holds.
        assert!(matches!(events.first().map(|e| &e.event), Some(Event::RunStarted { .. })));
        assert!(matches!(events.last().map(|e| &e.event), Some(Event::RunCompleted(_))));
        let written = read_text(&run_dir.join("events.jsonl")).lines().count();
        assert_eq!(events.len(), written);
        let ship_handler = events.iter().find_map(|e| match &e.event {
            Event::StageStarted { handler, .. } if e.node_id.as_deref() == Some("ship") => {
                Some(handler.as_str())
            }
            _ => None,
        });
        assert_eq!(ship_handler, Some("deploy"));
        let route = events.iter().find_map(|e| match &e.event {
            Event::EdgeSelected(edge) if edge.from == "ship" => Some(edge.clone()),
            _ => None,
        });
        let SelectedEdge { to, reason, .. } = route.expect("ship routed");
        assert_eq!((to.as_str(), reason.as_str()), ("verify", "condition"));

        // Without the registration the stage fails, naming the type.
        let dir = tempfile::tempdir().unwrap();
        let (report, _) =
            run_engine(&valid, builtin_handlers(), Arc::new(SimulatedBackend), dir.path(), vec![]).await;
        assert_eq!(report.result.status, RunStatus::Failed);
        assert_eq!(
            report.result.failure_reason.as_deref(),
            Some("stage `ship` failed: no handler is registered for type `deploy` (no `outcome=fail` edge, `retry_target` or `fallback_retry_target` from `ship`, so the run ends)")
        );
    }

    /// The CLI has only the built-in handlers: a custom type is refused before the run starts.
    #[test]
    fn the_cli_refuses_a_custom_type_it_has_no_handler_for() {
        let ran = run(DEPLOY, &[], &[], 2);
        assert!(
            ran.stderr().contains(
                "error: node `ship` is a deploy stage, which this version of fabro cannot run yet; the run did not start"
            ),
            "{}",
            ran.stderr()
        );
        assert!(!ran.run_dir().exists());
    }
}

// ---------------------------------------------------------------------------------------------
// Prompt variables
// ---------------------------------------------------------------------------------------------

/// [Matrix] Prompt variable expansion ($goal) works, with `--goal` overriding the graph's goal
/// and `{{context.key}}` filled from `--set`.
#[test]
fn prompt_variable_expansion_goal_works() {
    let workflow = r#"digraph prompts {
    goal = "Ship the widget"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    plan [prompt="Plan for $goal in {{context.lang}} ({{missing}}) and {{ lang }}, n={{n}}"]
    start -> plan -> exit
}
"#;
    let ran = run(workflow, &[], &["--simulate", "-q"], 0);
    assert_eq!(sent_prompt(&ran.stage("plan", 1)), "Plan for Ship the widget in  () and , n=");
    assert_eq!(ran.manifest()["goal"], "Ship the widget");
    assert_eq!(ran.context()["graph.goal"], "Ship the widget");

    let ran = run(
        workflow,
        &[],
        &["--simulate", "-q", "--goal", "Fix the bug", "--set", "lang=Rust", "--set", "n=5"],
        0,
    );
    assert_eq!(sent_prompt(&ran.stage("plan", 1)), "Plan for Fix the bug in Rust () and Rust, n=5");
    assert_eq!(ran.manifest()["goal"], "Fix the bug");
    let context = ran.context();
    assert_eq!(context["graph.goal"], "Fix the bug");
    assert_eq!(context["lang"], "Rust");
    assert_eq!(context["n"], 5, "--set values that parse as JSON stay JSON");
    assert_eq!(ran.events_named("run.started")[0]["goal"], "Fix the bug");

    // --set text with `=` in it keeps everything after the first `=`.
    let ran = run(workflow, &[], &["--simulate", "-q", "--set", "lang=a=b"], 0);
    assert_eq!(ran.context()["lang"], "a=b");
}

// ---------------------------------------------------------------------------------------------
// Larger pipelines, loops and limits
// ---------------------------------------------------------------------------------------------

/// [Matrix] Pipeline with 10+ nodes completes without errors
#[test]
fn pipeline_with_10_plus_nodes_completes() {
    let workflow = r#"digraph big {
    goal = "Release 1.0"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    plan [shape=tab, prompt="Plan $goal"]
    design [prompt="Design"]
    implement [prompt="Implement"]
    build [shape=parallelogram, script="echo built > build.txt"]
    test [shape=parallelogram, script="test -f build.txt && echo tests passed"]
    route [shape=diamond]
    settle [shape=insulator, duration=50ms]
    docs [shape=tab, prompt="Write docs"]
    approve [shape=hexagon, label="Release?"]
    release [shape=parallelogram, script="echo released"]
    announce [prompt="Announce $goal"]
    start -> plan -> design -> implement -> build -> test -> route
    route -> settle [condition="outcome=success"]
    route -> implement
    settle -> docs -> approve
    approve -> release [label="[Y] Yes"]
    approve -> exit [label="[N] No"]
    release -> announce -> exit
}
"#;
    let ran = run(workflow, &[], &["--simulate", "--auto-approve", "-q"], 0);
    let expected = [
        "start",
        "plan",
        "design",
        "implement",
        "build",
        "test",
        "route",
        "settle",
        "docs",
        "approve",
        "release",
        "announce",
        "exit",
    ];
    assert_eq!(ran.completed(), expected);
    let result = ran.result();
    assert_eq!(result["status"], "succeeded");
    assert!(stage_list(&result).iter().all(|s| s.ends_with(" success")), "{:?}", stage_list(&result));
    assert_eq!(read_text(&ran.stage("test", 1).join("stdout.log")), "tests passed\n");
    assert_eq!(read_text(&ran.stage("release", 1).join("stdout.log")), "released\n");
    assert_eq!(ran.stage_status("settle", 1)["notes"], "waited 50ms");
    assert_eq!(ran.stage_status("settle", 1)["handler"], "wait");
    assert!(ran.stage_status("settle", 1)["duration_ms"].as_u64().unwrap() >= 50);
    assert_eq!(sent_prompt(&ran.stage("announce", 1)), "Announce Release 1.0");
    assert_eq!(ran.events_named("stage.started").len(), expected.len());
    assert_eq!(ran.events_named("checkpoint.saved").len(), expected.len());
}

/// `work` fails every time and loops back through `check`; max_visits=2 stops it.
const LOOP: &str = r#"digraph looping {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=parallelogram, max_visits=2, script="echo visit >> visits; exit 1"]
    check [shape=diamond]
    start -> work
    work -> check [condition="outcome=fail"]
    work -> exit [condition="outcome=success"]
    check -> work [condition="outcome=fail"]
}
"#;

/// max_visits: the visit after the limit fails the run with a reason naming the node and limit.
#[test]
fn max_visits_fails_the_run_on_the_visit_after_the_limit() {
    let ran = run(LOOP, &[], &["-q"], 1);
    let result = ran.result();
    assert_eq!(result["status"], "failed");
    assert_eq!(result["failure_reason"], "node `work` would run a 3rd time, but max_visits=2");
    assert_eq!(ran.completed(), ["start", "work", "check", "work", "check"]);
    assert_eq!(read_text(&ran.dir.path().join("visits")), "visit\nvisit\n");
    assert!(ran.stage("work", 2).is_dir());
    assert!(!ran.stage("work", 3).exists(), "the refused visit gets no stage directory");
    let checkpoint = ran.checkpoint();
    assert_eq!(checkpoint["node_visits"]["work"], 2, "the refused visit is not counted: {checkpoint}");
    assert!(ran.stderr().contains("reason: node `work` would run a 3rd time, but max_visits=2"));

    // The graph's max_node_visits caps every node (the circuit breaker, off here, would stop
    // this loop at its third same failure).
    let workflow = LOOP
        .replace("max_visits=2, ", "")
        .replace("start [shape", "max_node_visits = 3\n    failure_signature_limit = 0\n    start [shape");
    let ran = run(&workflow, &[], &["-q"], 1);
    assert_eq!(ran.result()["failure_reason"], "node `work` would run a 4th time, but max_node_visits is 3");
    assert_eq!(read_text(&ran.dir.path().join("visits")), "visit\nvisit\nvisit\n");
}

/// --dry-run simulates commands (a failing script succeeds), waits and LLM calls, and caps loops
/// at 3 visits of a node: it leaves the loop by another edge, or fails when there is none.
#[test]
fn dry_run_caps_loops_at_3_visits_and_simulates_commands() {
    let endless = r#"digraph endless {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=parallelogram, script="touch ran; exit 1"]
    again [shape=diamond]
    start -> work -> again
    again -> work [condition="outcome=success"]
    again -> exit
}
"#;
    let ran = run(endless, &[], &["--dry-run", "-q"], 0);
    let result = ran.result();
    assert_eq!(result["status"], "succeeded");
    assert_eq!(ran.completed(), ["start", "work", "again", "work", "again", "work", "again", "exit"]);
    assert_eq!(result["dry_run"]["assumed"][0]["reason"], "dry_run_loop_exit");
    let status = ran.stage_status("work", 1);
    assert_eq!(status["outcome"], "success");
    assert_eq!(status["notes"], "dry run: would run `touch ran; exit 1`");
    assert!(!ran.stage("work", 1).join("stdout.log").exists());
    assert!(!ran.dir.path().join("ran").exists(), "dry runs run no commands");

    // A loop with no way out fails at the cap.
    let endless = endless.replace("    again -> exit\n", "");
    let ran = run(&endless, &[], &["--dry-run", "-q"], 1);
    let result = ran.result();
    assert_eq!(result["failure_reason"], "node `work` would run a 4th time, but the dry-run visit cap is 3");
    assert_eq!(ran.completed(), ["start", "work", "again", "work", "again", "work", "again"]);

    // A failing command, a long wait, an LLM stage (no --simulate needed) and a human gate.
    let workflow = r#"digraph wiring {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    build [shape=parallelogram, script="touch ran; exit 1"]
    pause [shape=insulator, duration=1h]
    think [prompt="Think"]
    gate [shape=hexagon, label="Go?"]
    start -> build
    build -> pause [condition="outcome=success"]
    build -> exit [condition="outcome=fail"]
    pause -> think -> gate
    gate -> exit [label="[G] Go"]
    gate -> think [label="[B] Back"]
}
"#;
    let started = Instant::now();
    let ran = run(workflow, &[], &["--dry-run", "-q"], 0);
    assert!(started.elapsed() < Duration::from_secs(10), "took {:?}", started.elapsed());
    assert_eq!(ran.completed(), ["start", "build", "pause", "think", "gate", "exit"]);
    assert_eq!(ran.stage_status("build", 1)["outcome"], "success");
    assert_eq!(ran.stage_status("pause", 1)["notes"], "dry run: would wait 1h");
    assert_eq!(ran.stage_status("gate", 1)["notes"], "dry run: chose [G] Go -> exit");
    assert!(text(&ran.stage_status("think", 1)["notes"]).starts_with("simulated"));
    assert!(!ran.dir.path().join("ran").exists());
}

/// A node that completes with no eligible edge fails the run with a reason naming the node.
#[test]
fn a_node_with_no_eligible_edge_fails_the_run() {
    let workflow = r#"digraph dead_end {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=parallelogram, script="echo ok"]
    start -> work
    work -> exit [condition="outcome=fail"]
}
"#;
    let ran = run(workflow, &[], &[], 1);
    let reason = "stage `work` ended with outcome success but none of its outgoing edges is eligible";
    assert_eq!(ran.result()["failure_reason"], reason);
    assert_eq!(ran.completed(), ["start", "work"]);
    assert_eq!(ran.checkpoint()["status"], "failed");
    assert_eq!(ran.events().last().unwrap()["event"], "run.failed");
    assert!(ran.stderr().contains("warning[all_conditional_edges]"), "{}", ran.stderr());
    assert!(ran.stderr().contains(&format!("reason: {reason}")), "{}", ran.stderr());

    // A failed stage with no edge for it names the stage and the failure.
    let workflow = workflow.replace("echo ok", "exit 2").replace("outcome=fail", "outcome=success");
    let ran = run(&workflow, &[], &["-q"], 1);
    assert_eq!(ran.result()["failure_reason"], "stage `work` failed: command exited with code 2 (no `outcome=fail` edge, `retry_target` or `fallback_retry_target` from `work`, so the run ends)");
}

// ---------------------------------------------------------------------------------------------
// Command stages
// ---------------------------------------------------------------------------------------------

/// A command's timeout stops it, and everything it started, quickly.
#[test]
fn command_timeout_kills_the_process() {
    let workflow = r#"digraph slow {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    slow [shape=parallelogram, timeout=300ms, script="echo begin; sleep 30 & echo $! > sleep.pid; wait; echo never"]
    start -> slow -> exit
}
"#;
    let started = Instant::now();
    let ran = run(workflow, &[], &["-q"], 1);
    let elapsed = started.elapsed();
    // 300ms, plus at most the 2s grace between SIGTERM and SIGKILL, plus slack for a busy machine.
    assert!(elapsed < Duration::from_secs(6), "took {elapsed:?}");
    assert_eq!(ran.result()["failure_reason"], "stage `slow` failed: command timed out after 300ms (no `outcome=fail` edge, `retry_target` or `fallback_retry_target` from `slow`, so the run ends)");
    let status = ran.stage_status("slow", 1);
    assert_eq!(status["outcome"], "fail");
    assert_eq!(status["failure_reason"], "command timed out after 300ms");
    assert_eq!(status["context_updates"]["command.output"], "begin\n");
    assert_eq!(status["context_updates"]["command.exit_code"], Value::Null);
    assert_eq!(read_text(&ran.stage("slow", 1).join("stdout.log")), "begin\n");
    let pid: i32 = read_text(&ran.dir.path().join("sleep.pid")).trim().parse().unwrap();
    assert!(!still_running(pid), "the background `sleep` ({pid}) survived the timeout");
}

/// A non-zero exit fails the stage with the code; both streams are logged.
#[test]
fn command_non_zero_exit_fails_with_the_code() {
    let workflow = r#"digraph failing {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    build [shape=parallelogram, script="echo compiling; echo 'error: broken' >&2; exit 3"]
    start -> build -> exit
}
"#;
    let ran = run(workflow, &[], &["-q"], 1);
    assert_eq!(ran.result()["failure_reason"], "stage `build` failed: command exited with code 3 (no `outcome=fail` edge, `retry_target` or `fallback_retry_target` from `build`, so the run ends)");
    let dir = ran.stage("build", 1);
    assert_eq!(read_text(&dir.join("stdout.log")), "compiling\n");
    assert_eq!(read_text(&dir.join("stderr.log")), "error: broken\n");
    let status = read_json(&dir.join("status.json"));
    assert_eq!(status["outcome"], "fail");
    assert_eq!(status["failure_reason"], "command exited with code 3");
    assert_eq!(status["handler"], "command");
    assert_eq!(
        status["context_updates"],
        json!({"command.exit_code": 3, "command.output": "compiling\n", "command.stderr": "error: broken\n"})
    );
    assert!(text(&status["notes"]).starts_with("exit 3 in "), "{status}");
    let failed = ran.events_named("stage.failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["node_id"], "build");
    assert_eq!(failed[0]["failure_reason"], "command exited with code 3");

    // stdout.log holds all of the output, streamed as written; the command runs in the work dir.
    let workflow = r#"digraph output {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    print [shape=parallelogram, script="pwd; for i in 1 2 3; do echo line $i; done; echo $FABRO_NODE_ID $FABRO_VISIT"]
    start -> print -> exit
}
"#;
    let test = Test::new().workflow(workflow).file("work/.keep", "");
    let work = test.path("work");
    let ran =
        test.args(["run", "workflow.dot", "--run-dir", RUN_DIR, "--workdir", "work", "-q"]).status(0).run();
    let stdout = read_text(&ran.stage("print", 1).join("stdout.log"));
    let (pwd, rest) = stdout.split_once('\n').unwrap();
    assert_eq!(std::fs::canonicalize(pwd).unwrap(), std::fs::canonicalize(&work).unwrap());
    assert_eq!(rest, "line 1\nline 2\nline 3\nprint 1\n");
    assert_eq!(read_text(&ran.stage("print", 1).join("stderr.log")), "");
}

// ---------------------------------------------------------------------------------------------
// Refusing to run
// ---------------------------------------------------------------------------------------------

/// An invalid workflow exits 2 and creates no run directory.
#[test]
fn invalid_workflow_exits_2_without_a_run_dir() {
    let cases = [
        // Validation errors.
        "digraph bad {\n  start [shape=Mdiamond]\n  build [shape=parallelogram]\n  start -> build\n}\n",
        // A syntax error.
        "digraph bad { start -> }\n",
    ];
    for source in cases {
        for args in
            [&["run", "workflow.dot", "--simulate"][..], &["run", "workflow.dot", "--run-dir", RUN_DIR]]
        {
            let ran = Test::new().workflow(source).args(args).status(2).run();
            assert!(!ran.dir.path().join(".fabro").exists(), "{source}");
            assert!(!ran.run_dir().exists(), "{source}");
            assert_eq!(ran.stdout(), "");
        }
    }
    let ran = Test::new().workflow(cases[0]).args(["run", "workflow.dot"]).status(2).run();
    let stderr = ran.stderr();
    assert!(stderr.contains("error[terminal_node]"), "{stderr}");
    assert!(stderr.contains("error[command_has_script] workflow.dot:3:3"), "{stderr}");
    assert!(
        stderr.contains("error: workflow.dot has 2 validation error(s); the run did not start"),
        "{stderr}"
    );

    let ran = Test::new().workflow(cases[1]).args(["run", "workflow.dot"]).status(2).run();
    assert!(ran.stderr().contains("error[syntax] workflow.dot:1:24"), "{}", ran.stderr());

    let ran = Test::new().args(["run", "missing.dot"]).status(2).run();
    assert!(ran.stderr().contains("error: cannot read `missing.dot`"), "{}", ran.stderr());
    assert!(!ran.dir.path().join(".fabro").exists());
}

/// LLM stages need a provider, `--simulate` or `--responses`: exit 2, nothing created.
#[test]
fn llm_stages_without_a_backend_exit_2_naming_simulate() {
    let ran = Test::new().workflow(LINEAR).args(["run", "workflow.dot"]).status(2).run();
    let stderr = ran.stderr();
    assert!(
        stderr.contains(
            "error: stage `plan` (and 2 more LLM stage(s)) needs an LLM provider, and none is configured. Run with --simulate"
        ),
        "{stderr}"
    );
    assert!(stderr.contains("--responses FILE"), "{stderr}");
    assert!(!ran.dir.path().join(".fabro").exists());

    // A workflow with no LLM stage needs neither.
    run(&branching("true"), &[], &["-q"], 0);
}

/// Parity row: parallel fan-out and fan-in complete correctly. Both branches run, the fan-in
/// sees their results in declaration order and picks the successful one, and the run goes on.
#[test]
fn parallel_fan_out_and_fan_in_complete_correctly() {
    let workflow = r#"digraph fan {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    fan [shape=component]
    left [shape=parallelogram, script="echo left"]
    right [shape=parallelogram, script="exit 1"]
    join [shape=tripleoctagon]
    after [shape=parallelogram, script="echo after"]
    start -> fan
    fan -> left
    fan -> right
    left -> join
    right -> join
    join -> after -> exit
}
"#;
    let ran = run(workflow, &[], &[], 0);
    let result = read_json(&ran.run_dir().join("result.json"));
    assert_eq!(
        stage_list(&result),
        [
            "start/1 success",
            "left/1 success",
            "right/1 fail",
            "fan/1 partial_success",
            "join/1 success",
            "after/1 success",
            "exit/1 success"
        ]
    );
    let context = &read_json(&ran.run_dir().join("checkpoint.json"))["context"];
    assert_eq!(
        strings(&json!(context["parallel.results"]
            .as_array()
            .unwrap()
            .iter()
            .map(|r| r["branch_id"].clone())
            .collect::<Vec<_>>())),
        ["left", "right"]
    );
    assert_eq!(context["parallel.fan_in.best_id"], "left");
    assert_eq!(context["command.output"], "after\n");
}

/// --run-dir must be new or empty; a non-empty one is refused and left untouched.
#[test]
fn run_dir_that_is_not_empty_exits_2_and_is_left_untouched() {
    let ran = Test::new()
        .workflow(LINEAR)
        .file("run/notes.txt", "keep me")
        .file("run/result.json", "{\"mine\": true}")
        .args(["run", "workflow.dot", "--simulate", "--run-dir", RUN_DIR])
        .status(2)
        .run();
    assert!(
        ran.stderr().contains(
            "error: run directory `run` already exists and is not empty; choose another with --run-dir"
        ),
        "{}",
        ran.stderr()
    );
    let mut names: Vec<String> = std::fs::read_dir(ran.run_dir())
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    assert_eq!(names, ["notes.txt", "result.json"]);
    assert_eq!(read_text(&ran.run_dir().join("notes.txt")), "keep me");
    assert_eq!(read_text(&ran.run_dir().join("result.json")), "{\"mine\": true}");

    // An empty directory is fine.
    let ran = Test::new()
        .workflow(LINEAR)
        .file("run/.gitkeep", "")
        .args(["run", "workflow.dot", "--simulate", "--run-dir", RUN_DIR])
        .status(2)
        .run();
    assert!(ran.stderr().contains("is not empty"), "a hidden file counts: {}", ran.stderr());
    let test = Test::new().workflow(LINEAR);
    std::fs::create_dir(test.path(RUN_DIR)).unwrap();
    let ran = test.args(["run", "workflow.dot", "--simulate", "--run-dir", RUN_DIR, "-q"]).status(0).run();
    assert_eq!(ran.result()["status"], "succeeded");
}

/// Bad option values exit 2 before the run starts.
#[test]
fn bad_options_exit_2() {
    let cases: [(&[&str], &str); 5] = [
        (&["--responses", "missing.json"], "error: cannot read responses file `missing.json`"),
        (
            &["--responses", "list.json"],
            "must be a JSON object mapping node ids to responses, found an array",
        ),
        (
            &["--simulate", "--answers", "list.json"],
            "answers must be a JSON object mapping gate ids to lists of answers",
        ),
        (&["--simulate", "--set", "novalue"], "error: --set `novalue` is not KEY=VALUE"),
        (&["--simulate", "--set", "=x"], "error: --set `=x` has an empty key"),
    ];
    for (args, message) in cases {
        let ran = Test::new()
            .workflow(LINEAR)
            .file("list.json", "[\"a\"]")
            .args(["run", "workflow.dot", "--run-dir", RUN_DIR])
            .args(args)
            .status(2)
            .run();
        assert!(ran.stderr().contains(message), "{args:?}: {}", ran.stderr());
        assert!(!ran.run_dir().exists(), "{args:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Output
// ---------------------------------------------------------------------------------------------

/// --json prints result.json, and nothing else, on stdout.
#[test]
fn json_prints_only_result_json_on_stdout() {
    // Without --run-dir the run goes to .fabro/runs/<run id>.
    let ran =
        Test::new().workflow(LINEAR).args(["run", "workflow.dot", "--simulate", "--json"]).status(0).run();
    let printed = ran.json();
    let run_id = text(&printed["run_id"]).to_string();
    assert_eq!(printed["status"], "succeeded");
    assert_eq!(printed["run_dir"], format!(".fabro/runs/{run_id}"));
    assert_eq!(strings(&printed["completed_nodes"]), ["start", "plan", "implement", "review", "exit"]);
    let file = read_json(&ran.dir.path().join(".fabro/runs").join(&run_id).join("result.json"));
    assert_eq!(printed, file);
    let keys: Vec<&str> = printed.as_object().unwrap().keys().map(String::as_str).collect();
    let mut sorted = keys.clone();
    sorted.sort();
    assert_eq!(
        sorted,
        [
            "completed_nodes",
            "duration_ms",
            "failure_reason",
            "run_dir",
            "run_id",
            "stages",
            "status",
            "usage"
        ]
    );
    // Progress lines are off; the summary still goes to stderr.
    assert!(!ran.stderr().contains("▶"), "{}", ran.stderr());
    assert!(ran.stderr().contains("run succeeded in "), "{}", ran.stderr());

    // A failed run prints its result too.
    let ran = Test::new()
        .workflow(
            &branching("exit 9").replace(r#"check -> bad [label="Fail", condition="outcome=fail"]"#, ""),
        )
        .args(["run", "workflow.dot", "--json", "--run-dir", RUN_DIR])
        .status(1)
        .run();
    let printed = ran.json();
    assert_eq!(printed["status"], "failed");
    assert_eq!(printed["failure_reason"], "stage `check` failed: command exited with code 9 (no `outcome=fail` edge, `retry_target` or `fallback_retry_target` from `check`, so the run ends)");
    assert_eq!(printed, ran.result());
}

// ---------------------------------------------------------------------------------------------
// Interruption
// ---------------------------------------------------------------------------------------------

/// SIGINT stops the running stage (and what it started), saves the checkpoint and exits 130.
#[test]
fn sigint_interrupts_the_run_and_saves_the_checkpoint() {
    let workflow = r#"digraph sleepy {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    slow [shape=parallelogram, script="sleep 30 & echo $! > sleep.pid; wait"]
    after [shape=parallelogram, script="echo never"]
    start -> slow -> after -> exit
}
"#;
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("workflow.dot"), workflow).unwrap();
    let stdout = std::fs::File::create(dir.path().join("stdout.txt")).unwrap();
    let stderr = std::fs::File::create(dir.path().join("stderr.txt")).unwrap();
    let mut child = Command::new(fabro_bin())
        .args(["run", "workflow.dot", "--run-dir", RUN_DIR])
        .current_dir(dir.path())
        .env_remove("CI")
        .stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .spawn()
        .expect("start fabro");

    // Wait until the command runs (events.jsonl is flushed at checkpoints, so the pid file the
    // script writes is the signal that the stage has started).
    let pid_file = dir.path().join("sleep.pid");
    let deadline = Instant::now() + Duration::from_secs(15);
    let sleep_pid: i32 = loop {
        if let Some(pid) = std::fs::read_to_string(&pid_file).ok().and_then(|t| t.trim().parse().ok()) {
            break pid;
        }
        if Instant::now() > deadline {
            let _ = child.kill();
            panic!("the `slow` stage never started");
        }
        std::thread::sleep(Duration::from_millis(20));
    };

    let sent = Instant::now();
    // SAFETY: kill(2) with the pid of our own child process.
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        if sent.elapsed() > Duration::from_secs(15) {
            let _ = child.kill();
            panic!("fabro did not stop after SIGINT");
        }
        std::thread::sleep(Duration::from_millis(20));
    };
    let stopped_in = sent.elapsed();
    let stderr = std::fs::read_to_string(dir.path().join("stderr.txt")).unwrap();
    assert_eq!(status.code(), Some(130), "{stderr}");
    assert!(stopped_in < Duration::from_secs(5), "took {stopped_in:?} to stop");
    assert!(!still_running(sleep_pid), "the command's `sleep` ({sleep_pid}) survived the interrupt");

    let run_dir = dir.path().join(RUN_DIR);
    let checkpoint = read_json(&run_dir.join("checkpoint.json"));
    assert_eq!(checkpoint["status"], "interrupted");
    assert_eq!(checkpoint["current_node"], "slow");
    assert_eq!(checkpoint["completed_nodes"], json!(["start"]));
    let result = read_json(&run_dir.join("result.json"));
    assert_eq!(result["status"], "interrupted");
    assert_eq!(result["failure_reason"], "interrupted during stage `slow`");
    assert_eq!(read_json(&run_dir.join("manifest.json"))["status"], "interrupted");
    let events = read_text(&run_dir.join("events.jsonl"));
    let last = events.lines().last().unwrap();
    assert!(last.contains(r#""event":"run.interrupted""#), "{last}");
    assert!(
        events.lines().any(|l| l.contains(r#""event":"stage.started""#) && l.contains(r#""node_id":"slow""#)),
        "{events}"
    );
    assert!(!run_dir.join("stages/after").exists());
    assert!(stderr.contains("interrupted; resume with: fabro resume run"), "{stderr}");
}

// ---------------------------------------------------------------------------------------------
// 11.13 Integration smoke test
// ---------------------------------------------------------------------------------------------

/// Attractor 11.13 integration smoke test: plan -> implement -> review -> done, exactly as in the
/// spec, with scripted answers in place of a real model: `implement` fails once (so its
/// `outcome=fail` edge back to `plan` is taken) and then succeeds.
#[test]
fn integration_smoke_test() {
    let dot = r#"digraph test_pipeline {
    graph [goal="Create a hello world Python script"]

    start       [shape=Mdiamond]
    plan        [shape=box, prompt="Plan how to create a hello world script for: $goal"]
    implement   [shape=box, prompt="Write the code based on the plan", goal_gate=true]
    review      [shape=box, prompt="Review the code for correctness"]
    done        [shape=Msquare]

    start -> plan
    plan -> implement
    implement -> review [condition="outcome=success"]
    implement -> plan   [condition="outcome=fail", label="Retry"]
    review -> done      [condition="outcome=success"]
    review -> implement [condition="outcome=fail", label="Fix"]
}
"#;
    // 1. Parse and 2. validate: the spec's graph, its goal, 5 nodes, 6 edges, no errors.
    let checked =
        fabro::Loader::new().load_source(fabro::source::SourceFile::new("smoke.dot", dot)).expect("parses");
    assert_eq!(checked.workflow.goal(), "Create a hello world Python script");
    assert_eq!(checked.workflow.node_count(), 5);
    assert_eq!(checked.workflow.edge_count(), 6);
    assert!(!checked.has_errors(), "{:#?}", checked.diagnostics);

    // 3. Execute.
    let script = responses(json!({
        "plan": "1. Write hello.py\n2. Run it",
        "implement": [
            directive(json!({"outcome": "fail", "failure_reason": "hello.py has a syntax error"})),
            "print('Hello, world!')\n\n{\"outcome\": \"success\"}",
        ],
        "review": "The script is correct. {\"outcome\": \"success\"}",
    }));
    let ran = run(dot, &[("responses.json", &script)], &["--responses", "responses.json"], 0);

    // 4. Verify the outcome and the artifacts.
    let result = ran.result();
    assert_eq!(result["status"], "succeeded");
    assert_eq!(ran.completed(), ["start", "plan", "implement", "plan", "implement", "review", "done"]);
    assert_eq!(
        ran.routes(),
        [
            "start -> plan (weight)",
            "plan -> implement (weight)",
            "implement -> plan (condition)",
            "plan -> implement (weight)",
            "implement -> review (condition)",
            "review -> done (condition)"
        ]
    );
    for (node, visits) in [("plan", 2), ("implement", 2), ("review", 1)] {
        for visit in 1..=visits {
            for file in ["prompt.md", "response.md", "status.json"] {
                assert!(ran.stage(node, visit).join(file).is_file(), "{node}/{visit}/{file}");
            }
        }
    }
    assert_eq!(
        sent_prompt(&ran.stage("plan", 1)),
        "Plan how to create a hello world script for: Create a hello world Python script"
    );
    assert_eq!(
        read_text(&ran.stage("implement", 2).join("response.md")),
        "print('Hello, world!')\n\n{\"outcome\": \"success\"}"
    );
    assert_eq!(ran.stage_status("implement", 1)["outcome"], "fail");
    assert_eq!(ran.stage_status("implement", 1)["failure_reason"], "hello.py has a syntax error");

    // 5. The goal gate is satisfied.
    let checkpoint = ran.checkpoint();
    assert_eq!(checkpoint["node_outcomes"]["implement"], "success");
    assert!(ran.routes().iter().all(|r| !r.contains("goal_gate")));

    // 6. The checkpoint.
    assert_eq!(checkpoint["status"], "succeeded");
    assert_eq!(checkpoint["current_node"], "done");
    let completed = strings(&checkpoint["completed_nodes"]);
    for node in ["plan", "implement", "review"] {
        assert!(completed.iter().any(|n| n == node), "{node} in {completed:?}");
    }
    assert_eq!(checkpoint["context"]["graph.goal"], "Create a hello world Python script");
}

/// `loop_restart=true`: taking the edge ends the run directory as `restarted` and continues at
/// the target in a fresh one beside it, linked both ways; the context carries over.
#[test]
fn loop_restart_continues_in_a_fresh_run_directory() {
    let workflow = r#"digraph restarting {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=parallelogram, script="n=$(cat n 2>/dev/null || echo 0); n=$((n+1)); echo $n > n; echo round $n"]
    start -> work
    work -> exit [condition="context.command.output contains \"round 3\""]
    work -> work [loop_restart=true, label="again"]
}
"#;
    let ran = common::Test::new()
        .workflow(workflow)
        .args(["run", "workflow.dot", "--run-dir", "runs/first", "-q"])
        .status(0)
        .run();
    let runs = ran.dir.path().join("runs");
    let manifest = |dir: &std::path::Path| read_json(&dir.join("manifest.json"));
    let mut chain = vec![runs.join("first")];
    while let Some(next) = manifest(chain.last().unwrap())["restarted_as"].as_str() {
        chain.push(ran.dir.path().join(next));
    }
    assert_eq!(chain.len(), 3, "two restarts: {chain:?}");
    assert_eq!(std::fs::read_dir(&runs).unwrap().count(), 3, "nothing else was created");
    for (i, dir) in chain.iter().enumerate() {
        let manifest = manifest(dir);
        let last = i == chain.len() - 1;
        assert_eq!(manifest["status"], if last { "succeeded" } else { "restarted" });
        assert_eq!(
            read_json(&dir.join("checkpoint.json"))["status"],
            if last { "succeeded" } else { "restarted" }
        );
        if i > 0 {
            assert_eq!(ran.dir.path().join(manifest["restarted_from"].as_str().unwrap()), chain[i - 1]);
        }
        let events = read_text(&dir.join("events.jsonl"));
        assert!(events.lines().next().unwrap().contains(r#""event":"run.started""#));
        if !last {
            assert!(events.lines().any(|l| l.contains(r#""event":"run.restarted""#)), "{events}");
        }
    }
    let last = &chain[2];
    assert_eq!(read_json(&last.join("result.json"))["completed_nodes"], json!(["work", "exit"]));
    // Context carried over: the final run saw the third round.
    let context = &read_json(&last.join("checkpoint.json"))["context"];
    assert_eq!(context["command.output"], "round 3\n");
}

/// Engine-managed keys: `internal.fidelity` is the entering edge's fidelity, else the node's,
/// else the graph default, else compact; `internal.thread_id` is only set while a full-fidelity
/// LLM stage runs (command stages have no conversation). Stages see them in the context snapshot.
#[test]
fn stages_see_their_resolved_fidelity_and_thread() {
    let workflow = r#"digraph fidelity {
    default_fidelity = "truncate"
    default_thread = "main"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    first [shape=parallelogram, script="cp \"$FABRO_CONTEXT\" first.json"]
    second [shape=parallelogram, fidelity="summary:low", script="cp \"$FABRO_CONTEXT\" second.json"]
    third [shape=parallelogram, fidelity="summary:low", script="cp \"$FABRO_CONTEXT\" third.json"]
    start -> first -> second
    second -> third [fidelity=full, thread_id="review"]
    third -> exit
}
"#;
    let ran = common::Test::new().workflow(workflow).args(["run", "workflow.dot", "-q"]).status(0).run();
    let seen = |name: &str| read_json(&ran.dir.path().join(name));
    assert_eq!(seen("first.json")["internal.fidelity"], "truncate");
    assert_eq!(seen("first.json")["internal.thread_id"], Value::Null);
    assert_eq!(seen("second.json")["internal.fidelity"], "summary:low");
    assert_eq!(seen("third.json")["internal.fidelity"], "full");
    assert_eq!(seen("third.json")["internal.thread_id"], Value::Null);
}

/// The prompt part of what a stage sent: `prompt.md` is the stage's preamble (`preamble.md`, when
/// its fidelity has one), a `---` separator, and the prompt.
fn sent_prompt(stage_dir: &Path) -> String {
    let sent = read_text(&stage_dir.join("prompt.md"));
    match std::fs::read_to_string(stage_dir.join("preamble.md")) {
        Ok(preamble) => {
            let prefix = format!("{}\n\n---\n\n", preamble.trim_end());
            assert!(sent.starts_with(&prefix), "prompt.md starts with the preamble:\n{sent}");
            sent[prefix.len()..].to_string()
        }
        Err(_) => sent,
    }
}

/// `preferred_label` is an engine key: set after a stage that chose a label (a gate's answer),
/// cleared after a stage that chose none, so a later condition never sees a stale choice.
#[test]
fn preferred_label_is_set_by_a_stage_that_chose_one_and_cleared_by_the_next() {
    let workflow = r#"digraph labels {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    review [shape=hexagon, label="Ship it?"]
    build [shape=parallelogram, script="echo built"]
    start -> review
    review -> build [label="[Y] Yes"]
    review -> exit [label="[N] No"]
    build -> exit
}
"#;
    let ran =
        run(workflow, &[("answers.json", r#"{"review": "Y"}"#)], &["--answers", "answers.json", "-q"], 0);
    let run_dir = ran.dir.path().join(RUN_DIR);
    let (_, after_review) = common::journal_entry_after(&run_dir, "review");
    assert_eq!(after_review["set"]["preferred_label"], "[Y] Yes", "{after_review}");
    let (_, after_build) = common::journal_entry_after(&run_dir, "build");
    let removed: Vec<&str> =
        after_build["removed"].as_array().unwrap().iter().filter_map(Value::as_str).collect();
    assert!(removed.contains(&"preferred_label"), "cleared after a stage that chose none: {after_build}");
    assert!(ran.checkpoint()["context"].get("preferred_label").is_none());
}
