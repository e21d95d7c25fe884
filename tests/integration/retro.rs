//! `fabro retro` and `fabro run --retro`: the deterministic part from the run's records, and a
//! model's reading of the run from its events when a provider is configured.

use crate::common;

use common::llm_server::{openai_text, openai_tools, LlmServer};
use common::{fabro_in, Test};
use serde_json::{json, Value};

const WORKFLOW: &str = r#"digraph retro {
    goal = "Write the greeting and check it"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    write [shape=box, prompt="Write out.txt"]
    check [shape=parallelogram, script="test -f marker || { touch marker; echo flaky >&2; exit 1; }", max_retries=1]
    start -> write -> check -> exit
}"#;

/// `fabro run --retro` of `workflow` against the loopback provider at `server`.
fn run_with_retro(server: &LlmServer, workflow: &str) -> Test {
    Test::new()
        .workflow(workflow)
        .file("work/.keep", "")
        .env("FABRO_LLM_BASE_URL", &server.url("/v1"))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .env("FABRO_LLM_MODEL", "local-model")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "--retro"])
}

fn read_json(path: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).unwrap()).unwrap()
}

#[test]
fn a_run_with_retro_writes_the_stages_the_totals_and_a_models_reading() {
    let narrative = json!({
        "rating": "bumpy",
        "summary": "The greeting was written; the check failed once and passed on its retry.",
        "friction_points": ["check failed on its first attempt"],
        "follow_ups": ["make the check independent of leftover files"]
    });
    let server = LlmServer::start(
        vec![
            openai_tools(&[("c1", "write_file", json!({"path": "out.txt", "content": "hello\n"}))]),
            openai_text("Wrote out.txt.", 120, 8),
            openai_text(&format!("Here is the retrospective:\n{narrative}"), 900, 60),
        ],
        vec![],
    );
    let ran = run_with_retro(&server, WORKFLOW).status(0).stderr_contains("retrospective: ").run();
    let run = ran.dir.path().join("run");
    let retro = read_json(&run.join("retro.json"));
    assert_eq!(retro["status"], "succeeded");
    let stages = retro["stages"].as_array().unwrap();
    let stage = |id: &str| stages.iter().find(|s| s["node_id"] == id).unwrap().clone();
    assert_eq!(stage("write")["files_touched"], json!(["out.txt"]));
    assert_eq!(stage("write")["outcome"], "success");
    assert!(stage("write")["input_tokens"].as_u64().unwrap() > 0);
    assert_eq!(stage("check")["retries"], 1);
    assert_eq!(retro["totals"]["retries"], 1);
    assert_eq!(retro["totals"]["files_touched"], 1);
    assert_eq!(retro["totals"]["stage_visits"], stages.len());
    assert_eq!(retro["narrative"]["rating"], "bumpy");
    assert_eq!(retro["narrative"]["friction_points"], json!(["check failed on its first attempt"]));
    assert_eq!(retro["narrative"]["model"], "test-model", "the model the provider says answered");
    // The model read the run's facts and its events.
    let asked = server.requests()[2].json()["messages"].to_string();
    assert!(asked.contains("You write the retrospective"), "{asked}");
    assert!(asked.contains("stage.retrying"), "{asked}");
    let markdown = std::fs::read_to_string(run.join("retro.md")).unwrap();
    assert!(markdown.contains("## How it went: bumpy (by test-model)"), "{markdown}");
    assert!(markdown.contains("- make the check independent of leftover files"), "{markdown}");
    assert!(markdown.contains("| check | 1 | success |"), "{markdown}");

    // `fabro retro` rewrites it; without a provider there is no narrative, and it says so.
    let again = fabro_in(ran.dir.path(), &["retro", "run"]);
    assert_eq!(again.status.code(), Some(0), "{}", String::from_utf8_lossy(&again.stderr));
    assert!(String::from_utf8_lossy(&again.stderr).contains("no LLM provider is configured"));
    let retro = read_json(&run.join("retro.json"));
    assert!(retro.get("narrative").is_none());
    assert_eq!(retro["totals"]["retries"], 1);
}

#[test]
fn a_narrative_the_model_gets_wrong_leaves_the_deterministic_part_and_a_warning() {
    let server = LlmServer::start(
        vec![openai_text("Done.", 10, 2), openai_text("{\"rating\": \"meh\"}", 100, 5)],
        vec![],
    );
    let workflow = WORKFLOW.replace("write [shape=box", "write [shape=tab");
    let ran = run_with_retro(&server, &workflow)
        .status(0)
        .stderr_contains("warning: the retrospective has no narrative: rating `meh` is not one of")
        .run();
    let retro = read_json(&ran.dir.path().join("run/retro.json"));
    assert!(retro.get("narrative").is_none());
    assert_eq!(retro["stages"].as_array().unwrap().len(), 4);

    // A directory that is no run is an error, not a panic.
    let missing = fabro_in(ran.dir.path(), &["retro", "nowhere"]);
    assert_eq!(missing.status.code(), Some(2));
}
