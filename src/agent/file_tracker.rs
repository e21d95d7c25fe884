//! The files an agent stage read, created, wrote or edited: how often, and the last turn. The
//! list goes into compaction blocks, so it is kept ready as files are noted and rendered within a
//! character budget: every file is named while the list fits; past that, the first files the
//! stage changed and the latest it touched stay named, and the others are counted by directory.
//! Rendering costs the same however long the stage has run.

use std::collections::{BTreeMap, HashMap, HashSet};

use crate::agent::context::shortened;

/// What happened to a file during a stage.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum FileOp {
    Read,
    Written,
    Edited,
}

impl FileOp {
    pub fn as_str(self) -> &'static str {
        match self {
            FileOp::Read => "read",
            FileOp::Written => "written",
            FileOp::Edited => "edited",
        }
    }
}

/// Files that stay named however the list folds: the first ones the stage changed.
const PINNED: usize = 3;
/// Longest path shown; longer ones are cut, ending with `…`.
const PATH_CHARS: usize = 160;

/// One file's history in the stage.
#[derive(Debug, Clone)]
struct FileRecord {
    /// The strongest operation: edited, then written, then read.
    op: FileOp,
    /// The stage's first write made the file.
    created: bool,
    /// Writes and edits.
    changes: u32,
    last_turn: u32,
    /// When it was last touched, in notes: its key in `recency`.
    last_note: u64,
}

impl FileRecord {
    /// `read`, `created`, `written`, `edited`, `created, modified 3×, last turn 40`.
    fn describe(&self) -> String {
        match (self.changes, self.created) {
            (0, _) => "read".to_string(),
            (1, true) => "created".to_string(),
            (1, false) => self.op.as_str().to_string(),
            (n, true) => format!("created, modified {}×, last turn {}", n - 1, self.last_turn),
            (n, false) => format!("modified {n}×, last turn {}", self.last_turn),
        }
    }
}

/// The files of one directory.
#[derive(Debug, Clone, Copy, Default)]
struct DirectoryTotals {
    files: usize,
    /// Files written or edited (the others were only read).
    changed: usize,
    last_turn: u32,
}

/// The files a stage read, wrote or edited (paths relative to the work directory).
#[derive(Debug, Clone, Default)]
pub struct FileTracker {
    files: BTreeMap<String, FileRecord>,
    /// Paths by when they were last touched.
    recency: BTreeMap<u64, String>,
    directories: HashMap<String, DirectoryTotals>,
    /// The first files the stage changed, in order.
    first_changed: Vec<String>,
    /// The loop turn the next notes belong to.
    turn: u32,
    notes: u64,
}

/// The list of the files a stage touched, as rendered in a budget.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileList {
    pub text: String,
    /// Every file is named (nothing was counted by directory).
    pub every_file: bool,
}

/// The directory a path is in, with its slash (`out/`), or `./`.
fn directory(path: &str) -> &str {
    match path.rfind('/') {
        Some(at) => &path[..=at],
        None => "./",
    }
}

impl FileTracker {
    /// The notes that follow belong to loop turn `turn`.
    pub fn set_turn(&mut self, turn: u32) {
        self.turn = turn;
    }

    /// Notes an operation on `path`; `created` when a write made the file.
    pub fn note(&mut self, path: String, op: FileOp, created: bool) {
        self.notes += 1;
        let changed = op != FileOp::Read;
        let totals = self.directories.entry(directory(&path).to_string()).or_default();
        totals.last_turn = totals.last_turn.max(self.turn);
        match self.files.get_mut(&path) {
            Some(record) => {
                self.recency.remove(&record.last_note);
                if changed && record.changes == 0 {
                    totals.changed += 1;
                    record.created = created;
                }
                record.op = record.op.max(op);
                record.changes += u32::from(changed);
                record.last_turn = self.turn;
                record.last_note = self.notes;
            }
            None => {
                totals.files += 1;
                totals.changed += usize::from(changed);
                let record = FileRecord {
                    op,
                    created: created && changed,
                    changes: u32::from(changed),
                    last_turn: self.turn,
                    last_note: self.notes,
                };
                self.files.insert(path.clone(), record);
            }
        }
        if changed && self.first_changed.len() < PINNED && !self.first_changed.contains(&path) {
            self.first_changed.push(path.clone());
        }
        self.recency.insert(self.notes, path);
    }

    /// Files written or edited, sorted.
    pub fn changed(&self) -> Vec<String> {
        self.files.iter().filter(|(_, record)| record.changes > 0).map(|(path, _)| path.clone()).collect()
    }

    pub fn len(&self) -> usize {
        self.files.len()
    }

    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }

    /// `- path (what happened)`; a changed file that `exists` says is gone is marked deleted.
    fn line(&self, path: &str, record: &FileRecord, exists: &dyn Fn(&str) -> bool) -> String {
        let gone = record.changes > 0 && !exists(path);
        let deleted = if gone { ", deleted since" } else { "" };
        format!("- {} ({}{deleted})", shortened(path, PATH_CHARS, "…"), record.describe())
    }

    /// One line per file, `- path (edited)`, in at most `budget` characters: when every file does
    /// not fit, the first files the stage changed and the latest it touched are named and the
    /// others counted by directory. `exists` tells whether a file is still there.
    pub fn render(&self, budget: usize, exists: &dyn Fn(&str) -> bool) -> FileList {
        let folded = || FileList { text: self.folded(budget, exists), every_file: false };
        if self.files.is_empty() {
            return FileList { text: "(no files touched)".to_string(), every_file: true };
        }
        // Measured first without looking at the disk: only the files shown are looked up.
        let mut used = 0;
        for (path, record) in &self.files {
            used += self.line(path, record, &|_| true).len() + 1;
            if used > budget {
                return folded();
            }
        }
        let lines: Vec<String> =
            self.files.iter().map(|(path, record)| self.line(path, record, exists)).collect();
        let text = lines.join("\n");
        if text.len() > budget {
            return folded();
        }
        FileList { text, every_file: true }
    }

    /// The list when every file does not fit: the first changed and the latest files named, the
    /// rest by directory, the directories last touched first.
    fn folded(&self, budget: usize, exists: &dyn Fn(&str) -> bool) -> String {
        let mut out = format!(
            "{} files; the first the stage changed and the latest it touched are named, the others counted by directory:",
            self.files.len()
        );
        let latest = self.recency.values().rev();
        let mut named: HashSet<&str> = HashSet::new();
        let mut lines = Vec::new();
        let half = budget / 2;
        for path in self.first_changed.iter().chain(latest) {
            let Some(record) = self.files.get(path) else { continue };
            if named.contains(path.as_str()) {
                continue;
            }
            let line = self.line(path, record, exists);
            if out.len() + line.len() + 1 > half && named.len() >= PINNED {
                break;
            }
            out.push('\n');
            out.push_str(&line);
            named.insert(path);
            lines.push(line);
        }
        // What is left of each directory once the named files are taken out.
        let mut left: HashMap<&str, DirectoryTotals> = HashMap::new();
        for path in &named {
            let Some(record) = self.files.get(*path) else { continue };
            let dir = directory(path);
            let totals =
                left.entry(dir).or_insert_with(|| self.directories.get(dir).copied().unwrap_or_default());
            totals.files = totals.files.saturating_sub(1);
            totals.changed = totals.changed.saturating_sub(usize::from(record.changes > 0));
        }
        let mut rest: Vec<(&str, DirectoryTotals)> = self
            .directories
            .iter()
            .map(|(dir, totals)| (dir.as_str(), left.get(dir.as_str()).copied().unwrap_or(*totals)))
            .filter(|(_, totals)| totals.files > 0)
            .collect();
        rest.sort_by(|(a, x), (b, y)| y.last_turn.cmp(&x.last_turn).then(a.cmp(b)));
        let mut shown = 0;
        for (dir, totals) in &rest {
            let line = format!(
                "- {} ({} more files: {} changed, {} only read; last turn {})",
                shortened(dir, PATH_CHARS, "…"),
                totals.files,
                totals.changed,
                totals.files - totals.changed,
                totals.last_turn
            );
            // Room is kept for the line that counts the directories not shown.
            if out.len() + line.len() + 80 > budget {
                break;
            }
            out.push('\n');
            out.push_str(&line);
            shown += 1;
        }
        let hidden = &rest[shown..];
        if !hidden.is_empty() {
            let files: usize = hidden.iter().map(|(_, totals)| totals.files).sum();
            out.push_str(&format!("\n- {files} more files in {} more directories", hidden.len()));
        }
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn everything_exists(_: &str) -> bool {
        true
    }

    #[test]
    fn each_file_says_what_happened_to_it_and_when() {
        let mut tracker = FileTracker::default();
        tracker.set_turn(1);
        tracker.note("src/lib.rs".into(), FileOp::Read, false);
        tracker.note("PLAN.md".into(), FileOp::Written, true);
        tracker.set_turn(2);
        tracker.note("src/lib.rs".into(), FileOp::Edited, false);
        tracker.note("out/a.txt".into(), FileOp::Written, true);
        tracker.set_turn(7);
        tracker.note("out/a.txt".into(), FileOp::Written, false);
        tracker.note("out/a.txt".into(), FileOp::Edited, false);
        tracker.note("notes.txt".into(), FileOp::Written, false);
        let gone = |path: &str| path != "notes.txt";
        assert_eq!(
            tracker.render(10_000, &gone).text,
            "- PLAN.md (created)\n- notes.txt (written, deleted since)\n\
             - out/a.txt (created, modified 2×, last turn 7)\n- src/lib.rs (edited)"
        );
        assert_eq!(tracker.changed(), ["PLAN.md", "notes.txt", "out/a.txt", "src/lib.rs"]);
        assert_eq!(FileTracker::default().render(100, &everything_exists).text, "(no files touched)");
    }

    #[test]
    fn a_long_list_keeps_the_first_and_latest_files_and_counts_the_rest_by_directory() {
        let mut tracker = FileTracker::default();
        tracker.set_turn(1);
        tracker.note("PLAN.md".into(), FileOp::Written, true);
        for turn in 2..5_000u32 {
            tracker.set_turn(turn);
            let dir = if turn % 2 == 0 { "out" } else { "src/deep" };
            tracker.note(format!("{dir}/f{turn}.txt"), FileOp::Written, true);
        }
        for budget in [500, 2_000, 8_000] {
            let FileList { text, every_file } = tracker.render(budget, &everything_exists);
            assert!(!every_file);
            assert!(text.len() <= budget, "{budget}: {} > {budget}\n{text}", text.len());
            assert!(text.starts_with("4999 files;"), "{text}");
            assert!(text.contains("- PLAN.md (created)"), "{text}");
            assert!(text.contains("- src/deep/f4999.txt (created)"), "{text}");
            assert!(text.contains("- out/ ("), "{text}");
            assert!(text.contains("more files: "), "{text}");
        }
        // Directories that do not fit are counted together.
        let mut many = FileTracker::default();
        for i in 0..400 {
            many.note(format!("d{i}/f.txt"), FileOp::Read, false);
        }
        let text = many.render(600, &everything_exists).text;
        assert!(text.len() <= 600 && text.contains("more files in"), "{text}");
    }
}
