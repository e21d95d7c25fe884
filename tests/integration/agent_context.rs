//! The context layers of agent stages, asserted from what the model receives: a loopback server
//! speaking the OpenAI-compatible API records every request of an agent stage.

use crate::common;

use common::llm_server::{
    counted_chars, offered_tools, openai_text, openai_tools, tool_results, LlmServer, Reply,
};
use common::Test;
use serde_json::{json, Value};

fn compatible(server: &LlmServer, workflow: &str) -> Test {
    Test::new()
        .workflow(workflow)
        .env("FABRO_LLM_BASE_URL", &server.url("/v1"))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .env("FABRO_LLM_MODEL", "local-model")
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

// Compaction modes, triggers and the context budget.

fn events_named(ran: &common::Ran, name: &str) -> Vec<Value> {
    std::fs::read_to_string(ran.dir.path().join("run/events.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|event| event["event"] == name)
        .collect()
}

/// The text of message `index` of a request body (system prompt at 0).
fn message(body: &Value, index: usize) -> String {
    body["messages"][index]["content"].as_str().unwrap_or_default().to_string()
}

/// Turns 1-3 write a file, run a failing command and read a file; turn 4 answers.
fn write_run_read() -> Vec<Reply> {
    vec![
        openai_tools(&[("c0", "write_file", json!({"path": "out/first.txt", "content": "first"}))]),
        openai_tools(&[("c1", "shell", json!({"command": "echo checking; exit 3"}))]),
        openai_tools(&[("c2", "read_file", json!({"path": "f0.txt"}))]),
        openai_text("Done.", 10, 5),
    ]
}

#[test]
fn intent_compaction_rebuilds_old_turns_from_the_tool_log_without_a_model_call() {
    let server = LlmServer::start(write_run_read(), Vec::new());
    let ran = with_files(
        compatible(
            &server,
            &workflow(", compaction_mode=intent, compaction_trigger_turns=3, compaction_keep_turns=1"),
        ),
        1,
        100,
    )
    .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
    .status(0)
    .run();
    let requests = server.requests();
    assert_eq!(requests.len(), 4, "no summary call");
    let last = requests[3].json();
    assert!(message(&last, 1).ends_with("Read the files"), "the prompt stays");
    let block = message(&last, 2);
    assert!(block.starts_with("[Intent-derived reconstruction of turns 1-2"), "{block}");
    assert!(block.contains("✓ write_file → \"out/first.txt\" (turn 1)"), "{block}");
    assert!(block.contains("✗ shell → \"echo checking; exit 3\" — exit 3 (turn 2)"), "{block}");
    assert!(block.contains("Do not redo operations marked ✓"));
    // Then the kept turn, whole.
    assert_eq!(last["messages"].as_array().unwrap().len(), 5);
    assert!(tool_results(&last)[0].contains("0xxx"));
    let started = events_named(&ran, "agent.compaction.started");
    assert_eq!(
        (started[0]["mode"].as_str(), started[0]["trigger"].as_str()),
        (Some("intent"), Some("turns"))
    );
    let completed = events_named(&ran, "agent.compaction.completed");
    assert_eq!(
        (completed[0]["original_turn_count"].as_u64(), completed[0]["preserved_turn_count"].as_u64()),
        (Some(3), Some(1))
    );
}

#[test]
fn lossless_compaction_states_the_run_records() {
    let server = LlmServer::start(write_run_read(), Vec::new());
    let dot = r#"digraph ctx {
        goal="Ship the notes"
        start [shape=Mdiamond]
        exit [shape=Msquare]
        build [shape=parallelogram, script="echo built"]
        work [prompt="Read the files", llm_model="local-model", max_turns=20, goal_gate=true,
              compaction_mode=lossless, compaction_trigger_turns=3, compaction_keep_turns=1]
        start -> build -> work -> exit
    }"#;
    with_files(compatible(&server, dot), 1, 100)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    let requests = server.requests();
    assert_eq!(requests.len(), 4, "no summary call");
    let block = message(&requests[3].json(), 2);
    for fact in [
        "[Lossless reconstruction from the run's records, covering turns 1-2 of this stage]",
        "stage `work` (visit 1)",
        "- goal: Ship the notes",
        "## Goal gates\n- `work`: not run yet",
        "- `build` (visit 1, command): success",
        "- stage `build`: `echo built` success",
        "- `echo checking; exit 3` exit 3 (turn 2)",
        "- out/first.txt (created)",
        "## Context keys set",
    ] {
        assert!(block.contains(fact), "{fact} in\n{block}");
    }
}

#[test]
fn window_compaction_drops_the_oldest_turns_and_keeps_call_ids_paired() {
    let server = LlmServer::start(reads(6), Vec::new());
    let ran = with_files(
        compatible(&server, &workflow(", compaction_mode=window, compaction_token_budget=2000")),
        6,
        3000,
    )
    .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
    .status(0)
    .run();
    let requests = server.requests();
    assert_eq!(requests.len(), 7, "no summary call");
    for request in &requests {
        let body = request.json();
        let messages = body["messages"].as_array().unwrap();
        assert!(message(&body, 1).ends_with("Read the files"), "the prompt is pinned");
        let conversation: usize = messages.iter().map(|m| m["content"].as_str().map_or(0, str::len)).sum();
        assert!(conversation / 4 <= 2000, "each request stays within the budget: {conversation} characters");
        // Every tool result answers a call of the assistant message before it.
        for (i, m) in messages.iter().enumerate().filter(|(_, m)| m["role"] == "tool") {
            let id = &m["tool_call_id"];
            let calls = messages[..i].iter().rev().find(|m| m["role"] == "assistant").unwrap();
            assert!(calls["tool_calls"].as_array().unwrap().iter().any(|c| c["id"] == *id), "{body}");
        }
    }
    assert!(tool_results(&requests[6].json()).len() < 6);
    assert!(!events_named(&ran, "agent.compaction.completed").is_empty());
}

#[test]
fn hybrid_compaction_puts_records_before_the_summary_and_keeps_them_when_the_summary_fails() {
    let mut replies: Vec<Reply> = (0..3)
        .map(|i| {
            openai_tools(&[(
                format!("c{i}").as_str(),
                "write_file",
                json!({"path": format!("out/{i}.txt"), "content": "x"}),
            )])
        })
        .collect();
    replies.push(openai_text("Done.", 10, 5));
    // One summary, then the server has none left (HTTP 500).
    let summary = "## Goal\nWrite files\n## Progress\nTwo written";
    let server = LlmServer::start(replies, vec![openai_text(summary, 100, 20)]);
    let ran = compatible(
        &server,
        &workflow(", compaction_mode=hybrid, compaction=aggressive, compaction_trigger_turns=2, compaction_keep_turns=1, compaction_model=\"cheap-model\""),
    )
    .file("work/.keep", "")
    .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
    .status(0)
    .run();
    let summaries: Vec<Value> = server
        .requests()
        .iter()
        .filter(|r| r.body.contains("You summarize the history"))
        .map(|r| r.json())
        .collect();
    assert_eq!(summaries.len(), 2);
    assert_eq!(summaries[0]["model"], "cheap-model", "compaction_model writes the summaries");
    let main = server.main_requests();
    let first = message(&main[2].json(), 2);
    assert!(first.starts_with("[Lossless reconstruction"), "{first}");
    assert!(
        first.contains("\n\n[Summary of the earlier part") && first.contains("## Progress\nTwo written"),
        "{first}"
    );
    let second = message(&main[3].json(), 2);
    assert!(second.starts_with("[Lossless reconstruction") && !second.contains("[Summary of"), "{second}");
    assert!(second.contains("- out/0.txt (created)"));
    let failed = events_named(&ran, "agent.compaction.failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["fallback"], "lossless");
}

#[test]
fn a_preset_compacts_by_turn_count() {
    // aggressive, counted in messages as the preset is defined: compact once more than 7 messages
    // are uncompacted (a tool turn is two: the call and its result), keep the latest turns that
    // fit in 5 messages (two turns).
    let server = LlmServer::start(reads(8), Vec::new());
    let ran =
        with_files(compatible(&server, &workflow(", compaction=aggressive, compaction_mode=intent")), 8, 100)
            .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
            .status(0)
            .run();
    let completed = events_named(&ran, "agent.compaction.completed");
    assert_eq!(completed.len(), 3, "{completed:?}");
    for compaction in &completed {
        assert_eq!(
            (compaction["original_turn_count"].as_u64(), compaction["preserved_turn_count"].as_u64()),
            (Some(4), Some(2))
        );
    }
    let last = server.requests().last().unwrap().json();
    assert!(message(&last, 2).contains("turns 1-6"), "{}", message(&last, 2));
    assert_eq!(tool_results(&last).len(), 2);
}

#[test]
fn the_context_budget_warns_once_per_cycle_and_its_cutover_compacts() {
    // Every tool call reports 50 input tokens: the warning at 100, the cutover at 150.
    let server = LlmServer::start(reads(6), Vec::new());
    let ran = with_files(
        compatible(
            &server,
            &workflow(", context_budget_warn=100, context_budget_cutover=150, compaction_mode=intent, compaction_keep_turns=1"),
        ),
        6,
        100,
    )
    .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
    .status(0)
    .run();
    let warnings = events_named(&ran, "agent.context.budget_warning");
    assert_eq!(warnings.len(), 2, "{warnings:?}");
    assert_eq!(warnings[0]["input_tokens"], 100);
    let started = events_named(&ran, "agent.compaction.started");
    assert_eq!(started.len(), 2);
    assert!(started.iter().all(|s| s["trigger"] == "budget"));
    let status: Value = serde_json::from_str(
        &std::fs::read_to_string(ran.dir.path().join("run/stages/work/1/status.json")).unwrap(),
    )
    .unwrap();
    assert!(status["context_tokens_saved"]["compaction"].as_u64().unwrap() > 0, "{status}");
}

#[test]
fn contradicting_compaction_settings_are_validation_errors() {
    Test::new()
        .workflow(&workflow(", compaction_trigger_turns=4, compaction_keep_turns=4"))
        .args(["validate", "workflow.dot"])
        .status(2)
        .stdout_contains("compaction_trigger_turns (4) must be more than compaction_keep_turns (4)")
        .run();
    Test::new()
        .workflow(&workflow(", compaction=none, context_budget_cutover=1000"))
        .args(["validate", "workflow.dot"])
        .status(2)
        .stdout_contains("context_budget_cutover compacts, but compaction=none turns compaction off")
        .run();
}

#[test]
fn the_config_file_context_section_sets_the_users_defaults() {
    let server = LlmServer::start(write_run_read(), Vec::new());
    let config =
        "[context]\ncompaction_mode = \"intent\"\ncompaction_trigger_turns = 3\ncompaction_keep_turns = 1\n";
    let test = with_files(compatible(&server, &workflow("")), 1, 100).file("config.toml", config).args([
        "run",
        "workflow.dot",
        "--run-dir",
        "run",
        "--workdir",
        "work",
        "-q",
    ]);
    let config_path = test.path("config.toml").display().to_string();
    let ran = test.env("FABRO_CONFIG", &config_path).status(0).run();
    assert_eq!(events_named(&ran, "agent.compaction.started")[0]["mode"], "intent");
    // A node attribute wins over the config file.
    let server = LlmServer::start(write_run_read(), Vec::new());
    let test = with_files(compatible(&server, &workflow(", compaction_mode=lossless")), 1, 100)
        .file("config.toml", config)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"]);
    let config_path = test.path("config.toml").display().to_string();
    let ran = test.env("FABRO_CONFIG", &config_path).status(0).run();
    assert_eq!(events_named(&ran, "agent.compaction.started")[0]["mode"], "lossless");
}

// The adaptive trim retry.

#[test]
fn a_call_rejected_for_its_size_is_sent_again_smaller_step_by_step() {
    let replies = vec![
        openai_tools(&[("c0", "read_file", json!({"path": "f0.txt"}))]),
        Reply::status(413, r#"{"error": {"message": "request entity too large"}}"#),
        Reply::status(
            400,
            r#"{"error": {"message": "This model's maximum context length is 8192 tokens.", "code": "context_length_exceeded"}}"#,
        ),
        openai_text("Done.", 10, 5),
    ];
    let server = LlmServer::start(replies, Vec::new());
    let ran = with_files(compatible(&server, &workflow("")), 1, 20_000)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    let requests = server.main_requests();
    assert_eq!(requests.len(), 4);
    let sizes: Vec<usize> = requests[1..].iter().map(|r| tool_results(&r.json())[0].len()).collect();
    assert!(sizes[0] > 20_000, "the first try sends the result whole: {sizes:?}");
    assert!(sizes[1] < 4_100 && sizes[2] < 600, "then 4000, then 500 characters: {sizes:?}");
    let retries = events_named(&ran, "agent.context.trim_retry");
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert_eq!((retries[0]["step"].as_u64(), retries[1]["step"].as_u64()), (Some(1), Some(2)));
    assert!(retries[0]["error"].as_str().unwrap().contains("HTTP 413"));
    assert!(retries[1]["error"].as_str().unwrap().contains("maximum context length"));
    assert!(retries[1]["after_tokens"].as_u64() < retries[1]["before_tokens"].as_u64());
    let status: Value = serde_json::from_str(
        &std::fs::read_to_string(ran.dir.path().join("run/stages/work/1/status.json")).unwrap(),
    )
    .unwrap();
    assert!(status["context_tokens_saved"]["trim_retry"].as_u64().unwrap() > 4000, "{status}");
}

#[test]
fn a_call_still_too_large_without_tool_messages_fails_the_stage() {
    let too_large = || Reply::status(413, r#"{"error": {"message": "request entity too large"}}"#);
    let replies = vec![
        openai_tools(&[("c0", "read_file", json!({"path": "f0.txt"}))]),
        too_large(),
        too_large(),
        too_large(),
        too_large(),
    ];
    let server = LlmServer::start(replies, Vec::new());
    let ran = with_files(compatible(&server, &workflow("")), 1, 20_000)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(1)
        .run();
    let requests = server.main_requests();
    assert_eq!(requests.len(), 5);
    let last = requests[4].json();
    assert!(
        last["messages"]
            .as_array()
            .unwrap()
            .iter()
            .all(|m| m["role"] != "tool" && m.get("tool_calls").is_none()),
        "{last}"
    );
    assert!(
        ran.stderr().contains("still too large after compaction, with tool results cut to 4000 and then 500"),
        "{}",
        ran.stderr()
    );
    assert_eq!(events_named(&ran, "agent.context.trim_retry").len(), 3);
}

// Conversation threads (full fidelity): tool turns carried, filters, task handoff, resume.

fn thread_workflow() -> &'static str {
    r#"digraph threads {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        node [llm_model="local-model", fidelity=full, thread_id=t]
        a [prompt="Task A"]
        b [prompt="Task B"]
        c [prompt="Task C", thread_text_only=true]
        d [prompt="Task D", thread_handoff=summary]
        e [prompt="Task E", thread_exclude_nodes="a,b"]
        f [prompt="Task F", thread_max_turn_age=1]
        start -> a -> b -> c -> d -> e -> f -> exit
    }"#
}

#[test]
fn a_thread_carries_tool_turns_and_each_stage_filters_what_it_receives() {
    let replies = vec![
        openai_tools(&[("c0", "read_file", json!({"path": "f0.txt"}))]),
        openai_text("a done", 10, 5),
        openai_text("b done", 10, 5),
        openai_text("c done", 10, 5),
        openai_text("d done", 10, 5),
        openai_text("e done", 10, 5),
        openai_text("f done", 10, 5),
    ];
    let server = LlmServer::start(replies, Vec::new());
    let ran = with_files(compatible(&server, thread_workflow()), 1, 100)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    let requests: Vec<Value> = server.requests().iter().map(|r| r.json()).collect();
    assert_eq!(requests.len(), 7);
    let roles = |body: &Value| -> Vec<String> {
        body["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap().to_string()).collect()
    };
    // b continues a's session: a's prompt, tool call, result and answer, then b's prompt.
    assert_eq!(roles(&requests[2]), ["system", "user", "assistant", "tool", "assistant", "user"]);
    assert!(tool_results(&requests[2])[0].contains("0xxx"));
    assert_eq!(message(&requests[2], 4), "a done");
    // c (thread_text_only) gets the text only.
    assert_eq!(roles(&requests[3]), ["system", "user", "assistant", "user", "assistant", "user"]);
    // d (thread_handoff=summary) gets one task summary per earlier node, then its prompt.
    assert_eq!(roles(&requests[4]), ["system", "user", "user", "user", "user"]);
    let a = message(&requests[4], 1);
    assert!(a.starts_with("[Task handoff: node `a` finished its task on this thread"), "{a}");
    assert!(a.contains("✓ read_file → \"f0.txt\" (turn 1)") && a.contains("Its answer:\na done"), "{a}");
    assert!(message(&requests[4], 3).contains("node `c`"));
    // e (thread_exclude_nodes="a,b") starts at c's prompt; f (thread_max_turn_age=1) gets e's
    // prompt and answer only.
    assert!(message(&requests[5], 1).ends_with("Task C"), "{}", message(&requests[5], 1));
    assert_eq!(roles(&requests[5]).len(), 1 + 2 * 2 + 1, "c and d, then e's prompt");
    assert_eq!(roles(&requests[6]), ["system", "user", "assistant", "user"]);
    assert_eq!(
        (message(&requests[6], 1), message(&requests[6], 2)),
        ("Task E".to_string(), "e done".to_string())
    );
    let filtered = events_named(&ran, "agent.context.thread_filtered");
    let filters: Vec<&Value> = filtered.iter().map(|event| &event["filters"]).collect();
    assert_eq!(
        filters,
        [
            &json!(["thread_text_only"]),
            &json!(["thread_handoff"]),
            &json!(["thread_exclude_nodes"]),
            &json!(["thread_max_turn_age"])
        ]
    );
    assert!(filtered[3]["after_tokens"].as_u64() < filtered[3]["before_tokens"].as_u64());
    // The thread on disk keeps every message with the node that added it.
    let stored = std::fs::read_to_string(ran.dir.path().join("run/threads/t.jsonl")).unwrap();
    let lines: Vec<Value> = stored.lines().map(|l| serde_json::from_str(l).unwrap()).collect();
    assert_eq!(lines.len(), 4 + 2 * 5);
    assert_eq!((lines[2]["node"].as_str(), lines[2]["role"].as_str()), (Some("a"), Some("tool_results")));
}

#[test]
fn a_resumed_run_continues_a_thread_whose_stage_was_compacted() {
    let dot = r#"digraph resume {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        node [llm_model="local-model", fidelity=full, thread_id=t]
        a [prompt="Task A", compaction_mode=intent, compaction_trigger_turns=2, compaction_keep_turns=1]
        gate [shape=hexagon, label="Ship?"]
        b [prompt="Task B"]
        start -> a -> gate
        gate -> b [label="Go"]
        b -> exit
    }"#;
    let mut replies = write_run_read();
    replies.pop();
    replies.push(openai_text("a done", 10, 5));
    replies.push(openai_text("b done", 10, 5));
    let server = LlmServer::start(replies, Vec::new());
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("workflow.dot"), dot).unwrap();
    std::fs::write(dir.path().join("answers.json"), r#"{"gate": ["Go"]}"#).unwrap();
    std::fs::create_dir_all(dir.path().join("work")).unwrap();
    std::fs::write(dir.path().join("work/f0.txt"), "0xxx\n").unwrap();
    let fabro = |args: &[&str]| {
        common::fabro_command(dir.path(), args)
            .env("FABRO_LLM_BASE_URL", server.url("/v1"))
            .env("FABRO_LLM_MAX_RETRIES", "0")
            .output()
            .unwrap()
    };
    let paused = fabro(&["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"]);
    assert_eq!(paused.status.code(), Some(3), "{}", String::from_utf8_lossy(&paused.stderr));
    let resumed = fabro(&["resume", "run", "--answers", "answers.json", "-q"]);
    assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
    let requests: Vec<Value> = server.requests().iter().map(|r| r.json()).collect();
    assert_eq!(requests.len(), 5, "a's four calls before the stop, b's one after");
    // b, after the resume, continues a's compacted conversation as the thread file kept it: a's
    // prompt, the intent block, the kept turn and a's answer.
    let b = &requests[4];
    assert!(message(b, 1).ends_with("Task A"));
    assert!(message(b, 2).starts_with("[Intent-derived reconstruction of turns 1-2"), "{}", message(b, 2));
    assert!(message(b, 2).contains("✓ write_file → \"out/first.txt\" (turn 1)"));
    assert!(tool_results(b)[0].contains("0xxx"));
    assert_eq!(message(b, 5), "a done");
    assert!(message(b, 6).ends_with("Task B"));
}

// The runtime block (issue 14).

#[test]
fn agent_stages_are_told_their_runtime_and_the_gitignore_unless_turned_off() {
    let server = LlmServer::start(vec![openai_text("Done.", 10, 5)], Vec::new());
    let ran = compatible(&server, &workflow(""))
        .file("work/.gitignore", "target/\n*.log\n")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    let system = message(&server.requests()[0].json(), 0);
    let work = std::fs::canonicalize(ran.dir.path().join("work")).unwrap();
    assert!(system.starts_with("## Runtime environment\nOS: linux\n"), "{system}");
    assert!(system.contains(&format!("Working directory: {}\n", work.display())), "{system}");
    assert!(system.contains("Shell: sh") && system.contains("Date/time: 20"), "{system}");
    assert!(
        system.contains("## .gitignore of the working directory") && system.contains("target/\n*.log\n"),
        "{system}"
    );
    assert!(system.contains("You are a coding agent"), "the agent's instructions follow");

    let server = LlmServer::start(vec![openai_text("Done.", 10, 5)], Vec::new());
    compatible(&server, &workflow(", runtime_context=false"))
        .file("work/.gitignore", "target/\n")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    let system = message(&server.requests()[0].json(), 0);
    assert!(
        system.starts_with("You are a coding agent") && !system.contains("Runtime environment"),
        "{system}"
    );
}

// Project instructions and the git state (issue 36, items 1 and 2).

#[test]
fn agent_stages_get_the_project_s_instructions_and_its_git_state() {
    let server = LlmServer::start(vec![openai_text("Done.", 10, 5)], Vec::new());
    let test = compatible(&server, &workflow(""))
        .file("repo/AGENTS.md", "Run `make check` before you finish.\n")
        .file("repo/services/CLAUDE.md", "Services speak JSON.\n")
        .file("repo/services/api/GEMINI.md", "The API is versioned.\n")
        .file("repo/services/api/main.rs", "fn main() {}\n")
        .file("repo/README.md", "# r\n");
    let repo = test.path("repo");
    common::commit_all_in_new_repository(&repo);
    std::fs::write(repo.join("README.md"), "# changed\n").unwrap();
    let ran = test
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "repo/services/api", "-q"])
        .status(0)
        .run();
    let system = message(&server.requests()[0].json(), 0);
    let at = |text: &str| system.find(text).unwrap_or_else(|| panic!("{text:?} not in:\n{system}"));
    assert!(
        at("### AGENTS.md\nRun `make check`") < at("### services/CLAUDE.md\nServices speak JSON.")
            && at("### services/CLAUDE.md") < at("### services/api/GEMINI.md\nThe API is versioned.")
    );
    assert!(at("You are a coding agent") < at("## Project instructions"));
    assert!(system.contains("Model: local-model\n") && system.contains("Git branch: main\n"), "{system}");
    assert!(system.contains("Git status: 1 changed, 0 untracked: README.md\n"), "{system}");
    assert!(system.contains("Recent commits:\n"), "{system}");
    let status: Value = serde_json::from_str(
        &std::fs::read_to_string(ran.dir.path().join("run/stages/work/1/status.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(status["project_docs"], json!(["AGENTS.md", "services/CLAUDE.md", "services/api/GEMINI.md"]));

    // Turned off, and outside git.
    let server = LlmServer::start(vec![openai_text("Done.", 10, 5)], Vec::new());
    let ran = compatible(&server, &workflow(", project_docs=false"))
        .file("work/AGENTS.md", "Secret sauce.\n")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    let system = message(&server.requests()[0].json(), 0);
    assert!(!system.contains("Secret sauce") && !system.contains("Project instructions"), "{system}");
    assert!(system.contains("Git: the working directory is not in a git repository\n"), "{system}");
    let status = std::fs::read_to_string(ran.dir.path().join("run/stages/work/1/status.json")).unwrap();
    assert!(!status.contains("project_docs"), "{status}");
}

#[test]
fn the_watchdog_warns_stops_the_stage_or_stays_quiet() {
    let same_call = || -> Vec<Reply> {
        let mut replies: Vec<Reply> =
            (0..6).map(|i| openai_tools(&[(format!("c{i}").as_str(), "list_dir", json!({}))])).collect();
        replies.push(openai_text("Done.", 10, 5));
        replies
    };
    let server = LlmServer::start(same_call(), Vec::new());
    let ran = compatible(&server, &workflow(", watchdog=stop"))
        .file("work/a.txt", "a")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(1)
        .run();
    assert!(
        ran.stderr().contains("watchdog=stop: the agent made the same `list_dir` call 5 times in a row ({})"),
        "{}",
        ran.stderr()
    );
    assert_eq!(server.requests().len(), 5, "no call after the fifth repeat");
    assert_eq!(events_named(&ran, "agent.watchdog").len(), 1);

    let server = LlmServer::start(same_call(), Vec::new());
    let ran = compatible(&server, &workflow(", watchdog=off"))
        .file("work/a.txt", "a")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    assert!(events_named(&ran, "agent.watchdog").is_empty());
    assert!(tool_results(&server.requests()[6].json()).iter().all(|r| !r.contains("[fabro:")));
}

#[test]
fn a_cycle_of_two_calls_is_steered_on_its_third_round_and_stops_the_stage_under_watchdog_stop() {
    let cycle = || -> Vec<Reply> {
        let calls = [("list_dir", json!({})), ("glob", json!({"pattern": "*.txt"}))];
        let mut replies: Vec<Reply> = (0..6)
            .map(|i| openai_tools(&[(format!("c{i}").as_str(), calls[i % 2].0, calls[i % 2].1.clone())]))
            .collect();
        replies.push(openai_text("Done.", 10, 5));
        replies
    };
    let server = LlmServer::start(cycle(), Vec::new());
    let ran = compatible(&server, &workflow(""))
        .file("work/a.txt", "a")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    let results = tool_results(&server.requests()[6].json());
    assert!(results[..5].iter().all(|result| !result.contains("[fabro:")), "{results:?}");
    assert!(
        results[5]
            .contains("[fabro: your last 6 calls went 3 times through the same cycle (list_dir → glob)"),
        "{results:?}"
    );
    let events = events_named(&ran, "agent.watchdog");
    assert_eq!(events.len(), 1);
    assert_eq!(
        (events[0]["tool"].as_str(), events[0]["period"].as_u64()),
        (Some("list_dir → glob"), Some(2))
    );

    let server = LlmServer::start(cycle(), Vec::new());
    let ran = compatible(&server, &workflow(", watchdog=stop"))
        .file("work/a.txt", "a")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(1)
        .run();
    assert!(
        ran.stderr().contains(
            "watchdog=stop: the agent went 3 times through the same cycle of 2 calls (list_dir → glob"
        ),
        "{}",
        ran.stderr()
    );
    assert_eq!(server.requests().len(), 6, "no call after the third round");
}

#[test]
fn an_agent_on_a_small_tier_model_is_warned_about_refused_or_allowed() {
    let dot = |extra: &str| {
        format!(
            r#"digraph g {{
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [prompt="Fix it", llm_model="claude-haiku-4-5"{extra}]
        brief [shape=tab, prompt="Say hi", llm_model="claude-haiku-4-5"]
        start -> work -> brief -> exit
    }}"#
        )
    };
    let ran = Test::new()
        .workflow(&dot(""))
        .args(["validate", "workflow.dot"])
        .status(0)
        .stdout_contains("warning[small_tier_parent]")
        .stdout_contains("agent stage `work` runs on `claude-haiku-4-5`, a small-tier model")
        .stdout_contains("use a stronger model such as `claude-sonnet-4-5`")
        .run();
    assert_eq!(ran.stdout().matches("small_tier_parent]").count(), 1, "a prompt stage may be small");
    Test::new()
        .workflow(&dot(", small_tier_parent=refuse"))
        .args(["validate", "workflow.dot"])
        .status(2)
        .stdout_contains("error[small_tier_parent]")
        .run();
    Test::new()
        .workflow(&dot(", small_tier_parent=allow"))
        .args(["validate", "workflow.dot"])
        .status(0)
        .stdout_lacks("small_tier_parent")
        .run();
}

// Stage ceilings (issue 14).

/// A run directory driven by several fabro commands against one loopback server.
struct Session {
    dir: tempfile::TempDir,
    server: LlmServer,
}

impl Session {
    fn new(replies: Vec<Reply>, dot: &str) -> Session {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("workflow.dot"), dot).unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        for i in 0..4 {
            std::fs::write(dir.path().join(format!("work/f{i}.txt")), format!("{i}xxx\n")).unwrap();
        }
        Session { dir, server: LlmServer::start(replies, Vec::new()) }
    }

    fn fabro(&self, args: &[&str]) -> std::process::Output {
        common::fabro_command(self.dir.path(), args)
            .env("FABRO_LLM_BASE_URL", self.server.url("/v1"))
            .env("FABRO_LLM_MAX_RETRIES", "0")
            .env("FABRO_CONFIG", self.dir.path().join("fabro.toml"))
            .output()
            .unwrap()
    }

    fn events(&self) -> Vec<Value> {
        let text = std::fs::read_to_string(self.dir.path().join("run/events.jsonl")).unwrap();
        text.lines().map(|line| serde_json::from_str(line).unwrap()).collect()
    }
}

fn exit_code(output: &std::process::Output) -> Option<i32> {
    assert!(output.status.code().is_some(), "{}", String::from_utf8_lossy(&output.stderr));
    output.status.code()
}

#[test]
fn a_stage_token_ceiling_pauses_the_run_and_only_a_raised_bound_resumes_it() {
    // Every tool turn reports 60 tokens: the third one reaches 150, and the stage stops before a
    // fourth call.
    let session = Session::new(reads(4), &workflow(", max_stage_tokens=150"));
    std::fs::write(session.dir.path().join("fabro.toml"), "").unwrap();
    let paused = session.fabro(&["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"]);
    assert_eq!(exit_code(&paused), Some(3));
    assert!(String::from_utf8_lossy(&paused.stderr).contains("max_stage_tokens is 150"), "{paused:?}");
    assert!(String::from_utf8_lossy(&paused.stderr).contains("fabro resume run --max-stage-tokens N"));
    assert_eq!(session.server.requests().len(), 3);
    let ceiling: Vec<Value> =
        session.events().into_iter().filter(|e| e["event"] == "llm.cost_ceiling").collect();
    assert_eq!(ceiling.len(), 1);
    assert_eq!(ceiling[0]["bound"], "max_stage_tokens");
    assert_eq!(ceiling[0]["limit"], 150.0);
    assert_eq!(ceiling[0]["spent_tokens"], 180);
    let status: Value =
        serde_json::from_str(&std::fs::read_to_string(session.dir.path().join("run/result.json")).unwrap())
            .unwrap();
    assert_eq!(status["status"], "paused");

    // The same bound pauses again at once, without a model call.
    let again = session.fabro(&["resume", "run", "-q"]);
    assert_eq!(exit_code(&again), Some(3));
    assert!(String::from_utf8_lossy(&again.stderr).contains("resume with a higher --max-stage-tokens"));
    assert_eq!(session.server.requests().len(), 3);

    // A higher bound runs the stage again, which finishes.
    let resumed = session.fabro(&["resume", "run", "-q", "--max-stage-tokens", "1000"]);
    assert_eq!(exit_code(&resumed), Some(0), "{}", String::from_utf8_lossy(&resumed.stdout));
    assert_eq!(session.server.requests().len(), 5);
}

#[test]
fn a_stage_cost_ceiling_counts_the_priced_spend_and_the_command_line_bound_wins() {
    // 60 tokens a turn at $10 per million in and out: $0.0006 a turn.
    let dot = r#"digraph cost {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        default_max_stage_cost=0.001
        work [prompt="Read the files", llm_model="local-model", max_turns=20]
        start -> work -> exit
    }"#;
    let session = Session::new(reads(4), dot);
    std::fs::write(
        session.dir.path().join("fabro.toml"),
        "[models.local-model]\ninput_per_mtok = 10.0\noutput_per_mtok = 10.0\n",
    )
    .unwrap();
    let paused = session.fabro(&["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"]);
    assert_eq!(exit_code(&paused), Some(3));
    assert_eq!(session.server.requests().len(), 2, "$0.0012 after two turns is past $0.001");
    let ceiling = session.events().into_iter().find(|e| e["event"] == "llm.cost_ceiling").unwrap();
    assert_eq!(ceiling["bound"], "max_stage_cost");
    assert!((ceiling["spent_usd"].as_f64().unwrap() - 0.0012).abs() < 1e-9, "{ceiling}");
    let lower = session.fabro(&["resume", "run", "-q", "--max-stage-cost", "0.0005"]);
    assert_eq!(exit_code(&lower), Some(3), "a lower bound is not a raised one");
    assert_eq!(session.server.requests().len(), 2);
    let resumed = session.fabro(&["resume", "run", "-q", "--max-stage-cost", "0.01"]);
    assert_eq!(exit_code(&resumed), Some(0), "{}", String::from_utf8_lossy(&resumed.stdout));
    assert_eq!(session.server.requests().len(), 5);
}

#[test]
fn a_negative_cost_ceiling_is_a_validation_error() {
    Test::new()
        .workflow(&workflow(", max_stage_cost=-1"))
        .args(["validate", "workflow.dot"])
        .status(2)
        .stdout_contains("`max_stage_cost` is `-1`, expected an amount of US dollars (0 or more)")
        .run();
    Test::new()
        .workflow(&workflow(""))
        .args(["run", "workflow.dot", "--simulate", "--max-stage-cost=-1"])
        .status(2)
        .stderr_contains("--max-stage-cost -1 is not a cost in US dollars (0 or more)")
        .run();
}

#[test]
fn a_small_tier_model_known_only_at_run_time_is_guarded_by_the_node_or_the_config_file() {
    // The workflow names no model: --model gives the agent a small one.
    let dot = |extra: &str| {
        format!(
            r#"digraph g {{
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [prompt="Fix it"{extra}]
        start -> work -> exit
    }}"#
        )
    };
    let run = |dot: String, config: &str, status: i32| {
        let server = LlmServer::start(vec![openai_text("Done.", 10, 5)], Vec::new());
        let ran = compatible(&server, &dot)
            .file("fabro.toml", config)
            .env("FABRO_CONFIG", "fabro.toml")
            .args([
                "run",
                "workflow.dot",
                "--run-dir",
                "run",
                "--model",
                "gpt-5-mini",
                "--provider",
                "openai_compatible",
            ])
            .status(status)
            .run();
        (ran, server.requests().len())
    };
    let (warned, calls) = run(dot(""), "", 0);
    assert_eq!(calls, 1);
    let events = std::fs::read_to_string(warned.dir.path().join("run/events.jsonl")).unwrap();
    let event =
        events.lines().find(|line| line.contains("\"agent.small_tier_parent\"")).expect("the warning event");
    assert!(event.contains("\"model\":\"gpt-5-mini\"") && event.contains("such as `gpt-5`"), "{event}");

    let (refused, calls) = run(dot(""), "small_tier_parent = \"refuse\"\n", 2);
    assert_eq!(calls, 0, "refused before any call");
    assert!(refused.stderr().contains("runs on `gpt-5-mini`, a small-tier model"), "{}", refused.stderr());
    assert!(refused.stderr().contains("small_tier_parent=refuse"), "{}", refused.stderr());

    // The node's own setting wins over the config file's.
    let (allowed, calls) = run(dot(", small_tier_parent=allow"), "small_tier_parent = \"refuse\"\n", 0);
    assert_eq!(calls, 1);
    let events = std::fs::read_to_string(allowed.dir.path().join("run/events.jsonl")).unwrap();
    assert!(!events.contains("agent.small_tier_parent"));
}

// Reference files (issue 14).

#[test]
fn reference_files_are_indexed_in_the_system_prompt_and_readable_outside_the_work_directory() {
    let dot = r#"digraph refs {
        context_files="docs/schema.sql, specs/"
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [prompt="Use the schema", llm_model="local-model"]
        start -> work -> exit
    }"#;
    let replies = vec![
        openai_tools(&[("c1", "read_file", json!({"path": "../docs/schema.sql"}))]),
        openai_tools(&[("c2", "write_file", json!({"path": "../docs/schema.sql", "content": "x"}))]),
        openai_text("Done.", 10, 5),
    ];
    let session = Session::new(replies, dot);
    let root = session.dir.path();
    std::fs::create_dir_all(root.join("docs")).unwrap();
    std::fs::create_dir_all(root.join("specs/api")).unwrap();
    std::fs::write(root.join("docs/schema.sql"), "CREATE TABLE users (id int);\n").unwrap();
    std::fs::write(root.join("specs/api/orders.md"), "# Orders API\n").unwrap();
    std::fs::write(root.join("specs/.draft.md"), "hidden\n").unwrap();
    std::fs::write(root.join("notes.txt"), "Deploy on Tuesdays.\n").unwrap();
    std::fs::write(root.join("fabro.toml"), "").unwrap();
    let ran = session.fabro(&[
        "run",
        "workflow.dot",
        "--run-dir",
        "run",
        "--workdir",
        "work",
        "-q",
        "--context-file",
        "notes.txt=team notes",
    ]);
    assert_eq!(exit_code(&ran), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    let requests: Vec<Value> = session.server.requests().iter().map(|r| r.json()).collect();
    let system = message(&requests[0], 0);
    let root = std::fs::canonicalize(root).unwrap();
    assert!(system.contains("REFERENCE FILES: 3 file(s)"), "{system}");
    let line =
        |name: &str, path: &str, rest: &str| format!("- {name} ({rest}) {}", root.join(path).display());
    assert!(
        system.contains(&format!(
            "{} | CREATE TABLE users (id int);\n",
            line("docs/schema.sql", "docs/schema.sql", "29 B")
        )),
        "{system}"
    );
    assert!(
        system.contains(&format!(
            "{} | # Orders API",
            line("specs/api/orders.md", "specs/api/orders.md", "13 B")
        )),
        "{system}"
    );
    assert!(
        system.ends_with(&format!("{} | Deploy on Tuesdays.", line("team notes", "notes.txt", "20 B"))),
        "{system}"
    );
    assert!(!system.contains("draft"), "hidden files are left out");
    // Read, but not written.
    assert!(tool_results(&requests[1])[0].contains("CREATE TABLE users"), "{:?}", tool_results(&requests[1]));
    assert!(
        tool_results(&requests[2])[1].contains("outside the work directory"),
        "{:?}",
        tool_results(&requests[2])
    );
    // The run directory keeps them for a resume.
    let manifest = std::fs::read_to_string(session.dir.path().join("run/manifest.json")).unwrap();
    assert!(manifest.contains("\"context_files\"") && manifest.contains("team notes"), "{manifest}");
}

#[test]
fn a_missing_reference_file_is_an_error_with_its_path() {
    let dot = r#"digraph refs {
        context_files="docs/schema.sql"
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [prompt="Use the schema"]
        start -> work -> exit
    }"#;
    Test::new()
        .workflow(dot)
        .args(["validate", "workflow.dot"])
        .status(2)
        .stdout_contains("error[context_files]")
        .stdout_contains("the context file docs/schema.sql does not exist")
        .stdout_contains("workflow.dot:2:")
        .run();
    Test::new()
        .workflow(&workflow(""))
        .args(["run", "workflow.dot", "--simulate", "--context-file", "nope.md"])
        .status(2)
        .stderr_contains("--context-file: the context file nope.md does not exist")
        .run();
}

// Task checkpoints (issue 14).

#[test]
fn mark_task_done_replaces_the_finished_task_by_its_completion_record() {
    let replies = vec![
        openai_tools(&[("c0", "write_file", json!({"path": "out/login.rs", "content": "fn login() {}"}))]),
        openai_tools(&[("c1", "read_file", json!({"path": "f0.txt"}))]),
        openai_tools(&[("c2", "mark_task_done", json!({"detail": "login written"}))]),
        openai_tools(&[("c3", "read_file", json!({"path": "f1.txt"}))]),
        openai_text("Both tasks done.", 10, 5),
    ];
    let record = "# Task\nWrite login\n\n# Files & changes\nWrote out/login.rs\n\n# Technical context\nplain fn\n\n\
                  # Strategy & approach\ndirect\n\n# Verification & next steps\nnone\n\n# Where we are\nlogin done";
    let server = LlmServer::start(replies, vec![openai_text(record, 300, 80)]);
    let ran = with_files(compatible(&server, &workflow("")), 2, 4000)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    let main: Vec<Value> = server.main_requests().iter().map(|r| r.json()).collect();
    assert_eq!(main.len(), 5);
    let tools: Vec<&str> = main[0]["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["function"]["name"].as_str().unwrap())
        .collect();
    assert!(tools.contains(&"mark_task_done"), "{tools:?}");
    // The record call saw the finished task's turns.
    let all = server.requests();
    let record_call = all.iter().find(|r| r.body.contains("You write the completion record")).unwrap();
    assert!(record_call.body.contains("login written") && record_call.body.contains("out/login.rs"));
    // After the checkpoint: the prompt, then the record in place of the three turns.
    let next = &main[3];
    assert_eq!(next["messages"].as_array().unwrap().len(), 3, "{next}");
    assert!(message(next, 1).ends_with("Read the files"));
    let block = message(next, 2);
    assert!(block.starts_with("[Task checkpoint") && block.contains("Marked done: login written"), "{block}");
    assert!(
        block.contains("Wrote out/login.rs\n\nFiles this stage touched (fabro's file tracker):\n- f0.txt (read)\n- out/login.rs (created)\n"),
        "{block}"
    );
    assert!(!next.to_string().contains(&"x".repeat(4000)), "the task's read is gone");
    // The next task goes on from there.
    assert_eq!(main[4]["messages"].as_array().unwrap().len(), 5);
    let events = std::fs::read_to_string(ran.dir.path().join("run/events.jsonl")).unwrap();
    let event =
        events.lines().find(|l| l.contains("\"agent.task_checkpoint\"")).expect("the checkpoint event");
    assert!(event.contains("\"replaced_turns\":3") && event.contains("\"turn\":3"), "{event}");
    let status = std::fs::read_to_string(ran.dir.path().join("run/stages/work/1/status.json")).unwrap();
    assert!(status.contains("\"task_checkpoint\""), "{status}");

    // task_checkpoints=false: no tool.
    let server = LlmServer::start(vec![openai_text("Done.", 10, 5)], Vec::new());
    compatible(&server, &workflow(", task_checkpoints=false"))
        .file("work/.keep", "")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    assert!(!server.requests()[0].body.contains("mark_task_done"));
}

#[test]
fn a_long_mark_task_done_detail_is_capped_before_it_is_kept() {
    let detail = format!("started {} ended", "d".repeat(100_000));
    let replies = vec![
        openai_tools(&[("c0", "mark_task_done", json!({"detail": detail}))]),
        openai_tools(&[("c1", "read_file", json!({"path": "f0.txt"}))]),
        openai_text("Done.", 10, 5),
    ];
    let record = "# Task\nx\n\n# Files & changes\nnone\n\n# Technical context\nnone\n\n\
                  # Strategy & approach\nnone\n\n# Verification & next steps\nnone\n\n# Where we are\ndone";
    let server = LlmServer::start(replies, vec![openai_text(record, 300, 80)]);
    let ran = with_files(compatible(&server, &workflow("")), 1, 10)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    let main = server.main_requests();
    assert_eq!(main.len(), 3);
    for later in &main[1..] {
        assert!(
            later.body.len() < 20_000,
            "every later request resends the detail: {} bytes",
            later.body.len()
        );
        assert!(
            later.body.contains("started ddd") && later.body.contains("characters cut"),
            "{}",
            later.body
        );
    }
    let record_call =
        server.requests().into_iter().find(|r| r.body.contains("You write the completion record")).unwrap();
    assert!(!record_call.body.contains(&"d".repeat(2_000)));
    let events = std::fs::read_to_string(ran.dir.path().join("run/events.jsonl")).unwrap();
    let event = events.lines().find(|l| l.contains("\"agent.task_checkpoint\"")).unwrap();
    assert!(event.len() < 2_000, "{}", event.len());
}

#[test]
fn a_task_checkpoint_whose_record_fails_keeps_the_task_operations() {
    let replies = vec![
        openai_tools(&[("c0", "shell", json!({"command": "exit 4"}))]),
        openai_tools(&[("c1", "mark_task_done", json!({"detail": "tried the build"}))]),
        openai_text("Done.", 10, 5),
    ];
    let server = LlmServer::start(replies, vec![Reply::status(500, r#"{"error": {"message": "down"}}"#)]);
    compatible(&server, &workflow(""))
        .file("work/.keep", "")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    let main = server.main_requests();
    let block = message(&main[2].json(), 2);
    assert!(
        block.contains("could not be written") && block.contains("✗ shell → \"exit 4\" — exit 4 (turn 1)"),
        "{block}"
    );
}

// Project memory (issue 14).

#[test]
fn memory_written_by_one_workflow_is_recalled_by_another_and_managed_with_fabro_memory() {
    let root = tempfile::tempdir().unwrap();
    let repo = root.path().join("repo");
    for dir in ["flows", "other", "work"] {
        std::fs::create_dir_all(repo.join(dir)).unwrap();
    }
    common::git(&repo, &["init", "-q"]);
    let agent = |name: &str, attributes: &str| {
        format!(
            r#"digraph {name} {{
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [prompt="Work", llm_model="local-model", memory=true{attributes}]
        start -> work -> exit
    }}"#
        )
    };
    std::fs::write(repo.join("flows/a.dot"), agent("a", ", memory_extract=true")).unwrap();
    std::fs::write(repo.join("other/b.dot"), agent("b", "")).unwrap();
    let server = LlmServer::start(
        vec![
            openai_tools(&[
                (
                    "c0",
                    "remember",
                    json!({"kind": "fact", "name": "db", "text": "Postgres 16 in docker-compose"}),
                ),
                ("c1", "remember", json!({"kind": "rumour", "name": "x", "text": "y"})),
            ]),
            openai_tools(&[(
                "c2",
                "remember",
                json!({"kind": "warning", "name": "flaky", "text": "net tests are flaky"}),
            )]),
            openai_text("Done.", 10, 5),
            openai_text(
                r#"[{"kind": "decision", "name": "orm", "text": "We use sqlx, not diesel."}]"#,
                10,
                5,
            ),
            openai_text("Done too.", 10, 5),
            openai_text("Done again.", 10, 5),
        ],
        Vec::new(),
    );
    let fabro = |args: &[&str]| {
        common::fabro_command(root.path(), args)
            .env("FABRO_LLM_BASE_URL", server.url("/v1"))
            .env("FABRO_LLM_MAX_RETRIES", "0")
            .output()
            .unwrap()
    };
    let stdout = |output: &std::process::Output| String::from_utf8_lossy(&output.stdout).to_string();
    let first = fabro(&["run", "repo/flows/a.dot", "--run-dir", "run-a", "--workdir", "repo/work", "-q"]);
    assert_eq!(exit_code(&first), Some(0), "{}", String::from_utf8_lossy(&first.stderr));
    let requests: Vec<Value> = server.requests().iter().map(|r| r.json()).collect();
    assert!(!message(&requests[0], 0).contains("MEMORY:"), "nothing to recall yet");
    assert!(tool_results(&requests[1])[1].contains("not remembered: kind `rumour` is not one of fact"));
    assert!(message(&requests[3], 0).contains("later runs of a coding project"), "the extraction call");
    let status = std::fs::read_to_string(root.path().join("run-a/stages/work/1/status.json")).unwrap();
    assert!(
        status.contains(
            r#""memory_added": [
    "db",
    "flaky",
    "orm"
  ]"#
        ),
        "{status}"
    );
    let store = repo.join(".fabro/memory");
    assert_eq!(std::fs::read_dir(&store).unwrap().count(), 3);

    // Another workflow of the repository recalls them, ordered by kind then name.
    let second = fabro(&["run", "repo/other/b.dot", "--run-dir", "run-b", "--workdir", "repo/work", "-q"]);
    assert_eq!(exit_code(&second), Some(0));
    let system = message(&server.requests()[4].json(), 0);
    assert!(system.contains("MEMORY: facts recalled from earlier runs (3 entries)"), "{system}");
    assert!(
        system.ends_with(
            "- [fact] db: Postgres 16 in docker-compose\n- [decision] orm: We use sqlx, not diesel.\n- [warning] flaky: net tests are flaky"
        ),
        "{system}"
    );

    // The cap: 40 more long entries, most of them left out.
    for i in 0..40 {
        let entry = json!({"kind": "preference", "name": format!("p{i:02}"), "text": "z".repeat(400), "updated_at": "2026-11-25T00:00:00Z"});
        std::fs::write(store.join(format!("p{i:02}.json")), entry.to_string()).unwrap();
    }
    let third = fabro(&["run", "repo/other/b.dot", "--run-dir", "run-c", "--workdir", "repo/work", "-q"]);
    assert_eq!(exit_code(&third), Some(0));
    let system = message(&server.requests()[5].json(), 0);
    assert!(system.contains("MEMORY: facts recalled from earlier runs (19 of 43 entries; 24 left out past the 8000-character cap)"), "{system}");

    // fabro memory.
    let list = fabro(&["memory", "list", "--dir", "repo/work"]);
    assert_eq!(exit_code(&list), Some(0));
    assert!(stdout(&list).starts_with("43 entries in "), "{}", stdout(&list));
    assert!(
        stdout(&list).contains("fact       db                       Postgres 16 in docker-compose\n"),
        "{}",
        stdout(&list)
    );
    let json: Value =
        serde_json::from_slice(&fabro(&["memory", "list", "--json", "--dir", "repo"]).stdout).unwrap();
    assert_eq!(json[0]["name"], "db");
    assert_eq!(json.as_array().unwrap().len(), 43);
    let show = fabro(&["memory", "show", "orm", "--dir", "repo"]);
    assert!(
        stdout(&show).starts_with("decision orm\nWe use sqlx, not diesel.\n(written "),
        "{}",
        stdout(&show)
    );
    assert!(stdout(&show).contains("stage work)"), "{}", stdout(&show));
    assert_eq!(exit_code(&fabro(&["memory", "rm", "db", "--dir", "repo"])), Some(0));
    let again = fabro(&["memory", "rm", "db", "--dir", "repo"]);
    assert_eq!(exit_code(&again), Some(2));
    assert!(String::from_utf8_lossy(&again.stderr).contains("no memory entry is named `db`"));
    let cleared = fabro(&["memory", "clear", "--dir", "repo"]);
    assert!(stdout(&cleared).starts_with("removed 42 entries"), "{}", stdout(&cleared));
    assert!(stdout(&fabro(&["memory", "list", "--dir", "repo"])).starts_with("no memory entries"));
}

// Agentic tool wrappers (issue 14).

#[test]
fn agentic_read_file_digests_a_file_on_the_small_model_in_a_fresh_context() {
    let dot = r#"digraph wrap {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [prompt="Find the port", llm_model="local-model", small_model="tiny-model"]
        start -> work -> exit
    }"#;
    let replies = vec![
        openai_tools(&[("p1", "agentic_read_file", json!({"path": "big.txt", "question": "Which port?"}))]),
        openai_tools(&[("s1", "read_file", json!({"path": "big.txt"}))]),
        openai_text("The port is 8123 (big.txt line 501).", 20_000, 15),
        openai_text("Port 8123.", 10, 5),
    ];
    let session = Session::new(replies, dot);
    let big: String = (0..1000)
        .map(|i| {
            if i == 500 {
                "SERVICE_PORT=8123\n".to_string()
            } else {
                format!("line {i} {}\n", "y".repeat(40))
            }
        })
        .collect();
    std::fs::write(session.dir.path().join("work/big.txt"), &big).unwrap();
    std::fs::write(
        session.dir.path().join("fabro.toml"),
        "[models.local-model]\ninput_per_mtok = 10.0\noutput_per_mtok = 10.0\n\n[models.tiny-model]\ninput_per_mtok = 1.0\noutput_per_mtok = 1.0\n",
    )
    .unwrap();
    let ran = session.fabro(&["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"]);
    assert_eq!(exit_code(&ran), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    let requests: Vec<Value> = session.server.requests().iter().map(|r| r.json()).collect();
    assert_eq!(requests.len(), 4);
    let parent_tools = offered_tools(&requests[0]);
    assert!(["agentic_read_file", "agentic_grep", "agentic_research"]
        .iter()
        .all(|t| parent_tools.contains(&t.to_string())));
    assert!(requests[0].to_string().contains("INSTEAD OF read_file"));
    // The sub-conversation: the small model, its system prompt and the question only.
    let sub = &requests[1];
    assert_eq!(sub["model"], "tiny-model");
    assert_eq!(sub["messages"].as_array().unwrap().len(), 2, "{sub}");
    assert_eq!(message(sub, 1), "File: big.txt\nQuestion: Which port?");
    assert!(!sub.to_string().contains("Find the port"), "the parent's history stays out");
    assert_eq!(offered_tools(sub), ["read_file", "grep"]);
    assert!(tool_results(&requests[2])[0].contains("SERVICE_PORT=8123"));
    // The parent gets the digest, never the file.
    assert_eq!(requests[3]["model"], "local-model");
    assert_eq!(tool_results(&requests[3]), ["The port is 8123 (big.txt line 501)."]);
    assert!(!requests[3].to_string().contains("SERVICE_PORT"));
    // Usage: the stage's total, with the small model's share; the cost prices each at its own.
    let status: Value = serde_json::from_str(
        &std::fs::read_to_string(session.dir.path().join("run/stages/work/1/status.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(status["usage"]["input_tokens"], 50 + 50 + 20_000 + 10);
    assert_eq!(status["usage"]["small_model"], json!({"input_tokens": 20_050, "output_tokens": 25}));
    let cost = status["cost_usd"].as_f64().unwrap();
    assert!((cost - (75.0 * 10.0 + 20_075.0) / 1e6).abs() < 1e-9, "{cost}");
    let subtask =
        std::fs::read_to_string(session.dir.path().join("run/stages/work/1/subtasks/1.jsonl")).unwrap();
    assert!(
        subtask.contains("\"type\":\"digest\"") && subtask.contains("\"model\":\"tiny-model\""),
        "{subtask}"
    );
}

#[test]
fn agentic_grep_and_research_each_run_their_own_sub_conversation_and_can_be_turned_off() {
    let replies = vec![
        openai_tools(&[
            ("p1", "agentic_grep", json!({"pattern": "x+", "question": "Where are the x lines?"})),
            ("p2", "agentic_research", json!({"question": "What files are there?", "paths": ["."]})),
        ]),
        openai_tools(&[("s1", "grep", json!({"pattern": "x+"}))]),
        openai_text("f0.txt line 1.", 30, 5),
        openai_tools(&[("s2", "list_dir", json!({})), ("s3", "shell", json!({"command": "touch hacked"}))]),
        openai_text("Two files.", 30, 5),
        openai_text("Done.", 10, 5),
    ];
    let server = LlmServer::start(replies, Vec::new());
    let ran = with_files(compatible(&server, &workflow("")), 2, 10)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    let requests: Vec<Value> = server.requests().iter().map(|r| r.json()).collect();
    assert_eq!(requests.len(), 6);
    assert_eq!(
        message(&requests[1], 1),
        "Search: the regular expression `x+` in the work directory\nQuestion: Where are the x lines?"
    );
    assert_eq!(offered_tools(&requests[1]), ["read_file", "grep"]);
    assert_eq!(message(&requests[3], 1), "Question: What files are there?\nStart with: .");
    assert_eq!(offered_tools(&requests[3]), ["read_file", "list_dir", "glob", "grep"]);
    // A helper cannot write or run commands.
    assert!(tool_results(&requests[4])[1].contains("`shell` is not available here"));
    assert!(!ran.dir.path().join("work/hacked").exists());
    assert_eq!(tool_results(&requests[5]), ["f0.txt line 1.", "Two files."]);
    for n in [1, 2] {
        assert!(ran.dir.path().join(format!("run/stages/work/1/subtasks/{n}.jsonl")).exists());
    }

    let server = LlmServer::start(vec![openai_text("Done.", 10, 5)], Vec::new());
    compatible(&server, &workflow(", agentic_tools=false"))
        .file("work/.keep", "")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    assert!(!server.requests()[0].body.contains("agentic_"));
}

#[test]
fn facts_from_earlier_stages_of_a_thread_survive_every_compaction_mode() {
    for mode in ["llm", "intent", "lossless", "hybrid", "window"] {
        let mut replies = vec![openai_text("The plan: change src/lib.rs only.", 10, 5)];
        replies.extend(reads(10));
        let summary = "## Goal\nRead\n## Progress\nRead some\n## Key Decisions\nNone\n## Failed Approaches\nNone\n## Open Issues\nNone\n## Next Steps\nGo on";
        let server = LlmServer::start(replies, vec![openai_text(summary, 10, 5); 10]);
        let workflow = format!(
            r#"digraph threads {{
            start [shape=Mdiamond]
            exit [shape=Msquare]
            node [llm_model="local-model", fidelity=full, thread_id=t]
            plan [shape=tab, prompt="Plan the change. Constraint: never touch vendor/."]
            work [prompt="Read the files", max_turns=20, compaction=aggressive, compaction_mode={mode}]
            start -> plan -> work -> exit
        }}"#
        );
        let ran = with_files(compatible(&server, &workflow), 10, 100)
            .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
            .status(0)
            .run();
        assert!(!events_named(&ran, "agent.compaction.completed").is_empty(), "{mode}");
        let last = server.main_requests().last().unwrap().json();
        let sent = last["messages"].to_string();
        assert!(sent.contains("Constraint: never touch vendor/."), "{mode}: {sent}");
        assert!(sent.contains("The plan: change src/lib.rs only."), "{mode}: {sent}");
        assert!(sent.contains("[Earlier in this thread"), "{mode}: {sent}");
    }
}

// The window and the tokens, as the server counts them.

fn status_of(ran: &common::Ran, node: &str) -> Value {
    serde_json::from_str(
        &std::fs::read_to_string(ran.dir.path().join(format!("run/stages/{node}/1/status.json"))).unwrap(),
    )
    .unwrap()
}

#[test]
fn a_window_stated_by_a_rejection_is_learned_compaction_runs_first_and_later_calls_fit() {
    // Six reads of 2 KB files, a rejection stating a 3,000-token window, then the rest.
    let mut replies: Vec<Reply> = reads(6);
    let answer = replies.pop().unwrap();
    replies.push(Reply::status(
        400,
        r#"{"error": {"message": "This model's maximum context length is 3000 tokens. However, you requested 3900 tokens (3700 in the messages, 200 in the completion).", "code": "context_length_exceeded"}}"#,
    ));
    replies.extend([
        openai_tools(&[("c6", "read_file", json!({"path": "f0.txt"}))]),
        openai_tools(&[("c7", "read_file", json!({"path": "f1.txt"}))]),
        answer,
    ]);
    let server = LlmServer::start(replies, Vec::new());
    let ran = with_files(compatible(&server, &workflow(", compaction_mode=lossless")), 6, 2_000)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    let windows = events_named(&ran, "agent.context.window");
    assert_eq!(windows.len(), 2, "{windows:?}");
    assert_eq!(
        (windows[0]["source"].as_str(), windows[0]["tokens"].as_u64()),
        (Some("default"), Some(128_000))
    );
    assert_eq!((windows[1]["source"].as_str(), windows[1]["tokens"].as_u64()), (Some("error"), Some(3000)));
    // The rejection compacted the history; no trim step was needed, and nothing was rejected again.
    let compactions = events_named(&ran, "agent.compaction.started");
    assert_eq!(compactions[0]["trigger"], "overflow", "{compactions:?}");
    let trims = events_named(&ran, "agent.context.trim_retry");
    assert!(trims.is_empty(), "{trims:?} {compactions:?}");
    let requests = server.main_requests();
    assert_eq!(requests.len(), 10);
    // From the retry on, every call asks for no more output than the learned window leaves.
    for request in &requests[7..] {
        let body = request.json();
        assert!(body["max_tokens"].as_u64().unwrap() < 3000, "{}", body["max_tokens"]);
    }
    let status = status_of(&ran, "work");
    assert_eq!(status["context_window"]["tokens"], 3000, "{status}");
    assert_eq!(status["context_window"]["source"], "error");
}

#[test]
fn a_prompt_stage_learns_the_window_from_a_rejection_and_asks_again_for_what_it_leaves() {
    let rejection = Reply::status(
        400,
        r#"{"error": {"message": "This model's maximum context length is 2048 tokens. However, you requested 8292 tokens (100 in the messages, 8192 in the completion). Please reduce the length of the messages or completion."}}"#,
    );
    let server = LlmServer::start(
        vec![rejection, openai_text("First answer.", 100, 3), openai_text("Second answer.", 120, 3)],
        Vec::new(),
    );
    let workflow = r#"digraph two {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        first [shape=tab, prompt="Answer", llm_model="local-model"]
        second [shape=tab, prompt="Answer again", llm_model="local-model"]
        start -> first -> second -> exit
    }"#;
    let ran =
        compatible(&server, workflow).args(["run", "workflow.dot", "--run-dir", "run", "-q"]).status(0).run();
    let asked: Vec<u64> =
        server.main_requests().iter().map(|request| request.json()["max_tokens"].as_u64().unwrap()).collect();
    assert_eq!(asked.len(), 3, "one rejected call, then one call per stage: {asked:?}");
    assert_eq!(asked[0], 8192, "the window was not known yet");
    // The retry asks for what the stated window leaves after the 100 tokens of messages (within a
    // quarter of the window); the later stage starts from the learned window.
    assert!(asked[1] <= 512 && asked[1] + 100 < 2048, "{asked:?}");
    assert!(asked[2] <= 512, "{asked:?}");
    let status = status_of(&ran, "first");
    assert_eq!(
        (status["context_window"]["tokens"].as_u64(), status["context_window"]["source"].as_str()),
        (Some(2048), Some("error"))
    );
    let windows = events_named(&ran, "agent.context.window");
    assert_eq!(windows.len(), 1, "{windows:?}");
}

#[test]
fn a_call_the_window_cannot_hold_is_compacted_before_it_is_sent() {
    // A 3,000-token window and reads of 2 KB files: the fourth result would pass it, while the
    // 80% rule keeps six turns. The history is compacted first (trigger overflow), so no request
    // asks for more than the window holds and the server never has to reject one.
    let server = LlmServer::start(reads(8), Vec::new());
    let ran = with_files(
        compatible(
            &server,
            &workflow(", context_window=3000, compaction_mode=lossless, tool_result_aging=false"),
        ),
        8,
        2_000,
    )
    .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
    .status(0)
    .run();
    let compactions = events_named(&ran, "agent.compaction.started");
    assert!(
        !compactions.is_empty() && compactions.iter().all(|c| c["trigger"] == "overflow"),
        "{compactions:?}"
    );
    for request in server.main_requests() {
        let body = request.json();
        let chars = counted_chars(&body);
        let max_tokens = body["max_tokens"].as_u64().unwrap();
        assert!(
            (chars as u64).div_ceil(4) + max_tokens <= 3000,
            "{chars} characters and {max_tokens} tokens"
        );
    }
}

#[test]
fn a_thread_too_long_for_the_window_at_a_stages_first_call_becomes_its_digest() {
    // The plan stage's long prompt is in the work stage's thread: its first call is rejected,
    // and with no turn of its own to compact, the thread's digest is what makes it fit.
    let long_plan =
        format!("Plan the change. Constraint: never touch vendor/. {}", "Context line. ".repeat(800));
    let rejected = Reply::status(
        400,
        r#"{"error": {"message": "This model's maximum context length is 4000 tokens. However, you requested 5000 tokens (4900 in the messages, 100 in the completion).", "code": "context_length_exceeded"}}"#,
    );
    let replies =
        vec![openai_text("The plan: change src/lib.rs only.", 10, 5), rejected, openai_text("Done.", 10, 5)];
    let server = LlmServer::start(replies, Vec::new());
    let workflow = format!(
        r#"digraph threads {{
            start [shape=Mdiamond]
            exit [shape=Msquare]
            node [llm_model="local-model", fidelity=full, thread_id=t]
            plan [shape=tab, prompt="{long_plan}"]
            work [prompt="Do it", max_turns=5]
            start -> plan -> work -> exit
        }}"#
    );
    let ran = compatible(&server, &workflow)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let compactions = events_named(&ran, "agent.compaction.completed");
    assert_eq!(compactions.len(), 1, "{compactions:?}");
    assert!(compactions[0]["after_tokens"].as_u64() < compactions[0]["before_tokens"].as_u64());
    assert!(events_named(&ran, "agent.context.trim_retry").is_empty());
    let last = server.main_requests().last().unwrap().json();
    let sent = last["messages"].to_string();
    assert!(
        sent.contains("[Earlier in this thread") && sent.contains("Constraint: never touch vendor/."),
        "{sent}"
    );
    assert!(sent.len() < long_plan.len(), "{} characters sent", sent.len());
}

#[test]
fn reported_input_tokens_calibrate_the_estimates_and_max_tokens_fits_the_window() {
    // The server reports 2,000 input tokens for the first call: a ratio fabro takes.
    let replies = vec![
        Reply::json(json!({
            "id": "chatcmpl-test", "object": "chat.completion", "model": "test-model",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {"role": "assistant", "content": null,
                "tool_calls": [{"id": "c0", "type": "function", "function": {"name": "list_dir", "arguments": "{}"}}]}}],
            "usage": {"prompt_tokens": 2000, "completion_tokens": 10}
        })),
        openai_text("Done.", 10, 5),
    ];
    let server = LlmServer::start(replies, Vec::new());
    let ran = with_files(compatible(&server, &workflow(", context_window=2400")), 1, 100)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    let calibrated = events_named(&ran, "agent.context.calibrated");
    assert_eq!(calibrated.len(), 1, "{calibrated:?}");
    assert_eq!(calibrated[0]["reported_tokens"], 2000);
    let ratio = calibrated[0]["chars_per_token"].as_f64().unwrap();
    // What was counted: the system prompt and the tool definitions as well as the messages.
    let sent = calibrated[0]["sent_chars"].as_u64().unwrap();
    let first = server.main_requests()[0].json();
    let tools_chars = first["tools"].to_string().len() as u64;
    let system_chars = first["messages"][0]["content"].as_str().unwrap().len() as u64;
    assert!(sent > system_chars + tools_chars * 4 / 5, "the tool definitions count: {sent} vs {tools_chars}");
    assert!((ratio - sent as f64 / 2000.0).abs() < 0.01);
    // The window of 2,400 tokens leaves less than a quarter of it for the answer.
    let asked: Vec<u64> =
        server.main_requests().iter().map(|r| r.json()["max_tokens"].as_u64().unwrap()).collect();
    // The first call, at 4 characters a token, fits a quarter of the window; the second, counted
    // as the server counts, asks only for what the window leaves.
    assert_eq!(asked[0], 600, "{asked:?}");
    assert!(asked[1] < 450 && asked[1] >= 64, "{asked:?}");
    let status = status_of(&ran, "work");
    assert_eq!(status["context_window"]["source"], "node");
    assert!((status["context_window"]["chars_per_token"].as_f64().unwrap() - ratio).abs() < 0.01, "{status}");
}

#[test]
fn summary_calls_fit_the_window_of_the_model_they_go_to() {
    // A 1,500-token window; each read brings 3 KB, so compaction summarizes more than the window
    // holds. The summary call is cut to fit, and asks for at most a quarter of the window.
    let summary = "## Goal\nRead\n## Progress\nRead some\n## Key Decisions\nNone\n## Failed Approaches\nNone\n## Open Issues\nNone\n## Next Steps\nGo on";
    let server = LlmServer::start(reads(6), vec![openai_text(summary, 10, 5); 6]);
    with_files(
        compatible(&server, &workflow(", context_window=1500, compaction_mode=llm, compaction_keep_turns=1")),
        6,
        3_000,
    )
    .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
    .status(0)
    .run();
    let summaries: Vec<Value> = server
        .requests()
        .into_iter()
        .filter(|r| r.body.contains("You summarize the history"))
        .map(|r| r.json())
        .collect();
    assert!(!summaries.is_empty());
    for body in &summaries {
        let max_tokens = body["max_tokens"].as_u64().unwrap();
        assert!(max_tokens <= 375, "{max_tokens}");
        let chars: usize = body["messages"]
            .as_array()
            .unwrap()
            .iter()
            .map(|m| m["content"].as_str().unwrap_or("").len())
            .sum();
        assert!(
            (chars as u64).div_ceil(4) + max_tokens <= 1500,
            "{chars} characters and {max_tokens} tokens"
        );
    }
}

#[test]
fn the_window_a_servers_model_list_or_props_states_is_used_from_the_first_call() {
    use common::llm_server::ServerOptions;
    for (models, props, expected) in [
        // vLLM states it in its model list.
        (Some(json!({"object": "list", "data": [{"id": "local-model", "max_model_len": 3000}]})), None, 3000),
        // llama.cpp's server, at /props.
        (None, Some(json!({"default_generation_settings": {"n_ctx": 2500}})), 2500),
    ] {
        let options = ServerOptions { models, props, ..ServerOptions::default() };
        let server = LlmServer::start_with(reads(1), Vec::new(), options);
        let ran = with_files(compatible(&server, &workflow("")), 1, 100)
            .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
            .status(0)
            .run();
        let windows = events_named(&ran, "agent.context.window");
        assert_eq!(windows.len(), 1, "{windows:?}");
        assert_eq!(
            (windows[0]["source"].as_str(), windows[0]["tokens"].as_u64()),
            (Some("server"), Some(expected))
        );
        // The first call already asks for no more than a quarter of the window.
        let first = server.main_requests()[0].json();
        assert!(first["max_tokens"].as_u64().unwrap() <= expected / 4, "{}", first["max_tokens"]);
        assert_eq!(status_of(&ran, "work")["context_window"]["source"], "server");
    }
}
