//! Transforms rewrite the workflow after it is built and before it is validated. Built-ins run
//! first (prompt files, then `$goal`, then the stylesheet); transforms registered by library users
//! follow in registration order.

use std::path::Path;

use super::attribute::{Attr, Value};
use super::stylesheet::StyleProperty;
use super::workflow::Workflow;
use crate::diagnostic::Diagnostic;

/// A rewrite of the workflow between building and validation. Problems it finds are returned as
/// diagnostics so they are reported with the validation rules' findings.
pub trait Transform: Send + Sync {
    fn name(&self) -> &str;
    fn apply(&self, workflow: &mut Workflow) -> Vec<Diagnostic>;
}

/// The built-in transforms in the order they run: imports first, so imported stages get the
/// same treatment as the importing file's own.
pub fn builtin_transforms() -> Vec<Box<dyn Transform>> {
    vec![
        Box::new(super::import::ImportExpansion),
        Box::new(PromptFiles),
        Box::new(DialectAliases),
        Box::new(GoalExpansion),
        Box::new(StylesheetApplication),
    ]
}

/// `prompt="@prompts/plan.md"` inlines that file, resolved against the workflow file's directory.
pub struct PromptFiles;

impl Transform for PromptFiles {
    fn name(&self) -> &str {
        "prompt_files"
    }

    fn apply(&self, workflow: &mut Workflow) -> Vec<Diagnostic> {
        let base = workflow.source().path().parent().map(Path::to_path_buf).unwrap_or_default();
        let mut diagnostics = Vec::new();
        for node in workflow.nodes_mut() {
            let Some(attr) = node.attributes.get("prompt") else { continue };
            let Some(reference) = attr.value.as_text().and_then(|text| text.trim().strip_prefix('@')) else {
                continue;
            };
            let path = base.join(reference);
            match crate::regular_file::read_to_string(&path, crate::regular_file::FileKind::Input) {
                Ok(contents) => {
                    let attr = Attr { value: Value::Text(contents), ..attr.clone() };
                    node.attributes.set("prompt", attr);
                }
                Err(error) => diagnostics.push(
                    Diagnostic::error(
                        "prompt_file",
                        format!("cannot read prompt file `{}`: {error}", path.display()),
                    )
                    .node(&node.id)
                    .span(attr.span)
                    .fix(format!(
                        "create `{}` or fix the path (it is relative to the workflow file)",
                        path.display()
                    )),
                ),
            }
        }
        diagnostics
    }
}

/// Fabro's spellings: node attributes `model=` and `provider=` and the graph's
/// `loop_restart_signature_limit` (already read as `llm_model`, `llm_provider` and
/// `failure_signature_limit` when the graph was built) and `{{ goal }}` in prompts (read as `$goal`), each
/// with a `dialect_alias` warning so the file can be moved to fabro's names.
pub struct DialectAliases;

impl Transform for DialectAliases {
    fn name(&self) -> &str {
        "dialect_aliases"
    }

    fn apply(&self, workflow: &mut Workflow) -> Vec<Diagnostic> {
        let source = workflow.source().clone();
        let alias = |key: &str, attr: &Attr| {
            let written = source.text().get(attr.key_span.start..attr.key_span.end).unwrap_or("");
            let tool = super::attribute::dialect_of_alias(written, key).filter(|_| !attr.inherited)?;
            Some(
                Diagnostic::warning(
                    "dialect_alias",
                    format!("`{written}` is {tool}'s name for `{key}`; fabro reads it as `{key}`"),
                )
                .span(attr.key_span)
                .fix(format!("rename it to `{key}`"))
                .edit_written(&source, attr.key_span, written, key.to_string()),
            )
        };
        let mut found: Vec<Diagnostic> =
            workflow.attributes().iter().filter_map(|(key, attr)| alias(key, attr)).collect();
        for node in workflow.nodes_mut() {
            for (key, attr) in node.attributes.iter() {
                found.extend(alias(key, attr).map(|diagnostic| diagnostic.node(&node.id)));
            }
            let Some(attr) = node.attributes.get("prompt") else { continue };
            let Some(prompt) = attr.value.as_text() else { continue };
            let spelled = ["{{ goal }}", "{{goal}}"];
            if spelled.iter().any(|goal| prompt.contains(goal)) {
                let expanded =
                    spelled.iter().fold(prompt.to_string(), |text, goal| text.replace(goal, "$goal"));
                found.push(
                    Diagnostic::warning(
                        "dialect_alias",
                        "`{{ goal }}` is Fabro's spelling of the goal; fabro reads it as `$goal`",
                    )
                    .node(&node.id)
                    .span(attr.span)
                    .fix("write `$goal`"),
                );
                let attr = Attr { value: Value::Text(expanded), ..attr.clone() };
                node.attributes.set("prompt", attr);
            }
        }
        found
    }
}

/// `$goal` in prompts becomes the graph goal.
pub struct GoalExpansion;

impl Transform for GoalExpansion {
    fn name(&self) -> &str {
        "goal_expansion"
    }

    fn apply(&self, workflow: &mut Workflow) -> Vec<Diagnostic> {
        let goal = workflow.goal().to_string();
        for node in workflow.nodes_mut() {
            let Some(attr) = node.attributes.get("prompt") else { continue };
            let Some(prompt) = attr.value.as_text().filter(|p| p.contains("$goal")) else { continue };
            let attr = Attr { value: Value::Text(prompt.replace("$goal", &goal)), ..attr.clone() };
            node.attributes.set("prompt", attr);
        }
        Vec::new()
    }
}

/// Gives each node the stylesheet's llm_model, llm_provider and reasoning_effort unless the node
/// sets them itself. Stylesheet syntax errors are reported by the `stylesheet_syntax` rule.
pub struct StylesheetApplication;

impl Transform for StylesheetApplication {
    fn name(&self) -> &str {
        "stylesheet"
    }

    fn apply(&self, workflow: &mut Workflow) -> Vec<Diagnostic> {
        let Some(Ok(stylesheet)) = &workflow.stylesheet else { return Vec::new() };
        // Taken out while nodes are borrowed mutably, put back below.
        let stylesheet = stylesheet.clone();
        let span = workflow.attributes().get("model_stylesheet").map(|attr| attr.span).unwrap_or_default();
        for node in workflow.nodes_mut() {
            let resolved = stylesheet.resolve(&node.id, node.shape(), &node.classes);
            for property in StyleProperty::ALL {
                let Some(value) = resolved.get(property) else { continue };
                if node.attributes.contains(property.attribute()) {
                    continue;
                }
                let attr =
                    Attr { value: Value::Text(value.to_string()), span, key_span: span, inherited: false };
                node.attributes.set(property.attribute(), attr);
            }
        }
        workflow.stylesheet = Some(Ok(stylesheet));
        Vec::new()
    }
}
