//! Usage ceilings: `--max-tokens`, `--max-cost` and the graph's `max_tokens` pause a run before
//! its next LLM stage (exit 3), and `fabro resume` with a raised limit finishes it.

use crate::common;

use common::llm_server::{anthropic_text, LlmServer};
use common::{fabro_command, Ran, Test};
use serde_json::Value;

const KEY: &str = "sk-ant-ceiling-test-0123456789";

fn workflow(graph_attributes: &str) -> String {
    format!(
        r#"digraph budget {{
    graph [goal="Stay in budget"{graph_attributes}]
    start [shape=Mdiamond]
    exit [shape=Msquare]
    first [shape=tab, prompt="One", llm_model="claude-sonnet-4-5"]
    second [shape=tab, prompt="Two", llm_model="claude-sonnet-4-5"]
    start -> first -> second -> exit
}}"#
    )
}

fn run(server: &LlmServer, workflow: &str, args: &[&str], status: i32) -> Ran {
    let mut all = vec!["run", "workflow.dot", "--run-dir", "run"];
    all.extend_from_slice(args);
    Test::new()
        .workflow(workflow)
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", &server.url(""))
        .args(all)
        .status(status)
        .run()
}

fn resume(ran: &Ran, server: &LlmServer, args: &[&str]) -> std::process::Output {
    let mut all = vec!["resume", "run"];
    all.extend_from_slice(args);
    fabro_command(ran.dir.path(), &all)
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", server.url(""))
        .output()
        .expect("run fabro resume")
}

fn json(ran: &Ran, file: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(ran.dir.path().join("run").join(file)).unwrap()).unwrap()
}

#[test]
fn a_token_ceiling_pauses_before_the_next_llm_stage_and_resume_raises_it() {
    let server = LlmServer::start(vec![anthropic_text("one", 100, 50), anthropic_text("two", 10, 5)], vec![]);
    let ran = run(&server, &workflow(""), &["--max-tokens", "100"], 3);
    let stderr = ran.stderr();
    assert!(
        stderr.contains("paused: token ceiling reached: the run has used 150 tokens and the limit is 100"),
        "{stderr}"
    );
    assert!(stderr.contains("--max-tokens N"), "{stderr}");
    assert_eq!(server.requests().len(), 1, "no call after the ceiling");
    assert_eq!(json(&ran, "checkpoint.json")["status"], "paused");
    assert_eq!(json(&ran, "checkpoint.json")["next_node"], "second");
    assert_eq!(json(&ran, "result.json")["status"], "paused");
    assert_eq!(json(&ran, "result.json")["usage"]["input_tokens"], 100);

    // Resuming with the same limit pauses again at once.
    let again = resume(&ran, &server, &["--max-tokens", "100"]);
    assert_eq!(again.status.code(), Some(3), "{}", String::from_utf8_lossy(&again.stderr));
    assert_eq!(server.requests().len(), 1);

    let done = resume(&ran, &server, &["--max-tokens", "1000"]);
    assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
    assert_eq!(server.requests().len(), 2);
    let result = json(&ran, "result.json");
    assert_eq!(result["status"], "succeeded");
    assert_eq!(result["usage"]["input_tokens"], 110);
    assert_eq!(result["usage"]["output_tokens"], 55);
    assert!(String::from_utf8_lossy(&done.stderr).contains("tokens: 110 in / 55 out · estimated cost $"));
}

#[test]
fn a_cost_ceiling_counts_estimated_dollars() {
    // 100k input tokens of claude-sonnet-4-5 at $3 per million: $0.30.
    let server =
        LlmServer::start(vec![anthropic_text("one", 100_000, 0), anthropic_text("two", 1, 1)], vec![]);
    let ran = run(&server, &workflow(""), &["--max-cost", "0.25"], 3);
    assert!(
        ran.stderr().contains("cost ceiling reached: the run has cost an estimated $0.3000"),
        "{}",
        ran.stderr()
    );
    let status: Value = serde_json::from_str(
        &std::fs::read_to_string(ran.dir.path().join("run/stages/first/1/status.json")).unwrap(),
    )
    .unwrap();
    assert!((status["cost_usd"].as_f64().unwrap() - 0.3).abs() < 1e-9);
    let done = resume(&ran, &server, &["--max-cost", "1"]);
    assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));

    let ran =
        Test::new().workflow(&workflow("")).args(["run", "workflow.dot", "--max-cost=-1"]).status(2).run();
    assert!(ran.stderr().contains("--max-cost -1 is not a cost"), "{}", ran.stderr());
}

#[test]
fn the_graph_can_set_the_ceiling_and_the_command_line_raises_it() {
    let server = LlmServer::start(vec![anthropic_text("one", 60, 60), anthropic_text("two", 1, 1)], vec![]);
    let ran = run(&server, &workflow(", max_tokens=100"), &[], 3);
    assert!(ran.stderr().contains("limit is 100"), "{}", ran.stderr());
    let done = resume(&ran, &server, &["--max-tokens", "500"]);
    assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
}

#[test]
fn an_agent_stage_stops_before_the_call_that_would_pass_the_ceiling() {
    use common::llm_server::anthropic_tools;
    let workflow = r#"digraph agent_budget {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=box, prompt="Look around", llm_model="claude-sonnet-4-5"]
    start -> work -> exit
}"#;
    // Each tool turn reports 100 tokens in and 20 out.
    let look = || anthropic_tools("Looking.", &[("t", "list_dir", serde_json::json!({}))]);
    let server = LlmServer::start(vec![look(), look(), look(), anthropic_text("Done.", 10, 5)], vec![]);
    let ran = run(&server, workflow, &["--max-tokens", "150"], 3);
    assert!(
        ran.stderr().contains("token ceiling reached during the stage (240 tokens used, 150 were left)"),
        "{}",
        ran.stderr()
    );
    assert_eq!(server.requests().len(), 2, "the third call is never made");
    assert_eq!(json(&ran, "checkpoint.json")["next_node"], "work");

    let done = resume(&ran, &server, &["--max-tokens", "10000"]);
    assert_eq!(done.status.code(), Some(0), "{}", String::from_utf8_lossy(&done.stderr));
    assert_eq!(server.requests().len(), 4);
}
