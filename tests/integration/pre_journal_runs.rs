//! Run directories made before the run journal still resume, inspect, fork and rewind.
//!
//! `tests/fixtures/pre_journal_run` is a paused run made by the fabro of commit 2ad1d76, the last
//! one before the journal: `fabro run workflow.dot --run-dir run --answers redo.json` with
//! `{"gate": ["R"]}`, so `plan` and `check` ran twice and the gate waits for its second answer.
//! It has `checkpoint.json` and a copy per stage in `checkpoints/`, and no `journal.jsonl`. Its
//! files name their work directory `@WORK_DIR@`; each test copies the run into a temporary work
//! directory with that directory's path written in.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::Output;

use serde_json::{json, Value};

struct Legacy(tempfile::TempDir);

impl Legacy {
    /// The fixture's run as `<temp>/run`, its workflow as `<temp>/workflow.dot` and the log its
    /// command stages wrote as `<temp>/log`.
    fn new() -> Legacy {
        let dir = tempfile::tempdir().expect("temp dir");
        let work_dir = dir.path().display().to_string();
        copy_tree(
            &common::repo_root().join("tests/fixtures/pre_journal_run"),
            &dir.path().join("run"),
            &work_dir,
        );
        // The directory the waiting gate's second visit had made (git keeps no empty directory).
        std::fs::create_dir_all(dir.path().join("run/stages/gate/2")).unwrap();
        std::fs::copy(dir.path().join("run/workflow.dot"), dir.path().join("workflow.dot")).unwrap();
        std::fs::write(dir.path().join("log"), "plan\nplan\n").unwrap();
        std::fs::write(dir.path().join("approve.json"), r#"{"gate": ["A"]}"#).unwrap();
        Legacy(dir)
    }

    fn path(&self, name: &str) -> PathBuf {
        self.0.path().join(name)
    }

    fn fabro(&self, args: &[&str], expected: i32) -> Output {
        let output = common::fabro_in(self.0.path(), args);
        assert_eq!(
            output.status.code(),
            Some(expected),
            "fabro {args:?}\nstdout:\n{}\nstderr:\n{}",
            String::from_utf8_lossy(&output.stdout),
            String::from_utf8_lossy(&output.stderr)
        );
        output
    }

    fn json(&self, name: &str) -> Value {
        let text = std::fs::read_to_string(self.path(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn log(&self) -> String {
        std::fs::read_to_string(self.path("log")).unwrap()
    }
}

fn copy_tree(from: &Path, to: &Path, work_dir: &str) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap().flatten() {
        let target = to.join(entry.file_name());
        if entry.file_type().unwrap().is_dir() {
            copy_tree(&entry.path(), &target, work_dir);
        } else {
            let text = std::fs::read_to_string(entry.path()).unwrap();
            std::fs::write(target, text.replace("@WORK_DIR@", work_dir)).unwrap();
        }
    }
}

fn pairs(list: &[(&str, u64)]) -> Vec<(String, u64)> {
    list.iter().map(|(node, visit)| (node.to_string(), *visit)).collect()
}

const BEFORE_RESUME: [(&str, u64); 6] =
    [("start", 1), ("plan", 1), ("check", 1), ("gate", 1), ("plan", 2), ("check", 2)];

#[test]
fn a_paused_run_from_before_the_journal_resumes_and_goes_on_in_a_journal() {
    let legacy = Legacy::new();
    let run_id = legacy.json("run/manifest.json")["run_id"].clone();
    let output = legacy.fabro(&["inspect", "run"], 0);
    let shown = String::from_utf8_lossy(&output.stdout);
    assert!(shown.contains("paused") && shown.contains("gate"), "{shown}");

    legacy.fabro(&["resume", "run", "--answers", "approve.json", "-q"], 0);
    assert_eq!(legacy.log(), "plan\nplan\nship\n", "no stage that had run ran again");
    let result = legacy.json("run/result.json");
    assert_eq!(result["status"], "succeeded");
    assert_eq!(result["run_id"], run_id);
    let mut expected = BEFORE_RESUME.to_vec();
    expected.extend([("gate", 2), ("ship", 1), ("exit", 1)]);
    assert_eq!(common::stage_pairs(&result), pairs(&expected));

    // The run goes on in a journal whose first entry holds the whole state (the old stages and
    // the first new one); the old checkpoints are left as they were.
    let journal = common::journal_lines(&legacy.path("run"));
    assert_eq!(journal[0].1["reset"], true);
    assert_eq!(journal[0].1["stages"].as_array().map(Vec::len), Some(BEFORE_RESUME.len() + 1));
    assert_eq!(journal[0].1["set"]["plan.size"], "small", "the context the old run had set");
    assert_eq!(journal.last().unwrap().1["status"], "succeeded");
    assert_eq!(std::fs::read_dir(legacy.path("run/checkpoints")).unwrap().count(), 7);
    let snapshot = legacy.json("run/checkpoint.json");
    assert_eq!(snapshot["journal_seq"], journal.len());
    assert_eq!(snapshot["context"]["plan.size"], "small");
    assert_eq!(
        snapshot["node_visits"],
        json!({"check": 2, "exit": 1, "gate": 2, "plan": 2, "ship": 1, "start": 1})
    );

    // Events go on from the old log's last seq.
    let events = std::fs::read_to_string(legacy.path("run/events.jsonl")).unwrap();
    let seqs: Vec<u64> = events
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap()["seq"].as_u64().unwrap())
        .collect();
    assert!(seqs.windows(2).all(|pair| pair[1] == pair[0] + 1), "{seqs:?}");
}

#[test]
fn a_run_from_before_the_journal_forks_and_rewinds_before_and_after_it_goes_on() {
    // Forked as it was left: the fork's journal holds the state after `plan@1`.
    let legacy = Legacy::new();
    legacy.fabro(&["fork", "run", "--at", "plan@1", "--run-dir", "fork"], 0);
    let journal = common::journal_lines(&legacy.path("fork"));
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].1["reset"], true);
    assert_eq!(journal[0].1["stages"].as_array().map(Vec::len), Some(2));
    legacy.fabro(&["resume", "fork", "--answers", "approve.json", "-q"], 0);
    assert_eq!(legacy.log(), "plan\nplan\nship\n");
    let mut expected = BEFORE_RESUME[..2].to_vec();
    expected.extend([("check", 1), ("gate", 1), ("ship", 1), ("exit", 1)]);
    assert_eq!(common::stage_pairs(&legacy.json("fork/result.json")), pairs(&expected));

    // Continued, then rewound to a stage the old binary ran: the journal keeps its first entry
    // (the old run's whole state) cut to that stage, and the run goes on from there.
    let legacy = Legacy::new();
    legacy.fabro(&["resume", "run", "--answers", "approve.json", "-q"], 0);
    legacy.fabro(&["rewind", "run", "--to", "check@2"], 0);
    // The point is one of the old checkpoints: all of the journal came after it and moved aside,
    // and the run is an old-format one again.
    assert!(!legacy.path("run/journal.jsonl").exists());
    let rewound: Vec<_> = std::fs::read_dir(legacy.path("run/rewound")).unwrap().flatten().collect();
    assert!(rewound[0].path().join("journal.jsonl").is_file());
    let checkpoint = legacy.json("run/checkpoint.json");
    assert_eq!(checkpoint["next_node"], "gate");
    assert_eq!(checkpoint["node_visits"]["check"], 2);
    assert!(checkpoint["node_visits"].get("ship").is_none(), "{checkpoint}");
    legacy.fabro(&["resume", "run", "--answers", "approve.json", "-q"], 0);
    assert_eq!(legacy.log(), "plan\nplan\nship\nship\n");
    let mut expected = BEFORE_RESUME.to_vec();
    expected.extend([("gate", 2), ("ship", 1), ("exit", 1)]);
    assert_eq!(common::stage_pairs(&legacy.json("run/result.json")), pairs(&expected));

    // And to a stage it ran after it went on.
    legacy.fabro(&["rewind", "run", "--to", "ship@1"], 0);
    legacy.fabro(&["resume", "run", "-q"], 0);
    assert_eq!(legacy.log(), "plan\nplan\nship\nship\n", "ship is not run again");
    assert_eq!(legacy.json("run/result.json")["status"], "succeeded");
}
