//! Every workflow shipped in `workflows/` runs green with `fabro run --simulate --auto-approve`
//! and passes a `--dry-run`. Command stages really run through `sh`, but against stub `cargo`,
//! `docker` and `gh` executables put first on PATH, which print what they were asked, log it and
//! exit 0, so no real tool is touched.
//!
//! Branches of a parallel stage run at the same time, so for workflows with one the stub calls are
//! compared without their order.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{fabro_bin, repo_root, shipped_workflows};
use fabro::graph::HandlerType;
use serde_json::{json, Value};

/// A temporary directory with `bin/` (the stubs), `work/` (the work dir) and `calls.log` (what
/// the stubs were asked, one line per call).
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new() -> Sandbox {
        let sandbox = Sandbox { dir: tempfile::tempdir().expect("temp dir") };
        std::fs::create_dir_all(sandbox.bin()).unwrap();
        std::fs::create_dir_all(sandbox.work()).unwrap();
        for tool in ["cargo", "docker", "gh"] {
            sandbox.stub(tool, "exit 0");
        }
        sandbox
    }

    fn bin(&self) -> PathBuf {
        self.dir.path().join("bin")
    }

    fn work(&self) -> PathBuf {
        self.dir.path().join("work")
    }

    fn calls_log(&self) -> PathBuf {
        self.dir.path().join("calls.log")
    }

    /// (Re)writes the stub for `tool`: it logs and prints its command line, then runs `tail`.
    fn stub(&self, tool: &str, tail: &str) {
        let path = self.bin().join(tool);
        let script = format!(
            "#!/bin/sh\necho \"{tool} $*\" >> '{log}'\necho \"{tool} $*\"\n{tail}\n",
            log = self.calls_log().display()
        );
        std::fs::write(&path, script).unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o755)).unwrap();
    }

    /// The stubs' command lines so far.
    fn calls(&self) -> Vec<String> {
        std::fs::read_to_string(self.calls_log()).unwrap_or_default().lines().map(str::to_string).collect()
    }

    fn run_dir(&self) -> PathBuf {
        self.dir.path().join("run")
    }

    /// `fabro run WORKFLOW --workdir work --run-dir run ARGS` with the stubs first on PATH.
    fn run(&self, workflow: &Path, args: &[&str]) -> Output {
        let path = format!("{}:{}", self.bin().display(), std::env::var("PATH").unwrap_or_default());
        Command::new(fabro_bin())
            .arg("run")
            .arg(workflow)
            .args(["--workdir", "work", "--run-dir", "run"])
            .args(args)
            .current_dir(self.dir.path())
            .env("PATH", path)
            .env_remove("CI")
            .output()
            .expect("run fabro")
    }

    fn result(&self) -> Value {
        read_json(&self.run_dir().join("result.json"))
    }

    fn completed(&self) -> Vec<String> {
        strings(&self.result()["completed_nodes"])
    }

    fn events_named(&self, name: &str) -> Vec<Value> {
        let text = std::fs::read_to_string(self.run_dir().join("events.jsonl")).expect("events.jsonl");
        text.lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("an event"))
            .filter(|event| event["event"] == name)
            .collect()
    }
}

fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON ({e})", path.display()))
}

fn strings(value: &Value) -> Vec<String> {
    value.as_array().expect("an array").iter().map(|v| v.as_str().expect("a string").to_string()).collect()
}

fn describe(output: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn name(path: &Path) -> String {
    path.file_name().unwrap().to_string_lossy().into_owned()
}

/// Whether the workflow has a parallel fan-out node, whose branches run at the same time.
fn has_parallel_node(path: &Path) -> bool {
    let checked = fabro::Loader::new().load_file(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    let parallel = checked.workflow.nodes().any(|node| node.handler_type() == HandlerType::Parallel);
    parallel
}

/// The route each shipped workflow takes when every stage succeeds and every human gate takes its
/// first choice, and what its command stages ask of the stub tools. A workflow added later without
/// an entry here is still run; only its exit status and result are checked.
fn expected(name: &str) -> Option<(&'static [&'static str], &'static [&'static str])> {
    Some(match name {
        "tutorial.dot" => (&["start", "plan", "implement", "test", "fix", "test", "approve", "exit"], &[]),
        "branch_and_loop.dot" => (
            &["start", "implement", "run_tests", "tests_passed", "exit"],
            &["cargo test --workspace --all-features"],
        ),
        "ci_pipeline.dot" => (
            &[
                "start",
                "fmt",
                "clippy",
                "unit_tests",
                "database",
                "wait_for_database",
                "integration_tests",
                "exit",
            ],
            &[
                "cargo fmt --all -- --check",
                "cargo clippy --workspace --all-targets --all-features -- -D warnings",
                "cargo test --workspace --lib --bins",
                "docker compose up -d postgres",
                "cargo test --workspace --test * -- --test-threads=4",
            ],
        ),
        "implement_and_test.dot" => (
            &["start", "implement", "test", "review", "exit"],
            // Run by the child workflow parts/test_suite.dot.
            &["cargo test --workspace --lib", "cargo test --workspace --test *"],
        ),
        "linear.dot" => (&["start", "plan", "implement", "review", "exit"], &[]),
        "multi_model.dot" => (
            &[
                "start",
                "plan",
                "implement",
                "review_correctness",
                "review_migration",
                "final_verdict",
                "changelog",
                "exit",
            ],
            &[],
        ),
        "parallel_review.dot" => (
            &[
                "start",
                "implement",
                "security_scan",
                "security_review",
                "performance_review",
                "style_lint",
                "style_review",
                "reviews",
                "merge_findings",
                "apply_fixes",
                "exit",
            ],
            &["cargo audit --deny warnings", "cargo clippy --all-targets -- -D warnings"],
        ),
        "plan_from_files.dot" => (&["start", "plan", "implement", "self_check", "review", "exit"], &[]),
        "test_suite.dot" => (
            &["start", "unit_tests", "integration_tests", "triage", "exit"],
            &["cargo test --workspace --lib", "cargo test --workspace --test *"],
        ),
        "review_gate.dot" => (
            &["start", "plan", "implement", "summarize", "review", "open_pr", "exit"],
            &["gh pr create --fill --label rate-limiting"],
        ),
        _ => return None,
    })
}

/// Stage visits that fail by design: the tutorial's stand-in test fails once to show the fix
/// loop, and runs a plain shell script rather than a stub tool.
fn designed_failures(name: &str) -> &'static [(&'static str, u64)] {
    match name {
        "tutorial.dot" => &[("test", 1)],
        _ => &[],
    }
}

/// Checks one run of a shipped workflow: exit 0, a succeeded result, the expected route and
/// (unless `dry_run`) the expected tool calls.
fn check_run(sandbox: &Sandbox, workflow: &Path, output: &Output, dry_run: bool) {
    let file = name(workflow);
    let context = || format!("{file}:\n{}", describe(output));
    let parallel = has_parallel_node(workflow);
    assert_eq!(output.status.code(), Some(0), "{}", context());
    let result = sandbox.result();
    assert_eq!(result["status"], "succeeded", "{}", context());
    assert_eq!(result["failure_reason"], Value::Null, "{}", context());
    let stages = result["stages"].as_array().unwrap();
    let designed = designed_failures(&file);
    for stage in stages {
        let visit = (stage["node_id"].as_str().unwrap(), stage["visit"].as_u64().unwrap());
        let expected = if !dry_run && designed.contains(&visit) { "fail" } else { "success" };
        assert_eq!(stage["status"], expected, "{file}: {stage}");
    }
    if let Some((route, calls)) = expected(&file) {
        // A dry run takes no designed failure, so it takes the straight route.
        if !dry_run || designed.is_empty() {
            assert_eq!(sandbox.completed(), route, "{}", context());
        }
        if dry_run {
            assert!(sandbox.calls().is_empty(), "{file}: a dry run runs no command: {:?}", sandbox.calls());
        } else {
            let mut made = sandbox.calls();
            let mut calls: Vec<String> = calls.iter().map(|c| c.to_string()).collect();
            if parallel {
                made.sort();
                calls.sort();
            }
            assert_eq!(made, calls, "{}", context());
        }
    }
    // Every command stage ran through sh (or, in a dry run, was only described).
    for stage in stages.iter().filter(|stage| stage["handler"] == "command") {
        let node = stage["node_id"].as_str().unwrap();
        let dir = sandbox.run_dir().join("stages").join(node).join(stage["visit"].to_string());
        let status = read_json(&dir.join("status.json"));
        let notes = status["notes"].as_str().unwrap();
        if dry_run {
            assert!(notes.starts_with("dry run: would run `"), "{file} {node}: {notes}");
            assert!(!dir.join("stdout.log").exists(), "{file} {node}");
        } else if designed.is_empty() {
            assert!(notes.starts_with("exit 0 in "), "{file} {node}: {notes}");
            let stdout = std::fs::read_to_string(dir.join("stdout.log")).unwrap();
            assert_eq!(status["context_updates"]["command.output"], stdout.as_str(), "{file} {node}");
            assert!(sandbox.calls().contains(&stdout.trim_end().to_string()), "{file} {node}: {stdout}");
        }
    }
}

/// Every shipped workflow runs green with simulated LLM stages and auto-approved gates.
#[test]
fn every_shipped_workflow_runs_green() {
    let workflows = shipped_workflows();
    assert!(workflows.len() >= 7, "{workflows:?}");
    // The workflows run in parallel: ci_pipeline.dot alone waits 15s for its database.
    let handles: Vec<_> = workflows
        .into_iter()
        .map(|workflow| {
            std::thread::spawn(move || {
                let sandbox = Sandbox::new();
                let output = sandbox.run(&workflow, &["--simulate", "--auto-approve", "-q"]);
                check_run(&sandbox, &workflow, &output, false);
                name(&workflow)
            })
        })
        .collect();
    let mut ran = Vec::new();
    for handle in handles {
        match handle.join() {
            Ok(name) => ran.push(name),
            Err(panic) => std::panic::resume_unwind(panic),
        }
    }
    assert!(ran.contains(&"parallel_review.dot".to_string()), "{ran:?}");
}

/// Every shipped workflow passes a dry run: no command, wait or model call really happens.
#[test]
fn every_shipped_workflow_passes_a_dry_run() {
    for workflow in shipped_workflows() {
        let sandbox = Sandbox::new();
        let started = Instant::now();
        let output = sandbox.run(&workflow, &["--dry-run", "-q"]);
        check_run(&sandbox, &workflow, &output, true);
        assert!(started.elapsed() < Duration::from_secs(10), "{}: {:?}", name(&workflow), started.elapsed());
    }
}

/// parallel_review.dot: the three review branches all run and the fan-in sees their results in
/// declaration order, whatever order they finished in.
#[test]
fn parallel_review_runs_every_branch_and_merges_at_the_fan_in() {
    let workflow = repo_root().join("workflows/parallel_review.dot");
    let sandbox = Sandbox::new();
    let output = sandbox.run(&workflow, &["--simulate", "--auto-approve"]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let checkpoint = read_json(&sandbox.run_dir().join("checkpoint.json"));
    let context = &checkpoint["context"];
    let ids: Vec<&str> = context["parallel.results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["branch_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["security_scan", "performance_review", "style_lint"]);
    assert_eq!(context["parallel.success_count"], 3);
    assert_eq!(context["parallel.fan_in.best_id"], "security_scan");
    let prompt =
        std::fs::read_to_string(sandbox.run_dir().join("stages/merge_findings/1/prompt.md")).unwrap();
    assert!(prompt.contains("### `style_lint`: success"), "{prompt}");
}

/// review_gate.dot routes on recorded answers: "Request changes" sends the change back through
/// `revise`, then "Approve" opens the pull request.
#[test]
fn review_gate_routes_on_recorded_answers() {
    let sandbox = Sandbox::new();
    std::fs::write(
        sandbox.dir.path().join("answers.json"),
        json!({"review": ["Request changes", "Approve"]}).to_string(),
    )
    .unwrap();
    let workflow = repo_root().join("workflows/review_gate.dot");
    let output = sandbox.run(&workflow, &["--simulate", "--answers", "answers.json", "-q"]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(sandbox.result()["status"], "succeeded");
    assert_eq!(
        sandbox.completed(),
        [
            "start",
            "plan",
            "implement",
            "summarize",
            "review",
            "revise",
            "summarize",
            "review",
            "open_pr",
            "exit"
        ]
    );
    let routes: Vec<String> = sandbox
        .events_named("edge.selected")
        .iter()
        .filter(|e| e["from"] == "review")
        .map(|e| format!("{} ({})", e["to"].as_str().unwrap(), e["reason"].as_str().unwrap()))
        .collect();
    assert_eq!(routes, ["revise (preferred_label)", "open_pr (preferred_label)"]);
    let completed = sandbox.events_named("interview.completed");
    let labels: Vec<&str> = completed.iter().map(|e| e["label"].as_str().unwrap()).collect();
    assert_eq!(labels, ["[R] Request changes", "[A] Approve"]);
    assert_eq!(sandbox.calls(), ["gh pr create --fill --label rate-limiting"]);
    let checkpoint = read_json(&sandbox.run_dir().join("checkpoint.json"));
    assert_eq!(checkpoint["context"]["human.gate.label"], "[A] Approve");
    assert_eq!(checkpoint["context"]["human.gate.target"], "open_pr");
    assert_eq!(checkpoint["node_visits"]["review"], 2);
    assert_eq!(checkpoint["node_visits"]["summarize"], 2);

    // "Skip" ends the run without a pull request.
    let sandbox = Sandbox::new();
    std::fs::write(sandbox.dir.path().join("answers.json"), json!({"review": "S"}).to_string()).unwrap();
    let output = sandbox.run(&workflow, &["--simulate", "--answers", "answers.json", "-q"]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(sandbox.completed(), ["start", "plan", "implement", "summarize", "review", "exit"]);
    assert!(sandbox.calls().is_empty());
}

/// ci_pipeline.dot: "the first failure is routed to an LLM stage that explains it" along each
/// gate's `outcome=fail` edge, and then the run fails, so CI sees exit code 1.
#[test]
fn ci_pipeline_routes_the_first_failure_to_the_explainer() {
    let sandbox = Sandbox::new();
    sandbox.stub("cargo", "if [ \"$1\" = fmt ]; then exit 1; fi");
    let workflow = repo_root().join("workflows/ci_pipeline.dot");
    let output = sandbox.run(&workflow, &["--simulate", "-q"]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert_eq!(sandbox.completed(), ["start", "fmt", "explain_failure", "report_failure"]);
    assert_eq!(sandbox.calls(), ["cargo fmt --all -- --check"]);
}

/// branch_and_loop.dot: failing tests go through the `tests_passed` diamond to `fix` and back
/// until they pass ("the edges below read the outcome of `run_tests`").
#[test]
fn branch_and_loop_loops_through_fix_until_the_tests_pass() {
    let sandbox = Sandbox::new();
    // The first test run fails, the second passes.
    sandbox.stub("cargo", "if [ ! -f tested ]; then touch tested; exit 101; fi");
    let workflow = repo_root().join("workflows/branch_and_loop.dot");
    let output = sandbox.run(&workflow, &["--simulate", "-q"]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(
        sandbox.completed(),
        ["start", "implement", "run_tests", "tests_passed", "fix", "run_tests", "tests_passed", "exit"]
    );
}
