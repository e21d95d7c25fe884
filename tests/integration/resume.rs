//! `fabro resume`: a paused, interrupted or crashed run continues from its checkpoint with the
//! same run id and directory; finished, foreign and corrupt directories are refused untouched.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{json, Value};

/// A temporary directory in which `fabro` runs several times.
struct Dir(tempfile::TempDir);

impl Dir {
    fn new(files: &[(&str, &str)]) -> Dir {
        let dir = tempfile::tempdir().expect("temp dir");
        for (name, text) in files {
            std::fs::write(dir.path().join(name), text).expect("write");
        }
        Dir(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }

    fn fabro(&self, args: &[&str]) -> Output {
        common::fabro_in(self.0.path(), args)
    }

    fn json(&self, name: &str) -> Value {
        let text = std::fs::read_to_string(self.path(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn events(&self) -> Vec<Value> {
        std::fs::read_to_string(self.path("run/events.jsonl"))
            .expect("events")
            .lines()
            .map(|line| serde_json::from_str(line).expect("event json"))
            .collect()
    }
}

fn code(output: &Output) -> Option<i32> {
    output.status.code()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

const GATED: &str = r#"digraph gated {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    plan [shape=parallelogram, script="echo plan >> log"]
    gate [shape=hexagon, label="Ship it?"]
    ship [shape=parallelogram, script="echo ship >> log"]
    start -> plan -> gate
    gate -> ship [label="[A] Approve"]
    gate -> exit [label="[S] Skip"]
    ship -> exit
}
"#;

#[test]
fn a_paused_run_resumes_with_an_answer_and_never_reruns_completed_stages() {
    let dir = Dir::new(&[("w.dot", GATED), ("answers.json", r#"{"gate": ["A"]}"#)]);
    let paused = dir.fabro(&["run", "w.dot", "--run-dir", "run", "-q"]);
    assert_eq!(code(&paused), Some(3), "{}", stderr(&paused));
    assert!(stderr(&paused).contains("resume with: fabro resume run --answers FILE"), "{}", stderr(&paused));
    let run_id = dir.json("run/manifest.json")["run_id"].clone();
    assert_eq!(dir.json("run/checkpoint.json")["status"], "paused");

    let resumed = dir.fabro(&["resume", "run", "--answers", "answers.json", "-q"]);
    assert_eq!(code(&resumed), Some(0), "{}", stderr(&resumed));
    let result = dir.json("run/result.json");
    assert_eq!(result["status"], "succeeded");
    assert_eq!(result["run_id"], run_id);
    assert_eq!(result["completed_nodes"], json!(["start", "plan", "gate", "ship", "exit"]));
    assert_eq!(std::fs::read_to_string(dir.path("log")).unwrap(), "plan\nship\n", "plan ran once");
    let manifest = dir.json("run/manifest.json");
    assert_eq!(manifest["status"], "succeeded");
    assert_eq!(manifest["run_id"], run_id);

    let events = dir.events();
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "one log, sequence continues: {seqs:?}");
    assert!(events.iter().all(|e| e["run_id"] == run_id));
    let resumed_event = events.iter().find(|e| e["event"] == "run.resumed").expect("run.resumed");
    assert_eq!(resumed_event["from"], "gate");
    assert_eq!(resumed_event["previous_status"], "paused");
    // The gate's paused visit keeps its directory; the resumed visit gets its own, and the run's
    // records name the one it finished in.
    assert!(dir.path("run/stages/gate/1").is_dir() && dir.path("run/stages/gate/1.2").is_dir());
    let dirs: Vec<(&str, Option<&str>)> = result["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|stage| (stage["node_id"].as_str().unwrap(), stage["dir"].as_str()))
        .collect();
    assert_eq!(
        dirs,
        [
            ("start", None),
            ("plan", Some("stages/plan/1")),
            ("gate", Some("stages/gate/1.2")),
            ("ship", Some("stages/ship/1")),
            ("exit", None),
        ]
    );
}

/// Attractor 11.12: "Checkpoint save and resume produces same result".
#[test]
fn checkpoint_save_and_resume_produces_the_same_result() {
    let straight = Dir::new(&[("w.dot", GATED), ("answers.json", r#"{"gate": ["A"]}"#)]);
    let output = straight.fabro(&["run", "w.dot", "--run-dir", "run", "--answers", "answers.json", "-q"]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));

    let split = Dir::new(&[("w.dot", GATED), ("answers.json", r#"{"gate": ["A"]}"#)]);
    assert_eq!(code(&split.fabro(&["run", "w.dot", "--run-dir", "run", "-q"])), Some(3));
    assert_eq!(code(&split.fabro(&["resume", "run", "--answers", "answers.json", "-q"])), Some(0));

    let (a, b) = (straight.json("run/checkpoint.json"), split.json("run/checkpoint.json"));
    for key in [
        "status",
        "current_node",
        "next_node",
        "completed_nodes",
        "node_outcomes",
        "node_visits",
        "node_retries",
    ] {
        assert_eq!(a[key], b[key], "{key}");
    }
    let context = |c: &Value| {
        let mut map = c["context"].as_object().unwrap().clone();
        for key in ["internal.run_id", "internal.work_dir"] {
            map.remove(key);
        }
        map
    };
    assert_eq!(context(&a), context(&b));
    assert_eq!(
        std::fs::read_to_string(straight.path("log")).unwrap(),
        std::fs::read_to_string(split.path("log")).unwrap()
    );
}

#[test]
fn an_interrupted_run_reruns_the_stage_in_flight() {
    let workflow = r#"digraph slow {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    first [shape=parallelogram, script="echo first >> log"]
    slow [shape=parallelogram, script="echo slow >> log; if [ ! -f resumed ]; then echo $$ > slow.pid; sleep 30; fi"]
    start -> first -> slow -> exit
}
"#;
    let dir = Dir::new(&[("w.dot", workflow)]);
    let child = common::fabro_command(dir.0.path(), &["run", "w.dot", "--run-dir", "run", "-q"])
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    common::wait_for_file(&dir.path("slow.pid"), "the slow stage");
    // SAFETY: sending a signal to our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let output = child.wait_with_output().expect("wait");
    assert_eq!(code(&output), Some(130), "{}", stderr(&output));
    assert_eq!(dir.json("run/checkpoint.json")["status"], "interrupted");
    assert_eq!(dir.json("run/checkpoint.json")["next_node"], "slow");

    std::fs::write(dir.path("resumed"), "").unwrap();
    let resumed = dir.fabro(&["resume", "run", "-q"]);
    assert_eq!(code(&resumed), Some(0), "{}", stderr(&resumed));
    assert_eq!(std::fs::read_to_string(dir.path("log")).unwrap(), "first\nslow\nslow\n", "at least once");
    assert!(dir.path("run/stages/slow/1").is_dir() && dir.path("run/stages/slow/1.2").is_dir());
    assert_eq!(dir.json("run/result.json")["completed_nodes"], json!(["start", "first", "slow", "exit"]));
}

fn assert_refused(dir: &Dir, run_dir: &str, message: &str) {
    let before = snapshot(&dir.path(run_dir));
    let output = dir.fabro(&["resume", run_dir]);
    assert_eq!(code(&output), Some(2), "{}", stderr(&output));
    assert!(stderr(&output).contains(message), "{}", stderr(&output));
    assert_eq!(snapshot(&dir.path(run_dir)), before, "a refused resume changes nothing");
}

/// Every file under `root` with its contents.
fn snapshot(root: &Path) -> Vec<(PathBuf, Vec<u8>)> {
    let mut files = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push((path.clone(), std::fs::read(&path).unwrap_or_default()));
            }
        }
    }
    files.sort();
    files
}

#[test]
fn finished_foreign_and_corrupt_directories_are_refused_untouched() {
    let dir = Dir::new(&[("w.dot", GATED)]);
    assert_eq!(code(&dir.fabro(&["run", "w.dot", "--run-dir", "run", "--auto-approve", "-q"])), Some(0));
    assert_refused(&dir, "run", "already succeeded; there is nothing to resume");

    std::fs::create_dir(dir.path("empty")).unwrap();
    assert_refused(&dir, "empty", "is not a fabro run directory (no manifest.json)");

    let failing = GATED.replace("echo plan >> log", "exit 1");
    let dir = Dir::new(&[("w.dot", &failing)]);
    assert_eq!(code(&dir.fabro(&["run", "w.dot", "--run-dir", "run", "-q"])), Some(1));
    assert_refused(&dir, "run", "already failed");

    let dir = Dir::new(&[("w.dot", GATED)]);
    assert_eq!(code(&dir.fabro(&["run", "w.dot", "--run-dir", "run", "-q"])), Some(3));
    std::fs::write(dir.path("run/checkpoint.json"), "{\"run_id\": ").unwrap();
    assert_refused(&dir, "run", "checkpoint.json` is corrupt: EOF while parsing");
}

#[test]
fn a_changed_workflow_file_is_noted_and_the_stored_copy_runs() {
    let dir = Dir::new(&[("w.dot", GATED)]);
    assert_eq!(code(&dir.fabro(&["run", "w.dot", "--run-dir", "run", "-q"])), Some(3));
    std::fs::write(dir.path("w.dot"), GATED.replace("echo ship >> log", "echo changed >> log")).unwrap();
    let output = dir.fabro(&["resume", "run", "--auto-approve", "-q"]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    assert!(
        stderr(&output).contains("changed since the run started; continuing with the copy stored"),
        "{}",
        stderr(&output)
    );
    assert_eq!(std::fs::read_to_string(dir.path("log")).unwrap(), "plan\nship\n");
}

#[test]
fn a_run_directory_is_driven_by_one_process_at_a_time() {
    let workflow = r#"digraph busy {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    slow [shape=parallelogram, script="echo $$ > slow.pid; sleep 30"]
    start -> slow -> exit
}
"#;
    let dir = Dir::new(&[("w.dot", workflow)]);
    let mut child = common::fabro_command(dir.0.path(), &["run", "w.dot", "--run-dir", "run", "-q"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    common::wait_for_file(&dir.path("slow.pid"), "the slow stage");
    let lock = std::fs::read_to_string(dir.path("run/run.lock")).expect("the running process holds the lock");
    assert_eq!(lock.trim(), child.id().to_string());
    let second = dir.fabro(&["resume", "run"]);
    // SAFETY: stopping our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let _ = child.wait();
    assert_eq!(code(&second), Some(2), "{}", stderr(&second));
    assert!(stderr(&second).contains(&format!("is in use by process {}", child.id())), "{}", stderr(&second));
    assert!(!dir.path("run/run.lock").exists(), "the lock is released when the run stops");
}

#[test]
fn every_change_of_state_is_journaled_and_numbering_continues_after_resume() {
    let dir = Dir::new(&[("w.dot", GATED), ("answers.json", r#"{"gate": ["A"]}"#)]);
    assert_eq!(
        code(&dir.fabro(&["run", "w.dot", "--run-dir", "run", "-q", "--checkpoint-sync", "never"])),
        Some(3)
    );
    assert_eq!(code(&dir.fabro(&["resume", "run", "--answers", "answers.json", "-q"])), Some(0));
    let journal = common::journal_lines(&dir.path("run"));
    let entries: Vec<(u64, &str, &str)> = journal
        .iter()
        .map(|(_, e)| {
            (e["seq"].as_u64().unwrap(), e["node"].as_str().unwrap(), e["status"].as_str().unwrap())
        })
        .collect();
    assert_eq!(
        entries,
        [
            (1, "start", "running"),
            (2, "plan", "running"),
            (3, "gate", "paused"),
            (4, "gate", "running"),
            (5, "ship", "running"),
            (6, "exit", "succeeded")
        ]
    );
    let saved = dir.events().iter().filter(|e| e["event"] == "checkpoint.saved").count();
    assert_eq!(saved, journal.len(), "one journal entry per saved checkpoint");
    assert!(!dir.path("run/checkpoints").exists());
    let snapshot = dir.json("run/checkpoint.json");
    assert_eq!(snapshot["journal_seq"], 6);
    assert_eq!(snapshot["status"], "succeeded");
    assert_eq!(snapshot["completed_nodes"], json!(["start", "plan", "gate", "ship", "exit"]));
}

#[test]
fn resume_can_continue_with_a_changed_workflow_unless_it_drops_a_needed_node() {
    let dir = Dir::new(&[("w.dot", GATED), ("answers.json", r#"{"gate": ["A"]}"#)]);
    assert_eq!(code(&dir.fabro(&["run", "w.dot", "--run-dir", "run", "-q"])), Some(3));

    // Renaming `plan` (a completed stage) is refused and changes nothing.
    std::fs::write(dir.path("renamed.dot"), GATED.replace("plan", "design")).unwrap();
    let before = snapshot(&dir.path("run"));
    let refused = dir.fabro(&["resume", "run", "--workflow", "renamed.dot", "--answers", "answers.json"]);
    assert_eq!(code(&refused), Some(2), "{}", stderr(&refused));
    assert!(
        stderr(&refused).contains("lacks node(s) `plan` that the checkpoint needs"),
        "{}",
        stderr(&refused)
    );
    assert_eq!(snapshot(&dir.path("run")), before);

    // Changing what `ship` does is fine: the new file runs, the stored copy is kept aside.
    let changed = GATED.replace("echo ship >> log", "echo shipped-v2 >> log");
    std::fs::write(dir.path("changed.dot"), &changed).unwrap();
    let output =
        dir.fabro(&["resume", "run", "--workflow", "changed.dot", "--answers", "answers.json", "-q"]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    assert_eq!(std::fs::read_to_string(dir.path("log")).unwrap(), "plan\nshipped-v2\n");
    assert_eq!(std::fs::read_to_string(dir.path("run/workflow.dot")).unwrap(), changed);
    assert_eq!(std::fs::read_to_string(dir.path("run/workflow.1.dot")).unwrap(), GATED);
    let manifest = dir.json("run/manifest.json");
    assert_eq!(manifest["source_path"], "changed.dot");
    assert_eq!(manifest["source_sha256"], fabro::source::sha256_hex(&changed));
}

#[test]
fn the_first_stage_after_resume_degrades_full_fidelity_to_summary_high() {
    let workflow = r#"digraph threads {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    slow [shape=parallelogram, fidelity=full, script="cp \"$FABRO_CONTEXT\" slow-$FABRO_VISIT.json; if [ ! -f resumed ]; then echo $$ > slow.pid; sleep 30; fi"]
    after [shape=parallelogram, fidelity=full, script="cp \"$FABRO_CONTEXT\" after.json"]
    start -> slow -> after -> exit
}
"#;
    let dir = Dir::new(&[("w.dot", workflow)]);
    let child = common::fabro_command(dir.0.path(), &["run", "w.dot", "--run-dir", "run", "-q"])
        .stderr(std::process::Stdio::null())
        .spawn()
        .expect("spawn");
    common::wait_for_file(&dir.path("slow.pid"), "the slow stage");
    assert_eq!(dir.json("slow-1.json")["internal.fidelity"], "full");
    // SAFETY: stopping our own child process.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let _ = child.wait_with_output();
    std::fs::write(dir.path("resumed"), "").unwrap();
    std::fs::remove_file(dir.path("slow-1.json")).unwrap();
    let output = dir.fabro(&["resume", "run", "-q"]);
    assert_eq!(code(&output), Some(0), "{}", stderr(&output));
    assert_eq!(dir.json("slow-1.json")["internal.fidelity"], "summary:high", "the first stage after resume");
    assert_eq!(dir.json("after.json")["internal.fidelity"], "full", "later stages are not degraded");
}

/// A run that pauses at two gates and is resumed twice shows the first gate's choice in later
/// preambles, as the same run in one go does: the summaries rebuilt on the second resume read
/// the directory where the gate's visit finished (`1.2`), not the one where it paused (`1`).
#[test]
fn preambles_after_two_resumes_keep_the_choices_of_earlier_gates() {
    let workflow = r#"digraph two_gates {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    gate1 [shape=hexagon, label="First?"]
    gate2 [shape=hexagon, label="Second?"]
    write [shape=box, prompt="Write it up", fidelity="compact"]
    start -> gate1
    gate1 -> gate2 [label="[Y] Yes"]
    gate1 -> exit [label="[N] No"]
    gate2 -> write [label="[G] Go"]
    gate2 -> exit [label="[S] Stop"]
    write -> exit
}
"#;
    let dir = Dir::new(&[
        ("w.dot", workflow),
        ("first.json", r#"{"gate1": ["Y"]}"#),
        ("second.json", r#"{"gate2": ["G"]}"#),
        ("both.json", r#"{"gate1": ["Y"], "gate2": ["G"]}"#),
    ]);
    let paused = dir.fabro(&["run", "w.dot", "--run-dir", "run", "--simulate", "-q"]);
    assert_eq!(code(&paused), Some(3), "{}", stderr(&paused));
    let again = dir.fabro(&["resume", "run", "--answers", "first.json", "-q"]);
    assert_eq!(code(&again), Some(3), "paused at gate2: {}", stderr(&again));
    let done = dir.fabro(&["resume", "run", "--answers", "second.json", "-q"]);
    assert_eq!(code(&done), Some(0), "{}", stderr(&done));
    let preamble = std::fs::read_to_string(dir.path("run/stages/write/1/preamble.md")).unwrap();

    let straight =
        dir.fabro(&["run", "w.dot", "--run-dir", "straight", "--simulate", "--answers", "both.json", "-q"]);
    assert_eq!(code(&straight), Some(0), "{}", stderr(&straight));
    let expected = std::fs::read_to_string(dir.path("straight/stages/write/1/preamble.md")).unwrap();
    assert!(expected.contains("Choice: [Y] Yes"), "{expected}");
    assert!(preamble.contains("Choice: [Y] Yes"), "{preamble}");
    assert!(preamble.contains("Choice: [G] Go"), "{preamble}");
}

#[test]
fn a_tampered_visit_counter_is_refused_instead_of_wrapping_past_the_visit_cap() {
    let dir = Dir::new(&[("w.dot", GATED)]);
    assert_eq!(code(&dir.fabro(&["run", "w.dot", "--run-dir", "run", "-q"])), Some(3));
    let journal = std::fs::read_to_string(dir.path("run/journal.jsonl")).unwrap();
    assert!(journal.contains("\"plan\":1"), "{journal}");
    std::fs::write(dir.path("run/journal.jsonl"), journal.replace("\"plan\":1", "\"plan\":4294967295"))
        .unwrap();
    for args in [&["resume", "run"][..], &["inspect", "run"], &["fork", "--at", "plan", "run"]] {
        let output = dir.fabro(args);
        assert_ne!(code(&output), Some(0), "{args:?}");
        assert!(
            stderr(&output).contains("the counter of `plan` is 4294967295, more than any run reaches"),
            "{args:?}: {}",
            stderr(&output)
        );
    }
}

#[test]
fn an_emptied_journal_tells_one_story_with_an_instruction_that_works() {
    let dir = Dir::new(&[("w.dot", GATED)]);
    assert_eq!(code(&dir.fabro(&["run", "w.dot", "--run-dir", "run", "-q"])), Some(3));
    assert!(dir.json("run/checkpoint.json")["journal_seq"].is_u64(), "a snapshot covering the journal");
    std::fs::write(dir.path("run/journal.jsonl"), "").unwrap();
    let story = "it holds no entry, but checkpoint.json records the state after entry";
    let instruction = "fabro run WORKFLOW --run-dir NEW_DIR";
    for args in [&["resume", "run"][..], &["inspect", "run"], &["fork", "--at", "plan", "run"]] {
        let output = dir.fabro(args);
        assert_ne!(code(&output), Some(0), "{args:?}");
        let said = stderr(&output);
        assert!(said.contains(story) && said.contains(instruction), "{args:?}: {said}");
    }
    // The instruction works.
    assert_eq!(code(&dir.fabro(&["run", "w.dot", "--run-dir", "again", "-q"])), Some(3));
}
