//! The README and the reference pages in `docs/` it links to: the language reference must name
//! every attribute, lint rule and shape the code knows, every page must be linked and every link
//! must resolve, and the README's test command must be the one CI runs. docs/cli.md's synopsis
//! names exactly the options each command's `--help` lists, with the defaults the help gives; the
//! events table of docs/run-directory.md names exactly the events fabro writes, its layout every
//! file name of `run_dir/layout.rs`; the exit codes of the docs are the help's. (What the
//! commands of the docs print is checked by `tested_docs`.)

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

/// The options `fabro COMMAND --help` lists: (short, long, default), without `--help` and
/// `--verbose`, which every command has.
fn help_options(command: &[&str]) -> Vec<(Option<String>, String, Option<String>)> {
    let mut args = command.to_vec();
    args.push("--help");
    let dir = tempfile::tempdir().expect("a directory");
    let output = crate::common::fabro_in(dir.path(), &args);
    assert!(output.status.success(), "fabro {args:?} fails");
    let help = String::from_utf8_lossy(&output.stdout).into_owned();
    let option = regex::Regex::new(r"^\s+(?:-(\w), )?--([a-z][a-z-]*)").expect("a pattern");
    let default = regex::Regex::new(r"\[default: ([^\]]*)\]").expect("a pattern");
    let mut options: Vec<(Option<String>, String, Option<String>)> = Vec::new();
    for line in help.lines() {
        if let Some(found) = option.captures(line) {
            options.push((found.get(1).map(|m| m.as_str().to_string()), found[2].to_string(), None));
        }
        if let (Some(found), Some(last)) = (default.captures(line), options.last_mut()) {
            last.2 = Some(found[1].to_string());
        }
    }
    options.retain(|(_, long, _)| long != "help" && long != "verbose");
    options
}

/// The synopsis of docs/cli.md: each command's line and the lines continuing it.
fn synopsis() -> Vec<(String, String)> {
    let cli = read("docs/cli.md");
    let start = cli.find("## Synopsis").expect("a Synopsis section");
    let block = &cli[start..];
    let block = &block[block.find("```").expect("a block") + 3..];
    let block = &block[..block.find("```").expect("the block's end")];
    let mut commands: Vec<(String, String)> = Vec::new();
    for line in block.lines() {
        match line.strip_prefix("fabro ") {
            Some(rest) => {
                let name = rest.split_whitespace().next().unwrap_or_default().to_string();
                commands.push((name, line.to_string()));
            }
            None => {
                if let Some(last) = commands.last_mut() {
                    last.1.push_str(line);
                }
            }
        }
    }
    commands
}

#[test]
fn the_synopsis_names_every_option_of_every_command_and_no_other() {
    let flag = regex::Regex::new(r"(?:^|[\s\[|])(--?[a-zA-Z][a-z-]*)").expect("a pattern");
    for (command, line) in synopsis() {
        let args: Vec<&str> = match command.as_str() {
            "memory" => vec!["memory", "list"],
            name => vec![name],
        };
        let options = help_options(&args);
        let named: Vec<String> = flag.captures_iter(&line).map(|found| found[1].to_string()).collect();
        for (short, long, _) in &options {
            let short = short.as_ref().map(|short| format!("-{short}"));
            assert!(
                named.contains(&format!("--{long}")) || short.is_some_and(|short| named.contains(&short)),
                "the synopsis of `fabro {command}` in docs/cli.md lacks --{long}"
            );
        }
        for name in &named {
            let known = options.iter().any(|(short, long, _)| {
                *name == format!("--{long}")
                    || short.as_ref().is_some_and(|short| *name == format!("-{short}"))
            });
            assert!(
                known || name == "-v",
                "the synopsis of `fabro {command}` names {name}, which `fabro {command} --help` does not list"
            );
        }
    }
}

#[test]
fn every_default_in_the_help_is_the_one_the_docs_give() {
    let cli = read("docs/cli.md");
    let paragraphs: Vec<&str> = cli.split("\n\n").collect();
    for (command, _) in synopsis() {
        for (_, long, default) in help_options(&[command.as_str()]) {
            let Some(default) = default else { continue };
            let flag = format!("--{long}");
            let says_it = paragraphs.iter().any(|paragraph| {
                paragraph.contains(&flag)
                    && paragraph.contains("default")
                    && (paragraph.contains(&format!("`{default}`"))
                        || paragraph.contains(&format!("`{flag} {default}`")))
            });
            assert!(
                says_it,
                "docs/cli.md does not say that `fabro {command} {flag}` defaults to `{default}`"
            );
        }
    }
}

#[test]
fn the_events_table_names_every_event_and_only_events() {
    let code = read("src/event.rs");
    let start = code.find("pub enum Event {").expect("the Event enum");
    let body = &code[start..];
    let body = &body[..body.find("\n}\n").expect("the enum's end")];
    let rename = regex::Regex::new(r#"#\[serde\(rename = "([a-z_.]+)"\)\]"#).expect("a pattern");
    let events: std::collections::BTreeSet<String> =
        rename.captures_iter(body).map(|found| found[1].to_string()).collect();
    let docs = read("docs/run-directory.md");
    let table = &docs[docs.find("## Events").expect("an Events section")..];
    let name = regex::Regex::new(r"`([a-z_]+\.[a-z_.]+)`").expect("a pattern");
    let documented: std::collections::BTreeSet<String> = table
        .lines()
        .filter(|line| line.starts_with("| `"))
        .filter_map(|line| line.split('|').nth(1))
        .flat_map(|cell| name.captures_iter(cell).map(|found| found[1].to_string()).collect::<Vec<_>>())
        .collect();
    let undocumented: Vec<_> = events.difference(&documented).collect();
    assert!(undocumented.is_empty(), "docs/run-directory.md's events table lacks {undocumented:?}");
    let unknown: Vec<_> = documented.difference(&events).collect();
    assert!(
        unknown.is_empty(),
        "docs/run-directory.md's events table names {unknown:?}, which are no events"
    );
}

#[test]
fn the_run_directory_layout_names_every_file_fabro_writes() {
    let layout = read("src/run_dir/layout.rs");
    let constant = regex::Regex::new(r#"pub const [A-Z_]+: &str = "([^"]+)";"#).expect("a pattern");
    let docs = read("docs/run-directory.md");
    let block = &docs[docs.find("```").expect("the layout block") + 3..];
    let block = &block[..block.find("```").expect("the block's end")];
    let missing: Vec<String> = constant
        .captures_iter(&layout)
        .map(|found| found[1].to_string())
        .filter(|name| !block.contains(name.as_str()))
        .collect();
    assert!(missing.is_empty(), "docs/run-directory.md's layout lacks {missing:?}");
}

#[test]
fn the_exit_codes_of_the_docs_are_those_of_the_help() {
    let dir = tempfile::tempdir().expect("a directory");
    let help = crate::common::fabro_in(dir.path(), &["--help"]);
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let run = help.lines().find(|line| line.trim_start().starts_with("run ")).expect("run in the help");
    let cli = read("docs/cli.md");
    let code = regex::Regex::new(r"(\d+) ([a-z][a-z ]*)").expect("a pattern");
    for found in code.captures_iter(run) {
        let row = format!("| {} |", &found[1]);
        assert!(cli.contains(&row), "docs/cli.md's exit codes lack {} ({})", &found[1], &found[2]);
    }
    assert!(
        readme().contains("0 succeeded, 1 failed, 2 invalid input, 3\npaused"),
        "the README's exit codes"
    );
}

#[test]
fn the_templates_of_fabro_new_are_described_as_its_help_describes_them() {
    let dir = tempfile::tempdir().expect("a directory");
    let help = crate::common::fabro_in(dir.path(), &["new", "--help"]);
    let help = String::from_utf8_lossy(&help.stdout).into_owned();
    let template = regex::Regex::new(r"^\s+- ([a-z-]+):\s+(.+)$").expect("a pattern");
    let cli = read("docs/cli.md");
    let mut described = 0;
    for found in help.lines().filter_map(|line| template.captures(line)) {
        let (name, description) = (&found[1], found[2].trim());
        let row = cli
            .lines()
            .find(|line| line.starts_with(&format!("| `{name}`")))
            .unwrap_or_else(|| panic!("docs/cli.md has no row for template `{name}`"));
        assert!(
            row.contains(description),
            "docs/cli.md describes `{name}` otherwise than its help: {description}"
        );
        described += 1;
    }
    assert_eq!(described, 4, "fabro new --help lists its templates:\n{help}");
}
