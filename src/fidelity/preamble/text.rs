//! Text helpers shared by gathering and rendering: clipping by characters and lines, tails of
//! logs, number formats, Markdown code. All are linear in their input and never panic on any
//! UTF-8 text.

use std::fmt::Write as _;

use crate::usage::Usage;

/// Characters a context value, a failure reason or a file name is shortened to.
pub const VALUE_CHARS: usize = 200;
/// Files listed per stage before `(+N more)`.
const MAX_FILES: usize = 20;

pub(super) fn plural<'a>(count: usize, one: &'a str, many: &'a str) -> &'a str {
    if count == 1 {
        one
    } else {
        many
    }
}

/// `842`, `12.4k`.
pub(super) fn fmt_tokens(tokens: u64) -> String {
    if tokens < 1000 {
        tokens.to_string()
    } else {
        let tenths = (tokens + 50) / 100;
        format!("{}.{}k", tenths / 10, tenths % 10)
    }
}

pub(super) fn fmt_usage(usage: &Usage) -> String {
    format!("{} tokens in / {} out", fmt_tokens(usage.input_tokens), fmt_tokens(usage.output_tokens))
}

pub(super) fn fmt_files(files: &[String]) -> String {
    let mut out = String::new();
    for (index, file) in files.iter().take(MAX_FILES).enumerate() {
        if index > 0 {
            out.push_str(", ");
        }
        out.push_str(&clip_line(file, VALUE_CHARS));
    }
    if files.len() > MAX_FILES {
        let _ = write!(out, " (+{} more)", files.len() - MAX_FILES);
    }
    out
}

pub(super) fn fmt_bytes(bytes: u64) -> String {
    const KB: u64 = 1024;
    if bytes < KB {
        format!("{bytes} B")
    } else if bytes < KB * KB {
        format!("{:.1} KB", bytes as f64 / KB as f64)
    } else {
        format!("{:.1} MB", bytes as f64 / (KB * KB) as f64)
    }
}

pub(super) fn fmt_duration(ms: u64) -> String {
    if ms < 1000 {
        format!("{ms} ms")
    } else if ms < 60_000 {
        format!("{:.1}s", ms as f64 / 1000.0)
    } else {
        format!("{}m {}s", ms / 60_000, (ms % 60_000) / 1000)
    }
}

/// The last `n` characters of `text`.
pub(super) fn last_chars(text: &str, n: usize) -> &str {
    match text.char_indices().rev().nth(n.saturating_sub(1)) {
        Some((index, _)) if index > 0 => &text[index..],
        _ => text,
    }
}

/// The last `n` lines of `text` (without a trailing newline).
pub(super) fn tail_lines(text: &str, n: usize) -> &str {
    let text = text.trim_end_matches(['\n', '\r']);
    let mut start = text.len();
    for _ in 0..n {
        match text[..start].rfind('\n') {
            Some(index) => start = index,
            None => return text,
        }
    }
    &text[start + 1..]
}

pub(super) fn last_line(text: &str) -> Option<&str> {
    text.lines().rev().map(str::trim).find(|line| !line.is_empty())
}

/// `text` cut to `max` characters, with `…` when cut.
pub(super) fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((index, _)) => format!("{}…", &text[..index]),
        None => text.to_string(),
    }
}

/// The last `max` characters of `text`, with `…` in front when cut.
pub(super) fn clip_tail(text: &str, max: usize) -> String {
    match text.char_indices().rev().nth(max.saturating_sub(1)) {
        Some((index, _)) if index > 0 => format!("…{}", &text[index..]),
        _ => text.to_string(),
    }
}

/// `text` on one line (whitespace runs become one space), cut to `max` characters with `…`.
pub(super) fn clip_line(text: &str, max: usize) -> String {
    let mut out = String::with_capacity(text.len().min(max * 4 + 4));
    let mut count = 0;
    let mut space = false;
    for ch in text.trim().chars() {
        if ch.is_whitespace() {
            space = true;
            continue;
        }
        if space {
            if count == max {
                out.push('…');
                return out;
            }
            out.push(' ');
            count += 1;
            space = false;
        }
        if count == max {
            out.push('…');
            return out;
        }
        out.push(ch);
        count += 1;
    }
    out
}

pub(super) fn longest_backtick_run(text: &str) -> usize {
    let (mut best, mut run) = (0, 0);
    for byte in text.bytes() {
        if byte == b'`' {
            run += 1;
            best = best.max(run);
        } else {
            run = 0;
        }
    }
    best
}

/// `text` as inline code, with a delimiter longer than any backtick run inside.
pub(super) fn inline_code(text: &str) -> String {
    let ticks = "`".repeat(longest_backtick_run(text) + 1);
    let pad = if text.starts_with('`') || text.ends_with('`') { " " } else { "" };
    format!("{ticks}{pad}{text}{pad}{ticks}")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn small_helpers() {
        assert_eq!(fmt_tokens(999), "999");
        assert_eq!(fmt_tokens(1_000), "1.0k");
        assert_eq!(fmt_tokens(12_449), "12.4k");
        assert_eq!(fmt_tokens(3_150), "3.2k");
        assert_eq!(clip_line("  a \n\n b  c ", 10), "a b c");
        assert_eq!(clip_line("abcdef", 3), "abc…");
        assert_eq!(clip_line("ab cdef", 2), "ab…");
        assert_eq!(clip("héllo", 2), "hé…");
        assert_eq!(clip_tail("héllo", 3), "…llo");
        assert_eq!(tail_lines("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail_lines("a\nb", 5), "a\nb");
        assert_eq!(inline_code("a `b`"), "`` a `b` ``");
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_duration(125_000), "2m 5s");
    }
}
