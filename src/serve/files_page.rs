//! The files-changed page of a run (`/runs/<id>/files`): the diff between the commit the run's
//! work directory was at when it started (the manifest's `base_commit`) and that work directory
//! now, file by file with its lines added and removed. A run outside git, or made before fabro
//! recorded its starting commit, gets a sentence saying so. The diff is bounded (see
//! [`crate::worktree::changes`]); every name and line is escaped.

use std::fmt::Write as _;
use std::path::Path;

use crate::report::run_page::escape;
use crate::worktree::changes::{self, Changes, LineKind};

/// The page of the run `id` in `dir`.
pub fn files_changed(dir: &Path, id: &str) -> String {
    let mut body =
        format!("<p><a href=\"/runs/{id}\">run</a></p>\n<h1>Files changed</h1>\n", id = escape(id));
    let Some(manifest) = crate::run_dir::read_manifest(dir) else {
        body.push_str("<p class=\"note\">This run has not started yet: nothing has changed.</p>\n");
        return super::pages::page("files changed", &body);
    };
    let work_dir = Path::new(&manifest.work_dir);
    let in_git = changes::in_repository(work_dir);
    let message = match (&manifest.base_commit, in_git) {
        (None, false) => Some(format!(
            "This run's work directory, <code>{}</code>, is not in a git repository: fabro cannot tell which files it changed.",
            escape(&manifest.work_dir)
        )),
        (None, true) => Some(
            "This run started before fabro recorded the commit it started from, so what it changed cannot be told here \
             (runs started since record it)."
                .to_string(),
        ),
        // Not the runs themselves, when the runs directory is inside the work directory.
        (Some(base), _) => match changes::since(work_dir, base, &[dir.parent().unwrap_or(dir).to_path_buf()]) {
            Ok(found) => {
                let _ = writeln!(
                    body,
                    "<p>Since commit <code>{}</code>, in <code>{}</code> (committed and uncommitted changes):</p>",
                    escape(&base.chars().take(12).collect::<String>()),
                    escape(&manifest.work_dir)
                );
                if manifest.worktree.is_none() {
                    body.push_str(
                        "<p class=\"note\">The run worked in this directory without a worktree of its own \
                         (<code>--worktree</code>): this is the directory as it is now, with whatever else changed \
                         it since the run started.</p>\n",
                    );
                }
                body.push_str(&render(&found));
                None
            }
            Err(problem) => Some(format!("What this run changed cannot be read: {}.", escape(&problem.to_string()))),
        },
    };
    if let Some(message) = message {
        let _ = writeln!(body, "<p class=\"note\" id=\"files-note\">{message}</p>");
    }
    super::pages::page("files changed", &body)
}

/// The changes as HTML: the totals, the note of what was cut, then each file's diff.
fn render(found: &Changes) -> String {
    let mut html = format!(
        "<p id=\"files-summary\"><span class=\"add\">+{}</span> <span class=\"del\">−{}</span> in {} file(s)</p>\n",
        found.additions,
        found.deletions,
        found.files.len()
    );
    if let Some(cut) = &found.cut {
        let _ = writeln!(html, "<p class=\"note\" id=\"files-cut\">{}</p>", escape(cut));
    }
    if found.files.is_empty() {
        html.push_str("<p>No file changed.</p>\n");
    }
    for file in &found.files {
        let renamed = file
            .old_path
            .as_ref()
            .map(|old| format!(" (from <code>{}</code>)", escape(old)))
            .unwrap_or_default();
        let _ = writeln!(
            html,
            "<section class=\"file\">\n<h3><code class=\"path\">{}</code>{renamed} <small>{}</small> <span class=\"add\">+{}</span> <span class=\"del\">−{}</span></h3>",
            escape(&file.path),
            file.kind.as_str(),
            file.additions,
            file.deletions
        );
        if file.symlink {
            html.push_str("<p class=\"note\">A symbolic link: its lines are the path it points to.</p>\n");
        }
        if file.binary {
            let _ = writeln!(
                html,
                "<p class=\"note\">Binary, or larger than {} KiB: not shown.</p>",
                changes::MAX_FILE_BYTES / 1024
            );
        } else if !file.lines.is_empty() {
            html.push_str("<table class=\"diff\">\n");
            for line in &file.lines {
                let number = |n: Option<u32>| n.map(|n| n.to_string()).unwrap_or_default();
                let (class, sign) = match line.kind {
                    LineKind::Hunk => ("hunk", ""),
                    LineKind::Context => ("context", " "),
                    LineKind::Added => ("add", "+"),
                    LineKind::Removed => ("del", "-"),
                };
                let _ = writeln!(
                    html,
                    "<tr class=\"{class}\"><td class=\"n\">{}</td><td class=\"n\">{}</td><td><pre>{sign}{}</pre></td></tr>",
                    number(line.old_line),
                    number(line.new_line),
                    escape(&line.text)
                );
            }
            html.push_str("</table>\n");
        }
        if file.cut {
            html.push_str("<p class=\"note\">(cut: the diff is too large to show whole)</p>\n");
        }
        html.push_str("</section>\n");
    }
    html
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::worktree::changes::{ChangeKind, DiffLine, FileChange};

    #[test]
    fn names_and_lines_are_escaped_and_cuts_are_told() {
        let found = Changes {
            files: vec![FileChange {
                path: "<img src=x onerror=alert(1)>.txt".into(),
                old_path: None,
                kind: ChangeKind::Added,
                additions: 1,
                deletions: 0,
                binary: false,
                symlink: true,
                lines: vec![DiffLine {
                    kind: LineKind::Added,
                    old_line: None,
                    new_line: Some(1),
                    text: "</pre><script>alert(1)</script>".into(),
                }],
                cut: true,
            }],
            additions: 1,
            deletions: 0,
            cut: Some("The diff is cut".into()),
        };
        let html = render(&found);
        assert!(!html.contains("<script>") && !html.contains("<img"), "{html}");
        assert!(html.contains("&lt;/pre&gt;&lt;script&gt;"), "{html}");
        assert!(html.contains("id=\"files-cut\"") && html.contains("symbolic link"), "{html}");
    }
}
