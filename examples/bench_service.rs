//! Load benchmark of the run service (`fabro serve --workflows`): submits 200 runs of a 20-stage
//! workflow at once over the API with `--max-concurrent-runs 8`, polls the API while they run,
//! and reports how long they took, whether they started in the order they were submitted, the
//! API's latency (p50, p99, max) under that load and the service's peak RSS. Then it holds 1,000
//! server-sent-event streams of one running run open at once and checks that each gets the run's
//! events and ends with it.
//!
//! Needs `target/release/fabro` (`cargo build --release`); run with
//! `cargo run --release --example bench_service` (add `-- RUNS STAGES MAX SSE` to pick sizes).

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

fn main() {
    let numbers: Vec<usize> = std::env::args().skip(1).filter_map(|arg| arg.parse().ok()).collect();
    let runs = numbers.first().copied().unwrap_or(200);
    let stages = numbers.get(1).copied().unwrap_or(20);
    let max = numbers.get(2).copied().unwrap_or(8);
    let streams = numbers.get(3).copied().unwrap_or(1000);
    let fabro = fabro_binary();
    let dir = tempfile::tempdir().expect("temporary directory");
    std::fs::create_dir_all(dir.path().join("wf")).expect("wf");
    std::fs::write(dir.path().join("wf/chain.dot"), chain(stages)).expect("workflow");
    std::fs::write(dir.path().join("wf/held.dot"), HELD).expect("workflow");
    let (mut service, base) = start_service(&fabro, dir.path(), max);
    let pid = service.id();
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("runtime");
    runtime.block_on(async {
        let client = reqwest::Client::new();
        let mut latencies = Vec::new();
        let clock = Instant::now();
        let mut ids = Vec::new();
        for n in 0..runs {
            let body = json!({"workflow": "chain.dot", "labels": {"n": n.to_string()}});
            let (answer, took) = call(&client, "POST", &format!("{base}/api/v1/runs"), Some(body)).await;
            latencies.push(took);
            ids.push(answer["id"].as_str().expect("an id").to_string());
        }
        let submitted = clock.elapsed();
        loop {
            let (listed, took) = call(&client, "GET", &format!("{base}/api/v1/runs"), None).await;
            latencies.push(took);
            let id = &ids[latencies.len() % ids.len()];
            let (_, took) = call(&client, "GET", &format!("{base}/api/v1/runs/{id}"), None).await;
            latencies.push(took);
            let runs: &Vec<Value> = listed.as_array().expect("a list");
            let done = runs.iter().filter(|run| run["status"] == "succeeded").count();
            let failed: Vec<&Value> = runs
                .iter()
                .filter(|run| !matches!(run["status"].as_str(), Some("succeeded" | "queued" | "starting" | "running")))
                .collect();
            assert!(failed.is_empty(), "runs that did not succeed: {failed:?}");
            if done == ids.len() {
                break;
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let finished = clock.elapsed();
        // In order of submission: no run was launched before one submitted earlier (processes
        // launched together may write their manifests in any order).
        let runs_dir = dir.path().join(".fabro/runs");
        let launched_at = |id: &str| -> String {
            let text = std::fs::read_to_string(runs_dir.join(id).join("submission.json")).unwrap_or_default();
            let submission: Value = serde_json::from_str(&text).unwrap_or(Value::Null);
            submission["process"]["launched_at"].as_str().unwrap_or("").to_string()
        };
        let mut in_order: Vec<&String> = ids.iter().collect();
        in_order.sort();
        let launches: Vec<String> = in_order.iter().map(|id| launched_at(id)).collect();
        let out_of_order = launches.windows(2).filter(|pair| pair[1] < pair[0]).count();
        latencies.sort();
        let percentile = |p: f64| latencies[((latencies.len() - 1) as f64 * p) as usize];
        println!("{runs} runs of {stages} command stages, --max-concurrent-runs {max}, 2 cores:");
        println!("  submitted in {:.2} s; all succeeded after {:.1} s ({:.0} ms per run)", submitted.as_secs_f64(), finished.as_secs_f64(), finished.as_secs_f64() * 1000.0 / runs as f64);
        println!("  launched out of submission order: {out_of_order}");
        println!(
            "  API latency over {} requests: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms",
            latencies.len(),
            ms(percentile(0.5)),
            ms(percentile(0.99)),
            ms(*latencies.last().expect("requests"))
        );
        println!("  service peak RSS: {} MB (VmHWM), now {} MB", status_kb(pid, "VmHWM") / 1024, status_kb(pid, "VmRSS") / 1024);

        // SSE: `streams` clients follow one run that waits for a file.
        let (answer, _) =
            call(&client, "POST", &format!("{base}/api/v1/runs"), Some(json!({"workflow": "held.dot"}))).await;
        let id = answer["id"].as_str().expect("an id").to_string();
        let url = format!("{base}/api/v1/runs/{id}/events");
        let clock = Instant::now();
        let mut followers = tokio::task::JoinSet::new();
        for _ in 0..streams {
            let client = reqwest::Client::new();
            let url = url.clone();
            followers.spawn(async move {
                let response = client.get(&url).send().await.map_err(|error| error.to_string())?;
                let body = response.text().await.map_err(|error| error.to_string())?;
                Ok::<usize, String>(body.lines().filter(|line| line.starts_with("id: ")).count())
            });
        }
        let release = dir.path().join("release");
        tokio::time::sleep(Duration::from_secs(3)).await;
        let held = status_kb(pid, "VmRSS") / 1024;
        std::fs::write(&release, "").expect("release");
        let mut counts = Vec::new();
        while let Some(joined) = followers.join_next().await {
            match joined.expect("follower") {
                Ok(count) => counts.push(count),
                Err(error) => panic!("a stream failed: {error}"),
            }
        }
        let all_same = counts.iter().all(|count| *count == counts[0] && *count > 3);
        println!(
            "  {streams} SSE streams of one run at once: all ended with the run after {:.1} s, each with {} events ({}); service RSS while held: {held} MB",
            clock.elapsed().as_secs_f64(),
            counts[0],
            if all_same { "all the same" } else { "NOT all the same" }
        );
        assert!(all_same, "{counts:?}");
    });
    let _ = service.kill();
    let _ = service.wait();
}

/// A run that waits for the file `release` in the service's directory.
const HELD: &str = r#"digraph held {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    wait [shape=parallelogram, script="while [ ! -f release ]; do sleep 0.05; done"]
    start -> wait -> exit
}"#;

fn chain(stages: usize) -> String {
    let mut dot = String::from("digraph chain {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n");
    for i in 0..stages {
        dot.push_str(&format!("  s{i} [shape=parallelogram, script=\"true\"]\n"));
    }
    let names: Vec<String> = std::iter::once("start".to_string())
        .chain((0..stages).map(|i| format!("s{i}")))
        .chain(["exit".into()])
        .collect();
    dot.push_str(&format!("  {}\n}}\n", names.join(" -> ")));
    dot
}

fn fabro_binary() -> PathBuf {
    let exe = std::env::current_exe().expect("this program");
    // target/release/examples/bench_service -> target/release/fabro
    let fabro = exe.parent().and_then(Path::parent).map(|dir| dir.join("fabro")).expect("target dir");
    assert!(fabro.is_file(), "{} is missing: run `cargo build --release` first", fabro.display());
    fabro
}

fn start_service(fabro: &Path, dir: &Path, max: usize) -> (Child, String) {
    let mut child = Command::new(fabro)
        .args(["serve", "--workflows", "wf", "--max-concurrent-runs", &max.to_string()])
        .current_dir(dir)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("fabro serve");
    let mut first = String::new();
    BufReader::new(child.stdout.take().expect("stdout")).read_line(&mut first).expect("its URL");
    let base =
        first.trim().strip_prefix("fabro serve: ").expect("the URL line").trim_end_matches('/').to_string();
    (child, base)
}

async fn call(client: &reqwest::Client, method: &str, url: &str, body: Option<Value>) -> (Value, Duration) {
    let clock = Instant::now();
    let mut request = client.request(method.parse().expect("method"), url);
    if let Some(body) = body {
        request = request.header("content-type", "application/json").body(body.to_string());
    }
    let response = request.send().await.expect("request");
    let status = response.status();
    let text = response.text().await.expect("body");
    let took = clock.elapsed();
    assert!(status.is_success(), "{method} {url}: {status} {text}");
    (serde_json::from_str(&text).unwrap_or(Value::Null), took)
}

fn ms(duration: Duration) -> f64 {
    duration.as_secs_f64() * 1000.0
}

/// A `/proc/PID/status` field in kB.
fn status_kb(pid: u32, field: &str) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|line| line.strip_prefix(&format!("{field}:")))
                .and_then(|value| value.split_whitespace().next()?.parse().ok())
        })
        .unwrap_or(0)
}
