//! Completion from the text before the cursor (which is often not valid yet): attribute names for
//! what the statement is (a node of some kind, an edge, a default block, the graph), values of
//! enumerated attributes, node ids after `->` and in retry targets, and context keys in
//! conditions (the engine's and those the workflow's stages set).

use lsp_types::{CompletionItem, CompletionItemKind};

use crate::graph::attribute::{self, Scope, ValueType, ATTRIBUTES};
use crate::graph::HandlerType;
use crate::syntax::DefaultsKind;

use super::analysis::Analysis;

/// The context keys the engine sets (docs/engine.md, "Context keys set by the engine").
pub const ENGINE_KEYS: &[&str] = &[
    "outcome",
    "preferred_label",
    "current_node",
    "last_stage",
    "failure_class",
    "failure_detail",
    "failure_signature",
    "failure_reason",
    "graph.goal",
    "last_response",
    "command.output",
    "command.stderr",
    "command.exit_code",
    "human.gate.selected",
    "human.gate.label",
    "human.gate.target",
    "human.gate.text",
    "parallel.results",
    "parallel.branch_count",
    "parallel.success_count",
    "parallel.failure_count",
    "parallel.fan_in.best_id",
    "parallel.fan_in.best_outcome",
];

/// Where the cursor is, as far as the text before it tells.
#[derive(Debug, PartialEq)]
enum Place {
    /// Inside a quoted value of `key`.
    InString { key: Option<String> },
    /// An attribute name inside `[..]` of a statement whose head is `head`.
    AttributeName { head: String },
    /// The value of `key` (unquoted, being typed).
    Value { key: String },
    /// After `->`.
    EdgeTarget,
    /// At the start of a statement.
    Statement,
}

/// The completion items at `offset` of `text`.
pub fn complete(analysis: Option<&Analysis>, text: &str, offset: usize) -> Vec<CompletionItem> {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let nodes = || analysis.map(|analysis| analysis.index.node_names()).unwrap_or_default();
    match place(&text[..offset]) {
        Place::InString { key: Some(key) } if key == "condition" => condition_keys(analysis),
        Place::InString { key: Some(key) } | Place::Value { key } => values(&key, &nodes()),
        Place::InString { key: None } => Vec::new(),
        Place::EdgeTarget => {
            nodes().into_iter().map(|id| item(id, CompletionItemKind::REFERENCE, None)).collect()
        }
        Place::AttributeName { head } => attribute_names(analysis, &head),
        Place::Statement => {
            let mut items = names_in(Scope::Graph, |_| true);
            items.extend(
                ["node", "edge", "graph", "subgraph"]
                    .map(|word| item(word, CompletionItemKind::KEYWORD, None)),
            );
            items.extend(nodes().into_iter().map(|id| item(id, CompletionItemKind::REFERENCE, None)));
            items
        }
    }
}

/// Scans the text before the cursor (strings and comments skipped) for the statement it is in.
fn place(before: &str) -> Place {
    let bytes = before.as_bytes();
    let (mut i, mut statement, mut bracket, mut string) = (0, 0, None, None);
    while i < bytes.len() {
        match bytes[i] {
            b'"' => {
                let start = i;
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                if i >= bytes.len() {
                    string = Some(start);
                }
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = before[i + 2..].find("*/").map_or(bytes.len(), |end| i + 2 + end + 1);
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i = before[i..].find('\n').map_or(bytes.len(), |end| i + end);
                continue;
            }
            b'[' => bracket = Some(i),
            b']' => bracket = None,
            b'{' | b'}' | b';' if bracket.is_none() => statement = i + 1,
            b'\n' if bracket.is_none() && !before[statement..i].trim_end().ends_with("->") => {
                statement = i + 1
            }
            _ => {}
        }
        i += 1;
    }
    let key_before = |end: usize| {
        let text = before[..end].trim_end().strip_suffix('=')?.trim_end();
        let start = after_last(text, |c| !(c.is_ascii_alphanumeric() || c == '_' || c == '.'));
        Some(text[start..].to_string()).filter(|key| !key.is_empty())
    };
    if let Some(start) = string {
        return Place::InString { key: key_before(start) };
    }
    let current = match bracket {
        Some(open) => {
            let inside = &before[open + 1..];
            let from = inside.rfind([',', ';']).map_or(0, |at| at + 1);
            &inside[from..]
        }
        None => &before[statement..],
    };
    let word_start = after_last(current, |c| !(c.is_ascii_alphanumeric() || "_.-:/@$".contains(c)));
    let typed_before = current[..word_start].trim_end();
    if typed_before.ends_with('=') {
        if let Some(key) = key_before(before.len() - (current.len() - word_start)) {
            return Place::Value { key };
        }
    }
    if let Some(open) = bracket {
        return Place::AttributeName { head: before[statement..open].trim().to_string() };
    }
    if typed_before.ends_with("->") {
        return Place::EdgeTarget;
    }
    Place::Statement
}

/// Where the text after the last character that `stop` accepts starts (0 when there is none).
fn after_last(text: &str, stop: impl Fn(char) -> bool) -> usize {
    text.char_indices().rev().find(|(_, c)| stop(*c)).map_or(0, |(at, c)| at + c.len_utf8())
}

fn item(label: &str, kind: CompletionItemKind, detail: Option<String>) -> CompletionItem {
    CompletionItem { label: label.to_string(), kind: Some(kind), detail, ..Default::default() }
}

/// Attribute names of `scope` that `keep` accepts, with their types and meanings.
fn names_in(scope: Scope, keep: impl Fn(&str) -> bool) -> Vec<CompletionItem> {
    ATTRIBUTES
        .iter()
        .filter(|spec| spec.scopes.contains(&scope) && keep(spec.name))
        .map(|spec| CompletionItem {
            documentation: Some(lsp_types::Documentation::String(spec.doc.to_string())),
            ..item(spec.name, CompletionItemKind::PROPERTY, Some(spec.value_type.to_string()))
        })
        .collect()
}

/// Attribute names for the statement `head` (`a`, `a -> b`, `node`, ...): a node's are those
/// of nodes, less the ones that belong to other kinds (`manager.*` on a manager stage only).
fn attribute_names(analysis: Option<&Analysis>, head: &str) -> Vec<CompletionItem> {
    let defaults = match head {
        "node" => Some(DefaultsKind::Node),
        "edge" => Some(DefaultsKind::Edge),
        "graph" => Some(DefaultsKind::Graph),
        _ => None,
    };
    match defaults {
        Some(DefaultsKind::Edge) => return names_in(Scope::Edge, |_| true),
        Some(DefaultsKind::Graph) => return names_in(Scope::Graph, |_| true),
        Some(DefaultsKind::Node) => return names_in(Scope::Node, |_| true),
        None => {}
    }
    if head.contains("->") {
        return names_in(Scope::Edge, |_| true);
    }
    let kind = analysis
        .and_then(|analysis| analysis.checked.as_ref())
        .and_then(|checked| checked.workflow.node(head))
        .map(|node| node.handler_type().into_owned());
    let kind = kind.as_ref().map(|kind| kind.as_borrowed());
    names_in(Scope::Node, |name| match kind {
        None => true,
        Some(kind) => belongs_to(name, kind),
    })
}

/// Whether a node attribute is one for `kind`: the kind-prefixed families are their kind's.
fn belongs_to(name: &str, kind: HandlerType<&str>) -> bool {
    let families: [(&str, HandlerType<&str>); 4] = [
        ("manager.", HandlerType::Manager),
        ("stack.", HandlerType::Manager),
        ("human.", HandlerType::Human),
        ("parallel.", HandlerType::Parallel),
    ];
    families.iter().all(|(prefix, owner)| !name.starts_with(prefix) || *owner == kind)
}

/// The values `key` takes: its words, shapes and types, booleans, node ids for retry targets.
fn values(key: &str, nodes: &[&str]) -> Vec<CompletionItem> {
    let value = |word: &str| item(word, CompletionItemKind::VALUE, None);
    match key {
        "shape" => {
            return HandlerType::known_shapes()
                .map(|shape| {
                    let kind = HandlerType::from_shape(shape).map(|kind| kind.name().to_string());
                    item(shape, CompletionItemKind::ENUM_MEMBER, kind.map(|kind| format!("{kind} stage")))
                })
                .collect()
        }
        "type" => return HandlerType::known_names().map(value).collect(),
        "retry_target" | "fallback_retry_target" => {
            return nodes.iter().map(|id| item(id, CompletionItemKind::REFERENCE, None)).collect()
        }
        _ => {}
    }
    let Some(spec) = attribute::spec(attribute::canonical_name(key)) else { return Vec::new() };
    match spec.value_type {
        ValueType::OneOf(words) => words.iter().map(|word| value(word)).collect(),
        ValueType::Boolean => ["true", "false"].map(value).to_vec(),
        _ if spec.name.ends_with("fidelity") => {
            crate::graph::settings::FidelityMode::NAMES.iter().map(|word| value(word)).collect()
        }
        _ => Vec::new(),
    }
}

/// Keys a condition can read: `outcome` and `preferred_label`, the engine's context keys, and
/// the keys the workflow's stages set (`response.<node>`, `parallel.*` of its parallel stages).
fn condition_keys(analysis: Option<&Analysis>) -> Vec<CompletionItem> {
    let mut items: Vec<CompletionItem> = ENGINE_KEYS
        .iter()
        .map(|key| {
            let label = if matches!(*key, "outcome" | "preferred_label") {
                key.to_string()
            } else {
                format!("context.{key}")
            };
            item(&label, CompletionItemKind::VARIABLE, Some("set by the engine".to_string()))
        })
        .collect();
    for status in ["success", "fail", "partial_success", "retry", "skipped"] {
        items.push(item(&format!("outcome={status}"), CompletionItemKind::VALUE, None));
    }
    let Some(checked) = analysis.and_then(|analysis| analysis.checked.as_ref()) else { return items };
    for node in checked.workflow.nodes() {
        if node.handler_type().is_llm() {
            let detail = format!("set by stage `{}`", node.id);
            items.push(item(
                &format!("context.response.{}", node.id),
                CompletionItemKind::VARIABLE,
                Some(detail),
            ));
        }
    }
    for (key, _) in checked.workflow.context_mirror() {
        items.push(item(
            &format!("context.{key}"),
            CompletionItemKind::VARIABLE,
            Some("set by the workflow".to_string()),
        ));
    }
    items
}

#[cfg(test)]
mod tests {
    use super::super::analysis::analyze;
    use super::*;

    fn labels(text: &str, analysis: Option<&Analysis>) -> Vec<String> {
        let offset = text.find('|').unwrap();
        let text = text.replace('|', "");
        complete(analysis, &text, offset).into_iter().map(|item| item.label).collect()
    }

    #[test]
    fn completes_names_values_targets_and_condition_keys() {
        let base = "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  plan [prompt=\"x\"]\n  m [shape=house]\n  start -> plan -> m -> exit\n}\n";
        let analysis = analyze(std::path::Path::new("w.dot"), base, &crate::load::Loader::new(), None).0;
        let a = Some(&analysis);
        assert!(labels("digraph w { plan [max_re|", a).contains(&"max_retries".to_string()));
        assert!(!labels("digraph w { plan [|", a).iter().any(|l| l.starts_with("manager.")));
        assert!(labels("digraph w { m [|", a).iter().any(|l| l.starts_with("manager.")));
        assert!(labels("digraph w { a -> b [|", a).contains(&"condition".to_string()));
        assert!(labels("digraph w { a [shape=|", a).contains(&"hexagon".to_string()));
        assert!(labels("digraph w { a [join_policy=\"|", a).contains(&"wait_all".to_string()));
        assert!(labels("digraph w { a [sandbox=|", a).contains(&"bwrap".to_string()));
        assert!(labels("digraph w {\n  start -> |", a).contains(&"plan".to_string()));
        let keys = labels("digraph w { a -> b [condition=\"|", a);
        assert!(
            keys.contains(&"outcome".to_string()) && keys.contains(&"context.response.plan".to_string()),
            "{keys:?}"
        );
        assert!(labels("digraph w {\n  |", a).contains(&"goal".to_string()));
        assert!(labels("digraph w { a [label=\"x|", a).is_empty());
        // Text before the cursor that ends in a wide character (a panic once).
        labels("😀|", a);
        labels("digraph w { a [😀=😀|", a);
    }
}
