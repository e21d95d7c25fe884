//! Manager rules: a manager stage's settings, and its child workflow, which is loaded and
//! validated here so that `fabro validate` on the parent reports a bad child with the child
//! file's positions.

use std::path::PathBuf;

use super::Rule;
use crate::child_workflow::{self, ChildWorkflowError};
use crate::condition::Condition;
use crate::diagnostic::Diagnostic;
use crate::graph::{HandlerType, Node, Workflow};

/// The words `manager.actions` accepts.
pub const MANAGER_ACTIONS: [&str; 3] = ["observe", "steer", "wait"];

fn managers(workflow: &Workflow) -> impl Iterator<Item = &Node> {
    workflow.nodes().filter(|node| node.handler_type() == HandlerType::Manager)
}

/// The words of `manager.actions` (comma- or space-separated).
pub fn action_words(text: &str) -> impl Iterator<Item = &str> {
    text.split([',', ' ', '\t', '\n']).map(str::trim).filter(|word| !word.is_empty())
}

pub fn manager_settings(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for node in managers(workflow) {
        let error = |message: String| Diagnostic::error("manager_settings", message).node(&node.id);
        if child_workflow::reference(workflow, node).is_none() {
            out.push(
                error(format!("manager stage `{}` names no child workflow", node.id)).span(node.span).fix(
                    format!(
                        "add `stack.child_workflow=\"child.dot\"` (relative to this file) to `{}`",
                        node.id
                    ),
                ),
            );
        }
        if let Some(attr) = node.attributes.get("manager.stop_condition") {
            let text = attr.value.to_string();
            if let Some(Err(e)) = (!text.trim().is_empty()).then(|| Condition::parse(&text)) {
                out.push(
                    error(format!(
                        "invalid manager.stop_condition: {} (column {} of the condition)",
                        e.message,
                        e.offset + 1
                    ))
                    .span(attr.span)
                    .fix("stop conditions read the child's context, e.g. `context.tests_passed=true`"),
                );
            }
        }
        let actions = node.attributes.get("manager.actions");
        let words: Vec<&str> = actions
            .and_then(|attr| attr.value.as_text())
            .map_or_else(|| vec!["observe", "wait"], |text| action_words(text).collect());
        if let Some(attr) = actions {
            for word in words.iter().filter(|word| !MANAGER_ACTIONS.contains(word)) {
                out.push(
                    error(format!("unknown manager action `{word}` on `{}`", node.id))
                        .span(attr.span)
                        .fix("manager.actions lists observe, steer and wait, e.g. \"observe,steer,wait\""),
                );
            }
        }
        let steers = words.contains(&"steer");
        let steer_prompt = node.attributes.non_empty_text("manager.steer_prompt");
        let warning = |message: String| Diagnostic::warning("manager_settings", message).node(&node.id);
        match (steers, steer_prompt) {
            (true, None) => out.push(
                warning(format!(
                    "manager `{}` has the steer action but no manager.steer_prompt to send",
                    node.id
                ))
                .span(actions.map_or(node.span, |attr| attr.span))
                .fix("add `manager.steer_prompt=\"...\"` or drop `steer` from manager.actions"),
            ),
            (false, Some(_)) => out.push(
                warning(format!("manager `{}` has a manager.steer_prompt but not the steer action", node.id))
                    .span(node.attributes.get("manager.steer_prompt").map_or(node.span, |attr| attr.span))
                    .fix("add `steer` to manager.actions, e.g. \"observe,steer,wait\""),
            ),
            _ => {}
        }
    }
}

/// `child_workflow`: every manager's child workflow loads and validates. `ancestors` are the
/// workflows above this one, so a workflow that (through its children) runs itself is reported
/// instead of loaded forever.
pub struct ChildWorkflows {
    pub ancestors: Vec<PathBuf>,
}

impl Rule for ChildWorkflows {
    fn id(&self) -> &str {
        "child_workflow"
    }

    fn check(&self, workflow: &Workflow, out: &mut Vec<Diagnostic>) {
        let mut chain = self.ancestors.clone();
        let own = child_workflow::canonical(workflow.source().path());
        if chain.last() != Some(&own) {
            chain.push(own);
        }
        for node in managers(workflow) {
            let Some(child) = child_workflow::reference(workflow, node) else { continue };
            let Err(error) = child_workflow::load_file(&child.path, &chain) else { continue };
            let diagnostic = |message: String, fix: String| {
                Diagnostic::error("child_workflow", message).node(&node.id).span(child.span).fix(fix)
            };
            match error {
                ChildWorkflowError::Invalid { errors, .. } => {
                    for e in errors {
                        out.push(diagnostic(
                            format!("child workflow {}: {}", e.location, e.message),
                            e.fix.unwrap_or_else(|| "fix the child workflow".to_string()),
                        ));
                    }
                }
                ChildWorkflowError::Read { .. } => out.push(diagnostic(
                    error.to_string(),
                    "fix the path; it is relative to the directory of this workflow file".to_string(),
                )),
                ChildWorkflowError::Syntax { .. } => {
                    out.push(diagnostic(error.to_string(), "fix the child workflow".to_string()))
                }
                ChildWorkflowError::Cycle { .. } => out.push(diagnostic(
                    error.to_string(),
                    "a workflow cannot run itself as a child, directly or through others".to_string(),
                )),
            }
        }
    }
}
