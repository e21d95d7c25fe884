//! Stages against a real OpenAI-compatible model server, through the binary: llama.cpp serving
//! SmolLM2-135M-Instruct through llama-cpp-python (`common::model_server`, installed by
//! `scripts/test`). A tiny model's words change with the prompt, so these tests check what fabro
//! does with whatever it answers (the calls it runs, the results it sends back, the outcome),
//! with temperature 0 and a fixed seed for repeatability; the scripted fakes of
//! `llm_providers.rs` keep the exact cases.

use crate::common;

use std::path::Path;

use common::llm_server::counted_chars;
use common::model_server::{ModelServer, MODEL};
use common::recording_proxy::{Exchange, RecordingProxy};
use common::{fabro_command, Ran, Test};
use serde_json::Value;

/// The stage's transcript, one entry a line.
fn transcript(ran: &Ran, node: &str) -> Vec<Value> {
    let path = ran.dir.path().join("run/stages").join(node).join("1/transcript.jsonl");
    let text = std::fs::read_to_string(&path)
        .unwrap_or_else(|error| panic!("{}: {error}\n--- stderr\n{}", path.display(), ran.stderr()));
    text.lines().map(|line| serde_json::from_str(line).expect("a JSON line")).collect()
}

/// The events of the run in `run`, for `node` (all when it is empty) and named `name`.
fn events(run: &Path, node: &str, name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(run.join("events.jsonl")).expect("events.jsonl");
    text.lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("an event"))
        .filter(|event| event["event"] == name && (node.is_empty() || event["node_id"] == node))
        .collect()
}

/// A JSON file of the run in `run` (`status.json` of a stage: `stages/NODE/1/status.json`).
fn json_file(run: &Path, path: &str) -> Value {
    let text = std::fs::read_to_string(run.join(path)).unwrap_or_else(|error| panic!("{path}: {error}"));
    serde_json::from_str(&text).expect("JSON")
}

/// Whether the stage's last turn (`turn`) asked for a tool call: the stage met its turn limit.
fn called_a_tool_at(entries: &[Value], turn: u64) -> bool {
    entries.iter().any(|entry| entry["type"] == "tool_call" && entry["turn"] == turn)
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
    // loaded machine (other test binaries compiling on its two cores) it may still be reading
    // the prompt for minutes.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(240);
    while !server.log_tail(20_000).contains("Disconnected from client (via refresh/close) Address(") {
        assert!(std::time::Instant::now() < deadline, "the server did not stop\n{}", shown());
        std::thread::sleep(std::time::Duration::from_millis(200));
    }
}

/// llama-cpp-python cannot stream a call with tools (it ends the stream and fabro sends the call
/// again unstreamed) and leaves its counts out of streamed answers: the tests that are not about
/// streaming send plain requests, as docs/providers.md advises for this server.
const PLAIN: &str = "stream = false";

/// What the turn-limit and calibration stages are asked: SmolLM2 answers it with a tool call.
const WRITE_HELLO: &str = "Create the file hello.txt containing the word hello.";

#[test]
fn a_stage_still_calling_tools_at_max_turns_fails_unless_turn_limit_outcome_accepts_unfinished_work() {
    let server = ModelServer::shared();
    let workflow = format!(
        r#"digraph limit {{
            start [shape=Mdiamond]
            exit [shape=Msquare]
            accept [shape=box, prompt="{WRITE_HELLO}", llm_model="{MODEL}", max_turns=1,
                    turn_limit_outcome="partial_success"]
            insist [shape=box, prompt="{WRITE_HELLO}", llm_model="{MODEL}", max_turns=1]
            start -> accept -> insist -> exit
        }}"#
    );
    let ran = Test::new()
        .workflow(&workflow)
        .file("fabro.toml", &server.config(&[PLAIN]))
        .file("work/README.md", "A scratch directory.\n")
        .env("FABRO_CONFIG", "fabro.toml")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"])
        .run();
    let run = ran.dir.path().join("run");
    // The limit only counts when the model still wanted a tool at its last turn: it must have,
    // else this test shows nothing (and could not fail when a stopped stage passes).
    for node in ["accept", "insist"] {
        let entries = transcript(&ran, node);
        assert!(
            called_a_tool_at(&entries, 1),
            "stage `{node}` answered without a tool call at its only turn, so max_turns did not stop it; \
             the prompt needs changing for this model\n{entries:?}"
        );
        let limits = events(&run, node, "agent.turn_limit");
        assert_eq!(limits.len(), 1, "{node}: {limits:?}");
        assert_eq!(limits[0]["max_turns"], 1);
    }
    // Unfinished work fails the stage (and, with no `outcome=fail` edge, the run) by default ...
    assert_eq!(ran.output.status.code(), Some(1), "a failed run\n{}", ran.stderr());
    let insist = json_file(&run, "stages/insist/1/status.json");
    assert_eq!(insist["outcome"], "fail", "{insist}");
    let reason = insist["failure_reason"].as_str().unwrap_or_default();
    assert!(reason.contains("max_turns=1") && reason.contains("turn_limit_outcome"), "{reason}");
    assert!(ran.stderr().contains("max_turns=1"), "{}", ran.stderr());
    assert_eq!(events(&run, "", "run.failed").len(), 1);
    // ... and turn_limit_outcome="partial_success" accepts it, so the run went on.
    let accept = json_file(&run, "stages/accept/1/status.json");
    assert_eq!(accept["outcome"], "partial_success", "{accept}");
    assert!(accept["failure_reason"].is_null(), "{accept}");
}

#[test]
fn the_servers_count_of_the_first_call_calibrates_the_stages_token_estimates() {
    let server = ModelServer::shared();
    let proxy = RecordingProxy::start(server);
    let workflow = format!(
        r#"digraph calibrate {{
            start [shape=Mdiamond]
            exit [shape=Msquare]
            work [shape=box, prompt="{WRITE_HELLO}", llm_model="{MODEL}", max_turns=1,
                  turn_limit_outcome="partial_success"]
            start -> work -> exit
        }}"#
    );
    let ran = Test::new()
        .workflow(&workflow)
        .file("fabro.toml", &proxy.config(&[]))
        .file("work/README.md", "A scratch directory.\n")
        .env("FABRO_CONFIG", "fabro.toml")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"])
        .status(0)
        .run();
    let run = ran.dir.path().join("run");
    // The server cannot stream a call with tools: the stream ends at once and the call goes
    // again unstreamed, and that answer has the server's count.
    let chats = proxy.chats();
    let counted = chats.iter().find(|chat| chat.status == 200 && !chat.streamed());
    let counted = counted.unwrap_or_else(|| panic!("no unstreamed answer\n{}", proxy.shown()));
    let request = &counted.request;
    let reported = counted.prompt_tokens().expect("the server reports its count");
    // Every character sent counts: the system prompt, the tool definitions and the prompt.
    let sent = counted_chars(request);
    let calibrated = events(&run, "work", "agent.context.calibrated");
    assert_eq!(calibrated.len(), 1, "{calibrated:?}");
    assert_eq!(calibrated[0]["reported_tokens"], reported, "{calibrated:?}\n{}", proxy.shown());
    let sent_chars = calibrated[0]["sent_chars"].as_u64().expect("sent_chars") as usize;
    assert!(
        sent_chars.abs_diff(sent) * 100 <= sent,
        "fabro counted {sent_chars} characters, the wire had {sent}"
    );
    let ratio = sent_chars as f64 / reported as f64;
    assert_eq!(calibrated[0]["chars_per_token"], (ratio * 100.0).round() / 100.0);
    // A BPE tokenizer's count of English and JSON: a few characters a token.
    assert!((2.5..=6.5).contains(&ratio), "{ratio} characters a token");
    let status = json_file(&run, "stages/work/1/status.json");
    let kept = status["context_window"]["chars_per_token"].as_f64().expect("chars_per_token");
    assert!((kept - ratio).abs() < 0.001, "{status}");
}

#[test]
fn a_real_server_gets_the_project_s_instructions_its_skills_and_the_tools_shaped_for_its_model() {
    let server = ModelServer::shared();
    let proxy = RecordingProxy::start(server);
    let workflow = format!(
        r#"digraph project {{
            start [shape=Mdiamond]
            exit [shape=Msquare]
            work [shape=box, prompt="/greet the reader", llm_model="{MODEL}", max_turns=1,
                  turn_limit_outcome="partial_success"]
            start -> work -> exit
        }}"#
    );
    let test = Test::new()
        .workflow(&workflow)
        .file("fabro.toml", &proxy.config(&[]))
        .file("work/AGENTS.md", "Keep every file you write under 20 lines.\n")
        .file(
            "work/.fabro/skills/greet/SKILL.md",
            "---\nname: greet\ndescription: Greet someone in a file\n---\nWrite greeting.txt saying hello to {{user_input}}.\n",
        )
        .env("FABRO_CONFIG", "fabro.toml");
    common::commit_all_in_new_repository(&test.path("work"));
    let ran = test.args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"]).status(0).run();
    let chats = proxy.chats();
    let answered = chats.iter().find(|chat| chat.status == 200);
    let request =
        &answered.unwrap_or_else(|| panic!("the server answered no call\n{}", proxy.shown())).request;
    let system = request["messages"][0]["content"].as_str().unwrap_or_default();
    assert!(system.contains("### AGENTS.md\nKeep every file you write under 20 lines."), "{system}");
    assert!(system.contains("- `greet`: Greet someone in a file"), "{system}");
    assert!(system.contains("Git branch: main\nGit status: clean\n"), "{system}");
    let prompt = request["messages"][1]["content"].as_str().unwrap_or_default();
    assert!(prompt.ends_with("Write greeting.txt saying hello to the reader."), "{prompt}");
    let tools: Vec<&str> = request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .filter_map(|tool| tool["function"]["name"].as_str())
        .collect();
    assert!(
        tools.contains(&"edit_file") && tools.contains(&"use_skill") && !tools.contains(&"apply_patch"),
        "{tools:?}"
    );
    let status = json_file(&ran.dir.path().join("run"), "stages/work/1/status.json");
    assert_eq!(status["project_docs"], serde_json::json!(["AGENTS.md"]), "{status}");
}

/// The context size of the small-window test: the system prompt and the tool definitions take
/// about 950 of its tokens.
const SMALL_WINDOW: u32 = 2048;

/// Each window an agent stage went by (`agent.context.window`), as (source, tokens).
fn windows(run: &Path, node: &str) -> Vec<(String, u64)> {
    events(run, node, "agent.context.window")
        .iter()
        .map(|event| {
            (event["source"].as_str().unwrap_or_default().to_string(), event["tokens"].as_u64().unwrap_or(0))
        })
        .collect()
}

#[test]
fn on_a_small_window_a_stage_learns_it_from_one_rejection_compacts_and_stays_under_it() {
    let server = ModelServer::with_context(SMALL_WINDOW);
    let proxy = RecordingProxy::start(server);
    // The plan's prompt (about 1,300 tokens) fits the window alone; on the thread it shares
    // with the agent stages, beside their system prompt and tools, it does not.
    let requirements: Vec<String> = (1..=70)
        .map(|k| format!("Requirement {k}: the module part_{k} keeps its public names unchanged."))
        .collect();
    let plan = format!("Plan the change. Constraints: {}", requirements.join(" "));
    let later = "List the files of this directory.";
    let workflow = format!(
        r#"digraph small {{
            start [shape=Mdiamond]
            exit [shape=Msquare]
            node [llm_model="{MODEL}", thread_id="change", fidelity="full"]
            plan [shape=tab, prompt="{plan}"]
            work [shape=box, prompt="{WRITE_HELLO}", max_turns=3, turn_limit_outcome="partial_success"]
            again [shape=box, prompt="{later}", max_turns=1, turn_limit_outcome="partial_success"]
            start -> plan -> work -> again -> exit
        }}"#
    );
    let ran = Test::new()
        .workflow(&workflow)
        .file("fabro.toml", &proxy.config(&[PLAIN]))
        .file("work/README.md", "A scratch directory.\n")
        .env("FABRO_CONFIG", "fabro.toml")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"])
        .run();
    let run = ran.dir.path().join("run");
    let shown = || {
        let trail = std::fs::read_to_string(run.join("events.jsonl")).unwrap_or_default();
        format!("--- requests\n{}\n--- events\n{trail}\n--- stderr\n{}", proxy.shown(), ran.stderr())
    };
    assert_eq!(ran.output.status.code(), Some(0), "{}", shown());
    let chats = proxy.chats();
    // An agent stage's own calls offer tools and hold its prompt (the later stage's, in its
    // thread, the earlier one's too).
    let calls = |prompt: &str, not: &str| -> Vec<Exchange> {
        let held = |chat: &Exchange, text: &str| chat.request["messages"].to_string().contains(text);
        chats
            .iter()
            .filter(|chat| chat.offers_tools() && held(chat, prompt) && !held(chat, not))
            .cloned()
            .collect()
    };
    let (work, again) = (calls(WRITE_HELLO, later), calls(later, "\u{0}"));
    let rejected = |chats: &[Exchange]| chats.iter().filter(|chat| chat.rejected_for_length()).count();

    // llama-cpp-python states no window (its model list has none, it has no /props): the stage
    // starts from the default, and its first call, rejected, states the window.
    assert_eq!(rejected(&chats), 1, "one rejection in the run\n{}", shown());
    assert!(work[0].rejected_for_length(), "{}", shown());
    let learned = ("error".to_string(), u64::from(SMALL_WINDOW));
    assert_eq!(windows(&run, "work"), [("default".to_string(), 128_000), learned], "{}", shown());
    let status = json_file(&run, "stages/work/1/status.json");
    assert_eq!(status["context_window"]["tokens"], SMALL_WINDOW, "{status}");
    assert_eq!(status["context_window"]["source"], "error", "{status}");
    // The later stage starts from what the run learned, and its long thread is compacted before
    // it is sent, not after a rejection.
    assert_eq!(rejected(&again), 0, "{}", shown());
    assert_eq!(windows(&run, "again"), [("learned".to_string(), u64::from(SMALL_WINDOW))]);

    // Once the window is known, every request leaves the answer room in it.
    let rejection = chats.iter().position(Exchange::rejected_for_length).expect("the rejection");
    for chat in &chats[rejection + 1..] {
        assert_eq!(chat.status, 200, "{}", shown());
        let asked = chat.request["max_tokens"].as_u64().expect("max_tokens");
        let prompt = chat.prompt_tokens().expect("the server's count");
        assert!(
            prompt + asked <= u64::from(SMALL_WINDOW),
            "{prompt} tokens in and max_tokens {asked} pass the window\n{}",
            shown()
        );
    }

    // Each stage compacted its thread to fit (the plan's prompt is in the digest), without a
    // failed summary or a trim step, and went on for its turns.
    for node in ["work", "again"] {
        let started = events(&run, node, "agent.compaction.started");
        assert!(!started.is_empty() && started.iter().all(|c| c["trigger"] == "overflow"), "{}", shown());
        for compaction in events(&run, node, "agent.compaction.completed") {
            let (before, after) = (compaction["before_tokens"].as_u64(), compaction["after_tokens"].as_u64());
            assert!(after < before, "{compaction}\n{}", shown());
        }
        assert!(events(&run, node, "agent.compaction.failed").is_empty(), "{}", shown());
        assert!(events(&run, node, "agent.context.trim_retry").is_empty(), "{}", shown());
    }
    assert!(
        chats.iter().all(|chat| !chat.request.to_string().contains("[COMPACTION FAILED]")),
        "{}",
        shown()
    );
    let last = work.last().expect("a call").request["messages"].to_string();
    assert!(last.contains("[Earlier in this thread") && last.contains("Requirement 1:"), "{last}");
    assert!(work.len() > 2, "the stage went on after the compaction\n{}", shown());
}

#[test]
fn a_model_server_that_goes_away_pauses_the_run_and_resume_finishes_the_stage_once_it_is_back() {
    // A server of this test's own: the first stage kills it (after the check before the first
    // stage found it), so the agent stage meets a refused connection.
    let server = ModelServer::dedicated(2048, None);
    let pid = server.pid();
    let kill = format!(
        "kill -9 {pid}; until grep -qs '^State:.*Z' /proc/{pid}/status || [ ! -e /proc/{pid} ]; do sleep 0.05; done"
    );
    let workflow = format!(
        r#"digraph outage {{
            start [shape=Mdiamond]
            exit [shape=Msquare]
            stop_server [shape=parallelogram, script="{kill}"]
            work [shape=box, prompt="{WRITE_HELLO}", llm_model="{MODEL}", max_turns=1,
                  turn_limit_outcome="partial_success"]
            start -> stop_server -> work -> exit
        }}"#
    );
    let ran = Test::new()
        .workflow(&workflow)
        .file("fabro.toml", &server.config(&[PLAIN, "retry_window = \"2s\""]))
        .file("work/README.md", "A scratch directory.\n")
        .env("FABRO_CONFIG", "fabro.toml")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"])
        .status(3)
        .stderr_contains(&format!("paused: provider `llama` at {} could not be reached", server.url()))
        .stderr_contains("`fabro resume ")
        .run();
    let run = ran.dir.path().join("run");
    let retries = events(&run, "work", "llm.retry");
    assert!(!retries.is_empty(), "{}", ran.stderr());
    assert!(retries.iter().all(|retry| retry["provider"] == "llama"), "{retries:?}");
    let paused = events(&run, "", "run.paused");
    assert_eq!(paused.len(), 1, "{paused:?}");
    assert_eq!((&paused[0]["kind"], &paused[0]["node_id"]), (&Value::from("provider"), &Value::from("work")));
    assert!(events(&run, "", "stage.failed").is_empty());

    // The server is back on the same port: the resume runs the agent stage (not the stage that
    // stopped the server) and the run finishes.
    let port = server.port;
    drop(server);
    let back = ModelServer::dedicated(2048, Some(port));
    let resumed =
        fabro_command(ran.dir.path(), &["resume", "run"]).env("FABRO_CONFIG", "fabro.toml").output().unwrap();
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert_eq!(resumed.status.code(), Some(0), "{stderr}\n--- server\n{}", back.log_tail(2000));
    let result = json_file(&run, "result.json");
    let stages: Vec<(&str, &str)> = result["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .map(|stage| (stage["node_id"].as_str().unwrap(), stage["status"].as_str().unwrap()))
        .collect();
    assert_eq!(stages.len(), 4, "{stages:?}");
    assert_eq!(stages[..2], [("start", "success"), ("stop_server", "success")]);
    assert_eq!(stages[2].0, "work");
    assert!(["success", "partial_success"].contains(&stages[2].1), "{stages:?}");
    assert_eq!(json_file(&run, "manifest.json")["status"], "succeeded");
}
