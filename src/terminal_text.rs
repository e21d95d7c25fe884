//! Text that others wrote (a model's `remember` entries, event fields, a stage's output) made safe
//! to print: a terminal acts on control characters (ESC starts sequences that recolour, move the
//! cursor, retitle the window or rewrite the clipboard), so they are printed as escapes instead.
//!
//! Escaped whether or not the output is a terminal: the same text is often piped to a pager or
//! a CI log that a terminal shows later, and a reader of a file gains nothing from a raw ESC.
//! Commands that print data (`--json`) leave it to JSON's own escaping.

use std::borrow::Cow;

/// `text` with its control characters escaped: C0 (but newline and tab, which layouts use) and
/// DEL as `\xNN`, C1 (U+0080 to U+009F) as `\uNNNN`; everything else as it is.
pub fn escape_controls(text: &str) -> Cow<'_, str> {
    let needs = |c: char| (c.is_control() && c != '\n' && c != '\t') || c == '\u{7f}';
    if !text.chars().any(needs) {
        return Cow::Borrowed(text);
    }
    let mut out = String::with_capacity(text.len() + 8);
    for c in text.chars() {
        match c {
            c if !needs(c) => out.push(c),
            c if (c as u32) < 0x80 => out.push_str(&format!("\\x{:02x}", c as u32)),
            c => out.push_str(&format!("\\u{:04x}", c as u32)),
        }
    }
    Cow::Owned(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_characters_are_escaped_and_newlines_and_tabs_kept() {
        assert_eq!(escape_controls("plain\ttext\n"), "plain\ttext\n");
        assert_eq!(
            escape_controls("\u{1b}[31mred\u{7}\r\u{7f}\u{9b}2J"),
            "\\x1b[31mred\\x07\\x0d\\x7f\\u009b2J"
        );
        assert_eq!(escape_controls("ünïcode ✓"), "ünïcode ✓");
    }
}
