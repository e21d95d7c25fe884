//! `run.lock`: only one process drives a run at a time.
//!
//! The lock is an open-file-description lock (`F_OFD_SETLK`) on `run.lock`, held for as long as
//! the process drives the run. The kernel releases it when the process ends, however it ends, so
//! a lock is never stale: there is no pid to trust, no window between creating the file and
//! writing it, and a reused pid cannot keep a run locked. The file also names the holder's pid,
//! for messages only. Dropping the lock removes the file; a process that locked a file that was
//! removed meanwhile notices and locks the new one.

use std::fs::File;
use std::io::{Read, Write};
use std::os::unix::fs::{MetadataExt, OpenOptionsExt};
use std::os::unix::io::AsRawFd;
use std::path::{Path, PathBuf};

use super::layout;
use super::{io, RunDirError};

/// Held while a process drives a run; removes `run.lock` when dropped.
#[derive(Debug)]
pub struct RunLock {
    path: PathBuf,
    _file: File,
}

impl Drop for RunLock {
    fn drop(&mut self) {
        // Removed while still locked: whoever opened it meanwhile sees it is gone and retries.
        let _ = std::fs::remove_file(&self.path);
    }
}

/// Takes the lock of the run in `root`, or says which process holds it.
pub(super) fn take(root: &Path) -> Result<RunLock, RunDirError> {
    let path = root.join(layout::RUN_LOCK);
    for _ in 0..8 {
        let mut file = std::fs::OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .custom_flags(libc::O_NOFOLLOW)
            .open(&path)
            .map_err(|source| io(&path, source))?;
        if !set_lock(&file, libc::F_WRLCK as libc::c_short).map_err(|source| io(&path, source))? {
            let mut text = String::new();
            let _ = file.read_to_string(&mut text);
            let pid = text.split_whitespace().next().and_then(|pid| pid.parse().ok());
            return Err(RunDirError::Locked { path, pid });
        }
        // The holder before us may have removed the file after we opened it: lock the new one.
        let same = match (file.metadata(), std::fs::symlink_metadata(&path)) {
            (Ok(ours), Ok(named)) => ours.dev() == named.dev() && ours.ino() == named.ino(),
            _ => false,
        };
        if !same {
            continue;
        }
        file.set_len(0).map_err(|source| io(&path, source))?;
        writeln!(file, "{}", std::process::id()).map_err(|source| io(&path, source))?;
        return Ok(RunLock { path, _file: file });
    }
    Err(io(&path, std::io::Error::other("the lock file kept being replaced; try again")))
}

/// True when a process holds the lock of the run in `root`.
/// The pid of the process holding the run's lock, when one holds it.
pub fn holder(root: &Path) -> Option<i32> {
    if !is_held(root) {
        return None;
    }
    let text = std::fs::read_to_string(root.join(layout::RUN_LOCK)).ok()?;
    text.split_whitespace().next()?.parse().ok()
}

pub fn is_held(root: &Path) -> bool {
    let Ok(file) = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(root.join(layout::RUN_LOCK))
    else {
        return false;
    };
    let mut query = lock_request(libc::F_WRLCK as libc::c_short);
    // SAFETY: fcntl(2) with F_OFD_GETLK fills the `flock` we pass and keeps no pointer to it.
    let answered = unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_GETLK, &mut query) } == 0;
    answered && query.l_type != libc::F_UNLCK as libc::c_short
}

/// A request for the whole file.
fn lock_request(kind: libc::c_short) -> libc::flock {
    // SAFETY: `flock` is plain data; all zeroes is a valid value (whole file from the start,
    // l_pid 0 as OFD locks require).
    let mut request: libc::flock = unsafe { std::mem::zeroed() };
    request.l_type = kind;
    request.l_whence = libc::SEEK_SET as libc::c_short;
    request
}

/// Tries to take the lock; false when another open file holds it.
fn set_lock(file: &File, kind: libc::c_short) -> std::io::Result<bool> {
    let request = lock_request(kind);
    // SAFETY: as in `is_held`.
    if unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &request) } == 0 {
        return Ok(true);
    }
    let error = std::io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EAGAIN) | Some(libc::EACCES) => Ok(false),
        _ => Err(error),
    }
}

/// Test helper: the lock of `root` taken through a separate open file, as another process would.
#[cfg(test)]
pub(crate) fn hold(root: &Path) -> RunLock {
    take(root).expect("lock taken")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_at_a_time_and_an_unlocked_file_is_no_lock() {
        let temp = tempfile::tempdir().unwrap();
        let lock = take(temp.path()).unwrap();
        assert!(is_held(temp.path()));
        let refused = take(temp.path());
        assert!(
            matches!(refused, Err(RunDirError::Locked { pid: Some(pid), .. }) if pid == std::process::id() as i32),
            "{refused:?}"
        );
        drop(lock);
        assert!(!temp.path().join(layout::RUN_LOCK).exists());
        assert!(!is_held(temp.path()));
        // A file left by a killed process, empty or naming a live pid, holds nothing.
        for left in ["", "1\n"] {
            std::fs::write(temp.path().join(layout::RUN_LOCK), left).unwrap();
            assert!(!is_held(temp.path()));
            drop(take(temp.path()).expect("taken over"));
        }
    }

    #[test]
    fn a_symbolic_link_is_never_followed() {
        let temp = tempfile::tempdir().unwrap();
        let target = temp.path().join("elsewhere");
        std::fs::write(&target, "keep").unwrap();
        std::os::unix::fs::symlink(&target, temp.path().join(layout::RUN_LOCK)).unwrap();
        assert!(matches!(take(temp.path()), Err(RunDirError::Io { .. })));
        assert_eq!(std::fs::read_to_string(&target).unwrap(), "keep");
    }
}
