//! The README is the authoring reference: it must name every attribute, lint rule and shape the
//! code knows, and its test command must be the one CI runs.

use fabro::graph::attribute::ATTRIBUTES;
use fabro::graph::HandlerType;
use fabro::validate::builtin_rules;

fn readme() -> String {
    std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/README.md")).expect("README.md")
}

#[test]
fn every_attribute_is_documented() {
    let readme = readme();
    let missing: Vec<_> = ATTRIBUTES
        .iter()
        .map(|spec| spec.name)
        .filter(|name| !readme.contains(&format!("`{name}`")))
        .collect();
    assert!(missing.is_empty(), "README lacks attributes: {missing:?}");
}

#[test]
fn every_lint_rule_is_documented() {
    let readme = readme();
    let mut ids: Vec<String> = builtin_rules(Vec::new()).iter().map(|rule| rule.id().to_string()).collect();
    ids.extend(["syntax".to_string(), "prompt_file".to_string()]);
    let missing: Vec<_> = ids.iter().filter(|id| !readme.contains(&format!("| `{id}` |"))).collect();
    assert!(missing.is_empty(), "README lacks lint rules: {missing:?}");
}

#[test]
fn every_shape_and_type_is_documented() {
    let readme = readme();
    let missing: Vec<_> = HandlerType::known_shapes()
        .chain(HandlerType::known_names())
        .filter(|name| !readme.contains(&format!("`{name}`")))
        .collect();
    assert!(missing.is_empty(), "README lacks shapes or types: {missing:?}");
}

#[test]
fn readme_test_command_is_what_ci_runs() {
    let readme = readme();
    let ci = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/run")).expect(".ci/run");
    let command = readme
        .lines()
        .find_map(|line| line.split('#').next().map(str::trim).filter(|cmd| cmd.starts_with("cargo test")))
        .expect("README has a cargo test command");
    assert!(ci.lines().any(|line| line.trim() == command), "`{command}` is not a line of .ci/run");
}
