//! Fidelity preambles through `fabro run`: each LLM stage gets `preamble.md` in the mode its
//! fidelity resolves to (edge, then node, then graph default, then compact), prepended to what is
//! sent (`prompt.md`); full fidelity sends no preamble.

mod common;

use common::Test;

const WORKFLOW: &str = r#"digraph preambles {
    goal = "Add a /health endpoint"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    build [shape=parallelogram, script="echo compiled ok"]
    plan [shape=tab, prompt="Plan the change"]
    review [shape=tab, fidelity="summary:low", prompt="Review"]
    brief [shape=tab, fidelity=compact, prompt="Brief"]
    threaded [shape=tab, fidelity=full, prompt="Continue"]
    start -> build -> plan -> review
    review -> brief [fidelity=truncate]
    brief -> threaded -> exit
}
"#;

fn read(ran: &common::Ran, path: &str) -> String {
    std::fs::read_to_string(ran.dir.path().join(path)).unwrap_or_else(|e| panic!("{path}: {e}"))
}

#[test]
fn each_llm_stage_gets_the_preamble_of_its_fidelity() {
    let ran = Test::new()
        .workflow(WORKFLOW)
        .args(["run", "workflow.dot", "--simulate", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let plan = read(&ran, "run/stages/plan/1/preamble.md");
    assert_eq!(
        plan,
        "Goal: Add a /health endpoint\n\n## Completed stages\n- **start**: success\n- **build**: success\n  - Script: `echo compiled ok`\n  - Stdout: `compiled ok`\n  - Stderr: (empty)\n\n## Context\n- command.exit_code: 0\n"
    );
    assert_eq!(
        read(&ran, "run/stages/plan/1/prompt.md"),
        format!("{}\n\n---\n\nPlan the change", plan.trim_end())
    );

    let review = read(&ran, "run/stages/review/1/preamble.md");
    assert_eq!(
        review,
        "Goal: Add a /health endpoint\n\nCompleted stages: 3 (success 3)\n- start: success\n- build: success\n- plan: success\n"
    );

    // The entering edge's fidelity (truncate) beats the node's own (compact).
    let brief = read(&ran, "run/stages/brief/1/preamble.md");
    let run_id = serde_json::from_str::<serde_json::Value>(&read(&ran, "run/manifest.json")).unwrap()
        ["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    assert_eq!(brief, format!("Goal: Add a /health endpoint\nRun: {run_id}\n"));

    // Full fidelity sends the prompt alone.
    assert!(!ran.dir.path().join("run/stages/threaded/1/preamble.md").exists());
    assert_eq!(read(&ran, "run/stages/threaded/1/prompt.md"), "Continue");
}

#[test]
fn internal_keys_never_reach_a_preamble() {
    let ran = Test::new()
        .workflow(WORKFLOW)
        .args(["run", "workflow.dot", "--simulate", "--run-dir", "run", "-q", "--set", "ticket=OPS-42"])
        .status(0)
        .run();
    let brief_compact = read(&ran, "run/stages/plan/1/preamble.md");
    assert!(brief_compact.contains("- ticket: OPS-42"), "{brief_compact}");
    for hidden in ["internal.", "graph.", "current_node", "response.", "thread."] {
        assert!(!brief_compact.contains(hidden), "{hidden} leaked:\n{brief_compact}");
    }
}
