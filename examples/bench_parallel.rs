//! Parallel fan-out/fan-in benchmark.
//!
//! 1. A parallel stage with 1,000 one-node (no-op) branches over a context of 10,000 keys, 100 of
//!    them 50 KB values (5 MB in all), joined at a fan-in. Reports the time from the start of the
//!    fan-out to the end of the fan-in, and the process's peak memory (max RSS).
//! 2. A parallel stage with 8 branches of 100 stages each.
//!
//! Run with `cargo run --release --example bench_parallel`. Targets (the parallel issue): case 1
//! under 1 second and peak memory under 300 MB.

use std::fmt::Write as _;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use fabro::backends::simulated::SimulatedBackend;
use fabro::engine::{Engine, RunOptions, RunReport};
use fabro::event::Event;
use fabro::event_log::LoggedEvent;
use fabro::handlers::builtin_handlers;
use fabro::interview::NoAnswers;
use fabro::source::SourceFile;
use fabro::stage::Services;
use fabro::Loader;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

/// `branches` branches of `length` no-op stages each, between a fan-out and a fan-in.
fn fan(branches: usize, length: usize, max_parallel: usize) -> String {
    let mut dot = format!(
        "digraph Fan {{\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  fan [shape=component, max_parallel={max_parallel}]\n  merge [shape=tripleoctagon]\n  start -> fan\n  merge -> exit\n"
    );
    for b in 0..branches {
        for s in 0..length {
            let _ = writeln!(dot, "  b{b}_{s} [shape=diamond]");
        }
        let _ = writeln!(dot, "  fan -> b{b}_0");
        for s in 1..length {
            let _ = writeln!(dot, "  b{b}_{} -> b{b}_{s}", s - 1);
        }
        let _ = writeln!(dot, "  b{b}_{} -> merge", length - 1);
    }
    dot.push_str("}\n");
    dot
}

/// 10,000 keys; every 100th holds 50 KB.
fn big_context() -> Vec<(String, Value)> {
    (0..10_000)
        .map(|i| {
            let value = if i % 100 == 0 { json!("x".repeat(50_000)) } else { json!(format!("value {i}")) };
            (format!("key.{i:05}"), value)
        })
        .collect()
}

/// Runs the workflow; returns the report and the time from `parallel.started` to the fan-in's
/// `stage.completed`.
async fn run(dot: &str, context: Vec<(String, Value)>) -> (RunReport, Duration) {
    let checked = Loader::new().load_source(SourceFile::new("bench.dot", dot)).expect("loads");
    let valid = checked.into_valid().expect("valid");
    let dir = tempfile::tempdir().expect("temp dir");
    let options = RunOptions {
        run_dir: Some(dir.path().join("run")),
        run_id: None,
        work_dir: dir.path().to_path_buf(),
        context,
        ..RunOptions::default()
    };
    let engine = Engine::new(
        builtin_handlers(),
        Services { backend: Arc::new(SimulatedBackend), interviewer: Arc::new(NoAnswers) },
    );
    let marks: Arc<Mutex<(Option<std::time::Instant>, Option<std::time::Instant>)>> = Arc::default();
    let seen = Arc::clone(&marks);
    let observe = move |event: &LoggedEvent| {
        let mut marks = seen.lock().unwrap();
        if matches!(event.event, Event::ParallelStarted { .. }) {
            marks.0 = Some(std::time::Instant::now());
        }
        if matches!(event.event, Event::StageCompleted(_)) && event.node_id.as_deref() == Some("merge") {
            marks.1 = Some(std::time::Instant::now());
        }
    };
    let report = engine.run(&valid, &options, observe, CancellationToken::new()).await.expect("runs");
    let (start, end) = *marks.lock().unwrap();
    (report, end.expect("fan-in ran") - start.expect("fan-out ran"))
}

fn peak_rss_mb() -> f64 {
    // SAFETY: getrusage only writes into the struct we pass.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    usage.ru_maxrss as f64 / 1024.0
}

#[tokio::main]
async fn main() {
    println!("| case | stages run | fan-out to fan-in ms | peak RSS MB |");
    println!("|---|---:|---:|---:|");
    let (report, elapsed) = run(&fan(1_000, 1, 1_000), big_context()).await;
    assert_eq!(report.result.status.as_str(), "succeeded", "{:?}", report.result.failure_reason);
    println!(
        "| 1,000 one-node branches, 10,000-key context (5 MB) | {} | {:.0} | {:.0} |",
        report.result.stages.len(),
        elapsed.as_secs_f64() * 1e3,
        peak_rss_mb()
    );
    let (report, elapsed) = run(&fan(8, 100, 8), Vec::new()).await;
    assert_eq!(report.result.status.as_str(), "succeeded", "{:?}", report.result.failure_reason);
    println!(
        "| 8 branches of 100 stages | {} | {:.0} | {:.0} |",
        report.result.stages.len(),
        elapsed.as_secs_f64() * 1e3,
        peak_rss_mb()
    );
}
