//! Preamble benchmark: builds preambles for runs of 10, 100 and 1,000 completed stages at every
//! fidelity level and prints the median of 50 builds in microseconds as a Markdown table.
//!
//! Run with `cargo run --release --example bench_preamble`.

use std::time::Instant;

use fabro::context::Context;
use fabro::fidelity::preamble::{build, PreambleInput};
use fabro::graph::settings::FidelityMode;
use fabro::graph::HandlerType;
use fabro::outcome::StageStatus;
use fabro::run_dir::stage_summary::StageSummary;
use fabro::usage::Usage;

const RUNS: usize = 50;
const MODES: [FidelityMode; 5] = [
    FidelityMode::Truncate,
    FidelityMode::Compact,
    FidelityMode::SummaryLow,
    FidelityMode::SummaryMedium,
    FidelityMode::SummaryHigh,
];

fn stage(i: usize) -> StageSummary {
    let mut s = StageSummary {
        node_id: format!("stage_{i}"),
        visit: 1 + (i % 3) as u32,
        handler: None,
        status: StageStatus::Success,
        duration_ms: 1_000 + i as u64,
        branch: None,
        failure_reason: None,
        notes: Some("notes about the stage ".repeat(5)),
        script: None,
        stdout_tail: None,
        stderr_tail: None,
        model: None,
        usage: None,
        cost_usd: None,
        dir: None,
        response_excerpt: None,
        files_touched: Vec::new(),
        human_choice: None,
    };
    match i % 3 {
        0 => {
            s.handler = Some(HandlerType::Agent);
            s.model = Some("claude-sonnet-4-5".into());
            s.usage = Some(Usage::new(12_400, 3_200));
            s.files_touched = vec!["src/lib.rs".into(), format!("src/stage_{i}.rs")];
            s.response_excerpt = Some("Implemented the change and updated the tests. ".repeat(10));
        }
        1 => {
            s.handler = Some(HandlerType::Command);
            s.status = StageStatus::Fail;
            s.failure_reason = Some("command exited with code 101".into());
            s.script = Some("cargo test 2>&1".into());
            s.stdout_tail = Some("test result: FAILED. 41 passed; 1 failed\n".repeat(10));
            s.stderr_tail = Some("error: test failed\n".repeat(3));
        }
        _ => {
            s.handler = Some(HandlerType::Human);
            s.human_choice = Some("[A] Approve".into());
        }
    }
    s
}

fn main() {
    let mut context = Context::new();
    context.set("internal.run_id", "bench");
    context.set("graph.goal", "Benchmark the preamble");
    context.set("outcome", "success");
    for k in 0..20 {
        context.set(format!("key_{k}"), "some value ".repeat(10));
    }
    println!("| stages | {} |", MODES.map(|m| m.as_str()).join(" | "));
    println!("|---:|{}", "---:|".repeat(MODES.len()));
    for count in [10, 100, 1_000] {
        let stages: Vec<StageSummary> = (0..count).map(stage).collect();
        let input = PreambleInput {
            goal: "Benchmark the preamble",
            run_id: "bench",
            stages: &stages,
            context: &context,
        };
        let mut row = format!("| {count} |");
        for mode in MODES {
            let mut times: Vec<f64> = (0..RUNS)
                .map(|_| {
                    let start = Instant::now();
                    let text = build(mode, &input);
                    let elapsed = start.elapsed().as_secs_f64() * 1e6;
                    std::hint::black_box(text);
                    elapsed
                })
                .collect();
            times.sort_by(|a, b| a.total_cmp(b));
            row.push_str(&format!(" {:.1} |", times[RUNS / 2]));
        }
        println!("{row}");
    }
}
