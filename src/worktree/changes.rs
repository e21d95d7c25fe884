//! The files a run changed: the diff between the commit its work directory was at when it started
//! and that work directory now (committed, staged, unstaged and untracked files alike; ignored
//! files left out), per file with its lines added and removed.
//!
//! The work directory may hold anything a stage put there, so the diff is bounded: a file over
//! [`MAX_FILE_BYTES`] counts as binary (its content is not read), at most [`MAX_FILES`] files are
//! read, and at most [`MAX_SHOWN_BYTES`] of lines are kept over all files; what is cut is said.
//! Symbolic links are never followed: git diffs a link as the path it points to.

use std::path::{Path, PathBuf};

use git2::{Delta, DiffOptions, Oid, Repository};

/// A file larger than this is not read: it is shown as binary.
pub const MAX_FILE_BYTES: u64 = 1024 * 1024;
/// The most files whose lines are read; those past it are named only.
pub const MAX_FILES: usize = 300;
/// The most text of diff lines kept over all files.
pub const MAX_SHOWN_BYTES: usize = 512 * 1024;
/// The most diff lines kept over all files.
pub const MAX_SHOWN_LINES: usize = 10_000;
/// The most diff lines kept of one file, so that one huge file leaves room for the others.
pub const MAX_FILE_LINES: usize = 2_000;
/// The most files named at all.
const MAX_NAMED: usize = 5000;

#[derive(Debug, thiserror::Error)]
pub enum ChangesError {
    #[error("{} is not inside a git repository", path.display())]
    NotARepository { path: PathBuf },
    #[error("{} does not exist any more", path.display())]
    Gone { path: PathBuf },
    #[error("`{commit}` is not a commit of the repository at {}: {message}", path.display())]
    BaseNotFound { commit: String, path: PathBuf, message: String },
    #[error("git failed to {action}: {message}")]
    Git { action: &'static str, message: String },
}

fn git(action: &'static str) -> impl FnOnce(git2::Error) -> ChangesError {
    move |error| ChangesError::Git { action, message: error.message().to_string() }
}

/// What changed since the base commit.
#[derive(Debug, Clone, Default)]
pub struct Changes {
    pub files: Vec<FileChange>,
    pub additions: usize,
    pub deletions: usize,
    /// Why some of it is not shown, when something was cut.
    pub cut: Option<String>,
}

/// How a file changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ChangeKind {
    Added,
    Deleted,
    Modified,
    Renamed,
    /// A file became a link, or the other way round.
    TypeChanged,
}

impl ChangeKind {
    pub fn as_str(self) -> &'static str {
        match self {
            ChangeKind::Added => "added",
            ChangeKind::Deleted => "deleted",
            ChangeKind::Modified => "modified",
            ChangeKind::Renamed => "renamed",
            ChangeKind::TypeChanged => "type changed",
        }
    }
}

/// One changed file.
#[derive(Debug, Clone)]
pub struct FileChange {
    pub path: String,
    /// Where it was before a rename.
    pub old_path: Option<String>,
    pub kind: ChangeKind,
    pub additions: usize,
    pub deletions: usize,
    /// Binary, or over [`MAX_FILE_BYTES`]: no lines.
    pub binary: bool,
    /// A symbolic link (its lines are the path it points to).
    pub symlink: bool,
    pub lines: Vec<DiffLine>,
    /// Its lines were not read or not all kept.
    pub cut: bool,
}

/// A line of a file's diff.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DiffLine {
    pub kind: LineKind,
    pub old_line: Option<u32>,
    pub new_line: Option<u32>,
    pub text: String,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LineKind {
    /// A hunk's header (`@@ -1,3 +1,4 @@`).
    Hunk,
    Context,
    Added,
    Removed,
}

/// The HEAD commit of the repository `dir` is in; `None` outside git or before a first commit.
pub fn head_commit(dir: &Path) -> Option<String> {
    let repo = Repository::discover(dir).ok()?;
    let commit = repo.head().ok()?.peel_to_commit().ok()?;
    Some(commit.id().to_string())
}

/// Whether `dir` is inside a git repository.
pub fn in_repository(dir: &Path) -> bool {
    Repository::discover(dir).is_ok()
}

/// What changed in the work directory `work_dir` (of a git repository) since commit `base`;
/// nothing inside the directories `left_out` (fabro's own runs directory) is counted.
pub fn since(work_dir: &Path, base: &str, left_out: &[PathBuf]) -> Result<Changes, ChangesError> {
    if std::fs::symlink_metadata(work_dir).is_err() {
        return Err(ChangesError::Gone { path: work_dir.to_path_buf() });
    }
    let repo = Repository::discover(work_dir)
        .map_err(|_| ChangesError::NotARepository { path: work_dir.to_path_buf() })?;
    let not_found = |message: String| ChangesError::BaseNotFound {
        commit: base.to_string(),
        path: work_dir.to_path_buf(),
        message,
    };
    let oid = Oid::from_str(base).map_err(|error| not_found(error.message().to_string()))?;
    let commit = repo.find_commit(oid).map_err(|error| not_found(error.message().to_string()))?;
    let tree = commit.tree().map_err(git("read the base commit's tree"))?;
    let mut options = DiffOptions::new();
    options
        .include_untracked(true)
        .recurse_untracked_dirs(true)
        .show_untracked_content(true)
        .include_typechange(true)
        .max_size(MAX_FILE_BYTES as i64)
        .context_lines(3);
    let diff = repo
        .diff_tree_to_workdir_with_index(Some(&tree), Some(&mut options))
        .map_err(git("diff the work directory against the base commit"))?;
    // As paths relative to the repository's top, as the diff names files.
    let top = repo.workdir().and_then(|top| std::fs::canonicalize(top).ok());
    let left_out: Vec<PathBuf> = left_out
        .iter()
        .filter_map(|dir| std::fs::canonicalize(dir).ok())
        .filter_map(|dir| top.as_ref().and_then(|top| dir.strip_prefix(top).ok().map(Path::to_path_buf)))
        .collect();
    Ok(collect(&diff, &left_out))
}

fn collect(diff: &git2::Diff<'_>, left_out: &[PathBuf]) -> Changes {
    let mut changes = Changes::default();
    let (mut shown, mut shown_lines) = (0usize, 0usize);
    let outside = |delta: &git2::DiffDelta<'_>| {
        let path = delta.new_file().path().or_else(|| delta.old_file().path());
        !path.is_some_and(|path| left_out.iter().any(|dir| path.starts_with(dir)))
    };
    let kept: Vec<usize> =
        diff.deltas().enumerate().filter(|(_, delta)| outside(delta)).map(|(index, _)| index).collect();
    let count = kept.len();
    for (n, index) in kept.into_iter().enumerate().take(MAX_NAMED) {
        let Some(delta) = diff.get_delta(index) else { continue };
        let path_of = |file: git2::DiffFile<'_>| file.path().map(|p| p.to_string_lossy().into_owned());
        let new_path = path_of(delta.new_file());
        let old = path_of(delta.old_file());
        let kind = match delta.status() {
            Delta::Added | Delta::Untracked | Delta::Copied => ChangeKind::Added,
            Delta::Deleted => ChangeKind::Deleted,
            Delta::Renamed => ChangeKind::Renamed,
            Delta::Typechange => ChangeKind::TypeChanged,
            _ => ChangeKind::Modified,
        };
        let symlink = [delta.new_file().mode(), delta.old_file().mode()].contains(&git2::FileMode::Link);
        let mut file = FileChange {
            path: new_path.clone().or_else(|| old.clone()).unwrap_or_default(),
            old_path: (kind == ChangeKind::Renamed).then_some(old).flatten(),
            kind,
            additions: 0,
            deletions: 0,
            binary: delta.flags().is_binary(),
            symlink,
            lines: Vec::new(),
            cut: false,
        };
        if n >= MAX_FILES {
            file.cut = true;
            changes.files.push(file);
            continue;
        }
        if let Ok(Some(patch)) = git2::Patch::from_diff(diff, index) {
            file.binary |= patch.delta().flags().is_binary();
            if let Ok((_, additions, deletions)) = patch.line_stats() {
                file.additions = additions;
                file.deletions = deletions;
            }
            'hunks: for hunk_index in 0..patch.num_hunks() {
                let Ok((hunk, lines)) = patch.hunk(hunk_index) else { break };
                let header = String::from_utf8_lossy(hunk.header()).trim_end().to_string();
                for (kind, text, old_line, new_line) in std::iter::once((LineKind::Hunk, header, None, None))
                    .chain((0..lines).filter_map(|at| {
                        let line = patch.line_in_hunk(hunk_index, at).ok()?;
                        let kind = match line.origin() {
                            '+' => LineKind::Added,
                            '-' => LineKind::Removed,
                            ' ' => LineKind::Context,
                            _ => return None,
                        };
                        let text = String::from_utf8_lossy(line.content())
                            .trim_end_matches(['\n', '\r'])
                            .to_string();
                        Some((kind, text, line.old_lineno(), line.new_lineno()))
                    }))
                {
                    let full = file.lines.len() >= MAX_FILE_LINES;
                    if full || shown + text.len() > MAX_SHOWN_BYTES || shown_lines >= MAX_SHOWN_LINES {
                        file.cut = true;
                        break 'hunks;
                    }
                    shown += text.len() + 1;
                    shown_lines += 1;
                    file.lines.push(DiffLine { kind, old_line, new_line, text });
                }
            }
        } else {
            file.cut = true;
        }
        changes.additions += file.additions;
        changes.deletions += file.deletions;
        changes.files.push(file);
    }
    let cut_files = changes.files.iter().filter(|file| file.cut).count();
    if count > MAX_NAMED || cut_files > 0 {
        let mut note = format!(
            "The diff is cut: it shows at most {MAX_FILE_LINES} lines a file, {MAX_SHOWN_LINES} lines ({} KiB) in all, and the lines of at most {MAX_FILES} files",
            MAX_SHOWN_BYTES / 1024
        );
        if count > MAX_NAMED {
            note.push_str(&format!("; {} more changed files are not named", count - MAX_NAMED));
        }
        note.push_str(&format!(" ({cut_files} file(s) not shown whole)."));
        changes.cut = Some(note);
    }
    changes
}

#[cfg(test)]
mod tests {
    use super::*;

    fn commit_all(repo: &Repository, message: &str) -> Oid {
        let mut index = repo.index().unwrap();
        index.add_all(["*"], git2::IndexAddOption::DEFAULT, None).unwrap();
        index.write().unwrap();
        let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
        let signature = git2::Signature::now("t", "t@example.com").unwrap();
        let parent = repo.head().ok().and_then(|head| head.peel_to_commit().ok());
        let parents: Vec<&git2::Commit> = parent.iter().collect();
        repo.commit(Some("HEAD"), &signature, &signature, message, &tree, &parents).unwrap()
    }

    #[test]
    fn committed_and_uncommitted_changes_since_the_base_are_counted_per_file() {
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        std::fs::write(dir.path().join("a.txt"), "one\ntwo\nthree\n").unwrap();
        std::fs::write(dir.path().join("gone.txt"), "bye\n").unwrap();
        let base = commit_all(&repo, "base");
        assert_eq!(head_commit(dir.path()), Some(base.to_string()));
        std::fs::write(dir.path().join("a.txt"), "one\n2\nthree\nfour\n").unwrap();
        std::fs::remove_file(dir.path().join("gone.txt")).unwrap();
        commit_all(&repo, "stage");
        std::fs::write(dir.path().join("new.txt"), "<script>x</script>\n").unwrap();
        std::fs::create_dir_all(dir.path().join(".fabro/runs/r1")).unwrap();
        std::fs::write(dir.path().join(".fabro/runs/r1/manifest.json"), "{}").unwrap();
        let changes = since(dir.path(), &base.to_string(), &[dir.path().join(".fabro/runs")]).unwrap();
        assert!(changes.files.iter().all(|file| !file.path.starts_with(".fabro")), "{:?}", changes.files);
        let by_path = |path: &str| changes.files.iter().find(|file| file.path == path).unwrap();
        let a = by_path("a.txt");
        assert_eq!((a.kind, a.additions, a.deletions), (ChangeKind::Modified, 2, 1));
        assert!(a.lines.iter().any(|line| line.kind == LineKind::Added && line.text == "four"));
        assert_eq!(by_path("gone.txt").kind, ChangeKind::Deleted);
        assert_eq!(by_path("new.txt").kind, ChangeKind::Added);
        assert_eq!((changes.additions, changes.deletions), (3, 2));
        assert!(changes.cut.is_none());
    }

    #[test]
    fn outside_git_an_unknown_base_and_a_huge_diff_are_told() {
        let plain = tempfile::tempdir().unwrap();
        assert!(head_commit(plain.path()).is_none());
        assert!(matches!(since(plain.path(), "abc", &[]), Err(ChangesError::NotARepository { .. })));
        assert!(matches!(since(&plain.path().join("nope"), "abc", &[]), Err(ChangesError::Gone { .. })));
        let dir = tempfile::tempdir().unwrap();
        let repo = Repository::init(dir.path()).unwrap();
        std::fs::write(dir.path().join("a.txt"), "a\n").unwrap();
        let base = commit_all(&repo, "base");
        assert!(matches!(since(dir.path(), &"0".repeat(40), &[]), Err(ChangesError::BaseNotFound { .. })));
        let line = "x".repeat(100) + "\n";
        std::fs::write(dir.path().join("big.txt"), line.repeat(8000)).unwrap();
        let changes = since(dir.path(), &base.to_string(), &[]).unwrap();
        let big = &changes.files[0];
        assert!(big.cut && big.additions == 8000, "{:?}", (big.cut, big.additions));
        assert!(changes.cut.as_deref().is_some_and(|note| note.contains("cut")));
    }
}
