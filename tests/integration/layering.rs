//! The runtime's layers, as docs/library.md draws them: the stage contract (stage.rs,
//! child_run.rs, join.rs, usage.rs, event.rs, events.rs, outcome.rs) sits below both the engine and
//! the handlers; the engine and the handlers do not import each other; backends and the run
//! directory import neither; child workflows load in the loader, and validation and the graph never
//! load one. Checked on the source (test modules excluded), so that a shortcut across layers fails
//! here instead of growing a knot.

use std::path::{Path, PathBuf};

/// Every `.rs` file under `src/<part>` (a folder or one file).
fn sources(part: &str) -> Vec<PathBuf> {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("src").join(part);
    let mut found = Vec::new();
    let mut pending = vec![path];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            pending.extend(std::fs::read_dir(&path).unwrap().map(|entry| entry.unwrap().path()));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            found.push(path);
        }
    }
    assert!(!found.is_empty(), "src/{part} has no sources");
    found
}

/// The file's code before its first `#[cfg(test)]` (test modules come last in this crate).
fn code(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap();
    match text.find("#[cfg(test)]") {
        Some(at) => text[..at].to_string(),
        None => text,
    }
}

/// Lines of `part` that name any of `forbidden` (`crate::<module>`).
fn crossings(part: &str, forbidden: &[&str]) -> Vec<String> {
    let mut found = Vec::new();
    for path in sources(part) {
        for (n, line) in code(&path).lines().enumerate() {
            for module in forbidden {
                let named = format!("crate::{module}");
                let at_boundary = line.match_indices(&named).any(|(at, _)| {
                    line[at + named.len()..].chars().next().is_none_or(|c| !c.is_alphanumeric() && c != '_')
                });
                if at_boundary {
                    found.push(format!("{}:{}: {}", path.display(), n + 1, line.trim()));
                }
            }
        }
    }
    found
}

#[test]
fn the_engine_and_the_handlers_do_not_import_each_other() {
    assert_eq!(crossings("handlers", &["engine"]), Vec::<String>::new());
    assert_eq!(crossings("engine", &["handlers"]), Vec::<String>::new());
}

#[test]
fn the_stage_contract_sits_below_engine_and_handlers() {
    for part in ["stage.rs", "child_run.rs", "join.rs", "usage.rs", "event.rs", "events.rs", "outcome.rs"] {
        assert_eq!(crossings(part, &["engine", "handlers", "session", "cli"]), Vec::<String>::new());
    }
}

#[test]
fn backends_and_the_run_directory_import_neither_engine_nor_handlers() {
    assert_eq!(crossings("backends", &["engine", "handlers", "run_dir", "session"]), Vec::<String>::new());
    assert_eq!(crossings("run_dir", &["engine", "handlers", "backends", "session"]), Vec::<String>::new());
}

#[test]
fn child_workflows_load_in_the_loader_and_validation_only_reads_what_it_found() {
    for part in ["child_workflow.rs", "validate", "graph"] {
        assert_eq!(crossings(part, &["load"]), Vec::<String>::new());
    }
    assert_eq!(crossings("graph", &["validate", "child_workflow"]), Vec::<String>::new());
}
