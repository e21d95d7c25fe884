//! Parsing again after an edit, for editors: only the top-level statements an edit touched are
//! parsed again, the others are kept and moved. The result is the tree a whole parse of the new
//! text gives; when that cannot be shown from the edit alone (an edit in the graph's header or at
//! its closing brace, a statement that no longer parses by itself, tokens that might now run
//! together across the edit's bounds), [`reparse`] says so and the caller parses the whole text.

use super::parser::parse_statements;
use super::tree::{Statement, SyntaxTree};

/// A region of a text replaced: the bytes `start..old_end` of the text before are
/// `start..new_end` of the text after; everything else is unchanged (moved by the difference).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Edit {
    pub start: usize,
    pub old_end: usize,
    pub new_end: usize,
}

impl Edit {
    /// `start..old_end` replaced by `new_len` bytes.
    pub fn replace(start: usize, old_end: usize, new_len: usize) -> Edit {
        Edit { start, old_end: old_end.max(start), new_end: start + new_len }
    }

    /// This edit followed by `next` (written in the positions of the text this one made): one
    /// region that covers both.
    pub fn then(self, next: Edit) -> Edit {
        // Past this edit's new end, the texts before and after it differ by a constant shift.
        let end = self.new_end.max(next.old_end);
        Edit {
            start: self.start.min(next.start),
            old_end: self.old_end + (end - self.new_end),
            new_end: end - (next.old_end - next.start) + (next.new_end - next.start),
        }
    }
}

/// Makes `tree`, the tree of the text before `edit`, the tree of `text` by parsing again the
/// top-level statements the edit touched (with the one before it). False (and `tree` unchanged)
/// when a whole parse is needed to know; never a tree a whole parse would not give.
pub fn reparse(tree: &mut SyntaxTree<'static>, text: &str, edit: Edit) -> bool {
    reparse_window(tree, text, edit).is_some()
}

fn reparse_window(tree: &mut SyntaxTree<'static>, text: &str, edit: Edit) -> Option<()> {
    let starts: Vec<usize> = tree.statements.iter().map(Statement::start).collect();
    // The closing brace of the graph, in the text before.
    let close = tree.span.end.checked_sub(1)?;
    // The statement before the edit's start (an edit at a statement's first byte may join it to
    // the one before) through the last statement that starts within the edit.
    let first = starts.partition_point(|&start| start < edit.start).checked_sub(1)?;
    let window_start = starts[first];
    // The window ends at the first statement after the edit that starts a line (or the closing
    // brace, if it does): a `//` or `#` comment the edit opened ends before it, as it would in a
    // whole parse.
    let moved = |old: usize| old - edit.old_end + edit.new_end;
    let starts_line = |old: usize| {
        let before = text.get(..moved(old)).and_then(|text| text.rsplit_once('\n')).map(|(_, line)| line);
        before.is_some_and(|line| line.bytes().all(|byte| matches!(byte, b' ' | b'\t' | b'\r')))
    };
    let mut after = starts.partition_point(|&start| start <= edit.old_end);
    while after < starts.len() && !starts_line(starts[after]) {
        after += 1;
    }
    let old_end = match starts.get(after) {
        Some(&start) => start,
        None if edit.old_end <= close && starts_line(close) => close,
        None => return None,
    };
    let new_end = moved(old_end);
    let window = text.get(window_start..new_end)?;
    // A token just before the window could join the first one in it.
    let before = window_start.checked_sub(1).and_then(|at| text.as_bytes().get(at))?;
    if !(before.is_ascii_whitespace() || matches!(before, b';' | b'{' | b'}' | b']')) {
        return None;
    }
    let reparsed = parse_statements(window).ok()?;
    let reparsed = reparsed.into_iter().map(|mut statement| {
        statement.move_spans(0, window_start);
        statement.into_owned()
    });
    for statement in &mut tree.statements[after..] {
        statement.move_spans(old_end, new_end);
    }
    tree.statements.splice(first..after, reparsed);
    tree.span.end = tree.span.end - old_end + new_end;
    Some(())
}

/// The region in which `after` differs from `before` (their common start and end left out), if
/// they differ.
pub fn changed_region(before: &str, after: &str) -> Option<Edit> {
    if before == after {
        return None;
    }
    let (old, new) = (before.as_bytes(), after.as_bytes());
    let start = old.iter().zip(new).take_while(|(a, b)| a == b).count();
    let room = old.len().min(new.len()) - start;
    let end = old.iter().rev().zip(new.iter().rev()).take(room).take_while(|(a, b)| a == b).count();
    Some(Edit { start, old_end: old.len() - end, new_end: new.len() - end })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::syntax::parse;

    fn edited(text: &str, start: usize, old_end: usize, insert: &str) -> (String, Edit) {
        let mut after = text.to_string();
        after.replace_range(start..old_end, insert);
        (after, Edit::replace(start, old_end, insert.len()))
    }

    fn check(text: &str, start: usize, old_end: usize, insert: &str) -> bool {
        let mut tree = parse(text).expect("the text before parses").into_owned();
        let (after, edit) = edited(text, start, old_end, insert);
        match reparse(&mut tree, &after, edit) {
            true => {
                let whole = parse(&after).map(SyntaxTree::into_owned);
                assert_eq!(Ok(&tree), whole.as_ref(), "edit {start}..{old_end} -> {insert:?} of\n{text}");
                true
            }
            false => {
                assert_eq!(Ok(&tree), parse(text).map(SyntaxTree::into_owned).as_ref(), "left unchanged");
                false
            }
        }
    }

    const TEXT: &str = "digraph w {\n  goal=\"ship it\"\n  start [shape=Mdiamond]\n  a [prompt=\"Plan $goal\", max_retries=2]\n  subgraph cluster_x { b; c [label=\"C\"] }\n  start -> a -> b [label=go]\n  c -> exit; exit [shape=Msquare]\n}\n";

    #[test]
    fn an_edit_inside_a_statement_parses_only_it_and_moves_the_rest() {
        let at = TEXT.find("Plan").unwrap();
        assert!(check(TEXT, at, at, "Carefully "));
        let at = TEXT.find("max_retries=2").unwrap() + 12;
        assert!(check(TEXT, at, at + 1, "17"));
        let at = TEXT.find("label=\"C\"").unwrap();
        assert!(check(TEXT, at, at + 9, "shape=box"));
        let at = TEXT.find("exit;").unwrap();
        assert!(check(TEXT, at, at + 4, "done"));
    }

    #[test]
    fn edits_that_add_remove_or_join_statements_agree_with_a_whole_parse() {
        let at = TEXT.find("  start ->").unwrap();
        assert!(check(TEXT, at, at, "  d [prompt=\"x\"]\n"));
        let line = TEXT.find("  a [prompt").unwrap();
        let end = TEXT[line..].find('\n').unwrap() + line + 1;
        assert!(check(TEXT, line, end, ""));
        // `a` followed by `"b"` with nothing between is two statements; `ab` is one id.
        let text = "digraph w {\n  x; a\"b\"\n  c\n}\n";
        let at = text.find("\"b\"").unwrap();
        assert!(check(text, at, at + 3, "b"));
        let at = text.find("c\n").unwrap();
        assert!(!check(text, at, at + 1, "d"), "the window would start at `\"b\"`, joined to `a`");
        // A comment the edit opens runs to the end of its line, past the next statement.
        let at = TEXT.find("c -> exit").unwrap();
        assert!(check(TEXT, at, at + 1, "#"));
        assert!(check(TEXT, at + 1, at + 1, "//"));
        // An unclosed string swallows what follows: only a whole parse can say where it ends.
        let at = TEXT.find("Plan").unwrap();
        assert!(!check(TEXT, at, at, "\""));
        // The header and the closing brace are the whole parse's.
        assert!(!check(TEXT, 8, 9, "v"));
        let close = TEXT.rfind('}').unwrap();
        assert!(!check(TEXT, close, close + 1, ""));
    }

    #[test]
    fn the_changed_region_leaves_out_what_is_common() {
        assert_eq!(changed_region("abcdef", "abXYef"), Some(Edit { start: 2, old_end: 4, new_end: 4 }));
        assert_eq!(changed_region("abc", "abc\n}\n"), Some(Edit { start: 3, old_end: 3, new_end: 6 }));
        assert_eq!(changed_region("aaa", "aaaa"), Some(Edit { start: 3, old_end: 3, new_end: 4 }));
        assert_eq!(changed_region("same", "same"), None);
    }

    #[test]
    fn edits_compose_into_one_region() {
        let text = "0123456789";
        let first = Edit::replace(2, 4, 5); // "01" + 5 bytes + "456789": 13 bytes
        let second = Edit::replace(10, 12, 0); // removes 2 bytes of what was "789"
        let both = first.then(second);
        assert_eq!(both, Edit { start: 2, old_end: 9, new_end: 10 });
        assert_eq!(text.len() - (both.old_end - both.start) + (both.new_end - both.start), 11);
        let inside = Edit::replace(3, 4, 0);
        assert_eq!(first.then(inside), Edit { start: 2, old_end: 4, new_end: 6 });
        let before = Edit::replace(0, 1, 0);
        assert_eq!(first.then(before), Edit { start: 0, old_end: 4, new_end: 6 });
    }

    /// A small deterministic generator (xorshift): the same edits at every run.
    fn numbers(mut seed: u64) -> impl FnMut(usize) -> usize {
        move |bound: usize| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            (seed % bound.max(1) as u64) as usize
        }
    }

    /// Keystrokes at random places of the shipped workflows (comments, subgraphs, multi-line
    /// attribute lists), each compared with a whole parse.
    #[test]
    fn keystrokes_in_the_shipped_workflows_give_the_tree_of_a_whole_parse() {
        let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("workflows");
        let mut next = numbers(0x9e37_79b9_7f4a_7c15);
        let mut reparsed = 0;
        for entry in std::fs::read_dir(dir).unwrap() {
            let path = entry.unwrap().path();
            if path.extension().is_none_or(|extension| extension != "dot") {
                continue;
            }
            let text = std::fs::read_to_string(&path).unwrap();
            for _ in 0..60 {
                let mut start = next(text.len());
                while !text.is_char_boundary(start) {
                    start -= 1;
                }
                let insert = ["x", " ", "\n", "_", "1", ""][next(6)];
                let end = if insert.is_empty() { (start + 1).min(text.len()) } else { start };
                if !text.is_char_boundary(end) {
                    continue;
                }
                reparsed += usize::from(check(&text, start, end, insert));
            }
        }
        assert!(reparsed > 200, "{reparsed} keystrokes parsed again in part");
    }

    /// Random edits of workflow-like text, each compared with a whole parse of its result.
    #[test]
    fn random_edits_give_the_tree_of_a_whole_parse() {
        let pieces = [
            "x",
            "\"",
            ";",
            "[",
            "]",
            "->",
            " ",
            "\n",
            "=",
            "#",
            "/*",
            "*/",
            "//",
            "{",
            "}",
            ",",
            "a -> b",
            "n [label=\"z\"]\n",
            "subgraph s { q }",
            "node [shape=box]",
            "é",
        ];
        let mut next = numbers(0x2545_f491_4f6c_dd1d);
        let (mut reparsed, mut whole) = (0, 0);
        for _ in 0..1500 {
            let mut text = TEXT.to_string();
            for _ in 0..1 + next(3) {
                let mut start = next(text.len());
                while !text.is_char_boundary(start) {
                    start -= 1;
                }
                let mut end = (start + next(12)).min(text.len());
                while !text.is_char_boundary(end) {
                    end -= 1;
                }
                let insert = if next(3) == 0 { "" } else { pieces[next(pieces.len())] };
                if parse(&text).is_err() {
                    break;
                }
                if check(&text, start, end, insert) {
                    reparsed += 1;
                } else {
                    whole += 1;
                }
                text.replace_range(start..end, insert);
            }
        }
        assert!(reparsed > 300 && whole > 300, "reparsed {reparsed}, whole {whole}");
    }
}
