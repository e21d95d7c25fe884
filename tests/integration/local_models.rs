//! Stages against a real OpenAI-compatible model server, through the binary: llama.cpp serving
//! SmolLM2-135M-Instruct through llama-cpp-python (`common::model_server`, installed by
//! `scripts/test`). A tiny model's words change with the prompt, so these tests check what fabro
//! does with whatever it answers (the calls it runs, the results it sends back, the outcome),
//! with temperature 0 and a fixed seed for repeatability; the scripted fakes of
//! `llm_providers.rs` keep the exact cases.

use crate::common;

use common::model_server::{ModelServer, MODEL};
use common::{Ran, Test};
use serde_json::Value;

/// The stage's transcript, one entry a line.
fn transcript(ran: &Ran, node: &str) -> Vec<Value> {
    let path = ran.dir.path().join("run/stages").join(node).join("1/transcript.jsonl");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}\n--- stderr\n{}", path.display(), ran.stderr()));
    text.lines().map(|line| serde_json::from_str(line).expect("a JSON line")).collect()
}

#[test]
fn an_agent_stage_offers_its_tools_so_that_the_model_calls_them_and_gets_their_results() {
    let server = ModelServer::shared();
    // Two turns show a call and its result going back; the stage need not finish its task.
    let workflow = format!(
        r#"digraph write {{
            start [shape=Mdiamond]
            exit [shape=Msquare]
            write [shape=box, prompt="Create the file hello.txt containing the word hello.", llm_model="{MODEL}",
                   max_turns=2, turn_limit_outcome="partial_success"]
            start -> write -> exit
        }}"#
    );
    let ran = Test::new()
        .workflow(&workflow)
        .file("fabro.toml", &server.config(&[]))
        .file("work/README.md", "A scratch directory.\n")
        .env("FABRO_CONFIG", "fabro.toml")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"])
        .status(0)
        .run();
    let entries = transcript(&ran, "write");
    let shown = || {
        let lines: Vec<String> = entries.iter().map(Value::to_string).collect();
        format!(
            "--- transcript\n{}\n--- stderr\n{}\n--- server\n{}",
            lines.join("\n"),
            ran.stderr(),
            server.log_tail(1500)
        )
    };
    let calls: Vec<&Value> = entries.iter().filter(|entry| entry["type"] == "tool_call").collect();
    assert!(!calls.is_empty(), "the model called no tool, as when it is not offered any\n{}", shown());
    // Every call ran and its result went back: the model was asked again after the first one.
    for call in &calls {
        let result = entries.iter().find(|entry| entry["type"] == "tool_result" && entry["id"] == call["id"]);
        assert!(result.is_some(), "no result for {call}\n{}", shown());
    }
    let asked_again = entries.iter().any(|entry| entry["type"] == "assistant" && entry["turn"] == 2);
    assert!(asked_again, "the model was not asked again with the results\n{}", shown());
}

#[test]
fn a_stage_timeout_closes_the_stream_and_the_real_server_stops_at_its_next_token() {
    // A server of its own, so no other test's request waits in front of this one.
    let server = ModelServer::with_context(6144);
    // A prompt of some 1,200 tokens: the server reads it and begins a long answer, which the
    // stage's second of timeout cuts.
    let words = ["river", "stone", "lantern", "orchard", "copper", "meadow", "violin", "harbor"];
    let long: Vec<String> = (0..400).map(|n| format!("{}{}", words[n % words.len()], n % 97)).collect();
    let workflow = format!(
        r#"digraph count {{
            start [shape=Mdiamond]
            exit [shape=Msquare]
            count [shape=tab, prompt="Summarize these words: {}", llm_model="{MODEL}", timeout="1s"]
            start -> count -> exit
        }}"#,
        long.join(" ")
    );
    let started = std::time::Instant::now();
    // Calls are streamed to a model whose window is known.
    let config = format!("{}\n[models.{MODEL}]\ncontext_window = 6144\n", server.config(&[]));
    let ran = Test::new()
        .workflow(&workflow)
        .file("fabro.toml", &config)
        .env("FABRO_CONFIG", "fabro.toml")
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(1)
        .run();
    let took = started.elapsed();
    let shown = || format!("--- stderr\n{}\n--- server\n{}", ran.stderr(), server.log_tail(3000));
    let stage = ran.dir.path().join("run/stages/count/1");
    let status: Value =
        serde_json::from_str(&std::fs::read_to_string(stage.join("status.json")).unwrap()).unwrap();
    let failure = status["failure_reason"].as_str().unwrap_or_default();
    assert!(failure.contains("timed out"), "{failure}\n{}", shown());
    assert!(took < std::time::Duration::from_secs(20), "the run took {took:?}\n{}", shown());
    // The request was streamed, so the server found the connection closed at its first token
    // after the timeout, and stopped (unstreamed, it writes the whole answer for no one). On a
    // loaded machine it may still be reading the prompt for a while.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(90);
    while !server.log_tail(20_000).contains("Disconnected from client (via refresh/close) Address(") {
        assert!(std::time::Instant::now() < deadline, "the server did not stop\n{}", shown());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}
