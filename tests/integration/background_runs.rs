//! Runs in the background: `fabro run --detach` checks the workflow, starts the run in a process
//! of its own and returns its id; `fabro wait` returns the run's exit code; `fabro cancel` stops
//! it as Ctrl-C would. All of it works through the run directory, from any terminal.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::fabro_in;

/// `go` waits for the test's go-ahead (a file), so a run is seen running before it ends.
const GATED: &str = r#"digraph gated {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    go [shape=parallelogram, script="echo $$ > go.pid; touch started; while [ ! -f proceed ]; do sleep 0.05; done; echo done > done.txt", timeout="60s"]
    start -> go -> exit
}"#;

/// Waits (at most 60 s: a loaded machine starts processes slowly) until the detached run `id`
/// has started its stage; else fails with what the run printed.
fn wait_until_started(dir: &Path, id: &str) {
    let started = Instant::now();
    while !dir.join("started").exists() {
        if started.elapsed() > Duration::from_secs(60) {
            let run = dir.join(".fabro/runs").join(id);
            let log = std::fs::read_to_string(run.join("output.log")).unwrap_or_default();
            let submission = std::fs::read_to_string(run.join("submission.json")).unwrap_or_default();
            panic!("the detached stage never started; output.log:\n{log}\nsubmission.json:\n{submission}");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

fn dir_with(files: &[(&str, &str)]) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    for (name, text) in files {
        std::fs::write(dir.path().join(name), text).unwrap();
    }
    dir
}

fn text(output: &std::process::Output) -> (String, String) {
    (
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

/// Starts `workflow.dot` in the background in `dir`; its id.
fn detach(dir: &Path) -> String {
    let started = Instant::now();
    let output = fabro_in(dir, &["run", "workflow.dot", "--detach", "-q"]);
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(started.elapsed() < Duration::from_secs(10));
    let id = stdout.trim().to_string();
    assert!(uuid::Uuid::try_parse(&id).is_ok(), "{stdout}");
    assert!(stderr.contains(&format!("fabro wait {id}")), "{stderr}");
    id
}

#[test]
fn a_detached_run_goes_on_without_its_terminal_and_wait_returns_its_exit_code() {
    let dir = dir_with(&[("workflow.dot", GATED)]);
    let id = detach(dir.path());
    // The command returned while the stage runs.
    wait_until_started(dir.path(), &id);
    assert!(!dir.path().join("done.txt").exists());
    let run_dir = dir.path().join(".fabro/runs").join(&id);
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["run_id"], id.as_str(), "the run has the id --detach printed");
    // Its process leads a session of its own (no terminal to hang up).
    let submission: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("submission.json")).unwrap()).unwrap();
    let pid = submission["process"]["pid"].as_i64().unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap();
    let session = stat.rsplit(')').next().unwrap().split_whitespace().nth(3).unwrap();
    assert_eq!(session, pid.to_string(), "{stat}");
    // A wait with a timeout gives up with 124 and leaves the run alone.
    let waited = fabro_in(dir.path(), &["wait", &id, "--timeout", "300ms"]);
    assert_eq!(waited.status.code(), Some(124));
    std::fs::write(dir.path().join("proceed"), "").unwrap();
    // By a unique prefix of its id, as `fabro runs` lists it.
    let waited = fabro_in(dir.path(), &["wait", &id[..13]]);
    let (_, stderr) = text(&waited);
    assert_eq!(waited.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("succeeded"), "{stderr}");
    assert_eq!(std::fs::read_to_string(dir.path().join("done.txt")).unwrap(), "done\n");
    // What the run printed is in its output.log.
    let log = std::fs::read_to_string(run_dir.join("output.log")).unwrap();
    assert!(log.contains("succeeded") || log.is_empty(), "{log}");

    // A failing run: wait exits 1 with the reason.
    let failing = GATED.replace(
        "echo $$ > go.pid; touch started; while [ ! -f proceed ]; do sleep 0.05; done; echo done > done.txt",
        "exit 4",
    );
    std::fs::write(dir.path().join("workflow.dot"), failing).unwrap();
    let id = detach(dir.path());
    let waited = fabro_in(dir.path(), &["wait", &id]);
    let (_, stderr) = text(&waited);
    assert_eq!(waited.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("failed: stage `go` failed: command exited with code 4"), "{stderr}");
}

#[test]
fn cancel_stops_a_detached_run_which_resume_then_finishes() {
    let dir = dir_with(&[("workflow.dot", GATED)]);
    let id = detach(dir.path());
    wait_until_started(dir.path(), &id);
    let canceled = fabro_in(dir.path(), &["cancel", &id]);
    let (_, stderr) = text(&canceled);
    assert_eq!(canceled.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("stopped: interrupted"), "{stderr}");
    let waited = fabro_in(dir.path(), &["wait", &id]);
    assert_eq!(waited.status.code(), Some(130), "{}", text(&waited).1);
    // The stage's process went with it; nothing is left running the loop.
    let pid = std::fs::read_to_string(dir.path().join("go.pid")).unwrap();
    let stat = std::fs::read_to_string(format!("/proc/{}/stat", pid.trim())).unwrap_or_default();
    let running =
        stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z') && !rest.is_empty());
    assert!(!running, "the stage's shell outlived the cancel: {stat}");
    // A cancel of a run that ended says so.
    let again = fabro_in(dir.path(), &["cancel", &id]);
    assert_eq!(again.status.code(), Some(2));
    assert!(text(&again).1.contains("is interrupted: there is nothing to cancel"), "{}", text(&again).1);
    std::fs::write(dir.path().join("proceed"), "").unwrap();
    let resumed = fabro_in(dir.path(), &["resume", &id, "-q"]);
    assert_eq!(resumed.status.code(), Some(0), "{}", text(&resumed).1);
    assert!(dir.path().join("done.txt").exists());
}

#[test]
fn a_workflow_that_cannot_run_is_refused_before_anything_is_detached() {
    let broken = GATED.replace("go [shape=parallelogram", "go [shape=parallelogram, max_retires=2");
    let dir = dir_with(&[("workflow.dot", &broken)]);
    let output = fabro_in(dir.path(), &["run", "workflow.dot", "--detach"]);
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stdout.is_empty(), "no run id: {stdout}");
    assert!(stderr.contains("max_retires"), "{stderr}");
    let runs = dir.path().join(".fabro/runs");
    assert!(
        !runs.exists() || std::fs::read_dir(&runs).unwrap().next().is_none(),
        "no run directory was made"
    );
    // --run-id is checked.
    let output = fabro_in(dir.path(), &["run", "workflow.dot", "--run-id", "../../x"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output).1.contains("is not a run id"), "{}", text(&output).1);
}

/// The deploy gate, whose `deploy` waits for the test's go-ahead (`proceed`).
fn gate_then_work() -> String {
    common::DEPLOY_GATE.replace(
        "script=\"touch deployed\"",
        "script=\"while [ ! -f proceed ]; do sleep 0.05; done; echo deployed > deployed\"",
    )
}

/// Waits until the detached run `id` has paused at its gate.
fn wait_until_paused(dir: &Path, id: &str) {
    let waited = fabro_in(dir, &["wait", id, "--timeout", "60s"]);
    assert_eq!(waited.status.code(), Some(3), "{}", text(&waited).1);
}

#[test]
fn attach_shows_a_detached_run_asks_its_gate_at_the_terminal_and_follows_the_resume_to_the_end() {
    let dir = dir_with(&[("workflow.dot", &gate_then_work())]);
    let id = detach(dir.path());
    // Nobody answers a detached run: it pauses at the gate.
    wait_until_paused(dir.path(), &id);
    let mut terminal =
        common::pty::Terminal::spawn(common::fabro_command(dir.path(), &["attach", &id[..13]]));
    // What happened before attaching, then the question.
    terminal.wait_for("start: success", 1);
    terminal.wait_for("[A] Approve -> deploy", 1);
    terminal.wait_for("> ", 1);
    terminal.type_line("a");
    // The answer resumed the run in a process of its own; attach shows its stage running.
    let deadline = Instant::now() + Duration::from_secs(60);
    while !terminal.screen().contains("deploy")
        || !dir.path().join(".fabro/runs").join(&id).join("run.lock").exists()
    {
        assert!(Instant::now() < deadline, "{}", terminal.screen());
        std::thread::sleep(Duration::from_millis(50));
    }
    std::fs::write(dir.path().join("proceed"), "").unwrap();
    let status = terminal.wait();
    assert_eq!(status.code(), Some(0), "{}", terminal.screen());
    terminal.wait_for("deploy: success", 1);
    terminal.wait_for("succeeded", 1);
    assert!(dir.path().join("deployed").exists());
    assert!(!dir.path().join("revised").exists());
    // The resume went on in its own process: its session is not the terminal's.
    let submission: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join(".fabro/runs").join(&id).join("submission.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(submission["args"][0], "resume", "{submission}");
    // Attached to a finished run, it shows its history and its exit code.
    let again = fabro_in(dir.path(), &["attach", &id]);
    let (_, stderr) = text(&again);
    assert_eq!(again.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains("deploy") && stderr.contains("succeeded"), "{stderr}");
}

#[test]
fn attach_without_a_terminal_or_with_no_answer_leaves_a_waiting_gate_and_exits_3() {
    let dir = dir_with(&[("workflow.dot", &gate_then_work())]);
    let id = detach(dir.path());
    wait_until_paused(dir.path(), &id);
    for args in [vec!["attach", id.as_str()], vec!["attach", id.as_str(), "--no-answer"]] {
        let attached = fabro_in(dir.path(), &args);
        let (_, stderr) = text(&attached);
        assert_eq!(attached.status.code(), Some(3), "{stderr}");
        assert!(stderr.contains("paused; continue it with: fabro resume"), "{stderr}");
    }
    let mut terminal =
        common::pty::Terminal::spawn(common::fabro_command(dir.path(), &["attach", &id, "--no-answer"]));
    assert_eq!(terminal.wait().code(), Some(3), "{}", terminal.screen());
    assert!(!terminal.screen().contains("[?]"), "{}", terminal.screen());
    // Nothing was answered.
    let manifest: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join(".fabro/runs").join(&id).join("manifest.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["status"], "paused");
}
