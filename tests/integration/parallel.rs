//! Parallel fan-out and fan-in through the real binary: branch isolation, whole multi-node
//! branches, nested parallels, join and error policies with real cancellation, the fan-in merge
//! (heuristic and model-chosen), git worktrees per branch, and resuming inside a parallel stage.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

use common::{fabro_in, git, Test};
use serde_json::Value;

const RUN_DIR: &str = "run";

fn run_of(ran: &common::Ran) -> PathBuf {
    ran.dir.path().join(RUN_DIR)
}

/// `fabro run workflow.dot --run-dir run` on `workflow`, expecting exit `status`.
fn run_workflow(workflow: &str, status: i32) -> common::Ran {
    Test::new().workflow(workflow).args(["run", "workflow.dot", "--run-dir", RUN_DIR]).status(status).run()
}

/// The run's `failure_reason` from `result.json`.
fn failure_reason(ran: &common::Ran) -> String {
    read_json(&run_of(ran).join("result.json"))["failure_reason"].as_str().unwrap_or_default().to_string()
}

fn read_json(path: &Path) -> Value {
    let text =
        std::fs::read_to_string(path).unwrap_or_else(|e| panic!("cannot read {}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{} is not JSON ({e}):\n{text}", path.display()))
}

fn context(run_dir: &Path) -> Value {
    read_json(&run_dir.join("checkpoint.json"))["context"].clone()
}

fn events(run_dir: &Path) -> Vec<Value> {
    std::fs::read_to_string(run_dir.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

fn named<'e>(events: &'e [Value], name: &str) -> Vec<&'e Value> {
    events.iter().filter(|e| e["event"] == name).collect()
}

/// A command stage that ends with `updates` (a JSON object) as its context updates.
fn setting(updates: &str) -> String {
    let body = format!("{{\"outcome\": \"success\", \"context_updates\": {updates}}}");
    format!("printf '%s' '{}' > \\\"$FABRO_STAGE_DIR/status.json\\\"", body.replace('"', "\\\""))
}

fn ids(results: &Value) -> Vec<String> {
    results.as_array().unwrap().iter().map(|r| r["branch_id"].as_str().unwrap().to_string()).collect()
}

/// Branches run on forks of the context: `b` starts only after `a` has finished, yet never sees
/// what `a` wrote; the fan-in applies the best branch's updates (here `b`, by score) and nothing
/// of the other branch reaches the run.
#[test]
fn branches_are_isolated_and_the_best_branch_is_merged() {
    let workflow = format!(
        r#"digraph iso {{
    start [shape=Mdiamond]; exit [shape=Msquare]
    seed [shape=parallelogram, script="{seed}"]
    fan [shape=component]
    a [shape=parallelogram, script="{a}; touch a_done"]
    b [shape=parallelogram, script="while [ ! -f a_done ]; do sleep 0.02; done; {b}"]
    merge [shape=tripleoctagon]
    after [shape=parallelogram, script="cat \"$FABRO_CONTEXT\" > after.json"]
    start -> seed -> fan
    fan -> a
    fan -> b
    a -> merge
    b -> merge
    merge -> after -> exit
}}"#,
        seed = setting(r#"{"shared": "parent"}"#),
        a = setting(r#"{"only_a": 1, "shared": "from a", "score": 1}"#),
        b = setting(r#"{"only_b": 2, "score": 5}"#),
    );
    let ran = run_workflow(&workflow, 0);
    let run = run_of(&ran);
    // b's own snapshot of the context, taken after a finished: nothing of a's.
    let seen_by_b = read_json(&run.join("stages/b/1/context.json"));
    assert_eq!(seen_by_b["shared"], "parent");
    assert!(seen_by_b.get("only_a").is_none(), "{seen_by_b}");
    let after = read_json(&ran.dir.path().join("after.json"));
    assert_eq!(after["only_b"], 2);
    assert_eq!(after["score"], 5);
    assert_eq!(after["shared"], "parent", "the losing branch's write must not reach the run");
    assert!(after.get("only_a").is_none(), "{after}");
    assert_eq!(after["parallel.fan_in.best_id"], "b");
    assert_eq!(after["parallel.fan_in.best_outcome"], "success");
    let results = &after["parallel.results"];
    assert_eq!(ids(results), ["a", "b"]);
    assert_eq!(results[0]["context_updates"]["only_a"], 1);
    assert_eq!(results[0]["status"], "success");
    for key in ["notes", "failure_reason", "duration_ms", "last_response", "head_sha"] {
        assert!(results[0].get(key).is_some(), "{key} missing from {}", results[0]);
    }
    assert!(results[1]["context_updates"].get("internal.work_dir").is_none());
    // Branch stages keep their own directories and say which branch they ran in.
    assert_eq!(read_json(&run.join("stages/a/1/status.json"))["branch"], "a");
    let result = read_json(&run.join("result.json"));
    let stages: Vec<(String, Value)> = result["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["node_id"].as_str().unwrap().to_string(), s["branch"].clone()))
        .collect();
    assert!(stages.contains(&("a".to_string(), Value::from("a"))), "{stages:?}");
    assert!(stages.contains(&("fan".to_string(), Value::Null)), "{stages:?}");
    let events = events(&run);
    assert_eq!(named(&events, "parallel.started")[0]["branch_count"], 2);
    assert_eq!(named(&events, "parallel.branch.started").len(), 2);
    let completed = named(&events, "parallel.branch.completed");
    assert_eq!(completed.len(), 2);
    assert!(completed.iter().all(|e| e["status"] == "success" && e["duration_ms"].is_u64()));
    let done = named(&events, "parallel.completed");
    assert_eq!((done[0]["success_count"].clone(), done[0]["failure_count"].clone()), (2.into(), 0.into()));
    assert!(done[0]["duration_ms"].is_u64());
    assert_eq!(
        named(&events, "parallel.shared_work_dir").len(),
        1,
        "outside git the branches share the work dir"
    );
}

/// A branch is a whole path (conditions, several stages) and may hold a parallel stage of its own.
#[test]
fn multi_node_branches_and_nested_parallels_run_to_their_joins() {
    let workflow = r#"digraph nest {
    start [shape=Mdiamond]; exit [shape=Msquare]
    outer [shape=component]
    x1 [shape=parallelogram, script="echo x1 >> trail"]
    check [shape=diamond]
    x2 [shape=parallelogram, script="echo x2 >> trail"]
    never [shape=parallelogram, script="echo never >> trail"]
    inner [shape=component, max_parallel=1]
    p [shape=parallelogram, script="echo p >> trail"]
    q [shape=parallelogram, script="echo q >> trail"]
    inner_join [shape=tripleoctagon]
    outer_join [shape=tripleoctagon]
    start -> outer
    outer -> x1
    outer -> inner
    x1 -> check
    check -> x2 [condition="outcome=success"]
    check -> never [condition="outcome=fail"]
    x2 -> outer_join
    never -> outer_join
    inner -> p
    inner -> q
    p -> inner_join
    q -> inner_join
    inner_join -> outer_join
    outer_join -> exit
}"#;
    let ran = run_workflow(workflow, 0);
    let mut trail: Vec<String> =
        std::fs::read_to_string(ran.dir.path().join("trail")).unwrap().lines().map(String::from).collect();
    trail.sort();
    assert_eq!(trail, ["p", "q", "x1", "x2"]);
    let result = read_json(&run_of(&ran).join("result.json"));
    let completed: Vec<&str> =
        result["completed_nodes"].as_array().unwrap().iter().map(|n| n.as_str().unwrap()).collect();
    assert_eq!(
        completed,
        ["start", "x1", "check", "x2", "p", "q", "inner", "inner_join", "outer", "outer_join", "exit"]
    );
    let context = context(&run_of(&ran));
    assert_eq!(ids(&context["parallel.results"]), ["x1", "inner"]);
    // The inner branch's result carries what its own fan-in decided.
    assert_eq!(context["parallel.results"][1]["context_updates"]["parallel.fan_in.best_id"], "p");
    assert_eq!(read_json(&run_of(&ran).join("stages/p/1/status.json"))["branch"], "p");
}

fn policy_workflow(attributes: &str, branches: &[(&str, &str)]) -> String {
    let mut text = format!(
        "digraph policy {{\n  start [shape=Mdiamond]; exit [shape=Msquare]\n  fan [shape=component, {attributes}]\n  merge [shape=tripleoctagon]\n  start -> fan\n  merge -> exit\n"
    );
    for (id, script) in branches {
        text.push_str(&format!(
            "  {id} [shape=parallelogram, script=\"{script}\"]\n  fan -> {id}\n  {id} -> merge\n"
        ));
    }
    text.push_str("}\n");
    text
}

fn results_of(run: &Path) -> Vec<(String, String)> {
    let checkpoint = read_json(&run.join("checkpoint.json"));
    checkpoint["context"]["parallel.results"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["branch_id"].as_str().unwrap().to_string(), r["status"].as_str().unwrap().to_string()))
        .collect()
}

fn pair(id: &str, status: &str) -> (String, String) {
    (id.to_string(), status.to_string())
}

fn process_alive(pid_file: &Path) -> bool {
    let pid = std::fs::read_to_string(pid_file).unwrap();
    let probe = Command::new("kill").args(["-0", pid.trim()]).stderr(std::process::Stdio::null()).status();
    probe.unwrap().success()
}

/// first_success: the first branch to succeed wins; the slow one is really stopped (its process
/// is gone) and recorded as cancelled.
#[test]
fn first_success_cancels_the_other_branches_for_real() {
    let workflow = policy_workflow(
        "join_policy=first_success",
        &[
            ("slow", "echo $$ > slow.pid; sleep 60"),
            ("quick", "while [ ! -f slow.pid ]; do sleep 0.02; done; echo ok"),
        ],
    );
    let clock = Instant::now();
    let ran = run_workflow(&workflow, 0);
    assert!(
        clock.elapsed() < Duration::from_secs(30),
        "the slow branch was waited for: {:?}",
        clock.elapsed()
    );
    assert!(!process_alive(&ran.dir.path().join("slow.pid")), "the slow branch's command still runs");
    let run = run_of(&ran);
    assert_eq!(results_of(&run), [pair("slow", "cancelled"), pair("quick", "success")]);
    let cancelled =
        named(&events(&run), "parallel.branch.cancelled").into_iter().cloned().collect::<Vec<_>>();
    assert_eq!(cancelled.len(), 1);
    assert_eq!(cancelled[0]["branch_id"], "slow");
    assert_eq!(context(&run)["parallel.fan_in.best_id"], "quick");
}

/// error_policy=fail_fast: the first failure cancels every other branch and fails the stage.
#[test]
fn fail_fast_cancels_the_rest_at_the_first_failure() {
    let workflow = policy_workflow(
        "error_policy=fail_fast",
        &[
            ("slow", "echo $$ > slow.pid; sleep 60"),
            ("broken", "while [ ! -f slow.pid ]; do sleep 0.02; done; exit 3"),
        ],
    );
    let clock = Instant::now();
    let ran = run_workflow(&workflow, 1);
    assert!(clock.elapsed() < Duration::from_secs(30));
    assert!(!process_alive(&ran.dir.path().join("slow.pid")));
    let run = run_of(&ran);
    assert_eq!(results_of(&run), [pair("slow", "cancelled"), pair("broken", "fail")]);
    let result = read_json(&run.join("result.json"));
    let reason = result["failure_reason"].as_str().unwrap();
    assert!(reason.contains("error_policy=fail_fast stopped parallel stage `fan`"), "{reason}");
    assert!(reason.contains("`broken`"), "{reason}");
}

/// wait_all with a failed branch: the stage is a partial success and the fan-in picks a
/// successful branch; k_of_n and quorum count successes.
#[test]
fn wait_all_k_of_n_and_quorum_count_successes() {
    let branches = [("good", "echo fine"), ("bad", "exit 1"), ("fine", "echo fine too")];
    let ran = run_workflow(&policy_workflow("join_policy=wait_all", &branches), 0);
    let status = read_json(&run_of(&ran).join("stages/fan/1/status.json"));
    assert_eq!(status["outcome"], "partial_success");
    assert_eq!(status["notes"], "2 of 3 branches succeeded (wait_all)");
    assert_eq!(context(&run_of(&ran))["parallel.fan_in.best_id"], "good");

    let ran = run_workflow(&policy_workflow("join_policy=k_of_n, join_k=2", &branches), 0);
    assert_eq!(read_json(&run_of(&ran).join("stages/fan/1/status.json"))["outcome"], "success");

    let ran = run_workflow(&policy_workflow("join_policy=quorum, join_quorum=0.75", &branches), 1);
    let status = read_json(&run_of(&ran).join("stages/fan/1/status.json"));
    assert_eq!(status["outcome"], "fail");
    assert!(
        status["failure_reason"].as_str().unwrap().contains("2 of 3 branches succeeded (quorum"),
        "{status}"
    );

    // Every branch failed: the fan-in fails too, naming each.
    let ran = run_workflow(&policy_workflow("join_policy=wait_all", &[("x", "exit 1"), ("y", "exit 2")]), 1);
    let reason = failure_reason(&ran);
    assert!(reason.contains("stage `fan` failed"), "{reason}");
}

/// With a prompt, the fan-in asks the model; the answer must name a branch id exactly.
#[test]
fn the_model_picks_the_best_branch_by_exact_id() {
    let workflow = r#"digraph pick {
    start [shape=Mdiamond]; exit [shape=Msquare]
    fan [shape=component]
    fast [shape=parallelogram, script="echo fast"]
    careful [shape=parallelogram, script="echo careful"]
    judge [shape=tripleoctagon, prompt="Pick the more careful result for $goal."]
    start -> fan
    fan -> fast
    fan -> careful
    fast -> judge
    careful -> judge
    judge -> exit
}"#;
    let ran = Test::new()
        .workflow(workflow)
        .file("responses.json", r#"{"judge": "Both work, but one checked its input.\nbest: careful"}"#)
        .args(["run", "workflow.dot", "--run-dir", RUN_DIR, "--responses", "responses.json"])
        .status(0)
        .run();
    let run = run_of(&ran);
    assert_eq!(context(&run)["parallel.fan_in.best_id"], "careful");
    let prompt = std::fs::read_to_string(run.join("stages/judge/1/prompt.md")).unwrap();
    assert!(prompt.contains("### `fast`: success") && prompt.contains("### `careful`: success"), "{prompt}");
    assert!(prompt.contains("`best: <id>`"), "{prompt}");
    assert_eq!(
        std::fs::read_to_string(run.join("stages/judge/1/response.md")).unwrap(),
        "Both work, but one checked its input.\nbest: careful"
    );

    // A near miss is not a match: `car` is a prefix of `careful`, not a branch id.
    let ran = Test::new()
        .workflow(workflow)
        .file("responses.json", r#"{"judge": "best: car"}"#)
        .args(["run", "workflow.dot", "--run-dir", RUN_DIR, "--responses", "responses.json"])
        .status(1)
        .run();
    let reason = failure_reason(&ran);
    assert!(reason.contains("exactly one of fast, careful (it named `car`)"), "{reason}");

    // A model that answers with the id alone, or with a JSON object, is understood.
    for answer in ["careful", r#"{\"best_id\": \"careful\"}"#] {
        let ran = Test::new()
            .workflow(workflow)
            .file("responses.json", &format!(r#"{{"judge": "{answer}"}}"#))
            .args(["run", "workflow.dot", "--run-dir", RUN_DIR, "--responses", "responses.json"])
            .status(0)
            .run();
        assert_eq!(context(&run_of(&ran))["parallel.fan_in.best_id"], "careful", "answer {answer}");
    }

    // Naming two branches names none: the stage fails and lists the choices.
    let ran = Test::new()
        .workflow(workflow)
        .file("responses.json", r#"{"judge": "fast, careful"}"#)
        .args(["run", "workflow.dot", "--run-dir", RUN_DIR, "--responses", "responses.json"])
        .status(1)
        .run();
    let reason = failure_reason(&ran);
    assert!(
        reason.contains("does not name a branch") && reason.contains("exactly one of fast, careful"),
        "{reason}"
    );
}

/// A branch that reaches the exit without passing the join fails with a reason.
#[test]
fn a_branch_that_skips_the_join_fails() {
    let workflow = r#"digraph stray {
    start [shape=Mdiamond]; exit [shape=Msquare]
    fan [shape=component]
    ok [shape=parallelogram, script="echo ok"]
    stray [shape=parallelogram, script="exit 1"]
    merge [shape=tripleoctagon]
    start -> fan
    fan -> ok
    fan -> stray
    ok -> merge
    stray -> merge [condition="outcome=success"]
    stray -> exit [condition="outcome=fail"]
    merge -> exit
}"#;
    let ran = run_workflow(workflow, 0);
    let results = &context(&run_of(&ran))["parallel.results"];
    assert_eq!(results[1]["status"], "fail");
    assert_eq!(results[1]["failure_reason"], "the branch reached the exit `exit` without joining at `merge`");
}

/// A run paused inside a parallel stage (a gate in one branch has no answer) resumes running only
/// the unfinished branch: the finished one is not run again.
#[test]
fn resuming_inside_a_parallel_stage_reruns_only_unfinished_branches() {
    let workflow = r#"digraph pause {
    start [shape=Mdiamond]; exit [shape=Msquare]
    fan [shape=component]
    quick [shape=parallelogram, script="echo run >> quick.count"]
    gate [shape=hexagon, label="Go on?"]
    approved [shape=parallelogram, script="echo approved >> approved.count"]
    merge [shape=tripleoctagon]
    start -> fan
    fan -> quick
    fan -> gate
    quick -> merge
    gate -> approved [label="[Y] Yes"]
    approved -> merge
    merge -> exit
}"#;
    let test = Test::new().workflow(workflow);
    let dir = test.path("");
    let ran = test.args(["run", "workflow.dot", "--run-dir", RUN_DIR]).status(3).run();
    let run = run_of(&ran);
    assert!(run.join("parallel/fan/1/quick.json").exists(), "the finished branch is journaled");
    let output = fabro_in(&dir, &["resume", RUN_DIR, "--auto-approve"]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(std::fs::read_to_string(dir.join("quick.count")).unwrap(), "run\n");
    assert_eq!(std::fs::read_to_string(dir.join("approved.count")).unwrap(), "approved\n");
    assert_eq!(results_of(&run), [pair("quick", "success"), pair("gate", "success")]);
    let result = read_json(&run.join("result.json"));
    let quick_visits =
        result["stages"].as_array().unwrap().iter().filter(|s| s["node_id"] == "quick").count();
    assert_eq!(quick_visits, 1);
}

// ---------------------------------------------------------------------------------------------
// Git worktrees
// ---------------------------------------------------------------------------------------------

/// A repository holding `file.txt` and the workflow, with `.fabro/` ignored; `None` without git.
fn repository(workflow: &str) -> Option<(tempfile::TempDir, PathBuf)> {
    Command::new("git").arg("--version").output().ok()?;
    let dir = tempfile::tempdir().unwrap();
    let root = dir.path().join("repo");
    std::fs::create_dir_all(&root).unwrap();
    std::fs::write(root.join("file.txt"), "base\n").unwrap();
    std::fs::write(root.join(".gitignore"), ".fabro/\n").unwrap();
    std::fs::write(root.join("w.dot"), workflow).unwrap();
    common::commit_all_in_new_repository(&root);
    Some((dir, root))
}

/// Inside a git repository each branch works in its own worktree on `fabro/<run>/<branch>`, made
/// from HEAD plus uncommitted changes; the best branch is merged back (fast-forward here, since
/// the work directory did not change meanwhile) and the worktrees are removed.
#[test]
fn branches_work_in_git_worktrees_and_the_best_is_merged() {
    let workflow = format!(
        r#"digraph git {{
    start [shape=Mdiamond]; exit [shape=Msquare]
    fan [shape=component]
    a [shape=parallelogram, script="pwd > \"$FABRO_STAGE_DIR/pwd\"; cat wip.txt > seen_wip; echo A > a.txt"]
    b [shape=parallelogram, script="echo B > b.txt; {b}"]
    merge [shape=tripleoctagon]
    start -> fan
    fan -> a
    fan -> b
    a -> merge
    b -> merge
    merge -> exit
}}"#,
        b = setting(r#"{"score": 9}"#)
    );
    let Some((_dir, repo)) = repository(&workflow) else { return };
    std::fs::write(repo.join("wip.txt"), "uncommitted\n").unwrap();
    let head_before = git(&repo, &["rev-parse", "HEAD"]);
    let output = fabro_in(&repo, &["run", "w.dot", "--run-dir", ".fabro/run"]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    let run = repo.join(".fabro/run");
    let context = context(&run);
    let results = &context["parallel.results"];
    let run_id = read_json(&run.join("manifest.json"))["run_id"].as_str().unwrap().to_string();
    // Each branch ran in its own worktree, on its own branch, from HEAD + the uncommitted file.
    let pwd = std::fs::read_to_string(run.join("stages/a/1/pwd")).unwrap();
    assert!(pwd.trim().ends_with("worktrees/fan/1/a"), "{pwd}");
    let b_head = results[1]["head_sha"].as_str().unwrap().to_string();
    assert_eq!(git(&repo, &["rev-parse", &format!("fabro/{run_id}/b")]), b_head);
    assert_eq!(git(&repo, &["show", &format!("fabro/{run_id}/a:seen_wip")]), "uncommitted");
    // b (score 9) won and was fast-forwarded into the work directory.
    assert_eq!(context["parallel.fan_in.best_id"], "b");
    assert_eq!(context["parallel.fan_in.best_head_sha"], b_head.as_str());
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), b_head);
    assert_eq!(std::fs::read_to_string(repo.join("b.txt")).unwrap(), "B\n");
    assert!(!repo.join("a.txt").exists());
    assert_eq!(
        git(&repo, &["rev-parse", "HEAD~2"]),
        head_before,
        "HEAD -> b's commit -> the snapshot -> HEAD"
    );
    assert!(!run.join("worktrees/fan/1/a").exists(), "worktrees are removed");
    assert_eq!(git(&repo, &["worktree", "list"]).lines().count(), 1);
    let merged = named(&events(&run), "parallel.merged").into_iter().cloned().collect::<Vec<_>>();
    assert_eq!(merged[0]["fast_forward"], true);
}

/// When the work directory changed during the parallel stage in a way that conflicts with the
/// best branch, the fan-in fails listing the conflicting paths and leaves the work directory as
/// it was; --keep-worktrees keeps the branch worktrees for a look.
#[test]
fn a_merge_conflict_fails_the_fan_in_with_the_paths() {
    let Some((_dir, repo)) = repository("") else { return };
    let workflow = format!(
        r#"digraph conflict {{
    start [shape=Mdiamond]; exit [shape=Msquare]
    fan [shape=component]
    best [shape=parallelogram, script="echo from best > file.txt; touch {done}"]
    meddler [shape=parallelogram, script="while [ ! -f {done} ]; do sleep 0.02; done; echo from outside > {file}; exit 1"]
    merge [shape=tripleoctagon]
    start -> fan
    fan -> best
    fan -> meddler
    best -> merge
    meddler -> merge
    merge -> exit
}}"#,
        done = repo.join(".fabro/best_done").display(),
        file = repo.join("file.txt").display(),
    );
    std::fs::create_dir_all(repo.join(".fabro")).unwrap();
    std::fs::write(repo.join("w.dot"), workflow).unwrap();
    git(&repo, &["commit", "-qam", "workflow"]);
    let head_before = git(&repo, &["rev-parse", "HEAD"]);
    let output = fabro_in(&repo, &["run", "w.dot", "--run-dir", ".fabro/run", "--keep-worktrees"]);
    assert_eq!(output.status.code(), Some(1), "{}", String::from_utf8_lossy(&output.stderr));
    let run = repo.join(".fabro/run");
    let reason = read_json(&run.join("result.json"))["failure_reason"].as_str().unwrap().to_string();
    assert!(
        reason.contains("merging the best branch `best` into the work directory conflicts in: file.txt"),
        "{reason}"
    );
    assert_eq!(git(&repo, &["rev-parse", "HEAD"]), head_before);
    assert_eq!(std::fs::read_to_string(repo.join("file.txt")).unwrap(), "from outside\n");
    assert!(run.join("worktrees/fan/1/best/file.txt").exists(), "--keep-worktrees keeps them");
}

/// Rewinding to before a parallel stage moves its branch journal aside with its stage
/// directories, so resuming runs the branches again instead of reusing their old results.
#[test]
fn rewinding_before_a_parallel_stage_runs_its_branches_again() {
    let workflow =
        policy_workflow("join_policy=wait_all", &[("a", "echo a >> a.count"), ("b", "echo b >> b.count")])
            .replace(
                "start -> fan",
                "start -> first\n  first [shape=parallelogram, script=\"true\"]\n  first -> fan",
            );
    let test = Test::new().workflow(&workflow);
    let dir = test.path("");
    let _ran = test.args(["run", "workflow.dot", "--run-dir", RUN_DIR]).status(0).run();
    let output = fabro_in(&dir, &["rewind", RUN_DIR, "--to", "first"]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert!(!dir.join(RUN_DIR).join("parallel/fan/1").exists());
    let output = fabro_in(&dir, &["resume", RUN_DIR]);
    assert_eq!(output.status.code(), Some(0), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(std::fs::read_to_string(dir.join("a.count")).unwrap(), "a\na\n");
    assert_eq!(std::fs::read_to_string(dir.join("b.count")).unwrap(), "b\nb\n");
}
