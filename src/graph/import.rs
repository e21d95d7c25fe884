//! Workflow imports: a node with `import="path/to/other.dot"` is replaced, when the workflow
//! loads, by that workflow's stages (ids prefixed with the importing node's id and `_`), wired
//! between the importing node's incoming and outgoing edges. Imports nest; a cycle of imports or
//! an imported id that clashes with an existing one is an error that shows the import chain.

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use petgraph::graph::{DiGraph, NodeIndex};
use rustc_hash::FxHashMap;

use super::attribute::{Attr, Attributes};
use super::handler_type::HandlerType;
use super::node::{Edge, Node};
use super::transform::Transform;
use super::workflow::Workflow;
use crate::diagnostic::Diagnostic;
use crate::source::{SourceFile, Span};

/// Expands `import` nodes (see the module docs). Runs before the other built-in transforms, so
/// imported prompts, `$goal` and the stylesheet are handled like the importing file's own.
pub struct ImportExpansion;

impl Transform for ImportExpansion {
    fn name(&self) -> &str {
        "imports"
    }

    fn apply(&self, workflow: &mut Workflow) -> Vec<Diagnostic> {
        let mut diagnostics = Vec::new();
        let root = canonical(workflow.source().path());
        expand(workflow, &mut vec![root], &mut diagnostics);
        diagnostics
    }
}

fn canonical(path: &Path) -> PathBuf {
    std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf())
}

fn chain_text(chain: &[PathBuf]) -> String {
    chain.iter().map(|p| p.display().to_string()).collect::<Vec<_>>().join(" -> ")
}

/// Replaces every importing node of `workflow`; `chain` is the files being imported into, outermost first.
fn expand(workflow: &mut Workflow, chain: &mut Vec<PathBuf>, out: &mut Vec<Diagnostic>) {
    let importing: Vec<NodeIndex> = workflow
        .graph
        .node_indices()
        .filter(|&i| workflow.graph[i].attributes.non_empty_text("import").is_some())
        .collect();
    if importing.is_empty() {
        return;
    }
    let base = workflow.source().path().parent().map(Path::to_path_buf).unwrap_or_default();
    let mut children: HashMap<NodeIndex, Workflow> = HashMap::new();
    for index in importing {
        let node = &workflow.graph[index];
        let Some(attr) = node.attributes.get("import") else { continue };
        let reference = attr.value.as_text().unwrap_or_default().trim().to_string();
        let error = |message: String, fix: &str| {
            Diagnostic::error("import", message).node(&node.id).span(attr.span).fix(fix.to_string())
        };
        let path = base.join(&reference);
        let text = match crate::regular_file::read_to_string(&path, crate::regular_file::FileKind::Input) {
            Ok(text) => text,
            Err(e) => {
                out.push(error(
                    format!("cannot read imported workflow `{}`: {e}", path.display()),
                    "fix the path; it is relative to the importing file",
                ));
                continue;
            }
        };
        let canonical_path = canonical(&path);
        if chain.contains(&canonical_path) {
            let mut cycle = chain.clone();
            cycle.push(canonical_path);
            out.push(
                Diagnostic::error(
                    "import_cycle",
                    format!("workflows import each other in a cycle: {}", chain_text(&cycle)),
                )
                .node(&node.id)
                .span(attr.span)
                .fix("remove one of the imports in the cycle"),
            );
            continue;
        }
        let source = Arc::new(SourceFile::new(&path, text));
        let tree = match crate::syntax::parse(source.text()) {
            Ok(tree) => tree,
            Err(e) => {
                let at = source.location(e.span.start);
                out.push(error(
                    format!("imported workflow {}:{}:{}: {e}", path.display(), at.line, at.column),
                    "fix the imported file",
                ));
                continue;
            }
        };
        let mut child = super::build(&tree, source.clone());
        chain.push(canonical_path);
        let mut nested = Vec::new();
        expand(&mut child, chain, &mut nested);
        chain.pop();
        // Positions inside the imported file mean nothing in this one: point at the import.
        for diagnostic in nested {
            let message = format!("in {}: {}", path.display(), diagnostic.message);
            out.push(Diagnostic {
                message,
                node_id: Some(node.id.clone()),
                edge: None,
                span: Some(attr.span),
                // Edits into the imported file do not apply to this one.
                edits: Vec::new(),
                ..diagnostic
            });
        }
        for diagnostic in super::transform::PromptFiles.apply(&mut child) {
            out.push(error(
                format!("imported workflow {}: {}", path.display(), diagnostic.message),
                "fix the imported file",
            ));
        }
        let ends =
            |kind| child.graph.node_indices().filter(|&i| child.graph[i].handler_type() == kind).count();
        if ends(HandlerType::Start) != 1 || ends(HandlerType::Exit) != 1 {
            out.push(error(
                format!("imported workflow {} must have exactly one start and one exit node", path.display()),
                "add them to the imported file",
            ));
            continue;
        }
        children.insert(index, child);
    }
    if !children.is_empty() {
        splice(workflow, &children, chain, out);
    }
}

/// Rebuilds `workflow`'s graph with each importing node replaced by its child's stages.
fn splice(
    workflow: &mut Workflow,
    children: &HashMap<NodeIndex, Workflow>,
    chain: &[PathBuf],
    out: &mut Vec<Diagnostic>,
) {
    let mut graph: DiGraph<Node, Edge> = DiGraph::new();
    let mut ids: FxHashMap<String, NodeIndex> = FxHashMap::default();
    // Old parent index -> new index; per importing node: child index -> new index.
    let mut parent_map: HashMap<NodeIndex, NodeIndex> = HashMap::new();
    let mut child_maps: HashMap<NodeIndex, HashMap<NodeIndex, NodeIndex>> = HashMap::new();
    let parent_ids: Vec<String> = workflow.graph.node_weights().map(|n| n.id.clone()).collect();
    for index in workflow.graph.node_indices() {
        let node = &workflow.graph[index];
        let Some(child) = children.get(&index) else {
            let new = graph.add_node(node.clone());
            ids.insert(node.id.clone(), new);
            parent_map.insert(index, new);
            continue;
        };
        let span = node.attributes.get("import").map_or(node.span, |attr| attr.span);
        let mut map = HashMap::new();
        for child_index in child.graph.node_indices() {
            let child_node = &child.graph[child_index];
            if matches!(child_node.handler_type(), HandlerType::Start | HandlerType::Exit) {
                continue;
            }
            let id = format!("{}_{}", node.id, child_node.id);
            if parent_ids.contains(&id) || ids.contains_key(&id) {
                out.push(
                    Diagnostic::error(
                        "import_clash",
                        format!("importing `{}` into `{}` creates node id `{id}`, which already exists (import chain: {})", child_node.id, node.id, chain_text(chain)),
                    )
                    .node(&node.id)
                    .span(span)
                    .fix(format!("rename `{id}` or the importing node `{}`", node.id)),
                );
                continue;
            }
            let mut copy = child_node.clone();
            copy.id = id.clone();
            copy.span = span;
            copy.attributes = respan(&copy.attributes, span);
            let new = graph.add_node(copy);
            ids.insert(id, new);
            map.insert(child_index, new);
        }
        child_maps.insert(index, map);
    }
    // Where an edge into / out of an importing node really goes.
    let entries = |index: NodeIndex| -> Vec<NodeIndex> {
        match (children.get(&index), child_maps.get(&index)) {
            (Some(child), Some(map)) => child
                .graph
                .node_indices()
                .filter(|&i| child.graph[i].handler_type() == HandlerType::Start)
                .flat_map(|start| child.graph.neighbors(start).collect::<Vec<_>>())
                .filter_map(|i| map.get(&i).copied())
                .collect(),
            _ => parent_map.get(&index).copied().into_iter().collect(),
        }
    };
    let exits = |index: NodeIndex| -> Vec<NodeIndex> {
        match (children.get(&index), child_maps.get(&index)) {
            (Some(child), Some(map)) => child
                .graph
                .node_indices()
                .filter(|&i| child.graph[i].handler_type() == HandlerType::Exit)
                .flat_map(|exit| {
                    child.graph.neighbors_directed(exit, petgraph::Direction::Incoming).collect::<Vec<_>>()
                })
                .filter_map(|i| map.get(&i).copied())
                .collect(),
            _ => parent_map.get(&index).copied().into_iter().collect(),
        }
    };
    for edge in workflow.graph.edge_indices() {
        let Some((from, to)) = workflow.graph.edge_endpoints(edge) else { continue };
        for source in exits(from) {
            for target in entries(to) {
                graph.add_edge(source, target, workflow.graph[edge].clone());
            }
        }
    }
    // The imported workflows' own edges between their stages.
    for (importing, child) in children {
        let (Some(map), Some(importer)) = (child_maps.get(importing), workflow.graph.node_weight(*importing))
        else {
            continue;
        };
        let span = importer.attributes.get("import").map_or(importer.span, |attr| attr.span);
        for edge in child.graph.edge_indices() {
            let Some((from, to)) = child.graph.edge_endpoints(edge) else { continue };
            if let (Some(&source), Some(&target)) = (map.get(&from), map.get(&to)) {
                let mut copy = child.graph[edge].clone();
                copy.span = span;
                copy.attributes = respan(&copy.attributes, span);
                graph.add_edge(source, target, copy);
            }
        }
    }
    workflow.graph = graph;
    workflow.ids = ids;
}

/// Attributes from another file point at the `import` attribute, so diagnostics about them name
/// a place in the importing file.
fn respan(attributes: &Attributes, span: Span) -> Attributes {
    let mut copy = Attributes::default();
    for (key, attr) in attributes.iter() {
        copy.set(key.to_string(), Attr { span, key_span: span, ..attr.clone() });
    }
    copy
}
