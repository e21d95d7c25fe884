//! Settings, typed: what a node's, an edge's and the graph's attributes say, read once when the
//! workflow loads: the settings every stage has ([`StageSettings`]), retry and backend, and one
//! parser per kind of stage (LLM, command, wait, human gate, parallel, manager). The engine, the
//! handlers and the backends read these values and never the attributes behind them (a test keeps
//! it so); validation reports the parsers' errors.
//!
//! Settings are read when the graph is built and again after the transforms (which may rewrite
//! attributes, and which give imported stages the importing file's positions), never at run time.
//! A parser never guesses: a value it cannot use is an error, so a workflow that validates runs
//! exactly the settings it wrote.

mod backend;
mod command;
mod context;
mod fidelity;
mod human;
mod llm;
mod manager;
mod parallel;
mod permissions;
mod retry;
mod sandbox;
mod small_tier;
mod stage;
mod wait;
mod watchdog;

pub use backend::Backend;
pub use command::{CommandSettings, Language};
pub use context::{
    attribute_names as context_attribute_names, CompactionCount, CompactionMode, CompactionPreset,
    ContextSettings, ContextSettingsError, ModelTier, SubagentModel, ThreadHandoff, TierThresholds,
    DEFAULT_MAX_REPLAY_CHARS, TOOL_RESULT_CHARS_PREFIX,
};
pub use fidelity::{resolve as resolve_fidelity, FidelityMode, UnknownFidelity};
pub use human::HumanSettings;
pub use llm::{parse_models, LlmSettings, McpSelection, ToolHooks, TurnLimitOutcome};
pub use manager::{
    action_words, ChildReference, ManagerAction, ManagerActions, ManagerSettings, ManagerSettingsError,
    DEFAULT_POLL_INTERVAL, REFERENCE_ATTRIBUTES,
};
pub use parallel::{ErrorPolicy, JoinPolicy, ParallelSettings, ParallelSettingsError, DEFAULT_MAX_PARALLEL};
pub use permissions::{Level as PermissionLevel, LEVELS as PERMISSION_LEVELS};
pub use retry::{RetryOn, RetryPreset, RetrySettings};
pub use sandbox::{parse_paths, Bind, SandboxKind, SandboxSettings};
pub use small_tier::{complaint as small_tier_complaint, is_small_tier, SmallTierParent};
pub use stage::{EdgeSettings, StageSettings, WorkflowSettings};
pub use wait::{WaitError, WaitSettings};
pub use watchdog::WatchdogMode;

use std::time::Duration;

use super::attribute::{self, Attributes, Value, ValueType};
use super::handler_type::HandlerType;
use super::node::Node;
use super::workflow::Workflow;
use crate::source::Span;

/// Every node's settings. The kind-specific ones are there for nodes of that kind only.
#[derive(Debug, Clone, PartialEq)]
pub struct NodeSettings {
    /// How often and how patiently a failed stage is tried again (every kind may retry).
    pub retry: Result<RetrySettings, InvalidAttribute>,
    /// Which LLM backend answers the stage's model calls (LLM stages, and a fan-in that asks a
    /// model to pick the best branch).
    pub backend: Result<Backend, InvalidAttribute>,
    /// What every stage may set (time and visit limits, ceilings, fidelity, thread, sandbox).
    pub stage: StageSettings,
    pub kind: KindSettings,
}

/// The settings only one kind of node has.
#[derive(Debug, Clone, PartialEq)]
pub enum KindSettings {
    /// A parallel (`component`) stage's join and error policies.
    Parallel(Result<ParallelSettings, Vec<ParallelSettingsError>>),
    /// A manager stage's child workflow and supervision.
    Manager(Box<ManagerSettings>),
    /// An LLM (agent or prompt) stage's model, agent and context management (a fan-in's too).
    Llm(Box<LlmSettings>),
    /// A command stage's script and output.
    Command(CommandSettings),
    /// A wait stage's duration.
    Wait(WaitSettings),
    /// A human gate's default choice and free text.
    Human(HumanSettings),
    /// Nodes of every other kind.
    Other,
}

impl NodeSettings {
    /// Reads `node`'s settings; `graph` gives the defaults a node may leave unset
    /// (`default_max_retries`, the graph's `stack.child_dotfile`). `file` is the workflow's file,
    /// whose directory a child workflow's path is relative to.
    pub fn parse(node: &Node, graph: &Attributes, file: &std::path::Path) -> NodeSettings {
        let kind = match node.handler_type() {
            HandlerType::Parallel => KindSettings::Parallel(ParallelSettings::parse(&node.attributes)),
            HandlerType::Manager => {
                let base = file.parent().unwrap_or(std::path::Path::new(""));
                let name = file.file_name().map(|name| name.to_string_lossy()).unwrap_or_default();
                KindSettings::Manager(Box::new(ManagerSettings::parse(node, graph, base, &name)))
            }
            // A fan-in with a prompt asks a model to pick the best branch.
            kind if kind.is_llm() || kind == HandlerType::FanIn => {
                KindSettings::Llm(Box::new(LlmSettings::parse(&node.attributes, graph)))
            }
            HandlerType::Command => KindSettings::Command(CommandSettings::parse(&node.attributes, graph)),
            HandlerType::Wait => KindSettings::Wait(WaitSettings::parse(&node.attributes)),
            HandlerType::Human => KindSettings::Human(HumanSettings::parse(&node.attributes)),
            _ => KindSettings::Other,
        };
        NodeSettings {
            retry: RetrySettings::parse(&node.attributes, graph),
            backend: Backend::parse(&node.attributes),
            stage: StageSettings::parse(&node.attributes, graph),
            kind,
        }
    }

    /// The settings of a parallel stage; `None` for other kinds.
    pub fn parallel(&self) -> Option<&Result<ParallelSettings, Vec<ParallelSettingsError>>> {
        match &self.kind {
            KindSettings::Parallel(settings) => Some(settings),
            _ => None,
        }
    }

    /// The settings of an LLM stage (or a fan-in, which may ask a model); `None` for other kinds.
    pub fn llm(&self) -> Option<&LlmSettings> {
        match &self.kind {
            KindSettings::Llm(settings) => Some(settings),
            _ => None,
        }
    }

    /// The context settings of an LLM stage; `None` for other kinds.
    pub fn context(&self) -> Option<&Result<ContextSettings, Vec<ContextSettingsError>>> {
        self.llm().map(|settings| &settings.context)
    }

    /// The child workflow a manager stage names; `None` for other kinds, and for a manager that
    /// names none.
    pub fn child_workflow(&self) -> Option<&ChildReference> {
        self.manager()?.child.as_ref()
    }

    /// The settings of a command stage; `None` for other kinds.
    pub fn command(&self) -> Option<&CommandSettings> {
        match &self.kind {
            KindSettings::Command(settings) => Some(settings),
            _ => None,
        }
    }

    /// The settings of a wait stage; `None` for other kinds.
    pub fn wait(&self) -> Option<&WaitSettings> {
        match &self.kind {
            KindSettings::Wait(settings) => Some(settings),
            _ => None,
        }
    }

    /// The settings of a human gate; `None` for other kinds.
    pub fn human(&self) -> Option<&HumanSettings> {
        match &self.kind {
            KindSettings::Human(settings) => Some(settings),
            _ => None,
        }
    }

    /// The settings of a manager stage; `None` for other kinds.
    pub fn manager(&self) -> Option<&ManagerSettings> {
        match &self.kind {
            KindSettings::Manager(settings) => Some(settings),
            _ => None,
        }
    }
}

impl Default for NodeSettings {
    /// The settings of a node without attributes, before its own are read.
    fn default() -> Self {
        NodeSettings {
            retry: Ok(RetrySettings::default()),
            backend: Ok(Backend::Api),
            stage: StageSettings::default(),
            kind: KindSettings::Other,
        }
    }
}

/// Reads the settings of the graph, every node and every edge (see the module docs for when).
pub fn read_settings(workflow: &mut Workflow) {
    let file = workflow.source().path().to_path_buf();
    let graph = workflow.attributes.clone();
    workflow.settings = WorkflowSettings::parse(&graph);
    for node in workflow.graph.node_weights_mut() {
        node.settings = NodeSettings::parse(node, &graph, &file);
    }
    for edge in workflow.graph.edge_weights_mut() {
        edge.settings = EdgeSettings::parse(&edge.attributes);
    }
}

/// A setting whose value is not of its attribute's type. The `attribute_type` rule reports these
/// (for every attribute, not only settings), so the setting rules leave them out.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("`{key}` is `{raw}`, expected {expected}")]
pub struct InvalidAttribute {
    pub key: &'static str,
    pub raw: String,
    pub expected: ValueType,
    pub span: Span,
}

/// A typed read of one setting: `Ok(None)` when unset, an error when the value is not of the
/// attribute's type.
fn read<'a, T>(
    attributes: &'a Attributes,
    key: &'static str,
    typed: impl FnOnce(&'a Value) -> Option<T>,
) -> Result<Option<T>, InvalidAttribute> {
    let Some(attr) = attributes.get(key) else { return Ok(None) };
    let invalid = || InvalidAttribute {
        key,
        raw: attr.value.to_string(),
        expected: attribute::spec(key).map_or(ValueType::Text, |spec| spec.value_type),
        span: attr.span,
    };
    typed(&attr.value).map(Some).ok_or_else(invalid)
}

/// The value of a typed read; an invalid one is added to `errors` (and reads as unset).
fn noted<T, E: From<InvalidAttribute>>(
    read: Result<Option<T>, InvalidAttribute>,
    errors: &mut Vec<E>,
) -> Option<T> {
    read.unwrap_or_else(|invalid| {
        errors.push(E::from(invalid));
        None
    })
}

fn text(value: &Value) -> Option<&str> {
    value.as_text()
}

fn count(value: &Value) -> Option<u64> {
    match value {
        Value::Integer(n) => u64::try_from(*n).ok(),
        _ => None,
    }
}

fn number(value: &Value) -> Option<f64> {
    match value {
        Value::Float(x) => Some(*x),
        Value::Integer(n) => Some(*n as f64),
        _ => None,
    }
}

fn boolean(value: &Value) -> Option<bool> {
    match value {
        Value::Boolean(b) => Some(*b),
        _ => None,
    }
}

fn duration(value: &Value) -> Option<Duration> {
    match value {
        Value::Duration(d) => Some(*d),
        _ => None,
    }
}

/// A word of a fixed set (`OneOf`), as its enum.
fn word<T>(value: &Value, from_name: impl FnOnce(&str) -> Option<T>) -> Option<T> {
    value.as_text().map(str::trim).and_then(from_name)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::source::SourceFile;

    /// The workflow of `dot`, built (settings read, no transforms or rules).
    pub(crate) fn built(dot: &str) -> Workflow {
        let source = std::sync::Arc::new(SourceFile::new("flows/t.dot", dot));
        let tree = crate::syntax::parse(source.text()).expect("parses");
        super::super::build(&tree, source.clone())
    }

    #[test]
    fn a_value_of_the_wrong_type_is_an_error_with_its_position() {
        let workflow = built("digraph G { a [max_retries=lots, backend=clu] }");
        let a = workflow.node("a").unwrap();
        let retry = a.settings.retry.as_ref().unwrap_err();
        assert_eq!(retry.to_string(), "`max_retries` is `lots`, expected a whole number (0 or more)");
        assert_eq!(&workflow.source().text()[retry.span.start..retry.span.end], "lots");
        let backend = a.settings.backend.as_ref().unwrap_err();
        assert_eq!(backend.to_string(), "`backend` is `clu`, expected one of api, cli");
    }

    #[test]
    fn only_stages_of_a_kind_have_its_settings() {
        let workflow = built(
            r#"digraph G { p [shape=component]; m [shape=house, stack.child_workflow="c.dot"]; a [shape=diamond, join_policy=quorum]; l [shape=box] }"#,
        );
        assert!(workflow.node("l").unwrap().settings.context().is_some());
        assert!(workflow.node("p").unwrap().settings.parallel().is_some());
        assert!(workflow.node("m").unwrap().settings.manager().is_some());
        assert!(workflow.node("m").unwrap().settings.command().is_none());
        let a = &workflow.node("a").unwrap().settings;
        assert_eq!(a.kind, KindSettings::Other);
        assert_eq!(a.backend, Ok(Backend::Api));
    }
}
