//! Sandboxed stages (`sandbox=bwrap`, `fabro run --sandbox bwrap`) through the binary: what a
//! confined command stage and CLI agent can and cannot do. bubblewrap is installed by `scripts/test`;
//! without it these tests fail, they never skip.

use crate::common;

use common::TestUser;

use std::io::Read;
use std::path::{Path, PathBuf};
use std::process::Output;

/// A temporary directory with `w.dot` and a work directory `work/` that lies outside the fake
/// home `home/`, where a secret is planted.
struct Setup {
    dir: tempfile::TempDir,
    user: TestUser,
}

const SECRET: &str = "ssh-secret-7f3a";
const API_KEY: &str = "sk-ant-do-not-leak-91c2";

impl Setup {
    fn new(workflow: &str) -> Setup {
        Setup::for_user(workflow, TestUser::Current)
    }

    /// The setup, owned by `user`, whose runs go as `user`.
    fn for_user(workflow: &str, user: TestUser) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("w.dot"), workflow).unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        std::fs::create_dir_all(dir.path().join("home/.ssh")).unwrap();
        std::fs::write(dir.path().join("home/.ssh/id_ed25519"), SECRET).unwrap();
        std::fs::create_dir_all(dir.path().join("outside")).unwrap();
        user.own(dir.path());
        Setup { dir, user }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `fabro run w.dot --workdir work --run-dir run ARGS` with the fake home and an API key in
    /// the environment.
    fn run(&self, args: &[&str]) -> Output {
        let mut all = vec!["run", "w.dot", "--workdir", "work", "--run-dir", "run", "-q"];
        all.extend_from_slice(args);
        self.fabro(&all).output().unwrap()
    }

    /// `fabro ARGS` as the setup's user, with the fake home and an API key in the environment.
    fn fabro(&self, args: &[&str]) -> std::process::Command {
        let mut command = self.user.fabro(self.dir.path(), args);
        command.env("HOME", self.path("home")).env("ANTHROPIC_API_KEY", API_KEY);
        command
    }

    fn stdout_of(&self, node: &str) -> String {
        std::fs::read_to_string(self.path(&format!("run/stages/{node}/1/stdout.log"))).unwrap_or_default()
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

fn command_workflow(attributes: &str, script: &str) -> String {
    format!(
        "digraph sandboxed {{\n  allow_lints=\"failure_path\"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  \
         probe [shape=parallelogram, {attributes} script=\"{}\"]\n  start -> probe -> exit\n}}\n",
        script.replace('\\', "\\\\").replace('"', "\\\"")
    )
}

#[test]
fn a_confined_command_cannot_write_outside_its_work_directory_nor_read_the_home() {
    for user in TestUser::all() {
        // Writable for everyone: only the sandbox keeps the stage out.
        let outside = tempfile::tempdir_in("/var/tmp").unwrap();
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(outside.path(), std::fs::Permissions::from_mode(0o777)).unwrap();
        let script = format!(
            "echo inside > made.txt; echo hacked > {outside}/planted 2>/dev/null && echo WROTE-OUTSIDE; \
             touch /etc/fabro-sandbox-test 2>/dev/null && echo WROTE-ETC; \
             cat \"$HOME/.ssh/id_ed25519\" 2>/dev/null || echo no-secret; env",
            outside = outside.path().display()
        );
        let setup = Setup::for_user(&command_workflow("sandbox=\"bwrap\",", &script), user);
        let ran = setup.run(&[]);
        assert_eq!(ran.status.code(), Some(0), "{user:?}: {}", text(&ran.stderr));
        let out = setup.stdout_of("probe");
        assert_eq!(
            std::fs::read_to_string(setup.path("work/made.txt")).unwrap(),
            "inside\n",
            "{user:?}: the work directory is writable"
        );
        assert!(
            !out.contains("WROTE-OUTSIDE") && !outside.path().join("planted").exists(),
            "{user:?}: {out}"
        );
        assert!(
            !out.contains("WROTE-ETC") && !Path::new("/etc/fabro-sandbox-test").exists(),
            "{user:?}: {out}"
        );
        assert!(out.contains("no-secret") && !out.contains(SECRET), "{user:?}: {out}");
        assert!(
            !out.contains(API_KEY) && !out.contains("ANTHROPIC_API_KEY"),
            "{user:?}: API keys stay outside: {out}"
        );
        assert!(out.contains("FABRO_STAGE_DIR="), "{user:?}: the stage variables are there: {out}");
        let status = std::fs::read_to_string(setup.path("run/stages/probe/1/status.json")).unwrap();
        assert!(status.contains("\"sandbox\": \"bwrap\""), "{status}");
        let events = std::fs::read_to_string(setup.path("run/events.jsonl")).unwrap();
        assert!(
            events.lines().any(|l| l.contains("\"stage.started\"") && l.contains("\"sandbox\":\"bwrap\"")),
            "{events}"
        );
    }
}

#[test]
fn without_the_sandbox_the_same_command_reaches_everything() {
    let script = "cat \"$HOME/.ssh/id_ed25519\"; echo; env";
    let setup = Setup::new(&command_workflow("", script));
    let ran = setup.run(&[]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let out = setup.stdout_of("probe");
    assert!(out.contains(SECRET), "the control case: {out}");
    assert!(
        !out.contains(API_KEY) && !out.contains("ANTHROPIC_API_KEY="),
        "API keys stay outside all the same: {out}"
    );
    let status = std::fs::read_to_string(setup.path("run/stages/probe/1/status.json")).unwrap();
    assert!(status.contains("\"sandbox\": \"none\""), "{status}");
}

#[test]
fn the_network_is_off_unless_the_stage_asks_for_it() {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = listener.local_addr().unwrap().port();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let mut stream = stream;
            let _ = std::io::Write::write_all(&mut stream, b"hello from the host\n");
        }
    });
    let script = format!("bash -c 'exec 3<>/dev/tcp/127.0.0.1/{port} && head -1 <&3' || echo no-network");
    for user in TestUser::all() {
        for (attributes, expected) in [("", "no-network"), ("sandbox_network=true,", "hello from the host")] {
            let setup = Setup::for_user(&command_workflow(attributes, &script), user);
            let ran = setup.run(&["--sandbox", "bwrap"]);
            assert_eq!(ran.status.code(), Some(0), "{user:?}: {}", text(&ran.stderr));
            let out = setup.stdout_of("probe");
            assert!(out.contains(expected), "{user:?} {attributes}: {out}");
        }
    }
}

/// Whether a process whose command line holds `marker` lives on the host, zombies aside. A
/// confined stage has its own PID namespace: the pid it sees is not the host's, so the test
/// looks for the command line.
fn running(marker: &str) -> bool {
    std::fs::read_dir("/proc").unwrap().flatten().any(|entry| {
        let dir = entry.path();
        let cmdline = std::fs::read(dir.join("cmdline")).unwrap_or_default();
        let stat = std::fs::read_to_string(dir.join("stat")).unwrap_or_default();
        let zombie = stat.rsplit_once(')').is_some_and(|(_, rest)| rest.trim_start().starts_with('Z'));
        !zombie && String::from_utf8_lossy(&cmdline).replace('\0', " ").contains(marker)
    })
}

fn gone(marker: &str) -> bool {
    for _ in 0..100 {
        if !running(marker) {
            return true;
        }
        std::thread::sleep(std::time::Duration::from_millis(20));
    }
    false
}

#[test]
fn a_confined_background_child_survives_neither_timeout_nor_cancellation() {
    // Timeout.
    let marker = "sleep 30.0417";
    let script = format!("{marker} & echo started > child.pid; wait");
    let setup = Setup::new(&command_workflow("sandbox=\"bwrap\", timeout=\"500ms\",", &script));
    let ran = setup.run(&[]);
    assert_eq!(ran.status.code(), Some(1), "{}", text(&ran.stderr));
    assert!(setup.path("work/child.pid").exists());
    assert!(gone(marker), "the background {marker} outlived the timeout");
    // Cancellation.
    let marker = "sleep 30.0418";
    let script = format!("{marker} & echo started > child.pid; wait");
    let setup = Setup::new(&command_workflow("sandbox=\"bwrap\",", &script));
    let mut fabro = common::fabro_command(
        setup.dir.path(),
        &["run", "w.dot", "--workdir", "work", "--run-dir", "run", "-q"],
    )
    .env("HOME", setup.path("home"))
    .spawn()
    .unwrap();
    common::wait_for_file(&setup.path("work/child.pid"), "the confined script");
    std::thread::sleep(std::time::Duration::from_millis(100));
    assert!(running(marker), "the background {marker} runs");
    // SAFETY: interrupting the fabro this test started.
    unsafe { libc::kill(fabro.id() as i32, libc::SIGINT) };
    let status = fabro.wait().unwrap();
    assert_eq!(status.code(), Some(130));
    assert!(gone(marker), "the background {marker} outlived the cancellation");
}

#[test]
fn a_build_and_test_workflow_passes_unchanged_in_the_sandbox() {
    let workflow = r#"digraph build {
    allow_lints="failure_path"
    start [shape=Mdiamond]
    exit [shape=Msquare]
    write [shape=parallelogram, script="mkdir -p src && printf 'echo 2+2=$((2+2))\n' > src/calc.sh && printf '#!/bin/sh\nsh src/calc.sh > build.out\n' > build.sh && chmod +x build.sh"]
    build [shape=parallelogram, script="./build.sh && mktemp > /dev/null && echo built"]
    test [shape=parallelogram, script="grep -q '2+2=4' build.out && echo tests passed"]
    start -> write -> build -> test -> exit
}
"#;
    let setup = Setup::new(workflow);
    let ran = setup.run(&["--sandbox", "bwrap"]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    assert_eq!(setup.stdout_of("test"), "tests passed\n");
    assert_eq!(std::fs::read_to_string(setup.path("work/build.out")).unwrap(), "2+2=4\n");
    // The manifest keeps --sandbox for a resume.
    let manifest = std::fs::read_to_string(setup.path("run/manifest.json")).unwrap();
    assert!(manifest.contains("\"sandbox\": \"bwrap\""), "{manifest}");
}

#[test]
fn a_confined_cli_agent_sees_neither_the_home_nor_api_keys_unless_let_through() {
    let agent =
        r#"cat $HOME/.ssh/id_ed25519 2>/dev/null || echo no-secret; env | grep -c ANTHROPIC_API_KEY || true"#;
    for (user, (extra, keys_seen)) in TestUser::all()
        .into_iter()
        .flat_map(|user| [("", "0"), (", sandbox_env=\"ANTHROPIC_API_KEY\"", "1")].map(|case| (user, case)))
    {
        let workflow = format!(
            "digraph cli {{\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  code [shape=box, backend=\"cli\", \
             sandbox=\"bwrap\", prompt=\"Look around\", cli_agent=\"{}\"{extra}]\n  start -> code -> exit\n}}\n",
            agent.replace('"', "\\\"")
        );
        let setup = Setup::for_user(&workflow, user);
        let ran = setup.run(&[]);
        assert_eq!(ran.status.code(), Some(0), "{user:?}: {}", text(&ran.stderr));
        let mut response = String::new();
        std::fs::File::open(setup.path("run/stages/code/1/response.md"))
            .unwrap()
            .read_to_string(&mut response)
            .unwrap();
        assert!(response.contains("no-secret") && !response.contains(SECRET), "{response}");
        assert_eq!(response.lines().last(), Some(keys_seen), "{user:?} {extra}: {response}");
    }
}

#[test]
fn a_missing_bwrap_or_a_bad_sandbox_setting_stops_the_run_before_it_starts() {
    let setup = Setup::new(&command_workflow("", "echo ran > ran.txt"));
    let empty = tempfile::tempdir().unwrap();
    let ran = common::fabro_command(
        setup.dir.path(),
        &["run", "w.dot", "--workdir", "work", "--run-dir", "run", "--sandbox", "bwrap"],
    )
    .env("PATH", empty.path())
    .output()
    .unwrap();
    let err = text(&ran.stderr);
    assert_eq!(ran.status.code(), Some(2), "{err}");
    assert!(err.contains("`bwrap` is not installed") && err.contains("apt-get install bubblewrap"), "{err}");
    assert!(err.contains("--sandbox none"), "{err}");
    assert!(!setup.path("work/ran.txt").exists() && !setup.path("run").exists(), "nothing ran");

    let setup = Setup::new(&command_workflow("sandbox=\"bwrap\", sandbox_paths=\"/opt/sdk\",", "true"));
    let ran = setup.run(&[]);
    let err = text(&ran.stderr);
    assert_eq!(ran.status.code(), Some(2), "{err}");
    // Refused as fabro validate refuses it, at the attribute's value.
    assert!(err.contains("error[sandbox_paths] w.dot:5:62 node probe: sandbox_paths: `/opt/sdk` should be ro:/absolute/path"), "{err}");

    let setup = Setup::new(&command_workflow("sandbox=\"docker\",", "true"));
    let ran = setup.run(&[]);
    assert_eq!(ran.status.code(), Some(2), "{}", text(&ran.stderr));
}

#[test]
fn extra_paths_are_shown_read_only_or_writable() {
    let shared = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(shared.path().join("sdk.txt"), "sdk v1").unwrap();
    let cache = tempfile::tempdir_in("/var/tmp").unwrap();
    let script = format!(
        "cat {ro}/sdk.txt; echo; echo x > {ro}/new 2>/dev/null || echo ro-refused; echo cached > {rw}/entry && echo rw-ok",
        ro = shared.path().display(),
        rw = cache.path().display()
    );
    let attributes = format!(
        "sandbox=\"bwrap\", sandbox_paths=\"ro:{}, rw:{}\",",
        shared.path().display(),
        cache.path().display()
    );
    // /var/tmp is visible read-only anyway; these paths must be exactly as asked.
    let setup = Setup::new(&command_workflow(&attributes, &script));
    let ran = setup.run(&[]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let out = setup.stdout_of("probe");
    assert!(out.contains("sdk v1") && out.contains("ro-refused") && out.contains("rw-ok"), "{out}");
    assert_eq!(std::fs::read_to_string(cache.path().join("entry")).unwrap(), "cached\n");
}

#[test]
fn an_agents_shell_tool_runs_confined() {
    use common::llm_server::{anthropic_text, anthropic_tools, LlmServer};
    let command = "cat \"$HOME/.ssh/id_ed25519\" 2>/dev/null || echo no-secret; touch /etc/agent-was-here 2>/dev/null || echo read-only; env; echo ok > agent.txt";
    for user in TestUser::all() {
        let server = LlmServer::start(
            vec![
                anthropic_tools(
                    "Looking around.",
                    &[("t1", "shell", serde_json::json!({"command": command}))],
                ),
                anthropic_text("Done.", 100, 10),
            ],
            vec![],
        );
        let workflow = "digraph agent {\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  \
                        look [shape=box, prompt=\"Look around\", llm_model=\"claude-sonnet-4-5\"]\n  start -> look -> exit\n}\n";
        let setup = Setup::for_user(workflow, user);
        let ran = setup
            .fabro(&["run", "w.dot", "--workdir", "work", "--run-dir", "run", "-q", "--sandbox", "bwrap"])
            .env("ANTHROPIC_BASE_URL", server.url(""))
            .env("FABRO_LLM_MAX_RETRIES", "0")
            .output()
            .unwrap();
        assert_eq!(ran.status.code(), Some(0), "{user:?}: {}", text(&ran.stderr));
        let requests = server.requests();
        assert_eq!(requests.len(), 2);
        let result = requests[1].json()["messages"][2]["content"][0]["content"].as_str().unwrap().to_string();
        assert!(result.starts_with("exit code 0\nno-secret\nread-only\n"), "{user:?}: {result}");
        assert!(!result.contains(SECRET) && !result.contains(API_KEY), "{user:?}: {result}");
        assert_eq!(std::fs::read_to_string(setup.path("work/agent.txt")).unwrap(), "ok\n");
        assert!(!Path::new("/etc/agent-was-here").exists());
    }
}

/// Every regular file under `dir` (links not followed), with its text.
fn files_under(dir: &Path) -> Vec<(PathBuf, String)> {
    let mut found = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).unwrap().flatten() {
            let kind = entry.file_type().unwrap();
            if kind.is_dir() {
                pending.push(entry.path());
            } else if kind.is_file() {
                let text = String::from_utf8_lossy(&std::fs::read(entry.path()).unwrap()).into_owned();
                found.push((entry.path(), text));
            }
        }
    }
    found
}

#[test]
fn a_confined_stage_sees_no_host_process_nor_fabros_environment_and_holds_no_capability() {
    // Without its own PID namespace a stage run by root read /proc/<fabro>/environ (the API
    // keys) and reached the host's files through /proc/<pid>/root.
    let script = "echo processes $(ls -d /proc/[0-9]* | wc -l); \
                  cat /proc/[0-9]*/environ 2>/dev/null | tr '\\0' '\\n' | grep -c sk-ant- || true; \
                  grep CapEff /proc/self/status; \
                  for p in /proc/[0-9]*; do cat $p/root/home/.ssh/id_ed25519 2>/dev/null; done; echo done";
    for user in TestUser::all() {
        let setup = Setup::for_user(&command_workflow("sandbox=\"bwrap\",", script), user);
        let ran = setup.run(&[]);
        assert_eq!(ran.status.code(), Some(0), "{user:?}: {}", text(&ran.stderr));
        let out = setup.stdout_of("probe");
        let processes: usize =
            out.lines().find_map(|l| l.strip_prefix("processes ")).unwrap().trim().parse().unwrap();
        assert!(processes <= 6, "{user:?} sees only its own processes: {out}");
        assert!(out.lines().nth(1) == Some("0") && !out.contains(API_KEY), "{user:?}: {out}");
        assert!(out.contains("CapEff:\t0000000000000000"), "{user:?} holds no capability: {out}");
        assert!(!out.contains(SECRET), "{user:?}: {out}");
    }
}

#[test]
fn a_confined_stage_cannot_rewrite_the_run_directory_nor_project_memory() {
    // The run directory lies inside the work directory here, as the default `.fabro/runs` does.
    let script = "echo x > \"$FABRO_RUN_DIR/planted\" 2>/dev/null && echo WROTE-RUN-DIR; \
                  ln -sf SECRET_PATH \"$FABRO_RUN_DIR/stages/first/1/status.json\" 2>/dev/null && echo REPLACED; \
                  echo '{}' > \"$FABRO_RUN_DIR/checkpoint.json\" 2>/dev/null && echo WROTE-CHECKPOINT; \
                  mkdir -p .fabro/memory 2>/dev/null; echo x > .fabro/memory/planted.json 2>/dev/null && echo WROTE-MEMORY; \
                  echo x > .fabro/fabro.toml 2>/dev/null && echo WROTE-DOT-FABRO; \
                  echo mine > \"$FABRO_STAGE_DIR/own.txt\" && echo own-dir-writable; \
                  echo mine > work.txt && echo work-dir-writable";
    for user in TestUser::all() {
        let setup = Setup::for_user("", user);
        let script = script.replace("SECRET_PATH", &setup.path("home/.ssh/id_ed25519").display().to_string());
        let workflow = format!(
            "digraph d {{\n  allow_lints=\"failure_path\"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  \
             first [shape=parallelogram, sandbox=\"bwrap\", script=\"echo first\"]\n  \
             probe [shape=parallelogram, sandbox=\"bwrap\", script=\"{}\"]\n  start -> first -> probe -> exit\n}}\n",
            script.replace('\\', "\\\\").replace('"', "\\\"")
        );
        std::fs::write(setup.path("w.dot"), workflow).unwrap();
        let ran = setup
            .fabro(&["run", "w.dot", "--workdir", "work", "--run-dir", "work/records", "-q"])
            .output()
            .unwrap();
        assert_eq!(ran.status.code(), Some(0), "{user:?}: {}", text(&ran.stderr));
        let out = std::fs::read_to_string(setup.path("work/records/stages/probe/1/stdout.log")).unwrap();
        assert_eq!(out, "own-dir-writable\nwork-dir-writable\n", "{user:?}");
        assert!(!setup.path("work/records/planted").exists());
        assert!(!setup.path("work/.fabro/memory/planted.json").exists());
        let status =
            std::fs::symlink_metadata(setup.path("work/records/stages/first/1/status.json")).unwrap();
        assert!(status.is_file(), "{user:?}: the first stage's status.json is still its own");
    }
}

#[test]
fn links_and_fifos_a_stage_plants_in_its_own_directory_are_not_followed() {
    // The stage replaces its logs with links to a private key and to fabro's own environment,
    // its status file with a link to the key, and `attempts` with a link out; then it fails so
    // that fabro retries (and archives the first attempt). The second attempt leaves FIFOs.
    let script = "echo visible; d=\"$FABRO_STAGE_DIR\"; \
                  if [ -e \"$d/attempts\" ]; then rm -f \"$d/stdout.log\" \"$d/status.json\"; \
                  mkfifo \"$d/stdout.log\" \"$d/status.json\"; exit 1; fi; \
                  ln -sf SECRET_PATH \"$d/stdout.log\"; ln -sf /proc/self/environ \"$d/stderr.log\"; \
                  ln -sf SECRET_PATH \"$d/status.json\"; ln -s OUTSIDE \"$d/attempts\"; exit 1";
    for user in TestUser::all() {
        let setup = Setup::for_user("", user);
        let script = script
            .replace("SECRET_PATH", &setup.path("home/.ssh/id_ed25519").display().to_string())
            .replace("OUTSIDE", &setup.path("outside").display().to_string());
        std::fs::write(
            setup.path("w.dot"),
            command_workflow(
                "sandbox=\"bwrap\", max_retries=1, retry_policy=\"none\", timeout=\"20s\",",
                &script,
            ),
        )
        .unwrap();
        let started = std::time::Instant::now();
        let ran = setup.run(&[]);
        assert!(started.elapsed() < std::time::Duration::from_secs(15), "{user:?}: no hang on a FIFO");
        assert_eq!(ran.status.code(), Some(1), "{user:?}: {}", text(&ran.stderr));
        assert_eq!(
            std::fs::read_dir(setup.path("outside")).unwrap().count(),
            0,
            "{user:?}: nothing moved out"
        );
        let files = files_under(&setup.path("run"));
        assert!(!files.is_empty());
        for (path, text) in &files {
            assert!(!text.contains(SECRET), "{user:?}: the key reached {}", path.display());
            assert!(!text.contains(API_KEY), "{user:?}: fabro's environment reached {}", path.display());
        }
        let journal = std::fs::read_to_string(setup.path("run/journal.jsonl")).unwrap();
        assert!(journal.contains("visible"), "{user:?}: the stage's real output is kept: {journal}");
        // The readers of the run directory do not hang on the FIFOs either.
        for args in [&["logs", "run"][..], &["inspect", "run"], &["report", "run"]] {
            let started = std::time::Instant::now();
            let output = setup.fabro(args).output().unwrap();
            assert!(started.elapsed() < std::time::Duration::from_secs(10), "{user:?}: {args:?} hung");
            assert!(output.status.code().is_some(), "{user:?}: {args:?} {}", text(&output.stderr));
        }
    }
}

#[test]
fn hooks_a_confined_stage_plants_are_reported_on_resume_and_never_run() {
    // The workflow lies in the work directory, so a `fabro.toml` beside it is a file the
    // confined stage can write. The run starts without one, pauses at a gate, and the resume
    // must not take up the hook the stage planted (it would run unconfined, as the user).
    let planted =
        "[[hooks]]\nevent = \"run_complete\"\ntype = \"command\"\ncommand = \"echo pwned > MARKER\"\n";
    for user in TestUser::all() {
        let setup = Setup::for_user("", user);
        let marker = setup.path("outside/pwned");
        let plant = format!(
            "printf '%s' '{}' > fabro.toml",
            planted.replace("MARKER", &marker.display().to_string()).replace('\n', "\\n")
        );
        let workflow = format!(
            "digraph planted {{\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  \
             plant [shape=parallelogram, sandbox=\"bwrap\", script=\"{}\"]\n  \
             gate [shape=hexagon, label=\"Go on?\"]\n  start -> plant -> gate\n  gate -> exit [label=\"[Y] Yes\"]\n}}\n",
            plant.replace('\\', "\\\\").replace('"', "\\\"")
        );
        std::fs::write(setup.path("work/w.dot"), workflow).unwrap();
        user.own(setup.dir.path());
        let ran = setup
            .fabro(&["run", "work/w.dot", "--workdir", "work", "--run-dir", "run", "-q"])
            .output()
            .unwrap();
        assert_eq!(ran.status.code(), Some(3), "{user:?}: the gate pauses the run: {}", text(&ran.stderr));
        assert!(
            std::fs::read_to_string(setup.path("work/fabro.toml")).unwrap().contains("run_complete"),
            "{user:?}: the stage planted its hook"
        );
        let resumed = setup.fabro(&["resume", "run", "--auto-approve", "-q"]).output().unwrap();
        let stderr = text(&resumed.stderr);
        assert_eq!(resumed.status.code(), Some(0), "{user:?}: {stderr}");
        assert!(!marker.exists(), "{user:?}: the planted hook ran on resume");
        assert!(stderr.contains("fabro.toml changed since the run started"), "{user:?}: {stderr}");
        let saved = std::fs::read_to_string(setup.path("run/config-files.json")).unwrap();
        assert!(saved.contains("fabro.toml") && !saved.contains("run_complete"), "{user:?}: {saved}");
    }
}
