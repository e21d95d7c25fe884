//! A manager stage's settings: the child workflow it runs and how it supervises the child.

use std::path::{Path, PathBuf};
use std::time::Duration;

use super::{count, duration, noted, read, text, InvalidAttribute};
use crate::condition::{Condition, ConditionError};
use crate::graph::{Attributes, Node};
use crate::source::Span;

/// `manager.poll_interval` when the node sets none.
pub const DEFAULT_POLL_INTERVAL: Duration = Duration::from_secs(45);

/// The attributes naming a manager's child workflow, in the order they are looked up: the node's
/// `stack.child_workflow`, its `stack.child_dotfile`, then the graph's `stack.child_dotfile`.
pub const REFERENCE_ATTRIBUTES: [&str; 2] = ["stack.child_workflow", "stack.child_dotfile"];

/// The node attribute holding a manager's child workflow itself, as DOT text (Fabro's inline
/// child), looked up after the node's file attributes and before the graph's.
pub const INLINE_ATTRIBUTE: &str = "stack.child_dot_source";

/// Where a manager node's child workflow is.
#[derive(Debug, Clone, PartialEq)]
pub struct ChildReference {
    /// As written: a file name, or the DOT text of an inline child.
    pub text: String,
    /// The attribute that names it (on the node or the graph).
    pub span: Span,
    /// Resolved against the parent file's directory; for an inline child, a name beside the
    /// parent file that says where the text is (`parent.dot[m.stack.child_dot_source]`).
    pub path: PathBuf,
    /// The child is the DOT text in `stack.child_dot_source`, not a file.
    pub inline: bool,
}

impl ChildReference {
    /// The child workflow `node` names, if it names one; `base` is the parent file's directory
    /// and `parent` its file name.
    fn of(node: &Node, graph: &Attributes, base: &Path, parent: &str) -> Option<ChildReference> {
        let text_of = |attr: &crate::graph::Attr| {
            attr.value.as_text().map(str::trim).filter(|text| !text.is_empty()).map(str::to_string)
        };
        if let Some(attr) = REFERENCE_ATTRIBUTES.iter().find_map(|key| node.attributes.get(key)) {
            let text = text_of(attr)?;
            return Some(ChildReference { path: base.join(&text), text, span: attr.span, inline: false });
        }
        if let Some(attr) = node.attributes.get(INLINE_ATTRIBUTE) {
            let text = text_of(attr)?;
            let path = base.join(format!("{parent}[{}.{INLINE_ATTRIBUTE}]", node.id));
            return Some(ChildReference { text, span: attr.span, path, inline: true });
        }
        let attr = graph.get("stack.child_dotfile")?;
        let text = text_of(attr)?;
        Some(ChildReference { path: base.join(&text), text, span: attr.span, inline: false })
    }
}

/// One word of `manager.actions`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ManagerAction {
    /// Copy the child's state into `stack.child.*`.
    Observe,
    /// Hand `manager.steer_prompt` to the child's next LLM stage.
    Steer,
    /// Cycle every `manager.poll_interval` instead of after every checkpoint of the child.
    Wait,
}

impl ManagerAction {
    pub const NAMES: [&'static str; 3] = ["observe", "steer", "wait"];

    pub fn from_name(name: &str) -> Option<ManagerAction> {
        match name {
            "observe" => Some(ManagerAction::Observe),
            "steer" => Some(ManagerAction::Steer),
            "wait" => Some(ManagerAction::Wait),
            _ => None,
        }
    }
}

/// The words of `manager.actions` (comma- or space-separated).
pub fn action_words(text: &str) -> impl Iterator<Item = &str> {
    text.split([',', ' ', '\t', '\n']).map(str::trim).filter(|word| !word.is_empty())
}

/// The actions a manager takes every cycle.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ManagerActions {
    pub observe: bool,
    pub steer: bool,
    pub wait: bool,
}

impl Default for ManagerActions {
    /// Without `manager.actions`: observe, and wait between cycles.
    fn default() -> Self {
        ManagerActions { observe: true, steer: false, wait: true }
    }
}

impl ManagerActions {
    fn none() -> Self {
        ManagerActions { observe: false, steer: false, wait: false }
    }

    fn add(&mut self, action: ManagerAction) {
        match action {
            ManagerAction::Observe => self.observe = true,
            ManagerAction::Steer => self.steer = true,
            ManagerAction::Wait => self.wait = true,
        }
    }
}

/// A manager's settings as far as they could be read, and what could not be. A manager with any
/// error does not validate and does not run ([`ManagerSettings::runnable`]); what was read is
/// still there for the lint rules (a bad action does not hide a missing steer prompt) and for
/// loading the child.
#[derive(Debug, Clone, PartialEq)]
pub struct ManagerSettings {
    /// `None` when the stage names no child workflow (an error).
    pub child: Option<ChildReference>,
    pub poll_interval: Duration,
    pub max_cycles: Option<u64>,
    pub stop_condition: Option<Condition>,
    pub actions: ManagerActions,
    pub steer_prompt: Option<String>,
    /// `stack.child_workdir` (node, else graph): where the child works, relative to this run's
    /// work directory.
    pub child_workdir: Option<String>,
    pub errors: Vec<ManagerSettingsError>,
}

impl ManagerSettings {
    /// The settings when there is no error.
    pub fn runnable(&self) -> Result<&ManagerSettings, &[ManagerSettingsError]> {
        match self.errors.is_empty() {
            true => Ok(self),
            false => Err(&self.errors),
        }
    }

    /// Reads a manager node's settings; `graph` may name the child (`stack.child_dotfile`), whose
    /// path is relative to `base`, the directory of the parent file named `parent`.
    pub fn parse(node: &Node, graph: &Attributes, base: &Path, parent: &str) -> ManagerSettings {
        let attributes = &node.attributes;
        let mut errors = Vec::new();
        let child = ChildReference::of(node, graph, base, parent);
        if child.is_none() {
            errors.push(ManagerSettingsError::NoChild { node: node.id.clone(), span: node.span });
        }
        let poll_interval = noted(read(attributes, "manager.poll_interval", duration), &mut errors);
        let max_cycles = noted(read(attributes, "manager.max_cycles", count), &mut errors);
        let stop_text = noted(read(attributes, "manager.stop_condition", text), &mut errors);
        let actions_text = noted(read(attributes, "manager.actions", text), &mut errors);
        let steer_prompt = noted(read(attributes, "manager.steer_prompt", text), &mut errors);
        let stop_condition = match stop_text.filter(|text| !text.trim().is_empty()) {
            Some(text) => match Condition::parse(text) {
                Ok(condition) => Some(condition),
                Err(error) => {
                    let span = attributes.get("manager.stop_condition").map_or(node.span, |attr| attr.span);
                    errors.push(ManagerSettingsError::StopCondition { error, span });
                    None
                }
            },
            None => None,
        };
        let actions = match actions_text {
            Some(text) => {
                let span = attributes.get("manager.actions").map_or(node.span, |attr| attr.span);
                let mut actions = ManagerActions::none();
                for word in action_words(text) {
                    match ManagerAction::from_name(word) {
                        Some(action) => actions.add(action),
                        None => errors.push(ManagerSettingsError::UnknownAction {
                            word: word.to_string(),
                            node: node.id.clone(),
                            span,
                        }),
                    }
                }
                actions
            }
            None => ManagerActions::default(),
        };
        ManagerSettings {
            child,
            poll_interval: poll_interval.unwrap_or(DEFAULT_POLL_INTERVAL),
            max_cycles,
            stop_condition,
            actions,
            steer_prompt: steer_prompt.filter(|text| !text.trim().is_empty()).map(str::to_string),
            child_workdir: super::stage::text(attributes, "stack.child_workdir")
                .or_else(|| super::stage::text(graph, "stack.child_workdir"))
                .map(|dir| dir.trim().to_string()),
            errors,
        }
    }
}

/// Why a manager's settings cannot be used.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum ManagerSettingsError {
    #[error(transparent)]
    Attribute(#[from] InvalidAttribute),
    /// At the node.
    #[error("manager stage `{node}` names no child workflow")]
    NoChild { node: String, span: Span },
    /// At the `manager.stop_condition` value.
    #[error("invalid manager.stop_condition: {} (column {} of the condition)", error.message, error.offset + 1)]
    StopCondition { error: ConditionError, span: Span },
    /// At the `manager.actions` value.
    #[error("unknown manager action `{word}` on `{node}`")]
    UnknownAction { word: String, node: String, span: Span },
}

impl ManagerSettingsError {
    pub fn span(&self) -> Span {
        match self {
            ManagerSettingsError::Attribute(invalid) => invalid.span,
            ManagerSettingsError::NoChild { span, .. }
            | ManagerSettingsError::StopCondition { span, .. }
            | ManagerSettingsError::UnknownAction { span, .. } => *span,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::built;
    use super::*;

    fn manager(dot: &str) -> ManagerSettings {
        built(dot).node("m").unwrap().settings.manager().expect("a manager").clone()
    }

    #[test]
    fn settings_default_to_observe_and_wait_every_45_seconds() {
        let settings = manager(r#"digraph P { m [shape=house, stack.child_workflow="c.dot"] }"#);
        let settings = settings.runnable().unwrap();
        assert_eq!(settings.poll_interval, DEFAULT_POLL_INTERVAL);
        assert_eq!(settings.actions, ManagerActions { observe: true, steer: false, wait: true });
        assert_eq!(settings.max_cycles, None);
        assert!(settings.stop_condition.is_none());
        assert_eq!(settings.child.as_ref().map(|c| c.path.as_path()), Some(Path::new("flows/c.dot")));
    }

    #[test]
    fn the_node_attribute_wins_over_the_graph_default() {
        let dot = r#"digraph P { stack.child_dotfile="parts/default.dot"
            m [shape=house, stack.child_dotfile="mine.dot"] n [shape=house] }"#;
        let workflow = built(dot);
        let child = |id: &str| workflow.node(id).unwrap().settings.manager().unwrap().child.clone().unwrap();
        assert_eq!(child("m").path, Path::new("flows/mine.dot"));
        assert_eq!(child("n").path, Path::new("flows/parts/default.dot"));
        assert_eq!(child("n").text, "parts/default.dot");
    }

    #[test]
    fn every_error_is_kept_and_what_was_read_stays() {
        let settings = manager(
            r#"digraph P { m [shape=house, manager.actions="observe,poke steer", manager.stop_condition="ready ==",
                manager.poll_interval=soon] }"#,
        );
        let messages: Vec<String> = settings.errors.iter().map(ToString::to_string).collect();
        assert_eq!(
            messages,
            [
                "manager stage `m` names no child workflow",
                "`manager.poll_interval` is `soon`, expected a duration such as 250ms, 900s, 15m, 2h or 1d",
                "invalid manager.stop_condition: expected a value after `==`, found the end of the condition (column 9 of the condition)",
                "unknown manager action `poke` on `m`",
            ]
        );
        assert!(settings.runnable().is_err());
        assert!(settings.actions.steer && settings.actions.observe && !settings.actions.wait);
    }
}
