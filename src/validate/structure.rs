//! Structure rules: one start, at least one exit, entry and exit edges, reachability, node ids.

use std::collections::VecDeque;

use crate::diagnostic::{did_you_mean, Diagnostic};
use crate::graph::{HandlerType, Node, Workflow};

fn nodes_of<'w>(workflow: &'w Workflow, kind: HandlerType<&'static str>) -> Vec<&'w Node> {
    workflow.nodes().filter(|node| node.handler_type() == kind).collect()
}

pub fn start_node(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    exactly_one(workflow, out, "start_node", HandlerType::Start, "start", "start [shape=Mdiamond]");
}

/// At least one exit: reaching any of them ends the run (kilroy's `success_exit` and `fail_exit`).
pub fn terminal_node(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    if nodes_of(workflow, HandlerType::Exit).is_empty() {
        out.push(missing(workflow, "terminal_node", "exit", "exit [shape=Msquare]"));
    }
}

/// `an agent`, `a command`.
fn with_article(word: &str) -> String {
    let article = if word.starts_with(['a', 'e', 'i', 'o', 'u']) { "an" } else { "a" };
    format!("{article} {word}")
}

/// The workflow has no `what` node. A node named like it but given another shape or type is the
/// usual cause.
fn missing(workflow: &Workflow, rule: &str, what: &str, example: &str) -> Diagnostic {
    match workflow.node(what) {
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
    }
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
        [] => out.push(missing(workflow, rule, what, example)),
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

/// A stage without outgoing edges ends the run with its own outcome (Fabro's workflows write
/// such terminals on purpose); an edge to an exit says so explicitly.
pub fn dead_end(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let graph = workflow.graph();
    for index in graph.node_indices() {
        let node = &graph[index];
        // Exits end runs; a parallel stage or a human gate without edges is an error of its own.
        let other_rule =
            matches!(node.handler_type(), HandlerType::Exit | HandlerType::Parallel | HandlerType::Human);
        if other_rule || !workflow.outgoing(index).is_empty() || workflow.incoming(index).is_empty() {
            continue;
        }
        let exit = nodes_of(workflow, HandlerType::Exit).first().map_or("exit", |exit| exit.id.as_str());
        out.push(
            Diagnostic::warning(
                "dead_end",
                format!(
                    "`{}` has no outgoing edges: the run ends there, succeeded unless the stage fails",
                    node.id
                ),
            )
            .node(&node.id)
            .span(node.span)
            .fix(format!("add `{} -> {exit}` to end the run at an exit explicitly", node.id))
            .edit_opt(super::append_statement(
                workflow,
                &format!("{} -> {}", crate::render::dot::id(&node.id), crate::render::dot::id(exit)),
            )),
        );
    }
}

/// `outcome` means something on an exit node only.
pub fn exit_outcome(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for node in workflow.nodes().filter(|node| node.handler_type() != HandlerType::Exit) {
        let Some(attr) = node.attributes.get("outcome").filter(|attr| !attr.inherited) else { continue };
        out.push(
            Diagnostic::warning(
                "exit_outcome",
                format!(
                    "`outcome={}` on {} stage `{}` has no effect: only an exit node takes an outcome",
                    attr.value,
                    with_article(&node.handler_type().to_string()),
                    node.id
                ),
            )
            .node(&node.id)
            .span(attr.span)
            .fix("remove it, or make the node an exit (`shape=Msquare`) that ends the run with that outcome"),
        );
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
            .fix(format!("quote the value: `{key} = \"{value}\"`"))
            .edit_opt(stray.last().map(|last| crate::diagnostic::Edit {
                span: crate::source::Span::new(attr.span.start, last.span.end),
                text: crate::dot_string::quote(&value),
            })),
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
                Diagnostic::error("edge_target_exists", format!("{message}; did you mean `{similar}`?"))
                    .fix(format!(
                        "rename it to `{similar}`, or declare `{} [...]` if it is a new stage",
                        node.id
                    ))
                    .edit_written(workflow.source(), node.span, &node.id, crate::render::dot::id(similar))
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
