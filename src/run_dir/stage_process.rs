//! `stages/<node>/<visit>.process.json`: the process group a command stage runs in, written when
//! it starts and removed when it ends. If fabro is killed meanwhile, the file stays, and a resume
//! kills what is left of that group before it runs the stage again, so two copies of a stage
//! never write to the work directory at once. The process's start time guards against a reused
//! pid: a group is only killed when its leader is the process the file names. The file lies
//! beside the stage directory, not in it: a confined stage can write its own directory, and a
//! record it planted there would have a resume kill a process group of its choosing.

use std::path::{Path, PathBuf};

/// The end of the file's name, after the stage directory's name.
pub const PROCESS_FILE_SUFFIX: &str = ".process.json";

/// Where the record of the stage in `stage_dir` is kept: `<visit>.process.json` beside it.
pub fn record_path(stage_dir: &Path) -> PathBuf {
    let name = stage_dir.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
    stage_dir.with_file_name(format!("{name}{PROCESS_FILE_SUFFIX}"))
}

/// A stage's running process group.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct StageProcess {
    /// The leader's pid, which is also the group id.
    pub pgid: i32,
    /// The leader's start time in clock ticks since boot (`/proc/<pid>/stat`, field 22).
    pub start_ticks: u64,
}

/// A process group left by a killed fabro, and what became of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Survivor {
    pub stage_dir: PathBuf,
    pub pgid: i32,
}

/// The start time of process `pid`, if it exists.
pub fn start_ticks(pid: i32) -> Option<u64> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces and parentheses: fields start after the last `)`.
    let rest = &stat[stat.rfind(')')? + 1..];
    // Field 3 is the first after the name, so field 22 is the 20th here.
    rest.split_whitespace().nth(19)?.parse().ok()
}

/// Records the group a stage runs in.
pub fn record(stage_dir: &Path, pgid: i32) {
    let Some(start_ticks) = start_ticks(pgid) else { return };
    let process = StageProcess { pgid, start_ticks };
    if let Err(error) = super::write_json_file(&record_path(stage_dir), &process) {
        tracing::warn!(%error, "stage process not recorded");
    }
}

/// Forgets the group of a stage that ended.
pub fn clear(stage_dir: &Path) {
    let _ = std::fs::remove_file(record_path(stage_dir));
}

/// Kills every process group that stages of the run in `root` left running, and forgets them.
pub fn kill_survivors(root: &Path) -> Vec<Survivor> {
    let mut killed = Vec::new();
    let Ok(nodes) = std::fs::read_dir(super::layout::stages_dir(root)) else { return killed };
    for record in nodes.flatten().filter_map(|node| std::fs::read_dir(node.path()).ok()).flatten().flatten() {
        let name = record.file_name().to_string_lossy().into_owned();
        let Some(visit) = name.strip_suffix(PROCESS_FILE_SUFFIX) else { continue };
        let path = record.path();
        let stage_dir = path.with_file_name(visit);
        let Ok(text) = crate::regular_file::read_to_string(&path, crate::regular_file::FileKind::Record)
        else {
            continue;
        };
        let Ok(process) = serde_json::from_str::<StageProcess>(&text) else {
            let _ = std::fs::remove_file(&path);
            continue;
        };
        // The leader is the process recorded, or gone while its group lives on (a group id is
        // not given to a new process while the group has members).
        let leader = start_ticks(process.pgid);
        let ours = leader == Some(process.start_ticks)
            || (leader.is_none() && crate::process_group::alive(process.pgid));
        if process.pgid > 1 && ours {
            crate::process_group::stop_blocking(process.pgid);
            killed.push(Survivor { stage_dir: stage_dir.clone(), pgid: process.pgid });
        }
        let _ = std::fs::remove_file(&path);
    }
    killed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_recorded_group_is_killed_only_while_its_leader_is_the_same_process() {
        let temp = tempfile::tempdir().unwrap();
        let stage_dir = temp.path().join("stages/work/1");
        std::fs::create_dir_all(&stage_dir).unwrap();
        let mut command = std::process::Command::new("sleep");
        std::os::unix::process::CommandExt::process_group(&mut command, 0);
        let mut child = command.arg("30").spawn().unwrap();
        let pgid = child.id() as i32;
        record(&stage_dir, pgid);
        assert!(temp.path().join("stages/work/1.process.json").exists());
        let killed = kill_survivors(temp.path());
        assert_eq!(killed, [Survivor { stage_dir: stage_dir.clone(), pgid }]);
        assert!(child.wait().unwrap().code().is_none(), "killed by a signal");
        assert!(!record_path(&stage_dir).exists());

        // A record whose start time does not match (a reused pid) kills nothing.
        let other = std::process::Command::new("sleep").arg("30").spawn().unwrap();
        let stale = StageProcess { pgid: other.id() as i32, start_ticks: 1 };
        crate::run_dir::write_json_file(&record_path(&stage_dir), &stale).unwrap();
        // One planted in the stage directory itself (the stage can write there) is not read.
        let planted =
            StageProcess { pgid: other.id() as i32, start_ticks: start_ticks(other.id() as i32).unwrap() };
        crate::run_dir::write_json_file(&stage_dir.join("process.json"), &planted).unwrap();
        assert!(kill_survivors(temp.path()).is_empty());
        let mut other = other;
        assert!(other.try_wait().unwrap().is_none(), "still running");
        let _ = other.kill();
        let _ = other.wait();
    }
}
