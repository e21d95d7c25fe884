//! The patch format of the `apply_patch` tool: the "v4a" format OpenAI's models are trained to
//! emit (as in OpenAI's Codex CLI). [`parse`] turns a patch into [`Operation`]s and
//! [`apply_chunks`] applies an update's [`Chunk`]s to a file's text.
//!
//! ```text
//! *** Begin Patch
//! *** Add File: docs/new.md
//! +the new file's first line
//! *** Update File: src/app.py
//! *** Move to: src/main.py
//! @@ def greet():
//!      name = "x"
//! -    print("hi")
//! +    print("hello")
//! *** End of File
//! *** Delete File: obsolete.txt
//! *** End Patch
//! ```
//!
//! An update's chunks apply in order, each searched after the previous one. A chunk's anchor (the
//! text after `@@ `) is a line found first, the chunk's lines being searched after it; its old
//! lines (context and removed) must then appear in a row, the first such place winning; with
//! `*** End of File`, a place ending at the file's last line wins. A chunk with no old lines
//! inserts its lines after the anchor, or at the end of the file.
//!
//! This module never touches the file system: the caller reads the files an operation names,
//! writes the results, and decides what an existing or missing file means.
//!
//! # Tolerance
//!
//! It forgives the slips models commonly make and refuses everything else with an error that
//! names the patch line or the chunk, so the model can correct itself:
//!
//! - blank lines and whitespace around `*** Begin Patch` and `*** End Patch`, blank lines between
//!   operations, a patch wrapped in a shell heredoc (`<<'EOF'` ... `EOF`, optionally preceded by
//!   `apply_patch`), and CRLF line endings in the patch itself;
//! - a first chunk without its `@@` line, and an empty line in a chunk (taken as an empty
//!   context line; empty context lines at the end of a chunk, which are usually separators, are
//!   dropped when the chunk does not match with them);
//! - context and removed lines that differ from the file in trailing, then also leading,
//!   whitespace. Context lines are copied from the file, so such a match never rewrites them.
//!
//! A patch without `*** End Patch` is refused: it usually means the model's output was cut off,
//! and applying it would apply a truncated last operation.

use std::collections::HashMap;

use serde_json::{json, Value};

/// The tool description a model reads.
pub const DESCRIPTION: &str = "Edit files with a patch, passed whole as `input`:
*** Begin Patch
*** Add File: docs/new.md
+first line of the new file
*** Update File: src/app.py
*** Move to: src/main.py
@@ def greet():
     name = \"x\"
-    print(\"hi\")
+    print(\"hello\")
     return name
*** Delete File: old.txt
*** End Patch
In a chunk every line starts with ' ' (unchanged), '-' (removed) or '+' (added). Copy about 3 \
unchanged lines above and below each change exactly from the file. \"@@ LINE\" starts a chunk \
and names a line before it (such as the function's header) when the context alone is ambiguous. \
\"*** End of File\" after a chunk says it ends at the end of the file. \"*** Move to\" (optional) \
renames. Paths are relative.";

/// The JSON schema of the tool's arguments: the whole patch in `input`.
pub fn parameters() -> Value {
    json!({
        "type": "object",
        "properties": {
            "input": {
                "type": "string",
                "description": "The whole patch, from \"*** Begin Patch\" to \"*** End Patch\"."
            }
        },
        "required": ["input"],
        "additionalProperties": false
    })
}

/// One file operation of a patch. Paths are relative, have no `..` component and are trimmed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operation {
    /// Create `path` with `content`, whose every line ends with `\n`.
    Add { path: String, content: String },
    /// Delete `path`.
    Delete { path: String },
    /// Apply `chunks` (in order, with [`apply_chunks`]) to `path`, and write the result to
    /// `move_to` instead when it is given (it is never `path` itself).
    Update { path: String, move_to: Option<String>, chunks: Vec<Chunk> },
}

impl Operation {
    /// The file the operation names (for an update, the file before any move).
    pub fn path(&self) -> &str {
        match self {
            Operation::Add { path, .. } | Operation::Delete { path } | Operation::Update { path, .. } => path,
        }
    }
}

/// One change to a file: `old_lines` (the context and removed lines, in order) are replaced by
/// `new_lines` (the context and added lines, in order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// The text after `@@ `: a line of the file that comes before the chunk.
    pub anchor: Option<String>,
    pub old_lines: Vec<String>,
    pub new_lines: Vec<String>,
    /// Which lines are context, so the applier copies them from the file as they are.
    pub context: Vec<ContextLine>,
    /// The chunk was followed by `*** End of File`: it should match at the end of the file.
    pub end_of_file: bool,
    /// The patch line the chunk starts at (its `@@`, or its first line when `@@` was omitted).
    pub line: usize,
}

/// A context line of a [`Chunk`]: its index in `old_lines` and in `new_lines`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ContextLine {
    pub old: usize,
    pub new: usize,
}

/// Why a patch could not be parsed or applied, worded for the model that wrote it. Parsing
/// errors carry the patch line (from 1); applying errors the file, the chunk (from 1) and the
/// file line the search started after.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PatchError {
    /// The patch has no text.
    #[error("the patch is empty: it must start with \"*** Begin Patch\" and end with \"*** End Patch\"")]
    Empty,
    /// The first line is not `*** Begin Patch`.
    #[error("line {line}: the patch must start with \"*** Begin Patch\", got {got:?}")]
    MissingBegin { line: usize, got: String },
    /// The patch ended before `*** End Patch`.
    #[error(
        "line {line}: the patch ends without \"*** End Patch\", so it may have been cut off; nothing was \
         applied. Send the whole patch again, ending with \"*** End Patch\""
    )]
    MissingEnd { line: usize },
    /// Text follows `*** End Patch`.
    #[error(
        "line {line}: nothing may follow \"*** End Patch\", got {got:?}; put every operation between \
         \"*** Begin Patch\" and \"*** End Patch\""
    )]
    AfterEnd { line: usize, got: String },
    /// `*** End Patch` came before any operation.
    #[error(
        "line {line}: the patch has no operations; give at least one \"*** Add File: PATH\", \
         \"*** Update File: PATH\" or \"*** Delete File: PATH\""
    )]
    NoOperations { line: usize },
    /// A line where an operation should start.
    #[error(
        "line {line}: expected \"*** Add File: PATH\", \"*** Update File: PATH\", \"*** Delete File: PATH\" \
         or \"*** End Patch\", got {got:?}"
    )]
    ExpectedOperation { line: usize, got: String },
    /// A line of an added file without its `+`.
    #[error(
        "line {line}: expected a line starting with '+' in Add File {path}, got {got:?}; every line of a new \
         file starts with '+', and an empty line is a lone '+'"
    )]
    ExpectedAddLine { line: usize, path: String, got: String },
    /// Lines after a `*** Delete File`.
    #[error("line {line}: Delete File {path} takes no lines (the whole file is deleted), got {got:?}")]
    DeleteWithBody { line: usize, path: String, got: String },
    /// A line in a chunk that is neither context, removed nor added.
    #[error("line {line}: expected a line starting with ' ', '-' or '+' in the chunk of Update File {path}, got {got:?}")]
    ExpectedChunkLine { line: usize, path: String, got: String },
    /// An update without any chunk.
    #[error(
        "line {line}: Update File {path} has no chunks; give at least one chunk of ' ', '-' and '+' lines"
    )]
    UpdateWithoutChunks { line: usize, path: String },
    /// A `@@` line not followed by any chunk line.
    #[error(
        "line {line}: chunk {chunk} of Update File {path} has no lines; put its ' ', '-' and '+' lines after \
         its \"@@\""
    )]
    EmptyChunk { line: usize, path: String, chunk: usize },
    /// `*** End of File` with no chunk before it.
    #[error("line {line}: \"*** End of File\" must follow the last line of a chunk of Update File {path}")]
    MisplacedEndOfFile { line: usize, path: String },
    /// Chunk lines after `*** End of File` without a new `@@`.
    #[error(
        "line {line}: after \"*** End of File\" in Update File {path}, expected \"@@\", the next operation or \
         \"*** End Patch\", got {got:?}"
    )]
    AfterEndOfFile { line: usize, path: String, got: String },
    /// A path that is empty, absolute or leaves the working directory.
    #[error("line {line}: the path {path:?} {problem}")]
    InvalidPath { line: usize, path: String, problem: PathProblem },
    /// A path named by two operations (an update's `*** Move to` counts).
    #[error(
        "line {line}: {path} is already named on line {first_line}; put all the changes to one file in one \
         operation"
    )]
    DuplicatePath { line: usize, path: String, first_line: usize },
    /// A chunk's anchor line is not in the file after the previous chunk.
    #[error(
        "Update File {path}, chunk {chunk} (@@ {anchor}): the line {anchor:?} was not found {}. The text \
         after \"@@\" must be a whole line of the file; read the file again and copy that line exactly",
        searched(.after_line)
    )]
    AnchorNotFound { path: String, chunk: usize, anchor: String, after_line: usize },
    /// A chunk's context and removed lines are not in the file after the previous chunk (or its
    /// anchor).
    #[error(
        "Update File {path}, chunk {chunk} ({header}): its lines were not found {}; the first of them is \
         {first:?}. Read the file again and make the context lines match it exactly",
        searched(.after_line)
    )]
    ChunkNotFound { path: String, chunk: usize, header: String, after_line: usize, first: String },
}

/// What is wrong with a path.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum PathProblem {
    #[error("names no file")]
    Empty,
    #[error("is absolute; give a path relative to the working directory")]
    Absolute,
    #[error("contains \"..\"; give a path inside the working directory")]
    ParentDir,
}

/// Where a search started, for messages: file lines are counted from 1.
fn searched(after_line: &usize) -> String {
    match after_line {
        0 => "in the file".to_string(),
        line => format!("after line {line}"),
    }
}

const BEGIN_PATCH: &str = "*** Begin Patch";
const END_PATCH: &str = "*** End Patch";
const ADD_FILE: &str = "*** Add File:";
const DELETE_FILE: &str = "*** Delete File:";
const UPDATE_FILE: &str = "*** Update File:";
const MOVE_TO: &str = "*** Move to:";
const END_OF_FILE: &str = "*** End of File";

/// Parses a whole patch, from `*** Begin Patch` to `*** End Patch`, checking its paths.
pub fn parse(patch: &str) -> Result<Vec<Operation>, PatchError> {
    Parser::new(patch)?.operations()
}

/// A line that ends an operation's body.
enum Header<'a> {
    Add(&'a str),
    Delete(&'a str),
    Update(&'a str),
    EndPatch,
}

fn header(line: &str) -> Option<Header<'_>> {
    if line.trim() == END_PATCH {
        Some(Header::EndPatch)
    } else if let Some(path) = line.strip_prefix(ADD_FILE) {
        Some(Header::Add(path))
    } else if let Some(path) = line.strip_prefix(DELETE_FILE) {
        Some(Header::Delete(path))
    } else {
        line.strip_prefix(UPDATE_FILE).map(Header::Update)
    }
}

fn is_blank(line: &str) -> bool {
    line.trim().is_empty()
}

/// A shell heredoc's first line, as models sometimes wrap the patch in one.
fn is_heredoc_start(line: &str) -> bool {
    let line = line.trim();
    let line = line.strip_prefix("apply_patch").map_or(line, str::trim_start);
    matches!(line, "<<EOF" | "<<'EOF'" | "<<\"EOF\"")
}

struct Parser<'a> {
    lines: Vec<&'a str>,
    /// The index of the next line to read.
    next: usize,
    /// One past the patch's last line that is not blank (or a heredoc's closing `EOF`).
    end: usize,
    /// Each path named so far (by its [`path_key`]) and the patch line that named it.
    named: HashMap<String, usize>,
}

impl<'a> Parser<'a> {
    /// Finds the envelope and checks `*** Begin Patch`.
    fn new(patch: &'a str) -> Result<Self, PatchError> {
        let lines: Vec<&str> = patch.lines().collect();
        let (mut start, mut end) = content_bounds(&lines, 0, lines.len());
        if end - start >= 2 && is_heredoc_start(lines[start]) && lines[end - 1].trim() == "EOF" {
            (start, end) = content_bounds(&lines, start + 1, end - 1);
        }
        let Some(first) = lines.get(start).filter(|_| start < end) else {
            return Err(PatchError::Empty);
        };
        if first.trim() != BEGIN_PATCH {
            return Err(PatchError::MissingBegin { line: start + 1, got: first.to_string() });
        }
        Ok(Parser { lines, next: start + 1, end, named: HashMap::new() })
    }

    fn peek(&self) -> Option<&'a str> {
        (self.next < self.end).then(|| self.lines[self.next])
    }

    /// The patch line number (from 1) of the next line.
    fn line_number(&self) -> usize {
        self.next + 1
    }

    fn skip_blank(&mut self) {
        while self.peek().is_some_and(is_blank) {
            self.next += 1;
        }
    }

    /// The next line that is not blank, without reading it.
    fn next_content(&self) -> Option<(usize, &'a str)> {
        (self.next..self.end).map(|index| (index, self.lines[index])).find(|(_, line)| !is_blank(line))
    }

    /// Whether only blank lines come before the next operation (or the end of the patch).
    fn at_operation_end(&self) -> bool {
        self.next_content().is_none_or(|(_, line)| header(line).is_some())
    }

    fn operations(mut self) -> Result<Vec<Operation>, PatchError> {
        let mut operations = Vec::new();
        loop {
            self.skip_blank();
            let Some(line) = self.peek() else {
                return Err(PatchError::MissingEnd { line: self.end });
            };
            let number = self.line_number();
            let Some(kind) = header(line) else {
                return Err(PatchError::ExpectedOperation { line: number, got: line.to_string() });
            };
            self.next += 1;
            let operation = match kind {
                Header::EndPatch => break,
                Header::Add(path) => {
                    let path = self.claim(path, number)?;
                    let content = self.add_body(&path)?;
                    Operation::Add { path, content }
                }
                Header::Delete(path) => {
                    let path = self.claim(path, number)?;
                    self.delete_body(&path)?;
                    Operation::Delete { path }
                }
                Header::Update(path) => {
                    let path = self.claim(path, number)?;
                    self.update_body(path, number)?
                }
            };
            operations.push(operation);
        }
        let end_patch_line = self.next;
        if let Some((index, line)) = self.next_content() {
            return Err(PatchError::AfterEnd { line: index + 1, got: line.to_string() });
        }
        if operations.is_empty() {
            return Err(PatchError::NoOperations { line: end_patch_line });
        }
        Ok(operations)
    }

    /// Checks a path named on patch line `line` and records it.
    fn claim(&mut self, raw: &str, line: usize) -> Result<String, PatchError> {
        let path = raw.trim();
        let invalid = |problem| PatchError::InvalidPath { line, path: path.to_string(), problem };
        let key = path_key(path).map_err(invalid)?;
        if let Some(&first_line) = self.named.get(&key) {
            return Err(PatchError::DuplicatePath { line, path: path.to_string(), first_line });
        }
        self.named.insert(key, line);
        Ok(path.to_string())
    }

    fn add_body(&mut self, path: &str) -> Result<String, PatchError> {
        let mut content = String::new();
        while let Some(line) = self.peek() {
            if let Some(text) = line.strip_prefix('+') {
                content.push_str(text);
                content.push('\n');
                self.next += 1;
            } else if self.at_operation_end() {
                break;
            } else {
                let got = line.to_string();
                return Err(PatchError::ExpectedAddLine { line: self.line_number(), path: path.into(), got });
            }
        }
        Ok(content)
    }

    fn delete_body(&self, path: &str) -> Result<(), PatchError> {
        match self.next_content() {
            Some((index, line)) if header(line).is_none() => {
                Err(PatchError::DeleteWithBody { line: index + 1, path: path.into(), got: line.to_string() })
            }
            _ => Ok(()),
        }
    }

    /// Reads an update's optional `*** Move to` and its chunks; `line` is its header's.
    fn update_body(&mut self, path: String, line: usize) -> Result<Operation, PatchError> {
        let mut move_to = None;
        if let Some(target) = self.peek().and_then(|line| line.strip_prefix(MOVE_TO)) {
            let number = self.line_number();
            self.next += 1;
            // Moving a file onto itself is a plain update.
            if path_key(target.trim()) != path_key(&path) {
                move_to = Some(self.claim(target, number)?);
            }
        }
        let mut chunks = Vec::new();
        let mut open: Option<Chunk> = None;
        while let Some(text) = self.peek() {
            let number = self.line_number();
            if header(text).is_some() {
                break;
            }
            if text.trim_end() == END_OF_FILE {
                let Some(mut chunk) = open.take() else {
                    return Err(PatchError::MisplacedEndOfFile { line: number, path });
                };
                chunk.end_of_file = true;
                close_chunk(chunk, &mut chunks, &path)?;
            } else if let Some(anchor) = chunk_start(text) {
                if let Some(chunk) = open.take() {
                    close_chunk(chunk, &mut chunks, &path)?;
                }
                open = Some(Chunk::starting(anchor, number));
            } else {
                let chunk = match open.as_mut() {
                    Some(chunk) => chunk,
                    None if is_blank(text) => {
                        self.next += 1;
                        continue;
                    }
                    None if chunks.is_empty() => open.insert(Chunk::starting(None, number)),
                    None => {
                        return Err(PatchError::AfterEndOfFile { line: number, path, got: text.to_string() });
                    }
                };
                if !chunk.push(text) {
                    return Err(PatchError::ExpectedChunkLine { line: number, path, got: text.to_string() });
                }
            }
            self.next += 1;
        }
        if let Some(chunk) = open {
            close_chunk(chunk, &mut chunks, &path)?;
        }
        if chunks.is_empty() {
            return Err(PatchError::UpdateWithoutChunks { line, path });
        }
        Ok(Operation::Update { path, move_to, chunks })
    }
}

/// The range of `lines[start..end]` without its leading and trailing blank lines.
fn content_bounds(lines: &[&str], mut start: usize, mut end: usize) -> (usize, usize) {
    while start < end && is_blank(lines[start]) {
        start += 1;
    }
    while end > start && is_blank(lines[end - 1]) {
        end -= 1;
    }
    (start, end)
}

/// A `@@` line's anchor (`Some(None)` for a bare `@@`), or `None` for any other line.
fn chunk_start(line: &str) -> Option<Option<String>> {
    if line.trim_end() == "@@" {
        Some(None)
    } else {
        line.strip_prefix("@@ ").map(|anchor| (!is_blank(anchor)).then(|| anchor.to_string()))
    }
}

fn close_chunk(chunk: Chunk, chunks: &mut Vec<Chunk>, path: &str) -> Result<(), PatchError> {
    if chunk.old_lines.is_empty() && chunk.new_lines.is_empty() {
        return Err(PatchError::EmptyChunk { line: chunk.line, path: path.into(), chunk: chunks.len() + 1 });
    }
    chunks.push(chunk);
    Ok(())
}

/// The form of a path two operations must not share: its components without `.` and empty ones.
fn path_key(path: &str) -> Result<String, PathProblem> {
    let bytes = path.as_bytes();
    let has_drive = bytes.len() >= 2 && bytes[0].is_ascii_alphabetic() && bytes[1] == b':';
    if path.starts_with(['/', '\\']) || has_drive {
        return Err(PathProblem::Absolute);
    }
    let components: Vec<&str> = path.split(['/', '\\']).filter(|c| !c.is_empty() && *c != ".").collect();
    if components.contains(&"..") {
        return Err(PathProblem::ParentDir);
    }
    if components.is_empty() {
        return Err(PathProblem::Empty);
    }
    Ok(components.join("/"))
}

impl Chunk {
    fn starting(anchor: Option<String>, line: usize) -> Chunk {
        Chunk {
            anchor,
            old_lines: Vec::new(),
            new_lines: Vec::new(),
            context: Vec::new(),
            end_of_file: false,
            line,
        }
    }

    /// Adds a chunk line; `false` when it is not one.
    fn push(&mut self, line: &str) -> bool {
        match line.chars().next() {
            Some('-') => self.old_lines.push(line[1..].to_string()),
            Some('+') => self.new_lines.push(line[1..].to_string()),
            Some(' ') => self.push_context(&line[1..]),
            _ if is_blank(line) => self.push_context(""),
            _ => return false,
        }
        true
    }

    fn push_context(&mut self, text: &str) {
        self.context.push(ContextLine { old: self.old_lines.len(), new: self.new_lines.len() });
        self.old_lines.push(text.to_string());
        self.new_lines.push(text.to_string());
    }

    /// The chunk's `@@` line, for messages.
    fn header(&self) -> String {
        match &self.anchor {
            Some(anchor) => format!("@@ {anchor}"),
            None => "@@".to_string(),
        }
    }

    /// How many empty context lines end the chunk (usually separators, not the file's lines).
    fn blank_context_tail(&self) -> usize {
        let (mut old, mut new) = (self.old_lines.len(), self.new_lines.len());
        while old > 0
            && new > 0
            && self.old_lines[old - 1].is_empty()
            && self.new_lines[new - 1].is_empty()
            && self.context.contains(&ContextLine { old: old - 1, new: new - 1 })
        {
            old -= 1;
            new -= 1;
        }
        self.old_lines.len() - old
    }
}

/// Applies `chunks` to `original`, the text of `path` (named in errors), in order: each is
/// searched from where the previous one ended. Untouched lines keep their line endings, new
/// lines take the file's most common one, and the result ends with a newline (unless empty).
pub fn apply_chunks(original: &str, path: &str, chunks: &[Chunk]) -> Result<String, PatchError> {
    let lines = split_lines(original);
    let mut edits = Vec::with_capacity(chunks.len());
    let mut position = 0;
    for (index, chunk) in chunks.iter().enumerate() {
        let edit = locate(&lines, chunk, position).map_err(|miss| miss.into_error(path, index + 1, chunk))?;
        position = edit.start + edit.old_len;
        edits.push(edit);
    }
    Ok(render(&lines, &edits))
}

/// A line of the original file and the line ending it had (empty for an unterminated last line).
struct SourceLine<'a> {
    text: &'a str,
    ending: &'a str,
}

fn split_lines(text: &str) -> Vec<SourceLine<'_>> {
    text.split_inclusive('\n')
        .map(|piece| match piece.strip_suffix("\r\n") {
            Some(text) => SourceLine { text, ending: "\r\n" },
            None => match piece.strip_suffix('\n') {
                Some(text) => SourceLine { text, ending: "\n" },
                None => SourceLine { text: piece, ending: "" },
            },
        })
        .collect()
}

fn dominant_ending(lines: &[SourceLine]) -> &'static str {
    let crlf = lines.iter().filter(|line| line.ending == "\r\n").count();
    let lf = lines.iter().filter(|line| line.ending == "\n").count();
    if crlf > lf {
        "\r\n"
    } else {
        "\n"
    }
}

/// Where a chunk applies: `old_len` file lines from `start` become the chunk's first `new_len`
/// new lines (fewer than all when trailing empty context lines were dropped).
struct Edit<'c> {
    start: usize,
    old_len: usize,
    new_len: usize,
    chunk: &'c Chunk,
}

/// Why a chunk did not apply; `after_line` is the file line the search started after.
enum Miss {
    Anchor { after_line: usize },
    Lines { after_line: usize },
}

impl Miss {
    fn into_error(self, path: &str, number: usize, chunk: &Chunk) -> PatchError {
        match self {
            Miss::Anchor { after_line } => PatchError::AnchorNotFound {
                path: path.to_string(),
                chunk: number,
                anchor: chunk.anchor.clone().unwrap_or_default(),
                after_line,
            },
            Miss::Lines { after_line } => PatchError::ChunkNotFound {
                path: path.to_string(),
                chunk: number,
                header: chunk.header(),
                after_line,
                first: chunk.old_lines.first().cloned().unwrap_or_default(),
            },
        }
    }
}

fn locate<'c>(lines: &[SourceLine], chunk: &'c Chunk, position: usize) -> Result<Edit<'c>, Miss> {
    let mut from = position;
    if let Some(anchor) = &chunk.anchor {
        let at = find(lines, std::slice::from_ref(anchor), from, false)
            .ok_or(Miss::Anchor { after_line: from })?;
        from = at + 1;
    }
    let blank_tail = chunk.blank_context_tail();
    for dropped in std::iter::once(0).chain((blank_tail > 0).then_some(blank_tail)) {
        let old = &chunk.old_lines[..chunk.old_lines.len() - dropped];
        let new_len = chunk.new_lines.len() - dropped;
        if old.is_empty() {
            let start = if chunk.anchor.is_none() || chunk.end_of_file { lines.len() } else { from };
            return Ok(Edit { start, old_len: 0, new_len, chunk });
        }
        if let Some(start) = find(lines, old, from, chunk.end_of_file) {
            return Ok(Edit { start, old_len: old.len(), new_len, chunk });
        }
    }
    Err(Miss::Lines { after_line: from })
}

/// Ways two lines may be equal, strictest first.
const COMPARISONS: [fn(&str, &str) -> bool; 3] =
    [|a, b| a == b, |a, b| a.trim_end() == b.trim_end(), |a, b| a.trim() == b.trim()];

/// The first index from `from` where `pattern` matches `lines`, trying each comparison over the
/// whole range before the next, looser one. With `at_end`, a match ending at the last line wins.
fn find(lines: &[SourceLine], pattern: &[String], from: usize, at_end: bool) -> Option<usize> {
    let last = lines.len().checked_sub(pattern.len()).filter(|&last| last >= from)?;
    let matches_at = |start: usize, same: &fn(&str, &str) -> bool| {
        pattern.iter().zip(&lines[start..]).all(|(wanted, line)| same(line.text, wanted))
    };
    if at_end && COMPARISONS.iter().any(|same| matches_at(last, same)) {
        return Some(last);
    }
    COMPARISONS.iter().find_map(|same| (from..=last).find(|&start| matches_at(start, same)))
}

fn render(lines: &[SourceLine], edits: &[Edit]) -> String {
    let ending = dominant_ending(lines);
    let mut out = String::new();
    let push_source = |out: &mut String, line: &SourceLine| {
        out.push_str(line.text);
        out.push_str(if line.ending.is_empty() { ending } else { line.ending });
    };
    let mut cursor = 0;
    for edit in edits {
        for line in &lines[cursor..edit.start] {
            push_source(&mut out, line);
        }
        // Context lines are copied from the file: a fuzzy match must not rewrite them.
        let mut from_source = vec![None; edit.new_len];
        for context in &edit.chunk.context {
            if context.old < edit.old_len && context.new < edit.new_len {
                from_source[context.new] = Some(edit.start + context.old);
            }
        }
        for (new, source) in edit.chunk.new_lines[..edit.new_len].iter().zip(from_source) {
            match source {
                Some(index) => push_source(&mut out, &lines[index]),
                None => {
                    out.push_str(new);
                    out.push_str(ending);
                }
            }
        }
        cursor = edit.start + edit.old_len;
    }
    for line in &lines[cursor..] {
        push_source(&mut out, line);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn update_chunks(patch: &str) -> Vec<Chunk> {
        match parse(patch).unwrap().remove(0) {
            Operation::Update { chunks, .. } => chunks,
            other => panic!("expected an update, got {other:?}"),
        }
    }

    /// Parses a one-update patch over `body` and applies it to `original`.
    fn apply(original: &str, body: &str) -> Result<String, PatchError> {
        let patch = format!("*** Begin Patch\n*** Update File: f.txt\n{body}*** End Patch\n");
        apply_chunks(original, "f.txt", &update_chunks(&patch))
    }

    fn parse_error(patch: &str) -> String {
        parse(patch).unwrap_err().to_string()
    }

    fn strings(lines: &[&str]) -> Vec<String> {
        lines.iter().map(|line| line.to_string()).collect()
    }

    #[test]
    fn parses_every_operation() {
        let patch = "*** Begin Patch
*** Add File: path/new.txt
+first line
+second line
*** Update File: src/app.py
*** Move to: src/main.py
@@ def greet():
     name = \"x\"
-    print(\"hi\")
+    print(\"hello\")
     return name
@@
 context
-old
+new
*** End of File
*** Delete File: obsolete.txt
*** End Patch";
        let expected = vec![
            Operation::Add { path: "path/new.txt".into(), content: "first line\nsecond line\n".into() },
            Operation::Update {
                path: "src/app.py".into(),
                move_to: Some("src/main.py".into()),
                chunks: vec![
                    Chunk {
                        anchor: Some("def greet():".into()),
                        old_lines: strings(&["    name = \"x\"", "    print(\"hi\")", "    return name"]),
                        new_lines: strings(&["    name = \"x\"", "    print(\"hello\")", "    return name"]),
                        context: vec![ContextLine { old: 0, new: 0 }, ContextLine { old: 2, new: 2 }],
                        end_of_file: false,
                        line: 7,
                    },
                    Chunk {
                        anchor: None,
                        old_lines: strings(&["context", "old"]),
                        new_lines: strings(&["context", "new"]),
                        context: vec![ContextLine { old: 0, new: 0 }],
                        end_of_file: true,
                        line: 12,
                    },
                ],
            },
            Operation::Delete { path: "obsolete.txt".into() },
        ];
        let operations = parse(patch).unwrap();
        assert_eq!(operations, expected);
        let paths: Vec<&str> = operations.iter().map(Operation::path).collect();
        assert_eq!(paths, ["path/new.txt", "src/app.py", "obsolete.txt"]);
    }

    #[test]
    fn parses_an_empty_added_file_and_a_first_chunk_without_its_header() {
        let patch =
            "*** Begin Patch\n*** Add File: empty.txt\n*** Update File: a.txt\n x\n-y\n+z\n*** End Patch";
        let operations = parse(patch).unwrap();
        assert_eq!(operations[0], Operation::Add { path: "empty.txt".into(), content: String::new() });
        let Operation::Update { chunks, move_to: None, .. } = &operations[1] else {
            panic!("{operations:?}")
        };
        assert_eq!((chunks[0].anchor.as_deref(), chunks[0].line), (None, 4));
        assert_eq!(
            (chunks[0].old_lines.clone(), chunks[0].new_lines.clone()),
            (strings(&["x", "y"]), strings(&["x", "z"]))
        );
    }

    #[test]
    fn tolerates_whitespace_blank_lines_heredocs_and_crlf_around_the_operations() {
        let patch =
            "\n\n  *** Begin Patch  \r\n*** Add File:  a.txt \r\n+one\r\n\r\n*** Delete File: b.txt\n\n\
                     *** Update File: c.txt\n\n@@\n-x\n+y\n\n   *** End Patch\t\n\n";
        let expected = vec![
            Operation::Add { path: "a.txt".into(), content: "one\n".into() },
            Operation::Delete { path: "b.txt".into() },
            Operation::Update {
                path: "c.txt".into(),
                move_to: None,
                chunks: vec![Chunk {
                    anchor: None,
                    old_lines: strings(&["x", ""]),
                    new_lines: strings(&["y", ""]),
                    context: vec![ContextLine { old: 1, new: 1 }],
                    end_of_file: false,
                    line: 11,
                }],
            },
        ];
        assert_eq!(parse(patch).unwrap(), expected);
        let heredoc = "apply_patch <<'EOF'\n*** Begin Patch\n*** Delete File: b.txt\n*** End Patch\nEOF\n";
        assert_eq!(parse(heredoc).unwrap(), vec![Operation::Delete { path: "b.txt".into() }]);
    }

    #[test]
    fn a_move_onto_the_same_file_is_a_plain_update() {
        let patch =
            "*** Begin Patch\n*** Update File: a.txt\n*** Move to: ./a.txt\n@@\n-x\n+y\n*** End Patch";
        let Operation::Update { move_to, .. } = &parse(patch).unwrap()[0] else { panic!() };
        assert_eq!(move_to, &None);
    }

    #[test]
    fn applies_two_chunks_with_an_anchor() {
        let original = "import os\n\ndef greet():\n    name = \"x\"\n    print(\"hi\")\n    return name\n\n\
                        def main():\n    greet()\n    return 0\n";
        let body = "@@ def greet():\n     name = \"x\"\n-    print(\"hi\")\n+    print(\"hello\")\n     return name\n\
                    @@\n def main():\n-    greet()\n+    greet()\n+    greet()\n";
        let expected =
            "import os\n\ndef greet():\n    name = \"x\"\n    print(\"hello\")\n    return name\n\n\
                        def main():\n    greet()\n    greet()\n    return 0\n";
        assert_eq!(apply(original, body).unwrap(), expected);
    }

    #[test]
    fn matches_despite_whitespace_and_keeps_the_files_context_lines() {
        // Trailing whitespace in the file, other indentation in the patch.
        let original = "fn main() {  \n\tlet x = 1;\n\tprintln!(\"{x}\");\n}\n";
        let body = "@@\n fn main() {\n-    let x = 1;\n+    let x = 2;\n     println!(\"{x}\");\n";
        let expected = "fn main() {  \n    let x = 2;\n\tprintln!(\"{x}\");\n}\n";
        assert_eq!(apply(original, body).unwrap(), expected);
    }

    #[test]
    fn an_exact_match_wins_over_an_earlier_fuzzy_one() {
        let original = "  a\nb\na\nb\n";
        assert_eq!(apply(original, "@@\n a\n-b\n+c\n").unwrap(), "  a\nb\na\nc\n");
    }

    #[test]
    fn end_of_file_prefers_the_last_lines() {
        let original = "x\nend\ny\nend\n";
        assert_eq!(apply(original, "@@\n-end\n+END\n").unwrap(), "x\nEND\ny\nend\n");
        assert_eq!(apply(original, "@@\n-end\n+END\n*** End of File\n").unwrap(), "x\nend\ny\nEND\n");
        // Not at the end: the first match after the position still applies.
        assert_eq!(apply(original, "@@\n-x\n+X\n*** End of File\n").unwrap(), "X\nend\ny\nend\n");
    }

    #[test]
    fn pure_insertions_go_to_the_end_or_after_the_anchor() {
        let original = "a\nb\nc";
        assert_eq!(apply(original, "@@\n+d\n").unwrap(), "a\nb\nc\nd\n");
        assert_eq!(apply(original, "@@ a\n+a2\n").unwrap(), "a\na2\nb\nc\n");
        assert_eq!(apply("", "@@\n+first\n").unwrap(), "first\n");
    }

    #[test]
    fn trailing_blank_separators_are_dropped_when_they_do_not_match() {
        let original = "a\nb\n";
        assert_eq!(apply(original, "@@\n-b\n+B\n\n\n").unwrap(), "a\nB\n");
        // When the file has the empty line, it is matched (and picks the occurrence).
        assert_eq!(apply("a\nx\na\n\n", "@@\n-a\n+A\n\n").unwrap(), "a\nx\nA\n\n");
    }

    #[test]
    fn keeps_crlf_line_endings() {
        let original = "one\r\ntwo\r\nthree\r\n";
        assert_eq!(apply(original, "@@\n one\n-two\n+2\n+2b\n").unwrap(), "one\r\n2\r\n2b\r\nthree\r\n");
        // A mixed file keeps each untouched line's ending; new lines take the most common one.
        let mixed = "a\r\nb\nc\r\nd\r\n";
        assert_eq!(apply(mixed, "@@\n b\n-c\n+C\n").unwrap(), "a\r\nb\nC\r\nd\r\n");
    }

    #[test]
    fn the_result_ends_with_a_newline() {
        assert_eq!(apply("a\nb", "@@\n-a\n+A\n").unwrap(), "A\nb\n");
        assert_eq!(apply("a\r\nb", "@@\n-b\n+B\n").unwrap(), "a\r\nB\r\n");
        assert_eq!(apply("a\n", "@@\n-a\n").unwrap(), "");
    }

    #[test]
    fn a_chunk_that_matches_twice_applies_at_the_first_match_after_the_position() {
        let original = "x = 1\nx = 1\nx = 1\n";
        assert_eq!(apply(original, "@@\n-x = 1\n+x = 2\n").unwrap(), "x = 2\nx = 1\nx = 1\n");
        assert_eq!(
            apply(original, "@@\n-x = 1\n+x = 2\n@@\n-x = 1\n+x = 3\n").unwrap(),
            "x = 2\nx = 3\nx = 1\n"
        );
        let functions = "def a():\n    return 1\ndef b():\n    return 1\n";
        assert_eq!(
            apply(functions, "@@ def b():\n-    return 1\n+    return 2\n").unwrap(),
            "def a():\n    return 1\ndef b():\n    return 2\n"
        );
        // The anchor itself is found after the previous chunk, with fuzz.
        let anchors = "def a():\n    pass\ndef a():\n    pass\n";
        assert_eq!(
            apply(anchors, "@@ def a():\n-    pass\n+    one\n@@ def a():  \n-    pass\n+    two\n").unwrap(),
            "def a():\n    one\ndef a():\n    two\n"
        );
    }

    #[test]
    fn applies_to_a_non_ascii_file() {
        let original = "título: café\nnaïve → 東京\nend\n";
        let body = "@@ título: café\n-naïve → 東京\n+naïve → 大阪 🎌\n end\n";
        assert_eq!(apply(original, body).unwrap(), "título: café\nnaïve → 大阪 🎌\nend\n");
    }

    #[test]
    fn refuses_bad_paths() {
        for (path, problem) in [
            ("/etc/passwd", "is absolute; give a path relative to the working directory"),
            ("C:\\x.txt", "is absolute; give a path relative to the working directory"),
            ("src/../../x", "contains \"..\"; give a path inside the working directory"),
            ("..", "contains \"..\"; give a path inside the working directory"),
            ("", "names no file"),
            ("./", "names no file"),
        ] {
            let patch = format!("*** Begin Patch\n*** Delete File: {path}\n*** End Patch");
            assert_eq!(parse_error(&patch), format!("line 2: the path {path:?} {problem}"));
        }
        let moved = "*** Begin Patch\n*** Update File: a\n*** Move to: ../b\n@@\n-x\n*** End Patch";
        assert_eq!(
            parse_error(moved),
            "line 3: the path \"../b\" contains \"..\"; give a path inside the working directory"
        );
    }

    #[test]
    fn refuses_a_path_named_twice() {
        let patch = "*** Begin Patch\n*** Delete File: a.txt\n*** Add File: ./a.txt\n+x\n*** End Patch";
        assert_eq!(
            parse_error(patch),
            "line 3: ./a.txt is already named on line 2; put all the changes to one file in one operation"
        );
        let moved =
            "*** Begin Patch\n*** Update File: a\n*** Move to: b\n@@\n-x\n*** Add File: b\n+y\n*** End Patch";
        assert_eq!(
            parse_error(moved),
            "line 6: b is already named on line 3; put all the changes to one file in one operation"
        );
    }

    #[test]
    fn refuses_a_broken_envelope() {
        assert_eq!(
            parse_error(" \n\n"),
            "the patch is empty: it must start with \"*** Begin Patch\" and end with \"*** End Patch\""
        );
        assert_eq!(
            parse_error("\n*** Update File: a\n"),
            "line 2: the patch must start with \"*** Begin Patch\", got \"*** Update File: a\""
        );
        assert_eq!(
            parse_error("*** Begin Patch\n*** Add File: a\n+x\n\n"),
            "line 3: the patch ends without \"*** End Patch\", so it may have been cut off; nothing was \
             applied. Send the whole patch again, ending with \"*** End Patch\""
        );
        assert_eq!(
            parse_error("*** Begin Patch\n*** Delete File: a\n*** End Patch\n\nthanks"),
            "line 5: nothing may follow \"*** End Patch\", got \"thanks\"; put every operation between \
             \"*** Begin Patch\" and \"*** End Patch\""
        );
        assert_eq!(
            parse_error("*** Begin Patch\n\n*** End Patch"),
            "line 3: the patch has no operations; give at least one \"*** Add File: PATH\", \
             \"*** Update File: PATH\" or \"*** Delete File: PATH\""
        );
        assert_eq!(
            parse_error("*** Begin Patch\n*** Edit File: a\n*** End Patch"),
            "line 2: expected \"*** Add File: PATH\", \"*** Update File: PATH\", \"*** Delete File: PATH\" \
             or \"*** End Patch\", got \"*** Edit File: a\""
        );
    }

    #[test]
    fn refuses_broken_operation_bodies() {
        assert_eq!(
            parse_error("*** Begin Patch\n*** Add File: a.txt\n+x\n\n+y\n*** End Patch"),
            "line 4: expected a line starting with '+' in Add File a.txt, got \"\"; every line of a new file \
             starts with '+', and an empty line is a lone '+'"
        );
        assert_eq!(
            parse_error("*** Begin Patch\n*** Delete File: a.txt\n-x\n*** End Patch"),
            "line 3: Delete File a.txt takes no lines (the whole file is deleted), got \"-x\""
        );
        assert_eq!(
            parse_error("*** Begin Patch\n*** Update File: src/app.py\n@@ def f():\n x\n-y\n+z\n foo\nfoo\n*** End Patch"),
            "line 8: expected a line starting with ' ', '-' or '+' in the chunk of Update File src/app.py, \
             got \"foo\""
        );
        assert_eq!(
            parse_error("*** Begin Patch\n*** Update File: a.txt\n\n*** Delete File: b.txt\n*** End Patch"),
            "line 2: Update File a.txt has no chunks; give at least one chunk of ' ', '-' and '+' lines"
        );
        assert_eq!(
            parse_error("*** Begin Patch\n*** Update File: a.txt\n@@\n-x\n@@ f\n@@\n-y\n*** End Patch"),
            "line 5: chunk 2 of Update File a.txt has no lines; put its ' ', '-' and '+' lines after its \"@@\""
        );
        assert_eq!(
            parse_error("*** Begin Patch\n*** Update File: a.txt\n*** End of File\n*** End Patch"),
            "line 3: \"*** End of File\" must follow the last line of a chunk of Update File a.txt"
        );
        assert_eq!(
            parse_error("*** Begin Patch\n*** Update File: a.txt\n-x\n*** End of File\n+y\n*** End Patch"),
            "line 5: after \"*** End of File\" in Update File a.txt, expected \"@@\", the next operation or \
             \"*** End Patch\", got \"+y\""
        );
    }

    #[test]
    fn refuses_chunks_that_do_not_apply() {
        let original = "import os\n\ndef greet():\n    name = \"x\"\n    print(\"hey\")\n    return name\n\n\
                        def other():\n    pass\n\ndef greet2():\n    print(\"hi\")\n";
        let body =
            "@@\n import os\n@@ def greet():\n     name = \"x\"\n-    print(\"hi\")\n+    print(\"hello\")\n";
        assert_eq!(
            apply(original, body).unwrap_err().to_string(),
            "Update File f.txt, chunk 2 (@@ def greet():): its lines were not found after line 3; the first \
             of them is \"    name = \\\"x\\\"\". Read the file again and make the context lines match it exactly"
        );
        let chunks = update_chunks(
            "*** Begin Patch\n*** Update File: src/app.py\n@@\n-    print(\"hi\")\n+    print(\"hello\")\n\
             @@ def greet2():\n-    pass\n*** End Patch",
        );
        assert_eq!(
            apply_chunks(original, "src/app.py", &chunks).unwrap_err(),
            PatchError::AnchorNotFound {
                path: "src/app.py".into(),
                chunk: 2,
                anchor: "def greet2():".into(),
                after_line: 12,
            }
        );
        assert_eq!(
            apply_chunks(original, "src/app.py", &chunks).unwrap_err().to_string(),
            "Update File src/app.py, chunk 2 (@@ def greet2():): the line \"def greet2():\" was not found after \
             line 12. The text after \"@@\" must be a whole line of the file; read the file again and copy that \
             line exactly"
        );
        assert_eq!(
            apply("a\n", "@@\n-b\n").unwrap_err().to_string(),
            "Update File f.txt, chunk 1 (@@): its lines were not found in the file; the first of them is \"b\". \
             Read the file again and make the context lines match it exactly"
        );
    }

    #[test]
    fn the_description_and_parameters_fit_the_tool() {
        assert!(DESCRIPTION.len() < 900, "{} characters", DESCRIPTION.len());
        assert_eq!(
            parameters(),
            json!({
                "type": "object",
                "properties": {"input": {"type": "string", "description": "The whole patch, from \"*** Begin Patch\" to \"*** End Patch\"."}},
                "required": ["input"],
                "additionalProperties": false
            })
        );
    }
}
