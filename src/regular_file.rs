//! Reading files fabro did not write itself, or that may have been replaced since: workflow,
//! prompt and answer files, and the records of run directories. Only regular files are read, up
//! to a size limit per kind, so `/dev/zero`, a FIFO or a huge file give a clear error at once
//! instead of filling memory or waiting for ever. Files a stage could have written (everything
//! in a run directory) are opened without following a symbolic link (`O_NOFOLLOW`): a confined
//! stage that replaces its `status.json` with a link to `~/.ssh/id_rsa` gets an error, not the
//! key. Only the user's own input files (workflow, prompt, answer and configuration files) are
//! followed through links, and what they name must be a regular file too.

use std::io::Read;
use std::os::unix::fs::{FileTypeExt, OpenOptionsExt};
use std::path::Path;

/// What a file is, for its size limit.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FileKind {
    /// Workflow, imported, prompt, answers, responses and configuration files: 16 MiB.
    Input,
    /// JSON records of a run directory (manifest, checkpoint, result, status files): 256 MiB.
    Record,
    /// A run's event log: 1 GiB.
    EventLog,
    /// The copy of the workflow a run directory keeps (`workflow.dot`): 16 MiB.
    SavedWorkflow,
    /// A file in the work directory that a stage may have written (such as `.gitignore`): 16 MiB.
    WorkFile,
    /// A project memory entry: 64 KiB.
    MemoryEntry,
}

impl FileKind {
    /// The most bytes read from a file of this kind.
    pub fn limit(self) -> u64 {
        match self {
            FileKind::Input | FileKind::SavedWorkflow | FileKind::WorkFile => 16 << 20,
            FileKind::Record => 256 << 20,
            FileKind::EventLog => 1 << 30,
            FileKind::MemoryEntry => 64 << 10,
        }
    }

    /// Whether a symbolic link at the path is followed: only for the user's own input files.
    pub fn follows_links(self) -> bool {
        self == FileKind::Input
    }

    fn name(self) -> &'static str {
        match self {
            FileKind::Input | FileKind::SavedWorkflow | FileKind::WorkFile => {
                "16 MiB, the limit for workflow, prompt and answer files"
            }
            FileKind::Record => "256 MiB, the limit for run records",
            FileKind::EventLog => "1 GiB, the limit for event logs",
            FileKind::MemoryEntry => "64 KiB, the limit for memory entries",
        }
    }
}

/// The bytes of the regular file at `path`, or an error saying why it is not read.
pub fn read(path: impl AsRef<Path>, kind: FileKind) -> std::io::Result<Vec<u8>> {
    let file = open(path.as_ref(), kind.follows_links())?;
    let too_large =
        || std::io::Error::new(std::io::ErrorKind::InvalidData, format!("it is larger than {}", kind.name()));
    let len = file.metadata()?.len();
    if len > kind.limit() {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(len as usize);
    // A file that grows while it is read is cut at the limit, and refused.
    file.take(kind.limit() + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > kind.limit() {
        return Err(too_large());
    }
    Ok(bytes)
}

/// Opens the regular file at `path` for reading, at once whatever is there: a FIFO, a device, a
/// directory or a socket is an error, and so is a symbolic link unless `follow_links`.
pub fn open(path: &Path, follow_links: bool) -> std::io::Result<std::fs::File> {
    // O_NONBLOCK: opening a FIFO must not wait for a writer. It changes nothing for regular files.
    let mut flags = libc::O_NONBLOCK;
    if !follow_links {
        flags |= libc::O_NOFOLLOW;
    }
    let file = match std::fs::OpenOptions::new().read(true).custom_flags(flags).open(path) {
        Ok(file) => file,
        Err(error) if error.raw_os_error() == Some(libc::ELOOP) && !follow_links => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "it is a symbolic link (fabro does not follow links in run directories: a stage may have \
                 planted it)",
            ))
        }
        Err(error) => return Err(error),
    };
    let file_type = file.metadata()?.file_type();
    if !file_type.is_file() {
        return Err(not_regular(file_type));
    }
    Ok(file)
}

/// Opens the regular file at `path` for appending, creating it if it is missing. What stands
/// there instead is an error at once: a symbolic link is not followed (`O_NOFOLLOW`), and a FIFO
/// is not waited on for a reader (`O_NONBLOCK`).
pub fn open_append(path: &Path) -> std::io::Result<std::fs::File> {
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .custom_flags(libc::O_NOFOLLOW | libc::O_NONBLOCK)
        .open(path)
        .map_err(|error| match error.raw_os_error() {
            Some(libc::ELOOP) => std::io::Error::new(
                std::io::ErrorKind::InvalidInput,
                "it is a symbolic link (fabro does not follow links in run directories)",
            ),
            // Opening a FIFO without a reader for writing, without waiting.
            Some(libc::ENXIO) => not_regular_kind("a FIFO (named pipe)"),
            _ => error,
        })?;
    let file_type = file.metadata()?.file_type();
    if !file_type.is_file() {
        return Err(not_regular(file_type));
    }
    Ok(file)
}

fn not_regular_kind(what: &str) -> std::io::Error {
    std::io::Error::new(
        std::io::ErrorKind::InvalidInput,
        format!("it is {what}, not a regular file (fabro reads only regular files)"),
    )
}

/// The error for a file that is not a regular one.
fn not_regular(file_type: std::fs::FileType) -> std::io::Error {
    let what = if file_type.is_dir() {
        "a directory"
    } else if file_type.is_fifo() {
        "a FIFO (named pipe)"
    } else if file_type.is_char_device() {
        "a character device"
    } else if file_type.is_block_device() {
        "a block device"
    } else if file_type.is_socket() {
        "a socket"
    } else if file_type.is_symlink() {
        "a symbolic link"
    } else {
        "a special file"
    };
    not_regular_kind(what)
}

/// Whether `path` itself (not what a link there names) is a regular file.
pub fn is_regular(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_file())
}

/// Whether `path` itself (not what a link there names) is a directory.
pub fn is_real_dir(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok_and(|meta| meta.file_type().is_dir())
}

/// Removes whatever stands at `path` (a file, a link, a FIFO: never what a link names); nothing
/// there is fine. What a stage may have planted goes before fabro makes its own file there.
pub fn remove_if_present(path: &Path) -> std::io::Result<()> {
    match std::fs::remove_file(path) {
        Err(error) if error.kind() != std::io::ErrorKind::NotFound => Err(error),
        _ => Ok(()),
    }
}

/// How many bytes at the start of `bytes` continue a character that began before them, so a
/// window cut from the middle of a file starts on a character boundary.
pub fn continuation_len(bytes: &[u8]) -> usize {
    bytes.iter().take(3).take_while(|&&byte| byte & 0xC0 == 0x80).count()
}

/// The last `max_bytes` of the regular file at `path` (not followed through a link) and how many
/// bytes before them were skipped, starting on a UTF-8 character boundary.
pub fn read_tail(path: &Path, max_bytes: u64) -> std::io::Result<(u64, Vec<u8>)> {
    use std::io::{Seek, SeekFrom};
    let mut file = open(path, false)?;
    let len = file.metadata()?.len();
    let start = len.saturating_sub(max_bytes);
    file.seek(SeekFrom::Start(start))?;
    let mut bytes = Vec::with_capacity(usize::try_from(len - start).unwrap_or(0));
    // `take` guards against the file growing (a background process still writing).
    file.take(max_bytes).read_to_end(&mut bytes)?;
    let mut skipped = start;
    if start > 0 {
        // Do not start in the middle of a multi-byte character.
        let continuation = continuation_len(&bytes);
        bytes.drain(..continuation);
        skipped += continuation as u64;
    }
    Ok((skipped, bytes))
}

/// The text of the regular file at `path`; see [`read`].
pub fn read_to_string(path: impl AsRef<Path>, kind: FileKind) -> std::io::Result<String> {
    String::from_utf8(read(path, kind)?)
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::InvalidData, "it is not UTF-8 text"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn regular_files_are_read_and_special_files_refused_at_once() {
        let temp = tempfile::tempdir().unwrap();
        let file = temp.path().join("w.dot");
        std::fs::write(&file, "digraph {}").unwrap();
        assert_eq!(read_to_string(&file, FileKind::Input).unwrap(), "digraph {}");

        let zero = read_to_string(Path::new("/dev/zero"), FileKind::Input).unwrap_err();
        assert!(zero.to_string().contains("a character device, not a regular file"), "{zero}");
        let fifo = temp.path().join("fifo");
        let made = std::ffi::CString::new(fifo.to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path only.
        assert_eq!(unsafe { libc::mkfifo(made.as_ptr(), 0o600) }, 0);
        let error = read_to_string(&fifo, FileKind::Record).unwrap_err();
        assert!(error.to_string().contains("a FIFO"), "{error}");
        let link = temp.path().join("link");
        std::os::unix::fs::symlink("/dev/zero", &link).unwrap();
        assert!(read(&link, FileKind::Input).unwrap_err().to_string().contains("character device"));
        // Run records are never read through a link, even to a regular file.
        let secret_link = temp.path().join("status.json");
        std::os::unix::fs::symlink(&file, &secret_link).unwrap();
        assert_eq!(read_to_string(&secret_link, FileKind::Input).unwrap(), "digraph {}");
        let refused = read(&secret_link, FileKind::Record).unwrap_err();
        assert!(refused.to_string().contains("symbolic link"), "{refused}");
        assert!(read_tail(&secret_link, 10).is_err());
        assert_eq!(read_tail(&file, 4).unwrap(), (6, b"h {}".to_vec()));
        assert!(read(temp.path(), FileKind::Input).is_err());
        assert_eq!(
            read(temp.path().join("none"), FileKind::Input).unwrap_err().kind(),
            std::io::ErrorKind::NotFound
        );
    }

    #[test]
    fn files_over_the_limit_are_refused() {
        let temp = tempfile::tempdir().unwrap();
        let big = temp.path().join("big.dot");
        let file = std::fs::File::create(&big).unwrap();
        file.set_len(FileKind::Input.limit() + 1).unwrap();
        let error = read(&big, FileKind::Input).unwrap_err();
        assert!(error.to_string().contains("larger than 16 MiB"), "{error}");
    }
}
