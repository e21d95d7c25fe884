//! Load benchmark: parse, build, transform and validate generated workflows of 1,000, 10,000 and
//! 100,000 nodes (two edges per node, conditions on half of the edges, a model stylesheet).
//!
//! Run with `cargo run --release --example bench_load` (add `-- 1000 10000` to pick sizes).
//! Prints, per size, the phases of the median run, the fastest run's total (the least disturbed
//! by other load on the machine), and the cost per node so that linear growth is visible.
//!
//! Then two hostile shapes: 20,000 nodes chained in one statement on one line (every node draws
//! two warnings that point into that 200 KB line), and one node with 65,536 attributes. For them
//! it prints the load phases and, when `target/release/fabro` exists (`cargo build --release`),
//! the time and output size of `fabro validate` on the file, which renders the warnings.

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

/// 20,000 nodes chained in one statement, on one line, declared nowhere else.
fn chained_statement(nodes: usize) -> String {
    let chain: Vec<String> = (0..nodes).map(|i| format!("n{i}")).collect();
    format!(
        "digraph Chain {{\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> {} -> exit\n}}\n",
        chain.join(" -> ")
    )
}

/// One command stage with `attributes` extra attributes in one statement.
fn many_attributes(attributes: usize) -> String {
    let extra: Vec<String> = (0..attributes).map(|i| format!("a{i}=\"v\"")).collect();
    format!(
        "digraph Wide {{\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  x [shape=parallelogram, script=\"true\", {}]\n  start -> x -> exit\n}}\n",
        extra.join(", ")
    )
}

fn measure(text: &str) -> Phases {
    measure_load(text, true)
}

fn measure_load(text: &str, expect_clean: bool) -> Phases {
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
    assert!(
        !expect_clean || diagnostics.is_empty(),
        "generated workflow should be clean: {:?}",
        diagnostics.first()
    );
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
        "| nodes | edges | file | parse ms | build ms | transform ms | validate ms | total ms | fastest ms | us/node |"
    );
    println!("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|");
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
    hostile_shapes();
}

/// The two shapes that used to take seconds and print gigabytes.
fn hostile_shapes() {
    let binary = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("target/release/fabro");
    println!();
    println!("| shape | file | parse ms | build ms | transform ms | validate ms | total ms | `fabro validate` ms | output |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    let shapes = [
        ("20,000 nodes chained in one statement", chained_statement(20_000)),
        ("one node with 65,536 attributes", many_attributes(65_536)),
    ];
    for (name, text) in shapes {
        measure_load(&text, false); // warm-up
        let (phases, _) = median_and_min((0..5).map(|_| measure_load(&text, false)).collect());
        let (cli_ms, output) = if binary.exists() {
            let dir = std::env::temp_dir().join(format!("bench_load_{}", std::process::id()));
            let _ = std::fs::create_dir_all(&dir);
            let file = dir.join("shape.dot");
            std::fs::write(&file, &text).expect("write the shape");
            let started = Instant::now();
            let ran =
                std::process::Command::new(&binary).arg("validate").arg(&file).output().expect("run fabro");
            let elapsed = started.elapsed();
            let _ = std::fs::remove_dir_all(&dir);
            (ms(elapsed), format!("{:.1} KB", (ran.stdout.len() + ran.stderr.len()) as f64 / 1e3))
        } else {
            ("(no target/release/fabro)".to_string(), "-".to_string())
        };
        println!(
            "| {name} | {:.1} KB | {} | {} | {} | {} | {} | {cli_ms} | {output} |",
            text.len() as f64 / 1e3,
            ms(phases.parse),
            ms(phases.build),
            ms(phases.transform),
            ms(phases.validate),
            ms(phases.total()),
        );
    }
}
