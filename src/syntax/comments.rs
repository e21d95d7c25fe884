//! The comments of a DOT file (`//`, `/* */`, and `#` lines), which the syntax tree leaves out:
//! what a formatter keeps.

use crate::source::Span;

/// Every comment's span, in order: `//` and `#` comments to the end of their line (not the
/// newline), `/* */` comments to their `*/` (or the end of an unclosed one). Quoted strings are
/// skipped, so `"a // b"` holds no comment.
pub fn comments(text: &str) -> Vec<Span> {
    let bytes = text.as_bytes();
    let mut found = Vec::new();
    let mut line_start = true;
    let mut i = 0;
    while i < bytes.len() {
        let start = i;
        match bytes[i] {
            b'"' => {
                i += 1;
                while i < bytes.len() && bytes[i] != b'"' {
                    i += if bytes[i] == b'\\' { 2 } else { 1 };
                }
                i += 1;
                line_start = false;
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'*') => {
                i = text[i + 2..].find("*/").map_or(bytes.len(), |end| i + 2 + end + 2);
                found.push(Span::new(start, i.min(bytes.len())));
                continue;
            }
            b'/' if bytes.get(i + 1) == Some(&b'/') => {
                i = text[i..].find('\n').map_or(bytes.len(), |end| i + end);
                found.push(Span::new(start, i));
                continue;
            }
            b'#' if line_start => {
                i = text[i..].find('\n').map_or(bytes.len(), |end| i + end);
                found.push(Span::new(start, i));
                continue;
            }
            b'\n' => line_start = true,
            b' ' | b'\t' | b'\r' => {}
            _ => line_start = false,
        }
        i += 1;
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn finds_line_block_and_hash_comments_but_not_inside_strings() {
        let text = "# head\ndigraph w { // one\n  a [label=\"x // y /* z\"] /* two\n */\n  #three\n}";
        let spans: Vec<&str> = comments(text).iter().map(|s| &text[s.start..s.end]).collect();
        assert_eq!(spans, ["# head", "// one", "/* two\n */", "#three"]);
        assert!(comments("\"unclosed // no").is_empty());
        assert_eq!(comments("/* open").len(), 1);
    }
}
