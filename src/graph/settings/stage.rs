//! What every stage may set, whatever its kind: a time limit, a visit limit, its own usage
//! ceilings, its fidelity and thread, and its sandbox; and what an edge and the graph set for the
//! stages they lead to or hold.

use std::time::Duration;

use super::fidelity::{self, FidelityMode};
use super::sandbox::SandboxSettings;
use crate::graph::Attributes;

/// The settings every stage has.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct StageSettings {
    /// `timeout`: how long a command, a model call or a gate may take.
    pub timeout: Option<Duration>,
    /// `max_visits`: the most times the stage may run in one run.
    pub max_visits: Option<i64>,
    /// `max_stage_tokens`, else the graph's `default_max_stage_tokens`.
    pub max_tokens: Option<u64>,
    /// `max_stage_cost` (USD), else the graph's `default_max_stage_cost`.
    pub max_cost: Option<f64>,
    /// `fidelity` (the entering edge's and the graph's default are resolved at run time:
    /// [`fidelity::resolve`]).
    pub fidelity: Option<FidelityMode>,
    /// `thread_id`.
    pub thread_id: Option<String>,
    /// Where a goal gate sends the run when it has not succeeded: `retry_target`, then
    /// `fallback_retry_target`, then the graph's two, in that order.
    pub retry_targets: Vec<String>,
    pub sandbox: SandboxSettings,
    /// `selection=random`: ties among the edges out of the stage are broken by a weighted draw.
    pub random_selection: bool,
}

impl StageSettings {
    pub(super) fn parse(attributes: &Attributes, graph: &Attributes) -> StageSettings {
        let count = |value: Option<i64>| value.and_then(|n| u64::try_from(n).ok());
        StageSettings {
            timeout: attributes.duration("timeout"),
            max_visits: attributes.integer("max_visits"),
            max_tokens: count(
                attributes.integer("max_stage_tokens").or_else(|| graph.integer("default_max_stage_tokens")),
            ),
            max_cost: attributes.float("max_stage_cost").or_else(|| graph.float("default_max_stage_cost")),
            fidelity: fidelity::read(attributes, "fidelity"),
            thread_id: text(attributes, "thread_id"),
            retry_targets: [
                attributes.non_empty_text("retry_target"),
                attributes.non_empty_text("fallback_retry_target"),
                graph.non_empty_text("retry_target"),
                graph.non_empty_text("fallback_retry_target"),
            ]
            .into_iter()
            .flatten()
            .map(|target| target.trim().to_string())
            .collect(),
            sandbox: SandboxSettings::parse(attributes, "sandbox"),
            random_selection: attributes.text("selection").is_some_and(|text| text.trim() == "random"),
        }
    }
}

/// What an edge sets for the stage it enters, and for the walk.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct EdgeSettings {
    /// `fidelity`: the entered stage's fidelity when it comes this way.
    pub fidelity: Option<FidelityMode>,
    /// `thread_id`.
    pub thread_id: Option<String>,
    /// `loop_restart=true`: taking the edge starts the run over in a fresh run directory.
    pub loop_restart: bool,
    /// `freeform=true` on an edge out of a human gate: a free-text answer takes it.
    pub freeform: bool,
}

impl EdgeSettings {
    pub fn parse(attributes: &Attributes) -> EdgeSettings {
        EdgeSettings {
            fidelity: fidelity::read(attributes, "fidelity"),
            thread_id: text(attributes, "thread_id"),
            loop_restart: attributes.boolean("loop_restart").unwrap_or(false),
            freeform: attributes.boolean("freeform").unwrap_or(false),
        }
    }
}

/// What the graph sets for the run as a whole (its defaults for stages are read into each
/// stage's settings).
#[derive(Debug, Clone, PartialEq, Default)]
pub struct WorkflowSettings {
    /// `max_tokens`: the run's token ceiling (`--max-tokens` wins).
    pub max_tokens: Option<u64>,
    /// `max_cost` (USD): the run's cost ceiling (`--max-cost` wins).
    pub max_cost: Option<f64>,
    /// `max_node_visits`: the most times any stage may run.
    pub max_node_visits: Option<i64>,
    /// `stall_timeout`: how long a stage may show no sign of life (`Some(0)`: never stopped).
    pub stall_timeout: Option<std::time::Duration>,
    /// `failure_signature_limit`: how often the same deterministic or structural failure may
    /// happen before the run stops (`Some(0)`: never).
    pub failure_signature_limit: Option<u64>,
    /// `artifact_threshold`: context values larger than this many bytes go to the artifact store.
    pub artifact_threshold: Option<usize>,
    /// `context_files`: the run's reference files, as written.
    pub context_files: Option<String>,
    /// `default_fidelity`.
    pub default_fidelity: Option<FidelityMode>,
    /// `default_thread`.
    pub default_thread: Option<String>,
    /// `default_sandbox`, and the graph's `sandbox_paths` and `sandbox_env`, which add to every
    /// stage's.
    pub sandbox: SandboxSettings,
}

/// How long a stage may show no sign of life unless `stall_timeout` says.
pub const DEFAULT_STALL_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(30 * 60);

impl WorkflowSettings {
    /// The stall timeout in force; `None` when `stall_timeout=0` turns it off.
    pub fn stall_timeout(&self) -> Option<std::time::Duration> {
        Some(self.stall_timeout.unwrap_or(DEFAULT_STALL_TIMEOUT)).filter(|timeout| !timeout.is_zero())
    }

    pub fn parse(graph: &Attributes) -> WorkflowSettings {
        WorkflowSettings {
            max_tokens: graph.integer("max_tokens").and_then(|n| u64::try_from(n).ok()),
            max_cost: graph.float("max_cost"),
            max_node_visits: graph.integer("max_node_visits"),
            stall_timeout: graph.duration("stall_timeout"),
            failure_signature_limit: graph
                .integer("failure_signature_limit")
                .and_then(|n| u64::try_from(n).ok()),
            artifact_threshold: graph.integer("artifact_threshold").and_then(|n| usize::try_from(n).ok()),
            context_files: text(graph, "context_files"),
            default_fidelity: fidelity::read(graph, "default_fidelity"),
            default_thread: text(graph, "default_thread"),
            sandbox: SandboxSettings::parse(graph, "default_sandbox"),
        }
    }
}

/// A text setting; blank reads as unset.
pub(super) fn text(attributes: &Attributes, key: &str) -> Option<String> {
    attributes.non_empty_text(key).map(str::to_string)
}

#[cfg(test)]
mod tests {
    use super::super::tests::built;
    use super::*;

    #[test]
    fn stage_ceilings_fall_back_to_the_graph_defaults() {
        let workflow = built(
            "digraph G { default_max_stage_tokens=500; default_max_stage_cost=0.5; a [max_stage_tokens=20]; b [max_stage_cost=2] }",
        );
        let stage = |id: &str| &workflow.node(id).unwrap().settings.stage;
        assert_eq!((stage("a").max_tokens, stage("a").max_cost), (Some(20), Some(0.5)));
        assert_eq!((stage("b").max_tokens, stage("b").max_cost), (Some(500), Some(2.0)));
    }

    #[test]
    fn retry_targets_list_the_node_then_the_graph() {
        let workflow = built(
            r#"digraph G { retry_target=c; fallback_retry_target=d; a [retry_target=" b ", fallback_retry_target=""]; b; c; d }"#,
        );
        assert_eq!(workflow.node("a").unwrap().settings.stage.retry_targets, ["b", "c", "d"]);
    }

    #[test]
    fn edges_and_the_graph_have_settings_of_their_own() {
        let workflow = built(
            r#"digraph G { max_tokens=100; max_cost=1.5; max_node_visits=7; context_files="a.md"; default_thread=t; a -> b [fidelity="summary:high", thread_id=x, loop_restart=true] }"#,
        );
        let graph = workflow.settings();
        assert_eq!(
            (graph.max_tokens, graph.max_cost, graph.max_node_visits),
            (Some(100), Some(1.5), Some(7))
        );
        assert_eq!(
            (graph.context_files.as_deref(), graph.default_thread.as_deref()),
            (Some("a.md"), Some("t"))
        );
        let edge = &workflow.graph().edge_weights().next().unwrap().settings;
        assert_eq!(
            edge,
            &EdgeSettings {
                fidelity: Some(FidelityMode::SummaryHigh),
                thread_id: Some("x".into()),
                loop_restart: true,
                freeform: false
            }
        );
    }
}
