//! Routing rules: conditions, fallbacks, retry targets and goal gates.

use crate::diagnostic::{did_you_mean, Diagnostic};
use crate::graph::{HandlerType, Workflow};
use crate::outcome::StageStatus;
use crate::source::Span;

pub fn condition_syntax(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for edge in workflow.edges() {
        let Some(Err(error)) = &edge.edge.condition else { continue };
        let literal = edge.edge.attributes.get("condition").map_or(edge.edge.span, |attr| attr.span);
        let offset = workflow.source().offset_in_literal(literal, error.offset);
        out.push(
            Diagnostic::error(
                "condition_syntax",
                format!("invalid condition: {} (column {} of the condition)", error.message, error.offset + 1),
            )
            .edge(&edge.from.id, &edge.to.id)
            .span(Span::at(offset))
            .fix("conditions look like `outcome=success`, `context.tests_passed=true && preferred_label!=Skip`"),
        );
    }
}

/// `outcome=needs_dod`: a custom outcome (kilroy) that only a stage reporting it produces. An edge
/// out of a stage that never reports custom outcomes (start, human gate, wait, parallel) can never
/// be taken that way. (A near miss of a built-in outcome, `sucess`, is a condition syntax error.)
pub fn custom_outcome(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for edge in workflow.edges() {
        let Some(condition) = edge.edge.condition() else { continue };
        let span = edge.edge.attributes.get("condition").map_or(edge.edge.span, |attr| attr.span);
        let from = &edge.from;
        let never_custom = matches!(
            from.handler_type(),
            HandlerType::Start
                | HandlerType::Exit
                | HandlerType::Human
                | HandlerType::Wait
                | HandlerType::Parallel
        );
        if !never_custom {
            continue;
        }
        for status in condition.tested_outcomes() {
            let StageStatus::Custom(custom) = status else { continue };
            out.push(
                Diagnostic::warning(
                    "custom_outcome",
                    format!(
                        "`outcome={}` can never hold: {} stage `{}` never ends with a custom outcome",
                        custom.as_str(),
                        from.handler_type(),
                        from.id
                    ),
                )
                .fix("route on success or fail; custom outcomes come from agent, prompt and command stages")
                .edge(&from.id, &edge.to.id)
                .span(span),
            );
        }
    }
}

/// A condition key that is a near miss of `outcome` or `preferred_label` (`outcom=success`)
/// reads a context key that is never set, so the edge would silently never match.
pub fn condition_key_typo(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for edge in workflow.edges() {
        let Some(condition) = edge.edge.condition() else { continue };
        let span = edge.edge.attributes.get("condition").map_or(edge.edge.span, |attr| attr.span);
        for key in condition.bare_context_keys() {
            let Some(meant) = did_you_mean(key, ["outcome", "preferred_label"]) else { continue };
            out.push(
                Diagnostic::error(
                    "condition_key_typo",
                    format!(
                        "condition reads `{key}`, a context key that nothing sets; did you mean `{meant}`?"
                    ),
                )
                .edge(&edge.from.id, &edge.to.id)
                .span(span)
                .fix(format!("write `{meant}`, or `context.{key}` if you mean a context key"))
                .edit_opt(rewritten_condition(workflow, edge.edge, span, key, meant)),
            );
        }
    }
}

/// The edit writing `meant` for the word `key` in an edge's condition, when the condition is
/// the edge's own literal at `span`.
fn rewritten_condition(
    workflow: &Workflow,
    edge: &crate::graph::Edge,
    span: Span,
    key: &str,
    meant: &str,
) -> Option<crate::diagnostic::Edit> {
    let condition = edge.attributes.get("condition").filter(|attr| !attr.inherited)?.value.as_text()?;
    let word = regex::Regex::new(&format!(r"\b{}\b", regex::escape(key))).ok()?;
    let rewritten = word.replace_all(condition, meant);
    let written = workflow.source().text().get(span.start..span.end)?;
    (crate::dot_string::unescape(written.trim_matches('"')) == condition)
        .then(|| crate::diagnostic::Edit { span, text: crate::dot_string::quote(&rewritten) })
}

/// A node whose every outgoing edge has a condition fails the run when none of them is true.
pub fn all_conditional_edges(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let graph = workflow.graph();
    for index in graph.node_indices() {
        let node = &graph[index];
        if matches!(node.handler_type(), HandlerType::Exit) {
            continue;
        }
        let outgoing = workflow.outgoing(index);
        if outgoing.is_empty() || !outgoing.iter().all(|edge| edge.edge.is_conditional()) {
            continue;
        }
        out.push(
            Diagnostic::warning(
                "all_conditional_edges",
                format!("every edge out of `{}` has a condition; when none is true the run fails", node.id),
            )
            .node(&node.id)
            .span(node.span)
            .fix(format!("add an unconditional edge from `{}` as the fallback", node.id)),
        );
    }
}

pub fn retry_target_exists(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let owners = std::iter::once((None, workflow.attributes()))
        .chain(workflow.nodes().map(|node| (Some(node.id.as_str()), &node.attributes)));
    for (owner, attributes) in owners {
        for key in ["retry_target", "fallback_retry_target"] {
            let Some(attr) = attributes.get(key) else { continue };
            let Some(target) = attr.value.as_text().map(str::trim).filter(|t| !t.is_empty()) else {
                continue;
            };
            if workflow.node(target).is_some() {
                continue;
            }
            let similar = did_you_mean(target, workflow.nodes().map(|n| n.id.as_str()));
            let fix = match similar {
                Some(similar) => format!("did you mean `{similar}`?"),
                None => "name an existing node".to_string(),
            };
            let whose = if owner.is_some() { "" } else { "graph: " };
            let mut diagnostic = Diagnostic::warning(
                "retry_target_exists",
                format!("{whose}`{key}` names `{target}`, which is not a node"),
            )
            .span(attr.span)
            .fix(fix);
            if let Some(similar) = similar {
                let quoted = crate::dot_string::quote(similar);
                diagnostic = diagnostic.edit_written(workflow.source(), attr.span, target, quoted);
            }
            if let Some(id) = owner {
                diagnostic = diagnostic.node(id);
            }
            out.push(diagnostic);
        }
    }
}

/// Command stages whose failure has nowhere to go end the run when they fail: say so once per
/// workflow, naming them all, so the author decides rather than finds out. Commands are where
/// failure is an expected result (a test run); an agent stage fails only when its model says so
/// or its provider keeps failing, and flagging every agent stage would bury this finding.
pub fn failure_path(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let graph = workflow.graph();
    let in_branches = workflow.branch_nodes();
    let stranded: Vec<&crate::graph::Node> = graph
        .node_indices()
        .filter(|&index| {
            let node = &graph[index];
            node.handler_type() == HandlerType::Command
                && !in_branches.contains(&index)
                && workflow.failure_target(index).is_none()
                && !workflow.outgoing(index).iter().any(|edge| handles_failure(edge.edge))
        })
        .map(|index| &graph[index])
        .collect();
    let Some(first) = stranded.first() else { return };
    let names: Vec<String> = stranded.iter().map(|node| format!("`{}`", node.id)).collect();
    let message = match names.as_slice() {
        [one] => format!("stage {one} has no failure path: if it fails, the run ends"),
        many => format!(
            "{} stages have no failure path: {}; if one fails, the run ends",
            many.len(),
            many.join(", ")
        ),
    };
    // The quick fix routes the failure back to the stage before it (the usual fix-and-retry
    // loop), when that is a stage and not the start.
    let back = graph
        .node_indices()
        .find(|&index| graph[index].id == first.id)
        .and_then(|index| workflow.incoming(index).into_iter().map(|edge| edge.from).next())
        .filter(|from| !matches!(from.handler_type(), HandlerType::Start));
    let edit = back.and_then(|from| {
        let statement = format!(
            "{} -> {} [condition=\"outcome=fail\"]",
            crate::render::dot::id(&first.id),
            crate::render::dot::id(&from.id)
        );
        super::append_statement(workflow, &statement)
    });
    out.push(
        Diagnostic::warning("failure_path", message)
            .node(&first.id)
            .span(first.span)
            .fix(format!(
                "route failures with an edge like `{id} -> fix [condition=\"outcome=fail\"]` or `retry_target=NODE` \
             on the stage; leave it when a failure should end the run",
                id = first.id
            ))
            .edit_opt(edit),
    );
}

/// True when an edge can be taken after a failed stage: its condition holds for `outcome=fail`
/// alone, or names the `fail` outcome (perhaps with other clauses).
fn handles_failure(edge: &crate::graph::Edge) -> bool {
    let Some(condition) = edge.condition() else { return false };
    condition.tested_outcomes().contains(&StageStatus::Fail) || condition.evaluate(&FailedStage)
}

/// A stage that failed, with nothing else known.
struct FailedStage;

impl crate::condition::ConditionScope for FailedStage {
    fn outcome(&self) -> Option<StageStatus> {
        Some(StageStatus::Fail)
    }
    fn preferred_label(&self) -> Option<&str> {
        None
    }
    fn context(&self, _key: &str) -> Option<&serde_json::Value> {
        None
    }
}

pub fn goal_gate_has_retry(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let has_target = |attributes: &crate::graph::Attributes| {
        ["retry_target", "fallback_retry_target"].iter().any(|key| attributes.non_empty_text(key).is_some())
    };
    if has_target(workflow.attributes()) {
        return;
    }
    for node in workflow.nodes().filter(|node| node.is_goal_gate() && !has_target(&node.attributes)) {
        out.push(
            Diagnostic::warning(
                "goal_gate_has_retry",
                format!(
                    "goal gate `{}` has no retry target; if it has not succeeded at exit the run fails",
                    node.id
                ),
            )
            .node(&node.id)
            .span(node.span)
            .fix(format!(
                "set `retry_target` on `{}` (or on the graph) to the node that should try again",
                node.id
            )),
        );
    }
}

/// `freeform=true` belongs on an edge out of a human gate, once: elsewhere nothing answers with
/// text, and two such edges out of one gate leave free text two ways to go.
pub fn freeform_edge(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let mut seen_gates: Vec<&str> = Vec::new();
    for edge in workflow.edges().filter(|edge| edge.edge.settings.freeform) {
        let span = edge.edge.attributes.get("freeform").map_or(edge.edge.span, |attr| attr.key_span);
        if edge.from.handler_type() != HandlerType::Human {
            out.push(
                Diagnostic::warning(
                    "freeform_edge",
                    format!(
                        "`freeform=true` on an edge out of `{}`, which is not a human gate: nothing answers it with text, so it has no effect",
                        edge.from.id
                    ),
                )
                .edge(&edge.from.id, &edge.to.id)
                .span(span)
                .fix("put `freeform=true` on an edge out of a human gate (shape=hexagon), or remove it"),
            );
        } else if seen_gates.contains(&edge.from.id.as_str()) {
            out.push(
                Diagnostic::error(
                    "freeform_edge",
                    format!(
                        "human gate `{}` has more than one `freeform=true` edge: free text could take either",
                        edge.from.id
                    ),
                )
                .edge(&edge.from.id, &edge.to.id)
                .span(span)
                .fix("keep `freeform=true` on one edge out of the gate"),
            );
        } else {
            seen_gates.push(edge.from.id.as_str());
        }
    }
}

/// `selection=random` breaks ties among unconditional edges by a draw; a conditional edge out of
/// the same stage would be taken before any draw whenever it holds, which is not what a weighted
/// choice means (Fabro refuses the combination too).
pub fn random_selection(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for node in workflow.nodes().filter(|node| node.settings.stage.random_selection) {
        let Some(index) = workflow.index_of(&node.id) else { continue };
        let conditional: Vec<String> = workflow
            .outgoing(index)
            .iter()
            .filter(|edge| edge.edge.is_conditional())
            .map(|edge| format!("`{} -> {}`", edge.from.id, edge.to.id))
            .collect();
        if conditional.is_empty() {
            continue;
        }
        let span = node.attributes.get("selection").map_or(node.span, |attr| attr.span);
        out.push(
            Diagnostic::error(
                "random_selection",
                format!(
                    "`{}` has selection=random and conditional edges ({}): a draw cannot weigh an edge whose condition decides it",
                    node.id,
                    conditional.join(", ")
                ),
            )
            .node(&node.id)
            .span(span)
            .fix("give the edges weights and no conditions, or remove selection=random"),
        );
    }
}
