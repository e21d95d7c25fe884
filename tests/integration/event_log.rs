//! `events.jsonl`, line for line: runs that together write most kinds of event, compared whole
//! with the golden files in `tests/fixtures/events/` (values that differ between runs replaced:
//! run ids, times, durations, temporary paths, commits). A change to how events are built must
//! leave these files as they are; a change to what they say is blessed with `FABRO_BLESS=1`.

use crate::common;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;

use common::llm_server::{openai_text, openai_tools, LlmServer};
use common::{fabro_command, Test};
use serde_json::json;

fn fixture(name: &str) -> String {
    let path = common::repo_root().join("tests/fixtures/events").join(name);
    std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Runs `fabro ARGS` in `dir` and checks its exit status.
fn fabro(dir: &Path, args: &[&str], status: i32) {
    let output = fabro_command(dir, args).output().expect("run fabro");
    assert_eq!(
        output.status.code(),
        Some(status),
        "fabro {}\n--- stderr\n{}",
        args.join(" "),
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Replaces what differs between runs with fixed text, keeping each line's bytes otherwise:
/// run ids become `RUN_1`, `RUN_2`, ... in the order they first appear (shared by the logs of
/// one scenario, so a fork still names its origin), and so do commits (`COMMIT_1`, ...).
struct Normalizer {
    dirs: Vec<String>,
    ids: HashMap<String, String>,
    commits: HashMap<String, String>,
}

impl Normalizer {
    fn new(dir: &Path) -> Normalizer {
        let mut dirs = vec![dir.display().to_string()];
        if let Ok(canonical) = std::fs::canonicalize(dir) {
            dirs.insert(0, canonical.display().to_string());
        }
        Normalizer { dirs, ids: HashMap::new(), commits: HashMap::new() }
    }

    fn normalize(&mut self, text: &str) -> String {
        let mut text = text.to_string();
        for dir in &self.dirs {
            text = text.replace(dir.as_str(), "DIR");
        }
        let uuid =
            regex::Regex::new(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}").unwrap();
        let text = number_each(&uuid, &text, "RUN", &mut self.ids);
        let sha = regex::Regex::new(r"\b[0-9a-f]{40}\b").unwrap();
        let text = number_each(&sha, &text, "COMMIT", &mut self.commits);
        let ts = regex::Regex::new(r#""ts":"[^"]*""#).unwrap();
        let millis = regex::Regex::new(r#""duration_ms":\d+"#).unwrap();
        let seconds = regex::Regex::new(r"\b\d+\.\ds\b").unwrap();
        // `fabro rewind` names its archive after the time; the test server's port varies.
        let archive = regex::Regex::new(r"rewound/\d{4}-\d\d-\d\dT[\d.]+Z").unwrap();
        let port = regex::Regex::new(r"127\.0\.0\.1:\d+").unwrap();
        let text = ts.replace_all(&text, r#""ts":"TS""#);
        let text = archive.replace_all(&text, "rewound/TIME");
        let text = port.replace_all(&text, "127.0.0.1:PORT");
        let text = millis.replace_all(&text, r#""duration_ms":N"#);
        seconds.replace_all(&text, "Ts").into_owned()
    }
}

fn number_each(
    pattern: &regex::Regex,
    text: &str,
    prefix: &str,
    seen: &mut HashMap<String, String>,
) -> String {
    pattern
        .replace_all(text, |found: &regex::Captures<'_>| {
            let next = seen.len() + 1;
            seen.entry(found[0].to_string()).or_insert_with(|| format!("{prefix}_{next}")).clone()
        })
        .into_owned()
}

/// Compares `events.jsonl` of `run_dir` (normalized) with `tests/fixtures/events/<name>`, or
/// writes it when FABRO_BLESS is set.
fn golden(normalizer: &mut Normalizer, run_dir: &Path, name: &str) {
    let log = run_dir.join("events.jsonl");
    let text = std::fs::read_to_string(&log).unwrap_or_else(|e| panic!("{}: {e}", log.display()));
    let actual = normalizer.normalize(&text);
    let path = common::repo_root().join("tests/fixtures/events").join(name);
    if std::env::var_os("FABRO_BLESS").is_some() {
        std::fs::write(&path, &actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    if expected != actual {
        let first = expected.lines().zip(actual.lines()).position(|(a, b)| a != b);
        panic!("{name} differs from the golden file (first different line: {first:?}); got:\n{actual}");
    }
}

/// Commands with retries, refused context updates, an offloaded value, routing, a wait, a
/// scripted prompt stage, parallel branches and their fan-in, a sub-workflow, a gate answered
/// from a file and one that pauses the run until it is resumed with an answer.
#[test]
fn engine_events_match_the_golden_files() {
    let test = Test::new()
        .file("stages.dot", &fixture("stages.dot"))
        .file("child.dot", &fixture("child.dot"))
        .file("answers.json", &fixture("answers.json"))
        .file("responses.json", &fixture("responses.json"))
        .file("late.json", r#"{"late": ["N"]}"#);
    let dir = test.path("");
    let run = ["--run-dir", "run", "-q"];
    let files = ["--answers", "answers.json", "--responses", "responses.json"];
    fabro(&dir, &[&["run", "stages.dot"][..], &files, &run].concat(), 3);
    fabro(&dir, &["resume", "run", "--answers", "late.json", "-q"], 0);
    let mut normalizer = Normalizer::new(&dir);
    golden(&mut normalizer, &dir.join("run"), "stages.jsonl");
    golden(&mut normalizer, &dir.join("run/children/suite/1"), "stages.child.jsonl");
}

/// A node sent back to its retry target, and a `loop_restart` edge into a new run directory.
#[test]
fn restart_events_match_the_golden_files() {
    let test = Test::new().file("restart.dot", &fixture("restart.dot"));
    let dir = test.path("");
    fabro(&dir, &["run", "restart.dot", "--run-dir", "run", "-q"], 0);
    let mut normalizer = Normalizer::new(&dir);
    golden(&mut normalizer, &dir.join("run"), "restart.jsonl");
    let restarted: Vec<PathBuf> = std::fs::read_dir(&dir)
        .unwrap()
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.join("events.jsonl").is_file() && !path.ends_with("run"))
        .collect();
    assert_eq!(restarted.len(), 1, "{restarted:?}");
    golden(&mut normalizer, &restarted[0], "restart.next.jsonl");
}

/// A manager that watches its child for one cycle, then stops it.
#[test]
fn manager_events_match_the_golden_file() {
    let test = Test::new()
        .file("manager.dot", &fixture("manager.dot"))
        .file("slow_child.dot", &fixture("slow_child.dot"));
    let dir = test.path("");
    fabro(&dir, &["run", "manager.dot", "--run-dir", "run", "-q"], 1);
    golden(&mut Normalizer::new(&dir), &dir.join("run"), "manager.jsonl");
}

/// A finished run forked at an earlier visit and resumed; then the original rewound and resumed.
#[test]
fn fork_and_rewind_events_match_the_golden_files() {
    let test = Test::new().file("loop.dot", &fixture("loop.dot"));
    let dir = test.path("");
    fabro(&dir, &["run", "loop.dot", "--run-dir", "runs/orig", "-q"], 0);
    fabro(&dir, &["fork", "runs/orig", "--at", "work@2", "--run-dir", "runs/fork"], 0);
    fabro(&dir, &["resume", "runs/fork", "-q"], 0);
    fabro(&dir, &["rewind", "runs/orig", "--to", "work@1"], 0);
    fabro(&dir, &["resume", "runs/orig", "-q"], 0);
    let mut normalizer = Normalizer::new(&dir);
    golden(&mut normalizer, &dir.join("runs/orig"), "history.jsonl");
    golden(&mut normalizer, &dir.join("runs/fork"), "history.fork.jsonl");
}

/// An agent stage against a loopback OpenAI-compatible server: a reasoning effort the server
/// cannot take, a large tool result offloaded, trimmed history, repeated calls noticed, a
/// context window too small (a summary that fails), and a stage stopped by its turn limit.
#[test]
fn agent_events_match_the_golden_file() {
    let big: String = (0..1500).map(|i| format!("line {i:04} {}\n", "x".repeat(40))).collect();
    let mut replies = vec![openai_tools(&[("c0", "read_file", json!({"path": "big.log"}))])];
    replies.extend((1..7).map(|i| openai_tools(&[(format!("c{i}").as_str(), "list_dir", json!({}))])));
    replies.push(openai_text("Looked around.", 10, 5));
    replies.push(openai_tools(&[("d0", "list_dir", json!({}))]));
    let server = LlmServer::start(replies, vec![openai_text("", 1, 1)]);
    let test = Test::new()
        .file("agent.dot", &fixture("agent.dot"))
        .file("work/big.log", &big)
        .file("work/a.txt", "a\n");
    let dir = test.path("");
    let mut command =
        fabro_command(&dir, &["run", "agent.dot", "--run-dir", "run", "--workdir", "work", "-q"]);
    // The estimates count the system prompt's runtime block, whose time zone is the machine's.
    command.env("FABRO_LLM_BASE_URL", server.url("/v1")).env("FABRO_LLM_MAX_RETRIES", "0").env("TZ", "UTC");
    let output = command.output().expect("run fabro");
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    golden(&mut Normalizer::new(&dir), &dir.join("run"), "agent.jsonl");
}

/// A run in its own git worktree: a commit after every stage, branches merged at the fan-in.
#[test]
fn worktree_events_match_the_golden_file() {
    if Command::new("git").arg("--version").output().is_err() {
        eprintln!("SKIPPED: git is not installed");
        return;
    }
    let test =
        Test::new().file("worktree.dot", &fixture("worktree.dot")).file(".gitignore", ".fabro/\nrun/\n");
    let dir = test.path("");
    common::commit_all_in_new_repository(&dir);
    fabro(&dir, &["run", "worktree.dot", "--worktree", "--run-dir", "run", "-q"], 0);
    golden(&mut Normalizer::new(&dir), &dir.join("run"), "worktree.jsonl");
}
