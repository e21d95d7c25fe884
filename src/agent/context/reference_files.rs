//! Reference files (the context store): files every agent stage of a run is told about, from the
//! graph's `context_files="docs/schema.sql, specs/"` (relative to the workflow file) and
//! `fabro run --context-file PATH[=NAME]` (relative to the current directory). Folders expand to
//! the files under them. The system prompt of each agent stage gets an index (name, path, size,
//! first line) and the agent reads them with `read_file`, which may read them even outside the
//! work directory; their content is never pasted into the prompt.

use std::path::{Path, PathBuf};

/// Most files a folder expands to; the rest are named by a count (the folder stays readable).
pub const MAX_FILES_PER_FOLDER: usize = 200;
/// Longest first line shown in the index.
const FIRST_LINE_CHARS: usize = 120;

/// One reference file of a run: the name the index shows and its absolute path.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct ReferenceFile {
    pub name: String,
    pub path: PathBuf,
}

/// One entry as written: `PATH` or `PATH=NAME`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReferenceEntry {
    pub path: String,
    pub name: Option<String>,
}

impl ReferenceEntry {
    /// `PATH` or `PATH=NAME` (a name is what follows the last `=`).
    pub fn parse(text: &str) -> Option<ReferenceEntry> {
        let text = text.trim();
        let (path, name) = match text.rsplit_once('=') {
            Some((path, name)) if !name.trim().is_empty() => (path.trim(), Some(name.trim().to_string())),
            _ => (text.trim_end_matches('='), None),
        };
        (!path.is_empty()).then(|| ReferenceEntry { path: path.to_string(), name })
    }

    /// The entries of a `context_files` attribute: comma-separated.
    pub fn list(text: &str) -> Vec<ReferenceEntry> {
        text.split(',').filter_map(ReferenceEntry::parse).collect()
    }
}

/// A reference file that cannot be used.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ReferenceError {
    #[error("the context file {path} does not exist{base}")]
    Missing { path: String, base: String },
    #[error("the context file {path} cannot be read: {message}")]
    Unreadable { path: String, message: String },
}

/// The files of `entries`, relative paths taken from `base`; folders expand to the files under
/// them, sorted, hidden ones left out.
pub fn expand(entries: &[ReferenceEntry], base: &Path) -> Result<Vec<ReferenceFile>, ReferenceError> {
    let mut files = Vec::new();
    for entry in entries {
        let given = Path::new(&entry.path);
        let path = if given.is_absolute() { given.to_path_buf() } else { base.join(given) };
        let unreadable = |error: std::io::Error| ReferenceError::Unreadable {
            path: entry.path.clone(),
            message: error.to_string(),
        };
        let metadata = match std::fs::metadata(&path) {
            Ok(metadata) => metadata,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                return Err(ReferenceError::Missing {
                    path: entry.path.clone(),
                    base: if given.is_absolute() {
                        String::new()
                    } else {
                        format!(" (in {})", base.display())
                    },
                })
            }
            Err(error) => return Err(unreadable(error)),
        };
        let path = path.canonicalize().map_err(unreadable)?;
        if metadata.is_dir() {
            let prefix = entry.name.clone().unwrap_or_else(|| entry.path.trim_end_matches('/').to_string());
            let mut found = Vec::new();
            walk(&path, &mut found).map_err(unreadable)?;
            found.sort();
            files.extend(found.into_iter().take(MAX_FILES_PER_FOLDER).map(|file| {
                let inner = file.strip_prefix(&path).unwrap_or(&file).display().to_string();
                ReferenceFile { name: format!("{prefix}/{inner}"), path: file }
            }));
        } else {
            let name = entry.name.clone().unwrap_or_else(|| entry.path.clone());
            files.push(ReferenceFile { name, path });
        }
    }
    files.dedup_by(|a, b| a.path == b.path);
    Ok(files)
}

/// The files of the workflow's `context_files` attribute, relative to the workflow file.
pub fn of_workflow(workflow: &crate::graph::Workflow) -> Result<Vec<ReferenceFile>, ReferenceError> {
    match workflow.settings().context_files.as_deref() {
        Some(text) => expand(&ReferenceEntry::list(text), &base_of(workflow)),
        None => Ok(Vec::new()),
    }
}

/// Where the workflow's relative `context_files` start: its file's directory.
pub fn base_of(workflow: &crate::graph::Workflow) -> PathBuf {
    match workflow.source().path().parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir.to_path_buf(),
        _ => PathBuf::from("."),
    }
}

/// `files` followed by those of `added` it does not hold yet (a resume's `--context-file`).
pub fn merged(mut files: Vec<ReferenceFile>, added: Vec<ReferenceFile>) -> Vec<ReferenceFile> {
    for file in added {
        if !files.iter().any(|known| known.path == file.path) {
            files.push(file);
        }
    }
    files
}

/// The regular files under `dir`, hidden files and folders left out.
fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    for entry in std::fs::read_dir(dir)? {
        let entry = entry?;
        if entry.file_name().to_string_lossy().starts_with('.') {
            continue;
        }
        let kind = entry.file_type()?;
        if kind.is_dir() {
            walk(&entry.path(), out)?;
        } else if kind.is_file() {
            out.push(entry.path());
        }
    }
    Ok(())
}

/// The index block of an agent stage's system prompt; empty without reference files. Sizes and
/// first lines are read now, so a file changed by an earlier stage shows as it is.
pub fn index(files: &[ReferenceFile]) -> String {
    if files.is_empty() {
        return String::new();
    }
    let mut block = format!(
        "REFERENCE FILES: {} file(s) this workflow gives you to consult. Read what you need with read_file \
         (path as shown; offset and limit page large files) instead of guessing; they are not in this \
         conversation.\n",
        files.len()
    );
    for file in files {
        let (size, first) = match std::fs::symlink_metadata(&file.path) {
            Ok(metadata) => (human_size(metadata.len()), first_line(&file.path)),
            Err(_) => ("gone".to_string(), String::new()),
        };
        block.push_str(&format!("- {} ({size}) {}", file.name, file.path.display()));
        if !first.is_empty() {
            block.push_str(&format!(" | {first}"));
        }
        block.push('\n');
    }
    block
}

fn first_line(path: &Path) -> String {
    use std::io::{BufRead, Read};
    // The path was resolved when the run started: a link a stage put there since is not
    // followed, and a FIFO is not waited on.
    let Ok(file) = crate::regular_file::open(path, false) else { return String::new() };
    let mut line = Vec::new();
    let _ = std::io::BufReader::new(file.take(4096)).read_until(b'\n', &mut line);
    let text = String::from_utf8_lossy(&line);
    let text = text.trim();
    if text.chars().any(|c| c.is_control() && c != '\t') {
        return "(binary)".to_string();
    }
    match text.char_indices().nth(FIRST_LINE_CHARS) {
        Some((at, _)) => format!("{}…", &text[..at]),
        None => text.to_string(),
    }
}

fn human_size(bytes: u64) -> String {
    match bytes {
        0..1024 => format!("{bytes} B"),
        1024..1_048_576 => format!("{:.1} KB", bytes as f64 / 1024.0),
        _ => format!("{:.1} MB", bytes as f64 / 1_048_576.0),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_take_an_optional_name() {
        assert_eq!(
            ReferenceEntry::list(" docs/schema.sql , specs/=specs, ,x=y=z"),
            vec![
                ReferenceEntry { path: "docs/schema.sql".into(), name: None },
                ReferenceEntry { path: "specs/".into(), name: Some("specs".into()) },
                ReferenceEntry { path: "x=y".into(), name: Some("z".into()) },
            ]
        );
        assert_eq!(ReferenceEntry::parse("="), None);
    }

    #[test]
    fn folders_expand_and_the_index_shows_size_and_first_line() {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("specs/api/.hidden")).unwrap();
        std::fs::write(dir.path().join("schema.sql"), "CREATE TABLE users (id int);\n-- more\n").unwrap();
        std::fs::write(dir.path().join("specs/b.md"), "# B\n").unwrap();
        std::fs::write(dir.path().join("specs/api/a.md"), "# A\n").unwrap();
        std::fs::write(dir.path().join("specs/api/.hidden/x"), "no").unwrap();
        std::fs::write(dir.path().join("specs/.env"), "no").unwrap();
        let files = expand(&ReferenceEntry::list("schema.sql=db, specs/"), dir.path()).unwrap();
        let names: Vec<&str> = files.iter().map(|f| f.name.as_str()).collect();
        assert_eq!(names, ["db", "specs/api/a.md", "specs/b.md"]);
        assert!(files.iter().all(|f| f.path.is_absolute()));
        let block = index(&files);
        assert!(block.starts_with("REFERENCE FILES: 3 file(s)"), "{block}");
        assert!(block.contains("- db (37 B) "), "{block}");
        assert!(block.contains("schema.sql | CREATE TABLE users (id int);\n"), "{block}");
        assert_eq!(index(&[]), "");
    }

    #[test]
    fn a_missing_file_names_its_path_and_base() {
        let dir = tempfile::tempdir().unwrap();
        let error = expand(&ReferenceEntry::list("docs/nope.md"), dir.path()).unwrap_err();
        assert_eq!(
            error.to_string(),
            format!("the context file docs/nope.md does not exist (in {})", dir.path().display())
        );
    }
}
