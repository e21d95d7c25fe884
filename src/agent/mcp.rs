//! MCP servers: the config file's `[mcp_servers.NAME]` entries (and `--mcp-config FILE`), started
//! once per run on first use with the official SDK (`rmcp`), their tools offered to agent stages as
//! `mcp__{server}__{tool}`, and stopped with the run.
//!
//! A stdio server is a program spoken to over its stdin and stdout, run in the work directory and
//! the sandbox of the stage that wants it (one process for each pair a run's stages use; a
//! parallel branch's worktree is a work directory of its own) unless its entry says
//! `sandbox = "none"`, leading its own process group, which ends with the run or with fabro
//! ([`crate::process_group`]); an http server speaks Streamable HTTP at a URL. A server that fails
//! its handshake fails the stage that wanted it, with the tail of what the server wrote to
//! stderr; other stages go on, and a later stage tries again.
//!
//! What a server sends is bounded: a stdio server's message (one JSON-RPC line) over
//! [`MAX_MESSAGE_BYTES`] stops fabro reading it and fails the handshake or the call saying so;
//! a tool result over [`MAX_RESULT_BYTES`] is an error saying it was too big; a tool's
//! description over [`MAX_DESCRIPTION_BYTES`] and input schema over [`MAX_SCHEMA_BYTES`] are cut
//! with a marker before the model sees them (event `mcp.tool_cut`).

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::ffi::OsStr;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rmcp::model::{CallToolRequestParams, CallToolResult, ContentBlock, Tool};
use rmcp::service::{Peer, RoleClient, RunningService};
use rmcp::ServiceExt;
use serde_json::Value;

use super::tools::ToolOutput;
use crate::chat::ToolDefinition;
use crate::graph::settings::{McpSelection, SandboxKind};
use crate::process_group::ProcessGroup;
use crate::sandbox::Confinement;

/// How long a server may take to start and answer the handshake, unless its entry says.
pub const DEFAULT_STARTUP_TIMEOUT_SECS: u64 = 10;
/// How long one tool call may take, unless the server's entry says.
pub const DEFAULT_TOOL_TIMEOUT_SECS: u64 = 60;
/// The prefix of every MCP tool's name.
pub const PREFIX: &str = "mcp__";
/// How much of a server's stderr a failure quotes.
const STDERR_TAIL_CHARS: usize = 2_000;
/// Most bytes of one message from a stdio server (rmcp's own line limit, which drops a longer
/// line silently so that its caller waits for an answer that never comes).
pub const MAX_MESSAGE_BYTES: usize = 16 << 20;
/// Most bytes of a tool result, as text.
pub const MAX_RESULT_BYTES: usize = 4 << 20;
/// Most bytes of a tool's description the model sees.
pub const MAX_DESCRIPTION_BYTES: usize = 4 << 10;
/// Most bytes of a tool's input schema (as JSON) the model sees.
pub const MAX_SCHEMA_BYTES: usize = 16 << 10;

/// How fabro speaks to a server.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportKind {
    Stdio,
    Http,
}

/// Where a stdio server runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ServerSandbox {
    /// In the sandbox of the stage that wants it (`sandbox`, `sandbox_network`, `sandbox_paths`,
    /// `sandbox_env`), with the work directory writable.
    #[default]
    Stage,
    /// On the host, with the user's whole account.
    None,
}

/// One `[mcp_servers.NAME]` entry.
#[derive(Debug, Clone, PartialEq, Eq, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ServerConfig {
    #[serde(rename = "type")]
    pub transport: TransportKind,
    /// stdio: the program and its arguments.
    #[serde(default)]
    pub command: Vec<String>,
    /// stdio: variables added to the server's environment.
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    /// stdio: where the server runs (relative to the run's work directory, which is the default).
    pub cwd: Option<PathBuf>,
    /// stdio: in the stage's sandbox (the default) or on the host.
    #[serde(default)]
    pub sandbox: ServerSandbox,
    /// http: the Streamable HTTP endpoint.
    pub url: Option<String>,
    /// http: headers sent with every request; `$VAR` or `${VAR}` is replaced by the variable's
    /// value, for the variables in `allowed_env_vars` only.
    #[serde(default)]
    pub headers: BTreeMap<String, String>,
    #[serde(default)]
    pub allowed_env_vars: Vec<String>,
    pub startup_timeout_secs: Option<u64>,
    pub tool_timeout_secs: Option<u64>,
}

/// The `mcp_servers` of a config file or of an `--mcp-config` file.
#[derive(Debug, Default, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct McpConfigFile {
    #[serde(default)]
    mcp_servers: BTreeMap<String, ServerConfig>,
}

/// Reads the `[mcp_servers.NAME]` entries of an `--mcp-config` file.
pub fn read_config_file(
    path: &Path,
    files: &crate::config_files::ConfigFiles,
) -> Result<BTreeMap<String, ServerConfig>, String> {
    let text = files
        .read(path)
        .map_err(|error| format!("cannot read the MCP config file {}: {error}", path.display()))?
        .ok_or_else(|| format!("cannot read the MCP config file {}: no such file", path.display()))?;
    let file: McpConfigFile = toml::from_str(&text)
        .map_err(|error| format!("the MCP config file {} is invalid: {error}", path.display()))?;
    if file.mcp_servers.is_empty() {
        return Err(format!(
            "the MCP config file {} has no [mcp_servers.NAME] entry; add one such as \
             [mcp_servers.files] with type = \"stdio\" and command = [\"mcp-server-filesystem\", \".\"]",
            path.display()
        ));
    }
    check_all(&file.mcp_servers)?;
    Ok(file.mcp_servers)
}

/// What is wrong with any of `servers`, naming the entry.
pub fn check_all(servers: &BTreeMap<String, ServerConfig>) -> Result<(), String> {
    for (name, server) in servers {
        server.check(name).map_err(|problem| format!("[mcp_servers.{name}]: {problem}"))?;
    }
    Ok(())
}

impl ServerConfig {
    /// What is wrong with the entry `name`, if anything.
    pub fn check(&self, name: &str) -> Result<(), String> {
        if name.trim().is_empty() {
            return Err("the server name is empty".to_string());
        }
        if self.startup_timeout_secs == Some(0) || self.tool_timeout_secs == Some(0) {
            return Err("timeouts are whole seconds above 0".to_string());
        }
        match self.transport {
            TransportKind::Stdio => {
                if self.command.first().is_none_or(|program| program.trim().is_empty()) {
                    return Err(
                        "a stdio server needs `command`, e.g. command = [\"npx\", \"some-server\"]".into()
                    );
                }
                if self.url.is_some() || !self.headers.is_empty() || !self.allowed_env_vars.is_empty() {
                    return Err("`url`, `headers` and `allowed_env_vars` are for type = \"http\"".into());
                }
            }
            TransportKind::Http => {
                let url = self.url.as_deref().ok_or("an http server needs `url`")?;
                let parsed = reqwest::Url::parse(url).map_err(|error| format!("url `{url}`: {error}"))?;
                if !matches!(parsed.scheme(), "http" | "https") {
                    return Err(format!("url `{url}` is not an http or https URL"));
                }
                if !self.command.is_empty()
                    || !self.env.is_empty()
                    || self.cwd.is_some()
                    || self.sandbox != ServerSandbox::Stage
                {
                    return Err("`command`, `env`, `cwd` and `sandbox` are for type = \"stdio\"".into());
                }
                for (header, value) in &self.headers {
                    for variable in variables_in(value) {
                        if !self.allowed_env_vars.iter().any(|allowed| allowed == variable) {
                            return Err(format!(
                                "header `{header}` uses ${variable}, which is not in allowed_env_vars; add \
                                 allowed_env_vars = [\"{variable}\"] to let it through"
                            ));
                        }
                    }
                }
            }
        }
        Ok(())
    }

    /// Where this server runs for a stage working in `work_dir` under `stage`: a stdio server in
    /// that work directory (a parallel branch's worktree is its own) and sandbox; an http server
    /// is one connection for every stage.
    fn placement(&self, work_dir: &Path, stage: &Confinement) -> Placement {
        match self.transport {
            TransportKind::Stdio => Placement {
                work_dir: work_dir.to_path_buf(),
                confinement: match self.sandbox {
                    ServerSandbox::Stage => stage.clone(),
                    ServerSandbox::None => Confinement::default(),
                },
            },
            TransportKind::Http => Placement::default(),
        }
    }

    fn startup_timeout(&self) -> Duration {
        Duration::from_secs(self.startup_timeout_secs.unwrap_or(DEFAULT_STARTUP_TIMEOUT_SECS))
    }

    fn tool_timeout(&self) -> Duration {
        Duration::from_secs(self.tool_timeout_secs.unwrap_or(DEFAULT_TOOL_TIMEOUT_SECS))
    }

    /// The headers with their variables replaced (from `env`).
    fn resolved_headers(
        &self,
        env: &dyn Fn(&str) -> Option<String>,
    ) -> Result<Vec<(String, String)>, String> {
        self.headers
            .iter()
            .map(|(header, value)| {
                let mut resolved = value.clone();
                for variable in variables_in(value) {
                    let found = env(variable).ok_or_else(|| {
                        format!("header `{header}` uses ${variable}, which is not set in the environment")
                    })?;
                    resolved = resolved
                        .replace(&format!("${{{variable}}}"), &found)
                        .replace(&format!("${variable}"), &found);
                }
                Ok((header.clone(), resolved))
            })
            .collect()
    }

    /// The values of the headers, as they will be sent: kept out of transcripts and events.
    pub fn secrets(&self) -> Vec<String> {
        let env = |name: &str| std::env::var(name).ok();
        self.resolved_headers(&env)
            .map(|headers| headers.into_iter().map(|(_, value)| value).collect())
            .unwrap_or_default()
    }
}

/// The variable names referred to as `$NAME` or `${NAME}` in `text`.
fn variables_in(text: &str) -> Vec<&str> {
    let mut names = Vec::new();
    let mut rest = text;
    while let Some(at) = rest.find('$') {
        rest = &rest[at + 1..];
        let (name, after) = match rest.strip_prefix('{') {
            Some(braced) => match braced.find('}') {
                Some(end) => (&braced[..end], &braced[end + 1..]),
                None => break,
            },
            None => {
                let end = rest.find(|c: char| !(c.is_ascii_alphanumeric() || c == '_')).unwrap_or(rest.len());
                (&rest[..end], &rest[end..])
            }
        };
        if !name.is_empty() {
            names.push(name);
        }
        rest = after;
    }
    names
}

/// The name the model sees for `tool` of `server`: `mcp__{server}__{tool}`, other characters than
/// letters, digits, `_` and `-` replaced by `_`.
pub fn exposed_name(server: &str, tool: &str) -> String {
    let clean = |text: &str| -> String {
        text.chars()
            .map(|c| if c.is_ascii_alphanumeric() || c == '_' || c == '-' { c } else { '_' })
            .collect()
    };
    format!("{PREFIX}{}__{}", clean(server), clean(tool))
}

/// The run's MCP servers: their entries, and those started so far (by name and placement).
pub struct McpServers {
    configs: BTreeMap<String, ServerConfig>,
    running: tokio::sync::Mutex<BTreeMap<(String, Placement), Arc<Server>>>,
}

/// Where one process of a stdio server runs: its stage's work directory and sandbox (an http
/// server's is empty).
#[derive(Debug, Clone, Default, PartialEq, Eq, PartialOrd, Ord)]
struct Placement {
    work_dir: PathBuf,
    confinement: Confinement,
}

impl Placement {
    /// Whether stages may still work here: not a worktree removed since.
    fn is_current(&self) -> bool {
        self.work_dir.as_os_str().is_empty() || self.work_dir.is_dir()
    }
}

/// A started server.
struct Server {
    name: String,
    peer: Peer<RoleClient>,
    tools: Vec<Tool>,
    /// The tools cut to their bounds when the server started.
    cut: Vec<CutTool>,
    tool_timeout: Duration,
    stderr: Arc<Mutex<String>>,
    /// A stdio server sent a message over [`MAX_MESSAGE_BYTES`]: its connection is closed.
    overflowed: Arc<AtomicBool>,
    /// A stdio server's process and its process group: the group is killed when the server is
    /// dropped, or by the watcher when fabro dies.
    _process: Option<(tokio::process::Child, ProcessGroup)>,
    /// Kept so the connection lives as long as the run's servers.
    _service: RunningService<RoleClient, ()>,
}

impl McpServers {
    pub fn new(configs: BTreeMap<String, ServerConfig>) -> McpServers {
        McpServers { configs, running: tokio::sync::Mutex::new(BTreeMap::new()) }
    }

    pub fn is_empty(&self) -> bool {
        self.configs.is_empty()
    }

    pub fn names(&self) -> impl Iterator<Item = &str> {
        self.configs.keys().map(String::as_str)
    }

    /// The names in `selection` that are not configured.
    pub fn unknown<'a>(&self, selection: &'a McpSelection) -> Vec<&'a str> {
        match selection {
            McpSelection::All => Vec::new(),
            McpSelection::Only(names) => {
                names.iter().map(String::as_str).filter(|name| !self.configs.contains_key(*name)).collect()
            }
        }
    }

    /// The tools of the selected servers, starting those not yet running where the stage works
    /// (`work_dir`, where a stdio server without `cwd` runs, and `confinement`), and the servers
    /// started now. Fails with what went wrong when a server cannot start.
    pub async fn for_stage(
        &self,
        selection: &McpSelection,
        work_dir: &Path,
        confinement: &Confinement,
    ) -> Result<(StageTools, Vec<StartedServer>), String> {
        let names: Vec<&str> = match selection {
            McpSelection::All => self.configs.keys().map(String::as_str).collect(),
            McpSelection::Only(names) => names.iter().map(String::as_str).collect(),
        };
        // A parallel branch's worktree is removed when the branch ends: its servers stop.
        self.running.lock().await.retain(|(_, placement), _| placement.is_current());
        let mut tools = Vec::new();
        let mut started = Vec::new();
        for name in names {
            let config = self.configs.get(name).ok_or_else(|| {
                format!(
                    "mcp_servers names `{name}`, which is not configured (configured: {})",
                    self.names().collect::<Vec<_>>().join(", ")
                )
            })?;
            let server = {
                let key = (name.to_string(), config.placement(work_dir, confinement));
                let mut running = self.running.lock().await;
                match running.get(&key).filter(|server| !server.peer.is_transport_closed()) {
                    Some(server) => server.clone(),
                    None => {
                        let server = Arc::new(start(name, config, &key.1).await?);
                        started.push(StartedServer {
                            name: name.to_string(),
                            tools: server.tools.iter().map(|tool| exposed_name(name, &tool.name)).collect(),
                            sandbox: key.1.confinement.kind,
                            cut: server.cut.clone(),
                        });
                        running.insert(key, server.clone());
                        server
                    }
                }
            };
            for tool in &server.tools {
                tools.push(StageTool {
                    exposed: exposed_name(name, &tool.name),
                    name: tool.name.to_string(),
                    server: server.clone(),
                    description: format!(
                        "[MCP server `{name}`] {}",
                        tool.description.as_deref().or(tool.title.as_deref()).unwrap_or(&tool.name)
                    ),
                    schema: Value::Object((*tool.input_schema).clone()),
                });
            }
        }
        Ok((StageTools { tools }, started))
    }
}

/// A server a stage started: its name, the names the model sees, where it runs, and the tools
/// whose description or schema was cut.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StartedServer {
    pub name: String,
    pub tools: Vec<String>,
    pub sandbox: SandboxKind,
    pub cut: Vec<CutTool>,
}

/// Starts `config` (a stdio server where `placement` says, its work directory writable) and
/// completes the handshake, listing the server's tools.
async fn start(name: &str, config: &ServerConfig, placement: &Placement) -> Result<Server, String> {
    let Placement { work_dir, confinement } = placement;
    let stderr = Arc::new(Mutex::new(String::new()));
    let overflowed = Arc::new(AtomicBool::new(false));
    let child = Mutex::new(None);
    let timeout = config.startup_timeout();
    let handshake = async {
        let service = match config.transport {
            TransportKind::Stdio => {
                let cwd = match &config.cwd {
                    Some(cwd) => work_dir.join(cwd),
                    None => work_dir.to_path_buf(),
                };
                let args: Vec<&OsStr> = config.command[1..].iter().map(OsStr::new).collect();
                let mut command = confinement.command(
                    OsStr::new(&config.command[0]),
                    &args,
                    &cwd,
                    &[work_dir.as_path()],
                    &[],
                );
                // The sandbox's command leaves the run's secrets out; what the entry's own `env`
                // sets is the server's to have.
                command.envs(&config.env).kill_on_drop(true);
                command.stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
                let (mut spawned, group) = ProcessGroup::spawn(&mut command)
                    .map_err(|error| format!("cannot start `{}`: {error}", config.command.join(" ")))?;
                if let Some(pipe) = spawned.stderr.take() {
                    tokio::spawn(keep_tail(pipe, stderr.clone()));
                }
                let (Some(stdout), Some(stdin)) = (spawned.stdout.take(), spawned.stdin.take()) else {
                    return Err("its stdin and stdout could not be opened".to_string());
                };
                *child.lock().map_err(|_| "a lock was poisoned".to_string())? = Some((spawned, group));
                let reader = LineCap { inner: stdout, since_newline: 0, overflowed: overflowed.clone() };
                let transport = rmcp::transport::async_rw::AsyncRwTransport::new_client(reader, stdin)
                    .with_max_line_length(MAX_MESSAGE_BYTES + 1);
                ().serve(transport).await.map_err(|error| error.to_string())?
            }
            TransportKind::Http => {
                let env = |name: &str| std::env::var(name).ok();
                let mut headers = std::collections::HashMap::new();
                for (header, value) in config.resolved_headers(&env)? {
                    let header_name = http::HeaderName::try_from(header.as_str())
                        .map_err(|error| format!("header `{header}`: {error}"))?;
                    let header_value = http::HeaderValue::try_from(value)
                        .map_err(|error| format!("header `{header}`: {error}"))?;
                    headers.insert(header_name, header_value);
                }
                let url = config.url.clone().unwrap_or_default();
                // The SDK's HTTP client takes the process's TLS provider: the one fabro's own client
                // uses (an error only says one is installed already).
                let _ = rustls::crypto::ring::default_provider().install_default();
                let client = reqwest13::Client::builder()
                    .build()
                    .map_err(|error| format!("cannot make an HTTP client: {error}"))?;
                let transport = rmcp::transport::StreamableHttpClientTransport::with_client(
                    client,
                    rmcp::transport::streamable_http_client::StreamableHttpClientTransportConfig::with_uri(
                        url,
                    )
                    .custom_headers(headers),
                );
                ().serve(transport).await.map_err(|error| error.to_string())?
            }
        };
        let tools =
            service.peer().list_all_tools().await.map_err(|error| format!("listing its tools: {error}"))?;
        Ok::<_, String>((service, tools))
    };
    let outcome = match tokio::time::timeout(timeout, handshake).await {
        Ok(outcome) => outcome,
        Err(_) => Err(format!("no handshake within startup_timeout_secs = {}", timeout.as_secs())),
    };
    let outcome = match outcome {
        Err(_) if overflowed.load(Ordering::Relaxed) => Err(too_long()),
        other => other,
    };
    match outcome {
        Ok((service, tools)) => {
            let (tools, cut) = tools.into_iter().map(bounded).unzip::<_, _, Vec<_>, Vec<_>>();
            Ok(Server {
                name: name.to_string(),
                peer: service.peer().clone(),
                tools,
                cut: cut.into_iter().flatten().collect(),
                tool_timeout: config.tool_timeout(),
                stderr,
                overflowed,
                _process: child.into_inner().ok().flatten(),
                _service: service,
            })
        }
        Err(problem) => {
            // What the server said on its way out.
            tokio::time::sleep(Duration::from_millis(100)).await;
            Err(format!("the MCP server `{name}` failed its handshake: {problem}{}", said(&stderr)))
        }
    }
}

/// What fabro says when a stdio server sent a message over [`MAX_MESSAGE_BYTES`].
fn too_long() -> String {
    format!(
        "it sent a message over {} MiB (one JSON-RPC line); fabro stopped reading it",
        MAX_MESSAGE_BYTES >> 20
    )
}

/// A tool whose description and input schema the model sees only up to their bounds; what was
/// cut (for the `mcp.tool_cut` warning), if anything.
fn bounded(mut tool: Tool) -> (Tool, Option<CutTool>) {
    let description_bytes = tool.description.as_deref().map_or(0, str::len);
    let schema_bytes = serde_json::to_string(&*tool.input_schema).map_or(0, |json| json.len());
    if description_bytes <= MAX_DESCRIPTION_BYTES && schema_bytes <= MAX_SCHEMA_BYTES {
        return (tool, None);
    }
    if let Some(description) =
        tool.description.as_deref().filter(|_| description_bytes > MAX_DESCRIPTION_BYTES)
    {
        let mut end = MAX_DESCRIPTION_BYTES;
        while !description.is_char_boundary(end) {
            end -= 1;
        }
        tool.description = Some(Cow::Owned(format!(
            "{} [... description cut by fabro: {description_bytes} bytes, over {MAX_DESCRIPTION_BYTES}]",
            &description[..end]
        )));
    }
    if schema_bytes > MAX_SCHEMA_BYTES {
        // A schema cannot be cut in the middle: the model gets an open object and a note.
        let mut schema = serde_json::Map::new();
        schema.insert("type".into(), Value::from("object"));
        schema.insert(
            "description".into(),
            Value::from(format!(
                "[input schema of {schema_bytes} bytes left out by fabro: over {MAX_SCHEMA_BYTES}]"
            )),
        );
        tool.input_schema = Arc::new(schema);
    }
    let cut = CutTool { tool: tool.name.to_string(), description_bytes, schema_bytes };
    (tool, Some(cut))
}

/// A tool whose description or input schema was cut to its bound: their sizes as sent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutTool {
    pub tool: String,
    pub description_bytes: usize,
    pub schema_bytes: usize,
}

/// A stdio server's stdout that fails once a line passes [`MAX_MESSAGE_BYTES`] (noting it in
/// `overflowed`), so that fabro says why the server went away instead of waiting for a reply.
struct LineCap<R> {
    inner: R,
    since_newline: usize,
    overflowed: Arc<AtomicBool>,
}

impl<R: tokio::io::AsyncRead + Unpin> tokio::io::AsyncRead for LineCap<R> {
    fn poll_read(
        mut self: std::pin::Pin<&mut Self>,
        context: &mut std::task::Context<'_>,
        buf: &mut tokio::io::ReadBuf<'_>,
    ) -> std::task::Poll<std::io::Result<()>> {
        let over = || std::io::Error::other(too_long());
        if self.overflowed.load(Ordering::Relaxed) {
            return std::task::Poll::Ready(Err(over()));
        }
        let before = buf.filled().len();
        let polled = std::pin::Pin::new(&mut self.inner).poll_read(context, buf);
        if let std::task::Poll::Ready(Ok(())) = &polled {
            let mut since = self.since_newline;
            for byte in &buf.filled()[before..] {
                since = if *byte == b'\n' { 0 } else { since + 1 };
                if since > MAX_MESSAGE_BYTES {
                    self.overflowed.store(true, Ordering::Relaxed);
                    return std::task::Poll::Ready(Err(over()));
                }
            }
            self.since_newline = since;
        }
        polled
    }
}

/// `\nits stderr ended with:\n...` when the server wrote to stderr.
fn said(stderr: &Mutex<String>) -> String {
    let text = stderr.lock().map(|text| text.trim().to_string()).unwrap_or_default();
    match text.is_empty() {
        true => String::new(),
        false => format!("; its stderr ended with:\n{text}"),
    }
}

/// Keeps the last [`STDERR_TAIL_CHARS`] of what a server writes to stderr.
async fn keep_tail(mut pipe: tokio::process::ChildStderr, tail: Arc<Mutex<String>>) {
    use tokio::io::AsyncReadExt;
    let mut buffer = [0u8; 4096];
    while let Ok(read) = pipe.read(&mut buffer).await {
        if read == 0 {
            break;
        }
        if let Ok(mut text) = tail.lock() {
            text.push_str(&String::from_utf8_lossy(&buffer[..read]));
            let chars = text.chars().count();
            if chars > STDERR_TAIL_CHARS {
                *text = text.chars().skip(chars - STDERR_TAIL_CHARS).collect();
            }
        }
    }
}

/// The MCP tools one stage may call.
#[derive(Default)]
pub struct StageTools {
    tools: Vec<StageTool>,
}

struct StageTool {
    exposed: String,
    name: String,
    server: Arc<Server>,
    description: String,
    schema: Value,
}

impl StageTools {
    pub fn is_empty(&self) -> bool {
        self.tools.is_empty()
    }

    /// The definitions sent to the model.
    pub fn definitions(&self) -> Vec<ToolDefinition> {
        self.tools
            .iter()
            .map(|tool| ToolDefinition {
                name: Cow::Owned(tool.exposed.clone()),
                description: Cow::Owned(tool.description.clone()),
                parameters: tool.schema.clone(),
            })
            .collect()
    }

    /// Calls the tool the model knows as `exposed`; `None` when it is not an MCP tool of the stage.
    pub async fn call(&self, exposed: &str, arguments: &Value) -> Option<ToolOutput> {
        let tool = self.tools.iter().find(|tool| tool.exposed == exposed)?;
        let server = &tool.server;
        let mut params = CallToolRequestParams::new(tool.name.clone());
        params.arguments = arguments.as_object().cloned();
        let output = match tokio::time::timeout(server.tool_timeout, server.peer.call_tool(params)).await {
            Ok(Ok(result)) => bounded_result(rendered(result), &server.name, &tool.name),
            Ok(Err(_)) | Err(_) if server.overflowed.load(Ordering::Relaxed) => ToolOutput {
                content: format!(
                    "the result of `{}` from the MCP server `{}` is too big: {}; the server is stopped",
                    tool.name,
                    server.name,
                    too_long()
                ),
                is_error: true,
            },
            Ok(Err(error)) => ToolOutput {
                content: format!(
                    "the MCP server `{}` could not run `{}`: {error}{}",
                    server.name,
                    tool.name,
                    said(&server.stderr)
                ),
                is_error: true,
            },
            Err(_) => ToolOutput {
                content: format!(
                    "the MCP server `{}` did not answer `{}` within tool_timeout_secs = {}",
                    server.name,
                    tool.name,
                    server.tool_timeout.as_secs()
                ),
                is_error: true,
            },
        };
        Some(output)
    }
}

/// `output`, or an error saying it is too big when it passes [`MAX_RESULT_BYTES`].
fn bounded_result(output: ToolOutput, server: &str, tool: &str) -> ToolOutput {
    if output.content.len() <= MAX_RESULT_BYTES {
        return output;
    }
    ToolOutput {
        content: format!(
            "the result of `{tool}` from the MCP server `{server}` is too big: {} bytes, over the {} MiB cap; \
             ask for less (a narrower query, a smaller range)",
            output.content.len(),
            MAX_RESULT_BYTES >> 20
        ),
        is_error: true,
    }
}

/// A tool result as text: text blocks as they are, other blocks described, structured content
/// as JSON when there is nothing else.
fn rendered(result: CallToolResult) -> ToolOutput {
    let mut parts: Vec<String> = result
        .content
        .iter()
        .map(|block| match block {
            ContentBlock::Text(text) => text.text.clone(),
            ContentBlock::Image(image) => {
                format!("[image, {}, {} base64 characters]", image.mime_type, image.data.len())
            }
            ContentBlock::Audio(audio) => {
                format!("[audio, {}, {} base64 characters]", audio.mime_type, audio.data.len())
            }
            other => serde_json::to_string(other).unwrap_or_default(),
        })
        .collect();
    if parts.is_empty() {
        if let Some(structured) = &result.structured_content {
            parts.push(structured.to_string());
        }
    }
    ToolOutput { content: parts.join("\n"), is_error: result.is_error.unwrap_or(false) }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn http(headers: &[(&str, &str)], allowed: &[&str]) -> ServerConfig {
        ServerConfig {
            transport: TransportKind::Http,
            command: Vec::new(),
            env: BTreeMap::new(),
            cwd: None,
            sandbox: ServerSandbox::Stage,
            url: Some("http://127.0.0.1:1/mcp".into()),
            headers: headers.iter().map(|(k, v)| (k.to_string(), v.to_string())).collect(),
            allowed_env_vars: allowed.iter().map(|v| v.to_string()).collect(),
            startup_timeout_secs: None,
            tool_timeout_secs: None,
        }
    }

    #[test]
    fn a_stdio_server_runs_in_the_stage_s_work_directory_and_sandbox_and_an_http_one_anywhere() {
        let stage = Confinement { kind: SandboxKind::Bwrap, network: true, ..Confinement::default() };
        let stdio = |extra: &str| -> ServerConfig {
            toml::from_str(&format!("type = \"stdio\"\ncommand = [\"server\"]\n{extra}")).expect("entry")
        };
        let work = Path::new("/work/branch");
        assert_eq!(
            stdio("").placement(work, &stage),
            Placement { work_dir: work.into(), confinement: stage.clone() }
        );
        assert_eq!(
            stdio("sandbox = \"none\"").placement(work, &stage),
            Placement { work_dir: work.into(), confinement: Confinement::default() }
        );
        assert_eq!(http(&[], &[]).placement(work, &stage), Placement::default());
        let error =
            toml::from_str::<ServerConfig>("type = \"stdio\"\ncommand = [\"s\"]\nsandbox = \"bwrap\"")
                .unwrap_err();
        assert!(error.to_string().contains("unknown variant `bwrap`, expected `stage` or `none`"), "{error}");
        let mut misplaced = http(&[], &[]);
        misplaced.sandbox = ServerSandbox::None;
        assert!(misplaced.check("api").unwrap_err().contains("are for type = \"stdio\""));
    }

    #[test]
    fn tool_names_are_prefixed_and_cleaned() {
        assert_eq!(exposed_name("files", "read_text_file"), "mcp__files__read_text_file");
        assert_eq!(exposed_name("my.server", "do it/now"), "mcp__my_server__do_it_now");
    }

    #[test]
    fn header_variables_come_only_from_the_allowed_list() {
        assert_eq!(variables_in("Bearer $TOKEN and ${OTHER}x $"), vec!["TOKEN", "OTHER"]);
        let refused = http(&[("Authorization", "Bearer $TOKEN")], &[]).check("api").unwrap_err();
        assert!(refused.contains("$TOKEN") && refused.contains("allowed_env_vars"), "{refused}");
        let allowed = http(&[("Authorization", "Bearer ${TOKEN}")], &["TOKEN"]);
        assert_eq!(allowed.check("api"), Ok(()));
        let env = |name: &str| (name == "TOKEN").then(|| "s3cr3t-value".to_string());
        assert_eq!(
            allowed.resolved_headers(&env).unwrap(),
            vec![("Authorization".to_string(), "Bearer s3cr3t-value".to_string())]
        );
        let unset = |_: &str| None;
        assert!(allowed.resolved_headers(&unset).unwrap_err().contains("not set"));
    }

    #[test]
    fn entries_say_what_they_lack() {
        let mut stdio = http(&[], &[]);
        stdio.transport = TransportKind::Stdio;
        stdio.url = None;
        assert!(stdio.check("a").unwrap_err().contains("needs `command`"));
        stdio.command = vec!["server".into()];
        assert_eq!(stdio.check("a"), Ok(()));
        let mut remote = http(&[], &[]);
        remote.url = Some("ftp://example.com".into());
        assert!(remote.check("a").unwrap_err().contains("not an http"));
    }

    #[test]
    fn a_selection_narrows_or_empties() {
        assert_eq!(McpSelection::of(None), McpSelection::All);
        assert_eq!(McpSelection::of(Some("")), McpSelection::Only(vec![]));
        assert_eq!(McpSelection::of(Some(" a, b ")), McpSelection::Only(vec!["a".into(), "b".into()]));
        let servers = McpServers::new(BTreeMap::from([("a".to_string(), http(&[], &[]))]));
        assert_eq!(servers.unknown(&McpSelection::of(Some("a,zz"))), vec!["zz"]);
    }
}
