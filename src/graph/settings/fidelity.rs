//! Fidelity: how much of the run's history an LLM stage sees (`fidelity` on a node or on the
//! edge that enters it, `default_fidelity` on the graph), and which of them applies.

use std::fmt;
use std::str::FromStr;

use super::{EdgeSettings, StageSettings, WorkflowSettings};
use crate::graph::Attributes;

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

/// The fidelity a stage runs with: the `fidelity` of the edge it was entered by, else its own,
/// else the graph's `default_fidelity`, else compact.
pub fn resolve(
    edge: Option<&EdgeSettings>,
    stage: &StageSettings,
    workflow: &WorkflowSettings,
) -> FidelityMode {
    edge.and_then(|edge| edge.fidelity).or(stage.fidelity).or(workflow.default_fidelity).unwrap_or_default()
}

/// A `fidelity` or `default_fidelity` value. An unknown one reads as unset, so the next source
/// applies; the `fidelity_valid` rule warns about it.
pub(super) fn read(attributes: &Attributes, key: &str) -> Option<FidelityMode> {
    attributes.non_empty_text(key).and_then(|text| text.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::super::tests::built;
    use super::*;

    #[test]
    fn the_entering_edge_wins_then_the_node_then_the_graph() {
        let workflow = built(
            r#"digraph G { default_fidelity="summary:low"; a -> b [fidelity=full]; a -> c; d [fidelity=truncate]; e [fidelity=bogus] }"#,
        );
        let stage = |id: &str| &workflow.node(id).unwrap().settings.stage;
        let graph = workflow.settings();
        let edge = workflow.graph().edge_weights().find(|e| e.settings.fidelity.is_some()).unwrap();
        assert_eq!(resolve(Some(&edge.settings), stage("b"), graph), FidelityMode::Full);
        assert_eq!(resolve(None, stage("c"), graph), FidelityMode::SummaryLow);
        assert_eq!(resolve(None, stage("d"), graph), FidelityMode::Truncate);
        assert_eq!(resolve(None, stage("e"), graph), FidelityMode::SummaryLow);
        assert_eq!(resolve(None, stage("e"), &WorkflowSettings::default()), FidelityMode::Compact);
        for name in FidelityMode::NAMES {
            assert_eq!(name.parse::<FidelityMode>().map(FidelityMode::as_str), Ok(name));
        }
    }
}
