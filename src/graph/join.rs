//! Where the branches of a parallel stage meet again.
//!
//! A parallel (`component`) node starts one branch per outgoing edge; every branch runs until it
//! reaches the *join node*. That is the fan-in (`tripleoctagon`) node every branch can reach, or,
//! when the branches never meet at a fan-in, the node every branch can reach. Among several, the
//! nearest wins: the one whose farthest branch is closest, then the smallest total distance, then
//! the one declared first, so the choice never depends on hash order.

use std::collections::VecDeque;

use petgraph::graph::NodeIndex;

use super::{HandlerType, Workflow};

impl Workflow {
    /// The nodes inside parallel branches: reachable from a parallel stage's branch starts before
    /// its join. A failure there ends the branch, not the run.
    pub fn branch_nodes(&self) -> std::collections::HashSet<NodeIndex> {
        let mut inside = std::collections::HashSet::new();
        for parallel in self.graph().node_indices() {
            if self.node_at(parallel).handler_type() != HandlerType::Parallel {
                continue;
            }
            let join = self.join_of(parallel);
            let mut pending: Vec<NodeIndex> =
                self.outgoing(parallel).iter().filter_map(|e| self.index_of(&e.to.id)).collect();
            while let Some(index) = pending.pop() {
                if Some(index) == join || index == parallel || !inside.insert(index) {
                    continue;
                }
                pending.extend(self.outgoing(index).iter().filter_map(|e| self.index_of(&e.to.id)));
            }
        }
        inside
    }

    /// The join node of the parallel stage at `parallel`, or `None` when its branches never meet
    /// (or it has no branches).
    pub fn join_of(&self, parallel: NodeIndex) -> Option<NodeIndex> {
        let starts: Vec<NodeIndex> =
            self.outgoing(parallel).iter().filter_map(|e| self.index_of(&e.to.id)).collect();
        if starts.is_empty() {
            return None;
        }
        // For every node: the largest and the summed distance over the branches that reach it,
        // and how many branches reach it.
        let count = self.node_count();
        let mut farthest = vec![0usize; count];
        let mut total = vec![0usize; count];
        let mut reached_by = vec![0usize; count];
        for &start in &starts {
            for (index, distance) in self.distances_from(start, parallel).into_iter().enumerate() {
                if let Some(distance) = distance {
                    farthest[index] = farthest[index].max(distance);
                    total[index] += distance;
                    reached_by[index] += 1;
                }
            }
        }
        let common = (0..count)
            .filter(|&i| reached_by[i] == starts.len() && i != parallel.index())
            .map(NodeIndex::new);
        let nearest = |candidates: &mut dyn Iterator<Item = NodeIndex>| {
            candidates.min_by_key(|index| (farthest[index.index()], total[index.index()], index.index()))
        };
        let fan_in =
            nearest(&mut common.clone().filter(|&i| self.node_at(i).handler_type() == HandlerType::FanIn));
        fan_in.or_else(|| nearest(&mut common.clone()))
    }

    /// Edge counts from `start` to every node it reaches without passing through `avoid`.
    fn distances_from(&self, start: NodeIndex, avoid: NodeIndex) -> Vec<Option<usize>> {
        let graph = self.graph();
        let mut distance = vec![None; graph.node_count()];
        if start == avoid {
            return distance;
        }
        distance[start.index()] = Some(0);
        let mut queue = VecDeque::from([start]);
        while let Some(index) = queue.pop_front() {
            let next_distance = distance[index.index()].map_or(0, |d| d + 1);
            for next in graph.neighbors(index) {
                if next != avoid && distance[next.index()].is_none() {
                    distance[next.index()] = Some(next_distance);
                    queue.push_back(next);
                }
            }
        }
        distance
    }
}

#[cfg(test)]
mod tests {
    use crate::source::SourceFile;

    fn join(dot: &str, parallel: &str) -> Option<String> {
        let checked = crate::Loader::new().load_source(SourceFile::new("t.dot", dot)).expect("parses");
        let workflow = checked.workflow;
        let index = workflow.index_of(parallel).expect("parallel node");
        workflow.join_of(index).map(|i| workflow.node_at(i).id.clone())
    }

    #[test]
    fn the_fan_in_every_branch_reaches_is_the_join() {
        let dot = "digraph G { start [shape=Mdiamond]; exit [shape=Msquare]
            fan [shape=component]; merge [shape=tripleoctagon]
            start -> fan; fan -> a; fan -> b; fan -> c
            a -> a2 -> merge; b -> merge; c -> merge; merge -> exit }";
        assert_eq!(join(dot, "fan").as_deref(), Some("merge"));
    }

    #[test]
    fn nested_parallels_join_at_their_own_fan_ins() {
        let dot = "digraph G { start [shape=Mdiamond]; exit [shape=Msquare]
            outer [shape=component]; inner [shape=component]
            inner_join [shape=tripleoctagon]; outer_join [shape=tripleoctagon]
            start -> outer; outer -> inner; outer -> solo
            inner -> x; inner -> y; x -> inner_join; y -> inner_join; inner_join -> outer_join
            solo -> outer_join; outer_join -> exit }";
        assert_eq!(join(dot, "inner").as_deref(), Some("inner_join"));
        assert_eq!(join(dot, "outer").as_deref(), Some("outer_join"));
    }

    #[test]
    fn without_a_fan_in_the_nearest_common_node_joins() {
        let dot = "digraph G { start [shape=Mdiamond]; exit [shape=Msquare]
            fan [shape=component]
            start -> fan; fan -> a; fan -> b; a -> report; b -> b2 -> report; report -> exit }";
        assert_eq!(join(dot, "fan").as_deref(), Some("report"));
    }

    #[test]
    fn a_fan_in_wins_over_a_nearer_plain_node() {
        let dot = "digraph G { start [shape=Mdiamond]; exit [shape=Msquare]
            fan [shape=component]; merge [shape=tripleoctagon]
            start -> fan; fan -> a; fan -> b; a -> common; b -> common; common -> merge; merge -> exit }";
        assert_eq!(join(dot, "fan").as_deref(), Some("merge"));
    }

    #[test]
    fn branches_that_never_meet_have_no_join() {
        let dot = "digraph G { start [shape=Mdiamond]; exit [shape=Msquare]; other_exit [shape=Msquare]
            fan [shape=component]
            start -> fan; fan -> a; fan -> b; a -> exit; b -> other_exit }";
        assert_eq!(join(dot, "fan"), None);
    }
}
