//! Attribute rules: values of the right type, unknown or misplaced attributes, handler types,
//! fidelity names and the stylesheet.

use rustc_hash::FxHashSet;

use super::Rule;
use crate::diagnostic::{did_you_mean, Diagnostic};
use crate::graph::attribute::{self, Scope, ATTRIBUTES, DISPLAY_ATTRIBUTES};
use crate::graph::settings::FidelityMode;
use crate::graph::{Attributes, HandlerType, Value, Workflow};
use crate::source::Span;

/// What an attribute belongs to, for messages and the `node_id`/`edge` fields.
enum Owner<'w> {
    Graph,
    Subgraph(Option<&'w str>),
    Node(&'w str),
    Edge(&'w str, &'w str),
}

impl Owner<'_> {
    fn scope(&self) -> Scope {
        match self {
            Owner::Graph | Owner::Subgraph(_) => Scope::Graph,
            Owner::Node(_) => Scope::Node,
            Owner::Edge(..) => Scope::Edge,
        }
    }

    /// A message prefix naming the owner; empty for nodes and edges, whose diagnostics carry
    /// `node_id` or `edge` instead.
    fn prefix(&self) -> String {
        match self {
            Owner::Graph => "graph: ".to_string(),
            Owner::Subgraph(Some(name)) => format!("subgraph `{name}`: "),
            Owner::Subgraph(None) => "subgraph: ".to_string(),
            Owner::Node(_) | Owner::Edge(..) => String::new(),
        }
    }

    fn attach(&self, diagnostic: Diagnostic) -> Diagnostic {
        match self {
            Owner::Node(id) => diagnostic.node(*id),
            Owner::Edge(from, to) => diagnostic.edge(*from, *to),
            _ => diagnostic,
        }
    }
}

/// Attributes copied from a `node [..]`/`edge [..]` block share one source position; this reports
/// each such position once. Attributes written on a node or edge are always new.
#[derive(Default)]
struct Seen(FxHashSet<Span>);

impl Seen {
    fn first_time(&mut self, attr: &crate::graph::Attr, span: Span) -> bool {
        !attr.inherited || self.0.insert(span)
    }
}

/// Every attribute map in the workflow with its owner.
fn all_attributes(workflow: &Workflow) -> Vec<(Owner<'_>, &Attributes)> {
    let mut all = vec![(Owner::Graph, workflow.attributes())];
    all.extend(workflow.subgraphs().iter().map(|s| (Owner::Subgraph(s.name.as_deref()), &s.attributes)));
    all.extend(workflow.nodes().map(|n| (Owner::Node(n.id.as_str()), &n.attributes)));
    all.extend(
        workflow.edges().map(|e| (Owner::Edge(e.from.id.as_str(), e.to.id.as_str()), &e.edge.attributes)),
    );
    all
}

pub fn attribute_type(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let mut seen = Seen::default();
    for (owner, attributes) in all_attributes(workflow) {
        for (key, attr) in attributes.iter() {
            let Value::Invalid { raw, expected } = &attr.value else { continue };
            if !seen.first_time(attr, attr.span) {
                continue;
            }
            let fix = format!("write {expected}");
            out.push(
                owner.attach(
                    Diagnostic::error(
                        "attribute_type",
                        format!("{}`{key}` is `{raw}`, expected {expected}", owner.prefix()),
                    )
                    .span(attr.span)
                    .fix(fix),
                ),
            );
        }
    }
}

/// Values another dialect writes differently and fabro reads the same: bare seconds for a
/// duration (`timeout=300`, the Attractor examples), an integral float for a whole number
/// (`weight=1.0`). A warning, with the canonical spelling as the fix.
pub fn dialect_value(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let source = workflow.source().text();
    let mut seen = Seen::default();
    for (owner, attributes) in all_attributes(workflow) {
        for (key, attr) in attributes.iter() {
            // Only a duration, a whole number or a word can have been read from another spelling.
            if !matches!(attr.value, Value::Duration(_) | Value::Integer(_) | Value::Text(_)) {
                continue;
            }
            let Some(spec) = attribute::spec(key) else { continue };
            let Some(raw) =
                source.get(attr.span.start..attr.span.end).map(|raw| raw.trim().trim_matches('"'))
            else {
                continue;
            };
            let Some(canonical) = attribute::canonical_spelling(raw, spec.value_type) else { continue };
            if !seen.first_time(attr, attr.span) {
                continue;
            }
            let meaning = match spec.value_type {
                attribute::ValueType::Duration => format!("reads as {canonical} (bare numbers are seconds)"),
                attribute::ValueType::OneOf(_) => match attribute::word_alias(raw) {
                    Some((_, note)) => format!("reads as {canonical} ({note})"),
                    None => format!("reads as {canonical}"),
                },
                _ => format!("reads as {canonical}"),
            };
            out.push(
                owner.attach(
                    Diagnostic::warning(
                        "dialect_value",
                        format!("{}`{key}={raw}` {meaning}", owner.prefix()),
                    )
                    .span(attr.span)
                    .fix(format!("write `{key}={canonical}`"))
                    .edit_written(
                        workflow.source(),
                        attr.span,
                        raw,
                        match source.get(attr.span.start..attr.span.end) {
                            Some(written) if written.starts_with('"') => crate::dot_string::quote(&canonical),
                            _ => canonical.clone(),
                        },
                    ),
                ),
            );
        }
    }
}

/// An attribute another engine defines and fabro does not implement: a warning naming it, so a
/// workflow written for Fabro never validates clean and then ignores it.
pub fn unsupported_attribute(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let mut seen = Seen::default();
    for (owner, attributes) in all_attributes(workflow) {
        for (key, attr) in attributes.iter() {
            let Some((_, origin, meaning)) =
                attribute::UNSUPPORTED_ATTRIBUTES.iter().find(|(name, _, _)| *name == key)
            else {
                continue;
            };
            if !seen.first_time(attr, attr.key_span) {
                continue;
            }
            out.push(owner.attach(
                Diagnostic::warning(
                    "unsupported_attribute",
                    format!("{}`{key}` is {origin}'s ({meaning}); fabro does not support it, so here it has no effect", owner.prefix()),
                )
                .span(attr.key_span)
                .fix(format!("remove `{key}`, or see docs/language.md for what fabro offers instead"))
                .pipe_removal(workflow, key, attr),
            ));
        }
    }
}

pub fn unknown_attribute(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let mut seen = Seen::default();
    let known = || ATTRIBUTES.iter().map(|spec| spec.name).chain(DISPLAY_ATTRIBUTES.iter().copied());
    for (owner, attributes) in all_attributes(workflow) {
        for (key, attr) in attributes.iter() {
            let spec = attribute::spec(key);
            let in_scope = spec.is_some_and(|spec| spec.scopes.contains(&owner.scope()));
            let unsupported = attribute::UNSUPPORTED_ATTRIBUTES.iter().any(|(name, _, _)| *name == key);
            if (in_scope && !matches!(owner, Owner::Subgraph(_)))
                || attribute::is_display_attribute(key)
                || unsupported
            {
                continue;
            }
            if !seen.first_time(attr, attr.key_span) {
                continue;
            }
            let finding = match spec {
                Some(spec) if !spec.scopes.contains(&owner.scope()) => Some((
                    format!(
                        "{}`{key}` applies to {}, not {}; here it has no effect",
                        owner.prefix(),
                        spec.scopes.iter().map(|s| s.plural()).collect::<Vec<_>>().join(" and "),
                        owner.scope().plural()
                    ),
                    format!("move `{key}` to the {} it belongs to", spec.scopes[0].plural()),
                    None,
                )),
                Some(_) if matches!(owner, Owner::Subgraph(_)) && key != "label" => Some((
                    format!("{}graph attribute `{key}` set inside a subgraph applies only there and has no effect", owner.prefix()),
                    format!("move `{key}` to the top level of the digraph"),
                    None,
                )),
                Some(_) => None,
                None => did_you_mean(key, known()).map(|similar| {
                    (
                        format!("{}unknown attribute `{key}` (did you mean `{similar}`?)", owner.prefix()),
                        format!("rename it to `{similar}`; unknown attributes are kept only for custom handlers"),
                        Some(similar),
                    )
                }),
            };
            if let Some((message, fix, rename)) = finding {
                // A near miss of a known attribute (`timout`) would be silently ignored: an error.
                let diagnostic = if spec.is_none() {
                    Diagnostic::error("unknown_attribute", message)
                } else {
                    Diagnostic::warning("unknown_attribute", message)
                };
                let mut diagnostic = diagnostic.span(attr.key_span).fix(fix);
                if let Some(similar) = rename {
                    diagnostic = diagnostic.edit_written(workflow.source(), attr.key_span, key, similar);
                }
                out.push(owner.attach(diagnostic));
            }
        }
    }
}

/// Link attributes (`URL`, `href`, `labelURL`, ...) must hold `http://` or `https://` links: a
/// `javascript:` link would run in the page that shows the drawn graph (`fabro serve`). Such
/// links are never drawn anyway (`render::dot`); this says so before a run.
pub fn link_scheme(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let mut seen = Seen::default();
    for (owner, attributes) in all_attributes(workflow) {
        for (key, attr) in attributes.iter() {
            let value = attr.value.to_string();
            if !attribute::is_link_attribute(key)
                || attribute::is_web_link(&value)
                || !seen.first_time(attr, attr.span)
            {
                continue;
            }
            out.push(
                owner.attach(
                    Diagnostic::error(
                        "link_scheme",
                        format!(
                            "{}`{key}` is `{value}`: only http:// and https:// links are allowed in a drawn graph",
                            owner.prefix()
                        ),
                    )
                    .span(attr.span)
                    .fix(format!("write an absolute http:// or https:// link, or remove `{key}`")),
                ),
            );
        }
    }
}

/// Graphviz attributes that name files (`image`, `shapefile`, `fontpath`, ...) are never passed
/// to Graphviz (`render::dot`): a warning that they are not drawn. `image` is also fabro's (the
/// container image), and then no finding.
pub fn graphviz_file(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let mut seen = Seen::default();
    for (owner, attributes) in all_attributes(workflow) {
        for (key, attr) in attributes.iter() {
            if !attribute::is_file_attribute(key)
                || attribute::spec(key).is_some()
                || !seen.first_time(attr, attr.key_span)
            {
                continue;
            }
            out.push(
                owner.attach(
                    Diagnostic::warning(
                        "graphviz_file",
                        format!(
                            "{}`{key}` names a file, which fabro never passes to Graphviz: it is not drawn",
                            owner.prefix()
                        ),
                    )
                    .span(attr.key_span)
                    .fix(format!("remove `{key}`"))
                    .pipe_removal(workflow, key, attr),
                ),
            );
        }
    }
}

/// Explicit `type` values must name a built-in or registered handler; shapes without a handler
/// fall back to the agent handler, which is said rather than done silently.
pub struct TypeKnown {
    pub custom_types: Vec<String>,
}

impl Rule for TypeKnown {
    fn id(&self) -> &str {
        "type_known"
    }

    fn check(&self, workflow: &Workflow, out: &mut Vec<Diagnostic>) {
        for node in workflow.nodes() {
            if let Some(attr) = node
                .attributes
                .get("type")
                .filter(|a| a.value.as_text().is_some_and(|t| !t.trim().is_empty()))
            {
                let HandlerType::Custom(name) = node.handler_type() else { continue };
                if self.custom_types.iter().any(|t| t == name) {
                    continue;
                }
                let builtin = HandlerType::known_names().map(|name| -> &str { name });
                let names = builtin.chain(self.custom_types.iter().map(String::as_str));
                let fix = match did_you_mean(name, names) {
                    Some(similar) => format!("did you mean `{similar}`?"),
                    None => "use a built-in type or register a handler for it".to_string(),
                };
                out.push(
                    Diagnostic::warning("type_known", format!("no handler is registered for type `{name}`"))
                        .node(&node.id)
                        .span(attr.span)
                        .fix(fix),
                );
            } else if let Some(attr) = node.attributes.get("shape") {
                let shape = node.shape();
                if HandlerType::from_shape(shape).is_some() {
                    continue;
                }
                let fix = match did_you_mean(shape, HandlerType::known_shapes()) {
                    Some(similar) => format!("did you mean `{similar}`? Otherwise set `type` explicitly"),
                    None => "use a shape with a handler (box, tab, hexagon, diamond, ...) or set `type`"
                        .to_string(),
                };
                out.push(
                    Diagnostic::warning(
                        "type_known",
                        format!("shape `{shape}` has no handler; the node runs as an agent stage"),
                    )
                    .node(&node.id)
                    .span(attr.span)
                    .fix(fix),
                );
            }
        }
    }
}

pub fn fidelity_valid(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let mut seen = Seen::default();
    for (owner, attributes) in all_attributes(workflow) {
        for key in ["fidelity", "default_fidelity"] {
            let Some(attr) = attributes.get(key) else { continue };
            let Some(text) = attr.value.as_text() else { continue };
            if text.parse::<FidelityMode>().is_ok() || !seen.first_time(attr, attr.span) {
                continue;
            }
            let fix = match did_you_mean(text.trim(), FidelityMode::NAMES) {
                Some(similar) => format!("did you mean `{similar}`?"),
                None => format!("use one of {}", FidelityMode::NAMES.join(", ")),
            };
            out.push(
                owner.attach(
                    Diagnostic::warning(
                        "fidelity_valid",
                        format!("{}unknown fidelity `{text}`; compact is used instead", owner.prefix()),
                    )
                    .span(attr.span)
                    .fix(fix),
                ),
            );
        }
    }
}

pub fn stylesheet_syntax(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let Some(stylesheet) = workflow.stylesheet() else { return };
    let literal = workflow.attributes().get("model_stylesheet").map(|attr| attr.span).unwrap_or_default();
    let position = |offset: usize| Span::at(workflow.source().offset_in_literal(literal, offset));
    match stylesheet {
        Err(error) => out.push(
            Diagnostic::error("stylesheet_syntax", format!("model_stylesheet: {}", error.message))
                .span(position(error.offset))
                .fix("rules look like `.code { llm_model: claude-opus-4-6; reasoning_effort: high }`"),
        ),
        Ok(stylesheet) => {
            for (selector, offset) in stylesheet.selectors() {
                let crate::graph::stylesheet::Selector::Id(id) = selector else { continue };
                if workflow.node(id).is_some() {
                    continue;
                }
                let fix = match did_you_mean(id, workflow.nodes().map(|n| n.id.as_str())) {
                    Some(similar) => format!("did you mean `#{similar}`?"),
                    None => "remove the rule or fix the id".to_string(),
                };
                out.push(
                    Diagnostic::warning(
                        "stylesheet_syntax",
                        format!("model_stylesheet: `#{id}` matches no node"),
                    )
                    .span(position(offset))
                    .fix(fix),
                );
            }
        }
    }
}

/// The edit removing an attribute, as [`Diagnostic`] builders go.
trait Removal {
    fn pipe_removal(self, workflow: &Workflow, key: &str, attr: &crate::graph::Attr) -> Self;
}

impl Removal for Diagnostic {
    /// Adds the edit removing `key=value` when the source spells the key there.
    fn pipe_removal(self, workflow: &Workflow, key: &str, attr: &crate::graph::Attr) -> Self {
        let source = workflow.source();
        let here = source.text().get(attr.key_span.start..attr.key_span.end).map(|k| k.trim_matches('"'));
        if here != Some(key) || attr.span.start < attr.key_span.end {
            return self;
        }
        self.edit(removal(workflow, attr), "")
    }
}

/// The span of `key=value` with the separator after it (`,` or `;` and spaces), to remove the
/// attribute.
fn removal(workflow: &Workflow, attr: &crate::graph::Attr) -> crate::source::Span {
    let text = workflow.source().text();
    let mut end = attr.span.end.max(attr.key_span.end);
    let rest = text.get(end..).unwrap_or("");
    let after_space = rest.len() - rest.trim_start_matches([' ', '\t']).len();
    if rest[after_space..].starts_with([',', ';']) {
        end += after_space + 1;
        let rest = text.get(end..).unwrap_or("");
        end += rest.len() - rest.trim_start_matches([' ', '\t']).len();
    }
    crate::source::Span::new(attr.key_span.start, end)
}
