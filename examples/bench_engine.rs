//! Engine overhead benchmark: runs generated workflows of conditional (no-op) stages with the
//! default checkpointing (one journal append + fsync per stage) and reports, per stage:
//!
//! - wall time, and its ratio to the floor: a 200-byte append + fsync loop measured in the same
//!   run, in the same directory, with the same sync call as the journal;
//! - whole-process CPU (user + system, `getrusage`), every thread included, and how much of it
//!   is beyond the CPU the floor's append + fsync costs (the kernel's share of an fsync is system
//!   time of the process, and on a VM it is large and varies);
//! - bytes the process wrote (`wchar` of `/proc/self/io`), over all stages and over two windows
//!   of the longest chain (from stage 100, and over its last 100 stages) to show that the cost of
//!   a stage does not grow with the run;
//! - the run directory's size on disk (allocated blocks) and in bytes;
//! - for the longest chain, how long a resume takes to reach its first new stage (loading the
//!   workflow, reading snapshot + journal, starting the stage).
//!
//! Run with `cargo run --release --example bench_engine` (add `-- 100 1000 10000` to pick chain
//! lengths). Workflows: a linear chain of N stages, and one stage looping 1,000 times. Runs go
//! to the system temp directory (`TMPDIR`); the floor is measured there too.

use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use fabro::backends::simulated::SimulatedBackend;
use fabro::engine::{Engine, RunOptions, RunReport};
use fabro::handlers::builtin_handlers;
use fabro::interview::NoAnswers;
use fabro::run_dir::SavedRun;
use fabro::source::SourceFile;
use fabro::stage::Services;
use fabro::{Loader, ValidWorkflow};
use tokio_util::sync::CancellationToken;

/// Stage counts at which the bytes written so far are sampled: two windows of 100 stages.
const EARLY_WINDOW: (usize, usize) = (100, 200);
/// Runs of each case; the medians are reported.
const REPEATS: usize = 5;

/// A chain of `stages` conditional stages; with `gate`, a human gate before exit that pauses
/// the run (no answers), so that it can be resumed.
fn chain(stages: usize, gate: bool) -> String {
    let mut dot = format!(
        "digraph Chain {{\n  max_node_visits={}\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n",
        stages + 10
    );
    for i in 0..stages {
        let _ = writeln!(dot, "  s{i} [shape=diamond]");
    }
    dot.push_str("  start -> s0\n");
    for i in 0..stages {
        let next = if i + 1 < stages { format!("s{}", i + 1) } else { "last".to_string() };
        let _ = writeln!(dot, "  s{i} -> {next}");
    }
    match gate {
        true => {
            dot.push_str("  last [shape=hexagon, label=\"Go on?\"]\n  last -> exit [label=\"[Y] Yes\"]\n")
        }
        false => dot.push_str("  last [shape=diamond]\n  last -> exit\n"),
    }
    dot.push_str("}\n");
    dot
}

/// One conditional stage visited `iterations` times; with `gate`, a human gate after the loop
/// that pauses the run (no answers).
fn looping(iterations: usize, gate: bool) -> String {
    let (last, gate) = match gate {
        true => ("last", "  last [shape=hexagon, label=\"Go on?\"]\n  last -> exit [label=\"[Y] Yes\"]\n"),
        false => ("exit", ""),
    };
    format!(
        "digraph Loop {{\n  max_node_visits={}\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  check [shape=diamond]\n  start -> check\n  check -> check [condition=\"context.internal.node_visit_count < {iterations}\"]\n  check -> {last}\n{gate}}}\n",
        iterations + 10
    )
}

fn load(dot: &str) -> ValidWorkflow {
    let checked = Loader::new().load_source(SourceFile::new("bench.dot", dot)).expect("loads");
    checked.into_valid().expect("valid")
}

fn engine() -> Engine {
    Engine::new(
        builtin_handlers(),
        Services { backend: Arc::new(SimulatedBackend), interviewer: Arc::new(NoAnswers) },
    )
}

fn options(dir: &Path) -> RunOptions {
    RunOptions {
        run_dir: Some(dir.join("run")),
        run_id: None,
        work_dir: dir.to_path_buf(),
        dry_run: false,
        context: Vec::new(),
        ..RunOptions::default()
    }
}

/// User + system CPU of the whole process so far.
fn process_cpu() -> Duration {
    // SAFETY: getrusage only writes the struct it is given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    let time = |t: libc::timeval| Duration::new(t.tv_sec as u64, t.tv_usec as u32 * 1000);
    time(usage.ru_utime) + time(usage.ru_stime)
}

/// Bytes this process has passed to write calls so far (`wchar` of `/proc/self/io`).
fn bytes_written() -> u64 {
    let io = std::fs::read_to_string("/proc/self/io").unwrap_or_default();
    io.lines().find_map(|line| line.strip_prefix("wchar: ")).and_then(|n| n.trim().parse().ok()).unwrap_or(0)
}

/// Bytes written when the `n`th stage ended, for each `n` in `at`.
#[derive(Clone, Default)]
struct WriteSamples {
    at: Vec<usize>,
    taken: Arc<Mutex<Vec<(usize, u64)>>>,
}

impl WriteSamples {
    fn per_stage(&self, from: usize, to: usize) -> Option<f64> {
        let taken = self.taken.lock().ok()?;
        let bytes = |n| taken.iter().find(|(at, _)| *at == n).map(|(_, bytes)| *bytes);
        Some((bytes(to)? - bytes(from)?) as f64 / (to - from) as f64)
    }
}

struct Measured {
    report: RunReport,
    wall: Duration,
    cpu: Duration,
    written: u64,
}

async fn run(dot: &str, dir: &Path, samples: &WriteSamples) -> Measured {
    let valid = load(dot);
    let options = options(dir);
    let ended = Arc::new(Mutex::new(0usize));
    let (at, taken) = (samples.at.clone(), samples.taken.clone());
    let observe = move |logged: &fabro::event_log::LoggedEvent| {
        if !matches!(logged.event, fabro::event::Event::StageCompleted(_)) {
            return;
        }
        let Ok(mut ended) = ended.lock() else { return };
        *ended += 1;
        if at.contains(&ended) {
            if let Ok(mut taken) = taken.lock() {
                taken.push((*ended, bytes_written()));
            }
        }
    };
    let (cpu, written, clock) = (process_cpu(), bytes_written(), Instant::now());
    let report = engine().run(&valid, &options, observe, CancellationToken::new()).await.expect("runs");
    Measured { report, wall: clock.elapsed(), cpu: process_cpu() - cpu, written: bytes_written() - written }
}

/// How long a resume of the paused run in `dir` took to reach its first new stage, and how much
/// of it was loading the workflow file.
struct Resumed {
    first_stage: Duration,
    load: Duration,
}

/// Runs `dot` until it pauses at its gate, then resumes it (as `fabro resume` does: open the run,
/// load its workflow, continue) and times the way to the first new stage.
async fn pause_and_resume(dot: &str, dir: &Path) -> (usize, Resumed) {
    let dot_path = dir.join("workflow.dot");
    std::fs::write(&dot_path, dot).expect("workflow file");
    let valid = Loader::new().load_file(&dot_path).expect("loads").into_valid().expect("valid");
    let paused = engine().run(&valid, &options(dir), |_| {}, CancellationToken::new()).await.expect("runs");
    assert_eq!(paused.result.status.as_str(), "paused", "{:?}", paused.result.failure_reason);
    drop(valid);
    let clock = Instant::now();
    let first_stage: Arc<Mutex<Option<Duration>>> = Arc::default();
    let seen = first_stage.clone();
    let observe = move |logged: &fabro::event_log::LoggedEvent| {
        if matches!(logged.event, fabro::event::Event::StageStarted { .. }) {
            if let Ok(mut seen) = seen.lock() {
                seen.get_or_insert_with(|| clock.elapsed());
            }
        }
    };
    let saved = SavedRun::open(&dir.join("run")).expect("a saved run");
    let loading = Instant::now();
    let valid = Loader::new().load_file(&dot_path).expect("loads").into_valid().expect("valid");
    let load = loading.elapsed();
    let report = engine()
        .resume(&valid, saved, &options(dir), observe, CancellationToken::new())
        .await
        .expect("resumes");
    assert_eq!(report.result.status.as_str(), "paused", "{:?}", report.result.failure_reason);
    let first_stage = first_stage.lock().expect("lock").expect("the resumed run started a stage");
    (paused.result.stages.len(), Resumed { first_stage, load })
}

/// One append + fsync of a 200-byte line, in `dir`, with the journal's sync call.
fn append_fsync_floor(dir: &Path, appends: usize) -> Floor {
    let path = dir.join("floor.jsonl");
    let mut file = std::fs::OpenOptions::new().create(true).append(true).open(&path).expect("floor file");
    let line = format!("{}\n", "x".repeat(199));
    let (clock, cpu) = (Instant::now(), process_cpu());
    for _ in 0..appends {
        file.write_all(line.as_bytes()).expect("append");
        file.sync_data().expect("fsync");
    }
    let floor = Floor { wall: us(clock.elapsed(), appends), cpu: us(process_cpu() - cpu, appends) };
    let _ = std::fs::remove_file(path);
    floor
}

/// One append + fsync: its wall time and the CPU it costs the process (the kernel's share of
/// an fsync is counted as the process's system time), in microseconds.
#[derive(Clone, Copy)]
struct Floor {
    wall: f64,
    cpu: f64,
}

/// (bytes on disk, bytes) of everything under `path`.
fn disk_usage(path: &Path) -> (u64, u64) {
    use std::os::unix::fs::MetadataExt;
    let Ok(meta) = std::fs::symlink_metadata(path) else { return (0, 0) };
    let mut total = (meta.blocks() * 512, meta.len());
    if meta.is_dir() {
        for entry in std::fs::read_dir(path).into_iter().flatten().flatten() {
            let (disk, bytes) = disk_usage(&entry.path());
            total = (total.0 + disk, total.1 + bytes);
        }
    }
    total
}

fn us(d: Duration, stages: usize) -> f64 {
    d.as_secs_f64() * 1e6 / stages as f64
}

#[tokio::main]
async fn main() {
    let sizes: Vec<usize> = std::env::args().skip(1).filter_map(|a| a.parse().ok()).collect();
    let sizes = if sizes.is_empty() { vec![100, 1_000, 10_000] } else { sizes };
    let longest = sizes.iter().copied().max().unwrap_or(0);
    let base = tempfile::tempdir().expect("temp dir");
    // The floor is measured before each run and the cases compared with the mean, as the
    // disk's speed drifts.
    let mut floors = Vec::new();
    let mut rows = Vec::new();
    let mut cases: Vec<(String, String)> =
        sizes.iter().map(|n| (format!("chain of {n}"), chain(*n, false))).collect();
    cases.push(("loop x1000".to_string(), looping(1_000, false)));
    let mut growth = None;
    for (index, (name, dot)) in cases.iter().enumerate() {
        let dir = base.path().join(index.to_string());
        let is_longest = name == &format!("chain of {longest}");
        let samples = WriteSamples {
            at: match is_longest {
                true => vec![EARLY_WINDOW.0, EARLY_WINDOW.1, longest - 100, longest],
                false => Vec::new(),
            },
            ..WriteSamples::default()
        };
        // Each case runs REPEATS times, each between two floor measurements (the disk's speed
        // drifts); each column is the median of the runs, the ratio taken against the mean of
        // a run's two floors.
        let mut repeats: Vec<[f64; 7]> = Vec::new();
        let mut stages = 0;
        let mut case_growth = None;
        for _ in 0..REPEATS {
            std::fs::create_dir_all(&dir).expect("case dir");
            let before = append_fsync_floor(&dir, 1_000);
            samples.taken.lock().expect("samples").clear();
            let measured = run(dot, &dir, &samples).await;
            let after = append_fsync_floor(&dir, 1_000);
            let floor = Floor { wall: (before.wall + after.wall) / 2.0, cpu: (before.cpu + after.cpu) / 2.0 };
            floors.push(floor);
            let result = &measured.report.result;
            assert_eq!(result.status.as_str(), "succeeded", "{name}: {:?}", result.failure_reason);
            stages = result.stages.len();
            let (disk, bytes) = disk_usage(&dir.join("run"));
            let wall = us(measured.wall, stages);
            let cpu = us(measured.cpu, stages);
            repeats.push([
                wall,
                wall / floor.wall,
                cpu,
                cpu - floor.cpu,
                measured.written as f64 / stages as f64,
                disk as f64 / stages as f64,
                bytes as f64 / stages as f64,
            ]);
            case_growth = case_growth.or(samples
                .per_stage(EARLY_WINDOW.0, EARLY_WINDOW.1)
                .zip(samples.per_stage(longest - 100, longest)));
            std::fs::remove_dir_all(&dir).expect("clean up");
        }
        let median = |column: usize| {
            let mut values: Vec<f64> = repeats.iter().map(|row| row[column]).collect();
            values.sort_by(f64::total_cmp);
            values[values.len() / 2]
        };
        rows.push(format!(
            "| {name} | {stages} | {:.1} | {:.2} | {:.1} | {:.1} | {:.0} | {:.0} | {:.0} |",
            median(0),
            median(1),
            median(2),
            median(3),
            median(4),
            median(5),
            median(6),
        ));
        if is_longest {
            growth = case_growth;
        }
    }
    let range = |of: fn(&Floor) -> f64| {
        let values = floors.iter().map(of);
        (values.clone().fold(f64::INFINITY, f64::min), values.fold(0.0, f64::max))
    };
    let ((wall_low, wall_high), (cpu_low, cpu_high)) = (range(|f| f.wall), range(|f| f.cpu));
    println!(
        "floor: {wall_low:.1}-{wall_high:.1} us per 200-byte append + fsync ({cpu_low:.1}-{cpu_high:.1} us of it CPU), measured around each run ({})",
        base.path().display()
    );
    println!();
    println!("| workflow | stages | wall us/stage | x floor | CPU us/stage | CPU beyond the floor's | written B/stage | run dir on disk B/stage | run dir B/stage |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for row in rows {
        println!("{row}");
    }
    if let Some((early, late)) = growth {
        println!();
        println!(
            "bytes written per stage, chain of {longest}: {early:.0} over stages {}-{}, {late:.0} over stages {}-{longest}",
            EARLY_WINDOW.0,
            EARLY_WINDOW.1,
            longest - 100
        );
    }
    // Runs of `longest` stages paused at a gate, then resumed: one node visited over and over
    // (the journal is long, the workflow small), and a chain of as many nodes (the workflow file
    // is long too).
    println!();
    let resumes = [("loop", looping(longest, true)), ("chain", chain(longest, true))];
    for (index, (name, dot)) in resumes.iter().enumerate() {
        let dir = base.path().join(format!("resume-{index}"));
        std::fs::create_dir_all(&dir).expect("resume dir");
        let (stages, resumed) = pause_and_resume(dot, &dir).await;
        println!(
            "resume of a {stages}-stage {name} run: first new stage after {:.1} ms (loading its workflow: {:.1} ms)",
            resumed.first_stage.as_secs_f64() * 1e3,
            resumed.load.as_secs_f64() * 1e3,
        );
        std::fs::remove_dir_all(&dir).expect("clean up");
    }
    let _ = std::io::stdout().flush();
}
