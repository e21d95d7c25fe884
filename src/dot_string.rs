//! DOT double-quoted strings: what their escapes decode to. The parser decodes string bodies
//! with [`unescape`]; source positions inside a decoded value are mapped back to the file with
//! [`decoded_escape_len`], so both agree by construction.

/// Decodes the body of a DOT double-quoted string: `\"`, `\\`, `\n`, `\t`, `\r` are escapes and a
/// backslash before a newline continues the line; any other backslash sequence (Graphviz label
/// escapes such as `\l`) is kept as written.
pub fn unescape(body: &str) -> String {
    let mut out = String::with_capacity(body.len());
    let mut chars = body.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('"') => out.push('"'),
            Some('\\') => out.push('\\'),
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some('\n') => {}
            Some(other) => {
                out.push('\\');
                out.push(other);
            }
            None => out.push('\\'),
        }
    }
    out
}

/// A DOT double-quoted string: `"` and `\\` escaped, line breaks as `\n` (and `\r`).
pub fn quote(text: &str) -> String {
    let mut out = String::with_capacity(text.len() + 2);
    out.push('"');
    for c in text.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\r' => out.push_str("\\r"),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// How many bytes the escape `\c` decodes to (see [`unescape`]).
pub fn decoded_escape_len(c: char) -> usize {
    match c {
        '"' | '\\' | 'n' | 't' | 'r' => 1,
        '\n' => 0,
        other => 1 + other.len_utf8(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unescape_handles_dot_escapes_and_keeps_label_escapes() {
        assert_eq!(unescape(r#"a\"b\\c\nd\te"#), "a\"b\\c\nd\te");
        assert_eq!(unescape("line\\\ncontinued"), "linecontinued");
        assert_eq!(unescape(r"left\l"), r"left\l");
        assert_eq!(unescape("trailing\\"), "trailing\\");
    }
}
