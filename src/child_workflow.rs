//! A manager node's child workflow: which file it names (relative to the parent file, read with
//! the manager's settings), and why it cannot run, with errors that point into the child file.
//! The loader (`load.rs`) loads children; the `child_workflow` lint rule reports what it
//! found, and the manager handler runs it. Nothing here loads a workflow.

use std::path::{Path, PathBuf};

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
