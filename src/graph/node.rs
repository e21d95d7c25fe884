//! A workflow node (a stage) and an edge (a transition).

use super::attribute::Attributes;
use super::handler_type::HandlerType;
use super::settings::{EdgeSettings, NodeSettings};
use crate::condition::{Condition, ConditionError};
use crate::source::Span;

#[derive(Debug, Clone)]
pub struct Node {
    pub id: String,
    /// Where the node is first named (its declaration, or the edge that created it).
    pub span: Span,
    /// The id is not a plain identifier `[A-Za-z_][A-Za-z0-9_]*` (DOT allows quoted ids and
    /// numerals; fabro's lint rejects them).
    pub irregular_id: bool,
    /// False when the node exists only because an edge names it.
    pub declared: bool,
    pub attributes: Attributes,
    /// `class` attribute entries plus classes derived from enclosing subgraph labels.
    pub classes: Vec<String>,
    /// The node's settings, typed ([`super::settings`]): read when the graph is built and again
    /// after the transforms; what the engine and handlers go by.
    pub settings: NodeSettings,
}

impl Node {
    /// The Graphviz shape (default `box`).
    pub fn shape(&self) -> &str {
        self.attributes.text("shape").unwrap_or("box")
    }

    /// Explicit `type`, then the node's own shape, then the conventional ids `start`/`exit`, then
    /// a shape inherited from a `node [..]` block, then agent.
    pub fn handler_type(&self) -> HandlerType<&str> {
        if let Some(name) = self.attributes.non_empty_text("type") {
            return HandlerType::from_type_name(name.trim());
        }
        let shape = self.attributes.get("shape");
        let own_shape = shape.filter(|attr| !attr.inherited);
        if let Some(kind) = own_shape.and_then(|attr| attr.value.as_text()).and_then(HandlerType::from_shape)
        {
            return kind;
        }
        if own_shape.is_none() {
            match self.id.as_str() {
                "start" | "Start" => return HandlerType::Start,
                "exit" | "Exit" | "end" | "End" => return HandlerType::Exit,
                _ => {}
            }
        }
        shape
            .and_then(|attr| attr.value.as_text())
            .and_then(HandlerType::from_shape)
            .unwrap_or(HandlerType::Agent)
    }

    /// The display label (default: the id).
    pub fn label(&self) -> &str {
        self.attributes.non_empty_text("label").unwrap_or(&self.id)
    }

    pub fn prompt(&self) -> Option<&str> {
        self.attributes.non_empty_text("prompt")
    }

    /// A command stage's script (`None` for other kinds, and when blank).
    pub fn script(&self) -> Option<&str> {
        self.settings.command().and_then(|command| command.script.as_deref())
    }

    pub fn is_goal_gate(&self) -> bool {
        self.attributes.boolean("goal_gate").unwrap_or(false)
    }

    /// An exit node with `outcome=fail`: reaching it ends the run failed, on purpose.
    pub fn is_failing_exit(&self) -> bool {
        self.handler_type() == HandlerType::Exit && self.attributes.text("outcome") == Some("fail")
    }
}

#[derive(Debug, Clone)]
pub struct Edge {
    pub attributes: Attributes,
    /// The edge statement this hop came from.
    pub span: Span,
    /// The `condition` attribute, parsed once when the graph is built.
    pub condition: Option<Result<Condition, ConditionError>>,
    /// The edge's settings, typed: read with the nodes'.
    pub settings: EdgeSettings,
}

impl Edge {
    pub fn label(&self) -> Option<&str> {
        self.attributes.non_empty_text("label")
    }

    pub fn weight(&self) -> i64 {
        self.attributes.integer("weight").unwrap_or(0)
    }

    /// The parsed condition; `None` for unconditional edges and for conditions that failed to
    /// parse (validation refuses to run those).
    pub fn condition(&self) -> Option<&Condition> {
        self.condition.as_ref().and_then(|parsed| parsed.as_ref().ok())
    }

    pub fn is_conditional(&self) -> bool {
        self.condition.is_some()
    }
}
