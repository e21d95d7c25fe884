//! Attractor spec 11.9 (condition expressions), one test per checklist item, plus fabro's
//! extensions (`||`, `!`, parentheses, ordering, `contains`, `matches`, both outcome spellings).

use crate::common;

use common::Test;
use fabro::condition::{Condition, ConditionError, ConditionScope};
use fabro::outcome::StageStatus;
use fabro::source::SourceFile;
use fabro::{CheckedWorkflow, Loader, Severity};
use serde_json::{json, Map, Value};

/// The run state a condition reads: the current node's outcome, the preferred label and the context.
#[derive(Default)]
struct Scope {
    outcome: Option<StageStatus>,
    preferred_label: Option<String>,
    context: Map<String, Value>,
}

impl Scope {
    fn outcome(status: StageStatus) -> Scope {
        Scope { outcome: Some(status), ..Scope::default() }
    }

    fn label(label: &str) -> Scope {
        Scope { preferred_label: Some(label.to_string()), ..Scope::default() }
    }

    fn context(context: Value) -> Scope {
        Scope { context: context.as_object().cloned().expect("an object"), ..Scope::default() }
    }
}

impl ConditionScope for Scope {
    fn outcome(&self) -> Option<StageStatus> {
        self.outcome
    }

    fn preferred_label(&self) -> Option<&str> {
        self.preferred_label.as_deref()
    }

    fn context(&self, key: &str) -> Option<&Value> {
        self.context.get(key)
    }
}

fn eval(text: &str, scope: &Scope) -> bool {
    match Condition::parse(text) {
        Ok(condition) => condition.evaluate(scope),
        Err(error) => panic!("`{text}` did not parse: {error} (offset {})", error.offset),
    }
}

fn parse_error(text: &str) -> ConditionError {
    match Condition::parse(text) {
        Ok(_) => panic!("`{text}` parsed but should not"),
        Err(error) => error,
    }
}

fn load(text: &str) -> CheckedWorkflow {
    Loader::new().load_source(SourceFile::new("x.dot", text)).unwrap_or_else(|e| panic!("load failed: {e}"))
}

/// `=` (equals) operator works for string comparison
#[test]
fn equals_operator_compares_strings() {
    let scope = Scope::context(json!({"branch": "main", "mode": "fast mode", "count": 3, "flag": true}));
    assert!(eval("context.branch=main", &scope));
    assert!(!eval("context.branch=mai", &scope));
    assert!(!eval("context.branch=Main", &scope));
    assert!(eval("context.mode=\"fast mode\"", &scope));
    assert!(eval("context.mode = 'fast mode'", &scope));
    assert!(eval("context.branch == main", &scope));
    assert!(eval("context.count=3", &scope));
    assert!(eval("context.flag=true", &scope));
}

/// `=` (equals) operator works for string comparison: "String comparison is exact and
/// case-sensitive" (spec 10.3), so text that merely reads as the same number is not equal
#[test]
fn equals_compares_strings_exactly_not_numerically() {
    let scope = Scope::context(json!({"version": "1.1", "code": "007"}));
    assert!(!eval("context.version=\"1.10\"", &scope));
    assert!(eval("context.version!=\"1.10\"", &scope));
    assert!(!eval("context.code=\"7\"", &scope));
    assert!(eval("context.code=\"007\"", &scope));
}

/// `!=` (not equals) operator works
#[test]
fn not_equals_operator_works() {
    let scope = Scope::context(json!({"branch": "main"}));
    assert!(eval("context.branch!=dev", &scope));
    assert!(!eval("context.branch!=main", &scope));
    assert!(eval("outcome!=fail", &Scope::outcome(StageStatus::Success)));
    assert!(!eval("outcome!=fail", &Scope::outcome(StageStatus::Fail)));
    assert!(eval("preferred_label != Skip", &Scope::label("Go")));
}

/// `&&` (AND) conjunction works with multiple clauses
#[test]
fn and_conjunction_with_multiple_clauses() {
    let scope = Scope {
        outcome: Some(StageStatus::Success),
        preferred_label: Some("Ship".into()),
        context: json!({"tests": "passed", "lint": "clean"}).as_object().cloned().unwrap(),
    };
    let all = "outcome=success && context.tests=passed && context.lint=clean && preferred_label=Ship";
    assert!(eval(all, &scope));
    assert!(!eval("outcome=success && context.tests=passed && context.lint=dirty", &scope));
    assert!(!eval("outcome=fail && context.tests=passed", &scope));
    assert!(eval("outcome=success&&context.tests=passed", &scope));
}

/// `outcome` variable resolves to the current node's outcome status
#[test]
fn outcome_resolves_to_current_node_outcome() {
    for status in StageStatus::ALL {
        let scope = Scope::outcome(status);
        for other in StageStatus::ALL {
            let text = format!("outcome={}", other.as_str());
            assert_eq!(eval(&text, &scope), status == other, "{text} with {status}");
        }
    }
    // before any stage ran there is no outcome
    assert!(!eval("outcome=success", &Scope::default()));
    assert!(eval("outcome!=success", &Scope::default()));
}

/// `preferred_label` variable resolves to the outcome's preferred label
#[test]
fn preferred_label_resolves() {
    assert!(eval("preferred_label=Fix", &Scope::label("Fix")));
    assert!(!eval("preferred_label=Fix", &Scope::label("Ship")));
    assert!(eval("preferred_label=\"[A] Approve\"", &Scope::label("[A] Approve")));
    assert!(!eval("preferred_label=Fix", &Scope::default()));
    assert!(eval("preferred_label=\"\"", &Scope::default()));
}

/// `context.*` variables resolve to context values (missing keys = empty string)
#[test]
fn context_variables_resolve_and_missing_keys_are_empty() {
    let scope = Scope::context(json!({"tests_passed": "true", "tests.passed": true, "score": 0.9}));
    assert!(eval("context.tests_passed=true", &scope));
    assert!(eval("context.tests.passed=true", &scope));
    assert!(eval("context.score=0.9", &scope));
    // the `context.` prefix is optional
    assert!(eval("tests_passed=true", &scope));
    // missing keys are the empty string
    assert!(eval("context.missing=\"\"", &scope));
    assert!(eval("context.missing=''", &scope));
    assert!(eval("context.missing!=anything", &scope));
    assert!(!eval("context.missing=anything", &scope));
    assert!(!eval("context.missing", &scope));
    assert!(eval("context.tests_passed", &scope));
    let condition = Condition::parse("context.a=1 && context.b.c!=x && context.a").unwrap();
    assert_eq!(condition.context_keys(), ["a", "b.c"]);
}

/// Empty condition always evaluates to true (unconditional edge): an edge with `condition=""` has
/// `edge.condition == None`
#[test]
fn empty_condition_is_unconditional() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    work [prompt="Work"]
    exit [shape=Msquare]
    edge [condition="outcome=success"]
    start -> work [condition=""]
    work -> exit [condition="   "]
    work -> start
}"#,
    );
    let edges: Vec<_> = checked.workflow.edges().collect();
    assert!(edges[0].edge.condition.is_none());
    assert!(edges[0].edge.condition().is_none());
    assert!(!edges[0].edge.is_conditional());
    assert!(edges[1].edge.condition.is_none());
    assert!(!edges[1].edge.is_conditional());
    assert_eq!(edges[2].edge.condition().map(|c| c.text()), Some("outcome=success"));
    // `work` has an unconditional edge, so there is no all_conditional_edges warning
    let rules: Vec<(&str, Severity)> =
        checked.diagnostics.iter().map(|d| (d.rule.as_str(), d.severity)).collect();
    assert_eq!(rules, [("start_no_incoming", Severity::Error)]);
    // the parser itself refuses empty text; callers treat it as "no condition"
    let error = parse_error("  ");
    assert_eq!((error.offset, error.message.as_str()), (0, "the condition is empty"));
}

/// Conditions on loaded edges evaluate against the scope (fabro: parsed once, at load time)
#[test]
fn edge_conditions_evaluate_after_loading() {
    let checked = load(
        r#"digraph G {
    start [shape=Mdiamond]
    test [prompt="Test"]
    fix [prompt="Fix"]
    exit [shape=Msquare]
    start -> test
    test -> exit [condition="outcome=success && context.coverage >= 80"]
    test -> fix [condition="outcome=fail || preferred_label=Fix"]
    test -> fix
    fix -> test
}"#,
    );
    assert!(checked.diagnostics.is_empty(), "{:#?}", checked.diagnostics);
    let workflow = &checked.workflow;
    let outgoing = workflow.outgoing(workflow.index_of("test").unwrap());
    let to_exit = outgoing[0].edge.condition().unwrap();
    let to_fix = outgoing[1].edge.condition().unwrap();
    let mut scope = Scope::context(json!({"coverage": 85}));
    scope.outcome = Some(StageStatus::Success);
    assert!(to_exit.evaluate(&scope));
    assert!(!to_fix.evaluate(&scope));
    scope.context.insert("coverage".into(), json!(79.5));
    assert!(!to_exit.evaluate(&scope));
    scope.preferred_label = Some("Fix".into());
    assert!(to_fix.evaluate(&scope));
    assert!(to_exit.tests_outcome());
    assert_eq!(to_fix.tested_outcomes(), [StageStatus::Fail]);
}

/// Fabro extension: `||` disjunction, with `&&` binding tighter
#[test]
fn or_disjunction_and_precedence() {
    let scope = Scope::context(json!({"a": "1", "b": "0", "c": "0"}));
    assert!(eval("context.a=1 || context.b=1", &scope));
    assert!(!eval("context.a=0 || context.b=1", &scope));
    // `a || b && c` is `a || (b && c)`
    assert!(eval("context.a=1 || context.b=1 && context.c=1", &scope));
    assert!(!eval("(context.a=1 || context.b=1) && context.c=1", &scope));
    assert!(eval("context.b=1 && context.c=1 || context.a=1", &scope));
}

/// Fabro extension: `!` negation and parentheses
#[test]
fn not_and_parentheses() {
    let scope = Scope {
        outcome: Some(StageStatus::Fail),
        context: json!({"skip": "true", "retries": 2}).as_object().cloned().unwrap(),
        ..Scope::default()
    };
    assert!(!eval("!context.skip", &scope));
    assert!(eval("!!context.skip", &scope));
    assert!(eval("!outcome=success", &scope));
    assert!(eval("!(outcome=success || context.skip=false)", &scope));
    assert!(!eval("!(outcome=fail && context.skip=true)", &scope));
    assert!(eval("((outcome=fail)) && (context.retries=2)", &scope));
    assert!(eval("!context.missing", &scope));
}

/// Fabro extension: numeric ordering `<`, `<=`, `>`, `>=`
#[test]
fn numeric_ordering_operators() {
    let scope = Scope::context(json!({"score": 0.8, "count": "12", "name": "abc"}));
    assert!(eval("context.score >= 0.8", &scope));
    assert!(!eval("context.score > 0.8", &scope));
    assert!(eval("context.score <= 0.8", &scope));
    assert!(!eval("context.score < 0.8", &scope));
    assert!(eval("context.count > 9", &scope));
    assert!(eval("context.count < 100", &scope));
    assert!(eval("context.score > -1.5e3", &scope));
    // non-numbers and missing keys never satisfy an ordering
    assert!(!eval("context.name > 0", &scope));
    assert!(!eval("context.missing < 1", &scope));
    assert!(!eval("context.missing >= 0", &scope));
    let error = parse_error("context.score > high");
    assert_eq!(
        (error.offset, error.message.as_str()),
        (16, "`>` compares numbers, but `high` is not a number")
    );
}

/// Fabro extension: `contains` on strings and arrays
#[test]
fn contains_operator() {
    let scope = Scope::context(json!({"files": ["src/main.rs", "README.md"], "log": "3 tests failed"}));
    assert!(eval("context.files contains \"src/main.rs\"", &scope));
    assert!(!eval("context.files contains src/lib.rs", &scope));
    assert!(eval("context.log contains failed", &scope));
    assert!(eval("context.log contains 'tests fail'", &scope));
    assert!(!eval("context.log contains passed", &scope));
    assert!(!eval("context.missing contains x", &scope));
}

/// Fabro extension: `matches` with a regular expression (compiled once, at parse time)
#[test]
fn matches_operator() {
    let scope = Scope::context(json!({"branch": "feat/login", "version": "1.2.3"}));
    assert!(eval("context.branch matches \"^feat/\"", &scope));
    assert!(!eval("context.branch matches '^fix/'", &scope));
    assert!(eval(r"context.version matches '^\d+\.\d+\.\d+$'", &scope));
    assert!(eval(
        "outcome matches '^(success|partial_success)$'",
        &Scope::outcome(StageStatus::PartialSuccess)
    ));
    let error = parse_error("context.branch matches '('");
    assert_eq!(error.offset, 23);
    assert!(error.message.starts_with("invalid regex `(`: "), "{}", error.message);
}

/// Fabro extension: both outcome spellings (`success`/`succeeded`, `fail`/`failed`,
/// `partial_success`/`partially_succeeded`) name the same status
#[test]
fn both_outcome_spellings() {
    let cases = [
        ("succeeded", StageStatus::Success),
        ("success", StageStatus::Success),
        ("failed", StageStatus::Fail),
        ("fail", StageStatus::Fail),
        ("partially_succeeded", StageStatus::PartialSuccess),
        ("partial_success", StageStatus::PartialSuccess),
        ("retry", StageStatus::Retry),
        ("skipped", StageStatus::Skipped),
    ];
    for (spelling, status) in cases {
        let text = format!("outcome={spelling}");
        for actual in StageStatus::ALL {
            assert_eq!(eval(&text, &Scope::outcome(actual)), actual == status, "{text} with {actual}");
        }
        assert_eq!(Condition::parse(&text).unwrap().tested_outcomes(), [status]);
    }
    let error = parse_error("outcome=sucess");
    assert_eq!(error.offset, 8);
    assert_eq!(
        error.message,
        "unknown outcome `sucess` (did you mean `success`?); expected success, partial_success, retry, fail, \
         skipped or a custom outcome (a lower-case name of letters, digits and _)"
    );
}

/// Condition syntax errors carry the offset of the problem inside the condition
#[test]
fn condition_syntax_errors_have_offsets() {
    let cases: [(&str, usize, &str); 4] = [
        ("outcome=success &&", 18, "expected a key such as `outcome` or `context.name`, `!` or `(` after `&&`, found the end of the condition"),
        ("(outcome=success", 0, "unclosed `(` opened here"),
        ("outcome=success)", 15, "`)` has no matching `(`"),
        ("outcome < 3", 8, "`outcome` cannot be compared with `<`; use `=`, `!=` or `matches`"),
    ];
    for (text, offset, message) in cases {
        let error = parse_error(text);
        assert_eq!((error.offset, error.message.as_str()), (offset, message), "{text}");
    }
}

/// Condition expressions — through `fabro validate`: valid conditions pass, a bad one is an error
/// at its line and column
#[test]
fn binary_validates_conditions() {
    Test::new()
        .workflow(
            r#"digraph G {
    start [shape=Mdiamond]
    test [prompt="Test"]
    exit [shape=Msquare]
    start -> test
    test -> exit [condition="outcome=succeeded && (context.coverage >= 80 || !context.strict)"]
    test -> test [condition="context.log contains flaky || preferred_label matches '^Re'"]
    test -> exit [condition=""]
}
"#,
        )
        .args(["validate", "workflow.dot"])
        .status(0)
        .stdout_contains("workflow.dot: valid (0 warnings)")
        .run();

    let source = "digraph G {\n    start [shape=Mdiamond]\n    test [prompt=\"Test\"]\n    exit [shape=Msquare]\n    start -> test\n    test -> exit [condition=\"outcome=success && context.x >\"]\n    test -> exit\n}\n";
    Test::new()
        .workflow(source)
        .args(["validate", "workflow.dot"])
        .status(2)
        .stdout_contains(
            "error[condition_syntax] workflow.dot:6:60 edge test -> exit: invalid condition: expected a value \
             after `>`, found the end of the condition (column 31 of the condition)\n",
        )
        .stdout_contains("workflow.dot: invalid: 1 error, 0 warnings")
        .run();
    let ran = Test::new().workflow(source).args(["validate", "--json", "workflow.dot"]).status(2).run();
    let json = ran.json();
    assert_eq!(json["valid"], json!(false));
    assert_eq!(json["diagnostics"][0]["rule"], json!("condition_syntax"));
    assert_eq!(json["diagnostics"][0]["edge"], json!(["test", "exit"]));
    assert_eq!(
        (json["diagnostics"][0]["line"].clone(), json["diagnostics"][0]["column"].clone()),
        (json!(6), json!(60))
    );
}
