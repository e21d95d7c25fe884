//! Workflows written in the dialects of other implementations (`tests/fixtures/dialects/`, each
//! with a note of where its idioms come from): they validate without errors and run under
//! `--dry-run --auto-approve`.

mod common;

use std::path::PathBuf;

use common::{fabro_in, repo_root};

fn fixtures() -> Vec<PathBuf> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(repo_root().join("tests/fixtures/dialects"))
        .expect("the dialect fixtures")
        .flatten()
        .map(|entry| entry.path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "dot"))
        .collect();
    files.sort();
    files
}

#[test]
fn every_dialect_fixture_validates_and_runs_dry() {
    let files = fixtures();
    assert!(!files.is_empty());
    for file in files {
        let dir = tempfile::tempdir().unwrap();
        let path = file.display().to_string();
        let validated = fabro_in(dir.path(), &["validate", &path]);
        assert_eq!(
            validated.status.code(),
            Some(0),
            "{path}: {}",
            String::from_utf8_lossy(&validated.stdout)
        );
        let ran =
            fabro_in(dir.path(), &["run", &path, "--dry-run", "--auto-approve", "-q", "--run-dir", "run"]);
        assert_eq!(ran.status.code(), Some(0), "{path}: {}", String::from_utf8_lossy(&ran.stderr));
    }
}

#[test]
fn bare_seconds_and_integral_floats_are_read_with_a_warning_and_a_fix() {
    let file = repo_root().join("tests/fixtures/dialects/bare_seconds_and_float_weights.dot");
    let dir = tempfile::tempdir().unwrap();
    let out = fabro_in(dir.path(), &["validate", &file.display().to_string()]);
    let text = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "{text}");
    for (warning, fix) in [
        ("node build: `timeout=300` reads as 300s (bare numbers are seconds)", "write `timeout=300s`"),
        ("node pause: `duration=1` reads as 1s (bare numbers are seconds)", "write `duration=1s`"),
        ("node review: `max_retries=1.0` reads as 1", "write `max_retries=1`"),
        ("edge build -> pause: `weight=1.0` reads as 1", "write `weight=1`"),
    ] {
        assert!(text.contains(warning), "{warning}\n{text}");
        assert!(text.contains(fix), "{fix}\n{text}");
    }
    assert_eq!(text.matches("warning[dialect_value]").count(), 5, "{text}");
    // A value that is really wrong stays an error.
    let broken = dir.path().join("broken.dot");
    std::fs::write(&broken, std::fs::read_to_string(&file).unwrap().replace("weight=1.0", "weight=2.5"))
        .unwrap();
    let out = fabro_in(dir.path(), &["validate", "broken.dot"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&out.stdout).contains("`weight` is `2.5`, expected an integer"));
}

#[test]
fn negated_contains_routes_as_written() {
    let file = repo_root().join("tests/fixtures/dialects/negated_contains.dot");
    let dir = tempfile::tempdir().unwrap();
    let ran = fabro_in(dir.path(), &["run", &file.display().to_string(), "-q", "--run-dir", "run"]);
    assert_eq!(ran.status.code(), Some(0), "{}", String::from_utf8_lossy(&ran.stderr));
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(dir.path().join("run/result.json")).unwrap()).unwrap();
    let stages: Vec<&str> =
        result["stages"].as_array().unwrap().iter().map(|s| s["node_id"].as_str().unwrap()).collect();
    assert_eq!(stages, ["start", "check", "exit"], "the output has no FAIL, so check goes to exit");
}
