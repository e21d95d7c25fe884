//! `fabro run --worktree`: the run works in its own git worktree on `fabro/run/<run_id>`, commits
//! after every stage, and never touches the user's checkout; resume and fork use the
//! checkpoint's commit.

use crate::common;

use std::path::Path;
use std::process::{Command, Output};

use common::git;

fn fabro(dir: &Path, args: &[&str]) -> Output {
    common::fabro_in(dir, args)
}

/// A repository with one commit and `.fabro/` ignored; None when git is not installed.
fn repository() -> Option<tempfile::TempDir> {
    Command::new("git").arg("--version").output().ok()?;
    let dir = tempfile::tempdir().expect("temp dir");
    let root = dir.path();
    std::fs::write(root.join("README"), "hello\n").unwrap();
    std::fs::write(root.join(".gitignore"), ".fabro/\n").unwrap();
    std::fs::write(
        root.join("w.dot"),
        r#"digraph wt {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    write [shape=parallelogram, script="echo generated > generated.txt"]
    edit [shape=parallelogram, script="echo changed >> README"]
    gate [shape=hexagon, label="Ship?"]
    start -> write -> edit -> gate
    gate -> exit [label="[A] Approve"]
}
"#,
    )
    .unwrap();
    common::commit_all_in_new_repository(root);
    Some(dir)
}

#[test]
fn a_worktree_run_commits_every_stage_and_leaves_the_checkout_alone() {
    let Some(repo) = repository() else {
        eprintln!("SKIPPED: git is not installed");
        return;
    };
    let root = repo.path();
    let head_before = git(root, &["rev-parse", "HEAD"]);
    let output =
        fabro(root, &["run", "w.dot", "--worktree", "--auto-approve", "--run-dir", ".fabro/runs/one", "-q"]);
    let stderr = String::from_utf8_lossy(&output.stderr).into_owned();
    assert_eq!(output.status.code(), Some(0), "{stderr}");

    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(".fabro/runs/one/manifest.json")).unwrap())
            .unwrap();
    let run_id = manifest["run_id"].as_str().unwrap().to_string();
    let branch = format!("fabro/run/{run_id}");
    assert_eq!(manifest["worktree"]["branch"], branch.as_str());
    assert!(stderr.contains(&branch), "the summary names the branch: {stderr}");

    // The user's checkout did not change.
    assert_eq!(git(root, &["rev-parse", "HEAD"]), head_before);
    assert_eq!(git(root, &["status", "--porcelain"]), "");
    assert_eq!(std::fs::read_to_string(root.join("README")).unwrap(), "hello\n");

    // One commit per stage on the run branch, with trailers; the stage's changes are in it.
    let subjects = git(root, &["log", "--format=%s", &format!("{head_before}..{branch}")]);
    assert_eq!(
        subjects.lines().collect::<Vec<_>>(),
        [
            format!("fabro({run_id}): exit (success)"),
            format!("fabro({run_id}): gate (success)"),
            format!("fabro({run_id}): edit (success)"),
            format!("fabro({run_id}): write (success)"),
            format!("fabro({run_id}): start (success)"),
        ]
    );
    // The run's report lists them, newest first.
    let report = fabro(root, &["report", ".fabro/runs/one"]);
    let report = String::from_utf8_lossy(&report.stdout).into_owned();
    let listed: Vec<&str> = report
        .lines()
        .filter(|line| line.starts_with("  - `"))
        .filter_map(|line| line.split_once("` ").map(|(_, summary)| summary))
        .collect();
    assert_eq!(listed.len(), 5, "{report}");
    assert_eq!(listed[0], format!("fabro({run_id}): exit (success)"), "{report}");
    assert_eq!(listed[4], format!("fabro({run_id}): start (success)"), "{report}");
    let body = git(root, &["log", "--format=%B", "-1", &format!("{branch}~1")]);
    assert!(
        body.contains(&format!("Fabro-Run: {run_id}"))
            && body.contains("Fabro-Node: gate")
            && body.contains("Fabro-Visit: 1"),
        "{body}"
    );
    assert_eq!(git(root, &["show", &format!("{branch}:README")]), "hello\nchanged");
    assert_eq!(git(root, &["show", &format!("{branch}:generated.txt")]), "generated");
    let checkpoint: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(".fabro/runs/one/checkpoint.json")).unwrap())
            .unwrap();
    assert_eq!(checkpoint["commit"].as_str().unwrap(), git(root, &["rev-parse", &branch]));
}

#[test]
fn resume_and_fork_use_the_checkpoint_commit() {
    let Some(repo) = repository() else {
        eprintln!("SKIPPED: git is not installed");
        return;
    };
    let root = repo.path();
    // Without an answer the run pauses at the gate.
    let paused = fabro(root, &["run", "w.dot", "--worktree", "--run-dir", ".fabro/runs/two", "-q"]);
    assert_eq!(paused.status.code(), Some(3), "{}", String::from_utf8_lossy(&paused.stderr));
    let worktree = root.join(".fabro/runs/two/worktree");
    // Someone scribbles in the worktree while the run waits: resume restores the checkpoint's commit.
    std::fs::write(worktree.join("generated.txt"), "scribbled\n").unwrap();
    std::fs::write(worktree.join("stray.txt"), "stray\n").unwrap();
    let resumed = fabro(root, &["resume", ".fabro/runs/two", "--auto-approve", "-q"]);
    assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert_eq!(std::fs::read_to_string(worktree.join("generated.txt")).unwrap(), "generated\n");
    assert!(!worktree.join("stray.txt").exists());

    // A fork at `write` gets its own branch and worktree at that stage's commit.
    let forked = fabro(root, &["fork", ".fabro/runs/two", "--at", "write", "--run-dir", ".fabro/runs/fork"]);
    assert_eq!(forked.status.code(), Some(0), "{}", String::from_utf8_lossy(&forked.stderr));
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(root.join(".fabro/runs/fork/manifest.json")).unwrap())
            .unwrap();
    let fork_branch = manifest["worktree"]["branch"].as_str().unwrap().to_string();
    assert!(
        fork_branch.starts_with("fabro/run/")
            && fork_branch != format!("fabro/run/{}", manifest["forked_from"]["run_id"].as_str().unwrap())
    );
    let fork_tree = root.join(".fabro/runs/fork/worktree");
    assert_eq!(std::fs::read_to_string(fork_tree.join("README")).unwrap(), "hello\n", "before `edit` ran");
    let resumed = fabro(root, &["resume", ".fabro/runs/fork", "--auto-approve", "-q"]);
    assert_eq!(resumed.status.code(), Some(0), "{}", String::from_utf8_lossy(&resumed.stderr));
    assert_eq!(std::fs::read_to_string(fork_tree.join("README")).unwrap(), "hello\nchanged\n");
    // The original run's worktree is untouched by the fork.
    assert_eq!(std::fs::read_to_string(worktree.join("README")).unwrap(), "hello\nchanged\n");
}

#[test]
fn worktree_mode_outside_a_repository_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("w.dot"),
        "digraph w { start [shape=Mdiamond]; exit [shape=Msquare]; start -> exit }",
    )
    .unwrap();
    let output = fabro(dir.path(), &["run", "w.dot", "--worktree", "-q"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&output.stderr).contains("--worktree needs a git repository"));
}
