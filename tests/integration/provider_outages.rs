//! A model provider that goes away: calls are retried with backoff over the retry window
//! (`llm.retry` events), then the run pauses (exit 3, pause kind `provider`) and `fabro resume`
//! continues the stage once the server is back; a provider that is not there when a run starts
//! is waited for, then the run is refused (exit 2). Authentication errors fail at once.

use crate::common;

use std::path::Path;
use std::time::{Duration, Instant};

use common::llm_server::{openai_text, LlmServer, Reply, ServerOptions};
use common::{fabro_command, Test};
use serde_json::Value;

const PLAN_AND_REVIEW: &str = r#"digraph outage {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    plan [shape=tab, prompt="Plan the change", llm_model="test-model"]
    review [shape=tab, prompt="Review the plan", llm_model="test-model"]
    start -> plan -> review -> exit
}"#;

/// A config file with the OpenAI-compatible server `local` at `base_url`, serving `test-model`,
/// with `retry_window` (the provider's own).
fn config(base_url: &str, retry_window: &str) -> String {
    format!(
        "max_retries = 0\n\n[providers.local]\nbase_url = \"{base_url}\"\nmodels = [\"test-model\"]\n\
         retry_window = \"{retry_window}\"\n"
    )
}

fn events(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("events.jsonl"))
        .expect("events.jsonl")
        .lines()
        .map(|line| serde_json::from_str(line).expect("an event"))
        .collect()
}

fn named(events: &[Value], name: &str) -> Vec<Value> {
    events.iter().filter(|event| event["event"] == name).cloned().collect()
}

fn json_file(path: &Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(path).expect("a JSON file")).expect("JSON")
}

#[test]
fn a_provider_that_goes_away_pauses_the_run_and_resume_finishes_it_once_it_is_back() {
    // The server answers the check before the run and the plan stage, then stops listening.
    let options = ServerOptions { close_when_done: true, ..ServerOptions::default() };
    let server = LlmServer::start_with(vec![openai_text("1. change it", 10, 5)], vec![], options);
    let base_url = server.url("/v1");
    let started = Instant::now();
    let ran = Test::new()
        .workflow(PLAN_AND_REVIEW)
        .file("config.toml", &config(&base_url, "2s"))
        .env("FABRO_CONFIG", "config.toml")
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(3)
        .stderr_contains(&format!("paused: provider `local` at {base_url} could not be reached for 2."))
        .stderr_contains("Connection refused")
        .stderr_contains("`fabro resume ")
        .stderr_contains("continues the stage once it is back")
        .run();
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    let run = ran.dir.path().join("run");
    let log = events(&run);

    // Each attempt at the review failed, said why and when the next comes.
    let retries = named(&log, "llm.retry");
    assert!(retries.len() >= 2, "{retries:?}");
    for (index, retry) in retries.iter().enumerate() {
        assert_eq!(retry["node_id"], "review");
        assert_eq!(retry["provider"], "local");
        assert_eq!(retry["attempt"], index as u64 + 1);
        assert!(retry["delay_ms"].as_u64().is_some_and(|ms| ms <= 2000), "{retry}");
        assert!(retry["error"].as_str().unwrap().contains("cannot connect to"), "{retry}");
    }
    // Paused for the provider: in the event, the manifest and `fabro inspect`; not failed.
    let paused = named(&log, "run.paused");
    assert_eq!(paused.len(), 1);
    assert_eq!(paused[0]["kind"], "provider");
    assert_eq!(paused[0]["node_id"], "review");
    assert!(named(&log, "stage.failed").is_empty());
    let manifest = json_file(&run.join("manifest.json"));
    assert_eq!(manifest["status"], "paused");
    assert_eq!(manifest["pause"]["kind"], "provider");
    assert!(manifest["pause"]["reason"].as_str().unwrap().contains(&base_url));
    let inspect = fabro_command(ran.dir.path(), &["inspect", "run"]).output().unwrap();
    let shown = String::from_utf8_lossy(&inspect.stdout);
    assert!(shown.contains("paused (provider)"), "{shown}");

    // The server is back on the same port: the resume runs the review (only) and finishes.
    let options = ServerOptions { port: server.port, ..ServerOptions::default() };
    let back = LlmServer::start_with(vec![openai_text("looks right", 10, 5)], vec![], options);
    let resumed = fabro_command(ran.dir.path(), &["resume", "run"])
        .env("FABRO_CONFIG", "config.toml")
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert_eq!(resumed.status.code(), Some(0), "{stderr}");
    assert_eq!(back.requests().len(), 1, "the plan stage is not run again");
    let result = json_file(&run.join("result.json"));
    let stages: Vec<(&str, &str)> = result["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|stage| (stage["node_id"].as_str().unwrap(), stage["status"].as_str().unwrap()))
        .collect();
    assert_eq!(
        stages,
        [("start", "success"), ("plan", "success"), ("review", "success"), ("exit", "success")]
    );
    let manifest = json_file(&run.join("manifest.json"));
    assert_eq!(manifest["status"], "succeeded");
    assert!(manifest.get("pause").is_none(), "{manifest}");
}

#[test]
fn a_server_answering_503_for_a_while_is_waited_for_within_the_window() {
    let unavailable = || Reply::status(503, r#"{"error": {"message": "Loading model"}}"#);
    let server =
        LlmServer::start(vec![unavailable(), unavailable(), openai_text("1. change it", 10, 5)], vec![]);
    let workflow = PLAN_AND_REVIEW.replace("plan -> review -> exit", "plan -> exit");
    // max_retries = 0: a server that cannot serve yet is not "busy", so the window alone counts.
    let ran = Test::new()
        .workflow(&workflow)
        .file("config.toml", &config(&server.url("/v1"), "4s"))
        .env("FABRO_CONFIG", "config.toml")
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(0)
        .run();
    let log = events(&ran.dir.path().join("run"));
    let retries = named(&log, "llm.retry");
    assert_eq!(retries.len(), 2, "{retries:?}");
    assert!(retries[0]["error"].as_str().unwrap().contains("HTTP 503: Loading model"), "{retries:?}");
    assert_eq!((retries[0]["attempt"].as_u64(), retries[1]["attempt"].as_u64()), (Some(1), Some(2)));
    assert!(named(&log, "stage.retrying").is_empty());
    assert_eq!(server.requests().len(), 3);
}

#[test]
fn a_refused_key_fails_the_stage_at_once_and_resume_says_how_to_run_it_again() {
    let refused = Reply::status(401, r#"{"error": {"message": "invalid api key"}}"#);
    let options = ServerOptions { close_when_done: true, ..ServerOptions::default() };
    let server = LlmServer::start_with(vec![refused], vec![], options);
    let started = Instant::now();
    let ran = Test::new()
        .workflow(PLAN_AND_REVIEW)
        .file("config.toml", &config(&server.url("/v1"), "30s"))
        .env("FABRO_CONFIG", "config.toml")
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(1)
        .stderr_contains("HTTP 401: invalid api key (check the API key)")
        .run();
    assert!(started.elapsed() < Duration::from_secs(10), "{:?}", started.elapsed());
    assert_eq!(server.requests().len(), 1);
    let log = events(&ran.dir.path().join("run"));
    assert!(named(&log, "llm.retry").is_empty());
    assert!(named(&log, "run.paused").is_empty());

    // The run failed for good: a resume says so, and how to run the stage again.
    let fabro = |args: &[&str]| {
        let output = fabro_command(ran.dir.path(), args).env("FABRO_CONFIG", "config.toml").output().unwrap();
        (output.status.code(), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let (code, stderr) = fabro(&["resume", "run"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(
        stderr.contains("already failed (stage `plan` failed for good); there is nothing to resume"),
        "{stderr}"
    );
    assert!(stderr.contains("`fabro rewind run --to start@1`, then `fabro resume run`"), "{stderr}");
    // Once the key is accepted, doing as it says finishes the run.
    let (code, stderr) = fabro(&["rewind", "run", "--to", "start@1"]);
    assert_eq!(code, Some(0), "{stderr}");
    let options = ServerOptions { port: server.port, ..ServerOptions::default() };
    let accepting = LlmServer::start_with(
        vec![openai_text("1. change it", 10, 5), openai_text("fine", 10, 5)],
        vec![],
        options,
    );
    let (code, stderr) = fabro(&["resume", "run"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert_eq!(accepting.requests().len(), 2);
}

#[test]
fn ctrl_c_during_the_wait_for_a_provider_stops_the_run_promptly() {
    // The server answers the check before the run, then is gone.
    let options = ServerOptions { close_when_done: true, ..ServerOptions::default() };
    let server = LlmServer::start_with(vec![], vec![], options);
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("workflow.dot"), PLAN_AND_REVIEW).unwrap();
    std::fs::write(dir.path().join("config.toml"), config(&server.url("/v1"), "60s")).unwrap();
    let mut child = fabro_command(dir.path(), &["run", "workflow.dot", "--run-dir", "run"])
        .env("FABRO_CONFIG", "config.toml")
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let events_path = dir.path().join("run/events.jsonl");
    let waiting = Instant::now();
    while !std::fs::read_to_string(&events_path).is_ok_and(|log| log.contains("llm.retry")) {
        assert!(waiting.elapsed() < Duration::from_secs(20), "no llm.retry event");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(unsafe { libc::kill(child.id() as i32, libc::SIGINT) }, 0);
    let stopping = Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().unwrap() {
            break status;
        }
        assert!(stopping.elapsed() < Duration::from_secs(5), "fabro did not stop during the backoff");
        std::thread::sleep(Duration::from_millis(20));
    };
    assert_eq!(status.code(), Some(130));
    assert_eq!(json_file(&dir.path().join("run/manifest.json"))["status"], "interrupted");
}

#[test]
fn a_provider_that_is_not_there_when_the_run_starts_is_waited_for_then_the_run_is_refused() {
    // A port nothing listens on.
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let base_url = format!("http://127.0.0.1:{port}/v1");
    let started = Instant::now();
    let ran = Test::new()
        .workflow(PLAN_AND_REVIEW)
        .file("config.toml", &config(&base_url, "1s"))
        .env("FABRO_CONFIG", "config.toml")
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(2)
        .stderr_contains(&format!("note: provider `local` at {base_url} cannot be reached"))
        .stderr_contains("waiting up to 1s for it")
        .stderr_contains(&format!("error: provider `local` at {base_url} could not be reached for 1."))
        .stderr_contains(
            "start it (or correct its base_url), or run with --simulate or --dry-run; the run did not start",
        )
        .run();
    assert!(started.elapsed() >= Duration::from_secs(1));
    assert!(!ran.dir.path().join("run").exists(), "nothing was started");

    // A dry run and a simulated run call no provider: nothing to check.
    for flag in ["--dry-run", "--simulate"] {
        Test::new()
            .workflow(PLAN_AND_REVIEW)
            .file("config.toml", &config(&base_url, "30s"))
            .env("FABRO_CONFIG", "config.toml")
            .args(["run", "workflow.dot", "--run-dir", "run", flag])
            .status(0)
            .run();
    }
}
