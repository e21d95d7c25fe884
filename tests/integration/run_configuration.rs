//! Run configurations and settings layers (issue 35, item 7) through the binary: `fabro run
//! run.toml`, the user, project, workflow and run-configuration layers with their precedence,
//! `fabro settings` saying where each value came from, and misspelled keys refused at their line.

use crate::common;

use common::llm_server::{openai_text, LlmServer};
use common::Test;
use serde_json::Value;

/// A workflow whose command stage writes what the run was given.
const REPORT: &str = r#"digraph report {
    graph [goal="Fix {{ inputs.ticket }}"]
    start [shape=Mdiamond]
    exit [shape=Msquare]
    report [shape=parallelogram, script="printf '%s %s' \"$FABRO_INPUT_TICKET\" \"$FABRO_INPUT_EXTRA\" > report.txt"]
    start -> report -> exit
}"#;

fn manifest(dir: &std::path::Path) -> Value {
    serde_json::from_str(&std::fs::read_to_string(dir.join("run/manifest.json")).unwrap()).unwrap()
}

#[test]
fn a_run_configuration_starts_its_workflow_with_its_inputs_labels_goal_and_working_dir() {
    let ran = Test::new()
        .file("flows/report.dot", REPORT)
        .file("flows/goal.md", "Ship the fix for the ticket.\n")
        .file("work/.keep", "")
        .file(
            "flows/run.toml",
            "_version = 1\n\n[workflow]\ngraph = \"report.dot\"\n\n[run]\ngoal_file = \"goal.md\"\n\
             working_dir = \"../work\"\n\n[run.inputs]\nticket = \"PAY-12\"\nextra = \"from-config\"\n\n\
             [run.labels]\nteam = \"payments\"\n",
        )
        .args([
            "run",
            "flows/run.toml",
            "--run-dir",
            "run",
            "-q",
            "--input",
            "extra=from-flag",
            "--label",
            "env=ci",
        ])
        .status(0)
        .run();
    let dir = ran.dir.path();
    // Paths in the file are relative to it; a flag wins over the file key by key.
    assert_eq!(std::fs::read_to_string(dir.join("work/report.txt")).unwrap(), "PAY-12 from-flag");
    let manifest = manifest(dir);
    assert_eq!(manifest["goal"], "Ship the fix for the ticket.");
    assert_eq!(manifest["labels"], serde_json::json!({"team": "payments", "env": "ci"}));
    assert_eq!(manifest["inputs"], serde_json::json!({"ticket": "PAY-12", "extra": "from-flag"}));
    assert_eq!(manifest["work_dir"], dir.join("work").display().to_string());
    assert_eq!(manifest["launch"]["run_config"], dir.join("flows/run.toml").display().to_string());

    // `--inputs FILE` replaces the configuration's inputs whole: `ticket` is then undefined.
    let again = Test::new()
        .file("flows/report.dot", REPORT)
        .file("flows/run.toml", "[workflow]\ngraph = \"report.dot\"\n[run.inputs]\nticket = \"PAY-12\"\n")
        .file("other.toml", "extra = 1\n")
        .args(["run", "flows/run.toml", "--inputs", "other.toml", "--simulate"])
        .status(2)
        .run();
    assert!(again.stderr().contains("inputs.ticket"), "{}", again.stderr());
    // `fabro validate` takes the run configuration too, with its inputs.
    Test::new()
        .file("flows/report.dot", REPORT)
        .file(
            "flows/run.toml",
            "[workflow]\ngraph = \"report.dot\"\n[run.inputs]\nticket = \"PAY-12\"\nextra = 2\n",
        )
        .args(["validate", "flows/run.toml"])
        .status(0)
        .stdout_contains("report.dot: valid")
        .run();
}

#[test]
fn layers_merge_lowest_first_and_fabro_settings_says_where_each_value_came_from() {
    let test = Test::new()
        .file("flows/report.dot", REPORT)
        .file(
            ".no-fabro-config/fabro/config.toml",
            "default_model = \"user-model\"\nsandbox = \"none\"\n\n[run.labels]\nowner = \"ada\"\nteam = \"user\"\n",
        )
        .file(".fabro/project.toml", "[run.model]\nname = \"project-model\"\n\n[run.labels]\nteam = \"payments\"\n")
        .file("flows/workflow.toml", "[run.limits]\nmax_cost = 2.5\n")
        .file("flows/run.toml", "[workflow]\ngraph = \"report.dot\"\n\n[run.model]\nprovider = \"openai_compatible\"\n")
        .env("FABRO_LLM_PROVIDER", "anthropic");
    let dir = test.path("");
    let ran = test.args(["settings", "flows/run.toml", "--json"]).status(0).run();
    let json = ran.json();
    let setting = |key: &str| {
        json["settings"]
            .as_array()
            .unwrap()
            .iter()
            .find(|entry| entry["key"] == key)
            .cloned()
            .unwrap_or_default()
    };
    let model = setting("run.model.name");
    assert_eq!(model["value"], "project-model");
    assert_eq!(model["origin"]["layer"], "project");
    assert_eq!(model["origin"]["line"], 2);
    assert_eq!(model["origin"]["source"], dir.join(".fabro/project.toml").display().to_string());
    assert_eq!(setting("run.labels.team")["origin"]["layer"], "project");
    assert_eq!(setting("run.labels.owner")["origin"]["key"], "run.labels.owner");
    assert_eq!(setting("run.sandbox.provider")["origin"]["key"], "sandbox");
    assert_eq!(setting("run.limits.max_cost")["value"], 2.5);
    // The environment is over every file.
    assert_eq!(setting("run.model.provider")["value"], "anthropic");
    assert_eq!(setting("run.model.provider")["origin"]["source"], "FABRO_LLM_PROVIDER");
    let layers: Vec<&str> =
        json["files"].as_array().unwrap().iter().map(|file| file["layer"].as_str().unwrap()).collect();
    assert_eq!(layers, ["user", "project", "workflow", "workflow", "run_config"]);

    let text = Test::new()
        .file(".fabro/project.toml", "[run.model]\nname = \"project-model\"\n")
        .args(["settings"])
        .status(0)
        .run()
        .stdout();
    assert!(text.contains("run.model.name = \"project-model\"  # project "), "{text}");
    assert!(text.contains(".fabro/project.toml:2"), "{text}");
}

#[test]
fn the_project_s_default_model_reaches_the_wire_below_the_node_s_and_the_flag_s() {
    const ASK: &str = r#"digraph ask {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        plain [shape=tab, prompt="Say hi"]
        pinned [shape=tab, prompt="Say hi", llm_model="node-model"]
        start -> plain -> pinned -> exit
    }"#;
    let server = LlmServer::start((0..4).map(|_| openai_text("hi", 10, 2)).collect(), Vec::new());
    let run = |extra: &[&str]| {
        Test::new()
            .workflow(ASK)
            .file(".fabro/project.toml", "[run.model]\nname = \"project-model\"\n")
            .env("FABRO_LLM_BASE_URL", &server.url("/v1"))
            .env("FABRO_LLM_MAX_RETRIES", "0")
            .args(["run", "workflow.dot", "-q"])
            .args(extra)
            .status(0)
            .run()
    };
    run(&[]);
    run(&["--model", "flag-model"]);
    let models: Vec<String> = server
        .requests()
        .iter()
        .map(|request| request.json()["model"].as_str().unwrap_or("").to_string())
        .collect();
    assert_eq!(models, ["project-model", "node-model", "flag-model", "flag-model"]);
}

#[test]
fn a_misspelled_key_in_any_layer_stops_the_run_at_its_line_with_the_nearest_key() {
    for (file, text, expected) in [
        (
            ".fabro/project.toml",
            "_version = 1\n[run.modle]\nname = \"m\"\n",
            ".fabro/project.toml:2:6: unknown key `modle` (did you mean `model`?)",
        ),
        (
            "workflow.toml",
            "[run]\ngaol = \"x\"\n",
            "workflow.toml:2:1: unknown key `gaol` (did you mean `goal`?)",
        ),
        (
            ".no-fabro-config/fabro/config.toml",
            "[run.labels]\nteam = 3\n",
            "config.toml:2:8: invalid type: integer `3`, expected a string",
        ),
        (
            "workflow.toml",
            "[run.pull_request]\nenabled = true\n",
            "`pull_request` is a Fabro setting that fabro does not support",
        ),
    ] {
        let ran = Test::new()
            .workflow(REPORT)
            .file(file, text)
            .args(["run", "workflow.dot", "--simulate", "--input", "ticket=1"])
            .status(2)
            .run();
        assert!(ran.stderr().contains(expected), "{file}: {}", ran.stderr());
        assert!(ran.stderr().contains("the run did not start"), "{}", ran.stderr());
    }
}

#[test]
fn settings_reach_the_stages_hooks_limits_and_sandbox() {
    let workflow = r#"digraph limits {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        probe [shape=parallelogram, script="touch /usr/fabro-probe 2>/dev/null && echo escaped || echo confined"]
        loud [shape=parallelogram, script="head -c 5000 /dev/zero | tr '\\0' x"]
        start -> probe -> loud -> exit
    }"#;
    let hook = |name: &str| {
        format!("[[run.hooks]]\nname = \"{name}\"\nevent = \"run_start\"\ntype = \"command\"\ncommand = \"touch {name}.ran\"\n")
    };
    let ran = Test::new()
        .workflow(workflow)
        .file(".fabro/project.toml", &format!("{}[run.sandbox]\nprovider = \"bwrap\"\n", hook("project")))
        .file(
            "run.toml",
            &format!(
                "[workflow]\ngraph = \"workflow.dot\"\n[run.limits]\nmax_output = 1000\n{}",
                hook("run")
            ),
        )
        .args(["run", "run.toml", "--run-dir", "run", "-q"])
        .status(1)
        .run();
    let dir = ran.dir.path();
    assert!(dir.join("project.ran").exists() && dir.join("run.ran").exists(), "{}", ran.stderr());
    assert_eq!(
        std::fs::read_to_string(dir.join("run/stages/probe/1/stdout.log")).unwrap().trim(),
        "confined"
    );
    let status = std::fs::read_to_string(dir.join("run/stages/loud/1/status.json")).unwrap();
    assert!(status.contains("1000"), "the stage failed at the configured max_output: {status}");
}

#[test]
fn a_resume_keeps_the_settings_its_run_started_with() {
    let workflow = r#"digraph gate {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        ask [shape=hexagon, label="Ship?"]
        ship [shape=parallelogram, script="echo shipped"]
        start -> ask
        ask -> ship [label="Yes"]
        ship -> exit
    }"#;
    let test =
        Test::new().workflow(workflow).file(".fabro/project.toml", "[run.labels]\nteam = \"payments\"\n");
    let dir = test.path("");
    let ran = test.args(["run", "workflow.dot", "--run-dir", "run", "-q"]).status(3).run();
    // Written while the run waits (by a stage, say): a resume does not obey it, and says so.
    std::fs::write(
        dir.join("workflow.toml"),
        "[[run.hooks]]\nevent = \"stage_start\"\ntype = \"command\"\ncommand = \"touch planted\"\n",
    )
    .unwrap();
    let resumed = common::fabro_in(&dir, &["resume", "run", "--auto-approve", "-q"]);
    assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert!(!dir.join("planted").exists());
    let stderr = String::from_utf8_lossy(&resumed.stderr);
    assert!(stderr.contains("workflow.toml changed since the run started"), "{stderr}");
    assert_eq!(manifest(&dir)["labels"]["team"], "payments");
    drop(ran);
}

/// The ```toml blocks of a Markdown page, in order (an info string may go on: `toml file=NAME`).
fn toml_blocks(page: &str) -> Vec<String> {
    let text = std::fs::read_to_string(common::repo_root().join(page)).unwrap();
    text.split("```toml")
        .skip(1)
        .filter_map(|rest| rest.split_once('\n'))
        .filter_map(|(_, rest)| rest.split("```").next())
        .map(str::to_string)
        .collect()
}

#[test]
fn the_run_configurations_of_the_readme_and_the_docs_work_as_written() {
    let tutorial = std::fs::read_to_string(common::repo_root().join("workflows/tutorial.dot")).unwrap();
    let readme =
        toml_blocks("README.md").into_iter().find(|block| block.starts_with("# fix-ticket.toml")).unwrap();
    let ran = Test::new()
        .file("workflows/tutorial.dot", &tutorial)
        .file("fix-ticket.toml", &readme)
        .args(["run", "fix-ticket.toml", "--simulate", "--auto-approve", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let manifest = manifest(ran.dir.path());
    assert_eq!(manifest["goal"], "Fix PAY-12: the /health endpoint answers 500");
    assert_eq!(manifest["labels"]["team"], "payments");

    let documented = toml_blocks("docs/configuration.md");
    let full = documented.iter().find(|block| block.starts_with("# runs/fix-ticket.toml")).unwrap();
    let ran = Test::new()
        .file("runs/fix-ticket.toml", full)
        .args(["settings", "runs/fix-ticket.toml", "--json"])
        .status(0)
        .run();
    let json = ran.json();
    let keys: Vec<&str> =
        json["settings"].as_array().unwrap().iter().map(|s| s["key"].as_str().unwrap()).collect();
    for key in [
        "workflow.graph",
        "run.goal_file",
        "run.inputs.retries",
        "run.agent.mcps.files",
        "run.limits.max_output",
    ] {
        assert!(keys.contains(&key), "{key} not in {keys:?}");
    }
    assert_eq!(json["hooks"][0]["name"], "notify");
}
