//! Fidelity at run time: which conversation thread a `full`-fidelity stage continues; [`preamble`]
//! builds the text the other modes ask for. The modes themselves, and which one a stage runs with,
//! are settings ([`crate::graph::settings::FidelityMode`]).

pub mod preamble;

/// The conversation thread a `full`-fidelity stage continues: its own `thread_id`, else the
/// entering edge's, else the graph's `default_thread`, else the class its enclosing subgraph's
/// label derives, else the id of the stage that ran before it.
pub fn resolve_thread<'w>(
    node: &'w crate::graph::Node,
    edge: Option<&'w crate::graph::settings::EdgeSettings>,
    workflow: &'w crate::graph::Workflow,
    previous: Option<&'w str>,
) -> Option<&'w str> {
    node.settings
        .stage
        .thread_id
        .as_deref()
        .or_else(|| edge.and_then(|edge| edge.thread_id.as_deref()))
        .or(workflow.settings().default_thread.as_deref())
        .or_else(|| {
            let derived =
                |class: &&String| workflow.subgraphs().iter().any(|s| s.class.as_ref() == Some(*class));
            node.classes.iter().find(derived).map(String::as_str)
        })
        .or(previous)
}
