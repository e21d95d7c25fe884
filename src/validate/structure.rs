//! Structure rules: one start, one exit, entry and exit edges, reachability, node ids.

use std::collections::VecDeque;

use crate::diagnostic::{did_you_mean, Diagnostic};
use crate::graph::{HandlerType, Node, Workflow};

fn nodes_of<'w>(workflow: &'w Workflow, kind: HandlerType<&'static str>) -> Vec<&'w Node> {
    workflow.nodes().filter(|node| node.handler_type() == kind).collect()
}

pub fn start_node(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    exactly_one(workflow, out, "start_node", HandlerType::Start, "start", "start [shape=Mdiamond]");
}

pub fn terminal_node(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    exactly_one(workflow, out, "terminal_node", HandlerType::Exit, "exit", "exit [shape=Msquare]");
}

/// `an agent`, `a command`.
fn with_article(word: &str) -> String {
    let article = if word.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
    format!("{article} {word}")
}

fn exactly_one(
    workflow: &Workflow,
    out: &mut Vec<Diagnostic>,
    rule: &str,
    kind: HandlerType<&'static str>,
    what: &str,
    example: &str,
) {
    let nodes = nodes_of(workflow, kind);
    match nodes.as_slice() {
        // A node named like the missing one but given another shape or type is the usual cause.
        [] => out.push(match workflow.node(what) {
            Some(named) => Diagnostic::error(
                rule,
                format!(
                    "the workflow has no {what} node: the node `{what}` runs as {} stage, because an explicit \
                     shape or type decides a node's kind (only a node without one is the {what} by its id)",
                    with_article(&named.handler_type().to_string())
                ),
            )
            .node(&named.id)
            .span(named.span)
            .fix(format!("give it the {what} shape: `{example}` (or drop its shape and type)")),
            None => Diagnostic::error(rule, format!("the workflow has no {what} node"))
                .fix(format!("add `{example}` (a node with id `{what}` also counts)")),
        }),
        [_] => {}
        [first, rest @ ..] => {
            for node in rest {
                out.push(
                    Diagnostic::error(
                        rule,
                        format!(
                            "the workflow has more than one {what} node: `{}` and `{}`",
                            first.id, node.id
                        ),
                    )
                    .node(&node.id)
                    .span(node.span)
                    .fix(format!("keep one {what} node and route the others to it")),
                );
            }
        }
    }
}

pub fn start_no_incoming(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for start in nodes_of(workflow, HandlerType::Start) {
        let Some(index) = workflow.index_of(&start.id) else { continue };
        for edge in workflow.incoming(index) {
            out.push(
                Diagnostic::error(
                    "start_no_incoming",
                    format!("the start node `{}` has an incoming edge", start.id),
                )
                .edge(&edge.from.id, &edge.to.id)
                .span(edge.edge.span)
                .fix("route this edge to the first stage after start instead"),
            );
        }
    }
}

pub fn exit_no_outgoing(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for exit in nodes_of(workflow, HandlerType::Exit) {
        let Some(index) = workflow.index_of(&exit.id) else { continue };
        for edge in workflow.outgoing(index) {
            out.push(
                Diagnostic::error(
                    "exit_no_outgoing",
                    format!("the exit node `{}` has an outgoing edge", exit.id),
                )
                .edge(&edge.from.id, &edge.to.id)
                .span(edge.edge.span)
                .fix("remove the edge: the run ends at the exit node"),
            );
        }
    }
}

pub fn reachability(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let graph = workflow.graph();
    let Some(start) = graph.node_indices().find(|&i| graph[i].handler_type() == HandlerType::Start) else {
        return;
    };
    let mut seen = vec![false; graph.node_count()];
    seen[start.index()] = true;
    let mut queue = VecDeque::from([start]);
    while let Some(index) = queue.pop_front() {
        for next in graph.neighbors(index) {
            if !std::mem::replace(&mut seen[next.index()], true) {
                queue.push_back(next);
            }
        }
    }
    for index in graph.node_indices().filter(|i| !seen[i.index()]) {
        let node = &graph[index];
        out.push(
            Diagnostic::warning(
                "reachability",
                format!("node `{}` cannot be reached from the start node", node.id),
            )
            .node(&node.id)
            .span(node.span)
            .fix(format!("add an edge into `{}` or remove it", node.id)),
        );
    }
}

/// `goal = Add a health endpoint` is the graph attribute `goal = Add` followed by three node
/// statements: bare nodes on the line of a graph attribute, right after its value, are the rest
/// of an unquoted value.
pub fn unquoted_value(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let source = workflow.source();
    let graph = workflow.graph();
    for (key, attr) in workflow.attributes().iter() {
        let line = source.location(attr.span.start).line;
        let stray: Vec<&crate::graph::Node> = graph
            .node_indices()
            .filter(|&index| {
                let node = &graph[index];
                node.declared
                    && node.attributes.iter().all(|(_, a)| a.inherited)
                    && node.span.start > attr.span.end
                    && source.location(node.span.start).line == line
                    && workflow.outgoing(index).is_empty()
                    && workflow.incoming(index).is_empty()
            })
            .map(|index| &graph[index])
            .collect();
        let Some(first) = stray.first() else { continue };
        let words: Vec<&str> = stray.iter().map(|node| node.id.as_str()).collect();
        let value = format!("{} {}", attr.value, words.join(" "));
        out.push(
            Diagnostic::warning(
                "unquoted_value",
                format!(
                    "`{}` after `{key} = {}` are read as new nodes, not as part of the value",
                    words.join(" "),
                    attr.value
                ),
            )
            .node(&first.id)
            .span(first.span)
            .fix(format!("quote the value: `{key} = \"{value}\"`")),
        );
    }
}

/// DOT creates a node for every id an edge names; a node that is never declared is usually a typo.
pub fn edge_target_exists(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let declared: Vec<&str> = workflow.nodes().filter(|n| n.declared).map(|n| n.id.as_str()).collect();
    for node in workflow.nodes().filter(|n| !n.declared) {
        let message = format!(
            "node `{}` is only named by edges and never declared; it runs as a bare {} stage",
            node.id,
            node.handler_type()
        );
        // A near miss of a declared node is a typo that would run: an error, not a warning.
        let diagnostic = match did_you_mean(&node.id, declared.iter().copied()) {
            Some(similar) => {
                Diagnostic::error("edge_target_exists", format!("{message}; did you mean `{similar}`?")).fix(
                    format!("rename it to `{similar}`, or declare `{} [...]` if it is a new stage", node.id),
                )
            }
            None => Diagnostic::warning("edge_target_exists", message)
                .fix(format!("declare `{} [...]` with its attributes", node.id)),
        };
        out.push(diagnostic.node(&node.id).span(node.span));
    }
}

/// Node ids name stage directories: longer ones could not be created on common file systems
/// (255-byte names).
pub const MAX_NODE_ID_BYTES: usize = 200;

pub fn node_id_syntax(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for node in workflow.nodes().filter(|n| n.id.len() > MAX_NODE_ID_BYTES) {
        out.push(
            Diagnostic::error(
                "node_id_syntax",
                format!(
                    "node id `{}…` is {} bytes long; ids name stage directories and may have at most {MAX_NODE_ID_BYTES}",
                    node.id.chars().take(40).collect::<String>(),
                    node.id.len()
                ),
            )
            .node(&node.id)
            .span(node.span)
            .fix("use a short id and put the text in `label`"),
        );
    }
    for node in workflow.nodes().filter(|n| n.irregular_id) {
        let suggestion: String =
            node.id.chars().map(|c| if c.is_ascii_alphanumeric() { c } else { '_' }).collect();
        let suggestion = if suggestion.starts_with(|c: char| c.is_ascii_digit()) || suggestion.is_empty() {
            format!("n_{suggestion}")
        } else {
            suggestion
        };
        out.push(
            Diagnostic::error(
                "node_id_syntax",
                format!("node id `{}` is not a plain identifier ([A-Za-z_][A-Za-z0-9_]*)", node.id),
            )
            .node(&node.id)
            .span(node.span)
            .fix(format!("use an id such as `{suggestion}` and put the text in `label`")),
        );
    }
}
