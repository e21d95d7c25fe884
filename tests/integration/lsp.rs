//! `fabro lsp` driven by a real LSP client over stdio: pygls's `LanguageClient` (from PyPI, in a
//! virtual environment `scripts/test` installs) runs `tests/integration/lsp/client.py`, which
//! opens a workflow as a buffer, runs one scenario and prints what the server answered. One test
//! per capability of issue 42: diagnostics as you type (the same findings as `fabro validate`,
//! child workflows and prompt files included, recovery past a syntax error), quick fixes, hover,
//! completion, navigation and rename, formatting, garbage, and exiting with the client.
//!
//! The tests fail, never skip, when the client is not installed: CI must run them.

use std::path::{Path, PathBuf};
use std::process::Command;

use serde_json::{json, Value};

use crate::common::{fabro_bin, fabro_in};

/// Where `scripts/test` installs the client when `FABRO_TEST_LSP_PYTHON` is not set.
const DEFAULT_VENV: &str = ".cache/fabro/lsp-client-pygls-2.1.1";

fn python() -> PathBuf {
    let python = std::env::var_os("FABRO_TEST_LSP_PYTHON").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(DEFAULT_VENV).join("bin/python")
    });
    assert!(
        python.exists(),
        "the LSP client is not installed at {}: run scripts/test (it installs pygls into a virtual \
         environment under ~/.cache/fabro) or set FABRO_TEST_LSP_PYTHON",
        python.display()
    );
    python
}

const WORKFLOW: &str = r#"digraph review {
  goal="ship it"
  // the stages
  start [shape=Mdiamond]
  exit [shape=Msquare]
  plan [prompt="@plan.md", max_retires=2]
  check [shape=parallelogram, script="make test", goal_gate=true, retry_target="plan"]
  sub [shape=house, stack.child_dotfile="child.dot"]
  start -> plan -> check -> sub -> exit
  check -> plan [condition="outcome=fail"]
}
"#;

const CHILD: &str = "digraph child {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> exit\n}\n";

/// A directory holding `workflow.dot` (`text`), its prompt file and its child workflow.
fn project(text: &str, child: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("workflow.dot"), text).unwrap();
    std::fs::write(dir.path().join("plan.md"), "Write a plan for $goal.\n").unwrap();
    std::fs::write(dir.path().join("child.dot"), child).unwrap();
    dir
}

/// Runs one scenario of the client against `fabro lsp` on `dir/workflow.dot`.
fn scenario(name: &str, dir: &Path) -> Value {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/integration/lsp/client.py");
    let output = Command::new(python())
        .arg(&script)
        .arg(name)
        .arg(fabro_bin())
        .arg(dir.join("workflow.dot"))
        .current_dir(dir)
        .env_remove("FABRO_LOG")
        .output()
        .expect("run the LSP client");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "client scenario {name} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let result: Value = serde_json::from_str(stdout.trim()).expect("the client prints JSON");
    if name != "client_gone" {
        assert_eq!(result["server_name"], "fabro");
        assert_eq!(result["exit_code"], 0, "the server exits cleanly after shutdown and exit");
    }
    result
}

fn codes(diagnostics: &Value) -> Vec<String> {
    diagnostics.as_array().unwrap().iter().map(|d| d["code"].as_str().unwrap_or("").to_string()).collect()
}

#[test]
fn lsp_diagnostics_are_fabro_validates_findings_at_their_positions_child_workflows_included() {
    // The child workflow has an error of its own, and the buffer is not the file on disk.
    let broken_child = "digraph child {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  run [shape=parallelogram]\n  start -> run -> exit\n}\n";
    let dir = project(WORKFLOW, broken_child);
    let result = scenario("diagnostics", dir.path());
    let workflow = dir.path().join("workflow.dot");
    let opened = result["opened"].as_array().unwrap();
    let typo = opened.iter().find(|d| d["code"] == "unknown_attribute").expect("the typo is reported");
    assert_eq!((typo["line"].as_u64(), typo["character"].as_u64()), (Some(5), Some(27)), "{typo}");
    assert_eq!(typo["end_character"], 38);
    assert_eq!(typo["severity"], 1, "an error");
    assert_eq!(typo["source"], "fabro");
    assert!(typo["message"]
        .as_str()
        .unwrap()
        .starts_with("unknown attribute `max_retires` (did you mean `max_retries`?)"));
    let child = opened.iter().find(|d| d["code"] == "child_workflow").expect("the child's error is reported");
    assert!(child["message"].as_str().unwrap().contains("command stage `run` has no script"), "{child}");

    // The same rules, severities, positions and messages as `fabro validate --json`.
    let validated: Value = serde_json::from_slice(
        &fabro_in(dir.path(), &["validate", "--json", &workflow.to_string_lossy()]).stdout,
    )
    .unwrap();
    let from_validate: Vec<(String, String, u64, u64, String)> = validated["diagnostics"]
        .as_array()
        .unwrap()
        .iter()
        .map(|d| {
            let severity = d["severity"].as_str().unwrap().to_string();
            let message = d["message"].as_str().unwrap().to_string();
            (
                d["rule"].as_str().unwrap().to_string(),
                severity,
                d["line"].as_u64().unwrap_or(1),
                d["column"].as_u64().unwrap_or(1),
                message,
            )
        })
        .collect();
    let from_lsp: Vec<(String, String, u64, u64, String)> = opened
        .iter()
        .map(|d| {
            let severity = match d["severity"].as_u64() {
                Some(1) => "error",
                Some(2) => "warning",
                _ => "info",
            };
            let message = d["message"].as_str().unwrap().split("\nfix: ").next().unwrap().to_string();
            let (line, column) = (d["line"].as_u64().unwrap() + 1, d["character"].as_u64().unwrap() + 1);
            (d["code"].as_str().unwrap().to_string(), severity.to_string(), line, column, message)
        })
        .collect();
    assert_eq!(from_lsp, from_validate);

    // A syntax error typed into the buffer: reported at its line, and the rest still checked.
    let broken = result["broken"].as_array().unwrap();
    let syntax = broken.iter().find(|d| d["code"] == "syntax").expect("the syntax error");
    assert_eq!(syntax["line"], 5, "{syntax}");
    assert!(codes(&result["broken"]).contains(&"unknown_attribute".to_string()), "{broken:?}");
}

#[test]
fn lsp_quick_fix_renames_the_misspelled_attribute_in_the_buffer() {
    let dir = project(WORKFLOW, CHILD);
    let result = scenario("quick_fix", dir.path());
    assert!(result["titles"][0].as_str().unwrap().contains("rename it to `max_retries`"), "{result}");
    assert!(result["fixed"].as_str().unwrap().contains("plan [prompt=\"@plan.md\", max_retries=2]"));
    assert!(!codes(&result["after"]).contains(&"unknown_attribute".to_string()), "{}", result["after"]);
    assert_eq!(
        std::fs::read_to_string(dir.path().join("workflow.dot")).unwrap(),
        WORKFLOW,
        "the file on disk is untouched"
    );
}

#[test]
fn lsp_hover_explains_attributes_shapes_nodes_and_conditions() {
    let dir = project(WORKFLOW, CHILD);
    let result = scenario("hover", dir.path());
    assert_eq!(result["attribute"], Value::Null, "an unknown attribute has no schema entry");
    let known = result["known_attribute"].as_str().unwrap();
    assert!(known.starts_with("**goal_gate**: true or false (on nodes)"), "{known}");
    assert!(result["shape"].as_str().unwrap().contains("a **command** stage"), "{result}");
    let node = result["node"].as_str().unwrap();
    assert!(
        node.starts_with("**plan**: agent stage") && node.contains("Write a plan for ship it."),
        "{node}"
    );
    let condition = result["condition"].as_str().unwrap();
    assert!(condition.contains("the stage's outcome is fail"), "{condition}");
}

#[test]
fn lsp_completion_offers_names_values_node_ids_and_context_keys() {
    let dir = project(WORKFLOW, CHILD);
    let result = scenario("complete", dir.path());
    let has = |list: &str, label: &str| result[list].as_array().unwrap().iter().any(|l| l == label);
    assert!(has("attribute", "max_retries") && has("attribute", "goal_gate"), "{}", result["attribute"]);
    assert!(!has("attribute", "condition"), "an edge attribute is not offered on a node");
    assert!(has("shape", "parallelogram") && has("shape", "house"), "{}", result["shape"]);
    assert!(has("sandbox", "bwrap") && has("sandbox", "podman"), "{}", result["sandbox"]);
    assert!(has("target", "check") && has("target", "exit"), "{}", result["target"]);
    assert!(
        has("condition", "outcome") && has("condition", "context.command.exit_code"),
        "{}",
        result["condition"]
    );
    assert!(has("condition", "context.response.plan"), "keys an earlier stage sets: {}", result["condition"]);
}

#[test]
fn lsp_navigates_node_ids_and_files_and_renames_a_node_everywhere() {
    let dir = project(WORKFLOW, CHILD);
    let result = scenario("navigate", dir.path());
    assert_eq!(result["definition"]["line"], 5, "{result}");
    assert_eq!(result["definition"]["character"], 2);
    assert_eq!(result["references"].as_array().unwrap().len(), 4, "declaration, retry_target and two edges");
    let dir_uri = format!("file://{}", dir.path().canonicalize().unwrap().display());
    assert!(result["prompt_file"]["uri"].as_str().unwrap().ends_with("/plan.md"), "{result}");
    assert!(result["child"]["uri"].as_str().unwrap().ends_with("/child.dot"), "{result}");
    let _ = dir_uri;
    let symbols: Vec<&str> =
        result["symbols"].as_array().unwrap().iter().map(|s| s[0].as_str().unwrap()).collect();
    assert_eq!(symbols, ["start", "exit", "plan", "check", "sub"]);
    assert_eq!(result["prepared"], "plan");
    let renamed = result["renamed"].as_str().unwrap();
    assert!(renamed.contains("  design [prompt="), "{renamed}");
    assert!(renamed.contains("retry_target=\"design\""), "{renamed}");
    assert!(
        renamed.contains("start -> design -> check") && renamed.contains("check -> design [condition"),
        "{renamed}"
    );
    assert!(!renamed.contains("plan ") && !renamed.contains("\"plan\""), "{renamed}");
}

#[test]
fn lsp_formats_as_normalized_dot_keeping_comments() {
    let dir = project("// header\ndigraph   review {\ngoal = \"ship it\"   // why\n\n\n  start [shape=Mdiamond];exit [shape=Msquare]\n start->exit\n}\n", CHILD);
    let result = scenario("format", dir.path());
    assert_eq!(
        result["formatted"],
        "// header\ndigraph review {\n    goal=\"ship it\" // why\n\n    start [shape=\"Mdiamond\"]\n    exit [shape=\"Msquare\"]\n    start -> exit\n}\n"
    );
    assert_eq!(result["edits_again"], 0, "formatted text formats to itself");
}

#[test]
fn lsp_keeps_answering_through_garbage() {
    let dir = project(WORKFLOW, CHILD);
    assert_eq!(scenario("garbage", dir.path())["alive"], true);
}

#[test]
fn lsp_exits_when_the_client_is_gone() {
    let dir = project(WORKFLOW, CHILD);
    let result = scenario("client_gone", dir.path());
    assert_eq!(result["exit_code"], 0, "{result}");
    assert!(result["seconds"].as_f64().unwrap() < 5.0, "{result}");
}

#[test]
fn lsp_asks_a_client_that_watches_files_and_analyses_again_when_a_file_it_reads_changes() {
    let dir = project(WORKFLOW, CHILD);
    let result = scenario("watched_files", dir.path());
    assert_eq!(result["registered"], json!(["workspace/didChangeWatchedFiles"]), "{result}");
    assert_eq!(result["watchers"], json!(["**/*"]), "{result}");
    let settings_found = |key: &str| result[key].as_array().unwrap().iter().any(|code| code == "settings");
    assert!(!settings_found("before") && settings_found("after"), "{result}");
    assert!(result["settings_message"].as_str().unwrap().contains("unknown key `gaol`"), "{result}");
}
