//! Git worktrees for parallel branches. When the work directory is inside a git repository, each
//! branch of a parallel stage works in its own worktree under the run directory, on its own branch
//! `fabro/<run_id>/<branch_id>`, created from a *base* commit: HEAD plus the work directory's
//! uncommitted changes (committed on no branch, so the user's checkout and index stay as they were).
//! A branch's changes are committed when it ends; after fan-in, the best branch's commit is merged
//! into the work directory: fast-forward when the work directory has not changed since the fork,
//! otherwise a merge commit, and a conflict leaves the work directory untouched.
//!
//! Files under `.fabro/` (run directories, artifact copies) and ignored files never enter a commit.

use std::path::{Path, PathBuf};

use git2::build::CheckoutBuilder;
use git2::{ErrorCode, IndexAddOption, Oid, Repository, WorktreePruneOptions};

use super::{git, signature, WorktreeError};

/// Context key holding the base commit of the parallel stage whose branches just ended.
pub const BASE_SHA_KEY: &str = "internal.parallel.base_sha";

/// The directory fabro keeps its own files in, inside a work directory; never committed.
const FABRO_DIR: &str = ".fabro";

/// Where a parallel stage's branches start from, in the repository of its work directory.
#[derive(Debug, Clone)]
pub struct BranchBase {
    /// The work directory's repository work tree (a linked worktree when the stage itself runs in
    /// a branch).
    pub repo_dir: PathBuf,
    /// HEAD plus uncommitted changes, as a commit.
    pub commit: String,
}

/// Why branches cannot have their own worktrees (they then share the work directory).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NoGit {
    NotARepository,
    NoCommits,
    Bare,
}

impl NoGit {
    pub fn reason(&self) -> &'static str {
        match self {
            NoGit::NotARepository => "the work directory is not inside a git repository",
            NoGit::NoCommits => "the work directory's git repository has no commits yet",
            NoGit::Bare => "the repository is bare",
        }
    }
}

/// Finds the work directory's repository and commits its current state as the branches' base.
pub fn prepare(work_dir: &Path, label: &str) -> Result<Result<BranchBase, NoGit>, WorktreeError> {
    let repo = match Repository::discover(work_dir) {
        Ok(repo) => repo,
        Err(_) => return Ok(Err(NoGit::NotARepository)),
    };
    let Some(repo_dir) = repo.workdir().map(Path::to_path_buf) else { return Ok(Err(NoGit::Bare)) };
    let head = match repo.head().and_then(|head| head.peel_to_commit()) {
        Ok(head) => head,
        Err(e) if matches!(e.code(), ErrorCode::UnbornBranch | ErrorCode::NotFound) => {
            return Ok(Err(NoGit::NoCommits))
        }
        Err(e) => return Err(git("read HEAD")(e)),
    };
    let tree = work_tree_state(&repo)?;
    let commit = if tree == head.tree_id() {
        head.id()
    } else {
        commit_on_no_branch(&repo, tree, &[&head], &format!("fabro: uncommitted changes before {label}"))?
    };
    Ok(Ok(BranchBase { repo_dir, commit: commit.to_string() }))
}

/// A branch's worktree, checked out on its own branch at the base commit.
#[derive(Debug, Clone)]
pub struct BranchWorktree {
    pub path: PathBuf,
    pub branch: String,
}

impl BranchBase {
    /// Creates branch `fabro/<run_id>/<branch_id>` (with a numeric suffix if that exists, e.g.
    /// when the parallel stage runs again) and its worktree at `path`.
    pub fn add_worktree(
        &self,
        run_id: &str,
        branch_id: &str,
        path: &Path,
    ) -> Result<BranchWorktree, WorktreeError> {
        let repo = Repository::open(&self.repo_dir).map_err(git("open the work directory's repository"))?;
        let base = Oid::from_str(&self.commit).map_err(git("read the base commit"))?;
        let mut branch = format!("fabro/{run_id}/{branch_id}");
        let mut n = 1;
        while repo.find_branch(&branch, git2::BranchType::Local).is_ok() {
            n += 1;
            branch = format!("fabro/{run_id}/{branch_id}-{n}");
        }
        if !git2::Branch::name_is_valid(&branch).unwrap_or(false) {
            return Err(WorktreeError::InvalidRunId { run_id: format!("{run_id}/{branch_id}") });
        }
        let path = std::path::absolute(path)
            .map_err(|source| WorktreeError::Io { path: path.to_path_buf(), source })?;
        let root = super::repo_root(&repo);
        let name = format!("{run_id}-{branch_id}");
        let added = super::add_worktree(&repo, root, base, &branch, &name, &path)?;
        Ok(BranchWorktree { path: added.path().to_path_buf(), branch })
    }
}

impl BranchWorktree {
    /// Commits everything the branch changed; returns the branch's head (the base itself when
    /// nothing changed).
    pub fn commit(&self, message: &str) -> Result<String, WorktreeError> {
        let repo = Repository::open(&self.path).map_err(git("open the branch worktree"))?;
        let head = repo.head().and_then(|head| head.peel_to_commit()).map_err(git("read the branch head"))?;
        let tree = work_tree_state(&repo)?;
        if tree == head.tree_id() {
            return Ok(head.id().to_string());
        }
        let tree = repo.find_tree(tree).map_err(git("read the branch's tree"))?;
        let signature = signature(&repo)?;
        let oid = repo
            .commit(Some("HEAD"), &signature, &signature, message, &tree, &[&head])
            .map_err(git("commit the branch"))?;
        Ok(oid.to_string())
    }

    /// Removes the worktree's files and its administrative entry; the branch stays.
    pub fn remove(&self) -> Result<(), WorktreeError> {
        let repo = Repository::open(&self.path).map_err(git("open the branch worktree"))?;
        let name =
            repo.path().file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
        let common = Repository::open(repo.commondir()).map_err(git("open the main repository"))?;
        std::fs::remove_dir_all(&self.path)
            .map_err(|source| WorktreeError::Io { path: self.path.clone(), source })?;
        if let Ok(worktree) = common.find_worktree(&name) {
            let mut options = WorktreePruneOptions::new();
            options.valid(true).working_tree(true);
            worktree.prune(Some(&mut options)).map_err(git("prune the branch worktree"))?;
        }
        Ok(())
    }
}

/// How the best branch reached the work directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Merged {
    /// The work directory's new HEAD.
    pub commit: String,
    pub fast_forward: bool,
}

#[derive(Debug, thiserror::Error)]
pub enum MergeError {
    #[error("merge conflicts in {}", paths.join(", "))]
    Conflict { paths: Vec<String> },
    #[error(transparent)]
    Git(#[from] WorktreeError),
}

/// Merges `head` (a branch's commit made from `base`) into the work directory at `work_dir`.
pub fn merge_into_work_dir(
    work_dir: &Path,
    base: &str,
    head: &str,
    branch_id: &str,
) -> Result<Merged, MergeError> {
    let repo = Repository::discover(work_dir).map_err(git("open the work directory's repository"))?;
    let find = |sha: &str| {
        Oid::from_str(sha).and_then(|oid| repo.find_commit(oid)).map_err(git("find a branch commit"))
    };
    let (base, best) = (find(base)?, find(head)?);
    let current = repo.head().and_then(|h| h.peel_to_commit()).map_err(git("read HEAD"))?;
    let state = work_tree_state(&repo)?;
    if state == base.tree_id() {
        checkout(&repo, best.tree_id())?;
        move_head(&repo, best.id(), &format!("fabro: fast-forward to branch {branch_id}"))?;
        return Ok(Merged { commit: best.id().to_string(), fast_forward: true });
    }
    let ours = if state == current.tree_id() {
        current.id()
    } else {
        commit_on_no_branch(
            &repo,
            state,
            &[&current],
            "fabro: work directory changes before merging a branch",
        )?
    };
    let ours = repo.find_commit(ours).map_err(git("read the work directory's commit"))?;
    let (base_tree, ours_tree, best_tree) = (
        base.tree().map_err(git("read the base tree"))?,
        ours.tree().map_err(git("read the work directory's tree"))?,
        best.tree().map_err(git("read the branch's tree"))?,
    );
    let mut index =
        repo.merge_trees(&base_tree, &ours_tree, &best_tree, None).map_err(git("merge the branch"))?;
    if index.has_conflicts() {
        let mut paths: Vec<String> = index
            .conflicts()
            .map_err(git("list merge conflicts"))?
            .flatten()
            .filter_map(|c| c.our.or(c.their).or(c.ancestor))
            .map(|entry| String::from_utf8_lossy(&entry.path).into_owned())
            .collect();
        paths.sort();
        paths.dedup();
        return Err(MergeError::Conflict { paths });
    }
    let tree = index.write_tree_to(&repo).map_err(git("write the merged tree"))?;
    let message = format!("fabro: merge branch {branch_id}");
    let merge = commit_on_no_branch(&repo, tree, &[&ours, &best], &message)?;
    checkout(&repo, tree)?;
    move_head(&repo, merge, &message)?;
    Ok(Merged { commit: merge.to_string(), fast_forward: false })
}

/// The tree of the work directory as it is now (tracked and untracked files, not ignored ones
/// and not `.fabro/`), written to the object database; the index file is not changed.
fn work_tree_state(repo: &Repository) -> Result<Oid, WorktreeError> {
    let mut index = repo.index().map_err(git("read the index"))?;
    let mut skip_fabro = |path: &Path, _: &[u8]| -> i32 { i32::from(path.starts_with(FABRO_DIR)) };
    index
        .add_all(["*"], IndexAddOption::DEFAULT, Some(&mut skip_fabro))
        .map_err(git("collect the work directory's files"))?;
    index.update_all(["*"], Some(&mut skip_fabro)).map_err(git("collect deleted files"))?;
    index.write_tree().map_err(git("write the work directory's tree"))
}

fn commit_on_no_branch(
    repo: &Repository,
    tree: Oid,
    parents: &[&git2::Commit<'_>],
    message: &str,
) -> Result<Oid, WorktreeError> {
    let tree = repo.find_tree(tree).map_err(git("read a tree"))?;
    let signature = signature(repo)?;
    repo.commit(None, &signature, &signature, message, &tree, parents).map_err(git("commit"))
}

/// Makes the work tree and index match `tree`; files the work directory has that `tree` lacks are
/// left alone unless they were tracked.
fn checkout(repo: &Repository, tree: Oid) -> Result<(), WorktreeError> {
    let tree = repo.find_tree(tree).map_err(git("read the tree to check out"))?;
    let mut options = CheckoutBuilder::new();
    options.force();
    repo.checkout_tree(tree.as_object(), Some(&mut options)).map_err(git("check out the merged files"))
}

/// Points HEAD's branch (or a detached HEAD) at `commit`.
fn move_head(repo: &Repository, commit: Oid, message: &str) -> Result<(), WorktreeError> {
    let head = repo.find_reference("HEAD").map_err(git("read HEAD"))?;
    match head.symbolic_target().ok().flatten() {
        Some(target) => {
            repo.reference(target, commit, true, message).map_err(git("move the branch"))?;
        }
        None => repo.set_head_detached(commit).map_err(git("move HEAD"))?,
    }
    Ok(())
}
