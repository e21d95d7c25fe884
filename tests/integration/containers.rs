//! Container sandboxes (`sandbox=podman`, `sandbox=docker`) through the binary, against a real
//! Podman: what a stage in the run's container can and cannot do, one container per run, its
//! removal at the run's end, after Ctrl-C and on resume, and the preflight.
//!
//! Podman, runc and busybox-static are installed by `scripts/test`; without them these tests
//! fail, they never skip. No registry is reached: the image is imported from a root file system
//! made of the static busybox. The tests start their own Podman API service on a socket of their
//! own, with the settings hosts like CI's need (cgroups in hybrid mode, no CAP_SYS_RESOURCE):
//! runc as the runtime, since crun refuses to start containers there, and ulimits at or below
//! the current ones. These live in the service's `containers.conf`, never in fabro.

use crate::common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::Mutex;
use std::time::{Duration, Instant};

/// The image the tests run in: a static busybox, imported once.
const IMAGE: &str = "localhost/fabro-test-busybox:1";

/// The service's configuration: runc, and ulimits the host allows.
const CONTAINERS_CONF: &str =
    "[containers]\ndefault_ulimits = [\"nofile=4096:4096\", \"nproc=4096:4096\"]\n\n\
                               [engine]\nruntime = \"runc\"\n";

/// The Podman API service of this test process: its directory (socket and configuration).
static SERVICE: Mutex<Option<PathBuf>> = Mutex::new(None);

/// `podman ARGS` with the tests' configuration.
fn podman(dir: &Path, args: &[&str]) -> Output {
    Command::new("podman")
        .args(args)
        .env("CONTAINERS_CONF", dir.join("containers.conf"))
        .stdin(Stdio::null())
        .output()
        .unwrap_or_else(|error| panic!("podman is not installed ({error}); ./scripts/test installs it"))
}

/// The address of a running Podman API service with the test image, started when none runs.
/// It stops by itself after a minute without requests.
fn service() -> String {
    let mut held = SERVICE.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
    let dir = held.get_or_insert_with(|| {
        let dir = std::env::temp_dir().join(format!("fabro-test-podman-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        std::fs::write(dir.join("containers.conf"), CONTAINERS_CONF).unwrap();
        assert!(Path::new("/usr/sbin/runc").exists(), "runc is not installed; ./scripts/test installs it");
        ensure_image(&dir);
        dir
    });
    let socket = dir.join("podman.sock");
    if std::os::unix::net::UnixStream::connect(&socket).is_err() {
        let _ = std::fs::remove_file(&socket);
        let mut child = Command::new("podman")
            .args(["system", "service", "--time=60"])
            .arg(format!("unix://{}", socket.display()))
            .env("CONTAINERS_CONF", dir.join("containers.conf"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("start podman system service");
        // It ends by itself once idle; reaped then.
        std::thread::spawn(move || child.wait());
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::os::unix::net::UnixStream::connect(&socket).is_err() {
            assert!(
                Instant::now() < deadline,
                "podman system service did not listen on {}",
                socket.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    format!("unix://{}", socket.display())
}

/// Imports [`IMAGE`] from a root file system of the static busybox, unless it is there.
fn ensure_image(dir: &Path) {
    if podman(dir, &["image", "exists", IMAGE]).status.success() {
        return;
    }
    let busybox = Path::new("/bin/busybox");
    assert!(busybox.exists(), "busybox-static is not installed; ./scripts/test installs it");
    let root = dir.join("rootfs");
    for sub in ["bin", "etc", "tmp", "root"] {
        std::fs::create_dir_all(root.join(sub)).unwrap();
    }
    std::fs::copy(busybox, root.join("bin/busybox")).unwrap();
    let list = Command::new(busybox).arg("--list").output().unwrap();
    for applet in String::from_utf8_lossy(&list.stdout).lines().filter(|name| *name != "busybox") {
        let _ = std::os::unix::fs::symlink("busybox", root.join("bin").join(applet));
    }
    std::fs::write(
        root.join("etc/passwd"),
        "root:x:0:0:root:/root:/bin/sh\nnobody:x:65534:65534:nobody:/:/bin/sh\n",
    )
    .unwrap();
    let tar = dir.join("rootfs.tar");
    let status = Command::new("tar").arg("-C").arg(&root).arg("-cf").arg(&tar).arg(".").status().unwrap();
    assert!(status.success());
    let imported = podman(dir, &["import", "--change", "ENV PATH=/bin", &tar.display().to_string(), IMAGE]);
    assert!(imported.status.success(), "podman import: {}", String::from_utf8_lossy(&imported.stderr));
}

/// An image with python3 and git: Debian's minbase, from the root file system `scripts/test`
/// makes with mmdebstrap (`FABRO_TEST_DEBIAN_ROOTFS`, else its place in the cache).
const DEBIAN_IMAGE: &str = "localhost/fabro-test-debian:bookworm-python3-git";

/// Imports [`DEBIAN_IMAGE`] unless it is there, and returns its name.
fn debian_image() -> &'static str {
    static IMPORTED: std::sync::OnceLock<()> = std::sync::OnceLock::new();
    IMPORTED.get_or_init(|| {
        service();
        let dir = SERVICE.lock().unwrap().clone().unwrap();
        if podman(&dir, &["image", "exists", DEBIAN_IMAGE]).status.success() {
            return;
        }
        let rootfs = std::env::var_os("FABRO_TEST_DEBIAN_ROOTFS").map(PathBuf::from).unwrap_or_else(|| {
            PathBuf::from(std::env::var_os("HOME").expect("HOME is set"))
                .join(".cache/fabro/test-images/debian-bookworm-minbase-python3-git.tar")
        });
        assert!(
            rootfs.exists(),
            "{} is missing: ./scripts/test makes it with `mmdebstrap --variant=minbase --include=python3,git bookworm`",
            rootfs.display()
        );
        let imported = podman(
            &dir,
            &[
                "import",
                "--change",
                "ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                &rootfs.display().to_string(),
                DEBIAN_IMAGE,
            ],
        );
        assert!(imported.status.success(), "podman import: {}", String::from_utf8_lossy(&imported.stderr));
    });
    DEBIAN_IMAGE
}

/// The containers on the test service labelled `label` (`key` or `key=value`).
fn containers_labelled(label: &str) -> Vec<String> {
    service();
    let dir = SERVICE.lock().unwrap().clone().unwrap();
    let listed = podman(&dir, &["ps", "-a", "-q", "--no-trunc", "--filter", &format!("label={label}")]);
    String::from_utf8_lossy(&listed.stdout).lines().map(str::to_string).collect()
}

/// A temporary directory with `w.dot`, a work directory `work/` and a fake home with a secret.
struct Setup {
    dir: tempfile::TempDir,
    host: String,
}

const SECRET: &str = "ssh-secret-5d1e";
const API_KEY: &str = "sk-ant-do-not-leak-3b7f";

impl Setup {
    fn new(workflow: &str) -> Setup {
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join("w.dot"), workflow).unwrap();
        std::fs::create_dir_all(dir.path().join("work")).unwrap();
        std::fs::create_dir_all(dir.path().join("home/.ssh")).unwrap();
        std::fs::write(dir.path().join("home/.ssh/id_ed25519"), SECRET).unwrap();
        Setup { dir, host: service() }
    }

    fn path(&self, name: &str) -> PathBuf {
        self.dir.path().join(name)
    }

    /// `fabro ARGS` against the test service, with the fake home and an API key around it.
    fn fabro(&self, args: &[&str]) -> Command {
        let mut command = common::fabro_command(self.dir.path(), args);
        command
            .env("HOME", self.path("home"))
            .env("ANTHROPIC_API_KEY", API_KEY)
            .env("CONTAINER_HOST", &self.host)
            .env_remove("DOCKER_HOST");
        command
    }

    /// `fabro run w.dot --workdir work --run-dir run -q ARGS`.
    fn run(&self, args: &[&str]) -> Output {
        let mut all = vec!["run", "w.dot", "--workdir", "work", "--run-dir", "run", "-q"];
        all.extend_from_slice(args);
        self.fabro(&all).output().unwrap()
    }

    fn log(&self, node: &str, name: &str) -> String {
        std::fs::read_to_string(self.path(&format!("run/stages/{node}/1/{name}"))).unwrap_or_default()
    }

    /// The containers of this setup's run (labelled with its run directory).
    fn containers(&self) -> Vec<String> {
        let run_dir = std::fs::canonicalize(self.path("run")).unwrap_or_else(|_| self.path("run"));
        let mut found = containers_labelled(&format!("fabro.run_dir={}", run_dir.display()));
        found.extend(containers_labelled(&format!("fabro.run_dir={}", self.path("run").display())));
        found.sort();
        found.dedup();
        found
    }
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A workflow of command stages `(id, attributes, script)` in a row, in [`IMAGE`] with podman.
fn workflow(graph: &str, stages: &[(&str, &str, &str)]) -> String {
    let mut out = format!(
        "digraph contained {{\n  allow_lints=\"failure_path\"\n  default_sandbox=podman\n  image=\"{IMAGE}\"\n  {graph}\n  \
         start [shape=Mdiamond]\n  exit [shape=Msquare]\n"
    );
    for (id, attributes, script) in stages {
        out.push_str(&format!(
            "  {id} [shape=parallelogram, {attributes} script=\"{}\"]\n",
            script.replace('\\', "\\\\").replace('"', "\\\"")
        ));
    }
    let chain: Vec<&str> =
        std::iter::once("start").chain(stages.iter().map(|(id, _, _)| *id)).chain(["exit"]).collect();
    out.push_str(&format!("  {}\n}}\n", chain.join(" -> ")));
    out
}

#[test]
fn a_command_stage_runs_in_the_image_and_sees_only_the_work_directory() {
    // Readable by everyone on the host: only the container keeps the stage out.
    let outside = tempfile::tempdir_in("/var/tmp").unwrap();
    std::fs::write(outside.path().join("host-file"), "host").unwrap();
    let script = format!(
        "echo busybox=$(readlink /bin/sh); \
         cat {0}/host-file 2>/dev/null || echo no-host-file; \
         cat \"$HOME/.ssh/id_ed25519\" 2>/dev/null || echo no-secret; \
         echo in=$(pwd); echo made > made.txt; \
         echo '{{\"outcome\":\"partial_success\",\"notes\":\"from the container\"}}' > \"$FABRO_STAGE_DIR/status.json\"; \
         echo tamper >> \"$FABRO_RUN_DIR/checkpoint.json\" 2>/dev/null || echo run-dir-read-only; \
         env",
        outside.path().display()
    );
    let setup = Setup::new(&workflow("", &[("probe", "", &script)]));
    // The work directory's owner is who the stage is: files it writes are not root's.
    let status = Command::new("chown").args(["65534:65534"]).arg(setup.path("work")).status().unwrap();
    assert!(status.success());
    let ran = setup.run(&[]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let out = setup.log("probe", "stdout.log");
    let work = std::fs::canonicalize(setup.path("work")).unwrap();
    for expected in [
        "busybox=busybox\n".to_string(),
        "no-host-file\n".into(),
        "no-secret\n".into(),
        format!("in={}\n", work.display()),
        "run-dir-read-only\n".into(),
    ] {
        assert!(out.contains(&expected), "{expected:?} not in:\n{out}");
    }
    assert!(!out.contains(API_KEY) && !out.contains(SECRET), "{out}");
    assert!(out.contains("FABRO_NODE_ID=probe\n"), "{out}");
    use std::os::unix::fs::MetadataExt;
    let made = std::fs::metadata(setup.path("work/made.txt")).unwrap();
    assert_eq!((made.uid(), made.gid()), (65534, 65534));
    // The stage directory was writable: its status file decided the outcome.
    let result: serde_json::Value =
        serde_json::from_str(&std::fs::read_to_string(setup.path("run/result.json")).unwrap()).unwrap();
    let probe =
        result["stages"].as_array().unwrap().iter().find(|stage| stage["node_id"] == "probe").unwrap();
    assert_eq!(probe["status"], "partial_success", "{probe}");
    assert!(setup.containers().is_empty(), "the run's container outlived it");
}

#[test]
fn one_container_serves_the_run_and_preserve_sandbox_keeps_it() {
    let setup = Setup::new(&workflow(
        "container_memory=\"256m\"\n  container_pids=64\n  container_cpus=\"0.5\"",
        &[("first", "", "hostname; echo one > shared.txt"), ("second", "", "hostname; cat shared.txt")],
    ));
    let ran = setup.run(&["--preserve-sandbox"]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let (first, second) = (setup.log("first", "stdout.log"), setup.log("second", "stdout.log"));
    assert_eq!(first.lines().next(), second.lines().next(), "two containers: {first:?} {second:?}");
    assert_eq!(second.lines().nth(1), Some("one"));
    let kept = setup.containers();
    assert_eq!(kept.len(), 1, "{kept:?}");
    // Each stage's status.json and the run's containers.json name it and its image's digest.
    let read = |name: &str| -> serde_json::Value {
        serde_json::from_str(&std::fs::read_to_string(setup.path(name)).unwrap()).unwrap()
    };
    for stage in ["first", "second"] {
        let container = &read(&format!("run/stages/{stage}/1/status.json"))["container"];
        assert_eq!(container["id"], kept[0].as_str(), "{container}");
        assert_eq!(container["image"], IMAGE);
        assert!(container["image_digest"].as_str().unwrap().starts_with("sha256:"), "{container}");
    }
    let recorded = read("run/containers.json");
    assert_eq!(recorded.as_array().map(Vec::len), Some(1), "{recorded}");
    assert_eq!(recorded[0]["id"], kept[0].as_str());
    // The manifest names it too, once the run has ended.
    assert_eq!(read("run/manifest.json")["containers"], recorded);
    let stderr = text(&ran.stderr);
    assert!(stderr.contains(&format!("sandbox kept: container {}", kept[0])), "{stderr}");
    let dir = SERVICE.lock().unwrap().clone().unwrap();
    let inspected = podman(
        &dir,
        &["inspect", "--format", "{{.HostConfig.Memory}} {{.HostConfig.PidsLimit}} {{.HostConfig.NanoCpus}} {{.HostConfig.NetworkMode}}", &kept[0]],
    );
    assert_eq!(text(&inspected.stdout).trim(), "268435456 64 500000000 none");
    podman(&dir, &["rm", "-f", &kept[0]]);
}

#[test]
fn the_network_is_off_unless_the_stage_asks_for_it() {
    // The image may also come from the stylesheet, and wins over the graph's.
    let setup = Setup::new(&workflow(
        &format!("model_stylesheet=\".net {{ image: {IMAGE} }}\""),
        &[
            ("off", "class=\"net\",", "ls /sys/class/net"),
            ("on", "class=\"net\", sandbox_network=true,", "ls /sys/class/net"),
        ],
    ));
    let source = std::fs::read_to_string(setup.path("w.dot")).unwrap();
    std::fs::write(
        setup.path("w.dot"),
        source.replace(&format!("image=\"{IMAGE}\""), "image=\"localhost/absent:1\""),
    )
    .unwrap();
    let ran = setup.run(&[]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    assert_eq!(setup.log("off", "stdout.log"), "lo\n");
    assert!(
        setup.log("on", "stdout.log").lines().any(|line| line != "lo"),
        "{}",
        setup.log("on", "stdout.log")
    );
}

#[test]
fn a_timeout_stops_the_command_in_the_container_and_what_it_left_in_the_background() {
    let setup = Setup::new(&workflow(
        "slow -> after [condition=\"outcome=fail\"]",
        &[
            ("background", "", "sleep 300 & echo started"),
            ("slow", "timeout=\"1s\",", "echo going; sleep 300"),
            ("after", "", "ps -o args | grep -c '^sleep 300' || true"),
        ],
    ));
    let started = Instant::now();
    let ran = setup.run(&[]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    assert!(started.elapsed() < Duration::from_secs(20), "took {:?}", started.elapsed());
    assert_eq!(setup.log("slow", "stdout.log"), "going\n");
    assert_eq!(setup.log("after", "stdout.log"), "0\n", "a sleep survived in the container");
    assert!(setup.containers().is_empty());
}

#[test]
fn ctrl_c_stops_the_stage_and_removes_the_container() {
    let setup = Setup::new(&workflow("", &[("long", "", "touch started; sleep 300")]));
    let mut child = setup
        .fabro(&["run", "w.dot", "--workdir", "work", "--run-dir", "run", "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    common::wait_for_file(&setup.path("work/started"), "the stage to start in its container");
    assert_eq!(setup.containers().len(), 1);
    let interrupted = Instant::now();
    // SAFETY: kill has no memory preconditions; the pid is our child's.
    unsafe { libc::kill(child.id() as i32, libc::SIGINT) };
    let status = child.wait().unwrap();
    let stopped = interrupted.elapsed();
    assert!(!status.success());
    assert!(setup.containers().is_empty(), "the container outlived the interrupted run");
    assert!(stopped < Duration::from_secs(5), "stopping took {stopped:?}");
}

#[test]
fn resume_removes_the_container_a_killed_run_left() {
    let setup = Setup::new(&workflow(
        "",
        &[("work", "", "if [ -f started ]; then echo again; else touch started; sleep 300; fi")],
    ));
    let mut child = setup
        .fabro(&["run", "w.dot", "--workdir", "work", "--run-dir", "run", "-q"])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    common::wait_for_file(&setup.path("work/started"), "the stage to start in its container");
    child.kill().unwrap();
    child.wait().unwrap();
    let left = setup.containers();
    assert_eq!(left.len(), 1, "a killed fabro cannot remove its container");
    let resumed = setup.fabro(&["resume", "run", "-q"]).output().unwrap();
    let stderr = text(&resumed.stderr);
    assert_eq!(resumed.status.code(), Some(0), "{stderr}");
    assert!(stderr.contains(&format!("removed container {}", left[0])), "{stderr}");
    // The stage ran again, in a new container (its second try of visit 1 has a directory of its own).
    let again = std::fs::read_to_string(setup.path("run/stages/work/1.2/stdout.log")).unwrap_or_default();
    assert_eq!(again, "again\n");
    assert!(setup.containers().is_empty());
}

#[test]
fn an_agents_shell_tool_runs_in_the_container() {
    use common::llm_server::{anthropic_text, anthropic_tools, LlmServer};
    let command = "cat \"$HOME/.ssh/id_ed25519\" 2>/dev/null || echo no-secret; readlink /bin/sh; env; echo ok > agent.txt";
    let server = LlmServer::start(
        vec![
            anthropic_tools("Looking around.", &[("t1", "shell", serde_json::json!({"command": command}))]),
            anthropic_text("Done.", 100, 10),
        ],
        vec![],
    );
    let setup = Setup::new(&format!(
        "digraph agent {{\n  image=\"{IMAGE}\"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  \
         look [shape=box, prompt=\"Look around\", llm_model=\"claude-sonnet-4-5\"]\n  start -> look -> exit\n}}\n"
    ));
    let ran = setup
        .fabro(&["run", "w.dot", "--workdir", "work", "--run-dir", "run", "-q", "--sandbox", "podman"])
        .env("ANTHROPIC_BASE_URL", server.url(""))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .output()
        .unwrap();
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let requests = server.requests();
    assert_eq!(requests.len(), 2);
    let result = requests[1].json()["messages"][2]["content"][0]["content"].as_str().unwrap().to_string();
    assert!(result.starts_with("exit code 0\nno-secret\nbusybox\n"), "{result}");
    assert!(!result.contains(SECRET) && !result.contains(API_KEY), "{result}");
    assert_eq!(std::fs::read_to_string(setup.path("work/agent.txt")).unwrap(), "ok\n");
    assert!(setup.containers().is_empty());
}

#[test]
fn no_service_no_image_or_a_bad_limit_stops_the_run_before_it_starts() {
    let setup = Setup::new(&workflow("", &[("probe", "", "touch ran")]));
    let ran = setup
        .fabro(&["run", "w.dot", "--workdir", "work", "-q"])
        .env("CONTAINER_HOST", "unix:///nonexistent/podman.sock")
        .output()
        .unwrap();
    let err = text(&ran.stderr);
    assert_eq!(ran.status.code(), Some(2), "{err}");
    assert!(
        err.contains("unix:///nonexistent/podman.sock does not answer")
            && err.contains("apt-get install podman"),
        "{err}"
    );
    assert!(err.contains("the run did not start") && !setup.path("work/ran").exists(), "{err}");

    let source = std::fs::read_to_string(setup.path("w.dot")).unwrap();
    std::fs::write(setup.path("w.dot"), source.replace(&format!("image=\"{IMAGE}\""), "")).unwrap();
    let ran = setup.run(&[]);
    let err = text(&ran.stderr);
    assert_eq!(ran.status.code(), Some(2), "{err}");
    assert!(err.contains("stage `probe` runs in a podman container but names no image"), "{err}");

    std::fs::write(setup.path("w.dot"), source.replace(IMAGE, "localhost/fabro-no-such-image:1")).unwrap();
    let ran = setup.run(&[]);
    let err = text(&ran.stderr);
    assert_eq!(ran.status.code(), Some(2), "{err}");
    assert!(
        err.contains("image `localhost/fabro-no-such-image:1` is not on")
            && err.contains("could not be pulled"),
        "{err}"
    );

    std::fs::write(
        setup.path("w.dot"),
        source.replace("default_sandbox=podman", "default_sandbox=podman\n  container_memory=\"lots\""),
    )
    .unwrap();
    let ran = setup.run(&[]);
    let err = text(&ran.stderr);
    assert_eq!(ran.status.code(), Some(2), "{err}");
    assert!(err.contains("container_memory: `lots` is not a memory size"), "{err}");
    assert!(!setup.path("work/ran").exists());
}

#[test]
fn a_cli_agent_runs_in_the_container_without_api_keys_unless_let_through() {
    let agent = "readlink /bin/sh; cat $HOME/.ssh/id_ed25519 2>/dev/null || echo no-secret; env | grep -c ANTHROPIC_API_KEY || true";
    for (extra, keys_seen) in [("", "0"), (", sandbox_env=\"ANTHROPIC_API_KEY\"", "1")] {
        let setup = Setup::new(&format!(
            "digraph cli {{\n  image=\"{IMAGE}\"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  \
             code [shape=box, backend=\"cli\", sandbox=\"podman\", prompt=\"Look around\", cli_agent=\"{}\"{extra}]\n  \
             start -> code -> exit\n}}\n",
            agent.replace('"', "\\\"")
        ));
        let ran = setup.run(&[]);
        assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
        let response = std::fs::read_to_string(setup.path("run/stages/code/1/response.md")).unwrap();
        assert!(response.starts_with("busybox\nno-secret\n"), "{response}");
        assert_eq!(response.lines().last(), Some(keys_seen), "{extra}: {response}");
        let status: serde_json::Value = serde_json::from_str(
            &std::fs::read_to_string(setup.path("run/stages/code/1/status.json")).unwrap(),
        )
        .unwrap();
        assert_eq!(status["container"]["image"], IMAGE, "{status}");
        assert!(setup.containers().is_empty());
    }
}

/// A stdio MCP server in busybox's `sh`: one tool, `where`, that says where it runs.
const SH_MCP_SERVER: &str = r#"while IFS= read -r line; do
  id=$(echo "$line" | sed -n 's/.*"id":\([0-9]*\).*/\1/p')
  version=$(echo "$line" | sed -n 's/.*"protocolVersion":"\([^"]*\)".*/\1/p')
  case "$line" in
    *'"method":"initialize"'*) echo '{"jsonrpc":"2.0","id":'$id',"result":{"protocolVersion":"'$version'","capabilities":{"tools":{}},"serverInfo":{"name":"box","version":"1"}}}';;
    *'"method":"tools/list"'*) echo '{"jsonrpc":"2.0","id":'$id',"result":{"tools":[{"name":"where","description":"Where the server runs","inputSchema":{"type":"object","properties":{}}}]}}';;
    *'"method":"tools/call"'*) echo '{"jsonrpc":"2.0","id":'$id',"result":{"content":[{"type":"text","text":"sh='$(readlink /bin/sh)' uid='$(id -u)'"}]}}';;
  esac
done
"#;

#[test]
fn a_stdio_mcp_server_runs_in_the_container_of_the_stage_that_wants_it() {
    use common::llm_server::{openai_text, openai_tools, tool_results, LlmServer};
    let server = LlmServer::start(
        vec![openai_tools(&[("c1", "mcp__box__where", serde_json::json!({}))]), openai_text("done", 10, 2)],
        vec![],
    );
    let setup = Setup::new(&format!(
        "digraph mcp {{\n  image=\"{IMAGE}\"\n  start [shape=Mdiamond]\n  exit [shape=Msquare]\n  \
         work [shape=box, prompt=\"Where does the server run?\", sandbox=\"podman\"]\n  start -> work -> exit\n}}\n"
    ));
    std::fs::write(setup.path("work/server.sh"), SH_MCP_SERVER).unwrap();
    std::fs::write(
        setup.path("config.toml"),
        format!(
            "[mcp_servers.box]\ntype = \"stdio\"\ncommand = [\"sh\", {:?}]\n",
            setup.path("work/server.sh")
        ),
    )
    .unwrap();
    let ran = setup
        .fabro(&["run", "w.dot", "--workdir", "work", "--run-dir", "run", "-q"])
        .env("FABRO_CONFIG", setup.path("config.toml"))
        .env("FABRO_LLM_BASE_URL", server.url("/v1"))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .env("FABRO_LLM_MODEL", "local-model")
        .output()
        .unwrap();
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let results = tool_results(&server.main_requests()[1].json());
    assert_eq!(results, ["sh=busybox uid=0"], "{results:?}");
    assert!(setup.containers().is_empty(), "the server's container outlived the run");
}

#[test]
fn a_devcontainer_is_built_once_and_gives_its_environment_user_and_post_create_command() {
    let setup = Setup::new(&workflow(
        "devcontainer=true",
        &[(
            "probe",
            "",
            "cat /built.txt /tmp/post.txt; echo greeting=$GREETING user=$(id -u); touch made.txt",
        )],
    ));
    // A Dockerfile unique to this test, so that its image is built here (then cached by digest).
    let nonce = format!("{:?}", std::time::SystemTime::now());
    let source = std::fs::read_to_string(setup.path("w.dot")).unwrap();
    std::fs::write(setup.path("w.dot"), source.replace(&format!("  image=\"{IMAGE}\"\n"), "")).unwrap();
    std::fs::create_dir_all(setup.path("work/.devcontainer")).unwrap();
    std::fs::write(
        setup.path("work/.devcontainer/Dockerfile"),
        format!("FROM {IMAGE}\nRUN echo built > /built.txt\n# {nonce}\n"),
    )
    .unwrap();
    std::fs::write(
        setup.path("work/.devcontainer/devcontainer.json"),
        r#"{
  // as editors write it: comments and trailing commas
  "build": { "dockerfile": "Dockerfile", "context": "." },
  "containerEnv": { "GREETING": "hello" },
  "remoteUser": "nobody",
  "postCreateCommand": "echo post > /tmp/post.txt",
}"#,
    )
    .unwrap();
    let status = Command::new("chmod").args(["777"]).arg(setup.path("work")).status().unwrap();
    assert!(status.success());
    let ran = setup.run(&[]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    assert_eq!(setup.log("probe", "stdout.log"), "built\npost\ngreeting=hello user=65534\n");
    let events = std::fs::read_to_string(setup.path("run/events.jsonl")).unwrap();
    let built: Vec<serde_json::Value> = events
        .lines()
        .map(|line| serde_json::from_str::<serde_json::Value>(line).unwrap())
        .filter(|event| event["event"] == "container.image_built")
        .collect();
    assert_eq!(built.len(), 1, "{events}");
    assert!(built[0]["image"].as_str().unwrap().starts_with("localhost/fabro-devcontainer:"), "{}", built[0]);
    let log = std::fs::read_to_string(setup.path("run").join(built[0]["log"].as_str().unwrap())).unwrap();
    assert!(log.contains("echo built"), "{log}");
    assert!(setup.containers().is_empty());

    // The same Dockerfile again: the image is the service's already.
    std::fs::remove_dir_all(setup.path("run")).unwrap();
    let ran = setup.run(&[]);
    assert_eq!(ran.status.code(), Some(0), "{}", text(&ran.stderr));
    let events = std::fs::read_to_string(setup.path("run/events.jsonl")).unwrap();
    assert!(!events.contains("container.image_built"), "{events}");
    assert_eq!(setup.log("probe", "stdout.log"), "built\npost\ngreeting=hello user=65534\n");
    // The image is this test's alone (its Dockerfile has a nonce): not left to pile up.
    let dir = SERVICE.lock().unwrap().clone().unwrap();
    podman(&dir, &["rmi", "-f", built[0]["image"].as_str().unwrap()]);
}

#[test]
fn a_toolchain_image_runs_python_stages_and_git_as_the_work_directorys_owner() {
    let image = debian_image();
    let setup = Setup::new(&format!(
        "digraph toolchain {{\n  allow_lints=\"failure_path\"\n  default_sandbox=podman\n  image=\"{image}\"\n  \
         start [shape=Mdiamond]\n  exit [shape=Msquare]\n  \
         py [shape=parallelogram, language=python, script=\"import sys, os; print(sys.version_info[0], os.getuid()); open('py.txt', 'w').write('from python')\"]\n  \
         commit [shape=parallelogram, script=\"git init -q && git add py.txt && git -c user.name=fabro -c user.email=fabro@example.com commit -qm python && git log --format=%s\"]\n  \
         start -> py -> commit -> exit\n}}\n"
    ));
    let status = Command::new("chown").args(["65534:65534"]).arg(setup.path("work")).status().unwrap();
    assert!(status.success());
    let ran = setup.run(&[]);
    assert_eq!(ran.status.code(), Some(0), "{}{}", text(&ran.stderr), setup.log("commit", "stderr.log"));
    assert_eq!(setup.log("py", "stdout.log"), "3 65534\n");
    assert_eq!(setup.log("commit", "stdout.log"), "python\n");
    use std::os::unix::fs::MetadataExt;
    for written in ["work/py.txt", "work/.git/HEAD"] {
        let meta = std::fs::metadata(setup.path(written)).unwrap();
        assert_eq!((meta.uid(), meta.gid()), (65534, 65534), "{written}");
    }
    assert!(setup.containers().is_empty());
}
