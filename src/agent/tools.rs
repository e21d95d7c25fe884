//! The tools of an agent stage: read_file, write_file, edit_file, list_dir, glob, grep and shell,
//! all confined to the stage's work directory (paths that leave it, also through symbolic links,
//! are refused; the run's artifact directory is readable so offloaded output can be paged); and
//! web_fetch and web_search ([`super::web`]) when the stage may reach the web.
//!
//! A tool never fails the stage: whatever goes wrong is the tool's result, marked as an error,
//! for the model to read and react to.

use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use serde_json::{json, Value};
use tokio::io::AsyncReadExt;

use super::file_tracker::{FileList, FileOp, FileTracker};
use super::tool_hooks::ToolHooks;
use crate::chat::ToolDefinition;
use crate::process_group::ProcessGroup;

/// Most bytes of each shell output stream kept; the rest is read and dropped.
pub const SHELL_STREAM_CAP: usize = 16 << 20;
/// Default and longest shell timeouts.
pub const SHELL_DEFAULT_TIMEOUT: Duration = Duration::from_secs(120);
pub const SHELL_MAX_TIMEOUT: Duration = Duration::from_secs(600);
/// Most entries or matches a listing returns.
const LIST_CAP: usize = 1_000;
const GREP_CAP: usize = 500;
/// Files larger than this are not searched by grep.
const GREP_MAX_FILE: u64 = 5 * 1024 * 1024;

/// Where tools work.
pub struct Toolbox {
    /// Canonical work directory.
    root: PathBuf,
    /// Directories tools may read but not write (the run's artifacts).
    readable: Vec<PathBuf>,
    pub tracker: FileTracker,
    /// Groups of shell commands that left processes running; killed when the toolbox (the
    /// stage) ends.
    background: Vec<ProcessGroup>,
    /// Where shell commands run.
    confinement: crate::sandbox::Confinement,
    /// The hooks around every tool call (`[[hooks]]` tool events, `tool_hooks.pre/post`).
    pub hooks: ToolHooks,
    /// The stage's MCP tools.
    mcp: super::mcp::StageTools,
    /// What the tools may do without asking.
    pub permissions: super::permissions::Permissions,
    /// `read_before_write`: an existing file is written only once this stage has read it as it
    /// is on disk now.
    read_before_write: bool,
    /// What each file was when this stage last read or wrote it.
    known: std::collections::HashMap<PathBuf, FileStamp>,
    /// The built-in tools the stage is offered (a call to another is refused).
    builtin: Vec<&'static str>,
    /// The run's web access, for web_fetch and web_search.
    web: Option<super::web::Web>,
}

/// What a file is on disk, to tell whether it changed since the stage saw it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct FileStamp {
    len: u64,
    modified: Option<std::time::SystemTime>,
    inode: u64,
}

impl FileStamp {
    /// The stamp of the file at `path`; `None` when there is none.
    fn of(path: &Path) -> Option<FileStamp> {
        use std::os::unix::fs::MetadataExt as _;
        let meta = path.symlink_metadata().ok()?;
        Some(FileStamp { len: meta.len(), modified: meta.modified().ok(), inode: meta.ino() })
    }
}

/// How long a hook may take.
pub const HOOK_TIMEOUT: Duration = Duration::from_secs(30);

/// A tool's answer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    pub content: String,
    pub is_error: bool,
}

impl ToolOutput {
    fn ok(content: impl Into<String>) -> ToolOutput {
        ToolOutput { content: content.into(), is_error: false }
    }

    fn error(content: impl Into<String>) -> ToolOutput {
        ToolOutput { content: content.into(), is_error: true }
    }
}

/// The built-in tools, in the order they are offered.
pub const BUILTIN_TOOLS: [&str; 11] = [
    "read_file",
    "read_many_files",
    "write_file",
    "edit_file",
    "apply_patch",
    "list_dir",
    "glob",
    "grep",
    "shell",
    super::web::WEB_FETCH,
    super::web::WEB_SEARCH,
];

/// Whose models a stage's tools are shaped for: each family gets the editing tools its models
/// were trained on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ToolFamily {
    /// OpenAI's models: `apply_patch` instead of `edit_file`.
    OpenAi,
    Anthropic,
    /// Gemini: `edit_file`, and `read_many_files`.
    Gemini,
    /// Any other model (a local server): `edit_file`.
    Other,
}

impl ToolFamily {
    /// The built-in tools a stage of this family gets when its `tools` names none (the web tools
    /// among them only when the stage may use them: see [`super::web::Web::allows`]).
    pub fn default_tools(self) -> Vec<&'static str> {
        BUILTIN_TOOLS
            .into_iter()
            .filter(|tool| match *tool {
                "apply_patch" => self == ToolFamily::OpenAi,
                "edit_file" => self != ToolFamily::OpenAi,
                "read_many_files" => self == ToolFamily::Gemini,
                _ => true,
            })
            .collect()
    }
}

/// The tool definitions sent to the model: every built-in tool.
pub fn definitions() -> Vec<ToolDefinition> {
    let object = |properties: Value, required: &[&str]| json!({"type": "object", "properties": properties, "required": required});
    vec![
        ToolDefinition {
            name: "read_file".into(),
            description: "Read a text file. Lines are numbered. Use offset (first line, from 1) and limit (line count) for parts of large files.".into(),
            parameters: object(
                json!({"path": {"type": "string"}, "offset": {"type": "integer"}, "limit": {"type": "integer"}}),
                &["path"],
            ),
        },
        ToolDefinition {
            name: "read_many_files".into(),
            description: "Read several text files at once (numbered lines, each under a ==> path <== header); at most 20 files and 200,000 characters in all. Prefer it to many read_file calls.".into(),
            parameters: object(json!({"paths": {"type": "array", "items": {"type": "string"}}}), &["paths"]),
        },
        ToolDefinition {
            name: "write_file".into(),
            description: "Create or replace a file with the given content (parent directories are created).".into(),
            parameters: object(json!({"path": {"type": "string"}, "content": {"type": "string"}}), &["path", "content"]),
        },
        ToolDefinition {
            name: "edit_file".into(),
            description: "Replace an exact string in a file. old_string must occur exactly once unless replace_all is true.".into(),
            parameters: object(
                json!({"path": {"type": "string"}, "old_string": {"type": "string"}, "new_string": {"type": "string"},
                       "replace_all": {"type": "boolean"}}),
                &["path", "old_string", "new_string"],
            ),
        },
        ToolDefinition {
            name: "apply_patch".into(),
            description: super::apply_patch::DESCRIPTION.into(),
            parameters: super::apply_patch::parameters(),
        },
        ToolDefinition {
            name: "list_dir".into(),
            description: "List a directory (default: the work directory). Directories end with /.".into(),
            parameters: object(json!({"path": {"type": "string"}}), &[]),
        },
        ToolDefinition {
            name: "glob".into(),
            description: "Find files whose path (relative to the work directory) matches a glob such as src/**/*.rs.".into(),
            parameters: object(json!({"pattern": {"type": "string"}, "path": {"type": "string"}}), &["pattern"]),
        },
        ToolDefinition {
            name: "grep".into(),
            description: "Search file contents with a regular expression; answers path:line:text. Optional path (file or directory) and glob filter.".into(),
            parameters: object(
                json!({"pattern": {"type": "string"}, "path": {"type": "string"}, "glob": {"type": "string"},
                       "case_insensitive": {"type": "boolean"}}),
                &["pattern"],
            ),
        },
        ToolDefinition {
            name: "shell".into(),
            description: "Run a shell command (sh -c) in the work directory. Output is capped; default timeout 120 s (timeout_ms up to 600000).".into(),
            parameters: object(json!({"command": {"type": "string"}, "timeout_ms": {"type": "integer"}}), &["command"]),
        },
        ToolDefinition {
            name: super::web::WEB_FETCH.into(),
            description: super::web_fetch::DESCRIPTION.into(),
            parameters: object(json!({"url": {"type": "string"}}), &["url"]),
        },
        ToolDefinition {
            name: super::web::WEB_SEARCH.into(),
            description: super::web_search::DESCRIPTION.into(),
            parameters: object(json!({"query": {"type": "string"}, "count": {"type": "integer"}}), &["query"]),
        },
    ]
}

impl Toolbox {
    /// Tools working in `work_dir`, which must exist.
    pub fn new(work_dir: &Path, readable: Vec<PathBuf>) -> std::io::Result<Toolbox> {
        let root = work_dir.canonicalize()?;
        let readable = readable.into_iter().filter_map(|dir| dir.canonicalize().ok()).collect();
        Ok(Toolbox {
            root,
            readable,
            tracker: FileTracker::default(),
            background: Vec::new(),
            confinement: crate::sandbox::Confinement::default(),
            hooks: ToolHooks::default(),
            mcp: super::mcp::StageTools::default(),
            permissions: super::permissions::Permissions::default(),
            read_before_write: false,
            known: std::collections::HashMap::new(),
            builtin: ToolFamily::Other
                .default_tools()
                .into_iter()
                .filter(|tool| !super::web::WEB_TOOLS.contains(tool))
                .collect(),
            web: None,
        })
    }

    /// Tools like these for a sub-agent: the same work directory, readable directories, sandbox,
    /// hooks, permissions, built-in tools, web access and read-before-write rule; nothing it has
    /// read or started (and no MCP tools: their servers belong to this toolbox).
    pub fn sibling(&self) -> std::io::Result<Toolbox> {
        let mut sibling = Toolbox::new(&self.root, self.readable.clone())?
            .confined(self.confinement.clone())
            .with_hooks(self.hooks.clone())
            .with_permissions(self.permissions.clone())
            .with_builtin_tools(self.builtin.clone())
            .with_read_before_write(self.read_before_write);
        sibling.web = self.web.clone();
        Ok(sibling)
    }

    /// web_fetch and web_search, when they are among the stage's built-in tools, go through `web`.
    pub fn with_web(mut self, web: super::web::Web) -> Toolbox {
        self.web = Some(web);
        self
    }

    /// Offers these built-in tools (of [`BUILTIN_TOOLS`]) instead of [`ToolFamily::Other`]'s.
    pub fn with_builtin_tools(mut self, tools: Vec<&'static str>) -> Toolbox {
        self.builtin = tools;
        self
    }

    /// The built-in tools the stage is offered.
    pub fn builtin_tools(&self) -> &[&'static str] {
        &self.builtin
    }

    /// Refuses to write an existing file this stage has not read, or that changed on disk since
    /// it did (`read_before_write`).
    pub fn with_read_before_write(mut self, on: bool) -> Toolbox {
        self.read_before_write = on;
        self
    }

    /// Remembers `path` as the stage now knows it (it read or wrote it).
    fn saw(&mut self, path: &Path) {
        if let Some(stamp) = FileStamp::of(path) {
            self.known.insert(path.to_path_buf(), stamp);
        }
    }

    /// Whether the stage may write `path`: a new file always; an existing one only once read as
    /// it is now (with `read_before_write`).
    fn check_known(&self, path: &Path) -> Result<(), String> {
        let Some(now) = FileStamp::of(path).filter(|_| self.read_before_write) else { return Ok(()) };
        let relative = self.relative(path);
        match self.known.get(path) {
            Some(seen) if *seen == now => Ok(()),
            Some(_) => Err(format!(
                "`{relative}` changed on disk since this stage last read it (a command or another program wrote \
                 it); read it again with read_file, then write it"
            )),
            None => Err(format!(
                "`{relative}` exists and this stage has not read it; read it with read_file first, so the change \
                 keeps what is in it (new files can be written without reading)"
            )),
        }
    }

    /// The stage may also call these MCP tools.
    pub fn with_mcp(mut self, tools: super::mcp::StageTools) -> Toolbox {
        self.mcp = tools;
        self
    }

    /// Calls above `permissions` are asked about or denied.
    pub fn with_permissions(mut self, permissions: super::permissions::Permissions) -> Toolbox {
        self.permissions = permissions;
        self
    }

    /// The definitions of the stage's MCP tools.
    pub fn mcp_definitions(&self) -> Vec<ToolDefinition> {
        self.mcp.definitions()
    }

    /// Tool calls run between these hooks.
    pub fn with_hooks(mut self, hooks: ToolHooks) -> Toolbox {
        self.hooks = hooks;
        self
    }

    /// Shell commands run under `confinement`.
    pub fn confined(mut self, confinement: crate::sandbox::Confinement) -> Toolbox {
        self.confinement = confinement;
        self
    }

    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Runs one tool call. `cancel` stops a running shell command.
    pub async fn run(&mut self, name: &str, arguments: &Value) -> ToolOutput {
        if !arguments.is_object() {
            return ToolOutput::error(format!(
                "the arguments of `{name}` must be a JSON object, got: {}",
                crate::llm::http::excerpt(&arguments.to_string(), 200)
            ));
        }
        if let Some(output) = self.mcp.call(name, arguments).await {
            return output;
        }
        if BUILTIN_TOOLS.contains(&name) && !self.builtin.contains(&name) {
            return ToolOutput::error(format!(
                "`{name}` is not one of this stage's tools; they are {}",
                self.builtin.join(", ")
            ));
        }
        let result = match name {
            "read_file" => self.read_file(arguments),
            "read_many_files" => self.read_many_files(arguments),
            "write_file" => self.write_file(arguments),
            "edit_file" => self.edit_file(arguments),
            "apply_patch" => self.apply_patch(arguments),
            "list_dir" => self.list_dir(arguments),
            "glob" => self.glob(arguments),
            "grep" => self.grep(arguments),
            "shell" => self.shell(arguments).await,
            super::web::WEB_FETCH | super::web::WEB_SEARCH => match &self.web {
                Some(web) if name == super::web::WEB_FETCH => web.fetch(arguments).await,
                Some(web) => web.search(arguments).await,
                None => Err(format!("`{name}` has no web access in this stage")),
            },
            other => Err(format!(
                "there is no tool `{other}`; the tools are {}{}",
                self.builtin.join(", "),
                match self.mcp.is_empty() {
                    true => String::new(),
                    false => ", and the MCP tools listed with them".to_string(),
                }
            )),
        };
        match result {
            Ok(content) => ToolOutput::ok(content),
            Err(message) => ToolOutput::error(message),
        }
    }

    /// A path inside the work directory (or, for reading, the readable directories). Refuses
    /// `..` that climbs out and symbolic links that lead out.
    fn resolve(&self, path: &str, for_write: bool) -> Result<PathBuf, String> {
        if path.trim().is_empty() {
            return Err("the path is empty".to_string());
        }
        let given = Path::new(path);
        let joined = if given.is_absolute() { given.to_path_buf() } else { self.root.join(given) };
        let mut normal = PathBuf::new();
        for component in joined.components() {
            match component {
                Component::ParentDir => {
                    normal.pop();
                }
                Component::CurDir => {}
                other => normal.push(other),
            }
        }
        // Follow links on the part that exists.
        let mut existing = normal.clone();
        let mut rest = Vec::new();
        while !existing.exists() {
            match (existing.file_name().map(|n| n.to_os_string()), existing.parent()) {
                (Some(name), Some(parent)) => {
                    rest.push(name);
                    existing = parent.to_path_buf();
                }
                _ => break,
            }
        }
        let mut real = existing.canonicalize().map_err(|e| format!("cannot resolve `{path}`: {e}"))?;
        for name in rest.into_iter().rev() {
            real.push(name);
        }
        let inside = real.starts_with(&self.root);
        let readable = !for_write && self.readable.iter().any(|dir| real.starts_with(dir));
        if inside || readable {
            Ok(real)
        } else {
            Err(format!(
                "`{path}` is outside the work directory {}; tools only work inside it",
                self.root.display()
            ))
        }
    }

    /// The files the stage touched, in at most `budget` characters ([`FileTracker::render`]).
    pub fn files(&self, budget: usize) -> FileList {
        self.tracker.render(budget, &|path| self.root.join(path).symlink_metadata().is_ok())
    }

    fn relative(&self, path: &Path) -> String {
        path.strip_prefix(&self.root).map_or_else(|_| path.display().to_string(), |p| p.display().to_string())
    }

    fn read_file(&mut self, args: &Value) -> Result<String, String> {
        let path = self.resolve(text_arg(args, "path")?, false)?;
        let offset = count_arg(args, "offset").unwrap_or(1).max(1);
        self.read_numbered(&path, offset, count_arg(args, "limit"))
    }

    /// `path`'s lines from `offset` (1-based), at most `limit` of them, numbered; the stage has
    /// read it.
    fn read_numbered(&mut self, path: &Path, offset: usize, limit: Option<usize>) -> Result<String, String> {
        let bytes = crate::regular_file::read(path, crate::regular_file::FileKind::Record)
            .map_err(|e| format!("cannot read `{}`: {e}", self.relative(path)))?;
        let text = String::from_utf8_lossy(&bytes);
        let lines: Vec<&str> = text.lines().collect();
        if offset > lines.len() && !lines.is_empty() {
            // An empty answer would read as an empty file.
            let (count, plural) = (lines.len(), if lines.len() == 1 { "" } else { "s" });
            return Err(format!(
                "`{}` has {count} line{plural}; offset={offset} is past its end (offsets 1 to {count} read it)",
                self.relative(path)
            ));
        }
        let start = (offset - 1).min(lines.len());
        let end = limit.map_or(lines.len(), |l| (start + l).min(lines.len()));
        let mut out = String::new();
        for (index, line) in lines[start..end].iter().enumerate() {
            out.push_str(&format!("{:>6}\t{line}\n", start + index + 1));
        }
        if end < lines.len() {
            out.push_str(&format!("[{} more lines; read on with offset={}]\n", lines.len() - end, end + 1));
        }
        if lines.is_empty() {
            out.push_str("(empty file)\n");
        }
        self.tracker.note(self.relative(path), FileOp::Read, false);
        self.saw(path);
        Ok(out)
    }

    fn read_many_files(&mut self, args: &Value) -> Result<String, String> {
        const MOST_FILES: usize = 20;
        const MOST_CHARS: usize = 200_000;
        let paths: Vec<&str> = args["paths"]
            .as_array()
            .map(|paths| paths.iter().filter_map(Value::as_str).collect())
            .filter(|paths: &Vec<&str>| !paths.is_empty())
            .ok_or("missing argument `paths`: a list of file paths")?;
        if paths.len() > MOST_FILES {
            return Err(format!("{} paths; read_many_files reads at most {MOST_FILES} at once", paths.len()));
        }
        let mut out = String::new();
        for (index, given) in paths.iter().enumerate() {
            let part = match self.resolve(given, false) {
                Ok(path) => {
                    self.read_numbered(&path, 1, None).unwrap_or_else(|error| format!("error: {error}\n"))
                }
                Err(error) => format!("error: {error}\n"),
            };
            if out.len() + part.len() > MOST_CHARS {
                out.push_str(&format!(
                    "[{} more file(s) not read: the answer would pass {MOST_CHARS} characters; read them with \
                     read_file: {}]\n",
                    paths.len() - index,
                    paths[index..].join(", ")
                ));
                break;
            }
            out.push_str(&format!("==> {given} <==\n{part}\n"));
        }
        Ok(out)
    }

    fn write_file(&mut self, args: &Value) -> Result<String, String> {
        let path = self.resolve(text_arg(args, "path")?, true)?;
        let content = text_arg(args, "content")?;
        if let Some(parent) = path.parent() {
            std::fs::create_dir_all(parent)
                .map_err(|e| format!("cannot create {}: {e}", parent.display()))?;
        }
        self.check_known(&path)?;
        let created = path.symlink_metadata().is_err();
        std::fs::write(&path, content)
            .map_err(|e| format!("cannot write `{}`: {e}", self.relative(&path)))?;
        self.saw(&path);
        let relative = self.relative(&path);
        self.tracker.note(relative.clone(), FileOp::Written, created);
        Ok(format!("wrote {} bytes to {relative}", content.len()))
    }

    fn edit_file(&mut self, args: &Value) -> Result<String, String> {
        let path = self.resolve(text_arg(args, "path")?, true)?;
        let old = text_arg(args, "old_string")?;
        let new = text_arg(args, "new_string")?;
        let replace_all = args["replace_all"].as_bool().unwrap_or(false);
        let relative = self.relative(&path);
        if old.is_empty() {
            return Err("old_string is empty; use write_file to create a file".to_string());
        }
        if path.symlink_metadata().is_ok() {
            self.check_known(&path)?;
        }
        let text = crate::regular_file::read_to_string(&path, crate::regular_file::FileKind::Record)
            .map_err(|e| format!("cannot read `{relative}`: {e}"))?;
        let count = text.matches(old).count();
        let edited = match (count, replace_all) {
            (0, _) => return Err(format!("old_string was not found in {relative}; read the file and copy the text exactly")),
            (1, _) | (_, true) => text.replace(old, new),
            (n, false) => {
                return Err(format!(
                    "old_string occurs {n} times in {relative}; add surrounding text to make it unique, or set replace_all"
                ))
            }
        };
        std::fs::write(&path, edited).map_err(|e| format!("cannot write `{relative}`: {e}"))?;
        self.saw(&path);
        self.tracker.note(relative.clone(), FileOp::Edited, false);
        Ok(format!("replaced {count} occurrence{} in {relative}", if count == 1 { "" } else { "s" }))
    }

    /// Applies a v4a patch ([`super::apply_patch`]) whole or not at all: every file's new text is
    /// worked out first (an error names the operation and chunk that did not apply, and nothing
    /// is written), then written beside its file and renamed into place, then the deleted and
    /// moved-away files are removed.
    fn apply_patch(&mut self, args: &Value) -> Result<String, String> {
        use super::apply_patch::{apply_chunks, parse, Operation};
        let operations =
            parse(text_arg(args, "input")?).map_err(|error| format!("the patch was not applied: {error}"))?;
        let refuse = |message: String| format!("the patch was not applied: {message}");
        // (path, new text, created) to write; paths to remove; the summary lines.
        let mut writes: Vec<(PathBuf, String, bool)> = Vec::new();
        let mut removes: Vec<PathBuf> = Vec::new();
        let mut summary: Vec<String> = Vec::new();
        for operation in &operations {
            let path = self.resolve(operation.path(), true).map_err(refuse)?;
            let exists = path.symlink_metadata().is_ok();
            match operation {
                Operation::Add { path: shown, content } => {
                    if exists {
                        return Err(refuse(format!(
                            "Add File {shown}: the file exists; change it with *** Update File (after reading it)"
                        )));
                    }
                    writes.push((path, content.clone(), true));
                    summary.push(format!("A {shown}"));
                }
                Operation::Delete { path: shown } => {
                    if !exists {
                        return Err(refuse(format!("Delete File {shown}: there is no such file")));
                    }
                    self.check_known(&path).map_err(refuse)?;
                    removes.push(path);
                    summary.push(format!("D {shown}"));
                }
                Operation::Update { path: shown, move_to, chunks } => {
                    if !exists {
                        return Err(refuse(format!(
                            "Update File {shown}: there is no such file; create it with *** Add File"
                        )));
                    }
                    self.check_known(&path).map_err(refuse)?;
                    let original =
                        crate::regular_file::read_to_string(&path, crate::regular_file::FileKind::Record)
                            .map_err(|e| refuse(format!("Update File {shown}: cannot read it: {e}")))?;
                    let updated =
                        apply_chunks(&original, shown, chunks).map_err(|error| refuse(error.to_string()))?;
                    match move_to {
                        Some(target) => {
                            let destination = self.resolve(target, true).map_err(refuse)?;
                            if destination.symlink_metadata().is_ok() {
                                return Err(refuse(format!(
                                    "Update File {shown}: *** Move to {target}: that file exists"
                                )));
                            }
                            writes.push((destination, updated, true));
                            removes.push(path);
                            summary.push(format!("R {shown} -> {target}"));
                        }
                        None => {
                            writes.push((path, updated, false));
                            summary.push(format!("M {shown}"));
                        }
                    }
                }
            }
        }
        // Every new text goes beside its file first: a failure here leaves the work directory as it was.
        let mut staged: Vec<(PathBuf, PathBuf, bool)> = Vec::new();
        for (index, (path, text, created)) in writes.iter().enumerate() {
            let result = path.parent().map_or(Ok(()), std::fs::create_dir_all).and_then(|()| {
                let name =
                    path.file_name().map(|name| name.to_string_lossy().into_owned()).unwrap_or_default();
                let temp = path.with_file_name(format!(".{name}.fabro-patch-{}-{index}", std::process::id()));
                std::fs::write(&temp, text).map(|()| temp)
            });
            match result {
                Ok(temp) => staged.push((temp, path.clone(), *created)),
                Err(error) => {
                    for (temp, _, _) in &staged {
                        let _ = std::fs::remove_file(temp);
                    }
                    return Err(refuse(format!("cannot write `{}`: {error}", self.relative(path))));
                }
            }
        }
        for (temp, path, created) in &staged {
            std::fs::rename(temp, path)
                .map_err(|e| format!("cannot write `{}`: {e}", self.relative(path)))?;
            self.saw(path);
            let op = if *created { FileOp::Written } else { FileOp::Edited };
            self.tracker.note(self.relative(path), op, *created);
        }
        for path in &removes {
            std::fs::remove_file(path)
                .map_err(|e| format!("cannot delete `{}`: {e}", self.relative(path)))?;
            self.known.remove(path);
            self.tracker.note(self.relative(path), FileOp::Edited, false);
        }
        Ok(format!("applied the patch:\n{}", summary.join("\n")))
    }

    fn list_dir(&mut self, args: &Value) -> Result<String, String> {
        let path = self.resolve(args["path"].as_str().unwrap_or("."), false)?;
        let entries =
            std::fs::read_dir(&path).map_err(|e| format!("cannot list `{}`: {e}", self.relative(&path)))?;
        let mut names: Vec<String> = entries
            .flatten()
            .map(|entry| {
                let name = entry.file_name().to_string_lossy().into_owned();
                if entry.file_type().is_ok_and(|t| t.is_dir()) {
                    name + "/"
                } else {
                    name
                }
            })
            .collect();
        names.sort();
        Ok(capped_list(names, LIST_CAP, "(empty directory)"))
    }

    fn glob(&mut self, args: &Value) -> Result<String, String> {
        let pattern = text_arg(args, "pattern")?;
        let matcher = globset::GlobBuilder::new(pattern)
            .literal_separator(true)
            .build()
            .map_err(|e| format!("invalid glob `{pattern}`: {e}"))?
            .compile_matcher();
        let base = self.resolve(args["path"].as_str().unwrap_or("."), false)?;
        let mut found = Vec::new();
        for entry in walk(&base) {
            let relative = entry.path().strip_prefix(&base).unwrap_or(entry.path());
            if entry.file_type().is_file() && matcher.is_match(relative) {
                found.push(self.relative(entry.path()));
            }
        }
        found.sort();
        Ok(capped_list(found, LIST_CAP, "(no files match)"))
    }

    fn grep(&mut self, args: &Value) -> Result<String, String> {
        let pattern = text_arg(args, "pattern")?;
        let regex = regex::RegexBuilder::new(pattern)
            .case_insensitive(args["case_insensitive"].as_bool().unwrap_or(false))
            .size_limit(1 << 22)
            .build()
            .map_err(|e| format!("invalid regular expression: {e}"))?;
        let filter = match args["glob"].as_str() {
            Some(glob) => Some(
                globset::Glob::new(glob)
                    .map_err(|e| format!("invalid glob `{glob}`: {e}"))?
                    .compile_matcher(),
            ),
            None => None,
        };
        let base = self.resolve(args["path"].as_str().unwrap_or("."), false)?;
        let mut matches = Vec::new();
        let mut more = false;
        'files: for entry in walk(&base) {
            if !entry.file_type().is_file() || entry.metadata().map_or(true, |m| m.len() > GREP_MAX_FILE) {
                continue;
            }
            if let Some(filter) = &filter {
                let name = entry.path().file_name().map(Path::new).unwrap_or(entry.path());
                let relative = entry.path().strip_prefix(&base).unwrap_or(entry.path());
                if !filter.is_match(relative) && !filter.is_match(name) {
                    continue;
                }
            }
            let Ok(bytes) = std::fs::read(entry.path()) else { continue };
            if bytes.contains(&0) {
                continue; // binary
            }
            let text = String::from_utf8_lossy(&bytes);
            for (number, line) in text.lines().enumerate() {
                if regex.is_match(line) {
                    if matches.len() == GREP_CAP {
                        more = true;
                        break 'files;
                    }
                    let line: String = line.chars().take(300).collect();
                    matches.push(format!("{}:{}:{line}", self.relative(entry.path()), number + 1));
                }
            }
        }
        if matches.is_empty() {
            return Ok("(no matches)".to_string());
        }
        let mut out = matches.join("\n");
        if more {
            out.push_str(&format!("\n[stopped at {GREP_CAP} matches; narrow the pattern or path]"));
        }
        Ok(out)
    }

    /// `sh -c SCRIPT` in the work directory, in the stage's sandbox, stdout and stderr piped,
    /// without the variables that hold secrets (the sandbox's command leaves them out).
    pub(super) fn sh(&self, script: &str) -> tokio::process::Command {
        let readable: Vec<&Path> = self.readable.iter().map(PathBuf::as_path).collect();
        let mut process = self.confinement.command(
            "sh".as_ref(),
            &["-c".as_ref(), script.as_ref()],
            &self.root,
            &[],
            &readable,
        );
        process.stdout(Stdio::piped()).stderr(Stdio::piped()).kill_on_drop(true);
        process
    }

    async fn shell(&mut self, args: &Value) -> Result<String, String> {
        let command = text_arg(args, "command")?;
        let timeout = count_arg(args, "timeout_ms")
            .map_or(SHELL_DEFAULT_TIMEOUT, |ms| Duration::from_millis(ms as u64))
            .min(SHELL_MAX_TIMEOUT);
        let ran = match run_collected(self.sh(command), None, timeout).await {
            Ok(ran) => ran,
            Err(Unfinished::NotStarted(error)) => return Err(format!("cannot start sh: {error}")),
            Err(Unfinished::TimedOut) => {
                return Err(format!("the command timed out after {}s and was killed", timeout.as_secs_f64()))
            }
        };
        // What the command left running in the background lives until the stage ends; a group
        // that emptied is let go at once, so a long stage does not hoard thousands of them.
        let mut group = ran.group;
        if group.has_members() {
            self.background.push(group);
        } else {
            group.release();
        }
        let (out, err, dropped) = (ran.out, ran.err, ran.dropped);
        let code = match ran.status {
            Ok(status) => {
                status.code().map_or_else(|| "killed by a signal".to_string(), |c| format!("exit code {c}"))
            }
            Err(e) => format!("unknown exit ({e})"),
        };
        let mut text = String::from_utf8_lossy(&out).into_owned();
        let err = String::from_utf8_lossy(&err);
        if !err.trim().is_empty() {
            text.push_str("\n[stderr]\n");
            text.push_str(&err);
        }
        if dropped > 0 {
            text.push_str(&format!(
                "\n[{dropped} more bytes of output were not kept: each stream keeps its first {} MiB]",
                SHELL_STREAM_CAP >> 20
            ));
        }
        // The whole output goes back: a long one is offloaded to the artifact store by the
        // agent loop, with a note on how to page it, instead of losing its middle here.
        Ok(format!("{code}\n{text}"))
    }
}

/// A `sh` process that ran to its end: its exit, what it printed, and its process group (whatever
/// it left running; killed when dropped).
pub(crate) struct Collected {
    pub status: std::io::Result<std::process::ExitStatus>,
    pub out: Vec<u8>,
    pub err: Vec<u8>,
    /// Bytes of output past [`SHELL_STREAM_CAP`] that were read and dropped.
    dropped: u64,
    group: ProcessGroup,
}

/// Why a process did not run to its end.
pub(crate) enum Unfinished {
    NotStarted(std::io::Error),
    /// Past its time limit: killed with its group.
    TimedOut,
}

/// Starts `process` (stdout and stderr piped, as [`Toolbox::sh`] sets them) leading its own
/// process group, writes `input` to its stdin (or gives it none), and collects both streams and
/// its exit within `timeout`.
pub(crate) async fn run_collected(
    mut process: tokio::process::Command,
    input: Option<&str>,
    timeout: Duration,
) -> Result<Collected, Unfinished> {
    use tokio::io::AsyncWriteExt;
    process.stdin(if input.is_some() { Stdio::piped() } else { Stdio::null() });
    let (mut child, group) = ProcessGroup::spawn(&mut process).map_err(Unfinished::NotStarted)?;
    let (mut stdin, mut stdout, mut stderr) = (child.stdin.take(), child.stdout.take(), child.stderr.take());
    let work = async {
        let feed = async {
            if let (Some(pipe), Some(input)) = (stdin.as_mut(), input) {
                // A process that does not read its input closes the pipe early: not an error.
                let _ = pipe.write_all(input.as_bytes()).await;
            }
            drop(stdin.take());
        };
        let (mut out, mut err) = (Vec::new(), Vec::new());
        let ((), dropped_out, dropped_err) = tokio::join!(
            feed,
            read_bounded(stdout.as_mut(), &mut out),
            read_bounded(stderr.as_mut(), &mut err)
        );
        (child.wait().await, out, err, dropped_out + dropped_err)
    };
    match tokio::time::timeout(timeout, work).await {
        Ok((status, out, err, dropped)) => Ok(Collected { status, out, err, dropped, group }),
        // Dropping the group kills it.
        Err(_) => Err(Unfinished::TimedOut),
    }
}

/// Reads `pipe` into `kept` up to [`SHELL_STREAM_CAP`] bytes, then reads on without keeping (so
/// the command never blocks on a full pipe); returns how many bytes were not kept.
async fn read_bounded(pipe: Option<&mut (impl tokio::io::AsyncRead + Unpin)>, kept: &mut Vec<u8>) -> u64 {
    let Some(pipe) = pipe else { return 0 };
    let _ = (&mut *pipe).take(SHELL_STREAM_CAP as u64).read_to_end(kept).await;
    tokio::io::copy(pipe, &mut tokio::io::sink()).await.unwrap_or(0)
}

/// Files under `base`, skipping `.git` and not following links.
fn walk(base: &Path) -> impl Iterator<Item = walkdir::DirEntry> {
    walkdir::WalkDir::new(base)
        .follow_links(false)
        .into_iter()
        .filter_entry(|entry| entry.file_name() != ".git")
        .flatten()
        .take(200_000)
}

fn text_arg<'a>(args: &'a Value, key: &str) -> Result<&'a str, String> {
    args[key].as_str().ok_or_else(|| format!("missing string argument `{key}`"))
}

fn count_arg(args: &Value, key: &str) -> Option<usize> {
    args[key].as_u64().and_then(|n| usize::try_from(n).ok())
}

fn capped_list(items: Vec<String>, cap: usize, empty: &str) -> String {
    if items.is_empty() {
        return empty.to_string();
    }
    let total = items.len();
    let mut out = items.into_iter().take(cap).collect::<Vec<_>>().join("\n");
    if total > cap {
        out.push_str(&format!("\n[{} more not shown]", total - cap));
    }
    out
}

/// Keeps the head and tail of `text` within `cap` characters, saying how much was cut.
pub fn cap_middle(text: &str, cap: usize) -> String {
    let total = text.chars().count();
    if total <= cap {
        return text.to_string();
    }
    let half = cap / 2;
    let head: String = text.chars().take(half).collect();
    let tail: String = text.chars().skip(total - half).collect();
    format!("{head}\n[... {} characters cut ...]\n{tail}", total - 2 * half)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn toolbox() -> (tempfile::TempDir, Toolbox) {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("work/src")).unwrap();
        std::fs::write(dir.path().join("work/src/lib.rs"), "fn a() {}\nfn b() {}\n").unwrap();
        std::fs::write(dir.path().join("secret.txt"), "outside").unwrap();
        let toolbox = Toolbox::new(&dir.path().join("work"), vec![]).unwrap();
        (dir, toolbox)
    }

    #[tokio::test]
    async fn files_are_read_written_and_edited_inside_the_work_dir() {
        let (_dir, mut tools) = toolbox();
        let read = tools.run("read_file", &json!({"path": "src/lib.rs", "offset": 2})).await;
        assert_eq!(read.content, "     2\tfn b() {}\n");
        let past = tools.run("read_file", &json!({"path": "src/lib.rs", "offset": 3})).await;
        assert!(past.is_error, "{past:?}");
        assert!(past.content.contains("`src/lib.rs` has 2 lines; offset=3 is past its end"), "{past:?}");
        let wrote = tools.run("write_file", &json!({"path": "docs/new.md", "content": "hello"})).await;
        assert!(!wrote.is_error, "{wrote:?}");
        let edit = tools
            .run("edit_file", &json!({"path": "src/lib.rs", "old_string": "fn", "new_string": "pub fn"}))
            .await;
        assert!(edit.is_error && edit.content.contains("occurs 2 times"), "{edit:?}");
        let edit = tools
            .run("edit_file", &json!({"path": "src/lib.rs", "old_string": "fn b()", "new_string": "fn c()"}))
            .await;
        assert!(!edit.is_error);
        assert_eq!(
            std::fs::read_to_string(tools.root().join("src/lib.rs")).unwrap(),
            "fn a() {}\nfn c() {}\n"
        );
        assert_eq!(tools.tracker.changed(), vec!["docs/new.md".to_string(), "src/lib.rs".to_string()]);
        let files = tools.files(1_000).text;
        assert!(files.contains("- docs/new.md (created)\n- src/lib.rs (edited)"), "{files}");
    }

    #[tokio::test]
    async fn an_existing_file_is_written_only_once_read_as_it_is_now() {
        let (dir, tools) = toolbox();
        let mut tools = tools.with_read_before_write(true);
        let edit = json!({"path": "src/lib.rs", "old_string": "fn a", "new_string": "fn z"});
        let refused = tools.run("edit_file", &edit).await;
        assert!(refused.is_error);
        assert!(
            refused.content.contains("`src/lib.rs` exists and this stage has not read it"),
            "{}",
            refused.content
        );
        let overwrite = json!({"path": "src/lib.rs", "content": "gone"});
        assert!(tools.run("write_file", &overwrite).await.is_error);
        // New files need no reading, and the stage knows what it wrote.
        assert!(!tools.run("write_file", &json!({"path": "new.txt", "content": "1"})).await.is_error);
        assert!(!tools.run("write_file", &json!({"path": "new.txt", "content": "2"})).await.is_error);
        // A partial read counts; then the edit goes through, and so does the next.
        assert!(!tools.run("read_file", &json!({"path": "src/lib.rs", "limit": 1})).await.is_error);
        assert!(!tools.run("edit_file", &edit).await.is_error);
        let again = json!({"path": "src/lib.rs", "old_string": "fn b", "new_string": "fn y"});
        assert!(!tools.run("edit_file", &again).await.is_error);
        // Changed behind the stage's back (a command): read it again first.
        let changed = "fn changed() {}\nfn other() {}\n";
        std::fs::write(dir.path().join("work/src/lib.rs"), changed).unwrap();
        let stale = tools.run("write_file", &overwrite).await;
        assert!(stale.content.contains("changed on disk since this stage last read it"), "{}", stale.content);
        assert_eq!(std::fs::read_to_string(dir.path().join("work/src/lib.rs")).unwrap(), changed);
        assert!(!tools.run("read_file", &json!({"path": "src/lib.rs"})).await.is_error);
        assert!(!tools.run("write_file", &overwrite).await.is_error);
        // Off: as before.
        let (_dir, mut off) = toolbox();
        assert!(!off.run("edit_file", &edit).await.is_error);
    }

    #[tokio::test]
    async fn a_patch_applies_whole_or_not_at_all_and_only_offered_tools_run() {
        let (dir, tools) = toolbox();
        let mut tools =
            tools.with_builtin_tools(ToolFamily::OpenAi.default_tools()).with_read_before_write(true);
        let work = dir.path().join("work");
        std::fs::write(work.join("old.txt"), "bye\n").unwrap();
        let patch = |body: &str| json!({"input": format!("*** Begin Patch\n{body}*** End Patch\n")});
        let update = "*** Update File: src/lib.rs\n@@\n-fn a() {}\n+pub fn a() {}\n fn b() {}\n";
        // Not read yet: refused, nothing written.
        let refused =
            tools.run("apply_patch", &patch(&format!("*** Add File: docs/new.md\n+hi\n{update}"))).await;
        assert!(refused.is_error && refused.content.contains("has not read it"), "{}", refused.content);
        assert!(!work.join("docs/new.md").exists());
        assert!(!tools.run("read_file", &json!({"path": "src/lib.rs"})).await.is_error);
        assert!(!tools.run("read_file", &json!({"path": "old.txt"})).await.is_error);
        // A chunk that does not apply: the other operations are not applied either.
        let bad = "*** Update File: src/lib.rs\n@@\n-fn missing() {}\n+fn x() {}\n";
        let failed =
            tools.run("apply_patch", &patch(&format!("*** Add File: docs/new.md\n+hi\n{bad}"))).await;
        assert!(failed.is_error && failed.content.contains("chunk 1"), "{}", failed.content);
        assert!(!work.join("docs/new.md").exists());
        let leftovers: Vec<_> =
            walk(&work).filter(|entry| entry.file_name().to_string_lossy().contains("fabro-patch")).collect();
        assert!(leftovers.is_empty());
        let done = tools
            .run(
                "apply_patch",
                &patch(&format!("*** Add File: docs/new.md\n+hi\n{update}*** Delete File: old.txt\n")),
            )
            .await;
        assert!(!done.is_error, "{}", done.content);
        assert_eq!(done.content, "applied the patch:\nA docs/new.md\nM src/lib.rs\nD old.txt");
        assert_eq!(std::fs::read_to_string(work.join("docs/new.md")).unwrap(), "hi\n");
        assert_eq!(std::fs::read_to_string(work.join("src/lib.rs")).unwrap(), "pub fn a() {}\nfn b() {}\n");
        assert!(!work.join("old.txt").exists());
        // The stage knows what it patched: a second patch needs no new read.
        let again = patch("*** Update File: src/lib.rs\n@@\n-fn b() {}\n+fn c() {}\n");
        assert!(!tools.run("apply_patch", &again).await.is_error);
        // edit_file is not an OpenAI model's tool.
        let edit = tools
            .run("edit_file", &json!({"path": "src/lib.rs", "old_string": "c", "new_string": "d"}))
            .await;
        assert!(
            edit.is_error && edit.content.contains("`edit_file` is not one of this stage's tools"),
            "{}",
            edit.content
        );
        assert_eq!(
            ToolFamily::Gemini.default_tools(),
            [
                "read_file",
                "read_many_files",
                "write_file",
                "edit_file",
                "list_dir",
                "glob",
                "grep",
                "shell",
                "web_fetch",
                "web_search"
            ]
        );
        // A toolbox given no web access offers no web tool.
        let (_dir, bare) = toolbox();
        assert!(!bare.builtin_tools().contains(&"web_fetch"), "{:?}", bare.builtin_tools());
    }

    #[tokio::test]
    async fn read_many_files_reads_each_with_numbered_lines() {
        let (dir, tools) = toolbox();
        let mut tools =
            tools.with_builtin_tools(ToolFamily::Gemini.default_tools()).with_read_before_write(true);
        std::fs::write(dir.path().join("work/b.txt"), "one\ntwo\n").unwrap();
        let read = tools
            .run("read_many_files", &json!({"paths": ["src/lib.rs", "b.txt", "nope.txt", "../secret.txt"]}))
            .await;
        assert!(!read.is_error);
        assert!(
            read.content.starts_with(
                "==> src/lib.rs <==\n     1\tfn a() {}\n     2\tfn b() {}\n\n==> b.txt <==\n     1\tone\n"
            ),
            "{}",
            read.content
        );
        assert!(read.content.contains("==> nope.txt <==\nerror: cannot read `nope.txt`"), "{}", read.content);
        assert!(
            read.content
                .contains("==> ../secret.txt <==\nerror: `../secret.txt` is outside the work directory"),
            "{}",
            read.content
        );
        // Each file read counts as read.
        assert!(!tools.run("write_file", &json!({"path": "b.txt", "content": "x"})).await.is_error);
        assert!(tools.run("read_many_files", &json!({"paths": []})).await.is_error);
    }

    #[tokio::test]
    async fn paths_outside_are_refused() {
        let (dir, mut tools) = toolbox();
        for path in ["../secret.txt", "/etc/passwd", "src/../../secret.txt"] {
            let out = tools.run("read_file", &json!({"path": path})).await;
            assert!(out.is_error && out.content.contains("outside the work directory"), "{path}: {out:?}");
        }
        std::os::unix::fs::symlink(dir.path(), tools.root().join("escape")).unwrap();
        let out = tools.run("write_file", &json!({"path": "escape/x.txt", "content": "no"})).await;
        assert!(out.is_error, "{out:?}");
        assert!(!dir.path().join("x.txt").exists());
        let out = tools.run("read_file", &json!("not an object")).await;
        assert!(out.is_error);
    }

    #[tokio::test]
    async fn listing_globbing_and_grepping() {
        let (_dir, mut tools) = toolbox();
        assert_eq!(tools.run("list_dir", &json!({})).await.content, "src/");
        assert_eq!(tools.run("glob", &json!({"pattern": "**/*.rs"})).await.content, "src/lib.rs");
        assert_eq!(tools.run("grep", &json!({"pattern": "fn b"})).await.content, "src/lib.rs:2:fn b() {}");
        assert_eq!(
            tools
                .run("grep", &json!({"pattern": "FN A", "case_insensitive": true, "glob": "*.rs"}))
                .await
                .content,
            "src/lib.rs:1:fn a() {}"
        );
        assert!(tools.run("grep", &json!({"pattern": "("})).await.is_error);
    }

    #[tokio::test]
    async fn shell_runs_in_the_work_dir_with_a_timeout_and_no_keys() {
        let (_dir, mut tools) = toolbox();
        let out = tools.run("shell", &json!({"command": "pwd; echo oops >&2; exit 3"})).await;
        assert!(out.content.starts_with("exit code 3\n"), "{out:?}");
        assert!(
            out.content.contains(tools.root().to_str().unwrap()) && out.content.contains("[stderr]\noops")
        );
        let started = std::time::Instant::now();
        let out = tools.run("shell", &json!({"command": "sleep 30", "timeout_ms": 200})).await;
        assert!(out.is_error && out.content.contains("timed out"), "{out:?}");
        assert!(started.elapsed() < Duration::from_secs(10));
        // Long output comes back whole (the agent loop offloads it); past the stream cap it is
        // read and dropped, never kept.
        let out = tools.run("shell", &json!({"command": "head -c 100000 /dev/zero | tr '\\0' a"})).await;
        assert_eq!(out.content.len(), "exit code 0\n".len() + 100_000);
        let over = SHELL_STREAM_CAP + 1000;
        let out = tools.run("shell", &json!({"command": format!("head -c {over} /dev/zero")})).await;
        assert!(out
            .content
            .ends_with("[1000 more bytes of output were not kept: each stream keeps its first 16 MiB]"));
    }
}
