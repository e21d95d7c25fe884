//! Real providers against a loopback server speaking the Anthropic and OpenAI wire formats:
//! agent stages editing files, prompt stages, threads, retries, redaction, context management.

use crate::common;

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::llm_server::{
    anthropic_text, anthropic_tools, files_containing, openai_text, openai_tools, LlmServer, Reply,
    ServerOptions,
};
use common::{Ran, Test};
use serde_json::{json, Value};

const KEY: &str = "sk-ant-test-SECRET-0123456789";
const OPENAI_KEY: &str = "sk-openai-test-SECRET-9876543210";

fn run_dir(ran: &Ran) -> PathBuf {
    ran.dir.path().join("run")
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn stage_file(ran: &Ran, node: &str, file: &str) -> String {
    read(&run_dir(ran).join("stages").join(node).join("1").join(file))
}

fn events(ran: &Ran) -> Vec<Value> {
    read(&run_dir(ran).join("events.jsonl")).lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

fn events_named(ran: &Ran, name: &str) -> Vec<Value> {
    events(ran).into_iter().filter(|e| e["event"] == name).collect()
}

fn transcript(ran: &Ran, node: &str) -> Vec<Value> {
    stage_file(ran, node, "transcript.jsonl").lines().map(|l| serde_json::from_str(l).unwrap()).collect()
}

/// A test against the Anthropic provider at `server`.
fn anthropic(server: &LlmServer, workflow: &str) -> Test {
    Test::new()
        .workflow(workflow)
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", &server.url(""))
        .env("FABRO_LLM_MAX_RETRIES", "0")
}

const FIX_AND_REPORT: &str = r#"digraph fix {
    graph [goal="Fix the greeting"]
    start [shape=Mdiamond]
    exit [shape=Msquare]
    fix [shape=box, prompt="Fix the typo in greet.txt", llm_model="claude-sonnet-4-5"]
    report [shape=tab, prompt="Say what changed", llm_model="claude-sonnet-4-5"]
    start -> fix -> report -> exit
}"#;

#[test]
fn an_agent_stage_edits_a_file_over_several_turns_and_later_stages_see_it() {
    let server = LlmServer::start(
        vec![
            anthropic_tools("Let me look.", &[("t1", "read_file", json!({"path": "greet.txt"}))]),
            anthropic_tools(
                "Fixing it.",
                &[(
                    "t2",
                    "edit_file",
                    json!({"path": "greet.txt", "old_string": "wrld", "new_string": "world"}),
                )],
            ),
            anthropic_tools("Checking.", &[("t3", "shell", json!({"command": "cat greet.txt; env"}))]),
            anthropic_text("Fixed the typo in greet.txt.", 300, 40),
            anthropic_text("greet.txt now says hello world.", 200, 10),
        ],
        vec![],
    );
    let ran = anthropic(&server, FIX_AND_REPORT)
        .file("work/greet.txt", "hello wrld\n")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"])
        .status(0)
        .run();
    assert_eq!(read(&ran.dir.path().join("work/greet.txt")), "hello world\n");

    // The wire: the key in x-api-key, tool results going back as tool_result blocks.
    let requests = server.requests();
    assert_eq!(requests.len(), 5);
    assert_eq!(requests[0].path, "/v1/messages");
    assert_eq!(requests[0].header("x-api-key"), Some(KEY));
    assert_eq!(requests[0].header("anthropic-version"), Some("2023-06-01"));
    let first = requests[0].json();
    assert_eq!(first["model"], "claude-sonnet-4-5");
    let tools: Vec<&str> =
        first["tools"].as_array().unwrap().iter().map(|t| t["name"].as_str().unwrap()).collect();
    assert_eq!(
        tools,
        [
            "read_file",
            "write_file",
            "edit_file",
            "list_dir",
            "glob",
            "grep",
            "shell",
            "web_fetch",
            "mark_task_done",
            "agentic_read_file",
            "agentic_grep",
            "agentic_research",
            "agentic_fetch_url"
        ]
    );
    let second = requests[1].json();
    let result = &second["messages"][2]["content"][0];
    assert_eq!(result["type"], "tool_result");
    assert_eq!(result["tool_use_id"], "t1");
    assert!(result["content"].as_str().unwrap().contains("hello wrld"), "{result}");
    // The shell never sees the key.
    let shell_result =
        requests[3].json()["messages"][6]["content"][0]["content"].as_str().unwrap().to_string();
    assert!(shell_result.starts_with("exit code 0\nhello world"), "{shell_result}");
    assert!(!shell_result.contains(KEY));
    // The prompt stage is one call without tools.
    assert!(requests[4].json().get("tools").is_none());

    // Transcript: every turn, call and result.
    let entries = transcript(&ran, "fix");
    let kinds: Vec<&str> = entries.iter().map(|e| e["type"].as_str().unwrap()).collect();
    assert_eq!(
        kinds,
        [
            "request",
            "assistant",
            "tool_call",
            "tool_result",
            "assistant",
            "tool_call",
            "tool_result",
            "assistant",
            "tool_call",
            "tool_result",
            "assistant"
        ]
    );
    assert_eq!(entries[5]["name"], "edit_file");
    assert_eq!(entries[6]["content"], "replaced 1 occurrence in greet.txt");

    // status.json: files, usage, cost; the next stage's preamble lists the file.
    let status: Value = serde_json::from_str(&stage_file(&ran, "fix", "status.json")).unwrap();
    assert_eq!(status["files_touched"], json!(["greet.txt"]));
    assert_eq!(status["usage"], json!({"input_tokens": 600, "output_tokens": 100}));
    let cost = status["cost_usd"].as_f64().unwrap();
    assert!((cost - (600.0 * 3.0 + 100.0 * 15.0) / 1e6).abs() < 1e-9, "{cost}");
    let preamble = stage_file(&ran, "report", "preamble.md");
    assert!(
        preamble.contains("greet.txt") && preamble.contains("600 tokens in / 100 out, ~$0.0033"),
        "{preamble}"
    );
    assert_eq!(stage_file(&ran, "fix", "response.md"), "Fixed the typo in greet.txt.");

    // result.json sums usage and cost.
    let result: Value = serde_json::from_str(&read(&run_dir(&ran).join("result.json"))).unwrap();
    assert_eq!(result["usage"]["input_tokens"], 800);
    assert_eq!(result["usage"]["output_tokens"], 110);
    assert!(result["usage"]["cost_usd"].as_f64().unwrap() > cost);
    assert!(ran.stderr().contains("tokens"), "{}", ran.stderr());

    // The key is nowhere in the run directory.
    assert_eq!(files_containing(&run_dir(&ran), KEY), Vec::<PathBuf>::new());
}

#[test]
fn keys_echoed_by_the_provider_are_redacted_everywhere() {
    let echo =
        format!(r#"{{"error": {{"type": "authentication_error", "message": "invalid x-api-key {KEY}"}}}}"#);
    let server = LlmServer::start(vec![Reply::status(401, &echo)], vec![]);
    let ran = anthropic(&server, FIX_AND_REPORT)
        .file("work/greet.txt", "hello wrld\n")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"])
        .status(1)
        .run();
    let stderr = ran.stderr();
    assert!(stderr.contains("HTTP 401") && stderr.contains("[REDACTED]"), "{stderr}");
    assert!(!stderr.contains(KEY));
    assert_eq!(files_containing(&run_dir(&ran), KEY), Vec::<PathBuf>::new());
    assert_eq!(server.requests().len(), 1, "401 is not retried");
}

fn one_prompt(extra: &str) -> String {
    format!(
        r#"digraph one {{
    start [shape=Mdiamond]
    exit [shape=Msquare]
    ask [shape=tab, prompt="Answer", llm_model="claude-sonnet-4-5"{extra}]
    start -> ask -> exit
}}"#
    )
}

#[test]
fn rate_limits_are_retried_after_the_time_the_server_asks_for() {
    let server = LlmServer::start(
        vec![
            Reply::status(429, r#"{"error": {"message": "slow down"}}"#).header("retry-after", "1"),
            anthropic_text("done", 5, 5),
        ],
        vec![],
    );
    let started = Instant::now();
    let ran = anthropic(&server, &one_prompt(""))
        .env("FABRO_LLM_MAX_RETRIES", "2")
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(0)
        .run();
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert_eq!(server.requests().len(), 2);
    assert_eq!(stage_file(&ran, "ask", "response.md"), "done");
}

/// A server that answers but cannot serve now (529 overloaded, 500); a 502/503/504 says the server
/// is not there, which provider_outages.rs covers.
#[test]
fn server_errors_are_retryable_and_feed_the_engine_retry_policy() {
    let server = LlmServer::start(
        vec![
            Reply::status(529, r#"{"error": {"message": "overloaded"}}"#),
            anthropic_text("second try", 5, 5),
        ],
        vec![],
    );
    let ran = anthropic(&server, &one_prompt(r#", max_retries=1, retry_policy="none""#))
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(0)
        .run();
    let retrying = events_named(&ran, "stage.retrying");
    assert_eq!(retrying.len(), 1);
    assert!(retrying[0]["reason"].as_str().unwrap().contains("HTTP 529: overloaded"), "{retrying:?}");

    // Without engine retries the stage fails with the provider's message.
    let server = LlmServer::start(vec![Reply::status(500, "")], vec![]);
    let ran =
        anthropic(&server, &one_prompt("")).args(["run", "workflow.dot", "--run-dir", "run"]).status(1).run();
    assert!(ran.stderr().contains("HTTP 500: (empty body)"), "{}", ran.stderr());
}

#[test]
fn bad_requests_and_malformed_answers_fail_at_once() {
    let server = LlmServer::start(
        vec![Reply::status(400, r#"{"error": {"message": "max_tokens: too large"}}"#)],
        vec![],
    );
    let ran = anthropic(&server, &one_prompt(", max_retries=3"))
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(1)
        .run();
    assert!(ran.stderr().contains("HTTP 400: max_tokens: too large"), "{}", ran.stderr());
    assert_eq!(server.requests().len(), 1, "terminal errors are not retried");
    assert!(events_named(&ran, "stage.retrying").is_empty());

    let server = LlmServer::start(vec![Reply::status(200, "{not json")], vec![]);
    let ran = anthropic(&server, &one_prompt(", max_retries=3"))
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(1)
        .run();
    assert!(ran.stderr().contains("malformed JSON"), "{}", ran.stderr());
    assert_eq!(server.requests().len(), 1);

    let server = LlmServer::start(vec![Reply::json(json!({"id": "x", "usage": {}}))], vec![]);
    let ran =
        anthropic(&server, &one_prompt("")).args(["run", "workflow.dot", "--run-dir", "run"]).status(1).run();
    assert!(ran.stderr().contains("malformed message: it has no `content` array"), "{}", ran.stderr());
}

#[test]
fn a_slow_reply_times_out_as_retryable() {
    let server = LlmServer::start(vec![anthropic_text("late", 1, 1).delayed(Duration::from_secs(5))], vec![]);
    let started = Instant::now();
    let ran = anthropic(&server, &one_prompt(""))
        .env("FABRO_LLM_REQUEST_TIMEOUT", "500ms")
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(1)
        .run();
    assert!(started.elapsed() < Duration::from_secs(4), "{:?}", started.elapsed());
    assert!(ran.stderr().contains("timed out after 0.5s"), "{}", ran.stderr());
    assert!(!run_dir(&ran).join("stages/ask/1/response.md").exists(), "no partial response is recorded");
}

/// An OpenAI-compatible server by base URL, with the OpenAI tool-call format.
fn compatible(server: &LlmServer, workflow: &str) -> Test {
    Test::new()
        .workflow(workflow)
        .env("FABRO_LLM_BASE_URL", &server.url("/v1"))
        .env("FABRO_LLM_MAX_RETRIES", "0")
}

/// An OpenAI answer cut off at `max_tokens` (`finish_reason: "length"`).
fn openai_cut_off(text: &str) -> Reply {
    Reply::json(json!({
        "id": "chatcmpl-test", "object": "chat.completion", "model": "test-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "length"}],
        "usage": {"prompt_tokens": 10, "completion_tokens": 256}
    }))
}

#[test]
fn a_prompt_stage_whose_answer_was_cut_off_fails_unless_it_allows_it() {
    let workflow = |extra: &str| one_prompt(extra).replace("claude-sonnet-4-5", "qwen2.5-coder");
    let server = LlmServer::start(vec![openai_cut_off("1. First, open the fi")], vec![]);
    let ran = compatible(&server, &workflow(""))
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(1)
        .stderr_contains("the model's answer was cut off at its output limit")
        .stderr_contains("allow_truncated=true")
        .run();
    let status: Value = serde_json::from_str(&stage_file(&ran, "ask", "status.json")).unwrap();
    assert_eq!((&status["outcome"], &status["truncated"]), (&json!("fail"), &json!(true)));
    assert_eq!(stage_file(&ran, "ask", "response.md"), "1. First, open the fi");
    let truncated = events_named(&ran, "llm.truncated");
    assert_eq!(truncated.len(), 1);
    assert_eq!(truncated[0]["node_id"], "ask");
    assert_eq!(truncated[0]["stop_reason"], "length");
    assert!(truncated[0]["max_output_tokens"].as_u64().is_some_and(|n| n > 0), "{truncated:?}");
    assert!(truncated[0].get("turn").is_none());

    // allow_truncated=true takes it as it is, still flagged; Anthropic says `max_tokens`.
    let server = LlmServer::start(
        vec![Reply::json(json!({
            "id": "msg_test", "type": "message", "role": "assistant", "model": "claude-sonnet-4-5",
            "content": [{"type": "text", "text": "1. First, open the fi"}], "stop_reason": "max_tokens",
            "usage": {"input_tokens": 10, "output_tokens": 256}
        }))],
        vec![],
    );
    let ran = anthropic(&server, &one_prompt(", allow_truncated=true"))
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(0)
        .run();
    let status: Value = serde_json::from_str(&stage_file(&ran, "ask", "status.json")).unwrap();
    assert_eq!((&status["outcome"], &status["truncated"]), (&json!("success"), &json!(true)));
    assert_eq!(events_named(&ran, "llm.truncated")[0]["stop_reason"], "max_tokens");
}

#[test]
fn an_agent_turn_cut_off_is_reported_and_the_agent_goes_on() {
    let workflow = r#"digraph cut {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [shape=box, prompt="Summarise greet.txt", llm_model="qwen2.5-coder"]
        start -> work -> exit
    }"#;
    let server = LlmServer::start(
        vec![
            openai_tools(&[("c1", "read_file", json!({"path": "greet.txt"}))]),
            openai_cut_off("It says hel"),
        ],
        vec![],
    );
    let ran = compatible(&server, workflow)
        .file("work/greet.txt", "hello\n")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"])
        .status(0)
        .run();
    let truncated = events_named(&ran, "llm.truncated");
    assert_eq!(truncated.len(), 1);
    assert_eq!(truncated[0]["turn"], 2);
    let status: Value = serde_json::from_str(&stage_file(&ran, "work", "status.json")).unwrap();
    assert_eq!((&status["outcome"], &status["truncated"]), (&json!("success"), &json!(true)));
}

#[test]
fn read_file_past_the_end_says_how_many_lines_the_file_has() {
    let workflow = r#"digraph read {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [shape=box, prompt="Read the end of notes.txt", llm_model="qwen2.5-coder"]
        start -> work -> exit
    }"#;
    let server = LlmServer::start(
        vec![
            openai_tools(&[("c1", "read_file", json!({"path": "notes.txt", "offset": 40}))]),
            openai_text("It has three lines.", 10, 5),
        ],
        vec![],
    );
    compatible(&server, workflow)
        .file("work/notes.txt", "one\ntwo\nthree\n")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"])
        .status(0)
        .run();
    let second = server.requests()[1].json();
    let result = second["messages"].as_array().unwrap().iter().find(|m| m["role"] == "tool").unwrap().clone();
    let content = result["content"].as_str().unwrap();
    assert!(content.contains("`notes.txt` has 3 lines; offset=40 is past its end"), "{content}");
}

#[test]
fn a_base_url_without_v1_gets_a_hint_when_the_server_answers_404() {
    // A llama.cpp-like server: the API is under /v1, anything else answers 404.
    let options = ServerOptions { mount: Some("/v1".into()), ..ServerOptions::default() };
    let server = LlmServer::start_with(vec![openai_text("never sent", 1, 1)], vec![], options);
    let base = server.url("");
    let ran = Test::new()
        .workflow(&one_prompt("").replace("claude-sonnet-4-5", "qwen2.5-coder"))
        .env("FABRO_LLM_BASE_URL", &base)
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(1)
        .stderr_contains(&format!("{base}/chat/completions answered HTTP 404: File Not Found"))
        .stderr_contains(&format!("the base URL probably needs `/v1` at its end ({base}/v1)"))
        .run();
    assert_eq!(server.requests().len(), 1, "a 404 is not retried");
    // The check before the run got a 404 too: the server is there, so the run started. With no
    // window in a model list, llama.cpp's /props was asked for one.
    assert_eq!(server.probes(), ["/models", "/props"]);
    assert!(events_named(&ran, "llm.retry").is_empty());
}

#[test]
fn an_openai_compatible_server_runs_agent_stages_and_large_results_are_offloaded() {
    let big: String = (0..1500).map(|i| format!("line {i:04} {}\n", "x".repeat(40))).collect();
    let workflow = r#"digraph local {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        scan [shape=box, prompt="Find line 1234 in big.log", llm_model="qwen2.5-coder"]
        start -> scan -> exit
    }"#;
    let server = LlmServer::start(
        vec![
            openai_tools(&[("c1", "read_file", json!({"path": "big.log"}))]),
            // The model pages the offloaded result; its path is filled in below from the stub.
            openai_tools(&[("c2", "grep", json!({"pattern": "line 1234", "path": "big.log"}))]),
            openai_text("Line 1234 is there.", 10, 5),
        ],
        vec![],
    );
    let ran = compatible(&server, workflow)
        .file("work/big.log", &big)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"])
        .status(0)
        .run();
    let requests = server.requests();
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].header("authorization"), None, "no key configured, none sent");
    let body = requests[0].json();
    assert_eq!(body["model"], "qwen2.5-coder");
    assert_eq!(body["tools"][0]["type"], "function");
    assert!(body.get("max_tokens").is_some());
    let second = requests[1].json();
    let messages = second["messages"].as_array().unwrap();
    assert_eq!(messages[2]["tool_calls"][0]["function"]["name"], "read_file");
    let stub = messages[3]["content"].as_str().unwrap();
    assert_eq!(messages[3]["role"], "tool");
    assert!(stub.contains("too long to show here") && stub.contains("read_file"), "{stub}");
    let offloaded = events_named(&ran, "agent.tool_result.offloaded");
    assert_eq!(offloaded.len(), 1);
    let path = PathBuf::from(offloaded[0]["path"].as_str().unwrap());
    assert!(path.starts_with(std::fs::canonicalize(run_dir(&ran)).unwrap().join("artifacts/tool_output")));
    assert!(stub.contains(path.to_str().unwrap()));
    assert!(read(&path).contains("line 1234"));
    let grep = messages.len();
    assert_eq!(grep, 4);
    let third = requests[2].json();
    assert_eq!(
        third["messages"][5]["content"],
        "big.log:1235:line 1234 xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"
    );
}

#[test]
fn compaction_replaces_old_turns_when_the_context_window_is_small() {
    // Eight tool turns, each reading a 1 KB file, then a final answer. The window (3,200 tokens,
    // of which the system prompt and the tool definitions take almost half) is so small that the
    // sixth turn passes 80%; compaction keeps 6 turns, so it starts after the seventh tool turn
    // and again after the eighth, and every request stays within the window.
    let chunk: String = (0..10).map(|i| format!("{i} {}\n", "y".repeat(96))).collect();
    let workflow = r#"digraph compact {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [shape=box, prompt="Read notes.txt seven times", llm_model="local-model", fidelity="full",
              context_window=3200, max_turns=20]
        start -> work -> exit
    }"#;
    let mut replies: Vec<Reply> = (0..8)
        .map(|i| {
            openai_tools(&[(
                format!("c{i}").as_str(),
                "read_file",
                json!({"path": "notes.txt", "offset": 1 + (i % 3)}),
            )])
        })
        .collect();
    replies.push(openai_text("Read it all.", 10, 5));
    let summary = "## Goal\nRead notes.txt\n## Progress\nRead it\n## Key Decisions\nNone\n## Failed Approaches\nNone\n## Open Issues\nNone\n## Next Steps\nFinish";
    let server = LlmServer::start(replies, vec![openai_text(summary, 100, 50); 4]);
    let ran = compatible(&server, workflow)
        .env("FABRO_LLM_MODEL", "local-model")
        .file("work/notes.txt", &chunk)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"])
        .status(0)
        .run();
    let warnings = events_named(&ran, "agent.context_window_warning");
    assert!(!warnings.is_empty());
    assert_eq!(warnings[0]["context_window_size"], 3200);
    assert!(warnings[0]["usage_percent"].as_u64().unwrap() > 80);
    let started = events_named(&ran, "agent.compaction.started");
    let completed = events_named(&ran, "agent.compaction.completed");
    assert!(!completed.is_empty() && started.len() == completed.len(), "{started:?} {completed:?}");
    assert_eq!(completed[0]["preserved_turn_count"], 6);
    assert_eq!(completed[0]["original_turn_count"], 7);
    assert_eq!(completed[0]["tracked_file_count"], 1);
    // The summarizer got the old turns with results cut to 500 characters.
    let asked: Vec<String> = server
        .requests()
        .into_iter()
        .filter(|r| r.body.contains("You summarize the history"))
        .map(|r| r.json()["messages"][1]["content"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(asked.len(), completed.len());
    assert!(asked[0].contains("USER:\nRead notes.txt seven times"), "{}", asked[0]);
    // The second compaction summarizes the first summary and the second turn's 1 KB result, cut
    // to 500 characters.
    assert!(asked[1].contains("TOOL RESULT read_file: ") && asked[1].contains(" […]"), "{}", asked[1]);
    assert!(!asked[1].contains(&"y".repeat(96 * 5)));
    // The next call sends the stage's prompt, then the summary (File Operations from the
    // tracker), then the recent turns verbatim.
    let main = server.main_requests();
    let after = main
        .iter()
        .map(|r| r.json())
        .find(|b| b["messages"][2]["content"].as_str().is_some_and(|c| c.contains("## File Operations")))
        .expect("a request after compaction");
    assert!(after["messages"][1]["content"].as_str().unwrap().contains("Read notes.txt seven times"));
    let summary_message = after["messages"][2]["content"].as_str().unwrap();
    assert!(
        summary_message.contains("## Goal\nRead notes.txt") && summary_message.contains("- notes.txt (read)")
    );
    assert_eq!(after["messages"].as_array().unwrap().len(), 3 + 2 * 6);
    assert!(asked[1].contains("USER:\n[Summary of the earlier part"), "{}", asked[1]);
    assert_eq!(stage_file(&ran, "work", "response.md"), "Read it all.");

    // The context-usage chart: one point per model call of the stage (the summaries are not
    // the stage's calls), a dashed marker per compaction, and the summary names the file.
    let chart = read(&run_dir(&ran).join("context-usage.svg"));
    assert_eq!(chart.matches("<circle").count(), main.len(), "{chart}");
    assert_eq!(chart.matches("class=\"compaction\"").count(), completed.len(), "{chart}");
    assert!(chart.contains("stroke-dasharray") && chart.contains("<title>work call 1: "), "{chart}");
    assert!(ran.stderr().contains("context usage: run/context-usage.svg"), "{}", ran.stderr());
}

#[test]
fn a_failed_summary_leaves_a_marker_and_the_stage_goes_on_from_the_kept_turns() {
    let workflow = r#"digraph compact {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [shape=box, prompt="Go", llm_model="local-model", compaction_trigger_turns=7]
        start -> work -> exit
    }"#;
    let mut replies: Vec<Reply> =
        (0..7).map(|i| openai_tools(&[(format!("c{i}").as_str(), "list_dir", json!({}))])).collect();
    replies.push(openai_text("ok", 1, 1));
    let server = LlmServer::start(replies, vec![openai_text("", 1, 1)]);
    let ran = compatible(&server, workflow)
        .file("work/a.txt", "a")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"])
        .status(0)
        .run();
    let failed = events_named(&ran, "agent.compaction.failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["error"], "the summary came back empty");
    assert_eq!(failed[0]["fallback"], "compaction_failed_marker");
    // The compacted turn is gone; the model is told so and sent to the files on disk.
    let last = server.main_requests().last().unwrap().json();
    let marker = last["messages"][2]["content"].as_str().unwrap();
    assert!(
        marker.starts_with("[COMPACTION FAILED] Turns 1-1 of this stage could not be summarized"),
        "{marker}"
    );
    assert!(marker.contains("read the files on disk"));
    assert_eq!(last["messages"].as_array().unwrap().len(), 3 + 2 * 6);
    // The 5 identical list_dir calls in a row were noticed once.
    assert_eq!(events_named(&ran, "agent.watchdog").len(), 1);
}

#[test]
fn a_full_fidelity_thread_carries_across_two_stages_with_openai() {
    let workflow = r#"digraph thread {
        graph [default_fidelity="full"]
        start [shape=Mdiamond]
        exit [shape=Msquare]
        plan [shape=tab, prompt="Plan the change", llm_model="gpt-5.2", thread_id="main", reasoning_effort="high"]
        apply [shape=tab, prompt="Now refine the plan", llm_model="gpt-5.2", thread_id="main"]
        start -> plan -> apply -> exit
    }"#;
    let server =
        LlmServer::start(vec![openai_text("Plan: A then B.", 10, 5), openai_text("Refined.", 20, 5)], vec![]);
    let ran = Test::new()
        .workflow(workflow)
        .env("OPENAI_API_KEY", OPENAI_KEY)
        .env("OPENAI_BASE_URL", &server.url("/v1"))
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(0)
        .run();
    let requests = server.requests();
    assert_eq!(requests[0].header("authorization"), Some(format!("Bearer {OPENAI_KEY}").as_str()));
    let first = requests[0].json();
    assert_eq!(first["reasoning_effort"], "high");
    assert!(first.get("max_completion_tokens").is_some());
    let second = requests[1].json();
    let roles: Vec<&str> =
        second["messages"].as_array().unwrap().iter().map(|m| m["role"].as_str().unwrap()).collect();
    assert_eq!(roles, ["user", "assistant", "user"]);
    assert_eq!(second["messages"][0]["content"], "Plan the change");
    assert_eq!(second["messages"][1]["content"], "Plan: A then B.");
    assert_eq!(second["messages"][2]["content"], "Now refine the plan");
    assert_eq!(files_containing(&run_dir(&ran), OPENAI_KEY), Vec::<PathBuf>::new());
}

#[test]
fn model_and_provider_flags_reroute_every_stage() {
    let server = LlmServer::start(vec![openai_text("local answer", 1, 1)], vec![]);
    compatible(&server, &one_prompt(""))
        .args(["run", "workflow.dot", "--run-dir", "run", "--model", "llama3.1:8b"])
        .status(0)
        .run();
    assert_eq!(server.requests()[0].json()["model"], "llama3.1:8b");
}

#[test]
fn a_stage_whose_provider_is_not_configured_exits_2_before_starting() {
    let ran = Test::new()
        .workflow(&one_prompt(""))
        .env("OPENAI_API_KEY", OPENAI_KEY)
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(2)
        .run();
    let stderr = ran.stderr();
    assert!(
        stderr.contains("stage `ask` uses provider `anthropic`") && stderr.contains("ANTHROPIC_API_KEY"),
        "{stderr}"
    );
    assert!(!run_dir(&ran).exists());
}

#[test]
fn a_config_file_configures_providers_and_prices() {
    let server = LlmServer::start(vec![openai_text("from the file", 1_000_000, 0)], vec![]);
    let config = format!(
        "default_model = \"house-model\"\n[providers.house]\nbase_url = \"{}\"\napi_key_env = \"HOUSE_KEY\"\nmodels = [\"house-model\"]\n\
         [models.\"house-model\"]\ninput_per_mtok = 2.5\noutput_per_mtok = 0.0\n",
        server.url("/v1")
    );
    let workflow = r#"digraph c { start [shape=Mdiamond] exit [shape=Msquare] ask [shape=tab, prompt="Hi"] start -> ask -> exit }"#;
    let ran = Test::new()
        .workflow(workflow)
        .file("fabro.toml", &config)
        .env("FABRO_CONFIG", "fabro.toml")
        .env("HOUSE_KEY", "house-secret-key-123")
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(0)
        .run();
    assert_eq!(server.requests()[0].header("authorization"), Some("Bearer house-secret-key-123"));
    let status: Value = serde_json::from_str(&stage_file(&ran, "ask", "status.json")).unwrap();
    assert_eq!(status["cost_usd"], 2.5);
    // fabro inspect shows the cost, per stage and in total.
    let inspected = common::fabro_in(ran.dir.path(), &["inspect", "run"]);
    let shown = String::from_utf8_lossy(&inspected.stdout).into_owned();
    let row = |name: &str| {
        shown.lines().find(|line| line.starts_with(&format!("{name} "))).unwrap_or_default().to_string()
    };
    assert!(row("ask").ends_with("$2.5000"), "{shown}");
    assert!(row("total").ends_with("$2.5000"), "{shown}");
    assert!(row("start").ends_with(" -"), "{shown}");
    assert!(!shown.contains("n/a"), "{shown}");

    let ran = Test::new()
        .workflow(workflow)
        .file("fabro.toml", "[providers.x]\nurl = 1\n")
        .env("FABRO_CONFIG", "fabro.toml")
        .args(["run", "workflow.dot"])
        .status(2)
        .run();
    assert!(
        ran.stderr().contains("fabro.toml:2:1: unknown key `url`; the keys here are `kind`, `base_url`"),
        "{}",
        ran.stderr()
    );
}

#[test]
fn a_long_shell_result_is_offloaded_whole_and_its_middle_is_kept() {
    let command = "head -c 30000 /dev/zero | tr '\\0' a; echo; echo MIDDLE-MARKER; head -c 30000 /dev/zero | tr '\\0' b";
    let server = LlmServer::start(
        vec![
            anthropic_tools("Running it.", &[("t1", "shell", json!({"command": command}))]),
            anthropic_text("Done.", 100, 10),
        ],
        vec![],
    );
    let workflow = r#"digraph long { start [shape=Mdiamond] exit [shape=Msquare]
        run [shape=box, prompt="Run it", llm_model="claude-sonnet-4-5"] start -> run -> exit }"#;
    let ran = anthropic(&server, workflow).args(["run", "workflow.dot", "--run-dir", "run"]).status(0).run();
    let result =
        server.requests()[1].json()["messages"][2]["content"][0]["content"].as_str().unwrap().to_string();
    assert!(result.contains("too long to show here. It is stored at"), "{result}");
    let stored =
        result.split("It is stored at ").nth(1).unwrap().split(". Read parts").next().unwrap().to_string();
    let whole = read(Path::new(&stored));
    assert!(whole.contains("MIDDLE-MARKER") && whole.len() > 60_000, "{}", whole.len());
    assert!(
        stored.starts_with(run_dir(&ran).to_str().unwrap()) || stored.contains("/artifacts/"),
        "{stored}"
    );
}

#[test]
fn tool_hooks_run_around_every_agent_tool_call_and_a_failing_pre_hook_skips_it() {
    let server = LlmServer::start(
        vec![
            anthropic_tools("Reading.", &[("t1", "read_file", json!({"path": "notes.txt"}))]),
            anthropic_tools("Cleaning.", &[("t2", "shell", json!({"command": "rm notes.txt"}))]),
            anthropic_tools("Listing.", &[("t3", "shell", json!({"command": "echo listed"}))]),
            anthropic_text("Done.", 100, 10),
        ],
        vec![],
    );
    // The pre hook refuses shell calls that remove files; the post hook logs every call it sees.
    let workflow = r#"digraph hooks {
    tool_hooks.post="cat >> ../post.log; echo >> ../post.log"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    tidy [shape=box, prompt="Tidy up", llm_model="claude-sonnet-4-5",
          tool_hooks.pre="if grep -q '\"rm ' ; then echo 'no deleting files' >&2; exit 3; fi; echo \"$FABRO_TOOL_NAME\" >> ../pre.log"]
    start -> tidy -> exit
}
"#;
    let ran = anthropic(&server, workflow)
        .file("work/notes.txt", "keep me\n")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"])
        .status(0)
        .run();
    let root = ran.dir.path();
    assert_eq!(read(&root.join("work/notes.txt")), "keep me\n", "the refused rm never ran");
    assert_eq!(read(&root.join("pre.log")), "read_file\nshell\n");
    let requests = server.requests();
    let refused = requests[2].json()["messages"][4]["content"][0].clone();
    assert_eq!(refused["is_error"], true, "{refused}");
    let text = refused["content"].as_str().unwrap();
    assert!(
        text.contains("The hook `tool_hooks.pre` blocked this `shell` call; it did not run. Reason: the hook exited with code 3: no deleting files"),
        "{text}"
    );
    // The post hook saw the two calls that ran, with their results, on stdin.
    let post: Vec<Value> =
        read(&root.join("post.log")).lines().map(|line| serde_json::from_str(line).unwrap()).collect();
    assert_eq!(post.len(), 2, "{post:?}");
    assert_eq!(post[0]["tool_name"], "read_file");
    assert_eq!(post[0]["event"], "post_tool_use");
    assert!(post[0]["tool_output"].as_str().unwrap().contains("keep me"));
    assert_eq!(post[1]["tool_input"]["command"], "echo listed");
    // Both hooks are in the transcript.
    let transcript = stage_file(&ran, "tidy", "transcript.jsonl");
    let hooks = transcript.lines().filter(|line| line.contains("\"tool_hook\"")).count();
    assert_eq!(hooks, 5, "three pre hooks, two post hooks: {transcript}");
}

#[test]
fn reasoning_effort_becomes_anthropic_thinking_and_the_signed_thinking_goes_back_in_the_tool_loop() {
    let thinking = json!({"type": "thinking", "thinking": "The file is greet.txt.", "signature": "sig-abc"});
    let mut first = anthropic_tools("", &[("t1", "read_file", json!({"path": "greet.txt"}))]);
    let mut answer: Value = serde_json::from_str(&first.body).unwrap();
    answer["content"][0] = thinking.clone();
    first.body = answer.to_string();
    let workflow = r#"digraph think {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        fix [shape=box, prompt="Read greet.txt", llm_model="claude-sonnet-4-5", reasoning_effort="high"]
        old [shape=tab, prompt="Say hi", llm_model="claude-3-5-haiku-latest", reasoning_effort="low"]
        start -> fix -> old -> exit
    }"#;
    let server =
        LlmServer::start(vec![first, anthropic_text("Read it.", 10, 5), anthropic_text("hi", 5, 1)], vec![]);
    let ran = anthropic(&server, workflow)
        .file("work/greet.txt", "hello\n")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"])
        .status(0)
        .run();
    let requests = server.requests();
    let body = requests[0].json();
    assert_eq!(body["thinking"], json!({"type": "enabled", "budget_tokens": 16384}));
    let max_tokens = body["max_tokens"].as_u64().unwrap();
    assert!(max_tokens > 16384, "the budget comes on top of the answer: {max_tokens}");
    // The second call returns the thinking block first in the assistant turn, unchanged.
    let second = requests[1].json();
    let assistant = &second["messages"][1];
    assert_eq!(assistant["role"], "assistant");
    assert_eq!(assistant["content"][0], thinking);
    assert_eq!(assistant["content"][1]["type"], "tool_use");
    let recorded = transcript(&ran, "fix");
    let turn = recorded.iter().find(|e| e["type"] == "assistant").unwrap();
    assert_eq!(turn["thinking"], "The file is greet.txt.");
    // Claude 3.5 models have no extended thinking: nothing is sent, and the event says so.
    let old = requests[2].json();
    assert!(old.get("thinking").is_none(), "{old}");
    let ignored = events_named(&ran, "llm.reasoning_effort_ignored");
    assert_eq!(ignored.len(), 1, "{ignored:?}");
    assert_eq!(ignored[0]["node_id"], "old");
    assert_eq!(ignored[0]["model"], "claude-3-5-haiku-latest");
}

#[test]
fn reasoning_effort_reaches_openai_compatible_servers_only_when_configured() {
    let workflow = r#"digraph r { start [shape=Mdiamond] exit [shape=Msquare]
        ask [shape=tab, prompt="Hi", llm_model="qwen3-32b", reasoning_effort="medium"] start -> ask -> exit }"#;
    let server = LlmServer::start(vec![openai_text("plain", 1, 1)], vec![]);
    let ran = compatible(&server, workflow).args(["run", "workflow.dot", "--run-dir", "run"]).status(0).run();
    assert!(server.requests()[0].json().get("reasoning_effort").is_none());
    assert_eq!(events_named(&ran, "llm.reasoning_effort_ignored")[0]["provider"], "openai_compatible");

    let server = LlmServer::start(vec![openai_text("reasoned", 1, 1)], vec![]);
    let config = format!(
        "[providers.local]\nbase_url = \"{}\"\nmodels = [\"qwen3-32b\"]\nreasoning_effort = true\n",
        server.url("/v1")
    );
    let ran = Test::new()
        .workflow(workflow)
        .file("fabro.toml", &config)
        .env("FABRO_CONFIG", "fabro.toml")
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(0)
        .run();
    assert_eq!(server.requests()[0].json()["reasoning_effort"], "medium");
    assert!(events_named(&ran, "llm.reasoning_effort_ignored").is_empty());
}

/// An agent stage (offered tools) and a prompt stage (offered none) on the provider `local`,
/// whose config entry has `settings`: the two requests the fake server received.
fn agent_then_prompt(settings: &str) -> Vec<Value> {
    let workflow = r#"digraph t { start [shape=Mdiamond] exit [shape=Msquare]
        work [shape=box, prompt="Tidy up", llm_model="qwen3-32b"]
        say [shape=tab, prompt="Say what you did", llm_model="qwen3-32b"]
        start -> work -> say -> exit }"#;
    let server = LlmServer::start(vec![openai_text("tidy", 1, 1), openai_text("I tidied", 1, 1)], vec![]);
    let config = format!(
        "[providers.local]\nbase_url = \"{}\"\nmodels = [\"qwen3-32b\"]\n{settings}\n",
        server.url("/v1")
    );
    Test::new()
        .workflow(workflow)
        .file("fabro.toml", &config)
        .env("FABRO_CONFIG", "fabro.toml")
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(0)
        .run();
    server.requests().iter().map(|request| request.json()).collect()
}

#[test]
fn tool_choice_goes_with_the_tools_as_the_provider_s_entry_says() {
    for (settings, sent) in [
        ("", Some("auto")),
        ("tool_choice = \"required\"", Some("required")),
        ("tool_choice = \"omit\"", None),
    ] {
        let [agent, prompt] = <[Value; 2]>::try_from(agent_then_prompt(settings)).expect("two requests");
        assert!(agent["tools"].as_array().is_some_and(|tools| !tools.is_empty()), "{settings}");
        assert_eq!(agent["tool_choice"].as_str(), sent, "{settings}");
        assert!(prompt.get("tools").is_none() && prompt.get("tool_choice").is_none(), "{settings}: {prompt}");
        // Sampling is the server's own unless the entry says.
        assert!(agent.get("temperature").is_none() && agent.get("seed").is_none(), "{settings}");
    }
    let ran = Test::new()
        .workflow(r#"digraph t { start [shape=Mdiamond] exit [shape=Msquare] start -> exit }"#)
        .file(
            "fabro.toml",
            "[providers.local]\nbase_url = \"http://127.0.0.1:9/v1\"\ntool_choice = \"always\"\n",
        )
        .env("FABRO_CONFIG", "fabro.toml")
        .args(["run", "workflow.dot"])
        .status(2)
        .run();
    assert!(ran.stderr().contains("expected one of `auto`, `required`, `omit`"), "{}", ran.stderr());
}

#[test]
fn temperature_and_seed_go_with_every_request_when_the_provider_s_entry_sets_them() {
    for request in agent_then_prompt("temperature = 0.0\nseed = 7") {
        assert_eq!(
            (request["temperature"].as_f64(), request["seed"].as_u64()),
            (Some(0.0), Some(7)),
            "{request}"
        );
    }
}

const FAILOVER: &str = r#"digraph failover {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    fix [shape=box, prompt="Read greet.txt and report", llm_model="gpt-5.2", fallback_models="claude-sonnet-4-5"]
    start -> fix -> exit
}"#;

/// A test with both providers at `server`, without in-place retries.
fn both_providers(server: &LlmServer, workflow: &str) -> Test {
    Test::new()
        .workflow(workflow)
        .file("work/greet.txt", "hello world\n")
        .env("OPENAI_API_KEY", OPENAI_KEY)
        .env("OPENAI_BASE_URL", &server.url("/v1"))
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", &server.url(""))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"])
}

#[test]
fn a_stage_fails_over_to_its_next_model_keeping_the_conversation() {
    let server = LlmServer::start(
        vec![
            openai_tools(&[("c1", "read_file", json!({"path": "greet.txt"}))]),
            Reply::status(500, r#"{"error": {"message": "the server is overloaded"}}"#),
            anthropic_text("greet.txt says hello world.", 300, 20),
        ],
        vec![],
    );
    let ran = both_providers(&server, FAILOVER).status(0).run();
    let requests = server.requests();
    assert_eq!(requests.len(), 3);
    assert!(requests[1].path.ends_with("/chat/completions"), "{}", requests[1].path);
    assert!(requests[2].path.ends_with("/v1/messages"), "{}", requests[2].path);
    // The fallback model continues the same conversation: the tool result of the first model's call.
    let continued = requests[2].json();
    assert_eq!(continued["model"], "claude-sonnet-4-5");
    assert!(continued["messages"].to_string().contains("hello world"), "{continued}");
    let failovers = events_named(&ran, "llm.failover");
    assert_eq!(failovers.len(), 1);
    assert_eq!(failovers[0]["from_model"], "gpt-5.2");
    assert_eq!(failovers[0]["from_provider"], "openai");
    assert_eq!(failovers[0]["to_model"], "claude-sonnet-4-5");
    assert_eq!(failovers[0]["to_provider"], "anthropic");
    assert!(failovers[0]["reason"].as_str().unwrap().contains("500"), "{}", failovers[0]);
    // Usage and cost per model: each share at its own model's price.
    let status: Value = serde_json::from_str(&stage_file(&ran, "fix", "status.json")).unwrap();
    let by_model = &status["usage_by_model"];
    assert_eq!(by_model["claude-sonnet-4-5"]["input_tokens"], 300);
    assert!(by_model["gpt-5.2"]["input_tokens"].as_u64().unwrap() > 0, "{status}");
    let shares: f64 =
        ["gpt-5.2", "claude-sonnet-4-5"].iter().map(|m| by_model[m]["cost_usd"].as_f64().unwrap()).sum();
    assert!((status["cost_usd"].as_f64().unwrap() - shares).abs() < 1e-9, "{status}");
}

#[test]
fn authentication_errors_do_not_fail_over_and_unconfigured_fallbacks_are_refused() {
    let server = LlmServer::start(vec![Reply::status(401, r#"{"error": {"message": "bad key"}}"#)], vec![]);
    let ran = both_providers(&server, FAILOVER).status(1).run();
    assert_eq!(server.requests().len(), 1);
    assert!(events_named(&ran, "llm.failover").is_empty());

    // A fallback whose provider has no key stops the run before any call.
    let server = LlmServer::start(vec![], vec![]);
    Test::new()
        .workflow(FAILOVER)
        .env("OPENAI_API_KEY", OPENAI_KEY)
        .env("OPENAI_BASE_URL", &server.url("/v1"))
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(2)
        .stderr_contains("`claude-sonnet-4-5` in fallback_models: stage `fix` uses provider `anthropic`")
        .run();
    assert!(server.requests().is_empty());
}

/// An agent stage whose model keeps calling tools, with `max_turns=2` and `{attributes}`; the
/// `fail` edge leads to `cleanup`, so a failed stage is routable.
fn turn_limited(attributes: &str) -> String {
    format!(
        r#"digraph limited {{
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [shape=box, prompt="List the files", llm_model="local-model", max_turns=2{attributes}]
        cleanup [shape=parallelogram, script="echo cleaning"]
        start -> work
        work -> exit [condition="outcome=success"]
        work -> exit [condition="outcome=partial_success"]
        work -> cleanup [condition="outcome=fail"]
        cleanup -> exit
    }}"#
    )
}

fn still_calling_tools() -> LlmServer {
    let replies =
        (0..4).map(|i| openai_tools(&[(format!("c{i}").as_str(), "list_dir", json!({}))])).collect();
    LlmServer::start(replies, vec![])
}

fn work_status(ran: &Ran) -> Value {
    serde_json::from_str(&stage_file(ran, "work", "status.json")).unwrap()
}

#[test]
fn an_agent_stopped_by_max_turns_fails_the_stage_naming_it_and_the_fail_edge_routes_it() {
    let server = still_calling_tools();
    let ran = compatible(&server, &turn_limited(""))
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "."])
        .status(0)
        .run();
    assert_eq!(server.main_requests().len(), 2);
    let status = work_status(&ran);
    assert_eq!(status["outcome"], "fail", "{status}");
    let reason = status["failure_reason"].as_str().unwrap();
    assert!(reason.contains("max_turns=2") && reason.contains("turn_limit_outcome"), "{reason}");
    assert_eq!(events_named(&ran, "agent.turn_limit").len(), 1);
    assert!(run_dir(&ran).join("stages/cleanup/1").exists(), "the fail edge was taken");

    // Without a route for the failure, the run fails: unfinished work never passes CI silently.
    let server = still_calling_tools();
    let workflow = r#"digraph limited {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [shape=box, prompt="List the files", llm_model="local-model", max_turns=2]
        start -> work -> exit
    }"#;
    compatible(&server, workflow)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "."])
        .status(1)
        .stderr_contains("max_turns=2")
        .run();
}

#[test]
fn turn_limit_outcome_accepts_unfinished_work_from_the_node_the_graph_or_the_config_file() {
    for (attributes, graph, config, expected) in [
        (r#", turn_limit_outcome="partial_success""#, "", "", "partial_success"),
        ("", "success", "", "success"),
        ("", "", "turn_limit_outcome = \"partial_success\"\n", "partial_success"),
        (r#", turn_limit_outcome="fail""#, "", "turn_limit_outcome = \"success\"\n", "fail"),
    ] {
        let server = still_calling_tools();
        let mut workflow = turn_limited(attributes);
        if !graph.is_empty() {
            workflow = workflow.replacen('{', &format!("{{\n default_turn_limit_outcome=\"{graph}\""), 1);
        }
        let ran = compatible(&server, &workflow)
            .file("fabro-config.toml", config)
            .env("FABRO_CONFIG", "fabro-config.toml")
            .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "."])
            .status(0)
            .run();
        let status = work_status(&ran);
        assert_eq!(status["outcome"], expected, "{attributes} {graph} {config}: {status}");
        let cleaned = run_dir(&ran).join("stages/cleanup/1").exists();
        assert_eq!(cleaned, expected == "fail", "{attributes} {graph} {config}");
        if expected != "fail" {
            assert!(status["notes"].as_str().unwrap().contains("stopped by max_turns=2"), "{status}");
        }
    }
}

/// A prompt stage naming no model.
const MODELLESS_PROMPT: &str = r#"digraph one {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    ask [shape=tab, prompt="Answer"]
    start -> ask -> exit
}"#;

fn model_list(ids: &[&str]) -> Option<Value> {
    Some(
        json!({"object": "list", "data": ids.iter().map(|id| json!({"id": id, "object": "model"})).collect::<Vec<_>>()}),
    )
}

#[test]
fn a_local_server_named_only_by_its_url_lends_its_one_model_to_stages_naming_none() {
    let options = ServerOptions { models: model_list(&["smollm2-135m"]), ..ServerOptions::default() };
    let server = LlmServer::start_with(vec![openai_text("42", 5, 1)], vec![], options);
    compatible(&server, MODELLESS_PROMPT).args(["run", "workflow.dot", "-q"]).status(0).run();
    let asked = server.main_requests();
    assert_eq!(asked.len(), 1);
    assert_eq!(asked[0].json()["model"], "smollm2-135m");

    // Several models: the error names them and how to choose.
    let options = ServerOptions { models: model_list(&["qwen", "llama"]), ..ServerOptions::default() };
    let server = LlmServer::start_with(vec![], vec![], options);
    compatible(&server, MODELLESS_PROMPT)
        .args(["run", "workflow.dot"])
        .status(2)
        .stderr_contains(&format!(
            "provider `openai_compatible` has no model named, and {} lists 2: qwen, llama; name one with \
             --model, FABRO_LLM_MODEL or llm_model on the stage; the run did not start",
            server.url("/v1/models")
        ))
        .run();
    assert!(server.requests().is_empty());

    // A named model needs no list.
    let server = LlmServer::start(vec![openai_text("42", 5, 1)], vec![]);
    compatible(&server, MODELLESS_PROMPT)
        .args(["run", "workflow.dot", "-q", "--model", "local"])
        .status(0)
        .run();
    assert_eq!(server.main_requests()[0].json()["model"], "local");
}

#[test]
fn simulated_and_dry_runs_refuse_a_stage_naming_a_provider_fabro_does_not_know() {
    let workflow =
        MODELLESS_PROMPT.replace("prompt=\"Answer\"", "prompt=\"Answer\", llm_provider=\"anthropc\"");
    for mode in ["--simulate", "--dry-run"] {
        Test::new()
            .workflow(&workflow)
            .args(["run", "workflow.dot", mode])
            .status(2)
            .stderr_contains(
                "stage `ask` uses provider `anthropc`, which fabro does not know (known: anthropic, openai, gemini, \
                 openai_compatible)",
            )
            .run();
    }
    // A built-in provider needs no key to be simulated.
    Test::new()
        .workflow(
            &MODELLESS_PROMPT.replace("prompt=\"Answer\"", "prompt=\"Answer\", llm_provider=\"anthropic\""),
        )
        .args(["run", "workflow.dot", "--simulate", "-q"])
        .status(0)
        .run();
}
