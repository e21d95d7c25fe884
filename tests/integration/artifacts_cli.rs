//! The artifact store through `fabro run`: context values over `artifact_threshold` move to
//! `artifacts/values/`, the context keeps a `file://` pointer, conditions read through it, and
//! checkpoints stay small.

use crate::common;

use common::Test;

const WORKFLOW: &str = r#"digraph artifacts {
    artifact_threshold = 1000
    start [shape=Mdiamond]
    exit [shape=Msquare]
    build [shape=parallelogram, script="head -c 20000 /dev/zero | tr '\\0' x; echo; echo 'tests PASSED'"]
    passed [shape=parallelogram, script="echo passed"]
    failed [shape=parallelogram, script="echo failed"]
    start -> build
    build -> passed [condition="command.output contains \"PASSED\""]
    build -> failed
    passed -> exit
    failed -> exit
}
"#;

#[test]
fn large_values_are_offloaded_and_conditions_read_through_the_pointer() {
    let ran = Test::new()
        .workflow(WORKFLOW)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let root = ran.dir.path();
    let read = |p: &str| std::fs::read_to_string(root.join(p)).unwrap_or_else(|e| panic!("{p}: {e}"));
    let result: serde_json::Value = serde_json::from_str(&read("run/result.json")).unwrap();
    assert_eq!(
        result["completed_nodes"],
        serde_json::json!(["start", "build", "passed", "exit"]),
        "the condition saw PASSED"
    );

    // The journal entry right after `build` (later stages overwrite command.output).
    let (entry_text, entry) = common::journal_entry_after(&root.join("run"), "build");
    let pointer = entry["set"]["command.output"].as_str().expect("a pointer string").to_string();
    assert!(
        pointer.starts_with("file://") && pointer.ends_with("/artifacts/values/command%2Eoutput.json"),
        "{pointer}"
    );
    assert!(entry_text.len() < 10_000, "the journal entry stays small: {} bytes", entry_text.len());
    assert!(read("run/checkpoint.json").len() < 10_000, "so does the snapshot");
    // So does the stage's status.json: it holds the same pointer, not a second copy.
    let status_text = read("run/stages/build/1/status.json");
    let status: serde_json::Value = serde_json::from_str(&status_text).unwrap();
    assert_eq!(status["context_updates"]["command.output"], pointer.as_str());
    assert!(status_text.len() < 10_000, "status.json stays small: {} bytes", status_text.len());

    // The value is in the store, whole, and copied where agents in the work directory can read it.
    let stored: serde_json::Value =
        serde_json::from_str(&read("run/artifacts/values/command%2Eoutput.json")).unwrap();
    let text = stored.as_str().unwrap();
    assert!(text.len() > 20_000 && text.ends_with("tests PASSED\n"), "{}", &text[text.len() - 20..]);
    assert_eq!(
        read(".fabro/artifacts/command%2Eoutput.json"),
        read("run/artifacts/values/command%2Eoutput.json")
    );

    let events = read("run/events.jsonl");
    let offloaded: Vec<serde_json::Value> = events
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .filter(|e: &serde_json::Value| e["event"] == "artifact.offloaded")
        .collect();
    assert!(offloaded.iter().any(|e| e["key"] == "command.output"
        && e["node_id"] == "build"
        && e["bytes"].as_u64().unwrap() > 20_000));
}

#[test]
fn small_values_stay_inline() {
    let workflow = WORKFLOW.replace("artifact_threshold = 1000", "artifact_threshold = 1000000");
    let ran = Test::new()
        .workflow(&workflow)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let (_, entry) = common::journal_entry_after(&ran.dir.path().join("run"), "build");
    assert!(entry["set"]["command.output"].as_str().unwrap().ends_with("tests PASSED\n"));
    assert!(!ran.dir.path().join("run/artifacts").exists());
}

#[test]
fn a_fork_gets_its_own_copies_of_offloaded_values() {
    let ran = Test::new()
        .workflow(WORKFLOW)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let root = ran.dir.path();
    let fork = common::fabro_in(root, &["fork", "run", "--at", "build", "--run-dir", "forked"]);
    assert_eq!(fork.status.code(), Some(0), "{}", String::from_utf8_lossy(&fork.stderr));
    let checkpoint: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join("forked/checkpoint.json")).unwrap()).unwrap();
    let pointer = checkpoint["context"]["command.output"].as_str().unwrap();
    let forked_root = std::fs::canonicalize(root.join("forked")).unwrap();
    assert!(pointer.starts_with(&format!("file://{}/artifacts/values/", forked_root.display())), "{pointer}");
    let copy = std::fs::read_to_string(root.join("forked/artifacts/values/command%2Eoutput.json")).unwrap();
    assert_eq!(
        copy,
        std::fs::read_to_string(root.join("run/artifacts/values/command%2Eoutput.json")).unwrap()
    );
}

/// Five stages writing 10 MB each: every output lands in the artifact store and every checkpoint
/// stays under 1 MB.
#[test]
fn fifty_megabytes_of_output_keep_checkpoints_small() {
    let stage = |name: &str| {
        format!(
            "    {name} [shape=parallelogram, script=\"head -c 10000000 /dev/zero | tr '\\\\0' {name}\"]\n"
        )
    };
    let mut workflow = String::from("digraph big {\n    start [shape=Mdiamond]\n    exit [shape=Msquare]\n");
    for name in ["a", "b", "c", "d", "e"] {
        workflow.push_str(&stage(name));
    }
    workflow.push_str("    start -> a -> b -> c -> d -> e -> exit\n}\n");
    let ran = Test::new()
        .workflow(&workflow)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let root = ran.dir.path().join("run");
    for (line, _) in common::journal_lines(&root) {
        assert!(line.len() < 1_000_000, "a journal entry of {} bytes", line.len());
    }
    let snapshot = std::fs::metadata(root.join("checkpoint.json")).unwrap().len();
    assert!(snapshot < 1_000_000, "checkpoint.json is {snapshot} bytes");
    let stored = std::fs::metadata(root.join("artifacts/values/command%2Eoutput.json")).unwrap().len();
    assert!(stored >= 10_000_000, "the last output is stored whole: {stored} bytes");
}
