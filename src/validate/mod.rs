//! Lint rules over a built and transformed [`Workflow`]. Each rule reports [`Diagnostic`]s with a
//! rule id, severity, position and fix; a workflow with any error does not run. Library users add
//! their own rules through the [`Rule`] trait.

mod attributes;
mod children;
mod routing;
mod stages;
mod structure;

use std::sync::Arc;

use crate::child_workflow::ChildWorkflowError;
use crate::diagnostic::Diagnostic;
use crate::graph::Workflow;

/// A lint rule. `check` appends what it finds; it must not panic on any workflow.
pub trait Rule: Send + Sync {
    fn id(&self) -> &str;
    fn check(&self, workflow: &Workflow, diagnostics: &mut Vec<Diagnostic>);
}

/// What a built-in rule does: look at the workflow, append findings.
type Check = fn(&Workflow, &mut Vec<Diagnostic>);

/// A built-in rule: an id and a plain function.
struct BuiltinRule {
    id: &'static str,
    check: Check,
}

impl Rule for BuiltinRule {
    fn id(&self) -> &str {
        self.id
    }

    fn check(&self, workflow: &Workflow, diagnostics: &mut Vec<Diagnostic>) {
        (self.check)(workflow, diagnostics)
    }
}

/// The built-in rules. `custom_types` are handler types registered by the caller, which the
/// `type_known` rule accepts alongside the built-in ones.
/// Child workflows are the loader's to load (`load.rs`), so these rules find no problem
/// with them; [`builtin_rules_with_children`] reports what loading them found.
pub fn builtin_rules(custom_types: Vec<String>) -> Vec<Box<dyn Rule>> {
    builtin_rules_with_children(custom_types, Vec::new())
}

/// The built-in rules, with the manager stages (by node id) whose child workflow the loader could
/// not load, and why.
pub fn builtin_rules_with_children(
    custom_types: Vec<String>,
    child_failures: Vec<(String, Arc<ChildWorkflowError>)>,
) -> Vec<Box<dyn Rule>> {
    let table: [(&'static str, Check); 42] = [
        ("start_node", structure::start_node),
        ("terminal_node", structure::terminal_node),
        ("start_no_incoming", structure::start_no_incoming),
        ("exit_no_outgoing", structure::exit_no_outgoing),
        ("exit_outcome", structure::exit_outcome),
        ("dead_end", structure::dead_end),
        ("reachability", structure::reachability),
        ("edge_target_exists", structure::edge_target_exists),
        ("node_id_syntax", structure::node_id_syntax),
        ("attribute_type", attributes::attribute_type),
        ("dialect_value", attributes::dialect_value),
        ("unknown_attribute", attributes::unknown_attribute),
        ("unsupported_attribute", attributes::unsupported_attribute),
        ("fidelity_valid", attributes::fidelity_valid),
        ("stylesheet_syntax", attributes::stylesheet_syntax),
        ("link_scheme", attributes::link_scheme),
        ("graphviz_file", attributes::graphviz_file),
        ("condition_syntax", routing::condition_syntax),
        ("condition_key_typo", routing::condition_key_typo),
        ("custom_outcome", routing::custom_outcome),
        ("unquoted_value", structure::unquoted_value),
        ("all_conditional_edges", routing::all_conditional_edges),
        ("retry_target_exists", routing::retry_target_exists),
        ("goal_gate_has_retry", routing::goal_gate_has_retry),
        ("failure_path", routing::failure_path),
        ("prompt_on_llm_nodes", stages::prompt_on_llm_nodes),
        ("command_has_script", stages::command_has_script),
        ("wait_has_duration", stages::wait_has_duration),
        ("human_gate_has_choices", stages::human_gate_has_choices),
        ("freeform_edge", routing::freeform_edge),
        ("random_selection", routing::random_selection),
        ("thread_id_without_full_fidelity", stages::thread_id_without_full_fidelity),
        ("parallel_without_fan_in", stages::parallel_without_fan_in),
        ("parallel_join_settings", stages::parallel_join_settings),
        ("manager_settings", children::manager_settings),
        ("context_settings", stages::context_settings),
        ("agent_tools", stages::agent_tools),
        ("small_tier_parent", stages::small_tier_parent),
        ("context_files", stages::context_files),
        ("sandbox_paths", stages::sandbox_paths),
        ("container_limits", stages::container_limits),
        ("confined_keep_background", stages::confined_keep_background),
    ];
    let mut rules: Vec<Box<dyn Rule>> =
        table.into_iter().map(|(id, check)| Box::new(BuiltinRule { id, check }) as Box<dyn Rule>).collect();
    rules.insert(8, Box::new(attributes::TypeKnown { custom_types }));
    rules.push(Box::new(children::ChildWorkflows { failures: child_failures }));
    rules
}

/// The graph attribute that names warnings the author has decided to accept.
pub const ALLOW_LINTS: &str = "allow_lints";

/// Runs `rules` and returns their findings in rule order.
pub fn run_rules(workflow: &Workflow, rules: &[Box<dyn Rule>]) -> Vec<Diagnostic> {
    let mut diagnostics = Vec::new();
    for rule in rules {
        rule.check(workflow, &mut diagnostics);
    }
    diagnostics
}

/// Drops the warnings of the rules the graph's `allow_lints` names (errors cannot be allowed),
/// and warns about names that are none of `rules`.
pub fn apply_allowed_lints<'r>(
    workflow: &Workflow,
    rules: impl Iterator<Item = &'r Box<dyn Rule>>,
    diagnostics: &mut Vec<Diagnostic>,
) {
    let Some(attr) = workflow.attributes().get(ALLOW_LINTS) else { return };
    let text = attr.value.to_string();
    let allowed: Vec<&str> = text.split([',', ' ']).map(str::trim).filter(|name| !name.is_empty()).collect();
    diagnostics.retain(|diagnostic| diagnostic.is_error() || !allowed.contains(&diagnostic.rule.as_str()));
    let known: Vec<&str> = rules.map(|rule| rule.id()).collect();
    for name in allowed.iter().filter(|name| !known.contains(name)) {
        let fix = match crate::diagnostic::did_you_mean(name, known.iter().copied()) {
            Some(similar) => format!("did you mean `{similar}`?"),
            None => "name rules as `fabro validate` prints them, e.g. `warning[failure_path]`".to_string(),
        };
        diagnostics.push(
            Diagnostic::warning(
                "allow_lints",
                format!("`{ALLOW_LINTS}` names `{name}`, which is no lint rule"),
            )
            .span(attr.span)
            .fix(fix),
        );
    }
}

/// The edit adding `statement` (an edge, say) as the graph's last statement, on a line of its
/// own before the closing `}`.
pub(crate) fn append_statement(workflow: &Workflow, statement: &str) -> Option<crate::diagnostic::Edit> {
    let text = workflow.source().text();
    let close = text.rfind('}')?;
    let line_start = text[..close].rfind('\n').map_or(0, |at| at + 1);
    let (at, text) = if text[line_start..close].trim().is_empty() {
        (line_start, format!("    {statement}\n"))
    } else {
        (close, format!("\n    {statement}\n"))
    };
    Some(crate::diagnostic::Edit { span: crate::source::Span::at(at), text })
}

/// Sorts findings by position (whole-graph findings first), errors before warnings at the same
/// place, and drops exact repeats.
pub fn sort_and_dedup(diagnostics: &mut Vec<Diagnostic>) {
    diagnostics.sort_by(|a, b| {
        (a.span.map(|s| s.start), a.severity, &a.rule).cmp(&(b.span.map(|s| s.start), b.severity, &b.rule))
    });
    diagnostics.dedup_by(|a, b| a.rule == b.rule && a.span == b.span && a.message == b.message);
}

#[cfg(test)]
mod tests {
    use crate::source::SourceFile;
    use crate::Loader;

    /// The file after applying the edits of the first diagnostic of `rule`.
    fn fixed(text: &str, rule: &str) -> String {
        let checked = Loader::new().load_source(SourceFile::new("w.dot", text)).unwrap();
        let diagnostic = checked.diagnostics.iter().find(|d| d.rule == rule).expect(rule);
        assert!(!diagnostic.edits.is_empty(), "{rule} has no edit: {diagnostic:?}");
        let mut out = text.to_string();
        let mut edits = diagnostic.edits.clone();
        edits.sort_by_key(|edit| std::cmp::Reverse(edit.span.start));
        for edit in edits {
            out.replace_range(edit.span.start..edit.span.end, &edit.text);
        }
        out
    }

    const HEAD: &str = "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n";

    #[test]
    fn mechanical_fixes_come_with_edits() {
        let text = format!("{HEAD}  a [prompt=\"x\", max_retires=2]\n  start -> a -> exit\n}}\n");
        assert!(fixed(&text, "unknown_attribute").contains("a [prompt=\"x\", max_retries=2]"));
        let text =
            format!("{HEAD}  a [prompt=\"x\", model=\"m\", timeout=\"300\"]\n  start -> a -> exit\n}}\n");
        assert!(fixed(&text, "dialect_alias").contains("llm_model=\"m\""));
        assert!(fixed(&text, "dialect_value").contains("timeout=\"300s\""));
        let text = format!("{HEAD}  a [prompt=\"x\"]\n  start -> a\n  start -> exit\n}}\n");
        assert!(fixed(&text, "dead_end").ends_with("  start -> exit\n    a -> exit\n}\n"));
        let text = format!(
            "{HEAD}  a [prompt=\"x\"]\n  t [shape=parallelogram, script=\"make\"]\n  start -> a -> t -> exit\n}}\n"
        );
        assert!(fixed(&text, "failure_path").contains("    t -> a [condition=\"outcome=fail\"]\n}\n"));
        let text = format!(
            "{HEAD}  a [prompt=\"x\"]\n  start -> a\n  a -> exit [condition=\"outcom=success\"]\n  a -> exit\n}}\n"
        );
        assert!(fixed(&text, "condition_key_typo").contains("[condition=\"outcome=success\"]"));
        let text = format!("{HEAD}  review [prompt=\"x\"]\n  start -> reviw -> exit\n}}\n");
        assert!(fixed(&text, "edge_target_exists").contains("start -> review -> exit"));
    }
}
