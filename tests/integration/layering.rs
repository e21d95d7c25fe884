//! The layers of `src/`, as docs/library.md draws them: every folder and top-level file sits on
//! one layer and imports only from layers below its own. Checked on the source (test modules and
//! comments excluded), so that a shortcut across layers fails here instead of growing a knot.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

/// The layer of each module, from the block after `<!-- layers: bottom first -->` in
/// docs/library.md: one line per layer, `N   module, module, ...`, continued on indented lines.
fn layers() -> BTreeMap<String, usize> {
    let doc = std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/library.md")).unwrap();
    let start = doc.find("<!-- layers: bottom first -->").expect("docs/library.md draws the layers");
    let block = doc[start..].split("```").nth(1).expect("the layers block");
    let mut layer_of = BTreeMap::new();
    let mut layer = None;
    for line in block.lines().filter(|line| !line.trim().is_empty()) {
        let rest = match line.split_once(char::is_whitespace) {
            Some((number, rest)) if !line.starts_with(' ') => {
                layer = Some(number.parse::<usize>().expect("a layer number"));
                rest
            }
            _ => line,
        };
        for module in rest.split(',').map(str::trim).filter(|m| !m.is_empty()) {
            let previous = layer_of.insert(module.to_string(), layer.expect("a layer number first"));
            assert!(previous.is_none(), "docs/library.md places `{module}` twice");
        }
    }
    layer_of
}

/// The module a source file belongs to: its folder under src/, or its own name.
fn module_of(path: &Path) -> String {
    let relative = path.strip_prefix(src()).unwrap();
    let first = relative.components().next().unwrap().as_os_str().to_string_lossy().into_owned();
    first.strip_suffix(".rs").map(str::to_string).unwrap_or(first)
}

fn sources() -> Vec<PathBuf> {
    let mut found = Vec::new();
    let mut pending = vec![src()];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            pending.extend(std::fs::read_dir(&path).unwrap().map(|entry| entry.unwrap().path()));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
    found
}

/// The file's code before its first `#[cfg(test)]` (test modules come last in this crate),
/// without comment lines.
fn code(path: &Path) -> Vec<(usize, String)> {
    let text = std::fs::read_to_string(path).unwrap();
    let code = text.find("#[cfg(test)]").map_or(text.as_str(), |at| &text[..at]);
    code.lines()
        .enumerate()
        .filter(|(_, line)| !line.trim_start().starts_with("//"))
        .map(|(n, line)| (n + 1, line.to_string()))
        .collect()
}

/// The modules a line names as `crate::<module>` or, in the binary, `fabro::<module>`.
fn named_modules(line: &str) -> Vec<String> {
    let mut found = Vec::new();
    for prefix in ["crate::", "fabro::"] {
        for (at, _) in line.match_indices(prefix) {
            let before = line[..at].chars().next_back();
            if before.is_some_and(|c| c.is_alphanumeric() || c == '_') {
                continue;
            }
            let name: String = line[at + prefix.len()..]
                .chars()
                .take_while(|c| c.is_ascii_lowercase() || *c == '_')
                .collect();
            if !name.is_empty() {
                found.push(name);
            }
        }
    }
    found
}

#[test]
fn every_module_sits_on_one_layer() {
    let layer_of = layers();
    let mut modules: Vec<String> = sources().iter().map(|path| module_of(path)).collect();
    modules.sort();
    modules.dedup();
    modules.retain(|module| module != "lib");
    let unplaced: Vec<&String> = modules.iter().filter(|module| !layer_of.contains_key(*module)).collect();
    assert!(unplaced.is_empty(), "docs/library.md's layers do not place {unplaced:?}");
    let gone: Vec<&String> = layer_of.keys().filter(|module| !modules.contains(module)).collect();
    assert!(gone.is_empty(), "docs/library.md's layers name modules that do not exist: {gone:?}");
}

#[test]
fn every_import_goes_down_the_layers() {
    let layer_of = layers();
    let mut climbing = Vec::new();
    for path in sources() {
        let module = module_of(&path);
        let Some(&own) = layer_of.get(&module) else { continue };
        for (line_number, line) in code(&path) {
            for named in named_modules(&line) {
                let Some(&theirs) = layer_of.get(&named) else { continue };
                if named != module && theirs >= own {
                    climbing.push(format!(
                        "{}:{line_number}: `{module}` (layer {own}) imports `{named}` (layer {theirs}): {}",
                        path.strip_prefix(src()).unwrap().display(),
                        line.trim()
                    ));
                }
            }
        }
    }
    assert!(climbing.is_empty(), "imports that do not go down the layers:\n{}", climbing.join("\n"));
}

#[test]
fn the_check_sees_a_climbing_import() {
    assert_eq!(
        named_modules("use crate::engine::Engine; let x = fabro::run_dir::RunDir::create(p);"),
        ["engine", "run_dir"]
    );
    assert!(named_modules("use mycrate::engine;").is_empty());
    let layer_of = layers();
    assert!(layer_of["engine"] > layer_of["stage"] && layer_of["stage"] > layer_of["outcome"]);
    assert!(layer_of["handlers"] == layer_of["engine"], "engine and handlers never import each other");
}

/// Where attributes may be read: the language (syntax, the graph and its settings), validation,
/// rendering a workflow back to DOT, loading (which sets `--goal`), and the language server (which
/// shows authors what they wrote and what it resolves to). Everything that runs a workflow reads
/// typed settings instead.
const READS_ATTRIBUTES: &[&str] = &["syntax", "graph", "validate", "render", "load", "lsp"];

/// The lines of runtime code that read a node's, an edge's or the graph's attributes.
fn raw_attribute_reads() -> Vec<String> {
    let mut found = Vec::new();
    for path in sources() {
        if READS_ATTRIBUTES.contains(&module_of(&path).as_str()) {
            continue;
        }
        for (number, line) in code(&path) {
            if reads_attributes(&line) {
                found.push(format!(
                    "{}:{number}: {}",
                    path.strip_prefix(src()).unwrap().display(),
                    line.trim()
                ));
            }
        }
    }
    found
}

/// Whether a line of code reads attributes: it names a field or method `attributes` (or
/// `attributes_mut`), on one line or at the start of a chained call.
fn reads_attributes(line: &str) -> bool {
    line.match_indices(".attributes").any(|(at, found)| {
        let next = line[at + found.len()..].chars().next();
        next.is_none_or(|c| !(c.is_alphanumeric() || c == '_'))
            || line[at + found.len()..].starts_with("_mut")
    })
}

#[test]
fn the_attribute_check_sees_a_raw_read() {
    assert!(reads_attributes(r#"let t = node.attributes.duration("timeout");"#));
    assert!(reads_attributes("            .attributes"));
    assert!(reads_attributes("workflow.attributes().integer(\"max_tokens\")"));
    assert!(reads_attributes("workflow.attributes_mut().set(key, attr)"));
    assert!(!reads_attributes("node.settings.stage.timeout"));
    assert!(!reads_attributes("let attributes_seen = 1;"));
}

#[test]
fn runtime_code_reads_typed_settings_not_attributes() {
    let reads = raw_attribute_reads();
    assert!(
        reads.is_empty(),
        "runtime code reads raw attributes; read them into graph::settings when the workflow loads:\n{}",
        reads.join("\n")
    );
}

/// The file names `src/run_dir/layout.rs` defines (`pub const NAME: &str = "file.ext";`; not
/// the directory names, plain words that other code uses for other things).
fn run_directory_file_names() -> Vec<String> {
    let layout = std::fs::read_to_string(src().join("run_dir/layout.rs")).unwrap();
    layout
        .lines()
        .filter_map(|line| line.strip_prefix("pub const ")?.split_once(": &str = \"")?.1.strip_suffix("\";"))
        .filter(|name| name.contains('.'))
        .map(str::to_string)
        .collect()
}

#[test]
fn only_the_layout_spells_run_directory_file_names() {
    let names = run_directory_file_names();
    assert!(names.contains(&"events.jsonl".to_string()) && names.contains(&"status.json".to_string()));
    let mut spelled = Vec::new();
    for path in sources().into_iter().filter(|path| !path.ends_with("run_dir/layout.rs")) {
        for (number, line) in code(&path) {
            for name in names.iter().filter(|name| line.contains(&format!("\"{name}\""))) {
                spelled.push(format!("{}:{number}: {name}", path.strip_prefix(src()).unwrap().display()));
            }
        }
    }
    assert!(
        spelled.is_empty(),
        "run-directory file names outside run_dir/layout.rs:\n{}",
        spelled.join("\n")
    );
}
