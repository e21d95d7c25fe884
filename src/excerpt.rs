//! Bounded excerpts of text: the first or last characters or lines, one line of it, each cut at
//! a character boundary with `…` where something was left out.

/// The last `n` characters of `text`.
pub fn last_chars(text: &str, n: usize) -> &str {
    match text.char_indices().rev().nth(n.saturating_sub(1)) {
        Some((index, _)) if index > 0 => &text[index..],
        _ => text,
    }
}

/// The last `n` lines of `text` (without a trailing newline).
pub fn tail_lines(text: &str, n: usize) -> &str {
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

/// The last non-empty line of `text`, trimmed.
pub fn last_line(text: &str) -> Option<&str> {
    text.lines().rev().map(str::trim).find(|line| !line.is_empty())
}

/// `text` cut to `max` characters, with `…` when cut.
pub fn clip(text: &str, max: usize) -> String {
    match text.char_indices().nth(max) {
        Some((index, _)) => format!("{}…", &text[..index]),
        None => text.to_string(),
    }
}

/// The last `max` characters of `text`, with `…` in front when cut.
pub fn clip_tail(text: &str, max: usize) -> String {
    match text.char_indices().rev().nth(max.saturating_sub(1)) {
        Some((index, _)) if index > 0 => format!("…{}", &text[index..]),
        _ => text.to_string(),
    }
}

/// `text` on one line (whitespace runs become one space), cut to `max` characters with `…`.
pub fn clip_line(text: &str, max: usize) -> String {
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn excerpts_are_cut_at_characters_with_a_marker() {
        assert_eq!(clip_line("  a \n\n b  c ", 10), "a b c");
        assert_eq!(clip_line("abcdef", 3), "abc…");
        assert_eq!(clip_line("ab cdef", 2), "ab…");
        assert_eq!(clip("héllo", 2), "hé…");
        assert_eq!(clip_tail("héllo", 3), "…llo");
        assert_eq!(tail_lines("a\nb\nc\n", 2), "b\nc");
        assert_eq!(tail_lines("a\nb", 5), "a\nb");
        assert_eq!(last_chars("héllo", 2), "lo");
        assert_eq!(last_line("a\n b \n\n"), Some("b"));
    }
}
