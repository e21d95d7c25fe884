//! Stage rules: what each kind of node needs to run as intended.

use crate::diagnostic::Diagnostic;
use crate::graph::settings::{
    is_small_tier, small_tier_complaint, ContextSettingsError, ParallelSettingsError, SmallTierParent,
};
use crate::graph::settings::{resolve_fidelity, EdgeSettings, FidelityMode};
use crate::graph::{Choice, HandlerType, Node, Workflow};

fn nodes_of_type<'w>(
    workflow: &'w Workflow,
    kind: HandlerType<&'static str>,
) -> impl Iterator<Item = &'w Node> {
    workflow.nodes().filter(move |node| node.handler_type() == kind)
}

pub fn prompt_on_llm_nodes(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for node in workflow.nodes().filter(|n| n.handler_type().is_llm() && n.prompt().is_none()) {
        out.push(
            Diagnostic::warning(
                "prompt_on_llm_nodes",
                format!(
                    "{} stage `{}` has no prompt; its label \"{}\" is sent instead",
                    node.handler_type(),
                    node.id,
                    node.label()
                ),
            )
            .node(&node.id)
            .span(node.span)
            .fix(format!("add `prompt=\"...\"` to `{}`", node.id)),
        );
    }
}

pub fn command_has_script(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for node in nodes_of_type(workflow, HandlerType::Command) {
        if node.attributes.non_empty_text("script").is_some() {
            continue;
        }
        out.push(
            Diagnostic::error("command_has_script", format!("command stage `{}` has no script", node.id))
                .node(&node.id)
                .span(node.span)
                .fix(format!("add `script=\"...\"` to `{}`", node.id)),
        );
    }
}

pub fn wait_has_duration(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for node in nodes_of_type(workflow, HandlerType::Wait) {
        if node.attributes.contains("duration") {
            continue;
        }
        out.push(
            Diagnostic::error("wait_has_duration", format!("wait stage `{}` has no duration", node.id))
                .node(&node.id)
                .span(node.span)
                .fix(format!("add `duration=30s` (or another duration) to `{}`", node.id)),
        );
    }
}

pub fn human_gate_has_choices(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for node in nodes_of_type(workflow, HandlerType::Human) {
        let Some(index) = workflow.index_of(&node.id) else { continue };
        let outgoing = workflow.outgoing(index);
        if outgoing.is_empty() {
            out.push(
                Diagnostic::error(
                    "human_gate_has_choices",
                    format!("human gate `{}` has no outgoing edges to choose from", node.id),
                )
                .node(&node.id)
                .span(node.span)
                .fix("add one labeled edge per choice, e.g. `gate -> deploy [label=\"[A] Approve\"]`"),
            );
            continue;
        }
        if let Some(default) = node.attributes.get("human.default_choice") {
            let choice = default.value.to_string();
            let matches = outgoing
                .iter()
                .any(|edge| Choice::from_edge(edge.edge.label(), &edge.to.id).matches(&choice));
            if !matches {
                out.push(
                    Diagnostic::error(
                        "human_gate_has_choices",
                        format!("default choice `{choice}` names none of the gate's choices (key, label or target)"),
                    )
                    .node(&node.id)
                    .span(default.span)
                    .fix("name one of the gate's edge targets or labels"),
                );
            }
        }
    }
}

/// The fidelity in force for `node` entered over `edge` (if any).
fn resolved_fidelity(workflow: &Workflow, node: &Node, edge: Option<&EdgeSettings>) -> FidelityMode {
    resolve_fidelity(edge, &node.settings.stage, workflow.settings())
}

pub fn thread_id_without_full_fidelity(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for node in workflow.nodes() {
        let Some(attr) = node.attributes.get("thread_id") else { continue };
        // The thread is lost on any way in that does not resolve to full fidelity.
        let incoming = workflow.index_of(&node.id).map(|index| workflow.incoming(index)).unwrap_or_default();
        let entries: Vec<Option<&EdgeSettings>> = if incoming.is_empty() {
            vec![None]
        } else {
            incoming.iter().map(|edge| Some(&edge.edge.settings)).collect()
        };
        let lossy = entries
            .into_iter()
            .map(|edge| resolved_fidelity(workflow, node, edge))
            .find(|mode| *mode != FidelityMode::Full);
        if let Some(mode) = lossy {
            out.push(
                Diagnostic::warning(
                    "thread_id_without_full_fidelity",
                    format!("node `{}` sets thread_id but is entered with fidelity {mode}; threads are only kept under full fidelity", node.id),
                )
                .node(&node.id)
                .span(attr.span)
                .fix(format!("set `fidelity=full` on `{}` or remove thread_id", node.id)),
            );
        }
    }
    for edge in workflow.edges() {
        let Some(attr) = edge.edge.attributes.get("thread_id") else { continue };
        let mode = resolved_fidelity(workflow, edge.to, Some(&edge.edge.settings));
        if mode != FidelityMode::Full {
            out.push(
                Diagnostic::warning(
                    "thread_id_without_full_fidelity",
                    format!(
                        "edge `{} -> {}` sets thread_id but the target's fidelity is {mode}",
                        edge.from.id, edge.to.id
                    ),
                )
                .edge(&edge.from.id, &edge.to.id)
                .span(attr.span)
                .fix("add `fidelity=full` to the edge or its target, or remove thread_id"),
            );
        }
    }
}

/// Every parallel stage needs a join node its branches all reach; a fan-in node is expected there.
pub fn parallel_without_fan_in(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for node in nodes_of_type(workflow, HandlerType::Parallel) {
        let Some(index) = workflow.index_of(&node.id) else { continue };
        let join = workflow.join_of(index).map(|join| workflow.node_at(join));
        let diagnostic = match join {
            Some(join) if join.handler_type() == HandlerType::FanIn => continue,
            Some(join) => Diagnostic::warning(
                "parallel_without_fan_in",
                format!(
                    "the branches of parallel stage `{}` never meet at a fan-in (tripleoctagon) node; \
                     they join at `{}`, where the best branch's changes are merged without a fan-in stage",
                    node.id, join.id
                ),
            ),
            None if workflow.outgoing(index).is_empty() => Diagnostic::error(
                "parallel_without_fan_in",
                format!("parallel stage `{}` has no branches", node.id),
            ),
            None => Diagnostic::error(
                "parallel_without_fan_in",
                format!(
                    "the branches of parallel stage `{}` never meet again, so they cannot be joined",
                    node.id
                ),
            ),
        };
        out.push(
            diagnostic
                .node(&node.id)
                .span(node.span)
                .fix("add `join [shape=tripleoctagon]` and an edge from the end of every branch to it"),
        );
    }
}

/// `join_policy=k_of_n` needs `join_k`, `quorum` needs a `join_quorum` between 0 and 1: the
/// errors of the parallel settings' parser (type errors are `attribute_type`'s).
pub fn parallel_join_settings(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for node in nodes_of_type(workflow, HandlerType::Parallel) {
        let Some(Err(errors)) = node.settings.parallel() else { continue };
        for error in errors {
            let fix = match error {
                ParallelSettingsError::NoJoinK { .. } => "add `join_k=2` (or another count)",
                ParallelSettingsError::NoJoinQuorum { .. } => "add `join_quorum=0.5`",
                ParallelSettingsError::Attribute(_) => continue,
            };
            out.push(
                Diagnostic::error("parallel_join_settings", error.to_string())
                    .node(&node.id)
                    .span(error.span())
                    .fix(fix),
            );
        }
    }
}

/// An LLM stage's context settings that contradict each other (a turn trigger not above the
/// turns kept, a budget cutover with compaction off, a share outside (0, 1]).
pub fn context_settings(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for node in workflow.nodes() {
        let Some(Err(errors)) = node.settings.context() else { continue };
        for error in errors {
            if let ContextSettingsError::Attribute(_) = error {
                continue;
            }
            out.push(
                Diagnostic::error("context_settings", error.to_string())
                    .node(&node.id)
                    .span(error.span())
                    .fix(error.fix()),
            );
        }
    }
}

/// The graph's `context_files` name files or folders that exist, relative to the workflow file.
pub fn context_files(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    use crate::agent::context::reference_files::{base_of, expand, ReferenceEntry};
    let Some(attr) = workflow.attributes().get("context_files") else { return };
    let base = base_of(workflow);
    for entry in ReferenceEntry::list(&attr.value.to_string()) {
        if let Err(error) = expand(std::slice::from_ref(&entry), &base) {
            out.push(Diagnostic::error("context_files", error.to_string()).span(attr.span).fix(
                "correct the path (relative to the workflow file's folder) or take it out of context_files",
            ));
        }
    }
}

/// `sandbox_paths` on the graph or a node that `fabro run` would refuse (`sandbox::check_workflow`):
/// an item that is not `ro:/absolute/path` or `rw:/absolute/path`, or a path that does not exist
/// on this machine.
pub fn sandbox_paths(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let mut seen = rustc_hash::FxHashSet::default();
    let owners = std::iter::once((None, workflow.attributes()))
        .chain(workflow.nodes().map(|node| (Some(node.id.as_str()), &node.attributes)));
    for (node, attributes) in owners {
        let Some(attr) = attributes.get("sandbox_paths") else { continue };
        if !seen.insert(attr.span) {
            continue;
        }
        let (message, fix) = match crate::graph::settings::parse_paths(&attr.value.to_string()) {
            Err(message) => {
                (message, "write each item as ro:/absolute/path or rw:/absolute/path".to_string())
            }
            Ok(binds) => match binds.iter().find(|bind| !bind.path.exists()) {
                Some(missing) => (
                    format!(
                        "`{}` does not exist, so `fabro run` refuses the workflow",
                        missing.path.display()
                    ),
                    "create the path, or take it out of sandbox_paths".to_string(),
                ),
                None => continue,
            },
        };
        let diagnostic =
            Diagnostic::error("sandbox_paths", format!("sandbox_paths: {message}")).span(attr.span).fix(fix);
        out.push(match node {
            Some(id) => diagnostic.node(id),
            None => diagnostic,
        });
    }
}

/// `container_cpus`, `container_memory` or `container_pids` (graph or node) that `fabro run`
/// would refuse: not a number of CPUs, a memory size or a number of processes.
pub fn container_limits(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let owners = std::iter::once((None, workflow.attributes(), &workflow.settings().sandbox.container))
        .chain(
            workflow.nodes().map(|node| {
                (Some(node.id.as_str()), &node.attributes, &node.settings.stage.sandbox.container)
            }),
        );
    let mut seen = rustc_hash::FxHashSet::default();
    for (node, attributes, settings) in owners {
        let Some((name, message)) = settings.invalid() else { continue };
        // One finding per written value (a `node [...]` block's is every node's).
        let Some(attr) = attributes.get(name).filter(|attr| seen.insert(attr.span)) else { continue };
        let diagnostic =
            Diagnostic::error("container_limits", format!("{name}: {message}")).span(attr.span).fix(format!(
                "write {name} as e.g. {}",
                match name {
                    "container_cpus" => "2 or 0.5",
                    "container_memory" => "512m or 2g",
                    _ => "256",
                }
            ));
        out.push(match node {
            Some(id) => diagnostic.node(id),
            None => diagnostic,
        });
    }
}

/// `keep_background=true` on a command stage confined by bubblewrap (its `sandbox`, else the
/// graph's `default_sandbox`): the stage's PID namespace ends with it, so nothing it leaves in the
/// background survives, whatever the attribute says.
pub fn confined_keep_background(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    let graph_sandbox = workflow.attributes().text("default_sandbox");
    for node in nodes_of_type(workflow, HandlerType::Command) {
        let Some(attr) = node.attributes.get("keep_background") else { continue };
        if node.attributes.boolean("keep_background") != Some(true) {
            continue;
        }
        if node.attributes.text("sandbox").or(graph_sandbox).map(str::trim) != Some("bwrap") {
            continue;
        }
        out.push(
            Diagnostic::warning(
                "confined_keep_background",
                format!(
                    "command stage `{}` keeps its background processes, but it runs in the bwrap sandbox, \
                     whose processes all end with the stage",
                    node.id
                ),
            )
            .node(&node.id)
            .span(attr.span)
            .fix(format!("remove keep_background, or run `{}` with sandbox=\"none\"", node.id)),
        );
    }
}

/// An agent stage on a small-tier model (haiku, flash, mini, nano): small models lose the thread
/// of long tool loops. `small_tier_parent=warn` (the default) warns, `refuse` is an error, `allow`
/// says nothing; the node's value wins over the graph's `default_small_tier_parent`.
pub fn small_tier_parent(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    for node in nodes_of_type(workflow, HandlerType::Agent) {
        let Some(attr) = node.attributes.get("llm_model") else { continue };
        let model = attr.value.to_string();
        if !is_small_tier(&model) {
            continue;
        }
        let (message, fix) = small_tier_complaint(&node.id, &model);
        let diagnostic = match node.settings.llm().and_then(|llm| llm.small_tier_parent).unwrap_or_default() {
            SmallTierParent::Refuse => Diagnostic::error("small_tier_parent", message),
            SmallTierParent::Allow => continue,
            SmallTierParent::Warn => Diagnostic::warning("small_tier_parent", message),
        };
        out.push(diagnostic.node(&node.id).span(attr.span).fix(fix));
    }
}

/// `tools` on a node and `default_tools` on the graph name built-in tools, each once; a web tool
/// they name for a stage that cannot use it (`web_tools=false`, or a bwrap sandbox without
/// `sandbox_network=true`) is a warning, as the stage will not be offered it.
pub fn agent_tools(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    use crate::agent::tools::BUILTIN_TOOLS;
    let owners = std::iter::once((None, workflow.attributes(), "default_tools"))
        .chain(workflow.nodes().map(|node| (Some(node.id.as_str()), &node.attributes, "tools")));
    for (node, attributes, key) in owners {
        let Some(attr) = attributes.get(key) else { continue };
        let mut seen: Vec<&str> = Vec::new();
        let text = attr.value.to_string();
        for name in text.split(',').map(str::trim).filter(|name| !name.is_empty()) {
            let problem = if seen.contains(&name) {
                Some((format!("`{key}` names `{name}` twice"), format!("name `{name}` once")))
            } else if !BUILTIN_TOOLS.contains(&name) {
                let fix = match crate::diagnostic::did_you_mean(name, BUILTIN_TOOLS) {
                    Some(near) => {
                        format!("did you mean `{near}`? the built-in tools are {}", BUILTIN_TOOLS.join(", "))
                    }
                    None => format!(
                        "the built-in tools are {} (MCP tools come with mcp_servers)",
                        BUILTIN_TOOLS.join(", ")
                    ),
                };
                Some((format!("`{key}` names `{name}`, which is not a built-in tool"), fix))
            } else {
                None
            };
            seen.push(name);
            if let Some((message, fix)) = problem {
                let diagnostic = Diagnostic::error("agent_tools", message).span(attr.span).fix(fix);
                out.push(match node {
                    Some(id) => diagnostic.node(id),
                    None => diagnostic,
                });
            }
        }
    }
    web_tools_withheld(workflow, out);
}

/// The warnings of [`agent_tools`] for web tools a stage names and will not be offered.
fn web_tools_withheld(workflow: &Workflow, out: &mut Vec<Diagnostic>) {
    use crate::graph::settings::SandboxKind;
    for node in nodes_of_type(workflow, HandlerType::Agent) {
        let Some(llm) = node.settings.llm() else { continue };
        let mut named = llm.tools.iter().flatten();
        let Some(tool) = named.find(|name| crate::agent::web::WEB_TOOLS.contains(&name.as_str())) else {
            continue;
        };
        let sandbox = &node.settings.stage.sandbox;
        let (why, fix) = if llm.context.as_ref().ok().and_then(|context| context.web_tools) == Some(false) {
            ("it has web_tools=false", format!("leave `{tool}` out of its tools, or drop web_tools=false"))
        } else if let Some(kind) = sandbox
            .kind
            .or(workflow.settings().sandbox.kind)
            .filter(|kind| *kind != SandboxKind::None && !sandbox.network)
        {
            (
                match kind {
                    SandboxKind::Bwrap => "its bwrap sandbox has no network",
                    _ => "its container has no network",
                },
                format!("set sandbox_network=true on `{}`, or leave `{tool}` out of its tools", node.id),
            )
        } else {
            continue;
        };
        let (key, attr) = match node.attributes.get("tools") {
            Some(attr) => ("tools", Some(attr)),
            None => ("default_tools", workflow.attributes().get("default_tools")),
        };
        let message =
            format!("`{key}` names `{tool}` for stage `{}`, which will not be offered it: {why}", node.id);
        let diagnostic = Diagnostic::warning("agent_tools", message).node(&node.id).fix(fix);
        out.push(match attr {
            Some(attr) => diagnostic.span(attr.span),
            None => diagnostic,
        });
    }
}
