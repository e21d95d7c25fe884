//! Attractor spec 11.2 (validation and linting), one test per checklist item, plus one test per
//! fabro lint rule.

use crate::common;

use common::Test;
use fabro::graph::Workflow;
use fabro::source::SourceFile;
use fabro::validate::Rule;
use fabro::{CheckedWorkflow, Diagnostic, Loader, Severity};
use serde_json::json;

/// rule, severity, node id, message, fix
type Finding<'a> = (&'a str, Severity, Option<&'a str>, &'a str, Option<&'a str>);

/// rule, severity, node id, edge, message
type EdgeFinding<'a> = (&'a str, Severity, Option<&'a str>, Option<(String, String)>, &'a str);

fn load_with(loader: &Loader, text: &str) -> CheckedWorkflow {
    loader.load_source(SourceFile::new("x.dot", text)).unwrap_or_else(|e| panic!("load failed: {e}"))
}

fn load(text: &str) -> CheckedWorkflow {
    load_with(&Loader::new(), text)
}

/// `(rule, severity, node)` of every diagnostic, in order.
fn summary(checked: &CheckedWorkflow) -> Vec<(&str, Severity, Option<&str>)> {
    checked.diagnostics.iter().map(|d| (d.rule.as_str(), d.severity, d.node_id.as_deref())).collect()
}

/// The one diagnostic of `rule`.
fn only<'c>(checked: &'c CheckedWorkflow, rule: &str) -> &'c Diagnostic {
    let found: Vec<&Diagnostic> = checked.diagnostics.iter().filter(|d| d.rule == rule).collect();
    assert_eq!(found.len(), 1, "expected one `{rule}` diagnostic, got {:#?}", checked.diagnostics);
    found[0]
}

/// `(line, column)` of a diagnostic's span.
fn position(checked: &CheckedWorkflow, diagnostic: &Diagnostic) -> Option<(usize, usize)> {
    diagnostic.location(checked.workflow.source()).map(|l| (l.line, l.column))
}

fn edge(from: &str, to: &str) -> Option<(String, String)> {
    Some((from.to_string(), to.to_string()))
}

/// Exactly one start node (shape=Mdiamond) is required: none is an error
#[test]
fn exactly_one_start_node_required_missing_is_error() {
    let checked = load(
        r#"digraph G {
    plan [prompt="Plan"]
    exit [shape=Msquare]
    plan -> exit
}"#,
    );
    assert_eq!(summary(&checked), [("start_node", Severity::Error, None)]);
    let d = only(&checked, "start_node");
    assert_eq!(d.message, "the workflow has no start node");
    assert_eq!(d.span, None);
    assert_eq!(d.fix.as_deref(), Some("add `start [shape=Mdiamond]` (a node with id `start` also counts)"));
}

/// Exactly one start node (shape=Mdiamond) is required: two are an error
#[test]
fn exactly_one_start_node_required_two_is_error() {
    let checked = load(
        r#"digraph G {
    begin [shape=Mdiamond]
    start
    exit [shape=Msquare]
    begin -> exit
    start -> exit
}"#,
    );
    // reachability is checked from the first start node, so the second one is unreachable
    assert_eq!(
        summary(&checked),
        [("start_node", Severity::Error, Some("start")), ("reachability", Severity::Warning, Some("start"))]
    );
    let d = only(&checked, "start_node");
    assert_eq!(d.message, "the workflow has more than one start node: `begin` and `start`");
    assert_eq!(position(&checked, d), Some((3, 5)));
}

/// Exactly one start node is required: a node with id `start` (and no shape) counts as the start
#[test]
fn exactly_one_start_node_required_id_start_counts() {
    let checked = load(
        r#"digraph G {
    start
    plan [prompt="Plan"]
    exit [shape=Msquare]
    start -> plan -> exit
}"#,
    );
    assert_eq!(summary(&checked), []);
    assert_eq!(checked.workflow.node("start").unwrap().handler_type(), fabro::graph::HandlerType::Start);
}

/// Exactly one start node is required: `start_node` counts a node whose id is `start` (spec 7.2:
/// "shape=Mdiamond or id matching `start`/`Start`"; likewise `exit`/`end` for the exit) also when a
/// `node [shape=box]` default block gave it a shape it did not set itself
#[test]
fn exactly_one_start_node_required_id_start_counts_with_node_default_shape() {
    let checked = load(
        r#"digraph G {
    node [shape=box]
    start
    plan [prompt="Plan"]
    exit
    start -> plan -> exit
}"#,
    );
    assert_eq!(summary(&checked), []);
    assert_eq!(checked.workflow.node("start").unwrap().handler_type(), fabro::graph::HandlerType::Start);
    assert_eq!(checked.workflow.node("exit").unwrap().handler_type(), fabro::graph::HandlerType::Exit);
}

/// An exit node (shape=Msquare) is required: none is an error, several are fine
#[test]
fn at_least_one_exit_node_required() {
    let missing = load(
        r#"digraph G {
    start [shape=Mdiamond]
    plan [prompt="Plan"]
    start -> plan
}"#,
    );
    assert_eq!(
        summary(&missing),
        [("terminal_node", Severity::Error, None), ("dead_end", Severity::Warning, Some("plan"))]
    );
    assert_eq!(only(&missing, "terminal_node").message, "the workflow has no exit node");

    let two = load(
        r#"digraph G {
    start [shape=Mdiamond]
    done [shape=Msquare]
    stop [shape=Msquare]
    start -> done
    start -> stop
}"#,
    );
    // Several exits are kilroy's `success_exit`/`fail_exit`: reaching any ends the run.
    assert_eq!(summary(&two), []);
}

/// Nodes with id `exit` or `end` (and no shape) count as exits
#[test]
fn exit_node_ids_exit_and_end_count() {
    for id in ["exit", "end"] {
        let checked =
            load(&format!("digraph G {{\n    start [shape=Mdiamond]\n    {id}\n    start -> {id}\n}}"));
        assert_eq!(summary(&checked), [], "{id}");
        assert_eq!(checked.workflow.node(id).unwrap().handler_type(), fabro::graph::HandlerType::Exit);
    }
    let both = load(
        "digraph G {\n    start [shape=Mdiamond]\n    exit\n    end\n    start -> exit\n    start -> end\n}",
    );
    assert_eq!(summary(&both), []);
}

/// Start node has no incoming edges
#[test]
fn start_node_has_no_incoming_edges() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    plan [prompt="Plan"]
    exit [shape=Msquare]
    start -> plan -> exit
    plan -> start
}"#,
    );
    assert_eq!(summary(&checked), [("start_no_incoming", Severity::Error, None)]);
    let d = only(&checked, "start_no_incoming");
    assert_eq!(d.edge, edge("plan", "start"));
    assert_eq!(d.message, "the start node `start` has an incoming edge");
    assert_eq!(position(&checked, d), Some((6, 5)));
}

/// Exit node has no outgoing edges
#[test]
fn exit_node_has_no_outgoing_edges() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    plan [prompt="Plan"]
    exit [shape=Msquare]
    start -> plan -> exit
    exit -> plan
}"#,
    );
    assert_eq!(summary(&checked), [("exit_no_outgoing", Severity::Error, None)]);
    let d = only(&checked, "exit_no_outgoing");
    assert_eq!(d.edge, edge("exit", "plan"));
    assert_eq!(d.message, "the exit node `exit` has an outgoing edge");
    assert_eq!(position(&checked, d), Some((6, 5)));
}

/// All nodes are reachable from start (no orphans): an orphan node is a warning, rule `reachability`
#[test]
fn all_nodes_reachable_from_start() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    plan [prompt="Plan"]
    exit [shape=Msquare]
    orphan [prompt="Never runs"]
    start -> plan -> exit
    orphan -> exit
}"#,
    );
    assert_eq!(summary(&checked), [("reachability", Severity::Warning, Some("orphan"))]);
    let d = only(&checked, "reachability");
    assert_eq!(d.message, "node `orphan` cannot be reached from the start node");
    assert_eq!(position(&checked, d), Some((5, 5)));
    assert_eq!(d.fix.as_deref(), Some("add an edge into `orphan` or remove it"));
    assert!(checked.into_valid().is_ok());
}

/// All edges reference valid node IDs: a node only named by edges gets an `edge_target_exists`
/// warning with a "did you mean"
#[test]
fn all_edges_reference_valid_node_ids() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    review [prompt="Review"]
    exit [shape=Msquare]
    start -> reveiw -> review -> exit
}"#,
    );
    // A near miss of a declared node is a typo that would run: an error.
    let d = only(&checked, "edge_target_exists");
    assert_eq!(d.severity, Severity::Error);
    assert_eq!(d.node_id.as_deref(), Some("reveiw"));
    assert_eq!(
        d.message,
        "node `reveiw` is only named by edges and never declared; it runs as a bare agent stage; did you mean `review`?"
    );
    assert_eq!(
        d.fix.as_deref(),
        Some("rename it to `review`, or declare `reveiw [...]` if it is a new stage")
    );
    assert_eq!(position(&checked, d), Some((5, 14)));
    assert_eq!(
        summary(&checked),
        [
            ("edge_target_exists", Severity::Error, Some("reveiw")),
            ("prompt_on_llm_nodes", Severity::Warning, Some("reveiw")),
        ]
    );
}

/// Codergen nodes (shape=box) have non-empty `prompt` attribute (warning if missing)
#[test]
fn codergen_nodes_should_have_a_prompt() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    plan [label="Plan it"]
    write [shape=box, prompt="Write"]
    ask [shape=tab]
    empty [prompt=""]
    blank [prompt="   "]
    exit [shape=Msquare]
    start -> plan -> write -> ask -> empty -> blank -> exit
}"#,
    );
    assert_eq!(
        summary(&checked),
        [
            ("prompt_on_llm_nodes", Severity::Warning, Some("plan")),
            ("prompt_on_llm_nodes", Severity::Warning, Some("ask")),
            ("prompt_on_llm_nodes", Severity::Warning, Some("empty")),
            ("prompt_on_llm_nodes", Severity::Warning, Some("blank")),
        ]
    );
    let plan = &checked.diagnostics[0];
    assert_eq!(plan.message, "agent stage `plan` has no prompt; its label \"Plan it\" is sent instead");
    assert_eq!(plan.fix.as_deref(), Some("add `prompt=\"...\"` to `plan`"));
    assert_eq!(position(&checked, plan), Some((3, 5)));
    assert_eq!(
        checked.diagnostics[1].message,
        "prompt stage `ask` has no prompt; its label \"ask\" is sent instead"
    );
}

/// Condition expressions on edges parse without errors (an error otherwise, pointing at the column
/// inside the condition)
#[test]
fn condition_expressions_parse_without_errors() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    gate [shape=diamond]
    start -> gate
    gate -> exit [condition="outcome=sucess"]
    gate -> exit [condition="context.a=\"x\" && && b"]
    gate -> exit
}"#,
    );
    assert_eq!(
        summary(&checked),
        [("condition_syntax", Severity::Error, None), ("condition_syntax", Severity::Error, None)]
    );
    let first = &checked.diagnostics[0];
    assert_eq!(first.edge, edge("gate", "exit"));
    assert_eq!(
        first.message,
        "invalid condition: unknown outcome `sucess` (did you mean `success`?); expected success, \
         partial_success, retry, fail, skipped or a custom outcome (a lower-case name of letters, digits and _) \
         (column 9 of the condition)"
    );
    // `s` of `sucess`: the condition starts at column 30 of line 6
    assert_eq!(position(&checked, first), Some((6, 38)));
    let second = &checked.diagnostics[1];
    assert_eq!(
        second.message,
        "invalid condition: expected a key such as `outcome` or `context.name`, `!` or `(` after `&&`, \
         found `&&` (column 18 of the condition)"
    );
    // the escaped quotes take two characters each in the file
    assert_eq!(position(&checked, second), Some((7, 49)));
    assert_eq!(
        first.fix.as_deref(),
        Some("conditions look like `outcome=success`, `context.tests_passed=true && preferred_label!=Skip`")
    );
    assert!(checked.workflow.edges().all(|e| e.edge.condition().is_none()));
}

/// Condition expressions on edges parse without errors: the error points inside the condition also when the
/// attribute is written as a DOT concatenation `"..." + "..."`
#[test]
fn condition_error_position_in_concatenated_string() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    start -> exit [condition="context.ready=true && " +
                             "outcome=sucess"]
    start -> exit
}"#,
    );
    assert_eq!(summary(&checked), [("condition_syntax", Severity::Error, None)]);
    let d = only(&checked, "condition_syntax");
    assert!(d.message.ends_with("(column 31 of the condition)"), "{}", d.message);
    // `s` of `sucess`, inside the second string
    assert_eq!(position(&checked, d), Some((5, 39)));
}

/// All edges reference valid node IDs: a node named by an edge before its declaration is fine
#[test]
fn edges_may_name_nodes_declared_later() {
    let checked = load(
        r#"digraph G {
    start -> plan -> exit
    start [shape=Mdiamond]
    plan [prompt="Plan"]
    exit [shape=Msquare]
}"#,
    );
    assert_eq!(summary(&checked), []);
    let plan = checked.workflow.node("plan").unwrap();
    assert!(plan.declared);
    let location = checked.workflow.source().location(plan.span.start);
    assert_eq!((location.line, location.column), (4, 5));
}

/// `validate_or_raise()` throws on error-severity violations: `CheckedWorkflow::into_valid()` is
/// `Err` with every diagnostic when any is an error, `Ok` with the warnings otherwise
#[test]
fn validate_or_raise_into_valid_rejects_errors_and_keeps_warnings() {
    let invalid = load(
        r#"digraph G {
    plan [label="Plan"]
    exit [shape=Msquare]
    plan -> exit
}"#,
    );
    assert!(invalid.has_errors());
    let error = invalid.into_valid().expect_err("a workflow without start must not be valid");
    assert_eq!(error.to_string(), "the workflow has 1 validation error(s)");
    let rules: Vec<(&str, Severity)> =
        error.diagnostics.iter().map(|d| (d.rule.as_str(), d.severity)).collect();
    assert_eq!(rules, [("start_node", Severity::Error), ("prompt_on_llm_nodes", Severity::Warning)]);
    assert_eq!(error.file.path(), std::path::Path::new("x.dot"));

    let warned = load(
        r#"digraph G {
    start [shape=Mdiamond]
    plan [label="Plan"]
    exit [shape=Msquare]
    start -> plan -> exit
}"#,
    );
    assert!(!warned.has_errors());
    let valid = warned.into_valid().expect("warnings do not make a workflow invalid");
    let rules: Vec<(&str, Option<&str>)> =
        valid.warnings.iter().map(|d| (d.rule.as_str(), d.node_id.as_deref())).collect();
    assert_eq!(rules, [("prompt_on_llm_nodes", Some("plan"))]);
    assert_eq!(valid.workflow.node_count(), 3);
}

/// Lint results include rule name, severity (error/warning), node/edge ID, and message (fabro adds
/// the position and a fix)
#[test]
fn lint_results_include_rule_severity_ids_message_position_and_fix() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    plan [prompt="Plan", max_retries=lots]
    exit [shape=Msquare]
    start -> plan -> exit
    exit -> plan
}"#,
    );
    let by_node = only(&checked, "attribute_type");
    assert_eq!(by_node.severity, Severity::Error);
    assert_eq!(by_node.node_id.as_deref(), Some("plan"));
    assert_eq!(by_node.edge, None);
    assert_eq!(by_node.message, "`max_retries` is `lots`, expected a whole number (0 or more)");
    assert_eq!(by_node.fix.as_deref(), Some("write a whole number (0 or more)"));
    assert_eq!(position(&checked, by_node), Some((3, 38)));

    let by_edge = only(&checked, "exit_no_outgoing");
    assert_eq!(by_edge.severity, Severity::Error);
    assert_eq!(by_edge.node_id, None);
    assert_eq!(by_edge.edge, edge("exit", "plan"));
    assert_eq!(position(&checked, by_edge), Some((6, 5)));
    assert_eq!(by_edge.fix.as_deref(), Some("remove the edge: the run ends at the exit node"));
    assert_eq!(Severity::Error.as_str(), "error");
    assert_eq!(Severity::Warning.as_str(), "warning");
}

/// Fabro rule `attribute_type`: values that cannot be read as the attribute's type are errors
#[test]
fn rule_attribute_type() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    plan [prompt="Plan", timeout=900, goal_gate=yes, retry_target=start]
    exit [shape=Msquare]
    start -> plan
    plan -> exit [weight=heavy]
}"#,
    );
    let found: Vec<Finding> = checked
        .diagnostics
        .iter()
        .map(|d| (d.rule.as_str(), d.severity, d.node_id.as_deref(), d.message.as_str(), d.fix.as_deref()))
        .collect();
    assert_eq!(
        found,
        [
            // Another dialect's bare seconds: read, with a warning.
            (
                "dialect_value",
                Severity::Warning,
                Some("plan"),
                "`timeout=900` reads as 900s (bare numbers are seconds)",
                Some("write `timeout=900s`")
            ),
            (
                "attribute_type",
                Severity::Error,
                Some("plan"),
                "`goal_gate` is `yes`, expected true or false",
                Some("write true or false")
            ),
            (
                "attribute_type",
                Severity::Error,
                None,
                "`weight` is `heavy`, expected an integer",
                Some("write an integer")
            ),
        ]
    );
    assert_eq!(checked.diagnostics[2].edge, edge("plan", "exit"));
    assert_eq!(position(&checked, &checked.diagnostics[0]), Some((3, 34)));

    // A stage's backend is checked when the file is validated, not when the run reaches it.
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    plan [prompt="Plan", backend="clu"]
    exit [shape=Msquare]
    start -> plan -> exit
}"#,
    );
    let finding = only(&checked, "attribute_type");
    assert_eq!(finding.message, "`backend` is `clu`, expected one of api, cli");
    assert_eq!(finding.fix.as_deref(), Some("write one of api, cli"));
    assert_eq!(position(&checked, finding), Some((3, 34)));
}

/// Fabro rule `unknown_attribute`: a misspelling within edit distance 2 gets a "did you mean", an
/// attribute in the wrong scope (e.g. `condition` on a node) is reported, other unknown
/// attributes are kept silently for custom handlers
#[test]
fn rule_unknown_attribute() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    plan [prompt="Plan", max_retires=2, condition="outcome=success", my_custom_setting=1]
    exit [shape=Msquare]
    start -> plan -> exit [fidelity=full]
}"#,
    );
    let found: Vec<Finding> = checked
        .diagnostics
        .iter()
        .map(|d| (d.rule.as_str(), d.severity, d.node_id.as_deref(), d.message.as_str(), d.fix.as_deref()))
        .collect();
    assert_eq!(
        found,
        [
            (
                "unknown_attribute",
                Severity::Error,
                Some("plan"),
                "unknown attribute `max_retires` (did you mean `max_retries`?)",
                Some("rename it to `max_retries`; unknown attributes are kept only for custom handlers"),
            ),
            (
                "unknown_attribute",
                Severity::Warning,
                Some("plan"),
                "`condition` applies to edges, not nodes; here it has no effect",
                Some("move `condition` to the edges it belongs to"),
            ),
        ]
    );
    assert_eq!(position(&checked, &checked.diagnostics[0]), Some((3, 26)));
    assert_eq!(position(&checked, &checked.diagnostics[1]), Some((3, 41)));
}

/// Fabro rule `type_known`: an explicit `type` must name a known handler, and a shape without a
/// handler is reported; `Loader::with_handler_type` registers custom types
#[test]
fn rule_type_known() {
    let text = r#"digraph G {
    start [shape=Mdiamond]
    a [type="codergn", prompt="A"]
    b [shape=ellipse, prompt="B"]
    c [type="my_handler"]
    exit [shape=Msquare]
    start -> a -> b -> c -> exit
}"#;
    let checked = load(text);
    let found: Vec<Finding> = checked
        .diagnostics
        .iter()
        .map(|d| (d.rule.as_str(), d.severity, d.node_id.as_deref(), d.message.as_str(), d.fix.as_deref()))
        .collect();
    assert_eq!(
        found,
        [
            (
                "type_known",
                Severity::Warning,
                Some("a"),
                "no handler is registered for type `codergn`",
                Some("did you mean `codergen`?")
            ),
            (
                "type_known",
                Severity::Warning,
                Some("b"),
                "shape `ellipse` has no handler; the node runs as an agent stage",
                Some("use a shape with a handler (box, tab, hexagon, diamond, ...) or set `type`"),
            ),
            (
                "type_known",
                Severity::Warning,
                Some("c"),
                "no handler is registered for type `my_handler`",
                Some("use a built-in type or register a handler for it"),
            ),
        ]
    );
    assert_eq!(position(&checked, &checked.diagnostics[0]), Some((3, 13)));
    let registered = load_with(&Loader::new().with_handler_type("my_handler"), text);
    let nodes: Vec<Option<&str>> = registered.diagnostics.iter().map(|d| d.node_id.as_deref()).collect();
    assert_eq!(nodes, [Some("a"), Some("b")]);
}

/// Fabro rule `fidelity_valid`: unknown fidelity names are warnings
#[test]
fn rule_fidelity_valid() {
    let checked = load(
        r#"digraph G {
    default_fidelity = "summary:hgh"
    start [shape=Mdiamond]
    plan [prompt="Plan", fidelity=ful]
    exit [shape=Msquare]
    start -> plan -> exit
}"#,
    );
    let found: Vec<Finding> = checked
        .diagnostics
        .iter()
        .map(|d| (d.rule.as_str(), d.severity, d.node_id.as_deref(), d.message.as_str(), d.fix.as_deref()))
        .collect();
    assert_eq!(
        found,
        [
            (
                "fidelity_valid",
                Severity::Warning,
                None,
                "graph: unknown fidelity `summary:hgh`; compact is used instead",
                Some("did you mean `summary:high`?"),
            ),
            (
                "fidelity_valid",
                Severity::Warning,
                Some("plan"),
                "unknown fidelity `ful`; compact is used instead",
                Some("did you mean `full`?"),
            ),
        ]
    );
    assert_eq!(position(&checked, &checked.diagnostics[1]), Some((4, 35)));
}

/// Fabro rule `retry_target_exists`: retry targets must name nodes
#[test]
fn rule_retry_target_exists() {
    let checked = load(
        r#"digraph G {
    fallback_retry_target = nowhere
    start [shape=Mdiamond]
    fix [prompt="Fix"]
    check [prompt="Check", retry_target=fixx]
    exit [shape=Msquare]
    start -> fix -> check -> exit
}"#,
    );
    let found: Vec<Finding> = checked
        .diagnostics
        .iter()
        .map(|d| (d.rule.as_str(), d.severity, d.node_id.as_deref(), d.message.as_str(), d.fix.as_deref()))
        .collect();
    assert_eq!(
        found,
        [
            (
                "retry_target_exists",
                Severity::Warning,
                None,
                "graph: `fallback_retry_target` names `nowhere`, which is not a node",
                Some("name an existing node"),
            ),
            (
                "retry_target_exists",
                Severity::Warning,
                Some("check"),
                "`retry_target` names `fixx`, which is not a node",
                Some("did you mean `fix`?"),
            ),
        ]
    );
    assert_eq!(position(&checked, &checked.diagnostics[1]), Some((5, 41)));
}

/// Fabro rule `goal_gate_has_retry`: a goal gate without a retry target (on the node or the graph)
/// is a warning
#[test]
fn rule_goal_gate_has_retry() {
    let body = r#"
    start [shape=Mdiamond]
    fix [prompt="Fix"]
    check [prompt="Check", goal_gate=true]
    exit [shape=Msquare]
    start -> fix -> check -> exit
}"#;
    let checked = load(&format!("digraph G {{{body}"));
    assert_eq!(summary(&checked), [("goal_gate_has_retry", Severity::Warning, Some("check"))]);
    let d = only(&checked, "goal_gate_has_retry");
    assert_eq!(
        d.message,
        "goal gate `check` has no retry target; if it has not succeeded at exit the run fails"
    );
    assert_eq!(position(&checked, d), Some((4, 5)));
    let with_graph_target = load(&format!("digraph G {{\n    retry_target=fix{body}"));
    assert_eq!(summary(&with_graph_target), []);
}

/// Fabro rule `command_has_script`: command stages (parallelogram) need a script
#[test]
fn rule_command_has_script() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    build [shape=parallelogram]
    test [shape=parallelogram, tool_command="cargo test"]
    lint [type=command, script="cargo clippy"]
    exit [shape=Msquare]
    start -> build -> test -> lint -> exit
}"#,
    );
    assert_eq!(
        summary(&checked),
        [
            ("command_has_script", Severity::Error, Some("build")),
            ("failure_path", Severity::Warning, Some("build"))
        ]
    );
    let d = only(&checked, "command_has_script");
    assert_eq!(d.message, "command stage `build` has no script");
    assert_eq!(d.fix.as_deref(), Some("add `script=\"...\"` to `build`"));
    assert_eq!(position(&checked, d), Some((3, 5)));
    assert_eq!(checked.workflow.node("test").unwrap().attributes.text("script"), Some("cargo test"));
}

/// Fabro rule `wait_has_duration`: wait stages (insulator) need a duration
#[test]
fn rule_wait_has_duration() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    pause [shape=insulator]
    cool_down [shape=insulator, duration=30s]
    exit [shape=Msquare]
    start -> pause -> cool_down -> exit
}"#,
    );
    assert_eq!(summary(&checked), [("wait_has_duration", Severity::Error, Some("pause"))]);
    let d = only(&checked, "wait_has_duration");
    assert_eq!(d.message, "wait stage `pause` has no duration");
    assert_eq!(position(&checked, d), Some((3, 5)));
}

/// Fabro rule `human_gate_has_choices`: human gates (hexagon) need outgoing edges, and a
/// `human.default_choice` must name one of them
#[test]
fn rule_human_gate_has_choices() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    approve [shape=hexagon, human.default_choice="Ship"]
    stuck [shape=hexagon]
    exit [shape=Msquare]
    start -> approve
    approve -> exit [label="[A] Approve"]
    approve -> stuck [label="[R] Reject"]
}"#,
    );
    let found: Vec<(&str, Severity, Option<&str>, &str)> = checked
        .diagnostics
        .iter()
        .map(|d| (d.rule.as_str(), d.severity, d.node_id.as_deref(), d.message.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (
                "human_gate_has_choices",
                Severity::Error,
                Some("approve"),
                "default choice `Ship` names none of the gate's choices (key, label or target)",
            ),
            (
                "human_gate_has_choices",
                Severity::Error,
                Some("stuck"),
                "human gate `stuck` has no outgoing edges to choose from",
            ),
        ]
    );
    assert_eq!(position(&checked, &checked.diagnostics[0]), Some((3, 50)));
    assert_eq!(position(&checked, &checked.diagnostics[1]), Some((4, 5)));
}

/// Fabro rule `all_conditional_edges`: a node whose every outgoing edge is conditional warns
#[test]
fn rule_all_conditional_edges() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    test [prompt="Test"]
    fix [prompt="Fix"]
    exit [shape=Msquare]
    start -> test
    test -> exit [condition="outcome=success"]
    test -> fix [condition="outcome=fail"]
    fix -> test [condition="outcome=success"]
    fix -> exit
}"#,
    );
    assert_eq!(summary(&checked), [("all_conditional_edges", Severity::Warning, Some("test"))]);
    let d = only(&checked, "all_conditional_edges");
    assert_eq!(d.message, "every edge out of `test` has a condition; when none is true the run fails");
    assert_eq!(d.fix.as_deref(), Some("add an unconditional edge from `test` as the fallback"));
}

/// Fabro rule `thread_id_without_full_fidelity`: a thread id only matters under full fidelity
#[test]
fn rule_thread_id_without_full_fidelity() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    a [prompt="A", thread_id=main]
    b [prompt="B", thread_id=main, fidelity=full]
    c [prompt="C"]
    exit [shape=Msquare]
    start -> a -> b -> c
    c -> exit [thread_id=side]
}"#,
    );
    let found: Vec<EdgeFinding> = checked
        .diagnostics
        .iter()
        .map(|d| (d.rule.as_str(), d.severity, d.node_id.as_deref(), d.edge.clone(), d.message.as_str()))
        .collect();
    assert_eq!(
        found,
        [
            (
                "thread_id_without_full_fidelity",
                Severity::Warning,
                Some("a"),
                None,
                "node `a` sets thread_id but is entered with fidelity compact; threads are only kept under full fidelity",
            ),
            (
                "thread_id_without_full_fidelity",
                Severity::Warning,
                None,
                edge("c", "exit"),
                "edge `c -> exit` sets thread_id but the target's fidelity is compact",
            ),
        ]
    );
}

/// Fabro rule `parallel_without_fan_in`: the branches of a parallel stage should meet at a fan-in
#[test]
fn rule_parallel_without_fan_in() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    split [shape=component]
    a [prompt="A"]
    b [prompt="B"]
    split2 [shape=component]
    c [prompt="C"]
    d [prompt="D"]
    join [shape=tripleoctagon]
    exit [shape=Msquare]
    start -> split
    split -> a -> exit
    split -> b -> exit
    start -> split2
    split2 -> c -> join
    split2 -> d -> join
    join -> exit
}"#,
    );
    let parallel: Vec<(&str, Severity, Option<&str>, &str)> = checked
        .diagnostics
        .iter()
        .filter(|d| d.rule == "parallel_without_fan_in")
        .map(|d| (d.rule.as_str(), d.severity, d.node_id.as_deref(), d.message.as_str()))
        .collect();
    assert_eq!(
        parallel,
        [(
            "parallel_without_fan_in",
            Severity::Warning,
            Some("split"),
            "the branches of parallel stage `split` never meet at a fan-in (tripleoctagon) node; they join at \
             `exit`, where the best branch's changes are merged without a fan-in stage",
        )]
    );
    let d = only(&checked, "parallel_without_fan_in");
    assert_eq!(
        d.fix.as_deref(),
        Some("add `join [shape=tripleoctagon]` and an edge from the end of every branch to it")
    );
    assert_eq!(position(&checked, d), Some((3, 5)));
}

/// Fabro rule `parallel_join_settings`: `join_policy=k_of_n` needs `join_k`, `quorum` needs a
/// `join_quorum` in (0, 1]
#[test]
fn rule_parallel_join_settings() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    split [shape=component, join_policy=k_of_n]
    vote [shape=component, join_policy=quorum, join_quorum=1.5]
    ok [shape=component, join_policy=k_of_n, join_k=1]
    a [prompt="A"]
    join [shape=tripleoctagon]
    exit [shape=Msquare]
    start -> split -> a -> join
    start -> vote -> a
    start -> ok -> a
    join -> exit
}"#,
    );
    let found: Vec<Finding> = checked
        .diagnostics
        .iter()
        .map(|d| (d.rule.as_str(), d.severity, d.node_id.as_deref(), d.message.as_str(), d.fix.as_deref()))
        .collect();
    assert_eq!(
        found,
        [
            (
                "parallel_join_settings",
                Severity::Error,
                Some("split"),
                "join_policy=k_of_n needs `join_k` of 1 or more",
                Some("add `join_k=2` (or another count)"),
            ),
            (
                "parallel_join_settings",
                Severity::Error,
                Some("vote"),
                "join_policy=quorum needs `join_quorum` above 0 and at most 1",
                Some("add `join_quorum=0.5`"),
            ),
        ]
    );
    assert_eq!(position(&checked, &checked.diagnostics[0]), Some((3, 41)));
}

/// Fabro rule `node_id_syntax`: node ids must be plain identifiers; a quoted id such as
/// `"my node"` is an error
#[test]
fn rule_node_id_syntax() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    "my node" [prompt="Work"]
    "plain" [prompt="Quoted but plain"]
    exit [shape=Msquare]
    start -> "my node" -> plain -> exit
}"#,
    );
    assert_eq!(summary(&checked), [("node_id_syntax", Severity::Error, Some("my node"))]);
    let d = only(&checked, "node_id_syntax");
    assert_eq!(d.message, "node id `my node` is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*)");
    assert_eq!(d.fix.as_deref(), Some("use an id such as `my_node` and put the text in `label`"));
    assert_eq!(position(&checked, d), Some((3, 5)));
    assert!(checked.workflow.node("plain").is_some());
}

/// Fabro rule `stylesheet_syntax`: a stylesheet that does not parse is an error pointing inside the
/// stylesheet string
#[test]
fn rule_stylesheet_syntax_error() {
    let broken = load(
        r#"digraph G {
    model_stylesheet = "
        * { llm_model: claude-sonnet-4-5 }
        box { llm_modle: claude-opus-4-6 }
    "
    start [shape=Mdiamond]
    exit [shape=Msquare]
    start -> exit
}"#,
    );
    assert_eq!(summary(&broken), [("stylesheet_syntax", Severity::Error, None)]);
    let d = only(&broken, "stylesheet_syntax");
    assert_eq!(
        d.message,
        "model_stylesheet: unknown property `llm_modle` (did you mean `llm_model`?); expected llm_model, \
         llm_provider, reasoning_effort, backend or image"
    );
    assert_eq!(position(&broken, d), Some((4, 15)));
    assert!(broken.into_valid().is_err());
}

/// Fabro rule `stylesheet_syntax`: a `#id` selector naming no node is a warning
#[test]
fn rule_stylesheet_syntax_unmatched_id() {
    let unmatched = load(
        r##"digraph G {
    model_stylesheet = "#reveiw { reasoning_effort: high }"
    start [shape=Mdiamond]
    review [prompt="Review"]
    exit [shape=Msquare]
    start -> review -> exit
}"##,
    );
    assert_eq!(summary(&unmatched), [("stylesheet_syntax", Severity::Warning, None)]);
    let d = only(&unmatched, "stylesheet_syntax");
    assert_eq!(d.message, "model_stylesheet: `#reveiw` matches no node");
    assert_eq!(d.fix.as_deref(), Some("did you mean `#review`?"));
    assert_eq!(position(&unmatched, d), Some((2, 25)));
}

/// Fabro rule `prompt_file`: `prompt="@file"` naming a missing file is an error
#[test]
fn rule_prompt_file_missing() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("workflow.dot");
    std::fs::write(
        &path,
        r#"digraph G {
    start [shape=Mdiamond]
    plan [prompt="@prompts/missing.md"]
    exit [shape=Msquare]
    start -> plan -> exit
}"#,
    )
    .unwrap();
    let checked = Loader::new().load_file(&path).unwrap();
    assert_eq!(summary(&checked), [("prompt_file", Severity::Error, Some("plan"))]);
    let d = only(&checked, "prompt_file");
    let missing = dir.path().join("prompts/missing.md");
    assert!(
        d.message.starts_with(&format!("cannot read prompt file `{}`: ", missing.display())),
        "{}",
        d.message
    );
    assert_eq!(
        d.fix.as_deref(),
        Some(
            format!("create `{}` or fix the path (it is relative to the workflow file)", missing.display())
                .as_str()
        )
    );
    assert_eq!(position(&checked, d), Some((3, 18)));
}

/// A rule that forbids nodes named `todo`.
struct NoTodoNodes;

impl Rule for NoTodoNodes {
    fn id(&self) -> &str {
        "no_todo_nodes"
    }

    fn check(&self, workflow: &Workflow, diagnostics: &mut Vec<Diagnostic>) {
        for node in workflow.nodes().filter(|n| n.id == "todo") {
            diagnostics.push(
                Diagnostic::error(self.id(), "`todo` is not a stage")
                    .node(&node.id)
                    .span(node.span)
                    .fix("finish the workflow"),
            );
        }
    }
}

/// Custom lint rules registered with `Loader::new().with_rule(..)` run with the built-in rules
#[test]
fn custom_rule_registered_with_loader_runs() {
    let text = r#"digraph G {
    start [shape=Mdiamond]
    todo [prompt="Later"]
    exit [shape=Msquare]
    start -> todo -> exit
}"#;
    assert_eq!(summary(&load(text)), []);
    let checked = load_with(&Loader::new().with_rule(NoTodoNodes), text);
    assert_eq!(summary(&checked), [("no_todo_nodes", Severity::Error, Some("todo"))]);
    let d = only(&checked, "no_todo_nodes");
    assert_eq!(d.message, "`todo` is not a stage");
    assert_eq!(position(&checked, d), Some((3, 5)));
    assert!(checked.into_valid().is_err());
}

/// Lint results include rule name, severity, node/edge ID and message — through `fabro validate
/// --json`, with line, column and fix
#[test]
fn binary_json_lists_lint_results() {
    let ran = Test::new()
        .workflow(
            r#"digraph G {
    start [shape=Mdiamond]
    plan [label="Plan"]
    exit [shape=Msquare]
    orphan [prompt="x"]
    start -> plan -> exit
    exit -> plan
}
"#,
        )
        .args(["validate", "--json", "workflow.dot"])
        .status(2)
        .run();
    assert_eq!(
        ran.json(),
        json!({
            "valid": false,
            "diagnostics": [
                {
                    "rule": "prompt_on_llm_nodes",
                    "severity": "warning",
                    "message": "agent stage `plan` has no prompt; its label \"Plan\" is sent instead",
                    "node_id": "plan",
                    "edge": null,
                    "line": 3,
                    "column": 5,
                    "fix": "add `prompt=\"...\"` to `plan`",
                },
                {
                    "rule": "reachability",
                    "severity": "warning",
                    "message": "node `orphan` cannot be reached from the start node",
                    "node_id": "orphan",
                    "edge": null,
                    "line": 5,
                    "column": 5,
                    "fix": "add an edge into `orphan` or remove it",
                },
                {
                    "rule": "exit_no_outgoing",
                    "severity": "error",
                    "message": "the exit node `exit` has an outgoing edge",
                    "node_id": null,
                    "edge": ["exit", "plan"],
                    "line": 7,
                    "column": 5,
                    "fix": "remove the edge: the run ends at the exit node",
                },
            ]
        })
    );
}

/// Exactly one start node is required — through `fabro validate` (text output, exit status 2)
#[test]
fn binary_text_reports_missing_start_and_summary() {
    let ran = Test::new()
        .workflow("digraph G {\n    plan [prompt=\"Plan\"]\n    exit [shape=Msquare]\n    plan -> exit\n}\n")
        .args(["validate", "workflow.dot"])
        .status(2)
        .stdout_contains("error[start_node] workflow.dot: the workflow has no start node\n")
        .stdout_contains("   = fix: add `start [shape=Mdiamond]` (a node with id `start` also counts)\n")
        .stdout_contains("workflow.dot: invalid: 1 error, 0 warnings")
        .run();
    assert_eq!(ran.stderr(), "");
    Test::new()
        .workflow(
            "digraph G {\n    start\n    plan [label=\"Plan\"]\n    exit\n    start -> plan -> exit\n}\n",
        )
        .args(["validate", "workflow.dot"])
        .status(0)
        .stdout_contains(
            "warning[prompt_on_llm_nodes] workflow.dot:3:5 node plan: agent stage `plan` has no prompt; \
             its label \"Plan\" is sent instead\n  |\n3 |     plan [label=\"Plan\"]\n  |     ^^^^\n",
        )
        .stdout_contains("workflow.dot: valid (1 warning)")
        .run();
}

/// fabro: a human gate's default choice may name a choice by accelerator key, by its label with or
/// without the accelerator, or by target id.
#[test]
fn human_default_choice_matches_key_label_or_target() {
    for default in ["S", "Skip", "[S] Skip", "exit"] {
        let source = format!(
            r#"digraph G {{
                start [shape=Mdiamond]
                exit [shape=Msquare]
                gate [shape=hexagon, human.default_choice="{default}"]
                ship [prompt="Ship it"]
                start -> gate
                gate -> ship [label="[A] Approve"]
                gate -> exit [label="[S] Skip"]
                ship -> exit
            }}"#
        );
        let checked =
            fabro::Loader::new().load_source(fabro::source::SourceFile::new("g.dot", source)).unwrap();
        let rules: Vec<&str> = checked.diagnostics.iter().map(|d| d.rule.as_str()).collect();
        assert!(!rules.contains(&"human_gate_has_choices"), "{default}: {rules:?}");
    }
}
