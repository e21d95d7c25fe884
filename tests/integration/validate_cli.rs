//! `fabro validate WORKFLOW [--json]` as a user sees it: the first line of every kind of finding
//! with its `file:line:col`, the source line with a caret exactly under the position, the fix line,
//! the summary, the JSON schema, exit codes, awkward text (CRLF, tabs, non-ASCII, multi-line
//! strings) and never a panic.

use crate::common;

use common::{Ran, Test};
use serde_json::Value;

// ---------------------------------------------------------------------------------------------
// Helpers

/// Runs `fabro ARGS` on `source` (written to `workflow.dot`), checking the exit status and that
/// nothing panicked.
fn run(source: &str, args: &[&str], status: i32) -> Ran {
    let ran = Test::new().workflow(source).args(args).status(status).run();
    assert_no_panic(&ran);
    ran
}

fn validate(source: &str, status: i32) -> Ran {
    run(source, &["validate", "workflow.dot"], status)
}

/// `fabro validate --json`: stdout must be exactly one JSON object and nothing else.
fn validate_json(source: &str, status: i32) -> Value {
    json_of(&run(source, &["validate", "--json", "workflow.dot"], status))
}

fn json_of(ran: &Ran) -> Value {
    let stdout = ran.stdout();
    let mut values = serde_json::Deserializer::from_str(&stdout).into_iter::<Value>();
    let first = match values.next() {
        Some(Ok(value)) => value,
        other => panic!("stdout does not start with a JSON value ({other:?}):\n{stdout}"),
    };
    assert!(values.next().is_none(), "stdout holds more than one JSON value:\n{stdout}");
    assert!(first.is_object(), "stdout is not a JSON object:\n{stdout}");
    first
}

fn assert_no_panic(ran: &Ran) {
    for (name, text) in [("stdout", ran.stdout()), ("stderr", ran.stderr())] {
        assert!(!text.contains("panicked"), "{name} shows a panic:\n{text}");
        assert!(!text.contains("RUST_BACKTRACE"), "{name} shows a panic:\n{text}");
    }
    assert!(ran.output.status.code().is_some(), "fabro was killed by a signal: {:?}", ran.output.status);
}

/// Everything the user sees, whichever stream it went to.
fn all_output(ran: &Ran) -> String {
    format!("{}{}", ran.stdout(), ran.stderr())
}

/// The output line that starts with `prefix` (the first line of a diagnostic), and its index.
fn line_starting<'a>(output: &'a str, prefix: &str) -> (usize, &'a str) {
    output
        .lines()
        .enumerate()
        .find(|(_, line)| line.starts_with(prefix))
        .unwrap_or_else(|| panic!("no line starts with {prefix:?} in:\n{output}"))
}

/// Asserts the diagnostic whose first line is exactly `first_line`, followed by its snippet (the
/// source line `line` and a caret under `column` that points at `token`) and its fix line.
fn assert_diagnostic(
    output: &str,
    first_line: &str,
    snippet: Option<(usize, usize, &str)>,
    fix: Option<&str>,
) {
    let (index, found) = line_starting(output, first_line);
    assert_eq!(found, first_line, "first line of the diagnostic\n{output}");
    let lines: Vec<&str> = output.lines().collect();
    let mut next = index + 1;
    if let Some((line, column, token)) = snippet {
        let (source_index, source_line) = lines[next..]
            .iter()
            .enumerate()
            .take(3)
            .find_map(|(i, l)| source_line_of(l, line).map(|text| (next + i, text)))
            .unwrap_or_else(|| panic!("no source line {line} after {first_line:?}:\n{output}"));
        let caret_line = lines.get(source_index + 1).copied().unwrap_or_default();
        let carets = caret_line
            .split_once(" | ")
            .map(|(gutter, carets)| {
                assert!(gutter.trim().is_empty(), "caret line has a line number: {caret_line:?}");
                carets
            })
            .unwrap_or_else(|| panic!("no caret line under {source_line:?}:\n{output}"));
        let caret = carets.find('^').unwrap_or_else(|| panic!("no caret in {caret_line:?}:\n{output}"));
        assert!(carets[..caret].chars().all(|c| c == ' '), "caret line {caret_line:?}");
        let under: String = source_line.chars().skip(caret).collect();
        assert!(
            under.starts_with(token),
            "the caret is under {under:?}, expected it under {token:?}\n{source_line}\n{carets}\n---\n{output}"
        );
        if !source_line.contains('\t') && caret != column - 1 {
            panic!("caret at column {}, expected column {column}:\n{output}", caret + 1);
        }
        next = source_index + 2;
    }
    match fix {
        Some(fix) => {
            let expected = format!("   = fix: {fix}");
            assert_eq!(
                lines.get(next).copied(),
                Some(expected.as_str()),
                "fix line of {first_line:?}\n{output}"
            );
        }
        None => {
            let after = lines.get(next).copied().unwrap_or_default();
            assert!(!after.starts_with("   = fix:"), "unexpected fix line {after:?}\n{output}");
        }
    }
}

/// The text of a snippet line `N | text` when `N` is `line`.
fn source_line_of(output_line: &str, line: usize) -> Option<&str> {
    let (number, text) = output_line.split_once(" | ")?;
    (number.trim() == line.to_string()).then_some(text)
}

/// The JSON `diagnostics` array.
fn diagnostics(json: &Value) -> &Vec<Value> {
    json["diagnostics"].as_array().unwrap_or_else(|| panic!("no diagnostics array: {json}"))
}

fn diagnostic_with_rule<'a>(json: &'a Value, rule: &str) -> &'a Value {
    diagnostics(json)
        .iter()
        .find(|d| d["rule"] == rule)
        .unwrap_or_else(|| panic!("no `{rule}` diagnostic in {json:#}"))
}

/// Every diagnostic object has exactly the documented fields with the documented types.
fn assert_schema(json: &Value) {
    let object = json.as_object().expect("an object");
    let mut keys: Vec<&str> = object.keys().map(String::as_str).collect();
    keys.sort_unstable();
    assert_eq!(keys, ["diagnostics", "valid"], "top-level fields of {json}");
    assert!(json["valid"].is_boolean(), "`valid` is a bool: {json}");
    for diagnostic in diagnostics(json) {
        let mut keys: Vec<&str> =
            diagnostic.as_object().expect("an object").keys().map(String::as_str).collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            ["column", "edge", "fix", "line", "message", "node_id", "rule", "severity"],
            "fields of {diagnostic}"
        );
        assert!(diagnostic["rule"].as_str().is_some_and(|r| !r.is_empty()), "rule: {diagnostic}");
        assert!(
            matches!(diagnostic["severity"].as_str(), Some("error" | "warning" | "info")),
            "{diagnostic}"
        );
        assert!(diagnostic["message"].as_str().is_some_and(|m| !m.is_empty()), "message: {diagnostic}");
        assert!(
            diagnostic["node_id"].is_null() || diagnostic["node_id"].is_string(),
            "node_id: {diagnostic}"
        );
        assert!(diagnostic["fix"].is_null() || diagnostic["fix"].is_string(), "fix: {diagnostic}");
        match &diagnostic["edge"] {
            Value::Null => {}
            Value::Array(pair) => {
                assert!(pair.len() == 2 && pair.iter().all(Value::is_string), "{diagnostic}")
            }
            other => panic!("edge is {other}: {diagnostic}"),
        }
        let (line, column) = (&diagnostic["line"], &diagnostic["column"]);
        assert_eq!(line.is_null(), column.is_null(), "line and column come together: {diagnostic}");
        if !line.is_null() {
            assert!(line.as_u64().is_some_and(|n| n >= 1), "line is a positive integer: {diagnostic}");
            assert!(column.as_u64().is_some_and(|n| n >= 1), "column is a positive integer: {diagnostic}");
        }
    }
    let has_error = diagnostics(json).iter().any(|d| d["severity"] == "error");
    assert_eq!(json["valid"], !has_error, "`valid` is false exactly when there is an error: {json}");
}

fn assert_position(diagnostic: &Value, line: u64, column: u64) {
    assert_eq!(
        (diagnostic["line"].as_u64(), diagnostic["column"].as_u64()),
        (Some(line), Some(column)),
        "{diagnostic}"
    );
}

// ---------------------------------------------------------------------------------------------
// Workflows

const VALID: &str = r#"digraph Demo {
  goal = "Ship it"
  start [shape=Mdiamond]
  plan [prompt="Plan $goal"]
  exit [shape=Msquare]
  start -> plan -> exit
}
"#;

/// One warning: `plan` has no prompt.
const WARNING_ONLY: &str = r#"digraph Demo {
  start [shape=Mdiamond]
  plan [label="Plan"]
  exit [shape=Msquare]
  start -> plan -> exit
}
"#;

/// A node error (bad `max_retries`) and an edge error (bad condition), plus the warning the
/// conditional edge causes.
const NODE_AND_EDGE_ERRORS: &str = r#"digraph Demo {
  start [shape=Mdiamond]
  plan [prompt="x", max_retries=abc]
  exit [shape=Msquare]
  start -> plan [condition="outcome=sucess"]
  plan -> exit
}
"#;

const NO_START_OR_EXIT: &str = "digraph Demo {\n  plan [prompt=\"x\"]\n}\n";

// ---------------------------------------------------------------------------------------------
// Human output

#[test]
fn valid_workflow_exits_zero_and_prints_only_the_summary() {
    let ran = validate(VALID, 0);
    assert_eq!(ran.stdout(), "workflow.dot: valid (0 warnings)\n");
    assert_eq!(ran.stderr(), "");
}

#[test]
fn warnings_only_exit_zero_with_the_warning_rendered() {
    let ran = validate(WARNING_ONLY, 0);
    let output = ran.stdout();
    assert_diagnostic(
        &output,
        "warning[prompt_on_llm_nodes] workflow.dot:3:3 node plan: agent stage `plan` has no prompt; its label \"Plan\" is sent instead",
        Some((3, 3, "plan")),
        Some("add `prompt=\"...\"` to `plan`"),
    );
    assert_eq!(output.lines().last(), Some("workflow.dot: valid (1 warning)"));
}

#[test]
fn node_errors_show_position_caret_fix_and_summary() {
    let ran = validate(NODE_AND_EDGE_ERRORS, 2);
    let output = ran.stdout();
    assert_diagnostic(
        &output,
        "error[attribute_type] workflow.dot:3:33 node plan: `max_retries` is `abc`, expected a whole number (0 or more)",
        Some((3, 33, "abc")),
        Some("write a whole number (0 or more)"),
    );
    assert_eq!(output.lines().last(), Some("workflow.dot: invalid: 2 errors, 1 warning"));
}

#[test]
fn edge_errors_name_the_edge() {
    let ran = validate(NODE_AND_EDGE_ERRORS, 2);
    assert_diagnostic(
        &ran.stdout(),
        "error[condition_syntax] workflow.dot:5:37 edge start -> plan: invalid condition: unknown outcome `sucess` \
         (did you mean `success`?); expected success, partial_success, retry, fail, skipped or a custom outcome \
         (a lower-case name of letters, digits and _) (column 9 of the condition)",
        Some((5, 37, "sucess")),
        Some("conditions look like `outcome=success`, `context.tests_passed=true && preferred_label!=Skip`"),
    );
}

#[test]
fn whole_graph_findings_have_a_file_but_no_position_or_snippet() {
    let ran = validate(NO_START_OR_EXIT, 2);
    let output = ran.stdout();
    assert_diagnostic(
        &output,
        "error[start_node] workflow.dot: the workflow has no start node",
        None,
        Some("add `start [shape=Mdiamond]` (a node with id `start` also counts)"),
    );
    assert_diagnostic(
        &output,
        "error[terminal_node] workflow.dot: the workflow has no exit node",
        None,
        Some("add `exit [shape=Msquare]` (a node with id `exit` also counts)"),
    );
    assert_eq!(output.lines().last(), Some("workflow.dot: invalid: 2 errors, 0 warnings"));
}

#[test]
fn graph_attribute_findings_have_a_position_but_no_node() {
    let source = "digraph G {\n  retry_target = nowhere\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> exit\n}\n";
    let ran = validate(source, 0);
    assert_diagnostic(
        &ran.stdout(),
        "warning[retry_target_exists] workflow.dot:2:18: graph: `retry_target` names `nowhere`, which is not a node",
        Some((2, 18, "nowhere")),
        Some("name an existing node"),
    );
}

#[test]
fn summary_counts_are_pluralised() {
    let one_each = "digraph G {\n  start [shape=Mdiamond]\n  plan [label=\"P\", max_retries=-1]\n  exit [shape=Msquare]\n  start -> plan -> exit\n}\n";
    let ran = validate(one_each, 2);
    assert_eq!(ran.stdout().lines().last(), Some("workflow.dot: invalid: 1 error, 1 warning"));
    let two_warnings = "digraph G {\n  start [shape=Mdiamond]\n  a [label=\"A\"]\n  b [label=\"B\"]\n  exit [shape=Msquare]\n  start -> a -> b -> exit\n}\n";
    let ran = validate(two_warnings, 0);
    assert_eq!(ran.stdout().lines().last(), Some("workflow.dot: valid (2 warnings)"));
}

#[test]
fn the_summary_names_the_path_as_given() {
    let ran = Test::new().file("flows/demo.dot", VALID).args(["validate", "flows/demo.dot"]).status(0).run();
    assert_no_panic(&ran);
    assert_eq!(ran.stdout(), "flows/demo.dot: valid (0 warnings)\n");
}

// ---------------------------------------------------------------------------------------------
// Parse errors and rejected constructs

/// Asserts a syntax error's rendering: exit 2, the exact first line, the caret and the fix.
fn assert_syntax_error(source: &str, first_line: &str, snippet: (usize, usize, &str), fix: Option<&str>) {
    let ran = validate(source, 2);
    let output = all_output(&ran);
    assert_diagnostic(&output, first_line, Some(snippet), fix);
    assert!(!output.contains("valid ("), "no summary of a valid file after a parse error:\n{output}");
}

#[test]
fn strict_graphs_are_rejected() {
    assert_syntax_error(
        "strict digraph G {\n  a -> b\n}\n",
        "error[syntax] workflow.dot:1:1: `strict` graphs are not supported",
        (1, 1, "strict"),
        Some("remove `strict`; duplicate edges are kept as written"),
    );
}

#[test]
fn undirected_graphs_are_rejected() {
    assert_syntax_error(
        "graph G {\n  a -- b\n}\n",
        "error[syntax] workflow.dot:1:1: undirected graphs are not supported: workflows are directed",
        (1, 1, "graph"),
        Some("write `digraph Name { ... }`"),
    );
}

#[test]
fn undirected_edges_are_rejected() {
    assert_syntax_error(
        "digraph G {\n  start -> a\n  a -- b\n}\n",
        "error[syntax] workflow.dot:3:5: undirected edge `--`: workflow edges are directed",
        (3, 5, "--"),
        Some("write `->`"),
    );
    assert_syntax_error(
        "digraph G {\n  a -> b -- c\n}\n",
        "error[syntax] workflow.dot:2:10: undirected edge `--`: workflow edges are directed",
        (2, 10, "-- c"),
        Some("write `->`"),
    );
}

#[test]
fn html_labels_are_rejected() {
    assert_syntax_error(
        "digraph G {\n  a [label=<<b>bold</b>>]\n}\n",
        "error[syntax] workflow.dot:2:12: HTML labels are not supported",
        (2, 12, "<<b>"),
        Some("use a double-quoted string: label=\"...\""),
    );
    assert_syntax_error(
        "digraph G {\n  a [shape=box, label=<plain>]\n}\n",
        "error[syntax] workflow.dot:2:23: HTML labels are not supported",
        (2, 23, "<plain>"),
        Some("use a double-quoted string: label=\"...\""),
    );
    // In a graph attribute, a `node [..]` default and on an edge.
    for (source, column) in [
        ("digraph G {\n  label = <x>\n}\n", 11),
        ("digraph G {\n  node [label=<x>]\n}\n", 15),
        ("digraph G {\n  a -> b [label=<x>]\n}\n", 17),
    ] {
        assert_syntax_error(
            source,
            &format!("error[syntax] workflow.dot:2:{column}: HTML labels are not supported"),
            (2, column, "<x>"),
            Some("use a double-quoted string: label=\"...\""),
        );
    }
}

#[test]
fn a_second_graph_is_rejected() {
    assert_syntax_error(
        "digraph A {\n  a\n}\ndigraph B {\n  b\n}\n",
        "error[syntax] workflow.dot:4:1: a workflow file holds exactly one graph, but a second one starts here",
        (4, 1, "digraph B"),
        Some("move the second graph to its own file"),
    );
}

#[test]
fn a_subgraph_as_edge_target_is_rejected() {
    assert_syntax_error(
        "digraph G {\n  a -> { b c }\n}\n",
        "error[syntax] workflow.dot:2:8: a subgraph cannot be an edge endpoint",
        (2, 8, "{ b c }"),
        Some("write one edge per node: `a -> b` and `a -> c`"),
    );
    assert_syntax_error(
        "digraph G {\n  a -> b -> { c }\n}\n",
        "error[syntax] workflow.dot:2:13: a subgraph cannot be an edge endpoint",
        (2, 13, "{ c }"),
        Some("write one edge per node: `a -> b` and `a -> c`"),
    );
}

#[test]
fn subgraph_sources_and_named_subgraph_targets_are_rejected_as_endpoints() {
    let fix = Some("write one edge per node: `a -> b` and `a -> c`");
    assert_syntax_error(
        "digraph G {\n  subgraph s { x } -> y\n}\n",
        "error[syntax] workflow.dot:2:3: a subgraph cannot be an edge endpoint",
        (2, 3, "subgraph s"),
        fix,
    );
    assert_syntax_error(
        "digraph G {\n  { x } -> y\n}\n",
        "error[syntax] workflow.dot:2:3: a subgraph cannot be an edge endpoint",
        (2, 3, "{ x }"),
        fix,
    );
    assert_syntax_error(
        "digraph G {\n  a -> subgraph s { b }\n}\n",
        "error[syntax] workflow.dot:2:8: a subgraph cannot be an edge endpoint",
        (2, 8, "subgraph s"),
        fix,
    );
}

#[test]
fn empty_files_are_rejected() {
    let fix = Some("start the file with `digraph Name {` and end it with `}`");
    let first_line = "error[syntax] workflow.dot:1:1: the file is empty: expected `digraph Name { ... }`";
    assert_syntax_error("", first_line, (1, 1, ""), fix);
    assert_syntax_error("  \n// only a comment\n/* and another */\n", first_line, (1, 1, ""), fix);
}

#[test]
fn unexpected_tokens_say_what_was_expected_after_what() {
    assert_syntax_error(
        "digraph G {\n  a -> \n}\n",
        "error[syntax] workflow.dot:3:1: expected a node id after `->`, found `}`",
        (3, 1, "}"),
        None,
    );
    assert_syntax_error(
        "digraph G {\n  a [label=\"x\" foo]\n}\n",
        "error[syntax] workflow.dot:2:19: expected `=` after `foo`, found `]`",
        (2, 19, "]"),
        None,
    );
}

#[test]
fn a_file_with_only_a_byte_order_mark_is_empty() {
    let fix = Some("start the file with `digraph Name {` and end it with `}`");
    let first_line = "error[syntax] workflow.dot:1:1: the file is empty: expected `digraph Name { ... }`";
    assert_syntax_error("\u{FEFF}", first_line, (1, 1, ""), fix);
    assert_syntax_error("\u{FEFF}\n// nothing here\n", first_line, (1, 1, ""), fix);
}

/// Comments between the last token and the error are not tokens: the message names `->`, not a
/// word inside the comment.
#[test]
fn comments_before_a_syntax_error_are_not_tokens() {
    assert_syntax_error(
        "digraph G {\n  a -> // the next stage\n}\n",
        "error[syntax] workflow.dot:3:1: expected a node id after `->`, found `}`",
        (3, 1, "}"),
        None,
    );
    assert_syntax_error(
        "digraph G {\n  b -> /* target */ ;\n}\n",
        "error[syntax] workflow.dot:2:21: expected a node id after `->`, found `;`",
        (2, 21, ";"),
        None,
    );
}

#[test]
fn syntax_errors_follow_the_expected_after_found_form() {
    let ran = validate("digraph G {\n  run-tests [label=\"x\"]\n}\n", 2);
    let output = all_output(&ran);
    let (_, first) = line_starting(&output, "error[syntax] workflow.dot:2:6: expected ");
    assert!(first.contains(" after `run`, found `-"), "{first}");
    let (_, fix) = line_starting(&output, "   = fix: ");
    assert!(fix.contains("use `_` instead of `-`"), "{output}");
    assert_diagnostic(&output, first, Some((2, 6, "-tests")), Some(fix.trim_start_matches("   = fix: ")));
}

#[test]
fn an_unterminated_file_points_past_the_last_line() {
    let ran = validate("digraph G {\n  a -> b\n", 2);
    let output = all_output(&ran);
    let (_, first) = line_starting(&output, "error[syntax] workflow.dot:3:1: expected ");
    assert!(first.ends_with(", found the end of the file"), "{first}");
}

// ---------------------------------------------------------------------------------------------
// JSON

#[test]
fn json_for_a_valid_file() {
    let json = validate_json(VALID, 0);
    assert_schema(&json);
    assert_eq!(json, serde_json::json!({ "valid": true, "diagnostics": [] }));
}

#[test]
fn json_for_warnings_only_is_valid() {
    let json = validate_json(WARNING_ONLY, 0);
    assert_schema(&json);
    assert_eq!(json["valid"], true);
    assert_eq!(
        diagnostics(&json)[0],
        serde_json::json!({
            "rule": "prompt_on_llm_nodes",
            "severity": "warning",
            "message": "agent stage `plan` has no prompt; its label \"Plan\" is sent instead",
            "node_id": "plan",
            "edge": null,
            "line": 3,
            "column": 3,
            "fix": "add `prompt=\"...\"` to `plan`",
        })
    );
}

#[test]
fn json_node_and_edge_diagnostics() {
    let json = validate_json(NODE_AND_EDGE_ERRORS, 2);
    assert_schema(&json);
    assert_eq!(json["valid"], false);
    let node = diagnostic_with_rule(&json, "attribute_type");
    assert_eq!(node["severity"], "error");
    assert_eq!(node["node_id"], "plan");
    assert_eq!(node["edge"], Value::Null);
    assert_eq!(node["message"], "`max_retries` is `abc`, expected a whole number (0 or more)");
    assert_eq!(node["fix"], "write a whole number (0 or more)");
    assert_position(node, 3, 33);
    let edge = diagnostic_with_rule(&json, "condition_syntax");
    assert_eq!(edge["severity"], "error");
    assert_eq!(edge["node_id"], Value::Null);
    assert_eq!(edge["edge"], serde_json::json!(["start", "plan"]));
    assert_position(edge, 5, 37);
    assert!(edge["message"].as_str().unwrap().contains("unknown outcome `sucess`"), "{edge}");
}

#[test]
fn json_graph_level_diagnostics_have_null_position() {
    let json = validate_json(NO_START_OR_EXIT, 2);
    assert_schema(&json);
    let start = diagnostic_with_rule(&json, "start_node");
    assert_eq!(
        *start,
        serde_json::json!({
            "rule": "start_node",
            "severity": "error",
            "message": "the workflow has no start node",
            "node_id": null,
            "edge": null,
            "line": null,
            "column": null,
            "fix": "add `start [shape=Mdiamond]` (a node with id `start` also counts)",
        })
    );
}

#[test]
fn json_for_a_parse_error_is_one_syntax_diagnostic() {
    let json = validate_json("digraph G {\n  start -> a\n  a -- b\n}\n", 2);
    assert_schema(&json);
    assert_eq!(
        json,
        serde_json::json!({
            "valid": false,
            "diagnostics": [{
                "rule": "syntax",
                "severity": "error",
                "message": "undirected edge `--`: workflow edges are directed",
                "node_id": null,
                "edge": null,
                "line": 3,
                "column": 5,
                "fix": "write `->`",
            }],
        })
    );
    let json = validate_json("digraph G {\n  a -> \n}\n", 2);
    assert_schema(&json);
    let only = &diagnostics(&json)[..];
    assert_eq!(only.len(), 1, "{json}");
    assert_eq!(only[0]["rule"], "syntax");
    assert_eq!(only[0]["message"], "expected a node id after `->`, found `}`");
    assert_position(&only[0], 3, 1);
}

#[test]
fn json_stdout_holds_nothing_but_the_object() {
    for (source, status) in [
        (VALID, 0),
        (WARNING_ONLY, 0),
        (NODE_AND_EDGE_ERRORS, 2),
        ("", 2),
        ("strict digraph { }", 2),
        ("digraph G {\n  a [label=\"é😀\"] b -> ;\n}\n", 2),
    ] {
        let ran = run(source, &["validate", "--json", "workflow.dot"], status);
        let stdout = ran.stdout();
        assert!(stdout.trim_start().starts_with('{') && stdout.trim_end().ends_with('}'), "{stdout}");
        assert_eq!(stdout.trim_end().lines().count(), 1, "one line of JSON:\n{stdout}");
        assert_schema(&json_of(&ran));
        assert!(!stdout.contains("workflow.dot: valid") && !stdout.contains("invalid:"), "{stdout}");
    }
}

#[test]
fn json_flag_may_come_after_the_path() {
    let ran = run(WARNING_ONLY, &["validate", "workflow.dot", "--json"], 0);
    assert_schema(&json_of(&ran));
}

// ---------------------------------------------------------------------------------------------
// Files that cannot be read

#[test]
fn a_missing_file_exits_2_and_names_the_path() {
    let ran = Test::new().args(["validate", "no/such/workflow.dot"]).status(2).run();
    assert_no_panic(&ran);
    let output = all_output(&ran);
    assert!(output.contains("no/such/workflow.dot"), "{output}");
    assert!(output.starts_with("error"), "{output}");

    let ran = Test::new().args(["validate", "--json", "no/such/workflow.dot"]).status(2).run();
    assert_no_panic(&ran);
    let json = json_of(&ran);
    assert_schema(&json);
    assert_eq!(json["valid"], false);
    let only = &diagnostics(&json)[..];
    assert_eq!(only.len(), 1, "{json}");
    assert_eq!(only[0]["severity"], "error");
    assert!(only[0]["message"].as_str().unwrap().contains("no/such/workflow.dot"), "{json}");
}

#[test]
fn a_directory_or_non_utf8_file_exits_2() {
    let ran = Test::new().file("dir/x.dot", VALID).args(["validate", "dir"]).status(2).run();
    assert_no_panic(&ran);
    assert!(all_output(&ran).contains("dir"), "{}", all_output(&ran));

    let test = Test::new();
    std::fs::write(test.path("latin1.dot"), b"digraph G { a [label=\"caf\xe9\"] }\n").expect("write");
    let ran = test.args(["validate", "latin1.dot"]).status(2).run();
    assert_no_panic(&ran);
    assert!(all_output(&ran).contains("latin1.dot"), "{}", all_output(&ran));
}

// ---------------------------------------------------------------------------------------------
// Line and column in awkward text

#[test]
fn crlf_line_endings_keep_line_and_column() {
    let source = "digraph G {\r\n  a [label=\"x\"]\r\n  b -> ;\r\n}\r\n";
    let ran = validate(source, 2);
    let output = all_output(&ran);
    let (_, first) =
        line_starting(&output, "error[syntax] workflow.dot:3:8: expected a node id after `->`, found `;`");
    assert_diagnostic(&output, first, Some((3, 8, ";")), None);
    assert!(!output.contains('\r'), "the carriage return is not echoed: {output:?}");

    let source = "digraph G {\r\n  start [shape=Mdiamond]\r\n  plan [prompt=\"x\", max_retries=abc]\r\n  exit [shape=Msquare]\r\n  start -> plan -> exit\r\n}\r\n";
    let ran = validate(source, 2);
    assert_diagnostic(
        &ran.stdout(),
        "error[attribute_type] workflow.dot:3:33 node plan: `max_retries` is `abc`, expected a whole number (0 or more)",
        Some((3, 33, "abc")),
        Some("write a whole number (0 or more)"),
    );
    let json = validate_json(source, 2);
    assert_position(diagnostic_with_rule(&json, "attribute_type"), 3, 33);
}

#[test]
fn tabs_count_as_one_column_and_the_caret_stays_under_the_token() {
    let source = "digraph G {\n\ta [label=\"x\"]\n\t\tb -> ;\n}\n";
    let ran = validate(source, 2);
    let output = all_output(&ran);
    let (_, first) =
        line_starting(&output, "error[syntax] workflow.dot:3:8: expected a node id after `->`, found `;`");
    assert_diagnostic(&output, first, Some((3, 8, ";")), None);
    assert_position(&diagnostics(&validate_json(source, 2))[0], 3, 8);

    let source = "digraph G {\n\tstart [shape=Mdiamond]\n\tplan [prompt=\"x\",\tmax_retries=abc]\n\texit [shape=Msquare]\n\tstart -> plan -> exit\n}\n";
    let ran = validate(source, 2);
    assert_diagnostic(
        &ran.stdout(),
        "error[attribute_type] workflow.dot:3:32 node plan: `max_retries` is `abc`, expected a whole number (0 or more)",
        Some((3, 32, "abc")),
        Some("write a whole number (0 or more)"),
    );
}

#[test]
fn non_ascii_text_before_the_error_counts_characters_not_bytes() {
    let source = "digraph G {\n  a [label=\"héllo 😀\"] b -> ;\n}\n";
    let ran = validate(source, 2);
    let output = all_output(&ran);
    let (_, first) =
        line_starting(&output, "error[syntax] workflow.dot:2:28: expected a node id after `->`, found `;`");
    assert_diagnostic(&output, first, Some((2, 28, ";")), None);
    assert_position(&diagnostics(&validate_json(source, 2))[0], 2, 28);

    let source = "digraph G {\n  start [shape=Mdiamond, label=\"Début\"]\n  exit [shape=Msquare]\n  start -> exit [label=\"é\", condition=\"context.x contains 'é😀' && outcome=sucess\"]\n  start -> exit\n}\n";
    let ran = validate(source, 2);
    assert_diagnostic(
        &ran.stdout(),
        "error[condition_syntax] workflow.dot:4:75 edge start -> exit: invalid condition: unknown outcome `sucess` \
         (did you mean `success`?); expected success, partial_success, retry, fail, skipped or a custom outcome \
         (a lower-case name of letters, digits and _) (column 40 of the condition)",
        Some((4, 75, "sucess")),
        Some("conditions look like `outcome=success`, `context.tests_passed=true && preferred_label!=Skip`"),
    );
}

#[test]
fn escapes_before_a_condition_error_are_accounted_for() {
    let source = "digraph G {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> exit [condition=\"context.x=\\\"a\\\" && outcome=sucess\"]\n  start -> exit\n}\n";
    let ran = validate(source, 2);
    let output = ran.stdout();
    let (_, first) = line_starting(&output, "error[condition_syntax] workflow.dot:4:56 edge start -> exit: ");
    assert_diagnostic(
        &output,
        first,
        Some((4, 56, "sucess")),
        Some("conditions look like `outcome=success`, `context.tests_passed=true && preferred_label!=Skip`"),
    );
}

#[test]
fn concatenated_strings_map_errors_into_the_right_part() {
    let source = "digraph G {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> exit [condition=\"outcome=\" + \"sucess\"]\n  start -> exit\n}\n";
    let ran = validate(source, 2);
    let output = ran.stdout();
    let (_, first) = line_starting(&output, "error[condition_syntax] workflow.dot:4:42 edge start -> exit: ");
    assert_diagnostic(
        &output,
        first,
        Some((4, 42, "sucess")),
        Some("conditions look like `outcome=success`, `context.tests_passed=true && preferred_label!=Skip`"),
    );
    let source = "digraph G {\n  model_stylesheet=\"* { llm_model: x; }\" + \" #nosuch { llm_model: y; }\"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> exit\n}\n";
    let ran = validate(source, 0);
    assert_diagnostic(
        &ran.stdout(),
        "warning[stylesheet_syntax] workflow.dot:2:46: model_stylesheet: `#nosuch` matches no node",
        Some((2, 46, "#nosuch")),
        Some("remove the rule or fix the id"),
    );
}

#[test]
fn multi_line_condition_errors_point_into_the_right_line() {
    let source = "digraph G {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> exit [condition=\"outcome=success &&\n    context.x >= abc\"]\n  start -> exit\n}\n";
    let ran = validate(source, 2);
    assert_diagnostic(
        &ran.stdout(),
        "error[condition_syntax] workflow.dot:5:18 edge start -> exit: invalid condition: `>=` compares numbers, \
         but `abc` is not a number (column 37 of the condition)",
        Some((5, 18, "abc")),
        Some("conditions look like `outcome=success`, `context.tests_passed=true && preferred_label!=Skip`"),
    );
    assert_position(diagnostic_with_rule(&validate_json(source, 2), "condition_syntax"), 5, 18);

    // The same with CRLF line endings inside and outside the string.
    let crlf = source.replace('\n', "\r\n");
    let ran = validate(&crlf, 2);
    let output = ran.stdout();
    let (_, first) = line_starting(&output, "error[condition_syntax] workflow.dot:5:18 edge start -> exit: ");
    assert_diagnostic(
        &output,
        first,
        Some((5, 18, "abc")),
        Some("conditions look like `outcome=success`, `context.tests_passed=true && preferred_label!=Skip`"),
    );
}

/// A multi-line `model_stylesheet`: findings point at the selector's own line.
#[test]
fn multi_line_stylesheet_findings_point_into_the_right_line() {
    let source = "digraph G {\n  model_stylesheet=\"\n    * { llm_model: x; }\n    #nosuch { llm_model: y; }\n  \"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> exit\n}\n";
    let ran = validate(source, 0);
    assert_diagnostic(
        &ran.stdout(),
        "warning[stylesheet_syntax] workflow.dot:4:5: model_stylesheet: `#nosuch` matches no node",
        Some((4, 5, "#nosuch")),
        Some("remove the rule or fix the id"),
    );
    assert_position(diagnostic_with_rule(&validate_json(source, 0), "stylesheet_syntax"), 4, 5);
}

#[test]
fn multi_line_stylesheet_syntax_errors_point_into_the_right_line() {
    let source = "digraph G {\n  model_stylesheet=\"\n    * { llm_model: x; }\n    .code { reasoning_effort: extreme; }\n  \"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> exit\n}\n";
    let ran = validate(source, 2);
    assert_diagnostic(
        &ran.stdout(),
        "error[stylesheet_syntax] workflow.dot:4:31: model_stylesheet: reasoning_effort must be low, medium or high, found `extreme`",
        Some((4, 31, "extreme")),
        Some("rules look like `.code { llm_model: claude-opus-4-6; reasoning_effort: high }`"),
    );
    assert_position(diagnostic_with_rule(&validate_json(source, 2), "stylesheet_syntax"), 4, 31);
}

#[test]
fn stylesheet_syntax_errors_are_errors() {
    let source = "digraph G {\n  model_stylesheet=\"* { llm_model x; }\"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> exit\n}\n";
    let ran = validate(source, 2);
    assert_diagnostic(
        &ran.stdout(),
        "error[stylesheet_syntax] workflow.dot:2:35: model_stylesheet: expected `:` or `=` after `llm_model`",
        Some((2, 35, "x;")),
        Some("rules look like `.code { llm_model: claude-opus-4-6; reasoning_effort: high }`"),
    );
}

// ---------------------------------------------------------------------------------------------
// Arguments

#[test]
fn help_exits_zero() {
    let ran = Test::new().args(["--help"]).status(0).run();
    assert_no_panic(&ran);
    assert!(ran.stdout().contains("validate"), "{}", ran.stdout());
    let ran = Test::new().args(["validate", "--help"]).status(0).run();
    assert_no_panic(&ran);
    assert!(ran.stdout().contains("--json") && ran.stdout().contains("WORKFLOW"), "{}", ran.stdout());
}

#[test]
fn unknown_flags_and_missing_arguments_exit_2() {
    for args in [&["validate", "--bogus", "workflow.dot"][..], &["--bogus"], &["validate"], &["frobnicate"]] {
        let ran = Test::new().workflow(VALID).args(args).status(2).run();
        assert_no_panic(&ran);
        assert!(ran.stdout().is_empty(), "usage errors go to stderr: {}", ran.stdout());
        assert!(ran.stderr().contains("error"), "{}", ran.stderr());
    }
}

// ---------------------------------------------------------------------------------------------
// Never a panic

#[test]
fn hostile_inputs_never_panic_the_cli() {
    let deep = format!("digraph G {{ {} }}", "{ ".repeat(5_000));
    let html = format!("digraph G {{ a [label={}] }}", "<".repeat(5_000));
    let long = format!("digraph G {{ a [label=\"{}\"] }}", "x".repeat(1 << 20));
    let condition = format!("digraph G {{ start -> exit [condition=\"{}\"] }}", "(".repeat(5_000));
    let inputs: Vec<&str> = vec![
        "\u{FEFF}digraph G { start -> exit }",
        "digraph G { a [label=\"unterminated }",
        "digraph G { /* unterminated comment }",
        "digraph G { a [label=\"\\\"] }",
        "digraph G { \"é\" -> \"😀\" [condition=\"😀\"] }",
        "digraph G { start -> exit [condition=\"context.x matches '('\"] }",
        "digraph G { model_stylesheet=\"#😀 { model: 😀 }\" start -> exit }",
        "digraph G { start -> exit [condition=\"\\\\\"] }",
        "digraph G { a [prompt=\"@\"] b [prompt=\"@.\"] start -> a -> b -> exit }",
        "digraph G { w [shape=insulator, duration=99999999999999999999d] }",
        "\r\r\r}",
        "\0",
        "digraph",
        "-> -> ->",
        deep.as_str(),
        html.as_str(),
        long.as_str(),
        condition.as_str(),
    ];
    for input in inputs {
        for json in [false, true] {
            let mut args = vec!["validate"];
            if json {
                args.push("--json");
            }
            args.push("workflow.dot");
            let ran = Test::new().workflow(input).args(&args).run();
            assert_no_panic(&ran);
            let code = ran.output.status.code();
            assert!(matches!(code, Some(0 | 2)), "exit {code:?} for {:?}", &input[..input.len().min(80)]);
            if json {
                assert_schema(&json_of(&ran));
            }
        }
    }
}

/// `fabro validate` on `text` (written to `w.dot` in a temporary directory): exit code and the
/// whole output.
fn validate_text(text: &str) -> (Option<i32>, String) {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("w.dot"), text).unwrap();
    let output = common::fabro_in(dir.path(), &["validate", "w.dot"]);
    let shown =
        format!("{}{}", String::from_utf8_lossy(&output.stdout), String::from_utf8_lossy(&output.stderr));
    (output.status.code(), shown)
}

#[test]
fn a_long_chained_statement_is_reported_in_a_window_and_its_repeated_findings_are_counted() {
    let chain: Vec<String> = (0..20_000).map(|i| format!("n{i}")).collect();
    let text = format!(
        "digraph c {{\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> {} -> exit\n}}\n",
        chain.join(" -> ")
    );
    let (code, shown) = validate_text(&text);
    assert_eq!(code, Some(0), "{}", &shown[shown.len().saturating_sub(500)..]);
    assert!(shown.len() < 1_000_000, "output of {} bytes", shown.len());
    assert!(
        shown.ends_with("w.dot: valid (40000 warnings)\n"),
        "{}",
        &shown[shown.len().saturating_sub(300)..]
    );
    assert!(shown.contains("warning[edge_target_exists]: 19995 more like these"), "{shown}");
    assert!(shown.contains("warning[prompt_on_llm_nodes]: 19995 more like these"), "{shown}");
    // Each snippet shows a window of the 200 KB line, with the caret under the node it names.
    for block in shown.split("\n\n").filter(|block| block.contains("node n3:")) {
        let lines: Vec<&str> = block.lines().collect();
        let source = lines.iter().find(|line| line.starts_with("4 | ")).expect("the source line");
        let carets = lines.iter().find(|line| line.contains('^')).expect("the carets");
        assert!(source.chars().count() < 120, "{source}");
        let at = carets.chars().position(|c| c == '^').unwrap();
        let named: String = source.chars().skip(at).take(2).collect();
        assert_eq!(named, "n3", "{block}");
    }
    let deep = shown.split("\n\n").find(|block| block.contains("node n4:")).expect("n4's finding");
    assert!(deep.lines().nth(2).unwrap().ends_with('…'), "{deep}");
}

#[test]
fn a_node_with_thousands_of_attributes_loads_and_reports_briefly() {
    let extra: Vec<String> = (0..16_384).map(|i| format!("custom_{i}=\"v\"")).collect();
    let text = format!(
        "digraph w {{\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  x [shape=parallelogram, script=\"true\", {}]\n  start -> x -> exit\n}}\n",
        extra.join(", ")
    );
    let (code, shown) = validate_text(&text);
    assert_eq!(code, Some(0), "{}", &shown[..shown.len().min(2000)]);
    assert!(shown.len() < 20_000, "output of {} bytes", shown.len());
    assert!(shown.contains("…"), "the long line is cut: {shown}");
}

#[test]
fn fabros_model_provider_and_goal_spellings_are_read_with_a_dialect_warning() {
    let workflow = r#"digraph fabro_style {
    goal="Ship the parser"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    plan [shape=box, model="gpt-5.2", provider="openai", prompt="Plan how to {{ goal }}"]
    start -> plan -> exit
}
"#;
    let (code, shown) = validate_text(workflow);
    assert_eq!(code, Some(0), "{shown}");
    assert!(
        shown
            .contains("warning[dialect_alias] w.dot:5:22 node plan: `model` is Fabro's name for `llm_model`"),
        "{shown}"
    );
    assert!(shown.contains("`provider` is Fabro's name for `llm_provider`"), "{shown}");
    assert!(shown.contains("`{{ goal }}` is Fabro's spelling of the goal"), "{shown}");
    assert!(!shown.contains("unknown attribute"), "{shown}");
    // The run uses them: the prompt has the goal.
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("w.dot"), workflow).unwrap();
    let ran = common::fabro_in(dir.path(), &["run", "w.dot", "--run-dir", "run", "--simulate", "-q"]);
    assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    let prompt = std::fs::read_to_string(dir.path().join("run/stages/plan/1/prompt.md")).unwrap();
    assert!(prompt.contains("Plan how to Ship the parser"), "{prompt}");
}

#[test]
fn links_other_than_http_are_errors_at_their_value_and_run_refuses_them() {
    let source = "digraph w {\n  start [shape=Mdiamond, URL=\"javascript:alert(document.cookie)\"]\n  exit [shape=Msquare, href=\"https://example.com/docs\"]\n  start -> exit [labelhref=\"data:text/html,x\"]\n}\n";
    let ran = validate(source, 2);
    let output = ran.stdout();
    assert_diagnostic(
        &output,
        "error[link_scheme] workflow.dot:2:30 node start: `URL` is `javascript:alert(document.cookie)`: only http:// and https:// links are allowed in a drawn graph",
        Some((2, 30, "\"javascript:alert(document.cookie)\"")),
        Some("write an absolute http:// or https:// link, or remove `URL`"),
    );
    assert_diagnostic(
        &output,
        "error[link_scheme] workflow.dot:4:28 edge start -> exit: `labelhref` is `data:text/html,x`: only http:// and https:// links are allowed in a drawn graph",
        Some((4, 28, "\"data:text/html,x\"")),
        Some("write an absolute http:// or https:// link, or remove `labelhref`"),
    );
    assert_eq!(output.lines().last(), Some("workflow.dot: invalid: 2 errors, 0 warnings"));
    let ran = run(source, &["run", "workflow.dot", "--simulate"], 2);
    assert!(ran.stderr().contains("error[link_scheme]"), "{}", ran.stderr());
}

#[test]
fn attributes_naming_files_for_graphviz_are_warned_about_as_not_drawn() {
    let source = "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare, shapefile=\"/dev/zero\"]\n  start -> exit\n}\n";
    let output = validate(source, 0).stdout();
    assert_diagnostic(
        &output,
        "warning[graphviz_file] workflow.dot:3:24 node exit: `shapefile` names a file, which fabro never passes to Graphviz: it is not drawn",
        Some((3, 24, "shapefile")),
        Some("remove `shapefile`"),
    );
}

#[test]
fn sandbox_paths_that_run_refuses_are_errors_at_their_value() {
    let source = "digraph w {\n  sandbox_paths = \"ro:/\"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  build [shape=parallelogram, script=\"true\", sandbox_paths=\"rw:relative\"]\n  start -> build -> exit\n}\n";
    let output = validate(source, 2).stdout();
    assert_diagnostic(
        &output,
        "error[sandbox_paths] workflow.dot:5:60 node build: sandbox_paths: `rw:relative`: the path must be absolute",
        Some((5, 60, "\"rw:relative\"")),
        Some("write each item as ro:/absolute/path or rw:/absolute/path"),
    );
    let missing = source.replace("rw:relative", "ro:/no/such/fabro/path");
    let output = validate(&missing, 2).stdout();
    assert!(output.contains("error[sandbox_paths] workflow.dot:5:60 node build: sandbox_paths: `/no/such/fabro/path` does not exist"), "{output}");
}

#[test]
fn keep_background_in_the_bwrap_sandbox_is_warned_about_as_having_no_effect() {
    let source = "digraph w {\n  default_sandbox = \"bwrap\"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  serve [shape=parallelogram, script=\"true\", keep_background=true]\n  start -> serve -> exit\n}\n";
    let output = validate(source, 0).stdout();
    assert_diagnostic(
        &output,
        "warning[confined_keep_background] workflow.dot:5:62 node serve: command stage `serve` keeps its background processes, but it runs in the bwrap sandbox, whose processes all end with the stage",
        Some((5, 62, "true")),
        Some("remove keep_background, or run `serve` with sandbox=\"none\""),
    );
    let unconfined = source.replace("keep_background=true", "keep_background=true, sandbox=\"none\"");
    assert!(!validate(&unconfined, 0).stdout().contains("confined_keep_background"));
}
