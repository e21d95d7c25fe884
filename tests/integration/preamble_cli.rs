//! Fidelity preambles through `fabro run`: each LLM stage gets `preamble.md` in the mode its
//! fidelity resolves to (edge, then node, then graph default, then compact), prepended to what is
//! sent (`prompt.md`); full fidelity sends no preamble.

use crate::common;

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
            serde_json::json!({"node": "draft", "role": "user", "content": draft_prompt}),
            serde_json::json!({"node": "draft", "role": "assistant", "content": draft_response}),
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
    let resumed = common::fabro_in(ran.dir.path(), &["resume", "run", "--simulate", "--auto-approve", "-q"]);
    assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
    let history = read(&ran, "run/stages/polish/1/history.jsonl");
    assert_eq!(history.lines().count(), 2, "{history}");
    assert!(history.contains("Draft the notes"));
}

/// Golden preambles for every mode, through the binary with `--responses`
/// (`tests/fixtures/preambles/`): the fixture workflow also pins the precedence (edge over node
/// over graph default).
#[test]
fn preambles_match_the_golden_files() {
    let fixtures = common::repo_root().join("tests/fixtures/preambles");
    let workflow = std::fs::read_to_string(fixtures.join("golden.dot")).unwrap();
    let responses = std::fs::read_to_string(fixtures.join("responses.json")).unwrap();
    let ran = Test::new()
        .file("golden.dot", &workflow)
        .file("responses.json", &responses)
        .args(["run", "golden.dot", "--responses", "responses.json", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let run_id = serde_json::from_str::<serde_json::Value>(&read(&ran, "run/manifest.json")).unwrap()
        ["run_id"]
        .as_str()
        .unwrap()
        .to_string();
    let durations = regex::Regex::new(r"Duration: \d+ ms").unwrap();
    let seconds = regex::Regex::new(r"in \d+\.\ds").unwrap();
    let normalize = |text: &str| {
        let text = durations.replace_all(text, "Duration: N ms");
        seconds.replace_all(&text, "in N.Ns").replace(&run_id, "RUN_ID")
    };
    for (node, mode, golden) in [
        ("plan", "compact", "compact.md"),
        ("medium", "summary:medium", "summary-medium.md"),
        ("high", "summary:high", "summary-high.md"),
        ("low", "summary:low", "summary-low.md"),
        ("trunc", "truncate", "truncate.md"),
    ] {
        let preamble = normalize(&read(&ran, &format!("run/stages/{node}/1/preamble.md")));
        let expected = std::fs::read_to_string(fixtures.join(golden)).unwrap();
        assert_eq!(preamble, expected, "{node} ({mode}) differs from {golden}");
        let status: serde_json::Value =
            serde_json::from_str(&read(&ran, &format!("run/stages/{node}/1/status.json"))).unwrap();
        assert_eq!(status["fidelity"], mode, "{node} records its fidelity");
    }
}

/// After 1,000 completed stages the summary levels still fit their budgets (tokens estimated as
/// characters / 4) and say how many stages were elided.
#[test]
fn summary_budgets_hold_after_a_thousand_stages() {
    let mut workflow = String::from("digraph long {\n    goal = \"Survive a long run\"\n    max_node_visits = 2000\n    start [shape=Mdiamond]\n    exit [shape=Msquare]\n");
    for i in 0..1000 {
        workflow.push_str(&format!("    s{i} [shape=diamond]\n"));
    }
    workflow.push_str("    low [shape=tab, fidelity=\"summary:low\", prompt=\"Low\"]\n");
    workflow.push_str("    medium [shape=tab, fidelity=\"summary:medium\", prompt=\"Medium\"]\n");
    workflow.push_str("    high [shape=tab, fidelity=\"summary:high\", prompt=\"High\"]\n    start -> s0\n");
    for i in 0..999 {
        workflow.push_str(&format!("    s{i} -> s{}\n", i + 1));
    }
    workflow.push_str("    s999 -> low -> medium -> high -> exit\n}\n");
    let ran = Test::new()
        .workflow(&workflow)
        .args(["run", "workflow.dot", "--simulate", "--checkpoint-sync", "never", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    for (node, budget) in [("low", 600), ("medium", 1500), ("high", 3000)] {
        let preamble = read(&ran, &format!("run/stages/{node}/1/preamble.md"));
        let tokens = preamble.chars().count().div_ceil(4);
        assert!(tokens <= budget, "{node}: {tokens} tokens > {budget}");
        assert!(preamble.contains("earlier stages elided"), "{node}:\n{preamble}");
    }
}

/// Keys a stage writes are stored safely whatever they contain: offloaded values land inside
/// the run's artifact store, never outside it, and stay readable.
#[test]
fn hostile_context_keys_are_offloaded_safely() {
    let workflow = r#"digraph hostile {
    artifact_threshold = 100
    start [shape=Mdiamond]
    exit [shape=Msquare]
    write [shape=parallelogram, script="python3 -c 'import json,os; big=\"x\"*500; json.dump({\"outcome\":\"success\",\"context_updates\":{\"../../escape\":big,\"a/b\":big,\"..\":big,\"\u00e9\u00e8 \u2603\":big}}, open(os.environ[\"FABRO_STAGE_DIR\"]+\"/status.json\",\"w\"))'"]
    start -> write -> exit
}
"#;
    if std::process::Command::new("python3").arg("--version").output().is_err() {
        eprintln!("SKIPPED: python3 is not installed");
        return;
    }
    let ran = Test::new()
        .workflow(workflow)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let values = ran.dir.path().join("run/artifacts/values");
    let mut names: Vec<String> = std::fs::read_dir(&values)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    for name in &names {
        assert!(!name.contains('/') && !name.starts_with('.'), "{name}");
    }
    assert!(names.contains(&"%2E%2E%2F%2E%2E%2Fescape.json".to_string()), "{names:?}");
    assert!(!ran.dir.path().join("escape").exists() && !ran.dir.path().join("run/escape").exists());
    let checkpoint: serde_json::Value = serde_json::from_str(&read(&ran, "run/checkpoint.json")).unwrap();
    for key in ["../../escape", "a/b", "..", "éè ☃"] {
        let pointer =
            checkpoint["context"][key].as_str().unwrap_or_else(|| panic!("{key} kept as a pointer"));
        assert!(
            pointer.starts_with("file://") && pointer.contains("/run/artifacts/values/"),
            "{key}: {pointer}"
        );
    }
}

#[test]
fn a_command_whose_last_line_is_very_long_shows_its_end() {
    let workflow = r#"digraph long {
    allow_lints="failure_path"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    build [shape=parallelogram, script="head -c 100000 /dev/zero | tr '\\0' x; echo END-OF-OUTPUT"]
    review [shape=box, prompt="Review", fidelity="compact"]
    start -> build -> review -> exit
}
"#;
    let ran = Test::new()
        .workflow(workflow)
        .args(["run", "workflow.dot", "--run-dir", "run", "--simulate", "-q"])
        .status(0)
        .run();
    let preamble = read(&ran, "run/stages/review/1/preamble.md");
    let stdout = preamble.split("- Stdout:").nth(1).expect("a Stdout entry");
    assert!(!stdout.trim_start().starts_with("(empty)"), "{preamble}");
    assert!(stdout.contains("xxxxEND-OF-OUTPUT"), "{preamble}");
}
