//! The typed workflow graph: nodes and edges on a petgraph `DiGraph`, an id index for O(1)
//! lookups, and everything else the file declared (graph attributes, subgraphs, stylesheet).

use rustc_hash::FxHashMap;
use std::sync::Arc;

use petgraph::graph::{DiGraph, EdgeIndex, NodeIndex};
use petgraph::visit::EdgeRef as _;
use petgraph::Direction;

use super::attribute::{Attributes, Value};
use super::node::{Edge, Node};
use super::stylesheet::{Stylesheet, StylesheetError};
use crate::source::{SourceFile, Span};

/// A subgraph as declared: kept for lint rules and rendering, its nodes already flattened into the
/// workflow.
#[derive(Debug, Clone)]
pub struct SubgraphInfo {
    pub name: Option<String>,
    /// Graph attributes set inside the subgraph; they never reach the root graph.
    pub attributes: Attributes,
    /// The class its label derives (`"Loop A"` -> `loop-a`).
    pub class: Option<String>,
    pub span: Span,
}

/// One edge seen from the graph: endpoints and the edge itself.
#[derive(Debug, Clone, Copy)]
pub struct EdgeRef<'w> {
    pub index: EdgeIndex,
    pub from: &'w Node,
    pub to: &'w Node,
    pub edge: &'w Edge,
}

#[derive(Debug, Clone)]
pub struct Workflow {
    pub(super) name: String,
    pub(super) source: Arc<SourceFile>,
    pub(super) attributes: Attributes,
    pub(super) graph: DiGraph<Node, Edge>,
    pub(super) ids: FxHashMap<String, NodeIndex>,
    pub(super) subgraphs: Vec<SubgraphInfo>,
    pub(super) stylesheet: Option<Result<Stylesheet, StylesheetError>>,
    /// The graph's settings, typed: read with the nodes'.
    pub(super) settings: super::settings::WorkflowSettings,
    /// The run's inputs (`--input`), filled into `{{ inputs.key }}` when the workflow loads.
    pub(super) inputs: super::inputs::Inputs,
}

impl Workflow {
    /// The digraph's name, or the file stem when it has none.
    pub fn name(&self) -> &str {
        &self.name
    }

    pub fn source(&self) -> &Arc<SourceFile> {
        &self.source
    }

    pub fn attributes(&self) -> &Attributes {
        &self.attributes
    }

    /// Every graph attribute as the run's context shows it: `graph.KEY`, numbers and booleans as
    /// JSON numbers and booleans, everything else as text.
    pub fn context_mirror(&self) -> impl Iterator<Item = (String, serde_json::Value)> + '_ {
        self.attributes.iter().map(|(key, attr)| {
            let value = match &attr.value {
                Value::Integer(n) => serde_json::json!(n),
                Value::Float(x) => serde_json::json!(x),
                Value::Boolean(b) => serde_json::json!(b),
                other => serde_json::json!(other.to_string()),
            };
            (format!("graph.{key}"), value)
        })
    }

    /// What the graph sets for the run as a whole.
    pub fn settings(&self) -> &super::settings::WorkflowSettings {
        &self.settings
    }

    pub fn attributes_mut(&mut self) -> &mut Attributes {
        &mut self.attributes
    }

    /// The graph `goal` (empty when unset).
    pub fn goal(&self) -> &str {
        self.attributes.text("goal").unwrap_or("")
    }

    pub fn subgraphs(&self) -> &[SubgraphInfo] {
        &self.subgraphs
    }

    /// The parsed `model_stylesheet`, if the graph has a non-empty one.
    pub fn stylesheet(&self) -> Option<&Result<Stylesheet, StylesheetError>> {
        self.stylesheet.as_ref()
    }

    pub fn graph(&self) -> &DiGraph<Node, Edge> {
        &self.graph
    }

    pub fn node_count(&self) -> usize {
        self.graph.node_count()
    }

    pub fn edge_count(&self) -> usize {
        self.graph.edge_count()
    }

    pub fn index_of(&self, id: &str) -> Option<NodeIndex> {
        self.ids.get(id).copied()
    }

    pub fn node(&self, id: &str) -> Option<&Node> {
        self.index_of(id).map(|index| &self.graph[index])
    }

    pub fn node_at(&self, index: NodeIndex) -> &Node {
        &self.graph[index]
    }

    /// Where a failed stage with no matching edge goes: its `retry_target`, else its
    /// `fallback_retry_target`, if that names a node.
    pub fn failure_target(&self, from: NodeIndex) -> Option<&str> {
        let node = self.node_at(from);
        ["retry_target", "fallback_retry_target"]
            .iter()
            .filter_map(|key| node.attributes.non_empty_text(key).map(str::trim))
            .find(|target| self.node(target).is_some())
    }

    /// Nodes in the order they were first named in the file.
    pub fn nodes(&self) -> impl Iterator<Item = &Node> {
        self.graph.node_weights()
    }

    pub fn nodes_mut(&mut self) -> impl Iterator<Item = &mut Node> {
        self.graph.node_weights_mut()
    }

    pub fn edges_mut(&mut self) -> impl Iterator<Item = &mut Edge> {
        self.graph.edge_weights_mut()
    }

    pub fn subgraphs_mut(&mut self) -> impl Iterator<Item = &mut SubgraphInfo> {
        self.subgraphs.iter_mut()
    }

    /// The run's inputs the workflow was loaded with.
    pub fn inputs(&self) -> &super::inputs::Inputs {
        &self.inputs
    }

    pub fn set_inputs(&mut self, inputs: super::inputs::Inputs) {
        self.inputs = inputs;
    }

    /// Edges in declaration order.
    pub fn edges(&self) -> impl Iterator<Item = EdgeRef<'_>> {
        self.graph.edge_indices().map(|index| self.edge_ref(index))
    }

    /// Outgoing edges of a node in declaration order.
    pub fn outgoing(&self, index: NodeIndex) -> Vec<EdgeRef<'_>> {
        self.edges_in_order(index, Direction::Outgoing)
    }

    /// Incoming edges of a node in declaration order.
    pub fn incoming(&self, index: NodeIndex) -> Vec<EdgeRef<'_>> {
        self.edges_in_order(index, Direction::Incoming)
    }

    fn edges_in_order(&self, index: NodeIndex, direction: Direction) -> Vec<EdgeRef<'_>> {
        // petgraph walks a node's edges newest first; edge indices are in declaration order.
        let mut indices: Vec<EdgeIndex> =
            self.graph.edges_directed(index, direction).map(|e| e.id()).collect();
        indices.sort_unstable();
        indices.into_iter().map(|edge| self.edge_ref(edge)).collect()
    }

    fn edge_ref(&self, index: EdgeIndex) -> EdgeRef<'_> {
        let (from, to) = self.graph.edge_endpoints(index).unwrap_or_default();
        EdgeRef { index, from: &self.graph[from], to: &self.graph[to], edge: &self.graph[index] }
    }
}
