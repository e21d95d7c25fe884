//! `backend="cli"` stages run a coding agent as a subprocess: here a script standing in for an
//! installed agent.

use crate::common;

use std::time::{Duration, Instant};

use common::Test;

const AGENT: &str = r#"#!/bin/sh
# Reads the prompt on stdin, edits a file in the work directory, answers on stdout.
prompt=$(cat)
printf '%s\n' "$prompt" > seen-prompt.txt
test -f "$FABRO_PROMPT_FILE" && echo "prompt file ok" >> seen-prompt.txt
echo "patched" > result.txt
echo "I patched result.txt"
echo '{"outcome": "success", "context_updates": {"agent.kind": "script"}}'
"#;

fn workflow(agent_attributes: &str) -> String {
    format!(
        r#"digraph cli {{
    start [shape=Mdiamond]
    exit [shape=Msquare]
    code [shape=box, backend="cli", prompt="Patch the thing"{agent_attributes}]
    start -> code -> exit
}}"#
    )
}

#[test]
fn a_custom_cli_agent_gets_the_prompt_and_its_output_is_the_response() {
    let test = Test::new().workflow(&workflow(", cli_agent=\"sh ../agent.sh\"")).file("agent.sh", AGENT);
    std::fs::create_dir_all(test.path("work")).unwrap();
    let ran = test.args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"]).status(0).run();
    let work = ran.dir.path().join("work");
    let seen = std::fs::read_to_string(work.join("seen-prompt.txt")).unwrap();
    assert!(seen.contains("Patch the thing") && seen.contains("prompt file ok"), "{seen}");
    assert_eq!(std::fs::read_to_string(work.join("result.txt")).unwrap(), "patched\n");
    let stage = ran.dir.path().join("run/stages/code/1");
    let response = std::fs::read_to_string(stage.join("response.md")).unwrap();
    assert!(response.starts_with("I patched result.txt"), "{response}");
    let status = std::fs::read_to_string(stage.join("status.json")).unwrap();
    assert!(
        status.contains("\"agent.kind\": \"script\"") || status.contains("\"agent.kind\":\"script\""),
        "{status}"
    );
    assert!(std::fs::read_to_string(stage.join("transcript.jsonl")).unwrap().contains("\"cli_agent\""));
}

#[test]
fn a_cli_agent_that_fails_or_runs_too_long_fails_the_stage() {
    let ran = Test::new()
        .workflow(&workflow(", cli_agent=\"echo broken >&2; exit 7\""))
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(1)
        .run();
    assert!(ran.stderr().contains("exited with code 7: broken"), "{}", ran.stderr());

    let started = Instant::now();
    let ran = Test::new()
        .workflow(&workflow(", cli_agent=\"sleep 30\", timeout=\"500ms\""))
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(1)
        .run();
    assert!(started.elapsed() < Duration::from_secs(10));
    assert!(ran.stderr().contains("timed out after 0.5s"), "{}", ran.stderr());
}

#[test]
fn a_cli_stage_without_an_agent_is_refused_before_the_run() {
    let ran = Test::new().workflow(&workflow("")).args(["run", "workflow.dot"]).status(2).run();
    assert!(ran.stderr().contains("stage `code` has backend=\"cli\" but no cli_agent"), "{}", ran.stderr());
}
