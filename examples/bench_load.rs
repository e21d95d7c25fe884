//! Load benchmark: parse, build, transform and validate generated workflows of 1,000, 10,000 and
//! 100,000 nodes (two edges per node, conditions on half of the edges, a model stylesheet).
//!
//! Run with `cargo run --release --example bench_load` (add `-- 1000 10000` to pick sizes).
//! Prints, per size, the phases of the median run, the fastest run's total (the least disturbed
//! by other load on the machine), and the cost per node so that linear growth is visible.

use std::fmt::Write as _;
use std::hint::black_box;
use std::time::{Duration, Instant};

use fabro::graph::{self, builtin_transforms};
use fabro::source::SourceFile;
use fabro::{syntax, validate};

/// A workflow with `nodes` stages in a chain; every stage has an unconditional edge to the next
/// and a conditional edge two ahead.
fn generate(nodes: usize) -> String {
    let mut dot = String::with_capacity(nodes * 160);
    dot.push_str("digraph Bench {\n  goal=\"Benchmark the loader\"\n");
    dot.push_str(
        "  model_stylesheet=\"* { llm_model: claude-sonnet-4-5 } .review { llm_model: gpt-5.2 }\"\n",
    );
    dot.push_str("  start [shape=Mdiamond]\n  exit [shape=Msquare]\n");
    for i in 0..nodes {
        let class = if i % 3 == 0 { ", class=\"review\"" } else { "" };
        let _ = writeln!(
            dot,
            "  n{i} [label=\"Stage {i}\", prompt=\"Do step {i} of $goal\", max_retries=2{class}]"
        );
    }
    let _ = writeln!(dot, "  start -> n0");
    for i in 0..nodes {
        let next = if i + 1 < nodes { format!("n{}", i + 1) } else { "exit".to_string() };
        let skip = if i + 2 < nodes { format!("n{}", i + 2) } else { "exit".to_string() };
        let _ = writeln!(dot, "  n{i} -> {next}");
        let _ = writeln!(
            dot,
            "  n{i} -> {skip} [condition=\"outcome=success && context.skip_{i}=true\", weight=1]"
        );
    }
    dot.push_str("}\n");
    dot
}

#[derive(Default, Clone, Copy)]
struct Phases {
    parse: Duration,
    build: Duration,
    transform: Duration,
    validate: Duration,
}

impl Phases {
    fn total(&self) -> Duration {
        self.parse + self.build + self.transform + self.validate
    }
}

fn measure(text: &str) -> Phases {
    let source = std::sync::Arc::new(SourceFile::new("bench.dot", text));
    let t0 = Instant::now();
    let tree = syntax::parse(source.text()).expect("generated workflow parses");
    let t1 = Instant::now();
    let mut workflow = graph::build(&tree, source.clone());
    let t2 = Instant::now();
    let mut diagnostics = Vec::new();
    for transform in builtin_transforms() {
        diagnostics.extend(transform.apply(&mut workflow));
    }
    let t3 = Instant::now();
    diagnostics.extend(validate::run_rules(&workflow, &validate::builtin_rules(Vec::new())));
    validate::sort_and_dedup(&mut diagnostics);
    let t4 = Instant::now();
    assert!(diagnostics.is_empty(), "generated workflow should be clean: {:?}", diagnostics.first());
    black_box((&tree, &workflow));
    Phases { parse: t1 - t0, build: t2 - t1, transform: t3 - t2, validate: t4 - t3 }
}

/// The median and the fastest run, by total time.
fn median_and_min(mut runs: Vec<Phases>) -> (Phases, Phases) {
    runs.sort_by_key(Phases::total);
    (runs[runs.len() / 2], runs[0])
}

fn ms(d: Duration) -> String {
    format!("{:.1}", d.as_secs_f64() * 1e3)
}

fn main() {
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![1_000, 10_000, 100_000] } else { sizes };
    println!(
        "| nodes | edges | file | parse ms | build ms | transform ms | validate ms | total ms | us/node |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
    for nodes in sizes {
        let text = generate(nodes);
        let runs = if nodes >= 100_000 { 5 } else { 15 };
        measure(&text); // warm-up
        let (phases, fastest) = median_and_min((0..runs).map(|_| measure(&text)).collect());
        let total = phases.total();
        println!(
            "| {nodes} | {} | {:.1} MB | {} | {} | {} | {} | {} | {} | {:.2} |",
            nodes * 2 + 1,
            text.len() as f64 / 1e6,
            ms(phases.parse),
            ms(phases.build),
            ms(phases.transform),
            ms(phases.validate),
            ms(total),
            ms(fastest.total()),
            total.as_secs_f64() * 1e6 / nodes as f64,
        );
    }
}
