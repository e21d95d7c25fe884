//! Source text and positions: byte spans, 1-based line/column locations, and the mapping from a
//! position inside a quoted DOT string back to the file.
//!
//! Every later stage (graph, validation, conditions, stylesheet) reports positions as byte [`Span`]s
//! into one [`SourceFile`]; only this module turns them into lines and columns.

use std::path::{Path, PathBuf};

/// A half-open byte range `start..end` into a [`SourceFile`]'s text.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, serde::Serialize)]
pub struct Span {
    pub start: usize,
    pub end: usize,
}

impl Span {
    pub fn new(start: usize, end: usize) -> Self {
        Span { start, end }
    }

    /// The empty span at `offset`, for errors that point between characters.
    pub fn at(offset: usize) -> Self {
        Span { start: offset, end: offset }
    }
}

/// A 1-based line and column; the column counts characters, not bytes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize)]
pub struct Location {
    pub line: usize,
    pub column: usize,
}

/// One workflow file's text, with an index of line starts for position lookups.
#[derive(Debug, Clone)]
pub struct SourceFile {
    path: PathBuf,
    text: String,
    line_starts: Vec<usize>,
    /// Whether the text is ASCII, where a column is a byte count: locations in long lines then
    /// cost nothing.
    ascii: bool,
}

impl SourceFile {
    pub fn new(path: impl Into<PathBuf>, text: impl Into<String>) -> Self {
        let text = text.into();
        let line_starts = std::iter::once(0).chain(text.match_indices('\n').map(|(i, _)| i + 1)).collect();
        let ascii = text.is_ascii();
        SourceFile { path: path.into(), text, line_starts, ascii }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    pub fn text(&self) -> &str {
        &self.text
    }

    /// Line and column of a byte offset (clamped to the text, snapped back to a char boundary).
    pub fn location(&self, offset: usize) -> Location {
        let mut offset = offset.min(self.text.len());
        while !self.text.is_char_boundary(offset) {
            offset -= 1;
        }
        let line_index = match self.line_starts.binary_search(&offset) {
            Ok(i) => i,
            Err(i) => i - 1,
        };
        let line_start = self.line_starts[line_index];
        let column =
            if self.ascii { offset - line_start } else { self.text[line_start..offset].chars().count() } + 1;
        Location { line: line_index + 1, column }
    }

    /// The text of a 1-based line, without its line terminator.
    pub fn line_text(&self, line: usize) -> &str {
        let Some(&start) = self.line_starts.get(line.wrapping_sub(1)) else {
            return "";
        };
        let end = self.line_starts.get(line).copied().unwrap_or(self.text.len());
        self.text[start..end].trim_end_matches(['\n', '\r'])
    }

    /// Maps a byte offset inside the *decoded* value of the literal at `literal` back to a byte
    /// offset in the file. Quoted literals (including `"a" + "b"` concatenations) are re-scanned so
    /// escapes (`\"`, `\n`, ...) are accounted for; bare literals map one to one.
    pub fn offset_in_literal(&self, literal: Span, decoded_offset: usize) -> usize {
        let raw = self.text.get(literal.start..literal.end).unwrap_or("");
        if !raw.starts_with('"') {
            return (literal.start + decoded_offset).min(literal.end);
        }
        let mut decoded = 0;
        let mut inside = false;
        let mut last_inside = literal.start;
        let mut chars = raw.char_indices();
        while let Some((i, c)) = chars.next() {
            if c == '"' {
                inside = !inside;
                continue;
            }
            if !inside {
                continue; // whitespace and `+` between concatenated strings
            }
            if decoded >= decoded_offset {
                return literal.start + i;
            }
            last_inside = literal.start + i;
            if c == '\\' {
                if let Some((_, escaped)) = chars.next() {
                    decoded += crate::dot_string::decoded_escape_len(escaped);
                }
            } else {
                decoded += c.len_utf8();
            }
        }
        // The offset is the end of the value: point just after its last character.
        (last_inside + 1).min(literal.end.saturating_sub(1)).max(literal.start)
    }
}

/// The SHA-256 of `bytes` in lower-case hex (a workflow source as the manifest records it, a long
/// context key's file name).
pub fn sha256_hex(bytes: impl AsRef<[u8]>) -> String {
    use sha2::Digest;
    sha2::Sha256::digest(bytes.as_ref()).iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn locations_are_one_based_and_count_characters() {
        let source = SourceFile::new("x.dot", "ab\nçd\n");
        assert_eq!(source.location(0), Location { line: 1, column: 1 });
        assert_eq!(source.location(3), Location { line: 2, column: 1 });
        assert_eq!(source.location(5), Location { line: 2, column: 2 });
        assert_eq!(source.line_text(2), "çd");
        assert_eq!(source.line_text(9), "");
    }

    #[test]
    fn offsets_inside_quoted_literals_skip_escapes() {
        let text = r#"x = "a\"bc""#;
        let source = SourceFile::new("x.dot", text);
        let literal = Span::new(4, text.len());
        // decoded value is `a"bc`; offset 2 is `b`.
        assert_eq!(&text[source.offset_in_literal(literal, 2)..][..1], "b");
    }

    #[test]
    fn offsets_continue_across_concatenated_strings() {
        let text = "x = \"ab\" +\n  \"cd\"";
        let source = SourceFile::new("x.dot", text);
        let literal = Span::new(4, text.len());
        assert_eq!(&text[source.offset_in_literal(literal, 3)..][..1], "d");
        assert_eq!(source.location(source.offset_in_literal(literal, 2)), Location { line: 2, column: 4 });
    }
}
