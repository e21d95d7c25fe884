//! Loading a workflow file through its phases: source text -> syntax tree -> graph -> transforms ->
//! validation. The result's type says how far it got: a [`CheckedWorkflow`] carries its
//! diagnostics and may hold errors; a [`ValidWorkflow`] has none and is what the engine runs.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tracing::debug;

use crate::diagnostic::Diagnostic;
use crate::graph::{self, Transform, Workflow};
use crate::source::SourceFile;
use crate::syntax::{self, SyntaxError};
use crate::validate::{self, Rule};

/// Why a workflow could not be loaded at all (as opposed to loaded with diagnostics).
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    #[error("cannot read `{}`: {source}", path.display())]
    Read { path: PathBuf, source: std::io::Error },
    #[error("{error}")]
    Syntax { error: SyntaxError, file: Arc<SourceFile> },
}

/// A loaded workflow with every diagnostic that transforms and rules found.
#[derive(Debug)]
pub struct CheckedWorkflow {
    pub workflow: Workflow,
    pub diagnostics: Vec<Diagnostic>,
}

impl CheckedWorkflow {
    pub fn has_errors(&self) -> bool {
        self.diagnostics.iter().any(Diagnostic::is_error)
    }

    /// The runnable workflow, or every diagnostic when any of them is an error.
    pub fn into_valid(self) -> Result<ValidWorkflow, Invalid> {
        if self.has_errors() {
            return Err(Invalid { file: self.workflow.source().clone(), diagnostics: self.diagnostics });
        }
        Ok(ValidWorkflow { workflow: self.workflow, warnings: self.diagnostics })
    }
}

/// A workflow without validation errors.
#[derive(Debug)]
pub struct ValidWorkflow {
    pub workflow: Workflow,
    pub warnings: Vec<Diagnostic>,
}

/// Validation found errors; all diagnostics (errors and warnings) are kept, with the source they
/// point into, for reporting.
#[derive(Debug, thiserror::Error)]
#[error("the workflow has {} validation error(s)", diagnostics.iter().filter(|d| d.is_error()).count())]
pub struct Invalid {
    pub file: Arc<SourceFile>,
    pub diagnostics: Vec<Diagnostic>,
}

/// Loads workflows with the built-in transforms and rules plus any registered by the caller.
pub struct Loader {
    transforms: Vec<Box<dyn Transform>>,
    custom_rules: Vec<Box<dyn Rule>>,
    custom_types: Vec<String>,
    goal: Option<String>,
    /// The workflows this one is a child of (canonical paths, outermost first).
    ancestors: Vec<PathBuf>,
}

impl Default for Loader {
    fn default() -> Self {
        Loader {
            transforms: graph::builtin_transforms(),
            custom_rules: Vec::new(),
            custom_types: Vec::new(),
            goal: None,
            ancestors: Vec::new(),
        }
    }
}

impl Loader {
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds a transform; it runs after the built-ins and earlier registrations.
    pub fn with_transform(mut self, transform: impl Transform + 'static) -> Self {
        self.transforms.push(Box::new(transform));
        self
    }

    /// Adds a lint rule; it runs after the built-in rules.
    pub fn with_rule(mut self, rule: impl Rule + 'static) -> Self {
        self.custom_rules.push(Box::new(rule));
        self
    }

    /// Declares a custom handler type so the `type_known` rule accepts it.
    pub fn with_handler_type(mut self, name: impl Into<String>) -> Self {
        self.custom_types.push(name.into());
        self
    }

    /// Replaces the graph `goal` before transforms run, so `$goal` expands to it (`--goal`).
    pub fn with_goal(mut self, goal: impl Into<String>) -> Self {
        self.goal = Some(goal.into());
        self
    }

    /// Loads workflows as children of `ancestors` (see [`crate::child_workflow`]).
    pub(crate) fn within(mut self, ancestors: Vec<PathBuf>) -> Self {
        self.ancestors = ancestors;
        self
    }

    pub fn load_file(&self, path: &Path) -> Result<CheckedWorkflow, LoadError> {
        let text = crate::regular_file::read_to_string(path, crate::regular_file::FileKind::Input)
            .map_err(|source| LoadError::Read { path: path.to_path_buf(), source })?;
        self.load_source(SourceFile::new(path, text))
    }

    pub fn load_source(&self, source: SourceFile) -> Result<CheckedWorkflow, LoadError> {
        let started = Instant::now();
        let source = Arc::new(source);
        let tree = syntax::parse(source.text())
            .map_err(|error| LoadError::Syntax { error, file: source.clone() })?;
        let parsed = Instant::now();
        let mut workflow = graph::build(&tree, source.clone());
        if let Some(goal) = &self.goal {
            let span = workflow.attributes().get("goal").map(|attr| attr.span).unwrap_or_default();
            let attr = graph::Attr {
                value: graph::Value::Text(goal.clone()),
                span,
                key_span: span,
                inherited: false,
            };
            workflow.attributes_mut().set("goal", attr);
        }
        let built = Instant::now();
        let mut diagnostics = Vec::new();
        for transform in &self.transforms {
            diagnostics.extend(transform.apply(&mut workflow));
        }
        // Transforms may have rewritten attributes (and imports gave their stages this file's
        // positions), so the settings are read from what they left.
        graph::settings::read_settings(&mut workflow);
        let transformed = Instant::now();
        let builtin_rules = validate::builtin_rules_within(self.custom_types.clone(), self.ancestors.clone());
        diagnostics.extend(validate::run_rules(&workflow, &builtin_rules));
        diagnostics.extend(validate::run_rules(&workflow, &self.custom_rules));
        validate::apply_allowed_lints(
            &workflow,
            builtin_rules.iter().chain(&self.custom_rules),
            &mut diagnostics,
        );
        validate::sort_and_dedup(&mut diagnostics);
        debug!(
            path = %workflow.source().path().display(),
            nodes = workflow.node_count(),
            edges = workflow.edge_count(),
            diagnostics = diagnostics.len(),
            parse = ?(parsed - started),
            build = ?(built - parsed),
            transform = ?(transformed - built),
            validate = ?transformed.elapsed(),
            "loaded workflow"
        );
        Ok(CheckedWorkflow { workflow, diagnostics })
    }
}
