//! The run's secrets through the binary: the provider keys fabro knows by name, every
//! `api_key_env` of the config file and every MCP `allowed_env_vars` are kept out of the
//! environments of the programs fabro starts (hooks, command stages, the agent's shell, stdio MCP
//! servers), and their values (also reversed and in base64) out of everything fabro writes and
//! prints.

use crate::common;

use std::io::{BufRead, BufReader, Read, Write};
use std::net::TcpListener;
use std::path::{Path, PathBuf};

use common::llm_server::{files_containing, openai_text, openai_tools, LlmServer};
use common::Test;
use serde_json::{json, Value};

const ANTHROPIC_KEY: &str = "sk-ant-test-0123456789abcdef";
const CORP_KEY: &str = "corp-key-0123456789abcdef";
const REMOTE_TOKEN: &str = "remote-token-0123456789abcdef";

fn fake_mcp_server() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/mcp/misbehaving_server.py")
}

fn reversed(text: &str) -> String {
    text.chars().rev().collect()
}

/// Standard base64, padded.
fn base64(bytes: &[u8]) -> String {
    const ALPHABET: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let n = chunk.iter().enumerate().fold(0u32, |n, (i, b)| n | (u32::from(*b) << (16 - 8 * i)));
        for i in 0..4 {
            out.push(if i <= chunk.len() {
                ALPHABET[(n >> (18 - 6 * i) & 63) as usize] as char
            } else {
                '='
            });
        }
    }
    out
}

/// The names of the variables in an `env`-style dump.
fn names_in(dump: &str) -> Vec<String> {
    dump.lines().filter_map(|line| line.split_once('=')).map(|(name, _)| name.to_string()).collect()
}

#[test]
fn configured_keys_are_kept_from_every_program_fabro_starts_and_redacted_reversed_and_in_base64() {
    let server = LlmServer::start(
        vec![
            openai_tools(&[("c1", "shell", json!({"command": "env | sort"}))]),
            openai_text(
                &format!(
                    "Found them: {} and {} and {}",
                    reversed(CORP_KEY),
                    base64(REMOTE_TOKEN.as_bytes()),
                    base64(format!("token={REMOTE_TOKEN}").as_bytes())
                ),
                10,
                2,
            ),
        ],
        vec![],
    );
    let workflow = r#"digraph secrets {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        cmd [shape=parallelogram, script="env | sort > cmd_env.txt"]
        agent [shape=box, prompt="Look around", llm_model="local-model", mcp_servers="fake"]
        start -> cmd -> agent -> exit
    }"#;
    let test = Test::new().workflow(workflow).file("work/.keep", "");
    let config = format!(
        "[providers.corp]\nbase_url = \"{}\"\napi_key_env = \"CORP_LLM_KEY\"\nmodels = [\"local-model\"]\n\n\
         [mcp_servers.fake]\ntype = \"stdio\"\ncommand = [\"python3\", {:?}, \"ok\"]\n\
         env = {{ FAKE_MCP_ENV_DUMP = {:?} }}\n\n\
         [mcp_servers.remote]\ntype = \"http\"\nurl = \"http://127.0.0.1:9/mcp\"\n\
         headers = {{ Authorization = \"Bearer $REMOTE_TOKEN\" }}\nallowed_env_vars = [\"REMOTE_TOKEN\"]\n\n\
         [[hooks]]\nevent = \"run_start\"\ntype = \"command\"\ncommand = 'env | sort > hook_env.txt'\n",
        server.url("/v1"),
        fake_mcp_server().display().to_string(),
        test.path("mcp_env.txt").display().to_string(),
    );
    let ran = test
        .file("config.toml", &config)
        .env("FABRO_CONFIG", "config.toml")
        .env("FABRO_LLM_MAX_RETRIES", "0")
        .env("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
        .env("CORP_LLM_KEY", CORP_KEY)
        .env("REMOTE_TOKEN", REMOTE_TOKEN)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"])
        .status(0)
        .run();
    let dir = ran.dir.path();
    let secret_names = ["ANTHROPIC_API_KEY", "CORP_LLM_KEY", "REMOTE_TOKEN"];
    for dump in ["work/cmd_env.txt", "work/hook_env.txt", "mcp_env.txt"] {
        let names = names_in(&std::fs::read_to_string(dir.join(dump)).unwrap());
        assert!(names.iter().any(|name| name == "PATH"), "{dump}: {names:?}");
        for secret in secret_names {
            assert!(!names.iter().any(|name| name == secret), "{dump} has {secret}: {names:?}");
        }
    }
    // The MCP server still gets what its own entry sets.
    assert!(std::fs::read_to_string(dir.join("mcp_env.txt")).unwrap().contains("FAKE_MCP_ENV_DUMP="));
    let requests = server.main_requests();
    let shell_result = requests[1].json()["messages"]
        .as_array()
        .unwrap()
        .iter()
        .find(|m| m["role"] == "tool")
        .map(|m| m["content"].as_str().unwrap().to_string())
        .unwrap();
    assert!(shell_result.contains("PATH="), "{shell_result}");
    for secret in secret_names {
        assert!(!shell_result.contains(&format!("{secret}=")), "the shell saw {secret}: {shell_result}");
    }
    // What the model echoed back, reversed and in base64, is redacted wherever fabro writes it.
    let echoed = [
        CORP_KEY.to_string(),
        reversed(CORP_KEY),
        REMOTE_TOKEN.to_string(),
        base64(REMOTE_TOKEN.as_bytes()).trim_end_matches('=').to_string(),
        reversed(REMOTE_TOKEN),
    ];
    for text in &echoed {
        assert_eq!(files_containing(&dir.join("run"), text), Vec::<PathBuf>::new(), "{text}");
        assert!(!ran.stdout().contains(text.as_str()) && !ran.stderr().contains(text.as_str()), "{text}");
    }
    // base64 of a text holding the token: the token's part is caught at any offset.
    let embedded = base64(format!("token={REMOTE_TOKEN}").as_bytes());
    assert_eq!(files_containing(&dir.join("run"), &embedded[8..embedded.len() - 4]), Vec::<PathBuf>::new());
    let transcript = std::fs::read_to_string(dir.join("run/stages/agent/1/transcript.jsonl")).unwrap();
    assert!(transcript.contains("Found them: [REDACTED] and [REDACTED]"), "{transcript}");
}

#[test]
fn a_command_stage_that_prints_a_key_leaves_it_only_in_its_own_logs() {
    let workflow = r#"digraph leak {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        passed [shape=parallelogram, sandbox_env="ANTHROPIC_API_KEY", script="printf 'key=%s\n' \"$ANTHROPIC_API_KEY\""]
        unset [shape=parallelogram, script="printf 'unset=%s\n' \"$ANTHROPIC_API_KEY\""]
        read [shape=parallelogram, script="cat key.txt; cat key.txt >&2"]
        reports [shape=parallelogram, script="k=$(cat key.txt); printf '{\"outcome\": \"success\", \"failure_reason\": \"said %s\", \"context_updates\": {\"leak\": \"%s\"}}' \"$k\" \"$k\" > \"$FABRO_STAGE_DIR/status.json\""]
        start -> passed -> unset -> read -> reports -> exit
    }"#;
    let config = "[providers.corp]\nbase_url = \"http://127.0.0.1:9/v1\"\napi_key_env = \"CORP_LLM_KEY\"\n\n\
                  [[hooks]]\nevent = \"stage_complete\"\ntype = \"command\"\ncommand = '{ cat; echo; } >> hooks.log'\n";
    let ran = Test::new()
        .workflow(workflow)
        .file("config.toml", config)
        .file("work/key.txt", &format!("the key is {CORP_KEY}\n"))
        .env("FABRO_CONFIG", "config.toml")
        .env("ANTHROPIC_API_KEY", ANTHROPIC_KEY)
        .env("CORP_LLM_KEY", CORP_KEY)
        .args(["run", "workflow.dot", "--run-dir", "run", "--workdir", "work", "-v"])
        .status(0)
        .run();
    let run = ran.dir.path().join("run");
    let stage_logs = |key: &str| -> Vec<String> {
        files_containing(&run, key)
            .iter()
            .map(|path| path.strip_prefix(&run).unwrap().display().to_string())
            .collect::<Vec<_>>()
    };
    // sandbox_env lets the key through to the one stage that names it; the others never see it.
    let mut found = stage_logs(ANTHROPIC_KEY);
    found.sort();
    assert_eq!(found, vec!["stages/passed/1/stdout.log".to_string()]);
    let unset = std::fs::read_to_string(run.join("stages/unset/1/stdout.log")).unwrap();
    assert_eq!(unset, "unset=\n");
    let mut found = stage_logs(CORP_KEY);
    found.sort();
    assert_eq!(found, vec!["stages/read/1/stderr.log".to_string(), "stages/read/1/stdout.log".to_string()]);
    let status: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("stages/passed/1/status.json")).unwrap())
            .unwrap();
    assert_eq!(status["context_updates"]["command.output"], "key=[REDACTED]\n", "{status}");
    assert!(!ran.stderr().contains(CORP_KEY) && !ran.stdout().contains(CORP_KEY));
    // What a script's status.json sets is redacted before the context and the hooks get it.
    let hooks = std::fs::read_to_string(ran.dir.path().join("work/hooks.log")).unwrap();
    assert!(hooks.contains("\"failure_reason\":\"said the key is [REDACTED]\""), "{hooks}");
    assert!(!hooks.contains(CORP_KEY), "{hooks}");
    let status: Value =
        serde_json::from_str(&std::fs::read_to_string(run.join("stages/reports/1/status.json")).unwrap())
            .unwrap();
    assert_eq!(status["context_updates"]["leak"], "the key is [REDACTED]", "{status}");
}

/// A Streamable HTTP MCP server that refuses every request with 401, quoting the Authorization
/// header it was sent.
fn rejecting_mcp_server() -> String {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let url = format!("http://{}/mcp", listener.local_addr().unwrap());
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut stream = stream;
                let mut request_line = String::new();
                if reader.read_line(&mut request_line).unwrap_or(0) == 0 {
                    return;
                }
                let (mut length, mut auth) = (0, String::new());
                loop {
                    let mut line = String::new();
                    if reader.read_line(&mut line).unwrap_or(0) == 0 {
                        return;
                    }
                    let line = line.trim_end();
                    if line.is_empty() {
                        break;
                    }
                    if let Some((name, value)) = line.split_once(':') {
                        match name.to_ascii_lowercase().as_str() {
                            "content-length" => length = value.trim().parse().unwrap_or(0),
                            "authorization" => auth = value.trim().to_string(),
                            _ => {}
                        }
                    }
                }
                let mut body = vec![0; length];
                let _ = reader.read_exact(&mut body);
                let body = json!({"error": format!("invalid credentials: {auth}")}).to_string();
                let head = format!(
                    "HTTP/1.1 401 Unauthorized\r\ncontent-type: application/json\r\ncontent-length: {}\r\nconnection: close\r\n\r\n",
                    body.len()
                );
                let _ = stream.write_all(head.as_bytes());
                let _ = stream.write_all(body.as_bytes());
            });
        }
    });
    url
}

#[test]
fn an_mcp_server_that_echoes_the_authorization_header_in_its_rejection_is_redacted_on_stderr() {
    let url = rejecting_mcp_server();
    let server = LlmServer::start(vec![], vec![]);
    let workflow = r#"digraph rejected {
        start [shape=Mdiamond]
        exit [shape=Msquare]
        agent [shape=box, prompt="Use the remote server", llm_model="local-model"]
        start -> agent -> exit
    }"#;
    let config = format!(
        "[mcp_servers.remote]\ntype = \"http\"\nurl = \"{url}\"\nheaders = {{ Authorization = \"Bearer ${{REMOTE_TOKEN}}\" }}\n\
         allowed_env_vars = [\"REMOTE_TOKEN\"]\nstartup_timeout_secs = 5\n"
    );
    for verbosity in [None, Some("-vv")] {
        let mut args = vec!["run", "workflow.dot", "--run-dir", "run", "--workdir", "work"];
        args.extend(verbosity);
        let ran = Test::new()
            .workflow(workflow)
            .file("config.toml", &config)
            .file("work/.keep", "")
            .env("FABRO_CONFIG", "config.toml")
            .env("FABRO_LLM_BASE_URL", &server.url("/v1"))
            .env("FABRO_LLM_MAX_RETRIES", "0")
            .env("REMOTE_TOKEN", REMOTE_TOKEN)
            .args(args)
            .status(1)
            .run();
        let stderr = ran.stderr();
        assert!(stderr.contains("the MCP server `remote` failed its handshake"), "{stderr}");
        assert!(!stderr.contains(REMOTE_TOKEN), "{verbosity:?}: {stderr}");
        assert!(!ran.stdout().contains(REMOTE_TOKEN));
        assert_eq!(files_containing(&ran.dir.path().join("run"), REMOTE_TOKEN), Vec::<PathBuf>::new());
    }
}
