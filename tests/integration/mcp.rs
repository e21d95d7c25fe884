//! MCP servers through the binary: the real filesystem server from the npm registry (stdio),
//! a small Streamable HTTP server on loopback with a header from an allowed variable, a server
//! that fails its handshake, and the `mcp_servers` attribute that narrows what a stage gets.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use common::llm_server::{openai_text, openai_tools, LlmServer, Request};
use common::Test;
use serde_json::{json, Value};

/// `mcp-server-filesystem`, installed by `scripts/test` (npm) into `FABRO_TEST_NPM_DIR`.
fn filesystem_server() -> PathBuf {
    let dir = std::env::var_os("FABRO_TEST_NPM_DIR").map(PathBuf::from).unwrap_or_else(|| {
        PathBuf::from(std::env::var_os("HOME").expect("HOME is set")).join(".cache/fabro/test-npm")
    });
    let server = dir.join("node_modules/.bin/mcp-server-filesystem");
    assert!(
        server.exists(),
        "{} is missing: the MCP tests need the npm package @modelcontextprotocol/server-filesystem; install it \
         with `npm install --prefix {} @modelcontextprotocol/server-filesystem@2026.8.31` (scripts/test does)",
        server.display(),
        dir.display()
    );
    server
}

/// A run of `workflow` against the loopback provider with `config` as the fabro config file.
fn run(server: &LlmServer, workflow: &str, config: &str) -> Test {
    Test::new()
        .workflow(workflow)
        .file("config.toml", config)
        .file("work/notes.txt", "remember the milk\n")
        .env("FABRO_CONFIG", "config.toml")
        .env("FABRO_LLM_BASE_URL", &server.url("/v1"))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .env("FABRO_LLM_MODEL", "local-model")
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"])
}

fn tool_names(request: &Request) -> Vec<String> {
    request.json()["tools"]
        .as_array()
        .map(|tools| {
            tools.iter().filter_map(|t| t["function"]["name"].as_str().map(str::to_string)).collect()
        })
        .unwrap_or_default()
}

/// The content of the tool results in a request to the provider.
fn tool_results(request: &Request) -> Vec<String> {
    request.json()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap_or_default().to_string())
        .collect()
}

fn events(run: &Path) -> Vec<Value> {
    std::fs::read_to_string(run.join("events.jsonl"))
        .unwrap()
        .lines()
        .map(|line| serde_json::from_str(line).unwrap())
        .collect()
}

/// The `mcp.server_started` events of a run.
fn servers_started(run: &Path) -> Vec<Value> {
    events(run).into_iter().filter(|e| e["event"] == "mcp.server_started").collect()
}

/// The entry `files`: the filesystem server allowed into `dirs`, with `extra` lines.
fn filesystem_entry(extra: &str, dirs: &[&str]) -> String {
    let dirs: Vec<String> = dirs.iter().map(|dir| format!("{dir:?}")).collect();
    format!(
        "[mcp_servers.files]\ntype = \"stdio\"\n{extra}command = [{:?}, {}]\n",
        filesystem_server().display().to_string(),
        dirs.join(", ")
    )
}

fn filesystem_config() -> String {
    filesystem_entry("", &["."])
}

const ONE_AGENT: &str = r#"digraph mcp {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    work [shape=box, prompt="Read notes.txt and write done.txt"]
    start -> work -> exit
}"#;

#[test]
fn the_filesystem_server_is_listed_and_its_tools_are_called() {
    let server = LlmServer::start(
        vec![
            openai_tools(&[("c1", "mcp__files__read_text_file", json!({"path": "notes.txt"}))]),
            openai_tools(&[(
                "c2",
                "mcp__files__write_file",
                json!({"path": "done.txt", "content": "milk: yes\n"}),
            )]),
            openai_text("Read the notes and wrote done.txt.", 50, 5),
            openai_text("Checked.", 50, 5),
        ],
        vec![],
    );
    let workflow =
        ONE_AGENT.replace("work -> exit", "work -> again -> exit\n    again [shape=box, prompt=\"Check\"]");
    let ran = run(&server, &workflow, &filesystem_config()).status(0).run();
    let work = ran.dir.path().join("work");
    assert_eq!(std::fs::read_to_string(work.join("done.txt")).unwrap(), "milk: yes\n");

    let requests = server.main_requests();
    let names = tool_names(&requests[0]);
    for tool in [
        "read_file",
        "shell",
        "mcp__files__read_text_file",
        "mcp__files__write_file",
        "mcp__files__list_directory",
    ] {
        assert!(names.contains(&tool.to_string()), "{tool} not offered: {names:?}");
    }
    let described = requests[0].json()["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|t| t["function"]["name"] == "mcp__files__read_text_file")
        .cloned()
        .unwrap();
    assert!(described["function"]["description"].as_str().unwrap().starts_with("[MCP server `files`]"));
    assert_eq!(described["function"]["parameters"]["type"], "object");
    assert_eq!(tool_results(&requests[1]), vec!["remember the milk\n".to_string()]);

    let run_dir = ran.dir.path().join("run");
    let started = servers_started(&run_dir);
    // Started once for the run, though both stages got its tools.
    assert_eq!(started.len(), 1, "{started:?}");
    assert_eq!(started[0]["server"], "files");
    assert!(tool_names(&requests[3]).contains(&"mcp__files__read_text_file".to_string()));
    let transcript = std::fs::read_to_string(run_dir.join("stages/work/1/transcript.jsonl")).unwrap();
    assert!(
        transcript.contains("\"mcp__files__read_text_file\"") && transcript.contains("remember the milk")
    );
}

#[test]
fn mcp_servers_narrows_the_tools_and_an_empty_list_starts_none() {
    let workflow = r#"digraph mcp {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        plain [shape=box, prompt="No MCP here", mcp_servers=""]
        files [shape=box, prompt="Files only", mcp_servers="files"]
        start -> plain -> files -> exit
    }"#;
    // `broken` would fail the stage that starts it: neither stage does.
    let config = filesystem_config() + "[mcp_servers.broken]\ntype = \"stdio\"\ncommand = [\"false\"]\n";
    let server =
        LlmServer::start(vec![openai_text("nothing to do", 10, 2), openai_text("done", 10, 2)], vec![]);
    let ran = run(&server, workflow, &config).status(0).run();
    let requests = server.main_requests();
    assert!(
        tool_names(&requests[0]).iter().all(|name| !name.starts_with("mcp__")),
        "{:?}",
        tool_names(&requests[0])
    );
    let names = tool_names(&requests[1]);
    assert!(names.iter().any(|name| name.starts_with("mcp__files__")));
    assert!(names.iter().all(|name| !name.starts_with("mcp__broken__")));
    let run_dir = ran.dir.path().join("run");
    let started = servers_started(&run_dir);
    assert_eq!(started.len(), 1);
    assert_eq!(started[0]["node_id"], "files");
}

#[test]
fn a_server_that_fails_its_handshake_fails_its_stage_with_its_stderr() {
    let workflow = r#"digraph mcp {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        needs [shape=box, prompt="Use the broken server", mcp_servers="broken"]
        other [shape=box, prompt="Go on without it", mcp_servers=""]
        start -> needs
        needs -> other [condition="outcome=fail"]
        needs -> exit
        other -> exit
    }"#;
    let config = "[mcp_servers.broken]\ntype = \"stdio\"\ncommand = [\"sh\", \"-c\", \"echo 'fatal: no database at ./db' >&2; exit 3\"]\n";
    let server = LlmServer::start(vec![openai_text("went on", 10, 2)], vec![]);
    let ran = run(&server, workflow, config).status(0).run();
    let status: Value = serde_json::from_str(
        &std::fs::read_to_string(ran.dir.path().join("run/stages/needs/1/status.json")).unwrap(),
    )
    .unwrap();
    assert_eq!(status["outcome"], "fail");
    let reason = status["failure_reason"].as_str().unwrap();
    assert!(reason.contains("the MCP server `broken` failed its handshake"), "{reason}");
    assert!(reason.contains("fatal: no database at ./db"), "{reason}");
    // Only `other` called the model.
    assert_eq!(server.main_requests().len(), 1);
}

#[test]
fn a_stage_naming_an_unconfigured_server_or_a_header_with_a_forbidden_variable_stops_before_the_run() {
    let workflow = ONE_AGENT.replace("prompt=", "mcp_servers=\"nope\", prompt=");
    let server = LlmServer::start(vec![], vec![]);
    run(&server, &workflow, &filesystem_config())
        .status(2)
        .stderr_contains(
            "stage `work` has mcp_servers naming `nope`, which is not configured (configured: files)",
        )
        .run();
    let config = "[mcp_servers.api]\ntype = \"http\"\nurl = \"http://127.0.0.1:9/mcp\"\nheaders = { Authorization = \"Bearer $HOME\" }\n";
    run(&server, ONE_AGENT, config)
        .status(2)
        .stderr_contains("header `Authorization` uses $HOME, which is not in allowed_env_vars")
        .run();
    assert!(server.requests().is_empty());
}

#[test]
fn simulated_and_dry_runs_refuse_what_a_live_run_refuses_of_the_mcp_configuration() {
    let workflow = ONE_AGENT.replace("prompt=", "mcp_servers=\"nope\", prompt=");
    for mode in ["--simulate", "--dry-run"] {
        Test::new()
            .workflow(&workflow)
            .args(["run", "workflow.dot", mode])
            .status(2)
            .stderr_contains(
                "stage `work` has mcp_servers naming `nope`, which is not configured (no MCP server is)",
            )
            .stderr_contains("the run did not start")
            .run();
        let ran = Test::new()
            .workflow(ONE_AGENT)
            .file("mcp.toml", "mcp_servers = [")
            .args(["run", "workflow.dot", mode, "--mcp-config", "mcp.toml", "--run-dir", "run"])
            .status(2)
            .stderr_contains("--mcp-config: the MCP config file mcp.toml is invalid")
            .run();
        assert!(!ran.dir.path().join("run").exists(), "a refused run left a run directory");
        // A server the file configures is taken, and starts only in a live run.
        Test::new()
            .workflow(&workflow.replace("nope", "files"))
            .file("mcp.toml", "[mcp_servers.files]\ntype = \"stdio\"\ncommand = [\"no-such-server\"]\n")
            .args(["run", "workflow.dot", mode, "--mcp-config", "mcp.toml", "-q"])
            .status(0)
            .run();
    }
}

/// A Streamable HTTP MCP server with one tool, `echo`, answering in plain JSON; it keeps the
/// Authorization header of every request.
struct HttpMcpServer {
    url: String,
    authorizations: Arc<Mutex<Vec<String>>>,
}

impl HttpMcpServer {
    fn start() -> HttpMcpServer {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let url = format!("http://{}/mcp", listener.local_addr().unwrap());
        let authorizations = Arc::new(Mutex::new(Vec::new()));
        let seen = authorizations.clone();
        std::thread::spawn(move || {
            for stream in listener.incoming().flatten() {
                let seen = seen.clone();
                std::thread::spawn(move || serve_connection(stream, &seen));
            }
        });
        HttpMcpServer { url, authorizations }
    }
}

fn serve_connection(stream: std::net::TcpStream, seen: &Mutex<Vec<String>>) {
    let mut reader = BufReader::new(stream.try_clone().unwrap());
    let mut stream = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
            return;
        }
        let method = request_line.split_whitespace().next().unwrap_or("").to_string();
        let mut length = 0;
        loop {
            let mut line = String::new();
            reader.read_line(&mut line).unwrap();
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let (name, value) = line.split_once(':').unwrap();
            match name.to_ascii_lowercase().as_str() {
                "content-length" => length = value.trim().parse().unwrap(),
                "authorization" => seen.lock().unwrap().push(value.trim().to_string()),
                _ => {}
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let reply = |stream: &mut std::net::TcpStream, status: &str, body: &str| {
            let head = format!(
                "HTTP/1.1 {status}\r\ncontent-type: application/json\r\nmcp-session-id: s1\r\ncontent-length: {}\r\n\r\n",
                body.len()
            );
            stream.write_all(head.as_bytes()).unwrap();
            stream.write_all(body.as_bytes()).unwrap();
        };
        if method != "POST" {
            reply(&mut stream, "405 Method Not Allowed", "");
            continue;
        }
        let message: Value = serde_json::from_slice(&body).unwrap();
        let id = message["id"].clone();
        let result = match message["method"].as_str().unwrap_or("") {
            "initialize" => json!({
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "echo-server", "version": "1.0.0"}
            }),
            "tools/list" => json!({"tools": [{
                "name": "echo",
                "description": "Echoes its text and the authorization it was sent.",
                "inputSchema": {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}
            }]}),
            "tools/call" => {
                let auth = seen.lock().unwrap().last().cloned().unwrap_or_default();
                let text = message["params"]["arguments"]["text"].as_str().unwrap_or("").to_string();
                json!({"content": [{"type": "text", "text": format!("echo: {text} (sent {auth})")}]})
            }
            _ => {
                reply(&mut stream, "202 Accepted", "");
                continue;
            }
        };
        reply(&mut stream, "200 OK", &json!({"jsonrpc": "2.0", "id": id, "result": result}).to_string());
    }
}

#[test]
fn an_http_server_gets_a_header_from_an_allowed_variable_and_the_key_is_redacted() {
    let mcp = HttpMcpServer::start();
    let config = format!(
        "[mcp_servers.echo]\ntype = \"http\"\nurl = \"{}\"\nheaders = {{ Authorization = \"Bearer ${{ECHO_TOKEN}}\" }}\n\
         allowed_env_vars = [\"ECHO_TOKEN\"]\ntool_timeout_secs = 5\n",
        mcp.url
    );
    let server = LlmServer::start(
        vec![openai_tools(&[("c1", "mcp__echo__echo", json!({"text": "hi"}))]), openai_text("echoed", 10, 2)],
        vec![],
    );
    let ran = run(&server, ONE_AGENT, &config).env("ECHO_TOKEN", "tok-0123456789abcdef").status(0).run();
    let authorizations = mcp.authorizations.lock().unwrap().clone();
    assert!(!authorizations.is_empty());
    assert!(authorizations.iter().all(|auth| auth == "Bearer tok-0123456789abcdef"), "{authorizations:?}");
    let requests = server.main_requests();
    assert_eq!(tool_results(&requests[1]), vec!["echo: hi (sent [REDACTED])".to_string()]);
    let transcript =
        std::fs::read_to_string(ran.dir.path().join("run/stages/work/1/transcript.jsonl")).unwrap();
    assert!(transcript.contains("echo: hi (sent [REDACTED])"));
    assert!(!transcript.contains("tok-0123456789abcdef"));
}

#[test]
fn mcp_config_adds_servers_and_the_manifest_keeps_it() {
    let server = LlmServer::start(
        vec![
            openai_tools(&[("c1", "mcp__more__list_directory", json!({"path": "."}))]),
            openai_text("listed", 10, 2),
        ],
        vec![],
    );
    let more = filesystem_config().replace("[mcp_servers.files]", "[mcp_servers.more]");
    let ran = run(&server, ONE_AGENT, "")
        .file("mcp.toml", &more)
        .args(["--mcp-config", "mcp.toml"])
        .status(0)
        .run();
    let requests = server.main_requests();
    assert!(tool_results(&requests[1])[0].contains("[FILE] notes.txt"), "{:?}", tool_results(&requests[1]));
    let manifest = std::fs::read_to_string(ran.dir.path().join("run/manifest.json")).unwrap();
    assert!(manifest.contains("\"mcp_config\""), "{manifest}");

    let empty = run(&server, ONE_AGENT, "").file("empty.toml", "").args(["--mcp-config", "empty.toml"]);
    empty.status(2).stderr_contains("has no [mcp_servers.NAME] entry").run();
}

#[test]
fn a_stdio_server_runs_in_the_sandbox_of_the_stage_that_wants_it() {
    // The same server entry for an unconfined stage and a bwrap one: a process for each.
    let server = LlmServer::start(
        vec![
            openai_tools(&[(
                "c1",
                "mcp__files__write_file",
                json!({"path": "../outside/open.txt", "content": "x"}),
            )]),
            openai_text("wrote it", 10, 2),
            openai_tools(&[
                ("c2", "mcp__files__read_text_file", json!({"path": "../outside/secret.txt"})),
                ("c3", "mcp__files__write_file", json!({"path": "../outside/boxed.txt", "content": "x"})),
                ("c4", "mcp__files__write_file", json!({"path": "boxed.txt", "content": "inside"})),
            ]),
            openai_text("could not write outside", 10, 2),
        ],
        vec![],
    );
    let test = run(&server, "", "");
    let outside = test.path("outside");
    let npm_dir = filesystem_server()
        .parent()
        .and_then(|bin| bin.parent())
        .and_then(|modules| modules.parent())
        .unwrap()
        .to_path_buf();
    let workflow = format!(
        r#"digraph mcp {{
    start [shape=Mdiamond]
    exit [shape=Msquare]
    open [shape=box, prompt="Write outside"]
    boxed [shape=box, prompt="Try again", sandbox="bwrap", sandbox_paths="ro:{outside}, ro:{npm}"]
    start -> open -> boxed -> exit
}}"#,
        outside = outside.display(),
        npm = npm_dir.display()
    );
    // The server may use the work directory and the directory beside it.
    let config = filesystem_entry("", &[".", &outside.display().to_string()]);
    let ran = test
        .workflow(&workflow)
        .file("config.toml", &config)
        .file("outside/secret.txt", "the plans\n")
        .status(0)
        .run();
    let root = ran.dir.path();
    assert_eq!(std::fs::read_to_string(root.join("outside/open.txt")).unwrap(), "x", "unconfined, it writes");
    assert!(!root.join("outside/boxed.txt").exists(), "confined, the path is read-only");
    assert_eq!(std::fs::read_to_string(root.join("work/boxed.txt")).unwrap(), "inside");

    let results = tool_results(&server.main_requests()[3]);
    assert_eq!(results[0], "the plans\n", "{results:?}");
    assert!(results[1].contains("read-only file system"), "{results:?}");
    assert!(results[2].contains("Successfully wrote"), "{results:?}");

    let started = servers_started(&root.join("run"));
    let placed: Vec<(&str, &str)> =
        started.iter().map(|e| (e["node_id"].as_str().unwrap(), e["sandbox"].as_str().unwrap())).collect();
    assert_eq!(placed, vec![("open", "none"), ("boxed", "bwrap")]);
}

#[test]
fn a_stdio_server_with_sandbox_none_runs_on_the_host_for_a_confined_stage() {
    let server = LlmServer::start(
        vec![
            openai_tools(&[(
                "c1",
                "mcp__files__write_file",
                json!({"path": "../outside/host.txt", "content": "x"}),
            )]),
            openai_text("wrote it", 10, 2),
        ],
        vec![],
    );
    let test = run(&server, "", "");
    let outside = test.path("outside");
    let workflow = format!(
        r#"digraph mcp {{
    start [shape=Mdiamond]
    exit [shape=Msquare]
    boxed [shape=box, prompt="Write outside", sandbox="bwrap", sandbox_paths="ro:{}"]
    start -> boxed -> exit
}}"#,
        outside.display()
    );
    let config = filesystem_entry("sandbox = \"none\"\n", &[".", &outside.display().to_string()]);
    let ran = test.workflow(&workflow).file("config.toml", &config).file("outside/.keep", "").status(0).run();
    assert_eq!(std::fs::read_to_string(ran.dir.path().join("outside/host.txt")).unwrap(), "x");
    assert_eq!(servers_started(&ran.dir.path().join("run"))[0]["sandbox"], "none");
}

#[test]
fn parallel_branches_in_worktrees_get_a_server_working_in_their_own_worktree() {
    let workflow = r#"digraph branches {
    start [shape=Mdiamond]
    exit [shape=Msquare]
    fan [shape=component, max_parallel=1]
    a [shape=box, prompt="Write yours"]
    b [shape=box, prompt="Write yours"]
    merge [shape=tripleoctagon]
    start -> fan
    fan -> a
    fan -> b
    a -> merge
    b -> merge
    merge -> exit
}"#;
    // Each server process appends its pid here (outside the repository).
    let pids = tempfile::tempdir().unwrap();
    let pid_file = pids.path().join("pids");
    // The state of each server process (from /proc): a killed one is gone or a zombie.
    let states = format!(
        "for p in $(cat {}); do echo \"server $(awk '/^State/ {{print $2}}' /proc/$p/status 2>/dev/null || echo gone)\"; done",
        pid_file.display()
    );
    // One branch after the other (max_parallel=1), so the scripted replies go in this order.
    let server = LlmServer::start(
        vec![
            openai_tools(&[("c1", "mcp__files__write_file", json!({"path": "mcp.txt", "content": "first"}))]),
            openai_text("wrote first", 10, 2),
            openai_tools(&[(
                "c2",
                "mcp__files__write_file",
                json!({"path": "mcp.txt", "content": "second"}),
            )]),
            openai_tools(&[("c3", "shell", json!({ "command": states }))]),
            openai_text("wrote second", 10, 2),
        ],
        vec![],
    );
    let config = format!(
        "[mcp_servers.files]\ntype = \"stdio\"\ncommand = [\"sh\", \"-c\", {:?}]\n",
        format!("echo $$ >> {}; exec {} .", pid_file.display(), filesystem_server().display())
    );
    let test = Test::new()
        .workflow(workflow)
        .file(".gitignore", ".fabro/\nconfig.toml\n")
        .file("config.toml", &config)
        .env("FABRO_CONFIG", "config.toml")
        .env("FABRO_LLM_BASE_URL", &server.url("/v1"))
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .env("FABRO_LLM_MODEL", "local-model")
        .args(["run", "workflow.dot", "--run-dir", ".fabro/run"]);
    let repo = test.path("");
    common::commit_all_in_new_repository(&repo);
    let ran = test.status(0).run();
    let run_dir = ran.dir.path().join(".fabro/run");

    let started = servers_started(&run_dir);
    let mut starters: Vec<&str> = started.iter().map(|e| e["node_id"].as_str().unwrap()).collect();
    starters.sort();
    assert_eq!(starters, vec!["a", "b"], "a server for each branch's worktree");
    // Each branch's file is on its own branch, and only the merged one reached the work directory.
    let manifest: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("manifest.json")).unwrap()).unwrap();
    let run_id = manifest["run_id"].as_str().unwrap();
    let on_branch = |branch: &str| common::git(&repo, &["show", &format!("fabro/{run_id}/{branch}:mcp.txt")]);
    let mut written = vec![on_branch("a"), on_branch("b")];
    written.sort();
    assert_eq!(written, vec!["first", "second"]);
    // When the second branch started, the first one's worktree was gone, and so was its server.
    let results = tool_results(&server.main_requests()[4]);
    let states: Vec<&str> =
        results.last().unwrap().lines().filter_map(|line| line.strip_prefix("server ")).collect();
    assert_eq!(states.len(), 2, "{states:?}");
    assert!(matches!(states[0], "gone" | "Z"), "the first branch's server still runs: {states:?}");
    assert!(!matches!(states[1], "gone" | "Z"), "the second branch's server runs: {states:?}");
    let checkpoint: Value =
        serde_json::from_str(&std::fs::read_to_string(run_dir.join("checkpoint.json")).unwrap()).unwrap();
    let best = checkpoint["context"]["parallel.fan_in.best_id"].as_str().unwrap_or_default().to_string();
    assert_eq!(std::fs::read_to_string(repo.join("mcp.txt")).unwrap(), on_branch(&best));
}

// Bounds: what a server sends is capped (issue: MCP output is unbounded).

/// The entry `fake`: tests/fixtures/mcp/misbehaving_server.py in `mode`.
fn misbehaving_entry(mode: &str) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/misbehaving_server.py");
    format!(
        "[mcp_servers.fake]\ntype = \"stdio\"\ncommand = [\"python3\", {:?}, {mode:?}]\nstartup_timeout_secs = 5\ntool_timeout_secs = 20\n",
        script.display().to_string()
    )
}

fn status_of(run: &Path, node: &str) -> Value {
    serde_json::from_str(&std::fs::read_to_string(run.join(format!("stages/{node}/1/status.json"))).unwrap())
        .unwrap()
}

#[test]
fn a_handshake_line_over_the_cap_fails_the_stage_saying_so() {
    let server = LlmServer::start(vec![], vec![]);
    let ran = run(&server, ONE_AGENT, &misbehaving_entry("huge-handshake")).status(1).run();
    let status = status_of(&ran.dir.path().join("run"), "work");
    let reason = status["failure_reason"].as_str().unwrap();
    assert!(reason.contains("the MCP server `fake` failed its handshake"), "{reason}");
    assert!(reason.contains("sent a message over 16 MiB"), "{reason}");
    assert!(!reason.contains("startup_timeout_secs"), "not a timeout: {reason}");
}

#[test]
fn a_tool_result_over_the_cap_is_an_error_saying_it_was_too_big() {
    // A 5 MB result, and a 17 MiB message without a line end.
    for (mode, says) in
        [("huge-result", "over the 4 MiB cap"), ("huge-call-line", "sent a message over 16 MiB")]
    {
        let server = LlmServer::start(
            vec![openai_tools(&[("c1", "mcp__fake__echo", json!({"text": "hi"}))]), openai_text("ok", 10, 2)],
            vec![],
        );
        run(&server, ONE_AGENT, &misbehaving_entry(mode)).status(0).run();
        let requests = server.main_requests();
        let results = tool_results(&requests[1]);
        assert_eq!(results.len(), 1);
        assert!(results[0].len() < 1_000, "{mode}: {}", results[0].len());
        assert!(
            results[0].contains("the result of `echo` from the MCP server `fake` is too big")
                && results[0].contains(says),
            "{mode}: {}",
            results[0]
        );
        assert!(!results[0].contains("tool_timeout_secs"), "{mode}: {}", results[0]);
    }
}

#[test]
fn long_tool_descriptions_and_schemas_are_cut_with_a_marker_and_a_warning() {
    let server = LlmServer::start(vec![openai_text("ok", 10, 2)], vec![]);
    let ran = run(&server, ONE_AGENT, &misbehaving_entry("long-description")).status(0).run();
    let request = server.main_requests()[0].json();
    let tool = request["tools"]
        .as_array()
        .unwrap()
        .iter()
        .find(|tool| tool["function"]["name"] == "mcp__fake__echo")
        .unwrap()
        .clone();
    let description = tool["function"]["description"].as_str().unwrap();
    assert!(description.len() <= 4_300, "{}", description.len());
    assert!(description.contains("[... description cut by fabro:"), "{description}");
    let schema = tool["function"]["parameters"].to_string();
    assert!(schema.len() <= 16_500, "{}", schema.len());
    assert!(schema.contains("input schema of"), "{schema}");
    let warnings: Vec<Value> =
        events(&ran.dir.path().join("run")).into_iter().filter(|e| e["event"] == "mcp.tool_cut").collect();
    assert_eq!(warnings.len(), 1, "{warnings:?}");
    assert_eq!(warnings[0]["server"], "fake");
    assert_eq!(warnings[0]["tool"], "echo");
    assert!(warnings[0]["description_bytes"].as_u64().unwrap() > 100_000);
    assert!(warnings[0]["schema_bytes"].as_u64().unwrap() > 16_384);
}
