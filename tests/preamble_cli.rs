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

const THREADED: &str = r#"digraph threads {
    goal = "Write the release notes"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    draft [shape=tab, fidelity=full, thread_id=notes, prompt="Draft the notes"]
    check [shape=parallelogram, script="cp \"$FABRO_CONTEXT\" check.json"]
    polish [shape=tab, fidelity=full, thread_id=notes, prompt="Polish them"]
    other [shape=tab, fidelity=full, thread_id=side, prompt="Unrelated"]
    start -> draft -> check -> polish -> other -> exit
}
"#;

/// Under full fidelity, stages with the same thread key share one conversation: the second sees
/// the first's exchange; another thread starts empty.
#[test]
fn full_fidelity_stages_on_one_thread_share_the_conversation() {
    let ran = Test::new()
        .workflow(THREADED)
        .args(["run", "workflow.dot", "--simulate", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let draft_prompt = read(&ran, "run/stages/draft/1/prompt.md");
    let draft_response = read(&ran, "run/stages/draft/1/response.md");
    assert_eq!(draft_prompt, "Draft the notes", "full fidelity: no preamble");
    assert!(!ran.dir.path().join("run/stages/draft/1/history.jsonl").exists(), "a new thread has no history");

    let history: Vec<serde_json::Value> = read(&ran, "run/stages/polish/1/history.jsonl")
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect();
    assert_eq!(
        history,
        [
            serde_json::json!({"role": "user", "content": draft_prompt}),
            serde_json::json!({"role": "assistant", "content": draft_response}),
        ]
    );
    assert!(read(&ran, "run/stages/polish/1/response.md")
        .ends_with("It continues thread `notes` after 2 earlier messages."));
    assert!(!ran.dir.path().join("run/stages/other/1/history.jsonl").exists(), "thread `side` starts empty");
    assert_eq!(read(&ran, "run/threads/notes.jsonl").lines().count(), 4);
    assert_eq!(read(&ran, "run/threads/side.jsonl").lines().count(), 2);
    let check: serde_json::Value = serde_json::from_str(&read(&ran, "check.json")).unwrap();
    assert_eq!(
        check["internal.thread_id"],
        serde_json::Value::Null,
        "set only while a full-fidelity LLM stage runs"
    );
}

/// A resumed run rebuilds its threads from `threads/<key>.jsonl`: a stage after the resume point
/// on the same thread still sees the exchange from before the pause.
#[test]
fn threads_are_rebuilt_when_a_run_resumes() {
    let workflow = r#"digraph resumed_thread {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    draft [shape=tab, fidelity=full, thread_id=notes, prompt="Draft the notes"]
    gate [shape=hexagon, label="Go on?"]
    polish [shape=tab, fidelity=full, thread_id=notes, prompt="Polish them"]
    start -> draft -> gate
    gate -> polish [label="[Y] Yes"]
    polish -> exit
}
"#;
    let ran = Test::new()
        .workflow(workflow)
        .args(["run", "workflow.dot", "--simulate", "--run-dir", "run", "-q"])
        .status(3)
        .run();
    let resumed = std::process::Command::new(common::fabro_bin())
        .args(["resume", "run", "--simulate", "--auto-approve", "-q"])
        .current_dir(ran.dir.path())
        .output()
        .unwrap();
    assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
    let history = read(&ran, "run/stages/polish/1/history.jsonl");
    assert_eq!(history.lines().count(), 2, "{history}");
    assert!(history.contains("Draft the notes"));
}
