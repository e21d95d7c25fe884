//! The example workflows shipped in `workflows/`: every one validates without a single diagnostic,
//! and each required example really shows what it is meant to show.

use crate::common;

use std::collections::HashSet;
use std::path::PathBuf;
use std::time::Duration;

use common::{repo_root, shipped_workflows, Test};
use fabro::graph::{EdgeRef, HandlerType, Node, Workflow};
use fabro::Loader;

const REQUIRED: [&str; 9] = [
    "implement_and_test.dot",
    "parts/test_suite.dot",
    "linear.dot",
    "branch_and_loop.dot",
    "review_gate.dot",
    "parallel_review.dot",
    "multi_model.dot",
    "ci_pipeline.dot",
    "plan_from_files.dot",
];

fn workflow_path(name: &str) -> PathBuf {
    repo_root().join("workflows").join(name)
}

/// Loads a shipped workflow through the library and insists on zero diagnostics.
fn load(name: &str) -> Workflow {
    let path = workflow_path(name);
    let checked =
        Loader::new().load_file(&path).unwrap_or_else(|e| panic!("{} does not load: {e}", path.display()));
    assert!(checked.diagnostics.is_empty(), "{name} has diagnostics: {:#?}", checked.diagnostics);
    checked.workflow
}

fn node<'w>(workflow: &'w Workflow, id: &str) -> &'w Node {
    workflow.node(id).unwrap_or_else(|| panic!("{} has no node `{id}`", workflow.name()))
}

fn outgoing<'w>(workflow: &'w Workflow, id: &str) -> Vec<EdgeRef<'w>> {
    let index = workflow.index_of(id).unwrap_or_else(|| panic!("no node `{id}`"));
    workflow.outgoing(index)
}

fn incoming<'w>(workflow: &'w Workflow, id: &str) -> Vec<EdgeRef<'w>> {
    let index = workflow.index_of(id).unwrap_or_else(|| panic!("no node `{id}`"));
    workflow.incoming(index)
}

fn targets(edges: &[EdgeRef<'_>]) -> Vec<String> {
    edges.iter().map(|e| e.to.id.clone()).collect()
}

fn condition<'e>(edge: &EdgeRef<'e>) -> Option<&'e str> {
    edge.edge.attributes.text("condition")
}

fn text<'w>(workflow: &'w Workflow, id: &str, key: &str) -> Option<&'w str> {
    node(workflow, id).attributes.text(key)
}

/// Every shipped example needs the same frame: one start, one exit, labels, and a header comment
/// telling the reader how to check it.
fn assert_common_shape(name: &str, workflow: &Workflow) {
    let starts: Vec<_> = workflow.nodes().filter(|n| n.handler_type() == HandlerType::Start).collect();
    let exits: Vec<_> = workflow.nodes().filter(|n| n.handler_type() == HandlerType::Exit).collect();
    assert_eq!(starts.len(), 1, "{name}: one start node");
    assert_eq!(exits.len(), 1, "{name}: one exit node");
    assert_eq!(starts[0].shape(), "Mdiamond", "{name}: start is an Mdiamond");
    assert_eq!(exits[0].shape(), "Msquare", "{name}: exit is an Msquare");
    for node in workflow.nodes() {
        assert!(node.attributes.non_empty_text("label").is_some(), "{name}: node `{}` has no label", node.id);
    }
    for node in workflow.nodes().filter(|n| n.handler_type().is_llm()) {
        let prompt = node.prompt().unwrap_or_else(|| panic!("{name}: `{}` has no prompt", node.id));
        assert!(!prompt.contains("$goal"), "{name}: `{}` kept a literal $goal", node.id);
        assert!(
            prompt.split_whitespace().count() >= 12,
            "{name}: `{}` has a toy prompt: {prompt:?}",
            node.id
        );
    }
    let source = workflow.source().text();
    let header: String = source.lines().take_while(|l| !l.trim_start().starts_with("digraph")).collect();
    assert!(
        header.contains(&format!("fabro validate workflows/{name}")),
        "{name}: the header comment should say how to check it"
    );
}

#[test]
fn every_shipped_workflow_validates_without_diagnostics() {
    let files = shipped_workflows();
    assert!(files.len() >= 7, "expected at least 7 shipped workflows, found {files:?}");
    let shipped = repo_root().join("workflows");
    let names: HashSet<String> = files
        .iter()
        .filter_map(|p| p.strip_prefix(&shipped).ok())
        .map(|n| n.to_string_lossy().into_owned())
        .collect();
    for required in REQUIRED {
        assert!(names.contains(required), "workflows/{required} is missing");
    }
    for file in &files {
        let ran = Test::new().args(["validate", "--json", file.to_str().expect("utf-8 path")]).run();
        let json = ran.json();
        assert_eq!(
            ran.output.status.code(),
            Some(0),
            "{} does not validate:\n{}",
            file.display(),
            ran.stdout()
        );
        assert_eq!(json["valid"], true, "{} is not valid:\n{json:#}", file.display());
        let diagnostics = json["diagnostics"].as_array().expect("diagnostics array");
        assert!(diagnostics.is_empty(), "{} has diagnostics:\n{:#}", file.display(), json["diagnostics"]);
    }
}

#[test]
fn every_required_workflow_has_the_common_frame() {
    for name in REQUIRED {
        assert_common_shape(name, &load(name));
    }
}

#[test]
fn linear_is_a_straight_chain_with_goal_expanded_prompts() {
    let workflow = load("linear.dot");
    let goal = workflow.goal();
    assert!(!goal.is_empty());
    let chain = ["start", "plan", "implement", "review", "exit"];
    assert_eq!(workflow.node_count(), chain.len());
    assert_eq!(workflow.edge_count(), chain.len() - 1);
    for pair in chain.windows(2) {
        assert_eq!(targets(&outgoing(&workflow, pair[0])), [pair[1]], "{} -> {}", pair[0], pair[1]);
    }
    assert!(workflow.edges().all(|e| !e.edge.is_conditional()));
    assert_eq!(node(&workflow, "plan").handler_type(), HandlerType::Prompt);
    assert_eq!(node(&workflow, "implement").handler_type(), HandlerType::Agent);
    assert_eq!(node(&workflow, "review").handler_type(), HandlerType::Agent);
    for id in ["plan", "implement", "review"] {
        let prompt = node(&workflow, id).prompt().unwrap();
        assert!(prompt.contains(goal), "`{id}` prompt should contain the expanded goal: {prompt:?}");
    }
    let source = workflow.source().text();
    assert!(source.contains("$goal"), "the file itself should show `$goal`");
    assert!(source.contains("shape=tab") && source.contains("shape=box"));
}

#[test]
fn branch_and_loop_routes_on_outcome_and_loops_through_fix() {
    let workflow = load("branch_and_loop.dot");

    let run_tests = node(&workflow, "run_tests");
    assert_eq!(run_tests.handler_type(), HandlerType::Command);
    assert!(run_tests.attributes.text("script").unwrap().contains("cargo test"));
    assert!(run_tests.attributes.duration("timeout").is_some());

    assert_eq!(node(&workflow, "tests_passed").handler_type(), HandlerType::Conditional);
    // Success and failure both reach the diamond; the failure path is an explicit edge.
    let into_diamond: Vec<(Option<&str>, String)> =
        outgoing(&workflow, "run_tests").iter().map(|e| (condition(e), e.to.id.clone())).collect();
    assert_eq!(
        into_diamond,
        [(None, "tests_passed".to_string()), (Some("outcome=fail"), "tests_passed".to_string())]
    );
    let routes: Vec<(Option<&str>, String)> =
        outgoing(&workflow, "tests_passed").iter().map(|e| (condition(e), e.to.id.clone())).collect();
    assert_eq!(
        routes,
        [
            (Some("outcome=success"), "exit".to_string()),
            (Some("outcome=fail"), "fix".to_string()),
            (None, "fix".to_string()),
        ]
    );

    let fix = node(&workflow, "fix");
    assert_eq!(fix.attributes.integer("max_visits"), Some(5));
    assert_eq!(targets(&outgoing(&workflow, "fix")), ["run_tests"], "the fix loop goes back to the tests");

    let implement = node(&workflow, "implement");
    assert_eq!(implement.attributes.integer("max_retries"), Some(2));
    assert_eq!(implement.attributes.text("retry_policy"), Some("standard"));
    assert_eq!(fix.attributes.text("retry_policy"), Some("linear"));
}

#[test]
fn review_gate_has_a_human_gate_with_three_accelerated_choices() {
    let workflow = load("review_gate.dot");

    let gate = node(&workflow, "review");
    assert_eq!(gate.handler_type(), HandlerType::Human);
    assert_eq!(gate.attributes.duration("timeout"), Some(Duration::from_secs(8 * 3600)));
    let choices = outgoing(&workflow, "review");
    let labels: Vec<&str> = choices.iter().filter_map(|e| e.edge.label()).collect();
    assert_eq!(labels, ["[A] Approve", "[R] Request changes", "[S] Skip"]);
    assert!(choices.iter().all(|e| !e.edge.is_conditional()));
    let default = gate.attributes.text("human.default_choice").unwrap();
    assert!(labels.contains(&default), "default choice {default:?} is one of the labels");

    let implement = node(&workflow, "implement");
    assert!(implement.is_goal_gate());
    let retry_target = implement.attributes.text("retry_target").unwrap();
    assert!(workflow.node(retry_target).is_some(), "retry_target `{retry_target}` is a node");
    assert_ne!(retry_target, "implement", "the goal gate retries from an earlier stage");

    // Request changes loops back through the summary to the same gate.
    assert_eq!(targets(&outgoing(&workflow, "revise")), ["summarize"]);
    assert_eq!(targets(&outgoing(&workflow, "summarize")), ["review"]);
}

#[test]
fn parallel_review_fans_out_to_three_branches_that_meet_at_a_fan_in() {
    let workflow = load("parallel_review.dot");

    let fan_out = node(&workflow, "reviews");
    assert_eq!(fan_out.handler_type(), HandlerType::Parallel);
    assert_eq!(fan_out.attributes.integer("max_parallel"), Some(3));
    assert_eq!(fan_out.attributes.text("join_policy"), Some("wait_all"));
    let branches = outgoing(&workflow, "reviews");
    assert_eq!(branches.len(), 3);
    let labels: Vec<&str> = branches.iter().filter_map(|e| e.edge.label()).collect();
    assert_eq!(labels, ["Security", "Performance", "Style"]);

    let fan_in = node(&workflow, "merge_findings");
    assert_eq!(fan_in.handler_type(), HandlerType::FanIn);
    assert!(fan_in.prompt().is_some_and(|p| p.contains("security") && p.contains("style")));
    assert_eq!(incoming(&workflow, "merge_findings").len(), 3, "one incoming edge per branch");

    // Each branch is one or two stages long and ends at the fan-in.
    for branch in &branches {
        let mut path = vec![branch.to.id.clone()];
        loop {
            let next = targets(&outgoing(&workflow, path.last().unwrap()));
            assert_eq!(next.len(), 1, "branch {path:?} does not fork");
            if next[0] == "merge_findings" {
                break;
            }
            path.push(next[0].clone());
            assert!(path.len() <= 2, "branch {path:?} is longer than two stages");
        }
    }
    assert_eq!(targets(&outgoing(&workflow, "merge_findings")), ["apply_fixes"]);
}

#[test]
fn multi_model_nodes_take_their_models_from_the_stylesheet() {
    let workflow = load("multi_model.dot");
    let stylesheet = workflow.attributes().text("model_stylesheet").unwrap();
    for selector in ["*", "box", ".cheap", ".code-review", "#final_verdict"] {
        assert!(stylesheet.contains(selector), "the stylesheet should use `{selector}`");
    }

    // (node, model, provider, reasoning effort)
    let expected = [
        ("plan", "claude-sonnet-4-5", "anthropic", None), // `*` only
        ("implement", "claude-opus-4-6", "anthropic", Some("high")), // `box`, own effort wins
        ("review_correctness", "gpt-5.2", "openai", Some("high")), // `.code-review` from the subgraph
        ("review_migration", "gpt-5.2", "openai", Some("high")),
        ("final_verdict", "gemini-2.5-pro", "gemini", Some("high")), // `#id` beats the class
        ("changelog", "claude-haiku-4-5", "anthropic", Some("low")), // `.cheap` beats `box`
    ];
    for (id, model, provider, effort) in expected {
        assert_eq!(text(&workflow, id, "llm_model"), Some(model), "llm_model of `{id}`");
        assert_eq!(text(&workflow, id, "llm_provider"), Some(provider), "llm_provider of `{id}`");
        assert_eq!(text(&workflow, id, "reasoning_effort"), effort, "reasoning_effort of `{id}`");
    }

    // Classes: one from `class="..."`, the others derived from the subgraph label "Code Review".
    assert_eq!(node(&workflow, "changelog").classes, ["cheap"]);
    for id in ["review_correctness", "review_migration", "final_verdict"] {
        assert_eq!(node(&workflow, id).classes, ["code-review"], "classes of `{id}`");
    }
    assert!(node(&workflow, "implement").classes.is_empty());
    let subgraph = workflow.subgraphs().iter().find(|s| s.class.is_some()).expect("a labelled subgraph");
    assert_eq!(subgraph.attributes.text("label"), Some("Code Review"));
    assert_eq!(subgraph.class.as_deref(), Some("code-review"));

    // The explicit reasoning_effort on `implement` is in the file; the models are not.
    let source = workflow.source().text();
    assert!(source.contains("reasoning_effort=high"));
    assert!(!source.contains("llm_model="), "models come only from the stylesheet");
}

#[test]
fn ci_pipeline_runs_commands_waits_and_explains_failures() {
    let workflow = load("ci_pipeline.dot");
    assert_eq!(workflow.attributes().text("default_fidelity"), Some("truncate"));

    let gates = ["fmt", "clippy", "unit_tests", "database", "integration_tests"];
    for (id, command) in [
        ("fmt", "cargo fmt"),
        ("clippy", "cargo clippy"),
        ("unit_tests", "cargo test"),
        ("integration_tests", "cargo test"),
    ] {
        let node = node(&workflow, id);
        assert_eq!(node.handler_type(), HandlerType::Command, "`{id}` is a command stage");
        assert!(node.attributes.text("script").unwrap().starts_with(command), "script of `{id}`");
        assert!(node.attributes.duration("timeout").is_some(), "`{id}` has a timeout");
    }

    let wait = node(&workflow, "wait_for_database");
    assert_eq!(wait.handler_type(), HandlerType::Wait);
    assert_eq!(wait.attributes.duration("duration"), Some(Duration::from_secs(15)));

    let explain = node(&workflow, "explain_failure");
    assert!(explain.handler_type().is_llm());
    // After explaining, the run fails on purpose so CI gets an honest exit code.
    assert_eq!(targets(&outgoing(&workflow, "explain_failure")), ["report_failure"]);
    let report = node(&workflow, "report_failure");
    assert_eq!(report.handler_type(), HandlerType::Command);
    assert!(report.attributes.text("script").unwrap().ends_with("exit 1"));
    assert!(outgoing(&workflow, "report_failure").is_empty());

    // Every gate: the unconditional edge continues down the pipeline after success; the
    // `outcome=fail` edge goes to the explainer with a richer fidelity than the graph default.
    for id in gates {
        let edges = outgoing(&workflow, id);
        assert_eq!(edges.len(), 2, "`{id}` has a success edge and a failure edge");
        assert!(!edges[0].edge.is_conditional(), "`{id}` goes on unconditionally after success");
        assert_ne!(edges[0].to.id, "explain_failure");
        assert_eq!(condition(&edges[1]), Some("outcome=fail"), "`{id}` failure edge");
        assert_eq!(edges[1].to.id, "explain_failure");
        assert_eq!(edges[1].edge.attributes.text("fidelity"), Some("summary:high"));
    }
    assert_eq!(incoming(&workflow, "explain_failure").len(), gates.len());
    assert_eq!(targets(&outgoing(&workflow, "database")), ["wait_for_database", "explain_failure"]);
    assert_eq!(targets(&outgoing(&workflow, "wait_for_database")), ["integration_tests"]);
}

#[test]
fn implement_and_test_runs_its_test_suite_as_a_supervised_sub_workflow() {
    let workflow = load("implement_and_test.dot");
    let test = node(&workflow, "test");
    assert_eq!(test.handler_type(), HandlerType::Manager);
    assert_eq!(test.shape(), "house");
    let child = test.settings.child_workflow().expect("the manager names its child");
    assert_eq!(child.path, workflow_path("parts/test_suite.dot"));
    assert_eq!(text(&workflow, "test", "manager.actions"), Some("observe,steer,wait"));
    assert!(text(&workflow, "test", "manager.steer_prompt").is_some_and(|p| p.contains("$goal")));
    assert_eq!(test.attributes.duration("manager.poll_interval"), Some(Duration::from_secs(30)));
    assert_eq!(test.attributes.integer("manager.max_cycles"), Some(60));

    // A failed test suite loops through `fix`; a passing one goes on to review.
    let out = outgoing(&workflow, "test");
    let failed = out.iter().find(|e| condition(e) == Some("outcome=fail")).expect("a failure edge");
    assert_eq!(failed.to.id, "fix");
    assert!(out.iter().any(|e| condition(e).is_none() && e.to.id == "review"));
    assert_eq!(targets(&outgoing(&workflow, "fix")), ["test"]);

    // The child is a workflow of its own: commands, then an LLM triage of their output.
    let suite = load("parts/test_suite.dot");
    let route = ["start", "unit_tests", "integration_tests", "triage", "exit"];
    for pair in route.windows(2) {
        assert_eq!(targets(&outgoing(&suite, pair[0])), [pair[1]]);
    }
    assert_eq!(node(&suite, "unit_tests").handler_type(), HandlerType::Command);
    assert_eq!(node(&suite, "triage").handler_type(), HandlerType::Prompt);
}

#[test]
fn plan_from_files_inlines_prompt_files_and_applies_scoped_defaults() {
    let workflow = load("plan_from_files.dot");
    let goal = workflow.goal().to_string();
    let prompts = repo_root().join("workflows/prompts");

    for (id, file) in [
        ("plan", "plan.md"),
        ("implement", "implement.md"),
        ("self_check", "self_check.md"),
        ("review", "review.md"),
    ] {
        let prompt = node(&workflow, id).prompt().unwrap();
        assert!(!prompt.trim_start().starts_with('@'), "`{id}` prompt was not inlined: {prompt:?}");
        let contents = std::fs::read_to_string(prompts.join(file)).unwrap();
        assert_eq!(prompt, contents.replace("$goal", &goal), "`{id}` prompt is prompts/{file}");
    }
    assert!(text(&workflow, "plan", "prompt").unwrap().contains(&goal), "$goal expands inside files");
    assert!(workflow.source().text().contains("prompt=\"@prompts/plan.md\""));

    // Top-level `node [...]` defaults reach nodes declared after them, not start and exit.
    for id in ["plan", "implement", "self_check", "review"] {
        let attributes = &node(&workflow, id).attributes;
        assert_eq!(attributes.duration("timeout"), Some(Duration::from_secs(30 * 60)), "timeout of `{id}`");
        assert_eq!(attributes.text("retry_policy"), Some("standard"), "retry_policy of `{id}`");
    }
    for id in ["start", "exit"] {
        assert!(!node(&workflow, id).attributes.contains("timeout"), "`{id}` declared before the defaults");
    }

    // The subgraph's scoped defaults: a shared thread under full fidelity, more retries.
    for id in ["implement", "self_check"] {
        let attributes = &node(&workflow, id).attributes;
        assert_eq!(attributes.text("fidelity"), Some("full"), "fidelity of `{id}`");
        assert_eq!(attributes.text("thread_id"), Some("build"), "thread_id of `{id}`");
        assert_eq!(attributes.integer("max_retries"), Some(2), "max_retries of `{id}`");
        assert_eq!(node(&workflow, id).classes, ["build"]);
    }
    for id in ["plan", "review"] {
        let attributes = &node(&workflow, id).attributes;
        assert!(!attributes.contains("thread_id") && !attributes.contains("fidelity"), "`{id}` is outside");
        assert_eq!(attributes.integer("max_retries"), Some(1), "max_retries of `{id}`");
    }

    // Edge defaults reach every edge declared after them.
    assert!(workflow.edges().all(|e| e.edge.attributes.text("color") == Some("gray40")));
    let review_routes: Vec<_> =
        outgoing(&workflow, "review").iter().map(|e| (condition(e), e.to.id.clone())).collect();
    assert_eq!(review_routes, [(Some("outcome=fail"), "implement".to_string()), (None, "exit".to_string())]);

    // All three comment styles are shown.
    let source = workflow.source().text();
    assert!(source.contains("\n    // "), "a // comment");
    assert!(source.starts_with("/*"), "a /* */ comment");
    assert!(source.contains("\n# "), "a # line comment");
}
