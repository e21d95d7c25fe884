//! What the server knows of a buffer: its findings (syntax errors, then everything `fabro
//! validate` reports for what parses, with recovery past broken statements), the loaded workflow,
//! and where every node id and attribute is written.

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::config_files::ConfigFiles;
use crate::diagnostic::Diagnostic;
use crate::load::{CheckedWorkflow, Loader};
use crate::run_settings;
use crate::source::{SourceFile, Span};
use crate::syntax::{self, Attribute, DefaultsKind, Edit, Statement, SyntaxTree};

/// A buffer analysed.
#[derive(Debug)]
pub struct Analysis {
    /// Syntax errors first, then the loader's diagnostics, as `fabro validate` orders them.
    pub findings: Vec<Diagnostic>,
    /// The workflow as loaded from the (recovered) text, when it parsed.
    pub checked: Option<CheckedWorkflow>,
    pub index: Index,
}

/// Where things are written in the (recovered) text.
#[derive(Debug, Default)]
pub struct Index {
    pub ids: Vec<IdSite>,
    pub attributes: Vec<AttrSite>,
}

/// A place a node id is written.
#[derive(Debug, Clone, PartialEq)]
pub struct IdSite {
    pub name: String,
    /// The id as written (with its quotes, if any).
    pub span: Span,
    pub role: Role,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// `a [..]`: a node statement.
    Declaration,
    /// `a -> b`.
    Endpoint,
    /// The value of `retry_target` or `fallback_retry_target`.
    RetryTarget,
}

/// One `key=value` as written, with what it belongs to.
#[derive(Debug, Clone, PartialEq)]
pub struct AttrSite {
    pub key: String,
    pub key_span: Span,
    pub value: String,
    pub value_span: Span,
    pub owner: Owner,
}

#[derive(Debug, Clone, PartialEq)]
pub enum Owner {
    Graph,
    Node(String),
    Edge(Vec<String>),
    Defaults(DefaultsKind),
}

impl Index {
    /// Every place `name` is written, declarations first.
    pub fn sites_of<'a>(&'a self, name: &'a str) -> impl Iterator<Item = &'a IdSite> + 'a {
        let declared =
            self.ids.iter().filter(move |site| site.name == name && site.role == Role::Declaration);
        declared
            .chain(self.ids.iter().filter(move |site| site.name == name && site.role != Role::Declaration))
    }

    /// The node id written at `offset` (the end of an id counts, as a cursor just after it).
    pub fn id_at(&self, offset: usize) -> Option<&IdSite> {
        self.ids.iter().find(|site| site.span.start <= offset && offset <= site.span.end)
    }

    /// The attribute whose key or value is at `offset`, and whether it is the key.
    pub fn attribute_at(&self, offset: usize) -> Option<(&AttrSite, bool)> {
        self.attributes.iter().find_map(|site| {
            if site.key_span.start <= offset && offset <= site.key_span.end {
                Some((site, true))
            } else if site.value_span.start <= offset && offset <= site.value_span.end {
                Some((site, false))
            } else {
                None
            }
        })
    }

    /// Node ids in order of first appearance, each once.
    pub fn node_names(&self) -> Vec<&str> {
        let mut seen = rustc_hash::FxHashSet::default();
        self.ids
            .iter()
            .filter(|site| site.role != Role::RetryTarget)
            .map(|site| site.name.as_str())
            .filter(|name| seen.insert(*name))
            .collect()
    }
}

/// Analyses the buffer `text` of the file at `path`, loaded by `loader`. `earlier` is the tree an
/// earlier analysis parsed and the region edited since (none: the text is the tree's): only the
/// statements that region touched are parsed again, when that gives what a whole parse would.
/// Returns, for the next analysis, the tree parsed and the region of `text` it does not show
/// (lines the recovery from a syntax error blanked), if any.
pub fn analyze(
    path: &Path,
    text: &str,
    loader: &Loader,
    earlier: Option<(SyntaxTree<'static>, Option<Edit>)>,
) -> (Analysis, Option<(SyntaxTree<'static>, Option<Edit>)>) {
    let load = |parsed: &str, tree: &SyntaxTree<'_>| {
        let source = Arc::new(SourceFile::new(path, parsed));
        (index_of(&tree.statements), loader.load_parsed(source, tree))
    };
    let use_tree = |patched: &str, tree: SyntaxTree<'_>| {
        let (index, checked) = load(patched, &tree);
        // The tree is kept for the next edit, with the lines the recovery blanked (if it did) as
        // edited: the next analysis parses them again. A tree of a text the recovery closed with
        // a brace is not.
        let same_length = patched.len() == text.len();
        let kept = same_length.then(|| (tree.into_owned(), syntax::changed_region(text, patched)));
        (index, checked, kept)
    };
    let recovered = match earlier {
        Some((tree, Some(edit))) => syntax::reparse_recovering(tree, edit, text, use_tree),
        // The text is the one the tree was parsed from (a file it reads changed).
        Some((tree, None)) => syntax::Recovered { errors: Vec::new(), parsed: Some(use_tree(text, tree)) },
        None => syntax::parse_recovering(text, use_tree),
    };
    let mut findings: Vec<Diagnostic> = recovered
        .errors
        .iter()
        .map(|error| {
            let diagnostic = Diagnostic::error("syntax", error.to_string()).span(error.span);
            match error.help() {
                Some(help) => diagnostic.fix(help),
                None => diagnostic,
            }
        })
        .collect();
    let Some((index, checked, kept)) = recovered.parsed else {
        return (Analysis { findings, checked: None, index: Index::default() }, None);
    };
    findings.extend(checked.diagnostics.iter().cloned());
    // A finding in text the recovery appended (a closing brace) points at the end of the buffer.
    for finding in &mut findings {
        if let Some(span) = &mut finding.span {
            span.start = span.start.min(text.len());
            span.end = span.end.min(text.len());
        }
        finding.edits.retain(|edit| edit.span.end <= text.len());
    }
    (Analysis { findings, checked: Some(checked), index }, kept)
}

/// What the settings layers make of a buffer, as `fabro validate` reads them.
pub struct BufferSettings {
    /// A loader with the goal and inputs of the layers.
    pub loader: Loader,
    /// A mistake in them: a finding of rule `settings`, as `fabro validate` reports it (the
    /// workflow is then loaded without them).
    pub error: Option<Diagnostic>,
    /// The layers' files (there or not): a change to one changes the findings.
    pub files: Vec<PathBuf>,
}

/// The settings layers of the workflow at `path` when run in `work_dir`: the user's config file,
/// the project's, the `workflow.toml` (and `fabro.toml`) beside it.
pub fn settings_for(work_dir: &Path, path: &Path) -> BufferSettings {
    let sources = run_settings::Sources::for_run(work_dir, Some(path), None);
    let files = [&sources.user, &sources.project, &sources.workflow, &sources.workflow_hooks];
    let files = files.into_iter().flatten().cloned().collect();
    match run_settings::load(&sources, &ConfigFiles::from_disk()) {
        Ok(settings) => {
            let inputs = settings.inputs.as_ref().map(|set| set.value.clone()).unwrap_or_default();
            BufferSettings { loader: settings.loader(inputs), error: None, files }
        }
        Err(error) => BufferSettings {
            loader: Loader::new(),
            error: Some(Diagnostic::error("settings", error.to_string())),
            files,
        },
    }
}

fn index_of(statements: &[Statement<'_>]) -> Index {
    let mut index = Index::default();
    add_statements(statements, &mut index);
    index
}

fn add_statements(statements: &[Statement<'_>], index: &mut Index) {
    for statement in statements {
        match statement {
            Statement::Defaults { kind, attributes, .. } => {
                add_attributes(attributes, Owner::Defaults(*kind), index)
            }
            Statement::GraphAttribute(attribute) => {
                add_attributes(std::slice::from_ref(attribute), Owner::Graph, index)
            }
            Statement::Node { id, attributes } => {
                index.ids.push(IdSite { name: id.name.to_string(), span: id.span, role: Role::Declaration });
                add_attributes(attributes, Owner::Node(id.name.to_string()), index);
            }
            Statement::Edge { endpoints, attributes, .. } => {
                for endpoint in endpoints {
                    index.ids.push(IdSite {
                        name: endpoint.name.to_string(),
                        span: endpoint.span,
                        role: Role::Endpoint,
                    });
                }
                let names = endpoints.iter().map(|endpoint| endpoint.name.to_string()).collect();
                add_attributes(attributes, Owner::Edge(names), index);
            }
            Statement::Subgraph(subgraph) => add_statements(&subgraph.statements, index),
        }
    }
}

fn add_attributes(attributes: &[Attribute<'_>], owner: Owner, index: &mut Index) {
    for attribute in attributes {
        if matches!(attribute.key.as_ref(), "retry_target" | "fallback_retry_target")
            && !attribute.value.text.trim().is_empty()
        {
            index.ids.push(IdSite {
                name: attribute.value.text.trim().to_string(),
                span: attribute.value.span,
                role: Role::RetryTarget,
            });
        }
        index.attributes.push(AttrSite {
            key: attribute.key.to_string(),
            key_span: attribute.key_span,
            value: attribute.value.text.to_string(),
            value_span: attribute.value.span,
            owner: owner.clone(),
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_syntax_error_leaves_the_findings_of_the_rest() {
        let text = "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  a -> ;\n  b [prompt=\"x\", max_retires=2]\n  start -> b -> exit\n}\n";
        let (analysis, _) = analyze(Path::new("/tmp/w.dot"), text, &Loader::new(), None);
        let rules: Vec<&str> = analysis.findings.iter().map(|d| d.rule.as_str()).collect();
        assert_eq!(rules[0], "syntax");
        assert!(rules.contains(&"unknown_attribute"), "{rules:?}");
        let names = analysis.index.node_names();
        assert_eq!(names, ["start", "exit", "b"]);
    }

    #[test]
    fn ids_and_attributes_are_indexed_with_their_roles() {
        let text = "digraph w { a [retry_target=\"b\"]; b; a -> b }";
        let (analysis, _) = analyze(Path::new("w.dot"), text, &Loader::new(), None);
        let b: Vec<Role> = analysis.index.sites_of("b").map(|site| site.role).collect();
        assert_eq!(b, [Role::Declaration, Role::RetryTarget, Role::Endpoint]);
        let (site, is_key) = analysis.index.attribute_at(text.find("retry").unwrap()).unwrap();
        assert!(is_key);
        assert_eq!(site.owner, Owner::Node("a".to_string()));
    }
}
