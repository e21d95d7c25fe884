//! A builder for integration tests that run the real `fabro` binary, in the style of `just`'s
//! test suite: give it a workflow, arguments and expectations, then `run()`.

pub mod llm_server;
pub mod model_server;
pub mod pty;
pub mod recording_proxy;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::time::{Duration, Instant};

/// The compiled `fabro` binary.
pub fn fabro_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_fabro"))
}

/// Environment variables that configure LLM providers.
pub const PROVIDER_ENV: &[&str] = &[
    "ANTHROPIC_API_KEY",
    "ANTHROPIC_BASE_URL",
    "OPENAI_API_KEY",
    "OPENAI_BASE_URL",
    "GEMINI_API_KEY",
    "GOOGLE_API_KEY",
    "FABRO_LLM_BASE_URL",
    "FABRO_LLM_API_KEY",
    "FABRO_LLM_MODEL",
    "FABRO_LLM_PROVIDER",
    "FABRO_LLM_REQUEST_TIMEOUT",
    "FABRO_LLM_MAX_RETRIES",
    "FABRO_LLM_RETRY_WINDOW",
    "FABRO_CONFIG",
    "BRAVE_API_KEY",
];

/// `fabro ARGS` in `dir`, isolated from the environment of whoever runs the tests: no `CI`,
/// `GITHUB_STEP_SUMMARY` or `FABRO_LOG`, and no terminal on stdin.
pub fn fabro_command(dir: &Path, args: &[&str]) -> Command {
    let mut command = Command::new(fabro_bin());
    command
        .args(args)
        .current_dir(dir)
        .env_remove("CI")
        .env_remove("GITHUB_STEP_SUMMARY")
        .env_remove("FABRO_LOG")
        .stdin(Stdio::null());
    // Never a real provider from the developer's environment or config file.
    for name in PROVIDER_ENV {
        command.env_remove(name);
    }
    command.env("XDG_CONFIG_HOME", dir.join(".no-fabro-config"));
    command
}

/// Runs `fabro ARGS` in `dir` to the end.
pub fn fabro_in(dir: &Path, args: &[&str]) -> Output {
    fabro_command(dir, args).output().expect("run fabro")
}

/// Waits (at most 20 s) until a stage of a run in the background has written `path`.
pub fn wait_for_file(path: &Path, what: &str) {
    let started = Instant::now();
    while !path.exists() {
        assert!(started.elapsed() < Duration::from_secs(20), "{what} never started");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// The repository root (for `workflows/`).
pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

pub struct Test {
    dir: tempfile::TempDir,
    args: Vec<String>,
    expected_status: Option<i32>,
    stdout_contains: Vec<String>,
    stderr_contains: Vec<String>,
    stdout_lacks: Vec<String>,
    env: Vec<(String, String)>,
}

pub struct Ran {
    pub dir: tempfile::TempDir,
    pub output: Output,
}

impl Ran {
    pub fn stdout(&self) -> String {
        String::from_utf8_lossy(&self.output.stdout).into_owned()
    }

    pub fn stderr(&self) -> String {
        String::from_utf8_lossy(&self.output.stderr).into_owned()
    }

    pub fn json(&self) -> serde_json::Value {
        serde_json::from_slice(&self.output.stdout)
            .unwrap_or_else(|e| panic!("stdout is not JSON ({e}):\n{}", self.stdout()))
    }
}

impl Test {
    pub fn new() -> Self {
        Test {
            dir: tempfile::tempdir().expect("temp dir"),
            args: Vec::new(),
            expected_status: None,
            stdout_contains: Vec::new(),
            stderr_contains: Vec::new(),
            stdout_lacks: Vec::new(),
            env: Vec::new(),
        }
    }

    /// Sets an environment variable for the run.
    pub fn env(mut self, key: &str, value: &str) -> Self {
        self.env.push((key.to_string(), value.to_string()));
        self
    }

    /// Writes `workflow.dot` (or another file) into the test's temporary directory.
    pub fn file(self, name: &str, contents: &str) -> Self {
        let path = self.dir.path().join(name);
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent).expect("create dirs");
        }
        std::fs::write(path, contents).expect("write file");
        self
    }

    /// Shorthand for `.file("workflow.dot", source)`.
    pub fn workflow(self, source: &str) -> Self {
        self.file("workflow.dot", source)
    }

    pub fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    pub fn args<I, S>(mut self, args: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: AsRef<str>,
    {
        self.args.extend(args.into_iter().map(|a| a.as_ref().to_string()));
        self
    }

    pub fn status(mut self, code: i32) -> Self {
        self.expected_status = Some(code);
        self
    }

    pub fn stdout_contains(mut self, text: &str) -> Self {
        self.stdout_contains.push(text.to_string());
        self
    }

    pub fn stdout_lacks(mut self, text: &str) -> Self {
        self.stdout_lacks.push(text.to_string());
        self
    }

    pub fn stderr_contains(mut self, text: &str) -> Self {
        self.stderr_contains.push(text.to_string());
        self
    }

    /// Runs `fabro ARGS` in the test directory and checks every expectation.
    pub fn run(self) -> Ran {
        let args: Vec<&str> = self.args.iter().map(String::as_str).collect();
        let mut command = fabro_command(self.dir.path(), &args);
        command.envs(self.env.iter().map(|(k, v)| (k, v)));
        let output = command.output().expect("run fabro");
        let ran = Ran { dir: self.dir, output };
        let context = || {
            format!(
                "fabro {}\n--- stdout\n{}\n--- stderr\n{}",
                self.args.join(" "),
                ran.stdout(),
                ran.stderr()
            )
        };
        if let Some(code) = self.expected_status {
            assert_eq!(ran.output.status.code(), Some(code), "unexpected exit status\n{}", context());
        }
        for text in &self.stdout_contains {
            assert!(ran.stdout().contains(text), "stdout lacks {text:?}\n{}", context());
        }
        for text in &self.stdout_lacks {
            assert!(!ran.stdout().contains(text), "stdout has {text:?}\n{}", context());
        }
        for text in &self.stderr_contains {
            assert!(ran.stderr().contains(text), "stderr lacks {text:?}\n{}", context());
        }
        ran
    }
}

/// Every `.dot` file under `workflows/`, sorted.
pub fn shipped_workflows() -> Vec<PathBuf> {
    let mut files = Vec::new();
    collect_dot_files(&repo_root().join("workflows"), &mut files);
    files.sort();
    files
}

fn collect_dot_files(dir: &Path, out: &mut Vec<PathBuf>) {
    let Ok(entries) = std::fs::read_dir(dir) else { return };
    for entry in entries.flatten() {
        let path = entry.path();
        if path.is_dir() {
            collect_dot_files(&path, out);
        } else if path.extension().is_some_and(|e| e == "dot") {
            out.push(path);
        }
    }
}

/// Holds the run lock of `run_dir` as a running fabro would (an open-file-description lock on
/// `run.lock` naming this process) until the returned file is dropped; removes the file then.
#[allow(dead_code)]
pub struct HeldLock(std::fs::File, PathBuf);

#[allow(dead_code)]
pub fn hold_run_lock(run_dir: &Path) -> HeldLock {
    use std::io::Write;
    use std::os::unix::io::AsRawFd;
    let path = run_dir.join("run.lock");
    let mut file =
        std::fs::OpenOptions::new().read(true).write(true).create(true).truncate(true).open(&path).unwrap();
    // SAFETY: `flock` is plain data; fcntl reads it and keeps no pointer.
    let mut request: libc::flock = unsafe { std::mem::zeroed() };
    request.l_type = libc::F_WRLCK as libc::c_short;
    request.l_whence = libc::SEEK_SET as libc::c_short;
    assert_eq!(unsafe { libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &request) }, 0, "lock taken");
    writeln!(file, "{}", std::process::id()).unwrap();
    HeldLock(file, path)
}

impl Drop for HeldLock {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.1);
    }
}

/// The complete lines of a run's `journal.jsonl`, parsed, with their text.
pub fn journal_lines(run_dir: &Path) -> Vec<(String, serde_json::Value)> {
    let text = std::fs::read_to_string(run_dir.join("journal.jsonl")).unwrap_or_default();
    text.split_inclusive('\n')
        .filter(|line| line.ends_with('\n'))
        .filter_map(|line| Some((line.to_string(), serde_json::from_str(line).ok()?)))
        .collect()
}

/// The journal entry recorded right after `node` completed (its first), with its text.
pub fn journal_entry_after(run_dir: &Path, node: &str) -> (String, serde_json::Value) {
    journal_lines(run_dir)
        .into_iter()
        .find(|(_, entry)| entry["node"] == node && entry["status"] == "running")
        .unwrap_or_else(|| panic!("no journal entry after `{node}` in {}", run_dir.display()))
}

/// The (node, visit) of every stage visit the journal of `run_dir` records as completed.
pub fn journaled_visits(run_dir: &Path) -> Vec<(String, u64)> {
    journal_lines(run_dir)
        .iter()
        .flat_map(|(_, entry)| entry["stages"].as_array().cloned().unwrap_or_default())
        .map(|stage| {
            (stage["node"].as_str().unwrap_or_default().to_string(), stage["visit"].as_u64().unwrap_or(0))
        })
        .collect()
}

/// The `(node, visit)` of every stage `result.json` lists, in order.
pub fn stage_pairs(result: &serde_json::Value) -> Vec<(String, u64)> {
    result["stages"]
        .as_array()
        .expect("stages")
        .iter()
        .map(|s| (s["node_id"].as_str().unwrap().to_string(), s["visit"].as_u64().unwrap()))
        .collect()
}

/// Makes `dir` a git repository on `main` whose one commit holds every file in it (as a `Test`
/// user), without the machine's git configuration.
pub fn commit_all_in_new_repository(dir: &Path) {
    for args in [
        &["init", "-q", "-b", "main"][..],
        &["config", "user.name", "Test"],
        &["config", "user.email", "test@example.com"],
        &["add", "."],
        &["commit", "-q", "-m", "initial"],
    ] {
        git(dir, args);
    }
}

/// Runs `git args` in `dir` without the machine's git configuration; panics with git's stderr when
/// it fails. Returns its stdout, trimmed.
pub fn git(dir: &Path, args: &[&str]) -> String {
    let output = Command::new("git")
        .args(args)
        .current_dir(dir)
        .env("GIT_CONFIG_GLOBAL", "/dev/null")
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .output()
        .expect("git runs");
    assert!(output.status.success(), "git {args:?}: {}", String::from_utf8_lossy(&output.stderr));
    String::from_utf8_lossy(&output.stdout).trim().to_string()
}

/// Who runs fabro in a test of the sandbox: the user running the tests, and, when that is root,
/// also the unprivileged `nobody` (uid 65534, through `setpriv`), since bubblewrap confines the
/// two differently (a user namespace for an ordinary user, none for root).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TestUser {
    Current,
    Nobody,
}

impl TestUser {
    /// The users a sandbox test runs as here: both when the tests run as root (as in CI),
    /// else the current (unprivileged) user only.
    pub fn all() -> Vec<TestUser> {
        // SAFETY: geteuid has no preconditions.
        if unsafe { libc::geteuid() } == 0 {
            vec![TestUser::Current, TestUser::Nobody]
        } else {
            vec![TestUser::Current]
        }
    }

    /// Lets this user own `dir` and everything in it (a test's temporary directory).
    pub fn own(self, dir: &Path) {
        if self == TestUser::Nobody {
            let status = Command::new("chown").args(["-R", "65534:65534"]).arg(dir).status().expect("chown");
            assert!(status.success(), "chown -R nobody {}", dir.display());
        }
    }

    /// `fabro ARGS` in `dir` as this user, isolated as [`fabro_command`] is.
    pub fn fabro(self, dir: &Path, args: &[&str]) -> Command {
        let isolated = fabro_command(dir, args);
        if self == TestUser::Current {
            return isolated;
        }
        let mut command = Command::new("setpriv");
        command
            .args(["--reuid=65534", "--regid=65534", "--clear-groups"])
            .arg(nobody_binary())
            .args(args)
            .current_dir(dir)
            .stdin(Stdio::null());
        for (name, value) in isolated.get_envs() {
            match value {
                Some(value) => command.env(name, value),
                None => command.env_remove(name),
            };
        }
        command
    }
}

/// The fabro binary where `nobody` can run it: the build directory may lie under a home that
/// only root can enter, so it is linked (or copied) once into a directory of its own.
fn nobody_binary() -> PathBuf {
    static BINARY: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    BINARY
        .get_or_init(|| {
            let dir = std::env::temp_dir().join(format!("fabro-test-bin-{}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("binary dir");
            let binary = dir.join("fabro");
            let _ = std::fs::remove_file(&binary);
            if std::fs::hard_link(fabro_bin(), &binary).is_err() {
                std::fs::copy(fabro_bin(), &binary).expect("copy fabro");
            }
            use std::os::unix::fs::PermissionsExt;
            std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
            binary
        })
        .clone()
}

/// A human gate choosing between two command stages (`touch deployed` or `touch revised`).
pub const DEPLOY_GATE: &str = r#"digraph release {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    review [shape=hexagon, label="Ship it?"]
    deploy [shape=parallelogram, script="touch deployed"]
    revise [shape=parallelogram, script="touch revised"]
    start -> review
    review -> deploy [label="[A] Approve"]
    review -> revise [label="[R] Request changes"]
    deploy -> exit
    revise -> exit
}
"#;

/// `one`, then `two` (which waits until the file `go` exists in the work directory), then `three`;
/// each appends its name to `steps`, and `two` touches `two-started` when it starts.
pub fn three_steps(go: &str) -> String {
    format!(
        r#"digraph steps {{
    start [shape=Mdiamond]
    exit [shape=Msquare]
    one [shape=parallelogram, script="echo one; echo one >> steps"]
    two [shape=parallelogram, timeout="120s", script="touch two-started; while [ ! -f {go} ]; do sleep 0.05; done; echo two >> steps"]
    three [shape=parallelogram, script="echo three >> steps"]
    start -> one -> two -> three -> exit
}}
"#
    )
}
