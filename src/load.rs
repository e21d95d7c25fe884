//! Loading a workflow file through its phases: source text -> syntax tree -> graph -> transforms ->
//! settings -> child workflows -> validation. The result's type says how far it got: a
//! [`CheckedWorkflow`] carries its diagnostics and may hold errors; a [`ValidWorkflow`] has none
//! and is what the engine runs.
//!
//! The child workflows of manager stages load in their own phase, before validation, each through
//! a loader of its own (so children of children load too, and a workflow that runs itself is a
//! cycle); validation only reports what that phase found, and the engine runs what it loaded.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use tracing::debug;

use crate::child_workflow::{self, ChildError, ChildWorkflowError};
use crate::diagnostic::Diagnostic;
use crate::graph::{self, HandlerType, Transform, Workflow};
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
    /// The child workflows of its manager stages, loaded with it.
    pub children: ChildWorkflows,
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
        Ok(ValidWorkflow { workflow: self.workflow, warnings: self.diagnostics, children: self.children })
    }
}

/// A workflow without validation errors.
#[derive(Debug)]
pub struct ValidWorkflow {
    pub workflow: Workflow,
    pub warnings: Vec<Diagnostic>,
    /// The child workflows of its manager stages, loaded with it (all valid, or it would not be).
    pub children: ChildWorkflows,
}

impl ValidWorkflow {
    /// Every child workflow below this one (children of children too), each file once: what a
    /// run can reach through its manager stages.
    pub fn descendants(&self) -> Vec<&ValidWorkflow> {
        let mut seen = vec![child_workflow::canonical(self.workflow.source().path())];
        let mut found: Vec<&ValidWorkflow> = Vec::new();
        let mut pending: Vec<&ValidWorkflow> = self.children.loaded().collect();
        while let Some(child) = pending.pop() {
            let own = child_workflow::canonical(child.workflow.source().path());
            if seen.contains(&own) {
                continue;
            }
            seen.push(own);
            pending.extend(child.children.loaded());
            found.push(child);
        }
        found
    }
}

/// The child workflows of a workflow's manager stages, by manager node id: the child (with its own
/// children) or why it cannot run.
#[derive(Debug, Default)]
pub struct ChildWorkflows {
    entries: Vec<(String, Result<ValidWorkflow, Arc<ChildWorkflowError>>)>,
}

impl ChildWorkflows {
    /// The child workflow of the manager stage `node_id`; `None` when it names none.
    pub fn of(&self, node_id: &str) -> Option<Result<&ValidWorkflow, &ChildWorkflowError>> {
        let (_, loaded) = self.entries.iter().find(|(id, _)| id == node_id)?;
        Some(loaded.as_ref().map_err(|error| error.as_ref()))
    }

    /// The children that loaded.
    pub fn loaded(&self) -> impl Iterator<Item = &ValidWorkflow> {
        self.entries.iter().filter_map(|(_, loaded)| loaded.as_ref().ok())
    }

    /// The manager stages whose child cannot run, and why.
    pub fn failures(&self) -> impl Iterator<Item = (&str, &Arc<ChildWorkflowError>)> {
        self.entries.iter().filter_map(|(id, loaded)| Some((id.as_str(), loaded.as_ref().err()?)))
    }
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
    /// The run's inputs, filled into `{{ inputs.key }}`.
    inputs: graph::inputs::Inputs,
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
            inputs: Default::default(),
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

    /// The run's inputs: `{{ inputs.key }}` in any attribute reads them, and one no input defines
    /// is an error (`--input`, `--inputs`).
    pub fn with_inputs(mut self, inputs: graph::inputs::Inputs) -> Self {
        self.inputs = inputs;
        self
    }

    /// Loads workflows as children of `ancestors` (see [`load_child_source`]): a manager naming one of
    /// them again is a cycle.
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
        Ok(self.load_parsed_since(source.clone(), &tree, started))
    }

    /// Loads `source` from its syntax tree, parsed by the caller (an editor's parse with recovery,
    /// which has the tree already): every phase after parsing, as [`Loader::load_source`].
    pub fn load_parsed(&self, source: Arc<SourceFile>, tree: &syntax::SyntaxTree<'_>) -> CheckedWorkflow {
        self.load_parsed_since(source, tree, Instant::now())
    }

    fn load_parsed_since(
        &self,
        source: Arc<SourceFile>,
        tree: &syntax::SyntaxTree<'_>,
        started: Instant,
    ) -> CheckedWorkflow {
        let parsed = Instant::now();
        let mut workflow = graph::build(tree, source.clone());
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
        workflow.set_inputs(self.inputs.clone());
        let mut diagnostics = graph::inputs::render(&mut workflow);
        for transform in &self.transforms {
            diagnostics.extend(transform.apply(&mut workflow));
        }
        // Transforms may have rewritten attributes (and imports gave their stages this file's
        // positions), so the settings are read from what they left.
        graph::settings::read_settings(&mut workflow);
        let transformed = Instant::now();
        let children = self.load_children(&workflow);
        let failures = children.failures().map(|(id, error)| (id.to_string(), error.clone())).collect();
        let builtin_rules = validate::builtin_rules_with_children(self.custom_types.clone(), failures);
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
            children_and_validate = ?transformed.elapsed(),
            "loaded workflow"
        );
        CheckedWorkflow { workflow, diagnostics, children }
    }

    /// The child workflow of every manager stage that names one, loaded as a child of this
    /// workflow and the ones above it.
    fn load_children(&self, workflow: &Workflow) -> ChildWorkflows {
        let mut chain = self.ancestors.clone();
        let own = child_workflow::canonical(workflow.source().path());
        if chain.last() != Some(&own) {
            chain.push(own);
        }
        let entries = workflow
            .nodes()
            .filter(|node| node.handler_type() == HandlerType::Manager)
            .filter_map(|node| {
                let child = node.settings.child_workflow()?;
                let loaded = match child.inline {
                    true => load_child_source(
                        SourceFile::new(&child.path, child.text.clone()),
                        &chain,
                        &self.inputs,
                    ),
                    false => load_child_file(&child.path, &chain, &self.inputs),
                };
                Some((node.id.clone(), loaded.map_err(Arc::new)))
            })
            .collect();
        ChildWorkflows { entries }
    }
}

/// Loads and validates the child workflow file at `path`. `ancestors` are the canonical paths of
/// the workflows above it (outermost first); naming one of them again is a cycle. The child reads
/// the run's `inputs` as its parent does.
pub fn load_child_file(
    path: &Path,
    ancestors: &[PathBuf],
    inputs: &graph::inputs::Inputs,
) -> Result<ValidWorkflow, ChildWorkflowError> {
    let read_error = |source| ChildWorkflowError::Read { path: path.to_path_buf(), source };
    // A device or directory is never read (`/dev/zero` would never end).
    let text = crate::regular_file::read_to_string(path, crate::regular_file::FileKind::Input)
        .map_err(read_error)?;
    load_child_source(SourceFile::new(path, text), ancestors, inputs)
}

/// Like [`load_child_file`], for source text already read (the copy stored in a child's run
/// directory).
pub fn load_child_source(
    source: SourceFile,
    ancestors: &[PathBuf],
    inputs: &graph::inputs::Inputs,
) -> Result<ValidWorkflow, ChildWorkflowError> {
    let path = source.path().to_path_buf();
    let own = child_workflow::canonical(&path);
    if ancestors.contains(&own) {
        let mut chain = ancestors.to_vec();
        chain.push(own);
        return Err(ChildWorkflowError::Cycle { chain });
    }
    let mut nested = ancestors.to_vec();
    nested.push(own);
    let checked = match Loader::new().within(nested).with_inputs(inputs.clone()).load_source(source) {
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

#[cfg(test)]
mod tests {
    use super::*;

    fn write(dir: &Path, name: &str, text: &str) -> PathBuf {
        let path = dir.join(name);
        std::fs::write(&path, text).unwrap();
        path
    }

    #[test]
    fn child_errors_carry_the_child_files_positions() {
        let temp = tempfile::tempdir().unwrap();
        let bad = write(
            temp.path(),
            "bad.dot",
            "digraph C {\n  start [shape=Mdiamond]\n  start -> run\n  run [shape=parallelogram]\n}\n",
        );
        let error = load_child_file(&bad, &[], &Default::default()).unwrap_err();
        let ChildWorkflowError::Invalid { errors, .. } = &error else { panic!("{error}") };
        let missing_script = errors.iter().find(|e| e.rule == "command_has_script").expect("script error");
        assert_eq!(missing_script.location, format!("{}:4:3", bad.display()));
        assert!(error.to_string().contains("command stage `run` has no script"), "{error}");

        let broken = write(temp.path(), "broken.dot", "digraph C {\n  a -> \n}\n");
        let error = load_child_file(&broken, &[], &Default::default()).unwrap_err().to_string();
        assert!(error.starts_with(&format!("child workflow {}:3:1: ", broken.display())), "{error}");

        let error =
            load_child_file(&temp.path().join("none.dot"), &[], &Default::default()).unwrap_err().to_string();
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
        let error = load_child_file(&path, &[], &Default::default()).unwrap_err().to_string();
        assert!(error.contains("in a cycle"), "{error}");
        assert!(error.contains("self.dot -> "), "{error}");
    }

    #[test]
    fn children_load_with_their_parent_each_with_its_own_children() {
        let temp = tempfile::tempdir().unwrap();
        let manager = |id: &str, child: &str| {
            format!(
                "digraph {id} {{ start [shape=Mdiamond]; exit [shape=Msquare]\n\
                 m [shape=house, stack.child_workflow=\"{child}\"]; start -> m -> exit }}"
            )
        };
        write(
            temp.path(),
            "leaf.dot",
            "digraph leaf { start [shape=Mdiamond]; exit [shape=Msquare]; start -> exit }",
        );
        write(temp.path(), "middle.dot", &manager("middle", "leaf.dot"));
        let parent = write(temp.path(), "parent.dot", &manager("parent", "middle.dot"));
        let valid = Loader::new().load_file(&parent).unwrap().into_valid().unwrap();
        let middle = valid.children.of("m").expect("m names a child").expect("it loads");
        assert_eq!(middle.workflow.name(), "middle");
        let leaf = middle.children.of("m").expect("a grandchild").expect("it loads");
        assert_eq!(leaf.workflow.name(), "leaf");
        assert_eq!(valid.children.of("start").map(|child| child.is_ok()), None);
        let names: Vec<String> =
            valid.descendants().iter().map(|child| child.workflow.name().to_string()).collect();
        assert_eq!(names, ["middle", "leaf"]);

        // What the phase could not load is what validation reports.
        write(temp.path(), "middle.dot", &manager("middle", "gone.dot"));
        let checked = Loader::new().load_file(&parent).unwrap();
        let failures: Vec<&str> = checked.children.failures().map(|(id, _)| id).collect();
        assert_eq!(failures, ["m"]);
        let reported = checked.diagnostics.iter().find(|d| d.rule == "child_workflow").expect("reported");
        assert!(reported.message.contains("cannot read child workflow"), "{}", reported.message);
    }
}
