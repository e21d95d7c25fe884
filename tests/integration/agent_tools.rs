//! The agent's built-in tools through the binary (issue 36, items 3 and 4): each model family is
//! offered the editing tools its models were trained on, `tools=` chooses them, `apply_patch`
//! edits files, and an existing file is written only after the stage has read it.

use crate::common;

use common::llm_server::{
    anthropic_text, offered_tools as offered, openai_text, openai_tools, tool_results, LlmServer,
};
use common::Test;
use serde_json::{json, Value};

const KEY: &str = "sk-test-key-12345";

fn agent(model: &str, attributes: &str) -> String {
    format!(
        r#"digraph tools {{
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [prompt="Fix the greeting", llm_model="{model}", max_turns=10{attributes}]
        start -> work -> exit
    }}"#
    )
}

/// A run of `workflow` against `server` as an OpenAI-compatible local server (model family
/// "other").
fn local(server: &LlmServer, workflow: &str) -> Test {
    Test::new()
        .workflow(workflow)
        .env("FABRO_LLM_BASE_URL", &server.url("/v1"))
        .env("FABRO_LLM_MAX_RETRIES", "0")
}

fn openai(server: &LlmServer, workflow: &str) -> Test {
    Test::new()
        .workflow(workflow)
        .env("OPENAI_API_KEY", KEY)
        .env("OPENAI_BASE_URL", &server.url("/v1"))
        .env("FABRO_LLM_MAX_RETRIES", "0")
}

#[test]
fn openai_models_edit_with_apply_patch_and_the_others_with_edit_file() {
    let patch = "*** Begin Patch\n*** Update File: greet.txt\n@@\n-hello wrld\n+hello world\n*** End Patch\n";
    let server = LlmServer::start(
        vec![
            openai_tools(&[("c1", "read_file", json!({"path": "greet.txt"}))]),
            openai_tools(&[("c2", "apply_patch", json!({"input": patch}))]),
            openai_text("Fixed.", 10, 5),
        ],
        Vec::new(),
    );
    let ran = openai(&server, &agent("gpt-5.2", ""))
        .file("work/greet.txt", "hello wrld\n")
        .args(["run", "workflow.dot", "--workdir", "work", "-q"])
        .status(0)
        .run();
    assert_eq!(std::fs::read_to_string(ran.dir.path().join("work/greet.txt")).unwrap(), "hello world\n");
    let requests: Vec<Value> = server.requests().iter().map(|request| request.json()).collect();
    let tools = offered(&requests[0]);
    assert!(tools.contains(&"apply_patch".to_string()), "{tools:?}");
    assert!(
        !tools.contains(&"edit_file".to_string()) && !tools.contains(&"read_many_files".to_string()),
        "{tools:?}"
    );
    assert_eq!(tool_results(&requests[2])[1], "applied the patch:\nM greet.txt");
    let system = requests[0]["messages"][0]["content"].as_str().unwrap_or_default();
    assert!(
        system.contains(
            "with the tools read_file, write_file, apply_patch, list_dir, glob, grep, shell and web_fetch;"
        ),
        "{system}"
    );

    // Anthropic's models get edit_file.
    let server = LlmServer::start(vec![anthropic_text("Nothing to do.", 10, 5)], Vec::new());
    Test::new()
        .workflow(&agent("claude-sonnet-4-5", ""))
        .env("ANTHROPIC_API_KEY", KEY)
        .env("ANTHROPIC_BASE_URL", &server.url(""))
        .args(["run", "workflow.dot", "-q"])
        .status(0)
        .run();
    let tools = offered(&server.requests()[0].json());
    assert!(
        tools.contains(&"edit_file".to_string()) && !tools.contains(&"apply_patch".to_string()),
        "{tools:?}"
    );

    // Gemini's get edit_file and read_many_files.
    let server = LlmServer::start(vec![openai_text("Nothing to do.", 10, 5)], Vec::new());
    Test::new()
        .workflow(&agent("gemini-2.5-pro", ""))
        .file(
            "gemini.toml",
            &format!("[providers.gemini]\nbase_url = \"{}\"\napi_key = \"{KEY}\"\n", server.url("/v1")),
        )
        .env("FABRO_CONFIG", "gemini.toml")
        .args(["run", "workflow.dot", "-q"])
        .status(0)
        .run();
    let tools = offered(&server.requests()[0].json());
    assert!(
        tools.contains(&"read_many_files".to_string()) && tools.contains(&"edit_file".to_string()),
        "{tools:?}"
    );
    assert!(!tools.contains(&"apply_patch".to_string()), "{tools:?}");
}

#[test]
fn tools_on_the_node_chooses_the_built_in_tools_and_a_misspelled_one_is_an_error() {
    let server = LlmServer::start(
        vec![
            openai_tools(&[("c1", "write_file", json!({"path": "x.txt", "content": "x"}))]),
            openai_text("Done.", 10, 5),
        ],
        Vec::new(),
    );
    let ran = openai(&server, &agent("gpt-5.2", r#", tools="read_file, edit_file, shell""#))
        .args(["run", "workflow.dot", "-q"])
        .status(0)
        .run();
    let requests: Vec<Value> = server.requests().iter().map(|request| request.json()).collect();
    let built_in: Vec<String> = offered(&requests[0])
        .into_iter()
        .filter(|tool| fabro::agent::tools::BUILTIN_TOOLS.contains(&tool.as_str()))
        .collect();
    assert_eq!(built_in, ["read_file", "edit_file", "shell"]);
    assert!(!ran.dir.path().join("x.txt").exists());
    assert!(
        tool_results(&requests[1])[0].starts_with(
            "`write_file` is not one of this stage's tools; they are read_file, edit_file, shell"
        ),
        "{:?}",
        tool_results(&requests[1])
    );
    Test::new()
        .workflow(&agent("gpt-5.2", r#", tools="read_fil, shell""#))
        .args(["validate", "workflow.dot"])
        .status(2)
        .stdout_contains("error[agent_tools]")
        .stdout_contains("`tools` names `read_fil`, which is not a built-in tool")
        .stdout_contains("did you mean `read_file`?")
        .run();
}

#[test]
fn an_agent_writes_an_existing_file_only_after_reading_it() {
    let replies = || {
        vec![
            openai_tools(&[("c1", "write_file", json!({"path": "notes.txt", "content": "replaced"}))]),
            openai_tools(&[("c2", "read_file", json!({"path": "notes.txt"}))]),
            openai_tools(&[("c3", "write_file", json!({"path": "notes.txt", "content": "replaced"}))]),
            openai_text("Done.", 10, 5),
        ]
    };
    let server = LlmServer::start(replies(), Vec::new());
    let ran = local(&server, &agent("local-model", ""))
        .file("notes.txt", "keep me\n")
        .args(["run", "workflow.dot", "-q"])
        .status(0)
        .run();
    let requests: Vec<Value> = server.requests().iter().map(|request| request.json()).collect();
    let refused = &tool_results(&requests[1])[0];
    assert!(
        refused.contains("`notes.txt` exists and this stage has not read it; read it with read_file first"),
        "{refused}"
    );
    assert_eq!(tool_results(&requests[3])[2], "wrote 8 bytes to notes.txt");
    assert_eq!(std::fs::read_to_string(ran.dir.path().join("notes.txt")).unwrap(), "replaced");

    // read_before_write=false: the first write goes through.
    let server = LlmServer::start(replies(), Vec::new());
    local(&server, &agent("local-model", ", read_before_write=false"))
        .file("notes.txt", "keep me\n")
        .args(["run", "workflow.dot", "-q"])
        .status(0)
        .run();
    assert_eq!(tool_results(&server.requests()[1].json())[0], "wrote 8 bytes to notes.txt");
}

#[test]
fn skills_are_listed_loaded_with_use_skill_and_expanded_from_a_slash_token() {
    let skill = |name: &str, description: &str, body: &str| {
        format!("---\nname: {name}\ndescription: {description}\n---\n{body}\n")
    };
    let server = LlmServer::start(
        vec![
            openai_tools(&[("c1", "use_skill", json!({"skill_name": "review"}))]),
            openai_text("Done.", 10, 5),
        ],
        Vec::new(),
    );
    let workflow = r#"digraph skills {
            start [shape=Mdiamond]
            exit [shape=Msquare]
            work [prompt="/commit fix the pager", llm_model="local-model", max_turns=5]
            start -> work -> exit
        }"#;
    let test = local(&server, workflow)
        .file("home/.fabro/skills/review/SKILL.md", &skill("review", "Review (the user's)", "User review."))
        .file(
            ".fabro/skills/commit/SKILL.md",
            &skill("commit", "Commit the work", "Commit rules: {{user_input}}."),
        )
        .file("skills/review/SKILL.md", &skill("review", "Review a change", "Look for bugs."))
        .file("skills/review/checklist.md", "1. tests\n")
        .file("skills/broken/SKILL.md", "no front matter here\n");
    let home = test.path("home");
    let ran = test
        .env("HOME", home.to_str().unwrap())
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let requests: Vec<Value> = server.requests().iter().map(|request| request.json()).collect();
    let system = requests[0]["messages"][0]["content"].as_str().unwrap_or_default();
    assert!(
        system.contains("## Available skills\n")
            && system.contains("- `commit`: Commit the work\n- `review`: Review a change"),
        "{system}"
    );
    assert!(offered(&requests[0]).contains(&"use_skill".to_string()));
    let prompt = requests[0]["messages"][1]["content"].as_str().unwrap_or_default();
    assert!(prompt.ends_with("Commit rules: fix the pager."), "{prompt}");
    let loaded = &tool_results(&requests[1])[0];
    assert!(loaded.starts_with("# Skill `review`") && loaded.ends_with("Look for bugs."), "{loaded}");
    let events = std::fs::read_to_string(ran.dir.path().join("run/events.jsonl")).unwrap();
    let invalid = events
        .lines()
        .find(|line| line.contains("agent.skill_invalid"))
        .expect("the broken skill is reported");
    assert!(invalid.contains("skills/broken/SKILL.md") && invalid.contains("front matter"), "{invalid}");
}

#[test]
fn sub_agents_work_answer_take_more_input_fail_alone_and_are_closed() {
    use common::llm_server::Reply;
    let server = LlmServer::start(
        vec![
            // The parent starts sub-1 and waits for it: sub-1's turns come next.
            openai_tools(&[
                ("p1", "spawn_agent", json!({"task": "Write a.txt"})),
                ("p2", "wait", json!({"id": "sub-1"})),
            ]),
            openai_tools(&[("s1", "write_file", json!({"path": "a.txt", "content": "a"}))]),
            openai_text("wrote a.txt", 100, 10),
            // More input for the idle sub-1.
            openai_tools(&[
                ("p3", "send_input", json!({"id": "sub-1", "text": "Now b.txt"})),
                ("p4", "wait", json!({"id": "sub-1"})),
            ]),
            openai_tools(&[("s2", "write_file", json!({"path": "b.txt", "content": "b"}))]),
            openai_text("wrote b.txt", 100, 10),
            // sub-2's session fails: a failed wait result, not a failed stage.
            openai_tools(&[
                ("p5", "spawn_agent", json!({"task": "Break", "max_turns": 2})),
                ("p6", "wait", json!({"id": "sub-2"})),
            ]),
            Reply::status(400, r#"{"error": {"message": "bad request from the test"}}"#),
            openai_tools(&[
                ("p7", "close_agent", json!({"id": "sub-1"})),
                ("p8", "wait", json!({"id": "nope"})),
            ]),
            openai_text("Done.", 10, 5),
        ],
        Vec::new(),
    );
    let ran = local(&server, &agent("local-model", ", max_subagents=2"))
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let dir = ran.dir.path();
    assert_eq!(std::fs::read_to_string(dir.join("a.txt")).unwrap(), "a");
    assert_eq!(std::fs::read_to_string(dir.join("b.txt")).unwrap(), "b");
    let requests: Vec<Value> = server.requests().iter().map(|request| request.json()).collect();
    assert_eq!(requests.len(), 10);
    // The parent is offered the sub-agent tools; sub-1 (at the depth limit) is not.
    assert!(offered(&requests[0]).contains(&"spawn_agent".to_string()));
    assert!(!offered(&requests[1]).contains(&"spawn_agent".to_string()));
    assert_eq!(requests[1]["messages"].as_array().unwrap().last().unwrap()["content"], "Write a.txt");
    let results = tool_results(&requests[3]);
    assert!(results[0].starts_with("started sub-agent sub-1 on local-model"), "{results:?}");
    assert_eq!(results[1], "wrote a.txt");
    // sub-1 continued its own conversation with the new input.
    let continued = requests[4]["messages"].as_array().unwrap();
    assert!(
        continued.iter().any(|m| m["content"] == "wrote a.txt")
            && continued.last().unwrap()["content"] == "Now b.txt"
    );
    let last = |index: usize, n: usize| {
        let results = tool_results(&requests[index]);
        results[results.len() - n..].to_vec()
    };
    assert_eq!(last(6, 1), ["wrote b.txt"]);
    let failed = &last(8, 1)[0];
    assert!(
        failed.starts_with("sub-agent sub-2 failed:") && failed.contains("bad request from the test"),
        "{failed}"
    );
    let closing = last(9, 2);
    assert_eq!(closing[0], "closed sub-1");
    assert!(closing[1].contains("there is no sub-agent `nope`; the open ones are sub-2"), "{closing:?}");
    // The children's usage counts in the stage's; their conversations are kept.
    let status: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run/stages/work/1/status.json")).unwrap())
            .unwrap();
    assert!(status["usage"]["input_tokens"].as_u64().unwrap() >= 200, "{status}");
    assert!(dir.join("run/stages/work/1/subagents/sub-1.jsonl").exists());
    let events = std::fs::read_to_string(dir.join("run/events.jsonl")).unwrap();
    let count =
        |kind: &str| events.lines().filter(|line| line.contains(&format!("\"event\":\"{kind}\""))).count();
    assert_eq!(
        (
            count("agent.sub.spawned"),
            count("agent.sub.completed"),
            count("agent.sub.failed"),
            count("agent.sub.closed")
        ),
        (2, 2, 1, 2),
        "{events}"
    );
}
