//! Hooks around an agent's tool calls (`[[hooks]]` of events `pre_tool_use`, `post_tool_use`,
//! `post_tool_use_failure`): a pre hook allows, blocks (the model sees the reason) or modifies a
//! call, chosen by a matcher on the tool and one on its arguments; a post hook's note reaches the
//! model with the result; a prompt hook asks a model. What reaches the model is read at the wire,
//! from a scripted provider on loopback.

use crate::common;

use common::llm_server::{anthropic_text, anthropic_tools, LlmServer};
use common::{Ran, Test};
use serde_json::{json, Value};

const KEY: &str = "sk-test-key-12345";

const AGENT: &str = r#"digraph guarded {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=box, prompt="Tidy up", llm_model="claude-sonnet-4-5", max_turns=10]
    start -> work -> exit
}"#;

fn agent_run(server: &LlmServer, hooks: &str) -> Test {
    Test::new()
        .workflow(AGENT)
        .file("workflow.toml", hooks)
        .file("work/notes.txt", "keep me\n")
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", &server.url(""))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
}

/// The tool results the model was sent in request `n`, by call id.
fn results_sent(server: &LlmServer, n: usize) -> Vec<(String, bool, String)> {
    let body = server.requests()[n].json();
    let messages = body["messages"].as_array().unwrap().clone();
    let last = messages.last().unwrap();
    last["content"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|part| part["type"] == "tool_result")
        .map(|part| {
            let content = match &part["content"] {
                Value::String(text) => text.clone(),
                other => other.to_string(),
            };
            (part["tool_use_id"].as_str().unwrap().to_string(), part["is_error"] == true, content)
        })
        .collect()
}

fn events_named(ran: &Ran, name: &str) -> Vec<Value> {
    std::fs::read_to_string(ran.dir.path().join("run/events.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|event| event["event"] == name)
        .collect()
}

#[test]
fn a_pre_tool_use_hook_blocks_rm_rf_with_a_reason_the_model_sees_and_can_change_a_call() {
    let server = LlmServer::start(
        vec![
            anthropic_tools(
                "Cleaning.",
                &[
                    ("t1", "shell", json!({"command": "rm -rf notes.txt"})),
                    ("t2", "shell", json!({"command": "echo fine > fine.txt"})),
                    ("t3", "shell", json!({"command": "echo unsafe > out.txt"})),
                ],
            ),
            anthropic_text("Done.", 100, 10),
        ],
        vec![],
    );
    let hooks = r#"
[[hooks]]
name = "no-rm-rf"
event = "pre_tool_use"
matcher = "^shell$"
arguments_matcher = 'rm\s+-rf'
command = '''echo "$FABRO_TOOL_NAME" >> ../pre.log; echo '{"decision": "block", "reason": "rm -rf is not allowed in this repository"}' '''

[[hooks]]
name = "make-safe"
event = "pre_tool_use"
arguments_matcher = "unsafe"
command = '''echo '{"decision": "modify", "arguments": {"command": "echo made safe > out.txt"}}' '''
"#;
    let ran = agent_run(&server, hooks).status(0).run();
    let work = ran.dir.path().join("work");
    assert_eq!(std::fs::read_to_string(work.join("notes.txt")).unwrap(), "keep me\n", "rm -rf never ran");
    // The matcher on the arguments chose the call: the hook heard of the rm -rf only.
    assert_eq!(std::fs::read_to_string(ran.dir.path().join("pre.log")).unwrap(), "shell\n");
    assert_eq!(std::fs::read_to_string(work.join("fine.txt")).unwrap(), "fine\n");
    assert_eq!(std::fs::read_to_string(work.join("out.txt")).unwrap(), "made safe\n");
    let results = results_sent(&server, 1);
    assert_eq!(results[0].0, "t1");
    assert!(results[0].1, "a blocked call is an error result");
    assert_eq!(
        results[0].2,
        "The hook `no-rm-rf` blocked this `shell` call; it did not run. Reason: rm -rf is not allowed in this repository"
    );
    assert!(!results[1].1 && !results[2].1, "{results:?}");
    let decisions: Vec<(String, String)> = events_named(&ran, "hook.ran")
        .iter()
        .map(|e| (e["hook"].as_str().unwrap().to_string(), e["decision"].as_str().unwrap().to_string()))
        .collect();
    assert_eq!(
        decisions,
        [("no-rm-rf".to_string(), "block".to_string()), ("make-safe".into(), "modify".into())]
    );
    assert!(events_named(&ran, "hook.ran")
        .iter()
        .all(|e| e["hook_event"] == "pre_tool_use" && e["node_id"] == "work"));
}

#[test]
fn a_post_tool_use_hooks_note_reaches_the_next_request_and_exit_2_blocks_by_exit_code() {
    let server = LlmServer::start(
        vec![
            anthropic_tools(
                "Writing.",
                &[("t1", "write_file", json!({"path": "greet.txt", "content": "hello  \n"}))],
            ),
            anthropic_tools("Reading.", &[("t2", "read_file", json!({"path": "missing.txt"}))]),
            anthropic_tools("Pushing.", &[("t3", "shell", json!({"command": "git push"}))]),
            anthropic_text("Done.", 100, 10),
        ],
        vec![],
    );
    // A format check after every write (its output is the note), a note on failed calls, and a
    // pre hook that blocks by exit code 2 with its reason on stderr.
    let hooks = r#"
[[hooks]]
name = "whitespace-check"
event = "post_tool_use"
matcher = "write_file|edit_file|apply_patch"
command = '''grep -n ' $' greet.txt | sed 's/^/trailing white space at line /' '''

[[hooks]]
name = "explain-failures"
event = "post_tool_use_failure"
command = '''echo '{"note": "files you may read: greet.txt, notes.txt"}' '''

[[hooks]]
name = "no-push"
event = "pre_tool_use"
arguments_matcher = "git push"
command = "echo 'pushing is for people' >&2; exit 2"
"#;
    let ran = agent_run(&server, hooks).status(0).run();
    let written = results_sent(&server, 1);
    assert!(!written[0].1, "{written:?}");
    assert!(
        written[0].2.ends_with("\n\n[hook `whitespace-check`] trailing white space at line 1:hello"),
        "{written:?}"
    );
    let failed = results_sent(&server, 2);
    assert!(failed[0].1, "{failed:?}");
    assert!(
        failed[0].2.ends_with("\n\n[hook `explain-failures`] files you may read: greet.txt, notes.txt"),
        "{failed:?}"
    );
    let blocked = results_sent(&server, 3);
    assert!(blocked[0].1);
    assert!(blocked[0].2.ends_with("Reason: pushing is for people"), "{blocked:?}");
    let hook_events: Vec<String> = events_named(&ran, "hook.ran")
        .iter()
        .map(|e| e["hook_event"].as_str().unwrap().to_string())
        .collect();
    assert_eq!(hook_events, ["post_tool_use", "post_tool_use_failure", "pre_tool_use"]);
}

#[test]
fn a_prompt_hook_asks_the_model_and_fails_open_when_the_answer_is_no_decision() {
    let server = LlmServer::start(
        vec![
            anthropic_tools("Deleting.", &[("t1", "shell", json!({"command": "rm notes.txt"}))]),
            // The prompt hook's question about t1.
            anthropic_text("{\"ok\": false, \"reason\": \"deleting files needs a person\"}", 50, 10),
            anthropic_tools("Listing.", &[("t2", "shell", json!({"command": "echo listed > listed.txt"}))]),
            // The question about t2: no decision, so the call runs (prompt hooks fail open).
            anthropic_text("I think it is fine", 50, 5),
            anthropic_text("Done.", 100, 10),
        ],
        vec![],
    );
    let hooks = r#"
[[hooks]]
name = "guard"
event = "pre_tool_use"
type = "prompt"
matcher = "^shell$"
prompt = "Commands that delete files are not allowed."
"#;
    let ran = agent_run(&server, hooks).status(0).run();
    let work = ran.dir.path().join("work");
    assert!(work.join("notes.txt").exists(), "the blocked rm never ran");
    assert!(work.join("listed.txt").exists(), "an answer that is no decision allows the call");
    let requests = server.requests();
    // The question carried the rule and the call, with no tools offered.
    let question = requests[1].json();
    let asked = question["messages"][0]["content"].to_string();
    assert!(
        asked.contains("Commands that delete files are not allowed.") && asked.contains("rm notes.txt"),
        "{asked}"
    );
    assert!(
        question.get("tools").is_none_or(|tools| tools.as_array().is_some_and(Vec::is_empty)),
        "{question}"
    );
    let blocked = results_sent(&server, 2);
    assert!(blocked[0].2.ends_with("Reason: deleting files needs a person"), "{blocked:?}");
    let failed = events_named(&ran, "hook.failed");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert!(failed[0]["message"].as_str().unwrap().contains("is not {\"ok\": ...}"), "{failed:?}");
}

#[test]
fn tool_hooks_on_the_node_are_the_same_hooks() {
    let server = LlmServer::start(
        vec![
            anthropic_tools("Writing.", &[("t1", "write_file", json!({"path": "a.txt", "content": "a\n"}))]),
            anthropic_text("Done.", 100, 10),
        ],
        vec![],
    );
    let workflow =
        AGENT.replace("max_turns=10", "max_turns=10, tool_hooks.post=\"echo checked $FABRO_TOOL_NAME\"");
    let ran = Test::new()
        .workflow(&workflow)
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", &server.url(""))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .file("work/.keep", "")
        .status(0)
        .run();
    let written = results_sent(&server, 1);
    assert!(written[0].2.ends_with("[hook `tool_hooks.post`] checked write_file"), "{written:?}");
    assert_eq!(events_named(&ran, "hook.ran")[0]["hook_event"], "post_tool_use");
}
