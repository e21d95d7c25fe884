//! Crash-safe file replacement, for every file fabro writes whole (run records, artifacts, tool
//! output kept beside a transcript).

use std::io::Write;
use std::path::Path;

/// How hard a write tries to survive a power loss.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Durability {
    /// fsync the file and its directory: the write survives a crash of the machine.
    #[default]
    Synced,
    /// Rename only: survives a crash of the process, not of the machine; much faster.
    Unsynced,
}

/// Writes `bytes` to `path` so that readers see either the old file or the whole new one: write a
/// temporary file beside it, fsync it, rename it over `path`, fsync the directory. The run's
/// secrets ([`crate::secrets`]) are redacted from what is written.
pub fn write_atomic(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    write_atomic_with(path, bytes, Durability::Synced)
}

/// [`write_atomic`] with a choice of durability.
pub fn write_atomic_with(path: &Path, bytes: &[u8], durability: Durability) -> std::io::Result<()> {
    // Run records, checkpoints and artifacts never hold the run's secrets.
    let bytes = &*crate::secrets::redact_bytes(bytes);
    let dir = parent(path);
    let temp = temp_beside(path);
    let result = (|| {
        let mut file = create_temp(&temp)?;
        file.write_all(bytes)?;
        if durability == Durability::Synced {
            file.sync_all()?;
        }
        std::fs::rename(&temp, path)?;
        sync_dir(dir, durability)
    })();
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// Makes `link` another name for the (already complete) file `original`, replacing `link`
/// atomically; copies when the file system has no hard links.
pub fn link_atomic(original: &Path, link: &Path, durability: Durability) -> std::io::Result<()> {
    let temp = temp_beside(link);
    let _ = std::fs::remove_file(&temp);
    let result = std::fs::hard_link(original, &temp)
        .or_else(|_| std::fs::copy(original, &temp).map(drop))
        .and_then(|()| std::fs::rename(&temp, link))
        .and_then(|()| sync_dir(parent(link), durability));
    if result.is_err() {
        let _ = std::fs::remove_file(&temp);
    }
    result
}

/// Creates the temporary file afresh. Its name is predictable, so what stands there (a link a
/// stage planted in its own directory, pointing at a file of the user's) is removed, and the new
/// file is made with `O_EXCL`, which never follows a link.
fn create_temp(temp: &Path) -> std::io::Result<std::fs::File> {
    crate::regular_file::remove_if_present(temp)?;
    std::fs::OpenOptions::new().write(true).create_new(true).open(temp)
}

fn parent(path: &Path) -> &Path {
    path.parent().filter(|p| !p.as_os_str().is_empty()).unwrap_or(Path::new("."))
}

fn temp_beside(path: &Path) -> std::path::PathBuf {
    let name = path.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default();
    parent(path).join(format!(".{name}.{}.tmp", std::process::id()))
}

fn sync_dir(dir: &Path, durability: Durability) -> std::io::Result<()> {
    match durability {
        Durability::Synced => std::fs::File::open(dir)?.sync_all(),
        Durability::Unsynced => Ok(()),
    }
}
