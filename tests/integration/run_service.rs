//! The run service: `fabro serve --workflows DIR` takes runs over its HTTP API (`/api/v1`),
//! queues them (`--max-concurrent-runs`), runs each in a process of its own, cancels them, and
//! streams their events; a service killed with runs queued and running picks them up again.

use crate::common;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// A stage that records its start, waits for the test's go-ahead for its run (`go-N`), and
/// records its end; `N` is the run's input `n`.
const GATED: &str = r#"digraph gated {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=parallelogram, timeout="120s",
          script="echo start $FABRO_INPUT_N >> log; while [ ! -f go-$FABRO_INPUT_N ]; do sleep 0.05; done; echo end $FABRO_INPUT_N >> log"]
    start -> work -> exit
}"#;

struct Service {
    child: Child,
    base: String,
}

impl Service {
    fn start(dir: &Path, max: &str) -> Service {
        Service::start_with(dir, &["--max-concurrent-runs", max])
    }

    fn start_with(dir: &Path, extra: &[&str]) -> Service {
        let mut args = vec!["serve", "--dir", ".fabro/runs", "--workflows", "wf"];
        args.extend_from_slice(extra);
        let mut child =
            common::fabro_command(dir, &args).stdout(Stdio::piped()).spawn().expect("fabro serve");
        let mut first = String::new();
        BufReader::new(child.stdout.take().unwrap()).read_line(&mut first).unwrap();
        let url = first.trim().strip_prefix("fabro serve: ").expect(&first);
        // The printed URL carries a token as `?token=`: API clients send it as a header.
        let url = url.split('?').next().unwrap_or(url).trim_end_matches('/').to_string();
        Service { child, base: url }
    }

    /// `METHOD /api/v1PATH` with a JSON body: the status and the answer (JSON, or the text).
    fn call(&self, method: &str, path: &str, body: Option<Value>, headers: &[(&str, &str)]) -> (u16, Value) {
        let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
        runtime.block_on(async {
            let client = reqwest::Client::new();
            let mut request = client.request(method.parse().unwrap(), format!("{}/api/v1{path}", self.base));
            for (name, value) in headers {
                request = request.header(*name, *value);
            }
            if let Some(body) = body {
                request = request.header("content-type", "application/json").body(body.to_string());
            }
            let response = request.send().await.expect("request");
            let status = response.status().as_u16();
            let text = response.text().await.unwrap_or_default();
            (status, serde_json::from_str(&text).unwrap_or(Value::String(text)))
        })
    }

    fn submit(&self, n: u32) -> String {
        let (status, answer) = self.call(
            "POST",
            "/runs",
            Some(json!({"workflow": "gated.dot", "inputs": {"n": n}, "labels": {"n": n.to_string()}})),
            &[],
        );
        assert_eq!(status, 202, "{answer}");
        assert_eq!(answer["status"], "queued");
        answer["id"].as_str().unwrap().to_string()
    }

    fn status(&self, id: &str) -> String {
        let (code, run) = self.call("GET", &format!("/runs/{id}"), None, &[]);
        assert_eq!(code, 200, "{run}");
        run["status"].as_str().unwrap().to_string()
    }
}

impl Drop for Service {
    /// Killed as `kill -9` would: the runs it started go on in their own processes.
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn workspace() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("wf")).unwrap();
    std::fs::write(dir.path().join("wf/gated.dot"), GATED).unwrap();
    dir
}

fn wait_until(what: &str, mut done: impl FnMut() -> bool) {
    let started = Instant::now();
    while !done() {
        assert!(started.elapsed() < Duration::from_secs(90), "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn log(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("log")).unwrap_or_default()
}

fn go(dir: &Path, n: u32) {
    std::fs::write(dir.join(format!("go-{n}")), "").unwrap();
}

#[test]
fn runs_submitted_over_the_api_queue_in_order_run_alone_and_can_be_cancelled_and_followed() {
    let dir = workspace();
    let service = Service::start(dir.path(), "1");
    let ids: Vec<String> = (1..=3).map(|n| service.submit(n)).collect();
    wait_until("run 1 starts", || log(dir.path()).contains("start 1"));
    // One place: the others wait, in the order they came.
    std::thread::sleep(Duration::from_millis(600));
    assert_eq!(log(dir.path()), "start 1\n");
    assert_eq!((service.status(&ids[1]).as_str(), service.status(&ids[2]).as_str()), ("queued", "queued"));
    let (code, listed) = service.call("GET", "/runs?status=queued", None, &[]);
    assert_eq!(code, 200);
    let queued: Vec<&str> =
        listed.as_array().unwrap().iter().map(|run| run["id"].as_str().unwrap()).collect();
    assert_eq!(queued, [ids[2].as_str(), ids[1].as_str()], "newest first");
    assert!(listed.as_array().unwrap().iter().all(|run| run["workflow"] == "gated"), "{listed}");
    // A workflow sent as text is named by its graph, not by the file the service wrote it to.
    let pasted = GATED.replacen("digraph gated", "digraph pasted", 1);
    let (code, answer) =
        service.call("POST", "/runs", Some(json!({"source": pasted, "inputs": {"n": 9}})), &[]);
    assert_eq!(code, 202, "{answer}");
    let pasted_id = answer["id"].as_str().unwrap().to_string();
    let (_, run) = service.call("GET", &format!("/runs/{pasted_id}"), None, &[]);
    assert_eq!((run["status"].as_str(), run["workflow"].as_str()), (Some("queued"), Some("pasted")), "{run}");
    // `fabro runs` lists them too, with the running one, before any finished run.
    let listed = common::fabro_in(dir.path(), &["runs"]);
    let table = String::from_utf8_lossy(&listed.stdout);
    for (id, status) in [(&ids[0], "running"), (&ids[1], "queued"), (&ids[2], "queued")] {
        let row = table.lines().find(|line| line.starts_with(&id[..13])).unwrap_or_else(|| panic!("{table}"));
        assert!(row.contains("gated") && row.contains(status), "{table}");
    }
    let row =
        table.lines().find(|line| line.starts_with(&pasted_id[..13])).unwrap_or_else(|| panic!("{table}"));
    assert!(row.contains("pasted") && row.contains("queued"), "{table}");
    let (code, _) = service.call("POST", &format!("/runs/{pasted_id}/cancel"), Some(json!({})), &[]);
    assert_eq!(code, 202);
    // A queued run cancelled never starts.
    let (code, answer) = service.call("POST", &format!("/runs/{}/cancel", ids[2]), Some(json!({})), &[]);
    assert_eq!((code, answer["status"].as_str()), (202, Some("canceled")), "{answer}");
    go(dir.path(), 1);
    wait_until("run 2 starts", || log(dir.path()).contains("start 2"));
    go(dir.path(), 2);
    wait_until("run 2 ends", || service.status(&ids[1]) == "succeeded");
    assert_eq!(log(dir.path()), "start 1\nend 1\nstart 2\nend 2\n");
    assert_eq!(service.status(&ids[0]), "succeeded");
    assert_eq!(service.status(&ids[2]), "canceled");
    let (_, run) = service.call("GET", &format!("/runs/{}", ids[0]), None, &[]);
    assert_eq!(run["workflow"], "gated");
    assert_eq!(run["labels"]["n"], "1");
    assert_eq!(
        run["stages"].as_array().unwrap().iter().find(|s| s["node_id"] == "work").unwrap()["status"],
        "success",
        "{run}"
    );
    let (_, labelled) = service.call("GET", "/runs?label=n=2", None, &[]);
    assert_eq!(labelled.as_array().unwrap().len(), 1);
    assert_eq!(labelled[0]["id"], ids[1].as_str());
    // A run that has ended cannot be cancelled.
    let (code, answer) = service.call("POST", &format!("/runs/{}/cancel", ids[0]), Some(json!({})), &[]);
    assert_eq!((code, answer["error"]["code"].as_str()), (409, Some("not_cancelable")), "{answer}");

    // The events, as server-sent events with their seq as id; from Last-Event-ID on.
    let events = |from: Option<&str>| -> Vec<u64> {
        let headers: Vec<(&str, &str)> = from.map(|id| vec![("last-event-id", id)]).unwrap_or_default();
        let (_, text) = service.call("GET", &format!("/runs/{}/events", ids[0]), None, &headers);
        let text = text.as_str().unwrap().to_string();
        text.lines().filter_map(|line| line.strip_prefix("id: ")).map(|id| id.parse().unwrap()).collect()
    };
    let all = events(None);
    assert!(all.len() > 5 && all.windows(2).all(|pair| pair[1] == pair[0] + 1), "{all:?}");
    assert_eq!(events(Some("4")), all[4..].to_vec());
}

#[test]
fn the_api_refuses_what_it_cannot_run_with_a_stable_code_and_documents_every_route() {
    let dir = workspace();
    let service = Service::start(dir.path(), "2");
    let refused = |body: Value| {
        let (code, answer) = service.call("POST", "/runs", Some(body), &[]);
        (code, answer["error"]["code"].as_str().unwrap_or_default().to_string(), answer)
    };
    let (code, kind, answer) = refused(json!({"source": "digraph G { start [shape=Mdiamond] start -> }"}));
    assert_eq!((code, kind.as_str()), (422, "invalid_workflow"), "{answer}");
    assert!(answer["error"]["diagnostics"][0].as_str().unwrap().contains("1:"), "{answer}");
    assert_eq!(refused(json!({"workflow": "../wf/gated.dot"})).0, 400);
    assert_eq!(refused(json!({"workflow": "missing.dot"})).1, "not_found");
    assert_eq!(refused(json!({"workflow": "gated.dot", "colour": "red"})).1, "bad_request");
    assert_eq!(refused(json!({})).1, "bad_request");
    let (code, answer) = service.call("GET", "/runs/01a21c5a-4567-751a-bec0-a381e719c5f5", None, &[]);
    assert_eq!((code, answer["error"]["code"].as_str()), (404, Some("not_found")));
    // A page of another site cannot start a run.
    let (code, answer) = service.call(
        "POST",
        "/runs",
        Some(json!({"workflow": "gated.dot"})),
        &[("origin", "http://evil.example")],
    );
    assert_eq!((code, answer["error"]["code"].as_str()), (403, Some("forbidden")), "{answer}");
    assert!(
        !dir.path().join(".fabro/runs").exists()
            || common::fabro_in(dir.path(), &["runs", "--json"]).stdout.len() < 5
    );

    // A source that validates runs; every route the document names answers.
    let source = GATED.replace("$FABRO_INPUT_N", "9");
    let (code, created) =
        service.call("POST", "/runs", Some(json!({"source": source, "goal": "check"})), &[]);
    assert_eq!(code, 202, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    go(dir.path(), 9);
    wait_until("the source run ends", || service.status(&id) == "succeeded");
    let (code, document) = service.call("GET", "/openapi.json", None, &[]);
    assert_eq!(code, 200);
    assert!(document["openapi"].as_str().unwrap().starts_with("3."), "{document}");
    let paths = document["paths"].as_object().unwrap();
    let mut seen = Vec::new();
    for (path, item) in paths {
        for method in item.as_object().unwrap().keys() {
            let concrete = path.replace("{id}", &id);
            let route = concrete.strip_prefix("/api/v1").unwrap();
            let body = (method == "post").then(|| json!({}));
            let (code, answer) = service.call(&method.to_uppercase(), route, body, &[]);
            assert!(code != 404 || answer["error"]["code"].is_string(), "{method} {path}: {code} {answer}");
            assert_ne!(code, 405, "{method} {path}");
            seen.push(format!("{method} {path}"));
        }
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            "delete /api/v1/runs/{id}",
            "get /api/v1/runs",
            "get /api/v1/runs/{id}",
            "get /api/v1/runs/{id}/events",
            "get /api/v1/runs/{id}/stages/{node}/{visit}",
            "get /api/v1/runs/{id}/stages/{node}/{visit}/files/{path}",
            "post /api/v1/runs",
            "post /api/v1/runs/{id}/answer",
            "post /api/v1/runs/{id}/cancel",
            "post /api/v1/runs/{id}/fork",
            "post /api/v1/runs/{id}/interrupt",
            "post /api/v1/runs/{id}/resume",
            "post /api/v1/runs/{id}/rewind"
        ]
    );
}

/// Kills the process running the run in `run_dir` (as a machine's restart would) and waits until
/// it is gone.
fn kill_run_process(run_dir: &Path) {
    let submission: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("submission.json")).unwrap()).unwrap();
    let pid = submission["process"]["pid"].as_i64().unwrap();
    std::process::Command::new("kill").args(["-9", &pid.to_string()]).status().unwrap();
    wait_until("the run's process is gone", || {
        std::fs::read_to_string(format!("/proc/{pid}/stat")).map_or(true, |stat| {
            stat.rsplit(')').next().is_some_and(|rest| rest.trim_start().starts_with('Z'))
        })
    });
}

#[test]
fn a_service_killed_with_runs_queued_and_running_finishes_each_run_exactly_once_after_a_restart() {
    let dir = workspace();
    let service = Service::start(dir.path(), "1");
    let ids: Vec<String> = (1..=3).map(|n| service.submit(n)).collect();
    wait_until("run 1 starts", || log(dir.path()).contains("start 1"));
    // kill -9 the service, and the process of the run it was running.
    drop(service);
    let run_1 = dir.path().join(".fabro/runs").join(&ids[0]);
    kill_run_process(&run_1);
    let service = Service::start(dir.path(), "1");
    for n in 1..=3 {
        go(dir.path(), n);
    }
    wait_until("every run ends", || ids.iter().all(|id| service.status(id) == "succeeded"));
    let log = log(dir.path());
    for n in 1..=3 {
        assert_eq!(log.matches(&format!("end {n}\n")).count(), 1, "{log}");
    }
    // Run 1 was resumed: its stage ran again from the start, in the same run.
    assert_eq!(log.matches("start 1\n").count(), 2, "{log}");
    let result: Value =
        serde_json::from_str(&std::fs::read_to_string(run_1.join("result.json")).unwrap()).unwrap();
    assert_eq!(result["status"], "succeeded");
    // Runs 2 and 3 started only after run 1 (one place), in order.
    assert!(log.find("end 1").unwrap() < log.find("start 2").unwrap(), "{log}");
    assert!(log.find("end 2").unwrap() < log.find("start 3").unwrap(), "{log}");
}

#[test]
fn with_crashed_runs_show_a_dead_run_waits_for_a_resume_while_the_queue_goes_on() {
    let dir = workspace();
    let service = Service::start(dir.path(), "1");
    let ids: Vec<String> = (1..=2).map(|n| service.submit(n)).collect();
    wait_until("run 1 starts", || log(dir.path()).contains("start 1"));
    drop(service);
    let run_1 = dir.path().join(".fabro/runs").join(&ids[0]);
    kill_run_process(&run_1);
    let service = Service::start_with(dir.path(), &["--max-concurrent-runs", "1", "--crashed-runs", "show"]);
    go(dir.path(), 2);
    // The dead run takes no place: the next one runs and ends while it is shown crashed.
    wait_until("run 2 ends", || service.status(&ids[1]) == "succeeded");
    assert_eq!(service.status(&ids[0]), "crashed");
    assert_eq!(log(dir.path()).matches("start 1\n").count(), 1, "run 1 was not resumed by itself");
    let listed = common::fabro_in(dir.path(), &["runs", "--json"]);
    let listed: Value = serde_json::from_slice(&listed.stdout).unwrap();
    let row = listed.as_array().unwrap().iter().find(|row| row["run_id"] == ids[0].as_str()).unwrap();
    assert_eq!(row["status"], "crashed", "{listed}");
    // Resumed on request, it finishes once.
    go(dir.path(), 1);
    let (code, answer) = service.call("POST", &format!("/runs/{}/resume", ids[0]), Some(json!({})), &[]);
    assert_eq!(code, 202, "{answer}");
    wait_until("run 1 ends", || service.status(&ids[0]) == "succeeded");
    assert_eq!(log(dir.path()).matches("end 1\n").count(), 1, "{}", log(dir.path()));
}

#[test]
fn a_gate_of_a_run_started_over_the_api_is_answered_over_it_and_an_ended_run_is_deleted() {
    let dir = workspace();
    let service = Service::start(dir.path(), "2");
    let gate = r#"digraph approve {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        approve [shape=hexagon, label="Ship it?"]
        ship [shape=parallelogram, script="touch shipped"]
        start -> approve
        approve -> ship [label="[S] Ship"]
        approve -> exit [label="[N] Not now"]
        ship -> exit
    }"#;
    let (code, created) = service.call("POST", "/runs", Some(json!({"source": gate})), &[]);
    assert_eq!(code, 202, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    // No one at a terminal: the run pauses at its gate.
    wait_until("the run waits at its gate", || service.status(&id) == "paused");
    let answer = |body: Value| service.call("POST", &format!("/runs/{id}/answer"), Some(body), &[]);
    let (code, refused) = answer(json!({"answer": "deploy"}));
    assert_eq!((code, refused["error"]["code"].as_str()), (400, Some("bad_request")), "{refused}");
    let (code, taken) = answer(json!({"answer": "ship"}));
    assert_eq!((code, taken["status"].as_str()), (202, Some("resuming")), "{taken}");
    let (code, again) = answer(json!({"answer": "exit"}));
    assert_eq!(code, 409, "{again}");
    assert!(matches!(again["error"]["code"].as_str(), Some("already_answered" | "not_waiting")), "{again}");
    wait_until("the run ends", || service.status(&id) == "succeeded");
    assert!(dir.path().join("shipped").exists());
    let (code, refused) = service.call("POST", &format!("/runs/{id}/resume"), Some(json!({})), &[]);
    assert_eq!((code, refused["error"]["code"].as_str()), (409, Some("not_resumable")), "{refused}");
    let (code, _) =
        service.call("DELETE", &format!("/runs/{id}"), None, &[("content-type", "application/json")]);
    assert_eq!(code, 204);
    let (code, _) = service.call("GET", &format!("/runs/{id}"), None, &[]);
    assert_eq!(code, 404);
}

#[test]
fn with_a_token_api_clients_send_it_as_a_bearer_header_and_are_told_in_json_when_they_do_not() {
    let dir = workspace();
    let service = Service::start_with(dir.path(), &["--token", "s3cret"]);
    let (code, answer) = service.call("GET", "/runs", None, &[]);
    assert_eq!((code, answer["error"]["code"].as_str()), (401, Some("unauthorized")), "{answer}");
    let (code, answer) = service.call("GET", "/runs", None, &[("authorization", "Bearer wrong")]);
    assert_eq!(code, 401, "{answer}");
    let (code, answer) = service.call("GET", "/runs", None, &[("authorization", "Bearer s3cret")]);
    assert_eq!((code, answer.as_array().map(Vec::len)), (200, Some(0)), "{answer}");
}

#[test]
fn the_cli_starts_waits_for_cancels_and_attaches_to_runs_on_a_service_with_server() {
    let dir = workspace();
    std::fs::write(dir.path().join("gate.dot"), common::DEPLOY_GATE).unwrap();
    let service = Service::start(dir.path(), "1");
    let server = service.base.clone();
    let fabro = |args: &[&str]| {
        let output = common::fabro_in(dir.path(), args);
        let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
        (output.status.code(), String::from_utf8_lossy(&output.stdout).trim().to_string(), stderr)
    };
    // A workflow under the service's --workflows directory, by name, in the background.
    let (code, id, stderr) =
        fabro(&["run", "gated.dot", "--server", &server, "--detach", "--input", "n=1", "--label", "via=cli"]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(["queued", "starting", "running"].contains(&service.status(&id).as_str()));
    let (code, _, stderr) = fabro(&["wait", &id, "--server", &server, "--timeout", "300ms"]);
    assert_eq!(code, Some(124), "{stderr}");
    // A second run waits in the queue; cancelled there, it never starts.
    let (_, queued, _) = fabro(&["run", "gated.dot", "--server", &server, "--detach", "--input", "n=2"]);
    let (code, _, stderr) = fabro(&["cancel", &queued[..13], "--server", &server]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("will not start"), "{stderr}");
    go(dir.path(), 1);
    let (code, _, stderr) = fabro(&["wait", &id[..13], "--server", &server]);
    assert_eq!(code, Some(0), "{stderr}");
    assert!(stderr.contains("succeeded"), "{stderr}");
    assert_eq!(service.status(&queued), "canceled");
    let (_, run) = service.call("GET", &format!("/runs/{id}"), None, &[]);
    assert_eq!(run["labels"]["via"], "cli", "{run}");
    // What the service would ignore is refused, and so is what it refuses.
    let (code, _, stderr) = fabro(&["run", "gate.dot", "--server", &server, "--model", "m"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("--model cannot go with --server"), "{stderr}");
    std::fs::write(
        dir.path().join("broken.dot"),
        common::DEPLOY_GATE.replace("label=\"Ship it?\"", "max_retires=2"),
    )
    .unwrap();
    let (code, _, stderr) = fabro(&["run", "broken.dot", "--server", &server, "--detach"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("max_retires"), "{stderr}");
    // A local workflow file goes as its text; the run is followed here and its gate asked here.
    let command = common::fabro_command(dir.path(), &["run", "gate.dot", "--server", &server]);
    let mut terminal = common::pty::Terminal::spawn(command);
    terminal.wait_for("[A] Approve -> deploy", 1);
    terminal.wait_for("> ", 1);
    terminal.type_line("a");
    let status = terminal.wait();
    assert_eq!(status.code(), Some(0), "{}", terminal.screen());
    terminal.wait_for("deploy: success", 1);
    assert!(dir.path().join("deployed").exists(), "the service's run works where the service started");
    // Without a terminal, attach shows a paused run and exits 3; a bad URL is refused.
    let (_, paused, _) = fabro(&["run", "gate.dot", "--server", &server, "--detach"]);
    let (code, _, stderr) = fabro(&["wait", &paused, "--server", &server, "--timeout", "60s"]);
    assert_eq!(code, Some(3), "{stderr}");
    let (code, _, stderr) = fabro(&["attach", "--last", "--server", &server]);
    assert_eq!(code, Some(3), "{stderr}");
    assert!(stderr.contains("review"), "{stderr}");
    let (code, _, stderr) = fabro(&["wait", &paused, "--server", "localhost:1"]);
    assert_eq!(code, Some(2), "{stderr}");
    assert!(stderr.contains("is not a URL of a fabro service"), "{stderr}");
}

#[test]
fn a_run_is_interrupted_between_stages_rewound_forked_and_its_stage_files_read_over_the_api() {
    let dir = workspace();
    std::fs::write(dir.path().join("wf/steps.dot"), common::three_steps("go-$FABRO_INPUT_N")).unwrap();
    let service = Service::start(dir.path(), "2");
    let steps = || std::fs::read_to_string(dir.path().join("steps")).unwrap_or_default();
    let (code, created) =
        service.call("POST", "/runs", Some(json!({"workflow": "steps.dot", "inputs": {"n": 1}})), &[]);
    assert_eq!(code, 202, "{created}");
    let id = created["id"].as_str().unwrap().to_string();
    wait_until("stage two starts", || dir.path().join("two-started").exists());
    // Interrupted: the stage in flight ends, then the run pauses before the next.
    let (code, answer) = service.call("POST", &format!("/runs/{id}/interrupt"), Some(json!({})), &[]);
    assert_eq!((code, answer["status"].as_str()), (202, Some("interrupting")), "{answer}");
    go(dir.path(), 1);
    wait_until("the run pauses", || service.status(&id) == "paused");
    assert_eq!(steps(), "one\ntwo\n");
    let run_dir = dir.path().join(".fabro/runs").join(&id);
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("manifest.json")).unwrap()).unwrap();
    assert_eq!(manifest["pause"]["kind"], "interrupt", "{manifest}");
    assert!(!run_dir.join("interrupt.request").exists(), "the request was taken");
    let (code, answer) = service.call("POST", &format!("/runs/{id}/interrupt"), Some(json!({})), &[]);
    assert_eq!((code, answer["error"]["code"].as_str()), (409, Some("not_running")), "{answer}");

    // A stage visit's status and files; a link planted in it is neither listed as a file nor read.
    std::os::unix::fs::symlink("/etc/passwd", run_dir.join("stages/one/1/planted")).unwrap();
    let (code, visit) = service.call("GET", &format!("/runs/{id}/stages/one/1"), None, &[]);
    assert_eq!(code, 200, "{visit}");
    assert_eq!(visit["status"]["outcome"], "success", "{visit}");
    let files: Vec<&str> =
        visit["files"].as_array().unwrap().iter().map(|f| f["path"].as_str().unwrap()).collect();
    assert!(files.contains(&"stdout.log") && !files.contains(&"planted"), "{files:?}");
    let (code, stdout) = service.call("GET", &format!("/runs/{id}/stages/one/1/files/stdout.log"), None, &[]);
    assert_eq!((code, stdout.as_str()), (200, Some("one\n")));
    for bad in ["planted", "..%2Fmanifest.json", "nothing"] {
        let (code, answer) = service.call("GET", &format!("/runs/{id}/stages/one/1/files/{bad}"), None, &[]);
        assert_eq!((code, answer["error"]["code"].as_str()), (404, Some("not_found")), "{bad}: {answer}");
    }
    let (code, _) = service.call("GET", &format!("/runs/{id}/stages/one/9"), None, &[]);
    assert_eq!(code, 404);
    // (fabro resumes no run directory holding a link: take it away.)
    std::fs::remove_file(run_dir.join("stages/one/1/planted")).unwrap();

    // Rewound to right after `one` and resumed: `two` runs again, then the rest.
    let (code, answer) =
        service.call("POST", &format!("/runs/{id}/rewind"), Some(json!({"to": "one", "resume": true})), &[]);
    assert_eq!((code, answer["next_node"].as_str()), (200, Some("two")), "{answer}");
    wait_until("the rewound run ends", || service.status(&id) == "succeeded");
    assert_eq!(steps(), "one\ntwo\ntwo\nthree\n");
    let (code, answer) =
        service.call("POST", &format!("/runs/{id}/rewind"), Some(json!({"to": "nowhere"})), &[]);
    assert_eq!((code, answer["error"]["code"].as_str()), (400, Some("bad_request")), "{answer}");

    // Forked after `two`: a new run that goes on from `three`; the original is left alone.
    let (code, forked) =
        service.call("POST", &format!("/runs/{id}/fork"), Some(json!({"to": "two", "resume": true})), &[]);
    assert_eq!((code, forked["next_node"].as_str()), (201, Some("three")), "{forked}");
    let fork_id = forked["id"].as_str().unwrap().to_string();
    assert_ne!(fork_id, id);
    wait_until("the fork ends", || service.status(&fork_id) == "succeeded");
    assert_eq!(steps(), "one\ntwo\ntwo\nthree\nthree\n");
    assert_eq!(service.status(&id), "succeeded");
}
