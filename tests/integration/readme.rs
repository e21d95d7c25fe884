//! The README and the reference pages in `docs/` it links to: the language reference must name
//! every attribute, lint rule and shape the code knows, every page must be linked and every link
//! must resolve, and the README's test command must be the one CI runs.

use fabro::graph::attribute::ATTRIBUTES;
use fabro::graph::HandlerType;
use fabro::validate::builtin_rules;

fn read(path: &str) -> String {
    std::fs::read_to_string(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path)).expect(path)
}

fn readme() -> String {
    read("README.md")
}

/// The workflow language reference.
fn language() -> String {
    read("docs/language.md")
}

/// The targets of the relative Markdown links `](target)` in `text`, without any `#fragment`.
fn relative_links(text: &str) -> Vec<String> {
    text.split("](")
        .skip(1)
        .filter_map(|rest| rest.split(')').next())
        .filter(|target| !target.starts_with("http") && !target.starts_with('#'))
        .map(|target| target.split('#').next().unwrap_or(target).to_string())
        .collect()
}

#[test]
fn every_docs_page_is_linked_from_the_readme_and_every_link_resolves() {
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR"));
    let readme_links = relative_links(&readme());
    for entry in std::fs::read_dir(root.join("docs")).expect("docs/") {
        let name = entry.unwrap().file_name().to_string_lossy().into_owned();
        if !name.ends_with(".md") {
            continue;
        }
        let page = format!("docs/{name}");
        assert!(readme_links.contains(&page), "the README does not link {page}");
        for link in relative_links(&read(&page)) {
            assert!(root.join("docs").join(&link).exists(), "{page} links {link}, which does not exist");
        }
    }
    for link in readme_links {
        assert!(root.join(&link).exists(), "the README links {link}, which does not exist");
    }
}

#[test]
fn every_attribute_is_documented() {
    let readme = language();
    let missing: Vec<_> = ATTRIBUTES
        .iter()
        .map(|spec| spec.name)
        .filter(|name| !readme.contains(&format!("`{name}`")))
        .collect();
    assert!(missing.is_empty(), "docs/language.md lacks attributes: {missing:?}");
}

#[test]
fn every_lint_rule_is_documented() {
    let readme = language();
    let mut ids: Vec<String> = builtin_rules(Vec::new()).iter().map(|rule| rule.id().to_string()).collect();
    ids.extend(["syntax".to_string(), "prompt_file".to_string()]);
    let missing: Vec<_> = ids.iter().filter(|id| !readme.contains(&format!("| `{id}` |"))).collect();
    assert!(missing.is_empty(), "docs/language.md lacks lint rules: {missing:?}");
}

#[test]
fn every_shape_and_type_is_documented() {
    let readme = language();
    let missing: Vec<_> = HandlerType::known_shapes()
        .chain(HandlerType::known_names())
        .filter(|name| !readme.contains(&format!("`{name}`")))
        .collect();
    assert!(missing.is_empty(), "docs/language.md lacks shapes or types: {missing:?}");
}

#[test]
fn readme_test_command_is_what_ci_runs() {
    let readme = readme();
    let ci = std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/.ci/run")).expect(".ci/run");
    let command = readme
        .lines()
        .skip_while(|line| !line.starts_with("# run the whole test suite"))
        .nth(1)
        .map(str::trim)
        .expect("README's set-up block names the test command");
    assert!(ci.lines().any(|line| line.trim() == command), "`{command}` is not a line of .ci/run");
    let script =
        std::fs::read_to_string(concat!(env!("CARGO_MANIFEST_DIR"), "/scripts/test")).expect("scripts/test");
    assert!(
        script.lines().any(|line| line.trim() == "cargo test --locked \"$@\""),
        "scripts/test runs cargo test"
    );
}

#[test]
fn the_architecture_section_names_every_module_and_only_modules_that_exist() {
    let library = read("docs/library.md");
    let start = library.find("## Architecture").expect("an Architecture section");
    let block = &library[start..];
    let block = &block[block.find("```").unwrap() + 3..];
    let block = &block[..block.find("```").unwrap()];
    let mut named = std::collections::BTreeSet::new();
    for word in block.split(|c: char| c.is_whitespace() || c == ',') {
        if word.starts_with("src/") || word.starts_with("grammar/") {
            let path = word.trim_end_matches('/');
            assert!(
                std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join(path).exists(),
                "docs/library.md names `{path}`, which does not exist"
            );
            named.insert(path.to_string());
        }
    }
    for entry in
        std::fs::read_dir(std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("src")).unwrap().flatten()
    {
        let path = format!("src/{}", entry.file_name().to_string_lossy());
        assert!(named.contains(&path), "docs/library.md's architecture does not name `{path}`");
    }
}
