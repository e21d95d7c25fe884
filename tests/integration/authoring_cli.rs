//! `fabro logs`, `fabro inspect`, `fabro new` and `fabro completions`, run as the real binary.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A temporary directory in which `fabro` runs several times.
struct Dir(tempfile::TempDir);

impl Dir {
    fn new(files: &[(&str, &str)]) -> Dir {
        let dir = tempfile::tempdir().expect("temp dir");
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).expect("write");
        }
        Dir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }

    fn command(&self, args: &[&str]) -> Command {
        common::fabro_command(self.0.path(), args)
    }

    fn fabro(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("run fabro")
    }
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

#[track_caller]
fn expect_status(output: &Output, code: i32) {
    assert_eq!(
        output.status.code(),
        Some(code),
        "unexpected exit status\n--- stdout\n{}\n--- stderr\n{}",
        stdout(output),
        stderr(output)
    );
}

const SMALL: &str = r#"digraph small {
    goal = "Say hello"
    start [shape=Mdiamond]
    exit  [shape=Msquare]
    plan  [shape=tab, prompt="Plan $goal"]
    greet [shape=parallelogram, script="echo hello"]
    start -> plan -> greet -> exit
}
"#;

const GATED: &str = r#"digraph gated {
    start [shape=Mdiamond]
    exit  [shape=Msquare]
    work  [shape=parallelogram, script="echo working"]
    gate  [shape=hexagon, label="Ship it?"]
    start -> work -> gate
    gate -> exit [label="[Y] Yes"]
    gate -> work [label="[N] No"]
}
"#;

const SLOW: &str = r#"digraph slow {
    start [shape=Mdiamond]
    exit  [shape=Msquare]
    nap   [shape=parallelogram, script="sleep 1.5"]
    after [shape=parallelogram, script="echo awake"]
    start -> nap -> after -> exit
}
"#;

/// A finished run of [`SMALL`] in `run/`.
fn finished_run() -> Dir {
    let dir = Dir::new(&[("small.dot", SMALL)]);
    let output = dir.fabro(&["run", "small.dot", "--simulate", "--run-dir", "run", "-q"]);
    expect_status(&output, 0);
    dir
}

fn event_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).expect("events.jsonl").lines().map(str::to_string).collect()
}

// ---------------------------------------------------------------------------------------------
// fabro logs

#[test]
fn logs_prints_one_line_per_event() {
    let dir = finished_run();
    let output = dir.fabro(&["logs", "run"]);
    expect_status(&output, 0);
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert_eq!(lines.len(), event_lines(&dir.path("run/events.jsonl")).len(), "{text}");
    let first = lines[0];
    // HH:MM:SS.mmm  #seq  event ...
    let time = &first[..12];
    assert!(
        time.as_bytes()[2] == b':' && time.as_bytes()[5] == b':' && time.as_bytes()[8] == b'.',
        "{first}"
    );
    assert!(
        first.contains("  #1 ") && first.contains("run.started") && first.contains("workflow=small"),
        "{first}"
    );
    assert!(text.contains("stage.completed     greet@1"), "{text}");
    assert!(text.contains("status=success"), "{text}");
    assert!(!text.contains("run_id="), "the run id is not repeated on every line:\n{text}");
    assert!(!text.contains("\"success\""), "strings are unquoted:\n{text}");
    assert!(!text.contains("=null"), "null fields are left out:\n{text}");
    assert!(lines.last().is_some_and(|line| line.contains("run.completed")), "{text}");
}

#[test]
fn logs_node_filters_to_one_node() {
    let dir = finished_run();
    let output = dir.fabro(&["logs", "run", "--node", "greet"]);
    expect_status(&output, 0);
    let text = stdout(&output);
    assert!(text.contains("stage.started") && text.contains("greet@1"), "{text}");
    assert!(text.contains("from=greet"), "the edge chosen after the node is its event:\n{text}");
    for line in text.lines() {
        assert!(line.contains("greet"), "{line}");
        assert!(!line.contains("plan@"), "{line}");
    }
    assert!(!text.contains("run.started"), "{text}");
    assert!(!text.contains("checkpoint.saved"), "the run's records are not the stage's:\n{text}");

    let json = dir.fabro(&["logs", "run", "--node", "greet", "--json"]);
    expect_status(&json, 0);
    let lines = stdout(&json);
    assert!(!lines.is_empty());
    for line in lines.lines() {
        let event: Value = serde_json::from_str(line).expect("a JSON line");
        let node = event.get("node_id").or_else(|| event.get("from")).and_then(Value::as_str);
        assert_eq!(node, Some("greet"), "{line}");
    }
}

#[test]
fn logs_json_prints_the_file_lines() {
    let dir = finished_run();
    let output = dir.fabro(&["logs", "run", "--json"]);
    expect_status(&output, 0);
    let printed: Vec<String> = stdout(&output).lines().map(str::to_string).collect();
    assert_eq!(printed, event_lines(&dir.path("run/events.jsonl")));
}

#[test]
fn logs_shows_unreadable_lines_and_goes_on() {
    let dir = finished_run();
    let path = dir.path("run/events.jsonl");
    let mut text = std::fs::read_to_string(&path).unwrap();
    let count = text.lines().count();
    text.push_str("{this is not json\n");
    text.push_str(r#"{"seq":999,"ts":"2026-11-21T21:10:45.022Z","event":"note.added","text":""#);
    text.push_str(&"x".repeat(300));
    text.push_str("\"}\n");
    std::fs::write(&path, text).unwrap();
    let output = dir.fabro(&["logs", "run"]);
    expect_status(&output, 0);
    let out = stdout(&output);
    assert!(out.contains(&format!("(unreadable line {}: ", count + 1)), "{out}");
    let last = out.lines().last().unwrap();
    assert!(last.contains("#999") && last.contains("note.added"), "{last}");
    assert!(last.ends_with('…') && last.chars().count() < 220, "long values are cut:\n{last}");
}

#[test]
fn logs_refuses_a_directory_that_is_not_a_run() {
    let dir = Dir::new(&[]);
    std::fs::create_dir(dir.path("empty")).unwrap();
    let output = dir.fabro(&["logs", "empty"]);
    expect_status(&output, 2);
    assert!(stderr(&output).contains("not a fabro run directory (no events.jsonl)"), "{}", stderr(&output));
    let output = dir.fabro(&["logs", "missing", "-f"]);
    expect_status(&output, 2);
}

#[test]
fn logs_follow_stops_at_once_for_a_finished_run() {
    let dir = finished_run();
    let started = Instant::now();
    let output = dir.fabro(&["logs", "run", "-f"]);
    expect_status(&output, 0);
    assert!(stdout(&output).contains("run.completed"));
    assert!(started.elapsed() < Duration::from_secs(5));
}

#[test]
fn logs_follow_prints_a_running_workflow_and_stops_when_it_completes() {
    let dir = Dir::new(&[("slow.dot", SLOW)]);
    let mut run = dir
        .command(&["run", "slow.dot", "--run-dir", "run", "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("start fabro run");
    // Wait until the run has written its first events (they are flushed at each checkpoint).
    let events = dir.path("run/events.jsonl");
    let deadline = Instant::now() + Duration::from_secs(10);
    while !std::fs::read_to_string(&events).is_ok_and(|text| text.contains("edge.selected")) {
        assert!(Instant::now() < deadline, "the run wrote no events");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut logs = dir
        .command(&["logs", "run", "-f"])
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("start fabro logs -f");
    assert!(
        run.try_wait().expect("poll the run").is_none(),
        "the run ended before `logs -f` started; the test would not show following"
    );
    let started = Instant::now();
    let status = loop {
        if let Some(status) = logs.try_wait().expect("poll logs") {
            break status;
        }
        if started.elapsed() > Duration::from_secs(15) {
            let _ = logs.kill();
            let _ = run.kill();
            panic!("`fabro logs -f` did not stop after the run completed");
        }
        std::thread::sleep(Duration::from_millis(50));
    };
    let output = logs.wait_with_output().expect("logs output");
    assert!(status.success(), "{}", stderr(&output));
    let run_status = run.wait().expect("wait for the run");
    assert!(run_status.success());
    let text = stdout(&output);
    assert!(text.contains("stage.completed     nap@1"), "{text}");
    assert!(text.contains("stage.started       after@1"), "{text}");
    assert!(text.lines().last().is_some_and(|line| line.contains("run.completed")), "{text}");
    // Every event, each once, in order.
    assert_eq!(text.lines().count(), event_lines(&events).len(), "{text}");
}

// ---------------------------------------------------------------------------------------------
// fabro inspect

#[test]
fn inspect_a_finished_run() {
    let dir = finished_run();
    std::fs::create_dir_all(dir.path("run/artifacts/reports")).unwrap();
    std::fs::write(dir.path("run/artifacts/reports/summary.md"), "# done").unwrap();
    let output = dir.fabro(&["inspect", "run"]);
    expect_status(&output, 0);
    let text = stdout(&output);
    for expected in [
        "workflow:    small (small.dot)",
        "status:      succeeded",
        "last node:   exit",
        "next node:   -",
        "work dir:",
        "started:",
        "finished:",
        "tokens in",
        "n/a",
        "command.output",
        "artifacts:\n  reports/summary.md",
    ] {
        assert!(text.contains(expected), "lacks {expected:?}:\n{text}");
    }
    let plan = text.lines().find(|line| line.starts_with("plan ")).expect("a plan row");
    assert!(plan.contains("success"), "{plan}");
    assert!(text.lines().any(|line| line.starts_with("total ")), "{text}");
    assert!(!text.contains("internal.run_id"), "engine keys are hidden:\n{text}");
    assert!(!text.contains("graph.goal"), "{text}");

    let all = dir.fabro(&["inspect", "run", "--all"]);
    expect_status(&all, 0);
    assert!(stdout(&all).contains("internal.run_id"), "{}", stdout(&all));
    assert!(stdout(&all).contains("graph.goal"));
}

#[test]
fn inspect_json_of_a_finished_run() {
    let dir = finished_run();
    let output = dir.fabro(&["inspect", "run", "--json"]);
    expect_status(&output, 0);
    let value: Value = serde_json::from_slice(&output.stdout).expect("one JSON object");
    assert_eq!(value["status"], "succeeded");
    assert_eq!(value["manifest"]["workflow"], "small");
    assert_eq!(value["current_node"], "exit");
    assert_eq!(value["next_node"], Value::Null);
    let stages = value["stages"].as_array().unwrap();
    let ids: Vec<_> = stages.iter().map(|s| s["node_id"].as_str().unwrap()).collect();
    assert_eq!(ids, ["start", "plan", "greet", "exit"]);
    let plan = &stages[1];
    assert_eq!(plan["visits"], 1);
    assert_eq!(plan["status"], "success");
    assert!(plan["input_tokens"].as_u64().unwrap() > 0 && plan["output_tokens"].as_u64().unwrap() > 0);
    assert!(plan["duration_ms"].is_u64());
    assert_eq!(value["context"]["command.output"], "hello\n");
    assert!(value["context"].get("internal.run_id").is_none());
    assert_eq!(value["artifacts"], serde_json::json!([]));

    let all = dir.fabro(&["inspect", "run", "--json", "--all"]);
    let value: Value = serde_json::from_slice(&all.stdout).unwrap();
    assert!(value["context"].get("internal.run_id").is_some());
}

#[test]
fn inspect_a_paused_run() {
    let dir = Dir::new(&[("gated.dot", GATED)]);
    let output = dir.fabro(&["run", "gated.dot", "--run-dir", "run", "-q"]);
    expect_status(&output, 3);

    let output = dir.fabro(&["inspect", "run"]);
    expect_status(&output, 0);
    let text = stdout(&output);
    assert!(text.contains("status:      paused"), "{text}");
    assert!(text.contains("waiting at:  gate"), "{text}");
    assert!(text.contains("next node:   gate"), "{text}");
    assert!(text.lines().any(|line| line.starts_with("work ") && line.contains("success")), "{text}");
    assert!(text.contains("artifacts: none"), "{text}");

    let output = dir.fabro(&["inspect", "run", "--json"]);
    expect_status(&output, 0);
    let value: Value = serde_json::from_slice(&output.stdout).unwrap();
    assert_eq!(value["status"], "paused");
    assert_eq!(value["current_node"], "gate");
    assert_eq!(value["next_node"], "gate");
    assert_eq!(value["stages"].as_array().unwrap().len(), 2);

    // The log of a paused run ends, so following it stops.
    let output = dir.fabro(&["logs", "run", "-f"]);
    expect_status(&output, 0);
    assert!(stdout(&output).lines().last().is_some_and(|line| line.contains("run.paused")));
}

#[test]
fn inspect_refuses_what_is_not_a_run_or_is_corrupt() {
    let dir = finished_run();
    std::fs::create_dir(dir.path("empty")).unwrap();
    let output = dir.fabro(&["inspect", "empty"]);
    expect_status(&output, 2);
    assert!(stderr(&output).contains("not a fabro run directory (no manifest.json)"), "{}", stderr(&output));

    std::fs::write(dir.path("run/checkpoint.json"), "{\"run_id\": ").unwrap();
    let output = dir.fabro(&["inspect", "run"]);
    expect_status(&output, 2);
    assert!(stderr(&output).contains("checkpoint.json"), "{}", stderr(&output));
    assert!(stdout(&output).is_empty());
}

// ---------------------------------------------------------------------------------------------
// fabro new

#[test]
fn every_new_template_validates_cleanly() {
    let dir = Dir::new(&[]);
    for (name, template) in [
        ("flow_linear", "linear"),
        ("flow_loop", "branch-loop"),
        ("flow_gate", "review-gate"),
        ("flow_par", "parallel"),
    ] {
        let output = dir.fabro(&["new", name, "--template", template]);
        expect_status(&output, 0);
        let file = format!("{name}.dot");
        assert!(stdout(&output).contains(&file), "{}", stdout(&output));
        let text = std::fs::read_to_string(dir.path(&file)).unwrap();
        assert!(text.contains(&format!("digraph {name} {{")), "{text}");
        assert!(text.contains("//"), "templates are commented");

        let validate = dir.fabro(&["validate", &file, "--json"]);
        expect_status(&validate, 0);
        let report: Value = serde_json::from_slice(&validate.stdout).unwrap();
        assert_eq!(report["valid"], true);
        assert_eq!(report["diagnostics"], serde_json::json!([]), "{template}: {report}");
        let run_dir = format!("run_{name}");
        let run = dir.fabro(&["run", &file, "--simulate", "--auto-approve", "-q", "--run-dir", &run_dir]);
        expect_status(&run, 0);
    }
    assert!(std::fs::read_to_string(dir.path("flow_loop.dot"))
        .unwrap()
        .contains("condition=\"outcome=fail\""));
    assert!(std::fs::read_to_string(dir.path("flow_par.dot")).unwrap().contains("shape=tripleoctagon"));
}

#[test]
fn new_templates_run_as_printed() {
    let dir = Dir::new(&[]);
    let output = dir.fabro(&["new", "starter"]);
    expect_status(&output, 0);
    assert!(stdout(&output).contains("fabro run starter.dot --simulate"), "{}", stdout(&output));
    expect_status(&dir.fabro(&["run", "starter.dot", "--simulate", "-q", "--run-dir", "r1"]), 0);

    expect_status(&dir.fabro(&["new", "looping", "--template", "branch-loop"]), 0);
    expect_status(&dir.fabro(&["run", "looping.dot", "--simulate", "-q", "--run-dir", "r2"]), 0);

    expect_status(&dir.fabro(&["new", "gated", "--template", "review-gate"]), 0);
    expect_status(
        &dir.fabro(&["run", "gated.dot", "--simulate", "--auto-approve", "-q", "--run-dir", "r3"]),
        0,
    );
}

#[test]
fn new_refuses_to_overwrite_unless_forced() {
    let dir = Dir::new(&[("mine.dot", "digraph mine { }\n")]);
    let output = dir.fabro(&["new", "mine"]);
    expect_status(&output, 2);
    assert!(stderr(&output).contains("already exists"), "{}", stderr(&output));
    assert!(stderr(&output).contains("--force"));
    assert_eq!(std::fs::read_to_string(dir.path("mine.dot")).unwrap(), "digraph mine { }\n");

    let output = dir.fabro(&["new", "mine", "--force", "--template", "branch-loop"]);
    expect_status(&output, 0);
    assert!(std::fs::read_to_string(dir.path("mine.dot")).unwrap().contains("digraph mine {"));
}

#[test]
fn new_writes_into_dir() {
    let dir = Dir::new(&[]);
    std::fs::create_dir(dir.path("flows")).unwrap();
    let output = dir.fabro(&["new", "ship", "--dir", "flows", "--template", "review-gate"]);
    expect_status(&output, 0);
    assert!(dir.path("flows/ship.dot").is_file());
    assert!(!dir.path("ship.dot").exists());
    assert!(stdout(&output).contains("flows/ship.dot"), "{}", stdout(&output));

    let output = dir.fabro(&["new", "ship", "--dir", "nowhere"]);
    expect_status(&output, 2);
}

#[test]
fn new_rejects_a_name_that_is_not_an_identifier() {
    let dir = Dir::new(&[]);
    for (name, suggestion) in [("my-flow", "my_flow"), ("2fast", "w_2fast"), ("graph", "graph_workflow")] {
        let output = dir.fabro(&["new", name]);
        expect_status(&output, 2);
        assert!(stderr(&output).contains(&format!("`{suggestion}`")), "{name}: {}", stderr(&output));
    }
    assert_eq!(std::fs::read_dir(dir.path(".")).unwrap().count(), 0, "nothing was written");

    let output = dir.fabro(&["new", "ok", "--template", "fancy"]);
    expect_status(&output, 2);
    assert!(stderr(&output).contains("branch-loop"), "{}", stderr(&output));
}

// ---------------------------------------------------------------------------------------------
// fabro completions

#[test]
fn completions_for_each_shell() {
    let dir = Dir::new(&[]);
    for shell in ["bash", "zsh", "fish"] {
        let output = dir.fabro(&["completions", shell]);
        expect_status(&output, 0);
        let text = stdout(&output);
        assert!(!text.trim().is_empty(), "{shell}");
        assert!(text.contains("resume"), "{shell}: {text}");
        assert!(text.contains("inspect"), "{shell}");
    }
}

#[test]
fn completions_for_an_unknown_shell_lists_the_choices() {
    let dir = Dir::new(&[]);
    let output = dir.fabro(&["completions", "tcsh"]);
    expect_status(&output, 2);
    let err = stderr(&output);
    assert!(err.contains("bash") && err.contains("zsh") && err.contains("fish"), "{err}");
}
