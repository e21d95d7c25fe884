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

/// The attributes of the schema that no code outside the schema names: each is accepted by
/// `fabro validate` and then read by nothing. An attribute `default_X` is read where the graph
/// defaults of `X` are (`format!("default_{key}")`).
fn attributes_read_by_nothing(names: &[&str]) -> Vec<String> {
    let root = common::repo_root().join("src");
    let mut sources = Vec::new();
    let mut stack = vec![root.clone()];
    while let Some(dir) = stack.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                stack.push(path);
            } else if path.extension().is_some_and(|ext| ext == "rs") && !path.ends_with("graph/attribute.rs")
            {
                sources.push(std::fs::read_to_string(&path).unwrap());
            }
        }
    }
    let named = |name: &str| sources.iter().any(|text| text.contains(&format!("\"{name}\"")));
    let defaulted = |name: &str| {
        name.strip_prefix("default_").is_some_and(|own| {
            sources.iter().any(|text| {
                // A graph default `default_<name>` read beside its node attribute `<name>`.
                let reads_defaults = text.contains("format!(\"default_{key}\")")
                    || text.contains("strip_prefix(\"default_\")");
                reads_defaults && text.contains(&format!("\"{own}\""))
            })
        })
    };
    names.iter().filter(|name| !named(name) && !defaulted(name)).map(|name| name.to_string()).collect()
}

#[test]
fn every_attribute_of_the_schema_is_read_by_something() {
    let names: Vec<&str> = fabro::graph::attribute::ATTRIBUTES.iter().map(|spec| spec.name).collect();
    assert!(names.len() > 100, "{}", names.len());
    assert_eq!(attributes_read_by_nothing(&names), Vec::<String>::new());
    // The check finds an attribute nothing reads.
    assert_eq!(attributes_read_by_nothing(&["stall_timeout_never_read"]), ["stall_timeout_never_read"]);
}

#[test]
fn attributes_of_other_engines_that_fabro_lacks_are_named_as_unsupported() {
    let workflow = r#"digraph G {
        loop_restart_signature_limit = 3
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [shape=tab, prompt="Go", project_memory=true]
        start -> work -> exit
    }"#;
    Test::new()
        .workflow(workflow)
        .args(["validate", "workflow.dot"])
        .status(0)
        .stdout_contains("warning[unsupported_attribute]")
        .stdout_contains("warning[dialect_alias]")
        .stdout_contains("node work: `project_memory` is Fabro's")
        .run();
    Test::new().workflow(workflow).args(["validate", "workflow.dot", "--deny-warnings"]).status(2).run();
}

#[test]
fn random_selection_draws_by_weight_and_refuses_conditions() {
    let workflow = r#"digraph G {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        pick [shape=parallelogram, script="true", selection="random"]
        a [shape=parallelogram, script="echo a"]
        b [shape=parallelogram, script="echo b"]
        start -> pick
        pick -> a [weight=3]
        pick -> b [weight=1]
        a -> exit
        b -> exit
    }"#;
    let mut taken = std::collections::BTreeMap::new();
    for _ in 0..12 {
        let ran = Test::new()
            .workflow(workflow)
            .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
            .status(0)
            .run();
        let events = std::fs::read_to_string(ran.dir.path().join("run/events.jsonl")).unwrap();
        let chosen: Value = events
            .lines()
            .filter_map(|line| serde_json::from_str::<Value>(line).ok())
            .find(|event| event["event"] == "edge.selected" && event["from"] == "pick")
            .unwrap();
        assert_eq!(chosen["reason"], "random", "{chosen}");
        *taken.entry(chosen["to"].as_str().unwrap().to_string()).or_insert(0) += 1;
    }
    // Each run draws afresh (its own run id): over 12 runs both edges are very likely taken.
    assert!(taken.len() == 2 || taken.get("a").is_some_and(|n| *n >= 9), "{taken:?}");
    let conditional = workflow.replace("pick -> b [weight=1]", r#"pick -> b [condition="outcome=fail"]"#);
    Test::new()
        .workflow(&conditional)
        .args(["validate", "workflow.dot"])
        .status(2)
        .stdout_contains("error[random_selection]")
        .run();
}

#[test]
fn a_node_max_tokens_caps_each_call_of_that_stage_only() {
    use common::llm_server::{openai_text, LlmServer};
    let server = LlmServer::start(vec![openai_text("short", 5, 2), openai_text("long", 5, 2)], vec![]);
    let workflow = r#"digraph G {
        max_tokens = 100000
        start [shape=Mdiamond]
        exit [shape=Msquare]
        short [shape=tab, prompt="Go", llm_model="local-model", max_tokens=300]
        long [shape=tab, prompt="Go", llm_model="local-model"]
        start -> short -> long -> exit
    }"#;
    Test::new()
        .workflow(workflow)
        .env("FABRO_LLM_BASE_URL", &server.url("/v1"))
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let asked: Vec<u64> =
        server.requests().iter().map(|r| r.json()["max_tokens"].as_u64().unwrap()).collect();
    assert_eq!(asked, [300, 8192]);
}

#[test]
fn a_stylesheet_sets_backend_and_refuses_speed() {
    let workflow = r#"digraph G {
        model_stylesheet = ".agentic { backend: cli }"
        start [shape=Mdiamond]
        exit [shape=Msquare]
        work [shape=box, prompt="Go", class="agentic"]
        start -> work -> exit
    }"#;
    let ran = Test::new().workflow(workflow).args(["graph", "workflow.dot"]).status(0).run();
    assert!(ran.stdout().contains(r#"backend="cli""#), "{}", ran.stdout());
    Test::new()
        .workflow(&workflow.replace("backend: cli", "speed: fast"))
        .args(["validate", "workflow.dot"])
        .status(2)
        .stdout_contains("fabro does not support `speed` (Anthropic's fast output mode)")
        .run();
}

#[test]
fn a_manager_runs_a_child_workflow_written_inline() {
    let workflow = r#"digraph G {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        mgr [shape=house, "stack.child_dot_source"="digraph child { s [shape=Mdiamond]; e [shape=Msquare]; work [shape=parallelogram, script=\"echo child-ran > child.txt\"]; s -> work -> e }"]
        start -> mgr -> exit
    }"#;
    let ran = Test::new()
        .workflow(workflow)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    assert_eq!(std::fs::read_to_string(ran.dir.path().join("child.txt")).unwrap().trim(), "child-ran");
    // Errors in the inline child are reported with their place inside the text.
    let broken = workflow.replace("s -> work -> e }", r#"s -> work -> e [condition=\"outcome=\"] }"#);
    Test::new()
        .workflow(&broken)
        .args(["validate", "workflow.dot"])
        .status(2)
        .stdout_contains("child workflow workflow.dot[mgr.stack.child_dot_source]:1:")
        .run();
}

#[test]
fn a_goal_file_and_labels_go_into_the_manifest_and_runs_are_found_by_label() {
    let workflow = r#"digraph G {
        goal = "the workflow's own goal"
        start [shape=Mdiamond]
        exit [shape=Msquare]
        start -> exit
    }"#;
    let ran = Test::new()
        .workflow(workflow)
        .file("goal.md", "# Ship the CSV export\n\nStream it.\n")
        .args([
            "run",
            "workflow.dot",
            "--goal-file",
            "goal.md",
            "--label",
            "team=payments",
            "--label",
            "ticket=PAY-12",
            "-q",
        ])
        .status(0)
        .run();
    let fabro = |args: &[&str]| common::fabro_in(ran.dir.path(), args);
    let listed = fabro(&["runs", "--json", "--label", "team=payments"]);
    let runs: Value = serde_json::from_slice(&listed.stdout).unwrap();
    assert_eq!(runs.as_array().unwrap().len(), 1, "{runs}");
    assert_eq!(runs[0]["labels"]["ticket"], "PAY-12");
    let manifest: Value = serde_json::from_str(
        &std::fs::read_to_string(
            ran.dir.path().join(runs[0]["run_dir"].as_str().unwrap()).join("manifest.json"),
        )
        .unwrap(),
    )
    .unwrap();
    assert_eq!(manifest["goal"], "# Ship the CSV export\n\nStream it.");
    let none: Value =
        serde_json::from_slice(&fabro(&["runs", "--json", "--label", "team=search"]).stdout).unwrap();
    assert_eq!(none.as_array().unwrap().len(), 0);
    let bad = fabro(&["run", "workflow.dot", "--label", "no label"]);
    assert_eq!(bad.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&bad.stderr).contains("--label: `no label` is not a label"), "{bad:?}");
    let missing = fabro(&["run", "workflow.dot", "--goal-file", "nope.md"]);
    assert_eq!(missing.status.code(), Some(2));
    assert!(
        String::from_utf8_lossy(&missing.stderr).contains("--goal-file: cannot read `nope.md`"),
        "{missing:?}"
    );
}

/// Project memory belongs to the project worked on (issue 35, item 9): the work directory's
/// repository, not the one the workflow file lives in.
#[test]
fn project_memory_is_kept_in_the_work_directorys_repository_not_the_workflows() {
    use common::llm_server::{openai_text, openai_tools, LlmServer};
    use serde_json::json;
    let root = tempfile::tempdir().unwrap();
    let (flows, project) = (root.path().join("flows"), root.path().join("project"));
    for repo in [&flows, &project] {
        std::fs::create_dir_all(repo.join("src")).unwrap();
        common::git(repo, &["init", "-q"]);
    }
    std::fs::write(
        flows.join("work.dot"),
        r#"digraph work {
            start [shape=Mdiamond]
            exit [shape=Msquare]
            work [prompt="Work", llm_model="local-model", memory=true]
            start -> work -> exit
        }"#,
    )
    .unwrap();
    let remember = |name: &str| {
        openai_tools(&[("c0", "remember", json!({"kind": "fact", "name": name, "text": "Postgres 16"}))])
    };
    let server = LlmServer::start(vec![remember("db"), openai_text("Done.", 10, 5)], Vec::new());
    let run = |workdir: &std::path::Path| {
        common::fabro_command(
            root.path(),
            &["run", "flows/work.dot", "--workdir", workdir.to_str().unwrap(), "-q"],
        )
        .env("FABRO_LLM_BASE_URL", server.url("/v1"))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .output()
        .unwrap()
    };
    let ran = run(&project.join("src"));
    assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    assert!(project.join(".fabro/memory").is_dir(), "the memory is the project's");
    assert!(!flows.join(".fabro").exists(), "nothing is written into the workflows' repository");
    let listed = common::fabro_in(&project.join("src"), &["memory", "list"]);
    assert!(String::from_utf8_lossy(&listed.stdout).contains("db"), "{listed:?}");

    // A store left where fabro kept it before (beside the workflow) is still read, with an event
    // that says how to move it, until the project has its own.
    let other = root.path().join("other");
    std::fs::create_dir_all(&other).unwrap();
    common::git(&other, &["init", "-q"]);
    std::fs::create_dir_all(flows.join(".fabro")).unwrap();
    std::fs::rename(project.join(".fabro/memory"), flows.join(".fabro/memory")).unwrap();
    let server2 = LlmServer::start(vec![openai_text("Recalled.", 10, 5)], Vec::new());
    let ran = common::fabro_command(
        root.path(),
        &["run", "flows/work.dot", "--workdir", "other", "--run-dir", "run-old", "-q"],
    )
    .env("FABRO_LLM_BASE_URL", server2.url("/v1"))
    .env("FABRO_LLM_MAX_RETRIES", "0")
    .output()
    .unwrap();
    assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    let system =
        server2.requests()[0].json()["messages"][0]["content"].as_str().unwrap_or_default().to_string();
    assert!(system.contains("Postgres 16"), "the old store was recalled: {system}");
    let events = std::fs::read_to_string(root.path().join("run-old/events.jsonl")).unwrap();
    let moved = events.lines().find(|line| line.contains("\"memory.old_store\"")).expect("memory.old_store");
    assert!(moved.contains("flows/.fabro/memory") && moved.contains("other/.fabro/memory"), "{moved}");
}

const TICKET: &str = r#"digraph G {
    goal = "Work on {{ inputs.ticket }} now"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    show [shape=parallelogram, script="echo {{ inputs.ticket }} $FABRO_INPUT_TICKET $FABRO_INPUT_RETRIES"]
    gate [shape=hexagon, label="Go on?"]
    ask [shape=tab, prompt="Fix {{ inputs.ticket }}"]
    urgent [shape=parallelogram, script="echo urgent"]
    start -> show -> gate
    gate -> ask [label="[Y] Yes"]
    ask -> urgent [condition="inputs.retries=2"]
    ask -> exit
    urgent -> exit
}"#;

#[test]
fn run_inputs_reach_the_goal_prompts_scripts_and_conditions_and_survive_a_resume() {
    let ran = Test::new()
        .workflow(TICKET)
        .file("inputs.toml", "ticket = \"PAY-1\"\nretries = 2\n")
        .args([
            "run",
            "workflow.dot",
            "--run-dir",
            "run",
            "--simulate",
            "--inputs",
            "inputs.toml",
            "--input",
            "ticket=PAY-12",
        ])
        .status(3)
        .run();
    let read = |path: &str| std::fs::read_to_string(ran.dir.path().join(path)).unwrap();
    // --input wins over the file; scripts read it rendered and as FABRO_INPUT_*.
    assert_eq!(read("run/stages/show/1/stdout.log").trim(), "PAY-12 PAY-12 2");
    let manifest: Value = serde_json::from_str(&read("run/manifest.json")).unwrap();
    assert_eq!(manifest["goal"], "Work on PAY-12 now");
    assert_eq!(manifest["inputs"], serde_json::json!({"ticket": "PAY-12", "retries": 2}));
    // The resume loads the workflow with the run's inputs again; the condition reads them.
    std::fs::write(ran.dir.path().join("answers.json"), r#"{"gate": ["Y"]}"#).unwrap();
    let resumed = common::fabro_in(ran.dir.path(), &["resume", "run", "--answers", "answers.json", "-q"]);
    assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert!(read("run/stages/ask/1/prompt.md").contains("Fix PAY-12"));
    assert!(ran.dir.path().join("run/stages/urgent").exists(), "inputs.retries=2 took the urgent edge");
}

#[test]
fn an_input_nothing_defines_is_an_error_where_it_is_read() {
    Test::new()
        .workflow(TICKET)
        .args(["validate", "workflow.dot", "--input", "tikcet=PAY-12"])
        .status(2)
        .stdout_contains("error[undefined_input] workflow.dot:2:21: `goal` reads `{{ inputs.ticket }}`, but the run has no input `ticket` (did you mean `tikcet`?)")
        .run();
    Test::new()
        .workflow(TICKET)
        .args(["run", "workflow.dot", "--simulate"])
        .status(2)
        .stdout_lacks("Work on  now")
        .run();
    Test::new()
        .workflow(TICKET)
        .args(["validate", "workflow.dot", "--input", "ticket=PAY-12", "--input", "retries=2"])
        .status(0)
        .run();
    Test::new()
        .workflow(TICKET)
        .args(["run", "workflow.dot", "--input", "no-dash=1"])
        .status(2)
        .stderr_contains("`no-dash` is not an input name")
        .run();
}

/// A manager stage running `child.dot`.
const MANAGER_OF_CHILD_DOT: &str = r#"digraph G {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    mgr [shape=house, stack.child_workflow="child.dot"]
    start -> mgr -> exit
}"#;

#[test]
fn a_child_workflow_reads_its_parents_inputs() {
    let ran = Test::new()
        .workflow(MANAGER_OF_CHILD_DOT)
        .file(
            "child.dot",
            r#"digraph child {
                s [shape=Mdiamond]
                e [shape=Msquare]
                work [shape=parallelogram, script="echo {{ inputs.ticket }} $FABRO_INPUT_TICKET > child.txt"]
                s -> work -> e
            }"#,
        )
        .args(["run", "workflow.dot", "--run-dir", "run", "-q", "--input", "ticket=PAY-12"])
        .status(0)
        .run();
    assert_eq!(std::fs::read_to_string(ran.dir.path().join("child.txt")).unwrap().trim(), "PAY-12 PAY-12");
    Test::new()
        .workflow(MANAGER_OF_CHILD_DOT)
        .file("child.dot", "digraph child { s [shape=Mdiamond]; e [shape=Msquare]; w [shape=parallelogram, script=\"echo {{ inputs.nope }}\"]; s -> w -> e }")
        .args(["validate", "workflow.dot"])
        .status(2)
        .stdout_contains("child workflow")
        .stdout_contains("no input `nope`")
        .run();
}
