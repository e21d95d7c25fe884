//! What a new user meets in the first hour: gate answers that must never route by mistake,
//! next steps that work as printed, runs found by id, failures that show why, typos that do not
//! run.

use crate::common;

use common::pty::Terminal;
use common::{fabro_command, Test, DEPLOY_GATE};

#[test]
fn an_answer_naming_no_choice_is_refused_before_the_run_starts() {
    let ran = Test::new()
        .workflow(DEPLOY_GATE)
        .file("answers.json", r#"{"review": ["Request change"]}"#)
        .args(["run", "workflow.dot", "--answers", "answers.json", "--run-dir", "run"])
        .status(2)
        .stderr_contains(
            "answers.json: answer 1 for gate `review`, `Request change`, names none of its choices: \
             [A] Approve, [R] Request changes (did you mean `Request changes`?)",
        )
        .stderr_contains("the run did not start")
        .run();
    assert!(!ran.dir.path().join("deployed").exists(), "a mistyped answer deployed");
    assert!(!ran.dir.path().join("run").exists(), "a run directory was made");

    // Prose at a gate that takes no free text says how to allow it.
    Test::new()
        .workflow(DEPLOY_GATE)
        .file("answers.json", r#"{"review": "nope, not like this"}"#)
        .args(["run", "workflow.dot", "--answers", "answers.json"])
        .status(2)
        .stderr_contains("`nope, not like this`, names none of its choices")
        .stderr_contains("or set human.freeform=true on the gate to accept free text")
        .run();
}

#[test]
fn an_answers_key_that_names_no_gate_lists_the_gates() {
    Test::new()
        .workflow(DEPLOY_GATE)
        .file("answers.json", r#"{"reveiw": ["A"]}"#)
        .args(["run", "workflow.dot", "--answers", "answers.json"])
        .status(2)
        .stderr_contains("answers.json: `reveiw` is not a human gate of this workflow; its gates are: review")
        .run();
}

#[test]
fn answers_are_checked_on_resume_too() {
    let paused =
        Test::new().workflow(DEPLOY_GATE).args(["run", "workflow.dot", "--run-dir", "run"]).status(3).run();
    let dir = paused.dir.path();
    std::fs::write(dir.join("answers.json"), r#"{"review": "deploy it"}"#).unwrap();
    let resumed = fabro_command(dir, &["resume", "run", "--answers", "answers.json"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert_eq!(resumed.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("`deploy it`, names none of its choices"), "{stderr}");
    assert!(!dir.join("deployed").exists());
    // The correct answer then resumes the paused run.
    std::fs::write(dir.join("answers.json"), r#"{"review": "deploy"}"#).unwrap();
    let resumed = fabro_command(dir, &["resume", "run", "--answers", "answers.json"]).output().unwrap();
    assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert!(dir.join("deployed").exists());
}

#[test]
fn a_freeform_gate_takes_text_and_records_it() {
    let workflow = DEPLOY_GATE.replace(
        r#"review [shape=hexagon, label="Ship it?"]"#,
        r#"review [shape=hexagon, label="Ship it?", human.freeform=true]"#,
    );
    let workflow = workflow.replace(
        r#"review -> revise [label="[R] Request changes"]"#,
        r#"review -> revise [label="[R] Request changes", condition="context.human.gate.selected=freeform"]"#,
    );
    let ran = Test::new()
        .workflow(&workflow)
        .file("answers.json", r#"{"review": ["add a changelog entry first"]}"#)
        .args(["run", "workflow.dot", "--answers", "answers.json", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let dir = ran.dir.path();
    assert!(dir.join("revised").exists() && !dir.join("deployed").exists());
    let status: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run/stages/review/1/status.json")).unwrap())
            .unwrap();
    assert_eq!(status["context_updates"]["human.gate.text"], "add a changelog entry first");
}

#[test]
fn at_a_terminal_a_wrong_or_empty_answer_asks_again() {
    let test = Test::new().workflow(DEPLOY_GATE);
    let dir = test.path("");
    let mut terminal = Terminal::spawn(fabro_command(&dir, &["run", "workflow.dot", "--run-dir", "run"]));
    terminal.wait_for("> ", 1);
    terminal.type_line("nope");
    terminal
        .wait_for("[!] `nope` is not one of the choices; type one of: [A] Approve, [R] Request changes", 1);
    terminal.type_line("");
    terminal.wait_for("[!] type one of: [A] Approve, [R] Request changes", 1);
    terminal.type_line("Request change");
    terminal.wait_for("(did you mean `Request changes`?)", 1);
    terminal.type_line("r");
    let status = terminal.wait();
    assert_eq!(status.code(), Some(0), "{}", terminal.screen());
    assert!(dir.join("revised").exists(), "{}", terminal.screen());
    assert!(!dir.join("deployed").exists(), "an unrecognized answer deployed");
}

/// A plan stage (LLM), a gate, then an implement stage (LLM).
const LLM_GATE: &str = r#"digraph feature {
    goal = "Add a health endpoint"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    plan [prompt="Plan the work"]
    review [shape=hexagon, label="Approve the plan?"]
    implement [prompt="Implement the plan"]
    start -> plan -> review
    review -> implement [label="[A] Approve"]
    review -> exit [label="[S] Stop"]
    implement -> exit
}
"#;

fn manifest(dir: &std::path::Path) -> serde_json::Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("manifest.json")).unwrap()).unwrap()
}

#[test]
fn resume_keeps_the_backend_mode_and_model_the_run_started_with() {
    let paused = Test::new()
        .workflow(LLM_GATE)
        .args(["run", "workflow.dot", "--simulate", "--model", "gpt-5.2", "--run-dir", "run"])
        .status(3)
        .stderr_contains("resume with: fabro resume run --answers FILE (or --auto-approve)")
        .run();
    let dir = paused.dir.path();
    assert_eq!(
        manifest(&dir.join("run"))["launch"],
        serde_json::json!({"simulate": true, "model": "gpt-5.2"})
    );

    // The printed hint works as printed: no "no LLM provider".
    let resumed = fabro_command(dir, &["resume", "run", "--auto-approve"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert_eq!(resumed.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains("note: continuing with --simulate --model gpt-5.2, as the run started"),
        "{stderr}"
    );
    assert_eq!(manifest(&dir.join("run"))["launch"]["model"], "gpt-5.2");
}

#[test]
fn resume_from_another_directory_finds_the_responses_file() {
    let responses = r#"{"plan": "1. add the route", "implement": "done"}"#;
    let paused = Test::new()
        .workflow(LLM_GATE)
        .file("responses.json", responses)
        .args(["run", "workflow.dot", "--responses", "responses.json", "--run-dir", "run"])
        .status(3)
        .run();
    let dir = paused.dir.path();
    let elsewhere = tempfile::tempdir().unwrap();
    let run_dir = dir.join("run");
    let resumed = fabro_command(elsewhere.path(), &["resume", run_dir.to_str().unwrap(), "--auto-approve"])
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert_eq!(resumed.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("note: continuing with --responses /"), "{stderr}");
    let response = std::fs::read_to_string(run_dir.join("stages/implement/1/response.md")).unwrap();
    assert!(response.contains("done"), "{response}");

    // --live drops the recorded mode: with no provider configured, the resume is refused.
    let paused = Test::new()
        .workflow(LLM_GATE)
        .args(["run", "workflow.dot", "--simulate", "--run-dir", "run"])
        .status(3)
        .run();
    let live =
        fabro_command(paused.dir.path(), &["resume", "run", "--auto-approve", "--live"]).output().unwrap();
    assert_eq!(live.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&live.stderr).contains("needs an LLM provider, and none is configured"));
}

fn stdout_of(dir: &std::path::Path, args: &[&str]) -> (Option<i32>, String, String) {
    let output = fabro_command(dir, args).output().unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code(), text(&output.stdout), text(&output.stderr))
}

#[test]
fn runs_are_named_by_id_prefix_or_last() {
    let first =
        Test::new().workflow(DEPLOY_GATE).args(["run", "workflow.dot", "--json", "-q"]).status(3).run();
    let dir = first.dir.path();
    let first_id = first.json()["run_id"].as_str().unwrap().to_string();
    let second =
        fabro_command(dir, &["run", "workflow.dot", "--auto-approve", "--json", "-q"]).output().unwrap();
    let second: serde_json::Value = serde_json::from_slice(&second.stdout).unwrap();
    let second_id = second["run_id"].as_str().unwrap().to_string();

    // `fabro runs` shows each run's directory beside its short id.
    let (code, listing, _) = stdout_of(dir, &["runs"]);
    assert_eq!(code, Some(0));
    assert!(listing.lines().next().unwrap().ends_with("DIR"), "{listing}");
    assert!(listing.contains(&format!(".fabro/runs/{first_id}")), "{listing}");

    // The short id as `fabro runs` prints it, the whole id, a path, or --last.
    let short: String = first_id.chars().take(13).collect();
    let (code, inspected, stderr) = stdout_of(dir, &["inspect", &short, "--json"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(inspected.contains(&first_id), "{inspected}");
    let (code, inspected, _) = stdout_of(dir, &["inspect", "--last", "--json"]);
    assert_eq!(code, Some(0));
    assert!(inspected.contains(&second_id), "{inspected}");
    let (code, events, _) = stdout_of(dir, &["logs", &second_id]);
    assert_eq!(code, Some(0));
    assert!(events.contains("run.completed"), "{events}");
    let (code, drawn, stderr) = stdout_of(dir, &["graph", &short]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(drawn.contains("digraph"), "{drawn}");

    // An id that names no run, and one that names two, say so.
    let (code, _, stderr) = stdout_of(dir, &["inspect", "ffff"]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("no run directory or run id `ffff`"), "{stderr}");
    let common: String =
        first_id.chars().zip(second_id.chars()).take_while(|(a, b)| a == b).map(|(a, _)| a).collect();
    let (code, _, stderr) = stdout_of(dir, &["inspect", &common]);
    assert_eq!(code, Some(2));
    assert!(stderr.contains("names 2 runs") || common.is_empty(), "{stderr}");

    // Resume by prefix.
    let (code, _, stderr) = stdout_of(dir, &["resume", &short, "--auto-approve"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(dir.join("deployed").exists());
}

const FAILING_TEST: &str = r#"digraph ci {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    test [shape=parallelogram, script="echo compiling; echo 'error[E0425]: cannot find value `x`' >&2; echo 'test result: FAILED' >&2; exit 3"]
    start -> test -> exit
}
"#;

#[test]
fn a_failed_command_shows_the_end_of_its_output_and_where_its_logs_are() {
    let ran = Test::new()
        .workflow(FAILING_TEST)
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(1)
        .stderr_contains("✗ test: fail in ")
        .stderr_contains("    stderr, last 2 lines:\n    │ error[E0425]: cannot find value `x`\n    │ test result: FAILED\n")
        .stderr_contains("    stdout, last line:\n    │ compiling\n")
        .stderr_contains("    logs: run/stages/test/1/{stdout,stderr}.log")
        .stderr_contains(
            "reason: stage `test` failed: command exited with code 3 (no `outcome=fail` edge, `retry_target` \
             or `fallback_retry_target` from `test`, so the run ends)",
        )
        .run();
    // The lint said so before the run started.
    assert!(ran.stderr().contains("warning[failure_path]"), "{}", ran.stderr());
}

#[test]
fn verbose_streams_command_output_while_it_runs() {
    let workflow = r#"digraph build {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        build [shape=parallelogram, script="echo step one; sleep 0.3; echo step two >&2; sleep 0.3; printf 'no newline'"]
        start -> build -> exit
    }"#;
    let ran = Test::new().workflow(workflow).args(["-v", "run", "workflow.dot"]).status(0).run();
    let stderr = ran.stderr();
    let one = stderr.find("  build │ step one").expect(&stderr);
    let two = stderr.find("  build │ step two").expect(&stderr);
    let last = stderr.find("  build │ no newline").expect(&stderr);
    let done = stderr.find("✓ build: success").expect(&stderr);
    assert!(one < two && two < last && last < done, "{stderr}");
}

#[test]
fn stages_without_a_failure_path_are_pointed_out_and_can_be_accepted() {
    Test::new()
        .workflow(FAILING_TEST)
        .args(["validate", "workflow.dot"])
        .status(0)
        .stdout_contains("warning[failure_path] workflow.dot:4:5 node test: stage `test` has no failure path: if it fails, the run ends")
        .stdout_contains("fix: route failures with an edge like `test -> fix [condition=\"outcome=fail\"]`")
        .run();
    // A failure edge, a retry target, or accepting the lint each silence it.
    let handled = FAILING_TEST.replace(
        "start -> test -> exit",
        "start -> test -> exit\n    test -> exit [condition=\"outcome!=success\"]",
    );
    Test::new()
        .workflow(&handled)
        .args(["validate", "workflow.dot"])
        .status(0)
        .stdout_contains("valid (0 warnings)")
        .run();
    let accepted = FAILING_TEST.replace("digraph ci {", "digraph ci {\n    allow_lints=\"failure_path\"");
    Test::new()
        .workflow(&accepted)
        .args(["validate", "workflow.dot"])
        .status(0)
        .stdout_contains("valid (0 warnings)")
        .run();
    let misspelled = FAILING_TEST.replace("digraph ci {", "digraph ci {\n    allow_lints=\"failure_paths\"");
    Test::new()
        .workflow(&misspelled)
        .args(["validate", "workflow.dot"])
        .status(0)
        .stdout_contains("`allow_lints` names `failure_paths`, which is no lint rule")
        .stdout_contains("did you mean `failure_path`?")
        .run();
}

#[test]
fn the_terminal_view_shows_choices_plain_edges_and_conditionals_in_colour() {
    let workflow = r#"digraph t {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        test [shape=parallelogram, script="exit 1"]
        check [shape=diamond]
        fix [shape=parallelogram, script="true"]
        review [shape=hexagon, label="Ship?"]
        start -> test
        test -> check [condition="outcome=fail"]
        test -> review
        check -> fix [condition="outcome=fail"]
        check -> review
        fix -> review
        review -> exit [label="[A] Approve"]
        review -> test [label="[R] Retry"]
    }"#;
    let test = Test::new().workflow(workflow);
    let dir = test.path("");
    let mut terminal = Terminal::spawn(fabro_command(&dir, &["run", "workflow.dot", "--auto-approve"]));
    let status = terminal.wait();
    let screen = terminal.screen();
    assert_eq!(status.code(), Some(0), "{screen}");
    assert!(screen.contains("◇ check: routes on outcome fail of test"), "{screen}");
    assert!(!screen.contains("check: fail"), "{screen}");
    assert!(screen.contains("review: chose [A] Approve → exit"), "{screen}");
    assert!(!screen.contains("waiting for an answer"), "{screen}");
    assert!(!screen.contains("(weight)"), "{screen}");
    assert!(screen.contains("→ fix (condition)"), "{screen}");
    assert!(screen.contains("\x1b[32m✓\x1b[0m"), "no colour on a terminal: {screen:?}");

    let mut plain = fabro_command(&dir, &["run", "workflow.dot", "--auto-approve"]);
    plain.env("NO_COLOR", "1");
    let mut terminal = Terminal::spawn(plain);
    assert_eq!(terminal.wait().code(), Some(0));
    assert!(!terminal.screen().contains("\x1b[32m"), "NO_COLOR is honoured");
}

#[test]
fn logs_show_command_output_under_its_stage_also_while_following() {
    let workflow = r#"digraph build {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        build [shape=parallelogram, script="echo compiled; sleep 0.5; echo 'warning: unused' >&2"]
        start -> build -> exit
    }"#;
    let test = Test::new().workflow(workflow);
    let dir = test.path("");
    let mut running =
        fabro_command(&dir, &["run", "workflow.dot", "--run-dir", "run", "-q"]).spawn().unwrap();
    common::wait_for_file(&dir.join("run/events.jsonl"), "the run");
    let (code, followed, stderr) = stdout_of(&dir, &["logs", "run", "-f", "--output"]);
    assert_eq!(running.wait().unwrap().code(), Some(0));
    assert_eq!(code, Some(0), "{stderr}");
    let compiled = followed.find("  build │ compiled").expect(&followed);
    let warning = followed.find("  build │ warning: unused").expect(&followed);
    let ended = followed.find("stage.completed     build@1").expect(&followed);
    assert!(compiled < warning && warning < ended, "{followed}");

    // Reading a finished run prints the same, once.
    let (_, read, _) = stdout_of(&dir, &["logs", "run", "--output"]);
    assert_eq!(read.matches("  build │ compiled").count(), 1, "{read}");
    let (_, plain, _) = stdout_of(&dir, &["logs", "run"]);
    assert!(!plain.contains("│"), "{plain}");
}

#[test]
fn a_missing_workdir_is_refused_before_the_run_starts() {
    let ran = Test::new()
        .workflow(FAILING_TEST)
        .args(["run", "workflow.dot", "--workdir", "nowhere", "--run-dir", "run"])
        .status(2)
        .stderr_contains("error: --workdir nowhere does not exist (create it first, or leave --workdir out to work here); the run did not start")
        .run();
    assert!(!ran.dir.path().join("run").exists());

    // A relative --workdir is recorded as an absolute path, so a resume from elsewhere works there.
    let ran = Test::new()
        .workflow(DEPLOY_GATE)
        .file("app/README", "app")
        .args(["run", "workflow.dot", "--workdir", "app", "--run-dir", "run"])
        .status(3)
        .run();
    let recorded = manifest(&ran.dir.path().join("run"))["work_dir"].as_str().unwrap().to_string();
    assert!(std::path::Path::new(&recorded).is_absolute() && recorded.ends_with("/app"), "{recorded}");
    let source = manifest(&ran.dir.path().join("run"))["source_path"].as_str().unwrap().to_string();
    assert!(std::path::Path::new(&source).is_absolute() && source.ends_with("/workflow.dot"), "{source}");
    let elsewhere = tempfile::tempdir().unwrap();
    let run_dir = ran.dir.path().join("run");
    let resumed = fabro_command(elsewhere.path(), &["resume", run_dir.to_str().unwrap(), "--auto-approve"])
        .output()
        .unwrap();
    assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert!(ran.dir.path().join("app/deployed").exists());
}

#[test]
fn runs_never_show_in_git_status() {
    let test = Test::new().workflow(DEPLOY_GATE);
    let dir = test.path("");
    let git = |args: &[&str]| {
        let output = std::process::Command::new("git").args(args).current_dir(&dir).output().unwrap();
        assert!(output.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
        String::from_utf8_lossy(&output.stdout).into_owned()
    };
    git(&["init", "-q"]);
    git(&["-c", "user.name=t", "-c", "user.email=t@t", "add", "workflow.dot"]);
    git(&["-c", "user.name=t", "-c", "user.email=t@t", "commit", "-qm", "workflow"]);
    let run = fabro_command(&dir, &["run", "workflow.dot", "--auto-approve"]).output().unwrap();
    assert_eq!(run.status.code(), Some(0), "{}", String::from_utf8_lossy(&run.stderr));
    assert!(dir.join(".fabro/.gitignore").is_file());
    assert_eq!(git(&["status", "--porcelain"]), "?? deployed\n");
}

#[test]
fn typos_do_not_run() {
    let typo = r#"digraph t {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    implement [prompt="Implement it", timout=5s]
    start -> implment -> exit
    implement -> exit [condition="outcom=success"]
}
"#;
    let ran = Test::new()
        .workflow(typo)
        .args(["run", "workflow.dot", "--simulate", "--run-dir", "run"])
        .status(2)
        .stderr_contains("error[unknown_attribute] workflow.dot:4:39 node implement: unknown attribute `timout` (did you mean `timeout`?)")
        .stderr_contains("error[edge_target_exists] workflow.dot:5:14 node implment: node `implment` is only named by edges and never declared; it runs as a bare agent stage; did you mean `implement`?")
        .stderr_contains("error[condition_key_typo] workflow.dot:6:34 edge implement -> exit: condition reads `outcom`, a context key that nothing sets; did you mean `outcome`?")
        .run();
    assert!(!ran.dir.path().join("run").exists());

    // A merely unknown node is a warning, which --deny-warnings turns into a refusal.
    let unknown =
        "digraph t {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> review -> exit\n}\n";
    Test::new()
        .workflow(unknown)
        .args(["validate", "workflow.dot"])
        .status(0)
        .stdout_contains("warning[edge_target_exists]")
        .run();
    Test::new()
        .workflow(unknown)
        .args(["validate", "workflow.dot", "--deny-warnings"])
        .status(2)
        .stdout_contains("error: --deny-warnings: 2 warning(s) count as errors")
        .run();
    Test::new()
        .workflow(unknown)
        .args(["run", "workflow.dot", "--simulate", "--deny-warnings", "-q"])
        .status(2)
        .stderr_contains("error: --deny-warnings: workflow.dot has 2 warning(s); the run did not start")
        .run();
}

#[test]
fn beginner_syntax_errors_get_the_fix() {
    let with = |statement: &str| {
        format!("digraph t {{\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  {statement}\n  start -> exit\n}}\n")
    };
    for (statement, message, fix) in [
        (
            "plan [prompt=Write a plan]",
            "workflow.dot:4:16: the value of `prompt` has spaces but no quotes, so DOT reads only `Write` as its value",
            "= fix: quote the value: `prompt=\"Write a plan\"`",
        ),
        (
            "plan [prompt='Write a plan']",
            "workflow.dot:4:16: DOT strings use double quotes; `'` does not start a string",
            "= fix: quote the value: `prompt=\"Write a plan\"`",
        ),
        (
            "plan [prompt=\"x\"] # the plan",
            "workflow.dot:4:21: `#` starts a comment only at the beginning of a line",
            "= fix: use `//` for a comment at the end of a line",
        ),
    ] {
        Test::new()
            .workflow(&with(statement))
            .args(["validate", "workflow.dot"])
            .status(2)
            .stderr_contains(&format!("error[syntax] {message}"))
            .stderr_contains(fix)
            .run();
    }
    Test::new()
        .workflow(&with("goal = Add a health endpoint"))
        .args(["validate", "workflow.dot"])
        .status(0)
        .stdout_contains("warning[unquoted_value] workflow.dot:4:14 node a: `a health endpoint` after `goal = Add` are read as new nodes")
        .stdout_contains("= fix: quote the value: `goal = \"Add a health endpoint\"`")
        .run();
    Test::new()
        .workflow("digraph t {\n  start [shape=Mdiamond]\n  exit [shape=box, prompt=\"Done\"]\n  start -> exit\n}\n")
        .args(["validate", "workflow.dot"])
        .status(2)
        .stdout_contains("the node `exit` runs as an agent stage, because an explicit shape or type decides a node's kind")
        .stdout_contains("= fix: give it the exit shape: `exit [shape=Msquare]` (or drop its shape and type)")
        .run();
}

#[test]
fn a_closed_pipe_never_stops_a_run() {
    // `fabro run wf.dot 2>&1 | head -2`: the reader goes away at once.
    let test = Test::new().workflow(FAILING_TEST.replace("exit 3", "exit 0").as_str());
    let dir = test.path("");
    let mut command = fabro_command(&dir, &["run", "workflow.dot", "--run-dir", "run", "--json"]);
    command.stdout(std::process::Stdio::piped()).stderr(std::process::Stdio::piped());
    let mut child = command.spawn().unwrap();
    drop(child.stdout.take());
    drop(child.stderr.take());
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(0), "a closed pipe crashed the run");
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run/result.json")).unwrap()).unwrap();
    assert_eq!(result["status"], "succeeded");
}

#[test]
fn long_context_keys_are_refused_and_never_crash_inspect() {
    // A script sets a 70,000-character key through its status.json.
    let workflow = r#"digraph keys {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    set [shape=parallelogram, script="k=$(head -c 70000 /dev/zero | tr '\0' k); printf '{\"outcome\":\"success\",\"context_updates\":{\"%s\":1,\"fine\":2}}' \"$k\" > \"$FABRO_STAGE_DIR/status.json\""]
    start -> set -> exit
}
"#;
    let ran = Test::new()
        .workflow(workflow)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(1)
        .stderr_contains("the stage set a context key of 70000 characters (`kkkk")
        .stderr_contains("keys may have at most 1024")
        .run();
    let checkpoint: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ran.dir.path().join("run/checkpoint.json")).unwrap())
            .unwrap();
    assert!(checkpoint["context"].get("fine").is_none(), "no update of the refused outcome applies");

    // A run directory holding such a key (written by an older fabro) is shown, cut.
    let checkpoint_path = ran.dir.path().join("run/checkpoint.json");
    let mut edited = checkpoint.clone();
    edited["context"]["k".repeat(70_000)] = serde_json::json!(1);
    std::fs::write(&checkpoint_path, edited.to_string()).unwrap();
    let (code, shown, stderr) = stdout_of(ran.dir.path(), &["inspect", "run"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(shown.contains(&format!("  {}…", "k".repeat(59))), "{shown}");
}

#[test]
fn node_ids_too_long_for_a_directory_name_are_refused() {
    let id = "n".repeat(256);
    let workflow = format!("digraph t {{\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> {id} -> exit\n  {id} [shape=parallelogram, script=\"true\"]\n}}\n");
    Test::new()
        .workflow(&workflow)
        .args(["validate", "workflow.dot"])
        .status(2)
        .stdout_contains("is 256 bytes long; ids name stage directories and may have at most 200")
        .run();
}
