//! Context benchmark: what one long agent stage sends the model, measured at the wire.
//!
//! A loopback server speaking the OpenAI-compatible API plays a model that works through 40
//! cycles of reading a 12 KB file, writing a file and running a shell command (120 tool calls),
//! with `context_window=16000`. For each configuration of the agent stage the benchmark reports
//! what the server received: input tokens (request characters / 4) over every request, summary
//! calls included; the largest request; the number of model calls; and whether the last request
//! still names the first file written (the scripted summaries name no file, so a yes comes from
//! fabro's own records: tool calls still in view, the file tracker's list, an intent or lossless
//! block).
//!
//! Run with `cargo run --release --example bench_context`.

#[path = "../tests/common/llm_server.rs"]
mod llm_server;

use std::sync::Arc;

use fabro::backends::config::LlmConfig;
use fabro::backends::live::LiveBackend;
use fabro::engine::{Engine, RunOptions};
use fabro::handlers::{builtin_handlers, Services};
use fabro::interview::NoAnswers;
use fabro::source::SourceFile;
use fabro::Loader;
use llm_server::{openai_text, openai_tools, LlmServer, Reply};
use serde_json::json;
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

struct Measured {
    input_tokens: u64,
    largest: u64,
    calls: usize,
    summary_calls: usize,
    over_window: usize,
    first_file_known: bool,
}

/// The stage's context window in the benchmark.
const WINDOW: u64 = 16_000;

async fn measure(attributes: &str) -> Measured {
    let server = LlmServer::start(script(), vec![summary(); 200]);
    let dir = tempfile::tempdir().expect("temp dir");
    let work = dir.path().join("work");
    std::fs::create_dir_all(work.join("src")).expect("work dir");
    for i in 0..CYCLES {
        let line = format!("file {i}: {}\n", "lorem ipsum dolor sit amet ".repeat(3));
        let text: String = line.repeat(FILE_BYTES / line.len() + 1).chars().take(FILE_BYTES).collect();
        std::fs::write(work.join(format!("src/f{i}.txt")), text).expect("file");
    }
    std::env::set_var("FABRO_LLM_BASE_URL", server.url("/v1"));
    std::env::set_var("FABRO_LLM_MODEL", "bench-model");
    std::env::set_var("FABRO_LLM_MAX_RETRIES", "0");
    let dot = format!(
        "digraph bench {{\n start [shape=Mdiamond]\n exit [shape=Msquare]\n work [prompt=\"Summarize every file in src/ into out/\", llm_model=\"bench-model\", context_window={WINDOW}, max_turns=200{attributes}]\n start -> work -> exit\n}}\n"
    );
    let valid = Loader::new()
        .load_source(SourceFile::new("bench.dot", dot))
        .expect("parses")
        .into_valid()
        .unwrap_or_else(|invalid| panic!("invalid: {:?}", invalid.diagnostics));
    let config = LlmConfig::from_env().expect("config");
    let backend = LiveBackend::new(config).expect("backend");
    let engine = Engine::new(
        builtin_handlers(),
        Services { backend: Arc::new(backend), interviewer: Arc::new(NoAnswers) },
    );
    let options =
        RunOptions { run_dir: Some(dir.path().join("run")), work_dir: work, ..RunOptions::default() };
    let report = engine.run(&valid, &options, |_| {}, CancellationToken::new()).await.expect("runs");
    assert_eq!(report.result.status.as_str(), "succeeded", "{:?}", report.result.failure_reason);
    let requests = server.requests();
    let sizes: Vec<u64> = requests.iter().map(|r| r.body.len().div_ceil(4) as u64).collect();
    let last_main = server.main_requests().last().map(|r| r.body.clone()).unwrap_or_default();
    Measured {
        input_tokens: sizes.iter().sum(),
        largest: sizes.iter().copied().max().unwrap_or(0),
        calls: requests.len(),
        summary_calls: requests.len() - server.main_requests().len(),
        over_window: sizes.iter().filter(|size| **size > WINDOW).count(),
        first_file_known: last_main.contains("out/out0.txt"),
    }
}

#[tokio::main]
async fn main() {
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
    println!("| configuration | input tokens sent | vs first row | largest request | model calls (summaries) | requests over the window | last request names the first file written |");
    println!("|---|---:|---:|---:|---:|---:|---|");
    for (name, attributes) in configurations {
        let measured = measure(attributes).await;
        let base = *baseline.get_or_insert(measured.input_tokens);
        println!(
            "| {name} | {} | {:.0}% | {} | {} ({}) | {} | {} |",
            measured.input_tokens,
            measured.input_tokens as f64 * 100.0 / base as f64,
            measured.largest,
            measured.calls,
            measured.summary_calls,
            measured.over_window,
            if measured.first_file_known { "yes" } else { "no" }
        );
    }
}
