//! Syntax tree -> [`Workflow`]: flattens subgraphs, applies scoped `node`/`edge` defaults, expands
//! chained edges, types every attribute by its schema, and parses conditions, the stylesheet and
//! the node settings. Problems found here are kept in the graph (as invalid values or failed parses) for the
//! validation rules to report, so building never fails.

use rustc_hash::FxHashMap;
use std::sync::Arc;

use petgraph::graph::{DiGraph, NodeIndex};

use super::attribute::{canonical_name, spec, Attr, AttrName, Attributes, Value};
use super::node::{Edge, Node};
use super::settings::{self, NodeSettings};
use super::stylesheet::Stylesheet;
use super::workflow::{SubgraphInfo, Workflow};
use crate::condition::Condition;
use crate::source::SourceFile;
use crate::syntax::{Attribute, DefaultsKind, Id, Statement, SyntaxTree};

/// Builds the workflow graph of a parsed file.
pub fn build(tree: &SyntaxTree<'_>, source: Arc<SourceFile>) -> Workflow {
    let name = match &tree.name {
        Some(id) if !id.name.is_empty() => id.name.to_string(),
        _ => {
            source.path().file_stem().map_or_else(|| "workflow".into(), |s| s.to_string_lossy().into_owned())
        }
    };
    let mut builder = Builder {
        graph: DiGraph::new(),
        ids: FxHashMap::default(),
        attributes: Attributes::default(),
        subgraphs: Vec::new(),
    };
    builder.statements(&tree.statements, &mut Defaults::default(), None);
    for node in builder.graph.node_weights_mut() {
        let derived = std::mem::take(&mut node.classes);
        node.classes = explicit_classes(&node.attributes);
        for class in derived {
            if !node.classes.contains(&class) {
                node.classes.push(class);
            }
        }
    }
    let stylesheet = builder.attributes.non_empty_text("model_stylesheet").map(Stylesheet::parse);
    let mut workflow = Workflow {
        name,
        source,
        attributes: builder.attributes,
        graph: builder.graph,
        ids: builder.ids,
        subgraphs: builder.subgraphs,
        stylesheet,
        settings: Default::default(),
        inputs: Default::default(),
    };
    settings::read_settings(&mut workflow);
    workflow
}

/// Reads one literal as the attribute it belongs to.
pub fn typed_attr(attribute: &Attribute<'_>) -> (AttrName, Attr) {
    let canonical = canonical_name(&attribute.key);
    let (key, value) = match spec(canonical) {
        Some(spec) => (AttrName::Borrowed(spec.name), Value::typed(&attribute.value.text, spec.value_type)),
        None => (AttrName::Owned(canonical.to_string()), Value::Text(attribute.value.text.to_string())),
    };
    (key, Attr { value, span: attribute.value.span, key_span: attribute.key_span, inherited: false })
}

fn typed(attributes: &[Attribute<'_>]) -> Attributes {
    let mut typed_attributes = Attributes::default();
    for attribute in attributes {
        let (key, attr) = typed_attr(attribute);
        typed_attributes.set(key, attr);
    }
    typed_attributes
}

/// `node [..]` and `edge [..]` defaults in force; a subgraph works on a copy, so its defaults end
/// with it.
#[derive(Clone, Default)]
struct Defaults {
    node: Attributes,
    edge: Attributes,
}

struct Builder {
    graph: DiGraph<Node, Edge>,
    ids: FxHashMap<String, NodeIndex>,
    attributes: Attributes,
    subgraphs: Vec<SubgraphInfo>,
}

impl Builder {
    /// Walks statements in order. `subgraph` is the index of the enclosing subgraph's info, `None`
    /// at the root. Returns the nodes named in these statements, so enclosing subgraphs can give
    /// them their class.
    fn statements(
        &mut self,
        statements: &[Statement],
        defaults: &mut Defaults,
        subgraph: Option<usize>,
    ) -> Vec<NodeIndex> {
        let mut members = Vec::new();
        for statement in statements {
            match statement {
                Statement::Defaults { kind: DefaultsKind::Node, attributes, .. } => {
                    defaults.node.merge(&typed(attributes));
                }
                Statement::Defaults { kind: DefaultsKind::Edge, attributes, .. } => {
                    defaults.edge.merge(&typed(attributes));
                }
                Statement::Defaults { kind: DefaultsKind::Graph, attributes, .. } => {
                    for attribute in attributes {
                        self.graph_attribute(attribute, subgraph);
                    }
                }
                Statement::GraphAttribute(attribute) => self.graph_attribute(attribute, subgraph),
                Statement::Node { id, attributes } => {
                    let index = self.node(id, defaults, true);
                    let explicit = typed(attributes);
                    self.graph[index].attributes.merge(&explicit);
                    members.push(index);
                }
                Statement::Edge { endpoints, attributes, span } => {
                    let mut edge_attributes = defaults.edge.as_inherited();
                    edge_attributes.merge(&typed(attributes));
                    let condition = parse_condition(&edge_attributes);
                    let indices: Vec<NodeIndex> =
                        endpoints.iter().map(|id| self.node(id, defaults, false)).collect();
                    for pair in indices.windows(2) {
                        let edge = Edge {
                            attributes: edge_attributes.clone(),
                            span: *span,
                            condition: condition.clone(),
                            settings: Default::default(),
                        };
                        self.graph.add_edge(pair[0], pair[1], edge);
                    }
                    members.extend(indices);
                }
                Statement::Subgraph(inner) => {
                    let info = self.subgraphs.len();
                    self.subgraphs.push(SubgraphInfo {
                        name: inner.name.as_ref().map(|id| id.name.to_string()),
                        attributes: Attributes::default(),
                        class: None,
                        span: inner.span,
                    });
                    let inner_members = self.statements(&inner.statements, &mut defaults.clone(), Some(info));
                    if let Some(class) =
                        self.subgraphs[info].attributes.non_empty_text("label").map(derive_class)
                    {
                        for &index in &inner_members {
                            let classes = &mut self.graph[index].classes;
                            if !classes.contains(&class) {
                                classes.push(class.clone());
                            }
                        }
                        self.subgraphs[info].class = Some(class);
                    }
                    members.extend(inner_members);
                }
            }
        }
        members
    }

    /// A graph attribute goes to the root graph, or stays with its subgraph.
    fn graph_attribute(&mut self, attribute: &Attribute<'_>, subgraph: Option<usize>) {
        let (key, attr) = typed_attr(attribute);
        match subgraph {
            None => self.attributes.set(key, attr),
            Some(info) => self.subgraphs[info].attributes.set(key, attr),
        }
    }

    /// The node named `id`, created with the defaults in force if it is new. While building,
    /// `classes` holds only subgraph-derived classes; `build` puts explicit ones first.
    fn node(&mut self, id: &Id<'_>, defaults: &Defaults, declaration: bool) -> NodeIndex {
        if let Some(&index) = self.ids.get(id.name.as_ref()) {
            let node = &mut self.graph[index];
            if declaration && !node.declared {
                node.declared = true;
                node.span = id.span;
            }
            return index;
        }
        let node = Node {
            id: id.name.to_string(),
            span: id.span,
            irregular_id: !is_plain_identifier(&id.name),
            declared: declaration,
            attributes: defaults.node.as_inherited(),
            classes: Vec::new(),
            settings: NodeSettings::default(),
        };
        let index = self.graph.add_node(node);
        self.ids.insert(id.name.to_string(), index);
        index
    }
}

fn parse_condition(attributes: &Attributes) -> Option<Result<Condition, crate::condition::ConditionError>> {
    attributes.non_empty_text("condition").map(Condition::parse)
}

/// The entries of a node's `class` attribute, separated by commas or spaces (`"fast careful"`,
/// as Fabro writes it, or `"fast, careful"`).
fn explicit_classes(attributes: &Attributes) -> Vec<String> {
    attributes
        .text("class")
        .map(|classes| {
            classes
                .split(|c: char| c == ',' || c.is_whitespace())
                .filter(|c| !c.is_empty())
                .map(String::from)
                .collect()
        })
        .unwrap_or_default()
}

/// `"Loop A"` -> `loop-a`: lowercase, spaces to hyphens, other non-alphanumerics dropped.
pub fn derive_class(label: &str) -> String {
    label
        .trim()
        .chars()
        .filter_map(|c| match c {
            ' ' | '\t' | '\n' => Some('-'),
            c if c.is_alphanumeric() || c == '-' => Some(c.to_ascii_lowercase()),
            _ => None,
        })
        .collect()
}

/// `[A-Za-z_][A-Za-z0-9_]*`
pub fn is_plain_identifier(id: &str) -> bool {
    let mut chars = id.chars();
    matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
        && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn subgraph_labels_derive_classes() {
        assert_eq!(derive_class("Loop A"), "loop-a");
        assert_eq!(derive_class("Review & Fix!"), "review--fix");
    }

    #[test]
    fn plain_identifiers() {
        assert!(is_plain_identifier("plan_2"));
        assert!(!is_plain_identifier("2plan"));
        assert!(!is_plain_identifier("run-tests"));
        assert!(!is_plain_identifier(""));
    }
}
