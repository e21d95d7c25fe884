//! `fabro lsp`: a Language Server Protocol server over stdio for workflow files, built on
//! rust-analyzer's `lsp-server` (the transport) and `lsp-types`.
//!
//! - Diagnostics as you type: the open buffer (never the file on disk) is analysed a short while
//!   after the last change ([`DEBOUNCE`]), with the rules, severities, positions and messages of
//!   `fabro validate`; child workflows and prompt files resolve from the buffer's path, and a
//!   syntax error leaves the findings of the rest where the parser recovers.
//! - Quick fixes: every finding whose fix is mechanical, as a code action editing the buffer.
//! - Hover, completion, definition, references, rename, document symbols, links to the files a
//!   workflow names, and formatting (normalized DOT's layout, comments kept).
//!
//! A request or notification that fails, even by a bug, is answered with an error and the server
//! goes on; it exits when the client says `exit`, when its input ends, and when the client's
//! process (`processId`) is gone.

pub mod actions;
pub mod analysis;
pub mod completion;
pub mod document;
pub mod hover;
pub mod navigation;

use std::collections::HashMap;
use std::panic::AssertUnwindSafe;
use std::sync::Arc;
use std::time::{Duration, Instant};

use lsp_server::{Connection, ErrorCode, Message, Notification, Request, RequestId, Response};
use lsp_types::notification::{self as notifications, Notification as _};
use lsp_types::request::{self as requests, Request as _};
use lsp_types::{
    CodeActionProviderCapability, CompletionOptions, DocumentLink, DocumentLinkOptions, DocumentSymbol,
    DocumentSymbolResponse, GotoDefinitionResponse, HoverContents, HoverProviderCapability, Location,
    MarkupContent, MarkupKind, OneOf, PrepareRenameResponse, PublishDiagnosticsParams, RenameOptions,
    ServerCapabilities, SymbolKind, TextDocumentSyncCapability, TextDocumentSyncKind, TextEdit, Url,
    WorkspaceEdit,
};
use serde::de::DeserializeOwned;

use analysis::Analysis;
use document::Document;

/// How long after the last change a buffer is analysed.
pub const DEBOUNCE: Duration = Duration::from_millis(50);

/// How often the server checks that the client's process is still there.
const CLIENT_CHECK: Duration = Duration::from_secs(3);

/// Why the server stopped other than by the client's `exit`.
#[derive(Debug, thiserror::Error)]
pub enum LspError {
    #[error("the language server's connection failed: {0}")]
    Protocol(#[from] lsp_server::ProtocolError),
    #[error("the language server's input or output failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("cannot encode the server's capabilities: {0}")]
    Json(#[from] serde_json::Error),
}

/// Serves one client on stdin and stdout until it exits.
pub fn serve_stdio() -> Result<(), LspError> {
    let (connection, io_threads) = Connection::stdio();
    serve(connection)?;
    io_threads.join()?;
    Ok(())
}

/// What the server offers.
pub fn capabilities() -> ServerCapabilities {
    ServerCapabilities {
        text_document_sync: Some(TextDocumentSyncCapability::Kind(TextDocumentSyncKind::INCREMENTAL)),
        hover_provider: Some(HoverProviderCapability::Simple(true)),
        completion_provider: Some(CompletionOptions {
            trigger_characters: Some(["=", ">", "[", ",", "\"", "."].map(String::from).to_vec()),
            ..Default::default()
        }),
        definition_provider: Some(OneOf::Left(true)),
        references_provider: Some(OneOf::Left(true)),
        rename_provider: Some(OneOf::Right(RenameOptions {
            prepare_provider: Some(true),
            work_done_progress_options: Default::default(),
        })),
        document_symbol_provider: Some(OneOf::Left(true)),
        document_formatting_provider: Some(OneOf::Left(true)),
        code_action_provider: Some(CodeActionProviderCapability::Simple(true)),
        document_link_provider: Some(DocumentLinkOptions {
            resolve_provider: Some(false),
            work_done_progress_options: Default::default(),
        }),
        ..Default::default()
    }
}

/// Serves one client on `connection` until it exits (or its input ends).
pub fn serve(connection: Connection) -> Result<(), LspError> {
    let result = serde_json::to_value(lsp_types::InitializeResult {
        capabilities: capabilities(),
        server_info: Some(lsp_types::ServerInfo {
            name: "fabro".to_string(),
            version: Some(env!("CARGO_PKG_VERSION").to_string()),
        }),
    })?;
    let handshake = connection
        .initialize_start()
        .and_then(|(id, params)| connection.initialize_finish(id, result).map(|()| params));
    let params = match handshake {
        Ok(params) => params,
        // The client went away before the handshake ended: nothing to serve.
        Err(error) if error.channel_is_disconnected() => return Ok(()),
        Err(error) => return Err(error.into()),
    };
    let client_pid = params.get("processId").and_then(serde_json::Value::as_u64);
    if let Some(request) = watch_files_request(&params) {
        if connection.sender.send(Message::Request(request)).is_err() {
            return Ok(()); // the client went away after the handshake
        }
    }
    let mut server =
        Server::new(workspace_root(&params).unwrap_or_else(|| std::env::current_dir().unwrap_or_default()));
    let mut last_check = Instant::now();
    loop {
        let wait = server
            .next_due()
            .map(|due| due.saturating_duration_since(Instant::now()))
            .unwrap_or(CLIENT_CHECK);
        let message = match connection.receiver.recv_timeout(wait.min(CLIENT_CHECK)) {
            Ok(message) => Some(message),
            Err(crossbeam_timeout) if crossbeam_timeout.is_timeout() => None,
            Err(_) => return Ok(()), // the input ended: the client is gone
        };
        if last_check.elapsed() >= CLIENT_CHECK {
            last_check = Instant::now();
            if client_pid.is_some_and(|pid| !process_exists(pid)) {
                return Ok(());
            }
        }
        let outgoing = match message {
            None => Vec::new(),
            Some(Message::Request(request)) => {
                if connection.handle_shutdown(&request)? {
                    return Ok(());
                }
                let (response, more) = server.request(request);
                std::iter::once(Message::Response(response)).chain(more).collect()
            }
            Some(Message::Notification(notification)) => server.notification(notification),
            Some(Message::Response(_)) => Vec::new(),
        };
        for message in outgoing.into_iter().chain(server.publish_due()) {
            if connection.sender.send(message).is_err() {
                return Ok(());
            }
        }
    }
}

/// The directory the editor has open (its first workspace folder, else its root): where a run of
/// its workflows would work, and so where their project settings are found.
fn workspace_root(params: &serde_json::Value) -> Option<std::path::PathBuf> {
    let folder = params
        .get("workspaceFolders")
        .and_then(|folders| folders.get(0))
        .and_then(|folder| folder.get("uri"));
    let uri = folder.or_else(|| params.get("rootUri")).and_then(serde_json::Value::as_str);
    let from_uri = uri.and_then(|uri| Url::parse(uri).ok()).and_then(|uri| uri.to_file_path().ok());
    from_uri
        .or_else(|| params.get("rootPath").and_then(serde_json::Value::as_str).map(std::path::PathBuf::from))
}

/// When the client can watch files for the server (dynamic registration), the request that asks
/// it to report every file of the workspace that changes: a buffer is analysed again when a file
/// it reads (a prompt file, a child workflow, a settings layer) changes.
fn watch_files_request(params: &serde_json::Value) -> Option<Request> {
    let watched = &params["capabilities"]["workspace"]["didChangeWatchedFiles"]["dynamicRegistration"];
    if watched != &serde_json::Value::Bool(true) {
        return None;
    }
    let watcher = lsp_types::FileSystemWatcher {
        glob_pattern: lsp_types::GlobPattern::String("**/*".into()),
        kind: None,
    };
    let options = lsp_types::DidChangeWatchedFilesRegistrationOptions { watchers: vec![watcher] };
    let registration = lsp_types::Registration {
        id: "fabro-watched-files".to_string(),
        method: notifications::DidChangeWatchedFiles::METHOD.to_string(),
        register_options: serde_json::to_value(options).ok(),
    };
    let params = lsp_types::RegistrationParams { registrations: vec![registration] };
    Some(Request {
        id: RequestId::from("fabro-watch-files".to_string()),
        method: requests::RegisterCapability::METHOD.to_string(),
        params: serde_json::to_value(params).ok()?,
    })
}

/// `path` with its `.` and `..` steps resolved by name (the file may not exist yet): a prompt
/// written `@../prompts/plan.md` is the file the editor reports as `/project/prompts/plan.md`.
fn lexically_normal(path: &std::path::Path) -> std::path::PathBuf {
    use std::path::Component;
    let mut normal = std::path::PathBuf::new();
    for component in path.components() {
        match component {
            Component::CurDir => {}
            Component::ParentDir => {
                normal.pop();
            }
            other => normal.push(other),
        }
    }
    normal
}

fn process_exists(pid: u64) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else { return true };
    // SAFETY: kill with signal 0 sends nothing; it only asks whether the process exists.
    let result = unsafe { libc::kill(pid, 0) };
    result == 0 || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH)
}

/// The open buffers and what waits to be analysed.
pub struct Server {
    documents: HashMap<Url, Document>,
    /// Buffers changed since their last analysis, with when to analyse them.
    due: HashMap<Url, Instant>,
    /// Where a run of the workflows would work: where their project's settings are found.
    work_dir: std::path::PathBuf,
}

impl Default for Server {
    /// A server working in the current directory.
    fn default() -> Self {
        Server::new(std::env::current_dir().unwrap_or_default())
    }
}

impl Server {
    pub fn new(work_dir: std::path::PathBuf) -> Self {
        Server { documents: HashMap::new(), due: HashMap::new(), work_dir }
    }

    fn next_due(&self) -> Option<Instant> {
        self.due.values().min().copied()
    }

    /// Analyses the buffers whose debounce is over and publishes their diagnostics.
    pub fn publish_due(&mut self) -> Vec<Message> {
        let now = Instant::now();
        let ready: Vec<Url> =
            self.due.iter().filter(|(_, due)| **due <= now).map(|(uri, _)| uri.clone()).collect();
        ready.into_iter().filter_map(|uri| self.analyse(&uri)).collect()
    }

    /// Analyses a buffer now (when stale) and returns the diagnostics to publish.
    fn analyse(&mut self, uri: &Url) -> Option<Message> {
        self.due.remove(uri);
        let document = self.documents.get_mut(uri)?;
        if document.analysis.is_some() {
            return None;
        }
        let earlier = document.parsed.take();
        let work_dir = &self.work_dir;
        let analysed = guarded(AssertUnwindSafe(|| {
            // Read at every analysis: a change to a settings file shows at the next keystroke.
            let settings = analysis::settings_for(work_dir, &document.path);
            let (mut analysis, tree) =
                analysis::analyze(&document.path, &document.text, &settings.loader, earlier);
            analysis.findings.extend(settings.error);
            let base = document.path.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
            let mut reads = settings.files;
            reads.extend(navigation::linked_files(&analysis, &base).into_iter().map(|(_, path)| path));
            let reads = reads.iter().map(|path| lexically_normal(path)).collect();
            (analysis, tree, reads)
        }));
        let analysis = match analysed {
            Ok((analysis, tree, reads)) => {
                document.parsed = tree;
                document.reads = reads;
                Arc::new(analysis)
            }
            Err(message) => Arc::new(Analysis {
                findings: vec![crate::diagnostic::Diagnostic::error("internal", message)],
                checked: None,
                index: Default::default(),
            }),
        };
        document.analysis = Some(analysis.clone());
        if analysis.checked.is_some() {
            // The analysis it replaces is the size of the buffer's graph: freeing it is off the
            // path from the keystroke to the diagnostics.
            let replaced = document.last_loaded.replace(analysis.clone());
            let _ = std::thread::Builder::new().name("fabro-lsp-free".into()).spawn(move || drop(replaced));
        }
        let diagnostics =
            analysis.findings.iter().map(|finding| actions::to_lsp(document, finding)).collect();
        let params =
            PublishDiagnosticsParams { uri: uri.clone(), diagnostics, version: Some(document.version) };
        Some(Message::Notification(Notification::new(
            notifications::PublishDiagnostics::METHOD.to_string(),
            params,
        )))
    }

    /// Handles a notification; returns what to send (diagnostics of an opened buffer).
    pub fn notification(&mut self, notification: Notification) -> Vec<Message> {
        let result = guarded(AssertUnwindSafe(|| self.notification_inner(notification)));
        result.unwrap_or_default()
    }

    fn notification_inner(&mut self, notification: Notification) -> Vec<Message> {
        match notification.method.as_str() {
            notifications::DidOpenTextDocument::METHOD => {
                let Some(params) = parse::<lsp_types::DidOpenTextDocumentParams>(notification.params) else {
                    return Vec::new();
                };
                let document = params.text_document;
                let uri = document.uri.clone();
                self.documents
                    .insert(uri.clone(), Document::new(document.uri, document.version, document.text));
                self.analyse(&uri).into_iter().collect()
            }
            notifications::DidChangeTextDocument::METHOD => {
                let Some(params) = parse::<lsp_types::DidChangeTextDocumentParams>(notification.params)
                else {
                    return Vec::new();
                };
                let uri = params.text_document.uri;
                if let Some(document) = self.documents.get_mut(&uri) {
                    document.apply(params.text_document.version, params.content_changes);
                    self.due.insert(uri, Instant::now() + DEBOUNCE);
                }
                Vec::new()
            }
            notifications::DidChangeWatchedFiles::METHOD => {
                let Some(params) = parse::<lsp_types::DidChangeWatchedFilesParams>(notification.params)
                else {
                    return Vec::new();
                };
                let changed: Vec<std::path::PathBuf> = params
                    .changes
                    .iter()
                    .filter_map(|change| change.uri.to_file_path().ok())
                    .map(|path| lexically_normal(&path))
                    .collect();
                // A buffer whose findings come from a changed file (a prompt file, a child
                // workflow, a settings layer) is analysed again, its text unchanged.
                for (uri, document) in &mut self.documents {
                    if document.reads.iter().any(|read| changed.contains(read)) {
                        document.analysis = None;
                        self.due.insert(uri.clone(), Instant::now() + DEBOUNCE);
                    }
                }
                Vec::new()
            }
            notifications::DidCloseTextDocument::METHOD => {
                let Some(params) = parse::<lsp_types::DidCloseTextDocumentParams>(notification.params) else {
                    return Vec::new();
                };
                let uri = params.text_document.uri;
                self.documents.remove(&uri);
                self.due.remove(&uri);
                let params = PublishDiagnosticsParams { uri, diagnostics: Vec::new(), version: None };
                vec![Message::Notification(Notification::new(
                    notifications::PublishDiagnostics::METHOD.to_string(),
                    params,
                ))]
            }
            _ => Vec::new(),
        }
    }

    /// Answers a request; also returns diagnostics published on the way (a stale buffer is
    /// analysed before it is answered about).
    pub fn request(&mut self, request: Request) -> (Response, Vec<Message>) {
        let id = request.id.clone();
        let method = request.method.clone();
        let uri = request
            .params
            .get("textDocument")
            .and_then(|document| document.get("uri"))
            .and_then(|uri| uri.as_str())
            .and_then(|uri| Url::parse(uri).ok());
        let published: Vec<Message> = uri.as_ref().and_then(|uri| self.analyse(uri)).into_iter().collect();
        let result = guarded(AssertUnwindSafe(|| self.answer(&method, request.params)));
        let response = match result {
            Ok(Ok(value)) => Response::new_ok(id, value),
            Ok(Err((code, message))) => Response::new_err(id, code as i32, message),
            Err(panic) => Response::new_err(id, ErrorCode::InternalError as i32, panic),
        };
        (response, published)
    }

    fn document(&self, uri: &Url) -> Result<(&Document, &Analysis), (ErrorCode, String)> {
        let document =
            self.documents.get(uri).ok_or((ErrorCode::InvalidParams, format!("`{uri}` is not open")))?;
        let analysis = document
            .analysis
            .as_deref()
            .ok_or((ErrorCode::ContentModified, "not analysed yet".to_string()))?;
        Ok((document, analysis))
    }

    fn answer(
        &self,
        method: &str,
        params: serde_json::Value,
    ) -> Result<serde_json::Value, (ErrorCode, String)> {
        let value = match method {
            requests::HoverRequest::METHOD => {
                let params: lsp_types::HoverParams = typed(params)?;
                let at = params.text_document_position_params;
                let (document, analysis) = self.document(&at.text_document.uri)?;
                let offset = document.offset(at.position);
                serde_json::to_value(hover::hover(analysis, offset).map(|text| lsp_types::Hover {
                    contents: HoverContents::Markup(MarkupContent {
                        kind: MarkupKind::Markdown,
                        value: text,
                    }),
                    range: None,
                }))
            }
            requests::Completion::METHOD => {
                let params: lsp_types::CompletionParams = typed(params)?;
                let at = params.text_document_position;
                let (document, analysis) = self.document(&at.text_document.uri)?;
                let known =
                    if analysis.checked.is_some() { Some(analysis) } else { document.last_loaded.as_deref() };
                let items = completion::complete(known, &document.text, document.offset(at.position));
                serde_json::to_value(lsp_types::CompletionResponse::Array(items))
            }
            requests::GotoDefinition::METHOD => {
                let params: lsp_types::GotoDefinitionParams = typed(params)?;
                let at = params.text_document_position_params;
                let (document, analysis) = self.document(&at.text_document.uri)?;
                let offset = document.offset(at.position);
                let base = document.path.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
                let target = match navigation::file_at(analysis, &base, offset) {
                    Some(path) => {
                        Url::from_file_path(&path).ok().map(|uri| Location::new(uri, Default::default()))
                    }
                    None => navigation::definition(analysis, offset)
                        .map(|span| Location::new(document.uri.clone(), document.range(span))),
                };
                serde_json::to_value(target.map(GotoDefinitionResponse::Scalar))
            }
            requests::References::METHOD => {
                let params: lsp_types::ReferenceParams = typed(params)?;
                let at = params.text_document_position;
                let (document, analysis) = self.document(&at.text_document.uri)?;
                let spans = navigation::references(
                    analysis,
                    document.offset(at.position),
                    params.context.include_declaration,
                );
                let locations: Vec<Location> = spans
                    .into_iter()
                    .map(|span| Location::new(document.uri.clone(), document.range(span)))
                    .collect();
                serde_json::to_value(locations)
            }
            requests::PrepareRenameRequest::METHOD => {
                let params: lsp_types::TextDocumentPositionParams = typed(params)?;
                let (document, analysis) = self.document(&params.text_document.uri)?;
                let site = navigation::rename_target(analysis, document.offset(params.position));
                serde_json::to_value(site.map(|site| PrepareRenameResponse::RangeWithPlaceholder {
                    range: document.range(site.span),
                    placeholder: site.name.clone(),
                }))
            }
            requests::Rename::METHOD => {
                let params: lsp_types::RenameParams = typed(params)?;
                let at = params.text_document_position;
                let (document, analysis) = self.document(&at.text_document.uri)?;
                let edits = navigation::rename(analysis, document.offset(at.position), &params.new_name)
                    .map_err(|error| (ErrorCode::InvalidParams, error.to_string()))?;
                let edits = edits
                    .into_iter()
                    .map(|(span, new_text)| TextEdit { range: document.range(span), new_text })
                    .collect();
                serde_json::to_value(WorkspaceEdit {
                    changes: Some(HashMap::from([(document.uri.clone(), edits)])),
                    ..Default::default()
                })
            }
            requests::DocumentSymbolRequest::METHOD => {
                let params: lsp_types::DocumentSymbolParams = typed(params)?;
                let (document, analysis) = self.document(&params.text_document.uri)?;
                #[allow(deprecated)] // `deprecated` is a field every DocumentSymbol must have
                let symbols: Vec<DocumentSymbol> = navigation::stages(analysis)
                    .into_iter()
                    .map(|stage| DocumentSymbol {
                        name: stage.id.clone(),
                        detail: Some(if stage.label == stage.id {
                            stage.kind
                        } else {
                            format!("{}: {}", stage.kind, stage.label)
                        }),
                        kind: SymbolKind::FUNCTION,
                        tags: None,
                        deprecated: None,
                        range: document.range(stage.span),
                        selection_range: document.range(stage.span),
                        children: None,
                    })
                    .collect();
                serde_json::to_value(DocumentSymbolResponse::Nested(symbols))
            }
            requests::DocumentLinkRequest::METHOD => {
                let params: lsp_types::DocumentLinkParams = typed(params)?;
                let (document, analysis) = self.document(&params.text_document.uri)?;
                let base = document.path.parent().map(std::path::Path::to_path_buf).unwrap_or_default();
                let links: Vec<DocumentLink> = navigation::linked_files(analysis, &base)
                    .into_iter()
                    .map(|(span, path)| DocumentLink {
                        range: document.range(span),
                        target: Url::from_file_path(&path).ok(),
                        tooltip: Some(path.display().to_string()),
                        data: None,
                    })
                    .collect();
                serde_json::to_value(links)
            }
            requests::CodeActionRequest::METHOD => {
                let params: lsp_types::CodeActionParams = typed(params)?;
                let (document, analysis) = self.document(&params.text_document.uri)?;
                serde_json::to_value(actions::quick_fixes(document, &analysis.findings, params.range))
            }
            requests::Formatting::METHOD => {
                let params: lsp_types::DocumentFormattingParams = typed(params)?;
                let (document, _) = self.document(&params.text_document.uri)?;
                let formatted = crate::render::format::format_source(&document.text)
                    .map_err(|error| (ErrorCode::RequestFailed, format!("cannot format: {error}")))?;
                let edits = if formatted == document.text {
                    Vec::new()
                } else {
                    vec![TextEdit {
                        range: document.range(crate::source::Span::new(0, document.text.len())),
                        new_text: formatted,
                    }]
                };
                serde_json::to_value(edits)
            }
            other => return Err((ErrorCode::MethodNotFound, format!("fabro lsp does not handle `{other}`"))),
        };
        value.map_err(|error| (ErrorCode::InternalError, error.to_string()))
    }
}

fn typed<P: DeserializeOwned>(params: serde_json::Value) -> Result<P, (ErrorCode, String)> {
    serde_json::from_value(params).map_err(|error| (ErrorCode::InvalidParams, error.to_string()))
}

fn parse<P: DeserializeOwned>(params: serde_json::Value) -> Option<P> {
    serde_json::from_value(params).ok()
}

/// Runs `work`, turning a panic into its message: one bad buffer never takes the server down.
fn guarded<T>(work: impl FnOnce() -> T + std::panic::UnwindSafe) -> Result<T, String> {
    std::panic::catch_unwind(work).map_err(|panic| {
        let message = panic
            .downcast_ref::<String>()
            .cloned()
            .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
            .unwrap_or_else(|| "unknown panic".to_string());
        tracing::error!(%message, "fabro lsp: a handler panicked");
        format!("internal error: {message}")
    })
}

/// A request id for tests and benchmarks that drive a [`Server`] directly.
pub fn request(id: i32, method: &str, params: serde_json::Value) -> Request {
    Request { id: RequestId::from(id), method: method.to_string(), params }
}

#[cfg(test)]
mod tests;
