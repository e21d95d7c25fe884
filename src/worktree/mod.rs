//! Git worktree mode (`fabro run --worktree`): a run works in its own git worktree on its own
//! branch, `fabro/run/<run id>`, and every stage ends with a commit on that branch.
//!
//! The user's checkout (its HEAD, index and work tree) is never touched: only a new branch and a
//! new worktree are added to the repository, so the user can go on working while a run is in
//! flight, and merge (or throw away) the run's branch afterwards.
//!
//! Each stage's commit carries trailers (`Fabro-Run`, `Fabro-Node`, `Fabro-Visit`), so the branch
//! history can be matched to the run's checkpoints; resume and fork check out those commits.
//!
//! [`RunWorktree`] holds paths only and opens the repository for each operation: that keeps it
//! `Send + Sync` (a `git2::Repository` is not `Sync`), and opening a repository is cheap next to a
//! stage.

pub mod branch;
pub mod changes;

use std::path::{Path, PathBuf};

use git2::build::CheckoutBuilder;
use git2::{
    BranchType, ErrorCode, IndexAddOption, Oid, Repository, ResetType, Signature, WorktreeAddOptions,
};

/// The prefix of every run branch.
pub const BRANCH_PREFIX: &str = "fabro/run/";

/// Name and email used for stage commits when the git configuration has no `user.name` or
/// `user.email`, so a run never fails for want of an identity.
const FALLBACK_NAME: &str = "fabro";
const FALLBACK_EMAIL: &str = "fabro@localhost";

#[derive(Debug, thiserror::Error)]
pub enum WorktreeError {
    #[error("--worktree needs a git repository; {} is not inside one", path.display())]
    NotARepository { path: PathBuf },
    #[error("--worktree needs a commit to start from, but the repository at {} has no commits yet (HEAD is unborn); commit something first", repo.display())]
    NoHead { repo: PathBuf },
    #[error("branch `{branch}` already exists in {}; a run branch is never reused (delete it with `git branch -D {branch}` or use another run id)", repo.display())]
    BranchExists { branch: String, repo: PathBuf },
    #[error("run id `{run_id}` cannot be used in a git branch name (`{BRANCH_PREFIX}{run_id}`)")]
    InvalidRunId { run_id: String },
    #[error("worktree path {} already exists; a run worktree is always created fresh", path.display())]
    PathExists { path: PathBuf },
    #[error("{} is not a fabro run worktree: {reason}", path.display())]
    NotARunWorktree { path: PathBuf, reason: String },
    #[error("commit `{commit}` not found in the repository of {}: {message}", path.display())]
    CommitNotFound { commit: String, path: PathBuf, message: String },
    #[error("cannot create {}: {source}", path.display())]
    Io { path: PathBuf, source: std::io::Error },
    #[error("git failed to {action}: {message}")]
    Git { action: &'static str, message: String },
}

/// Wraps a git2 error with what was being done.
fn git(action: &'static str) -> impl FnOnce(git2::Error) -> WorktreeError {
    move |error| WorktreeError::Git { action, message: error.message().to_string() }
}

/// A run's git worktree: the directory its stages run in, checked out on the run's branch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunWorktree {
    /// The checkout the user works in (the main worktree when re-opened), for the merge hint;
    /// the repository's git directory when it is bare.
    repo_root: PathBuf,
    /// The run's worktree, absolute.
    path: PathBuf,
    /// `fabro/run/<run id>`.
    branch: String,
}

impl RunWorktree {
    /// Creates branch `fabro/run/<run_id>` from HEAD of the repository containing `start_dir`
    /// and a worktree for it at `worktree_path` (e.g. `<run_dir>/worktree`), which must not
    /// exist. The user's checkout is left exactly as it was.
    pub fn create(
        start_dir: &Path,
        run_id: &str,
        worktree_path: &Path,
    ) -> Result<RunWorktree, WorktreeError> {
        let repo = Repository::discover(start_dir)
            .map_err(|_| WorktreeError::NotARepository { path: start_dir.to_path_buf() })?;
        let repo_root = repo_root(&repo);
        let head = match repo.head() {
            Ok(head) => head,
            Err(e) if matches!(e.code(), ErrorCode::UnbornBranch | ErrorCode::NotFound) => {
                return Err(WorktreeError::NoHead { repo: repo_root });
            }
            Err(e) => return Err(git("read HEAD")(e)),
        };
        let commit = head.peel_to_commit().map_err(git("read the commit at HEAD"))?;
        add_worktree(&repo, repo_root, commit.id(), &run_branch_name(run_id)?, run_id, worktree_path)
    }

    /// Re-opens an existing run worktree (resume). When `commit` is given, the run branch is reset
    /// hard to it, as the checkpoint saw it: tracked files are restored, files not in the commit
    /// are removed from the work tree, ignored files are kept (they are build output and caches,
    /// never part of a stage's commit).
    pub fn open(worktree_path: &Path, commit: Option<&str>) -> Result<RunWorktree, WorktreeError> {
        let repo = open_run_repo(worktree_path)?;
        let branch = run_branch(&repo, worktree_path)?;
        if let Some(commit) = commit {
            let target = find_commit(&repo, commit, worktree_path)?;
            let object = target.as_object();
            repo.reset(object, ResetType::Hard, None).map_err(git("reset the run worktree"))?;
            // A hard reset keeps untracked files; a stage that wrote files after the checkpoint
            // would otherwise leak them into the resumed run.
            let mut checkout = CheckoutBuilder::new();
            checkout.force().remove_untracked(true).remove_ignored(false);
            repo.checkout_head(Some(&mut checkout))
                .map_err(git("remove files not in the checkpoint's commit"))?;
        }
        let path = repo.workdir().map(Path::to_path_buf).unwrap_or_else(|| worktree_path.to_path_buf());
        Ok(RunWorktree { repo_root: main_repo_root(&repo), path, branch })
    }

    /// For `fabro fork`: creates branch `fabro/run/<new_run_id>` at `commit` (a commit of the
    /// run in `existing_worktree`) and a worktree for it at `worktree_path`. The existing
    /// worktree and its branch are only read.
    pub fn fork(
        existing_worktree: &Path,
        commit: &str,
        new_run_id: &str,
        worktree_path: &Path,
    ) -> Result<RunWorktree, WorktreeError> {
        let repo = open_run_repo(existing_worktree)?;
        let oid = find_commit(&repo, commit, existing_worktree)?.id();
        add_worktree(
            &repo,
            main_repo_root(&repo),
            oid,
            &run_branch_name(new_run_id)?,
            new_run_id,
            worktree_path,
        )
    }

    /// The run's work directory: where its stages run.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The run's branch, `fabro/run/<run id>`.
    pub fn branch(&self) -> &str {
        &self.branch
    }

    /// The checkout the user works in (for a re-opened worktree, the repository's main worktree).
    pub fn repo_root(&self) -> &Path {
        &self.repo_root
    }

    /// Stages every change in the worktree (added, modified and deleted files; ignored files
    /// stay out) and commits it on the run branch as
    /// `fabro(<run_id>): <node_id> (<status>)` with trailers `Fabro-Run`, `Fabro-Node` and
    /// `Fabro-Visit`. Commits even when nothing changed, so every stage has a commit to resume
    /// or fork from. Returns the commit's sha in hex.
    pub fn commit_stage(
        &self,
        run_id: &str,
        node_id: &str,
        visit: u32,
        status: &str,
    ) -> Result<String, WorktreeError> {
        let repo = open_run_repo(&self.path)?;
        // Refuse to commit on anything but the run branch: someone may have switched the
        // worktree to another branch, and a stage commit there would be a surprise.
        let on = run_branch(&repo, &self.path)?;
        if on != self.branch {
            return Err(WorktreeError::NotARunWorktree {
                path: self.path.clone(),
                reason: format!("HEAD is on `{on}`, not on the run branch `{}`", self.branch),
            });
        }
        let mut index = repo.index().map_err(git("read the worktree's index"))?;
        index.add_all(["*"], IndexAddOption::DEFAULT, None).map_err(git("stage new and modified files"))?;
        index.update_all(["*"], None).map_err(git("stage deleted files"))?;
        index.write().map_err(git("write the worktree's index"))?;
        let tree_id = index.write_tree().map_err(git("write the stage's tree"))?;
        let tree = repo.find_tree(tree_id).map_err(git("read the stage's tree"))?;
        let parent = repo
            .head()
            .and_then(|head| head.peel_to_commit())
            .map_err(git("read the run branch's last commit"))?;
        let signature = signature(&repo)?;
        let message = stage_message(run_id, node_id, visit, status);
        let oid = repo
            .commit(Some("HEAD"), &signature, &signature, &message, &tree, &[&parent])
            .map_err(git("commit the stage"))?;
        Ok(oid.to_string())
    }

    /// Text for the run summary: where the run's changes are, and how to merge them and remove
    /// the worktree.
    pub fn merge_hint(&self) -> String {
        let root = shell_quote(&self.repo_root.display().to_string());
        let path = shell_quote(&self.path.display().to_string());
        let branch = shell_quote(&self.branch);
        format!(
            "The run's changes are on branch {branch}, checked out in {path}.\n\
             To merge them into your current branch:\n    git -C {root} merge {branch}\n\
             To look at them first:\n    git -C {root} log -p HEAD..{branch}\n\
             To remove the worktree when done (then `git switch {branch}` works too):\n    \
             git -C {root} worktree remove {path}\n"
        )
    }
}

/// Who commits: the repository's configured identity, else a fallback so a run never fails for
/// want of one.
fn signature(repo: &Repository) -> Result<Signature<'static>, WorktreeError> {
    match repo.signature() {
        Ok(signature) => Ok(signature),
        Err(_) => Signature::now(FALLBACK_NAME, FALLBACK_EMAIL).map_err(git("make a commit signature")),
    }
}

/// The commit message of a stage: a subject line, a blank line, then the trailers.
fn stage_message(run_id: &str, node_id: &str, visit: u32, status: &str) -> String {
    format!(
        "fabro({run_id}): {node_id} ({status})\n\nFabro-Run: {run_id}\nFabro-Node: {node_id}\nFabro-Visit: {visit}\n"
    )
}

/// `fabro/run/<run_id>`, when that is a valid branch name.
fn run_branch_name(run_id: &str) -> Result<String, WorktreeError> {
    let branch_name = format!("{BRANCH_PREFIX}{run_id}");
    if run_id.is_empty() || !git2::Branch::name_is_valid(&branch_name).unwrap_or(false) {
        return Err(WorktreeError::InvalidRunId { run_id: run_id.to_string() });
    }
    Ok(branch_name)
}

/// Creates branch `branch_name` at `commit` and a worktree for it at `worktree_path` (its
/// administrative directory named after `name`). On failure, what was created (branch, worktree
/// administrative directory, worktree directory) is removed again.
pub(crate) fn add_worktree(
    repo: &Repository,
    repo_root: PathBuf,
    commit: Oid,
    branch_name: &str,
    name: &str,
    worktree_path: &Path,
) -> Result<RunWorktree, WorktreeError> {
    let branch_name = branch_name.to_string();
    match repo.find_branch(&branch_name, BranchType::Local) {
        Ok(_) => return Err(WorktreeError::BranchExists { branch: branch_name, repo: repo_root }),
        Err(e) if e.code() == ErrorCode::NotFound => {}
        Err(e) => return Err(git("look up the run branch")(e)),
    }
    if std::fs::symlink_metadata(worktree_path).is_ok() {
        return Err(WorktreeError::PathExists { path: worktree_path.to_path_buf() });
    }
    // libgit2 creates the worktree directory itself, but not its parents.
    if let Some(parent) = worktree_path.parent().filter(|p| !p.as_os_str().is_empty()) {
        std::fs::create_dir_all(parent)
            .map_err(|source| WorktreeError::Io { path: parent.to_path_buf(), source })?;
    }
    let name = worktree_name(repo, name);
    let admin_dir = repo.commondir().join("worktrees").join(&name);

    let target = repo.find_commit(commit).map_err(git("read the commit to start from"))?;
    let mut branch = repo.branch(&branch_name, &target, false).map_err(|e| match e.code() {
        ErrorCode::Exists => {
            WorktreeError::BranchExists { branch: branch_name.clone(), repo: repo_root.clone() }
        }
        _ => git("create the run branch")(e),
    })?;
    let mut options = WorktreeAddOptions::new();
    options.reference(Some(branch.get()));
    let added = repo.worktree(&name, worktree_path, Some(&options));
    if let Err(e) = added {
        // Undo what this call made, and nothing else: the work tree directory only when its
        // `.git` file points at this worktree's administrative directory.
        let ours = std::fs::read_to_string(worktree_path.join(".git")).is_ok_and(|text| {
            Path::new(text.trim().trim_start_matches("gitdir: ")).ends_with(admin_dir_tail(&name))
        });
        if ours {
            let _ = std::fs::remove_dir_all(worktree_path);
        } else {
            let _ = std::fs::remove_dir(worktree_path);
        }
        let _ = std::fs::remove_dir_all(&admin_dir);
        let _ = branch.delete();
        return Err(git("add the run worktree")(e));
    }
    let path = std::fs::canonicalize(worktree_path).unwrap_or_else(|_| worktree_path.to_path_buf());
    Ok(RunWorktree { repo_root, path, branch: branch_name })
}

fn admin_dir_tail(name: &str) -> PathBuf {
    Path::new("worktrees").join(name)
}

/// A name for the worktree's administrative directory (`.git/worktrees/<name>`): the run id with
/// anything but letters, digits, `-`, `_` and `.` replaced, made unique if an old worktree left
/// one behind.
fn worktree_name(repo: &Repository, run_id: &str) -> String {
    let base: String = run_id
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.') { c } else { '-' })
        .collect();
    let base = base.trim_start_matches('.').to_string();
    let base = if base.is_empty() { "fabro-run".to_string() } else { base };
    let worktrees = repo.commondir().join("worktrees");
    let mut name = base.clone();
    let mut n = 1;
    while std::fs::symlink_metadata(worktrees.join(&name)).is_ok() {
        n += 1;
        name = format!("{base}-{n}");
    }
    name
}

/// Opens the repository of a linked worktree at exactly `path` (not a parent of it).
fn open_run_repo(path: &Path) -> Result<Repository, WorktreeError> {
    let not_run = |reason: &str| WorktreeError::NotARunWorktree {
        path: path.to_path_buf(),
        reason: reason.to_string(),
    };
    let repo = Repository::open(path).map_err(|e| not_run(e.message()))?;
    if !repo.is_worktree() {
        return Err(not_run("it is not a linked git worktree"));
    }
    Ok(repo)
}

/// The run branch the worktree's HEAD is on.
fn run_branch(repo: &Repository, path: &Path) -> Result<String, WorktreeError> {
    let not_run = |reason: String| WorktreeError::NotARunWorktree { path: path.to_path_buf(), reason };
    let head = repo.find_reference("HEAD").map_err(|e| not_run(e.message().to_string()))?;
    let target = head
        .symbolic_target()
        .map_err(|e| not_run(e.message().to_string()))?
        .ok_or_else(|| not_run("HEAD is detached".to_string()))?;
    match target.strip_prefix("refs/heads/") {
        Some(branch) if branch.starts_with(BRANCH_PREFIX) => Ok(branch.to_string()),
        _ => Err(not_run(format!("HEAD is on `{target}`, not on a `{BRANCH_PREFIX}*` branch"))),
    }
}

fn find_commit<'r>(
    repo: &'r Repository,
    commit: &str,
    path: &Path,
) -> Result<git2::Commit<'r>, WorktreeError> {
    repo.revparse_single(commit).and_then(|object| object.peel_to_commit()).map_err(|e| {
        WorktreeError::CommitNotFound {
            commit: commit.to_string(),
            path: path.to_path_buf(),
            message: e.message().to_string(),
        }
    })
}

/// Where the user works: the repository's work tree, or its git directory when bare.
pub(crate) fn repo_root(repo: &Repository) -> PathBuf {
    repo.workdir().unwrap_or_else(|| repo.path()).to_path_buf()
}

/// The main worktree of the repository a linked worktree belongs to.
fn main_repo_root(repo: &Repository) -> PathBuf {
    match Repository::open(repo.commondir()) {
        Ok(main) => repo_root(&main),
        Err(_) => repo.commondir().to_path_buf(),
    }
}

/// Quotes `text` for a POSIX shell when it holds anything but plainly safe characters.
fn shell_quote(text: &str) -> String {
    let safe = !text.is_empty()
        && text
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '/' | '.' | '_' | '-' | ':' | '@' | '+' | ','));
    if safe {
        text.to_string()
    } else {
        format!("'{}'", text.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::fs;

    /// A repository with an identity in its own config and one commit holding `a.txt`, `b.txt`,
    /// `dir/c.txt` and a `.gitignore` for `*.log` and `target/`.
    fn repo_with_commit(root: &Path) -> Repository {
        let repo = Repository::init(root).unwrap();
        {
            let mut config = repo.config().unwrap();
            config.set_str("user.name", "Test User").unwrap();
            config.set_str("user.email", "test@example.com").unwrap();
        }
        fs::write(root.join("a.txt"), "a\n").unwrap();
        fs::write(root.join("b.txt"), "b\n").unwrap();
        fs::create_dir_all(root.join("dir")).unwrap();
        fs::write(root.join("dir/c.txt"), "c\n").unwrap();
        fs::write(root.join(".gitignore"), "*.log\ntarget/\n").unwrap();
        {
            let mut index = repo.index().unwrap();
            index.add_all(["*"], IndexAddOption::DEFAULT, None).unwrap();
            index.write().unwrap();
            let tree = repo.find_tree(index.write_tree().unwrap()).unwrap();
            let signature = repo.signature().unwrap();
            repo.commit(Some("HEAD"), &signature, &signature, "initial\n", &tree, &[]).unwrap();
        }
        repo
    }

    type Snapshot = (Option<String>, String, Vec<(String, git2::Status)>, Vec<(String, String)>);

    /// What the user's checkout looks like: HEAD's target, HEAD's sha, status entries and files.
    fn snapshot(repo: &Repository) -> Snapshot {
        let head = repo.find_reference("HEAD").unwrap();
        let symbolic = head.symbolic_target().unwrap().map(str::to_string);
        let sha = repo.head().unwrap().peel_to_commit().unwrap().id().to_string();
        let mut options = git2::StatusOptions::new();
        options.include_untracked(true).include_ignored(true).recurse_untracked_dirs(true);
        let status = repo
            .statuses(Some(&mut options))
            .unwrap()
            .iter()
            .map(|e| (e.path().unwrap_or_default().to_string(), e.status()))
            .collect();
        let files = files_of(repo.workdir().unwrap());
        (symbolic, sha, status, files)
    }

    /// Paths with changes or untracked, not counting ignored files.
    fn changes(repo: &Repository) -> Vec<String> {
        let mut options = git2::StatusOptions::new();
        options.include_untracked(true).include_ignored(false).recurse_untracked_dirs(true);
        let statuses = repo.statuses(Some(&mut options)).unwrap();
        statuses.iter().map(|e| format!("{:?} {}", e.status(), e.path().unwrap_or_default())).collect()
    }

    /// Every file under `root` (outside `.git`) with its content, sorted.
    fn files_of(root: &Path) -> Vec<(String, String)> {
        fn walk(root: &Path, dir: &Path, out: &mut Vec<(String, String)>) {
            for entry in fs::read_dir(dir).unwrap() {
                let entry = entry.unwrap();
                let path = entry.path();
                if entry.file_name() == ".git" {
                    continue;
                }
                if path.is_dir() {
                    walk(root, &path, out);
                } else {
                    let relative = path.strip_prefix(root).unwrap().display().to_string();
                    out.push((relative, fs::read_to_string(&path).unwrap_or_default()));
                }
            }
        }
        let mut out = Vec::new();
        walk(root, root, &mut out);
        out.sort();
        out
    }

    /// The paths and contents of the blobs in a commit's tree, sorted.
    fn tree_files(repo: &Repository, sha: &str) -> Vec<(String, String)> {
        let commit = repo.find_commit(Oid::from_str(sha).unwrap()).unwrap();
        let tree = commit.tree().unwrap();
        let mut out = Vec::new();
        tree.walk(git2::TreeWalkMode::PreOrder, |dir, entry| {
            if entry.kind() == Some(git2::ObjectType::Blob) {
                let blob = repo.find_blob(entry.id()).unwrap();
                let name = format!("{dir}{}", entry.name().unwrap());
                out.push((name, String::from_utf8_lossy(blob.content()).into_owned()));
            }
            git2::TreeWalkResult::Ok
        })
        .unwrap();
        out.sort();
        out
    }

    fn pairs(items: &[(&str, &str)]) -> Vec<(String, String)> {
        let mut out: Vec<_> = items.iter().map(|(a, b)| (a.to_string(), b.to_string())).collect();
        out.sort();
        out
    }

    struct Fixture {
        _temp: tempfile::TempDir,
        user: PathBuf,
        runs: PathBuf,
        repo: Repository,
    }

    fn fixture() -> Fixture {
        let temp = tempfile::tempdir().unwrap();
        let user = temp.path().join("user");
        let runs = temp.path().join("runs");
        let repo = repo_with_commit(&user);
        Fixture { _temp: temp, user, runs, repo }
    }

    #[test]
    fn create_makes_a_branch_and_worktree_from_head_without_touching_the_checkout() {
        let f = fixture();
        // The user has uncommitted work: it must neither move nor leak into the run.
        fs::write(f.user.join("a.txt"), "user edit\n").unwrap();
        fs::write(f.user.join("new.txt"), "user new\n").unwrap();
        let before = snapshot(&f.repo);

        let wt = RunWorktree::create(&f.user.join("dir"), "run1", &f.runs.join("r1/worktree")).unwrap();
        assert_eq!(wt.branch(), "fabro/run/run1");
        assert!(wt.path().is_absolute());
        assert_eq!(wt.path(), fs::canonicalize(f.runs.join("r1/worktree")).unwrap());
        assert_eq!(
            files_of(wt.path()),
            pairs(&[
                ("a.txt", "a\n"),
                ("b.txt", "b\n"),
                ("dir/c.txt", "c\n"),
                (".gitignore", "*.log\ntarget/\n")
            ])
        );
        let run_repo = Repository::open(wt.path()).unwrap();
        assert!(run_repo.is_worktree());
        assert_eq!(run_repo.head().unwrap().name().ok(), Some("refs/heads/fabro/run/run1"));
        let branch = f.repo.find_branch("fabro/run/run1", BranchType::Local).unwrap();
        assert_eq!(branch.get().target(), f.repo.head().unwrap().target());
        assert_eq!(snapshot(&f.repo), before);
    }

    #[test]
    fn commit_stage_commits_every_change_with_trailers_and_leaves_the_checkout_alone() {
        let f = fixture();
        let before = snapshot(&f.repo);
        let wt = RunWorktree::create(&f.user, "run2", &f.runs.join("worktree")).unwrap();
        let p = wt.path();
        fs::write(p.join("a.txt"), "changed\n").unwrap();
        fs::remove_file(p.join("b.txt")).unwrap();
        fs::create_dir_all(p.join("new/deep")).unwrap();
        fs::write(p.join("new/deep/n.txt"), "new\n").unwrap();
        fs::write(p.join("build.log"), "ignored\n").unwrap();
        fs::create_dir_all(p.join("target")).unwrap();
        fs::write(p.join("target/out"), "ignored\n").unwrap();

        let sha = wt.commit_stage("run2", "implement", 2, "success").unwrap();

        let commit = f.repo.find_commit(Oid::from_str(&sha).unwrap()).unwrap();
        assert_eq!(
            commit.message().unwrap(),
            "fabro(run2): implement (success)\n\nFabro-Run: run2\nFabro-Node: implement\nFabro-Visit: 2\n"
        );
        assert_eq!(commit.author().name().ok(), Some("Test User"));
        assert_eq!(commit.committer().email().ok(), Some("test@example.com"));
        assert_eq!(commit.parent_id(0).unwrap(), f.repo.head().unwrap().target().unwrap());
        assert_eq!(
            tree_files(&f.repo, &sha),
            pairs(&[
                ("a.txt", "changed\n"),
                ("dir/c.txt", "c\n"),
                ("new/deep/n.txt", "new\n"),
                (".gitignore", "*.log\ntarget/\n"),
            ])
        );
        let branch = f.repo.find_branch("fabro/run/run2", BranchType::Local).unwrap();
        assert_eq!(branch.get().target().unwrap().to_string(), sha);
        // The worktree is clean afterwards, apart from ignored files, which are still there.
        let run_repo = Repository::open(p).unwrap();
        assert_eq!(changes(&run_repo), Vec::<String>::new());
        assert!(p.join("build.log").exists() && p.join("target/out").exists());
        assert_eq!(snapshot(&f.repo), before);
    }

    #[test]
    fn commit_stage_commits_even_when_nothing_changed() {
        let f = fixture();
        let wt = RunWorktree::create(&f.user, "run3", &f.runs.join("worktree")).unwrap();
        let first = wt.commit_stage("run3", "start", 1, "success").unwrap();
        let second = wt.commit_stage("run3", "check", 1, "fail").unwrap();
        assert_ne!(first, second);
        let first_commit = f.repo.find_commit(Oid::from_str(&first).unwrap()).unwrap();
        let second_commit = f.repo.find_commit(Oid::from_str(&second).unwrap()).unwrap();
        assert_eq!(second_commit.parent_id(0).unwrap(), first_commit.id());
        assert_eq!(second_commit.tree_id(), first_commit.tree_id());
        assert_eq!(first_commit.tree_id(), f.repo.head().unwrap().peel_to_commit().unwrap().tree_id());
        assert!(second_commit.message().unwrap().starts_with("fabro(run3): check (fail)\n\n"));
    }

    #[test]
    fn open_resets_a_dirty_worktree_to_an_earlier_stage() {
        let f = fixture();
        let wt = RunWorktree::create(&f.user, "run4", &f.runs.join("worktree")).unwrap();
        let p = wt.path().to_path_buf();
        fs::write(p.join("a.txt"), "stage one\n").unwrap();
        let one = wt.commit_stage("run4", "one", 1, "success").unwrap();
        fs::write(p.join("a.txt"), "stage two\n").unwrap();
        fs::write(p.join("two.txt"), "two\n").unwrap();
        let _two = wt.commit_stage("run4", "two", 1, "success").unwrap();
        // A crashed stage left edits, an untracked directory and an ignored file behind.
        fs::write(p.join("a.txt"), "half done\n").unwrap();
        fs::remove_file(p.join("dir/c.txt")).unwrap();
        fs::create_dir_all(p.join("junk")).unwrap();
        fs::write(p.join("junk/j.txt"), "junk\n").unwrap();
        fs::write(p.join("cache.log"), "kept\n").unwrap();
        let before = snapshot(&f.repo);

        let reopened = RunWorktree::open(&p, Some(&one)).unwrap();
        assert_eq!(reopened.branch(), "fabro/run/run4");
        assert_eq!(reopened.path(), wt.path());
        assert_eq!(reopened.repo_root(), wt.repo_root());
        let run_repo = Repository::open(&p).unwrap();
        assert_eq!(run_repo.head().unwrap().target().unwrap().to_string(), one);
        assert_eq!(
            files_of(&p),
            pairs(&[
                ("a.txt", "stage one\n"),
                ("b.txt", "b\n"),
                ("dir/c.txt", "c\n"),
                (".gitignore", "*.log\ntarget/\n"),
                ("cache.log", "kept\n"),
            ])
        );
        assert_eq!(changes(&run_repo), Vec::<String>::new());
        // The next stage continues from the checkpoint's commit.
        let three = reopened.commit_stage("run4", "three", 1, "success").unwrap();
        let three = f.repo.find_commit(Oid::from_str(&three).unwrap()).unwrap();
        assert_eq!(three.parent_id(0).unwrap().to_string(), one);
        assert_eq!(snapshot(&f.repo), before);

        // Without a commit, open changes nothing.
        fs::write(p.join("a.txt"), "dirty\n").unwrap();
        RunWorktree::open(&p, None).unwrap();
        assert_eq!(fs::read_to_string(p.join("a.txt")).unwrap(), "dirty\n");
    }

    #[test]
    fn open_refuses_what_is_not_a_run_worktree_and_unknown_commits() {
        let f = fixture();
        assert!(matches!(RunWorktree::open(&f.user, None), Err(WorktreeError::NotARunWorktree { .. })));
        assert!(matches!(
            RunWorktree::open(&f.runs.join("missing"), None),
            Err(WorktreeError::NotARunWorktree { .. })
        ));
        let wt = RunWorktree::create(&f.user, "run5", &f.runs.join("worktree")).unwrap();
        assert!(matches!(
            RunWorktree::open(wt.path(), Some("0123456789abcdef0123456789abcdef01234567")),
            Err(WorktreeError::CommitNotFound { .. })
        ));
    }

    #[test]
    fn fork_makes_a_second_branch_and_worktree_at_an_earlier_commit() {
        let f = fixture();
        let wt = RunWorktree::create(&f.user, "run6", &f.runs.join("run6/worktree")).unwrap();
        fs::write(wt.path().join("a.txt"), "first\n").unwrap();
        let first = wt.commit_stage("run6", "one", 1, "success").unwrap();
        fs::write(wt.path().join("a.txt"), "second\n").unwrap();
        let second = wt.commit_stage("run6", "two", 1, "success").unwrap();
        let before = snapshot(&f.repo);

        let forked = RunWorktree::fork(wt.path(), &first, "run7", &f.runs.join("run7/worktree")).unwrap();
        assert_eq!(forked.branch(), "fabro/run/run7");
        assert_ne!(forked.path(), wt.path());
        assert_eq!(fs::read_to_string(forked.path().join("a.txt")).unwrap(), "first\n");
        let branch = f.repo.find_branch("fabro/run/run7", BranchType::Local).unwrap();
        assert_eq!(branch.get().target().unwrap().to_string(), first);
        // The original run is only read.
        assert_eq!(fs::read_to_string(wt.path().join("a.txt")).unwrap(), "second\n");
        let original = f.repo.find_branch("fabro/run/run6", BranchType::Local).unwrap();
        assert_eq!(original.get().target().unwrap().to_string(), second);
        // Both run on independently.
        fs::write(forked.path().join("f.txt"), "fork\n").unwrap();
        let sha = forked.commit_stage("run7", "two", 2, "success").unwrap();
        let commit = f.repo.find_commit(Oid::from_str(&sha).unwrap()).unwrap();
        assert_eq!(commit.parent_id(0).unwrap().to_string(), first);
        assert_eq!(f.repo.worktrees().unwrap().len(), 2);
        assert_eq!(snapshot(&f.repo), before);
        assert_eq!(forked.repo_root(), wt.repo_root());
    }

    #[test]
    fn refuses_outside_a_repository() {
        let temp = tempfile::tempdir().unwrap();
        let plain = temp.path().join("plain");
        fs::create_dir_all(&plain).unwrap();
        // A directory under /tmp could still sit inside a repository if /tmp were one; ceiling
        // directories are not available through discover, so check with git2 first.
        if Repository::discover(&plain).is_ok() {
            return;
        }
        let error = RunWorktree::create(&plain, "r", &temp.path().join("wt")).unwrap_err();
        assert!(matches!(error, WorktreeError::NotARepository { .. }));
        assert_eq!(
            error.to_string(),
            format!("--worktree needs a git repository; {} is not inside one", plain.display())
        );
        assert!(!temp.path().join("wt").exists());
    }

    #[test]
    fn refuses_a_repository_without_commits() {
        let temp = tempfile::tempdir().unwrap();
        Repository::init(temp.path().join("empty")).unwrap();
        let error =
            RunWorktree::create(&temp.path().join("empty"), "r", &temp.path().join("wt")).unwrap_err();
        assert!(matches!(error, WorktreeError::NoHead { .. }), "{error}");
        assert!(!temp.path().join("wt").exists());
    }

    #[test]
    fn refuses_an_existing_branch_an_existing_path_and_a_bad_run_id() {
        let f = fixture();
        let head = f.repo.head().unwrap().peel_to_commit().unwrap();
        f.repo.branch("fabro/run/taken", &head, false).unwrap();
        let error = RunWorktree::create(&f.user, "taken", &f.runs.join("wt")).unwrap_err();
        assert!(matches!(&error, WorktreeError::BranchExists { branch, .. } if branch == "fabro/run/taken"));
        assert!(!f.runs.join("wt").exists());

        fs::create_dir_all(f.runs.join("exists")).unwrap();
        let error = RunWorktree::create(&f.user, "fresh", &f.runs.join("exists")).unwrap_err();
        assert!(matches!(error, WorktreeError::PathExists { .. }));
        // Nothing was left behind by the refusal.
        assert!(f.repo.find_branch("fabro/run/fresh", BranchType::Local).is_err());

        for bad in ["", "a..b", "with space", "x~1", "end.lock"] {
            let error = RunWorktree::create(&f.user, bad, &f.runs.join("bad")).unwrap_err();
            assert!(matches!(error, WorktreeError::InvalidRunId { .. }), "{bad:?}: {error}");
        }
        assert!(f.repo.worktrees().unwrap().is_empty());
    }

    #[test]
    fn a_failed_worktree_add_removes_the_branch_again() {
        let f = fixture();
        // libgit2 fails after the branch was created when `.git/worktrees` is not a directory.
        fs::write(f.repo.path().join("worktrees"), "not a directory").unwrap();
        let error = RunWorktree::create(&f.user, "two", &f.runs.join("two")).unwrap_err();
        assert!(matches!(error, WorktreeError::Git { action: "add the run worktree", .. }), "{error}");
        assert!(f.repo.find_branch("fabro/run/two", BranchType::Local).is_err());
        assert!(!f.runs.join("two").exists());
        assert!(f.repo.path().join("worktrees").is_file());

        // A parent that cannot be created is refused before anything is made.
        fs::remove_file(f.repo.path().join("worktrees")).unwrap();
        fs::write(f.runs.join("file"), "not a directory").unwrap();
        let error = RunWorktree::create(&f.user, "three", &f.runs.join("file/wt")).unwrap_err();
        assert!(matches!(error, WorktreeError::Io { .. }), "{error}");
        assert!(f.repo.find_branch("fabro/run/three", BranchType::Local).is_err());
    }

    #[test]
    fn worktree_names_are_simple_and_unique() {
        let f = fixture();
        let wt = RunWorktree::create(&f.user, "2024-01-01/run.x", &f.runs.join("a")).unwrap();
        assert_eq!(wt.branch(), "fabro/run/2024-01-01/run.x");
        let names = f.repo.worktrees().unwrap();
        assert_eq!(
            names.iter().map(|n| n.ok().flatten()).collect::<Vec<_>>(),
            vec![Some("2024-01-01-run.x")]
        );
        assert_eq!(worktree_name(&f.repo, "2024-01-01/run.x"), "2024-01-01-run.x-2");
    }

    #[test]
    fn merge_hint_names_the_branch_and_the_commands() {
        let f = fixture();
        let wt = RunWorktree::create(&f.user, "run8", &f.runs.join("with space/worktree")).unwrap();
        let hint = wt.merge_hint();
        assert!(hint.contains("merge fabro/run/run8"), "{hint}");
        assert!(hint.contains("git switch fabro/run/run8"), "{hint}");
        let quoted = shell_quote(&wt.path().display().to_string());
        assert!(quoted.starts_with('\''));
        assert!(hint.contains(&format!("worktree remove {quoted}")), "{hint}");
        assert_eq!(shell_quote("it's"), "'it'\\''s'");
    }

    #[test]
    fn the_git_command_line_sees_the_branch_and_the_trailers() {
        let git_cli = |args: &[&str], dir: &Path| {
            std::process::Command::new("git")
                .args(args)
                .current_dir(dir)
                .env("GIT_CONFIG_NOSYSTEM", "1")
                .env("GIT_CONFIG_GLOBAL", "/dev/null")
                .output()
        };
        let Ok(version) = git_cli(&["--version"], Path::new(".")) else {
            eprintln!("git is not installed; skipping");
            return;
        };
        if !version.status.success() {
            return;
        }
        let f = fixture();
        let wt = RunWorktree::create(&f.user, "run9", &f.runs.join("worktree")).unwrap();
        fs::write(wt.path().join("z.txt"), "z\n").unwrap();
        let sha = wt.commit_stage("run9", "build", 3, "partial_success").unwrap();

        let branches =
            git_cli(&["branch", "--list", "fabro/run/run9", "--format=%(refname:short)"], &f.user).unwrap();
        assert_eq!(String::from_utf8_lossy(&branches.stdout).trim(), "fabro/run/run9");
        let log = git_cli(&["log", "--format=%H%n%B", "-1", "fabro/run/run9"], &f.user).unwrap();
        assert!(log.status.success(), "{}", String::from_utf8_lossy(&log.stderr));
        assert_eq!(
            String::from_utf8_lossy(&log.stdout),
            format!("{sha}\nfabro(run9): build (partial_success)\n\nFabro-Run: run9\nFabro-Node: build\nFabro-Visit: 3\n\n")
        );
        let trailers =
            git_cli(&["log", "--format=%(trailers:only,unfold)", "-1", "fabro/run/run9"], &f.user).unwrap();
        assert_eq!(
            String::from_utf8_lossy(&trailers.stdout).trim(),
            "Fabro-Run: run9\nFabro-Node: build\nFabro-Visit: 3"
        );
        let list = git_cli(&["worktree", "list", "--porcelain"], &f.user).unwrap();
        let list = String::from_utf8_lossy(&list.stdout);
        assert!(list.contains(&format!("worktree {}", wt.path().display())), "{list}");
        assert!(list.contains("branch refs/heads/fabro/run/run9"), "{list}");
        let status = git_cli(&["status", "--porcelain"], wt.path()).unwrap();
        assert!(status.status.success());
        assert_eq!(String::from_utf8_lossy(&status.stdout), "");
        // The hint's removal command works on the clean worktree.
        let remove = git_cli(&["worktree", "remove", &wt.path().display().to_string()], &f.user).unwrap();
        assert!(remove.status.success(), "{}", String::from_utf8_lossy(&remove.stderr));
    }
}
