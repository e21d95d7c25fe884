//! Engine overhead benchmark: runs generated workflows of conditional (no-op) stages with
//! checkpoints on, and splits the time per stage into engine CPU, checkpoint writes and stage
//! files (stage directory + status.json).
//!
//! Run with `cargo run --release --example bench_engine` (add `-- 100 1000 10000` to pick chain
//! lengths). Workflows: a linear chain of N stages, and one stage looping 1,000 times.

use std::fmt::Write as _;
use std::sync::Arc;
use std::time::{Duration, Instant};

use fabro::backends::simulated::SimulatedBackend;
use fabro::engine::{Engine, RunOptions, RunReport};
use fabro::handlers::{builtin_handlers, Services};
use fabro::interview::NoAnswers;
use fabro::source::SourceFile;
use fabro::Loader;
use tokio_util::sync::CancellationToken;

fn chain(stages: usize) -> String {
    let mut dot = format!(
        "digraph Chain {{\n  max_node_visits={}\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n",
        stages + 10
    );
    for i in 0..stages {
        let _ = writeln!(dot, "  s{i} [shape=diamond]");
    }
    dot.push_str("  start -> s0\n");
    for i in 0..stages {
        let next = if i + 1 < stages { format!("s{}", i + 1) } else { "exit".to_string() };
        let _ = writeln!(dot, "  s{i} -> {next}");
    }
    dot.push_str("}\n");
    dot
}

fn looping(iterations: usize) -> String {
    format!(
        "digraph Loop {{\n  max_node_visits={}\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  check [shape=diamond]\n  start -> check\n  check -> check [condition=\"context.internal.node_visit_count < {iterations}\"]\n  check -> exit\n}}\n",
        iterations + 10
    )
}

async fn run(dot: &str) -> (RunReport, Duration) {
    let checked = Loader::new().load_source(SourceFile::new("bench.dot", dot)).expect("loads");
    let valid = checked.into_valid().expect("valid");
    let dir = tempfile::tempdir().expect("temp dir");
    let options = RunOptions {
        run_dir: Some(dir.path().join("run")),
        work_dir: dir.path().to_path_buf(),
        dry_run: false,
        context: Vec::new(),
        ..RunOptions::default()
    };
    let engine = Engine::new(
        builtin_handlers(),
        Services { backend: Arc::new(SimulatedBackend), interviewer: Arc::new(NoAnswers) },
    );
    let clock = Instant::now();
    let report = engine.run(&valid, &options, |_| {}, CancellationToken::new()).await.expect("runs");
    (report, clock.elapsed())
}

fn us(d: Duration, stages: usize) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e6 / stages as f64)
}

#[tokio::main]
async fn main() {
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![100, 1_000, 10_000] } else { sizes };
    println!("| workflow | stages run | total ms | per stage us | engine CPU us | checkpoint us | stage files us | events us |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let mut cases: Vec<(String, String)> =
        sizes.iter().map(|n| (format!("chain of {n}"), chain(*n))).collect();
    cases.push(("loop x1000".to_string(), looping(1_000)));
    for (name, dot) in cases {
        let (report, total) = run(&dot).await;
        assert_eq!(report.result.status.as_str(), "succeeded", "{name}: {:?}", report.result.failure_reason);
        let stages = report.result.stages.len();
        let timings = report.timings;
        let engine = total.saturating_sub(timings.checkpoints + timings.stage_files + timings.events);
        println!(
            "| {name} | {stages} | {:.0} | {} | {} | {} | {} | {} |",
            total.as_secs_f64() * 1e3,
            us(total, stages),
            us(engine, stages),
            us(timings.checkpoints, stages),
            us(timings.stage_files, stages),
            us(timings.events, stages),
        );
    }
}
