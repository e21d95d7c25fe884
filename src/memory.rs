//! Project memory: what agent stages with `memory=true` learned and chose to keep, recalled by
//! later runs of any workflow of the same project. The store is `.fabro/memory/` in the root of
//! the work directory's git repository (its main worktree; else in the work directory; a stage's
//! `memory_dir` names another), one JSON file per entry,
//! written atomically. An entry has a kind (fact, preference, decision, warning), a name (the
//! same name replaces) and a text. At stage start the entries become one block of the system
//! prompt, ordered by kind then name and capped at [`BLOCK_CAP`] characters.

use std::path::{Path, PathBuf};

use crate::atomic_file::write_atomic;
use crate::context::artifacts::encode_key;

/// Most characters of the memory block's entries; entries past it are left out.
pub const BLOCK_CAP: usize = 8_000;
/// Longest name and text of an entry.
pub const MAX_NAME_CHARS: usize = 80;
pub const MAX_TEXT_CHARS: usize = 2_000;
/// Most entries `memory_extract` keeps from one stage.
pub const MAX_EXTRACTED: usize = 5;

/// What an entry is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Kind {
    Fact,
    Preference,
    Decision,
    Warning,
}

impl Kind {
    pub const NAMES: &'static [&'static str] = &["fact", "preference", "decision", "warning"];

    pub fn from_name(name: &str) -> Option<Kind> {
        match name.trim().to_ascii_lowercase().as_str() {
            "fact" => Some(Kind::Fact),
            "preference" => Some(Kind::Preference),
            "decision" => Some(Kind::Decision),
            "warning" => Some(Kind::Warning),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        Kind::NAMES[self as usize]
    }
}

/// One remembered entry, as stored.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct Entry {
    pub kind: Kind,
    pub name: String,
    pub text: String,
    /// When it was written (RFC 3339), and by which run and stage.
    pub updated_at: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub node: Option<String>,
}

impl Entry {
    /// A checked entry: a known kind, a one-line name and a text within their limits.
    pub fn new(kind: &str, name: &str, text: &str) -> Result<Entry, MemoryError> {
        let kind = Kind::from_name(kind).ok_or_else(|| {
            MemoryError::Invalid(format!("kind `{kind}` is not one of {}", Kind::NAMES.join(", ")))
        })?;
        let (name, text) = (name.trim(), text.trim());
        if name.is_empty() || name.contains(['\n', '\r']) || name.chars().count() > MAX_NAME_CHARS {
            return Err(MemoryError::Invalid(format!(
                "the name must be one line of 1 to {MAX_NAME_CHARS} characters"
            )));
        }
        if text.is_empty() || text.chars().count() > MAX_TEXT_CHARS {
            return Err(MemoryError::Invalid(format!("the text must have 1 to {MAX_TEXT_CHARS} characters")));
        }
        Ok(Entry {
            kind,
            name: name.to_string(),
            text: text.to_string(),
            updated_at: crate::event_log::now_rfc3339(),
            run_id: None,
            node: None,
        })
    }

    /// The entry's line in the memory block.
    fn line(&self) -> String {
        format!("- [{}] {}: {}\n", self.kind.as_str(), self.name, self.text.replace('\n', " "))
    }
}

#[derive(Debug, thiserror::Error)]
pub enum MemoryError {
    #[error("{0}")]
    Invalid(String),
    #[error("no memory entry is named `{0}`")]
    NotFound(String),
    #[error("the memory store {path}: {source}")]
    Io { path: PathBuf, source: std::io::Error },
    #[error("the memory entry {path} is not valid: {message}")]
    Corrupt { path: PathBuf, message: String },
}

/// The root of the project `dir` is in: its git repository's main worktree, else `dir`.
pub fn project_root(dir: &Path) -> PathBuf {
    let Ok(repo) = git2::Repository::discover(dir) else { return dir.to_path_buf() };
    if repo.is_worktree() {
        // A linked worktree's common directory is the main repository's `.git`.
        if let Ok(main) = git2::Repository::open(repo.commondir()) {
            if let Some(root) = main.workdir() {
                return root.to_path_buf();
            }
        }
    }
    repo.workdir().map_or_else(|| dir.to_path_buf(), Path::to_path_buf)
}

/// A project's memory store.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemoryStore {
    dir: PathBuf,
}

impl MemoryStore {
    /// The store at `dir` (`.../.fabro/memory`).
    pub fn at(dir: impl Into<PathBuf>) -> MemoryStore {
        MemoryStore { dir: dir.into() }
    }

    /// The store of the project `work_dir` is in: `.fabro/memory` at the root of its git
    /// repository's main worktree (so the branches of a parallel stage, each in a worktree of
    /// its own, share it), else in `work_dir` itself.
    pub fn of_project(work_dir: &Path) -> MemoryStore {
        MemoryStore::at(project_root(work_dir).join(".fabro").join("memory"))
    }

    /// The store `memory_dir` names (relative to `work_dir`), else the project's.
    pub fn for_stage(work_dir: &Path, memory_dir: Option<&str>) -> MemoryStore {
        match memory_dir {
            Some(dir) => MemoryStore::at(work_dir.join(dir)),
            None => MemoryStore::of_project(work_dir),
        }
    }

    /// Whether the store holds any entry.
    pub fn has_entries(&self) -> bool {
        std::fs::read_dir(&self.dir)
            .into_iter()
            .flatten()
            .flatten()
            .any(|entry| entry.path().extension().is_some_and(|ext| ext == "json"))
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    fn path_of(&self, name: &str) -> PathBuf {
        self.dir.join(format!("{}.json", encode_key(name.trim())))
    }

    fn io(&self, source: std::io::Error) -> MemoryError {
        MemoryError::Io { path: self.dir.clone(), source }
    }

    /// Refuses a store that is not a directory of its own: `.fabro` or `memory` replaced by a
    /// link (a stage's shell may have made one to send `remember` elsewhere) or by a file.
    fn check_dir(&self) -> Result<(), MemoryError> {
        for dir in [self.dir.parent(), Some(self.dir.as_path())].into_iter().flatten() {
            match std::fs::symlink_metadata(dir) {
                Ok(meta) if meta.is_dir() => {}
                Ok(_) => {
                    return Err(MemoryError::Io {
                        path: dir.to_path_buf(),
                        source: std::io::Error::new(
                            std::io::ErrorKind::InvalidInput,
                            "it is not a directory of its own (a symbolic link or a file; fabro does not \
                             follow links there): remove it",
                        ),
                    })
                }
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                Err(error) => return Err(MemoryError::Io { path: dir.to_path_buf(), source: error }),
            }
        }
        Ok(())
    }

    /// Every entry, ordered by kind then name. A store that does not exist is empty.
    pub fn list(&self) -> Result<Vec<Entry>, MemoryError> {
        self.check_dir()?;
        let listing = match std::fs::read_dir(&self.dir) {
            Ok(listing) => listing,
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(error) => return Err(self.io(error)),
        };
        let mut entries = Vec::new();
        for item in listing {
            let path = item.map_err(|e| self.io(e))?.path();
            if path.extension().is_none_or(|ext| ext != "json") {
                continue;
            }
            entries.push(read_entry(&path)?);
        }
        entries.sort_by(|a, b| (a.kind, &a.name).cmp(&(b.kind, &b.name)));
        Ok(entries)
    }

    pub fn get(&self, name: &str) -> Result<Entry, MemoryError> {
        self.check_dir()?;
        let path = self.path_of(name);
        if std::fs::symlink_metadata(&path).is_err() {
            return Err(MemoryError::NotFound(name.trim().to_string()));
        }
        read_entry(&path)
    }

    /// Writes `entry` (atomically), replacing one of the same name; true when it replaced one.
    pub fn put(&self, entry: &Entry) -> Result<bool, MemoryError> {
        self.check_dir()?;
        std::fs::create_dir_all(&self.dir).map_err(|e| self.io(e))?;
        self.check_dir()?;
        let path = self.path_of(&entry.name);
        let replaced = std::fs::symlink_metadata(&path).is_ok();
        let mut json = serde_json::to_vec_pretty(entry).map_err(|e| self.io(e.into()))?;
        json.push(b'\n');
        write_atomic(&path, &json).map_err(|e| self.io(e))?;
        Ok(replaced)
    }

    pub fn remove(&self, name: &str) -> Result<(), MemoryError> {
        let path = self.path_of(name);
        match std::fs::remove_file(&path) {
            Ok(()) => Ok(()),
            Err(error) if error.kind() == std::io::ErrorKind::NotFound => {
                Err(MemoryError::NotFound(name.trim().to_string()))
            }
            Err(error) => Err(self.io(error)),
        }
    }

    /// Removes every entry; returns how many there were.
    pub fn clear(&self) -> Result<usize, MemoryError> {
        let entries = self.list()?;
        for entry in &entries {
            self.remove(&entry.name)?;
        }
        Ok(entries.len())
    }
}

fn read_entry(path: &Path) -> Result<Entry, MemoryError> {
    let text = crate::regular_file::read_to_string(path, crate::regular_file::FileKind::MemoryEntry)
        .map_err(|source| MemoryError::Io { path: path.to_path_buf(), source })?;
    serde_json::from_str(&text)
        .map_err(|error| MemoryError::Corrupt { path: path.to_path_buf(), message: error.to_string() })
}

/// The memory block of a stage's system prompt: `entries` (ordered by kind then name) up to
/// [`BLOCK_CAP`] characters; the header says how many were left out. Empty without entries.
pub fn block(entries: &[Entry]) -> String {
    if entries.is_empty() {
        return String::new();
    }
    let mut lines = String::new();
    let mut shown = 0;
    for entry in entries {
        let line = entry.line();
        if lines.len() + line.len() > BLOCK_CAP {
            break;
        }
        lines.push_str(&line);
        shown += 1;
    }
    let dropped = entries.len() - shown;
    let count = if dropped == 0 {
        format!("{shown} entries")
    } else {
        format!("{shown} of {} entries; {dropped} left out past the {BLOCK_CAP}-character cap", entries.len())
    };
    format!(
        "MEMORY: facts recalled from earlier runs ({count}). They were true when written; check one against the \
         code before you rely on it, and replace it with remember (same name) when it has changed.\n{lines}"
    )
}

/// The memory of one agent stage (`memory=true`): its project's store, whether it is asked for
/// entries at its end (`memory_extract=true`), and who writes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StageMemory {
    pub store: MemoryStore,
    pub extract: bool,
    pub run_id: String,
}

impl StageMemory {
    /// Checks and writes one entry for `node`; returns it and whether it replaced one.
    pub fn remember(
        &self,
        node: &str,
        kind: &str,
        name: &str,
        text: &str,
    ) -> Result<(Entry, bool), MemoryError> {
        let entry = Entry {
            run_id: Some(self.run_id.clone()),
            node: Some(node.to_string()),
            ..Entry::new(kind, name, text)?
        };
        let replaced = self.store.put(&entry)?;
        Ok((entry, replaced))
    }
}

/// The `remember` tool an agent stage with memory gets.
pub fn tool_definition() -> crate::chat::ToolDefinition {
    crate::chat::ToolDefinition {
        name: REMEMBER.into(),
        description: "Keep something for later runs of this project (any workflow): they see it at their start. kind:                       fact, preference, decision or warning; name: a short unique name (the same name replaces an                       entry, to correct it); text: one or two sentences. Keep only what is durable and not obvious                       from the code.".into(),
        parameters: serde_json::json!({"type": "object", "properties": {
            "kind": {"type": "string", "enum": Kind::NAMES},
            "name": {"type": "string"},
            "text": {"type": "string"}}, "required": ["kind", "name", "text"]}),
    }
}

/// The name of the tool.
pub const REMEMBER: &str = "remember";

/// The entries in a model's answer to the extraction request: a JSON array of `{kind, name,
/// text}`, possibly inside other text; invalid ones are skipped, at most [`MAX_EXTRACTED`].
pub fn parse_extracted(answer: &str) -> Vec<Entry> {
    let (Some(start), Some(end)) = (answer.find('['), answer.rfind(']')) else { return Vec::new() };
    let Ok(serde_json::Value::Array(items)) = serde_json::from_str(answer.get(start..=end).unwrap_or(""))
    else {
        return Vec::new();
    };
    let field = |item: &serde_json::Value, key: &str| {
        item.get(key).and_then(|v| v.as_str()).unwrap_or("").to_string()
    };
    items
        .iter()
        .filter_map(|item| Entry::new(&field(item, "kind"), &field(item, "name"), &field(item, "text")).ok())
        .take(MAX_EXTRACTED)
        .collect()
}

/// What a stage with `memory_extract=true` is asked at its end.
pub const EXTRACT_REQUEST: &str = "Your work on this stage is done. Before it ends: is there anything a later run of \
     this project should know from the start? Answer with only a JSON array of at most 5 entries \
     [{\"kind\": \"fact|preference|decision|warning\", \"name\": \"short-unique-name\", \"text\": \"one or two \
     sentences\"}], kept to what is durable and not obvious from the code (build quirks, decisions and why, traps). \
     Answer [] when there is nothing worth keeping.";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_branches_of_a_parallel_stage_in_worktrees_share_the_main_worktrees_memory() {
        let temp = tempfile::tempdir().unwrap();
        let main = temp.path().join("main");
        std::fs::create_dir_all(main.join("src")).unwrap();
        let git = |dir: &Path, args: &[&str]| {
            let status = std::process::Command::new("git")
                .args(args)
                .current_dir(dir)
                .env("GIT_AUTHOR_NAME", "t")
                .env("GIT_AUTHOR_EMAIL", "t@t")
                .env("GIT_COMMITTER_NAME", "t")
                .env("GIT_COMMITTER_EMAIL", "t@t")
                .status()
                .unwrap();
            assert!(status.success(), "git {args:?}");
        };
        git(&main, &["init", "-q"]);
        std::fs::write(main.join("src/a.txt"), "a").unwrap();
        git(&main, &["add", "."]);
        git(&main, &["commit", "-qm", "a"]);
        let branch = temp.path().join("branch");
        git(&main, &["worktree", "add", "-q", branch.to_str().unwrap()]);
        let main = main.canonicalize().unwrap();
        assert_eq!(project_root(&main.join("src")).canonicalize().unwrap(), main);
        assert_eq!(project_root(&branch.join("src")).canonicalize().unwrap(), main);
        let outside = temp.path().join("plain");
        std::fs::create_dir_all(&outside).unwrap();
        assert_eq!(project_root(&outside), outside);
        assert_eq!(MemoryStore::for_stage(&outside, Some("notes/mem")).dir(), outside.join("notes/mem"));
    }

    fn entry(kind: &str, name: &str, text: &str) -> Entry {
        Entry::new(kind, name, text).unwrap()
    }

    #[test]
    fn entries_round_trip_and_the_same_name_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let store = MemoryStore::at(dir.path().join(".fabro/memory"));
        assert!(store.list().unwrap().is_empty());
        assert!(!store.put(&entry("warning", "flaky test", "net::retry is flaky")).unwrap());
        assert!(!store.put(&entry("fact", "db", "Postgres 15")).unwrap());
        assert!(store.put(&entry("fact", "db", "Postgres 16")).unwrap());
        let names: Vec<String> =
            store.list().unwrap().iter().map(|e| format!("{}:{}", e.kind.as_str(), e.name)).collect();
        assert_eq!(names, ["fact:db", "warning:flaky test"]);
        assert_eq!(store.get("db").unwrap().text, "Postgres 16");
        store.remove("db").unwrap();
        assert!(matches!(store.remove("db"), Err(MemoryError::NotFound(_))));
        assert_eq!(store.clear().unwrap(), 1);
    }

    #[test]
    fn a_store_that_is_a_link_and_entries_that_are_not_files_are_refused_at_once() {
        let temp = tempfile::tempdir().unwrap();
        let elsewhere = temp.path().join("elsewhere");
        std::fs::create_dir_all(&elsewhere).unwrap();
        std::fs::create_dir_all(temp.path().join("project/.fabro")).unwrap();
        std::os::unix::fs::symlink(&elsewhere, temp.path().join("project/.fabro/memory")).unwrap();
        let store = MemoryStore::at(temp.path().join("project/.fabro/memory"));
        let error = store.put(&entry("fact", "build", "cargo build")).unwrap_err();
        assert!(error.to_string().contains("not a directory of its own"), "{error}");
        assert!(store.list().is_err());
        assert_eq!(std::fs::read_dir(&elsewhere).unwrap().count(), 0, "nothing written through the link");

        let store = MemoryStore::at(temp.path().join("real/.fabro/memory"));
        store.put(&entry("fact", "build", "cargo build")).unwrap();
        let fifo = std::ffi::CString::new(store.dir().join("stuck.json").to_str().unwrap()).unwrap();
        // SAFETY: mkfifo reads the NUL-terminated path only.
        assert_eq!(unsafe { libc::mkfifo(fifo.as_ptr(), 0o600) }, 0);
        let error = store.list().unwrap_err();
        assert!(error.to_string().contains("FIFO"), "{error}");
        std::fs::remove_file(store.dir().join("stuck.json")).unwrap();
        std::os::unix::fs::symlink("/dev/zero", store.dir().join("zero.json")).unwrap();
        let error = store.list().unwrap_err();
        assert!(error.to_string().contains("symbolic link"), "{error}");
    }

    #[test]
    fn bad_entries_say_what_is_wrong() {
        assert!(Entry::new("rumour", "a", "b").unwrap_err().to_string().contains("not one of fact"));
        assert!(Entry::new("fact", "two\nlines", "b").is_err());
        assert!(Entry::new("fact", "a", " ").is_err());
        assert!(Entry::new("fact", "a", &"x".repeat(MAX_TEXT_CHARS + 1)).is_err());
    }

    #[test]
    fn the_block_is_ordered_and_capped() {
        let mut entries: Vec<Entry> =
            (0..30).map(|i| entry("decision", &format!("d{i:02}"), &"y".repeat(400))).collect();
        entries.insert(0, entry("fact", "db", "Postgres 16"));
        let text = block(&entries);
        assert!(text.starts_with("MEMORY: facts recalled from earlier runs (20 of 31 entries; 11 left out past the 8000-character cap)"), "{}", &text[..200]);
        assert!(text.contains("\n- [fact] db: Postgres 16\n- [decision] d00: "));
        let body = text.split_once('\n').unwrap().1;
        assert!(body.len() <= BLOCK_CAP);
        assert_eq!(block(&[]), "");
    }

    #[test]
    fn extracted_entries_are_read_from_the_answer() {
        let answer =
            "Here:\n```json\n[{\"kind\":\"fact\",\"name\":\"port\",\"text\":\"The API listens on 8080.\"},\
                      {\"kind\":\"gossip\",\"name\":\"x\",\"text\":\"y\"}]\n```";
        let entries = parse_extracted(answer);
        assert_eq!(entries.len(), 1);
        assert_eq!(entries[0].name, "port");
        assert!(parse_extracted("nothing").is_empty());
        assert!(parse_extracted("[]").is_empty());
    }
}
