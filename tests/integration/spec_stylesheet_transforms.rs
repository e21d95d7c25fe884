//! Attractor spec 11.10 (model stylesheet) and the transform items of 11.11, one test per item.

use crate::common;

use std::sync::Arc;

use common::Test;
use fabro::graph::stylesheet::Selector;
use fabro::graph::{Attr, Transform, Value, Workflow};
use fabro::source::SourceFile;
use fabro::{CheckedWorkflow, Diagnostic, Loader, Severity};

fn load_with(loader: &Loader, text: &str) -> CheckedWorkflow {
    loader.load_source(SourceFile::new("x.dot", text)).unwrap_or_else(|e| panic!("load failed: {e}"))
}

fn load(text: &str) -> CheckedWorkflow {
    load_with(&Loader::new(), text)
}

/// `(llm_model, llm_provider, reasoning_effort)` of a node after loading.
fn style<'w>(checked: &'w CheckedWorkflow, id: &str) -> (Option<&'w str>, Option<&'w str>, Option<&'w str>) {
    let attributes = &checked.workflow.node(id).unwrap_or_else(|| panic!("no node {id}")).attributes;
    (attributes.text("llm_model"), attributes.text("llm_provider"), attributes.text("reasoning_effort"))
}

/// `(rule, severity, line, column, message)` of every diagnostic.
fn located(checked: &CheckedWorkflow) -> Vec<(String, Severity, usize, usize, String)> {
    located_in(&checked.workflow, &checked.diagnostics)
}

fn located_in(
    workflow: &Workflow,
    diagnostics: &[Diagnostic],
) -> Vec<(String, Severity, usize, usize, String)> {
    diagnostics
        .iter()
        .map(|d| {
            let location = d.location(workflow.source()).expect("a position");
            (d.rule.clone(), d.severity, location.line, location.column, d.message.clone())
        })
        .collect()
}

/// The built-in rules run on the built graph directly, without the transforms.
fn rules_without_transforms(text: &str) -> Vec<(String, Severity, usize, usize, String)> {
    let source = Arc::new(SourceFile::new("x.dot", text));
    let tree = fabro::syntax::parse(source.text()).expect("parses");
    let workflow = fabro::graph::build(&tree, source.clone());
    let diagnostics = fabro::validate::run_rules(&workflow, &fabro::validate::builtin_rules(Vec::new()));
    located_in(&workflow, &diagnostics)
}

// ---------------------------------------------------------------------------------------------
// 11.10 Model stylesheet
// ---------------------------------------------------------------------------------------------

/// Stylesheet is parsed from the graph's `model_stylesheet` attribute
#[test]
fn stylesheet_parsed_from_model_stylesheet_attribute() {
    let checked = load(
        r##"digraph G {
    model_stylesheet = "
        /* defaults */
        * { llm_model: claude-sonnet-4-5; llm_provider: anthropic }
        box { llm_model: claude-opus-4-6 }
        .code, #review { reasoning_effort: high }
    "
    start [shape=Mdiamond]
    review [prompt="Review"]
    exit [shape=Msquare]
    start -> review -> exit
}"##,
    );
    let stylesheet = checked.workflow.stylesheet().expect("a stylesheet").as_ref().expect("it parses");
    let selectors: Vec<(String, u8)> =
        stylesheet.selectors().map(|(s, _)| (s.to_string(), s.specificity())).collect();
    assert_eq!(
        selectors,
        [("*".to_string(), 0), ("box".to_string(), 1), (".code".to_string(), 2), ("#review".to_string(), 3)]
    );
    assert_eq!(stylesheet.declarations().count(), 4);
    assert_eq!(style(&checked, "review"), (Some("claude-opus-4-6"), Some("anthropic"), Some("high")));
    assert!(checked.diagnostics.is_empty(), "{:#?}", checked.diagnostics);
    // without the attribute there is no stylesheet
    let none = load("digraph G {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> exit\n}");
    assert!(none.workflow.stylesheet().is_none());
}

/// Selectors by shape name work (e.g., `box { model = "claude-opus-4-6" }`)
#[test]
fn selector_by_shape_name() {
    let checked = load(
        r#"digraph G {
    model_stylesheet = "box { model = \"claude-opus-4-6\" } tab { llm_model: gpt-5.2; provider = 'openai' }"
    start [shape=Mdiamond]
    implicit [prompt="No shape: box by default"]
    explicit [shape=box, prompt="Box"]
    single [shape=tab, prompt="One call"]
    exit [shape=Msquare]
    start -> implicit -> explicit -> single -> exit
}"#,
    );
    assert_eq!(style(&checked, "implicit"), (Some("claude-opus-4-6"), None, None));
    assert_eq!(style(&checked, "explicit"), (Some("claude-opus-4-6"), None, None));
    assert_eq!(style(&checked, "single"), (Some("gpt-5.2"), Some("openai"), None));
    assert_eq!(style(&checked, "start"), (None, None, None));
    assert!(checked.diagnostics.is_empty(), "{:#?}", checked.diagnostics);
}

/// Selectors by class name work (e.g., `.fast { model = "gemini-3-flash-preview" }`), including
/// classes derived from subgraph labels
#[test]
fn selector_by_class_name() {
    let checked = load(
        r#"digraph G {
    model_stylesheet = ".fast { model = \"gemini-3-flash-preview\" } .loop-a { reasoning_effort: low }"
    start [shape=Mdiamond]
    quick [prompt="Quick", class="fast"]
    slow [prompt="Slow"]
    subgraph cluster_a {
        label = "Loop A"
        looped [prompt="Looped", class="fast"]
    }
    exit [shape=Msquare]
    start -> quick -> slow -> looped -> exit
}"#,
    );
    assert_eq!(style(&checked, "quick"), (Some("gemini-3-flash-preview"), None, None));
    assert_eq!(style(&checked, "slow"), (None, None, None));
    assert_eq!(style(&checked, "looped"), (Some("gemini-3-flash-preview"), None, Some("low")));
    // The only findings: agent stages on a small-tier (flash) model, which fabro warns about.
    let rules: Vec<&str> = checked.diagnostics.iter().map(|d| d.rule.as_str()).collect();
    assert_eq!(rules, ["small_tier_parent", "small_tier_parent"], "{:#?}", checked.diagnostics);
}

/// Selectors by node ID work (e.g., `#review { reasoning_effort = "high" }`)
#[test]
fn selector_by_node_id() {
    let checked = load(
        r##"digraph G {
    model_stylesheet = "#review { reasoning_effort = \"high\" } #reviewer { reasoning_effort: low }"
    start [shape=Mdiamond]
    review [prompt="Review"]
    reviewer [prompt="Not the same id"]
    reviewed [prompt="No rule"]
    exit [shape=Msquare]
    start -> review -> reviewer -> reviewed -> exit
}"##,
    );
    assert_eq!(style(&checked, "review"), (None, None, Some("high")));
    assert_eq!(style(&checked, "reviewer"), (None, None, Some("low")));
    assert_eq!(style(&checked, "reviewed"), (None, None, None));
    assert!(checked.diagnostics.is_empty(), "{:#?}", checked.diagnostics);
}

/// Specificity order: universal < shape < class < ID (whatever the source order)
#[test]
fn specificity_universal_shape_class_id() {
    let checked = load(
        r##"digraph G {
    model_stylesheet = "
        #review { llm_model: by-id }
        .fast { llm_model: by-class; llm_provider: class-provider }
        box { llm_model: by-shape; reasoning_effort: medium }
        * { llm_model: by-universal; llm_provider: universal-provider; reasoning_effort: low }
    "
    start [shape=Mdiamond]
    review [prompt="Review", class="fast"]
    quick [prompt="Quick", class="fast"]
    plain [prompt="Plain"]
    single [shape=tab, prompt="Tab"]
    exit [shape=Msquare]
    start -> review -> quick -> plain -> single -> exit
}"##,
    );
    assert_eq!(style(&checked, "review"), (Some("by-id"), Some("class-provider"), Some("medium")));
    assert_eq!(style(&checked, "quick"), (Some("by-class"), Some("class-provider"), Some("medium")));
    assert_eq!(style(&checked, "plain"), (Some("by-shape"), Some("universal-provider"), Some("medium")));
    assert_eq!(style(&checked, "single"), (Some("by-universal"), Some("universal-provider"), Some("low")));
    assert_eq!(
        [
            Selector::Universal,
            Selector::Shape("box".into()),
            Selector::Class("c".into()),
            Selector::Id("i".into())
        ]
        .map(|s| s.specificity()),
        [0, 1, 2, 3]
    );
    assert!(checked.diagnostics.is_empty(), "{:#?}", checked.diagnostics);
}

/// Stylesheet properties are overridden by explicit node attributes
#[test]
fn explicit_node_attributes_override_stylesheet() {
    let checked = load(
        r##"digraph G {
    model_stylesheet = "#review { llm_model: sheet-model; llm_provider: sheet-provider; reasoning_effort: high }"
    start [shape=Mdiamond]
    review [prompt="Review", llm_model="explicit-model", reasoning_effort=low]
    exit [shape=Msquare]
    start -> review -> exit
}"##,
    );
    assert_eq!(style(&checked, "review"), (Some("explicit-model"), Some("sheet-provider"), Some("low")));
    // the explicit value keeps its own position, the stylesheet's points at the stylesheet
    let review = checked.workflow.node("review").unwrap();
    let at = |key: &str| {
        let location = checked.workflow.source().location(review.attributes.get(key).unwrap().span.start);
        (location.line, location.column)
    };
    assert_eq!(at("llm_model"), (4, 40));
    assert_eq!(at("llm_provider"), (2, 24));
    assert!(checked.diagnostics.is_empty(), "{:#?}", checked.diagnostics);
}

/// Stylesheet syntax errors are validation errors with a line/column inside the stylesheet string
#[test]
fn stylesheet_syntax_errors_are_validation_errors_with_position() {
    let checked = load(
        r#"digraph G {
    model_stylesheet = "
        * { llm_model: claude-sonnet-4-5 }
        .code { reasoning_effort: extreme }
    "
    start [shape=Mdiamond]
    exit [shape=Msquare]
    start -> exit
}"#,
    );
    assert_eq!(
        located(&checked),
        [(
            "stylesheet_syntax".to_string(),
            Severity::Error,
            4,
            35,
            "model_stylesheet: reasoning_effort must be low, medium or high, found `extreme`".to_string()
        )]
    );
    assert!(checked.into_valid().is_err());
}

/// Stylesheet syntax errors are validation errors with a line/column inside the stylesheet string:
/// the `stylesheet_syntax` rule itself, run on the built graph before the transforms
#[test]
fn stylesheet_syntax_rule_positions_errors_inside_the_string() {
    let multi_line = rules_without_transforms(
        r#"digraph G {
    model_stylesheet = "
        * { llm_model: claude-sonnet-4-5 }
        .code { reasoning_effort: extreme }
    "
    start [shape=Mdiamond]
    exit [shape=Msquare]
    start -> exit
}"#,
    );
    assert_eq!(
        multi_line,
        [(
            "stylesheet_syntax".to_string(),
            Severity::Error,
            4,
            35,
            "model_stylesheet: reasoning_effort must be low, medium or high, found `extreme`".to_string()
        )]
    );
    // escaped quotes before the error take two characters each in the file
    let escaped = rules_without_transforms(
        r#"digraph G {
    model_stylesheet="* { model = \"gpt-5.2\" } box { llm_modle: x }"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    start -> exit
}"#,
    );
    assert_eq!(
        escaped,
        [(
            "stylesheet_syntax".to_string(),
            Severity::Error,
            2,
            55,
            "model_stylesheet: unknown property `llm_modle` (did you mean `llm_model`?); expected llm_model, \
             llm_provider, reasoning_effort, backend or image"
                .to_string()
        )]
    );
}

/// Stylesheet syntax errors point inside the stylesheet string also when the string is written as a
/// DOT concatenation `"..." + "..."`
#[test]
fn stylesheet_syntax_error_position_in_concatenated_string() {
    let concatenated = rules_without_transforms(
        r#"digraph G {
    model_stylesheet = "* { llm_model: a }" +
        " box { llm_modle: b }"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    start -> exit
}"#,
    );
    let positions: Vec<(usize, usize)> = concatenated.iter().map(|d| (d.2, d.3)).collect();
    assert_eq!(positions, [(3, 17)]);
}

/// Stylesheet: a `#id` selector naming no node is reported — through `fabro validate`
#[test]
fn binary_reports_stylesheet_selector_matching_no_node() {
    Test::new()
        .workflow(
            r##"digraph G {
    model_stylesheet = "box { llm_model: claude-opus-4-6 } #reveiw { reasoning_effort: high }"
    start [shape=Mdiamond]
    review [prompt="Review"]
    exit [shape=Msquare]
    start -> review -> exit
}
"##,
        )
        .args(["validate", "workflow.dot"])
        .status(0)
        .stdout_contains(
            "warning[stylesheet_syntax] workflow.dot:2:60: model_stylesheet: `#reveiw` matches no node\n",
        )
        .stdout_contains("   = fix: did you mean `#review`?\n")
        .stdout_contains("workflow.dot: valid (1 warning)")
        .run();
}

/// Stylesheet syntax errors are validation errors — through `fabro validate --json`
#[test]
fn binary_reports_stylesheet_syntax_error() {
    let ran = Test::new()
        .workflow(
            "digraph G {\n    model_stylesheet = \"box { llm_model claude-opus-4-6 }\"\n    start [shape=Mdiamond]\n    exit [shape=Msquare]\n    start -> exit\n}\n",
        )
        .args(["validate", "--json", "workflow.dot"])
        .status(2)
        .run();
    assert_eq!(
        ran.json(),
        serde_json::json!({
            "valid": false,
            "diagnostics": [{
                "rule": "stylesheet_syntax",
                "severity": "error",
                "message": "model_stylesheet: expected `:` or `=` after `llm_model`",
                "node_id": null,
                "edge": null,
                "line": 2,
                "column": 41,
                "fix": "rules look like `.code { llm_model: claude-opus-4-6; reasoning_effort: high }`",
            }]
        })
    );
}

// ---------------------------------------------------------------------------------------------
// 11.11 Transforms
// ---------------------------------------------------------------------------------------------

/// Appends `marker` to every prompt, recording that it ran and in which order.
struct AppendToPrompt {
    marker: &'static str,
}

impl Transform for AppendToPrompt {
    fn name(&self) -> &str {
        self.marker
    }

    fn apply(&self, workflow: &mut Workflow) -> Vec<Diagnostic> {
        for node in workflow.nodes_mut() {
            let Some(attr) = node.attributes.get("prompt") else { continue };
            let Some(prompt) = attr.value.as_text() else { continue };
            let attr = Attr { value: Value::Text(format!("{prompt} {}", self.marker)), ..attr.clone() };
            node.attributes.set("prompt", attr);
        }
        Vec::new()
    }
}

/// Gives every LLM stage without a prompt one, and reports what it did.
struct DefaultPrompts;

impl Transform for DefaultPrompts {
    fn name(&self) -> &str {
        "default_prompts"
    }

    fn apply(&self, workflow: &mut Workflow) -> Vec<Diagnostic> {
        let mut diagnostics = Vec::new();
        for node in workflow.nodes_mut() {
            if !node.handler_type().is_llm() || node.prompt().is_some() {
                continue;
            }
            let text = format!("Do: {}", node.label());
            let attr =
                Attr { value: Value::Text(text), span: node.span, key_span: node.span, inherited: false };
            node.attributes.set("prompt", attr);
            diagnostics.push(
                Diagnostic::new(Severity::Info, "default_prompts", "prompt added")
                    .node(&node.id)
                    .span(node.span),
            );
        }
        diagnostics
    }
}

/// AST transforms can modify the Graph between parsing and validation; transform interface:
/// `transform(graph) -> graph` (`fabro::graph::Transform::apply(&mut Workflow)`)
#[test]
fn transforms_modify_graph_between_parsing_and_validation() {
    let text = r#"digraph G {
    start [shape=Mdiamond]
    plan [label="Plan the work"]
    exit [shape=Msquare]
    start -> plan -> exit
}"#;
    let plain = load(text);
    let rules: Vec<(&str, Option<&str>)> =
        plain.diagnostics.iter().map(|d| (d.rule.as_str(), d.node_id.as_deref())).collect();
    assert_eq!(rules, [("prompt_on_llm_nodes", Some("plan"))]);

    let transformed = load_with(&Loader::new().with_transform(DefaultPrompts), text);
    assert_eq!(transformed.workflow.node("plan").unwrap().prompt(), Some("Do: Plan the work"));
    assert_eq!(
        located(&transformed),
        [("default_prompts".to_string(), Severity::Info, 3, 5, "prompt added".to_string())]
    );
    assert!(transformed.into_valid().is_ok());
}

/// Built-in variable expansion transform replaces `$goal` in prompts
#[test]
fn goal_variable_expansion_in_prompts() {
    let checked = load(
        r#"digraph G {
    goal = "make the build green"
    start [shape=Mdiamond]
    plan [prompt="Plan how to $goal. Remember: $goal!", label="$goal"]
    exit [shape=Msquare]
    start -> plan -> exit
}"#,
    );
    let plan = checked.workflow.node("plan").unwrap();
    assert_eq!(plan.prompt(), Some("Plan how to make the build green. Remember: make the build green!"));
    // only prompts are expanded
    assert_eq!(plan.label(), "$goal");
    assert!(checked.diagnostics.is_empty(), "{:#?}", checked.diagnostics);
}

/// Transforms: `prompt="@prompts/x.md"` inlines that file, resolved relative to the workflow file
/// (and `$goal` inside it is expanded, since prompt files run before goal expansion)
#[test]
fn prompt_file_inlined_relative_to_workflow_file() {
    let dir = tempfile::tempdir().unwrap();
    let workflow_dir = dir.path().join("flows");
    std::fs::create_dir_all(workflow_dir.join("prompts")).unwrap();
    std::fs::write(workflow_dir.join("prompts/plan.md"), "# Plan\nWrite a plan to $goal.\n").unwrap();
    let path = workflow_dir.join("workflow.dot");
    std::fs::write(
        &path,
        r#"digraph G {
    goal = "fix the bug"
    start [shape=Mdiamond]
    plan [prompt="@prompts/plan.md"]
    exit [shape=Msquare]
    start -> plan -> exit
}"#,
    )
    .unwrap();
    let checked = Loader::new().load_file(&path).unwrap();
    assert_eq!(
        checked.workflow.node("plan").unwrap().prompt(),
        Some("# Plan\nWrite a plan to fix the bug.\n")
    );
    assert!(checked.diagnostics.is_empty(), "{:#?}", checked.diagnostics);
}

/// Custom transforms can be registered and run in order: `Loader::with_transform`, after the
/// built-ins, in registration order
#[test]
fn custom_transforms_run_after_builtins_in_registration_order() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::create_dir_all(dir.path().join("prompts")).unwrap();
    std::fs::write(dir.path().join("prompts/review.md"), "Review for $goal").unwrap();
    let path = dir.path().join("workflow.dot");
    std::fs::write(
        &path,
        r#"digraph G {
    goal = "speed"
    start [shape=Mdiamond]
    review [prompt="@prompts/review.md"]
    exit [shape=Msquare]
    start -> review -> exit
}"#,
    )
    .unwrap();
    let loader = Loader::new()
        .with_transform(AppendToPrompt { marker: "[first]" })
        .with_transform(AppendToPrompt { marker: "[second]" });
    let checked = loader.load_file(&path).unwrap();
    // the file was inlined and `$goal` expanded before the custom transforms appended
    assert_eq!(checked.workflow.node("review").unwrap().prompt(), Some("Review for speed [first] [second]"));

    let reversed = Loader::new()
        .with_transform(AppendToPrompt { marker: "[second]" })
        .with_transform(AppendToPrompt { marker: "[first]" })
        .load_file(&path)
        .unwrap();
    assert_eq!(reversed.workflow.node("review").unwrap().prompt(), Some("Review for speed [second] [first]"));
    let names: Vec<String> =
        fabro::graph::builtin_transforms().iter().map(|t| t.name().to_string()).collect();
    assert_eq!(names, ["imports", "prompt_files", "dialect_aliases", "goal_expansion", "stylesheet"]);
}

/// Transforms: prompt files are resolved relative to the workflow file, not the working directory
/// — through `fabro validate`
#[test]
fn binary_inlines_prompt_files_relative_to_the_workflow() {
    let workflow = r#"digraph G {
    start [shape=Mdiamond]
    plan [prompt="@prompts/plan.md"]
    exit [shape=Msquare]
    start -> plan -> exit
}
"#;
    Test::new()
        .file("sub/workflow.dot", workflow)
        .file("sub/prompts/plan.md", "Plan it.")
        .args(["validate", "sub/workflow.dot"])
        .status(0)
        .stdout_contains("sub/workflow.dot: valid (0 warnings)")
        .run();
    // the same file next to the working directory does not count
    let ran = Test::new()
        .file("sub/workflow.dot", workflow)
        .file("prompts/plan.md", "Plan it.")
        .args(["validate", "--json", "sub/workflow.dot"])
        .status(2)
        .run();
    let json = ran.json();
    let diagnostic = &json["diagnostics"][0];
    assert_eq!(json["diagnostics"].as_array().unwrap().len(), 1);
    assert_eq!(diagnostic["rule"], "prompt_file");
    assert_eq!(diagnostic["severity"], "error");
    assert_eq!(diagnostic["node_id"], "plan");
    assert_eq!((diagnostic["line"].as_u64(), diagnostic["column"].as_u64()), (Some(3), Some(18)));
    let message = diagnostic["message"].as_str().unwrap();
    assert!(message.starts_with("cannot read prompt file `sub/prompts/plan.md`: "), "{message}");
}
