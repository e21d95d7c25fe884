//! What command stages may do: how much they may write, how long their processes live, which
//! context keys they may set.

use crate::common;

use common::Test;

#[test]
fn output_past_max_output_stops_the_stage_and_the_log_keeps_head_and_tail() {
    let workflow = r#"digraph flood {
    allow_lints="failure_path"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    flood [shape=parallelogram, script="echo first line; yes"]
    start -> flood -> exit
}
"#;
    let ran = Test::new()
        .workflow(workflow)
        .args(["run", "workflow.dot", "--run-dir", "run", "--max-output", "1MB", "-q"])
        .status(1)
        .stderr_contains("more than max_output=976.6 KiB; it was stopped")
        .run();
    let log = std::fs::read(ran.dir.path().join("run/stages/flood/1/stdout.log")).unwrap();
    assert!(log.len() < 1_100_000, "{} bytes kept", log.len());
    let text = String::from_utf8_lossy(&log);
    assert!(text.starts_with("first line\ny\n"), "the head is kept");
    assert!(text.contains("bytes left out: the output passed max_output"), "the cut is marked");
    assert!(text.ends_with("y\n") || text.ends_with('y'), "the tail is kept");

    // The node's own max_output wins over --max-output.
    let own = workflow
        .replace("script=\"echo first line; yes\"", "script=\"echo first line; yes\", max_output=2000");
    Test::new()
        .workflow(&own)
        .args(["run", "workflow.dot", "--run-dir", "run", "--max-output", "1GiB", "-q"])
        .status(1)
        .stderr_contains("more than max_output=2.0 KiB")
        .run();
    Test::new()
        .workflow(workflow)
        .args(["run", "workflow.dot", "--max-output", "lots"])
        .status(2)
        .stderr_contains("`lots` is not a size (e.g. 500MB, 1GiB)")
        .run();
}

/// True when a process of group `pgid` is running (zombies waiting for a parent to reap them, such
/// as orphans reparented to an init that does not, do not count).
fn group_alive(pgid: i32) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else { return false };
        let Some(rest) = stat.rfind(')').map(|at| &stat[at + 1..]) else { return false };
        let fields: Vec<&str> = rest.split_whitespace().collect();
        // After the name: state, ppid, pgrp.
        fields.len() > 2 && fields[2] == pgid.to_string() && fields[0] != "Z"
    })
}

/// The process group of process `pid`, while it runs.
fn group_of(pid: i32) -> Option<i32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = &stat[stat.rfind(')')? + 1..];
    rest.split_whitespace().nth(2)?.parse().ok()
}

/// fabro's process-group watcher: its child named `fabro-watcher`.
fn watcher_of(fabro: i32) -> Option<i32> {
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|entry| {
        let pid: i32 = entry.file_name().to_str()?.parse().ok()?;
        let comm = std::fs::read_to_string(entry.path().join("comm")).ok()?;
        let stat = std::fs::read_to_string(entry.path().join("stat")).ok()?;
        let parent: i32 = stat[stat.rfind(')')? + 1..].split_whitespace().nth(1)?.parse().ok()?;
        (comm.trim() == "fabro-watcher" && parent == fabro).then_some(pid)
    })
}

/// Waits up to a second for group `pgid` to be gone.
fn gone_within_a_second(pgid: i32, what: &str) {
    let since = std::time::Instant::now();
    while group_alive(pgid) {
        assert!(since.elapsed() < std::time::Duration::from_secs(1), "{what} outlived fabro by a second");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
}

const SLOW_WORKFLOW: &str = r#"digraph slow {
    allow_lints="failure_path"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=parallelogram, script="if [ -f again ]; then echo second run; else sleep 30 & touch again; wait; echo first run; fi"]
    start -> work -> exit
}
"#;

/// Starts a run of [`SLOW_WORKFLOW`] and returns fabro and the work stage's process group once
/// the script runs.
fn slow_stage_running(dir: &std::path::Path) -> (std::process::Child, i32) {
    let fabro =
        common::fabro_command(dir, &["run", "workflow.dot", "--run-dir", "run", "-q"]).spawn().unwrap();
    let record = dir.join("run/stages/work/1.process.json");
    common::wait_for_file(&record, "the work stage");
    common::wait_for_file(&dir.join("again"), "the script");
    let process: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(&record).unwrap()).unwrap();
    (fabro, process["pgid"].as_i64().unwrap() as i32)
}

#[test]
fn a_stages_processes_die_with_a_killed_fabro() {
    let test = Test::new().workflow(SLOW_WORKFLOW);
    let dir = test.path("");
    let (mut fabro, pgid) = slow_stage_running(&dir);
    assert!(group_alive(pgid));
    fabro.kill().unwrap();
    fabro.wait().unwrap();
    gone_within_a_second(pgid, "the stage");
}

#[test]
fn what_an_agents_shell_command_left_running_dies_with_a_killed_fabro() {
    use common::llm_server::{anthropic_text, anthropic_tools, LlmServer};
    let server = LlmServer::start(
        vec![
            anthropic_tools(
                "Starting a server.",
                &[(
                    "t1",
                    "shell",
                    serde_json::json!({"command": "sleep 30 >/dev/null 2>&1 & echo $! > server.pid"}),
                )],
            ),
            anthropic_tools(
                "Waiting.",
                &[("t2", "shell", serde_json::json!({"command": "touch waiting; sleep 30"}))],
            ),
            anthropic_text("Done.", 100, 10),
        ],
        vec![],
    );
    let workflow = "digraph agent {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  \
                    serve [shape=box, prompt=\"Start a server\", llm_model=\"claude-sonnet-4-5\"]\n  \
                    start -> serve -> exit\n}\n";
    let test = Test::new().workflow(workflow);
    let dir = test.path("");
    let mut fabro = common::fabro_command(&dir, &["run", "workflow.dot", "--run-dir", "run", "-q"])
        .env("ANTHROPIC_BASE_URL", server.url(""))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .spawn()
        .unwrap();
    common::wait_for_file(&dir.join("waiting"), "the second shell command");
    let server_pid: i32 = std::fs::read_to_string(dir.join("server.pid")).unwrap().trim().parse().unwrap();
    // The first command's shell has ended; its group lives on in the background `sleep`.
    let pgid = group_of(server_pid).expect("the background sleep runs");
    assert_ne!(pgid, server_pid);
    fabro.kill().unwrap();
    fabro.wait().unwrap();
    gone_within_a_second(pgid, "the background sleep");
}

#[test]
fn a_resume_kills_what_a_killed_fabro_left_running_before_the_stage_runs_again() {
    let test = Test::new().workflow(SLOW_WORKFLOW);
    let dir = test.path("");
    let (mut fabro, pgid) = slow_stage_running(&dir);
    // fabro's watcher, fabro and the script's shell die, as if the machine's OOM killer took them
    // all: nothing cleans up, and the script's `sleep` lives on in the group. (In this order, so
    // that neither fabro nor the watcher sees the shell end and stops the group.)
    let watcher = watcher_of(fabro.id() as i32).expect("fabro's watcher runs");
    // SAFETY: signalling processes this test started.
    unsafe { libc::kill(watcher, libc::SIGKILL) };
    fabro.kill().unwrap();
    fabro.wait().unwrap();
    // SAFETY: as above.
    unsafe { libc::kill(pgid, libc::SIGKILL) };
    std::thread::sleep(std::time::Duration::from_millis(300));
    assert!(group_alive(pgid), "the script's sleep outlived fabro and the watcher");

    let resumed = common::fabro_command(&dir, &["resume", "run"]).output().unwrap();
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert_eq!(resumed.status.code(), Some(0), "{stderr}");
    assert!(
        stderr.contains(&format!("killed process group {pgid} that stages/work/1 left running")),
        "{stderr}"
    );
    assert!(!group_alive(pgid), "the survivor is gone");
    let output = std::fs::read_to_string(dir.join("run/stages/work/1.2/stdout.log")).unwrap();
    assert_eq!(output, "second run\n");
    assert!(!dir.join("run/stages/work/1.2.process.json").exists(), "a finished stage leaves no record");
}

#[test]
fn a_double_ctrl_c_leaves_no_stage_process_behind() {
    for attempt in 0..5 {
        let test = Test::new().workflow(SLOW_WORKFLOW);
        let dir = test.path("");
        let (mut fabro, pgid) = slow_stage_running(&dir);
        let pid = fabro.id() as i32;
        // SAFETY: signalling the fabro this test started, twice, as two Ctrl-C presses do.
        unsafe { libc::kill(pid, libc::SIGINT) };
        std::thread::sleep(std::time::Duration::from_millis(attempt * 5));
        unsafe { libc::kill(pid, libc::SIGINT) };
        fabro.wait().unwrap();
        let exited = std::time::Instant::now();
        while group_alive(pgid) {
            assert!(
                exited.elapsed() < std::time::Duration::from_secs(1),
                "attempt {attempt}: the stage outlived fabro"
            );
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
    }
}

#[test]
fn a_stage_cannot_overwrite_engine_keys() {
    let workflow = r#"digraph keys {
    goal="the real goal"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    forge [shape=parallelogram, script="echo '{\"outcome\": \"success\", \"context_updates\": {\"graph.goal\": \"forged\", \"internal.run_id\": \"forged\", \"current_node\": \"x\", \"mine\": \"kept\"}}' > \"$FABRO_STAGE_DIR/status.json\""]
    start -> forge -> exit
}
"#;
    let test = Test::new().workflow(workflow);
    let dir = test.path("");
    let ran = common::fabro_in(&dir, &["run", "workflow.dot", "--run-dir", "run", "-q"]);
    assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    let checkpoint: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run/checkpoint.json")).unwrap()).unwrap();
    let context = &checkpoint["context"];
    assert_eq!(context["graph.goal"], "the real goal");
    assert_ne!(context["internal.run_id"], "forged");
    assert_eq!(context["mine"], "kept");
    let events = std::fs::read_to_string(dir.join("run/events.jsonl")).unwrap();
    let refused: Vec<serde_json::Value> = events
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|event| event["event"] == "context.update_refused")
        .collect();
    let keys: Vec<&str> = refused.iter().map(|event| event["key"].as_str().unwrap()).collect();
    assert_eq!(keys, ["current_node", "graph.goal", "internal.run_id"]);
    let status: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("run/stages/forge/1/status.json")).unwrap())
            .unwrap();
    assert!(status["context_updates"].get("graph.goal").is_none(), "{status}");
}

#[test]
fn auto_status_makes_a_command_without_a_status_file_succeed() {
    let workflow = |attributes: &str, script: &str| {
        format!(
            "digraph auto {{\n  allow_lints=\"failure_path\"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  \
             check [shape=parallelogram, {attributes} script=\"{script}\"]\n  start -> check -> exit\n}}\n"
        )
    };
    let run = |text: String| {
        let test = Test::new().workflow(&text);
        let dir = test.path("");
        let ran = common::fabro_in(&dir, &["run", "workflow.dot", "--run-dir", "run", "-q"]);
        let status: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(dir.join("run/stages/check/1/status.json")).unwrap(),
        )
        .unwrap();
        (ran.status.code(), status)
    };
    let (code, status) = run(workflow("auto_status=true,", "exit 1"));
    assert_eq!(code, Some(0));
    assert_eq!(status["outcome"], "success");
    assert!(status["notes"].as_str().unwrap().contains("auto_status: no status.json"), "{status}");
    // Without it, the exit code decides; with it, a status file still does.
    assert_eq!(run(workflow("", "exit 1")).0, Some(1));
    let reported =
        r#"echo '{\"outcome\": \"fail\", \"failure_reason\": \"said so\"}' > $FABRO_STAGE_DIR/status.json"#;
    let (code, status) = run(workflow("auto_status=true,", reported));
    assert_eq!(code, Some(1));
    assert_eq!(status["failure_reason"], "said so");
}
