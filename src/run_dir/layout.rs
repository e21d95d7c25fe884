//! The names of a run directory's files (the constants below: only this module spells them), and
//! where its per-stage files live, and how their directory names are made and read:
//!
//! ```text
//! stages/<node>/<visit>/                 the first run of a visit
//! stages/<node>/<visit>.<n>/             the n-th run of the same visit (after a pause, a crash,
//!                                        a rewind)
//! parallel/<node>/<visit>/               a parallel stage's journal of finished branches
//! worktrees/<node>/<visit>/<branch>/     the git worktree of one branch of a parallel stage
//! children/<node>/<visit>[-<n>]/         a manager stage's child run (the n-th for one visit)
//! threads/<encoded key>.jsonl            a conversation thread under `full` fidelity
//! worktree/                              the run's own git worktree (`--worktree`)
//! ```
//!
//! Every such path is made here, so that no reader guesses `<visit>` where the visit ran again as
//! `<visit>.<n>`, and no writer invents a second spelling.

use std::path::{Path, PathBuf};

// The files of a run directory, and of a stage visit's directory. Only this module spells them.

/// `manifest.json`: the run's manifest: its id, workflow, status, how it was launched.
pub const MANIFEST: &str = "manifest.json";
/// `containers.json`: the containers the run's stages ran in (sandbox=podman or docker).
pub const CONTAINERS: &str = "containers.json";
/// `checkpoint.json`: the last snapshot of the run's state.
pub const CHECKPOINT: &str = "checkpoint.json";
/// `journal.jsonl`: what happened since the snapshot, one entry per line.
pub const JOURNAL: &str = "journal.jsonl";
/// `result.json`: how the run ended.
pub const RESULT: &str = "result.json";
/// `events.jsonl`: the run's events, one JSON object per line.
pub const EVENTS: &str = "events.jsonl";
/// `workflow.dot`: the workflow as the run started it (resume continues with this copy).
pub const SAVED_WORKFLOW: &str = "workflow.dot";
/// `stages/`: a directory per stage, one per visit inside.
pub const STAGES_DIR: &str = "stages";
/// `parallel/`: the journals of parallel stages' finished branches.
pub const PARALLEL_DIR: &str = "parallel";
/// `worktree/`: the run's own git worktree (`--worktree`).
pub const RUN_WORKTREE_DIR: &str = "worktree";
/// `attempts/`: a retried stage visit's earlier attempts, inside its stage directory.
pub const ATTEMPTS_DIR: &str = "attempts";
/// `config-files.json`: the texts of the configuration files the run started with.
pub const CONFIG_FILES: &str = "config-files.json";
/// `run.lock`: held while a process runs the run.
pub const RUN_LOCK: &str = "run.lock";
/// `retro.json`: the run's retrospective, as data.
pub const RETRO_JSON: &str = "retro.json";
/// `retro.md`: the run's retrospective, to read.
pub const RETRO_MD: &str = "retro.md";
/// `submission.json`: a run asked for before its process started (`--detach`, the run service).
pub const SUBMISSION: &str = "submission.json";
/// `output.log`: what the process of a submitted run printed.
pub const OUTPUT_LOG: &str = "output.log";
/// The files a run directory may hold before its process creates the run.
pub const SUBMISSION_FILES: [&str; 2] = [SUBMISSION, OUTPUT_LOG];

/// Whether `name` is one of [`SUBMISSION_FILES`], or the temporary file of a write of one
/// (`.<file>.<pid>.tmp`: the launcher records the process while the process starts).
pub fn is_submission_file(name: &str) -> bool {
    SUBMISSION_FILES.contains(&name)
        || name.strip_prefix('.').and_then(|rest| rest.strip_suffix(".tmp")).is_some_and(|rest| {
            SUBMISSION_FILES
                .iter()
                .any(|file| rest.strip_prefix(file).is_some_and(|pid| pid.starts_with('.')))
        })
}
/// `interrupt.request`: asks the process running the run to pause it after the stage in flight
/// (the run service's `POST .../interrupt`); the process removes it when it pauses.
pub const INTERRUPT_REQUEST: &str = "interrupt.request";
/// `serve-resume.log`: what a resume started from `fabro serve` printed.
pub const SERVE_RESUME_LOG: &str = "serve-resume.log";
/// `status.json`: a stage visit's status: outcome, failure, usage, what it wrote.
pub const STATUS: &str = "status.json";
/// `preamble.md`: what an LLM stage was shown of the run so far.
pub const PREAMBLE: &str = "preamble.md";
/// `prompt.md`: the prompt an LLM stage sent.
pub const PROMPT: &str = "prompt.md";
/// `history.jsonl`: the conversation an LLM stage continued, as the backend received it.
pub const HISTORY: &str = "history.jsonl";
/// `response.md`: the answer an LLM stage received.
pub const RESPONSE: &str = "response.md";
/// `answer.log`: an LLM stage's answers as they were streamed, to follow while it runs.
pub const ANSWER_LOG: &str = "answer.log";
/// `transcript.jsonl`: an agent stage's model and tool calls, one per line.
pub const TRANSCRIPT: &str = "transcript.jsonl";
/// `stdout.log`: a command stage's standard output.
pub const STDOUT_LOG: &str = "stdout.log";
/// `stderr.log`: a command stage's standard error.
pub const STDERR_LOG: &str = "stderr.log";
/// `context.json`: the run context a command stage's script can read (`FABRO_CONTEXT`).
pub const CONTEXT_SNAPSHOT: &str = "context.json";

/// `config-files.json`: the texts of the configuration files the run started with.
pub fn config_files(root: &Path) -> PathBuf {
    root.join(CONFIG_FILES)
}

/// `stages/` of the run in `root`.
pub fn stages_dir(root: &Path) -> PathBuf {
    root.join(STAGES_DIR)
}

/// `stages/<node>/`.
pub fn node_dir(root: &Path, node_id: &str) -> PathBuf {
    stages_dir(root).join(node_id)
}

/// `parallel/<node>/<visit>/`: which branches of a parallel stage's visit finished.
pub fn parallel_journal_dir(root: &Path, node_id: &str, visit: u32) -> PathBuf {
    root.join(PARALLEL_DIR).join(node_id).join(visit.to_string())
}

/// `worktrees/<node>/<visit>/<branch>/`: where a branch of a parallel stage works in worktree mode.
pub fn branch_worktree_dir(root: &Path, node_id: &str, visit: u32, branch_id: &str) -> PathBuf {
    root.join("worktrees").join(node_id).join(visit.to_string()).join(branch_id)
}

/// `children/<node>/<visit>/`, then `<visit>-2/`, ...: the `n`-th child run directory of a
/// manager stage's visit (a child started again beside one that cannot continue).
pub fn child_run_dir(root: &Path, node_id: &str, visit: u32, n: u32) -> PathBuf {
    let base = root.join("children").join(node_id);
    match n {
        0 | 1 => base.join(visit.to_string()),
        n => base.join(format!("{visit}-{n}")),
    }
}

/// `threads/`: the conversation threads of `full` fidelity stages.
pub fn threads_dir(root: &Path) -> PathBuf {
    root.join("threads")
}

/// `threads/<encoded key>.jsonl`: one thread, one message per line.
pub fn thread_file(root: &Path, key: &str) -> PathBuf {
    threads_dir(root).join(format!("{}.jsonl", crate::context::artifacts::encode_key(key)))
}

/// The thread key a file in `threads/` holds, when it is a thread file.
pub fn thread_key(file_name: &str) -> Option<String> {
    file_name.strip_suffix(".jsonl").and_then(crate::context::artifacts::decode_key)
}

/// `worktree/`: the run's git worktree in worktree mode.
pub fn run_worktree_dir(root: &Path) -> PathBuf {
    root.join(RUN_WORKTREE_DIR)
}

/// The name of the `run`-th directory of `visit` (runs count from 1): `3`, `3.2`, `3.3`, ...
pub fn visit_dir_name(visit: u32, run: u32) -> String {
    if run <= 1 {
        visit.to_string()
    } else {
        format!("{visit}.{run}")
    }
}

/// The visit and run a directory name stands for: `3` is (3, 1), `3.2` is (3, 2).
pub fn parse_visit_dir_name(name: &str) -> Option<(u32, u32)> {
    let (visit, run) = match name.split_once('.') {
        Some((visit, run)) => (visit, run.parse().ok().filter(|run| *run >= 2)?),
        None => (name, 1),
    };
    Some((visit.parse().ok()?, run))
}

/// Every directory of `visit` of `node_id`, in the order they ran.
fn visit_dirs(root: &Path, node_id: &str, visit: u32) -> Vec<PathBuf> {
    let mut found: Vec<(u32, PathBuf)> = std::fs::read_dir(node_dir(root, node_id))
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|entry| {
            let (seen, run) = parse_visit_dir_name(entry.file_name().to_str()?)?;
            (seen == visit && entry.file_type().ok()?.is_dir()).then(|| (run, entry.path()))
        })
        .collect();
    found.sort_by_key(|(run, _)| *run);
    found.into_iter().map(|(_, dir)| dir).collect()
}

/// The directory of the latest run of `visit`: the one a running or resumed stage works in.
pub fn latest_visit_dir(root: &Path, node_id: &str, visit: u32) -> Option<PathBuf> {
    visit_dirs(root, node_id, visit).pop()
}

/// The directory where `visit` finished (the latest run with a `status.json`), else the latest.
pub fn finished_visit_dir(root: &Path, node_id: &str, visit: u32) -> Option<PathBuf> {
    let dirs = visit_dirs(root, node_id, visit);
    dirs.iter().rev().find(|dir| dir.join("status.json").is_file()).or(dirs.last()).cloned()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip() {
        assert_eq!(visit_dir_name(3, 1), "3");
        assert_eq!(visit_dir_name(3, 2), "3.2");
        assert_eq!(parse_visit_dir_name("3"), Some((3, 1)));
        assert_eq!(parse_visit_dir_name("3.2"), Some((3, 2)));
        for odd in ["", "x", "3.", "3.1", "3.x", ".2", "3.2.1"] {
            assert_eq!(parse_visit_dir_name(odd), None, "{odd}");
        }
    }

    #[test]
    fn a_rerun_visit_is_found_in_its_latest_and_its_finished_directory() {
        let temp = tempfile::tempdir().unwrap();
        let stages = temp.path().join("stages/gate");
        for name in ["1", "1.2", "1.3", "11"] {
            std::fs::create_dir_all(stages.join(name)).unwrap();
        }
        std::fs::write(stages.join("1.2/status.json"), "{}").unwrap();
        assert_eq!(finished_visit_dir(temp.path(), "gate", 1), Some(stages.join("1.2")));
        assert_eq!(latest_visit_dir(temp.path(), "gate", 1), Some(stages.join("1.3")));
        std::fs::remove_file(stages.join("1.2/status.json")).unwrap();
        assert_eq!(finished_visit_dir(temp.path(), "gate", 1), Some(stages.join("1.3")));
        assert_eq!(finished_visit_dir(temp.path(), "gate", 11), Some(stages.join("11")));
        assert_eq!(finished_visit_dir(temp.path(), "gate", 2), None);
        assert_eq!(latest_visit_dir(temp.path(), "other", 1), None);
    }
}
