//! Reading files fabro did not write itself, or that may have been replaced since: workflow,
//! prompt and answer files, and the records of run directories. Only regular files are read, up
//! to a size limit per kind, so `/dev/zero`, a FIFO or a huge file give a clear error at once
//! instead of filling memory or waiting for ever. Symbolic links are followed to what they name,
//! which must be a regular file too.

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
}

impl FileKind {
    /// The most bytes read from a file of this kind.
    pub fn limit(self) -> u64 {
        match self {
            FileKind::Input => 16 << 20,
            FileKind::Record => 256 << 20,
            FileKind::EventLog => 1 << 30,
        }
    }

    fn name(self) -> &'static str {
        match self {
            FileKind::Input => "16 MiB, the limit for workflow, prompt and answer files",
            FileKind::Record => "256 MiB, the limit for run records",
            FileKind::EventLog => "1 GiB, the limit for event logs",
        }
    }
}

/// The bytes of the regular file at `path`, or an error saying why it is not read.
pub fn read(path: impl AsRef<Path>, kind: FileKind) -> std::io::Result<Vec<u8>> {
    let path = path.as_ref();
    // O_NONBLOCK: opening a FIFO must not wait for a writer. It changes nothing for regular files.
    let file = std::fs::OpenOptions::new().read(true).custom_flags(libc::O_NONBLOCK).open(path)?;
    let meta = file.metadata()?;
    let file_type = meta.file_type();
    if !file_type.is_file() {
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
        } else {
            "a special file"
        };
        return Err(std::io::Error::new(
            std::io::ErrorKind::InvalidInput,
            format!("it is {what}, not a regular file (fabro reads only regular files)"),
        ));
    }
    let too_large =
        || std::io::Error::new(std::io::ErrorKind::InvalidData, format!("it is larger than {}", kind.name()));
    if meta.len() > kind.limit() {
        return Err(too_large());
    }
    let mut bytes = Vec::with_capacity(meta.len() as usize);
    // A file that grows while it is read is cut at the limit, and refused.
    file.take(kind.limit() + 1).read_to_end(&mut bytes)?;
    if bytes.len() as u64 > kind.limit() {
        return Err(too_large());
    }
    Ok(bytes)
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
        assert!(read(&link, FileKind::Record).unwrap_err().to_string().contains("character device"));
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
