//! A stage's output logs (a command's `stdout.log` and `stderr.log`, an LLM stage's streamed
//! `answer.log`), read from outside the stage: the last lines of a finished stage, and the new
//! lines of a running one. Only regular files are read, and never more than a bounded window of
//! them.

use super::layout;
use crate::graph::HandlerType;
use std::io::{Read, Seek, SeekFrom};
use std::path::{Path, PathBuf};

/// The logs a command stage writes, in the order they are shown.
pub const OUTPUT_LOGS: [&str; 2] = [layout::STDERR_LOG, layout::STDOUT_LOG];

/// The logs a stage of `kind` writes while it runs, to follow: a command's output, an LLM
/// stage's streamed answers; none for the others.
pub fn live_logs<S>(kind: HandlerType<S>) -> &'static [&'static str] {
    match kind {
        HandlerType::Command => &OUTPUT_LOGS,
        HandlerType::Agent | HandlerType::Prompt => &[layout::ANSWER_LOG],
        _ => &[],
    }
}

/// Followers of the logs a stage of `kind` writes in `stage_dir`, in the order they are shown.
pub fn follow_stage<S>(kind: HandlerType<S>, stage_dir: &Path) -> Vec<LogFollower> {
    live_logs(kind).iter().rev().map(|name| LogFollower::new(stage_dir.join(name))).collect()
}

/// How much of the end of a log [`tail_lines`] reads.
const TAIL_WINDOW: u64 = 64 * 1024;
/// The most one [`LogFollower::poll`] reads, so a flood of output cannot stall the caller.
const POLL_WINDOW: u64 = 1024 * 1024;
/// Longest line shown; the rest is cut with a marker.
const MAX_LINE_CHARS: usize = 300;

/// The last `max_bytes` of a file as text, cut at a character boundary (invalid UTF-8 is
/// replaced); `None` when the file cannot be read or is not a regular file: a symbolic link (a
/// stage may have put one in its directory, pointing anywhere) or a FIFO is not read.
pub fn read_tail(path: &Path, max_bytes: u64) -> Option<String> {
    let (_, bytes) = crate::regular_file::read_tail(path, max_bytes).ok()?;
    Some(String::from_utf8_lossy(&bytes).into_owned())
}

/// The last `max_lines` non-empty lines of the log at `path` (empty when it is missing, empty or
/// not a regular file).
pub fn tail_lines(path: &Path, max_lines: usize) -> Vec<String> {
    let Some(len) = open_regular(path).and_then(|file| file.metadata().ok()).map(|meta| meta.len()) else {
        return Vec::new();
    };
    let Some(text) = read_tail(path, TAIL_WINDOW) else { return Vec::new() };
    let mut lines: Vec<&str> = text.lines().collect();
    if len > TAIL_WINDOW && !lines.is_empty() {
        lines.remove(0); // begins mid-line
    }
    let kept: Vec<String> = lines
        .iter()
        .rev()
        .filter(|line| !line.trim().is_empty())
        .take(max_lines)
        .map(|line| shorten(line))
        .collect();
    kept.into_iter().rev().collect()
}

/// Follows a log that a running stage appends to: each [`poll`](LogFollower::poll) returns the
/// lines completed since the last one.
#[derive(Debug)]
pub struct LogFollower {
    path: PathBuf,
    offset: u64,
    partial: Vec<u8>,
}

impl LogFollower {
    pub fn new(path: PathBuf) -> LogFollower {
        LogFollower { path, offset: 0, partial: Vec::new() }
    }

    /// The log this follows.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// Lines completed since the last poll.
    pub fn poll(&mut self) -> Vec<String> {
        let Some(mut file) = open_regular(&self.path) else { return Vec::new() };
        let mut chunk = Vec::new();
        if file.seek(SeekFrom::Start(self.offset)).is_err()
            || file.take(POLL_WINDOW).read_to_end(&mut chunk).is_err()
        {
            return Vec::new();
        }
        self.offset += chunk.len() as u64;
        self.partial.extend_from_slice(&chunk);
        let Some(last_newline) = self.partial.iter().rposition(|&b| b == b'\n') else { return Vec::new() };
        let complete: Vec<u8> = self.partial.drain(..=last_newline).collect();
        String::from_utf8_lossy(&complete).lines().map(shorten).collect()
    }

    /// What is left once the stage has ended, including a last line without a newline.
    pub fn finish(&mut self) -> Vec<String> {
        let mut lines = self.poll();
        while !lines.is_empty() && self.offset_is_behind() {
            lines.extend(self.poll());
        }
        if !self.partial.is_empty() {
            lines.push(shorten(&String::from_utf8_lossy(&std::mem::take(&mut self.partial))));
        }
        lines
    }

    fn offset_is_behind(&self) -> bool {
        std::fs::metadata(&self.path).is_ok_and(|meta| meta.len() > self.offset)
    }
}

/// The regular file at `path`, opened without following a symbolic link and without waiting on
/// a FIFO.
fn open_regular(path: &Path) -> Option<std::fs::File> {
    crate::regular_file::open(path, false).ok()
}

fn shorten(line: &str) -> String {
    let line = line.trim_end_matches('\r');
    match line.char_indices().nth(MAX_LINE_CHARS) {
        Some((cut, _)) => format!("{}… ({} more characters)", &line[..cut], line[cut..].chars().count()),
        None => line.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn the_tail_is_the_last_non_empty_lines_and_long_lines_are_cut() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("stderr.log");
        assert!(tail_lines(&path, 5).is_empty(), "missing file");
        let long = "x".repeat(400);
        std::fs::write(&path, format!("one\ntwo\n\nthree\n{long}\n\n")).unwrap();
        let tail = tail_lines(&path, 3);
        assert_eq!(tail[..2], ["two", "three"]);
        assert!(tail[2].starts_with(&"x".repeat(300)) && tail[2].ends_with("… (100 more characters)"));
        // Only the end of a big log is read; its first, partial line is dropped.
        let big: String = (0..20_000).map(|i| format!("line {i}\n")).collect();
        std::fs::write(&path, big).unwrap();
        assert_eq!(tail_lines(&path, 2), ["line 19998", "line 19999"]);
        // A directory is no log.
        assert!(tail_lines(temp.path(), 2).is_empty());
    }

    #[test]
    fn a_follower_returns_each_completed_line_once() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("stdout.log");
        let mut follower = LogFollower::new(path.clone());
        assert!(follower.poll().is_empty(), "not written yet");
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(b"compiling\nwarn").unwrap();
        assert_eq!(follower.poll(), ["compiling"]);
        assert!(follower.poll().is_empty());
        file.write_all(b"ing: x\ndone").unwrap();
        assert_eq!(follower.poll(), ["warning: x"]);
        assert_eq!(follower.finish(), ["done"]);
        assert!(follower.finish().is_empty());
    }
}
