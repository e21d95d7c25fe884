//! The commands' `--server URL`: `fabro run`, `attach`, `wait` and `cancel` on a run service
//! (`fabro serve`) through its API instead of a runs directory on this machine.

use std::time::{Duration, Instant};

use fabro::graph::Choice;
use fabro::interview::console::Console;
use fabro::interview::{Answer, Interviewer, Question};
use fabro::run_client::{ClientError, RunClient};
use serde_json::{json, Value};

use super::exit;
use super::progress::{ProgressView, ViewOptions};

/// How often a run's status is asked for.
const POLL: Duration = Duration::from_millis(300);
/// How long a cancelled run may take to stop.
const END_WAIT: Duration = Duration::from_secs(60);

/// The client of the service at `url`, or the exit code after saying why there is none.
pub fn client(url: &str) -> Result<RunClient, u8> {
    RunClient::new(url).map_err(|error| {
        eprintln!("error: --server: {error}");
        exit::INVALID
    })
}

/// Runs `action` on the service at `url` with the id of the run `run` names there; the exit code.
pub fn on_server<Action, Done>(url: &str, run: super::RunRef, action: Action) -> u8
where
    Action: FnOnce(RunClient, String) -> Done + Send + 'static,
    Done: std::future::Future<Output = u8> + Send + 'static,
{
    let client = match client(url) {
        Ok(client) => client,
        Err(code) => return code,
    };
    super::block_on(async move {
        match run_id(&client, &run).await {
            Ok(id) => action(client, id).await,
            Err(code) => code,
        }
    })
}

/// Says what went wrong; the exit code for it (2 for a refusal of what was asked, 1 otherwise).
pub fn failed(error: &ClientError) -> u8 {
    eprintln!("error: {error}");
    if let ClientError::Refused { diagnostics, .. } = error {
        for line in diagnostics {
            eprintln!("  {line}");
        }
    }
    match error {
        ClientError::Refused { status, .. } if *status < 500 => exit::INVALID,
        ClientError::BadUrl(_) => exit::INVALID,
        _ => exit::FAILED,
    }
}

/// The full id of the run named (its id, a unique prefix, or the newest run with `last`).
pub async fn run_id(client: &RunClient, run: &super::RunRef) -> Result<String, u8> {
    match &run.run {
        Some(reference) if !run.last => client.resolve(reference).await.map_err(|error| failed(&error)),
        _ => {
            let runs = client.runs().await.map_err(|error| failed(&error))?;
            runs.first().and_then(|newest| newest["id"].as_str()).map(str::to_string).ok_or_else(|| {
                eprintln!("error: the service has no runs");
                exit::INVALID
            })
        }
    }
}

/// Whether a status is one a run stays in (it will not change by itself).
fn is_settled(status: &str) -> bool {
    !matches!(status, "queued" | "starting" | "running" | "unknown")
}

/// Says how the run settled; the exit code `fabro run` would have given.
fn settled(id: &str, run: &Value) -> u8 {
    let status = run["status"].as_str().unwrap_or("unknown");
    match status {
        "succeeded" => {
            eprintln!("run {id} succeeded");
            exit::SUCCESS
        }
        "failed" => {
            let reason =
                run["failure_reason"].as_str().map(|reason| format!(": {reason}")).unwrap_or_default();
            eprintln!("run {id} failed{reason}");
            exit::FAILED
        }
        "paused" => {
            eprintln!("run {id} paused; answer or continue it with: fabro attach --server URL {id}");
            exit::PAUSED
        }
        "crashed" => {
            eprintln!("run {id} stopped without finishing (its process died); the service can resume it");
            exit::FAILED
        }
        "never_started" => {
            eprintln!(
                "run {id} never started; see output.log in {}",
                run["run_dir"].as_str().unwrap_or("its directory")
            );
            exit::INVALID
        }
        other => {
            eprintln!("run {id} was {other}");
            exit::INTERRUPTED
        }
    }
}

/// `fabro wait --server`: polls the run until it settles.
pub async fn wait(client: &RunClient, id: &str, timeout: Option<Duration>) -> u8 {
    let started = Instant::now();
    loop {
        let run = match client.run(id).await {
            Ok(run) => run,
            Err(error) => return failed(&error),
        };
        if is_settled(run["status"].as_str().unwrap_or("unknown")) {
            return settled(id, &run);
        }
        if timeout.is_some_and(|timeout| started.elapsed() >= timeout) {
            eprintln!("the run has not settled yet; it goes on");
            return 124;
        }
        tokio::time::sleep(POLL).await;
    }
}

/// `fabro cancel --server`.
pub async fn cancel(client: &RunClient, id: &str, no_wait: bool) -> u8 {
    let answer = match client.cancel(id).await {
        Ok(answer) => answer,
        Err(error) => return failed(&error),
    };
    if answer["status"] == "canceled" {
        eprintln!("run {id} was queued; it will not start");
        return exit::SUCCESS;
    }
    if no_wait {
        eprintln!("told run {id} to stop");
        return exit::SUCCESS;
    }
    let deadline = Instant::now() + END_WAIT;
    loop {
        match client.run(id).await {
            Ok(run) if is_settled(run["status"].as_str().unwrap_or("unknown")) => {
                eprintln!("run {id} stopped: {}", run["status"].as_str().unwrap_or("unknown"));
                return exit::SUCCESS;
            }
            Ok(_) if Instant::now() > deadline => {
                eprintln!("error: run {id} has not stopped after {}s", END_WAIT.as_secs());
                return exit::FAILED;
            }
            Ok(_) => tokio::time::sleep(POLL).await,
            Err(error) => return failed(&error),
        }
    }
}

/// `fabro attach --server` (and `fabro run --server` without `--detach`): the run's events as
/// the service streams them, shown as `fabro run` shows its own; a gate it stops at is asked
/// here and answered through the service.
pub async fn attach(client: &RunClient, id: &str, no_answer: bool) -> u8 {
    let asks = !no_answer && Console::is_available();
    let view = ProgressView::new(ViewOptions { quiet: false, asks_person: asks, stream_output: false });
    let mut last_seq = 0;
    loop {
        match client.follow_events(id, last_seq, |event| view.show(&event)).await {
            Ok(seq) => last_seq = seq,
            Err(error) => return failed(&error),
        }
        let run = match client.run(id).await {
            Ok(run) => run,
            Err(error) => return failed(&error),
        };
        let status = run["status"].as_str().unwrap_or("unknown");
        if status == "paused" && asks && run["gate"].is_object() {
            if let Err(code) = answer_here(client, id, &run).await {
                return code;
            }
            continue;
        }
        if is_settled(status) {
            return settled(id, &run);
        }
        // Queued, or the stream ended early (a restart of the service): look again.
        tokio::time::sleep(POLL).await;
    }
}

/// Asks the gate of `run` at this terminal and sends the answer; returns once the run goes on.
async fn answer_here(client: &RunClient, id: &str, run: &Value) -> Result<(), u8> {
    let gate = &run["gate"];
    let text = |value: &Value| value.as_str().unwrap_or_default().to_string();
    let offered: Vec<(String, String, String)> = gate["choices"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|choice| (text(&choice["key"]), text(&choice["label"]), text(&choice["target"])))
        .collect();
    let choices: Vec<Choice<'_>> =
        offered.iter().map(|(key, label, target)| Choice { key: key.clone(), label, target }).collect();
    let gate_id = text(&gate["id"]);
    let question_text = text(&gate["question"]);
    let question = Question {
        gate_id: &gate_id,
        text: &question_text,
        choices: &choices,
        timeout: None,
        freeform: gate["freeform"].as_bool().unwrap_or(false),
    };
    let body = match Console::new().ask(&question).await {
        Answer::Choice(index) => json!({ "answer": choices[index].target }),
        Answer::Freeform(text) => json!({ "text": text }),
        Answer::Unrecognized(_) | Answer::Timeout | Answer::Unavailable => return Err(settled(id, run)),
    };
    client.answer(id, &body).await.map_err(|error| failed(&error))?;
    let deadline = Instant::now() + END_WAIT;
    loop {
        let run = client.run(id).await.map_err(|error| failed(&error))?;
        if run["status"] != "paused" {
            return Ok(());
        }
        if Instant::now() > deadline {
            eprintln!("error: the service did not resume run {id} after the answer");
            return Err(exit::FAILED);
        }
        tokio::time::sleep(POLL).await;
    }
}
