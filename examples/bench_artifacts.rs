//! Artifact offloading end to end: runs a workflow whose command stage writes 10 MB to stdout,
//! through the real engine (command handler, context, artifact store, checkpoint), and reports
//! the stage time, the time spent saving checkpoints and the checkpoint size.
//!
//! Run with `cargo run --release --example bench_artifacts`.

use std::sync::Arc;
use std::time::Instant;

use fabro::backends::simulated::SimulatedBackend;
use fabro::engine::{Engine, RunOptions};
use fabro::handlers::builtin_handlers;
use fabro::interview::NoAnswers;
use fabro::source::SourceFile;
use fabro::stage::Services;
use fabro::Loader;
use tokio_util::sync::CancellationToken;

const WORKFLOW: &str = r#"digraph offload {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    big [shape=parallelogram, script="head -c 10000000 /dev/zero | tr '\\0' x"]
    start -> big -> exit
}
"#;

#[tokio::main]
async fn main() {
    println!("| run | total ms | big stage ms | checkpoints ms | checkpoint.json bytes | artifact bytes |");
    println!("|---:|---:|---:|---:|---:|---:|");
    for round in 1..=5 {
        let valid = Loader::new()
            .load_source(SourceFile::new("offload.dot", WORKFLOW))
            .expect("loads")
            .into_valid()
            .expect("valid");
        let dir = tempfile::tempdir().expect("temp dir");
        let options = RunOptions {
            run_dir: Some(dir.path().join("run")),
            work_dir: dir.path().to_path_buf(),
            ..RunOptions::default()
        };
        let engine = Engine::new(
            builtin_handlers(),
            Services { backend: Arc::new(SimulatedBackend), interviewer: Arc::new(NoAnswers) },
        );
        let clock = Instant::now();
        let report = engine.run(&valid, &options, |_| {}, CancellationToken::new()).await.expect("runs");
        let total = clock.elapsed();
        assert_eq!(report.result.status.as_str(), "succeeded");
        let big = report.result.stages.iter().find(|s| s.node_id == "big").map_or(0, |s| s.duration_ms);
        let run = dir.path().join("run");
        let checkpoint = std::fs::metadata(run.join("checkpoint.json")).map_or(0, |m| m.len());
        let artifact =
            std::fs::metadata(run.join("artifacts/values/command%2Eoutput.json")).map_or(0, |m| m.len());
        println!(
            "| {round} | {:.0} | {big} | {:.1} | {checkpoint} | {artifact} |",
            total.as_secs_f64() * 1e3,
            report.timings.checkpoints.as_secs_f64() * 1e3
        );
    }
}
