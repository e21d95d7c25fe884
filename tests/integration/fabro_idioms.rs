//! Workflows written as Fabro's documentation writes them do what their authors meant (issue 35):
//! each idiom through the binary, in fixtures written here.

use crate::common;

use common::{Ran, Test};
use serde_json::Value;

fn checkpoint_context(ran: &Ran) -> Value {
    let text = std::fs::read_to_string(ran.dir.path().join("run/checkpoint.json")).unwrap();
    serde_json::from_str::<Value>(&text).unwrap()["context"].clone()
}

fn stage_dirs(ran: &Ran) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(ran.dir.path().join("run/stages"))
        .unwrap()
        .map(|entry| entry.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

#[test]
fn space_separated_classes_each_match_their_stylesheet_rule() {
    let workflow = r#"digraph G {
        model_stylesheet = ".fast { llm_model: model-fast } .careful { reasoning_effort: high }"
        start [shape=Mdiamond]
        exit [shape=Msquare]
        both [shape=tab, prompt="Go", class="fast careful"]
        commas [shape=tab, prompt="Go", class="careful, fast"]
        start -> both -> commas -> exit
    }"#;
    // `fabro graph` prints the workflow with what the stylesheet resolved for each node.
    let ran = Test::new().workflow(workflow).args(["graph", "workflow.dot"]).status(0).run();
    let resolved = ran.stdout();
    for node in ["both", "commas"] {
        let block = resolved.split(&format!("    {node} [")).nth(1).unwrap_or_default();
        let block = &block[..block.find(']').unwrap_or(block.len())];
        assert!(
            block.contains(r#"llm_model="model-fast""#) && block.contains(r#"reasoning_effort="high""#),
            "{node}:\n{resolved}"
        );
    }
    Test::new()
        .workflow(workflow)
        .args(["validate", "workflow.dot"])
        .status(0)
        .stdout_contains("valid (0 warnings)")
        .run();
}

#[test]
fn a_command_stage_runs_its_script_in_the_language_it_names() {
    let workflow = r#"digraph G {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        py [shape=parallelogram, language="python", script="import json, os\nprint(json.dumps({'ok': os.environ['FABRO_NODE_ID']}))"]
        js [shape=parallelogram, language="node", script="console.log(JSON.stringify({sum: 1 + 2}))"]
        sh [shape=parallelogram, language="bash", script="arr=(a b c); echo ${#arr[@]}"]
        start -> py -> js -> sh -> exit
    }"#;
    let ran = Test::new()
        .workflow(workflow)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let context = checkpoint_context(&ran);
    assert_eq!(context["command.output"], "3\n", "{context}");
    let read = |node: &str| {
        std::fs::read_to_string(ran.dir.path().join(format!("run/stages/{node}/1/stdout.log"))).unwrap()
    };
    assert_eq!(read("py").trim(), r#"{"ok": "py"}"#);
    assert_eq!(read("js").trim(), r#"{"sum":3}"#);
    // A language fabro cannot run is an error before the run, naming those it can.
    Test::new()
        .workflow(&workflow.replace(r#"language="bash""#, r#"language="ruby""#))
        .args(["validate", "workflow.dot"])
        .status(2)
        .stdout_contains("`language` is `ruby`, expected one of shell, sh, bash, python, node")
        .run();
}

const FREEFORM: &str = r#"digraph G {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    gate [shape=hexagon, label="Ship it?"]
    revise [shape=parallelogram, script="echo revising"]
    start -> gate
    gate -> exit [label="[Y] Yes"]
    gate -> revise [freeform=true]
    revise -> exit
}"#;

#[test]
fn free_text_at_a_gate_takes_its_freeform_edge_and_a_choice_still_takes_its_own() {
    let ran = Test::new()
        .workflow(FREEFORM)
        .file("answers.json", r#"{"gate": ["please add tests first"]}"#)
        .args(["run", "workflow.dot", "--run-dir", "run", "--answers", "answers.json", "-q"])
        .status(0)
        .run();
    let context = checkpoint_context(&ran);
    assert_eq!(context["human.gate.selected"], "freeform", "{context}");
    assert_eq!(context["human.gate.text"], "please add tests first");
    assert_eq!(context["human.gate.target"], "revise");
    assert_eq!(stage_dirs(&ran), ["gate", "revise"]);
    let chose = Test::new()
        .workflow(FREEFORM)
        .file("answers.json", r#"{"gate": ["Y"]}"#)
        .args(["run", "workflow.dot", "--run-dir", "run", "--answers", "answers.json", "-q"])
        .status(0)
        .run();
    assert_eq!(stage_dirs(&chose), ["gate"], "the fixed choice went to exit");
    // A gate whose only edge is freeform asks for text alone; the dry run takes that edge.
    let only_text = FREEFORM.replace("    gate -> exit [label=\"[Y] Yes\"]\n", "");
    let ran = Test::new()
        .workflow(&only_text)
        .file("answers.json", r#"{"gate": ["anything at all"]}"#)
        .args(["run", "workflow.dot", "--run-dir", "run", "--answers", "answers.json", "-q"])
        .status(0)
        .run();
    assert_eq!(checkpoint_context(&ran)["human.gate.text"], "anything at all");
}

#[test]
fn freeform_edges_that_cannot_work_are_reported() {
    let two = FREEFORM.replace(r#"gate -> exit [label="[Y] Yes"]"#, r#"gate -> exit [freeform=true]"#);
    Test::new()
        .workflow(&two)
        .args(["validate", "workflow.dot"])
        .status(2)
        .stdout_contains("error[freeform_edge]")
        .stdout_contains("human gate `gate` has more than one `freeform=true` edge")
        .run();
    let not_a_gate = FREEFORM.replace("revise -> exit", "revise -> exit [freeform=true]");
    Test::new()
        .workflow(&not_a_gate)
        .args(["validate", "workflow.dot"])
        .stdout_contains("warning[freeform_edge]")
        .stdout_contains("which is not a human gate")
        .run();
}
