//! Run lifecycle hooks: `[[hooks]]` in a `fabro.toml` beside the workflow (and in the config
//! file) run a command or POST to a URL at a run's start and end, a pause, a stage's start and
//! end, and when a human gate waits; a blocking hook can stop a start; `when` filters.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::Path;

use common::{Ran, Test};
use serde_json::Value;

/// Appends the event's JSON (from stdin) as one line of `hooks.log`.
const RECORD: &str = "{ cat; echo; } >> hooks.log";

const ONE_COMMAND: &str = r#"digraph hooked {
    start [shape=Mdiamond]
    exit  [shape=Msquare]
    work  [shape=parallelogram, script="touch worked"]
    start -> work -> exit
}"#;

const FAILING_COMMAND: &str = r#"digraph hooked {
    start [shape=Mdiamond]
    exit  [shape=Msquare]
    work  [shape=parallelogram, script="echo broken >&2; exit 1"]
    start -> work -> exit
}"#;

const GATE: &str = r#"digraph gated {
    start [shape=Mdiamond]
    exit  [shape=Msquare]
    approve [shape=hexagon, label="Ship it?"]
    start -> approve
    approve -> exit [label="[A] Approve"]
    approve -> exit [label="[R] Reject"]
}"#;

fn hook(event: &str, command: &str) -> String {
    format!("[[hooks]]\nevent = \"{event}\"\ntype = \"command\"\ncommand = '''{command}'''\n")
}

fn hooks_for(events: &[&str]) -> String {
    events.iter().map(|event| hook(event, RECORD)).collect()
}

fn run_dir(ran: &Ran) -> std::path::PathBuf {
    ran.dir.path().join("run")
}

/// A JSON file of the run directory (`result.json`, `stages/work/1/status.json`, ...).
fn run_file(ran: &Ran, name: &str) -> Value {
    let path = run_dir(ran).join(name);
    let text = std::fs::read_to_string(&path).unwrap_or_else(|error| panic!("{}: {error}", path.display()));
    serde_json::from_str(&text).expect("json")
}

/// The events the hooks were told about, in order, as `hooks.log` holds them.
fn told(dir: &Path) -> Vec<Value> {
    let text = std::fs::read_to_string(dir.join("hooks.log")).unwrap_or_default();
    text.lines()
        .filter(|line| !line.is_empty())
        .map(|line| serde_json::from_str(line).expect("json"))
        .collect()
}

fn told_names(dir: &Path) -> Vec<String> {
    told(dir).iter().map(|event| event["event"].as_str().unwrap_or("").to_string()).collect()
}

fn logged(ran: &Ran, name: &str) -> Vec<Value> {
    let text = std::fs::read_to_string(run_dir(ran).join("events.jsonl")).expect("events.jsonl");
    text.lines()
        .map(|line| serde_json::from_str::<Value>(line).expect("json"))
        .filter(|event| event["event"] == name)
        .collect()
}

#[test]
fn a_run_tells_its_hooks_of_its_start_its_stages_and_its_end() {
    let events = ["run_start", "stage_start", "stage_complete", "run_complete", "stage_failed", "run_failed"];
    let ran = Test::new()
        .workflow(ONE_COMMAND)
        .file("fabro.toml", &hooks_for(&events))
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let dir = ran.dir.path();
    assert_eq!(told_names(dir), ["run_start", "stage_start", "stage_complete", "run_complete"]);
    let told = told(dir);
    let run_id = told[0]["run_id"].as_str().expect("run_id");
    for event in &told {
        assert_eq!(event["run_id"], run_id);
        assert_eq!(event["workflow"], "hooked");
        assert!(event["run_dir"].as_str().expect("run_dir").ends_with("run"), "{event}");
    }
    assert_eq!(told[1]["node_id"], "work");
    assert_eq!(told[1]["visit"], 1);
    assert_eq!(told[2]["outcome"], "success");
    assert_eq!(told[3]["outcome"], "succeeded");
    // Routing stages (start, exit) are not stages a hook hears of.
    assert!(told.iter().all(|event| event["node_id"] != "start" && event["node_id"] != "exit"));
    assert_eq!(logged(&ran, "hook.ran").len(), 4);
}

#[test]
fn a_failed_stage_and_run_tell_their_reason() {
    let ran = Test::new()
        .workflow(FAILING_COMMAND)
        .file("fabro.toml", &hooks_for(&["stage_complete", "stage_failed", "run_complete", "run_failed"]))
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(1)
        .run();
    let told = told(ran.dir.path());
    let names: Vec<&str> = told.iter().map(|event| event["event"].as_str().unwrap_or("")).collect();
    assert_eq!(names, ["stage_failed", "run_failed"]);
    assert_eq!(told[0]["node_id"], "work");
    assert_eq!(told[0]["outcome"], "fail");
    assert!(
        told[0]["failure_reason"].as_str().expect("reason").contains("exited with code 1"),
        "{}",
        told[0]
    );
    assert_eq!(told[1]["outcome"], "failed");
    assert!(told[1]["failure_reason"].is_string(), "{}", told[1]);
}

#[test]
fn a_waiting_gate_and_the_pause_it_causes_tell_their_hooks_and_a_resume_goes_on_telling() {
    let ran = Test::new()
        .workflow(GATE)
        .file("fabro.toml", &hooks_for(&["gate_waiting", "run_paused", "run_complete"]))
        .file("answers.json", r#"{"approve": ["A"]}"#)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(3)
        .run();
    let dir = ran.dir.path();
    let told_now = told(dir);
    assert_eq!(told_names(dir), ["gate_waiting", "run_paused"]);
    assert_eq!(told_now[0]["node_id"], "approve");
    assert_eq!(told_now[0]["question"], "Ship it?");
    assert_eq!(told_now[0]["choices"], serde_json::json!(["[A] Approve", "[R] Reject"]));
    assert!(
        told_now[1]["reason"].as_str().expect("reason").contains("waiting for an answer"),
        "{}",
        told_now[1]
    );

    let resumed = common::fabro_in(dir, &["resume", "run", "--answers", "answers.json", "-q"]);
    assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert_eq!(told_names(dir), ["gate_waiting", "run_paused", "gate_waiting", "run_complete"]);
}

#[test]
fn the_event_is_also_in_the_environment() {
    let ran = Test::new()
        .workflow(ONE_COMMAND)
        .file("fabro.toml", &hook("run_start", r#"printf '%s\n' "$FABRO_HOOK_EVENT" > env.json"#))
        .args(["run", "workflow.dot", "-q"])
        .status(0)
        .run();
    let text = std::fs::read_to_string(ran.dir.path().join("env.json")).expect("env.json");
    let event: Value = serde_json::from_str(&text).expect("json");
    assert_eq!(event["event"], "run_start");
}

#[test]
fn config_file_hooks_run_before_the_workflow_s() {
    let ran = Test::new()
        .workflow(ONE_COMMAND)
        .file("config.toml", &hook("run_start", "echo config >> order.log"))
        .file("fabro.toml", &hook("run_start", "echo workflow >> order.log"))
        .env("FABRO_CONFIG", "config.toml")
        .args(["run", "workflow.dot", "-q"])
        .status(0)
        .run();
    let order = std::fs::read_to_string(ran.dir.path().join("order.log")).expect("order.log");
    assert_eq!(order, "config\nworkflow\n");
}

/// Serves one request on a loopback port, answering `status` with `answer`; returns the port and
/// what came.
fn one_request_server(status: u16, answer: &'static str) -> (u16, std::thread::JoinHandle<(String, String)>) {
    let listener = TcpListener::bind("127.0.0.1:0").expect("bind");
    let port = listener.local_addr().expect("addr").port();
    let handle = std::thread::spawn(move || {
        let (stream, _) = listener.accept().expect("accept");
        let mut reader = BufReader::new(stream.try_clone().expect("clone"));
        let mut head = String::new();
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).expect("header");
            if line == "\r\n" || line.is_empty() {
                break;
            }
            if let Some(value) = line.to_ascii_lowercase().strip_prefix("content-length:") {
                length = value.trim().parse().expect("length");
            }
            head.push_str(&line);
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).expect("body");
        let mut stream = stream;
        let length = answer.len();
        write!(
            stream,
            "HTTP/1.1 {status} X\r\ncontent-length: {length}\r\nconnection: close\r\n\r\n{answer}"
        )
        .expect("answer");
        (head, String::from_utf8(body).expect("utf-8"))
    });
    (port, handle)
}

#[test]
fn an_http_hook_posts_the_event_as_json() {
    let (port, server) = one_request_server(200, "");
    let toml = format!(
        "[[hooks]]\nevent = \"stage_complete\"\ntype = \"http\"\nurl = \"http://127.0.0.1:{port}/fabro\"\n"
    );
    let ran = Test::new()
        .workflow(ONE_COMMAND)
        .file("fabro.toml", &toml)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let (head, body) = server.join().expect("server");
    assert!(head.starts_with("POST /fabro HTTP/1.1"), "{head}");
    assert!(head.to_ascii_lowercase().contains("content-type: application/json"), "{head}");
    let event: Value = serde_json::from_str(&body).expect("json body");
    assert_eq!(event["event"], "stage_complete");
    assert_eq!(event["node_id"], "work");
    assert_eq!(event["outcome"], "success");
    let ran_events = logged(&ran, "hook.ran");
    assert_eq!(ran_events[0]["http_status"], 200);
    assert_eq!(ran_events[0]["hook_event"], "stage_complete");
}

#[test]
fn an_http_hook_answering_an_error_is_a_failed_hook() {
    let (port, server) = one_request_server(500, "");
    let toml =
        format!("[[hooks]]\nevent = \"run_complete\"\ntype = \"http\"\nurl = \"http://localhost:{port}/\"\n");
    let ran = Test::new()
        .workflow(ONE_COMMAND)
        .file("fabro.toml", &toml)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    server.join().expect("server");
    let failed = logged(&ran, "hook.failed");
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0]["http_status"], 500);
    assert!(failed[0]["message"].as_str().expect("message").contains("500"), "{}", failed[0]);
}

#[test]
fn a_blocking_stage_start_hook_fails_the_stage_and_its_failure_route_is_taken() {
    let workflow = r#"digraph vetoed {
        start [shape=Mdiamond]
        exit  [shape=Msquare]
        deploy  [shape=parallelogram, script="touch deployed"]
        recover [shape=parallelogram, script="touch recovered"]
        start -> deploy
        deploy -> exit
        deploy -> recover [condition="outcome=fail"]
        recover -> exit
    }"#;
    let toml = "[[hooks]]\nname = \"freeze\"\nevent = \"stage_start\"\ntype = \"command\"\nblocking = true\n\
                when = \"context.current_node=deploy\"\ncommand = \"echo 'deploys are frozen' >&2; exit 1\"\n";
    let ran = Test::new()
        .workflow(workflow)
        .file("fabro.toml", toml)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let dir = ran.dir.path();
    assert!(!dir.join("deployed").exists(), "the vetoed stage ran");
    assert!(dir.join("recovered").exists(), "the failure route was not taken");
    let failed = logged(&ran, "stage.failed");
    let reason = failed[0]["failure_reason"].as_str().expect("reason");
    assert!(
        reason.contains(
            "blocking hook `freeze` stopped it: the command exited with code 1: deploys are frozen"
        ),
        "{reason}"
    );
    assert_eq!(logged(&ran, "hook.failed")[0]["blocking"], true);
}

#[test]
fn a_blocking_run_start_hook_stops_the_run_before_any_stage() {
    let toml = "[[hooks]]\nevent = \"run_start\"\ntype = \"command\"\nblocking = true\ncommand = \"echo 'outside the release window' >&2; exit 2\"\n";
    let ran = Test::new()
        .workflow(ONE_COMMAND)
        .file("fabro.toml", toml)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(1)
        .stderr_contains("outside the release window")
        .run();
    assert!(!ran.dir.path().join("worked").exists());
    assert!(logged(&ran, "stage.started").is_empty());
    let result = run_file(&ran, "result.json");
    assert_eq!(result["status"], "failed");
    assert!(
        result["failure_reason"].as_str().expect("reason").starts_with("the run did not start"),
        "{result}"
    );
}

#[test]
fn when_decides_whether_a_hook_fires() {
    let toml = [
        "[[hooks]]\nevent = \"stage_complete\"\ntype = \"command\"\nwhen = \"outcome=fail\"\ncommand = \"touch on_fail\"\n",
        "[[hooks]]\nevent = \"stage_complete\"\ntype = \"command\"\nwhen = \"outcome=success && context.target=prod\"\ncommand = \"touch on_prod\"\n",
    ]
    .concat();
    let ran = Test::new()
        .workflow(ONE_COMMAND)
        .file("fabro.toml", &toml)
        .args(["run", "workflow.dot", "--set", "target=prod", "-q"])
        .status(0)
        .run();
    assert!(!ran.dir.path().join("on_fail").exists());
    assert!(ran.dir.path().join("on_prod").exists());
}

#[test]
fn when_reads_an_offloaded_value_as_edge_conditions_do() {
    // command.output is 20 kB, over the threshold: the context holds a pointer to the store.
    let workflow = r#"digraph offloaded {
        artifact_threshold = 1000
        start [shape=Mdiamond]
        exit  [shape=Msquare]
        build [shape=parallelogram, script="head -c 20000 /dev/zero | tr '\\0' x; echo; echo 'tests PASSED'"]
        start -> build -> exit
    }"#;
    let toml = [
        "[[hooks]]\nevent = \"stage_complete\"\ntype = \"command\"\nwhen = 'command.output contains \"PASSED\"'\ncommand = \"touch saw_passed\"\n",
        "[[hooks]]\nevent = \"run_complete\"\ntype = \"command\"\nwhen = 'command.output contains \"file://\"'\ncommand = \"touch saw_pointer\"\n",
    ]
    .concat();
    let ran = Test::new()
        .workflow(workflow)
        .file("fabro.toml", &toml)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    assert_eq!(logged(&ran, "artifact.offloaded").len(), 1, "the output was offloaded");
    assert!(ran.dir.path().join("saw_passed").exists(), "the hook read the value, not its pointer");
    assert!(!ran.dir.path().join("saw_pointer").exists());
}

#[test]
fn a_failing_hook_leaves_an_event_and_the_run_goes_on() {
    let toml =
        [hook("stage_complete", "echo 'slack is down' >&2; exit 9"), hook("run_complete", "true")].concat();
    let ran = Test::new()
        .workflow(ONE_COMMAND)
        .file("fabro.toml", &toml)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let failed = logged(&ran, "hook.failed");
    assert_eq!(failed.len(), 1);
    assert_eq!(failed[0]["node_id"], "work");
    assert_eq!(failed[0]["hook"], "fabro.toml hooks[0]");
    assert_eq!(failed[0]["exit_code"], 9);
    assert_eq!(failed[0]["blocking"], false);
    assert_eq!(failed[0]["message"], "the command exited with code 9: slack is down");
    assert_eq!(logged(&ran, "hook.ran").len(), 1);
}

#[test]
fn a_hook_past_its_timeout_is_killed_and_counts_as_failed() {
    let toml =
        "[[hooks]]\nevent = \"run_start\"\ntype = \"command\"\ntimeout = 1\ncommand = \"sleep 20\"\nblocking = false\n";
    let started = std::time::Instant::now();
    let ran = Test::new()
        .workflow(ONE_COMMAND)
        .file("fabro.toml", toml)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    assert!(started.elapsed().as_secs() < 15);
    let failed = logged(&ran, "hook.failed");
    assert!(failed[0]["message"].as_str().expect("message").contains("timed out after 1s"), "{}", failed[0]);
}

#[test]
fn a_dry_run_fires_no_hooks() {
    let ran = Test::new()
        .workflow(ONE_COMMAND)
        .file("fabro.toml", &hooks_for(&["run_start", "stage_start", "run_complete"]))
        .args(["run", "workflow.dot", "--dry-run", "-q"])
        .status(0)
        .run();
    assert!(told(ran.dir.path()).is_empty());
}

#[test]
fn an_unknown_event_is_refused_with_the_valid_names() {
    Test::new()
        .workflow(ONE_COMMAND)
        .file("fabro.toml", &hook("stage_compelte", "true"))
        .args(["run", "workflow.dot"])
        .status(2)
        .stderr_contains("fabro.toml: hooks[0]: unknown event `stage_compelte` (did you mean `stage_complete`?); the events are run_start, run_complete, run_failed, run_paused, stage_start, stage_complete, stage_failed, stage_retrying, gate_waiting, edge_selected, parallel_start, parallel_complete, checkpoint_saved, pre_tool_use, post_tool_use, post_tool_use_failure; the run did not start")
        .run();
}

#[test]
fn a_hooks_table_with_a_typo_is_refused_instead_of_dropping_its_hooks() {
    Test::new()
        .workflow(ONE_COMMAND)
        .file("fabro.toml", &hook("run_start", "touch started").replace("[[hooks]]", "[[hook]]"))
        .args(["run", "workflow.dot"])
        .status(2)
        .stderr_contains("fabro.toml: unknown table `hook` (did you mean `hooks`?)")
        .run();
}

#[test]
fn a_hooks_table_with_a_typo_in_the_config_file_is_refused_by_run_as_by_validate() {
    let test = Test::new()
        .workflow(ONE_COMMAND)
        .file("config.toml", &hook("run_start", "touch started").replace("[[hooks]]", "[[hook]]"));
    let config = test.path("config.toml").display().to_string();
    let ran = test
        .env("FABRO_CONFIG", &config)
        .args(["run", "workflow.dot", "--dry-run"])
        .status(2)
        .stderr_contains("config.toml:1:3: unknown key `hook` (did you mean `hooks`?)")
        .stderr_contains("the run did not start")
        .run();
    assert!(!ran.dir.path().join("started").exists());
    Test::new()
        .workflow(ONE_COMMAND)
        .env("FABRO_CONFIG", &config)
        .args(["validate", "workflow.dot"])
        .status(2)
        .stdout_contains("config.toml:1:3: unknown key `hook` (did you mean `hooks`?)")
        .stdout_contains("workflow.dot: invalid: 1 error")
        .run();
}

#[test]
fn validate_checks_the_hooks_a_run_would_take() {
    let test = Test::new().workflow(ONE_COMMAND).file("fabro.toml", &hook("stage_compelte", "true"));
    let ran = test
        .args(["validate", "workflow.dot"])
        .status(2)
        .stdout_contains("error: ")
        .stdout_contains("workflow.dot: invalid: 1 error, 1 warning")
        .stdout_lacks("valid (")
        .run();
    assert!(
        ran.stdout().contains("fabro.toml: hooks[0]: unknown event `stage_compelte`"),
        "{}",
        ran.stdout()
    );
    let json = Test::new()
        .workflow(ONE_COMMAND)
        .file("fabro.toml", &hook("stage_compelte", "true"))
        .args(["validate", "workflow.dot", "--json"])
        .status(2)
        .run()
        .json();
    assert_eq!(json["valid"], false);
    let rules: Vec<&str> =
        json["diagnostics"].as_array().unwrap().iter().map(|d| d["rule"].as_str().unwrap()).collect();
    assert!(rules.contains(&"settings"), "{rules:?}");
    Test::new()
        .workflow(ONE_COMMAND)
        .file("fabro.toml", &hook("stage_complete", "true"))
        .args(["validate", "workflow.dot"])
        .status(0)
        .run();
}

#[test]
fn a_remote_http_url_is_refused() {
    let toml =
        "[[hooks]]\nevent = \"run_complete\"\ntype = \"http\"\nurl = \"http://hooks.example.com/fabro\"\n";
    Test::new()
        .workflow(ONE_COMMAND)
        .file("config.toml", toml)
        .env("FABRO_CONFIG", "config.toml")
        .args(["run", "workflow.dot"])
        .status(2)
        .stderr_contains("config.toml: hooks[0]: url `http://hooks.example.com/fabro` is not https")
        .run();
}

#[test]
fn a_when_that_does_not_parse_is_refused_with_its_position() {
    let toml = "[[hooks]]\nevent = \"run_complete\"\ntype = \"command\"\ncommand = \"true\"\nwhen = \"outcome=success &&\"\n";
    Test::new()
        .workflow(ONE_COMMAND)
        .file("fabro.toml", toml)
        .args(["run", "workflow.dot"])
        .status(2)
        .stderr_contains("fabro.toml: hooks[0]: `when` does not parse at character 19")
        .run();
}

#[test]
fn blocking_an_end_is_refused_with_a_fix() {
    let toml =
        "[[hooks]]\nevent = \"run_complete\"\ntype = \"command\"\ncommand = \"true\"\nblocking = true\n";
    Test::new()
        .workflow(ONE_COMMAND)
        .file("fabro.toml", toml)
        .args(["run", "workflow.dot"])
        .status(2)
        .stderr_contains("only run_start, stage_start, edge_selected and tool-call hooks can block")
        .run();
}

#[test]
fn a_stage_s_hooks_run_in_its_sandbox_and_run_hooks_do_not() {
    let workflow = r#"digraph boxed {
        start [shape=Mdiamond]
        exit  [shape=Msquare]
        work  [shape=parallelogram, sandbox="bwrap", script="true"]
        start -> work -> exit
    }"#;
    // The work directory is `work/`; outside it, what a sandboxed command writes never reaches
    // the host. `sandbox = false` (Fabro's) runs a stage's hook on the host.
    let toml = [
        hook("stage_complete", "touch in_sandbox; touch ../from_stage"),
        hook("run_complete", "touch ../from_run"),
        format!("{}sandbox = false\n", hook("stage_complete", "touch ../from_host")),
    ]
    .concat();
    let ran = Test::new()
        .workflow(workflow)
        .file("fabro.toml", &toml)
        .file("work/.keep", "")
        .args(["run", "workflow.dot", "--workdir", "work", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let dir = ran.dir.path();
    assert!(dir.join("work/in_sandbox").exists(), "the stage's hook ran, in its sandbox");
    assert!(!dir.join("from_stage").exists(), "the stage's hook escaped its sandbox");
    assert!(dir.join("from_run").exists() && dir.join("from_host").exists());
    // A relative run directory is found from inside the sandbox too (it once made every stage
    // hook of a sandboxed stage fail to start).
    assert!(logged(&ran, "hook.failed").is_empty(), "{:?}", logged(&ran, "hook.failed"));
}

#[test]
fn retries_edges_parallel_stages_and_checkpoints_tell_their_hooks_and_matchers_choose() {
    let workflow = r#"digraph moments {
    start [shape=Mdiamond]
    exit  [shape=Msquare]
    flaky [shape=parallelogram, max_retries=1, script="test -f tried || { touch tried; exit 1; }"]
    fan [shape=component]
    a [shape=parallelogram, script="true"]
    b [shape=parallelogram, script="true"]
    join [shape=tripleoctagon]
    start -> flaky -> fan
    fan -> a -> join
    fan -> b -> join
    join -> exit
}"#;
    // Branches fire their hooks at the same time: each event is appended in one write.
    let record = "event=$(cat); printf '%s\\n' \"$event\" >> hooks.log";
    let events =
        ["stage_retrying", "edge_selected", "parallel_start", "parallel_complete", "checkpoint_saved"];
    let mut hooks: String = events.iter().map(|event| hook(event, record)).collect();
    hooks.push_str("matcher = \"^flaky$\"\n");
    let ran = Test::new()
        .workflow(workflow)
        .file("fabro.toml", &hooks)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let told = told(ran.dir.path());
    let retrying: Vec<&Value> = told.iter().filter(|e| e["event"] == "stage_retrying").collect();
    assert_eq!(retrying.len(), 1);
    assert_eq!((retrying[0]["attempt"].as_u64(), retrying[0]["max_attempts"].as_u64()), (Some(2), Some(2)));
    assert_eq!(retrying[0]["handler"], "command");
    let edges: Vec<(String, String)> = told
        .iter()
        .filter(|e| e["event"] == "edge_selected")
        .map(|e| (e["edge_from"].as_str().unwrap().to_string(), e["edge_to"].as_str().unwrap().to_string()))
        .collect();
    assert!(
        edges.contains(&("start".into(), "flaky".into())) && edges.contains(&("join".into(), "exit".into())),
        "{edges:?}"
    );
    let parallel: Vec<&Value> =
        told.iter().filter(|e| e["event"].as_str().unwrap().starts_with("parallel_")).collect();
    assert_eq!(parallel.len(), 2);
    assert_eq!(
        (parallel[0]["node_id"].as_str(), parallel[0]["branch_count"].as_u64()),
        (Some("fan"), Some(2))
    );
    assert_eq!(parallel[1]["outcome"], "success");
    // The matcher kept the checkpoint hook to flaky's checkpoint.
    let checkpoints: Vec<&Value> = told.iter().filter(|e| e["event"] == "checkpoint_saved").collect();
    assert_eq!(checkpoints.len(), 1, "{checkpoints:?}");
    assert_eq!(checkpoints[0]["node_id"], "flaky");
}

#[test]
fn a_blocking_edge_selected_hook_stops_the_run_before_it_crosses_the_edge() {
    let mut hooks = hook("edge_selected", "echo 'deploys need a ticket' >&2; exit 1");
    hooks.push_str("blocking = true\nmatcher = \"^exit$\"\n");
    let ran = Test::new()
        .workflow(ONE_COMMAND)
        .file("fabro.toml", &hooks)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(1)
        .run();
    assert!(ran.dir.path().join("worked").exists(), "the stage before the edge ran");
    let result = run_file(&ran, "result.json");
    let reason = result["failure_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("edge `work` -> `exit` not crossed: blocking hook `fabro.toml hooks[0]` stopped it: the command exited with code 1: deploys need a ticket"),
        "{reason}"
    );
}

const ROUTED: &str = r#"digraph routed {
    start [shape=Mdiamond]
    exit  [shape=Msquare]
    work  [shape=parallelogram, script="touch worked"]
    a     [shape=parallelogram, script="touch a"]
    b     [shape=parallelogram, script="touch b"]
    start -> work -> a -> exit
    work -> b [condition="outcome=fail"]
    b -> exit
}"#;

fn blocking_hook(event: &str, matcher: &str, command: &str) -> String {
    format!("{}blocking = true\nmatcher = \"{matcher}\"\n", hook(event, command))
}

fn status_of(ran: &Ran, node: &str) -> Value {
    run_file(ran, &format!("stages/{node}/1/status.json"))
}

#[test]
fn a_blocking_stage_start_hook_that_answers_skip_keeps_its_stage_from_running() {
    // Exit 2 with a JSON decision: the decision counts, as in Fabro.
    let skip = r#"echo '{"decision": "skip", "reason": "deploy disabled in CI"}'; exit 2"#;
    let ran = Test::new()
        .workflow(ROUTED)
        .file("fabro.toml", &blocking_hook("stage_start", "^work$", skip))
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    assert!(!ran.dir.path().join("worked").exists(), "the skipped stage did not run");
    assert!(ran.dir.path().join("a").exists(), "the run went on from it, as after a success");
    let work = status_of(&ran, "work");
    assert_eq!(work["outcome"], "skipped", "{work}");
    assert!(work["notes"].as_str().unwrap_or("").contains("deploy disabled in CI"), "{work}");
    let ran_events = logged(&ran, "hook.ran");
    assert_eq!(ran_events.len(), 1, "{ran_events:?}");
    assert_eq!(ran_events[0]["decision"], "skip");

    // The same answer from a hook told not to block changes nothing.
    let ran = Test::new()
        .workflow(ROUTED)
        .file("fabro.toml", &format!("{}blocking = false\n", hook("stage_start", skip)))
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    assert!(ran.dir.path().join("worked").exists());
}

#[test]
fn a_blocking_edge_selected_hook_that_answers_override_sends_the_run_to_another_stage() {
    let to =
        |node: &str| format!(r#"echo '{{"decision": "override", "edge_to": "{node}", "reason": "hotfix"}}'"#);
    let ran = Test::new()
        .workflow(ROUTED)
        .file("fabro.toml", &blocking_hook("edge_selected", "^a$", &to("b")))
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    assert!(ran.dir.path().join("worked").exists() && ran.dir.path().join("b").exists());
    assert!(!ran.dir.path().join("a").exists(), "the chosen edge's target never ran");
    let checkpoint = run_file(&ran, "checkpoint.json");
    assert_eq!(
        checkpoint["completed_nodes"].as_array().map(|nodes| nodes.contains(&"b".into())),
        Some(true),
        "{checkpoint}"
    );

    // At a stage's start: the stage does not run, and the run goes on from the node named.
    let ran = Test::new()
        .workflow(ROUTED)
        .file("fabro.toml", &blocking_hook("stage_start", "^work$", &to("b")))
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let made = |file: &str| ran.dir.path().join(file).exists();
    assert_eq!((made("worked"), made("a"), made("b")), (false, false, true));
    assert_eq!(status_of(&ran, "work")["notes"], "hook `fabro.toml hooks[0]` sent the run to `b`: hotfix");

    // A node that is not there ends the run, named, with what was meant.
    let ran = Test::new()
        .workflow(ROUTED)
        .file("fabro.toml", &blocking_hook("edge_selected", "^a$", &to("bb")))
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(1)
        .run();
    let result = run_file(&ran, "result.json");
    assert_eq!(
        result["failure_reason"],
        "a edge_selected hook at `work` sent the run to `bb`, which is no stage of this workflow (did you mean `b`?)"
    );

    // A decision the moment does not take is the hook's failure: a blocking one stops the run.
    let ran = Test::new()
        .workflow(ROUTED)
        .file("fabro.toml", &blocking_hook("edge_selected", "^a$", r#"echo '{"decision": "skip"}'"#))
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(1)
        .run();
    let failed = logged(&ran, "hook.failed");
    let message = failed[0]["message"].as_str().unwrap_or("");
    assert!(message.contains("only a stage_start hook skips its stage"), "{message}");
}

#[test]
fn an_http_hook_decides_by_the_json_of_its_answer() {
    let (port, server) = one_request_server(200, r#"{"decision": "skip", "reason": "frozen"}"#);
    let toml = format!(
        "[[hooks]]\nevent = \"stage_start\"\ntype = \"http\"\nurl = \"http://127.0.0.1:{port}/\"\nblocking = true\nmatcher = \"^work$\"\n"
    );
    let ran = Test::new()
        .workflow(ROUTED)
        .file("fabro.toml", &toml)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    server.join().expect("server");
    assert!(!ran.dir.path().join("worked").exists() && ran.dir.path().join("a").exists());
    assert_eq!(status_of(&ran, "work")["notes"], "hook `fabro.toml hooks[0]` skipped it: frozen");
}

#[test]
fn a_hook_written_for_fabro_reads_its_variables_and_its_context_file() {
    const RUN_ID: &str = "0193a6f0-0000-7000-8000-000000000001";
    // Fabro's documented example, and the context read from `$FABRO_HOOK_CONTEXT`.
    let script = r#"cat "$FABRO_HOOK_CONTEXT" > "context-$FABRO_NODE_ID.json"
echo "$FABRO_EVENT $FABRO_RUN_ID $FABRO_WORKFLOW" > "env-$FABRO_NODE_ID.txt"
if [ "$FABRO_NODE_ID" = "work" ]; then
  echo '{"decision": "skip", "reason": "deploy disabled in CI"}'
  exit 0
fi"#;
    let ran = Test::new()
        .workflow(ROUTED)
        .file("fabro.toml", &hook("stage_start", script))
        .args(["run", "workflow.dot", "--run-dir", "run", "--run-id", RUN_ID, "-q"])
        .status(0)
        .run();
    let dir = ran.dir.path();
    assert!(!dir.join("worked").exists() && dir.join("a").exists(), "work was skipped, a ran");
    let env = std::fs::read_to_string(dir.join("env-work.txt")).unwrap();
    assert_eq!(env, format!("stage_start {RUN_ID} routed\n"));
    let context: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("context-a.json")).unwrap()).unwrap();
    assert_eq!((context["event"].as_str(), context["node_id"].as_str()), (Some("stage_start"), Some("a")));
}

#[test]
fn an_http_hook_sends_its_headers_with_the_allowed_variables_put_in() {
    let (port, server) = one_request_server(200, "");
    let toml = format!(
        "[[hooks]]\nevent = \"run_complete\"\nurl = \"http://127.0.0.1:{port}/\"\nallowed_env_vars = [\"HOOK_TOKEN\"]\n\
         [hooks.headers]\nAuthorization = \"Bearer $HOOK_TOKEN\"\nX-Team = \"ops\"\n"
    );
    Test::new()
        .workflow(ONE_COMMAND)
        .file("fabro.toml", &toml)
        .env("HOOK_TOKEN", "t0k3n")
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let (head, _) = server.join().expect("server");
    let head = head.to_ascii_lowercase();
    assert!(head.contains("authorization: bearer t0k3n") && head.contains("x-team: ops"), "{head}");
}
