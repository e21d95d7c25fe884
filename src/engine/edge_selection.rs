//! Which edge a run takes after a stage. For a stage that did not fail, in order:
//! (1) edges whose condition is true, best by weight then target id; (2) the preferred label among
//! unconditional edges; (3) the suggested next ids among unconditional edges; (4) the highest
//! weight among unconditional edges, (5) ties broken by target id. A stage with
//! `selection=random` picks among the candidates of steps 2 to 5 by a draw weighted by their
//! weights (one of 0 or less counts as 1). A failed stage takes only an edge whose condition is
//! true; otherwise its retry targets decide (see [`Workflow::failure_target`]).

use petgraph::graph::NodeIndex;

use crate::condition::Scope;
use crate::context::artifacts::ArtifactStore;
use crate::context::Context;
use crate::graph::{normalize_label, EdgeRef, HandlerType, Node, Workflow};
use crate::outcome::{Outcome, StageStatus};

/// Which step chose the edge; recorded in the `edge.selected` event.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SelectionReason {
    Condition,
    PreferredLabel,
    SuggestedNextId,
    Weight,
    Lexical,
    /// `selection=random`: a weighted draw among the candidates.
    Random,
    /// Dry run: no condition held, and the edge's outcome clause matches the stage's outcome.
    DryRunOutcome,
    /// Dry run: no condition held, and no edge tests this outcome: the best by weight and id.
    DryRunWeight,
    /// Dry run: the chosen edge led back into a loop at its visit cap; this one leaves it.
    DryRunLoopExit,
}

impl SelectionReason {
    pub fn as_str(self) -> &'static str {
        match self {
            SelectionReason::Condition => "condition",
            SelectionReason::PreferredLabel => "preferred_label",
            SelectionReason::SuggestedNextId => "suggested_next_id",
            SelectionReason::Weight => "weight",
            SelectionReason::Lexical => "lexical",
            SelectionReason::Random => "random",
            SelectionReason::DryRunOutcome => "dry_run_outcome",
            SelectionReason::DryRunWeight => "dry_run_weight",
            SelectionReason::DryRunLoopExit => "dry_run_loop_exit",
        }
    }
}

/// Best first: higher weight, then lexically smaller target id.
fn rank(a: &EdgeRef<'_>, b: &EdgeRef<'_>) -> std::cmp::Ordering {
    b.edge.weight().cmp(&a.edge.weight()).then_with(|| a.to.id.cmp(&b.to.id))
}

/// The candidate `draw` picks (a number from 0 to `u64::MAX`), each as likely as its weight (one
/// of 0 or less counts as 1).
fn weighted<'a, 'w>(candidates: &[&'a EdgeRef<'w>], draw: u64) -> Option<&'a EdgeRef<'w>> {
    let weight = |edge: &EdgeRef<'_>| u128::from(edge.edge.weight().max(1).unsigned_abs());
    let total: u128 = candidates.iter().map(|edge| weight(edge)).sum();
    if total == 0 {
        return None;
    }
    let mut point = u128::from(draw) * total / (u128::from(u64::MAX) + 1);
    for edge in candidates {
        if point < weight(edge) {
            return Some(edge);
        }
        point -= weight(edge);
    }
    candidates.last().copied()
}

/// The edge to take from `from`, or `None` when no edge is eligible.
/// `store`, when given, resolves offloaded values the conditions read. `draw`, for a stage with
/// `selection=random`, picks among the candidates (see [`random_draw`]).
pub fn select_edge<'w>(
    workflow: &'w Workflow,
    from: NodeIndex,
    outcome: &Outcome,
    context: &Context,
    store: Option<&ArtifactStore>,
    draw: Option<u64>,
) -> Option<(EdgeRef<'w>, SelectionReason)> {
    let edges = workflow.outgoing(from);
    let mut scope = Scope::new(Some(outcome), context);
    if let Some(store) = store {
        let keys = edges.iter().filter_map(|e| e.edge.condition()).flat_map(|c| c.context_keys());
        scope = scope.resolving(keys, store);
    }
    let matching = edges
        .iter()
        .filter(|e| e.edge.condition().is_some_and(|c| c.evaluate(&scope)))
        .min_by(|a, b| rank(a, b));
    if let Some(edge) = matching {
        return Some((*edge, SelectionReason::Condition));
    }
    if outcome.status == StageStatus::Fail {
        return None;
    }
    let unconditional: Vec<&EdgeRef<'w>> = edges.iter().filter(|e| !e.edge.is_conditional()).collect();
    // One of several candidates: the best by rank, or the draw's.
    let pick = |candidates: Vec<&'_ &EdgeRef<'w>>| -> Option<EdgeRef<'w>> {
        let candidates: Vec<&EdgeRef<'w>> = candidates.into_iter().copied().collect();
        match draw {
            Some(draw) => weighted(&candidates, draw).copied(),
            None => candidates.into_iter().min_by(|a, b| rank(a, b)).copied(),
        }
    };
    if let Some(label) = outcome.preferred_label.as_deref().map(normalize_label).filter(|l| !l.is_empty()) {
        let by_label = pick(
            unconditional
                .iter()
                .filter(|e| e.edge.label().is_some_and(|l| normalize_label(l) == label))
                .collect(),
        );
        if let Some(edge) = by_label {
            return Some((edge, SelectionReason::PreferredLabel));
        }
    }
    for id in &outcome.suggested_next_ids {
        if let Some(edge) = pick(unconditional.iter().filter(|e| e.to.id == *id).collect()) {
            return Some((edge, SelectionReason::SuggestedNextId));
        }
    }
    if draw.is_some() {
        return pick(unconditional.iter().collect()).map(|edge| (edge, SelectionReason::Random));
    }
    let best = unconditional.iter().min_by(|a, b| rank(a, b))?;
    let tied = unconditional.iter().filter(|e| e.edge.weight() == best.edge.weight()).count() > 1;
    Some((**best, if tied { SelectionReason::Lexical } else { SelectionReason::Weight }))
}

/// The draw of a `selection=random` stage's visit: the same for the same run, node and visit, so a
/// resumed or re-read run takes the edge it took.
pub fn random_draw(run_id: &str, node_id: &str, visit: u32) -> u64 {
    use sha2::Digest;
    let digest = sha2::Sha256::digest(format!("{run_id}\0{node_id}\0{visit}").as_bytes());
    let mut bytes = [0u8; 8];
    bytes.copy_from_slice(&digest[..8]);
    u64::from_le_bytes(bytes)
}

/// Whether the edge's condition says nothing against `status`: it tests no outcome, or names
/// `status` in an `outcome=` clause.
fn allows_outcome(edge: &EdgeRef<'_>, status: StageStatus) -> bool {
    edge.edge.condition().is_none_or(|condition| {
        let tested = condition.tested_outcomes();
        tested.is_empty() || tested.contains(&status)
    })
}

/// A dry run's edge when no edge is eligible: simulated stages set no context, so a condition on
/// it cannot hold. The conditional edge whose outcome clause matches the stage's outcome, else the
/// best (by weight and id) of the edges whose conditions do not test another outcome.
pub fn assumed_edge<'w>(
    workflow: &'w Workflow,
    from: NodeIndex,
    outcome: &Outcome,
) -> Option<(EdgeRef<'w>, SelectionReason)> {
    let edges = workflow.outgoing(from);
    let status = outcome.status;
    let naming = edges
        .iter()
        .filter(|e| e.edge.condition().is_some_and(|c| c.tested_outcomes().contains(&status)))
        .min_by(|a, b| rank(a, b));
    if let Some(edge) = naming {
        return Some((*edge, SelectionReason::DryRunOutcome));
    }
    let allowed = edges.iter().filter(|e| allows_outcome(e, status)).min_by(|a, b| rank(a, b));
    allowed
        .or_else(|| edges.iter().min_by(|a, b| rank(a, b)))
        .map(|edge| (*edge, SelectionReason::DryRunWeight))
}

/// Whether a run at `start` can still end (at an exit, or a stage without outgoing edges) without
/// passing a node that is `capped` (whose visit cap refuses its next visit).
pub fn can_end(workflow: &Workflow, start: NodeIndex, capped: impl Fn(&Node) -> bool) -> bool {
    let graph = workflow.graph();
    let mut seen = vec![false; graph.node_count()];
    let mut stack = vec![start];
    while let Some(index) = stack.pop() {
        let node = &graph[index];
        if std::mem::replace(&mut seen[index.index()], true) || capped(node) {
            continue;
        }
        let mut next = graph.neighbors(index).peekable();
        if node.handler_type() == HandlerType::Exit || next.peek().is_none() {
            return true;
        }
        stack.extend(next);
    }
    false
}

/// A dry run's way out of a loop: among the edges from `from` whose target may still run
/// (`may_run`), the one into the least visited target; among those, one whose condition does not
/// test another outcome (a stage could report any custom outcome), then the best by weight and id.
pub fn loop_exit<'w>(
    workflow: &'w Workflow,
    from: NodeIndex,
    outcome: &Outcome,
    visits: impl Fn(&str) -> u32,
    may_run: impl Fn(&EdgeRef<'w>) -> bool,
) -> Option<EdgeRef<'w>> {
    workflow.outgoing(from).into_iter().filter(|e| may_run(e)).min_by(|a, b| {
        let contradicts = |e: &EdgeRef<'_>| !allows_outcome(e, outcome.status);
        visits(&a.to.id)
            .cmp(&visits(&b.to.id))
            .then_with(|| contradicts(a).cmp(&contradicts(b)))
            .then_with(|| rank(a, b))
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::source::SourceFile;

    fn workflow(edges: &str) -> Workflow {
        let text = format!(
            "digraph T {{ start [shape=Mdiamond]; exit [shape=Msquare]; a [prompt=\"x\"]; b [prompt=\"x\"]; c [prompt=\"x\"]; fix [prompt=\"x\"]\n start -> a\n {edges}\n b -> exit\n c -> exit\n fix -> exit }}"
        );
        crate::Loader::new().load_source(SourceFile::new("t.dot", text)).unwrap().workflow
    }

    fn pick(workflow: &Workflow, outcome: &Outcome, context: &Context) -> Option<(String, SelectionReason)> {
        let from = workflow.index_of("a").unwrap();
        select_edge(workflow, from, outcome, context, None, None)
            .map(|(edge, reason)| (edge.to.id.clone(), reason))
    }

    #[test]
    fn a_random_draw_follows_the_weights_and_the_same_draw_takes_the_same_edge() {
        let w = workflow("a -> b [weight=3]\n a -> c [weight=1]");
        let from = w.index_of("a").unwrap();
        let taken = |draw: u64| {
            let (edge, reason) =
                select_edge(&w, from, &Outcome::success(), &Context::new(), None, Some(draw)).unwrap();
            assert_eq!(reason, SelectionReason::Random);
            edge.to.id.clone()
        };
        let mut to_b = 0;
        for visit in 0..1000 {
            let draw = random_draw("run-1", "a", visit);
            assert_eq!(taken(draw), taken(draw));
            to_b += usize::from(taken(draw) == "b");
        }
        assert!((700..=800).contains(&to_b), "b taken {to_b} times in 1000, for weights 3 and 1");
        // A weight of 0 or less counts as 1.
        let w = workflow("a -> b [weight=0]\n a -> c [weight=-5]");
        let from = w.index_of("a").unwrap();
        let to: std::collections::BTreeSet<String> = (0..50)
            .map(|visit| {
                select_edge(
                    &w,
                    from,
                    &Outcome::success(),
                    &Context::new(),
                    None,
                    Some(random_draw("r", "a", visit)),
                )
                .unwrap()
                .0
                .to
                .id
                .clone()
            })
            .collect();
        assert_eq!(to.len(), 2);
    }

    #[test]
    fn a_true_condition_wins_over_weight() {
        let w = workflow("a -> b [weight=10]\n a -> c [condition=\"outcome=success\"]");
        assert_eq!(
            pick(&w, &Outcome::success(), &Context::new()),
            Some(("c".into(), SelectionReason::Condition))
        );
    }

    #[test]
    fn weight_then_lexical_among_unconditional_edges() {
        let w = workflow("a -> c [weight=2]\n a -> b [weight=1]");
        assert_eq!(
            pick(&w, &Outcome::success(), &Context::new()),
            Some(("c".into(), SelectionReason::Weight))
        );
        let w = workflow("a -> c\n a -> b");
        assert_eq!(
            pick(&w, &Outcome::success(), &Context::new()),
            Some(("b".into(), SelectionReason::Lexical))
        );
    }

    #[test]
    fn preferred_label_then_suggested_ids() {
        let w = workflow("a -> b [label=\"[A] Approve\"]\n a -> c [label=\"[F] Fix\"]");
        let outcome = Outcome { preferred_label: Some("fix".into()), ..Outcome::success() };
        assert_eq!(pick(&w, &outcome, &Context::new()), Some(("c".into(), SelectionReason::PreferredLabel)));
        let outcome = Outcome { suggested_next_ids: vec!["nope".into(), "c".into()], ..Outcome::success() };
        assert_eq!(pick(&w, &outcome, &Context::new()), Some(("c".into(), SelectionReason::SuggestedNextId)));
    }

    #[test]
    fn conditions_read_the_context() {
        let w = workflow("a -> b\n a -> c [condition=\"context.ready=true\"]");
        let mut context = Context::new();
        assert_eq!(pick(&w, &Outcome::success(), &context).unwrap().0, "b");
        context.set("ready", true);
        assert_eq!(pick(&w, &Outcome::success(), &context).unwrap().0, "c");
    }

    #[test]
    fn a_failed_stage_takes_only_matching_conditions_then_retry_targets() {
        let w = workflow("a -> b\n a -> fix [condition=\"outcome=fail\"]");
        assert_eq!(pick(&w, &Outcome::fail("x"), &Context::new()).unwrap().0, "fix");
        let w = workflow("a -> b");
        assert_eq!(pick(&w, &Outcome::fail("x"), &Context::new()), None);
        let text = "digraph T { start [shape=Mdiamond]; exit [shape=Msquare]; a [prompt=\"x\", retry_target=missing, fallback_retry_target=start]; start -> a -> exit }";
        let w = crate::Loader::new().load_source(SourceFile::new("t.dot", text)).unwrap().workflow;
        assert_eq!(w.failure_target(w.index_of("a").unwrap()), Some("start"));
    }
}
