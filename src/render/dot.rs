//! Normalized DOT: the workflow as fabro understands it, written so that both fabro and Graphviz
//! read it back.
//!
//! - `digraph <name> {`, then the graph attributes, then every node in declaration order with all
//!   of its attributes (defaults from `node [..]` blocks written out on each node, subgraphs
//!   flattened, their derived classes kept in `class`), then every edge in declaration order
//!   (chains expanded) with its attributes.
//! - Every value is double-quoted: `"` and `\` are escaped, newlines written as `\n`.
//! - Ids and keys that are not plain identifiers (`human.default_choice`, `my-node`) and DOT
//!   keywords are quoted.
//! - Values are the transformed ones: `@file` prompts inlined, `$goal` expanded, stylesheet
//!   models applied. The output is stable: the same workflow gives the same bytes.
//! - Nothing that would make Graphviz read a file or draw a dangerous link: attributes naming
//!   files (`image`, `shapefile`, `fontpath`, ...) are left out, and so are link attributes
//!   (`URL`, `href`, ...) that are not `http://` or `https://` links, whether or not the workflow
//!   was validated (`fabro serve` inlines the SVG in its pages).

use std::borrow::Cow;
use std::fmt::Write as _;
use std::str::FromStr;

use crate::graph::attribute;
use crate::graph::{EdgeRef, HandlerType, Node, Workflow};

use super::overlay::{NodeState, Overlay};

/// Graphviz `rankdir`: which way the graph flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    TopBottom,
    LeftRight,
    BottomTop,
    RightLeft,
}

impl Direction {
    /// The `rankdir` value: `TB`, `LR`, `BT` or `RL`.
    pub fn as_str(self) -> &'static str {
        match self {
            Direction::TopBottom => "TB",
            Direction::LeftRight => "LR",
            Direction::BottomTop => "BT",
            Direction::RightLeft => "RL",
        }
    }
}

impl FromStr for Direction {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, Self::Err> {
        match text.trim().to_ascii_uppercase().as_str() {
            "TB" => Ok(Direction::TopBottom),
            "LR" => Ok(Direction::LeftRight),
            "BT" => Ok(Direction::BottomTop),
            "RL" => Ok(Direction::RightLeft),
            _ => Err(format!("unknown direction `{text}`; expected LR, TB, BT or RL")),
        }
    }
}

/// What to write besides the workflow itself.
#[derive(Debug, Clone, Default)]
pub struct DotOptions {
    /// Sets `rankdir`, replacing one the file sets.
    pub direction: Option<Direction>,
    /// Colors nodes and edges by a run's progress; never adds or removes nodes or edges.
    pub overlay: Option<Overlay>,
}

/// Fill of a node whose last visit succeeded (or partially succeeded).
pub const SUCCEEDED_FILL: &str = "#c8e6c9";
/// Fill of a node whose last visit failed.
pub const FAILED_FILL: &str = "#ffcdd2";
/// Fill of the stage an unfinished run is at.
pub const ACTIVE_FILL: &str = "#fff59d";
/// Fill of a node whose last visit asked for a retry.
pub const RETRY_FILL: &str = "#ffe0b2";
/// Fill of a node the run never reached (or skipped).
pub const NOT_REACHED_FILL: &str = "#eeeeee";
/// Text and border color of a node the run never reached.
pub const NOT_REACHED_TEXT: &str = "#9e9e9e";
/// Color of an edge the run took.
pub const TAKEN_EDGE_COLOR: &str = "#2e7d32";
/// Pen width of an edge the run took.
pub const TAKEN_EDGE_PENWIDTH: &str = "2.5";

/// Attribute lists longer than this are written one attribute per line.
const MAX_LINE: usize = 100;

/// Keywords that cannot be bare ids.
const KEYWORDS: &[&str] = &["node", "edge", "graph", "digraph", "subgraph", "strict"];

/// Writes `workflow` as normalized DOT.
pub fn write(workflow: &Workflow, options: &DotOptions) -> String {
    let mut out = String::new();
    let _ = writeln!(out, "digraph {} {{", id(workflow.name()));

    let mut graph_attributes = AttrList::default();
    for (key, attr) in workflow.attributes().iter() {
        graph_attributes.set(key, attr.value.to_string());
    }
    if let Some(direction) = options.direction {
        graph_attributes.set("rankdir", direction.as_str().to_string());
    }
    for (key, value) in graph_attributes.0.iter().filter(|(key, value)| drawable(key, value)) {
        let _ = writeln!(out, "    {}={}", id(key), quote(value));
    }

    let mut section = graph_attributes.0.iter().any(|(key, value)| drawable(key, value));
    for node in workflow.nodes() {
        if std::mem::take(&mut section) {
            out.push('\n');
        }
        let mut attributes = node_attributes(node);
        if let Some(overlay) = &options.overlay {
            overlay_node(node, overlay, &mut attributes);
        }
        write_statement(&mut out, &id(&node.id), &attributes);
    }

    section = workflow.node_count() > 0 || graph_attributes.0.iter().any(|(key, value)| drawable(key, value));
    for edge in workflow.edges() {
        if std::mem::take(&mut section) {
            out.push('\n');
        }
        let mut attributes = AttrList::default();
        for (key, attr) in edge.edge.attributes.iter() {
            attributes.set(key, attr.value.to_string());
        }
        if let Some(overlay) = &options.overlay {
            overlay_edge(&edge, overlay, &mut attributes);
        }
        let head = format!("{} -> {}", id(&edge.from.id), id(&edge.to.id));
        write_statement(&mut out, &head, &attributes);
    }
    out.push_str("}\n");
    out
}

/// An ordered attribute list; setting a key again replaces its value in place.
#[derive(Debug, Default)]
struct AttrList(Vec<(String, String)>);

impl AttrList {
    fn set(&mut self, key: &str, value: String) {
        match self.0.iter_mut().find(|(k, _)| k == key) {
            Some(entry) => entry.1 = value,
            None => self.0.push((key.to_string(), value)),
        }
    }

    fn get(&self, key: &str) -> Option<&str> {
        self.0.iter().find(|(k, _)| k == key).map(|(_, v)| v.as_str())
    }
}

/// A node's attributes as written: everything it has, with its classes (explicit and derived
/// from subgraph labels) in `class`.
fn node_attributes(node: &Node) -> AttrList {
    let mut attributes = AttrList::default();
    let classes = node.classes.join(",");
    for (key, attr) in node.attributes.iter() {
        if key == "shape" && attr.inherited && !inherited_shape_keeps_handler(node, &attr.value.to_string()) {
            // `node [shape=box]` does not make `start` an agent, but `start [shape=box]` would.
            continue;
        }
        let value =
            if key == "class" && !classes.is_empty() { classes.clone() } else { attr.value.to_string() };
        attributes.set(key, value);
    }
    if !classes.is_empty() && attributes.get("class").is_none() {
        attributes.set("class", classes);
    }
    attributes
}

/// Whether writing an inherited shape on the node itself leaves its handler unchanged: a shape
/// from a default block yields to the conventional `start`/`exit` ids, a node's own shape does not.
fn inherited_shape_keeps_handler(node: &Node, shape: &str) -> bool {
    if node.attributes.non_empty_text("type").is_some() {
        return true;
    }
    HandlerType::from_shape(shape).unwrap_or(HandlerType::Agent) == node.handler_type()
}

fn overlay_node(node: &Node, overlay: &Overlay, attributes: &mut AttrList) {
    let (fill, text) = match overlay.node_state(&node.id) {
        NodeState::Succeeded => (SUCCEEDED_FILL, None),
        NodeState::Failed => (FAILED_FILL, None),
        NodeState::Active => (ACTIVE_FILL, None),
        NodeState::Retry => (RETRY_FILL, None),
        NodeState::Skipped => (NOT_REACHED_FILL, None),
        NodeState::NotReached => (NOT_REACHED_FILL, Some(NOT_REACHED_TEXT)),
    };
    let style = match attributes.get("style") {
        Some(style) if style.split(',').any(|s| s.trim() == "filled") => style.to_string(),
        Some(style) if !style.trim().is_empty() => format!("{style},filled"),
        _ => "filled".to_string(),
    };
    attributes.set("style", style);
    attributes.set("fillcolor", fill.to_string());
    if let Some(text) = text {
        attributes.set("fontcolor", text.to_string());
        attributes.set("color", text.to_string());
    }
    let visits = overlay.visits(&node.id);
    if visits > 1 {
        attributes.set("label", format!("{} (×{visits})", node.label()));
    }
}

fn overlay_edge(edge: &EdgeRef<'_>, overlay: &Overlay, attributes: &mut AttrList) {
    let taken = overlay.times_taken(&edge.from.id, &edge.to.id, edge.edge.is_conditional());
    if taken == 0 {
        return;
    }
    attributes.set("penwidth", TAKEN_EDGE_PENWIDTH.to_string());
    attributes.set("color", TAKEN_EDGE_COLOR.to_string());
    if taken > 1 {
        let label = match attributes.get("label").filter(|l| !l.trim().is_empty()) {
            Some(label) => format!("{label} ×{taken}"),
            None => format!("×{taken}"),
        };
        attributes.set("label", label);
    }
}

/// Whether an attribute is written for Graphviz: not one naming a file, and a link only when it
/// is an http(s) one.
fn drawable(key: &str, value: &str) -> bool {
    !attribute::is_file_attribute(key)
        && (!attribute::is_link_attribute(key) || attribute::is_web_link(value))
}

/// `head [a="1", b="2"]` on one line, or one attribute per line when that is too long.
fn write_statement(out: &mut String, head: &str, attributes: &AttrList) {
    let pairs: Vec<String> = attributes
        .0
        .iter()
        .filter(|(key, value)| drawable(key, value))
        .map(|(key, value)| format!("{}={}", id(key), quote(value)))
        .collect();
    write_statement_at(out, "    ", head, &pairs);
}

/// `head [pairs]` at `indent` on one line, or one pair per line when that is too long.
pub(crate) fn write_statement_at(out: &mut String, indent: &str, head: &str, pairs: &[String]) {
    if pairs.is_empty() {
        let _ = writeln!(out, "{indent}{head}");
        return;
    }
    let one_line = format!("{indent}{head} [{}]", pairs.join(", "));
    if one_line.chars().count() <= MAX_LINE && !pairs.iter().any(|p| p.contains('\n')) {
        out.push_str(&one_line);
        out.push('\n');
        return;
    }
    let _ = writeln!(out, "{indent}{head} [");
    for (i, pair) in pairs.iter().enumerate() {
        let separator = if i + 1 < pairs.len() { "," } else { "" };
        let _ = writeln!(out, "{indent}    {pair}{separator}");
    }
    let _ = writeln!(out, "{indent}]");
}

/// An id or key: bare when it is a plain identifier and not a keyword, else quoted.
pub fn id(text: &str) -> Cow<'_, str> {
    if crate::graph::is_plain_identifier(text) && !KEYWORDS.iter().any(|k| k.eq_ignore_ascii_case(text)) {
        Cow::Borrowed(text)
    } else {
        Cow::Owned(quote(text))
    }
}

pub use crate::dot_string::quote;

#[cfg(test)]
mod tests {
    use super::*;
    use crate::outcome::StageStatus;
    use crate::run_status::RunStatus;
    use crate::source::SourceFile;
    use crate::Loader;
    use std::collections::BTreeMap;

    fn load(text: &str) -> Workflow {
        Loader::new().load_source(SourceFile::new("w.dot", text)).unwrap().workflow
    }

    fn reload(text: &str) -> crate::CheckedWorkflow {
        Loader::new().load_source(SourceFile::new("again.dot", text)).unwrap()
    }

    #[test]
    fn quoting_escapes_quotes_backslashes_and_newlines() {
        assert_eq!(quote("plain"), r#""plain""#);
        assert_eq!(quote("say \"hi\"\\n\nnext"), r#""say \"hi\"\\n\nnext""#);
        assert_eq!(id("plan"), "plan");
        assert_eq!(id("human.default_choice"), r#""human.default_choice""#);
        assert_eq!(id("my-node"), r#""my-node""#);
        assert_eq!(id("Node"), r#""Node""#);
        assert_eq!(id("1a"), r#""1a""#);
    }

    #[test]
    fn writes_every_node_and_edge_in_order_with_quoted_values() {
        let workflow = load(
            r#"digraph w {
                goal = "ship it"
                rankdir = TB
                start [shape=Mdiamond]
                exit [shape=Msquare]
                ask [shape=hexagon, label="Ask \"them\"", human.default_choice="[A] Yes", timeout=90s]
                start -> ask
                ask -> exit [label="[A] Yes"]
                ask -> exit [label="[N] No", weight=2]
            }"#,
        );
        let options = DotOptions { direction: Some(Direction::LeftRight), overlay: None };
        let expected = r#"digraph w {
    goal="ship it"
    rankdir="LR"

    start [shape="Mdiamond"]
    exit [shape="Msquare"]
    ask [shape="hexagon", label="Ask \"them\"", "human.default_choice"="[A] Yes", timeout="90s"]

    start -> ask
    ask -> exit [label="[A] Yes"]
    ask -> exit [label="[N] No", weight="2"]
}
"#;
        let written = write(&workflow, &options);
        assert_eq!(written, expected);
        let again = reload(&written);
        assert!(!again.has_errors(), "{:?}", again.diagnostics);
        assert_eq!(write(&again.workflow, &options), expected);
    }

    #[test]
    fn inherited_attributes_are_written_out_but_never_change_a_handler() {
        let workflow = load(
            r#"digraph w {
                node [shape=box, llm_model="m"]
                subgraph cluster_a { label="Loop A"; start; work [prompt="p"] }
                exit [shape=Msquare]
                start -> work -> exit
            }"#,
        );
        let written = write(&workflow, &DotOptions::default());
        assert!(written.contains("    start [llm_model=\"m\", class=\"loop-a\"]\n"), "{written}");
        assert!(written.contains("work [shape=\"box\", llm_model=\"m\", prompt=\"p\", class=\"loop-a\"]"));
        let again = reload(&written);
        assert!(!again.has_errors(), "{:?}", again.diagnostics);
        let start = again.workflow.node("start").unwrap();
        assert_eq!(start.handler_type(), HandlerType::Start);
        assert_eq!(start.classes, ["loop-a"]);
    }

    #[test]
    fn file_attributes_and_links_other_than_http_are_never_written() {
        let workflow = load(
            r#"digraph w {
                imagepath = "/etc"
                start [shape=Mdiamond, URL="javascript:alert(1)", image="/dev/zero"]
                exit [shape=Msquare, href="https://example.com/ok", tooltip="t"]
                start -> exit [labelURL="JaVaScRiPt:x", edgehref="http://example.com/e", headURL=" javascript:y"]
            }"#,
        );
        let written = write(&workflow, &DotOptions::default());
        for gone in ["javascript", "JaVaScRiPt", "image", "/dev/zero", "imagepath", "/etc"] {
            assert!(!written.contains(gone), "{gone} in\n{written}");
        }
        assert!(
            written.contains(r#"exit [shape="Msquare", href="https://example.com/ok", tooltip="t"]"#),
            "{written}"
        );
        assert!(written.contains(r#"start -> exit [edgehref="http://example.com/e"]"#), "{written}");
        assert!(written.starts_with("digraph w {\n    start [shape=\"Mdiamond\"]\n"), "{written}");
    }

    #[test]
    fn long_attribute_lists_go_one_per_line() {
        let prompt = "word ".repeat(30);
        let workflow = load(&format!(
            "digraph w {{ start [shape=Mdiamond]; exit [shape=Msquare]; a [label=\"A\", prompt=\"{prompt}\"]; start -> a -> exit }}"
        ));
        let written = write(&workflow, &DotOptions::default());
        assert!(
            written.contains(&format!("    a [\n        label=\"A\",\n        prompt=\"{prompt}\"\n    ]\n"))
        );
        assert!(!reload(&written).has_errors());
    }

    #[test]
    fn the_overlay_colors_nodes_and_taken_edges_without_changing_the_graph() {
        let workflow = load(
            r#"digraph w {
                start [shape=Mdiamond]; exit [shape=Msquare]
                a [prompt="p", style=rounded]; b [prompt="p"]; c [prompt="p"]
                start -> a
                a -> b [condition="outcome=fail", label="broke"]
                a -> b
                b -> a
                a -> exit
                c -> exit
            }"#,
        );
        let mut overlay = Overlay {
            status: RunStatus::Paused,
            next_node: Some("exit".into()),
            outcomes: BTreeMap::from([
                ("start".into(), StageStatus::Success),
                ("a".into(), StageStatus::PartialSuccess),
                ("b".into(), StageStatus::Fail),
            ]),
            visits: BTreeMap::from([("start".into(), 1), ("a".into(), 3), ("b".into(), 2)]),
            edges: BTreeMap::new(),
        };
        overlay.read_events(
            &[
                r#"{"event":"edge.selected","from":"start","to":"a","reason":"weight"}"#,
                r#"{"event":"edge.selected","from":"a","to":"b","reason":"condition"}"#,
                r#"{"event":"edge.selected","from":"b","to":"a","reason":"weight"}"#,
                r#"{"event":"edge.selected","from":"a","to":"b","reason":"condition"}"#,
                r#"{"event":"edge.selected","from":"b","to":"a","reason":"weight"}"#,
                r#"{"event":"edge.selected","from":"a","to":"exit","reason":"weight"}"#,
            ]
            .join("\n"),
        );
        let written = write(&workflow, &DotOptions { direction: None, overlay: Some(overlay) });
        let expected_lines = [
            r##"    start [shape="Mdiamond", style="filled", fillcolor="#c8e6c9"]"##,
            r##"    exit [shape="Msquare", style="filled", fillcolor="#fff59d"]"##,
            r##"    a [prompt="p", style="rounded,filled", fillcolor="#c8e6c9", label="a (×3)"]"##,
            r##"    b [prompt="p", style="filled", fillcolor="#ffcdd2", label="b (×2)"]"##,
            r##"    c [prompt="p", style="filled", fillcolor="#eeeeee", fontcolor="#9e9e9e", color="#9e9e9e"]"##,
            r##"    start -> a [penwidth="2.5", color="#2e7d32"]"##,
            r##"    a -> b [condition="outcome=fail", label="broke ×2", penwidth="2.5", color="#2e7d32"]"##,
            "    a -> b\n",
            r##"    b -> a [penwidth="2.5", color="#2e7d32", label="×2"]"##,
            r##"    a -> exit [penwidth="2.5", color="#2e7d32"]"##,
            "    c -> exit\n",
        ];
        for line in expected_lines {
            assert!(written.contains(line), "missing {line}\n{written}");
        }
        let again = reload(&written);
        assert_eq!(again.workflow.node_count(), 5);
        assert_eq!(again.workflow.edge_count(), 6);
    }
}
