//! `fabro fork`, `fabro rewind` and `fabro runs`: going back to the state right after any
//! completed stage visit, in a new run directory or in place, and listing runs.

use crate::common;

use std::collections::BTreeMap;
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

    /// Runs `fabro ARGS` and checks the exit code.
    fn ok(&self, args: &[&str], expected: i32) -> Output {
        let output = self.fabro(args);
        assert_eq!(
            output.status.code(),
            Some(expected),
            "fabro {}\n--- stdout\n{}\n--- stderr\n{}",
            args.join(" "),
            String::from_utf8_lossy(&output.stdout),
            stderr(&output)
        );
        output
    }

    fn json(&self, name: &str) -> Value {
        let text = std::fs::read_to_string(self.path(name)).unwrap_or_else(|e| panic!("{name}: {e}"));
        serde_json::from_str(&text).unwrap_or_else(|e| panic!("{name}: {e}"))
    }

    fn events(&self, run: &str) -> Vec<Value> {
        std::fs::read_to_string(self.path(&format!("{run}/events.jsonl")))
            .expect("events")
            .lines()
            .map(|line| serde_json::from_str(line).expect("event json"))
            .collect()
    }

    /// The visits the `work` stage logged for a run id.
    fn work_visits(&self, run_id: &Value) -> Vec<u32> {
        let run_id = run_id.as_str().expect("run id");
        std::fs::read_to_string(self.path("log"))
            .unwrap_or_default()
            .lines()
            .filter_map(|line| line.strip_prefix(run_id)?.trim().parse().ok())
            .collect()
    }
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn stdout(output: &Output) -> String {
    String::from_utf8_lossy(&output.stdout).into_owned()
}

/// Every file under `root`, by relative path, with its contents.
fn snapshot(root: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    fn walk(root: &Path, dir: &Path, out: &mut BTreeMap<PathBuf, Vec<u8>>) {
        for entry in std::fs::read_dir(dir).expect("read dir").flatten() {
            let path = entry.path();
            if path.is_dir() {
                walk(root, &path, out);
            } else {
                let relative = path.strip_prefix(root).expect("inside").to_path_buf();
                out.insert(relative, std::fs::read(&path).expect("read"));
            }
        }
    }
    let mut files = BTreeMap::new();
    walk(root, root, &mut files);
    files
}

/// `work` fails on its first two visits and succeeds on the third; each visit logs
/// `<run id> <visit>` and bumps a counter file.
const LOOP: &str = r#"digraph looping {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=parallelogram, script="echo \"$FABRO_RUN_ID $FABRO_VISIT\" >> log; n=$(cat count 2>/dev/null || echo 0); echo $((n + 1)) > count; test \"$FABRO_VISIT\" -ge 3"]
    done [shape=parallelogram, script="echo done"]
    start -> work
    work -> work [condition="outcome=fail"]
    work -> done [condition="outcome=success"]
    done -> exit
}
"#;

/// Runs LOOP to success in `runs/orig`.
fn finished_run() -> Dir {
    let dir = Dir::new(&[("w.dot", LOOP)]);
    dir.ok(&["run", "w.dot", "--run-dir", "runs/orig", "-q"], 0);
    assert_eq!(dir.json("runs/orig/manifest.json")["status"], "succeeded");
    let run_id = dir.json("runs/orig/manifest.json")["run_id"].clone();
    assert_eq!(dir.work_visits(&run_id), vec![1, 2, 3]);
    dir
}

#[test]
fn a_fork_continues_from_the_chosen_visit_and_leaves_the_original_alone() {
    let dir = finished_run();
    let original = snapshot(&dir.path("runs/orig"));
    let orig_id = dir.json("runs/orig/manifest.json")["run_id"].clone();

    let output = dir.ok(&["fork", "runs/orig", "--at", "work@2", "--run-dir", "runs/fork"], 0);
    assert!(stdout(&output).contains("fabro resume runs/fork"), "{}", stdout(&output));
    let manifest = dir.json("runs/fork/manifest.json");
    let fork_id = manifest["run_id"].clone();
    assert_ne!(fork_id, orig_id);
    assert_eq!(manifest["status"], "interrupted");
    assert_eq!(manifest["finished_at"], Value::Null);
    assert_eq!(
        manifest["forked_from"],
        json!({"run_dir": "runs/orig", "run_id": orig_id, "node": "work", "visit": 2})
    );
    let checkpoint = dir.json("runs/fork/checkpoint.json");
    // The fork's journal is one entry holding the whole state.
    let journal = common::journal_lines(&dir.path("runs/fork"));
    assert_eq!(journal.len(), 1);
    assert_eq!(journal[0].1["reset"], true);
    assert_eq!(journal[0].1["stages"].as_array().map(Vec::len), Some(3));
    assert_eq!(checkpoint["journal_seq"], 1);
    assert_eq!(checkpoint["run_id"], fork_id);
    assert_eq!(checkpoint["context"]["internal.run_id"], fork_id);
    assert_eq!(checkpoint["status"], "interrupted");
    assert_eq!(checkpoint["current_node"], "work");
    assert_eq!(checkpoint["next_node"], "work");
    assert_eq!(checkpoint["completed_nodes"], json!(["start", "work", "work"]));
    assert_eq!(checkpoint["node_visits"]["work"], 2);
    assert!(dir.path("runs/fork/stages/work/1").is_dir() && dir.path("runs/fork/stages/work/2").is_dir());
    assert!(dir.path("runs/fork/stages/work/2/status.json").is_file());
    assert!(!dir.path("runs/fork/stages/work/3").exists() && !dir.path("runs/fork/stages/done").exists());
    assert!(dir.path("runs/fork/workflow.dot").is_file());
    let events = dir.events("runs/fork");
    assert_eq!(events.len(), 1);
    assert_eq!(events[0]["event"], "run.forked");
    assert_eq!(events[0]["seq"], 1);
    assert_eq!(events[0]["run_id"], fork_id);
    assert_eq!(events[0]["visit"], 2);

    dir.ok(&["resume", "runs/fork", "-q"], 0);
    assert_eq!(dir.work_visits(&fork_id), vec![3], "the fork's work runs once more, as visit 3");
    let result = dir.json("runs/fork/result.json");
    assert_eq!(result["status"], "succeeded");
    assert_eq!(result["run_id"], fork_id);
    assert_eq!(result["completed_nodes"], json!(["start", "work", "work", "work", "done", "exit"]));
    let stages = common::stage_pairs(&result);
    assert_eq!(
        stages.iter().filter(|(n, _)| n == "work").map(|(_, v)| *v).collect::<Vec<_>>(),
        vec![1, 2, 3]
    );
    assert_eq!(dir.json("runs/fork/manifest.json")["status"], "succeeded");
    // The origin survives resume, in the manifest and as the first event.
    assert_eq!(dir.json("runs/fork/manifest.json")["forked_from"]["visit"], 2);
    assert_eq!(dir.events("runs/fork")[0]["event"], "run.forked");
    assert_eq!(snapshot(&dir.path("runs/orig")), original, "the original run is unchanged");

    // Without --run-dir the fork lands beside the original, named by its id; no visit = the last.
    let output = dir.ok(&["fork", "runs/orig", "--at", "work"], 0);
    let sibling: Vec<PathBuf> = std::fs::read_dir(dir.path("runs"))
        .unwrap()
        .flatten()
        .map(|e| e.path())
        .filter(|p| !p.ends_with("orig") && !p.ends_with("fork"))
        .collect();
    assert_eq!(sibling.len(), 1, "{}", stdout(&output));
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(sibling[0].join("manifest.json")).unwrap()).unwrap();
    assert_eq!(sibling[0].file_name().unwrap().to_str().unwrap(), manifest["run_id"].as_str().unwrap());
    assert_eq!(manifest["forked_from"]["visit"], 3);
}

#[test]
fn rewind_moves_later_history_aside_and_the_run_continues_from_there() {
    let dir = finished_run();
    let run_id = dir.json("runs/orig/manifest.json")["run_id"].clone();
    let before = snapshot(&dir.path("runs/orig"));
    let journal_before = std::fs::read_to_string(dir.path("runs/orig/journal.jsonl")).unwrap();
    let (selected_line, selected) = common::journal_entry_after(&dir.path("runs/orig"), "work");
    assert_eq!(selected["visits"]["work"], 1);

    let output = dir.ok(&["rewind", "runs/orig", "--to", "work@1"], 0);
    assert!(stdout(&output).contains("fabro resume runs/orig"), "{}", stdout(&output));

    // Nothing is deleted: every file is either where it was or under rewound/<timestamp>/.
    let rewound: Vec<PathBuf> =
        std::fs::read_dir(dir.path("runs/orig/rewound")).unwrap().flatten().map(|e| e.path()).collect();
    assert_eq!(rewound.len(), 1);
    let archive = &rewound[0];
    for (relative, bytes) in &before {
        let here = dir.path("runs/orig").join(relative);
        let moved = archive.join(relative);
        assert!(
            (moved.exists() && std::fs::read(&moved).unwrap() == *bytes) || here.exists(),
            "{} was lost",
            relative.display()
        );
    }
    // result.json moves too; the one left behind lists only the visits up to work@1.
    assert_eq!(
        serde_json::from_slice::<Value>(&std::fs::read(archive.join("result.json")).unwrap()).unwrap()
            ["status"],
        "succeeded"
    );
    let result = dir.json("runs/orig/result.json");
    assert_eq!(result["status"], "interrupted");
    assert_eq!(
        common::stage_pairs(&result),
        [("start", 1), ("work", 1)].map(|(n, v)| (n.to_string(), v)).to_vec()
    );
    for gone in ["stages/work/2", "stages/work/3", "stages/done/1"] {
        assert!(!dir.path("runs/orig").join(gone).exists(), "{gone} should have moved");
        assert!(archive.join(gone).exists(), "{gone} should be in {}", archive.display());
    }
    assert!(
        archive.join("stages/work/3/stdout.log").exists()
            || archive.join("stages/work/3/status.json").exists()
    );
    assert!(dir.path("runs/orig/stages/work/1").is_dir());
    // The journal keeps its lines up to the selected entry, and says the run stopped there.
    let journal = std::fs::read_to_string(dir.path("runs/orig/journal.jsonl")).unwrap();
    let kept = &journal_before[..journal_before.find(&selected_line).unwrap() + selected_line.len()];
    assert!(journal.starts_with(kept), "{journal}");
    let last: Value = serde_json::from_str(journal[kept.len()..].trim()).unwrap();
    assert_eq!(
        (last["status"].as_str(), last["node"].as_str(), last["next"].as_str()),
        (Some("interrupted"), Some("work"), Some("work"))
    );
    assert_eq!(std::fs::read_to_string(archive.join("journal.jsonl")).unwrap(), journal_before);

    let checkpoint = dir.json("runs/orig/checkpoint.json");
    assert_eq!(checkpoint["status"], "interrupted");
    assert_eq!(checkpoint["node_visits"]["work"], 1);
    assert_eq!(checkpoint["completed_nodes"], json!(["start", "work"]));
    let manifest = dir.json("runs/orig/manifest.json");
    assert_eq!(manifest["status"], "interrupted");
    assert_eq!(manifest["finished_at"], Value::Null);
    let events = dir.events("runs/orig");
    let last = events.last().unwrap();
    assert_eq!(last["event"], "run.rewound");
    assert_eq!(last["to"], "work");
    assert_eq!(last["visit"], 1);
    assert!(last["moved"].as_array().unwrap().contains(&json!("stages/work/2")));
    let seqs: Vec<u64> = events.iter().map(|e| e["seq"].as_u64().unwrap()).collect();
    assert!(seqs.windows(2).all(|w| w[1] == w[0] + 1), "{seqs:?}");

    dir.ok(&["resume", "runs/orig", "-q"], 0);
    assert_eq!(dir.work_visits(&run_id), vec![1, 2, 3, 2, 3]);
    let result = dir.json("runs/orig/result.json");
    assert_eq!(result["status"], "succeeded");
    assert_eq!(
        common::stage_pairs(&result),
        [("start", 1), ("work", 1), ("work", 2), ("work", 3), ("done", 1), ("exit", 1)]
            .map(|(n, v)| (n.to_string(), v))
            .to_vec()
    );
    assert!(dir.path("runs/orig/stages/work/3").is_dir() && !dir.path("runs/orig/stages/work/3.2").exists());
    // A succeeded run is refused by resume, but can be rewound again.
    dir.ok(&["resume", "runs/orig", "-q"], 2);
    dir.ok(&["rewind", "runs/orig", "--to", "work"], 0);
    assert_eq!(std::fs::read_dir(dir.path("runs/orig/rewound")).unwrap().count(), 2);
}

#[test]
fn fork_and_rewind_refuse_what_they_cannot_do() {
    let dir = finished_run();
    let before = snapshot(&dir.path("runs/orig"));
    let refused = |args: &[&str], message: &str| {
        let output = dir.ok(args, 2);
        assert!(stderr(&output).contains(message), "fabro {}: {}", args.join(" "), stderr(&output));
    };
    refused(&["fork", "runs/orig", "--at", "nope", "--run-dir", "x"], "no completed visit of stage `nope`");
    refused(&["rewind", "runs/orig", "--to", "nope"], "stages with checkpoints: start, work, done, exit");
    refused(&["fork", "runs/orig", "--at", "work@7", "--run-dir", "x"], "completed visits: 1, 2, 3");
    refused(&["rewind", "runs/orig", "--to", "work@4"], "completed visits: 1, 2, 3");
    refused(&["fork", "runs/orig", "--at", "work@x", "--run-dir", "x"], "expected NODE or NODE@VISIT");
    refused(&["fork", "runs/orig", "--at", "exit", "--run-dir", "x"], "nothing to continue");
    refused(
        &["fork", "runs/orig", "--at", "work", "--run-dir", "runs/orig"],
        "already exists and is not empty",
    );
    std::fs::create_dir_all(dir.path("plain")).unwrap();
    refused(&["fork", "plain", "--at", "work"], "is not a fabro run directory");
    refused(&["rewind", "plain", "--to", "work"], "is not a fabro run directory");
    refused(&["rewind", "missing", "--to", "work"], "no run directory or run id `missing`");
    assert!(!dir.path("x").exists(), "a refused fork creates nothing");

    // A run made before checkpoint history existed.
    std::fs::create_dir_all(dir.path("old")).unwrap();
    for name in ["manifest.json", "checkpoint.json", "workflow.dot"] {
        std::fs::copy(dir.path("runs/orig").join(name), dir.path("old").join(name)).unwrap();
    }
    refused(&["fork", "old", "--at", "work", "--run-dir", "x"], "no checkpoint history");
    refused(&["rewind", "old", "--to", "work"], "no checkpoint history");

    // A run held by a live process.
    let held = common::hold_run_lock(&dir.path("runs/orig"));
    refused(&["rewind", "runs/orig", "--to", "work@1"], &format!("in use by process {}", std::process::id()));
    drop(held);
    assert_eq!(snapshot(&dir.path("runs/orig")), before, "refusals change nothing");
}

#[test]
fn runs_lists_newest_first_with_unreadable_entries_and_json() {
    let dir = finished_run();
    dir.ok(&["fork", "runs/orig", "--at", "work@2", "--run-dir", "runs/fork"], 0);
    std::fs::create_dir_all(dir.path("runs/broken")).unwrap();
    std::fs::write(dir.path("runs/broken/manifest.json"), "{not json").unwrap();
    std::fs::create_dir_all(dir.path("runs/not-a-run")).unwrap();
    let orig_id = dir.json("runs/orig/manifest.json")["run_id"].as_str().unwrap().to_string();
    let fork_id = dir.json("runs/fork/manifest.json")["run_id"].as_str().unwrap().to_string();

    let output = dir.ok(&["runs", "--dir", "runs"], 0);
    let text = stdout(&output);
    let lines: Vec<&str> = text.lines().collect();
    assert!(lines[0].starts_with("ID") && lines[0].contains("STATUS"), "{text}");
    assert_eq!(lines.len(), 4, "{text}");
    assert!(lines[1].starts_with(&fork_id[..13]) && lines[1].contains("interrupted"), "{text}");
    assert!(lines[1].contains("looping") && lines[1].contains(" work"), "{text}");
    assert!(lines[2].starts_with(&orig_id[..13]) && lines[2].contains("succeeded"), "{text}");
    assert!(lines[2].contains(" exit ") && lines[2].trim_end().ends_with("runs/orig"), "{text}");
    assert!(
        lines[3].starts_with("broken") && lines[3].contains("unreadable") && lines[3].contains("corrupt"),
        "{text}"
    );

    let output = dir.ok(&["runs", "--dir", "runs", "--json"], 0);
    let runs: Value = serde_json::from_slice(&output.stdout).expect("json");
    let runs = runs.as_array().expect("array");
    assert_eq!(runs.len(), 3);
    assert_eq!(runs[0]["run_id"], fork_id);
    assert_eq!(runs[0]["id"], &fork_id[..13]);
    assert_eq!(runs[0]["status"], "interrupted");
    assert_eq!(runs[0]["current_node"], "work");
    assert_eq!(runs[1]["run_id"], orig_id);
    assert_eq!(runs[1]["workflow"], "looping");
    assert_eq!(runs[1]["status"], "succeeded");
    assert!(runs[1]["duration_ms"].is_u64() && runs[1]["started_at"].is_string());
    assert_eq!(runs[1]["error"], Value::Null);
    assert_eq!(runs[2]["status"], "unreadable");
    assert!(runs[2]["error"].as_str().unwrap().contains("corrupt"));

    std::fs::create_dir_all(dir.path("empty")).unwrap();
    let output = dir.ok(&["runs", "--dir", "empty"], 0);
    assert_eq!(stdout(&output), "no runs in empty\n");
    let output = dir.ok(&["runs", "--dir", "nowhere"], 0);
    assert_eq!(stdout(&output), "no runs in nowhere\n");
    let output = dir.ok(&["runs", "--dir", "empty", "--json"], 0);
    assert_eq!(stdout(&output).trim(), "[]");
    // The default directory.
    let output = dir.ok(&["runs"], 0);
    assert_eq!(stdout(&output), "no runs in .fabro/runs\n");
}
