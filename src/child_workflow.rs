//! A manager node's child workflow: which file it names (relative to the parent file) and loading
//! it through the same [`Loader`] phases as any workflow, with errors that point into the child
//! file. Used by the `child_workflow` lint rule (so `fabro validate` on the parent catches a bad
//! child) and by the manager handler when it starts the child.

use std::path::{Path, PathBuf};

use crate::graph::{HandlerType, Node, Workflow};
use crate::load::{LoadError, Loader};
use crate::source::SourceFile;
use crate::ValidWorkflow;

pub use crate::graph::settings::{ChildReference, REFERENCE_ATTRIBUTES};

/// The child workflow `node` (a manager stage of `workflow`) names, as its settings read it.
pub fn reference<'w>(_workflow: &'w Workflow, node: &'w Node) -> Option<&'w ChildReference> {
    node.settings.manager()?.child.as_ref()
}

/// One error of an invalid child workflow, positioned in the child file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChildError {
    /// `path:line:column`, or the path alone for whole-graph findings.
    pub location: String,
    pub rule: String,
    pub message: String,
    pub fix: Option<String>,
}

impl std::fmt::Display for ChildError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {} [{}]", self.location, self.message, self.rule)
    }
}

/// Why a child workflow cannot run.
#[derive(Debug, thiserror::Error)]
pub enum ChildWorkflowError {
    #[error("cannot read child workflow `{}`: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("child workflow {location}: {message}")]
    Syntax { location: String, message: String },
    #[error("child workflow `{}` has {} error(s): {}", path.display(), errors.len(), list(errors))]
    Invalid { path: PathBuf, errors: Vec<ChildError> },
    #[error("workflows run each other as children in a cycle: {}", chain_text(chain))]
    Cycle { chain: Vec<PathBuf> },
}

fn list(errors: &[ChildError]) -> String {
    errors.iter().map(ToString::to_string).collect::<Vec<_>>().join("; ")
}

fn chain_text(chain: &[PathBuf]) -> String {
    chain.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" -> ")
}

/// The canonical form of a workflow path, for finding cycles (the path itself when it cannot be
/// resolved).
pub fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

/// Loads and validates the child workflow file at `path`. `ancestors` are the canonical paths of
/// the workflows above it (outermost first); naming one of them again is a cycle.
pub fn load_file(path: &Path, ancestors: &[PathBuf]) -> Result<ValidWorkflow, ChildWorkflowError> {
    let read_error = |source| ChildWorkflowError::Read { path: path.to_path_buf(), source };
    // A device or directory is never read (`/dev/zero` would never end).
    let text = crate::regular_file::read_to_string(path, crate::regular_file::FileKind::Input)
        .map_err(read_error)?;
    load_source(SourceFile::new(path, text), ancestors)
}

/// Like [`load_file`], for source text already read (the copy stored in a child's run directory).
pub fn load_source(source: SourceFile, ancestors: &[PathBuf]) -> Result<ValidWorkflow, ChildWorkflowError> {
    let path = source.path().to_path_buf();
    let own = canonical(&path);
    if ancestors.contains(&own) {
        let mut chain = ancestors.to_vec();
        chain.push(own);
        return Err(ChildWorkflowError::Cycle { chain });
    }
    let mut nested = ancestors.to_vec();
    nested.push(own);
    let checked = match Loader::new().within(nested).load_source(source) {
        Ok(checked) => checked,
        Err(LoadError::Syntax { error, file }) => {
            let at = file.location(error.span.start);
            let location = format!("{}:{}:{}", path.display(), at.line, at.column);
            return Err(ChildWorkflowError::Syntax { location, message: error.to_string() });
        }
        Err(LoadError::Read { path, source }) => return Err(ChildWorkflowError::Read { path, source }),
    };
    checked.into_valid().map_err(|invalid| {
        let errors = invalid
            .diagnostics
            .iter()
            .filter(|diagnostic| diagnostic.is_error())
            .map(|diagnostic| ChildError {
                location: match diagnostic.location(&invalid.file) {
                    Some(at) => format!("{}:{}:{}", path.display(), at.line, at.column),
                    None => path.display().to_string(),
                },
                rule: diagnostic.rule.clone(),
                message: diagnostic.message.clone(),
                fix: diagnostic.fix.clone(),
            })
            .collect();
        ChildWorkflowError::Invalid { path: path.clone(), errors }
    })
}

/// Every child workflow below `workflow` that loads cleanly (children of children too), each
/// once: what the run could reach through its manager stages. A child that does not load is left
/// out; validation reports it.
pub fn descendants(workflow: &Workflow) -> Vec<ValidWorkflow> {
    let mut found: Vec<ValidWorkflow> = Vec::new();
    let mut seen = vec![canonical(workflow.source().path())];
    let mut pending: Vec<PathBuf> = managed_children(workflow);
    while let Some(path) = pending.pop() {
        let own = canonical(&path);
        if seen.contains(&own) {
            continue;
        }
        seen.push(own);
        if let Ok(child) = load_file(&path, &[]) {
            pending.extend(managed_children(&child.workflow));
            found.push(child);
        }
    }
    found
}

/// The child workflow paths of `workflow`'s manager stages.
fn managed_children(workflow: &Workflow) -> Vec<PathBuf> {
    workflow
        .nodes()
        .filter(|node| node.handler_type() == HandlerType::Manager)
        .filter_map(|node| reference(workflow, node).map(|reference| reference.path.clone()))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn the_node_attribute_wins_over_the_graph_default_and_paths_are_relative_to_the_parent() {
        let source = r#"digraph P {
            stack.child_dotfile="parts/default.dot"
            start [shape=Mdiamond]; exit [shape=Msquare]
            a [shape=house, stack.child_workflow="mine.dot"]
            b [shape=house]
            start -> a -> b -> exit
        }"#;
        let checked = Loader::new().load_source(SourceFile::new("flows/parent.dot", source)).expect("parses");
        let workflow = &checked.workflow;
        let a = reference(workflow, workflow.node("a").unwrap()).unwrap();
        assert_eq!((a.text.as_str(), a.path.as_path()), ("mine.dot", Path::new("flows/mine.dot")));
        let b = reference(workflow, workflow.node("b").unwrap()).unwrap();
        assert_eq!(b.path, Path::new("flows/parts/default.dot"));
    }

    #[test]
    fn child_errors_carry_the_child_files_positions() {
        let temp = tempfile::tempdir().unwrap();
        let bad = write(
            temp.path(),
            "bad.dot",
            "digraph C {\n  start [shape=Mdiamond]\n  start -> run\n  run [shape=parallelogram]\n}\n",
        );
        let error = load_file(&bad, &[]).unwrap_err();
        let ChildWorkflowError::Invalid { errors, .. } = &error else { panic!("{error}") };
        let missing_script = errors.iter().find(|e| e.rule == "command_has_script").expect("script error");
        assert_eq!(missing_script.location, format!("{}:4:3", bad.display()));
        assert!(error.to_string().contains("command stage `run` has no script"), "{error}");

        let broken = write(temp.path(), "broken.dot", "digraph C {\n  a -> \n}\n");
        let error = load_file(&broken, &[]).unwrap_err().to_string();
        assert!(error.starts_with(&format!("child workflow {}:3:1: ", broken.display())), "{error}");

        let error = load_file(&temp.path().join("none.dot"), &[]).unwrap_err().to_string();
        assert!(error.starts_with("cannot read child workflow `"), "{error}");
    }

    #[test]
    fn a_workflow_that_runs_itself_as_a_child_is_a_cycle() {
        let temp = tempfile::tempdir().unwrap();
        let path = write(
            temp.path(),
            "self.dot",
            r#"digraph S { start [shape=Mdiamond]; exit [shape=Msquare]
               again [shape=house, stack.child_workflow="self.dot"]; start -> again -> exit }"#,
        );
        let error = load_file(&path, &[]).unwrap_err().to_string();
        assert!(error.contains("in a cycle"), "{error}");
        assert!(error.contains("self.dot -> "), "{error}");
    }
}
