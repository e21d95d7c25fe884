//! A project's `.fabro` directory, beside its work: the default home of run directories, of
//! artifact copies for agents and of project memory.

use std::path::Path;

use crate::atomic_file::{write_atomic_with, Durability};

/// Gives a `.fabro` directory that fabro made its own `.gitignore` (`*`), so run directories and
/// artifact copies never show in `git status`. An existing `.gitignore` is left as it is; a
/// failure only costs that convenience.
pub fn keep_out_of_git(fabro_dir: &Path) {
    let ignore = fabro_dir.join(".gitignore");
    if std::fs::symlink_metadata(&ignore).is_ok() || std::fs::create_dir_all(fabro_dir).is_err() {
        return;
    }
    let text = b"# Made by fabro: run directories and artifact copies stay out of git.\n*\n";
    if let Err(error) = write_atomic_with(&ignore, text, Durability::Unsynced) {
        tracing::debug!(%error, path = %ignore.display(), "no .gitignore for the .fabro directory");
    }
}
