//! Files that are not regular files, where fabro reads workflows and run records: `/dev/zero`,
//! FIFOs and symbolic links to them get a clear error at once, never a hang or a full memory.

use crate::common;

use std::path::Path;
use std::process::{Output, Stdio};
use std::time::{Duration, Instant};

/// `fabro ARGS` in `dir`, killed (and the test failed) if it takes more than 10 seconds.
fn fabro_within_deadline(dir: &Path, args: &[&str]) -> Output {
    let mut child =
        common::fabro_command(dir, args).stdout(Stdio::piped()).stderr(Stdio::piped()).spawn().unwrap();
    let started = Instant::now();
    while child.try_wait().unwrap().is_none() {
        if started.elapsed() > Duration::from_secs(10) {
            let _ = child.kill();
            panic!("fabro {} still runs after 10 s", args.join(" "));
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    child.wait_with_output().unwrap()
}

fn mkfifo(path: &Path) {
    let name = std::ffi::CString::new(path.to_str().unwrap()).unwrap();
    // SAFETY: mkfifo reads the NUL-terminated path only.
    assert_eq!(unsafe { libc::mkfifo(name.as_ptr(), 0o600) }, 0);
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

const WORKFLOW: &str =
    "digraph w {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  NODE\n  start -> work -> exit\n}\n";

#[test]
fn imports_and_prompt_files_that_are_devices_or_fifos_are_errors_at_once() {
    let dir = tempfile::tempdir().unwrap();
    mkfifo(&dir.path().join("prompt.fifo"));
    std::os::unix::fs::symlink("/dev/zero", dir.path().join("zero.md")).unwrap();
    let cases = [
        (r#"work [import="/dev/zero"]"#, "a character device, not a regular file"),
        (r#"work [prompt="@/dev/zero"]"#, "a character device, not a regular file"),
        (r#"work [prompt="@zero.md"]"#, "a character device, not a regular file"),
        (r#"work [prompt="@prompt.fifo"]"#, "a FIFO (named pipe), not a regular file"),
    ];
    for (node, message) in cases {
        std::fs::write(dir.path().join("w.dot"), WORKFLOW.replace("NODE", node)).unwrap();
        let output = fabro_within_deadline(dir.path(), &["validate", "w.dot"]);
        let shown = format!("{}{}", text(&output.stdout), text(&output.stderr));
        assert_eq!(output.status.code(), Some(2), "{node}: {shown}");
        assert!(shown.contains(message), "{node}: {shown}");
        assert!(shown.len() < 10_000, "{node}: a short error");
    }
}

#[test]
fn a_workflow_file_that_is_a_fifo_or_a_device_is_an_error_at_once() {
    let dir = tempfile::tempdir().unwrap();
    mkfifo(&dir.path().join("w.dot"));
    for args in [["validate", "w.dot"], ["run", "w.dot"]] {
        let output = fabro_within_deadline(dir.path(), &args);
        assert_eq!(output.status.code(), Some(2));
        assert!(
            text(&output.stderr).contains("`w.dot`") && text(&output.stderr).contains("a FIFO"),
            "{}",
            text(&output.stderr)
        );
    }
    let output = fabro_within_deadline(dir.path(), &["validate", "/dev/zero"]);
    assert_eq!(output.status.code(), Some(2));
    assert!(text(&output.stderr).contains("a character device"), "{}", text(&output.stderr));
}

#[test]
fn run_records_that_are_devices_or_fifos_never_stop_inspect_or_runs() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join("w.dot"),
        WORKFLOW.replace("NODE", r#"work [shape=parallelogram, script="true"]"#),
    )
    .unwrap();
    for name in ["a", "b"] {
        let ran = common::fabro_in(dir.path(), &["run", "w.dot", "--run-dir", &format!("runs/{name}"), "-q"]);
        assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    }
    let a = dir.path().join("runs/a");
    std::fs::remove_file(a.join("checkpoint.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", a.join("checkpoint.json")).unwrap();
    let b = dir.path().join("runs/b");
    std::fs::remove_file(b.join("manifest.json")).unwrap();
    mkfifo(&b.join("manifest.json"));

    let inspected = fabro_within_deadline(dir.path(), &["inspect", "runs/a"]);
    assert_ne!(inspected.status.code(), Some(0));
    assert!(text(&inspected.stderr).contains("a symbolic link"), "{}", text(&inspected.stderr));
    let listed = fabro_within_deadline(dir.path(), &["runs", "--dir", "runs", "--all"]);
    assert_eq!(listed.status.code(), Some(0), "{}", text(&listed.stderr));
    let shown = text(&listed.stdout);
    assert!(shown.contains("unreadable"), "{shown}");
    assert!(shown.contains("a FIFO") || shown.contains("symbolic link"), "{shown}");
    let resumed = fabro_within_deadline(dir.path(), &["resume", "runs/b"]);
    assert_eq!(resumed.status.code(), Some(2), "{}", text(&resumed.stderr));
}

#[test]
fn project_memory_that_is_a_link_a_fifo_or_a_device_is_an_error_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let memory = dir.path().join("project/.fabro/memory");
    std::fs::create_dir_all(&memory).unwrap();
    // A FIFO entry (it hung `fabro memory list` and every memory=true stage) and a link to
    // /dev/zero (it filled memory).
    mkfifo(&memory.join("stuck.json"));
    let listed = fabro_within_deadline(dir.path(), &["memory", "list", "--dir", "project"]);
    assert_ne!(listed.status.code(), Some(0));
    assert!(text(&listed.stderr).contains("a FIFO"), "{}", text(&listed.stderr));
    std::fs::remove_file(memory.join("stuck.json")).unwrap();
    std::os::unix::fs::symlink("/dev/zero", memory.join("zero.json")).unwrap();
    let listed = fabro_within_deadline(dir.path(), &["memory", "list", "--dir", "project"]);
    assert!(text(&listed.stderr).contains("symbolic link"), "{}", text(&listed.stderr));
    // The store itself linked elsewhere (a confined shell made the link): nothing is read or
    // written there.
    std::fs::remove_dir_all(&memory).unwrap();
    let elsewhere = dir.path().join("elsewhere");
    std::fs::create_dir_all(&elsewhere).unwrap();
    std::fs::write(elsewhere.join("planted.json"), "{}").unwrap();
    std::os::unix::fs::symlink(&elsewhere, &memory).unwrap();
    let listed = fabro_within_deadline(dir.path(), &["memory", "list", "--dir", "project"]);
    assert_ne!(listed.status.code(), Some(0));
    assert!(text(&listed.stderr).contains("not a directory of its own"), "{}", text(&listed.stderr));
}
