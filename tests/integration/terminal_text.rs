//! What a model writes reaches the terminal as text, never as terminal commands: `fabro memory
//! list|show` and `fabro logs` print control characters in model-written fields escaped (`\x1b`,
//! `\u009b`), on a terminal or not.

use crate::common;

use common::llm_server::{openai_text, openai_tools, LlmServer};
use serde_json::json;

/// Control characters a terminal acts on: C0 but newline and tab, DEL, and C1.
fn has_controls(text: &str) -> bool {
    text.chars().any(|c| (c.is_control() && c != '\n' && c != '\t') || c == '\u{7f}')
}

#[test]
fn escapes_in_remembered_names_texts_and_events_are_printed_escaped() {
    let root = tempfile::tempdir().unwrap();
    let repo = root.path().join("repo");
    std::fs::create_dir_all(repo.join("work")).unwrap();
    common::git(&repo, &["init", "-q"]);
    std::fs::write(
        repo.join("flow.dot"),
        r#"digraph escapes {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [prompt="Work", llm_model="local-model", memory=true]
        start -> work -> exit
    }"#,
    )
    .unwrap();
    let name = "title\u{1b}]0;pwned\u{7}";
    let text = "red \u{1b}[31malert\u{1b}[0m \u{9b}2J gone\u{7f} bell\u{7}";
    let server = LlmServer::start(
        vec![
            openai_tools(&[("c0", "remember", json!({"kind": "fact", "name": name, "text": text}))]),
            openai_text("Done \u{1b}[2J.", 10, 5),
        ],
        Vec::new(),
    );
    let fabro = |args: &[&str]| {
        common::fabro_command(root.path(), args)
            .env("FABRO_LLM_BASE_URL", server.url("/v1"))
            .env("FABRO_LLM_MAX_RETRIES", "0")
            .output()
            .unwrap()
    };
    let ran = fabro(&["run", "repo/flow.dot", "--run-dir", "run", "--workdir", "repo/work", "-q"]);
    assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));

    let list = String::from_utf8(fabro(&["memory", "list", "--dir", "repo"]).stdout).unwrap();
    assert!(!has_controls(&list), "{list:?}");
    assert!(list.contains("title\\x1b]0;pwned\\x07"), "{list}");
    assert!(list.contains("red \\x1b[31malert\\x1b[0m \\u009b2J gone\\x7f bell\\x07"), "{list}");
    let show = String::from_utf8(fabro(&["memory", "show", name, "--dir", "repo"]).stdout).unwrap();
    assert!(!has_controls(&show), "{show:?}");
    assert!(show.starts_with("fact title\\x1b]0;pwned\\x07\nred \\x1b[31malert"), "{show}");
    // --json is data, not terminal text: it keeps the characters (JSON-escaped).
    let json = String::from_utf8(fabro(&["memory", "list", "--json", "--dir", "repo"]).stdout).unwrap();
    assert!(json.contains("\\u001b[31malert"), "{json}");

    let logs = String::from_utf8(fabro(&["logs", "run"]).stdout).unwrap();
    assert!(logs.contains("agent.memory.remembered"), "{logs}");
    assert!(!has_controls(&logs), "{logs:?}");
    assert!(logs.contains("name=title\\x1b]0;pwned\\x07"), "{logs}");
}
