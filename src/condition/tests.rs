use serde_json::{json, Map, Value};

use super::*;

/// A run state for tests: outcome, preferred label and a flat context map.
#[derive(Default)]
struct TestScope {
    outcome: Option<StageStatus>,
    label: Option<String>,
    context: Map<String, Value>,
}

impl ConditionScope for TestScope {
    fn outcome(&self) -> Option<StageStatus> {
        self.outcome
    }
    fn preferred_label(&self) -> Option<&str> {
        self.label.as_deref()
    }
    fn context(&self, key: &str) -> Option<&Value> {
        self.context.get(key)
    }
}

fn with_context(context: Value) -> TestScope {
    TestScope { context: context.as_object().cloned().unwrap_or_default(), ..TestScope::default() }
}

fn with_outcome(outcome: StageStatus) -> TestScope {
    TestScope { outcome: Some(outcome), ..TestScope::default() }
}

fn eval(text: &str, scope: &TestScope) -> bool {
    match Condition::parse(text) {
        Ok(condition) => condition.evaluate(scope),
        Err(error) => panic!("`{text}` did not parse: {error} at {}", error.offset),
    }
}

fn parse_error(text: &str) -> ConditionError {
    match Condition::parse(text) {
        Ok(_) => panic!("`{text}` parsed but should not"),
        Err(error) => error,
    }
}

#[test]
fn documented_examples_parse() {
    for text in [
        "outcome=success",
        "context.loop_state!=exhausted",
        "preferred_label=Fix",
        "context.score >= 0.8",
        "context.files contains \"src/main.rs\"",
        "context.branch matches \"^feat/.*\"",
        "tests_passed=true",
        "context.tests.passed",
        "outcome == partially_succeeded || !(context.a-b.c_d < -1.5e3)",
    ] {
        assert!(Condition::parse(text).is_ok(), "{text}");
    }
}

#[test]
fn outcome_accepts_both_spellings() {
    let success = with_outcome(StageStatus::Success);
    assert!(eval("outcome=success", &success));
    assert!(eval("outcome=succeeded", &success));
    assert!(eval("outcome == 'SUCCESS'", &success));
    assert!(!eval("outcome=fail", &success));
    assert!(eval("outcome!=failed", &success));
    let failed = with_outcome(StageStatus::Fail);
    assert!(eval("outcome=failed", &failed));
    assert!(eval("outcome=fail", &failed));
    let partial = with_outcome(StageStatus::PartialSuccess);
    assert!(eval("outcome=partially_succeeded", &partial));
    assert!(eval("outcome matches \"^partial\"", &partial));
    assert!(eval("outcome", &partial));
    let none = TestScope::default();
    assert!(!eval("outcome=success", &none));
    assert!(eval("outcome!=success", &none));
    assert!(!eval("outcome", &none));
}

#[test]
fn preferred_label_compares_case_sensitively() {
    let scope = TestScope { label: Some("Fix".into()), ..TestScope::default() };
    assert!(eval("preferred_label=Fix", &scope));
    assert!(!eval("preferred_label=fix", &scope));
    assert!(eval("preferred_label", &scope));
    assert!(!eval("preferred_label", &TestScope::default()));
}

#[test]
fn missing_keys_behave_as_empty_string() {
    let scope = TestScope::default();
    assert!(eval("context.x!=foo", &scope));
    assert!(!eval("context.x=foo", &scope));
    assert!(eval("context.x=\"\"", &scope));
    assert!(eval("context.x==''", &scope));
    assert!(!eval("context.x", &scope));
    assert!(!eval("context.x contains a", &scope));
    assert!(eval("context.x contains ''", &scope));
    assert!(eval("context.x matches '^$'", &scope));
    assert!(!eval("context.x >= 0", &scope));
}

#[test]
fn context_keys_resolve_with_prefix_fallback_and_plain_keys() {
    let scope = with_context(json!({
        "tests.passed": true,
        "context.legacy": "yes",
        "loop_state": "running",
    }));
    assert!(eval("context.tests.passed", &scope));
    assert!(eval("tests.passed=true", &scope));
    assert!(eval("context.legacy=yes", &scope));
    assert!(eval("loop_state=running", &scope));
    assert!(eval("context.loop_state!=exhausted", &scope));
}

#[test]
fn equality_is_numeric_only_for_json_numbers() {
    let scope =
        with_context(json!({"float": 1.0, "text": "1", "int": 1, "word": "one", "id": "007", "v": "1.1"}));
    assert!(eval("context.float=1", &scope));
    assert!(eval("context.int=\"1\"", &scope));
    assert!(eval("context.int=1.0", &scope));
    // Strings compare exactly, even when they look like numbers.
    assert!(eval("context.text=1", &scope));
    assert!(!eval("context.text=1.0", &scope));
    assert!(!eval("context.id=7", &scope));
    assert!(eval("context.id=007", &scope));
    assert!(!eval("context.v=1.10", &scope));
    assert!(!eval("context.word=1", &scope));
}

#[test]
fn booleans_and_null_compare_as_text() {
    let scope = with_context(json!({"passed": true, "failed": false, "nothing": null, "list": [1, "a"]}));
    assert!(eval("passed=true", &scope));
    assert!(eval("failed=false", &scope));
    assert!(!eval("passed=false", &scope));
    assert!(!eval("passed=True", &scope));
    assert!(eval("nothing=''", &scope));
    assert!(eval("list='[1,\"a\"]'", &scope));
}

#[test]
fn ordering_operators_are_numeric() {
    let scope = with_context(json!({"score": 0.85, "text": "0.9", "word": "high", "int": 3}));
    assert!(eval("context.score >= 0.8", &scope));
    assert!(eval("context.score > 0.8", &scope));
    assert!(!eval("context.score < 0.8", &scope));
    assert!(eval("context.score <= 0.85", &scope));
    assert!(eval("context.text>0.85", &scope));
    assert!(eval("context.int<=3", &scope));
    assert!(eval("context.int<4", &scope));
    assert!(!eval("context.word > 0", &scope));
    assert!(!eval("context.word < 0", &scope));
    assert!(!eval("context.missing < 1", &scope));
}

#[test]
fn contains_checks_array_elements_or_substrings() {
    let scope = with_context(json!({
        "files": ["src/main.rs", "README.md"],
        "counts": [1.0, 2],
        "log": "3 tests passed",
        "config": {"mode": "fast"},
    }));
    assert!(eval("context.files contains \"src/main.rs\"", &scope));
    assert!(!eval("context.files contains main", &scope));
    assert!(eval("context.counts contains 1", &scope));
    assert!(eval("context.log contains passed", &scope));
    assert!(eval("context.log contains 'tests passed'", &scope));
    assert!(!eval("context.log contains failed", &scope));
    assert!(eval("context.config contains fast", &scope));
}

#[test]
fn not_contains_is_spelled_as_other_dialects_write_it() {
    let scope = with_context(json!({"files": ["src/main.rs"], "log": "3 tests passed"}));
    for negated in ["!contains", "not contains", "not \t contains"] {
        assert!(eval(&format!("context.log {negated} failed"), &scope), "{negated}");
        assert!(!eval(&format!("context.log {negated} passed"), &scope), "{negated}");
        assert!(!eval(&format!("context.files {negated} \"src/main.rs\""), &scope), "{negated}");
        assert!(eval(&format!("context.missing {negated} x && context.log contains tests"), &scope));
    }
    // A word that only starts like the operator is not one.
    parse_error("context.log !containsx y");
    parse_error("context.log not containing y");
    assert!(parse_error("outcome !contains fail")
        .to_string()
        .contains("cannot be compared with `!contains`"));
}

#[test]
fn matches_uses_the_regex_on_the_comparison_text() {
    let scope = with_context(json!({"branch": "feat/login", "n": 42}));
    assert!(eval("context.branch matches \"^feat/.*\"", &scope));
    assert!(!eval("context.branch matches '^fix/'", &scope));
    assert!(eval("context.n matches '^\\d+$'", &scope));
}

#[test]
fn bare_keys_test_truthiness() {
    let scope = with_context(json!({
        "yes": true, "no": false, "null": null, "empty": "", "false_text": "false",
        "zero_text": "0", "zero": 0, "zero_float": 0.0, "one": 1, "text": "x",
        "empty_list": [], "list": [0], "empty_map": {}, "map": {"a": 1},
    }));
    for key in ["yes", "one", "text", "list", "map"] {
        assert!(eval(key, &scope), "{key} should be truthy");
    }
    for key in [
        "no",
        "null",
        "empty",
        "false_text",
        "zero_text",
        "zero",
        "zero_float",
        "empty_list",
        "empty_map",
        "missing",
    ] {
        assert!(!eval(key, &scope), "{key} should be falsy");
    }
}

#[test]
fn boolean_operators_follow_precedence() {
    let scope = with_context(json!({"t": true, "f": false}));
    // `&&` binds tighter than `||`: t || (f && f).
    assert!(eval("t || f && f", &scope));
    assert!(!eval("(t || f) && f", &scope));
    // `!` binds tighter than `&&`: (!f) && f.
    assert!(!eval("!f && f", &scope));
    assert!(eval("!(f && f)", &scope));
    assert!(eval("!!t", &scope));
    assert!(!eval("! ! ! t", &scope));
    assert!(eval("f || f || t", &scope));
    assert!(!eval("t && t && f", &scope));
    assert!(eval("((t))", &scope));
    assert!(eval("!(context.t = false) && (f || t = true)", &scope));
}

#[test]
fn whitespace_between_tokens_is_free() {
    let scope = TestScope {
        outcome: Some(StageStatus::Success),
        context: with_context(json!({"x": "1"})).context,
        ..TestScope::default()
    };
    assert!(eval("outcome=success&&context.x=1", &scope));
    assert!(eval("  outcome\t==\n success  &&(  context.x  >=  1 )  ", &scope));
    assert!(eval("!(outcome!=success)||x", &scope));
}

#[test]
fn quoted_values_unescape() {
    let scope = with_context(json!({"a": "say \"hi\"\\\n\t", "b": "x\\d", "c": "a && b"}));
    assert!(eval(r#"a = "say \"hi\"\\\n\t""#, &scope));
    assert!(eval(r"b = 'x\d'", &scope));
    assert!(eval("c = 'a && b'", &scope));
    assert!(eval("c contains \"&& b\"", &scope));
}

#[test]
fn error_offsets_point_at_the_problem() {
    let cases = [
        ("outcome = ", 10),
        ("a && && b", 5),
        ("(a = 1", 0),
        ("x && (a = 1 || (b)", 5),
        ("a = b c", 6),
        ("a)", 1),
        ("a = )", 4),
        ("!", 1),
        ("a && ", 5),
        ("a = 'x", 4),
        ("a = \"x\\q\"", 6),
        ("context.score >= high", 17),
        ("outcome < 1", 8),
        ("outcome contains s", 8),
        ("", 0),
        ("   ", 0),
        ("a containsx", 2),
    ];
    for (text, offset) in cases {
        assert_eq!(parse_error(text).offset, offset, "offset for `{text}`");
    }
}

#[test]
fn error_messages_are_plain_words() {
    let message = |text: &str| parse_error(text).message;
    assert_eq!(
        message("outcome %"),
        "expected an operator (=, !=, <, <=, >, >=, contains, !contains, matches), `&&`, `||` or the end \
         of the condition after `outcome`, found `%`"
    );
    assert_eq!(message("outcome = "), "expected a value after `=`, found the end of the condition");
    assert_eq!(
        message("a && && b"),
        "expected a key such as `outcome` or `context.name`, `!` or `(` after `&&`, found `&&`"
    );
    assert_eq!(message("(a = 1"), "unclosed `(` opened here");
    assert_eq!(message("(a = 1 b"), "expected `&&`, `||` or `)` after `1`, found `b`");
    assert_eq!(message("a)"), "`)` has no matching `(`");
    assert_eq!(message("a = 'x"), "unclosed `'` opened here");
    assert_eq!(message(""), "the condition is empty");
    assert_eq!(message("context.score >= high"), "`>=` compares numbers, but `high` is not a number");
}

#[test]
fn other_outcome_names_are_custom_outcomes_and_malformed_ones_are_errors() {
    // kilroy's custom outcomes: any lower-case name but a near miss of a built-in one.
    let condition = Condition::parse("outcome=needs_dod || outcome=Has_DoD").unwrap();
    let tested: Vec<&str> = condition.tested_outcomes().iter().map(|status| status.as_str()).collect();
    assert_eq!(tested, ["needs_dod", "has_dod"]);
    let error = parse_error("outcome=sucess");
    assert_eq!(error.offset, 8);
    assert!(error.message.contains("(did you mean `success`?)"), "{}", error.message);
    let error = parse_error("outcome = 'two words'");
    assert_eq!(error.offset, 10);
    assert!(error.message.starts_with("unknown outcome `two words`; expected success"), "{}", error.message);
    let error = parse_error("outcome != \"fail d\"");
    assert!(error.message.contains("(did you mean `failed`?)"), "{}", error.message);
    let error = parse_error("outcome=''");
    assert_eq!(error.offset, 8);
    assert!(error.message.starts_with("expected an outcome"), "{}", error.message);
    let error = parse_error("outcome='9 bananas'");
    assert!(!error.message.contains("did you mean"), "{}", error.message);
}

#[test]
fn invalid_regex_is_a_parse_error_at_the_literal() {
    let error = parse_error("context.branch matches \"feat/(\"");
    assert_eq!(error.offset, 23);
    assert!(error.message.starts_with("invalid regex `feat/(`: "), "{}", error.message);
    assert!(!error.message.contains('\n'), "{}", error.message);
}

#[test]
fn deep_nesting_is_refused_without_overflowing() {
    let deep = format!("{}a{}", "(".repeat(10_000), ")".repeat(10_000));
    assert_eq!(parse_error(&deep).offset, 64);
    let ok = format!("{}a{}", "(".repeat(64), ")".repeat(64));
    assert!(Condition::parse(&ok).is_ok());
    let negations = format!("{}a", "!".repeat(10_001));
    assert!(!eval(&negations, &with_context(json!({"a": true}))));
    assert!(
        Condition::parse("a = '((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((((('").is_ok()
    );
}

#[test]
fn accessors_report_keys_outcomes_and_text() {
    let text =
        " outcome=succeeded || (context.a.b && x != 1) || !(outcome = fail) && context.a.b || outcome!=retry";
    let condition = Condition::parse(text).unwrap_or_else(|error| panic!("{error}"));
    assert_eq!(condition.context_keys(), vec!["a.b", "x"]);
    assert_eq!(condition.tested_outcomes(), vec![StageStatus::Success, StageStatus::Fail]);
    assert!(condition.tests_outcome());
    assert_eq!(condition.text(), text);
    assert_eq!(condition.to_string(), text);
    let plain = Condition::parse("context.x").unwrap_or_else(|error| panic!("{error}"));
    assert!(!plain.tests_outcome());
    assert!(plain.tested_outcomes().is_empty());
}

/// Deterministic xorshift64 so the fuzz corpus is the same on every run.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
}

#[test]
fn random_inputs_never_panic() {
    const TOKENS: [&str; 40] = [
        "outcome",
        "preferred_label",
        "context.",
        "a",
        "b.c",
        "x-y",
        "=",
        "==",
        "!=",
        "<",
        "<=",
        ">",
        ">=",
        " contains ",
        " matches ",
        "&&",
        "||",
        "!",
        "(",
        ")",
        " ",
        " ",
        "\"",
        "'",
        "\\",
        "success",
        "sucess",
        "fail",
        "1",
        "0.5",
        "-",
        "[",
        "*",
        ".",
        "é",
        "\t",
        "x",
        "&",
        "|",
        "^a+$",
    ];
    let scopes = [
        TestScope::default(),
        TestScope {
            outcome: Some(StageStatus::Fail),
            label: Some("Fix".into()),
            context: with_context(json!({"a": [1, "x"], "b.c": 0.5, "x": "1", "x-y": true})).context,
        },
    ];
    let mut rng = XorShift(0x9E37_79B9_7F4A_7C15);
    let mut parsed = 0;
    for _ in 0..5_000 {
        let length = rng.next() % 12;
        let text: String = (0..length).map(|_| TOKENS[(rng.next() % TOKENS.len() as u64) as usize]).collect();
        match Condition::parse(&text) {
            Ok(condition) => {
                parsed += 1;
                for scope in &scopes {
                    condition.evaluate(scope);
                }
                let _ = (condition.context_keys(), condition.tested_outcomes());
            }
            Err(error) => {
                assert!(text.is_char_boundary(error.offset), "{text:?}: {error:?}");
                assert!(!error.message.is_empty());
                assert!(!error.message.contains("Rule") && !error.message.contains("_op"), "{error:?}");
            }
        }
    }
    assert!(parsed > 50, "only {parsed} of the random inputs parsed");
}
