//! The project's own instructions for agents, in an agent stage's system prompt (on unless
//! `project_docs=false`): `AGENTS.md`, `CLAUDE.md`, `GEMINI.md` and `.codex/instructions.md` at
//! the root of the work directory's git repository and in each directory between it and the work
//! directory, the root's first and the nearest last (a nearer file is the more specific one).
//! They share a budget of [`BUDGET_BYTES`]: the nearest files are kept first, and what does not
//! fit is cut with a note naming the file and how much of it is missing, so the model can read
//! the rest with `read_file`. Links and files that are not regular are skipped (a stage may have
//! planted them).

use std::path::{Path, PathBuf};

/// The file names read in each directory, in this order.
pub const FILE_NAMES: [&str; 4] = ["AGENTS.md", "CLAUDE.md", "GEMINI.md", ".codex/instructions.md"];
/// What the project's instructions may take of the system prompt, in bytes (Codex's default).
pub const BUDGET_BYTES: usize = 32 * 1024;

/// One instruction file found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProjectDoc {
    /// The path shown to the model and in status.json: relative to the repository root.
    pub shown: String,
    pub text: String,
    /// The file's whole size; `text` holds less when the budget cut it.
    pub bytes: usize,
}

impl ProjectDoc {
    /// How status.json lists it: the path, and what was cut.
    pub fn record(&self) -> String {
        if self.text.len() < self.bytes {
            format!("{} ({} of {} bytes, cut)", self.shown, self.text.len(), self.bytes)
        } else {
            self.shown.clone()
        }
    }
}

/// The instruction files of the project `work_dir` is in, root first, cut to `budget` bytes
/// together (the nearest kept first).
pub fn find(work_dir: &Path, budget: usize) -> Vec<ProjectDoc> {
    let work_dir = work_dir.canonicalize().unwrap_or_else(|_| work_dir.to_path_buf());
    let work_dir = work_dir.as_path();
    let root = git2::Repository::discover(work_dir)
        .ok()
        .and_then(|repo| repo.workdir().and_then(|root| root.canonicalize().ok()))
        .unwrap_or_else(|| work_dir.to_path_buf());
    let mut dirs: Vec<PathBuf> =
        work_dir.ancestors().take_while(|dir| dir.starts_with(&root)).map(Path::to_path_buf).collect();
    if dirs.is_empty() {
        dirs.push(work_dir.to_path_buf());
    }
    // Nearest first, for the budget.
    let mut found: Vec<ProjectDoc> = Vec::new();
    let mut left = budget;
    for dir in &dirs {
        for name in FILE_NAMES.iter().rev() {
            let path = dir.join(name);
            let Ok(text) =
                crate::regular_file::read_to_string(&path, crate::regular_file::FileKind::WorkFile)
            else {
                continue;
            };
            if text.trim().is_empty() {
                continue;
            }
            let shown = path.strip_prefix(&root).unwrap_or(&path).display().to_string();
            let bytes = text.len();
            let kept = cut_at(&text, left).to_string();
            left -= kept.len();
            found.push(ProjectDoc { shown, text: kept, bytes });
        }
    }
    found.reverse();
    found
}

/// The longest prefix of `text` of at most `limit` bytes that ends on a character boundary.
fn cut_at(text: &str, limit: usize) -> &str {
    if text.len() <= limit {
        return text;
    }
    let mut end = limit;
    while !text.is_char_boundary(end) {
        end -= 1;
    }
    &text[..end]
}

/// The block of the system prompt; empty when there are no files.
pub fn block(docs: &[ProjectDoc]) -> String {
    if docs.is_empty() {
        return String::new();
    }
    let mut out = String::from(
        "## Project instructions\nThe project's own instructions for agents working in it, from the repository \
         root to the working directory (where they disagree, the nearer file wins):\n",
    );
    for doc in docs {
        out.push_str(&format!("\n### {}\n{}\n", doc.shown, doc.text.trim_end()));
        if doc.text.len() < doc.bytes {
            out.push_str(&format!(
                "[{} of its {} bytes are not shown here (the instructions' budget is {} bytes); read the rest with \
                 read_file]\n",
                doc.bytes - doc.text.len(),
                doc.bytes,
                BUDGET_BYTES
            ));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn files_come_from_the_root_to_the_work_directory_and_the_nearest_are_kept_first() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path();
        git2::Repository::init(root).unwrap();
        let work = root.join("services/api");
        std::fs::create_dir_all(work.join(".codex")).unwrap();
        std::fs::write(root.join("AGENTS.md"), "Root rules.\n".repeat(10)).unwrap();
        std::fs::write(root.join("services/CLAUDE.md"), "Services rules.\n").unwrap();
        std::fs::write(work.join("AGENTS.md"), "API rules.\n").unwrap();
        std::fs::write(work.join(".codex/instructions.md"), "Codex rules.\n").unwrap();
        std::fs::write(work.join("GEMINI.md"), "  \n").unwrap();
        std::os::unix::fs::symlink(root.join("AGENTS.md"), root.join("services/GEMINI.md")).unwrap();

        let docs = find(&work, BUDGET_BYTES);
        let shown: Vec<&str> = docs.iter().map(|doc| doc.shown.as_str()).collect();
        assert_eq!(
            shown,
            [
                "AGENTS.md",
                "services/CLAUDE.md",
                "services/api/AGENTS.md",
                "services/api/.codex/instructions.md"
            ]
        );
        let text = block(&docs);
        assert!(text.find("Root rules.").unwrap() < text.find("API rules.").unwrap());
        assert!(!text.contains("not shown"));

        // A budget of 50 bytes: the nearest files whole, the root's cut with a note.
        let docs = find(&work, 50);
        let root_doc = &docs[0];
        assert_eq!(root_doc.bytes, 120);
        assert_eq!(
            root_doc.text.len(),
            50 - "Services rules.\n".len() - "API rules.\n".len() - "Codex rules.\n".len()
        );
        assert_eq!(root_doc.record(), format!("AGENTS.md ({} of 120 bytes, cut)", root_doc.text.len()));
        assert!(block(&docs).contains("of its 120 bytes are not shown here"));
        // Outside git the work directory alone is read.
        let plain = tempfile::tempdir().unwrap();
        std::fs::write(plain.path().join("CLAUDE.md"), "Plain.\n").unwrap();
        assert_eq!(find(plain.path(), BUDGET_BYTES).len(), 1);
        assert_eq!(block(&[]), "");
    }
}
