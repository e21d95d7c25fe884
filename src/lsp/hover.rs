//! Hover: what the thing under the cursor means. An attribute's type, scopes and meaning from the
//! schema (the source of docs/language.md's tables); a shape's or type's node kind; a node's
//! attributes after the stylesheet and transforms; how a condition parses.

use crate::condition::Condition;
use crate::graph::{attribute, HandlerType};

use super::analysis::{Analysis, AttrSite};

/// The hover text (Markdown) at `offset`, if there is anything to say.
pub fn hover(analysis: &Analysis, offset: usize) -> Option<String> {
    if let Some((site, is_key)) = analysis.index.attribute_at(offset) {
        return if is_key { attribute_help(&site.key) } else { value_help(site) };
    }
    let site = analysis.index.id_at(offset)?;
    node_help(analysis, &site.name)
}

/// `name`: its type, where it applies and what it means.
pub fn attribute_help(key: &str) -> Option<String> {
    let canonical = attribute::canonical_name(key);
    let Some(spec) = attribute::spec(canonical) else {
        if attribute::is_display_attribute(key) {
            return Some(format!("**{key}**: a Graphviz display attribute (drawn, no meaning to fabro)"));
        }
        return None;
    };
    let scopes: Vec<&str> = spec.scopes.iter().map(|scope| scope.plural()).collect();
    let alias = if canonical != key {
        format!("\n\n`{key}` is another spelling of `{canonical}`.")
    } else {
        String::new()
    };
    Some(format!("**{}**: {} (on {})\n\n{}{alias}", spec.name, spec.value_type, scopes.join(", "), spec.doc))
}

fn value_help(site: &AttrSite) -> Option<String> {
    match site.key.as_str() {
        "shape" => {
            let shape = site.value.trim();
            Some(match HandlerType::from_shape(shape) {
                Some(kind) => format!("shape `{shape}`: a **{}** stage", kind.name()),
                None => format!(
                    "shape `{shape}`: no node kind of its own (an agent stage unless `type` says otherwise)"
                ),
            })
        }
        "type" => {
            let kind = HandlerType::from_type_name(site.value.trim());
            Some(match kind {
                HandlerType::Custom(name) => {
                    format!("type `{name}`: a custom handler, which must be registered")
                }
                kind => format!("type `{}`: a **{}** stage", site.value.trim(), kind.name()),
            })
        }
        "condition" => Some(match Condition::parse(&site.value) {
            Ok(condition) => format!("condition, parsed:\n```text\n{}```", condition.explain()),
            Err(error) => format!("condition does not parse: {error} (at byte {})", error.offset),
        }),
        _ => attribute_help(&site.key),
    }
}

/// A node's kind and its attributes as the run sees them (defaults, stylesheet and transforms
/// applied).
fn node_help(analysis: &Analysis, name: &str) -> Option<String> {
    let checked = analysis.checked.as_ref()?;
    let node = checked.workflow.node(name)?;
    let mut text = format!("**{}**: {} stage", node.id, node.handler_type().name());
    if !node.classes.is_empty() {
        text.push_str(&format!(" (classes: {})", node.classes.join(", ")));
    }
    text.push_str("\n\n```dot\n");
    for (key, attr) in node.attributes.iter() {
        let mut value = attr.value.to_string();
        if value.chars().count() > 80 {
            value = value.chars().take(77).collect::<String>() + "...";
        }
        let from = if attr.inherited { "  // from a default block" } else { "" };
        text.push_str(&format!(
            "{}={}{from}\n",
            crate::render::dot::id(key),
            crate::dot_string::quote(&value)
        ));
    }
    text.push_str("```");
    Some(text)
}

#[cfg(test)]
mod tests {
    use super::super::analysis::analyze;
    use super::*;

    #[test]
    fn hovers_attributes_shapes_nodes_and_conditions() {
        let text = "digraph w {\n  model_stylesheet=\"* { llm_model: m1 }\"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  a [prompt=\"x\", max_retries=2]\n  start -> a\n  a -> exit [condition=\"outcome=success && context.ok\"]\n}\n";
        let analysis = analyze(std::path::Path::new("w.dot"), text, &crate::load::Loader::new(), None).0;
        let at = |needle: &str| hover(&analysis, text.find(needle).unwrap() + 1).unwrap_or_default();
        assert!(at("max_retries").starts_with("**max_retries**: a whole number"), "{}", at("max_retries"));
        assert!(at("Msquare").contains("a **exit** stage"), "{}", at("Msquare"));
        let node = at("a [prompt");
        assert!(node.contains("agent stage") && node.contains("llm_model=\"m1\""), "{node}");
        let condition = at("outcome=success");
        assert!(
            condition.contains("all of (&&)") && condition.contains("context key `ok` is set"),
            "{condition}"
        );
    }
}
