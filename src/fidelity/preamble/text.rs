//! Formatting shared by the preamble renderers: numbers, sizes, durations, file lists, Markdown
//! code (excerpts of text are [`crate::excerpt`]'s). All are linear in their input and never
//! panic on any UTF-8 text.

use std::fmt::Write as _;

use crate::excerpt::clip_line;
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
        assert_eq!(inline_code("a `b`"), "`` a `b` ``");
        assert_eq!(fmt_bytes(512), "512 B");
        assert_eq!(fmt_duration(125_000), "2m 5s");
    }
}
