//! The context layers of agent stages, asserted from what the model receives: a loopback server
//! speaking the OpenAI-compatible API records every request of an agent stage.

mod common;

use common::llm_server::{openai_text, openai_tools, LlmServer, Reply};
use common::Test;
use serde_json::{json, Value};

fn compatible(server: &LlmServer, workflow: &str) -> Test {
    Test::new()
        .workflow(workflow)
        .env("FABRO_LLM_BASE_URL", &server.url("/v1"))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .env("FABRO_LLM_MODEL", "local-model")
}

/// The contents of the tool results in one request body, oldest first.
fn tool_results(body: &Value) -> Vec<String> {
    body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or("").to_string())
        .collect()
}

/// An agent that reads `n` files, one call per turn, then answers.
fn reads(n: usize) -> Vec<Reply> {
    let mut replies: Vec<Reply> = (0..n)
        .map(|i| {
            openai_tools(&[(format!("c{i}").as_str(), "read_file", json!({"path": format!("f{i}.txt")}))])
        })
        .collect();
    replies.push(openai_text("Done.", 10, 5));
    replies
}

fn workflow(attributes: &str) -> String {
    format!(
        r#"digraph ctx {{
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [prompt="Read the files", llm_model="local-model", max_turns=20{attributes}]
        start -> work -> exit
    }}"#
    )
}

fn with_files(mut test: Test, n: usize, chars: usize) -> Test {
    for i in 0..n {
        test = test.file(&format!("work/f{i}.txt"), &format!("{i}{}\n", "x".repeat(chars)));
    }
    test
}

#[test]
fn a_sliding_window_sends_only_the_last_results_in_full_and_status_json_counts_the_savings() {
    let server = LlmServer::start(reads(4), Vec::new());
    let ran = with_files(compatible(&server, &workflow(", max_in_turn_tool_pairs=2")), 4, 3000)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    let requests = server.main_requests();
    assert_eq!(requests.len(), 5);
    let last = tool_results(&requests[4].json());
    assert_eq!(last.len(), 4, "every call keeps a result (valid call ids)");
    let omitted = "[result omitted: sliding window; re-run the tool if you need it]";
    assert_eq!(last[0], omitted);
    assert_eq!(last[1], omitted);
    assert!(last[2].contains(&"x".repeat(3000)) && last[3].contains(&"x".repeat(3000)));
    // The stage's own record keeps everything; status.json says what the layer saved.
    let status: Value = serde_json::from_str(
        &std::fs::read_to_string(ran.dir.path().join("run/stages/work/1/status.json")).unwrap(),
    )
    .unwrap();
    assert!(status["context_tokens_saved"]["sliding_window"].as_u64().unwrap() > 1000, "{status}");
    let events = std::fs::read_to_string(ran.dir.path().join("run/events.jsonl")).unwrap();
    assert!(events.contains("\"event\":\"agent.context.trimmed\""), "{events}");
}

#[test]
fn replay_caps_cut_results_per_tool_and_stale_reads() {
    let mut replies = vec![
        openai_tools(&[("c0", "read_file", json!({"path": "f0.txt"}))]),
        openai_tools(&[("c1", "write_file", json!({"path": "f0.txt", "content": "new"}))]),
        openai_tools(&[("c2", "grep", json!({"pattern": "x", "path": "."}))]),
    ];
    replies.push(openai_text("Done.", 10, 5));
    let server = LlmServer::start(replies, Vec::new());
    with_files(
        compatible(&server, &workflow(", max_tool_result_chars=100000, tool_result_chars.grep=300")),
        2,
        3000,
    )
    .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
    .status(0)
    .run();
    let last = tool_results(&server.main_requests()[3].json());
    assert!(
        last[0].ends_with("the file changed after this read; read it again if you need it]"),
        "{}",
        last[0]
    );
    assert!(last[0].len() < 700, "a stale read keeps 500 characters: {}", last[0].len());
    assert!(last[2].ends_with("cut by max_tool_result_chars=300]"), "{}", last[2]);
}

#[test]
fn old_results_age_unless_aging_is_off() {
    // 8 reads of 20,000 characters: by the last call the first results are over 10 messages old.
    let server = LlmServer::start(reads(8), Vec::new());
    with_files(compatible(&server, &workflow("")), 8, 20_000)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    let last = tool_results(&server.main_requests()[8].json());
    assert!(
        last[0].contains("messages old keep 2000 tokens"),
        "{}",
        &last[0][last[0].len().saturating_sub(200)..]
    );
    assert!(last[7].len() > 20_000, "recent results are whole");

    let server = LlmServer::start(reads(8), Vec::new());
    with_files(compatible(&server, &workflow(", tool_result_aging=false")), 8, 20_000)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    let last = tool_results(&server.main_requests()[8].json());
    assert!(last.iter().all(|r| r.len() > 20_000));
}
