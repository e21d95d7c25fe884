//! CI reports: `--junit FILE`, the Markdown summary appended to `$GITHUB_STEP_SUMMARY`, their
//! golden renderings through the library, and the GitHub Actions example.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::{fabro_bin, repo_root};
use fabro::outcome::StageStatus;
use fabro::run_dir::{RunResult, StageRecord};
use fabro::run_status::RunStatus;
use fabro::usage::Usage;

/// A passing command stage, a failing one routed by `outcome=fail` to an LLM stage, then exit.
const CI_DEMO: &str = r#"digraph ci_demo {
    start [shape=Mdiamond]
    exit  [shape=Msquare]
    build [shape=parallelogram, script="echo 'compiling <crate> & \"deps\"'; echo done"]
    test  [shape=parallelogram, script="echo 'running 3 tests'; echo 'test b ... FAILED'; exit 1"]
    explain [shape=tab, prompt="Explain the failure"]
    start -> build -> test
    test -> exit
    test -> explain [condition="outcome=fail"]
    explain -> exit
}
"#;

/// A command stage, then a human gate: without answers (and with `CI` set) the run pauses.
const GATED: &str = r#"digraph gated {
    start [shape=Mdiamond]
    exit  [shape=Msquare]
    build [shape=parallelogram, script="echo built"]
    approve [shape=hexagon, label="Ship it?"]
    start -> build -> approve
    approve -> exit  [label="[A] Approve"]
    approve -> build [label="[R] Rebuild"]
}
"#;

/// A temporary directory holding `workflow.dot`, in which `fabro` runs with a controlled
/// environment (no inherited `CI` or `GITHUB_STEP_SUMMARY`).
struct Sandbox {
    dir: tempfile::TempDir,
}

impl Sandbox {
    fn new(workflow: &str) -> Sandbox {
        let dir = tempfile::tempdir().expect("temp dir");
        std::fs::write(dir.path().join("workflow.dot"), workflow).expect("write workflow");
        Sandbox { dir }
    }

    /// The directory, canonical, so paths compare with what the binary sees as its cwd.
    fn path(&self) -> std::path::PathBuf {
        self.dir.path().canonicalize().expect("canonical temp dir")
    }

    fn run(&self, args: &[&str], env: &[(&str, &Path)]) -> Output {
        let mut command = Command::new(fabro_bin());
        command.args(args).current_dir(self.path()).env_remove("CI").env_remove("GITHUB_STEP_SUMMARY");
        for (key, value) in env {
            command.env(key, value);
        }
        command.output().expect("run fabro")
    }
}

fn describe(output: &Output) -> String {
    format!(
        "status {:?}\n--- stdout\n{}\n--- stderr\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn read(path: &Path) -> String {
    std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()))
}

/// Replaces every `time="..."` value with `T`, and the values of the given properties with their
/// names in capitals, so a live run's report can be compared with an exact string.
fn normalize(xml: &str) -> String {
    let times = regex::Regex::new(r#" time="[0-9]+\.[0-9]{3}""#).unwrap();
    let text = times.replace_all(xml, r#" time="T""#);
    let props = regex::Regex::new(r#"(<property name="fabro\.(run_id|run_dir)" value=")[^"]*""#).unwrap();
    props.replace_all(&text, r#"${1}X""#).into_owned()
}

fn number(node: roxmltree::Node, attribute: &str) -> f64 {
    let value =
        node.attribute(attribute).unwrap_or_else(|| panic!("<{}> lacks {attribute}", node.tag_name().name()));
    value.parse().unwrap_or_else(|_| panic!("{attribute}={value:?} is not a number"))
}

/// Checks the JUnit shape CI tools accept, and returns the testcases by name.
fn check_junit_shape(doc: &roxmltree::Document) -> Vec<(String, roxmltree::NodeId)> {
    let root = doc.root_element();
    assert_eq!(root.tag_name().name(), "testsuites");
    let suites: Vec<_> = root.children().filter(|n| n.is_element()).collect();
    assert_eq!(suites.len(), 1, "one testsuite");
    let suite = suites[0];
    assert_eq!(suite.tag_name().name(), "testsuite");
    let cases: Vec<_> = suite.children().filter(|n| n.has_tag_name("testcase")).collect();
    let failed = cases.iter().filter(|c| c.children().any(|n| n.has_tag_name("failure"))).count();
    let skipped = cases.iter().filter(|c| c.children().any(|n| n.has_tag_name("skipped"))).count();
    for node in [root, suite] {
        assert_eq!(number(node, "tests"), cases.len() as f64);
        assert_eq!(number(node, "failures"), failed as f64);
        assert_eq!(number(node, "errors"), 0.0);
        assert_eq!(number(node, "skipped"), skipped as f64);
        assert!(number(node, "time") >= 0.0);
    }
    let mut names = Vec::new();
    for case in &cases {
        assert!(case.attribute("classname").is_some_and(|c| !c.is_empty()), "testcase without classname");
        assert!(number(*case, "time") >= 0.0);
        let name = case.attribute("name").expect("testcase name").to_string();
        for failure in case.children().filter(|n| n.has_tag_name("failure")) {
            assert!(
                failure.attribute("message").is_some_and(|m| !m.is_empty()),
                "{name}: failure without message"
            );
        }
        names.push((name, case.id()));
    }
    names
}

fn system_out<'a>(doc: &'a roxmltree::Document, id: roxmltree::NodeId) -> Option<&'a str> {
    let case = doc.get_node(id)?;
    case.children().find(|n| n.has_tag_name("system-out")).map(|n| n.text().unwrap_or(""))
}

#[test]
fn junit_report_of_a_run_through_the_binary() {
    let sandbox = Sandbox::new(CI_DEMO);
    let output =
        sandbox.run(&["run", "workflow.dot", "--simulate", "--junit", "out.xml", "--run-dir", "run"], &[]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let xml = read(&sandbox.path().join("out.xml"));
    let doc = roxmltree::Document::parse(&xml).unwrap_or_else(|e| panic!("invalid XML ({e}):\n{xml}"));
    let cases = check_junit_shape(&doc);
    let names: Vec<&str> = cases.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        ["start (visit 1)", "build (visit 1)", "test (visit 1)", "explain (visit 1)", "exit (visit 1)"]
    );
    let id = |name: &str| cases.iter().find(|(n, _)| n == name).map(|(_, id)| *id).unwrap();
    assert_eq!(system_out(&doc, id("build (visit 1)")), Some("compiling <crate> & \"deps\"\ndone\n"));
    // The run exits 0: the test failure was handled by the workflow (routed to `explain`), so it is
    // no JUnit failure, and its output says what happened.
    let handled = doc.get_node(id("test (visit 1)")).unwrap();
    assert!(handled.children().all(|n| !n.has_tag_name("failure")), "{xml}");
    assert!(system_out(&doc, id("test (visit 1)")).is_some_and(|text| text.starts_with(
        "[fabro] this visit failed (command exited with code 1); the workflow handled the failure"
    )));
    assert!(system_out(&doc, id("explain (visit 1)")).is_some_and(|text| text.contains("[simulated]")));

    let expected = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="ci_demo" tests="5" failures="0" errors="0" skipped="0" time="T">
  <testsuite name="ci_demo" tests="5" failures="0" errors="0" skipped="0" time="T">
    <properties>
      <property name="fabro.status" value="succeeded"/>
      <property name="fabro.run_id" value="X"/>
      <property name="fabro.run_dir" value="X"/>
    </properties>
    <testcase classname="ci_demo" name="start (visit 1)" time="T"/>
    <testcase classname="ci_demo" name="build (visit 1)" time="T">
      <system-out>compiling &lt;crate&gt; &amp; &quot;deps&quot;
done
</system-out>
    </testcase>
    <testcase classname="ci_demo" name="test (visit 1)" time="T">
      <system-out>[fabro] this visit failed (command exited with code 1); the workflow handled the failure and went on
running 3 tests
test b ... FAILED
</system-out>
    </testcase>
    <testcase classname="ci_demo" name="explain (visit 1)" time="T">
      <system-out>[simulated] Stage `explain`, visit 1: the model would answer the prompt here.</system-out>
    </testcase>
    <testcase classname="ci_demo" name="exit (visit 1)" time="T"/>
  </testsuite>
</testsuites>
"#;
    assert_eq!(normalize(&xml), expected);
}

/// The fixed result of the golden tests: every status, a multi-line reason with markup, usage on
/// the LLM stage.
fn fixed_result() -> RunResult {
    let stage = |node_id: &str, status, duration_ms, handler: &str| StageRecord {
        node_id: node_id.to_string(),
        visit: 1,
        status,
        duration_ms,
        handler: Some(handler.into()),
        failure_reason: None,
        usage: None,
        branch: None,
        cost_usd: None,
        dir: None,
    };
    let mut test = stage("test", StageStatus::Fail, 2_345, "command");
    test.failure_reason = Some("command exited with code 101\nassert a < b & 'c'".to_string());
    let mut explain = stage("explain", StageStatus::Success, 61_500, "prompt");
    explain.usage = Some(Usage::new(1200, 345));
    explain.cost_usd = Some(0.0123);
    let mut explain_again = explain.clone();
    explain_again.visit = 2;
    explain_again.duration_ms = 900;
    explain_again.usage = Some(Usage::new(800, 55));
    explain_again.cost_usd = Some(0.0021);
    RunResult {
        run_id: "run-1".to_string(),
        status: RunStatus::Failed,
        failure_reason: Some("stage `report` failed: exit 1".to_string()),
        completed_nodes: vec![],
        duration_ms: 65_432,
        stages: vec![
            stage("start", StageStatus::Success, 0, "start"),
            stage("build", StageStatus::Success, 1_250, "command"),
            test,
            stage("lint", StageStatus::Skipped, 0, "command"),
            explain,
            explain_again,
        ],
        run_dir: ".fabro/runs/run-1".to_string(),
        usage: None,
        dry_run: None,
    }
}

/// Stage files for [`fixed_result`]: stdout of build and test (with a control character), the
/// response of the first explain visit.
fn fixed_run_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let write = |relative: &str, text: &str| {
        let path = dir.path().join(relative);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    };
    write("stages/build/1/stdout.log", "Compiling fabro v0.1.0\nFinished\n");
    write("stages/build/1/stderr.log", "warning: unused\n");
    write("stages/test/1/stdout.log", "running 2 tests\n\u{1b}[31mFAILED\u{1b}[0m a < b\n");
    write("stages/explain/1/response.md", "The test compares \"a\" & 'b'.");
    dir
}

#[test]
fn junit_golden() {
    let dir = fixed_run_dir();
    let xml = fabro::report::junit::render(&fixed_result(), dir.path(), "ci_pipeline");
    let expected = r#"<?xml version="1.0" encoding="UTF-8"?>
<testsuites name="ci_pipeline" tests="6" failures="1" errors="0" skipped="1" time="65.432">
  <testsuite name="ci_pipeline" tests="6" failures="1" errors="0" skipped="1" time="65.432">
    <properties>
      <property name="fabro.status" value="failed"/>
      <property name="fabro.failure_reason" value="stage `report` failed: exit 1"/>
      <property name="fabro.run_id" value="run-1"/>
      <property name="fabro.run_dir" value=".fabro/runs/run-1"/>
    </properties>
    <testcase classname="ci_pipeline" name="start (visit 1)" time="0.000"/>
    <testcase classname="ci_pipeline" name="build (visit 1)" time="1.250">
      <system-out>Compiling fabro v0.1.0
Finished
</system-out>
    </testcase>
    <testcase classname="ci_pipeline" name="test (visit 1)" time="2.345">
      <failure message="command exited with code 101&#10;assert a &lt; b &amp; &apos;c&apos;" type="command">command exited with code 101
assert a &lt; b &amp; &apos;c&apos;</failure>
      <system-out>running 2 tests
[31mFAILED[0m a &lt; b
</system-out>
    </testcase>
    <testcase classname="ci_pipeline" name="lint (visit 1)" time="0.000">
      <skipped/>
    </testcase>
    <testcase classname="ci_pipeline" name="explain (visit 1)" time="61.500">
      <system-out>The test compares &quot;a&quot; &amp; &apos;b&apos;.</system-out>
    </testcase>
    <testcase classname="ci_pipeline" name="explain (visit 2)" time="0.900"/>
  </testsuite>
</testsuites>
"#;
    assert_eq!(xml, expected);
    let doc = roxmltree::Document::parse(&xml).expect("valid XML");
    check_junit_shape(&doc);
}

#[test]
fn junit_system_out_is_the_last_4_kib_of_stdout() {
    let dir = tempfile::tempdir().expect("temp dir");
    let log = dir.path().join("stages/build/1/stdout.log");
    std::fs::create_dir_all(log.parent().unwrap()).unwrap();
    // 3000 three-byte characters, then a marker: the 4 KiB window starts inside a character.
    let text = format!("{}<end of log>\n", "€".repeat(3000));
    std::fs::write(&log, &text).unwrap();
    let mut result = fixed_result();
    result.stages.truncate(2);
    let xml = fabro::report::junit::render(&result, dir.path(), "w");
    let doc = roxmltree::Document::parse(&xml).expect("valid XML");
    let out = doc.descendants().find(|n| n.has_tag_name("system-out")).and_then(|n| n.text()).unwrap();
    assert!(out.ends_with("€<end of log>\n"), "{out}");
    assert!(out.len() <= 4096 && out.len() > 4090, "{} bytes", out.len());
    assert!(text.ends_with(out));
}

#[test]
fn step_summary_golden() {
    let markdown =
        fabro::report::github_step_summary::render(&fixed_result(), None, "ci_pipeline", ".fabro/runs/run-1");
    let expected = "## ❌ fabro run `ci_pipeline`: failed

**Reason:**

```text
stage `report` failed: exit 1
```

| stage | visit | handler | status | duration | tokens (in / out) |
|---|---:|---|---|---:|---:|
| `start` | 1 | start | ✅ success | 0.0s | - |
| `build` | 1 | command | ✅ success | 1.2s | - |
| `test` | 1 | command | ❌ fail | 2.3s | - |
| `lint` | 1 | command | ⏭️ skipped | 0.0s | - |
| `explain` | 1 | prompt | ✅ success | 1m 01s | 1200 / 345 |
| `explain` | 2 | prompt | ✅ success | 0.9s | 800 / 55 |

**Tokens:** 2000 in / 400 out · **Cost:** $0.0144 (estimated) · **Duration:** 1m 05s

**Run directory:** `.fabro/runs/run-1`

";
    assert_eq!(markdown, expected);
}

#[test]
fn step_summary_is_appended_to_github_step_summary() {
    let sandbox = Sandbox::new(CI_DEMO);
    let summary = sandbox.path().join("summary.md");
    std::fs::write(&summary, "# Earlier step\n\nkept as is\n").unwrap();
    let run_dir = sandbox.path().join("runs/r1");
    let run_dir_arg = run_dir.to_str().unwrap();
    let args = ["run", "workflow.dot", "--simulate", "--run-dir", run_dir_arg];
    let output = sandbox.run(&args, &[("GITHUB_STEP_SUMMARY", &summary)]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let text = read(&summary);
    assert!(
        text.starts_with("# Earlier step\n\nkept as is\n\n## ✅ fabro run `ci_demo`: succeeded\n"),
        "{text}"
    );
    assert!(text.contains("| `test` | 1 | command | ❌ fail |"), "{text}");
    // Inside the working directory, the run directory is shown relative to it, never absolute.
    assert!(text.contains("**Run directory:** `runs/r1`"), "{text}");
    assert!(!text.contains(sandbox.path().to_str().unwrap()), "{text}");
    assert!(text.contains("n/a (no priced model)"));

    // A second run appends again.
    let args = ["run", "workflow.dot", "--simulate", "--run-dir", "runs/r2"];
    let output = sandbox.run(&args, &[("GITHUB_STEP_SUMMARY", &summary)]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let again = read(&summary);
    assert!(again.starts_with(&text), "{again}");
    assert_eq!(again.matches("## ✅ fabro run `ci_demo`").count(), 2);
}

#[test]
fn json_mode_prints_only_result_json_with_reports() {
    let sandbox = Sandbox::new(CI_DEMO);
    let summary = sandbox.path().join("summary.md");
    let args = ["run", "workflow.dot", "--simulate", "--json", "--junit", "out.xml", "--run-dir", "run"];
    let output = sandbox.run(&args, &[("GITHUB_STEP_SUMMARY", &summary)]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let result_json = read(&sandbox.path().join("run/result.json"));
    assert_eq!(String::from_utf8_lossy(&output.stdout), result_json);
    assert!(sandbox.path().join("out.xml").is_file());
    assert!(read(&summary).contains("fabro run `ci_demo`"));
}

#[test]
fn reports_that_cannot_be_written_are_warnings() {
    let sandbox = Sandbox::new(CI_DEMO);
    std::fs::write(sandbox.path().join("file"), "not a directory").unwrap();
    let summary_dir = sandbox.path().join("a-directory");
    std::fs::create_dir(&summary_dir).unwrap();
    let args = ["run", "workflow.dot", "--simulate", "--junit", "file/out.xml", "--run-dir", "run"];
    let output = sandbox.run(&args, &[("GITHUB_STEP_SUMMARY", &summary_dir)]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(stderr.contains("warning: cannot write the JUnit report file/out.xml"), "{stderr}");
    assert!(stderr.contains("warning: cannot append the step summary"), "{stderr}");
    // Reports go into new directories when needed.
    let args = ["run", "workflow.dot", "--simulate", "--junit", "reports/ci/out.xml", "--run-dir", "run2"];
    let output = sandbox.run(&args, &[]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert!(sandbox.path().join("reports/ci/out.xml").is_file());
}

#[test]
fn paused_and_resumed_runs_write_reports() {
    let sandbox = Sandbox::new(GATED);
    std::fs::write(sandbox.path().join("answers.json"), r#"{"approve": ["Approve"]}"#).unwrap();
    let summary = sandbox.path().join("summary.md");
    let env = [("GITHUB_STEP_SUMMARY", summary.as_path()), ("CI", Path::new("true"))];
    let args = ["run", "workflow.dot", "--junit", "paused.xml", "--run-dir", "run"];
    let output = sandbox.run(&args, &env);
    assert_eq!(output.status.code(), Some(3), "{}", describe(&output));
    let xml = read(&sandbox.path().join("paused.xml"));
    let doc = roxmltree::Document::parse(&xml).expect("valid XML");
    let names: Vec<String> = check_junit_shape(&doc).into_iter().map(|(name, _)| name).collect();
    // A paused run gets a skipped "run outcome" case, so CI shows it did not finish.
    assert_eq!(names, ["start (visit 1)", "build (visit 1)", "run outcome"]);
    assert!(xml.contains(r#"<skipped message="paused: waiting for input"/>"#), "{xml}");
    assert!(xml.contains(r#"<property name="fabro.status" value="paused"/>"#), "{xml}");
    let text = read(&summary);
    assert!(text.starts_with("## ⏸️ fabro run `gated`: paused\n"), "{text}");
    assert!(text.contains("Resume with `fabro resume run --answers FILE`"), "{text}");

    let args = ["resume", "run", "--answers", "answers.json", "--junit", "resumed.xml"];
    let output = sandbox.run(&args, &env);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let xml = read(&sandbox.path().join("resumed.xml"));
    let doc = roxmltree::Document::parse(&xml).expect("valid XML");
    let names: Vec<String> = check_junit_shape(&doc).into_iter().map(|(name, _)| name).collect();
    assert_eq!(names, ["start (visit 1)", "build (visit 1)", "approve (visit 1)", "exit (visit 1)"]);
    assert!(xml.contains(r#"<property name="fabro.status" value="succeeded"/>"#), "{xml}");
    let text = read(&summary);
    assert!(text.contains("\n## ✅ fabro run `gated`: succeeded\n"), "{text}");
}

fn yaml_str<'a>(node: &'a yaml_rust2::Yaml, key: &str) -> Option<&'a str> {
    node[key].as_str()
}

fn steps(job: &yaml_rust2::Yaml) -> &[yaml_rust2::Yaml] {
    job["steps"].as_vec().map(Vec::as_slice).expect("job has steps")
}

#[test]
fn github_actions_example_is_valid_yaml_with_run_and_resume_jobs() {
    let text = read(&repo_root().join("examples/github-actions/fabro.yml"));
    let docs = yaml_rust2::YamlLoader::load_from_str(&text).expect("fabro.yml is YAML");
    let workflow = &docs[0];
    let jobs = &workflow["jobs"];
    assert!(jobs["run"].as_hash().is_some(), "job `run`");
    assert!(jobs["resume"].as_hash().is_some(), "job `resume`");
    assert!(workflow["on"]["pull_request"].is_null() || workflow["on"]["pull_request"].as_hash().is_some());

    let run = steps(&jobs["run"]);
    let uses = |steps: &[yaml_rust2::Yaml], prefix: &str| {
        steps.iter().any(|step| yaml_str(step, "uses").is_some_and(|u| u.starts_with(prefix)))
    };
    let runs = |steps: &[yaml_rust2::Yaml], parts: &[&str]| {
        steps.iter().any(|step| yaml_str(step, "run").is_some_and(|r| parts.iter().all(|p| r.contains(p))))
    };
    assert!(uses(run, "actions/upload-artifact@"), "run uploads artifacts");
    assert!(uses(run, "actions/checkout@"));
    assert!(uses(run, "dtolnay/rust-toolchain@"));
    assert!(runs(run, &["fabro run ", "--junit"]), "run has a `fabro run ... --junit` step");
    assert!(runs(run, &["GITHUB_OUTPUT", "exit_code"]), "run records the exit code");
    assert!(yaml_str(&jobs["run"]["outputs"], "exit_code").is_some());

    let resume = &jobs["resume"];
    assert_eq!(yaml_str(resume, "needs"), Some("run"));
    assert!(yaml_str(resume, "if").is_some_and(|c| c.contains("needs.run.outputs")));
    assert!(
        runs(steps(resume), &["fabro resume ", "--answers"]),
        "resume has a `fabro resume ... --answers` step"
    );
    assert!(uses(steps(resume), "actions/download-artifact@"));
    assert!(uses(steps(resume), "actions/upload-artifact@"));
}

#[test]
fn readme_documents_ci_mode() {
    let ci = read(&repo_root().join("docs/ci.md"));
    assert!(ci.starts_with("# CI"), "docs/ci.md is the CI page");
    for text in ["--junit FILE", "GITHUB_STEP_SUMMARY", "examples/github-actions/"] {
        assert!(ci.contains(text), "docs/ci.md lacks {text}");
    }
    let readme = read(&repo_root().join("docs/cli.md"));
    // The synopsis: `fabro run WORKFLOW ...` up to `fabro resume`, then up to the next command.
    let run = readme.split("\nfabro run WORKFLOW|RUN.toml ").nth(1).expect("synopsis of fabro run");
    let (run, resume) = run.split_once("\nfabro resume RUN|--last ").expect("synopsis of fabro resume");
    let resume = resume.split("\nfabro ").next().unwrap_or(resume);
    assert!(run.contains("[--junit FILE]"), "fabro run synopsis lacks --junit:\n{run}");
    assert!(resume.contains("[--junit FILE]"), "fabro resume synopsis lacks --junit:\n{resume}");
}

/// A run that fails without a failed stage (here a goal gate that never succeeded and has no
/// retry target) still shows as a failure in JUnit, through a "run outcome" case.
#[test]
fn a_run_that_fails_without_a_failed_stage_is_a_junit_failure() {
    let result = fabro::run_dir::RunResult {
        run_id: "r1".into(),
        status: fabro::run_status::RunStatus::Failed,
        failure_reason: Some("goal gate `tests` has not succeeded (not run) and has no retry target".into()),
        completed_nodes: vec!["start".into()],
        duration_ms: 5,
        stages: vec![fabro::run_dir::StageRecord {
            node_id: "start".into(),
            visit: 1,
            status: fabro::outcome::StageStatus::Success,
            duration_ms: 0,
            handler: Some("start".into()),
            failure_reason: None,
            usage: None,
            branch: None,
            cost_usd: None,
            dir: None,
        }],
        run_dir: "run".into(),
        usage: None,
        dry_run: None,
    };
    let xml = fabro::report::junit::render(&result, Path::new("/nonexistent"), "gated");
    let doc = roxmltree::Document::parse(&xml).expect("valid XML");
    let suite = doc.descendants().find(|n| n.has_tag_name("testsuite")).unwrap();
    assert_eq!(suite.attribute("tests"), Some("2"));
    assert_eq!(suite.attribute("failures"), Some("1"));
    let failure = doc.descendants().find(|n| n.has_tag_name("failure")).unwrap();
    assert_eq!(failure.attribute("type"), Some("run"));
    assert!(failure.attribute("message").unwrap().starts_with("goal gate `tests`"));
}

/// JUnit failures are the failures that ended the run: a handled failure (routed through a
/// conditional to a fix, then retried with success) and the conditional itself are no failures;
/// in a run that fails, only the visit that ended it is one.
#[test]
fn junit_failures_are_what_ended_the_run() {
    const FLAKY: &str = r#"digraph flaky {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    test [shape=parallelogram, script="test -f fixed || { echo 'test a ... FAILED'; exit 1; }"]
    check [shape=diamond]
    fix [shape=parallelogram, script="touch fixed"]
    deploy [shape=parallelogram, script="exit DEPLOY_EXIT"]
    start -> test
    test -> check [condition="outcome=fail"]
    test -> deploy
    check -> fix [condition="outcome=fail"]
    check -> deploy
    fix -> test
    deploy -> exit
}
"#;
    let failures = |xml: &str| {
        let doc = roxmltree::Document::parse(xml).unwrap();
        let failed: Vec<String> = check_junit_shape(&doc)
            .into_iter()
            .filter(|(_, id)| doc.get_node(*id).unwrap().children().any(|n| n.has_tag_name("failure")))
            .map(|(name, _)| name)
            .collect();
        let root = doc.root_element();
        (root.attribute("failures").unwrap().to_string(), failed)
    };

    let passing = Sandbox::new(&FLAKY.replace("DEPLOY_EXIT", "0"));
    let output = passing.run(&["run", "workflow.dot", "--junit", "out.xml", "--run-dir", "run"], &[]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert_eq!(failures(&read(&passing.path().join("out.xml"))), ("0".to_string(), vec![]));

    let failing = Sandbox::new(&FLAKY.replace("DEPLOY_EXIT", "4"));
    let output = failing.run(&["run", "workflow.dot", "--junit", "out.xml", "--run-dir", "run"], &[]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let xml = read(&failing.path().join("out.xml"));
    assert_eq!(failures(&xml), ("1".to_string(), vec!["deploy (visit 1)".to_string()]), "{xml}");
    assert!(xml.contains("[fabro] this visit failed (command exited with code 1)"), "{xml}");
}

#[test]
fn with_ci_set_a_run_on_a_terminal_prints_no_colour() {
    let dir = tempfile::tempdir().expect("a directory");
    let workflow = repo_root().join("workflows/linear.dot");
    let run = |ci: bool| {
        let mut command = common::fabro_command(
            dir.path(),
            &[
                "run",
                workflow.to_str().expect("a path"),
                "--simulate",
                "--run-dir",
                if ci { "ci" } else { "local" },
            ],
        );
        if ci {
            command.env("CI", "true");
        }
        let mut terminal = common::pty::Terminal::spawn(command);
        assert_eq!(terminal.wait().code(), Some(0), "{}", terminal.screen());
        terminal.screen()
    };
    assert!(run(false).contains("\x1b[32m"), "a terminal gets colour without CI");
    let screen = run(true);
    assert!(!screen.contains("\x1b["), "CI set, yet escape codes:\n{screen:?}");
}
