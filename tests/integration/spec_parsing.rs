//! Attractor spec 11.1 (DOT parsing), one test per checklist item, plus fabro's extras.

use crate::common;

use std::time::Duration;

use common::Test;
use fabro::graph::{HandlerType, Value};
use fabro::source::SourceFile;
use fabro::syntax::SyntaxErrorKind;
use fabro::{CheckedWorkflow, LoadError, Loader, Severity};

fn load(text: &str) -> CheckedWorkflow {
    Loader::new().load_source(SourceFile::new("x.dot", text)).unwrap_or_else(|e| panic!("load failed: {e}"))
}

fn syntax_error(text: &str) -> (SyntaxErrorKind, usize, usize) {
    match Loader::new().load_source(SourceFile::new("x.dot", text)) {
        Err(LoadError::Syntax { error, file }) => {
            let location = file.location(error.span.start);
            (error.kind, location.line, location.column)
        }
        Err(other) => panic!("unexpected load error: {other}"),
        Ok(checked) => panic!("parsed, but should not: {:?}", checked.workflow.name()),
    }
}

/// `(rule, severity, node)` of every diagnostic, in order.
fn summary(checked: &CheckedWorkflow) -> Vec<(String, Severity, Option<String>)> {
    checked.diagnostics.iter().map(|d| (d.rule.clone(), d.severity, d.node_id.clone())).collect()
}

/// `(from, to)` of every edge, in declaration order.
fn edge_pairs(checked: &CheckedWorkflow) -> Vec<(String, String)> {
    checked.workflow.edges().map(|e| (e.from.id.clone(), e.to.id.clone())).collect()
}

/// Parser accepts the supported DOT subset (digraph with graph/node/edge attribute blocks)
#[test]
fn parser_accepts_supported_dot_subset() {
    let checked = load(
        r#"digraph Pipeline {
    graph [goal="Ship it", rankdir=LR]
    node [shape=box, timeout="60s"]
    edge [weight=1]
    start [shape=Mdiamond]
    plan [prompt="Plan the work"]
    exit [shape=Msquare]
    start -> plan -> exit
}"#,
    );
    assert_eq!(summary(&checked), vec![]);
    let workflow = &checked.workflow;
    assert_eq!(workflow.name(), "Pipeline");
    assert_eq!(workflow.node_count(), 3);
    assert_eq!(workflow.edge_count(), 2);
    assert_eq!(workflow.goal(), "Ship it");
    assert_eq!(workflow.attributes().text("rankdir"), Some("LR"));
    assert_eq!(workflow.node("start").unwrap().handler_type(), HandlerType::Start);
    assert_eq!(workflow.node("plan").unwrap().handler_type(), HandlerType::Agent);
    assert_eq!(workflow.node("exit").unwrap().handler_type(), HandlerType::Exit);
    assert_eq!(workflow.node("plan").unwrap().attributes.duration("timeout"), Some(Duration::from_secs(60)));
    assert_eq!(edge_pairs(&checked), [("start".into(), "plan".into()), ("plan".into(), "exit".into())]);
    assert!(workflow.edges().all(|e| e.edge.weight() == 1));
}

/// Parser accepts the supported DOT subset: constructs outside it (undirected graphs and edges,
/// `strict`, HTML labels) are rejected with a position.
#[test]
fn parser_rejects_constructs_outside_the_subset() {
    assert_eq!(syntax_error("graph G { a }"), (SyntaxErrorKind::UndirectedGraph, 1, 1));
    assert_eq!(syntax_error("strict digraph G { a }"), (SyntaxErrorKind::StrictGraph, 1, 1));
    assert_eq!(syntax_error("digraph G {\n  a -- b\n}"), (SyntaxErrorKind::UndirectedEdge, 2, 5));
    assert_eq!(syntax_error("digraph G {\n  a [label=<<b>x</b>>]\n}"), (SyntaxErrorKind::HtmlLabel, 2, 12));
    let (kind, line, column) = syntax_error("digraph G {\n  a -> \n}");
    assert_eq!((line, column), (3, 1));
    assert_eq!(kind.to_string(), "expected a node id after `->`, found `}`");
}

/// Graph-level attributes (`goal`, `label`, `model_stylesheet`) are extracted correctly
#[test]
fn graph_level_attributes_goal_label_model_stylesheet_extracted() {
    let checked = load(
        r#"digraph G {
    goal = "Fix the flaky test"
    graph [label="Nightly fixer"]
    model_stylesheet = "* { llm_model: claude-sonnet-4-5 }"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    start -> exit
}"#,
    );
    let workflow = &checked.workflow;
    assert_eq!(workflow.goal(), "Fix the flaky test");
    assert_eq!(workflow.attributes().text("goal"), Some("Fix the flaky test"));
    assert_eq!(workflow.attributes().text("label"), Some("Nightly fixer"));
    assert_eq!(workflow.attributes().text("model_stylesheet"), Some("* { llm_model: claude-sonnet-4-5 }"));
    let stylesheet = workflow.stylesheet().expect("stylesheet parsed").as_ref().expect("no stylesheet error");
    assert_eq!(stylesheet.resolve("x", "box", &[]).llm_model, Some("claude-sonnet-4-5"));
    // graph attributes are not node attributes
    assert_eq!(workflow.node("start").unwrap().attributes.text("goal"), None);
    assert_eq!(summary(&checked), vec![]);
}

/// Node attributes are parsed including multi-line attribute blocks (attributes spanning multiple
/// lines within `[...]`)
#[test]
fn node_attributes_parsed_including_multi_line_blocks() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    review [
        shape=box,
        label="Review",
        prompt="Look at the diff.
Then report.",
        max_retries=2
        goal_gate=true;
        retry_target=start
        timeout="15m"
    ]
    exit [shape=Msquare]
    start -> review -> exit
}"#,
    );
    let review = checked.workflow.node("review").expect("review");
    let attributes = &review.attributes;
    assert_eq!(attributes.text("shape"), Some("box"));
    assert_eq!(review.label(), "Review");
    assert_eq!(review.prompt(), Some("Look at the diff.\nThen report."));
    assert_eq!(attributes.integer("max_retries"), Some(2));
    assert_eq!(attributes.boolean("goal_gate"), Some(true));
    assert_eq!(attributes.text("retry_target"), Some("start"));
    assert_eq!(attributes.duration("timeout"), Some(Duration::from_secs(900)));
    assert_eq!(attributes.len(), 7);
    let location = checked.workflow.source().location(review.span.start);
    assert_eq!((location.line, location.column), (3, 5));
    assert_eq!(summary(&checked), vec![]);
}

/// Edge attributes (`label`, `condition`, `weight`) are parsed correctly
#[test]
fn edge_attributes_label_condition_weight_parsed() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    gate [shape=diamond]
    start -> gate
    gate -> exit [label="Done", condition="outcome=success", weight=5]
    gate -> start [label="Again", weight="-2"]
}"#,
    );
    let edges: Vec<_> = checked.workflow.edges().collect();
    assert_eq!(edges.len(), 3);
    let done = edges[1].edge;
    assert_eq!((edges[1].from.id.as_str(), edges[1].to.id.as_str()), ("gate", "exit"));
    assert_eq!(done.label(), Some("Done"));
    assert_eq!(done.weight(), 5);
    assert_eq!(done.attributes.integer("weight"), Some(5));
    assert_eq!(done.condition().map(|c| c.text()), Some("outcome=success"));
    assert!(done.is_conditional());
    let again = edges[2].edge;
    assert_eq!(again.label(), Some("Again"));
    assert_eq!(again.weight(), -2);
    assert_eq!(again.condition().map(|c| c.text()), None);
    assert!(edges[0].edge.label().is_none());
    assert_eq!(edges[0].edge.weight(), 0);
}

/// Chained edges (`A -> B -> C`) produce individual edges for each pair (the attributes apply to every
/// hop)
#[test]
fn chained_edges_produce_individual_edges_for_each_pair() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    a [prompt="A"]
    b [prompt="B"]
    exit [shape=Msquare]
    start -> a -> b -> exit [label="next", weight=3]
}"#,
    );
    assert_eq!(
        edge_pairs(&checked),
        [
            ("start".to_string(), "a".to_string()),
            ("a".to_string(), "b".to_string()),
            ("b".to_string(), "exit".to_string())
        ]
    );
    for edge in checked.workflow.edges() {
        assert_eq!(edge.edge.label(), Some("next"), "{} -> {}", edge.from.id, edge.to.id);
        assert_eq!(edge.edge.weight(), 3, "{} -> {}", edge.from.id, edge.to.id);
    }
    let workflow = &checked.workflow;
    let a = workflow.index_of("a").unwrap();
    let outgoing: Vec<&str> = workflow.outgoing(a).iter().map(|e| e.to.id.as_str()).collect();
    assert_eq!(outgoing, ["b"]);
    let incoming: Vec<&str> = workflow.incoming(a).iter().map(|e| e.from.id.as_str()).collect();
    assert_eq!(incoming, ["start"]);
    assert_eq!(summary(&checked), vec![]);
}

/// Node/edge default blocks (`node [...]`, `edge [...]`) apply to subsequent declarations
#[test]
fn node_and_edge_default_blocks_apply_to_subsequent_declarations() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    early [prompt="before the defaults"]
    start -> early
    node [timeout="30s", max_retries=2]
    edge [weight=7, label="default"]
    late [prompt="after the defaults"]
    override [prompt="explicit wins", max_retries=5]
    exit [shape=Msquare]
    early -> late -> override
    override -> exit [label="finish"]
}"#,
    );
    let workflow = &checked.workflow;
    let early = &workflow.node("early").unwrap().attributes;
    assert_eq!(early.duration("timeout"), None);
    assert_eq!(early.integer("max_retries"), None);
    let late = &workflow.node("late").unwrap().attributes;
    assert_eq!(late.duration("timeout"), Some(Duration::from_secs(30)));
    assert_eq!(late.integer("max_retries"), Some(2));
    let over = &workflow.node("override").unwrap().attributes;
    assert_eq!(over.integer("max_retries"), Some(5));
    assert_eq!(over.duration("timeout"), Some(Duration::from_secs(30)));

    let edges: Vec<(String, Option<String>, i64)> = workflow
        .edges()
        .map(|e| (format!("{}->{}", e.from.id, e.to.id), e.edge.label().map(String::from), e.edge.weight()))
        .collect();
    assert_eq!(
        edges,
        [
            ("start->early".to_string(), None, 0),
            ("early->late".to_string(), Some("default".to_string()), 7),
            ("late->override".to_string(), Some("default".to_string()), 7),
            ("override->exit".to_string(), Some("finish".to_string()), 7),
        ]
    );
    assert!(!workflow.edges().next().unwrap().edge.attributes.contains("weight"));
}

/// Subgraph blocks are flattened (contents kept, wrapper removed)
#[test]
fn subgraph_blocks_are_flattened() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    subgraph cluster_loop {
        label = "Fix loop"
        implement [prompt="Implement"]
        test [prompt="Test"]
        implement -> test
        subgraph inner {
            deep [prompt="Nested"]
        }
    }
    start -> implement
    test -> deep -> exit
}"#,
    );
    let workflow = &checked.workflow;
    let ids: Vec<&str> = workflow.nodes().map(|n| n.id.as_str()).collect();
    assert_eq!(ids, ["start", "exit", "implement", "test", "deep"]);
    assert_eq!(
        edge_pairs(&checked),
        [
            ("implement".to_string(), "test".to_string()),
            ("start".to_string(), "implement".to_string()),
            ("test".to_string(), "deep".to_string()),
            ("deep".to_string(), "exit".to_string()),
        ]
    );
    let names: Vec<Option<&str>> = workflow.subgraphs().iter().map(|s| s.name.as_deref()).collect();
    assert_eq!(names, [Some("cluster_loop"), Some("inner")]);
    assert_eq!(workflow.node("deep").unwrap().prompt(), Some("Nested"));
    assert_eq!(summary(&checked), vec![]);
}

/// Subgraph blocks are flattened: `node`/`edge` defaults set inside a subgraph are scoped to it and
/// the outer defaults are restored after it (fabro).
#[test]
fn subgraph_defaults_are_scoped_and_restored_after_the_subgraph() {
    let checked = load(
        r#"digraph G {
    node [timeout="10s"]
    start [shape=Mdiamond]
    subgraph cluster_a {
        node [timeout="99s", max_retries=4]
        edge [weight=9]
        inner [prompt="Inner"]
        inner2 [prompt="Inner 2"]
        inner -> inner2
    }
    after [prompt="After"]
    exit [shape=Msquare]
    start -> inner
    inner2 -> after -> exit
}"#,
    );
    let workflow = &checked.workflow;
    let inner = &workflow.node("inner").unwrap().attributes;
    assert_eq!(inner.duration("timeout"), Some(Duration::from_secs(99)));
    assert_eq!(inner.integer("max_retries"), Some(4));
    let after = &workflow.node("after").unwrap().attributes;
    assert_eq!(after.duration("timeout"), Some(Duration::from_secs(10)));
    assert_eq!(after.integer("max_retries"), None);
    let weights: Vec<(String, i64)> =
        workflow.edges().map(|e| (format!("{}->{}", e.from.id, e.to.id), e.edge.weight())).collect();
    assert_eq!(
        weights,
        [
            ("inner->inner2".to_string(), 9),
            ("start->inner".to_string(), 0),
            ("inner2->after".to_string(), 0),
            ("after->exit".to_string(), 0)
        ]
    );
    assert_eq!(summary(&checked), vec![]);
}

/// Subgraph blocks are flattened: a subgraph `label` derives a class for its nodes
/// (`"Loop A"` -> `loop-a`), after the node's explicit classes (fabro).
#[test]
fn subgraph_label_derives_class() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    subgraph cluster_a {
        label = "Loop A"
        a [prompt="A", class="fast"]
        subgraph cluster_b {
            graph [label="Inner Loop"]
            b [prompt="B"]
        }
    }
    c [prompt="C"]
    start -> a -> b -> c -> exit
}"#,
    );
    let workflow = &checked.workflow;
    assert_eq!(workflow.node("a").unwrap().classes, ["fast", "loop-a"]);
    assert_eq!(workflow.node("b").unwrap().classes, ["inner-loop", "loop-a"]);
    assert!(workflow.node("c").unwrap().classes.is_empty());
    let classes: Vec<Option<&str>> = workflow.subgraphs().iter().map(|s| s.class.as_deref()).collect();
    assert_eq!(classes, [Some("loop-a"), Some("inner-loop")]);
    assert_eq!(fabro::graph::derive_class("Loop A"), "loop-a");
    // the subgraph label is not the graph's label
    assert_eq!(workflow.attributes().text("label"), None);
    assert_eq!(summary(&checked), vec![]);
}

/// Subgraph blocks are flattened: graph attributes set inside a subgraph stay with the subgraph and
/// do not leak into the root graph (fabro warns that they have no effect).
#[test]
fn graph_attributes_inside_subgraph_do_not_leak_into_root() {
    let checked = load(
        r#"digraph G {
    goal = "Root goal"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    subgraph cluster_a {
        goal = "Inner goal"
        graph [default_max_retries=3]
        a [prompt="$goal"]
    }
    start -> a -> exit
}"#,
    );
    let workflow = &checked.workflow;
    assert_eq!(workflow.goal(), "Root goal");
    assert_eq!(workflow.attributes().integer("default_max_retries"), None);
    let subgraph = &workflow.subgraphs()[0];
    assert_eq!(subgraph.attributes.text("goal"), Some("Inner goal"));
    assert_eq!(subgraph.attributes.integer("default_max_retries"), Some(3));
    // `$goal` expands to the root goal
    assert_eq!(workflow.node("a").unwrap().prompt(), Some("Root goal"));
    let warnings: Vec<(&str, &str)> =
        checked.diagnostics.iter().map(|d| (d.rule.as_str(), d.message.as_str())).collect();
    assert_eq!(
        warnings,
        [
            (
                "unknown_attribute",
                "subgraph `cluster_a`: graph attribute `goal` set inside a subgraph applies only there and has no effect"
            ),
            (
                "unknown_attribute",
                "subgraph `cluster_a`: graph attribute `default_max_retries` set inside a subgraph applies only there and has no effect"
            ),
        ]
    );
    assert!(checked.diagnostics.iter().all(|d| d.severity == Severity::Warning));
}

/// `class` attribute on nodes merges in attributes from the stylesheet
#[test]
fn class_attribute_merges_stylesheet_attributes() {
    let checked = load(
        r#"digraph G {
    model_stylesheet = ".fast { llm_model: fast-model; reasoning_effort: low } .deep { llm_provider: openai }"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    a [prompt="A", class="fast"]
    b [prompt="B", class="deep, fast"]
    c [prompt="C"]
    start -> a -> b -> c -> exit
}"#,
    );
    let workflow = &checked.workflow;
    let a = workflow.node("a").unwrap();
    assert_eq!(a.classes, ["fast"]);
    assert_eq!(a.attributes.text("llm_model"), Some("fast-model"));
    assert_eq!(a.attributes.text("reasoning_effort"), Some("low"));
    assert_eq!(a.attributes.text("llm_provider"), None);
    let b = workflow.node("b").unwrap();
    assert_eq!(b.classes, ["deep", "fast"]);
    assert_eq!(b.attributes.text("llm_model"), Some("fast-model"));
    assert_eq!(b.attributes.text("llm_provider"), Some("openai"));
    let c = workflow.node("c").unwrap();
    assert_eq!(c.attributes.text("llm_model"), None);
    assert_eq!(summary(&checked), vec![]);
}

/// Quoted and unquoted attribute values both work: `max_retries=3` and `max_retries="3"` are the
/// integer 3, `goal_gate="true"` is true, `timeout="900s"` and `timeout=900s` are the same duration
#[test]
fn quoted_and_unquoted_attribute_values_both_work() {
    let checked = load(
        r#"digraph G {
    retry_target = start
    start [shape=Mdiamond]
    exit [shape=Msquare]
    a [prompt=do_a, max_retries=3, goal_gate="true", timeout="900s"]
    b [prompt="do b", max_retries="3", goal_gate=true, timeout=900s]
    c [prompt="do c", goal_gate=false, timeout="15m"]
    start -> a -> b -> c -> exit [weight="2"]
}"#,
    );
    let workflow = &checked.workflow;
    let a = &workflow.node("a").unwrap().attributes;
    let b = &workflow.node("b").unwrap().attributes;
    let c = &workflow.node("c").unwrap().attributes;
    assert_eq!(a.integer("max_retries"), Some(3));
    assert_eq!(b.integer("max_retries"), Some(3));
    assert_eq!(a.get("max_retries").unwrap().value, Value::Integer(3));
    assert_eq!(b.get("max_retries").unwrap().value, Value::Integer(3));
    assert_eq!(a.boolean("goal_gate"), Some(true));
    assert_eq!(b.boolean("goal_gate"), Some(true));
    assert_eq!(c.boolean("goal_gate"), Some(false));
    assert_eq!(a.duration("timeout"), Some(Duration::from_secs(900)));
    assert_eq!(b.duration("timeout"), Some(Duration::from_secs(900)));
    assert_eq!(c.duration("timeout"), Some(Duration::from_secs(900)));
    assert_eq!(a.text("prompt"), Some("do_a"));
    assert_eq!(workflow.attributes().text("retry_target"), Some("start"));
    assert!(workflow.edges().all(|e| e.edge.weight() == 2));
    assert_eq!(summary(&checked), vec![]);
}

/// Comments (`//` and `/* */`) are stripped before parsing (fabro also strips `#` lines, as
/// Graphviz does), but not inside strings
#[test]
fn comments_are_stripped_but_not_inside_strings() {
    let checked = load(
        r#"# a preprocessor-style line
digraph G { // line comment
    /* a block
       comment spanning lines: exit -> start */
    start [shape=Mdiamond]
    # a hash comment line: exit -> start
    plan [prompt="keep // this /* and */ # that", /* inline */ label="Plan"]
    // plan -> nowhere
    exit [shape=Msquare]
    start -> plan -> exit
}"#,
    );
    let workflow = &checked.workflow;
    assert_eq!(workflow.node_count(), 3);
    assert_eq!(workflow.edge_count(), 2);
    let plan = workflow.node("plan").unwrap();
    assert_eq!(plan.prompt(), Some("keep // this /* and */ # that"));
    assert_eq!(plan.label(), "Plan");
    assert_eq!(summary(&checked), vec![]);
}

/// Parser accepts the supported DOT subset — through the `fabro validate` binary.
#[test]
fn binary_validates_a_well_formed_workflow() {
    Test::new()
        .workflow(
            r#"digraph Pipeline {
    graph [goal="Ship it"]
    node [shape=box]
    start [shape=Mdiamond]
    plan [
        prompt="Plan $goal",
        max_retries="2"
    ]
    subgraph cluster_loop { label="Loop A"; work [prompt="Work"] }
    exit [shape=Msquare]
    start -> plan -> work -> exit // chained
}
"#,
        )
        .args(["validate", "workflow.dot"])
        .status(0)
        .stdout_contains("workflow.dot: valid (0 warnings)")
        .run();
}

/// Parser accepts the supported DOT subset: a syntax error is reported by the binary with its
/// line and column.
#[test]
fn binary_reports_syntax_errors_with_position() {
    let source = "digraph G {\n  start [shape=Mdiamond]\n  start -> \n}\n";
    let ran = Test::new()
        .workflow(source)
        .args(["validate", "workflow.dot"])
        .status(2)
        .stderr_contains("error[syntax] workflow.dot:4:1: expected a node id after `->`, found `}`")
        .run();
    assert_eq!(ran.stdout(), "");
    let ran = Test::new().workflow(source).args(["validate", "--json", "workflow.dot"]).status(2).run();
    assert_eq!(
        ran.json(),
        serde_json::json!({
            "valid": false,
            "diagnostics": [{
                "rule": "syntax",
                "severity": "error",
                "message": "expected a node id after `->`, found `}`",
                "node_id": null,
                "edge": null,
                "line": 4,
                "column": 1,
                "fix": null,
            }]
        })
    );
}
