//! Reliability of durable runs: SIGKILL at random moments and resume until done (same result as an
//! uninterrupted run, no completed stage run twice, no torn JSON), corrupt and hostile run
//! directories refused untouched, and a full disk that pauses a run until space is freed.

use crate::common;

use std::collections::{BTreeMap, HashSet};
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::{json, Value};

// ---------------------------------------------------------------------------------------------
// Shared helpers

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn read_json(path: &Path) -> Value {
    let text = std::fs::read_to_string(path).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
    serde_json::from_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()))
}

/// Deterministic xorshift64* generator.
struct XorShift(u64);

impl XorShift {
    fn next(&mut self) -> u64 {
        let mut x = self.0;
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0 = x;
        x.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }

    fn below(&mut self, n: u64) -> u64 {
        if n == 0 {
            0
        } else {
            self.next() % n
        }
    }
}

/// Every entry under `root` (not following symlinks): files with their bytes, symlinks with their
/// target, directories by name.
fn snapshot(root: &Path) -> Vec<(PathBuf, String, Vec<u8>)> {
    let mut entries = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            let meta = std::fs::symlink_metadata(&path).expect("metadata");
            if meta.file_type().is_symlink() {
                let target = std::fs::read_link(&path).unwrap();
                entries.push((path, "link".into(), target.to_string_lossy().as_bytes().to_vec()));
            } else if meta.is_dir() {
                entries.push((path.clone(), "dir".into(), Vec::new()));
                pending.push(path);
            } else {
                let bytes = std::fs::read(&path).unwrap_or_default();
                entries.push((path, "file".into(), bytes));
            }
        }
    }
    entries.sort();
    entries
}

/// Every file under `root`, not following symlinks.
fn files_under(root: &Path) -> Vec<PathBuf> {
    snapshot(root).into_iter().filter(|(_, kind, _)| kind == "file").map(|(path, _, _)| path).collect()
}

fn is_temp(path: &Path) -> bool {
    let name = path.file_name().unwrap().to_string_lossy();
    name.starts_with('.') && name.ends_with(".tmp")
}

// ---------------------------------------------------------------------------------------------
// 1. Crash harness

/// Appends `<node> <visit>` to executions.log and sets a context value through status.json,
/// written whole (a temporary file renamed into place), as a script killed with its stage must
/// write a file it wants read: fabro's own files are checked intact after every kill, and a
/// script's torn `>` redirection would be the script's, not fabro's.
const STEP_SH: &str = r#"echo "$FABRO_NODE_ID $FABRO_VISIT" >> executions.log
printf '{"outcome":"success","context_updates":{"cmd.%s":"%s-%s"}}' "$FABRO_NODE_ID" "$FABRO_NODE_ID" "$FABRO_VISIT" > "$FABRO_STAGE_DIR/status.tmp"
mv "$FABRO_STAGE_DIR/status.tmp" "$FABRO_STAGE_DIR/status.json"
"#;

/// The loop stage: its visit number becomes `counter`, which routes the loop.
const LOOP_SH: &str = r#"echo "$FABRO_NODE_ID $FABRO_VISIT" >> executions.log
printf '{"outcome":"success","context_updates":{"counter":%s}}' "$FABRO_VISIT" > "$FABRO_STAGE_DIR/status.tmp"
mv "$FABRO_STAGE_DIR/status.tmp" "$FABRO_STAGE_DIR/status.json"
"#;

enum Item {
    Cmd(&'static str),
    Llm(&'static str),
}

/// 36 stages: command stages, LLM (prompt) stages, a loop (`loop` runs 3 times, `fix` twice) and
/// a human gate.
fn crash_workflow() -> (String, Value) {
    use Item::*;
    let before = [
        Cmd("c01"),
        Cmd("c02"),
        Llm("p01"),
        Cmd("c03"),
        Cmd("c04"),
        Llm("p02"),
        Cmd("c05"),
        Cmd("c06"),
        Llm("p03"),
        Cmd("c07"),
        Cmd("c08"),
    ];
    let middle = [Cmd("c09"), Cmd("c10"), Llm("p04"), Cmd("c11"), Cmd("c12"), Llm("p05")];
    let after = [
        Cmd("c13"),
        Cmd("c14"),
        Llm("p06"),
        Cmd("c15"),
        Cmd("c16"),
        Llm("p07"),
        Cmd("c17"),
        Cmd("c18"),
        Llm("p08"),
        Cmd("c19"),
        Cmd("c20"),
        Cmd("c21"),
    ];
    let mut dot = String::from(
        "digraph crash {\n  goal=\"survive crashes\"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n",
    );
    let mut responses = serde_json::Map::new();
    let mut declare = |item: &Item, dot: &mut String| match item {
        Cmd(id) => dot.push_str(&format!("  {id} [shape=parallelogram, script=\"sh step.sh\"]\n")),
        Llm(id) => {
            dot.push_str(&format!("  {id} [shape=tab, prompt=\"Do {id} for $goal\"]\n"));
            responses.insert(
                id.to_string(),
                json!(format!("{id} done. {{\"context_updates\": {{\"llm.{id}\": \"{id} ok\"}}}}")),
            );
        }
    };
    for item in before.iter().chain(&middle).chain(&after) {
        declare(item, &mut dot);
    }
    dot.push_str("  loop [shape=parallelogram, script=\"sh loop.sh\"]\n");
    dot.push_str("  fix [shape=tab, prompt=\"Fix it\"]\n");
    responses.insert(
        "fix".into(),
        json!([
            "fix 1 {\"context_updates\": {\"llm.fix\": \"fixed once\"}}",
            "fix 2 {\"context_updates\": {\"llm.fix\": \"fixed twice\"}}"
        ]),
    );
    dot.push_str("  gate [shape=hexagon, label=\"Ship it?\"]\n");
    let id = |item: &Item| match item {
        Cmd(id) | Llm(id) => *id,
    };
    let chain = |items: &[Item]| items.iter().map(id).collect::<Vec<_>>().join(" -> ");
    dot.push_str(&format!("  start -> {} -> loop\n", chain(&before)));
    dot.push_str("  loop -> fix [condition=\"context.counter<3\"]\n  fix -> loop\n");
    dot.push_str(&format!("  loop -> {} -> gate\n", chain(&middle)));
    dot.push_str(&format!("  gate -> {} [label=\"[A] Approve\"]\n", id(&after[0])));
    dot.push_str("  gate -> exit [label=\"[S] Skip\"]\n");
    dot.push_str(&format!("  {} -> exit\n}}\n", chain(&after)));
    (dot, Value::Object(responses))
}

fn setup_crash_dir() -> tempfile::TempDir {
    let dir = tempfile::tempdir().expect("temp dir");
    let (dot, responses) = crash_workflow();
    std::fs::write(dir.path().join("w.dot"), dot).unwrap();
    std::fs::write(dir.path().join("step.sh"), STEP_SH).unwrap();
    std::fs::write(dir.path().join("loop.sh"), LOOP_SH).unwrap();
    std::fs::write(dir.path().join("answers.json"), r#"{"gate": ["A"]}"#).unwrap();
    std::fs::write(dir.path().join("responses.json"), responses.to_string()).unwrap();
    dir
}

fn log_lines(dir: &Path) -> Vec<String> {
    std::fs::read_to_string(dir.join("executions.log"))
        .unwrap_or_default()
        .lines()
        .map(str::to_string)
        .collect()
}

/// The context without the keys that differ between run directories.
fn comparable_context(checkpoint: &Value) -> BTreeMap<String, Value> {
    let mut map: BTreeMap<String, Value> =
        checkpoint["context"].as_object().expect("context").clone().into_iter().collect();
    for key in ["internal.run_id", "internal.work_dir"] {
        map.remove(key);
    }
    map
}

/// Waits until no command a killed fabro left behind still runs with this run directory in its
/// environment, and no process still holds the run's lock file open (fabro's process-group
/// watcher, a fork of fabro, holds fabro's descriptors until it closes them); a stage's processes
/// die with fabro, within a second.
fn wait_for_orphans(run_dir: &Path) {
    let needle = format!("FABRO_RUN_DIR={}", run_dir.display()).into_bytes();
    let lock = run_dir.join("run.lock");
    let deadline = Instant::now() + Duration::from_secs(1);
    loop {
        let busy = std::fs::read_dir("/proc").into_iter().flatten().flatten().any(|entry| {
            entry.file_name().to_string_lossy().bytes().all(|b| b.is_ascii_digit())
                && (std::fs::read(entry.path().join("environ"))
                    .map(|env| env.split(|&b| b == 0).any(|var| var == needle.as_slice()))
                    .unwrap_or(false)
                    || std::fs::read_dir(entry.path().join("fd"))
                        .into_iter()
                        .flatten()
                        .flatten()
                        .any(|fd| std::fs::read_link(fd.path()).is_ok_and(|target| target == lock)))
        });
        if !busy {
            return;
        }
        assert!(Instant::now() < deadline, "a stage's command still runs a second after the kill");
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Every JSON file of the run directory parses. Temporary files (`.<name>.<pid>.tmp`) are
/// ignored. Returns (files checked, temporary files seen, torn context.json snapshots).
fn assert_json_intact(run_dir: &Path, when: &str) -> (usize, usize, usize) {
    let (mut checked, mut temps, mut torn_snapshots) = (0, 0, 0);
    for path in files_under(run_dir) {
        if is_temp(&path) {
            temps += 1;
            continue;
        }
        if path.extension().is_none_or(|e| e != "json") {
            continue;
        }
        let bytes = std::fs::read(&path).unwrap();
        let parsed = serde_json::from_slice::<Value>(&bytes);
        if parsed.is_err() && path.file_name().unwrap() == "context.json" {
            // The command handler writes the FABRO_CONTEXT snapshot with a plain (non-atomic)
            // write; a kill can leave it torn. It is an input of an abandoned stage directory,
            // not state fabro reads back, so it is reported rather than failed.
            torn_snapshots += 1;
            continue;
        }
        if let Err(error) = parsed {
            panic!(
                "{when}: {} is not valid JSON ({error}): {:?}",
                path.display(),
                String::from_utf8_lossy(&bytes)
            );
        }
        checked += 1;
    }
    (checked, temps, torn_snapshots)
}

struct Reference {
    elapsed: Duration,
    log: Vec<String>,
    checkpoint: Value,
    result: Value,
}

fn reference_run() -> Reference {
    let dir = setup_crash_dir();
    let started = Instant::now();
    let output = common::fabro_in(
        dir.path(),
        &[
            "run",
            "w.dot",
            "--run-dir",
            "run",
            "--answers",
            "answers.json",
            "--responses",
            "responses.json",
            "-q",
        ],
    );
    let elapsed = started.elapsed();
    assert_eq!(output.status.code(), Some(0), "reference run: {}", stderr(&output));
    let log = log_lines(dir.path());
    let result = read_json(&dir.path().join("run/result.json"));
    assert_eq!(result["status"], "succeeded");
    let completed = result["completed_nodes"].as_array().unwrap();
    assert!(completed.len() >= 37, "the workflow has 30+ stages and a loop: {completed:?}");
    assert_eq!(completed.iter().filter(|n| *n == "loop").count(), 3, "the loop stage runs 3 times");
    assert!(log.contains(&"loop 3".to_string()) && !log.contains(&"loop 4".to_string()), "{log:?}");
    let checkpoint = read_json(&dir.path().join("run/checkpoint.json"));
    let context = comparable_context(&checkpoint);
    assert_eq!(context["llm.fix"], "fixed twice");
    assert_eq!(context["cmd.c21"], "c21-1");
    assert_eq!(context["human.gate.selected"], "A");
    Reference { elapsed, log, checkpoint, result }
}

/// What one crashed-and-resumed run went through.
#[derive(Default)]
struct CrashStats {
    kills: usize,
    extra_executions: usize,
    temp_files_seen: usize,
    torn_snapshots: usize,
    json_files_checked: usize,
    restarts_before_first_checkpoint: usize,
    stale_lock_at_end: bool,
}

/// Runs the crash workflow to its end, killing fabro up to `max_kills` times at random instants
/// and resuming it; `snapshot_every` (when not 0) makes snapshots frequent enough for kills to
/// land inside their writes.
fn crash_and_resume(
    reference: &Reference,
    rng: &mut XorShift,
    sync: &str,
    max_kills: usize,
    snapshot_every: u64,
) -> CrashStats {
    let dir = setup_crash_dir();
    let run_dir = dir.path().join("run");
    let mut stats = CrashStats::default();
    // (lines in executions.log at the kill, stages the checkpoint had completed at the kill)
    let mut at_kills: Vec<(usize, HashSet<String>)> = Vec::new();
    let reference_ms = reference.elapsed.as_millis().max(20) as u64;
    let mut attempt = 0;
    loop {
        attempt += 1;
        assert!(attempt < 200, "no resume ever finished");
        let resuming = !common::journal_lines(&run_dir).is_empty();
        if !resuming && run_dir.exists() {
            // Killed before the first stage was journaled: nothing to resume, and `fabro run`
            // with the same --run-dir takes the directory over (nothing is deleted by hand).
            stats.restarts_before_first_checkpoint += 1;
        }
        let mut args: Vec<&str> =
            if resuming { vec!["resume", "run"] } else { vec!["run", "w.dot", "--run-dir", "run"] };
        args.extend([
            "--answers",
            "answers.json",
            "--responses",
            "responses.json",
            "--checkpoint-sync",
            sync,
            "-q",
        ]);
        let log_path = dir.path().join(format!("fabro-{attempt}.stderr"));
        let mut command = common::fabro_command(dir.path(), &args);
        if snapshot_every > 0 {
            command.env("FABRO_SNAPSHOT_EVERY", snapshot_every.to_string());
        }
        let mut child = command
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log_path).unwrap())
            .spawn()
            .expect("spawn fabro");
        let status = if stats.kills < max_kills {
            // A third of the kills come almost at once (start-up, first writes), the rest anywhere
            // in the time a whole run takes.
            let delay_us = match rng.below(4) {
                0 => rng.below(4_000),
                3 => rng.below(50_000),
                1 => rng.below(reference_ms * 1000 / 3),
                _ => rng.below(reference_ms * 1000 * 2 / 3),
            };
            std::thread::sleep(Duration::from_micros(delay_us));
            // SAFETY: signalling our own child, which has not been reaped yet.
            unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
            child.wait().unwrap()
        } else {
            child.wait().unwrap()
        };
        let run_stderr = std::fs::read_to_string(&log_path).unwrap_or_default();
        if status.signal() == Some(libc::SIGKILL) {
            stats.kills += 1;
            wait_for_orphans(&std::fs::canonicalize(&run_dir).unwrap_or(run_dir.clone()));
            wait_for_orphans(&run_dir);
            let (checked, temps, torn) =
                assert_json_intact(&run_dir, &format!("after kill {} ({sync})", stats.kills));
            stats.json_files_checked += checked;
            stats.temp_files_seen += temps;
            stats.torn_snapshots += torn;
            let lines = log_lines(dir.path()).len();
            if let Some((_, last)) = common::journal_lines(&run_dir).last() {
                assert!(
                    ["running", "succeeded"].contains(&last["status"].as_str().unwrap()),
                    "a killed run's last journal entry: {}",
                    last["status"]
                );
            }
            let completed: HashSet<String> = common::journaled_visits(&run_dir)
                .into_iter()
                .map(|(node, visit)| format!("{node} {visit}"))
                .collect();
            at_kills.push((lines, completed));
            continue;
        }
        match status.code() {
            Some(0) => break,
            Some(2) if run_stderr.contains("already succeeded") => {
                // Killed after the manifest, the last record, said so: only the exit was missed.
                break;
            }
            other => panic!("fabro {} exited with {other:?}:\n{run_stderr}", args.join(" ")),
        }
    }

    // The same run as the reference.
    let checkpoint = read_json(&run_dir.join("checkpoint.json"));
    assert_eq!(checkpoint["status"], "succeeded");
    assert_eq!(checkpoint["completed_nodes"], reference.checkpoint["completed_nodes"]);
    assert_eq!(checkpoint["node_visits"], reference.checkpoint["node_visits"]);
    assert_eq!(checkpoint["node_outcomes"], reference.checkpoint["node_outcomes"]);
    assert_eq!(comparable_context(&checkpoint), comparable_context(&reference.checkpoint), "final context");
    // Every record of the end is there, however the kills fell.
    let result = read_json(&run_dir.join("result.json"));
    assert_eq!(result["status"], reference.result["status"]);
    assert_eq!(result["completed_nodes"], reference.result["completed_nodes"]);
    assert_eq!(read_json(&run_dir.join("manifest.json"))["status"], "succeeded");
    if let Ok(pid) = std::fs::read_to_string(run_dir.join("run.lock")) {
        // Only a process killed while exiting leaves it; the lock is stale and harmless.
        let pid: i32 = pid.trim().parse().expect("run.lock holds a pid");
        // SAFETY: signal 0 only checks whether the process exists.
        assert!(unsafe { libc::kill(pid, 0) } != 0, "run.lock names a live process {pid}");
        stats.stale_lock_at_end = true;
    }
    let (checked, _, _) = assert_json_intact(&run_dir, "at the end");
    stats.json_files_checked += checked;
    let events = std::fs::read_to_string(run_dir.join("events.jsonl")).unwrap();
    for (n, line) in events.lines().enumerate() {
        assert!(serde_json::from_str::<Value>(line).is_ok(), "events.jsonl line {}: {line:?}", n + 1);
    }
    assert!(events.contains("\"run.completed\""), "the run's end is in events.jsonl");

    // No completed stage ran twice: every execution is one of the reference's, in the same order
    // of first runs; each kill may add at most one (the stage in flight), and nothing the
    // checkpoint had recorded as completed at a kill runs again after it.
    let log = log_lines(dir.path());
    let mut first_runs = Vec::new();
    let mut seen = HashSet::new();
    for line in &log {
        assert!(reference.log.contains(line), "unexpected execution {line:?}");
        if seen.insert(line.clone()) {
            first_runs.push(line.clone());
        }
    }
    assert_eq!(first_runs, reference.log, "every stage ran, in the reference order");
    stats.extra_executions = log.len() - reference.log.len();
    assert!(
        stats.extra_executions <= stats.kills,
        "{} extra executions for {} kills: {log:?}",
        stats.extra_executions,
        stats.kills
    );
    for (kill, (lines_at_kill, completed)) in at_kills.iter().enumerate() {
        for line in &log[*lines_at_kill..] {
            assert!(
                !completed.contains(line),
                "`{line}` was completed in the checkpoint at kill {} but ran again after it",
                kill + 1
            );
        }
    }
    stats
}

#[test]
fn sigkill_at_random_moments_then_resume_gives_the_reference_run() {
    let started = Instant::now();
    let reference = reference_run();
    let mut rng = XorShift(0x9e37_79b9_7f4a_7c15);
    let (mut kills, mut runs, mut temps, mut extra, mut torn) = (0, 0, 0, 0, 0);
    // At least 6 crashed runs and 100 kills, going through the journal's sync modes, every
    // other run with a snapshot every 3 entries.
    while runs < 6 || kills < 100 {
        assert!(runs < 60, "too few kills landed ({kills} in {runs} runs)");
        let sync = ["never", "stage", "batch"][runs % 3];
        let snapshot_every = if runs % 2 == 0 { 3 } else { 0 };
        let stats = crash_and_resume(&reference, &mut rng, sync, 18, snapshot_every);
        eprintln!(
            "crashed run {runs} (--checkpoint-sync {sync}, snapshot every {snapshot_every}): {} kills, {} extra executions, {} temp files seen, \
             {} JSON files checked, {} restarts before the first checkpoint",
            stats.kills,
            stats.extra_executions,
            stats.temp_files_seen,
            stats.json_files_checked,
            stats.restarts_before_first_checkpoint,
        );
        kills += stats.kills;
        temps += stats.temp_files_seen;
        extra += stats.extra_executions;
        torn += stats.torn_snapshots;
        runs += 1;
    }
    eprintln!(
        "reference run {:?}; {runs} crashed runs, {kills} kills, {extra} re-executed stages, {temps} temp files \
         left by kills inside writes, {torn} torn context.json snapshots; \
         {:?} in all",
        reference.elapsed,
        started.elapsed()
    );
    assert!(kills >= 100);
}

/// Kills the run once a marker stage runs, then resumes it; returns the directory.
fn killed_at_marker_then_resumed(workflow: &str) -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("w.dot"), workflow).unwrap();
    let mut child = common::fabro_command(dir.path(), &["run", "w.dot", "--run-dir", "run", "-q"])
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_for_file(&dir.path().join("marker"), "the marker stage");
    // SAFETY: signalling our own child.
    unsafe { libc::kill(child.id() as i32, libc::SIGKILL) };
    assert_eq!(child.wait().unwrap().signal(), Some(libc::SIGKILL));
    let (_, last) = common::journal_lines(&dir.path().join("run")).last().cloned().expect("a journal entry");
    assert_eq!(last["status"], "running");
    assert!(dir.path().join("run/run.lock").exists(), "a SIGKILL leaves the lock behind");
    std::fs::write(dir.path().join("resumed"), "").unwrap();
    let resumed = common::fabro_in(dir.path(), &["resume", "run", "-q"]);
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    dir
}

const MARKED: &str = r#"digraph marked {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    one [shape=parallelogram, script="echo one >> log"]
    two [shape=parallelogram, script="echo two >> log"]
    slow [shape=parallelogram, script="echo slow >> log; if [ ! -f resumed ]; then touch marker; sleep 30; fi"]
    three [shape=parallelogram, script="echo three >> log"]
    start -> one -> two -> slow -> three -> exit
}
"#;

#[test]
fn a_stale_lock_after_sigkill_is_taken_over_and_only_the_stage_in_flight_reruns() {
    let dir = killed_at_marker_then_resumed(MARKED);
    assert_eq!(std::fs::read_to_string(dir.path().join("log")).unwrap(), "one\ntwo\nslow\nslow\nthree\n");
    let result = read_json(&dir.path().join("run/result.json"));
    assert_eq!(result["status"], "succeeded");
    assert_eq!(result["completed_nodes"], json!(["start", "one", "two", "slow", "three", "exit"]));
    assert!(dir.path().join("run/stages/slow/1").is_dir() && dir.path().join("run/stages/slow/1.2").is_dir());
    assert!(!dir.path().join("run/run.lock").exists());
}

#[test]
fn result_json_after_a_crash_lists_every_stage_visit() {
    let dir = killed_at_marker_then_resumed(MARKED);
    let result = read_json(&dir.path().join("run/result.json"));
    let stages: Vec<(String, u64)> = result["stages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|s| (s["node_id"].as_str().unwrap().to_string(), s["visit"].as_u64().unwrap()))
        .collect();
    let expected: Vec<(String, u64)> =
        ["start", "one", "two", "slow", "three", "exit"].iter().map(|n| (n.to_string(), 1)).collect();
    assert_eq!(stages, expected);
}

/// A run of the marked workflow that went through, in `<temp>/run`.
fn finished_run() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("w.dot"),
        MARKED.replace(" then touch marker; sleep 30; fi", " then :; fi"),
    )
    .unwrap();
    let ran = common::fabro_in(dir.path(), &["run", "w.dot", "--run-dir", "run", "-q"]);
    assert_eq!(ran.status.code(), Some(0), "{}", stderr(&ran));
    dir
}

#[test]
fn a_run_killed_between_its_final_checkpoint_and_result_json_can_be_finished() {
    let dir = finished_run();
    // The state a SIGKILL leaves right after the final checkpoint: the manifest as it was while
    // running, no result.json.
    let run = dir.path().join("run");
    let mut manifest = read_json(&run.join("manifest.json"));
    manifest["status"] = json!("running");
    manifest["finished_at"] = Value::Null;
    std::fs::write(run.join("manifest.json"), serde_json::to_vec_pretty(&manifest).unwrap()).unwrap();
    std::fs::remove_file(run.join("result.json")).unwrap();
    let resumed = common::fabro_in(dir.path(), &["resume", "run", "-q"]);
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert_eq!(read_json(&run.join("manifest.json"))["status"], "succeeded");
    assert_eq!(read_json(&run.join("result.json"))["status"], "succeeded");
}

#[test]
fn a_run_killed_after_its_manifest_said_succeeded_is_finished_by_resume() {
    let dir = finished_run();
    // What a kill during the end-of-run records left with an earlier fabro, which wrote the
    // manifest first: manifest and checkpoint say succeeded; result.json and run.completed are
    // missing; run.lock is left behind.
    let run = dir.path().join("run");
    std::fs::remove_file(run.join("result.json")).unwrap();
    let events = std::fs::read_to_string(run.join("events.jsonl")).unwrap();
    let kept: String =
        events.lines().filter(|line| !line.contains("\"run.completed\"")).map(|l| format!("{l}\n")).collect();
    std::fs::write(run.join("events.jsonl"), kept).unwrap();
    std::fs::write(run.join("run.lock"), "999999\n").unwrap();

    // `fabro logs -f` does not wait for ever for an end that will not come.
    let mut follow = common::fabro_command(dir.path(), &["logs", "run", "-f"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let started = Instant::now();
    while follow.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(10) {
            let _ = follow.kill();
            panic!("fabro logs -f still follows a run nobody drives");
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let followed = follow.wait_with_output().unwrap();
    assert!(stderr(&followed).contains("no process drives this run"), "{}", stderr(&followed));

    let resumed = common::fabro_in(dir.path(), &["resume", "run", "-q"]);
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    assert_eq!(read_json(&run.join("manifest.json"))["status"], "succeeded");
    assert_eq!(read_json(&run.join("result.json"))["status"], "succeeded");
    let events = std::fs::read_to_string(run.join("events.jsonl")).unwrap();
    assert!(events.lines().last().unwrap().contains("\"run.completed\""), "{events}");
    assert!(!run.join("run.lock").exists());
    let again = common::fabro_in(dir.path(), &["resume", "run", "-q"]);
    assert_eq!(again.status.code(), Some(2), "now it has ended: {}", stderr(&again));
}

// ---------------------------------------------------------------------------------------------
// 2. Corrupt and hostile run directories

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

/// A run paused at its gate (resumable), in `<temp>/run`.
fn paused_run() -> tempfile::TempDir {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(dir.path().join("w.dot"), GATED).unwrap();
    let output = common::fabro_in(dir.path(), &["run", "w.dot", "--run-dir", "run", "-q"]);
    assert_eq!(output.status.code(), Some(3), "{}", stderr(&output));
    dir
}

/// `fabro resume run` is refused with exit 2 and `message` on stderr, and changes nothing in the
/// run directory nor in `outside` (where hostile symlinks point).
fn assert_resume_refused(dir: &Path, outside: Option<&Path>, message: &str) {
    let run = dir.join("run");
    let before = (snapshot(&run), outside.map(snapshot));
    let output = common::fabro_in(dir, &["resume", "run", "--auto-approve", "-q"]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(2), "resume should be refused:\n{err}");
    assert!(err.contains(message), "stderr lacks {message:?}:\n{err}");
    assert!(err.contains("error"), "a clear error:\n{err}");
    let after = (snapshot(&run), outside.map(snapshot));
    assert!(before == after, "a refused resume changed the run directory or the symlink target");
    assert_eq!(std::fs::read_to_string(dir.join("log")).unwrap(), "plan\n", "no stage ran");
}

#[test]
fn two_resumes_of_one_run_never_both_drive_it() {
    let template = paused_run();
    let pairs = 200;
    let mut outcomes = BTreeMap::new();
    for pair in 0..pairs {
        let run = template.path().join(format!("pair{pair}"));
        let copied =
            Command::new("cp").arg("-a").arg(template.path().join("run")).arg(&run).status().unwrap();
        assert!(copied.success());
        let resume = || {
            common::fabro_command(template.path(), &["resume", run.to_str().unwrap(), "--auto-approve", "-q"])
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        };
        let (first, second) = (resume(), resume());
        let mut codes = Vec::new();
        for child in [first, second] {
            let output = child.wait_with_output().unwrap();
            let err = stderr(&output);
            match output.status.code() {
                Some(0) => codes.push("resumed"),
                Some(2) if err.contains("is in use by") => codes.push("in use"),
                Some(2) if err.contains("already succeeded") => codes.push("finished"),
                other => panic!("pair {pair}: resume exited {other:?}:\n{err}"),
            }
        }
        codes.sort_unstable();
        *outcomes.entry(codes.join(" + ")).or_insert(0) += 1;
    }
    // The stage after the gate appends to the same log in every copy: once per pair.
    let log = std::fs::read_to_string(template.path().join("log")).unwrap();
    assert_eq!(log.lines().filter(|line| *line == "ship").count(), pairs, "{outcomes:?}");
    assert!(outcomes.keys().all(|codes| codes.matches("resumed").count() == 1), "{outcomes:?}");
}

#[test]
fn a_truncated_checkpoint_is_refused_untouched() {
    let dir = paused_run();
    let checkpoint = dir.path().join("run/checkpoint.json");
    let full = std::fs::read(&checkpoint).unwrap();
    for cut in [0, 1, 2, 10, full.len() / 3, full.len() / 2, full.len() - 3, full.len() - 2] {
        // Replace the file (checkpoint.json is a hard link into checkpoints/; leave that intact).
        std::fs::remove_file(&checkpoint).unwrap();
        std::fs::write(&checkpoint, &full[..cut]).unwrap();
        assert_resume_refused(dir.path(), None, "checkpoint.json` is corrupt");
    }
}

#[test]
fn a_checkpoint_of_the_wrong_shape_is_refused_untouched() {
    let dir = paused_run();
    let checkpoint = dir.path().join("run/checkpoint.json");
    let real = read_json(&checkpoint);
    let mut wrong_types = real.clone();
    wrong_types["completed_nodes"] = json!("start,plan");
    let mut bad_status = real.clone();
    bad_status["status"] = json!("exploded");
    let mut no_context = real.clone();
    no_context.as_object_mut().unwrap().remove("context");
    for shape in
        [json!([1, 2, 3]), json!("checkpoint"), json!(null), json!({}), wrong_types, bad_status, no_context]
    {
        std::fs::remove_file(&checkpoint).unwrap();
        std::fs::write(&checkpoint, shape.to_string()).unwrap();
        assert_resume_refused(dir.path(), None, "checkpoint.json` is corrupt");
    }
}

#[test]
fn a_run_directory_missing_its_workflow_or_manifest_is_refused_untouched() {
    let dir = paused_run();
    std::fs::remove_file(dir.path().join("run/workflow.dot")).unwrap();
    assert_resume_refused(dir.path(), None, "no workflow.dot");

    let dir = paused_run();
    std::fs::remove_file(dir.path().join("run/manifest.json")).unwrap();
    assert_resume_refused(dir.path(), None, "no manifest.json");

    let dir = paused_run();
    std::fs::write(dir.path().join("run/manifest.json"), "{\"run_id\": \"x\"").unwrap();
    assert_resume_refused(dir.path(), None, "manifest.json` is corrupt");
}

#[test]
fn a_journal_naming_a_missing_node_is_refused_untouched() {
    let dir = paused_run();
    let journal = dir.path().join("run/journal.jsonl");
    let text = std::fs::read_to_string(&journal).unwrap();
    let (kept, last) = text.trim_end().rsplit_once('\n').unwrap();
    let mut value: Value = serde_json::from_str(last).unwrap();
    value["next"] = json!("nowhere");
    std::fs::write(&journal, format!("{kept}\n{value}\n")).unwrap();
    assert_resume_refused(dir.path(), None, "`nowhere`");
}

#[test]
fn a_stored_workflow_that_no_longer_parses_is_refused_untouched() {
    let dir = paused_run();
    std::fs::write(dir.path().join("run/workflow.dot"), "digraph broken { start -> }\n").unwrap();
    assert_resume_refused(dir.path(), None, "error[syntax]");

    let dir = paused_run();
    // Parses, but the stage the checkpoint continues at is gone and the graph is invalid.
    std::fs::write(dir.path().join("run/workflow.dot"), "digraph g { a -> b }\n").unwrap();
    assert_resume_refused(dir.path(), None, "error");
}

#[test]
fn a_checkpoint_symlinked_to_a_foreign_file_is_refused_untouched() {
    let dir = paused_run();
    let checkpoint = dir.path().join("run/checkpoint.json");
    std::fs::remove_file(&checkpoint).unwrap();
    std::os::unix::fs::symlink("/etc/passwd", &checkpoint).unwrap();
    let passwd = std::fs::read("/etc/passwd").unwrap();
    assert_resume_refused(dir.path(), None, "checkpoint.json");
    assert_eq!(std::fs::read("/etc/passwd").unwrap(), passwd);
}

/// Replaces `name` in a paused run directory by a symlink to a directory (or file) outside it
/// holding the same content, then resumes: fabro must not write through the link.
fn hostile_symlink(name: &str) {
    let dir = paused_run();
    let outside = tempfile::tempdir().unwrap();
    let target = outside.path().join(name.replace('/', "_"));
    std::fs::rename(dir.path().join("run").join(name), &target).unwrap();
    std::os::unix::fs::symlink(&target, dir.path().join("run").join(name)).unwrap();
    assert_resume_refused(dir.path(), Some(outside.path()), "symbolic link");
}

#[test]
fn a_stages_symlink_out_of_the_run_directory_is_not_written_through() {
    hostile_symlink("stages");
}

#[test]
fn a_symlink_deeper_in_the_run_directory_is_refused_before_resume_changes_anything() {
    // A stage that ran, and one that has yet to run.
    hostile_symlink("stages/plan");
    hostile_symlink("stages/plan/1/stdout.log");
    let dir = paused_run();
    let outside = tempfile::tempdir().unwrap();
    std::os::unix::fs::symlink(outside.path(), dir.path().join("run/stages/ship")).unwrap();
    assert_resume_refused(dir.path(), Some(outside.path()), "stages/ship` is a symbolic link");
}

#[test]
fn a_journal_symlink_out_of_the_run_directory_is_not_written_through() {
    hostile_symlink("journal.jsonl");
}

#[test]
fn an_events_symlink_out_of_the_run_directory_is_not_written_through() {
    hostile_symlink("events.jsonl");
}

#[test]
fn manifest_and_checkpoint_symlinks_out_of_the_run_directory_are_refused() {
    hostile_symlink("manifest.json");
    hostile_symlink("checkpoint.json");
    hostile_symlink("workflow.dot");
}

// ---------------------------------------------------------------------------------------------
// 3. A full disk: a checkpoint that cannot be saved pauses the run; resume goes on once there is space

/// A small tmpfs mounted in a temporary directory, unmounted on drop.
struct SmallTmpfs {
    dir: tempfile::TempDir,
}

impl SmallTmpfs {
    fn mount(size: &str) -> Option<SmallTmpfs> {
        let dir = tempfile::tempdir().ok()?;
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .stderr(Stdio::null())
            .status()
            .ok()?;
        status.success().then_some(SmallTmpfs { dir })
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }
}

impl Drop for SmallTmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg(self.dir.path()).status();
    }
}

#[test]
fn a_checkpoint_that_cannot_be_saved_pauses_the_run_until_space_is_freed() {
    let Some(disk) = SmallTmpfs::mount("2m") else {
        assert!(
            std::env::var_os("CI").is_none(),
            "CI must run the full-disk test (it needs root to mount a tmpfs)"
        );
        eprintln!("SKIPPED: cannot mount a tmpfs here (needs root); the full-disk test did not run");
        return;
    };
    let work = tempfile::tempdir().unwrap();
    let filler = disk.path().join("filler");
    // `fill` fills the run directory's disk once; the space is freed half a second after it ends.
    let workflow = format!(
        r#"digraph full {{
    start [shape=Mdiamond]
    exit [shape=Msquare]
    before [shape=parallelogram, script="echo before >> log"]
    fill [shape=parallelogram, keep_background=true, script="echo fill >> log; if [ ! -f filled ]; then touch filled; dd if=/dev/zero of={filler} bs=64k 2>/dev/null; (sleep 0.5; rm -f {filler}) >/dev/null 2>&1 & fi"]
    after [shape=parallelogram, script="echo after >> log"]
    start -> before -> fill -> after -> exit
}}
"#,
        filler = filler.display()
    );
    std::fs::write(work.path().join("w.dot"), workflow).unwrap();
    let run = disk.path().join("run");
    let output = common::fabro_in(work.path(), &["run", "w.dot", "--run-dir", run.to_str().unwrap(), "-q"]);
    let err = stderr(&output);
    assert_eq!(output.status.code(), Some(3), "the run pauses:\n{err}");
    assert!(err.contains("No space left on device") && err.contains("fabro resume"), "the reason:\n{err}");
    assert!(err.contains("free some space, then resume with: fabro resume"), "the hint:\n{err}");
    assert!(!err.contains("--answers"), "a full disk is not a gate waiting for an answer:\n{err}");
    // The run pauses after the first stage whose records did not fit (`fill`, or `after` when
    // the journal entry and status.json of `fill` still fitted): no later stage ran.
    let log = std::fs::read_to_string(work.path().join("log")).unwrap();
    assert!(log == "before\nfill\n" || log == "before\nfill\nafter\n", "{log}");
    let last = common::journal_lines(&run).last().cloned().expect("a journal entry").1;
    let waits_at = if log.ends_with("after\n") { &last["node"] } else { &last["next"] };
    assert_eq!(waits_at, "after", "{last}");

    let freed = Instant::now();
    while filler.exists() {
        assert!(freed.elapsed() < Duration::from_secs(10), "the filler was never removed");
        std::thread::sleep(Duration::from_millis(20));
    }
    let resumed = common::fabro_in(work.path(), &["resume", run.to_str().unwrap(), "-q"]);
    assert_eq!(resumed.status.code(), Some(0), "{}", stderr(&resumed));
    // Nothing ran twice.
    assert_eq!(std::fs::read_to_string(work.path().join("log")).unwrap(), "before\nfill\nafter\n");
    let checkpoint = read_json(&run.join("checkpoint.json"));
    assert_eq!(checkpoint["status"], "succeeded");
    assert_eq!(checkpoint["completed_nodes"], json!(["start", "before", "fill", "after", "exit"]));
    assert!(files_under(&run).iter().all(|p| !is_temp(p)), "no temporary file left behind");
    assert_json_intact(&run, "after the full disk");
    assert_eq!(read_json(&run.join("result.json"))["status"], "succeeded");
}

#[test]
fn a_stage_that_shows_no_sign_of_life_for_stall_timeout_is_stopped_and_the_run_pauses() {
    let workflow = |script: &str| {
        format!(
            r#"digraph stall {{
            stall_timeout = "1s"
            start [shape=Mdiamond]
            exit [shape=Msquare]
            hang [shape=parallelogram, script="{script}"]
            start -> hang -> exit
        }}"#
        )
    };
    let started = std::time::Instant::now();
    let ran = common::Test::new()
        .workflow(&workflow("echo started; sleep 30 & echo $! > sleeper.pid; wait"))
        .args(["run", "workflow.dot", "--run-dir", "run"])
        .status(3)
        .run();
    assert!(started.elapsed() < std::time::Duration::from_secs(15), "{:?}", started.elapsed());
    let stderr = ran.stderr();
    assert!(
        stderr.contains("paused: stage `hang` showed no sign of life for")
            && stderr.contains("stall_timeout=1s"),
        "{stderr}"
    );
    assert!(stderr.contains("resume with: fabro resume"), "{stderr}");
    let manifest: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(ran.dir.path().join("run/manifest.json")).unwrap())
            .unwrap();
    assert_eq!(manifest["pause"]["kind"], "stall", "{manifest}");
    // The stopped stage's processes are gone.
    let pid = std::fs::read_to_string(ran.dir.path().join("sleeper.pid")).unwrap();
    // Gone, or a zombie this container's init has not reaped yet.
    let alive = || {
        std::fs::read_to_string(format!("/proc/{}/stat", pid.trim()))
            .is_ok_and(|stat| stat.rsplit(')').next().is_some_and(|rest| !rest.trim_start().starts_with('Z')))
    };
    let deadline = Instant::now() + Duration::from_secs(3);
    while alive() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(50));
    }
    assert!(!alive(), "the sleep outlived its stage");

    // Output is a sign of life: a stage that prints now and then runs to its end.
    common::Test::new()
        .workflow(&workflow("for i in 1 2 3 4 5 6; do echo $i; sleep 0.4; done"))
        .args(["run", "workflow.dot", "-q"])
        .status(0)
        .run();
}

#[test]
fn failed_stages_carry_a_failure_class_that_routes_and_limits_retries() {
    let workflow = r#"digraph classes {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        slow [shape=parallelogram, script="sleep 5", timeout="500ms", max_retries=1, retry_on=transient]
        broken [shape=parallelogram, script="exit 3", max_retries=2, retry_on=transient]
        flaky [shape=parallelogram, script="n=$(cat n 2>/dev/null || echo 0); echo $((n+1)) > n; [ $n -ge 1 ]", max_retries=1]
        retried [shape=parallelogram, script="echo transient handled"]
        fixed [shape=parallelogram, script="echo deterministic handled"]
        start -> slow
        slow -> retried [condition="failure_class=transient_infra"]
        slow -> broken [condition="outcome=success"]
        retried -> broken
        broken -> fixed [condition="failure_class=deterministic"]
        broken -> flaky [condition="outcome=success"]
        fixed -> flaky
        flaky -> exit
    }"#;
    let ran = common::Test::new()
        .workflow(workflow)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let run = ran.dir.path().join("run");
    let status = |node: &str| -> Value {
        let dir = fabro::run_dir::layout::finished_visit_dir(&run, node, 1).unwrap();
        serde_json::from_str(&std::fs::read_to_string(dir.join("status.json")).unwrap()).unwrap()
    };
    // A timeout is transient: retried under retry_on=transient, then routed on its class.
    assert_eq!(
        (status("slow")["attempts"].as_u64(), status("slow")["failure_class"].as_str()),
        (Some(2), Some("transient_infra"))
    );
    // A non-zero exit is deterministic: retry_on=transient does not retry it.
    assert_eq!(
        (status("broken")["attempts"].as_u64(), status("broken")["failure_class"].as_str()),
        (Some(1), Some("deterministic"))
    );
    // Without retry_on, every failure is retried as before.
    assert_eq!(status("flaky")["attempts"].as_u64(), Some(2));
    let events = std::fs::read_to_string(run.join("events.jsonl")).unwrap();
    let failed: Vec<Value> = events
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .filter(|event| event["event"] == "stage.failed")
        .collect();
    let classes: Vec<(&str, &str)> = failed
        .iter()
        .map(|e| (e["node_id"].as_str().unwrap(), e["failure_class"].as_str().unwrap()))
        .collect();
    assert_eq!(classes, [("slow", "transient_infra"), ("broken", "deterministic")]);
    let checkpoint: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("checkpoint.json")).unwrap()).unwrap();
    assert_eq!(checkpoint["context"]["failure_detail"], "stage_failed", "{}", checkpoint["context"]);
}

/// An implement -> verify -> fix loop whose verify keeps failing the same way (only its exit code
/// changes).
const SAME_FAILURE_LOOP: &str = r#"digraph fixloop {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        implement [shape=parallelogram, script="echo implement >> log"]
        verify [shape=parallelogram, script="n=$(grep -c verify log); echo verify >> log; exit $((n+1))"]
        fix [shape=parallelogram, script="FIX"]
        start -> implement -> verify
        verify -> exit [condition="outcome=success"]
        verify -> fix [condition="outcome=fail"]
        fix -> implement
    }"#;

fn events_of(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str::<Value>(line).unwrap())
        .collect()
}

#[test]
fn a_fix_loop_that_fails_the_same_way_three_times_stops_on_the_third() {
    let ran = common::Test::new()
        .workflow(&SAME_FAILURE_LOOP.replace("FIX", "echo fix >> log"))
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(1)
        .run();
    let run = ran.dir.path().join("run");
    let log = std::fs::read_to_string(ran.dir.path().join("log")).unwrap();
    // Successes of implement and fix between the failures do not reset the count.
    assert_eq!(log.matches("verify").count(), 3, "{log}");
    assert_eq!(log.matches("implement").count(), 3, "{log}");
    let result = read_json(&run.join("result.json"));
    let reason = result["failure_reason"].as_str().unwrap();
    assert!(
        reason.starts_with("circuit breaker: stage `verify` failed the same way 3 times (failure_signature_limit=3), at visits 1, 2, 3: ")
            && reason.contains("`verify|deterministic|"),
        "{reason}"
    );
    let context = &read_json(&run.join("checkpoint.json"))["context"];
    let signature = context["failure_signature"].as_str().unwrap();
    assert!(reason.contains(&format!("`{signature}`")), "{reason}");
    assert_eq!(signature, "verify|deterministic|command exited with code <n>");
    assert_eq!(context["internal.failure_signatures"][signature]["count"], 3);
    assert!(ran.stderr().contains("circuit breaker"), "{}", ran.stderr());
    // The third failure ended the run: no edge was taken to fix.
    let to_fix = events_of(&run)
        .iter()
        .filter(|event| event["event"] == "edge.selected" && event["to"] == "fix")
        .count();
    assert_eq!(to_fix, 2);

    // A higher limit lets the loop go on; 0 turns the breaker off (max_visits stops it here).
    let lenient = SAME_FAILURE_LOOP.replace("FIX", "echo fix >> log").replace(
        "start [shape=Mdiamond]",
        "failure_signature_limit=0\n verify [max_visits=5]\n start [shape=Mdiamond]",
    );
    let ran = common::Test::new().workflow(&lenient).args(["run", "workflow.dot", "-q"]).status(1).run();
    let log = std::fs::read_to_string(ran.dir.path().join("log")).unwrap();
    assert_eq!(log.matches("verify").count(), 5, "{log}");
    assert!(ran.stderr().contains("max_visits=5"), "{}", ran.stderr());
}

#[test]
fn the_failure_counts_survive_a_resume() {
    // The fix after the second failure hangs once: the stall watchdog pauses the run there.
    let fix = "n=$(grep -c fix log); echo fix >> log; if [ $n = 1 ] && [ ! -f hung ]; then touch hung; sleep 30; fi";
    let workflow = SAME_FAILURE_LOOP
        .replace("FIX", fix)
        .replace("start [shape=Mdiamond]", "stall_timeout=\"1s\"\n start [shape=Mdiamond]");
    let ran = common::Test::new()
        .workflow(&workflow)
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(3)
        .run();
    let run = ran.dir.path().join("run");
    let resumed = Command::new(common::fabro_bin())
        .args(["resume", "run", "-q"])
        .current_dir(ran.dir.path())
        .output()
        .unwrap();
    assert_eq!(resumed.status.code(), Some(1), "{}", stderr(&resumed));
    let log = std::fs::read_to_string(ran.dir.path().join("log")).unwrap();
    assert_eq!(log.matches("verify").count(), 3, "{log}");
    let reason = read_json(&run.join("result.json"))["failure_reason"].as_str().unwrap().to_string();
    assert!(reason.contains("failed the same way 3 times"), "{reason}");
}

#[test]
fn a_loop_restart_edge_is_crossed_only_after_a_transient_failure() {
    let workflow = |script: &str| {
        format!(
            r#"digraph restarts {{
            start [shape=Mdiamond]
            exit [shape=Msquare]
            work [shape=parallelogram, script="{script}", timeout="300ms"]
            start -> work
            work -> exit [condition="outcome=success"]
            work -> work [condition="outcome=fail", loop_restart=true]
        }}"#
        )
    };
    // A deterministic failure would only come back: the run ends instead of restarting.
    let ran = common::Test::new()
        .workflow(&workflow("exit 2"))
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(1)
        .run();
    let run = ran.dir.path().join("run");
    let reason = read_json(&run.join("result.json"))["failure_reason"].as_str().unwrap().to_string();
    assert_eq!(
        reason,
        "loop_restart edge `work` -> `work` not followed: stage `work` failed with failure_class=deterministic \
         (a run restarts only after a transient_infra failure): command exited with code 2"
    );
    assert!(read_json(&run.join("manifest.json"))["restarted_as"].is_null());

    // A timeout is transient: the run restarts in a new directory and passes there.
    let ran = common::Test::new()
        .workflow(&workflow("if [ -f once ]; then exit 0; fi; touch once; sleep 5"))
        .args(["run", "workflow.dot", "--run-dir", "run", "-q"])
        .status(0)
        .run();
    let manifest = read_json(&ran.dir.path().join("run/manifest.json"));
    assert_eq!(manifest["status"], "restarted", "{manifest}");
    assert!(manifest["restarted_as"].is_string(), "{manifest}");
}
