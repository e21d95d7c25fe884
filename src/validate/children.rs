//! Manager rules: a manager stage's settings, and its child workflow, which the loader loaded and
//! validated so that `fabro validate` on the parent reports a bad child with the child file's
//! positions.

use std::sync::Arc;

use super::Rule;
use crate::child_workflow::ChildWorkflowError;
use crate::diagnostic::Diagnostic;
use crate::graph::settings::ManagerSettingsError;
use crate::graph::{HandlerType, Node, Workflow};

fn managers(workflow: &Workflow) -> impl Iterator<Item = &Node> {
    workflow.nodes().filter(|node| node.handler_type() == HandlerType::Manager)
}

/// The errors of the manager settings' parser (type errors are `attribute_type`'s), and warnings
/// about a steer action and a steer prompt without each other.
pub fn manager_settings(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for node in managers(workflow) {
        let Some(settings) = node.settings.manager() else { continue };
        for error in &settings.errors {
            let fix = match error {
                ManagerSettingsError::NoChild { .. } => {
                    format!(
                        "add `stack.child_workflow=\"child.dot\"` (relative to this file) to `{}`",
                        node.id
                    )
                }
                ManagerSettingsError::StopCondition { .. } => {
                    "stop conditions read the child's context, e.g. `context.tests_passed=true`".to_string()
                }
                ManagerSettingsError::UnknownAction { .. } => {
                    "manager.actions lists observe, steer and wait, e.g. \"observe,steer,wait\"".to_string()
                }
                ManagerSettingsError::Attribute(_) => continue,
            };
            out.push(
                Diagnostic::error("manager_settings", error.to_string())
                    .node(&node.id)
                    .span(error.span())
                    .fix(fix),
            );
        }
        let warning = |message: String| Diagnostic::warning("manager_settings", message).node(&node.id);
        let span_of = |key: &str| node.attributes.get(key).map_or(node.span, |attr| attr.span);
        match (settings.actions.steer, &settings.steer_prompt) {
            (true, None) => out.push(
                warning(format!(
                    "manager `{}` has the steer action but no manager.steer_prompt to send",
                    node.id
                ))
                .span(span_of("manager.actions"))
                .fix("add `manager.steer_prompt=\"...\"` or drop `steer` from manager.actions"),
            ),
            (false, Some(_)) => out.push(
                warning(format!("manager `{}` has a manager.steer_prompt but not the steer action", node.id))
                    .span(span_of("manager.steer_prompt"))
                    .fix("add `steer` to manager.actions, e.g. \"observe,steer,wait\""),
            ),
            _ => {}
        }
    }
}

/// `child_workflow`: every manager's child workflow loads and validates. The loader loaded them
/// (a workflow that, through its children, runs itself is a cycle there); this reports what it
/// found, at the attribute that names the child.
pub struct ChildWorkflows {
    /// Manager node ids whose child cannot run, and why.
    pub failures: Vec<(String, Arc<ChildWorkflowError>)>,
}

impl Rule for ChildWorkflows {
    fn id(&self) -> &str {
        "child_workflow"
    }

    fn check(&self, workflow: &Workflow, out: &mut Vec<Diagnostic>) {
        for (node_id, error) in &self.failures {
            let Some(node) = workflow.node(node_id) else { continue };
            let Some(child) = node.settings.child_workflow() else { continue };
            let diagnostic = |message: String, fix: String| {
                Diagnostic::error("child_workflow", message).node(&node.id).span(child.span).fix(fix)
            };
            match error.as_ref() {
                ChildWorkflowError::Invalid { errors, .. } => {
                    for e in errors {
                        out.push(diagnostic(
                            format!("child workflow {}: {}", e.location, e.message),
                            e.fix.clone().unwrap_or_else(|| "fix the child workflow".to_string()),
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
