//! Reports for CI about a finished (or paused) run: [`junit`] renders JUnit XML that test-report
//! tools read, [`github_step_summary`] renders the GitHub-flavored Markdown that GitHub Actions shows on
//! a job's summary page. Both are pure functions of a [`RunResult`](crate::run_dir::RunResult);
//! JUnit also reads the tail of each visit's output from the run directory.

pub mod context_chart;
pub mod github_step_summary;
pub mod junit;
pub mod retro;
pub mod run_page;

use std::path::Path;

use crate::run_dir::stage_output::read_tail;

/// How much of a stage's output goes into a report.
pub const OUTPUT_TAIL_BYTES: u64 = 4096;

use crate::run_dir::layout;
use crate::run_dir::layout::finished_visit_dir as visit_dir;

/// The output a report shows for one visit: the command's stdout.log, else the LLM's
/// response.md, tail only.
pub fn visit_output(run_dir: &Path, node_id: &str, visit: u32) -> Option<String> {
    let dir = visit_dir(run_dir, node_id, visit)?;
    [layout::STDOUT_LOG, layout::RESPONSE].iter().find_map(|name| {
        let path = dir.join(name);
        if path.is_file() {
            read_tail(&path, OUTPUT_TAIL_BYTES)
        } else {
            None
        }
    })
}

/// `path` relative to `base` when it lies inside it, else as given; for showing run directories
/// without absolute paths of the machine that ran them.
pub fn relative_display(path: &Path, base: &Path) -> String {
    match path.strip_prefix(base) {
        Ok(relative) if !relative.as_os_str().is_empty() => relative.display().to_string(),
        Ok(_) => ".".to_string(),
        Err(_) => path.display().to_string(),
    }
}

/// `12.3s`: a duration in seconds with one decimal.
pub(crate) fn seconds(ms: u64) -> String {
    format!("{:.1}s", ms as f64 / 1000.0)
}

/// `text` cut to its first `max` characters, with `…` when it was longer.
pub(crate) fn shorten(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_string(),
    }
}

/// Seconds with millisecond precision, as JUnit `time` attributes want them.
pub(crate) fn seconds_3(ms: u64) -> String {
    format!("{}.{:03}", ms / 1000, ms % 1000)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tail_is_cut_at_a_character_boundary() {
        let temp = tempfile::tempdir().unwrap();
        let path = temp.path().join("out.log");
        // "é" is two bytes; a 3-byte window starts inside the first one and drops its second byte.
        std::fs::write(&path, "aéé").unwrap();
        assert_eq!(read_tail(&path, 3).as_deref(), Some("é"));
        assert_eq!(read_tail(&path, 4).as_deref(), Some("éé"));
        assert_eq!(read_tail(&path, 100).as_deref(), Some("aéé"));
        std::fs::write(&path, "€x").unwrap(); // € is three bytes
        assert_eq!(read_tail(&path, 2).as_deref(), Some("x"));
        assert_eq!(read_tail(&temp.path().join("missing"), 10), None);
    }

    #[test]
    fn relative_paths_inside_the_base_only() {
        assert_eq!(relative_display(Path::new("/w/.fabro/runs/x"), Path::new("/w")), ".fabro/runs/x");
        assert_eq!(relative_display(Path::new("/elsewhere/x"), Path::new("/w")), "/elsewhere/x");
        assert_eq!(relative_display(Path::new(".fabro/runs/x"), Path::new("/w")), ".fabro/runs/x");
        assert_eq!(seconds_3(1234), "1.234");
        assert_eq!(seconds_3(5), "0.005");
    }
}
