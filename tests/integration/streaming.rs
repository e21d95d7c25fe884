//! Streamed answers, through the binary against the loopback server (which answers a request
//! asking for a stream with server-sent events): what the requests ask for, the answers put back
//! together, `answer.log` growing while the model writes, a stage timeout closing the stream, a
//! server that cannot stream, and one that leaves out the token counts.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use common::llm_server::{anthropic_text, openai_text, openai_tools, LlmServer, Reply, ServerOptions};
use common::{fabro_command, Ran, Test};
use serde_json::{json, Value};

fn stage_file(ran: &Ran, node: &str, file: &str) -> String {
    let path = ran.dir.path().join("run/stages").join(node).join("1").join(file);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}\n{}", path.display(), ran.stderr()))
}

fn status_json(ran: &Ran, node: &str) -> Value {
    serde_json::from_str(&stage_file(ran, node, "status.json")).unwrap()
}

fn events_named(dir: &Path, name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.join("events.jsonl")).unwrap_or_default();
    text.lines()
        .filter_map(|line| serde_json::from_str::<Value>(line).ok())
        .filter(|e| e["event"] == name)
        .collect()
}

/// A loopback OpenAI-compatible server answering `replies`, whose model list states the window
/// of `local-model` (calls are streamed to a model whose window is known).
fn server_of(replies: Vec<Reply>) -> LlmServer {
    let models = json!({"object": "list", "data": [{"id": "local-model", "max_model_len": 32768}]});
    LlmServer::start_with(
        replies,
        Vec::new(),
        ServerOptions { models: Some(models), ..ServerOptions::default() },
    )
}

/// A test against the OpenAI-compatible server at `server`.
fn compatible(server: &LlmServer, workflow: &str) -> Test {
    Test::new()
        .workflow(workflow)
        .env("FABRO_LLM_BASE_URL", &server.url("/v1"))
        .env("FABRO_LLM_MAX_RETRIES", "0")
}

const WRITE_THEN_REPORT: &str = r#"digraph write {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    write [shape=box, prompt="Write a.txt", llm_model="local-model"]
    report [shape=tab, prompt="Say what you did", llm_model="local-model"]
    start -> write -> report -> exit
}"#;

/// One prompt stage `ask` on `local-model`.
const ONE_PROMPT: &str = r#"digraph one {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    ask [shape=tab, prompt="Answer", llm_model="local-model"]
    start -> ask -> exit
}"#;

/// A long answer of numbered lines, and a reply that streams it `pace` apart per 12 characters.
fn long_answer(lines: usize) -> String {
    (1..=lines).map(|n| format!("line {n:03} of the answer\n")).collect()
}

#[test]
fn answers_are_streamed_put_back_together_and_written_to_answer_log_as_they_come() {
    let server = server_of(vec![
        openai_tools(&[("c1", "write_file", json!({"path": "a.txt", "content": "hello"}))]),
        openai_text("I wrote a.txt.", 30, 5),
        openai_text("The file a.txt now says hello.", 40, 8),
    ]);
    let ran = compatible(&server, WRITE_THEN_REPORT)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "."])
        .status(0)
        .run();
    for request in server.requests() {
        let body = request.json();
        assert_eq!(body["stream"], true, "{body}");
        assert_eq!(body["stream_options"]["include_usage"], true, "{body}");
    }
    let streams = server.streams();
    assert_eq!(streams.len(), 3);
    assert!(streams.iter().all(|end| !end.cut_off && end.events == end.of), "{streams:?}");
    // The tool call came in pieces and was put back together: the file is written.
    assert_eq!(std::fs::read_to_string(ran.dir.path().join("a.txt")).unwrap(), "hello");
    assert_eq!(stage_file(&ran, "write", "answer.log"), "[calls write_file]\n\nI wrote a.txt.");
    assert_eq!(stage_file(&ran, "report", "answer.log"), "The file a.txt now says hello.");
    assert_eq!(stage_file(&ran, "report", "response.md").trim(), "The file a.txt now says hello.");
    // The usage came at the end of each stream.
    let status = status_json(&ran, "write");
    assert_eq!(
        (status["usage"]["input_tokens"].as_u64(), status["usage"]["output_tokens"].as_u64()),
        (Some(80), Some(15))
    );
    assert!(status.get("usage_estimated").is_none(), "{status}");
}

#[test]
fn anthropic_answers_stream_too() {
    let server = LlmServer::start(vec![anthropic_text("Streamed from Claude.", 12, 4)], vec![]);
    let ran = Test::new()
        .workflow(&ONE_PROMPT.replace("local-model", "claude-sonnet-4-5"))
        .env("ANTHROPIC_API_KEY", "sk-ant-test-0123456789")
        .env("ANTHROPIC_BASE_URL", &server.url(""))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(0)
        .run();
    assert_eq!(server.requests()[0].json()["stream"], true);
    assert_eq!(stage_file(&ran, "ask", "answer.log"), "Streamed from Claude.");
    let status = status_json(&ran, "ask");
    assert_eq!(
        (status["usage"]["input_tokens"].as_u64(), status["usage"]["output_tokens"].as_u64()),
        (Some(12), Some(4))
    );
}

#[test]
fn a_stage_timeout_closes_the_stream_at_once_and_keeps_what_came() {
    // 40 lines in 12-character pieces, 100 ms apart: about 20 s if nothing stops it.
    let text = long_answer(40);
    let server = server_of(vec![openai_text(&text, 10, 400).paced(Duration::from_millis(100))]);
    let ran = compatible(
        &server,
        &ONE_PROMPT.replace(r#"llm_model="local-model""#, r#"llm_model="local-model", timeout="2s""#),
    )
    .args(["run", "workflow.dot", "--run-dir", "run"])
    .status(1)
    .run();
    // The server saw the connection close when the stage's time was up, not at the answer's end.
    let deadline = Instant::now() + Duration::from_secs(5);
    while server.streams().is_empty() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    let streams = server.streams();
    assert_eq!(streams.len(), 1, "{streams:?}\n{}", ran.stderr());
    assert!(streams[0].cut_off, "{streams:?}");
    assert!(streams[0].after < Duration::from_secs(4), "the stream went on for {:?}", streams[0].after);
    // What came before the timeout is kept.
    let log = stage_file(&ran, "ask", "answer.log");
    assert!(log.starts_with("line 001 of the answer\n") && log.len() < text.len(), "{log}");
    let failure = status_json(&ran, "ask")["failure_reason"].as_str().unwrap_or_default().to_string();
    assert!(failure.contains("timed out") || failure.contains("timeout"), "{failure}");
}

#[test]
fn ctrl_c_closes_the_stream_at_once() {
    let text = long_answer(40);
    let server = server_of(vec![openai_text(&text, 10, 400).paced(Duration::from_millis(100))]);
    let dir = tempfile::tempdir().unwrap();
    let mut run = slow_run(&server, dir.path());
    let run_dir = only_run(dir.path());
    common::wait_for_file(&run_dir.join("stages/ask/1/answer.log"), "the answer log");
    // Once the answer has begun, the user presses Ctrl-C.
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::fs::metadata(run_dir.join("stages/ask/1/answer.log")).map_or(0, |m| m.len()) == 0 {
        assert!(Instant::now() < deadline, "nothing streamed");
        std::thread::sleep(Duration::from_millis(50));
    }
    let pressed = Instant::now();
    assert_eq!(unsafe { libc::kill(run.id() as i32, libc::SIGINT) }, 0);
    assert_eq!(run.wait().unwrap().code(), Some(130));
    while server.streams().is_empty() && pressed.elapsed() < Duration::from_secs(10) {
        std::thread::sleep(Duration::from_millis(50));
    }
    let streams = server.streams();
    assert_eq!(streams.len(), 1, "{streams:?}");
    assert!(streams[0].cut_off && streams[0].events < streams[0].of / 2, "{streams:?}");
    assert!(
        pressed.elapsed() < Duration::from_secs(3),
        "the stream ended {:?} after Ctrl-C",
        pressed.elapsed()
    );
}

#[test]
fn a_server_that_cannot_stream_tool_calls_gets_them_unstreamed_and_plain_calls_still_stream() {
    // llama-cpp-python ends a streamed call with tools without a single event.
    let server = server_of(vec![
        Reply::empty_stream(openai_text("never sent", 1, 1)),
        openai_tools(&[("c1", "write_file", json!({"path": "a.txt", "content": "hello"}))]),
        openai_text("I wrote a.txt.", 30, 5),
        openai_text("Done.", 40, 2),
    ]);
    let ran = compatible(&server, WRITE_THEN_REPORT)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "."])
        .status(0)
        .run();
    let streamed: Vec<bool> = server.requests().iter().map(|r| r.json()["stream"] == true).collect();
    assert_eq!(streamed, [true, false, false, true], "the tool calls go unstreamed after the first");
    assert_eq!(std::fs::read_to_string(ran.dir.path().join("a.txt")).unwrap(), "hello");
    let unstreamed = events_named(&ran.dir.path().join("run"), "llm.unstreamed");
    assert_eq!(unstreamed.len(), 1, "{unstreamed:?}");
    assert_eq!(unstreamed[0]["with_tools"], true);
    assert!(unstreamed[0]["reason"].as_str().unwrap().contains("without sending any of the answer"));
    assert_eq!(stage_file(&ran, "report", "answer.log"), "Done.");
}

#[test]
fn a_stream_without_token_counts_is_counted_by_estimate_and_says_so() {
    let no_usage = Reply::json(json!({
        "id": "chatcmpl-test", "object": "chat.completion", "model": "local-model",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "x".repeat(400)}, "finish_reason": "stop"}]
    }));
    let server = server_of(vec![no_usage]);
    let ran =
        compatible(&server, ONE_PROMPT).args(["run", "workflow.dot", "--run-dir", "run"]).status(0).run();
    let status = status_json(&ran, "ask");
    assert_eq!(status["usage_estimated"], true, "{status}");
    assert_eq!(status["usage"]["output_tokens"], 100, "400 characters at four a token");
    assert!(status["usage"]["input_tokens"].as_u64().unwrap() > 0, "{status}");
    let estimated = events_named(&ran.dir.path().join("run"), "llm.usage_estimated");
    assert_eq!(estimated.len(), 1, "{estimated:?}");
    assert_eq!(estimated[0]["output_tokens"], 100);
}

#[test]
fn a_model_whose_window_is_unknown_gets_plain_requests() {
    // llama-cpp-python states no window, and answers a streamed call that does not fit it with
    // keep-alives only; a plain call is refused with the window stated, and the run learns it.
    let server = LlmServer::start(vec![openai_text("plain", 3, 1)], vec![]);
    compatible(&server, &ONE_PROMPT.replace("local-model", "unlisted-model"))
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(0)
        .run();
    assert!(server.requests()[0].json().get("stream").is_none());
    assert!(server.streams().is_empty());
}

#[test]
fn stream_false_in_the_config_file_sends_plain_requests() {
    let server = server_of(vec![openai_text("plain", 3, 1)]);
    let config = format!(
        "[providers.local]\nbase_url = \"{}\"\nmodels = [\"local-model\"]\nstream = false\n",
        server.url("/v1")
    );
    let ran = Test::new()
        .workflow(ONE_PROMPT)
        .file("fabro.toml", &config)
        .env("FABRO_CONFIG", "fabro.toml")
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(0)
        .run();
    let body = server.requests()[0].json();
    assert!(body.get("stream").is_none() && body.get("stream_options").is_none(), "{body}");
    assert!(server.streams().is_empty());
    assert_eq!(stage_file(&ran, "ask", "response.md").trim(), "plain");
}

/// A run of one prompt stage whose answer streams for about `lines * 2 * pace`, started in the
/// background in a fresh directory.
fn slow_run(server: &LlmServer, dir: &Path) -> std::process::Child {
    std::fs::write(dir.join("workflow.dot"), ONE_PROMPT).unwrap();
    fabro_command(dir, &["run", "workflow.dot", "-q"])
        .env("FABRO_LLM_BASE_URL", server.url("/v1"))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start fabro run")
}

/// The run directory of the only run in `dir`, once it exists.
fn only_run(dir: &Path) -> PathBuf {
    let runs = dir.join(".fabro/runs");
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let found: Vec<PathBuf> =
            std::fs::read_dir(&runs).into_iter().flatten().flatten().map(|e| e.path()).collect();
        if let [run] = found.as_slice() {
            return run.clone();
        }
        assert!(Instant::now() < deadline, "no run directory in {}", runs.display());
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn logs_follow_shows_the_answer_while_the_model_writes_it() {
    let text = long_answer(12);
    // 12 lines of 24 characters: 24 pieces, 250 ms apart: about 6 s.
    let server = server_of(vec![openai_text(&text, 10, 80).paced(Duration::from_millis(250))]);
    let dir = tempfile::tempdir().unwrap();
    let mut run = slow_run(&server, dir.path());
    let run_dir = only_run(dir.path());
    let mut logs = fabro_command(dir.path(), &["logs", run_dir.to_str().unwrap(), "-f", "--output"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start fabro logs");
    let mut first_line_at = None;
    let mut lines = Vec::new();
    for line in BufReader::new(logs.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if line.contains("ask │ line 001") && first_line_at.is_none() {
            first_line_at = Some(Instant::now());
        }
        lines.push(line);
    }
    let _ = logs.wait();
    let ended_at = Instant::now();
    assert_eq!(run.wait().unwrap().code(), Some(0));
    let shown = lines.join("\n");
    let first = first_line_at.unwrap_or_else(|| panic!("no answer line shown:\n{shown}"));
    assert!(
        ended_at.duration_since(first) > Duration::from_secs(2),
        "the first line was shown only {:?} before the end:\n{shown}",
        ended_at.duration_since(first)
    );
    for n in 1..=12 {
        assert!(shown.contains(&format!("ask │ line {n:03} of the answer")), "line {n}:\n{shown}");
    }
}

/// `fabro serve` over the runs of `dir`, and its URL without the trailing `/`.
fn serve_in(dir: &Path) -> (std::process::Child, String) {
    let mut serve = fabro_command(dir, &["serve", "--dir", ".fabro/runs"])
        .stdout(Stdio::piped())
        .spawn()
        .expect("start fabro serve");
    let mut first = String::new();
    BufReader::new(serve.stdout.take().unwrap()).read_line(&mut first).unwrap();
    let base = first.trim().strip_prefix("fabro serve: ").expect(&first).trim_end_matches('/').to_string();
    (serve, base)
}

#[test]
fn serves_stage_page_of_a_running_stage_grows_with_the_answer() {
    let text = long_answer(12);
    let server = server_of(vec![openai_text(&text, 10, 80).paced(Duration::from_millis(250))]);
    let dir = tempfile::tempdir().unwrap();
    let mut run = slow_run(&server, dir.path());
    let run_dir = only_run(dir.path());
    let id = run_dir.file_name().unwrap().to_str().unwrap().to_string();
    let (mut serve, base) = serve_in(dir.path());
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let get = |url: String| {
        runtime.block_on(async {
            let response = reqwest::get(&url).await.expect("GET");
            let headers = response.headers().clone();
            (response.status().as_u16(), headers, response.text().await.unwrap_or_default())
        })
    };
    // The stage page while the stage runs.
    let deadline = Instant::now() + Duration::from_secs(20);
    let page = loop {
        let (status, _, page) = get(format!("{base}/runs/{id}/stages/ask/1"));
        if status == 200 {
            break page;
        }
        assert!(Instant::now() < deadline, "no stage page: {status} {page}");
        std::thread::sleep(Duration::from_millis(100));
    };
    assert!(
        page.contains("running") && page.contains("Answer so far") && page.contains("/fabro-stage.js"),
        "{page}"
    );
    let live = format!("{base}/runs/{id}/stages/ask/1/live?log=answer");
    // Read it as the page's script does, from where the last read ended, until the stage ends.
    let (mut offset, mut seen, mut reads_while_running) = (0u64, String::new(), 0);
    loop {
        let (status, headers, chunk) = get(format!("{live}&offset={offset}"));
        assert_eq!(status, 200, "{chunk}");
        let header =
            |name: &str| headers.get(name).and_then(|v| v.to_str().ok()).unwrap_or_default().to_string();
        offset = header("x-fabro-offset").parse().unwrap();
        seen.push_str(&chunk);
        if header("x-fabro-ended") == "true" {
            break;
        }
        if !chunk.is_empty() {
            reads_while_running += 1;
        }
        assert!(Instant::now() < deadline + Duration::from_secs(20), "the stage never ended: {seen}");
        std::thread::sleep(Duration::from_millis(200));
    }
    assert_eq!(run.wait().unwrap().code(), Some(0));
    assert_eq!(seen, text);
    assert!(reads_while_running >= 3, "the answer grew in {reads_while_running} reads");
    // Only the logs a stage writes, and only inside the run.
    assert_eq!(get(format!("{base}/runs/{id}/stages/ask/1/live?log=../../manifest.json")).0, 404);
    assert_eq!(get(format!("{base}/runs/{id}/stages/..%2F..%2Fx/1/live?log=answer")).0, 404);
    let _ = serve.kill();
    let _ = serve.wait();
}

#[test]
fn serves_stage_page_of_a_running_agent_stage_shows_its_turns_and_tool_calls_as_they_happen() {
    // A tool call, then an answer that streams for about 6 s.
    let server = server_of(vec![
        openai_tools(&[("c1", "write_file", json!({"path": "a.txt", "content": "hello"}))]),
        openai_text(&long_answer(12), 10, 80).paced(Duration::from_millis(250)),
    ]);
    let dir = tempfile::tempdir().unwrap();
    let agent = r#"digraph agent {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        write [shape=box, prompt="Write a.txt", llm_model="local-model"]
        start -> write -> exit
    }"#;
    std::fs::write(dir.path().join("workflow.dot"), agent).unwrap();
    let mut run = fabro_command(dir.path(), &["run", "workflow.dot", "-q"])
        .env("FABRO_LLM_BASE_URL", server.url("/v1"))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start fabro run");
    let run_dir = only_run(dir.path());
    let id = run_dir.file_name().unwrap().to_str().unwrap().to_string();
    let (mut serve, base) = serve_in(dir.path());
    let get = |url: String| {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let response = reqwest::get(&url).await.expect("GET");
            (response.status().as_u16(), response.text().await.unwrap_or_default())
        })
    };
    // While the answer streams, the tool call is already in the transcript the page follows.
    let deadline = Instant::now() + Duration::from_secs(20);
    let transcript = format!("{base}/runs/{id}/stages/write/1/live?log=transcript&offset=0");
    loop {
        let (_, seen) = get(transcript.clone());
        if seen.contains("\"tool_result\"") {
            assert!(seen.contains("\"tool_call\"") && seen.contains("write_file"), "{seen}");
            break;
        }
        assert!(Instant::now() < deadline, "the transcript never showed the tool call: {seen}");
        std::thread::sleep(Duration::from_millis(100));
    }
    let (status, page) = get(format!("{base}/runs/{id}/stages/write/1"));
    assert_eq!(status, 200, "{page}");
    assert!(page.contains("id=\"live-transcript\"") && page.contains("id=\"live-answer\""), "{page}");
    assert!(!run_dir.join("stages/write/1/status.json").exists(), "the stage was still running");
    assert_eq!(run.wait().unwrap().code(), Some(0));
    let _ = serve.kill();
    let _ = serve.wait();
}
