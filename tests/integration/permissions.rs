//! Tool permissions through the binary: each level with no one at a terminal (calls above it are
//! denied, and the model is told), `--permissions` and the config file under the node's and the
//! graph's, `--auto-approve` that does not widen them, and a person at a terminal who allows once,
//! allows for the stage or denies.

use crate::common;

use common::llm_server::{openai_text, openai_tools, LlmServer, Reply};
use common::pty::Terminal;
use common::{fabro_command, Ran, Test};
use serde_json::{json, Value};
use std::path::Path;

/// The model writes a file, then runs a shell command, then answers.
fn write_then_shell() -> Vec<Reply> {
    vec![
        openai_tools(&[("c1", "write_file", json!({"path": "written.txt", "content": "x"}))]),
        openai_tools(&[("c2", "shell", json!({"command": "touch shelled.txt"}))]),
        openai_text("done", 10, 2),
    ]
}

fn workflow(graph_attributes: &str, node_attributes: &str) -> String {
    format!(
        r#"digraph permissions {{
    {graph_attributes}
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=box, prompt="Write and run"{node_attributes}]
    start -> work -> exit
}}"#
    )
}

fn run(server: &LlmServer, workflow: &str) -> Test {
    Test::new()
        .workflow(workflow)
        .file("work/.keep", "")
        .env("FABRO_LLM_BASE_URL", &server.url("/v1"))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .env("FABRO_LLM_MODEL", "local-model")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"])
}

/// The events named `name` of the run in `dir`/run.
fn events_in(dir: &Path, name: &str) -> Vec<Value> {
    std::fs::read_to_string(dir.join("run/events.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|event| event["event"] == name)
        .collect()
}

fn events_named(ran: &Ran, name: &str) -> Vec<Value> {
    events_in(ran.dir.path(), name)
}

/// The tool results the model was sent, in order.
fn results_sent(server: &LlmServer) -> Vec<String> {
    let requests = server.main_requests();
    let last = requests.last().unwrap().json();
    last["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .collect()
}

/// The built-in tools the model was offered, and its system prompt, in the first request.
fn offered(server: &LlmServer) -> (Vec<String>, String) {
    let first = server.main_requests()[0].json();
    let tools = first["tools"]
        .as_array()
        .unwrap()
        .iter()
        .map(|tool| tool["function"]["name"].as_str().unwrap().to_string())
        .filter(|name| {
            ["read_file", "write_file", "edit_file", "list_dir", "glob", "grep", "shell"]
                .contains(&name.as_str())
        })
        .collect();
    let system = first["messages"][0]["content"].as_str().unwrap_or_default().to_string();
    (tools, system)
}

/// Which of the two calls ran.
fn ran_calls(ran: &Ran) -> (bool, bool) {
    let work = ran.dir.path().join("work");
    (work.join("written.txt").exists(), work.join("shelled.txt").exists())
}

#[test]
fn read_only_denies_writes_and_the_shell_and_tells_the_model() {
    let server = LlmServer::start(write_then_shell(), vec![]);
    let ran = run(&server, &workflow("", ", permissions=\"read-only\"")).status(0).run();
    assert_eq!(ran_calls(&ran), (false, false));
    let results = results_sent(&server);
    assert!(
        results[0].starts_with("Permission denied: `write_file` needs permissions=read-write"),
        "{results:?}"
    );
    assert!(results[0].contains("with no one at a terminal"), "{results:?}");
    assert!(results[1].starts_with("Permission denied: `shell` needs permissions=full"), "{results:?}");
    let denied = events_named(&ran, "agent.permission_denied");
    assert_eq!(denied.len(), 2);
    assert_eq!(
        (denied[0]["tool"].as_str(), denied[0]["permissions"].as_str()),
        (Some("write_file"), Some("read-only"))
    );
    assert_eq!(denied[0]["node_id"], "work");
    // With no one to allow them, the tools above the level are not even offered, and the model
    // is told why (the calls above are what a model that tries anyway gets).
    let (tools, system) = offered(&server);
    assert_eq!(tools, ["read_file", "list_dir", "glob", "grep"]);
    assert!(system.contains("with the tools read_file, list_dir, glob and grep;"), "{system}");
    assert!(system.contains("permissions=read-only: it cannot change files or run commands"), "{system}");
}

#[test]
fn read_write_from_the_graph_allows_writes_but_not_the_shell() {
    let server = LlmServer::start(write_then_shell(), vec![]);
    let ran = run(&server, &workflow("permissions = \"read-write\"", "")).status(0).run();
    assert_eq!(ran_calls(&ran), (true, false));
    assert_eq!(events_named(&ran, "agent.permission_denied").len(), 1);
    let (tools, system) = offered(&server);
    assert_eq!(tools, ["read_file", "write_file", "edit_file", "list_dir", "glob", "grep"]);
    assert!(system.contains("permissions=read-write: it cannot run commands"), "{system}");
}

#[test]
fn full_is_the_default() {
    let server = LlmServer::start(write_then_shell(), vec![]);
    let ran = run(&server, &workflow("", "")).status(0).run();
    assert_eq!(ran_calls(&ran), (true, true));
    assert!(events_named(&ran, "agent.permission_denied").is_empty());
    let (tools, system) = offered(&server);
    assert_eq!(tools.len(), 7, "{tools:?}");
    assert!(!system.contains("permissions="), "{system}");
}

#[test]
fn the_flag_and_the_config_apply_below_the_node_and_auto_approve_does_not_widen() {
    // --permissions read-only for a stage that says nothing; --auto-approve answers gates only.
    let server = LlmServer::start(write_then_shell(), vec![]);
    let ran = run(&server, &workflow("", ""))
        .args(["--permissions", "read-only", "--auto-approve"])
        .status(0)
        .run();
    assert_eq!(ran_calls(&ran), (false, false));

    // The node's own level wins over the flag.
    let server = LlmServer::start(write_then_shell(), vec![]);
    let ran = run(&server, &workflow("", ", permissions=\"full\""))
        .args(["--permissions", "read-only"])
        .status(0)
        .run();
    assert_eq!(ran_calls(&ran), (true, true));

    // The config file's level applies when nothing else says; the flag wins over it.
    let server = LlmServer::start(write_then_shell(), vec![]);
    let ran = run(&server, &workflow("", ""))
        .file("config.toml", "permissions = \"read-write\"\n")
        .env("FABRO_CONFIG", "config.toml")
        .status(0)
        .run();
    assert_eq!(ran_calls(&ran), (true, false));
    let server = LlmServer::start(write_then_shell(), vec![]);
    let ran = run(&server, &workflow("", ""))
        .file("config.toml", "permissions = \"read-write\"\n")
        .env("FABRO_CONFIG", "config.toml")
        .args(["--permissions", "full"])
        .status(0)
        .run();
    assert_eq!(ran_calls(&ran), (true, true));

    run(&server, &workflow("", ""))
        .args(["--permissions", "admin"])
        .status(2)
        .stderr_contains("`admin` is not read-only, read-write or full")
        .run();
    run(&server, &workflow("", ", permissions=\"admin\"")).status(2).stderr_contains("permissions").run();
}

#[test]
fn at_a_terminal_a_person_allows_once_allows_for_the_stage_or_denies() {
    let server = LlmServer::start(
        vec![
            openai_tools(&[("c1", "shell", json!({"command": "touch one.txt"}))]),
            openai_tools(&[("c2", "shell", json!({"command": "touch two.txt"}))]),
            openai_tools(&[("c3", "shell", json!({"command": "touch three.txt"}))]),
            openai_tools(&[("c4", "write_file", json!({"path": "written.txt", "content": "x"}))]),
            openai_text("done", 10, 2),
        ],
        vec![],
    );
    let test = Test::new().workflow(&workflow("", ", permissions=\"read-only\"")).file("work/.keep", "");
    let dir = test.path("");
    let mut command = fabro_command(&dir, &["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"]);
    command
        .env("FABRO_LLM_BASE_URL", server.url("/v1"))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .env("FABRO_LLM_MODEL", "local-model");
    let mut terminal = Terminal::spawn(command);
    terminal.wait_for("wants to call `shell`", 1);
    terminal.type_line("o");
    terminal.wait_for("wants to call `shell`", 2);
    terminal.type_line("s");
    terminal.wait_for("wants to call `write_file`", 1);
    terminal.type_line("d");
    let status = terminal.wait();
    let screen = terminal.screen();
    assert_eq!(status.code(), Some(0), "{screen}");
    // The third shell call was not asked about: the stage had it allowed.
    assert_eq!(screen.matches("wants to call `shell`").count(), 2, "{screen}");
    assert!(screen.contains("[O] Allow once -> this call runs"), "{screen}");
    assert!(screen.contains("[S] Allow for this stage -> every `shell` call of this stage runs"), "{screen}");
    let work = dir.join("work");
    assert!(
        work.join("one.txt").exists() && work.join("two.txt").exists() && work.join("three.txt").exists()
    );
    assert!(!work.join("written.txt").exists());
    let results = results_sent(&server);
    assert!(results[3].contains("the person at the terminal denied it"), "{results:?}");
    let granted = events_in(&dir, "agent.permission_granted");
    let scopes: Vec<&str> = granted.iter().map(|e| e["scope"].as_str().unwrap()).collect();
    assert_eq!(scopes, ["once", "stage"]);
    assert_eq!(events_in(&dir, "agent.permission_denied").len(), 1);
    // A person may allow any tool, so every tool is offered.
    assert_eq!(offered(&server).0.len(), 7);
}

#[test]
fn below_full_with_no_one_to_ask_no_mcp_server_starts() {
    // MCP tools need permissions=full: this server would fail the stage if it were started.
    let server = LlmServer::start(vec![openai_text("looked", 10, 2)], vec![]);
    let ran = run(&server, &workflow("", ", permissions=\"read-write\""))
        .file("config.toml", "[mcp_servers.broken]\ntype = \"stdio\"\ncommand = [\"false\"]\n")
        .env("FABRO_CONFIG", "config.toml")
        .status(0)
        .run();
    assert!(events_named(&ran, "mcp.server_started").is_empty());
    let first = server.main_requests()[0].json();
    assert!(!first["tools"].to_string().contains("mcp__"));
}
