//! Context benchmark: what one long agent stage sends the model, measured at the wire.
//!
//! A loopback server speaking the OpenAI-compatible API plays a model that works through 40
//! cycles of reading a 12 KB file, writing a file and running a shell command (120 tool calls),
//! with `context_window=16000`. For each configuration of the agent stage the benchmark reports
//! what the server received: input tokens (request characters / 4) over every request, summary
//! calls included, and beside them the input tokens as a real tokenizer counts them; the largest
//! request; the number of model calls; and whether the last request still names the first file
//! written (the scripted summaries name no file, so a yes comes from fabro's own records: tool
//! calls still in view, the file tracker's list, an intent or lossless block).
//!
//! The count is SmolLM2-135M's tokenizer, through the llama-cpp-python server the tests use
//! (`tests/integration/common/model_server.rs`, installed by `scripts/test`): for every request,
//! what its model reads (the messages' text, their tool calls, the tool definitions) is counted
//! at `/extras/tokenize/count`, and the answer reports that count as its `prompt_tokens`, so
//! fabro calibrates its estimates as it does against a real server. Without the server the
//! benchmark says so and fails.
//!
//! A second session reads five 200 KB files to answer questions about them, once with bare
//! `read_file` (the parent pages through every file) and once with `agentic_read_file` (a small
//! model pages through each file in its own sub-conversation and the parent gets a digest). It
//! reports each model's tokens at the wire and the estimated cost from fabro's price table.
//!
//! The long sessions (`-- --long`, also the end of the full run) run one agent stage of 1,000 and
//! of 10,000 turns with the recommended configuration for long coding loops (writing 50 files in
//! turn and reading them back, or running a shell command on them), each in a child process of
//! the benchmark (the loopback server stays in this one), and report the child's CPU per turn
//! (user + system of that process alone, read from `/proc` while the server holds a reply: the
//! shell commands' own processes are not counted), the request size at turns 100 / 1,000 /
//! 10,000, its memory and the token bill.
//!
//! Run with `cargo run --release --example bench_context` (`-- --table`: the 120-call table
//! alone; `-- --reads`, `-- --long`: one session alone).

#[path = "../tests/integration/common/llm_server.rs"]
mod llm_server;
#[path = "../tests/integration/common/model_server.rs"]
mod model_server;

use std::sync::{Arc, Mutex};

use fabro::backends::config::LlmConfig;
use fabro::backends::live::LiveBackend;
use fabro::engine::{Engine, RunOptions};
use fabro::handlers::builtin_handlers;
use fabro::interview::NoAnswers;
use fabro::source::SourceFile;
use fabro::stage::Services;
use fabro::Loader;
use llm_server::{
    openai_text, openai_tools, read_by_the_model, InputCounter, LlmServer, Reply, ServerOptions,
};
use model_server::ModelServer;
use serde_json::{json, Value};
use tokio_util::sync::CancellationToken;

const CYCLES: usize = 40;
const FILE_BYTES: usize = 12 * 1024;

/// The model's side of the session: read, write, run, 40 times, then a final answer.
fn script() -> Vec<Reply> {
    let mut replies = Vec::new();
    for i in 0..CYCLES {
        replies.push(openai_tools(&[(
            format!("r{i}").as_str(),
            "read_file",
            json!({"path": format!("src/f{i}.txt")}),
        )]));
        replies.push(openai_tools(&[(
            format!("w{i}").as_str(),
            "write_file",
            json!({"path": format!("out/out{i}.txt"), "content": format!("notes on f{i}")}),
        )]));
        replies.push(openai_tools(&[(
            format!("s{i}").as_str(),
            "shell",
            json!({"command": format!("wc -c src/f{i}.txt")}),
        )]));
    }
    replies.push(openai_text("All 40 files are summarized in out/.", 100, 20));
    replies
}

fn summary() -> Reply {
    openai_text(
        "## Goal\nSummarize every file\n## Progress\nWorking through src/\n## Key Decisions\nNone\n## Failed Approaches\nNone\n## Open Issues\nNone\n## Next Steps\nContinue",
        100,
        50,
    )
}

/// The context of the server that lends its tokenizer (tokenizing does not depend on it).
const TOKENIZER_CONTEXT: u32 = 512;

/// Each request's model and input tokens, as the tokenizer counted them.
type Counts = Arc<Mutex<Vec<(String, u64)>>>;

/// A fake server's input counter: SmolLM2's tokenizer, each count noted in `counts`.
fn counted_into(counts: &Counts) -> InputCounter {
    let counts = counts.clone();
    InputCounter(Arc::new(move |request: &Value| {
        let server = ModelServer::with_context(TOKENIZER_CONTEXT);
        let tokens = server.count_tokens(&read_by_the_model(request).join("\n")).unwrap_or_else(|error| {
            eprintln!("bench_context: the tokenizer failed: {error}");
            std::process::exit(1)
        });
        counts.lock().unwrap().push((request["model"].as_str().unwrap_or("").to_string(), tokens));
        tokens
    }))
}

/// A fake server answering `main` and `summaries`, its input tokens counted into `counts`.
fn counting_server(main: Vec<Reply>, summaries: Vec<Reply>, counts: &Counts) -> LlmServer {
    let options = ServerOptions { input_counter: Some(counted_into(counts)), ..ServerOptions::default() };
    LlmServer::start_with(main, summaries, options)
}

struct Measured {
    input_tokens: u64,
    /// The input tokens SmolLM2's tokenizer counted.
    counted_tokens: u64,
    largest: u64,
    calls: usize,
    summary_calls: usize,
    over_window: usize,
    first_file_known: bool,
}

/// The stage's context window in the benchmark.
const WINDOW: u64 = 16_000;

/// The `AGENTS.md` of the benchmark's work directory (1.9 KB, as a small project's might be).
const PROJECT_INSTRUCTIONS: &str = "# Working in this repository

## Layout
- `src/` holds the source texts the tools read; never edit them by hand.
- `out/` holds generated summaries, one per source file, named after it.
- `scripts/` holds the maintenance scripts; run them from the repository root.

## Build and check
- Run `make check` before you finish: it formats, lints and runs the unit tests.
- Run `make test-slow` only when you change the parsers; it takes about ten minutes.
- A change that adds a dependency needs a line in `docs/dependencies.md` saying why.

## Style
- Keep functions under 60 lines; split them by what they do, not by size alone.
- Name things for what they are: `summary_of(file)`, not `process(data)`.
- Errors say what went wrong, where, and what to do about it. No panics on input.
- Comments explain why, not what. Delete commented-out code.
- Prefer the standard library; reach for a crate when it saves real work.

## Summaries
- A summary is at most ten lines: what the file is, its main points, anything surprising.
- Quote at most one sentence from the source, and say where it comes from.
- When a file cannot be summarized (empty, binary, unreadable), write why instead.

## Commits
- One logical change per commit, with a subject under 72 characters in the imperative mood.
- Reference the issue number in the body when there is one.
- Never commit generated files other than those under `out/`.

## Reviews
- Every change is reviewed by someone who did not write it.
- Reviewers run `make check` themselves; a green check on a laptop is not enough.
- Leave the code better than you found it, but keep unrelated clean-ups in their own commit.

## Security
- Never print or log secrets; the environment holds API keys that must stay there.
- Treat every input file as untrusted: no shell commands built from file contents.
- Ask before deleting anything outside `out/`.
";

async fn measure(attributes: &str) -> Measured {
    let counts = Counts::default();
    let server = counting_server(script(), vec![summary(); 200], &counts);
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join("src")).expect("work dir");
    for i in 0..CYCLES {
        let line = format!("file {i}: {}\n", "lorem ipsum dolor sit amet ".repeat(3));
        let text: String = line.repeat(FILE_BYTES / line.len() + 1).chars().take(FILE_BYTES).collect();
        std::fs::write(work.join(format!("src/f{i}.txt")), text).expect("file");
    }
    // The project's instructions for agents, of a realistic size: every request carries them.
    std::fs::write(work.join("AGENTS.md"), PROJECT_INSTRUCTIONS).expect("AGENTS.md");
    std::env::set_var("FABRO_LLM_BASE_URL", server.url("/v1"));
    std::env::set_var("FABRO_LLM_MODEL", "bench-model");
    let dot = format!(
        "digraph bench {{\n start [shape=Mdiamond]\n exit [shape=Msquare]\n work [prompt=\"Summarize every file in src/ into out/\", llm_model=\"bench-model\", context_window={WINDOW}, max_turns=200{attributes}]\n start -> work -> exit\n}}\n"
    );
    run_workflow(&dot, dir.path(), work).await;
    let requests = server.requests();
    let sizes: Vec<u64> = requests.iter().map(|r| r.body.len().div_ceil(4) as u64).collect();
    let last_main = server.main_requests().last().map(|r| r.body.clone()).unwrap_or_default();
    let counted_tokens = counts.lock().unwrap().iter().map(|(_, tokens)| tokens).sum();
    Measured {
        input_tokens: sizes.iter().sum(),
        counted_tokens,
        largest: sizes.iter().copied().max().unwrap_or(0),
        calls: requests.len(),
        summary_calls: requests.len() - server.main_requests().len(),
        over_window: sizes.iter().filter(|size| **size > WINDOW).count(),
        first_file_known: last_main.contains("out/out0.txt"),
    }
}

/// The reading session: five files of [`BIG_LINES`] lines of 100 bytes, read in pages of
/// [`PAGE_LINES`] lines (each page stays under the 40,000-character offload threshold).
const BIG_FILES: usize = 5;
const BIG_LINES: usize = 2_000;
const PAGE_LINES: usize = 350;
const PARENT_MODEL: &str = "claude-sonnet-4-5";
const SMALL_MODEL: &str = "claude-haiku-4-5";

/// The page-by-page reads of file `i`, as tool calls named `prefix`.
fn pages(i: usize, prefix: &str) -> Vec<Reply> {
    (0..BIG_LINES.div_ceil(PAGE_LINES))
        .map(|page| {
            openai_tools(&[(
                format!("{prefix}{i}-{page}").as_str(),
                "read_file",
                json!({"path": format!("docs/big{i}.txt"), "offset": page * PAGE_LINES + 1, "limit": PAGE_LINES}),
            )])
        })
        .collect()
}

/// Tokens (in at the wire, out as the scripted replies report) of one model's requests.
#[derive(Default)]
struct ModelTokens {
    calls: usize,
    input: u64,
    /// The input tokens SmolLM2's tokenizer counted.
    counted: u64,
    output: u64,
}

impl ModelTokens {
    fn cost(&self, model: &str) -> f64 {
        let price = fabro::models::builtin_price(model).expect("a priced model");
        price.cost(&fabro::usage::Usage::new(self.input, self.output))
    }
}

/// Runs the reading session with or without the wrappers; returns the parent's and the small
/// model's tokens.
async fn measure_reads(wrappers: bool) -> (ModelTokens, ModelTokens) {
    let mut replies = Vec::new();
    for i in 0..BIG_FILES {
        if wrappers {
            replies.push(openai_tools(&[(
                format!("a{i}").as_str(),
                "agentic_read_file",
                json!({"path": format!("docs/big{i}.txt"), "question": "Which limits and defaults does this file set?"}),
            )]));
            replies.extend(pages(i, "s"));
            replies.push(openai_text(
                &format!("docs/big{i}.txt sets: timeout 30 s (line 120), retries 3 (line 845), pool size 16 (line 1630). Nothing else is configurable."),
                0,
                60,
            ));
        } else {
            replies.extend(pages(i, "r"));
        }
    }
    replies.push(openai_text("The five files set timeouts, retries and pool sizes; see above.", 0, 40));
    let counts = Counts::default();
    let server = counting_server(replies, vec![summary(); 50], &counts);
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join("docs")).expect("work dir");
    for i in 0..BIG_FILES {
        let text: String = (0..BIG_LINES)
            .map(|n| format!("{:<99}\n", format!("file {i} line {n}: setting_{n} = value")))
            .collect();
        std::fs::write(work.join(format!("docs/big{i}.txt")), text).expect("file");
    }
    std::env::set_var("FABRO_LLM_BASE_URL", server.url("/v1"));
    let dot = format!(
        "digraph reads {{\n start [shape=Mdiamond]\n exit [shape=Msquare]\n work [prompt=\"Which limits and defaults do the files in docs/ set?\", llm_model=\"{PARENT_MODEL}\", llm_provider=\"openai_compatible\", small_model=\"{SMALL_MODEL}\", small_tier_parent=allow, max_turns=100, agentic_tools={wrappers}]\n start -> work -> exit\n}}\n"
    );
    run_workflow(&dot, dir.path(), work).await;
    let mut parent = ModelTokens::default();
    let mut small = ModelTokens::default();
    for request in server.requests() {
        let body = request.json();
        let tokens = if body["model"] == SMALL_MODEL { &mut small } else { &mut parent };
        tokens.calls += 1;
        tokens.input += request.body.len().div_ceil(4) as u64;
    }
    for (model, tokens) in counts.lock().unwrap().iter() {
        let of = if model == SMALL_MODEL { &mut small } else { &mut parent };
        of.counted += tokens;
    }
    // Output: what the scripted replies report (a tool call 10 tokens, answers as given).
    let status: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(dir.path().join("run/stages/work/1/status.json")).expect("status.json"),
    )
    .expect("status");
    let small_output = status["usage"]["small_model"]["output_tokens"].as_u64().unwrap_or(0);
    small.output = small_output;
    parent.output = status["usage"]["output_tokens"].as_u64().unwrap_or(0) - small_output;
    (parent, small)
}

/// Loads and runs `dot` with the live backend, its run directory in `dir`.
async fn run_workflow(dot: &str, dir: &std::path::Path, work: std::path::PathBuf) {
    std::env::set_var("FABRO_LLM_MAX_RETRIES", "0");
    let valid = Loader::new()
        .load_source(SourceFile::new("bench.dot", dot.to_string()))
        .expect("parses")
        .into_valid()
        .unwrap_or_else(|invalid| panic!("invalid: {:?}", invalid.diagnostics));
    let config = LlmConfig::from_env().expect("config");
    let backend = LiveBackend::new(config).expect("backend");
    let engine = Engine::new(
        builtin_handlers(),
        Services { backend: Arc::new(backend), interviewer: Arc::new(NoAnswers) },
    );
    let options = RunOptions { run_dir: Some(dir.join("run")), work_dir: work, ..RunOptions::default() };
    let report = engine.run(&valid, &options, |_| {}, CancellationToken::new()).await.expect("runs");
    assert_eq!(report.result.status.as_str(), "succeeded", "{:?}", report.result.failure_reason);
}

async fn reading_session() {
    let (bare, _) = measure_reads(false).await;
    let (parent, small) = measure_reads(true).await;
    println!("\n| reading five 200 KB files | parent input tokens (characters / 4) | counted | parent calls | small-model input tokens (characters / 4) | counted | small-model calls | estimated cost |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|");
    let bare_cost = bare.cost(PARENT_MODEL);
    println!(
        "| bare `read_file` ({PARENT_MODEL}) | {} | {} | {} | 0 | 0 | 0 | ${bare_cost:.4} |",
        bare.input, bare.counted, bare.calls
    );
    let cost = parent.cost(PARENT_MODEL) + small.cost(SMALL_MODEL);
    println!(
        "| `agentic_read_file` ({PARENT_MODEL}, small model {SMALL_MODEL}) | {} | {} | {} | {} | {} | {} | ${cost:.4} |",
        parent.input, parent.counted, parent.calls, small.input, small.counted, small.calls
    );
    let cut = 100.0 - parent.input as f64 * 100.0 / bare.input as f64;
    println!(
        "\nThe wrappers cut the parent's input tokens by {cut:.1}% and the estimated cost by {:.1}%.",
        100.0 - cost * 100.0 / bare_cost
    );
}

#[tokio::main]
async fn main() {
    let args: Vec<String> = std::env::args().collect();
    if let Some(dir) = args.iter().position(|arg| arg == "--stage").and_then(|at| args.get(at + 1)) {
        run_long_stage(std::path::Path::new(dir)).await;
        return;
    }
    if let Err(reason) = ModelServer::try_with_context(TOKENIZER_CONTEXT) {
        eprintln!(
            "bench_context counts input tokens with a real tokenizer, and its server cannot start: {reason}"
        );
        std::process::exit(1);
    }
    if args.iter().any(|arg| arg == "--reads") {
        reading_session().await;
        return;
    }
    let table_only = args.iter().any(|arg| arg == "--table");
    if args.iter().any(|arg| arg == "--long") {
        long_sessions();
        return;
    }
    let configurations = [
        ("before the context layers (`tool_result_aging=false`: the 80% rule with LLM summaries only)", ", tool_result_aging=false"),
        ("default (age-based truncation, LLM summaries at 80%)", ""),
        ("`max_in_turn_tool_pairs=6`", ", max_in_turn_tool_pairs=6"),
        ("`compaction_mode=intent`", ", compaction_mode=intent"),
        ("`compaction_mode=lossless`", ", compaction_mode=lossless"),
        ("`compaction_mode=hybrid`", ", compaction_mode=hybrid"),
        ("`compaction_mode=window`", ", compaction_mode=window"),
        ("`compaction=strong, compaction_mode=lossless`", ", compaction=strong, compaction_mode=lossless"),
        ("`compaction=aggressive, compaction_mode=lossless`", ", compaction=aggressive, compaction_mode=lossless"),
        ("`max_in_turn_tool_pairs=3, max_tool_result_chars=8000`", ", max_in_turn_tool_pairs=3, max_tool_result_chars=8000"),
        (
            "`max_in_turn_tool_pairs=3, max_tool_result_chars=8000, compaction_mode=lossless`",
            ", max_in_turn_tool_pairs=3, max_tool_result_chars=8000, compaction_mode=lossless",
        ),
        (
            "**recommended for long coding loops: `max_in_turn_tool_pairs=3, max_tool_result_chars=8000, compaction=aggressive, compaction_mode=lossless`**",
            ", max_in_turn_tool_pairs=3, max_tool_result_chars=8000, compaction=aggressive, compaction_mode=lossless",
        ),
        (
            "`max_in_turn_tool_pairs=3, max_tool_result_chars=8000, compaction=aggressive, compaction_mode=intent`",
            ", max_in_turn_tool_pairs=3, max_tool_result_chars=8000, compaction=aggressive, compaction_mode=intent",
        ),
    ];
    let mut baseline = None;
    println!("| configuration | input tokens sent (characters / 4) | vs first row | input tokens counted (SmolLM2's tokenizer) | characters / 4 over counted | largest request | model calls (summaries) | requests over the window | last request names the first file written |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---|");
    for (name, attributes) in configurations {
        let measured = measure(attributes).await;
        let base = *baseline.get_or_insert(measured.input_tokens);
        println!(
            "| {name} | {} | {:.0}% | {} | {:.2} | {} | {} ({}) | {} | {} |",
            measured.input_tokens,
            measured.input_tokens as f64 * 100.0 / base as f64,
            measured.counted_tokens,
            measured.input_tokens as f64 / measured.counted_tokens.max(1) as f64,
            measured.largest,
            measured.calls,
            measured.summary_calls,
            measured.over_window,
            if measured.first_file_known { "yes" } else { "no" }
        );
    }
    if table_only {
        return;
    }
    reading_session().await;
    long_sessions();
}

/// The configuration the long sessions run with.
const RECOMMENDED: &str =
    ", max_in_turn_tool_pairs=3, max_tool_result_chars=8000, compaction=aggressive, compaction_mode=lossless";
/// Files the long sessions write in turn, besides the plan written first.
const LONG_FILES: usize = 50;
/// The turns at which the long sessions read the stage's process, while the server holds the
/// reply (the process waits, so the reading is exact).
const MARKS: [usize; 3] = [100, 1_000, 10_000];
const HOLD: std::time::Duration = std::time::Duration::from_millis(200);
/// The long sessions: turns, and whether every other call runs a shell command.
const LONG_SESSIONS: [(usize, bool); 3] = [(1_000, false), (10_000, false), (10_000, true)];

/// The model's side of a long session: turn 1 writes `PLAN.md` (the first file written, never
/// touched again), then the even turns write `out/f<k>.txt` over [`LONG_FILES`] files and the odd
/// ones read it back, or with `shell` run `wc -c` on it; every 500th of those fails (a missing
/// file). Then an answer.
fn long_script(turns: usize, shell: bool) -> Vec<Reply> {
    let plan = json!({"path": "PLAN.md", "content": "1. write the files\n2. check them\n"});
    let mut replies = vec![openai_tools(&[("t1", "write_file", plan)])];
    for turn in 2..=turns {
        let file = format!("out/f{}.txt", (turn / 2) % LONG_FILES);
        let check = if turn % 500 == 1 { format!("out/missing{turn}.txt") } else { file.clone() };
        let id = format!("t{turn}");
        replies.push(match (turn % 2, shell) {
            (0, _) => openai_tools(&[(
                &id,
                "write_file",
                json!({"path": file, "content": format!("turn {turn}\n")}),
            )]),
            (_, true) => openai_tools(&[(&id, "shell", json!({"command": format!("wc -c {check}")}))]),
            (_, false) => openai_tools(&[(&id, "read_file", json!({"path": check}))]),
        });
    }
    replies.push(openai_text("Every file is written and checked.", 100, 20));
    for (at, reply) in replies.iter_mut().enumerate() {
        // Request `at + 1`: the marks, and the answer's.
        if MARKS.contains(&(at + 1)) || at == turns {
            *reply = reply.clone().delayed(HOLD);
        }
    }
    replies
}

/// CPU (user + system, in clock ticks) and memory (resident and peak, KB) of a process.
#[derive(Debug, Clone, Copy, Default)]
struct ProcessSample {
    cpu_ticks: u64,
    rss_kb: u64,
    peak_kb: u64,
}

/// `/proc/<pid>/stat` (its own CPU, not its children's) and `/proc/<pid>/status`.
fn sample(pid: u32) -> ProcessSample {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
    // The fields after the command name (which may hold spaces) start with the state, field 3.
    let fields: Vec<&str> =
        stat.rsplit_once(')').map(|(_, rest)| rest.split_whitespace().collect()).unwrap_or_default();
    let field = |n: usize| fields.get(n - 3).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    let kb = |key: &str| {
        status
            .lines()
            .find_map(|line| line.strip_prefix(key))
            .and_then(|rest| rest.split_whitespace().next()?.parse().ok())
            .unwrap_or(0)
    };
    ProcessSample { cpu_ticks: field(14) + field(15), rss_kb: kb("VmRSS:"), peak_kb: kb("VmHWM:") }
}

fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf only reads a constant.
    (unsafe { libc::sysconf(libc::_SC_CLK_TCK) }).max(1) as f64
}

struct LongMeasured {
    /// (request, reading) at each mark the session reaches, and at its answer.
    samples: Vec<(usize, ProcessSample)>,
    /// (request, bytes) at each mark, and of the answer's request.
    request_bytes: Vec<(usize, usize)>,
    input_tokens: u64,
    calls: usize,
    first_file_known: bool,
}

impl LongMeasured {
    /// Milliseconds of CPU per turn between two marks.
    fn cpu_per_turn(&self, from: usize, to: usize) -> Option<f64> {
        let at = |turn| self.samples.iter().find(|(t, _)| *t == turn).map(|(_, s)| s.cpu_ticks);
        let ticks = at(to)?.checked_sub(at(from)?)?;
        Some(ticks as f64 * 1000.0 / clock_ticks_per_second() / (to - from) as f64)
    }

    fn bytes_at(&self, turn: usize) -> Option<usize> {
        self.request_bytes.iter().find(|(t, _)| *t == turn).map(|(_, bytes)| *bytes)
    }
}

/// The child process of a long session: runs `<dir>/bench.dot`, its run directory in
/// `<dir>/run` and its work directory `<dir>/work`.
async fn run_long_stage(dir: &std::path::Path) {
    let dot = std::fs::read_to_string(dir.join("bench.dot")).expect("bench.dot");
    let dir = dir.to_path_buf();
    tokio::spawn(async move { run_workflow(&dot, &dir, dir.join("work")).await }).await.expect("the stage");
}

/// Runs one stage of `turns` turns in a child process and reads the child at the marks.
fn long_session(turns: usize, shell: bool) -> LongMeasured {
    let script = long_script(turns, shell);
    let total = script.len();
    let server = LlmServer::start(script, Vec::new());
    let dir = tempfile::tempdir().expect("temp dir");
    std::fs::create_dir_all(dir.path().join("work")).expect("work dir");
    let dot = format!(
        "digraph long {{\n start [shape=Mdiamond]\n exit [shape=Msquare]\n work [prompt=\"Write and check the files\", llm_model=\"bench-model\", max_turns={}{RECOMMENDED}]\n start -> work -> exit\n}}\n",
        turns + 1
    );
    std::fs::write(dir.path().join("bench.dot"), dot).expect("bench.dot");
    let mut child = std::process::Command::new(std::env::current_exe().expect("the benchmark's path"))
        .arg("--stage")
        .arg(dir.path())
        .env("FABRO_LLM_BASE_URL", server.url("/v1"))
        .env("FABRO_LLM_MODEL", "bench-model")
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .spawn()
        .expect("the stage's process");
    let marks: Vec<usize> = MARKS.iter().copied().filter(|m| *m <= turns).chain([turns + 1]).collect();
    let mut samples = Vec::new();
    for mark in &marks {
        while total - server.unused_replies() < *mark {
            if let Some(status) = child.try_wait().expect("the stage's process") {
                panic!("the stage's process ended at request {} ({status})", total - server.unused_replies());
            }
            std::thread::sleep(std::time::Duration::from_millis(2));
        }
        samples.push((*mark, sample(child.id())));
    }
    let status = child.wait().expect("the stage's process");
    assert!(status.success(), "the stage's process failed: {status}");
    let requests = server.requests();
    LongMeasured {
        samples,
        request_bytes: marks.iter().filter_map(|m| Some((*m, requests.get(m - 1)?.body.len()))).collect(),
        input_tokens: requests.iter().map(|r| r.body.len().div_ceil(4) as u64).sum(),
        calls: requests.len(),
        first_file_known: requests.last().is_some_and(|r| r.body.contains("PLAN.md")),
    }
}

/// The long sessions' table.
fn long_sessions() {
    println!("\n| stage (recommended configuration) | CPU per turn, turns 100-1,000 | turns 1,000-10,000 | request at turn 100 | at 1,000 | at 10,000 | last request | last / turn 100 | peak memory | input tokens sent (model calls) | last request names the first file written |");
    println!("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|");
    for (turns, shell) in LONG_SESSIONS {
        let measured = long_session(turns, shell);
        let ms =
            |from, to| measured.cpu_per_turn(from, to).map_or("-".to_string(), |ms| format!("{ms:.2} ms"));
        let bytes = |turn| measured.bytes_at(turn).map_or("-".to_string(), |b| format!("{b} B"));
        let at_100 = measured.bytes_at(100).unwrap_or(1);
        let last = measured.bytes_at(turns + 1).unwrap_or(0);
        let peak = measured.samples.last().map_or(0, |(_, s)| s.peak_kb);
        let calls = if shell { "write_file and shell" } else { "write_file and read_file" };
        println!(
            "| {turns} turns, {calls} in turn | {} | {} | {} | {} | {} | {last} B | {:.2}x | {:.1} MB | {} ({}) | {} |",
            ms(100, 1_000),
            ms(1_000, 10_000),
            bytes(100),
            bytes(1_000),
            bytes(10_000),
            last as f64 / at_100 as f64,
            peak as f64 / 1024.0,
            measured.input_tokens,
            measured.calls,
            if measured.first_file_known { "yes" } else { "no" }
        );
        let resident: Vec<String> = measured
            .samples
            .iter()
            .map(|(turn, s)| format!("{:.1} MB at {turn}", s.rss_kb as f64 / 1024.0))
            .collect();
        eprintln!("resident memory of the {turns}-turn stage: {}", resident.join(", "));
    }
}
