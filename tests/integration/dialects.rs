//! Workflows written in the dialects of other implementations (`tests/fixtures/dialects/`, each
//! with a note of where its idioms come from): they validate without errors and run under
//! `--dry-run --auto-approve`.

use crate::common;

use std::path::PathBuf;

use common::{fabro_in, repo_root};

fn fixtures() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo_root().join("tests/fixtures/dialects"))
        .expect("the dialect fixtures")
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "dot"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_dialect_fixture_validates_and_runs_dry() {
    let files = fixtures();
    assert!(!files.is_empty());
    for file in files {
        let dir = tempfile::tempdir().unwrap();
        let path = file.display().to_string();
        let validated = fabro_in(dir.path(), &["validate", &path]);
        assert_eq!(
            validated.status.code(),
            Some(0),
            "{path}: {}",
            String::from_utf8_lossy(&validated.stdout)
        );
        let ran =
            fabro_in(dir.path(), &["run", &path, "--dry-run", "--auto-approve", "-q", "--run-dir", "run"]);
        assert_eq!(ran.status.code(), Some(0), "{path}: {}", String::from_utf8_lossy(&ran.stderr));
    }
}

#[test]
fn bare_seconds_and_integral_floats_are_read_with_a_warning_and_a_fix() {
    let file = repo_root().join("tests/fixtures/dialects/bare_seconds_and_float_weights.dot");
    let dir = tempfile::tempdir().unwrap();
    let out = fabro_in(dir.path(), &["validate", &file.display().to_string()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    for (warning, fix) in [
        ("node build: `timeout=300` reads as 300s (bare numbers are seconds)", "write `timeout=300s`"),
        ("node pause: `duration=1` reads as 1s (bare numbers are seconds)", "write `duration=1s`"),
        ("node review: `max_retries=1.0` reads as 1", "write `max_retries=1`"),
        ("edge build -> pause: `weight=1.0` reads as 1", "write `weight=1`"),
    ] {
        assert!(text.contains(warning), "{warning}\n{text}");
        assert!(text.contains(fix), "{fix}\n{text}");
    }
    assert_eq!(text.matches("warning[dialect_value]").count(), 5, "{text}");
    // A value that is really wrong stays an error.
    let broken = dir.path().join("broken.dot");
    std::fs::write(&broken, std::fs::read_to_string(&file).unwrap().replace("weight=1.0", "weight=2.5"))
        .unwrap();
    let out = fabro_in(dir.path(), &["validate", "broken.dot"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("`weight` is `2.5`, expected an integer"));
}

#[test]
fn negated_contains_routes_as_written() {
    let file = repo_root().join("tests/fixtures/dialects/negated_contains.dot");
    let dir = tempfile::tempdir().unwrap();
    let ran = fabro_in(dir.path(), &["run", &file.display().to_string(), "-q", "--run-dir", "run"]);
    assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("run/result.json")).unwrap()).unwrap();
    let stages: Vec<&str> =
        result["stages"].as_array().unwrap().iter().map(|s| s["node_id"].as_str().unwrap()).collect();
    assert_eq!(stages, ["start", "check", "exit"], "the output has no FAIL, so check goes to exit");
}

/// The run's `result.json` in `dir/run`.
fn result(dir: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("run/result.json")).unwrap()).unwrap()
}

fn stages(result: &serde_json::Value) -> Vec<&str> {
    result["stages"].as_array().unwrap().iter().map(|s| s["node_id"].as_str().unwrap()).collect()
}

#[test]
fn any_exit_ends_the_run_and_an_exit_with_outcome_fail_ends_it_failed() {
    let file = repo_root().join("tests/fixtures/dialects/several_exits.dot").display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let failed = fabro_in(dir.path(), &["run", &file, "-q", "--run-dir", "run"]);
    assert_eq!(failed.status.code(), Some(1), "{}", String::from_utf8_lossy(&failed.stderr));
    let ended = result(dir.path());
    assert_eq!(stages(&ended), ["start", "check", "fail_exit"]);
    assert_eq!(ended["status"], "failed");
    assert_eq!(ended["failure_reason"], "the run reached `fail_exit`, an exit node with outcome=fail");

    std::fs::write(dir.path().join("build.ok"), "").unwrap();
    let succeeded = fabro_in(dir.path(), &["run", &file, "-q", "--run-dir", "run2"]);
    assert_eq!(succeeded.status.code(), Some(0), "{}", String::from_utf8_lossy(&succeeded.stderr));
    let ended: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("run2/result.json")).unwrap()).unwrap();
    assert_eq!(stages(&ended), ["start", "check", "success_exit"]);
}

#[test]
fn goal_gates_are_checked_at_every_exit() {
    let dir = tempfile::tempdir().unwrap();
    // The failed gate routes straight to an exit without outcome=fail: the gate still fails the run.
    let text = std::fs::read_to_string(repo_root().join("tests/fixtures/dialects/several_exits.dot"))
        .unwrap()
        .replace("check -> fail_exit", "check -> success_exit");
    std::fs::write(dir.path().join("gated.dot"), text).unwrap();
    let ran = fabro_in(dir.path(), &["run", "gated.dot", "-q", "--run-dir", "run"]);
    assert_eq!(ran.status.code(), Some(1), "{}", String::from_utf8_lossy(&ran.stderr));
    assert_eq!(
        result(dir.path())["failure_reason"],
        "goal gate `check` has not succeeded (fail) and has no retry target"
    );
}

#[test]
fn a_stage_without_outgoing_edges_ends_the_run_with_its_outcome() {
    let file = repo_root().join("tests/fixtures/dialects/dead_end_terminal.dot").display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let validated = fabro_in(dir.path(), &["validate", &file]);
    let text = String::from_utf8_lossy(&validated.stdout);
    assert_eq!(validated.status.code(), Some(0), "{text}");
    assert!(text.contains("warning[dead_end]"), "{text}");
    assert!(text.contains("`deploy` has no outgoing edges: the run ends there"), "{text}");
    assert!(text.contains("add `deploy -> exit`"), "{text}");

    // `deploy` fails (no `ready` file): the run ends failed with its reason.
    let ran = fabro_in(dir.path(), &["run", &file, "-q", "--auto-approve", "--run-dir", "run"]);
    assert_eq!(ran.status.code(), Some(1), "{}", String::from_utf8_lossy(&ran.stderr));
    let ended = result(dir.path());
    assert_eq!(stages(&ended), ["start", "approve", "deploy"]);
    let reason = ended["failure_reason"].as_str().unwrap();
    assert!(reason.contains("it has no outgoing edges, so the run ends there"), "{reason}");

    std::fs::write(dir.path().join("ready"), "").unwrap();
    let ran = fabro_in(dir.path(), &["run", &file, "-q", "--auto-approve", "--run-dir", "run2"]);
    assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
}

#[test]
fn a_dry_run_follows_the_outcome_clause_leaves_capped_loops_and_lists_edges_never_taken() {
    let file = repo_root().join("tests/fixtures/dialects/dry_run_walk.dot").display().to_string();
    let dir = tempfile::tempdir().unwrap();
    let ran = fabro_in(dir.path(), &["run", &file, "--dry-run", "--run-dir", "run"]);
    let stderr = String::from_utf8_lossy(&ran.stderr);
    assert_eq!(ran.status.code(), Some(0), "{stderr}");
    let ended = result(dir.path());
    assert_eq!(
        stages(&ended),
        ["start", "implement", "test", "implement", "test", "implement", "test", "review", "exit"]
    );
    let walk = &ended["dry_run"];
    assert_eq!(
        walk["assumed"],
        serde_json::json!([
            {"from": "test", "to": "review", "reason": "dry_run_loop_exit",
             "why": "node `implement` would run a 4th time, but the dry-run visit cap is 3: left the loop"},
            {"from": "review", "to": "exit", "reason": "dry_run_outcome",
             "why": "no condition held (a dry run sets no context); the edge tests outcome=success"},
        ])
    );
    assert_eq!(
        walk["never_taken"],
        serde_json::json!([
            {"from": "test", "to": "fix"}, {"from": "fix", "to": "test"}, {"from": "review", "to": "implement"},
        ])
    );
    // The summary says both, and ends with the edges never taken.
    assert!(
        stderr.contains("assumed by the dry run (2):\n  test -> review: node `implement` would run"),
        "{stderr}"
    );
    assert!(
        stderr.ends_with("edges never taken (3):\n  test -> fix\n  fix -> test\n  review -> implement\n"),
        "{stderr}"
    );
    // So do the events.
    let events = std::fs::read_to_string(dir.path().join("run/events.jsonl")).unwrap();
    let assumed: Vec<serde_json::Value> = events
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|event| event["event"] == "edge.selected" && event["assumption"].is_string())
        .collect();
    assert_eq!(assumed.len(), 2);
    assert_eq!(assumed[1]["reason"], "dry_run_outcome");

    // A real run decides by the context: it does not assume.
    let real = fabro_in(dir.path(), &["run", &file, "-q", "--run-dir", "real"]);
    assert_eq!(real.status.code(), Some(1));
    let ended: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("real/result.json")).unwrap()).unwrap();
    assert!(ended.get("dry_run").is_none());
}

#[test]
fn custom_outcomes_from_status_files_and_responses_route_the_run() {
    let file = repo_root().join("tests/fixtures/dialects/custom_outcomes.dot").display().to_string();
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("responses.json"), r#"{"plan": "{\"outcome\": \"ready\"}"}"#).unwrap();
    let ran =
        fabro_in(dir.path(), &["run", &file, "-q", "--responses", "responses.json", "--run-dir", "run"]);
    assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    let ended = result(dir.path());
    assert_eq!(stages(&ended), ["start", "check_dod", "define_dod", "check_dod", "plan", "done"]);
    let outcomes: Vec<&str> =
        ended["stages"].as_array().unwrap().iter().map(|s| s["status"].as_str().unwrap()).collect();
    assert_eq!(outcomes, ["success", "needs_dod", "success", "has_dod", "ready", "success"]);
    let status: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("run/stages/check_dod/1/status.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(status["outcome"], "needs_dod");

    // A custom outcome tested where no stage can report one: a warning.
    let text = std::fs::read_to_string(&file)
        .unwrap()
        .replace("start -> check_dod", "start -> check_dod [condition=\"outcome=needs_dod\"]");
    std::fs::write(dir.path().join("never.dot"), text).unwrap();
    let validated = fabro_in(dir.path(), &["validate", "never.dot"]);
    let report = String::from_utf8_lossy(&validated.stdout);
    assert_eq!(validated.status.code(), Some(0), "{report}");
    assert!(report.contains("warning[custom_outcome]"), "{report}");
    assert!(
        report.contains(
            "`outcome=needs_dod` can never hold: start stage `start` never ends with a custom outcome"
        ),
        "{report}"
    );
}

#[test]
fn forge_join_policies_and_underscore_attributes_read_the_canonical_way() {
    let file = repo_root().join("tests/fixtures/dialects/forge_join_policies.dot");
    let dir = tempfile::tempdir().unwrap();
    let validated = fabro_in(dir.path(), &["validate", &file.display().to_string()]);
    let text = String::from_utf8_lossy(&validated.stdout);
    assert_eq!(validated.status.code(), Some(0), "{text}");
    for (warning, fix) in [
        (
            "node review: `join_policy=all_success` reads as wait_all (forge's name; forge reports partial success \
             when every branch fails, fabro fails the stage)",
            "write `join_policy=wait_all`",
        ),
        ("node probe: `join_policy=any_success` reads as first_success (forge's name)", "write `join_policy=first_success`"),
        (
            "node ship: `human_default_choice` is forge's name for `human.default_choice`",
            "rename it to `human.default_choice`",
        ),
    ] {
        assert!(text.contains(warning), "{warning}\n{text}");
        assert!(text.contains(fix), "{fix}\n{text}");
    }
    // The underscore spelling is read: a default naming no choice is the usual error.
    let broken = std::fs::read_to_string(&file)
        .unwrap()
        .replace("human_default_choice=\"exit\"", "human_default_choice=\"nowhere\"");
    std::fs::write(dir.path().join("broken.dot"), broken).unwrap();
    let out = fabro_in(dir.path(), &["validate", "broken.dot"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("error[human_gate_has_choices]"));

    // The first-success probe joins after one branch: the run's events say which policy ran.
    let ran = fabro_in(
        dir.path(),
        &["run", &file.display().to_string(), "-q", "--auto-approve", "--run-dir", "run"],
    );
    assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    let events = std::fs::read_to_string(dir.path().join("run/events.jsonl")).unwrap();
    assert!(events.contains("\"join_policy\":\"first_success\""), "{events}");
    assert!(events.contains("\"join_policy\":\"wait_all\""), "{events}");
}

#[test]
fn child_workflows_and_prompt_files_resolve_against_the_workflow_file_from_any_directory() {
    let dir = tempfile::tempdir().unwrap();
    let nested = dir.path().join("somewhere/else");
    std::fs::create_dir_all(&nested).unwrap();
    let parent = repo_root().join("tests/fixtures/dialects/relative_paths/parent.dot");
    // An absolute path from an unrelated directory, and a relative one from the repository's tests.
    let validated = fabro_in(&nested, &["validate", &parent.display().to_string()]);
    assert_eq!(validated.status.code(), Some(0), "{}", String::from_utf8_lossy(&validated.stdout));
    let validated =
        fabro_in(&repo_root().join("tests"), &["validate", "fixtures/dialects/relative_paths/parent.dot"]);
    assert_eq!(validated.status.code(), Some(0), "{}", String::from_utf8_lossy(&validated.stdout));
    let run_dir = dir.path().join("run").display().to_string();
    let ran =
        fabro_in(&nested, &["run", &parent.display().to_string(), "--simulate", "-q", "--run-dir", &run_dir]);
    assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    let prompt = std::fs::read_to_string(dir.path().join("run/stages/plan/1/prompt.md")).unwrap();
    assert!(
        prompt.contains("Plan the change for Plan, then let a child workflow build it in three steps."),
        "{prompt}"
    );
}
