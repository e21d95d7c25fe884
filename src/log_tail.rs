//! Following a file that grows by whole lines (a run's `events.jsonl`): each read returns the
//! lines written since the last one. `fabro logs -f`, `fabro attach` and the service's event
//! streams follow runs with it.
//!
//! The file is opened afresh at each read and never through a symbolic link (a stage may have put
//! one in the run directory); a file that is not there yet, or is not a regular file, has no
//! lines. A last line without its newline waits for it. A file replaced by another, or found
//! shorter than what was read, is read again from its start, and the read says so.

use std::io::{Read, Seek, SeekFrom};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

/// At most this much is read at a time, so one read of a very large log stays bounded.
const CHUNK: u64 = 1 << 20;

/// Where a reader is in a growing file.
#[derive(Debug)]
pub struct LogTail {
    path: PathBuf,
    offset: u64,
    /// Bytes read after the last newline.
    unfinished: Vec<u8>,
    /// The device and inode of the file read so far.
    file_id: Option<(u64, u64)>,
}

/// What one read found.
#[derive(Debug, Default, PartialEq, Eq)]
pub struct NewLines {
    /// The whole lines written since the last read, without their newlines.
    pub lines: Vec<String>,
    /// The file was replaced, or shorter than what had been read: these lines are from its start
    /// again.
    pub restarted: bool,
    /// The read stopped at its bound: there is more to read now.
    pub more: bool,
}

impl LogTail {
    pub fn new(path: &Path) -> LogTail {
        LogTail { path: path.to_path_buf(), offset: 0, unfinished: Vec::new(), file_id: None }
    }

    /// The whole lines written since the last read (at most about 1 MiB of them; read again for
    /// more).
    pub fn read_new(&mut self) -> NewLines {
        let mut new = NewLines::default();
        let Ok(mut file) = crate::regular_file::open(&self.path, false) else { return new };
        let Ok(meta) = file.metadata() else { return new };
        let file_id = Some((meta.dev(), meta.ino()));
        if meta.len() < self.offset || (self.file_id.is_some() && self.file_id != file_id) {
            self.offset = 0;
            self.unfinished.clear();
            new.restarted = true;
        }
        self.file_id = file_id;
        let mut chunk = Vec::new();
        if file.seek(SeekFrom::Start(self.offset)).is_err()
            || file.take(CHUNK).read_to_end(&mut chunk).is_err()
        {
            return new;
        }
        self.offset += chunk.len() as u64;
        new.more = chunk.len() as u64 == CHUNK;
        self.unfinished.extend_from_slice(&chunk);
        if let Some(last) = self.unfinished.iter().rposition(|&byte| byte == b'\n') {
            let whole: Vec<u8> = self.unfinished.drain(..=last).collect();
            let text = String::from_utf8_lossy(&whole[..last]);
            new.lines = text.split('\n').map(str::to_string).collect();
        }
        new
    }

    /// A last line without its newline, taken: for a file no more will be written to.
    pub fn take_unfinished(&mut self) -> Option<String> {
        if self.unfinished.is_empty() {
            return None;
        }
        let line = String::from_utf8_lossy(&self.unfinished).into_owned();
        self.unfinished.clear();
        Some(line)
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use super::*;

    #[test]
    fn lines_come_once_whole_and_a_replaced_file_is_read_from_its_start() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let mut tail = LogTail::new(&path);
        assert_eq!(tail.read_new(), NewLines::default(), "nothing before the file is there");
        let mut file = std::fs::File::create(&path).unwrap();
        file.write_all(b"one\ntwo\nthr").unwrap();
        assert_eq!(tail.read_new().lines, ["one", "two"]);
        assert!(tail.read_new().lines.is_empty());
        file.write_all(b"ee\n\nfour\n").unwrap();
        assert_eq!(tail.read_new().lines, ["three", "", "four"]);
        file.write_all(b"fi").unwrap();
        assert!(tail.read_new().lines.is_empty());
        assert_eq!(tail.take_unfinished().as_deref(), Some("fi"));
        assert_eq!(tail.take_unfinished(), None);

        std::fs::write(&path, "new\n").unwrap();
        assert_eq!(
            tail.read_new(),
            NewLines { lines: vec!["new".to_string()], restarted: true, more: false }
        );
        // Replaced by a longer file: a new inode, read from its start.
        std::fs::write(dir.path().join("next"), "a much longer first line\nsecond\n").unwrap();
        std::fs::rename(dir.path().join("next"), &path).unwrap();
        let lines = vec!["a much longer first line".to_string(), "second".to_string()];
        assert_eq!(tail.read_new(), NewLines { lines, restarted: true, more: false });
    }

    #[test]
    fn a_large_file_is_read_in_bounded_steps() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("events.jsonl");
        let line = "x".repeat(999);
        std::fs::write(&path, format!("{line}\n").repeat(3000)).unwrap();
        let mut tail = LogTail::new(&path);
        let (mut lines, mut reads) = (0, 0);
        loop {
            let new = tail.read_new();
            assert!(new.lines.iter().all(|read| *read == line));
            lines += new.lines.len();
            reads += 1;
            if !new.more {
                break;
            }
        }
        assert_eq!((lines, reads), (3000, 3));
    }

    #[test]
    fn a_link_is_not_followed() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("elsewhere"), "secret\n").unwrap();
        let path = dir.path().join("events.jsonl");
        std::os::unix::fs::symlink(dir.path().join("elsewhere"), &path).unwrap();
        assert_eq!(LogTail::new(&path).read_new(), NewLines::default());
    }
}
