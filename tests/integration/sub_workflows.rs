//! Manager stages (`shape=house`): a child workflow runs as a child run of the parent in
//! `children/<node>/<visit>/`, under supervision (observe, steer, stop condition, max cycles),
//! with context flowing both ways, nesting, pausing, interruption and resume after a crash.

use crate::common;

use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

/// `sh set.sh KEY JSON`: the command stage sets context key KEY to the JSON value.
const SET_SH: &str = r#"printf '{"outcome": "success", "context_updates": {"%s": %s}}' "$1" "$2" > "$FABRO_STAGE_DIR/status.json"
"#;

/// `sh get.sh KEY`: prints the text value of KEY from the context snapshot.
const GET_SH: &str = r#"sed -n "s/^  \"$1\": \"\{0,1\}\([^\",]*\)\"\{0,1\},\{0,1\}$/\1/p" "$FABRO_CONTEXT"
"#;

/// A temporary directory with the helper scripts, in which `fabro` runs.
struct Dir(tempfile::TempDir);

impl Dir {
    fn new(files: &[(&str, &str)]) -> Dir {
        let dir = Dir(tempfile::tempdir().expect("temp dir"));
        dir.write("set.sh", SET_SH);
        dir.write("get.sh", GET_SH);
        for (name, text) in files {
            dir.write(name, text);
        }
        dir
    }

    fn write(&self, name: &str, text: &str) {
        let path = self.path(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }

    fn fabro(&self, args: &[&str]) -> Output {
        common::fabro_in(self.0.path(), args)
    }

    fn json(&self, name: &str) -> Value {
        read_json(&self.path(name))
    }

    fn read(&self, name: &str) -> String {
        std::fs::read_to_string(self.path(name)).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    /// The events of the run directory `run_dir` named `name`.
    fn events(&self, run_dir: &str, name: &str) -> Vec<Value> {
        self.read(&format!("{run_dir}/events.jsonl"))
            .lines()
            .map(|line| serde_json::from_str::<Value>(line).expect("event json"))
            .filter(|event| event["event"] == name)
            .collect()
    }
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

fn describe(output: &Output) -> String {
    format!(
        "exit {:?}\n--- stdout\n{}\n--- stderr\n{}",
        output.status.code(),
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    )
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

const PARENT: &str = r#"digraph parent {
    graph [goal="Ship the parser"]
    start [shape=Mdiamond]
    exit [shape=Msquare]
    plan [shape=parallelogram, script="sh set.sh plan '\"use a queue\"'"]
    manage [shape=house, stack.child_workflow="parts/child.dot"]
    report [shape=parallelogram, script="echo child said: $(sh get.sh verdict)"]
    start -> plan -> manage -> report -> exit
}
"#;

const CHILD: &str = r#"digraph child {
    graph [goal="Test the parser"]
    start [shape=Mdiamond]
    exit [shape=Msquare]
    read [shape=parallelogram, script="echo plan=$(sh get.sh plan) lang=$(sh get.sh lang) goal=$(sh get.sh graph.goal)"]
    judge [shape=parallelogram, script="sh set.sh verdict '\"green\"'"]
    review [shape=tab, prompt="Review the test results of the parser and say whether they pass"]
    start -> read -> judge -> review -> exit
}
"#;

#[test]
fn parent_and_child_pass_context_both_ways() {
    let dir = Dir::new(&[("parent.dot", PARENT), ("parts/child.dot", CHILD)]);
    let output =
        dir.fabro(&["run", "parent.dot", "--run-dir", "run", "--simulate", "--set", "lang=rust", "-q"]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));

    // The child is a run of its own, in the parent's run directory.
    let child = "run/children/manage/1";
    assert_eq!(dir.json(&format!("{child}/result.json"))["status"], "succeeded");
    assert_eq!(
        dir.json(&format!("{child}/result.json"))["completed_nodes"],
        json!(["start", "read", "judge", "review", "exit"])
    );
    assert_eq!(dir.json(&format!("{child}/manifest.json"))["workflow"], "child");
    assert_eq!(dir.read(&format!("{child}/workflow.dot")), CHILD);

    // Parent -> child: the parent's context (its own keys and --set values), not its graph keys.
    assert_eq!(
        dir.read(&format!("{child}/stages/read/1/stdout.log")),
        "plan=use a queue lang=rust goal=Test the parser\n"
    );
    // The child's LLM stage sees the parent's preamble under a heading.
    let prompt = dir.read(&format!("{child}/stages/review/1/prompt.md"));
    assert!(prompt.starts_with("Goal: Test the parser\n"), "{prompt}");
    let parent_part = prompt.split("## Parent run\n").nth(1).expect("parent preamble");
    assert!(parent_part.starts_with("\nGoal: Ship the parser\n"), "{prompt}");
    assert!(parent_part.contains("- **plan**: success"), "{prompt}");

    // Child -> parent: what the child set comes back; its run's own keys do not.
    assert_eq!(dir.read("run/stages/report/1/stdout.log"), "child said: green\n");
    let context = &dir.json("run/checkpoint.json")["context"];
    assert_eq!(context["verdict"], "green");
    assert_eq!(context["graph.goal"], "Ship the parser");
    assert_eq!(context["plan"], "use a queue");
    assert!(context["response.review"].as_str().unwrap().starts_with("[simulated] Stage `review`"));
    assert_eq!(context["stack.child.status"], "succeeded");
    assert_eq!(context["stack.child.current_node"], "exit");
    assert_eq!(context["stack.child.completed_count"], 5);
    assert_eq!(context["stack.child.last_outcome"], "success");
    assert_eq!(context["stack.child.run_dir"], child);
    assert_ne!(context["internal.run_id"], dir.json(&format!("{child}/manifest.json"))["run_id"]);

    // The manager stage keeps what it handed the child of this run.
    let handed = dir.read("run/stages/manage/1/preamble.md");
    assert!(parent_part.starts_with(&format!("\n{handed}")), "{handed}");
    let status = dir.json("run/stages/manage/1/status.json");
    assert_eq!(status["handler"], "manager");
    assert_eq!(status["outcome"], "success");
    let started = dir.events("run", "child.started");
    assert_eq!(started.len(), 1);
    assert_eq!((&started[0]["run_dir"], &started[0]["resumed"]), (&json!(child), &json!(false)));
    let finished = dir.events("run", "child.finished");
    assert_eq!((&finished[0]["status"], &finished[0]["stopped_by"]), (&json!("succeeded"), &Value::Null));
}

#[test]
fn a_failed_child_fails_the_stage_with_its_reason() {
    let child = r#"digraph child {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    broken [shape=parallelogram, script="echo boom >&2; exit 3"]
    start -> broken -> exit
}
"#;
    let dir = Dir::new(&[("parent.dot", PARENT), ("parts/child.dot", child)]);
    let output = dir.fabro(&["run", "parent.dot", "--run-dir", "run", "-q"]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let reason = dir.json("run/stages/manage/1/status.json")["failure_reason"].as_str().unwrap().to_string();
    assert!(reason.starts_with("the child run failed: stage `broken` failed: "), "{reason}");
    assert_eq!(dir.json("run/children/manage/1/result.json")["status"], "failed");
}

/// A child that sets `ready` and then works on: the stop condition reads the child's live
/// context (the parent's says `ready=false` the whole time) and stops it.
#[test]
fn the_stop_condition_reads_the_childs_live_context() {
    let parent = r#"digraph parent {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    manage [shape=house, stack.child_workflow="child.dot", manager.poll_interval=50ms,
            manager.stop_condition="context.ready=true && outcome=success"]
    start -> manage -> exit
}
"#;
    let child = r#"digraph child {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    prepare [shape=parallelogram, script="sh set.sh ready true"]
    work [shape=parallelogram, script="sleep 30"]
    start -> prepare -> work -> exit
}
"#;
    let dir = Dir::new(&[("parent.dot", parent), ("child.dot", child)]);
    let started = Instant::now();
    let output = dir.fabro(&["run", "parent.dot", "--run-dir", "run", "--set", "ready=false", "-q"]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    assert!(
        started.elapsed() < Duration::from_secs(20),
        "the child was not stopped: {:?}",
        started.elapsed()
    );

    let status = dir.json("run/stages/manage/1/status.json");
    assert_eq!(status["outcome"], "success");
    let notes = status["notes"].as_str().unwrap();
    assert!(
        notes.starts_with("manager.stop_condition `context.ready=true && outcome=success` held"),
        "{notes}"
    );
    // The child was stopped like an interrupted run: resumable, its stage in flight not completed.
    let checkpoint = dir.json("run/children/manage/1/checkpoint.json");
    assert_eq!(checkpoint["status"], "interrupted");
    assert_eq!(checkpoint["next_node"], "work");
    let finished = dir.events("run", "child.finished");
    assert_eq!(finished[0]["stopped_by"], "stop_condition");
    let cycles = dir.events("run", "manager.cycle");
    let last = cycles.last().expect("cycles");
    assert_eq!(last["stack.child.current_node"], "work");
    assert_eq!(last["stack.child.status"], "running");
    // The child's change came back.
    assert_eq!(dir.json("run/checkpoint.json")["context"]["ready"], true);
}

#[test]
fn a_child_still_running_after_max_cycles_fails_the_stage() {
    let parent = r#"digraph parent {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    manage [shape=house, stack.child_workflow="child.dot", manager.poll_interval=50ms, manager.max_cycles=3]
    start -> manage -> exit
}
"#;
    let child = r#"digraph child {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=parallelogram, script="sleep 30"]
    start -> work -> exit
}
"#;
    let dir = Dir::new(&[("parent.dot", parent), ("child.dot", child)]);
    let output = dir.fabro(&["run", "parent.dot", "--run-dir", "run", "-q"]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let reason = dir.json("run/stages/manage/1/status.json")["failure_reason"].as_str().unwrap().to_string();
    assert!(
        reason.starts_with("the child run did not finish within manager.max_cycles=3 cycles"),
        "{reason}"
    );
    assert_eq!(dir.events("run", "manager.cycle").len(), 3);
    assert_eq!(dir.events("run", "child.finished")[0]["stopped_by"], "max_cycles");
}

/// Without the `wait` action a cycle runs after every checkpoint of the child, not on a timer.
#[test]
fn without_wait_the_manager_cycles_at_every_child_checkpoint() {
    let parent = r#"digraph parent {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    manage [shape=house, stack.child_workflow="child.dot", manager.poll_interval=1h,
            manager.actions="observe", manager.max_cycles=3]
    start -> manage -> exit
}
"#;
    let child = r#"digraph child {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    one [shape=parallelogram, script="sleep 0.2"]
    two [shape=parallelogram, script="sleep 0.2"]
    work [shape=parallelogram, script="sleep 30"]
    start -> one -> two -> work -> exit
}
"#;
    let dir = Dir::new(&[("parent.dot", parent), ("child.dot", child)]);
    let started = Instant::now();
    let output = dir.fabro(&["run", "parent.dot", "--run-dir", "run", "-q"]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    assert!(started.elapsed() < Duration::from_secs(20), "{:?}", started.elapsed());
    let cycles = dir.events("run", "manager.cycle");
    assert_eq!(cycles.len(), 3);
    let seen: Vec<u64> = cycles.iter().map(|c| c["stack.child.completed_count"].as_u64().unwrap()).collect();
    assert!(seen.windows(2).all(|w| w[0] <= w[1]) && seen[2] >= 2, "{seen:?}");
    assert_eq!(dir.events("run", "child.finished")[0]["stopped_by"], "max_cycles");
}

/// Steering: the message lands in the child's active stage directory and in the prompt of the
/// child's next LLM stage.
#[test]
fn a_steering_message_reaches_the_childs_next_llm_stage() {
    let parent = r#"digraph parent {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    manage [shape=house, stack.child_workflow="child.dot", manager.poll_interval=50ms,
            manager.actions="observe,steer,wait",
            manager.steer_prompt="Fix the {{context.area}} tests before anything else."]
    start -> manage -> exit
}
"#;
    let child = r#"digraph child {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    prepare [shape=parallelogram, script="sleep 1"]
    fix [shape=box, prompt="Fix what the test run reported and explain each change you make"]
    start -> prepare -> fix -> exit
}
"#;
    let dir = Dir::new(&[("parent.dot", parent), ("child.dot", child)]);
    let output =
        dir.fabro(&["run", "parent.dot", "--run-dir", "run", "--simulate", "--set", "area=parser", "-q"]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let child_dir = "run/children/manage/1";
    assert_eq!(
        dir.read(&format!("{child_dir}/stages/prepare/1/steering.md")),
        "Fix the parser tests before anything else."
    );
    let prompt = dir.read(&format!("{child_dir}/stages/fix/1/prompt.md"));
    assert!(
        prompt.contains(
            "## Steering from the manager\n\nFix the parser tests before anything else.\n\n---\n\nFix what the test run reported"
        ),
        "{prompt}"
    );
    let steered = dir.events("run", "manager.steered");
    assert_eq!(steered[0]["child_node"], "prepare");
    assert_eq!(steered[0]["path"], format!("{child_dir}/stages/prepare/1/steering.md"));
}

#[test]
fn children_nest_two_levels_deep() {
    let parent = r#"digraph parent {
    graph [goal="Release"]
    start [shape=Mdiamond]
    exit [shape=Msquare]
    outer [shape=house, stack.child_workflow="middle.dot"]
    start -> outer -> exit
}
"#;
    let middle = r#"digraph middle {
    graph [goal="Build"]
    start [shape=Mdiamond]
    exit [shape=Msquare]
    inner [shape=house, stack.child_workflow="leaf/leaf.dot"]
    check [shape=parallelogram, script="echo leaf said $(sh get.sh depth)"]
    start -> inner -> check -> exit
}
"#;
    let leaf = r#"digraph leaf {
    graph [goal="Compile"]
    start [shape=Mdiamond]
    exit [shape=Msquare]
    mark [shape=parallelogram, script="sh set.sh depth 2"]
    think [shape=tab, prompt="Say what compiling means for the release of the whole project"]
    start -> mark -> think -> exit
}
"#;
    let dir = Dir::new(&[("parent.dot", parent), ("middle.dot", middle), ("leaf/leaf.dot", leaf)]);
    let output = dir.fabro(&["run", "parent.dot", "--run-dir", "run", "--simulate", "-q"]);
    assert_eq!(output.status.code(), Some(0), "{}", describe(&output));
    let leaf_dir = "run/children/outer/1/children/inner/1";
    assert_eq!(dir.json(&format!("{leaf_dir}/result.json"))["status"], "succeeded");
    assert_eq!(dir.read("run/children/outer/1/stages/check/1/stdout.log"), "leaf said 2\n");
    assert_eq!(dir.json("run/checkpoint.json")["context"]["depth"], 2);
    // The leaf's preamble holds the middle's, which holds the parent's.
    let prompt = dir.read(&format!("{leaf_dir}/stages/think/1/prompt.md"));
    let goals: Vec<&str> = prompt.lines().filter(|line| line.starts_with("Goal: ")).collect();
    assert_eq!(goals, ["Goal: Compile", "Goal: Build", "Goal: Release"], "{prompt}");
    assert_eq!(prompt.matches("## Parent run").count(), 2, "{prompt}");
}

const SLOW_CHILD: &str = r#"digraph child {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    one [shape=parallelogram, script="echo one >> log"]
    slow [shape=parallelogram, script="echo slow >> log; if [ ! -f resumed ]; then echo $$ > slow.pid; sleep 30; fi"]
    two [shape=parallelogram, script="echo two >> log"]
    start -> one -> slow -> two -> exit
}
"#;

const SLOW_PARENT: &str = r#"digraph parent {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    before [shape=parallelogram, script="echo before >> log"]
    manage [shape=house, stack.child_workflow="child.dot", manager.poll_interval=50ms]
    after [shape=parallelogram, script="echo after >> log"]
    start -> before -> manage -> after -> exit
}
"#;

/// Starts the slow parent in the background and waits until the child's slow stage runs.
fn start_slow_parent(dir: &Dir) -> std::process::Child {
    let child = common::fabro_command(dir.0.path(), &["run", "parent.dot", "--run-dir", "run", "-q"])
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn");
    common::wait_for_file(&dir.path("slow.pid"), "the child's slow stage");
    child
}

#[test]
fn a_parent_killed_while_its_child_runs_resumes_the_child() {
    let dir = Dir::new(&[("parent.dot", SLOW_PARENT), ("child.dot", SLOW_CHILD)]);
    let mut running = start_slow_parent(&dir);
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(running.id() as i32, libc::SIGKILL) };
    assert_eq!(running.wait().unwrap().signal(), Some(libc::SIGKILL));
    let child_dir = "run/children/manage/1";
    let (_, last) = common::journal_lines(&dir.path(child_dir)).last().cloned().expect("the child's journal");
    assert_eq!(last["next"], "slow");
    let child_run_id = dir.json(&format!("{child_dir}/manifest.json"))["run_id"].clone();

    std::fs::write(dir.path("resumed"), "").unwrap();
    let resumed = dir.fabro(&["resume", "run", "-q"]);
    assert_eq!(resumed.status.code(), Some(0), "{}", describe(&resumed));
    // Nothing the child had completed ran again; the stage in flight did.
    assert_eq!(dir.read("log"), "before\none\nslow\nslow\ntwo\nafter\n");
    assert!(!dir.path("run/children/manage/1-2").exists(), "the child was not started again");
    let result = dir.json(&format!("{child_dir}/result.json"));
    assert_eq!(result["status"], "succeeded");
    assert_eq!(result["completed_nodes"], json!(["start", "one", "slow", "two", "exit"]));
    assert_eq!(dir.json(&format!("{child_dir}/manifest.json"))["run_id"], child_run_id);
    assert_eq!(dir.events(child_dir, "run.resumed").len(), 1);
    let started = dir.events("run", "child.started");
    assert_eq!(started.iter().map(|e| e["resumed"].clone()).collect::<Vec<_>>(), [json!(false), json!(true)]);
    assert_eq!(
        dir.json("run/result.json")["completed_nodes"],
        json!(["start", "before", "manage", "after", "exit"])
    );
}

#[test]
fn ctrl_c_reaches_the_child_and_resume_continues_both() {
    let dir = Dir::new(&[("parent.dot", SLOW_PARENT), ("child.dot", SLOW_CHILD)]);
    let running = start_slow_parent(&dir);
    // SAFETY: signalling our own child process.
    unsafe { libc::kill(running.id() as i32, libc::SIGINT) };
    let output = running.wait_with_output().expect("wait");
    assert_eq!(output.status.code(), Some(130), "{}", describe(&output));
    assert_eq!(dir.json("run/checkpoint.json")["status"], "interrupted");
    assert_eq!(dir.json("run/checkpoint.json")["next_node"], "manage");
    assert_eq!(dir.json("run/children/manage/1/checkpoint.json")["status"], "interrupted");

    std::fs::write(dir.path("resumed"), "").unwrap();
    let resumed = dir.fabro(&["resume", "run", "-q"]);
    assert_eq!(resumed.status.code(), Some(0), "{}", describe(&resumed));
    assert_eq!(dir.read("log"), "before\none\nslow\nslow\ntwo\nafter\n");
}

#[test]
fn a_child_waiting_for_a_human_pauses_the_parent_until_resumed_with_an_answer() {
    let child = r#"digraph child {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    gate [shape=hexagon, label="Ship it?"]
    ship [shape=parallelogram, script="sh set.sh shipped true"]
    start -> gate
    gate -> ship [label="[Y] Yes"]
    gate -> exit [label="[N] No"]
    ship -> exit
}
"#;
    let parent = r#"digraph parent {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    manage [shape=house, stack.child_workflow="child.dot"]
    start -> manage -> exit
}
"#;
    let dir = Dir::new(&[("parent.dot", parent), ("child.dot", child)]);
    let output = dir.fabro(&["run", "parent.dot", "--run-dir", "run", "-q"]);
    assert_eq!(output.status.code(), Some(3), "{}", describe(&output));
    assert!(stderr(&output).contains("paused: the child run of `manage` paused: "), "{}", describe(&output));
    assert_eq!(dir.json("run/checkpoint.json")["status"], "paused");
    assert_eq!(dir.json("run/children/manage/1/checkpoint.json")["status"], "paused");

    let resumed = dir.fabro(&["resume", "run", "--auto-approve", "-q"]);
    assert_eq!(resumed.status.code(), Some(0), "{}", describe(&resumed));
    assert_eq!(dir.json("run/checkpoint.json")["context"]["shipped"], true);
    assert_eq!(
        dir.json("run/children/manage/1/result.json")["completed_nodes"],
        json!(["start", "gate", "ship", "exit"])
    );
}

#[test]
fn a_bad_child_workflow_is_reported_with_its_position_before_anything_runs() {
    let parent = r#"digraph parent {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    manage [shape=house, stack.child_workflow="missing.dot"]
    start -> manage -> exit
}
"#;
    let dir = Dir::new(&[("parent.dot", parent)]);
    let output = dir.fabro(&["validate", "parent.dot"]);
    assert_eq!(output.status.code(), Some(2), "{}", describe(&output));
    let text = stdout(&output);
    assert!(
        text.contains(
            "error[child_workflow] parent.dot:4:47 node manage: cannot read child workflow `missing.dot`"
        ),
        "{text}"
    );
    assert!(text.contains("it is relative to the directory of this workflow file"), "{text}");
    let run = dir.fabro(&["run", "parent.dot", "--run-dir", "run"]);
    assert_eq!(run.status.code(), Some(2), "{}", describe(&run));
    assert!(!dir.path("run").exists());

    // An error inside the child is shown at the child's position.
    dir.write("missing.dot", "digraph child {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  go [shape=parallelogram]\n  start -> go -> exit\n}\n");
    let text = stdout(&dir.fabro(&["validate", "parent.dot"]));
    assert!(
        text.contains("node manage: child workflow missing.dot:4:3: command stage `go` has no script"),
        "{text}"
    );

    // A child that runs its parent again is a cycle.
    dir.write("missing.dot", "digraph child {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  again [shape=house, stack.child_workflow=\"parent.dot\"]\n  start -> again -> exit\n}\n");
    let text = stdout(&dir.fabro(&["validate", "parent.dot"]));
    assert!(text.contains("workflows run each other as children in a cycle: "), "{text}");
    assert!(text.contains("parent.dot -> ") && text.contains("missing.dot -> "), "{text}");
}

#[test]
fn a_child_with_a_stage_this_version_cannot_run_is_refused_before_it_starts() {
    let parent = r#"digraph parent {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    manage [shape=house, stack.child_workflow="child.dot"]
    start -> manage -> exit
}
"#;
    let child = r#"digraph child {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    rocket [type="launch_rocket"]
    one [shape=parallelogram, script="echo one >> log"]
    start -> rocket -> one -> exit
}
"#;
    let dir = Dir::new(&[("parent.dot", parent), ("child.dot", child)]);
    let output = dir.fabro(&["run", "parent.dot", "--run-dir", "run", "-q"]);
    assert_eq!(output.status.code(), Some(1), "{}", describe(&output));
    let reason = dir.json("run/stages/manage/1/status.json")["failure_reason"].clone();
    assert_eq!(
        reason,
        "the child workflow's node `rocket` is a launch_rocket stage, which this version of fabro cannot run"
    );
    assert!(!dir.path("run/children").exists(), "no child run was started");
}

#[test]
fn manager_settings_are_checked() {
    let parent = r#"digraph parent {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    lost [shape=house]
    odd [shape=house, stack.child_workflow="child.dot", manager.actions="observe,poke", manager.stop_condition="ready =="]
    quiet [shape=house, stack.child_workflow="child.dot", manager.actions="observe,steer"]
    start -> lost -> odd -> quiet -> exit
}
"#;
    let child = "digraph child { start [shape=Mdiamond]; exit [shape=Msquare]; start -> exit }\n";
    let dir = Dir::new(&[("parent.dot", parent), ("child.dot", child)]);
    let text = stdout(&dir.fabro(&["validate", "parent.dot"]));
    assert!(
        text.contains(
            "error[manager_settings] parent.dot:4:5 node lost: manager stage `lost` names no child workflow"
        ),
        "{text}"
    );
    assert!(text.contains("node odd: unknown manager action `poke` on `odd`"), "{text}");
    assert!(text.contains("node odd: invalid manager.stop_condition: "), "{text}");
    assert!(
        text.contains(
            "warning[manager_settings] parent.dot:6:75 node quiet: manager `quiet` has the steer action but no"
        ),
        "{text}"
    );
}
