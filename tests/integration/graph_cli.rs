//! `fabro graph`: normalized DOT that fabro and Graphviz both read back, run overlays, and SVG/PNG
//! through Graphviz's `dot`.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::{fabro_bin, shipped_workflows, Test};
use fabro::graph::Workflow;
use fabro::Loader;

fn fabro(dir: &Path, args: &[&str]) -> Output {
    Command::new(fabro_bin()).args(args).current_dir(dir).env_remove("CI").output().expect("run fabro")
}

fn describe(output: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

/// Whether Graphviz's `dot` is on PATH.
fn dot_available() -> bool {
    Command::new("dot").arg("-V").output().is_ok_and(|output| output.status.success())
}

/// Runs `dot -Tsvg FILE` and asserts it accepts the file.
fn assert_graphviz_renders(path: &Path) {
    let output = Command::new("dot").arg("-Tsvg").arg(path).output().expect("run dot");
    assert!(output.status.success(), "dot -Tsvg {} failed:\n{}", path.display(), describe(&output));
    assert!(String::from_utf8_lossy(&output.stdout).contains("<svg"));
}

fn load(path: &Path) -> Workflow {
    let checked = Loader::new().load_file(path).expect("load");
    assert!(!checked.has_errors(), "{}: {:?}", path.display(), checked.diagnostics);
    checked.workflow
}

fn node_ids(workflow: &Workflow) -> Vec<String> {
    workflow.nodes().map(|node| node.id.clone()).collect()
}

fn edge_ends(workflow: &Workflow) -> Vec<(String, String)> {
    workflow.edges().map(|edge| (edge.from.id.clone(), edge.to.id.clone())).collect()
}

fn node_attr<'w>(workflow: &'w Workflow, id: &str, key: &str) -> Option<&'w str> {
    workflow.node(id).unwrap_or_else(|| panic!("no node {id}")).attributes.text(key)
}

#[test]
fn every_shipped_workflow_renders_and_reads_back_unchanged() {
    let workflows = shipped_workflows();
    assert!(!workflows.is_empty());
    let temp = tempfile::tempdir().unwrap();
    // The rendered files go into a copy of `workflows/`, so the files they name (prompt files,
    // child workflows) resolve as they do for the originals.
    let shipped = common::repo_root().join("workflows");
    let copy = temp.path().join("workflows");
    copy_tree(&shipped, &copy);
    let graphviz = dot_available();
    if !graphviz {
        println!("note: Graphviz's `dot` is not on PATH; skipping the `dot -Tsvg` checks");
    }
    for path in workflows {
        let path_text = path.to_string_lossy().into_owned();
        let output = fabro(temp.path(), &["graph", &path_text]);
        assert_eq!(output.status.code(), Some(0), "fabro graph {path_text}\n{}", describe(&output));
        let relative = path.strip_prefix(&shipped).expect("a shipped workflow");
        let written = copy.join(relative).with_extension("rendered.dot");
        std::fs::write(&written, &output.stdout).unwrap();

        let written_text = written.to_string_lossy().into_owned();
        let validated = fabro(temp.path(), &["validate", &written_text]);
        assert_eq!(
            validated.status.code(),
            Some(0),
            "fabro validate of {path_text}'s graph\n{}",
            describe(&validated)
        );

        let (original, again) = (load(&path), load(&written));
        assert_eq!(node_ids(&again), node_ids(&original), "{path_text}");
        assert_eq!(again.edge_count(), original.edge_count(), "{path_text}");
        assert_eq!(edge_ends(&again), edge_ends(&original), "{path_text}");

        let twice = fabro(temp.path(), &["graph", &written_text]);
        assert_eq!(twice.stdout, output.stdout, "{path_text}: normalizing twice changes the output");

        if graphviz {
            assert_graphviz_renders(&written);
        }
    }
}

/// Copies the files under `from` to `to`, directories included.
fn copy_tree(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.path().is_dir() {
            copy_tree(&entry.path(), &target);
        } else {
            std::fs::copy(entry.path(), &target).unwrap();
        }
    }
}

const GOLDEN_SOURCE: &str = r#"// comment
digraph golden {
    goal = "Ship \"it\""
    rankdir = TB
    node [timeout=90s]

    start [shape=Mdiamond]
    exit  [shape=Msquare]
    subgraph cluster_checks {
        label = "Checks"
        test [shape=parallelogram, script="cargo test\necho done"]
    }
    review [shape=hexagon, label="Review", human.default_choice="[A] Approve"]

    start -> test -> review
    review -> exit [label="[A] Approve"]
    review -> test [label="[R] Retry", weight=2]
}
"#;

const GOLDEN_DOT: &str = r#"digraph golden {
    goal="Ship \"it\""
    rankdir="LR"

    start [timeout="90s", shape="Mdiamond"]
    exit [timeout="90s", shape="Msquare"]
    test [timeout="90s", shape="parallelogram", script="cargo test\necho done", class="checks"]
    review [timeout="90s", shape="hexagon", label="Review", "human.default_choice"="[A] Approve"]

    start -> test
    test -> review
    review -> exit [label="[A] Approve"]
    review -> test [label="[R] Retry", weight="2"]
}
"#;

#[test]
fn golden_normalized_dot() {
    let ran = Test::new()
        .workflow(GOLDEN_SOURCE)
        .args(["graph", "workflow.dot", "--direction", "LR"])
        .status(0)
        .run();
    assert_eq!(ran.stdout(), GOLDEN_DOT);
    // Read back by fabro and written again: the same bytes.
    std::fs::write(ran.dir.path().join("again.dot"), GOLDEN_DOT).unwrap();
    let again = fabro(ran.dir.path(), &["graph", "again.dot", "--direction", "lr"]);
    assert_eq!(String::from_utf8_lossy(&again.stdout), GOLDEN_DOT, "{}", describe(&again));
    let validated = fabro(ran.dir.path(), &["validate", "again.dot"]);
    assert_eq!(validated.status.code(), Some(0), "{}", describe(&validated));
    if dot_available() {
        assert_graphviz_renders(&ran.dir.path().join("again.dot"));
    } else {
        println!("note: Graphviz's `dot` is not on PATH; skipping the `dot -Tsvg` check");
    }
}

#[test]
fn direction_defaults_to_the_file_and_accepts_all_four() {
    let ran = Test::new().workflow(GOLDEN_SOURCE).args(["graph", "workflow.dot"]).status(0).run();
    assert!(ran.stdout().contains("    rankdir=\"TB\"\n"), "{}", ran.stdout());
    for direction in ["TB", "BT", "RL", "lr"] {
        let ran = Test::new()
            .workflow(GOLDEN_SOURCE)
            .args(["graph", "workflow.dot", "--direction", direction])
            .status(0)
            .run();
        let expected = format!("    rankdir=\"{}\"\n", direction.to_ascii_uppercase());
        assert_eq!(ran.stdout().matches("rankdir").count(), 1);
        assert!(ran.stdout().contains(&expected), "{}", ran.stdout());
    }
    Test::new().workflow(GOLDEN_SOURCE).args(["graph", "workflow.dot", "--direction", "up"]).status(2).run();
}

const LOOP_WORKFLOW: &str = r#"digraph overlay {
    start [shape=Mdiamond]
    exit  [shape=Msquare]
    work  [label="Work", prompt="Do the work"]
    check [shape=parallelogram, script="exit 1"]
    fix   [label="Fix", prompt="Fix it"]
    gate  [shape=diamond]
    never [label="Never", prompt="Not reached"]

    start -> work -> check
    check -> gate [label="ok"]
    check -> fix  [label="failed", condition="outcome=fail"]
    fix -> gate
    gate -> work  [condition="context.internal.node_visit_count=1"]
    gate -> exit
    gate -> never [condition="outcome=retry"]
    never -> exit
}
"#;

const GREEN: &str = "#c8e6c9";
const RED: &str = "#ffcdd2";
const YELLOW: &str = "#fff59d";
const GREY: &str = "#eeeeee";
const TAKEN: &str = "#2e7d32";

/// Renders `fabro graph RUN_DIR` to a file and loads it back.
fn graph_of_run(dir: &Path, run_dir: &str) -> (String, Workflow) {
    let output = fabro(dir, &["graph", run_dir]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let text = String::from_utf8_lossy(&output.stdout).into_owned();
    let path = dir.join(format!("{run_dir}.graph.dot"));
    std::fs::write(&path, &text).unwrap();
    if dot_available() {
        assert_graphviz_renders(&path);
    }
    (text, load(&path))
}

#[test]
fn a_finished_run_colors_stages_and_the_edges_it_took() {
    let ran = Test::new()
        .workflow(LOOP_WORKFLOW)
        .args(["run", "workflow.dot", "--simulate", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let (text, graph) = graph_of_run(ran.dir.path(), "run");

    // Same structure as the workflow.
    let original = load(&ran.dir.path().join("workflow.dot"));
    assert_eq!(node_ids(&graph), node_ids(&original));
    assert_eq!(edge_ends(&graph), edge_ends(&original));

    for (id, fill) in [
        ("start", GREEN),
        ("work", GREEN),
        ("check", RED),
        ("fix", GREEN),
        ("gate", GREEN),
        ("exit", GREEN),
        ("never", GREY),
    ] {
        assert_eq!(node_attr(&graph, id, "fillcolor"), Some(fill), "{id}\n{text}");
        assert_eq!(node_attr(&graph, id, "style"), Some("filled"), "{id}");
    }
    assert_eq!(node_attr(&graph, "never", "fontcolor"), Some("#9e9e9e"));
    assert_eq!(node_attr(&graph, "work", "fontcolor"), None);

    // Visit counts on stages that ran more than once.
    assert_eq!(node_attr(&graph, "work", "label"), Some("Work (×2)"));
    assert_eq!(node_attr(&graph, "check", "label"), Some("check (×2)"));
    assert_eq!(node_attr(&graph, "fix", "label"), Some("Fix (×2)"));
    assert_eq!(node_attr(&graph, "gate", "label"), Some("gate (×2)"));
    assert_eq!(node_attr(&graph, "start", "label"), None);
    assert_eq!(node_attr(&graph, "never", "label"), Some("Never"));

    // (from, to, label, taken)
    let expected = [
        ("start", "work", None, true),
        ("work", "check", Some("×2"), true),
        ("check", "gate", Some("ok"), false),
        ("check", "fix", Some("failed ×2"), true),
        ("fix", "gate", Some("×2"), true),
        ("gate", "work", None, true),
        ("gate", "exit", None, true),
        ("gate", "never", None, false),
        ("never", "exit", None, false),
    ];
    let edges: Vec<_> = graph.edges().collect();
    assert_eq!(edges.len(), expected.len());
    for (edge, (from, to, label, taken)) in edges.iter().zip(expected) {
        assert_eq!((edge.from.id.as_str(), edge.to.id.as_str()), (from, to));
        let attributes = &edge.edge.attributes;
        assert_eq!(attributes.text("label"), label, "{from} -> {to}");
        if taken {
            assert_eq!(attributes.text("color"), Some(TAKEN), "{from} -> {to}");
            assert_eq!(attributes.text("penwidth"), Some("2.5"), "{from} -> {to}");
        } else {
            assert_eq!(attributes.text("color"), None, "{from} -> {to}");
            assert_eq!(attributes.text("penwidth"), None, "{from} -> {to}");
        }
    }
    assert!(text.contains(r##"    check -> fix [label="failed ×2", condition="outcome=fail", penwidth="2.5", color="#2e7d32"]"##), "{text}");
}

const GATE_WORKFLOW: &str = r#"digraph paused {
    start  [shape=Mdiamond]
    exit   [shape=Msquare]
    draft  [prompt="Write it"]
    review [shape=hexagon, label="Review"]
    ship   [prompt="Ship it"]

    start -> draft -> review
    review -> ship  [label="[A] Approve"]
    review -> draft [label="[R] Revise"]
    ship -> exit
}
"#;

#[test]
fn a_paused_run_shows_the_waiting_gate_in_yellow() {
    let ran = Test::new()
        .workflow(GATE_WORKFLOW)
        .args(["run", "workflow.dot", "--simulate", "--run-dir", "run", "-q"])
        .status(3)
        .run();
    let (text, graph) = graph_of_run(ran.dir.path(), "run");
    for (id, fill) in [("start", GREEN), ("draft", GREEN), ("review", YELLOW), ("ship", GREY), ("exit", GREY)]
    {
        assert_eq!(node_attr(&graph, id, "fillcolor"), Some(fill), "{id}\n{text}");
    }
    let taken: Vec<_> = graph
        .edges()
        .filter(|edge| edge.edge.attributes.text("color") == Some(TAKEN))
        .map(|edge| format!("{} -> {}", edge.from.id, edge.to.id))
        .collect();
    assert_eq!(taken, ["start -> draft", "draft -> review"]);
}

#[test]
fn a_run_directory_loads_prompt_files_from_the_original_location() {
    let ran = Test::new()
        .file("flows/prompts/p.md", "Prompt from a file")
        .file(
            "flows/w.dot",
            r#"digraph w { start [shape=Mdiamond]; exit [shape=Msquare]; a [prompt="@prompts/p.md"]; start -> a -> exit }"#,
        )
        .args(["run", "flows/w.dot", "--simulate", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let (_, graph) = graph_of_run(ran.dir.path(), "run");
    assert_eq!(node_attr(&graph, "a", "prompt"), Some("Prompt from a file"));
    assert_eq!(node_attr(&graph, "a", "fillcolor"), Some(GREEN));
}

#[test]
fn a_directory_that_is_not_a_run_is_refused() {
    let test = Test::new().file("empty/readme.txt", "nothing here");
    test.args(["graph", "empty"])
        .status(2)
        .stderr_contains("not a fabro run directory (no workflow.dot)")
        .run();
    Test::new()
        .file("half/workflow.dot", GATE_WORKFLOW)
        .args(["graph", "half"])
        .status(2)
        .stderr_contains("not a fabro run directory (no checkpoint.json)")
        .run();
    Test::new()
        .file("broken/workflow.dot", GATE_WORKFLOW)
        .file("broken/checkpoint.json", "{not json")
        .args(["graph", "broken"])
        .status(2)
        .stderr_contains("is corrupt")
        .run();
}

#[test]
fn invalid_workflows_are_reported_like_validate_and_warnings_still_render() {
    Test::new()
        .workflow("digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  start -> exit [condition=\"outcome = sucess\"]\n}\n")
        .args(["graph", "workflow.dot"])
        .status(2)
        .stderr_contains("error[condition_syntax] workflow.dot:4:")
        .stderr_contains("workflow.dot: invalid: 1 error")
        .stdout_lacks("digraph")
        .run();
    Test::new()
        .workflow("digraph w {\n  start -> \n}\n")
        .args(["graph", "workflow.dot"])
        .status(2)
        .stderr_contains("error[syntax] workflow.dot:3:1")
        .run();
    Test::new().args(["graph", "missing.dot"]).status(2).stderr_contains("cannot read `missing.dot`").run();
    // A misspelled attribute is an error; with only warnings (an unreachable stage) it renders.
    Test::new()
        .workflow("digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  a [prompt=\"p\", max_retires=2]\n  start -> a -> exit\n}\n")
        .args(["graph", "workflow.dot"])
        .status(2)
        .stderr_contains("error[unknown_attribute] workflow.dot:4:18 node a: unknown attribute `max_retires` (did you mean `max_retries`?)")
        .run();
    Test::new()
        .workflow("digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  a [prompt=\"p\"]\n  b [prompt=\"q\"]\n  start -> a -> exit\n}\n")
        .args(["graph", "workflow.dot"])
        .status(0)
        .stdout_contains(r#"b [prompt="q"]"#)
        .run();
}

#[test]
fn output_files_are_written_whole() {
    let ran = Test::new()
        .workflow(GOLDEN_SOURCE)
        .args(["graph", "workflow.dot", "--direction", "LR", "-o", "out.dot"])
        .status(0)
        .run();
    assert_eq!(ran.stdout(), "");
    assert_eq!(std::fs::read_to_string(ran.dir.path().join("out.dot")).unwrap(), GOLDEN_DOT);
    let leftovers: Vec<_> = std::fs::read_dir(ran.dir.path())
        .unwrap()
        .flatten()
        .filter(|entry| entry.file_name().to_string_lossy().ends_with(".tmp"))
        .collect();
    assert!(leftovers.is_empty());
}

#[test]
fn svg_and_png_come_from_graphviz() {
    if !dot_available() {
        println!("note: Graphviz's `dot` is not on PATH; skipping the svg/png checks");
        return;
    }
    let ran = Test::new()
        .workflow(GOLDEN_SOURCE)
        .args(["graph", "workflow.dot", "--format", "svg"])
        .status(0)
        .run();
    assert!(ran.stdout().contains("<svg"), "{}", ran.stdout());
    let ran = Test::new()
        .workflow(GOLDEN_SOURCE)
        .args(["graph", "workflow.dot", "--format", "svg", "-o", "graph.svg"])
        .status(0)
        .run();
    assert!(std::fs::read_to_string(ran.dir.path().join("graph.svg")).unwrap().contains("<svg"));
    let ran = Test::new()
        .workflow(GOLDEN_SOURCE)
        .args(["graph", "workflow.dot", "--format", "png"])
        .status(0)
        .run();
    assert!(ran.output.stdout.starts_with(b"\x89PNG\r\n\x1a\n"));
}

#[test]
fn attributes_naming_files_never_reach_graphviz_so_a_fifo_cannot_hang_it() {
    if !dot_available() {
        println!("note: Graphviz's `dot` is not on PATH; skipping the svg check");
        return;
    }
    let test = Test::new().workflow(
        "digraph w {\n  imagepath=\".\"\n  start [shape=Mdiamond]\n  exit [shape=Msquare, image=\"pipe\"]\n  work [shape=box, prompt=\"p\", shapefile=\"pipe\"]\n  start -> work -> exit\n}\n",
    );
    let dir = test.path("");
    let made = Command::new("mkfifo").arg(dir.join("pipe")).status().expect("mkfifo");
    assert!(made.success());
    let mut child =
        common::fabro_command(&dir, &["graph", "workflow.dot", "--format", "svg", "-o", "graph.svg"])
            .stderr(std::process::Stdio::piped())
            .spawn()
            .expect("start fabro graph");
    let started = std::time::Instant::now();
    let status = loop {
        if let Some(status) = child.try_wait().expect("wait") {
            break status;
        }
        if started.elapsed() > std::time::Duration::from_secs(20) {
            let _ = child.kill();
            let _ = child.wait();
            panic!("fabro graph --format svg still runs after 20 s: Graphviz waits on the FIFO");
        }
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    assert!(status.success(), "{status:?}");
    let svg = std::fs::read_to_string(dir.join("graph.svg")).unwrap();
    assert!(svg.contains("<svg") && !svg.contains("pipe"), "{svg}");
}

#[test]
fn svg_without_graphviz_names_the_package() {
    let temp = tempfile::tempdir().unwrap();
    std::fs::write(temp.path().join("workflow.dot"), GOLDEN_SOURCE).unwrap();
    let empty = temp.path().join("empty-path");
    std::fs::create_dir(&empty).unwrap();
    for format in ["svg", "png"] {
        let output = Command::new(fabro_bin())
            .args(["graph", "workflow.dot", "--format", format])
            .current_dir(temp.path())
            .env("PATH", &empty)
            .output()
            .expect("run fabro");
        assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(
            stderr.contains(
                "Graphviz's `dot` program is not installed: install it with `apt-get install graphviz` (Debian/Ubuntu) or `brew install graphviz` (macOS), or use --format dot"
            ),
            "{stderr}"
        );
        assert!(output.stdout.is_empty());
    }
    // DOT output needs no Graphviz.
    let output = Command::new(fabro_bin())
        .args(["graph", "workflow.dot"])
        .current_dir(temp.path())
        .env("PATH", &empty)
        .output()
        .expect("run fabro");
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
}

fn taken_edges(graph: &Workflow) -> Vec<String> {
    graph
        .edges()
        .filter(|edge| edge.edge.attributes.text("color") == Some(TAKEN))
        .map(|edge| {
            let label = edge.edge.attributes.text("label").map(|l| format!(" [{l}]")).unwrap_or_default();
            format!("{} -> {}{label}", edge.from.id, edge.to.id)
        })
        .collect()
}

#[test]
fn after_a_rewind_only_the_kept_history_is_drawn() {
    let ran = Test::new()
        .workflow(LOOP_WORKFLOW)
        .args(["run", "workflow.dot", "--simulate", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let output = fabro(ran.dir.path(), &["rewind", "run", "--to", "check@1"]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let (text, graph) = graph_of_run(ran.dir.path(), "run");
    // Kept: start -> work -> check (failed), and the edge chosen after it; nothing of the second loop.
    assert_eq!(taken_edges(&graph), ["start -> work", "work -> check", "check -> fix [failed]"], "{text}");
    assert_eq!(node_attr(&graph, "work", "label"), Some("Work"), "{text}");
}

#[test]
fn the_fan_out_edges_a_parallel_stage_took_are_drawn_as_taken() {
    let workflow = r#"digraph fan {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        fan [shape=component]
        a [shape=parallelogram, script="true"]
        b [shape=parallelogram, script="true"]
        join [shape=tripleoctagon]
        start -> fan
        fan -> a -> join
        fan -> b -> join
        join -> exit
    }"#;
    let ran = Test::new()
        .workflow(workflow)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let (text, graph) = graph_of_run(ran.dir.path(), "run");
    assert_eq!(
        taken_edges(&graph),
        ["start -> fan", "fan -> a", "a -> join", "fan -> b", "b -> join", "join -> exit"],
        "{text}"
    );
}
