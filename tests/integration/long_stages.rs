//! Long agent stages cost the same per turn whatever their length: with the recommended
//! configuration for long coding loops, a stage of 2,000 turns sends its last request at the size
//! of its hundredth, still naming the first file it wrote, and the full log its compaction block
//! points to can be read with `read_file`.

use crate::common;

use common::llm_server::{openai_text, openai_tools, LlmServer, Reply};
use common::Test;
use serde_json::json;

const TURNS: usize = 2_000;

/// An agent that writes `PLAN.md`, then writes `out/f<k>.txt` over 50 files and reads each back
/// in turn, then reads the first lines of its own transcript at `transcript`, then answers.
fn long_stage(transcript: &str) -> Vec<Reply> {
    let plan = json!({"path": "PLAN.md", "content": "1. write the files\n"});
    let mut replies = vec![openai_tools(&[("t1", "write_file", plan)])];
    for turn in 2..TURNS {
        let file = format!("out/f{}.txt", (turn / 2) % 50);
        let id = format!("t{turn}");
        replies.push(if turn % 2 == 0 {
            openai_tools(&[(&id, "write_file", json!({"path": file, "content": format!("turn {turn}\n")}))])
        } else {
            openai_tools(&[(&id, "read_file", json!({"path": file}))])
        });
    }
    let first_lines = json!({"path": transcript, "offset": 1, "limit": 2});
    replies.push(openai_tools(&[("log", "read_file", first_lines)]));
    replies.push(openai_text("Done.", 10, 5));
    replies
}

#[test]
fn a_two_thousand_turn_stage_sends_its_last_request_at_the_size_of_its_hundredth() {
    let test = Test::new();
    let transcript = test.path("run/stages/work/1/transcript.jsonl");
    let server = LlmServer::start(long_stage(&transcript.display().to_string()), Vec::new());
    let workflow = format!(
        r#"digraph long {{
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [prompt="Write and check the files", llm_model="local-model", max_turns={},
              max_in_turn_tool_pairs=3, max_tool_result_chars=8000, compaction=aggressive, compaction_mode=lossless]
        start -> work -> exit
    }}"#,
        TURNS + 1
    );
    test.workflow(&workflow)
        .file("work/README.md", "The stage writes out/.\n")
        .env("FABRO_LLM_BASE_URL", &server.url("/v1"))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .env("FABRO_LLM_MODEL", "local-model")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-q"])
        .status(0)
        .run();
    let requests = server.main_requests();
    assert_eq!(requests.len(), TURNS + 1, "no summary call");
    let at_100 = requests[99].body.len();
    let largest = requests[100..].iter().map(|r| r.body.len()).max().unwrap_or(0);
    assert!(
        largest * 2 <= at_100 * 3,
        "no request after the 100th is over 1.5 times its size: {largest} bytes against {at_100}"
    );
    let last = requests[TURNS].json();
    let block = last["messages"][2]["content"].as_str().unwrap_or_default().to_string();
    assert!(block.starts_with("[Lossless reconstruction"), "{block}");
    assert!(block.contains("- PLAN.md (created)"), "the first file written is still named:\n{block}");
    assert!(block.contains(&transcript.display().to_string()), "the block says where the log is:\n{block}");
    let read = last["messages"].as_array().and_then(|m| m.last()).cloned().unwrap_or_default();
    let read = read["content"].as_str().unwrap_or_default();
    assert!(read.contains("\"type\":\"request\""), "read_file reads the transcript: {read}");
}
