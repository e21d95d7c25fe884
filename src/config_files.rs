//! The configuration files a run reads when it starts: the fabro config file, the `fabro.toml`
//! beside the workflow and an `--mcp-config` file. They can make fabro run code (lifecycle
//! hooks, MCP servers) outside any sandbox, and they may lie in the work directory, where a
//! confined stage can rewrite them. So a run reads each once, keeps the texts it read in its run
//! directory (`config-files.json`), and a resume reads them from there, never again from the
//! files: a change found on resume is reported ([`ConfigFiles::changed`]), not obeyed.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, PoisonError};

/// Where the texts come from, and the texts read so far (`None`: the file did not exist).
/// Clones share the record, so every reader of one run adds to the same snapshot.
#[derive(Debug, Clone, Default)]
pub struct ConfigFiles {
    inner: Arc<Mutex<Snapshot>>,
}

#[derive(Debug, Default, serde::Serialize, serde::Deserialize)]
struct Snapshot {
    files: BTreeMap<PathBuf, Option<String>>,
    /// Read from a run directory: the texts are what the run started with.
    #[serde(skip)]
    saved: bool,
}

/// Why a run's saved configuration cannot be used.
#[derive(Debug, thiserror::Error)]
#[error("cannot read the configuration the run started with ({path}): {message}")]
pub struct ConfigFilesError {
    pub path: PathBuf,
    pub message: String,
}

impl ConfigFiles {
    /// Files read from disk as they are asked for (a new run).
    pub fn from_disk() -> ConfigFiles {
        ConfigFiles::default()
    }

    /// The texts a run started with, kept at `path` (its `config-files.json`). A run made before
    /// fabro kept them has none: its files are read from disk, as they were then.
    pub fn saved_at(path: &Path) -> Result<ConfigFiles, ConfigFilesError> {
        let path = path.to_path_buf();
        let bytes = match crate::regular_file::read(&path, crate::regular_file::FileKind::Record) {
            Ok(bytes) => bytes,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(ConfigFiles::default()),
            Err(error) => return Err(ConfigFilesError { path, message: error.to_string() }),
        };
        let mut snapshot: Snapshot = serde_json::from_slice(&bytes)
            .map_err(|error| ConfigFilesError { path: path.clone(), message: error.to_string() })?;
        snapshot.saved = true;
        Ok(ConfigFiles { inner: Arc::new(Mutex::new(snapshot)) })
    }

    /// The text of the configuration file at `path` (`None` when there is none): what the run
    /// started with when it was saved, else the file now (remembered for [`ConfigFiles::save`]).
    /// A path the saved run never read (a flag given only on resume) is read now.
    pub fn read(&self, path: &Path) -> std::io::Result<Option<String>> {
        let key = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let mut snapshot = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(text) = snapshot.files.get(&key) {
            return Ok(text.clone());
        }
        let text = read_now(path)?;
        snapshot.files.insert(key, text.clone());
        Ok(text)
    }

    /// Like [`ConfigFiles::read`], but a resume sees only the files its run read when it started:
    /// one it never read counts as absent (a settings file that appeared since, perhaps written
    /// by a stage, is not obeyed).
    pub fn read_as_started(&self, path: &Path) -> std::io::Result<Option<String>> {
        let key = std::path::absolute(path).unwrap_or_else(|_| path.to_path_buf());
        let snapshot = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if snapshot.saved {
            return Ok(snapshot.files.get(&key).cloned().flatten());
        }
        drop(snapshot);
        self.read(path)
    }

    /// Whether the texts are those a run started with.
    pub fn is_saved(&self) -> bool {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).saved
    }

    /// The files whose text on disk now differs from the one the run started with.
    pub fn changed(&self) -> Vec<PathBuf> {
        let snapshot = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if !snapshot.saved {
            return Vec::new();
        }
        snapshot
            .files
            .iter()
            .filter(|(path, text)| read_now(path).ok().as_ref() != Some(*text))
            .map(|(path, _)| path.clone())
            .collect()
    }

    /// Keeps the texts read so far at `path` (a resume keeps the file it read them from).
    pub fn save(&self, path: &Path) -> std::io::Result<()> {
        let snapshot = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        if snapshot.saved || snapshot.files.is_empty() {
            return Ok(());
        }
        let json = serde_json::to_vec_pretty(&*snapshot).map_err(std::io::Error::other)?;
        crate::atomic_file::write_atomic(path, &json)
    }
}

fn read_now(path: &Path) -> std::io::Result<Option<String>> {
    match crate::regular_file::read_to_string(path, crate::regular_file::FileKind::Input) {
        Ok(text) => Ok(Some(text)),
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => Ok(None),
        Err(error) => Err(error),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_resume_reads_the_texts_the_run_started_with_and_reports_changes() {
        let temp = tempfile::tempdir().unwrap();
        let file = temp.path().join("fabro.toml");
        let missing = temp.path().join("config.toml");
        std::fs::write(&file, "[[hooks]]\n").unwrap();
        let run = ConfigFiles::from_disk();
        assert_eq!(run.read(&file).unwrap().as_deref(), Some("[[hooks]]\n"));
        assert_eq!(run.read(&missing).unwrap(), None);
        let saved = temp.path().join("config-files.json");
        run.save(&saved).unwrap();

        std::fs::write(&file, "planted").unwrap();
        std::fs::write(&missing, "planted too").unwrap();
        let resumed = ConfigFiles::saved_at(&saved).unwrap();
        assert!(resumed.is_saved());
        assert_eq!(resumed.read(&file).unwrap().as_deref(), Some("[[hooks]]\n"));
        assert_eq!(resumed.read(&missing).unwrap(), None);
        assert_eq!(resumed.changed(), [missing.clone(), file.clone()]);
        // The record is not rewritten by a resume.
        resumed.save(&saved).unwrap();
        assert_eq!(
            ConfigFiles::saved_at(&saved).unwrap().read(&file).unwrap().as_deref(),
            Some("[[hooks]]\n")
        );
        // A run from before the record reads the files now.
        assert!(!ConfigFiles::saved_at(&temp.path().join("none.json")).unwrap().is_saved());
    }
}
