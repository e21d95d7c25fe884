//! An open buffer: its text as the editor has it, edits applied, and the conversion between
//! fabro's byte offsets and LSP positions (lines and UTF-16 code units).

use std::path::PathBuf;
use std::sync::Arc;

use lsp_types::{Position, Range, TextDocumentContentChangeEvent, Url};

use super::analysis::Analysis;
use crate::source::Span;
use crate::syntax::{Edit, SyntaxTree};

/// One open workflow file.
#[derive(Debug)]
pub struct Document {
    pub uri: Url,
    /// Where the buffer's file is (or would be): prompt files and child workflows resolve from it.
    pub path: PathBuf,
    pub version: i32,
    pub text: String,
    lines: Vec<usize>,
    /// The analysis of the current text; `None` while an edit waits for the debounce.
    pub analysis: Option<Arc<Analysis>>,
    /// The last analysis that loaded a workflow: what completion knows of the nodes while the
    /// text being typed does not parse.
    pub last_loaded: Option<Arc<Analysis>>,
    /// The tree the last analysis parsed, and the region of the text it does not show (edited
    /// since, or blanked by the recovery from a syntax error): what the next analysis parses
    /// again instead of the whole text.
    pub parsed: Option<(SyntaxTree<'static>, Option<Edit>)>,
    /// The files the last analysis read besides the buffer (prompt files, child workflows, the
    /// settings layers, there or not): a change to one is a reason to analyse it again.
    pub reads: Vec<PathBuf>,
}

impl Document {
    pub fn new(uri: Url, version: i32, text: String) -> Self {
        let path = path_of(&uri);
        let lines = line_starts(&text);
        Document {
            uri,
            path,
            version,
            text,
            lines,
            analysis: None,
            last_loaded: None,
            parsed: None,
            reads: Vec::new(),
        }
    }

    /// Applies the editor's changes in order (whole-text or ranged).
    pub fn apply(&mut self, version: i32, changes: Vec<TextDocumentContentChangeEvent>) {
        for change in changes {
            match change.range {
                None => {
                    self.text = change.text;
                    self.lines = line_starts(&self.text);
                    self.parsed = None;
                }
                Some(range) => {
                    let start = self.offset(range.start);
                    let end = self.offset(range.end).max(start);
                    self.text.replace_range(start..end, &change.text);
                    self.replace_lines(start, end, &change.text);
                    let edit = Edit::replace(start, end, change.text.len());
                    if let Some((_, edited)) = &mut self.parsed {
                        *edited = Some(edited.map_or(edit, |earlier| earlier.then(edit)));
                    }
                }
            }
        }
        self.version = version;
        self.analysis = None;
    }

    /// Updates the line starts after `start..end` was replaced by `inserted` (a keystroke in a
    /// large buffer does not scan it all again).
    fn replace_lines(&mut self, start: usize, end: usize, inserted: &str) {
        // Lines whose newline was in the replaced bytes are gone; those after it move.
        let first_gone = self.lines.partition_point(|&line| line <= start);
        let first_kept = self.lines.partition_point(|&line| line <= end);
        let added = inserted.match_indices('\n').map(|(at, _)| start + at + 1);
        let moved = self.lines[first_kept..].iter().map(|&line| line - end + start + inserted.len());
        let tail: Vec<usize> = added.chain(moved).collect();
        self.lines.truncate(first_gone);
        self.lines.extend(tail);
    }

    /// The byte offset of an LSP position, clamped to the text.
    pub fn offset(&self, position: Position) -> usize {
        let Some(&start) = self.lines.get(position.line as usize) else { return self.text.len() };
        let end = self.lines.get(position.line as usize + 1).copied().unwrap_or(self.text.len());
        let line = &self.text[start..end];
        let mut units = 0u32;
        for (at, c) in line.char_indices() {
            if units >= position.character || c == '\n' {
                return start + at;
            }
            units += c.len_utf16() as u32;
        }
        end
    }

    /// The LSP position of a byte offset (clamped, snapped back to a character boundary).
    pub fn position(&self, offset: usize) -> Position {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line = self.lines.partition_point(|&start| start <= offset).saturating_sub(1);
        let start = self.lines.get(line).copied().unwrap_or(0);
        let character = self.text[start..offset].encode_utf16().count();
        Position::new(line as u32, character as u32)
    }

    pub fn range(&self, span: Span) -> Range {
        Range::new(self.position(span.start), self.position(span.end))
    }
}

fn line_starts(text: &str) -> Vec<usize> {
    std::iter::once(0).chain(text.match_indices('\n').map(|(at, _)| at + 1)).collect()
}

/// The file a URI names; a buffer that is no file (`untitled:`) resolves from the current
/// directory.
pub fn path_of(uri: &Url) -> PathBuf {
    uri.to_file_path().unwrap_or_else(|_| {
        let name =
            uri.path_segments().and_then(|mut segments| segments.next_back()).unwrap_or("untitled.dot");
        std::env::current_dir().unwrap_or_default().join(name)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn line_starts_follow_every_edit() {
        let uri = Url::parse("file:///tmp/w.dot").unwrap();
        let mut document = Document::new(uri, 1, "a\nbc\n\nd\n".to_string());
        let edits = [
            ((0, 1), (1, 1), "x\ny"),
            ((1, 0), (3, 0), ""),
            ((0, 0), (0, 0), "\n\n"),
            ((2, 1), (2, 1), "q\n"),
        ];
        for (version, ((l1, c1), (l2, c2), text)) in edits.into_iter().enumerate() {
            let change = TextDocumentContentChangeEvent {
                range: Some(Range::new(Position::new(l1, c1), Position::new(l2, c2))),
                range_length: None,
                text: text.to_string(),
            };
            document.apply(version as i32 + 2, vec![change]);
            assert_eq!(document.lines, line_starts(&document.text), "{:?}", document.text);
        }
    }

    #[test]
    fn positions_count_utf16_units_and_edits_apply_by_range() {
        let uri = Url::parse("file:///tmp/w.dot").unwrap();
        let mut document = Document::new(uri, 1, "digraph w {\n  a [label=\"é😀x\"]\n}\n".to_string());
        let x = document.text.find('x').unwrap();
        assert_eq!(document.position(x), Position::new(1, 15));
        assert_eq!(document.offset(Position::new(1, 15)), x);
        assert_eq!(document.offset(Position::new(99, 0)), document.text.len());
        assert_eq!(document.offset(Position::new(0, 999)), 11);
        let change = TextDocumentContentChangeEvent {
            range: Some(Range::new(Position::new(1, 2), Position::new(1, 3))),
            range_length: None,
            text: "b".to_string(),
        };
        document.apply(2, vec![change]);
        assert!(document.text.contains("  b [label"));
        assert_eq!(document.lines, line_starts(&document.text));
        assert_eq!(document.path, PathBuf::from("/tmp/w.dot"));
    }
}
