//! Workflow imports: `import="other.dot"` replaces a node with that workflow's stages, ids
//! prefixed, wired between the node's incoming and outgoing edges; cycles and clashes are errors
//! that show the import chain.

use crate::common;

use common::Test;

const CHILD: &str = r#"digraph child {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    unit [shape=parallelogram, script="echo unit >> log"]
    lint [shape=parallelogram, script="echo lint >> log"]
    start -> unit -> lint -> exit
}
"#;

const PARENT: &str = r#"digraph parent {
    allow_lints="failure_path"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    plan [shape=parallelogram, script="echo plan >> log"]
    checks [import="parts/child.dot"]
    ship [shape=parallelogram, script="echo ship >> log"]
    fix [shape=parallelogram, script="echo fix >> log"]
    start -> plan -> checks
    checks -> ship
    checks -> fix [condition="outcome=fail"]
    ship -> exit
    fix -> exit
}
"#;

fn load(dir: &std::path::Path, file: &str) -> fabro::CheckedWorkflow {
    fabro::Loader::new().load_file(&dir.join(file)).expect("loads")
}

#[test]
fn an_import_is_replaced_by_the_imported_stages() {
    let ran = Test::new()
        .file("parts/child.dot", CHILD)
        .workflow(PARENT)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    assert_eq!(std::fs::read_to_string(ran.dir.path().join("log")).unwrap(), "plan\nunit\nlint\nship\n");

    let checked = load(ran.dir.path(), "workflow.dot");
    assert!(checked.diagnostics.is_empty(), "{:?}", checked.diagnostics);
    let workflow = &checked.workflow;
    let ids: Vec<&str> = workflow.nodes().map(|n| n.id.as_str()).collect();
    assert_eq!(ids, ["start", "exit", "plan", "checks_unit", "checks_lint", "ship", "fix"]);
    let edges: Vec<(String, String, Option<String>)> = workflow
        .edges()
        .map(|e| (e.from.id.clone(), e.to.id.clone(), e.edge.condition().map(|c| c.text().to_string())))
        .collect();
    assert!(edges.contains(&("plan".into(), "checks_unit".into(), None)), "{edges:?}");
    assert!(edges.contains(&("checks_unit".into(), "checks_lint".into(), None)), "{edges:?}");
    // The importing node's outgoing edges leave from the imported workflow's last stage.
    assert!(edges.contains(&("checks_lint".into(), "ship".into(), None)), "{edges:?}");
    assert!(edges.contains(&("checks_lint".into(), "fix".into(), Some("outcome=fail".into()))), "{edges:?}");
}

#[test]
fn imports_nest() {
    let middle = r#"digraph middle {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    inner [import="child.dot"]
    start -> inner -> exit
}
"#;
    let ran = Test::new()
        .file("parts/child.dot", CHILD)
        .file("parts/middle.dot", middle)
        .workflow(&PARENT.replace("parts/child.dot", "parts/middle.dot"))
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    assert_eq!(std::fs::read_to_string(ran.dir.path().join("log")).unwrap(), "plan\nunit\nlint\nship\n");
    let checked = load(ran.dir.path(), "workflow.dot");
    assert!(checked.workflow.node("checks_inner_unit").is_some());
}

#[test]
fn import_cycles_clashes_and_bad_files_are_errors() {
    let a = "digraph a { start [shape=Mdiamond]; exit [shape=Msquare]; x [import=\"b.dot\"]; start -> x -> exit }\n";
    let b = "digraph b { start [shape=Mdiamond]; exit [shape=Msquare]; y [import=\"a.dot\"]; start -> y -> exit }\n";
    let ran = Test::new().file("a.dot", a).file("b.dot", b).args(["validate", "a.dot"]).status(2).run();
    let out = ran.stdout();
    assert!(out.contains("error[import_cycle] a.dot:1:69 node x: in "), "{out}");
    assert!(
        out.contains("a.dot -> ")
            && out.contains("b.dot -> ")
            && out.contains("workflows import each other in a cycle"),
        "{out}"
    );

    let clashing = PARENT.replace(
        "fix [shape=parallelogram",
        "checks_unit [shape=parallelogram, script=\"true\"]\n    fix [shape=parallelogram",
    );
    let ran = Test::new()
        .file("parts/child.dot", CHILD)
        .workflow(&clashing)
        .args(["validate", "workflow.dot"])
        .status(2)
        .run();
    assert!(
        ran.stdout().contains("error[import_clash]")
            && ran.stdout().contains("creates node id `checks_unit`, which already exists"),
        "{}",
        ran.stdout()
    );

    let ran = Test::new().workflow(PARENT).args(["validate", "workflow.dot"]).status(2).run();
    assert!(
        ran.stdout().contains("error[import]") && ran.stdout().contains("cannot read imported workflow"),
        "{}",
        ran.stdout()
    );

    let headless = "digraph h { unit [shape=parallelogram, script=\"true\"] }\n";
    let ran = Test::new()
        .file("parts/child.dot", headless)
        .workflow(PARENT)
        .args(["validate", "workflow.dot"])
        .status(2)
        .run();
    assert!(ran.stdout().contains("must have exactly one start and one exit node"), "{}", ran.stdout());
}
