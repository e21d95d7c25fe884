//! What command stages may do to the machine: how much they may write.

mod common;

use common::Test;

#[test]
fn output_past_max_output_stops_the_stage_and_the_log_keeps_head_and_tail() {
    let workflow = r#"digraph flood {
    allow_lints="failure_path"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    flood [shape=parallelogram, script="echo first line; yes"]
    start -> flood -> exit
}
"#;
    let ran = Test::new()
        .workflow(workflow)
        .args(["run", "workflow.dot", "--run-dir", "run", "--max-output", "1MB", "-q"])
        .status(1)
        .stderr_contains("more than max_output=976.6 KiB; it was stopped")
        .run();
    let log = std::fs::read(ran.dir.path().join("run/stages/flood/1/stdout.log")).unwrap();
    assert!(log.len() < 1_100_000, "{} bytes kept", log.len());
    let text = String::from_utf8_lossy(&log);
    assert!(text.starts_with("first line\ny\n"), "the head is kept");
    assert!(text.contains("bytes left out: the output passed max_output"), "the cut is marked");
    assert!(text.ends_with("y\n") || text.ends_with('y'), "the tail is kept");

    // The node's own max_output wins over --max-output.
    let own = workflow
        .replace("script=\"echo first line; yes\"", "script=\"echo first line; yes\", max_output=2000");
    Test::new()
        .workflow(&own)
        .args(["run", "workflow.dot", "--run-dir", "run", "--max-output", "1GiB", "-q"])
        .status(1)
        .stderr_contains("more than max_output=2.0 KiB")
        .run();
    Test::new()
        .workflow(workflow)
        .args(["run", "workflow.dot", "--max-output", "lots"])
        .status(2)
        .stderr_contains("`lots` is not a size (e.g. 500MB, 1GiB)")
        .run();
}
