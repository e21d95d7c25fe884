//! Looking after runs: listing the ones that want attention first, deleting and pruning runs.

use crate::common;

use common::{fabro_command, Test};

const QUICK: &str = r#"digraph quick {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=parallelogram, script="echo done"]
    start -> work -> exit
}
"#;

const GATED: &str = r#"digraph gated {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    ask [shape=hexagon, label="Go?"]
    start -> ask
    ask -> exit [label="[Y] Yes"]
}
"#;

fn fabro(dir: &std::path::Path, args: &[&str]) -> (Option<i32>, String, String) {
    let output = fabro_command(dir, args).output().unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code(), text(&output.stdout), text(&output.stderr))
}

fn run_dirs(dir: &std::path::Path) -> usize {
    std::fs::read_dir(dir.join(".fabro/runs")).map_or(0, |entries| entries.count())
}

#[test]
fn unfinished_runs_come_first_and_old_finished_ones_need_all() {
    let test = Test::new().workflow(QUICK).file("gated.dot", GATED);
    let dir = test.path("");
    assert_eq!(fabro(&dir, &["run", "gated.dot", "-q"]).0, Some(3));
    for _ in 0..11 {
        assert_eq!(fabro(&dir, &["run", "workflow.dot", "-q"]).0, Some(0));
    }
    let (code, listing, _) = fabro(&dir, &["runs"]);
    assert_eq!(code, Some(0));
    let lines: Vec<&str> = listing.lines().collect();
    assert!(lines[1].contains("gated") && lines[1].contains("paused"), "{listing}");
    assert_eq!(lines.len(), 1 + 1 + 10 + 1, "{listing}");
    assert_eq!(lines.last().unwrap(), &"… and 1 older finished run(s); `fabro runs --all` lists them");
    let (_, all, _) = fabro(&dir, &["runs", "--all"]);
    assert_eq!(all.lines().count(), 1 + 12, "{all}");
}

#[test]
fn runs_are_deleted_by_id_and_pruned_when_their_workflow_is_gone() {
    let test = Test::new().workflow(QUICK).file("gone.dot", QUICK);
    let dir = test.path("");
    let kept = fabro_command(&dir, &["run", "workflow.dot", "--json", "-q"]).output().unwrap();
    let kept: serde_json::Value = serde_json::from_slice(&kept.stdout).unwrap();
    let kept_id = kept["run_id"].as_str().unwrap().to_string();
    let gone = fabro_command(&dir, &["run", "gone.dot", "--json", "-q"]).output().unwrap();
    let gone: serde_json::Value = serde_json::from_slice(&gone.stdout).unwrap();
    let gone_dir = dir.join(gone["run_dir"].as_str().unwrap());
    std::fs::remove_file(dir.join("gone.dot")).unwrap();

    // --dry-run lists and deletes nothing.
    let (code, said, _) = fabro(&dir, &["runs", "--prune", "--dry-run"]);
    assert_eq!(code, Some(0));
    assert!(
        said.starts_with("would delete ") && said.contains("its workflow gone.dot no longer exists"),
        "{said}"
    );
    assert_eq!(run_dirs(&dir), 2);
    let (code, said, _) = fabro(&dir, &["runs", "--prune"]);
    assert_eq!(code, Some(0));
    assert!(said.starts_with("deleted "), "{said}");
    assert!(!gone_dir.exists());
    assert_eq!(run_dirs(&dir), 1);
    let (_, said, _) = fabro(&dir, &["runs", "--prune"]);
    assert_eq!(said, "nothing to prune in .fabro/runs\n");
    // Nothing finished more than 30 days ago.
    let (_, said, _) = fabro(&dir, &["runs", "--prune", "--older-than", "30d"]);
    assert_eq!(said, "nothing to prune in .fabro/runs\n");

    // A run that a process holds is never deleted; by id prefix otherwise.
    let run_dir = dir.join(".fabro/runs").join(&kept_id);
    let held = common::hold_run_lock(&run_dir);
    let short: String = kept_id.chars().take(13).collect();
    let (code, _, stderr) = fabro(&dir, &["runs", "--delete", &short]);
    assert_eq!(code, Some(1));
    assert!(stderr.contains("is in use (process"), "{stderr}");
    assert!(run_dir.exists());
    drop(held);
    let (code, said, _) = fabro(&dir, &["runs", "--delete", &short]);
    assert_eq!(code, Some(0));
    assert_eq!(said, format!("deleted .fabro/runs/{kept_id}\n"));
    assert!(!run_dir.exists());
}

/// Replaces what differs between runs (ids, times, durations, temporary paths) with fixed text.
fn normalize(text: &str, run_id: &str, dir: &std::path::Path) -> String {
    let text = text.replace(run_id, "RUN_ID").replace(&dir.display().to_string(), "DIR");
    let started = regex::Regex::new(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?Z").unwrap();
    let seconds = regex::Regex::new(r"\b\d+\.\ds\b").unwrap();
    let millis = regex::Regex::new(r#"(duration_ms(&quot;|")?[:=])\d+"#).unwrap();
    // Branch results hold branch durations, and the report cuts the value at 200 characters.
    let results =
        regex::Regex::new(r"(parallel\.results`?(</code>)?(\s*\|\s*|</td><td>|: ))\[[^\n]*?…").unwrap();
    let text = results.replace_all(&text, "${1}[…]");
    let text = started.replace_all(&text, "TIME");
    let text = millis.replace_all(&text, "${1}N");
    seconds.replace_all(&text, "Ts").into_owned()
}

/// Compares with `tests/fixtures/reports/<name>`, or writes it when FABRO_BLESS is set.
fn golden(name: &str, actual: &str) {
    let path = common::repo_root().join("tests/fixtures/reports").join(name);
    if std::env::var_os("FABRO_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(expected == actual, "{name} differs from the golden file; got:\n{actual}");
}

#[test]
fn reports_of_a_run_with_every_stage_kind_match_the_golden_files() {
    let fixtures = common::repo_root().join("tests/fixtures/reports");
    let read = |name: &str| std::fs::read_to_string(fixtures.join(name)).unwrap();
    let ran = Test::new()
        .file("every_kind.dot", &read("every_kind.dot"))
        .file("parts/child.dot", &read("parts/child.dot"))
        .file("responses.json", &read("responses.json"))
        .file("answers.json", &read("answers.json"))
        .args([
            "run",
            "every_kind.dot",
            "--responses",
            "responses.json",
            "--answers",
            "answers.json",
            "--run-dir",
            "run",
            "--output",
            "out/report.html",
            "-q",
        ])
        .status(0)
        .stderr_contains("report: out/report.html")
        .run();
    let dir = ran.dir.path();
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run/manifest.json")).unwrap()).unwrap();
    let run_id = manifest["run_id"].as_str().unwrap().to_string();
    let (code, markdown, stderr) = fabro(dir, &["report", "run"]);
    assert_eq!(code, Some(0), "{stderr}");
    golden("every_kind.md", &normalize(&markdown, &run_id, dir));
    let html = std::fs::read_to_string(dir.join("out/report.html")).unwrap();
    golden("every_kind.html", &normalize(&html, &run_id, dir));
    assert!(
        !html.contains("<script") && !html.contains("src=") && !html.contains("href=\"http"),
        "self-contained HTML"
    );
    assert!(html.contains("<h2>Context usage</h2>\n<svg"), "the chart is inline");
    // --format and -o agree with what the file name asks.
    let (code, _, _) = fabro(dir, &["report", "--last", "--format", "html", "-o", "again.html"]);
    assert_eq!(code, Some(2), "--last looks in .fabro/runs, which has no run here");
    let (code, _, _) = fabro(dir, &["report", "run", "-o", "again.html"]);
    assert_eq!(code, Some(0));
    assert_eq!(std::fs::read_to_string(dir.join("again.html")).unwrap(), html);
}

const STEPPED: &str = r#"digraph stepped {
    goal = "Add a health endpoint"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    plan [shape=tab, prompt="Plan: $goal"]
    test [shape=parallelogram, script="echo ok"]
    implement [prompt="Implement: $goal"]
    start -> plan -> test -> implement -> exit
}
"#;

#[test]
fn step_mode_notes_reach_the_next_llm_stage_and_survive_a_pause() {
    use common::pty::Terminal;
    let test = Test::new().workflow(STEPPED);
    let dir = test.path("");
    let mut terminal = Terminal::spawn(fabro_command(
        &dir,
        &["run", "workflow.dot", "--simulate", "--step", "--run-dir", "run"],
    ));
    terminal.wait_for("step> ", 1);
    assert!(terminal.screen().contains("── step: `start` (visit 1) ended success"), "{}", terminal.screen());
    terminal.type_line("");
    terminal.wait_for("step> ", 2);
    assert!(terminal.screen().contains("next: test"), "{}", terminal.screen());
    terminal.type_line("Use the v2 API");
    terminal.wait_for("step> ", 3);
    assert!(
        terminal.screen().contains("set: command.exit_code, command.output, command.stderr"),
        "{}",
        terminal.screen()
    );
    terminal.type_line("q");
    let status = terminal.wait();
    assert_eq!(status.code(), Some(3), "{}", terminal.screen());
    assert!(terminal
        .screen()
        .contains("paused: step mode: stopped after `test`; the run goes on at `implement`"));

    // The note is in the checkpoint, waiting; the paused run resumes at `implement`, which gets it.
    let checkpoint: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run/checkpoint.json")).unwrap()).unwrap();
    assert_eq!(checkpoint["status"], "paused");
    assert_eq!(checkpoint["next_node"], "implement");
    assert_eq!(checkpoint["context"]["internal.operator_notes"], serde_json::json!(["Use the v2 API"]));
    let (code, _, stderr) = fabro(&dir, &["resume", "run"]);
    assert_eq!(code, Some(0), "{stderr}");
    let prompt = std::fs::read_to_string(dir.join("run/stages/implement/1/prompt.md")).unwrap();
    assert!(prompt.contains("## Note from the operator\n\nUse the v2 API\n"), "{prompt}");
    let status: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.join("run/stages/implement/1/status.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(status["operator_notes"], serde_json::json!(["Use the v2 API"]));
    let plan = std::fs::read_to_string(dir.join("run/stages/plan/1/prompt.md")).unwrap();
    assert!(!plan.contains("Note from the operator"), "notes go to the next LLM stage only");
}

#[test]
fn step_mode_needs_a_terminal() {
    let ran = Test::new()
        .workflow(STEPPED)
        .args(["run", "workflow.dot", "--simulate", "--step", "--run-dir", "run"])
        .status(2)
        .stderr_contains("--step asks after every stage on a terminal")
        .run();
    assert!(!ran.dir.path().join("run").exists());
}
