//! Fidelity: how much of the run's history an LLM stage sees. This module holds the mode names
//! and how a stage's mode and thread resolve; [`preamble`] builds the text the mode asks for.

pub mod preamble;

use std::fmt;
use std::str::FromStr;

#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FidelityMode {
    /// The whole conversation thread, no preamble.
    Full,
    /// Only the goal and the run id.
    Truncate,
    /// Completed stages with handler details, then the context (the default).
    #[default]
    Compact,
    SummaryLow,
    SummaryMedium,
    SummaryHigh,
}

impl FidelityMode {
    pub const NAMES: [&'static str; 6] =
        ["full", "truncate", "compact", "summary:low", "summary:medium", "summary:high"];

    pub fn as_str(self) -> &'static str {
        match self {
            FidelityMode::Full => "full",
            FidelityMode::Truncate => "truncate",
            FidelityMode::Compact => "compact",
            FidelityMode::SummaryLow => "summary:low",
            FidelityMode::SummaryMedium => "summary:medium",
            FidelityMode::SummaryHigh => "summary:high",
        }
    }
}

impl fmt::Display for FidelityMode {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// The fidelity a stage runs with: the `fidelity` of the edge it was entered by, else its own,
/// else the graph's `default_fidelity`, else compact. Invalid values (which lint warns about)
/// fall back to compact.
pub fn resolve(
    edge: Option<&crate::graph::Attributes>,
    node: &crate::graph::Attributes,
    graph: &crate::graph::Attributes,
) -> FidelityMode {
    edge.and_then(|e| e.non_empty_text("fidelity"))
        .or_else(|| node.non_empty_text("fidelity"))
        .or_else(|| graph.non_empty_text("default_fidelity"))
        .and_then(|text| text.parse().ok())
        .unwrap_or_default()
}

/// The conversation thread a `full`-fidelity stage continues: its own `thread_id`, else the
/// entering edge's, else the graph's `default_thread`, else the class its enclosing subgraph's
/// label derives, else the id of the stage that ran before it.
pub fn resolve_thread<'w>(
    node: &'w crate::graph::Node,
    edge: Option<&'w crate::graph::Attributes>,
    workflow: &'w crate::graph::Workflow,
    previous: Option<&'w str>,
) -> Option<&'w str> {
    node.attributes
        .non_empty_text("thread_id")
        .or_else(|| edge.and_then(|e| e.non_empty_text("thread_id")))
        .or_else(|| workflow.attributes().non_empty_text("default_thread"))
        .or_else(|| {
            let derived =
                |class: &&String| workflow.subgraphs().iter().any(|s| s.class.as_ref() == Some(*class));
            node.classes.iter().find(derived).map(String::as_str)
        })
        .or(previous)
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown fidelity `{0}`; expected full, truncate, compact, summary:low, summary:medium or summary:high"
)]
pub struct UnknownFidelity(pub String);

impl FromStr for FidelityMode {
    type Err = UnknownFidelity;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Ok(match s.trim() {
            "full" => FidelityMode::Full,
            "truncate" => FidelityMode::Truncate,
            "compact" => FidelityMode::Compact,
            "summary:low" => FidelityMode::SummaryLow,
            "summary:medium" => FidelityMode::SummaryMedium,
            "summary:high" => FidelityMode::SummaryHigh,
            _ => return Err(UnknownFidelity(s.to_string())),
        })
    }
}
